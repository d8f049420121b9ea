"""The device layout is declared once (gxg/layout.py) and everything else follows it.

Specification:
* the CUDA header generated from the table defines P_<NAME> = the buffer's position, and every
  P_*, FLAG_*, ERR_*, L_* name and launch constant that csrc/automaton.cu uses, and the kernel
  source defines none of them by hand;
* a GrammarBatch's runtime blob starts with the pointer table, which holds the address of
  every declared buffer in table order (runtime buffers in the runtime blob, arena buffers in
  the arena blob, at ``blob_layout``'s aligned, non-overlapping offsets), then the dimension
  values, from which the buffers are read back with the declared dtypes and shapes;
* the runtime state, the arena and the ops take their field lists and constants from the table.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

import numpy as np

from gxg import blobs, layout
from gxg.arena import ARENA_FIELDS
from gxg.batch import GrammarBatch
from gxg.grammar_compiler import GrammarCompiler
from gxg.runtime import ErrorCode, RuntimeLimits, RuntimeState
from gxg.tokenizer import TokenizerInfo, VocabType

KERNELS = (Path(__file__).resolve().parent.parent / "csrc" / "automaton.cu").read_text()
HEADER = layout.cuda_header()


def header_defines() -> dict:
    return {name: int(value) for name, value in
            re.findall(r"^#define (\w+) \(?(-?\d+)\)?", HEADER, flags=re.MULTILINE)}


def test_the_header_numbers_the_pointer_table_in_table_order():
    defines = header_defines()
    for index, buffer in enumerate(layout.BUFFERS):
        assert defines[f"P_{buffer.name.upper()}"] == index == layout.pointer_index(buffer.name)
    assert defines["POINTER_TABLE_SIZE"] == len(layout.BUFFERS)


@pytest.mark.parametrize("prefix", ["P_", "FLAG_", "ERR_", "L_"])
def test_every_name_the_kernels_use_is_generated_not_hand_written(prefix):
    used = set(re.findall(rf"\b{prefix}[A-Z][A-Z0-9_]*\b", KERNELS))
    assert used, f"the kernels use no {prefix}* name?"
    assert used <= set(header_defines()), sorted(used - set(header_defines()))
    assert not re.search(rf"^#define {prefix}", KERNELS, flags=re.MULTILINE)


@pytest.mark.parametrize("name", sorted(layout.KERNEL_CONSTANTS))
def test_launch_constants_come_from_the_table(name):
    assert re.search(rf"\b{name}\b", KERNELS)
    assert not re.search(rf"^#define {name}\b", KERNELS, flags=re.MULTILINE)
    assert header_defines()[name] == layout.KERNEL_CONSTANTS[name]


def test_flags_and_error_codes_are_the_declared_ones():
    defines = header_defines()
    for flag in layout.NodeFlag:
        assert defines[f"FLAG_{flag.name}"] == int(flag)
    assert ErrorCode is layout.ErrorCode
    for code in ErrorCode:
        if code:
            assert defines[f"ERR_{code.name}"] == int(code)


def test_state_arena_and_ops_read_the_table():
    assert RuntimeState.FIELDS == tuple(layout.names("state"))
    declared = [f.name for f in dataclasses.fields(RuntimeState) if f.name != "limits"]
    assert declared == list(RuntimeState.FIELDS)
    assert ARENA_FIELDS == tuple(layout.names("arena")) == tuple(layout.blob_names("arena"))
    assert layout.blob_names("runtime") == (layout.names("header") + layout.names("state")
                                            + layout.names("scratch"))
    assert layout.blob_names("runtime")[0] == "pointer_table"


@pytest.mark.parametrize("blob", sorted(layout.BLOBS))
def test_blob_offsets_are_aligned_in_order_and_disjoint(blob):
    dims = {name: 3 + i for i, name in enumerate(layout.DIMS)}
    offsets, nbytes = layout.blob_layout(blob, dims)
    assert list(offsets) == layout.blob_names(blob)
    end = 0
    full = dict(dims, NB=len(layout.BUFFERS), ND=len(layout.DIMS))
    for name, start in offsets.items():
        assert start % layout.ALIGNMENT == 0 and start >= end, name
        end = start + int(np.prod(layout.shape_of(name, full))) * \
            layout.DTYPE_BYTES[layout.buffer(name).dtype]
    assert nbytes >= end and nbytes % layout.ALIGNMENT == 0


@pytest.fixture(scope="module")
def batch():
    vocab = [bytes([b]) for b in range(32, 127)] + [b"</s>"]
    info = TokenizerInfo(vocab, VocabType.RAW, vocab_size=len(vocab) + 2,
                         stop_token_ids=[len(vocab) - 1])
    batch = GrammarBatch(info, device="cpu", max_batch=3, limits=RuntimeLimits(history=5))
    batch.bind(0, GrammarCompiler(info).compile_regex("[a-c]+"), max_tokens=4)
    return batch


def test_the_pointer_table_holds_every_declared_buffer_in_order(batch):
    runtime, arena = batch.runtime, batch.arena.op_tensors()
    dims = blobs.header_dims(runtime.numpy())
    table = blobs.numpy_views(runtime.numpy(), "runtime", dims)["pointer_table"].tolist()
    assert len(table) == len(layout.BUFFERS)
    assert runtime.shape[0] == batch.max_batch and arena.shape[0] == batch.arena.words
    offsets = {blob: layout.blob_layout(blob, dims)[0] for blob in layout.BLOBS}
    views = dict(batch.arena.tensors(), **batch._views)
    for address, buffer in zip(table, layout.BUFFERS):
        blob = "arena" if buffer.group == "arena" else "runtime"
        base = (arena if blob == "arena" else runtime).data_ptr()
        assert address == base + offsets[blob][buffer.name], buffer.name
        assert views[buffer.name].data_ptr() == address, buffer.name
        assert views[buffer.name].dtype == getattr(torch, buffer.dtype), buffer.name


def test_buffers_have_the_declared_shapes(batch):
    limits = batch.limits
    dims = blobs.header_dims(batch.runtime.numpy())
    assert dims == dict(batch.arena.dims, **limits.dims(batch.max_batch),
                        WIDE_QUEUE=dims["WIDE_QUEUE"], WIDE_SPACE=dims["WIDE_SPACE"],
                        NB=len(layout.BUFFERS), ND=len(layout.DIMS))
    views = blobs.numpy_views(batch.runtime.numpy(), "runtime", dims)
    full = dict(dims)
    for name in layout.blob_names("runtime"):
        assert views[name].shape == layout.shape_of(name, full), name
        assert views[name].dtype == np.dtype(layout.buffer(name).dtype), name
    row = dict(zip(layout.LIMITS_ROW, views["limits"].tolist()))
    assert row == {"P": limits.pool_entries, "K": limits.max_stacks, "H": limits.history,
                   "MAX_CLOSURE": limits.max_closure, "WORK_CAP": limits.work_capacity,
                   "V": batch.vocab_size, "PI": limits.pool_index_slots,
                   "S": batch.arena.dims["S"]}
    np.testing.assert_array_equal(views["grammar"], batch.host_state().grammar)


@pytest.mark.parametrize("vocab_size,words", [(1, 1), (31, 1), (32, 1), (33, 2), (151_936, 4748)])
def test_bitmask_words(vocab_size, words):
    assert layout.bitmask_words(vocab_size) == words


def test_the_compile_stage_does_not_import_the_runtime():
    """Data flows one way: the front ends and the compiler (stages 1-3) import nothing of the
    arena, the batch or the ops (the CPU ops' tables are built on the runtime side,
    ``gxg.ops.reference.host_tables``, ``gxg.ops.arena_tables``)."""
    root = Path(__file__).resolve().parent.parent / "gxg"
    stage = [root / "grammar_compiler.py", *sorted((root / "compiler").glob("*.py")),
             *sorted((root / "grammar").glob("*.py"))]
    later = re.compile(r"^\s*(from|import)\s+gxg\.(ops|arena|batch|matcher|runtime)\b",
                       flags=re.MULTILINE)
    for path in stage:
        assert not later.search(path.read_text()), path.name
