"""JSON Schema front-end: a schema becomes a Grammar of the JSON documents that satisfy it,
written with XGrammar's formatting options.

In:  ``json_schema_to_grammar(schema, *, any_whitespace=True, indent=None, separators=None,
     strict_mode=True, max_whitespace_cnt=None, any_order=False, coerce_one_of=None,
     any_string_spelling=False)``;
     ``schema`` is a dict, a bool, a JSON string, or a Pydantic model class (its
     ``model_json_schema()``).
Out: a ``Grammar`` (root rule ``root``). A schema that cannot be honoured exactly raises
     ``GrammarError`` naming the keyword and the JSON pointer of the subschema, e.g.
     ``unsupported keyword 'contains' at #/properties/tags``.

The work is two stages, data flowing one way: ``gxg.grammar.json_schema_analysis`` reads the
schema as data (loading, keyword checks, $ref resolution, allOf merging, complements, oneOf
disjointness, checking values against subschemas) and ``gxg.grammar.json_schema_emission``
writes the grammar from its answers (constants, strings, numbers, arrays, objects' member
orders, whitespace and indentation, rule naming); this module runs the two.

``excludes`` (a structural tag's ``json_schema.excludes``, XGrammar 0.2.8's meaning): substrings
that no string the schema leaves free may contain as written (between its quotes, escapes
included): values of ``"type": "string"`` without ``pattern``/``format``, keys of additional
properties, strings and keys inside unconstrained values; a declared key or an enum/const string
(also one nested in an array/object constant) whose canonical spelling holds one is left out
(numbers, booleans and null are never filtered). Refused with excludes: ``minLength`` /
``maxLength`` / complements of strings without a pattern (XGrammar drops the lengths with a
warning), ``patternProperties`` and ``propertyNames`` keys.

JSON-Schema-compliant mode is ``any_whitespace=True, strict_mode=False, any_order=True``: then
the only documents refused are the narrowings listed below. The defaults are XGrammar's.

Exactness contract: every document the grammar accepts is valid for the schema (JSON Schema
2020-12 meaning as the ``jsonschema`` package decides it with its format checker; draft-04's
boolean exclusiveMinimum/Maximum and ``dependencies`` are understood). The grammar may reject
some valid documents; each such narrowing is listed here:

* property order: with ``any_order=False`` (XGrammar's default) properties appear in
  ``properties`` order, then additional properties; a ``required`` name missing from
  ``properties`` comes right after the declared ones. With ``any_order=True`` members come in
  any order, except that an object with more than ``MAX_ANY_ORDER_REQUIRED`` required members
  keeps those in their relative schema order;
* integers are written without fraction or exponent (``1.0`` is an integer for JSON Schema);
  the complement of type integer (``not``, and oneOf branches that exclude integers) is a number
  with a non-zero fraction digit and no exponent (``15e-1`` is left out);
  bounded numbers: see ``gxg.grammar.json_numbers`` for the exponent forms refused;
* ``enum`` / ``const`` values: numbers are accepted in the spelling ``json.dumps`` gives them
  (plus ``1`` / ``1.0`` for integral values), object members in the schema's order; strings
  only in their canonical spelling (below); with ``any_whitespace`` whitespace is allowed
  between the tokens of an array or object constant (XGrammar accepts only the compact form);
* strings the schema names — the keys of declared members (``properties`` and ``required``,
  hence also those of ``dependentRequired`` / ``dependentSchemas`` / ``dependencies``, with or
  without ``any_order``), keys listed by a ``propertyNames`` ``enum`` / ``const``, and the
  strings of ``enum`` / ``const`` values, keys and strings nested in array/object constants
  included — are accepted only in their canonical spelling, XGrammar's: ``"``, ``\\`` and the
  control characters U+0000-U+001F and DEL (U+007F) escaped (``\\b \\f \\n \\r \\t``, the
  others ``\\u00xx`` in lowercase hex), every other code point raw (``/`` and non-ASCII
  included, as UTF-8). That is ``json.dumps(s, ensure_ascii=False)`` except that DEL is
  written ``\\u007f`` (``json.dumps`` leaves it raw). So ``"s\\u006bu"`` does not spell the
  key ``sku`` nor ``"a\\/b"`` the constant ``"a/b"``: a model cannot wander off through an
  escape, and an escaped spelling of a declared key is no additional property either (it is
  refused). ``any_string_spelling=True`` accepts every spelling instead (raw or escaped, any
  hex case), to validate existing text. Either way a named string holding a lone surrogate has
  no spelling and is left out (XGrammar refuses such a schema). Strings the schema does not
  name (values of ``"type": "string"``, keys of additional properties) keep every spelling;
* strings whose value is constrained (lengths, ``pattern``, ``format``, excluded values) and keys
  of additional properties do not accept lone surrogate escapes such as ``\\uD800``;
* ``format``: each known format is a regular language inside what the format checker accepts
  (``gxg.grammar.json_formats`` lists what it leaves out); unknown formats are annotations;
* ``unevaluatedProperties`` / ``unevaluatedItems`` are applied to each anyOf/oneOf branch
  separately: a document valid only because two anyOf branches together evaluate its members
  is refused;
* with ``any_whitespace=False`` and an ``indent``, values nested deeper than
  ``MAX_INDENT_DEPTH`` containers are rejected.

Duplicate member names: a context-free grammar cannot compare keys, so with ``any_order=True``
an optional or additional member, and in either order additional members among themselves, may
appear twice. Every occurrence is checked against its schema, so the value ``json.loads`` keeps
(the last) is valid; ``minProperties`` counts occurrences, so duplicates can satisfy it (the
one way a document with duplicate names can pass a check it should fail; say so to users who
count on minProperties). Required members appear once.

Relaxations (the grammar may accept documents the schema forbids), each announced with a
``JsonSchemaRelaxationWarning`` naming the keyword and its JSON pointer:

* ``oneOf`` is compiled as ``anyOf`` when its branches are neither provably disjoint (disjoint
  JSON types, disjoint ``const``/``enum`` values, a required property whose ``const``/``enum``
  values differ, or one distinct required name each) nor expressible exactly as
  ``b_i and not b_j`` for all j != i (which needs every branch's complement, see ``not``; the
  branches are taken as written, siblings of the oneOf are intersected afterwards) — only with
  ``coerce_one_of=True``, which defaults to ``strict_mode`` (XGrammar's default mode treats
  oneOf as anyOf; the compliant mode, ``strict_mode=False``, raises a ``GrammarError`` naming
  ``oneOf`` unless ``coerce_one_of=True`` is passed);
* ``maxLength``, ``maxItems`` and ``maxProperties`` above ``MAX_EXACT_BOUND`` (2048) are not
  enforced, in both modes: they only narrow the language, a value that long is beyond a decoding
  budget, and each allowed count would be a chain of automaton states whose token masks are
  precomputed (about 10 ms each with a 150k vocabulary; a counted repeat in the runtime would
  lift this).

Options (XGrammar's, reference §3.1): ``any_whitespace=True`` allows ``[ \\n\\r\\t]*`` (at most
``max_whitespace_cnt`` characters) between tokens and none around the root; the separators
default to ``","`` / ``":"`` and, when given, must appear (whitespace around them allowed).
``any_whitespace=False`` accepts exactly ``json.dumps(value, indent=indent,
separators=separators)``, separators defaulting to ``(", ", ": ")`` without indent and
``(",", ": ")`` with one (named strings always in their canonical spelling, as above, unless
``any_string_spelling``). ``strict_mode=True``: a schema with ``properties`` (or
``patternProperties``) and no ``additionalProperties`` allows no other properties, and one with
``prefixItems`` (or an ``items`` list) and no ``items`` / ``additionalItems`` allows no further
items; without them the JSON Schema default (anything) holds. ``strict_mode=False`` follows
JSON Schema throughout. gxg's own options: ``any_order`` and ``coerce_one_of`` (above), and
``any_string_spelling`` (a bool, default False: only the canonical spelling of the strings the
schema names; True: every JSON spelling of them, as gxg accepted before; a value that is not a
bool raises ``GrammarError``).

Keywords. Types and values: ``type`` (a name or a list), ``enum``, ``const``. Strings:
``minLength``/``maxLength`` (code points), ``pattern`` (ECMAScript, unanchored: matched
anywhere, ``.`` excluding line terminators; via the regex front-end), ``format``. Numbers:
``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum`` (exact digit automata),
``multipleOf`` (see ``json_numbers``). Arrays: ``items`` (schema, or draft-04 list),
``prefixItems``, ``additionalItems``, ``minItems``, ``maxItems``, ``unevaluatedItems``,
``uniqueItems: false``, ``contains`` (not with tuple items; with minItems > 1 or maxItems
only up to ``MAX_CONTAINS_COUNT`` items and where its complement is expressible; also how the
complement of ``items`` is written). Objects: ``properties``, ``required``, ``additionalProperties``,
``patternProperties`` (up to ``MAX_PATTERN_PROPERTIES`` patterns; keys are split into the regular
languages "matches exactly these patterns"), ``propertyNames``, ``minProperties``,
``maxProperties``, ``unevaluatedProperties``, ``dependentRequired``, ``dependentSchemas``,
``dependencies``. Combinators: ``anyOf``, ``oneOf``, ``allOf``, ``not``, ``if``/``then``/``else``,
``$ref`` (``#`` and ``#/...`` JSON pointers, percent- and ``~0``/``~1``-escaped, ``#name``
anchors declared by an ``id``/``$id``/``$anchor``, recursive ones too; each referenced schema
becomes one rule). Ignored: the annotations ``title description
default examples $schema $comment deprecated readOnly writeOnly contentEncoding
contentMediaType contentSchema $anchor $dynamicAnchor``, ``$id`` / ``id`` of the root (and of
subschemas with no ``$ref`` below them, or that are ``#name`` anchors), ``$defs`` /
``definitions``, and keys that are no JSON Schema keyword. Refused (GrammarError naming them):
``uniqueItems: true`` (a context-free grammar cannot compare items; ignoring it would accept
repeated items), ``minContains``, ``maxContains``, ``$dynamicRef``, ``$recursiveRef``, draft-03
keywords.

How the combinators compile. ``allOf`` (and ``$ref``, ``anyOf``, ``oneOf`` with sibling
assertions, which mean allOf of the siblings and the keyword, as in 2020-12; when the root's
``$schema`` names draft-03 to draft-07 the siblings of a ``$ref`` are ignored, as those drafts
say) merges the
subschemas into one schema with the same instances: ``type`` intersected, ``required`` united,
``enum``/``const`` intersected, the tighter bound kept, ``properties`` and ``patternProperties``
merged name by name, ``items`` merged, patterns and formats all kept, and ``anyOf``/``oneOf``
distributed over their branches (two of them: the product of the branches). ``not`` is the
complement, computed keyword by keyword (a schema is the conjunction of its keywords; a keyword
about one type is satisfied by every other type, so its complement only holds values of that
type): ``not {minLength: 3}`` is a string of at most 2 code points, ``not {required: [a, b]}``
an object without a or without b, ``not {pattern: p}`` a string that does not contain a match of
p (a DFA complement), ``not {enum: [...]}`` every other value (numbers as open intervals).
``if/then/else`` is ``anyOf(allOf(if, then), allOf(not if, else))``; a dependency on ``a`` is
``anyOf(a absent, a present and the dependency)``. Merges and complements that are not
expressible raise naming the keyword: two different ``additionalProperties``, one side's
``additionalProperties`` while the other declares further properties, two tuple ``items``,
two ``multipleOf`` of which neither divides the other, the complement of ``multipleOf``,
``uniqueItems``, ``additionalProperties``, an array/object constant, or a possibly overlapping ``oneOf``.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from gxg.grammar.ir import Grammar, GrammarError, normal_forms_kept
# Besides what it uses, this module re-exports what callers import from it (the warning, the
# loading and checking helpers, MAX_EXACT_BOUND, MAX_INDENT_DEPTH, _canonical_spelling).
from gxg.grammar.json_schema_analysis import (  # noqa: F401
    JsonSchemaRelaxationWarning,
    SchemaAnalysis,
    check_keyword_types,
    deep_recursion,
    load_schema,
)
from gxg.grammar.json_schema_emission import (  # noqa: F401
    MAX_EXACT_BOUND,
    MAX_INDENT_DEPTH,
    GrammarEmitter,
    _canonical_spelling,
    make_format,
)

__all__ = ["json_schema_to_grammar", "JsonSchemaRelaxationWarning", "MAX_INDENT_DEPTH"]


def json_schema_to_grammar(schema: Any, *, any_whitespace: bool = True, indent: Optional[int] = None,
                           separators: Optional[Tuple[str, str]] = None, strict_mode: bool = True,
                           max_whitespace_cnt: Optional[int] = None, any_order: bool = False,
                           coerce_one_of: Optional[bool] = None,
                           any_string_spelling: bool = False, excludes=()) -> Grammar:
    """The Grammar of the JSON documents that satisfy ``schema`` (see the module docstring).
    ``excludes``: a structural tag's ``json_schema.excludes`` (see the module docstring)."""
    if not isinstance(any_string_spelling, bool):
        raise GrammarError(f"any_string_spelling must be True or False, got {any_string_spelling!r}")
    root = load_schema(schema)
    if root is False:
        raise GrammarError("schema 'false' at # matches nothing")
    check_keyword_types(root)
    fmt = make_format(any_whitespace, indent, separators, max_whitespace_cnt)
    with deep_recursion(), normal_forms_kept():
        schemas = SchemaAnalysis(root, strict_mode,
                                 strict_mode if coerce_one_of is None else bool(coerce_one_of))
        emitter = GrammarEmitter(schemas, fmt, any_order, any_string_spelling, excludes)
        return emitter.grammar(emitter.schema(root, "#", 0))
