"""Grammar IR -> byte-level pushdown automaton (stage 2 of the pipeline).

In:  a ``Grammar`` that has been through ``gxg.compiler.passes`` (a root wrapper that nothing
     references, no dead rules, and no left recursion: a grammar prepared without its
     elimination raises ``LeftRecursionError`` where it has some).
Out: an ``Automaton``: flat numpy tables, the layout that the mask cache, the CPU runtime and
     the GPU kernels all read.
Caches (process-wide, bounded, each saying so where it is defined): the class fragments, and
the minimal DFAs of rule bodies, which grammars of one family repeat (``clear_rule_dfa_cache``).
A ``Grammar.pruned`` grammar (``prepare``'s output) skips the dead-part check.

The machine
-----------
Every rule becomes a deterministic FSM over bytes whose edges are byte classes or rule
references; a PDA node is (rule, FSM state), numbered densely over all rules. A *stack* is a
list of nodes ``[n_0, ..., n_k]``: ``n_k`` (the top) is the current position in its rule, each
``n_i`` below it is the return node in the caller, where matching continues once the rule above
it completes. Moves:

* byte ``b`` (scan): ``n' = next_node[n_k, byte_class[b]]``; if ``n' >= 0`` the stack becomes
  ``[..., n']``;
* push (predict), for each rule-reference edge ``(S, ret)`` of ``n_k``:
  ``[..., ret, rule_start[S]]`` — or, when ``ret`` is a *pure return* node
  (``is_pure_return[ret]``: final, no byte edge, no reference edge), the tail call
  ``[..., rule_start[S]]`` (same language, and right recursion keeps a constant depth);
* pop (complete), when ``is_final[n_k]``: ``[..., n_{k-1}]``; when ``k == 0`` the root rule has
  completed (the input so far is a sentence; a stop token may follow).

The *closure* of a stack is everything reachable by push and pop moves. The live tops after a
byte are the stacks in the closure whose top node has a byte edge (``is_scannable``). Closure
terminates because the passes remove left recursion (also hidden behind nullable prefixes);
``build_automaton`` checks this and raises ``LeftRecursionError`` (a ``GrammarError``) if a
push cycle remains.

Tables (``N`` nodes, ``C`` byte classes, ``R`` rules, ``E`` reference edges)
-------------------------------------------------------------------------
byte_class      uint8  [256]    byte -> equivalence class (bytes no edge distinguishes share one)
next_node       int32  [N, C]   scan target, -1 = no edge
ref_offsets     int32  [N + 1]  CSR over nodes of the rule-reference edges
ref_rule        int32  [E]      referenced rule
ref_return      int32  [E]      node to continue at in the caller once the rule completes
is_final        bool   [N]      the rule may complete at this node
is_scannable    bool   [N]      the node has at least one byte edge
is_pure_return  bool   [N]      final, no byte edge, no reference edge (tail-call target)
token_set       int32  [N]      token nodes (below): index of the node's token set, -1 otherwise
token_next      int32  [N]      token nodes: the node a token of the set moves to, -1 otherwise
token_set_offsets int32 [K+1]   CSR over the K token sets of their ids (sorted)
token_set_ids   int32  [..]
token_set_negated bool [K]      the set is "every token but these" (``ExcludeToken``)
token_count_next int32 [N]      counter nodes (below): the next counter, itself for the last;
                                -1 for every other node
run_twin        int32  [N]      a node inside a bounded run (below) after k >= lo units: the node
                                at the same place in the run after lo units; -1 otherwise
run_room        int32  [N]      such a node's units still allowed (hi - k); -1 otherwise
node_rule       int32  [N]      rule of each node
rule_start      int32  [R]      start node of each rule
rule_nullable   bool   [R]      the rule derives the empty string
rule_first      bool   [R, 256] bytes that can start a non-empty string of the rule
rule_lookahead  int32  [R]      rule id of the rule's lookahead assertion, -1 if none (the
                                lookahead expression is compiled as an unreferenced rule)
rule_names      tuple[str]      for messages and debugging
root_rule       int             the root wrapper (referenced by nothing)

Token-level items
-----------------
A ``TokenSet`` leaf (``Token(...)`` / ``ExcludeToken(...)``) matches one whole token, never
bytes. Each distinct set becomes a two-node rule of its own (after the grammar's rules and
lookaheads), referenced where the leaf stood: its start node is a *token node* (no byte edge,
not final, but scannable, so a closure keeps it as a top) whose ``token_next`` is the rule's
final node. A token t moves a stack whose top is a token node to ``token_next`` when t is in the
set (the runtimes read membership from the node's accept row: the mask cache gives a token node
exactly its set's matchable tokens); the bytes of a token never move it, so a token whose bytes
reach a token node part-way dies there, and one that reaches it exactly at its end survives.

Token budgets
-------------
A rule with ``max_tokens=N`` (``gxg.grammar.ir``) is built as two rules: the rule itself
becomes ``R ::= R#counted`` and ``R#counted`` gets its body. The node that reference returns
to is the first *counter node* C(-1): final, no edges, and never a pure return, so every
occurrence of the rule keeps it as the frame right below its own top. N more counter nodes
C(0) .. C(N-1) follow, one single-node rule each, after the token-set rules;
``token_count_next`` chains them (the last to itself). At each token boundary (after a token
is accepted, and after a reset: the first token starts there) the runtimes move every top
whose parent frame is a counter to the next counter; a top under the last counter is
*exhausted* (its occurrence has N tokens). As in XGrammar, the exhausted tops are dropped when
anything else is left (another top, or the end of the grammar: an occurrence that can end has
its exit among the tops, made by the closure), and all kept when nothing is (best effort: they
go on until one can end). C(-1) counts nothing yet: a token that enters the rule part-way
does not count, one that starts with it does.

This needs the top of an occurrence right above its counter: the body must be right-linear
(``gxg.grammar.rule_attributes`` writes it so): every reference reachable from ``R#counted``
is a tail call, and none reaches a token set or a budgeted rule; the builder checks it and
raises GrammarError otherwise.

Bounded runs
------------
A rule ``open unit{lo,hi} close`` whose unit is prefix-free is built as a chain of the unit's
own DFA (``_bounded_run_dfa``): node (k, p) is place p of the unit after k whole units. Two
nodes (k, p) and (k', p) with lo <= k, k' accept the same bytes as long as fewer than
min(hi - k, hi - k') units follow, so a token of b bytes (at most b units) is classified alike
from both when both rooms are at least b: the mask cache computes one entry for all the nodes
whose room is at least the vocabulary's longest token (``run_twin``, ``run_room``).

Construction (``build_automaton``)
----------------------------------
1. Each rule body (and each lookahead, as an extra rule) -> Thompson NFA over bytes, with
   epsilon edges and rule-reference edges. Character classes are lowered to exact, well-formed
   UTF-8 byte-range sequences; repetitions are unrolled (a size check first, so a huge
   ``{m,n}`` fails fast with ``GrammarError`` instead of exhausting memory).
2. Subset construction per rule; the alphabet is the rule's byte intervals plus one symbol per
   referenced rule, so a node has at most one reference edge per referenced rule.
3. Dead parts are dropped across the whole grammar: a rule that derives no string is
   *unproductive*, a node that cannot reach completion is *dead*; byte edges into dead nodes and
   reference edges to unproductive rules or dead return nodes are removed. Every stack the
   runtime keeps can therefore still complete, so "some live stack" means "viable prefix".
4. Hopcroft minimisation per rule (node merging, paper section 3.4): finality, byte targets and
   reference targets must agree. Rules are never merged with each other.
   Steps 1, 2 and 4 of a grammar with no dead parts run in C (``csrc/automaton_build.c``:
   ``_c_program_dfa``, from the body's program, and ``_minimal_dfa``) where a C compiler is
   found, with the Python construction as reference and fallback: one NFA, edge for edge, and
   one DFA, state for state, since both number the minimal DFA's states breadth-first with
   each state's moves in letter order.
5. Tables: global byte classes are the common refinement of every rule's coarsest byte
   partition (in C too, where it is built: ``_c_byte_tables``); nodes are numbered rule by
   rule, breadth-first from the rule's start node, so each rule's nodes are contiguous and its
   start node comes first.
6. Analyses: nullability and the epsilon-reachable positions of each rule (through nullable
   references), the left-recursion check on them, then FIRST sets in dependency order.
"""
from __future__ import annotations

import array
import collections
import contextlib
import ctypes
import functools
import gc
import threading
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Sequence as Seq, Tuple, Union

import numpy as np

from gxg import compile_budget, native

BUDGET_CHECK_EVERY = 1024  # rounds of a long loop between two checks of the compile deadline
from gxg.grammar.ir import (
    children,
    CharClass,
    Choice,
    Expr,
    Grammar,
    GrammarError,
    Literal,
    Repeat,
    RuleRef,
    Sequence,
    TokenSet,
)

__all__ = ["Automaton", "build_automaton", "clear_rule_dfa_cache", "DEFAULT_MAX_NODES",
           "LeftRecursionError", "utf8_byte_sequences"]

# Limit on automaton nodes, checked per repetition (NFA states once unrolled) and per grammar
# (DFA nodes). An unrolled {m,n} costs about n copies of its body: a JSON string with maxLength
# 10000 needs 80k nodes and builds in seconds. The builder's peak memory is about 1.2 kB per
# node, so the default allows ~600 MB; beyond it GrammarError says what was too large.
DEFAULT_MAX_NODES = 500_000

# A rule body as a program (``_program``, made from the rule DFA cache's key on a miss;
# ``csrc/automaton_build.c`` builds the NFA from it): name -> (code, ints per operation).
PROGRAM_OPS = {"LITERAL": (0, 3), "CLASS": (1, 2), "REF": (2, 2), "SEQUENCE": (3, 2),
               "CHOICE": (4, 2), "REPEAT": (5, 3), "BACK": (6, 2)}
_OP_LITERAL, _OP_CLASS, _OP_REF, _OP_SEQUENCE, _OP_CHOICE, _OP_REPEAT, _OP_BACK = (
    code for code, _ in PROGRAM_OPS.values())
# The C construction's status codes; all but OK, TOO_MANY and OUT_OF_TIME ask for the Python one.
C_STATUS = {"RULE_DFA_OK": 0, "TOO_MANY": -1, "OUT_OF_TIME": -2, "NOT_TRIM": -3,
            "NO_MEMORY": -4, "NOT_CONTIGUOUS": -5, "NFA_TOO_LARGE": -6, "BAD_PROGRAM": -7}
# csrc/automaton_build.c reads both from here, as -D flags of its build
NATIVE_DEFINES = (("GXG_AUTOMATON_DEFINES", 1), *C_STATUS.items(),
                  *((f"OP_{name}", code) for name, (code, _) in PROGRAM_OPS.items()),
                  *((f"OP_{name}_WIDTH", width) for name, (_, width) in PROGRAM_OPS.items()))


def _native(symbol: str, argtypes: tuple, restype=None):
    """``symbol`` of ``csrc/automaton_build.c`` built with this module's definitions, or None
    (no C build: the Python construction runs)."""
    return native.function("automaton_build.c", symbol, argtypes, restype, NATIVE_DEFINES)


class LeftRecursionError(GrammarError):
    """The grammar has left recursion (a rule can push itself again before reading a byte):
    ``gxg.compiler.passes.prepare`` removes it; ``build_automaton`` checks every grammar."""


class LazyRows(dict):
    """The rows of a 2-D table as Python lists, each made when first indexed (``rows[node]``).
    A cache that says so: it only grows, to the table's size at most. Walks read few of a
    grammar's rows (lazy mask entries start at the nodes that stacks reach), and turning the
    whole ``next_node`` into lists was most of what a median MaskBench compile spent after the
    automaton (~1 ms of ~14)."""

    __slots__ = ("_table",)

    def __init__(self, table: np.ndarray):
        super().__init__()
        self._table = table

    def __missing__(self, row: int) -> list:
        values = self[row] = self._table[row].tolist()
        return values


