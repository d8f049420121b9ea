"""Specification of the reference recognizer (gxg.testing), the oracle of the other tests.

Tables of (grammar, input, accepts, accepts_prefix) written by hand with the IR dataclasses,
then property tests against two independent oracles: Python's ``re`` (for IR expressions that
are also regexes) and, where installed, XGrammar 0.2.8 (the behaviour gxg must match).
"""
from __future__ import annotations

import codecs
import functools
import itertools
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gxg.grammar.ir import (
    CharClass,
    Choice,
    Grammar,
    GrammarError,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
)
from gxg.testing import (
    Recognizer,
    code_points_with_utf8_prefix,
    grammar_accepts,
    grammar_accepts_prefix,
)

# ----------------------------------------------------------------------------- IR shorthands


def lit(text: str) -> Literal:
    return Literal.of(text)


def cls(*items, negated: bool = False) -> CharClass:
    """A class from single characters ``"a"`` and ranges ``"a-z"`` or ``(lo, hi)`` code points."""
    ranges = []
    for item in items:
        if isinstance(item, tuple):
            ranges.append(item)
        elif len(item) == 3 and item[1] == "-":
            ranges.append((ord(item[0]), ord(item[2])))
        else:
            ranges.append((ord(item), ord(item)))
    return CharClass(tuple(ranges), negated)


def ref(name: str) -> RuleRef:
    return RuleRef(name)


def seq(*items) -> Sequence:
    return Sequence(tuple(items))


def alt(*alternatives) -> Choice:
    return Choice(tuple(alternatives))


def rep(expr, lo: int = 0, hi=None) -> Repeat:
    return Repeat(expr, lo, hi)


def star(expr) -> Repeat:
    return Repeat(expr, 0, None)


def plus(expr) -> Repeat:
    return Repeat(expr, 1, None)


def opt(expr) -> Repeat:
    return Repeat(expr, 0, 1)


def grammar(root, **rules) -> Grammar:
    """A grammar whose root rule is ``root`` and whose other rules are the keyword arguments."""
    return Grammar((Rule("root", root),) + tuple(Rule(name, body) for name, body in rules.items()))


EPS = lit("")

# ----------------------------------------------------------------------------- the tables
#
# Each entry: name -> (grammar, [(input, accepts, accepts_prefix), ...]). Inputs are str (UTF-8
# encoded by the recognizer) or bytes (for split code points and invalid UTF-8).

T, F = True, False

