"""Specification of the grammar-to-grammar passes (gxg.compiler.passes).

The oracle for "the language did not change" is the reference Earley recognizer
(gxg.testing), which handles left recursion. Each transformed grammar is compared with its
original on EVERY string up to a length bound over the grammar's alphabet (viable prefixes
and sentences both), and on random walks through longer viable prefixes of the original.
"""
from __future__ import annotations

import random
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gxg import grammar_compiler
from gxg.compiler import passes
from gxg.compiler.automaton import DEFAULT_MAX_NODES, LeftRecursionError, build_automaton
from gxg.compiler.passes import (
    MATCHES_NOTHING,
    eliminate_left_recursion,
    expr_size,
    find_left_recursion,
    grammar_size,
    inline_small_rules,
    is_productive,
    least_fixpoint,
    nullable_rules,
    prepare,
    productive_rules,
    remove_dead_rules,
)
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
    iter_rule_refs,
    iter_subexprs,
)
from gxg.testing import Recognizer

from automaton_tables import assert_same_tables, automaton_tables

# ============================================================================ helpers


def ebnf(text: str, root: str = "root") -> Grammar:
    return Grammar.from_ebnf(text, root_rule_name=root)


def assert_same_language(original: Grammar, transformed: Grammar, alphabet: bytes,
                         max_length: int, walks: int = 30, walk_length: int = 24,
                         seed: int = 0) -> None:
    """Both grammars agree on every string over ``alphabet`` up to ``max_length`` bytes — as
    sentences and as viable prefixes — and along random walks through longer viable prefixes
    of ``original`` (with a random wrong byte at the end of each walk)."""
    expected, actual = Recognizer(original), Recognizer(transformed)
    pending = [(b"", expected.start(), actual.start())]
    while pending:
        text, want, got = pending.pop()
        assert (got.alive, got.accepting) == (want.alive, want.accepting), \
            f"{text!r}: expected alive/accepting {want.alive}/{want.accepting}"
        if not want.alive or len(text) == max_length:
            continue
        for byte in alphabet:
            want_next, got_next = want.copy(), got.copy()
            want_next.feed(byte)
            got_next.feed(byte)
            pending.append((text + bytes([byte]), want_next, got_next))

    rng = random.Random(seed)
    for _ in range(walks):
        want, got, text = expected.start(), actual.start(), b""
        while want.alive and len(text) < walk_length:
            if want.accepting and rng.random() < 0.15:
                break
            options = []
            for byte in alphabet:
                probe = want.copy()
                if probe.feed(byte):
                    options.append(byte)
            byte = rng.choice(options) if options else rng.choice(alphabet)
            want.feed(byte)
            got.feed(byte)
            text += bytes([byte])
            assert (got.alive, got.accepting) == (want.alive, want.accepting), \
                f"{text!r}: expected alive/accepting {want.alive}/{want.accepting}"


def assert_no_left_recursion(grammar: Grammar) -> None:
    assert find_left_recursion(grammar) == []


def referenced_names(grammar: Grammar) -> set:
    return {name for rule in grammar.rules
            for expr in (rule.body, rule.lookahead) for name in iter_rule_refs(expr)}


# ============================================================================ the zoo

# (id, EBNF, root, alphabet, exhaustive length bound). Every grammar here except the last
# group is left-recursive.
C_LIKE_EXPRESSIONS = r'''
root ::= expr
expr ::= expr "," assign | assign
assign ::= unary "=" assign | cond
cond ::= lor "?" expr ":" cond | lor
lor ::= lor "||" land | land
land ::= land "&&" bor | bor
bor ::= bor "|" bxor | bxor
bxor ::= bxor "^" band | band
band ::= band "&" eq | eq
eq ::= eq "==" rel | eq "!=" rel | rel
rel ::= rel "<" shift | rel ">" shift | rel "<=" shift | rel ">=" shift | shift
shift ::= shift "<<" add | shift ">>" add | add
add ::= add "+" mul | add "-" mul | mul
mul ::= mul "*" unary | mul "/" unary | mul "%" unary | unary
unary ::= "-" unary | "!" unary | postfix
postfix ::= postfix "[" expr "]" | postfix "(" args? ")" | primary
args ::= args "," assign | assign
primary ::= ident | number | "(" expr ")"
ident ::= [a-z] [a-z0-9]*
number ::= [0-9]+
'''

