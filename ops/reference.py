"""CPU reference implementation of the per-step ops on the shared ``RuntimeState`` layout.

In:  a ``RuntimeState`` (``gxg.runtime``), one slot index, and a grammar's ``HostTables``
     (automaton + kernel mask layout + ``HostVocabulary``): ``host_tables`` builds them from a
     ``CompiledGrammar`` (``GrammarMatcher``), ``gxg.ops.arena_tables`` from the arena's tensors
     (the CPU kernels of the ops).
Out: the ops, each for one slot, mutating the state in place:

     reset(state, slot, tables)                  initial closure of the root
     accept_token(state, slot, tables, token)    -> bool; a rejected token changes nothing
     accept_bytes(state, slot, tables, data)     -> bool; one history step for the whole string
     accept_tokens(state, slot, tables, tokens)  -> accepted prefix length (accept_token each)
     rollback(state, slot, num_tokens)           -> bool; False if num_tokens > history
     fill_next_token_bitmask(state, slot, tables, row) -> need_apply
     restrict_to_budget(state, slot, tables, row, remaining) -> a completion fits

These are the documented reference of the GPU kernels: the same moves (``gxg.compiler.
automaton``) in the same order. A byte step scans every top, then closes the new stacks with a
LIFO work list in seed order; a (node, parent) pair is visited once per closure; a stack whose
top node can scan becomes a top (pool entry reused when the closure already made one, else
appended); pushes append the return frame unless the pool already holds it (the pool index,
below: frames are hash-consed) or it is a pure return (tail call); a pop at the bottom sets
``can_end``. After the last byte, the entries appended during the step that no new
top reaches are dropped (window compaction), so the pool grows only by what stays live. Before
a step, a pool more than 3/4 full is compacted to what the tops and the history reach.

The mask is a function of the set of live stacks: accept rows of the tops' nodes OR'ed, plus
their uncertain tokens walked from the full stack, plus the stop tokens when the root can end.
The host walks uncertain tokens with the vectorised tuple walker; the GPU kernels walk them on
the pool; both must give the same bits.

The token budget (``restrict_to_budget``, after the fill; ``xg_budget`` in csrc/automaton.cu is
its kernel) narrows a filled row so that the output can still complete within ``remaining``
tokens (this one included), with distances in bytes (``gxg.compiler.completion``):
  * ``remaining < 0`` (no budget), a terminated slot or one with an error code: unchanged;
  * an allowed stop token fits; another allowed token fits iff some stack it leaves has a
    distance of at most ``remaining - 1`` (END: 0);
  * the row becomes the fitting tokens when there is one, and stays as it was when there is
    none (no completion fits: the output will end incomplete, as without a budget).
With ``D`` the largest distance of the live stacks, a token of ``L`` bytes with
``D + L * max_rise <= remaining - 1`` fits without a walk, so only the tokens longer than
``(remaining - 1 - D) / max_rise`` (a prefix of the ids sorted by length) are walked from the
full stacks — nothing while the budget is loose. The answer is exact either way: the bound only
saves walks.
"""
from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from gxg import layout
from gxg.layout import bitmask_words, pool_index_slot
from gxg.compiler.completion import CompletionDistances, NO_RISE_BOUND, completion_distances
from gxg.compiler.stack_walk import StackWalker
from gxg.compiler.mask_cache import StateClasses, classify_pair
from gxg.compiler.vocab_walk import DEAD, RunBreaks, VocabularyWalk
from gxg.grammar_compiler import token_trie
from gxg.compile_budget import CompileTimeoutError
from gxg.grammar.ir import GrammarError
from gxg.runtime import ErrorCode, RuntimeState

MAX_WALK_STATES = 50_000  # the uncertain-token walk cache is rebuilt past this many states
MAX_CACHED_STACKS = 4096  # (node, stack) answers kept for the uncertain-token check
MAX_CACHED_PAIRS = 4096   # (node, node below) classifications kept for it
# Past this many live stacks (a matcher that grew its limits) the fill walks the uncertain
# tokens once from the set of all stacks instead of once per stack from its full tuple.
MAX_STACKS_WALKED = 64


class StepFailed(Exception):
    def __init__(self, code: int):
        super().__init__(int(code))
        self.code = int(code)


@dataclass(frozen=True, eq=False)
class HostVocabulary:
    """The vocabulary as the CPU ops read it, with its stop tokens (an arena's is shared by the
    tables of all its grammars: ``gxg.ops.arena_tables``).

    vocab_size        int
    token_bytes       uint8 [T]    the sorted vocabulary's bytes, concatenated
    token_offsets     int64 [S+1]  sorted token i = token_bytes[off[i]:off[i+1]]
    sorted_token_ids  int64 [S]    token id of sorted index i
    bytes_by_id       bytes per id: what accepting the id consumes (ids past its end: padding)
    is_stop           bool  [V]
    stop_token_ids    int64 [stops]  the ids where is_stop is set, ascending
    special           bool  [V]    never accepted: empty non-stop tokens and padding
    ids_by_length     int64 [V]    token ids by byte length, longest first
    lengths_by_id     int64 [V]    byte length of each id (0 outside the sorted vocabulary)
    runs              RunBreaks over token_bytes: walks skip runs of looping states
    """
    vocab_size: int
    token_bytes: np.ndarray
    token_offsets: np.ndarray
    sorted_token_ids: np.ndarray
    bytes_by_id: Sequence[bytes]
    is_stop: np.ndarray
    special: np.ndarray
    ids_by_length: np.ndarray
    lengths_by_id: np.ndarray
    runs: Optional[RunBreaks] = None  # the vocabulary's run tables (shared with the compiler's)

    @functools.cached_property
    def stop_token_ids(self) -> np.ndarray:
        ids = np.flatnonzero(self.is_stop)
        ids.flags.writeable = False  # shared by every grammar's tables
        return ids


# A cache, per TokenizerInfo (weakly held) and stop-token tuple: every grammar compiled for a
# tokenizer shares its HostVocabulary instead of copying the vocabulary (~0.5 ms for Qwen's
# 151,851 ids) for each new grammar's tables.
_VOCABULARIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_VOCABULARIES_LOCK = threading.Lock()


def tokenizer_vocabulary(tokenizer_info, stop_token_ids) -> HostVocabulary:
    """The ``HostVocabulary`` of a ``TokenizerInfo`` with these stop tokens (they may differ
    from the tokenizer's: a stop token is never special); built once per pair (the arrays are
    read-only)."""
    key = tuple(int(t) for t in stop_token_ids)
    with _VOCABULARIES_LOCK:
        per_stops = _VOCABULARIES.setdefault(tokenizer_info, {})
        vocabulary = per_stops.get(key)
        if vocabulary is None:
            vocabulary = per_stops[key] = _host_vocabulary(tokenizer_info, key)
    return vocabulary


