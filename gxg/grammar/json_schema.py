"""JSON Schema front-end (first increment): a schema becomes a Grammar of the JSON documents
that satisfy it, written with XGrammar's formatting options.

In:  ``json_schema_to_grammar(schema, *, any_whitespace=True, indent=None, separators=None,
     strict_mode=True, max_whitespace_cnt=None)``; ``schema`` is a dict, a bool, a JSON string,
     or a Pydantic model class (its ``model_json_schema()``).
Out: a ``Grammar`` (root rule ``root``). A schema this increment cannot honour exactly raises
     ``GrammarError`` naming the keyword and the JSON pointer of the subschema, e.g.
     ``unsupported keyword 'pattern' at #/properties/name``.

Exactness contract: every document the grammar accepts is valid for the schema (JSON Schema
2020-12 meaning, as the ``jsonschema`` package decides it). The grammar may reject some valid
documents; each such narrowing is listed here:

* properties appear in ``properties`` order, then additional properties (as XGrammar without
  ``any_order``): ``{"b":1,"a":2}`` is rejected when ``a`` is declared before ``b``; a
  ``required`` name missing from ``properties`` comes right after the declared ones;
* integers are written without fraction or exponent (``1.0`` is an integer for JSON Schema);
* ``enum`` / ``const`` values: numbers are accepted in the spelling ``json.dumps`` gives them
  (plus ``1`` / ``1.0`` for integral values), object members in the schema's order; strings in
  every spelling (raw or escaped, any hex case); with ``any_whitespace`` whitespace is allowed
  between the tokens of an array or object constant (XGrammar accepts only the compact form);
* strings whose length is bounded (``minLength`` / ``maxLength``, counted in code points: an
  escape is one code point, a ``\\uD83D\\uDE00`` surrogate pair is one) and keys of additional
  properties (which must differ from every declared name, whatever their spelling) do not
  accept lone surrogate escapes such as ``\\uD800``;
* with ``any_whitespace=False`` and an ``indent``, values nested deeper than
  ``MAX_INDENT_DEPTH`` containers are rejected (json.dumps's indentation depends on the depth,
  so each depth needs its own rules).

Relaxations (the grammar may accept documents the schema forbids) — announced with a
``JsonSchemaRelaxationWarning``: ``oneOf`` whose branches are not provably disjoint (disjoint
JSON types, disjoint ``const``/``enum`` values, or a required property whose ``const``/``enum``
values differ) is compiled as ``anyOf``. ``oneOf`` of branches that each only require one
distinct property name is exact (an object with exactly one of the names).

Options (XGrammar's, reference §3.1): ``any_whitespace=True`` allows ``[ \\n\\r\\t]*`` (at most
``max_whitespace_cnt`` characters) between tokens and none around the root; the separators
default to ``","`` / ``":"`` and, when given, must appear (whitespace around them allowed).
``any_whitespace=False`` accepts exactly ``json.dumps(value, indent=indent,
separators=separators)``, separators defaulting to ``(", ", ": ")`` without indent and
``(",", ": ")`` with one. ``strict_mode=True``: a schema with ``properties`` and no
``additionalProperties`` allows no other properties, and one with ``prefixItems`` (or an
``items`` list) and no ``items`` / ``additionalItems`` allows no further items; without
``properties`` / ``prefixItems`` the JSON Schema default (anything) holds.
``strict_mode=False`` follows JSON Schema throughout.

Supported keywords: ``type`` (a name or a list), ``enum``, ``const``, ``properties``,
``required``, ``additionalProperties``, ``items`` (schema, or draft-04 list), ``prefixItems``,
``additionalItems``, ``minItems``, ``maxItems``, ``minLength``, ``maxLength``, ``anyOf``,
``oneOf``, ``allOf``, ``$ref`` (``#`` and ``#/...`` JSON pointers, percent- and ``~0``/``~1``-
escaped, recursive ones too; each referenced schema becomes one rule), ``uniqueItems: false``.
Ignored: the annotations ``title description default examples $schema $comment deprecated
readOnly writeOnly contentEncoding contentMediaType contentSchema $anchor $dynamicAnchor``,
``$id`` / ``id`` of the root (and of subschemas when the schema has no ``$ref``: a nested base
URI only changes what refs resolve to), ``$defs`` / ``definitions`` (containers), and keys that
are no JSON Schema keyword (JSON Schema ignores unknown keywords). Every other keyword raises.

Combinations. ``allOf`` (and ``$ref``, ``anyOf``, ``oneOf`` with sibling assertions, which mean
allOf of the siblings and the keyword, as in 2020-12; older drafts ignore ``$ref`` siblings, so
honouring them only narrows) is compiled by merging the subschemas into one schema with the same
instances: ``type`` intersected, ``required`` united, ``enum``/``const`` intersected, the
tighter length/count bound kept, ``properties`` merged name by name, ``items`` merged, and
``anyOf``/``oneOf`` of one side distributed over its branches. Merges whose result is not a
single schema raise naming ``allOf``: both sides with ``additionalProperties``, one side's
``additionalProperties`` while the other declares further properties, both sides with tuple
items, ``anyOf``/``oneOf`` on both sides, or two different values of any other keyword.
``enum``/``const`` with sibling assertions other than ``type``, ``minLength``, ``maxLength``
raise. In strict mode the defaults apply to the merged schema.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence as Seq, Tuple
from urllib.parse import unquote

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
)

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
    "anyOf", "oneOf", "allOf", "$ref", "uniqueItems",
})
UNSUPPORTED = frozenset({
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "patternProperties", "propertyNames", "minProperties", "maxProperties",
    "contains", "minContains", "maxContains", "not", "if", "then", "else",
    "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedItems",
    "unevaluatedProperties", "$dynamicRef", "$recursiveRef", "$recursiveAnchor", "extends",
    "disallow", "divisibleBy",
})
JSON_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_ENUM_FILTERS = frozenset({"type", "minLength", "maxLength", "enum", "const"})


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
    out = list(ranges)
    for hole_lo, hole_hi in holes:
        nxt = []
        for a, b in out:
            if b < hole_lo or a > hole_hi:
                nxt.append((a, b))
                continue
            if a < hole_lo:
                nxt.append((a, hole_lo - 1))
            if b > hole_hi:
                nxt.append((hole_hi + 1, b))
        out = nxt
    return out


def _complement(points: Seq[int]) -> List[Tuple[int, int]]:
    return _subtract_all(_ALL, [(p, p) for p in sorted(points)])


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


# ----------------------------------------------------------------------------- formatting


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
    if not ref.startswith("#/"):
        raise GrammarError(f"unsupported $ref {ref!r} at {where}: only '#' and '#/...' pointers")
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


# ----------------------------------------------------------------------------- the converter


class _Converter:
    def __init__(self, root: Any, fmt: _Format, strict_mode: bool):
        self.root = root
        self.fmt = fmt
        self.strict = strict_mode
        self.rules: Dict[str, Optional[Expr]] = {}
        self.ref_rules: Dict[Tuple[str, int], str] = {}
        self.rule_pointer: Dict[str, str] = {}
        self.referenced: set = set()
        self.empty_refs: set = set()  # (pointer, depth key) of referenced schemas found empty
        self.uses_refs = '"$ref"' in json.dumps(root)  # nested ids matter only to refs

    # -- rules
    def new_rule(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint)[:40] or "r"
        name, n = base, 1
        while name in self.rules or name == "root":
            n += 1
            name = f"{base}_{n}"
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
            return _string_constant(value)
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
            members += [_string_constant(key), fmt.key(), self.constant(element, depth + 1)]
        return _seq(fmt.open("{", depth), *members, fmt.close("}", depth))

    # -- schemas
    def keywords(self, schema: Any, ptr: str) -> Dict[str, Any]:
        """The JSON Schema keywords of an object schema (annotations and unknown keys dropped),
        after checking that it is an object and that every keyword is supported."""
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {ptr} must be an object or a boolean, got {schema!r}")
        self.check_keywords(schema, ptr)
        return {k: v for k, v in schema.items() if k in SUPPORTED or k in UNSUPPORTED}

    def schema(self, schema: Any, ptr: str, depth: int) -> Maybe:
        if schema is True:
            return self.any_value(depth)
        if schema is False:
            return None
        siblings = self.keywords(schema, ptr)
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                raise GrammarError(f"$ref at {ptr} must be a string")
            del siblings["$ref"]
            if not self.asserts(siblings):
                return self.ref(ref, ptr, depth)
            # 2020-12: siblings apply too (older drafts ignore them; honouring them only narrows).
            return self.schema(self.merge(siblings, {"$ref": ref}, ptr), ptr, depth)
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
            if keyword in schema:
                subs = schema[keyword]
                if not isinstance(subs, list) or not subs:
                    raise GrammarError(f"'{keyword}' at {ptr} must be a non-empty list")
                del siblings[keyword]
                if keyword == "oneOf" and self.exclusive_required(subs) is not None:
                    keyword, subs = "anyOf", self.exclusive_required(subs)
                if self.asserts(siblings):
                    # allOf(siblings, anyOf(b...)) == anyOf(allOf(siblings, b)...); the same holds
                    # for oneOf: exactly one merged branch holds iff the siblings and exactly one
                    # branch hold.
                    return self.schema(self.merge(siblings, {keyword: subs}, ptr), ptr, depth)
                if keyword == "oneOf" and not self.provably_disjoint(subs):
                    warnings.warn(f"oneOf at {ptr} compiled as anyOf: its branches are not provably "
                                  f"disjoint", JsonSchemaRelaxationWarning, stacklevel=3)
                branches = [self.schema(s, f"{ptr}/{keyword}/{i}", depth) for i, s in enumerate(subs)]
                return _alt(*branches)
        if "enum" in schema or "const" in schema:
            return self.enum(schema, ptr, depth)
        return _alt(*[self.typed(schema, t, ptr, depth) for t in self.types(schema, ptr)])

    def check_keywords(self, schema: dict, ptr: str) -> None:
        for keyword, value in schema.items():
            if keyword in UNSUPPORTED:
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}")
            if keyword in ("$id", "id") and ptr != "#" and isinstance(value, str) and self.uses_refs:
                # A nested base URI changes what '#/...' refers to inside it.
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}")
            if keyword == "uniqueItems" and value is not False:
                raise GrammarError(f"unsupported keyword 'uniqueItems' at {ptr}")

    @staticmethod
    def asserts(schema: dict) -> bool:
        return any(k in SUPPORTED or k in UNSUPPORTED for k in schema
                   if not (k == "uniqueItems" and schema[k] is False))

    # -- allOf: merging two schemas into one whose instances are those valid for both
    def normal(self, schema: Any, ptr: str, budget: List[int]) -> Any:
        """``schema`` without annotations, top-level $ref and allOf (False, or a dict)."""
        budget[0] -= 1
        if budget[0] < 0:
            raise GrammarError(f"unsupported keyword 'allOf' at {ptr}: the merge does not terminate")
        if schema is True:
            return {}
        if schema is False:
            return False
        out = self.keywords(schema, ptr)
        if out.get("uniqueItems") is False:
            del out["uniqueItems"]
        if "$ref" in out:
            target, target_ptr = _resolve_pointer(self.root, out.pop("$ref"), ptr)
            return self.merge2(self.normal(target, target_ptr, budget), out, ptr, budget)
        if "allOf" in out:
            subs = out.pop("allOf")
            if not isinstance(subs, list):
                raise GrammarError(f"'allOf' at {ptr} must be a list")
            merged: Any = self.normal(out, ptr, budget)
            for i, sub in enumerate(subs):
                merged = self.merge2(merged, sub, f"{ptr}/allOf/{i}", budget)
            return merged
        return out

    def merge(self, a: Any, b: Any, ptr: str) -> Any:
        try:
            return self.merge2(a, b, ptr, [2000])
        except RecursionError:  # a $ref cycle through allOf keeps unfolding
            raise GrammarError(f"unsupported keyword 'allOf' at {ptr}: the merge does not terminate") from None

    def merge2(self, a: Any, b: Any, ptr: str, budget: List[int]) -> Any:
        a, b = self.normal(a, ptr, budget), self.normal(b, ptr, budget)
        if a is False or b is False:
            return False
        for keyword in ("anyOf", "oneOf"):
            for one, other in ((a, b), (b, a)):
                if keyword in one:
                    if "anyOf" in other or "oneOf" in other:
                        raise GrammarError(f"unsupported keyword 'allOf' of two '{keyword}'/'anyOf'/'oneOf' "
                                           f"at {ptr}")
                    rest = {k: v for k, v in one.items() if k != keyword}
                    base = self.merge2(rest, other, ptr, budget)
                    if base is False:
                        return False
                    return {keyword: [self.merge2(base, branch, f"{ptr}/{keyword}/{i}", budget)
                                      for i, branch in enumerate(one[keyword])]}
        out: Dict[str, Any] = {}
        object_keys = ("properties", "additionalProperties")
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
            elif key in ("minLength", "minItems"):
                out[key] = max(x, y)
            elif key in ("maxLength", "maxItems"):
                out[key] = min(x, y)
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
        if not isinstance(props_a, dict) or not isinstance(props_b, dict):
            raise GrammarError(f"'properties' at {ptr} must be an object")
        extra_a, extra_b = "additionalProperties" in a, "additionalProperties" in b
        if extra_a and extra_b:
            raise GrammarError(f"unsupported keyword 'allOf' merging two 'additionalProperties' at {ptr}")
        # additionalProperties of one side judges every name outside its own properties, so the
        # other side may only constrain names that side already declares.
        for one, other, has_extra in ((props_a, props_b, extra_a), (props_b, props_a, extra_b)):
            if has_extra and not set(other) <= set(one):
                raise GrammarError(f"unsupported keyword 'allOf' merging 'additionalProperties' with "
                                   f"properties declared elsewhere at {ptr}")
        merged = {}
        for name in list(props_a) + [n for n in props_b if n not in props_a]:
            if name in props_a and name in props_b:
                merged[name] = self.merge2(props_a[name], props_b[name],
                                           f"{ptr}/properties/{_escape_token(name)}", budget)
            else:
                merged[name] = props_a[name] if name in props_a else props_b[name]
        if merged or "properties" in a or "properties" in b:
            out["properties"] = merged
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
        for keyword in schema:
            if keyword in SUPPORTED and keyword not in _ENUM_FILTERS and keyword != "uniqueItems":
                raise GrammarError(f"unsupported keyword 'enum/const' combined with '{keyword}' at {ptr}")
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list):
                raise GrammarError(f"'enum' at {ptr} must be a list")
        else:
            values = [schema["const"]]
        if "const" in schema:
            values = [v for v in values if _canonical(v) == _canonical(schema["const"])]
        types = self.types(schema, ptr)
        lo = self.count(schema, "minLength", ptr, 0)
        hi = self.count(schema, "maxLength", ptr, None)
        kept, seen = [], set()
        for value in values:
            if not any(_has_type(value, t) for t in types):
                continue
            if isinstance(value, str) and not (lo <= len(value) and (hi is None or len(value) <= hi)):
                continue
            if _canonical(value) not in seen:
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

    def typed(self, schema: dict, type_name: str, ptr: str, depth: int) -> Maybe:
        if type_name == "null":
            return _lit("null")
        if type_name == "boolean":
            return Choice((_lit("true"), _lit("false")))
        if type_name == "integer":
            return self.integer_rule()
        if type_name == "number":
            return self.number_rule()
        if type_name == "string":
            return self.string(schema, ptr)
        if type_name == "array":
            return self.array(schema, ptr, depth)
        return self.object(schema, ptr, depth)

    def string(self, schema: dict, ptr: str) -> Maybe:
        lo = self.count(schema, "minLength", ptr, 0)
        hi = self.count(schema, "maxLength", ptr, None)
        if lo == 0 and hi is None:
            return self.string_rule()
        if hi is not None and hi < lo:
            return None
        return Sequence((_lit('"'), Repeat(self.char_rule(), lo, hi), _lit('"')))

    def array(self, schema: dict, ptr: str, depth: int) -> Maybe:
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
        hi = self.count(schema, "maxItems", ptr, None)
        parts = [self.share(self.schema(s, f"{ptr}/{prefix_key}/{i}", depth + 1), "item")
                 for i, s in enumerate(prefix)]
        rest = self.share(self.schema(rest_schema, f"{ptr}/{rest_key}", depth + 1), "item")
        sep = fmt.item(depth)
        open_, close = fmt.open("[", depth), fmt.close("]", depth)
        alternatives: List[Maybe] = []
        if lo == 0:
            alternatives.append(fmt.empty("[]"))
        k = len(parts)
        for n in range(1, k + 1):  # n prefix items present; fewer than k leaves no room for rest
            if parts[n - 1] is None:
                break
            body: List[Maybe] = []
            for i in range(n):
                body += ([sep] if i else []) + [parts[i]]
            if n < k:
                if lo <= n and (hi is None or n <= hi):
                    alternatives.append(_seq(open_, *body, close))
                continue
            more_lo, more_hi = max(0, lo - k), (None if hi is None else hi - k)
            if more_hi is None or more_hi >= more_lo:
                alternatives.append(_seq(open_, *body, _rep(_seq(sep, rest), more_lo, more_hi), close))
        if k == 0 and rest is not None:
            first = max(1, lo)
            if hi is None or hi >= first:
                alternatives.append(_seq(open_, rest, _rep(_seq(sep, rest), first - 1,
                                                           None if hi is None else hi - 1), close))
        return _alt(*alternatives)

    def object(self, schema: dict, ptr: str, depth: int) -> Maybe:
        fmt = self.fmt
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(properties, dict):
            raise GrammarError(f"'properties' at {ptr} must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise GrammarError(f"'required' at {ptr} must be a list of strings")
        extra_schema = schema.get("additionalProperties", not (self.strict and properties))
        undeclared = [name for name in required if name not in properties]
        if undeclared:
            # A required name outside 'properties' is an additional property that must be there:
            # declare it (after the others) with the additionalProperties schema.
            properties = {**properties, **{name: extra_schema for name in undeclared}}
        key_sep = fmt.key()
        members: List[Tuple[Expr, bool]] = []  # (member, required)
        for name, sub in properties.items():
            value = self.schema(sub, f"{ptr}/properties/{_escape_token(name)}", depth + 1)
            if value is None:
                if name in required:
                    return None
                continue  # the property must be absent; additional keys exclude its name too
            member = _seq(_string_constant(name), key_sep, value)
            if member is None:  # a name with a lone surrogate: no document can spell it here
                if name in required:
                    return None
                continue
            members.append((member, name in required))
        extra_value = self.schema(extra_schema, f"{ptr}/additionalProperties", depth + 1)
        extra: Maybe = None
        if extra_value is not None:
            extra = self.share(_seq(self.key_excluding(list(properties)), key_sep, extra_value),
                               "extra_member")
        sep = fmt.item(depth)
        n = len(members)
        # first_needed[i]: members from i on may be the first ones written (all before skipped).
        first_needed = [True] * (n + 1)
        for i in range(1, n + 1):
            first_needed[i] = first_needed[i - 1] and not members[i - 1][1]
        # rest[i]: members i.. after at least one member was written (each after a separator).
        rest: List[Maybe] = [None] * (n + 1)
        rest[n] = _rep(_seq(sep, extra), 0, None) if extra is not None else EMPTY
        for i in range(n):
            if first_needed[i]:  # the member is written in two places: first(i) and rest[i]
                members[i] = (self.share(members[i][0], "member"), members[i][1])
        for i in range(n - 1, -1, -1):
            member, needed = members[i]
            piece = Sequence((sep, member))
            tail = rest[i + 1]
            if first_needed[i]:  # rest[i+1] is used twice: by rest[i] and by first(i)
                tail = self.share(tail, "members")
                rest[i + 1] = tail
            rest[i] = _seq(piece if needed else Repeat(piece, 0, 1), tail)
        first: Maybe = _seq(extra, rest[n]) if extra is not None else None
        for i in range(n - 1, -1, -1):
            if not first_needed[i]:
                continue
            member, needed = members[i]
            here = _seq(member, rest[i + 1])
            first = here if needed else _alt(here, first)
        empty_ok = not any(needed for _, needed in members)
        return _alt(fmt.empty("{}") if empty_ok else None,
                    _seq(fmt.open("{", depth), first, fmt.close("}", depth)))

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
            alternatives.append(_seq(_unit(_complement(children)), tail))
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
            except GrammarError:
                return True
        if isinstance(schema, dict) and isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
            return self.deref(schema["allOf"][0], seen)
        return schema

    def type_set(self, schema: Any) -> set:
        """Types the schema's values may have ('number' meaning non-integral numbers)."""
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
        types_a, types_b = self.type_set(a), self.type_set(b)
        if not types_a & types_b:
            return True
        values_a, values_b = self.value_set(a), self.value_set(b)
        if values_a is not None and values_b is not None and not values_a & values_b:
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

    def provably_disjoint(self, branches: list) -> bool:
        return all(self.disjoint(branches[i], branches[j])
                   for i in range(len(branches)) for j in range(i + 1, len(branches)))