LEFT_RECURSIVE = [
    ("direct", 'root ::= root "a" | "b"', b"ab", 6),
    ("direct-several", 'root ::= root "a" | root "b" "c" | "c" | "d" root', b"abcd", 5),
    ("direct-right-too", 'root ::= root "+" root | "(" root ")" | "x"', b"+()x", 6),
    ("doubling", 'root ::= root root | "x"', b"x", 8),
    ("doubling-nullable", 'root ::= root root | "x" | ""', b"x", 6),
    ("optional-prefix", 'root ::= root? "x"', b"x", 6),
    ("optional-prefix-2", 'root ::= root? "x" root? | "y"', b"xy", 6),
    ("star-prefix", 'root ::= root* "x"', b"x", 6),
    ("in-repeat-body", 'root ::= (root "x")* "y"', b"xy", 6),
    ("in-plus-body", 'root ::= (root | "a")+ "b"', b"ab", 6),
    ("in-bounded-repeat", 'root ::= (root "x"){2,3} | "y"', b"xy", 7),
    ("nested-choice", 'root ::= (("a" | root) "b" | "c") "d" | "e"', b"abcde", 6),
    ("nested-optional", 'root ::= ("a" | (root "b")?) "c"', b"abc", 6),
    ("nullable-alternative-first", 'root ::= ("" | root "z") "x" | "y"', b"xyz", 6),
    ("bounded-nullable-prefix", 'root ::= ("a"? "b"?){1,2} root "x" | "y"', b"abxy", 6),
    ("bounded-nullable-recursive", 'root ::= (root? "x"?){2,3} "y" | "z"', b"xyz", 6),
    ("indirect-2", 'root ::= a "x" | "y"\na ::= root "z" | "w"', b"xyzw", 6),
    ("indirect-3",
     'root ::= a "x" | "y"\na ::= b "y" | "x"\nb ::= root "z" | a "w"', b"xyzw", 6),
    ("indirect-4",
     'root ::= a "1" | "0"\na ::= b "2"\nb ::= c "3" | root\nc ::= root "4" | a',
     b"01234", 6),
    ("mutual-both-ways",
     'root ::= a "x" | b "y" | "z"\na ::= b "x" | root "y" | "a"\nb ::= a "b" | root | "c"',
     b"xyzabc", 4),
    ("hidden-optional",
     'root ::= b root "x" | "y"\nb ::= "z"?', b"xyz", 6),
    ("hidden-chain",
     'root ::= b c root "x" | "y"\nb ::= "z"*\nc ::= b b', b"xyz", 6),
    ("hidden-indirect",
     'root ::= a b\na ::= b a "x" | ""\nb ::= a "y" | ""', b"xy", 6),
    ("hidden-both-nullable",
     'root ::= a "q"\na ::= b a "x" | c\nb ::= c "y" | ""\nc ::= a? "z" | ""', b"qxyz", 5),
    ("nullable-left-recursive", 'root ::= root "x" | ""', b"x", 6),
    ("nullable-indirect",
     'root ::= a "x" | ""\na ::= root "y" | root', b"xy", 6),
    ("epsilon-cycle", 'root ::= root | "x"', b"x", 4),
    ("epsilon-cycle-indirect", 'root ::= a\na ::= b | "x"\nb ::= a | root | "y"', b"xy", 4),
    ("epsilon-only", 'root ::= root | ""', b"x", 4),
    ("empty-language-rule", 'root ::= "x" | a "y"\na ::= a "z"', b"xyz", 5),
    ("empty-language-root", 'root ::= root "x"', b"x", 4),
    ("self-only", 'root ::= root', b"x", 4),
    ("arithmetic",
     'root ::= expr\n'
     'expr ::= expr "+" term | expr "-" term | term\n'
     'term ::= term "*" factor | term "/" factor | factor\n'
     'factor ::= "(" expr ")" | "-" factor | [0-9]', b"+-*/()1", 5),
    ("list", 'root ::= "[" list "]"\nlist ::= list "," item | item\nitem ::= "a" | "b"',
     b"[],ab", 7),
    ("list-nullable", 'root ::= list\nlist ::= list "," item | item | ""\nitem ::= "a"',
     b",a", 7),
    ("nullable-heavy",
     'root ::= a b root c | "x"\na ::= "a"?\nb ::= a* c\nc ::= ("c" | "")*', b"acx", 5),
    ("lookahead-kept",
     'root ::= a "x"\na ::= a "y" | "z" (= ("y" | "x"))', b"xyz", 6),
    ("c-like-expressions", C_LIKE_EXPRESSIONS, b"x1+*=-(),?:|&", 3),
]

NOT_LEFT_RECURSIVE = [
    ("right-recursive", 'root ::= "x" root | ""', b"x", 6),
    ("ambiguous-stars", 'root ::= b* b*\nb ::= "a" | "ab"', b"ab", 6),
    ("nullable-not-left", 'root ::= b "x" root | "y"\nb ::= "z"', b"xyz", 6),
    ("balanced", 'root ::= "(" root ")" root | ""', b"()", 8),
]

ZOO = LEFT_RECURSIVE + NOT_LEFT_RECURSIVE


