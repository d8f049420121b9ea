"""Draft-tree masks on the batch's device: the mask of every node of every slot's draft tree.

In:  a ``GrammarBatch`` (B slots) and, per slot, a draft tree of N nodes in XGrammar's arrays
     (``retrieve_next_token``, ``retrieve_next_sibling``, ``draft_tokens``: int64 [B, N], the
     layout ``gxg.draft_tree`` describes for one slot; node 0 is the slot's current state).
Out: ``DraftMasks(batch, num_nodes).fill(...)``: bitmask rows [B, N, W] (int32): row (b, i) is
     the mask after the tokens on the path from the root to node i (at the root, the current
     mask), and zero when a token on that path is rejected, when the slot has terminated
     there (a stop token on the path, or before the draft), or when node i is not reached
     from the root; an unbound slot allows everything at every reached node. The batch's
     state is not changed; the batch's token budgets do not narrow these rows. The arrays are
     trusted as a drafter writes them (a tree: no node
     with two parents, indices in [-1, N)); ``gxg.draft_tree`` checks one on the host.

How: the ops the batch already has, at fixed shapes and without reading anything back to the
host (meant for a CUDA graph; no test captures it yet, and its CUDA test has not run yet): a draft batch of B × N slots sharing the batch's arena takes N copies
of each slot's state (``GrammarBatch.copy_slots_from``), every draft slot accepts its node's
root-to-node path in one ``accept_tokens`` launch, one fill writes the B × N rows, and the rows
whose path was not accepted in full, or that terminated, are zeroed. The paths come from the
arrays by N rounds of gathers (parents, depths, then the tokens up the path). The oracle is
``GrammarMatcher.traverse_draft_tree`` (XGrammar 0.2.8's semantics) with one difference: below a
rejected or terminating node XGrammar leaves the rows as they were, these rows are zero.

Cost: the copies (a slot's state, the pool included, times N), the path accepts (depth ≤ N
tokens per draft slot) and one fill of B × N rows. A kernel that walks each tree depth first
with the slot's own pool as scratch would avoid the copies (gxg/DESIGN.md).
"""
from __future__ import annotations

from typing import Tuple

import torch

from gxg import layout
from gxg.batch import GrammarBatch


def draft_paths(next_token: torch.Tensor, next_sibling: torch.Tensor, tokens: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(paths int64 [B, N, N], depth int64 [B, N], reached bool [B, N]): node i's tokens from
    the root (exclusive) to i (inclusive) left-aligned in ``paths[b, i]``, their count, and
    whether a chain of first-child / next-sibling links from the root reaches i. Device ops
    only; N rounds each (a tree's depth and a sibling chain are at most N)."""
    batch, n = tokens.shape
    rows = torch.arange(batch, device=tokens.device).unsqueeze(1).expand(batch, n)
    nodes = torch.arange(n, device=tokens.device).unsqueeze(0).expand(batch, n)
    parent = torch.full((batch, n + 1), -1, dtype=torch.int64, device=tokens.device)
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
    reached = torch.zeros((batch, n), dtype=torch.bool, device=tokens.device)
    reached[:, 0] = True
    depth = torch.zeros((batch, n), dtype=torch.int64, device=tokens.device)
    safe_parent = parent.clamp(min=0)
    for _ in range(n):
        up_reached = torch.gather(reached, 1, safe_parent) & (parent >= 0)
        reached = reached | up_reached
        depth = torch.where(parent >= 0, torch.gather(depth, 1, safe_parent) + 1, depth)
    depth = torch.where(reached, depth, 0)
    # tokens up the path: the node at distance k above i sits at position depth[i] - 1 - k
    paths = torch.zeros((batch, n, n), dtype=torch.int64, device=tokens.device)
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


class DraftMasks:
    """The draft batch of ``batch`` (B × ``num_nodes`` slots on its arena), kept between
    calls; ``fill`` writes the draft masks (module docstring)."""

    def __init__(self, batch: GrammarBatch, num_nodes: int):
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
        self.batch = batch
        self.num_nodes = num_nodes
        self.drafts = GrammarBatch(batch.arena.tokenizer_info, device=batch.device,
                                   max_batch=batch.max_batch * num_nodes, limits=batch.limits,
                                   arena=batch.arena, eager_graphs=False)
        self._source = torch.arange(batch.max_batch, device=batch.device).repeat_interleave(
            num_nodes)

    def fill(self, retrieve_next_token: torch.Tensor, retrieve_next_sibling: torch.Tensor,
             draft_tokens: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        batch, n = self.batch.max_batch, self.num_nodes
        words = layout.bitmask_words(self.batch.vocab_size)
        for name, value in (("retrieve_next_token", retrieve_next_token),
                            ("retrieve_next_sibling", retrieve_next_sibling),
                            ("draft_tokens", draft_tokens)):
            if value.shape != (batch, n) or value.dtype != torch.int64 \
                    or value.device != self.batch.device:
                raise ValueError(f"{name} must be int64 [{batch}, {n}] on {self.batch.device}, "
                                 f"got {value.dtype} {tuple(value.shape)} on {value.device}")
        if bitmask.shape != (batch, n, words) or bitmask.dtype != torch.int32 \
                or bitmask.device != self.batch.device or not bitmask.is_contiguous():
            raise ValueError(f"bitmask must be a contiguous int32 [{batch}, {n}, {words}] on "
                             f"{self.batch.device}, got {bitmask.dtype} "
                             f"{tuple(bitmask.shape)}")
        paths, depth, reached = draft_paths(retrieve_next_token, retrieve_next_sibling,
                                            draft_tokens)
        drafts = self.drafts
        drafts.copy_slots_from(self.batch, self._source)
        counts = drafts.accept_tokens(paths.view(batch * n, n), depth.view(-1))
        rows = bitmask.view(batch * n, words)
        drafts.fill_next_token_bitmask(rows)
        ok = reached.view(-1) & (counts.to(torch.int64) == depth.view(-1))
        ok &= ~drafts.is_terminated()  # the output ended there: a zero row, as XGrammar's
        rows.mul_(ok.to(torch.int32).unsqueeze(1))
        return bitmask
