"""Lark front end (``gxg.grammar.lark``): XGrammar 0.2.8's Lark dialect.

Each case is checked through gxg's full CPU pipeline (compile over an empty vocabulary, then
``GrammarMatcher(..., terminate_without_stop_token=True).accept_string`` + ``is_terminated``)
and, when ``xgrammar`` is installed, the same strings through XGrammar. Most tables replay
XGrammar's own ``tests/python/test_lark.py`` (mlc-ai/xgrammar).
"""
import functools
import itertools
import json
import random

import pytest

import gxg
from gxg.grammar.ir import GrammarError

try:
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string as _xgr_accepts_grammar
except ImportError:  # pragma: no cover
    xgr = None

needs_xgrammar = pytest.mark.skipif(xgr is None, reason="xgrammar is not installed")

_COMPILER = gxg.GrammarCompiler(gxg.TokenizerInfo([]))


@functools.lru_cache(maxsize=None)
def _gxg_compiled(text: str):
    return _COMPILER.compile_grammar(gxg.Grammar.from_lark(text))


def _gxg_accepts(compiled, value: str) -> bool:
    matcher = gxg.GrammarMatcher(compiled, terminate_without_stop_token=True)
    return matcher.accept_string(value) and matcher.is_terminated()


@functools.lru_cache(maxsize=None)
def _xgr_grammar(text: str):
    return xgr.Grammar.from_lark(text)


def _check_language(text, accepted, rejected, *, compiled=None, xgr_grammar=None):
    compiled = compiled if compiled is not None else _gxg_compiled(text)
    for value in accepted:
        assert _gxg_accepts(compiled, value), f"gxg rejects {value!r}"
    for value in rejected:
        assert not _gxg_accepts(compiled, value), f"gxg accepts {value!r}"
    if xgr is not None:
        grammar = xgr_grammar if xgr_grammar is not None else _xgr_grammar(text)
        for value in accepted:
            assert _xgr_accepts_grammar(grammar, value), f"xgrammar rejects {value!r}"
        for value in rejected:
            assert not _xgr_accepts_grammar(grammar, value), f"xgrammar accepts {value!r}"


# ----------------------------------------------------------------------------- languages

CORE = [
    ('start: "a" "b" | "c" ("d" | "e")', ["ab", "cd", "ce"], ["", "a", "c", "ade"]),
    ('start: ("a" | "b") ["c"]', ["a", "b", "ac", "bc"], ["", "c", "abc"]),
    ('start: | "a" | "b"', ["", "a", "b"], ["ab", "c"]),
    ('start: "a" |', ["", "a"], ["aa", "b"]),
    ("start:", [""], ["a", " "]),
    ('start: "" "a" ""', ["a"], ["", "aa"]),
    ('?item: "a"\n!suffix: "b"\nstart: item suffix', ["ab"], ["", "a", "b"]),
    ('start: _item _TOKEN\n_item: "a"\n_TOKEN: "b"', ["ab"], ["a", "b", "_item_TOKEN"]),
    ('start: "a" -> first\n     | "b" -> second', ["a", "b"], ["", "first", "second"]),
    ('start: value\nvalue: "x" | "(" value ")" | "[" values? "]"\nvalues: value ("," value)*',
     ["x", "(x)", "((x))", "[]", "[x]", "[x,(x),[x]]"], ["", "()", "[", "[x,]", "[(])"]),
    ('start: sequence\nsequence: "x" | "a" sequence "b"', ["x", "axb", "aaxbb"],
     ["", "ab", "aaxb"]),
    ('start: SIGNED\nSIGNED: SIGN? DIGIT+\nSIGN: "+" | "-"\nDIGIT: "0".."9"',
     ["0", "123", "+7", "-42"], ["", "+", "--1", "1a"]),
    ("start: \"'foo'\" /a+/ | STRING /b+/\nSTRING: /'[^']*'/",
     ["'foo'a", "'foo'aaa", "'bar'b", "'bar'bbb", "'foo'bb"], ["'bar'a", "'bar'c", "foo"]),
    ('start: /.../ "abc" /.../', ["abcabcabc", "aaaabcccc", "🔵🟠✅abc❌🟠🔵"],
     ["aaabcccc", "aaaaabcccc", "🔵🟠abc🟠🔵"]),
    (r"start: /a\/b/ /[0-9]{2,4}/", ["a/b12", "a/b1234"], ["a/b1", "a/b12345", "a-b12"]),
    ("start: /a.b/", ["acb", "a b", "a😀b"], ["ab", "a\nb", "a\n\nb"]),
    ("start: /a.b/s", ["acb", "a\nb", "a😀b"], ["ab", "a\n\nb"]),
    ("start: /a.b/u", ["acb"], ["a\nb"]),
    ("start: /a.b/su", ["a\nb"], ["ab"]),
    (r"start: /a\.b/s", ["a.b"], ["acb", "a\nb"]),
    ("start: /a[.]b/s", ["a.b"], ["acb", "a\nb"]),
    ("start: /[^.]/", ["\n", "x"], ["."]),
    ('start: "a".."z"+ "0".."9"?', ["a", "xyz", "hello7"], ["", "A", "7", "abc78"]),
    ('start: "α".."γ"+', ["α", "βγ", "γα"], ["", "δ", "a"]),
    ('start: "😀" "é" "中文"', ["😀é中文"], ["", "😀é", "😀e中文"]),
    ('start: "Ab-C9"i', ["Ab-C9", "ab-c9", "AB-C9", "aB-c9"], ["", "ab-c", "ab_c9", "äb-c9"]),
    ('start: TOKEN\nTOKEN: "Yes"i | "no"', ["yes", "YES", "YeS", "no"], ["", "y", "No"]),
    ('start: ""i "a"', ["a"], ["", "A"]),
    (r'''start: "\n" "\t" "\\" "\"" "\u03bb"''', ['\n\t\\"λ'], [r"\n\t\"λ", "\n\tλ"]),
    (r'''start: "\b" "\f" "\r" "\/" "\u0000"''', ["\b\f\r/\0"], ["bfr/", "\b\f\n/\0"]),
    (r'start: "\ud83d\ude00"', ["😀"], ["", "\\ud83d"]),
    ('start: foo-bar FOO-BAR\nfoo-bar: "a"\nFOO-BAR: "b"', ["ab"], ["", "a-b", "foo-barFOO-BAR"]),
    ('start: item // top-level comment\nitem: "ok" # rule comment', ["ok"], ["", "item", "ok#"]),
    ('start: root\nroot: "r" start2\nstart2: "s"', ["rs"], ["", "r"]),
    ('start: "a"\n\n\n| "b"', ["a", "b"], ["ab"]),
    ('start: ("a"\n| "b"\n)', ["a", "b"], ["ab"]),
    ('start:\t"a"\r\n  |"b"\x0c"c"', ["a", "bc"], ["b"]),
    ('start : "a"\nunused: missing_is_fine_if_unused_terminals_ok', [], []),
    (r'start: /\d+/ /\w/ /[\d]/', ["12a3", "1_0"], ["a", "12a"]),
    (r"start: /\s/", ["\t", "\n", "\x0b", "\x0c", "\r", " ", "\xa0"],
     ["\u2028", "\u3000", "\x1c", "\x85", "\ufeff", "a"]),
    (r"start: /\S/", ["a", "\u2028", "\u3000"], [" ", "\xa0", "\t"]),
    (r"start: /[\S]/", ["a", "\u2028"], [" ", "\xa0"]),
    (r"start: /[^\s]/", ["a", "\u2028"], [" ", "\xa0"]),
    (r"start: /[\s\S]+/", ["a b\n\u2028"], [""]),
    (r"start: /[a\^]/", ["a", "^"], ["b"]),
    (r"start: /\u00e9\x41/", ["éA"], ["e"]),
]
# The "unused" case above references an undefined rule: XGrammar checks every rule, so it is an
# error (tested below); drop it here.
CORE = [case for case in CORE if "unused" not in case[0]]