@dataclass(frozen=True, eq=False)
class AutomatonLists:
    """An ``Automaton``'s tables as Python lists (``Automaton.lists``; ``next_node`` as rows
    made on first use), plus the reference edges per node and each rule's return sites
    (``callers``: rule -> sorted return nodes)."""
    next_node: LazyRows
    byte_class: list
    is_final: list
    is_scannable: list
    is_pure_return: list
    node_rule: list
    rule_start: list
    rule_lookahead: list
    refs: list           # [N] tuple of (rule, return node)
    callers: dict
    # [N] a plain node scans a byte, is not final and references no rule: a stack whose top
    # it is closes to itself alone (the accept's fast path, ops/reference.py _plain_step)
    is_plain: list
    token_next: list     # [N] a token node's move target, -1 (module docstring)
    token_count_next: list  # [N] a counter node's next counter, -1 (module docstring)
    counted_rules: frozenset  # the rules of counter nodes (each budgeted rule and its counters)

    @staticmethod
    def of(a: "Automaton") -> "AutomatonLists":
        pairs = list(zip(a.ref_rule.tolist(), a.ref_return.tolist()))
        # a tuple per node that references rules (~10 % of a JSON schema's nodes), the shared
        # () elsewhere: a list of 60,000 tuples took ~6 ms
        has_refs = a.ref_offsets[1:] > a.ref_offsets[:-1]
        with_refs = np.flatnonzero(has_refs)
        refs: list = [()] * len(has_refs)
        for node, start, stop in zip(with_refs.tolist(), a.ref_offsets[with_refs].tolist(),
                                     a.ref_offsets[with_refs + 1].tolist()):
            refs[node] = tuple(pairs[start:stop])
        callers: Dict[int, set] = {}
        for rule, ret in pairs:
            callers.setdefault(rule, set()).add(ret)
        token_next = a.token_next.tolist()
        is_plain = (a.is_scannable & ~a.is_final & ~has_refs & (a.token_next < 0)).tolist()
        is_final, is_scannable = a.is_final.tolist(), a.is_scannable.tolist()
        return AutomatonLists(
            next_node=LazyRows(a.next_node), byte_class=a.byte_class.tolist(),
            is_final=is_final, is_scannable=is_scannable,
            is_pure_return=a.is_pure_return.tolist(), node_rule=a.node_rule.tolist(),
            rule_start=a.rule_start.tolist(),
            rule_lookahead=(a.rule_lookahead.tolist() if hasattr(a, "rule_lookahead")
                            else [-1] * len(a.rule_start)),  # an arena's copy keeps none
            refs=refs, callers={rule: sorted(rets) for rule, rets in callers.items()},
            is_plain=is_plain,
            token_next=token_next, token_count_next=a.token_count_next.tolist(),
            counted_rules=frozenset(a.node_rule[a.token_count_next >= 0].tolist()))


@dataclass(frozen=True, eq=False)
class Automaton:
    byte_class: np.ndarray
    next_node: np.ndarray
    ref_offsets: np.ndarray
    ref_rule: np.ndarray
    ref_return: np.ndarray
    is_final: np.ndarray
    is_scannable: np.ndarray
    is_pure_return: np.ndarray
    node_rule: np.ndarray
    rule_start: np.ndarray
    rule_nullable: np.ndarray
    rule_first: np.ndarray
    rule_lookahead: np.ndarray
    rule_names: Tuple[str, ...]
    root_rule: int
    # token-level items (module docstring); None (an automaton serialized before they existed):
    # no token node
    token_set: Optional[np.ndarray] = None
    token_next: Optional[np.ndarray] = None
    token_set_offsets: Optional[np.ndarray] = None
    token_set_ids: Optional[np.ndarray] = None
    token_set_negated: Optional[np.ndarray] = None
    # token budgets (module docstring); None (serialized before they existed): no counter
    token_count_next: Optional[np.ndarray] = None
    # bounded runs (module docstring); None (serialized before they existed): no run
    run_twin: Optional[np.ndarray] = None
    run_room: Optional[np.ndarray] = None

    def __post_init__(self) -> None:
        for name in ("token_count_next", "run_twin", "run_room"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.full(self.next_node.shape[0], -1,
                                                       dtype=np.int32))
        if self.token_set is None:
            none = np.full(self.next_node.shape[0], -1, dtype=np.int32)
            object.__setattr__(self, "token_set", none)
            object.__setattr__(self, "token_next", none.copy())
            object.__setattr__(self, "token_set_offsets", np.zeros(1, dtype=np.int32))
            object.__setattr__(self, "token_set_ids", np.zeros(0, dtype=np.int32))
            object.__setattr__(self, "token_set_negated", np.zeros(0, dtype=bool))

    @property
    def token_nodes(self) -> np.ndarray:
        """The token nodes, ascending."""
        return np.flatnonzero(self.token_set >= 0).astype(np.int32)

    def token_set_of(self, node: int) -> TokenSet:
        """The token set a token node matches."""
        k = int(self.token_set[node])
        if k < 0:
            raise KeyError(f"node {node} is not a token node")
        lo, hi = int(self.token_set_offsets[k]), int(self.token_set_offsets[k + 1])
        return TokenSet(tuple(self.token_set_ids[lo:hi].tolist()),
                        bool(self.token_set_negated[k]))

    @property
    def num_nodes(self) -> int:
        return int(self.next_node.shape[0])

    @property
    def num_classes(self) -> int:
        return int(self.next_node.shape[1])

    @property
    def num_rules(self) -> int:
        return len(self.rule_names)

    def refs(self, node: int):
        """The (rule, return node) reference edges leaving ``node``."""
        return list(self.lists.refs[node])

    @functools.cached_property
    def lists(self) -> "AutomatonLists":
        """The tables as Python lists, built once per automaton (a cache, kept with it): the
        host walkers index them per byte, where list indexing beats numpy scalar indexing,
        and several walkers and tables share them."""
        return AutomatonLists.of(self)

    def step_byte(self, node: int, byte: int) -> int:
        return int(self.next_node[node, self.byte_class[byte]])

    def rule_id(self, name: str) -> int:
        """The id of the rule called ``name`` (lookahead rules are ``<rule>#lookahead``)."""
        try:
            return self.rule_names.index(name)
        except ValueError:
            raise KeyError(name) from None

    def rule_nodes(self, rule: int) -> range:
        """The nodes of ``rule``: contiguous, its start node first."""
        start = int(self.rule_start[rule])
        end = int(self.rule_start[rule + 1]) if rule + 1 < self.num_rules else self.num_nodes
        return range(start, end)

    def byte_edges(self, node: int) -> List[Tuple[int, int, int]]:
        """The byte edges of ``node`` as ``(lo, hi, target)`` inclusive byte ranges."""
        targets = self.next_node[node, self.byte_class]
        edges: List[Tuple[int, int, int]] = []
        for byte, target in enumerate(targets.tolist()):
            if target < 0:
                continue
            if edges and edges[-1][1] == byte - 1 and edges[-1][2] == target:
                edges[-1] = (edges[-1][0], byte, target)
            else:
                edges.append((byte, byte, target))
        return edges

    def dump(self) -> str:
        """A readable listing of every node, for debugging."""
        lines = [f"{self.num_nodes} nodes, {self.num_classes} byte classes, "
                 f"{self.num_rules} rules, root {self.rule_names[self.root_rule]!r}"]
        for rule in range(self.num_rules):
            flags = []
            if self.rule_nullable[rule]:
                flags.append("nullable")
            if self.rule_lookahead[rule] >= 0:
                flags.append(f"lookahead={self.rule_names[self.rule_lookahead[rule]]}")
            lines.append(f"rule {rule} {self.rule_names[rule]!r} {' '.join(flags)}".rstrip())
            for node in self.rule_nodes(rule):
                parts = [f"  {node}{'*' if self.is_final[node] else ''}:"]
                parts += [f"{_byte_range_text(lo, hi)}->{target}"
                          for lo, hi, target in self.byte_edges(node)]
                parts += [f"<{self.rule_names[callee]}>->{ret}" for callee, ret in self.refs(node)]
                if self.token_next[node] >= 0:
                    parts.append(f"{self.token_set_of(node)}->{self.token_next[node]}")
                lines.append(" ".join(parts))
        return "\n".join(lines)


def _byte_range_text(lo: int, hi: int) -> str:
    def one(byte: int) -> str:
        char = chr(byte)
        return char if 0x21 <= byte < 0x7F and char not in "[]-\\" else f"\\x{byte:02x}"
    return f"[{one(lo)}]" if lo == hi else f"[{one(lo)}-{one(hi)}]"


# ----------------------------------------------------------------------------- UTF-8 lowering

# Code points encoded with 1, 2, 3 and 4 bytes; smaller values in a longer form are overlong.
_UTF8_LENGTH_SPANS = ((0x0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, 0x10FFFF))
_SURROGATES = (0xD800, 0xDFFF)

ByteRangeSequence = Tuple[Tuple[int, int], ...]


def _utf8_encode(code_point: int, length: int) -> Tuple[int, ...]:
    """The ``length``-byte UTF-8 form of ``code_point`` (no checks; surrogates allowed)."""
    if length == 1:
        return (code_point,)
    lead_marker = (0xC0, 0xE0, 0xF0)[length - 2]
    tail = [0x80 | ((code_point >> (6 * i)) & 0x3F) for i in range(length - 2, -1, -1)]
    return (lead_marker | (code_point >> (6 * (length - 1))),) + tuple(tail)


def utf8_byte_sequences(lo: int, hi: int) -> List[ByteRangeSequence]:
    """Byte-range sequences whose strings are exactly the UTF-8 encodings of ``lo..hi``.

    Each sequence is a tuple of inclusive byte ranges, one per byte position; the sequences are
    disjoint and their union is the set of well-formed encodings (no overlong forms, no
    surrogates, nothing above U+10FFFF) of the code points in ``lo..hi``.

    Method: split the range where the encoding length changes, then split each piece until it is
    a "rectangle": for every trailing group of continuation bytes, either the bytes before it
    agree at both ends or the group spans its full 80..BF range at both ends. A rectangle's
    encodings are exactly the products of per-position ranges between the two end encodings.
    """
    pieces = []
    for span_lo, span_hi in (_clip(lo, hi, s) for s in _UTF8_LENGTH_SPANS):
        if span_lo > span_hi:
            continue
        for part_lo, part_hi in _without_surrogates(span_lo, span_hi):
            pieces.append((part_lo, part_hi))
    sequences: List[ByteRangeSequence] = []
    for piece_lo, piece_hi in pieces:
        length = _utf8_length(piece_lo)
        todo = [(piece_lo, piece_hi)]
        while todo:
            a, b = todo.pop()
            split = _rectangle_split(a, b, length)
            if split is None:
                first, last = _utf8_encode(a, length), _utf8_encode(b, length)
                sequences.append(tuple(zip(first, last)))
            else:
                todo.append((split, b))  # popped after the lower half: output stays sorted
                todo.append((a, split - 1))
    return sequences


def _clip(lo: int, hi: int, span: Tuple[int, int]) -> Tuple[int, int]:
    return max(lo, span[0]), min(hi, span[1])


def _without_surrogates(lo: int, hi: int) -> List[Tuple[int, int]]:
    if hi < _SURROGATES[0] or lo > _SURROGATES[1]:
        return [(lo, hi)]
    parts = []
    if lo < _SURROGATES[0]:
        parts.append((lo, _SURROGATES[0] - 1))
    if hi > _SURROGATES[1]:
        parts.append((_SURROGATES[1] + 1, hi))
    return parts


def _utf8_length(code_point: int) -> int:
    for length, (_, span_hi) in enumerate(_UTF8_LENGTH_SPANS, start=1):
        if code_point <= span_hi:
            return length
    raise ValueError(f"not a code point: {code_point:#x}")


def _rectangle_split(lo: int, hi: int, length: int) -> Optional[int]:
    """Where to split ``lo..hi`` (same encoding length) so both halves get closer to rectangles;
    None if it already is one. Returns the first code point of the upper half."""
    for trailing in range(1, length):
        low_bits = (1 << (6 * trailing)) - 1
        if lo & ~low_bits == hi & ~low_bits:
            continue  # the bytes before this group agree; only the group itself varies
        if lo & low_bits != 0:
            return (lo | low_bits) + 1
        if hi & low_bits != low_bits:
            return hi & ~low_bits
    return None


# A class lowered to a small NFA fragment with shared suffixes: edges (from, lo, hi, to) where
# 0 = the fragment's entry, 1 = its exit, 2.. = inner states. Cached per set of code points.
@dataclass(frozen=True)
class _ClassFragment:
    num_inner: int
    edges: Tuple[Tuple[int, int, int, int], ...]
    #: (num_inner, number of edges, the edges' ints): the C construction's class table entry
    flat: Tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "flat", (self.num_inner, len(self.edges),
                                          *(x for edge in self.edges for x in edge)))


