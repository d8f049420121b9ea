"""Triton kernels for the dense part of the next-token bitmask and for applying a bitmask.

In:
  * ``state_tensors``: the runtime state as torch tensors in ``RuntimeState.FIELDS`` order
    (``gxg.runtime``); this module reads grammar, terminated, error, can_end, num_tops, tops,
    pool_node.
  * ``arena_tensors``: the device arena's buffers in ``ARENA_FIELDS`` order (``gxg.arena``);
    this module reads grammar_node_base, node_row, accept_rows, stop_words.
  * ``bitmask``: int32 [B, W], W = ceil(vocab_size / 32) (bit j of word w is token 32·w + j).
  * ``logits``: float (fp32 / fp16 / bf16) [rows, V_logits] or [V_logits].

Out (all in place, no host synchronisation, fixed launch shapes):
  * ``fill_dense``: every word of ``bitmask``. Slot b gets
        all ones                              if grammar[b] == -1 (unbound)
        stop_words                            if terminated[b] or error[b] != 0
        OR_k accept_rows[node_row[base + pool_node[b, tops[b, k]]]]  (k < num_tops[b],
             rows < 0 skipped; base = grammar_node_base[grammar[b]])
             | (stop_words if can_end[b])     otherwise.
    The uncertain tokens are NOT set here: another kernel ORs their bits in afterwards.
  * ``apply_bitmask``: -inf in ``logits`` wherever the token's bit is 0, with the semantics of
    ``ops.apply_bitmask.apply_token_bitmask_inplace_cpu`` (effective width, ``indices``,
    ``vocab_size``). Ids at or past the effective width are never touched; a tile of
    32·block_words tokens whose bits are all 1 is not touched either. In other tiles the
    allowed entries are read and written back unchanged (whole-tile stores; see
    ``_mask_words``), so NaN, -0.0 and -inf logits keep their exact bits.
  * ``fill_and_apply_dense``: both in one launch; the words are masked into the logits from
    registers (the bitmask is written, never read back). Only valid when no live top has
    uncertain tokens (the dense words are then the whole mask).

The CPU oracles are ``ops.reference.fill_next_token_bitmask`` (dense part + uncertain tokens)
and ``ops.apply_bitmask.apply_token_bitmask_inplace_cpu``.

Set ``TRITON_INTERPRET=1`` before this module is imported to run the kernels on CPU tensors.
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence, Union

import torch
import triton
import triton.language as tl

from gxg.arena import ARENA_FIELDS
from gxg.runtime import RuntimeState

FILL_BLOCK_WORDS = 128      # bitmask words per program of the fill kernels (power of two)
APPLY_BLOCK_WORDS = 64      # bitmask words (32 tokens each) per program of apply (power of 2)
NUM_WARPS = 4
READ_LOGITS = True          # masking rewrites whole tiles (see _mask_words)


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
def _mask_words(words, word_offs, logits_ptr, row, stride0, stride1, width,
                BLOCK_WORDS: tl.constexpr, READ_LOGITS: tl.constexpr):
    """Mask one tile of logits row ``row`` with ``words`` (the bitmask words ``word_offs``):
    -inf where the bit is 0, for tokens < width. Tile [BLOCK_WORDS, 32], token 32·w + j,
    contiguous along j; bits unpacked with shifts, each word loaded once by the caller.

    A tile whose words are all ones touches nothing. Otherwise, with READ_LOGITS, the tokens
    whose bit is 1 are loaded (a masked load reads only the sectors holding allowed tokens)
    and the whole tile is stored back (-inf where the bit is 0): full-sector stores. Without
    it, -inf is stored where the bit is 0 and nothing is read; those partial-sector stores
    measured 2-4x slower on an H200 for masks with many zeros (bf16, B=512, V=151936, 1/64
    allowed: 70 us with READ_LOGITS, 306 us without), slightly faster only when almost every
    token is allowed."""
    shifts = tl.arange(0, 32)
    bits = (words[:, None] >> shifts[None, :]) & 1
    tok = word_offs[:, None] * 32 + shifts[None, :]
    ptrs = logits_ptr + row.to(tl.int64) * stride0 + tok.to(tl.int64) * stride1
    any_zero = tl.sum((words != -1).to(tl.int32), axis=0) != 0
    limit = tl.where(any_zero, width, 0)
    if READ_LOGITS:
        kept = tl.load(ptrs, mask=(bits != 0) & (tok < limit), other=float("-inf"))
        tl.store(ptrs, kept, mask=tok < limit)
    else:
        neg_inf = tl.full((BLOCK_WORDS, 32), float("-inf"), logits_ptr.dtype.element_ty)
        tl.store(ptrs, neg_inf, mask=(bits == 0) & (tok < limit))


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


@triton.jit
def _fill_and_apply_dense_kernel(grammar_ptr, terminated_ptr, error_ptr, can_end_ptr,
                                 num_tops_ptr, tops_ptr, tops_stride, pool_node_ptr,
                                 pool_stride, node_base_ptr, node_row_ptr, accept_ptr,
                                 accept_stride, stop_ptr, W,
                                 bitmask_ptr, bm_stride0, bm_stride1,
                                 logits_ptr, lg_stride0, lg_stride1, width,
                                 BLOCK_WORDS: tl.constexpr, READ_LOGITS: tl.constexpr):
    # Grid: (B, cdiv(W, BW)), BW = BLOCK_WORDS; program (b, j) computes words
    #   [j·BW, (j+1)·BW) of slot b, stores them, then masks tokens [32·BW·j, 32·BW·(j+1)) ∩
    #   [0, width) of logits row b from those words in registers (the bitmask is never read).
    # Traffic per call (bytes); e = logits element size; M_b = tokens (< width) of row b in
    #   tiles of 32·BW tokens that hold at least one 0 bit; A_b = allowed tokens among M_b:
    #   read   the reads of _fill_dense_kernel + e·Σ_b A_b (sector-granular)
    #   write  4·B·W + e·Σ_b M_b                      (≤ 4·B·W + e·B·width)
    #   (READ_LOGITS=False: no logits read; write 4·B·W + e·(tokens < width whose bit is 0).)
    # Invariants: those of _fill_dense_kernel; logits row b pairs with slot b; ids >= width
    #   are never touched; an allowed logit is rewritten with its own bits or not touched.
    b = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_WORDS + tl.arange(0, BLOCK_WORDS)
    acc = _dense_words(b, grammar_ptr, terminated_ptr, error_ptr, can_end_ptr, num_tops_ptr,
                       tops_ptr, tops_stride, pool_node_ptr, pool_stride,
                       node_base_ptr, node_row_ptr, accept_ptr, accept_stride, stop_ptr,
                       W, offs)
    tl.store(bitmask_ptr + b.to(tl.int64) * bm_stride0 + offs * bm_stride1, acc, mask=offs < W)
    _mask_words(acc, offs, logits_ptr, b, lg_stride0, lg_stride1, width, BLOCK_WORDS,
                READ_LOGITS)


@triton.jit
def _apply_bitmask_kernel(logits_ptr, lg_stride0, lg_stride1, bitmask_ptr, bm_stride0,
                          bm_stride1, indices_ptr, num_valid_rows, width,
                          HAS_INDICES: tl.constexpr, BLOCK_WORDS: tl.constexpr,
                          READ_LOGITS: tl.constexpr):
    # Grid: (R, cdiv(width, 32·BW)), BW = BLOCK_WORDS, R = len(indices) or the batch;
    #   program (i, j) masks tokens [32·BW·j, 32·BW·(j+1)) ∩ [0, width) of row r = indices[i]
    #   (or i), with bitmask row r.
    # Traffic per call (bytes); e = logits element size; M_r = tokens (< width) of row r in
    #   tiles that hold at least one 0 bit; A_r = allowed tokens among M_r:
    #   read   4·R·cdiv(width, 32)            each bitmask word once, for its 32 tokens
    #        + 4·R·cdiv(width, 32·BW)         the row index (with indices)
    #        + e·Σ_r A_r                      allowed logits of mixed tiles (sector-granular)
    #   write  e·Σ_r M_r                      (≤ e·R·width; 0 for an all-ones row)
    #   (READ_LOGITS=False: no logits read; write e·(tokens < width whose bit is 0).)
    # Invariants: bitmask row r applies to logits row r; ids >= width are never touched; an
    #   allowed logit is rewritten with its own bits or not touched; an index outside
    #   [0, num_valid_rows) masks nothing (the host checks the indices it can see without a
    #   device read).
    i = tl.program_id(0)
    if HAS_INDICES:
        row = tl.load(indices_ptr + i)
    else:
        row = i
    row_ok = (row >= 0) & (row < num_valid_rows)
    offs = tl.program_id(1) * BLOCK_WORDS + tl.arange(0, BLOCK_WORDS)
    # Words past the width, and words of an invalid row, read as all ones: nothing is stored.
    words = tl.load(bitmask_ptr + row.to(tl.int64) * bm_stride0 + offs * bm_stride1,
                    mask=offs * 32 < tl.where(row_ok, width, 0), other=-1)
    _mask_words(words, offs, logits_ptr, row, lg_stride0, lg_stride1, width, BLOCK_WORDS,
                READ_LOGITS)


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


def _as_2d(logits: torch.Tensor, bitmask: torch.Tensor):
    logits2 = logits.unsqueeze(0) if logits.dim() == 1 else logits
    bitmask2 = bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask
    if logits2.dim() != 2 or bitmask2.dim() != 2:
        raise ValueError("logits and bitmask must be 1-D or 2-D")
    if not logits2.dtype.is_floating_point:
        raise TypeError(f"logits must be a floating-point tensor, got {logits2.dtype}")
    return logits2, bitmask2


def _effective_width(logits2: torch.Tensor, bitmask2: torch.Tensor,
                     vocab_size: Optional[int]) -> int:
    mask_width = 32 * bitmask2.shape[1]
    if vocab_size is None:
        if mask_width < logits2.shape[1]:
            warnings.warn(f"bitmask covers {mask_width} tokens but logits have "
                          f"{logits2.shape[1]}; ids from {mask_width} on are left unmasked")
        return min(logits2.shape[1], mask_width)
    if vocab_size > logits2.shape[1] or vocab_size > mask_width:
        raise ValueError(f"vocab_size {vocab_size} exceeds the logits width "
                         f"{logits2.shape[1]} or the bitmask width {mask_width}")
    return int(vocab_size)


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor,
                  indices: Optional[Union[Sequence[int], torch.Tensor]] = None,
                  vocab_size: Optional[int] = None, *,
                  block_words: int = APPLY_BLOCK_WORDS, read_logits: bool = READ_LOGITS,
                  num_warps: int = NUM_WARPS) -> None:
    """-inf in ``logits`` wherever the token's bit in ``bitmask`` is 0 (in place); the
    semantics of ``apply_token_bitmask_inplace_cpu``. ``indices`` given as a list or a CPU
    tensor are range-checked (IndexError); a tensor on the GPU is not (no host read): rows
    out of range are skipped by the kernel. An empty ``indices`` masks nothing."""
    _check_block(block_words)
    if bitmask.dtype != torch.int32:
        raise TypeError(f"bitmask must be int32, got {bitmask.dtype}")
    if logits.device != bitmask.device:
        raise ValueError(f"logits on {logits.device} but bitmask on {bitmask.device}")
    logits2, bitmask2 = _as_2d(logits, bitmask)
    width = _effective_width(logits2, bitmask2, vocab_size)
    num_valid = min(logits2.shape[0], bitmask2.shape[0])
    if indices is None:
        if logits2.shape[0] != bitmask2.shape[0]:
            raise ValueError(f"batch sizes differ: logits {logits2.shape[0]}, bitmask "
                             f"{bitmask2.shape[0]} (pass indices to mask some rows)")
        rows, index_tensor = logits2.shape[0], logits2   # placeholder pointer, never read
    else:
        if isinstance(indices, torch.Tensor) and indices.device.type != "cpu":
            if indices.device != logits2.device:
                raise ValueError(f"indices on {indices.device} but logits on "
                                 f"{logits2.device}")
            index_tensor = indices.reshape(-1).to(torch.int32)
        else:
            host = torch.as_tensor(indices, dtype=torch.long).reshape(-1).cpu()
            bad = (host < 0) | (host >= num_valid)
            if bool(bad.any()):
                raise IndexError(f"indices out of range: {host[bad].tolist()}")
            index_tensor = host.to(torch.int32).to(logits2.device)
        rows = index_tensor.shape[0]
    if rows == 0 or width == 0:
        return
    grid = (rows, triton.cdiv(width, 32 * block_words))
    _apply_bitmask_kernel[grid](logits2, logits2.stride(0), logits2.stride(1),
                                bitmask2, bitmask2.stride(0), bitmask2.stride(1),
                                index_tensor, num_valid, width,
                                HAS_INDICES=indices is not None, BLOCK_WORDS=block_words,
                                READ_LOGITS=read_logits, num_warps=num_warps)


def fill_and_apply_dense(state_tensors: list, arena_tensors: list, logits: torch.Tensor,
                         bitmask: torch.Tensor, vocab_size: Optional[int] = None, *,
                         block_words: int = FILL_BLOCK_WORDS, read_logits: bool = READ_LOGITS,
                         num_warps: int = NUM_WARPS) -> None:
    """``fill_dense`` then ``apply_bitmask`` (logits row b ↔ slot b) in one launch; only
    correct when no live top has uncertain tokens. ``logits`` is [B, V_logits] (or [V_logits]
    when B == 1); the effective width is as in ``apply_bitmask``."""
    _check_block(block_words)
    args = _dense_args(state_tensors, arena_tensors, bitmask)
    if logits.device != bitmask.device:
        raise ValueError(f"logits on {logits.device} but bitmask on {bitmask.device}")
    logits2, _ = _as_2d(logits, bitmask)
    if logits2.shape[0] != bitmask.shape[0]:
        raise ValueError(f"batch sizes differ: logits {logits2.shape[0]}, bitmask "
                         f"{bitmask.shape[0]}")
    width = _effective_width(logits2, bitmask, vocab_size)
    batch, words = bitmask.shape
    if batch == 0 or words == 0:
        return
    grid = (batch, triton.cdiv(words, block_words))
    _fill_and_apply_dense_kernel[grid](*args, bitmask, bitmask.stride(0), bitmask.stride(1),
                                       logits2, logits2.stride(0), logits2.stride(1), width,
                                       BLOCK_WORDS=block_words, READ_LOGITS=read_logits,
                                       num_warps=num_warps)
