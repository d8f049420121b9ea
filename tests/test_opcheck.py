"""Every ``torch.ops.xg`` op passes ``torch.library.opcheck`` with its default checks.

Specification: for each op of ``gxg.ops.xg_ops``, called as ``GrammarBatch`` calls it (a batch
with a budgeted JSON slot, an arithmetic slot and an unbound slot, two tokens into their
grammars so that rollback has history), ``opcheck`` finds
* ``test_schema``: the op mutates only the arguments its schema declares mutated;
* ``test_autograd_registration``: no autograd kernel is missing for the devices it has;
* ``test_faketensor``: the fake kernel gives the real kernel's output metadata;
* ``test_aot_dispatch_dynamic``: the op traces under AOTAutograd with dynamic shapes, and the
  traced call gives the eager call's outputs and mutations.
On the CPU (every CI run) and on CUDA (marked gpu), where the ops run the device kernels that
reach the state through the pointer table.
"""
from __future__ import annotations

import pytest
import torch

import gxg
from gxg.batch import GrammarBatch
from gxg.ops import xg_ops
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar

DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])]

OPS = ["reset", "accept_token", "accept_tokens", "slot_status", "copy_slots", "draft_paths",
       "rollback", "fill_next_token_bitmask",
       "apply_token_bitmask_inplace", "fill_and_apply", "fill_and_sample"]

# (op, variant): the calls checked; a variant names the optional arguments passed
CALLS = [("reset", ""), ("accept_token", ""), ("accept_tokens", ""), ("slot_status", ""),
         ("copy_slots", ""), ("draft_paths", ""), ("rollback", ""),
         ("fill_next_token_bitmask", ""), ("fill_next_token_bitmask", "budget"),
         ("apply_token_bitmask_inplace", ""), ("apply_token_bitmask_inplace", "indices"),
         ("fill_and_apply", ""), ("fill_and_apply", "budget"),
         ("fill_and_sample", "greedy"), ("fill_and_sample", "top_k_top_p_budget")]


def test_every_op_is_checked():
    """A new op in gxg.ops.xg_ops fails this until it joins OPS and CALLS: none goes
    unchecked."""
    defined = {name for name, value in vars(xg_ops).items()
               if isinstance(value, torch.library.CustomOpDef)}
    assert defined == set(OPS)
    assert {op for op, _ in CALLS} == set(OPS)


@pytest.fixture(scope="module")
def world():
    """(info, {"json", "arithmetic"}: compiled) over the zoo's synthetic vocabulary."""
    info = make_info(synthetic_vocab([s for _, _, group in GRAMMAR_ZOO for s in group]))
    compiler = gxg.GrammarCompiler(info)
    ebnf = {name: text for name, text, _ in GRAMMAR_ZOO}
    return info, {name: compiler.compile_grammar(zoo_grammar(ebnf[name]))
                  for name in ("json", "arithmetic")}


def busy_batch(world, device: str) -> GrammarBatch:
    """Slot 0: JSON with a 10-token budget after "[1"; slot 1: arithmetic after "1+"; slot 2
    unbound."""
    info, compiled = world
    batch = GrammarBatch(info, device=device, max_batch=3)
    batch.bind(0, compiled["json"], max_tokens=10)
    batch.bind(1, compiled["arithmetic"])
    for first, second in ((b"[", b"1"), (b"1", b"+")):
        ids = [info.decoded_vocab.index(first), info.decoded_vocab.index(second), 0]
        assert batch.accept(torch.tensor(ids, device=device)).tolist() == [True, True, True]
    return batch


