"""Where XGrammar accepts the same EBNF, gxg's masks equal XGrammar's bit for bit (on the first
vocab_size bits) along the same walks, and the step semantics (accept results, termination,
rollback, jump-forward) agree. Skipped only if xgrammar is not installed."""
from __future__ import annotations

import random

import numpy as np
import pytest

xgr = pytest.importorskip("xgrammar")

from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.matcher import GrammarMatcher, allocate_token_bitmask  # noqa: E402
from gxg.tokenizer import TokenizerInfo, VocabType  # noqa: E402
from mask_oracles import mask_to_bool  # noqa: E402
from grammar_zoo import GRAMMAR_ZOO, synthetic_vocab  # noqa: E402

BUILTIN_JSON = None


def both(vocab, stop_id, ebnf):
    """(gxg compiled, xgrammar compiled) for the same vocabulary and grammar."""
    vocab_size = len(vocab) + 3
    info = TokenizerInfo(vocab, VocabType.RAW, vocab_size=vocab_size, stop_token_ids=[stop_id])
    xinfo = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, vocab_size=vocab_size,
                              stop_token_ids=[stop_id])
    if ebnf is None:
        ours = GrammarCompiler(info).compile_builtin_json_grammar()
        theirs = xgr.GrammarCompiler(xinfo, cache_enabled=False).compile_builtin_json_grammar()
    else:
        ours = GrammarCompiler(info).compile_grammar(ebnf)
        theirs = xgr.GrammarCompiler(xinfo, cache_enabled=False).compile_grammar(ebnf)
    return info, ours, theirs


def masks(ours_matcher, theirs_matcher, vocab_size):
    a = allocate_token_bitmask(1, vocab_size)
    b = xgr.allocate_token_bitmask(1, vocab_size)
    need_a = ours_matcher.fill_next_token_bitmask(a)
    need_b = theirs_matcher.fill_next_token_bitmask(b)
    return (mask_to_bool(a[0].numpy(), vocab_size), mask_to_bool(b[0].numpy(), vocab_size),
            need_a, need_b)


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_masks_equal_xgrammar_along_random_walks(name, ebnf, sentences):
    vocab = synthetic_vocab(sentences, seed=7)
    stop_id = len(vocab) - 1
    info, ours, theirs = both(vocab, stop_id, ebnf)
    rng = random.Random(99)
    for walk in range(4):
        m, x = GrammarMatcher(ours), xgr.GrammarMatcher(theirs)
        for step in range(15):
            got, want, need_a, need_b = masks(m, x, info.vocab_size)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} walk {walk} step {step}")
            assert need_a == need_b
            probe = rng.randrange(info.vocab_size)          # any token, maybe rejected
            assert m.accept_token(probe) == x.accept_token(probe)
            if m.is_terminated():
                assert x.is_terminated()
                break
            if probe in np.nonzero(got)[0]:
                continue
            choices = np.nonzero(got)[0].tolist()
            if not choices:
                break
            token = rng.choice(choices)
            assert m.accept_token(token) and x.accept_token(token)
            if token == stop_id:
                assert m.is_terminated() and x.is_terminated()
                break
            if rng.random() < 0.2:                            # roll back sometimes
                m.rollback(1)
                x.rollback(1)


@pytest.mark.parametrize("ebnf,prefix", [
    ('root ::= "abc" [0-9] "xyz"', ""),
    ('root ::= "abc" [0-9] "xyz"', "abc5"),
    ('root ::= "{" ws "\\"key\\"" ws ":" ws [0-9]+ ws "}"\nws ::= [ ]*', "{"),
    ('root ::= "é" "à" | "éb"', ""),
    ('root ::= "a"+ "b"', "a"),
])
def test_jump_forward_matches_xgrammar(ebnf, prefix):
    info = TokenizerInfo([], VocabType.RAW)
    m = GrammarMatcher(GrammarCompiler(info).compile_grammar(ebnf),
                       terminate_without_stop_token=True)
    xinfo = xgr.TokenizerInfo([])
    x = xgr.GrammarMatcher(xgr.GrammarCompiler(xinfo).compile_grammar(ebnf),
                           terminate_without_stop_token=True)
    assert m.accept_string(prefix) == x.accept_string(prefix)
    assert m.find_jump_forward_string() == x.find_jump_forward_string()


def test_termination_and_rollback_match_xgrammar():
    vocab = [b"a", b"b", b"ab", b"</s>"]
    info, ours, theirs = both(vocab, 3, 'root ::= "a" "b"?')
    m, x = GrammarMatcher(ours), xgr.GrammarMatcher(theirs)
    for token in (3, 1, 0, 3):
        assert m.accept_token(token) == x.accept_token(token)
        assert m.is_terminated() == x.is_terminated()
    assert not m.accept_token(0) and not x.accept_token(0)
    m.rollback(1)
    x.rollback(1)
    assert m.is_terminated() == x.is_terminated() is False
    got, want, _, _ = masks(m, x, info.vocab_size)
    np.testing.assert_array_equal(got, want)
