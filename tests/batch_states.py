"""Batch test helpers: comparing two batches' runtime states field by field (the CUDA ops against
the CPU ops), a batch against one matcher per slot, and whole CPU-vs-CUDA runs (eager, graphs)."""
from __future__ import annotations

import numpy as np

from gxg.batch import GrammarBatch
from gxg.runtime import RuntimeState


def compare_states(cpu: GrammarBatch, gpu: GrammarBatch, where: str) -> None:
    """Every state field equal: the live pool entries and tops, the pool index in full (the
    kernels keep the same hash-consing index as the reference, slot for slot), the scalars;
    the history ring only through the rollbacks the runs make."""
    a, b = cpu.host_state(), gpu.host_state()
    for name in RuntimeState.FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if name in ("pool_node", "pool_parent"):
            for slot in range(cpu.max_batch):
                size = int(a.pool_size[slot])
                np.testing.assert_array_equal(x[slot, :size], y[slot, :size],
                                              err_msg=f"{where}: {name} slot {slot}")
        elif name == "tops":
            for slot in range(cpu.max_batch):
                n = int(a.num_tops[slot])
                np.testing.assert_array_equal(x[slot, :n], y[slot, :n], err_msg=where)
        elif name.startswith("hist_") and name not in ("hist_len", "hist_head"):
            continue  # compared through rollbacks
        else:
            np.testing.assert_array_equal(x, y, err_msg=f"{where}: {name}")


def check_masks_against_matchers(bitmask, matchers, vocab_size: int, where: str) -> None:
    """Each row of the batch's filled ``bitmask`` (CPU) equals its slot's matcher's mask (slots
    whose matcher has terminated are skipped)."""
    from gxg.matcher import allocate_token_bitmask
    from mask_oracles import mask_to_bool
    for slot, matcher in enumerate(matchers):
        if matcher.is_terminated():
            continue
        single = allocate_token_bitmask(1, vocab_size)
        matcher.fill_next_token_bitmask(single)
        np.testing.assert_array_equal(mask_to_bool(bitmask[slot].numpy(), vocab_size),
                                      mask_to_bool(single[0].numpy(), vocab_size),
                                      err_msg=f"{where} slot {slot}")


def accept_against_matchers(batch: GrammarBatch, matchers, tokens) -> None:
    """Accept ``tokens`` (one per slot) in the batch and in each live slot's matcher: the same
    verdicts, then the same stacks."""
    import torch
    accepted = batch.accept(torch.tensor(tokens, device=batch.device)).cpu()
    for slot, matcher in enumerate(matchers):
        if not matcher.is_terminated():
            assert bool(accepted[slot]) == matcher.accept_token(tokens[slot]), slot
    host = batch.host_state()
    for slot, matcher in enumerate(matchers):
        assert host.stacks(slot) == matcher.state.stacks(0), slot