REPETITION = [
    ('start: "a"?', ["", "a"], ["aa"]),
    ('start: "a"*', ["", "a", "aaaa"], ["b", "aaab"]),
    ('start: "a"+', ["a", "aaaa"], ["", "b"]),
    ('start: "a"~2', ["aa"], ["", "a", "aaa"]),
    ('start: "a"~2..4', ["aa", "aaa", "aaaa"], ["", "a", "aaaaa"]),
    ('start: "a" ~ 2', ["aa"], ["a"]),
    ('start: "a"{2}', ["aa"], ["", "a", "aaa"]),
    ('start: "a"{2,4}', ["aa", "aaa", "aaaa"], ["", "a", "aaaaa"]),
    ('start: "a"{ 2 , 4 }', ["aa", "aaaa"], ["a"]),
    ('start: "a"{2,}', ["aa", "aaaaaa"], ["", "a"]),
    ('start: "a"{,2}', ["", "a", "aa"], ["aaa"]),
    ('start: "a"{0}', [""], ["a"]),
    ('start: "a"{0,0}', [""], ["a"]),
    ('start: "a"{+2}', ["aa"], ["a"]),
    ('start: ("a" | "bc"){2,3}', ["aa", "abc", "bca", "bcbcbc"], ["", "a", "bcbc bcbc", "aaaa"]),
    ('start: ITEM{2,3}\nITEM: "x" | "y"', ["xx", "xy", "yyy"], ["", "x", "xxxx"]),
    ('start: item{2,3}\nitem: "x" | "(" item ")"', ["xx", "x(x)", "(x)(x)(x)"],
     ["", "x", "xxxx"]),
    ('start: x{,2}\nx: "a"', ["", "aa"], ["aaa"]),
]

COMMON = [
    ("DIGIT", ["0", "9"], ["", "a", "10"]),
    ("HEXDIGIT", ["0", "a", "F"], ["", "g", "ff"]),
    ("INT", ["0", "123"], ["", "-1", "1.0"]),
    ("SIGNED_INT", ["0", "+12", "-3"], ["", "+", "1.0"]),
    ("DECIMAL", ["1.", "1.5", ".25"], ["", "1", "."]),
    ("_EXP", ["e1", "E+12", "e-3"], ["", "1", "e"]),
    ("FLOAT", ["1.", ".5", "1e3", "1.2e-3"], ["", "1", "e3"]),
    ("SIGNED_FLOAT", ["-1.", "+.5", "-1e3", "1.2e-3"], ["", "1", "+"]),
    ("NUMBER", ["0", "12", ".5", "1e3"], ["", "-1", "x"]),
    ("SIGNED_NUMBER", ["0", "-12", "+.5", "-1e3"], ["", "+", "x"]),
    ("ESCAPED_STRING", ['""', '"abc"', '"a\\"b"', '"a\\nb"'], ["", "abc", '"unterminated',
                                                               '"a\\\nb"']),
    ("LCASE_LETTER", ["a", "z"], ["", "A", "aa"]),
    ("UCASE_LETTER", ["A", "Z"], ["", "a", "AA"]),
    ("LETTER", ["a", "Z"], ["", "1", "ab"]),
    ("WORD", ["a", "AbCd"], ["", "a1", "a_b"]),
    ("CNAME", ["a", "_a1", "A_2"], ["", "1a", "a-b"]),
    ("WS_INLINE", [" ", "\t", " \t "], ["", "\n", "a"]),
    ("WS", [" ", "\n", "\t\f\r\n"], ["", "a", "\x0b"]),
    ("CR", ["\r"], ["", "\n", "\r\n"]),
    ("LF", ["\n"], ["", "\r", "\r\n"]),
    ("NEWLINE", ["\n", "\r\n", "\r\n\n"], ["", "\r", "a"]),
    ("SH_COMMENT", ["#", "# hello"], ["", "// hello", "# a\n"]),
    ("CPP_COMMENT", ["//", "// hello"], ["", "# hello", "// a\n"]),
    ("C_COMMENT", ["/**/", "/* hello */", "/* ** x **/"], ["", "// hello", "/* open"]),
    ("SQL_COMMENT", ["--", "-- hello"], ["", "- hello", "-- a\n"]),
]

