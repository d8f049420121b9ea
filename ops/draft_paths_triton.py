"""Draft-tree paths: every node's tokens from the root, its depth and whether the root reaches
it — the Triton kernel (CUDA path of ``xg::draft_paths``). Its reference, which it must equal:
``ops/draft_paths.py``, whose docstring gives the arguments, results and semantics.

Kernel ``_draft_paths_kernel``
  grid      (B,): program b holds row b's arrays as BLOCK-lane vectors (BLOCK = N rounded up to
            a power of two, at most ``MAX_TRITON_NODES``; wider trees take the reference).
  work      the same rounds as the reference, in registers: parents from two BLOCK x BLOCK
            comparisons, then N rounds of ``tl.gather`` for siblings, depth and reach, then N
            rounds for the paths. O(N²) register work, no global memory but the inputs.
  traffic   read 24 B·N bytes, write 8 B·N² + 9 B·N bytes (paths dominate: 648 bytes a row at
            N = 9): one launch instead of the reference's ~12 launches a round.
  invariants paths[b, i, :depth] are the tokens on the path; the kernel zeroes the rest of the
            row first (a barrier between), so the output needs no separate memset.
"""
from __future__ import annotations

from typing import Tuple

import torch
import triton
import triton.language as tl

from gxg.ops.draft_paths import draft_paths_reference

MAX_TRITON_NODES = 128   # BLOCK x BLOCK comparisons in registers; wider trees: the reference


@triton.jit
def _draft_paths_kernel(next_ptr, sibling_ptr, tokens_ptr, paths_ptr, depth_ptr, reached_ptr,
                        n, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    inside = lanes < n
    row = b * n
    ids = lanes.to(tl.int64)
    # the rows of paths start at 0 (the output is allocated empty: one launch fewer)
    tl.store(paths_ptr + (row + ids[:, None]) * n + ids[None, :],
             tl.zeros((BLOCK, BLOCK), tl.int64), mask=inside[:, None] & inside[None, :])
    tl.debug_barrier()
    first = tl.load(next_ptr + row + lanes, mask=inside, other=-1)
    sibling = tl.load(sibling_ptr + row + lanes, mask=inside, other=-1)
    tokens = tl.load(tokens_ptr + row + lanes, mask=inside, other=0)
    first = tl.where((first >= 0) & (first < n), first, -1)
    sibling = tl.where((sibling >= 0) & (sibling < n), sibling, -1)
    # parent of j as a first child: the i with first[i] == j; left sibling of j: the i with
    # sibling[i] == j (for a malformed tree, one of them)
    named_first = first[:, None] == ids[None, :]
    named_sibling = sibling[:, None] == ids[None, :]
    first_parent = tl.max(tl.where(named_first, ids[:, None], -1), axis=0)
    left = tl.max(tl.where(named_sibling, ids[:, None], -1), axis=0)
    parent = first_parent
    for _ in range(n):
        parent = tl.where(left >= 0, tl.gather(parent, tl.maximum(left, 0), 0), first_parent)
    parent = tl.where(lanes == 0, -1, parent)
    safe_parent = tl.maximum(parent, 0)
    reached = lanes == 0
    depth = tl.zeros((BLOCK,), tl.int64)
    for _ in range(n):
        up = tl.gather(reached.to(tl.int32), safe_parent, 0) != 0
        reached = reached | (up & (parent >= 0))
        depth = tl.where(parent >= 0, tl.gather(depth, safe_parent, 0) + 1, depth)
    depth = tl.where(reached, depth, 0)
    current = ids
    for k in range(n):
        live = reached & (k < depth) & inside
        position = tl.maximum(depth - 1 - k, 0)
        token = tl.gather(tokens, current, 0)
        tl.store(paths_ptr + (row + ids) * n + position, token, mask=live)
        current = tl.gather(safe_parent, current, 0)
    tl.store(depth_ptr + row + lanes, depth, mask=inside)
    tl.store(reached_ptr + row + lanes, reached.to(tl.int8), mask=inside)


def draft_paths_triton(next_token: torch.Tensor, next_sibling: torch.Tensor,
                       tokens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, n = tokens.shape
    if n > MAX_TRITON_NODES:
        return draft_paths_reference(next_token, next_sibling, tokens)
    device = tokens.device
    paths = torch.empty((batch, n, n), dtype=torch.int64, device=device)
    depth = torch.empty((batch, n), dtype=torch.int64, device=device)
    reached = torch.empty((batch, n), dtype=torch.uint8, device=device)
    if batch > 0 and n > 0:
        _draft_paths_kernel[(batch,)](next_token.contiguous(), next_sibling.contiguous(),
                                      tokens.contiguous(), paths, depth, reached, n,
                                      BLOCK=max(2, triton.next_power_of_2(n)), num_warps=1)
    return paths, depth, reached.view(torch.bool)
