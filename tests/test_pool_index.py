"""The stack pool is hash-consed (``pool_index``), and a CPU matcher grows its limits on demand.

Specification:
* one stack, one entry: the live tops are distinct stacks and no two frames below them hold
  the same (node, parent), whatever parses reach a stack (ambiguous grammars);
* the index is a cache: with an index too small to hold the pool (most inserts skipped, slots
  reclaimed after rollbacks and compactions), or filled with garbage, the set of stacks is the
  same as with a large one (a miss costs sharing, never a stack);
* the grammars the old per-closure deduplication failed at 64 stacks now run, and a
  matcher without explicit limits grows past the defaults up to ``max_state_bytes``, then
  raises a GrammarRuntimeError that names the ceiling; explicit limits stay fixed.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from batch_states import compare_states
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar
from gxg.batch import GrammarBatch
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, GrammarRuntimeError
from gxg.runtime import RuntimeLimits
from gxg.testing import grammar_accepts, grammar_accepts_prefix
from gxg.tokenizer import TokenizerInfo, VocabType

BYTES = TokenizerInfo([bytes([b]) for b in range(32, 127)], VocabType.RAW)

# Grammars whose parses multiply while their distinct stacks do not (the fuzz campaign's
# random grammars that stopped at max_stacks=64 before the pool was hash-consed).
AMBIGUOUS = [
    ('root ::= r1 | (root){2,}\nr1 ::= "a"', "a" * 24),
    ('root ::= a b c "!"\na ::= "a"?\nb ::= a a | ""\nc ::= b? "c"*', "aaac" + "c" * 20),
    ('root ::= b* b*\nb ::= "x" | "xx"', "x" * 40),
    ('root ::= (s)* "!"\ns ::= "a" | "a" s | s "a"', "a" * 16 + "!"),
]


def compile_bytes(ebnf: str):
    return GrammarCompiler(BYTES, cache_enabled=False).compile_grammar(ebnf)


def live_frames(state):
    """(node, parent) of every entry below a live top (the frames the tops hang from)."""
    frames = set()
    for top in state.tops[0, : state.num_tops[0]].tolist():
        entry = int(state.pool_parent[0, top])
        while entry >= 0 and entry not in frames:
            frames.add(entry)
            entry = int(state.pool_parent[0, entry])
    return [(int(state.pool_node[0, e]), int(state.pool_parent[0, e])) for e in frames]


@pytest.mark.parametrize("ebnf,text", AMBIGUOUS)
def test_one_stack_one_entry(ebnf, text):
    matcher = GrammarMatcher(compile_bytes(ebnf))
    for i, char in enumerate(text):
        assert matcher.accept_string(char), (text[: i + 1])
        stacks = matcher.state.stacks(0)
        assert len(stacks) == len(set(stacks)), f"duplicate stacks after {text[: i + 1]!r}"
        frames = live_frames(matcher.state)
        assert len(frames) == len(set(frames)), f"duplicate frames after {text[: i + 1]!r}"
    assert matcher.is_completed() == grammar_accepts(zoo_grammar(ebnf), text.encode())


@pytest.mark.parametrize("ebnf,text", AMBIGUOUS)
def test_ambiguous_grammars_run_at_the_default_fixed_limits(ebnf, text):
    """Fixed RuntimeLimits() (no growth): the distinct stacks fit in 64."""
    matcher = GrammarMatcher(compile_bytes(ebnf), limits=RuntimeLimits())
    assert matcher.accept_string(text)
    grammar = zoo_grammar(ebnf)
    assert matcher.is_completed() == grammar_accepts(grammar, text.encode())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.gpu
@pytest.mark.parametrize("pool", [64, 4096])
@pytest.mark.parametrize("ebnf,text", AMBIGUOUS)
def test_cuda_hash_consing_matches_cpu(ebnf, text, pool):
    """The same pool, index and tops as the CPU ops after every step; every third step both
    slots roll back two tokens and take them again (stale index slots), and a pool of 64
    compacts (index rebuilt)."""
    compiled = compile_bytes(ebnf)
    limits = RuntimeLimits(pool_entries=pool, history=8)
    batches = [GrammarBatch(BYTES, device=d, max_batch=2, limits=limits) for d in ("cpu", "cuda")]
    for batch in batches:
        batch.bind(0, compiled)
        batch.bind(1, compiled)
    tokens = [BYTES.decoded_vocab.index(char.encode()) for char in text]
    for i, token in enumerate(tokens):
        for batch in batches:
            batch.accept(torch.tensor([token, token], device=batch.device))
            if i % 3 == 2:
                batch.rollback(torch.tensor([2, 2], device=batch.device))
                for redo in tokens[i - 1: i + 1]:
                    batch.accept(torch.tensor([redo, redo], device=batch.device))
        compare_states(*batches, where=f"after {text[: i + 1]!r}")


def random_walk(matcher, info, rng, steps):
    """Accept random allowed tokens with random rollbacks; yields after every operation."""
    from mask_oracles import mask_to_bool
    from gxg.matcher import allocate_token_bitmask
    row = allocate_token_bitmask(1, info.vocab_size)
    depth = 0
    for _ in range(steps):
        if depth and rng.random() < 0.25:
            back = rng.randint(1, min(depth, 3))
            matcher.rollback(back)
            depth -= back
            yield ("rollback", back)
            continue
        if matcher.is_terminated():
            break
        matcher.fill_next_token_bitmask(row)
        allowed = [t for t in np.flatnonzero(mask_to_bool(row[0].numpy(), info.vocab_size))
                   if t not in matcher.stop_token_ids]
        if not allowed:
            break
        token = int(rng.choice(allowed))
        assert matcher.accept_token(token)
        depth += 1
        yield ("accept", token)


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_a_tiny_index_gives_the_same_stacks(name, ebnf, sentences):
    """Pool of 32 entries (index of 32 slots, compaction every few steps, inserts skipped when
    the probes are full) against the default: same stacks after every accept and rollback."""
    info = make_info(synthetic_vocab(sentences, seed=1))
    compiled = GrammarCompiler(info, cache_enabled=False).compile_grammar(zoo_grammar(ebnf))
    for seed in range(3):
        big = GrammarMatcher(compiled, limits=RuntimeLimits(max_stacks=256))
        tiny = GrammarMatcher(compiled, limits=RuntimeLimits(max_stacks=256, pool_entries=32))
        rng = random.Random(seed)
        for op, value in random_walk(big, info, rng, 40):
            if op == "rollback":
                tiny.rollback(value)
            else:
                try:
                    assert tiny.accept_token(value)
                except GrammarRuntimeError as error:  # a pool of 32 can be too small: say so
                    assert "pool" in str(error)
                    break
            assert set(tiny.state.stacks(0)) == set(big.state.stacks(0)), (seed, op)
            assert tiny.is_completed() == big.is_completed()


def test_the_index_is_checked_not_trusted():
    """Garbage in the index (entries past the pool, other keys' entries) changes no stack: a
    lookup it makes miss only appends a copy (the same stack twice among the tops)."""
    ebnf = 'root ::= (s)* "!"\ns ::= "a" | "a" s | s "a"'
    compiled = compile_bytes(ebnf)
    clean, dirty = GrammarMatcher(compiled), GrammarMatcher(compiled)
    for i, char in enumerate("aaaaaaa!"):
        rng = np.random.default_rng(i)
        index = dirty.state.pool_index[0]
        index[:] = rng.integers(-2, int(dirty.state.pool_size[0]) + 8, size=index.shape)
        assert clean.accept_string(char) and dirty.accept_string(char)
        assert set(clean.state.stacks(0)) == set(dirty.state.stacks(0))
        assert clean.is_completed() == dirty.is_completed()


# ----------------------------------------------------------------------------- growth

# Distinct stacks grow with the input: n + 2 tops after n "a"s (more than 64 from n = 63).
GROWING = 'root ::= s "!"\ns ::= "a" s "b" | "a" s | ""'


def test_without_limits_the_matcher_grows():
    compiled = compile_bytes(GROWING)
    fixed = GrammarMatcher(compiled, limits=RuntimeLimits())
    with pytest.raises(GrammarRuntimeError, match="max_stacks=64"):
        for char in "a" * 100:
            fixed.accept_string(char)
    grows = GrammarMatcher(compiled)
    text = "a" * 100 + "b" * 40 + "!"
    for char in text:
        assert grows.accept_string(char)
    assert grows.is_completed()
    assert grows.state.limits.max_stacks > 64
    grows.rollback(41)
    assert grows.accept_string("b" * 100 + "!") and grows.is_completed()


def test_past_max_state_bytes_the_matcher_moves_to_earley_sets():
    """Past the ceiling the matcher moves to Earley sets (tests/test_earley_sets.py), and the
    step that crossed it is taken there."""
    compiled = compile_bytes(GROWING)
    ceiling = RuntimeLimits().state_bytes() + 1
    matcher = GrammarMatcher(compiled, max_state_bytes=ceiling)
    for char in "a" * 20:
        assert matcher.accept_string(char)
    assert not matcher.on_earley_sets
    assert matcher.accept_string("a" * 60)
    assert matcher.on_earley_sets
    assert matcher.accept_string("b" * 80 + "!")
    assert matcher.is_completed()
    assert not matcher.accept_string("b")


def test_fixed_limits_raise_and_the_failed_step_changes_nothing():
    compiled = compile_bytes(GROWING)
    matcher = GrammarMatcher(compiled, limits=RuntimeLimits())
    for char in "a" * 20:
        assert matcher.accept_string(char)
    with pytest.raises(GrammarRuntimeError, match="max_stacks=64"):
        matcher.accept_string("a" * 60)
    assert matcher.accept_string("b" * 20 + "!")  # the failed step changed nothing
    assert matcher.is_completed()


def test_growth_inside_a_draft_tree_restores_the_state():
    import torch
    compiled = compile_bytes(GROWING)
    matcher = GrammarMatcher(compiled)
    assert matcher.accept_string("a" * 30)
    before = matcher.state.stacks(0)
    a = BYTES.decoded_vocab.index(b"a")
    n = 50  # a chain of 49 "a"s: the stacks pass 64 inside the traversal
    next_token = torch.tensor(list(range(1, n)) + [-1], dtype=torch.int64)
    sibling = torch.full((n,), -1, dtype=torch.int64)
    tokens = torch.tensor([0] + [a] * (n - 1), dtype=torch.int64)
    rows = torch.zeros((n, (BYTES.vocab_size + 31) // 32), dtype=torch.int32)
    assert matcher.traverse_draft_tree(next_token, sibling, tokens, rows)
    assert matcher.state.limits.max_stacks > 64
    assert matcher.state.stacks(0) == before
    assert matcher.accept_string("a" * 40 + "!")
    assert grammar_accepts_prefix(zoo_grammar(GROWING), b"a" * 70)


def test_past_64_stacks_the_mask_walks_all_stacks_at_once_and_equals_the_accepts():
    """More than MAX_STACKS_WALKED live stacks: the fill walks the uncertain tokens once from
    the set of all stacks. Its mask equals each token's accept on the matcher (then rolled
    back), with multi-byte tokens that cross the rules' ends."""
    from mask_oracles import matcher_mask
    from ops.reference import MAX_STACKS_WALKED
    pieces = [b"ab", b"aab", b"bb", b"b!", b"abb!", b"aaaa", b"ba", b"bbb!", b"a!", b"!a"]
    info = TokenizerInfo([bytes([b]) for b in range(32, 127)] + pieces, VocabType.RAW)
    compiled = GrammarCompiler(info, cache_enabled=False).compile_grammar(GROWING)
    matcher = GrammarMatcher(compiled)
    for text in ("a" * 70, "b" * 3):
        assert matcher.accept_string(text)
        assert matcher.state.num_tops[0] > MAX_STACKS_WALKED
        mask = matcher_mask(matcher, info.vocab_size)
        accepted = np.zeros(info.vocab_size, dtype=bool)
        for token in range(info.vocab_size):
            if token in matcher.stop_token_ids:
                accepted[token] = matcher.is_completed()
            elif matcher.accept_token(token):
                accepted[token] = True
                matcher.rollback(1)
        assert accepted[[info.decoded_vocab.index(p) for p in pieces]].any()
        assert (mask == accepted).all(), np.flatnonzero(mask != accepted)


