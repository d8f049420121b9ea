"""Walk many tokens from many configurations at once, vectorised over the vocabulary.

In:  a ``StackWalker`` (the PDA's moves) and the sorted vocabulary of a ``TokenizerInfo``
     (``token_bytes`` / ``token_offsets`` / ``common_prefix_len``, in sorted order).
Out: * ``VocabularyWalk``: configurations interned as small integers, with their byte
       transitions memoised in a dense table ``transition[state, byte]`` filled lazily (only a
       state's byte classes never seen before run the Python closure, one closure for the
       classes that move its elements alike); ``walk_pairs`` walks a
       list of (state, token) pairs level by level (byte position d), one numpy gather per
       level, dropping a pair at the first byte that kills it.
     * ``TokenTrie`` + ``walk_trie``: the same walk over the distinct token prefixes, so a
       prefix shared by many tokens is walked once and a rejected prefix skips its subtree
       (the mask cache walks the whole vocabulary from every node this way).
     * Run skipping: a state that a byte leads back to itself (inside a string, a run of
       spaces, digits) skips, per token, to the first byte outside its loop set in one
       lookup (``RunBreaks``), so such a walk costs a few passes instead of one per byte level
       (Qwen's trie is 128 levels deep, and a ``[ ]*`` rule keeps its all-spaces prefixes alive
       to the bottom).
     * The same walks in C (csrc/vocab_walk.c, built by ``gxg.native``): the trie below its
       second level and the pair walks, where a C compiler is found; numpy is the reference
       and the fallback.

The transition table and the loop sets of states are caches owned by the ``VocabularyWalk``
(one per automaton and walker mode); they only grow. ``RunBreaks`` keeps, per vocabulary, the
break tables of the few loop sets met most recently (a bounded cache that says so).
"""
from __future__ import annotations

import ctypes
import sys
import threading
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import numpy as np

from gxg import compile_budget, native
from gxg.compiler.automaton import gc_paused
from gxg.compiler.stack_walk import ANYTHING, EMPTY_CONFIG, Config, StackWalker

DEAD = 0
UNKNOWN = -1
MAX_STATES = 1 << 23  # keys state * 256 + byte fit in int32
NO_LOOP = -1           # skip_ids: a state no byte leads back to (or not known to loop yet)
CHARACTER_LOOP_MIN_ASCII = 32  # ASCII bytes a loop set needs before characters are tried
WHOLE_BROKEN_SHARE = 0.25  # a looping start walks the whole vocabulary by runs below this
WHOLE_BELOW_MIN_PREFIXES = 16  # first bytes that must reach a state before it is asked to loop
RUNS_MIN_PAIRS = 4096  # walk_pairs skips runs from this many pairs on
# walk_pairs walks in C (where built) from this many pairs on: fewer pairs cost less in numpy,
# one pass per byte level, than the C walk's rounds (a round per transition not known yet)
C_MIN_PAIRS = 1024
SAMPLE_TOKENS = 2048   # tokens of the fixed sample that estimates a loop set's broken share

# Well-formed UTF-8 sequences as byte ranges (RFC 3629, table 3-7): no overlongs, no
# surrogates, nothing above U+10FFFF.
_CONTINUATION = range(0x80, 0xC0)
UTF8_SEQUENCES = (
    (range(0xC2, 0xE0), _CONTINUATION),
    ((0xE0,), range(0xA0, 0xC0), _CONTINUATION),
    (range(0xE1, 0xED), _CONTINUATION, _CONTINUATION),
    ((0xED,), range(0x80, 0xA0), _CONTINUATION),
    ((0xEE, 0xEF), _CONTINUATION, _CONTINUATION),
    ((0xF0,), range(0x90, 0xC0), _CONTINUATION, _CONTINUATION),
    (range(0xF1, 0xF4), _CONTINUATION, _CONTINUATION, _CONTINUATION),
    ((0xF4,), range(0x80, 0x90), _CONTINUATION, _CONTINUATION),
)
LoopKey = Tuple[bytes, bool]  # (the 256-bit loop byte set, every UTF-8 character loops too)


