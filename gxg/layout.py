"""The device layout, declared once: every buffer the runtime ops and kernels index, and every
constant Python and CUDA share.

In:  nothing (this is the declaration).
Out: ``BUFFERS``: one ordered table of ``Buffer(name, group, dtype, dims, doc)``. The groups:
       * ``header``  the pointer table (the device address of every buffer, in table order:
                     the kernels' ``P_<NAME>``) and the dimension values (``DIMS``),
       * ``state``   the runtime state of a batch (``gxg.runtime.RuntimeState``, one row per slot),
       * ``arena``   the compiled grammars packed into fixed buffers (``gxg.arena.DeviceArena``),
       * ``scratch`` the kernels' working buffers (``gxg.batch.GrammarBatch`` allocates them).
     ``BLOBS``: the groups are packed into two byte tensors, the ops' ``runtime`` (header,
     state, scratch: the pointer table at byte 0) and ``arena``; ``blob_layout`` gives each
     buffer's byte offset (``ALIGNMENT``-aligned, in table order) for given dimension values,
     so a blob is read back from its header alone (``gxg.blobs``).
     ``NodeFlag``, ``ErrorCode``, ``LIMITS_ROW`` (the int32 row of runtime limits the kernels
     read), ``KERNEL_CONSTANTS`` (launch shapes shared by the launchers and the kernels).
     ``cuda_header()``: the C preprocessor text that csrc/automaton.cu is compiled with
     (``ops.cuda_automaton`` prepends it), generated from the above, so no index or constant is
     written twice. ``bitmask_words(vocab_size)``: the bitmask's width.

Dimension symbols in ``dims`` (sizes fixed when a batch or arena is made):
  B slots, P pool entries, PI pool index slots (a power of two >= P), K live stacks, H history steps, WORK closure work items (3 ints
  each), CLOSURE closure visits (2 ints each), G grammars, N nodes, X scan targets, E reference
  edges, R accept rows, U uncertain tokens, Q context pairs, A pair tokens, S sorted tokens,
  T / T_ID token bytes (sorted / by id), V vocab_size, W = ceil(V / 32) bitmask words,
  WIDE_QUEUE / WIDE_SPACE the wide walk's queue and stacks (sized by the compiled kernels),
  NB buffers, ND dimension symbols, and plain numbers.
"""
from __future__ import annotations

import enum
import functools
import types
from dataclasses import dataclass
from typing import Dict, List, Mapping, Tuple

__all__ = ["Buffer", "BUFFERS", "GROUPS", "BLOBS", "DIMS", "ALIGNMENT", "NodeFlag", "ErrorCode",
           "LIMITS_ROW", "KERNEL_CONSTANTS", "pool_index_slot", "pool_index_slots", "names", "buffer", "pointer_index", "shape_of",
           "blob_layout", "blob_names", "with_counts", "cuda_header", "bitmask_words"]

GROUPS = ("header", "state", "arena", "scratch")

#: The byte tensors the ops receive, and the groups each packs, in order.
BLOBS = {"runtime": ("header", "state", "scratch"), "arena": ("arena",)}

#: Every dimension symbol the shapes below use (the header's ``dims`` row, in this order).
DIMS = ("B", "P", "PI", "K", "H", "WORK", "CLOSURE", "W", "WIDE_QUEUE", "WIDE_SPACE", "G", "N", "X",
        "E", "R", "U", "Q", "A", "S", "T", "T_ID", "V", "NB", "ND")

#: Byte alignment of every buffer in its blob (and of the blobs themselves).
ALIGNMENT = 256

DTYPE_BYTES = {"int64": 8, "int32": 4, "int8": 1, "uint8": 1}


@dataclass(frozen=True)
class Buffer:
    name: str
    group: str
    dtype: str              # a numpy / torch dtype name: int32, int8, uint8
    dims: Tuple[object, ...]
    doc: str = ""


def _header(name, dtype, dims, doc=""):
    return Buffer(name, "header", dtype, dims, doc)


def _state(name, dtype, dims, doc=""):
    return Buffer(name, "state", dtype, dims, doc)


def _arena(name, dtype, dims, doc=""):
    return Buffer(name, "arena", dtype, dims, doc)


def _scratch(name, dtype, dims, doc=""):
    return Buffer(name, "scratch", dtype, dims, doc)


