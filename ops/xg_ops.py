"""The ``torch.ops.xg`` ops: schemas, CPU kernels (the reference), CUDA kernels, fake kernels.

In:  ``runtime`` — the runtime tensors of a ``GrammarBatch`` in ``RUNTIME_FIELDS`` order (the
     layout's state and scratch buffers, ``gxg.layout``, then the pointer table); ``arena`` —
     the ``DeviceArena`` buffers in ``ARENA_FIELDS`` order (the layout's arena group), all the
     grammar tables both kernels read: the CUDA kernels through the pointer table, the CPU
     kernels as host tables rebuilt from them (``gxg.ops.arena_tables``, cached per arena and
     grammar generation); and the op's own arguments.
Out: the ops below, each with fixed shapes, no host synchronisation and no allocation on the
     CUDA path except its output tensor, declared mutations, and an nvtx range:

  xg::reset(runtime!, arena, slots)                    slots: bool [B]
  xg::accept_token(runtime!, arena, token_ids) -> bool [B]
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
from typing import List, Optional

import numpy as np
import torch

from gxg import layout
from gxg.runtime import ErrorCode, RuntimeLimits, RuntimeState
from gxg.ops import arena_tables, reference
from gxg.ops.apply_bitmask import apply_arguments, apply_token_bitmask_inplace_cpu

# The runtime list: the layout's state and scratch buffers in table order, then the pointer
# table (the device addresses of every buffer of gxg.layout, in table order).
STATE_COUNT = len(RuntimeState.FIELDS)
RUNTIME_FIELDS = tuple(layout.names("state") + layout.names("scratch")) + ("pointer_table",)
LIMITS_INDEX = RUNTIME_FIELDS.index("limits")
BUDGET_PLAN_INDEX = RUNTIME_FIELDS.index("budget_plan")
BUDGET_DROP_INDEX = RUNTIME_FIELDS.index("budget_drop")
TABLE_INDEX = len(RUNTIME_FIELDS) - 1

try:  # the nvtx package when present, else torch's binding
    import nvtx as _nvtx

    def _range(name: str):
        return _nvtx.annotate(name)
except ImportError:  # pragma: no cover - depends on the machine
    def _range(name: str):
        if torch.cuda.is_available():
            return torch.cuda.nvtx.range(name)
        return contextlib.nullcontext()


# ----------------------------------------------------------------------------- CPU helpers


def _limits(runtime: List[torch.Tensor]) -> RuntimeLimits:
    row = dict(zip(layout.LIMITS_ROW, runtime[LIMITS_INDEX].tolist()))
    return RuntimeLimits(max_stacks=row["K"], pool_entries=row["P"], history=row["H"],
                         max_closure=row["MAX_CLOSURE"])


def _host_state(runtime: List[torch.Tensor]) -> RuntimeState:
    return RuntimeState.from_arrays(_limits(runtime),
                                    [t.numpy() for t in runtime[:STATE_COUNT]])


# ----------------------------------------------------------------------------- reset


@torch.library.custom_op("xg::reset", mutates_args=("runtime",))
def reset(runtime: List[torch.Tensor], arena: List[torch.Tensor], slots: torch.Tensor) -> None:
    state = _host_state(runtime)
    tables_of = arena_tables.lookup(arena)
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
    with _range("xg::reset"):
        # the kernels index their per-slot arguments densely: views (input_ids[:, -1]) are copied
        cuda_automaton.reset(runtime[TABLE_INDEX], slots.to(torch.bool).contiguous())


@reset.register_fake
def _(runtime, arena, slots):
    return None


# ----------------------------------------------------------------------------- accept


@torch.library.custom_op("xg::accept_token", mutates_args=("runtime",))
def accept_token(runtime: List[torch.Tensor], arena: List[torch.Tensor],
                 token_ids: torch.Tensor) -> torch.Tensor:
    state = _host_state(runtime)
    tables_of = arena_tables.lookup(arena)
    accepted = np.zeros(token_ids.shape[0], dtype=bool)
    for slot, token in enumerate(token_ids.tolist()):
        grammar = int(state.grammar[slot])
        accepted[slot] = True if grammar < 0 else reference.accept_token(
            state, slot, tables_of(grammar), int(token))
    return torch.from_numpy(accepted)


@accept_token.register_kernel("cuda")
def _accept_token_cuda(runtime, arena, token_ids):
    from gxg.ops import cuda_automaton
    with _range("xg::accept_token"):
        accepted = torch.empty(token_ids.shape[0], dtype=torch.bool, device=token_ids.device)
        cuda_automaton.accept(runtime[TABLE_INDEX], token_ids.to(torch.int64).contiguous(),
                              accepted)
    return accepted


@accept_token.register_fake
def _(runtime, arena, token_ids):
    return token_ids.new_empty(token_ids.shape[0], dtype=torch.bool)


# ----------------------------------------------------------------------------- rollback


@torch.library.custom_op("xg::rollback", mutates_args=("runtime",))
def rollback(runtime: List[torch.Tensor], num_tokens: torch.Tensor) -> torch.Tensor:
    state = _host_state(runtime)
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
    with _range("xg::rollback"):
        ok = torch.empty(num_tokens.shape[0], dtype=torch.bool, device=num_tokens.device)
        cuda_automaton.rollback(runtime[TABLE_INDEX], num_tokens.to(torch.int64).contiguous(),
                                ok)
    return ok


@rollback.register_fake
def _(runtime, num_tokens):
    return num_tokens.new_empty(num_tokens.shape[0], dtype=torch.bool)


# ----------------------------------------------------------------------------- fill


@torch.library.custom_op("xg::fill_next_token_bitmask", mutates_args=("runtime", "bitmask"))
def fill_next_token_bitmask(runtime: List[torch.Tensor], arena: List[torch.Tensor],
                            bitmask: torch.Tensor,
                            remaining: Optional[torch.Tensor] = None) -> None:
    _check_remaining(remaining, bitmask)
    state = _host_state(runtime)
    tables_of = arena_tables.lookup(arena)
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


def _check_bitmask(runtime: List[torch.Tensor], bitmask: torch.Tensor) -> None:
    """Metadata only (no device read): int32 [B, W], contiguous (the kernels address row b at
    b·W), on the runtime's device; B and W as the runtime's [B, W] scratch has them."""
    rows, words = runtime[BUDGET_DROP_INDEX].shape
    if bitmask.dtype != torch.int32 or tuple(bitmask.shape) != (rows, words) \
            or not bitmask.is_contiguous() or bitmask.device != runtime[0].device:
        raise ValueError(f"bitmask must be a contiguous int32 tensor of shape ({rows}, {words}) "
                         f"on {runtime[0].device}, got {bitmask.dtype} "
                         f"{tuple(bitmask.shape)}{'' if bitmask.is_contiguous() else ' (strided)'}"
                         f" on {bitmask.device}")


def _fill_cuda(runtime, arena, bitmask, remaining=None) -> None:
    """The fill on CUDA: the dense rows (Triton), the uncertain walks ORed in (CUDA C++, two
    launches: xg_uncertain, xg_uncertain_wide), and with a budget the budget kernels."""
    from gxg.ops import cuda_automaton
    from gxg.ops.fill_triton import fill_dense
    _check_remaining(remaining, bitmask)
    _check_bitmask(runtime, bitmask)
    fill_dense(runtime[:STATE_COUNT], arena, bitmask)
    cuda_automaton.uncertain(runtime[TABLE_INDEX], bitmask.shape[0], bitmask)
    if remaining is not None:
        cuda_automaton.budget(runtime[TABLE_INDEX], bitmask, remaining,
                              runtime[BUDGET_PLAN_INDEX], runtime[BUDGET_DROP_INDEX])


@fill_next_token_bitmask.register_kernel("cuda")
def _fill_next_token_bitmask_cuda(runtime, arena, bitmask, remaining=None):
    with _range("xg::fill_next_token_bitmask"):
        _fill_cuda(runtime, arena, bitmask, remaining)


@fill_next_token_bitmask.register_fake
def _(runtime, arena, bitmask, remaining=None):
    return None


# ----------------------------------------------------------------------------- apply


@torch.library.custom_op("xg::apply_token_bitmask_inplace", mutates_args=("logits",))
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
def fill_and_apply(runtime: List[torch.Tensor], arena: List[torch.Tensor],
                   logits: torch.Tensor, bitmask: torch.Tensor,
                   remaining: Optional[torch.Tensor] = None) -> None:
    fill_next_token_bitmask(runtime, arena, bitmask, remaining)
    apply_token_bitmask_inplace_cpu(logits, bitmask)


@fill_and_apply.register_kernel("cuda")
def _fill_and_apply_cuda(runtime, arena, logits, bitmask, remaining=None):
    from gxg.ops.apply_triton import apply_token_bitmask_inplace_triton
    with _range("xg::fill_and_apply"):
        apply_arguments(logits, bitmask, None, False)  # refused before anything runs
        _fill_cuda(runtime, arena, bitmask, remaining)
        apply_token_bitmask_inplace_triton(logits, bitmask)


@fill_and_apply.register_fake
def _(runtime, arena, logits, bitmask, remaining=None):
    return None


# ----------------------------------------------------------------------------- fill and sample


@torch.library.custom_op("xg::fill_and_sample", mutates_args=("runtime", "bitmask", "offset"))
def fill_and_sample(runtime: List[torch.Tensor], arena: List[torch.Tensor],
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
    fill_next_token_bitmask(runtime, arena, bitmask, remaining)
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
    "accept_token": _accept_token_cuda,
    "rollback": _rollback_cuda,
    "fill_next_token_bitmask": _fill_next_token_bitmask_cuda,
    "apply_token_bitmask_inplace": _apply_token_bitmask_inplace_cuda,
    "fill_and_apply": _fill_and_apply_cuda,
    "fill_and_sample": _fill_and_sample_cuda,
}
