"""Specification of ``gxg.grammar.code_point_dfa``: DFAs over Unicode scalar values.

Oracles:
* Python's ``re`` (``fullmatch`` / ``search`` with DOTALL) on patterns where Python and
  ECMAScript mean the same thing: literals, simple classes, ``.``, groups, alternation and
  quantifiers;
* Boolean combinations of the operands' ``accepts`` for the set operations;
* the reference Earley recognizer (``gxg.testing.Recognizer``) on the IR that ``dfa_to_expr``
  writes;
* a naive Moore refinement over a small alphabet for minimality.

Random patterns are small ASTs over the letters a, b, c (plus ``.`` and ``[^a]``, which also
match every other code point), so strings over "abcd" exercise every distinction they can make.
"""
from __future__ import annotations

import functools
import itertools
import random
import re
import time
from typing import Dict, List, Optional

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from gxg.grammar.code_point_dfa import (
    ALPHABET, DEFAULT_MAX_STATES, Dfa, DfaTooLarge, any_string, complement, dfa_from_expr,
    dfa_from_grammar, dfa_from_regex, dfa_to_expr, difference, equivalent, intersect, is_empty,
    length_between, literal_strings, minimize, nothing, search_language, union,
)
from gxg.grammar.ir import (
    EMPTY, CharClass, Choice, Expr, Grammar, GrammarError, Literal, Repeat, Rule, RuleRef,
    Sequence, iter_subexprs,
)
from gxg.testing import Recognizer

PY_FLAGS = re.DOTALL   # gxg's "." matches every code point, "\n" included
LETTERS = "abcd"
# Every string over a, b, d of length <= 4: short enough to enumerate, long enough for loops.
SMALL_STRINGS = ["".join(p) for n in range(5) for p in itertools.product("abd", repeat=n)]

PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def reject_blow_ups(test):
    """Random patterns occasionally need more than DEFAULT_MAX_STATES states (nested bounded
    repeats: the subset construction builds ~10x the minimal DFA); those examples prove
    nothing here, and the limit has tests of its own."""
    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        try:
            return test(*args, **kwargs)
        except DfaTooLarge:
            reject()
    return wrapper


def full(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text, PY_FLAGS) is not None


# ----------------------------------------------------------------------------- strategies


LEAVES = ["a", "b", "c", "[ab]", "[a-c]", "[^a]", ".", "(?:)"]
QUANTIFIERS = ["*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}"]


def _regexes(max_leaves: int = 8, leaves=LEAVES):
    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
            st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
            st.tuples(inner, st.sampled_from(QUANTIFIERS)).map(lambda t: f"(?:{t[0]}){t[1]}"),
        )
    return st.recursive(st.sampled_from(leaves), extend, max_leaves=max_leaves)


regexes = _regexes()
texts = st.text(alphabet=LETTERS, max_size=8)

# Ranges that end next to the surrogate gap and beyond the BMP; strings over their edges.
UNICODE_LEAVES = [r"[\u00e0-\u4e2d]", r"[^\u00e9]", "\U0001F600", r"[\ud7ff\ue000]",
                  "[\u4e2d-\U0010ffff]", ".", "a"]    # (astral code points written raw)
UNICODE_LETTERS = "a\u00e0\u00e9\u4e01\u4e2d\u4e2e\ud7ff\ue000\U0001F600\U0010ffff"
unicode_regexes = _regexes(leaves=UNICODE_LEAVES)
unicode_texts = st.text(alphabet=UNICODE_LETTERS, max_size=6)


def probe_strings(extra: List[str]) -> List[str]:
    return SMALL_STRINGS + extra


# ----------------------------------------------------------------------------- IR round trip


def to_grammar(dfa: Dfa, char=lambda ranges: CharClass(ranges)) -> Optional[Grammar]:
    """The IR dfa_to_expr writes for ``dfa``, as a Grammar (None for the empty language)."""
    bodies: Dict[str, Optional[Expr]] = {}

    def new_rule(hint: str) -> RuleRef:
        assert hint not in bodies
        bodies[hint] = None
        return RuleRef(hint)

    def define_rule(ref: RuleRef, body: Expr) -> None:
        assert bodies[ref.name] is None
        bodies[ref.name] = body

    expr = dfa_to_expr(dfa, char, new_rule, "s", define_rule=define_rule)
    if expr is None:
        assert not bodies
        return None
    assert all(body is not None for body in bodies.values())
    return Grammar((Rule("root", expr),) + tuple(Rule(n, b) for n, b in bodies.items()))


