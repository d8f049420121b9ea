"""Lark front-end: grammar text in XGrammar 0.2.8's Lark dialect -> Grammar IR.

In:  ``parse_lark(text, named_grammars=None)`` with ``text`` a ``str`` such as

        start: NAME "=" value               // or # comments, to the end of the line
        value: SIGNED_NUMBER | ESCAPED_STRING
        NAME: /[a-z_]+/
        %import common (SIGNED_NUMBER, ESCAPED_STRING, WS)
        %ignore WS

     and ``named_grammars`` a dict ``{name: gxg Grammar or Lark text}`` for ``@name``.
Out: a ``gxg.grammar.ir.Grammar`` whose root rule ``root`` is the Lark rule ``start`` (as in
     XGrammar; a Lark rule named ``root`` is renamed), or a ``GrammarError(message, line,
     column)`` (1-based; columns count code points). Nothing else is raised for ``str`` input.

The dialect is what XGrammar 0.2.8's ``cpp/lark_converter.cc`` reads (checked against the
installed package: ``xgr.Grammar.from_lark``, ``str(grammar)`` and
``xgrammar.testing._is_grammar_accept_string``); XGrammar's ``tests/python/test_lark.py`` is
replayed in ``tests/test_lark.py``. It is *recognition* Lark: no parse trees, no lexer.

* A grammar is a list of items, one per line: definitions ``name: expr`` and directives. A
  body continues on a following line only when that line starts with ``|`` (blank lines
  between are allowed) or, inside ``( )`` / ``[ ]``, with the closing bracket. Whitespace is
  space, tab and form feed; ``#`` and ``//`` start comments.
* Names: ``[A-Za-z_][A-Za-z0-9_-]*``. A name whose first letter (after an optional ``_``) is
  upper-case is a terminal; otherwise a rule. ``?name`` / ``!name`` (Lark's inline / keep-
  tokens modifiers) are accepted on definitions and mean the plain name. ``start`` must be a
  rule and is the root. Definitions may come in any order; unused ones are dropped (they are
  still checked).
* Expressions: sequence, ``|``, ``( )``, ``[ ]`` (optional), postfix ``? * +``, ``~n``,
  ``~n..m``, ``{n}``, ``{n,}``, ``{,m}``, ``{n,m}`` (one postfix per atom); an alias
  ``-> name`` at the end of an alternative is ignored (it names a tree node).
* ``"..."`` strings are JSON strings (escapes ``\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX``, surrogate
  pairs combined; a raw control character, a lone surrogate or any other escape is an
  error). ``"..."i`` is ASCII case-insensitive (non-ASCII letters are an error).
  ``"a".."z"`` is a code-point range (one code point each end, no flags).
* ``/pattern/flags`` regexes are full matches of XGrammar's regex dialect; ``.`` is any code
  point but ``\\n`` unless the flags contain ``s`` (XGrammar rewrites each ``.`` outside a
  class to ``[^\\n]``; so does gxg). Flags: ``s``; ``u`` (no effect); ``i`` is refused by gxg;
  any other letter is an error (XGrammar: the same). Patterns are read by ``gxg.grammar.regex``
  after rewriting ``\\s`` and ``\\S`` to XGrammar's white-space set ``[\\t\\n\\v\\f\\r \\xa0]``, so
  their language is XGrammar's.
* Terminals may reference terminals only (no cycles). ``%ignore expr`` (expr in terminal
  mode; several ``%ignore`` lines form a choice) defines ``lark_ignore ::= item*``, and, as in
  XGrammar, ``lark_ignore`` is inserted *after* every lexeme written in a rule -- a terminal
  reference, a non-empty string, a range, a regex, ``%json``, ``%lark``, ``@name`` -- never
  inside terminals and not before the first lexeme: ``start: "a" "b"`` with ``%ignore " "``
  accepts ``"a b  "`` but not ``" ab"``, unless ``%grammar_options {"allow_initial_skip":
  true}`` (which also accepts ``no_forcing`` / ``allow_invalid_utf8`` set to false).
* ``%import common.NAME``, ``%import common.NAME -> ALIAS``, ``%import common (A, B, ...)``
  for XGrammar's standard terminals (``COMMON_TERMINALS``: DIGIT HEXDIGIT INT SIGNED_INT
  DECIMAL _EXP FLOAT SIGNED_FLOAT NUMBER SIGNED_NUMBER ESCAPED_STRING LCASE_LETTER
  UCASE_LETTER LETTER WORD CNAME WS_INLINE WS CR LF NEWLINE SH_COMMENT CPP_COMMENT C_COMMENT
  SQL_COMMENT), each XGrammar's regex (e.g. ``WORD`` is ``[A-Za-z]+``, ``NUMBER`` has no sign).
* Special tokens (XGrammar's): ``<[2,5-7]>`` matches one whole token with one of those ids,
  ``<name>`` (``<|im_end|>``, ``<think>``) one whose text is ``<name>`` -- every such id, found
  through ``tokenizer_info`` (without it: "named special token ... requires tokenizer_info";
  no such token: "unknown special token"); an IR ``TokenSet`` each, with ``lark_ignore`` after
  it like a lexeme, and refused in terminals.
* XGrammar's extensions: ``%json {schema}`` (a JSON Schema, read by
  ``gxg.grammar.json_schema`` with its default options, as XGrammar's ``from_json_schema``);
  ``%lark { ... }`` (a nested grammar with its own names, ``start``, ``%ignore`` and options);
  ``@name`` (a grammar from ``named_grammars``: a gxg ``Grammar``, or Lark text compiled on
  its own; cycles are errors); the rule attributes ``[lazy]``, ``[suffix="..."]`` and
  ``[capture]`` / ``[capture="name"]``:
  - a lazy head ``h[lazy]: TEXT "<t>"`` (TEXT an any-text regex such as ``/(\\n|.)*/``,
    ``/[\\s\\S]*/``, ``/.*/s``, possibly through terminals), ``h[lazy]: /(\\n|.)*<t>/`` or
    ``h[suffix="<t>"]: TEXT``: standing alone it is ``TagDispatch(("<t>", empty),
    loop_after_dispatch=false)`` -- free text, ending anywhere, or at the first ``<t>``;
  - the dynamic start ``start: (tool | ...)* tail`` (``tail`` any text, each ``tool`` starting
    with such a head) becomes ``TagDispatch((trigger, choice of the tools' remainders), ...,
    loop_after_dispatch=true)``, exactly as XGrammar builds it (``gxg.grammar.macros``);
  - ``capture`` does not change the language; gxg ignores it (no ``get_captures``);
  - ``[lazy]`` on any other body and ``[max_chars=N]``: compiled into the rule's language
    (``gxg.grammar.rule_attributes``), so the body must be regular;
  - ``[max_tokens=N]`` (N > 0): a token budget kept while decoding (``Rule.max_tokens``), on
    the same regular bodies, not on heads consumed by the dynamic start.

Refused -- XGrammar 0.2.8 accepts them but gxg cannot give the same language or behaviour --
with a ``GrammarError`` naming the construct: ``[lazy]``, ``[max_chars=N]`` and
``[max_tokens=N]`` on a body that is not regular, ``[stop="..."]``,
``[suffix=...]`` other than a fixed, case-sensitive string on an any-text head of the dynamic
pattern (XGrammar makes these *runtime-lazy* rules, which end at the first match, a matcher
feature gxg lacks), ``%regex {...}`` (XGrammar's structured regexes, e.g.
``substring_chars``), the regex flag ``i``, and regexes that XGrammar's regex reader takes
differently from gxg's: ``[\\^...`` (XGrammar: a negated class), ``\\u``
escapes of surrogates (XGrammar: two surrogates that match nothing), mid-pattern anchors
(XGrammar drops them), ``\\a`` ``\\e`` ``\\0N`` ``[\\p{..}]`` ``[\\B]`` and bounds above 10000
(see ``gxg.grammar.regex``). Refused by XGrammar too (same messages): priorities ``name.2``,
templates ``name{x}``, ``::`` parameters, ``%if``, ``&``, ``~expr``,
``%declare`` / ``%override`` / ``%extend`` and any other directive, imports other than
``common``, unknown attributes.

Deliberate differences from XGrammar 0.2.8:

* ``?name`` / ``!name`` inside an expression is an error: XGrammar's lexer reads ``"a"?b`` as
  ``"a" b`` (a name ``?b``), silently dropping the ``?`` that Lark means; gxg asks for a space
  (``"a"? b``).
* An error inside a ``%lark { }`` block points at the offending token (XGrammar: at the
  ``%lark``, "failed to compile nested Lark grammar: ..."); errors in a named grammar's text
  are reported at the ``@name``, with the inner message, as XGrammar does.
* ``[capture]`` is accepted and ignored (gxg's matcher has no ``get_captures``).
* Columns count code points (XGrammar: bytes); gxg also accepts regexes XGrammar rejects
  (a literal ``{``, as ``gxg.grammar.regex`` documents).
"""
from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple, Union