IGNORE = [
    ("""
        %ignore WS_INLINE
        start: NAME "=" NUMBER
        %import common (CNAME, WS_INLINE)
        %import common.INT -> NUMBER
        NAME: CNAME
     """, ["x=1", "name = 42", "_x\t=\t0"], ["", "1x=2", "x=-1"]),
    ("""
        %import common.WS
        %ignore WS
        start: "a" DIGIT "c".."d"
        DIGIT: "0".."9"
     """, ["a1c", "a 1 d", "a\n1\n c  "], [" a1c", "a 1 e", "a x c"]),
    ("""
        %import common (WS, CPP_COMMENT, SH_COMMENT)
        %ignore WS
        %ignore CPP_COMMENT
        %ignore SH_COMMENT
        start: "a" "b"
     """, ["ab", "a // comment\n b", "a# comment\nb", "a b // trailing"],
     [" // initial\na b", "a x b"]),
    ("%ignore /[ _]+/\nstart: \"a\" \"b\"", ["ab", "a_b", "a _ b___"], ["_ab", "a-b"]),
    ("""
        %grammar_options {"allow_initial_skip": false}
        %grammar_options {"allow_initial_skip": true, "no_forcing": false, "allow_invalid_utf8": false}
        %import common.WS
        %ignore WS
        start: "a" "b"
     """, ["ab", " a b", "\n\ta\n b  "], ["a c", " xab"]),
    ("%import common.WS_INLINE\n%ignore WS_INLINE\nstart: \"a\" \"b\"", ["ab", "a b", "ab  "],
     [" ab", "a\nb"]),
    # Inside a terminal nothing is skipped; after a rule reference nothing is added; an empty
    # string adds nothing either.
    ('%ignore " "\nstart: AB c "" d\nAB: "a" "b"\nc: "c"\nd: "d"', ["abcd", "ab c d ", "abc d"],
     ["a bcd", " abcd"]),
    ('%ignore " "\n%ignore "_"\nstart: "x"+', ["x", "x x_ x", "xx"], ["_x"]),
]

JSON_SCHEMAS = [
    ('{"type":"string"}', ['""', '"hello"', '"λ"'], ["hello", "1", '"unterminated']),
    ('{"type":"integer"}', ["0", "-12", "123"], ["1.0", '"1"', "+1"]),
    ('{"const":"fixed"}', ['"fixed"'], ['"other"', "fixed"]),
    ('{"enum":["red","green",3]}', ['"red"', '"green"', "3"], ['"blue"', "4"]),
    ('{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}',
     ["[1]", "[1,2]", "[ 1, 2, 3 ]"], ["[]", "[1,2,3,4]", '["1"]']),
    ('{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"],'
     '"additionalProperties":false}', ['{"x":1}', '{ "x" : -2 }'],
     ["{}", '{"x":"1"}', '{"x":1,"y":2}']),
    ('{"anyOf":[{"type":"integer"},{"type":"boolean"}]}', ["1", "-2", "true", "false"],
     ['"1"', "null"]),
    ('{"type":"string","pattern":"^a[0-9]+$"}', ['"a0"', '"a123"'], ['"a"', '"ba1"', '"a1x"']),
]

EXTENSIONS = [
    ('start: "values=" value (";" value)* "."\nvalue: %json {"type":"integer"}',
     ["values=1.", "values=1;-2;3."], ["values=.", 'values="1".', "values=1;."]),
    ('%import common.WS\n%ignore WS\nstart: "a" %json {"type":"integer"} "b"',
     ["a 1 b", "a1b", "a -1b "], ["a 1.5 b"]),
    ('start: item %lark {\n  start: item\n  item: "b"\n} item\nitem: "a"', ["aba"],
     ["aaa", "abb", "bbb"]),
    (r"""
        start: "[" %lark {
          %grammar_options {"allow_initial_skip": true}
          %import common.WS
          %ignore WS
          start: item ":" %json {"type":"integer"}
          item: "x" | "(" item ")"
        } "]"
     """, ["[x:1]", "[ ((x)) : -2 ]"], ["[():1]", '[x:"1"]', "[x 1]"]),
    ('start: %lark { start: "a" | "b" } %lark { start: "1" | "2" }', ["a1", "a2", "b1", "b2"],
     ["", "a", "1a", "c1"]),
    # The outer %ignore does not reach into a nested grammar; it follows the nested lexeme.
    ('%import common.WS\n%ignore WS\nstart: "a" %lark { start: "b" "d" } "c"', ["a bd c"],
     ["a b d c", "a b dc"]),
]

TOOL_CALL_GRAMMAR = r"""
    start: tool* tail
    tail: TEXT

    tool_head[lazy]: TEXT "<tool_call>"
    tool: tool_head %json {
      "type": "object",
      "properties": {"x": {"type": "integer"}},
      "required": ["x"],
      "additionalProperties": false
    } "</tool_call>"

    TEXT: /(\n|.)*/
"""

