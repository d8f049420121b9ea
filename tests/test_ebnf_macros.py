"""The EBNF macros Regex(...), Substring(...) and TagDispatch(...) (gxg/grammar/macros.py).

Specification tables (strings each grammar must accept / reject) are checked through gxg's whole
pipeline on the CPU (EBNF -> IR -> passes -> automaton -> matcher), and the same tables against
XGrammar 0.2.8 when it is installed. A property test compares TagDispatch grammars with
overlapping tags, excludes and stop-like strings on random strings against an executable
specification written on strings (no automaton) and against XGrammar; a mask test compares
gxg's token masks with XGrammar's along random walks.
"""
from __future__ import annotations

import functools
import itertools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gxg.grammar.ebnf import parse_ebnf
from gxg.grammar.ir import GrammarError
from gxg.matcher import GrammarMatcher

import xgrammar_oracle
from xgrammar_oracle import compiled_pair, mask_pair, needs_xgrammar, xgrammar

gxg_accepts = functools.partial(xgrammar_oracle.gxg_accepts, "ebnf")
xgr_accepts = functools.partial(xgrammar_oracle.xgr_accepts, "ebnf")


# ----------------------------------------------------------------------------- specification

# (grammar, accepted strings, rejected strings)
REGEX = [
    ('root ::= Regex("[a-z]+x")', ["ax", "abcx", "xx"], ["", "x", "aX", "ax "]),
    ('root ::= "<" Regex("[0-9]{2,3}") ">"', ["<12>", "<123>"], ["<1>", "<1234>", "12"]),
    ('root ::= Regex("a|b")*', ["", "a", "abba"], ["c", "ab c"]),
    ('root ::= Regex("")', [""], ["a"]),
    ('root ::= Regex("a|")', ["", "a"], ["aa"]),
    ('root ::= Regex("\\\\d+(\\\\.\\\\d+)?")', ["1", "12.5"], ["1.", ".5", "a"]),
    ('root ::= Regex("^ab$")', ["ab"], ["", "a"]),
    ('root ::= Regex("(?:é|€)+")', ["é", "€é€"], ["e", ""]),
    # '.' is any code point without flags; with flags but no 's' it is anything but '\n'
    ('root ::= Regex(".")', ["a", "\n", "\r", "é"], ["", "ab"]),
    ('root ::= Regex(".", flags="")', ["a", "\r", "é", "\u2028"], ["\n", ""]),
    ('root ::= Regex(".", flags="u")', ["a", "\r"], ["\n"]),
    ('root ::= Regex(".", flags="s")', ["a", "\n"], ["ab"]),
    ('root ::= Regex("[.]", flags="")', ["."], ["a", "\n"]),
    ('root ::= Regex("\\\\.", flags="")', ["."], ["a", "\n"]),
    ('root ::= Regex("[^a]", flags="")', ["\n", "b"], ["a"]),
    # json_string removes U+0000-U+001F, '"' and '\\' from what the pattern matches
    ('root ::= Regex(".*", json_string=true)', ["", "ab", "\x7f", "é"],
     ["\n", "\x01", '"', "\\", 'a"']),
    ('root ::= Regex("a\\"|b", json_string=true)', ["b"], ['a"', "a"]),
    ('root ::= Regex("[^a]+", json_string=false)', ["\n", '"'], ["a"]),
]

SUBSTRING = [
    ('root ::= Substring("abc")', ["", "abc"], ["a", "b", "ab", "bc", "abcabc"]),
    ('root ::= Substring("abc", "de", "fg")',
     ["", "abc", "de", "fg", "abcde", "defg", "abcdefg"],
     ["ab", "cde", "abcfg", "deabc", "fgabc", "abcdefgabc"]),
    ('root ::= Substring("a", "", "b", "a", "b")', ["", "a", "b", "ab", "ba", "aba", "bab", "abab"],
     ["aa", "abba", "bb", "ababa"]),
    ("root ::= Substring()", [""], ["a"]),
    ('root ::= Substring("")', [""], ["a"]),
    ('root ::= Substring("你好", "世界")', ["", "你好", "世界", "你好世界"],
     ["你", "好世界", "世界你好"]),
    ('root ::= "x" Substring("ab", "cd") "y"', ["xy", "xaby", "xcdy", "xabcdy"],
     ["xbcy", "xcdaby"]),
    ('root ::= Substring("ab") | "z"', ["", "ab", "z"], ["az"]),
    ('root ::= r "z"\nr ::= Substring("ab")', ["z", "abz"], ["ab", "bz"]),
    ('root ::= Substring("ab", "abc", "ab")', ["ab", "abc", "ababc", "abcab", "ababcab"],
     ["abab", "abcabc", "a"]),
]