def _host_vocabulary(tokenizer_info, stop_token_ids) -> HostVocabulary:
    info = tokenizer_info
    is_stop = np.zeros(info.vocab_size, dtype=bool)
    is_stop[np.asarray(list(stop_token_ids), dtype=np.int64)] = True
    special = np.zeros(info.vocab_size, dtype=bool)
    special[np.asarray(info.special_token_ids, dtype=np.int64)] = True
    return HostVocabulary(info.vocab_size, info.token_bytes, info.token_offsets,
                          info.sorted_token_ids, info.decoded_vocab, is_stop, special & ~is_stop,
                          info.ids_by_length, info.token_lengths_by_id,
                          token_trie(info).runs)


class HostTables:
    """One compiled grammar's tables, as Python lists where the byte loop reads them
    (``lists``: the automaton's ``AutomatonLists``).

    ``automaton``: an ``Automaton`` or an object with the fields ``StackWalker`` reads;
    ``layout``: what the fill reads per node (``rows(nodes)``, ``uncertain(node)``): a
    ``KernelMaskLayout``, or ``NodeMasks`` over a mask cache whose entries are computed on
    first use; ``completion``: its distances, computed on first use (from ``automaton`` when
    not given)."""

    def __init__(self, automaton, layout, vocabulary: HostVocabulary,
                 completion: Optional[Callable[[], CompletionDistances]] = None):
        a = automaton
        self.automaton = automaton
        self.layout = layout
        self.lists = a.lists  # the byte loop's tables, shared with the automaton's walkers
        # (max over the lists: a pass in C, not a generator per node)
        self.has_token_nodes = max(self.lists.token_next, default=-1) >= 0
        self.has_counters = max(self.lists.token_count_next, default=-1) >= 0
        self.root_start = int(a.rule_start[a.root_rule])
        v = vocabulary
        self.vocabulary = v
        self.vocab_size = v.vocab_size
        self.words = bitmask_words(self.vocab_size)
        self.decoded_vocab = v.bytes_by_id
        self.sorted_token_ids = v.sorted_token_ids
        self.stop_token_ids = v.stop_token_ids
        self.special = v.special
        self.is_stop = v.is_stop
        self._walk: Optional[VocabularyWalk] = None
        # the compiled grammar's completion distances, computed on first use
        self._completion_of = completion or functools.lru_cache(maxsize=1)(
            functools.partial(completion_distances, automaton))
        self._token_of_id: Optional[Tuple[np.ndarray, np.ndarray]] = None
        # A cache: (node, stack) -> token ids among the node's uncertain tokens that the stack
        # accepts. The answer is a pure function of the key; bounded, cleared when full.
        self._uncertain_accepted: dict = {}
        # A cache: (node, node below) -> the node's uncertain tokens decided by that frame
        # (``context_pair``); pure, bounded, cleared when full. Stacks that differ deeper down
        # (a right-recursive list adds a frame per item) share it.
        self._pairs: dict = {}
        self._pairs_met: set = set()  # pairs walked once from a whole stack (bounded)
        self._escaping: Optional[Tuple[VocabularyWalk, StateClasses]] = None
        self._lock = threading.Lock()

    def uncertain_accepted(self, node: int, stack: Tuple[int, ...], sorted_indices) -> np.ndarray:
        """Token ids among ``sorted_indices`` (the node's uncertain tokens) that ``stack``
        accepts, or the walk's GrammarError (too many parse stacks), kept like an answer.
        Matchers on several threads share this object, hence the lock."""
        key = (node, stack)
        with self._lock:
            hit = self._uncertain_accepted.get(key)
            if hit is None:
                if len(self._uncertain_accepted) >= MAX_CACHED_STACKS:
                    self._uncertain_accepted.clear()
                try:
                    hit = self._accepted_from_stack(node, stack, sorted_indices)
                except CompileTimeoutError:  # a deadline, not an answer: not kept
                    raise
                except GrammarError as refused:  # kept too: the walk is not repeated
                    hit = refused
                self._uncertain_accepted[key] = hit
        if isinstance(hit, GrammarError):
            raise hit
        return hit

    def _accepted_from_stack(self, node: int, stack: Tuple[int, ...], sorted_indices
                             ) -> np.ndarray:
        """Token ids among ``sorted_indices`` that ``stack`` accepts: those the frame below
        the top decides (``context_pair``), then the rest walked from the whole stack."""
        pair = (node, stack[-2]) if len(stack) >= 2 and not self.has_counters else None
        if pair is None or (pair not in self._pairs and pair not in self._pairs_met):
            # the bottom, a counter frame (no return node), or a pair met for the first time:
            # one walk from the whole stack (a pair's own walk would cost as much again; a
            # pair that comes back under another stack is worth it)
            if pair is not None:
                if len(self._pairs_met) >= MAX_CACHED_PAIRS:
                    self._pairs_met.clear()
                self._pairs_met.add(pair)
            return self.sorted_token_ids[_walk_from_stack(self, stack, sorted_indices)]
        accepted, still = self.context_pair(node, stack[-2], sorted_indices)
        walked = self.sorted_token_ids[_walk_from_stack(self, stack, still)] if len(still) \
            else still
        return np.concatenate([accepted, walked])

    def context_pair(self, node: int, below: int, sorted_indices: np.ndarray
                     ) -> Tuple[np.ndarray, np.ndarray]:
        """The node's uncertain tokens (``sorted_indices``) walked from the stack (below,
        node), escaping past ``below`` into every caller as the mask cache does (no lookahead,
        like the walk from whole stacks): (token ids accepted whatever lies under ``below``,
        sorted indices still uncertain). The tokens left out are rejected. The same second
        level as the device's context pairs (``gxg.compiler.mask_cache.classify_pair``),
        computed when first asked for; the caller holds the lock."""
        key = (node, below)
        hit = self._pairs.get(key)
        if hit is None:
            if len(self._pairs) >= MAX_CACHED_PAIRS:
                self._pairs.clear()
            if self._escaping is None or len(self._escaping[0].configs) > MAX_WALK_STATES:
                v = self.vocabulary
                walk = VocabularyWalk(StackWalker(self.automaton, escape_bottom=True,
                                                  use_lookahead=False),
                                      v.token_bytes, v.token_offsets, v.runs)
                self._escaping = (walk, StateClasses(walk))
            accepted, still = classify_pair(*self._escaping, node, below, sorted_indices)
            hit = self._pairs[key] = (self.sorted_token_ids[accepted], still)
        return hit

    @property
    def completion(self) -> CompletionDistances:
        """Completion distances of the automaton (the compiled grammar's, cached there)."""
        return self._completion_of()

    def tokens_by_id(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sorted index of each id, -1 for ids outside the sorted vocabulary; the ids by byte
        length, longest first; minus their lengths, ascending), int64 [V] each (cached)."""
        if self._token_of_id is None:
            v = self.vocabulary
            sorted_index = np.full(self.vocab_size, -1, dtype=np.int64)
            sorted_index[self.sorted_token_ids] = np.arange(len(self.sorted_token_ids))
            by_length = v.ids_by_length
            self._token_of_id = (sorted_index, by_length, -v.lengths_by_id[by_length])
        return self._token_of_id

    def full_stack_walk(self) -> VocabularyWalk:
        """A cached walker over full stacks (a cache: rebuilt when it grows too large)."""
        if self._walk is None or len(self._walk.configs) > MAX_WALK_STATES:
            v = self.vocabulary
            self._walk = VocabularyWalk(StackWalker(self.automaton, escape_bottom=False),
                                        v.token_bytes, v.token_offsets, v.runs)
        return self._walk


# A cache that says so: the HostTables of each live compiled grammar, per set of stop tokens
# (matchers and arenas of one grammar share them). Weak: a grammar that is gone drops out.
_TABLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_TABLES_LOCK = threading.Lock()


def host_tables(compiled, stop_token_ids: tuple) -> HostTables:
    """The CPU ops' view of ``compiled`` (a ``CompiledGrammar``) for these stop tokens, built
    once and shared."""
    with _TABLES_LOCK:
        per_stops = _TABLES.setdefault(compiled, {})
        tables = per_stops.get(stop_token_ids)
        if tables is None:
            # a weak reference: the value must not keep its own key alive
            grammar = weakref.ref(compiled)
            tables = HostTables(compiled.automaton, compiled.node_masks,
                                tokenizer_vocabulary(compiled.tokenizer_info, stop_token_ids),
                                completion=lambda: grammar().completion)
            per_stops[stop_token_ids] = tables
    return tables


# ----------------------------------------------------------------------------- pool index
#
# The pool's frames are hash-consed: a return frame (node, parent) that already has an entry
# gets that entry again, so one stack below the top has one entry however many parses reach it
# and the tops, deduplicated by (node, parent) in each closure, are the distinct stacks. Only
# frames need it: a top's own entry is never a parent (a push's frame hangs from the top's
# parent, a pop makes the parent the top), so tops keep the closure-local reuse and a token
# that pushes nothing (inside a string, a number) touches no index. ``pool_index`` finds
# existing entries: slot ->
# entry, linear probing over POOL_INDEX_PROBES slots from ``pool_index_slot``. It is a cache
# that is checked, not trusted: a slot's entry counts only if it is below the pool size and
# holds the key (rollback truncates the pool without touching the index); a slot that is
# EMPTY ends a probe, a TOMBSTONE (entry moved or dropped by window compaction, which knows the
# slots the step filled) or an entry past the pool size is free for an insert. An insert that finds no free slot among the probes is
# skipped (the entry then has no index slot: a later lookup misses it and appends a copy, which
# is correct, only less shared). The kernels do the same moves in the same order.

INDEX_EMPTY = layout.KERNEL_CONSTANTS["POOL_INDEX_EMPTY"]
INDEX_TOMBSTONE = layout.KERNEL_CONSTANTS["POOL_INDEX_TOMBSTONE"]
INDEX_PROBES = layout.KERNEL_CONSTANTS["POOL_INDEX_PROBES"]


def _index_probe(state: RuntimeState, slot: int, node: int, parent: int) -> Tuple[int, int]:
    """(entry of (node, parent) or -1, the first index slot an insert may use or -1)."""
    index = state.pool_index[slot]
    mask = index.shape[0] - 1
    size = int(state.pool_size[slot])
    pool_node, pool_parent = state.pool_node[slot], state.pool_parent[slot]
    start = pool_index_slot(node, parent, mask + 1)
    free = -1
    for i in range(INDEX_PROBES):
        j = (start + i) & mask
        entry = int(index[j])
        if entry == INDEX_EMPTY:
            return -1, (j if free < 0 else free)
        if entry == INDEX_TOMBSTONE or entry >= size:
            if free < 0:
                free = j
        elif pool_node[entry] == node and pool_parent[entry] == parent:
            return entry, free
    return -1, free


def _index_insert(state: RuntimeState, slot: int, entry: int) -> None:
    node, parent = int(state.pool_node[slot, entry]), int(state.pool_parent[slot, entry])
    found, free = _index_probe(state, slot, node, parent)
    if found < 0 and free >= 0:
        state.pool_index[slot, free] = entry


def rebuild_pool_index(state: RuntimeState, slot: int) -> None:
    """Clear the slot's index, then insert every pool entry in order."""
    state.pool_index[slot].fill(INDEX_EMPTY)
    for entry in range(int(state.pool_size[slot])):
        _index_insert(state, slot, entry)


