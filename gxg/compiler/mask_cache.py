"""Adaptive token-mask cache (stage 3 of the pipeline; XGrammar paper §3.1–3.2).

In:  an ``Automaton`` and a ``TokenizerInfo`` (its sorted vocabulary).
Out: a ``MaskCache``: for every scannable node n, the tokens classified from n with n's rule
     frame as the only known part of the stack:

     * accepted  — some path consumes every byte without popping below that frame: allowed
                   whatever the rest of the stack is;
     * uncertain — every surviving path completes the frame with bytes left, and those bytes
                   can continue in *some* caller (context expansion: the walk escapes into every
                   return site of the rule, and on through their callers, honouring the rule's
                   lookahead assertion): the runtime checks these against the real stack;
     * rejected  — everything else.

     On the host each node's entry uses the paper's adaptive storage: the accepted list, the
     rejected list or a bitset over the sorted vocabulary, whichever is smallest; the uncertain
     tokens are a list. Entries are computed all at once (``build_mask_cache``) or each the
     first time it is asked for (``lazy=True``: a ``NodeClassifier`` walks the vocabulary from
     the nodes a fill reaches), and kept. The nodes of a bounded run (a string of at most
     ``maxLength`` characters) with room for the vocabulary's longest token have one entry,
     walked once (``run_representatives``). What the fills read is derived from them: the CPU
     fill's per-node dense rows (``NodeMasks``, built as nodes are reached) and the kernels'
     layout of every node (``kernel_layout``: deduplicated dense accept rows in token-id bit
     space and an uncertain-token CSR), plus the second level (``build_context_pairs``).

Indices in entries are positions in the sorted vocabulary (``TokenizerInfo.sorted_token_ids``).
"""
from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from gxg import compile_budget
from gxg.compile_budget import CompileTimeoutError
from gxg.grammar.ir import GrammarError
from gxg.layout import bitmask_words
from gxg.compiler.automaton import Automaton
from gxg.compiler.stack_walk import StackWalker
from gxg.compiler.vocab_walk import (RunBreaks, TokenTrie, VocabularyWalk, add_repeats,
                                     concatenated, walk_trie_parts)

REJECTED, ACCEPTED, UNCERTAIN = 0, 1, 2
NODES_PER_WALK = 64  # at most 2**15 for the int16 sort below; nodes walked through the trie together (bounds the walk's memory)


class StoreType(enum.IntEnum):
    ACCEPTED = 0          # the accepted sorted indices are listed
    REJECTED = 1          # the rejected sorted indices are listed
    ACCEPTED_BITSET = 2   # a bitset over sorted indices marks the accepted ones


@dataclass(frozen=True, eq=False)
class NodeTokenMask:
    store_type: StoreType
    indices: np.ndarray     # int32: accepted (ACCEPTED) or rejected (REJECTED) sorted indices
    bitset: np.ndarray      # uint32 words over sorted indices (ACCEPTED_BITSET), else empty
    uncertain: np.ndarray   # int32 sorted indices, ascending

    def accepted(self, num_sorted: int) -> np.ndarray:
        """Accepted sorted indices, ascending."""
        if self.store_type == StoreType.ACCEPTED:
            return self.indices
        return np.flatnonzero(self.member(num_sorted)).astype(np.int32)

    def member(self, num_sorted: int) -> np.ndarray:
        """bool [num_sorted]: is each sorted token accepted?"""
        if self.store_type == StoreType.ACCEPTED_BITSET:
            bits = np.unpackbits(self.bitset.view(np.uint8), bitorder="little")[:num_sorted]
            return bits.view(bool)
        if self.store_type == StoreType.ACCEPTED:
            member = np.zeros(num_sorted, dtype=bool)
            member[self.indices] = True
            return member
        member = np.ones(num_sorted, dtype=bool)
        member[self.indices] = False
        member[self.uncertain] = False
        return member

    @property
    def nbytes(self) -> int:
        return int(self.indices.nbytes + self.bitset.nbytes + self.uncertain.nbytes)