def zoo_params(cases):
    return [pytest.param(ebnf(text), alphabet, length, id=name)
            for name, text, alphabet, length in cases]


# ============================================================================ find_left_recursion


FIND_LEFT_RECURSION = [
    ('root ::= "x"', []),
    ('root ::= root "x" | "y"', [["root"]]),
    ('root ::= "x" root | ""', []),
    ('root ::= a "x" | "y"\na ::= root', [["root", "a"]]),
    ('root ::= a\na ::= b\nb ::= c | root\nc ::= "x"', [["root", "a", "b"]]),
    ('root ::= b root | "y"\nb ::= "z"?', [["root"]]),   # hidden behind a nullable rule
    ('root ::= b root | "y"\nb ::= "z"', []),            # b is not nullable
    ('root ::= (root "x")* "y"', [["root"]]),            # left edge of a repeat body
    ('root ::= "a"* ("b"? root)? "c"', [["root"]]),      # several nullable prefixes
    ('root ::= a b\na ::= a "x" | "y"\nb ::= b "z" | "w"', [["a"], ["b"]]),
]


@pytest.mark.parametrize("text, cycles", FIND_LEFT_RECURSION, ids=["none", "direct", "right", "indirect", "indirect-3", "hidden", "not-hidden", "repeat",
        "deep-nullable", "two-cycles"])
def test_find_left_recursion_reports_one_cycle_per_component(text, cycles):
    assert find_left_recursion(ebnf(text)) == cycles


@pytest.mark.parametrize("name, text, alphabet, length", LEFT_RECURSIVE,
                         ids=[case[0] for case in LEFT_RECURSIVE])
def test_zoo_left_recursive_cases_really_are(name, text, alphabet, length):
    assert find_left_recursion(ebnf(text)) != []


# ============================================================================ left recursion


@pytest.mark.parametrize("grammar, alphabet, length", zoo_params(ZOO))
def test_elimination_keeps_the_language_and_removes_left_recursion(grammar, alphabet, length):
    result = eliminate_left_recursion(grammar)
    assert_no_left_recursion(result)
    assert_same_language(grammar, result, alphabet, length)


@pytest.mark.parametrize("grammar, alphabet, length", zoo_params(ZOO))
def test_elimination_keeps_names_root_and_lookaheads(grammar, alphabet, length):
    result = eliminate_left_recursion(grammar)
    assert result.root_rule_name == grammar.root_rule_name
    old = {rule.name: rule for rule in grammar.rules}
    assert [name for name in result.rule_names if name in old] == list(grammar.rule_names)
    for rule in result.rules:
        if rule.name in old:
            assert rule.lookahead == old[rule.name].lookahead
        else:  # new rules are named after the rule they come from, and valid EBNF names
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule.name)
            assert any(rule.name.startswith(name + "_") for name in old)
            assert rule.lookahead is None


@pytest.mark.parametrize("grammar, alphabet, length", zoo_params(NOT_LEFT_RECURSIVE))
def test_grammar_without_left_recursion_comes_back_unchanged(grammar, alphabet, length):
    assert eliminate_left_recursion(grammar) is grammar


@pytest.mark.parametrize("text, expected", [
    # direct recursion needs no new rule: A ::= (betas) (alphas)*
    ('root ::= root "a" | root "b" | "c" | "d"', 'root ::= ("c" | "d") ("a" | "b")*'),
    ('root ::= list\nlist ::= list "," item | item\nitem ::= "i"',
     'root ::= list\nlist ::= item ("," item)*\nitem ::= "i"'),
    ('root ::= root root | "x"', 'root ::= "x" root*'),
    ('root ::= root? "x"', 'root ::= "x" "x"*'),
    # nullable and left-recursive: the empty string stays an alternative of its own
    ('root ::= root "x" | ""', 'root ::= "x" "x"* | ""'),
    # epsilon cycles contribute nothing
    ('root ::= root | "x"', 'root ::= "x"'),
    ('root ::= root | ""', 'root ::= ""'),
    # hidden recursion: the nullable prefix gets a non-empty twin
    ('root ::= b root "x" | "y"\nb ::= "z"?',
     'root ::= (b_nonempty root "x" | "y") "x"*\nb ::= "z"?\nb_nonempty ::= "z"'),
    # indirect: substitute the earlier rule, then solve the later one directly
    ('root ::= a "x" | "y"\na ::= root "z" | "w"',
     'root ::= a "x" | "y"\na ::= ("w" | "yz") "xz"*'),
], ids=["direct", "list", "doubling", "optional", "nullable", "eps-cycle", "eps-only", "hidden",
        "indirect"])
def test_elimination_result_forms(text, expected):
    assert eliminate_left_recursion(ebnf(text)) == ebnf(expected)


