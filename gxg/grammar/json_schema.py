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

import contextlib
import functools
import json
import math
import re
import sys
import warnings
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Dict, List, Optional, Sequence as Seq, Tuple
from urllib.parse import unquote

from gxg import compile_budget
from gxg.grammar.rule_analysis import is_productive, least_fixpoint
from gxg.grammar import code_point_dfa as dfa_ops
from gxg.graphs import reaching
from gxg.grammar.code_point_dfa import dfa_to_expr
from gxg.grammar.ir import (
    EMPTY,
    CharClass,
    Choice,
    Expr,
    Grammar,
    GrammarError,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    complement_ranges,
    subtract_range,
)
from gxg.grammar.json_formats import format_pattern
from gxg.grammar.json_numbers import json_number_language
from gxg.grammar.regex import regex_to_grammar

__all__ = ["json_schema_to_grammar", "JsonSchemaRelaxationWarning", "MAX_INDENT_DEPTH"]

MAX_INDENT_DEPTH = 10

Maybe = Optional[Expr]  # None stands for the empty language (a schema nothing satisfies)


class JsonSchemaRelaxationWarning(UserWarning):
    """The grammar accepts more than the schema allows (see the module docstring)."""


# ----------------------------------------------------------------------------- keyword tables

# Keys in neither table (annotations such as title or description, containers such as $defs,
# and unknown keys) are ignored, as JSON Schema ignores them.
SUPPORTED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength",
    "anyOf", "oneOf", "allOf", "$ref", "uniqueItems", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "not", "if", "then", "else", "dependentRequired",
    "dependentSchemas", "dependencies", "unevaluatedItems", "unevaluatedProperties", "contains",
}) | {"x-gxg-regexes", "x-gxg-not-strings", "x-gxg-fraction"}
# Internal keywords (never in user schemas; produced by merging and negation):
#   x-gxg-regexes      list of [regex, search, negated, keyword]: the decoded string must (not)
#                      match each regex (search: anywhere, as 'pattern'; else in full, as 'format')
#   x-gxg-not-strings  list of strings the value must differ from
#   x-gxg-fraction     true: a number that is not an integer, written with a fraction that has a
#                      non-zero digit and no exponent (the complement of type integer, narrowed:
#                      1.5e1 style spellings of non-integers are left out; itself never negated)
UNSUPPORTED = frozenset({
    "minContains", "maxContains", "$dynamicRef", "$recursiveRef", "$recursiveAnchor",
    "extends", "disallow", "divisibleBy",
})
# Rewritten by ``normal`` into anyOf/allOf of simpler schemas before a schema is compiled.
EXPANDED = ("not", "if", "dependentRequired", "dependentSchemas", "dependencies")
NUMERIC_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format", "x-gxg-regexes", "x-gxg-not-strings")
ARRAY_KEYWORDS = ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
                  "unevaluatedItems")
OBJECT_KEYWORDS = ("properties", "required", "additionalProperties", "patternProperties",
                   "propertyNames", "minProperties", "maxProperties", "unevaluatedProperties")
# An object's members are written in a fixed order, so minProperties/maxProperties count along a
# chain of (declared member index, members so far) states; more than this many is refused (with
# nothing to count the chain is linear in the members, whatever their number).
MAX_COUNT_STATES = 4096
MAX_PATTERN_PROPERTIES = 4
MAX_CONTAINS_COUNT = 64  # contains with item bounds: one alternative per witness position
CONVERTER_RECURSION_LIMIT = 20000
# Normalisations one merge (allOf; one branch of a oneOf's complements) may take before it is
# refused as growing too large, and all the complements of one top-level oneOf together.
MERGE_BUDGET = 2000
COMPLEMENT_BUDGET = 100_000
# maxLength / maxItems / maxProperties above this are refused: every allowed count is its own
# chain of automaton states, and the compiler walks the vocabulary from each of them.
MAX_EXACT_BOUND = 2048
# any_order: the required members seen so far are tracked as a set up to this many.
MAX_ANY_ORDER_REQUIRED = 9
# Any-order objects spell their keys in every state's rule while that stays within this many
# key characters in all (see Converter.object_any_order).
MAX_INLINE_KEY_CHARS = 16384
JSON_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")


# ----------------------------------------------------------------------------- combinators


def _seq(*items: Maybe) -> Maybe:
    if any(item is None for item in items):
        return None
    return Sequence(tuple(items))


def _alt(*alternatives: Maybe) -> Maybe:
    kept = tuple(a for a in alternatives if a is not None)
    return Choice(kept) if kept else None


def _rep(expr: Maybe, lo: int, hi: Optional[int]) -> Maybe:
    if expr is None:
        return EMPTY if lo == 0 else None
    return Repeat(expr, lo, hi)


def _lit(text: str) -> Literal:
    return Literal(text.encode("utf-8"))


# ----------------------------------------------------------------------------- JSON strings
# A string's *units* are the spellings of one code point: raw, a short escape, \uXXXX (any hex
# case) or, above U+FFFF, a \uD8xx\uDCxx pair. Building strings from units lets a constant or a
# length bound be checked on the decoded value, whatever spelling the document uses.

_HEX = "0123456789abcdef"
_SHORT_ESCAPES = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n",
                  0x0D: "r", 0x09: "t"}
_RAW_FORBIDDEN = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0xD800, 0xDFFF))
_ALL = ((0, 0x10FFFF),)


def _hex_digits(lo: int, hi: int) -> CharClass:
    ranges = []
    for value in range(lo, hi + 1):
        for char in {_HEX[value], _HEX[value].upper()}:
            ranges.append((ord(char), ord(char)))
    return CharClass(tuple(ranges))


def _hex_range(lo: int, hi: int, width: int) -> Expr:
    """Hex numerals of exactly ``width`` digits (either case) with value in [lo, hi]."""
    if width == 0:
        return EMPTY
    unit = 16 ** (width - 1)
    first, last = lo // unit, hi // unit
    lo_rest, hi_rest = lo - first * unit, hi - last * unit
    if first == last:
        return Sequence((_hex_digits(first, first), _hex_range(lo_rest, hi_rest, width - 1)))
    parts: List[Expr] = []
    full_from, full_to = first, last
    if lo_rest != 0:
        parts.append(Sequence((_hex_digits(first, first), _hex_range(lo_rest, unit - 1, width - 1))))
        full_from = first + 1
    if hi_rest != unit - 1:
        full_to = last - 1
    if full_from <= full_to:
        parts.append(Sequence((_hex_digits(full_from, full_to),
                               Repeat(_hex_digits(0, 15), width - 1, width - 1))))
    if hi_rest != unit - 1:
        parts.append(Sequence((_hex_digits(last, last), _hex_range(0, hi_rest, width - 1))))
    return Choice(tuple(parts))


def _intersect(ranges, lo: int, hi: int) -> List[Tuple[int, int]]:
    return [(max(a, lo), min(b, hi)) for a, b in ranges if a <= hi and b >= lo]


def _subtract_all(ranges, holes) -> List[Tuple[int, int]]:
    out = tuple(ranges)
    for hole in holes:
        out = subtract_range(out, hole)
    return list(out)


def _complement(points: Seq[int]) -> List[Tuple[int, int]]:
    return list(complement_ranges((p, p) for p in points))


def _surrogate_pairs(lo: int, hi: int) -> List[Expr]:
    """Escaped UTF-16 pairs for the astral code points lo..hi."""
    def split(cp: int) -> Tuple[int, int]:
        offset = cp - 0x10000
        return 0xD800 + (offset >> 10), 0xDC00 + (offset & 0x3FF)

    def pair(high_lo, high_hi, low_lo, low_hi) -> Expr:
        return Sequence((_lit("\\u"), _hex_range(high_lo, high_hi, 4),
                         _lit("\\u"), _hex_range(low_lo, low_hi, 4)))

    (high_a, low_a), (high_b, low_b) = split(lo), split(hi)
    if high_a == high_b:
        return [pair(high_a, high_a, low_a, low_b)]
    out = []
    full_from, full_to = high_a, high_b  # high surrogates whose every low surrogate is in range
    if low_a != 0xDC00:
        out.append(pair(high_a, high_a, low_a, 0xDFFF))
        full_from += 1
    if low_b != 0xDFFF:
        full_to -= 1
    if full_from <= full_to:
        out.append(pair(full_from, full_to, 0xDC00, 0xDFFF))
    if low_b != 0xDFFF:
        out.append(pair(high_b, high_b, 0xDC00, low_b))
    return out


def _unit(ranges) -> Maybe:
    return _unit_cached(tuple(tuple(r) for r in ranges))


@functools.lru_cache(maxsize=4096)  # a cache of a pure function: units recur in every key trie
def _unit_cached(ranges: Tuple[Tuple[int, int], ...]) -> Maybe:
    """One JSON string unit whose decoded code point lies in ``ranges`` (no lone surrogates)."""
    alternatives: List[Expr] = []
    raw = _subtract_all(ranges, _RAW_FORBIDDEN)
    if raw:
        alternatives.append(CharClass(tuple(raw)))
    for cp, char in _SHORT_ESCAPES.items():
        if _intersect(ranges, cp, cp):
            alternatives.append(_lit("\\" + char))
    for lo, hi in _subtract_all(_intersect(ranges, 0, 0xFFFF), [(0xD800, 0xDFFF)]):
        alternatives.append(Sequence((_lit("\\u"), _hex_range(lo, hi, 4))))
    for lo, hi in _intersect(ranges, 0x10000, 0x10FFFF):
        alternatives.extend(_surrogate_pairs(lo, hi))
    return _alt(*alternatives)


def _string_constant(text: str) -> Maybe:
    """Every spelling of the JSON string whose value is ``text``."""
    units = [_unit(((ord(c), ord(c)),)) for c in text]
    return _seq(_lit('"'), *units, _lit('"'))


# The canonical spelling of a string the schema names is XGrammar's: its JSON serializer
# (picojson's serialize_str) escapes '"', '\' and the control characters U+0000-U+001F and DEL
# (\b \f \n \r \t short, the others \u00xx in lowercase hex) and writes every other code point
# raw, '/' and non-ASCII included. That is json.dumps(text, ensure_ascii=False) except for DEL,
# which json.dumps leaves raw.
_CANONICAL_ESCAPES = {cp: f"\\u{cp:04x}" for cp in (*range(0x20), 0x7F)}
_CANONICAL_ESCAPES.update({cp: "\\" + char for cp, char in _SHORT_ESCAPES.items() if char != "/"})
_SURROGATES = (0xD800, 0xDFFF)


def _canonical_spelling(text: str) -> Optional[str]:
    """The JSON text of the string ``text`` as XGrammar writes it, quotes included; None when
    ``text`` holds a lone surrogate, which has no UTF-8 form (XGrammar refuses the schema)."""
    if any(_SURROGATES[0] <= ord(c) <= _SURROGATES[1] for c in text):
        return None
    return '"' + "".join(_CANONICAL_ESCAPES.get(ord(c), c) for c in text) + '"'


def _canonical_string(text: str) -> Maybe:
    """The one spelling of the JSON string ``text`` that the default grammar accepts."""
    spelling = _canonical_spelling(text)
    return None if spelling is None else _lit(spelling)


def _canonical_unit(ranges) -> Maybe:
    """One code point of ``ranges`` in its canonical spelling (no lone surrogates)."""
    raw = _subtract_all(ranges, [(cp, cp) for cp in _CANONICAL_ESCAPES] + [_SURROGATES])
    escapes = [_lit(escape) for cp, escape in _CANONICAL_ESCAPES.items() if _intersect(ranges, cp, cp)]
    return _alt(CharClass(tuple(raw)) if raw else None, *escapes)


# ----------------------------------------------------------------------------- formatting


@dataclass(frozen=True)
class _Member:
    """A declared property of an object: its name, its key as the document may spell it, the
    rest of the member (``: value``), and whether the object requires it."""
    name: str
    key: Expr
    rest: Expr
    required: bool


@dataclass(frozen=True)
class _Format:
    any_whitespace: bool
    indent: Optional[str]  # only when any_whitespace is False
    item_sep: str
    key_sep: str
    ws: Optional[Expr]  # only when any_whitespace is True

    def depth_key(self, depth: int) -> int:
        # Only json.dumps's indentation depends on the depth; elsewhere one rule serves all.
        return depth if self.indent is not None else 0

    def _gap(self, text: str) -> Expr:
        return Sequence((self.ws, _lit(text), self.ws)) if self.any_whitespace else _lit(text)

    def open(self, bracket: str, depth: int) -> Expr:
        if self.any_whitespace:
            return Sequence((_lit(bracket), self.ws))
        if self.indent is not None:
            return _lit(bracket + "\n" + self.indent * (depth + 1))
        return _lit(bracket)

    def close(self, bracket: str, depth: int) -> Expr:
        if self.any_whitespace:
            return Sequence((self.ws, _lit(bracket)))
        if self.indent is not None:
            return _lit("\n" + self.indent * depth + bracket)
        return _lit(bracket)

    def empty(self, pair: str) -> Expr:
        if self.any_whitespace:
            return Sequence((_lit(pair[0]), self.ws, _lit(pair[1])))
        return _lit(pair)

    def item(self, depth: int) -> Expr:
        """Between two elements of a container at ``depth``."""
        if self.indent is not None:
            return _lit(self.item_sep + "\n" + self.indent * (depth + 1))
        return self._gap(self.item_sep)

    def key(self) -> Expr:
        return self._gap(self.key_sep)