DYNAMIC = [
    (TOOL_CALL_GRAMMAR,
     ["", "plain text", "text <tool_cal and more", '<tool_call>{"x":1}</tool_call>',
      'before<tool_call>{"x":1}</tool_call>after',
      '<tool_call>{"x":1}</tool_call><tool_call>{"x":2}</tool_call>',
      'line 1\nline 2<tool_call>{ "x" : -3 }</tool_call>tail'],
     ["<tool_call>", '<tool_call>{"x":"bad"}</tool_call>', '<tool_call>{"x":1}',
      "before<tool_call>free text</tool_call>after", '<tool_call> {"x":1}</tool_call>',
      '<tool_call>{"x":1} </tool_call>']),
    (r"""
        start: (foo | bar)* tail
        tail: TEXT
        foo_head[lazy]: TEXT "<foo>"
        foo: foo_head /[a-z]+/ "</foo>"
        bar_head[lazy]: TEXT "<bar>"
        bar: bar_head /[0-9]+/ "</bar>"
        TEXT: /(\n|.)*/
     """, ["free text", "partial <fo remains text", "x<foo>abc</foo>y",
           "<bar>12</bar><foo>x</foo>"], ["<foo>", "<foo>12</foo>", "<bar>x</bar>", "<bar>12"]),
    (r"""
        start: tool* tail
        tail: TEXT
        head[lazy]: /(\n|.)*<call>/
        tool: head /[0-9]+/ "</call>"
        TEXT: /(\n|.)*/
     """, ["", "free text", "partial <cal", "x<call>12</call>y"],
     ["<call>", "<call>x</call>", "<call>12", "x<call>12</call><call>"]),
    (r"""
        start: tool* tail
        tail: TEXT
        head[lazy]: /.*<call>/s
        tool: head "ok" "</call>"
        TEXT: /.*/s
     """, ["line 1\nline 2", "x\n<call>ok</call>tail"], ["<call>", "<call>bad</call>",
                                                        "x\n<call>ok"]),
    (r"""
        start: tool* tail
        tail: TEXT
        head[suffix="<tool>"]: TEXT
        tool: head /[a-z]+/ "</tool>"
        TEXT: /(\n|.)*/
     """, ["free", "x<tool>abc</tool>y", "partial <too"], ["<tool>", "<tool>123</tool>",
                                                          "<tool>abc"]),
    (r"""
        start: tool* tail
        tail: TEXT
        head[lazy]: /(\n|.)*\n>>>>>>>/
        tool: head "replacement"
        TEXT: /(\n|.)*/
     """, ["free >>>>>>> text", "before\n>>>>>>>replacementafter"],
     ["\n>>>>>>>", "before\n>>>>>>>wrong"]),
    (r"""
        start: tool* tail
        tail: TEXT
        head[lazy]: /(\n|.)*END\./
        tool: head "ok"
        TEXT: /(\n|.)*/
     """, ["free END text", "beforeEND.okafter"], ["END.", "beforeEND.not-ok",
                                                  "beforeEND.okEND."]),
    (r"""
        start: (foo | bar)* tail
        tail: TEXT
        foo_head[lazy]: TEXT "<function"
        foo: foo_head "=foo>" /[a-z]+/ "</function>"
        bar_head[lazy]: TEXT "<function"
        bar: bar_head "=bar>" /[A-Z]+/ "</function>"
        TEXT: /(\n|.)*/
     """, ["free text", "a<function=foo>abc</function>b",
           "<function=bar>ABC</function><function=foo>xyz</function>"],
     ["<function", "<function=baz>abc</function>", "<function=foo>ABC</function>",
      "<function=bar>abc</function>", "<function=foo>abc"]),
    (r"""
        start: tool* tail
        tail: FREE
        head[lazy]: FREE "<call>"
        tool: head /[0-9]+/ "</call>"
        FREE: TEXT
        TEXT: /(\n|.)*/
     """, ["free", "x<call>12</call>y", "partial <cal"], ["<call>", "<call>x</call>",
                                                         "<call>12"]),
    ('start: head\nhead[lazy]: TEXT "<end>"\nTEXT: /(\\n|.)*/', ["", "plain", "<end>",
                                                                  "plain<end>"],
     ["<end>x", "a<end>b"]),
    ('start: head "x"\nhead[lazy]: TEXT "<end>"\nTEXT: /[\\s\\S]*/', ["x", "<end>x", "a<end>x"],
     ["a<end>b<end>x"]),
    # [capture] does not change the language.
    ('start: "a" v "b"\nv[capture]: /[0-9]+/', ["a1b", "a123b"], ["ab"]),
    ('start: outer\nouter[capture="o"]: "x" inner "!"\ninner[capture="i"]: /[a-z]+/',
     ["xabc!"], ["x!"]),
    # The dynamic pattern with %ignore: skips follow the remainders' lexemes only.
    ("""
        %import common.WS
        %ignore WS
        start: tool* tail
        tail: TEXT
        head[suffix="<tool>"]: TEXT
        tool: head /[a-z]+/ "</tool>"
        TEXT: /(\\n|.)*/
     """, ["x<tool>abc</tool>y", "x<tool>abc </tool> y"], ["x<tool> abc</tool>"]),
]


def _ids(cases):
    return [f"{index}-{case[0].strip().splitlines()[0][:40]}" for index, case in enumerate(cases)]


@pytest.mark.parametrize("text, accepted, rejected", CORE + REPETITION, ids=_ids(CORE + REPETITION))
def test_core_languages(text, accepted, rejected):
    _check_language(text, accepted, rejected)


@pytest.mark.parametrize("name, accepted, rejected", COMMON, ids=[c[0] for c in COMMON])
def test_common_imports(name, accepted, rejected):
    _check_language(f"%import common.{name}\nstart: {name}", accepted, rejected)


@pytest.mark.parametrize("text, accepted, rejected", IGNORE, ids=_ids(IGNORE))
def test_ignore(text, accepted, rejected):
    _check_language(text, accepted, rejected)


@pytest.mark.parametrize("schema, accepted, rejected", JSON_SCHEMAS,
                         ids=[c[0][:40] for c in JSON_SCHEMAS])
def test_inline_json_schemas(schema, accepted, rejected):
    _check_language(f"start: %json {schema}", accepted, rejected)


@pytest.mark.parametrize("text, accepted, rejected", EXTENSIONS + DYNAMIC,
                         ids=_ids(EXTENSIONS + DYNAMIC))
def test_extensions(text, accepted, rejected):
    _check_language(text, accepted, rejected)


def test_large_choice_grammar():
    options = [f"option-{index:03d}" for index in range(256)]
    text = "start: option\noption: " + " | ".join(json.dumps(option) for option in options)
    _check_language(text, [options[0], options[127], options[-1]],
                    ["", "option-256", "option-12"])