CALL = 'call ::= "{" [a-z]* "}"\n'
TAG_DISPATCH = [
    # free text until a tag; the tag's rule must follow; the macro may end in free text
    ('root ::= TagDispatch(("tag1", r1), ("tag2", r2))\nr1 ::= "abcd"\nr2 ::= "efg"',
     ["", "x", "ta", "tag", "tag1abcd", "tag1abcdtag2efg", "tag1abcdqqqqtag2efg", "xxtag1abcdyy",
      "tag1abcdtag"],
     ["tag1", "tag1abc", "tag1abce", "tag1abcdtag1", "tag2ef"]),
    # loop_after_dispatch=false: the macro ends right after the first dispatched rule
    ('root ::= TagDispatch(("tag1", r1), loop_after_dispatch=false)\nr1 ::= "abcd"',
     ["", "tag", "xtag1abcd", "tag1abcd"], ["tag1abcdx", "tag1abcdtag1abcd", "tag1"]),
    # what follows the macro; free text may contain it (the macro can end anywhere)
    ('root ::= TagDispatch(("<tool_call>", call)) "END"\n' + CALL,
     ["END", "hi END", "xENDEND", "<tool_call>{ab}END", "a<tool_call>{}b<tool_call>{c}END"],
     ["", "EN", "<tool_call>END", "<tool_call>{ab}", "ENDx"]),
    ('root ::= TagDispatch(("<tool_call>", call), loop_after_dispatch=false) "END"\n' + CALL,
     ["END", "<tool_call>{ab}END"], ["<tool_call>{ab}xEND", "<tool_call>{}<tool_call>{}END"]),
    # excludes: free text never contains one; rules and tags may
    ('root ::= TagDispatch(("tag1", r1), excludes=("zz",))\nr1 ::= "abzzcd"',
     ["", "z", "zaz", "tag1abzzcd", "ztag1abzzcdz"],
     ["zz", "azzb", "tag1abzzcdzz", "zztag1abzzcd"]),
    ('root ::= TagDispatch(("tag1", r1), excludes=("1a",))\nr1 ::= "abcd"',
     ["tag1abcd", "1", "a1"], ["1a", "tag1abcd1a"]),
    # a stop string: exclude it from the free text and write it after the macro
    ('root ::= TagDispatch(("<t>", call), excludes=("</s>",)) "</s>"\n' + CALL,
     ["</s>", "hi</s>", "<t>{a}</s>", "<t>{a}x<t>{}</s>"], ["</s></s>", "a</s>b</s>", "hi"]),
    # a tag whose text contains an exclude can never be dispatched
    ('root ::= TagDispatch(("ac", r), excludes=("c",))\nr ::= "X"', ["", "a", "b"],
     ["ac", "acX", "c"]),
    # overlapping tags: a tag triggers only when the automaton's state is its end
    ('root ::= TagDispatch(("a", ra), ("ab", rb))\nra ::= "X"\nrb ::= "Y"',
     ["aX", "abY", "xaXabY", "b"], ["a", "ab", "aY", "abX", "ac"]),
    ('root ::= TagDispatch(("b", rb), ("abc", rc))\nrb ::= "X"\nrc ::= "Y"',
     ["ab", "abx", "abX", "bX", "abcY", "abbX"], ["b", "bY", "abc", "abcX"]),
    ('root ::= TagDispatch(("bcd", r1), ("abce", r2))\nr1 ::= "X"\nr2 ::= "Y"',
     ["abcdX", "abceY", "abc"], ["abcd", "abcdY"]),
    # the same tag twice: either rule
    ('root ::= TagDispatch(("t", r1), ("t", r2))\nr1 ::= "X"\nr2 ::= "Y"', ["tX", "tY", "tXtY"],
     ["t", "tZ"]),
    # after a dispatch the automaton starts afresh (a tag may not span rule and free text)
    ('root ::= TagDispatch(("ab", r))\nr ::= "xa"', ["abxa", "abxab", "abxabx", "abxabxa", "b"],
     ["ab", "abx", "abxaab"]),
    # no tags: free text without the excludes
    ('root ::= TagDispatch(excludes=("ab", "c"))', ["", "a", "ba", "bbb"], ["ab", "c", "xcx"]),
    ("root ::= TagDispatch()", ["", "anything at all", "é€\n"], []),
    # the rule named by a tag may be the root itself, and may be defined after the macro
    ('root ::= "[" TagDispatch(("(", root), ("<", x), loop_after_dispatch=false) "]"\n'
     'x ::= ">"', ["[]", "[a]", "[a<>]", "[([]]", "[a([b<>]]"], ["[(]", "[<]", "[<>x]"]),
    # multi-byte tags and excludes
    ('root ::= TagDispatch(("«", r), excludes=("€€",))\nr ::= "»"',
     ["", "«»", "€a€", "x«»€"], ["«", "€€", "«»€€"]),
]


