"""Device arena: the compiled grammars of one tokenizer packed into preallocated device buffers
(stage 4 of the pipeline).

In:  ``CompiledGrammar``s of one ``TokenizerInfo`` (``register`` / ``unregister``).
Out: one byte tensor on one device (``blob``, the ops' ``arena``; W rows) whose buffers — flat
     views, attributes of the arena — never move (graphs captured earlier stay valid), and a
     handle (grammar id) per registered grammar. Node ids in the runtime state are *local* to
     a grammar (the CPU reference and the kernels hold the same numbers); a
     kernel adds ``grammar_node_base[g]`` to index the per-node tables.

Buffers (names, dtypes and order declared in ``gxg.layout``, group "arena"; ``G`` grammar
slots, ``N`` node capacity, ``V`` vocab_size, ``W = ceil(V/32)``):

  vocabulary, shared by every grammar
    token_bytes        uint8  [T]      bytes of the sorted vocabulary, concatenated
    token_offsets      int32  [S+1]    sorted token i = token_bytes[off[i]:off[i+1]]
    sorted_token_ids   int32  [S]      token id of sorted index i
    id_offsets         int32  [V+1]    bytes of token id t = id_bytes[id_off[t]:id_off[t+1]]
    id_bytes           uint8  [T']     (empty for special and padding ids)
    is_stop            int8   [V]      the tokenizer's stop tokens
    stop_words         int32  [W]      the stop tokens as a bitmask row
    ids_by_length      int32  [V]      token ids by byte length, longest first (token budgets)
  per grammar slot g
    grammar_node_base  int32  [G]      first row of the grammar's nodes in the per-node tables
    grammar_root       int32  [G]      local start node of the root rule
    grammar_byte_class int32  [G, 256] byte -> class
    grammar_classes    int32  [G]      number of byte classes C_g
    grammar_max_rise   int32  [G]      bound on one byte's rise of a stack's completion
                                       distance (-1: none)
    grammar_token_steps int32 [G]      what a token's end adds to accept: bit TOKEN_MOVES (the
                                       grammar has token nodes), bit COUNT_TOKENS (it has
                                       token-budget counters); 0: nothing
    grammar_nodes      int32  [G]      number of nodes
    grammar_generation int32  [G]      bumped by every register of the id: the CPU kernels'
                                       cached host tables of the id are current while it is
                                       unchanged (``gxg.ops.arena_tables``)
  per node (row = grammar_node_base[g] + local node)
    node_next          int32  [N]      offset of the node's C_g scan targets in ``next_flat``
    next_flat          int32  [X]      local target node, -1 = no edge
    node_flags         int32  [N]      bit 0 final, bit 1 scannable, bit 2 pure return
    node_ref_lo/hi     int32  [N]      range of the node's reference edges in ref_*
    ref_start          int32  [E]      local start node of the referenced rule
    ref_return         int32  [E]      local return node
    node_row           int32  [N]      row of ``accept_rows`` (-1: the node cannot scan;
                                       ROW_UNBUILT: a scannable node whose entry is not in
                                       the arena yet, ``register(lazy=True)``: the fill walks
                                       every token from it)
    node_unc_lo/hi     int32  [N]      range of the node's uncertain tokens
    node_distance      int32  [N]      fewest bytes to complete the node's rule (token budgets;
                                       ``gxg.compiler.completion``); with grammar_max_rise,
                                       written at ``register`` or, for a registration without
                                       them, by ``write_distances`` before a budget reads them
    node_rule          int32  [N]      local rule id (rules number their nodes contiguously,
                                       start node first: the CPU kernels' walkers read it)
    node_token_next    int32  [N]      a token node's move target (local), -1 for other nodes;
                                       a token is in the node's set iff its bit is set in the
                                       node's accept row (``gxg.compiler.automaton``)
    node_count_next    int32  [N]      a counter node's next counter (local; itself for the
                                       last), -1 for other nodes (``gxg.compiler.automaton``,
                                       token budgets)
  accept_rows          int32  [R, W]   dense accept rows (deduplicated per grammar)
  uncertain_tokens     int32  [U]      sorted-vocabulary indices
  second level (``ContextPairs``: a node's uncertain tokens given the node below it)
    node_pair_lo/hi    int32  [N]      the node's pairs
    pair_below         int32  [Q]      local node below (-1: the bottom)
    pair_acc_lo/hi     int32  [Q]      range of pair_acc_tokens: token ids accepted
    pair_unc_lo/hi     int32  [Q]      range of pair_unc_tokens: sorted indices still to walk
    pair_acc_tokens    int32  [A]
    pair_unc_tokens    int32  [U2]

Register copies a grammar's tables into free ranges of each buffer (first fit); unregister
returns them (for reuse once the steps queued before have run). When grammars have come and
gone so that a new one fits in the free entries of a buffer but in no single free range, the
registration first compacts that buffer: the other grammars' ranges move down, their pointing
fields shift, on the current stream (``_compact``; not from ``register_in_background``'s
stream, which gets ``ArenaFullError`` instead). A lazy registration
(``register(lazy=True)``) copies only the mask entries the grammar's cache holds already, so it
walks no vocabulary; ``complete_entries`` later swaps in the full entries (computed on any
thread with ``mask_entries``) between steps, on the stream that runs them. Registration and
unregistration may run on any thread (a lock guards the allocators and the id tables; the
device writes of a registration touch only its own ranges, so a registration may run beside
steps that use other grammars: ``GrammarBatch.register_in_background``). A buffer too small
raises ``ArenaFullError`` naming the buffer, what was needed and what is free. The buffers are
all that the ops know of the grammars: the CUDA kernels read them through the pointer table,
the CPU kernels rebuild their host tables from them.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from gxg import blobs, layout
from gxg.compiler.completion import NO_RISE_BOUND
from gxg.compiler.mask_cache import ContextPairs, KernelMaskLayout, kernel_layout
from gxg.grammar_compiler import CompiledGrammar
from gxg.layout import NodeFlag
from gxg.tokenizer import TokenizerInfo

# The arena's buffers in table order (the layout's "arena" group), packed in that order into the
# blob the ops receive (``DeviceArena.op_tensors()``).
ARENA_FIELDS = tuple(layout.names("arena"))
# Buffers built from the vocabulary (``_vocabulary_arrays``); the others are sized by the
# capacity and filled by ``register``. Empty entries of these start at FILL (else 0).
VOCABULARY_FIELDS = ("token_bytes", "token_offsets", "sorted_token_ids", "id_offsets",
                     "id_bytes", "is_stop", "stop_words", "ids_by_length")
FILL = {"next_flat": -1, "node_row": -1, "grammar_classes": 1, "node_token_next": -1,
        "node_count_next": -1}


def _bytes_per(dim: str) -> int:
    """Bytes one entry of dimension ``dim`` takes over the arena buffers indexed by it alone."""
    return sum(np.dtype(b.dtype).itemsize for b in map(layout.buffer, ARENA_FIELDS)
               if b.dims == (dim,))


class ArenaFullError(RuntimeError):
    """A grammar does not fit in the arena; the message names the buffer and the sizes."""


@dataclass(frozen=True)
class ArenaCapacity:
    max_grammars: int = 64
    nodes: int = 1 << 16
    next_entries: int = 1 << 21       # sum over nodes of their byte-class count
    ref_edges: int = 1 << 16
    accept_rows: int = 1024
    uncertain_tokens: int = 1 << 20
    pairs: int = 1 << 16
    pair_tokens: int = 1 << 20

    @staticmethod
    def to_hold(compiled_grammars, minimum: "ArenaCapacity" = None) -> "ArenaCapacity":
        """A capacity that holds all these grammars at once (at least ``minimum``, by default
        the default capacity)."""
        minimum = minimum or ArenaCapacity()
        need: Dict[str, int] = {}
        for compiled in compiled_grammars:
            for name, count in entry_counts(compiled).items():
                need[name] = need.get(name, 0) + count
        fields = {field: max(getattr(minimum, field), need.get(buffer, 0))
                  for field, buffer in _BUFFER_OF_CAPACITY.items()}
        fields["pair_tokens"] = max(fields["pair_tokens"], need.get("pair_unc", 0))
        return ArenaCapacity(max_grammars=max(minimum.max_grammars, len(compiled_grammars)),
                             **fields)


# ArenaCapacity field -> the buffer it sizes (pair_tokens sizes pair_acc and pair_unc alike)
_BUFFER_OF_CAPACITY = {"nodes": "nodes", "next_entries": "next_flat", "ref_edges": "refs",
                       "accept_rows": "accept_rows", "uncertain_tokens": "uncertain",
                       "pairs": "pairs", "pair_tokens": "pair_acc"}


@dataclass(frozen=True, eq=False)
class MaskEntries:
    """A grammar's mask entries as the arena lays them out: the kernels' layout of the built
    nodes and their context pairs; ``unbuilt`` (bool [num_nodes]) marks the scannable nodes
    left out, which the arena gives ``ROW_UNBUILT`` (their fills walk every token)."""
    layout: KernelMaskLayout
    pairs: ContextPairs
    unbuilt: np.ndarray

    @property
    def complete(self) -> bool:
        return not self.unbuilt.any()


def mask_entries(compiled: CompiledGrammar, lazy: bool = False) -> MaskEntries:
    """The entries to copy in. ``lazy=False``: every scannable node's (computing those the
    compiled grammar's cache lacks: the slow part of a registration, ~0.5 ms per node with
    Qwen's vocabulary). ``lazy=True``: only the entries the cache already holds, and the token
    nodes' (their sets, no walk), without context pairs; no vocabulary is walked."""
    a, cache, info = compiled.automaton, compiled.mask_cache, compiled.tokenizer_info
    if not lazy or cache.complete:
        return MaskEntries(compiled.kernel_layout, compiled.context_pairs,
                           np.zeros(a.num_nodes, dtype=bool))
    built = np.union1d(cache.computed_nodes(), a.token_nodes).astype(np.int32)
    unbuilt = a.is_scannable.copy()
    unbuilt[built] = False
    masks = kernel_layout(cache, a.num_nodes, info.sorted_token_index, info.vocab_size,
                          nodes=built)
    return MaskEntries(masks, ContextPairs.none(a.num_nodes), unbuilt)


