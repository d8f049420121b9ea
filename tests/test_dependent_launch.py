"""Programmatic dependent launch (gxg.ops.dependent_launch): the driver structures it passes
have CUDA's layout, arguments convert as CuPy's call takes them, and it is off wherever it
cannot apply. The launches themselves are checked on a GPU by tests/test_batch.py's graph test
(with and without it)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from gxg.ops import dependent_launch


def test_driver_structures_have_cudas_layout():
    # cuda.h: CUlaunchAttribute = {CUlaunchAttributeID id; char pad[4]; 64-byte union value},
    # CUlaunchConfig = {6 dims, sharedMemBytes, hStream, attrs, numAttrs}
    assert ctypes.sizeof(dependent_launch._LaunchAttribute) == 72
    assert dependent_launch._LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(dependent_launch._LaunchConfig) == 56
    assert dependent_launch._LaunchConfig.stream.offset == 32
    assert dependent_launch._LaunchConfig.attrs.offset == 40
    assert dependent_launch._LaunchConfig.num_attrs.offset == 48


@pytest.mark.parametrize("value,ctype,expected", [
    (np.uint64(2**63 + 5), ctypes.c_uint64, 2**63 + 5),
    (np.int32(-7), ctypes.c_int32, -7),
    (np.int64(1 << 40), ctypes.c_int64, 1 << 40),
])
def test_arguments_convert_to_their_c_types(value, ctype, expected):
    converted = dependent_launch._as_ctype(value)
    assert isinstance(converted, ctype) and converted.value == expected


def test_a_python_int_argument_is_refused_by_name():
    with pytest.raises(TypeError, match="numpy scalar, got int"):
        dependent_launch._as_ctype(3)


def test_off_on_the_cpu_and_when_switched_off(monkeypatch):
    assert not dependent_launch.enabled(torch.device("cpu"), 1)
    monkeypatch.setattr(dependent_launch, "ENABLED", False)
    assert not dependent_launch.enabled(torch.device("cuda", 0), 1)


def test_on_only_while_capturing_a_small_batch(monkeypatch):
    monkeypatch.setattr(dependent_launch, "_supported", lambda index: True)
    capturing = [True]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    device = torch.device("cuda", 0)
    limit = dependent_launch.MAX_BATCH
    assert dependent_launch.enabled(device, 1) and dependent_launch.enabled(device, limit)
    assert not dependent_launch.enabled(device, limit + 1)
    capturing[0] = False
    assert not dependent_launch.enabled(device, 1)
