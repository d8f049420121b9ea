"""JSON Schema keywords added for real-world coverage: pattern, format, numeric bounds,
multipleOf, not, if/then/else, dependencies, min/maxProperties, patternProperties,
propertyNames, unevaluated*. Specified as tables of (schema, document, valid?) where the
expected answer is ALSO checked against the ``jsonschema`` package (with its format checker), so
every row is both a spec of gxg and a verified fact about JSON Schema; plus hypothesis properties
against the same oracle.
"""
from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gxg.grammar import GrammarError
from gxg.grammar.ir import Literal, iter_subexprs
from gxg.grammar.json_schema import json_schema_to_grammar
from gxg.testing import Recognizer

_CACHE: dict = {}


def recognizer(schema, **options) -> Recognizer:
    key = (json.dumps(schema, sort_keys=True), tuple(sorted(options.items())))
    if key not in _CACHE:
        _CACHE[key] = Recognizer(json_schema_to_grammar(schema, **options))
    return _CACHE[key]


def valid(schema, document: str) -> bool:
    validator = jsonschema.validators.validator_for(schema)
    return validator(schema, format_checker=validator.FORMAT_CHECKER).is_valid(json.loads(document))


def check(schema, document, expected, **options):
    assert valid(schema, document) is expected, ("the table is wrong", schema, document)
    options.setdefault("strict_mode", False)
    options.setdefault("any_order", True)  # the JSON-Schema-compliant mode
    assert recognizer(schema, **options).accepts(document) is expected, (schema, document)


def table(schema, *rows):
    return [(schema, doc, ok) for doc, ok in rows]


PATTERN = (
    table({"type": "string", "pattern": "^[a-z]+$"},
          ('"abc"', True), ('""', False), ('"abC"', False), ('"a\\u0062c"', True)) +
    table({"type": "string", "pattern": "b+"},  # unanchored: contains a match
          ('"abba"', True), ('"b"', True), ('"ac"', False), ('"\\u0062"', True)) +
    # '.' is not a line terminator (gxg excludes ECMAScript's four; Python's re, the oracle
    # here, excludes only \n, so only that row can be checked against it)
    table({"type": "string", "pattern": "^a.c$"},
          ('"abc"', True), ('"a\\nc"', False), ('"a\\"c"', True)) +
    table({"type": "string", "pattern": "^(http)|(https)://"},
          ('"httpx"', True), ('"xx https://"', True), ('"xhttp"', False)) +
    table({"type": "string", "pattern": "^[0-9]{2}$", "minLength": 2},
          ('"12"', True), ('"1"', False), ('"123"', False)) +
    table({"type": "string", "pattern": "a", "maxLength": 3},
          ('"xxa"', True), ('"xxxa"', False), ('"bbb"', False)) +
    table({"allOf": [{"pattern": "a"}, {"pattern": "b"}], "type": "string"},
          ('"ab"', True), ('"ba"', True), ('"aa"', False)) +
    table({"type": "string", "not": {"pattern": "^x"}},
          ('"ax"', True), ('"xa"', False), ('""', True)) +
    table({"type": "string", "pattern": "^é+😀$"},
          ('"éé😀"', True), ('"\\u00e9\\ud83d\\ude00"', True), ('"e😀"', False))
)

