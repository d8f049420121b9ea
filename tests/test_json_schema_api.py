"""Grammar.from_json_schema and GrammarCompiler.compile_json_schema: the host API around the
JSON Schema front-end (dict, JSON text or Pydantic model; options; the compiler's cache)."""
from __future__ import annotations

import json
import re
import warnings

import pytest

import gxg
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher
from gxg.testing import grammar_accepts
from gxg.tokenizer import TokenizerInfo, VocabType

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.mark.parametrize("schema", [SCHEMA, json.dumps(SCHEMA)])
def test_from_json_schema_accepts_dict_and_text(schema):
    grammar = gxg.Grammar.from_json_schema(schema)
    assert grammar_accepts(grammar, '{"a": 12}')
    assert not grammar_accepts(grammar, '{"a": "12"}')


def test_options_reach_the_front_end():
    compact = gxg.Grammar.from_json_schema(SCHEMA, any_whitespace=False)
    assert grammar_accepts(compact, '{"a": 1}')            # json.dumps's default separators
    assert not grammar_accepts(compact, '{"a":1}')


def test_any_string_spelling_reaches_the_front_end():
    escaped = '{"\\u0061": 12}'                          # the key "a" spelled with an escape
    assert not grammar_accepts(gxg.Grammar.from_json_schema(SCHEMA), escaped)
    assert grammar_accepts(gxg.Grammar.from_json_schema(SCHEMA, any_string_spelling=True), escaped)


def test_compile_json_schema_keys_the_cache_by_any_string_spelling():
    vocab = [b"{", b"}", b'"a"', b'"\\u0061"', b":", b"1", b"</s>"]
    compiler = GrammarCompiler(TokenizerInfo(vocab, VocabType.RAW))
    canonical = compiler.compile_json_schema(SCHEMA)
    every = compiler.compile_json_schema(SCHEMA, any_string_spelling=True)
    assert every is not canonical
    assert compiler.compile_json_schema(SCHEMA, any_string_spelling=False) is canonical
    for compiled, escaped_key_allowed in ((canonical, False), (every, True)):
        for key_token, allowed in ((2, True), (3, escaped_key_allowed)):   # '"a"', '"\\u0061"'
            matcher = GrammarMatcher(compiled)
            assert matcher.accept_token(0)
            assert matcher.accept_token(key_token) is allowed
            if allowed:
                assert all(matcher.accept_token(t) for t in (4, 5, 1)) and matcher.is_completed()


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_any_string_spelling_must_be_a_bool(bad):
    with pytest.raises(gxg.GrammarError, match="any_string_spelling must be True or False"):
        gxg.Grammar.from_json_schema(SCHEMA, any_string_spelling=bad)
    compiler = GrammarCompiler(TokenizerInfo([b"{", b"}", b"</s>"], VocabType.RAW))
    with pytest.raises(gxg.GrammarError, match="any_string_spelling"):
        compiler.compile_json_schema(SCHEMA, any_string_spelling=bad)


def test_compile_json_schema_caches_by_content_and_options():
    info = TokenizerInfo([b"{", b"}", b'"a"', b":", b"1", b" ", b"</s>"], VocabType.RAW)
    compiler = GrammarCompiler(info)
    first = compiler.compile_json_schema(SCHEMA)
    reordered = {"required": ["a"], "properties": {"a": {"type": "integer"}}, "type": "object"}
    assert compiler.compile_json_schema(reordered) is first
    assert compiler.compile_json_schema(json.dumps(SCHEMA)) is not first  # text keys by text
    assert compiler.compile_json_schema(SCHEMA, any_whitespace=False) is not first
    matcher = GrammarMatcher(first)
    assert all(matcher.accept_token(t) for t in (0, 2, 3, 4, 1))
    assert matcher.is_completed()


def test_pydantic_model():
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        name: str
        count: int

    grammar = gxg.Grammar.from_json_schema(Item)
    assert grammar_accepts(grammar, '{"name": "x", "count": 3}')
    assert not grammar_accepts(grammar, '{"name": "x"}')


def test_unsupported_keyword_is_named():
    with pytest.raises(gxg.GrammarError, match="'minContains' at #/properties/tags"):
        gxg.Grammar.from_json_schema({"properties": {"tags": {"contains": {"const": "x"}, "minContains": 2}}})


# ----------------------------------------------------------------------------- hostile input