def _new_entry(state: RuntimeState, slot: int, node: int, parent: int) -> int:
    """A new pool entry (node, parent) at the end of the slot's pool."""
    entry = int(state.pool_size[slot])
    if entry >= state.limits.pool_entries:
        raise StepFailed(ErrorCode.POOL_FULL)
    state.pool_node[slot, entry] = node
    state.pool_parent[slot, entry] = parent
    state.pool_size[slot] = entry + 1
    return entry


# ----------------------------------------------------------------------------- closure


def _close(state: RuntimeState, slot: int, t: HostTables, seeds: List[Tuple[int, int, int]],
           indexed: Dict[int, int]) -> Tuple[List[int], bool]:
    """Close seed stacks ``(node, parent, entry or -1)``; returns (tops, can_end). Records in
    ``indexed`` the index slot of every entry it puts in the pool index (the kernel's
    ``frame_slot`` scratch), for the window compaction."""
    limits, lists = state.limits, t.lists
    pool_node, pool_parent = state.pool_node[slot], state.pool_parent[slot]
    count_next = lists.token_count_next
    created = {}
    seen = set()
    tops: List[int] = []
    can_end = False
    work = list(reversed(seeds))

    def entry_for(node: int, parent: int, frame: bool) -> int:
        key = (node, parent)
        free = -1
        if frame:  # the index first, then this closure's entries (one may be a top's)
            found, free = _index_probe(state, slot, node, parent)
            if found >= 0:
                return found
        index = created.get(key)
        if index is None:
            index = created[key] = _new_entry(state, slot, node, parent)
        if frame and free >= 0:
            state.pool_index[slot, free] = index
            indexed[index] = free
        return index

    while work:
        node, parent, entry = work.pop()
        if (node, parent) in seen:
            continue
        seen.add((node, parent))
        if len(seen) > limits.max_closure:
            raise StepFailed(ErrorCode.CLOSURE_TOO_LARGE)
        if lists.is_scannable[node]:
            if len(tops) >= limits.max_stacks:
                raise StepFailed(ErrorCode.TOO_MANY_STACKS)
            tops.append(entry if entry >= 0 else entry_for(node, parent, False))
        pushes = []
        for rule, ret in lists.refs[node]:
            frame = parent if lists.is_pure_return[ret] else entry_for(ret, parent, True)
            pushes.append((lists.rule_start[rule], frame, -1))
        if lists.is_final[node]:
            pop = parent
            if t.has_counters:  # a counter frame only pops again: pop through it at once
                while pop >= 0 and count_next[pool_node[pop]] >= 0:
                    pop = int(pool_parent[pop])
            if pop < 0:
                can_end = True
            else:
                pushes.append((int(pool_node[pop]), int(pool_parent[pop]), pop))
        if len(work) + len(pushes) > limits.work_capacity:
            raise StepFailed(ErrorCode.CLOSURE_TOO_LARGE)
        work.extend(reversed(pushes))
    return tops, can_end