from gxg.graphs import reachable
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
    TokenSet,
    iter_rule_refs,
)
from gxg.grammar.macros import MAX_TOKEN_ID
from gxg.grammar.rule_attributes import RuleAttributes, apply_rule_attributes

__all__ = ["parse_lark", "named_grammars_key", "COMMON_TERMINALS", "MAX_REPEAT_BOUND"]

MAX_REPEAT_BOUND = 2**31 - 1          # XGrammar reads repetition counts as int32

# XGrammar 0.2.8's ``%import common.X`` table (cpp/lark_converter.cc, CommonRegexes()).
COMMON_TERMINALS: Dict[str, str] = {
    "DIGIT": r"[0-9]",
    "HEXDIGIT": r"[a-fA-F0-9]",
    "INT": r"[0-9]+",
    "SIGNED_INT": r"(\+|-)?[0-9]+",
    "DECIMAL": r"([0-9]+\.[0-9]*)|(\.[0-9]+)",
    "_EXP": r"[eE](\+|-)?[0-9]+",
    "FLOAT": r"([0-9]+\.[0-9]*|\.[0-9]+)([eE](\+|-)?[0-9]+)?|[0-9]+[eE](\+|-)?[0-9]+",
    "SIGNED_FLOAT":
        r"(\+|-)?(([0-9]+\.[0-9]*|\.[0-9]+)([eE](\+|-)?[0-9]+)?|[0-9]+[eE](\+|-)?[0-9]+)",
    "NUMBER": r"([0-9]+)|([0-9]+\.[0-9]*|\.[0-9]+)([eE](\+|-)?[0-9]+)?|[0-9]+[eE](\+|-)?[0-9]+",
    "SIGNED_NUMBER":
        r"(\+|-)?(([0-9]+)|([0-9]+\.[0-9]*|\.[0-9]+)([eE](\+|-)?[0-9]+)?|[0-9]+[eE](\+|-)?[0-9]+)",
    "ESCAPED_STRING": r'\"([^\"\\]|\\.)*\"',
    "LCASE_LETTER": r"[a-z]",
    "UCASE_LETTER": r"[A-Z]",
    "LETTER": r"[A-Za-z]",
    "WORD": r"[A-Za-z]+",
    "CNAME": r"[_A-Za-z][_A-Za-z0-9]*",
    "WS_INLINE": r"[ \t]+",
    "WS": r"[ \t\f\r\n]+",
    "CR": r"\r",
    "LF": r"\n",
    "NEWLINE": r"(\r?\n)+",
    "SH_COMMENT": r"#[^\n]*",
    "CPP_COMMENT": r"//[^\n]*",
    "C_COMMENT": r"\/\*[^*]*\*+(?:[^/*][^*]*\*+)*\/",
    "SQL_COMMENT": r"--[^\n]*",
}

# Regex bodies that XGrammar takes for "any text" (IsAnyText / ExtractLazyRegexTrigger).
_ANY_TEXT_PLAIN = ("(.|\\n)*", "(\\n|.)*", "(?:.|\\n)*", "(?:\\n|.)*", "[\\s\\S]*", "(?s:.*)")
_ANY_TEXT_DOTALL = (".*",)

# XGrammar's \s: [\t\n\v\f\r ] and U+00A0 (regex_converter.cc); as class members and negated.
_XGR_SPACE_MEMBERS = "\\t\\n\\v\\f\\r \\u00A0"
_XGR_NON_SPACE_MEMBERS = "\\x00-\\x08\\x0E-\\x1F!-\\x9F\\u00A1-\\u{10FFFF}"


