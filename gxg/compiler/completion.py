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
len(R) + d(ret) over reference edges)``, every term at least each of its arguments): one heap
pass over the nodes, or, for automata of LEVELS_FROM_NODES nodes and more, the same settled a
whole distance value at a time in numpy (Dial's buckets; the same distances).
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
from gxg.compiler.vocab_walk import concatenated_ranges

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
    """``node_distance``: by the heap (``_distances_by_heap``) for small automata, by whole
    distance levels in numpy (``_distances_by_level``) from LEVELS_FROM_NODES nodes on."""
    a = automaton
    n = a.num_nodes
    pred_offsets, pred_sources = _byte_predecessors(a, edges)
    ref_source = np.repeat(np.arange(n), np.diff(a.ref_offsets))
    ref_start = a.rule_start[a.ref_rule]
    ref_return = a.ref_return
    # reference edges waiting on a node (CSR): those whose callee start or return node it is
    waited_on = np.concatenate([ref_start, ref_return[ref_return != ref_start]])
    waiting_edges = np.concatenate([np.arange(len(ref_start)),
                                    np.flatnonzero(ref_return != ref_start)])
    order = np.argsort(waited_on, kind="stable")
    waiting_offsets = np.searchsorted(waited_on[order], np.arange(n + 1))
    graph = _DistanceGraph(n, np.flatnonzero(a.is_final), pred_offsets, pred_sources,
                           ref_source, ref_start, ref_return, waiting_offsets,
                           waiting_edges[order])
    by = _distances_by_level if n >= LEVELS_FROM_NODES else _distances_by_heap
    return np.minimum(by(graph), UNREACHABLE).astype(np.int32)


# From this many nodes a whole level of nodes at once in numpy beats one node at a time in
# Python (every 10th MaskBench file, 2-core VM, medians: 3,000-5,000 nodes 3.2 ms by the heap,
# 2.2 ms by levels; 2,000-3,000 nodes 1.8 and 2.1 ms).
LEVELS_FROM_NODES = 3000


@dataclass(frozen=True)
class _DistanceGraph:
    """The shortest-derivation problem of ``node_distance`` as arrays: the final nodes (at
    0), each node's one-step predecessors (CSR), the reference edges (source, callee start,
    return node) and, per node, the reference edges waiting on it (CSR)."""
    num_nodes: int
    finals: np.ndarray
    pred_offsets: np.ndarray
    pred_sources: np.ndarray
    ref_source: np.ndarray
    ref_start: np.ndarray
    ref_return: np.ndarray
    waiting_offsets: np.ndarray
    waiting_edges: np.ndarray


def _distances_by_heap(g: _DistanceGraph) -> np.ndarray:
    """Knuth's generalised Dijkstra, one node at a time (Python lists: the loop reads them
    one item at a time)."""
    n = g.num_nodes
    distance = [UNREACHABLE] * n
    done = [False] * n
    heap = [(0, node) for node in g.finals.tolist()]
    heapq.heapify(heap)
    pred_offsets, pred_sources = g.pred_offsets.tolist(), g.pred_sources.tolist()
    waiting_offsets, waiting_edges = g.waiting_offsets.tolist(), g.waiting_edges.tolist()
    ref_source, ref_start = g.ref_source.tolist(), g.ref_start.tolist()
    ref_return = g.ref_return.tolist()
    while heap:
        value, node = heapq.heappop(heap)
        if done[node]:
            continue
        done[node] = True
        distance[node] = value
        for source in pred_sources[pred_offsets[node]:pred_offsets[node + 1]]:
            if not done[source]:
                heapq.heappush(heap, (value + 1, source))
        for edge in waiting_edges[waiting_offsets[node]:waiting_offsets[node + 1]]:
            start, ret, source = ref_start[edge], ref_return[edge], ref_source[edge]
            if done[start] and done[ret] and not done[source]:
                heapq.heappush(heap, (distance[start] + distance[ret], source))
    return np.array(distance, dtype=np.int64)


def _distances_by_level(g: _DistanceGraph) -> np.ndarray:
    """The same algorithm a whole distance value at a time (Dial's buckets): every node
    whose smallest candidate is the smallest pending value is settled at once, then its
    predecessors become candidates one more, and the reference edges it completes (callee
    start and return node both settled) candidates at their sum, which is at least the
    value being settled (so a sum equal to it is settled next, before any larger one)."""
    n = g.num_nodes
    distance = np.full(n, UNREACHABLE, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    pending = {0: [g.finals]} if len(g.finals) else {}
    while pending:
        value = min(pending)
        nodes = np.unique(np.concatenate(pending.pop(value)))
        nodes = nodes[~done[nodes]]
        if not len(nodes):
            continue
        done[nodes] = True
        distance[nodes] = value
        sources = g.pred_sources[_ranges(g.pred_offsets, nodes)]
        sources = sources[~done[sources]]
        if len(sources):
            pending.setdefault(value + 1, []).append(sources)
        edges = g.waiting_edges[_ranges(g.waiting_offsets, nodes)]
        if not len(edges):
            continue
        start, ret, source = g.ref_start[edges], g.ref_return[edges], g.ref_source[edges]
        ready = done[start] & done[ret] & ~done[source]
        if not ready.any():
            continue
        sums, source = distance[start[ready]] + distance[ret[ready]], source[ready]
        for total in np.unique(sums).tolist():
            pending.setdefault(total, []).append(source[sums == total])
    return distance


def _ranges(offsets: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Positions offsets[node] .. offsets[node + 1] - 1 of every node, as one array."""
    lo = offsets[nodes]
    return concatenated_ranges(lo, offsets[nodes + 1] - lo)


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
