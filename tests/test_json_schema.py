"""JSON Schema front-end (``gxg.grammar.json_schema``), specified as tables of
(schema, document, accepted?) decided with the reference recognizer, plus hypothesis
properties against the ``jsonschema`` package and a MaskBench sample.

The contract under test (module docstring of json_schema.py): every accepted document is valid
for the schema; documents written in the supported form (schema property order, integers
without fraction, no lone surrogate escapes in counted strings, the strings the schema names in
their canonical spelling) are accepted iff valid; the formatting options follow XGrammar
(reference §3.1); unsupported keywords raise GrammarError naming the keyword and the
subschema's JSON pointer.
"""
from __future__ import annotations

import itertools
import json
import os
import warnings

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gxg.grammar.ir import Grammar, GrammarError
from gxg.grammar.json_schema import JsonSchemaRelaxationWarning, json_schema_to_grammar
from gxg.testing import Recognizer, grammar_accepts

_CACHE: dict = {}


def grammar_for(schema, **options) -> Grammar:
    key = (json.dumps(schema, sort_keys=True), tuple(sorted(options.items())))
    if key not in _CACHE:
        _CACHE[key] = json_schema_to_grammar(schema, **options)
    return _CACHE[key]


def accepts(schema, document: str, **options) -> bool:
    return grammar_accepts(grammar_for(schema, **options), document)


def check_table(schema, document, expected, **options):
    assert accepts(schema, document, **options) is expected, (schema, document, options)
    # The contract's safety half, independently: whatever is accepted is valid.
    if expected:
        jsonschema.Draft202012Validator(schema if isinstance(schema, (dict, bool)) else json.loads(schema)).validate(
            json.loads(document))


# ----------------------------------------------------------------------------- any value, types

TYPE_TABLE = [
    (True, '{"a":[1,null,"x"]}', True),
    (True, '"x"', True),
    (True, "-1.5e3", True),
    ({}, "null", True),
    ({}, " 1", False),            # no whitespace around the root
    ({}, "1 ", False),
    ({}, "nul", False),
    ({"type": "null"}, "null", True),
    ({"type": "null"}, "0", False),
    ({"type": "boolean"}, "true", True),
    ({"type": "boolean"}, "false", True),
    ({"type": "boolean"}, "1", False),
    ({"type": "integer"}, "0", True),
    ({"type": "integer"}, "-17", True),
    ({"type": "integer"}, "017", False),
    ({"type": "integer"}, "1.5", False),
    ({"type": "integer"}, "1e3", False),
    ({"type": "number"}, "1", True),
    ({"type": "number"}, "-0.25E+2", True),
    ({"type": "number"}, "1.", False),
    ({"type": "number"}, ".5", False),
    ({"type": "number"}, "NaN", False),
    ({"type": "string"}, '""', True),
    ({"type": "string"}, '"a\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9"', True),
    ({"type": "string"}, '"\\ud800"', True),          # lone surrogate escape: still a JSON string
    ({"type": "string"}, '"é😀"', True),
    ({"type": "string"}, '"\\x"', False),
    ({"type": "string"}, '"a\nb"', False),             # raw control character
    ({"type": "string"}, '"\x7f"', True),              # DEL is allowed raw
    ({"type": "array"}, "[]", True),
    ({"type": "array"}, '[1, "a", [null]]', True),
    ({"type": "array"}, "{}", False),
    ({"type": "object"}, "{}", True),
    ({"type": "object"}, '{"k": [1, {"x": {}}]}', True),
    ({"type": "object"}, "[]", False),
    ({"type": ["string", "null"]}, "null", True),
    ({"type": ["string", "null"]}, '"s"', True),
    ({"type": ["string", "null"]}, "1", False),
    ({"type": ["integer", "number"]}, "2.5", True),
]


@pytest.mark.parametrize("schema,document,expected", TYPE_TABLE)
def test_types(schema, document, expected):
    check_table(schema, document, expected)


# ----------------------------------------------------------------------------- enum, const

ENUM_TABLE = [
    ({"enum": ["a", "b"]}, '"a"', True),
    ({"enum": ["a", "b"]}, '"c"', False),
    # Escaped spellings of the same value ("\u0061", "\u00E9", a surrogate pair, "a\/b"):
    # canonical only by default, all with any_string_spelling (test_json_canonical_strings.py).
    ({"enum": ["a", "b"]}, '"\\u0061"', False),
    ({"enum": ["a", "b"]}, '"\\u0041"', False),
    ({"enum": ["😀"]}, '"😀"', True),
    ({"enum": [1, None, True]}, "1", True),
    ({"enum": [1, None, True]}, "1.0", True),           # equal number
    ({"enum": [1, None, True]}, "null", True),
    ({"enum": [1, None, True]}, "true", True),
    ({"enum": [1, None, True]}, "false", False),
    ({"enum": [1.5]}, "1.5", True),
    ({"enum": [1.5]}, "1.50", False),                   # narrowed: json.dumps spelling only
    ({"const": {"x": [1, 2]}}, '{"x":[1,2]}', True),
    ({"const": {"x": [1, 2]}}, '{ "x" : [ 1 , 2 ] }', True),   # whitespace between tokens
    ({"const": {"x": [1, 2]}}, '{"x":[1,2,3]}', False),
    ({"const": []}, "[ ]", True),
    ({"const": "a", "enum": ["a", "b"]}, '"a"', True),
    ({"const": "a", "enum": ["a", "b"]}, '"b"', False),
    ({"type": "string", "enum": ["a", 1]}, "1", False),   # filtered by type
    ({"type": "string", "enum": ["a", 1]}, '"a"', True),
    ({"enum": ["ab", "abcd"], "maxLength": 3}, '"abcd"', False),
    ({"enum": ["ab", "abcd"], "maxLength": 3}, '"ab"', True),
]


@pytest.mark.parametrize("schema,document,expected", ENUM_TABLE)
def test_enum_const(schema, document, expected):
    check_table(schema, document, expected)


# ----------------------------------------------------------------------------- strings