def capture_accept_then_fill(gpu: GrammarBatch, warm: GrammarBatch, tokens, bitmask):
    """A CUDA graph of ``gpu.accept(tokens)`` then ``gpu.fill_next_token_bitmask(bitmask)``
    (``warm``: a batch like ``gpu``, run once on a side stream first so that the kernels are
    built and nothing is allocated during capture); ``bitmask`` holds step 0's mask."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        warm.fill_next_token_bitmask(torch.zeros_like(bitmask))
        warm.accept(torch.zeros_like(tokens))
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    gpu.fill_next_token_bitmask(bitmask)
    with torch.cuda.graph(graph):
        gpu.accept(tokens)
        gpu.fill_next_token_bitmask(bitmask)
    return graph


def run_with_rollbacks(batch: GrammarBatch, grammars, steps: int, seed: int, choose,
                       check) -> None:
    """Bind ``grammars`` round-robin, then ``steps`` times: fill -> ``choose(rows, rng)`` (one
    token per slot from the filled rows) -> accept, with random rollbacks of 0-2 tokens;
    ``check(what, bitmask)`` after each op. Deterministic for a seed, so a CPU and a CUDA batch
    given the same arguments take the same tokens while their masks agree."""
    import random
    import torch
    rng = random.Random(seed)
    for slot in range(batch.max_batch):
        batch.bind(slot, grammars[slot % len(grammars)])
    words = (batch.arena.vocab_size + 31) // 32
    bitmask = torch.zeros((batch.max_batch, words), dtype=torch.int32, device=batch.device)
    for _ in range(steps):
        batch.fill_next_token_bitmask(bitmask)
        check("fill", bitmask)
        tokens = choose(bitmask.cpu().numpy(), rng)
        batch.accept(torch.tensor(tokens, dtype=torch.int64, device=batch.device))
        check("accept", bitmask)
        if rng.random() < 0.2:
            counts = [rng.randrange(3) for _ in range(batch.max_batch)]
            batch.rollback(torch.tensor(counts, dtype=torch.int64, device=batch.device))
            check("rollback", bitmask)


def random_allowed(rows, rng, vocab_size: int) -> list:
    """One random allowed token per filled row (0 where none is)."""
    from mask_oracles import mask_to_bool
    return [int(rng.choice(np.flatnonzero(mask_to_bool(row, vocab_size)).tolist() or [0]))
            for row in rows]


def cpu_batch_equals_matchers(info, grammars, vocab_size: int, steps: int, seed: int) -> None:
    """A CPU batch with one slot per grammar against one matcher per slot: the same masks, the
    same verdicts and stacks, along random allowed tokens."""
    import random
    import torch
    from gxg.matcher import GrammarMatcher
    batch = GrammarBatch(info, device="cpu", max_batch=len(grammars))
    matchers = [GrammarMatcher(grammar) for grammar in grammars]
    for slot, grammar in enumerate(grammars):
        batch.bind(slot, grammar)
    rng = random.Random(seed)
    bitmask = torch.zeros((len(grammars), (vocab_size + 31) // 32), dtype=torch.int32)
    for step in range(steps):
        batch.fill_next_token_bitmask(bitmask)
        check_masks_against_matchers(bitmask, matchers, vocab_size, f"step {step}")
        accept_against_matchers(batch, matchers, random_allowed(bitmask.numpy(), rng,
                                                                vocab_size))


def runs_agree(batches, grammar_lists, vocab_size: int, steps: int, seed: int,
               after_op=(None, None)) -> None:
    """``run_with_rollbacks`` on two batches, each binding its own list of grammars, along
    random allowed tokens (``after_op[i]``: called after each op of batch i's run): every mask
    equal, then every state field."""
    logs = [[], []]

    def recorder(log, hook):
        def check(what, bitmask):
            log.append((what, bitmask.cpu().numpy().copy()))
            if hook is not None:
                hook()
        return check
    for batch, grammars, log, hook in zip(batches, grammar_lists, logs, after_op):
        run_with_rollbacks(batch, grammars, steps, seed,
                           lambda rows, rng: random_allowed(rows, rng, vocab_size),
                           recorder(log, hook))
    for step, ((what, m0), (_, m1)) in enumerate(zip(*logs)):
        np.testing.assert_array_equal(m0, m1, err_msg=f"{what} {step}")
    compare_states(*batches, where="end")


def cuda_runs_equal_cpu_runs(info, grammars, vocab_size: int, steps: int, seed: int) -> None:
    """``run_with_rollbacks`` on a CPU batch and on a CUDA batch (history 8): every mask equal,
    then every state field."""
    from gxg.runtime import RuntimeLimits
    batches = [GrammarBatch(info, device=d, max_batch=len(grammars),
                            limits=RuntimeLimits(history=8)) for d in ("cpu", "cuda")]
    runs_agree(batches, [grammars, grammars], vocab_size, steps, seed)


def cuda_graph_replays_equal_cpu(info, grammars, vocab_size: int, steps: int, seed: int
                                 ) -> None:
    """accept + fill captured once in a CUDA graph, replayed with each step's tokens (chosen
    from the CPU batch's masks): the same masks and states as the CPU batch."""
    import random
    import torch
    b, words = len(grammars), (vocab_size + 31) // 32
    cpu = GrammarBatch(info, device="cpu", max_batch=b)
    gpu = GrammarBatch(info, device="cuda", max_batch=b, eager_graphs=False)
    warm = GrammarBatch(info, device="cuda", max_batch=b, eager_graphs=False)
    for batch in (cpu, gpu, warm):
        for slot, grammar in enumerate(grammars):
            batch.bind(slot, grammar)
    tokens = torch.zeros(b, dtype=torch.int64, device="cuda")
    bitmask = torch.zeros((b, words), dtype=torch.int32, device="cuda")
    graph = capture_accept_then_fill(gpu, warm, tokens, bitmask)
    rng = random.Random(seed)
    cpu_mask = torch.zeros((b, words), dtype=torch.int32)
    for step in range(steps):
        cpu.fill_next_token_bitmask(cpu_mask)
        np.testing.assert_array_equal(bitmask.cpu().numpy(), cpu_mask.numpy(), err_msg=str(step))
        chosen = random_allowed(cpu_mask.numpy(), rng, vocab_size)
        cpu.accept(torch.tensor(chosen))
        tokens.copy_(torch.tensor(chosen))
        graph.replay()
    compare_states(cpu, gpu, where="after the replays")
