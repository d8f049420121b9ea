"""The CPU ops read their grammar tables from the arena tensors they receive.

Specification:
* the ops' schemas take the arena's tensors and no arena id, and ``gxg.arena`` keeps no
  registry of live arenas;
* the host tables rebuilt from an arena (``gxg.ops.arena_tables``) hold the compiled grammar's
  automaton, mask layout and completion distances and the tokenizer's vocabulary, for grammars
  registered after others (node, row and token ranges that do not start at 0);
* ``torch.ops.xg`` called with a batch's runtime and arena tensors gives, along sentences of
  zoo grammars, the masks and verdicts of a ``GrammarMatcher`` of the same grammar, and the
  brute-force oracle's masks;
* the tables are cached per arena and grammar, and a grammar registered at an id that an
  unregistered one had gets its own tables (masks and verdicts), never the earlier one's;
  a dropped arena drops its cache entry.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

import gxg
from gxg import arena as arena_module
from gxg.batch import GrammarBatch
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from gxg.ops import arena_tables, reference
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar
from mask_oracles import brute_force_mask, mask_to_bool

xg = torch.ops.xg
ZOO = {name: (ebnf, sentences) for name, ebnf, sentences in GRAMMAR_ZOO}
NAMES = ["json", "arithmetic", "lookahead", "unicode", "nullable_heavy"]
OPS = ["reset", "accept_token", "fill_next_token_bitmask", "fill_and_apply", "fill_and_sample"]


@pytest.fixture(scope="module")
def world():
    """(info, {zoo name: compiled}) over the zoo's synthetic vocabulary."""
    info = make_info(synthetic_vocab([s for _, _, group in GRAMMAR_ZOO for s in group]))
    compiler = gxg.GrammarCompiler(info)
    return info, {name: compiler.compile_grammar(zoo_grammar(ZOO[name][0])) for name in NAMES}


def token_ids(info, data: bytes):
    """Greedy longest-match ids spelling ``data`` in the synthetic vocabulary."""
    vocab = info.decoded_vocab
    ids, i = [], 0
    while i < len(data):
        length = max(n for n in range(1, 5) if data[i:i + n] in vocab)
        ids.append(vocab.index(data[i:i + length]))
        i += length
    return ids


# ----------------------------------------------------------------------------- schemas


def test_no_arena_registry_and_short_argument_lists():
    """The ops take the two blobs (runtime, arena) and their own per-step tensors: no arena id,
    no lists of tensors."""
    assert not hasattr(arena_module, "LIVE_ARENAS")
    assert not hasattr(arena_module, "_next_arena_id")
    for op in OPS:
        schema = getattr(xg, op).default._schema
        names = [argument.name for argument in schema.arguments]
        assert "arena_id" not in names, schema
        assert names[:2] == ["runtime", "arena"], schema
        assert all(str(a.type) != "List[Tensor]" for a in schema.arguments), schema
    rollback = xg.rollback.default._schema
    assert [a.name for a in rollback.arguments] == ["runtime", "num_tokens"]


# ----------------------------------------------------------------------------- the tables


def test_tables_from_the_arena_hold_the_compiled_grammar(world):
    info, compiled = world
    batch = GrammarBatch(info, device="cpu", max_batch=1)
    ids = [batch.arena.register(compiled[name]) for name in NAMES]   # later ones start past 0
    arena = batch.arena.op_tensors()
    expected_vocabulary = reference.tokenizer_vocabulary(info, info.stop_token_ids)
    for name, gid in zip(NAMES, ids):
        grammar = compiled[name]
        tables = arena_tables.host_tables(arena, batch.arena.dims, gid)
        a, b = grammar.automaton, tables.automaton
        for field in ("byte_class", "next_node", "ref_offsets", "ref_rule", "ref_return",
                      "is_final", "is_scannable", "is_pure_return", "node_rule", "rule_start"):
            np.testing.assert_array_equal(getattr(b, field), getattr(a, field), err_msg=field)
        assert b.root_rule == a.root_rule and b.num_nodes == a.num_nodes
        assert [b.refs(n) for n in range(b.num_nodes)] == [a.refs(n) for n in range(a.num_nodes)]
        # the mask layout, node by node (rows are numbered per arena, the bits are the same)
        ours, theirs = tables.layout, grammar.kernel_layout
        np.testing.assert_array_equal(ours.node_row >= 0, theirs.node_row >= 0)
        scans = np.flatnonzero(theirs.node_row >= 0)
        np.testing.assert_array_equal(ours.accept_rows[ours.node_row[scans]],
                                      theirs.accept_rows[theirs.node_row[scans]])
        np.testing.assert_array_equal(ours.uncertain_offsets, theirs.uncertain_offsets)
        np.testing.assert_array_equal(ours.uncertain_tokens, theirs.uncertain_tokens)
        np.testing.assert_array_equal(tables.completion.node_distance,
                                      grammar.completion.node_distance)
        np.testing.assert_array_equal(tables.completion.rule_length,
                                      grammar.completion.rule_length)
        assert tables.completion.max_rise == grammar.completion.max_rise
        assert tables.root_start == int(a.rule_start[a.root_rule])
        v, w = tables.vocabulary, expected_vocabulary
        assert v.vocab_size == w.vocab_size
        for field in ("token_offsets", "sorted_token_ids", "is_stop", "special",
                      "ids_by_length", "lengths_by_id"):
            np.testing.assert_array_equal(getattr(v, field), getattr(w, field), err_msg=field)
        assert bytes(v.token_bytes[:v.token_offsets[-1]]) == bytes(w.token_bytes)
        for token in range(info.vocab_size):   # what accept consumes, where it consumes
            if not (w.special[token] or w.is_stop[token]):
                assert v.bytes_by_id[token] == w.bytes_by_id[token]


