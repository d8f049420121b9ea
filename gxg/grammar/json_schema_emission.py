"""JSON Schema grammar emission: schemas, as ``SchemaAnalysis`` reads them, become Grammar IR.

In:  a ``SchemaAnalysis`` of the root schema (``gxg.grammar.json_schema_analysis``), the output
     format (``make_format(any_whitespace, indent, separators, max_whitespace_cnt)``) and the
     options that shape the text: ``any_order`` (members in any order) and
     ``any_string_spelling`` (every spelling of the strings the schema names, or the canonical
     one only); then ``GrammarEmitter.schema(schema, pointer, depth)`` for the root.
Out: ``GrammarEmitter.grammar(body)``: a ``Grammar`` whose root rule ``root`` is that
     expression and whose other rules are the ones made on the way (one per referenced schema,
     shared helpers such as ``json_string``, member-order states, string automata), each checked
     to derive a finite string. Errors: ``GrammarError`` naming the keyword and the JSON
     pointer; a bound not enforced is a ``JsonSchemaRelaxationWarning``.

What is emitted here: literals and constants, JSON strings as units (raw or escaped code
points, or the canonical spelling), numbers (``gxg.grammar.json_numbers``), arrays, objects and
their member orders, whitespace and indentation, and rule naming. Every question about the
schema itself (merging, complements, $ref targets, whether a value satisfies a schema, oneOf
disjointness) is asked of the ``SchemaAnalysis``. ``gxg.grammar.json_schema`` runs the two; its
docstring is the contract.
"""
from __future__ import annotations

import functools
import json
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence as Seq, Tuple

from gxg import compile_budget
from gxg.graphs import reaching
from gxg.grammar import code_point_dfa as dfa_ops
from gxg.grammar.code_point_dfa import dfa_to_expr
from gxg.grammar.ir import (EMPTY, CharClass, Choice, Expr, Grammar, GrammarError, Literal, Repeat,
                            Rule, RuleRef, Sequence, complement_ranges, normal_choice,
                            normal_constant, normal_repeat, normal_sequence, subtract_range)
from gxg.grammar.json_numbers import json_number_language
from gxg.grammar.json_schema_analysis import (
    EXPANDED,
    MERGE_BUDGET,
    NUMERIC_BOUNDS,
    JsonSchemaRelaxationWarning,
    SchemaAnalysis,
    asserts,
    canonical,
    count,
    declared_types,
    escape_token,
    exact_decimal,
    json_type_of,
    resolve_pointer,
    string_regexes,
)
from gxg.grammar.rule_analysis import is_productive, least_fixpoint

MAX_INDENT_DEPTH = 10

Maybe = Optional[Expr]  # None stands for the empty language (a schema nothing satisfies)

# An object's members are written in a fixed order, so minProperties/maxProperties count along a
# chain of (declared member index, members so far) states; more than this many is refused (with
# nothing to count the chain is linear in the members, whatever their number).
MAX_COUNT_STATES = 4096
MAX_PATTERN_PROPERTIES = 4
MAX_CONTAINS_COUNT = 64  # contains with item bounds: one alternative per witness position
# maxLength / maxItems / maxProperties above this are not enforced (a warning says so): every
# allowed count is its own chain of automaton states, and the compiler walks the vocabulary
# from each of them.
MAX_EXACT_BOUND = 2048
# any_order: the required members seen so far are tracked as a set up to this many.
MAX_ANY_ORDER_REQUIRED = 9


# A cache across compiles, of a pure function (DFAs are immutable): the language of a string
# schema with lengths and patterns (``string_dfa``), by (minLength, maxLength, its regexes,
# its excluded values). A schema family repeats them (twelve MaskBench files share
# ``^[A-Za-z0-9:_\-]+$`` up to 255 characters), and their product automaton in Python takes
# tens of milliseconds. Bounded: cleared when full. Failures (an unsupported regex, a
# product too large) are not kept, and raise with their own location every time.
_STRING_DFAS: Dict[tuple, "dfa_ops.Dfa"] = {}
_STRING_DFAS_LIMIT = 512


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


