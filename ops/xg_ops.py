"""The ``torch.ops.xg`` ops: schemas, CPU kernels (the reference), CUDA kernels, fake kernels.

In:  ``runtime`` — a ``GrammarBatch``'s runtime blob (``gxg.blobs``: uint8 [B, n], the
     layout's header — the pointer table at byte 0 and the dimension values —, state and
     scratch buffers); ``arena`` — its ``DeviceArena``'s blob (uint8 [W, n]: every grammar
     table). The CUDA kernels read both through the pointer table; the CPU kernels view the
     buffers at the offsets ``gxg.layout.blob_layout`` gives for the header's dimension values,
     and rebuild host tables from the arena's (``gxg.ops.arena_tables``, cached per arena and
     grammar generation). B and W come from the blobs' shapes, so every argument is checked
     without reading the device. Then the op's own arguments.
Out: the ops below, each with fixed shapes, no host synchronisation and no allocation on the
     CUDA path except its output tensor, declared mutations, and (with ``GXG_NVTX=1`` in the
     environment when this module is imported: off by default, a range costs ~5 µs of host
     time a call) an nvtx range:

  xg::reset(runtime!, arena, slots)                    slots: bool [B]
  xg::accept_token(runtime!, arena, token_ids) -> bool [B]
  xg::accept_tokens(runtime!, arena, token_ids [B, T], lengths [B]) -> int32 [B]
                                                       accepted prefix of each row
  xg::slot_status(runtime) -> int32 [B, 2]             (terminated, error code) per slot
  xg::copy_slots(runtime!, source, source_slots, fields)
                                                       slot i <- source slot source_slots[i]
  xg::draft_paths(next_token, next_sibling, tokens) -> (paths, depth, reached)
                                                       draft-tree paths ([B, N] arrays)
  xg::rollback(runtime!, num_tokens) -> bool [B]       False: history too short
  xg::fill_next_token_bitmask(runtime!, arena, bitmask!, remaining?)
  xg::apply_token_bitmask_inplace(logits!, bitmask, indices?)
  xg::fill_and_apply(runtime!, arena, logits!, bitmask!, remaining?)
  xg::fill_and_sample(runtime!, arena, logits, bitmask!, temperature, top_k, top_p, seed,
                      offset!, vocab_size, remaining?) -> int64 [B]

``remaining`` (int32 [B], optional): a token budget per slot — the tokens it may still
generate, this one included; -1 for none. Each fill then keeps only the tokens after which the
slot's output can still complete within its budget (``ops.reference.restrict_to_budget``;
CUDA: ``xg_budget`` + ``xg_budget_apply``). The caller counts it down (``GrammarBatch`` does).

Semantics per slot: unbound (grammar -1): every token allowed and accepted, no state; a
terminated slot, or one with an error code, allows only its stop tokens and accepts nothing
(the code stays until reset); a failed rollback sets ERROR ROLLBACK_TOO_FAR. ``fill`` may set
an error code too (an uncertain-token walk that outgrew the GPU kernel's local space), which is
why it declares ``runtime`` mutated.
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from gxg import blobs, layout
from gxg.runtime import ErrorCode, RuntimeLimits, RuntimeState
from gxg.ops import arena_tables, reference
from gxg.ops.apply_bitmask import apply_arguments, apply_token_bitmask_inplace_cpu
from gxg.ops.copy_slots import check_copy_table, copy_slots_reference
from gxg.ops.draft_paths import draft_paths_reference

_NO_RANGE = contextlib.nullcontext()

if os.environ.get("GXG_NVTX", "") not in ("", "0"):  # pragma: no cover - profiling runs only
    try:  # the nvtx package when present, else torch's binding
        import nvtx as _nvtx

        def _range(name: str):
            return _nvtx.annotate(name)
    except ImportError:
        def _range(name: str):
            if torch.cuda.is_available():
                return torch.cuda.nvtx.range(name)
            return _NO_RANGE
else:
    def _range(name: str):
        return _NO_RANGE


# ----------------------------------------------------------------------------- CPU helpers


def _host_state(runtime: torch.Tensor) -> Tuple[RuntimeState, Dict[str, int]]:
    """The state of a CPU runtime blob as numpy views (writes go to the blob), and the
    blob's dimension values."""
    data = runtime.numpy()
    dims = blobs.header_dims(data)
    views = blobs.numpy_views(data, "runtime", dims)
    row = dict(zip(layout.LIMITS_ROW, views["limits"].tolist()))
    limits = RuntimeLimits(max_stacks=row["K"], pool_entries=row["P"], history=row["H"],
                           max_closure=row["MAX_CLOSURE"])
    return RuntimeState.from_arrays(limits, [views[n] for n in RuntimeState.FIELDS]), dims


