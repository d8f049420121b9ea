"""Regular languages over Unicode scalar values, as DFAs: the Boolean operations IR cannot spell.

Why: the JSON Schema front-end needs the intersection of a ``pattern`` with ``maxLength`` (or of
several patterns), complements (``not: {pattern: ...}``, a property name that matches no
``patternProperties`` pattern) and differences with a finite set (additional property names other
than the declared ones). Grammar IR has concatenation, choice and repetition only, so this module
takes a detour through automata and writes the result back as IR.

In:  Grammar IR (``dfa_from_grammar``, ``dfa_from_expr``) whose rules are not recursive, or
     recursive only through tail calls (right-linear rules, such as ``dfa_to_expr`` writes);
     other recursion raises GrammarError, as its language need not be regular. Or an ECMAScript
     regex (``dfa_from_regex``, a full match as in ``regex_to_grammar``), a finite set of
     strings (``literal_strings``), length bounds (``length_between``), or other DFAs.
Out: ``Dfa`` values (immutable, hashable), and IR again through ``dfa_to_expr``.

The automaton
-------------
``Dfa.transitions[q]`` lists state q's outgoing transitions as sorted, disjoint
``(lo, hi, target)`` triples of inclusive code-point ranges; state 0 is the start; a code point
no triple covers leads to an implicit dead state. The alphabet is the Unicode scalar values
(``ALPHABET``: U+0000..U+10FFFF without the surrogates U+D800..U+DFFF), and no range ever contains
a surrogate, so a range that would straddle the gap is two ranges. ``complement`` is taken with
respect to all strings of scalar values; a Python ``str`` holding a lone surrogate is never
accepted.

Every function that returns a Dfa returns it MINIMAL and in a canonical numbering (states in
breadth-first order from the start, following transitions in code-point order; dead states
dropped; the empty language is ``nothing()``, one non-accepting state without transitions).
Hence two DFAs accept the same language iff they are equal (``equivalent``).

Limits
------
Constructions that can blow up take ``max_states`` (default ``DEFAULT_MAX_STATES`` = 4000) and
raise ``DfaTooLarge`` (a ``GrammarError``) as soon as an automaton they build — the subset
construction, a product, a trie, a length chain — would exceed it; the message names the limit.
Building the NFA from IR counts states plus transitions against ``NFA_SIZE_PER_DFA_STATE *
max_states``, so a nested bounded repetition (``(a{1000}){1000}``) is refused before it is
unrolled. The limit applies to the automata as they are built, before minimisation; the
subset construction can build several times more states than the minimal DFA has (nested
bounded repeats: ``(?:a(?:a[ab](?:[ab]){1,3}){1,3}){1,3}`` builds 6845 subsets for 747 minimal
states, so it needs ``max_states`` >= 6845). A DFA for "at most n code points" has n + 1
states, so ``length_between(0, 10000)`` (and ``.*`` intersected with it) raises with the
default limit and works with ``max_states=10001`` or more. Nothing recurses in Python, so long
chains and deep nesting are fine.

Complexity
----------
* IR -> NFA: linear in the unrolled expression (bounded repetitions are copied).
* NFA -> DFA (subset construction): per DFA state, the outgoing ranges of its NFA states are cut
  at all their boundaries into elementary intervals, and each interval's target set is closed
  under epsilon moves; O(states x elementary intervals x subset size), exponential in the worst
  case, which ``max_states`` cuts off.
* Products (``intersect``, ``union``, ``difference``): pairs of states reachable from (0, 0),
  each pair's ranges merged in one sweep; at most |A| x |B| pairs.
* ``minimize``: Hopcroft's algorithm, O(k n log n) for n states and k distinct "columns" among the
  elementary intervals (intervals on which every state behaves alike are one letter).
* ``dfa_to_expr``: linear in the DFA.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import (
    Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence as Seq, Set, Tuple,
)

from gxg.graphs import reaching, strongly_connected_components
from gxg.grammar.ir import (
    EMPTY,
    MAX_CODE_POINT,
    CharClass,
    Choice,
    Expr,
    Grammar,
    GrammarError,
    Literal,
    Repeat,
    RuleRef,
    Sequence,
    children,
    complement_ranges,
    subtract_range,
    iter_rule_refs,
)

__all__ = [
    "ALPHABET", "DEFAULT_MAX_STATES", "NFA_SIZE_PER_DFA_STATE", "Dfa", "DfaTooLarge",
    "dfa_from_grammar", "dfa_from_expr", "dfa_from_regex", "any_string", "nothing",
    "literal_strings", "length_between", "intersect", "union", "complement", "difference",
    "is_empty", "equivalent", "minimize", "search_language", "dfa_to_expr",
]

Range = Tuple[int, int]
Ranges = Tuple[Range, ...]
Transition = Tuple[int, int, int]          # (lo, hi, target)

SURROGATE_LO, SURROGATE_HI = 0xD800, 0xDFFF
ALPHABET: Ranges = ((0, SURROGATE_LO - 1), (SURROGATE_HI + 1, MAX_CODE_POINT))

DEFAULT_MAX_STATES = 4000
# The NFA of an expression may legitimately be larger than its DFA (alternatives, epsilon
# plumbing), so its budget (states + transitions) is a multiple of the DFA's.
NFA_SIZE_PER_DFA_STATE = 50

DEAD = -1   # "no transition" in products and in the complete form used by minimisation


class DfaTooLarge(GrammarError):
    """A construction needed more states than its limit allowed.

    ``construction`` names what was being built, ``limit`` is the count that was exceeded,
    ``what`` says what was counted ("DFA states", or "NFA states and transitions" whose limit
    is ``NFA_SIZE_PER_DFA_STATE * max_states``) and ``max_states`` is the setting to raise.
    """

    def __init__(self, construction: str, max_states: int, what: str = "DFA states",
                 limit: Optional[int] = None):
        self.construction = construction
        self.max_states = max_states
        self.limit = max_states if limit is None else limit
        self.what = what
        setting = (f"max_states={max_states}" if limit is None
                   else f"{NFA_SIZE_PER_DFA_STATE} x max_states={max_states}")
        super().__init__(f"{construction} needs more than {self.limit} {what} ({setting}); "
                         f"a larger limit allows a larger automaton")


# ----------------------------------------------------------------------------- the automaton


@dataclass(frozen=True)
class Dfa:
    """A DFA over Unicode scalar values; see the module docstring for the conventions."""

    transitions: Tuple[Tuple[Transition, ...], ...]
    accepting: FrozenSet[int]
    # Per state, the ``lo`` of each transition: what ``accepts`` bisects. Derived, not compared.
    _lows: Tuple[Tuple[int, ...], ...] = field(init=False, repr=False, compare=False,
                                                hash=False)

    def __post_init__(self) -> None:
        transitions = tuple(tuple(tuple(t) for t in row) for row in self.transitions)
        accepting = frozenset(self.accepting)
        object.__setattr__(self, "transitions", transitions)
        object.__setattr__(self, "accepting", accepting)
        _check_well_formed(transitions, accepting)
        object.__setattr__(self, "_lows",
                           tuple(tuple(lo for lo, _, _ in row) for row in transitions))

    @property
    def num_states(self) -> int:
        return len(self.transitions)

    def step(self, state: int, code_point: int) -> Optional[int]:
        """The state after reading ``code_point`` in ``state``; None for the dead state."""
        index = bisect_right(self._lows[state], code_point) - 1
        if index < 0:
            return None
        _, hi, target = self.transitions[state][index]
        return target if code_point <= hi else None

    def accepts(self, text: str) -> bool:
        """``text`` (a string of code points) is in the language."""
        state: Optional[int] = 0
        for char in text:
            state = self.step(state, ord(char))
            if state is None:
                return False
        return state in self.accepting


def _check_well_formed(transitions, accepting) -> None:
    if not transitions:
        raise ValueError("a Dfa needs at least one state (state 0 is the start)")
    n = len(transitions)
    for state, row in enumerate(transitions):
        previous_hi = -1
        for lo, hi, target in row:
            if not (previous_hi < lo <= hi <= MAX_CODE_POINT):
                raise ValueError(f"state {state}: transitions must be sorted, disjoint ranges "
                                 f"within U+0000..U+10FFFF, got {row!r}")
            if lo <= SURROGATE_HI and hi >= SURROGATE_LO:
                raise ValueError(f"state {state}: range {lo:#x}-{hi:#x} contains surrogates")
            if not 0 <= target < n:
                raise ValueError(f"state {state}: target {target} is not a state")
            previous_hi = hi
    for state in accepting:
        if not 0 <= state < n:
            raise ValueError(f"accepting state {state} is not a state")


# ----------------------------------------------------------------------------- range helpers


def _gaps(row: Seq[Transition]) -> List[Range]:
    """The scalar values that no transition of ``row`` (sorted, disjoint) covers."""
    return list(subtract_range(complement_ranges((lo, hi) for lo, hi, _ in row),
                               (SURROGATE_LO, SURROGATE_HI)))


def _append_merged(row: List[Transition], lo: int, hi: int, target: int) -> None:
    """Append a transition, merging it into the previous one when they touch and agree."""
    if row and row[-1][2] == target and row[-1][1] + 1 == lo:
        row[-1] = (row[-1][0], hi, target)
    else:
        row.append((lo, hi, target))


def _elementary_intervals(edges: Seq[Transition]) -> List[Tuple[int, int, List[int]]]:
    """Cut the (possibly overlapping) ranges of ``edges`` at all their boundaries.

    Returns ``(lo, hi, targets)`` for each piece that some edge covers, in order; ``targets``
    lists the targets of the edges covering it (with repeats).
    """
    if len(edges) == 1:
        lo, hi, target = edges[0]
        return [(lo, hi, [target])]
    bounds = sorted({lo for lo, _, _ in edges} | {hi + 1 for _, hi, _ in edges})
    buckets: List[List[int]] = [[] for _ in range(len(bounds) - 1)]
    for lo, hi, target in edges:
        for k in range(bisect_left(bounds, lo), bisect_left(bounds, hi + 1)):
            buckets[k].append(target)
    return [(bounds[k], bounds[k + 1] - 1, targets)
            for k, targets in enumerate(buckets) if targets]


def _overlay(row_a: Seq[Transition], row_b: Seq[Transition]) -> List[Tuple[int, int, int, int]]:
    """Both rows cut at each other's boundaries: ``(lo, hi, target_a, target_b)`` for each
    piece where at least one row has a transition (``DEAD`` for the other)."""
    bounds = sorted({lo for lo, _, _ in row_a} | {hi + 1 for _, hi, _ in row_a}
                    | {lo for lo, _, _ in row_b} | {hi + 1 for _, hi, _ in row_b})
    out = []
    i = j = 0
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k], bounds[k + 1] - 1
        while i < len(row_a) and row_a[i][1] < lo:
            i += 1
        while j < len(row_b) and row_b[j][1] < lo:
            j += 1
        x = row_a[i][2] if i < len(row_a) and row_a[i][0] <= lo else DEAD
        y = row_b[j][2] if j < len(row_b) and row_b[j][0] <= lo else DEAD
        if x != DEAD or y != DEAD:
            out.append((lo, hi, x, y))
    return out


# ----------------------------------------------------------------------------- small languages


def nothing() -> Dfa:
    """The empty language."""
    return Dfa(((),), frozenset())


def any_string() -> Dfa:
    """All strings of scalar values, the empty string included."""
    return Dfa((tuple((lo, hi, 0) for lo, hi in ALPHABET),), frozenset({0}))


def length_between(lo: int, hi: Optional[int], *, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """Strings of ``lo`` to ``hi`` code points (``hi=None``: no upper bound)."""
    if lo < 0 or (hi is not None and hi < lo):
        raise ValueError(f"invalid length bounds {lo}..{hi}")
    last = lo if hi is None else hi
    if last + 1 > max_states:
        raise DfaTooLarge(f"the automaton for strings of {lo} to {hi} code points", max_states)
    rows = [tuple((a, b, q + 1) for a, b in ALPHABET) for q in range(last)]
    rows.append(tuple((a, b, last) for a, b in ALPHABET) if hi is None else ())
    return Dfa(tuple(rows), frozenset(range(lo, last + 1)))


def literal_strings(texts: Iterable[str], *, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """A finite set of strings. A string with a lone surrogate is no string of scalar values,
    so it is left out."""
    children_of: List[Dict[int, int]] = [{}]
    accepting: Set[int] = set()
    for text in texts:
        code_points = [ord(char) for char in text]
        if any(SURROGATE_LO <= cp <= SURROGATE_HI for cp in code_points):
            continue
        node = 0
        for cp in code_points:
            child = children_of[node].get(cp)
            if child is None:
                if len(children_of) >= max_states:
                    raise DfaTooLarge("the trie of the literal strings", max_states)
                child = len(children_of)
                children_of[node][cp] = child
                children_of.append({})
            node = child
        accepting.add(node)
    rows = tuple(tuple((cp, cp, child) for cp, child in sorted(kids.items()))
                 for kids in children_of)
    return minimize(Dfa(rows, frozenset(accepting)))


# ----------------------------------------------------------------------------- NFA from IR


class _Nfa:
    """A Thompson-style NFA with range transitions and epsilon moves; counts its own size."""

    def __init__(self, max_states: int, construction: str):
        self.edges: List[List[Transition]] = []
        self.epsilon: List[List[int]] = []
        self.size = 0
        self.max_states = max_states
        self.limit = NFA_SIZE_PER_DFA_STATE * max_states
        self.construction = construction

    def _grow(self, amount: int) -> None:
        self.size += amount
        if self.size > self.limit:
            raise DfaTooLarge(self.construction, self.max_states, "NFA states and transitions",
                              self.limit)

    def new_state(self) -> int:
        self._grow(1)
        self.edges.append([])
        self.epsilon.append([])
        return len(self.edges) - 1

    def new_states(self, count: int) -> List[int]:
        return [self.new_state() for _ in range(count)]

    def add_ranges(self, source: int, ranges: Iterable[Range], target: int) -> None:
        for lo, hi in ranges:
            self._grow(1)
            self.edges[source].append((lo, hi, target))

    def add_epsilon(self, source: int, target: int) -> None:
        self._grow(1)
        self.epsilon[source].append(target)


def _rule_references(root: Expr, rules: Mapping[str, Expr]) -> Dict[str, List[str]]:
    """For each rule reachable from ``root``, the rules its body references (in order).
    Undefined rules raise GrammarError."""
    references: Dict[str, List[str]] = {}
    pending = list(dict.fromkeys(iter_rule_refs(root)))
    while pending:
        name = pending.pop()
        if name in references:
            continue
        if name not in rules:
            raise GrammarError(f"undefined rule {name!r}")
        references[name] = list(dict.fromkeys(iter_rule_refs(rules[name])))
        pending.extend(references[name])
    return references


def _recursive_rules(references: Dict[str, List[str]]) -> Dict[str, FrozenSet[str]]:
    """For each recursive rule: the rules of its strongly connected component."""
    out: Dict[str, FrozenSet[str]] = {}
    for component in strongly_connected_components(list(references), references):
        if len(component) > 1 or component[0] in references[component[0]]:
            members = frozenset(component)
            out.update((name, members) for name in component)
    return out


@dataclass
class _RecursionInstance:
    """One copy of a group of mutually tail-recursive rules, entered from outside: every rule
    of the group, once started, ends where the reference from outside ends (``final``)."""

    rules: FrozenSet[str]
    final: int
    starts: Dict[str, int] = field(default_factory=dict)


_Work = List[Tuple[Expr, int, int, Optional[_RecursionInstance]]]


def _embed(dfa: Dfa, s: int, t: int, nfa: _Nfa) -> None:
    """Add paths from s to t spelling ``dfa``'s language: a copy of its states."""
    states = nfa.new_states(dfa.num_states)     # fresh: s may have other moves
    nfa.add_epsilon(s, states[0])
    for q, row in enumerate(dfa.transitions):
        for lo, hi, target in row:
            nfa.add_ranges(states[q], ((lo, hi),), states[target])
        if q in dfa.accepting:
            nfa.add_epsilon(states[q], t)