TABLES = {
    # -- literals and the empty string
    "literal": (grammar(lit("abc")), [
        ("", F, T), ("a", F, T), ("ab", F, T), ("abc", T, T), ("abcd", F, F), ("abd", F, F),
        ("b", F, F), ("ABC", F, F)]),
    "empty_string_grammar": (grammar(EPS), [("", T, T), ("a", F, F), (b"\x00", F, F)]),
    "multibyte_literal": (grammar(lit("é中😀")), [
        ("é中😀", T, T), (b"\xc3", F, T), ("é", F, T), (b"\xc3\xa9\xe4\xb8", F, T),
        (b"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98", F, T), (b"\xc3\xaa", F, F), ("é中😀 ", F, F)]),
    "literal_choice_dead_prefix": (grammar(alt(lit("ab"), lit("ac"))), [
        ("a", F, T), ("ab", T, T), ("ac", T, T), ("ad", F, F), ("abc", F, F), ("", F, T)]),
    "nul_byte_literal": (grammar(lit("\x00\n")), [("\x00\n", T, T), ("\x00", F, T), ("\n", F, F)]),

    # -- character classes
    "ascii_class": (grammar(cls("a-c", "x")), [
        ("a", T, T), ("c", T, T), ("x", T, T), ("d", F, F), ("", F, T), ("ab", F, F)]),
    "negated_class": (grammar(cls("a", negated=True)), [
        ("b", T, T), ("a", F, F), ("\n", T, T), ("\x00", T, T), ("é", T, T), ("中", T, T),
        ("😀", T, T), (b"\xc3", F, T), (b"\xf0\x9f", F, T), ("", F, T), ("bb", F, F),
        (b"\x80", F, F), (b"\xff", F, F), (b"\xfe", F, F)]),
    "any_code_point": (grammar(cls(negated=True)), [  # [^] : every code point
        ("a", T, T), ("\x00", T, T), ("\U0010ffff", T, T), ("\ud7ff", T, T), ("\ue000", T, T),
        (b"\xef\xbf\xbf", T, T), (b"\xf4\x8f\xbf", F, T)]),
    "two_byte_class": (grammar(cls("é-ë")), [  # U+E9..U+EB = C3 A9 .. C3 AB
        ("é", T, T), ("ê", T, T), ("ë", T, T), ("ì", F, F), ("e", F, F), (b"\xc3", F, T),
        (b"\xc2", F, F), (b"\xc3\xa8", F, F)]),
    "three_byte_class": (grammar(cls("\u4e00-\u9fff")), [  # CJK: E4 B8 80 .. E9 BF BF
        ("中", T, T), ("\u4e00", T, T), ("\u9fff", T, T), ("\u4dff", F, F), (b"\xe4", F, T),
        (b"\xe4\xb8", F, T), (b"\xe4\xb7", F, F), (b"\xe3", F, F), (b"\xea", F, F)]),
    "four_byte_class": (grammar(cls("\U0001f600-\U0001f64f")), [  # F0 9F 98 80 .. F0 9F 99 8F
        ("😀", T, T), ("\U0001f64f", T, T), ("\U0001f650", F, F), (b"\xf0", F, T),
        (b"\xf0\x9f", F, T), (b"\xf0\x9f\x98", F, T), (b"\xf0\x9f\x99\x80", T, T),
        (b"\xf0\x9f\x9a", F, F), (b"\xf0\x9e", F, F), (b"\xf1", F, F)]),
    "class_around_surrogates": (grammar(CharClass(((0xD000, 0xE000),))), [
        (b"\xed\x9f\xbf", T, T),  # U+D7FF
        (b"\xee\x80\x80", T, T),  # U+E000
        (b"\xed", F, T),  # could still become U+D000..U+D7FF
        (b"\xed\xa0", F, F), (b"\xed\xa0\x80", F, F), (b"\xed\xbf\xbf", F, F)]),  # surrogates
    "invalid_utf8_never_matches": (grammar(plus(cls("a", negated=True))), [
        (b"\xc0\xaf", F, F), (b"\xc0", F, F), (b"\xc1\xbf", F, F),  # overlong 2-byte
        (b"\xe0\x80\xaf", F, F), (b"\xe0\x80", F, F), (b"\xe0\x9f\xbf", F, F),  # overlong 3-byte
        (b"\xf0\x8f\xbf\xbf", F, F), (b"\xf0\x8f", F, F),  # overlong 4-byte
        (b"\xf4\x90\x80\x80", F, F), (b"\xf4\x90", F, F), (b"\xf5", F, F),  # above U+10FFFF
        (b"\xf8\x88\x80\x80\x80", F, F),  # 5-byte forms
        (b"\xed\xa0\x80", F, F), (b"\xed\xb0\x80", F, F),  # surrogates
        (b"\xe2\xa1\xa1\xa1", F, F),  # XGrammar's own test: a stray continuation byte
        (b"\x80", F, F), (b"b\x80", F, F), (b"\xe4b", F, F), (b"\xe4\xb8", F, T),
        (b"\xe4\xb8\xad\xe4\xb8\xad", T, T), (b"bb\xf4\x8f\xbf\xbf", T, T)]),
    "empty_class_is_empty_language": (grammar(CharClass(((0xD800, 0xDFFF),))), [
        ("", F, F), (b"\xed\xa0\x80", F, F)]),
    "class_of_nothing_in_choice": (
        grammar(alt(lit("a"), CharClass(((0, 0x10FFFF),), negated=True))), [
            ("a", T, T), ("", F, T), ("b", F, F)]),

    # -- repetition
    "bounded_repeat": (grammar(rep(lit("a"), 2, 3)), [
        ("", F, T), ("a", F, T), ("aa", T, T), ("aaa", T, T), ("aaaa", F, F)]),
    "exact_repeat_of_multibyte_class": (grammar(rep(cls("é", "中"), 3, 3)), [
        ("éé中", T, T), ("éé", F, T), (b"\xc3\xa9\xc3\xa9\xe4", F, T), ("éé中é", F, F)]),
    "at_least_three": (grammar(rep(lit("a"), 3)), [
        ("aa", F, T), ("aaa", T, T), ("a" * 50, T, T), ("a" * 50 + "b", F, F)]),
    "nested_bounded_repeats": (grammar(rep(rep(lit("ab"), 1, 2), 2, 2)), [
        ("abab", T, T), ("ababab", T, T), ("abababab", T, T), ("ababababab", F, F),
        ("ab", F, T), ("aba", F, T), ("abb", F, F)]),
    "repeat_of_sequence_with_optional": (grammar(rep(seq(opt(lit("a")), lit("b")), 1, 3)), [
        ("b", T, T), ("ab", T, T), ("abbab", T, T), ("bbbb", F, F), ("aab", F, F), ("a", F, T)]),
    "star_plus_optional": (grammar(seq(star(lit("x")), plus(lit("y")), opt(lit("z")))), [
        ("y", T, T), ("xxyyz", T, T), ("xz", F, F), ("xx", F, T), ("z", F, F), ("yzz", F, F)]),
    "repeat_of_nullable": (grammar(star(star(opt(lit("a"))))), [
        ("", T, T), ("a", T, T), ("aaaa", T, T), ("b", F, F)]),
    "bounded_repeat_of_nullable": (grammar(seq(rep(star(lit("a")), 2, 3), lit("b"))), [
        ("b", T, T), ("aaab", T, T), ("", F, T), ("ba", F, F)]),

    # -- recursion
    "right_recursion": (grammar(ref("r"), r=alt(seq(lit("a"), ref("r")), EPS)), [
        ("", T, T), ("aaaa", T, T), ("aab", F, F)]),
    "direct_left_recursion": (
        grammar(ref("expr"),
                expr=alt(seq(ref("expr"), lit("+"), ref("term")), ref("term")),
                term=alt(seq(ref("term"), lit("*"), ref("digit")), ref("digit")),
                digit=cls("0-9")), [
            ("1", T, T), ("1+2*3+4", T, T), ("1+", F, T), ("1+*", F, F), ("+1", F, F),
            ("12", F, F), ("1*2*3", T, T)]),
    "indirect_left_recursion": (  # a -> b "x" | "y";  b -> a "z" | c;  c -> a  : y (z x | x)*
        grammar(ref("a"),
                a=alt(seq(ref("b"), lit("x")), lit("y")),
                b=alt(seq(ref("a"), lit("z")), ref("c")),
                c=ref("a")), [
            ("y", T, T), ("yzx", T, T), ("yx", T, T), ("yzxxzx", T, T), ("yz", F, T),
            ("yzz", F, F), ("x", F, F), ("", F, T)]),
    "cyclic_unit_rules": (grammar(ref("a"), a=alt(ref("b"), lit("x")), b=ref("a")), [
        ("x", T, T), ("", F, T), ("xx", F, F)]),
    "balanced_parentheses": (grammar(ref("p"), p=star(seq(lit("("), ref("p"), lit(")")))), [
        ("", T, T), ("()(())", T, T), ("(()", F, T), ("())", F, F), ("((((((((((", F, T)]),

    # -- ambiguity and nullability
    "ambiguous_b_star_b_star": (grammar(seq(star(ref("b")), star(ref("b"))),
                                        b=alt(lit("x"), EPS)), [
        ("", T, T), ("x", T, T), ("x" * 40, T, T), ("xxy", F, F)]),
    "highly_ambiguous_s_s": (grammar(ref("s"), s=alt(seq(ref("s"), ref("s")), lit("a"), EPS)), [
        ("", T, T), ("a" * 30, T, T), ("a" * 30 + "b", F, F)]),
    "aycock_horspool": (  # the naive Earley nullable-completion bug rejects "x"
        grammar(seq(ref("a"), ref("a"), lit("x")), a=EPS), [("x", T, T), ("", F, T), ("xx", F, F)]),
    "aycock_horspool_deep": (
        grammar(seq(ref("a"), ref("b"), ref("a"), lit("x"), ref("b")),
                a=alt(seq(ref("e"), ref("e")), lit("q")), b=ref("a"), e=alt(EPS, ref("e"))), [
            ("x", T, T), ("qx", T, T), ("qqxq", T, T), ("qqqxq", T, T), ("qqqqx", F, F)]),
    "rule_deriving_only_empty": (grammar(seq(ref("e"), lit("a"), ref("e")),
                                         e=alt(seq(ref("e"), ref("e")), EPS)), [
        ("a", T, T), ("", F, T), ("aa", F, F)]),
    "nullable_chain_of_choices": (
        grammar(seq(opt(ref("x")), opt(ref("y")), opt(ref("z"))),
                x=lit("x"), y=alt(EPS, lit("y")), z=seq(opt(lit("z")), opt(lit("z")))), [
            ("", T, T), ("xyzz", T, T), ("xz", T, T), ("yx", F, F), ("zzz", F, F)]),

    # -- empty languages: no sentence, so not even the empty input is a prefix
    "no_base_case": (grammar(seq(lit("x"), ref("root"))), [("", F, F), ("x", F, F), ("xx", F, F)]),
    "dead_alternative": (grammar(alt(lit("a"), seq(lit("a"), ref("dead"))),
                                 dead=seq(ref("dead"), lit("b"))), [
        ("a", T, T), ("ab", F, F), ("", F, T)]),
    "dead_rule_behind_prefix": (grammar(alt(seq(lit("ab"), ref("dead")), lit("ac")),
                                        dead=seq(lit("x"), ref("dead"))), [
        ("a", F, T), ("ab", F, F), ("ac", T, T)]),
}