def _params(table, prefix):
    out = []
    for k, (ebnf, accepted, rejected) in enumerate(table):
        for text in accepted:
            out.append(pytest.param(ebnf, text, True, id=f"{prefix}{k}-accepts-{text!r}"))
        for text in rejected:
            out.append(pytest.param(ebnf, text, False, id=f"{prefix}{k}-rejects-{text!r}"))
    return out


SPEC = _params(REGEX, "regex") + _params(SUBSTRING, "substring") + \
    _params(TAG_DISPATCH, "tag_dispatch")

# Rows where XGrammar 0.2.8 decides differently on purpose (see gxg/grammar/macros.py): none of
# the strings above. (XGrammar's free text also takes bytes that are not UTF-8; a str cannot
# hold those.)
XGRAMMAR_DIFFERS = set()


@pytest.mark.parametrize("ebnf, text, accepted", SPEC)
def test_specification(ebnf, text, accepted):
    assert gxg_accepts(ebnf, text) is accepted


@needs_xgrammar
@pytest.mark.parametrize("ebnf, text, accepted", SPEC)
def test_xgrammar_agrees_with_the_specification(ebnf, text, accepted):
    assert xgr_accepts(ebnf, text) is (accepted ^ ((ebnf, text) in XGRAMMAR_DIFFERS))


# ----------------------------------------------------------------------------- the IR


def test_regex_is_inlined():
    assert parse_ebnf('root ::= "x" Regex("[0-9]+") "y"') == parse_ebnf('root ::= "x" [0-9]+ "y"')
    assert parse_ebnf('root ::= Regex("a")*') == parse_ebnf('root ::= "a"*')


def test_substring_is_a_small_expression():
    assert str(parse_ebnf('root ::= Substring("abc", "de", "fg")')) == \
        'root ::= "abc" ("de" "fg"?)? | "de" "fg"? | "fg" | ""\n'


def test_tag_dispatch_rules():
    grammar = parse_ebnf('root ::= TagDispatch(("<tool_call>", call))\ncall ::= "{}"')
    assert grammar.rule_names == ("root", "call", "root_tag_dispatch_1", "root_tag_dispatch_2")
    text = str(grammar)
    assert 'root_tag_dispatch_1 ::= [^<]* ("<" root_tag_dispatch_2)?' in text
    assert '">" call root_tag_dispatch_1' in text


def test_helper_names_avoid_every_name_in_the_text():
    grammar = parse_ebnf('root ::= Substring("a", "b", "a", "b", "b") root_substring_1\n'
                         'root_substring_1 ::= "q"\n')
    assert grammar.rule_names == ("root", "root_substring_1", "root_substring_1_2")
    assert grammar.rule("root_substring_1").body == parse_ebnf('root ::= "q"').root.body


@pytest.mark.parametrize("ebnf", [row[0] for row in REGEX + SUBSTRING + TAG_DISPATCH])
def test_printed_macro_grammars_parse_back(ebnf):
    grammar = parse_ebnf(ebnf)
    assert parse_ebnf(str(grammar)) == grammar