def _is_alpha(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z")


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


def _is_alnum(c: str) -> bool:
    return _is_alpha(c) or _is_digit(c)


# ----------------------------------------------------------------------------- source positions


class _Source:
    def __init__(self, text: str):
        self.text = text
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def position(self, offset: int) -> Tuple[int, int]:
        line_index = bisect.bisect_right(self._line_starts, offset) - 1
        return line_index + 1, offset - self._line_starts[line_index] + 1

    def error(self, offset: int, message: str) -> GrammarError:
        line, column = self.position(offset)
        return GrammarError(message, line, column)


# ----------------------------------------------------------------------------- lexer

# token kinds
NAME, STRING, REGEX, NUMBER, SPECIAL, GREF, JSON_, REGEX_EXT, OPTIONS = (
    "name", "string", "regex", "number", "special token", "grammar reference", "%json",
    "%regex", "%grammar_options")
IMPORT, IGNORE, LARK, IF, DIRECTIVE = "%import", "%ignore", "%lark", "%if", "directive"
NEWLINE, END = "newline", "end"
_PUNCT = {":": ":", ",": ",", "=": "=", "(": "(", ")": ")", "[": "[", "]": "]", "{": "{",
          "}": "}", "|": "|", "&": "&", "~": "~", "*": "*"}
_TWO_CHARACTER_TOKENS = ("::", "..", "->")  # read before their first character alone


@dataclass
class _Token:
    kind: str
    text: str
    offset: int
    flags: str = ""
    value: object = None


def _tokenize(source: _Source) -> List[_Token]:
    text = source.text
    n = len(text)
    pos = 0
    out: List[_Token] = []

    def peek(k: int) -> str:
        return text[pos + k] if pos + k < n else "\0"

    while pos < n:
        c = text[pos]
        if c in " \t\f":
            pos += 1
            continue
        if c in "\r\n":
            start = pos
            pos += 2 if text.startswith("\r\n", pos) else 1
            out.append(_Token(NEWLINE, "\n", start))
            continue
        if c == "#" or (c == "/" and peek(1) == "/"):
            while pos < n and text[pos] not in "\r\n":
                pos += 1
            continue
        start = pos
        pair = text[pos: pos + 2]
        if pair in _TWO_CHARACTER_TOKENS:
            out.append(_Token(pair, pair, start))
            pos += 2
        elif c in ":.":
            out.append(_Token(c, c, start))
            pos += 1
        elif c == "-":
            if _is_digit(peek(1)):
                pos = _lex_number(text, pos, out)
            else:
                raise source.error(start, "unexpected '-' character")
        elif c == "+":
            if _is_digit(peek(1)):
                pos = _lex_number(text, pos, out)
            else:
                out.append(_Token("+", "+", start))
                pos += 1
        elif c == "?" or c == "!":
            if _is_alpha(peek(1)) or peek(1) == "_":
                pos = _lex_name(text, pos, out)
            elif c == "?":
                out.append(_Token("?", "?", start))
                pos += 1
            else:
                raise source.error(start, "unexpected '!' character")
        elif c in _PUNCT:
            out.append(_Token(_PUNCT[c], c, start))
            pos += 1
        elif c == '"':
            pos = _lex_string(source, pos, out)
        elif c == "/":
            pos = _lex_regex(source, pos, out)
        elif c == "<":
            end = pos + 1
            while end < n and text[end] != ">":
                if text[end].isspace() or text[end] == "<":
                    raise source.error(start, "invalid special token")
                end += 1
            if end >= n:
                raise source.error(start, "unterminated special token")
            out.append(_Token(SPECIAL, text[start:end + 1], start))
            pos = end + 1
        elif c == "@":
            end = pos + 1
            while end < n and (_is_alnum(text[end]) or text[end] in "_-"):
                end += 1
            if end == pos + 1:
                raise source.error(start, "empty grammar reference")
            out.append(_Token(GREF, text[start:end], start))
            pos = end
        elif c == "%":
            pos = _lex_directive(source, pos, out)
        elif _is_alpha(c) or c == "_":
            pos = _lex_name(text, pos, out)
        elif _is_digit(c):
            pos = _lex_number(text, pos, out)
        else:
            shown = c if c.isprintable() else f"U+{ord(c):04X}"
            raise source.error(start, f"unexpected character '{shown}'")
    out.append(_Token(END, "", n))
    return out


def _lex_name(text: str, pos: int, out: List[_Token]) -> int:
    start = pos
    if text[pos] in "!?":
        pos += 1
    while pos < len(text) and (_is_alnum(text[pos]) or text[pos] in "_-"):
        pos += 1
    out.append(_Token(NAME, text[start:pos], start))
    return pos


def _lex_number(text: str, pos: int, out: List[_Token]) -> int:
    start = pos
    n = len(text)
    if text[pos] in "+-":
        pos += 1
    while pos < n and _is_digit(text[pos]):
        pos += 1
    if pos < n and text[pos] == "." and not text.startswith("..", pos):
        pos += 1
        while pos < n and _is_digit(text[pos]):
            pos += 1
    if pos < n and text[pos] in "eE":
        pos += 1
        if pos < n and text[pos] in "+-":
            pos += 1
        while pos < n and _is_digit(text[pos]):
            pos += 1
    out.append(_Token(NUMBER, text[start:pos], start))
    return pos


def _lex_string(source: _Source, pos: int, out: List[_Token]) -> int:
    text = source.text
    start = pos
    pos += 1
    escaped = False
    while pos < len(text):
        c = text[pos]
        if not escaped and c == '"':
            pos += 1
            flags = ""
            if pos < len(text) and text[pos] == "i":
                flags = "i"
                pos += 1
            out.append(_Token(STRING, text[start + 1:pos - 1 - len(flags)], start, flags))
            return pos
        if c in "\r\n":
            break
        escaped = (not escaped) and c == "\\"
        pos += 1
    raise source.error(start, "unterminated string literal")


def _lex_regex(source: _Source, pos: int, out: List[_Token]) -> int:
    text = source.text
    start = pos
    pos += 1
    escaped = False
    while pos < len(text):
        c = text[pos]
        if not escaped and c == "/":
            pattern = text[start + 1:pos]
            pos += 1
            flags_start = pos
            while pos < len(text) and _is_alpha(text[pos]):
                pos += 1
            out.append(_Token(REGEX, pattern, start, text[flags_start:pos]))
            return pos
        escaped = (not escaped) and c == "\\"
        pos += 1
    raise source.error(start, "unterminated regular expression")


def _lex_directive(source: _Source, pos: int, out: List[_Token]) -> int:
    text = source.text
    start = pos
    pos += 1
    while pos < len(text) and (_is_alpha(text[pos]) or text[pos] == "_"):
        pos += 1
    directive = text[start:pos]
    kinds = {"%json": JSON_, "%regex": REGEX_EXT, "%grammar_options": OPTIONS}
    if directive in kinds:
        while pos < len(text) and text[pos] in " \t\n\v\f\r":
            pos += 1
        try:
            value, end = _JSON.raw_decode(text, pos)
        except (ValueError, RecursionError) as error:
            raise source.error(start, f"failed to parse JSON value after {directive}: "
                                      f"{error}") from None
        out.append(_Token(kinds[directive], directive, start, value=value))
        return end
    simple = {"%import": IMPORT, "%ignore": IGNORE, "%lark": LARK, "%if": IF}
    out.append(_Token(simple.get(directive, DIRECTIVE), directive, start))
    return pos


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_JSON = json.JSONDecoder(parse_constant=_reject_constant)


# ----------------------------------------------------------------------------- syntax tree


@dataclass
class _Node:
    kind: str            # seq choice repeat string regex range name json lark gref
    offset: int
    text: str = ""
    text2: str = ""
    flags: str = ""
    min: int = 0
    max: Optional[int] = None
    children: List["_Node"] = field(default_factory=list)
    value: object = None          # json: the schema; lark: the nested _Document


@dataclass
class _Definition:
    name: str
    is_terminal: bool
    body: _Node
    offset: int
    lazy: bool = False
    lazy_offset: int = 0
    suffix: Optional[str] = None
    suffix_offset: int = 0
    capture: bool = False
    capture_offset: int = 0
    max_chars: Optional[int] = None     # [max_chars=N] (gxg.grammar.rule_attributes)
    max_tokens: Optional[int] = None    # [max_tokens=N] (Rule.max_tokens)


@dataclass
class _Document:
    definitions: List[_Definition] = field(default_factory=list)
    ignores: List[_Node] = field(default_factory=list)
    imports: List[Tuple[str, str, int]] = field(default_factory=list)   # path, local, offset
    options: List[Tuple[object, int]] = field(default_factory=list)


def _is_terminal_name(raw: str) -> bool:
    i = 1 if raw[:1] in ("!", "?") else 0
    if raw[i:i + 1] == "_":
        i += 1
    return i < len(raw) and "A" <= raw[i] <= "Z"


def _plain_name(raw: str) -> str:
    return raw[1:] if raw[:1] in ("!", "?") else raw


_SEQUENCE_END = {NEWLINE, "|", ")", "]", "}", END, "->", "&", IF}


class _Parser:
    def __init__(self, source: _Source, tokens: List[_Token]):
        self.source = source
        self.tokens = tokens
        self.pos = 0

    # -- helpers
    def peek(self, k: int = 0) -> _Token:
        return self.tokens[min(self.pos + k, len(self.tokens) - 1)]

    def match(self, kind: str) -> bool:
        if self.peek().kind != kind:
            return False
        self.pos += 1
        return True

    def consume(self, kind: str, message: str) -> _Token:
        if self.peek().kind != kind:
            raise self.error(self.peek().offset, message)
        self.pos += 1
        return self.tokens[self.pos - 1]

    def error(self, offset: int, message: str) -> GrammarError:
        return self.source.error(offset, message)

    def skip_newlines(self) -> None:
        while self.match(NEWLINE):
            pass

    # -- document
    def document(self, stop_at_rbrace: bool) -> _Document:
        doc = _Document()
        self.skip_newlines()
        while self.peek().kind != END and not (stop_at_rbrace and self.peek().kind == "}"):
            kind = self.peek().kind
            if kind == IMPORT:
                self.import_(doc)
            elif kind == IGNORE:
                self.pos += 1
                doc.ignores.append(self.choice())
            elif kind == OPTIONS:
                token = self.tokens[self.pos]
                self.pos += 1
                doc.options.append((token.value, token.offset))
            elif kind == DIRECTIVE:
                token = self.peek()
                raise self.error(token.offset, f"directive {token.text} is not supported")
            else:
                doc.definitions.append(self.definition())
            if self.peek().kind not in (NEWLINE, END) and not (
                    stop_at_rbrace and self.peek().kind == "}"):
                raise self.error(self.peek().offset, "expected end of grammar item")
            self.skip_newlines()
        return doc

    def import_(self, doc: _Document) -> None:
        offset = self.consume(IMPORT, "expected %import").offset
        path = self.consume(NAME, "expected import path").text
        while self.match("."):
            path += "." + self.consume(NAME, "expected name after '.'").text
        if self.match("("):
            while True:
                name = self.consume(NAME, "expected imported terminal name")
                doc.imports.append((path + "." + name.text, name.text, offset))
                if not self.match(","):
                    break
            self.consume(")", "expected ')' after import list")
            return
        local = path.rsplit(".", 1)[-1]
        if self.match("->"):
            local = self.consume(NAME, "expected import alias").text
        doc.imports.append((path, local, offset))

    def definition(self) -> _Definition:
        token = self.consume(NAME, "expected rule or terminal name")
        definition = _Definition(_plain_name(token.text), _is_terminal_name(token.text),
                                 _Node("seq", token.offset), token.offset)
        if self.peek().kind == "[":
            if definition.is_terminal:
                raise self.error(self.peek().offset, "attributes are only supported on rules")
            self.attributes(definition)
        kind = self.peek().kind
        if kind == ".":
            raise self.error(self.peek().offset,
                             "rule and terminal priorities are not supported")
        if kind == "::":
            raise self.error(self.peek().offset, "parametric grammar is not supported")
        if kind == "{":
            raise self.error(self.peek().offset, "Lark templates are not supported")
        self.consume(":", "expected ':' after rule name")
        definition.body = self.choice()
        return definition

    def attributes(self, definition: _Definition) -> None:
        self.consume("[", "expected '['")
        seen: Set[str] = set()
        while self.peek().kind != "]":
            key = self.consume(NAME, "expected rule attribute")
            if key.text == "lazy" and self.peek().kind != "=":
                definition.lazy = True
                definition.lazy_offset = key.offset
            elif key.text in ("max_tokens", "max_chars"):  # budgets: _Definition's fields
                self.consume("=", f"expected '=' after {key.text} attribute")
                value_token = self.peek()
                value = self.integer()
                if key.text == "max_tokens" and value <= 0:
                    raise self.error(value_token.offset, "max_tokens must be positive")
                if getattr(definition, key.text) is not None:
                    raise self.error(key.offset, f"{key.text} attribute is specified more "
                                                 "than once")
                setattr(definition, key.text, value)
            elif key.text == "capture":
                name = definition.name
                where = key.offset
                if self.match("="):
                    token = self.consume(STRING, "expected string literal after capture=")
                    if token.flags:
                        raise self.error(token.offset, "case-insensitive flags are not "
                                                       "supported on capture")
                    name = self.json_string(token)
                    where = token.offset
                if not name:
                    raise self.error(where, "capture name must not be empty")
                if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
                    raise self.error(where, "capture name must only contain letters, digits, "
                                            "'_', '-' and '.'")
                if "capture" in seen:
                    raise self.error(key.offset, "capture attribute is specified more than once")
                seen.add("capture")
                definition.capture = True
                definition.capture_offset = key.offset
            elif key.text == "suffix":
                self.consume("=", "expected '=' after suffix attribute")
                token = self.consume(STRING, "expected string literal after suffix= (gxg "
                                             "supports only a fixed string)")
                if token.flags:
                    raise self.error(token.offset, "case-insensitive flags are not supported "
                                                   "on suffix by gxg")
                suffix = self.json_string(token)
                if not suffix:
                    raise self.error(token.offset, "suffix must not be empty")
                if definition.suffix is not None:
                    raise self.error(key.offset, "suffix attribute is specified more than once")
                definition.suffix = suffix
                definition.suffix_offset = token.offset
            else:
                raise self.error(key.offset, f"rule attribute '{key.text}' is not supported"
                                 + (" by gxg (XGrammar: a runtime-lazy rule ending at the stop "
                                    "string)" if key.text == "stop" else ""))
            if not self.match(","):
                break
        self.consume("]", "expected ']' after rule attributes")

    # -- expressions
    def choice(self) -> _Node:
        offset = self.peek().offset
        alternatives = [self.sequence()]
        while self.alternative_separator():
            alternatives.append(self.sequence())
        if len(alternatives) == 1:
            return alternatives[0]
        return _Node("choice", offset, children=alternatives)

    def alternative_separator(self) -> bool:
        if self.match("|"):
            return True
        saved = self.pos
        self.skip_newlines()
        if self.match("|"):
            return True
        if self.peek().kind in (")", "]", "}"):
            return False
        self.pos = saved
        return False

    def sequence(self) -> _Node:
        offset = self.peek().offset
        items = []
        while self.peek().kind not in _SEQUENCE_END:
            items.append(self.expression())
        if self.match("->"):
            self.consume(NAME, "expected alias name after '->'")
        if self.peek().kind == "&":
            raise self.error(self.peek().offset, "terminal intersection '&' is not supported")
        if self.peek().kind == IF:
            raise self.error(self.peek().offset, "parametric %if conditions are not supported")
        return _Node("seq", offset, children=items)

    def integer(self) -> int:
        token = self.consume(NUMBER, "expected integer")
        if not re.fullmatch(r"\+?[0-9]+", token.text) or int(token.text) > MAX_REPEAT_BOUND:
            raise self.error(token.offset, "invalid repetition count")
        return int(token.text)

    def expression(self) -> _Node:
        token = self.peek()
        if self.match("~"):
            raise self.error(token.offset, "regular-expression complement '~' is not supported")
        atom = self.atom()
        low: Optional[int] = None
        high: Optional[int] = None
        if self.match("?"):
            low, high = 0, 1
        elif self.match("*"):
            low = 0
        elif self.match("+"):
            low = 1
        elif self.match("~"):
            low = high = self.integer()
            if self.match(".."):
                high = self.integer()
        elif self.match("{"):
            low = 0 if self.peek().kind == "," else self.integer()
            if self.match(","):
                high = None if self.peek().kind == "}" else self.integer()
            else:
                high = low
            self.consume("}", "expected '}' after repetition range")
        else:
            return atom
        if high is not None and high < low:
            raise self.error(token.offset,
                             "repetition end must be greater than or equal to start")
        return _Node("repeat", token.offset, min=low, max=high, children=[atom])

    def atom(self) -> _Node:
        token = self.peek()
        kind = token.kind
        if self.match("("):
            node = self.choice()
            self.consume(")", "expected ')' after group")
            return node
        if self.match("["):
            inner = self.choice()
            self.consume("]", "expected ']' after optional group")
            return _Node("repeat", token.offset, min=0, max=1, children=[inner])
        if self.match(STRING):
            text = self.json_string(token)
            if self.match(".."):
                end = self.consume(STRING, "expected string after '..'")
                end_text = self.json_string(end)
                if token.flags:
                    raise self.error(token.offset, "flags are not allowed on character ranges")
                if end.flags:
                    raise self.error(end.offset, "flags are not allowed on character ranges")
                return _Node("range", token.offset, text=text, text2=end_text)
            return _Node("string", token.offset, text=text, flags=token.flags)
        if self.match(REGEX):
            return _Node("regex", token.offset, text=token.text, flags=token.flags)
        if self.match(NAME):
            if token.text[0] in "?!":
                raise self.error(token.offset, f"'{token.text[0]}' directly before a name in "
                                 f"an expression: XGrammar reads {token.text!r} as the name "
                                 f"{token.text[1:]!r}, dropping the '{token.text[0]}'; write "
                                 f"a space after a '?' quantifier")
            if self.peek().kind == "::":
                raise self.error(self.peek().offset, "parametric grammar is not supported")
            if self.peek().kind == "{" and self.peek(1).kind not in (",", NUMBER):
                raise self.error(self.peek().offset, "Lark templates are not supported")
            return _Node("name", token.offset, text=token.text)
        if self.match(JSON_):
            return _Node("json", token.offset, value=token.value)
        if self.match(REGEX_EXT):
            raise self.error(token.offset, "structured %regex is not supported by gxg")
        if self.match(SPECIAL):
            return _Node("special", token.offset, text=token.text)
        if self.match(GREF):
            return _Node("gref", token.offset, text=token.text[1:])
        if self.match(LARK):
            self.consume("{", "expected '{' after %lark")
            nested = self.document(True)
            self.consume("}", "expected '}' after nested Lark grammar")
            return _Node("lark", token.offset, value=nested)
        if kind == DIRECTIVE:
            raise self.error(token.offset, f"directive {token.text} is not supported")
        raise self.error(token.offset, "expected grammar expression")

    def json_string(self, token: _Token) -> str:
        return _json_string(self.source, token)


def _json_string(source: _Source, token: _Token) -> str:
    """The JSON string ``"<token.text>"`` as picojson (XGrammar) reads it."""
    body = token.text
    out: List[str] = []
    i, n = 0, len(body)

    def fail(detail: str) -> GrammarError:
        return source.error(token.offset, f"invalid string literal: {detail}")

    def hex4(at: int) -> int:
        digits = body[at:at + 4]
        if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise fail("\\u must be followed by four hex digits")
        return int(digits, 16)

    simple = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
              "t": "\t"}
    while i < n:
        c = body[i]
        if c != "\\":
            if ord(c) < 0x20:
                raise fail(f"raw control character U+{ord(c):04X} (write an escape)")
            out.append(c)
            i += 1
            continue
        e = body[i + 1] if i + 1 < n else ""
        if e in simple:
            out.append(simple[e])
            i += 2
        elif e == "u":
            code = hex4(i + 2)
            i += 6
            if 0xDC00 <= code <= 0xDFFF:
                raise fail("lone low surrogate")
            if 0xD800 <= code <= 0xDBFF:
                if body[i:i + 2] != "\\u":
                    raise fail("high surrogate without a low surrogate")
                low = hex4(i + 2)
                if not 0xDC00 <= low <= 0xDFFF:
                    raise fail("high surrogate without a low surrogate")
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                i += 6
            out.append(chr(code))
        else:
            raise fail(f"unknown escape '\\{e}'")
    return "".join(out)