class MaskCache:
    """The token-mask entries of an automaton's scannable nodes, each computed the first time
    it is asked for (``entry``) or all at once (``precompute``), then kept.

    A cache that says so: computed entries are stored until ``max_bytes`` of them are; past
    that an entry is computed on every request and not kept (the answer is the same, only the
    time differs). Thread-safe: matchers on several threads share one compiled grammar."""

    def __init__(self, num_sorted: int, nodes: np.ndarray,
                 classify: Optional[Callable[[np.ndarray], List[NodeTokenMask]]] = None,
                 entries: Optional[Dict[int, NodeTokenMask]] = None,
                 max_bytes: Optional[int] = None,
                 representative: Optional[np.ndarray] = None):
        self.num_sorted = num_sorted              # size of the sorted vocabulary
        self.nodes = nodes                        # int32 [M]: the scannable nodes, ascending
        self._scannable = frozenset(nodes.tolist())  # a set: asked for once per node
        self._entries: Dict[int, NodeTokenMask] = dict(entries or {})
        self._classify = classify                 # None: every entry is already computed
        # a node whose walk is refused gets the classifier's conservative entry (if it has one)
        self._fallback = getattr(classify, "conservative", None)
        self.conservative_nodes: List[int] = []   # nodes that got one
        self._max_bytes = max_bytes
        self._stored_bytes = sum(e.nbytes for e in self._entries.values())
        self._lock = threading.Lock()
        self._failed: Dict[int, GrammarError] = {}  # nodes whose walk was refused
        self.background: Optional[threading.Thread] = None  # GrammarCompiler's precompute
        # per node, the node whose entry it has (``run_representatives``); None: its own
        self._representative = representative
        if classify is None and len(self._entries) < len(nodes):
            raise ValueError("a mask cache without a classifier needs every node's entry")

    def _check_node(self, node: int) -> None:
        if node not in self._scannable:
            raise KeyError(f"node {node} has no mask-cache entry (it cannot scan a byte)")

    def entry(self, node: int) -> NodeTokenMask:
        """The node's entry, computed now if it never was."""
        hit = self._entries.get(node)
        if hit is not None:
            return hit
        self._check_node(node)
        return self._compute([node])[0]

    def entries_of(self, nodes) -> List[NodeTokenMask]:
        """Entries of several nodes; the missing ones are computed in one walk."""
        missing = sorted({int(n) for n in nodes if int(n) not in self._entries})
        for node in missing:
            self._check_node(node)
        fresh = dict(zip(missing, self._compute(missing))) if missing else {}
        return [fresh[int(n)] if int(n) in fresh else self._entries[int(n)] for n in nodes]

    def _compute(self, nodes: List[int]) -> List[NodeTokenMask]:
        with self._lock:  # one walk at a time: the classifier's walk state is shared
            failed = next((self._failed[n] for n in nodes if n in self._failed), None)
            if failed is not None:
                raise failed
            # each node walks as its representative, which walks once
            representative = self._representative
            of = {n: n if representative is None else int(representative[n])
                  for n in nodes if n not in self._entries}
            walked = self._classify_or_record(sorted({r for r in of.values()
                                                      if r not in self._entries}))
            computed = {}
            for node, chosen in of.items():
                computed[node] = walked[chosen] if chosen in walked else self._entries[chosen]
                if node != chosen:
                    self._store(node, computed[node], shared=True)
            return [computed[n] if n in computed else self._entries[n] for n in nodes]

    def _store(self, node: int, entry: NodeTokenMask, shared: bool = False) -> None:
        """Keep ``node``'s entry (``shared``: another node's too, counted once)."""
        size = 0 if shared else entry.nbytes
        if self._max_bytes is None or self._stored_bytes + size <= self._max_bytes:
            self._entries[node] = entry
            self._stored_bytes += size
        if len(self._entries) == len(self.nodes):
            self._classify = None  # complete: the walk's memory can go

    def _classify_or_record(self, walk: List[int]) -> Dict[int, NodeTokenMask]:
        """Entries of the nodes ``walk`` in one walk, stored. A node whose walk is refused (a
        GrammarError: the grammar is too ambiguous there) is found by walking the nodes one by
        one; it gets the classifier's conservative entry (``NodeClassifier.conservative``:
        exact masks, more tokens left to the runtime's walk from the real stacks), or, without
        one, its error is kept and raised again whenever it is asked for (the walk is not
        repeated)."""
        if not walk:
            return {}
        try:
            computed = dict(zip(walk, self._classify(np.array(walk, dtype=np.int32))))
        except CompileTimeoutError:  # the compile's deadline, not the node's refusal
            raise
        except GrammarError:
            computed = {}
            for node in walk:
                try:
                    computed[node] = self._classify(np.array([node], dtype=np.int32))[0]
                except CompileTimeoutError:
                    raise
                except GrammarError as error:
                    if self._fallback is None:
                        self._failed[node] = error
                    else:
                        computed[node] = self._fallback(node)
                        self.conservative_nodes.append(node)
        for node, entry in computed.items():
            self._store(node, entry)
        failed = next((self._failed[n] for n in walk if n in self._failed), None)
        if failed is not None:
            raise failed
        return computed

    def precompute(self, nodes_per_walk: int = NODES_PER_WALK, *,
                   skip_refused: bool = False) -> "MaskCache":
        """Compute every entry now, ``nodes_per_walk`` nodes per walk (a fill that needs a
        node meanwhile waits for at most one walk); returns self. A node whose walk is refused
        raises its GrammarError, or with ``skip_refused`` is left for the fill that reaches it
        to report (the background build)."""
        for chunk in range(0, len(self.nodes), nodes_per_walk):
            compile_budget.check("the token-mask cache")
            try:
                self.entries_of(self.nodes[chunk: chunk + nodes_per_walk].tolist())
            except GrammarError:
                if not skip_refused:
                    raise
        return self

    @property
    def num_computed(self) -> int:
        """Entries stored so far (cheap: a benchmark asks it around every fill)."""
        return len(self._entries)

    @property
    def complete(self) -> bool:
        """Every node's entry is stored."""
        return len(self._entries) == len(self.nodes)

    def computed_nodes(self) -> np.ndarray:
        """The nodes whose entries are stored, ascending."""
        return np.array(sorted(self._entries), dtype=np.int32)

    @property
    def entries(self) -> Tuple[NodeTokenMask, ...]:
        """One entry per node of ``nodes`` (computing the missing ones)."""
        return tuple(self.entries_of(self.nodes.tolist()))

    @property
    def memory_size_bytes(self) -> int:
        """Bytes of the stored entries (what the cache holds now)."""
        return int(self._stored_bytes + self.nodes.nbytes)

    def uncertain_counts(self) -> np.ndarray:
        return np.array([len(entry.uncertain) for entry in self.entries], dtype=np.int64)


