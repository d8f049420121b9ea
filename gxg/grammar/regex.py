"""Regex front-end: an ECMAScript regular expression -> Grammar IR.

In:  a pattern string in ECMAScript syntax — the subset people write in JSON Schema ``pattern``
     and pass to ``Grammar.from_regex`` — without delimiters or flags.
Out: ``Grammar`` whose root rule ``root`` accepts exactly the strings the pattern matches IN
     FULL (as if wrapped in ``^(?:...)$``). Normally ``root`` is the only rule; helper rules
     ``root_1``, ``root_2``, ... appear only for very deeply nested patterns (see "Limits").
     Invalid or unsupported patterns raise ``GrammarError(message, line=1, column=index + 1)``,
     where index is the offending code point's index in the pattern.

What is supported, and what it means
------------------------------------
* Literals: any code point. Matching is always case-sensitive (there are no flags).
* Escapes: ``\\n \\t \\r \\f \\v``, ``\\0`` (NUL, not followed by a digit), ``\\xHH``, ``\\uHHHH``,
  ``\\u{H...}`` (up to U+10FFFF), ``\\cX`` (X a letter: its code modulo 32), an escaped
  non-letter is itself (``\\. \\* \\\\ \\/ \\-`` ...). A surrogate pair written as two ``\\uHHHH``
  escapes is one code point, as in a JavaScript string.
* ``.`` is ANY code point, ``\\n`` included — XGrammar's ``from_regex`` semantics. (In ECMAScript
  without the ``s`` flag ``.`` excludes ``\\n \\r \\u2028 \\u2029``.)
* ``\\d`` = ``[0-9]``, ``\\w`` = ``[A-Za-z0-9_]`` (ASCII, as in ECMAScript and XGrammar).
* ``\\s`` is ECMAScript's white space and line terminators: ``\\t \\n \\v \\f \\r``, U+0020,
  U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF. This is what a
  JSON Schema ``pattern`` means. XGrammar's ``\\s`` has only the first six plus U+00A0, so
  gxg's ``\\s`` accepts more and its ``\\S`` accepts less than XGrammar's.
* Classes ``[...]`` and ``[^...]`` with ranges and escapes (``\\b`` inside a class is U+0008).
  ``-`` is literal at either end; a range with a class escape as an end (``[\\d-z]``) means the
  escape, ``-`` and the other end (ECMAScript Annex B). ``[^]`` is any code point. A class that
  matches nothing (``[]``, ``[^\\s\\S]``, a lone surrogate) is an error, as ``[]`` is in XGrammar.
* Groups ``(...)``, ``(?:...)``, ``(?<name>...)``; alternation with empty alternatives (``a|``).
* Quantifiers ``* + ? {m} {m,} {m,n}``, each optionally followed by ``?`` (lazy: the same
  language). Bounds are at most ``MAX_REPETITION`` (10000).
* ``{`` that does not begin a well-formed ``{m}``, ``{m,}`` or ``{m,n}`` is a literal, as are a
  lone ``}`` and ``]`` (ECMAScript Annex B, what browsers and JSON Schema validators do; XGrammar
  rejects such a ``{``). Note ``a{,3}`` is therefore the literal text ``a{,3}`` (Python's ``re``
  reads it as ``a{0,3}``).
* ``search=True`` (JSON Schema's ``pattern``): the strings that contain a match; a top-level
  alternative starting with ``^`` / ending with ``$`` is anchored there, anchors inside groups are
  refused. ``dot_all=False``: ``.`` excludes ``\\n \\r \\u2028 \\u2029`` (ECMAScript without ``s``).
* Anchors: the match is always full, so ``^`` and ``$`` are accepted where they are no-ops: ``^``
  where nothing can have been matched yet (start of the pattern, or start of an alternative or
  group that itself starts the pattern, e.g. ``^a|^b``, ``(^a|b)c``), ``$`` where nothing can
  follow (the mirror image, e.g. ``a$|b$``). A group containing an anchor may not be repeated
  more than once (``(^a)*``). Anywhere else an anchor restricts the language in a way a grammar
  cannot express by dropping it, so it is an error (XGrammar drops it with a warning, which
  changes the language: ``a^b`` matches nothing in ECMAScript but ``ab`` in XGrammar).
* An escaped letter with no meaning (``\\q``, ``\\y``) is the letter itself, as in ECMAScript
  (non-Unicode mode) and XGrammar (which warns).

Errors (besides syntax errors): backreferences ``\\1``-``\\9`` and ``\\k<name>``; legacy octal
escapes ``\\0N`` (ECMAScript reads ``\\01`` as U+0001, XGrammar as NUL then ``1``); lookahead and
lookbehind; inline flags and modifiers ``(?i)`` ``(?i:...)``; ``\\p{...}`` / ``\\P{...}``; word
boundaries ``\\b`` / ``\\B``; ``\\a`` and ``\\e`` (the letter in ECMAScript, BEL / ESC in XGrammar
and PCRE — ambiguous, so refused: write ``\\x07``, ``\\x1b`` or the letter); ``\\cX`` with X not a
letter; ``\\x`` and ``\\u`` without enough hex digits (ECMAScript Annex B would read them as the
letters ``x`` / ``u``; XGrammar errors too); lone surrogates (no UTF-8 encoding).

Where XGrammar's ``from_regex`` (0.2.8) defines a different language: ``\\s``/``\\S`` (above);
a literal ``{`` (XGrammar: error); mid-pattern anchors (XGrammar: dropped); ``\\a`` ``\\e`` ``\\0N``
(XGrammar: BEL, ESC, NUL + digit); surrogate-pair escapes (XGrammar keeps two surrogates);
``[\\^a]`` (XGrammar copies the class body into EBNF, where it becomes the negated ``[^a]``);
``[\\B]`` and ``[\\p{L}]`` (XGrammar: literal letters; gxg: errors); bounds above 10000.

Limits
------
Parsing is iterative and linear in the pattern length, so nesting depth is not limited by
Python's recursion limit. The IR is a tree and later passes walk it recursively, so when an
expression would nest more than ``MAX_EXPRESSION_DEPTH`` levels deep, deep subexpressions are moved
into helper rules ``root_1``, ``root_2``, ... (same language, every rule body shallow).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from gxg.grammar.ir import (
    complement_ranges,
    children,
    EMPTY,
    MAX_CODE_POINT,
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

__all__ = ["regex_to_grammar", "MAX_REPETITION", "MAX_EXPRESSION_DEPTH"]

MAX_REPETITION = 10000
MAX_EXPRESSION_DEPTH = 64
ROOT = "root"

Ranges = Tuple[Tuple[int, int], ...]

DIGIT: Ranges = ((0x30, 0x39),)
WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
# ECMAScript WhiteSpace + LineTerminator (ECMA-262 §22.2.2.9, CharacterClassEscape :: s).
SPACE: Ranges = (
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
)
ANY: Ranges = ((0, MAX_CODE_POINT),)
# ECMAScript '.' without the s flag: anything but a LineTerminator.
NOT_LINE_TERMINATOR: Ranges = ((0, 0x09), (0x0B, 0x0C), (0x0E, 0x2027), (0x202A, MAX_CODE_POINT))
HIGH_SURROGATES = (0xD800, 0xDBFF)
LOW_SURROGATES = (0xDC00, 0xDFFF)

SIMPLE_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B}
DECIMAL_DIGITS = "0123456789"
HEX_DIGITS = "0123456789abcdefABCDEF"
QUANTIFIER_CHARS = "*+?"


def regex_to_grammar(pattern: str, *, search: bool = False, dot_all: bool = True) -> Grammar:
    """The grammar of the strings that ``pattern`` matches in full (see the module docstring).

    ``search=True``: the strings that CONTAIN a match, as ECMAScript's ``RegExp.test`` and JSON
    Schema's ``pattern`` decide: each top-level alternative not starting with ``^`` may be
    preceded by anything, one not ending with ``$`` followed by anything; anchors elsewhere
    (inside groups) are refused. ``dot_all=False``: ``.`` excludes the line terminators
    ``\n \r \u2028 \u2029`` (ECMAScript without the ``s`` flag, JSON Schema's meaning).
    """
    if not isinstance(pattern, str):
        raise TypeError(f"a regex pattern must be str, got {type(pattern).__name__}")
    raw = _Parser(pattern, search=search, dot_all=dot_all).parse()
    body = _normal_form(raw)
    body, helpers = _split_deep_expressions(body)
    rules = [Rule(ROOT, body)] + [Rule(name, expr) for name, expr in helpers]
    return Grammar(tuple(rules), ROOT)


# ----------------------------------------------------------------------------- errors


def _error(message: str, position: int) -> GrammarError:
    return GrammarError(message, line=1, column=position + 1)


# Why a mid-pattern anchor is refused (XGrammar drops it with a warning, changing the language).
MID_ANCHOR_REASON = ("a full-match grammar cannot express an anchor that is not at the "
                     "start ('^') or the end ('$') of the pattern")


# Why search mode refuses anchors inside groups: the part before or after the group would have to
# be "anything" on some paths and "nothing" on others.
SEARCH_ANCHOR_REASON = "only anchors at the ends of top-level alternatives are supported"


# ----------------------------------------------------------------------------- code-point sets


def _complement(ranges: Ranges) -> Ranges:
    """Code points not in ``ranges``."""
    return complement_ranges(ranges)


def _class_escape_ranges(letter: str) -> Optional[Ranges]:
    """Ranges of ``\\d \\D \\w \\W \\s \\S``; None for any other letter."""
    if letter not in "dDwWsS":
        return None
    base = {"d": DIGIT, "w": WORD, "s": SPACE}[letter.lower()]
    return base if letter.islower() else _complement(base)


def _is_surrogate(code_point: int) -> bool:
    return 0xD800 <= code_point <= 0xDFFF


def _char_class(ranges: Ranges, negated: bool, position: int) -> CharClass:
    """A CharClass that matches at least one code point (else an error at ``position``)."""
    if not ranges and not negated:
        raise _error("empty character class '[]' matches nothing", position)
    cls = CharClass(tuple(ranges), negated)
    if not cls.effective_ranges():
        raise _error("character class matches no character", position)
    return cls


# ----------------------------------------------------------------------------- escapes


@dataclass(frozen=True)
class _Escape:
    """A parsed escape: one code point, or a set (``\\d`` and friends)."""

    code_point: Optional[int] = None
    ranges: Optional[Ranges] = None


def _parse_escape(pattern: str, pos: int, in_class: bool) -> Tuple[_Escape, int]:
    """Parse the escape whose backslash is at ``pos``; return it and the index after it."""
    if pos + 1 >= len(pattern):
        raise _error("pattern ends with a lone backslash", pos)
    letter = pattern[pos + 1]
    after = pos + 2
    ranges = _class_escape_ranges(letter)
    if ranges is not None:
        return _Escape(ranges=ranges), after
    if letter in SIMPLE_ESCAPES:
        return _Escape(SIMPLE_ESCAPES[letter]), after
    if letter == "0":
        if after < len(pattern) and pattern[after] in DECIMAL_DIGITS:
            raise _error("legacy octal escapes like '\\01' are not supported (ECMAScript and "
                         "XGrammar read them differently); write \\xHH or \\uHHHH", pos)
        return _Escape(0), after
    if letter in "123456789":
        what = "octal escapes" if in_class else "backreferences"
        raise _error(f"{what} ('\\{letter}') are not supported", pos)
    if letter == "x":
        digits = pattern[after:after + 2]
        if len(digits) != 2 or not _all_hex(digits):
            raise _error("'\\x' must be followed by exactly two hex digits", pos)
        return _Escape(int(digits, 16)), after + 2
    if letter == "u":
        return _parse_unicode_escape(pattern, pos)
    if letter == "c":
        if after < len(pattern) and _is_ascii_letter(pattern[after]):
            return _Escape(ord(pattern[after]) % 32), after + 1
        raise _error("'\\c' must be followed by an ASCII letter", pos)
    if letter == "b" and in_class:
        return _Escape(0x08), after
    if letter in "bB":
        raise _error(f"word boundary '\\{letter}' is not supported", pos)
    if letter == "k":
        raise _error("backreferences ('\\k<name>') are not supported", pos)
    if letter in "pP":
        raise _error(f"Unicode property escapes ('\\{letter}{{...}}') are not supported", pos)
    if letter in "ae":
        control = "BEL (\\x07)" if letter == "a" else "ESC (\\x1b)"
        raise _error(f"'\\{letter}' is ambiguous: the letter '{letter}' in ECMAScript but "
                     f"{control} in XGrammar and PCRE; write the letter or the \\x escape", pos)
    # Identity escape: an escaped metacharacter, or (ECMAScript Annex B) an escaped letter
    # without a meaning, is the character itself.
    return _Escape(ord(letter)), after


def _parse_unicode_escape(pattern: str, pos: int) -> Tuple[_Escape, int]:
    """``\\uHHHH`` (joined with a following low-surrogate escape) or ``\\u{H...}``."""
    start = pos + 2
    if pattern.startswith("{", start):
        close = start + 1
        while close < len(pattern) and pattern[close] in HEX_DIGITS:
            close += 1
        digits = pattern[start + 1:close]
        if not digits or not pattern.startswith("}", close):
            raise _error("'\\u{' must be followed by hex digits and '}'", pos)
        digits = digits.lstrip("0") or "0"
        if len(digits) > 6 or int(digits, 16) > MAX_CODE_POINT:
            raise _error("'\\u{...}' is above U+10FFFF", pos)
        return _Escape(int(digits, 16)), close + 1
    digits = pattern[start:start + 4]
    if len(digits) != 4 or not _all_hex(digits):
        raise _error("'\\u' must be followed by four hex digits or {hex digits}", pos)
    code_point = int(digits, 16)
    end = start + 4
    if HIGH_SURROGATES[0] <= code_point <= HIGH_SURROGATES[1]:
        low = _low_surrogate_escape_at(pattern, end)
        if low is not None:
            # A surrogate pair spelled as two escapes is one code point, as in a JS string.
            code_point = 0x10000 + ((code_point - 0xD800) << 10) + (low - 0xDC00)
            end += 6
    return _Escape(code_point), end


def _low_surrogate_escape_at(pattern: str, pos: int) -> Optional[int]:
    if not pattern.startswith("\\u", pos):
        return None
    digits = pattern[pos + 2:pos + 6]
    if len(digits) != 4 or not _all_hex(digits):
        return None
    value = int(digits, 16)
    return value if LOW_SURROGATES[0] <= value <= LOW_SURROGATES[1] else None


def _all_hex(text: str) -> bool:
    return all(ch in HEX_DIGITS for ch in text)


def _is_ascii_letter(ch: str) -> bool:
    return ("a" <= ch <= "z") or ("A" <= ch <= "Z")


# ----------------------------------------------------------------------------- classes


def _parse_class(pattern: str, pos: int) -> Tuple[CharClass, int]:
    """Parse ``[...]`` starting at ``pos`` (the ``[``); return the class and the index after."""
    end = len(pattern)
    i = pos + 1
    negated = i < end and pattern[i] == "^"
    if negated:
        i += 1
    ranges: List[Tuple[int, int]] = []
    while True:
        if i >= end:
            raise _error("unterminated character class: '[' has no matching ']'", pos)
        if pattern[i] == "]":
            return _char_class(tuple(ranges), negated, pos), i + 1
        atom_pos = i
        first, i = _parse_class_atom(pattern, i)
        is_range = (i + 1 < end and pattern[i] == "-" and pattern[i + 1] != "]")
        if not is_range:
            ranges.extend(_class_atom_ranges(first, atom_pos))
            continue
        second_pos = i + 1
        second, i = _parse_class_atom(pattern, second_pos)
        if first.ranges is not None or second.ranges is not None:
            # Annex B: a class escape at either end makes '-' an ordinary member.
            ranges.extend(_class_atom_ranges(first, atom_pos))
            ranges.append((ord("-"), ord("-")))
            ranges.extend(_class_atom_ranges(second, second_pos))
            continue
        lo, hi = first.code_point, second.code_point
        if lo > hi:
            raise _error(f"character class range out of order: U+{lo:04X} > U+{hi:04X}",
                         atom_pos)
        ranges.append((lo, hi))


def _parse_class_atom(pattern: str, pos: int) -> Tuple[_Escape, int]:
    if pattern[pos] == "\\":
        return _parse_escape(pattern, pos, in_class=True)
    return _Escape(ord(pattern[pos])), pos + 1


def _class_atom_ranges(atom: _Escape, position: int) -> Ranges:
    if atom.ranges is not None:
        return atom.ranges
    if _is_surrogate(atom.code_point):
        raise _error(f"lone surrogate U+{atom.code_point:04X} cannot appear in UTF-8 text",
                     position)
    return ((atom.code_point, atom.code_point),)


# ----------------------------------------------------------------------------- quantifiers


def _parse_braced_quantifier(pattern: str, pos: int) -> Optional[Tuple[int, Optional[int], int]]:
    """``{m}``, ``{m,}`` or ``{m,n}`` at ``pos``: (min, max, index after); None if not one
    (then, per ECMAScript Annex B, the ``{`` is a literal)."""
    # Scan only digits and one comma, so that many '{' cost linear time in total.
    end = pos + 1
    while end < len(pattern) and (pattern[end] in DECIMAL_DIGITS or pattern[end] == ","):
        end += 1
    if end >= len(pattern) or pattern[end] != "}":
        return None
    body = pattern[pos + 1:end]
    low_text, comma, high_text = body.partition(",")
    if not _is_decimal(low_text) or (high_text and not _is_decimal(high_text)):
        return None
    low = _bounded_int(low_text, pos)
    if not comma:
        return low, low, end + 1
    high = _bounded_int(high_text, pos) if high_text else None
    if high is not None and high < low:
        raise _error(f"quantifier {{{low},{high}}} has its upper bound below its lower bound",
                     pos)
    return low, high, end + 1


def _is_decimal(text: str) -> bool:
    return bool(text) and all(ch in DECIMAL_DIGITS for ch in text)


def _bounded_int(digits: str, pos: int) -> int:
    digits = digits.lstrip("0") or "0"
    # Compare the length first: int() of a huge digit string is slow (and limited).
    if len(digits) > len(str(MAX_REPETITION)) or int(digits) > MAX_REPETITION:
        raise _error(f"quantifier bound {digits} is larger than the supported maximum "
                     f"{MAX_REPETITION}", pos)
    return int(digits)


# ----------------------------------------------------------------------------- the parser

# What the last thing in the current alternative is; decides whether a quantifier may follow.
NOTHING, ATOM, QUANTIFIED, ANCHOR = "nothing", "atom", "quantified", "anchor"


@dataclass
class _Frame:
    """An open group (or the whole pattern) while it is being parsed."""

    open_pos: int                    # index of '(' (-1 for the whole pattern)
    at_start: bool                   # nothing can have been matched when the group begins
    alternatives: List[Expr] = field(default_factory=list)
    items: List[Expr] = field(default_factory=list)
    last: str = NOTHING
    last_anchor_pos: Optional[int] = None   # an anchor inside the last atom (a group)
    consumed: bool = False           # the current alternative has an atom
    end_anchor_pos: Optional[int] = None    # a '$' the current alternative ends with
    any_anchor_pos: Optional[int] = None    # first anchor anywhere in the group
    group_end_anchor_pos: Optional[int] = None  # a '$' some alternative ends with
    search: bool = False             # the whole pattern in search mode: unanchored ends get ANY*
    start_anchored: bool = False     # (search) the current alternative began with '^'

    def close_alternative(self) -> None:
        body = _sequence(self.items)
        if self.search:
            anywhere = Repeat(CharClass(ANY), 0, None)
            body = _sequence(([] if self.start_anchored else [anywhere]) + [body]
                             + ([] if self.end_anchor_pos is not None else [anywhere]))
            self.start_anchored = False
        self.alternatives.append(body)
        if self.end_anchor_pos is not None and self.group_end_anchor_pos is None:
            self.group_end_anchor_pos = self.end_anchor_pos
        self.items = []
        self.last = NOTHING
        self.consumed = False
        self.end_anchor_pos = None

    def result(self) -> Expr:
        self.close_alternative()
        if len(self.alternatives) == 1:
            return self.alternatives[0]
        return Choice(tuple(self.alternatives))


def _sequence(items: List[Expr]) -> Expr:
    if not items:
        return EMPTY
    return items[0] if len(items) == 1 else Sequence(tuple(items))


class _Parser:
    """One left-to-right pass with an explicit stack of open groups (no recursion)."""

    def __init__(self, pattern: str, search: bool = False, dot_all: bool = True):
        self.pattern = pattern
        self.search = search
        self.dot = ANY if dot_all else NOT_LINE_TERMINATOR
        self.frames: List[_Frame] = [_Frame(open_pos=-1, at_start=True, search=search)]

    @property
    def frame(self) -> _Frame:
        return self.frames[-1]

    def parse(self) -> Expr:
        pattern = self.pattern
        pos = 0
        while pos < len(pattern):
            pos = self.step(pos)
        if len(self.frames) > 1:
            raise _error("unterminated group: '(' has no matching ')'", self.frame.open_pos)
        return self.frame.result()

    def step(self, pos: int) -> int:
        """Parse the construct at ``pos``; return the index after it."""
        ch = self.pattern[pos]
        if ch == "(":
            return self.open_group(pos)
        if ch == ")":
            return self.close_group(pos)
        if ch == "|":
            self.frame.close_alternative()
            return pos + 1
        if ch in QUANTIFIER_CHARS:
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
            return self.quantify(pos, low, high, pos + 1)
        if ch == "{":
            braced = _parse_braced_quantifier(self.pattern, pos)
            if braced is not None:
                return self.quantify(pos, *braced)
            self.add_atom(Literal.of("{"), pos)
            return pos + 1
        if ch == "^":
            return self.start_anchor(pos)
        if ch == "$":
            return self.end_anchor(pos)
        if ch == "[":
            cls, after = _parse_class(self.pattern, pos)
            self.add_atom(cls, pos)
            return after
        if ch == ".":
            self.add_atom(CharClass(self.dot), pos)
            return pos + 1
        if ch == "\\":
            escape, after = _parse_escape(self.pattern, pos, in_class=False)
            self.add_atom(_escape_expr(escape, pos), pos)
            return after
        if _is_surrogate(ord(ch)):
            raise _error(f"lone surrogate U+{ord(ch):04X} cannot appear in UTF-8 text", pos)
        self.add_atom(Literal.of(ch), pos)
        return pos + 1

    # -- atoms and anchors

    def check_can_consume(self, pos: int) -> None:
        frame = self.frame
        if frame.end_anchor_pos is not None:
            raise _error(f"'$' is followed by more pattern (at column {pos + 1}): "
                         + MID_ANCHOR_REASON, frame.end_anchor_pos)

    def add_atom(self, expr: Expr, pos: int, anchor_pos: Optional[int] = None,
                 end_anchor_pos: Optional[int] = None) -> None:
        self.check_can_consume(pos)
        frame = self.frame
        frame.items.append(expr)
        frame.last = ATOM
        frame.last_anchor_pos = anchor_pos
        frame.consumed = True
        if anchor_pos is not None and frame.any_anchor_pos is None:
            frame.any_anchor_pos = anchor_pos
        if end_anchor_pos is not None:
            frame.end_anchor_pos = end_anchor_pos

    def start_anchor(self, pos: int) -> int:
        frame = self.frame
        if frame.consumed or not frame.at_start:
            raise _error("'^' after the start of the match: " + MID_ANCHOR_REASON, pos)
        if self.search and len(self.frames) > 1:
            raise _error("'^' inside a group of a search pattern: " + SEARCH_ANCHOR_REASON, pos)
        self.frame.start_anchored = True
        self.note_anchor(pos)
        return pos + 1

    def end_anchor(self, pos: int) -> int:
        if self.search and len(self.frames) > 1:
            raise _error("'$' inside a group of a search pattern: " + SEARCH_ANCHOR_REASON, pos)
        if self.frame.end_anchor_pos is None:
            self.frame.end_anchor_pos = pos
        self.note_anchor(pos)
        return pos + 1

    def note_anchor(self, pos: int) -> None:
        frame = self.frame
        frame.last = ANCHOR
        if frame.any_anchor_pos is None:
            frame.any_anchor_pos = pos

    # -- groups

    def open_group(self, pos: int) -> int:
        self.check_can_consume(pos)
        after = _group_body_start(self.pattern, pos)
        parent = self.frame
        self.frames.append(_Frame(open_pos=pos, at_start=parent.at_start and not parent.consumed))
        return after

    def close_group(self, pos: int) -> int:
        if len(self.frames) == 1:
            raise _error("unmatched ')'", pos)
        group = self.frames.pop()
        expr = group.result()
        self.add_atom(expr, group.open_pos, anchor_pos=group.any_anchor_pos,
                      end_anchor_pos=group.group_end_anchor_pos)
        return pos + 1

    # -- quantifiers

    def quantify(self, pos: int, low: int, high: Optional[int], after: int) -> int:
        frame = self.frame
        if frame.last == QUANTIFIED:
            raise _error("a quantifier cannot follow another quantifier (only one '?' may "
                         "follow, making it lazy)", pos)
        if frame.last == ANCHOR:
            raise _error("nothing to repeat: an anchor cannot be quantified", pos)
        if frame.last != ATOM:
            raise _error("nothing to repeat", pos)
        if frame.last_anchor_pos is not None and (high is None or high > 1):
            raise _error("anchor inside a group that may repeat: " + MID_ANCHOR_REASON,
                         frame.last_anchor_pos)
        atom = frame.items.pop()
        frame.items.append(_repeat(atom, low, high))
        frame.last = QUANTIFIED
        if self.pattern.startswith("?", after):
            after += 1  # lazy: matches the same strings
        return after


def _repeat(expr: Expr, low: int, high: Optional[int]) -> Expr:
    if high == 0:
        return EMPTY
    if low == 1 and high == 1:
        return expr
    return Repeat(expr, low, high)


def _escape_expr(escape: _Escape, pos: int) -> Expr:
    if escape.ranges is not None:
        return _class_escape_expr(escape.ranges)
    if _is_surrogate(escape.code_point):
        raise _error(f"lone surrogate U+{escape.code_point:04X} cannot appear in UTF-8 text",
                     pos)
    return Literal.of(chr(escape.code_point))


def _class_escape_expr(ranges: Ranges) -> CharClass:
    """``\\D`` is printed as ``[^0-9]`` rather than as the explicit complement."""
    for base in (DIGIT, WORD, SPACE):
        if ranges == _complement(base):
            return CharClass(base, negated=True)
    return CharClass(ranges)


def _group_body_start(pattern: str, pos: int) -> int:
    """Check the group opener at ``pos`` (the ``(``); return the index where its body starts."""
    if not pattern.startswith("(?", pos):
        return pos + 1
    if pattern.startswith(":", pos + 2):
        return pos + 3
    for prefix, what in (("(?=", "lookahead"), ("(?!", "negative lookahead"),
                         ("(?<=", "lookbehind"), ("(?<!", "negative lookbehind")):
        if pattern.startswith(prefix, pos):
            raise _error(f"{what} '{prefix}...)' is not supported", pos)
    if pattern.startswith("(?<", pos):
        close = pos + 3
        while close < len(pattern) and pattern[close] not in ">()[]|\\":
            close += 1
        name = pattern[pos + 3:close]
        if not pattern.startswith(">", close) or not _is_group_name(name):
            raise _error("invalid group name: expected (?<name>...) with an identifier name",
                         pos)
        return close + 1
    raise _error("unsupported group syntax '(?" + pattern[pos + 2:pos + 3]
                 + "': inline flags, modifiers and other (?...) forms are not supported", pos)


def _is_group_name(name: str) -> bool:
    """ECMAScript RegExpIdentifierName, approximated with Python's identifier rules plus '$'."""
    if not name:
        return False
    head, tail = name[0], name[1:]
    head_ok = head in "$_" or head.isidentifier()
    return head_ok and all(ch in "$\u200c\u200d" or ("a" + ch).isidentifier() for ch in tail)


# ----------------------------------------------------------------------------- normal form

# The IR's ``normalize`` recurses over the tree and merges adjacent literals pairwise; a deeply
# nested pattern would overflow Python's stack and a long literal run would take quadratic time.
# This pass computes the same normal form with an explicit stack, gathering nested sequences (and
# choices) in one walk and joining literal runs at once, so that the later ``Rule(...)``
# normalisation finds nothing left to do.


def _normal_form(expr: Expr) -> Expr:
    # id(raw node) -> its normal form; ids are stable because ``expr`` keeps every node alive.
    done: Dict[int, Expr] = {}
    stack: List[Tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in done:
            continue
        children = _cluster_children(node)
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children)
                         if id(child) not in done)
            continue
        done[id(node)] = _rebuild_normal(node, [done[id(child)] for child in children])
    return done[id(expr)]


def _cluster_children(node: Expr) -> List[Expr]:
    """The operands of ``node`` in order, looking through nested nodes of the same kind."""
    if isinstance(node, Repeat):
        return [node.expr]
    if not isinstance(node, (Sequence, Choice)):
        return []
    kind = type(node)
    out: List[Expr] = []
    pending = [node]            # a stack of nodes still to expand, the next one on top
    while pending:
        current = pending.pop()
        if type(current) is not kind:
            out.append(current)
            continue
        parts = current.items if kind is Sequence else current.alternatives
        pending.extend(reversed(parts))
    return out


def _rebuild_normal(node: Expr, children: List[Expr]) -> Expr:
    if isinstance(node, Sequence):
        return _normal_sequence(children)
    if isinstance(node, Choice):
        alternatives: List[Expr] = []
        for child in children:
            alternatives.extend(child.alternatives if isinstance(child, Choice) else (child,))
        return alternatives[0] if len(alternatives) == 1 else Choice(tuple(alternatives))
    if isinstance(node, Repeat):
        inner = children[0]
        if node.max == 0 or inner == EMPTY:
            return EMPTY
        if node.min == 1 and node.max == 1:
            return inner
        return Repeat(inner, node.min, node.max)
    return node


def _normal_sequence(children: List[Expr]) -> Expr:
    items: List[Expr] = []
    literal_run: List[bytes] = []

    def flush() -> None:
        data = b"".join(literal_run)
        literal_run.clear()
        if data:
            items.append(Literal(data))

    for child in children:
        for part in (child.items if isinstance(child, Sequence) else (child,)):
            if isinstance(part, Literal):
                literal_run.append(part.data)
            else:
                flush()
                items.append(part)
    flush()
    return _sequence(items)


# ----------------------------------------------------------------------------- depth limit


def _split_deep_expressions(expr: Expr) -> Tuple[Expr, List[Tuple[str, Expr]]]:
    """Move subexpressions into helper rules so that no rule body is deeper than
    MAX_EXPRESSION_DEPTH. Returns the new root body and the helper rules (name, body)."""
    helpers: List[Tuple[str, Expr]] = []
    # id(node) -> (rewritten node, its depth); ``expr`` keeps every node alive, so ids are stable.
    result: Dict[int, Tuple[Expr, int]] = {}
    stack: List[Tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in result:
            continue
        kids = children(node)
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for child in kids if id(child) not in result)
            continue
        rewritten_children = []
        for child in kids:
            child_expr, child_depth = result[id(child)]
            if child_depth >= MAX_EXPRESSION_DEPTH:
                name = f"{ROOT}_{len(helpers) + 1}"
                helpers.append((name, child_expr))
                child_expr, child_depth = RuleRef(name), 1
            rewritten_children.append((child_expr, child_depth))
        depth = 1 + max((d for _, d in rewritten_children), default=0)
        result[id(node)] = (_with_children(node, [e for e, _ in rewritten_children]), depth)
    return result[id(expr)][0], helpers



def _with_children(node: Expr, children: List[Expr]) -> Expr:
    if isinstance(node, Sequence):
        return Sequence(tuple(children))
    if isinstance(node, Choice):
        return Choice(tuple(children))
    if isinstance(node, Repeat):
        return Repeat(children[0], node.min, node.max)
    return node
