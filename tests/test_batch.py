"""GrammarBatch and the torch.ops.xg ops.

On the CPU: the batch ops (several grammars, unbound slots) give the same masks and states as
one GrammarMatcher per slot. On CUDA (marked gpu): the CUDA kernels give bit-identical masks and
entry-identical states to the CPU ops over randomised multi-step runs with rollbacks, and a
decode step captured in a CUDA graph or compiled with torch.compile matches eager.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from gxg.arena import ArenaCapacity, ArenaFullError, DeviceArena
from gxg.batch import GrammarBatch
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from gxg.runtime import ErrorCode, RuntimeLimits
from gxg.tokenizer import TokenizerInfo, VocabType
from mask_oracles import mask_to_bool
from batch_states import compare_states
from grammar_zoo import zoo_world

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

BATCH_GRAMMARS = ["json", "arithmetic", "ambiguous", "left_recursive_list", "unicode",
                  "lookahead", "nullable_heavy"]


@pytest.fixture(scope="module")
def setup():
    info, compiled = zoo_world(BATCH_GRAMMARS, seed=3)
    return info, [compiled[name] for name in BATCH_GRAMMARS]


def random_run(batch, info, compiled, steps, seed, check=None):
    """Bind grammars (one slot unbound), then steps of fill -> pick allowed token -> accept,
    with occasional rollbacks and resets; ``check(step)`` runs after every op."""
    rng = random.Random(seed)
    for slot in range(batch.max_batch):
        if slot == batch.max_batch - 1:
            batch.unbind(slot)
        else:
            batch.bind(slot, compiled[slot % len(compiled)])
    bitmask = torch.zeros((batch.max_batch, (info.vocab_size + 31) // 32), dtype=torch.int32,
                          device=batch.device)
    for step in range(steps):
        batch.fill_next_token_bitmask(bitmask)
        if check:
            check("fill", bitmask)
        rows = bitmask.cpu().numpy()
        tokens = []
        for slot in range(batch.max_batch):
            allowed = np.flatnonzero(mask_to_bool(rows[slot], info.vocab_size))
            tokens.append(int(rng.choice(allowed)) if len(allowed) and rng.random() < 0.9
                          else rng.randrange(info.vocab_size))
        batch.accept(torch.tensor(tokens, dtype=torch.int64, device=batch.device))
        if check:
            check("accept", bitmask)
        if rng.random() < 0.3:
            counts = [rng.randrange(3) for _ in range(batch.max_batch)]
            batch.rollback(torch.tensor(counts, dtype=torch.int64, device=batch.device))
            if check:
                check("rollback", bitmask)
        if rng.random() < 0.1:
            batch.reset([rng.randrange(batch.max_batch)])
            if check:
                check("reset", bitmask)


def test_cpu_batch_matches_one_matcher_per_slot(setup):
    info, compiled = setup
    batch = GrammarBatch(info, device="cpu", max_batch=len(compiled) + 1)
    for slot in range(len(compiled)):
        batch.bind(slot, compiled[slot])
    batch.unbind(len(compiled))
    matchers = [GrammarMatcher(c) for c in compiled]
    rng = random.Random(0)
    bitmask = torch.zeros((batch.max_batch, (info.vocab_size + 31) // 32), dtype=torch.int32)
    for step in range(12):
        batch.fill_next_token_bitmask(bitmask)
        tokens = []
        for slot, matcher in enumerate(matchers):
            single = allocate_token_bitmask(1, info.vocab_size)
            if matcher.is_terminated():
                expected = np.zeros(info.vocab_size, bool)
                expected[matcher.stop_token_ids] = True
            else:
                matcher.fill_next_token_bitmask(single)
                expected = mask_to_bool(single[0].numpy(), info.vocab_size)
            got = mask_to_bool(bitmask[slot].numpy(), info.vocab_size)
            np.testing.assert_array_equal(got, expected)
            allowed = np.flatnonzero(got)
            tokens.append(int(rng.choice(allowed)) if len(allowed) else 0)
        assert (bitmask[-1] == -1).all()                       # unbound: everything allowed
        accepted = batch.accept(torch.tensor(tokens + [5]))
        for slot, matcher in enumerate(matchers):
            assert bool(accepted[slot]) == matcher.accept_token(tokens[slot])
        assert bool(accepted[-1])
        host = batch.host_state()
        for slot, matcher in enumerate(matchers):
            assert host.stacks(slot) == matcher.state.stacks(0)


def test_batch_contract_terminated_error_and_rollback(setup):
    info, compiled = setup
    stop = info.stop_token_ids[0]
    batch = GrammarBatch(info, device="cpu", max_batch=2,
                         limits=RuntimeLimits(history=4))
    batch.bind(0, compiled[BATCH_GRAMMARS.index("arithmetic")])
    batch.bind(1, compiled[BATCH_GRAMMARS.index("arithmetic")])
    digit = info.decoded_vocab.index(b"7")
    assert batch.accept(torch.tensor([digit, digit])).all()
    assert batch.accept(torch.tensor([stop, digit])).all()
    assert batch.is_terminated().tolist() == [True, False]
    bitmask = torch.zeros((2, (info.vocab_size + 31) // 32), dtype=torch.int32)
    batch.fill_next_token_bitmask(bitmask)
    assert np.flatnonzero(mask_to_bool(bitmask[0].numpy(), info.vocab_size)).tolist() == [stop]
    assert batch.accept(torch.tensor([digit, digit])).tolist() == [False, True]
    ok = batch.rollback(torch.tensor([1, 9]))                # slot 1 has only 3 steps
    assert ok.tolist() == [True, False]
    assert batch.is_terminated().tolist() == [False, False]
    assert batch.error_codes().tolist() == [0, ErrorCode.ROLLBACK_TOO_FAR]
    batch.fill_next_token_bitmask(bitmask)
    assert np.flatnonzero(mask_to_bool(bitmask[1].numpy(), info.vocab_size)).tolist() == [stop]
    assert batch.accept(torch.tensor([digit, digit])).tolist() == [True, False]
    batch.reset([1])
    assert batch.error_codes().tolist() == [0, 0]


def test_matcher_round_trip(setup):
    info, compiled = setup
    batch = GrammarBatch(info, device="cpu", max_batch=3)
    grammar = compiled[BATCH_GRAMMARS.index("json")]
    batch.bind(1, grammar)
    for token in (b"[", b"1", b","):
        batch.accept(torch.tensor([0, info.decoded_vocab.index(token), 0]))
    matcher = batch.to_matcher(1)
    assert matcher.accept_string("2]")
    batch.from_matcher(2, matcher)
    assert batch.host_state().stacks(2) == matcher.state.stacks(0)


def test_arena_register_unregister_and_full():
    info = TokenizerInfo([b"a", b"b", b"ab"], VocabType.RAW)
    compiler = GrammarCompiler(info)
    small = ArenaCapacity(max_grammars=2, nodes=64, next_entries=1024, ref_edges=64,
                          accept_rows=8, uncertain_tokens=64)
    arena = DeviceArena(info, "cpu", small)
    g1 = arena.register(compiler.compile_grammar('root ::= "a"+'))
    assert arena.register(compiler.compile_grammar('root ::= "a"+')) == g1   # cached compile
    g2 = arena.register(compiler.compile_grammar('root ::= "b" "a"*'))
    with pytest.raises(ArenaFullError, match="at most 2 grammars"):
        arena.register(compiler.compile_grammar('root ::= "ab"'))
    arena.unregister(g1)
    g3 = arena.register(compiler.compile_grammar('root ::= "ab"'))
    assert g3 == g1 and arena.registered_ids == sorted([g2, g3])
    big = compiler.compile_grammar('root ::= "a"{40} | "b"{40}')
    with pytest.raises(ArenaFullError, match="nodes"):
        DeviceArena(info, "cpu", small).register(big)
    assert arena.memory_bytes()["used_by_grammars"] > 0


# ----------------------------------------------------------------------------- CUDA

@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("seed,pool", [(0, 256), (1, 256), (2, 256), (3, 16), (4, 20)])
def test_cuda_ops_match_cpu_ops(setup, seed, pool, monkeypatch):
    """Small pools make the runs compact the pool (and some slots overflow it): the CUDA
    compaction and the POOL_FULL error must match the reference too."""
    from gxg.ops import reference
    compactions = []
    original = reference.compact_pool
    monkeypatch.setattr(reference, "compact_pool",
                        lambda *a: (compactions.append(1), original(*a))[1])
    info, compiled = setup
    batches = [GrammarBatch(info, device=d, max_batch=2 * len(compiled) + 1,
                            limits=RuntimeLimits(pool_entries=pool, history=8))
               for d in ("cpu", "cuda")]
    logs = [[], []]

    def recorder(i):
        def check(what, bitmask):
            logs[i].append((what, bitmask.cpu().numpy().copy(), batches[i].host_state()))
        return check

    for i, batch in enumerate(batches):
        random_run(batch, info, compiled, steps=25, seed=seed, check=recorder(i))
    assert len(logs[0]) == len(logs[1])
    if pool < 64:  # the small pools did what they are here for (on the CPU side)
        assert compactions
    for step, ((what, m0, s0), (_, m1, s1)) in enumerate(zip(*logs)):
        if what == "fill":
            for slot in range(m0.shape[0]):
                np.testing.assert_array_equal(mask_to_bool(m0[slot], info.vocab_size),
                                              mask_to_bool(m1[slot], info.vocab_size),
                                              err_msg=f"step {step} slot {slot}")
    compare_states(*batches, where="end")


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("rows", [4, 300])
def test_cuda_fill_and_apply_matches_cpu(setup, rows):
    """fill_and_apply on CUDA (dense fill, uncertain walks, the wide kernel's end of the fill,
    apply) gives the CPU op's masks and masked logits, logits wider than the vocabulary
    included; more slots than the wide kernel has threads at 300."""
    info, compiled = setup
    batches = [GrammarBatch(info, device=d, max_batch=rows) for d in ("cpu", "cuda")]
    logits = torch.randn(rows, info.vocab_size + 3, generator=torch.Generator().manual_seed(1))
    results = []
    for batch in batches:
        for slot in range(rows - 1):  # the last slot stays unbound
            batch.bind(slot, compiled[slot % len(compiled)])
        rng = random.Random(5)
        for _ in range(4):  # a few random accepted tokens into each slot
            mask = batch.fill_next_token_bitmask(
                torch.zeros((rows, (info.vocab_size + 31) // 32), dtype=torch.int32,
                            device=batch.device)).cpu().numpy()
            tokens = [int(rng.choice(np.flatnonzero(mask_to_bool(row, info.vocab_size))))
                      for row in mask]
            batch.accept(torch.tensor(tokens, device=batch.device))
        out = logits.clone().to(batch.device)
        bitmask = batch.fill_and_apply(out).cpu()
        results.append((bitmask, out.cpu()))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


def decode_step(batch, logits):
    batch.fill_and_apply(logits)
    tokens = torch.argmax(logits, dim=-1)
    accepted = batch.accept(tokens)
    return tokens, accepted


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dependent", [True, False])
def test_cuda_graph_and_compile_match_eager(setup, dependent, monkeypatch):
    """With programmatic dependent launch in the capture (sm_90+: each kernel may start as the
    one before it finishes, and waits for it first) and without."""
    from gxg.ops import dependent_launch
    monkeypatch.setattr(dependent_launch, "ENABLED", None if dependent else False)
    launches = []
    launch = dependent_launch.launch
    monkeypatch.setattr(dependent_launch, "launch",
                        lambda *args: launches.append(args[0]) or launch(*args))
    info, compiled = setup
    torch.manual_seed(0)
    steps, b = 12, 8
    noise = [torch.randn(b, info.vocab_size, device="cuda") for _ in range(steps)]
    results = {}
    for mode in ("eager", "graph", "compile"):
        batch = GrammarBatch(info, device="cuda", max_batch=b)
        for slot in range(b):
            batch.bind(slot, compiled[slot % len(compiled)])
        logits = torch.empty(b, info.vocab_size, device="cuda")
        out = []
        if mode == "eager":
            for x in noise:
                logits.copy_(x)
                tokens, accepted = decode_step(batch, logits)
                out.append((tokens.clone(), accepted.clone()))
        elif mode == "graph":
            static_in = torch.empty_like(noise[0])
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(stream):
                # warm-up outside the capture on a scratch batch state is not needed: the
                # kernels are compiled by a first eager step on a throwaway batch
                warm = GrammarBatch(info, device="cuda", max_batch=b)
                for slot in range(b):
                    warm.bind(slot, compiled[slot % len(compiled)])
                decode_step(warm, torch.randn(b, info.vocab_size, device="cuda"))
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph):
                logits.copy_(static_in)
                tokens, accepted = decode_step(batch, logits)
            expected = dependent and torch.cuda.get_device_capability()[0] >= 9
            assert bool(launches) == expected, [k.name for k in launches]
            for x in noise:
                static_in.copy_(x)
                graph.replay()
                out.append((tokens.clone(), accepted.clone()))
        else:
            step = torch.compile(lambda lg: decode_step(batch, lg), fullgraph=True)
            for x in noise:
                logits.copy_(x)
                tokens, accepted = step(logits)
                out.append((tokens.clone(), accepted.clone()))
        torch.cuda.synchronize()
        results[mode] = (out, batch.host_state(), batch._bitmask.cpu().clone())
    eager_out, eager_state, eager_mask = results["eager"]
    for mode in ("graph", "compile"):
        out, state, mask = results[mode]
        for (t0, a0), (t1, a1) in zip(eager_out, out):
            assert torch.equal(t0.cpu(), t1.cpu()), mode
            assert torch.equal(a0.cpu(), a1.cpu()), mode
        assert torch.equal(mask, eager_mask), mode
        for slot in range(b):
            assert state.stacks(slot) == eager_state.stacks(slot), mode


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("defines", [("-DUNC_STACKS=1", "-DUNC_DEPTH=1"),
                                     ("-DUNC_STACKS=2", "-DUNC_DEPTH=3")])
def test_wide_uncertain_walk_matches_cpu(setup, defines, monkeypatch):
    """With the local walk's room shrunk to almost nothing, (nearly) every uncertain token goes
    through the queue to xg_uncertain_wide: masks and states must still equal the CPU ops'."""
    from gxg.ops import cuda_automaton
    monkeypatch.setattr(cuda_automaton, "KERNEL_DEFINES", defines)
    info, compiled = setup
    batches = [GrammarBatch(info, device=d, max_batch=2 * len(compiled) + 1)
               for d in ("cpu", "cuda")]
    logs = [[], []]
    for i, batch in enumerate(batches):
        random_run(batch, info, compiled, steps=20, seed=11,
                   check=lambda what, m, i=i: logs[i].append((what, m.cpu().numpy().copy())))
    for step, ((what, m0), (_, m1)) in enumerate(zip(*logs)):
        if what == "fill":
            np.testing.assert_array_equal(m0, m1, err_msg=f"step {step}")
    assert not (batches[1].error_codes() == ErrorCode.UNCERTAIN_WALK_TOO_LARGE).any()
    compare_states(*batches, where="end")  # error codes included (rollbacks past the history)