def classify_nodes(walk: VocabularyWalk, classes_of: "StateClasses", trie: TokenTrie,
                   nodes: np.ndarray) -> List[NodeTokenMask]:
    """The entry of each node, from one trie walk of all of them: the tokens walked from it
    are accepted or uncertain (by the class of their final state); every other token is
    rejected."""
    starts = [walk.intern(walk.walker.initial((int(node),), as_top=True)) for node in nodes]
    parts = walk_trie_parts(walk, trie, np.array(starts, dtype=np.int32))
    # A part of one origin and one state (a run of a string's tokens) stays one array and
    # one class; the parts of many origins are sorted by origin.
    per_node: List[list] = [[] for _ in range(len(nodes))]
    mixed = []
    for part in parts:
        if isinstance(part[0], int):
            per_node[part[0]].append((part[1], classes_of.of(part[2])))
        else:
            mixed.append(part)
    if len(nodes) == 1:
        per_node[0].extend((tokens, classes_of[states]) for _, tokens, states in mixed)
    elif mixed:
        origin, tokens, final_states = concatenated(mixed)
        classes = classes_of[final_states]
        order = np.argsort(origin.astype(np.int16), kind="stable")  # a radix sort: O(n)
        origin, tokens, classes = origin[order], tokens[order], classes[order]
        bounds = np.searchsorted(origin, np.arange(len(nodes) + 1))
        for i in range(len(nodes)):
            per_node[i].append((tokens[bounds[i]: bounds[i + 1]],
                                classes[bounds[i]: bounds[i + 1]]))
    return [_entry_of(node_parts, trie) for node_parts in per_node]


