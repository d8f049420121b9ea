"""Draft trees for the speculative-decoding tests, and their sequential oracle.

* ``random_tree(rng, allowed, true_path, size, width)``: XGrammar's three arrays for a tree of
  ``size`` nodes grown as a drafter would: node 0 is the root; each node gets up to ``width``
  children whose tokens are mostly allowed ones (``allowed(path)``: the token ids the grammar
  allows after the path's tokens), sometimes the next token of a real document
  (``true_path``), sometimes a random id (a rejected draft);
* ``grow_trees(compiled, vocab_size, walks, seed)``: (prefix, tree) pairs, a tree grown from a
  random prefix of a real token walk (``spell(info, sentences)``: sentences as token ids);
* ``qwen_json_walks()``: the builtin JSON grammar and two documents' token walks, Qwen's
  vocabulary;
* ``sequential_masks(matcher, tree, vocab_size)``: what ``traverse_draft_tree`` must write, by
  brute force: for every node, a fresh fork accepts the path's tokens one by one and fills;
  ``None`` where the traversal must leave the row alone (below a rejected node).
"""
from __future__ import annotations

import random
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

import gxg
from mask_oracles import mask_to_bool


def random_tree(rng, allowed: Callable[[List[int]], Sequence[int]], true_path: Sequence[int],
                size: int, width: int, vocab_size: int):
    first, sibling, tokens = [-1], [-1], [int(true_path[0]) if len(true_path) else 0]
    paths = {0: []}
    frontier = [0]
    while len(tokens) < size and frontier:
        parent = frontier.pop(0)
        path = paths[parent]
        options = list(allowed(path))
        previous = -1
        for _ in range(rng.randint(1, width)):
            if len(tokens) >= size:
                break
            roll = rng.random()
            if roll < 0.3 and len(path) < len(true_path):
                token = int(true_path[len(path)])
            elif roll < 0.85 and options:
                token = int(rng.choice(options))
            else:
                token = rng.randrange(vocab_size)
            node = len(tokens)
            tokens.append(token)
            first.append(-1)
            sibling.append(-1)
            paths[node] = path + [token]
            if previous < 0:
                first[parent] = node
            else:
                sibling[previous] = node
            previous = node
            frontier.append(node)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.int64)  # noqa: E731
    return as_tensor(first), as_tensor(sibling), as_tensor(tokens)


def _children(first, sibling, node):
    child = int(first[node])
    while child != -1:
        yield child
        child = int(sibling[child])


def sequential_masks(matcher, tree, vocab_size: int) -> List[Optional[np.ndarray]]:
    first, sibling, tokens = (t.tolist() for t in tree)
    rows: List[Optional[np.ndarray]] = [None] * len(tokens)
    words = (vocab_size + 31) // 32

    def fill(m) -> np.ndarray:
        mask = gxg.allocate_token_bitmask(1, vocab_size)
        m.fill_next_token_bitmask(mask)
        return mask[0].numpy().copy()

    root = matcher.fork()
    rows[0] = np.zeros(words, np.int32) if root.is_terminated() else fill(root)
    pending = [(0, [])] if not root.is_terminated() else []
    while pending:
        node, path = pending.pop()
        for child in _children(first, sibling, node):
            m = matcher.fork()
            ok = all(0 <= t < vocab_size and not m.is_terminated() and m.accept_token(t)
                     for t in path + [tokens[child]])
            if ok and not m.is_terminated():
                rows[child] = fill(m)
                pending.append((child, path + [tokens[child]]))
            else:
                rows[child] = np.zeros(words, np.int32)
    return rows


def grow_trees(compiled, vocab_size, texts_as_tokens, seed, count=6, size=24, width=3):
    """(prefix tokens, tree) pairs: a prefix of a real walk, a tree grown from its state."""
    rng = random.Random(seed)
    for _ in range(count):
        walk = rng.choice(texts_as_tokens)
        cut = rng.randint(0, len(walk))
        prefix, rest = walk[:cut], walk[cut:]
        base = gxg.GrammarMatcher(compiled)
        assert all(base.accept_token(t) for t in prefix)

        def allowed(path, base=base):
            m = base.fork()
            if not all(0 <= t < vocab_size and not m.is_terminated() and m.accept_token(t)
                       for t in path) or m.is_terminated():
                return []
            mask = gxg.allocate_token_bitmask(1, vocab_size)
            m.fill_next_token_bitmask(mask)
            return np.flatnonzero(mask_to_bool(mask[0].numpy(), vocab_size)).tolist()

        yield prefix, random_tree(rng, allowed, rest, size, width, vocab_size)


def spell(info, sentences):
    """Each sentence as token ids, greedily longest-first over the synthetic vocabulary."""
    index = {token: i for i, token in enumerate(info.decoded_vocab)
             if token and i not in info.stop_token_ids}
    longest = max(map(len, index))
    walks = []
    for sentence in sentences:
        data, out, i = sentence.encode(), [], 0
        while i < len(data):
            j = next(j for j in range(min(len(data), i + longest), i, -1) if data[i:j] in index)
            out.append(index[data[i:j]])
            i = j
        walks.append(out)
    return walks


def qwen_json_walks():
    """(info, tokenizer, the builtin JSON grammar compiled, token walks of two JSON documents)
    with Qwen's vocabulary (the test is skipped without it)."""
    from grammar_zoo import info_or_skip
    from gxg import vocabularies
    from gxg.grammar_compiler import GrammarCompiler
    info = info_or_skip("qwen")
    tokenizer = vocabularies.qwen_tokenizer()
    compiled = GrammarCompiler(info).compile_builtin_json_grammar()
    documents = ['{"name": "gxg", "tags": ["gpu", "grammar"], "score": -1.5e-3, "ok": true}',
                 '[{"é": "中文 😀\\n"}, [], {}, 0, 12.0, null]']
    return info, tokenizer, compiled, [tokenizer.encode(d, add_special_tokens=False)
                                       for d in documents]