# the buffers that hold mask entries (replaced when a lazy registration is completed)
ENTRY_BUFFERS = ("accept_rows", "uncertain", "pairs", "pair_acc", "pair_unc")

# Compaction (``DeviceArena._compact``) moves a grammar's range of an allocator: the arena
# buffers that range indexes move with it (by dimension; the pair tokens' two allocators share
# one), and the fields that hold positions in it shift by the move (allocator -> the allocator
# whose range holds those fields, and the fields). Every other field holds local values.
_MOVED_BUFFERS = {
    allocator: tuple(b.name for b in map(layout.buffer, ARENA_FIELDS) if b.dims[:1] == (dim,))
    for allocator, dim in (("nodes", "N"), ("next_flat", "X"), ("refs", "E"),
                           ("accept_rows", "R"), ("uncertain", "U"), ("pairs", "Q"))}
_MOVED_BUFFERS.update(pair_acc=("pair_acc_tokens",), pair_unc=("pair_unc_tokens",))
_POINTERS_INTO = {
    "next_flat": ("nodes", ("node_next",)),
    "refs": ("nodes", ("node_ref_lo", "node_ref_hi")),
    "accept_rows": ("nodes", ("node_row",)),        # only its rows >= 0 (-1, ROW_UNBUILT stay)
    "uncertain": ("nodes", ("node_unc_lo", "node_unc_hi")),
    "pairs": ("nodes", ("node_pair_lo", "node_pair_hi")),
    "pair_acc": ("pairs", ("pair_acc_lo", "pair_acc_hi")),
    "pair_unc": ("pairs", ("pair_unc_lo", "pair_unc_hi")),
}


