"""The Triton dense-fill kernel (``gxg.ops.fill_triton``) against independent computations.

Runs on CUDA when a device is present, else under the Triton interpreter (TRITON_INTERPRET=1 on
CPU tensors); the same tests run in both places.

* Dense fill: real runtime states (several grammars in one arena, so node bases differ; slots
  unbound, terminated, failed, live with one or several tops, able to end or not), advanced
  with the CPU reference ops, compared bit for bit with a numpy computation from each
  grammar's own kernel layout (not the arena's copy); dense | the reference's uncertain bits
  equals ``reference.fill_next_token_bitmask``, and dense alone equals it for grammars without
  uncertain tokens.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("triton")

from gxg.arena import ArenaCapacity  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.ops import arena_tables, reference  # noqa: E402
from gxg.ops.fill_triton import fill_dense  # noqa: E402
from gxg.runtime import ErrorCode, RuntimeLimits, RuntimeState  # noqa: E402
from gxg.tokenizer import TokenizerInfo, VocabType  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
LIMITS = RuntimeLimits(max_stacks=16, pool_entries=256, history=8)

GRAMMARS = {
    "json": None,   # builtin JSON grammar (has uncertain tokens)
    "arrays": 'root ::= array\narray ::= "[" (value ("," value)*)? "]"\n'
              'value ::= array | [0-9]+',
    "assign": 'root ::= [a-z]+ "=" [0-9]+',
    "ambiguous": 'root ::= b* b*\nb ::= "x" | "xx"',
    "arith": 'root ::= expr\nexpr ::= expr ("+" | "-") term | term\n'
             'term ::= term ("*" | "/") factor | factor\nfactor ::= [0-9]+ | "(" expr ")"',
}

MULTI = [b"[[", b"]]", b"],", b",[", b"12", b"xx", b"xxx", b"ab", b"a=", b"=1", b"1]",
         b'"a"', b'{"', b'":', b"true", b"null", b"1+", b"(1"]


def make_info() -> TokenizerInfo:
    """~120 ids: printable ASCII, some multi-byte tokens, a stop token early and one late, an
    empty (special) token, and 5 padding ids (vocab_size not a multiple of 32)."""
    vocab = [bytes([c]) for c in range(32, 127)] + MULTI
    vocab.insert(3, b"<eos>")
    vocab.insert(40, b"")
    vocab.append(b"<|end|>")
    stops = [3, len(vocab) - 1]
    info = TokenizerInfo(vocab, VocabType.RAW, vocab_size=len(vocab) + 5, stop_token_ids=stops)
    assert info.vocab_size % 32 != 0
    return info


def words_of(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def set_bits(row: np.ndarray, token_ids) -> None:
    for t in np.asarray(token_ids, dtype=np.int64).tolist():
        row.view(np.uint32)[t >> 5] |= np.uint32(1 << (t & 31))


def bits_of(row: np.ndarray, vocab_size: int) -> np.ndarray:
    return np.unpackbits(np.asarray(row, np.int32).view(np.uint8),
                         bitorder="little")[:vocab_size].astype(bool)


class World:
    """One tokenizer, one arena holding every grammar, one runtime state of B slots."""

    def __init__(self):
        self.info = make_info()
        self.words = words_of(self.info.vocab_size)
        compiler = GrammarCompiler(self.info)
        self.batch = GrammarBatch(self.info, device=DEVICE, max_batch=16, limits=LIMITS,
                                  capacity=ArenaCapacity(
                                      max_grammars=8, nodes=2048, next_entries=1 << 15,
                                      ref_edges=2048, accept_rows=128, uncertain_tokens=4096))
        self.arena = self.batch.arena
        self.gid = {}
        for name, ebnf in GRAMMARS.items():
            compiled = (compiler.compile_builtin_json_grammar() if ebnf is None
                        else compiler.compile_grammar(ebnf))
            self.gid[name] = self.arena.register(compiled)
        self.stop_row = np.zeros(self.words, np.int32)
        set_bits(self.stop_row, self.info.stop_token_ids)
        self.state = self._build_state()
        self.batch.load_state(self.state)

    def tables(self, gid):
        return arena_tables.host_tables(self.arena.op_tensors(), self.arena.dims, gid)

    def layout(self, gid):
        return self.arena.compiled(gid).kernel_layout

    def token(self, text: bytes) -> int:
        return self.info.decoded_vocab.index(text)

    def _walk(self, state, slot, name, steps, rng, allow_stop=False):
        gid = self.gid[name]
        tables = self.tables(gid)
        state.grammar[slot] = gid
        reference.reset(state, slot, tables)
        stops = set(self.info.stop_token_ids)
        for _ in range(steps):
            row = np.zeros(self.words, np.int32)
            reference.fill_next_token_bitmask(state, slot, tables, row)
            choices = [t for t in np.nonzero(bits_of(row, self.info.vocab_size))[0].tolist()
                       if allow_stop or t not in stops]
            if not choices:
                break
            assert reference.accept_token(state, slot, tables, rng.choice(choices))
            if state.terminated[slot]:
                break

    def _feed(self, state, slot, name, texts):
        gid = self.gid[name]
        state.grammar[slot] = gid
        reference.reset(state, slot, self.tables(gid))
        for text in texts:
            assert reference.accept_token(state, slot, self.tables(gid), self.token(text)), text

    def _build_state(self) -> RuntimeState:
        rng = random.Random(7)
        state = RuntimeState.allocate(16, LIMITS)
        state.grammar[0] = -1                                  # unbound, never used
        self._feed(state, 1, "arrays", [b"[", b"12"])          # unbound, stale tops left over
        state.grammar[1] = -1
        self._feed(state, 2, "assign", [b"ab", b"=", b"1"])    # terminated
        assert reference.accept_token(state, 2, self.tables(self.gid["assign"]), 3)
        assert state.terminated[2]
        self._feed(state, 3, "arrays", [b"[[", b"1"])          # error code, tops still there
        state.error[3] = int(ErrorCode.POOL_FULL)
        self._feed(state, 4, "assign", [b"a=", b"12"])         # live, can end
        self._feed(state, 5, "ambiguous", [b"xx", b"x"])       # live, several tops, can end
        self._feed(state, 6, "arrays", [b"[[", b"1"])          # live, uncertain tokens
        self._feed(state, 7, "json", [b'{"', b"a", b'":'])     # live, uncertain tokens
        self._walk(state, 8, "arith", 0, rng)                  # fresh
        names = list(GRAMMARS)
        for slot in range(9, 16):
            self._walk(state, slot, names[slot % len(names)], rng.randint(1, 6), rng,
                       allow_stop=slot == 15)
        return state

    def runtime(self):
        """The batch's runtime blob holding ``state`` (a fill does not change the state)."""
        return self.batch.runtime

    def dense_oracle(self, state=None, skip=()):
        """The dense part from each grammar's own layout; ``skip``: (gid, node) pairs whose
        row is treated as -1."""
        state = self.state if state is None else state
        out = np.zeros((state.batch_size, self.words), np.int32)
        for b in range(state.batch_size):
            g = int(state.grammar[b])
            if g < 0:
                out[b] = -1
                continue
            if state.terminated[b] or state.error[b]:
                out[b] = self.stop_row
                continue
            layout = self.layout(g)
            for entry in state.tops[b, : state.num_tops[b]].tolist():
                node = int(state.pool_node[b, entry])
                row = int(layout.node_row[node])
                if row >= 0 and (g, node) not in skip:
                    out[b] |= layout.accept_rows[row]
            if state.can_end[b]:
                out[b] |= self.stop_row
        return out

    def uncertain_bits(self, slot) -> np.ndarray:
        """What the uncertain-token kernel adds for a slot (from the reference's walker)."""
        state = self.state
        row = np.zeros(self.words, np.int32)
        if state.terminated[slot] or state.error[slot]:
            return row
        tables = self.tables(int(state.grammar[slot]))
        layout = tables.layout
        entries = state.tops[slot, : state.num_tops[slot]].tolist()
        for entry, stack in zip(entries, state.stacks(slot)):
            node = int(state.pool_node[slot, entry])
            lo, hi = layout.uncertain_offsets[node], layout.uncertain_offsets[node + 1]
            if hi > lo:
                set_bits(row, tables.uncertain_accepted(node, stack,
                                                        layout.uncertain_tokens[lo:hi]))
        return row


