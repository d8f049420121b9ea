"""Token-level grammar items (``Token(...)``, ``ExcludeToken(...)``, ``TokenTagDispatch``) at run
time: the matcher, the CPU batch ops and the CUDA ops.

Specification (``gxg.compiler.automaton``, token-level items; XGrammar 0.2.8's behaviour):
* a token item matches one whole token of its set: special, stop and padding ids never (they
  are not matchable tokens); ``ExcludeToken`` is every matchable token but its ids;
* a token whose bytes reach a token item part-way is rejected; one that reaches it exactly at
  its end is allowed; strings (``accept_string``) never match one;
* a token that both its bytes and a token item accept leaves both stacks.
Checked against XGrammar 0.2.8 mask for mask and accept for accept along random token walks
(with rollbacks) over a small vocabulary whose "special-looking" tokens are plain text, as in
real tokenizers' added tokens; the CPU batch against one matcher per slot; the CUDA ops against
the CPU ops (marked gpu), eagerly and replayed from a CUDA graph; token budgets (a token move
counts as one token) against a hand-derived table.
"""
from __future__ import annotations

import functools

import random

import numpy as np
import pytest
import torch

from batch_states import cpu_batch_equals_matchers, cuda_graph_replays_equal_cpu
from batch_states import cuda_runs_equal_cpu_runs
from batch_states import random_allowed as batch_random_allowed
from gxg.batch import GrammarBatch
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from grammar_zoo import text_world_fixtures
from mask_oracles import mask_to_bool, matcher_mask
from xgrammar_oracle import needs_xgrammar, walk_against_xgrammar

VOCAB = ["a", "b", "ab", "c", " ", "x", "<tool_call>", "</tool_call>", "{", "}", "y",
         "1", "<think>", "</think>", "hello", " world", "abc", "</s>"]
ID = {text: i for i, text in enumerate(VOCAB)}
STOP = ID["</s>"]
VOCAB_SIZE = len(VOCAB) + 3  # three padding ids

GRAMMARS = {
    "token then bytes or any token": 'root ::= "a" Token(6) ("b" | ExcludeToken(1, 2))',
    "free tokens then a call": (
        'root ::= ExcludeToken(6, 17)* Token(6) "{" [a-z]* "}" Token(7)'),
    "think section": 'root ::= Token(12) [^<]* Token(13) "x"',
    "bytes and token both": 'root ::= Token(0) "x" | "a" "y" | "ab"',
    "repeated items": 'root ::= item+\nitem ::= Token(14) | Token(15) " "? | ExcludeToken('
                      + ", ".join(str(i) for i in range(14)) + ', 16) "a"',
    "token dispatch": ('root ::= TokenTagDispatch((6, call), loop_after_dispatch=true, '
                       'excludes=(13))\ncall ::= "{" [a-z]* "}" Token(7)'),
    "token dispatch once": ('root ::= TokenTagDispatch((6, call), (12, think), '
                            'loop_after_dispatch=false)\ncall ::= "{" "1"+ "}"\n'
                            'think ::= [a-z ]* Token(13)'),
}


info, compiled = text_world_fixtures(VOCAB, VOCAB_SIZE, STOP, GRAMMARS)
mask_of = functools.partial(matcher_mask, vocab_size=VOCAB_SIZE)


def test_a_token_item_matches_its_tokens_only(compiled):
    matcher = GrammarMatcher(compiled["token then bytes or any token"])
    assert np.flatnonzero(mask_of(matcher)).tolist() == [ID["a"]]
    assert matcher.accept_token(ID["a"])
    assert np.flatnonzero(mask_of(matcher)).tolist() == [6]
    assert not matcher.accept_token(ID["</tool_call>"])
    assert not matcher.accept_string("<tool_call>")   # bytes never match a token item
    assert matcher.accept_token(6)
    # "b" by its bytes, or any matchable token but 1 and 2 (not the stop, not padding)
    assert np.flatnonzero(mask_of(matcher)).tolist() == sorted(
        set(range(len(VOCAB))) - {1, 2, STOP} | {ID["b"]})
    assert not matcher.accept_token(ID["ab"])
    assert matcher.accept_token(ID["abc"]) and matcher.is_completed()


def test_a_token_whose_bytes_reach_an_item_part_way_is_rejected(compiled):
    matcher = GrammarMatcher(compiled["bytes and token both"])
    # Token(0) is "a" itself, and "a" is the start of "a" "y" and "ab" by its bytes: all three
    # stacks live on
    assert matcher.accept_token(ID["a"])
    assert np.flatnonzero(mask_of(matcher)).tolist() == [ID["b"], ID["x"], ID["y"]]
    matcher.rollback(1)
    assert matcher.accept_token(ID["ab"]) and matcher.is_completed()
    matcher.rollback(1)
    assert not matcher.accept_token(ID["abc"])  # "ab" then "c": nothing follows "ab"