# A cache across grammars (fragments are immutable): the same classes — a JSON string's
# characters, digits — recur in every schema, and building their UTF-8 automaton is most of a
# small grammar's NFA time.
@functools.lru_cache(maxsize=4096)
def _class_fragment(ranges: Tuple[Tuple[int, int], ...]) -> _ClassFragment:
    suffix_state: Dict[ByteRangeSequence, int] = {}
    edges: List[Tuple[int, int, int, int]] = []
    for lo, hi in ranges:
        for sequence in utf8_byte_sequences(lo, hi):
            first_lo, first_hi = sequence[0]
            edges.append((0, first_lo, first_hi, _suffix_state(sequence[1:], suffix_state, edges)))
    return _ClassFragment(len(suffix_state), tuple(edges))


def _suffix_state(suffix: ByteRangeSequence, suffix_state: Dict[ByteRangeSequence, int],
                  edges: List[Tuple[int, int, int, int]]) -> int:
    """The state of ``_class_fragment`` whose remaining language is exactly ``suffix``: shared
    by every sequence that ends the same way (continuation bytes make this common); new
    states' edges go to ``edges``. (A module function: a closure that calls itself is a
    reference cycle, left for the collector.)"""
    if not suffix:
        return 1
    if suffix not in suffix_state:
        following = _suffix_state(suffix[1:], suffix_state, edges)  # depth <= 3
        suffix_state[suffix] = len(suffix_state) + 2
        lo, hi = suffix[0]
        edges.append((suffix_state[suffix], lo, hi, following))
    return suffix_state[suffix]


# ----------------------------------------------------------------------------- NFA


class _Nfa:
    """Thompson NFA of one rule: state 0 starts, state 1 accepts. Edges are flat int lists, in
    the order they were added (what the C construction reads as it is): byte edges (source, lo,
    hi, target), reference edges (source, rule, target), epsilon edges (source, target)."""

    __slots__ = ("byte_edges", "ref_edges", "epsilon", "num_states")

    def __init__(self) -> None:
        self.byte_edges: List[int] = []
        self.ref_edges: List[int] = []
        self.epsilon: List[int] = []
        self.num_states = 2

    def new_state(self) -> int:
        self.num_states += 1
        return self.num_states - 1


class _NfaBuilder:
    """Builds one rule's NFA. Every ``_place(expr, s, t)`` adds paths from ``s`` to ``t`` over
    fresh inner states and never adds an edge into ``s`` or out of ``t``; that is what makes it
    safe for choice alternatives to share ``s`` and ``t`` (loops get fresh states of their own)."""

    def __init__(self, rule_name: str, rule_ids: Dict[str, int], max_nodes: int,
                 fragments: Dict[CharClass, _ClassFragment],
                 token_rule_ids: Optional[Dict[TokenSet, int]] = None):
        self.rule_name = rule_name
        self.rule_ids = rule_ids
        # a token set is a reference to its rule (the caller numbers the rules as they come)
        self.token_rule_ids = {} if token_rule_ids is None else token_rule_ids
        self.max_nodes = max_nodes
        self.fragments = fragments  # shared across rules: classes recur (e.g. [0-9])
        self.sizes: Dict[int, int] = {}  # id(expr) -> fresh states its placement creates

    def build(self, body: Expr) -> _Nfa:
        """The rule's NFA (``num_states - 2`` fresh states: ``size_of(body)``). Raises
        GrammarError, before unrolling it, for a repetition too large (the innermost first) and
        for a rule that needs more than ``max_nodes`` states. Sizes are computed only where
        a placement unrolls copies (most bodies have no such repetition, and their states are
        counted as they are placed), and for the message."""
        nfa = _Nfa()
        todo = [(body, 0, 1)]
        placed = 0
        while todo:
            placed += 1
            if placed % BUDGET_CHECK_EVERY == 0:  # one rule can unroll to many nodes
                compile_budget.check("the automaton", self.rule_name)
            expr, source, target = todo.pop()
            if isinstance(expr, Repeat) and (expr.min > 1 or (expr.max or 0) > 1) and \
                    nfa.num_states - 2 + self.size_of(expr) > self.max_nodes:
                self._too_large(body)  # the states so far and this repetition's: too many
            self._place(nfa, expr, source, target, todo)
        if nfa.num_states - 2 > self.max_nodes:
            self._too_large(body)
        return nfa

    def _too_large(self, body: Expr) -> None:
        total = self.size_of(body)  # raises first for the innermost repetition too large
        raise GrammarError(
            f"rule {self.rule_name!r} would need {total} automaton nodes, more than the "
            f"limit of {self.max_nodes}")

    def fragment(self, expr: CharClass) -> _ClassFragment:
        fragment = self.fragments.get(expr)
        if fragment is None:
            fragment = self.fragments[expr] = _class_fragment(expr.effective_ranges())
        return fragment

    # -- sizes (checked before anything is unrolled)

    def size_of(self, root: Expr) -> int:
        """Fresh NFA states that placing ``root`` creates; post-order, so the innermost
        repetition that is too large is the one reported."""
        sizes = self.sizes
        stack: List[Tuple[Expr, bool]] = [(root, False)]
        while stack:
            expr, children_done = stack.pop()
            if id(expr) in sizes:
                continue
            kids = children(expr)
            if not children_done and kids:
                stack.append((expr, True))
                stack.extend((child, False) for child in kids)
                continue
            sizes[id(expr)] = self._own_size(expr)
        return sizes[id(root)]

    def _own_size(self, expr: Expr) -> int:
        sizes = self.sizes
        if isinstance(expr, Literal):
            return max(len(expr.data) - 1, 0)
        if isinstance(expr, CharClass):
            return self.fragment(expr).num_inner
        if isinstance(expr, (RuleRef, TokenSet)):
            return 0
        if isinstance(expr, Sequence):
            return len(expr.items) - 1 + sum(sizes[id(item)] for item in expr.items)
        if isinstance(expr, Choice):
            return sum(sizes[id(alternative)] for alternative in expr.alternatives)
        if isinstance(expr, Repeat):
            body = sizes[id(expr.expr)]
            if expr.max is None:
                size = expr.min + 2 + (expr.min + 1) * body
            else:
                size = expr.max - 1 + expr.max * body
            if size > self.max_nodes:
                raise GrammarError(
                    f"rule {self.rule_name!r}: the repetition {describe_expr(expr)} would need "
                    f"{size} automaton nodes, more than the limit of {self.max_nodes}")
            return size
        raise TypeError(f"not a grammar expression: {expr!r}")

    # -- placement

    def _place(self, nfa: _Nfa, expr: Expr, source: int, target: int, todo: list) -> None:
        if isinstance(expr, Literal):
            data = expr.data
            if not data:
                nfa.epsilon += (source, target)
                return
            state = source
            for index, byte in enumerate(data):
                following = target if index == len(data) - 1 else nfa.new_state()
                nfa.byte_edges += (state, byte, byte, following)
                state = following
        elif isinstance(expr, CharClass):
            fragment = self.fragment(expr)
            states = [source, target] + [nfa.new_state() for _ in range(fragment.num_inner)]
            edges = nfa.byte_edges
            for origin, lo, hi, destination in fragment.edges:
                edges += (states[origin], lo, hi, states[destination])
        elif isinstance(expr, RuleRef):
            nfa.ref_edges += (source, self.rule_ids[expr.name], target)
        elif isinstance(expr, TokenSet):
            nfa.ref_edges += (source, self.token_rule_ids[expr], target)
        elif isinstance(expr, Sequence):
            state = source
            for index, item in enumerate(expr.items):
                following = target if index == len(expr.items) - 1 else nfa.new_state()
                todo.append((item, state, following))
                state = following
        elif isinstance(expr, Choice):
            for alternative in expr.alternatives:
                todo.append((alternative, source, target))
        elif isinstance(expr, Repeat):
            self._place_repeat(nfa, expr, source, target, todo)
        else:
            raise TypeError(f"not a grammar expression: {expr!r}")

    @staticmethod
    def _place_repeat(nfa: _Nfa, expr: Repeat, source: int, target: int, todo: list) -> None:
        body, low, high = expr.expr, expr.min, expr.max
        if high is None:
            # low mandatory copies, then a loop on fresh states: entry -body-> back -eps-> entry
            state = source
            for _ in range(low):
                following = nfa.new_state()
                todo.append((body, state, following))
                state = following
            entry, back = nfa.new_state(), nfa.new_state()
            nfa.epsilon += (state, entry, back, entry, entry, target)
            todo.append((body, entry, back))
            return
        # high copies in a chain; after the low-th one, every boundary may skip to the end
        state = source
        for index in range(1, high + 1):
            following = target if index == high else nfa.new_state()
            todo.append((body, state, following))
            if index - 1 >= low:
                nfa.epsilon += (state, target)
            state = following



def describe_expr(expr: Expr, limit: int = 60) -> str:
    """Short EBNF-like text of ``expr`` for error messages (cut at ``limit`` characters)."""
    text = _expr_text(expr, depth=0)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _expr_text(expr: Expr, depth: int) -> str:
    if depth > 6:  # the message is cut short anyway; and this keeps the recursion bounded
        return "..."
    if isinstance(expr, Literal):
        text = expr.data.decode("utf-8").encode("unicode_escape").decode("ascii")
        return '"' + text.replace('"', '\\"') + '"'
    if isinstance(expr, CharClass):
        items = "".join(chr(lo) if lo == hi else f"{chr(lo)}-{chr(hi)}" for lo, hi in expr.ranges)
        items = items.encode("unicode_escape").decode("ascii")
        return f"[{'^' if expr.negated else ''}{items}]"
    if isinstance(expr, RuleRef):
        return expr.name
    if isinstance(expr, Sequence):
        parts = [_grouped(item, Choice, depth) for item in expr.items[:8]]
        return " ".join(parts) + (" ..." if len(expr.items) > 8 else "")
    if isinstance(expr, Choice):
        parts = [_expr_text(alternative, depth + 1) for alternative in expr.alternatives[:8]]
        return " | ".join(parts) + (" | ..." if len(expr.alternatives) > 8 else "")
    if isinstance(expr, Repeat):
        operand = _grouped(expr.expr, (Choice, Sequence, Repeat), depth)
        if expr.max is None:
            suffix = {0: "*", 1: "+"}.get(expr.min, f"{{{expr.min},}}")
        elif (expr.min, expr.max) == (0, 1):
            suffix = "?"
        elif expr.min == expr.max:
            suffix = f"{{{expr.min}}}"
        else:
            suffix = f"{{{expr.min},{expr.max}}}"
        return operand + suffix
    return repr(expr)


def _grouped(expr: Expr, kinds, depth: int) -> str:
    text = _expr_text(expr, depth + 1)
    return f"({text})" if isinstance(expr, kinds) else text


# ----------------------------------------------------------------------------- DFA per rule

# A move letter: a byte interval k >= 0 (of the rule's own intervals), or a reference to rule S
# encoded as -(S + 1).


def _ref_letter(rule: int) -> int:
    return -rule - 1  # and back: rule = -letter - 1


# The letter of a token node's move (past every byte interval, which number at most 256): the
# dead-part pruning and the minimisation treat it as any letter, the tables keep it apart.
TOKEN_LETTER = 1 << 20


def _token_rule_dfa() -> "_RuleDfa":
    """The rule of one token set: start --token--> final (module docstring)."""
    return _RuleDfa(cuts=[0], moves=[{TOKEN_LETTER: 1}, {}], final=[False, True])


def _counter_rule_dfa() -> "_RuleDfa":
    """The rule of one counter node of a token budget: a final node, no edge (module
    docstring)."""
    return _RuleDfa(cuts=[0], moves=[{}], final=[True])


class _RuleDfa:
    """One rule's DFA; state 0 is the start. ``cuts`` are the first bytes of the rule's byte
    intervals (interval k = cuts[k] .. cuts[k+1]-1, the last ends at 255). Its moves are held
    as ``moves`` (per state: letter -> state), or as ``flat`` (``_FlatMoves``: what
    ``_flatten`` reads, and what the C construction gives), or both; each is derived from the
    other on first use. Equal DFAs have equal cuts, finality and moves."""

    __slots__ = ("cuts", "final", "_moves", "_flat", "runs")

    def __init__(self, cuts: List[int], moves: Optional[List[Dict[int, int]]], final: List[bool],
                 flat: Optional["_FlatMoves"] = None,
                 runs: Optional[Tuple[np.ndarray, np.ndarray]] = None):
        self.cuts = cuts
        self.final = final
        self._moves = moves
        self._flat = flat
        #: a bounded run's (module docstring) per state: its twin state (-1: none) and its room
        self.runs = runs

    @property
    def num_states(self) -> int:
        return len(self.final)

    @property
    def moves(self) -> List[Dict[int, int]]:
        if self._moves is None:
            self._moves = _moves_of(self._flat, self.num_states)
        return self._moves

    @property
    def flat(self) -> "_FlatMoves":
        """The moves flattened (kept: the rule DFA cache's entries are read by every later
        compile of the same body, and their moves never change)."""
        if self._flat is None:
            self._flat = _flat_moves(self.moves)
        return self._flat

    def __eq__(self, other) -> bool:
        return isinstance(other, _RuleDfa) and (self.cuts, self.final, self.moves) == \
            (other.cuts, other.final, other.moves)

    def __repr__(self) -> str:
        return f"_RuleDfa(cuts={self.cuts}, moves={self.moves}, final={self.final})"


