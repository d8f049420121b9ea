"""EBNF front-end: grammar text in XGrammar's (GBNF-compatible) dialect -> Grammar IR.

In:  ``parse_ebnf(text, root_rule_name="root")`` with ``text`` a ``str`` such as

        root   ::= "[" (value ("," value)*)? "]"     # comments run to the end of the line
        value  ::= [0-9]+ | "\\"" [^"\\\\]* "\\""

Out: a ``gxg.grammar.ir.Grammar`` whose rules appear in definition order, or a
     ``GrammarError(message, line, column)`` pointing at the offending character or token
     (1-based line and column; columns count code points). Nothing else is ever raised for a
     ``str`` input.

The dialect (see reference/xgrammar_semantics.md §2):

* ``name ::= expr``; a rule name is ``[A-Za-z_.-][A-Za-z0-9_.-]*`` and must be the first token
  on its line; a body may span lines; ``#`` starts a comment; whitespace is ``[ \\t\\r\\n]``.
* ``"..."`` strings with the escapes ``\\n \\t \\r \\\\ \\" \\' \\? \\/ \\a \\b \\f \\v \\0 \\e``,
  ``\\xH...`` (any number of hex digits: a code point, not a byte), ``\\uHHHH``, ``\\UHHHHHHHH``;
  ``[...]`` / ``[^...]`` classes over code points (``[^]`` is any code point), which also accept
  ``\\^ \\$ \\. \\* \\+ \\? \\( \\) \\[ \\] \\{ \\} \\| \\/ \\-``.
* ``*  +  ?  {m}  {m,}  {m,n}  {m,-1}`` (one quantifier per element), ``( ... )``, ``()``, ``|``,
  and one lookahead assertion ``(= expr)`` at the end of a rule.
* The macros ``Regex("pattern", json_string=..., flags="...")``, ``Substring("chunk", ...)``,
  ``TagDispatch(("tag", rule), ..., loop_after_dispatch=..., excludes=(...))`` and the token-id
  macros ``Token(id, ...)``, ``ExcludeToken(id, ...)`` (one whole token: an IR ``TokenSet``)
  and ``TokenTagDispatch((id, rule), ..., loop_after_dispatch=..., excludes=(id, ...))``
  (XGrammar's syntax: ``Name(value, ..., key=value, ...)``, values being strings, integers,
  ``true`` / ``false``, rule names and tuples ``(v, ...)``). This module only reads the call;
  what the arguments mean, and the IR a call becomes (inline, plus helper rules named after
  the calling rule, e.g. ``root_tag_dispatch_1``, placed after the user's rules and never
  taking a name the text uses), is ``gxg.grammar.macros``'s business. Macros are not allowed
  inside a lookahead (as in XGrammar for Regex and TagDispatch), except ``Token`` and
  ``ExcludeToken`` (XGrammar allows them there too; it also allows ``TokenTagDispatch``,
  which gxg refuses there like the other macros).

Deliberate differences from XGrammar 0.2.8:

* ``[]`` is an error (XGrammar accepts it; it matches nothing).
* Escapes above U+10FFFF are errors, and so are surrogates (``\uD800``) in strings, which have
  no UTF-8 encoding (XGrammar keeps both). In classes, surrogates are allowed as members or
  range ends (a class is a set of code points; surrogates simply never match), so that every
  IR class can be printed and parsed back.
* Choices are allowed inside a lookahead (XGrammar: "not supported yet").
* Rule attributes ``name[lazy] ::=`` and ``name[max_chars=N] ::=`` (``RuleAttributes``) are
  compiled into the rule's language, so the rule's body must be regular (recursion only
  through tail calls, no token items); XGrammar enforces them while decoding, and takes
  ``lazy`` only on terminal-like bodies. ``max_chars`` is XGrammar's best effort: once the
  rule has N code points it ends as soon as it can (tests/test_rule_attributes.py lists the
  few verdicts where XGrammar's runtime answers otherwise). ``max_tokens=N`` is a budget of
  tokens kept while decoding (``Rule.max_tokens``), as in XGrammar, on the same regular
  bodies. A macro is only
  recognised when its name is immediately followed by ``(``; otherwise the name is an ordinary
  rule name (XGrammar reserves the six macro names, so ``Token ::= "t"`` is an error there and
  ``Regex ("a")`` is a macro call).
* Macros (details in ``gxg.grammar.macros``): a keyword argument given twice is an error
  (XGrammar keeps the last); ``Regex(..., flags="i")`` is unsupported; an invalid regex is an
  error when the grammar is parsed (XGrammar: when it is compiled), and so is a ``Regex`` that
  ``json_string=true`` leaves with no string; ``TagDispatch``'s free text is any string of code
  points (XGrammar's: any bytes, UTF-8 or not); ``Regex`` patterns are read by
  ``gxg.grammar.regex``, with that module's documented differences; ``ExcludeToken()`` (any
  token) is accepted and token ids above 2**31-1 are errors (XGrammar refuses the first and
  wraps the second to 32 bits).
* Repetition bounds above ``MAX_REPEAT_BOUND`` are errors (XGrammar wraps them silently), and
  so are expressions nested deeper than ``MAX_EXPRESSION_DEPTH``.
* Errors point at the offending token: an unterminated string or class at its opening
  character, an unclosed parenthesis at the '(' (XGrammar: where the input ran out).
"""
from __future__ import annotations