NUMBERS = (
    table({"type": "integer", "minimum": 0},
          ("0", True), ("17", True), ("-1", False)) +
    table({"type": "integer", "minimum": 1, "maximum": 100},
          ("1", True), ("100", True), ("0", False), ("101", False), ("55", True)) +
    table({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
          ("1", True), ("9", True), ("0", False), ("10", False)) +
    table({"type": "number", "maximum": 1.5},
          ("1.5", True), ("1.4999", True), ("1.5001", False), ("-3", True), ("2", False)) +
    table({"type": "number", "minimum": 0},
          ("0.5", True), ("1e3", True), ("-0.5", False), ("-1e-3", False)) +
    table({"type": "integer", "multipleOf": 3},
          ("0", True), ("9", True), ("-12", True), ("10", False)) +
    table({"type": "number", "multipleOf": 0.01},
          ("1.25", True), ("3", True), ("1.255", False), ("1.250", True)) +
    table({"minimum": 5},  # only numbers are bounded
          ('"x"', True), ("4", False), ("5", True), ("null", True)) +
    table({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer",
           "minimum": 5, "exclusiveMinimum": True},  # draft-04 boolean form
          ("5", False), ("6", True)) +
    table({"type": "integer", "not": {"const": 3}},
          ("2", True), ("3", False), ("4", True))
)

COMBINATORS = (
    table({"not": {"type": "string"}},
          ('"x"', False), ("1", True), ("null", True), ("[]", True)) +
    table({"properties": {"a": {"not": {}}}}, ('{"a":1}', False), ('{"b":1}', True)) +
    table({"not": {"enum": ["a", "b", 1]}},
          ('"a"', False), ('"c"', True), ("1", False), ("1.5", True), ("2", True), ("true", True)) +
    table({"type": "object", "not": {"required": ["a", "b"]}},
          ('{"a":1}', True), ('{"a":1,"b":2}', False), ("{}", True)) +
    table({"type": "string", "not": {"minLength": 3}},
          ('"ab"', True), ('"abc"', False)) +
    table({"not": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
          ('"a"', False), ("null", False), ("1", True)) +
    table({"type": "object",
           "properties": {"kind": {"enum": ["a", "b"]}, "x": {}},
           "if": {"properties": {"kind": {"const": "a"}}},
           "then": {"required": ["x"]},
           "else": {"properties": {"x": False}}},
          ('{"kind":"a","x":1}', True), ('{"kind":"a"}', False), ('{"kind":"b"}', True),
          ('{"kind":"b","x":1}', False), ('{"x":1}', True)) +
    table({"type": "object", "dependentRequired": {"a": ["b"]}},
          ('{"a":1,"b":2}', True), ('{"a":1}', False), ('{"b":2}', True), ("{}", True)) +
    table({"type": "object", "dependentSchemas": {"a": {"properties": {"b": {"type": "string"}}}}},
          ('{"a":1,"b":"x"}', True), ('{"a":1,"b":2}', False), ('{"b":2}', True)) +
    table({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
           "properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}},
          ('{"a":1,"b":2}', True), ('{"a":1}', False)) +
    table({"allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]},
                     {"anyOf": [{"type": "integer", "minimum": 3}, {"type": "string", "maxLength": 1}]}]},
          ("5", True), ("2", False), ('"a"', True), ('"ab"', False), ("null", False)) +
    table({"allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]},
                     {"anyOf": [{"minimum": 3}, {"maxLength": 1}]}]},  # each keyword: one type
          ("2", True), ('"ab"', True), ("null", False)) +
    table({"oneOf": [{"type": "object", "required": ["a"]}, {"type": "object", "required": ["b"]},
                     {"type": "object", "properties": {"a": {"type": "string"}}}]},  # exact via not
          ('{"b":1}', False), ('{"b":1,"a":1}', False), ('{"a":1}', True), ('{"a":"x"}', False),
          ("{}", True), ('{"b":1,"a":"x"}', False), ("3", False)) +
    table({"allOf": [{"properties": {"a": {}}, "additionalProperties": False},
                     {"properties": {"b": {}}}]},
          ('{"a":1}', True), ('{"b":1}', False), ("{}", True)) +
    table({"allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
                     {"properties": {"b": {"type": "string"}}, "additionalProperties": {"minLength": 2}}]},
          ('{"a":1}', True), ('{"b":"x"}', True), ('{"c":"x"}', False), ('{"c":"xy"}', True),
          ('{"a":"x"}', False), ('{"b":1}', False)) +
    table({"type": "array", "contains": {"type": "integer"}},
          ("[1]", True), ('["a",2,"b"]', True), ('["a"]', False), ("[]", False)) +
    table({"type": "array", "items": {"type": "number"}, "contains": {"minimum": 5}},
          ("[1,7]", True), ("[1,2]", False), ('[7,"x"]', False)) +
    table({"type": "array", "contains": {"type": "string"}, "minItems": 2, "maxItems": 3},
          ('["a",1]', True), ('[1,"a",2]', True), ('["a"]', False), ("[1,2]", False),
          ('["a","b","c","d"]', False), ('["a","b"]', True)) +
    table({"type": "array", "contains": {"type": "string"}, "minItems": 2},
          ('[1,2,3,"a"]', True), ('["a"]', False), ('[1,"a",3]', True), ("[1,2,3]", False)) +
    table({"not": {"type": "array", "items": {"type": "string"}}},  # complement of items
          ('["a",1]', True), ('["a"]', False), ("[]", False), ("3", True)) +
    table({"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "array", "maxItems": 1}]},
          ('["a","b"]', True), ('["a"]', False), ("[1]", True), ("[1,2]", False), ("[]", False)) +
    table({"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False},
          ('{"a":1}', True), ('{"b":1}', False)) +
    table({"type": "object", "allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}],
           "unevaluatedProperties": False},
          ('{"a":1,"b":2}', True), ('{"a":1,"c":3}', False)) +
    table({"type": "array", "prefixItems": [{"type": "integer"}], "unevaluatedItems": False},
          ("[1]", True), ("[1,2]", False))
)

OBJECTS = (
    table({"type": "object", "minProperties": 1}, ("{}", False), ('{"a":1}', True)) +
    table({"type": "object", "properties": {"a": {}, "b": {}}, "maxProperties": 1},
          ('{"a":1}', True), ('{"a":1,"b":2}', False), ("{}", True), ('{"c":1}', True),
          ('{"a":1,"c":1}', False)) +
    table({"type": "object", "properties": {"a": {}}, "required": ["a"], "minProperties": 2},
          ('{"a":1}', False), ('{"a":1,"x":2}', True)) +
    table({"type": "object", "patternProperties": {"^x-": {"type": "integer"}},
           "additionalProperties": False},
          ('{"x-a":1}', True), ('{"x-a":"s"}', False), ('{"y":1}', False), ("{}", True)) +
    table({"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer"}}},
          ('{"ab":1,"C":"x"}', True), ('{"ab":"x"}', False)) +
    table({"type": "object", "properties": {"ab": {"type": "number"}},
           "patternProperties": {"^a": {"type": "integer"}}},
          ('{"ab":1}', True), ('{"ab":1.5}', False), ('{"ax":1.5}', False)) +
    table({"type": "object", "patternProperties": {"a": {"minimum": 0}, "b": {"maximum": 9}}},
          ('{"ab":5}', True), ('{"ab":10}', False), ('{"a":-1}', False), ('{"c":-1}', True)) +
    table({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
          ('{"ab":1}', True), ('{"aB":1}', False), ("{}", True)) +
    table({"type": "object", "propertyNames": {"maxLength": 2}, "properties": {"abc": {}}},
          ('{"ab":1}', True), ('{"abc":1}', False)) +
    table({"type": "object", "propertyNames": {"enum": ["a", "b"]}},
          ('{"a":1,"b":2}', True), ('{"c":1}', False))
)

FORMATS = (
    table({"type": "string", "format": "date"},
          ('"2024-02-29"', True), ('"2023-02-29"', False), ('"2020-01-32"', False)) +
    table({"type": "string", "format": "date-time"},
          ('"2022-01-01T12:00:00Z"', True), ('"2022-01-01 12:00:00"', False)) +
    table({"type": "string", "format": "uuid"},
          ('"123e4567-e89b-12d3-a456-426655440000"', True),
          ('"123e4567-e89b-12d3-a456-42665544000"', False)) +
    table({"type": "string", "format": "ipv4"}, ('"10.0.0.1"', True), ('"256.0.0.1"', False)) +
    table({"type": "string", "format": "email"}, ('"a@b.co"', True), ('"invalid-email"', False)) +
    table({"type": "string", "format": "flag-topic"}, ('"anything"', True))  # unknown: annotation
)


TABLES = {"pattern": PATTERN, "numbers": NUMBERS, "combinators": COMBINATORS, "objects": OBJECTS,
          "formats": FORMATS}


@pytest.mark.parametrize("schema,document,expected",
                         [pytest.param(*row, id=f"{name}-{i}") for name, rows in TABLES.items()
                          for i, row in enumerate(rows)])
def test_keyword_table(schema, document, expected):
    check(schema, document, expected)


def test_strict_mode_counts_pattern_properties_as_declared():
    schema = {"type": "object", "patternProperties": {"^x": {}}}
    assert recognizer(schema, strict_mode=True).accepts('{"xa":1}')
    assert not recognizer(schema, strict_mode=True).accepts('{"a":1}')


# ----------------------------------------------------------------------------- properties

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-20, 20),
                     st.sampled_from([0.5, -2.25, 1e3, 10.0]), st.text("abxé", max_size=4))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "x-1", "ab"]), inner, max_size=3)),
    max_leaves=6)