CASES = [
    pytest.param(name, data, accepts, prefix, id=f"{name}-{data!r}")
    for name, (_, rows) in TABLES.items() for data, accepts, prefix in rows]


@pytest.fixture(scope="module")
def recognizers():
    return {name: Recognizer(g) for name, (g, _) in TABLES.items()}


@pytest.mark.parametrize("name,data,accepts,prefix", CASES)
def test_table(recognizers, name, data, accepts, prefix):
    recognizer = recognizers[name]
    assert recognizer.accepts(data) is accepts
    assert recognizer.accepts_prefix(data) is prefix


@pytest.mark.parametrize("name,data,accepts,prefix", CASES)
def test_table_incremental_state_agrees(recognizers, name, data, accepts, prefix):
    """Walking byte by byte, each prefix is alive iff accepts_prefix says so."""
    recognizer = recognizers[name]
    data = data.encode("utf-8") if isinstance(data, str) else data
    state = recognizer.start()
    for end in range(len(data) + 1):
        if end:
            state.feed(data[end - 1])
        assert state.position == end
        assert state.alive is recognizer.accepts_prefix(data[:end])
        assert state.accepting is recognizer.accepts(data[:end])
    assert (state.accepting, state.alive) == (accepts, prefix)


def test_sentences_are_prefixes_and_prefixes_are_monotone():
    for name, (g, rows) in TABLES.items():
        recognizer = Recognizer(g)
        for data, _, _ in rows:
            data = data.encode("utf-8") if isinstance(data, str) else data
            alive = [recognizer.accepts_prefix(data[:end]) for end in range(len(data) + 1)]
            assert alive == sorted(alive, reverse=True), (name, data)  # once dead, dead
            if recognizer.accepts(data):
                assert all(alive), (name, data)