def test_named_grammars():
    item = gxg.Grammar.from_lark('start: "x" | "y"')
    grammar = gxg.Grammar.from_lark('start: "[" @item ("," @item)* "]"',
                                    named_grammars={"item": item})
    compiled = _COMPILER.compile_grammar(grammar)
    for value in ["[x]", "[y,x]", "[x,y,x]"]:
        assert _gxg_accepts(compiled, value)
    for value in ["[]", "[z]", "[x,]"]:
        assert not _gxg_accepts(compiled, value)
    value = gxg.Grammar.from_regex("[0-9]+")
    grammar = gxg.Grammar.from_lark('start: "outer:" %lark { start: "inner:" @value }',
                                    named_grammars={"value": value})
    compiled = _COMPILER.compile_grammar(grammar)
    assert _gxg_accepts(compiled, "outer:inner:123")
    assert not _gxg_accepts(compiled, "outer:1")
    named = {"wrapper": 'start: "[" @item "]"', "item": value}
    compiled = _COMPILER.compile_lark("start: @wrapper", named_grammars=named)
    assert _gxg_accepts(compiled, "[123]") and not _gxg_accepts(compiled, "[]")
    assert _COMPILER.compile_lark("start: @wrapper", named_grammars=named) is compiled


@pytest.mark.parametrize("text, named, accepted, rejected", [
    ("start: @pair", {"pair": 'start: @item ":" @item', "item": "start: /[a-z]+/"},
     ["a:b", "hello:world"], ["a:", ":b", "a:1"]),
    ('%ignore " "\nstart: "a" @x "c"', {"x": '%ignore "_"\nstart: "b" "b"'},
     ["abbc", "a b_b c "], ["a b b c", "a_bbc"]),
])
def test_named_lark_texts(text, named, accepted, rejected):
    compiled = _COMPILER.compile_grammar(gxg.Grammar.from_lark(text, named_grammars=named))
    xgr_grammar = None if xgr is None else xgr.Grammar.from_lark(text, named_grammars=named)
    _check_language(text, accepted, rejected, compiled=compiled, xgr_grammar=xgr_grammar)


def test_compile_lark_and_printing():
    compiled = _COMPILER.compile_lark('start: "a" b\nb: "b"+')
    assert _gxg_accepts(compiled, "abb") and not _gxg_accepts(compiled, "a")
    assert _COMPILER.compile_lark('start: "a" b\nb: "b"+') is compiled
    grammar = gxg.Grammar.from_lark('start: "a" root\nroot: "b"\n%ignore " "')
    assert grammar.root_rule_name == "root"
    assert gxg.Grammar.from_ebnf(str(grammar)) == grammar   # prints as gxg EBNF
    assert "lark_ignore" in str(grammar)


# ----------------------------------------------------------------------------- errors