def _make_format(any_whitespace, indent, separators, max_whitespace_cnt) -> _Format:
    if max_whitespace_cnt is not None and (not isinstance(max_whitespace_cnt, int)
                                           or max_whitespace_cnt <= 0):
        raise GrammarError(f"max_whitespace_cnt must be a positive integer, got {max_whitespace_cnt!r}")
    if separators is not None:
        item_sep, key_sep = separators
    elif any_whitespace:
        item_sep, key_sep = ",", ":"
    else:
        item_sep, key_sep = (", ", ": ") if indent is None else (",", ": ")
    if any_whitespace:
        # As XGrammar: given separators must appear verbatim, with free whitespace around them.
        ws = Repeat(CharClass(((0x09, 0x0A), (0x0D, 0x0D), (0x20, 0x20))), 0, max_whitespace_cnt)
        return _Format(True, None, item_sep, key_sep, ws)
    if indent is not None and not isinstance(indent, str):
        indent = " " * int(indent)  # json.dumps: an int is that many spaces
    return _Format(False, indent, item_sep, key_sep, None)


# ----------------------------------------------------------------------------- JSON values


def _json_type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise GrammarError(f"{value!r} is not a JSON value")


def _has_type(value: Any, type_name: str) -> bool:
    actual = _json_type_of(value)
    return actual == type_name or (type_name == "number" and actual == "integer")


def _canonical(value: Any) -> str:
    """A key equal for values JSON Schema calls equal (1 == 1.0; key order irrelevant)."""
    def norm(v):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return v
    return json.dumps(norm(value), sort_keys=True)