def _check_rows(name: str, tensor: torch.Tensor, runtime: torch.Tensor) -> None:
    """Metadata only: a per-slot argument has one entry per slot, on the runtime's device."""
    rows = runtime.shape[0]
    if tensor.dim() != 1 or tensor.shape[0] != rows or tensor.device != runtime.device:
        raise ValueError(f"{name} must be a 1-D tensor of {rows} entries (one per slot) on "
                         f"{runtime.device}, got shape {tuple(tensor.shape)} on {tensor.device}")


#: The ops' CPU implementations, by op name, as plain functions: ``GrammarBatch`` calls them
#: on the CPU outside torch.compile, as it calls ``CUDA_KERNELS`` on CUDA (the dispatcher's
#: layers cost per call, and its first call imports torch._dynamo: ~1 s once per process).
CPU_KERNELS: dict = {}


def _cpu_kernel(function):
    """Registers ``function`` (an op's CPU implementation) in ``CPU_KERNELS``, unchanged."""
    CPU_KERNELS[function.__name__] = function
    return function


# ----------------------------------------------------------------------------- reset


@torch.library.custom_op("xg::reset", mutates_args=("runtime",))
@_cpu_kernel
def reset(runtime: torch.Tensor, arena: torch.Tensor, slots: torch.Tensor) -> None:
    _check_rows("slots", slots, runtime)
    state, dims = _host_state(runtime)
    tables_of = arena_tables.lookup(arena, dims)
    for slot in np.flatnonzero(slots.numpy()).tolist():
        grammar = int(state.grammar[slot])
        if grammar < 0:
            _clear(state, slot)
        else:
            reference.reset(state, slot, tables_of(grammar))


def _clear(state: RuntimeState, slot: int) -> None:
    for name in ("pool_size", "num_tops", "can_end", "terminated", "error", "hist_len",
                 "hist_head"):
        getattr(state, name)[slot] = 0


@reset.register_kernel("cuda")
def _reset_cuda(runtime, arena, slots):
    from gxg.ops import cuda_automaton
    _check_rows("slots", slots, runtime)
    with _range("xg::reset"):
        # the kernels index their per-slot arguments densely: views (input_ids[:, -1]) are copied
        cuda_automaton.reset(runtime, slots.to(torch.bool).contiguous())


@reset.register_fake
def _(runtime, arena, slots):
    return None


# ----------------------------------------------------------------------------- accept


@torch.library.custom_op("xg::accept_token", mutates_args=("runtime",))
@_cpu_kernel
def accept_token(runtime: torch.Tensor, arena: torch.Tensor,
                 token_ids: torch.Tensor) -> torch.Tensor:
    _check_rows("token_ids", token_ids, runtime)
    state, dims = _host_state(runtime)
    tables_of = arena_tables.lookup(arena, dims)
    accepted = np.zeros(token_ids.shape[0], dtype=bool)
    for slot, token in enumerate(token_ids.tolist()):
        grammar = int(state.grammar[slot])
        accepted[slot] = True if grammar < 0 else reference.accept_token(
            state, slot, tables_of(grammar), int(token))
    return torch.from_numpy(accepted)


@accept_token.register_kernel("cuda")
def _accept_token_cuda(runtime, arena, token_ids):
    from gxg.ops import cuda_automaton
    _check_rows("token_ids", token_ids, runtime)
    with _range("xg::accept_token"):
        accepted = torch.empty(token_ids.shape[0], dtype=torch.bool, device=token_ids.device)
        if token_ids.dtype != torch.int64 or not token_ids.is_contiguous():
            token_ids = token_ids.to(torch.int64).contiguous()
        cuda_automaton.accept(runtime, token_ids, accepted)
    return accepted


@accept_token.register_fake
def _(runtime, arena, token_ids):
    return token_ids.new_empty(token_ids.shape[0], dtype=torch.bool)


# ----------------------------------------------------------------------------- accept_tokens


def _check_token_rows(token_ids: torch.Tensor, lengths: torch.Tensor,
                      runtime: torch.Tensor) -> None:
    rows = runtime.shape[0]
    if token_ids.dim() != 2 or token_ids.shape[0] != rows or token_ids.device != runtime.device:
        raise ValueError(f"token_ids must be a 2-D tensor of {rows} rows (one per slot) on "
                         f"{runtime.device}, got shape {tuple(token_ids.shape)} on "
                         f"{token_ids.device}")
    _check_rows("lengths", lengths, runtime)