def test_deep_regex_goes_to_helper_rules():
    grammar = parse_ebnf('root ::= "<" Regex("' + "(a" * 150 + ")?" * 150 + '") ">"')
    assert len(grammar.rules) > 1
    assert gxg_accepts(str(grammar), "<>") and gxg_accepts(str(grammar), "<" + "a" * 150 + ">")
    assert not gxg_accepts(str(grammar), "<" + "a" * 151 + ">")


def test_qwen_tool_calling_compiles_small():
    ebnf = ('root ::= TagDispatch(("<tool_call>", call), ("<think>", think), '
            '("<|python_tag|>", py), excludes=("<|im_end|>", "</tool_call>"))\n'
            'call ::= "{" [^{}]* "}</tool_call>"\nthink ::= [^<]* "</think>"\npy ::= [^\\n]* "\\n"')
    grammar = parse_ebnf(ebnf)
    assert len(grammar.rules) <= 10
    compiled = xgrammar_oracle.gxg_compiled("ebnf", ebnf)
    assert compiled.automaton.num_nodes < 300
    assert gxg_accepts(ebnf, "hi <think>hmm</think> <tool_call>{x}</tool_call> bye")
    assert not gxg_accepts(ebnf, "hi <|im_end|>")


# ----------------------------------------------------------------------------- errors

ERRORS = [
    # Regex
    ('root ::= Regex()', 1, 15, "Regex() takes exactly one pattern string"),
    ('root ::= Regex("a", "b")', 1, 21, "Regex() takes exactly one pattern string"),
    ('root ::= Regex(1)', 1, 16, "pattern of Regex() must be a string, not an integer"),
    ('root ::= Regex(x)', 1, 16, "must be a string, not a rule name"),
    ('root ::= Regex("ab(")', 1, 19, "invalid regular expression in Regex(): unterminated group"),
    ('root ::= Regex("\\\\d(")', 1, 16, "invalid regular expression"),       # escapes: the string
    ('root ::= Regex("a{2,1}")', 1, 18, "invalid regular expression"),
    ('root ::= Regex("a", flags="i")', 1, 27, "flag 'i' (case-insensitive) is not supported"),
    ('root ::= Regex("a", flags="x")', 1, 27, "flag 'x' is not supported"),
    ('root ::= Regex("a", flags=true)', 1, 27, "flags must be a string, not a boolean"),
    ('root ::= Regex("a", json_string="yes")', 1, 33, "json_string must be true or false"),
    ('root ::= Regex("\\"", json_string=true)', 1, 16, "matches nothing"),
    ('root ::= Regex("a", dot_all=true)', 1, 21, "unknown keyword argument 'dot_all'"),
    ('root ::= Regex("a", json_string=true, json_string=true)', 1, 39, "given more than once"),
    # Substring
    ('root ::= Substring(1)', 1, 20, "each argument of Substring() must be a string"),
    ('root ::= Substring("a", ("b",))', 1, 25, "must be a string, not a tuple"),
    ('root ::= Substring("a", x=1)', 1, 25, "Substring() does not accept keyword arguments"),
    # TagDispatch
    ('root ::= TagDispatch(("t", r))\nq ::= "a"', 1, 28, "the rule 'r' is referenced but never "
                                                         "defined"),
    ('root ::= TagDispatch(("", r))\nr ::= "a"', 1, 23, "a tag must not be empty"),
    ('root ::= TagDispatch((1, r))\nr ::= "a"', 1, 23, "a tag must be a string, not an integer"),
    ('root ::= TagDispatch(("t", "r"))\nr ::= "a"', 1, 28, "the rule of a tag must be a rule name"),
    ('root ::= TagDispatch(("t", r, r))\nr ::= "a"', 1, 22, "must be a pair"),
    ('root ::= TagDispatch(("t"))\nr ::= "a"', 1, 22, "must be a pair"),
    ('root ::= TagDispatch("t", r)\nr ::= "a"', 1, 22, "must be a tuple"),
    ('root ::= TagDispatch(("t", r), excludes=("",))\nr ::= "a"', 1, 42,
     "an exclude must not be empty"),
    ('root ::= TagDispatch(("t", r), excludes=(x,))\nr ::= "a"', 1, 42,
     "an exclude must be a string"),
    ('root ::= TagDispatch(("tx", r), excludes=("t",))\nr ::= "a"', 1, 43,
     "the exclude 't' is a prefix of the tag 'tx'"),
    ('root ::= TagDispatch(("t", r), excludes="x")\nr ::= "a"', 1, 41, "excludes must be a tuple"),
    ('root ::= TagDispatch(("t", r), loop_after_dispatch=1)\nr ::= "a"', 1, 52,
     "loop_after_dispatch must be true or false"),
    ('root ::= TagDispatch(("t", r), loop_after_dispatch=True)\nr ::= "a"', 1, 52,
     "loop_after_dispatch must be true or false, not a rule name"),
    ('root ::= TagDispatch(("t", r), stop_eos=true)\nr ::= "a"', 1, 32,
     "unknown keyword argument 'stop_eos' for TagDispatch()"),
    ('root ::= TagDispatch(("t", r),\n  stop_str=("x",))\nr ::= "a"', 2, 3,
     "unknown keyword argument 'stop_str'"),
    # call syntax
    ('root ::= TagDispatch(("t", r),)\nr ::= "a"', 1, 31, "expected a macro argument"),
    ('root ::= TagDispatch(("t" r))\nr ::= "a"', 1, 27, "expected ',' or ')' in the tuple"),
    ('root ::= TagDispatch(("t", r)\nr ::= "a"', 2, 1, "expected ',' or ')' after an argument"),
    ('root ::= Regex("a"', 1, 15, "the macro call Regex( is never closed"),
    ('root ::= Regex(', 1, 16, "the grammar ends here"),
    ('root ::= TagDispatch((("t", r)', 1, 22, "the tuple is never closed"),
    ("root ::= Substring('a')", 1, 20, "single-quoted strings are not supported"),
    ('root ::= Regex([a])', 1, 16, "expected a macro argument"),
    ('root ::= Regex("\\q")', 1, 17, "invalid escape sequence"),
    ('root ::= Regex(' + "(" * 120 + ')' * 120 + ')', 1, 116, "nested too deeply"),
    ('root ::= "a" (= Regex("b"))', 1, 17, "cannot be used in a lookahead assertion"),
    ('root ::= "a" (= TagDispatch(("t", r)))\nr ::= "a"', 1, 17, "lookahead"),
    # (the macros about token ids: tests/test_token_items_frontend.py)
]