def op_arguments(batch: GrammarBatch, info, op: str, variant: str) -> tuple:
    """The op's arguments as ``GrammarBatch`` passes them (``info``: the batch's tokenizer),
    with a fresh bitmask and fresh logits."""
    device = batch.device
    bitmask = torch.zeros((3, (info.vocab_size + 31) // 32), dtype=torch.int32, device=device)
    logits = torch.randn(3, info.vocab_size, device=device)
    state = (batch.runtime, batch.arena.op_tensors())
    budget = (batch.token_budget,) if "budget" in variant else ()
    if op == "reset":
        return (*state, torch.tensor([True, False, True], device=device))
    if op == "accept_token":
        return (*state, torch.tensor([info.decoded_vocab.index(b"]")] * 3, device=device))
    if op == "accept_tokens":  # slot 0 takes "]" then stops at "[", slot 1 takes "2" twice
        ids = [info.decoded_vocab.index(t) for t in (b"]", b"[", b"2")]
        rows = [[ids[0], ids[1], ids[1]], [ids[2], ids[2], ids[0]], [ids[1], ids[1], ids[1]]]
        return (*state, torch.tensor(rows, device=device),
                torch.tensor([3, 2, 5], device=device))
    if op == "slot_status":
        return (batch.runtime,)
    if op == "copy_slots":  # a second batch on the same arena takes slots 1, 0, 2 of this one
        other = GrammarBatch(info, device=device, max_batch=3, arena=batch.arena)
        return (other.runtime, batch.runtime, torch.tensor([1, 0, 2], device=device),
                other.state_copy_table(batch))
    if op == "draft_paths":  # three rows: a chain, a tree with a sibling, a lone root
        i64 = dict(dtype=torch.int64, device=device)
        return (torch.tensor([[1, 2, -1], [1, -1, -1], [-1, -1, -1]], **i64),
                torch.tensor([[-1, -1, -1], [2, -1, -1], [-1, -1, -1]], **i64),
                torch.tensor([[0, 5, 6], [0, 7, 8], [0, 9, 9]], **i64))
    if op == "rollback":
        return batch.runtime, torch.tensor([1, 2, 0], device=device)
    if op == "fill_next_token_bitmask":
        return (*state, bitmask, *budget)
    if op == "apply_token_bitmask_inplace":
        bitmask.random_(-2 ** 31, 2 ** 31 - 1)
        indices = (torch.tensor([0, 2], device=device),) if variant == "indices" else ()
        return (logits, bitmask, *indices)
    if op == "fill_and_apply":
        return (*state, logits, bitmask, *budget)
    return (*state, logits, bitmask, *sampling(variant, device), info.vocab_size, *budget)


def sampling(variant: str, device: str) -> tuple:
    """(temperature, top_k, top_p, seed, offset) for fill_and_sample: greedy, or temperature
    with top-k and top-p all on."""
    greedy = variant == "greedy"
    return (torch.full((3,), 0.0 if greedy else 0.7, device=device),
            torch.full((3,), 0 if greedy else 5, dtype=torch.int32, device=device),
            torch.full((3,), 1.0 if greedy else 0.9, device=device),
            torch.tensor([1234], device=device), torch.zeros(1, dtype=torch.int64, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,variant", CALLS, ids=[f"{op}-{v}" if v else op for op, v in CALLS])
def test_op_passes_opcheck(world, device, op, variant):
    batch = busy_batch(world, device)
    arguments = op_arguments(batch, world[0], op, variant)
    torch.library.opcheck(getattr(torch.ops.xg, op).default, arguments)


# (op, argument position, replacement, what the message names): per-step tensors that do not
# fit the batch are refused with a ValueError naming them, before any kernel runs
BAD_ARGUMENTS = [
    ("reset", 2, lambda d: torch.tensor([True, False], device=d), "slots"),
    ("accept_token", 2, lambda d: torch.zeros(4, dtype=torch.int64, device=d), "token_ids"),
    ("accept_tokens", 2, lambda d: torch.zeros(3, dtype=torch.int64, device=d), "token_ids"),
    ("accept_tokens", 3, lambda d: torch.zeros(2, dtype=torch.int64, device=d), "lengths"),
    ("rollback", 1, lambda d: torch.zeros(2, dtype=torch.int64, device=d), "num_tokens"),
    ("copy_slots", 2, lambda d: torch.zeros(2, dtype=torch.int64, device=d), "source_slots"),
    ("copy_slots", 3, lambda d: torch.zeros((17, 3), dtype=torch.int64, device=d), "fields"),
    ("copy_slots", 1, lambda d: torch.zeros((3, 8), dtype=torch.int32, device=d), "source"),
    ("draft_paths", 1, lambda d: torch.zeros((3, 2), dtype=torch.int64, device=d),
     "next_sibling"),
    ("draft_paths", 2, lambda d: torch.zeros((3, 3), dtype=torch.int32, device=d), "tokens"),
    ("fill_next_token_bitmask", 2, lambda d: torch.zeros((3, 1), dtype=torch.int32, device=d),
     "bitmask"),
    ("fill_next_token_bitmask", 2,
     lambda d: torch.zeros((3, 64), dtype=torch.int32, device=d)[:, ::2], "bitmask"),
    ("fill_and_apply", 3, lambda d: torch.zeros((3, 64), dtype=torch.int64, device=d),
     "bitmask"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,position,bad,named", BAD_ARGUMENTS,
                         ids=[f"{op}-{named}-{i}" for i, (op, _, _, named)
                              in enumerate(BAD_ARGUMENTS)])
def test_per_step_tensors_that_do_not_fit_are_refused(world, device, op, position, bad, named):
    batch = busy_batch(world, device)
    before = batch.host_state()
    arguments = list(op_arguments(batch, world[0], op, ""))
    arguments[position] = bad(device)
    with pytest.raises(ValueError, match=named):
        getattr(torch.ops.xg, op)(*arguments)
    after = batch.host_state()
    for name in ("pool_size", "num_tops", "error", "hist_len"):
        assert (getattr(before, name) == getattr(after, name)).all(), name