def _entry_of(parts, trie: TokenTrie) -> NodeTokenMask:
    """The entry of one node from its walked (tokens, classes) parts (a class may be one int
    for a whole part), in any order, repeated tokens left out. Few tokens: sorted lists; many
    (inside a string most of the vocabulary): one class per sorted token, read once per store
    (the same entry either way)."""
    num_sorted = trie.num_tokens
    if sum(len(tokens) for tokens, _ in parts) * 16 < num_sorted:
        tokens = np.concatenate([t for t, _ in parts]) if parts else np.zeros(0, np.intp)
        classes = (np.concatenate([np.broadcast_to(c, t.shape) for t, c in parts])
                   if parts else np.zeros(0, np.int8))
        if trie.has_duplicates:
            _, tokens, classes = add_repeats(trie, np.zeros(len(tokens), np.intp), tokens,
                                             classes)
        accepted = np.sort(tokens[classes == ACCEPTED]).astype(np.int32)
        uncertain = np.sort(tokens[classes == UNCERTAIN]).astype(np.int32)
        return adaptive_entry(accepted, uncertain, num_sorted)
    by_token = np.zeros(num_sorted, dtype=np.int8)  # REJECTED == 0
    for tokens, classes in parts:
        by_token[tokens] = classes
    if trie.has_duplicates:
        repeats = np.flatnonzero(trie.duplicate_of >= 0)
        by_token[repeats] = by_token[trie.duplicate_root[repeats]]
    accepted = by_token == ACCEPTED
    uncertain = np.flatnonzero(by_token == UNCERTAIN).astype(np.int32)
    num_accepted = int(np.count_nonzero(accepted))
    store = _smallest_store(num_accepted, num_sorted - num_accepted - len(uncertain),
                            num_sorted)
    no_words, no_indices = np.zeros(0, np.uint32), np.zeros(0, np.int32)
    if store == StoreType.ACCEPTED:
        return NodeTokenMask(store, np.flatnonzero(accepted).astype(np.int32), no_words,
                             uncertain)
    if store == StoreType.REJECTED:
        rejected = np.flatnonzero(by_token == REJECTED).astype(np.int32)
        return NodeTokenMask(store, rejected, no_words, uncertain)
    return NodeTokenMask(store, no_indices, _bitset_words(accepted, num_sorted), uncertain)


class StateClasses:
    """Class of every state interned by one walk (extended as the walk interns more)."""

    def __init__(self, walk: VocabularyWalk):
        self.walk = walk
        self.known = np.zeros(0, np.int8)

    def of(self, states):
        """Classes of a state array, or the class (an int) of one state."""
        if isinstance(states, np.ndarray):
            return self[states]
        self._extend()
        return int(self.known[states])

    def __getitem__(self, states: np.ndarray) -> np.ndarray:
        self._extend()
        return self.known[states]

    def _extend(self) -> None:
        """Classify the states interned since the last call."""
        configs = self.walk.configs
        if len(self.known) < len(configs):
            has_unescaped = StackWalker.has_unescaped
            fresh = [ACCEPTED if has_unescaped(c) else (UNCERTAIN if c else REJECTED)
                     for c in configs[len(self.known):]]
            self.known = np.concatenate([self.known, np.array(fresh, dtype=np.int8)])