@needs_xgrammar
@pytest.mark.parametrize("name", list(GRAMMARS))
@pytest.mark.parametrize("seed", range(4))
def test_masks_and_accepts_equal_xgrammar(compiled, name, seed):
    import xgrammar
    xinfo = xgrammar.TokenizerInfo(VOCAB, xgrammar.VocabType.RAW, vocab_size=VOCAB_SIZE,
                                   stop_token_ids=[STOP])
    theirs_compiled = xgrammar.GrammarCompiler(xinfo, cache_enabled=False).compile_grammar(
        GRAMMARS[name])
    ours = GrammarMatcher(compiled[name])
    theirs = xgrammar.GrammarMatcher(theirs_compiled)

    walk_against_xgrammar(ours, theirs, VOCAB_SIZE, random.Random(seed), 30,
                          padding_from=len(VOCAB))


BUDGETED_TOKENS = [  # structural tags whose any_tokens region has a token budget
    {"type": "any_tokens", "exclude_tokens": [4], "max_tokens": 2},
    {"type": "sequence", "elements": [
        {"type": "tag", "begin": {"type": "token", "token": 12},
         "content": {"type": "any_tokens", "max_tokens": 3},
         "end": {"type": "token", "token": 13}},
        {"type": "const_string", "value": "x"}]},
]


@needs_xgrammar
@pytest.mark.parametrize("fmt", BUDGETED_TOKENS)
@pytest.mark.parametrize("seed", range(3))
def test_token_budgeted_regions_equal_xgrammar(info, fmt, seed):
    """any_tokens with max_tokens: XGrammar's masks stop the region after that many tokens,
    as gxg's bounded repetition does (XGrammar's accept_token does not enforce the budget, so
    the walk takes only allowed tokens)."""
    import json
    import xgrammar
    tag = json.dumps({"type": "structural_tag", "format": fmt})
    xinfo = xgrammar.TokenizerInfo(VOCAB, xgrammar.VocabType.RAW, vocab_size=VOCAB_SIZE,
                                   stop_token_ids=[STOP])
    ours = GrammarMatcher(GrammarCompiler(info, cache_enabled=False).compile_structural_tag(tag))
    theirs = xgrammar.GrammarMatcher(
        xgrammar.GrammarCompiler(xinfo, cache_enabled=False).compile_structural_tag(tag))
    rng = random.Random(seed)
    for step in range(8):
        mine = mask_of(ours)
        bitmask = xgrammar.allocate_token_bitmask(1, VOCAB_SIZE)
        theirs.fill_next_token_bitmask(bitmask)
        np.testing.assert_array_equal(mine, mask_to_bool(bitmask[0].numpy(), VOCAB_SIZE),
                                      err_msg=str(step))
        token = int(rng.choice(np.flatnonzero(mine)))
        assert ours.accept_token(token) and theirs.accept_token(token)
        if ours.is_terminated():
            assert theirs.is_terminated()
            break


def random_allowed(rows, rng) -> list:
    return batch_random_allowed(rows, rng, VOCAB_SIZE)


def test_cpu_batch_equals_one_matcher_per_slot(info, compiled):
    cpu_batch_equals_matchers(info, list(compiled.values()), VOCAB_SIZE, 40, seed=5)


# "free tokens then a call": ExcludeToken(6, 17)* Token(6) "{" [a-z]* "}" Token(7). A token
# move counts one (a token has at least one byte), so from the start the output needs 4 more
# tokens; a token fits when at most remaining - 1 are needed after it.
FREE = sorted(set(range(len(VOCAB))) - {6, STOP})
LETTERS = [ID[t] for t in ("a", "b", "ab", "c", "x", "y", "hello", "abc")]
BUDGET_CASES = [  # (tokens taken, remaining, allowed after the budget)
    ((), 6, sorted(FREE + [6])),
    ((), 5, sorted(FREE + [6])),
    ((), 4, [6]),                          # only the trigger leaves 3
    ((), 3, sorted(FREE + [6])),                 # no completion fits: the row stays as it was
    ((0, 14), 4, [6]),
    ((6,), 3, [ID["{"]]),
    ((6, ID["{"]), 3, sorted(LETTERS + [ID["}"]])),
    ((6, ID["{"]), 2, [ID["}"]]),          # a letter would leave 2 to go
    ((6, ID["{"], ID["a"], ID["}"]), 1, [7]),
]


