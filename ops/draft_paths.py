"""Draft-tree paths: every node's tokens from the root, its depth and whether the root reaches
it — the reference (CPU path of ``xg::draft_paths``; the Triton kernel beside it,
``ops/draft_paths_triton.py``, must equal it).

In:  ``next_token``, ``next_sibling``, ``tokens``: int64 [B, N], XGrammar's draft-tree arrays
     per row (``gxg.draft_tree``: node 0 is the root; ``next_token[i]`` is i's first child,
     ``next_sibling[i]`` its next sibling, -1 for none).
Out: ``paths`` int64 [B, N, N] (node i's tokens from the root, exclusive, to i, inclusive,
     left-aligned; zero after them), ``depth`` int64 [B, N] (how many), ``reached`` bool [B, N]
     (a chain of first-child / next-sibling links from the root reaches i; depth 0 and an empty
     path where not).

Semantics: for a tree (every node but the root named by exactly one link, no cycles) both
functions compute the above. The arrays are trusted as a drafter writes them: a link outside
[-1, N) counts as -1 in both, and a malformed tree (cycles, a node named twice) gives rows that
are unspecified but finite — neither function reads or writes out of bounds or loops forever
(both run a fixed N rounds).

Reference ``draft_paths_reference``: torch ops on any device, N rounds of gathers (a node's
parent is the node that names it as first child, or its left sibling's parent, passed one link
per round; then N rounds of depth and reach; then the tokens up each path).
"""
from __future__ import annotations

from typing import Tuple

import torch


def _valid_links(links: torch.Tensor, n: int) -> torch.Tensor:
    return torch.where((links >= 0) & (links < n), links, -1)


def draft_paths_reference(next_token: torch.Tensor, next_sibling: torch.Tensor,
                          tokens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, n = tokens.shape
    device = tokens.device
    next_token, next_sibling = _valid_links(next_token, n), _valid_links(next_sibling, n)
    rows = torch.arange(batch, device=device).unsqueeze(1).expand(batch, n)
    nodes = torch.arange(n, device=device).unsqueeze(0).expand(batch, n)
    parent = torch.full((batch, n + 1), -1, dtype=torch.int64, device=device)
    # a first child's parent is the node that names it; a next sibling's parent is its left
    # sibling's, passed one link further per round (column n collects the -1 links)
    first = torch.where(next_token >= 0, next_token, n)
    parent[rows, first] = torch.where(next_token >= 0, nodes, -1)
    sibling = torch.where(next_sibling >= 0, next_sibling, n)
    for _ in range(n):
        parent.scatter_(1, sibling, torch.gather(parent, 1, nodes))
    parent = parent[:, :n].clone()
    parent[:, 0] = -1
    # depth and reach: N rounds of following parents up
    reached = torch.zeros((batch, n), dtype=torch.bool, device=device)
    reached[:, 0] = True
    depth = torch.zeros((batch, n), dtype=torch.int64, device=device)
    safe_parent = parent.clamp(min=0)
    for _ in range(n):
        up_reached = torch.gather(reached, 1, safe_parent) & (parent >= 0)
        reached = reached | up_reached
        depth = torch.where(parent >= 0, torch.gather(depth, 1, safe_parent) + 1, depth)
    depth = torch.where(reached, depth, 0)
    # tokens up the path: the node at distance k above i sits at position depth[i] - 1 - k
    paths = torch.zeros((batch, n, n), dtype=torch.int64, device=device)
    current = nodes.clone()
    for k in range(n):
        live = reached & (k < depth)
        position = (depth - 1 - k).clamp(min=0)
        token = torch.gather(tokens, 1, current)
        paths.scatter_(2, position.unsqueeze(2),
                       torch.where(live, token, torch.gather(paths, 2, position.unsqueeze(2))
                                   .squeeze(2)).unsqueeze(2))
        current = torch.gather(safe_parent, 1, current)
    return paths, depth, reached