def _expr_to_nfa(root: Expr, rules: Mapping[str, Expr], recursive: Dict[str, FrozenSet[str]],
                 nfa: _Nfa) -> Tuple[int, int]:
    """Add ``root`` to ``nfa``; returns its (start, final) states.

    Work items ``(expr, s, t, instance)`` mean "add paths from s to t spelling exactly expr".
    Each item adds transitions only out of s, into t and among fresh states, so alternatives may
    share s and t; a loop gets a fresh hub state so nothing outside can jump into it.

    A rule reference is an epsilon move into a copy of the rule (see ``_RuleCopies``).
    Recursion is allowed only as a tail call (the reference is the last thing its rule matches,
    as in the right-linear rules ``dfa_to_expr`` writes): then every rule of the recursive group
    ends where the reference into the group from outside ends, and a tail call is an epsilon
    move to the callee's entry in the same copy of the group.
    """
    copies = _RuleCopies(rules, recursive)
    start, final = nfa.new_state(), nfa.new_state()
    class_ranges: Dict[CharClass, Ranges] = {}
    work: _Work = [(root, start, final, None)]
    while work:
        expr, s, t, instance = work.pop()
        if isinstance(expr, Literal):
            code_points = [ord(char) for char in expr.data.decode("utf-8")]
            if not code_points:
                nfa.add_epsilon(s, t)
                continue
            states = [s] + nfa.new_states(len(code_points) - 1) + [t]
            for k, cp in enumerate(code_points):
                nfa.add_ranges(states[k], ((cp, cp),), states[k + 1])
        elif isinstance(expr, CharClass):
            if expr not in class_ranges:
                class_ranges[expr] = expr.effective_ranges()
            nfa.add_ranges(s, class_ranges[expr], t)
        elif isinstance(expr, RuleRef):
            copies.reference(expr.name, s, t, instance, nfa, work)
        elif isinstance(expr, Sequence):
            if not expr.items:
                nfa.add_epsilon(s, t)
                continue
            states = [s] + nfa.new_states(len(expr.items) - 1) + [t]
            for k, item in enumerate(expr.items):
                work.append((item, states[k], states[k + 1], instance))
        elif isinstance(expr, Choice):
            for alternative in expr.alternatives:
                work.append((alternative, s, t, instance))
        elif isinstance(expr, Repeat):
            _unroll_repeat(expr, s, t, instance, nfa, work)
        else:
            raise TypeError(f"not a grammar expression: {expr!r}")
    return start, final