_LEAF_SCHEMAS = st.one_of(
    st.builds(lambda t: {"type": t}, st.sampled_from(["null", "boolean", "integer", "number", "string", "object"])),
    st.builds(lambda m: {"minimum": m}, st.integers(-5, 5)),
    st.builds(lambda m: {"exclusiveMaximum": m}, st.sampled_from([0, 2.5, 10])),
    st.builds(lambda m: {"multipleOf": m}, st.sampled_from([2, 3, 0.5])),
    st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "b$", "x", "^[ab]*$", "é"])),
    st.builds(lambda n: {"minLength": n}, st.integers(0, 3)),
    st.builds(lambda n: {"maxProperties": n}, st.integers(0, 2)),
    st.builds(lambda n: {"minProperties": n}, st.integers(0, 2)),
    st.builds(lambda r: {"required": r}, st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True)),
    st.builds(lambda e: {"enum": e}, st.lists(_SCALARS, min_size=1, max_size=3)),
    st.just({"patternProperties": {"^x": {"type": "integer"}}}),
    st.just({"propertyNames": {"maxLength": 1}}),
    st.just({"dependentRequired": {"a": ["b"]}}),
)
_SCHEMAS = st.recursive(_LEAF_SCHEMAS, lambda inner: st.one_of(
    st.builds(lambda s: {"not": s}, inner),
    st.builds(lambda a, b: {"allOf": [a, b]}, inner, inner),
    st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
    st.builds(lambda a, b, c: {"if": a, "then": b, "else": c}, inner, inner, inner),
    st.builds(lambda s: {"type": "object", "properties": {"a": s}}, inner),
    st.builds(lambda s: {"type": "array", "items": s}, inner),
), max_leaves=4)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=_SCHEMAS, values=st.lists(_VALUES, min_size=1, max_size=5))
def test_accepted_documents_are_valid_and_valid_documents_are_accepted(schema, values):
    """Exactness on random schemas: for compact documents in schema property order, gxg accepts
    iff jsonschema validates (numbers as json.dumps writes them; exponent forms are outside the
    promise when a bound is not 0, and are never generated here except 1000.0)."""
    from gxg.grammar.ir import GrammarError
    try:
        rec = recognizer(schema, strict_mode=False, any_whitespace=False, separators=(",", ":"))
    except GrammarError as exc:
        assert "unsupported" in str(exc) or "matches nothing" in str(exc) or "no finite" in str(exc), exc
        return
    for value in values:
        document = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        accepted = rec.accepts(document)
        if accepted:
            assert valid(schema, document), (schema, document)