def test_rule_with_empty_language_matches_nothing():
    result = eliminate_left_recursion(ebnf('root ::= "x" | a\na ::= a "y"'))
    assert result.rule("a").body == MATCHES_NOTHING
    assert result.rule("root") == ebnf('root ::= "x" | a\na ::= "q"').rule("root")
    assert eliminate_left_recursion(ebnf("root ::= root")).root.body == MATCHES_NOTHING


def test_c_like_expression_grammar_stays_small():
    grammar = ebnf(C_LIKE_EXPRESSIONS)
    result = eliminate_left_recursion(grammar)
    rules_before, nodes_before = grammar_size(grammar)
    rules_after, nodes_after = grammar_size(result)
    assert rules_after == rules_before  # only direct recursion: no new rule
    assert nodes_after <= nodes_before
    assert result.rule("add") == ebnf(
        'root ::= add\nadd ::= mul ("+" mul | "-" mul)*\nmul ::= "m"').rule("add")


def test_long_indirect_cycle_stays_linear():
    n = 300  # r0 -> r1 -> ... -> r299 -> r0, all at left edges
    text = "\n".join(f'r{i} ::= r{(i + 1) % n} "a{i}" | "b{i}"' for i in range(n))
    grammar = ebnf(text, root="r0")
    started = time.perf_counter()
    result = eliminate_left_recursion(grammar)
    assert time.perf_counter() - started < 5
    assert_no_left_recursion(result)
    assert grammar_size(result)[1] < 3 * grammar_size(grammar)[1]


def test_dense_component_grows_polynomially_and_keeps_the_language():
    n = 8  # every rule is a left corner of every rule: the worst case for substitution
    text = "\n".join(
        f"r{i} ::= " + " | ".join(f'r{j} "{"abcdefgh"[j]}"' for j in range(n)) + f' | "{i}"'
        for i in range(n))
    grammar = ebnf(text, root="r0")
    result = eliminate_left_recursion(grammar)
    assert_no_left_recursion(result)
    assert grammar_size(result)[1] < 30 * grammar_size(grammar)[1]
    assert_same_language(grammar, result, b"abcdefgh01234567", 3, walks=10, walk_length=10)


def nullable_chain_at_left_edge(n: int) -> Grammar:
    """root ::= n0 root "x" | "y" with n0 ::= n1 | "a", ..., n{n} ::= "b"?  (all nullable)."""
    rules = [Rule("root", Choice((Sequence((RuleRef("n0"), RuleRef("root"), Literal(b"x"))),
                                  Literal(b"y"))))]
    rules += [Rule(f"n{i}", Choice((RuleRef(f"n{i + 1}"), Literal(b"a")))) for i in range(n)]
    rules.append(Rule(f"n{n}", Repeat(Literal(b"b"), 0, 1)))
    return Grammar(tuple(rules))


def test_long_chain_of_nullable_rules_at_a_left_edge():
    grammar = nullable_chain_at_left_edge(3000)  # deeper than Python's recursion limit
    result = eliminate_left_recursion(grammar)
    assert_no_left_recursion(result)
    assert len(result.rules) == 2 * len(grammar.rules) - 1  # a twin for each n_i
    small = nullable_chain_at_left_edge(5)
    assert_same_language(small, eliminate_left_recursion(small), b"abxy", 5)


# ============================================================================ remove_dead_rules


@pytest.mark.parametrize("text, expected", [
    ('root ::= "x"\nunused ::= "y" unused2\nunused2 ::= "z"', 'root ::= "x"'),
    ('root ::= "x" | a\na ::= "y" a', 'root ::= "x"'),                       # no finite string
    ('root ::= "x" a*\na ::= "y" a', 'root ::= "x"'),                         # zero iterations
    ('root ::= "x" a+ | "z"\na ::= "y" a', 'root ::= "z"'),
    ('root ::= "x" | "y" [^\\x00-\\U0010FFFF]', 'root ::= "x"'),             # empty class
    ('root ::= a "x"\na ::= "y" (= b)\nb ::= "x"', 'root ::= a "x"\na ::= "y" (= b)\nb ::= "x"'),
    ('root ::= a "x"\na ::= "y" (= b | c)\nb ::= "x"\nc ::= "q" c',
     'root ::= a "x"\na ::= "y" (= b)\nb ::= "x"'),                             # pruned lookahead
    ('root ::= a "x"\na ::= "y" (= c)\nc ::= "q" c', 'root ::= a "x"\na ::= "y"'),  # dropped
], ids=["unreachable", "non-productive-alt", "non-productive-star", "non-productive-plus",
        "empty-class", "lookahead-keeps-rule", "lookahead-pruned", "lookahead-dropped"])
def test_remove_dead_rules(text, expected):
    assert remove_dead_rules(ebnf(text)) == ebnf(expected)