# (text, message fragment, line, column, what XGrammar does: "error" or "accepts")
ERRORS = [
    ('item: "a"', "no start rule", 1, 1, "error"),
    ("start: missing", "unknown name 'missing'", 1, 8, "error"),
    ('start: ok\nok: "a"\nunused: missing', "unknown name 'missing'", 3, 9, "error"),
    ('start: foo\nfoo: "a"\nfoo: "b"', "duplicate rule or terminal 'foo'", 3, 1, "error"),
    ('start: FOO\nFOO: "a"\nFOO: "b"', "duplicate rule or terminal 'FOO'", 3, 1, "error"),
    ("start: FOO\nFOO: BAR\nBAR: FOO", "circular reference in terminal", 3, 1, "error"),
    ('start: TOKEN\nTOKEN: rule\nrule: "a"', "terminal 'TOKEN' cannot reference rule 'rule'",
     2, 1, "error"),
    ('start[budget=10]: "a"', "attribute 'budget' is not supported", 1, 7, "error"),
    ('start[stop="x"]: "a"', "attribute 'stop' is not supported", 1, 7, "accepts"),
    ('start[capture=""]: "a"', "capture name must not be empty", 1, 15, "error"),
    ('start[capture="a b"]: "a"', "capture name must only contain letters, digits", 1, 15,
     "error"),
    ('start[capture, capture]: "a"', "capture attribute is specified more than once", 1, 16,
     "error"),
    ("TOKEN[lazy]: /a/\nstart: TOKEN", "attributes are only supported on rules", 1, 6, "error"),
    ('start.1: "a"', "priorities are not supported", 1, 6, "error"),
    ('start: x\nx.2: "a"', "priorities are not supported", 2, 2, "error"),
    ('start{x}: "a"', "Lark templates are not supported", 1, 6, "error"),
    ('start: foo{x}\nfoo: "a"', "Lark templates are not supported", 1, 11, "error"),
    ('start::0: "a"', "parametric grammar is not supported", 1, 6, "error"),
    ("start: foo::0", "parametric grammar is not supported", 1, 11, "error"),
    ('start: "a" %if enabled', "parametric %if conditions are not supported", 1, 12, "error"),
    ('start: A & B\nA: "a"\nB: "b"', "intersection '&' is not supported", 1, 10, "error"),
    ("start: ~/[a]/", "complement '~' is not supported", 1, 8, "error"),
    ('start: "\\u00c4"i', "case-insensitive string literals currently support ASCII", 1, 8,
     "error"),
    ("start: /abc/m", "regular-expression flag 'm' is not supported", 1, 8, "error"),
    ("start: /abc/l", "regular-expression flag 'l' is not supported", 1, 8, "error"),
    ("start: /abc/x", "regular-expression flag 'x' is not supported", 1, 8, "error"),
    ('start: "a"i.."z"', "flags are not allowed on character ranges", 1, 8, "error"),
    ('start: "a".."z"i', "flags are not allowed on character ranges", 1, 13, "error"),
    ("start: /[abc/", "failed to compile regular expression", 1, 8, "error"),
    ('start: "\\q"', "invalid string literal", 1, 8, "error"),
    ('start: "a\tb"', "invalid string literal", 1, 8, "error"),
    ('start: "\\ud83d"', "invalid string literal", 1, 8, "error"),
    ('start: "\\x41"', "invalid string literal", 1, 8, "error"),
    ('start: "unterminated', "unterminated string literal", 1, 8, "error"),
    ('start: "a\nb"', "unterminated string literal", 1, 8, "error"),
    ("start: /unterminated", "unterminated regular expression", 1, 8, "error"),
    ("start: <unterminated", "unterminated special token", 1, 8, "error"),
    ("start: <bad token>", "invalid special token", 1, 8, "error"),
    ("start: @", "empty grammar reference", 1, 8, "error"),
    ("start: $", "unexpected character '$'", 1, 8, "error"),
    ('start: "a" ;', "unexpected character ';'", 1, 12, "error"),
    ("start: -", "unexpected '-' character", 1, 8, "error"),
    ("start: !", "unexpected '!' character", 1, 8, "error"),
    ('start "a"', "expected ':' after rule name", 1, 7, "error"),
    ('start: ("a"', "expected ')' after group", 1, 12, "error"),
    ('start: ("a"\n "b")', "expected ')' after group", 1, 12, "error"),
    ('start: ["a"', "expected ']' after optional group", 1, 12, "error"),
    ('start: "a" ->', "expected alias name after '->'", 1, 14, "error"),
    ('start: "a" "b" -> x "c"', "expected end of grammar item", 1, 21, "error"),
    ('start: "a" |\n  "b"', "expected rule or terminal name", 2, 3, "error"),
    ('start: "a"**', "expected grammar expression", 1, 12, "error"),
    ('start: "a"+?', "expected grammar expression", 1, 12, "error"),
    ("%declare TOKEN\nstart: TOKEN", "directive %declare is not supported", 1, 1, "error"),
    ('%override start\nstart: "a"', "directive %override is not supported", 1, 1, "error"),
    ("%import common.UNKNOWN\nstart: UNKNOWN", "unknown common import", 1, 1, "error"),
    ("%import other.INT\nstart: INT", "unknown common import", 1, 1, "error"),
    ('%import common.INT\nINT: "x"\nstart: INT', "duplicate rule or terminal 'INT'", 1, 1,
     "error"),
    ('start: "a"{3,2}', "repetition end must be greater", 1, 8, "error"),
    ('start: "a"{-1,}', "invalid repetition count", 1, 12, "error"),
    ('start: "a"{1.5}', "invalid repetition count", 1, 12, "error"),
    ('start: "a"{999999999999999999999}', "invalid repetition count", 1, 12, "error"),
    ('start: "a"{}', "expected integer", 1, 12, "error"),
    ('start: "a"~2..', "expected integer", 1, 15, "error"),
    ('start: "ab".."c"', "range endpoints must be one character", 1, 8, "error"),
    ('start: "a".."bc"', "range endpoints must be one character", 1, 8, "error"),
    ('start: "z".."a"', "range start must not exceed end", 1, 8, "error"),
    ("start: %json {", "failed to parse JSON value after %json", 1, 8, "error"),
    ("start: %json []", "failed to compile inline JSON schema", 1, 8, "error"),
    ('start: %lark { item: "a" }', "failed to compile nested Lark grammar", 1, 8, "error"),
    ('start: %regex {"substring_chars":"abc"}', "structured %regex is not supported", 1, 8,
     "accepts"),
    ("start: @other", "unknown named grammar '@other'", 1, 8, "error"),
    ("start: TOKEN\nTOKEN: %json {}", "%json cannot be used in terminals", 2, 8, "error"),
    ('start: TOKEN\nTOKEN: %lark { start: "a" }', "nested %lark cannot be used in terminals",
     2, 8, "error"),
    ('%grammar_options {"allow_initial_skip": 1}\nstart: "a"',
     "allow_initial_skip must be a boolean", 1, 1, "error"),
    ('%grammar_options {"no_forcing": true}\nstart: "a"',
     "%grammar_options option 'no_forcing' is not supported", 1, 1, "error"),
    ('%grammar_options {"allow_invalid_utf8": true}\nstart: "a"',
     "%grammar_options option 'allow_invalid_utf8' is not supported", 1, 1, "error"),
    ('%grammar_options {"unknown": false}\nstart: "a"',
     "unknown %grammar_options option 'unknown'", 1, 1, "error"),
    ('%grammar_options []\nstart: "a"', "%grammar_options value must be an object", 1, 1,
     "error"),
    ('start: head\nhead[suffix=""]: TEXT\nTEXT: /(\\n|.)*/', "suffix must not be empty", 2, 13,
     "error"),
    ("start: head\nhead[suffix=/x/]: TEXT\nTEXT: /(\\n|.)*/",
     "expected string literal after suffix=", 2, 13, "accepts"),
    ('start: head\nhead[suffix="x",suffix="y"]: TEXT\nTEXT: /(\\n|.)*/',
     "suffix attribute is specified more than once", 2, 17, "error"),
    ('start: head\nhead[suffix="x"i]: TEXT\nTEXT: /(\\n|.)*/',
     "case-insensitive flags are not supported on suffix", 2, 13, "accepts"),
    ('start: head\nhead[suffix="x"]: /[a-z]+/',
     "suffix is only supported on an ANY_TEXT head used by dynamic dispatch", 2, 1, "accepts"),
    ("start: head\nhead[lazy]: /(\\n|.)*END/",
     "lazy regex suffix is only supported on a head used by dynamic dispatch", 2, 1, "error"),
    ('%ignore MISSING\nstart: "a"', "unknown name 'MISSING'", 1, 9, "error"),
    ('%ignore rule\nstart: "a"\nrule: "b"', "terminal cannot reference rule 'rule'", 1, 9,
     "error"),
    ("start: TOKEN\nTOKEN: <[1]>", "special token", 2, 8, "error"),
    ("start[max_tokens=0]: TEXT\nTEXT: /(\\n|.)*/", "max_tokens must be positive", 1, 18,
     "error"),
    ('start: tool* tail\ntail: TEXT\ntool_head[lazy]: TEXT "<t>"\n'
     'tool[capture]: tool_head /[0-9]+/ "</t>"\nTEXT: /(\\n|.)*/',
     "capture is not supported on rules consumed by dynamic dispatch", 4, 6, "error"),
    ("# comment\r\nstart: \"a\"\r\nitem missing", "expected ':' after rule name", 3, 6, "error"),
    ('start: "é" $', "unexpected character '$'", 1, 12, "error"),
    # gxg refuses (XGrammar accepts, with a different or runtime-only meaning):
    ('start: "a"?b\nb: "b"', "directly before a name", 1, 11, "accepts"),
    ('start: !b\nb: "b"', "directly before a name", 1, 8, "accepts"),
    ("start: /a/i", "flag 'i' (case-insensitive) is not supported by gxg", 1, 8, "accepts"),
    ("start: /[\\^a]/", "negated class", 1, 8, "accepts"),
    ("start: /\\ud83d\\ude00/", "surrogate escape", 1, 8, "accepts"),
    ("start: /a^b/", "failed to compile regular expression", 1, 8, "accepts"),
    ("start: /\\a/", "failed to compile regular expression", 1, 8, "accepts"),
    ("start: /[\\p{L}]/", "failed to compile regular expression", 1, 8, "accepts"),
    # special tokens, without a tokenizer (the same messages as XGrammar's)
    ("start: <|tool|>", "named special token <|tool|> requires tokenizer_info", 1, 8, "error"),
    ("start: <[]>", "empty numeric special-token range", 1, 8, "error"),
    ("start: <[3-2]>", "invalid numeric special-token range '3-2'", 1, 8, "error"),
    ("start: <[x]>", "invalid numeric special-token range 'x'", 1, 8, "error"),
    ("start: <[-1]>", "invalid numeric special-token range '-1'", 1, 8, "error"),
    ('start: x\nx[max_tokens=3]: "(" x ")" | ""', "need a regular body", 2, 1, "accepts"),
    ('start: x\nx[lazy]: "(" x ")" | ""', "need a regular body", 2, 1, "error"),
    ('start: x\nx[max_chars=2]: "(" x ")" | ""', "need a regular body", 2, 1, "accepts"),
]