# ----------------------------------------------------------------------------- tables in EBNF
#
# The same kind of table, written in EBNF text (gxg.grammar.ebnf); XGrammar reads the very same
# text below, so these also pin the EBNF front-end to XGrammar's dialect.

EBNF_TABLES = {
    "ebnf_escapes": (r'root ::= "\x41\u00e9\U0001F600\n\"" [\-\]a]+', [
        ('Aé😀\n"-', T, T), ('Aé😀\n"]a-', T, T), ('Aé😀\n"', F, T), ("A\\xe9", F, F)]),
    "ebnf_repetition_ranges": ('root ::= ("ab"){2,3} "c"{0,2} [0-9]{1,}', [
        ("abab1", T, T), ("ababcc123", T, T), ("ababccc1", F, F), ("ab1", F, F),
        ("abababab1", F, F), ("ababc", F, T)]),
    "ebnf_left_recursion": ('root ::= root "a" | "b" | root "c" root', [
        ("b", T, T), ("baa", T, T), ("bcb", T, T), ("bacbaa", T, T), ("a", F, F),
        ("bc", F, T)]),
    "ebnf_lookahead_ignored": ('root ::= "x" a "c"\na ::= ("a" | "aa" a) (= "b")', [
        ("xac", T, T), ("xaaac", T, T), ("xab", F, F), ("xa", F, T)]),
    "ebnf_any_code_point": ('root ::= "<" [^]* ">"', [
        ("<>", T, T), ("<\x00\n中>>", T, T), (b"<\xc3", F, T), (b"<\xff", F, F)]),
    "ebnf_nullable_rules": ('root ::= a b a "x" b\na ::= "" | "q"\nb ::= a a', [
        ("x", T, T), ("qx", T, T), ("qqqxqq", T, T), ("qqqqqx", F, F)]),
}

EBNF_CASES = [
    pytest.param(name, data, accepts, prefix, id=f"{name}-{data!r}")
    for name, (_, rows) in EBNF_TABLES.items() for data, accepts, prefix in rows]


@pytest.fixture(scope="module")
def ebnf_recognizers():
    return {name: Recognizer(Grammar.from_ebnf(text)) for name, (text, _) in EBNF_TABLES.items()}


@pytest.mark.parametrize("name,data,accepts,prefix", EBNF_CASES)
def test_ebnf_table(ebnf_recognizers, name, data, accepts, prefix):
    recognizer = ebnf_recognizers[name]
    assert (recognizer.accepts(data), recognizer.accepts_prefix(data)) == (accepts, prefix)