def _count_token(state: RuntimeState, slot: int, t: HostTables, tops: List[int], can_end: bool,
                 base: int, indexed: Dict[int, int]) -> List[int]:
    """A token boundary (after a token, after a reset) for the token budgets
    (``gxg.compiler.automaton``): a top whose parent frame is a counter that is not the last
    moves to the next counter (a new frame, hash-consed like a closure's, under a new top
    entry, or the top's own entry rewritten when this step made it: ``base`` and above, not
    indexed, so nothing else refers to it); a top under the last counter is *exhausted* (its
    occurrence has N tokens). The exhausted tops are dropped when anything else is left
    (another top, or the end of the grammar); when nothing is, they are all kept (XGrammar's
    best effort: the occurrences go on until one can end). The tops keep their order; a moved
    top equal to a kept one is dropped."""
    count_next = t.lists.token_count_next
    pool_node, pool_parent = state.pool_node[slot], state.pool_parent[slot]
    moves, exhausted = [], []  # per top: its counter's next (-1: none), and whether it is last
    for entry in tops:
        parent = int(pool_parent[entry])
        counter = int(pool_node[parent]) if parent >= 0 else -1
        target = count_next[counter] if counter >= 0 else -1
        moves.append(target)
        exhausted.append(target >= 0 and target == counter)
    if all(target < 0 for target in moves):
        return tops
    drop_exhausted = can_end or not all(exhausted)
    out: List[int] = []
    seen = set()
    for entry, target, spent in zip(tops, moves, exhausted):
        if spent and drop_exhausted:
            continue
        node, parent = int(pool_node[entry]), int(pool_parent[entry])
        moved = target >= 0 and not spent
        if moved:
            parent = _frame_entry(state, slot, target, int(pool_parent[parent]), indexed)
        if (node, parent) in seen:
            continue
        seen.add((node, parent))
        if moved and entry >= base and entry not in indexed:
            pool_parent[entry] = parent
        elif moved:
            entry = _new_entry(state, slot, node, parent)
        out.append(entry)
    return out


def _frame_entry(state: RuntimeState, slot: int, node: int, parent: int,
                 indexed: Dict[int, int]) -> int:
    """The frame (node, parent): its entry from the pool index, or a new one put there."""
    found, free = _index_probe(state, slot, node, parent)
    if found >= 0:
        return found
    entry = _new_entry(state, slot, node, parent)
    if free >= 0:
        state.pool_index[slot, free] = entry
        indexed[entry] = free
    return entry


def _plain_step(state: RuntimeState, slot: int, t: HostTables, entry: int, byte: int,
                base: int, indexed: Dict[int, int]) -> Optional[int]:
    """One byte from a single top into a plain node (``AutomatonLists.is_plain``): the closure is
    that stack alone, so the new top is (target, the top's parent), made without the work
    list; it overwrites the top's own entry when that is the step's last entry and not indexed
    (nothing refers to it: window compaction would drop it), else it is appended, as the
    closure would. Returns the new top, or None when the byte is not such a step."""
    lists = t.lists
    target = lists.next_node[int(state.pool_node[slot, entry])][lists.byte_class[byte]]
    if target < 0 or not lists.is_plain[target]:
        return None
    size = int(state.pool_size[slot])
    if entry == size - 1 and entry >= base and entry not in indexed:
        state.pool_node[slot, entry] = target
        return entry
    return _new_entry(state, slot, target, int(state.pool_parent[slot, entry]))


def _advance(state, slot, t: HostTables, tops: List[int], byte: int, indexed: Dict[int, int],
             token_seeds=()):
    """One byte from ``tops``, closed together with ``token_seeds`` (the token's moves, added
    at its last byte); None when nothing survives."""
    pool_node, pool_parent = state.pool_node[slot], state.pool_parent[slot]
    lists = t.lists
    cls = lists.byte_class[byte]
    seeds = []
    for entry in tops:
        target = lists.next_node[pool_node[entry]][cls]
        if target >= 0:
            seeds.append((target, int(pool_parent[entry]), -1))
    seeds.extend(token_seeds)
    if not seeds:
        return None
    if len(seeds) > state.limits.work_capacity:
        raise StepFailed(ErrorCode.CLOSURE_TOO_LARGE)
    return _close(state, slot, t, seeds, indexed)


# ----------------------------------------------------------------------------- compaction


def _compact_window(state: RuntimeState, slot: int, base: int, tops: List[int],
                    indexed: Dict[int, int]) -> List[int]:
    """Drop entries appended since ``base`` that no top reaches; returns the remapped tops.
    The pool index follows the entries the step indexed (``indexed``: entry -> index slot):
    a dropped one's slot becomes a tombstone, a moved one's slot gets its new index when its
    key is unchanged (its parent did not move), else a tombstone and the new key is inserted
    after the move."""
    size = int(state.pool_size[slot])
    if size == base:
        return tops
    pool_node, pool_parent = state.pool_node[slot], state.pool_parent[slot]
    live = np.zeros(size - base, dtype=bool)
    for entry in tops:
        while entry >= base and not live[entry - base]:
            live[entry - base] = True
            entry = int(pool_parent[entry])
    new_index = base + np.cumsum(live) - 1
    kept = np.nonzero(live)[0] + base
    rekeyed = []
    for entry in sorted(indexed):
        j, offset = indexed[entry], entry - base
        if not live[offset]:
            state.pool_index[slot, j] = INDEX_TOMBSTONE
        elif new_index[offset] != entry:
            parent = int(pool_parent[entry])
            if parent >= base and new_index[parent - base] != parent:
                state.pool_index[slot, j] = INDEX_TOMBSTONE
                rekeyed.append(int(new_index[offset]))
            else:
                state.pool_index[slot, j] = new_index[offset]
    parents = pool_parent[kept]
    moved = parents >= base
    parents[moved] = new_index[parents[moved] - base]
    pool_node[base: base + len(kept)] = pool_node[kept]
    pool_parent[base: base + len(kept)] = parents
    state.pool_size[slot] = base + len(kept)
    for entry in rekeyed:
        _index_insert(state, slot, entry)
    return [int(new_index[e - base]) if e >= base else e for e in tops]


