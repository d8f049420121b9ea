"""Graph algorithms shared by the front-ends and the compiler (plain functions, no state).

In:  a list of nodes (any hashable) and their successors (a mapping node -> nodes).
Out: ``strongly_connected_components``: the components, sinks first;
     ``reaching``: the nodes from which some goal can be reached;
     ``reachable``: the nodes some start can reach.
"""
from __future__ import annotations

from typing import Dict, Hashable, Iterable, List, Mapping, Sequence as Seq, Set

Node = Hashable


def strongly_connected_components(nodes: Iterable[Node],
                                  successors: Mapping[Node, Seq[Node]]) -> List[List[Node]]:
    """Tarjan's algorithm, iterative. Components come out sinks first (a component is listed
    after every component it can reach); names inside a component keep the order of ``nodes``.
    """
    nodes = list(nodes)
    position = {name: i for i, name in enumerate(nodes)}
    index: Dict[Node, int] = {}
    low: Dict[Node, int] = {}
    stack: List[Node] = []
    on_stack: Set[Node] = set()
    components: List[List[Node]] = []
    for start in nodes:
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(successors.get(start, ())))]
        while work:
            node, pending = work[-1]
            descended = False
            for succ in pending:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(successors.get(succ, ()))))
                    descended = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if descended:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                component.sort(key=position.__getitem__)
                components.append(component)
    return components


def reachable(starts: Iterable[Node], successors) -> List[Node]:
    """The nodes reachable from ``starts`` (starts included), in the order a depth-first
    search first meets them; ``successors(node)`` gives a node's successors."""
    found = list(dict.fromkeys(starts))
    seen, stack = set(found), list(reversed(found))
    while stack:
        for succ in successors(stack.pop()):
            if succ not in seen:
                seen.add(succ)
                found.append(succ)
                stack.append(succ)
    return found


def reaching(goals: Iterable[Node], nodes: Iterable[Node],
             successors: Mapping[Node, Seq[Node]]) -> Set[Node]:
    """The nodes (of ``nodes``) from which a node of ``goals`` can be reached, goals included;
    one backward search over the edges among ``nodes``."""
    nodes = set(nodes)
    predecessors: Dict[Node, List[Node]] = {node: [] for node in nodes}
    for node in nodes:
        for succ in successors.get(node, ()):
            if succ in predecessors:
                predecessors[succ].append(node)
    seen = {goal for goal in goals if goal in nodes}
    stack = list(seen)
    while stack:
        for source in predecessors[stack.pop()]:
            if source not in seen:
                seen.add(source)
                stack.append(source)
    return seen