WITH_UNCERTAIN_TOKENS = [z for z in GRAMMAR_ZOO
                         if z[0] in ("nested_arrays", "arithmetic", "lookahead", "json")]


@pytest.mark.parametrize("name,ebnf,sentences", WITH_UNCERTAIN_TOKENS,
                         ids=[z[0] for z in WITH_UNCERTAIN_TOKENS])
def test_a_refused_uncertain_walk_is_decided_by_accepts(name, ebnf, sentences, monkeypatch):
    """When the walk of a node's uncertain tokens from a full stack is refused (too many parse
    stacks), the fill decides those tokens by accepting each on a copy of the state: the same
    masks as the walk's."""
    from gxg.grammar.ir import GrammarError
    from gxg.matcher import allocate_token_bitmask
    from gxg.ops import reference
    info = make_info(synthetic_vocab(sentences, seed=2))
    compiled = GrammarCompiler(info, cache_enabled=False).compile_grammar(zoo_grammar(ebnf))
    walked = GrammarMatcher(compiled)
    steps = [(op, value, None) for op, value in random_walk(walked, info, random.Random(7), 12)]
    walked.reset()
    masks = []
    row = allocate_token_bitmask(1, info.vocab_size)
    for op, value, _ in steps:
        walked.fill_next_token_bitmask(row)
        masks.append(row.clone())
        walked.rollback(value) if op == "rollback" else walked.accept_token(value)

    refused = []

    def refuse(*args):
        refused.append(args)
        raise GrammarError("the grammar is too ambiguous (simulated)")

    monkeypatch.setattr(reference.HostTables, "uncertain_accepted", refuse)
    decided = GrammarMatcher(compiled)
    for (op, value, _), expected in zip(steps, masks):
        decided.fill_next_token_bitmask(row)
        assert torch.equal(row, expected), (name, op, value)
        decided.rollback(value) if op == "rollback" else decided.accept_token(value)
    assert refused  # the fills met uncertain tokens