@dataclass(frozen=True)
class _FlatMoves:
    """A rule DFA's moves as ``_flatten`` reads them, in the rule's own numbering."""
    byte: np.ndarray                         # int64 [k, 3]: (state, interval, target)
    refs: Tuple[Tuple[int, int, int], ...]   # (state, reference letter, target)
    tokens: Tuple[Tuple[int, int], ...]      # (token node, target)


def _flat_moves(moves: List[Dict[int, int]]) -> _FlatMoves:
    byte: List[int] = []
    refs: List[Tuple[int, int, int]] = []
    tokens: List[Tuple[int, int]] = []
    for state, move in enumerate(moves):
        for letter, target in move.items():
            if letter == TOKEN_LETTER:
                tokens.append((state, target))
            elif letter >= 0:
                byte.extend((state, letter, target))
            else:
                refs.append((state, letter, target))
    return _FlatMoves(np.asarray(byte, dtype=np.int64).reshape(-1, 3), tuple(refs),
                      tuple(tokens))


def _moves_of(flat: _FlatMoves, num_states: int) -> List[Dict[int, int]]:
    """``_flat_moves`` backwards: each state's moves in letter order (as ``_minimise`` and the
    C construction give them: references, then byte intervals, then the token letter)."""
    listed = [(state, letter, target) for state, letter, target in flat.refs]
    listed += map(tuple, flat.byte.tolist())
    listed += [(state, TOKEN_LETTER, target) for state, target in flat.tokens]
    listed.sort()
    moves: List[Dict[int, int]] = [{} for _ in range(num_states)]
    for state, letter, target in listed:
        moves[state][letter] = target
    return moves


def _determinise(nfa: _Nfa, rule_name: str, budget: int, max_nodes: int) -> _RuleDfa:
    """Subset construction over the rule's byte intervals and reference letters (the Python
    construction: the reference of ``_minimal_dfa``'s C one)."""
    byte_edges, ref_edges = nfa.byte_edges, nfa.ref_edges
    cut_set = set(byte_edges[1::4])
    cut_set.update(hi + 1 for hi in byte_edges[2::4])
    cut_set.add(0)
    cut_set.discard(256)
    cuts = sorted(cut_set)
    interval_of = {cut: index for index, cut in enumerate(cuts)}
    interval_of[256] = len(cuts)
    # Per NFA state, its edges grouped by letter (byte ranges expanded to intervals), once here
    # rather than once per subset that contains the state.
    grouped: List[Dict[int, List[int]]] = [{} for _ in range(nfa.num_states)]
    for at in range(0, len(byte_edges), 4):
        by_letter = grouped[byte_edges[at]]
        target = byte_edges[at + 3]
        first, stop = interval_of[byte_edges[at + 1]], interval_of[byte_edges[at + 2] + 1]
        for interval in range(first, stop):
            bucket = by_letter.get(interval)
            if bucket is None:
                by_letter[interval] = [target]
            else:
                bucket.append(target)
    for at in range(0, len(ref_edges), 3):
        grouped[ref_edges[at]].setdefault(_ref_letter(ref_edges[at + 1]), []).append(
            ref_edges[at + 2])
    epsilon: List[List[int]] = [[] for _ in range(nfa.num_states)]
    for at in range(0, len(nfa.epsilon), 2):
        epsilon[nfa.epsilon[at]].append(nfa.epsilon[at + 1])
    # A subset of one NFA state is that state's number, a larger one a frozenset: most subsets
    # are single states (459 k of 557 k over every 10th MaskBench file), and an int is
    # cheaper to build, hash and look up.
    closures: List[Union[int, FrozenSet[int], None]] = [None] * nfa.num_states

    def closure_of(state: int) -> Union[int, FrozenSet[int]]:
        closed = closures[state]
        if closed is None:
            if not epsilon[state]:
                closed = closures[state] = state
                return closed
            seen = {state}
            stack = [state]
            while stack:
                for following in epsilon[stack.pop()]:
                    if following not in seen:
                        seen.add(following)
                        stack.append(following)
            closed = closures[state] = frozenset(seen) if len(seen) > 1 else state
        return closed

    def union_of(states) -> Union[int, FrozenSet[int]]:
        closed: set = set()
        for state in states:
            part = closure_of(state)
            if part.__class__ is int:
                closed.add(part)
            else:
                closed |= part
        return frozenset(closed) if len(closed) > 1 else next(iter(closed))

    start = closure_of(0)
    ids: Dict[Union[int, FrozenSet[int]], int] = {start: 0}
    subsets: List[Union[int, FrozenSet[int]]] = [start]
    by_targets: Dict[object, int] = {}  # raw target state or set -> DFA state (skips closures)
    moves: List[Dict[int, int]] = []
    final: List[bool] = []
    index = 0
    while index < len(subsets):
        subset = subsets[index]
        index += 1
        if index % BUDGET_CHECK_EVERY == 0:  # one rule's subsets can take seconds
            compile_budget.check("the automaton", rule_name)
        if subset.__class__ is int:
            targets = grouped[subset]  # read only
        else:
            targets = {}
            for state in subset:
                for letter, state_targets in grouped[state].items():
                    bucket = targets.get(letter)
                    if bucket is None:
                        targets[letter] = list(state_targets)
                    else:
                        bucket.extend(state_targets)
        move: Dict[int, int] = {}
        for letter, raw in targets.items():
            key = raw[0] if len(raw) == 1 else frozenset(raw)
            dfa_state = by_targets.get(key)
            if dfa_state is None:
                closed = closure_of(raw[0]) if len(raw) == 1 else union_of(key)
                dfa_state = ids.get(closed)
                if dfa_state is None:
                    dfa_state = ids[closed] = len(subsets)
                    subsets.append(closed)
                    if len(subsets) > budget:
                        raise _too_many_nodes(rule_name, budget, max_nodes)
                by_targets[key] = dfa_state
            move[letter] = dfa_state
        moves.append(move)
        final.append(subset == 1 if subset.__class__ is int else 1 in subset)
    return _RuleDfa(cuts, moves, final)


def _too_many_nodes(rule_name: str, budget: int, max_nodes: int) -> GrammarError:
    used = max_nodes - budget
    if budget >= max_nodes // 2:  # this rule alone takes most of the limit
        return GrammarError(
            f"rule {rule_name!r}: determinising it needs more than {budget} automaton nodes "
            f"(the grammar's limit is {max_nodes}, earlier rules use {used}); a repetition "
            f"after an unbounded one, as in [ab]* \"a\" [ab]{{20}}, blows up exponentially")
    return GrammarError(
        f"the grammar needs more than {max_nodes} automaton nodes (the limit): the rules "
        f"before {rule_name!r} use {used}")


def _minimal_dfa(nfa: _Nfa, num_refs: int, rule_name: str, budget: int,
                 max_nodes: int) -> Tuple[_RuleDfa, int]:
    """(the rule's minimal DFA, its subset count, which the node budget counts) of an NFA whose
    references are numbered 0 .. num_refs - 1, by the C construction
    (``csrc/automaton_build.c``) where it is built, else by ``_minimise(_determinise())``: the
    same DFA, state for state. Raises GrammarError past the budget, CompileTimeoutError past
    the compile's deadline."""
    kernel = _native("gxg_rule_dfa", _RULE_DFA_ARGS, ctypes.c_void_p)
    if kernel is not None:
        built = _c_minimal_dfa(kernel, nfa, num_refs, rule_name, budget, max_nodes)
        if built is not None:
            return built
    dfa = _determinise(nfa, rule_name, budget, max_nodes)
    return _minimise(dfa), dfa.num_states


_RULE_DFA_ARGS = (ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                  ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64,
                  ctypes.c_int64, ctypes.c_double, ctypes.c_void_p)
_C_TOO_MANY, _C_OUT_OF_TIME = C_STATUS["TOO_MANY"], C_STATUS["OUT_OF_TIME"]
_C_HEADER = 5  # the result's length, states, moves, cuts, subsets


def _c_minimal_dfa(kernel, nfa: _Nfa, num_refs: int, rule_name: str, budget: int,
                   max_nodes: int) -> Optional[Tuple[_RuleDfa, int]]:
    edges = [array.array("i", nfa.byte_edges), array.array("i", nfa.ref_edges),
             array.array("i", nfa.epsilon)]
    byte, refs, epsilon = (part.buffer_info()[0] for part in edges)
    status = (ctypes.c_int64 * 2)()
    seconds = compile_budget.seconds_left()
    pointer = kernel(nfa.num_states, byte, len(nfa.byte_edges) // 4, refs,
                     len(nfa.ref_edges) // 3, num_refs, epsilon, len(nfa.epsilon) // 2,
                     budget, -1.0 if seconds is None else seconds, status)
    return _c_result(pointer, status, rule_name, budget, max_nodes)


_RULE_DFA_PROGRAM_ARGS = (ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64,
                          ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                          ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_double,
                          ctypes.c_void_p)


def _class_table(classes: Tuple[CharClass, ...], builder: "_NfaBuilder"
                 ) -> Tuple[array.array, array.array]:
    """(the classes' fragments as one int32 table, where each starts): the C construction's
    class table of a program."""
    table = array.array("i")
    starts = array.array("q")
    for char_class in classes:
        starts.append(len(table))
        table.extend(builder.fragment(char_class).flat)
    return table, starts


def _program_arguments(program: Tuple[bytes, bytes, Tuple[CharClass, ...]],
                       builder: "_NfaBuilder") -> tuple:
    """The program arguments of ``gxg_program_nfa`` and ``gxg_rule_dfa_program`` (with the
    arrays they point into, which must outlive the call)."""
    code, blob, classes = program
    table, starts = _class_table(classes, builder)
    return ((code, len(code) // 4, blob, len(blob), table.buffer_info()[0], len(table),
             starts.buffer_info()[0], len(starts)), (table, starts))


def _c_program_dfa(key: "_BodyKey", num_refs: int, builder: "_NfaBuilder", budget: int
                   ) -> Optional[Tuple[_RuleDfa, int, int]]:
    """(the minimal DFA, its subset count, its NFA's fresh states) of a rule's key, its NFA
    built in C from the key's program (``gxg_rule_dfa_program``: the NFA that ``builder.build``
    gives, edge for edge); None where C is not built or asks for the Python construction (a
    rule past max_nodes among them, whose message the builder gives)."""
    kernel = _native("gxg_rule_dfa_program", _RULE_DFA_PROGRAM_ARGS, ctypes.c_void_p)
    if kernel is None:
        return None
    try:
        program = _program(key.items)
    except OverflowError:  # a bound past int32: the builder reports it as too large
        return None
    arguments, keep = _program_arguments(program, builder)
    status = (ctypes.c_int64 * 3)()
    seconds = compile_budget.seconds_left()
    pointer = kernel(*arguments, num_refs, builder.max_nodes, budget,
                     -1.0 if seconds is None else seconds, status)
    built = _c_result(pointer, status, builder.rule_name, budget, builder.max_nodes)
    del keep
    return None if built is None else (*built, status[2])


def _c_result(pointer: int, status, rule_name: str, budget: int, max_nodes: int
              ) -> Optional[Tuple[_RuleDfa, int]]:
    """(the DFA, its subset count) from a buffer of ``gxg_rule_dfa``, which is freed; raises
    past the budget or the deadline; None for a status that asks for the Python build."""
    if not pointer:
        if status[0] == _C_TOO_MANY:
            raise _too_many_nodes(rule_name, budget, max_nodes)
        if status[0] == _C_OUT_OF_TIME:
            raise compile_budget.timed_out("the automaton", rule_name)
        return None  # a subset that cannot complete, no memory, too large: the Python build
    try:
        length = ctypes.c_int32.from_address(pointer).value
        result = np.ctypeslib.as_array((ctypes.c_int32 * length).from_address(pointer)).copy()
    finally:
        _free(pointer)
    num_states, _, num_cuts, subsets = result[1:_C_HEADER].tolist()
    at = _C_HEADER + num_cuts
    cuts = result[_C_HEADER:at].tolist()
    final = result[at:at + num_states].astype(bool).tolist()
    moves = result[at + num_states:].reshape(-1, 3).astype(np.int64)
    is_ref = moves[:, 1] < 0
    flat = _FlatMoves(moves[~is_ref], tuple(map(tuple, moves[is_ref].tolist())), ())
    return _RuleDfa(cuts, None, final, flat=flat), subsets