def compact_pool(state: RuntimeState, slot: int) -> None:
    """Keep only the entries that the live tops and the history ring reach (order kept)."""
    size = int(state.pool_size[slot])
    pool_node, pool_parent = state.pool_node[slot], state.pool_parent[slot]
    live = np.zeros(size, dtype=bool)
    roots = list(state.tops[slot, : state.num_tops[slot]])
    for step in _history_slots(state, slot):
        roots.extend(state.hist_tops[slot, step, : state.hist_num_tops[slot, step]])
    for entry in roots:
        entry = int(entry)
        while entry >= 0 and not live[entry]:
            live[entry] = True
            entry = int(pool_parent[entry])
    new_index = np.cumsum(live) - 1
    kept = np.nonzero(live)[0]
    parents = pool_parent[kept]
    parents[parents >= 0] = new_index[parents[parents >= 0]]
    pool_node[: len(kept)] = pool_node[kept]
    pool_parent[: len(kept)] = parents
    state.pool_size[slot] = len(kept)
    count = state.num_tops[slot]
    state.tops[slot, :count] = new_index[state.tops[slot, :count]]
    for step in _history_slots(state, slot):
        count = state.hist_num_tops[slot, step]
        state.hist_tops[slot, step, :count] = new_index[state.hist_tops[slot, step, :count]]
        # A rollback to this step must not drop entries that now sit anywhere below the new
        # size, so every kept step restores to the compacted size.
        state.hist_pool_size[slot, step] = len(kept)
    rebuild_pool_index(state, slot)


def _history_slots(state: RuntimeState, slot: int) -> List[int]:
    h = state.limits.history
    head, length = int(state.hist_head[slot]), int(state.hist_len[slot])
    return [(head - 1 - i) % h for i in range(length)]


# ----------------------------------------------------------------------------- the ops


def reset(state: RuntimeState, slot: int, t: HostTables) -> None:
    state.pool_size[slot] = 0
    state.pool_index[slot].fill(INDEX_EMPTY)
    state.hist_len[slot] = 0
    state.hist_head[slot] = 0
    state.terminated[slot] = 0
    state.error[slot] = 0
    indexed: Dict[int, int] = {}
    try:
        tops, can_end = _close(state, slot, t, [(t.root_start, -1, -1)], indexed)
        if t.has_counters:  # the first token starts here
            tops = _count_token(state, slot, t, tops, can_end, 0, indexed)
    except StepFailed as failed:
        state.error[slot] = failed.code
        state.pool_size[slot] = 0
        tops, can_end = [], False
    _write_tops(state, slot, tops, can_end)


def _write_tops(state, slot, tops, can_end) -> None:
    state.tops[slot, : len(tops)] = tops
    state.num_tops[slot] = len(tops)
    state.can_end[slot] = int(can_end)


def _push_history(state: RuntimeState, slot: int) -> None:
    h = state.limits.history
    head = int(state.hist_head[slot])
    count = int(state.num_tops[slot])
    state.hist_tops[slot, head, :count] = state.tops[slot, :count]
    state.hist_num_tops[slot, head] = count
    state.hist_pool_size[slot, head] = state.pool_size[slot]
    state.hist_can_end[slot, head] = state.can_end[slot]
    state.hist_terminated[slot, head] = state.terminated[slot]
    state.hist_head[slot] = (head + 1) % h
    state.hist_len[slot] = min(int(state.hist_len[slot]) + 1, h)


def _token_seeds(state: RuntimeState, slot: int, t: HostTables, tops: List[int],
                 token_id: int) -> List[Tuple[int, int, int]]:
    """The moves of token ``token_id`` from the tops that are token nodes whose set holds it
    (membership: the node's accept row), as closure seeds, in top order."""
    token_next = t.lists.token_next
    pool_node, pool_parent = state.pool_node[slot], state.pool_parent[slot]
    seeds = []
    for entry in tops:
        node = int(pool_node[entry])
        target = token_next[node]
        if target >= 0 and (int(t.layout.rows([node])[0, token_id >> 5]) >> (token_id & 31)) & 1:
            seeds.append((target, int(pool_parent[entry]), -1))
    return seeds


def accept_bytes(state: RuntimeState, slot: int, t: HostTables, data: bytes,
                 token_id: int = -1) -> bool:
    """Consume ``data`` as one step; False (state unchanged) if some byte cannot be consumed.
    Hitting a limit also returns False and sets the slot's error code. ``token_id`` (>= 0: the
    step is that token, ``data`` its bytes): token-node tops whose set holds it move too, their
    moves closed with the last byte's (``gxg.compiler.automaton``, token-level items), and the
    step ends at a token boundary, where token budgets count it (``_count_token``)."""
    if state.terminated[slot] or state.error[slot]:
        return False
    if state.pool_size[slot] > (3 * state.limits.pool_entries) // 4:
        compact_pool(state, slot)
    base = int(state.pool_size[slot])
    tops = state.tops[slot, : state.num_tops[slot]].tolist()
    can_end = bool(state.can_end[slot])
    indexed: Dict[int, int] = {}
    token_seeds = (_token_seeds(state, slot, t, tops, token_id)
                   if token_id >= 0 and t.has_token_nodes else [])
    last = len(data) - 1
    try:
        for i, byte in enumerate(data):
            moves = token_seeds if i == last else ()
            if len(tops) == 1 and not moves:
                top = _plain_step(state, slot, t, tops[0], byte, base, indexed)
                if top is not None:
                    tops, can_end = [top], False
                    continue
            result = _advance(state, slot, t, tops, byte, indexed, moves)
            if result is None:
                if token_seeds:  # the bytes died; the token's moves still come at its end
                    tops, can_end = [], False
                    continue
                state.pool_size[slot] = base
                return False
            tops, can_end = result
        if token_id >= 0 and t.has_counters:  # a token boundary (strings count no tokens)
            tops = _count_token(state, slot, t, tops, can_end, base, indexed)
    except StepFailed as failed:
        state.pool_size[slot] = base
        state.error[slot] = failed.code
        return False
    if not tops and not can_end:
        state.pool_size[slot] = base
        return False
    tops = _compact_window(state, slot, base, tops, indexed)
    new_size = int(state.pool_size[slot])
    state.pool_size[slot] = base  # the history records the size before the step
    _push_history(state, slot)
    state.pool_size[slot] = new_size
    _write_tops(state, slot, tops, can_end)
    return True