def concatenated_ranges(lo: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """lo[0] .. lo[0]+counts[0]-1, lo[1] .. lo[1]+counts[1]-1, ... as one intp array."""
    cumulative = np.cumsum(counts)
    out = np.repeat(lo - (cumulative - counts), counts).astype(np.intp)
    out += np.arange(int(cumulative[-1]) if len(counts) else 0)
    return out


class CBuffers:
    """Arrays the C walks write into, kept between walks: one set per thread (``c_buffers``,
    a cache that says so), so their memory does not grow with the grammars. A buffer is reused
    only when nothing else refers to it, so a part a walk yielded (a view of its buffer) is
    never overwritten; otherwise a new buffer is made. Taking an array's address costs ~1 µs,
    so each buffer keeps its own."""

    def __init__(self):
        self._kept: Dict[str, Tuple[np.ndarray, int]] = {}

    def get(self, name: str, size: int, dtype) -> Tuple[np.ndarray, int]:
        """An array of at least ``size`` items, and its address."""
        kept = self._kept.get(name)
        if kept is not None:
            array = kept[0]
            # referred to by: the dict's tuple, ``array``, getrefcount's argument
            if len(array) >= size and sys.getrefcount(array) == 3:
                return kept
        array = np.empty(max(size, 64), dtype)
        kept = self._kept[name] = (array, array.ctypes.data)
        return kept


_THREAD_BUFFERS = threading.local()


def c_buffers() -> CBuffers:
    """This thread's ``CBuffers``."""
    buffers = getattr(_THREAD_BUFFERS, "buffers", None)
    if buffers is None:
        buffers = _THREAD_BUFFERS.buffers = CBuffers()
    return buffers


class VocabularyWalk:
    def __init__(self, walker: StackWalker, token_bytes: Optional[np.ndarray] = None,
                 token_offsets: Optional[np.ndarray] = None,
                 runs: Optional["RunBreaks"] = None):
        self.walker = walker
        if token_bytes is not None:
            self.token_bytes = np.ascontiguousarray(token_bytes, dtype=np.uint8)
            self.token_offsets = np.ascontiguousarray(token_offsets, dtype=np.int64)
            self.token_lengths = np.diff(self.token_offsets)
            self._token_bytes_at = self.token_bytes.ctypes.data
        # the same vocabulary's RunBreaks (shared per vocabulary): walk_pairs skips runs
        self.runs = runs
        byte_class = walker.automaton.byte_class
        self._byte_class = byte_class.tolist()
        self._byte_class_array = byte_class
        self._next_node = walker.automaton.next_node
        self._is_plain = walker.automaton.lists.is_plain
        self._next_rows = walker.automaton.lists.next_node
        # per UTF-8 sequence, the distinct byte classes at each of its positions
        self._utf8_classes = [[sorted({self._byte_class[b] for b in byte_range})
                               for byte_range in sequence] for sequence in UTF8_SEQUENCES]
        self._node_character_loops: Dict[int, bool] = {}  # per plain node (a cache)
        self._class_members = [np.nonzero(byte_class == c)[0]
                               for c in range(int(byte_class.max()) + 1)]
        # per bit mask of scanned classes, a fresh row: DEAD at the other bytes (a cache), and
        # per node the classes it scans (a cache): ``_mark_dead_bytes``
        self._dead_bytes: Dict[int, np.ndarray] = {}
        self._scan_masks: Dict[int, int] = {}
        self._all_classes = (1 << self._next_node.shape[1]) - 1
        self.configs: List[Config] = [EMPTY_CONFIG]
        self._ids: Dict[Config, int] = {EMPTY_CONFIG: DEAD}
        self._transition = np.full(64 * 256, UNKNOWN, dtype=np.int32)  # [state * 256 + byte]
        self._transition[DEAD * 256: DEAD * 256 + 256] = DEAD
        # Loop sets, per state: an index into loop_keys, NO_LOOP until the state is seen to
        # loop (``note_loops``; a state that never does is not asked for its whole row).
        self.skip_ids = np.full(64, NO_LOOP, dtype=np.int32)
        self._loop_checked = np.zeros(64, dtype=bool)
        self.loop_keys: List[LoopKey] = []
        self.loop_bytes: List[np.ndarray] = []  # bool [256] per key: its byte set
        self._loop_key_ids: Dict[LoopKey, int] = {}
        self._loop_tables: Optional[Tuple[np.ndarray, np.ndarray]] = None  # ``loop_tables``
        self._c_tables: Optional[tuple] = None  # ``c_tables``

    # ------------------------------------------------------------------ interning
    def intern(self, config: Config) -> int:
        state = self._ids.get(config)
        if state is None:
            state = len(self.configs)
            if state >= MAX_STATES:
                raise OverflowError(f"more than {MAX_STATES} walk configurations")
            self.configs.append(config)
            self._ids[config] = state
            if (state + 1) * 256 > self._transition.shape[0]:
                grown = np.full(2 * self._transition.shape[0], UNKNOWN, dtype=np.int32)
                grown[: self._transition.shape[0]] = self._transition
                self._transition = grown
                self.skip_ids = np.concatenate(
                    [self.skip_ids, np.full(len(self.skip_ids), NO_LOOP, np.int32)])
                self._loop_checked = np.concatenate(
                    [self._loop_checked, np.zeros(len(self._loop_checked), bool)])
            self._mark_dead_bytes(state, config)
        return state

    def _mark_dead_bytes(self, state: int, config: Config) -> None:
        """Bytes that no element of the configuration can scan lead to DEAD: fill them in
        one assignment instead of running the closure for each. The classes a top scans are
        kept per node as a bit mask, so a configuration costs a few integer ORs; the rows are
        kept per mask (configurations of a key trie have distinct tops, but most share the
        classes they scan)."""
        scans, scan_mask = self._scan_masks, self._scan_mask
        mask = 0
        for stack, _, _ in config:
            if stack:
                top = stack[-1]
                if top < 0:  # ANYTHING: everything scans
                    return
                known = scans.get(top)
                mask |= known if known is not None else scan_mask(top)
        if mask == self._all_classes:
            return  # a fresh state's row is all UNKNOWN already
        row = self._dead_bytes.get(mask)
        if row is None:  # the mask's bits back as an array (the inverse of ``_scan_mask``)
            num_classes = self._next_node.shape[1]
            bits = np.frombuffer(mask.to_bytes((num_classes + 7) // 8, "little"), np.uint8)
            scannable = np.unpackbits(bits, bitorder="little")[:num_classes].astype(bool)
            row = self._dead_bytes[mask] = np.where(scannable[self._byte_class_array],
                                                    UNKNOWN, DEAD).astype(np.int32)
        self._transition[state * 256: state * 256 + 256] = row

    def _scan_mask(self, node: int) -> int:
        """The classes ``node`` scans, as a bit mask (kept in ``_scan_masks``)."""
        bits = np.packbits(self._next_node[node] >= 0, bitorder="little")
        mask = self._scan_masks[node] = int.from_bytes(bits.tobytes(), "little")
        return mask

    def transitions(self, states: np.ndarray, byte_values: np.ndarray) -> np.ndarray:
        """``transition[states, bytes]``, computing the entries never needed before."""
        keys = states.astype(np.int32)  # state * 256 stays below 2**31 (see intern)
        keys <<= 8
        keys |= byte_values
        return self.lookup(keys)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """``transition`` at ``state * 256 + byte`` keys (any shape)."""
        result = self._transition[keys]
        if len(result) and result.min() == UNKNOWN:
            # A step depends on the byte only through its class: compute one byte per
            # (state, class) and fill the whole class; the classes of one state that move
            # its elements alike share one closure (``StackWalker.step_classes``).
            classes_of: Dict[int, Dict[int, int]] = {}  # state -> {class: a byte of it}
            byte_class = self._byte_class
            for key in set(keys[result == UNKNOWN].tolist()):
                classes_of.setdefault(key >> 8, {}).setdefault(byte_class[key & 255], key & 255)
            for state, classes in classes_of.items():
                self._fill(state, classes)
            result = self._transition[keys]
        return result

    def _fill(self, state: int, classes: Dict[int, int]) -> None:
        """The transitions of ``state`` on every byte of ``classes`` ({class: a byte of
        it})."""
        members, config, base = self._class_members, self.configs[state], state * 256
        groups = self.walker.step_classes(config, classes) if len(classes) > 1 else None
        if groups is None:
            groups = [([cls], self.walker.step(config, byte)) for cls, byte in classes.items()]
        for group, target_config in groups:
            target = self.intern(target_config)
            # one assignment per group (a key trie's state sends most classes one way)
            self._transition[base + (members[group[0]] if len(group) == 1 else
                                     np.concatenate([members[cls] for cls in group]))] = target

    # ------------------------------------------------------------------ loops
    def note_loops(self, states: np.ndarray) -> None:
        """Find the loop set of each of ``states`` not asked before: the bytes that lead it
        back to itself (its row of the table, one lookup for all the states), and whether
        every well-formed UTF-8 character does too, so that walks can skip runs of them
        (``RunBreaks``). Called for states seen to loop on some byte, and for the starts of a
        walk (whose rows the walk's first level reads anyway)."""
        fresh = np.unique(states[~self._loop_checked[states]])
        fresh = fresh[fresh != DEAD].astype(np.int32)
        if not len(fresh):
            return
        self._loop_checked[fresh] = True
        plain_tops = {state: self._plain_tops(state) for state in fresh.tolist()}
        found = {state: None if tops is None else self._plain_loops(state, tops)
                 for state, tops in plain_tops.items()}
        rest = np.array([state for state, row in found.items() if row is None], dtype=np.int32)
        if len(rest):  # the others' rows, one lookup for all of them
            rows = self.lookup(((rest[:, None] << 8) | np.arange(256, dtype=np.int32)).ravel())
            found.update(zip(rest.tolist(), rows.reshape(len(rest), 256) == rest[:, None]))
        for state, row in found.items():
            if not row.any():
                continue
            # Characters are asked about (their walks' closures cost ~0.1 ms a state) only
            # for a state that loops on much of ASCII, as inside strings; a False is always
            # correct (walks then break at every byte >= 0x80), only slower.
            # A plain configuration's answer comes from its nodes (kept per node: every walk
            # of the grammar meets the same string nodes under other stacks).
            characters = (np.count_nonzero(row[:0x80]) >= CHARACTER_LOOP_MIN_ASCII
                          and (all(map(self._node_characters_loop, plain_tops[state]))
                               if plain_tops[state] else self._characters_loop(state)))
            key = (np.packbits(row).tobytes(), characters)
            index = self._loop_key_ids.get(key)
            if index is None:
                index = self._loop_key_ids[key] = len(self.loop_keys)
                self.loop_keys.append(key)
                self.loop_bytes.append(row.copy())
            self.skip_ids[state] = index

    def c_tables(self, runs: Optional["RunBreaks"]) -> Tuple[int, ...]:
        """The addresses the C walks read the walk's tables at: transition, skip_ids,
        loop_checked, ``loop_tables``' two arrays, and an int64 array of the address of each
        loop key's break table in ``runs`` (0 where none is built; taken again only when one
        of them was replaced: the table grows by copies, keys and break tables come and go).
        The break tables are referred to here, so one that ``runs`` evicts lives on."""
        arrays = (self._transition, self.skip_ids, self._loop_checked) + self.loop_tables()
        breaks_key = (len(self.loop_keys), id(runs), -1 if runs is None else runs.version)
        kept = self._c_tables
        if kept is None or kept[2] != breaks_key or any(a is not b
                                                         for a, b in zip(arrays, kept[0])):
            tables = [None if runs is None else runs.built_table(key) for key in self.loop_keys]
            pointers = np.array([0 if t is None else t.ctypes.data for t in tables] or [0],
                                dtype=np.int64)
            kept = self._c_tables = (arrays, tuple(a.ctypes.data for a in arrays)
                                     + (pointers.ctypes.data,), breaks_key, tables, pointers)
        return kept[1]

    def loop_tables(self) -> Tuple[np.ndarray, np.ndarray]:
        """The loop keys as the C walk reads them: uint8 [keys, 256] byte sets and uint8 [keys]
        utf8 flags (rebuilt when keys were added since the last call; at least one row)."""
        if self._loop_tables is None or len(self._loop_tables[1]) != max(1, len(self.loop_keys)):
            rows = self.loop_bytes or [np.zeros(256, bool)]
            self._loop_tables = (np.ascontiguousarray(np.stack(rows), dtype=np.uint8),
                                 np.array([utf8 for _, utf8 in self.loop_keys] or [False],
                                          dtype=np.uint8))
        return self._loop_tables

    def _plain_tops(self, state: int) -> Optional[List[int]]:
        """The tops of a configuration whose elements all have a plain top (a node that scans,
        is not final and calls nothing: its closure is itself) and no lookahead; None for any
        other configuration."""
        tops = set()
        for stack, _, lookahead in self.configs[state]:
            if not stack or stack is ANYTHING or lookahead is not None \
                    or not self._is_plain[stack[-1]]:
                return None
            tops.add(stack[-1])
        return sorted(tops)

    def _plain_loops(self, state: int, tops: List[int]) -> np.ndarray:
        """The loop bytes of a plain configuration (``_plain_tops``), read off ``next_node``
        without a closure: the bytes that move every top back to itself (filled in the
        transition table). A byte could also loop by swapping two elements' tops; it is
        missed here, which only makes walks break there (slower, never wrong)."""
        nodes = np.array(tops, dtype=np.int64)
        loops = (self._next_node[nodes][:, self._byte_class_array]
                 == nodes[:, None]).all(axis=0)
        self._transition[state * 256 + np.flatnonzero(loops)] = state
        return loops

    def _node_characters_loop(self, node: int) -> bool:
        """Does every well-formed multi-byte UTF-8 character lead the plain ``node`` back to
        itself through plain nodes only (so that a plain configuration whose tops all do this
        loops on characters: each element's closure is itself at every byte)? Read off
        ``next_node``, no closure; kept per node (a cache that only grows). False where the
        path passes a node that is not plain: only slower (walks break at such characters)."""
        known = self._node_character_loops.get(node)
        if known is None:
            known = self._node_character_loops[node] = self._characters_return(node)
        return known

    def _characters_return(self, node: int) -> bool:
        """``_node_characters_loop`` computed: each sequence's byte positions in turn, from
        the nodes the position before reached. No if a byte is dead, if a node inside a
        character is not plain (a grammar over code points cannot make one final or calling
        there: a guard for other automata), or if the last byte leads anywhere but ``node``."""
        rows, plain = self._next_rows, self._is_plain
        for positions in self._utf8_classes:
            reached = {node}
            for k, classes in enumerate(positions):
                targets = {rows[n][c] for n in reached for c in classes}
                if min(targets) < 0:
                    return False
                last = k + 1 == len(positions)
                if (targets != {node}) if last else not all(plain[t] for t in targets):
                    return False
                reached = targets
        return True

    def _characters_loop(self, state: int) -> bool:
        """Does every well-formed multi-byte UTF-8 character lead ``state`` back to itself?
        (The sequences advance together: one lookup per byte position, not per sequence.)"""
        reached = [np.array([state], dtype=np.int32) for _ in UTF8_SEQUENCES]
        for k in range(4):
            going = [i for i, sequence in enumerate(UTF8_SEQUENCES) if len(sequence) > k]
            parts = [((reached[i][:, None] << 8)
                      | np.array(UTF8_SEQUENCES[i][k], dtype=np.int32)[None, :]).ravel()
                     for i in going]
            targets = self.lookup(np.concatenate(parts))
            if (targets == DEAD).any():
                return False
            bounds = np.cumsum([0] + [len(part) for part in parts])
            for j, i in enumerate(going):
                reached[i] = np.unique(targets[bounds[j]: bounds[j + 1]])
        return all(len(r) == 1 and r[0] == state for r in reached)

    # ------------------------------------------------------------------ the walk
    @gc_paused()  # a walk allocates stacks and configurations by the hundred thousand
    def walk_pairs(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Final state of each (state, sorted-token index) pair after all the token's bytes
        (with ``runs`` and at least RUNS_MIN_PAIRS pairs, skipping runs of looping states:
        ``_walk_runs``; finding a state's loops costs more than a few pairs save)."""
        final = np.asarray(states, dtype=np.int32).copy()
        tokens = np.asarray(tokens, dtype=np.int64)
        live = np.nonzero((self.token_lengths[tokens] > 0) & (final != DEAD))[0]
        use_runs = self.runs is not None and len(live) >= RUNS_MIN_PAIRS
        kernel = _pair_kernel() if len(live) >= C_MIN_PAIRS else None
        if kernel is not None:  # the C walk, skipping runs or not
            walked = tokens[live]
            if use_runs:
                data, byte_addresses = self.runs.data, self.runs.addresses()
            else:  # the UTF-8 marks are not read
                data, byte_addresses = self.token_bytes, (self._token_bytes_at,) * 3
            reached_by = _walk_native(kernel, self, self.runs if use_runs else None, data,
                                      byte_addresses, live, walked, final[live],
                                      self.token_offsets[walked],
                                      self.token_offsets[walked + 1], use_runs)
            final[live] = DEAD  # unless the walk reaches the token's end
            for pairs, _, reached in reached_by:
                final[pairs] = reached
            return final
        if use_runs:
            walked, starts = tokens[live], final[live].astype(np.intp)
            final[live] = DEAD  # unless a run of parts below reaches the token's end
            for pairs, _, reached in _walk_runs_numpy(self, self.runs, live, walked, starts,
                                                      self.token_offsets[walked],
                                                      self.token_offsets[walked + 1]):
                final[pairs] = reached
            return final
        position = self.token_offsets[tokens[live]]
        remaining = self.token_lengths[tokens[live]]
        current = final[live]
        while live.size:
            current = self.transitions(current, self.token_bytes[position])
            remaining = remaining - 1
            going = (current != DEAD) & (remaining > 0)
            stopped = ~going
            final[live[stopped]] = current[stopped]
            live, current = live[going], current[going]
            position, remaining = position[going] + 1, remaining[going]
        return final


# ----------------------------------------------------------------------------- the token trie


class TokenTrie:
    """The sorted vocabulary as an explicit trie, stored level by level (a plain-array view of
    ``TokenizerInfo``'s flattened trie, built once per vocabulary in vectorised numpy).

    A trie node is a distinct token prefix; level d holds the prefixes of length d, in sorted
    order, so the children of one node are a contiguous range of the next level.

    level_byte[d]         uint8  last byte of each prefix of length d
    level_child_lo[d]     int64  children of node j of level d: level d+1 positions
    level_child_hi[d]     int64  [child_lo[j], child_hi[j])
    level_token_end[d]    int64  sorted index of the token equal to the prefix, -1 if none
    duplicate_of          int64  [N] for tokens whose bytes repeat the previous token's, the
                                 earlier sorted index, else -1
    level_creator[d]      int64  the first sorted token below each prefix of length d (the
                                 tokens below a prefix are a contiguous range: ``subtree``)
    runs                  RunBreaks of this vocabulary
    """

    def __init__(self, token_bytes: np.ndarray, token_offsets: np.ndarray,
                 common_prefix_len: np.ndarray):
        offsets = np.asarray(token_offsets, dtype=np.int64)
        lengths = np.diff(offsets)
        cpl = np.asarray(common_prefix_len, dtype=np.int64)
        n = len(lengths)
        self.num_tokens = n
        self.token_lengths = lengths                   # int64 [N] bytes of each sorted token
        self.token_offsets = offsets
        self.token_ends = offsets[1:]
        self.common_prefix_len = cpl
        duplicate = cpl >= lengths
        self.duplicate_of = np.where(duplicate, np.arange(n) - 1, -1)
        self.has_duplicates = bool(duplicate.any())
        # the first token with the same bytes (itself when not a repeat): repeats are adjacent
        self.duplicate_root = np.maximum.accumulate(np.where(duplicate, 0, np.arange(n)))
        walkable = np.flatnonzero((lengths > 0) & ~duplicate)
        self.token_sample = walkable[np.linspace(0, len(walkable) - 1,
                                                 min(SAMPLE_TOKENS, len(walkable))
                                                 ).astype(np.intp)] if len(walkable) else walkable
        # Token i creates the prefixes of lengths cpl_i + 1 .. len_i (the others it shares
        # with token i-1). Each created prefix is (creator token, depth).
        counts = np.where(duplicate, 0, lengths - cpl)
        creator = np.repeat(np.arange(n), counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        depth = np.repeat(cpl, counts) + (np.arange(len(creator)) - first) + 1
        order = np.lexsort((creator, depth))
        creator, depth = creator[order], depth[order]
        max_depth = int(depth.max()) if len(depth) else 0
        bounds = np.searchsorted(depth, np.arange(1, max_depth + 2))
        self.level_byte, self.level_token_end = [None], [None]
        self.level_child_lo, self.level_child_hi = [], []
        creators = [np.zeros(0, np.int64)]
        data = np.asarray(token_bytes, dtype=np.uint8)
        for d in range(1, max_depth + 1):
            c = creator[bounds[d - 1]: bounds[d]]
            creators.append(c)
            self.level_byte.append(data[offsets[c] + d - 1])
            self.level_token_end.append(np.where(lengths[c] == d, c, -1))
        for d in range(max_depth + 1):
            if d == 0:
                self.level_child_lo.append(np.zeros(1, np.int64))
                self.level_child_hi.append(np.array([len(creators[1]) if max_depth else 0]))
                continue
            nxt = creators[d + 1] if d < max_depth else np.zeros(0, np.int64)
            # Children of prefix (c, d): next-level creators from c up to the next creator
            # of this level (exclusive).
            this = creators[d]
            following = np.append(this[1:], n)
            self.level_child_lo.append(np.searchsorted(nxt, this, side="left"))
            self.level_child_hi.append(np.searchsorted(nxt, following, side="left"))
        self.max_depth = max_depth
        self.level_creator = creators
        self._subtree_end: Dict[int, np.ndarray] = {}  # per level, computed on first use
        self._flat: Optional["FlatTrie"] = None  # ``flat``
        self.runs = RunBreaks(data, offsets)
        self.runs.utf8_break  # per-vocabulary work (~30 ms for Qwen): done with the trie
        # Dense walks read every node of a level: its parent (a position in the level above)
        # and the positions that end a token.
        self.level_parent = [np.zeros(0, np.int64)]
        self.level_end_positions = [np.zeros(0, np.int64)]
        for d in range(1, max_depth + 1):
            lo, hi = self.level_child_lo[d - 1], self.level_child_hi[d - 1]
            self.level_parent.append(np.repeat(np.arange(len(lo)), hi - lo))
            self.level_end_positions.append(np.flatnonzero(self.level_token_end[d] >= 0))

    def flat(self) -> "FlatTrie":
        """The trie as one table for the C walk (built on first use, ~30 ms for Qwen's; the
        same table from any thread)."""
        if self._flat is None:
            self._flat = FlatTrie(self)
        return self._flat

    def subtree(self, depth: int, positions: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """The sorted tokens below prefixes of length ``depth`` (positions in that level),
        longer than the prefix: ranges [lo, hi). (The token equal to a prefix, if any, is its
        creator: the walk meets it at the prefix itself.)"""
        creator = self.level_creator[depth][positions]
        end = self._subtree_end.get(depth)
        if end is None:
            # A token leaves the subtree of its predecessor's prefix of length depth when it
            # shares fewer than depth bytes with its predecessor.
            leaving = np.append(np.flatnonzero(self.common_prefix_len < depth), self.num_tokens)
            this_level = self.level_creator[depth]
            end = leaving[np.searchsorted(leaving, this_level, side="right")]
            self._subtree_end[depth] = end  # same array from any thread: no lock needed
        lo = creator + (self.level_token_end[depth][positions] >= 0)
        return lo, end[positions]


class FlatTrie:
    """A ``TokenTrie`` as csrc/vocab_walk.c's ``gxg_walk_trie`` reads it: every prefix a global
    node number (level by level: ``offset[d] + position``; the root is 0), and one int32 table
    [TRIE_ROWS, nodes] whose rows are, per node, its children's range [child_lo, child_hi)
    (global), its last byte, the token equal to it (-1: none), the sorted tokens below it and
    longer ([below_lo, below_hi): ``TokenTrie.subtree``) and its depth. Also, per sorted
    token, whether it repeats its predecessor (uint8)."""

    ROWS = ("child_lo", "child_hi", "byte", "token_end", "below_lo", "below_hi", "depth")

    def __init__(self, trie: "TokenTrie"):
        sizes = [1] + [len(trie.level_byte[d]) for d in range(1, trie.max_depth + 1)]
        self.offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.num_nodes = int(self.offset[-1])
        rows = {name: [np.zeros(1, np.int64) if name != "token_end" else np.full(1, -1)]
                for name in self.ROWS}
        rows["child_lo"][0] = self.offset[1] + trie.level_child_lo[0]
        rows["child_hi"][0] = self.offset[1] + trie.level_child_hi[0]
        for d in range(1, trie.max_depth + 1):
            positions = np.arange(sizes[d])
            rows["child_lo"].append(self.offset[d + 1] + trie.level_child_lo[d])
            rows["child_hi"].append(self.offset[d + 1] + trie.level_child_hi[d])
            rows["byte"].append(trie.level_byte[d])
            rows["token_end"].append(trie.level_token_end[d])
            below_lo, below_hi = trie.subtree(d, positions)
            rows["below_lo"].append(below_lo)
            rows["below_hi"].append(below_hi)
            rows["depth"].append(np.full(sizes[d], d))
        self.table = np.stack([np.concatenate(rows[name]).astype(np.int32)
                               for name in self.ROWS])
        self.is_repeat = np.ascontiguousarray(trie.duplicate_of >= 0, dtype=np.uint8)
        # what gxg_walk_trie reads of the vocabulary: the table, the token offsets, is_repeat,
        # the bytes and their UTF-8 marks (addresses taken once: they live with the trie)
        self.arrays = (self.table, trie.token_offsets, self.is_repeat, trie.runs.data,
                       trie.runs.utf8_break, trie.runs.utf8_tail)
        self.addresses = tuple(a.ctypes.data for a in self.arrays)


class RunBreaks:
    """Where runs of a loop set end, for every byte of one vocabulary (sorted order).

    For a loop key (bytes B that lead a state back to itself; ``utf8``: every well-formed
    multi-byte character does too), a *break* is a byte position where the run stops: a byte
    outside B, or, with ``utf8``, a byte >= 0x80 that is not part of a whole well-formed
    character inside its token (a token may hold half a character). ``next_break`` gives the
    first break at or after each position; a walk clips it to the token's end. With ``utf8``
    a run only starts at a character boundary: a position inside a whole character is its own
    break (the loop is known for whole characters, not for their tails).

    Two ways, one answer: a table over the whole vocabulary (one gather per query; built once
    per key, ~1 byte pass, and kept for the MAX_TABLES keys used last: a bounded cache that
    says so), or, for few queries, the breaks of just the queried tokens' bytes and a binary
    search.
    """

    MAX_TABLES = 8

    def __init__(self, token_bytes: np.ndarray, token_offsets: np.ndarray):
        self.data = token_bytes
        self.offsets = token_offsets
        self._tables: "OrderedDict[LoopKey, np.ndarray]" = OrderedDict()
        self._whole: Dict[LoopKey, Tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._mostly_whole: Dict[LoopKey, bool] = {}
        self._lock = threading.Lock()
        self._utf8: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self._addresses: Optional[Tuple[int, int, int]] = None  # ``addresses``
        self.version = 0  # counts the tables built and evicted (``built_table``'s readers)

    def built_table(self, key: LoopKey) -> Optional[np.ndarray]:
        """``table(key)`` if it is built (kept), else None; builds nothing."""
        with self._lock:
            return self._tables.get(key)

    def addresses(self) -> Tuple[int, int, int]:
        """Where the C walks read the bytes and their UTF-8 marks (taken once)."""
        if self._addresses is None:
            self._addresses = tuple(a.ctypes.data for a in (self.data, self.utf8_break,
                                                            self.utf8_tail))
        return self._addresses

    @property
    def utf8_break(self) -> np.ndarray:
        """bool [bytes]: a byte >= 0x80 outside every whole well-formed character of its
        token (computed on first use)."""
        return self._utf8_tables()[0]

    @property
    def utf8_tail(self) -> np.ndarray:
        """bool [bytes]: a byte of a whole character other than its first."""
        return self._utf8_tables()[1]

    def _utf8_tables(self) -> Tuple[np.ndarray, np.ndarray]:
        if self._utf8 is None:
            self._utf8 = _utf8_characters(self.data, self.offsets)
        return self._utf8

    def _breaks_at(self, key: LoopKey, positions: Optional[np.ndarray]) -> np.ndarray:
        """bool per byte position (None: every position): is it a break?"""
        bits, utf8 = key
        outside = ~np.unpackbits(np.frombuffer(bits, np.uint8)).astype(bool)
        if utf8:
            outside[0x80:] = False
        data = self.data if positions is None else self.data[positions]
        breaks = outside[data]
        if utf8:
            breaks |= self.utf8_break if positions is None else self.utf8_break[positions]
        return breaks

    def table(self, key: LoopKey) -> np.ndarray:
        """int32 [bytes + 1]: ``next_break`` of every position (bytes: none)."""
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
                return table
        n = len(self.data)
        breaks = np.append(np.flatnonzero(self._breaks_at(key, None)), n)
        table = np.repeat(breaks.astype(np.int32), np.diff(breaks, prepend=-1))
        if key[1]:  # utf8: no run starts inside a character
            tails = np.flatnonzero(self.utf8_tail)
            table[tails] = tails
        with self._lock:
            self._tables[key] = table
            while len(self._tables) > self.MAX_TABLES:
                evicted, _ = self._tables.popitem(last=False)
                self._whole.pop(evicted, None)
            self.version += 1
        return table

    def whole_tokens(self, key: LoopKey, trie: "TokenTrie"
                     ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(whole, broken, first_break): the sorted tokens (non-empty, not repeating their
        predecessor) that lie inside one run from their first byte, the others, and the first
        break of each of the others (kept with the key's table)."""
        table = self.table(key)
        with self._lock:
            kept = self._whole.get(key)
        if kept is not None:
            return kept
        starts, ends = trie.token_offsets[:-1], trie.token_ends
        candidates = np.flatnonzero((ends > starts) & (trie.duplicate_of < 0))
        first = table[starts[candidates]].astype(np.intp)
        inside = first >= ends[candidates]
        kept = (candidates[inside], candidates[~inside], first[~inside])
        with self._lock:
            if key in self._tables:  # kept as long as the table is
                self._whole[key] = kept
        return kept

    def mostly_whole(self, key: LoopKey, trie: "TokenTrie") -> bool:
        """Do most tokens (all but WHOLE_BROKEN_SHARE) lie inside one run of the key from
        their first byte? Estimated on a fixed sample of the vocabulary (a JSON string's loop
        set: yes; spaces or digits: no); kept per key (a small cache that says so)."""
        verdict = self._mostly_whole.get(key)
        if verdict is None:
            sample = trie.token_sample
            found = self.next_break(key, trie.token_offsets[sample], sample)
            broken = np.count_nonzero(found < trie.token_ends[sample])
            verdict = broken <= WHOLE_BROKEN_SHARE * len(sample)
            if len(self._mostly_whole) < 4096:
                self._mostly_whole[key] = verdict
        return verdict

    def next_break(self, key: LoopKey, positions: np.ndarray, tokens: np.ndarray
                   ) -> np.ndarray:
        """First break at or after each byte position (``tokens``: the sorted token each
        position lies in; a result past the token's end means none inside it)."""
        if len(positions) * 64 >= len(self.data) or key in self._tables:
            return self.table(key)[positions]
        found = self._search(key, positions, tokens)
        if key[1]:  # utf8: no run starts inside a character
            found = np.where(self.utf8_tail[positions], positions, found)
        return found

    def _search(self, key: LoopKey, positions: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        distinct = np.unique(tokens)
        starts = self.offsets[distinct]
        # every byte position of the distinct tokens
        inside = concatenated_ranges(starts, self.offsets[distinct + 1] - starts)
        breaks = np.append(inside[self._breaks_at(key, inside)], len(self.data))
        return breaks[np.searchsorted(breaks, positions)]


def _utf8_characters(data: np.ndarray, offsets: np.ndarray
                     ) -> Tuple[np.ndarray, np.ndarray]:
    """(breaks, tails), bool [bytes] each: bytes >= 0x80 that are not inside a whole
    well-formed UTF-8 character lying within one token; bytes of such a character after its
    first."""
    n = len(data)
    token_end = np.repeat(offsets[1:], np.diff(offsets))  # end of each byte's token
    whole = np.zeros(n + 1, dtype=bool)
    tail = np.zeros(n + 1, dtype=bool)
    for sequence in UTF8_SEQUENCES:
        leads = np.zeros(256, dtype=bool)
        leads[list(sequence[0])] = True
        at = np.flatnonzero(leads[data])
        at = at[at + len(sequence) <= token_end[at]]
        for k, byte_range in enumerate(sequence[1:], start=1):
            allowed = np.zeros(256, dtype=bool)
            allowed[list(byte_range)] = True
            at = at[allowed[data[at + k]]]
        whole[at] = True
        for k in range(1, len(sequence)):
            whole[at + k] = True
            tail[at + k] = True
    return (data >= 0x80) & ~whole[:n], tail[:n]


DENSE_FRACTION = 0.25  # an origin alive on this share of a level walks whole levels
RUNS_FROM_LEVEL = 2    # the first trie level whose looping prefixes leave for _walk_tokens


def walk_trie(walk: "VocabularyWalk", trie: TokenTrie, starts: np.ndarray):
    """Walk every token from each start state at once (``walk_trie_parts``).

    Returns (origin, token, state) arrays (intp): for every start ``origin`` (an index into
    ``starts``) and every sorted token index ``token`` whose bytes all survive from it, the
    final ``state``. Tokens missing for an origin were rejected.
    """
    origin, tokens, final = concatenated(walk_trie_parts(walk, trie, starts))
    if trie.has_duplicates:
        origin, tokens, final = add_repeats(trie, origin, tokens, final)
    return origin, tokens, final


def concatenated(parts) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(origin, token, state) arrays of ``walk_trie_parts``' parts (scalars broadcast)."""
    if not parts:
        empty = np.zeros(0, np.intp)
        return empty, empty, empty
    columns = [[np.broadcast_to(np.asarray(value, dtype=np.intp), (len(part[1]),))
                for value in part] for part in parts]
    return tuple(np.concatenate([c[k] for c in columns]) for k in range(3))


@gc_paused()  # a walk allocates stacks and configurations by the hundred thousand
def walk_trie_parts(walk: "VocabularyWalk", trie: TokenTrie, starts: np.ndarray) -> list:
    """Walk every token from each start state at once, through the trie.

    Returns a list of parts (origin, token, state): intp arrays, or for a run of tokens that
    all end in one state from one origin, plain ints for origin and state (a whole string's
    worth of tokens is then not copied). Tokens that repeat an earlier token's bytes
    (``TokenTrie.duplicate_of``) are left out: they end where their twin ends.

    Two regimes, one numpy pass per byte level each: *sparse* — the live (origin, prefix)
    pairs only, expanding each live prefix into its children (a rejected prefix costs nothing
    below it); *dense* — for an origin that keeps most prefixes alive (e.g. inside a string),
    whole levels at once, each prefix reading its parent's state, which needs far fewer passes
    per prefix. An origin switches to dense after level 2 when it is alive on more than
    DENSE_FRACTION of that level.

    Run skipping, around the trie: a start whose state loops on most of the vocabulary
    (inside a string) does not enter it (``_walk_whole``); from level RUNS_FROM_LEVEL on, a
    prefix whose state loops (``VocabularyWalk.note_loops``) leaves it, and the tokens below
    are walked one by one, skipping runs of the loop set (``_walk_tokens``). (From level 1 the
    space prefix alone would hand over a third of Qwen's vocabulary, which the trie's next
    level mostly rejects at once.) The pairs handed over at every level, and a looping start's
    broken tokens, are walked together once the trie walk ends (``_PendingRuns``).

    Where the C kernels are built (``gxg.native``), the sparse prefixes of level 2 and
    everything below them are walked by ``gxg_walk_trie`` (``_walk_below_native``), and the
    pending pairs by ``gxg_walk_pairs``: the same answer, without a numpy pass per level.
    """
    starts = np.asarray(starts, dtype=np.int32)
    origin = np.arange(len(starts), dtype=np.int64)
    found = []
    pending = _PendingRuns()  # the pairs handed to runs, walked together at the end
    walk.note_loops(starts)
    key_ids = walk.skip_ids[starts]
    whole = np.array([key_id != NO_LOOP and trie.runs.mostly_whole(walk.loop_keys[key_id], trie)
                      for key_id in key_ids.tolist()], dtype=bool)
    for o in np.flatnonzero(whole).tolist():
        found.extend(_walk_whole(walk, trie, o, int(starts[o]), pending))
    origin = origin[~whole]
    nodes = np.zeros(len(origin), np.int64)
    states = starts[~whole]
    dense_origins, dense_states = np.zeros(0, np.int64), None
    for d in range(1, trie.max_depth + 1):
        compile_budget.check("the vocabulary walk")
        lo = trie.level_child_lo[d - 1][nodes]
        counts = trie.level_child_hi[d - 1][nodes] - lo
        if not counts.any():
            break
        children = concatenated_ranges(lo, counts)  # positions lo..hi-1 of every live parent
        parents = np.repeat(states, counts)
        targets = walk.transitions(parents, trie.level_byte[d][children])
        live = np.flatnonzero(targets)  # DEAD == 0
        nodes, states = children[live], targets[live]
        origin = np.repeat(origin, counts)[live]
        ends = trie.level_token_end[d][nodes]
        is_end = ends >= 0
        found.append((origin[is_end], ends[is_end], states[is_end]))
        looped = states == parents[live]
        if looped.any():
            walk.note_loops(states[looped])
        if d == 1 and len(states):
            whole = _whole_below(walk, trie, states, nodes)
            if whole.any():
                found.extend(_walk_whole_below(walk, trie, origin[whole], states[whole],
                                               nodes[whole], pending))
                stay = ~whole
                nodes, states, origin = nodes[stay], states[stay], origin[stay]
        kernel = _trie_kernel() if d == 2 else None
        looping = walk.skip_ids[states] != NO_LOOP if d >= RUNS_FROM_LEVEL else None
        if looping is not None and looping.any() and kernel is None:
            lo, hi = trie.subtree(d, nodes[looping])
            _walk_tokens(trie, origin[looping], states[looping], lo, hi, d, pending)
            stay = ~looping
            nodes, states, origin, looping = nodes[stay], states[stay], origin[stay], None
        if d == 2 and len(nodes):
            # an origin alive on much of this level walks the levels below whole (numpy);
            # the other prefixes go on in C where it is built (the looping ones to runs there)
            sparse = np.ones(len(nodes), bool) if looping is None else ~looping
            dense_origins, to_dense = _dense_origins(trie, len(starts), origin, nodes, sparse, d)
            if len(dense_origins):
                dense_states = np.zeros((len(dense_origins), len(trie.level_byte[d])), np.int32)
                dense_states[to_dense[0], nodes[to_dense[1]]] = states[to_dense[1]]
                stay = np.ones(len(nodes), bool)
                stay[to_dense[1]] = False
                nodes, states, origin = nodes[stay], states[stay], origin[stay]
                found.extend(_walk_dense(walk, trie, dense_origins, dense_states, d + 1))
            if kernel is not None:
                found.extend(_walk_below_native(kernel, walk, trie, origin, nodes, states, d,
                                                pending))
                break
    found.extend(pending.walk(walk, trie.runs))
    return found


class _PendingRuns:
    """(origin, token, state, position, end) pairs that a trie walk hands to runs: one
    ``_walk_runs`` walks them all at its end, so the per-pass cost of a run walk is paid once per
    trie walk, not once per level and per loop set that handed pairs over (a key position's
    walk handed over ~25 batches)."""

    def __init__(self):
        self.columns: List[Tuple[np.ndarray, ...]] = []

    def add(self, origin, tokens, state, position, end) -> None:
        if len(tokens):
            self.columns.append((origin, tokens, state, position, end))

    def walk(self, walk: "VocabularyWalk", runs: RunBreaks):
        if not self.columns:
            return ()
        origin, tokens, state, position, end = (
            np.concatenate([c[k] for c in self.columns]) for k in range(5))
        self.columns = []
        # (fresh arrays: _walk_runs may move the positions in place)
        return _walk_runs(walk, runs, origin, tokens, state, position, end)


def _walk_tokens(trie: TokenTrie, origin: np.ndarray, states: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray, depth: int, pending: "_PendingRuns") -> None:
    """The tokens [lo, hi) below prefixes of length ``depth`` reached in ``states``, one
    (origin, token) pair each, handed to ``pending`` (walked to their ends by ``_walk_runs``)."""
    counts = hi - lo
    tokens = concatenated_ranges(lo, counts)
    origin = np.repeat(origin, counts)
    state = np.repeat(states.astype(np.intp), counts)  # intp: indexing with it casts nothing
    if trie.has_duplicates:  # a repeated token takes its twin's result later
        single = trie.duplicate_of[tokens] < 0
        tokens, origin, state = tokens[single], origin[single], state[single]
    pending.add(origin, tokens, state, trie.token_offsets[tokens] + depth,
                trie.token_ends[tokens])


def _walk_whole(walk, trie: TokenTrie, origin: int, state: int, pending: "_PendingRuns"):
    """Every token from a start ``state`` that loops with few broken tokens
    (``RunBreaks.mostly_whole``): the whole vocabulary as one range of ``_walk_whole_ranges``."""
    return _walk_whole_ranges(walk, trie, np.array([origin]), np.array([state]),
                              np.array([0]), np.array([trie.num_tokens]), pending)


def _whole_below(walk, trie: TokenTrie, states: np.ndarray, positions: np.ndarray
                 ) -> np.ndarray:
    """bool per first-byte prefix (level 1) reached in ``states``: does its state loop, with
    few broken tokens, on a set that holds the prefix's (ASCII) byte? Then the tokens below
    it are the key's whole and broken tokens in its range (``_walk_whole_below``). Only
    states that many first bytes reach are asked for their loops here (a string's state is
    reached by every letter); the others are found looping one level down, if they do."""
    reached, counts = np.unique(states, return_counts=True)
    walk.note_loops(reached[counts >= WHOLE_BELOW_MIN_PREFIXES])
    key_ids = walk.skip_ids[states]
    out = np.zeros(len(states), dtype=bool)
    for key_id in np.unique(key_ids[key_ids != NO_LOOP]).tolist():
        if not trie.runs.mostly_whole(walk.loop_keys[key_id], trie):
            continue
        byte_values = trie.level_byte[1][positions]
        out |= (key_ids == key_id) & walk.loop_bytes[key_id][byte_values] & (byte_values < 0x80)
    return out


def _walk_whole_below(walk, trie: TokenTrie, origin: np.ndarray, states: np.ndarray,
                      positions: np.ndarray, pending: "_PendingRuns"):
    """The tokens below first-byte prefixes whose state loops on their byte (``_whole_below``):
    their ranges of ``_walk_whole_ranges`` (the prefix's byte lies inside the run)."""
    return _walk_whole_ranges(walk, trie, origin, states, *trie.subtree(1, positions),
                              pending)


def _walk_whole_ranges(walk, trie: TokenTrie, origin: np.ndarray, states: np.ndarray,
                       lo: np.ndarray, hi: np.ndarray, pending: "_PendingRuns"):
    """The sorted tokens [lo, hi) of each origin, in a looping state whose run their bytes so
    far did not leave: a token inside one run from its first byte ends in that state as it is
    (a slice of the loop set's whole tokens, no copy); the others go to ``pending``, to be
    walked from their first break (``_walk_runs``)."""
    key_ids = walk.skip_ids[states]
    for key_id in np.unique(key_ids).tolist():
        chosen = np.flatnonzero(key_ids == key_id)
        whole, broken, first_break = trie.runs.whole_tokens(walk.loop_keys[key_id], trie)
        starts, stops = np.searchsorted(whole, lo[chosen]), np.searchsorted(whole, hi[chosen])
        for i, a, b in zip(chosen.tolist(), starts.tolist(), stops.tolist()):
            if b > a:
                yield int(origin[i]), whole[a:b], int(states[i])
        a, b = np.searchsorted(broken, lo[chosen]), np.searchsorted(broken, hi[chosen])
        counts = b - a
        picked = concatenated_ranges(a, counts)
        if len(picked):
            tokens = broken[picked]
            pending.add(np.repeat(origin[chosen], counts), tokens,
                        np.repeat(states[chosen].astype(np.intp), counts),
                        first_break[picked], trie.token_ends[tokens])


def _walk_runs(walk, runs: RunBreaks, origin: np.ndarray, tokens: np.ndarray,
               state: np.ndarray, position: np.ndarray, end: np.ndarray):
    """(origin, token) pairs in ``state`` at byte ``position`` of the token, walked to the
    token's ``end``: a pair whose state loops jumps to the first byte outside its loop set,
    any other pair reads one byte. Yields (origin, token, final state) for the tokens that
    survive. By the C kernel (``_walk_native``) where it is built, else in numpy
    (``_walk_runs_numpy``): the same pairs with the same final states."""
    kernel = _pair_kernel()
    if kernel is None:  # (intp states index without a cast; int64 positions move in place)
        return _walk_runs_numpy(walk, runs, origin, tokens, state.astype(np.intp, copy=False),
                                position.astype(np.int64, copy=False), end)
    return _walk_native(kernel, walk, runs, runs.data, runs.addresses(), origin, tokens,
                        state, position, end, use_runs=True)


# gxg_walk_pairs (csrc/vocab_walk.c): its arguments (n, 13 arrays, use_runs) and outcomes
WALK_PAIRS_ARGS = (ctypes.c_int64,) + (ctypes.c_void_p,) * 13 + (ctypes.c_int32,)
WALK_FINISHED, WALK_DEAD, WALK_UNKNOWN, WALK_NEW_LOOP = range(4)


def _pair_kernel():
    """``gxg_walk_pairs``, or None where the C kernels are not built (``gxg.native``)."""
    return native.function("vocab_walk.c", "gxg_walk_pairs", WALK_PAIRS_ARGS)


def _walk_native(kernel, walk, runs: Optional[RunBreaks], data: np.ndarray,
                 byte_addresses: Tuple[int, int, int], origin: np.ndarray, tokens: np.ndarray,
                 state: np.ndarray, position: np.ndarray, end: np.ndarray, use_runs: bool):
    """Pairs walked by ``gxg_walk_pairs`` (csrc/vocab_walk.c), skipping runs when
    ``use_runs`` (``runs``: the vocabulary's ``RunBreaks``, whose break tables are read where
    built; ``byte_addresses``: the addresses of ``data`` and of its UTF-8 marks): each pair is
    walked to its end in C with the tables as they are; a pair that needs a transition not
    computed yet, or that met a state looping for the first time, stops there, and is walked
    again once the table has it (``transitions``, ``note_loops``: the Python steps, for all
    such pairs at once). Yields (origin, token, final state) as ``_walk_runs`` does. The caller
    holds the walk (one walk at a time), so the tables passed stay valid."""
    n = len(tokens)
    arrays = []  # the kernel moves state and position in place: copies, in reused buffers
    for name, values, dtype in (("pair_state", state, np.int32),
                                ("pair_position", position, np.int64),
                                ("pair_end", end, np.int64), ("pair_status", None, np.uint8)):
        buffer, address = c_buffers().get(name, n, dtype)
        if values is not None:
            np.copyto(buffer[:n], values, casting="unsafe")
        arrays.append((buffer[:n], address))
    (state, state_at), (position, position_at), (end, end_at), (status, status_at) = arrays
    del arrays
    while n:
        compile_budget.check("the vocabulary walk")
        kernel(n, state_at, position_at, end_at, status_at, *walk.c_tables(runs),
               *byte_addresses, int(use_runs))
        finished = np.flatnonzero(status == WALK_FINISHED)
        if len(finished):
            yield origin[finished], tokens[finished], state[finished]
        again = np.flatnonzero(status >= WALK_UNKNOWN)
        if not len(again):
            return
        origin, tokens, state = origin[again], tokens[again], state[again]
        position, end, status = position[again], end[again], status[again]
        unknown = status == WALK_UNKNOWN
        if unknown.any():
            walk.transitions(state[unknown], data[position[unknown]])
        if not unknown.all():
            walk.note_loops(state[~unknown])
        n = len(tokens)
        state_at, position_at, end_at, status_at = (
            a.ctypes.data for a in (state, position, end, status))


# gxg_walk_trie (csrc/vocab_walk.c): its arguments, item kinds and the rows of its trie table
WALK_TRIE_ARGS = ((ctypes.c_int64,) + (ctypes.c_void_p,) * 5 + (ctypes.c_int64,)
                  + (ctypes.c_void_p,) * 11 + (ctypes.c_int32,) + (ctypes.c_void_p,) * 17)
ITEM_ARRIVED, ITEM_FOUND, ITEM_UNKNOWN, ITEM_NEW_LOOP = range(4)
ITEM_DTYPES = (np.int64, np.int32, np.int32, np.uint8)  # an item: origin, node, state, kind
C_STACK_ROOM: Optional[int] = None  # the C trie walk's stack (None: room for the deepest walk)
# the work of one gxg_walk_trie call (items, children, tokens below looping prefixes): ~10-30
# ms, so that a long walk checks the compile budget between calls as the numpy levels do
C_WORK_PER_CALL = 1 << 22
TRIE_BYTE = FlatTrie.ROWS.index("byte")


def _trie_kernel():
    """``gxg_walk_trie``, or None where the C kernels are not built (``gxg.native``)."""
    return native.function("vocab_walk.c", "gxg_walk_trie", WALK_TRIE_ARGS)


def _walk_below_native(kernel, walk, trie: TokenTrie, origin: np.ndarray, nodes: np.ndarray,
                       states: np.ndarray, depth: int, pending: "_PendingRuns"):
    """The trie below prefixes of length ``depth`` (positions ``nodes`` of that level, reached
    in ``states``; their own tokens found already), walked by ``gxg_walk_trie``: depth first
    in C with the tables as they are (below a looping prefix, its tokens as pair walks). An
    item that needs a transition not computed yet, or a state's loops, waits; the Python steps
    (``transitions``, ``note_loops``) run for all of them at once, and the next call goes on
    from there. Pairs whose walk below a looping prefix stopped go to ``pending``. Yields
    (origin, token, state) parts, as ``walk_trie_parts``' levels do."""
    flat, buffers = trie.flat(), c_buffers()
    items = (np.asarray(origin, np.int64), (flat.offset[depth] + nodes).astype(np.int32),
             np.asarray(states, np.int32), np.full(len(nodes), ITEM_FOUND, np.uint8))
    # <= 256 children pushed per level; at least 256 (an item's children), or no progress
    stack_capacity = max(256, C_STACK_ROOM or 256 * (trie.max_depth + 2))
    room = trie.num_tokens + 1  # what one item can add: its token and the tokens below it
    stack = tuple(buffers.get(f"stack_{k}", stack_capacity, dtype)[1]
                  for k, dtype in enumerate(ITEM_DTYPES))
    sizes, sizes_at = buffers.get("sizes", 3, np.int64)
    capacity, capacity_at = buffers.get("capacity", 5, np.int64)
    while len(items[0]):
        compile_budget.check("the vocabulary walk")
        blocked_capacity = 2 * stack_capacity + len(items[0]) + 512
        capacity[:5] = (room, blocked_capacity, room, stack_capacity, C_WORK_PER_CALL)
        found = [buffers.get(f"found_{k}", room, dtype)
                 for k, dtype in enumerate((np.int64, np.int64, np.int32))]
        pairs = [buffers.get(f"pairs_{k}", room, dtype)
                 for k, dtype in enumerate((np.int64, np.int64, np.int32, np.int64))]
        blocked = [buffers.get(f"blocked_{k}", blocked_capacity, dtype)
                   for k, dtype in enumerate(ITEM_DTYPES)]
        kernel(len(items[0]), *(a.ctypes.data for a in items), flat.addresses[0],
               flat.num_nodes, *flat.addresses[1:3], *walk.c_tables(trie.runs),
               *flat.addresses[3:],
               RUNS_FROM_LEVEL, capacity_at, sizes_at,
               *(address for _, address in found + blocked + pairs), *stack)
        found, pairs, blocked = ([array for array, _ in kept] for kept in (found, pairs, blocked))
        num_found, num_blocked, num_pairs = sizes[:3].tolist()
        if num_found:
            yield found[0][:num_found], found[1][:num_found], found[2][:num_found]
        if num_pairs:
            tokens = pairs[1][:num_pairs]
            pending.add(pairs[0][:num_pairs], tokens, pairs[2][:num_pairs],
                        pairs[3][:num_pairs], trie.token_ends[tokens])
        origin, nodes, states, kinds = (a[:num_blocked] for a in blocked)
        unknown = np.flatnonzero(kinds == ITEM_UNKNOWN)
        if len(unknown):  # the child's transition, then it has arrived (unless dead)
            targets = walk.transitions(states[unknown], flat.table[TRIE_BYTE][nodes[unknown]])
            looped = targets == states[unknown]
            if looped.any():
                walk.note_loops(targets[looped])
            states[unknown] = targets
            kinds[unknown] = ITEM_ARRIVED
        new_loops = kinds == ITEM_NEW_LOOP
        if new_loops.any():
            walk.note_loops(states[new_loops])
            kinds[new_loops] = ITEM_ARRIVED
        alive = np.flatnonzero(states != DEAD)
        items = (origin[alive], nodes[alive], states[alive], kinds[alive])
        # nothing here refers to this call's buffers any more: the next call may reuse them
        del found, pairs, blocked, origin, nodes, states, kinds


def _walk_runs_numpy(walk, runs: RunBreaks, origin: np.ndarray, tokens: np.ndarray,
                     state: np.ndarray, position: np.ndarray, end: np.ndarray):
    """``_walk_runs`` in numpy: a looping pair jumps to its next break
    (``RunBreaks.next_break``); the pairs go together, one numpy pass per step. Inside a
    string almost every token ends in its first jump."""
    while len(tokens):
        compile_budget.check("the vocabulary walk")
        skip = walk.skip_ids[state]
        first, last = int(skip.min()), int(skip.max())
        if first == last != NO_LOOP:  # one loop set for all: no selection
            np.minimum(runs.next_break(walk.loop_keys[first], position, tokens), end,
                       out=position)
        elif last != NO_LOOP:
            for key_id in np.flatnonzero(np.bincount(skip[skip != NO_LOOP])).tolist():
                chosen = np.flatnonzero(skip == key_id)
                found = runs.next_break(walk.loop_keys[key_id], position[chosen],
                                        tokens[chosen])
                position[chosen] = np.minimum(found, end[chosen])
        done = position == end
        finished = np.flatnonzero(done)  # index arrays: a boolean mask selects slower
        if len(finished):
            yield origin[finished], tokens[finished], state[finished]
            if len(finished) == len(tokens):
                return
            going = np.flatnonzero(~done)
            tokens, origin, state = tokens[going], origin[going], state[going]
            position, end = position[going], end[going]
        before = state
        state = walk.transitions(state, runs.data[position]).astype(np.intp)
        position += 1
        looped = state == before
        if looped.any():
            walk.note_loops(state[looped])
        alive = np.flatnonzero(state)  # DEAD == 0
        if len(alive) < len(state):
            tokens, origin, state = tokens[alive], origin[alive], state[alive]
            position, end = position[alive], end[alive]


def _dense_origins(trie: TokenTrie, num_starts: int, origin: np.ndarray, nodes: np.ndarray,
                   candidates: np.ndarray, depth: int) -> Tuple[np.ndarray, Tuple[np.ndarray,
                                                                                np.ndarray]]:
    """The origins alive on more than DENSE_FRACTION of level ``depth`` among the
    ``candidates`` (bool per live prefix), and which candidates are theirs: (row of the dense
    origin, index of the prefix)."""
    per_origin = np.bincount(origin[candidates], minlength=num_starts)
    dense_origins = np.flatnonzero(per_origin > DENSE_FRACTION * len(trie.level_byte[depth]))
    if not len(dense_origins):
        return dense_origins, (dense_origins, dense_origins)
    row_of = np.full(num_starts, -1, np.int64)
    row_of[dense_origins] = np.arange(len(dense_origins))
    rows = row_of[origin]
    picked = np.flatnonzero(candidates & (rows >= 0))
    return dense_origins, (rows[picked], picked)


def _walk_dense(walk, trie: TokenTrie, origins: np.ndarray, states: np.ndarray, depth: int):
    """Levels ``depth`` .. max of the trie for the given origins, whole levels at a time;
    ``states`` [origins, size of level depth-1] holds their states one level up."""
    for d in range(depth, trie.max_depth + 1):
        compile_budget.check("the vocabulary walk")
        keys = states[:, trie.level_parent[d]]  # int32: state * 256 stays below 2**31
        keys <<= 8
        keys |= trie.level_byte[d]
        states = walk.lookup(keys)
        ends = trie.level_end_positions[d]
        if len(ends):
            at_ends = states[:, ends]
            rows, columns = np.nonzero(at_ends)
            yield origins[rows], trie.level_token_end[d][ends[columns]], at_ends[rows, columns]
        if d % 8 == 0 and not states.any():
            return


def add_repeats(trie, origin, tokens, values):
    """Each repeated token (``TokenTrie.duplicate_of``) added with its earlier twin's value
    (final state, class ...), for every origin that has the twin."""
    repeats = np.flatnonzero(trie.duplicate_of >= 0)
    n = trie.num_tokens
    keys = origin * n + tokens
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    origins = np.unique(origin)
    wanted = (origins[:, None] * n + trie.duplicate_root[repeats][None, :]).ravel()
    at = np.minimum(np.searchsorted(sorted_keys, wanted), max(len(keys) - 1, 0))
    hit = (sorted_keys[at] == wanted) if len(keys) else np.zeros(len(wanted), bool)
    return (np.concatenate([origin, np.repeat(origins, len(repeats))[hit]]),
            np.concatenate([tokens, np.tile(repeats, len(origins))[hit]]),
            np.concatenate([values, values[order[at[hit]]]]))