@torch.library.custom_op("xg::accept_tokens", mutates_args=("runtime",))
@_cpu_kernel
def accept_tokens(runtime: torch.Tensor, arena: torch.Tensor, token_ids: torch.Tensor,
                  lengths: torch.Tensor) -> torch.Tensor:
    """Row b: accept ``token_ids[b, :lengths[b]]`` in order (lengths clamped to [0, T]) up to
    the first token the slot rejects; returns the accepted counts (int32 [B]). Each accepted
    token is one history step, as ``accept_token`` called that many times; an unbound slot
    accepts them all. One launch for a speculative verify: the caller passes the target's
    tokens and the length of the prefix that matches the draft (plus the target's next token),
    computed on the device, and no host synchronisation is needed."""
    _check_token_rows(token_ids, lengths, runtime)
    state, dims = _host_state(runtime)
    tables_of = arena_tables.lookup(arena, dims)
    width = token_ids.shape[1]
    counts = np.zeros(token_ids.shape[0], dtype=np.int32)
    for slot, (row, length) in enumerate(zip(token_ids.tolist(), lengths.tolist())):
        row = row[: min(max(int(length), 0), width)]
        grammar = int(state.grammar[slot])
        counts[slot] = len(row) if grammar < 0 else reference.accept_tokens(
            state, slot, tables_of(grammar), row)
    return torch.from_numpy(counts)


@accept_tokens.register_kernel("cuda")
def _accept_tokens_cuda(runtime, arena, token_ids, lengths):
    from gxg.ops import cuda_automaton
    _check_token_rows(token_ids, lengths, runtime)
    with _range("xg::accept_tokens"):
        counts = torch.empty(token_ids.shape[0], dtype=torch.int32, device=token_ids.device)
        cuda_automaton.accept_tokens(runtime, token_ids.to(torch.int64).contiguous(),
                                     lengths.to(torch.int64).contiguous(), counts)
    return counts


@accept_tokens.register_fake
def _(runtime, arena, token_ids, lengths):
    return token_ids.new_empty(token_ids.shape[0], dtype=torch.int32)


# ----------------------------------------------------------------------------- status


@torch.library.custom_op("xg::slot_status", mutates_args=())
@_cpu_kernel
def slot_status(runtime: torch.Tensor) -> torch.Tensor:
    """int32 [B, 2]: per slot (terminated 0/1, error code) — the flags as a new tensor, which a
    torch.compile graph can read next to ops that mutate ``runtime`` (dtype views of the blob
    cannot be)."""
    state, _ = _host_state(runtime)
    return torch.from_numpy(np.stack([state.terminated.astype(np.int32),
                                      state.error.astype(np.int32)], axis=1))


@slot_status.register_kernel("cuda")
def _slot_status_cuda(runtime):
    from gxg.ops import cuda_automaton
    out = torch.empty((runtime.shape[0], 2), dtype=torch.int32, device=runtime.device)
    cuda_automaton.status(runtime, out)
    return out


@slot_status.register_fake
def _(runtime):
    return runtime.new_empty((runtime.shape[0], 2), dtype=torch.int32)


# ----------------------------------------------------------------------------- copy slots


def _check_copy_arguments(runtime, source, source_slots, fields) -> None:
    if source.dtype != torch.uint8 or source.dim() != 2 or source.device != runtime.device:
        raise ValueError(f"source must be a runtime blob (uint8, 2-D) on {runtime.device}, got "
                         f"{source.dtype} {tuple(source.shape)} on {source.device}")
    if source.data_ptr() == runtime.data_ptr():
        raise ValueError("source must be another batch's runtime blob, not runtime itself")
    _check_rows("source_slots", source_slots, runtime)
    if fields.dim() != 2 or fields.shape[1] != 4 or fields.dtype != torch.int64 \
            or fields.device != runtime.device:
        raise ValueError(f"fields must be int64 [F, 4] on {runtime.device}, got {fields.dtype} "
                         f"{tuple(fields.shape)} on {fields.device}")


