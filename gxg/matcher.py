"""``GrammarMatcher`` (CPU, one request) and the bitmask helpers, with XGrammar's names.

In:  a ``CompiledGrammar``.
Out: a matcher whose state is one slot of the shared ``RuntimeState`` layout, advanced by the
     CPU reference ops (``gxg.ops.reference``) — the same ops the GPU batch runs as kernels.

Semantics follow XGrammar 0.2.8 (see the project's reference notes): a rejected token or
string changes nothing; every accepted token, string and stop token is one rollback step; a
stop token is accepted iff the root can complete; after it nothing is accepted and filling the
mask raises. Differences: rollback depth is bounded by ``max_rollback_tokens`` (default 64;
XGrammar keeps unlimited history), and the state's size is bounded: by default the matcher
starts with ``RuntimeLimits()`` and, when a step needs more parallel stacks, pool entries or
closure room, doubles that limit and takes the step again, up to ``max_state_bytes`` of state;
past that it replays the steps since its reset on Earley sets (``gxg.ops.earley_sets``: items
share what the stacks have in common, so a grammar whose distinct stacks are exponential in
the input still runs in polynomial time) and stays on them until its reset. A grammar with
token budgets cannot run on Earley sets: there, and with ``limits`` given (which are then
fixed), the step raises ``GrammarRuntimeError`` naming the limit, and the matcher stays as it
was. With the
lazy mask cache (the default) a node's token masks are computed when a fill first reaches it:
a grammar too ambiguous there (the compile-time limit of the eager cache) raises
``GrammarRuntimeError`` from that fill, and the matcher stays usable.
"""
from __future__ import annotations

import bisect
import functools
import os
import time
import warnings
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from gxg.draft_tree import draft_tree
from gxg.compile_budget import CompileTimeoutError
from gxg.grammar.ir import GrammarError
from gxg.grammar_compiler import CompiledGrammar
from gxg.ops import earley_sets, reference
from gxg.ops.earley_sets import STOP_STEP, EarleyParse, Step
from gxg.ops.apply_bitmask import apply_token_bitmask_inplace_cpu
from gxg.runtime import RuntimeLimits, RuntimeState

DEFAULT_ROLLBACK_TOKENS = 64
DEFAULT_MAX_STATE_BYTES = 2 << 20  # a growing matcher stops here (4,096 stacks at the default history)
bitmask_dtype = torch.int32


class GrammarRuntimeError(RuntimeError):
    """A runtime limit of the matcher was hit (the message names it)."""