def _free(pointer: int) -> None:
    _native("gxg_free", (ctypes.c_void_p,))(pointer)


# ----------------------------------------------------------------------------- dead parts


def _prune_dead(dfas: List[_RuleDfa]) -> None:
    """Remove, in place, every edge that cannot lead to completion.

    A state is *live* when it is final, or has a byte edge to a live state, or a reference edge
    to a productive rule whose return state is live; a rule is *productive* (derives at least
    one string) when its start state is live. Least fixed point by a worklist over reversed
    edges; byte edges into dead states and reference edges to unproductive rules or dead return
    states are then deleted.
    """
    offsets = [0]
    for dfa in dfas:
        offsets.append(offsets[-1] + dfa.num_states)
    total = offsets[-1]
    # reversed edges: target -> sources; a reference edge is recorded at its return state and
    # waits there (with its rule) until the rule is productive too
    byte_preds: List[List[int]] = [[] for _ in range(total)]
    ref_preds: Dict[int, List[Tuple[int, int]]] = {}  # ret -> [(source, rule)]
    callers: List[List[Tuple[int, int]]] = [[] for _ in dfas]  # rule -> [(source, ret)]
    live = bytearray(total)
    work: List[int] = []
    for rule, dfa in enumerate(dfas):
        base = offsets[rule]
        for state, move in enumerate(dfa.moves):
            source = base + state
            for letter, target in move.items():
                if letter >= 0:
                    byte_preds[base + target].append(source)
                else:
                    callee = -letter - 1
                    ref_preds.setdefault(base + target, []).append((source, callee))
                    callers[callee].append((source, base + target))
            if dfa.final[state]:
                live[source] = 1
                work.append(source)
    start_of_rule = {offset: rule for rule, offset in enumerate(offsets[:-1])}
    productive = bytearray(len(dfas))
    while work:
        node = work.pop()
        for source in byte_preds[node]:
            if not live[source]:
                live[source] = 1
                work.append(source)
        for source, callee in ref_preds.get(node, ()):
            if productive[callee] and not live[source]:
                live[source] = 1
                work.append(source)
        rule = start_of_rule.get(node)
        if rule is not None and not productive[rule]:
            productive[rule] = 1
            for source, ret in callers[rule]:
                if live[ret] and not live[source]:
                    live[source] = 1
                    work.append(source)
    if all(live):
        return
    for rule, dfa in enumerate(dfas):
        base = offsets[rule]
        for move in dfa.moves:
            dead = [letter for letter, target in move.items()
                    if not live[base + target] or (letter < 0 and not productive[-letter - 1])]
            for letter in dead:
                del move[letter]
            if dead:
                dfa._flat = None  # derived from the moves, which changed


def _nothing_can_be_dead(bodies: List[Expr], rule_ids: Dict[str, int],
                         fragments: Dict[CharClass, _ClassFragment]) -> bool:
    """True when no DFA state can be dead, so ``_prune_dead`` may be skipped (the usual case
    after ``prepare``, which drops unproductive alternatives).

    If every character class matches something and every rule derives some string, every
    Thompson NFA state can reach its end, so every subset can too. Productivity is settled here
    in a few cheap passes over the IR; a grammar that needs more passes (or has an unproductive
    rule or an empty class) is left to the exact pruning.
    """
    if any(not fragment.edges for fragment in fragments.values()):
        return False
    productive = [False] * len(bodies)
    pending = list(range(len(bodies)))

    def leaf(expr: Expr) -> bool:
        return productive[rule_ids[expr.name]] if isinstance(expr, RuleRef) else True

    for _ in range(3):
        # rules tend to reference rules defined after them: reverse order settles most in one
        for rule in reversed(pending):
            productive[rule] = _evaluate(bodies[rule], leaf)
        pending = [rule for rule in pending if not productive[rule]]
        if not pending:
            return True
    return False


def _evaluate(root: Expr, leaf) -> bool:
    """Whether ``root`` derives some string, given ``leaf`` for literals, classes and
    references (iterative: expression nesting may be deep)."""
    results: Dict[int, bool] = {}
    stack: List[Tuple[Expr, bool]] = [(root, False)]
    while stack:
        expr, children_done = stack.pop()
        if isinstance(expr, (Literal, CharClass, RuleRef, TokenSet)):
            results[id(expr)] = leaf(expr)
        elif not children_done:
            stack.append((expr, True))
            stack.extend((child, False) for child in children(expr))
        elif isinstance(expr, Sequence):
            results[id(expr)] = all(results[id(item)] for item in expr.items)
        elif isinstance(expr, Choice):
            results[id(expr)] = any(results[id(item)] for item in expr.alternatives)
        else:  # Repeat
            results[id(expr)] = expr.min == 0 or results[id(expr.expr)]
    return results[id(root)]


# ----------------------------------------------------------------------------- minimisation


def _minimise(dfa: _RuleDfa) -> _RuleDfa:
    """The minimal DFA of the states reachable from the start, numbered breadth-first with each
    state's moves taken in letter order (one numbering for equal languages, whatever the order
    of the subset construction: the C construction gives the same one).

    All states reachable after pruning can complete (except a start state of a rule that derives
    nothing, which then has no edges), so equivalence is plain DFA equivalence with reference
    letters as ordinary letters.
    """
    moves, final = dfa.moves, dfa.final
    post_order = _acyclic_post_order(moves, 0)
    if post_order is not None:
        block_of = _acyclic_blocks(post_order, moves, final)
    else:
        block_of = _coarsest_partition(moves, final, _breadth_first(moves, 0))
    # Quotient: a block keeps the moves of its first member; blocks numbered breadth-first.
    number = {block_of[0]: 0}
    members = [0]
    new_moves: List[Dict[int, int]] = []
    for state in members:  # grows while iterating: breadth-first over representatives
        move = {}
        items = moves[state].items()
        for letter, target in (sorted(items) if len(items) > 1 else items):
            block = block_of[target]
            index = number.get(block)
            if index is None:
                index = number[block] = len(members)
                members.append(target)
            move[letter] = index
        new_moves.append(move)
    return _RuleDfa(dfa.cuts, new_moves, [final[state] for state in members])


def _breadth_first(moves: List[Dict[int, int]], start: int) -> List[int]:
    order = [start]
    seen = {start}
    for state in order:  # grows while iterating
        for target in moves[state].values():
            if target not in seen:
                seen.add(target)
                order.append(target)
    return order


def _acyclic_post_order(moves: List[Dict[int, int]], start: int) -> Optional[List[int]]:
    """States reachable from ``start``, each after all its successors other than itself; None
    if there is a cycle longer than a self-loop."""
    ACTIVE, DONE = 1, 2
    status = {start: ACTIVE}
    post_order: List[int] = []
    stack = [(start, iter(moves[start].values()))]
    while stack:
        state, successors = stack[-1]
        for target in successors:
            seen = status.get(target)
            if seen is None:
                status[target] = ACTIVE
                stack.append((target, iter(moves[target].values())))
                break
            if seen == ACTIVE and target != state:
                return None
        else:
            stack.pop()
            status[state] = DONE
            post_order.append(state)
    return post_order


_SELF = -1  # in a signature of _acyclic_blocks: a move to the state itself (blocks are >= 0)


def _self_as(signature: tuple, block: int) -> tuple:
    """An ``_acyclic_blocks`` signature with its self-loops written as moves into ``block``."""
    final, pairs = signature
    return final, tuple([(letter, block if b == _SELF else b) for letter, b in pairs])


def _acyclic_blocks(post_order: List[int], moves: List[Dict[int, int]],
                    final: List[bool]) -> Dict[int, int]:
    """Equivalence blocks of a DFA whose only cycles are self-loops, in one pass (Revuz's
    algorithm for acyclic DFAs): successors are classified first, so a state's block is
    determined by its finality and its (letter, block) moves.

    A self-loop is the one move whose target is not classified yet. A state p with self-loops
    is equivalent to a block X iff its signature with X in place of its self-loops is X's own
    signature (``registry``, with X's members' self-loops as X): X is either one of p's other
    targets' blocks (each is tried) or none of them, and then X's signature with X written as
    ``_SELF`` is p's signature as it stands (``loop_registry``). With those two lookups the
    blocks are exact, as Hopcroft's partition would make them; most rule DFAs have no other
    cycle (the loops of ``[ \\t\\n\\r]*``)."""
    block_of: Dict[int, int] = {}
    registry: Dict[tuple, int] = {}       # signature, a block's own moves as the block -> block
    loop_registry: Dict[tuple, int] = {}  # signature, a block's own moves as _SELF -> block
    for state in post_order:
        move = moves[state]
        loops = False
        pairs = []
        for letter, target in move.items():
            if target == state:
                pairs.append((letter, _SELF))
                loops = True
            else:
                pairs.append((letter, block_of[target]))
        if len(pairs) > 1:
            pairs.sort()  # letters are distinct: the order does not depend on the blocks
        signature = (final[state], tuple(pairs))
        if not loops:
            block = registry.get(signature)
            if block is None:
                block = registry[signature] = len(registry)
        else:
            block = loop_registry.get(signature)
            if block is None:
                for candidate in {b for _, b in pairs if b != _SELF}:
                    if registry.get(_self_as(signature, candidate)) == candidate:
                        block = candidate
                        break
            if block is None:
                block = len(registry)
                registry[_self_as(signature, block)] = block
                loop_registry[signature] = block
        block_of[state] = block
    return block_of


def _coarsest_partition(moves: List[Dict[int, int]], final: List[bool],
                        states: List[int]) -> Dict[int, int]:
    """Hopcroft's partition refinement over ``states`` (closed under moves) of a partial DFA.

    Two states end up in one block iff they agree on finality and, for every letter, both lack
    it or both move into the same block. Missing moves are not a sink state, so every initial
    block starts on the worklist (Valmari and Lehtinen's fix for partial transition functions);
    afterwards a split block that is not waiting adds only its smaller half. Initial blocks
    already separate states by their set of letters (which equivalent states share).
    """
    incoming: Dict[int, List[Tuple[int, int]]] = {state: [] for state in states}
    initial: Dict[tuple, List[int]] = {}
    for source in states:
        move = moves[source]
        for letter, target in move.items():
            incoming[target].append((letter, source))
        initial.setdefault((final[source], frozenset(move)), []).append(source)
    members: List[set] = [set(block) for block in initial.values()]
    block_of: Dict[int, int] = {}
    for block, block_states in enumerate(members):
        for state in block_states:
            block_of[state] = block
    waiting = list(range(len(members)))
    is_waiting = [True] * len(members)
    rounds = 0
    while waiting:
        rounds += 1
        if rounds % BUDGET_CHECK_EVERY == 0:  # one rule's DFA can take seconds (minLength 10k)
            compile_budget.check("the automaton's minimisation")
        splitter = waiting.pop()
        is_waiting[splitter] = False
        sources_by_letter: Dict[int, List[int]] = {}
        for target in list(members[splitter]):
            for letter, source in incoming[target]:
                sources_by_letter.setdefault(letter, []).append(source)
        for sources in sources_by_letter.values():
            hit: Dict[int, List[int]] = {}
            for source in sources:
                hit.setdefault(block_of[source], []).append(source)
            for block, inside in hit.items():
                if len(inside) == len(members[block]):
                    continue
                new_block = len(members)
                members.append(set(inside))
                members[block].difference_update(inside)
                for state in inside:
                    block_of[state] = new_block
                if is_waiting[block]:
                    is_waiting.append(True)
                    waiting.append(new_block)
                elif len(inside) <= len(members[block]):
                    is_waiting.append(True)
                    waiting.append(new_block)
                else:
                    is_waiting.append(False)
                    is_waiting[block] = True
                    waiting.append(block)
    return block_of


# ----------------------------------------------------------------------------- tables


class _NodeRefs(dict):
    """node -> its reference edges as sorted (rule, return node) pairs, for the nodes that have
    some; any other node reads ``()`` (not stored: most nodes have none, and a list per node
    of a large grammar's ~266 k cost milliseconds to make and to read)."""

    __slots__ = ()

    def __missing__(self, node: int) -> tuple:
        return ()