@pytest.mark.parametrize("taken, remaining, expected", BUDGET_CASES)
def test_token_budgets_count_a_token_move_as_one_token(compiled, taken, remaining, expected):
    matcher = GrammarMatcher(compiled["free tokens then a call"])
    for token in taken:
        assert matcher.accept_token(token)
    bitmask = allocate_token_bitmask(1, VOCAB_SIZE)
    matcher.fill_next_token_bitmask(bitmask, remaining_tokens=remaining)
    assert np.flatnonzero(mask_to_bool(bitmask[0].numpy(), VOCAB_SIZE)).tolist() == expected


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_token_budgets_equal_the_cpu_ops(info, compiled):
    rows = {}
    for device in ("cpu", "cuda"):
        batch = GrammarBatch(info, device=device, max_batch=len(BUDGET_CASES))
        taken = torch.zeros((len(BUDGET_CASES), 4), dtype=torch.int64)
        for slot, (prefix, _, _) in enumerate(BUDGET_CASES):
            batch.bind(slot, compiled["free tokens then a call"])
            taken[slot, :len(prefix)] = torch.tensor(prefix, dtype=torch.int64)
        lengths = torch.tensor([len(prefix) for prefix, _, _ in BUDGET_CASES])
        batch.accept_tokens(taken.to(device), lengths.to(device))
        for slot, (_, remaining, _) in enumerate(BUDGET_CASES):
            batch.set_token_budget(slot, remaining)
        bitmask = torch.zeros((len(BUDGET_CASES), (VOCAB_SIZE + 31) // 32), dtype=torch.int32,
                              device=device)
        rows[device] = batch.fill_next_token_bitmask(bitmask).cpu().numpy()
    np.testing.assert_array_equal(rows["cpu"], rows["cuda"])
    for slot, (_, _, expected) in enumerate(BUDGET_CASES):
        assert np.flatnonzero(mask_to_bool(rows["cpu"][slot], VOCAB_SIZE)).tolist() == expected


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("seed", [0, 1])
def test_cuda_ops_equal_the_cpu_ops(info, compiled, seed):
    cuda_runs_equal_cpu_runs(info, list(compiled.values()), VOCAB_SIZE, 40, seed)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_replays_equal_the_cpu_ops(info, compiled):
    cuda_graph_replays_equal_cpu(info, list(compiled.values()), VOCAB_SIZE, 40, seed=3)


def test_serialized_grammars_keep_their_token_items(info, compiled):
    """A compiled grammar with token items survives serialize -> deserialize: the same masks
    along the same walk (the token sets travel with the automaton's tables)."""
    from gxg.grammar_compiler import CompiledGrammar
    for name, grammar in compiled.items():
        again = CompiledGrammar.deserialize(grammar.serialize(), info)
        ours, theirs = GrammarMatcher(grammar), GrammarMatcher(again)
        rng = random.Random(name)
        for _ in range(10):
            mask = mask_of(ours)
            np.testing.assert_array_equal(mask_of(theirs), mask, err_msg=name)
            if ours.is_terminated() or not mask.any():
                break
            token = int(rng.choice(np.flatnonzero(mask)))
            assert ours.accept_token(token) and theirs.accept_token(token)
            if ours.is_terminated():
                break


def test_accept_tokens_takes_token_items_like_single_accepts(info, compiled):
    """``accept_tokens`` (a speculative verify: each slot's row up to its first rejection)
    moves token items exactly as a matcher accepting the row one token at a time."""
    grammars = list(compiled.values())
    b, rng = len(grammars), random.Random(11)
    walk = GrammarBatch(info, device="cpu", max_batch=b)
    for slot in range(b):
        walk.bind(slot, grammars[slot])
    bitmask = torch.zeros((b, (VOCAB_SIZE + 31) // 32), dtype=torch.int32)
    rows = []
    for _ in range(4):  # rows of allowed tokens
        walk.fill_next_token_bitmask(bitmask)
        tokens = random_allowed(bitmask.numpy(), rng)
        rows.append(tokens)
        walk.accept(torch.tensor(tokens))
    rows = torch.tensor(rows).T.contiguous()  # [b, 4]
    rows[0, 2] = ID["</tool_call>"] if rows[0, 2] != ID["</tool_call>"] else ID["x"]
    batch = GrammarBatch(info, device="cpu", max_batch=b)
    for slot in range(b):
        batch.bind(slot, grammars[slot])
    counts = batch.accept_tokens(rows).tolist()
    host = batch.host_state()
    for slot in range(b):
        matcher, expected = GrammarMatcher(grammars[slot]), 0
        for token in rows[slot].tolist():
            if matcher.is_terminated() or not matcher.accept_token(token):
                break
            expected += 1
        assert counts[slot] == expected, slot
        assert host.stacks(slot) == matcher.state.stacks(0), slot