def accept_stop_token(state: RuntimeState, slot: int) -> bool:
    if state.terminated[slot] or state.error[slot] or not state.can_end[slot]:
        return False
    _push_history(state, slot)
    state.terminated[slot] = 1
    return True


def accept_token(state: RuntimeState, slot: int, t: HostTables, token_id: int) -> bool:
    """Accept one token id; out-of-range and special ids are rejected (False)."""
    if not 0 <= token_id < t.vocab_size or state.terminated[slot] or state.error[slot]:
        return False
    if t.is_stop[token_id]:
        return accept_stop_token(state, slot)
    if t.special[token_id]:
        return False
    return accept_bytes(state, slot, t, t.decoded_vocab[token_id], token_id)


def accept_tokens(state: RuntimeState, slot: int, t: HostTables, token_ids) -> int:
    """Accept ``token_ids`` in order up to the first one rejected; returns how many were
    accepted. Each is one history step, exactly as ``accept_token`` one after the other (a
    speculative verify: the slot ends in the state of its accepted prefix)."""
    count = 0
    for token_id in token_ids:
        if not accept_token(state, slot, t, int(token_id)):
            break
        count += 1
    return count


def rollback(state: RuntimeState, slot: int, num_tokens: int) -> bool:
    if num_tokens < 0 or num_tokens > state.hist_len[slot]:
        return False
    h = state.limits.history
    for _ in range(num_tokens):
        head = (int(state.hist_head[slot]) - 1) % h
        count = int(state.hist_num_tops[slot, head])
        state.tops[slot, :count] = state.hist_tops[slot, head, :count]
        state.num_tops[slot] = count
        state.pool_size[slot] = state.hist_pool_size[slot, head]
        state.can_end[slot] = state.hist_can_end[slot, head]
        state.terminated[slot] = state.hist_terminated[slot, head]
        state.hist_head[slot] = head
        state.hist_len[slot] -= 1
    return True


def fill_next_token_bitmask(state: RuntimeState, slot: int, t: HostTables,
                            row: np.ndarray) -> bool:
    """Write the slot's mask into ``row`` (int32[W]); returns need_apply.

    A terminated slot or one with an error code allows only its stop tokens. With more than
    MAX_STACKS_WALKED stacks the uncertain tokens are walked from all the stacks at once.
    Tokens whose walk is refused (too many parse stacks) are decided by the accept op on a
    copy of the slot; if that hits a limit, the slot gets its error code (and stop tokens
    only)."""
    row[:] = 0
    if not (state.terminated[slot] or state.error[slot]):
        masks = t.layout
        pool_node = state.pool_node[slot]
        entries = state.tops[slot, : state.num_tops[slot]].tolist()
        nodes = [int(pool_node[e]) for e in entries]
        if nodes:
            np.bitwise_or.reduce(masks.rows(nodes), axis=0, out=row)
        undecided, of_many = [], []
        walk_each = len(entries) <= MAX_STACKS_WALKED
        stacks = state.stacks(slot)
        for entry, node, stack in zip(entries, nodes, stacks):
            uncertain = masks.uncertain(node)
            if len(uncertain) and not walk_each:
                of_many.append(uncertain)
            elif len(uncertain):
                try:
                    _set_bits(row, t.uncertain_accepted(node, stack, uncertain))
                except CompileTimeoutError:
                    raise
                except GrammarError:  # the walk's parse stacks multiply past its limit
                    undecided.append(uncertain)
        if of_many:  # many stacks: one walk from all of them at once, shared prefixes
            tokens = np.unique(np.concatenate(of_many))
            try:
                _set_bits(row, t.sorted_token_ids[_walk_from_stacks(t, stacks, tokens)])
            except CompileTimeoutError:
                raise
            except GrammarError:
                undecided.append(tokens)
        if undecided:
            try:
                _set_bits(row, _accepted_by_steps(state, slot, t,
                                                  np.unique(np.concatenate(undecided))))
            except StepFailed as failed:  # as the kernels' walk out of room: stop tokens only
                state.error[slot] = failed.code
                row[:] = 0
    if state.can_end[slot] or state.terminated[slot] or state.error[slot]:
        _set_bits(row, t.stop_token_ids)
    return not all_allowed(row, t.vocab_size)


def restrict_to_budget(state: RuntimeState, slot: int, t: HostTables, row: np.ndarray,
                       remaining: int) -> bool:
    """Narrow the filled ``row`` to the tokens after which the output can still complete
    within ``remaining`` tokens, this one included (semantics: module docstring). Returns
    whether some token fits (the row was narrowed, or needed no narrowing)."""
    if remaining < 0 or state.terminated[slot] or state.error[slot]:
        return True
    stacks = state.stacks(slot)
    completion = t.completion
    spare = remaining - 1
    largest = max((completion.stack_distance(stack) for stack in stacks), default=0)
    sorted_index, by_length, minus_lengths = t.tokens_by_id()
    # The tokens that may not fit: those longer than the bound lets through, a prefix of the
    # ids by length (all of them when no bound holds).
    if stacks and completion.max_rise != NO_RISE_BOUND and largest <= spare:
        if completion.max_rise == 0:
            return True
        fit_length = (spare - largest) // completion.max_rise
        todo = by_length[: int(np.searchsorted(minus_lengths, -fit_length, "right"))]
    else:
        todo = by_length
    todo = todo[(_bits(row, todo)) & ~t.is_stop[todo]]
    if not len(todo):
        return True
    fits = np.zeros(len(todo), dtype=bool)
    if stacks and spare >= 0:
        fits = _fitting_after(t, stacks, sorted_index[todo], spare)
        if t.has_token_nodes:
            fits |= _token_moves_fitting(t, stacks, todo, spare)
    kept = row.copy()
    _clear_bits(kept, todo[~fits])
    if not kept.any():
        return False
    row[:] = kept
    return True


def _token_moves_fitting(t: HostTables, stacks, token_ids: np.ndarray, spare: int
                         ) -> np.ndarray:
    """bool per token id: some stack whose top is a token node whose set holds the token is
    within ``spare`` of completion after the move. The stack before the move's closure has the
    closure's smallest distance (a pop keeps the sum, the best push chain keeps it too)."""
    fits = np.zeros(len(token_ids), dtype=bool)
    distance = t.completion.node_distance
    for stack in stacks:
        if not stack or t.lists.token_next[stack[-1]] < 0:
            continue
        moved = t.completion.stack_distance(stack[:-1]) + int(
            distance[t.lists.token_next[stack[-1]]])
        if moved <= spare:
            fits |= _bits(t.layout.rows([stack[-1]])[0], token_ids)
    return fits