@pytest.mark.parametrize("name,data,accepts,prefix", EBNF_CASES)
def test_ebnf_table_agrees_with_xgrammar(name, data, accepts, prefix):
    xgrammar, compiled = _xgrammar_compiled(EBNF_TABLES[name][0])
    matcher = xgrammar.GrammarMatcher(compiled, terminate_without_stop_token=True)
    prefix_verdict = matcher.accept_string(data)
    assert (prefix_verdict and matcher.is_terminated(), prefix_verdict) == (accepts, prefix)


# ----------------------------------------------------------------------------- API details


def test_str_and_bytes_agree():
    recognizer = Recognizer(grammar(seq(lit("é"), star(cls("a-z")))))
    for text in ["é", "éabc", "e", "éA"]:
        assert recognizer.accepts(text) == recognizer.accepts(text.encode("utf-8"))
        assert recognizer.accepts(text) == recognizer.accepts(bytearray(text.encode("utf-8")))


def test_one_shot_functions():
    g = grammar(lit("ab"))
    assert grammar_accepts(g, "ab") and not grammar_accepts(g, "a")
    assert grammar_accepts_prefix(g, "a") and not grammar_accepts_prefix(g, "b")


def test_root_rule_name_other_than_root():
    g = Grammar((Rule("main", ref("x")), Rule("x", lit("x"))), root_rule_name="main")
    assert grammar_accepts(g, "x") and not grammar_accepts(g, "")


def test_lookahead_is_ignored_for_acceptance():
    # XGrammar 0.2.8 accepts "xac" here although the lookahead (= "b") is violated.
    g = Grammar((Rule("root", seq(lit("x"), ref("a"), lit("c"))),
                 Rule("a", alt(lit("a"), seq(lit("aa"), ref("a"))), lookahead=lit("b"))))
    recognizer = Recognizer(g)
    assert recognizer.accepts("xac")
    assert recognizer.accepts("xaaac")
    assert not recognizer.accepts("xab")


def test_language_is_empty_flag():
    assert Recognizer(TABLES["no_base_case"][0]).language_is_empty
    assert not Recognizer(TABLES["empty_string_grammar"][0]).language_is_empty


def test_state_copy_is_independent():
    recognizer = Recognizer(grammar(alt(lit("ab"), lit("ac"))))
    state = recognizer.start()
    state.feed(ord("a"))
    fork = state.copy()
    assert state.feed(ord("b")) and state.accepting
    assert fork.position == 1 and fork.alive and not fork.accepting
    assert fork.feed(ord("c")) and fork.accepting
    assert not fork.feed(ord("c")) and not fork.alive and not fork.accepting
    assert state.accepting  # untouched by what the fork did
    assert not fork.feed(ord("c")) and fork.position == 4  # dead stays dead, still counting


def test_feed_rejects_non_bytes():
    state = Recognizer(grammar(lit("a"))).start()
    with pytest.raises(ValueError):
        state.feed(256)


def test_ambiguous_grammar_is_not_exponential():
    # Earley is at worst cubic; a backtracking matcher would never finish these. (No timing is
    # asserted: tests check correctness. An exponential recognizer shows up as a hang.)
    recognizer = Recognizer(grammar(ref("s"), s=alt(seq(ref("s"), ref("s")), lit("a"), EPS)))
    assert recognizer.accepts("a" * 80)
    assert not recognizer.accepts("a" * 80 + "b")
    recognizer = Recognizer(grammar(seq(star(ref("b")), star(ref("b")), star(ref("b"))),
                                    b=alt(lit("x"), EPS, lit("xx"))))
    assert recognizer.accepts("x" * 300)


# ----------------------------------------------------------------------------- UTF-8 helper


def _decodes_to_one_code_point(data: bytes) -> bool:
    try:
        return len(data.decode("utf-8")) == 1  # Python's codec is strict: no overlong, surrogate
    except UnicodeDecodeError:
        return False