# ----------------------------------------------------------------------------- regexes


def _regex_to_expr(source: _Source, node: _Node) -> Grammar:
    """The grammar of a ``/pattern/flags`` terminal, in XGrammar's meaning."""
    from gxg.grammar.regex import regex_to_grammar

    for flag in node.flags:
        if flag not in "isu":
            if flag == "l":
                raise source.error(node.offset, "regular-expression flag 'l' is not supported")
            raise source.error(node.offset, f"regular-expression flag '{flag}' is not supported")
    if "i" in node.flags:
        raise source.error(node.offset, "the regular-expression flag 'i' (case-insensitive) "
                                        "is not supported by gxg")
    pattern = _xgrammar_pattern(source, node, dot_all="s" in node.flags)
    try:
        return regex_to_grammar(pattern)
    except GrammarError as error:
        raise source.error(node.offset,
                           f"failed to compile regular expression: {error.message}") from None


def _xgrammar_pattern(source: _Source, node: _Node, dot_all: bool) -> str:
    """``node``'s pattern rewritten so that gxg's regex reader gives XGrammar's language:
    each ``.`` outside a class becomes ``[^\\n]`` (unless ``dot_all``), ``\\s`` / ``\\S`` become
    XGrammar's set; constructs the two readers take differently are refused."""
    pattern = node.text
    out: List[str] = []
    in_class = False
    class_start = False          # just after '[' or '[^'
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        at_class_start = class_start
        class_start = False
        if c == "\\":
            e = pattern[i + 1] if i + 1 < n else ""
            if e == "s":
                out.append(_XGR_SPACE_MEMBERS if in_class else f"[{_XGR_SPACE_MEMBERS}]")
            elif e == "S":
                out.append(_XGR_NON_SPACE_MEMBERS if in_class
                           else f"[^{_XGR_SPACE_MEMBERS}]")
            elif e == "^" and in_class and at_class_start:
                raise source.error(node.offset, "'[\\^' at the start of a regex class: "
                                   "XGrammar reads it as a negated class, gxg as a literal "
                                   "'^'; move the '\\^' later in the class")
            else:
                if e == "u" and re.fullmatch(r"[dD][89a-fA-F][0-9a-fA-F]{2}",
                                             pattern[i + 2:i + 6]):
                    raise source.error(node.offset, "a surrogate escape \\u" +
                                       pattern[i + 2:i + 6] + " in a regex: XGrammar keeps "
                                       "surrogates (matching nothing), gxg pairs them; write "
                                       "the character itself")
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":
            if not in_class:
                class_start = True
                if pattern.startswith("[^", i):
                    out.append("[^")
                    i += 2
                    in_class = True
                    continue
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        elif c == "." and not in_class and not dot_all:
            out.append("[^\\n]")
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


