"""Runtime state of a batch of grammar matchers: one layout for the CPU ops and the GPU kernels.

In:  a batch size and ``RuntimeLimits``.
Out: ``RuntimeState``: plain arrays (numpy on the host; the GPU runtime holds the same fields as
     torch tensors) with the names, dtypes and shapes ``gxg.layout`` declares (group "state"),
     per slot b:

     pool_node    int32 [B, P]     persistent stack pool: entry = (node, parent entry or -1);
     pool_parent  int32 [B, P]     entries are appended, never changed; a stack is the path from
                                   an entry to the bottom, so stacks that share a tail share
                                   entries (paper §3.3). A parent's index is always smaller
                                   than its child's.
     pool_size    int32 [B]        bump pointer
     pool_index   int32 [B, PI]    hash index (node, parent) -> entry, so that a stack reached
                                   again (by another parse, a later byte or step) reuses its
                                   entries instead of appending a copy: the parallel stacks of
                                   an ambiguous grammar then grow with the distinct stacks, not
                                   with the parses (hash-consing). A cache: a lookup checks the
                                   entry it finds; a probe that finds no room inserts nothing
     tops         int32 [B, K]     live stack tops (entry indices), deduplicated by
     num_tops     int32 [B]        (node, parent); every top's node can scan a byte
     can_end      int8  [B]        the root rule can complete now (a stop token is allowed)
     terminated   int8  [B]        a stop token was accepted
     error        int32 [B]        ``ErrorCode``; kept until reset
     grammar      int32 [B]        grammar id in the device arena (-1: unbound; the CPU
                                   matcher, one grammar, uses 0)
     hist_*       [B, H, ...]      ring of the H states before the last H steps (tops, count,
                                   pool size, can_end, terminated); rollback of n ≤ hist_len
     hist_len     int32 [B]        steps in the ring                     tokens is a restore
     hist_head    int32 [B]        ring slot the next step writes

Limits are parameters (``RuntimeLimits``); exceeding one is never silent: the op that hits it
leaves the slot's state as it was, sets ``error`` and reports failure.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gxg import layout
from gxg.layout import ErrorCode  # noqa: F401  (declared with the layout; re-exported here)


ERROR_MESSAGES = {
    ErrorCode.TOO_MANY_STACKS: "more parallel stacks than max_stacks={max_stacks} "
                               "(the grammar is very ambiguous here)",
    ErrorCode.POOL_FULL: "the stack pool ({pool_entries} entries) is full even after compaction "
                         "(nesting too deep or too many parallel stacks)",
    ErrorCode.CLOSURE_TOO_LARGE: "a closure visited more than max_closure={max_closure} stacks",
    ErrorCode.ROLLBACK_TOO_FAR: "a rollback asked for more steps than the history holds "
                                "(history={history})",
    ErrorCode.UNCERTAIN_WALK_TOO_LARGE: "an uncertain-token walk on the GPU needed more room than "
                                        "the wide walk has (128 parallel stacks, 32 pushed nodes, "
                                        "65536 queued walks per fill: csrc/automaton.cu WIDE_*)",
}


@dataclass(frozen=True)
class RuntimeLimits:
    max_stacks: int = 64          # K: live stack tops per slot
    pool_entries: int = 16384     # P: persistent stack entries per slot (bounds nesting depth)
    history: int = 64             # H: steps that can be rolled back
    max_closure: int = 512        # (node, parent) pairs one closure may visit

    def __post_init__(self):
        for name in ("max_stacks", "pool_entries", "history", "max_closure"):
            if getattr(self, name) < 1:
                raise ValueError(f"RuntimeLimits.{name} must be >= 1")

    @property
    def pool_index_slots(self) -> int:
        """PI: the size of a slot's pool index (``gxg.layout.pool_index_slots``)."""
        return layout.pool_index_slots(self.pool_entries)

    @property
    def work_capacity(self) -> int:
        """Pending (node, parent) items one closure's work list may hold."""
        return 4 * self.max_closure

    def dims(self, batch: int) -> dict:
        """The layout's dimension symbols these limits fix (``gxg.layout``)."""
        return {"B": batch, "P": self.pool_entries, "PI": self.pool_index_slots,
                "K": self.max_stacks, "H": self.history,
                "CLOSURE": self.max_closure, "WORK": self.work_capacity}

    def row(self, vocab_size: int, sorted_tokens: int) -> list:
        """The ``limits`` buffer's 8 ints, positions as ``gxg.layout.LIMITS_ROW`` declares
        (``sorted_tokens``: S, the arena's sorted vocabulary)."""
        values = {"P": self.pool_entries, "K": self.max_stacks, "H": self.history,
                  "MAX_CLOSURE": self.max_closure, "WORK_CAP": self.work_capacity,
                  "V": vocab_size, "PI": self.pool_index_slots, "S": sorted_tokens}
        row = [values[name] for name in layout.LIMITS_ROW]
        return row + [0] * (layout.buffer("limits").dims[0] - len(row))

    def message(self, code: int) -> str:
        return ERROR_MESSAGES[ErrorCode(code)].format(**self.__dict__)

    def state_bytes(self, batch: int = 1) -> int:
        """Bytes of a ``RuntimeState`` of ``batch`` slots with these limits."""
        dims = self.dims(batch)
        total = 0
        for name in layout.names("state"):
            count = 1
            for size in layout.shape_of(name, dims):
                count *= size
            total += count * np.dtype(layout.buffer(name).dtype).itemsize
        return total

    def grown(self, code: int) -> "RuntimeLimits":
        """These limits with the one that error ``code`` names doubled (the same limits when
        the code names no limit that can grow)."""
        field = GROWABLE.get(ErrorCode(code))
        if field is None:
            return self
        values = dict(self.__dict__)
        values[field] *= 2
        return RuntimeLimits(**values)


