"""Registering grammars on a background thread (``GrammarBatch.register_in_background``, the
arena's lock): a request with a new grammar joins while the batch keeps stepping.

Specification: grammars registered from other threads — one at a time through the batch's
background thread, or several threads at once straight into the arena — get distinct ids, and
a slot bound to one afterwards fills exactly the masks of a direct bind, while the other slots,
stepping meanwhile, are unaffected (on the CPU, and on CUDA where the copies go through the
registering thread's stream).
"""
from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch

from gxg.batch import GrammarBatch
from gxg.grammar_compiler import GrammarCompiler
from grammar_zoo import zoo, zoo_grammar, zoo_world
from mask_oracles import mask_to_bool

GRAMMARS = ["json", "arithmetic", "ambiguous", "unicode", "lookahead", "nullable_heavy"]


@pytest.fixture(scope="module")
def world():
    info, compiled = zoo_world(GRAMMARS, seed=5)
    return info, compiled


def fresh(info, name):
    """A new compilation (the compiler's cache off): a grammar the arena has not seen."""
    return GrammarCompiler(info, cache_enabled=False, mask_cache="lazy").compile_grammar(
        zoo_grammar(zoo(name)[1]))


def masks_along(batch, slot, info, tokens_for, steps=8):
    """The slot's masks along a walk of allowed tokens chosen by ``tokens_for(step, allowed)``."""
    rows = []
    bitmask = torch.zeros((batch.max_batch, (info.vocab_size + 31) // 32), dtype=torch.int32,
                          device=batch.device)
    for step in range(steps):
        batch.fill_next_token_bitmask(bitmask)
        row = mask_to_bool(bitmask[slot].cpu().numpy(), info.vocab_size)
        rows.append(row)
        allowed = np.flatnonzero(row)
        tokens = torch.zeros(batch.max_batch, dtype=torch.int64)
        tokens[slot] = tokens_for(step, allowed) if len(allowed) else 0
        batch.accept(tokens.to(batch.device))
    return rows


DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")])]


@pytest.mark.parametrize("device", DEVICES)
def test_a_grammar_registered_in_the_background_fills_like_a_direct_bind(world, device):
    info, compiled = world
    batch = GrammarBatch(info, device=device, max_batch=2)
    batch.bind(0, compiled["json"])
    late = fresh(info, "arithmetic")
    future = batch.register_in_background(late)
    bitmask = torch.zeros((2, (info.vocab_size + 31) // 32), dtype=torch.int32, device=device)
    while not future.done():  # the batch steps meanwhile
        batch.fill_next_token_bitmask(bitmask)
    gid = future.result()
    assert batch.bind(1, late) == gid  # bind finds it registered
    direct = GrammarBatch(info, device=device, max_batch=2)
    direct.bind(1, fresh(info, "arithmetic"))
    choose = lambda step, allowed: int(allowed[step % len(allowed)])  # noqa: E731
    for got, want in zip(masks_along(batch, 1, info, choose), masks_along(direct, 1, info,
                                                                           choose)):
        np.testing.assert_array_equal(got, want)


def test_concurrent_registrations_get_distinct_ids_and_their_own_tables(world):
    info, _ = world
    batch = GrammarBatch(info, device="cpu", max_batch=len(GRAMMARS))
    grammars = {name: fresh(info, name) for name in GRAMMARS}
    ids = {}

    def register(name):
        ids[name] = batch.arena.register(grammars[name])
    threads = [threading.Thread(target=register, args=(name,)) for name in GRAMMARS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids.values())) == len(GRAMMARS)
    rng = random.Random(0)
    for slot, name in enumerate(GRAMMARS):
        assert batch.bind(slot, grammars[name]) == ids[name]
        alone = GrammarBatch(info, device="cpu", max_batch=len(GRAMMARS))
        alone.bind(slot, fresh(info, name))
        picks = [rng.random() for _ in range(8)]
        choose = lambda step, allowed: int(allowed[int(picks[step] * len(allowed))])  # noqa
        for got, want in zip(masks_along(batch, slot, info, choose),
                             masks_along(alone, slot, info, choose)):
            np.testing.assert_array_equal(got, want, err_msg=name)