def _smallest_store(num_accepted: int, num_rejected: int, num_sorted: int) -> StoreType:
    """The smallest of the three storages for one node (paper §3.1); ties go to the lower
    StoreType."""
    sizes = {StoreType.ACCEPTED: 4 * num_accepted, StoreType.REJECTED: 4 * num_rejected,
             StoreType.ACCEPTED_BITSET: 4 * ((num_sorted + 31) // 32)}
    return min(sizes, key=lambda kind: (sizes[kind], kind))


def _bitset_words(member: np.ndarray, num_sorted: int) -> np.ndarray:
    """uint32 words of a bool [num_sorted] membership, bit i of the bitset = member[i]."""
    bits = np.zeros(((num_sorted + 31) // 32) * 32, dtype=bool)
    bits[:num_sorted] = member
    return np.packbits(bits, bitorder="little").view(np.uint32).copy()


def adaptive_entry(accepted: np.ndarray, uncertain: np.ndarray, num_sorted: int
                   ) -> NodeTokenMask:
    """The entry of sorted ``accepted`` and ``uncertain`` indices, in the smallest of the
    three storages."""
    num_rejected = num_sorted - len(accepted) - len(uncertain)
    store = _smallest_store(len(accepted), num_rejected, num_sorted)
    no_words = np.zeros(0, np.uint32)
    if store == StoreType.ACCEPTED:
        return NodeTokenMask(store, accepted, no_words, uncertain)
    if store == StoreType.REJECTED:
        rejected = np.ones(num_sorted, dtype=bool)
        rejected[accepted] = False
        rejected[uncertain] = False
        return NodeTokenMask(store, np.nonzero(rejected)[0].astype(np.int32), no_words,
                             uncertain)
    member = np.zeros(num_sorted, dtype=bool)
    member[accepted] = True
    return NodeTokenMask(store, np.zeros(0, np.int32), _bitset_words(member, num_sorted),
                         uncertain)


class NodeClassifier:
    """Classifies the sorted vocabulary (as a trie) from given scannable nodes: one walk state
    (a ``VocabularyWalk`` whose interned configurations and transitions only grow) for all
    the calls, so later nodes reuse what earlier walks learnt. A token node (a ``Token(...)``
    item: ``gxg.compiler.automaton``) is not walked: its entry accepts exactly the sorted tokens
    of its set (``sorted_token_ids``: the id of each sorted index, needed when the automaton
    has token nodes). Special and stop tokens are not in the sorted vocabulary, so a token set
    never matches them (as in XGrammar)."""

    def __init__(self, automaton: Automaton, trie: TokenTrie, context_expansion: bool = True,
                 sorted_token_ids: Optional[np.ndarray] = None):
        walker = StackWalker(automaton, escape_bottom=True, context_expansion=context_expansion)
        self.trie = trie
        self.walk = VocabularyWalk(walker)
        self.classes_of = StateClasses(self.walk)
        self.automaton = automaton
        self.sorted_token_ids = sorted_token_ids
        if len(automaton.token_nodes) and sorted_token_ids is None:
            raise ValueError("the automaton has token nodes: the classifier needs the "
                             "vocabulary's sorted_token_ids")

    def __call__(self, nodes: np.ndarray) -> List[NodeTokenMask]:
        is_token = self.automaton.token_set[nodes] >= 0
        walked = iter(classify_nodes(self.walk, self.classes_of, self.trie, nodes[~is_token])
                      if not is_token.all() else ())
        return [self._token_entry(int(node)) if token else next(walked)
                for node, token in zip(nodes.tolist(), is_token.tolist())]

    def _token_entry(self, node: int) -> NodeTokenMask:
        token_set = self.automaton.token_set_of(node)
        member = np.isin(self.sorted_token_ids, np.array(token_set.ids, dtype=np.int64))
        if token_set.negated:
            member = ~member
        return adaptive_entry(np.flatnonzero(member).astype(np.int32), np.zeros(0, np.int32),
                              self.trie.num_tokens)

    def conservative(self, node: int) -> NodeTokenMask:
        """An entry for a node whose walk was refused (too many parse stacks): every non-empty
        token uncertain. Sound: an uncertain token is decided by the runtime from the real
        stacks, so the masks stay exact; a fill at the node only costs more. (A walk without
        context expansion would often be refused too, after as long a walk.)"""
        uncertain = np.flatnonzero(self.trie.token_lengths > 0).astype(np.int32)
        return adaptive_entry(np.zeros(0, np.int32), uncertain, self.trie.num_tokens)


def build_mask_cache(automaton: Automaton, trie: TokenTrie, *,
                     context_expansion: bool = True,
                     max_bytes: Optional[int] = None, lazy: bool = False,
                     sorted_token_ids: Optional[np.ndarray] = None) -> MaskCache:
    """The mask cache of every scannable node: classified now (``lazy=False``; past
    ``max_bytes`` of entries that is a GrammarError naming the budget, raised as soon as it is
    exceeded, never a truncated cache) or on first use (``lazy=True``: no vocabulary is walked
    here; ``max_bytes`` then bounds what is kept). ``context_expansion=False`` is the paper's
    baseline (for measurements only): a token that completes the node's rule with bytes left
    is uncertain whatever those bytes are."""
    nodes = np.nonzero(automaton.is_scannable)[0].astype(np.int32)
    classify = NodeClassifier(automaton, trie, context_expansion, sorted_token_ids)
    representative = run_representatives(automaton, trie.max_depth)
    if lazy:
        return MaskCache(trie.num_tokens, nodes, classify, max_bytes=max_bytes,
                         representative=representative)
    cache = MaskCache(trie.num_tokens, nodes, classify, representative=representative)
    total = 0
    for chunk in range(0, len(nodes), NODES_PER_WALK):
        compile_budget.check("the token-mask cache")
        part = nodes[chunk: chunk + NODES_PER_WALK].tolist()
        total += sum(entry.nbytes for entry in cache.entries_of(part))
        if max_bytes is not None and total > max_bytes:  # a size budget: stop, do not truncate
            raise GrammarError(f"the token-mask cache needs more than max_mask_cache_bytes="
                               f"{max_bytes} bytes ({total} after "
                               f"{min(chunk + NODES_PER_WALK, len(nodes))} of {len(nodes)} "
                               f"nodes)")
    return cache


def run_representatives(automaton: Automaton, longest_token: int) -> Optional[np.ndarray]:
    """Per node, the node whose entry it has: inside a bounded run, with room for at least
    ``longest_token`` more units (bytes of the vocabulary's longest token), its twin
    (``Automaton.run_twin``: the same place after ``lo`` units, which every token leaves in the
    same class); every other node itself. None when the automaton has no such node."""
    shared = (automaton.run_twin >= 0) & (automaton.run_room >= longest_token)
    if not shared.any():
        return None
    representative = np.arange(automaton.num_nodes, dtype=np.int32)
    representative[shared] = automaton.run_twin[shared]
    return representative


# ----------------------------------------------------------------------------- kernel layout


@dataclass(frozen=True, eq=False)
class KernelMaskLayout:
    """What the fill kernels read: per node a dense accept row and an uncertain-token range.

    node_row          int32  [num_nodes]       row of ``accept_rows`` (-1: node has no entry)
    accept_rows       int32  [rows, W]         bitmask words over token ids (bit t%32 of word
                                               t//32), deduplicated across nodes
    uncertain_offsets int32  [num_nodes + 1]   CSR over nodes
    uncertain_tokens  int32  [U]               sorted-vocab indices, ascending per node
    """

    node_row: np.ndarray
    accept_rows: np.ndarray
    uncertain_offsets: np.ndarray
    uncertain_tokens: np.ndarray

    # what the CPU fill reads (``NodeMasks`` has the same two methods)
    def rows(self, nodes: List[int]) -> np.ndarray:
        """The accept rows of ``nodes`` (scannable), int32 [len(nodes), W]."""
        return self.accept_rows[self.node_row[nodes]]

    def uncertain(self, node: int) -> np.ndarray:
        """The node's uncertain tokens (sorted-vocabulary indices, ascending)."""
        return self.uncertain_tokens[self.uncertain_offsets[node]: self.uncertain_offsets[node + 1]]


class NodeMasks:
    """The CPU fill's view of a (possibly lazy) ``MaskCache``: per node its dense accept row
    over token ids and its uncertain tokens, built on first use and kept (a cache, bounded by
    the scannable nodes; thread-safe through the mask cache and atomic dict stores)."""

    def __init__(self, cache: MaskCache, sorted_token_ids: np.ndarray, vocab_size: int):
        self.cache = cache
        # indexes without a cast (no copy when the ids are intp: TokenizerInfo.sorted_token_index)
        self.sorted_token_ids = np.asarray(sorted_token_ids, dtype=np.intp)
        self.words = bitmask_words(vocab_size)
        self._rows: Dict[int, np.ndarray] = {}

    def rows(self, nodes: List[int]) -> np.ndarray:
        missing = [n for n in nodes if n not in self._rows]
        if missing:
            for node, entry in zip(missing, self.cache.entries_of(missing)):
                self._rows[node] = dense_row(entry, self.cache.num_sorted,
                                             self.sorted_token_ids, self.words)
        if not nodes:
            return np.zeros((0, self.words), dtype=np.int32)
        return np.stack([self._rows[n] for n in nodes])

    def uncertain(self, node: int) -> np.ndarray:
        return self.cache.entry(node).uncertain


def dense_row(entry: NodeTokenMask, num_sorted: int, sorted_token_ids: np.ndarray,
              words: int) -> np.ndarray:
    """The entry's accepted tokens as bitmask words over token ids (int32 [words]).
    ``sorted_token_ids`` as intp indexes without a cast (NodeMasks keeps such a copy)."""
    bits = np.zeros(words * 32, dtype=bool)
    if entry.store_type == StoreType.ACCEPTED:
        bits[sorted_token_ids[entry.indices]] = True
    else:  # most of the vocabulary: one pass over all sorted tokens
        bits[sorted_token_ids] = entry.member(num_sorted)
    return np.packbits(bits, bitorder="little").view(np.int32)


def kernel_layout(cache: MaskCache, num_nodes: int, sorted_token_ids: np.ndarray,
                  vocab_size: int, nodes: Optional[Sequence[int]] = None) -> KernelMaskLayout:
    """The kernels' view of the entries of ``nodes`` (scannable; default: every scannable
    node, computing the entries a lazy cache lacks). Nodes left out get no row (-1) and no
    uncertain tokens: the arena marks the scannable ones as not built yet."""
    words = bitmask_words(vocab_size)
    sorted_token_ids = np.asarray(sorted_token_ids, dtype=np.intp)  # indexes without a cast
    nodes = cache.nodes.tolist() if nodes is None else [int(n) for n in nodes]
    node_row = np.full(num_nodes, -1, dtype=np.int32)
    rows: List[np.ndarray] = []
    row_of: Dict[bytes, int] = {}
    # an entry that repeats an earlier one (about half of a JSON schema's nodes do:
    # profiling/bench_bind.py) takes its row without building another vocabulary-sized one
    row_of_entry: Dict[tuple, int] = {}
    uncertain_counts = np.zeros(num_nodes, dtype=np.int64)
    uncertain_parts = {}
    for node, entry in zip(nodes, cache.entries_of(nodes)):
        entry_key = (int(entry.store_type), entry.indices.tobytes(), entry.bitset.tobytes(),
                     entry.uncertain.tobytes())
        index = row_of_entry.get(entry_key)
        if index is None:
            row = dense_row(entry, cache.num_sorted, sorted_token_ids, words)
            index = row_of.setdefault(row.tobytes(), len(rows))
            if index == len(rows):
                rows.append(row)
            row_of_entry[entry_key] = index
        node_row[node] = index
        uncertain_counts[node] = len(entry.uncertain)
        uncertain_parts[node] = entry.uncertain
    offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(uncertain_counts, out=offsets[1:])
    tokens = np.zeros(int(offsets[-1]), dtype=np.int32)
    for node, part in uncertain_parts.items():
        tokens[offsets[node]: offsets[node + 1]] = part
    accept_rows = np.stack(rows) if rows else np.zeros((0, words), dtype=np.int32)
    return KernelMaskLayout(node_row, accept_rows, offsets.astype(np.int32), tokens)


# ----------------------------------------------------------------------------- second level


@dataclass(frozen=True, eq=False)
class ContextPairs:
    """Uncertain tokens re-classified with one more frame of context (the node below the top).

    At run time a live top is a stack (..., r, n): the node n and, below it, the return node r
    of its caller (or the bottom). For every scannable node n with uncertain tokens and every
    r that can sit directly below n's rule (``below_nodes``), n's uncertain tokens are walked
    from the stack (r, n), escaping past r's frame into every caller as the first level does
    (no lookahead: the run-time check ignores it too). Accepted there means accepted whatever
    lies below r; the rest of the uncertain tokens that survive are the only ones the GPU walks
    against the real stack. A pair with r = -1 is the bottom: nothing is left uncertain.

    node_pair_offsets  int32 [num_nodes + 1]  CSR over nodes of their pairs
    pair_below         int32 [P]              r (-1: the bottom)
    pair_acc_offsets   int32 [P + 1]          accepted token ids (CSR)
    pair_acc_tokens    int32 [A]
    pair_unc_offsets   int32 [P + 1]          still uncertain sorted-vocabulary indices (CSR)
    pair_unc_tokens    int32 [U2]
    """

    node_pair_offsets: np.ndarray
    pair_below: np.ndarray
    pair_acc_offsets: np.ndarray
    pair_acc_tokens: np.ndarray
    pair_unc_offsets: np.ndarray
    pair_unc_tokens: np.ndarray

    @staticmethod
    def none(num_nodes: int) -> "ContextPairs":
        """No pairs: the runtime walks every node's uncertain tokens from the real stack."""
        empty = np.zeros(0, dtype=np.int32)
        one = np.zeros(1, dtype=np.int32)
        return ContextPairs(np.zeros(num_nodes + 1, dtype=np.int32), empty, one, empty, one,
                            empty)


def below_nodes(automaton: Automaton) -> List[set]:
    """For each rule, the nodes that can sit directly below a frame of it in a stack
    (-1: the bottom). A call through a non-pure return puts that return node below the callee;
    a tail call (pure return) puts below the callee whatever was below the caller."""
    a = automaton
    below: List[set] = [set() for _ in range(a.num_rules)]
    below[a.root_rule].add(-1)
    tail_calls: List[Tuple[int, int]] = []  # (caller rule, callee rule)
    lists = a.lists
    for node in range(a.num_nodes):
        caller = lists.node_rule[node]
        for rule, ret in lists.refs[node]:
            if lists.is_pure_return[ret]:
                tail_calls.append((caller, rule))
            else:
                below[rule].add(int(ret))
    changed = True
    while changed:
        changed = False
        for caller, callee in tail_calls:
            missing = below[caller] - below[callee]
            if missing:
                below[callee] |= missing
                changed = True
    return below


def classify_pair(escaping: VocabularyWalk, classes_of: StateClasses, node: int, below: int,
                  uncertain: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """One pair's second level: the node's ``uncertain`` sorted indices walked from the stack
    (below, node) by an escaping walk (``escape_bottom=True, use_lookahead=False``): (accepted
    whatever lies under ``below``, still uncertain); the others are rejected."""
    start = escaping.intern(frozenset({((below, node), False, None)}))
    classes = classes_of[escaping.walk_pairs(np.full(len(uncertain), start, np.int32),
                                             uncertain)]
    return uncertain[classes == ACCEPTED], uncertain[classes == UNCERTAIN]


def build_context_pairs(automaton: Automaton, cache: MaskCache, token_bytes: np.ndarray,
                        token_offsets: np.ndarray, sorted_token_ids: np.ndarray,
                        nodes: Optional[Sequence[int]] = None,
                        runs: Optional[RunBreaks] = None) -> ContextPairs:
    """The pairs of ``nodes`` (default: every scannable node; a node left out has none, and
    the runtime walks all of its uncertain tokens from the real stack). ``runs``: the
    vocabulary's RunBreaks, for walks that skip runs (same pairs, faster)."""
    # ascending: the pairs are appended in node order (CSR)
    nodes = cache.nodes.tolist() if nodes is None else sorted({int(n) for n in nodes})
    escaping = VocabularyWalk(StackWalker(automaton, escape_bottom=True, use_lookahead=False),
                              token_bytes, token_offsets, runs)
    bottom = VocabularyWalk(StackWalker(automaton, escape_bottom=False), token_bytes,
                            token_offsets, runs)
    classes_of = StateClasses(escaping)
    below = below_nodes(automaton)
    pair_offsets = np.zeros(automaton.num_nodes + 1, dtype=np.int64)
    pairs_below, acc_parts, unc_parts = [], [], []
    for node, entry in zip(nodes, cache.entries_of(nodes) if nodes else ()):
        uncertain = entry.uncertain
        if len(uncertain) == 0:
            continue
        for r in sorted(below[int(automaton.node_rule[node])]):
            compile_budget.check("the context pairs")
            if r < 0:
                start = bottom.intern(frozenset({((node,), False, None)}))
                final = bottom.walk_pairs(np.full(len(uncertain), start, np.int32), uncertain)
                accepted, still = uncertain[final != 0], uncertain[:0]
            else:
                accepted, still = classify_pair(escaping, classes_of, node, r, uncertain)
            pairs_below.append(r)
            acc_parts.append(np.sort(sorted_token_ids[accepted]).astype(np.int32))
            unc_parts.append(still.astype(np.int32))
            pair_offsets[node + 1] += 1
    np.cumsum(pair_offsets, out=pair_offsets)

    def csr(parts):
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        values = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        return offsets.astype(np.int32), values.astype(np.int32)

    acc_offsets, acc_tokens = csr(acc_parts)
    unc_offsets, unc_tokens = csr(unc_parts)
    return ContextPairs(pair_offsets.astype(np.int32), np.array(pairs_below, dtype=np.int32),
                        acc_offsets, acc_tokens, unc_offsets, unc_tokens)