@pytest.fixture(scope="module")
def world():
    return World()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality of two float tensors (NaN and -0.0 included)."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return a.dtype == b.dtype and torch.equal(a.cpu().view(ints), b.cpu().view(ints))


def garbage_bitmask(batch, words, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-2 ** 31, 2 ** 31 - 1, (batch, words), dtype=torch.int32,
                         generator=g).to(DEVICE)


def test_world_covers_the_cases(world):
    s = world.state
    bases = {int(world.arena.grammar_node_base[g]) for g in world.gid.values()}
    assert len(bases) == len(world.gid)
    live = (s.grammar >= 0) & (s.terminated == 0) & (s.error == 0)
    assert (s.grammar < 0).sum() >= 2 and s.terminated.any() and s.error.any()
    assert (live & (s.can_end != 0)).any() and (live & (s.can_end == 0)).any()
    assert s.num_tops[live].max() > 1
    assert s.num_tops[1] > 0                          # the stale unbound slot
    assert any(len(world.layout(g).uncertain_tokens) == 0 for g in world.gid.values())
    assert any(world.uncertain_bits(b).any() for b in np.nonzero(live)[0])


def test_the_batch_holds_the_world_state(world):
    host = world.batch.host_state()
    for name in RuntimeState.FIELDS:
        np.testing.assert_array_equal(getattr(host, name), getattr(world.state, name), name)