@pytest.mark.parametrize("text, message, line, column, xgrammar", ERRORS,
                         ids=[f"{i}-{e[1][:30]}" for i, e in enumerate(ERRORS)])
def test_errors_are_located(text, message, line, column, xgrammar):
    with pytest.raises(GrammarError) as info:
        gxg.Grammar.from_lark(text)
    assert message in info.value.message, info.value.message
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    if xgr is not None:
        if xgrammar == "error":
            with pytest.raises(RuntimeError):
                xgr.Grammar.from_lark(text)
        else:
            xgr.Grammar.from_lark(text)


def test_named_grammar_errors():
    with pytest.raises(GrammarError, match="circular named grammar reference: "
                                           "@left -> @right -> @left"):
        gxg.Grammar.from_lark("start: @left", named_grammars={"left": "start: @right",
                                                              "right": "start: @left"})
    with pytest.raises(GrammarError, match="failed to compile named grammar '@x'") as info:
        gxg.Grammar.from_lark("\nstart: @x", named_grammars={"x": "start: $"})
    assert (info.value.line, info.value.column) == (2, 8)
    item = gxg.Grammar.from_lark('start: "x"')
    with pytest.raises(TypeError, match="must be a dictionary"):
        gxg.Grammar.from_lark("start: @item", named_grammars=[item])
    with pytest.raises(TypeError, match="names must be strings"):
        gxg.Grammar.from_lark("start: @item", named_grammars={1: item})
    with pytest.raises(TypeError, match="values must be Grammar instances or Lark strings"):
        gxg.Grammar.from_lark("start: @item", named_grammars={"item": 1})
    with pytest.raises(GrammarError, match="Invalid named grammar name"):
        gxg.Grammar.from_lark("start: @item", named_grammars={"bad name": item})


def test_garbage_never_raises_anything_but_grammar_error():
    rng = random.Random(1607)
    pieces = ['start', ':', ' ', '\n', '"a"', '"', '/', '/x/', '|', '(', ')', '[', ']', '{', '}',
              '2', ',', '~', '..', '->', '%ignore', '%import', 'common', '.', 'INT', 'A', 'a',
              '?', '*', '+', '!', '#', '%json', '%lark', '@', 'é', '\\', 'i', '<', '>']
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))
        try:
            gxg.Grammar.from_lark(text)
        except GrammarError as error:
            assert error.line is not None or "nests" in error.message, text


# ----------------------------------------------------------------------------- random strings

PROPERTY_GRAMMARS = [
    # (Lark text, pieces that random strings are built from, accepted seeds to mutate)
    ('%import common.WS_INLINE\n%ignore WS_INLINE\nstart: pair ("," pair)*\n'
     'pair: KEY "=" VALUE\nKEY: /[a-c]+/\nVALUE: "0".."2"+ | "x"i',
     ["a", "bc", "=", "0", "12", "x", "X", ",", " ", "\t", "\n"], ["a=0", "bc = X ,a=12 "]),
    ('start: /a.b/ | /(a|b)*c{1,2}/s | "ab"i "."', ["a", "b", "c", "AB", "aB", ".", "\n", " "],
     ["a b", "abacc", "aB.", "c"]),
    ('start: tool* tail\ntail: TEXT\nhead[lazy]: TEXT "<t>"\ntool: head /[0-9]+/ "</t>"\n'
     'TEXT: /(\\n|.)*/', ["<t>", "</t>", "<", "t", "0", "12", "x", "\n"],
     ["x<t>12</t>y", "<t>0</t><t>1</t>"]),
    ('%import common (SIGNED_NUMBER, ESCAPED_STRING, WS)\n%ignore WS\n'
     'start: value\nvalue: SIGNED_NUMBER | ESCAPED_STRING | "[" [value ("," value)*] "]"',
     ["[", "]", ",", '"', '"a"', "\\", "1", "-2", ".5", "e+3", " "],
     ['[1, "a", [-2.5e+3]] ', '""']),
]


