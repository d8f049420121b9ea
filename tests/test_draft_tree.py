"""Speculative decoding on the host (issue 17, item 3): ``GrammarMatcher.traverse_draft_tree``
and ``BatchGrammarMatcher`` with XGrammar 0.2.8's arguments, rows and errors. Masks equal the
sequential fill/accept oracle (``draft_trees.sequential_masks``) on random trees grown from
real walks, and XGrammar's own traversal bit for bit where XGrammar is installed."""
from __future__ import annotations


import numpy as np
import pytest
import torch

import gxg
from gxg.grammar_compiler import GrammarCompiler
from gxg.tokenizer import TokenizerInfo, VocabType
from draft_trees import grow_trees, qwen_json_walks, sequential_masks, spell
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar
from mask_oracles import mask_to_bool

T = lambda *values: torch.tensor(values, dtype=torch.int64)  # noqa: E731
UNTOUCHED = 7  # what the rows hold before a traversal


@pytest.fixture(scope="module")
def just_a():
    """root ::= "a" over [a, b(stop)]: after "a" only the stop token."""
    info = TokenizerInfo([b"a", b"b"], VocabType.RAW, stop_token_ids=[1])
    return GrammarCompiler(info).compile_grammar('root ::= "a"')


def traverse(compiled, tree, **options):
    matcher = gxg.GrammarMatcher(compiled, **options.pop("matcher", {}))
    rows = torch.full((tree[0].shape[0], 1), UNTOUCHED, dtype=torch.int32)
    done = matcher.traverse_draft_tree(*tree, rows, **options)
    return done, [mask_to_bool(r.numpy(), 2).tolist() if int(r) != UNTOUCHED else None
                  for r in rows], matcher


# (tree, rows as [a allowed, stop allowed], None = left alone): XGrammar 0.2.8's answers
SEMANTICS = [
    ("chain: a, then the stop token only",
     (T(1, -1), T(-1, -1), T(0, 0)), [[True, False], [False, True]]),
    ("a second a is rejected: zero row",
     (T(1, 2, -1), T(-1, -1, -1), T(0, 0, 0)), [[True, False], [False, True], [False, False]]),
    ("below a rejected node nothing is visited",
     (T(1, 2, -1), T(-1, -1, -1), T(0, 1, 0)), [[True, False], [False, False], None]),
    ("the stop token terminates: zero row",
     (T(1, 2, -1), T(-1, -1, -1), T(0, 0, 1)), [[True, False], [False, True], [False, False]]),
    ("siblings each start from their parent",
     (T(1, -1, -1), T(-1, 2, -1), T(0, 1, 0)), [[True, False], [False, False], [False, True]]),
    ("a token outside the vocabulary is rejected",
     (T(1, -1, -1), T(-1, 2, -1), T(0, 99, -5)), [[True, False], [False, False], [False, False]]),
    ("a node no path reaches is left alone",
     (T(-1, -1), T(-1, -1), T(0, 0)), [[True, False], None]),
]


@pytest.mark.parametrize("name,tree,rows", SEMANTICS, ids=[s[0] for s in SEMANTICS])
def test_traversal_rows(just_a, name, tree, rows):
    done, got, matcher = traverse(just_a, tree)
    assert done and got == rows
    mask = gxg.allocate_token_bitmask(1, 2)
    matcher.fill_next_token_bitmask(mask)            # the state is the one before the call
    assert mask_to_bool(mask[0].numpy(), 2).tolist() == [True, False]


def test_a_terminated_matcher_has_a_zero_root_and_nothing_else(just_a):
    matcher = gxg.GrammarMatcher(just_a)
    assert matcher.accept_token(0) and matcher.accept_token(1) and matcher.is_terminated()
    rows = torch.full((2, 1), UNTOUCHED, dtype=torch.int32)
    assert matcher.traverse_draft_tree(T(1, -1), T(-1, -1), T(0, 0), rows)
    assert rows.view(-1).tolist() == [0, UNTOUCHED]


def test_terminate_without_stop_token_zeroes_the_completed_node(just_a):
    done, got, _ = traverse(just_a, (T(1, 2, -1), T(-1, -1, -1), T(0, 0, 0)),
                            matcher={"terminate_without_stop_token": True})
    assert done and got == [[True, False], [False, False], None]