STRING_TABLE = [
    ({"type": "string", "minLength": 2}, '"a"', False),
    ({"type": "string", "minLength": 2}, '"ab"', True),
    ({"type": "string", "maxLength": 2}, '"abc"', False),
    ({"type": "string", "maxLength": 2}, '"\\n\\u0041"', True),       # escapes count as one
    ({"type": "string", "maxLength": 1}, '"😀"', True),               # one code point
    ({"type": "string", "maxLength": 1}, '"\\ud83d\\ude00"', True),   # a pair is one code point
    ({"type": "string", "minLength": 2}, '"\\ud83d\\ude00"', False),  # ... never two
    ({"type": "string", "maxLength": 1}, '"\\ud800"', False),         # lone surrogate: narrowed
    ({"type": "string", "minLength": 1, "maxLength": 1}, '""', False),
    ({"type": ["string", "null"], "minLength": 3, "maxLength": 2}, "null", True),
]


@pytest.mark.parametrize("schema,document,expected", STRING_TABLE)
def test_string_length(schema, document, expected):
    check_table(schema, document, expected)


# ----------------------------------------------------------------------------- objects

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "email": {"type": "string"}},
    "required": ["name"],
}
OBJECT_TABLE = [
    (PERSON, '{"name":"a"}', True),
    (PERSON, '{"name":"a","age":3}', True),
    (PERSON, '{"name":"a","email":"e"}', True),         # optional skipped
    (PERSON, '{"name":"a","age":3,"email":"e"}', True),
    (PERSON, '{"age":3}', False),                        # required missing
    (PERSON, '{"age":3,"name":"a"}', False),             # schema order only (documented)
    (PERSON, '{"name":"a","zip":1}', False),             # strict: no additional properties
    (PERSON, '{"name":"a",}', False),
    (PERSON, '{,"name":"a"}', False),
    (PERSON, '{"name":"a","name":"b"}', False),
    (PERSON, '{"\\u006eame":"a"}', False),               # key in another spelling: canonical only
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, "{}", True),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True},
     '{"a":1,"b":[{}]}', True),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "string"}}, '{"b":"x","c":"y"}', True),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "string"}}, '{"b":1}', False),
    # A declared name can never match the additional-property schema, whatever its spelling.
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "string"}}, '{"a":"x"}', False),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "string"}}, '{"\\u0061":"x"}', False),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "string"}}, '{"ab":"x"}', True),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "string"}}, '{"":"x"}', True),
    ({"type": "object", "additionalProperties": False}, "{}", True),
    ({"type": "object", "additionalProperties": False}, '{"a":1}', False),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, '{"a":1,"b":2}', True),
    ({"type": "object", "properties": {"a": False}, "additionalProperties": True}, '{"a":1}', False),
    ({"type": "object", "properties": {"a": False}, "additionalProperties": True}, '{"b":1}', True),
    ({"type": ["object", "null"], "required": ["x"], "additionalProperties": False}, "{}", False),
    ({"type": ["object", "null"], "required": ["x"], "additionalProperties": False}, "null", True),
    # a required name outside 'properties' must be there, valued by additionalProperties
    ({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": {"type": "integer"}},
     '{"a":1,"b":2}', True),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": {"type": "integer"}},
     '{"b":2,"c":3}', True),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": {"type": "integer"}},
     '{"a":1}', False),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": {"type": "integer"}},
     '{"b":"x"}', False),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": {"type": "integer"}},
     '{"b":2,"b":3}', False),
    ({"type": "object", "required": ["b"]}, '{"b":[]}', True),
    ({"type": "object", "required": ["b"]}, '{"c":[]}', False),
    # keywords apply only to their own type
    ({"properties": {"a": {"type": "integer"}}, "required": ["a"]}, '"s"', True),
    ({"properties": {"a": {"type": "integer"}}, "required": ["a"]}, "{}", False),
    ({"properties": {"a/b~c": {"type": "integer"}}, "required": ["a/b~c"]}, '{"a/b~c":1}', True),
]


@pytest.mark.parametrize("schema,document,expected", OBJECT_TABLE)
def test_objects(schema, document, expected):
    check_table(schema, document, expected)


@pytest.mark.parametrize("document,expected", [
    ('{"name":"a","zip":1}', True),
    ('{"name":"a","age":2,"zip":1,"x":[]}', True),
    ('{"zip":1,"name":"a"}', False),  # additional properties only after the declared ones
])
def test_non_strict_additional_properties(document, expected):
    assert accepts(PERSON, document, strict_mode=False) is expected


def test_many_optional_properties_grammar_stays_small():
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(40)}}
    grammar = grammar_for(schema)
    assert len(str(grammar)) < 40_000
    assert grammar_accepts(grammar, '{"p3":1,"p17":2,"p39":3}')
    assert not grammar_accepts(grammar, '{"p17":2,"p3":1}')


# ----------------------------------------------------------------------------- arrays

ARRAY_TABLE = [
    ({"type": "array", "items": {"type": "integer"}}, "[1,2,3]", True),
    ({"type": "array", "items": {"type": "integer"}}, "[1,\"a\"]", False),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, "[1]", False),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, "[1,2]", True),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 2}, "[1,2,3]", False),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 2}, "[]", True),
    ({"type": "array", "maxItems": 0}, "[]", True),
    ({"type": "array", "maxItems": 0}, "[1]", False),
    ({"type": "array", "items": False}, "[]", True),
    ({"type": "array", "items": False}, "[1]", False),
    ({"type": ["array", "null"], "minItems": 3, "maxItems": 2}, "[]", False),
    ({"type": ["array", "null"], "minItems": 3, "maxItems": 2}, "null", True),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}, '[1,"a"]', True),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}, "[1]", True),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}, '[1,"a",2]', False),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}, '["a"]', False),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"}},
     "[1,true,false]", True),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"}},
     "[1,true,2]", False),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"},
      "minItems": 2, "maxItems": 3}, "[1]", False),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"},
      "minItems": 2, "maxItems": 3}, "[1,true,true]", True),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"},
      "minItems": 2, "maxItems": 3}, "[1,true,true,true]", False),
    ({"type": "array", "prefixItems": [{"type": "integer"}, False]}, "[1]", True),
    ({"type": "array", "prefixItems": [{"type": "integer"}, False]}, "[1,2]", False),
]


@pytest.mark.parametrize("schema,document,expected", ARRAY_TABLE)
def test_arrays(schema, document, expected):
    check_table(schema, document, expected)


@pytest.mark.parametrize("document,expected", [("[1]", True), ("[1,2]", True), ("[1,2,\"x\"]", True)])
def test_prefix_items_non_strict_allows_any_rest(document, expected):
    schema = {"type": "array", "prefixItems": [{"type": "integer"}]}
    assert accepts(schema, document, strict_mode=False) is expected
    assert accepts(schema, document) is (document == "[1]")