@pytest.mark.parametrize("block_words", [1, 2, 128])
def test_fill_dense_matches_numpy(world, block_words):
    bitmask = garbage_bitmask(world.state.batch_size, world.words)
    fill_dense(world.runtime(), bitmask, block_words=block_words)
    np.testing.assert_array_equal(bitmask.cpu().numpy(), world.dense_oracle())


def test_dense_plus_uncertain_is_the_reference_mask(world):
    state = world.state
    bitmask = garbage_bitmask(state.batch_size, world.words, seed=1)
    fill_dense(world.runtime(), bitmask)
    dense = bitmask.cpu().numpy()
    checked_plain = 0
    for b in range(state.batch_size):
        g = int(state.grammar[b])
        if g < 0:
            continue
        expected = np.zeros(world.words, np.int32)
        reference.fill_next_token_bitmask(state, b, world.tables(g), expected)
        np.testing.assert_array_equal(dense[b] | world.uncertain_bits(b), expected,
                                      err_msg=f"slot {b}")
        if len(world.layout(g).uncertain_tokens) == 0:
            np.testing.assert_array_equal(dense[b], expected, err_msg=f"slot {b}")
            checked_plain += 1
    assert checked_plain >= 2


def test_negative_rows_are_skipped(world):
    """A live top whose node has no accept row (cannot happen; guarded) contributes nothing."""
    state = world.state
    b = 5                                            # ambiguous grammar, several tops
    g = int(state.grammar[b])
    node = int(state.pool_node[b, state.tops[b, 0]])
    row_index = int(world.arena.grammar_node_base[g]) + node
    saved = int(world.arena.node_row[row_index])
    world.arena.node_row[row_index] = -1
    try:
        bitmask = garbage_bitmask(state.batch_size, world.words, seed=2)
        fill_dense(world.runtime(), bitmask, block_words=2)
    finally:
        world.arena.node_row[row_index] = saved
    np.testing.assert_array_equal(bitmask.cpu().numpy(), world.dense_oracle(skip={(g, node)}))


def test_fill_dense_rejects_bad_arguments(world):
    bitmask = garbage_bitmask(world.state.batch_size, world.words)
    with pytest.raises(ValueError):
        fill_dense(world.runtime(), bitmask, block_words=3)
    with pytest.raises(ValueError):
        fill_dense(world.runtime(), bitmask.t().contiguous().t())
