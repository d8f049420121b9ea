"""Completion distances: the fewest bytes a stack still needs before the root can end.

In:  an ``Automaton`` (``gxg.compiler.automaton``).
Out: ``CompletionDistances``:

     node_distance  int32 [N]  fewest bytes from the node to the completion of its rule, a
                               rule-reference edge costing the referenced rule's fewest bytes
     rule_length    int32 [R]  fewest bytes of a string of the rule (its start node's distance)
     max_rise       int        a bound on how much one byte can raise the distance of one
                               stack (``NO_RISE_BOUND`` when none was found)

What they are for: a generation with a token budget must end with a complete output. A stack
``[n_0, ..., n_k]`` completes when each frame completes its rule, top first, so its distance is
``sum(node_distance[n_i])``; the live stacks' distance is the smallest of theirs (``END``, the
root completed, is 0). Every byte is a token of its own in byte-level and byte-fallback
vocabularies, so a distance of ``d`` bytes is reachable in at most ``d`` tokens: the runtime
keeps a completion within the remaining budget by allowing only tokens after which the distance
is at most the tokens left (``ops.reference.restrict_to_budget``). Bytes over-count the tokens
a completion needs (``"}]}`` may be one token), so the restriction starts a little early; it
never lets the budget run out first.

``max_rise`` lets the runtime skip that check for most tokens: one byte moves the stack's top
frame along one byte edge ``n -> n'`` (the distance changes by ``d(n') - d(n)``), then the
closure may pop completed frames (no change: a final node's distance is 0) and push callees (a
push at ``x`` into rule ``R`` returning to ``ret`` adds ``len(R) + d(ret) - d(x) >= 0``). So a
stack that was at distance ``D`` is at most at ``D + L * max_rise`` after a token of ``L`` bytes,
and a token with ``D_max + L * max_rise <= tokens left after it`` fits without being walked.

Computation: ``node_distance`` is a shortest-derivation problem (Knuth's generalisation of
Dijkstra to superior functions: ``d(x) = min(1 + d(target) over byte edges and token moves,
len(R) + d(ret) over reference edges)``, every term at least each of its arguments), one heap
pass over the nodes.
``max_rise`` is the largest rise of a byte edge plus the largest rise of a closure path after
it, a longest-path fixpoint; a pop is taken to land on any return node (a bound, not exact), and
a fixpoint that does not settle within ``MAX_RISE_ROUNDS`` rounds gives ``NO_RISE_BOUND`` (the
runtime then checks every token).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from gxg.compiler.automaton import Automaton

__all__ = ["CompletionDistances", "completion_distances", "NO_RISE_BOUND", "UNREACHABLE"]

NO_RISE_BOUND = -1
UNREACHABLE = np.iinfo(np.int32).max // 4  # a node that cannot complete (none survives pruning)
MAX_RISE_ROUNDS = 64


@dataclass(frozen=True, eq=False)
class CompletionDistances:
    node_distance: np.ndarray
    rule_length: np.ndarray
    max_rise: int

    def stack_distance(self, stack) -> int:
        """Fewest bytes before the root can end from ``stack`` (nodes, bottom first; ``()`` is
        END: 0)."""
        return int(sum(int(self.node_distance[node]) for node in stack))


def completion_distances(automaton: Automaton) -> CompletionDistances:
    edges = _one_step_edges(automaton)  # read by both passes
    distance = _node_distances(automaton, edges)
    rule_length = distance[automaton.rule_start]
    return CompletionDistances(distance, rule_length, _max_rise(automaton, distance, edges))


def _one_step_edges(automaton: Automaton):
    """(sources, targets) of the moves one token's byte makes: byte edges, and the token
    nodes' moves (a token has at least one byte, so a token move counts as one)."""
    sources, classes = np.nonzero(automaton.next_node >= 0)
    targets = automaton.next_node[sources, classes]
    token_nodes = np.flatnonzero(automaton.token_next >= 0)
    return (np.concatenate([sources, token_nodes]),
            np.concatenate([targets, automaton.token_next[token_nodes]]))