@pytest.mark.parametrize("document,expected", [
    ('[1,"a"]', True), ('[1,"a",true]', True), ('[1,"a",2]', False)])
def test_draft4_tuple_items_and_additional_items(document, expected):
    schema = {"type": "array", "items": [{"type": "integer"}, {"type": "string"}],
              "additionalItems": {"type": "boolean"}}
    assert accepts(schema, document) is expected


# ----------------------------------------------------------------------------- combinators, refs

TREE = {
    "$defs": {"node": {"type": "object",
                       "properties": {"v": {"type": "integer"},
                                      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["v"]}},
    "$ref": "#/$defs/node",
}
LINKED = {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
          "required": ["next"]}
COMBINATOR_TABLE = [
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, "1", True),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, '"x"', True),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, "null", False),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, '"x"', True),
    ({"oneOf": [{"const": "a"}, {"const": "b"}]}, '"b"', True),
    ({"allOf": [{"type": "integer"}]}, "3", True),
    ({"allOf": [{"type": "integer"}]}, '"3"', False),
    ({"allOf": [{"$ref": "#/definitions/x"}], "description": "d", "definitions": {"x": {"type": "null"}}},
     "null", True),
    (TREE, '{"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]}', True),
    (TREE, '{"v":1,"kids":[{"kids":[]}]}', False),
    (LINKED, '{"next":{"next":{"next":null}}}', True),
    (LINKED, '{"next":{}}', False),
    ({"$ref": "#/definitions/a~1b~0c", "definitions": {"a/b~c": {"type": "boolean"}}}, "true", True),
    ({"$ref": "#/definitions/a%20b", "definitions": {"a b": {"type": "boolean"}}}, "true", True),
]


@pytest.mark.parametrize("schema,document,expected", COMBINATOR_TABLE)
def test_combinators_and_refs(schema, document, expected):
    check_table(schema, document, expected)