# ----------------------------------------------------------------------------- any_order

ANY_ORDER = (
    table({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {}},
           "required": ["a", "b"]},
          ('{"a":1,"b":"x"}', True), ('{"b":"x","a":1}', True), ('{"c":null,"b":"x","a":1}', True),
          ('{"z":1,"b":"x","a":1}', True), ('{"b":"x"}', False), ('{"b":1,"a":1}', False), ("{}", False)) +
    table({"type": "object", "properties": {"a": {}}, "maxProperties": 1},
          ("{}", True), ('{"z":1}', True), ('{"a":1,"z":1}', False), ('{"z":1,"a":1}', False)) +
    table({"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False,
           "minProperties": 2},
          ('{"b":1,"a":1}', True), ('{"b":1}', False))
)


@pytest.mark.parametrize("schema,document,expected", ANY_ORDER)
def test_any_order(schema, document, expected):
    check(schema, document, expected, any_order=True)


def test_any_order_tracks_many_required_members_in_schema_order():
    names = [f"p{i}" for i in range(10)]
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names}, "required": names}
    in_order = "{" + ",".join(f'"{n}":1' for n in names) + "}"
    swapped = "{" + ",".join(f'"{n}":1' for n in names[1:2] + names[:1] + names[2:]) + "}"
    check(schema, in_order, True, any_order=True)
    assert valid(schema, swapped)  # a narrowing: beyond MAX_ANY_ORDER_REQUIRED, relative order kept
    assert not recognizer(schema, strict_mode=False, any_order=True).accepts(swapped)