def _flatten(dfas: List[_RuleDfa], ref_letters: List[Optional[Dict[int, int]]]
             ) -> Tuple[List[int], List[bool], _NodeRefs, np.ndarray, Dict[int, int]]:
    """One pass over every rule's moves, in the final node numbering. ``ref_letters[r]``: the
    rule's reference letters as the grammar numbers them, for a DFA from the rule DFA cache
    (whose letters number the body's references by first use), None for a DFA built here.

    Returns the rules' start nodes, finality per node, the reference edges per node
    (``_NodeRefs``), the byte edges as an int64 array [k, 3] of (source, interval, target),
    where interval numbers run over all rules' intervals in rule order (the intervals of rule
    r are numbered from the total count of the rules before it), and the token moves (token
    node -> target). The per-move work is ``_flat_moves``', which a DFA from the rule DFA cache
    has done once for every compile.
    """
    rule_start: List[int] = []
    final: List[bool] = []
    chunks: List[np.ndarray] = []
    shifts: List[Tuple[int, int, int]] = []  # per chunk: what its (source, interval, target) add
    chunk_sizes: List[int] = []
    token_moves: Dict[int, int] = {}
    node_refs = _NodeRefs()
    base = interval_base = 0
    for dfa, letters in zip(dfas, ref_letters):
        rule_start.append(base)
        final.extend(dfa.final)
        flat = dfa.flat
        if len(flat.byte):
            chunks.append(flat.byte)
            shifts.append((base, interval_base, base))
            chunk_sizes.append(len(flat.byte))
        for state, letter, target in flat.refs:
            rule = -(letter if letters is None else letters[letter]) - 1
            refs = node_refs.get(base + state)
            if refs is None:
                node_refs[base + state] = [(rule, base + target)]
            else:
                refs.append((rule, base + target))
        for state, target in flat.tokens:
            token_moves[base + state] = base + target
        base += dfa.num_states
        interval_base += len(dfa.cuts)
    for refs in node_refs.values():
        if len(refs) > 1:
            refs.sort()
    if chunks:  # one addition for all rules, not one per rule
        byte_edges = np.concatenate(chunks) + np.repeat(
            np.array(shifts, dtype=np.int64), chunk_sizes, axis=0)
    else:
        byte_edges = np.zeros((0, 3), dtype=np.int64)
    return rule_start, final, node_refs, byte_edges, token_moves


def _byte_tables(byte_edges: np.ndarray, rule_cuts: List[List[int]], num_nodes: int
                 ) -> Tuple[np.ndarray, np.ndarray]:
    """(byte_class, next_node) for all rules at once.

    First a table over the *fine* intervals (the common refinement of every rule's intervals,
    at most 256), built column-major; then fine intervals whose columns agree at every node
    (same target, or both absent) are merged into one class: the coarsest byte partition that
    no edge distinguishes. Grouping the columns' bytes in a dict is exact, and much faster than
    ``np.unique(axis=...)``. The C construction (``csrc/automaton_build.c``, where it is
    built) gives the same tables without the dense table: each fine interval's column as a
    list of its edges, hashed, equal lists compared.
    """
    fine_cuts = sorted({cut for cuts in rule_cuts for cut in cuts})
    num_fine = len(fine_cuts)
    fine_of_byte = np.repeat(np.arange(num_fine), np.diff(np.append(fine_cuts, 256)))
    # each rule interval -> its range of fine intervals [first, stop)
    interval_first = fine_of_byte[np.asarray([c for cuts in rule_cuts for c in cuts], np.int64)]
    interval_stop = np.asarray([stop for cuts in rule_cuts for stop in cuts[1:] + [256]],
                               dtype=np.int64)
    interval_stop = np.append(fine_of_byte, num_fine)[interval_stop]
    if len(byte_edges):
        found = _c_byte_tables(byte_edges, interval_first, interval_stop, num_fine, num_nodes)
        if found is not None:
            fine_class, next_node = found
            return fine_class[fine_of_byte].astype(np.uint8), next_node
    table = np.full((num_fine, num_nodes), -1, dtype=np.int32)  # [fine interval, node]
    if len(byte_edges):
        edges = byte_edges
        firsts = interval_first[edges[:, 1]]
        widths = interval_stop[edges[:, 1]] - firsts
        ends = np.cumsum(widths)
        fines = np.arange(ends[-1]) - np.repeat(ends - widths - firsts, widths)
        table[fines, np.repeat(edges[:, 0], widths)] = np.repeat(edges[:, 2], widths)
    # fine intervals with equal columns share a class; classes are numbered in the order of
    # their first fine interval, i.e. of their smallest byte
    class_of_column: Dict[bytes, int] = {}
    fine_class = np.empty(num_fine, dtype=np.int64)
    class_column: List[int] = []  # the first fine interval of each class
    for fine in range(num_fine):
        key = table[fine].tobytes()
        klass = class_of_column.get(key)
        if klass is None:
            klass = class_of_column[key] = len(class_column)
            class_column.append(fine)
        fine_class[fine] = klass
    next_node = np.ascontiguousarray(table[class_column].T)
    byte_class = fine_class[fine_of_byte].astype(np.uint8)
    return byte_class, next_node


_BYTE_CLASSES_ARGS = (ctypes.c_int64,) + (ctypes.c_void_p,) * 3 + (ctypes.c_int64,
                                                                    ctypes.c_void_p)
_FILL_NEXT_NODE_ARGS = (ctypes.c_int64,) + (ctypes.c_void_p,) * 4 + (ctypes.c_int64,
                                                                     ctypes.c_void_p)