def test_surrogate_only_class_is_dead():
    surrogates = CharClass(((0xD800, 0xDFFF),))
    grammar = Grammar((Rule("root", Choice((Literal(b"x"), surrogates))),))
    assert remove_dead_rules(grammar) == ebnf('root ::= "x"')


@pytest.mark.parametrize("text", ['root ::= root "x"', 'root ::= a\na ::= "x" a', "root ::= root",
                                  'root ::= "a" [^\\x00-\\U0010FFFF]'])
def test_empty_language_becomes_a_root_that_matches_nothing(text):
    result = remove_dead_rules(ebnf(text))
    assert result == Grammar((Rule("root", MATCHES_NOTHING),))
    assert Recognizer(result).language_is_empty
    assert not Recognizer(result).accepts_prefix(b"")


def test_remove_dead_rules_returns_clean_grammar_unchanged():
    """A clean grammar comes back equal, its rules the same objects, and marked pruned; a
    pruned grammar with nothing unreachable comes back as it is."""
    grammar = ebnf('root ::= a "x"\na ::= "y" a | ""')
    result = remove_dead_rules(grammar)
    assert result == grammar and not grammar.pruned and result.pruned
    assert all(a is b for a, b in zip(result.rules, grammar.rules))
    assert remove_dead_rules(result) is result


def test_remove_dead_rules_keeps_untouched_rules_as_they_are():
    """Rules with nothing to prune come back as the same objects (no re-normalisation); a
    pruned body is rebuilt in normal form."""
    grammar = ebnf('root ::= a b\na ::= "x" ("y" | c) "z"\nb ::= "q"*\nc ::= "w" c\n'
                   'unused ::= "u"')
    result = remove_dead_rules(grammar)
    by_name = {rule.name: rule for rule in grammar.rules}
    assert [rule.name for rule in result.rules] == ["root", "a", "b"]
    assert result.rules[0] is by_name["root"] and result.rules[2] is by_name["b"]
    assert result.rules[1] == Rule("a", Literal(b"xyz"))


def assert_pruned(grammar: Grammar) -> None:
    """What ``Grammar.pruned`` promises, checked part by part: every rule derives some finite
    string, and so does every part of every body and lookahead."""
    productive = productive_rules(grammar)
    assert productive == set(grammar.rule_names)
    for rule in grammar.rules:
        for part in iter_subexprs(rule.body):
            assert is_productive(part, productive), (rule.name, part)
        for part in iter_subexprs(rule.lookahead):
            assert is_productive(part, productive), (rule.name, part)


SURROGATE_CLASS = CharClass(((0xD800, 0xDFFF),))


# (body, lookahead) -> Rule.has_empty_class
@pytest.mark.parametrize("body, lookahead, expected", [
    (Literal(b"x"), None, False),
    (Choice((Literal(b"x"), SURROGATE_CLASS)), None, True),
    (Sequence((Literal(b"x"), Repeat(Choice((RuleRef("a"), SURROGATE_CLASS)), 0, None))), None,
     True),
    (Repeat(SURROGATE_CLASS, 0, 0), None, False),  # normalised away
    (Literal(b"x"), Choice((Literal(b"y"), SURROGATE_CLASS)), True),
    (CharClass(((0, 0xD7FF), (0xE000, 0x10FFFF)), negated=True), None, True),
    (CharClass(((0, 0xD7FF),), negated=True), None, False),
], ids=["literal", "in-choice", "deep", "zero-repeats", "in-lookahead", "negated-all",
        "negated-some"])
def test_rule_knows_whether_a_class_matches_nothing(body, lookahead, expected):
    assert Rule("r", body, lookahead).has_empty_class is expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0x10FFFF), st.integers(0, 0x3000)), min_size=1,
                max_size=4), st.booleans(), st.booleans())
def test_char_class_matches_nothing_exactly_when_it_has_no_code_point(starts, negated,
                                                                      near_surrogates):
    offset = 0xD7F0 if near_surrogates else 0
    ranges = tuple((min(lo + offset, 0x10FFFF), min(lo + offset + width, 0x10FFFF))
                   for lo, width in starts)
    expr = CharClass(ranges, negated)
    assert expr.matches_nothing() == (not expr.effective_ranges())


def test_a_clean_grammar_is_marked_pruned_without_rewriting_a_body():
    grammar = ebnf('root ::= a "x" | [a-z]*\na ::= "y" a | ""\nunused ::= "u"')
    result = remove_dead_rules(grammar)
    assert result.pruned and result.rule_names == ("root", "a")
    assert all(a is b for a, b in zip(result.rules, grammar.rules))