@pytest.mark.parametrize("names", [["a", "b", "c"], ["name", "age", "email"],
                                   [f"p{i}" for i in range(12)]])
def test_any_order_state_rules_spell_no_key(names):
    """Keys live in the member rules (one per required member, one trie for the optional and
    extra ones): the rules of the states only separate and refer, so they have the same shape
    in every object and the compiler's rule DFA cache serves them."""
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names},
              "required": names[:-1]}
    grammar = json_schema_to_grammar(schema, strict_mode=False, any_order=True)
    states = [rule for rule in grammar.rules if rule.name.startswith("members")]
    assert states
    for rule in states:
        literals = [e.data for e in iter_subexprs(rule.body) if isinstance(e, Literal)]
        assert all(b'"' not in data for data in literals), (rule.name, literals)
    check(schema, "{" + ",".join(f'"{n}":1' for n in names) + "}", True, any_order=True)
    check(schema, "{" + ",".join(f'"{n}":1' for n in names[:-1]) + ',"zz":1}', True,
          any_order=True)


def test_duplicate_required_member_is_rejected_in_any_order():
    schema = {"type": "object", "properties": {"a": {}}, "required": ["a"]}
    assert not recognizer(schema, strict_mode=False, any_order=True).accepts('{"a":1,"a":2}')


@pytest.mark.parametrize("draft, document, expected", [
    ("http://json-schema.org/draft-07/schema#", '{"a":{"x":1}}', True),   # siblings of $ref ignored
    ("https://json-schema.org/draft/2020-12/schema", '{"a":{"x":1}}', False),  # siblings apply
    ("http://json-schema.org/draft-04/schema#", '{"a":"s"}', False),
])
def test_ref_siblings_follow_the_declared_draft(draft, document, expected):
    schema = {"$schema": draft, "definitions": {"obj": {"type": "object"}},
              "properties": {"a": {"$ref": "#/definitions/obj", "additionalProperties": False}}}
    check(schema, document, expected)