def nested(keyword: str, depth: int, leaf=None) -> dict:
    """``{keyword: [{keyword: [... leaf ...]}]}``, ``depth`` levels (objects: properties)."""
    schema = leaf if leaf is not None else {"type": "integer"}
    for _ in range(depth):
        if keyword == "properties":
            schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
        elif keyword == "prefixItems":
            schema = {"type": "array", "prefixItems": [schema], "items": False}
        else:
            schema = {keyword: [schema]}
    return schema


def one_of_chain(depth: int, overlapping: bool) -> dict:
    """``oneOf: [<the chain one level down>, b_i]``: with b_i the string "v<i>" (disjoint from
    everything below) or the integers >= i (overlapping the integers below). Complements of
    such chains multiplied with the depth (20 levels took minutes)."""
    schema: dict = {"type": "integer"} if not overlapping else {"type": "string"}
    for i in range(depth):
        other = {"type": "integer", "minimum": i} if overlapping else \
            {"type": "string", "const": f"v{i}"}
        schema = {"oneOf": [schema, other]}
    return schema


def test_a_chain_of_disjoint_oneofs_is_exact():
    """Branches proven apart through the nested oneOfs: no relaxation, the exact language."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # a relaxation warning would fail the test
        grammar = gxg.Grammar.from_json_schema(one_of_chain(60, overlapping=False))
    for text, accepted in (('"v0"', True), ('"v59"', True), ("17", True), ('"v60"', False),
                           ('"w"', False), ("1.5", False)):
        assert grammar_accepts(grammar, text) == accepted, text


ENTRY_POINTS = {
    "Grammar.from_json_schema": gxg.Grammar.from_json_schema,
    "compile_json_schema": lambda schema: GrammarCompiler(
        TokenizerInfo([bytes([c]) for c in range(32, 127)], VocabType.RAW),
        cache_enabled=False).compile_json_schema(schema),
    "compile_json_schema (cached)": lambda schema: GrammarCompiler(
        TokenizerInfo([bytes([c]) for c in range(32, 127)], VocabType.RAW)
    ).compile_json_schema(schema),
}

# (schema, None: compiles / text the GrammarError must contain)
HOSTILE = {
    "true": (True, None),
    "false": (False, "matches nothing"),
    "a list": ([{"type": "integer"}], "got list"),
    "a number": (5, "got int"),
    "None": (None, "got NoneType"),
    "JSON text of a number": ("5", "got int"),
    "not enum 5": ({"not": {"enum": 5}}, "'enum' at #/not must be an array"),
    "oneOf/not enum 5": ({"oneOf": [{"not": {"enum": 5}}]}, "at #/oneOf/0/not"),
    "anyOf an object": ({"anyOf": {"type": "integer"}}, "'anyOf' at # must be an array"),
    "properties a list": ({"type": "object", "properties": [1]},
                          "'properties' at # must be an object"),
    "objects 48 deep": (nested("properties", 48), None),
    "anyOf 500 deep": (nested("anyOf", 500), None),
    "allOf 500 deep": (nested("allOf", 500), None),
    "oneOf 500 deep": (nested("oneOf", 500), None),
    "prefixItems 500 deep": (nested("prefixItems", 500), None),
    "anyOf 30,000 deep": (nested("anyOf", 30_000), "nests too deeply"),
    # type / required values are checked wherever they are (the fuzz campaign found
    # TypeErrors under not, allOf, if and oneOf)
    "not type an object": ({"not": {"type": {"a": 1}}},
                           "'type' at #/not must be a string or an array"),
    "allOf type an object": ({"allOf": [{"type": {"a": 1}}, {"type": "string"}]},
                             "'type' at #/allOf/0 must be"),
    "if type an object": ({"if": {"type": {}}, "then": {}}, "'type' at #/if must be"),
    "oneOf type [{}]": ({"oneOf": [{"type": [{}]}, {"type": "string"}]},
                        "'type' at #/oneOf/0 must be an array of strings, got {}"),
    "required [1]": ({"type": "object", "required": [1]},
                     "'required' at # must be an array of strings"),
    "oneOf 60 deep, disjoint branches": (one_of_chain(60, overlapping=False), None),
    "oneOf 60 deep, overlapping branches": (one_of_chain(60, overlapping=True), None),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("name", list(HOSTILE))
def test_every_entry_point_compiles_or_raises_grammar_error(entry, name):
    """No TypeError, RecursionError or other stray exception from any schema a user can pass:
    the same outcome from every entry point (the compiler's cache key included)."""
    schema, error = HOSTILE[name]
    if error is None:
        ENTRY_POINTS[entry](schema)
    else:
        with pytest.raises(gxg.GrammarError, match=re.escape(error)):
            ENTRY_POINTS[entry](schema)