def entry_counts(compiled: CompiledGrammar, entries: MaskEntries = None) -> Dict[str, int]:
    """Entries a compiled grammar takes in each arena buffer (with ``entries``: with those
    mask entries; default: every node's)."""
    a = compiled.automaton
    return {"nodes": a.num_nodes, "next_flat": a.num_nodes * a.num_classes,
            "refs": int(a.ref_offsets[-1]),
            **_entry_counts(entries or mask_entries(compiled))}


def _entry_counts(entries: MaskEntries) -> Dict[str, int]:
    masks, pairs = entries.layout, entries.pairs
    return {"accept_rows": masks.accept_rows.shape[0],
            "uncertain": int(masks.uncertain_tokens.shape[0]),
            "pairs": int(pairs.pair_below.shape[0]),
            "pair_acc": int(pairs.pair_acc_tokens.shape[0]),
            "pair_unc": int(pairs.pair_unc_tokens.shape[0])}


class _Ranges:
    """First-fit allocator of [start, end) ranges in a buffer of ``size`` elements."""

    def __init__(self, name: str, size: int, element_bytes: int):
        self.name, self.size, self.element_bytes = name, size, element_bytes
        self.free: List[Tuple[int, int]] = [(0, size)]

    def take(self, count: int) -> int:
        if count == 0:
            return 0
        start = self.fits(count)
        if start is None:
            largest = max((end - start for start, end in self.free), default=0)
            raise ArenaFullError(
                f"arena buffer '{self.name}' is full: the grammar needs {count} entries "
                f"({count * self.element_bytes} bytes) in one range, the largest free range "
                f"has {largest} and {self.size - self.used} of {self.size} are free; create the "
                f"GrammarBatch/DeviceArena with a larger capacity")
        i = next(i for i, (lo, _) in enumerate(self.free) if lo == start)
        end = self.free[i][1]
        self.free[i] = (start + count, end)
        if start + count == end:
            del self.free[i]
        return start

    def fits(self, count: int) -> Optional[int]:
        """The start of the first free range that holds ``count`` entries, or None."""
        for start, end in self.free:
            if end - start >= count:
                return start
        return None

    def give_back(self, start: int, count: int) -> None:
        if count == 0:
            return
        self.free.append((start, start + count))
        self.free.sort()
        merged: List[Tuple[int, int]] = []
        for lo, hi in self.free:
            if merged and merged[-1][1] == lo:
                merged[-1] = (merged[-1][0], hi)
            else:
                merged.append((lo, hi))
        self.free = merged

    @property
    def used(self) -> int:
        return self.size - sum(end - start for start, end in self.free)