#: The limit each error code says was too small (``RuntimeLimits.grown``).
GROWABLE = {ErrorCode.TOO_MANY_STACKS: "max_stacks", ErrorCode.POOL_FULL: "pool_entries",
            ErrorCode.CLOSURE_TOO_LARGE: "max_closure"}


@dataclass(eq=False)
class RuntimeState:
    limits: RuntimeLimits
    pool_node: np.ndarray
    pool_parent: np.ndarray
    pool_size: np.ndarray
    pool_index: np.ndarray
    tops: np.ndarray
    num_tops: np.ndarray
    can_end: np.ndarray
    terminated: np.ndarray
    error: np.ndarray
    grammar: np.ndarray
    hist_tops: np.ndarray
    hist_num_tops: np.ndarray
    hist_pool_size: np.ndarray
    hist_can_end: np.ndarray
    hist_terminated: np.ndarray
    hist_len: np.ndarray
    hist_head: np.ndarray

    @staticmethod
    def allocate(batch: int, limits: RuntimeLimits = RuntimeLimits()) -> "RuntimeState":
        """Zeroed arrays of the declared shapes and dtypes (``gxg.layout``, group "state");
        parents start at -1 (the bottom), the pool index empty."""
        dims = limits.dims(batch)
        arrays = {name: np.zeros(layout.shape_of(name, dims), layout.buffer(name).dtype)
                  for name in RuntimeState.FIELDS}
        arrays["pool_parent"][:] = -1
        arrays["pool_index"][:] = layout.KERNEL_CONSTANTS["POOL_INDEX_EMPTY"]
        return RuntimeState(limits=limits, **arrays)

    FIELDS = tuple(layout.names("state"))

    def arrays(self) -> list:
        """The fields in ``FIELDS`` order (how the ops receive the state)."""
        return [getattr(self, name) for name in self.FIELDS]

    @staticmethod
    def from_arrays(limits: RuntimeLimits, arrays) -> "RuntimeState":
        """A view over arrays in ``FIELDS`` order (numpy arrays, or CPU tensors' .numpy())."""
        return RuntimeState(limits, **dict(zip(RuntimeState.FIELDS, arrays)))

    @property
    def batch_size(self) -> int:
        return int(self.pool_size.shape[0])

    def grown(self, limits: RuntimeLimits) -> "RuntimeState":
        """A copy in arrays sized for ``limits`` (every limit at least this state's, the same
        history): each field's contents in the leading corner. The pool index is copied as it
        is, so when ``pool_entries`` changed it must be rebuilt (``gxg.ops.reference.
        rebuild_pool_index``)."""
        mine = self.limits
        if limits.history != mine.history or any(
                getattr(limits, f) < getattr(mine, f) for f in GROWABLE.values()):
            raise ValueError(f"cannot grow a state with {mine} into {limits}")
        out = RuntimeState.allocate(self.batch_size, limits)
        for name in RuntimeState.FIELDS:
            src = getattr(self, name)
            getattr(out, name)[tuple(slice(0, n) for n in src.shape)] = src
        return out

    def copy_slot(self, src: int, dst: "RuntimeState", dst_slot: int) -> None:
        """Copy slot ``src`` of this state into ``dst_slot`` of ``dst`` (same limits)."""
        for name, value in self.__dict__.items():
            if isinstance(value, np.ndarray):
                getattr(dst, name)[dst_slot] = value[src]

    def stacks(self, slot: int):
        """The live stacks of a slot as node tuples (bottom first), in top order."""
        out = []
        for entry in self.tops[slot, : self.num_tops[slot]].tolist():
            nodes = []
            while entry >= 0:
                nodes.append(int(self.pool_node[slot, entry]))
                entry = int(self.pool_parent[slot, entry])
            out.append(tuple(reversed(nodes)))
        return out