import bisect
import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from gxg.grammar.ir import (
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
from gxg.grammar.macros import (
    LOOKAHEAD_MACROS,
    SUPPORTED_MACROS,
    MacroCall,
    MacroError,
    MacroKeyword,
    MacroValue,
    expand_macro,
)
from gxg.grammar.rule_attributes import RuleAttributes, apply_rule_attributes

__all__ = ["parse_ebnf", "MAX_EXPRESSION_DEPTH", "MAX_REPEAT_BOUND", "MACRO_NAMES", "RULE_NAME"]

# The IR's normalisation, equality and hashing recurse through expressions; equality of two
# expressions ~270 levels deep already exhausts Python's default recursion limit from a shallow
# stack. So the parser refuses expressions deeper than this (redundant parentheses are free:
# ((("a"))) is as deep as "a"). Real grammars rarely nest more than ten levels.
MAX_EXPRESSION_DEPTH = 100

# XGrammar stores repetition bounds as 32-bit integers.
MAX_REPEAT_BOUND = 2**31 - 1

MACRO_NAMES = frozenset(
    {"Regex", "Substring", "TagDispatch", "Token", "ExcludeToken", "TokenTagDispatch"})

RULE_NAME = re.compile(r"[A-Za-z_.\-][A-Za-z0-9_.\-]*")

_SPACE_AND_COMMENTS = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")
_STRING_STOP = re.compile(r'["\\\r\n]')                 # where a plain run inside a string ends
_HEX_DIGITS = re.compile(r"[0-9A-Fa-f]+")
_DECIMAL = re.compile(r"[0-9]+")

_SIMPLE_ESCAPES = {
    "n": 0x0A, "t": 0x09, "r": 0x0D, "\\": 0x5C, '"': 0x22, "'": 0x27, "?": 0x3F, "/": 0x2F,
    "a": 0x07, "b": 0x08, "f": 0x0C, "v": 0x0B, "0": 0x00, "e": 0x1B,
}
# Characters that mean something inside a class (or in regexes) may be escaped there too.
_CLASS_ONLY_ESCAPES = {c: ord(c) for c in "^$.*+?()[]{}|/-"}
_CLASS_SHORTHANDS = frozenset("dDsSwW")
_FIXED_WIDTH_ESCAPES = {"u": 4, "U": 8}


# ----------------------------------------------------------------------------- source positions


class _Source:
    """The grammar text plus offset -> (line, column) translation for error messages."""

    def __init__(self, text: str):
        self.text = text
        self._line_starts: Optional[List[int]] = None

    def position(self, offset: int) -> Tuple[int, int]:
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line_index = bisect.bisect_right(self._line_starts, offset) - 1
        return line_index + 1, offset - self._line_starts[line_index] + 1

    def error(self, offset: int, message: str) -> GrammarError:
        line, column = self.position(offset)
        return GrammarError(message, line, column)


def _describe_char(char: str) -> str:
    return repr(char) if char.isprintable() else f"U+{ord(char):04X}"


# ----------------------------------------------------------------------------- tokens


class _Token(NamedTuple):
    kind: str            # name assign string class lparen lookahead rparen bar quantifier
                         # macro eof error
    value: object        # name: str; string: str; class: CharClass; quantifier: (min, max,
                         # text); macro: MacroCall; error: the GrammarError to raise when the
                         # parser gets here
    offset: int          # where the token starts in the text
    starts_line: bool    # no other token precedes it on its line


# Tokens that a regular expression can find on its own; strings with escapes, classes and
# braces are read by hand below. Group names are token kinds.
_SIMPLE_TOKEN = re.compile(r"""
    (?P<space>(?:[ \t\r\n]+|\#[^\n]*)+)
  | (?P<name>""" + RULE_NAME.pattern + r""")
  | (?P<string>"[^"\\\r\n]*")
  | (?P<assign>::=)
  | (?P<lookahead>\(=)
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<bar>\|)
  | (?P<quantifier>[*+?])
""", re.VERBOSE)

_SIMPLE_CLASS = re.compile(r"\[[^\]\\\r\n]*\]")     # a class without escapes

_POSTFIX_BOUNDS = {"*": (0, None, "*"), "+": (1, None, "+"), "?": (0, 1, "?")}


def _tokenize(source: _Source) -> List[_Token]:
    """All tokens, ending with an "eof" token, or with an "error" token at the first lexical
    error, which the parser raises when it reaches it, so that errors surface in text order."""
    tokens: List[_Token] = []
    try:
        _tokenize_into(source, tokens)
    except GrammarError as error:
        tokens.append(_Token("error", error, len(source.text), False))
    return tokens


def _tokenize_into(source: _Source, tokens: List[_Token]) -> None:
    text = source.text
    end = len(text)
    pos = 0
    starts_line = True
    match_simple = _SIMPLE_TOKEN.match
    append = tokens.append
    class_cache: Dict[str, CharClass] = {}
    while pos < end:
        match = match_simple(text, pos)
        kind = match.lastgroup if match is not None else None
        start = pos
        if kind == "space":
            if "\n" in match.group():
                starts_line = True
            pos = match.end()
            continue
        if kind == "name":
            value = match.group()
            pos = match.end()
            if value in MACRO_NAMES and text.startswith("(", pos):
                if value not in SUPPORTED_MACROS:
                    raise source.error(start, f"the macro {value}(...) is not supported by gxg")
                kind = "macro"
                value, pos = _read_macro_call(source, value, start, pos)
        elif kind == "string" and not _has_surrogate(match.group()):
            value = match.group()[1:-1]
            pos = match.end()
        elif kind is not None and kind != "string":
            value = _POSTFIX_BOUNDS[text[pos]] if kind == "quantifier" else None
            pos = match.end()
        elif text[pos] == '"':
            kind = "string"
            value, pos = _read_string(source, pos)
        elif text[pos] == "[":
            kind = "class"
            # Grammars repeat the same few classes ([0-9], [ \t\n]); build each one once.
            simple = _SIMPLE_CLASS.match(text, pos)
            if simple is not None and simple.group() in class_cache:
                value, pos = class_cache[simple.group()], simple.end()
            else:
                value, pos = _read_class(source, pos)
                class_cache[text[start:pos]] = value
        elif text[pos] == "{":
            kind = "quantifier"
            value, pos = _read_braces(source, pos)
        else:
            raise _unexpected_character(source, pos)
        append(_Token(kind, value, start, starts_line))
        starts_line = False
    append(_Token("eof", None, end, starts_line))


def _unexpected_character(source: _Source, pos: int) -> GrammarError:
    char = source.text[pos]
    if char == "'":
        return source.error(pos, "single-quoted strings are not supported; use double quotes")
    if char in ":=":
        return source.error(pos, f"unexpected character {char!r}; a rule is written 'name ::= ...'")
    if char == "]":
        return source.error(pos, "unexpected ']' with no '[' to close")
    if char == "}":
        return source.error(pos, "unexpected '}' with no '{' to close")
    return source.error(pos, f"unexpected character {_describe_char(char)}")


# ----------------------------------------------------------------------------- strings, escapes


def _read_string(source: _Source, pos: int) -> Tuple[str, int]:
    """The decoded string literal starting at the quote at ``pos``, and the offset after it."""
    text = source.text
    parts: List[str] = []
    i = pos + 1
    while True:
        stop = _STRING_STOP.search(text, i)
        if stop is None or text[stop.start()] in "\r\n":
            raise source.error(pos, "unterminated string literal: missing '\"' before the "
                                    "end of the line")
        j = stop.start()
        _reject_raw_surrogate(source, i, j)
        parts.append(text[i:j])
        if text[j] == '"':
            return "".join(parts), j + 1
        code_point, i = _read_escape(source, j, in_class=False)
        if 0xD800 <= code_point <= 0xDFFF:
            raise source.error(j, f"escape {text[j:i]} is a lone surrogate, which has no UTF-8 "
                                  "encoding and cannot appear in a string")
        parts.append(chr(code_point))


def _has_surrogate(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _reject_raw_surrogate(source: _Source, start: int, end: int) -> None:
    # A Python str can hold lone surrogates, which no UTF-8 string can.
    run = source.text[start:end]
    if _has_surrogate(run):
        index = next(k for k, char in enumerate(run) if 0xD800 <= ord(char) <= 0xDFFF)
        raise source.error(start + index, "a lone surrogate has no UTF-8 encoding and cannot "
                                          "appear in a string")


def _read_escape(source: _Source, pos: int, *, in_class: bool) -> Tuple[int, int]:
    """The code point of the escape whose backslash is at ``pos``, and the offset after it."""
    text = source.text
    if pos + 1 >= len(text) or text[pos + 1] in "\r\n":
        raise source.error(pos, "invalid escape sequence: '\\' at the end of the line")
    letter = text[pos + 1]
    if letter in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[letter], pos + 2
    if in_class and letter in _CLASS_ONLY_ESCAPES:
        return _CLASS_ONLY_ESCAPES[letter], pos + 2
    if letter == "x":
        digits = _HEX_DIGITS.match(text, pos + 2)
        if digits is None:
            raise source.error(pos, "invalid escape sequence \\x: expected hex digits after it")
        return _checked_code_point(source, pos, digits.end()), digits.end()
    if letter in _FIXED_WIDTH_ESCAPES:
        width = _FIXED_WIDTH_ESCAPES[letter]
        digits = text[pos + 2:pos + 2 + width]
        if len(digits) != width or _HEX_DIGITS.fullmatch(digits) is None:
            raise source.error(pos, f"invalid escape sequence \\{letter}: expected exactly "
                                    f"{width} hex digits after it")
        return _checked_code_point(source, pos, pos + 2 + width), pos + 2 + width
    if in_class and letter in _CLASS_SHORTHANDS:
        raise source.error(pos, f"the character class escape \\{letter} is not supported; "
                                "list the characters instead")
    raise source.error(pos, f"invalid escape sequence \\{_describe_char(letter)}")


def _checked_code_point(source: _Source, start: int, end: int) -> int:
    escape = source.text[start:end]
    digits = escape[2:].lstrip("0")
    # Compare lengths first: an absurdly long run of hex digits must not build a huge integer.
    if len(digits) > 6 or int(digits or "0", 16) > MAX_CODE_POINT:
        raise source.error(start, f"escape {escape[:12]}{'...' if len(escape) > 12 else ''} "
                                  "is beyond U+10FFFF, the largest code point")
    return int(digits or "0", 16)


# ----------------------------------------------------------------------------- classes


def _read_class(source: _Source, pos: int) -> Tuple[CharClass, int]:
    """The character class whose '[' is at ``pos``, and the offset after its ']'."""
    text = source.text
    end = len(text)
    i = pos + 1
    negated = i < end and text[i] == "^"
    if negated:
        i += 1
    ranges: List[Tuple[int, int]] = []
    while True:
        if i >= end or text[i] in "\r\n":
            raise source.error(pos, "unterminated character class: missing ']' before the end "
                                    "of the line")
        if text[i] == "]":
            break
        low_offset = i
        low, i = _read_class_char(source, i)
        if i + 1 < end and text[i] == "-" and text[i + 1] not in "]\r\n":
            high, i = _read_class_char(source, i + 1)
            if low > high:
                raise source.error(low_offset, f"invalid character range "
                                               f"{text[low_offset:i]}: U+{low:04X} is larger "
                                               f"than U+{high:04X}")
            ranges.append((low, high))
        else:
            ranges.append((low, low))
    if not ranges and not negated:
        raise source.error(pos, "empty character class [] matches nothing")
    return CharClass(tuple(ranges), negated), i + 1


def _read_class_char(source: _Source, pos: int) -> Tuple[int, int]:
    if source.text[pos] == "\\":
        return _read_escape(source, pos, in_class=True)
    return ord(source.text[pos]), pos + 1


# ----------------------------------------------------------------------------- quantifier braces


def _read_braces(source: _Source, pos: int) -> Tuple[Tuple[int, Optional[int], str], int]:
    """``{m}``, ``{m,}``, ``{m,n}`` or ``{m,-1}`` at ``pos`` -> ((min, max, text), offset after)."""
    text = source.text
    i = _skip_space(text, pos + 1)
    if text.startswith(",", i):
        raise source.error(i, "a repetition range needs a lower bound: write {0,n}")
    low, i = _read_bound(source, i)
    i = _skip_space(text, i)
    if text.startswith("}", i):
        return (low, low, text[pos:i + 1]), i + 1
    if not text.startswith(",", i):
        raise source.error(i, "expected ',' or '}' in the repetition range")
    i = _skip_space(text, i + 1)
    high: Optional[int]
    if text.startswith("}", i):
        return (low, None, text[pos:i + 1]), i + 1
    high_offset = i
    if text.startswith("-1", i) and not text[i + 2:i + 3].isdigit():
        high, i = None, i + 2            # {m,-1} is how XGrammar prints "no upper bound"
    else:
        high, i = _read_bound(source, i)
        if high < low:
            raise source.error(high_offset, f"invalid repetition range: the upper bound {high} "
                                            f"is smaller than the lower bound {low}")
    i = _skip_space(text, i)
    if not text.startswith("}", i):
        raise source.error(i, "expected '}' to close the repetition range")
    return (low, high, text[pos:i + 1]), i + 1


def _read_bound(source: _Source, pos: int) -> Tuple[int, int]:
    digits = _DECIMAL.match(source.text, pos)
    if digits is None:
        raise source.error(pos, "expected a non-negative integer in the repetition range")
    significant = digits.group().lstrip("0") or "0"
    # Compare lengths first: int() refuses (and would be slow on) thousands of digits.
    if len(significant) > 10 or int(significant) > MAX_REPEAT_BOUND:
        raise source.error(pos, f"repetition bound {significant[:20]} is too large "
                                f"(the limit is {MAX_REPEAT_BOUND})")
    return int(significant), digits.end()


def _skip_space(text: str, pos: int) -> int:
    return _SPACE_AND_COMMENTS.match(text, pos).end()


# ----------------------------------------------------------------------------- macro calls

_MACRO_INTEGER = re.compile(r"-?[0-9]+(?![A-Za-z0-9_.\-])")
_MACRO_BOOLEANS = {"true": True, "false": False}


def _read_macro_call(source: _Source, name: str, name_offset: int,
                     pos: int) -> Tuple[MacroCall, int]:
    """``Name(arg, ..., key=value, ...)`` whose '(' is at ``pos`` -> (MacroCall, offset after
    its ')'). Only the syntax is read here; gxg.grammar.macros checks what the arguments mean.
    Spaces, newlines and comments may separate the parts."""
    text = source.text
    arguments: List[MacroValue] = []
    keywords: List[MacroKeyword] = []
    i = _skip_space(text, pos + 1)
    if text.startswith(")", i):
        return MacroCall(name, (), (), name_offset, pos), i + 1
    while True:
        key = RULE_NAME.match(text, i)
        after_key = _skip_space(text, key.end()) if key is not None else i
        if key is not None and text.startswith("=", after_key) and key.group() not in \
                _MACRO_BOOLEANS:
            value, i = _read_macro_value(source, _skip_space(text, after_key + 1), 0)
            keywords.append(MacroKeyword(key.group(), value, key.start()))
        else:
            value, i = _read_macro_value(source, i, 0)
            arguments.append(value)
        i = _skip_space(text, i)
        if text.startswith(",", i):
            i = _skip_space(text, i + 1)
            continue
        if text.startswith(")", i):
            return MacroCall(name, tuple(arguments), tuple(keywords), name_offset, pos), i + 1
        if i >= len(text):
            raise source.error(pos, f"the macro call {name}( is never closed: missing ')'")
        raise source.error(i, f"expected ',' or ')' after an argument of {name}(...)")


def _read_macro_value(source: _Source, pos: int, depth: int) -> Tuple[MacroValue, int]:
    """One argument value at ``pos`` (a string, integer, true/false, rule name or tuple)."""
    text = source.text
    if pos >= len(text):
        raise source.error(pos, "expected a macro argument, but the grammar ends here")
    char = text[pos]
    if char == '"':
        value, end = _read_string(source, pos)
        return MacroValue("string", value, pos, text[pos + 1:end - 1] == value), end
    integer = _MACRO_INTEGER.match(text, pos)
    if integer is not None:
        return MacroValue("integer", int(integer.group()[:30]), pos), integer.end()
    name = RULE_NAME.match(text, pos)
    if name is not None:
        word = name.group()
        if word in _MACRO_BOOLEANS:
            return MacroValue("boolean", _MACRO_BOOLEANS[word], pos), name.end()
        return MacroValue("name", word, pos), name.end()
    if char == "(":
        if depth >= MAX_EXPRESSION_DEPTH:
            raise source.error(pos, f"the macro argument is nested too deeply (more than "
                                    f"{MAX_EXPRESSION_DEPTH} levels of tuples)")
        items: List[MacroValue] = []
        i = _skip_space(text, pos + 1)
        while not text.startswith(")", i):
            item, i = _read_macro_value(source, i, depth + 1)
            items.append(item)
            i = _skip_space(text, i)
            if text.startswith(",", i):
                i = _skip_space(text, i + 1)          # a trailing comma is allowed
            elif not text.startswith(")", i):
                if i >= len(text):
                    raise source.error(pos, "the tuple is never closed: missing ')'")
                raise source.error(i, "expected ',' or ')' in the tuple")
        return MacroValue("tuple", tuple(items), pos), i + 1
    if char == "'":
        raise source.error(pos, "single-quoted strings are not supported; use double quotes")
    raise source.error(pos, f"expected a macro argument (a string, integer, true, false, rule "
                            f"name or tuple), got {_describe_char(char)}")


# ----------------------------------------------------------------------------- expression builders
# They produce expressions already in the IR's normal form (given normal-form parts), so that the
# normalisation in Rule finds nothing to merge: merging literals there one pair at a time would
# be quadratic in the length of a long sequence.


def _make_sequence(items: List[Expr]) -> Expr:
    out: List[Expr] = []
    pending: List[bytes] = []
    for item in items:
        for part in item.items if isinstance(item, Sequence) else (item,):
            if isinstance(part, Literal):
                pending.append(part.data)
                continue
            if pending:
                _append_literal(out, pending)
            out.append(part)
    if pending:
        _append_literal(out, pending)
    if not out:
        return EMPTY
    return out[0] if len(out) == 1 else Sequence(tuple(out))


def _append_literal(out: List[Expr], pending: List[bytes]) -> None:
    data = b"".join(pending)
    pending.clear()
    if data:
        out.append(Literal(data))


def _make_choice(alternatives: List[Expr]) -> Expr:
    flat: List[Expr] = []
    for alternative in alternatives:
        if isinstance(alternative, Choice):
            flat.extend(alternative.alternatives)
        else:
            flat.append(alternative)
    return flat[0] if len(flat) == 1 else Choice(tuple(flat))


def _make_repeat(expr: Expr, low: int, high: Optional[int]) -> Expr:
    if high == 0 or expr == EMPTY:
        return EMPTY
    if low == 1 and high == 1:
        return expr
    return Repeat(expr, low, high)


# ----------------------------------------------------------------------------- parser


class _Group:
    """An expression being built: a rule body, a parenthesised group or a lookahead.

    Alongside each expression it keeps an upper bound on its depth (a literal, class or
    reference is 1; each sequence, choice or repeat around it adds 1). The bound is exact for
    redundant parentheses, which add no depth, and over by at most one where a nested sequence
    or choice is flattened into its parent."""

    __slots__ = ("kind", "offset", "alternatives", "alternative_depth", "items", "item_depth",
                 "last_item_depth", "last_bar", "quantifiable", "after_quantifier")

    def __init__(self, kind: str, offset: int):
        self.kind = kind                      # "body", "paren" or "lookahead"
        self.offset = offset                  # where it opens (for "never closed" errors)
        self.alternatives: List[Expr] = []    # finished alternatives before the last '|'
        self.alternative_depth = 0            # the deepest of them
        self.items: List[Expr] = []           # the sequence after the last '|'
        self.item_depth = 0                   # the deepest of them
        self.last_item_depth = 0              # the last of them (a quantifier deepens it)
        self.last_bar: Optional[int] = None   # offset of the last '|'
        self.quantifiable = False             # the last item may take a quantifier
        self.after_quantifier = False         # the last token was a quantifier

    def add(self, expr: Expr, depth: int = 1) -> None:
        self.items.append(expr)
        self.item_depth = max(self.item_depth, depth)
        self.last_item_depth = depth
        self.quantifiable = True
        self.after_quantifier = False

    def is_empty(self) -> bool:
        return not self.items and not self.alternatives

    def end_alternative(self, source: _Source) -> None:
        if not self.items:
            raise _empty_alternative(source, self.last_bar)
        sequence = _make_sequence(self.items)
        self.alternatives.append(sequence)
        self.alternative_depth = max(self.alternative_depth,
                                     self.item_depth + isinstance(sequence, Sequence))
        self.items = []
        self.item_depth = 0
        self.quantifiable = False
        self.after_quantifier = False

    def finish(self, source: _Source) -> Tuple[Expr, int]:
        """The group's expression and the bound on its depth."""
        if not self.items and self.last_bar is not None:
            raise _empty_alternative(source, self.last_bar)
        sequence = _make_sequence(self.items)
        depth = max(self.alternative_depth, self.item_depth + isinstance(sequence, Sequence), 1)
        choice = _make_choice(self.alternatives + [sequence])
        return choice, depth + isinstance(choice, Choice)


def _empty_alternative(source: _Source, bar_offset: Optional[int]) -> GrammarError:
    return source.error(bar_offset, "empty alternative next to '|'; write \"\" or () for the "
                                    "empty string")


class _Parser:
    """Recursive-descent in spirit, but with an explicit stack of open groups, so that deep
    nesting cannot exhaust Python's stack."""

    def __init__(self, source: _Source):
        self.source = source
        self.tokens = _tokenize(source)
        self.index = 0
        self.references: Dict[str, int] = {}     # rule name -> offset of its first reference
        self.helper_rules: List[Rule] = []       # what macros expand to, in order
        self.attributes: Dict[str, RuleAttributes] = {}  # name[...] ::= of each rule
        self.rule_name = ""                      # the rule being parsed (names helper rules)
        # Helper rules must not take a name the text uses anywhere.
        self.taken_names = {token.value for token in self.tokens if token.kind == "name"}

    def at_end(self) -> bool:
        return self.tokens[self.index].kind == "eof"

    def take(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind == "error":
            raise token.value
        if token.kind != "eof":
            self.index += 1
        return token

    def at_rule_head(self, index: int) -> bool:
        """Whether the token at ``index`` names a new rule (``name ::=`` or ``name [..] ::=``).

        The token list always ends with an "eof" or "error" token, so a "name" or "class"
        token is never last and looking one past it is safe."""
        tokens = self.tokens
        if tokens[index].kind != "name":
            return False
        after = tokens[index + 1].kind
        return after == "assign" or (after == "class" and tokens[index + 2].kind == "assign")

    def parse_rule(self) -> Tuple[str, int, Expr, Optional[Expr]]:
        """One ``name ::= body (= lookahead)?`` -> (name, offset of name, body, lookahead)."""
        source = self.source
        head = self.take()
        if head.kind != "name":
            raise source.error(head.offset, "expected a rule definition 'name ::= ...'")
        after = self.take()
        if after.kind == "class" and self.tokens[self.index].kind == "assign":
            self.attributes[head.value] = _rule_attributes(source, head, after.offset)
            after = self.take()
        if after.kind != "assign":
            raise source.error(after.offset, f"expected '::=' after the rule name "
                                             f"{head.value!r}")
        if not head.starts_line:
            raise source.error(head.offset, f"the rule name {head.value!r} must be the first "
                                            "token on its line")
        self.rule_name = head.value
        body, lookahead = self.parse_body(after.offset)
        return head.value, head.offset, body, lookahead

    def new_rule_name(self, hint: str) -> str:
        """A fresh name for a macro's helper rule: ``<rule>_<hint>``, numbered if taken."""
        base = f"{self.rule_name}_{hint}"
        name, number = base, 1
        while name in self.taken_names:
            number += 1
            name = f"{base}_{number}"
        self.taken_names.add(name)
        return name

    def expand(self, token: _Token, stack: List[_Group]) -> Tuple[Expr, int]:
        """The expression (and its depth) that the macro call ``token`` stands for."""
        call: MacroCall = token.value
        if call.name not in LOOKAHEAD_MACROS and any(group.kind == "lookahead"
                                                     for group in stack):
            raise self.source.error(token.offset, f"the macro {call.name}(...) cannot be used "
                                                  "in a lookahead assertion")
        try:
            expansion = expand_macro(call, self.new_rule_name)
        except MacroError as error:
            raise self.source.error(error.offset, error.message) from None
        for name, offset in expansion.references:
            self.references.setdefault(name, offset)
        self.helper_rules.extend(expansion.rules)
        return expansion.expr, expansion.depth

    def parse_body(self, assign_offset: int) -> Tuple[Expr, Optional[Expr]]:
        """The expression after ``::=`` up to the next rule or the end, and its lookahead."""
        source = self.source
        tokens = self.tokens
        references = self.references
        stack = [_Group("body", assign_offset)]
        lookahead: Optional[Expr] = None
        index = self.index
        while True:
            token = tokens[index]
            kind = token.kind
            if kind == "eof" or (kind == "name" and self.at_rule_head(index)):
                break
            if kind == "error":
                raise token.value
            index += 1
            group = stack[-1]
            if lookahead is not None:
                raise source.error(token.offset, "nothing may follow the lookahead assertion "
                                                 "'(= ...)', which must end the rule")
            if kind == "name":
                if token.value not in references:
                    references[token.value] = token.offset
                group.add(RuleRef(token.value))
            elif kind == "string":
                group.add(Literal(token.value.encode("utf-8")))
            elif kind == "class":
                group.add(token.value)
            elif kind == "macro":
                group.add(*self.expand(token, stack))
            elif kind == "quantifier":
                _apply_quantifier(group, token, source)
            elif kind == "bar":
                group.last_bar = token.offset
                group.end_alternative(source)
            elif kind == "lparen":
                stack.append(_Group("paren", token.offset))
            elif kind == "lookahead":
                _check_lookahead_position(stack, token, source)
                stack.append(_Group("lookahead", token.offset))
            elif kind == "rparen":
                if len(stack) == 1:
                    raise source.error(token.offset, "unbalanced parentheses: ')' has no '(' "
                                                     "to close")
                closed = stack.pop()
                if closed.kind == "lookahead" and closed.is_empty():
                    raise source.error(token.offset, "empty lookahead assertion '(=)'")
                expr, depth = closed.finish(source)
                _check_depth(depth, token, source)
                if closed.kind == "lookahead":
                    lookahead = expr
                else:
                    stack[-1].add(expr, depth)
            elif kind == "assign":
                raise source.error(token.offset, "'::=' must follow a rule name at the start "
                                                 "of a line")
            else:  # pragma: no cover - every token kind is handled above
                raise source.error(token.offset, f"unexpected token {kind}")
        self.index = index
        if len(stack) > 1:
            unclosed = stack[-1]
            what = "'(='" if unclosed.kind == "lookahead" else "'('"
            raise source.error(unclosed.offset, f"unbalanced parentheses: {what} is never "
                                                "closed")
        body = stack[0]
        if body.is_empty():
            raise source.error(assign_offset, "expected an expression after '::=' (write \"\" "
                                              "for the empty string)")
        # The body's own choice and sequence may add two levels beyond the checked limit.
        expr, _ = body.finish(source)
        return expr, lookahead


def _apply_quantifier(group: _Group, token: _Token, source: _Source) -> None:
    low, high, written = token.value
    if group.after_quantifier:
        raise source.error(token.offset, f"a second quantifier {written!r} cannot follow a "
                                         "quantifier; add parentheses, e.g. (x*)*")
    if not group.quantifiable:
        raise source.error(token.offset, f"the quantifier {written!r} must follow an element")
    repeat = _make_repeat(group.items[-1], low, high)
    if isinstance(repeat, Repeat):
        group.last_item_depth += 1
        group.item_depth = max(group.item_depth, group.last_item_depth)
        _check_depth(group.last_item_depth, token, source)
    group.items[-1] = repeat
    group.quantifiable = False
    group.after_quantifier = True


def _check_depth(depth: int, token: _Token, source: _Source) -> None:
    if depth > MAX_EXPRESSION_DEPTH:
        raise source.error(token.offset, f"the expression is nested too deeply (more than "
                                         f"{MAX_EXPRESSION_DEPTH} levels of groups and "
                                         "quantifiers)")


def _check_lookahead_position(stack: List[_Group], token: _Token, source: _Source) -> None:
    if len(stack) > 1:
        raise source.error(token.offset, "a lookahead assertion '(= ...)' is only allowed at "
                                         "the end of a rule, not inside parentheses")
    body = stack[0]
    if not body.items:
        if body.last_bar is not None:
            raise _empty_alternative(source, body.last_bar)
        raise source.error(token.offset, "a lookahead assertion '(= ...)' must follow the "
                                         "rule body")


# ----------------------------------------------------------------------------- entry point


# ----------------------------------------------------------------------------- rule attributes


_ATTRIBUTE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=\s*(-?[0-9]+)\s*)?$")


def _rule_attributes(source: _Source, head: "_Token", offset: int) -> RuleAttributes:
    """The attributes in ``[...]`` at ``offset``, right after the rule name (XGrammar's
    spelling: no space before ``[``, comma-separated)."""
    if offset != head.offset + len(head.value):
        raise source.error(offset, f"rule attributes follow the rule name with no space: "
                                   f"'{head.value}[...] ::='")
    end = source.text.index("]", offset)
    lazy, budgets, position = False, {"max_chars": None, "max_tokens": None}, offset + 1
    for part in source.text[offset + 1:end].split(","):
        match = _ATTRIBUTE.match(part)
        name, value = (match.group(1), match.group(2)) if match else (part.strip(), None)
        if name == "lazy" and match and value is None:
            lazy = True
        elif name in budgets and value is not None and int(value) >= 0:
            budgets[name] = int(value)
        elif name in ("lazy", "max_chars", "max_tokens"):
            raise source.error(position, f"invalid rule attribute {part.strip()!r}: write "
                                         "'lazy', 'max_chars=N' or 'max_tokens=N' (N >= 0)")
        else:
            raise source.error(position, f"unknown rule attribute {part.strip()!r} (gxg knows "
                                         "'lazy', 'max_chars=N' and 'max_tokens=N')")
        position += len(part) + 1
    return RuleAttributes(lazy, budgets["max_chars"], budgets["max_tokens"])


def _apply_attributes(definitions, parser: "_Parser", source: _Source,
                      defined_at: Dict[str, int]):
    """The definitions with each attributed rule's body replaced by its language under the
    attributes (``gxg.grammar.rule_attributes``)."""
    bodies = {name: body for name, body, _ in definitions}
    bodies.update((rule.name, rule.body) for rule in parser.helper_rules)

    def new_rule(rule: str, hint: str) -> RuleRef:
        parser.rule_name = rule  # the helper rules' names start with it
        return RuleRef(parser.new_rule_name(hint))

    def define_rule(ref: RuleRef, body: Expr) -> None:
        parser.helper_rules.append(Rule(ref.name, body))

    rewritten = apply_rule_attributes(
        bodies, parser.attributes, new_rule, define_rule,
        lambda rule, message: source.error(defined_at[rule], message))
    return [(name, rewritten.get(name, body), lookahead)
            for name, body, lookahead in definitions]


def parse_ebnf(text: str, *, root_rule_name: str = "root") -> Grammar:
    """Parse EBNF ``text`` into a Grammar whose root rule is ``root_rule_name``."""
    if not isinstance(text, str):
        raise TypeError(f"the EBNF grammar must be a str, got {type(text).__name__}")
    source = _Source(text)
    parser = _Parser(source)
    definitions: List[Tuple[str, Expr, Optional[Expr]]] = []
    defined_at: Dict[str, int] = {}
    while not parser.at_end():
        name, offset, body, lookahead = parser.parse_rule()
        if name in defined_at:
            first_line, _ = source.position(defined_at[name])
            raise source.error(offset, f"the rule {name!r} is defined more than once (first on "
                                       f"line {first_line})")
        defined_at[name] = offset
        definitions.append((name, body, lookahead))
    if not definitions:
        raise GrammarError("the grammar is empty: it defines no rules", 1, 1)
    for name, offset in parser.references.items():
        if name not in defined_at:
            raise source.error(offset, f"the rule {name!r} is referenced but never defined")
    if root_rule_name not in defined_at:
        raise GrammarError(f"the root rule {root_rule_name!r} is not defined", 1, 1)
    if parser.attributes:
        definitions = _apply_attributes(definitions, parser, source, defined_at)
    try:
        rules = tuple(Rule(name, body, lookahead,
                           getattr(parser.attributes.get(name), "max_tokens", None))
                      for name, body, lookahead in definitions)
        return Grammar(rules + tuple(parser.helper_rules), root_rule_name)
    except RecursionError:
        # Only reachable when the caller is already deep in its own stack.
        raise GrammarError("the grammar's expressions are nested too deeply", 1, 1) from None