class _RuleCopies:
    """The copies of rules made so far, by rule (or recursive group) and continuation state.

    Two references that end in the same state share one copy (a fresh entry state reached by
    epsilon moves, whose paths all end in that state): what follows is the same for both, and
    copies per reference would multiply along nested references (a grammar that ``dfa_to_expr``
    wrote refers to a shared state's rule from every predecessor)."""

    def __init__(self, rules: Mapping[str, Expr], recursive: Dict[str, FrozenSet[str]]):
        self.rules = rules
        self.recursive = recursive
        self.entries: Dict[Tuple[str, int], int] = {}
        self.instances: Dict[Tuple[FrozenSet[str], int], _RecursionInstance] = {}

    def reference(self, name: str, s: int, t: int, instance: Optional[_RecursionInstance],
                  nfa: _Nfa, work: _Work) -> None:
        group = self.recursive.get(name)
        if group is None:
            entry = self.entries.get((name, t))
            if entry is None:
                entry = self.entries[(name, t)] = nfa.new_state()
                work.append((self.rules[name], entry, t, instance))
            nfa.add_epsilon(s, entry)
            return
        if instance is not None and name in instance.rules and t != instance.final:
            raise GrammarError(f"rule {name!r} is recursive other than by a tail call, so its "
                               f"language may not be regular; only non-recursive rules and "
                               f"right-linear (tail) recursion can be turned into an automaton")
        instance = self.instances.get((group, t))
        if instance is None:
            instance = self.instances[(group, t)] = _RecursionInstance(group, t)
        entry = instance.starts.get(name)
        if entry is None:
            entry = instance.starts[name] = nfa.new_state()
            work.append((self.rules[name], entry, instance.final, instance))
        nfa.add_epsilon(s, entry)


