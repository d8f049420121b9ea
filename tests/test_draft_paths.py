"""``xg::draft_paths``: every draft-tree node's tokens from the root, its depth and its reach.

Specification: for XGrammar's arrays (first child, next sibling, token per node; node 0 the
root), row b of the result gives for node i the tokens on the path root -> i (root excluded,
left-aligned, zero after), the path's length, and whether first-child / next-sibling links from
the root reach i — what a plain walk of the tree (the oracle below) finds. The reference
(``ops/draft_paths.py``), the Triton kernel (under TRITON_INTERPRET=1 without a GPU) and the op
on CUDA all equal the oracle on random trees; links outside [-1, N) count as -1; a malformed
tree (a cycle, a node named twice) returns finite rows of the right shapes, with no hang.
"""
from __future__ import annotations

import os
import random

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

import gxg  # noqa: E402,F401  (registers torch.ops.xg)
from gxg.ops.draft_paths import draft_paths_reference  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])]


def triton_paths(*arrays):
    pytest.importorskip("triton")
    from gxg.ops.draft_paths_triton import draft_paths_triton
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return [t.cpu() for t in draft_paths_triton(*(a.to(device) for a in arrays))]


IMPLEMENTATIONS = {"reference": draft_paths_reference, "triton": triton_paths,
                   "op": lambda *a: torch.ops.xg.draft_paths(*a)}


def oracle(first, sibling, tokens):
    """A walk from the root: (paths, depth, reached) of one row, as lists."""
    n = len(tokens)
    paths, depth, reached = [[0] * n for _ in range(n)], [0] * n, [False] * n
    reached[0] = True
    pending = [(0, [])]
    while pending:
        node, path = pending.pop()
        child = first[node]
        while child >= 0:
            child_path = path + [tokens[child]]
            reached[child], depth[child] = True, len(child_path)
            paths[child][:len(child_path)] = child_path
            pending.append((child, child_path))
            child = sibling[child]
    return paths, depth, reached


def random_tree(n: int, rng: random.Random):
    """A tree on nodes 0..n-1 (node 0 the root) in XGrammar's arrays; children are numbered
    after their parents or in any order, and some subtrees are cut off (unreached)."""
    first, sibling = [-1] * n, [-1] * n
    order = list(range(1, n))
    if rng.random() < 0.5:
        rng.shuffle(order)
    placed = [0]
    for node in order:
        parent = rng.choice(placed)
        if first[parent] < 0:
            first[parent] = node
        else:
            last = first[parent]
            while sibling[last] >= 0:
                last = sibling[last]
            sibling[last] = node
        placed.append(node)
    if n > 1 and rng.random() < 0.3:
        first[rng.randrange(n)] = -1   # a cut: that node's children are unreached
    return first, sibling


def as_tensors(rows):
    return [torch.tensor([row[k] for row in rows], dtype=torch.int64) for k in range(3)]


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
def test_paths_of_a_small_tree(implementation):
    """root -> 1 (t=5) -> 3 (t=7); root -> 2 (t=6, 1's sibling); node 4 unreached."""
    paths, depth, reached = IMPLEMENTATIONS[implementation](
        torch.tensor([[1, 3, -1, -1, -1]]), torch.tensor([[-1, 2, -1, -1, -1]]),
        torch.tensor([[9, 5, 6, 7, 8]]))
    assert depth.tolist() == [[0, 1, 1, 2, 0]]
    assert reached.tolist() == [[True, True, True, True, False]]
    assert paths[0].tolist() == [[0] * 5, [5, 0, 0, 0, 0], [6, 0, 0, 0, 0], [5, 7, 0, 0, 0],
                                 [0] * 5]


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
@pytest.mark.parametrize("seed", range(6))
def test_random_trees_equal_the_walk(implementation, seed):
    rng = random.Random(seed)
    n = rng.choice([1, 2, 3, 5, 9, 16, 33])
    rows = []
    for _ in range(rng.choice([1, 4])):
        first, sibling = random_tree(n, rng)
        rows.append((first, sibling, [rng.randrange(100_000) for _ in range(n)]))
    paths, depth, reached = IMPLEMENTATIONS[implementation](*as_tensors(rows))
    for b, row in enumerate(rows):
        want_paths, want_depth, want_reached = oracle(*row)
        assert paths[b].tolist() == want_paths
        assert depth[b].tolist() == want_depth
        assert reached[b].tolist() == want_reached


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
def test_links_out_of_range_count_as_none(implementation):
    first, sibling, tokens = [3, 9, -7, -1], [-1, 4, -1, 2], [0, 1, 2, 3]
    paths, depth, reached = IMPLEMENTATIONS[implementation](*as_tensors([(first, sibling,
                                                                          tokens)]))
    want = oracle([3, -1, -1, -1], [-1, -1, -1, 2], tokens)
    assert (paths[0].tolist(), depth[0].tolist(), reached[0].tolist()) == want


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
@pytest.mark.parametrize("first,sibling", [
    ([1, 2, 1], [-1, -1, -1]),          # a cycle 1 -> 2 -> 1
    ([1, -1, -1], [-1, 1, -1]),         # 1 is its own sibling
    ([1, 2, -1], [2, -1, -1]),          # 2 named twice
])
def test_malformed_trees_give_finite_rows(implementation, first, sibling):
    paths, depth, reached = IMPLEMENTATIONS[implementation](*as_tensors([(first, sibling,
                                                                          [0, 5, 6])]))
    assert paths.shape == (1, 3, 3) and depth.shape == (1, 3) and reached.shape == (1, 3)
    assert reached[0, 0] and depth[0, 0] == 0
    assert ((depth >= 0) & (depth <= 3)).all()


def test_trees_wider_than_the_kernel_take_the_reference():
    pytest.importorskip("triton")
    from gxg.ops.draft_paths_triton import MAX_TRITON_NODES
    n = MAX_TRITON_NODES + 3
    first, sibling = random_tree(n, random.Random(1))
    row = (first, sibling, list(range(n)))
    paths, depth, reached = triton_paths(*as_tensors([row]))
    want_paths, want_depth, want_reached = oracle(*row)
    assert depth[0].tolist() == want_depth and reached[0].tolist() == want_reached
    assert paths[0].tolist() == want_paths


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arrays_are_refused(device):
    good = torch.zeros((2, 3), dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match="next_token"):
        torch.ops.xg.draft_paths(good[:, :2], good, good)
    with pytest.raises(ValueError, match="tokens"):
        torch.ops.xg.draft_paths(good, good, good.to(torch.int32))