# ----------------------------------------------------------------------------- compiler


def _json_schema_grammar(schema) -> Grammar:
    from gxg.grammar.json_schema import json_schema_to_grammar
    return json_schema_to_grammar(schema)


class _Compiler:
    """One Lark document (the top level, a ``%lark { }`` block or a named grammar's text)."""

    def __init__(self, source: _Source, document: _Document, named: "_NamedGrammars",
                 nested_at: Optional[int] = None):
        self.source = source
        self.nested_at = nested_at          # where the %lark block starts, for a nested one
        self.doc = document
        self.named = named
        self.rules: List[Rule] = []
        self.by_name: Dict[str, _Definition] = {}
        self.ir_names: Dict[str, str] = {}
        self.used_names: Set[str] = set()
        self.skip: Optional[RuleRef] = None
        self.allow_initial_skip = False
        self.named_roots: Dict[str, RuleRef] = {}

    def error(self, offset: int, message: str) -> GrammarError:
        return self.source.error(offset, message)

    def fresh(self, hint: str) -> str:
        name = hint
        counter = 0
        while name in self.used_names:
            counter += 1
            name = f"{hint}_{counter}"
        self.used_names.add(name)
        return name

    # -- top level
    def compile(self) -> Grammar:
        self.expand_imports()
        self.read_options()
        self.index_definitions()
        self.check_terminals()
        # IR names: start -> root; every other name kept unless it is "root".
        self.used_names = {d.name for d in self.doc.definitions} | {"root"}
        for definition in self.doc.definitions:
            if definition.name == "start":
                self.ir_names["start"] = "root"
            elif definition.name == "root":
                self.ir_names["root"] = self.fresh("root_rule")
            else:
                self.ir_names[definition.name] = definition.name
        for definition in self.doc.definitions:
            if definition.is_terminal:
                self.add_rule(self.ir_names[definition.name],
                              self.node(definition.body, terminal=True))
        self.compile_ignore()
        start = self.by_name["start"]
        dynamic, consumed = self.dynamic_start(start)
        for definition in self.doc.definitions:
            if definition.is_terminal:
                continue
            if definition.name in consumed:
                if definition.max_tokens is not None:
                    raise self.error(definition.offset, "max_tokens is not supported on rules "
                                     "consumed by dynamic dispatch")
                if definition.capture:
                    raise self.error(definition.capture_offset, "capture is not supported on "
                                     "rules consumed by dynamic dispatch")
                self.add_rule(self.ir_names[definition.name], EMPTY)
                continue
            if definition.name == "start" and dynamic is not None:
                body = dynamic
            elif (definition.lazy or definition.suffix is not None) and \
                    not self.general_lazy(definition):
                body = self.lazy_rule(definition)
            else:
                body = self.node(definition.body, terminal=False)
            if definition.name == "start" and self.allow_initial_skip and self.skip:
                body = Sequence((self.skip, body))
            self.add_rule(self.ir_names[definition.name], body)
        self.apply_attributes()
        return _reachable(Grammar(tuple(self.rules), "root"))

    def general_lazy(self, definition: _Definition) -> bool:
        """A ``[lazy]`` rule that is not XGrammar's any-text-then-trigger pattern (nor a
        ``suffix`` one): compiled into the rule's language (``apply_attributes``)."""
        return (definition.lazy and definition.suffix is None
                and self.regex_trigger(self.unwrap(definition.body)) is None
                and self.lazy_trigger(definition) is None)

    def apply_attributes(self) -> None:
        """The rules with ``[max_chars=N]``, ``[max_tokens=N]`` or a general ``[lazy]`` get
        their language under the attributes (``gxg.grammar.rule_attributes``; the body must be
        regular); a token budget stays on the rule (``Rule.max_tokens``)."""
        attributed = {self.ir_names[d.name]: RuleAttributes(self.general_lazy(d), d.max_chars,
                                                            d.max_tokens)
                      for d in self.doc.definitions if not d.is_terminal
                      and (d.max_chars is not None or d.max_tokens is not None
                           or self.general_lazy(d))}
        if not attributed:
            return
        offsets = {self.ir_names[d.name]: d.offset for d in self.doc.definitions}
        rewritten = apply_rule_attributes(
            {rule.name: rule.body for rule in self.rules}, attributed,
            lambda rule, hint: RuleRef(self.fresh(f"{rule}_{hint}")),
            lambda ref, body: self.add_rule(ref.name, body),
            lambda rule, message: self.error(offsets[rule], message))
        self.rules = [Rule(rule.name, rewritten[rule.name],
                           max_tokens=attributed[rule.name].max_tokens)
                      if rule.name in rewritten else rule for rule in self.rules]

    def add_rule(self, name: str, body: Expr) -> None:
        self.rules.append(Rule(name, body))

    def expand_imports(self) -> None:
        for path, local, offset in self.doc.imports:
            module, _, name = path.rpartition(".")
            if module != "common" or name not in COMMON_TERMINALS:
                raise self.error(offset, f"unknown common import '{path}'")
            self.doc.definitions.append(_Definition(
                local, True, _Node("regex", offset, text=COMMON_TERMINALS[name]), offset))

    def read_options(self) -> None:
        for value, offset in self.doc.options:
            if not isinstance(value, dict):
                raise self.error(offset, "%grammar_options value must be an object")
            for key, option in value.items():
                if key == "allow_initial_skip":
                    if not isinstance(option, bool):
                        raise self.error(offset, "allow_initial_skip must be a boolean")
                    self.allow_initial_skip = self.allow_initial_skip or option
                elif key in ("no_forcing", "allow_invalid_utf8"):
                    if not isinstance(option, bool):
                        raise self.error(offset, f"{key} must be a boolean")
                    if option:
                        raise self.error(offset, f"%grammar_options option '{key}' is not "
                                                 "supported")
                else:
                    raise self.error(offset, f"unknown %grammar_options option '{key}'")

    def index_definitions(self) -> None:
        for definition in self.doc.definitions:
            if definition.name in self.by_name:
                raise self.error(definition.offset,
                                 f"duplicate rule or terminal '{definition.name}'")
            self.by_name[definition.name] = definition
        if "start" not in self.by_name:
            if self.nested_at is not None:
                raise self.error(self.nested_at, "failed to compile nested Lark grammar: no "
                                                 "start rule found")
            raise GrammarError("no start rule found", 1, 1)
        if self.by_name["start"].is_terminal:
            raise self.error(self.by_name["start"].offset, "start must be a rule")

    def check_terminals(self) -> None:
        state: Dict[str, int] = {}
        for definition in self.doc.definitions:
            if definition.is_terminal and not state.get(definition.name):
                try:
                    self.visit_terminal(definition, state)
                except RecursionError:
                    raise self.error(definition.offset, "terminals nest too deeply") from None

    def visit_terminal(self, definition: _Definition, state: Dict[str, int]) -> None:
        """``check_terminals``' depth-first visit (``state``: 1 on the path, 2 done)."""
        state[definition.name] = 1
        for name in _names_in(definition.body):
            target = self.by_name.get(name)
            if target is None:
                raise self.error(definition.offset, f"unknown name '{name}'")
            if not target.is_terminal:
                raise self.error(definition.offset, f"terminal '{definition.name}' cannot "
                                                    f"reference rule '{name}'")
            if state.get(name) == 1:
                raise self.error(definition.offset,
                                 f"circular reference in terminal '{name}'")
            if not state.get(name):
                self.visit_terminal(target, state)
        state[definition.name] = 2

    def compile_ignore(self) -> None:
        if not self.doc.ignores:
            return
        items = [self.node(node, terminal=True) for node in self.doc.ignores]
        item = self.fresh("lark_ignore_item")
        self.add_rule(item, items[0] if len(items) == 1 else Choice(tuple(items)))
        skip = self.fresh("lark_ignore")
        self.add_rule(skip, Repeat(RuleRef(item), 0, None))
        self.skip = RuleRef(skip)

    # -- expressions
    def then_skip(self, expr: Expr) -> Expr:
        return expr if self.skip is None else Sequence((expr, self.skip))

    def node(self, node: _Node, terminal: bool) -> Expr:
        kind = node.kind
        if kind == "seq":
            return Sequence(tuple(self.node(child, terminal) for child in node.children))
        if kind == "choice":
            return Choice(tuple(self.node(child, terminal) for child in node.children))
        if kind == "repeat":
            return Repeat(self.node(node.children[0], terminal), node.min, node.max)
        if kind == "name":
            target = self.by_name.get(node.text)
            if target is None:
                raise self.error(node.offset, f"unknown name '{node.text}'")
            if terminal and not target.is_terminal:
                raise self.error(node.offset, f"terminal cannot reference rule '{node.text}'")
            ref = RuleRef(self.ir_names[node.text])
            return self.then_skip(ref) if not terminal and target.is_terminal else ref
        if kind == "string":
            expr = self.string(node)
            return self.then_skip(expr) if not terminal and node.text else expr
        if kind == "range":
            if len(node.text) != 1 or len(node.text2) != 1:
                raise self.error(node.offset, "character range endpoints must be one character")
            if node.text > node.text2:
                raise self.error(node.offset, "character range start must not exceed end")
            expr = CharClass(((ord(node.text), ord(node.text2)),))
            return expr if terminal else self.then_skip(expr)
        if kind == "regex":
            expr = self.embed(_regex_to_expr(self.source, node), "lark_regex", inline=True)
            return expr if terminal else self.then_skip(expr)
        if kind == "json":
            if terminal:
                raise self.error(node.offset, "%json cannot be used in terminals")
            try:
                grammar = _json_schema_grammar(node.value)
            except GrammarError as error:
                raise self.error(node.offset, "failed to compile inline JSON schema: "
                                 f"{error}") from None
            return self.then_skip(self.embed(grammar, "lark_json"))
        if kind == "lark":
            if terminal:
                raise self.error(node.offset, "nested %lark cannot be used in terminals")
            grammar = _Compiler(self.source, node.value, self.named, node.offset).compile()
            return self.then_skip(self.embed(grammar, "lark_nested"))
        if kind == "special":
            if terminal:
                raise self.error(node.offset, "special tokens cannot be used in terminals")
            return self.then_skip(self.named.special_token(node.text, self.source, node.offset))
        if kind == "gref":
            if terminal:
                raise self.error(node.offset, "named grammars cannot be used in terminals")
            ref = self.named_roots.get(node.text)
            if ref is None:
                grammar = self.named.resolve(node.text, self.source, node.offset)
                ref = self.embed(grammar, f"lark_{node.text}".replace("-", "_"))
                self.named_roots[node.text] = ref
            return self.then_skip(ref)
        raise AssertionError(kind)

    def string(self, node: _Node) -> Expr:
        if not node.flags:
            return Literal.of(node.text)
        items: List[Expr] = []
        for c in node.text:
            if ord(c) > 0x7F:
                raise self.error(node.offset, "case-insensitive string literals currently "
                                              "support ASCII characters only")
            if _is_alpha(c):
                items.append(CharClass(((ord(c.lower()),) * 2, (ord(c.upper()),) * 2)))
            else:
                items.append(Literal.of(c))
        return Sequence(tuple(items))

    def embed(self, grammar: Grammar, hint: str, inline: bool = False) -> Expr:
        """``grammar``'s rules added under fresh names; the expression for its root."""
        if inline and len(grammar.rules) == 1:
            return grammar.rules[0].body
        mapping = {rule.name: self.fresh(hint if rule.name == grammar.root_rule_name
                                         else f"{hint}_{rule.name}")
                   for rule in grammar.rules}
        from gxg.grammar.combine import rename_refs
        for rule in grammar.rules:
            self.rules.append(Rule(mapping[rule.name], rename_refs(rule.body, mapping),
                                   rename_refs(rule.lookahead, mapping), rule.max_tokens))
        return RuleRef(mapping[grammar.root_rule_name])

    # -- lazy rules and dynamic dispatch (XGrammar's structural-tool-call pattern)
    def is_any_text(self, node: _Node, visiting: Optional[Set[str]] = None) -> bool:
        if node.kind == "regex":
            pattern = re.sub(r"[ \t\r]", "", node.text)
            if node.flags == "s":
                return pattern in _ANY_TEXT_DOTALL
            return not node.flags and pattern in _ANY_TEXT_PLAIN
        if node.kind == "seq" and len(node.children) == 1:
            return self.is_any_text(node.children[0], visiting)
        if node.kind == "name":
            visiting = set() if visiting is None else visiting
            target = self.by_name.get(node.text)
            if node.text in visiting or target is None:
                return False
            visiting.add(node.text)
            result = self.is_any_text(target.body, visiting)
            visiting.discard(node.text)
            return result
        return False

    @staticmethod
    def unwrap(node: _Node) -> _Node:
        while node.kind == "seq" and len(node.children) == 1:
            node = node.children[0]
        return node

    def regex_trigger(self, node: _Node) -> Optional[str]:
        if node.kind != "regex":
            return None
        if not node.flags:
            prefixes = _ANY_TEXT_PLAIN
        elif node.flags == "s":
            prefixes = _ANY_TEXT_DOTALL
        else:
            return None
        for prefix in prefixes:
            if len(node.text) > len(prefix) and node.text.startswith(prefix):
                trigger = _fixed_regex_literal(node.text[len(prefix):])
                if trigger:
                    return trigger
        return None

    def lazy_trigger(self, definition: _Definition) -> Optional[str]:
        if definition.suffix is not None:
            return definition.suffix if self.is_any_text(definition.body) else None
        if not definition.lazy:
            return None
        body = self.unwrap(definition.body)
        trigger = self.regex_trigger(body)
        if trigger is not None:
            return trigger
        whole = definition.body
        if whole.kind != "seq" or len(whole.children) != 2 or \
                not self.is_any_text(whole.children[0]):
            return None
        last = whole.children[1]
        if last.kind == "string" and last.text and not last.flags:
            return last.text
        return None

    def tag_dispatch(self, pairs: List[Tuple[str, str]], loop: bool, offset: int) -> Expr:
        from gxg.grammar.macros import (MacroCall, MacroError, MacroKeyword, MacroValue,
                                        expand_macro)
        arguments = tuple(MacroValue("tuple", (MacroValue("string", tag, offset),
                                               MacroValue("name", rule, offset)), offset)
                          for tag, rule in pairs)
        keywords = (MacroKeyword("loop_after_dispatch", MacroValue("boolean", loop, offset),
                                 offset),)
        try:
            expansion = expand_macro(MacroCall("TagDispatch", arguments, keywords, offset,
                                               offset), self.fresh)
        except MacroError as error:
            raise self.error(offset, error.message) from None
        self.rules.extend(expansion.rules)
        return expansion.expr

    def lazy_rule(self, definition: _Definition) -> Expr:
        where = definition.lazy_offset if definition.lazy else definition.suffix_offset
        if definition.suffix is not None:
            raise self.error(definition.offset, "suffix is only supported on an ANY_TEXT head "
                                                "used by dynamic dispatch (by gxg; XGrammar "
                                                "makes other suffix rules runtime-lazy)")
        if self.regex_trigger(self.unwrap(definition.body)) is not None:
            raise self.error(definition.offset, "lazy regex suffix is only supported on a head "
                                                "used by dynamic dispatch")
        trigger = self.lazy_trigger(definition)
        if trigger is None:
            raise self.error(where, "general lazy rules ([lazy] on a body other than ANY_TEXT "
                                    "followed by a fixed string) are not supported by gxg")
        end = self.fresh("lark_lazy_end")
        self.add_rule(end, EMPTY)
        return self.then_skip(self.tag_dispatch([(trigger, end)], False, definition.offset))

    def dynamic_start(self, start: _Definition) -> Tuple[Optional[Expr], Set[str]]:
        none: Tuple[Optional[Expr], Set[str]] = (None, set())
        elements = start.body.children if start.body.kind == "seq" else [start.body]
        if len(elements) != 2:
            return none
        loop = self.unwrap(elements[0])
        if loop.kind != "repeat" or loop.min != 0 or loop.max is not None:
            return none
        body = self.unwrap(loop.children[0])
        if body.kind == "choice":
            tools = []
            for alternative in body.children:
                name = self.unwrap(alternative)
                if name.kind != "name":
                    return none
                tools.append(name.text)
        elif body.kind == "name":
            tools = [body.text]
        else:
            return none
        tail = self.unwrap(elements[1])
        if tail.kind != "name" or tail.text not in self.by_name or \
                not self.is_any_text(self.by_name[tail.text].body):
            return none
        consumed = {tail.text}
        alternatives: List[Tuple[str, List[_Node]]] = []
        for tool in tools:
            definition = self.by_name.get(tool)
            if definition is None or definition.is_terminal:
                return none
            consumed.add(tool)
            parts = definition.body.children if definition.body.kind == "seq" \
                else [definition.body]
            if not parts:
                return none
            first = self.unwrap(parts[0])
            trigger = None
            if first.kind == "name" and first.text in self.by_name:
                trigger = self.lazy_trigger(self.by_name[first.text])
                if trigger is not None:
                    consumed.add(first.text)
            if trigger is None:
                return none
            alternatives.append((trigger, parts[1:]))
        order: List[str] = []
        grouped: Dict[str, List[List[_Node]]] = {}
        for trigger, rest in alternatives:
            if trigger not in grouped:
                order.append(trigger)
                grouped[trigger] = []
            grouped[trigger].append(rest)
        # The consumed rules get empty bodies (as in XGrammar); check them like XGrammar.
        pairs = []
        for trigger in order:
            choices = [self.node(_Node("seq", start.offset, children=rest), terminal=False)
                       for rest in grouped[trigger]]
            name = self.fresh("lark_dynamic_body")
            self.add_rule(name, choices[0] if len(choices) == 1 else Choice(tuple(choices)))
            pairs.append((trigger, name))
        return self.tag_dispatch(pairs, True, start.offset), consumed


