"""Copy slot states between two runtime blobs: the Triton kernel (CUDA path of
``xg::copy_slots``). Its reference, which it must equal: ``ops/copy_slots.py``, whose
docstring gives the arguments and the semantics.

Kernel ``_copy_slots_kernel``
  grid      (B, F): program (i, f) copies slot source_slots[i]'s part of state buffer f.
  traffic   read and write the state's bytes per slot once each (214 KB a slot at the default
            limits: the pool's three 64 KB buffers dominate), in BLOCK-element chunks; 4-byte
            buffers move as int32, the few 1-byte buffers as uint8.
  why       one launch instead of one ``index_select`` per state buffer (17), and one op that
            ``torch.compile`` can trace (copies into dtype views of the blob cannot).
  invariants reads only [offset, offset + rows·size) of each blob per the table (the op checks
            the table's rows on the host when it is on the CPU; GrammarBatch builds it).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _copy_slots_kernel(into_bytes, into_words, source_bytes, source_words, slots_ptr,
                       fields_ptr, source_rows, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    f = tl.program_id(1).to(tl.int64)
    slot = tl.load(slots_ptr + i)
    slot = tl.minimum(tl.maximum(slot, 0), source_rows - 1)
    offset = tl.load(fields_ptr + 4 * f)
    source_offset = tl.load(fields_ptr + 4 * f + 1)
    size = tl.load(fields_ptr + 4 * f + 2)
    element = tl.load(fields_ptr + 4 * f + 3)
    lanes = tl.arange(0, BLOCK)
    count = size // element
    into_start = (offset + i * size) // element
    source_start = (source_offset + slot * size) // element
    for start in range(0, count, BLOCK):
        where = start + lanes
        inside = where < count
        if element == 4:
            tl.store(into_words + into_start + where,
                     tl.load(source_words + source_start + where, mask=inside), mask=inside)
        else:
            tl.store(into_bytes + into_start + where,
                     tl.load(source_bytes + source_start + where, mask=inside), mask=inside)


def _words(blob: torch.Tensor) -> torch.Tensor:
    flat = blob.view(-1)
    return flat[: flat.numel() // 4 * 4].view(torch.int32)


def copy_slots_triton(runtime: torch.Tensor, source: torch.Tensor, source_slots: torch.Tensor,
                      fields: torch.Tensor) -> None:
    rows, count = runtime.shape[0], fields.shape[0]
    if rows == 0 or count == 0 or source.shape[0] == 0:
        return
    _copy_slots_kernel[(rows, count)](runtime.view(-1), _words(runtime), source.view(-1),
                                      _words(source), source_slots, fields, source.shape[0],
                                      BLOCK=BLOCK, num_warps=4)