# bodies -> the least fixpoint of "derives a finite string"; names a body references but that
# are not defined never hold
FIXPOINT_TABLE = [
    ({"a": Literal(b"x")}, {"a"}),
    ({"a": RuleRef("a")}, set()),
    ({"a": Choice((RuleRef("a"), Literal(b"x")))}, {"a"}),
    ({"a": Sequence((RuleRef("b"), Literal(b"x"))), "b": Sequence((RuleRef("a"), Literal(b"y")))},
     set()),
    ({"a": Choice((RuleRef("b"), Literal(b"x"))), "b": Sequence((RuleRef("a"), Literal(b"y")))},
     {"a", "b"}),
    ({"a": RuleRef("undefined")}, set()),
    ({"a": Choice((RuleRef("undefined"), Literal(b"x")))}, {"a"}),
    ({"a": Repeat(RuleRef("undefined"), 0, None)}, {"a"}),
]


@pytest.mark.parametrize("bodies, expected", FIXPOINT_TABLE)
def test_least_fixpoint(bodies, expected):
    assert least_fixpoint(bodies, is_productive) == expected


@pytest.mark.parametrize("cyclic", [False, True], ids=["chain", "cycle"])
def test_least_fixpoint_looks_at_each_rule_of_a_chain_a_bounded_number_of_times(cyclic):
    """r0 ::= r1 "x", ..., the last rule a literal (listed first), and with ``cyclic`` each
    rule also refers back to r0: a sweep of the rules per rule added was quadratic."""
    n = 2000
    bodies = {f"r{n}": Literal(b"y")}
    for i in range(n):
        step = Sequence((RuleRef(f"r{i + 1}"), Literal(b"x")))
        bodies[f"r{i}"] = Choice((step, Sequence((RuleRef("r0"), RuleRef(f"r{i + 1}"))))) \
            if cyclic else step
    looks = []

    def holds(body, productive):
        looks.append(body)
        return is_productive(body, productive)

    assert least_fixpoint(bodies, holds) == set(bodies)
    assert len(looks) <= 3 * len(bodies)


def test_analyses_are_iterative_on_long_chains():
    n = 5000  # r0 ::= r1 "x", ..., a chain far deeper than Python's recursion limit
    rules = [Rule(f"r{i}", Sequence((RuleRef(f"r{i + 1}"), Literal(b"x")))) for i in range(n)]
    rules.append(Rule(f"r{n}", Repeat(Literal(b"y"), 0, 1)))
    grammar = Grammar(tuple(rules), "r0")
    assert len(nullable_rules(grammar)) == 1
    assert len(productive_rules(grammar)) == n + 1
    assert find_left_recursion(grammar) == []
    assert remove_dead_rules(grammar) == grammar
    assert eliminate_left_recursion(grammar) is grammar
    inline_small_rules(grammar)


# ============================================================================ inline_small_rules


@pytest.mark.parametrize("text, expected", [
    ('root ::= a a\na ::= "x" | "y"', 'root ::= ("x" | "y") ("x" | "y")\na ::= "x" | "y"'),
    ('root ::= a\na ::= b "y"\nb ::= "x"', 'root ::= "xy"\na ::= "xy"\nb ::= "x"'),   # chains
    ('root ::= a "x"\na ::= "y" (= "x")', 'root ::= a "x"\na ::= "y" (= "x")'),       # lookahead
    ('root ::= a\na ::= "(" a ")" | "x"', 'root ::= a\na ::= "(" a ")" | "x"'),       # recursive
    ('root ::= "x"\nb ::= root', 'root ::= "x"\nb ::= root'),                          # the root
    ('root ::= "x" (= a)\na ::= "y"', 'root ::= "x" (= "y")\na ::= "y"'),             # lookaheads
], ids=["fragment", "chain", "has-lookahead", "recursive", "root", "into-lookahead"])
def test_inline_small_rules(text, expected):
    assert inline_small_rules(ebnf(text)) == ebnf(expected)


def test_inlining_respects_both_size_limits():
    big = " ".join(['"a"'] * 5)
    grammar = ebnf(f'root ::= a b a b a\na ::= "x" | "y" | "z"\nb ::= "q" ({big} | "w")')
    sizes = {"a": expr_size(grammar.rule("a").body), "b": expr_size(grammar.rule("b").body)}
    result = inline_small_rules(grammar, max_rule_size=sizes["a"], max_result_size=12)
    assert expr_size(result.root.body) <= 12
    remaining = list(iter_rule_refs(result.root.body))
    assert remaining.count("b") == 2  # too big for max_rule_size
    assert 0 < remaining.count("a") < 3  # some fitted, the rest did not
    assert_same_language(grammar, result, b"xyzqaw", 5)