def _c_byte_tables(byte_edges: np.ndarray, interval_first: np.ndarray,
                   interval_stop: np.ndarray, num_fine: int, num_nodes: int
                   ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """(class of each fine interval, next_node) by ``gxg_byte_classes``, or None (no C build,
    or it asks for the numpy one)."""
    classify = _native("gxg_byte_classes", _BYTE_CLASSES_ARGS, ctypes.c_int64)
    if classify is None:
        return None
    edges = np.ascontiguousarray(byte_edges, dtype=np.int64)
    first = np.ascontiguousarray(interval_first, dtype=np.int64)
    stop = np.ascontiguousarray(interval_stop, dtype=np.int64)
    fine_class = np.empty(num_fine, dtype=np.int64)
    classes = classify(len(edges), edges.ctypes.data, first.ctypes.data, stop.ctypes.data,
                       num_fine, fine_class.ctypes.data)
    if classes <= 0:
        return None
    next_node = np.full((num_nodes, classes), -1, dtype=np.int32)
    _native("gxg_fill_next_node", _FILL_NEXT_NODE_ARGS)(
        len(edges), edges.ctypes.data, first.ctypes.data, stop.ctypes.data,
        fine_class.ctypes.data, classes, next_node.ctypes.data)
    return fine_class, next_node


# ----------------------------------------------------------------------------- analyses


def _epsilon_reach(rule_start: Seq[int], node_refs: _NodeRefs,
                   is_final: Seq[bool]) -> Tuple[List[bool], List[List[int]]]:
    """(nullable per rule, nodes of each rule reachable from its start without reading a byte).

    A node is epsilon-reachable when it is the start, or the return node of a reference to a
    nullable rule taken at an epsilon-reachable node; a rule is nullable when it reaches a final
    node that way. Least fixed point: a reference to a rule not yet known to be nullable waits
    on that rule.
    """
    num_rules = len(rule_start)
    nullable = [False] * num_rules
    reached: List[set] = [set() for _ in range(num_rules)]
    order: List[List[int]] = [[] for _ in range(num_rules)]  # reached, in discovery order
    waiting: List[List[Tuple[int, int]]] = [[] for _ in range(num_rules)]  # callee -> (rule, ret)
    became_nullable: List[int] = []

    def visit(rule: int, node: int) -> None:
        stack = [node]
        while stack:
            node = stack.pop()
            if node in reached[rule]:
                continue
            reached[rule].add(node)
            order[rule].append(node)
            if is_final[node] and not nullable[rule]:
                nullable[rule] = True
                became_nullable.append(rule)
            for callee, ret in node_refs[node]:
                if nullable[callee]:
                    stack.append(ret)
                else:
                    waiting[callee].append((rule, ret))

    for rule in range(num_rules):
        visit(rule, rule_start[rule])
    while became_nullable:
        callee = became_nullable.pop()
        pending, waiting[callee] = waiting[callee], []
        for rule, ret in pending:
            visit(rule, ret)
    return nullable, order


def _left_calls(reached: List[List[int]], node_refs) -> List[List[int]]:
    """Per rule, the rules it may push before reading a byte (sorted, no duplicates)."""
    return [sorted({callee for node in nodes for callee, _ in node_refs[node]})
            for nodes in reached]


def _callees_first_order(left_calls: List[List[int]], names: Seq[str]) -> List[int]:
    """Rules ordered so that each comes after every rule it left-calls; raises GrammarError
    naming a cycle (left recursion: the runtime's closure would push forever)."""
    NEW, ACTIVE, DONE = 0, 1, 2
    color = [NEW] * len(left_calls)
    order: List[int] = []
    for root in range(len(left_calls)):
        if color[root] != NEW:
            continue
        color[root] = ACTIVE
        path = [root]
        iterators = [iter(left_calls[root])]
        while iterators:
            callee = next(iterators[-1], None)
            if callee is None:
                iterators.pop()
                done = path.pop()
                color[done] = DONE
                order.append(done)
            elif color[callee] == ACTIVE:
                cycle = path[path.index(callee):] + [callee]
                raise LeftRecursionError(
                    "left recursion remains: " + " -> ".join(names[rule] for rule in cycle))
            elif color[callee] == NEW:
                color[callee] = ACTIVE
                path.append(callee)
                iterators.append(iter(left_calls[callee]))
    return order


def _first_sets(reached: List[List[int]], left_calls: List[List[int]], callees_first: List[int],
                next_node: np.ndarray, byte_class: np.ndarray) -> np.ndarray:
    """FIRST(r): bytes that start a non-empty string of r — the byte edges of r's
    epsilon-reachable nodes, plus FIRST of the rules referenced there. Exact, because every
    edge left after pruning can lead to completion."""
    num_rules = len(reached)
    rule_index = np.repeat(np.arange(num_rules), [len(nodes) for nodes in reached])
    node_index = np.fromiter((node for nodes in reached for node in nodes), dtype=np.int64,
                             count=len(rule_index))
    own_classes = np.zeros((num_rules, next_node.shape[1]), dtype=bool)
    np.logical_or.at(own_classes, rule_index, next_node[node_index] >= 0)
    first = own_classes[:, byte_class]
    for rule in callees_first:
        for callee in left_calls[rule]:
            first[rule] |= first[callee]
    return first


# ----------------------------------------------------------------------------- the builder


def _lookahead_rule_name(name: str, taken: set) -> str:
    return _unique_name(f"{name}#lookahead", taken)


def _unique_name(base: str, taken: set, separator: str = "") -> str:
    """``base``, or ``base`` + ``separator`` + the first free number from 2; added to
    ``taken``."""
    candidate, counter = base, 1
    while candidate in taken:
        counter += 1
        candidate = f"{base}{separator}{counter}"
    taken.add(candidate)
    return candidate


class _CollectorPauses:
    """``gc_paused``'s shared state (the collector's is process-wide too)."""
    lock = threading.Lock()
    under_way = 0          # pauses not yet ended
    was_enabled = False    # the collector's state when the first of them began


@contextlib.contextmanager
def gc_paused():
    """The cyclic garbage collector off while the block runs. The builder (and the whole
    compile: ``GrammarCompiler``) allocates many small containers that die together; the
    vocabulary walks (``gxg.compiler.vocab_walk``: the mask cache's entries, the CPU runtime's
    walks from real stacks) allocate stacks and configurations by the hundred thousand and keep
    most of them. None of them forms a reference cycle (tests/test_compile_garbage.py), yet
    the collector scans the young ones every 700 allocations, and each scan that survives
    brings a full collection nearer (~130-170 ms in a process with torch loaded): ~20 % of
    large compiles (~15 % of the mean compile of MaskBench's BFCL schemas), and the longest
    steps of lazy masks. Paused, the collector runs once after the block instead.

    Process-wide state, as the collector's is: nested and concurrent pauses (matchers on
    several threads) share one, and the collector is turned back on only if it was on when
    the first of them began."""
    pauses = _CollectorPauses
    with pauses.lock:
        if pauses.under_way == 0:
            pauses.was_enabled = gc.isenabled()
            gc.disable()
        pauses.under_way += 1
    try:
        yield
    finally:
        with pauses.lock:
            pauses.under_way -= 1
            if pauses.under_way == 0 and pauses.was_enabled:
                gc.enable()


def build_automaton(grammar: Grammar, *, max_nodes: int = DEFAULT_MAX_NODES) -> Automaton:
    """Compile ``grammar`` (after ``gxg.compiler.passes``) into the automaton tables.

    Raises ``GrammarError`` when a repetition or the whole grammar needs more than
    ``max_nodes`` nodes, and when left recursion remains (the runtime's closure would not
    terminate).
    """
    with gc_paused():
        return _build(grammar, max_nodes)


def _build(grammar: Grammar, max_nodes: int) -> Automaton:
    names = list(grammar.rule_names)
    rule_ids = {name: index for index, name in enumerate(names)}
    bodies = [rule.body for rule in grammar.rules]
    lookahead = [-1] * len(names)
    taken = set(names)
    for index, rule in enumerate(grammar.rules):
        if rule.lookahead is not None:
            lookahead[index] = len(bodies)
            names.append(_lookahead_rule_name(rule.name, taken))
            bodies.append(rule.lookahead)
            lookahead.append(-1)
    # token budgets: R ::= R#counted, the body moved to R#counted (module docstring)
    budgeted: List[Tuple[int, int, int]] = []  # (R, R#counted, max_tokens)
    for index, rule in enumerate(grammar.rules):
        if rule.max_tokens is not None:
            name = _unique_name(f"{rule.name}#counted", taken)
            rule_ids[name] = len(names)
            budgeted.append((index, len(names), rule.max_tokens))
            names.append(name)
            bodies.append(bodies[index])
            lookahead.append(-1)
            bodies[index] = RuleRef(name)
    # token sets: one rule each, after the rules and lookaheads (module docstring), numbered
    # as the NFA builder first meets them (no extra pass over the expressions)
    token_rule_ids: Dict[TokenSet, int] = _FirstSeen(len(names))

    # 1-2: NFA and subset construction, rule by rule
    fragments: Dict[CharClass, _ClassFragment] = {}
    dfas: List[_RuleDfa] = []
    budget = max_nodes
    is_minimal: List[bool] = []
    ref_letters: List[Optional[Dict[int, int]]] = []  # per rule: _flatten's letter map
    for name, body in zip(names, bodies):
        compile_budget.check("the automaton", name)
        dfa, subsets, minimal, letters = _rule_dfa(name, body, rule_ids, max_nodes, fragments,
                                                   token_rule_ids, budget, grammar.pruned)
        budget -= subsets
        dfas.append(dfa)
        is_minimal.append(minimal)
        ref_letters.append(letters)
    token_sets: List[TokenSet] = list(token_rule_ids)
    for token_set in token_sets:
        names.append(_token_rule_name(token_set, taken))
        lookahead.append(-1)
    dfas.extend(_token_rule_dfa() for _ in token_sets)
    counters_base = len(dfas)  # then the counter rules C(0) .. C(N-1) of each budget
    for index, _, max_tokens in budgeted:
        if max_tokens > budget:
            raise GrammarError(f"rule {names[index]!r}: the token budget max_tokens="
                               f"{max_tokens} needs {max_tokens} counter nodes, more than "
                               f"the {budget} left of max_nodes={max_nodes}")
        budget -= max_tokens
        for k in range(max_tokens):
            names.append(_unique_name(f"{names[index]}#count{k}", taken))
            lookahead.append(-1)
        dfas.extend(_counter_rule_dfa() for _ in range(max_tokens))

    # 3-4: dead parts, then minimisation (a pruned grammar has none: Grammar.pruned)
    if not grammar.pruned and not _nothing_can_be_dead(bodies, rule_ids, fragments):
        _prune_dead(dfas)
    minimal = []
    for index, dfa in enumerate(dfas):
        compile_budget.check("the automaton's minimisation")
        done = index < len(is_minimal) and is_minimal[index]
        minimal.append(dfa if done else _minimise(dfa))
    dfas = minimal

    # 5: tables
    ref_letters += [None] * (len(dfas) - len(ref_letters))  # token sets and counters
    starts, final_list, node_refs, byte_edges, token_moves = _flatten(dfas, ref_letters)
    num_nodes = len(final_list)
    byte_class, next_node = _byte_tables(byte_edges, [dfa.cuts for dfa in dfas], num_nodes)
    rule_start = np.array(starts, dtype=np.int32)
    ref_nodes = sorted(node_refs)  # the nodes with reference edges
    ref_counts = np.zeros(num_nodes, dtype=np.int64)
    ref_counts[ref_nodes] = [len(node_refs[node]) for node in ref_nodes]
    ref_offsets = np.concatenate([[0], np.cumsum(ref_counts)]).astype(np.int32)
    flat_refs = np.array([pair for node in ref_nodes for pair in node_refs[node]],
                         dtype=np.int32).reshape(-1, 2)
    ref_rule = np.ascontiguousarray(flat_refs[:, 0])
    ref_return = np.ascontiguousarray(flat_refs[:, 1])
    is_final = np.array(final_list, dtype=bool)
    token_set = np.full(num_nodes, -1, dtype=np.int32)
    token_next = np.full(num_nodes, -1, dtype=np.int32)
    for k, token_set_rule in enumerate(range(len(dfas) - len(token_sets), len(dfas))):
        start = starts[token_set_rule]
        token_set[start] = k
        token_next[start] = token_moves[start]
    # a token node scans no byte but is a top: the next token may move it
    is_scannable = (next_node >= 0).any(axis=1) | (token_set >= 0)
    is_pure_return = is_final & ~is_scannable & (ref_counts == 0)
    token_count_next = _counter_chains(budgeted, counters_base, starts, node_refs, token_set,
                                       is_pure_return, [dfa.num_states for dfa in dfas], names)
    is_pure_return &= token_count_next < 0  # a counter is a frame of its own
    sizes = [dfa.num_states for dfa in dfas]
    node_rule = np.repeat(np.arange(len(dfas), dtype=np.int32), sizes)
    run_twin = np.full(num_nodes, -1, dtype=np.int32)
    run_room = np.full(num_nodes, -1, dtype=np.int32)
    for start, dfa in zip(starts, dfas):
        if dfa.runs is not None:
            twin, room = dfa.runs
            run_twin[start: start + dfa.num_states] = np.where(twin >= 0, twin + start, -1)
            run_room[start: start + dfa.num_states] = room

    # 6: nullability, left-recursion check, FIRST sets
    nullable, reached = _epsilon_reach(starts, node_refs, final_list)
    left_calls = _left_calls(reached, node_refs)
    callees_first = _callees_first_order(left_calls, names)
    rule_first = _first_sets(reached, left_calls, callees_first, next_node, byte_class)

    return Automaton(
        byte_class=byte_class,
        next_node=next_node,
        ref_offsets=ref_offsets,
        ref_rule=ref_rule,
        ref_return=ref_return,
        is_final=is_final,
        is_scannable=is_scannable,
        is_pure_return=is_pure_return,
        node_rule=node_rule,
        rule_start=rule_start,
        rule_nullable=np.array(nullable, dtype=bool),
        rule_first=rule_first,
        rule_lookahead=np.array(lookahead, dtype=np.int32),
        rule_names=tuple(names),
        root_rule=rule_ids[grammar.root_rule_name],
        token_set=token_set,
        token_next=token_next,
        token_set_offsets=np.cumsum([0] + [len(ts.ids) for ts in token_sets]).astype(np.int32),
        token_set_ids=np.array([i for ts in token_sets for i in ts.ids], dtype=np.int32),
        token_set_negated=np.array([ts.negated for ts in token_sets], dtype=bool),
        token_count_next=token_count_next,
        run_twin=run_twin,
        run_room=run_room,
    )


# ----------------------------------------------------------------------------- rule DFA cache

#: Minimal DFAs of rule bodies, shared by every compile of the process: a cache (bounded, least
#: recently used first out, behind a lock; ``clear_rule_dfa_cache`` empties it). Grammars of
#: one family repeat rules (JSON Schema: strings, numbers, whitespace, the same object shapes):
#: about half of the rules of 202 MaskBench schemas were found here. The key is the body with
#: its rule references numbered by first use (``_body_key``), and a miss builds the DFA in that
#: numbering; a hit gets its references' letters back (``_flatten`` maps them). A rule's DFA
#: depends on the body only through that key (the minimal DFA, numbered breadth-first in
#: letter order), so a hit equals a fresh build.
RULE_DFA_CACHE_SIZE = 4096
_rule_dfas: "collections.OrderedDict[_BodyKey, _CachedRuleDfa]" = collections.OrderedDict()
_rule_dfas_lock = threading.Lock()


@dataclass(frozen=True)
class _CachedRuleDfa:
    dfa: _RuleDfa     # minimal; reference k of the key has the letter _ref_letter(k)
    nfa_states: int   # what _NfaBuilder.build checked against max_nodes
    subsets: int      # states before minimisation: what the node budget counts


def clear_rule_dfa_cache() -> None:
    """Forget every cached rule DFA (tests; memory)."""
    with _rule_dfas_lock:
        _rule_dfas.clear()


class _BodyKey:
    """A ``_body_key`` hashed once: the cache's lookup, its move to the end and its insertion
    would each hash the whole body again (a tuple does not keep its hash)."""

    __slots__ = ("items", "hash")

    def __init__(self, items: tuple):
        self.items = items
        self.hash = hash(items)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        return self.hash == other.hash and self.items == other.items


def _body_key(body: Expr) -> Optional[Tuple[_BodyKey, Dict[str, int]]]:
    """(key, the referenced rules -> their first-use numbers, in that order) of a rule body: its
    expressions in pre-order, a literal as its bytes, a reference as -1 - its first-use
    number, and a compound expression met before in this body (the same object: a JSON string
    unit at every node of a key trie) as a back reference to where it was met, instead of its
    expressions again. Equal keys are equal bodies. None for a body with a token set (the
    builder numbers those as it meets them, across rules)."""
    names: Dict[str, int] = {}
    out: list = []
    append = out.append
    first_seen: Dict[int, int] = {}
    stack = [body]
    pop = stack.pop
    while stack:
        expr = pop()
        kind = expr.__class__
        if kind is Literal:
            append(expr.data)  # bytes keep their hash; a Literal computes it at every call
        elif kind is CharClass:
            append(expr)
        elif kind is RuleRef:
            append(-1 - names.setdefault(expr.name, len(names)))
        elif id(expr) in first_seen:
            append(("B", first_seen[id(expr)]))
        else:
            first_seen[id(expr)] = len(out)
            if kind is Sequence:
                append(("S", len(expr.items)))
                stack.extend(reversed(expr.items))  # pre-order
            elif kind is Choice:
                append(("A", len(expr.alternatives)))
                stack.extend(reversed(expr.alternatives))
            elif kind is Repeat:
                append(("R", expr.min, expr.max))
                stack.append(expr.expr)
            else:
                return None
    return _BodyKey(tuple(out)), names


def _program(items: tuple) -> Tuple[bytes, bytes, Tuple[CharClass, ...]]:
    """A rule body's key (``_body_key``) as a program (``PROGRAM_OPS``; csrc/automaton_build.c
    says what each operation holds), for the C construction: (the operations as int32 bytes,
    the literals' bytes, the classes by their CLASS index). Made on a cache miss only: the key
    itself stays a tuple, cheaper to make and hash for the hits."""
    code: List[int] = []
    put = code.extend
    blob: List[bytes] = []
    blob_length = 0
    classes: Dict[CharClass, int] = {}
    at: List[int] = []  # key item -> where its operation starts (BACK's operand)
    for item in items:
        at.append(len(code))
        kind = item.__class__
        if kind is bytes:
            put((_OP_LITERAL, blob_length, len(item)))
            blob.append(item)
            blob_length += len(item)
        elif kind is int:
            put((_OP_REF, -1 - item))
        elif kind is CharClass:
            put((_OP_CLASS, classes.setdefault(item, len(classes))))
        else:
            tag = item[0]
            if tag == "S":
                put((_OP_SEQUENCE, item[1]))
            elif tag == "A":
                put((_OP_CHOICE, item[1]))
            elif tag == "R":
                put((_OP_REPEAT, item[1], -1 if item[2] is None else item[2]))
            else:
                put((_OP_BACK, at[item[1]]))
    return array.array("i", code).tobytes(), b"".join(blob), tuple(classes)


def _rule_dfa(name: str, body: Expr, rule_ids: Dict[str, int], max_nodes: int,
              fragments: Dict[CharClass, _ClassFragment], token_rule_ids: Dict[TokenSet, int],
              budget: int, cacheable: bool
              ) -> Tuple[_RuleDfa, int, bool, Optional[Dict[int, int]]]:
    """(the rule's DFA, the states it counts against the budget, is it minimal already, the map
    of its reference letters to the grammar's or None). From the cache when ``cacheable`` (a
    grammar with no dead parts, so no pruning comes between determinising and minimising) and
    the cached build fits ``max_nodes`` and ``budget`` (else the build runs and raises as it
    always does); a cached DFA is shared, never changed: ``_flatten`` maps its letters."""
    key = _body_key(body) if cacheable else None
    if key is not None:
        letters = {_ref_letter(k): _ref_letter(rule_ids[ref]) for ref, k in key[1].items()}
        with _rule_dfas_lock:
            hit = _rule_dfas.get(key[0])
            if hit is not None:
                _rule_dfas.move_to_end(key[0])
        if hit is not None and hit.nfa_states <= max_nodes and hit.subsets <= budget:
            return hit.dfa, hit.subsets, True, letters
    # a cached DFA numbers its references by first use: its NFA is built so
    builder = _NfaBuilder(name, rule_ids if key is None else key[1], max_nodes, fragments,
                          token_rule_ids)
    chain = _bounded_run_dfa(body, builder, budget) if key is not None and not key[1] else None
    if chain is not None:  # minimal as built (see there): no subset construction
        _cache_rule_dfa(key[0], chain, builder.size_of(body), chain.num_states)
        return chain, chain.num_states, True, {}
    if key is not None:  # the NFA from the key's program, in C (where it is built)
        built = _c_program_dfa(key[0], len(key[1]), builder, budget)
        if built is not None:
            stored, subsets, nfa_states = built
            _cache_rule_dfa(key[0], stored, nfa_states, subsets)
            return stored, subsets, True, letters
    nfa = builder.build(body)
    dfa = _determinise(nfa, name, budget, max_nodes)
    if key is None:
        return dfa, dfa.num_states, False, None
    # the Python construction: C was not built, or it asked for Python (gxg_rule_dfa would
    # ask again for this NFA: the program's is the same)
    stored = _minimise(dfa)
    _cache_rule_dfa(key[0], stored, nfa.num_states - 2, dfa.num_states)
    return stored, dfa.num_states, True, letters


def _cache_rule_dfa(key: _BodyKey, dfa: _RuleDfa, nfa_states: int, subsets: int) -> None:
    """Store a rule's minimal DFA under its body key, with its moves flattened once (for
    ``_flatten``: this compile's and every later hit's); the least recently used go first."""
    dfa.flat  # flattened once, here, for this compile and every hit
    with _rule_dfas_lock:
        _rule_dfas[key] = _CachedRuleDfa(dfa, nfa_states, subsets)
        while len(_rule_dfas) > RULE_DFA_CACHE_SIZE:
            _rule_dfas.popitem(last=False)


BOUNDED_RUN_MIN = 8  # a bounded repetition from this many copies on is built as a chain


def _bounded_run_dfa(body: Expr, builder: "_NfaBuilder", budget: int,
                     min_copies: int = BOUNDED_RUN_MIN) -> Optional[_RuleDfa]:
    """The minimal DFA of ``open unit{lo,hi} close`` (two literals around a bounded repetition of
    a unit without references: a string of at most ``maxLength`` characters), built as a chain
    of ``hi`` copies of the unit's own minimal DFA, without the subset construction and the
    minimisation of ``hi`` unrolled copies (~26 ms a rule of 2,000-3,000 states on the VM).
    None when the body has another shape, ``hi`` is below ``min_copies``, or the chain would not
    be the minimal DFA as built; the caller then builds it the usual way (which also reports a
    repetition too large).

    The chain is deterministic and minimal when (checked here): the unit's minimal DFA has
    one final state, with no move out of it (no unit string is a prefix of another), no move
    into its start, and its start does not read the first byte of ``close``. Then after k
    whole units the state is "boundary k" (the unit's start, plus ``close`` from k = lo on),
    inside the (k+1)-th unit it is (k, the unit's state); states with different k accept
    different numbers of units, and within one k the unit's states are distinct.
    tests/test_automaton.py checks the chain against the usual build, byte by byte."""
    if not (isinstance(body, Sequence) and len(body.items) == 3):
        return None
    opening, run, closing = body.items
    if not (isinstance(opening, Literal) and isinstance(closing, Literal) and opening.data
            and closing.data and isinstance(run, Repeat) and run.max is not None
            and run.max >= min_copies):
        return None
    lo, hi = run.min, run.max
    if builder.size_of(body) > builder.max_nodes:
        return None  # the usual build reports it
    unit_nfa = builder.build(run.expr)
    if unit_nfa.ref_edges:
        return None
    unit, _ = _minimal_dfa(unit_nfa, 0, builder.rule_name, budget, builder.max_nodes)
    finals = [state for state, is_final in enumerate(unit.final) if is_final]
    if len(finals) != 1 or finals[0] == 0 or unit.moves[finals[0]] or \
            any(0 in move.values() for move in unit.moves):
        return None
    end = finals[0]
    literal_bytes = set(opening.data) | set(closing.data)
    cuts = sorted(set(unit.cuts) | literal_bytes | {b + 1 for b in literal_bytes} - {256})
    interval_of = {cut: index for index, cut in enumerate(cuts)}
    bounds = unit.cuts + [256]
    pieces = [range(interval_of[bounds[k]], interval_of[bounds[k + 1]] if bounds[k + 1] < 256
                    else len(cuts)) for k in range(len(unit.cuts))]
    unit_moves = [[(piece, target) for letter, target in move.items() for piece in pieces[letter]]
                  for move in unit.moves]
    close_first = interval_of[closing.data[0]]
    if any(piece == close_first for piece, _ in unit_moves[0]):
        return None
    inner = [state for state in range(unit.num_states) if state not in (0, end)]
    per_copy = len(inner)
    total = len(opening.data) + (hi + 1) + hi * per_copy + len(closing.data)
    if total > budget:
        raise _too_many_nodes(builder.rule_name, budget, builder.max_nodes)
    compile_budget.check("the automaton", builder.rule_name)
    # numbering as built: the opening's states, then per k the boundary k and the k-th copy's
    # inner states, the boundary hi, then the closing's states (its last one final). Every
    # copy's moves are one template (source offset, interval, target offset) from its
    # boundary; the next boundary is at offset per_copy + 1.
    boundary0 = len(opening.data)
    offset = {0: 0, end: per_copy + 1}
    offset.update((state, index + 1) for index, state in enumerate(inner))
    template = np.array([(offset[state], piece, offset[target])
                         for state in [0] + inner for piece, target in unit_moves[state]],
                        dtype=np.int64).reshape(-1, 3)
    boundaries = boundary0 + np.arange(hi + 1, dtype=np.int64) * (per_copy + 1)
    closing_start = int(boundaries[-1]) + 1
    copies = np.repeat(boundaries[:-1], len(template))
    tiled = np.tile(template, (hi, 1))
    parts = [np.array([(index, interval_of[byte], index + 1)
                       for index, byte in enumerate(opening.data)], dtype=np.int64),
             np.stack([tiled[:, 0] + copies, tiled[:, 1], tiled[:, 2] + copies], axis=1),
             np.stack([boundaries[lo:], np.full(hi + 1 - lo, close_first),
                       np.full(hi + 1 - lo, closing_start)], axis=1),
             np.array([(closing_start + index, interval_of[byte], closing_start + index + 1)
                       for index, byte in enumerate(closing.data[1:])],
                      dtype=np.int64).reshape(-1, 3)]
    moves = np.concatenate(parts)
    # numbered breadth-first with moves in letter order, as every rule's nodes are (module
    # docstring, _minimise)
    order = _breadth_first_flat(total, moves)
    number = np.empty(total, dtype=np.int64)
    number[order] = np.arange(total)
    renumbered = np.stack([number[moves[:, 0]], moves[:, 1], number[moves[:, 2]]], axis=1)
    renumbered = renumbered[np.lexsort((renumbered[:, 1], renumbered[:, 0]))]
    final = np.zeros(total, dtype=bool)
    final[number[total - 1]] = True
    # the twins: (k, place) -> (lo, place) for k >= lo, and the rooms hi - k
    count = np.full(total, -1, dtype=np.int32)
    place = np.full(total, -1, dtype=np.int64)
    chain = np.arange(boundary0, closing_start)
    count[chain] = (chain - boundary0) // (per_copy + 1)
    place[chain] = (chain - boundary0) % (per_copy + 1)
    twin = np.full(total, -1, dtype=np.int32)
    counted = count >= lo
    twin[number[counted]] = number[boundaries[lo] + place[counted]]
    room = np.full(total, -1, dtype=np.int32)
    room[number[count >= 0]] = hi - count[count >= 0]
    return _RuleDfa(cuts, None, final.tolist(), flat=_FlatMoves(renumbered, (), ()),
                    runs=(twin, room))


_BREADTH_FIRST_ARGS = (ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)


def _breadth_first_flat(num_states: int, moves: np.ndarray) -> np.ndarray:
    """The states reachable from state 0 of moves int64 [k, 3] (source, letter, target), in
    breadth-first order with each state's moves taken in letter order (``gxg_breadth_first``
    in C where it is built; the same order in Python otherwise)."""
    moves = np.ascontiguousarray(moves, dtype=np.int64)
    kernel = _native("gxg_breadth_first", _BREADTH_FIRST_ARGS, ctypes.c_int64)
    if kernel is not None:
        order = np.empty(num_states, dtype=np.int64)
        reached = kernel(num_states, len(moves), moves.ctypes.data, order.ctypes.data)
        if reached >= 0:
            return order[:reached]
    # (moves as dicts in letter order, which _breadth_first follows)
    order = _breadth_first(_moves_of(_FlatMoves(moves, (), ()), num_states), 0)
    return np.asarray(order, dtype=np.int64)


def _counter_chains(budgeted: List[Tuple[int, int, int]], counters_base: int, starts: List[int],
                    node_refs: _NodeRefs, token_set: np.ndarray,
                    is_pure_return: np.ndarray, sizes: List[int], names: List[str]
                    ) -> np.ndarray:
    """``token_count_next``: for each budgeted rule R, the chain C(-1) -> C(0) -> ... ->
    C(N-1) -> C(N-1), where C(-1) is the node R's reference to R#counted returns to; after
    checking that every occurrence's top sits right above its counter (module docstring)."""
    chains = np.full(len(token_set), -1, dtype=np.int32)
    wrappers = {index for index, _, _ in budgeted}
    counter_rule = counters_base
    for index, counted, max_tokens in budgeted:
        counters = [starts[counter_rule + k] for k in range(max_tokens)]
        counter_rule += max_tokens
        refs = node_refs[starts[index]]
        if not refs:  # R#counted derives nothing, and neither does R: no occurrence to count
            continue
        _check_right_linear(names[index], counted, wrappers, starts, sizes, node_refs,
                            token_set, is_pure_return, names)
        chain = [refs[0][1]] + counters
        chains[chain[:-1]] = chain[1:]
        chains[chain[-1]] = chain[-1]
    return chains


def _check_right_linear(name: str, counted: int, wrappers: set, starts: List[int],
                        sizes: List[int], node_refs: _NodeRefs,
                        token_set: np.ndarray, is_pure_return: np.ndarray,
                        names: List[str]) -> None:
    """GrammarError unless every reference reachable from rule ``counted`` is a tail call to
    a rule that is neither a token set nor budgeted (``wrappers``)."""
    seen, pending = {counted}, [counted]
    while pending:
        rule = pending.pop()
        for node in range(starts[rule], starts[rule] + sizes[rule]):
            for callee, ret in node_refs[node]:
                what = ("a token item" if token_set[starts[callee]] >= 0 else
                        f"the budgeted rule {names[callee]!r}" if callee in wrappers else
                        None if is_pure_return[ret] else
                        f"a reference to {names[callee]!r} that is not a tail call")
                if what is not None:
                    raise GrammarError(
                        f"the token budget (max_tokens) of rule {name!r} needs a regular "
                        f"body written with tail calls only (as the EBNF, Lark and "
                        f"structural-tag readers write it); its body reaches {what}")
                if callee not in seen:
                    seen.add(callee)
                    pending.append(callee)


class _FirstSeen(dict):
    """key -> ``first`` + the order in which keys were first looked up."""

    def __init__(self, first: int):
        super().__init__()
        self.first = first

    def __missing__(self, key):
        value = self[key] = self.first + len(self)
        return value


def _token_rule_name(token_set: TokenSet, taken: set) -> str:
    """``Token(1, 2)`` / ``ExcludeToken(3)`` (cut short when long), made unique."""
    ids = ", ".join(map(str, token_set.ids[:8])) + (", ..." if len(token_set.ids) > 8 else "")
    return _unique_name(f"{'ExcludeToken' if token_set.negated else 'Token'}({ids})", taken,
                        "#")
