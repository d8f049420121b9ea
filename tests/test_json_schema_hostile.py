"""Large JSON Schema shapes (issue 15, item 3): long enums and consts, many required or optional
properties, long minLength and prefixItems, deep chains of disjoint oneOfs compile in time
linear in their size, to the same language.

Specified as tables: each shape, hundreds to thousands of units large, compiled whole with an
empty vocabulary under a generous ``compile_timeout``; the documents each shape must accept and
refuse (walked on the compiled automaton; an accepted one is also valid for ``jsonschema``); the
grammar and automaton growing no faster than the size (deterministic, unlike a clock); and the
count-state limit refusing only counted members. profiling/bench_hostile.py measures the times.
"""
from __future__ import annotations

import json
import warnings
from functools import lru_cache

import jsonschema
import pytest

from gxg.compiler.automaton import build_automaton
from gxg.compiler.passes import grammar_size, prepare
from gxg.compiler.stack_walk import StackWalker
from gxg.grammar import Grammar, GrammarError
from gxg.grammar import json_schema_analysis
from gxg.grammar import json_schema_emission as json_schema  # where MAX_COUNT_STATES lives
from gxg.grammar.json_schema import JsonSchemaRelaxationWarning
from gxg.grammar_compiler import GrammarCompiler
from gxg.tokenizer import TokenizerInfo, VocabType

EMPTY_VOCABULARY = TokenizerInfo([], VocabType.RAW, vocab_size=1)
COMPLIANT = {"strict_mode": False, "any_order": True}
CAP_SECONDS = 20  # generous: each compile below takes well under 2 s on a 2-core VM