@pytest.mark.parametrize("grammar, alphabet, length", zoo_params(ZOO))
def test_inlining_keeps_language_adds_no_left_recursion_and_is_idempotent(grammar, alphabet,
                                                                          length):
    without_recursion = eliminate_left_recursion(grammar)
    result = inline_small_rules(without_recursion, max_rule_size=40, max_result_size=120)
    assert_no_left_recursion(result)
    assert inline_small_rules(result, max_rule_size=40, max_result_size=120) == result
    assert_same_language(grammar, result, alphabet, min(length, 5), walks=10)


# ============================================================================ prepare


@pytest.mark.parametrize("grammar, alphabet, length", zoo_params(ZOO))
def test_prepare_pipeline(grammar, alphabet, length):
    result = prepare(grammar)
    assert_no_left_recursion(result)
    assert result.root_rule_name.startswith("root_wrapper")
    assert result.root.body == RuleRef(grammar.root_rule_name)
    assert result.root_rule_name not in referenced_names(result)
    assert_same_language(grammar, result, alphabet, length)
    assert prepare(result) == result  # idempotent
    # new names are valid EBNF: the result prints and parses back to itself
    assert ebnf(str(result), root=result.root_rule_name) == result


def test_prepare_of_empty_language():
    result = prepare(ebnf('root ::= a\na ::= a "x"'))
    assert result == Grammar((Rule("root_wrapper", RuleRef("root")),
                              Rule("root", MATCHES_NOTHING)), "root_wrapper")


def test_prepare_does_not_clash_with_a_rule_named_root_wrapper():
    grammar = ebnf('root ::= root_wrapper root_wrapper\nroot_wrapper ::= "x" | "y" root_wrapper')
    result = prepare(grammar)
    assert result.root_rule_name == "root_wrapper_1"
    assert_same_language(grammar, result, b"xy", 6)


def test_sizes_of_c_like_grammar_after_prepare():
    grammar = ebnf(C_LIKE_EXPRESSIONS)
    result = prepare(grammar)
    assert grammar_size(result)[0] <= grammar_size(grammar)[0]
    assert grammar_size(result)[1] <= grammar_size(grammar)[1]


# ============================================================================ random grammars

LETTERS = b"ab"


@st.composite
def small_grammars(draw, empty_class: bool = False):
    """2-4 rules over {a, b}: literals (empty included), a class, references anywhere (left
    edges included), sequences, choices and bounded/unbounded repeats; with ``empty_class``
    also a class that matches nothing (only surrogates)."""
    count = draw(st.integers(2, 4))
    names = ["root"] + [f"r{i}" for i in range(1, count)]
    leaves = st.one_of(
        st.sampled_from([Literal(b""), Literal(b"a"), Literal(b"b"), Literal(b"ab"),
                         CharClass(((ord("a"), ord("b")),))]
                        + ([SURROGATE_CLASS] if empty_class else [])),
        st.sampled_from(names).map(RuleRef),
        st.sampled_from(names).map(RuleRef),  # references twice as likely
    )

    def extend(children):
        return st.one_of(
            st.lists(children, min_size=2, max_size=3).map(lambda xs: Sequence(tuple(xs))),
            st.lists(children, min_size=2, max_size=3).map(lambda xs: Choice(tuple(xs))),
            st.tuples(children, st.integers(0, 2), st.sampled_from([None, 0, 1, 2])).map(
                lambda t: Repeat(t[0], t[1], None if t[2] is None else t[1] + t[2])),
        )

    exprs = st.recursive(leaves, extend, max_leaves=5)
    rules = tuple(Rule(name, draw(exprs)) for name in names)
    return Grammar(rules, "root")


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_grammars())
def test_random_grammars_prepare_keeps_language_and_removes_left_recursion(grammar):
    eliminated = eliminate_left_recursion(grammar)
    assert_no_left_recursion(eliminated)
    prepared = prepare(grammar)
    assert_no_left_recursion(prepared)
    assert prepared.root_rule_name not in referenced_names(prepared)
    assert_same_language(grammar, prepared, LETTERS, 5, walks=4, walk_length=12)
    assert_same_language(grammar, eliminated, LETTERS, 4, walks=0)
    assert prepare(prepared) == prepared


def _reference_derives(expr, rules, empty_only: bool) -> bool:
    """``is_nullable`` / ``is_productive`` by their definition, for the property below."""
    if isinstance(expr, RuleRef):
        return expr.name in rules
    if isinstance(expr, Literal):
        return not (empty_only and expr.data)
    if isinstance(expr, CharClass):
        return not empty_only and bool(expr.effective_ranges())
    if isinstance(expr, Sequence):
        return all(_reference_derives(item, rules, empty_only) for item in expr.items)
    if isinstance(expr, Choice):
        return any(_reference_derives(a, rules, empty_only) for a in expr.alternatives)
    return expr.min == 0 or _reference_derives(expr.expr, rules, empty_only)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_grammars(empty_class=True))
