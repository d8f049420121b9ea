"""The CPU kernels' host tables, rebuilt from the arena blob the ops receive.

In:  ``arena`` — a ``DeviceArena``'s blob (``gxg.blobs``: every buffer of the layout's arena
     group), its dimension values (the runtime blob's header holds them), and a grammar id
     ``g`` registered there.
Out: ``lookup(arena, dims)`` -> a function ``g -> HostTables`` (``ops.reference``) for one op
     call; ``host_tables(arena, dims, g)``, the same for one grammar.

Everything the reference reads comes from those tensors (no registry of live arenas):
  * the automaton: ``ArenaAutomaton``, the ``Automaton`` fields the byte loop and the
    full-stack walkers read (``gxg.compiler.stack_walk``), local node ids, from the per-node
    rows ``grammar_node_base[g] .. + grammar_nodes[g]`` and the ranges they point at;
  * the mask layout: a ``KernelMaskLayout`` of the grammar's accept rows and uncertain tokens
    (an ``ArenaMaskLayout`` around it while a lazy registration lacks some nodes' entries:
    those nodes have every sorted token uncertain, as ``xg_uncertain`` walks them);
  * completion distances (token budgets): ``node_distance`` rows and ``grammar_max_rise[g]``;
  * the vocabulary (``HostVocabulary``, shared by every grammar of the arena): the sorted
    vocabulary, bytes by id, ``is_stop`` (special: empty bytes and not a stop), ids by length.

Building them costs milliseconds (the byte loop's Python lists, the vocabulary's arrays), so
they are cached (``_CACHE``): per arena, keyed on the identity of its blob (weakly: a dropped
arena drops its entry; the values hold copies, never the blob); per grammar id, the tables and
the generation they were built at. ``DeviceArena.register`` bumps ``grammar_generation[g]``, so
a grammar registered at an id an earlier one had never gets the earlier one's tables. The cached
``HostTables`` keep their own walk caches (uncertain tokens per stack, the vocabulary walk)
across steps. The blob may live on any device; it is read to the host when tables are
built, and ``grammar_generation`` at every lookup (the CPU kernels' blobs are on the CPU).
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import numpy as np
import torch
from torch.utils.weak import WeakIdKeyDictionary

from gxg import blobs, layout
from gxg.compiler.automaton import Automaton
from gxg.compiler.completion import CompletionDistances
from gxg.compiler.mask_cache import KernelMaskLayout
from gxg.compiler.vocab_walk import RunBreaks
from gxg.layout import NodeFlag
from gxg.ops.reference import HostTables, HostVocabulary

@dataclass(frozen=True, eq=False)
class ArenaAutomaton:
    """One grammar's PDA as the arena holds it: the ``Automaton`` tables that the reference's
    byte loop and full-stack walks read, local node ids. The arena keeps no rule names,
    nullability, FIRST sets or lookaheads (the compiler's and the mask cache's, not a
    full-stack walk's); ``rule_names`` are numbers, for messages."""
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
    root_rule: int
    token_next: np.ndarray
    token_count_next: np.ndarray

    num_nodes = Automaton.num_nodes
    num_classes = Automaton.num_classes
    refs = Automaton.refs
    lists = Automaton.lists

    @property
    def rule_names(self) -> Tuple[str, ...]:
        return tuple(f"rule {r}" for r in range(len(self.rule_start)))


def _arrays(arena: torch.Tensor, dims: Dict[str, int]) -> Dict[str, np.ndarray]:
    """The buffers by name, as host arrays (views of a CPU blob: copy what is kept)."""
    return blobs.numpy_views(arena.detach().cpu().numpy(), "arena", dims)


def _nodes(b: Dict[str, np.ndarray], g: int) -> slice:
    """The grammar's rows of the per-node buffers."""
    base = int(b["grammar_node_base"][g])
    return slice(base, base + int(b["grammar_nodes"][g]))


def _span(lo: np.ndarray, hi: np.ndarray) -> Tuple[int, int, np.ndarray]:
    """Per-node [lo, hi) ranges that tile one contiguous range: (start, end, CSR offsets)."""
    start, end = int(lo[0]), int(hi[-1])
    return start, end, np.append(lo, end).astype(np.int64) - start


def automaton_of(b: Dict[str, np.ndarray], g: int) -> ArenaAutomaton:
    nodes = _nodes(b, g)
    n, classes = nodes.stop - nodes.start, int(b["grammar_classes"][g])
    first = int(b["node_next"][nodes.start])     # the grammar's scan targets: n x C, row-major
    next_node = b["next_flat"][first: first + n * classes].reshape(n, classes).copy()
    ref_lo, ref_hi, ref_offsets = _span(b["node_ref_lo"][nodes], b["node_ref_hi"][nodes])
    node_rule = b["node_rule"][nodes].copy()
    # a rule's nodes are contiguous, its start node first (gxg.compiler.automaton, step 5), so
    # a referenced rule is the rule of its start node
    rule_start = np.searchsorted(node_rule, np.arange(int(node_rule[-1]) + 1)).astype(np.int32)
    flags = b["node_flags"][nodes]
    return ArenaAutomaton(
        byte_class=b["grammar_byte_class"][g].astype(np.uint8),
        next_node=next_node,
        ref_offsets=ref_offsets.astype(np.int32),
        ref_rule=node_rule[b["ref_start"][ref_lo:ref_hi]],
        ref_return=b["ref_return"][ref_lo:ref_hi].copy(),
        is_final=(flags & NodeFlag.FINAL) != 0,
        is_scannable=(flags & NodeFlag.SCANNABLE) != 0,
        is_pure_return=(flags & NodeFlag.PURE_RETURN) != 0,
        node_rule=node_rule,
        rule_start=rule_start,
        root_rule=int(node_rule[int(b["grammar_root"][g])]),
        token_next=b["node_token_next"][nodes].copy(),
        token_count_next=b["node_count_next"][nodes].copy())


@functools.lru_cache(maxsize=8)
def _every_sorted(num_sorted: int) -> np.ndarray:
    """0 .. num_sorted-1, read-only: shared by every grammar's layout (a cache, per vocabulary
    size; ~0.2 ms to make for Qwen's)."""
    every = np.arange(num_sorted, dtype=np.int32)
    every.flags.writeable = False
    return every


class ArenaMaskLayout:
    """A grammar's ``KernelMaskLayout`` (its attributes are this object's) in which the nodes
    without an entry yet (``ROW_UNBUILT``: a lazy registration) accept no token by row and
    have every sorted token uncertain, so the fill walks them all from the real stack, as
    xg_uncertain does on the GPU."""

    def __init__(self, masks: KernelMaskLayout, unbuilt: np.ndarray, num_sorted: int):
        self.masks = masks
        self.unbuilt = unbuilt
        self._every = _every_sorted(num_sorted)

    def __getattr__(self, name):  # node_row, accept_rows, rows(): an unbuilt node's row is
        return getattr(self.masks, name)  # the zero row mask_layout_of appends

    def uncertain(self, node: int) -> np.ndarray:
        return self._every if self.unbuilt[node] else self.masks.uncertain(node)


def mask_layout_of(b: Dict[str, np.ndarray], g: int):
    """The grammar's accept rows (a contiguous range of ``accept_rows``) and uncertain tokens,
    renumbered from 0; an ``ArenaMaskLayout`` when some node has no entry yet."""
    nodes = _nodes(b, g)
    node_row = b["node_row"][nodes]
    used = node_row[node_row >= 0]
    first, end = (int(used.min()), int(used.max()) + 1) if len(used) else (0, 0)
    unc_lo, unc_hi, unc_offsets = _span(b["node_unc_lo"][nodes], b["node_unc_hi"][nodes])
    accept_rows = b["accept_rows"][first:end].copy()
    unbuilt = node_row == layout.KERNEL_CONSTANTS["ROW_UNBUILT"]
    local_row = np.where(node_row >= 0, node_row - first, -1)
    if unbuilt.any():  # one zero row for them
        local_row[unbuilt] = len(accept_rows)
        accept_rows = np.vstack([accept_rows, np.zeros((1, accept_rows.shape[1]), np.int32)])
    masks = KernelMaskLayout(node_row=local_row.astype(np.int32), accept_rows=accept_rows,
                             uncertain_offsets=unc_offsets.astype(np.int32),
                             uncertain_tokens=b["uncertain_tokens"][unc_lo:unc_hi].copy())
    if unbuilt.any():
        return ArenaMaskLayout(masks, unbuilt, len(b["sorted_token_ids"]))
    return masks


def completion_of(b: Dict[str, np.ndarray], g: int, rule_start: np.ndarray
                  ) -> CompletionDistances:
    distance = b["node_distance"][_nodes(b, g)].copy()
    return CompletionDistances(distance, distance[rule_start], int(b["grammar_max_rise"][g]))


class BytesById:
    """The bytes of each token id, sliced from the arena's ``id_bytes`` when asked (not a list
    of every token's bytes built up front: that costs ~20 ms for 150k ids, once per arena)."""

    def __init__(self, data: bytes, offsets: np.ndarray):
        self._data, self._offsets = data, offsets

    def __getitem__(self, token: int) -> bytes:
        return self._data[self._offsets[token]: self._offsets[token + 1]]

    def __len__(self) -> int:
        return len(self._offsets) - 1


def vocabulary_of(b: Dict[str, np.ndarray]) -> HostVocabulary:
    is_stop = b["is_stop"] != 0
    id_offsets = b["id_offsets"].astype(np.int64)
    bytes_by_id = BytesById(b["id_bytes"].tobytes(), id_offsets)
    token_offsets = b["token_offsets"].astype(np.int64)
    sorted_token_ids = b["sorted_token_ids"].astype(np.int64)
    lengths_by_id = np.zeros(len(is_stop), dtype=np.int64)
    lengths_by_id[sorted_token_ids] = np.diff(token_offsets)
    # id_bytes are empty for special, stop and padding ids: the special ones are the non-stops
    special = (np.diff(id_offsets) == 0) & ~is_stop
    token_bytes = b["token_bytes"].copy()
    return HostVocabulary(len(is_stop), token_bytes, token_offsets, sorted_token_ids,
                          bytes_by_id, is_stop, special, b["ids_by_length"].astype(np.int64),
                          lengths_by_id, RunBreaks(token_bytes, token_offsets))


def build_host_tables(b: Dict[str, np.ndarray], g: int, vocabulary: HostVocabulary
                      ) -> HostTables:
    automaton = automaton_of(b, g)
    completion = completion_of(b, g, automaton.rule_start)
    return HostTables(automaton, mask_layout_of(b, g), vocabulary, completion=lambda: completion)


class _ArenaEntry:
    """What was built from one arena: its vocabulary, and per grammar id (generation,
    tables)."""

    def __init__(self):
        self.vocabulary = None
        self.grammars: Dict[int, Tuple[int, HostTables]] = {}


# A cache that says so: per arena (its grammar_generation tensor, by identity, weakly), the
# vocabulary and the tables built from it. The values hold copies, never the key tensor.
_CACHE: WeakIdKeyDictionary = WeakIdKeyDictionary()
_LOCK = threading.Lock()


def lookup(arena: torch.Tensor, dims: Dict[str, int]) -> Callable[[int], HostTables]:
    """A function from grammar id to its current tables, for one op call (it reads the
    generations once). ``arena``: the arena blob; ``dims``: its dimension values (the runtime
    blob's header holds them)."""
    key = arena
    offsets, _ = layout.blob_layout("arena", dims)
    start = offsets["grammar_generation"]
    generations = arena.detach().reshape(-1)[start: start + 4 * dims["G"]].cpu().numpy() \
        .view(np.int32)
    with _LOCK:
        entry = _CACHE.get(key)
        if entry is None:
            entry = _CACHE[key] = _ArenaEntry()

    def tables(g: int) -> HostTables:
        generation = int(generations[g])
        known = entry.grammars.get(g)
        if known is None or known[0] != generation:
            with _LOCK:
                known = _current(entry, arena, dims, g, generation)
        return known[1]

    return tables


def _current(entry: _ArenaEntry, arena: torch.Tensor, dims: Dict[str, int], g: int,
             generation: int) -> Tuple[int, HostTables]:
    """(generation, tables) of grammar ``g`` at ``generation``, built unless another thread
    just did (under ``_LOCK``); replaces the tables of an earlier generation."""
    known = entry.grammars.get(g)
    if known is None or known[0] != generation:
        b = _arrays(arena, dims)
        if entry.vocabulary is None:
            entry.vocabulary = vocabulary_of(b)
        known = entry.grammars[g] = (generation, build_host_tables(b, g, entry.vocabulary))
    return known


def host_tables(arena: torch.Tensor, dims: Dict[str, int], g: int) -> HostTables:
    """The current tables of grammar ``g`` of this arena (cached as ``lookup``)."""
    return lookup(arena, dims)(g)