def expression_depth(expr: Expr) -> int:
    depth = 0
    stack = [(expr, 1)]
    while stack:
        node, level = stack.pop()
        depth = max(depth, level)
        for child in (node.items if isinstance(node, Sequence) else
                      node.alternatives if isinstance(node, Choice) else
                      (node.expr,) if isinstance(node, Repeat) else ()):
            stack.append((child, level + 1))
    return depth


# ----------------------------------------------------------------------------- minimality oracle


def moore_classes(dfa: Dfa, letters: str) -> int:
    """Number of Myhill-Nerode classes among the live states, by naive refinement."""
    n = dfa.num_states
    dead = n
    delta = [[dfa.step(q, ord(c)) for c in letters] for q in range(n)]
    delta = [[dead if t is None else t for t in row] for row in delta] + [[dead] * len(letters)]
    cls = [1 if q in dfa.accepting else 0 for q in range(n)] + [0]
    while True:
        signatures = [(cls[q],) + tuple(cls[t] for t in delta[q]) for q in range(n + 1)]
        numbering = {sig: k for k, sig in enumerate(dict.fromkeys(signatures))}
        new = [numbering[sig] for sig in signatures]
        if len(set(new)) == len(set(cls)):
            break
        cls = new
    return len(set(cls[:n]) - {cls[dead]})


# ----------------------------------------------------------------------------- tables


CASES = [
    # (pattern, accepted, rejected); each also checked against re.fullmatch.
    (r"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
     ["123e4567-e89b-12d3-a456-426614174000"],
     ["123e4567-e89b-02d3-a456-426614174000", "123e4567e89b12d3a456426614174000", ""]),
    (r"^[0-9a-zA-Z_-]{1,255}$", ["a", "A-z_09", "x" * 255], ["", "x" * 256, "a.b"]),
    (r"^[A-Za-z0-9_\-\.]+$", ["a.b-c_D9"], ["", "a b", "ä"]),
    (r"^/(([a-zA-Z0-9._~!$&'()*+,;=:@-]|%[0-9a-fA-F]{2})+"
     r"(/([a-zA-Z0-9._~!$&'()*+,;=:@-]|%[0-9a-fA-F]{2})*)*)?$",
     ["/", "/a", "/a/b/", "/%20x//y", "/~user/a;b=c"], ["", "a", "//", "/%2", "/%zz", "/a b"]),
    (r"(ab)*", ["", "ab", "abab"], ["a", "aba", "ba"]),
    (r"a|b|", ["", "a", "b"], ["ab", "c"]),
    (r"(a|b)*a(a|b){3}", ["aaaa", "babbb"], ["abbbb", "aaa"]),
    (r"[^a]", ["b", "\n", "\U0010ffff", "\ue000"], ["a", "", "bb"]),
    (r".{2,3}", ["ab", "\u00e9\u4e2d", "xyz"], ["a", "abcd"]),
    (r"x{0}y", ["y"], ["xy", ""]),
    (r"(?:a{2}){2,}", ["aaaa", "aaaaaa"], ["aa", "aaaaa"]),
]


@pytest.mark.parametrize("pattern,accept,reject", CASES, ids=[c[0][:30] for c in CASES])
def test_regex_cases(pattern, accept, reject):
    dfa = dfa_from_regex(pattern)
    for text in accept:
        assert dfa.accepts(text), text
        assert full(pattern, text), text
    for text in reject:
        assert not dfa.accepts(text), text
        assert not full(pattern, text), text
    grammar = to_grammar(dfa)
    recognizer = Recognizer(grammar)
    for text in accept + reject:
        assert recognizer.accepts(text) == dfa.accepts(text), text


@pytest.mark.parametrize("pattern,states", [
    (r"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", 37),
    (r"^[0-9a-zA-Z_-]{1,255}$", 256),
    (r"^[A-Za-z0-9_\-\.]+$", 2),
    (r"(a|b)*a(a|b){3}", 16),
    (r"(a|b|c)*", 1),
])
def test_minimal_state_counts(pattern, states):
    assert dfa_from_regex(pattern).num_states == states