def test_random_grammars_fixpoints_are_kleenes(grammar):
    """``nullable_rules`` / ``productive_rules`` (components sinks first, singletons looked at
    once) equal the plain Kleene iteration from the empty set over the definition."""
    for empty_only, found in ((True, nullable_rules(grammar)), (False, productive_rules(grammar))):
        expected: set = set()
        while True:
            grown = {rule.name for rule in grammar.rules
                     if _reference_derives(rule.body, expected, empty_only)}
            if grown == expected:
                break
            expected = grown
        assert found == expected


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_grammars(empty_class=True))
def test_random_grammars_remove_dead_rules_leaves_a_pruned_grammar(grammar):
    """Both ways through the pass (every leaf derives something, or some part is pruned) keep
    the language and leave what ``pruned`` promises."""
    result = remove_dead_rules(grammar)
    if result.root.body != MATCHES_NOTHING:  # else the empty language's one rule
        assert result.pruned
        assert_pruned(result)
    assert_same_language(grammar, result, LETTERS, 4, walks=2, walk_length=10)


# ============================================================================ skipping the elimination
# gxg.grammar_compiler prepares a grammar without eliminating left recursion first, and does it
# only where build_automaton raises LeftRecursionError: the builder's check must find every
# left recursion the passes find.


def _assert_same_automaton(one, other) -> None:
    assert_same_tables(automaton_tables(one), automaton_tables(other))


def _check_the_builder_finds_left_recursion(grammar: Grammar) -> None:
    fast = prepare(grammar, skip_left_recursion=True)
    if find_left_recursion(fast):
        with pytest.raises(LeftRecursionError):
            build_automaton(fast)
    else:
        build_automaton(fast)


@pytest.mark.parametrize("text", [text for _, text, _, _ in ZOO]
                         + [text for text, _ in FIND_LEFT_RECURSION])
def test_the_automaton_builder_finds_the_left_recursion_the_passes_find(text):
    _check_the_builder_finds_left_recursion(ebnf(text))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_grammars())
def test_random_grammars_the_automaton_builder_finds_left_recursion(grammar):
    _check_the_builder_finds_left_recursion(grammar)


@pytest.mark.parametrize("grammar, alphabet, length", zoo_params(ZOO))
def test_the_compiler_eliminates_left_recursion_only_where_there_is_some(grammar, alphabet,
                                                                        length, monkeypatch):
    """The compiler's automaton is the one of the full passes, and the elimination ran only
    for a grammar with left recursion that the other passes leave (in ``empty-language-*`` and
    ``self-only`` it passes only through rules that derive nothing, which they remove)."""
    calls = []
    original = passes.eliminate_left_recursion
    monkeypatch.setattr(passes, "eliminate_left_recursion",
                        lambda g: calls.append(1) or original(g))
    automaton = grammar_compiler._prepared_automaton(grammar, DEFAULT_MAX_NODES)
    assert bool(calls) == bool(find_left_recursion(prepare(grammar, skip_left_recursion=True)))
    _assert_same_automaton(automaton, build_automaton(prepare(grammar)))


def test_a_budget_error_before_the_check_gets_the_elimination_too(monkeypatch):
    """The builder can stop at a node budget before its left-recursion check: for a grammar
    with left recursion the compiler then builds the eliminated grammar; without, the error
    stands."""
    first_tries = []
    original = grammar_compiler.build_automaton

    def failing_first(grammar, **options):
        if not first_tries:
            first_tries.append(grammar)
            raise GrammarError("too many nodes (a stand-in)")
        return original(grammar, **options)

    monkeypatch.setattr(grammar_compiler, "build_automaton", failing_first)
    recursive = ebnf('root ::= root "a" | "b"')
    automaton = grammar_compiler._prepared_automaton(recursive, DEFAULT_MAX_NODES)
    _assert_same_automaton(automaton, original(prepare(recursive)))
    first_tries.clear()
    with pytest.raises(GrammarError, match="a stand-in"):
        grammar_compiler._prepared_automaton(ebnf('root ::= "a" root | "b"'), DEFAULT_MAX_NODES)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3},
                                      "b": {"enum": [1, "x", None]}}, "required": ["a"]},
    {"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": 3},
                                          {"type": "string", "pattern": "^[a-c]+$"}]}},
    {"type": "object", "additionalProperties": {"type": "number"},
     "propertyNames": {"pattern": "^x"}},
    {"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
     "$ref": "#/$defs/node"},
    {"type": "string", "format": "date-time"},
], ids=["object", "array-anyof", "property-names", "recursive", "format"])
@pytest.mark.parametrize("any_order", [False, True])
def test_json_schema_grammars_marked_pruned_are(schema, any_order):
    grammar = Grammar.from_json_schema(schema, any_order=any_order, strict_mode=False)
    assert grammar.pruned
    assert_pruned(grammar)