def get_bitmask_shape(batch_size: int, vocab_size: int):
    return (batch_size, (vocab_size + 31) // 32)


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> torch.Tensor:
    """An int32 CPU bitmask with every token allowed (-1 words)."""
    return torch.full(get_bitmask_shape(batch_size, vocab_size), -1, dtype=bitmask_dtype)


def reset_token_bitmask(bitmask: torch.Tensor) -> None:
    bitmask.fill_(-1)


def apply_token_bitmask_inplace(logits: torch.Tensor, bitmask: torch.Tensor, *,
                                vocab_size: Optional[int] = None,
                                indices: Optional[Sequence[int]] = None) -> None:
    """Set logits of disallowed tokens to -inf with the reference implementation
    (``ops/apply_bitmask.py``); the CUDA kernel is ``torch.ops.xg.apply_token_bitmask_inplace``."""
    apply_token_bitmask_inplace_cpu(logits, bitmask, vocab_size=vocab_size, indices=indices)


class GrammarMatcher:
    def __init__(self, compiled_grammar: CompiledGrammar, *,
                 override_stop_tokens: Optional[Union[int, List[int]]] = None,
                 terminate_without_stop_token: bool = False,
                 max_rollback_tokens: int = -1,
                 limits: Optional[RuntimeLimits] = None,
                 max_state_bytes: int = DEFAULT_MAX_STATE_BYTES):
        if not isinstance(compiled_grammar, CompiledGrammar):
            raise TypeError("GrammarMatcher needs a CompiledGrammar")
        info = compiled_grammar.tokenizer_info
        if override_stop_tokens is None:
            stop_ids = list(info.stop_token_ids)
        else:
            stop_ids = ([override_stop_tokens] if isinstance(override_stop_tokens, int)
                        else list(override_stop_tokens))
            if not stop_ids:
                raise ValueError("override_stop_tokens must not be empty")
            bad = [t for t in stop_ids if not 0 <= t < info.vocab_size]
            if bad:
                raise ValueError(f"stop token ids out of range [0, {info.vocab_size}): {bad}")
        history = max_rollback_tokens if max_rollback_tokens > 0 else DEFAULT_ROLLBACK_TOKENS
        # limits given: fixed; none: RuntimeLimits() grown on demand up to max_state_bytes
        self._max_state_bytes = int(max_state_bytes) if limits is None else None
        limits = limits or RuntimeLimits()
        if limits.history != history:
            limits = RuntimeLimits(limits.max_stacks, limits.pool_entries, history,
                                   limits.max_closure)
        self._compiled = compiled_grammar
        self._stop_ids = stop_ids
        self._terminate_without_stop = terminate_without_stop_token
        self._tables = reference.host_tables(compiled_grammar, tuple(stop_ids))
        self._state = RuntimeState.allocate(1, limits)
        # Earley sets replace the stacks once they pass max_state_bytes (module docstring);
        # the steps since the reset are kept for that replay
        self._earley: Optional[EarleyParse] = None
        self._may_switch = self._max_state_bytes is not None and earley_sets.supports(
            self._tables)
        self._steps: List[Step] = []
        self.reset()

    # ------------------------------------------------------------------ properties
    @property
    def stop_token_ids(self) -> List[int]:
        return list(self._stop_ids)

    @property
    def max_rollback_tokens(self) -> int:
        return self._state.limits.history

    @property
    def compiled_grammar(self) -> CompiledGrammar:
        return self._compiled

    @property
    def state(self) -> RuntimeState:
        """The one-slot runtime state (read it, don't write it). A matcher on Earley sets has
        none (``on_earley_sets``)."""
        if self._earley is not None:
            raise GrammarRuntimeError(
                "this matcher runs on Earley sets (its parallel stacks passed "
                f"max_state_bytes={self._max_state_bytes:,}); it has no stack state to read "
                "or copy into a GrammarBatch")
        return self._state

    @property
    def on_earley_sets(self) -> bool:
        """Whether the matcher has moved from its parallel stacks to Earley sets (gxg's
        addition; module docstring)."""
        return self._earley is not None

    def _terminated(self) -> bool:
        """A stop token was accepted."""
        return self._earley.terminated if self._earley is not None \
            else bool(self._state.terminated[0])

    # ------------------------------------------------------------------ steps
    def accept_token(self, token_id: int, *, debug_print: bool = False) -> bool:
        if self._terminated():
            warnings.warn("the matcher has terminated (a stop token was accepted); "
                          "accept_token ignored")
            return False
        return self._accept(int(token_id))

    def _accept(self, token_id: int) -> bool:
        """One token on a matcher that has not terminated (no warning: the callers check)."""
        if self._terminate_without_stop and 0 <= token_id < self._tables.vocab_size \
                and self._tables.is_stop[token_id]:
            return False
        t = self._tables
        if 0 <= token_id < t.vocab_size and t.is_stop[token_id]:
            step = Step(b"", STOP_STEP)
            on_sets = EarleyParse.accept_stop
        elif not 0 <= token_id < t.vocab_size or t.special[token_id]:
            return False
        else:
            step = Step(t.decoded_vocab[token_id], token_id)
            on_sets = functools.partial(EarleyParse.accept_bytes, data=step.data,
                                        token_id=token_id)
        return self._logged(step, self._step(
            lambda: reference.accept_token(self._state, 0, t, token_id), on_sets))

    def accept_string(self, input_str: Union[str, bytes], *, debug_print: bool = False) -> bool:
        data = input_str.encode("utf-8") if isinstance(input_str, str) else bytes(input_str)
        if self._terminated():
            return False
        return self._logged(Step(data), self._step(
            lambda: reference.accept_bytes(self._state, 0, self._tables, data),
            functools.partial(EarleyParse.accept_bytes, data=data)))

    def _logged(self, step: Step, accepted: bool) -> bool:
        """Keep an accepted step for a later replay on Earley sets."""
        if accepted and self._may_switch:
            self._steps.append(step)
        return accepted

    def _step(self, op, on_sets):
        """Run a reference op (on Earley sets: ``on_sets(parse)``); when it hits a limit (the
        state is then as it was before), grow that limit and run it again, or move to Earley
        sets and run it there, or raise."""
        while self._earley is None:
            result = op()
            code = int(self._state.error[0])
            if not code:
                return result
            self._state.error[0] = 0  # the step was not taken; the matcher stays usable
            self._grow(code)
        return on_sets(self._earley)

    def _grow(self, code: int) -> None:
        """Grow the limit that ``code`` names, or move to Earley sets past max_state_bytes,
        or raise."""
        limits = self._state.limits
        message = limits.message(code)
        wider = limits.grown(code)
        if self._max_state_bytes is None or wider == limits:
            raise GrammarRuntimeError(message)
        if wider.state_bytes() > self._max_state_bytes:
            if self._may_switch:
                self._earley = EarleyParse.replay(self._tables, self._steps)
                return
            raise GrammarRuntimeError(
                f"{message}; the matcher's state already grew to {limits.state_bytes():,} "
                f"bytes and the next size ({wider.state_bytes():,}) is past max_state_bytes="
                f"{self._max_state_bytes:,} (a grammar with token budgets does not run on "
                f"Earley sets)")
        self._state = self._resized(self._state, wider)

    @staticmethod
    def _resized(state: RuntimeState, limits: RuntimeLimits) -> RuntimeState:
        if state.limits == limits:
            return state
        out = state.grown(limits)
        if limits.pool_entries != state.limits.pool_entries:
            reference.rebuild_pool_index(out, 0)
        return out

    def _restore(self, snapshot: "_Snapshot") -> None:
        """Back to a snapshot's state (taken before a step that may have grown the limits or
        moved to Earley sets)."""
        self._steps = list(snapshot.steps)
        self._earley = snapshot.earley.copy() if snapshot.earley is not None else None
        if snapshot.earley is not None:
            return
        snapshot = snapshot.state
        if snapshot.limits == self._state.limits:
            snapshot.copy_slot(0, self._state, 0)
        else:
            self._state = self._resized(snapshot, self._state.limits)

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, *,
                                debug_print: bool = False,
                                remaining_tokens: Optional[int] = None) -> bool:
        """Write the next-token mask into row ``index`` of ``bitmask``; returns whether it
        forbids anything (XGrammar's need_apply).

        ``remaining_tokens`` (gxg's addition; None: no budget): how many tokens may still be
        generated, this one included. The mask then allows only tokens after which the output
        can still be completed within the budget, counting a completion's bytes as tokens (so
        it stays exact for byte-level and byte-fallback vocabularies, where every byte is a
        token); when no completion fits any more, the grammar's mask is left as it is (the
        output will end incomplete). See ``gxg.ops.reference.restrict_to_budget``."""
        if remaining_tokens is not None and (isinstance(remaining_tokens, bool)
                                             or not isinstance(remaining_tokens, int)):
            raise TypeError(f"remaining_tokens must be an int or None, got "
                            f"{type(remaining_tokens).__name__}")
        if remaining_tokens is not None and remaining_tokens < 0:
            raise ValueError(f"remaining_tokens must be >= 0, got {remaining_tokens}")
        if self._terminated():
            raise RuntimeError("the matcher has terminated (a stop token was accepted); "
                               "roll back or reset before filling a mask")
        words = self._tables.words
        if bitmask.dtype != torch.int32 or bitmask.device.type != "cpu":
            raise ValueError(f"bitmask must be an int32 CPU tensor, got {bitmask.dtype} on "
                             f"{bitmask.device}")
        if bitmask.shape[-1] != words or bitmask.dim() not in (1, 2):
            raise ValueError(f"bitmask must have shape (batch, {words}) or ({words},), got "
                             f"{tuple(bitmask.shape)}")
        if bitmask.dim() == 1:
            if index != 0:
                raise IndexError("a 1-D bitmask has only index 0")
            target = bitmask
        else:
            if not 0 <= index < bitmask.shape[0]:
                raise IndexError(f"index {index} out of range for batch {bitmask.shape[0]}")
            target = bitmask[index]
        row = np.zeros(words, dtype=np.int32)
        need_apply = self._step(lambda: self._fill(row), functools.partial(self._fill_sets,
                                                                             row=row))
        if remaining_tokens is not None:
            if self._earley is not None:
                self._earley.restrict_to_budget(row, remaining_tokens)
            else:
                reference.restrict_to_budget(self._state, 0, self._tables, row,
                                             remaining_tokens)
            need_apply = not reference.all_allowed(row, self._tables.vocab_size)
        target.copy_(torch.from_numpy(row))
        return need_apply

    def _fill(self, row: np.ndarray) -> bool:
        try:
            return reference.fill_next_token_bitmask(self._state, 0, self._tables, row)
        except GrammarError as error:  # a node's lazy mask entry could not be computed
            raise _entry_failed(error) from error

    def _fill_sets(self, parse: EarleyParse, row: np.ndarray) -> bool:
        try:
            parse.fill(row)
        except CompileTimeoutError:
            raise
        except GrammarError as error:
            raise _entry_failed(error) from error
        return not reference.all_allowed(row, self._tables.vocab_size)

    def completion_distance(self) -> int:
        """The fewest bytes the output still needs before the root can end (0 when it can end
        now): how many tokens a budget must at least leave (gxg's addition)."""
        if self._earley is not None:
            return self._earley.completion_distance()
        if self._state.can_end[0] or self._state.terminated[0]:
            return 0
        completion = self._tables.completion
        return min((completion.stack_distance(stack) for stack in self._state.stacks(0)),
                   default=0)

    def is_completed(self) -> bool:
        """The input so far is a complete sentence of the root rule."""
        if self._earley is not None:
            return self._earley.can_end or self._earley.terminated
        return bool(self._state.can_end[0]) or bool(self._state.terminated[0])

    def is_terminated(self) -> bool:
        if self._terminate_without_stop:
            return self.is_completed()
        return self._terminated()

    def reset(self) -> None:
        self._earley = None
        self._steps = []
        self._step(lambda: reference.reset(self._state, 0, self._tables), lambda parse: None)

    def rollback(self, num_tokens: int = 1) -> None:
        num_tokens = int(num_tokens)
        history = self._state.limits.history
        kept = (min(self._earley.num_steps, history) if self._earley is not None
                else int(self._state.hist_len[0]))
        if not 0 <= num_tokens <= kept:
            raise RuntimeError(
                f"cannot roll back {num_tokens} tokens: {kept} steps are in the history (at "
                f"most max_rollback_tokens={history} are kept)")
        if self._earley is not None:
            self._earley.rollback(num_tokens)
        else:
            reference.rollback(self._state, 0, num_tokens)
        if self._may_switch and num_tokens:
            del self._steps[-num_tokens:]

    def fork(self) -> "GrammarMatcher":
        twin = object.__new__(GrammarMatcher)
        twin.__dict__.update(self.__dict__)
        twin._state = RuntimeState.allocate(1, self._state.limits)  # its own, even if unused
        self._state.copy_slot(0, twin._state, 0)
        twin._earley = self._earley.copy() if self._earley is not None else None
        twin._steps = list(self._steps)
        return twin

    # ------------------------------------------------------------------ speculative decoding
    def traverse_draft_tree(self, retrieve_next_token: torch.Tensor,
                            retrieve_next_sibling: torch.Tensor, draft_tokens: torch.Tensor,
                            token_bitmask: torch.Tensor, time_threshold: float = -1.0,
                            temperatures: Optional[torch.Tensor] = None) -> bool:
        """Fill row i of ``token_bitmask`` ([N, ceil(V/32)] int32, CPU) with the mask after the
        draft tokens on the path from the root to node i (``gxg.draft_tree`` says how the
        three arrays describe the tree; the root's row is the mask of the current state).
        XGrammar 0.2.8's semantics: a node whose token is rejected, or after which the matcher
        has terminated, gets a zero row and its subtree is not visited (those rows are left
        as they were); a terminated matcher's root row is zero. The state is unchanged
        afterwards. ``time_threshold`` (seconds, <= 0: none) stops the traversal when it is
        exceeded before a non-root node and returns False (rows not reached are left as they
        were); else True. ``temperatures`` (1-D float32 CPU, at least N): -1 for every node, as
        XGrammar writes where no temperature is configured (gxg grammars configure none)."""
        tree = draft_tree(retrieve_next_token, retrieve_next_sibling, draft_tokens)
        words = self._tables.words
        if not isinstance(token_bitmask, torch.Tensor) or token_bitmask.dtype != torch.int32 \
                or token_bitmask.device.type != "cpu" or token_bitmask.dim() != 2 \
                or tuple(token_bitmask.shape) != (tree.num_nodes, words):
            raise RuntimeError(f"token_bitmask must be an int32 CPU tensor of shape "
                               f"({tree.num_nodes}, {words}), one row per draft node, got "
                               f"{getattr(token_bitmask, 'dtype', type(token_bitmask).__name__)}"
                               f" {tuple(getattr(token_bitmask, 'shape', ()))}")
        if temperatures is not None:
            if not isinstance(temperatures, torch.Tensor) or temperatures.dtype != torch.float32 \
                    or temperatures.dim() != 1 or temperatures.device.type != "cpu" \
                    or temperatures.shape[0] < tree.num_nodes:
                raise RuntimeError(f"temperatures must be a 1-D float32 CPU tensor of at least "
                                   f"{tree.num_nodes} entries")
            temperatures[: tree.num_nodes] = -1.0
        deadline = time.perf_counter() + time_threshold if time_threshold > 0 else None
        start = self._snapshot()
        try:
            return self._traverse(tree, token_bitmask, deadline)
        finally:
            self._restore(start)

    def _snapshot(self) -> "_Snapshot":
        if self._earley is not None:
            return _Snapshot(None, self._earley.copy(), list(self._steps))
        copy = RuntimeState.allocate(1, self._state.limits)
        self._state.copy_slot(0, copy, 0)
        return _Snapshot(copy, None, list(self._steps))

    def _traverse(self, tree, token_bitmask: torch.Tensor, deadline: Optional[float]) -> bool:
        """Depth first; the state of a node with several children is kept once, to start each
        child after the first from it (a chain copies nothing)."""
        if self.is_terminated():
            token_bitmask[0].zero_()
            return True
        frames = []

        def enter(node: int) -> None:  # the state is the node's
            self.fill_next_token_bitmask(token_bitmask, node)
            kids = tree.children[node]
            frames.append([kids, 0, self._snapshot() if len(kids) > 1 else None])

        enter(0)
        while frames:
            kids, i, saved = frames[-1]
            if i == len(kids):
                frames.pop()
                continue
            frames[-1][1] = i + 1
            if deadline is not None and time.perf_counter() > deadline:
                return False
            if i > 0:
                self._restore(saved)
            child = kids[i]
            if self._accept_draft_token(tree.tokens[child]) and not self.is_terminated():
                enter(child)
            else:
                token_bitmask[child].zero_()
        return True

    def _accept_draft_token(self, token_id: int) -> bool:
        """accept_token without its warning: a draft token outside the vocabulary is rejected."""
        if self._terminated() or not 0 <= token_id < self._tables.vocab_size:
            return False
        return self._accept(token_id)

    def find_jump_forward_string(self) -> str:
        """The longest string every continuation must start with, cut to whole UTF-8
        characters (state unchanged)."""
        if self._terminated():
            raise RuntimeError("the matcher has terminated (a stop token was accepted)")
        return _longest_utf8_prefix(self._forced_bytes())

    def find_jump_forward_tokens(self) -> List[int]:
        """Token ids to accept for jump-forward decoding (XGrammar 0.2.9): the bytes every
        continuation must start with (uncut), split greedily from their start into the longest
        ordinary tokens (no stop or special token; of tokens with the same bytes the lowest
        id) until no token matches; the last is dropped when a longer ordinary token starts
        with it (the model could write that one instead). Empty when the matcher has completed
        or terminated. State unchanged."""
        if self._terminated() or self.is_completed():
            return []
        info = self._compiled.tokenizer_info
        return _jump_forward_vocab(info, tuple(sorted(set(self._stop_ids)))).split(
            self._forced_bytes())

    def _forced_bytes(self) -> bytes:
        probe = self.fork()
        forced = bytearray()
        while not probe.is_completed():
            candidates = (probe._earley.next_bytes() if probe._earley is not None
                          else _next_bytes(probe._state, self._tables))
            if len(candidates) != 1 or not probe.accept_string(bytes(candidates)):
                break
            forced.extend(candidates)
        return bytes(forced)