def _unroll_repeat(expr: Repeat, s: int, t: int, instance: Optional[_RecursionInstance],
                   nfa: _Nfa, work: _Work) -> None:
    inner, low, high = expr.expr, expr.min, expr.max
    if high is None:
        # low mandatory copies, then a loop around a fresh hub state.
        states = [s] + nfa.new_states(low)
        for k in range(low):
            work.append((inner, states[k], states[k + 1], instance))
        hub = nfa.new_state()
        nfa.add_epsilon(states[-1], hub)
        work.append((inner, hub, hub, instance))
        nfa.add_epsilon(hub, t)
        return
    if high == 0:
        nfa.add_epsilon(s, t)
        return
    # high copies in a row; after the low-th and later ones the match may stop.
    states = [s] + nfa.new_states(high - 1) + [t]
    for k in range(high):
        work.append((inner, states[k], states[k + 1], instance))
    for k in range(low, high):
        nfa.add_epsilon(states[k], t)


# ----------------------------------------------------------------------------- subset construction


def _determinize(nfa: _Nfa, start: int, final: int, max_states: int, construction: str,
                 absorbing: Optional[int] = None) -> Dfa:
    """The subset construction; the result is minimised.

    A DFA state is identified by the NFA states with range transitions in its epsilon closure
    plus whether the closure holds ``final``: states with only epsilon moves cannot tell two
    subsets apart. ``absorbing`` is an NFA state that accepts everything from then on; a closure
    containing it is identified with that state alone (else the subset construction would keep
    distinguishing subsets that minimisation merges anyway).
    """
    closure_key: Dict[FrozenSet[int], Tuple[FrozenSet[int], bool]] = {}

    def key_of(seeds: FrozenSet[int]) -> Tuple[FrozenSet[int], bool]:
        key = closure_key.get(seeds)
        if key is None:
            seen = set(seeds)
            stack = list(seeds)
            while stack:
                for nxt in nfa.epsilon[stack.pop()]:
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            if absorbing is not None and absorbing in seen:
                key = (frozenset((absorbing,)), True)
            else:
                key = (frozenset(q for q in seen if nfa.edges[q]), final in seen)
            closure_key[seeds] = key
        return key

    ids: Dict[Tuple[FrozenSet[int], bool], int] = {}
    order: List[Tuple[FrozenSet[int], bool]] = []

    def id_of(key: Tuple[FrozenSet[int], bool]) -> int:
        state = ids.get(key)
        if state is None:
            if len(order) >= max_states:
                raise DfaTooLarge(construction, max_states)
            state = ids[key] = len(order)
            order.append(key)
        return state

    id_of(key_of(frozenset((start,))))
    rows: List[Tuple[Transition, ...]] = []
    while len(rows) < len(order):
        members, _ = order[len(rows)]
        edges = [edge for q in sorted(members) for edge in nfa.edges[q]]
        row: List[Transition] = []
        for lo, hi, targets in _elementary_intervals(edges):
            key = key_of(frozenset(targets))
            if key[0] or key[1]:            # else nothing can follow: leave it to the dead state
                _append_merged(row, lo, hi, id_of(key))
        rows.append(tuple(row))
    accepting = frozenset(state for state, (_, is_final) in enumerate(order) if is_final)
    return minimize(Dfa(tuple(rows), accepting))