@pytest.mark.parametrize("ebnf, line, column, fragment", ERRORS,
                         ids=[f"{e[1]}:{e[2]} {e[3]}" for e in ERRORS])
def test_errors(ebnf, line, column, fragment):
    with pytest.raises(GrammarError) as caught:
        parse_ebnf(ebnf)
    error = caught.value
    assert fragment in error.message
    assert (error.line, error.column) == (line, column), error.message


# Errors where XGrammar 0.2.8 accepts the grammar (the deliberate differences of
# gxg/grammar/ebnf.py and macros.py), or only fails when it builds the automaton.
XGRAMMAR_ACCEPTS = {
    'root ::= Regex("a", flags="i")',                                 # case-insensitive
    'root ::= Regex("a", json_string=true, json_string=true)',       # repeated keyword
    'root ::= TagDispatch(("t", r), loop_after_dispatch=true, loop_after_dispatch=false)',
    'root ::= Regex("\\"", json_string=true)',                        # empty language
}
XGRAMMAR_LATE = {'root ::= Regex("ab(")', 'root ::= Regex("\\\\d(")', 'root ::= Regex("a{2,1}")'}


@needs_xgrammar
@pytest.mark.parametrize("ebnf, line, column, fragment", ERRORS,
                         ids=[f"{e[1]}:{e[2]} {e[3]}" for e in ERRORS])
def test_xgrammar_rejects_the_errors(ebnf, line, column, fragment):
    if ebnf in XGRAMMAR_ACCEPTS:
        xgrammar.Grammar.from_ebnf(ebnf)
        return
    with pytest.raises(Exception):
        grammar = xgrammar.Grammar.from_ebnf(ebnf)
        if ebnf in XGRAMMAR_LATE:
            xgrammar_oracle.xgr_compiled("ebnf", str(grammar))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(['Regex(', 'Substring(', 'TagDispatch(', '"a"', '"', '(', ')',
                                 ',', 'x', '=', 'excludes', 'true', '1', ' ', '\n', '#', '("t", x)',
                                 'loop_after_dispatch', 'flags', 'json_string', "'", '\\']),
                max_size=14).map("".join))