def _random_string(rng: random.Random, pieces, seeds) -> str:
    if rng.random() < 0.3:
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 7)))
    value = rng.choice(seeds)
    for _ in range(rng.randint(0, 2)):        # a few random edits of an accepted string
        at = rng.randint(0, len(value))
        edit = rng.randrange(3)
        if edit == 0:
            value = value[:at] + rng.choice(pieces) + value[at:]
        elif edit == 1:
            value = value[:at] + value[at + 1:]
        else:
            value = value[:at] + rng.choice(pieces) + value[at + 1:]
    return value


@needs_xgrammar
@pytest.mark.parametrize("index", range(len(PROPERTY_GRAMMARS)))
def test_random_strings_agree_with_xgrammar(index):
    text, pieces, seeds = PROPERTY_GRAMMARS[index]
    compiled = _gxg_compiled(text)
    grammar = _xgr_grammar(text)
    rng = random.Random(9000 + index)
    accepted = 0
    for _ in range(300):
        value = _random_string(rng, pieces, seeds)
        expected = _xgr_accepts_grammar(grammar, value)
        assert _gxg_accepts(compiled, value) == expected, value
        accepted += expected
    assert 20 <= accepted <= 280, accepted     # both answers are well represented


# ----------------------------------------------------------------------------- special tokens

SPECIAL_VOCAB = ["a", "b", "<|im_end|>", "<|call|>", "</s>", "x", "<think>", "<|im_end|>", " "]
SPECIAL_CASES = [  # (Lark text, the printed IR's token items)
    ('start: "a" <[2]>', "Token(2)"),
    ("start: <[1,1]>", "Token(1)"),
    ("start: <[2-3,5]>*", "Token(2, 3, 5)"),
    ('start: <think> "a"', "Token(6)"),
    ("start: <|im_end|>", "Token(2, 7)"),    # every id with that text
    ('start: "a" <|call|> "x"\n%ignore " "', "Token(3)"),
]


@pytest.mark.parametrize("text, items", SPECIAL_CASES)
def test_special_tokens_are_token_items(text, items):
    info = gxg.TokenizerInfo([t.encode() for t in SPECIAL_VOCAB], vocab_size=10,
                             stop_token_ids=[4])
    grammar = gxg.Grammar.from_lark(text, tokenizer_info=info)
    assert items in str(grammar)
    compiled = gxg.GrammarCompiler(info).compile_lark(text)
    if xgr is None:
        return
    xinfo = xgr.TokenizerInfo(SPECIAL_VOCAB, xgr.VocabType.RAW, vocab_size=10,
                              stop_token_ids=[4])
    theirs = xgr.GrammarCompiler(xinfo, cache_enabled=False).compile_grammar(
        xgr.Grammar.from_lark(text, tokenizer_info=xinfo))
    rng = random.Random(text)
    ours, xmatcher = gxg.GrammarMatcher(compiled), xgr.GrammarMatcher(theirs)
    for _ in range(8):  # a random walk: the same masks, the same verdicts
        if ours.is_terminated():
            assert xmatcher.is_terminated()
            break
        a, b = gxg.allocate_token_bitmask(1, 10), xgr.allocate_token_bitmask(1, 10)
        ours.fill_next_token_bitmask(a)
        xmatcher.fill_next_token_bitmask(b)
        assert a.tolist() == b.tolist()
        allowed = [t for t in range(10) if (int(a[0, 0]) >> t) & 1]
        if not allowed:
            break
        token = rng.choice(allowed)
        assert ours.accept_token(token) == xmatcher.accept_token(token)


def test_unknown_named_special_tokens_are_errors():
    info = gxg.TokenizerInfo([t.encode() for t in SPECIAL_VOCAB], vocab_size=10)
    with pytest.raises(GrammarError, match="unknown special token <|nope|>"):
        gxg.Grammar.from_lark("start: <|nope|>", tokenizer_info=info)
    with pytest.raises(GrammarError, match="out of the vocabulary range"):
        gxg.GrammarCompiler(info).compile_lark("start: <[99]>")


# ----------------------------------------------------------------------------- rule attributes

ATTRIBUTED = [  # Lark texts with [lazy] / [max_chars=N] on regular bodies
    'start: x "z"\nx[max_chars=2]: /[a-c]*/',
    'start: x "z"\nx[lazy]: /[a-c]*/',
    'start: x "b" x\nx[max_chars=1]: "a"+ "bc"?',
    'start: x y\nx[lazy, max_chars=2]: /[ab]+/\ny[max_chars=0]: "b"*',
    "start: thing\nthing[lazy]: /[a-z]+/",
    'start: head\nhead[lazy]: ( /(\\n|.)*/ "<end>" )',
]


@pytest.mark.parametrize("text", ATTRIBUTED)
def test_rule_attributes_equal_xgrammar(text):
    """XGrammar keeps [lazy] and [max_chars=N] while decoding; gxg compiles them into the
    rule's language (gxg.grammar.rule_attributes): the same verdicts on every short string.
    (The cases where XGrammar's runtime budget answers otherwise, and its refusal of [lazy]
    on bodies that are not terminal-like, are in tests/test_rule_attributes.py.)"""
    strings = ["".join(p) for n in range(5) for p in itertools.product("abcz<", repeat=n)]
    strings += ["ab<end>", "<end>", "x<end>y"]
    grammar = gxg.Grammar.from_lark(text)
    if xgr is None:
        return
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False).compile_grammar(
        xgr.Grammar.from_lark(text))
    ours = gxg.GrammarCompiler(gxg.TokenizerInfo([])).compile_grammar(grammar)
    for string in strings:
        mine, theirs = gxg.GrammarMatcher(ours), xgr.GrammarMatcher(
            compiled, terminate_without_stop_token=True)
        expected = theirs.accept_string(string) and theirs.is_terminated()
        assert (mine.accept_string(string) and mine.is_completed()) == expected, string