def _python_decoder_accepts_as_start(prefix: bytes) -> bool:
    """CPython's incremental UTF-8 decoder rejects many hopeless prefixes early (not all of
    them: it lets ED A0 pass), and never rejects one that some completion makes well-formed."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(prefix, final=False)
        return True
    except UnicodeDecodeError:
        return False


def _some_completion_decodes(prefix: bytes) -> bool:
    """Brute force: some continuation bytes complete ``prefix`` into one code point (the search
    is pruned where Python's incremental decoder already gives up, which is sound)."""
    if _decodes_to_one_code_point(prefix):
        return True
    if len(prefix) >= 4 or not _python_decoder_accepts_as_start(prefix):
        return False
    return any(_some_completion_decodes(prefix + bytes((byte,))) for byte in range(0x80, 0xC0))


def test_utf8_complete_sequences_match_python_codec():
    candidates = [bytes((a,)) for a in range(256)]
    candidates += [bytes((a, b)) for a in range(0xC0, 0x100) for b in range(0x70, 0xC8)]
    candidates += [bytes((a, b, c)) for a in range(0xE0, 0xF0) for b in range(0x7F, 0xC1)
                   for c in (0x7F, 0x80, 0x9F, 0xA0, 0xBF, 0xC0)]
    candidates += [bytes((a, b, c, d)) for a in range(0xF0, 0xF8) for b in range(0x7F, 0xC1)
                   for c in (0x80, 0xBF) for d in (0x7F, 0x80, 0xBF, 0xC0)]
    for data in candidates:
        span = code_points_with_utf8_prefix(data)
        complete = span is not None and span[2] and not 0xD800 <= span[0] <= 0xDFFF
        assert complete == _decodes_to_one_code_point(data), data
        if complete:
            assert span[0] == span[1] == ord(data.decode("utf-8"))


def test_utf8_incomplete_prefixes_match_brute_force():
    # A prefix is viable iff its code-point range minus the surrogates is not empty.
    prefixes = [bytes((a,)) for a in range(256)]
    prefixes += [bytes((a, b)) for a in range(0xC0, 0x100) for b in range(0x70, 0xC8)]
    prefixes += [bytes((a, b, c)) for a in range(0xE0, 0xF8) for b in (0x7F, 0x80, 0x8F, 0x90,
                                                                       0x9F, 0xA0, 0xBF, 0xC0)
                 for c in (0x7F, 0x80, 0xBF, 0xC0)]
    for prefix in prefixes:
        span = code_points_with_utf8_prefix(prefix)
        viable = span is not None and not (0xD800 <= span[0] and span[1] <= 0xDFFF)
        assert viable == _some_completion_decodes(prefix), prefix


# ----------------------------------------------------------------------------- random IR = regex
#
# Random expressions over a small alphabet, built as (IR expression, Python regex) pairs. They
# check the recognizer against ``re.fullmatch``; the prefix answers against brute force over all
# extensions up to a proven length bound (see completion_bound).

ALPHABET = ["a", "b", "é", "😀"]  # 1-, 2- and 4-byte code points

literals = st.lists(st.sampled_from(ALPHABET), max_size=2).map("".join).map(
    lambda text: (lit(text), re.escape(text), len(text)))


@st.composite
def classes(draw):
    members = draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=3, unique=True))
    # A negated class must leave some alphabet character, so that completions over the
    # alphabet exist whenever completions exist at all.
    negated = len(members) < len(ALPHABET) and draw(st.booleans())
    body = "".join(re.escape(member) for member in members)
    return cls(*members, negated=negated), f"[{'^' if negated else ''}{body}]", 1


def sequences(children):
    return st.lists(children, min_size=2, max_size=3).map(lambda parts: (
        seq(*(p[0] for p in parts)), "".join(f"(?:{p[1]})" for p in parts),
        sum(p[2] for p in parts)))


def choices(children):
    return st.lists(children, min_size=2, max_size=3).map(lambda parts: (
        alt(*(p[0] for p in parts)), "(?:" + "|".join(p[1] for p in parts) + ")",
        max(p[2] for p in parts)))


REPEAT_BOUNDS = [(0, None), (1, None), (0, 1), (2, 3), (0, 2), (2, None), (3, 3)]


def repeats(children):
    def build(part, bounds):
        lo, hi = bounds
        quantifier = f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
        return rep(part[0], lo, hi), f"(?:{part[1]}){quantifier}", max(lo, 1) * part[2]
    return st.builds(build, children, st.sampled_from(REPEAT_BOUNDS))


# Each triple is (expression, regex, completion_bound): from any viable prefix, some completion
# of at most completion_bound characters exists. Literal: its length; class: 1; sequence: sum
# (finish the current item, then shortest words of the rest); choice: max; e{m,n}:
# max(m, 1) * bound(e) (finish the current iteration, then the missing ones).
expressions = st.recursive(literals | classes(),
                           lambda children: sequences(children) | choices(children)
                           | repeats(children), max_leaves=6)


def hoist_repeated_parts_into_rules(expr, rules):
    """The same language with every repeated part moved into its own rule (exercises RuleRef)."""
    if isinstance(expr, Sequence):
        return seq(*(hoist_repeated_parts_into_rules(item, rules) for item in expr.items))
    if isinstance(expr, Choice):
        return alt(*(hoist_repeated_parts_into_rules(item, rules) for item in expr.alternatives))
    if isinstance(expr, Repeat):
        index = len(rules)
        rules.append(None)  # reserve the slot (and the name) before recursing
        rules[index] = Rule(f"part{index}", hoist_repeated_parts_into_rules(expr.expr, rules))
        return rep(ref(f"part{index}"), expr.min, expr.max)
    return expr


