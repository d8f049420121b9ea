"""Launchers of the CUDA C++ automaton kernels (csrc/automaton.cu), compiled at run time with
NVRTC through CuPy.

In:  the ops' tensors on a CUDA device: the runtime blob (``gxg.blobs``), whose byte 0 is the
     pointer table (int64 device addresses of every buffer ``gxg.layout`` declares, in its
     order: the kernels' P_* indices, generated from the same table), and the per-launch
     arguments.
Out: kernels launched on torch's current stream (so they are captured into CUDA graphs with the
     rest of the step); nothing is read back to the host.

The compiled module is cached per process and device (``_module``): NVRTC compiles it once
(~1 s) on first use.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from gxg import layout
from gxg.ops import dependent_launch

def _source() -> str:
    """csrc/automaton.cu (beside ops/ in a checkout, or the installed gxg.csrc package) after
    the defines ``gxg.layout.cuda_header()`` generates (pointer table positions, flags, error
    codes, launch constants)."""
    beside = Path(__file__).resolve().parent.parent / "csrc" / "automaton.cu"
    if beside.is_file():
        kernels = beside.read_text()
    else:
        from importlib.resources import files
        kernels = (files("gxg.csrc") / "automaton.cu").read_text()
    return layout.cuda_header() + kernels


SLOTS_PER_BLOCK = 64


# Macro overrides for csrc/automaton.cu (e.g. ("-DUNC_STACKS=1",)): the tests shrink the local
# walk's room with them so that every walk takes the wide path. Read at each launch; each set
# of defines is compiled once.
KERNEL_DEFINES: tuple = ()


@functools.lru_cache(maxsize=None)
def _module(device_index: int, defines: tuple = ()):
    import cupy

    with cupy.cuda.Device(device_index):
        return cupy.RawModule(code=_source(), options=("-std=c++17",) + tuple(defines))


@functools.lru_cache(maxsize=None)
def _kernel(device_index: int, defines: tuple, name: str):
    """The kernel's handle, looked up once (``RawModule.get_function`` builds a new Function
    object on every call)."""
    return _module(device_index, defines).get_function(name)


def _current_stream_handle(index: int) -> int:
    """torch's current stream on device ``index`` (raw handle; the C call when torch has it:
    ``torch.cuda.current_stream`` builds a Python Stream object per call)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream


def _launch(name: str, device: torch.device, batch: int, grid, block, args) -> None:
    """Launch kernel ``name`` of a step over ``batch`` slots on torch's current stream of
    ``device`` (so CUDA graphs capture it); while a graph of a small batch is captured, with
    programmatic dependent launch (``dependent_launch``: every kernel of csrc/automaton.cu
    first waits for the grid before it). Otherwise CuPy
    launches on its own current stream and device: when those already are torch's (every
    launch after the first, in a loop) no context is entered. Side effect, on purpose: CuPy's
    current stream is left at torch's current stream."""
    import cupy

    index = device.index if device.index is not None else torch.cuda.current_device()
    kernel = _kernel(index, KERNEL_DEFINES, name)
    handle = _current_stream_handle(index)
    if _COMPILED_ARCH.get((index, KERNEL_DEFINES), 0) >= 900 and \
            dependent_launch.enabled(device, batch):  # a graph's capture: may start early
        with cupy.cuda.Device(index):
            dependent_launch.launch(kernel, grid, block, args, handle)
        return
    if cupy.cuda.runtime.getDevice() == index and \
            cupy.cuda.get_current_stream().ptr == handle:
        kernel(grid, block, args)
        return
    stream = _external_stream(handle)
    with cupy.cuda.Device(index):
        stream.use()  # stays CuPy's current stream: the next launches need no context
        kernel(grid, block, args)


@functools.lru_cache(maxsize=None)
def _external_stream(handle: int):
    import cupy
    return cupy.cuda.ExternalStream(handle)


def _pointer(tensor: torch.Tensor) -> np.uint64:
    return np.uint64(tensor.data_ptr())