BUFFERS: Tuple[Buffer, ...] = (
    # --- the runtime blob's header (byte 0: the kernels get this address)
    _header("pointer_table", "int64", ("NB",), "device address of every buffer, table order"),
    _header("dims", "int64", ("ND",), "the value of each symbol of DIMS"),
    # --- runtime state (gxg/runtime.py documents the semantics)
    _state("pool_node", "int32", ("B", "P"), "persistent stack pool: entry -> node"),
    _state("pool_parent", "int32", ("B", "P"), "entry -> parent entry (-1: bottom)"),
    _state("pool_size", "int32", ("B",), "bump pointer"),
    _state("pool_index", "int32", ("B", "PI"),
           "hash index (node, parent) -> entry, a cache (POOL_INDEX_EMPTY / _TOMBSTONE)"),
    _state("tops", "int32", ("B", "K"), "live stack tops (entries)"),
    _state("num_tops", "int32", ("B",)),
    _state("can_end", "int8", ("B",), "the root can complete now"),
    _state("terminated", "int8", ("B",), "a stop token was accepted"),
    _state("error", "int32", ("B",), "ErrorCode, kept until reset"),
    _state("grammar", "int32", ("B",), "grammar id in the arena (-1: unbound)"),
    _state("hist_tops", "int32", ("B", "H", "K")),
    _state("hist_num_tops", "int32", ("B", "H")),
    _state("hist_pool_size", "int32", ("B", "H")),
    _state("hist_can_end", "int8", ("B", "H")),
    _state("hist_terminated", "int8", ("B", "H")),
    _state("hist_len", "int32", ("B",)),
    _state("hist_head", "int32", ("B",)),
    # --- arena (gxg/arena.py documents the semantics)
    _arena("grammar_node_base", "int32", ("G",), "first row of the grammar's nodes"),
    _arena("grammar_root", "int32", ("G",), "local start node of the root rule"),
    _arena("grammar_byte_class", "int32", ("G", 256)),
    _arena("grammar_classes", "int32", ("G",)),
    _arena("node_next", "int32", ("N",), "offset of the node's scan targets in next_flat"),
    _arena("next_flat", "int32", ("X",)),
    _arena("node_flags", "int32", ("N",), "NodeFlag bits"),
    _arena("node_ref_lo", "int32", ("N",)),
    _arena("node_ref_hi", "int32", ("N",)),
    _arena("ref_start", "int32", ("E",)),
    _arena("ref_return", "int32", ("E",)),
    _arena("node_row", "int32", ("N",), "accept row (-1: the node cannot scan; ROW_UNBUILT: no entry yet)"),
    _arena("node_unc_lo", "int32", ("N",)),
    _arena("node_unc_hi", "int32", ("N",)),
    _arena("accept_rows", "int32", ("R", "W")),
    _arena("uncertain_tokens", "int32", ("U",), "sorted-vocabulary indices"),
    _arena("token_bytes", "uint8", ("T",), "bytes of the sorted vocabulary"),
    _arena("token_offsets", "int32", ("S+1",)),
    _arena("sorted_token_ids", "int32", ("S",)),
    _arena("id_offsets", "int32", ("V+1",)),
    _arena("id_bytes", "uint8", ("T_ID",), "bytes by token id (empty: special, stop, padding)"),
    _arena("is_stop", "int8", ("V",)),
    _arena("stop_words", "int32", ("W",)),
    _arena("node_pair_lo", "int32", ("N",)),
    _arena("node_pair_hi", "int32", ("N",)),
    _arena("pair_below", "int32", ("Q",)),
    _arena("pair_acc_lo", "int32", ("Q",)),
    _arena("pair_acc_hi", "int32", ("Q",)),
    _arena("pair_unc_lo", "int32", ("Q",)),
    _arena("pair_unc_hi", "int32", ("Q",)),
    _arena("pair_acc_tokens", "int32", ("A",)),
    _arena("pair_unc_tokens", "int32", ("A",)),
    _arena("node_distance", "int32", ("N",), "fewest bytes to complete the node's rule"),
    _arena("grammar_max_rise", "int32", ("G",), "bound on one byte's distance rise (-1: none)"),
    _arena("grammar_token_steps", "int32", ("G",),
           "what a token's end adds to accept: TOKEN_MOVES (token nodes), COUNT_TOKENS (token "
           "budgets); 0: nothing (one read for both)"),
    _arena("node_count_next", "int32", ("N",),
           "a counter node's next counter (local; itself for the last; -1: not a counter)"),
    _arena("ids_by_length", "int32", ("V",), "token ids by byte length, longest first"),
    # what the CPU kernels read besides (``gxg.ops.arena_tables`` rebuilds a grammar's host
    # tables from the buffers above and these)
    _arena("grammar_nodes", "int32", ("G",), "number of nodes of the grammar"),
    _arena("grammar_generation", "int32", ("G",), "bumped by every register of the id"),
    _arena("node_rule", "int32", ("N",), "local rule of the node"),
    _arena("node_token_next", "int32", ("N",),
           "a token node's move target (local; -1: not a token node)"),
    # --- the kernels' scratch
    _scratch("work", "int32", ("B", "WORK", 3), "closure work list (node, parent, entry)"),
    _scratch("seen", "int32", ("B", "CLOSURE", 2), "closure visits (node, parent)"),
    _scratch("tops_a", "int32", ("B", "K"), "tops being built"),
    _scratch("tops_b", "int32", ("B", "K")),
    _scratch("mark", "int32", ("B", "P"), "compaction marks / new indices"),
    _scratch("frame_slot", "int32", ("B", "P"),
             "pool_index slot of each entry this step indexed (-1: none); window entries only"),
    _scratch("limits", "int32", (8,), "LIMITS_ROW"),
    _scratch("wide_queue", "int32", ("WIDE_QUEUE",), "walks queued for xg_uncertain_wide"),
    _scratch("wide_space", "int32", ("WIDE_SPACE",), "the wide walk's stacks"),
    _scratch("budget_plan", "int32", ("B",), "tokens to walk for the budget, per slot"),
    _scratch("budget_drop", "int32", ("B", "W"), "tokens the budget drops (zero between fills)"),
)