@cuda
@pytest.mark.gpu
def test_wide_walk_out_of_room_sets_the_error(setup, monkeypatch):
    """A queue of one walk per fill: slots whose walks don't fit must get
    UNCERTAIN_WALK_TOO_LARGE (allowing only stop tokens), never a silently different mask."""
    from gxg.ops import cuda_automaton
    monkeypatch.setattr(cuda_automaton, "KERNEL_DEFINES",
                        ("-DUNC_STACKS=1", "-DUNC_DEPTH=1", "-DWIDE_QUEUE=1"))
    info, compiled = setup
    batches = [GrammarBatch(info, device=d, max_batch=len(compiled)) for d in ("cpu", "cuda")]
    masks = []
    for batch in batches:
        for slot in range(batch.max_batch):
            batch.bind(slot, compiled[slot])
        masks.append(batch.fill_next_token_bitmask(
            torch.zeros((batch.max_batch, (info.vocab_size + 31) // 32), dtype=torch.int32,
                        device=batch.device)).cpu().numpy())
    errors = batches[1].error_codes().cpu().numpy()
    assert (errors == ErrorCode.UNCERTAIN_WALK_TOO_LARGE).any()
    for slot in range(len(compiled)):
        if errors[slot] == 0:
            np.testing.assert_array_equal(masks[0][slot], masks[1][slot], err_msg=f"slot {slot}")
        else:
            assert errors[slot] == ErrorCode.UNCERTAIN_WALK_TOO_LARGE


@cuda
@pytest.mark.gpu
def test_eager_graph_replays_match_direct_launches(setup):
    """Eager fill and accept replay graphs of themselves from their second call on: masks,
    accepted flags and states equal those of a batch that launches every kernel (and the CPU
    reference is compared elsewhere); a graph was in fact captured and replayed."""
    info, compiled = setup
    batches = [GrammarBatch(info, device="cuda", max_batch=2 * len(compiled) + 1,
                            eager_graphs=flag) for flag in (True, False)]
    logs = [[], []]
    for i, batch in enumerate(batches):
        random_run(batch, info, compiled, steps=20, seed=5,
                   check=lambda what, m, i=i: logs[i].append((what, m.cpu().numpy().copy())))
    for step, ((what, m0), (_, m1)) in enumerate(zip(*logs)):
        np.testing.assert_array_equal(m0, m1, err_msg=f"step {step} ({what})")
    compare_states(*batches, where="end")
    assert any(isinstance(g, torch.cuda.CUDAGraph) for g in batches[0]._graphs.values())
    assert not batches[1]._graphs


EAGER_CPU_BATCH = """
import sys
import torch
import gxg
from gxg.batch import GrammarBatch
from gxg.grammar_compiler import GrammarCompiler
from gxg.tokenizer import TokenizerInfo, VocabType
vocab = [b"[", b"]", b"1", b",", b" ", b"</s>"]
info = TokenizerInfo(vocab, VocabType.RAW, vocab_size=len(vocab), stop_token_ids=[5])
compiled = GrammarCompiler(info).compile_grammar(
    gxg.Grammar.from_ebnf('root ::= "[" ("1" ("," " "? "1")*)? "]"'))
batch = GrammarBatch(info, device="cpu", max_batch=2)
batch.bind(0, compiled, max_tokens=8)
bitmask = torch.zeros((2, 1), dtype=torch.int32)
for token in (0, 2, 3, 2, 1):
    batch.fill_next_token_bitmask(bitmask)
    assert bool(batch.accept(torch.tensor([token, 0]))[0])
batch.rollback(torch.tensor([1, 0]))
print("torch._dynamo" in sys.modules)
"""


def test_an_eager_cpu_batch_calls_its_kernels_without_the_dispatcher():
    """Outside torch.compile a CPU batch calls the ops' CPU implementations directly
    (``xg_ops.CPU_KERNELS``), as a CUDA batch calls its kernels: no dispatcher layers, and no
    import of torch._dynamo (~1 s, which the dispatcher's first call makes) in a fresh process
    that binds, fills, accepts and rolls back."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", EAGER_CPU_BATCH], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"