def test_tables_are_cached_per_arena_and_generation(world):
    info, compiled = world
    batch = GrammarBatch(info, device="cpu", max_batch=1)
    gid = batch.arena.register(compiled["arithmetic"])
    arena = batch.arena.op_tensors()
    dims = batch.arena.dims
    first = arena_tables.host_tables(arena, dims, gid)
    assert arena_tables.host_tables(arena, dims, gid) is first
    assert batch.arena.register(compiled["arithmetic"]) == gid      # already there: no new
    assert arena_tables.host_tables(arena, dims, gid) is first      # generation
    batch.arena.unregister(gid)
    assert batch.arena.register(compiled["arithmetic"]) == gid
    again = arena_tables.host_tables(arena, dims, gid)
    assert again is not first
    assert again.vocabulary is first.vocabulary                     # one per arena
    key = weakref.ref(arena)
    gc.collect()
    entries = len(arena_tables._CACHE)
    del batch, arena, first, again
    gc.collect()
    assert key() is None                    # the cache does not keep the arena alive ...
    assert len(arena_tables._CACHE) == entries - 1      # ... and drops its entry with it


# ----------------------------------------------------------------------------- the ops


@pytest.mark.parametrize("name", NAMES)
def test_the_ops_on_arena_tensors_match_the_matcher(world, name):
    """Slot 1 runs the grammar (registered after two others), slot 0 another one, slot 2 is
    unbound; every op is called directly with the batch's tensors."""
    info, compiled = world
    other = "arithmetic" if name != "arithmetic" else "json"
    batch = GrammarBatch(info, device="cpu", max_batch=3)
    batch.arena.register(compiled["unicode" if name != "unicode" else "lookahead"])
    batch.bind(0, compiled[other])
    batch.bind(1, compiled[name])
    runtime, arena = batch.runtime, batch.arena.op_tensors()
    words = (info.vocab_size + 31) // 32
    for sentence in ZOO[name][1]:
        xg.reset(runtime, arena, torch.tensor([True, True, True]))
        matcher = GrammarMatcher(compiled[name])
        expected = allocate_token_bitmask(1, info.vocab_size)
        for token in token_ids(info, sentence.encode()) + [info.stop_token_ids[0]]:
            bitmask = torch.zeros((3, words), dtype=torch.int32)
            xg.fill_next_token_bitmask(runtime, arena, bitmask)
            matcher.fill_next_token_bitmask(expected)
            ours = mask_to_bool(bitmask[1].numpy(), info.vocab_size)
            assert (ours == mask_to_bool(expected[0].numpy(), info.vocab_size)).all()
            assert (ours == brute_force_mask(matcher)).all()
            assert mask_to_bool(bitmask[2].numpy(), info.vocab_size).all()     # unbound
            logits = torch.zeros(3, info.vocab_size)
            xg.fill_and_apply(runtime, arena, logits, bitmask)
            assert ((logits[1] == 0).numpy() == ours).all()
            rejected = int(np.flatnonzero(~ours)[0])
            verdicts = xg.accept_token(runtime, arena, torch.tensor([-1, rejected, 0]))
            assert verdicts.tolist() == [False, False, True]
            assert xg.accept_token(runtime, arena, torch.tensor([-1, token, 0]))[1]
            assert matcher.accept_token(token)
        assert batch.is_terminated()[1]


def test_a_grammar_at_a_reused_id_gets_its_own_tables(world):
    """Grammar A at id g (its tables built and cached by a fill), unbound and unregistered;
    grammar B registered at the same id: the CPU batch gives B's masks and verdicts."""
    info, compiled = world
    a, b = compiled["arithmetic"], compiled["json"]
    batch = GrammarBatch(info, device="cpu", max_batch=1)
    bitmask = torch.zeros((1, (info.vocab_size + 31) // 32), dtype=torch.int32)
    gid = batch.bind(0, a)
    batch.fill_next_token_bitmask(bitmask)
    mask_a = mask_to_bool(bitmask[0].numpy(), info.vocab_size)
    batch.unbind(0)
    batch.arena.unregister(gid)
    assert batch.bind(0, b) == gid
    batch.fill_next_token_bitmask(bitmask)
    expected = allocate_token_bitmask(1, info.vocab_size)
    GrammarMatcher(b).fill_next_token_bitmask(expected)
    mask_b = mask_to_bool(expected[0].numpy(), info.vocab_size)
    assert (mask_a != mask_b).any()                      # else the test could not fail
    assert (mask_to_bool(bitmask[0].numpy(), info.vocab_size) == mask_b).all()
    brace, bracket, digit, plus = (info.decoded_vocab.index(text)
                                   for text in (b"{", b"[", b"1", b"+"))
    assert mask_b[brace] and not mask_a[brace]
    assert batch.accept(torch.tensor([brace])).tolist() == [True]
    batch.reset([0])
    assert batch.accept(torch.tensor([bracket])).tolist() == [True]
    assert batch.accept(torch.tensor([digit])).tolist() == [True]
    assert batch.accept(torch.tensor([plus])).tolist() == [False]   # arithmetic would take it
