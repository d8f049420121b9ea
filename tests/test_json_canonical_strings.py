"""The strings a schema names — declared keys, keys listed by propertyNames' enum/const, and
enum/const strings, nested ones included — are accepted only in their canonical spelling by
default: XGrammar's, which is ``json.dumps(s, ensure_ascii=False)`` with DEL written ``\\u007f``
(module docstring of json_schema.py). ``any_string_spelling=True`` accepts every JSON spelling.

Specified as tables of (schema, document, accepted by default, accepted with
any_string_spelling) in XGrammar's default mode and in the JSON-Schema-compliant mode, decided
with the reference recognizer (whatever is accepted is also checked valid with ``jsonschema``);
XGrammar 0.2.8 is the oracle for which spelling is canonical.
"""
from __future__ import annotations

import functools
import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gxg.grammar.json_schema import _canonical_spelling, json_schema_to_grammar
from gxg.testing import Recognizer

MODES = {"xgrammar-defaults": {}, "compliant": {"strict_mode": False, "any_order": True}}


@functools.lru_cache(maxsize=None)
def _recognizer(schema_text: str, options: tuple) -> Recognizer:
    return Recognizer(json_schema_to_grammar(schema_text, **dict(options)))


def gxg_accepts(schema, document: str, **options) -> bool:
    return _recognizer(json.dumps(schema), tuple(sorted(options.items()))).accepts(document)


def spellings(schema, canonical: str, *others: str):
    """Rows: ``canonical`` is accepted with and without the option; each of ``others`` spells
    the same document otherwise and is accepted only with any_string_spelling."""
    return [(schema, canonical, True, True)] + [(schema, other, False, True) for other in others]


def with_key(name: str):
    """An object whose one member, ``name``, is required and holds an integer."""
    return {"type": "object", "properties": {name: {"type": "integer"}}, "required": [name]}


NAMED_KEYS = (
    spellings(with_key("sku"), '{"sku":1}',
              '{"s\\u006bu":1}', '{"s\\u006Bu":1}', '{"\\u0073\\u006b\\u0075":1}') +
    spellings(with_key("é"), '{"é":1}', '{"\\u00e9":1}', '{"\\u00E9":1}') +
    spellings(with_key("😀"), '{"😀":1}', '{"\\ud83d\\ude00":1}') +
    spellings(with_key("a/b"), '{"a/b":1}', '{"a\\/b":1}', '{"a\\u002fb":1}') +
    spellings(with_key('q"\\'), '{"q\\"\\\\":1}', '{"q\\u0022\\\\":1}', '{"q\\"\\u005c":1}') +
    spellings(with_key("\x7f\n\x01"), '{"\\u007f\\n\\u0001":1}',
              '{"\x7f\\n\\u0001":1}', '{"\\u007F\\n\\u0001":1}', '{"\\u007f\\u000a\\u0001":1}') +
    # a required name outside 'properties' is declared too
    spellings({"type": "object", "required": ["b/c"]}, '{"b/c":1}', '{"b\\/c":1}') +
    # names that dependentRequired / dependentSchemas bring in
    spellings({"type": "object", "properties": {"a": {"type": "integer"}, "é": {"type": "integer"}},
               "dependentRequired": {"a": ["é"]}}, '{"a":1,"é":2}', '{"a":1,"\\u00e9":2}') +
    spellings({"type": "object", "properties": {"a": {"type": "integer"}},
               "dependentSchemas": {"a": {"properties": {"é": {"const": 2}}, "required": ["é"]}}},
              '{"a":1,"é":2}', '{"a":1,"\\u00e9":2}') +
    # keys that propertyNames lists
    spellings({"type": "object", "propertyNames": {"enum": ["é", "a/b"]}}, '{"é":1,"a/b":2}',
              '{"\\u00e9":1,"a/b":2}', '{"é":1,"a\\/b":2}') +
    spellings({"type": "object", "propertyNames": {"const": "\x7f"}}, '{"\\u007f":1}', '{"\x7f":1}')
)

ENUM_CONST = (
    spellings({"enum": ["a", "b"]}, '"a"', '"\\u0061"') +
    spellings({"enum": ["é"]}, '"é"', '"\\u00e9"', '"\\u00E9"') +
    spellings({"enum": ["😀"]}, '"😀"', '"\\ud83d\\ude00"', '"\\uD83D\\uDE00"') +
    spellings({"enum": ["a/b"]}, '"a/b"', '"a\\/b"') +
    spellings({"const": "\x7f"}, '"\\u007f"', '"\x7f"', '"\\u007F"') +
    spellings({"const": "\b\f\n\r\t"}, '"\\b\\f\\n\\r\\t"',
              '"\\u0008\\f\\n\\r\\t"', '"\\b\\f\\u000a\\r\\t"', '"\\b\\f\\n\\u000D\\t"') +
    spellings({"const": "\x00\x1f"}, '"\\u0000\\u001f"', '"\\u0000\\u001F"') +
    spellings({"const": '"\\'}, '"\\"\\\\"', '"\\u0022\\\\"', '"\\"\\u005C"') +
    spellings({"const": "\u2028\x80"}, '"\u2028\x80"', '"\\u2028\x80"', '"\u2028\\u0080"') +
    spellings({"type": "string", "enum": ["é", 1], "maxLength": 1}, '"é"', '"\\u00e9"') +
    # strings inside array and object constants, keys included
    spellings({"const": ["x/y", "é"]}, '["x/y","é"]', '["x\\/y","é"]', '["x/y","\\u00e9"]') +
    spellings({"const": {"k/é": "v\x7f"}}, '{"k/é":"v\\u007f"}',
              '{"k\\/é":"v\\u007f"}', '{"k/\\u00e9":"v\\u007f"}', '{"k/é":"v\x7f"}') +
    spellings({"enum": [[{"é": ["/"]}], 0]}, '[{"é":["/"]}]', '[{"\\u00e9":["/"]}]', '[{"é":["\\/"]}]')
)

