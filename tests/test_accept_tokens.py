"""``GrammarBatch.accept_tokens`` (``torch.ops.xg.accept_tokens``): a speculative verify in one op.

Specification: slot b accepts ``token_ids[b, :lengths[b]]`` (lengths clamped to [0, T]) in
order up to the first token it rejects, and returns how many it accepted, exactly as ``accept``
called once per token: the same states afterwards (stacks, can_end, terminated, history, token
budgets), each accepted token one rollback step; a row that is rejected at once, a stop token in
the middle (the slot terminates, later tokens are rejected), an unbound slot (accepts all) and a
slot with an error code (accepts nothing) included. On the CPU in CI; on CUDA the states equal
the CPU ops' field for field, also when the op runs inside a CUDA graph.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from batch_states import compare_states
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar
from gxg.batch import GrammarBatch
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import allocate_token_bitmask
from gxg.runtime import RuntimeLimits
from mask_oracles import mask_to_bool

GRAMMARS = ["json", "arithmetic", "ambiguous", "nested_arrays", "nullable_heavy"]
WIDTH = 6


@pytest.fixture(scope="module")
def world():
    sentences = [s for _, _, group in GRAMMAR_ZOO for s in group]
    info = make_info(synthetic_vocab(sentences, seed=4))
    compiler = GrammarCompiler(info)
    ebnf = {name: text for name, text, _ in GRAMMAR_ZOO}
    return info, [compiler.compile_grammar(zoo_grammar(ebnf[name])) for name in GRAMMARS]


def make_batch(world, device: str) -> GrammarBatch:
    """One slot per grammar (the first with a token budget of 8), then an unbound slot."""
    info, compiled = world
    batch = GrammarBatch(info, device=device, max_batch=len(compiled) + 1,
                         limits=RuntimeLimits(history=16))
    for slot, grammar in enumerate(compiled):
        batch.bind(slot, grammar, max_tokens=8 if slot == 0 else None)
    return batch


def draft_rows(batch: GrammarBatch, info, rng: random.Random):
    """Per slot, a draft grown by filling and accepting allowed tokens on a copy of the slot
    (``to_matcher``), then spoilt at a random position with a random token (often rejected);
    random lengths, some past the width or zero."""
    rows = np.zeros((batch.max_batch, WIDTH), dtype=np.int64)
    mask = allocate_token_bitmask(1, info.vocab_size)
    state = batch.host_state()
    for slot in range(batch.max_batch):
        if state.grammar[slot] < 0 or state.error[slot] or state.terminated[slot]:
            rows[slot] = [rng.randrange(info.vocab_size) for _ in range(WIDTH)]
            continue
        matcher = batch.to_matcher(slot)
        for k in range(WIDTH):
            if matcher.is_terminated():
                rows[slot, k] = rng.randrange(info.vocab_size)
                continue
            matcher.fill_next_token_bitmask(mask)
            allowed = np.flatnonzero(mask_to_bool(mask[0].numpy(), info.vocab_size))
            rows[slot, k] = int(rng.choice(allowed)) if len(allowed) else 0
            matcher.accept_token(int(rows[slot, k]))
        if rng.random() < 0.5:
            rows[slot, rng.randrange(WIDTH)] = rng.randrange(info.vocab_size)
    lengths = [rng.choice([0, 1, 3, WIDTH, WIDTH + 4]) for _ in range(batch.max_batch)]
    return torch.from_numpy(rows), torch.tensor(lengths)


def one_by_one(batch: GrammarBatch, rows: torch.Tensor, lengths: torch.Tensor):
    """The oracle: ``accept`` per token, each slot stopping at its first rejection."""
    counts = torch.zeros(batch.max_batch, dtype=torch.int32)
    alive = [True] * batch.max_batch
    for k in range(rows.shape[1]):
        for slot in range(batch.max_batch):
            alive[slot] = alive[slot] and k < min(int(lengths[slot]), rows.shape[1])
        if not any(alive):
            break
        # a slot that is done gets -1, which a bound slot rejects without a change
        tokens = torch.where(torch.tensor(alive), rows[:, k], -1)
        accepted = batch.accept(tokens)
        for slot in range(batch.max_batch):
            if alive[slot] and bool(accepted[slot]):
                counts[slot] += 1
            else:
                alive[slot] = False
    return counts


def assert_same(a: GrammarBatch, b: GrammarBatch, where: str) -> None:
    sa, sb = a.host_state(), b.host_state()
    for slot in range(a.max_batch):
        assert sa.stacks(slot) == sb.stacks(slot), (where, slot)
        for name in ("can_end", "terminated", "error", "hist_len"):
            assert getattr(sa, name)[slot] == getattr(sb, name)[slot], (where, slot, name)
    assert torch.equal(a.token_budget, b.token_budget), where


@pytest.mark.parametrize("seed", range(6))
def test_accept_tokens_is_accept_one_by_one(world, seed):
    info, _ = world
    rng = random.Random(seed)
    fused, oracle = make_batch(world, "cpu"), make_batch(world, "cpu")
    for step in range(4):
        rows, lengths = draft_rows(fused, info, rng)
        counts = fused.accept_tokens(rows, lengths)
        expected = one_by_one(oracle, rows, lengths)
        assert counts.dtype == torch.int32
        assert counts.tolist() == expected.tolist(), (seed, step)
        assert counts[-1] == min(int(lengths[-1]), WIDTH)  # the unbound slot takes them all
        assert_same(fused, oracle, f"seed {seed} step {step}")
    # every accepted token is one step: rolling back the last counts restores the state
    before = fused.host_state()
    rows, lengths = draft_rows(fused, info, rng)
    counts = fused.accept_tokens(rows, lengths)
    assert fused.rollback(counts.to(torch.int64)).all()
    after = fused.host_state()
    for slot in range(fused.max_batch):
        assert after.stacks(slot) == before.stacks(slot)


def test_a_stop_token_ends_the_row_and_errors_accept_nothing(world):
    info, compiled = world
    batch = make_batch(world, "cpu")
    stop = info.stop_token_ids[0]
    seven = info.decoded_vocab.index(b"7")
    arithmetic = GRAMMARS.index("arithmetic")
    rows = torch.zeros((batch.max_batch, 3), dtype=torch.int64)
    rows[arithmetic] = torch.tensor([seven, stop, seven])
    lengths = torch.zeros(batch.max_batch, dtype=torch.int64)
    lengths[arithmetic] = 3
    counts = batch.accept_tokens(rows, lengths)
    assert counts[arithmetic] == 2 and batch.is_terminated()[arithmetic]
    assert counts.tolist()[:arithmetic] == [0] * arithmetic  # length 0: nothing taken
    batch.rollback(torch.tensor([0, 9, 0, 0, 0, 0]))       # more than the history: an error
    assert batch.error_codes()[arithmetic] != 0
    assert batch.accept_tokens(rows, lengths)[arithmetic] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_accept_tokens_matches_cpu_also_in_a_graph(world):
    info, _ = world
    rng = random.Random(11)
    cpu, cuda = make_batch(world, "cpu"), make_batch(world, "cuda")
    for step in range(5):
        rows, lengths = draft_rows(cpu, info, rng)
        expected = cpu.accept_tokens(rows, lengths)
        got = cuda.accept_tokens(rows.cuda(), lengths.cuda())
        assert got.tolist() == expected.tolist(), step
        compare_states(cpu, cuda, where=f"step {step}")
    # captured once, replayed with new rows: the same as the eager CPU op
    static_rows = torch.zeros_like(rows).cuda()
    static_lengths = torch.zeros_like(lengths).cuda()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        cuda.accept_tokens(static_rows, static_lengths)  # warm-up (lengths 0: no change)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_counts = cuda.accept_tokens(static_rows, static_lengths)
    for step in range(3):
        rows, lengths = draft_rows(cpu, info, rng)
        expected = cpu.accept_tokens(rows, lengths)
        static_rows.copy_(rows)
        static_lengths.copy_(lengths)
        graph.replay()
        assert static_counts.tolist() == expected.tolist(), step
        compare_states(cpu, cuda, where=f"replay {step}")