def grammar_of(expr, hoist: bool) -> Grammar:
    if not hoist:
        return grammar(expr)
    rules: list = []
    root = hoist_repeated_parts_into_rules(expr, rules)
    return Grammar((Rule("root", root),) + tuple(rules))


inputs = st.lists(st.sampled_from(ALPHABET), max_size=7).map("".join)


def extensions(max_length: int):
    for length in range(max_length + 1):
        for letters in itertools.product(ALPHABET, repeat=length):
            yield "".join(letters)


def a_code_point_outside_the_alphabet_starting_with(dangling: bytes):
    """Some character not in ALPHABET whose UTF-8 encoding starts with ``dangling``, or None.

    Every expression treats all characters outside the alphabet alike (classes are sets of
    alphabet characters, possibly negated), so one such character stands for all of them.
    """
    length = len(dangling)
    for tail in itertools.product(range(0x80, 0xC0), repeat=4 - length):
        for cut in range(0, 4 - length + 1):
            candidate = dangling + bytes(tail[:cut])
            if _decodes_to_one_code_point(candidate) and candidate.decode() not in ALPHABET:
                return candidate.decode()
    return None


def brute_force_is_prefix(pattern, byte_prefix: bytes, text: str, bound: int) -> bool:
    """Some string that starts with ``byte_prefix`` is in the language.

    ``text`` is the whole input and ``byte_prefix`` a prefix of its encoding. ``head`` is the
    part of ``text`` before the last code-point boundary in ``byte_prefix``; when the prefix
    ends inside a code point, the completion starts with a character that finishes it (one from
    the alphabet or one representative outside it), then completions over the alphabet up to
    ``bound`` characters suffice.
    """
    head = ""
    for char in text:
        if len((head + char).encode("utf-8")) > len(byte_prefix):
            break
        head += char
    dangling = byte_prefix[len(head.encode("utf-8")):]
    if dangling:
        outsider = a_code_point_outside_the_alphabet_starting_with(dangling)
        finishers = [c for c in ALPHABET if c.encode("utf-8").startswith(dangling)]
        finishers += [outsider] if outsider else []
        heads = [head + finisher for finisher in finishers]
    else:
        heads = [head]
    return any(pattern.fullmatch(start + tail) for start in heads for tail in extensions(bound))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions, st.booleans(), st.lists(inputs, min_size=1, max_size=4))
def test_agrees_with_python_re(triple, hoist, texts):
    expr, regex, _ = triple
    recognizer = Recognizer(grammar_of(expr, hoist))
    pattern = re.compile(regex, re.DOTALL)
    for text in texts:
        assert recognizer.accepts(text) == bool(pattern.fullmatch(text)), (regex, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions, st.booleans(), inputs, st.data())
def test_prefix_agrees_with_brute_force(triple, hoist, text, data):
    expr, regex, bound = triple
    assume(bound <= 3)
    recognizer = Recognizer(grammar_of(expr, hoist))
    pattern = re.compile(regex, re.DOTALL)
    encoded = text.encode("utf-8")
    cut = data.draw(st.integers(0, len(encoded)), label="cut")
    for end in sorted({0, cut, len(encoded)}):
        expected = brute_force_is_prefix(pattern, encoded[:end], text, bound)
        assert recognizer.accepts_prefix(encoded[:end]) == expected, (regex, encoded[:end])


# ----------------------------------------------------------------------------- XGrammar oracle
#
# XGrammar 0.2.8 is the behaviour gxg must match. Its EBNF is written here by a minimal printer
# of our own (independent of gxg's printer), so this check needs nothing but the IR.


def _ebnf_char(code_point: int) -> str:
    return f"\\U{code_point:08x}"


def expr_to_xgrammar_ebnf(expr) -> str:
    if isinstance(expr, Literal):
        return '"' + "".join(_ebnf_char(ord(c)) for c in expr.data.decode("utf-8")) + '"'
    if isinstance(expr, CharClass):
        body = "".join(_ebnf_char(lo) if lo == hi else f"{_ebnf_char(lo)}-{_ebnf_char(hi)}"
                       for lo, hi in expr.ranges)
        return f"[{'^' if expr.negated else ''}{body}]"
    if isinstance(expr, RuleRef):
        return expr.name
    if isinstance(expr, Sequence):
        return "(" + " ".join(expr_to_xgrammar_ebnf(item) for item in expr.items) + ")"
    if isinstance(expr, Choice):
        return "(" + " | ".join(expr_to_xgrammar_ebnf(a) for a in expr.alternatives) + ")"
    if isinstance(expr, Repeat):
        upper = "" if expr.max is None else str(expr.max)
        return f"({expr_to_xgrammar_ebnf(expr.expr)}){{{expr.min},{upper}}}"
    raise TypeError(expr)