def test_arbitrary_macro_text_parses_or_raises_grammar_error(tail):
    text = "root ::= " + tail + "\nx ::= \"q\"\n"
    try:
        grammar = parse_ebnf(text)
    except GrammarError as error:
        assert error.line is not None and 1 <= error.line <= text.count("\n") + 1
        assert 1 <= error.column <= len(text.split("\n")[error.line - 1]) + 1
        return
    assert parse_ebnf(str(grammar)) == grammar


# ----------------------------------------------------------------------------- TagDispatch spec


def spec_accepts(tags, rules, excludes, loop, text) -> bool:
    """TagDispatch(tags -> rules (literal strings), excludes, loop) followed by nothing accepts
    ``text``: the semantics in gxg/grammar/macros.py, written on strings.

    In free text w (since the start or since the last dispatched rule ended), the state is the
    longest suffix of w that is a prefix of a tag or an exclude. w must contain no exclude. When
    the state is a tag, the tag's rule follows, or w continues along a longer tag or exclude;
    free text may end anywhere else."""
    patterns = list(tags) + list(excludes)

    def state(w):
        return next((w[k:] for k in range(len(w) + 1)
                     if any(p.startswith(w[k:]) for p in patterns)), "")

    @functools.lru_cache(maxsize=None)
    def free(start, pos):
        w = text[start:pos]
        if any(exclude in w for exclude in excludes):
            return False
        current = state(w)
        if current in tags:
            for tag, rule in zip(tags, rules):
                if tag == current and text.startswith(rule, pos):
                    after = pos + len(rule)
                    if (free(after, after) if loop else after == len(text)):
                        return True
            return pos < len(text) and any(p.startswith(current + text[pos]) for p in patterns) \
                and free(start, pos + 1)
        return pos == len(text) or free(start, pos + 1)

    return free(0, 0)


def tag_dispatch_ebnf(tags, rules, excludes, loop) -> str:
    pairs = "".join(f'("{tag}", r{k}), ' for k, tag in enumerate(tags))
    excluded = "".join(f'"{exclude}", ' for exclude in excludes)
    text = (f"root ::= TagDispatch({pairs}loop_after_dispatch={str(loop).lower()}, "
            f"excludes=({excluded}))\n")
    return text + "".join(f'r{k} ::= "{rule}"\n' for k, rule in enumerate(rules))


def test_spec_agrees_with_the_table():
    # the executable specification reads the TagDispatch rows of the table the same way
    rows = [row for row in TAG_DISPATCH if row[0].count("\n") >= 1 and "call" not in row[0]
            and "root ::= \"[\"" not in row[0] and "«" not in row[0]]
    assert len(rows) >= 9
    for ebnf, accepted, rejected in rows:
        grammar = parse_ebnf(ebnf)
        tags, rules, excludes, loop = _read_back(ebnf, grammar)
        for text in accepted:
            assert spec_accepts(tags, rules, excludes, loop, text), (ebnf, text)
        for text in rejected:
            assert not spec_accepts(tags, rules, excludes, loop, text), (ebnf, text)


def _read_back(ebnf, grammar):
    """(tags, rule strings, excludes, loop) of a one-macro table row with literal rules."""
    import re
    tags, rules = [], []
    for tag, rule in re.findall(r'\("([^"]*)", (\w+)\)', ebnf):
        tags.append(tag)
        rules.append(grammar.rule(rule).body.data.decode() if hasattr(
            grammar.rule(rule).body, "data") else "")
    found = re.search(r"excludes=\(([^)]*)\)", ebnf)
    excludes = re.findall(r'"([^"]*)"', found.group(1)) if found else []
    return tags, rules, excludes, "loop_after_dispatch=false" not in ebnf


ALPHABET = "abc"


@st.composite
def tag_dispatch_cases(draw):
    word = st.text(ALPHABET, min_size=1, max_size=3)
    tags = draw(st.lists(word, min_size=0, max_size=3))
    excludes = [e for e in draw(st.lists(word, max_size=2))
                if not any(tag.startswith(e) for tag in tags)]
    rules = draw(st.lists(st.sampled_from(["X", "Y", "XY", "", "a"]), min_size=len(tags),
                          max_size=len(tags)))
    loop = draw(st.booleans())
    pieces = st.sampled_from(list(ALPHABET) + ["X", "Y"] + tags + excludes + rules)
    texts = draw(st.lists(st.lists(pieces, max_size=5).map("".join), min_size=10, max_size=10))
    return tags, rules, excludes, loop, texts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tag_dispatch_cases())
