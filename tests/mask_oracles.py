"""Oracles for token masks, shared by the matcher tests.

* ``brute_force_mask``: every sorted token walked from every live stack of a matcher (no mask
  cache involved), plus the stop tokens when the root can end.
* ``recognizer_mask``: from the reference recognizer alone (Earley over the IR, independent of
  the compiler): token t is allowed iff ``consumed + bytes(t)`` is a prefix of the language.
"""
from __future__ import annotations

import numpy as np

from gxg.compiler.stack_walk import StackWalker
from gxg.compiler.vocab_walk import DEAD, VocabularyWalk
from gxg.grammar.ir import GrammarError


def mask_to_bool(row, vocab_size: int) -> np.ndarray:
    words = np.asarray(row, dtype=np.int32)
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_size].astype(bool)


def matcher_mask(matcher, vocab_size: int) -> np.ndarray:
    """A gxg matcher's next-token mask, bool [vocab_size]."""
    from gxg.matcher import allocate_token_bitmask
    bitmask = allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return mask_to_bool(bitmask[0].numpy(), vocab_size)


class OracleRefused(Exception):
    """The oracle's own walk hit its parse-stack limit (a grammar too ambiguous for it): there
    is nothing to compare against, which says nothing about gxg's answer."""


def brute_force_mask(matcher) -> np.ndarray:
    """Every token walked from every live stack (raises OracleRefused past the walker's
    parse-stack limit)."""
    try:
        return _brute_force_mask(matcher)
    except GrammarError as refused:
        raise OracleRefused(str(refused)) from refused


def _brute_force_mask(matcher) -> np.ndarray:
    compiled = matcher.compiled_grammar
    info = compiled.tokenizer_info
    state = matcher.state
    allowed = np.zeros(info.vocab_size, dtype=bool)
    walk = VocabularyWalk(StackWalker(compiled.automaton, escape_bottom=False),
                          info.token_bytes, info.token_offsets)
    all_tokens = np.arange(len(info.sorted_token_ids))
    for stack in state.stacks(0):
        start = walk.intern(frozenset({(stack, False, None)}))
        final = walk.walk_pairs(np.full(len(all_tokens), start, np.int32), all_tokens)
        allowed[info.sorted_token_ids[final != DEAD]] = True
    if state.can_end[0]:
        allowed[matcher.stop_token_ids] = True
    return allowed


def recognizer_mask(recognizer, consumed: bytes, info, stop_token_ids) -> np.ndarray:
    allowed = np.zeros(info.vocab_size, dtype=bool)
    special = set(info.special_token_ids)
    stops = set(stop_token_ids)
    after_consumed = recognizer.start()  # read once; each token continues from a copy
    after_consumed.feed_bytes(consumed)
    for token_id, data in enumerate(info.decoded_vocab):
        if token_id in stops or token_id in special or not data:
            continue
        allowed[token_id] = after_consumed.copy().feed_bytes(data)
    if after_consumed.accepting:
        allowed[list(stops)] = True
    return allowed


def random_bitmask(rows: int, words: int, generator):
    """An int32 bitmask [rows, words] mixing all-zero, all-one and random words (the three
    cases the apply and sample kernels branch on)."""
    import torch
    kinds = torch.randint(0, 3, (rows, words), generator=generator)
    mixed = torch.randint(-2**31, 2**31 - 1, (rows, words), generator=generator,
                          dtype=torch.int64).to(torch.int32)
    return torch.where(kinds == 0, torch.zeros_like(mixed),
                       torch.where(kinds == 1, torch.full_like(mixed, -1), mixed))


def shortest_completion(walker: StackWalker, config, limit: int = 64):
    """Fewest bytes after which ``config`` (a full-stack configuration) can end, by breadth-first
    search over configurations one byte at a time (independent of the compiler's distance
    tables); None if none within ``limit`` bytes."""
    frontier, seen = {config}, {config}
    for distance in range(limit + 1):
        if any(StackWalker.can_end(c) for c in frontier):
            return distance
        following = set()
        for c in frontier:
            for byte in range(256):
                stepped = walker.step(c, byte)
                if stepped and stepped not in seen:
                    seen.add(stepped)
                    following.add(stepped)
        frontier = following
    return None


def budget_mask(matcher, remaining: int) -> np.ndarray:
    """The mask under a token budget, from its definition: the allowed tokens after which some
    completion of at most ``remaining - 1`` bytes exists (stop tokens: when allowed), or the
    grammar's mask when no token qualifies."""
    compiled = matcher.compiled_grammar
    info = compiled.tokenizer_info
    allowed = brute_force_mask(matcher)
    walker = StackWalker(compiled.automaton, escape_bottom=False)
    start = frozenset((stack, False, None) for stack in matcher.state.stacks(0))
    fits = np.zeros_like(allowed)
    stops = set(matcher.stop_token_ids)
    for token_id in np.flatnonzero(allowed).tolist():
        if token_id in stops:
            fits[token_id] = True
            continue
        after = walker.walk(start, info.decoded_vocab[token_id])
        distance = shortest_completion(walker, after, limit=max(remaining - 1, 0))
        fits[token_id] = distance is not None and distance <= remaining - 1
    return fits if fits.any() else allowed