class BatchGrammarMatcher:
    """XGrammar 0.2.8's batch API over CPU ``GrammarMatcher``s: fill the masks of many
    matchers (on up to ``max_threads`` threads: the CPU ops release the GIL in their numpy
    parts), accept tokens or strings and roll back, one call each. Size mismatches and bad
    rows are RuntimeErrors naming them, as in XGrammar."""

    def __init__(self, max_threads: Union[int, str] = "auto") -> None:
        if max_threads == "auto":
            max_threads = max(1, (os.cpu_count() or 2) // 2)
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise RuntimeError(f"max_threads must be a positive int or 'auto', got "
                               f"{max_threads!r}")
        self.max_threads = max_threads
        self._pool: Optional[ThreadPoolExecutor] = None

    def batch_fill_next_token_bitmask(self, matchers: List[GrammarMatcher],
                                      bitmask: torch.Tensor,
                                      indices: Optional[List[int]] = None,
                                      debug_print: bool = False) -> None:
        """Matcher k fills row ``indices[k]`` (default k) of ``bitmask`` (int32 CPU, [rows,
        ceil(V/32)]; rows may exceed the matchers: padding is left alone)."""
        rows = _batch_indices(len(matchers), indices)
        if not isinstance(bitmask, torch.Tensor) or bitmask.dim() != 2:
            raise RuntimeError("bitmask must be a 2-D int32 CPU tensor")
        bad = next((r for r in rows if not 0 <= r < bitmask.shape[0]), None)
        if bad is not None:
            raise RuntimeError(f"row {bad} is outside the bitmask's {bitmask.shape[0]} rows")
        if len(set(rows)) != len(rows):
            raise RuntimeError("a bitmask row is assigned to more than one matcher")

        def fill(k: int) -> None:
            try:
                matchers[k].fill_next_token_bitmask(bitmask, rows[k])
            except ValueError as error:  # the matcher's own check of the bitmask
                raise RuntimeError(str(error)) from error

        if self.max_threads == 1 or len(matchers) < 2:
            for k in range(len(matchers)):
                fill(k)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_threads, thread_name_prefix="gxg-batch")
        for future in [self._pool.submit(fill, k) for k in range(len(matchers))]:
            future.result()

    @staticmethod
    def batch_fill_temperature(matchers: List[GrammarMatcher], temperatures: torch.Tensor,
                               indices: Optional[List[int]] = None) -> None:
        """-1 at each matcher's position (``indices[k]``, default k): gxg grammars configure
        no sampling temperature (XGrammar writes -1 for those)."""
        positions = _batch_indices(len(matchers), indices)
        if not isinstance(temperatures, torch.Tensor) or temperatures.dtype != torch.float32 \
                or temperatures.dim() != 1 or temperatures.device.type != "cpu":
            raise RuntimeError("temperatures must be a 1-D float32 CPU tensor")
        bad = next((p for p in positions if not 0 <= p < temperatures.shape[0]), None)
        if bad is not None:
            raise RuntimeError(f"position {bad} is outside temperatures' "
                               f"{temperatures.shape[0]} entries")
        for p in positions:
            temperatures[p] = -1.0

    @staticmethod
    def batch_accept_token(matchers: List[GrammarMatcher], tokens: List[int],
                           debug_print: bool = False) -> List[bool]:
        _same_length(matchers, tokens, "token_ids")
        return [m.accept_token(int(t)) for m, t in zip(matchers, tokens)]

    @staticmethod
    def batch_accept_string(matchers: List[GrammarMatcher], strings: List[Union[str, bytes]],
                            debug_print: bool = False) -> List[bool]:
        _same_length(matchers, strings, "strings")
        return [m.accept_string(text) for m, text in zip(matchers, strings)]

    @staticmethod
    def batch_rollback(matchers: List[GrammarMatcher],
                       num_tokens: Union[List[int], int] = 1) -> None:
        counts = [num_tokens] * len(matchers) if isinstance(num_tokens, int) else num_tokens
        _same_length(matchers, counts, "num_tokens")
        for m, n in zip(matchers, counts):
            m.rollback(int(n))