def grammar_to_xgrammar_ebnf(g: Grammar) -> str:
    return "\n".join(f"{rule.name} ::= {expr_to_xgrammar_ebnf(rule.body)}" for rule in g.rules)


@functools.lru_cache(maxsize=None)
def _xgrammar_compiled(ebnf: str):
    """What xgrammar.testing._get_matcher_from_grammar does, with the compilation cached."""
    xgrammar = pytest.importorskip("xgrammar")
    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([]), cache_enabled=False)
    return xgrammar, compiler.compile_grammar(ebnf)


def xgrammar_verdicts(g: Grammar, data: bytes):
    """XGrammar's (accepts, accepts_prefix) for non-empty ``data``."""
    xgrammar, compiled = _xgrammar_compiled(grammar_to_xgrammar_ebnf(g))
    matcher = xgrammar.GrammarMatcher(compiled, terminate_without_stop_token=True)
    prefix = matcher.accept_string(data)
    return prefix and matcher.is_terminated(), prefix


# Cases where XGrammar cannot be asked: empty languages (it does not decide emptiness, and may
# reject such grammars) and classes that contain no code point. The empty input is skipped too:
# it is not a matcher step.
XGRAMMAR_SKIPPED_TABLES = {"no_base_case", "empty_class_is_empty_language",
                           "class_of_nothing_in_choice", "dead_alternative",
                           "dead_rule_behind_prefix"}

# XGrammar 0.2.8 matches surrogate code points in classes, encoded ED A0 80 .. ED BF BF (e.g.
# [^a] accepts b"\xed\xa0\x80"); gxg's IR says surrogates never match. Pinned as strict xfails
# so that a change on either side is noticed.
SURROGATE_ENCODING = re.compile(rb"\xed[\xa0-\xbf]")
XGRAMMAR_SURROGATE_DIVERGENCE = pytest.mark.xfail(
    strict=True, reason="XGrammar 0.2.8 matches surrogate code points; gxg's IR does not")


def _xgrammar_case(case):
    name, data, _, _ = case.values
    encoded = data.encode("utf-8") if isinstance(data, str) else data
    marks = [XGRAMMAR_SURROGATE_DIVERGENCE] if SURROGATE_ENCODING.search(encoded) else []
    return pytest.param(*case.values, id=case.id, marks=marks)


@pytest.mark.parametrize("name,data,accepts,prefix", [
    _xgrammar_case(case) for case in CASES
    if case.values[0] not in XGRAMMAR_SKIPPED_TABLES and case.values[1]])
def test_table_agrees_with_xgrammar(name, data, accepts, prefix):
    g = TABLES[name][0]
    data = data.encode("utf-8") if isinstance(data, str) else data
    assert xgrammar_verdicts(g, data) == (accepts, prefix)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions, st.booleans(), st.lists(inputs.filter(bool), min_size=1, max_size=3))
def test_random_grammars_agree_with_xgrammar(triple, hoist, texts):
    g = grammar_of(triple[0], hoist)
    recognizer = Recognizer(g)
    for text in texts:
        data = text.encode("utf-8")
        ours = (recognizer.accepts(data), recognizer.accepts_prefix(data))
        assert ours == xgrammar_verdicts(g, data), (grammar_to_xgrammar_ebnf(g), text)


def test_ir_refuses_empty_class_so_tables_use_negated_full_range():
    # Documents why "class_of_nothing_in_choice" is written as a negated full range.
    with pytest.raises(GrammarError):
        CharClass(())


@pytest.mark.parametrize("ebnf", [
    'root ::= "a" root "b" | ""',
    'root ::= (x ",")* x\nx ::= [a-z]{1,3} | "[" root "]"',
    'root ::= [^"\\\\]* "é"? [\\u0100-\\u0200]+',
])
def test_sampled_sentences_are_accepted(ebnf):
    import random
    from gxg.testing import sample_sentence
    grammar = Grammar.from_ebnf(ebnf)
    rng = random.Random(7)
    recognizer = Recognizer(grammar)
    for _ in range(30):
        assert recognizer.accepts(sample_sentence(grammar, rng, max_depth=6))


def test_sampling_an_empty_language_is_an_error():
    import random
    from gxg.testing import sample_sentence
    with pytest.raises(ValueError):
        sample_sentence(Grammar.from_ebnf('root ::= "a" root'), random.Random(0))