def dfa_from_expr(expr: Expr, rules: Optional[Mapping[str, Expr]] = None, *,
                  max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """The strings ``expr`` matches; ``rules`` maps the names it references to their bodies.
    Rules may recurse only through tail calls; other recursion raises GrammarError, and
    DfaTooLarge is raised past the limits."""
    rules = rules or {}
    construction = "the automaton of the expression"
    nfa = _Nfa(max_states, construction)
    recursive = _recursive_rules(_rule_references(expr, rules))
    start, final = _expr_to_nfa(expr, rules, recursive, nfa)
    return _determinize(nfa, start, final, max_states, construction)


def dfa_from_grammar(grammar: Grammar, *, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """The strings the root rule of ``grammar`` matches. Lookaheads are ignored (they never
    change the language); recursion other than tail calls raises GrammarError."""
    rules = {rule.name: rule.body for rule in grammar.rules}
    return dfa_from_expr(RuleRef(grammar.root_rule_name), rules, max_states=max_states)


def dfa_from_regex(pattern: str, *, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """The strings ``pattern`` (ECMAScript syntax) matches IN FULL, as ``regex_to_grammar``."""
    from gxg.grammar.regex import regex_to_grammar
    return dfa_from_grammar(regex_to_grammar(pattern), max_states=max_states)


def search_language(a: Dfa, *, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """The strings that CONTAIN a string of ``a`` (``.* a .*``): what an unanchored regex
    search such as JSON Schema's ``pattern`` accepts.

    Anchors are the caller's business: ``regex_to_grammar`` reads ``^`` and ``$`` at the edges
    of a pattern as no-ops (it always matches in full), so ``search_language(dfa_from_regex(
    "^ab"))`` is ``.*ab.*``, not ``ab.*``."""
    if is_empty(a):
        return nothing()
    if 0 in a.accepting:
        return any_string()
    construction = "the automaton of the strings containing a match"
    nfa = _Nfa(max_states, construction)
    prefix, suffix = nfa.new_states(2)   # they skip what precedes and what follows the match
    nfa.add_ranges(prefix, ALPHABET, prefix)
    _embed(a, prefix, suffix, nfa)
    nfa.add_ranges(suffix, ALPHABET, suffix)
    # Once a match is complete nothing can undo it: ``suffix`` absorbs.
    return _determinize(nfa, prefix, suffix, max_states, construction, absorbing=suffix)


# ----------------------------------------------------------------------------- Boolean operations


def _product(a: Dfa, b: Dfa, keep: Callable[[int, int], bool],
             accept: Callable[[bool, bool], bool], max_states: int, construction: str) -> Dfa:
    """The product automaton of the pairs reachable from (0, 0), ``DEAD`` standing for a
    missing transition; ``keep(x, y)`` drops pairs that can accept nothing."""
    ids: Dict[Tuple[int, int], int] = {(0, 0): 0}
    pairs: List[Tuple[int, int]] = [(0, 0)]
    rows: List[Tuple[Transition, ...]] = []
    while len(rows) < len(pairs):
        p, q = pairs[len(rows)]
        row_a = a.transitions[p] if p != DEAD else ()
        row_b = b.transitions[q] if q != DEAD else ()
        row: List[Transition] = []
        for lo, hi, x, y in _overlay(row_a, row_b):
            if not keep(x, y):
                continue
            target = ids.get((x, y))
            if target is None:
                if len(pairs) >= max_states:
                    raise DfaTooLarge(construction, max_states)
                target = ids[(x, y)] = len(pairs)
                pairs.append((x, y))
            _append_merged(row, lo, hi, target)
        rows.append(tuple(row))
    accepting = frozenset(k for k, (p, q) in enumerate(pairs)
                          if accept(p in a.accepting, q in b.accepting))
    return minimize(Dfa(tuple(rows), accepting))


def intersect(a: Dfa, b: Dfa, *, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """Strings in both languages."""
    return _product(a, b, lambda x, y: x != DEAD and y != DEAD, lambda p, q: p and q,
                    max_states, "the intersection automaton")


def union(a: Dfa, b: Dfa, *, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """Strings in either language."""
    return _product(a, b, lambda x, y: x != DEAD or y != DEAD, lambda p, q: p or q,
                    max_states, "the union automaton")


def difference(a: Dfa, b: Dfa, *, max_states: int = DEFAULT_MAX_STATES) -> Dfa:
    """Strings in ``a`` but not in ``b``."""
    return _product(a, b, lambda x, y: x != DEAD, lambda p, q: p and not q,
                    max_states, "the difference automaton")


def complement(a: Dfa) -> Dfa:
    """All strings of scalar values that ``a`` rejects (at most one state more than ``a``)."""
    dead = a.num_states
    rows = []
    for row in a.transitions:
        completed = list(row) + [(lo, hi, dead) for lo, hi in _gaps(row)]
        rows.append(tuple(sorted(completed)))
    rows.append(tuple((lo, hi, dead) for lo, hi in ALPHABET))
    accepting = frozenset(q for q in range(dead + 1) if q not in a.accepting)
    return minimize(Dfa(tuple(rows), accepting))


def is_empty(a: Dfa) -> bool:
    """No string is accepted."""
    return not (_reachable(a) & a.accepting)


def equivalent(a: Dfa, b: Dfa) -> bool:
    """Same language (minimal DFAs in canonical numbering are equal exactly then)."""
    return minimize(a) == minimize(b)


# ----------------------------------------------------------------------------- minimisation


def _forward(starts: Iterable[int], step) -> Set[int]:
    """The states reachable from ``starts``; ``step(q)`` gives q's targets."""
    seen = set(starts)
    stack = list(seen)
    while stack:
        for target in step(stack.pop()):
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def _backward(goals: Iterable[int], among: Set[int], step) -> Set[int]:
    """The states of ``among`` from which a state of ``goals`` can be reached."""
    return reaching(goals, among, {q: step(q) for q in among})


def _reachable(a: Dfa) -> Set[int]:
    return _forward([0], lambda q: [target for _, _, target in a.transitions[q]])


def _coreachable(a: Dfa, among: Set[int]) -> Set[int]:
    """The states of ``among`` from which an accepting state can be reached."""
    return _backward(a.accepting, among, lambda q: [target for _, _, target in a.transitions[q]])


def _letters(rows: Seq[Seq[Transition]], dead: int) -> List[Dict[int, List[int]]]:
    """The alphabet as Hopcroft sees it: for each class of code points on which every state
    moves alike, the inverse transition map target -> sources (``dead`` included)."""
    edges = [(lo, hi, q) for q, row in enumerate(rows) for lo, hi, _ in row]
    if not edges:
        return []
    bounds = sorted({lo for lo, _, _ in edges} | {hi + 1 for _, hi, _ in edges})
    # column[k]: the (state, target) pairs on elementary interval k, states ascending.
    column: List[List[Tuple[int, int]]] = [[] for _ in range(len(bounds) - 1)]
    for q, row in enumerate(rows):
        for lo, hi, target in row:
            for k in range(bisect_left(bounds, lo), bisect_left(bounds, hi + 1)):
                column[k].append((q, target))
    letters = []
    for pairs in dict.fromkeys(tuple(pairs) for pairs in column if pairs):
        inverse: Dict[int, List[int]] = {}
        moving = set()
        for q, target in pairs:
            inverse.setdefault(target, []).append(q)
            moving.add(q)
        inverse[dead] = [q for q in range(dead) if q not in moving] + [dead]
        letters.append(inverse)
    return letters


def _hopcroft(rows: Seq[Seq[Transition]], accepting: Set[int]) -> List[int]:
    """Block number of each state (and of the added dead state, index ``len(rows)``) under
    the coarsest partition that respects acceptance and transitions."""
    dead = len(rows)
    block_of = [0 if q in accepting else 1 for q in range(dead)] + [1]
    blocks: List[Set[int]] = [set(), set()]
    for q, b in enumerate(block_of):
        blocks[b].add(q)
    if not blocks[0]:
        return [0] * (dead + 1)
    work = [0 if len(blocks[0]) <= len(blocks[1]) else 1]
    in_work = set(work)
    letters = _letters(rows, dead)
    while work:
        splitter = work.pop()
        in_work.discard(splitter)
        members = list(blocks[splitter])
        for inverse in letters:
            touched: Dict[int, List[int]] = {}
            for target in members:
                for source in inverse.get(target, ()):
                    touched.setdefault(block_of[source], []).append(source)
            for b, movers in touched.items():
                if len(movers) == len(blocks[b]):
                    continue
                new = len(blocks)
                blocks.append(set(movers))
                blocks[b].difference_update(movers)
                for q in movers:
                    block_of[q] = new
                if b in in_work or len(blocks[new]) <= len(blocks[b]):
                    work.append(new)
                    in_work.add(new)
                else:
                    work.append(b)
                    in_work.add(b)
    return block_of


def minimize(a: Dfa) -> Dfa:
    """The minimal DFA of ``a``'s language in canonical numbering (see the module docstring)."""
    live = _coreachable(a, _reachable(a))
    if 0 not in live:
        return nothing()
    # Renumber the live states densely and drop transitions into dead ones.
    index = {q: k for k, q in enumerate(sorted(live))}
    rows = [tuple((lo, hi, index[t]) for lo, hi, t in a.transitions[q] if t in index)
            for q in sorted(live)]
    accepting = {index[q] for q in live if q in a.accepting}
    block_of = _hopcroft(rows, accepting)
    representative: Dict[int, int] = {}
    for q in range(len(rows)):
        representative.setdefault(block_of[q], q)
    # Breadth-first from the start block, following transitions in code-point order.
    number = {block_of[0]: 0}
    queue = [block_of[0]]
    out_rows: List[Tuple[Transition, ...]] = []
    while len(out_rows) < len(queue):
        block = queue[len(out_rows)]
        row: List[Transition] = []
        for lo, hi, target in rows[representative[block]]:
            target_block = block_of[target]
            if target_block not in number:
                number[target_block] = len(queue)
                queue.append(target_block)
            _append_merged(row, lo, hi, number[target_block])
        out_rows.append(tuple(row))
    out_accepting = frozenset(number[block_of[q]] for q in accepting)
    return Dfa(tuple(out_rows), out_accepting)


# ----------------------------------------------------------------------------- back to IR

# An expression that would nest deeper than this is put in a rule of its own: later passes walk
# expressions recursively.
MAX_INLINE_DEPTH = 24
# A state reached from several places is inlined at each only when its expression is this small.
MAX_SHARED_INLINE_SIZE = 4


@dataclass(frozen=True)
class _Piece:
    """An expression with upper bounds on its nesting depth and node count."""

    expr: Expr
    depth: int
    size: int


_EMPTY_PIECE = _Piece(EMPTY, 1, 1)


def _measure(expr: Expr) -> _Piece:
    depth, size = 0, 0
    stack = [(expr, 1)]
    while stack:
        node, level = stack.pop()
        depth, size = max(depth, level), size + 1
        stack.extend((child, level + 1) for child in children(node))
    return _Piece(expr, depth, size)


def _then(first: _Piece, rest: _Piece) -> _Piece:
    """``first`` followed by ``rest``, merging repeats of one item (x x{a,b} = x{a+1,b+1})."""
    x, tail = first.expr, rest.expr
    if tail == EMPTY:
        return first
    size = first.size + rest.size + 1
    if isinstance(tail, Sequence):
        items, items_depth = tail.items, rest.depth - 1
    else:
        items, items_depth = (tail,), rest.depth
    head = items[0]
    if head == x:
        merged = Repeat(x, 2, 2)
    elif isinstance(head, Repeat) and head.expr == x:
        merged = Repeat(x, head.min + 1, None if head.max is None else head.max + 1)
    else:
        return _Piece(Sequence((x,) + items), 1 + max(first.depth, items_depth), size)
    if len(items) == 1:
        return _Piece(merged, first.depth + 1, first.size + 1)
    return _Piece(Sequence((merged,) + items[1:]), 1 + max(first.depth + 1, items_depth), size)


def _optional(piece: _Piece) -> _Piece:
    """``piece`` or the empty string; x{1,m} becomes x{0,m}, so that a chain of optional
    states (what a bounded repetition unrolls to) folds back into one repeat."""
    expr = piece.expr
    if isinstance(expr, Repeat) and expr.min <= 1:
        return _Piece(Repeat(expr.expr, 0, expr.max), piece.depth, piece.size)
    if isinstance(expr, Choice):
        return _Piece(Choice(expr.alternatives + (EMPTY,)), piece.depth, piece.size + 1)
    return _Piece(Repeat(expr, 0, 1), piece.depth + 1, piece.size + 1)


def _state_piece(loop: Optional[_Piece], moves: List[_Piece], accepting: bool) -> _Piece:
    """L(q) = S* (R1 L(q1) | R2 L(q2) | ... | ε if accepting), S the self-loop (Arden)."""
    if not moves:
        body = _EMPTY_PIECE
    elif len(moves) == 1:
        body = _optional(moves[0]) if accepting else moves[0]
    else:
        alternatives = tuple(m.expr for m in moves) + ((EMPTY,) if accepting else ())
        body = _Piece(Choice(alternatives), 1 + max(m.depth for m in moves),
                      1 + sum(m.size for m in moves) + accepting)
    if loop is None:
        return body
    star = _Piece(Repeat(loop.expr, 0, None), loop.depth + 1, loop.size + 1)
    return _then(star, body)


def _grouped_moves(a: Dfa) -> List[List[Tuple[int, Ranges]]]:
    """Per state, (target, all ranges leading there), targets in order of their first range."""
    out = []
    for row in a.transitions:
        groups: Dict[int, List[Range]] = {}
        for lo, hi, target in row:
            groups.setdefault(target, []).append((lo, hi))
        out.append([(target, tuple(ranges)) for target, ranges in groups.items()])
    return out


def _live_states(n: int, moves: List[List[Tuple[int, _Piece]]], accepting) -> Set[int]:
    """States reachable from the start that can still reach an accepting state."""
    def step(q: int) -> List[int]:
        return [target for target, _ in moves[q]]
    return _backward(accepting, _forward([0], step), step)


def _successors_first(states: Seq[int], successors: Dict[int, List[int]]) -> List[int]:
    """A post-order of the (acyclic) graph: every state after all its successors."""
    done: Set[int] = set()
    order: List[int] = []
    for root in states:
        if root in done:
            continue
        done.add(root)
        stack = [(root, iter(successors[root]))]
        while stack:
            q, pending = stack[-1]
            nxt = next(pending, None)
            if nxt is None:
                stack.pop()
                order.append(q)
            elif nxt not in done:
                done.add(nxt)
                stack.append((nxt, iter(successors[nxt])))
    return order


def dfa_to_expr(a: Dfa, char: Callable[[Ranges], Optional[Expr]],
                new_rule: Callable[[str], RuleRef], hint: str, *,
                define_rule: Callable[[RuleRef, Expr], None]) -> Optional[Expr]:
    """``a``'s language as IR: an expression for the start state, or None if it is empty.

    ``char(ranges)`` spells one code point of ``ranges`` (sorted, disjoint, surrogate-free); it
    is called once per distinct set of ranges that leads from one state to one target, and may
    return None when no spelling exists (those moves are dropped). States become right-linear
    rules ``q ::= S* (char(R1) q1 | char(R2) q2 | ... | "" if accepting)``; a rule is made only
    where needed: ``new_rule(name_hint)`` reserves a rule and returns its reference, and
    ``define_rule(ref, body)`` gives it its body once the bodies it refers to exist (the rules
    can be mutually recursive, so a name is needed before its body). A rule is made for a state
    on a cycle that is entered from several places, for a state reached from several places
    whose expression is not tiny, and where inlining would nest too deep; every other state is
    written inline where it is used, and a self-loop is a repeat. Deterministic: the same
    arguments give the same calls in the same order. Hints are ``f"{hint}_{k}"``, k = 1, 2, ...
    """
    n = a.num_states
    spelled: Dict[Ranges, Optional[_Piece]] = {}
    moves: List[List[Tuple[int, _Piece]]] = []
    for row in _grouped_moves(a):
        out = []
        for target, ranges in row:
            if ranges not in spelled:
                expr = char(ranges)
                spelled[ranges] = None if expr is None else _measure(expr)
            if spelled[ranges] is not None:
                out.append((target, spelled[ranges]))
        moves.append(out)
    live = _live_states(n, moves, a.accepting)
    if 0 not in live:
        return None
    states = sorted(live)
    moves = [[(t, p) for t, p in moves[q] if t in live] if q in live else [] for q in range(n)]
    successors = {q: [t for t, _ in moves[q] if t != q] for q in states}
    in_degree = {q: 1 if q == 0 else 0 for q in states}   # the start is entered from outside
    for q in states:
        for t in successors[q]:
            in_degree[t] += 1

    refs: Dict[int, RuleRef] = {}

    def make_rule(q: int) -> None:
        refs[q] = new_rule(f"{hint}_{len(refs) + 1}")

    # Every cycle passes through a state entered from two places (from the cycle and from the
    # way in), so giving those rules leaves the inlined states acyclic. Self-loops do not count:
    # they are written as repeats.
    cyclic = {q for component in strongly_connected_components(states, successors)
              if len(component) > 1 for q in component}
    for q in states:
        if q in cyclic and in_degree[q] >= 2:
            make_rule(q)

    inline_successors = {q: [t for t in successors[q] if t not in refs] for q in states}
    pieces: Dict[int, _Piece] = {}
    for q in _successors_first(states, inline_successors):
        loop: Optional[_Piece] = None
        parts: List[_Piece] = []
        for target, spelling in moves[q]:
            if target == q:
                loop = spelling
                continue
            if target in refs:
                rest = _Piece(refs[target], 1, 1)
            else:
                rest = pieces[target]
            parts.append(_then(spelling, rest))
        piece = _state_piece(loop, parts, q in a.accepting)
        pieces[q] = piece
        too_shared = in_degree[q] >= 2 and piece.size > MAX_SHARED_INLINE_SIZE
        if q not in refs and q != 0 and (too_shared or piece.depth > MAX_INLINE_DEPTH):
            make_rule(q)
    for q, ref in refs.items():
        define_rule(ref, pieces[q].expr)
    return refs[0] if 0 in refs else pieces[0].expr