def _decimal(value: Any) -> Decimal:
    """The exact decimal a schema number means (0.1 is one tenth: json.loads made it a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise GrammarError(f"{value!r} is not a number")
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _json_number(value: Decimal) -> Any:
    """A Decimal back as a schema number (int when integral, else the float it came from)."""
    return int(value) if value == value.to_integral_value() else float(value)


def _number_spellings(value) -> List[str]:
    if isinstance(value, float) and not math.isfinite(value):
        return []  # NaN / Infinity are no JSON
    spellings = [json.dumps(value)]
    if isinstance(value, int) and abs(value) < 2 ** 53:
        spellings.append(repr(float(value)))
    elif isinstance(value, float) and value.is_integer():
        spellings.append(str(int(value)))
    return list(dict.fromkeys(spellings))


# ----------------------------------------------------------------------------- JSON pointers


def _escape_token(token: str) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def _resolve_pointer(root: Any, ref: str, where: str) -> Tuple[Any, str]:
    if ref == "#":
        return root, "#"
    if ref.startswith("#") and not ref.startswith("#/"):
        return _resolve_anchor(root, ref, where)
    if not ref.startswith("#/"):
        raise GrammarError(f"unsupported $ref {ref!r} at {where}: only '#', '#/...' pointers and "
                           f"'#name' anchors")
    node = root
    tokens = []
    for raw in ref[2:].split("/"):
        token = unquote(raw).replace("~1", "/").replace("~0", "~")
        tokens.append(token)
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise GrammarError(f"$ref {ref!r} at {where} does not resolve")
    return node, "#/" + "/".join(_escape_token(t) for t in tokens)


def _resolve_anchor(root: Any, ref: str, where: str) -> Tuple[Any, str]:
    """``#name``: the one subschema declaring it, as a draft-04/06/07 ``id``/``$id`` of
    ``#name`` or a 2019+ ``$anchor: name`` (values of enum/const/examples are data, not
    searched)."""
    name = unquote(ref[1:])
    found: List[Tuple[Any, str]] = []
    todo: List[Tuple[Any, str]] = [(root, "#")]
    while todo:
        node, pointer = todo.pop()
        if isinstance(node, dict):
            if node.get("id") == ref or node.get("$id") == ref or node.get("$anchor") == name:
                found.append((node, pointer))
            for key, value in node.items():
                if key not in ("enum", "const", "examples", "default"):
                    todo.append((value, f"{pointer}/{_escape_token(key)}"))
        elif isinstance(node, list):
            todo.extend((value, f"{pointer}/{i}") for i, value in enumerate(node))
    if len(found) != 1:
        raise GrammarError(f"$ref {ref!r} at {where} "
                           f"{'does not resolve' if not found else 'names more than one subschema'}")
    return found[0]


# ----------------------------------------------------------------------------- the converter


class _Converter:
    def __init__(self, root: Any, fmt: _Format, strict_mode: bool, any_order: bool = False,
                 coerce_one_of: bool = True, any_string_spelling: bool = False):
        self.root = root
        self.fmt = fmt
        self.strict = strict_mode
        self.any_order = any_order
        self.coerce_one_of = coerce_one_of  # an inexpressible oneOf: anyOf (warned) or refused
        self.any_spelling = any_string_spelling  # named strings: every spelling, or canonical only
        self.rules: Dict[str, Optional[Expr]] = {}
        self.rule_numbers: Dict[str, int] = {}
        self.ref_rules: Dict[Tuple[str, int], str] = {}
        self.rule_pointer: Dict[str, str] = {}
        self.referenced: set = set()
        self.empty_refs: set = set()  # (pointer, depth key) of referenced schemas found empty
        self.complement_budget: Optional[List[int]] = None  # shared while a oneOf is made exclusive
        self.uses_refs = '"$ref"' in json.dumps(root)  # nested ids matter only to refs
        # Up to draft-07 a $ref replaces its whole schema object: sibling keywords are ignored.
        draft = root.get("$schema", "") if isinstance(root, dict) else ""
        self.ref_siblings_apply = not (isinstance(draft, str) and
                                       re.search(r"draft-0[3-7]/schema", draft) is not None)
        self.cache: Dict[Any, Any] = {}  # shared pieces: regex grammars/DFAs/bodies, units, numbers

    # -- rules
    def new_rule(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint)[:40] or "r"
        # the next number to try per base name (not a scan from 1: thousands of rules share one)
        n = self.rule_numbers.get(base, 1)
        name = base if n == 1 else f"{base}_{n}"
        while name in self.rules or name == "root":
            n += 1
            name = f"{base}_{n}"
        self.rule_numbers[base] = n + 1
        self.rules[name] = None  # reserved; the body comes later
        return name

    def share(self, expr: Maybe, hint: str) -> Maybe:
        """``expr`` as something cheap to use more than once (a rule if it is not tiny)."""
        if expr is None or isinstance(expr, (Literal, RuleRef, CharClass)):
            return expr
        name = self.new_rule(hint)
        self.rules[name] = expr
        return RuleRef(name)

    def helper(self, name: str, build) -> RuleRef:
        if name not in self.rules:
            self.rules[name] = None
            self.rules[name] = build()
        return RuleRef(name)

    # -- helper rules shared by all schemas
    def string_rule(self) -> RuleRef:
        # Any JSON string, lone surrogate escapes included (no length to count).
        def build():
            char = Choice((CharClass(((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)), negated=True),
                           Sequence((_lit("\\"), Choice((CharClass(tuple((ord(c), ord(c)) for c in '"\\/bfnrt')),
                                                         Sequence((_lit("u"), Repeat(_hex_digits(0, 15), 4, 4)))))))))
            return Sequence((_lit('"'), Repeat(char, 0, None), _lit('"')))
        return self.helper("json_string", build)

    def char_rule(self) -> RuleRef:
        return self.helper("json_char", lambda: _unit(_ALL))

    def integer_rule(self) -> RuleRef:
        return self.helper("json_integer", lambda: Sequence((
            Repeat(_lit("-"), 0, 1),
            Choice((_lit("0"), Sequence((CharClass(((0x31, 0x39),)), Repeat(CharClass(((0x30, 0x39),)), 0, None))))))))

    def number_rule(self) -> RuleRef:
        digits = Repeat(CharClass(((0x30, 0x39),)), 1, None)
        return self.helper("json_number", lambda: Sequence((
            self.integer_rule(),
            Repeat(Sequence((_lit("."), digits)), 0, 1),
            Repeat(Sequence((CharClass(((ord("e"), ord("e")), (ord("E"), ord("E")))),
                             Repeat(CharClass(((ord("+"), ord("+")), (ord("-"), ord("-")))), 0, 1),
                             digits)), 0, 1))))

    def fraction_rule(self) -> RuleRef:
        """A number with a non-zero digit after the point and no exponent: not an integer.
        ``"0"* [1-9]`` fixes which non-zero digit is the first, so the rule is unambiguous."""
        return self.helper("json_fraction", lambda: Sequence((
            self.integer_rule(), _lit("."), Repeat(_lit("0"), 0, None),
            CharClass(((0x31, 0x39),)), Repeat(CharClass(((0x30, 0x39),)), 0, None))))

    def any_value(self, depth: int) -> Maybe:
        key = self.fmt.depth_key(depth)
        if self.fmt.indent is not None and depth > MAX_INDENT_DEPTH:
            return None
        name = f"json_value_{key}" if self.fmt.indent is not None else "json_value"
        return self.helper(name, lambda: self._any_value_body(depth))

    def _any_value_body(self, depth: int) -> Expr:
        fmt = self.fmt
        inner = self.any_value(depth + 1)
        scalars = [_lit("null"), _lit("true"), _lit("false"), self.number_rule(), self.string_rule()]
        if inner is None:  # too deep for the indented form: only empty containers
            return Choice(tuple(scalars + [_lit("[]"), _lit("{}")]))
        sep = fmt.item(depth)
        array = Choice((fmt.empty("[]"), Sequence((fmt.open("[", depth), inner,
                                                   Repeat(Sequence((sep, inner)), 0, None),
                                                   fmt.close("]", depth)))))
        member = Sequence((self.string_rule(), fmt.key(), inner))
        obj = Choice((fmt.empty("{}"), Sequence((fmt.open("{", depth), member,
                                                 Repeat(Sequence((sep, member)), 0, None),
                                                 fmt.close("}", depth)))))
        return Choice(tuple(scalars + [array, obj]))

    # -- constants
    def constant(self, value: Any, depth: int) -> Maybe:
        fmt = self.fmt
        kind = _json_type_of(value)
        if kind == "null":
            return _lit("null")
        if kind == "boolean":
            return _lit("true" if value else "false")
        if kind in ("integer", "number"):
            return _alt(*[_lit(s) for s in _number_spellings(value)])
        if kind == "string":
            return self.named_string(value)
        if kind == "array":
            if not value:
                return fmt.empty("[]")
            items: List[Maybe] = []
            for i, element in enumerate(value):
                if i:
                    items.append(fmt.item(depth))
                items.append(self.constant(element, depth + 1))
            return _seq(fmt.open("[", depth), *items, fmt.close("]", depth))
        if not value:
            return fmt.empty("{}")
        members: List[Maybe] = []
        for i, (key, element) in enumerate(value.items()):
            if i:
                members.append(fmt.item(depth))
            members += [self.named_string(key), fmt.key(), self.constant(element, depth + 1)]
        return _seq(fmt.open("{", depth), *members, fmt.close("}", depth))

    def named_string(self, text: str) -> Maybe:
        """A string the schema names (a declared key, an enum/const string): only its canonical
        spelling, so that a model cannot wander off through an escaped one, unless
        any_string_spelling asks for every spelling (to validate existing text)."""
        return _string_constant(text) if self.any_spelling else _canonical_string(text)

    # -- schemas
    def keywords(self, schema: Any, ptr: str) -> Dict[str, Any]:
        """The JSON Schema keywords of an object schema (annotations and unknown keys dropped),
        after checking that it is an object and that every keyword is supported. Draft-04's
        boolean exclusiveMinimum/exclusiveMaximum become the numeric form; then/else without
        if are dropped (they mean nothing alone)."""
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {ptr} must be an object or a boolean, got {schema!r}")
        self.check_keywords(schema, ptr)
        out = {k: v for k, v in schema.items() if k in SUPPORTED or k in UNSUPPORTED}
        for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(out.get(exclusive), bool):
                if out.pop(exclusive) and inclusive in out:
                    out[exclusive] = out.pop(inclusive)
        if "if" not in out:
            out.pop("then", None)
            out.pop("else", None)
        if out.get("uniqueItems") is False:
            del out["uniqueItems"]
        return out

    def schema(self, schema: Any, ptr: str, depth: int) -> Maybe:
        if schema is True:
            return self.any_value(depth)
        if schema is False:
            return None
        siblings = self.keywords(schema, ptr)
        if "unevaluatedProperties" in siblings or "unevaluatedItems" in siblings:
            return self.schema(self.with_unevaluated(siblings, ptr), ptr, depth)
        if any(keyword in siblings for keyword in EXPANDED):
            return self.schema(self.merge(siblings, {}, ptr), ptr, depth)
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                raise GrammarError(f"$ref at {ptr} must be a string")
            del siblings["$ref"]
            if not self.asserts(siblings) or not self.ref_siblings_apply:
                return self.ref(ref, ptr, depth)
            # 2020-12: siblings apply too (older drafts ignore them; honouring them only narrows).
            return self.ref_with_siblings(ref, siblings, ptr, depth)
        if "allOf" in schema:
            subs = schema["allOf"]
            if not isinstance(subs, list) or not subs:
                raise GrammarError(f"'allOf' at {ptr} must be a non-empty list")
            del siblings["allOf"]
            if len(subs) == 1 and not self.asserts(siblings):
                return self.schema(subs[0], f"{ptr}/allOf/0", depth)
            merged: Any = siblings
            for i, sub in enumerate(subs):
                merged = self.merge(merged, sub, f"{ptr}/allOf/{i}")
            return self.schema(merged, ptr, depth)
        for keyword in ("anyOf", "oneOf"):
            if keyword in siblings:
                subs = siblings[keyword]
                if not isinstance(subs, list) or not subs:
                    raise GrammarError(f"'{keyword}' at {ptr} must be a non-empty list")
                del siblings[keyword]
                if keyword == "oneOf":
                    # Decided on the branches as written: with siblings S, "S and exactly one
                    # b_i" is anyOf_i(S and b_i and not b_j), so the complements needed are the
                    # branches' own, not those of the branches merged with S.
                    disjoint = self.disjoint_one_of(subs, ptr)
                    if disjoint is None:
                        self.relax_one_of(ptr)
                    keyword, subs = "anyOf", subs if disjoint is None else disjoint
                if self.asserts(siblings):
                    # allOf(siblings, anyOf(b...)) == anyOf(allOf(siblings, b)...)
                    return self.schema(self.merge(siblings, {keyword: subs}, ptr), ptr, depth)
                branches = [self.schema(s, f"{ptr}/{keyword}/{i}", depth) for i, s in enumerate(subs)]
                return _alt(*branches)
        if "enum" in siblings or "const" in siblings:
            return self.enum(siblings, ptr, depth)
        return _alt(*[self.typed(siblings, t, ptr, depth) for t in self.types(siblings, ptr)])

    def check_keywords(self, schema: dict, ptr: str) -> None:
        for keyword, value in schema.items():
            if keyword in UNSUPPORTED:
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}")
            if keyword in ("$id", "id") and ptr != "#" and isinstance(value, str) and self.uses_refs \
                    and not value.startswith("#") and '"$ref"' in json.dumps(schema):
                # A nested base URI changes what the '#/...' refs inside it refer to; without a
                # ref below it (or as a plain '#name' anchor) it changes nothing gxg resolves.
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}: a base URI for the "
                                   f"$ref inside it")
            if keyword == "uniqueItems" and value is True:
                # Relaxing it would accept arrays with repeated items, which real test suites
                # check; a context-free grammar cannot compare items.
                raise GrammarError(f"unsupported keyword 'uniqueItems' at {ptr}: a grammar cannot "
                                   f"compare array items")
            if keyword == "uniqueItems" and not isinstance(value, bool):
                raise GrammarError(f"'uniqueItems' at {ptr} must be a boolean")

    @staticmethod
    def asserts(schema: dict) -> bool:
        return any(k in SUPPORTED or k in UNSUPPORTED for k in schema
                   if not (k == "uniqueItems" and schema[k] is False))

    # -- unevaluatedProperties / unevaluatedItems
    def with_unevaluated(self, siblings: dict, ptr: str) -> Any:
        """The schema with unevaluated* turned into additionalProperties / the array rest of
        every merged branch. Exact after merging allOf/$ref (every subschema's properties are
        evaluated); anyOf/oneOf branches are merged one at a time, so a document valid only
        because two anyOf branches together evaluate its properties is rejected (narrowing).
        Refused where a negation is involved (not, if, dependentSchemas): the properties of a
        failed subschema are not evaluated, but its negation would declare them."""
        compile_budget.check("the JSON Schema converter", ptr)
        props = siblings.pop("unevaluatedProperties", None)
        items = siblings.pop("unevaluatedItems", None)
        keyword = "unevaluatedProperties" if props is not None else "unevaluatedItems"
        if self.reaches_negation(siblings):
            raise GrammarError(f"unsupported keyword '{keyword}' at {ptr} together with "
                               f"not / if / dependentSchemas")
        merged = self.merge(siblings, {}, ptr)

        def apply(schema: Any) -> Any:
            if schema is False:
                return False
            for combinator in ("anyOf", "oneOf"):
                if combinator in schema:
                    rest = {k: v for k, v in schema.items() if k != combinator}
                    return {**rest, combinator: [apply(self.merge(rest, b, ptr)) for b in schema[combinator]]}
            out = dict(schema)
            if props is not None and "additionalProperties" not in out:
                out["additionalProperties"] = props
            if items is not None:
                if "prefixItems" in out:
                    out.setdefault("items", items)
                elif isinstance(out.get("items"), list):
                    out.setdefault("additionalItems", items)
                else:
                    out.setdefault("items", items)
            return out

        return apply(merged)

    def reaches_negation(self, schema: Any) -> bool:
        seen, todo = set(), [schema]
        while todo:
            node = todo.pop()
            if isinstance(node, dict):
                for key, value in node.items():
                    if key in ("not", "if", "dependentSchemas", "dependencies") and not isinstance(value, (str, list)):
                        if key != "dependencies" or any(isinstance(v, dict) for v in value.values()):
                            return True
                    if key == "$ref" and isinstance(value, str) and value not in seen:
                        seen.add(value)
                        try:
                            todo.append(_resolve_pointer(self.root, value, "#")[0])
                        except compile_budget.CompileTimeoutError:
                            raise  # a deadline is not an inexpressible schema
                        except GrammarError:
                            pass
                    else:
                        todo.append(value)
            elif isinstance(node, list):
                todo.extend(node)
        return False

    # -- allOf: merging two schemas into one whose instances are those valid for both
    def normal(self, schema: Any, ptr: str, budget: List[int]) -> Any:
        """``schema`` without annotations, top-level $ref, allOf and the EXPANDED keywords
        (False, or a dict; it may hold anyOf/oneOf)."""
        compile_budget.check("the JSON Schema converter", ptr)
        budget[0] -= 1
        if budget[0] < 0:
            raise GrammarError(f"unsupported keyword 'allOf' at {ptr}: the merge does not terminate "
                               f"or grows too large")
        if schema is True:
            return {}
        if schema is False:
            return False
        out = self.keywords(schema, ptr)
        if "$ref" in out:
            target, target_ptr = _resolve_pointer(self.root, out.pop("$ref"), ptr)
            if not self.ref_siblings_apply:
                return self.normal(target, target_ptr, budget)
            return self.merge2(self.normal(target, target_ptr, budget), out, ptr, budget)
        if "allOf" in out:
            subs = out.pop("allOf")
            if not isinstance(subs, list):
                raise GrammarError(f"'allOf' at {ptr} must be a list")
            merged: Any = self.normal(out, ptr, budget)
            for i, sub in enumerate(subs):
                merged = self.merge2(merged, sub, f"{ptr}/allOf/{i}", budget)
            return merged
        if "not" in out:
            negated = self.negate(out.pop("not"), f"{ptr}/not", budget)
            return self.merge2(out, negated, ptr, budget)
        if "if" in out:
            # if/then/else == anyOf(allOf(if, then), allOf(not if, else)); the branches exclude
            # each other, so nothing is lost by compiling them as alternatives.
            condition, then, otherwise = out.pop("if"), out.pop("then", True), out.pop("else", True)
            negated = self.negate(condition, f"{ptr}/if", budget)
            branches = [self.merge2(condition, then, f"{ptr}/then", budget),
                        self.merge2(negated, otherwise, f"{ptr}/else", budget)]
            return self.merge2(out, {"anyOf": [b for b in branches if b is not False] or [False]}, ptr, budget)
        clauses = self.dependency_clauses(out, ptr)
        if clauses:
            merged = out
            for clause in clauses:
                merged = self.merge2(merged, clause, ptr, budget)
            return merged
        return out

    def dependency_clauses(self, out: dict, ptr: str) -> List[dict]:
        """dependentRequired / dependentSchemas / draft-04 dependencies as anyOf clauses:
        name absent, or name present and the dependency holds (the two exclude each other).
        Removes the keywords from ``out``."""
        clauses = []
        for keyword in ("dependentRequired", "dependentSchemas", "dependencies"):
            table = out.pop(keyword, None)
            if table is None:
                continue
            if not isinstance(table, dict):
                raise GrammarError(f"'{keyword}' at {ptr} must be an object")
            for name, dependency in table.items():
                absent = {"properties": {name: False}}
                if isinstance(dependency, list):
                    if not all(isinstance(d, str) for d in dependency):
                        raise GrammarError(f"'{keyword}' at {ptr}/{_escape_token(name)} must list strings")
                    present: Any = {"required": [name] + [d for d in dependency if d != name]}
                elif keyword != "dependentRequired" and isinstance(dependency, (dict, bool)):
                    present = {"allOf": [{"required": [name]}, dependency]}
                else:
                    raise GrammarError(f"'{keyword}' at {ptr}/{_escape_token(name)} must be a "
                                       f"{'list' if keyword == 'dependentRequired' else 'list or schema'}")
                clauses.append({"anyOf": [absent, present]})
        return clauses

    # -- not: the complement of a schema, as a schema
    def negate(self, schema: Any, ptr: str, budget: List[int]) -> Any:
        """A schema whose instances are exactly the JSON values ``schema`` rejects. A schema is
        the conjunction of its keywords, so its complement is the anyOf of the keywords'
        complements; a keyword that constrains one type is satisfied by every other type, so its
        complement holds only values of that type. Raises naming 'not' where the complement is
        not expressible here (e.g. multipleOf, uniqueItems, items)."""
        if isinstance(schema, dict) and "not" in schema and \
                not self.asserts({k: v for k, v in schema.items() if k != "not"}):
            return schema["not"]  # not (not x) == x: exact, where negating twice may not be
        flat = self.normal(schema, ptr, budget)
        if flat is False:
            return True
        branches: List[Any] = []
        rest = dict(flat)
        for combinator in ("anyOf", "oneOf"):
            if combinator in rest:
                subs = rest.pop(combinator)
                if combinator == "oneOf" and not self.provably_disjoint(subs):
                    raise GrammarError(f"unsupported keyword 'not' at {ptr}: the complement of a "
                                       f"oneOf whose branches may overlap")
                every: Any = {}
                for i, sub in enumerate(subs):  # not anyOf(a, b) == allOf(not a, not b)
                    every = self.merge2(every, self.negate(sub, f"{ptr}/{combinator}/{i}", budget),
                                        ptr, budget)
                branches.append(every)
        if "type" in rest:
            kinds = self.merged_types(rest.pop("type"), list(JSON_TYPES), ptr)
            integer_only = "integer" in kinds and "number" not in kinds
            others = [t for t in JSON_TYPES if t not in kinds and not (integer_only and t == "number")]
            if others:
                branches.append({"type": others})
            if integer_only:
                # numbers that are not integers; narrowed to fractions without exponent
                branches.append({"type": "number", "x-gxg-fraction": True})
        if "enum" in rest or "const" in rest:
            values = rest.pop("enum") if "enum" in rest else [rest["const"]]
            if "const" in rest:
                const = rest.pop("const")
                values = [v for v in values if _canonical(v) == _canonical(const)]
            branches.extend(self.negate_values(values, ptr))
        for keyword, value in rest.items():
            branches.extend(self.negate_keyword(keyword, value, ptr, budget))
        return {"anyOf": branches} if branches else False

    def negate_values(self, values: list, ptr: str) -> List[Any]:
        """Every JSON value except ``values``."""
        present = {_json_type_of(v) for v in values}
        out: List[Any] = []
        numeric = present & {"integer", "number"}
        others = [t for t in JSON_TYPES if t not in present and not (numeric and t in ("integer", "number"))]
        if others:
            out.append({"type": others})
        if "boolean" in present:
            flags = {v for v in values if isinstance(v, bool)}
            out.extend({"const": flag} for flag in (True, False) if flag not in flags)
        if "string" in present:
            out.append({"type": "string", "x-gxg-not-strings": sorted({v for v in values if isinstance(v, str)})})
        if numeric:
            points = sorted({_decimal(v) for v in values if _json_type_of(v) in ("integer", "number")})
            out.append({"type": "number", "exclusiveMaximum": _json_number(points[0])})
            for low, high in zip(points, points[1:]):
                out.append({"type": "number", "exclusiveMinimum": _json_number(low),
                            "exclusiveMaximum": _json_number(high)})
            out.append({"type": "number", "exclusiveMinimum": _json_number(points[-1])})
        if present & {"array", "object"}:
            raise GrammarError(f"unsupported keyword 'not' at {ptr}: the complement of an array or "
                               f"object constant")
        return out

    def negate_keyword(self, keyword: str, value: Any, ptr: str, budget: List[int]) -> List[Any]:
        def refuse(why: str = "") -> GrammarError:
            return GrammarError(f"unsupported keyword 'not' at {ptr}: the complement of "
                                f"'{keyword}'{why} is not supported")

        def count() -> int:
            return self.count({keyword: value}, keyword, ptr, 0)

        if keyword == "minLength":
            return [{"type": "string", "maxLength": count() - 1}] if count() > 0 else []
        if keyword == "maxLength":
            return [{"type": "string", "minLength": count() + 1}]
        if keyword == "minItems":
            return [{"type": "array", "maxItems": count() - 1}] if count() > 0 else []
        if keyword == "maxItems":
            return [{"type": "array", "minItems": count() + 1}]
        if keyword == "minProperties":
            return [{"type": "object", "maxProperties": count() - 1}] if count() > 0 else []
        if keyword == "maxProperties":
            return [{"type": "object", "minProperties": count() + 1}]
        flipped = {"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum",
                   "exclusiveMinimum": "maximum", "exclusiveMaximum": "minimum"}
        if keyword in flipped:
            return [{"type": "number", flipped[keyword]: value}]
        if keyword in ("pattern", "format", "x-gxg-regexes"):
            regexes = self.string_regexes({keyword: value}, ptr)
            # not (r1 and r2 ...) == (not r1) or (not r2) ...
            return [{"type": "string", "x-gxg-regexes": [[r, search, not negated, kw]]}
                    for r, search, negated, kw in regexes]
        if keyword == "x-gxg-not-strings":
            return [{"type": "string", "enum": list(value)}] if value else []
        if keyword == "required":
            if not isinstance(value, list):
                raise GrammarError(f"'required' at {ptr} must be a list of strings")
            return [{"type": "object", "properties": {name: False}} for name in dict.fromkeys(value)]
        if keyword == "properties":
            if not isinstance(value, dict):
                raise GrammarError(f"'properties' at {ptr} must be an object")
            out = []
            for name, sub in value.items():
                if sub is True or sub == {}:
                    continue
                negated = self.negate(sub, f"{ptr}/properties/{_escape_token(name)}", budget)
                if negated is not False:
                    out.append({"type": "object", "required": [name], "properties": {name: negated}})
            return out
        if keyword in ("additionalProperties", "items", "additionalItems", "propertyNames",
                       "unevaluatedProperties", "unevaluatedItems") and value is True:
            return []
        if keyword == "items" and value is False:
            return [{"type": "array", "minItems": 1}]
        if keyword == "items" and isinstance(value, dict):
            # some item violates the schema: contains (not items)
            negated = self.negate(value, f"{ptr}/items", budget)
            return [] if negated is False else [{"type": "array", "contains": negated}]
        if keyword == "contains":
            negated = self.negate(value, f"{ptr}/contains", budget)
            return [{"type": "array", "items": negated}]  # every item violates it (or none exist)
        if keyword == "uniqueItems" and value is False:
            return []
        if keyword == "x-gxg-fraction":  # its language is narrowed: the complement would widen
            raise GrammarError(f"unsupported keyword 'not' at {ptr}: the complement of 'not' "
                               f"of type integer")
        raise refuse()

    def merge(self, a: Any, b: Any, ptr: str, budget: Optional[List[int]] = None) -> Any:
        """allOf(a, b) as one schema; ``budget``: the normalisations it may take (a fresh
        MERGE_BUDGET when None), decremented as it goes."""
        try:
            return self.merge2(a, b, ptr, [MERGE_BUDGET] if budget is None else budget)
        except RecursionError:  # a $ref cycle through allOf keeps unfolding
            raise GrammarError(f"unsupported keyword 'allOf' at {ptr}: the merge does not terminate") from None

    def merge2(self, a: Any, b: Any, ptr: str, budget: List[int]) -> Any:
        a, b = self.normal(a, ptr, budget), self.normal(b, ptr, budget)
        if a is False or b is False:
            return False
        for keyword in ("anyOf", "oneOf"):
            for one, other in ((a, b), (b, a)):
                if keyword in one:
                    # allOf(x, anyOf(b...)) == anyOf(allOf(x, b)...); for oneOf, "exactly one of
                    # (x and b_i)" == x and exactly one b_i. ``other`` may hold its own anyOf /
                    # oneOf: distributing again takes the product of the branches.
                    rest = {k: v for k, v in one.items() if k != keyword}
                    base = self.merge2(rest, other, ptr, budget)
                    if base is False:
                        return False
                    branches, kind = one[keyword], keyword
                    if keyword == "oneOf" and isinstance(branches, list) and branches:
                        # exclusivity decided on the branches as written (see schema())
                        disjoint = self.disjoint_one_of(branches, ptr)
                        if disjoint is not None:
                            branches, kind = disjoint, "anyOf"
                    merged = [self.merge2(base, branch, f"{ptr}/{keyword}/{i}", budget)
                              for i, branch in enumerate(branches)]
                    # A branch that became unsatisfiable can never hold (nor be oneOf's "the
                    # one"), so dropping it keeps the meaning.
                    kept = [m for m in merged if m is not False]
                    return {kind: kept} if kept else False
        out: Dict[str, Any] = {}
        object_keys = ("properties", "additionalProperties", "patternProperties")
        array_keys = ("items", "prefixItems", "additionalItems")
        for key in list(a) + [k for k in b if k not in a]:
            if key in object_keys or key in array_keys:
                continue
            if key not in a or key not in b:
                out[key] = a[key] if key in a else b[key]
                continue
            x, y = a[key], b[key]
            if key == "type":
                kinds = self.merged_types(x, y, ptr)
                if not kinds:
                    return False
                out[key] = kinds
            elif key == "required":
                out[key] = list(dict.fromkeys(list(x) + list(y)))
            elif key == "enum":
                keep = {_canonical(v) for v in y}
                out[key] = [v for v in x if _canonical(v) in keep]
            elif key == "const":
                if _canonical(x) != _canonical(y):
                    return False
                out[key] = x
            elif key in ("minLength", "minItems", "minProperties"):
                out[key] = max(x, y)
            elif key in ("maxLength", "maxItems", "maxProperties"):
                out[key] = min(x, y)
            elif key in ("minimum", "exclusiveMinimum"):
                out[key] = x if _decimal(x) >= _decimal(y) else y
            elif key in ("maximum", "exclusiveMaximum"):
                out[key] = x if _decimal(x) <= _decimal(y) else y
            elif key == "multipleOf":
                dx, dy = _decimal(x), _decimal(y)
                if dx > 0 and dy > 0 and (dx % dy == 0 or dy % dx == 0):
                    out[key] = x if dx >= dy else y
                elif _canonical(x) != _canonical(y):
                    raise GrammarError(f"unsupported keyword 'allOf' merging two different "
                                       f"'multipleOf' at {ptr}")
                else:
                    out[key] = x
            elif key in ("pattern", "format", "x-gxg-regexes"):
                out[key] = x
                if _canonical(x) != _canonical(y):  # both must hold: keep the second as internal
                    extra = self.string_regexes({key: y}, ptr)
                    out["x-gxg-regexes"] = list(out.get("x-gxg-regexes", [])) + [list(r) for r in extra]
            elif key == "x-gxg-not-strings":
                out[key] = sorted(set(x) | set(y))
            elif key == "uniqueItems":
                out[key] = bool(x or y)
            elif key == "contains" and _canonical(x) != _canonical(y):
                raise GrammarError(f"unsupported keyword 'contains' at {ptr}: two different "
                                   f"'contains' (two witnesses) in one array")
            elif key == "propertyNames":
                out[key] = self.merge2(x, y, f"{ptr}/propertyNames", budget)
            elif _canonical(x) != _canonical(y):
                raise GrammarError(f"unsupported keyword 'allOf' merging two different '{key}' at {ptr}")
            else:
                out[key] = x
        self.merge_object(a, b, out, ptr, budget)
        self.merge_array(a, b, out, ptr, budget)
        return out

    @staticmethod
    def merged_types(x: Any, y: Any, ptr: str) -> List[str]:
        def expand(t):
            names = set(t if isinstance(t, list) else [t])
            return names | {"integer"} if "number" in names else names
        both = expand(x) & expand(y)
        return [t for t in JSON_TYPES if t in both]

    def merge_object(self, a: dict, b: dict, out: dict, ptr: str, budget: List[int]) -> None:
        props_a, props_b = a.get("properties", {}), b.get("properties", {})
        pats_a, pats_b = a.get("patternProperties", {}), b.get("patternProperties", {})
        for value, keyword in ((props_a, "properties"), (props_b, "properties"),
                               (pats_a, "patternProperties"), (pats_b, "patternProperties")):
            if not isinstance(value, dict):
                raise GrammarError(f"'{keyword}' at {ptr} must be an object")
        extra_a, extra_b = "additionalProperties" in a, "additionalProperties" in b
        if (extra_a or extra_b) and not pats_a and not pats_b:
            # Each side judges the names it does not declare with its additionalProperties, so a
            # name declared on one side only meets the other side's additionalProperties, and an
            # undeclared name meets both.
            def side(props: dict, has_extra: bool, extra: Any, name: str) -> Any:
                return props[name] if name in props else (extra if has_extra else True)
            merged = {}
            for name in list(props_a) + [n for n in props_b if n not in props_a]:
                one = side(props_a, extra_a, a.get("additionalProperties"), name)
                two = side(props_b, extra_b, b.get("additionalProperties"), name)
                merged[name] = self.merge2(one, two, f"{ptr}/properties/{_escape_token(name)}", budget) \
                    if one is not True and two is not True else (two if one is True else one)
            out["properties"] = merged
            out["additionalProperties"] = self.merge2(a.get("additionalProperties", True),
                                                      b.get("additionalProperties", True),
                                                      f"{ptr}/additionalProperties", budget)
            return
        if extra_a and extra_b:
            raise GrammarError(f"unsupported keyword 'allOf' merging two 'additionalProperties' at {ptr}")
        # additionalProperties of one side judges every name outside its own properties and
        # patterns, so the other side may only constrain names that side already declares.
        for one, other, one_pats, other_pats, has_extra in ((props_a, props_b, pats_a, pats_b, extra_a),
                                                            (props_b, props_a, pats_b, pats_a, extra_b)):
            if has_extra and not (set(other) <= set(one) and set(other_pats) <= set(one_pats)):
                raise GrammarError(f"unsupported keyword 'allOf' merging 'additionalProperties' with "
                                   f"properties declared elsewhere at {ptr}")
        for table_a, table_b, keyword in ((props_a, props_b, "properties"), (pats_a, pats_b, "patternProperties")):
            merged = {}
            for name in list(table_a) + [n for n in table_b if n not in table_a]:
                if name in table_a and name in table_b:
                    merged[name] = self.merge2(table_a[name], table_b[name],
                                               f"{ptr}/{keyword}/{_escape_token(name)}", budget)
                else:
                    merged[name] = table_a[name] if name in table_a else table_b[name]
            if merged or keyword in a or keyword in b:
                out[keyword] = merged
        if extra_a or extra_b:
            out["additionalProperties"] = a["additionalProperties"] if extra_a else b["additionalProperties"]

    def merge_array(self, a: dict, b: dict, out: dict, ptr: str, budget: List[int]) -> None:
        keys = ("items", "prefixItems", "additionalItems")
        tuple_a = "prefixItems" in a or "additionalItems" in a or isinstance(a.get("items"), list)
        tuple_b = "prefixItems" in b or "additionalItems" in b or isinstance(b.get("items"), list)
        has_a, has_b = any(k in a for k in keys), any(k in b for k in keys)
        if has_a and has_b:
            if tuple_a or tuple_b:
                raise GrammarError(f"unsupported keyword 'allOf' merging two array item lists at {ptr}")
            out["items"] = self.merge2(a["items"], b["items"], f"{ptr}/items", budget)
            return
        for side in (a, b):
            for key in keys:
                if key in side:
                    out[key] = side[key]

    def ref(self, ref: str, ptr: str, depth: int) -> Maybe:
        target, target_ptr = _resolve_pointer(self.root, ref, ptr)
        if self.fmt.indent is not None and depth > MAX_INDENT_DEPTH:
            return None
        key = (target_ptr, self.fmt.depth_key(depth))
        if key in self.empty_refs:
            return None
        if key in self.ref_rules:
            name = self.ref_rules[key]
            self.referenced.add(name)
            return RuleRef(name)
        hint = "ref_" + (target_ptr[2:].rsplit("/", 1)[-1] if len(target_ptr) > 2 else "root")
        name = self.new_rule(hint if self.fmt.indent is None else f"{hint}_d{depth}")
        self.ref_rules[key] = name
        self.rule_pointer[name] = target_ptr
        body = self.schema(target, target_ptr, depth)
        if body is None:
            if name in self.referenced:
                raise GrammarError(f"schema at {target_ptr} admits no finite JSON value")
            del self.rules[name]
            del self.ref_rules[key]
            self.empty_refs.add(key)
            return None
        self.rules[name] = body
        self.referenced.add(name)
        return RuleRef(name)

    def ref_with_siblings(self, ref: str, siblings: dict, ptr: str, depth: int) -> Maybe:
        """``{$ref, assertions...}`` as one rule per (target, assertions): the merged schema may
        contain the same combination again (a recursive definition), which then refers back to
        the rule instead of unfolding forever."""
        _, target_ptr = _resolve_pointer(self.root, ref, ptr)
        key = ("ref+", target_ptr, _canonical(siblings), self.fmt.depth_key(depth))
        if key in self.cache:
            return self.cache[key]
        name = self.new_rule("ref_" + target_ptr.rsplit("/", 1)[-1])
        self.cache[key] = RuleRef(name)
        body = self.schema(self.merge(siblings, {"$ref": ref}, ptr), ptr, depth)
        self.rules[name] = body
        if body is None:
            self.cache[key] = None  # a use inside it saw the RuleRef: the checks at the end catch it
            return None
        return RuleRef(name)

    def types(self, schema: dict, ptr: str) -> List[str]:
        declared = schema.get("type", list(JSON_TYPES))
        names = declared if isinstance(declared, list) else [declared]
        for name in names:
            if name not in JSON_TYPES:
                raise GrammarError(f"unknown type {name!r} at {ptr}")
        if "number" in names:  # a number may be an integer; one grammar covers both
            names = [n for n in names if n != "integer"]
        return list(dict.fromkeys(names))

    def enum(self, schema: dict, ptr: str, depth: int) -> Maybe:
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list):
                raise GrammarError(f"'enum' at {ptr} must be a list")
        else:
            values = [schema["const"]]
        others = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if "const" in schema:
            values = [v for v in values if _canonical(v) == _canonical(schema["const"])]
        kept, seen = [], set()
        for value in values:
            if _canonical(value) in seen or not self.satisfies(value, others, ptr):
                continue
            seen.add(_canonical(value))
            kept.append(value)
        return _alt(*[self.constant(v, depth) for v in kept])

    def count(self, schema: dict, keyword: str, ptr: str, default):
        if keyword not in schema:
            return default
        value = schema[keyword]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise GrammarError(f"'{keyword}' at {ptr} must be a non-negative integer")
        return value

    def upper_bound(self, schema: dict, keyword: str, ptr: str) -> Optional[int]:
        """maxLength / maxItems / maxProperties for the grammar. Each allowed count is its own
        chain of automaton states whose token masks are all computed at compile time (about
        10 ms each with a 150k vocabulary), so rather than compile for minutes a bound above
        MAX_EXACT_BOUND is not enforced (None), announced with a ``JsonSchemaRelaxationWarning``:
        the keyword only narrows the language, and a value that long is beyond a decoding
        budget."""
        bound = self.count(schema, keyword, ptr, None)
        if bound is not None and bound > MAX_EXACT_BOUND:
            warnings.warn(f"{keyword} at {ptr} is not enforced: {bound} is above "
                          f"{MAX_EXACT_BOUND}, the largest bound compiled exactly",
                          JsonSchemaRelaxationWarning, stacklevel=4)
            return None
        return bound

    def typed(self, schema: dict, type_name: str, ptr: str, depth: int) -> Maybe:
        if type_name == "null":
            return _lit("null")
        if type_name == "boolean":
            return Choice((_lit("true"), _lit("false")))
        if type_name in ("integer", "number"):
            bounds = {k: schema[k] for k in NUMERIC_BOUNDS if k in schema}
            if schema.get("x-gxg-fraction"):
                if type_name == "integer":
                    return None
                if bounds:
                    raise GrammarError(f"unsupported keyword 'not' at {ptr}: the complement of type "
                                       f"integer together with {', '.join(sorted(bounds))}")
                return self.fraction_rule()
            if not bounds:
                return self.integer_rule() if type_name == "integer" else self.number_rule()
            return self.number_language(type_name == "integer", bounds, ptr)
        if type_name == "string":
            return self.string(schema, ptr)
        if type_name == "array":
            return self.array(schema, ptr, depth)
        return self.object(schema, ptr, depth)

    # -- numbers
    def number_language(self, integer: bool, bounds: dict, ptr: str) -> Maybe:
        key = ("number", integer, _canonical(bounds))
        if key in self.cache:
            return self.cache[key]
        for keyword, value in bounds.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    (isinstance(value, float) and not math.isfinite(value)):
                raise GrammarError(f"'{keyword}' at {ptr} must be a number")
        if "multipleOf" in bounds and _decimal(bounds["multipleOf"]) <= 0:
            raise GrammarError(f"'multipleOf' at {ptr} must be greater than 0")
        try:
            expr = json_number_language(
                integer=integer, minimum=bounds.get("minimum"), maximum=bounds.get("maximum"),
                exclusive_minimum=bounds.get("exclusiveMinimum"),
                exclusive_maximum=bounds.get("exclusiveMaximum"),
                multiple_of=bounds.get("multipleOf"), new_rule=self.add_rule)
        except compile_budget.CompileTimeoutError:
            raise  # a deadline is not an inexpressible schema
        except GrammarError as exc:
            raise GrammarError(f"{exc.message} (at {ptr})") from None
        expr = self.share(expr, "integer" if integer else "number")
        self.cache[key] = expr
        return expr

    # -- strings
    def string(self, schema: dict, ptr: str) -> Maybe:
        lo = self.count(schema, "minLength", ptr, 0)
        hi = self.upper_bound(schema, "maxLength", ptr)
        if hi is not None and hi < lo:
            return None
        regexes = self.string_regexes(schema, ptr)
        excluded = schema.get("x-gxg-not-strings", [])
        if not regexes and not excluded:
            if lo == 0 and hi is None:
                return self.string_rule()
            # One rule per (minLength, maxLength): a schema repeats the same bounds on many
            # properties, and each inline copy is hi units' worth of automaton nodes whose token
            # masks the compiler computes again. The units stay inline inside the rule.
            key = ("bounded_string", lo, hi)
            if key not in self.cache:
                self.cache[key] = self.share(
                    Sequence((_lit('"'), Repeat(_unit(_ALL), lo, hi), _lit('"'))), "string_bounded")
            return self.cache[key]
        if not excluded and lo == 0 and hi is None and len(regexes) == 1 and not regexes[0][2]:
            regex, search, _, keyword = regexes[0]
            return _seq(_lit('"'), self.regex_body(regex, search, keyword, ptr), _lit('"'))
        if not regexes and lo == 0 and hi is None:
            return self.key_excluding(list(excluded))
        dfa = self.string_dfa(schema, ptr)
        body = self.dfa_expr(dfa, "string")
        return _seq(_lit('"'), body, _lit('"'))

    def string_regexes(self, schema: dict, ptr: str) -> List[Tuple[str, bool, bool, str]]:
        """(regex, search, negated, keyword) the decoded string must satisfy: 'pattern' matches
        anywhere (ECMAScript search), a known 'format' in full, unknown formats are ignored (JSON
        Schema: annotations)."""
        out: List[Tuple[str, bool, bool, str]] = []
        if "pattern" in schema:
            if not isinstance(schema["pattern"], str):
                raise GrammarError(f"'pattern' at {ptr} must be a string")
            out.append((schema["pattern"], True, False, "pattern"))
        if "format" in schema:
            name = schema["format"]
            regex = format_pattern(name) if isinstance(name, str) else None
            if regex is not None:
                out.append((regex, False, False, "format"))
        for entry in schema.get("x-gxg-regexes", []):
            out.append(tuple(entry))
        return out

    def string_dfa(self, schema: dict, ptr: str):
        """The decoded values a (flat) string schema admits, as a DFA: lengths, regexes, excluded
        values and, for property names, enum/const."""
        lo = self.count(schema, "minLength", ptr, 0)
        hi = self.upper_bound(schema, "maxLength", ptr)
        keyword = "pattern"
        try:
            dfa = dfa_ops.length_between(lo, hi) if (lo or hi is not None) else dfa_ops.any_string()
            for regex, search, negated, keyword in self.string_regexes(schema, ptr):
                part = self.regex_dfa(regex, search, keyword, ptr)
                dfa = dfa_ops.difference(dfa, part) if negated else dfa_ops.intersect(dfa, part)
            if schema.get("x-gxg-not-strings"):
                dfa = dfa_ops.difference(dfa, dfa_ops.literal_strings(schema["x-gxg-not-strings"]))
            return dfa
        except dfa_ops.DfaTooLarge as exc:
            raise GrammarError(f"unsupported keyword '{keyword}' at {ptr} combined with lengths or "
                               f"other patterns: {exc}") from None

    def regex_grammar(self, regex: str, search: bool, keyword: str, ptr: str) -> Grammar:
        key = ("regex", regex, search)
        if key not in self.cache:
            try:
                self.cache[key] = regex_to_grammar(regex, search=search, dot_all=False)
            except compile_budget.CompileTimeoutError:
                raise  # a deadline is not an inexpressible schema
            except GrammarError as exc:
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}: {regex!r}: {exc}") from None
        return self.cache[key]

    def regex_dfa(self, regex: str, search: bool, keyword: str, ptr: str):
        key = ("dfa", regex, search)
        if key not in self.cache:
            grammar = self.regex_grammar(regex, search, keyword, ptr)
            try:
                self.cache[key] = dfa_ops.dfa_from_grammar(grammar)
            except dfa_ops.DfaTooLarge as exc:
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}: {regex!r}: {exc}") from None
        return self.cache[key]

    def regex_body(self, regex: str, search: bool, keyword: str, ptr: str) -> Maybe:
        """The JSON spellings (raw or escaped units) of the strings ``regex`` matches: the
        regex's rules copied with each code point set replaced by its units."""
        key = ("body", regex, search)
        if key in self.cache:
            return self.cache[key]
        grammar = self.regex_grammar(regex, search, keyword, ptr)
        names = {rule.name: self.new_rule(keyword) for rule in grammar.rules}

        def spell(expr: Expr) -> Maybe:
            if isinstance(expr, Literal):
                return _seq(*[self.unit(((ord(c), ord(c)),)) for c in expr.data.decode("utf-8")])
            if isinstance(expr, CharClass):
                return self.unit(expr.effective_ranges())
            if isinstance(expr, RuleRef):
                return RuleRef(names[expr.name])
            if isinstance(expr, Sequence):
                return _seq(*[spell(item) for item in expr.items])
            if isinstance(expr, Choice):
                return _alt(*[spell(item) for item in expr.alternatives])
            return _rep(spell(expr.expr), expr.min, expr.max)

        for rule in grammar.rules:
            self.rules[names[rule.name]] = spell(rule.body)
        body: Maybe = RuleRef(names[grammar.root_rule_name])
        if self.rules[names[grammar.root_rule_name]] is None:
            body = None
        self.cache[key] = body
        return body

    def unit(self, ranges) -> Maybe:
        """One JSON string unit whose code point is in ``ranges``, shared as a rule."""
        ranges = tuple(_subtract_all(ranges, [(0xD800, 0xDFFF)]))
        if ranges == ((0, 0xD7FF), (0xE000, 0x10FFFF)):
            return self.char_rule()
        key = ("unit", ranges)
        if key not in self.cache:
            expr = _unit(ranges)
            if expr is not None and not isinstance(expr, (Literal, CharClass)):
                name = self.new_rule("json_unit")
                self.rules[name] = expr
                expr = RuleRef(name)
            self.cache[key] = expr
        return self.cache[key]

    def dfa_expr(self, dfa, hint: str, named: bool = False) -> Maybe:
        """The JSON spellings of the strings ``dfa`` accepts (right-linear rules); ``named``:
        the strings are named by the schema, so spelled as ``named_string`` spells them."""
        def define(ref: RuleRef, body: Expr) -> None:
            self.rules[ref.name] = body
        unit = _canonical_unit if named and not self.any_spelling else self.inline_unit
        return dfa_to_expr(dfa, unit, lambda h: RuleRef(self.new_rule(h)), hint, define_rule=define)

    def inline_unit(self, ranges) -> Maybe:
        """One JSON string unit whose code point is in ``ranges``, as an expression: a string
        automaton spells its units in place, because a unit rule shared by hundreds of states
        makes every node inside it escape into all of them when the masks are computed."""
        ranges = tuple(_subtract_all(ranges, [(0xD800, 0xDFFF)]))
        return _unit_cached(ranges)

    def add_rule(self, hint, body: Optional[Expr]) -> RuleRef:
        """json_numbers' rule callback: ``(hint, body)`` adds a rule, ``(hint, None)`` reserves
        one, ``(ref, body)`` gives a reserved rule its body."""
        if isinstance(hint, RuleRef):
            self.rules[hint.name] = body
            return hint
        name = self.new_rule(hint)
        self.rules[name] = body
        return RuleRef(name)

    def within(self, size: int, schema: dict, low: str, high: str, ptr: str) -> bool:
        top = self.count(schema, high, ptr, None)
        return self.count(schema, low, ptr, 0) <= size and (top is None or size <= top)

    # -- checking a constant against a schema (enum/const with sibling keywords, property names)
    def satisfies(self, value: Any, schema: Any, ptr: str) -> bool:
        flat = self.normal(schema, ptr, [MERGE_BUDGET])
        if flat is False:
            return False
        rest = dict(flat)
        for combinator in ("anyOf", "oneOf"):
            if combinator in rest:
                results = [self.satisfies(value, b, ptr) for b in rest.pop(combinator)]
                if not (any(results) if combinator == "anyOf" else sum(results) == 1):
                    return False
        kind = _json_type_of(value)
        if "type" in rest and not any(_has_type(value, t) for t in self.types(rest, ptr)):
            return False
        if "enum" in rest and _canonical(value) not in {_canonical(v) for v in rest["enum"]}:
            return False
        if "const" in rest and _canonical(value) != _canonical(rest["const"]):
            return False
        if kind == "string":
            if not self.within(len(value), rest, "minLength", "maxLength", ptr):
                return False
            for regex, search, negated, keyword in self.string_regexes(rest, ptr):
                if self.regex_dfa(regex, search, keyword, ptr).accepts(value) == negated:
                    return False
            if value in rest.get("x-gxg-not-strings", []):
                return False
        if kind in ("integer", "number"):
            number = _decimal(value)
            checks = {"minimum": lambda b: number >= b, "maximum": lambda b: number <= b,
                      "exclusiveMinimum": lambda b: number > b, "exclusiveMaximum": lambda b: number < b,
                      "multipleOf": lambda b: b > 0 and number % b == 0}
            for keyword, check in checks.items():
                if keyword in rest and not check(_decimal(rest[keyword])):
                    return False
            if rest.get("x-gxg-fraction") and number % 1 == 0:
                return False
        if kind == "array":
            if not self.within(len(value), rest, "minItems", "maxItems", ptr):
                return False
            prefix = rest.get("prefixItems", rest["items"] if isinstance(rest.get("items"), list) else [])
            rest_key = "additionalItems" if isinstance(rest.get("items"), list) or \
                ("prefixItems" in rest and "items" not in rest) else "items"
            default_rest = not (self.strict and prefix)
            for i, item in enumerate(value):
                sub = prefix[i] if i < len(prefix) else rest.get(rest_key, default_rest)
                if not self.satisfies(item, sub, ptr):
                    return False
            if rest.get("uniqueItems") is True and len({_canonical(v) for v in value}) != len(value):
                return False
            if "contains" in rest and not any(self.satisfies(v, rest["contains"], ptr) for v in value):
                return False
        if kind == "object":
            if not self.within(len(value), rest, "minProperties", "maxProperties", ptr):
                return False
            if any(name not in value for name in rest.get("required", [])):
                return False
            properties, patterns = rest.get("properties", {}), rest.get("patternProperties", {})
            extra = rest.get("additionalProperties", not (self.strict and (properties or patterns)))
            for name, item in value.items():
                if "propertyNames" in rest and not self.satisfies(name, rest["propertyNames"], ptr):
                    return False
                matched = [s for p, s in patterns.items()
                           if self.regex_dfa(p, True, "patternProperties", ptr).accepts(name)]
                subs = ([properties[name]] if name in properties else []) + matched
                for sub in subs or [extra]:
                    if not self.satisfies(item, sub, ptr):
                        return False
        return True

    def array(self, schema: dict, ptr: str, depth: int) -> Maybe:
        if "contains" in schema:
            return self.array_containing(schema, ptr, depth)
        fmt = self.fmt
        items = schema.get("items", None)
        if "prefixItems" in schema:
            prefix, prefix_key = schema["prefixItems"], "prefixItems"
            rest_key = "items" if "items" in schema else "additionalItems"
        elif isinstance(items, list):  # draft-04..2019-09 tuple form
            prefix, prefix_key, rest_key = items, "items", "additionalItems"
        else:
            prefix, prefix_key, rest_key = [], None, "items"
        if not isinstance(prefix, list):
            raise GrammarError(f"'{prefix_key}' at {ptr} must be a list")
        default_rest = not (self.strict and prefix)
        rest_schema = schema.get(rest_key, default_rest)
        lo = self.count(schema, "minItems", ptr, 0)
        hi = self.upper_bound(schema, "maxItems", ptr)
        parts = [self.share(self.schema(s, f"{ptr}/{prefix_key}/{i}", depth + 1), "item")
                 for i, s in enumerate(prefix)]
        rest = self.share(self.schema(rest_schema, f"{ptr}/{rest_key}", depth + 1), "item")
        sep = fmt.item(depth)
        open_, close = fmt.open("[", depth), fmt.close("]", depth)
        alternatives: List[Maybe] = []
        if lo == 0:
            alternatives.append(fmt.empty("[]"))
        k = len(parts)
        if k:
            # What may follow the n-th prefix item (n = k .. 1), built from the end: the array
            # may close after n items when n is within [minItems, maxItems] (after all k, the
            # rest items follow); or the next prefix item comes. Each a rule, so that k items
            # take O(k) grammar, not the O(k^2) of one alternative per count.
            more_lo, more_hi = max(0, lo - k), (None if hi is None else hi - k)
            after: Maybe = _rep(_seq(sep, rest), more_lo, more_hi) \
                if more_hi is None or more_hi >= more_lo else None
            for n in range(k - 1, 0, -1):
                stop = EMPTY if lo <= n and (hi is None or n <= hi) else None
                after = self.share(_alt(stop, _seq(sep, parts[n], after)), "items_after")
            alternatives.append(_seq(open_, parts[0], after, close))
        if k == 0 and rest is not None:
            first = max(1, lo)
            if hi is None or hi >= first:
                alternatives.append(_seq(open_, rest, _rep(_seq(sep, rest), first - 1,
                                                           None if hi is None else hi - 1), close))
        return _alt(*alternatives)

    def array_containing(self, schema: dict, ptr: str, depth: int) -> Maybe:
        """``contains: C`` with ``items: S``. Without count bounds: ``[ (S ,)* S∧C (, S)* ]``
        (some item is a witness; which one the parse picks does not change the language). With
        minItems > 1 or maxItems: the first witness, ``[ (S∧¬C ,){a} S∧C (, S){b} ]`` with
        ``a + 1 + b`` in bounds (needs C's complement; at most MAX_CONTAINS_COUNT items). Not
        with tuple items."""
        fmt = self.fmt
        items = schema.get("items", True)
        lo = self.count(schema, "minItems", ptr, 0)
        hi = self.upper_bound(schema, "maxItems", ptr)
        if "prefixItems" in schema or isinstance(items, list):
            raise GrammarError(f"unsupported keyword 'contains' at {ptr} with tuple items")
        item = self.share(self.schema(items, f"{ptr}/items", depth + 1), "item")
        witness = self.schema(self.merge(items, schema["contains"], f"{ptr}/contains"),
                              f"{ptr}/contains", depth + 1)
        if witness is None:
            return None
        sep = fmt.item(depth)
        if lo <= 1 and hi is None:
            before = _rep(_seq(item, sep), 0, None)
            after = _rep(_seq(sep, item), 0, None)
            return _seq(fmt.open("[", depth), before, witness, after, fmt.close("]", depth))
        if hi is not None and hi > MAX_CONTAINS_COUNT or hi is None and lo > MAX_CONTAINS_COUNT:
            raise GrammarError(f"unsupported keyword 'contains' at {ptr} with more than "
                               f"{MAX_CONTAINS_COUNT} counted items")
        other = self.merge(items, self.negate(schema["contains"], f"{ptr}/contains", [MERGE_BUDGET]),
                           f"{ptr}/contains")
        plain = self.share(self.schema(other, f"{ptr}/contains", depth + 1), "item")
        alternatives: List[Maybe] = []
        top = hi if hi is not None else max(lo, 1)
        for a in range(top):  # a non-witnesses first, then the witness, then b more items
            rest_lo = max(0, lo - 1 - a)
            rest_hi = None if hi is None else hi - 1 - a
            most = None if hi is None and a == top - 1 else a  # unbounded: the last takes a or more
            before = _rep(_seq(plain, sep), a, most) if plain is not None else (EMPTY if a == 0 else None)
            alternatives.append(_seq(before, witness, _rep(_seq(sep, item), rest_lo, rest_hi)))
        return _seq(fmt.open("[", depth), _alt(*alternatives), fmt.close("]", depth))

    def object(self, schema: dict, ptr: str, depth: int) -> Maybe:
        fmt = self.fmt
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        patterns = schema.get("patternProperties", {})
        if not isinstance(properties, dict):
            raise GrammarError(f"'properties' at {ptr} must be an object")
        if not isinstance(patterns, dict):
            raise GrammarError(f"'patternProperties' at {ptr} must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise GrammarError(f"'required' at {ptr} must be a list of strings")
        if len(patterns) > MAX_PATTERN_PROPERTIES:
            raise GrammarError(f"unsupported keyword 'patternProperties' at {ptr}: more than "
                               f"{MAX_PATTERN_PROPERTIES} patterns")
        names_schema = schema.get("propertyNames", True)
        extra_schema = schema.get("additionalProperties", not (self.strict and (properties or patterns)))
        lo = self.count(schema, "minProperties", ptr, 0)
        hi = self.upper_bound(schema, "maxProperties", ptr)
        if hi is not None and hi < lo:
            return None
        # A required name outside 'properties' is an undeclared property that must be there:
        # declare it (after the others) with the schemas that judge it.
        declared = list(properties) + [name for name in dict.fromkeys(required) if name not in properties]
        key_sep = fmt.key()
        members: List[_Member] = []
        for name in declared:
            value = self.property_value(name, properties, patterns, extra_schema, names_schema, ptr, depth)
            key = self.named_string(name)
            rest = None if value is None or key is None else _seq(key_sep, value)
            if rest is None:  # the property must be absent (or its name cannot be spelled)
                if name in required:
                    return None
                continue
            members.append(_Member(name, key, rest, name in required))
        extra = self.extra_member(declared, patterns, extra_schema, names_schema, ptr, depth)
        if self.any_order:
            position = {member.name: i for i, member in enumerate(members)}
            required_order = [position[name] for name in dict.fromkeys(required) if name in position]
            return self.object_any_order(members, extra, lo, hi, depth, required_order)
        return self.object_body([(Sequence((m.key, m.rest)), m.required) for m in members],
                                extra, lo, hi, depth)

    def property_value(self, name: str, properties: dict, patterns: dict, extra_schema: Any,
                       names_schema: Any, ptr: str, depth: int) -> Maybe:
        """The value of property ``name``: its 'properties' schema and every patternProperties
        schema whose pattern it matches, or additionalProperties when neither applies."""
        if names_schema is not True and not self.satisfies(name, names_schema, f"{ptr}/propertyNames"):
            return None
        subs = []
        if name in properties:
            subs.append((properties[name], f"{ptr}/properties/{_escape_token(name)}"))
        for pattern, sub in patterns.items():
            if self.regex_dfa(pattern, True, "patternProperties", ptr).accepts(name):
                subs.append((sub, f"{ptr}/patternProperties/{_escape_token(pattern)}"))
        if not subs:
            subs.append((extra_schema, f"{ptr}/additionalProperties"))
        if len(subs) == 1:
            return self.schema(subs[0][0], subs[0][1], depth + 1)
        merged: Any = subs[0][0]
        for sub, sub_ptr in subs[1:]:
            merged = self.merge(merged, sub, sub_ptr)
        return self.schema(merged, subs[0][1], depth + 1)

    def extra_member(self, declared: List[str], patterns: dict, extra_schema: Any, names_schema: Any,
                     ptr: str, depth: int) -> Maybe:
        """``key: value`` for a property outside ``declared``. Keys are split by the set of
        patternProperties patterns they match (each set is a regular language); a key matching
        none takes additionalProperties, and every key must satisfy propertyNames."""
        key_sep = self.fmt.key()
        if not patterns and names_schema is True:
            value = self.schema(extra_schema, f"{ptr}/additionalProperties", depth + 1)
            if value is None:
                return None
            return self.share(_seq(self.key_excluding(declared), key_sep, value), "extra_member")
        keys, named = dfa_ops.any_string(), False
        if names_schema is not True:
            keys, named = self.names_dfa(names_schema, f"{ptr}/propertyNames")
        if declared:
            keys = dfa_ops.difference(keys, dfa_ops.literal_strings(declared))
        compiled = [(self.regex_dfa(p, True, "patternProperties", ptr), s, p) for p, s in patterns.items()]
        alternatives: List[Maybe] = []
        try:
            for mask in range(2 ** len(compiled)):
                language = keys
                value_schema, value_ptr = extra_schema, f"{ptr}/additionalProperties"
                chosen = []
                for bit, (dfa, sub, pattern) in enumerate(compiled):
                    if mask >> bit & 1:
                        language = dfa_ops.intersect(language, dfa)
                        chosen.append((sub, f"{ptr}/patternProperties/{_escape_token(pattern)}"))
                    else:
                        language = dfa_ops.difference(language, dfa)
                if dfa_ops.is_empty(language):
                    continue
                if chosen:
                    value_schema, value_ptr = chosen[0]
                    for sub, sub_ptr in chosen[1:]:
                        value_schema = self.merge(value_schema, sub, sub_ptr)
                value = self.schema(value_schema, value_ptr, depth + 1)
                if value is None:
                    continue
                key = self.dfa_expr(language, "key", named)
                alternatives.append(_seq(_lit('"'), key, _lit('"'), key_sep, value))
        except dfa_ops.DfaTooLarge as exc:
            raise GrammarError(f"unsupported keyword 'patternProperties' at {ptr}: {exc}") from None
        return self.share(_alt(*alternatives), "extra_member")

    def names_dfa(self, names_schema: Any, ptr: str):
        """(the key values propertyNames admits as a DFA, whether its enum/const lists them:
        then the schema names each key, which is spelled as ``named_string`` spells it)."""
        flat = self.normal(names_schema, ptr, [MERGE_BUDGET])
        if flat is False:
            return dfa_ops.nothing(), False
        if any(k in flat for k in ("anyOf", "oneOf")):
            raise GrammarError(f"unsupported keyword 'propertyNames' at {ptr}: anyOf/oneOf of names")
        if "type" in flat and "string" not in self.types(flat, ptr):
            return dfa_ops.nothing(), False
        dfa = self.string_dfa(flat, ptr)
        if "enum" in flat or "const" in flat:
            values = flat["enum"] if "enum" in flat else [flat["const"]]
            listed = dfa_ops.literal_strings([v for v in values if isinstance(v, str)])
            return dfa_ops.intersect(dfa, listed), True
        return dfa, False

    def object_any_order(self, members: List["_Member"], extra: Maybe, lo: int,
                         hi: Optional[int], depth: int, required_order: Seq[int] = ()) -> Maybe:
        """Members in any order: an automaton over members whose state is (required members
        seen, members written — saturating at lo without an upper bound). The required set is
        a bit set for up to MAX_ANY_ORDER_REQUIRED of them (a required member appears once).
        Beyond that, required members keep a relative order (a narrowing): the schema's
        ``properties`` order or, as an alternative, the order of its ``required`` list
        (``required_order``: member indices), which documents often follow; the state is then
        (which order, how many seen). Optional members and extra members are not tracked, so
        one may appear twice: every occurrence is checked, and json.loads keeps the last (see
        the module docstring on duplicate names).

        Keys are spelled inside each state's rule (the values stay shared rules) when that costs
        at most MAX_INLINE_KEY_CHARS in all: each state's rule then reads a key as a trie, so a
        key's bytes keep one stack instead of one per member that might start with them (the
        runtime's parallel stacks, and the GPU's uncertain-token walks, stay small). Beyond the
        budget every member is one shared rule, chosen at its first byte, and the optional and
        extra members are one shared rule that each state refers to once (so the grammar is
        linear in the members, not their number times the states)."""
        fmt = self.fmt
        sep = fmt.item(depth)
        EXTRA = -1  # the move that writes an extra member; members move by their index
        FREE = -2  # any optional or extra member (see moves)
        required = [i for i, m in enumerate(members) if m.required]
        as_set = len(required) <= MAX_ANY_ORDER_REQUIRED
        bit = {index: k for k, index in enumerate(required)}
        orders = [required]
        if not as_set and sorted(required_order) == required and list(required_order) != required:
            orders.append(list(required_order))
        # as_set: seen is a bit set; else seen = order * (r + 1) + how many of that order.
        full = (1 << len(required)) - 1 if as_set else len(required)
        cap = hi if hi is not None else lo

        def done(seen: int) -> bool:
            return seen == full if as_set else seen % (len(required) + 1) == len(required)

        def after(c: int) -> Optional[int]:
            if hi is not None:
                return c + 1 if c + 1 <= hi else None
            return min(c + 1, lo)

        optional = [i for i, m in enumerate(members) if not m.required]
        free = optional + ([EXTRA] if extra is not None else [])  # moves that keep `seen`

        def moves(seen: int, c: int, grouped: bool = False):
            """The moves from state (seen, c): members in schema order, then extra members;
            ``grouped``: the free moves (optional and extra members, which all lead to the same
            state) as one move FREE, last, so that a state has few moves however many members."""
            c_next = after(c)
            if c_next is None:
                return
            if as_set:
                for i in required if grouped else range(len(members)):
                    if not members[i].required:
                        yield i, (seen, c_next)
                    elif not seen >> bit[i] & 1:
                        yield i, (seen | 1 << bit[i], c_next)
            else:
                for i in () if grouped else optional:
                    yield i, (seen, c_next)
                for k, order in enumerate(orders):
                    count = seen % (len(required) + 1)
                    if seen // (len(required) + 1) == k and count < len(order):
                        yield order[count], (seen + 1, c_next)
            if grouped:
                if free:
                    yield FREE, (seen, c_next)
            elif extra is not None:
                yield EXTRA, (seen, c_next)

        if cap and (full + 1) * len(orders) * (cap + 1) > MAX_COUNT_STATES:
            raise GrammarError(f"unsupported keyword 'minProperties'/'maxProperties': "
                               f"{len(required)} required members and a bound of {cap} need more "
                               f"than {MAX_COUNT_STATES} states in any-order mode")
        # The states after the first member, and which of them can still end the object.
        # (The free moves are one move here: the states and edges are linear in the members.)
        edges: Dict[Tuple[int, int], List[Tuple[int, Tuple[int, int]]]] = {}
        starts = [0 if as_set else k * (len(required) + 1) for k in range(len(orders))]
        todo = [target for seen in starts for _, target in moves(seen, 0, grouped=True)]
        while todo:
            state = todo.pop()
            if state in edges:
                continue
            edges[state] = list(moves(*state, grouped=True))
            todo.extend(target for _, target in edges[state])
        live = reaching([state for state in edges if done(state[0]) and state[1] >= lo], edges,
                        {state: [target for _, target in out] for state, out in edges.items()})
        key_chars = sum(len(m.name) + 2 for m in members)
        inline = (len(live) + 1) * key_chars <= MAX_INLINE_KEY_CHARS
        # Inlined: every member in every state's rule (at most MAX_INLINE_KEY_CHARS / 2 moves).
        # Else each member is a shared rule, and two or more free members are one shared rule
        # that spells their keys: one alternative per free member in every state was
        # quadratic, and a rule that only calls member rules would make every caller's closure
        # enter all of them.
        group_free = not inline and len(free) > 1
        spelled = [Sequence((m.key, self.share(m.rest, "member_value")))
                   if inline or (group_free and not m.required)
                   else self.share(Sequence((m.key, m.rest)), "member") for m in members]
        any_free: Maybe = None

        def piece(i: int) -> Expr:
            return extra if i == EXTRA else any_free if i == FREE else spelled[i]

        if group_free:
            any_free = self.share(_alt(*[piece(i) for i in free]), "free_members")

        def state_moves(seen: int, c: int):
            return moves(seen, c, grouped=group_free)

        names = {state: self.new_rule("members") for state in sorted(live)}
        for state in sorted(live):
            alternatives: List[Maybe] = [EMPTY] if done(state[0]) and state[1] >= lo else []
            alternatives += [Sequence((sep, piece(i), RuleRef(names[target])))
                             for i, target in state_moves(*state) if target in live]
            self.rules[names[state]] = _alt(*alternatives)
        nonempty = _alt(*[Sequence((piece(i), RuleRef(names[target])))
                          for seen in starts for i, target in state_moves(seen, 0)
                          if target in live])
        empty_ok = lo == 0 and not required
        return _alt(fmt.empty("{}") if empty_ok else None,
                    _seq(fmt.open("{", depth), nonempty, fmt.close("}", depth)))

    def object_body(self, members: List[Tuple[Expr, bool]], extra: Maybe, lo: int, hi: Optional[int],
                    depth: int) -> Maybe:
        """``{ members in order, then extra members }`` with between lo and hi members in all.

        State (i, c, first): members i.. are still to come, c were written (c saturates at lo
        when there is no upper bound), ``first``: nothing written yet, so no separator before the
        next one. Entries used by two predecessors become rules."""
        fmt = self.fmt
        sep = fmt.item(depth)
        n = len(members)
        cap = hi if hi is not None else lo
        if cap and (n + 1) * (cap + 1) > MAX_COUNT_STATES:
            raise GrammarError(f"unsupported keyword 'minProperties'/'maxProperties': {n} properties "
                               f"and a bound of {cap} need more than {MAX_COUNT_STATES} states")

        def after(c: int) -> int:
            return c + 1 if hi is not None else min(c + 1, lo)

        def extras(c: int, first: bool) -> Maybe:
            need_lo = max(0, lo - c)
            need_hi = None if hi is None else hi - c
            if need_hi is not None and need_hi < 0:
                return None
            if first:  # the object is still empty; the empty object itself is handled apart
                if extra is None or need_hi == 0:
                    return None
                return _seq(extra, _rep(_seq(sep, extra), max(0, need_lo - 1),
                                        None if need_hi is None else need_hi - 1))
            if extra is None:
                return EMPTY if need_lo == 0 else None
            return _rep(_seq(sep, extra), need_lo, need_hi)

        states = [(c, False) for c in range(cap + 1)] + [(0, True)]
        uses: Dict[Tuple[int, int, bool], int] = {}
        for i in range(n):
            for c, first in states:
                for key in ((i + 1, after(c), False), (i + 1, c, first)):
                    uses[key] = uses.get(key, 0) + 1
        table: Dict[Tuple[int, int, bool], Maybe] = {}
        for c, first in states:
            table[(n, c, first)] = extras(c, first)

        def ref(key: Tuple[int, int, bool]) -> Maybe:
            expr = table.get(key)
            if hi is not None and key[1] > hi:
                return None
            if uses.get(key, 0) > 1:
                expr = self.share(expr, "members")
                table[key] = expr
            return expr

        for i in range(n - 1, -1, -1):
            member, needed = members[i]
            for c, first in states:
                take = _seq(member if first else Sequence((sep, member)), ref((i + 1, after(c), False)))
                skip = None if needed else ref((i + 1, c, first))
                table[(i, c, first)] = _alt(take, skip)
        nonempty = table[(0, 0, True)]
        empty_ok = lo == 0 and not any(needed for _, needed in members)
        return _alt(fmt.empty("{}") if empty_ok else None,
                    _seq(fmt.open("{", depth), nonempty, fmt.close("}", depth)))

    def key_excluding(self, names: List[str]) -> Expr:
        """A JSON string (any spelling) whose value is none of ``names``."""
        if not names:
            return self.string_rule()
        trie: dict = {}
        for name in names:
            node = trie
            for char in name:
                node = node.setdefault(ord(char), {})
            node[None] = {}  # end marker
        tail = self.helper("json_chars_close", lambda: Sequence((Repeat(self.char_rule(), 0, None),
                                                                  _lit('"'))))

        def after(node: dict) -> Expr:
            children = [cp for cp in node if cp is not None]
            alternatives: List[Maybe] = []
            if None not in node:
                alternatives.append(_lit('"'))
            alternatives.append(_seq(self.unit(_complement(children)), tail))
            for cp in children:
                alternatives.append(_seq(_unit(((cp, cp),)), after(node[cp])))
            return _alt(*alternatives)

        return Sequence((_lit('"'), after(trie)))

    # -- oneOf disjointness (sufficient conditions only)
    def deref(self, schema: Any, seen=()) -> Any:
        while isinstance(schema, dict) and "$ref" in schema and isinstance(schema["$ref"], str):
            ref = schema["$ref"]
            if ref in seen:
                return True
            seen = seen + (ref,)
            try:
                schema, _ = _resolve_pointer(self.root, ref, "#")
            except compile_budget.CompileTimeoutError:
                raise  # a deadline is not an inexpressible schema
            except GrammarError:
                return True
        if isinstance(schema, dict) and isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
            return self.deref(schema["allOf"][0], seen)
        return schema

    def type_set(self, schema: Any) -> set:
        """Types the schema's values may have ('number' meaning non-integral numbers). Cached
        per schema object (kept alive by the entry), as ``disjoint`` is."""
        key = ("type_set", id(schema))
        hit = self.cache.get(key)
        if hit is None or hit[0] is not schema:
            hit = self.cache[key] = (schema, self._type_set(schema))
        return hit[1]

    def _type_set(self, schema: Any) -> set:
        schema = self.deref(schema)
        everything = {"null", "boolean", "integer", "number", "string", "array", "object"}
        if schema is False:
            return set()
        if not isinstance(schema, dict):
            return everything
        if "enum" in schema or "const" in schema:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            if isinstance(values, list):
                return {_json_type_of(v) for v in values}
        for keyword in ("anyOf", "oneOf"):
            if isinstance(schema.get(keyword), list):
                return set().union(*[self.type_set(s) for s in schema[keyword]])
        declared = schema.get("type")
        if declared is None:
            return everything
        names = set(declared if isinstance(declared, list) else [declared])
        if "number" in names:
            names.add("integer")
        return names & everything

    def value_summary(self, schema: Any) -> Dict[str, Optional[frozenset]]:
        """The values the schema may have, per type of ``type_set``: the canonical values
        (``_canonical``) when they are finitely many, else None. Cached per schema object, so
        a chain of nested anyOf/oneOf is summarised once, level by level (testing a value
        against each level below again made a chain quadratic in its depth)."""
        key = ("value_summary", id(schema))
        hit = self.cache.get(key)
        if hit is None or hit[0] is not schema:
            hit = self.cache[key] = (schema, self._value_summary(schema))
        return hit[1]

    def _value_summary(self, schema: Any) -> Dict[str, Optional[frozenset]]:
        target = self.deref(schema)
        if isinstance(target, dict):
            listed = [target["const"]] if "const" in target else target.get("enum")
            if isinstance(listed, list):
                values: Dict[str, set] = {}
                for value in listed:
                    values.setdefault(_json_type_of(value), set()).add(_canonical(value))
                return {name: frozenset(found) for name, found in values.items()}
            for keyword in ("anyOf", "oneOf"):  # a value satisfies some branch
                if isinstance(target.get(keyword), list):
                    union: Dict[str, Optional[frozenset]] = {}
                    for branch in target[keyword]:
                        for name, found in self.value_summary(branch).items():
                            known = union.get(name, frozenset())
                            union[name] = None if found is None or known is None else known | found
                    return union
        return dict.fromkeys(self.type_set(schema))

    def value_set(self, schema: Any) -> Optional[set]:
        schema = self.deref(schema)
        if not isinstance(schema, dict):
            return None
        if "const" in schema:
            return {_canonical(schema["const"])}
        if isinstance(schema.get("enum"), list):
            return {_canonical(v) for v in schema["enum"]}
        return None

    def disjoint(self, a: Any, b: Any) -> bool:
        """No value satisfies both (a sound, incomplete test). Cached per pair of schema
        objects (the entry keeps them alive so their ids stay unique)."""
        key = ("disjoint", id(a), id(b))
        hit = self.cache.get(key)
        if hit is None or hit[0] is not a or hit[1] is not b:
            hit = self.cache[key] = (a, b, self._disjoint(a, b))
        return hit[2]

    def _disjoint(self, a: Any, b: Any) -> bool:
        types_a, types_b = self.type_set(a), self.type_set(b)
        if not types_a & types_b:
            return True
        summary_a, summary_b = self.value_summary(a), self.value_summary(b)
        if all(summary_a[name] is not None and summary_b[name] is not None
               and not summary_a[name] & summary_b[name]
               for name in summary_a.keys() & summary_b.keys()):
            return True  # finitely many values of each common type, none shared
        # A value of anyOf/oneOf(s_1..s_k) satisfies some s_i (sibling keywords only narrow
        # it): disjoint from every s_i is disjoint. Nested oneOfs whose branches are proven
        # apart this way need no complements (which multiply with the nesting depth).
        for one, other in ((a, b), (b, a)):
            one = self.deref(one)
            if isinstance(one, dict):
                for keyword in ("anyOf", "oneOf"):
                    subs = one.get(keyword)
                    if isinstance(subs, list) and subs and \
                            all(self.disjoint(sub, other) for sub in subs):
                        return True
        if types_a == {"object"} == types_b:
            a, b = self.deref(a), self.deref(b)
            props_a, props_b = a.get("properties", {}), b.get("properties", {})
            req_a, req_b = set(a.get("required", [])), set(b.get("required", []))
            if isinstance(props_a, dict) and isinstance(props_b, dict):
                for name in req_a & req_b & set(props_a) & set(props_b):
                    va, vb = self.value_set(props_a[name]), self.value_set(props_b[name])
                    if va is not None and vb is not None and not va & vb:
                        return True
        return False

    @staticmethod
    def exclusive_required(branches: list) -> Optional[list]:
        """``oneOf: [{required: [a]}, {required: [b]}, ...]`` (one distinct name each) as
        disjoint anyOf branches: an object with exactly one of the names. A non-object satisfies
        every branch, so with two or more branches no non-object satisfies the oneOf."""
        names = []
        for branch in branches:
            if not isinstance(branch, dict):
                return None
            keys = [k for k in branch if k in SUPPORTED or k in UNSUPPORTED]
            required = branch.get("required")
            if keys != ["required"] or not isinstance(required, list) or len(required) != 1 \
                    or not isinstance(required[0], str):
                return None
            names.append(required[0])
        if len(set(names)) != len(names):
            return None
        if len(names) == 1:
            return [{"required": names}]
        return [{"type": "object", "required": [name],
                 "properties": {other: False for other in names if other != name}}
                for name in names]

    def disjoint_one_of(self, branches: list, ptr: str) -> Optional[list]:
        """``oneOf(branches)`` as anyOf branches that no value satisfies two of (same instances),
        or None when exclusivity is not expressible. Cached per branch list (merges meet the
        same oneOf many times; the entry keeps the list alive so its id stays unique)."""
        key = ("disjoint_one_of", id(branches))
        if key not in self.cache or self.cache[key][0] is not branches:
            result = self.exclusive_required(branches)
            if result is None:
                result = branches if self.provably_disjoint(branches) else \
                    self.exclusive_branches(branches, ptr)
            self.cache[key] = (branches, result)
        return self.cache[key][1]

    def relax_one_of(self, ptr: str) -> None:
        """A oneOf whose exclusivity is not expressible is compiled as anyOf with
        ``coerce_one_of`` (the default with ``strict_mode=True``, as XGrammar does): the grammar
        then also accepts a value that satisfies two branches, announced with a
        ``JsonSchemaRelaxationWarning``. Otherwise (the default of the compliant mode) it is
        refused naming 'oneOf'."""
        if not self.coerce_one_of:
            raise GrammarError(f"unsupported keyword 'oneOf' at {ptr}: its branches may overlap "
                               f"and their complements are not expressible (coerce_one_of=True "
                               f"compiles it as anyOf)")
        warnings.warn(f"oneOf at {ptr} compiled as anyOf: its branches are not provably "
                      f"disjoint, and their complements are not expressible",
                      JsonSchemaRelaxationWarning, stacklevel=4)

    def exclusive_branches(self, branches: list, ptr: str) -> Optional[list]:
        """``oneOf(b_1..b_k)`` as disjoint anyOf branches ``b_i and not b_j (j != i)``, or None
        when a complement is not expressible or the merges grow too large.

        Each branch's merge may take MERGE_BUDGET normalisations; all the complements built
        for one top-level oneOf, those of the oneOfs nested in it included, share
        COMPLEMENT_BUDGET. The complement of a nested oneOf holds the complements of the levels
        below, and merging builds new branch lists (so the per-list cache misses): without the
        shared bound the work multiplied with the depth. Past it the oneOf is not made
        exclusive (None: relaxed to anyOf, or refused in the compliant mode)."""
        top = self.complement_budget is None
        if top:
            self.complement_budget = [COMPLEMENT_BUDGET]
        shared = self.complement_budget
        out = []
        try:
            for i, branch in enumerate(branches):
                allotted = min(MERGE_BUDGET, shared[0])
                if allotted <= 0:
                    return None
                local = [allotted]
                others = [{"not": other} for j, other in enumerate(branches) if j != i]
                try:
                    merged = self.merge({"allOf": [branch] + others}, {}, f"{ptr}/oneOf/{i}",
                                        local)
                finally:
                    shared[0] -= allotted - local[0]
                if merged is not False:
                    out.append(merged)
        except compile_budget.CompileTimeoutError:
            raise  # a deadline is not an inexpressible schema
        except GrammarError:
            return None
        finally:
            if top:
                self.complement_budget = None
        return out or [False]

    def provably_disjoint(self, branches: list) -> bool:
        return all(self.disjoint(branches[i], branches[j])
                   for i in range(len(branches)) for j in range(i + 1, len(branches)))


# ----------------------------------------------------------------------------- checks and entry


def load_schema(schema: Any) -> Any:
    """The schema as a dict or a bool, from a dict, a bool, a JSON text (str or bytes) or a
    Pydantic model class; anything else, or a JSON text of another value, is a GrammarError."""
    if isinstance(schema, (str, bytes)):
        try:
            with deep_recursion():
                schema = json.loads(schema)
        except ValueError as exc:
            raise GrammarError(f"the schema is not valid JSON: {exc}") from exc
        if not isinstance(schema, (dict, bool)):
            raise GrammarError(f"a schema is a JSON object or a boolean, got "
                               f"{type(schema).__name__} {json.dumps(schema)[:40]}")
        return schema
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()  # a Pydantic model class
    if isinstance(schema, (dict, bool)):
        return schema
    raise GrammarError(f"a schema must be a dict, a bool, a JSON string or a Pydantic model, "
                       f"got {type(schema).__name__}")


@contextlib.contextmanager
def deep_recursion():
    """Python's recursion limit raised to CONVERTER_RECURSION_LIMIT for the block (the converter
    and ``json.dumps`` recurse along the schema: large real schemas nest a few hundred levels,
    each a handful of frames), restored after it; running out even so is a GrammarError, not a
    RecursionError."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, CONVERTER_RECURSION_LIMIT))
    try:
        yield
    except RecursionError:
        raise GrammarError("the schema nests too deeply to convert (more than "
                           f"{CONVERTER_RECURSION_LIMIT} converter frames)") from None
    finally:
        sys.setrecursionlimit(limit)


# keyword -> the JSON types its value may have (checked on every subschema before converting,
# so a wrong one is a GrammarError naming its place, not an exception from deep inside)
_KEYWORD_TYPES = {
    "enum": (list,), "properties": (dict,), "patternProperties": (dict,),
    "anyOf": (list,), "oneOf": (list,), "allOf": (list,), "prefixItems": (list,),
    "not": (dict, bool), "additionalProperties": (dict, bool), "items": (dict, bool, list),
    "additionalItems": (dict, bool), "propertyNames": (dict, bool), "contains": (dict, bool),
    "if": (dict, bool), "then": (dict, bool), "else": (dict, bool),
    "unevaluatedItems": (dict, bool), "unevaluatedProperties": (dict, bool),
    "dependentRequired": (dict,), "dependentSchemas": (dict,), "$ref": (str,),
    "pattern": (str,), "type": (str, list), "required": (list,),
}
# keyword -> the JSON type of each element of its array value
_ELEMENT_TYPES = {"type": str, "required": str}
_JSON_TYPE_NAMES = {list: "an array", dict: "an object", bool: "a boolean", str: "a string"}
# keywords whose value holds subschemas: one (dict), a list of them, or a map of them
_SUBSCHEMA_ONE = ("not", "additionalProperties", "additionalItems", "propertyNames", "contains",
                  "if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "items")
_SUBSCHEMA_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SUBSCHEMA_MAP = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")


def check_keyword_types(root: Any) -> None:
    """GrammarError naming the JSON pointer of the first keyword whose value has the wrong JSON
    type (``{"not": {"enum": 5}}``: 'enum' at #/not must be an array). Iterative: any depth."""
    pending = [(root, "#")]
    while pending:
        schema, ptr = pending.pop()
        if not isinstance(schema, dict):
            continue
        for key, value in schema.items():
            kinds = _KEYWORD_TYPES.get(key)
            if kinds is not None and (not isinstance(value, kinds) or
                                      (bool not in kinds and isinstance(value, bool))):
                wanted = " or ".join(_JSON_TYPE_NAMES[k] for k in kinds)
                raise GrammarError(f"'{key}' at {ptr} must be {wanted}, got {json.dumps(value)}"
                                   if _shallow(value) else
                                   f"'{key}' at {ptr} must be {wanted}")
            element = _ELEMENT_TYPES.get(key)
            if element is not None and isinstance(value, list):
                bad = next((item for item in value if not isinstance(item, element)), None)
                if bad is not None:
                    raise GrammarError(f"'{key}' at {ptr} must be an array of "
                                       f"{_JSON_TYPE_NAMES[element][2:]}s, got "
                                       f"{json.dumps(bad)[:40]} in it")
        for key in _SUBSCHEMA_ONE:
            if isinstance(schema.get(key), dict):
                pending.append((schema[key], f"{ptr}/{key}"))
        for key in _SUBSCHEMA_LIST:
            if isinstance(schema.get(key), list):
                pending.extend((sub, f"{ptr}/{key}/{i}") for i, sub in enumerate(schema[key]))
        for key in _SUBSCHEMA_MAP:
            if isinstance(schema.get(key), dict):
                pending.extend((sub, f"{ptr}/{key}/{_escape_token(name)}")
                               for name, sub in schema[key].items())


def _shallow(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def json_schema_to_grammar(schema: Any, *, any_whitespace: bool = True, indent: Optional[int] = None,
                           separators: Optional[Tuple[str, str]] = None, strict_mode: bool = True,
                           max_whitespace_cnt: Optional[int] = None, any_order: bool = False,
                           coerce_one_of: Optional[bool] = None,
                           any_string_spelling: bool = False) -> Grammar:
    """The Grammar of the JSON documents that satisfy ``schema`` (see the module docstring)."""
    if not isinstance(any_string_spelling, bool):
        raise GrammarError(f"any_string_spelling must be True or False, got {any_string_spelling!r}")
    root = load_schema(schema)
    if root is False:
        raise GrammarError("schema 'false' at # matches nothing")
    check_keyword_types(root)
    fmt = _make_format(any_whitespace, indent, separators, max_whitespace_cnt)
    with deep_recursion():
        converter = _Converter(root, fmt, strict_mode, any_order,
                               strict_mode if coerce_one_of is None else bool(coerce_one_of),
                               any_string_spelling)
        body = converter.schema(root, "#", 0)
        if body is None:
            raise GrammarError("schema at # matches nothing")
        rules = {name: expr for name, expr in converter.rules.items() if expr is not None}
        rules["root"] = body
        productive = least_fixpoint(rules, is_productive)  # rules deriving a finite string
        for name in rules:
            if name not in productive:
                where = converter.rule_pointer.get(name, "#")
                raise GrammarError(f"schema at {where} admits no finite JSON value")
        ordered = [Rule("root", body)] + [Rule(n, e) for n, e in rules.items() if n != "root"]
        return Grammar(tuple(ordered), root_rule_name="root")