def _bits(row: np.ndarray, token_ids: np.ndarray) -> np.ndarray:
    """bool per token id: its bit in ``row``."""
    words = row.view(np.uint32)[token_ids >> 5]
    return ((words >> (token_ids & 31).astype(np.uint32)) & 1).astype(bool)


def _clear_bits(row: np.ndarray, token_ids: np.ndarray) -> None:
    if len(token_ids) == 0:
        return
    bits = np.left_shift(np.ones(len(token_ids), dtype=np.uint32),
                         (token_ids & 31).astype(np.uint32))
    np.bitwise_and.at(row.view(np.uint32), token_ids >> 5, ~bits)


def _fitting_after(t: HostTables, stacks, sorted_indices: np.ndarray, spare: int) -> np.ndarray:
    """bool per token (sorted indices): some stack reached after its bytes from ``stacks``
    has a completion distance of at most ``spare``."""
    walk = t.full_stack_walk()
    start = walk.intern(frozenset((stack, False, None) for stack in stacks))
    final = walk.walk_pairs(np.full(len(sorted_indices), start, np.int32), sorted_indices)
    states, inverse = np.unique(final, return_inverse=True)
    completion = t.completion
    reachable = np.array([
        state != DEAD and min(completion.stack_distance(stack)
                              for stack, _, _ in walk.configs[state]) <= spare
        for state in states.tolist()], dtype=bool)
    return reachable[inverse.reshape(-1)]


def _accepted_by_steps(state: RuntimeState, slot: int, t: HostTables,
                       sorted_indices: np.ndarray) -> np.ndarray:
    """Token ids among ``sorted_indices`` that the slot accepts, each decided by the accept op
    on a copy of the slot (then rolled back): for tokens whose walk from a full stack (tuples,
    nothing shared) is refused, while the pool's hash-consed stacks still hold them. A limit
    that the accept hits is StepFailed with its code (the mask is never guessed)."""
    scratch = RuntimeState.allocate(1, state.limits)
    state.copy_slot(slot, scratch, 0)
    out = []
    for token in t.sorted_token_ids[sorted_indices].tolist():
        if accept_bytes(scratch, 0, t, t.decoded_vocab[token], token):
            out.append(token)
            rollback(scratch, 0, 1)
        elif scratch.error[0]:
            raise StepFailed(int(scratch.error[0]))
    return np.array(out, dtype=np.int64)


def _walk_from_stack(t: HostTables, stack: Tuple[int, ...], sorted_indices: np.ndarray
                     ) -> np.ndarray:
    """The sorted indices among ``sorted_indices`` whose bytes can be consumed from ``stack``."""
    return _walk_from_stacks(t, [stack], sorted_indices)


def _walk_from_stacks(t: HostTables, stacks, sorted_indices: np.ndarray) -> np.ndarray:
    """The sorted indices among ``sorted_indices`` whose bytes can be consumed from one of
    ``stacks`` (a walk of the set of them: a token is accepted iff some stack takes it, and
    the walk's configurations are sets of stacks, so tokens share their prefixes' steps)."""
    walk = t.full_stack_walk()
    start = walk.intern(frozenset((stack, False, None) for stack in stacks))
    final = walk.walk_pairs(np.full(len(sorted_indices), start, np.int32), sorted_indices)
    return sorted_indices[final != DEAD]


def _set_bits(row: np.ndarray, token_ids: np.ndarray) -> None:
    if len(token_ids) == 0:
        return
    token_ids = np.asarray(token_ids, dtype=np.int64)
    bits = np.left_shift(np.ones(len(token_ids), dtype=np.uint32),
                         (token_ids & 31).astype(np.uint32))
    np.bitwise_or.at(row.view(np.uint32), token_ids >> 5, bits)


def all_allowed(row: np.ndarray, vocab_size: int) -> bool:
    full_words, tail = divmod(vocab_size, 32)
    if not (row[:full_words] == -1).all():
        return False
    if tail == 0:
        return True
    tail_mask = (1 << tail) - 1
    return (int(row[full_words]) & tail_mask) == tail_mask


# ----------------------------------------------------------------------------- masked sampling
#
# The reference of ``xg::fill_and_sample``'s sampler (``ops/sample_triton.py`` must pick the same
# token from the same numbers). Per row b, over the allowed ids A (bit set and id < vocab_size),
# with x the logits as float32 and -0.0 taken as +0.0:
#   * A empty: -1.
#   * temperature T <= 0 (or NaN): greedy, the lowest id among the maxima of x over A; top_k
#     and top_p are ignored.
#   * else, in HF/vLLM order (temperature, then top-k, then top-p), tied values kept together:
#       top-k (0 < k < |A|): keep K = {t in A: x_t >= v_k}, v_k the k-th largest x over A
#         counted with multiplicity, i.e. t is kept iff fewer than k allowed ids have a
#         strictly larger logit (so more than k ids are kept when the k-th value is tied);
#       top-p (p < 1): weights w_t = exp((x_t - m)/T) (float32; m = max x over A), S the sum
#         of w over K; keep {t in K: x_t >= v_p}, v_p the largest value v of K with
#         Σ_{u in K, x_u >= v} w_u >= max(p, TOP_P_FLOOR)·S, i.e. t is kept iff the mass of
#         strictly larger values is < p·S (the top value is always kept; p <= 0 keeps the
#         tokens tied at the top). Skipped when m is -inf (every allowed logit is -inf);
#       the token is then the Gumbel-max over the kept ids: the lowest id among the maxima of
#         float32(x_t / T) + g_t, g_t = -log(-log u_t) in float32, u_t = sample_uniforms(...).
#     This is an exact draw from softmax(x/T) renormalised over the kept set.
#   Logits must be finite or -inf: with +inf or NaN the token is unspecified (the kernel
#   returns an allowed id or -1, never anything else).
# The uniforms are counter-based (see sample_uniforms): a draw is a pure function of the
# logits, the mask, the parameters, the seed and the offset. The kernel accumulates top-p
# masses in float32 in another order than this reference (float64), so a row whose p·S falls
# within rounding of a prefix mass may keep one value more or less there; the kernel's
# transcendental functions on the GPU may differ from numpy's in the last ulp (a Gumbel
# argmax flips only between scores that close).

PHILOX_ROUNDS = 10          # Philox4x32-10, as Random123 and Triton's tl.randint
TOP_P_FLOOR = 1e-30         # top_p values below it act as it (keep the top value's ties)
_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = 0xFFFFFFFF
_MASK64 = (1 << 64) - 1