@torch.library.custom_op("xg::copy_slots", mutates_args=("runtime",))
@_cpu_kernel
def copy_slots(runtime: torch.Tensor, source: torch.Tensor, source_slots: torch.Tensor,
               fields: torch.Tensor) -> None:
    """Slot i of ``runtime`` takes the state of ``source``'s slot ``source_slots[i]`` (both
    runtime blobs of batches with the same limits; ``fields``: the state buffers' offsets in
    both, as ``GrammarBatch.state_copy_table`` builds them; ``ops/copy_slots.py``)."""
    _check_copy_arguments(runtime, source, source_slots, fields)
    check_copy_table(runtime, source, fields)
    copy_slots_reference(runtime, source, source_slots, fields)


@copy_slots.register_kernel("cuda")
def _copy_slots_cuda(runtime, source, source_slots, fields):
    from gxg.ops.copy_slots_triton import copy_slots_triton
    _check_copy_arguments(runtime, source, source_slots, fields)
    with _range("xg::copy_slots"):
        copy_slots_triton(runtime, source, source_slots.to(torch.int64).contiguous(),
                          fields.contiguous())


@copy_slots.register_fake
def _(runtime, source, source_slots, fields):
    return None


# ----------------------------------------------------------------------------- draft paths


def _check_draft_arrays(next_token, next_sibling, tokens) -> None:
    for name, value in (("next_token", next_token), ("next_sibling", next_sibling),
                        ("tokens", tokens)):
        if value.dim() != 2 or value.dtype != torch.int64 or value.shape != tokens.shape \
                or value.device != tokens.device:
            raise ValueError(f"{name} must be int64 [B, N] like tokens ({tuple(tokens.shape)} "
                             f"on {tokens.device}), got {value.dtype} {tuple(value.shape)} on "
                             f"{value.device}")