def test_depth_beyond_the_rollback_history_and_temperatures(just_a):
    info = TokenizerInfo([b"a", b"b"], VocabType.RAW, stop_token_ids=[1])
    compiled = GrammarCompiler(info).compile_grammar('root ::= "a"*')
    n = 200
    chain = (torch.arange(1, n + 1).where(torch.arange(1, n + 1) < n, torch.tensor(-1)),
             torch.full((n,), -1, dtype=torch.int64), torch.zeros(n, dtype=torch.int64))
    temperatures = torch.zeros(n + 3)
    done, got, _ = traverse(compiled, chain, matcher={"max_rollback_tokens": 2},
                            temperatures=temperatures)
    assert done and got == [[True, True]] * n
    assert temperatures[:n].eq(-1).all() and temperatures[n:].eq(0).all()


def test_a_time_threshold_stops_the_traversal_after_the_root():
    info = TokenizerInfo([b"a", b"b"], VocabType.RAW, stop_token_ids=[1])
    compiled = GrammarCompiler(info).compile_grammar('root ::= "a"*')
    n = 3000
    chain = (torch.cat([torch.arange(1, n), torch.tensor([-1])]),
             torch.full((n,), -1, dtype=torch.int64), torch.zeros(n, dtype=torch.int64))
    done, got, _ = traverse(compiled, chain, time_threshold=1e-7)
    assert not done and got[0] == [True, True] and got[-1] is None


BAD_TREES = [
    ("sibling array shorter", (T(1, -1), T(-1), T(0, 0)), "retrieve_next_sibling has 1"),
    ("int32 arrays", (T(1, -1), torch.tensor([-1, -1], dtype=torch.int32), T(0, 0)),
     "1-D int64"),
    ("the root with a sibling", (T(1, -1), T(1, -1), T(0, 0)), "root .* cannot have a sibling"),
    ("an index out of range", (T(5, -1), T(-1, -1), T(0, 0)), r"retrieve_next_token\[0\] = 5"),
    ("two parents", (T(2, 2, -1), T(-1, -1, -1), T(0, 0, 0)), "more than one parent"),
    ("a cycle through the root", (T(1, 0), T(-1, -1), T(0, 0)), "more than one parent"),
    ("a sibling chain that loops", (T(1, -1, -1), T(-1, 2, 1), T(0, 0, 0)),
     "more than one parent"),
    ("no nodes", (T(), T(), T()), "at least its root"),
]


@pytest.mark.parametrize("name,tree,message", BAD_TREES, ids=[b[0] for b in BAD_TREES])
def test_bad_trees_are_refused(just_a, name, tree, message):
    rows = torch.zeros((max(1, tree[0].shape[0]), 1), dtype=torch.int32)
    with pytest.raises(RuntimeError, match=message):
        gxg.GrammarMatcher(just_a).traverse_draft_tree(*tree, rows)


@pytest.mark.parametrize("rows", [torch.zeros((3, 1), dtype=torch.int32),
                                  torch.zeros((2, 2), dtype=torch.int32),
                                  torch.zeros((2, 1), dtype=torch.int64),
                                  torch.zeros(1, dtype=torch.int32)])
def test_bitmasks_of_the_wrong_shape_are_refused(just_a, rows):
    with pytest.raises(RuntimeError, match="token_bitmask must be"):
        gxg.GrammarMatcher(just_a).traverse_draft_tree(T(1, -1), T(-1, -1), T(0, 0), rows)


# ----------------------------------------------------------------------------- random trees


