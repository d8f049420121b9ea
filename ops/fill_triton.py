"""The dense part of the next-token bitmask: the Triton kernel of the fill ops' first stage.

In:
  * ``state_tensors``: the runtime state as torch tensors in ``RuntimeState.FIELDS`` order
    (``gxg.runtime``); this module reads grammar, terminated, error, can_end, num_tops, tops,
    pool_node.
  * ``arena_tensors``: the device arena's buffers in ``ARENA_FIELDS`` order (``gxg.arena``);
    this module reads grammar_node_base, node_row, accept_rows, stop_words.
  * ``bitmask``: int32 [B, W], W = ceil(vocab_size / 32) (bit j of word w is token 32·w + j).

Out (in place, no host synchronisation, fixed launch shape):
  * ``fill_dense``: every word of ``bitmask``. Slot b gets
        all ones                              if grammar[b] == -1 (unbound)
        stop_words                            if terminated[b] or error[b] != 0
        OR_k accept_rows[node_row[base + pool_node[b, tops[b, k]]]]  (k < num_tops[b],
             rows < 0 skipped; base = grammar_node_base[grammar[b]])
             | (stop_words if can_end[b])     otherwise.
    The uncertain tokens are not set here: the CUDA kernel ``xg_uncertain``
    (csrc/automaton.cu) ORs their bits in afterwards, and ``ops/apply_triton.py`` masks logits.

The CPU oracle is ``ops.reference.fill_next_token_bitmask`` (dense part + uncertain tokens).
Set ``TRITON_INTERPRET=1`` before this module is imported to run the kernel on CPU tensors.
"""
from __future__ import annotations

from typing import Sequence

import torch
import triton
import triton.language as tl

from gxg.arena import ARENA_FIELDS
from gxg.runtime import RuntimeState

FILL_BLOCK_WORDS = 128      # bitmask words per program of the fill kernel (power of two)
NUM_WARPS = 4


# ----------------------------------------------------------------------------- field helpers


def state_field(state_tensors: Sequence[torch.Tensor], name: str) -> torch.Tensor:
    """The state tensor called ``name`` from a list in ``RuntimeState.FIELDS`` order."""
    return state_tensors[RuntimeState.FIELDS.index(name)]


def arena_field(arena_tensors: Sequence[torch.Tensor], name: str) -> torch.Tensor:
    """The arena tensor called ``name`` from a list in ``ARENA_FIELDS`` order."""
    return arena_tensors[ARENA_FIELDS.index(name)]


def _check_lengths(state_tensors, arena_tensors) -> None:
    if len(state_tensors) != len(RuntimeState.FIELDS):
        raise ValueError(f"expected {len(RuntimeState.FIELDS)} state tensors "
                         f"(RuntimeState.FIELDS order), got {len(state_tensors)}")
    if len(arena_tensors) != len(ARENA_FIELDS):
        raise ValueError(f"expected {len(ARENA_FIELDS)} arena tensors (ARENA_FIELDS order), "
                         f"got {len(arena_tensors)}")


def _dense_args(state_tensors, arena_tensors, bitmask: torch.Tensor) -> list:
    """Checks (metadata only: no device reads) and the kernel arguments shared by the fill
    kernels, in the order of ``_dense_words``' parameters after the slot index."""
    _check_lengths(state_tensors, arena_tensors)
    s = {name: state_field(state_tensors, name) for name in
         ("grammar", "terminated", "error", "can_end", "num_tops", "tops", "pool_node")}
    a = {name: arena_field(arena_tensors, name) for name in
         ("grammar_node_base", "node_row", "accept_rows", "stop_words")}
    if bitmask.dtype != torch.int32:
        raise TypeError(f"bitmask must be int32, got {bitmask.dtype}")
    if bitmask.dim() != 2:
        raise ValueError(f"bitmask must be 2-D [batch, words], got shape {tuple(bitmask.shape)}")
    batch, words = s["grammar"].shape[0], a["stop_words"].shape[0]
    if tuple(bitmask.shape) != (batch, words):
        raise ValueError(f"bitmask shape {tuple(bitmask.shape)} != (batch, words) = "
                         f"({batch}, {words})")
    if a["accept_rows"].dim() != 2 or a["accept_rows"].shape[1] != words:
        raise ValueError(f"accept_rows has shape {tuple(a['accept_rows'].shape)}, expected "
                         f"[rows, {words}]")
    for name, t in list(s.items()) + list(a.items()):
        if t.device != bitmask.device:
            raise ValueError(f"{name} is on {t.device} but bitmask is on {bitmask.device}")
        if t.dim() and t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension")
    for name in ("grammar", "error", "num_tops", "tops", "pool_node"):
        if s[name].dtype != torch.int32:
            raise TypeError(f"state field {name} must be int32, got {s[name].dtype}")
    for name, t in a.items():
        if t.dtype != torch.int32:
            raise TypeError(f"arena field {name} must be int32, got {t.dtype}")
    return [s["grammar"], s["terminated"], s["error"], s["can_end"], s["num_tops"],
            s["tops"], s["tops"].stride(0), s["pool_node"], s["pool_node"].stride(0),
            a["grammar_node_base"], a["node_row"], a["accept_rows"], a["accept_rows"].stride(0),
            a["stop_words"], words]