def _names_in(node: _Node) -> List[str]:
    out = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.kind == "name":
            out.append(current.text)
        stack.extend(reversed(current.children))
    return out


def _fixed_regex_literal(pattern: str) -> Optional[str]:
    """XGrammar's ParseFixedRegexLiteral: the text a regex of plain characters spells."""
    out: List[str] = []
    i, n = 0, len(pattern)
    simple = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "0": "\0"}
    while i < n:
        c = pattern[i]
        i += 1
        if c != "\\":
            if c in ".^$*+?()[]{}|":
                return None
            out.append(c)
            continue
        if i == n:
            return None
        e = pattern[i]
        i += 1
        if e in simple:
            out.append(simple[e])
        elif e in "^$.*+?()[]{}|\\/-":
            out.append(e)
        elif e in "xu":
            if e == "u" and pattern[i:i + 1] == "{":
                m = re.match(r"\{([0-9a-fA-F]{1,6})\}", pattern[i:])
                if m is None:
                    return None
                code = int(m.group(1), 16)
                i += m.end()
            else:
                width = 2 if e == "x" else 4
                digits = pattern[i:i + width]
                if len(digits) != width or not all(d in "0123456789abcdefABCDEF"
                                                   for d in digits):
                    return None
                code = int(digits, 16)
                i += width
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                return None
            out.append(chr(code))
        else:
            return None
    return "".join(out)


