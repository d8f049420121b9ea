"""Arena compaction: a grammar that fits in the arena's free entries, but in no single free range
(grammars came and went), is registered after the other grammars' ranges move down; the
slots running those grammars carry on with the same masks and verdicts as one matcher each.

The arena is sized from the grammars' own entry counts so that, once the middle grammar is
unregistered, the new one needs more than the hole it left in some buffer and less than the
hole and the tail together. ``may_move=False`` (a registration on a stream other than the
steps': ``register_in_background``) still raises ``ArenaFullError``.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from batch_states import accept_against_matchers, check_masks_against_matchers
from grammar_zoo import zoo_world
from mask_oracles import mask_to_bool

from gxg.arena import ArenaCapacity, ArenaFullError, DeviceArena, entry_counts
from gxg.batch import GrammarBatch
from gxg.matcher import GrammarMatcher

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

FIRST, MIDDLE, LAST, NEW = "json", "arithmetic", "unicode", "lookahead"
# ArenaCapacity field -> the arena buffers (entry_counts' names) it sizes
CAPACITY_OF = {"nodes": ("nodes",), "next_entries": ("next_flat",), "ref_edges": ("refs",),
               "accept_rows": ("accept_rows",), "uncertain_tokens": ("uncertain",),
               "pairs": ("pairs",), "pair_tokens": ("pair_acc", "pair_unc")}


@pytest.fixture(scope="module")
def world():
    return zoo_world([FIRST, MIDDLE, LAST, NEW], seed=5)


def fragmenting_capacity(compiled) -> ArenaCapacity:
    """Room for FIRST, MIDDLE and LAST, plus what NEW needs beyond MIDDLE's entries in each
    buffer: after MIDDLE leaves, NEW fits only across its hole and the tail."""
    counts = {name: entry_counts(compiled[name]) for name in (FIRST, MIDDLE, LAST, NEW)}
    fields = {}
    for field, buffers in CAPACITY_OF.items():
        fields[field] = max(
            1 + sum(counts[name][b] for name in (FIRST, MIDDLE, LAST))
            + max(0, counts[NEW][b] - counts[MIDDLE][b]) for b in buffers)
    assert any(counts[NEW][b] > counts[MIDDLE][b] and counts[MIDDLE][b] > 0
               for buffers in CAPACITY_OF.values() for b in buffers)
    return ArenaCapacity(max_grammars=4, **fields)


def step_all(batch, matchers, bitmask, rng, vocab_size, where):
    """One fill and accept of every slot, checked against its matcher."""
    batch.fill_next_token_bitmask(bitmask)
    rows = bitmask.cpu()
    check_masks_against_matchers(rows, matchers, vocab_size, where)
    tokens = []
    for slot, matcher in enumerate(matchers):
        allowed = [t for t in np.flatnonzero(mask_to_bool(rows[slot].numpy(), vocab_size))
                   if t not in matcher.stop_token_ids]
        tokens.append(int(rng.choice(allowed)) if allowed else 0)
    accept_against_matchers(batch, matchers, tokens)


def run_through_compaction(device: str, world, seed: int) -> None:
    info, compiled = world
    arena = DeviceArena(info, device, fragmenting_capacity(compiled))
    batch = GrammarBatch(info, device=device, max_batch=3, arena=arena)
    rng = random.Random(seed)
    bitmask = torch.zeros((3, (info.vocab_size + 31) // 32), dtype=torch.int32, device=device)
    matchers = []
    for slot, name in enumerate((FIRST, MIDDLE, LAST)):
        batch.bind(slot, compiled[name])
        matchers.append(GrammarMatcher(compiled[name], max_rollback_tokens=batch.limits.history))
    for step in range(3):
        step_all(batch, matchers, bitmask, rng, info.vocab_size, f"before, step {step}")
    middle = batch.host_state().grammar[1]
    batch.unbind(1)
    arena.unregister(int(middle))
    with pytest.raises(ArenaFullError, match="largest free range"):
        arena.register(compiled[NEW], may_move=False)
    gid = batch.bind(1, compiled[NEW])  # moves LAST's ranges down, then takes the tail
    assert arena.holds(gid, compiled[NEW])
    matchers[1] = GrammarMatcher(compiled[NEW], max_rollback_tokens=batch.limits.history)
    batch.commit_masks(wait=True)  # (on CUDA the lazy entries, placed after the move)
    for step in range(6):
        step_all(batch, matchers, bitmask, rng, info.vocab_size, f"after, step {step}")
    batch.rollback(torch.tensor([1, 1, 1], device=device))
    for matcher in matchers:
        matcher.rollback(1)
    step_all(batch, matchers, bitmask, rng, info.vocab_size, "after a rollback")


@pytest.mark.parametrize("seed", range(2))
def test_compaction_keeps_running_slots_exact_cpu(world, seed):
    run_through_compaction("cpu", world, seed)


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(2))
def test_compaction_keeps_running_slots_exact_cuda(world, seed):
    run_through_compaction("cuda", world, seed)


def test_a_full_arena_still_says_so(world):
    """Compaction does not hide a real shortage: more than is free is an ArenaFullError that
    counts the free entries."""
    info, compiled = world
    capacity = fragmenting_capacity(compiled)
    arena = DeviceArena(info, "cpu", ArenaCapacity(max_grammars=4, nodes=capacity.nodes))
    for name in (FIRST, MIDDLE, LAST):
        arena.register(compiled[name])
    with pytest.raises(ArenaFullError, match="are free"):
        arena.register(compiled[NEW])
