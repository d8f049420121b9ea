"""Token budgets of rules: EBNF/Lark ``name[max_tokens=N]`` and the structural tags'
``any_text`` with ``max_tokens`` (XGrammar 0.2.8's rule attribute), kept while decoding.

Specification (``gxg.grammar.ir`` ``Rule.max_tokens``, ``gxg.compiler.automaton`` token
budgets; XGrammar 0.2.8's behaviour, table below checked against it):
* each occurrence of the rule counts the tokens that start inside it (a token that enters it
  part-way does not count; accept_string counts nothing);
* once N of them are accepted the occurrence is *exhausted*; at a token boundary the exhausted
  occurrences are dropped whenever anything else is left (another parse, or the end of the
  grammar), so an occurrence that can end there must end; when nothing else is left they go on
  (best effort) until one can end (within a token an occurrence may pass a place where it could
  end);
* XGrammar applies the budget when it fills a mask, gxg at every token boundary: the same for a
  decode loop that fills before each token (every walk here does).
Differences from XGrammar 0.2.8, found by random grammars against it and listed in
``XGRAMMAR_DIFFERS`` (the test fails when one stops differing): with two live occurrences of
one budgeted rule (``r r``) its masks let an exhausted one go on; and it applies no
``max_tokens=0`` to an occurrence that starts the output.
Checked: a table of XGrammar's masks; XGrammar's masks and accepts along random walks with
rollbacks; masks against the brute-force oracle (every token walked from every
live stack) along random walks; the CPU batch against one matcher per slot; the CUDA ops against
the CPU ops (marked gpu), eagerly and replayed from a CUDA graph; the readers and their errors.
"""
from __future__ import annotations

import functools

import json
import random

import numpy as np
import pytest
import torch

from batch_states import (cpu_batch_equals_matchers, cuda_graph_replays_equal_cpu,
                          cuda_runs_equal_cpu_runs)
from gxg.compiler.automaton import build_automaton
from gxg.compiler.passes import prepare
from gxg.grammar.ir import Grammar, GrammarError
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher
from grammar_zoo import compile_each, text_world_fixtures
from mask_oracles import brute_force_mask, mask_to_bool, matcher_mask
from xgrammar_oracle import needs_xgrammar, walk_against_xgrammar

VOCAB = ["a", "b", "ab", "E", "N", "END", "x", "xa", "c", "abc", "cd", "e", "<", "/", "a>",
         "</a>", "</s>"]
ID = {text: i for i, text in enumerate(VOCAB)}
STOP = ID["</s>"]
VOCAB_SIZE = len(VOCAB)

GRAMMARS = {
    "two tokens": 'root ::= r "END"\nr[max_tokens=2] ::= [a-z]*',
    "after x": 'root ::= "x" r "END"\nr[max_tokens=2] ::= [a-z]*',
    "none": 'root ::= "x" r "END"\nr[max_tokens=0] ::= [a-z]*',
    "best effort": 'root ::= "x" r "END"\nr[max_tokens=1] ::= "a" | "abc" | "abcde"',
    "text then a tag": 'root ::= "x" r "</a>"\nr[max_tokens=1] ::= ([^<] | "<" [^/])*',
    "twice": 'root ::= r r "END"\nr[max_tokens=1] ::= [a-c]*',
    "both exhausted": ('root ::= "x" r "E" | "x" s "N"\nr[max_tokens=1] ::= "abc"\n'
                       's[max_tokens=1] ::= "abab"'),
    "one exhausted": ('root ::= "x" r "E" | "x" s "N"\nr[max_tokens=1] ::= "abc"\n'
                      's[max_tokens=1] ::= [ab]*'),
    "in a loop": 'root ::= ("x" r)+\nr[max_tokens=1] ::= [a-e]+',
    "nested in a rule": 'root ::= "x" t\nt ::= r "E" | r r "N"\nr[max_tokens=1] ::= "abc" | "a"',
    "three around": 'root ::= r "E" r "N"\nr[max_tokens=3] ::= ([a-e] | "ab" "c")*',
}
LETTERS = "a b ab x xa c abc cd e"

