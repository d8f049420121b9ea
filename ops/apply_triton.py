"""Apply a token bitmask to logits in place: the Triton kernel (CUDA path of
``xg::apply_token_bitmask_inplace`` and the last stage of ``xg::fill_and_apply``).

In:  logits float32/float16/bfloat16 [R, V_logits] (or [V_logits]), last dimension contiguous;
     bitmask int32 [R', W] (or [W]); optional ``indices`` (int tensor of rows) and
     ``vocab_size``.
Out: -inf at every token id < the effective width whose bit is 0; the semantics (effective
     width, indices, checks) are those of the CPU reference ``ops/apply_bitmask.py``.

Kernel ``_apply_kernel``
  grid      (R, cdiv(width, 32·BLOCK_WORDS)); program (i, j) handles tokens
            [32·BLOCK_WORDS·j, 32·BLOCK_WORDS·(j+1)) of row r = indices[i] (or i).
  traffic   read 4·R·ceil(width/32) bytes of bitmask; write e·(number of 0 bits) bytes of
            logits (e = element size; at most e·R·width: the floor of the pass); logits are
            never read.
  how       a word whose 32 bits are all 0 is 32 consecutive -inf: stored with a mask that is
            constant along the word, so the stores vectorise (16 bytes a thread); only words
            mixing 0s and 1s need per-token masked stores, and a block with none skips them.
  invariants bitmask row r applies to logits row r; entries whose bit is 1 and ids >= width are
            never written.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
import triton
import triton.language as tl

from gxg.ops import dependent_launch
from gxg.ops.apply_bitmask import apply_arguments

BLOCK_WORDS = 128  # 4,096 tokens per program (the best of 16..128 words on an H200)
NUM_WARPS = 4


@triton.jit
def _apply_kernel(logits_ptr, logits_row_stride, bitmask_ptr, bitmask_row_stride, indices_ptr,
                  width, HAS_INDICES: tl.constexpr, BLOCK_WORDS: tl.constexpr,
                  DEPENDENT_LAUNCH: tl.constexpr):
    # Launched with PDL (gxg.ops.dependent_launch): wait for the grid before, then release the next.
    if DEPENDENT_LAUNCH:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    i = tl.program_id(0)
    block = tl.program_id(1)
    if HAS_INDICES:
        row = tl.load(indices_ptr + i).to(tl.int64)
    else:
        row = i.to(tl.int64)
    word_offs = block * BLOCK_WORDS + tl.arange(0, BLOCK_WORDS)
    words = tl.load(bitmask_ptr + row * bitmask_row_stride + word_offs,
                    mask=word_offs * 32 < width, other=-1)
    shifts = tl.arange(0, 32)
    tokens = word_offs[:, None] * 32 + shifts[None, :]
    pointers = logits_ptr + row * logits_row_stride + tokens
    neg_inf = tl.full((BLOCK_WORDS, 32), float("-inf"), logits_ptr.dtype.element_ty)
    zero_bits = ((words[:, None] >> shifts[None, :]) & 1) == 0
    if (block + 1) * BLOCK_WORDS * 32 <= width:
        all_zero = (words == 0)[:, None] & (shifts[None, :] >= 0)
        tl.store(pointers, neg_inf, mask=all_zero)
        mixed = (words != 0) & (words != -1)
        if tl.sum(mixed.to(tl.int32), axis=0) > 0:
            tl.store(pointers, neg_inf, mask=mixed[:, None] & zero_bits)
    else:
        tl.store(pointers, neg_inf, mask=zero_bits & (tokens < width))


def apply_token_bitmask_inplace_triton(logits: torch.Tensor, bitmask: torch.Tensor, *,
                                       vocab_size: Optional[int] = None,
                                       indices: Optional[Union[Sequence[int], torch.Tensor]] = None,
                                       block_words: int = BLOCK_WORDS,
                                       num_warps: int = NUM_WARPS) -> None:
    logits2, bitmask2, width = apply_arguments(logits, bitmask, vocab_size, indices is not None)
    if logits2.stride(1) != 1 or bitmask2.stride(1) != 1:
        raise ValueError("the last dimension of logits and bitmask must be contiguous")
    if indices is None:
        rows, index_tensor = logits2.shape[0], logits2  # any pointer: unused
    else:
        index_tensor = torch.as_tensor(indices, dtype=torch.int32, device=logits.device)
        rows = index_tensor.numel()
    if rows == 0 or width == 0:
        return
    grid = (rows, triton.cdiv(width, 32 * block_words))
    pdl = dependent_launch.enabled(logits.device, rows)
    _apply_kernel[grid](logits2, logits2.stride(0), bitmask2, bitmask2.stride(0), index_tensor,
                        width, HAS_INDICES=indices is not None, BLOCK_WORDS=block_words,
                        DEPENDENT_LAUNCH=pdl, launch_pdl=pdl, num_warps=num_warps)