_BY_NAME: Dict[str, Buffer] = {b.name: b for b in BUFFERS}
assert len(_BY_NAME) == len(BUFFERS), "buffer names must be unique"


class NodeFlag(enum.IntFlag):
    """Bits of ``node_flags``."""
    FINAL = 1         # the rule may complete at this node
    SCANNABLE = 2     # the node has a byte edge
    PURE_RETURN = 4   # final, no byte edge, no reference edge (tail-call target)


class ErrorCode(enum.IntEnum):
    """A slot's ``error`` (0: none); ``gxg.runtime.ERROR_MESSAGES`` says what each means."""
    NONE = 0
    TOO_MANY_STACKS = 1
    POOL_FULL = 2
    CLOSURE_TOO_LARGE = 3
    ROLLBACK_TOO_FAR = 4
    UNCERTAIN_WALK_TOO_LARGE = 5


#: The ``limits`` row: what each position holds (the rest of the 8 ints are 0).
LIMITS_ROW = ("P", "K", "H", "MAX_CLOSURE", "WORK_CAP", "V", "PI", "S")

#: Launch shapes the launchers (ops/cuda_automaton.py) and the kernels must agree on.
KERNEL_CONSTANTS = {
    "UNC_THREADS": 64,      # xg_uncertain: threads per slot
    "BUDGET_THREADS": 256,  # xg_budget / xg_budget_apply: threads per block (whole warps)
    "POOL_INDEX_PROBES": 8,  # slots of pool_index one lookup or insert looks at
    "POOL_INDEX_EMPTY": -1,  # a pool_index slot never used since the last clear (ends a probe)
    "POOL_INDEX_TOMBSTONE": -2,  # a pool_index slot whose entry was moved or dropped
    "TOKEN_MOVES": 1,   # grammar_token_steps bit: the grammar has token nodes
    "COUNT_TOKENS": 2,  # grammar_token_steps bit: the grammar has token-budget counters
    # node_row of a scannable node whose mask entry the arena does not hold yet (a lazy
    # registration, ``DeviceArena.register(lazy=True)``): the fill walks every token from it
    "ROW_UNBUILT": -2,
    # xg_uncertain's threads over the whole batch, at least: a slot gets
    # max(1, UNBUILT_THREADS / (B * UNC_THREADS)) blocks, which share the walks of its tops at
    # nodes without an entry (every sorted token); its other walks stay on its first block
    "UNBUILT_THREADS": 32768,
}

#: The pool index's hash (``pool_index_slot``; cuda_header() writes the same in C).
POOL_HASH_NODE = 0x9E3779B1
POOL_HASH_PARENT = 0x85EBCA6B


def pool_index_slot(node: int, parent: int, slots: int) -> int:
    """First ``pool_index`` slot of the key (node, parent); ``slots`` is a power of two. The
    kernels' ``pool_index_slot`` (generated by ``cuda_header``) computes the same in uint32."""
    h = ((node * POOL_HASH_NODE) ^ ((parent + 1) * POOL_HASH_PARENT)) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (slots - 1)


