"""``GrammarBatch``: device-resident grammar state for ``max_batch`` slots and the step API.

In:  a ``TokenizerInfo``, a device, ``max_batch`` and ``RuntimeLimits``; compiled grammars
     bound to slots.
Out: the per-step operations as ``torch.ops.xg`` ops on tensors that never move: fill the
     bitmask, fill and apply it to logits, fill and sample (greedy, temperature, top-k,
     top-p over the allowed tokens), accept sampled tokens, roll back, reset. Nothing in
     a step reads the device from the host, so a step can be captured in a CUDA graph or traced
     by ``torch.compile``; ``bind``/``unbind`` (host writes) belong between steps.
A new grammar's mask entries are the slow part of taking it in (~0.5 ms per automaton node
with a 150k-token vocabulary). On CUDA ``bind`` registers it lazily by default
(``lazy_masks``): the arena gets the automaton and the entries the grammar's cache already has,
the fills walk every token from the other nodes on the device (exact; ~tens of µs per such top
at B = 1), a builder (``mask_builder``: a thread, or a worker process that keeps the build
off the decode loop's interpreter; ``gxg.entry_builder``) computes the missing entries, and ``commit_masks`` (called by ``bind``,
``unbind`` and eager fills, or by the caller between graph replays) copies them in between
steps. ``register_in_background`` instead registers a grammar with all its entries on a host
thread while the batch steps.

Eagerly on CUDA, ``fill_next_token_bitmask`` (and ``accept`` of a batch with token budgets)
replay CUDA graphs of themselves that they capture on their second call with the same buffers
(``eager_graphs=False`` turns this off): one host call per step instead of a launch per
kernel. ``accept`` without budgets is one kernel, launched directly; ``fill_and_apply`` is the
fill's replay and the apply's launch. Inside a caller's own capture, under torch.compile, and
on the CPU they run as they are.

Per-slot behaviour (documented contract):
  * unbound slot: the mask allows every token, ``accept`` returns True and keeps no state
    (mixed batches);
  * terminated slot (a stop token was accepted): the mask allows only the stop tokens and
    ``accept`` returns False, until ``rollback`` or ``reset``;
  * slot with an error code (a runtime limit was hit, or a rollback asked for more steps than
    the history holds): the mask allows only the stop tokens, so sampling never sees an
    all-masked row; the code stays until ``reset`` (read it with ``error_codes()``);
  * slot with a token budget (``bind(..., max_tokens=n)`` or ``set_token_budget``): every fill
    allows only tokens after which the output can still complete within the tokens left
    (``token_budget``, counted down on the device by ``accept``, given back by ``rollback`` —
    only the tokens it counted: tokens accepted past a budget of 0 are undone first —,
    restored by ``reset``); when no completion fits any more the grammar's mask stays as it is.
"""
from __future__ import annotations

import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterable, Optional, Union

import numpy as np
import torch

from gxg import blobs, layout
from gxg.ops import xg_ops  # registers torch.ops.xg
from gxg.ops.apply_bitmask import apply_arguments
from gxg.arena import ArenaCapacity, DeviceArena, canonical_device
from gxg.entry_builder import ProcessBuilder, ThreadBuilder
from gxg.grammar_compiler import CompiledGrammar
from gxg.runtime import RuntimeLimits, RuntimeState
from gxg.tokenizer import TokenizerInfo

xg = torch.ops.xg

MAX_TOKEN_BUDGET = 2 ** 31 - 1  # token_budget is int32 on the device
MAX_EAGER_GRAPHS = 8  # cached step graphs per batch (one per bitmask buffer and budget mode)