# (grammar, tokens accepted, XGrammar 0.2.8's mask after them, a mask filled before each token)
XGRAMMAR_MASKS = [
    ("two tokens", (), f"{LETTERS} E END"),
    ("two tokens", ("a",), f"{LETTERS} E END"),
    ("two tokens", ("a", "b"), "E END"),                   # two tokens: it ends where it can
    ("after x", ("xa", "b"), f"{LETTERS} E END"),          # "xa" entered part-way: not counted
    ("after x", ("x", "a", "b"), "E END"),
    ("none", ("x",), "E END"),
    ("none", ("xa",), "E END"),                            # its bytes inside a token are free
    ("best effort", ("x", "ab"), "c cd"),                  # cannot end: goes on, past "abc"
    ("best effort", ("x", "ab", "c"), "E END"),
    ("best effort", ("x", "ab", "cd"), "e"),
    ("text then a tag", ("x", "<"), "/"),                  # the other parse is left: only it
    ("text then a tag", ("x", "a", "<"), "/"),
    ("twice", ("a",), "a b ab c abc E END"),
    ("twice", ("a", "b"), "E END"),
    ("both exhausted", ("x", "ab"), "a ab c"),             # nothing else is left: both go on
    ("one exhausted", ("x", "ab"), "N"),
]


def ids(text: str) -> list:
    return sorted(ID[t] for t in text.split())


info, compiled = text_world_fixtures(VOCAB, VOCAB_SIZE, STOP, GRAMMARS)
mask_of = functools.partial(matcher_mask, vocab_size=VOCAB_SIZE)


@pytest.mark.parametrize("name, tokens, expected", XGRAMMAR_MASKS)
def test_masks_follow_xgrammar_table(compiled, name, tokens, expected):
    matcher = GrammarMatcher(compiled[name])
    for token in tokens:
        mask_of(matcher)
        assert matcher.accept_token(ID[token]), token
    assert np.flatnonzero(mask_of(matcher)).tolist() == ids(expected)


def test_strings_count_no_tokens(compiled):
    matcher = GrammarMatcher(compiled["two tokens"])
    assert matcher.accept_string("ab") and matcher.accept_string("c")
    assert np.flatnonzero(mask_of(matcher)).tolist() == ids(f"{LETTERS} E END")
    assert matcher.accept_token(ID["a"]) and matcher.accept_token(ID["b"])
    assert np.flatnonzero(mask_of(matcher)).tolist() == ids("E END")


def test_a_budget_is_per_occurrence_and_rolls_back(compiled):
    matcher = GrammarMatcher(compiled["in a loop"])  # ("x" r)+ with r[max_tokens=1] ::= [a-e]+
    for token in ("x", "a"):
        assert matcher.accept_token(ID[token])
    assert np.flatnonzero(mask_of(matcher)).tolist() == ids("x xa </s>")  # r has ended
    assert not matcher.accept_token(ID["b"])
    assert matcher.accept_token(ID["x"]) and matcher.accept_token(ID["a"])  # a new occurrence
    assert np.flatnonzero(mask_of(matcher)).tolist() == ids("x xa </s>")
    matcher.rollback(3)                                   # back to after the first "x"
    assert matcher.accept_token(ID["ab"])                 # one token, then r ends
    assert np.flatnonzero(mask_of(matcher)).tolist() == ids("x xa </s>")
    matcher.rollback(1)
    assert matcher.accept_token(ID["a"]) and np.flatnonzero(mask_of(matcher)).tolist() == \
        ids("x xa </s>")


STRUCTURAL_TAGS = {  # any_text with a token budget, inside tags, with excludes and max_chars
    "tag": {"type": "tag", "begin": "x", "content": {"type": "any_text", "max_tokens": 2},
            "end": "</a>"},
    "excludes": {"type": "sequence", "elements": [
        {"type": "const_string", "value": "x"},
        {"type": "any_text", "excludes": ["ab"], "max_tokens": 3},
        {"type": "const_string", "value": "END"}]},
    "max_chars too": {"type": "sequence", "elements": [
        {"type": "any_text", "max_tokens": 2, "max_chars": 5},
        {"type": "const_string", "value": "E"}]},
    "triggered": {"type": "triggered_tags", "triggers": ["<"], "tags": [
        {"type": "tag", "begin": "<", "content": {"type": "any_text", "max_tokens": 1},
         "end": "/"}]},
}


@needs_xgrammar
@pytest.mark.parametrize("kind, name", [("ebnf", name) for name in GRAMMARS]
                         + [("structural_tag", name) for name in STRUCTURAL_TAGS])