@torch.library.custom_op("xg::draft_paths", mutates_args=())
@_cpu_kernel
def draft_paths(next_token: torch.Tensor, next_sibling: torch.Tensor, tokens: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row of XGrammar's draft-tree arrays (int64 [B, N]): every node's tokens from the root
    (int64 [B, N, N], left-aligned), its depth (int64 [B, N]) and whether the root reaches it
    (bool [B, N]); ``ops/draft_paths.py`` documents the semantics."""
    _check_draft_arrays(next_token, next_sibling, tokens)
    return draft_paths_reference(next_token, next_sibling, tokens)


@draft_paths.register_kernel("cuda")
def _draft_paths_cuda(next_token, next_sibling, tokens):
    from gxg.ops.draft_paths_triton import draft_paths_triton
    _check_draft_arrays(next_token, next_sibling, tokens)
    with _range("xg::draft_paths"):
        return draft_paths_triton(next_token, next_sibling, tokens)


@draft_paths.register_fake
def _(next_token, next_sibling, tokens):
    b, n = tokens.shape
    return (tokens.new_empty((b, n, n)), tokens.new_empty((b, n)),
            tokens.new_empty((b, n), dtype=torch.bool))


# ----------------------------------------------------------------------------- rollback


@torch.library.custom_op("xg::rollback", mutates_args=("runtime",))
@_cpu_kernel
def rollback(runtime: torch.Tensor, num_tokens: torch.Tensor) -> torch.Tensor:
    _check_rows("num_tokens", num_tokens, runtime)
    state, _ = _host_state(runtime)
    ok = np.ones(num_tokens.shape[0], dtype=bool)
    for slot, count in enumerate(num_tokens.tolist()):
        if state.grammar[slot] < 0 or count == 0:
            continue
        if not reference.rollback(state, slot, int(count)):
            state.error[slot] = ErrorCode.ROLLBACK_TOO_FAR
            ok[slot] = False
    return torch.from_numpy(ok)


@rollback.register_kernel("cuda")
def _rollback_cuda(runtime, num_tokens):
    from gxg.ops import cuda_automaton
    _check_rows("num_tokens", num_tokens, runtime)
    with _range("xg::rollback"):
        ok = torch.empty(num_tokens.shape[0], dtype=torch.bool, device=num_tokens.device)
        cuda_automaton.rollback(runtime, num_tokens.to(torch.int64).contiguous(),
                                ok)
    return ok


@rollback.register_fake
def _(runtime, num_tokens):
    return num_tokens.new_empty(num_tokens.shape[0], dtype=torch.bool)


# ----------------------------------------------------------------------------- fill


@torch.library.custom_op("xg::fill_next_token_bitmask", mutates_args=("runtime", "bitmask"))
@_cpu_kernel
def fill_next_token_bitmask(runtime: torch.Tensor, arena: torch.Tensor,
                            bitmask: torch.Tensor,
                            remaining: Optional[torch.Tensor] = None) -> None:
    _check_bitmask(runtime, arena, bitmask)
    _check_remaining(remaining, bitmask)
    state, dims = _host_state(runtime)
    tables_of = arena_tables.lookup(arena, dims)
    rows = bitmask.numpy()
    budgets = None if remaining is None else remaining.tolist()
    for slot in range(bitmask.shape[0]):
        grammar = int(state.grammar[slot])
        if grammar < 0:
            rows[slot] = -1
            continue
        tables = tables_of(grammar)
        reference.fill_next_token_bitmask(state, slot, tables, rows[slot])
        if budgets is not None:
            reference.restrict_to_budget(state, slot, tables, rows[slot], budgets[slot])


def _check_remaining(remaining: Optional[torch.Tensor], bitmask: torch.Tensor) -> None:
    """Metadata only (no device read): int32 [B] on the bitmask's device."""
    if remaining is None:
        return
    rows = bitmask.shape[0]
    if remaining.dtype != torch.int32 or remaining.shape != (rows,) \
            or not remaining.is_contiguous() or remaining.device != bitmask.device:
        raise ValueError(f"remaining must be a contiguous int32 tensor of shape ({rows},) on "
                         f"{bitmask.device}, got {remaining.dtype} {tuple(remaining.shape)} on "
                         f"{remaining.device}")


def _check_bitmask(runtime: torch.Tensor, arena: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Metadata only (no device read): int32 [B, W], contiguous (the kernels address row b at
    b·W), on the runtime's device; B and W are the blobs' first dimensions."""
    rows, words = runtime.shape[0], arena.shape[0]
    if bitmask.dtype != torch.int32 or tuple(bitmask.shape) != (rows, words) \
            or not bitmask.is_contiguous() or bitmask.device != runtime.device:
        raise ValueError(f"bitmask must be a contiguous int32 tensor of shape ({rows}, {words}) "
                         f"on {runtime.device}, got {bitmask.dtype} "
                         f"{tuple(bitmask.shape)}{'' if bitmask.is_contiguous() else ' (strided)'}"
                         f" on {bitmask.device}")


def _fill_cuda(runtime, arena, bitmask, remaining=None) -> None:
    """The fill on CUDA: the dense rows (Triton), the uncertain walks ORed in (CUDA C++, two
    launches: xg_uncertain, xg_uncertain_wide), and with a budget the budget kernels."""
    from gxg.ops import cuda_automaton
    from gxg.ops.fill_triton import fill_dense
    _check_bitmask(runtime, arena, bitmask)
    _check_remaining(remaining, bitmask)
    fill_dense(runtime, bitmask)
    cuda_automaton.uncertain(runtime, bitmask.shape[0], bitmask)
    if remaining is not None:
        cuda_automaton.budget(runtime, bitmask, remaining)


@fill_next_token_bitmask.register_kernel("cuda")
def _fill_next_token_bitmask_cuda(runtime, arena, bitmask, remaining=None):
    with _range("xg::fill_next_token_bitmask"):
        _fill_cuda(runtime, arena, bitmask, remaining)


@fill_next_token_bitmask.register_fake
def _(runtime, arena, bitmask, remaining=None):
    return None


# ----------------------------------------------------------------------------- apply


@torch.library.custom_op("xg::apply_token_bitmask_inplace", mutates_args=("logits",))
@_cpu_kernel
def apply_token_bitmask_inplace(logits: torch.Tensor, bitmask: torch.Tensor,
                                indices: Optional[torch.Tensor] = None) -> None:
    apply_token_bitmask_inplace_cpu(logits, bitmask, indices=indices)


@apply_token_bitmask_inplace.register_kernel("cuda")
def _apply_token_bitmask_inplace_cuda(logits, bitmask, indices=None):
    from gxg.ops.apply_triton import apply_token_bitmask_inplace_triton
    with _range("xg::apply_token_bitmask_inplace"):
        apply_token_bitmask_inplace_triton(logits, bitmask, indices=indices)


@apply_token_bitmask_inplace.register_fake
def _(logits, bitmask, indices=None):
    return None


@torch.library.custom_op("xg::fill_and_apply", mutates_args=("runtime", "logits", "bitmask"))
@_cpu_kernel
def fill_and_apply(runtime: torch.Tensor, arena: torch.Tensor,
                   logits: torch.Tensor, bitmask: torch.Tensor,
                   remaining: Optional[torch.Tensor] = None) -> None:
    CPU_KERNELS["fill_next_token_bitmask"](runtime, arena, bitmask, remaining)
    apply_token_bitmask_inplace_cpu(logits, bitmask)


@fill_and_apply.register_kernel("cuda")
def _fill_and_apply_cuda(runtime, arena, logits, bitmask, remaining=None):
    from gxg.ops.apply_triton import apply_token_bitmask_inplace_triton
    _check_bitmask(runtime, arena, bitmask)
    with _range("xg::fill_and_apply"):
        apply_arguments(logits, bitmask, None, False)  # refused before anything runs
        _fill_cuda(runtime, arena, bitmask, remaining)
        apply_token_bitmask_inplace_triton(logits, bitmask)


@fill_and_apply.register_fake
def _(runtime, arena, logits, bitmask, remaining=None):
    return None


# ----------------------------------------------------------------------------- fill and sample


@torch.library.custom_op("xg::fill_and_sample", mutates_args=("runtime", "bitmask", "offset"))
@_cpu_kernel
def fill_and_sample(runtime: torch.Tensor, arena: torch.Tensor,
                    logits: torch.Tensor, bitmask: torch.Tensor, temperature: torch.Tensor,
                    top_k: torch.Tensor, top_p: torch.Tensor, seed: torch.Tensor,
                    offset: torch.Tensor, vocab_size: int,
                    remaining: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Fill ``bitmask`` as ``fill_next_token_bitmask`` does (with the token budget
    ``remaining`` when given), then draw one token per row from
    ``logits`` [B, >= vocab_size] restricted to the allowed ids (never written): greedy where
    temperature <= 0, else temperature, top-k (int32, <= 0 off), top-p (float32, >= 1 off), in
    that order. The draw is a pure function of the inputs and (seed, offset) (int64 [1] each);
    ``offset`` is advanced by 1 in place, so the next call draws fresh numbers. Returns int64
    [B]: the token, or -1 for a row that allows nothing (``accept_token`` rejects it).
    Semantics: ``ops.reference.sample_masked``; kernel: ``ops/sample_triton.py``."""
    reference.check_sample_arguments(logits, bitmask, temperature, top_k, top_p, seed, offset,
                                     vocab_size)
    CPU_KERNELS["fill_next_token_bitmask"](runtime, arena, bitmask, remaining)
    tokens = reference.sample_masked(logits, bitmask, temperature, top_k, top_p, seed, offset,
                                     vocab_size)
    offset += 1
    return tokens


@fill_and_sample.register_kernel("cuda")
def _fill_and_sample_cuda(runtime, arena, logits, bitmask, temperature, top_k, top_p,
                          seed, offset, vocab_size, remaining=None):
    from gxg.ops.sample_triton import sample_masked_triton
    reference.check_sample_arguments(logits, bitmask, temperature, top_k, top_p, seed, offset,
                                     vocab_size)
    with _range("xg::fill_and_sample"):
        _fill_cuda(runtime, arena, bitmask, remaining)
        tokens = sample_masked_triton(logits, bitmask, temperature, top_k, top_p, seed, offset,
                                      vocab_size)
        offset.add_(1)      # after the sampler: every program has read the old value
    return tokens


@fill_and_sample.register_fake
def _(runtime, arena, logits, bitmask, temperature, top_k, top_p, seed, offset,
      vocab_size, remaining=None):
    return logits.new_empty(logits.shape[0], dtype=torch.int64)


# ----------------------------------------------------------------------------- the eager path

#: The CUDA kernels of the ops by op name, for callers that run eagerly (not traced by
#: torch.compile): the same launches without the dispatcher's Python layers, which cost
#: ~100 µs per call with the ~60 tensors of the argument lists (autograd and ADInplaceOrView
#: wrappers, aliasing checks, a version bump per mutated tensor). ``GrammarBatch`` calls these
#: on CUDA when ``torch.compiler.is_compiling()`` is False; CUDA graphs capture them as they
#: capture the ops.
CUDA_KERNELS = {
    "reset": _reset_cuda,
    "slot_status": _slot_status_cuda,
    "copy_slots": _copy_slots_cuda,
    "draft_paths": _draft_paths_cuda,
    "accept_token": _accept_token_cuda,
    "accept_tokens": _accept_tokens_cuda,
    "rollback": _rollback_cuda,
    "fill_next_token_bitmask": _fill_next_token_bitmask_cuda,
    "apply_token_bitmask_inplace": _apply_token_bitmask_inplace_cuda,
    "fill_and_apply": _fill_and_apply_cuda,
    "fill_and_sample": _fill_and_sample_cuda,
}