@dataclass(frozen=True)
class _Snapshot:
    """A matcher's parse state: its stacks' slot or its Earley sets, and the steps since its
    reset."""
    state: Optional[RuntimeState]
    earley: Optional[EarleyParse]
    steps: List[Step]


def _entry_failed(error: GrammarError) -> GrammarRuntimeError:
    return GrammarRuntimeError(f"the token mask of a node this step reaches cannot be "
                               f"computed: {error}")


def _same_length(matchers, values, name: str) -> None:
    if len(values) != len(matchers):
        raise RuntimeError(f"the size of matchers ({len(matchers)}) and {name} "
                           f"({len(values)}) should be the same")


def _batch_indices(count: int, indices: Optional[List[int]]) -> List[int]:
    if indices is None:
        return list(range(count))
    if len(indices) != count:
        raise RuntimeError(f"the size of indices ({len(indices)}) should be the same as the "
                           f"size of matchers ({count})")
    return [int(i) for i in indices]


def _next_bytes(state: RuntimeState, tables) -> List[int]:
    """Bytes that some live top can scan next."""
    nodes = state.pool_node[0][state.tops[0, : state.num_tops[0]]]
    classes = np.nonzero((tables.automaton.next_node[nodes] >= 0).any(axis=0))[0]
    return np.nonzero(np.isin(tables.automaton.byte_class, classes))[0].tolist()