def test_unicode_alphabet_excludes_surrogates():
    dot = dfa_from_regex(".")
    assert dot.transitions[0] == tuple((lo, hi, 1) for lo, hi in ALPHABET)
    assert dot.accepts("\U0010ffff") and dot.accepts("\x00")
    assert not dot.accepts("\ud800")            # a lone surrogate is no scalar value
    assert not any_string().accepts("a\udfff")
    assert complement(nothing()) == any_string()
    assert complement(any_string()) == nothing()
    not_a = complement(dfa_from_regex("a"))
    assert not_a.accepts("") and not_a.accepts("aa") and not_a.accepts("\u4e2d")
    assert not not_a.accepts("a")


# ----------------------------------------------------------------------------- basic languages


def test_nothing_and_any_string():
    assert is_empty(nothing()) and nothing().num_states == 1
    assert not is_empty(any_string())
    assert any_string().accepts("") and any_string().accepts("x\n\u4e2d")
    assert minimize(nothing()) == nothing()
    assert minimize(any_string()) == any_string()


@pytest.mark.parametrize("lo,hi", [(0, 0), (0, 3), (2, 2), (2, 5), (0, None), (3, None)])
def test_length_between(lo, hi):
    dfa = length_between(lo, hi)
    for n in range(8):
        expected = lo <= n and (hi is None or n <= hi)
        assert dfa.accepts("\u00e9" * n) == expected
    assert dfa == minimize(dfa)


def test_length_between_limits():
    with pytest.raises(ValueError):
        length_between(3, 2)
    with pytest.raises(DfaTooLarge, match="4000"):
        length_between(0, 10000)
    assert length_between(0, 10000, max_states=10001).num_states == 10001


def test_literal_strings():
    names = ["", "a", "ab", "abc", "b\u4e2d", "x\ud800"]       # the last one is skipped
    dfa = literal_strings(names)
    for text in ["", "a", "ab", "abc", "b\u4e2d"]:
        assert dfa.accepts(text)
    for text in ["abcd", "b", "x\ud800", "x", "c"]:
        assert not dfa.accepts(text)
    assert literal_strings([]) == nothing()
    assert literal_strings([""]) == length_between(0, 0)
    # Common suffixes are shared once minimised: "ax", "bx" -> 3 states.
    assert literal_strings(["ax", "bx"]).num_states == 3


@given(st.lists(st.text(alphabet="abc", max_size=4), max_size=6), texts)
@PROPERTY
@reject_blow_ups
def test_literal_strings_property(names, text):
    dfa = literal_strings(names)
    assert dfa.accepts(text) == (text in names)
    assert difference(any_string(), dfa).accepts(text) == (text not in names)


def test_dfa_checks_its_shape():
    with pytest.raises(ValueError):
        Dfa((), frozenset())
    with pytest.raises(ValueError):
        Dfa((((5, 3, 0),),), frozenset())
    with pytest.raises(ValueError):
        Dfa((((0, 3, 0), (3, 4, 0)),), frozenset())        # overlapping
    with pytest.raises(ValueError):
        Dfa((((0xD000, 0xE000, 0),),), frozenset())        # contains surrogates
    with pytest.raises(ValueError):
        Dfa((((0, 3, 1),),), frozenset())                  # no state 1
    with pytest.raises(ValueError):
        Dfa(((),), frozenset({1}))


# ----------------------------------------------------------------------------- IR input


def test_grammar_with_helper_rules_and_lookahead():
    grammar = Grammar((
        Rule("root", Sequence((RuleRef("word"), Literal(b"="), RuleRef("word"))),
             lookahead=Literal(b"x")),
        Rule("word", Repeat(CharClass(((ord("a"), ord("z")),)), 1, 3)),
    ))
    dfa = dfa_from_grammar(grammar)
    assert dfa.accepts("ab=xyz") and not dfa.accepts("abcd=x") and not dfa.accepts("=a")


