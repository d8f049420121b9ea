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
     trusted as a drafter writes them (a tree: no node with two parents, indices in [-1, N));
     ``gxg.draft_tree`` checks one on the host.

How: ``torch.ops.xg`` ops at fixed shapes, reading nothing back to the host (so a CUDA graph
captures a fill; tests/test_draft_masks.py replays one): ``xg::draft_paths`` gives every
node's root-to-node tokens (one Triton launch on CUDA), a draft batch of B × N slots sharing
the batch's arena takes N copies of each slot's state (``GrammarBatch.copy_slots_from``), every
draft slot accepts its node's path in one ``accept_tokens`` launch, one fill writes the B × N
rows, and the rows whose path was not accepted in full, or that terminated, are zeroed. The
oracle is
``GrammarMatcher.traverse_draft_tree`` (XGrammar 0.2.8's semantics) with one difference: below a
rejected or terminating node XGrammar leaves the rows as they were, these rows are zero.

Cost: the copies (a slot's state, the pool included, times N), the path accepts (depth ≤ N
tokens per draft slot) and one fill of B × N rows. A kernel that walks each tree depth first
with the slot's own pool as scratch would avoid the copies (gxg/DESIGN.md).
"""
from __future__ import annotations

import torch

from gxg import layout
from gxg.batch import GrammarBatch


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
        self.drafts.state_copy_table(batch)  # built now, so that a fill can be captured

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
        paths, depth, reached = self.batch._op("draft_paths")(
            retrieve_next_token, retrieve_next_sibling, draft_tokens)
        drafts = self.drafts
        drafts.copy_slots_from(self.batch, self._source)
        counts = drafts.accept_tokens(paths.view(batch * n, n), depth.view(-1))
        rows = bitmask.view(batch * n, words)
        drafts.fill_next_token_bitmask(rows)
        ok = reached.view(-1) & (counts.to(torch.int64) == depth.view(-1))
        ok &= ~drafts.is_terminated()  # the output ended there: a zero row, as XGrammar's
        rows.mul_(ok.to(torch.int32).unsqueeze(1))
        return bitmask