def pool_index_slots(pool_entries: int) -> int:
    """PI: the pool index's size for P pool entries (the smallest power of two >= P)."""
    return 1 << max(0, int(pool_entries) - 1).bit_length()


def names(group: str) -> List[str]:
    """The buffer names of ``group`` in table order."""
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; known: {GROUPS}")
    return [b.name for b in BUFFERS if b.group == group]


def buffer(name: str) -> Buffer:
    return _BY_NAME[name]


def pointer_index(name: str) -> int:
    """Position of ``name`` in the pointer table (the kernels' ``P_<NAME>``)."""
    return [b.name for b in BUFFERS].index(name)


def shape_of(name: str, dims: Dict[str, int]) -> Tuple[int, ...]:
    """The buffer's shape for these dimension values (``"S+1"``-style symbols are that plus
    one)."""
    out = []
    for dim in _BY_NAME[name].dims:
        if isinstance(dim, int):
            out.append(dim)
        elif dim.endswith("+1"):
            out.append(dims[dim[:-2]] + 1)
        else:
            out.append(dims[dim])
    return tuple(out)


def blob_names(blob: str) -> List[str]:
    """The buffers packed into ``blob`` ("runtime" or "arena"), in table order."""
    return [b.name for b in BUFFERS if b.group in BLOBS[blob]]


def with_counts(dims: Dict[str, int]) -> Dict[str, int]:
    """``dims`` with the table's own sizes filled in: NB buffers, ND dimension symbols."""
    return dict(dims, NB=len(BUFFERS), ND=len(DIMS))


def blob_layout(blob: str, dims: Dict[str, int]) -> Tuple[Mapping[str, int], int]:
    """Byte offset of each buffer of ``blob`` and the blob's size, for these dimension values
    (``NB`` and ``ND`` are filled in): the buffers in table order, each at the next multiple of
    ALIGNMENT. Cached per (blob, dimension values): the CPU ops ask on every call."""
    return _blob_layout(blob, tuple(sorted(with_counts(dims).items())))


@functools.lru_cache(maxsize=64)
def _blob_layout(blob: str, dims_items: Tuple[Tuple[str, int], ...]
                 ) -> Tuple[Mapping[str, int], int]:
    dims = dict(dims_items)
    offsets: Dict[str, int] = {}
    end = 0
    for name in blob_names(blob):
        start = -(-end // ALIGNMENT) * ALIGNMENT
        offsets[name] = start
        count = 1
        for size in shape_of(name, dims):
            count *= size
        end = start + count * DTYPE_BYTES[_BY_NAME[name].dtype]
    return types.MappingProxyType(offsets), -(-end // ALIGNMENT) * ALIGNMENT


def bitmask_words(vocab_size: int) -> int:
    """int32 words of one bitmask row: bit j of word w is token 32·w + j."""
    return (vocab_size + 31) // 32


def cuda_header() -> str:
    """The defines csrc/automaton.cu is compiled with: ``P_<NAME>`` (pointer table positions),
    ``FLAG_*``, ``ERR_*``, ``L_*`` (positions in the limits row), the kernel constants and the
    pool index's hash ``pool_index_slot``."""
    lines = ["// Generated from gxg/layout.py by cuda_header(): do not edit.",
             f"#define POINTER_TABLE_SIZE {len(BUFFERS)}"]
    for index, b in enumerate(BUFFERS):
        lines.append(f"#define P_{b.name.upper()} {index}  // {b.group} {b.dtype} "
                     f"[{', '.join(map(str, b.dims))}]")
    lines += [f"#define FLAG_{flag.name} {int(flag)}" for flag in NodeFlag]
    lines += [f"#define ERR_{code.name} {int(code)}" for code in ErrorCode if code]
    lines += [f"#define L_{name} {index}" for index, name in enumerate(LIMITS_ROW)]
    lines += [f"#define {name} ({value})" if value < 0 else f"#define {name} {value}"
              for name, value in KERNEL_CONSTANTS.items()]
    lines += ["__device__ __forceinline__ int pool_index_slot(int node, int parent, int slots) {",
              f"  unsigned h = ((unsigned)node * {POOL_HASH_NODE}u) ^ "
              f"((unsigned)(parent + 1) * {POOL_HASH_PARENT}u);",
              "  return (int)((h ^ (h >> 16)) & (unsigned)(slots - 1));",
              "}"]
    return "\n".join(lines) + "\n"