# ----------------------------------------------------------------------------- device code


@triton.jit
def _dense_words(b, grammar_ptr, terminated_ptr, error_ptr, can_end_ptr, num_tops_ptr,
                 tops_ptr, tops_stride, pool_node_ptr, pool_stride,
                 node_base_ptr, node_row_ptr, accept_ptr, accept_stride, stop_ptr,
                 W, offs):
    """The dense words ``offs`` (those < W) of slot ``b``'s bitmask row.

    Scalar conditions are folded into the bound of ``offs`` (``offs < where(cond, W, 0)``)
    rather than AND-ed with a block mask: the Triton 3.9 interpreter gives a block & scalar
    boolean an int32 payload that tl.load then rejects."""
    g = tl.load(grammar_ptr + b)
    bound = g >= 0
    dead = (tl.load(terminated_ptr + b) != 0) | (tl.load(error_ptr + b) != 0)
    live = bound & (dead == 0)
    ends = tl.load(can_end_ptr + b) != 0
    # Unbound, terminated or failed slots read no tops: the loop runs zero times.
    n = tl.where(live, tl.load(num_tops_ptr + b), 0)
    base = tl.load(node_base_ptr + tl.where(bound, g, 0))
    acc = tl.zeros(offs.shape, dtype=tl.int32)
    for k in range(0, n):
        entry = tl.load(tops_ptr + b.to(tl.int64) * tops_stride + k)
        node = tl.load(pool_node_ptr + b.to(tl.int64) * pool_stride + entry)
        row = tl.load(node_row_ptr + base + node)
        words = tl.load(accept_ptr + row.to(tl.int64) * accept_stride + offs,
                        mask=offs < tl.where(row >= 0, W, 0), other=0)
        acc = acc | words
    stop = tl.load(stop_ptr + offs, mask=offs < tl.where(bound, W, 0), other=0)
    acc = tl.where(dead | ends, acc | stop, acc)      # dead slots have acc == 0: stop only
    return tl.where(bound, acc, tl.full(offs.shape, -1, tl.int32))


@triton.jit
def _fill_dense_kernel(grammar_ptr, terminated_ptr, error_ptr, can_end_ptr, num_tops_ptr,
                       tops_ptr, tops_stride, pool_node_ptr, pool_stride,
                       node_base_ptr, node_row_ptr, accept_ptr, accept_stride, stop_ptr, W,
                       bitmask_ptr, bm_stride0, bm_stride1,
                       BLOCK_WORDS: tl.constexpr):
    # Grid: (B, cdiv(W, BW)), BW = BLOCK_WORDS; program (b, j) writes words [j·BW, (j+1)·BW)
    #   of bitmask row b. No atomics, no inter-program communication.
    # Traffic per call (bytes); k_b = live tops of slot b (0 if unbound, terminated or failed),
    #   Σ_b k_b ≤ B·K; nb = cdiv(W, BW):
    #   read   4·W·Σ_b k_b                  accept rows (one per live top, duplicates included)
    #        + 4·W·(bound slots)            stop row (one row shared by all: L2-resident)
    #        + nb·Σ_b (18 + 12·k_b)         per program: grammar, node base, terminated, error,
    #                                       can_end, num_tops; per top: tops, pool_node, node_row
    #   write  4·B·W                        every word, once
    #   => at most 4·B·W·(K + 2) + nb·B·(18 + 12·K).
    # Invariants: every word of bitmask[b, :W] is written (no pre-zeroing needed; the words
    #   are a pure function of the state and the arena); only accept rows >= 0 are read; an
    #   unbound, terminated or failed slot reads no tops, pool entries or per-node rows; node
    #   ids are local to the slot's grammar: row = node_base[grammar[b]] + node.
    b = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_WORDS + tl.arange(0, BLOCK_WORDS)
    acc = _dense_words(b, grammar_ptr, terminated_ptr, error_ptr, can_end_ptr, num_tops_ptr,
                       tops_ptr, tops_stride, pool_node_ptr, pool_stride,
                       node_base_ptr, node_row_ptr, accept_ptr, accept_stride, stop_ptr,
                       W, offs)
    tl.store(bitmask_ptr + b.to(tl.int64) * bm_stride0 + offs * bm_stride1, acc, mask=offs < W)


# ----------------------------------------------------------------------------- launchers


def _check_block(block_words: int) -> None:
    if block_words < 1 or block_words & (block_words - 1):
        raise ValueError(f"block_words must be a power of two, got {block_words}")


def fill_dense(state_tensors: list, arena_tensors: list, bitmask: torch.Tensor, *,
               block_words: int = FILL_BLOCK_WORDS) -> None:
    """Write the dense part of every slot's mask into ``bitmask`` [B, W] (see module doc)."""
    _check_block(block_words)
    args = _dense_args(state_tensors, arena_tensors, bitmask)
    batch, words = bitmask.shape
    if batch == 0 or words == 0:
        return
    grid = (batch, triton.cdiv(words, block_words))
    _fill_dense_kernel[grid](*args, bitmask, bitmask.stride(0), bitmask.stride(1),
                             BLOCK_WORDS=block_words, num_warps=NUM_WARPS)