def _byte_predecessors(automaton: Automaton, edges):
    """For each node, the nodes with a one-step edge (``edges``) into it (CSR: offsets,
    sources)."""
    sources, targets = edges
    n = max(automaton.num_nodes, 1)
    # distinct (target, source) pairs in order, as one int64 key each (a 1-D unique)
    keys = np.unique(targets.astype(np.int64) * n + sources)
    offsets = np.searchsorted(keys // n, np.arange(automaton.num_nodes + 1))
    return offsets, keys % n


def _node_distances(automaton: Automaton, edges) -> np.ndarray:
    a = automaton
    n = a.num_nodes
    pred_offsets, pred_sources = _byte_predecessors(a, edges)
    ref_source = np.repeat(np.arange(n), np.diff(a.ref_offsets))
    ref_start = a.rule_start[a.ref_rule]
    ref_return = a.ref_return
    # reference edges waiting on a node: those whose callee start or return node it is
    waiting = [[] for _ in range(n)]
    for edge, (start, ret) in enumerate(zip(ref_start.tolist(), ref_return.tolist())):
        waiting[start].append(edge)
        if ret != start:
            waiting[ret].append(edge)
    distance = [UNREACHABLE] * n  # Python lists: the loop reads them one item at a time
    done = [False] * n
    heap = [(0, node) for node in np.flatnonzero(a.is_final).tolist()]
    heapq.heapify(heap)
    pred_offsets, pred_sources = pred_offsets.tolist(), pred_sources.tolist()
    ref_source, ref_start, ref_return = ref_source.tolist(), ref_start.tolist(), ref_return.tolist()
    while heap:
        value, node = heapq.heappop(heap)
        if done[node]:
            continue
        done[node] = True
        distance[node] = value
        for source in pred_sources[pred_offsets[node]:pred_offsets[node + 1]]:
            if not done[source]:
                heapq.heappush(heap, (value + 1, source))
        for edge in waiting[node]:
            start, ret, source = ref_start[edge], ref_return[edge], ref_source[edge]
            if done[start] and done[ret] and not done[source]:
                heapq.heappush(heap, (distance[start] + distance[ret], source))
    return np.minimum(np.array(distance, dtype=np.int64), UNREACHABLE).astype(np.int32)


def _max_rise(automaton: Automaton, distance: np.ndarray, edges) -> int:
    """A bound on one byte's rise of one stack's distance, or ``NO_RISE_BOUND``."""
    a = automaton
    d = distance.astype(np.int64)
    n = a.num_nodes
    ref_source = np.repeat(np.arange(n), np.diff(a.ref_offsets))
    ref_start = a.rule_start[a.ref_rule]
    pure = a.is_pure_return[a.ref_return]
    push_rise = d[ref_start] + np.where(pure, 0, d[a.ref_return]) - d[ref_source]
    frame_nodes = np.unique(a.ref_return[~pure])  # nodes a pop can land on
    # closure[x]: the largest rise from top node x to some scannable top (or END, rise <= 0)
    closure = np.where(a.is_scannable | a.is_final, 0, np.iinfo(np.int64).min // 4)
    for _ in range(MAX_RISE_ROUNDS):
        updated = closure.copy()
        if len(ref_source):
            np.maximum.at(updated, ref_source, push_rise + closure[ref_start])
        if len(frame_nodes):
            pop = closure[frame_nodes].max()
            updated[a.is_final] = np.maximum(updated[a.is_final], pop)
        if np.array_equal(updated, closure):
            break
        closure = updated
    else:
        return NO_RISE_BOUND
    sources, targets = edges
    if not len(sources):
        return 0
    rise = d[targets] - d[sources] + closure[targets]
    return int(max(0, rise.max()))