@pytest.mark.parametrize("rules", [
    [Rule("root", Choice((Literal(b"a"), Sequence((Literal(b"("), RuleRef("root"),
                                                   Literal(b")"))))))],
    [Rule("root", Choice((EMPTY, Sequence((RuleRef("root"), Literal(b"a"))))))],   # left
    [Rule("root", Sequence((RuleRef("x"), Literal(b"!")))),
     Rule("x", Sequence((Literal(b"a"), RuleRef("y")))),
     Rule("y", Choice((EMPTY, Sequence((RuleRef("x"), Literal(b"b"))))))],
    # A call inside a loop is not a tail call (even though this language happens to be b+).
    [Rule("root", Sequence((Literal(b"b"), Repeat(RuleRef("root"), 0, None))))],
])
def test_non_tail_recursion_is_refused(rules):
    with pytest.raises(GrammarError, match="recursive"):
        dfa_from_grammar(Grammar(tuple(rules)))


def test_tail_recursion_is_a_loop():
    # x ::= "a" y ; y ::= "" | "b" x   (entered twice from root, each entry its own copy)
    grammar = Grammar((
        Rule("root", Sequence((RuleRef("x"), Literal(b"-"), Repeat(RuleRef("x"), 0, 1)))),
        Rule("x", Sequence((Literal(b"a"), RuleRef("y")))),
        Rule("y", Choice((EMPTY, Sequence((Literal(b"b"), RuleRef("x")))))),
    ))
    dfa = dfa_from_grammar(grammar)
    assert dfa == dfa_from_regex("a(ba)*-(a(ba)*)?")
    # Self tail call through a choice and an optional.
    grammar = Grammar((Rule("root", Choice((Literal(b"z"), Sequence((
        Literal(b"a"), Repeat(RuleRef("root"), 0, 1)))))),))
    assert dfa_from_grammar(grammar) == dfa_from_regex("a+z?|z")
    # x ::= "a" | x  is a tail call too.
    grammar = Grammar((Rule("root", Repeat(RuleRef("x"), 0, 2)),
                       Rule("x", Choice((Literal(b"a"), RuleRef("x"))))))
    assert dfa_from_grammar(grammar) == dfa_from_regex("a{0,2}")


def test_negated_class_and_multibyte_literal():
    expr = Sequence((Literal.of("\u00e9\U0001f600"), CharClass(((0, 0x7F),), negated=True)))
    dfa = dfa_from_expr(expr)
    assert dfa.accepts("\u00e9\U0001f600\u4e2d")
    assert not dfa.accepts("\u00e9\U0001f600a")
    assert not dfa.accepts("\u00e9\U0001f600\udc00")


def test_deep_and_long_inputs_do_not_recurse():
    deep = "(" * 2000 + "a" + ")" * 2000
    assert dfa_from_regex(deep).accepts("a")
    long_literal = "ab" * 1500
    dfa = dfa_from_regex(long_literal)
    assert dfa.num_states == 3001 and dfa.accepts(long_literal)
    grammar = to_grammar(dfa)
    assert len(grammar.rules) == 1
    assert Recognizer(grammar).accepts(long_literal)


# ----------------------------------------------------------------------------- limits


def test_blow_up_raises_instead_of_hanging():
    start = time.perf_counter()
    with pytest.raises(DfaTooLarge, match=r"more than 1000 DFA states \(max_states=1000\)"
                       ) as caught:
        dfa_from_regex("(a|b)*a(a|b){20}", max_states=1000)
    assert isinstance(caught.value, GrammarError) and caught.value.max_states == 1000
    with pytest.raises(DfaTooLarge, match=r"200000 NFA states and transitions \(50 x max_"):
        dfa_from_regex("(?:(?:a{1000}){1000}){1000}")
    with pytest.raises(DfaTooLarge):
        search_language(dfa_from_regex("a(a|b){20}"), max_states=500)
    assert time.perf_counter() - start < 10
    # Within the limit the same shape works: 2^(k+1) states for k = 6.
    assert dfa_from_regex("(a|b)*a(a|b){6}").num_states == 128


def test_limit_counts_states_before_minimisation():
    # The subset construction builds 6845 states for this one; 747 are left after minimising.
    nested = "(?:a(?:a[ab](?:[ab]){1,3}){1,3}){1,3}"
    with pytest.raises(DfaTooLarge):
        dfa_from_regex(nested)
    assert dfa_from_regex(nested, max_states=7000).num_states == 747