@pytest.mark.parametrize("keyword, schema, long_document", [
    ("maxLength", {"type": "string"}, '"' + "x" * 2100 + '"'),
    ("maxItems", {"type": "array"}, "[" + ",".join(["1"] * 2100) + "]"),
    ("maxProperties", {"type": "object"}, "{" + ",".join(f'"k{i}":1' for i in range(2100)) + "}"),
])
def test_upper_bounds_above_the_exact_limit_are_relaxed_with_a_warning(keyword, schema, long_document):
    from gxg.grammar.json_schema import MAX_EXACT_BOUND, JsonSchemaRelaxationWarning
    schema = {"properties": {"s": dict(schema, **{keyword: MAX_EXACT_BOUND + 1})}}
    with pytest.warns(JsonSchemaRelaxationWarning, match=f"{keyword} at #/properties/s is not enforced"):
        grammar = json_schema_to_grammar(schema, strict_mode=False)
    assert Recognizer(grammar).accepts('{"s":' + long_document + "}")  # beyond the bound: relaxed
    check({"type": "string", "maxLength": 70}, '"' + "x" * 71 + '"', False)
    check({"type": "string", "maxLength": 70}, '"' + "x" * 70 + '"', True)


def test_many_required_members_may_follow_the_required_list_order():
    names = [f"p{i}" for i in range(10)]
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names},
              "required": names[::-1]}
    backwards = "{" + ",".join(f'"{n}":1' for n in names[::-1]) + "}"
    forwards = "{" + ",".join(f'"{n}":1' for n in names) + "}"
    check(schema, backwards, True, any_order=True)
    check(schema, forwards, True, any_order=True)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=_SCHEMAS, seed=st.integers(0, 2 ** 32 - 1))
def test_documents_generated_from_the_grammar_are_valid(schema, seed):
    """Random derivations of the compiled grammar are JSON documents the jsonschema package
    validates (with its format checker): the grammar produces nothing the schema forbids."""
    import random
    import warnings as _warnings
    from gxg.grammar.ir import GrammarError
    from gxg.grammar.json_schema import JsonSchemaRelaxationWarning
    from gxg.testing import sample_sentence
    try:
        with _warnings.catch_warnings():
            _warnings.simplefilter("error", JsonSchemaRelaxationWarning)
            grammar = json_schema_to_grammar(schema, strict_mode=False, any_order=True)
    except (GrammarError, JsonSchemaRelaxationWarning) as exc:
        assert isinstance(exc, JsonSchemaRelaxationWarning) or "unsupported" in str(exc) \
            or "matches nothing" in str(exc) or "no finite" in str(exc), exc
        return
    rng = random.Random(seed)
    for _ in range(5):
        document = sample_sentence(grammar, rng).decode("utf-8")
        if not _floats_are_exact_enough(document):
            continue  # the oracle reads 1E-801 as 0.0: the grammar is right, the floats are not
        if _has_duplicate_names(document):
            continue  # documented: duplicate names may satisfy minProperties (module docstring)
        if "\\n" in document and "pattern" in json.dumps(schema):
            continue  # Python's '$' (the oracle's) also matches before a final newline; ECMAScript's not
        assert valid(schema, document), (schema, document)


def _has_duplicate_names(document: str) -> bool:
    found = []

    def pairs(items):
        names = [name for name, _ in items]
        if len(set(names)) != len(names):
            found.append(names)
        return dict(items)

    json.loads(document, object_pairs_hook=pairs)
    return bool(found)


def _floats_are_exact_enough(document: str) -> bool:
    """No number of the document underflows to zero, overflows, has more significant digits
    than a Python float keeps, or is a large number that no double equals."""
    from decimal import Decimal
    import math
    bad = []

    def parse(text: str) -> float:
        value = float(text)
        digits = text.lstrip("-").split("e")[0].split("E")[0].replace(".", "").lstrip("0")
        if math.isinf(value) or (value == 0 and Decimal(text) != 0) or len(digits) > 15:
            bad.append(text)  # beyond a double's 15 exact digits, jsonschema's float math errs
        elif abs(value) >= 2 ** 53 and Decimal(value) != Decimal(text):
            bad.append(text)  # -86943E247 is a multiple of 3; its nearest double is not
        return value

    json.loads(document, parse_float=parse)
    return not bad


