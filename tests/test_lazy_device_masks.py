"""Lazy registration in the device arena (issue 14): ``DeviceArena.register(lazy=True)`` copies
in the automaton and only the mask entries the grammar's cache already holds; the other
scannable nodes are ``ROW_UNBUILT`` and the fill walks every token from them against the real
stack. ``GrammarBatch(lazy_masks=True)`` (the CUDA default) computes the missing entries on a
thread and ``commit_masks`` swaps them in between steps.

Specification: the masks, verdicts and states of a lazy batch equal an eager batch's at every
step, before, across and after the swap; the swap leaves the arena's tables equal to an eager
registration's and gives the lazy entries' ranges back."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from batch_states import compare_states, random_allowed, runs_agree
from grammar_zoo import GRAMMAR_ZOO, info_or_skip, zoo, zoo_grammar, zoo_world
from gxg import GrammarCompiler, layout
from gxg.arena import DeviceArena, mask_entries
from gxg.batch import GrammarBatch
from gxg.ops.arena_tables import _arrays as arena_arrays, host_tables, mask_layout_of
from gxg.runtime import RuntimeLimits

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ROW_UNBUILT = layout.KERNEL_CONSTANTS["ROW_UNBUILT"]
ZOO_NAMES = [name for name, _, _ in GRAMMAR_ZOO]


def lazy_batch(info, device, slots, gate: threading.Event):
    """A batch that registers lazily and whose entry builds wait for ``gate``."""
    from gxg.arena import mask_entries
    batch = GrammarBatch(info, device=device, max_batch=slots, lazy_masks=True,
                         limits=RuntimeLimits(history=8))

    def build_after_gate(compiled):
        gate.wait()
        return mask_entries(compiled)
    batch._build_masks = lambda gid, compiled: batch._building.__setitem__(
        gid, (compiled, builder.submit(build_after_gate, compiled)))
    builder = ThreadPoolExecutor(max_workers=1)
    return batch


def zoo_grammars(info, names):
    """The named zoo grammars, compiled afresh (a lazy registration of a grammar that an eager
    one has registered finds its cache complete)."""
    compiler = GrammarCompiler(info, cache_enabled=False)
    return [compiler.compile_grammar(zoo_grammar(zoo(name)[1])) for name in names]


def masks_and_states_equal(info, make_grammars, steps, seed, device="cpu", commit_at=None):
    """``run_with_rollbacks`` on an eager CPU batch and on a lazy batch on ``device``, each with
    its own ``make_grammars()`` (the lazy batch's entries committed after ``commit_at`` ops,
    never when None): every mask, then every state field, equal."""
    grammars, fresh = make_grammars(), make_grammars()
    eager = GrammarBatch(info, device="cpu", max_batch=len(grammars), lazy_masks=False,
                         limits=RuntimeLimits(history=8))
    gate = threading.Event()
    assert not any(g.mask_cache.complete for g in fresh)
    lazy = lazy_batch(info, device, len(fresh), gate)
    ops = [0]

    def commit_when_due():
        ops[0] += 1
        if ops[0] == commit_at:
            assert lazy.commit_masks() == 0     # nothing finished before the gate
            gate.set()
            assert lazy.commit_masks(wait=True) >= 1
    try:
        runs_agree([eager, lazy], [grammars, fresh], info.vocab_size, steps, seed,
                   after_op=(None, commit_when_due))
    finally:
        gate.set()  # (a failure must not leave the builder's thread waiting)
    if commit_at is None or commit_at > ops[0]:
        assert any(lazy.arena.unbuilt_nodes(g) for g in lazy.arena.registered_ids)
    return lazy


def real_grammars(info):
    compiler = GrammarCompiler(info, cache_enabled=False)
    return [compiler.compile_builtin_json_grammar(),
            compiler.compile_json_schema('{"type": "object", "properties": {"a": {"type": '
                                         '"array", "items": {"type": "string"}}}, '
                                         '"required": ["a"]}')]


# ----------------------------------------------------------------------------- the arena


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_lazy_registration_marks_exactly_the_nodes_without_an_entry(name):
    info, compiled = zoo_world([name], seed=3)
    grammar = compiled[name]
    a = grammar.automaton
    arena = DeviceArena(info, device="cpu")
    gid = arena.register(grammar, lazy=True)
    rows = arena.node_row[int(arena.grammar_node_base[gid]):][:a.num_nodes].numpy()
    token_nodes = (a.token_set >= 0) & a.is_scannable
    computed = np.zeros(a.num_nodes, dtype=bool)
    computed[grammar.mask_cache.computed_nodes()] = True
    expected_unbuilt = a.is_scannable & ~computed & ~token_nodes
    np.testing.assert_array_equal(rows == ROW_UNBUILT, expected_unbuilt)
    assert (rows[a.is_scannable & ~expected_unbuilt] >= 0).all()
    assert arena.unbuilt_nodes(gid) == int(expected_unbuilt.sum())


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_completed_entries_equal_an_eager_registration(name):
    info, compiled = zoo_world([name], seed=4)
    grammar = compiled[name]
    lazy, eager = DeviceArena(info, device="cpu"), DeviceArena(info, device="cpu")
    gid = lazy.register(grammar, lazy=True)
    assert lazy.complete_entries(gid, grammar, mask_entries(grammar))
    assert lazy.unbuilt_nodes(gid) == 0
    eager_gid = eager.register(grammar)
    ours = mask_layout_of(arena_arrays(lazy.blob, lazy.dims), gid)
    theirs = mask_layout_of(arena_arrays(eager.blob, eager.dims),
                            eager_gid)
    scans = np.flatnonzero(grammar.automaton.is_scannable)
    np.testing.assert_array_equal(ours.accept_rows[ours.node_row[scans]],
                                  theirs.accept_rows[theirs.node_row[scans]])
    for node in scans.tolist():
        np.testing.assert_array_equal(ours.uncertain(node), theirs.uncertain(node))
    # the lazy entries' ranges went back: the arena uses what an eager registration uses
    for buffer in ("accept_rows", "uncertain", "pairs", "pair_acc", "pair_unc"):
        assert lazy._alloc[buffer].used == eager._alloc[buffer].used, buffer
    assert lazy.grammar_bytes(gid) == eager.grammar_bytes(eager_gid)


def test_completing_a_grammar_that_left_the_arena_writes_nothing():
    info, compiled = zoo_world(["arithmetic", "json"], seed=5)
    arena = DeviceArena(info, device="cpu")
    gid = arena.register(compiled["arithmetic"], lazy=True)
    entries = mask_entries(compiled["arithmetic"])
    arena.unregister(gid)
    assert arena.register(compiled["json"], lazy=True) == gid      # the id is reused
    before = arena.node_row.clone()
    assert not arena.complete_entries(gid, compiled["arithmetic"], entries)
    assert torch.equal(arena.node_row, before)


def test_host_tables_walk_every_token_from_a_node_without_entry():
    info, compiled = zoo_world(["json"], seed=6)
    grammar = compiled["json"]
    arena = DeviceArena(info, device="cpu")
    gid = arena.register(grammar, lazy=True)
    b = arena_arrays(arena.blob, arena.dims)
    tables = host_tables(arena.blob, arena.dims, gid)
    unbuilt = np.flatnonzero(b["node_row"][int(b["grammar_node_base"][gid]):][
        :grammar.automaton.num_nodes] == ROW_UNBUILT)
    assert len(unbuilt)
    for node in unbuilt[:5].tolist():
        assert not tables.layout.rows([node]).any()
        np.testing.assert_array_equal(tables.layout.uncertain(node),
                                      np.arange(arena.dims["S"]))


# ----------------------------------------------------------------------------- CPU batches


@pytest.mark.parametrize("seed", [0, 1])
def test_a_lazy_cpu_batch_that_never_builds_equals_an_eager_one(seed):
    info, _ = zoo_world(ZOO_NAMES, seed=seed)
    masks_and_states_equal(info, lambda: zoo_grammars(info, ZOO_NAMES), steps=12, seed=seed)


@pytest.mark.parametrize("commit_at", [1, 7, 20])
def test_a_lazy_cpu_batch_equals_an_eager_one_across_the_commit(commit_at):
    info, _ = zoo_world(ZOO_NAMES, seed=commit_at)
    lazy = masks_and_states_equal(info, lambda: zoo_grammars(info, ZOO_NAMES), steps=12,
                                  seed=commit_at, commit_at=commit_at)
    assert all(lazy.arena.unbuilt_nodes(g) == 0 for g in lazy.arena.registered_ids)


def test_a_build_starts_at_the_second_commit_after_bind():
    """bind queues the build; the first commit (the first fill's, after its launches) lets the
    first mask go without the builder's Python beside it; the second starts it."""
    info, _ = zoo_world(["json"], seed=8)
    batch = GrammarBatch(info, device="cpu", max_batch=1, lazy_masks=True)
    started = []
    batch._build_masks = lambda gid, compiled: started.append(gid)
    gid = batch.bind(0, zoo_grammars(info, ["json"])[0])
    row = torch.zeros((1, (info.vocab_size + 31) // 32), dtype=torch.int32)
    batch.fill_next_token_bitmask(row)
    assert started == []
    batch.fill_next_token_bitmask(row)
    assert started == [gid]


def test_the_builder_is_a_daemon_thread_that_ends_with_its_batch():
    """A process done decoding does not wait at exit for a build; a dropped batch's builder
    thread ends."""
    import gc
    import threading
    info, _ = zoo_world(["json"], seed=9)
    batch = GrammarBatch(info, device="cpu", max_batch=1, lazy_masks=True)
    before = {t for t in threading.enumerate() if t.name == "gxg-masks"}
    batch.bind(0, zoo_grammars(info, ["json"])[0])
    assert batch.commit_masks(wait=True) == 1
    builders = {t for t in threading.enumerate() if t.name == "gxg-masks"} - before
    assert len(builders) == 1 and all(t.daemon for t in builders)
    del batch
    gc.collect()
    for thread in builders:
        thread.join(timeout=5)
        assert not thread.is_alive()


def test_a_failed_build_is_reported_and_the_masks_stay_exact(monkeypatch):
    from gxg import entry_builder
    info, compiled = zoo_world(["json", "arithmetic"], seed=7)
    grammars = [compiled["json"], compiled["arithmetic"]]

    def refuse(compiled_grammar):
        raise RuntimeError("no entries today")
    monkeypatch.setattr(entry_builder, "mask_entries", refuse)
    eager = GrammarBatch(info, device="cpu", max_batch=2, lazy_masks=False)
    lazy = GrammarBatch(info, device="cpu", max_batch=2, lazy_masks=True)
    for batch, bound in ((eager, grammars), (lazy, zoo_grammars(info, ["json", "arithmetic"]))):
        for slot, grammar in enumerate(bound):
            batch.bind(slot, grammar)
    assert lazy.commit_masks(wait=True) == 0
    assert all(lazy.arena.unbuilt_nodes(g) for g in lazy.arena.registered_ids)
    assert {str(e) for e in lazy.mask_build_errors.values()} == {"no entries today"}
    rows = [torch.zeros((2, (info.vocab_size + 31) // 32), dtype=torch.int32) for _ in "ab"]
    eager.fill_next_token_bitmask(rows[0])
    lazy.fill_next_token_bitmask(rows[1])
    assert torch.equal(*rows)


def test_entries_without_room_in_the_arena_are_reported_and_the_masks_stay_exact():
    """The lazy bind fits but the finished entries do not (the arena's uncertain-token room
    is smaller than a node's entry): commit_masks keeps the error, as for a failed build,
    and the fills go on walking every token, exact."""
    from gxg.arena import ArenaCapacity, ArenaFullError
    info, _ = zoo_world(["json"], seed=3)
    tiny = ArenaCapacity(uncertain_tokens=1)
    eager = GrammarBatch(info, device="cpu", max_batch=1, lazy_masks=False)
    lazy = GrammarBatch(info, device="cpu", max_batch=1, lazy_masks=True, capacity=tiny,
                        mask_builder="thread")
    eager.bind(0, zoo_grammars(info, ["json"])[0])
    gid = lazy.bind(0, zoo_grammars(info, ["json"])[0])
    assert lazy.commit_masks(wait=True) == 0
    assert isinstance(lazy.mask_build_errors[gid], ArenaFullError)
    assert lazy.arena.unbuilt_nodes(gid) > 0
    rows = [torch.zeros((1, (info.vocab_size + 31) // 32), dtype=torch.int32) for _ in "ab"]
    eager.fill_next_token_bitmask(rows[0])
    lazy.fill_next_token_bitmask(rows[1])
    assert torch.equal(*rows)


def test_the_process_builder_gives_the_thread_builders_entries():
    """mask_builder="process" (the CUDA default): the entries come from a spawned worker
    that gets the automaton alone; they fill the arena exactly as the thread's do, and the
    masks equal an eager batch's."""
    info, _ = zoo_world(ZOO_NAMES, seed=11)
    rows = []
    for builder in ("process", "thread"):
        batch = GrammarBatch(info, device="cpu", max_batch=len(ZOO_NAMES), lazy_masks=True,
                             mask_builder=builder)
        for slot, grammar in enumerate(zoo_grammars(info, ZOO_NAMES)):
            batch.bind(slot, grammar)
        assert any(batch.arena.unbuilt_nodes(g) for g in batch.arena.registered_ids)
        assert batch.commit_masks(wait=True) > 0 and not batch.mask_build_errors
        assert not any(batch.arena.unbuilt_nodes(g) for g in batch.arena.registered_ids)
        rows.append({name: getattr(batch.arena, name).clone()
                     for name in ("accept_rows", "uncertain_tokens", "node_row", "node_unc_lo",
                                  "node_unc_hi", "pair_unc_tokens", "pair_acc_tokens")})
    for name in rows[0]:
        assert torch.equal(rows[0][name], rows[1][name]), name
    eager = GrammarBatch(info, device="cpu", max_batch=len(ZOO_NAMES), lazy_masks=False)
    for slot, grammar in enumerate(zoo_grammars(info, ZOO_NAMES)):
        eager.bind(slot, grammar)
    masks = [torch.zeros((len(ZOO_NAMES), (info.vocab_size + 31) // 32), dtype=torch.int32)
             for _ in "ab"]
    eager.fill_next_token_bitmask(masks[0])
    batch.fill_next_token_bitmask(masks[1])
    assert torch.equal(*masks)


EXIT_SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from grammar_zoo import zoo_world
from gxg import entry_builder

def slow(marker):
    Path(marker).write_text("started")
    time.sleep(120)

if __name__ == "__main__":
    info, _ = zoo_world(["json"], seed=1)
    entry_builder._worker_pool(info).submit(slow, {marker!r})
    while not Path({marker!r}).exists():
        time.sleep(0.05)
"""


def test_exit_does_not_wait_for_a_build_in_the_worker(tmp_path):
    """A process done decoding exits while its worker is still building (the worker is
    terminated; without that, concurrent.futures joins it: two minutes here)."""
    import subprocess
    import sys
    import time
    from pathlib import Path
    script = tmp_path / "exits.py"
    marker = tmp_path / "started"
    script.write_text(EXIT_SCRIPT.format(tests=str(Path(__file__).parent), marker=str(marker)))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(script)], timeout=100, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert marker.exists()  # the build had started in the worker
    assert time.perf_counter() - start < 60


def test_an_unknown_mask_builder_is_refused():
    info, _ = zoo_world(["json"], seed=1)
    with pytest.raises(ValueError, match="mask_builder"):
        GrammarBatch(info, device="cpu", max_batch=1, mask_builder="fork")


def test_a_lazy_cpu_batch_with_a_real_vocabulary():
    info = info_or_skip("smollm2")
    masks_and_states_equal(info, lambda: real_grammars(info), steps=6, seed=2)


# ----------------------------------------------------------------------------- CUDA


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("commit_at", [None, 9])
def test_cuda_lazy_batch_equals_the_eager_cpu_batch(commit_at):
    info, _ = zoo_world(ZOO_NAMES, seed=11)
    masks_and_states_equal(info, lambda: zoo_grammars(info, ZOO_NAMES), steps=14, seed=11,
                           device="cuda", commit_at=commit_at)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("vocabulary", ["qwen", "smollm2"])
def test_cuda_lazy_batch_with_a_real_vocabulary(vocabulary):
    info = info_or_skip(vocabulary)
    masks_and_states_equal(info, lambda: real_grammars(info), steps=8, seed=3, device="cuda",
                           commit_at=10)


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_replays_read_the_committed_entries():
    """accept + fill captured once while every entry is missing; replayed with each step's
    tokens, the entries committed between two replays: the same masks as the eager CPU batch."""
    from batch_states import capture_accept_then_fill
    import random
    info, compiled = zoo_world(ZOO_NAMES, seed=12)
    grammars = [compiled[name] for name in ZOO_NAMES]
    fresh = zoo_grammars(info, ZOO_NAMES)
    b, words = len(grammars), (info.vocab_size + 31) // 32
    cpu = GrammarBatch(info, device="cpu", max_batch=b, lazy_masks=False)
    gpu = GrammarBatch(info, device="cuda", max_batch=b, eager_graphs=False, lazy_masks=True)
    warm = GrammarBatch(info, device="cuda", max_batch=b, eager_graphs=False, lazy_masks=True)
    gpu._build_masks = lambda gid, grammar: None      # built when the test says so
    for batch, bound in ((cpu, grammars), (gpu, fresh), (warm, zoo_grammars(info, ZOO_NAMES))):
        for slot, grammar in enumerate(bound):
            batch.bind(slot, grammar)
    assert any(gpu.arena.unbuilt_nodes(g) for g in gpu.arena.registered_ids)
    tokens = torch.zeros(b, dtype=torch.int64, device="cuda")
    bitmask = torch.zeros((b, words), dtype=torch.int32, device="cuda")
    graph = capture_accept_then_fill(gpu, warm, tokens, bitmask)
    rng = random.Random(12)
    cpu_mask = torch.zeros((b, words), dtype=torch.int32)
    for step in range(12):
        cpu.fill_next_token_bitmask(cpu_mask)
        np.testing.assert_array_equal(bitmask.cpu().numpy(), cpu_mask.numpy(), err_msg=str(step))
        chosen = random_allowed(cpu_mask.numpy(), rng, info.vocab_size)
        cpu.accept(torch.tensor(chosen))
        tokens.copy_(torch.tensor(chosen))
        if step == 5:
            for gid in gpu.arena.registered_ids:
                grammar = gpu.arena.compiled(gid)
                assert gpu.arena.complete_entries(gid, grammar, mask_entries(grammar))
            assert all(gpu.arena.unbuilt_nodes(g) == 0 for g in gpu.arena.registered_ids)
        graph.replay()
    compare_states(cpu, gpu, where="after the replays")