UNNAMED_AND_UNSPELLABLE = [
    # strings the schema does not name keep every spelling
    ({"type": "string"}, '"\\u00e9\\/"', True, True),
    ({"type": "string", "pattern": "^é/$"}, '"\\u00E9\\/"', True, True),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, '{"\\u00e9":1}', True, True),
    # an excluded value is excluded in every spelling
    ({"type": "string", "not": {"enum": ["é"]}}, '"\\u00e9"', False, False),
    ({"type": "string", "not": {"enum": ["é"]}}, '"e"', True, True),
    # an escaped spelling of a declared key is that key, never an additional property
    ({"type": "object", "properties": {"é": {"type": "integer"}},
      "additionalProperties": {"type": "string"}}, '{"\\u00e9":"x"}', False, False),
    ({"type": "object", "properties": {"é": {"type": "integer"}},
      "additionalProperties": {"type": "string"}}, '{"\\u00e9":1}', False, True),
    # a lone surrogate has no canonical spelling (XGrammar refuses the schema): left out
    ({"enum": ["\ud800", "a"]}, '"\\ud800"', False, False),
    ({"enum": ["\ud800", "a"]}, '"a"', True, True),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("schema, document, by_default, with_any_spelling",
                         NAMED_KEYS + ENUM_CONST + UNNAMED_AND_UNSPELLABLE)
def test_named_strings_are_spelled_canonically_unless_any_string_spelling(
        mode, schema, document, by_default, with_any_spelling):
    options = MODES[mode]
    assert gxg_accepts(schema, document, **options) is by_default, (schema, document)
    assert gxg_accepts(schema, document, any_string_spelling=True, **options) is with_any_spelling
    if by_default or with_any_spelling:  # the contract's safety half, independently
        jsonschema.Draft202012Validator(schema).validate(json.loads(document))


# ----------------------------------------------------------------------------- XGrammar

TRICKY = ["sku", "é", "😀", "a/b", 'q"\\', "\x7f", "\x00\x01\x1f\b\f\n\r\t", "\u2028\x80\uffff"]
CONTEXTS = {  # name: (schema naming s, the document whose strings are all s spelled as `text`)
    "const": (lambda s: {"const": s}, lambda text: text),
    "enum": (lambda s: {"enum": [s, "other"]}, lambda text: text),
    "key": (with_key, lambda text: "{" + text + ":1}"),
    "nested const": (lambda s: {"const": [{s: s}]}, lambda text: "[{" + text + ":" + text + "}]"),
    "propertyNames": (lambda s: {"type": "object", "propertyNames": {"enum": [s]}},
                      lambda text: "{" + text + ":1}"),
}


def candidate_spellings(s: str) -> list:
    """JSON spellings of ``s``: the canonical one and the ones a model could try instead."""
    every_escaped = "".join(f"\\u{unit:04x}" for unit in _utf16_units(s))
    canonical = _canonical_spelling(s)
    return list(dict.fromkeys([
        canonical, json.dumps(s), json.dumps(s, ensure_ascii=False),
        '"' + every_escaped + '"', '"' + every_escaped.upper().replace("\\U", "\\u") + '"',
        canonical.replace("/", "\\/")]))


def _utf16_units(s: str) -> list:
    data = s.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("s", TRICKY, ids=ascii)
def test_the_canonical_spelling_is_the_one_xgrammar_accepts(context, s):
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string
    make_schema, make_document = CONTEXTS[context]
    schema = make_schema(s)
    theirs = xgr.Grammar.from_json_schema(json.dumps(schema))
    for spelling in candidate_spellings(s):
        document = make_document(spelling)
        assert json.loads(document) == json.loads(make_document(json.dumps(s)))  # same value
        expected = spelling == _canonical_spelling(s)
        assert _is_grammar_accept_string(theirs, document) is expected, document
        assert gxg_accepts(schema, document) is expected, document
        assert gxg_accepts(schema, document, any_string_spelling=True), document


# ----------------------------------------------------------------------------- properties

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)


@given(_TEXT)
def test_canonical_spelling_is_json_dumps_without_ascii_escapes_but_for_del(s):
    spelling = _canonical_spelling(s)
    assert spelling == json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")
    assert json.loads(spelling) == s


@settings(max_examples=40, deadline=None)
@given(_TEXT)
def test_every_context_accepts_exactly_the_canonical_spelling(s):
    # propertyNames keys are spelled unit by unit (a key automaton), constants as one literal:
    # both must give the same one spelling.
    for make_schema, make_document in CONTEXTS.values():
        schema = make_schema(s)
        for spelling in candidate_spellings(s):
            expected = spelling == _canonical_spelling(s)
            assert gxg_accepts(schema, make_document(spelling)) is expected, (schema, spelling)


@pytest.mark.parametrize("s", ["\ud800", "a\udfff"], ids=ascii)
def test_a_lone_surrogate_has_no_canonical_spelling(s):
    assert _canonical_spelling(s) is None
