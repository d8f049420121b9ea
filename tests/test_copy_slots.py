"""``xg::copy_slots`` (``GrammarBatch.copy_slots_from``): slot i of one batch takes the whole
state of slot ``source_slots[i]`` of another batch on the same arena.

Specification: after the copy, every state buffer's row i equals the source's row
``source_slots[i]`` (source slots outside the source batch clamped into it) and nothing else
of the runtime blob changes; the Triton kernel (under TRITON_INTERPRET=1 without a GPU) writes
the same bytes as the reference; a table that does not fit the blobs, or a copy of a blob into
itself, is refused on the CPU.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from gxg.batch import GrammarBatch  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.ops.copy_slots import copy_slots_reference  # noqa: E402
from gxg.runtime import RuntimeLimits, RuntimeState  # noqa: E402
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar  # noqa: E402

LIMITS = RuntimeLimits(max_stacks=8, pool_entries=64, history=4)


@pytest.fixture(scope="module")
def batches():
    """A source batch of 3 slots (JSON after "[1", arithmetic after "1+", unbound) and a
    destination batch of 5 slots on its arena, both with every state byte scrambled first so
    that a missed byte shows."""
    info = make_info(synthetic_vocab([s for _, _, group in GRAMMAR_ZOO for s in group]))
    ebnf = {name: text for name, text, _ in GRAMMAR_ZOO}
    compiler = GrammarCompiler(info)
    source = GrammarBatch(info, device="cpu", max_batch=3, limits=LIMITS)
    source.bind(0, compiler.compile_grammar(zoo_grammar(ebnf["json"])))
    source.bind(1, compiler.compile_grammar(zoo_grammar(ebnf["arithmetic"])))
    for first, second in ((b"[", b"1"), (b"1", b"+")):
        ids = [info.decoded_vocab.index(first), info.decoded_vocab.index(second), 0]
        assert source.accept(torch.tensor(ids)).tolist() == [True, True, True]
    into = GrammarBatch(info, device="cpu", max_batch=5, limits=LIMITS, arena=source.arena)
    return source, into


def scrambled(batch: GrammarBatch, seed: int) -> torch.Tensor:
    """A copy of the runtime blob whose state bytes are random (the header kept)."""
    blob = batch.runtime.clone()
    generator = torch.Generator().manual_seed(seed)
    for offset, _, size, _ in batch.state_copy_table(batch).tolist():
        rows = batch.max_batch
        blob.view(-1)[offset: offset + rows * size] = torch.randint(
            0, 256, (rows * size,), dtype=torch.uint8, generator=generator)
    return blob


def rows_of(blob: torch.Tensor, batch: GrammarBatch):
    """Per state buffer, its [B, bytes] rows in ``blob`` (laid out as ``batch``'s)."""
    table = batch.state_copy_table(batch).tolist()
    return {name: blob.view(-1)[offset: offset + batch.max_batch * size]
            .view(batch.max_batch, size)
            for name, (offset, _, size, _) in zip(RuntimeState.FIELDS, table)}


def triton_copy(*arguments):
    pytest.importorskip("triton")
    from gxg.ops.copy_slots_triton import copy_slots_triton
    device = "cuda" if torch.cuda.is_available() else "cpu"
    moved = [a.to(device) for a in arguments]
    copy_slots_triton(*moved)
    return moved[0].cpu()


def reference_copy(*arguments):
    copy_slots_reference(*arguments)
    return arguments[0]


def op_copy(*arguments):
    torch.ops.xg.copy_slots(*arguments)
    return arguments[0]


@pytest.mark.parametrize("implementation", [reference_copy, triton_copy, op_copy],
                         ids=["reference", "triton", "op"])
@pytest.mark.parametrize("slots", [[2, 0, 1, 1, 0], [0, 0, 0, 0, 0], [7, -3, 2, 1, 99]])
def test_every_state_byte_of_the_source_slot_is_copied(batches, implementation, slots):
    source, into = batches
    source_blob, into_blob = scrambled(source, 1), scrambled(into, 2)
    before = into_blob.clone()
    table = into.state_copy_table(source)
    after = implementation(into_blob, source_blob, torch.tensor(slots), table)
    copied, original, theirs = rows_of(after, into), rows_of(before, into), \
        rows_of(source_blob, source)
    for name in RuntimeState.FIELDS:
        for i, slot in enumerate(slots):
            want = theirs[name][min(max(slot, 0), source.max_batch - 1)]
            assert torch.equal(copied[name][i], want), (name, i)
    # nothing outside the state buffers moves (the header, the scratch)
    outside = torch.ones(after.numel(), dtype=torch.bool)
    for offset, _, size, _ in table.tolist():
        outside[offset: offset + into.max_batch * size] = False
    assert torch.equal(after.view(-1)[outside], before.view(-1)[outside])
    assert not torch.equal(torch.cat([v.reshape(-1) for v in copied.values()]),
                           torch.cat([v.reshape(-1) for v in original.values()]))


def test_a_copied_slot_behaves_as_its_source(batches):
    source, into = batches
    into.copy_slots_from(source, torch.tensor([1, 0, 2, 0, 1]))
    assert into.is_terminated().tolist() == [False] * 5
    for mine, theirs in ((0, 1), (1, 0), (4, 1)):
        assert into.to_matcher(mine).find_jump_forward_string() == \
            source.to_matcher(theirs).find_jump_forward_string()
        assert into.host_state().num_tops[mine] == source.host_state().num_tops[theirs]


def test_tables_that_do_not_fit_and_copies_into_itself_are_refused(batches):
    source, into = batches
    table = into.state_copy_table(source).clone()
    table[3, 0] = into.runtime.numel()          # past the end of the destination
    with pytest.raises(ValueError, match="does not fit"):
        torch.ops.xg.copy_slots(into.runtime, source.runtime, torch.zeros(5, dtype=torch.int64),
                                table)
    with pytest.raises(ValueError, match="not runtime itself"):
        torch.ops.xg.copy_slots(source.runtime, source.runtime,
                                torch.zeros(3, dtype=torch.int64), source.state_copy_table(source))