def _reachable(grammar: Grammar) -> Grammar:
    by_name = {rule.name: rule for rule in grammar.rules}
    seen = set(reachable([grammar.root_rule_name], lambda name: (
        *by_name[name].refs, *iter_rule_refs(by_name[name].lookahead))))
    root = by_name[grammar.root_rule_name]
    rules = (root,) + tuple(rule for rule in grammar.rules
                            if rule.name in seen and rule is not root)
    return Grammar(rules, grammar.root_rule_name)


# ----------------------------------------------------------------------------- named grammars


class _NamedGrammars:
    """What every Lark text of one ``from_lark`` call shares: the named grammars, and the
    tokenizer that resolves named special tokens."""

    def __init__(self, named: Optional[Dict[str, Union[Grammar, str]]], tokenizer_info=None):
        self.tokenizer_info = tokenizer_info
        self._vocab = None  # its decoded vocabulary, read once (a new list per access)
        if named is None:
            named = {}
        if not isinstance(named, dict):
            raise TypeError("named_grammars must be a dictionary")
        self.inputs: Dict[str, Union[Grammar, str]] = {}
        for name, value in named.items():
            if not isinstance(name, str):
                raise TypeError("named grammar names must be strings")
            if not isinstance(value, (Grammar, str)):
                raise TypeError("named grammar values must be Grammar instances or Lark strings")
            if not name:
                raise GrammarError("Named grammar names must not be empty")
            if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
                raise GrammarError(f"Invalid named grammar name '{name}': names may contain "
                                   "only letters, digits, underscores, and hyphens")
            self.inputs[name] = value
        self.compiled: Dict[str, Grammar] = {}
        self.active: List[str] = []

    def special_token(self, text: str, source: _Source, offset: int) -> TokenSet:
        """``<[2,5-7]>``: those ids; ``<name>``: every id whose text is ``<name>``, through the
        tokenizer (XGrammar's forms and messages)."""
        if text.startswith("<["):
            if not text.endswith("]>"):
                raise source.error(offset, "invalid special token")
            return TokenSet(_numeric_special_token(text[2:-2], source, offset))
        if self.tokenizer_info is None:
            raise source.error(offset, f"named special token {text} requires tokenizer_info")
        wanted = text.encode("utf-8")
        ids = tuple(i for i, piece in enumerate(self._decoded_vocab()) if piece == wanted)
        if not ids:
            raise source.error(offset, f"unknown special token {text}")
        return TokenSet(ids)

    def _decoded_vocab(self):
        if self._vocab is None:
            self._vocab = self.tokenizer_info.decoded_vocab
        return self._vocab

    def resolve(self, name: str, source: _Source, offset: int) -> Grammar:
        value = self.inputs.get(name)
        if value is None:
            raise source.error(offset, f"unknown named grammar '@{name}'")
        if isinstance(value, Grammar):
            return value
        if name in self.compiled:
            return self.compiled[name]
        if name in self.active:
            cycle = " -> ".join(f"@{n}" for n in self.active[self.active.index(name):])
            raise source.error(offset, f"circular named grammar reference: {cycle} -> @{name}")
        self.active.append(name)
        try:
            grammar = _compile_text(value, self)
        except GrammarError as error:
            raise source.error(offset, f"failed to compile named grammar '@{name}': "
                                       f"{error}") from None
        finally:
            self.active.pop()
        self.compiled[name] = grammar
        return grammar