def check_against_oracle(compiled, vocab_size, prefix, tree):
    matcher = gxg.GrammarMatcher(compiled)
    assert all(matcher.accept_token(t) for t in prefix)
    expected = sequential_masks(matcher, tree, vocab_size)
    rows = torch.full((tree[0].shape[0], (vocab_size + 31) // 32), UNTOUCHED, dtype=torch.int32)
    assert matcher.traverse_draft_tree(*tree, rows)
    for node, want in enumerate(expected):
        if want is None:
            assert (rows[node] == UNTOUCHED).all(), node
        else:
            np.testing.assert_array_equal(rows[node].numpy(), want, err_msg=f"node {node}")
    return rows


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_random_trees_on_the_zoo_equal_the_sequential_oracle(name, ebnf, sentences):
    info = make_info(synthetic_vocab(sentences))
    compiled = GrammarCompiler(info).compile_grammar(zoo_grammar(ebnf))
    for prefix, tree in grow_trees(compiled, info.vocab_size, spell(info, sentences), seed=name):
        check_against_oracle(compiled, info.vocab_size, prefix, tree)


def test_random_trees_on_qwen_equal_the_oracle_and_xgrammar():
    """Trees grown from JSON documents with Qwen's vocabulary: the sequential oracle, and
    XGrammar 0.2.8's traverse_draft_tree from the same state, bit for bit (vocabulary bits)."""
    info, tokenizer, compiled, walks = qwen_json_walks()
    xgr = None
    try:
        import xgrammar as xgr
    except ImportError:
        pass
    if xgr is not None:
        xinfo = xgr.TokenizerInfo.from_huggingface(tokenizer)
        xcompiled = xgr.GrammarCompiler(xinfo, cache_enabled=False).compile_builtin_json_grammar()
    for prefix, tree in grow_trees(compiled, info.vocab_size, walks, seed=3, count=4, size=16):
        rows = check_against_oracle(compiled, info.vocab_size, prefix, tree)
        if xgr is None:
            continue
        theirs = xgr.GrammarMatcher(xcompiled)
        assert all(theirs.accept_token(t) for t in prefix)
        their_rows = torch.full_like(rows, UNTOUCHED)
        assert theirs.traverse_draft_tree(*tree, their_rows)
        for node in range(rows.shape[0]):
            np.testing.assert_array_equal(mask_to_bool(rows[node].numpy(), info.vocab_size),
                                          mask_to_bool(their_rows[node].numpy(), info.vocab_size),
                                          err_msg=f"node {node}")
    if xgr is None:
        pytest.skip("xgrammar is not installed: compared with the sequential oracle only")


# ----------------------------------------------------------------------------- batch API


def test_batch_matcher_fills_its_rows_and_leaves_padding(just_a):
    matchers = [gxg.GrammarMatcher(just_a) for _ in range(2)]
    assert matchers[1].accept_token(0)
    for threads in (1, 2):
        bitmask = torch.full((3, 1), UNTOUCHED, dtype=torch.int32)
        gxg.BatchGrammarMatcher(threads).batch_fill_next_token_bitmask(matchers, bitmask, [2, 0])
        assert [mask_to_bool(r.numpy(), 2).tolist() for r in bitmask[[0, 2]]] == \
            [[False, True], [True, False]]
        assert int(bitmask[1]) == UNTOUCHED


def test_batch_accept_rollback_and_temperatures(just_a):
    batch = gxg.BatchGrammarMatcher
    matchers = [gxg.GrammarMatcher(just_a) for _ in range(2)]
    assert batch.batch_accept_token(matchers, [0, 1]) == [True, False]
    assert batch.batch_accept_string(matchers, ["", b"a"]) == [True, True]
    batch.batch_rollback(matchers, [1, 1])
    assert [m.is_completed() for m in matchers] == [True, False]
    temperatures = torch.zeros(3)
    batch.batch_fill_temperature(matchers, temperatures, [1, 2])
    assert temperatures.tolist() == [0.0, -1.0, -1.0]


BATCH_ERRORS = [
    ("indices of another length",
     lambda b, ms: b.batch_fill_next_token_bitmask(ms, torch.zeros((2, 1), dtype=torch.int32),
                                                   [0]), "size of indices"),
    ("a row outside the bitmask",
     lambda b, ms: b.batch_fill_next_token_bitmask(ms, torch.zeros((2, 1), dtype=torch.int32),
                                                   [0, 2]), "outside the bitmask"),
    ("one row for two matchers",
     lambda b, ms: b.batch_fill_next_token_bitmask(ms, torch.zeros((2, 1), dtype=torch.int32),
                                                   [1, 1]), "more than one matcher"),
    ("a bitmask of the wrong width",
     lambda b, ms: b.batch_fill_next_token_bitmask(ms, torch.zeros((2, 3), dtype=torch.int32)),
     "bitmask must have shape"),
    ("tokens of another length", lambda b, ms: b.batch_accept_token(ms, [0]), "token_ids"),
    ("strings of another length", lambda b, ms: b.batch_accept_string(ms, ["a"]), "strings"),
    ("rollback counts of another length", lambda b, ms: b.batch_rollback(ms, [1]), "num_tokens"),
    ("a rollback past the history", lambda b, ms: b.batch_rollback(ms, 5), "cannot roll back"),
]


@pytest.mark.parametrize("name,call,message", BATCH_ERRORS, ids=[e[0] for e in BATCH_ERRORS])
def test_batch_errors(just_a, name, call, message):
    matchers = [gxg.GrammarMatcher(just_a) for _ in range(2)]
    with pytest.raises(RuntimeError, match=message):
        call(gxg.BatchGrammarMatcher(2), matchers)


@pytest.mark.parametrize("bad", [0, -1, "x", 1.5, True])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises(RuntimeError, match="max_threads"):
        gxg.BatchGrammarMatcher(bad)
