"""Walk many tokens from many configurations at once, vectorised over the vocabulary.

In:  a ``StackWalker`` (the PDA's moves) and the sorted vocabulary of a ``TokenizerInfo``
     (``token_bytes`` / ``token_offsets`` / ``common_prefix_len``, in sorted order).
Out: * ``VocabularyWalk``: configurations interned as small integers, with their byte
       transitions memoised in a dense table ``transition[state, byte]`` filled lazily (only a
       (state, byte) pair never seen before runs the Python closure); ``walk_pairs`` walks a
       list of (state, token) pairs level by level (byte position d), one numpy gather per
       level, dropping a pair at the first byte that kills it.
     * ``TokenTrie`` + ``walk_trie``: the same walk over the distinct token prefixes, so a
       prefix shared by many tokens is walked once and a rejected prefix skips its subtree
       (the mask cache walks the whole vocabulary from every node this way).

The transition table is a cache owned by the ``VocabularyWalk`` (one per automaton and walker
mode); it only grows.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from gxg import compile_budget
from gxg.compiler.stack_walk import EMPTY_CONFIG, Config, StackWalker

DEAD = 0
UNKNOWN = -1
MAX_STATES = 1 << 23  # keys state * 256 + byte fit in int32


class VocabularyWalk:
    def __init__(self, walker: StackWalker, token_bytes: Optional[np.ndarray] = None,
                 token_offsets: Optional[np.ndarray] = None):
        self.walker = walker
        if token_bytes is not None:
            self.token_bytes = np.ascontiguousarray(token_bytes, dtype=np.uint8)
            self.token_offsets = np.ascontiguousarray(token_offsets, dtype=np.int64)
            self.token_lengths = np.diff(self.token_offsets)
        byte_class = walker.automaton.byte_class
        self._byte_class = byte_class.tolist()
        self._byte_class_array = byte_class
        self._next_node = walker.automaton.next_node
        self._class_members = [np.nonzero(byte_class == c)[0]
                               for c in range(int(byte_class.max()) + 1)]
        self.configs: List[Config] = [EMPTY_CONFIG]
        self._ids: Dict[Config, int] = {EMPTY_CONFIG: DEAD}
        self._transition = np.full(64 * 256, UNKNOWN, dtype=np.int32)  # [state * 256 + byte]
        self._transition[DEAD * 256: DEAD * 256 + 256] = DEAD

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
            self._mark_dead_bytes(state, config)
        return state

    def _mark_dead_bytes(self, state: int, config: Config) -> None:
        """Bytes that no element of the configuration can scan lead to DEAD: fill them in
        one assignment instead of running the closure for each."""
        tops = [stack[-1] for stack, _, _ in config if stack]
        if not tops or -1 in tops:  # END only (nothing scans), or ANYTHING (everything does)
            if not tops:
                self._transition[state * 256: state * 256 + 256] = DEAD
            return
        scannable = (self._next_node[tops] >= 0).any(axis=0)
        dead = ~scannable[self._byte_class_array]
        self._transition[state * 256 + np.flatnonzero(dead)] = DEAD

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
            missing = result == UNKNOWN
            # A step depends on the byte only through its class: compute one byte per
            # (state, class) and fill the whole class.
            members = self._class_members
            for key in np.unique(keys[missing]).tolist():
                if self._transition[key] != UNKNOWN:
                    continue  # filled with an earlier byte of the same class
                state, byte = divmod(key, 256)
                target = self.intern(self.walker.step(self.configs[state], byte))
                self._transition[state * 256 + members[self._byte_class[byte]]] = target
            result = self._transition[keys]
        return result

    # ------------------------------------------------------------------ the walk
    def walk_pairs(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Final state of each (state, sorted-token index) pair after all the token's bytes."""
        final = np.asarray(states, dtype=np.int32).copy()
        tokens = np.asarray(tokens, dtype=np.int64)
        live = np.nonzero((self.token_lengths[tokens] > 0) & (final != DEAD))[0]
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
    """

    def __init__(self, token_bytes: np.ndarray, token_offsets: np.ndarray,
                 common_prefix_len: np.ndarray):
        offsets = np.asarray(token_offsets, dtype=np.int64)
        lengths = np.diff(offsets)
        cpl = np.asarray(common_prefix_len, dtype=np.int64)
        n = len(lengths)
        self.num_tokens = n
        self.token_lengths = lengths                   # int64 [N] bytes of each sorted token
        duplicate = cpl >= lengths
        self.duplicate_of = np.where(duplicate, np.arange(n) - 1, -1)
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
        # Dense walks read every node of a level: its parent (a position in the level above)
        # and the positions that end a token.
        self.level_parent = [np.zeros(0, np.int64)]
        self.level_end_positions = [np.zeros(0, np.int64)]
        for d in range(1, max_depth + 1):
            lo, hi = self.level_child_lo[d - 1], self.level_child_hi[d - 1]
            self.level_parent.append(np.repeat(np.arange(len(lo)), hi - lo))
            self.level_end_positions.append(np.flatnonzero(self.level_token_end[d] >= 0))


DENSE_FRACTION = 0.25  # an origin alive on this share of a level walks whole levels


def walk_trie(walk: "VocabularyWalk", trie: TokenTrie, starts: np.ndarray):
    """Walk every token from each start state at once, through the trie.

    Returns (origin, token, state) arrays: for every start ``origin`` (an index into
    ``starts``) and every sorted token index ``token`` whose bytes all survive from it, the
    final ``state``. Tokens missing for an origin were rejected.

    Two regimes, one numpy pass per byte level each: *sparse* — the live (origin, prefix)
    pairs only, expanding each live prefix into its children (a rejected prefix costs nothing
    below it); *dense* — for an origin that keeps most prefixes alive (e.g. inside a string),
    whole levels at once, each prefix reading its parent's state, which needs far fewer passes
    per prefix. An origin switches to dense after level 2 when it is alive on more than
    DENSE_FRACTION of that level.
    """
    starts = np.asarray(starts, dtype=np.int32)
    origin = np.arange(len(starts), dtype=np.int64)
    nodes = np.zeros(len(starts), np.int64)
    states = starts.copy()
    found = []
    dense_origins, dense_states = np.zeros(0, np.int64), None
    for d in range(1, trie.max_depth + 1):
        compile_budget.check("the vocabulary walk")
        lo = trie.level_child_lo[d - 1][nodes]
        counts = trie.level_child_hi[d - 1][nodes] - lo
        ends_cumulative = np.cumsum(counts)
        total = int(ends_cumulative[-1]) if len(counts) else 0
        if total == 0:
            break
        # positions lo..hi-1 of every live parent, concatenated
        children = np.repeat(lo - (ends_cumulative - counts), counts)
        children += np.arange(total)
        targets = walk.transitions(np.repeat(states, counts), trie.level_byte[d][children])
        live = np.flatnonzero(targets)  # DEAD == 0
        nodes, states = children[live], targets[live]
        origin = np.repeat(origin, counts)[live]
        ends = trie.level_token_end[d][nodes]
        is_end = ends >= 0
        found.append((origin[is_end], ends[is_end], states[is_end]))
        if d == 2 and len(nodes):
            level_size = len(trie.level_byte[d])
            per_origin = np.bincount(origin, minlength=len(starts))
            dense_origins = np.flatnonzero(per_origin > DENSE_FRACTION * level_size)
            if len(dense_origins):
                row_of = np.full(len(starts), -1, np.int64)
                row_of[dense_origins] = np.arange(len(dense_origins))
                rows = row_of[origin]
                to_dense = rows >= 0
                dense_states = np.zeros((len(dense_origins), level_size), np.int32)
                dense_states[rows[to_dense], nodes[to_dense]] = states[to_dense]
                nodes, states, origin = nodes[~to_dense], states[~to_dense], origin[~to_dense]
                found.extend(_walk_dense(walk, trie, dense_origins, dense_states, d + 1))
    if not found:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0, np.int32)
    origin = np.concatenate([f[0] for f in found])
    tokens = np.concatenate([f[1] for f in found])
    final = np.concatenate([f[2] for f in found]).astype(np.int32)
    duplicates = np.nonzero(trie.duplicate_of >= 0)[0]
    if len(duplicates):
        origin, tokens, final = _add_duplicates(trie, duplicates, origin, tokens, final)
    return origin, tokens, final


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


def _add_duplicates(trie, duplicates, origin, tokens, final):
    """A repeated token ends where its earlier twin ends (chains resolve in sorted order)."""
    lookup = {}
    for o, tok, s in zip(origin.tolist(), tokens.tolist(), final.tolist()):
        lookup[(o, tok)] = s
    extra = []
    origins = sorted(set(origin.tolist()))
    for i in duplicates.tolist():
        twin = int(trie.duplicate_of[i])
        for o in origins:
            if (o, twin) in lookup:
                lookup[(o, i)] = lookup[(o, twin)]
                extra.append((o, i, lookup[(o, twin)]))
    if not extra:
        return origin, tokens, final
    extra_o, extra_t, extra_s = (np.array(column) for column in zip(*extra))
    return (np.concatenate([origin, extra_o]), np.concatenate([tokens, extra_t]),
            np.concatenate([final, extra_s.astype(np.int32)]))