def _slot_grid(batch: int):
    return ((batch + SLOTS_PER_BLOCK - 1) // SLOTS_PER_BLOCK,), (SLOTS_PER_BLOCK,)


def _warp_per_slot(batch: int):
    return (batch,), (32,)


def accept(table: torch.Tensor, token_ids: torch.Tensor, accepted: torch.Tensor) -> None:
    batch = token_ids.shape[0]
    grid, block = _warp_per_slot(batch)
    _launch("xg_accept", table.device, batch, grid, block,
            (_pointer(table), np.int32(batch), _pointer(token_ids), _pointer(accepted)))


def accept_tokens(table: torch.Tensor, token_ids: torch.Tensor, lengths: torch.Tensor,
                  counts: torch.Tensor) -> None:
    batch, width = token_ids.shape
    grid, block = _warp_per_slot(batch)
    _launch("xg_accept_tokens", table.device, batch, grid, block,
            (_pointer(table), np.int32(batch), np.int32(width), _pointer(token_ids),
             _pointer(lengths), _pointer(counts)))


def reset(table: torch.Tensor, which: torch.Tensor) -> None:
    batch = which.shape[0]
    grid, block = _warp_per_slot(batch)
    _launch("xg_reset", table.device, batch, grid, block,
            (_pointer(table), np.int32(batch), _pointer(which)))


def rollback(table: torch.Tensor, num_tokens: torch.Tensor, ok: torch.Tensor) -> None:
    batch = num_tokens.shape[0]
    grid, block = _slot_grid(batch)
    _launch("xg_rollback", table.device, batch, grid, block,
            (_pointer(table), np.int32(batch), _pointer(num_tokens), _pointer(ok)))


def status(table: torch.Tensor, out: torch.Tensor) -> None:
    batch = out.shape[0]
    grid, block = _slot_grid(batch)
    _launch("xg_status", table.device, batch, grid, block, (_pointer(table), np.int32(batch),
                                                     _pointer(out)))


UNCERTAIN_THREADS = layout.KERNEL_CONSTANTS["UNC_THREADS"]
UNBUILT_THREADS = layout.KERNEL_CONSTANTS["UNBUILT_THREADS"]


def uncertain_parts(batch: int) -> int:
    """Blocks of xg_uncertain per slot: they share the walks from nodes without an entry."""
    return max(1, UNBUILT_THREADS // (max(batch, 1) * UNCERTAIN_THREADS))


def uncertain(table: torch.Tensor, batch: int, bitmask: torch.Tensor) -> None:
    """The uncertain-token walks, ORed into the bitmask the dense fill wrote: xg_uncertain (B x
    ``uncertain_parts(B)`` blocks), then xg_uncertain_wide (one block) over the walks it
    queued, which also gives the rows of slots that ran out of room the stop tokens only and
    zeroes the queue's count (so the next fill finds it empty)."""
    words = np.int32(bitmask.shape[1])
    _launch("xg_uncertain", table.device, batch, (batch, uncertain_parts(batch)),
            (UNCERTAIN_THREADS,), (_pointer(table), np.int32(batch), _pointer(bitmask), words))
    _launch("xg_uncertain_wide", table.device, batch, (1,), (wide_sizes(table.device)[2],),
            (_pointer(table), np.int32(batch), _pointer(bitmask), words))


BUDGET_THREADS = layout.KERNEL_CONSTANTS["BUDGET_THREADS"]
BUDGET_THREADS_PER_BATCH = 2048 * BUDGET_THREADS  # xg_budget's threads over all slots, at least


def budget(table: torch.Tensor, bitmask: torch.Tensor, remaining: torch.Tensor) -> None:
    """The token budget after a fill: xg_budget_plan counts per slot the tokens that need a walk
    (the scratch P_BUDGET_PLAN [B]), xg_budget walks them and marks in P_BUDGET_DROP [B, W]
    (zero between fills) those that leave no completion within the slot's budget,
    xg_budget_apply removes them from the rows where some token is left and zeroes the drops.
    A slot gets enough blocks that the whole launch has about BUDGET_THREADS_PER_BATCH threads
    (one block per 256 ids at most)."""
    batch, words = bitmask.shape
    most = (words * 32 + BUDGET_THREADS - 1) // BUDGET_THREADS
    per_slot = max(1, min(most, BUDGET_THREADS_PER_BATCH // BUDGET_THREADS // max(batch, 1)))
    _launch("xg_budget_plan", table.device, batch, (batch,), (32,),
            (_pointer(table), np.int32(batch), _pointer(remaining)))
    _launch("xg_budget", table.device, batch, (per_slot, batch), (BUDGET_THREADS,),
            (_pointer(table), np.int32(batch), _pointer(bitmask), np.int32(words),
             _pointer(remaining)))
    _launch("xg_budget_apply", table.device, batch, (batch,), (BUDGET_THREADS,),
            (_pointer(table), np.int32(batch), _pointer(bitmask), np.int32(words)))


#: ``__CUDA_ARCH__`` the kernels were compiled for, per (device, defines), as ``xg_wide_sizes``
#: reports it (a cache; ``GrammarBatch`` asks for the sizes before any capture). Programmatic
#: dependent launch needs the kernels' ``griddepcontrol`` waits, compiled in from 900 on: a
#: module not asked yet is launched the normal way.
_COMPILED_ARCH: dict = {}


@functools.lru_cache(maxsize=None)
def _wide_sizes(device_index: int, defines: tuple):
    device = torch.device("cuda", device_index)
    out = torch.zeros(4, dtype=torch.int64, device=device)
    _launch("xg_wide_sizes", device, 1, (1,), (1,), (_pointer(out),))
    space_bytes, queue_ints, workers, arch = (int(v) for v in out.tolist())
    _COMPILED_ARCH[(device_index, defines)] = arch
    return space_bytes, queue_ints, workers


def wide_sizes(device: torch.device):
    """(bytes of P_WIDE_SPACE, int32 entries of P_WIDE_QUEUE, workers of xg_uncertain_wide),
    as the compiled kernels define them."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _wide_sizes(index, KERNEL_DEFINES)