# ----------------------------------------------------------------------------- checks and entry


def _productive_rules(rules: Dict[str, Expr]) -> set:
    """Rules that derive at least one finite string (fixpoint)."""
    productive: set = set()

    def ok(expr: Expr) -> bool:
        if isinstance(expr, Literal):
            return True
        if isinstance(expr, CharClass):
            return bool(expr.effective_ranges())
        if isinstance(expr, RuleRef):
            return expr.name in productive
        if isinstance(expr, Sequence):
            return all(ok(item) for item in expr.items)
        if isinstance(expr, Choice):
            return any(ok(item) for item in expr.alternatives)
        return expr.min == 0 or ok(expr.expr)

    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            if name not in productive and ok(body):
                productive.add(name)
                changed = True
    return productive


def _load_schema(schema: Any) -> Any:
    if isinstance(schema, (str, bytes)):
        try:
            return json.loads(schema)
        except ValueError as exc:
            raise GrammarError(f"the schema is not valid JSON: {exc}") from exc
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()  # a Pydantic model class
    if isinstance(schema, (dict, bool)):
        return schema
    raise GrammarError(f"a schema must be a dict, a bool, a JSON string or a Pydantic model, "
                       f"got {type(schema).__name__}")


def json_schema_to_grammar(schema: Any, *, any_whitespace: bool = True, indent: Optional[int] = None,
                           separators: Optional[Tuple[str, str]] = None, strict_mode: bool = True,
                           max_whitespace_cnt: Optional[int] = None) -> Grammar:
    """The Grammar of the JSON documents that satisfy ``schema`` (see the module docstring)."""
    root = _load_schema(schema)
    if root is False:
        raise GrammarError("schema 'false' at # matches nothing")
    fmt = _make_format(any_whitespace, indent, separators, max_whitespace_cnt)
    converter = _Converter(root, fmt, strict_mode)
    body = converter.schema(root, "#", 0)
    if body is None:
        raise GrammarError("schema at # matches nothing")
    rules = {name: expr for name, expr in converter.rules.items() if expr is not None}
    rules["root"] = body
    productive = _productive_rules(rules)
    for name in rules:
        if name not in productive:
            where = converter.rule_pointer.get(name, "#")
            raise GrammarError(f"schema at {where} admits no finite JSON value")
    ordered = [Rule("root", body)] + [Rule(n, e) for n, e in rules.items() if n != "root"]
    return Grammar(tuple(ordered), root_rule_name="root")
