"""Test helpers: gxg next to XGrammar 0.2.8 (when it is installed) on the same grammar, given as
EBNF text ("ebnf") or a structural tag's JSON text ("structural_tag").

* ``gxg_accepts`` / ``xgr_accepts``: does the grammar accept a whole string? (compiled once
  each over an empty vocabulary: acceptance is byte-level, no token is needed);
* ``compiled_pair`` and ``mask_pair``: both engines compiled over the same synthetic
  vocabulary of whole UTF-8 tokens, and one step's masks of a matcher of each, for walks that
  compare them token by token;
* ``walk_against_xgrammar``: such a walk, random, with rollbacks.
"""
from __future__ import annotations

import functools
from typing import List, Optional, Sequence, Tuple

import numpy as np
import pytest

from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from gxg.tokenizer import TokenizerInfo, VocabType
from grammar_zoo import synthetic_vocab
from mask_oracles import mask_to_bool

try:
    import xgrammar
except ImportError:  # pragma: no cover - the comparison tests skip
    xgrammar = None

needs_xgrammar = pytest.mark.skipif(xgrammar is None, reason="xgrammar is not installed")

_COMPILE = {"ebnf": "compile_grammar", "structural_tag": "compile_structural_tag"}


@functools.lru_cache(maxsize=None)
def _gxg_compiler() -> GrammarCompiler:
    return GrammarCompiler(TokenizerInfo([]), cache_enabled=False)


@functools.lru_cache(maxsize=None)
def gxg_compiled(kind: str, source: str):
    return getattr(_gxg_compiler(), _COMPILE[kind])(source)


def gxg_accepts(kind: str, source: str, string: str) -> bool:
    matcher = GrammarMatcher(gxg_compiled(kind, source), terminate_without_stop_token=True)
    return matcher.accept_string(string) and matcher.is_terminated()


@functools.lru_cache(maxsize=None)
def _xgr_compiler():
    return xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([]), cache_enabled=False)


@functools.lru_cache(maxsize=None)
def xgr_compiled(kind: str, source: str):
    return getattr(_xgr_compiler(), _COMPILE[kind])(source)


def xgr_accepts(kind: str, source: str, string: str) -> bool:
    matcher = xgrammar.GrammarMatcher(xgr_compiled(kind, source),
                                      terminate_without_stop_token=True)
    return matcher.accept_string(string) and matcher.is_terminated()


def is_utf8(token: bytes) -> bool:
    try:
        token.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def compiled_pair(kind: str, source: str, sentences: Sequence[str], seed: int):
    """(ours, theirs, vocab, stop id, vocab size): the grammar compiled by both engines over
    ``synthetic_vocab(sentences, seed)`` less its tokens that are not whole UTF-8 (XGrammar's
    TagDispatch free text also takes bytes that are not UTF-8, gxg's does not: the one
    deliberate difference, gxg/grammar/macros.py); the last token stops, 3 padding ids."""
    vocab: List[bytes] = [t for t in synthetic_vocab(sentences, seed=seed) if is_utf8(t)]
    stop_id, vocab_size = len(vocab) - 1, len(vocab) + 3
    info = TokenizerInfo(vocab, VocabType.RAW, vocab_size=vocab_size, stop_token_ids=[stop_id])
    xinfo = xgrammar.TokenizerInfo(vocab, xgrammar.VocabType.RAW, vocab_size=vocab_size,
                                   stop_token_ids=[stop_id])
    ours = getattr(GrammarCompiler(info, cache_enabled=False), _COMPILE[kind])(source)
    theirs = getattr(xgrammar.GrammarCompiler(xinfo, cache_enabled=False), _COMPILE[kind])(source)
    return ours, theirs, vocab, stop_id, vocab_size


def mask_pair(ours: GrammarMatcher, theirs, vocab_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """The next-token masks of a gxg matcher and an XGrammar matcher, as bool arrays."""
    a = allocate_token_bitmask(1, vocab_size)
    b = xgrammar.allocate_token_bitmask(1, vocab_size)
    ours.fill_next_token_bitmask(a)
    theirs.fill_next_token_bitmask(b)
    return mask_to_bool(a[0].numpy(), vocab_size), mask_to_bool(b[0].numpy(), vocab_size)


def walk_against_xgrammar(ours: GrammarMatcher, theirs, vocab_size: int, rng, steps: int,
                          padding_from: Optional[int] = None) -> None:
    """At each step the two masks are equal; then both matchers take the same move: mostly an
    allowed token, sometimes any token (the verdicts must agree), sometimes a rollback. Ids
    from ``padding_from`` on are skipped (both engines reject them, XGrammar with a warning).
    Stops when ours terminates."""
    history = 0
    for step in range(steps):
        mine, other = mask_pair(ours, theirs, vocab_size)
        np.testing.assert_array_equal(mine, other, err_msg=f"step {step}")
        if rng.random() < 0.15 and history:
            count = rng.randint(1, history)
            ours.rollback(count)
            theirs.rollback(count)
            history -= count
            continue
        allowed = np.flatnonzero(mine)
        token = int(rng.choice(allowed)) if len(allowed) and rng.random() < 0.9 else \
            rng.randrange(vocab_size)
        if padding_from is not None and token >= padding_from:
            continue
        accepted = ours.accept_token(token)
        assert accepted == theirs.accept_token(token), (step, token)
        history += accepted
        if ours.is_terminated():
            return