@pytest.mark.parametrize("seed", range(4))
def test_masks_and_accepts_equal_xgrammar(info, compiled, kind, name, seed):
    import xgrammar
    xinfo = xgrammar.TokenizerInfo(VOCAB, xgrammar.VocabType.RAW, vocab_size=VOCAB_SIZE,
                                   stop_token_ids=[STOP])
    xcompiler = xgrammar.GrammarCompiler(xinfo, cache_enabled=False)
    if kind == "ebnf":
        ours = GrammarMatcher(compiled[name])
        theirs = xgrammar.GrammarMatcher(xcompiler.compile_grammar(GRAMMARS[name]))
    else:
        tag = json.dumps({"type": "structural_tag", "format": STRUCTURAL_TAGS[name]})
        ours = GrammarMatcher(GrammarCompiler(info, cache_enabled=False)
                              .compile_structural_tag(tag))
        theirs = xgrammar.GrammarMatcher(xcompiler.compile_structural_tag(tag))

    walk_against_xgrammar(ours, theirs, VOCAB_SIZE, random.Random(seed), 40)


# A budgeted rule referenced where other bytes are allowed too (its start is a top of its own,
# which the token boundary may drop at once with max_tokens=0; the node that references it must
# not allow its tokens) and the shapes above: the masks against the brute-force oracle.
ORACLE_GRAMMARS = dict(GRAMMARS, **{
    "optional, none": 'root ::= "x" r? "E"\nr[max_tokens=0] ::= "b"',
    "choice, none": 'root ::= "x" (r | "E")\nr[max_tokens=0] ::= "b" [ab]*',
    "two rules, none": 'root ::= r s "E"\nr[max_tokens=0] ::= "c"+\ns[max_tokens=0] ::= "<"',
    "optional, one": 'root ::= "x" (r | "ab") "E"\nr[max_tokens=1] ::= [a-c]+',
    # a lookahead that walks a budgeted rule: it is not a top, so the rule is pushed there
    "lookahead": 'root ::= x r "E"\nx ::= "x" (= r)\nr[max_tokens=1] ::= [a-c]+',
})


@pytest.mark.parametrize("name", list(ORACLE_GRAMMARS))
@pytest.mark.parametrize("seed", range(3))
def test_masks_equal_the_brute_force_oracle(info, name, seed):
    matcher = GrammarMatcher(compile_each(info, {name: ORACLE_GRAMMARS[name]})[name])
    rng = random.Random(seed)
    for step in range(12):
        mine = mask_of(matcher)
        np.testing.assert_array_equal(mine, brute_force_mask(matcher), err_msg=f"step {step}")
        allowed = [t for t in np.flatnonzero(mine).tolist() if t != STOP]
        if not allowed:
            break
        assert matcher.accept_token(rng.choice(allowed))


# (grammar, tokens, XGrammar 0.2.8's mask after them, gxg's): the differences listed above
XGRAMMAR_DIFFERS = [
    ('root ::= r r "E"\nr[max_tokens=1] ::= [a-c] [ab]+', ("b", "ab"),
     "a b ab c abc", "a b ab c"),                      # r r: XGrammar lets the first go on
    ('root ::= r "END"\nr[max_tokens=0] ::= [a-c]*', (),
     "a b ab c abc E END", "E END"),                   # max_tokens=0 at the output's start
]


@needs_xgrammar
@pytest.mark.parametrize("ebnf, tokens, theirs, ours", XGRAMMAR_DIFFERS)
def test_listed_differences_from_xgrammar(info, ebnf, tokens, theirs, ours):
    import xgrammar
    xinfo = xgrammar.TokenizerInfo(VOCAB, xgrammar.VocabType.RAW, vocab_size=VOCAB_SIZE,
                                   stop_token_ids=[STOP])
    x = xgrammar.GrammarMatcher(xgrammar.GrammarCompiler(xinfo, cache_enabled=False)
                                .compile_grammar(ebnf))
    g = GrammarMatcher(compile_each(info, {"g": ebnf})["g"])
    bitmask = xgrammar.allocate_token_bitmask(1, VOCAB_SIZE)
    for token in tokens:
        x.fill_next_token_bitmask(bitmask)
        mask_of(g)
        assert x.accept_token(ID[token]) and g.accept_token(ID[token])
    x.fill_next_token_bitmask(bitmask)
    letters = set(LETTERS.split()) | {"E", "END"}
    got_theirs = [VOCAB[t] for t in np.flatnonzero(mask_to_bool(bitmask[0].numpy(), VOCAB_SIZE))
                  if VOCAB[t] in letters]
    got_ours = [VOCAB[t] for t in np.flatnonzero(mask_of(g)) if VOCAB[t] in letters]
    assert (sorted(got_theirs), sorted(got_ours)) == (sorted(theirs.split()), sorted(ours.split()))


# ----------------------------------------------------------------------------- batches, GPU