def word(i: int) -> str:
    """A distinct 8-letter word per i (no shared suffixes for the minimiser to fold)."""
    x = (i * 2654435761 + 12345) % 26 ** 8
    return "".join(chr(97 + x // 26 ** k % 26) for k in range(8))


def object_of(n: int, required_every: int = 1, **extra) -> dict:
    """n integer properties p0..p<n-1>, every ``required_every``-th one required."""
    names = [f"p{i}" for i in range(n)]
    return {"type": "object", "properties": {name: {"type": "integer"} for name in names},
            "required": names[::required_every], **extra}


def one_of_chain(depth: int) -> dict:
    """``oneOf: [<the chain one level down>, "v<i>"]`` ``depth`` levels deep over the integers:
    every level's branches are disjoint (bench_hostile.py's disjoint chain)."""
    schema: dict = {"type": "integer"}
    for i in range(depth):
        schema = {"oneOf": [schema, {"type": "string", "const": f"v{i}"}]}
    return schema


def members(pairs) -> str:
    return "{" + ",".join(f'"{key}":{value}' for key, value in pairs) + "}"


N = 600  # properties / keys of the object shapes
IN_ORDER = members((f"p{i}", i) for i in range(N))
SWAPPED = members((f"p{i ^ 1}", i) for i in range(N))  # p1 before p0, p3 before p2, ...
LAST_MISSING = members((f"p{i}", i) for i in range(N - 1))
EXTRA_INSIDE = members([("p0", 0), ("zz", '"x"')] + [(f"p{i}", i) for i in range(1, N)])
# every other property required; optional ones moved after the next required one
OPTIONAL_LATE = members([(f"p{i}", i) for i in range(0, N, 2)][:1] +
                        [pair for i in range(2, N, 2) for pair in ((f"p{i}", i),
                                                                  (f"p{i - 1}", i - 1))])
CONST_OBJECT = {f"key{i}": i for i in range(N)}

# name -> (schema, options, [(document, accepted?)])
SHAPES = {
    "enum of 2,000 strings": ({"enum": [word(i) for i in range(2000)]}, {}, [
        (json.dumps(word(0)), True), (json.dumps(word(1999)), True),
        (json.dumps(word(2000)), False), (json.dumps(word(7)[:-1]), False),
        (json.dumps(word(7) + "a"), False), ("7", False)]),
    "enum of 5,000 integers": ({"enum": list(range(0, 35000, 7))}, {}, [
        ("0", True), ("34993", True), ("34993.0", True), ("35000", False), ("8", False),
        ('"7"', False)]),
    "const object of 600 keys": ({"const": CONST_OBJECT}, {}, [
        (json.dumps(CONST_OBJECT), True),
        (json.dumps(CONST_OBJECT, separators=(",", ":")), True),
        (json.dumps({**CONST_OBJECT, "key599": 1}), False),
        (json.dumps({k: v for k, v in CONST_OBJECT.items() if k != "key599"}), False),
        (json.dumps({"key1": 1, **CONST_OBJECT}), False)]),  # schema order only (narrowing)
    "const array of 2,000 items": ({"const": list(range(2000))}, {}, [
        (json.dumps(list(range(2000))), True), (json.dumps(list(range(1999))), False),
        (json.dumps(list(range(2001))), False)]),
    "const string of 20,000 characters": ({"const": "ab" * 10000}, {}, [
        (json.dumps("ab" * 10000), True), (json.dumps("ab" * 9999 + "a"), False),
        (json.dumps("ab" * 10000 + "a"), False)]),
    "600 required properties": (object_of(N), {}, [
        (IN_ORDER, True), (LAST_MISSING, False), (SWAPPED, False), (EXTRA_INSIDE, False),
        (IN_ORDER.replace('"p5":5', '"p5":"5"'), False)]),
    "600 required properties, compliant": (object_of(N), COMPLIANT, [
        (IN_ORDER, True), (EXTRA_INSIDE, True), (LAST_MISSING, False), (SWAPPED, False),
        (IN_ORDER.replace('"p5":5', '"p5":"5"'), False)]),
    "600 required properties, closed, compliant": (
        object_of(N, additionalProperties=False), COMPLIANT, [
            (IN_ORDER, True), (EXTRA_INSIDE, False), (LAST_MISSING, False)]),
    "300 of 600 properties required, compliant": (object_of(N, 2), COMPLIANT, [
        (IN_ORDER, True), (OPTIONAL_LATE, True), (EXTRA_INSIDE, True),
        (members((f"p{i}", i) for i in range(0, N, 2)), True),    # no optional one
        (members((f"p{i}", i) for i in range(1, N)), False),      # p0 missing
        (members([("p2", 2), ("p0", 0)] + [(f"p{i}", i) for i in range(3, N)]), False)]),
    "minLength 600": ({"type": "string", "minLength": 600}, {}, [
        (json.dumps("x" * 600), True), (json.dumps("é" * 600), True),
        (json.dumps("x" * 599), False)]),
    "600 prefixItems": ({"type": "array", "prefixItems": [{"type": "integer"}] * 600,
                         "items": False}, {}, [
        (json.dumps([0] * 600), True), (json.dumps([0] * 599), True),
        (json.dumps([0] * 601), False), (json.dumps(["a"] + [0] * 599), False)]),
    "oneOf chain 300 levels deep": (one_of_chain(300), {}, [
        ('"v0"', True), ('"v299"', True), ("-12", True), ('"v300"', False), ('"v"', False),
        ("1.5", False)]),
}


@lru_cache(maxsize=None)
def compiled(name: str):
    """The whole compile, with an empty vocabulary (no vocabulary walk: what is left is the
    front end, the passes, the automaton and the mask cache's per-node work), once per shape;
    exactly (a relaxation, e.g. a oneOf compiled as anyOf, is an error here)."""
    schema, options, _ = SHAPES[name]
    compiler = GrammarCompiler(EMPTY_VOCABULARY, cache_enabled=False,
                               compile_timeout=CAP_SECONDS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JsonSchemaRelaxationWarning)
        return compiler.compile_json_schema(schema, **options)


def accepted(automaton, document: str) -> bool:
    walker = StackWalker(automaton)
    config = walker.walk(walker.initial((int(automaton.rule_start[automaton.root_rule]),)),
                         document.encode())
    return StackWalker.can_end(config)


@pytest.mark.parametrize("name", SHAPES)
def test_large_shape_compiles_within_the_budget(name):
    assert compiled(name).automaton.num_nodes > 0  # else CompileTimeoutError


@pytest.mark.parametrize("name, document, expected",
                         [(name, document, expected) for name, (_, _, table) in SHAPES.items()
                          for document, expected in table],
                         ids=lambda value: value[:40] if isinstance(value, str) else None)
def test_large_shape_language(name, document, expected):
    assert accepted(compiled(name).automaton, document) is expected
    if expected:  # whatever is accepted is valid
        jsonschema.Draft202012Validator(SHAPES[name][0]).validate(json.loads(document))


# name -> schema of size n, options
GROWING = {
    "enum strings": (lambda n: {"enum": [word(i) for i in range(n)]}, {}),
    "const object": (lambda n: {"const": {f"key{i}": i for i in range(n)}}, {}),
    "required": (object_of, {}),
    "required, compliant": (object_of, COMPLIANT),
    "half required, compliant": (lambda n: object_of(n, 2), COMPLIANT),
    "optional, compliant": (lambda n: {**object_of(n), "required": []}, COMPLIANT),
    "prefixItems": (lambda n: {"type": "array", "prefixItems": [{"type": "integer"}] * n}, {}),
}


@pytest.mark.parametrize("name", GROWING)
def test_grammar_and_automaton_grow_linearly(name):
    """Twice the size, at most about twice the grammar and automaton (one alternative per
    optional member in every state of an any-order object was quadratic)."""
    build, options = GROWING[name]
    sizes = []
    for n in (100, 200):
        grammar = Grammar.from_json_schema(build(n), **options)
        sizes.append((grammar_size(grammar)[1], build_automaton(prepare(grammar)).num_nodes))
    (ir_small, nodes_small), (ir_large, nodes_large) = sizes
    assert ir_large <= 2.2 * ir_small
    assert nodes_large <= 2.2 * nodes_small


@pytest.mark.parametrize("options", [{}, COMPLIANT], ids=["default", "compliant"])
def test_count_state_limit_applies_only_to_counted_members(options, monkeypatch):
    """Without minProperties/maxProperties the member chain is linear and never refused, however
    many members; with a count, members times count still is (MAX_COUNT_STATES)."""
    monkeypatch.setattr(json_schema, "MAX_COUNT_STATES", 64)
    grammar = Grammar.from_json_schema(object_of(100), **options)
    assert accepted(build_automaton(prepare(grammar)), members((f"p{i}", i) for i in range(100)))
    with pytest.raises(GrammarError, match="minProperties"):
        Grammar.from_json_schema(object_of(100, 2, minProperties=60), **options)


def overlapping_one_of_nest(depth: int) -> dict:
    """``oneOf: [<one level down>, null]`` ``depth`` levels deep over the strings (the fuzz
    campaign's "oneOf nested N deep"): null satisfies every other level's inner branch, so the
    branches are not disjoint and their complements hold every level below."""
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"oneOf": [schema, {"type": "null"}]}
    return schema


def converter_work(schema, monkeypatch) -> int:
    """Normalisations and disjointness checks the converter makes for ``schema`` (work, not
    time: deterministic)."""
    count = [0]
    for name in ("normal", "_disjoint"):
        original = getattr(json_schema_analysis.SchemaAnalysis, name)

        def counted(self, *args, _original=original, **kwargs):
            count[0] += 1
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(json_schema_analysis.SchemaAnalysis, name, counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JsonSchemaRelaxationWarning)
        Grammar.from_json_schema(schema)
    monkeypatch.undo()
    return count[0]


def test_overlapping_one_of_nest_work_is_bounded(monkeypatch):
    """The complements of one oneOf and of the oneOfs in it share one budget, the disjointness
    checks made while building them included (uncounted, the checks were quadratic in the
    depth: 329,007 of them at depth 100, 38 s at depth 300)."""
    work = {depth: converter_work(overlapping_one_of_nest(depth), monkeypatch)
            for depth in (100, 200)}
    assert work[200] <= 2.2 * work[100], work


@pytest.mark.parametrize("document, expected", [('"a"', True), ("null", True), ("1", False),
                                                ('["a"]', False)])
def test_overlapping_one_of_nest_500_deep_compiles_relaxed(document, expected):
    """Within the budget, as anyOf (warned): a superset of the oneOf's language, as XGrammar
    compiles every oneOf."""
    compiler = GrammarCompiler(EMPTY_VOCABULARY, cache_enabled=False,
                               compile_timeout=CAP_SECONDS)
    with pytest.warns(JsonSchemaRelaxationWarning):
        automaton = compiler.compile_json_schema(overlapping_one_of_nest(500)).automaton
    assert accepted(automaton, document) is expected
