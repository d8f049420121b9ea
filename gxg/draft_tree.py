"""Draft token trees of speculative decoding, in XGrammar's array form.

In:  ``retrieve_next_token``, ``retrieve_next_sibling`` and ``draft_tokens`` (1-D int64 tensors
     of one length N): node i's first child is ``retrieve_next_token[i]`` and its next sibling
     ``retrieve_next_sibling[i]`` (-1: none); ``draft_tokens[i]`` is the token that leads from
     node i's parent to node i (node 0, the root, stands for the current state: its token is
     not consumed).
Out: ``DraftTree``: the children of every node in sibling order and the tokens, checked: node 0
     is the root (no parent, no sibling), every other node has at most one parent, every index
     is in [-1, N). A bad tree is a RuntimeError naming what is wrong (XGrammar's exception
     type for these checks), never a loop or a silently partial traversal. Nodes that no path
     from the root reaches are allowed and left alone by traversals.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

import torch


@dataclass(frozen=True)
class DraftTree:
    children: List[List[int]]   # per node, its children in sibling order
    tokens: List[int]           # per node, its draft token

    @property
    def num_nodes(self) -> int:
        return len(self.tokens)


def _index_vector(name: str, value, length=None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.dim() != 1 or value.dtype != torch.int64:
        raise RuntimeError(f"{name} must be a 1-D int64 tensor, got "
                           f"{getattr(value, 'dtype', type(value).__name__)} of shape "
                           f"{tuple(getattr(value, 'shape', ()))}")
    if length is not None and value.shape[0] != length:
        raise RuntimeError(f"{name} has {value.shape[0]} entries, retrieve_next_token has "
                           f"{length}: one per draft node")
    return value


def draft_tree(retrieve_next_token: torch.Tensor, retrieve_next_sibling: torch.Tensor,
               draft_tokens: torch.Tensor) -> DraftTree:
    """The checked tree of XGrammar's three arrays (see the module docstring)."""
    _index_vector("retrieve_next_token", retrieve_next_token)
    n = retrieve_next_token.shape[0]
    if n == 0:
        raise RuntimeError("a draft tree needs at least its root (node 0)")
    _index_vector("retrieve_next_sibling", retrieve_next_sibling, n)
    _index_vector("draft_tokens", draft_tokens, n)
    first = retrieve_next_token.tolist()
    sibling = retrieve_next_sibling.tolist()
    for name, values in (("retrieve_next_token", first), ("retrieve_next_sibling", sibling)):
        bad = next((i for i, v in enumerate(values) if not -1 <= v < n), None)
        if bad is not None:
            raise RuntimeError(f"{name}[{bad}] = {values[bad]} is not a node index in "
                               f"[-1, {n})")
    if sibling[0] != -1:
        raise RuntimeError("the root (node 0) cannot have a sibling: "
                           f"retrieve_next_sibling[0] = {sibling[0]}")
    parent = [-1] * n
    children: List[List[int]] = [[] for _ in range(n)]
    for node in range(n):
        child = first[node]
        while child != -1:
            if child == 0 or parent[child] != -1:
                raise RuntimeError(f"node {child} has more than one parent (or is the root) in "
                                   "the draft tree: each node is reached once")
            parent[child] = node
            children[node].append(child)
            child = sibling[child]
    return DraftTree(children, draft_tokens.tolist())