def test_product_limits():
    with pytest.raises(DfaTooLarge, match="intersection"):
        intersect(any_string(), length_between(0, 3000), max_states=100)
    big = length_between(0, 10000, max_states=20000)
    assert intersect(dfa_from_regex(".*"), big, max_states=20000).num_states == 10001
    with pytest.raises(DfaTooLarge):
        intersect(dfa_from_regex(".*"), big)
    assert DEFAULT_MAX_STATES == 4000


def test_real_patterns_are_fast():
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    dfa_from_regex(uuid)                                    # warm up imports
    start = time.perf_counter()
    dfa_from_regex(uuid)
    dfa_from_regex(r"^[0-9a-zA-Z_-]{1,255}$")
    assert time.perf_counter() - start < 1.0                # ~10 ms on one core


# ----------------------------------------------------------------------------- properties


@given(regexes, st.lists(texts, max_size=10))
@PROPERTY
@reject_blow_ups
def test_regex_dfa_agrees_with_python(pattern, extra):
    dfa = dfa_from_regex(pattern)
    for text in probe_strings(extra):
        assert dfa.accepts(text) == full(pattern, text), (pattern, text)


@given(unicode_regexes, unicode_regexes, st.lists(unicode_texts, min_size=1, max_size=30))
@PROPERTY
@reject_blow_ups
def test_unicode_ranges(p, q, strings):
    a, b = dfa_from_regex(p), dfa_from_regex(q)
    both, a_not_b, not_a = intersect(a, b), difference(a, b), complement(a)
    recognizer = Recognizer(to_grammar(a_not_b)) if not is_empty(a_not_b) else None
    for text in strings:
        in_a, in_b = full(p, text), full(q, text)
        assert a.accepts(text) == in_a and b.accepts(text) == in_b
        assert both.accepts(text) == (in_a and in_b)
        assert a_not_b.accepts(text) == (in_a and not in_b)
        assert not_a.accepts(text) == (not in_a)
        if recognizer is not None:
            assert recognizer.accepts(text) == (in_a and not in_b)


@given(regexes)
@PROPERTY
@reject_blow_ups
def test_minimize_is_minimal_and_canonical(pattern):
    dfa = dfa_from_regex(pattern)
    assert minimize(dfa) == dfa
    assert moore_classes(dfa, LETTERS) == (0 if is_empty(dfa) else dfa.num_states)
    # Renumber the states (start stays 0), add an unreachable state and a dead one reached
    # on "z": minimising gives back exactly the same DFA (canonical numbering).
    n = dfa.num_states
    new_number = [0] + list(range(n - 1, 0, -1))
    rows = [()] * n
    for q, row in enumerate(dfa.transitions):
        moved = [(lo, hi, new_number[t]) for lo, hi, t in row]
        if not any(lo <= ord("z") <= hi for lo, hi, _ in row):
            moved = sorted(moved + [(ord("z"), ord("z"), n + 1)])
        rows[new_number[q]] = tuple(moved)
    rows += [((ord("a"), ord("a"), 0),), ((ord("y"), ord("z"), n + 1),)]
    accepting = frozenset(new_number[q] for q in dfa.accepting) | {n}
    assert minimize(Dfa(tuple(rows), accepting)) == dfa


@given(regexes, regexes, st.lists(texts, max_size=10))
@PROPERTY
@reject_blow_ups
def test_boolean_operations(p, q, extra):
    a, b = dfa_from_regex(p), dfa_from_regex(q)
    both, either = intersect(a, b), union(a, b)
    a_not_b, not_a = difference(a, b), complement(a)
    for text in probe_strings(extra):
        in_a, in_b = a.accepts(text), b.accepts(text)
        assert both.accepts(text) == (in_a and in_b)
        assert either.accepts(text) == (in_a or in_b)
        assert a_not_b.accepts(text) == (in_a and not in_b)
        assert not_a.accepts(text) == (not in_a)
    assert equivalent(a_not_b, intersect(a, complement(b)))
    assert equivalent(complement(not_a), a)
    if is_empty(both):
        assert both == nothing()
        assert not any(a.accepts(t) and b.accepts(t) for t in SMALL_STRINGS)
    assert equivalent(union(both, a_not_b), a)


@given(regexes, st.lists(texts, max_size=10))
@PROPERTY
@reject_blow_ups
def test_search_language_agrees_with_re_search(pattern, extra):
    dfa = search_language(dfa_from_regex(pattern))
    for text in probe_strings(extra):
        assert dfa.accepts(text) == (re.search(pattern, text, PY_FLAGS) is not None)