def test_tag_dispatch_matches_spec_and_xgrammar(case):
    tags, rules, excludes, loop, texts = case
    ebnf = tag_dispatch_ebnf(tags, rules, excludes, loop)
    for text in texts:
        expected = spec_accepts(tags, rules, excludes, loop, text)
        assert gxg_accepts(ebnf, text) is expected, (ebnf, text)
        if xgrammar is not None:
            assert xgr_accepts(ebnf, text) is expected, (ebnf, text)


@pytest.mark.parametrize("seed", range(3))
def test_tag_dispatch_exhaustive_short_strings(seed):
    # every string of up to 4 letters, for a few random grammars with overlapping patterns
    rng = random.Random(seed)
    tags = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 3))) for _ in range(3)]
    excludes = [e for e in ("ba", "bb", "aab") if not any(t.startswith(e) for t in tags)][:2]
    rules = ["X", "", "Xa"]
    for loop in (True, False):
        ebnf = tag_dispatch_ebnf(tags, rules, excludes, loop)
        for length in range(5):
            for letters in itertools.product("abX", repeat=length):
                text = "".join(letters)
                expected = spec_accepts(tags, rules, excludes, loop, text)
                assert gxg_accepts(ebnf, text) is expected, (ebnf, text)
                if xgrammar is not None:
                    assert xgr_accepts(ebnf, text) is expected, (ebnf, text)


# ----------------------------------------------------------------------------- Substring language


@pytest.mark.parametrize("chunks", [
    ["a", "b", "a", "b", "b"],       # the suffix automaton's clone branch
    ["ab", "a", "b", "ba"],          # overlapping multi-letter chunks
    ["ab", "abc"],                   # one chunk a prefix of another
    ["a", "", "a", ""],              # empty and repeated chunks
    ["aa", "aa", "aa"],
])
def test_substring_language_brute_force(chunks):
    language = {"".join(chunks[i:j]) for i in range(len(chunks) + 1)
                for j in range(i, len(chunks) + 1)}
    ebnf = "root ::= Substring(" + ", ".join(f'"{chunk}"' for chunk in chunks) + ")"
    for length in range(len("".join(chunks)) + 2):
        for letters in itertools.product(sorted(set("".join(chunks))), repeat=length):
            text = "".join(letters)
            assert gxg_accepts(ebnf, text) is (text in language), (chunks, text)
            if xgrammar is not None:
                assert xgr_accepts(ebnf, text) is (text in language), (chunks, text)


# ----------------------------------------------------------------------------- token masks


MASK_GRAMMARS = [
    ('root ::= TagDispatch(("<tool_call>", call), ("<a>", call), excludes=("</s>",)) "</s>"\n'
     'call ::= "{" [a-z]* "}"',
     ["hi <tool_call>{ab} and <a>{} done</s>", "<tool_call>{x}</s>", "just text</s>"]),
    ('root ::= "[" Substring("ab", "cd", "ab", "e") "]" Regex("[0-9]{1,3}")',
     ["[abcd]12", "[]7", "[cdabe]999"]),
]


@needs_xgrammar
@pytest.mark.parametrize("ebnf, sentences", MASK_GRAMMARS)
def test_masks_equal_xgrammar_along_random_walks(ebnf, sentences):
    ours, theirs, vocab, stop_id, vocab_size = compiled_pair("ebnf", ebnf, sentences, seed=3)
    rng = random.Random(5)
    for walk in range(4):
        m, x = GrammarMatcher(ours), xgrammar.GrammarMatcher(theirs)
        for step in range(20):
            got, want = mask_pair(m, x, vocab_size)
            np.testing.assert_array_equal(got, want, err_msg=f"walk {walk} step {step}")
            choices = np.nonzero(got)[0].tolist()
            if not choices:
                break
            token = rng.choice(choices)
            assert m.accept_token(token) and x.accept_token(token)
            if token == stop_id:
                assert m.is_terminated() and x.is_terminated()
                break