@dataclass
class _Registration:
    compiled: CompiledGrammar
    ranges: Dict[str, Tuple[int, int]]   # buffer name -> (start, count)
    nbytes: int
    unbuilt: int = 0                     # scannable nodes without their entry (lazy)
    written: Optional[torch.cuda.Event] = None  # its last writes are done after this event
    distances: bool = True               # its completion distances are written


def canonical_device(device) -> torch.device:
    """``device`` as the tensors on it report theirs: "cuda" becomes "cuda:<current index>",
    so that ``tensor.device == batch.device`` holds for tensors made with either spelling."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


class _Writes:
    """A registration's int32 writes into the arena blob, gathered: ``flush`` makes them with
    one host-to-device copy of the values and their positions and one scatter (the ~40 small
    copies and scalar writes they replace cost ~1.5 ms a bind on an H100 host)."""

    def __init__(self, arena: "DeviceArena"):
        self.arena = arena
        self.values: List[np.ndarray] = []
        self.positions: List[np.ndarray] = []

    def put(self, tensor: torch.Tensor, start: int, values) -> None:
        """Write ``values`` at flat element ``start`` of ``tensor`` (an int32 buffer)."""
        values = np.ascontiguousarray(values, dtype=np.int32).reshape(-1)
        if len(values):
            first = (tensor.data_ptr() - self.arena.blob.data_ptr()) // 4 + start
            self.values.append(values)
            self.positions.append(np.arange(first, first + len(values), dtype=np.int64))

    def flush(self) -> None:
        if not self.values:
            return
        device = self.arena.device
        values = torch.from_numpy(np.concatenate(self.values)).to(device)
        positions = torch.from_numpy(np.concatenate(self.positions)).to(device)
        self.arena.blob_words.index_copy_(0, positions, values)
        self.values, self.positions = [], []


class DeviceArena:
    def __init__(self, tokenizer_info: TokenizerInfo, device="cuda",
                 capacity: ArenaCapacity = ArenaCapacity()):
        self.tokenizer_info = tokenizer_info
        self.device = canonical_device(device)
        self.capacity = capacity
        self.vocab_size = tokenizer_info.vocab_size
        self.words = layout.bitmask_words(self.vocab_size)
        vocabulary = self._vocabulary_arrays()
        c = capacity
        g, n = c.max_grammars, c.nodes
        self._alloc = {
            "nodes": _Ranges("nodes", n, _bytes_per("N")),
            "next_flat": _Ranges("next_flat", c.next_entries, 4),
            "refs": _Ranges("refs", c.ref_edges, _bytes_per("E")),
            "accept_rows": _Ranges("accept_rows", c.accept_rows, 4 * self.words),
            "uncertain": _Ranges("uncertain", c.uncertain_tokens, 4),
            "pairs": _Ranges("pairs", c.pairs, _bytes_per("Q")),
            "pair_acc": _Ranges("pair_acc", c.pair_tokens, 4),
            "pair_unc": _Ranges("pair_unc", c.pair_tokens, 4),
        }
        #: The arena's dimension values (``gxg.layout.DIMS``; a batch adds its own).
        self.dims = {"G": g, "N": n, "X": c.next_entries, "E": c.ref_edges, "R": c.accept_rows,
                     "W": self.words, "U": c.uncertain_tokens, "Q": c.pairs,
                     "A": c.pair_tokens, "V": self.vocab_size,
                     "S": len(vocabulary["sorted_token_ids"]),
                     "T": len(vocabulary["token_bytes"]), "T_ID": len(vocabulary["id_bytes"])}
        # One byte tensor holds every buffer (the ops' ``arena``; W rows, so an op reads the
        # bitmask width from its shape); each buffer is an attribute viewing into it.
        self.blob, views = blobs.allocate("arena", self.dims, self.device, rows=self.words)
        # the blob as int32 words (every buffer starts 256-byte aligned): registrations write
        # through it (``_Writes``)
        flat = self.blob.view(-1)
        self.blob_words = flat[: flat.numel() - flat.numel() % 4].view(torch.int32)
        for name, view in views.items():
            if name in vocabulary:
                view.copy_(torch.tensor(vocabulary[name]))
            elif name in FILL:
                view.fill_(FILL[name])
            setattr(self, name, view)
        self._free_ids = list(range(g))
        self._generation = [0] * g  # grammar_generation's values (written, never read back)
        self._registered: Dict[int, _Registration] = {}
        self._by_compiled: Dict[int, int] = {}
        self._lock = threading.Lock()  # allocators and id tables (registration on any thread)
        # ranges given up (entries replaced, grammars unregistered) and the event after which
        # no queued kernel reads them (None: at once)
        self._retired: List[Tuple[Optional[torch.cuda.Event], Dict[str, Tuple[int, int]]]] = []

    # ------------------------------------------------------------------ vocabulary
    def _vocabulary_arrays(self) -> Dict[str, np.ndarray]:
        """The buffers built from the vocabulary, in their declared dtypes."""
        info = self.tokenizer_info
        special = set(info.special_token_ids)
        stops = set(info.stop_token_ids)
        decoded = info.decoded_vocab
        pieces = [b"" if (t in special and t not in stops) or t >= len(decoded) or t in stops
                  else decoded[t] for t in range(self.vocab_size)]
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        offsets = np.zeros(self.vocab_size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.frombuffer(b"".join(pieces), dtype=np.uint8)
        token_bytes = np.array(info.token_bytes, dtype=np.uint8)
        is_stop = np.zeros(self.vocab_size, dtype=np.int8)
        is_stop[list(stops)] = 1
        stop_words = np.zeros(self.words, dtype=np.uint32)
        for t in stops:
            stop_words[t >> 5] |= np.uint32(1 << (t & 31))
        arrays = {"token_bytes": token_bytes if len(token_bytes) else np.zeros(1, np.uint8),
                  "token_offsets": info.token_offsets,
                  "sorted_token_ids": info.sorted_token_ids,
                  "id_offsets": offsets, "ids_by_length": info.ids_by_length,
                  "id_bytes": data.copy() if len(data) else np.zeros(1, np.uint8),
                  "is_stop": is_stop, "stop_words": stop_words.view(np.int32)}
        assert set(arrays) == set(VOCABULARY_FIELDS)
        return {name: np.ascontiguousarray(value, dtype=layout.buffer(name).dtype)
                for name, value in arrays.items()}

    # ------------------------------------------------------------------ registration
    def register(self, compiled: CompiledGrammar, *, lazy: bool = False,
                 may_move: bool = True, distances: bool = True) -> int:
        """Copy a compiled grammar in (once: registering it again returns the same id).
        ``lazy=True`` copies only the mask entries the grammar's cache already holds (no
        vocabulary walk): the fills walk every token from the other nodes, exact but slower,
        until ``complete_entries`` copies the rest in (``unbuilt_nodes`` counts them).
        ``distances=False`` leaves out the completion distances of token budgets (~1 ms of
        Python at the median MaskBench schema, most of a lazy registration's host time):
        ``write_distances`` must copy them in before a fill with a budget reads them (a budget
        on a grammar without them would narrow its masks wrongly). ``GrammarBatch`` does so
        when it is given its first budget; registering the grammar again with them (the
        default) does too.
        ``may_move``: when no free range is large enough but enough is free, compact the
        arena first (``_compact``: the other grammars move, on the current stream); pass False
        on a stream other than the one that runs the steps."""
        if compiled.tokenizer_info is not self.tokenizer_info and \
                compiled.tokenizer_info.vocab_size != self.vocab_size:
            raise ValueError("the compiled grammar was built for another tokenizer")
        with self._lock:
            known = self._known(compiled)
            lacking = known is not None and distances and not self._registered[known].distances
        if lacking:  # registered before without them (a batch with no budget then)
            self.write_distances()
        if known is not None:
            return known
        # the mask entries (and the second level) are the slow part: outside the lock, so that
        # a registration on another thread does not hold up this one
        entries = mask_entries(compiled, lazy)
        sizes = entry_counts(compiled, entries)
        if distances:
            compiled.completion  # (the token budgets' distances, likewise)
        with self._lock:
            known = self._known(compiled)
            if known is not None:
                return known
            if not self._free_ids:
                raise ArenaFullError(f"the arena holds at most {self.capacity.max_grammars} "
                                     "grammars; unregister one or raise max_grammars")
            ranges = self._take(sizes, may_move)
            gid = self._free_ids.pop(0)
            writes = _Writes(self)
            self._write(gid, compiled, ranges, writes)
            if distances:
                self._write_distances(gid, compiled, ranges["nodes"][0], writes)
            else:  # (each position once per flush: index_copy_ leaves duplicates undefined)
                writes.put(self.grammar_max_rise, gid, [NO_RISE_BOUND])
            self._write_entries(ranges["nodes"][0], entries, ranges, writes)
            writes.flush()
            self._registered[gid] = _Registration(compiled, ranges, self._nbytes(ranges),
                                                  int(entries.unbuilt.sum()), self._event(),
                                                  distances)
            self._by_compiled[id(compiled)] = gid
        return gid

    def _known(self, compiled: CompiledGrammar) -> Optional[int]:
        """The id ``compiled`` is registered under, or None."""
        known = self._by_compiled.get(id(compiled))
        return known if known is not None and self.holds(known, compiled) else None

    def _take(self, sizes: Dict[str, int], may_move: bool = True) -> Dict[str, Tuple[int, int]]:
        """Ranges of these sizes, all or none (ArenaFullError names the buffer). Ranges
        retired while steps were queued are waited for before the arena counts as full; then,
        with ``may_move``, a buffer with enough free entries but no range large enough is
        compacted."""
        self._reclaim()
        if not all(self._alloc[name].fits(count) is not None
                   for name, count in sizes.items() if count):
            self._wait_retired()
            fragmented = [name for name, count in sizes.items() if count
                          and self._alloc[name].fits(count) is None
                          and self._alloc[name].size - self._alloc[name].used >= count]
            if fragmented and may_move:
                self._compact(fragmented)
        ranges: Dict[str, Tuple[int, int]] = {}
        try:
            for name, count in sizes.items():
                ranges[name] = (self._alloc[name].take(count), count)
        except ArenaFullError:
            for name, (start, count) in ranges.items():
                self._alloc[name].give_back(start, count)
            raise
        return ranges

    def _wait_retired(self) -> None:
        """Wait until no queued kernel reads a retired range, and give them all back."""
        for event, _ in self._retired:
            if event is not None:
                event.synchronize()
        self._reclaim()

    def _event(self) -> Optional[torch.cuda.Event]:
        """An event recorded on the current stream (None off CUDA)."""
        if self.device.type != "cuda":
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def _compact(self, allocators) -> None:
        """Move the registered grammars' ranges of ``allocators`` down to the start of each,
        in the order they lie, so that the free entries are one range at the end. The moves
        are device copies on the current stream followed by shifts of the fields that point
        into the moved ranges (``_POINTERS_INTO``): the steps queued before on this stream
        read the old places, those after the new ones (other streams must not be running
        steps of this arena). Registrations still writing on another stream are waited for.
        The generations stay: the CPU kernels' host tables hold what a grammar's ranges
        contain, not where they are."""
        for registration in self._registered.values():
            if registration.written is not None:
                registration.written.synchronize()
        for name in allocators:
            allocator = self._alloc[name]
            lying = sorted((r.ranges[name][0], gid) for gid, r in self._registered.items()
                           if r.ranges[name][1])
            cursor = 0
            for start, gid in lying:
                registration = self._registered[gid]
                count = registration.ranges[name][1]
                if start != cursor:
                    self._move(gid, name, start, cursor, count)
                    registration.ranges[name] = (cursor, count)
                cursor += count
            allocator.free = [(cursor, allocator.size)] if cursor < allocator.size else []

    def _move(self, gid: int, allocator: str, old: int, new: int, count: int) -> None:
        """Grammar ``gid``'s ``count`` entries of ``allocator`` from ``old`` to ``new``
        (below it: the ranges may overlap, hence the copy through a temporary)."""
        for name in _MOVED_BUFFERS[allocator]:
            tensor = getattr(self, name)
            tensor[new: new + count] = tensor[old: old + count].clone()
        if allocator == "nodes":
            self.grammar_node_base[gid] = new
            return
        holder, fields = _POINTERS_INTO[allocator]
        start, held = self._registered[gid].ranges[holder]
        for name in fields:
            values = getattr(self, name)[start: start + held]
            if name == "node_row":
                values[values >= 0] += new - old
            else:
                values += new - old

    def _nbytes(self, ranges) -> int:
        return sum(count * self._alloc[name].element_bytes
                   for name, (_, count) in ranges.items())

    def _reclaim(self) -> None:
        """Give back the retired entry ranges that no queued kernel can read any more."""
        kept = []
        for event, ranges in self._retired:
            if event is None or event.query():
                for name, (start, count) in ranges.items():
                    self._alloc[name].give_back(start, count)
            else:
                kept.append((event, ranges))
        self._retired = kept

    def holds(self, gid: int, compiled: CompiledGrammar) -> bool:
        """Whether grammar id ``gid`` is ``compiled``'s registration."""
        registration = self._registered.get(gid)
        return registration is not None and registration.compiled is compiled

    def unbuilt_nodes(self, gid: int) -> int:
        """Scannable nodes of grammar ``gid`` whose mask entry the arena does not hold."""
        return self._registered[gid].unbuilt

    def complete_entries(self, gid: int, compiled: CompiledGrammar,
                         entries: MaskEntries) -> bool:
        """Replace a lazy registration's entries with ``entries`` (``mask_entries(compiled)``,
        computed on any thread). Writes on the current stream, so the steps queued on it before
        read the old entries and those after the new: call it from the thread that runs the
        steps, between steps (``GrammarBatch.commit_masks`` does). The old entries' ranges are
        reused only once the stream has passed this point. Returns False (and writes nothing)
        when ``gid`` no longer holds ``compiled``."""
        with self._lock:
            registration = self._registered.get(gid)
            if registration is None or registration.compiled is not compiled:
                return False
            new = self._take(_entry_counts(entries))  # (on the steps' stream: may move)
            writes = _Writes(self)
            self._write_entries(registration.ranges["nodes"][0], entries, new, writes)
            # A new generation: the CPU kernels rebuild their tables of this id.
            self._generation[gid] += 1
            writes.put(self.grammar_generation, gid, [self._generation[gid]])
            writes.flush()
            self._retire({name: registration.ranges[name] for name in ENTRY_BUFFERS})
            registration.ranges.update(new)
            registration.nbytes = self._nbytes(registration.ranges)
            registration.unbuilt = int(entries.unbuilt.sum())
            registration.written = self._event()
        return True

    def write_distances(self) -> int:
        """Copy in the completion distances of every registered grammar that lacks them
        (``register(distances=False)``), computing those not computed yet. Writes on the
        current stream: between steps, from the thread that runs them. Returns how many
        grammars got theirs."""
        with self._lock:
            pending = [(gid, r) for gid, r in self._registered.items() if not r.distances]
        for _, registration in pending:  # the Python part, outside the lock
            registration.compiled.completion
        written = 0
        with self._lock:
            for gid, registration in pending:
                if self._registered.get(gid) is not registration or registration.distances:
                    continue  # unregistered, or written by another thread meanwhile
                writes = _Writes(self)
                self._write_distances(gid, registration.compiled,
                                      registration.ranges["nodes"][0], writes)
                # A new generation: the CPU kernels' tables of this id copied the rows before
                self._generation[gid] += 1
                writes.put(self.grammar_generation, gid, [self._generation[gid]])
                writes.flush()
                registration.distances = True
                registration.written = self._event()
                written += 1
        return written

    def _retire(self, ranges: Dict[str, Tuple[int, int]]) -> None:
        """Give ``ranges`` back once the current stream has passed this point (the steps
        queued before may still read them)."""
        self._retired.append((self._event(), ranges))

    def _write(self, gid: int, compiled: CompiledGrammar, ranges, writes: "_Writes") -> None:
        """The grammar's automaton tables (everything but the mask entries)."""
        a, put = compiled.automaton, writes.put
        node_base = ranges["nodes"][0]
        next_base = ranges["next_flat"][0]
        ref_base = ranges["refs"][0]
        n, c = a.num_nodes, a.num_classes
        # A new generation: the CPU kernels' cached tables of this id (an earlier grammar's)
        # are stale from now on.
        self._generation[gid] += 1
        token_steps = ((layout.KERNEL_CONSTANTS["TOKEN_MOVES"] if len(a.token_nodes) else 0)
                       | (layout.KERNEL_CONSTANTS["COUNT_TOKENS"]
                          if (a.token_count_next >= 0).any() else 0))
        for name, value in (("grammar_node_base", node_base), ("grammar_nodes", n),
                            ("grammar_generation", self._generation[gid]),
                            ("grammar_root", int(a.rule_start[a.root_rule])),
                            ("grammar_classes", c), ("grammar_token_steps", token_steps)):
            put(getattr(self, name), gid, [value])
        put(self.grammar_byte_class, gid * 256, a.byte_class)
        put(self.node_next, node_base, next_base + c * np.arange(n))
        put(self.next_flat, next_base, a.next_node.reshape(-1))
        flags = (a.is_final * int(NodeFlag.FINAL) + a.is_scannable * int(NodeFlag.SCANNABLE)
                 + a.is_pure_return * int(NodeFlag.PURE_RETURN))
        put(self.node_flags, node_base, flags)
        put(self.node_rule, node_base, a.node_rule)
        put(self.node_token_next, node_base, a.token_next)
        put(self.node_count_next, node_base, a.token_count_next)
        put(self.node_ref_lo, node_base, ref_base + a.ref_offsets[:-1])
        put(self.node_ref_hi, node_base, ref_base + a.ref_offsets[1:])
        put(self.ref_start, ref_base, a.rule_start[a.ref_rule])
        put(self.ref_return, ref_base, a.ref_return)

    def _write_distances(self, gid: int, compiled: CompiledGrammar, node_base: int,
                         writes: "_Writes") -> None:
        completion = compiled.completion
        writes.put(self.grammar_max_rise, gid, [completion.max_rise])
        writes.put(self.node_distance, node_base, completion.node_distance)

    def _write_entries(self, node_base: int, entries: MaskEntries, ranges,
                       writes: "_Writes") -> None:
        """The mask entries and the per-node fields that point at them (all in one flush:
        the steps queued before read the old ones, those after the new)."""
        masks, pairs, put = entries.layout, entries.pairs, writes.put
        row_base = ranges["accept_rows"][0]
        unc_base = ranges["uncertain"][0]
        rows = masks.accept_rows
        if rows.shape[0]:  # (one contiguous block: a copy of its own, no index)
            self.accept_rows[row_base: row_base + rows.shape[0]] = torch.from_numpy(
                np.ascontiguousarray(rows)).to(self.device)
        put(self.uncertain_tokens, unc_base, masks.uncertain_tokens)
        pair_base = ranges["pairs"][0]
        acc_base, unc2_base = ranges["pair_acc"][0], ranges["pair_unc"][0]
        put(self.pair_below, pair_base, pairs.pair_below)
        put(self.pair_acc_lo, pair_base, acc_base + pairs.pair_acc_offsets[:-1])
        put(self.pair_acc_hi, pair_base, acc_base + pairs.pair_acc_offsets[1:])
        put(self.pair_unc_lo, pair_base, unc2_base + pairs.pair_unc_offsets[:-1])
        put(self.pair_unc_hi, pair_base, unc2_base + pairs.pair_unc_offsets[1:])
        put(self.pair_acc_tokens, acc_base, pairs.pair_acc_tokens)
        put(self.pair_unc_tokens, unc2_base, pairs.pair_unc_tokens)
        put(self.node_unc_lo, node_base, unc_base + masks.uncertain_offsets[:-1])
        put(self.node_unc_hi, node_base, unc_base + masks.uncertain_offsets[1:])
        put(self.node_pair_lo, node_base, pair_base + pairs.node_pair_offsets[:-1])
        put(self.node_pair_hi, node_base, pair_base + pairs.node_pair_offsets[1:])
        put(self.node_row, node_base, np.where(
            masks.node_row >= 0, masks.node_row + row_base,
            np.where(entries.unbuilt, layout.KERNEL_CONSTANTS["ROW_UNBUILT"], -1)))

    def unregister(self, gid: int) -> None:
        with self._lock:
            registration = self._registered.pop(gid, None)
            if registration is None:
                raise KeyError(f"grammar id {gid} is not registered")
            self._retire(registration.ranges)
            self._by_compiled.pop(id(registration.compiled), None)
            self._free_ids.append(gid)
            self._free_ids.sort()

    # ------------------------------------------------------------------ queries
    def compiled(self, gid: int) -> CompiledGrammar:
        return self._registered[gid].compiled

    def grammar_bytes(self, gid: int) -> int:
        return self._registered[gid].nbytes

    def memory_bytes(self) -> Dict[str, int]:
        """Bytes allocated on the device per buffer, and in use by registered grammars."""
        allocated = self.blob.numel()
        used = sum(r.nbytes for r in self._registered.values())
        return {"allocated": int(allocated), "used_by_grammars": int(used)}

    def op_tensors(self) -> torch.Tensor:
        """The ops' ``arena``: the byte tensor that holds every buffer."""
        return self.blob

    def tensors(self) -> Dict[str, torch.Tensor]:
        """The buffers by name (views of ``blob``)."""
        return {name: getattr(self, name) for name in ARENA_FIELDS}

    @property
    def registered_ids(self) -> List[int]:
        return sorted(self._registered)
