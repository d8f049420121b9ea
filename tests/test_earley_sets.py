"""Earley sets (``gxg.ops.earley_sets``): the CPU matcher's parse state once its parallel stacks
pass ``max_state_bytes``.

* On ordinary grammars, an ``EarleyParse`` fed the same steps as the stack runtime gives the
  same masks, the same completion state and distance, the same budget masks, and rolls back
  to the same masks (the stack runtime is the oracle: a different representation).
* On grammars whose distinct stacks are exponential in the input (the fuzz campaign's
  reproducers), the default ``GrammarMatcher`` moves to Earley sets instead of failing, and
  its verdicts and masks agree with the reference recognizer (Earley over the IR).
* What stays a reported limit: fixed ``limits``, and grammars with token budgets.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from grammar_zoo import (EXPONENTIAL_GRAMMARS, GRAMMAR_ZOO, make_info, synthetic_vocab,
                         zoo_grammar)
from mask_oracles import mask_to_bool, matcher_mask, recognizer_mask

from gxg.grammar import Grammar
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, GrammarRuntimeError, allocate_token_bitmask
from gxg.ops import reference
from gxg.ops.earley_sets import EarleyParse
from gxg.runtime import RuntimeLimits
from gxg.testing import Recognizer

# Token-level items over the same vocabulary ({name}: the id of a token, TOKEN_TEXTS): token
# moves, and a budget that only a token move fits (after "x", with 2-6 tokens left)
TOKEN_GRAMMARS = [
    ("token_items", 'root ::= ("[" (Token({ab}, {b}) | [a-c]+) "]")+'),
    ("excluded_tokens", 'root ::= "x" ExcludeToken({close}, {x}) "]"'),
    ("budget_by_token_move", 'root ::= "x" (Token({b}) "]" | "a" "cdefgh")'),
]
TOKEN_TEXTS = {"ab": "ab", "b": "b", "close": "]", "x": "x"}


def token_id(info, text: str) -> int:
    return info.decoded_vocab.index(text.encode())


@pytest.fixture(scope="module")
def zoo_world():
    sentences = [s for _, _, texts in GRAMMAR_ZOO for s in texts] + ["[ab][b][abc]", "xa]"]
    info = make_info(synthetic_vocab(sentences, seed=3))
    compiler = GrammarCompiler(info, cache_enabled=False)
    compiled = {name: compiler.compile_grammar(zoo_grammar(ebnf)) for name, ebnf, _ in GRAMMAR_ZOO}
    ids = {name: token_id(info, text) for name, text in TOKEN_TEXTS.items()}
    for name, ebnf in TOKEN_GRAMMARS:
        compiled[name] = compiler.compile_grammar(Grammar.from_ebnf(ebnf.format(**ids)))
    return info, compiled


def parse_mask(parse: EarleyParse, words: int, remaining=None) -> np.ndarray:
    row = np.zeros(words, dtype=np.int32)
    parse.fill(row)
    if remaining is not None:
        parse.restrict_to_budget(row, remaining)
    return row


def stack_mask(matcher: GrammarMatcher, vocab_size: int, remaining=None) -> np.ndarray:
    bitmask = allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask, remaining_tokens=remaining)
    return bitmask[0].numpy()


@pytest.mark.parametrize("name", [n for n, _, _ in GRAMMAR_ZOO] + [n for n, _ in TOKEN_GRAMMARS])
@pytest.mark.parametrize("seed", range(3))
def test_earley_sets_agree_with_the_stack_runtime(zoo_world, name, seed):
    """A random token walk with rollbacks: after every step the Earley parse and the stack
    matcher have the same mask (with and without a budget), completion and distance."""
    info, compiled = zoo_world
    matcher = GrammarMatcher(compiled[name])
    tables = reference.host_tables(compiled[name], tuple(matcher.stop_token_ids))
    parse = EarleyParse(tables)
    rng = random.Random(seed)
    masks = []
    for _ in range(24):
        mask = stack_mask(matcher, info.vocab_size)
        assert np.array_equal(parse_mask(parse, tables.words), mask)
        assert parse.can_end == matcher.is_completed()
        assert parse.completion_distance() == matcher.completion_distance()
        remaining = rng.randint(1, 6)
        assert np.array_equal(parse_mask(parse, tables.words, remaining),
                              stack_mask(matcher, info.vocab_size, remaining)), remaining
        masks.append(mask)
        allowed = [t for t in np.flatnonzero(mask_to_bool(mask, info.vocab_size)).tolist()
                   if t not in matcher.stop_token_ids]
        if not allowed:
            break
        if len(masks) > 3 and rng.random() < 0.2:
            back = rng.randint(1, 3)
            matcher.rollback(back)
            assert parse.rollback(back)
            del masks[-back:]
            assert np.array_equal(parse_mask(parse, tables.words), masks[-1])
            masks.pop()
            continue
        token = rng.choice(allowed)
        assert matcher.accept_token(token)
        assert parse.accept_bytes(info.decoded_vocab[token], token)
        refused = rng.randrange(info.vocab_size)
        if not mask_to_bool(stack_mask(matcher, info.vocab_size), info.vocab_size)[refused] \
                and refused not in matcher.stop_token_ids:
            assert not parse.accept_bytes(info.decoded_vocab[refused], refused)


@pytest.fixture(scope="module")
def exponential_world():
    strings = ["abcabcab", "xyzxyzxy", "abc中ab中", "ababcc"]
    info = make_info(synthetic_vocab(strings, seed=1))
    compiler = GrammarCompiler(info, cache_enabled=False)
    return info, {name: (Grammar.from_ebnf(ebnf), compiler.compile_grammar(ebnf), alphabet)
                  for name, ebnf, alphabet in EXPONENTIAL_GRAMMARS}


def random_text(rng: random.Random, alphabet: str, length: int) -> bytes:
    return "".join(rng.choice(alphabet) for _ in range(length)).encode()


@pytest.mark.parametrize("name", [n for n, _, _ in EXPONENTIAL_GRAMMARS])
def test_exponential_grammars_run_on_earley_sets(exponential_world, name):
    """Byte by byte, the default matcher's (prefix, sentence) verdicts equal the recognizer's
    past the point where the stacks would have passed the ceiling; so do its masks."""
    info, grammars = exponential_world
    grammar, compiled, alphabet = grammars[name]
    recognizer = Recognizer(grammar)
    rng = random.Random(name)
    for _ in range(3):
        matcher = GrammarMatcher(compiled)
        data = random_text(rng, alphabet, 40)
        consumed = b""
        for byte in data:
            piece = bytes([byte]) if byte < 0x80 else None
            if piece is None:  # a multi-byte character: take it whole
                continue
            accepted = matcher.accept_string(piece)
            assert accepted == recognizer.accepts_prefix(consumed + piece)
            if accepted:
                consumed += piece
                assert matcher.is_completed() == recognizer.accepts(consumed)
        if matcher.on_earley_sets:
            break
    assert matcher.on_earley_sets, "the walk never passed the stack ceiling"
    expected = recognizer_mask(recognizer, consumed, info, matcher.stop_token_ids)
    assert np.array_equal(matcher_mask(matcher, info.vocab_size), expected)


def on_earley_sets(exponential_world, name="nested_repeats", length=24):
    info, grammars = exponential_world
    grammar, compiled, alphabet = grammars[name]
    matcher = GrammarMatcher(compiled)
    data = random_text(random.Random(7), alphabet, length)
    assert matcher.accept_string(data) and matcher.on_earley_sets
    return info, grammar, matcher, data


def test_tokens_rollback_and_fork_on_earley_sets(exponential_world):
    info, grammar, matcher, data = on_earley_sets(exponential_world)
    recognizer = Recognizer(grammar)
    before = matcher_mask(matcher, info.vocab_size)
    twin = matcher.fork()
    tokens = [t for t in np.flatnonzero(before).tolist() if t not in matcher.stop_token_ids]
    taken = b""
    for token in tokens[:3]:
        assert twin.accept_token(token)
        taken += info.decoded_vocab[token]
        assert np.array_equal(matcher_mask(twin, info.vocab_size),
                              recognizer_mask(recognizer, data + taken, info,
                                              twin.stop_token_ids))
    assert np.array_equal(matcher_mask(matcher, info.vocab_size), before)  # fork: apart
    twin.rollback(3)
    assert np.array_equal(matcher_mask(twin, info.vocab_size), before)
    with pytest.raises(RuntimeError, match="cannot roll back 2 tokens"):
        twin.rollback(2)  # accept_string was one step: only one in the history
    assert twin.is_completed() == recognizer.accepts(data)
    stop = matcher.stop_token_ids[0]
    if matcher.is_completed():
        assert matcher.accept_token(stop) and matcher.is_terminated()
        matcher.rollback(1)
        assert not matcher.is_terminated()


def test_draft_tree_and_jump_forward_on_earley_sets(exponential_world):
    info, _, matcher, _ = on_earley_sets(exponential_world)
    allowed = [t for t in np.flatnonzero(matcher_mask(matcher, info.vocab_size)).tolist()
               if t not in matcher.stop_token_ids]
    first, second = allowed[0], allowed[-1]
    # root -> first -> second, and root -> second
    next_token = torch.tensor([1, 2, -1, -1])
    next_sibling = torch.tensor([-1, 3, -1, -1])
    draft = torch.tensor([0, first, second, second])
    rows = torch.zeros(4, (info.vocab_size + 31) // 32, dtype=torch.int32)
    assert matcher.traverse_draft_tree(next_token, next_sibling, draft, rows)
    expected = []
    for path in ([], [first], [first, second], [second]):
        probe = matcher.fork()
        if all(probe.accept_token(t) for t in path):
            expected.append(matcher_mask(probe, info.vocab_size))
        else:
            expected.append(np.zeros(info.vocab_size, dtype=bool))
    for node in range(4):
        assert np.array_equal(mask_to_bool(rows[node].numpy(), info.vocab_size),
                              expected[node]), node
    assert matcher.find_jump_forward_string() == ""  # [a-c] next: nothing is forced
    assert matcher.completion_distance() == 0


def test_a_matcher_on_earley_sets_has_no_stack_state(exponential_world):
    _, _, matcher, _ = on_earley_sets(exponential_world)
    with pytest.raises(GrammarRuntimeError, match="runs on Earley sets"):
        matcher.state
    matcher.reset()
    assert not matcher.on_earley_sets and matcher.state.num_tops[0] > 0


def test_fixed_limits_still_raise(exponential_world):
    info, grammars = exponential_world
    _, compiled, _ = grammars["nested_repeats"]
    matcher = GrammarMatcher(compiled, limits=RuntimeLimits())
    with pytest.raises(GrammarRuntimeError, match="max_stacks=64"):
        matcher.accept_string(b"abcabcabcabcabcabcabcabc")
    assert not matcher.on_earley_sets


def test_token_budgets_do_not_run_on_earley_sets(exponential_world):
    info, _ = exponential_world
    compiled = GrammarCompiler(info, cache_enabled=False).compile_grammar(
        'root ::= ((([a-c] root)){0,2}){1,3} | "x" t\nt[max_tokens=3] ::= "y"+')
    matcher = GrammarMatcher(compiled)
    with pytest.raises(GrammarRuntimeError, match="token budgets does not run on Earley sets"):
        matcher.accept_string(b"abcabcabcabcabcabcabcabc")
