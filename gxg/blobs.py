"""The two byte tensors the ops receive: allocate one, and read its buffers back.

In:  a blob name of ``gxg.layout.BLOBS`` ("runtime": header + state + scratch, or "arena"),
     dimension values (``gxg.layout.DIMS``), a device; or an existing CPU blob.
Out: ``allocate``: the blob — uint8, shaped [rows, n] (``rows``: the caller's choice, so that
     an op can check sizes from shapes alone without reading the device: B for the runtime,
     W for the arena) — and a view per buffer (a torch tensor of the declared dtype and shape
     over the blob's memory, at ``gxg.layout.blob_layout``'s offset).
     ``numpy_views``: the same views as numpy arrays of a CPU blob (the CPU ops read and write
     the state through them); ``header_dims``: the dimension values a CPU runtime blob holds.

The layout (order, dtypes, shapes, alignment) is ``gxg.layout``'s; nothing here repeats it.
"""
from __future__ import annotations

import functools
from typing import Dict, Tuple

import numpy as np
import torch

from gxg import layout


Span = Tuple[str, int, int, Tuple[int, ...], str]  # name, byte offset, byte count, shape, dtype


def _spans(blob: str, dims: Dict[str, int]) -> Tuple[Span, ...]:
    """(name, byte offset, byte count, shape, dtype) of every buffer of ``blob``."""
    return _span_table(blob, tuple(sorted(dims.items())))


# A cache (bounded): the CPU ops view their blobs on every call, and the dimension values of a
# batch or arena change only when it grows.
@functools.lru_cache(maxsize=256)
def _span_table(blob: str, dims_key: Tuple[Tuple[str, int], ...]):
    dims = dict(dims_key)
    offsets, _ = layout.blob_layout(blob, dims)
    full = layout.with_counts(dims)
    spans = []
    for name, start in offsets.items():
        shape = layout.shape_of(name, full)
        dtype = layout.buffer(name).dtype
        count = int(np.prod(shape, dtype=np.int64)) * layout.DTYPE_BYTES[dtype]
        spans.append((name, start, count, shape, dtype))
    return tuple(spans)


def allocate(blob: str, dims: Dict[str, int], device, rows: int
             ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """A zeroed blob of ``rows`` rows and a view per buffer."""
    _, nbytes = layout.blob_layout(blob, dims)
    rows = max(1, rows)
    data = torch.zeros((rows, max(1, -(-nbytes // rows))), dtype=torch.uint8, device=device)
    flat = data.view(-1)
    return data, {name: flat[start: start + count].view(getattr(torch, dtype)).view(shape)
                  for name, start, count, shape, dtype in _spans(blob, dims)}


def numpy_views(data: np.ndarray, blob: str, dims: Dict[str, int]) -> Dict[str, np.ndarray]:
    """The buffers of a blob held as a numpy uint8 array (a CPU blob's ``.numpy()``)."""
    flat = data.reshape(-1)
    return {name: flat[start: start + count].view(dtype).reshape(shape)
            for name, start, count, shape, dtype in _spans(blob, dims)}


def header_dims(runtime: np.ndarray) -> Dict[str, int]:
    """The dimension values in a runtime blob's header (the dims row sits right after the
    pointer table, both of fixed size)."""
    offsets, _ = layout.blob_layout("runtime", {name: 0 for name in layout.DIMS})
    start = offsets["dims"]
    row = runtime.reshape(-1)[start: start + 8 * len(layout.DIMS)].view(np.int64)
    return dict(zip(layout.DIMS, row.tolist()))