MERGE_TABLE = [
    ({"allOf": [{"type": "integer"}, {"type": "number"}]}, "1", True),
    ({"allOf": [{"type": "integer"}, {"type": "number"}]}, "1.5", False),
    ({"allOf": [{"type": ["string", "null"]}, {"type": ["null", "integer"]}]}, "null", True),
    ({"allOf": [{"type": ["string", "null"]}, {"type": ["null", "integer"]}]}, '"a"', False),
    ({"type": ["object", "null"], "allOf": [{"type": ["string", "null"]}]}, '"a"', False),
    ({"type": ["object", "null"], "allOf": [{"type": ["string", "null"]}]}, "null", True),
    ({"type": ["object", "null"], "allOf": [{"type": ["string", "null"]}]}, "{}", False),
    ({"allOf": [{"type": "string", "minLength": 2}, {"maxLength": 3}]}, '"abc"', True),
    ({"allOf": [{"type": "string", "minLength": 2}, {"maxLength": 3}]}, '"a"', False),
    ({"allOf": [{"type": "string", "minLength": 2}, {"maxLength": 3}]}, '"abcd"', False),
    ({"allOf": [{"enum": [1, 2, 3]}, {"enum": [3, 2, 5]}]}, "2", True),
    ({"allOf": [{"enum": [1, 2, 3]}, {"enum": [3, 2, 5]}]}, "1", False),
    ({"allOf": [{"const": 1}, {"enum": [1.0, 2]}]}, "1", True),
    # properties merge per name; required is the union
    ({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}, '{"a":1,"b":"x"}', True),
    ({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}, '{"a":1}', False),
    ({"allOf": [{"properties": {"a": {"type": "number"}}}, {"properties": {"a": {"type": "integer"}}}]},
     '{"a":1.5}', False),
    # additionalProperties of one side may be kept when the other declares no new names
    ({"allOf": [{"properties": {"a": {}, "b": {}}, "additionalProperties": False},
                {"properties": {"a": {"type": "integer"}}, "required": ["a"]}]}, '{"a":1,"b":2}', True),
    ({"allOf": [{"properties": {"a": {}, "b": {}}, "additionalProperties": False},
                {"properties": {"a": {"type": "integer"}}, "required": ["a"]}]}, '{"a":1,"c":2}', False),
    ({"allOf": [{"properties": {"a": {}, "b": {}}, "additionalProperties": False},
                {"properties": {"a": {"type": "integer"}}, "required": ["a"]}]}, '{"a":"x"}', False),
    ({"allOf": [{"type": "array", "items": {"type": "number"}}, {"items": {"type": "integer"}, "maxItems": 2}]},
     "[1,2]", True),
    ({"allOf": [{"type": "array", "items": {"type": "number"}}, {"items": {"type": "integer"}, "maxItems": 2}]},
     "[1.5]", False),
    # $ref with siblings, anyOf / oneOf with siblings (distributed over the branches)
    ({"$defs": {"s": {"type": "object", "properties": {"a": {"type": "integer"}}}},
      "$ref": "#/$defs/s", "required": ["a"]}, "{}", False),
    ({"$defs": {"s": {"type": "object", "properties": {"a": {"type": "integer"}}}},
      "$ref": "#/$defs/s", "required": ["a"]}, '{"a":1}', True),
    ({"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"],
      "anyOf": [{"properties": {"k": {"const": "x"}}}, {"properties": {"k": {"const": "y"}}}]}, '{"k":"y"}', True),
    ({"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"],
      "anyOf": [{"properties": {"k": {"const": "x"}}}, {"properties": {"k": {"const": "y"}}}]}, '{"k":"z"}', False),
    ({"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"],
      "anyOf": [{"properties": {"k": {"const": "x"}}}, {"properties": {"k": {"const": "y"}}}]}, "{}", False),
    ({"type": "string", "oneOf": [{"maxLength": 1}, {"minLength": 3}]}, '"ab"', False),
    ({"type": "string", "oneOf": [{"maxLength": 1}, {"minLength": 3}]}, '"abc"', True),
    ({"type": "integer", "oneOf": [{"type": "string"}, {}]}, "1", True),
    # oneOf of single required names: exactly one of them present (exact, no warning)
    ({"properties": {"a": {}, "b": {}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, '{"a":1}', True),
    ({"properties": {"a": {}, "b": {}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, '{"b":1}', True),
    ({"properties": {"a": {}, "b": {}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, '{"a":1,"b":1}', False),
    ({"properties": {"a": {}, "b": {}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, "{}", False),
    ({"properties": {"a": {}, "b": {}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, "1", False),
    ({"type": ["object", "null"], "oneOf": [{"required": ["a"]}]}, "null", True),
    ({"type": "integer", "oneOf": [{"type": "string"}, {}]}, '"a"', False),
]


@pytest.mark.parametrize("schema,document,expected", MERGE_TABLE)
def test_all_of_and_sibling_merges(schema, document, expected):
    check_table(schema, document, expected)


def test_each_referenced_schema_is_one_rule():
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/p"}, "b": {"$ref": "#/$defs/p"}},
              "$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
    names = grammar_for(schema).rule_names
    assert sum(name.startswith("ref_p") for name in names) == 1


# the complement of multipleOf is not expressible, so exclusivity is not either
OVERLAPPING_ONE_OF = {"oneOf": [{"type": "integer", "multipleOf": 2}, {"type": "integer", "multipleOf": 3}]}


@pytest.mark.parametrize("options", [{}, {"strict_mode": True}, {"strict_mode": False, "coerce_one_of": True}])
def test_overlapping_one_of_warns_and_is_any_of_when_coerced(options):
    with pytest.warns(JsonSchemaRelaxationWarning, match="oneOf at # compiled as anyOf"):
        grammar = json_schema_to_grammar(OVERLAPPING_ONE_OF, **options)
    assert grammar_accepts(grammar, "6")  # valid for both branches: the schema forbids it
    assert grammar_accepts(grammar, "4") and not grammar_accepts(grammar, "5")


@pytest.mark.parametrize("options", [{"strict_mode": False}, {"strict_mode": True, "coerce_one_of": False}])
def test_overlapping_one_of_is_refused_by_name_unless_coerced(options):
    with pytest.raises(GrammarError, match="unsupported keyword 'oneOf' at #: .*coerce_one_of=True"):
        json_schema_to_grammar(OVERLAPPING_ONE_OF, **options)


@pytest.mark.parametrize("document, expected", [
    ("1.5", True), ("-0.25", True), ("2.50", True),
    ("1", False), ("1.0", False), ("0", False),   # integers satisfy both branches
    ('"x"', False),
    ("15e-1", False),  # 1.5, but a non-integer with an exponent: the documented narrowing
])
def test_one_of_integer_or_number_is_exact_through_the_fraction_complement(document, expected):
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error", JsonSchemaRelaxationWarning)
        grammar = json_schema_to_grammar(schema, strict_mode=False)
    assert grammar_accepts(grammar, document) is expected


@pytest.mark.parametrize("schema, document, expected", [
    # "b_i and not b_j" is built from the branches as written, not from the branches merged with
    # the siblings, whose complements (of 'properties' with an integer) were not expressible
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {}},
      "oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]}, '{"a":1}', True),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {}},
      "oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]}, '{"b":1,"c":2}', True),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {}},
      "oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]}, '{"a":1,"b":1,"c":2}', False),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {}},
      "oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]}, '{"a":1,"b":1}', True),
    # the same oneOf met inside an allOf merge
    ({"allOf": [{"properties": {"a": {"type": "integer"}}},
                {"oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]}]}, '{"a":1,"b":1,"c":2}', False),
    ({"allOf": [{"properties": {"a": {"type": "integer"}}},
                {"oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]}]}, '{"b":1,"c":2}', True),
])
def test_one_of_with_siblings_is_exact(schema, document, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error", JsonSchemaRelaxationWarning)
        grammar = json_schema_to_grammar(schema, strict_mode=False, any_order=True)
    assert grammar_accepts(grammar, document) is expected


@pytest.mark.parametrize("schema", [
    {"oneOf": [{"type": "integer"}, {"type": "string"}]},
    {"properties": {"a": {}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
    {"oneOf": [{"enum": ["a", 1]}, {"enum": ["b", 2]}]},
    {"oneOf": [{"type": "object", "properties": {"k": {"const": "a"}}, "required": ["k"]},
               {"type": "object", "properties": {"k": {"const": "b"}, "x": {}}, "required": ["k"]}]},
])
def test_disjoint_one_of_is_exact_without_warning(schema):
    with warnings.catch_warnings():
        warnings.simplefilter("error", JsonSchemaRelaxationWarning)
        json_schema_to_grammar(schema)


def test_annotations_are_ignored():
    schema = {"title": "T", "description": "d", "default": 1, "examples": [1], "$comment": "c",
              "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:x",
              "deprecated": False, "readOnly": True, "writeOnly": False, "x-vendor": {"pattern": 1},
              "type": "integer"}
    assert accepts(schema, "5") and not accepts(schema, '"5"')


# ----------------------------------------------------------------------------- inputs

def test_schema_as_json_string_and_pydantic_model():
    assert accepts('{"type": "integer"}', "4")
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):
        x: int
        label: str = "p"

    grammar = json_schema_to_grammar(Point)
    assert grammar_accepts(grammar, '{"x": 1, "label": "a"}')
    assert grammar_accepts(grammar, '{"x": 1}')
    assert not grammar_accepts(grammar, '{"label": "a"}')


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("schema,message", [
    ({"type": "object", "properties": {"name": {"type": "string", "pattern": "(?=a)"}}},
     "unsupported keyword 'pattern' at #/properties/name"),
    ({"type": "string", "pattern": "a\\1"}, "unsupported keyword 'pattern' at #"),
    ({"type": "string", "pattern": "(^a|b)c"}, "unsupported keyword 'pattern' at #"),
    ({"anyOf": [{"multipleOf": 0}]}, "'multipleOf' at #/anyOf/0"),
    ({"type": "integer", "minimum": "0"}, "'minimum' at #"),
    ({"uniqueItems": "yes"}, "'uniqueItems' at # must be a boolean"),
    ({"properties": {"tags": {"uniqueItems": True}}}, "unsupported keyword 'uniqueItems' at #/properties/tags"),
    ({"contains": {}, "prefixItems": [{}]}, "unsupported keyword 'contains' at # with tuple items"),
    ({"items": {"type": "array", "minContains": 1}}, "'minContains' at #/items"),
    ({"not": {"multipleOf": 2}}, "unsupported keyword 'not' at #/not"),
    ({"not": {"additionalProperties": False}}, "unsupported keyword 'not' at #/not"),
    ({"not": {"not": {"type": "integer"}, "minimum": 1}}, "the complement of 'not' of type integer"),
    ({"not": {"type": "integer", "minimum": 0}, "type": "number", "maximum": 5},
     "the complement of type integer together with"),
    ({"not": {"enum": [[1]]}}, "unsupported keyword 'not' at #/not"),
    ({"if": {"uniqueItems": True}, "then": {}}, "unsupported keyword 'uniqueItems' at #"),
    ({"dependentRequired": {"a": "b"}}, "'dependentRequired' at #/a must be a list"),
    ({"unevaluatedProperties": False, "not": {"required": ["a"]}}, "'unevaluatedProperties' at #"),
    ({"$defs": {"a/b": {"maxContains": 1}}, "$ref": "#/$defs/a~1b"},
     "unsupported keyword 'maxContains' at #/$defs/a~1b"),
    ({"patternProperties": {str(i): {} for i in range(9)}}, "unsupported keyword 'patternProperties'"),
    ({"allOf": [{"properties": {"a": {}}, "additionalProperties": False},
                {"patternProperties": {"b": {}}}]}, "unsupported keyword 'allOf' merging 'additionalProperties'"),
    ({"allOf": [{"additionalProperties": False, "patternProperties": {"a": {}}}, {"additionalProperties": {}}]},
     "merging two 'additionalProperties'"),
    ({"allOf": [{"prefixItems": [{}]}, {"items": {}}]}, "merging two array item lists"),
    ({"allOf": [{"multipleOf": 3}, {"multipleOf": 2}]}, "merging two different 'multipleOf'"),
    ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}, {"type": "object"}]}}, "$ref": "#/$defs/a"},
     "does not terminate"),
    ({"$ref": "other.json#/a"}, "unsupported $ref"),
    ({"$ref": "#/$defs/missing"}, "does not resolve"),
    ({"type": "color"}, "unknown type"),
    (False, "matches nothing"),
    ({"type": "string", "minLength": 3, "maxLength": 2}, "matches nothing"),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 2}, "matches nothing"),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "matches nothing"),
    ({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}, "no finite JSON value"),
    ("{not json", "not valid JSON"),
])
def test_errors_name_the_keyword(schema, message):
    with pytest.raises(GrammarError) as info:
        json_schema_to_grammar(schema)
    assert message in str(info.value)


def test_max_whitespace_cnt_must_be_positive():
    with pytest.raises(GrammarError, match="max_whitespace_cnt"):
        json_schema_to_grammar({}, max_whitespace_cnt=0)


# ----------------------------------------------------------------------------- formatting options

OBJ = {"type": "object", "properties": {"a": {"type": "integer"},
                                        "b": {"type": "array", "items": {"type": "integer"}}},
       "required": ["a", "b"]}
VALUE = {"a": 1, "b": [2, 3]}


@pytest.mark.parametrize("options,document,expected", [
    ({}, '{"a":1,"b":[2,3]}', True),
    ({}, '{ "a" : 1 ,\n\t"b" : [ 2 , 3 ] }', True),
    ({}, ' {"a":1,"b":[2,3]}', False),
    ({"max_whitespace_cnt": 2}, '{"a":  1,"b":[2,3]}', True),
    ({"max_whitespace_cnt": 2}, '{"a":   1,"b":[2,3]}', False),
    ({"separators": (", ", ": ")}, '{"a":1,"b":[2,3]}', False),   # given separators must appear
    ({"separators": (", ", ": ")}, '{"a": 1, "b": [2, 3]}', True),
    ({"any_whitespace": False}, json.dumps(VALUE), True),
    ({"any_whitespace": False}, '{"a":1,"b":[2,3]}', False),
    ({"any_whitespace": False, "separators": (",", ":")}, '{"a":1,"b":[2,3]}', True),
    ({"any_whitespace": False, "indent": 2}, json.dumps(VALUE, indent=2), True),
    ({"any_whitespace": False, "indent": 2}, json.dumps(VALUE, indent=4), False),
    ({"any_whitespace": False, "indent": 2, "separators": (", ", " : ")},
     json.dumps(VALUE, indent=2, separators=(", ", " : ")), True),
    ({"any_whitespace": False, "indent": 0}, json.dumps(VALUE, indent=0), True),
    ({"any_whitespace": False, "indent": "\t"}, json.dumps(VALUE, indent="\t"), True),
])
def test_formatting_options(options, document, expected):
    assert accepts(OBJ, document, **options) is expected


def test_indent_with_empty_containers_and_any_values():
    schema = {"type": "object", "properties": {"e": {"type": "array"}, "o": {}}, "required": ["e", "o"]}
    for value in [{"e": [], "o": {}}, {"e": [[], {"x": [1, {"y": None}]}], "o": [[[]]]}]:
        assert accepts(schema, json.dumps(value, indent=3), any_whitespace=False, indent=3)
        assert not accepts(schema, json.dumps(value), any_whitespace=False, indent=3)


def test_indent_with_recursive_ref():
    value = {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}
    assert accepts(TREE, json.dumps(value, indent=2), any_whitespace=False, indent=2)
    assert not accepts(TREE, json.dumps(value, indent=2).replace("\n      ", "\n    ", 1),
                       any_whitespace=False, indent=2)


# ----------------------------------------------------------------------------- hypothesis

_text = st.text(max_size=6)
_scalar = (st.none() | st.booleans() | st.integers(-10**6, 10**6) | _text
           | st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer()))
_any_json = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(_text, inner, max_size=3), max_leaves=6)

RECORD = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "kind": {"enum": ["a", "b", 1, None]},
    },
    "required": ["name", "age"],
}
TUPLE = {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "minLength": 1}],
         "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4}
UNION = {"anyOf": [{"type": "string", "minLength": 2}, {"type": "integer"}, {"type": "null"},
                   {"type": "array", "items": {"type": ["number", "boolean"]}}]}
MERGED = {
    "allOf": [{"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "string"}},
               "required": ["a"]},
              {"properties": {"a": {"type": "integer"}}}],
    "anyOf": [{"required": ["b"]}, {"properties": {"a": {"enum": [1, 2]}}}],
}
OPEN_MAP = {"type": "object", "properties": {"id": {"type": "integer"}},
            "additionalProperties": {"type": "string"}}


def _record():
    return st.fixed_dictionaries(
        {"name": st.text(max_size=5), "age": st.integers(-10**9, 10**9)},
        optional={"tags": st.lists(_text, max_size=3), "kind": st.sampled_from(["a", "b", 1, None])},
    ).map(lambda d: {k: d[k] for k in RECORD["properties"] if k in d})  # schema order


def _tree(depth=3):
    leaf = st.integers().map(lambda v: {"v": v})
    if depth == 0:
        return leaf
    return leaf | st.tuples(st.integers(), st.lists(_tree(depth - 1), max_size=2)).map(
        lambda t: {"v": t[0], "kids": t[1]})


CASES = {
    "record": (RECORD, {}, _record()),
    "record_open": (RECORD, {"strict_mode": False},
                    _record().map(lambda d: {**d, "extra": [1]})),
    "tuple": (TUPLE, {}, st.tuples(st.integers(), st.text(min_size=1, max_size=3),
                                   st.lists(st.booleans(), max_size=2))
              .map(lambda t: [t[0], t[1], *t[2]]) | st.integers().map(lambda i: [i])),
    "union": (UNION, {}, st.text(min_size=2, max_size=5) | st.integers() | st.none()
              | st.lists(st.booleans() | st.floats(allow_nan=False, allow_infinity=False), max_size=3)),
    "tree": (TREE, {}, _tree()),
    "merged": (MERGED, {}, st.fixed_dictionaries({"a": st.integers(0, 3)}, optional={"b": _text})
               .map(lambda d: {k: d[k] for k in ("a", "b") if k in d})
               .filter(lambda d: jsonschema.Draft202012Validator(MERGED).is_valid(d))),
    "open_map": (OPEN_MAP, {}, st.fixed_dictionaries({}, optional={"id": st.integers()}).flatmap(
        lambda d: st.dictionaries(_text.filter(lambda k: k != "id"), _text, max_size=3)
        .map(lambda extra: {**d, **extra}))),
}
# (options for the grammar, json.dumps keyword arguments producing a document it must accept)
FORMATS = [
    ({}, {"separators": (",", ":")}),
    ({}, {}),
    ({}, {"indent": 2}),
    ({}, {"ensure_ascii": False}),
    ({"any_whitespace": False}, {}),
    ({"any_whitespace": False, "indent": 2}, {"indent": 2}),
    ({"any_whitespace": False, "separators": (",", ":")}, {"separators": (",", ":")}),
]


def _validator(schema):
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_documents_are_accepted_in_every_format(case, data):
    schema, options, strategy = CASES[case]
    value = data.draw(strategy)
    assert _validator(schema).is_valid(value)
    grammar_options, dump_options = data.draw(st.sampled_from(FORMATS))
    document = json.dumps(value, **dump_options)
    assert accepts(schema, document, **options, **grammar_options), document


def _mutate(draw, value, declared):
    """``value`` with one random change somewhere inside it (keys added after the others and
    never a declared name, so a valid result is still in schema order)."""
    kind = draw(st.integers(0, 3))
    if isinstance(value, dict) and value and kind < 3:
        key = draw(st.sampled_from(sorted(value)))
        out = dict(value)
        if kind == 0:
            del out[key]
        elif kind == 1:
            out[key] = _mutate(draw, value[key], declared)
        else:
            out[draw(_text.filter(lambda k: k not in declared))] = draw(_any_json)
        return out
    if isinstance(value, list) and value and kind < 3:
        index = draw(st.integers(0, len(value) - 1))
        out = list(value)
        if kind == 0:
            del out[index]
        elif kind == 1:
            out[index] = _mutate(draw, value[index], declared)
        else:
            out.append(draw(_any_json))
        return out
    return draw(_any_json)


def _declared_names(schema) -> set:
    names: set = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            names.update(node.get("properties", {}) if isinstance(node.get("properties"), dict) else ())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return names


@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_acceptance_agrees_with_jsonschema_on_mutated_documents(case, data):
    schema, options, strategy = CASES[case]
    value = _mutate(data.draw, data.draw(strategy), _declared_names(schema))
    document = json.dumps(value)
    # strict_mode=False: JSON Schema's own defaults, which is what jsonschema decides.
    accepted = accepts(schema, document, **{**options, "strict_mode": False})
    valid = _validator(schema).is_valid(value)
    assert accepted == valid, (document, accepted, valid)


# ----------------------------------------------------------------------------- MaskBench sample

MASKBENCH = "/work/shared/maskbench/data"
MASKBENCH_FILES = 150


@pytest.mark.parametrize("selection", ["first", "spread"])
def test_maskbench_sample_never_accepts_invalid_instances(selection):
    """The first 150 sorted MaskBench files (all BFCL, valid instances only) and a
    deterministic spread (every n-th file, so every source and invalid instances are
    represented). Compliant mode: any_whitespace=True, strict_mode=False, any_order=True."""
    if not os.path.isdir(MASKBENCH):
        pytest.skip("MaskBench data not present")
    names = sorted(os.listdir(MASKBENCH))
    step = max(1, len(names) // MASKBENCH_FILES)
    sample = names[:MASKBENCH_FILES] if selection == "first" else names[::step][:MASKBENCH_FILES]
    converted = valid_accepted = valid_total = invalid_rejected = invalid_total = 0
    accepted_invalid, relaxed_accepted = [], []  # the latter: oneOf compiled as anyOf (warned)
    for name in sample:
        with open(os.path.join(MASKBENCH, name)) as f:
            entry = json.load(f)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                grammar = json_schema_to_grammar(entry["schema"], strict_mode=False, any_order=True)
        except GrammarError as exc:
            # Every refusal names what it cannot do.
            assert "unsupported" in str(exc) or "does not resolve" in str(exc) \
                or "matches nothing" in str(exc) or "no finite" in str(exc), str(exc)
            continue
        relaxed = any(issubclass(w.category, JsonSchemaRelaxationWarning) for w in caught)
        converted += 1
        recognizer = Recognizer(grammar)
        for test in entry["tests"]:
            ok = recognizer.accepts(json.dumps(test["data"]))
            if test["valid"]:
                valid_total += 1
                valid_accepted += ok
            else:
                invalid_total += 1
                invalid_rejected += not ok
                if ok:
                    (relaxed_accepted if relaxed else accepted_invalid).append(name)
    print(f"\nMaskBench {selection} sample: {len(sample)} files, {converted} converted; valid accepted "
          f"{valid_accepted}/{valid_total}; invalid rejected {invalid_rejected}/{invalid_total} "
          f"(accepted under a relaxation warning: {len(relaxed_accepted)})")
    assert converted >= 0.9 * len(sample)
    assert accepted_invalid == [] and relaxed_accepted == []
    assert valid_accepted >= 0.99 * valid_total


# ----------------------------------------------------------------------------- random schemas

_KEYS = ["a", "b", "c"]
_small_scalar = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "a", "bc", "é"]) \
    | st.sampled_from([0.5, -1.5])
_small_json = st.recursive(_small_scalar, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(_KEYS + ["d"]), inner, max_size=3),
                           max_leaves=6)
_leaf_schema = st.one_of(
    st.sampled_from(JSON_TYPE_NAMES := ["null", "boolean", "integer", "number", "string", "array",
                                        "object"]).map(lambda t: {"type": t}),
    st.lists(st.sampled_from(JSON_TYPE_NAMES), min_size=1, max_size=3).map(lambda ts: {"type": ts}),
    st.lists(_small_scalar, min_size=1, max_size=3).map(lambda vs: {"enum": vs}),
    _small_scalar.map(lambda v: {"const": v}),
    st.tuples(st.integers(0, 2), st.integers(0, 3)).map(
        lambda t: {"type": "string", "minLength": t[0], "maxLength": t[1]}),
    st.just(True), st.just({}),
)


def _compound(inner):
    props = st.dictionaries(st.sampled_from(_KEYS), inner, max_size=3)
    return st.one_of(
        st.tuples(props, st.lists(st.sampled_from(_KEYS), max_size=2, unique=True),
                  st.none() | st.booleans() | inner).map(lambda t: {
                      "type": "object", "properties": t[0], "required": t[1],
                      **({} if t[2] is None else {"additionalProperties": t[2]})}),
        st.tuples(inner, st.integers(0, 2), st.none() | st.integers(0, 3)).map(lambda t: {
            "type": "array", "items": t[0], "minItems": t[1], **({} if t[2] is None else {"maxItems": t[2]})}),
        st.tuples(st.lists(inner, min_size=1, max_size=2), st.none() | st.just(False) | inner).map(
            lambda t: {"type": "array", "prefixItems": t[0], **({} if t[1] is None else {"items": t[1]})}),
        st.lists(inner, min_size=1, max_size=3).map(lambda s: {"anyOf": s}),
        st.lists(inner, min_size=1, max_size=3).map(lambda s: {"oneOf": s}),
        st.lists(inner, min_size=2, max_size=3).map(lambda s: {"allOf": s}),
        st.tuples(_leaf_schema, st.lists(inner, min_size=1, max_size=2)).map(
            lambda t: {**t[0], "anyOf": t[1]} if isinstance(t[0], dict) else {"anyOf": t[1]}),
    )


_random_schema = st.recursive(_leaf_schema, _compound, max_leaves=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much])
@given(schema=_random_schema, values=st.lists(_small_json, min_size=1, max_size=6),
       layout=st.sampled_from([{}, {"separators": (",", ":")}, {"indent": 1}]))
def test_random_schemas_accept_only_valid_documents(schema, values, layout):
    """Safety on random schemas of the supported subset: whatever the grammar accepts,
    jsonschema calls valid (oneOf compiled as anyOf, announced by a warning, is skipped)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", JsonSchemaRelaxationWarning)
            grammar = json_schema_to_grammar(schema, strict_mode=False)
    except (GrammarError, JsonSchemaRelaxationWarning):
        return
    recognizer = Recognizer(grammar)
    validator = jsonschema.Draft202012Validator(schema)
    for value in values:
        document = json.dumps(value, **layout)
        if recognizer.accepts(document):
            assert validator.is_valid(value), (schema, document)


@pytest.mark.parametrize("schema", [PERSON, TREE, LINKED, MERGED, RECORD, TUPLE, OPEN_MAP,
                                    {"enum": ["é", {"a": [1, None]}]}])
def test_printed_grammar_parses_back_to_the_same_grammar(schema):
    grammar = grammar_for(schema)
    assert Grammar.from_ebnf(str(grammar)) == grammar


def test_grammars_compile_and_match_like_the_recognizer():
    """Integration smoke test: the compiler and matcher take these grammars and agree with
    the reference recognizer on complete documents (byte vocabulary)."""
    from gxg.grammar_compiler import GrammarCompiler
    from gxg.matcher import GrammarMatcher
    from gxg.tokenizer import TokenizerInfo, VocabType

    vocab = [bytes([i]) for i in range(256)] + [b"</s>"]
    compiler = GrammarCompiler(TokenizerInfo(vocab, VocabType.RAW, stop_token_ids=[256]))
    cases = [(PERSON, ['{"name":"a","age":3}', '{"age":3}', '{"\\u006eame":"x"}']),
             (TREE, ['{"v":1,"kids":[{"v":2}]}', '{"kids":[]}']),
             (OPEN_MAP, ['{"id":1,"x":"y"}', '{"id":"x"}', '{"\\u0069d":"x"}']),
             ({"type": "string", "maxLength": 3}, ['"\\ud83d\\ude00ab"', '"abcd"'])]
    for schema, documents in cases:
        grammar = grammar_for(schema)
        compiled = compiler.compile_grammar(grammar)
        for document in documents:
            matcher = GrammarMatcher(compiled)
            matched = matcher.accept_string(document) and matcher.is_completed()
            assert matched == grammar_accepts(grammar, document), (schema, document)


@pytest.mark.parametrize("schema, document, expected", [
    # a nested draft-04 'id' changes the base URI only for the refs below it: without one it is
    # an annotation (the schema's own refs resolve against the root as before)
    ({"definitions": {"n": {"id": "node", "type": "integer"}},
      "properties": {"a": {"$ref": "#/definitions/n"}}}, '{"a":1}', True),
    ({"definitions": {"n": {"id": "node", "type": "integer"}},
      "properties": {"a": {"$ref": "#/definitions/n"}}}, '{"a":"x"}', False),
    ({"definitions": {"n": {"id": "#node", "type": "integer"}},
      "properties": {"a": {"$ref": "#/definitions/n"}}}, '{"a":1}', True),
])
def test_nested_ids_without_refs_below_are_annotations(schema, document, expected):
    assert accepts(schema, document) is expected


def test_nested_id_with_a_ref_below_is_refused_by_name():
    schema = {"definitions": {"n": {"id": "other.json", "properties": {"x": {"$ref": "#/definitions/m"}}},
                              "m": {"type": "integer"}},
              "properties": {"a": {"$ref": "#/definitions/n"}}}
    with pytest.raises(GrammarError, match="unsupported keyword 'id' at #/definitions/n"):
        json_schema_to_grammar(schema)


def test_equal_string_bounds_share_one_rule():
    bounded = {"type": "string", "minLength": 1, "maxLength": 40}
    schema = {"type": "object", "properties": {"a": bounded, "b": bounded, "c": dict(bounded, maxLength=41)}}
    grammar = grammar_for(schema)
    assert sum(name.startswith("string_bounded") for name in grammar.rule_names) == 2
    assert grammar_accepts(grammar, '{"a":"' + "x" * 40 + '","b":"y","c":"' + "z" * 41 + '"}')
    assert not grammar_accepts(grammar, '{"a":"' + "x" * 41 + '"}')
    assert not grammar_accepts(grammar, '{"b":""}')


@pytest.mark.parametrize("schema, document, expected", [
    # not (not x) is x, also where x's complement is not expressible
    ({"not": {"not": {"multipleOf": 3}}}, "9", True),
    ({"not": {"not": {"multipleOf": 3}}}, "10", False),
    ({"not": {"not": {"type": "object", "additionalProperties": False}}}, '{"a":1}', False),
    ({"not": {"not": {"type": "object", "additionalProperties": False}}}, "{}", True),
    ({"allOf": [{"type": "integer"}, {"not": {"not": {"minimum": 5}}}]}, "4", False),
    ({"allOf": [{"type": "integer"}, {"not": {"not": {"minimum": 5}}}]}, "5", True),
])
def test_double_negation_is_the_schema_itself(schema, document, expected):
    assert accepts(schema, document) is expected


@pytest.mark.parametrize("schema, document, expected", [
    # '#name' refs: a draft-04 'id', a draft-06/07 '$id', or a 2019+ '$anchor'
    ({"definitions": {"n": {"id": "#count", "type": "integer"}},
      "type": "array", "items": {"$ref": "#count"}}, "[1,2]", True),
    ({"definitions": {"n": {"id": "#count", "type": "integer"}},
      "type": "array", "items": {"$ref": "#count"}}, '["x"]', False),
    ({"$defs": {"n": {"$anchor": "word", "type": "string"}}, "$ref": "#word"}, '"w"', True),
    ({"$defs": {"n": {"$id": "#word", "type": "string"}}, "$ref": "#word"}, "1", False),
])
def test_anchor_refs_resolve(schema, document, expected):
    assert accepts(schema, document) is expected


@pytest.mark.parametrize("schema, message", [
    ({"$ref": "#missing"}, "does not resolve"),
    ({"$defs": {"a": {"$anchor": "x"}, "b": {"$anchor": "x"}}, "$ref": "#x"}, "names more than one subschema"),
])
def test_anchor_refs_that_do_not_name_one_subschema_are_errors(schema, message):
    with pytest.raises(GrammarError, match=message):
        json_schema_to_grammar(schema)


# ----------------------------------------------------------------------------- string units


@pytest.mark.parametrize("lo, hi, width", [(0, 0, 1), (0, 15, 1), (3, 11, 1), (0, 0, 2),
                                           (0, 255, 2), (3, 200, 2), (16, 31, 2), (17, 254, 2),
                                           (255, 255, 2)])
def test_hex_ranges_are_built_in_normal_form_and_match_their_range(lo, hi, width):
    """``_hex_range`` (a unit's \\uXXXX digits) is in normal form as built, and matches exactly
    the ``width``-digit numerals, in any mix of cases, whose value lies in [lo, hi]."""
    from gxg.grammar.ir import Rule, normalize
    from gxg.grammar.json_schema_emission import _hex_range
    expr = _hex_range(lo, hi, width)
    assert normalize(expr) is expr
    recognizer = Recognizer(Grammar((Rule("root", expr),)))
    for value in range(16 ** width):
        digits = f"{value:0{width}x}"
        for spelling in itertools.product(*({d, d.upper()} for d in digits)):
            assert recognizer.accepts("".join(spelling).encode()) == (lo <= value <= hi)


def test_string_languages_are_kept_across_compiles(monkeypatch):
    """A string schema's language with lengths and patterns is computed once per process: a
    second schema with the same lengths and pattern (elsewhere in another schema) gets the same
    DFA object and the grammar it would get fresh; a pattern that fails is not kept, and says
    where it is each time."""
    from gxg.grammar import json_schema_emission as emission
    monkeypatch.setattr(emission, "_STRING_DFAS", {})
    string = {"type": "string", "pattern": "^[a-c]+-[0-9]$", "maxLength": 6}
    first = json_schema_to_grammar({"type": "object", "properties": {"a": string}})
    [(key, dfa)] = emission._STRING_DFAS.items()
    assert key == (0, 6, (("^[a-c]+-[0-9]$", True, False),), ())
    second = json_schema_to_grammar({"type": "array", "items": string})
    assert list(emission._STRING_DFAS.values()) == [dfa]
    monkeypatch.setattr(emission, "_STRING_DFAS", {})
    assert str(json_schema_to_grammar({"type": "array", "items": string})) == str(second)
    assert grammar_accepts(second, '["ab-1", "c-2"]')
    assert not grammar_accepts(second, '["abcde-1"]')
    assert str(first) != str(second)
    kept = dict(emission._STRING_DFAS)
    bad = {"type": "string", "pattern": "(?<=x)a", "minLength": 2}
    for where in ("p", "q"):
        with pytest.raises(GrammarError, match=f"/properties/{where}"):
            json_schema_to_grammar({"type": "object", "properties": {where: bad}})
    assert emission._STRING_DFAS == kept


def test_a_string_language_repeated_on_properties_is_one_rule():
    """Properties with the same pattern and length bound share one rule for the string (its
    DFA's rules are made once per grammar); each property still checks its value."""
    string = {"type": "string", "pattern": "^[a-c]+(-[0-9]+)?$", "maxLength": 5}
    other = {"type": "string", "pattern": "^[a-c]+(-[0-9]+)?$", "maxLength": 4}
    schema = {"type": "object", "properties": {"a": string, "b": dict(string), "c": other},
              "required": ["a", "b", "c"], "additionalProperties": False}
    grammar = json_schema_to_grammar(schema, any_whitespace=False)
    shared = [rule for rule in grammar.rules if rule.name.startswith("string_language")]
    assert len(shared) == 2  # one per language: maxLength 5 and maxLength 4
    assert grammar_accepts(grammar, '{"a": "ab-1", "b": "c", "c": "ab-1"}')
    assert not grammar_accepts(grammar, '{"a": "ab-1", "b": "abc-12", "c": "ab-1"}')  # b too long
    assert not grammar_accepts(grammar, '{"a": "ab-1", "b": "c", "c": "abc-1"}')  # c too long
    assert not grammar_accepts(grammar, '{"a": "ab-", "b": "c", "c": "a"}')  # a fails the pattern