# ----------------------------------------------------------------------------- prefixItems counts

PREFIX_TYPES = [("integer", 7), ("string", "s"), ("boolean", True), ("null", None)]


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("rest", [False, True, {"type": "integer"}])
def test_prefix_items_with_count_bounds_match_the_validator(k, rest):
    """Every (minItems, maxItems) around k prefix items and every array length: the grammar
    accepts exactly what jsonschema accepts (the grammar builds what may follow the n-th item
    from the end, one rule per n)."""
    prefix = [{"type": name} for name, _ in PREFIX_TYPES[:k]]
    values = [value for _, value in PREFIX_TYPES[:k]]
    for lo in range(0, k + 3):
        for hi in [None] + list(range(lo, k + 3)):
            schema = {"type": "array", "prefixItems": prefix, "items": rest, "minItems": lo}
            if hi is not None:
                schema["maxItems"] = hi
            docs = [values[:length] + [5] * max(0, length - k) for length in range(k + 4)]
            expected = [jsonschema.Draft202012Validator(schema).is_valid(d) for d in docs]
            if not any(expected) and rest is False:   # no array at all: refused as empty
                with pytest.raises(GrammarError, match="matches nothing"):
                    json_schema_to_grammar(schema, any_whitespace=False)
                continue
            recognizer = Recognizer(json_schema_to_grammar(schema, any_whitespace=False))
            for doc, valid in zip(docs, expected):
                assert recognizer.accepts(json.dumps(doc).encode()) == valid, (schema, doc)


def test_a_thousand_prefix_items_compile():
    """One alternative per item count made this grammar quadratic (4M automaton nodes, refused
    after half a minute); it is linear now."""
    schema = {"type": "array", "prefixItems": [{"type": "integer"}] * 1000, "items": False,
              "minItems": 998}
    recognizer = Recognizer(json_schema_to_grammar(schema, any_whitespace=False))
    assert recognizer.accepts(json.dumps([1] * 999).encode())
    assert not recognizer.accepts(json.dumps([1] * 997).encode())
    assert not recognizer.accepts(json.dumps([1] * 1001).encode())


# Schemas whose merges put patterns and internal regexes on both sides, in both key orders (a
# merge once kept only one side's regexes: the first schema, found by the property test above,
# accepted every string starting with "a").
MERGED_PATTERNS = [
    {"if": {"not": {"pattern": "^a"}}, "then": {"patternProperties": {"^x": {"type": "integer"}}},
     "else": {"allOf": [{"pattern": "b$"}, {"pattern": "^a"}]}},
    {"allOf": [{"pattern": "^a"}, {"allOf": [{"pattern": "b$"}, {"pattern": "c"}]}]},
    {"allOf": [{"allOf": [{"pattern": "b$"}, {"pattern": "c"}]}, {"pattern": "^a"}]},
    {"allOf": [{"not": {"not": {"pattern": "^a"}}}, {"allOf": [{"pattern": "b$"}, {"pattern": "c"}]}]},
    {"allOf": [{"allOf": [{"pattern": "^a"}, {"pattern": "c"}]},
               {"allOf": [{"pattern": "b$"}, {"pattern": "^.{3}$"}]}]},
]
MERGED_DOCUMENTS = ['"a"', '"ab"', '"acb"', '"cab"', '"acc"', '"ac"', '"abc"', '"b"']


@pytest.mark.parametrize("schema", MERGED_PATTERNS, ids=range(len(MERGED_PATTERNS)))
def test_merged_patterns_all_hold(schema):
    grammar = recognizer(schema, strict_mode=False, any_order=True)
    for document in MERGED_DOCUMENTS:
        assert grammar.accepts(document.encode()) == valid(schema, document), (schema, document)
