"""Launchers of the CUDA C++ automaton kernels (csrc/automaton.cu), compiled at run time with
NVRTC through CuPy.

In:  the ops' tensors on a CUDA device: the pointer table (int64 device addresses of the state,
     arena and scratch buffers, in the order csrc/automaton.cu's P_* indices name them) and the
     per-launch arguments.
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

def _source() -> str:
    """csrc/automaton.cu: beside ops/ in a checkout, or the installed gxg.csrc package."""
    beside = Path(__file__).resolve().parent.parent / "csrc" / "automaton.cu"
    if beside.is_file():
        return beside.read_text()
    from importlib.resources import files
    return (files("gxg.csrc") / "automaton.cu").read_text()
SLOTS_PER_BLOCK = 64


@functools.lru_cache(maxsize=None)
def _module(device_index: int):
    import cupy

    with cupy.cuda.Device(device_index):
        return cupy.RawModule(code=_source(), options=("-std=c++17",))


def _launch(name: str, device: torch.device, grid, block, args) -> None:
    import cupy

    index = device.index if device.index is not None else torch.cuda.current_device()
    kernel = _module(index).get_function(name)
    stream = _external_stream(torch.cuda.current_stream(device).cuda_stream)
    with cupy.cuda.Device(index), stream:
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
    _launch("xg_accept", table.device, grid, block,
            (_pointer(table), np.int32(batch), _pointer(token_ids), _pointer(accepted)))


def reset(table: torch.Tensor, which: torch.Tensor) -> None:
    batch = which.shape[0]
    grid, block = _warp_per_slot(batch)
    _launch("xg_reset", table.device, grid, block,
            (_pointer(table), np.int32(batch), _pointer(which)))


def rollback(table: torch.Tensor, num_tokens: torch.Tensor, ok: torch.Tensor) -> None:
    batch = num_tokens.shape[0]
    grid, block = _slot_grid(batch)
    _launch("xg_rollback", table.device, grid, block,
            (_pointer(table), np.int32(batch), _pointer(num_tokens), _pointer(ok)))


UNCERTAIN_THREADS = 64  # csrc/automaton.cu UNC_THREADS


def uncertain(table: torch.Tensor, batch: int, bitmask: torch.Tensor) -> None:
    _launch("xg_uncertain", table.device, (batch,), (UNCERTAIN_THREADS,),
            (_pointer(table), np.int32(batch), _pointer(bitmask), np.int32(bitmask.shape[1])))
