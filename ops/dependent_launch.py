"""Programmatic dependent launch (PDL) of the step's kernels, on sm_90 and later.

In:  a kernel (a CuPy ``RawKernel`` of csrc/automaton.cu, or a Triton launch), its grid, block
     and arguments, and the CUDA stream it goes on.
Out: the kernel launched with programmatic stream serialization: it may start while the kernel
     before it in the stream is finishing. Captured into a CUDA graph, the edge between the two
     becomes a programmatic one.

Why: a CUDA-graph step is a chain of small dependent kernels (the dense fill, the uncertain
walks, the apply, the accept); at small batches each boundary costs about a microsecond of
launch latency. With PDL the next kernel's launch overlaps the end of the one before (on an
H200: ~1.0 -> ~0.6 µs per boundary for tiny Triton kernels, 1.4 -> 1.15 µs for mixed chains;
``profiling/RESULTS.md``).

Invariant that makes it safe: every kernel launched this way waits, before its first read or
write of any buffer, for the grid before it to complete and its writes to be visible
(``griddepcontrol.wait``: ``wait_for_previous_grid`` in csrc/automaton.cu,
``tl.extra.cuda.gdc_wait`` in the Triton kernels), and only then lets the next grid start
launching (``griddepcontrol.launch_dependents``), so each kernel still sees everything every
earlier kernel wrote. In a normal launch both instructions are no-ops.

Used only while a stream is being captured (``enabled``), and only for batches of at most
``MAX_BATCH`` rows: that is where a step is a short chain of small kernels replayed many
times. On an H200 (``profiling/RESULTS.md``) the in-graph step gained 1.3-2.6 µs at B = 1-64
and lost 0.4-1.2 µs at 256 and 13-16 µs at 1024, where the next kernel's blocks, launched
early, wait on SMs that the large grid before it still needs. Eager launches keep CuPy's and
Triton's own launch paths. ``ENABLED`` switches it off (``False``) for a comparison in one
process.
"""
from __future__ import annotations

import ctypes
import functools
import os

import numpy as np
import torch

#: None: on wherever it is supported (sm_90+, not under TRITON_INTERPRET); False: never.
ENABLED = None
#: The largest batch (rows of the launch's step) launched with PDL (see the module docstring).
MAX_BATCH = 64

_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, padding, a 64-byte union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
                ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint),
                ("block_z", ctypes.c_uint), ("shared_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)),
                ("num_attrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=None)
def _supported(device_index: int) -> bool:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    return torch.cuda.get_device_capability(device_index)[0] >= 9


def enabled(device: torch.device, batch: int) -> bool:
    """Whether a kernel of a step over ``batch`` rows launched now on ``device`` goes with PDL:
    supported there, not switched off, a small batch, and torch's current stream is being
    captured into a graph."""
    if ENABLED is False or device.type != "cuda" or batch > MAX_BATCH:
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _supported(index) and torch.cuda.is_current_stream_capturing()


@functools.lru_cache(maxsize=None)
def _driver():
    """libcuda's cuLaunchKernelEx and the one attribute every launch passes (cached: a cache
    of the process's driver handle, read-only once built)."""
    library = ctypes.CDLL("libcuda.so.1")
    launch = library.cuLaunchKernelEx
    launch.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    launch.restype = ctypes.c_int
    attribute = _LaunchAttribute()
    attribute.id = _PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value[0] = 1
    return launch, attribute


def _as_ctype(value):
    if isinstance(value, np.generic):
        return np.ctypeslib.as_ctypes_type(value.dtype)(value.item())
    raise TypeError(f"a kernel argument must be a numpy scalar, got {type(value).__name__}")


def launch(kernel, grid, block, args, stream_handle: int) -> None:
    """Launch CuPy ``RawKernel`` ``kernel`` with PDL on the raw stream ``stream_handle``;
    ``args``: numpy scalars (device pointers as uint64), as CuPy's call takes them."""
    launch_ex, attribute = _driver()
    grid = tuple(grid) + (1,) * (3 - len(grid))
    block = tuple(block) + (1,) * (3 - len(block))
    values = [_as_ctype(value) for value in args]
    params = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
    config = _LaunchConfig(*grid, *block, 0, stream_handle, ctypes.pointer(attribute), 1)
    result = launch_ex(ctypes.byref(config), kernel.kernel.ptr, params, None)
    if result != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUDA error {result} "
                           f"(kernel {kernel.name}, grid {grid}, block {block})")