@pytest.fixture(scope="module")
def every_grammar(info):
    """The grammars of the table and of the oracle test, compiled (one batch slot each)."""
    return list(compile_each(info, ORACLE_GRAMMARS).values())


def test_cpu_batch_equals_one_matcher_per_slot(info, every_grammar):
    cpu_batch_equals_matchers(info, every_grammar, VOCAB_SIZE, 30, seed=7)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("seed", [0, 1])
def test_cuda_ops_equal_the_cpu_ops(info, every_grammar, seed):
    cuda_runs_equal_cpu_runs(info, every_grammar, VOCAB_SIZE, 40, seed)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_replays_equal_the_cpu_ops(info, every_grammar):
    cuda_graph_replays_equal_cpu(info, every_grammar, VOCAB_SIZE, 30, seed=3)


# ----------------------------------------------------------------------------- readers, errors


def test_the_automaton_chains_one_counter_per_token():
    automaton = build_automaton(prepare(Grammar.from_ebnf(GRAMMARS["two tokens"])))
    counters = np.flatnonzero(automaton.token_count_next >= 0)
    chain = automaton.token_count_next[counters]
    assert len(counters) == 3                               # C(-1), C(0), C(1)
    assert chain.tolist() == [counters[1], counters[2], counters[2]]
    assert not automaton.is_pure_return[counters].any()   # frames of their own


@pytest.mark.parametrize("source, printed", [
    ('root ::= r\nr[max_tokens=3] ::= [a-z]*', "r[max_tokens=3] ::= [a-z]*"),
    ('root ::= r\nr[max_chars=4, max_tokens=0] ::= [a-z]*', "r[max_tokens=0] ::= "),
])
def test_ebnf_keeps_the_budget_and_prints_it(source, printed):
    grammar = Grammar.from_ebnf(source)
    assert grammar.rule("r").max_tokens == int(printed.split("=")[1].split("]")[0])
    assert printed in str(grammar)
    assert Grammar.from_ebnf(str(grammar)).rule("r").max_tokens == grammar.rule("r").max_tokens


def test_lark_and_structural_tags_keep_the_budget():
    lark = Grammar.from_lark('start: "x" text "END"\ntext[max_tokens=4]: /[a-z]*/')
    assert [rule.max_tokens for rule in lark.rules if rule.max_tokens is not None] == [4]
    tag = Grammar.from_structural_tag(
        {"type": "structural_tag", "format": STRUCTURAL_TAGS["tag"]})
    assert [rule.max_tokens for rule in tag.rules if rule.max_tokens is not None] == [2]


@pytest.mark.parametrize("source, fragment", [
    ('root ::= r\nr[max_tokens=2] ::= "(" r ")" | ""', "need a regular body"),
    ('root ::= r\nr[max_tokens=2] ::= Token(1)', "need a regular body"),
    ('root ::= r\nr[max_tokens] ::= "a"', "invalid rule attribute 'max_tokens'"),
    ('root ::= r\nr[lazy] ::= s "x"\ns[max_tokens=1] ::= "a"', "cannot be kept"),
])
def test_ebnf_errors_name_the_rule(source, fragment):
    with pytest.raises(GrammarError) as info:
        Grammar.from_ebnf(source)
    assert fragment in info.value.message
    assert info.value.line >= 2


def test_an_ir_body_that_is_not_right_linear_is_refused():
    from gxg.grammar.ir import Choice, Literal, Rule, RuleRef, Sequence
    grammar = Grammar((Rule("root", RuleRef("r")),
                       Rule("r", Sequence((RuleRef("s"), Literal(b"x"))), max_tokens=2),
                       Rule("s", Choice((Sequence((Literal(b"a"), RuleRef("s"))),
                                         Literal(b"b"))))), "root")
    with pytest.raises(GrammarError, match="tail calls only"):
        build_automaton(prepare(grammar))


def test_a_budget_past_the_node_limit_is_reported():
    with pytest.raises(GrammarError, match="counter nodes"):
        build_automaton(prepare(Grammar.from_ebnf('root ::= r\nr[max_tokens=900] ::= "a"*')),
                        max_nodes=500)


def test_serialized_grammars_keep_their_budgets(info, compiled):
    from gxg.grammar_compiler import CompiledGrammar
    again = CompiledGrammar.deserialize(compiled["two tokens"].serialize(), info)
    matcher = GrammarMatcher(again)
    assert matcher.accept_token(ID["a"]) and matcher.accept_token(ID["b"])
    assert np.flatnonzero(mask_of(matcher)).tolist() == ids("E END")