@given(regexes, st.lists(texts, max_size=6))
@PROPERTY
@reject_blow_ups
def test_emitted_ir_accepts_the_same_strings(pattern, extra):
    dfa = dfa_from_regex(pattern)
    grammar = to_grammar(dfa)
    if grammar is None:
        assert is_empty(dfa)
        return
    recognizer = Recognizer(grammar)
    for text in SMALL_STRINGS[:40] + extra:
        assert recognizer.accepts(text) == dfa.accepts(text), (pattern, text, str(grammar))
    # Reading the IR back gives the same minimal automaton.
    assert dfa_from_grammar(grammar) == dfa


@given(regexes, regexes)
@PROPERTY
@reject_blow_ups
def test_emitted_ir_of_products_round_trips(p, q):
    for dfa in (intersect(dfa_from_regex(p), dfa_from_regex(q)),
                difference(dfa_from_regex(p), dfa_from_regex(q)),
                complement(dfa_from_regex(p))):
        grammar = to_grammar(dfa)
        assert (grammar is None) == is_empty(dfa)
        if grammar is not None:
            assert dfa_from_grammar(grammar) == dfa


# ----------------------------------------------------------------------------- dfa_to_expr shape


@pytest.mark.parametrize("pattern,printed", [
    (r"[a-z]*", "root ::= [a-z]*\n"),
    (r"[a-z]{1,255}", "root ::= [a-z]{1,255}\n"),
    (r"[0-9a-f]{8}-[0-9a-f]{4}", "root ::= [0-9a-f]{8} [\\-] [0-9a-f]{4}\n"),
    (r"a|b", "root ::= [ab]\n"),
])
def test_simple_languages_stay_small(pattern, printed):
    assert str(to_grammar(dfa_from_regex(pattern))) == printed


def test_cycles_become_rules_and_output_is_deterministic():
    dfa = dfa_from_regex(r"(ab|cd)*e")
    first, second = str(to_grammar(dfa)), str(to_grammar(dfa))
    assert first == second
    grammar = to_grammar(dfa)
    assert len(grammar.rules) == 2
    recognizer = Recognizer(grammar)
    assert recognizer.accepts("abcdabe") and not recognizer.accepts("abce")


def test_char_groups_ranges_per_target_and_may_refuse():
    calls = []

    def char(ranges):
        calls.append(ranges)
        if ranges == ((ord("b"), ord("b")),):
            return None                                     # "no spelling": the move is dropped
        return CharClass(ranges)

    dfa = dfa_from_regex(r"[ac-e]x|by|q*")
    grammar = to_grammar(dfa, char)
    assert ((ord("a"), ord("a")), (ord("c"), ord("e"))) in calls    # one call for both ranges
    assert len(calls) == len(set(calls))
    recognizer = Recognizer(grammar)
    assert recognizer.accepts("ax") and recognizer.accepts("qq") and recognizer.accepts("")
    assert not recognizer.accepts("by")
    # Nothing spellable at all: the empty language.
    assert to_grammar(dfa_from_regex("b+"), char) is None
    assert to_grammar(nothing()) is None
    assert str(to_grammar(length_between(0, 0))) == 'root ::= ""\n'


def test_emitted_expressions_stay_shallow():
    # A trie of many long names: without rules the choices would nest 60 deep.
    rng = random.Random(7)
    names = ["".join(rng.choice("ab") for _ in range(60)) for _ in range(40)]
    names += [name[:k] + "c" for name in names[:10] for k in range(0, 60, 3)]   # deep branches
    dfa = literal_strings(names)
    grammar = to_grammar(dfa)
    depth = max(expression_depth(rule.body) for rule in grammar.rules)
    assert depth <= 30, depth
    assert len(grammar.rules) > 1
    recognizer = Recognizer(grammar)
    for name in names[:5]:
        assert recognizer.accepts(name) and not recognizer.accepts(name[:-1])


def test_shared_tails_are_rules_not_copies():
    # Many ways into one long common tail: the tail is written once.
    dfa = dfa_from_regex(r"(a|b|c|d)(xyzxyzxyz[0-9]+)")
    grammar = to_grammar(dfa)
    size = sum(1 for rule in grammar.rules for _ in iter_subexprs(rule.body))
    assert size < 20
