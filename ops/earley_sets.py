"""Earley sets over the automaton: the CPU matcher's parse state once its parallel stacks
multiply past ``max_state_bytes`` (``gxg.matcher``).

In:  a grammar's ``HostTables`` (``gxg.ops.reference``) and the steps a matcher has taken since
     its reset (``Step``: the bytes, and the token id of a token step).
Out: an ``EarleyParse`` with the matcher's ops on it: accept bytes, a token or the stop token;
     roll back; fill the next-token mask; narrow a mask to a token budget; the completion
     distance; the bytes that can come next.

Why: a stack per parse (``gxg.ops.reference``, what the GPU runs) is exact, and for almost
every grammar small, but some ambiguous grammars have exponentially many *distinct* stacks:
``root ::= ((([a-c] root)){0,2}){1,3}`` has 1,882 after 10 bytes and 109,018 after 16. Earley
items share what those stacks have in common: an item is ``(node, origin)`` (a position in a
rule, and the chart position where that occurrence of the rule began), so the set at position
``i`` holds at most ``N * (i + 1)`` items, and a byte costs polynomial time whatever the
ambiguity. (XGrammar 0.2's runtime is an Earley parser for the same reason.)

Moves at chart position ``i`` (the automaton's moves, ``gxg.compiler.automaton``):

* scan: ``(n, o)`` in set ``i`` with ``next_node[n, class(b)] = n' >= 0`` gives ``(n', o)`` in
  set ``i + 1``;
* predict: ``(n, o)`` with a reference edge ``(R, ret)`` adds ``(start(R), i)``, and the
  caller waits in set ``i`` for ``R``: ``waiting[R] += (ret, o)``. A nullable ``R`` also moves
  the caller at once, ``(ret, o)`` (Aycock and Horspool's fix: a caller that arrives after
  ``R`` completed empty at ``i`` is not missed);
* complete: ``(n, o)`` with ``n`` final in rule ``R`` and ``o < i`` moves every ``(ret, o')``
  waiting for ``R`` in set ``o`` to ``(ret, o')``; the root rule (which nothing references)
  completing from origin 0 means the input is a sentence (``can_end``). A completion with
  ``o == i`` is empty, and the nullable move has made it already;
* token move (token nodes): the tops of the set before a token whose node's set holds it give
  ``(token_next[n], o)`` in the set at the token's end, closed with its last byte's items; the
  token's bytes never move a token node, and when they die part-way the token's moves still
  come at its end (as in the stack runtime).

Tail calls need nothing here (a pure-return node is final and completes at once). The *tops*
of a set are its items whose node can scan; the set is alive when it has a top or can end.
Token budgets are not run on Earley sets: their counters are per occurrence of a rule on a
stack (``gxg.compiler.automaton``), which items do not keep; ``supports`` says so and the
matcher then keeps the stack runtime's limit error.

The mask: the accept rows of the tops' nodes OR'ed (what a node's mask entry accepts does not
depend on the stack below it), plus the uncertain tokens of those nodes that the set accepts,
each decided by scanning its bytes from the set; the tokens are taken in sorted-vocabulary
order and a token reuses the sets of the prefix it shares with the one before (a depth-first
walk of the vocabulary's trie); plus the stop tokens when the root can end. Cost: a set is
built in time linear in its items and their completions; a fill costs one set per trie node
visited below the current position (all of the vocabulary's for a node whose entry is
conservative).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from gxg.ops.reference import _bits, _clear_bits, _set_bits

STOP_STEP = -2  # Step.token_id of the stop token (the step consumes no bytes)
NO_END = int(np.iinfo(np.int32).max)  # the completion distance of a set that cannot end
INFINITE = float("inf")


@dataclass(frozen=True)
class Step:
    """One step a matcher took: ``data`` consumed; ``token_id`` >= 0 for a token (its token
    moves count), -1 for a string, STOP_STEP for the stop token."""
    data: bytes
    token_id: int = -1


class EarleySet:
    """The items of one chart position, closed: ``tops`` (node, origin) whose node can scan,
    in the order the closure found them; ``waiting`` rule -> [(return node, origin)] of the
    callers that predicted the rule here; ``can_end``: the root rule completed here."""
    __slots__ = ("tops", "waiting", "can_end")

    def __init__(self, tops: List[Tuple[int, int]], waiting: Dict[int, list], can_end: bool):
        self.tops = tops
        self.waiting = waiting
        self.can_end = can_end

    @property
    def alive(self) -> bool:
        return bool(self.tops) or self.can_end


DEAD = EarleySet([], {}, False)  # a position no parse reaches (the bytes of a token died)


def supports(tables) -> bool:
    """Whether a grammar can run on Earley sets (token budgets cannot)."""
    return not tables.has_counters


class EarleyParse:
    """The chart of one matcher since its reset: one closed set per byte consumed, plus the
    step boundaries for rollback (``ends[k]``: the chart length after step k; ``terminated``
    after a stop step). Sets are immutable once built, so ``copy`` shares them."""

    def __init__(self, tables):
        if not supports(tables):
            raise ValueError("a grammar with token budgets does not run on Earley sets")
        self.t = tables
        lists = tables.lists
        a = tables.automaton
        self._root_rule = int(a.root_rule)
        self._nullable = np.asarray(a.rule_nullable, dtype=bool).tolist()
        self._lists = lists
        self.chart: List[EarleySet] = []
        self.chart.append(self._close([(tables.root_start, 0)]))
        self.ends: List[int] = []
        self.terminated = False

    # ------------------------------------------------------------------ state
    @property
    def current(self) -> EarleySet:
        return self.chart[-1]

    @property
    def can_end(self) -> bool:
        return self.current.can_end

    @property
    def num_steps(self) -> int:
        return len(self.ends)

    def copy(self) -> "EarleyParse":
        twin = object.__new__(EarleyParse)
        twin.__dict__.update(self.__dict__)
        twin.chart, twin.ends = list(self.chart), list(self.ends)
        return twin

    @classmethod
    def replay(cls, tables, steps: Sequence[Step]) -> "EarleyParse":
        """The parse after ``steps`` (steps a matcher took: each must be accepted)."""
        parse = cls(tables)
        for step in steps:
            ok = parse.accept_stop() if step.token_id == STOP_STEP else \
                parse.accept_bytes(step.data, step.token_id)
            if not ok:
                raise AssertionError(f"replaying {step!r} on Earley sets failed: the stack "
                                     f"runtime accepted it")
        return parse

    # ------------------------------------------------------------------ closure
    def _close(self, seeds) -> EarleySet:
        """The set at position ``len(self.chart)`` from its seed items (``self.chart`` holds
        every set before it)."""
        lists = self._lists
        refs, scannable, final = lists.refs, lists.is_scannable, lists.is_final
        rule_start, node_rule, nullable = lists.rule_start, lists.node_rule, self._nullable
        root, chart, position = self._root_rule, self.chart, len(self.chart)
        seen = set()
        tops: List[Tuple[int, int]] = []
        waiting: Dict[int, list] = {}
        can_end = False
        work = list(reversed(seeds))
        while work:
            item = work.pop()
            if item in seen:
                continue
            seen.add(item)
            node, origin = item
            if scannable[node]:
                tops.append(item)
            for rule, ret in refs[node]:
                waiting.setdefault(rule, []).append((ret, origin))
                work.append((rule_start[rule], position))
                if nullable[rule]:
                    work.append((ret, origin))
            if final[node]:
                rule = node_rule[node]
                if rule == root and origin == 0:
                    can_end = True
                elif origin < position:
                    work.extend(chart[origin].waiting.get(rule, ()))
        return EarleySet(tops, waiting, can_end)

    def _scan(self, byte: int, extra=()) -> EarleySet:
        """The set after ``byte`` from the last set of the chart, with ``extra`` seed items
        (a token's moves at its last byte); DEAD when there is no seed."""
        lists = self._lists
        cls = lists.byte_class[byte]
        next_node = lists.next_node
        seeds = []
        for node, origin in self.chart[-1].tops:
            target = next_node[node][cls]
            if target >= 0:
                seeds.append((target, origin))
        seeds.extend(extra)
        return self._close(seeds) if seeds else DEAD

    def _token_moves(self, token_id: int) -> List[Tuple[int, int]]:
        """The moves of token ``token_id`` from the current tops that are token nodes whose
        set holds it (membership: the node's accept row)."""
        if not self.t.has_token_nodes:
            return []
        token_next = self._lists.token_next
        word, bit = token_id >> 5, token_id & 31
        moves = []
        for node, origin in self.current.tops:
            target = token_next[node]
            if target >= 0 and (int(self.t.layout.rows([node])[0, word]) >> bit) & 1:
                moves.append((target, origin))
        return moves

    # ------------------------------------------------------------------ steps
    def accept_bytes(self, data: bytes, token_id: int = -1) -> bool:
        """Consume ``data`` as one step (a token's when ``token_id`` >= 0: its token moves
        come at its last byte); False (nothing changed) if it cannot be consumed."""
        if self.terminated or not self.current.alive:
            return False
        moves = self._token_moves(token_id) if token_id >= 0 else []
        base = len(self.chart)
        last = len(data) - 1
        for i, byte in enumerate(data):
            extra = moves if i == last else ()
            s = self._scan(byte, extra)
            if s is DEAD and not moves:
                break  # the bytes died and no token move comes at the end
            self.chart.append(s)
        if len(self.chart) - base < len(data) or not self.chart[-1].alive:
            del self.chart[base:]
            return False
        self.ends.append(len(self.chart))
        return True

    def accept_stop(self) -> bool:
        if self.terminated or not self.can_end:
            return False
        self.ends.append(len(self.chart))
        self.terminated = True
        return True

    def rollback(self, num_steps: int) -> bool:
        if not 0 <= num_steps <= len(self.ends):
            return False
        for _ in range(num_steps):
            self.ends.pop()
            if self.terminated:
                self.terminated = False  # only the last step can be the stop token
            else:
                del self.chart[self.ends[-1] if self.ends else 1:]
        return True

    # ------------------------------------------------------------------ masks
    def _walk_tokens(self, sorted_indices: np.ndarray) -> Iterator[Tuple[int, EarleySet]]:
        """(sorted index, the set after its bytes or DEAD) for ``sorted_indices`` (ascending),
        each token reusing the sets of the prefix it shares with the one before. While a
        token is yielded, the chart ends with the sets of its bytes (``distance`` reads them);
        the chart is back as it was when the walk ends or is closed."""
        v = self.t.vocabulary
        token_bytes, offsets = v.token_bytes, v.token_offsets
        chart = self.chart
        base = len(chart)
        previous = b""
        try:
            for index in np.asarray(sorted_indices, dtype=np.int64).tolist():
                data = token_bytes[offsets[index]: offsets[index + 1]].tobytes()
                shared = 0
                limit = min(len(previous), len(data), len(chart) - base)
                while shared < limit and previous[shared] == data[shared]:
                    shared += 1
                del chart[base + shared:]
                while len(chart) - base < len(data):
                    chart.append(self._scan(data[len(chart) - base]))  # DEAD after DEAD
                previous = data
                yield index, (chart[-1] if data else DEAD)
        finally:
            del chart[base:]

    def fill(self, row: np.ndarray) -> None:
        """Write the mask into ``row`` (int32 [W]): the tops' accept rows, their uncertain
        tokens that the set accepts, and the stop tokens when the root can end."""
        t = self.t
        row[:] = 0
        if self.terminated:
            _set_bits(row, t.stop_token_ids)
            return
        nodes = sorted({node for node, _ in self.current.tops})
        if nodes:
            np.bitwise_or.reduce(t.layout.rows(nodes), axis=0, out=row)
            todo = np.unique(np.concatenate([t.layout.uncertain(node) for node in nodes]))
            todo = todo[~_bits(row, t.sorted_token_ids[todo])]
            accepted = [index for index, end in self._walk_tokens(todo) if end.alive]
            _set_bits(row, t.sorted_token_ids[np.asarray(accepted, dtype=np.int64)])
        if self.can_end:
            _set_bits(row, t.stop_token_ids)

    def distance(self) -> int:
        """Fewest bytes before the root can end from the chart's last set (0 when it can end
        now; int32 max when it cannot end: a dead set). An item (n, o) needs
        ``node_distance[n]`` to finish its rule, then what its rule's callers waiting in set
        ``o`` need (memoized per (rule, origin); the root from origin 0 needs nothing)."""
        chart = self.chart
        if chart[-1].can_end:
            return 0
        node_distance = self.t.completion.node_distance
        node_rule = self._lists.node_rule
        root = self._root_rule
        memo: Dict[Tuple[int, int], float] = {(root, 0): 0}

        def up(rule: int, origin: int) -> float:
            """What an occurrence of ``rule`` begun at ``origin`` needs after it completes:
            depth first without recursion (right recursion chains one origin per byte); a key
            met again on its own path (a cycle, which the passes leave none of) is no way
            out."""
            path, on_path = [(rule, origin)], {(rule, origin)}
            while path:
                r, o = key = path[-1]
                if key in memo:
                    path.pop()
                    continue
                callers = chart[o].waiting.get(r, ())
                pending = [(node_rule[ret], o2) for ret, o2 in callers
                           if (node_rule[ret], o2) not in memo
                           and (node_rule[ret], o2) not in on_path]
                if pending:
                    path.extend(pending)
                    on_path.update(pending)
                    continue
                memo[key] = min((int(node_distance[ret]) + memo.get((node_rule[ret], o2), INFINITE)
                                 for ret, o2 in callers), default=INFINITE)
                path.pop()
                on_path.discard(key)
            return memo[(rule, origin)]

        best = min((int(node_distance[node]) + up(node_rule[node], origin)
                    for node, origin in chart[-1].tops), default=INFINITE)
        return int(min(best, NO_END))

    def completion_distance(self) -> int:
        return 0 if self.terminated else self.distance()

    def restrict_to_budget(self, row: np.ndarray, remaining: int) -> bool:
        """``gxg.ops.reference.restrict_to_budget`` on the chart: keep the allowed tokens
        after which the root can end within ``remaining - 1`` more bytes-as-tokens (an allowed
        stop token always fits); leave the row as it is when none fits. Returns whether some
        token fits."""
        t = self.t
        if remaining < 0 or self.terminated:
            return True
        spare = remaining - 1
        sorted_index, _, _ = t.tokens_by_id()
        allowed = np.flatnonzero(_bits(row, np.arange(t.vocab_size, dtype=np.int64)))
        todo = allowed[~t.is_stop[allowed]]
        if not len(todo):
            return True
        fits = np.zeros(len(todo), dtype=bool)  # per entry of todo
        if spare >= 0:
            walked = np.flatnonzero(sorted_index[todo] >= 0)
            walked = walked[np.argsort(sorted_index[todo[walked]])]  # sorted-vocabulary order
            for position, (_, end) in zip(walked.tolist(),
                                          self._walk_tokens(sorted_index[todo[walked]])):
                if end.alive and self.distance() <= spare:  # the chart ends with ``end``
                    fits[position] = True
            fits |= self._token_moves_fitting(todo, spare)
        kept = row.copy()
        _clear_bits(kept, todo[~fits])
        if not kept.any():
            return False
        row[:] = kept
        return True

    def _token_moves_fitting(self, token_ids: np.ndarray, spare: int) -> np.ndarray:
        """bool per token id: its token move (from a token-node top whose set holds it)
        leaves the root within ``spare`` of its end. A closure of several seeds is the union
        of their closures (completions read only earlier sets), so each token-node top's move
        is closed once and its set's tokens fit when that one does."""
        fits = np.zeros(len(token_ids), dtype=bool)
        if not self.t.has_token_nodes:
            return fits
        token_next = self._lists.token_next
        for node, origin in self.current.tops:
            target = token_next[node]
            if target < 0:
                continue
            self.chart.append(self._close([(target, origin)]))
            try:
                fit = self.chart[-1].alive and self.distance() <= spare
            finally:
                self.chart.pop()
            if fit:
                fits |= _bits(self.t.layout.rows([node])[0], token_ids)
        return fits

    def next_bytes(self) -> List[int]:
        """Bytes that some top can scan next."""
        lists = self._lists
        classes = {cls for node, _ in self.current.tops
                   for cls, target in enumerate(lists.next_node[node]) if target >= 0}
        return [b for b in range(256) if lists.byte_class[b] in classes]


