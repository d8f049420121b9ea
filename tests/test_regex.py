"""Specification of the regex front-end (``gxg.grammar.regex``, ``Grammar.from_regex``).

Every case is a pattern (ECMAScript syntax, always a full match) with strings it must accept and
strings it must reject. Each expectation is checked three ways:

* against Python's ``re.fullmatch`` with ``re.ASCII | re.DOTALL`` — ASCII because ECMAScript's
  ``\\d`` and ``\\w`` are ASCII (Python's are Unicode), DOTALL because gxg's ``.`` (like
  XGrammar's ``from_regex``) matches ``\\n``. Where Python's syntax or meaning differs from
  ECMAScript's, the case carries an equivalent Python pattern and a comment says why;
* against gxg's grammar, with the reference recognizer ``gxg.testing.grammar_accepts``;
* against XGrammar's ``Grammar.from_regex``, for the cases where XGrammar means the same thing
  (``xgrammar=False`` marks the deliberate differences; see the module docstring of
  ``gxg/grammar/regex.py``).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gxg.grammar.ir import (
    EMPTY, CharClass, Choice, Grammar, GrammarError, Literal, Repeat, RuleRef, Sequence,
    iter_subexprs, normalize,
)
from gxg.grammar.regex import MAX_EXPRESSION_DEPTH, MAX_REPETITION, regex_to_grammar
from gxg.testing import Recognizer, grammar_accepts

PYTHON_FLAGS = re.ASCII | re.DOTALL

# ECMAScript's \s (white space + line terminators) spelled for Python: Python's own \s differs
# (its Unicode \s adds \x1c-\x1f and \x85 and lacks \ufeff; its ASCII \s lacks \xa0 and the rest).
PY_SPACE_SET = r"\t-\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
PY_SPACE = f"[{PY_SPACE_SET}]"
PY_NOT_SPACE = f"[^{PY_SPACE_SET}]"


@dataclass(frozen=True)
class Case:
    pattern: str
    accept: Tuple[str, ...]
    reject: Tuple[str, ...]
    python: Optional[str] = None     # the same language in Python's re syntax, where it differs
    xgrammar: bool = True            # XGrammar's from_regex defines the same language

    @property
    def python_pattern(self) -> str:
        return self.pattern if self.python is None else self.python

    def examples(self):
        return [(s, True) for s in self.accept] + [(s, False) for s in self.reject]


def C(pattern, accept, reject, python=None, xgrammar=True) -> Case:
    return Case(pattern, tuple(accept), tuple(reject), python, xgrammar)


CASES = [
    # -- literals (any Unicode, case-sensitive)
    C("abc", ["abc"], ["", "ab", "abcd", "abd", "ABC"]),
    C("", [""], ["a", " "]),
    C("héllo", ["héllo"], ["hello", "héll", "HÉLLO"]),
    C("日本語", ["日本語"], ["日本", "日本語語"]),
    C("😀+", ["😀", "😀😀😀"], ["", "😀a"]),
    C("a b", ["a b"], ["ab", "a  b"]),
    C("]", ["]"], ["", "]]"]),               # a lone ']' is a literal (Annex B)
    C("a}b", ["a}b"], ["ab", "a{b"]),        # a lone '}' is a literal (Annex B)
    C("-,:;!=<>@#%&~`'\"", ["-,:;!=<>@#%&~`'\""], ["-"]),
    # -- escapes
    C(r"\n", ["\n"], ["n", "\\n", ""]),
    C(r"\t\r\f\v", ["\t\r\f\v"], ["trfv", "\t\r\f"]),
    C(r"\0", ["\0"], ["0", ""]),
    C(r"a\0b", ["a\0b"], ["ab", "a0b"]),
    C("\\0\u0661", ["\0\u0661"], ["\0", "\u0661"]),   # only an ASCII digit makes \0N octal
    C(r"\x41\x7a", ["Az"], ["x41x7a", "AZ"]),
    C(r"\x00\xff", ["\x00\xff"], ["\x00"]),
    C(r"\u00e9t\u00E9", ["été"], ["ete", "u00e9"]),
    # \u{...} is ECMAScript's Unicode-mode escape (Python has \U0001F600 instead).
    C(r"\u{1F600}\u{41}", ["😀A"], ["u{1F600}", "😀"], python="\U0001F600A"),
    # A surrogate pair spelled as two \u escapes is one code point (Python's re would see two
    # lone surrogates). XGrammar emits the surrogates separately.
    C(r"\uD83D\uDE00", ["😀"], ["", "😀😀"], python="\U0001F600", xgrammar=False),
    # \cX is a control character; Python's re has no \c.
    C(r"\cA\cz\cJ", ["\x01\x1a\n"], ["cAczcJ"], python=r"\x01\x1a\n"),
    C(r"\.\*\+\?\(\)\[\]\{\}\|\^\$\\\/", [".*+?()[]{}|^$\\/"], ["a", ""]),
    C(r"a\.b", ["a.b"], ["axb", "ab"]),
    C(r"\-\,\:", ["-,:"], ["\\-\\,\\:"]),
    # An escaped letter without a meaning is the letter (Python's re rejects '\q').
    C(r"\q\y\Z", ["qyZ"], ["\\q\\y\\Z", ""], python="qyZ"),
    # -- '.' is any code point, \n and other line terminators included (XGrammar semantics)
    C(".", ["a", "\n", "\r", "é", "😀", "\u2028", " ", "\0"], ["", "ab"]),
    C("a.c", ["abc", "a\nc", "a.c"], ["ac", "abbc"]),
    C(".*", ["", "anything\n at all 😀"], []),
    C("a.{2}b", ["axyb", "a\n\nb"], ["axb", "axyzb"]),
    # -- \d \D \w \W (ASCII) and \s \S (ECMAScript white space)
    C(r"\d+", ["0", "0123456789"], ["", "a", "\u0661", "1a", "\uff11"]),
    C(r"\D", ["a", " ", "\u0661", "\n"], ["5", ""]),
    C(r"\w+", ["abc_XYZ09"], ["é", "a-b", ""]),
    C(r"\W", ["-", "é", " ", "\n"], ["a", "_", "0", "Z"]),
    C(r"\s", ["\t", "\n", "\v", "\f", "\r", " ", "\xa0", "\u1680", "\u2000", "\u2005",
              "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff"],
      ["a", "\x1c", "\x1f", "\x85", "\u200b", "\u180e", ""], python=PY_SPACE, xgrammar=False),
    C(r"\S+", ["abc", "é", "\x85"], ["a b", "\u3000", "\ufeff", "\u2028"],
      python=PY_NOT_SPACE + "+", xgrammar=False),
    C(r"a\s+b", ["a b", "a\t\nb", "a\u3000b"], ["ab", "a_b"],
      python=f"a{PY_SPACE}+b", xgrammar=False),
    # \s over ASCII only: the same set as XGrammar's on these strings.
    C(r"\s?x", ["x", " x", "\tx", "\nx"], ["ax", "  x"],
      python=f"{PY_SPACE}?x"),
    # -- classes
    C("[abc]", ["a", "b", "c"], ["d", "", "ab"]),
    C("[a-z]+", ["hello"], ["Hello", "", "hello!"]),
    C("[^a-z]", ["A", "0", "\n", "é", "😀"], ["a", "z", "", "AB"]),
    C("[a-zA-Z0-9_-]+", ["a-Z_09"], ["a b", "a.b"]),
    C("[-a]", ["-", "a"], ["b", "-a"]),
    C("[a-]", ["-", "a"], ["b"]),
    C("[a-c-e]", ["a", "b", "c", "-", "e"], ["d"]),
    C("[--/]", ["-", ".", "/"], ["0", ","]),
    C(r"[\d.]+", ["3.14", "..."], ["3,14"]),
    C(r"[^\d]", ["a", "\n"], ["5"]),
    C(r"[\D]", ["a"], ["5"]),
    C(r"[^\W]", ["a", "_", "5"], ["-", "é"]),
    C(r"[\w.-]+", ["a.b-c_d"], ["a b", "é"]),
    # \s inside a class is ECMAScript's set too.
    C(r"[\s,]+", [" ,\u3000,\ufeff"], ["a", "\x85"], python=f"[{PY_SPACE_SET},]+",
      xgrammar=False),
    C(r"[^\s]", ["a", "\x85"], [" ", "\u3000", "\xa0"], python=PY_NOT_SPACE, xgrammar=False),
    C(r"[\s\S]", ["a", "\n", "😀"], ["", "ab"], python=r"[\s\S]"),
    C(r"[\]\[\\\-^]", ["]", "[", "\\", "-", "^"], ["a", "\\]"]),
    C("[[]", ["["], ["]", "[["], python=r"[\[]"),   # Python warns about a possible nested set
    C(r"[\b]", ["\b"], ["b", "\\b"]),               # \b inside a class is backspace
    C(r"[\x41-\x43]", ["A", "B", "C"], ["D", "@"]),
    C(r"[\u00e0-\u00ff]+", ["àÿ"], ["a", "ā"]),
    C("[é-ë]", ["é", "ê", "ë"], ["e", "ì"]),
    C(r"[\u{1F600}-\u{1F64F}]", ["😀", "🙏"], ["🚀", "a"],
      python="[\U0001F600-\U0001F64F]"),
    # A class range between surrogate pairs is a range of code points.
    C(r"[\uD83D\uDE00-\uD83D\uDE4F]", ["😀", "🙏"], ["🚀"],
      python="[\U0001F600-\U0001F64F]", xgrammar=False),
    C(r"[\u0000-\uFFFF]", ["a", "\0", "\uffff", "é"], ["😀"]),
    # [^] is any code point (Python's re rejects an empty class).
    C("[^]", ["a", "\n", "😀"], ["", "ab"], python=r"[\s\S]"),
    # Annex B: a class escape as a range end makes '-' an ordinary member (Python's re errors).
    C(r"[\d-z]", ["5", "-", "z"], ["a", "y"], python=r"[\d\-z]"),
    C("[.]", ["."], ["a"]),
    C("[*+?{}()|$]+", ["*+?{}()|$"], ["a"]),
    # XGrammar copies the class body into EBNF, where '\^' first reads as negation.
    C(r"[\^a]", ["^", "a"], ["b"], xgrammar=False),
    C("[a^]", ["a", "^"], ["b"]),
    C(r"[\n\t]", ["\n", "\t"], ["n", "t"]),
    C(r"[^\n]*", ["abc", ""], ["a\nb"]),
    C(r"[\cA-\cC]", ["\x01", "\x03"], ["\x04", "A"], python=r"[\x01-\x03]"),
    # -- groups
    C("(ab)+", ["ab", "abab"], ["", "aba"]),
    C("(?:ab)+c", ["abc", "ababc"], ["c", "abac"]),
    # Named groups: Python 3.11 spells them (?P<name>...).
    C(r"(?<year>\d{4})-(?<month>\d{2})", ["2024-01"], ["24-01", "2024-1"],
      python=r"(?P<year>\d{4})-(?P<month>\d{2})"),
    C("((a))", ["a"], ["", "aa"]),
    C("()", [""], ["a"]),
    C("(?:)", [""], ["a"]),
    C("a()b", ["ab"], ["a b", "a()b"]),
    C("((a|b)(c|d))*", ["", "ac", "bdad"], ["a", "ab", "acb"]),
    C("(((((x)))))y", ["xy"], ["x", "y"]),
    # -- alternation, empty alternatives allowed
    C("a|b", ["a", "b"], ["", "ab"]),
    C("a|", ["a", ""], ["b", "aa"]),
    C("|a", ["", "a"], ["b"]),
    C("(|b)c", ["c", "bc"], ["b", "bbc"]),
    C("a||b", ["a", "", "b"], ["ab"]),
    C("cat|dog|bird", ["cat", "dog", "bird"], ["catdog", "ca", ""]),
    C("ab|cd", ["ab", "cd"], ["abcd", "ad"]),
    C("(a|ab)(c|bcd)", ["ac", "abcd", "abc", "abbcd"], ["ab", "abbc", "acd"]),
    # -- quantifiers
    C("a*", ["", "a", "aaa"], ["b", "ab"]),
    C("a+", ["a", "aaaa"], ["", "b"]),
    C("a?", ["", "a"], ["aa"]),
    C("a{3}", ["aaa"], ["aa", "aaaa"]),
    C("a{2,}", ["aa", "aaaaa"], ["a", ""]),
    C("a{2,4}", ["aa", "aaa", "aaaa"], ["a", "aaaaa"]),
    C("a{0}", [""], ["a"]),
    C("a{0,0}b", ["b"], ["ab"]),
    C("a{0,1}b", ["b", "ab"], ["aab"]),
    C("a{010}", ["a" * 10], ["a" * 9, "a" * 11]),
    C("(ab){2}", ["abab"], ["ab", "ababab"]),
    C("(?:a{2}){2,3}", ["aaaa", "aaaaaa"], ["aaaaa", "aa", "a" * 8]),
    C("x*y+z?", ["y", "xxyyz"], ["xz", "yzz"]),
    C("(a*)*", ["", "aaa"], ["b"]),
    C("(a*|b)+", ["", "ab", "bba"], ["c"]),
    C("(a|b)*abb", ["abb", "babb", "aababb"], ["ab", "abba"]),
    C("[0-9]{3}-[0-9]{4}", ["555-1212"], ["55-1212", "5551212"]),
    # lazy quantifiers: the same language
    C("a*?", ["", "aa"], ["b"]),
    C("a+?b", ["ab", "aab"], ["b"]),
    C("a??b", ["b", "ab"], ["aab"]),
    C("a{2}?", ["aa"], ["a", "aaa"]),
    C("a{1,3}?b", ["ab", "aaab"], ["b", "aaaab"]),
    C("a{2,}?", ["aa", "aaa"], ["a"]),
    # -- '{' that does not start a quantifier is a literal (ECMAScript Annex B); XGrammar errors
    C("{", ["{"], ["", "{{"], xgrammar=False),
    C("a{", ["a{"], ["a"], xgrammar=False),
    # Python's re reads a{,3} as a{0,3}; ECMAScript reads it as text.
    C("a{,3}", ["a{,3}"], ["", "aaa"], python=r"a\{,3\}", xgrammar=False),
    C("a{1,2", ["a{1,2"], ["a"], xgrammar=False),
    C("x{a}", ["x{a}"], ["x"], xgrammar=False),
    C("a{ 2}", ["a{ 2}"], ["aa"], xgrammar=False),
    C("{}", ["{}"], [""], xgrammar=False),
    C("{*", ["", "{{"], ["a", "*"], xgrammar=False),
    C(r"\{\d+\}", ["{12}"], ["12"]),
    # -- anchors where they are no-ops in a full match
    C("^abc$", ["abc"], ["abcd", "xabc", ""]),
    C("^", [""], ["a"]),
    C("$", [""], ["a"]),
    C("^$", [""], ["a"]),
    C("^a|^b", ["a", "b"], ["ab", ""]),
    C("a$|b$", ["a", "b"], ["ab", ""]),
    C("^(a|b)$", ["a", "b"], ["ab"]),
    C("(^a|b)c", ["ac", "bc"], ["c", "abc"]),
    C("(a|b$)?$", ["", "a", "b"], ["ab"]),
    C("^^a$$", ["a"], ["", "aa"]),
    C("(^a)?b", ["ab", "b"], ["a"]),
    C("(?:^|x)y", ["y", "xy"], ["xxy"]),
    C("a(?:b|$)", ["ab", "a"], ["ac"]),
    C("^[a-z]+$|^[0-9]+$", ["abc", "123"], ["abc123", ""]),
    # -- patterns as JSON Schemas use them
    C(r"^\d{3}-\d{2}-\d{4}$", ["123-45-6789"], ["123456789", "12-345-6789"]),
    C(r"^(\([0-9]{3}\))?[0-9]{3}-[0-9]{4}$", ["555-1212", "(888)555-1212"],
      ["(888)555-1212 ext. 532", "(800)FLOWERS"]),
    C(r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$",
      ["john.doe@example.com", "a+b@x.io"], ["john@", "@x.com", "a@b.c"]),
    C(r"^#[0-9a-fA-F]{6}$", ["#1a2B3c"], ["#1a2b3", "1a2b3c", "#1a2b3g"]),
    C(r"^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$", ["0", "-12.5e+3", "1E9"],
      ["01", "1.", ".5", "--1"]),
    C(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$",
      ["2024-01-31T12:00:00Z", "2024-01-31T12:00:00.123+05:30"],
      ["2024-01-31 12:00:00Z", "2024-01-31T12:00:00"]),
    C(r"^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$",
      ["192.168.0.1", "255.255.255.255", "0.0.0.0"], ["256.1.1.1", "1.2.3", "01.2.3.4"]),
    C(r"^[a-z0-9]+(?:-[a-z0-9]+)*$", ["my-slug-2"], ["-slug", "slug-", "a--b"]),
    C(r"^https?://[^\s/$.?#].[^\s]*$", ["https://example.com/a?b", "http://x.y"],
      ["ftp://x.y", "http:// x", "https://"],
      python=f"^https?://[^{PY_SPACE_SET}/$.?#].[^{PY_SPACE_SET}]*$", xgrammar=False),
    C(r'^"([^"\\]|\\.)*"$', ['""', '"a\\"b"'], ['"', '"a"b"', '"\\"']),
    C(r"^[\u4e00-\u9fff]+$", ["中文"], ["中a", ""]),
    C(r"^(?:[01]\d|2[0-3]):[0-5]\d$", ["00:00", "23:59"], ["24:00", "12:60", "1:00"]),
    C(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$", ["1.2.3", "v10.0.1-rc.1"], ["1.2", "v1.2.3-"]),
    C(r"^[A-Fa-f0-9]{8}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{12}$",
      ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567-e89b-12d3-a456-42661417400"]),
    C("(true|false|null)", ["true", "false", "null"], ["True", "nul", "truefalse"]),
]


def case_id(case: Case) -> str:
    return ascii(case.pattern)[1:-1][:40] or "<empty>"


def test_there_are_at_least_100_cases():
    assert len(CASES) >= 100
    assert len({case.pattern for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_regex_language(case: Case):
    python_pattern = re.compile(case.python_pattern, PYTHON_FLAGS)
    grammar = Grammar.from_regex(case.pattern)
    recognizer = Recognizer(grammar)
    for text, expected in case.examples():
        # The expectation itself is checked against Python's re, so a wrong case shows up.
        assert bool(python_pattern.fullmatch(text)) == expected, (
            f"case expectation disagrees with Python re for {text!r}")
        assert recognizer.accepts(text) == expected, (
            f"{case.pattern!r} on {text!r}: expected {expected}; grammar:\n{grammar}")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_plain_patterns_give_one_root_rule(case: Case):
    grammar = regex_to_grammar(case.pattern)
    assert grammar.rule_names == ("root",)
    assert grammar.root_rule_name == "root"


# ----------------------------------------------------------------------------- XGrammar

XGRAMMAR_CASES = [case for case in CASES if case.xgrammar]


@pytest.mark.parametrize("case", XGRAMMAR_CASES, ids=case_id)
def test_same_language_as_xgrammar(case: Case):
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string
    xgrammar_grammar = xgr.Grammar.from_regex(case.pattern)
    gxg_recognizer = Recognizer(regex_to_grammar(case.pattern))
    for text, expected in case.examples():
        assert _is_grammar_accept_string(xgrammar_grammar, text) == expected, text
        assert gxg_recognizer.accepts(text) == expected, text


@pytest.mark.parametrize("pattern, text, gxg_accepts, xgrammar_accepts", [
    # ECMAScript's \s includes U+3000, U+2028, U+FEFF...; XGrammar's does not.
    (r"\s", "\u3000", True, False),
    (r"\s", "\u2028", True, False),
    (r"\S", "\ufeff", False, True),
    (r"[\s]", "\u1680", True, False),
])
def test_documented_differences_from_xgrammar(pattern, text, gxg_accepts, xgrammar_accepts):
    assert grammar_accepts(regex_to_grammar(pattern), text) == gxg_accepts
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string
    assert _is_grammar_accept_string(xgr.Grammar.from_regex(pattern), text) == xgrammar_accepts


@pytest.mark.parametrize("pattern", ["{", "a{", "a{,3}", "x{a}"])
def test_xgrammar_rejects_brace_literals_that_gxg_accepts(pattern):
    regex_to_grammar(pattern)
    xgr = pytest.importorskip("xgrammar")
    with pytest.raises(RuntimeError):
        xgr.Grammar.from_regex(pattern)


# ----------------------------------------------------------------------------- the IR produced

R = Literal.of
DIGIT = CharClass(((0x30, 0x39),))


@pytest.mark.parametrize("pattern, body", [
    ("abc", R("abc")),
    ("", EMPTY),
    ("a|", Choice((R("a"), EMPTY))),
    (r"\d{2,3}", Repeat(DIGIT, 2, 3)),
    (r"\D", CharClass(((0x30, 0x39),), negated=True)),
    (".", CharClass(((0, 0x10FFFF),))),
    ("[^]", CharClass((), negated=True)),
    ("^a+$|^b$", Choice((Repeat(R("a"), 1, None), R("b")))),
    ("a*?", Repeat(R("a"), 0, None)),
    ("a{2}", Repeat(R("a"), 2, 2)),
    ("a{1}", R("a")),
    ("(?<n>ab)(c)(?:d)", R("abcd")),
    ("a{0}b", R("b")),
    ("(a|b)|c", Choice((R("a"), R("b"), R("c")))),
    ("x(a|b)?", Sequence((R("x"), Repeat(Choice((R("a"), R("b"))), 0, 1)))),
])
def test_ir_shape(pattern, body):
    assert regex_to_grammar(pattern).root.body == body


def test_from_regex_is_regex_to_grammar():
    for case in CASES[:20]:
        assert Grammar.from_regex(case.pattern) == regex_to_grammar(case.pattern)


def test_non_string_pattern_is_a_type_error():
    with pytest.raises(TypeError):
        regex_to_grammar(b"abc")


# ----------------------------------------------------------------------------- errors

ERRORS = [
    # (pattern, 1-based column, fragment of the message)
    (r"\1", 1, "backreference"),
    (r"(a)\1", 4, "backreference"),
    (r"a\9", 2, "backreference"),
    (r"(?<n>a)\k<n>", 8, "backreference"),
    (r"(?=a)", 1, "lookahead"),
    (r"x(?!a)", 2, "lookahead"),
    (r"(?<=a)b", 1, "lookbehind"),
    (r"(?<!a)b", 1, "lookbehind"),
    (r"(?i)a", 1, "flags"),
    (r"(?i:a)", 1, "flags"),
    (r"(?P<n>x)", 1, "(?P"),
    (r"\p{L}", 1, "Unicode property"),
    (r"[\P{L}]", 2, "Unicode property"),
    (r"\b", 1, "word boundary"),
    (r"a\B", 2, "word boundary"),
    ("(a", 1, "unterminated group"),
    ("((a)", 1, "unterminated group"),
    ("a)", 2, "unmatched ')'"),
    ("*a", 1, "nothing to repeat"),
    ("a|+", 3, "nothing to repeat"),
    ("(?)", 1, "unsupported group"),
    ("(*)", 2, "nothing to repeat"),
    ("{2}", 1, "nothing to repeat"),
    ("^*", 2, "anchor cannot be quantified"),
    ("a**", 3, "another quantifier"),
    ("a{2}{3}", 5, "another quantifier"),
    ("a??+", 4, "another quantifier"),
    ("[z-a]", 2, "out of order"),
    ("x[ab-A]", 4, "out of order"),
    ("[abc", 1, "unterminated character class"),
    ("a[^", 2, "unterminated character class"),
    ("a{3,2}", 2, "upper bound below its lower bound"),
    ("\\", 1, "lone backslash"),
    ("ab\\", 3, "lone backslash"),
    (f"a{{{MAX_REPETITION + 1}}}", 2, str(MAX_REPETITION)),
    ("a{1,99999999999999999999999}", 2, "larger than the supported maximum"),
    ("a^b", 2, "anchor"),
    ("a$b", 2, "'$' is followed"),
    ("(a$)b", 3, "'$' is followed"),
    ("a|b(^c)", 5, "anchor"),
    ("(^a)*", 2, "may repeat"),
    ("(a$)+", 3, "may repeat"),
    (r"\01", 1, "octal"),
    (r"\x4", 1, "two hex digits"),
    (r"\xZZ", 1, "two hex digits"),
    (r"\u12", 1, "four hex digits"),
    (r"\u{}", 1, "hex digits"),
    (r"\u{110000}", 1, "above U+10FFFF"),
    (r"\c1", 1, "ASCII letter"),
    (r"\e", 1, "ambiguous"),
    (r"\a", 1, "ambiguous"),
    (r"\uD800", 1, "surrogate"),
    (r"ab[\uDC00]", 4, "surrogate"),
    ("[]", 1, "empty character class"),
    (r"[^\s\S]", 1, "matches no character"),
    ("(?<1a>x)", 1, "group name"),
    ("(?<a", 1, "group name"),
]


@pytest.mark.parametrize("pattern, column, fragment", ERRORS, ids=[ascii(e[0]) for e in ERRORS])
def test_error(pattern, column, fragment):
    with pytest.raises(GrammarError) as info:
        regex_to_grammar(pattern)
    error = info.value
    assert (error.line, error.column) == (1, column), error
    assert fragment in error.message
    assert isinstance(error, RuntimeError)   # as XGrammar's errors are


def test_there_are_at_least_25_error_cases():
    assert len(ERRORS) >= 25


# ----------------------------------------------------------------------------- deep and long


def expression_depth(expr) -> int:
    depth, stack = 0, [(expr, 1)]
    while stack:
        node, level = stack.pop()
        depth = max(depth, level)
        if isinstance(node, Sequence):
            stack.extend((item, level + 1) for item in node.items)
        elif isinstance(node, Choice):
            stack.extend((item, level + 1) for item in node.alternatives)
        elif isinstance(node, Repeat):
            stack.append((node.expr, level + 1))
    return depth


NEST = 5000


@pytest.mark.parametrize("pattern, accept, reject", [
    ("(" * NEST + "a" + ")" * NEST, ["a"], ["", "aa"]),
    ("(?:" * NEST + "a" + ")?" * NEST, ["", "a"], ["aa"]),
    # (Only short inputs: the reference recognizer is slow on long ones over deep grammars.)
    ("(a" * NEST + ")?" * NEST, ["", "a", "aaa"], ["b", "ab"]),
    ("(a|" * NEST + "b" + ")" * NEST, ["a", "b"], ["ab", ""]),
    ("(b(a" * NEST + ")*c)*" * NEST, ["", "bc", "babcc"], ["b", "ba"]),
    ("[ab]" + "(" * NEST + "x" + ")" * NEST, ["ax"], ["x"]),
])
def test_deep_nesting_does_not_recurse(pattern, accept, reject):
    old_limit = sys.getrecursionlimit()
    grammar = regex_to_grammar(pattern)
    assert sys.getrecursionlimit() == old_limit
    for rule in grammar.rules:
        assert expression_depth(rule.body) <= MAX_EXPRESSION_DEPTH
    recognizer = Recognizer(grammar)
    for text in accept:
        assert recognizer.accepts(text), text
    for text in reject:
        assert not recognizer.accepts(text), text


def test_unterminated_deep_nesting_is_an_error():
    with pytest.raises(GrammarError) as info:
        regex_to_grammar("(" * NEST + "a" + ")" * (NEST - 1))
    assert info.value.column == 1


def test_long_pattern():
    text = "ab😀" * 10000
    grammar = regex_to_grammar(text)
    assert grammar.root.body == R(text)
    many_groups = "(?:x)" * 10000
    assert regex_to_grammar(many_groups).root.body == R("x" * 10000)
    many_braces = "{" * 10000
    assert regex_to_grammar(many_braces).root.body == R(many_braces)


# ----------------------------------------------------------------------------- properties

# Random small regexes over the alphabet "abc" as trees, so that a matching string can be
# sampled from the same tree. Python's re has the same meaning for every construct used here.
ALPHABET = "abcd"
CLASSES = {"[ab]": "ab", "[^a]": "bcd", "[a-c]": "abc", ".": "abcd", "[b]": "b", "[c-d]": "cd"}


def leaf():
    return st.one_of(
        st.sampled_from("abc").map(lambda ch: ("lit", ch)),
        st.sampled_from(sorted(CLASSES)).map(lambda text: ("cls", text)),
    )


QUANTIFIER_BOUNDS = [(0, None), (1, None), (0, 1), (0, 0), (1, 1), (2, 2), (0, 2), (1, 3),
                     (2, None), (3, None)]


def quantifier():
    return st.tuples(st.sampled_from(QUANTIFIER_BOUNDS), st.booleans())


def extend(children):
    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda xs: ("seq", tuple(xs))),
        st.lists(st.one_of(children, st.just(("empty",))), min_size=2, max_size=3)
        .map(lambda xs: ("alt", tuple(xs))),
        st.tuples(children, quantifier()).map(lambda t: ("rep", t[0], t[1][0], t[1][1])),
        children.map(lambda x: ("group", x)),
    )


REGEX_TREES = st.recursive(leaf(), extend, max_leaves=8)


def quantifier_text(low, high) -> str:
    if (low, high) == (0, None):
        return "*"
    if (low, high) == (1, None):
        return "+"
    if (low, high) == (0, 1):
        return "?"
    if high is None:
        return f"{{{low},}}"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def render(tree) -> str:
    kind = tree[0]
    if kind in ("lit", "cls"):
        return tree[1]
    if kind == "empty":
        return ""
    if kind == "seq":
        return "".join(render_atom_or_group(child, in_sequence=True) for child in tree[1])
    if kind == "alt":
        return "(?:" + "|".join(render(child) for child in tree[1]) + ")"
    if kind == "group":
        return "(" + render(tree[1]) + ")"
    _, child, (low, high), lazy = tree
    return render_atom_or_group(child) + quantifier_text(low, high) + ("?" if lazy else "")


def render_atom_or_group(tree, in_sequence=False) -> str:
    if tree[0] in ("lit", "cls", "group", "alt") or (in_sequence and tree[0] != "empty"):
        return render(tree)
    return "(?:" + render(tree) + ")"


def sample(tree, draw) -> str:
    kind = tree[0]
    if kind == "lit":
        return tree[1]
    if kind == "cls":
        return draw(st.sampled_from(CLASSES[tree[1]]))
    if kind == "empty":
        return ""
    if kind == "seq":
        return "".join(sample(child, draw) for child in tree[1])
    if kind == "alt":
        return sample(draw(st.sampled_from(tree[1])), draw)
    if kind == "group":
        return sample(tree[1], draw)
    _, child, (low, high), _ = tree
    count = draw(st.integers(low, low + 2 if high is None else high))
    return "".join(sample(child, draw) for _ in range(count))


PROPERTY_SETTINGS = settings(max_examples=250, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


def near_misses(text: str, draw) -> list:
    """Strings one edit away from ``text``: where a wrong bound or a lost alternative shows."""
    index = draw(st.integers(0, len(text)))
    char = draw(st.sampled_from(ALPHABET))
    out = [text[:index] + char + text[index:]]
    if text:
        index = min(index, len(text) - 1)
        out += [text[:index] + text[index + 1:],            # delete one character
                text[:index + 1] + text[index:],            # duplicate one character
                text[:index] + char + text[index + 1:]]     # replace one character
    return out


@PROPERTY_SETTINGS
@given(tree=REGEX_TREES, texts=st.lists(st.text(ALPHABET, max_size=6), max_size=3),
       data=st.data())
def test_random_regexes_agree_with_python_re(tree, texts, data):
    pattern = render(tree)
    python_pattern = re.compile(pattern, PYTHON_FLAGS)
    recognizer = Recognizer(regex_to_grammar(pattern))
    matching = sample(tree, data.draw)
    assert python_pattern.fullmatch(matching), (pattern, matching)
    for text in texts + [matching] + near_misses(matching, data.draw):
        assert recognizer.accepts(text) == bool(python_pattern.fullmatch(text)), (pattern, text)


@PROPERTY_SETTINGS
@given(tree=REGEX_TREES)
def test_output_is_in_the_ir_normal_form(tree):
    # Rule() re-normalises its body; the regex front-end must already produce that form, so
    # that the recursive IR normaliser has nothing left to do (and cannot go quadratic).
    from gxg.grammar.regex import _normal_form, _Parser
    raw = _Parser(render(tree)).parse()
    assert _normal_form(raw) == normalize(raw)


def test_helper_rules_only_for_deep_patterns():
    grammar = regex_to_grammar("(?:a" * 200 + ")*" * 200)
    assert len(grammar.rules) > 1
    assert all(name == "root" or name.startswith("root_") for name in grammar.rule_names)
    refs = [node for rule in grammar.rules for node in iter_subexprs(rule.body)
            if isinstance(node, RuleRef)]
    assert len(refs) == len(grammar.rules) - 1


@pytest.mark.parametrize("pattern", [case.pattern for case in CASES[::7]]
                         + ["(?:a" * 100 + ")*" * 100])
def test_printed_grammar_parses_back_to_the_same_grammar(pattern):
    grammar = regex_to_grammar(pattern)
    assert Grammar.from_ebnf(str(grammar)) == grammar


# ----------------------------------------------------------------------------- search mode
# JSON Schema's 'pattern' (ECMAScript RegExp.test): a string matches when it CONTAINS a match;
# '.' excludes the line terminators. Expected values are Python's re.search on patterns where
# Python and ECMAScript agree.

SEARCH_TEXTS = ["", "a", "b", "ab", "ba", "xaby", "http", "xhttps://", "https://x", "a\nb", "aab"]


@pytest.mark.parametrize("pattern", [
    "a", "^a", "a$", "^a$", "ab|^b", "^(http)|(https)://", "^$|^a+$", "a.b", "(a|b)+$", "^[ab]{2}",
])
def test_search_mode_matches_anywhere_like_re_search(pattern):
    grammar = regex_to_grammar(pattern, search=True, dot_all=False)
    for text in SEARCH_TEXTS:
        assert grammar_accepts(grammar, text) is (re.search(pattern, text) is not None), (pattern, text)


@pytest.mark.parametrize("text, accepted", [("a\nb", False), ("a\rb", False), ("a\u2028b", False),
                                            ("a\u2029b", False), ("axb", True)])
def test_dot_without_dot_all_excludes_line_terminators(text, accepted):
    assert grammar_accepts(regex_to_grammar("^a.b$", dot_all=False), text) is accepted
    assert grammar_accepts(regex_to_grammar("^a.b$"), text)  # default: XGrammar's any code point


@pytest.mark.parametrize("pattern, column", [("(^a|b)c", 2), ("(a$)b", 3), ("x(^a)", 3)])
def test_search_mode_refuses_anchors_inside_groups(pattern, column):
    with pytest.raises(GrammarError) as info:
        regex_to_grammar(pattern, search=True)
    assert info.value.column == column and "anchor" in str(info.value)