def philox4x32(c0, c1, c2, c3, k0: int, k1: int, rounds: int = PHILOX_ROUNDS):
    """Philox4x32 (Salmon et al., SC'11; Random123's philox4x32_R) on broadcastable arrays of
    32-bit counters and a 64-bit key (k0 low word, k1 high word); four uint32 arrays."""
    c = [np.asarray(v, dtype=np.uint64) & np.uint64(_MASK32) for v in (c0, c1, c2, c3)]
    c = list(np.broadcast_arrays(*c))
    m0, m1, low = np.uint64(_PHILOX_M0), np.uint64(_PHILOX_M1), np.uint64(_MASK32)
    for _ in range(rounds):
        p0, p1 = c[0] * m0, c[2] * m1           # < 2^64: exact
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & low,
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & low]
        k0, k1 = (k0 + _PHILOX_W0) & _MASK32, (k1 + _PHILOX_W1) & _MASK32
    return tuple(v.astype(np.uint32) for v in c)


def sample_uniforms(seed: int, offset: int, row: int, tokens) -> np.ndarray:
    """float32 u in (0, 1) of ``tokens`` in row ``row``: word t % 4 of Philox4x32-10 with counter
    (t // 4, row, offset low, offset high) and key (seed low, seed high); u = ((word >> 9) +
    0.5)·2^-23 (exact in float32, never 0 or 1)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    seed, offset = int(seed) & _MASK64, int(offset) & _MASK64
    words = philox4x32(tokens >> 2, row, offset & _MASK32, offset >> 32,
                       seed & _MASK32, seed >> 32)
    word = np.choose(tokens & 3, words)
    return ((word >> np.uint32(9)).astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -23)


def check_sample_arguments(logits, bitmask, temperature, top_k, top_p, seed, offset,
                           vocab_size: int) -> None:
    """Shapes, dtypes, devices and layouts (metadata only: no device reads); shared by the
    reference and the Triton launcher so both accept and refuse the same calls."""
    import torch
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"logits must be float32, float16 or bfloat16, got {logits.dtype}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [batch, >= vocab_size], got {tuple(logits.shape)}")
    rows, width = logits.shape
    if not 0 <= vocab_size <= width:
        raise ValueError(f"vocab_size {vocab_size} not in [0, logits width {width}]")
    if width > 1 and logits.stride(1) != 1:
        raise ValueError("the last dimension of logits must be contiguous")
    words = bitmask_words(vocab_size)
    if bitmask.dtype != torch.int32:
        raise TypeError(f"bitmask must be int32, got {bitmask.dtype}")
    if bitmask.dim() != 2 or bitmask.shape[0] != rows or bitmask.shape[1] < words:
        raise ValueError(f"bitmask must be [{rows}, >= {words}], got {tuple(bitmask.shape)}")
    if bitmask.shape[1] > 1 and bitmask.stride(1) != 1:
        raise ValueError("the last dimension of bitmask must be contiguous")
    for name, t, dtype in (("temperature", temperature, torch.float32),
                           ("top_k", top_k, torch.int32), ("top_p", top_p, torch.float32)):
        if t.dtype != dtype or t.shape != (rows,) or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous {dtype} tensor of shape ({rows},), "
                             f"got {t.dtype} {tuple(t.shape)}")
    for name, t in (("seed", seed), ("offset", offset)):
        if t.dtype != torch.int64 or t.numel() != 1:
            raise ValueError(f"{name} must be an int64 tensor of one element, got {t.dtype} "
                             f"{tuple(t.shape)}")
    for name, t in (("bitmask", bitmask), ("temperature", temperature), ("top_k", top_k),
                    ("top_p", top_p), ("seed", seed), ("offset", offset)):
        if t.device != logits.device:
            raise ValueError(f"{name} is on {t.device} but logits are on {logits.device}")


def sample_masked(logits, bitmask, temperature, top_k, top_p, seed, offset, vocab_size: int):
    """tokens int64 [B] (a torch tensor on the CPU): one draw per row, semantics above."""
    import torch
    check_sample_arguments(logits, bitmask, temperature, top_k, top_p, seed, offset, vocab_size)
    x = logits[:, :vocab_size].detach().to("cpu", torch.float32).numpy()
    words = bitmask.detach().cpu().numpy()[:, :bitmask_words(vocab_size)]
    words = np.ascontiguousarray(words)
    allowed = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, :vocab_size]
    temps = temperature.detach().cpu().numpy()
    ks = top_k.detach().cpu().numpy()
    ps = top_p.detach().cpu().numpy()
    seed_value, offset_value = int(seed.reshape(-1)[0]), int(offset.reshape(-1)[0])
    out = np.empty(x.shape[0], dtype=np.int64)
    for b in range(x.shape[0]):
        out[b] = sample_row(x[b], np.flatnonzero(allowed[b]), float(temps[b]), int(ks[b]),
                            float(ps[b]), seed_value, offset_value, b)
    return torch.from_numpy(out)


def kept_ids(xa: np.ndarray, ids: np.ndarray, temperature: float, top_k: int, top_p: float
             ) -> np.ndarray:
    """The ids that top-k then top-p keep (``xa``: float32 logits of the allowed ``ids``,
    temperature > 0)."""
    keep = np.ones(len(ids), dtype=bool)
    if 0 < top_k < len(ids):
        keep = xa >= np.sort(xa)[::-1][top_k - 1]
    top = xa.max()
    if top_p < 1.0 and top > -np.inf:
        values = xa[keep]
        w = np.exp((values - top) / np.float32(temperature)).astype(np.float64)
        order = np.argsort(-values, kind="stable")
        values, mass = values[order], np.cumsum(w[order])     # descending; prefix masses
        ends = np.flatnonzero(np.append(values[1:] != values[:-1], True))  # last of each tie
        target = max(np.float32(top_p), np.float32(TOP_P_FLOOR)) * mass[-1]
        reached = np.flatnonzero(mass[ends] >= target)
        if len(reached):                # none only with NaN or +inf logits: no cut
            keep &= xa >= values[ends[reached[0]]]
    return ids[keep]


def sample_row(x: np.ndarray, ids: np.ndarray, temperature: float, top_k: int, top_p: float,
               seed: int, offset: int, row: int) -> int:
    """One row: ``x`` float32 logits, ``ids`` the allowed ids (ascending)."""
    if len(ids) == 0:
        return -1
    xa = x[ids].astype(np.float32)
    xa[xa == 0] = 0.0                                            # -0.0 is +0.0
    if not temperature > 0:
        return int(ids[np.argmax(xa)])                           # first maximum: lowest id
    kept = kept_ids(xa, ids, temperature, top_k, top_p)
    if len(kept) == 0:                  # only with NaN logits
        return -1
    gumbel = -np.log(-np.log(sample_uniforms(seed, offset, row, kept)))
    scores = x[kept].astype(np.float32) / np.float32(temperature) + gumbel
    return int(kept[np.argmax(scores)])
