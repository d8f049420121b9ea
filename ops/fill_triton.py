"""The dense part of the next-token bitmask: the Triton kernel of the fill ops' first stage.

In:
  * ``runtime``: a batch's runtime blob (``gxg.blobs``; uint8 [B, n]): the kernel reads every
    buffer through the pointer table at its byte 0 (positions from ``gxg.layout``) — the
    state's grammar, terminated, error, can_end, num_tops, tops, pool_node; the limits row (K,
    P); the arena's grammar_node_base, node_row, accept_rows, stop_words.
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
Set ``TRITON_INTERPRET=1`` before this module is imported to run the kernel on CPU tensors
(the pointer table of a CPU blob holds host addresses).
"""
from __future__ import annotations


import torch
import triton
import triton.language as tl

from gxg import layout
from gxg.ops import dependent_launch

FILL_BLOCK_WORDS = 128      # bitmask words per program of the fill kernel (power of two)
NUM_WARPS = 4


# Pointer-table positions and limits-row positions the kernel reads (gxg.layout declares them).
P_GRAMMAR = tl.constexpr(layout.pointer_index("grammar"))
P_TERMINATED = tl.constexpr(layout.pointer_index("terminated"))
P_ERROR = tl.constexpr(layout.pointer_index("error"))
P_CAN_END = tl.constexpr(layout.pointer_index("can_end"))
P_NUM_TOPS = tl.constexpr(layout.pointer_index("num_tops"))
P_TOPS = tl.constexpr(layout.pointer_index("tops"))
P_POOL_NODE = tl.constexpr(layout.pointer_index("pool_node"))
P_LIMITS = tl.constexpr(layout.pointer_index("limits"))
P_NODE_BASE = tl.constexpr(layout.pointer_index("grammar_node_base"))
P_NODE_ROW = tl.constexpr(layout.pointer_index("node_row"))
P_ACCEPT_ROWS = tl.constexpr(layout.pointer_index("accept_rows"))
P_STOP_WORDS = tl.constexpr(layout.pointer_index("stop_words"))
L_K = tl.constexpr(layout.LIMITS_ROW.index("K"))
L_P = tl.constexpr(layout.LIMITS_ROW.index("P"))


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
def _buffer(table_ptr, index, dtype: tl.constexpr):
    """The buffer at pointer-table position ``index``, as a pointer to ``dtype``."""
    return tl.load(table_ptr + index).to(tl.pointer_type(dtype))


@triton.jit
def _fill_dense_kernel(runtime_ptr, W, bitmask_ptr, bm_stride0, BLOCK_WORDS: tl.constexpr,
                       DEPENDENT_LAUNCH: tl.constexpr):
    # Grid: (B, cdiv(W, BW)), BW = BLOCK_WORDS; program (b, j) writes words [j·BW, (j+1)·BW)
    #   of bitmask row b. No atomics, no inter-program communication.
    # Traffic per call (bytes); k_b = live tops of slot b (0 if unbound, terminated or failed),
    #   Σ_b k_b ≤ B·K; nb = cdiv(W, BW):
    #   read   4·W·Σ_b k_b                  accept rows (one per live top, duplicates included)
    #        + 4·W·(bound slots)            stop row (one row shared by all: L2-resident)
    #        + nb·Σ_b (26 + 12·k_b) + 96·nb·B   per program: grammar, node base, terminated,
    #                                       error, can_end, num_tops, K, P; per top: tops,
    #                                       pool_node, node_row; 12 table pointers (L2-resident)
    #   write  4·B·W                        every word, once
    # Invariants: every word of bitmask[b, :W] is written (no pre-zeroing needed; the words
    #   are a pure function of the state and the arena); only accept rows >= 0 are read; an
    #   unbound, terminated or failed slot reads no tops, pool entries or per-node rows; node
    #   ids are local to the slot's grammar: row = node_base[grammar[b]] + node.
    # Launched with PDL (gxg.ops.dependent_launch): wait for the grid before, then release the next.
    if DEPENDENT_LAUNCH:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    b = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_WORDS + tl.arange(0, BLOCK_WORDS)
    table_ptr = runtime_ptr.to(tl.pointer_type(tl.int64))  # the pointer table is at byte 0
    limits = _buffer(table_ptr, P_LIMITS, tl.int32)
    acc = _dense_words(b, _buffer(table_ptr, P_GRAMMAR, tl.int32),
                       _buffer(table_ptr, P_TERMINATED, tl.int8),
                       _buffer(table_ptr, P_ERROR, tl.int32),
                       _buffer(table_ptr, P_CAN_END, tl.int8),
                       _buffer(table_ptr, P_NUM_TOPS, tl.int32),
                       _buffer(table_ptr, P_TOPS, tl.int32), tl.load(limits + L_K),
                       _buffer(table_ptr, P_POOL_NODE, tl.int32), tl.load(limits + L_P),
                       _buffer(table_ptr, P_NODE_BASE, tl.int32),
                       _buffer(table_ptr, P_NODE_ROW, tl.int32),
                       _buffer(table_ptr, P_ACCEPT_ROWS, tl.int32), W,
                       _buffer(table_ptr, P_STOP_WORDS, tl.int32), W, offs)
    tl.store(bitmask_ptr + b.to(tl.int64) * bm_stride0 + offs, acc, mask=offs < W)


# ----------------------------------------------------------------------------- launchers


def _check_block(block_words: int) -> None:
    if block_words < 1 or block_words & (block_words - 1):
        raise ValueError(f"block_words must be a power of two, got {block_words}")


def fill_dense(runtime: torch.Tensor, bitmask: torch.Tensor, *,
               block_words: int = FILL_BLOCK_WORDS) -> None:
    """Write the dense part of every slot's mask into ``bitmask`` [B, W] (see module doc);
    ``runtime``: the batch's runtime blob, ``bitmask`` checked by the caller (the ops)."""
    _check_block(block_words)
    batch, words = bitmask.shape
    if batch == 0 or words == 0:
        return
    if bitmask.stride(1) != 1:
        raise ValueError("the last dimension of bitmask must be contiguous")
    grid = (batch, triton.cdiv(words, block_words))
    pdl = dependent_launch.enabled(bitmask.device, batch)
    _fill_dense_kernel[grid](runtime, words, bitmask, bitmask.stride(0),
                             BLOCK_WORDS=block_words, DEPENDENT_LAUNCH=pdl, launch_pdl=pdl,
                             num_warps=NUM_WARPS)
