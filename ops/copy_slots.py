"""Copy slot states between two runtime blobs: the reference (CPU path of ``xg::copy_slots``;
the Triton kernel beside it, ``ops/copy_slots_triton.py``, must equal it).

In:  ``runtime`` (uint8 [B, n], written) and ``source`` (uint8 [B', n']): two ``GrammarBatch``
     runtime blobs (``gxg.blobs``) with the same limits; ``source_slots`` int64 [B]; ``fields``
     int64 [F, 4], one row per state buffer: (byte offset in ``runtime``, byte offset in
     ``source``, bytes per slot, element size 1 or 4) — the table ``GrammarBatch`` builds from
     both blobs' views (``state_copy_table``). Each state buffer is slot-major ([B, ...]), so
     slot b's part of buffer f is bytes [offset + b·size, offset + (b+1)·size).
Out: for every slot i and field f, slot i's bytes of f in ``runtime`` become slot
     ``source_slots[i]``'s bytes of f in ``source`` (a source slot outside [0, B') is clamped
     into it: the op never reads out of bounds, whatever the slots hold).
"""
from __future__ import annotations

import torch


def check_copy_table(runtime: torch.Tensor, source: torch.Tensor, fields: torch.Tensor) -> None:
    """Every row of ``fields`` (a CPU tensor) stays inside both blobs."""
    rows, source_rows = runtime.shape[0], source.shape[0]
    for offset, source_offset, size, element in fields.tolist():
        if element not in (1, 4) or size < 0 or size % element or offset % element \
                or source_offset % element or offset < 0 or source_offset < 0 \
                or offset + rows * size > runtime.numel() \
                or source_offset + source_rows * size > source.numel():
            raise ValueError(f"fields row {(offset, source_offset, size, element)} does not "
                             f"fit blobs of {runtime.numel()} and {source.numel()} bytes")


def copy_slots_reference(runtime: torch.Tensor, source: torch.Tensor,
                         source_slots: torch.Tensor, fields: torch.Tensor) -> None:
    rows, source_rows = runtime.shape[0], source.shape[0]
    slots = source_slots.to(torch.int64).clamp(0, max(source_rows - 1, 0))
    flat, source_flat = runtime.view(-1), source.view(-1)
    for offset, source_offset, size, _ in fields.tolist():
        into = flat[offset: offset + rows * size].view(rows, size)
        into.copy_(source_flat[source_offset: source_offset + source_rows * size]
                   .view(source_rows, size).index_select(0, slots))