@functools.lru_cache(maxsize=None)  # a cache of a pure function: at most 136 (lo, hi) pairs
def _hex_digits(lo: int, hi: int) -> CharClass:
    """One hex digit (either case) whose value is in [lo, hi]."""
    ranges = []
    for value in range(lo, hi + 1):
        for char in {_HEX[value], _HEX[value].upper()}:
            ranges.append((ord(char), ord(char)))
    return CharClass(tuple(ranges))


def _hex_range(lo: int, hi: int, width: int) -> Expr:
    """Hex numerals of exactly ``width`` digits (either case) with value in [lo, hi], in normal
    form as built (a string unit's ``\\u`` spellings: new units are built for every key trie,
    and normalising nested sequences allocated a node per level)."""
    if width == 0:
        return EMPTY
    unit = 16 ** (width - 1)
    first, last = lo // unit, hi // unit
    lo_rest, hi_rest = lo - first * unit, hi - last * unit
    if first == last:
        return normal_sequence((_hex_digits(first, first), _hex_range(lo_rest, hi_rest, width - 1)))
    parts: List[Expr] = []
    full_from, full_to = first, last
    if lo_rest != 0:
        parts.append(normal_sequence((_hex_digits(first, first),
                                      _hex_range(lo_rest, unit - 1, width - 1))))
        full_from = first + 1
    if hi_rest != unit - 1:
        full_to = last - 1
    if full_from <= full_to:
        parts.append(normal_sequence((_hex_digits(full_from, full_to),
                                      normal_repeat(_hex_digits(0, 15), width - 1, width - 1))))
    if hi_rest != unit - 1:
        parts.append(normal_sequence((_hex_digits(last, last), _hex_range(0, hi_rest, width - 1))))
    return normal_choice(parts)


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
        return normal_sequence((_lit("\\u"), _hex_range(high_lo, high_hi, 4),
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
        alternatives.append(normal_sequence((_lit("\\u"), _hex_range(lo, hi, 4))))
    for lo, hi in _intersect(ranges, 0x10000, 0x10FFFF):
        alternatives.extend(_surrogate_pairs(lo, hi))
    if not alternatives:
        return None
    # normal as built, and known to every compile as such (normal_constant walks it once and
    # allocates nothing): each grammar's rules of units are then not walked again (they were
    # ~40 % of the front end's normalisation)
    return normal_constant(normal_choice(alternatives))


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


def make_format(any_whitespace, indent, separators, max_whitespace_cnt) -> _Format:
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


# ----------------------------------------------------------------------------- numbers as constants


def _number_spellings(value) -> List[str]:
    if isinstance(value, float) and not math.isfinite(value):
        return []  # NaN / Infinity are no JSON
    spellings = [json.dumps(value)]
    if isinstance(value, int) and abs(value) < 2 ** 53:
        spellings.append(repr(float(value)))
    elif isinstance(value, float) and value.is_integer():
        spellings.append(str(int(value)))
    return list(dict.fromkeys(spellings))


# ----------------------------------------------------------------------------- the emitter


class GrammarEmitter:
    """Builds the rules of one grammar: ``schema`` turns a subschema into an expression (None:
    nothing satisfies it), adding the rules it needs to ``rules``; ``grammar`` assembles them."""

    def __init__(self, schemas: SchemaAnalysis, fmt: _Format, any_order: bool = False,
                 any_string_spelling: bool = False, excludes: Seq[str] = ()):
        self.schemas = schemas
        self.fmt = fmt
        self.any_order = any_order
        self.any_spelling = any_string_spelling  # named strings: every spelling, or canonical only
        # Substrings that no string left free by the schema may contain as written (a
        # structural tag's json_schema.excludes; see ``excluded_string_body``).
        self.excludes: Tuple[str, ...] = tuple(dict.fromkeys(excludes))
        self.rules: Dict[str, Optional[Expr]] = {}
        self.rule_numbers: Dict[str, int] = {}
        self.ref_rules: Dict[Tuple[str, int], str] = {}
        self.rule_pointer: Dict[str, str] = {}
        self.referenced: set = set()
        self.empty_refs: set = set()  # (pointer, depth key) of referenced schemas found empty
        self.cache: Dict[Any, Any] = {}  # shared pieces: regex bodies, units, numbers, strings

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

    # -- excludes (XGrammar 0.2.8's JSONSchemaFormat.excludes)
    def contains_excluded(self, written: str) -> bool:
        return any(exclude in written for exclude in self.excludes)

    def excluded_string_body(self, names: Seq[str] = ()) -> Expr:
        """The body of a JSON string (what lies between its quotes, as written: raw code points
        and escapes) in which no exclude occurs in the written text, and that spells none of
        ``names`` (in any spelling): a code-point automaton written as right-linear rules."""
        key = ("excluded_body", tuple(names))
        if key in self.cache:
            return self.cache[key]
        hex_digit = CharClass(((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)))
        unit = Choice((CharClass(((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)), negated=True),
                       Sequence((_lit("\\"), Choice((
                           CharClass(tuple((ord(c), ord(c)) for c in '"\\/bfnrt')),
                           Sequence((_lit("u"), Repeat(hex_digit, 4, 4)))))))))
        everything = Repeat(CharClass(((0, 0x10FFFF),)), 0, None)
        try:
            dfa = dfa_ops.dfa_from_expr(Repeat(unit, 0, None))
            for exclude in self.excludes:
                dfa = dfa_ops.difference(dfa, dfa_ops.dfa_from_expr(
                    Sequence((everything, _lit(exclude), everything))))
            bodies = []
            for name in names:
                spelled = _string_constant(name)
                if spelled is not None:
                    bodies.append(Sequence(tuple(spelled.items[1:-1])) if len(spelled.items) > 2
                                  else EMPTY)
            if bodies:
                dfa = dfa_ops.difference(dfa, dfa_ops.dfa_from_expr(Choice(tuple(bodies))))
        except dfa_ops.DfaTooLarge as exc:
            raise GrammarError(f"unsupported option 'excludes' {list(self.excludes)!r}: the "
                               f"automaton of the strings without them is too large: {exc}") from None

        def define(ref: RuleRef, body: Expr) -> None:
            self.rules[ref.name] = body
        body = dfa_to_expr(dfa, lambda ranges: CharClass(tuple(ranges)),
                           lambda h: RuleRef(self.new_rule(h)), "json_string_excluding",
                           define_rule=define)
        body = EMPTY if body is None else body  # never empty: "" contains no (non-empty) exclude
        self.cache[key] = body
        return body

    # -- helper rules shared by all schemas
    def string_rule(self) -> RuleRef:
        # Any JSON string, lone surrogate escapes included (no length to count).
        if self.excludes:
            return self.helper("json_string_excluding", lambda: Sequence((
                _lit('"'), self.excluded_string_body(), _lit('"'))))

        def build():
            char = Choice((CharClass(((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)), negated=True),
                           Sequence((_lit("\\"), Choice((CharClass(tuple((ord(c), ord(c)) for c in '"\\/bfnrt')),
                                                         Sequence((_lit("u"), Repeat(_hex_digits(0, 15), 4, 4)))))))))
            return Sequence((_lit('"'), Repeat(char, 0, None), _lit('"')))
        return self.helper("json_string", build)

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
        kind = json_type_of(value)
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
        any_string_spelling asks for every spelling (to validate existing text). With
        ``excludes``, a string whose canonical spelling contains one has no spelling (as
        XGrammar: such a key or enum/const alternative is left out)."""
        if self.excludes:
            spelling = _canonical_spelling(text)
            if spelling is None or self.contains_excluded(spelling[1:-1]):
                return None
        return _string_constant(text) if self.any_spelling else _canonical_string(text)

    # -- schemas
    def schema(self, schema: Any, ptr: str, depth: int) -> Maybe:
        if schema is True:
            return self.any_value(depth)
        if schema is False:
            return None
        siblings = self.schemas.keywords(schema, ptr)
        if "unevaluatedProperties" in siblings or "unevaluatedItems" in siblings:
            return self.schema(self.schemas.with_unevaluated(siblings, ptr), ptr, depth)
        if any(keyword in siblings for keyword in EXPANDED):
            return self.schema(self.schemas.merge(siblings, {}, ptr), ptr, depth)
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                raise GrammarError(f"$ref at {ptr} must be a string")
            del siblings["$ref"]
            if not asserts(siblings) or not self.schemas.ref_siblings_apply:
                return self.ref(ref, ptr, depth)
            # 2020-12: siblings apply too (older drafts ignore them; honouring them only narrows).
            return self.ref_with_siblings(ref, siblings, ptr, depth)
        if "allOf" in schema:
            subs = schema["allOf"]
            if not isinstance(subs, list) or not subs:
                raise GrammarError(f"'allOf' at {ptr} must be a non-empty list")
            del siblings["allOf"]
            if len(subs) == 1 and not asserts(siblings):
                return self.schema(subs[0], f"{ptr}/allOf/0", depth)
            merged: Any = siblings
            for i, sub in enumerate(subs):
                merged = self.schemas.merge(merged, sub, f"{ptr}/allOf/{i}")
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
                    disjoint = self.schemas.disjoint_one_of(subs, ptr)
                    if disjoint is None:
                        self.schemas.relax_one_of(ptr)
                    keyword, subs = "anyOf", subs if disjoint is None else disjoint
                if asserts(siblings):
                    # allOf(siblings, anyOf(b...)) == anyOf(allOf(siblings, b)...)
                    return self.schema(self.schemas.merge(siblings, {keyword: subs}, ptr), ptr, depth)
                branches = [self.schema(s, f"{ptr}/{keyword}/{i}", depth) for i, s in enumerate(subs)]
                return _alt(*branches)
        if "enum" in siblings or "const" in siblings:
            return self.enum(siblings, ptr, depth)
        return _alt(*[self.typed(siblings, t, ptr, depth) for t in declared_types(siblings, ptr)])

    def ref(self, ref: str, ptr: str, depth: int) -> Maybe:
        target, target_ptr = resolve_pointer(self.schemas.root, ref, ptr)
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
        _, target_ptr = resolve_pointer(self.schemas.root, ref, ptr)
        key = ("ref+", target_ptr, canonical(siblings), self.fmt.depth_key(depth))
        if key in self.cache:
            return self.cache[key]
        name = self.new_rule("ref_" + target_ptr.rsplit("/", 1)[-1])
        self.cache[key] = RuleRef(name)
        body = self.schema(self.schemas.merge(siblings, {"$ref": ref}, ptr), ptr, depth)
        self.rules[name] = body
        if body is None:
            self.cache[key] = None  # a use inside it saw the RuleRef: the checks at the end catch it
            return None
        return RuleRef(name)

    def enum(self, schema: dict, ptr: str, depth: int) -> Maybe:
        return _alt(*[self.constant(v, depth) for v in self.schemas.enum_values(schema, ptr)])

    def upper_bound(self, schema: dict, keyword: str, ptr: str) -> Optional[int]:
        """maxLength / maxItems / maxProperties for the grammar. Each allowed count is its own
        chain of automaton states whose token masks are all computed at compile time (about
        10 ms each with a 150k vocabulary), so rather than compile for minutes a bound above
        MAX_EXACT_BOUND is not enforced (None), announced with a ``JsonSchemaRelaxationWarning``:
        the keyword only narrows the language, and a value that long is beyond a decoding
        budget."""
        bound = count(schema, keyword, ptr, None)
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
        key = ("number", integer, canonical(bounds))
        if key in self.cache:
            return self.cache[key]
        for keyword, value in bounds.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    (isinstance(value, float) and not math.isfinite(value)):
                raise GrammarError(f"'{keyword}' at {ptr} must be a number")
        if "multipleOf" in bounds and exact_decimal(bounds["multipleOf"]) <= 0:
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
        lo = count(schema, "minLength", ptr, 0)
        hi = self.upper_bound(schema, "maxLength", ptr)
        if hi is not None and hi < lo:
            return None
        regexes = string_regexes(schema, ptr)
        excluded = schema.get("x-gxg-not-strings", [])
        if self.excludes and not regexes and (lo or hi is not None or excluded):
            # XGrammar drops minLength/maxLength (with a warning) and filters the string: that
            # would accept strings of any length; gxg refuses instead.
            raise GrammarError(f"unsupported keyword '{'minLength' if lo else 'maxLength' if hi is not None else 'not'}' "
                               f"at {ptr} together with the structural tag's excludes")
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
        # One rule per language, as for the bounded strings above: a schema repeats a pattern
        # with its length bound on many properties, and each copy of its DFA's rules is one
        # more set of (up to ~850) rules to build. string_dfa gives one object per language.
        dfa = self.string_dfa(schema, ptr)
        key = ("string_dfa", id(dfa))
        if key not in self.cache:
            body = self.dfa_expr(dfa, "string")
            self.cache[key] = (dfa, self.share(_seq(_lit('"'), body, _lit('"')), "string_language"))
        return self.cache[key][1]

    def string_dfa(self, schema: dict, ptr: str):
        """The decoded values a (flat) string schema admits, as a DFA: lengths, regexes, excluded
        values and, for property names, enum/const. Kept across compiles (``_STRING_DFAS``)."""
        lo = count(schema, "minLength", ptr, 0)
        hi = self.upper_bound(schema, "maxLength", ptr)
        regexes = string_regexes(schema, ptr)
        excluded = tuple(schema.get("x-gxg-not-strings") or ())
        key = (lo, hi, tuple((regex, search, negated) for regex, search, negated, _ in regexes),
               excluded)
        known = _STRING_DFAS.get(key)
        if known is not None:
            return known
        keyword = "pattern"
        try:
            dfa = dfa_ops.length_between(lo, hi) if (lo or hi is not None) else dfa_ops.any_string()
            for regex, search, negated, keyword in regexes:
                part = self.schemas.regex_dfa(regex, search, keyword, ptr)
                dfa = dfa_ops.difference(dfa, part) if negated else dfa_ops.intersect(dfa, part)
            if excluded:
                dfa = dfa_ops.difference(dfa, dfa_ops.literal_strings(excluded))
        except dfa_ops.DfaTooLarge as exc:
            raise GrammarError(f"unsupported keyword '{keyword}' at {ptr} combined with lengths or "
                               f"other patterns: {exc}") from None
        if len(_STRING_DFAS) >= _STRING_DFAS_LIMIT:
            _STRING_DFAS.clear()
        _STRING_DFAS[key] = dfa
        return dfa

    def regex_body(self, regex: str, search: bool, keyword: str, ptr: str) -> Maybe:
        """The JSON spellings (raw or escaped units) of the strings ``regex`` matches: the
        regex's rules copied with each code point set replaced by its units, spelled inline
        (``inline_unit``: a unit rule called in a loop would leave a top inside it at every
        character)."""
        key = ("body", regex, search)
        if key in self.cache:
            return self.cache[key]
        grammar = self.schemas.regex_grammar(regex, search, keyword, ptr)
        names = {rule.name: self.new_rule(keyword) for rule in grammar.rules}
        for rule in grammar.rules:
            self.rules[names[rule.name]] = self.spelled(rule.body, names)
        body: Maybe = RuleRef(names[grammar.root_rule_name])
        if self.rules[names[grammar.root_rule_name]] is None:
            body = None
        self.cache[key] = body
        return body

    def spelled(self, expr: Expr, names: Dict[str, str]) -> Maybe:
        """``regex_body``'s copy of a regex rule's body: code point sets as their units, rule
        references renamed by ``names``."""
        if isinstance(expr, Literal):
            return _seq(*[self.inline_unit(((ord(c), ord(c)),)) for c in expr.data.decode("utf-8")])
        if isinstance(expr, CharClass):
            return self.inline_unit(expr.effective_ranges())
        if isinstance(expr, RuleRef):
            return RuleRef(names[expr.name])
        if isinstance(expr, Sequence):
            return _seq(*[self.spelled(item, names) for item in expr.items])
        if isinstance(expr, Choice):
            return _alt(*[self.spelled(item, names) for item in expr.alternatives])
        return _rep(self.spelled(expr.expr, names), expr.min, expr.max)

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

    # -- arrays
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
        default_rest = not (self.schemas.strict and prefix)
        rest_schema = schema.get(rest_key, default_rest)
        lo = count(schema, "minItems", ptr, 0)
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
        lo = count(schema, "minItems", ptr, 0)
        hi = self.upper_bound(schema, "maxItems", ptr)
        if "prefixItems" in schema or isinstance(items, list):
            raise GrammarError(f"unsupported keyword 'contains' at {ptr} with tuple items")
        item = self.share(self.schema(items, f"{ptr}/items", depth + 1), "item")
        witness = self.schema(self.schemas.merge(items, schema["contains"], f"{ptr}/contains"),
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
        negated = self.schemas.negate(schema["contains"], f"{ptr}/contains", [MERGE_BUDGET])
        other = self.schemas.merge(items, negated, f"{ptr}/contains")
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

    # -- objects
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
        closed = self.schemas.strict and (properties or patterns)  # strict_mode's default
        extra_schema = schema.get("additionalProperties", not closed)
        lo = count(schema, "minProperties", ptr, 0)
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
        """The value of property ``name`` (None: it must be absent), from the schema that
        ``SchemaAnalysis.property_schema`` finds for it."""
        found = self.schemas.property_schema(name, properties, patterns, extra_schema, names_schema, ptr)
        return None if found is None else self.schema(found[0], found[1], depth + 1)

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
        if self.excludes:
            raise GrammarError(f"unsupported keyword '{'patternProperties' if patterns else 'propertyNames'}' "
                               f"at {ptr} together with the structural tag's excludes")
        keys, named = dfa_ops.any_string(), False
        if names_schema is not True:
            keys, named = self.names_dfa(names_schema, f"{ptr}/propertyNames")
        if declared:
            keys = dfa_ops.difference(keys, dfa_ops.literal_strings(declared))
        compiled = [(self.schemas.regex_dfa(p, True, "patternProperties", ptr), s, p)
                    for p, s in patterns.items()]
        alternatives: List[Maybe] = []
        try:
            for mask in range(2 ** len(compiled)):
                language = keys
                value_schema, value_ptr = extra_schema, f"{ptr}/additionalProperties"
                chosen = []
                for bit, (dfa, sub, pattern) in enumerate(compiled):
                    if mask >> bit & 1:
                        language = dfa_ops.intersect(language, dfa)
                        chosen.append((sub, f"{ptr}/patternProperties/{escape_token(pattern)}"))
                    else:
                        language = dfa_ops.difference(language, dfa)
                if dfa_ops.is_empty(language):
                    continue
                if chosen:
                    value_schema, value_ptr = chosen[0]
                    for sub, sub_ptr in chosen[1:]:
                        value_schema = self.schemas.merge(value_schema, sub, sub_ptr)
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
        flat = self.schemas.normal(names_schema, ptr, [MERGE_BUDGET])
        if flat is False:
            return dfa_ops.nothing(), False
        if any(k in flat for k in ("anyOf", "oneOf")):
            raise GrammarError(f"unsupported keyword 'propertyNames' at {ptr}: anyOf/oneOf of names")
        if "type" in flat and "string" not in declared_types(flat, ptr):
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
        ``gxg.grammar.json_schema`` on duplicate names).

        Every required member is one shared rule (its key and value), and the optional and
        extra members are one shared rule that spells their keys as a trie, which each state
        refers to once: the grammar is linear in the members, not their number times the
        states, and the states' rules are the same shape in every object (``sep (member_a
        members_2 | free_members members_3)``), so their DFAs come from the compiler's cache.
        (Keys spelled inside every state's rule, as before 2026-12-07, kept a key's bytes on one
        stack; measured on MaskBench, that cost TTFM more than the extra stacks cost a step:
        ``profiling/RESULTS.md``, "Object members as shared rules".)"""
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
        # Two or more free members are one shared rule that spells their keys: one alternative
        # per free member in every state was quadratic, and a rule that only calls member
        # rules would make every caller's closure enter all of them.
        group_free = len(free) > 1
        spelled = [Sequence((m.key, self.share(m.rest, "member_value")))
                   if group_free and not m.required
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
        if self.excludes:
            return Sequence((_lit('"'), self.excluded_string_body(names), _lit('"')))
        trie: dict = {}
        for name in names:
            node = trie
            for char in name:
                node = node.setdefault(ord(char), {})
            node[None] = {}  # end marker
        return Sequence((_lit('"'), self.key_after(trie)))

    def key_after(self, node: dict) -> Expr:
        """The rest of a key after the names' prefix that led to trie ``node`` (``key_excluding``):
        the closing quote unless a name ends here, a unit no name goes on with, or a name's next
        unit."""
        children = [cp for cp in node if cp is not None]
        alternatives: List[Maybe] = []
        if None not in node:
            alternatives.append(_lit('"'))
        alternatives.append(self.key_rest(_complement(children)))
        for cp in children:
            alternatives.append(_seq(_unit(((cp, cp),)), self.key_after(node[cp])))
        return _alt(*alternatives)

    def key_rest(self, ranges) -> Maybe:
        """The rest of a key that left the names' trie: one unit in ``ranges``, then
        ``json_chars_close`` (any units, the closing quote); one rule per ``ranges``, shared by
        the trie nodes (and cached with the automaton's rule DFAs across schemas). The unit is
        spelled inside the rule that goes on with the rest of the key, and the rest's units
        inside its loop: a rule of one unit, or a loop of unit calls, leaves the mask cache a
        top inside the called rule where every token longer than one character pops out of
        it, is context-dependent and is walked at run time (~128k tokens of the Qwen
        vocabulary at each such top, MaskBench's Github schemas; profiling/RESULTS.md)."""
        key = ("key_rest", tuple(ranges))
        if key not in self.cache:
            unit = self.inline_unit(ranges)
            rest = self.helper("json_chars_close", lambda: Sequence((
                Repeat(_unit(_ALL), 0, None), _lit('"'))))
            self.cache[key] = None if unit is None else self.share(Sequence((unit, rest)),
                                                                   "json_key_rest")
        return self.cache[key]

    # -- the grammar
    def grammar(self, body: Maybe) -> Grammar:
        """The Grammar with root rule ``root`` = ``body`` (the root schema's expression) and the
        rules made on the way, root first; every rule must derive a finite string."""
        if body is None:
            raise GrammarError("schema at # matches nothing")
        ordered = [Rule("root", body)] + [Rule(name, expr) for name, expr in self.rules.items()
                                          if expr is not None and name != "root"]
        # rules deriving a finite string (from the normal forms and references Rule computed)
        productive = least_fixpoint({rule.name: rule.body for rule in ordered}, is_productive,
                                    {rule.name: rule.refs for rule in ordered})
        for rule in ordered[1:] + ordered[:1]:  # the innermost schema's pointer first
            if rule.name not in productive:
                where = self.rule_pointer.get(rule.name, "#")
                raise GrammarError(f"schema at {where} admits no finite JSON value")
        # every rule derives something; with no class that matches nothing, so does every
        # part of every body (what ``Grammar.pruned`` says, and the passes then skip)
        return Grammar(tuple(ordered), root_rule_name="root",
                       pruned=not any(rule.has_empty_class for rule in ordered))