def named_grammars_key(named_grammars) -> tuple:
    """A hashable key for ``named_grammars`` (for the compiler's cache); checks the argument
    as ``parse_lark`` does."""
    checked = _NamedGrammars(named_grammars).inputs
    return tuple(sorted((name, value if isinstance(value, str)
                         else ("grammar", str(value), value.root_rule_name))
                        for name, value in checked.items()))


# ----------------------------------------------------------------------------- entry point


def _numeric_special_token(body: str, source: _Source, offset: int) -> Tuple[int, ...]:
    """The ids of ``<[body]>``: comma-separated ids and ``lo-hi`` ranges."""
    if not body:
        raise source.error(offset, "empty numeric special-token range")
    ids: List[int] = []
    for part in body.split(","):
        bounds = part.split("-")
        if len(bounds) > 2 or not all(b.isdigit() and b.isascii() for b in bounds) or \
                int(bounds[0]) > int(bounds[-1]):
            raise source.error(offset, f"invalid numeric special-token range '{part}'")
        ids.extend(range(int(bounds[0]), int(bounds[-1]) + 1))
        if ids[-1] > MAX_TOKEN_ID:
            raise source.error(offset, f"token id {ids[-1]} is too large (at most "
                                       f"{MAX_TOKEN_ID})")
    return tuple(ids)


def _compile_text(text: str, named: _NamedGrammars) -> Grammar:
    source = _Source(text)
    tokens = _tokenize(source)
    parser = _Parser(source, tokens)
    try:
        document = parser.document(False)
    except RecursionError:
        raise source.error(parser.peek().offset, "the grammar nests too deeply") from None
    try:
        return _Compiler(source, document, named).compile()
    except RecursionError:
        raise GrammarError("the grammar nests too deeply") from None


def parse_lark(lark_string: str, named_grammars: Optional[Dict[str, Union[Grammar, str]]] = None,
               tokenizer_info=None) -> Grammar:
    """The Grammar of Lark text in XGrammar 0.2.8's dialect (see the module docstring);
    ``tokenizer_info`` resolves named special tokens."""
    if not isinstance(lark_string, str):
        raise TypeError(f"from_lark takes Lark text, got {type(lark_string).__name__}")
    return _compile_text(lark_string, _NamedGrammars(named_grammars, tokenizer_info))