class _JumpForwardVocab:
    """The ordinary tokens of a vocabulary by their bytes, for ``find_jump_forward_tokens``."""

    def __init__(self, info, excluded: Sequence[int]):
        skip = set(excluded) | set(info.stop_token_ids) | set(info.special_token_ids)
        self.ids: dict = {}  # bytes -> the lowest ordinary id with them
        for token_id, data in enumerate(info.decoded_vocab):
            if data and token_id not in skip:
                self.ids.setdefault(data, token_id)
        self.longest = max(map(len, self.ids), default=0)
        self.sorted = sorted(self.ids)

    def split(self, forced: bytes) -> List[int]:
        out: List[int] = []
        start, last = 0, b""
        while start < len(forced):
            for length in range(min(self.longest, len(forced) - start), 0, -1):
                token = self.ids.get(forced[start: start + length])
                if token is not None:
                    break
            else:
                break
            out.append(token)
            last = forced[start: start + length]
            start += length
        if out and self._extended(last):
            out.pop()
        return out

    def _extended(self, data: bytes) -> bool:
        """Does a longer ordinary token start with ``data`` (the tokens that do sort right
        after it)?"""
        following = bisect.bisect_right(self.sorted, data)
        return following < len(self.sorted) and self.sorted[following].startswith(data)


@functools.lru_cache(maxsize=8)  # a cache: per vocabulary and stop ids (~0.1 s for 150k tokens)
def _jump_forward_vocab(info, stop_ids: Tuple[int, ...]) -> _JumpForwardVocab:
    return _JumpForwardVocab(info, stop_ids)


def _longest_utf8_prefix(data: bytes) -> str:
    """The longest prefix of ``data`` made of whole UTF-8 characters: it stops before a
    character cut at the end, and is empty when ``data`` starts inside one (after a token that
    split a character), as XGrammar 0.2.9 answers (never bytes skipped: the text must be what
    every continuation starts with)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        return data[:error.start].decode("utf-8")