class GrammarBatch:
    def __init__(self, tokenizer_info: TokenizerInfo, device="cuda", max_batch: int = 256,
                 limits: RuntimeLimits = RuntimeLimits(),
                 capacity: ArenaCapacity = ArenaCapacity(), *, eager_graphs: bool = True,
                 arena: Optional[DeviceArena] = None, lazy_masks: Optional[bool] = None,
                 mask_builder: Optional[str] = None):
        self.device = canonical_device(device)
        # ``bind`` registers without the mask entries the grammar's cache lacks (default on
        # CUDA): the first mask needs no vocabulary walk on the host; a builder computes the
        # entries and ``commit_masks`` copies them in between steps. ``mask_builder``:
        # "thread" (the default) or "process" (a spawned worker, off the decode loop's
        # interpreter; spawning re-imports the caller's main module, which must then guard
        # its work with ``if __name__ == "__main__":``), ``gxg.entry_builder``.
        self.lazy_masks = self.device.type == "cuda" if lazy_masks is None else bool(lazy_masks)
        if mask_builder is None:
            mask_builder = "thread"
        if mask_builder not in ("process", "thread"):
            raise ValueError(f"mask_builder must be 'process' or 'thread', got {mask_builder!r}")
        self.mask_builder = mask_builder
        # grammar id -> (compiled, Future[MaskEntries]), or (compiled, commits seen) while queued
        self._building: dict = {}
        self._builder = None  # ThreadBuilder or ProcessBuilder, made by the first build
        #: grammar id -> the exception that stopped its entries' build, or the
        #: ArenaFullError of entries with no room in the arena (its nodes stay without
        #: entries: exact masks, every token walked)
        self.mask_build_errors: dict = {}
        # Eager steps on CUDA replay cached CUDA graphs of themselves (``replay_cached``): one
        # host call instead of a launch per kernel. A cache, and it says so.
        self.eager_graphs = eager_graphs
        self._graphs: dict = {}
        self._background: Optional[ThreadPoolExecutor] = None  # register_in_background's
        self._copy_tables = weakref.WeakKeyDictionary()  # state_copy_table's cache
        self.max_batch = max_batch
        self.limits = limits
        self.vocab_size = tokenizer_info.vocab_size
        # ``arena``: share another batch's (its grammars and ids; e.g. a draft batch)
        if arena is not None and arena.device != self.device:
            raise ValueError(f"the arena is on {arena.device}, the batch on {self.device}")
        self.arena = arena if arena is not None else DeviceArena(tokenizer_info, self.device,
                                                                 capacity)
        host = RuntimeState.allocate(max_batch, limits)
        host.grammar[:] = -1
        dev = self.device
        b = max_batch
        i32 = dict(dtype=torch.int32, device=dev)
        words = layout.bitmask_words(self.vocab_size)
        # The wide uncertain-token walk's queue and stacks are sized by the compiled kernels
        # (csrc/automaton.cu, xg_uncertain_wide; ~22 MB; unused on the CPU).
        space_bytes, queue_ints = 4, 1
        if dev.type == "cuda":
            from gxg.ops.cuda_automaton import wide_sizes
            space_bytes, queue_ints, _ = wide_sizes(dev)
        dims = dict(self.arena.dims, **limits.dims(b), WIDE_QUEUE=queue_ints,
                    WIDE_SPACE=(space_bytes + 3) // 4)
        # The ops' ``runtime``: one byte tensor of B rows (an op reads B from its shape) with
        # the header (pointer table at byte 0, the dimension values), the state and the
        # scratch; ``_field`` and ``_views`` are views of it.
        self.runtime, views = blobs.allocate("runtime", dims, dev, rows=b)
        for name, array in zip(RuntimeState.FIELDS, host.arrays()):
            views[name].copy_(torch.from_numpy(array))
        views["limits"].copy_(torch.tensor(limits.row(self.vocab_size, self.arena.dims["S"]),
                                           dtype=torch.int32))
        every = {**self.arena.tensors(), **views}
        # Device addresses of every buffer, in the layout's order (csrc/automaton.cu, P_*).
        views["pointer_table"].copy_(torch.tensor(
            [every[buf.name].data_ptr() for buf in layout.BUFFERS], dtype=torch.int64))
        full = layout.with_counts(dims)
        views["dims"].copy_(torch.tensor([full[d] for d in layout.DIMS], dtype=torch.int64))
        self._views = views
        self._arena_tensors = self.arena.op_tensors()
        self._field = {name: views[name] for name in RuntimeState.FIELDS}
        self._bitmask = torch.empty((b, words), **i32)
        # Token budgets: the tokens each slot may still generate, this step's included (-1:
        # none), and what ``reset`` restores. The fills take ``token_budget`` only once some
        # slot has had a budget (``_budgeted``), so batches without budgets pay nothing.
        self.token_budget = torch.full((b,), -1, **i32)
        self._budget_at_start = torch.full((b,), -1, **i32)
        # tokens accepted while the budget was already 0 (the most recent steps: the budget
        # only falls): a rollback undoes these before it gives any token back
        self._over_budget = torch.zeros((b,), **i32)
        self._budgeted = False
        self._all = torch.ones(b, dtype=torch.bool, device=dev)
        # fill_and_sample's counter-based random stream: the seed, and the offset that every
        # call advances by one on the device (write them between steps to reseed or replay).
        self.sample_seed = torch.zeros(1, dtype=torch.int64, device=dev)
        self.sample_offset = torch.zeros(1, dtype=torch.int64, device=dev)
        self._sample_constants = {}     # (name, scalar) -> constant tensor, kept for good
        # accept's static input and output when it replays a graph (``replay_cached``)
        self._step_tokens = torch.zeros(b, dtype=torch.int64, device=dev)
        self._step_accepted = torch.zeros(b, dtype=torch.bool, device=dev)

    # ------------------------------------------------------------------ binding (host side)
    def bind(self, slot: int, compiled: CompiledGrammar, *,
             max_tokens: Optional[int] = None) -> int:
        """Register ``compiled`` in the arena (once) and start slot ``slot`` on it, with a token
        budget of ``max_tokens`` (None: none); returns the grammar id. Between steps only (it
        writes from the host)."""
        self._check_slot(slot)
        self.commit_masks()
        # the completion distances only once some slot has a budget (set_token_budget)
        gid = self.arena.register(compiled, lazy=self.lazy_masks,
                                  distances=self._budgeted or max_tokens is not None)
        if self.arena.unbuilt_nodes(gid) and gid not in self._building:
            # started by the second commit_masks from now (an eager fill's comes after its
            # launches), so that the builder's Python holds up neither this bind nor the
            # first mask
            self._building[gid] = (compiled, 0)
        self._field["grammar"][slot] = gid
        self.set_token_budget(slot, max_tokens)
        self.reset([slot])
        return gid

    def _build_masks(self, gid: int, compiled: CompiledGrammar) -> None:  # (tests replace it)
        """Compute the missing mask entries of grammar ``gid`` on the batch's builder (host
        work only: no CUDA call, so it never meets a capture; ``gxg.entry_builder``)."""
        if self._builder is None:
            self._builder = (ProcessBuilder(self.arena.tokenizer_info)
                             if self.mask_builder == "process" else ThreadBuilder())
        self._building[gid] = (compiled, self._builder.submit(compiled))

    def _start_builds(self, now: bool = False) -> None:
        """Start the queued builds that have waited for one commit already (all, ``now``)."""
        for gid, (compiled, waited) in list(self._building.items()):
            if isinstance(waited, int):
                if now or waited >= 1:
                    self._build_masks(gid, compiled)
                else:
                    self._building[gid] = (compiled, waited + 1)

    def _busy(self) -> bool:
        """Inside a capture or under torch.compile: no host work on the arena."""
        return torch.compiler.is_compiling() or (
            self.device.type == "cuda" and torch.cuda.is_current_stream_capturing())

    def commit_masks(self, wait: bool = False) -> int:
        """Copy the mask entries that the builder has finished into the arena (on the
        current stream, so the steps queued before use the old entries and later ones the
        new) and start the builds that ``bind`` queued (at the second commit after the bind:
        the first is the first fill's, which then runs without the builder beside it); with
        ``wait``, start and wait for every build first. Returns how many grammars got their
        entries. ``bind`` and ``unbind`` call it, eager fills before and after their launches;
        a loop that only replays its own CUDA graphs (or runs under torch.compile) calls it
        between steps (cheap when nothing is pending). Does nothing inside a capture or
        while torch.compile traces."""
        committed = self._commit_finished(wait)
        if self._building and not self._busy():
            self._start_builds()
        return committed

    def _commit_finished(self, wait: bool = False) -> int:
        if not self._building or self._busy():
            return 0
        if wait:
            self._start_builds(now=True)
        committed = 0
        for gid, (compiled, future) in list(self._building.items()):
            if not self.arena.holds(gid, compiled):  # it left the arena: drop its build
                if not isinstance(future, int):
                    future.cancel()
                del self._building[gid]
                continue
            if isinstance(future, int) or not (wait or future.done()):
                continue
            del self._building[gid]
            try:
                entries = future.result()
                committed += self.arena.complete_entries(gid, compiled, entries)
            except Exception as error:  # noqa: BLE001 - kept for the caller; masks stay exact
                # a failed build, or entries the arena has no room for (ArenaFullError: the
                # grammar goes on walking its nodes' tokens on the device, exact but slower)
                self.mask_build_errors[gid] = error
        return committed

    def register_in_background(self, compiled: CompiledGrammar) -> "Future[int]":
        """Register ``compiled`` in the arena on a background thread while the batch goes on
        stepping (the arena's lock guards its tables; the copies touch only the new grammar's
        ranges and are finished, on the device too, when the future is). The slow part is the
        grammar's mask entries, computed on the host. Once the future is done, ``bind(slot,
        compiled)`` only resets the slot: a request whose grammar is new then costs the other
        requests' steps nothing but the thread's share of the host."""
        if self._background is None:
            self._background = ThreadPoolExecutor(max_workers=1,
                                                  thread_name_prefix="gxg-register")

        def register() -> int:
            # may_move=False: compacting would move other grammars under the steps running
            # beside this thread (a full arena raises instead)
            if self.device.type != "cuda":
                return self.arena.register(compiled, may_move=False)
            # a stream of its own: the copies must not queue behind the decode loop's work on
            # the caller's stream (each would wait for the step in flight)
            stream = torch.cuda.Stream(self.device)
            with torch.cuda.stream(stream):
                gid = self.arena.register(compiled, may_move=False)
            stream.synchronize()  # the copies are done before the future is
            return gid
        return self._background.submit(register)

    def unbind(self, slot: int) -> None:
        self._check_slot(slot)
        self.commit_masks()
        self._field["grammar"][slot] = -1
        self.set_token_budget(slot, None)
        self.reset([slot])

    def set_token_budget(self, slot: int, max_tokens: Optional[int]) -> None:
        """From now on slot ``slot`` may generate at most ``max_tokens`` more tokens and its
        output must complete within them (None: no budget); ``reset`` restores this budget.
        Between steps only (a host write)."""
        self._check_slot(slot)
        if max_tokens is None:
            value = -1
        elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int) \
                or not 0 <= max_tokens <= MAX_TOKEN_BUDGET:
            raise ValueError(f"max_tokens must be an int from 0 to {MAX_TOKEN_BUDGET} or None, "
                             f"got {max_tokens!r}")
        else:
            value = max_tokens
            self._budgeted = True
            # the budget's fills read the distances of every grammar a slot may hold (from
            # now on ``bind`` registers them with theirs)
            self.arena.write_distances()
        self.token_budget[slot] = value
        self._budget_at_start[slot] = value
        self._over_budget[slot] = 0

    def _budget(self) -> Optional[torch.Tensor]:
        return self.token_budget if self._budgeted else None

    def _op(self, name: str):
        """``torch.ops.xg.<name>``, or outside torch.compile its implementation for the
        batch's device directly (``gxg.ops.xg_ops.CUDA_KERNELS`` / ``CPU_KERNELS``: the same
        work, without the dispatcher's per-call Python layers — the fast eager path — and,
        on the CPU, without the import of torch._dynamo that its first call makes)."""
        if not torch.compiler.is_compiling():
            if self.device.type == "cuda":
                return xg_ops.CUDA_KERNELS[name]
            if self.device.type == "cpu":
                return xg_ops.CPU_KERNELS[name]
        return getattr(xg, name)

    def _replays(self) -> bool:
        """Eager steps replay cached graphs here and now (see ``replay_cached``)."""
        return self.eager_graphs and self.device.type == "cuda" and not self._busy()

    def replay_cached(self, key: tuple, body) -> bool:
        """Run ``body`` (device work on buffers of fixed address; ``key`` names them) as a
        cached CUDA graph of this batch (its step calls, and step code built on them such as
        ``gxg.contrib.hf``'s), where that applies: on CUDA, eagerly (not traced by
        torch.compile, not inside a capture of the caller's), with ``eager_graphs``. The first
        call with a key runs nothing here (returns False: the caller runs the step itself,
        which also loads the kernels); the second captures ``body`` (capturing runs nothing)
        and replays it; later calls replay it. Returns whether it ran the step."""
        from gxg.ops import cuda_automaton
        if not self._replays():
            return False
        key = key + (cuda_automaton.KERNEL_DEFINES,)
        graph = self._graphs.get(key)
        if graph is None:
            if len(self._graphs) >= MAX_EAGER_GRAPHS:
                self._graphs.pop(next(iter(self._graphs)))
            self._graphs[key] = "seen once"
            return False
        if not isinstance(graph, torch.cuda.CUDAGraph):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                body()
            self._graphs[key] = graph
        graph.replay()
        return True

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.max_batch:
            raise IndexError(f"slot {slot} out of range [0, {self.max_batch})")

    # ------------------------------------------------------------------ steps (device side)
    def fill_next_token_bitmask(self, bitmask: torch.Tensor) -> torch.Tensor:
        self._check_bitmask(bitmask)
        self._commit_finished()

        def fill():
            self._op("fill_next_token_bitmask")(self.runtime, self._arena_tensors, bitmask,
                                                self._budget())

        if not self.replay_cached(("fill", bitmask.data_ptr(), bitmask.stride(0),
                                   self._budgeted), fill):
            fill()
        self.commit_masks()  # (starts the builds bind queued, now that the fill is launched)
        return bitmask

    def fill_and_apply(self, logits: torch.Tensor,
                       bitmask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Mask ``logits`` [max_batch, >= vocab_size] in place; the bitmask used is written to
        ``bitmask`` when given (else to an internal buffer, returned)."""
        bitmask = self._bitmask if bitmask is None else bitmask
        self._check_bitmask(bitmask)
        if self._replays():
            # eagerly: the fill as the cached graph of fill_next_token_bitmask (logits are new
            # every step, so no graph of both), then the apply's kernel: one replay and one
            # launch instead of the op's four launches. The logits are checked first, as the
            # op checks them before anything runs.
            apply_arguments(logits, bitmask, None, False)
            self.fill_next_token_bitmask(bitmask)
            self._op("apply_token_bitmask_inplace")(logits, bitmask)
            return bitmask
        self._commit_finished()
        self._op("fill_and_apply")(self.runtime, self._arena_tensors, logits, bitmask,
                                   self._budget())
        self.commit_masks()
        return bitmask

    def fill_and_sample(self, logits: torch.Tensor, *,
                        temperature: Union[float, torch.Tensor] = 0.0,
                        top_k: Union[int, torch.Tensor] = 0,
                        top_p: Union[float, torch.Tensor] = 1.0,
                        seed: Union[int, torch.Tensor, None] = None,
                        bitmask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Fill the bitmask (into ``bitmask`` when given, else the internal buffer) and draw one
        token per slot from ``logits`` [max_batch, >= vocab_size] restricted to the allowed ids,
        in one op (``xg::fill_and_sample``): the logits are read, never written. Returns int64
        [max_batch], ready for ``accept``; a row that allows nothing gives -1 (cannot happen
        for a bound slot; ``accept`` rejects it). Ids >= vocab_size are never drawn.

        ``temperature`` (<= 0: greedy, lowest id among ties), ``top_k`` (<= 0: off) and
        ``top_p`` (>= 1: off) apply in that order (as HF and vLLM do; ties at a cut are kept):
        Python scalars for every row, or tensors [max_batch] for per-request values (float32,
        int32, float32 on the batch's device; another dtype costs a cast kernel per call). A
        scalar maps to a constant tensor cached per distinct value for the batch's life: no
        kernel and no allocation after the first call with that value, so an eager warm-up
        call keeps the step capturable in a CUDA graph (and the cache stays small when the
        values do; pass a tensor for values that change every step).

        ``seed``: None uses ``sample_seed`` (int64 [1] on the device, 0 at construction); an int
        uses a cached constant tensor; a tensor (int64, one element) is used as is. Each call
        draws from (seed, ``sample_offset``) and advances ``sample_offset`` by one on the device,
        so successive steps draw fresh numbers and a run is replayed by resetting the offset
        (``batch.sample_offset.zero_()``) with the same seed. Semantics and noise:
        ``ops.reference.sample_masked``."""
        bitmask = self._bitmask if bitmask is None else bitmask
        self._check_bitmask(bitmask)

        def constant(name, value, shape, dtype):
            key = (name, value)
            if key not in self._sample_constants:
                self._sample_constants[key] = torch.full(shape, value, dtype=dtype,
                                                         device=self.device)
            return self._sample_constants[key]

        def per_row(name, value, dtype, kind):
            if isinstance(value, torch.Tensor):
                return value.to(device=self.device, dtype=dtype)   # no-op when it fits
            return constant(name, kind(value), (self.max_batch,), dtype)

        if seed is None:
            seed_tensor = self.sample_seed
        elif isinstance(seed, torch.Tensor):
            seed_tensor = seed
        else:
            seed_tensor = constant("seed", int(seed), (1,), torch.int64)
        self._commit_finished()
        tokens = self._op("fill_and_sample")(
            self.runtime, self._arena_tensors, logits, bitmask,
            per_row("temperature", temperature, torch.float32, float),
            per_row("top_k", top_k, torch.int32, int),
            per_row("top_p", top_p, torch.float32, float), seed_tensor,
            self.sample_offset, self.vocab_size, self._budget())
        self.commit_masks()
        return tokens

    def accept(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Advance every slot by its token; returns accepted (bool [max_batch]). A rejected
        token leaves its slot unchanged. An accepted token counts against its slot's budget."""
        def step(tokens):
            accepted = self._op("accept_token")(self.runtime, self._arena_tensors, tokens)
            if self._budgeted:
                self._over_budget.add_((accepted & (self.token_budget == 0)).to(torch.int32))
                self.token_budget.sub_((accepted & (self.token_budget > 0)).to(torch.int32))
            return accepted

        def static_step():
            self._step_accepted.copy_(step(self._step_tokens))

        # Without a budget the step is one launch: launched directly it costs the host less
        # than the graph's way (the tokens' copy in, the replay, the flags' clone out).
        if self._budgeted and self._replays() and token_ids.shape == self._step_tokens.shape \
                and token_ids.device == self.device:
            self._step_tokens.copy_(token_ids)  # the graph reads its tokens from here
            if self.replay_cached(("accept", self._budgeted), static_step):
                return self._step_accepted.clone()  # the next replay overwrites the buffer
        return step(token_ids)

    def accept_tokens(self, token_ids: torch.Tensor,
                      lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Advance slot b by ``token_ids[b, :lengths[b]]`` (int64 [max_batch, T]; lengths int
        [max_batch], default T) in order, up to the first token it rejects; returns the
        accepted counts (int32 [max_batch]) on the device, with no host synchronisation. Each
        accepted token is one rollback step and counts against the slot's budget, exactly as
        ``accept`` that many times: the verify step of speculative decoding (pass the target's
        tokens and the length of the prefix that matches the draft, plus one)."""
        if lengths is None:
            lengths = torch.full((token_ids.shape[0],), token_ids.shape[1], dtype=torch.int64,
                                 device=token_ids.device)
        counts = self._op("accept_tokens")(self.runtime, self._arena_tensors, token_ids,
                                           lengths)
        if self._budgeted:
            budget = self.token_budget
            counted = torch.where(budget > 0, torch.minimum(counts, budget),
                                  torch.zeros_like(budget))
            self._over_budget.add_(torch.where(budget >= 0, counts - counted,
                                               torch.zeros_like(budget)))
            budget.sub_(counted)
        return counts

    def rollback(self, num_tokens: Union[int, torch.Tensor]) -> torch.Tensor:
        """Undo the last ``num_tokens`` steps of each slot (an int for all, or int [max_batch]);
        returns ok (bool [max_batch]). The tokens go back to the slot's budget."""
        if isinstance(num_tokens, int):
            num_tokens = torch.full((self.max_batch,), num_tokens, dtype=torch.int64,
                                    device=self.device)
        ok = self._op("rollback")(self.runtime, num_tokens)
        if self._budgeted:
            undone = torch.where(ok & (self.token_budget >= 0), num_tokens, 0).to(torch.int32)
            past_budget = torch.minimum(undone, self._over_budget)
            self._over_budget.sub_(past_budget)
            torch.minimum(self.token_budget + (undone - past_budget), self._budget_at_start,
                          out=self.token_budget)
        return ok

    def reset(self, slots: Union[Iterable[int], torch.Tensor, None] = None) -> None:
        """Reset the given slots (ids, or a bool mask; None: all) to their grammar's start."""
        if slots is None:
            which = self._all
        elif isinstance(slots, torch.Tensor) and slots.dtype == torch.bool:
            which = slots
        else:
            which = torch.zeros(self.max_batch, dtype=torch.bool)
            which[torch.as_tensor(list(slots), dtype=torch.long)] = True
            which = which.to(self.device)
        self._op("reset")(self.runtime, self._arena_tensors, which)
        if self._budgeted:
            torch.where(which, self._budget_at_start, self.token_budget, out=self.token_budget)
            self._over_budget.masked_fill_(which, 0)

    def is_terminated(self) -> torch.Tensor:
        """bool [max_batch] on the device (a new tensor: ``xg::slot_status``)."""
        return self._op("slot_status")(self.runtime)[:, 0] != 0

    def error_codes(self) -> torch.Tensor:
        """int32 [max_batch] on the device: each slot's error code, 0 for none."""
        return self._op("slot_status")(self.runtime)[:, 1]

    def _check_bitmask(self, bitmask: torch.Tensor) -> None:
        words = layout.bitmask_words(self.vocab_size)
        if bitmask.shape != (self.max_batch, words) or bitmask.dtype != torch.int32:
            raise ValueError(f"bitmask must be int32 of shape ({self.max_batch}, {words}), got "
                             f"{bitmask.dtype} {tuple(bitmask.shape)}")

    # ------------------------------------------------------------------ host matchers
    def host_state(self) -> RuntimeState:
        """A host copy of the whole state (a device read: not for the step loop)."""
        return RuntimeState.from_arrays(self.limits,
                                        [self._field[name].cpu().numpy().copy()
                                         for name in RuntimeState.FIELDS])

    def load_state(self, state: RuntimeState) -> None:
        """Overwrite the whole state with ``state`` (same max_batch and limits; a host write:
        between steps only). ``host_state()`` reads it back."""
        if state.limits != self.limits or state.batch_size != self.max_batch:
            raise ValueError("the state's limits or batch size differ from the batch's")
        for name in RuntimeState.FIELDS:
            self._field[name].copy_(torch.from_numpy(np.ascontiguousarray(getattr(state, name))))

    def copy_slots_from(self, other: "GrammarBatch", source_slots: torch.Tensor) -> None:
        """Slot i takes the state of ``other``'s slot ``source_slots[i]`` (int64 [max_batch] on
        the device; the two batches share an arena and limits): one ``xg::copy_slots``, no host
        sync, capturable once ``state_copy_table(other)`` exists (the first call builds it, a
        host-to-device copy). Token budgets are not copied."""
        if other.arena is not self.arena or other.limits != self.limits:
            raise ValueError("copy_slots_from needs a batch with the same arena and limits")
        if source_slots.shape != (self.max_batch,):
            raise ValueError(f"source_slots must have {self.max_batch} entries, got "
                             f"{tuple(source_slots.shape)}")
        self._op("copy_slots")(self.runtime, other.runtime, source_slots,
                               self.state_copy_table(other))

    def state_copy_table(self, other: "GrammarBatch") -> torch.Tensor:
        """``xg::copy_slots``'s ``fields`` for copies from ``other`` into this batch: per state
        buffer, its byte offset in both runtime blobs, its bytes per slot and its element size
        (int64 [F, 4] on the device; built once per source batch, a cache)."""
        table = self._copy_tables.get(other)
        if table is None:
            rows = []
            for name in RuntimeState.FIELDS:
                mine, theirs = self._field[name], other._field[name]
                rows.append([mine.data_ptr() - self.runtime.data_ptr(),
                             theirs.data_ptr() - other.runtime.data_ptr(),
                             mine[0].numel() * mine.element_size(), mine.element_size()])
            table = torch.tensor(rows, dtype=torch.int64, device=self.device)
            self._copy_tables[other] = table
        return table

    def to_matcher(self, slot: int):
        """A CPU ``GrammarMatcher`` holding a copy of slot ``slot``'s state."""
        from gxg.matcher import GrammarMatcher
        gid = int(self._field["grammar"][slot])
        if gid < 0:
            raise ValueError(f"slot {slot} is not bound")
        matcher = GrammarMatcher(self.arena.compiled(gid), limits=self.limits,
                                 max_rollback_tokens=self.limits.history)
        self.host_state().copy_slot(slot, matcher.state, 0)
        matcher.state.grammar[0] = 0
        return matcher

    def from_matcher(self, slot: int, matcher) -> None:
        """Bind slot ``slot`` to the matcher's grammar and copy its state in."""
        if matcher.state.limits != self.limits:
            raise ValueError("the matcher's RuntimeLimits differ from the batch's")
        gid = self.bind(slot, matcher.compiled_grammar)
        for name, tensor in self._field.items():
            value = getattr(matcher.state, name)[0]
            tensor[slot] = torch.as_tensor(np.asarray(value)).to(self.device)
        self._field["grammar"][slot] = gid
