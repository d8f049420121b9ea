r"""Printer: Grammar IR -> normalised EBNF text (what ``str(grammar)`` shows).

In:  a ``gxg.grammar.ir.Grammar`` (or, for ``expr_to_ebnf``, one expression).
Out: EBNF text in the dialect ``gxg.grammar.ebnf.parse_ebnf`` reads, one rule per line, in the
     grammar's rule order::

        root ::= "a" ("b" | c)* [0-9]{2,3} (= "x")
        c ::= [^\n"\\] | "\xA0\x01g\u0001A" | Token(5, 7) ExcludeToken(2)

The text is canonical: ``parse_ebnf(grammar_to_ebnf(g), root_rule_name=g.root_rule_name) == g``
for every grammar, and printing is a fixed point of parse-then-print. The EBNF text itself has
no way to say which rule is the root; by convention it is the rule named ``root``. When a
grammar's root has another name, the printed text starts with a comment saying so, e.g.
``# root rule: main (parse with root_rule_name="main")``, and that name must be passed back to
``parse_ebnf``. Rule names are printed as they are; a name outside the dialect's
``[A-Za-z_.-][A-Za-z0-9_.-]*`` (which only a hand-built IR can have) cannot be parsed back.

Token sets print as XGrammar spells them: ``Token(5, 7)`` (one token of these ids) and
``ExcludeToken(2)`` (one token of any other id; ``ExcludeToken()`` is any token, which
XGrammar's parser refuses but gxg's reads, so that every IR prints and parses back).

Layout choices: parentheses only where precedence needs them (choice < sequence < postfix
quantifier < atom), so a quantified quantifier is ``("a"*)*``; repeats print as ``* + ? {m}
{m,} {m,n}``; strings escape ``"``, ``\`` and every non-printable code point (``\n \t \r``,
else ``\xHH``, ``\uHHHH`` or ``\UHHHHHHHH``; ``\xHH`` only where no hex digit follows, since
``\x`` takes every hex digit after it), and keep printable non-ASCII text as it is. Classes
also escape ``\ ] -`` and a leading ``^``.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from gxg.grammar.ir import (
    CharClass, Choice, Expr, Grammar, Literal, Repeat, RuleRef, Sequence, TokenSet,
)

__all__ = ["grammar_to_ebnf", "rule_to_ebnf", "expr_to_ebnf"]

# Binding strength, weakest first. An expression printed where a stronger one is expected
# gets parentheses.
_CHOICE, _SEQUENCE, _POSTFIX, _ATOM = range(4)

_NAMED_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def grammar_to_ebnf(grammar: Grammar) -> str:
    """All rules, one per line, in grammar order; a trailing newline ends the text."""
    lines: List[str] = []
    if grammar.root_rule_name != "root":
        lines.append(f"# root rule: {grammar.root_rule_name} "
                     f"(parse with root_rule_name={_python_string(grammar.root_rule_name)})")
    for rule in grammar.rules:
        lines.append(rule_to_ebnf(rule.name, rule.body, rule.lookahead, rule.max_tokens))
    return "\n".join(lines) + "\n"


def rule_to_ebnf(name: str, body: Expr, lookahead: Optional[Expr] = None,
                 max_tokens: Optional[int] = None) -> str:
    """``name ::= body`` plus `` (= lookahead)`` when there is one; a token budget is the
    attribute ``name[max_tokens=N] ::=``."""
    head = name if max_tokens is None else f"{name}[max_tokens={max_tokens}]"
    text = f"{head} ::= {expr_to_ebnf(body)}"
    if lookahead is not None:
        text += f" (= {expr_to_ebnf(lookahead)})"
    return text


def expr_to_ebnf(expr: Expr) -> str:
    """One expression, with the fewest parentheses that keep its structure."""
    return _print(expr, _CHOICE)


# ----------------------------------------------------------------------------- expressions


def _precedence(expr: Expr) -> int:
    if isinstance(expr, Choice):
        return _CHOICE
    if isinstance(expr, Sequence):
        return _SEQUENCE if expr.items else _ATOM     # an empty sequence prints as ""
    if isinstance(expr, Repeat):
        return _POSTFIX
    return _ATOM


def _print(expr: Expr, context: int) -> str:
    # An explicit work stack rather than recursion: the text is a left-to-right concatenation,
    # so pending pieces are pushed in reverse. Deeply nested expressions cannot overflow it.
    out: List[str] = []
    work: list = [(expr, context)]
    while work:
        item = work.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        expr, context = item
        pieces = _pieces(expr)
        if _precedence(expr) < context:
            pieces = ["(", *pieces, ")"]
        work.extend(reversed(pieces))
    return "".join(out)


def _pieces(expr: Expr) -> list:
    """The text of ``expr`` as strings and (subexpression, context) pairs still to print."""
    if isinstance(expr, Literal):
        return [_string_literal(expr.data.decode("utf-8"))]
    if isinstance(expr, CharClass):
        return [_char_class(expr)]
    if isinstance(expr, TokenSet):
        return [_token_set(expr)]
    if isinstance(expr, RuleRef):
        return [expr.name]
    if isinstance(expr, Sequence):
        return _joined(expr.items, " ", _POSTFIX) if expr.items else ['""']
    if isinstance(expr, Choice):
        return _joined(expr.alternatives, " | ", _SEQUENCE)
    if isinstance(expr, Repeat):
        return [(expr.expr, _ATOM), _quantifier(expr.min, expr.max)]
    raise TypeError(f"not a grammar expression: {expr!r}")


def _joined(exprs, separator: str, context: int) -> list:
    pieces: list = []
    for expr in exprs:
        if pieces:
            pieces.append(separator)
        pieces.append((expr, context))
    return pieces


def _quantifier(low: int, high: Optional[int]) -> str:
    if high is None:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    if low == high:
        return f"{{{low}}}"
    return f"{{{low},{high}}}"


# ------------------------------------------------------------------ strings, classes, token sets


def _string_literal(text: str) -> str:
    return '"' + _render(list(text), _string_char, closing='"') + '"'


def _string_char(char: str, following: str) -> str:
    if char in '"\\':
        return "\\" + char
    return _plain_or_escaped(char, following)


def _token_set(token_set: TokenSet) -> str:
    name = "ExcludeToken" if token_set.negated else "Token"
    return f"{name}({', '.join(map(str, token_set.ids))})"


def _char_class(char_class: CharClass) -> str:
    # A class is a list of units: single code points, and "-" between the ends of a range.
    units: List[Optional[str]] = []
    for low, high in char_class.ranges:
        units.append(chr(low))
        if high > low + 1:
            units.append(None)
        if high > low:
            units.append(chr(high))
    opening = "[^" if char_class.negated else "["

    def class_char(char: Optional[str], following: str, is_first: bool) -> str:
        if char is None:
            return "-"
        if char in "\\]-" or (char == "^" and is_first and not char_class.negated):
            return "\\" + char
        return _plain_or_escaped(char, following)

    return opening + _render(units, class_char, closing="]", first_aware=True) + "]"


def _render(units: list, render_unit: Callable, *, closing: str, first_aware: bool = False) -> str:
    """Render units right to left, so each knows the character that will follow it.

    That matters for ``\\x``, whose hex digits run on as long as hex digits follow.
    """
    pieces: List[str] = []
    following = closing
    for index in range(len(units) - 1, -1, -1):
        if first_aware:
            piece = render_unit(units[index], following, index == 0)
        else:
            piece = render_unit(units[index], following)
        pieces.append(piece)
        following = piece[0]
    return "".join(reversed(pieces))


def _plain_or_escaped(char: str, following: str) -> str:
    if char.isprintable():
        return char
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    code_point = ord(char)
    if code_point <= 0xFF and following not in _HEX_DIGITS:
        return f"\\x{code_point:02X}"
    if code_point <= 0xFFFF:
        return f"\\u{code_point:04X}"
    return f"\\U{code_point:08X}"


def _python_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
