"""transformers integration: ``LogitsProcessor`` constrains ``model.generate`` to grammars.

In:  one ``CompiledGrammar`` for every row of the batch, or a list with one per row (all
     compiled for one ``TokenizerInfo``); then, step by step, what transformers passes a logits
     processor: ``input_ids`` [B, L] and ``scores`` [B, V].
Out: ``scores`` masked in place (and returned): -inf for every token that row's grammar does
     not allow next.

    info = gxg.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    compiler = gxg.GrammarCompiler(info)
    processor = LogitsProcessor([compiler.compile_regex("(yes|no)"),
                                 compiler.compile_json_schema(schema)])
    out = model.generate(**inputs, logits_processor=[processor], max_new_tokens=64)

How rows are followed: the first call starts every row on its grammar and masks; every later
call first accepts the token the previous step appended (``input_ids[:, -1]``), then masks.
A processor therefore follows one ``generate`` call: make a new one (or ``reset()`` it) for the
next. Rows that finished (their stop token was accepted) allow only their stop tokens, and the
padding transformers appends to finished rows is ignored.

Backends (``backend=``):
  * ``"matcher"`` (the default for CPU scores): one ``GrammarMatcher`` per row; masks are filled
    on the host and applied with ``gxg.apply_token_bitmask_inplace`` (copied to the scores'
    device first if that is not the CPU — XGrammar's way);
  * ``"batch"`` (the default for CUDA scores): a ``GrammarBatch`` with ``max_batch = B`` on the
    scores' device; accept, fill and apply are ``torch.ops.xg`` ops on device tensors, so no
    mask and no token is copied to or from the host.

Refused, with an error rather than wrong masks: beam search (``num_beams > 1``) and assisted
generation, which reorder or rewind rows between calls, and a list of grammars whose length is
not the batch size (``num_beams`` and ``num_return_sequences`` multiply the rows; sampling
with ``num_return_sequences`` works with a single grammar). Every call must extend the previous
``input_ids`` by one column; with ``check_rows=True`` (default) the previous last column must
also still be there in every row (a beam reorder moves it) and every sampled token must have
been allowed (another processor undoing the mask would break that). On the batch backend
these checks cost two small device reads per step (transformers' own stopping checks read the
device every step too); ``check_rows=False`` leaves the processor's step free of host
synchronisation, and ``raise_on_errors()`` then checks on demand.

Token budget: with ``max_new_tokens=n`` (pass the same number as to ``generate``) every row's
mask allows only tokens after which its output can still be completed within the tokens left,
so a row that runs out of tokens ends with complete text whenever that is possible
(``GrammarMatcher.fill_next_token_bitmask(remaining_tokens=...)`` on the matcher backend, the
batch's ``token_budget`` on the device). Without it a row may stop mid-value at the limit.

Stop tokens: transformers ends a row on ``generation_config.eos_token_id``; the grammar ends it
on the ``TokenizerInfo``'s stop tokens (by default the tokenizer's eos). Keep them the same, or a
row whose grammar ended produces stop tokens until ``max_new_tokens``.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import numpy as np
import torch
import transformers

from gxg.layout import bitmask_words
from gxg.ops import xg_ops  # registers torch.ops.xg
from gxg.grammar_compiler import CompiledGrammar
from gxg.matcher import (GrammarMatcher, GrammarRuntimeError, allocate_token_bitmask,
                         apply_token_bitmask_inplace)

__all__ = ["LogitsProcessor", "BACKENDS", "bitmask_row_of"]

BACKENDS = ("auto", "matcher", "batch")


def bitmask_row_of(token_ids: Sequence[int], vocab_size: int) -> torch.Tensor:
    """An int32 bitmask row (CPU) that allows exactly ``token_ids``."""
    words = np.zeros(bitmask_words(vocab_size), dtype=np.uint32)
    ids = np.asarray(token_ids, dtype=np.int64)
    np.bitwise_or.at(words, ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))
    return torch.from_numpy(words.view(np.int32))  # bit 31 set reads as a negative int32


def _apply(scores: torch.Tensor, bitmask: torch.Tensor, vocab_size: int) -> None:
    """Mask ``scores`` [B, V_scores] with ``bitmask`` (same device); ids at or past
    ``vocab_size`` are never allowed (a model head wider than the tokenizer)."""
    width = min(scores.shape[1], vocab_size)
    if scores.device.type == "cpu":
        apply_token_bitmask_inplace(scores, bitmask, vocab_size=width)
    elif torch.compiler.is_compiling():
        torch.ops.xg.apply_token_bitmask_inplace(scores[:, :width], bitmask)
    else:  # the op's kernel launched directly: no dispatcher layers (GrammarBatch does so too)
        xg_ops.CUDA_KERNELS["apply_token_bitmask_inplace"](scores[:, :width], bitmask)
    if scores.shape[1] > vocab_size:
        scores[:, vocab_size:] = float("-inf")


def _reordered_error() -> ValueError:
    return ValueError("the rows of input_ids were reordered between calls (beam search, "
                      "num_beams > 1?); gxg's LogitsProcessor supports greedy decoding and "
                      "sampling only")


class _MatcherRows:
    """One ``GrammarMatcher`` per row; masks filled on the host."""

    def __init__(self, grammars: Sequence[CompiledGrammar], device: torch.device,
                 max_new_tokens: Optional[int]):
        info = grammars[0].tokenizer_info
        self.vocab_size = info.vocab_size
        self.device = device
        self.matchers = [GrammarMatcher(grammar) for grammar in grammars]
        self.remaining = [max_new_tokens] * len(grammars)  # None: no budget
        self.bitmask = allocate_token_bitmask(len(grammars), self.vocab_size)
        self.stop_only = [bitmask_row_of(m.stop_token_ids, self.vocab_size)
                          for m in self.matchers]

    def accept(self, tokens: torch.Tensor) -> None:
        for row, (matcher, token) in enumerate(zip(self.matchers, tokens.tolist())):
            if matcher.is_terminated():
                continue  # transformers keeps stepping finished rows with padding
            if not matcher.accept_token(token):
                raise RuntimeError(
                    f"row {row}: token {token} was sampled but the grammar does not allow it; "
                    "the mask must be the last change to the scores before sampling")
            if self.remaining[row] is not None:
                self.remaining[row] = max(self.remaining[row] - 1, 0)

    def fill(self) -> torch.Tensor:
        for row, matcher in enumerate(self.matchers):
            if matcher.is_terminated():
                self.bitmask[row] = self.stop_only[row]
            else:
                matcher.fill_next_token_bitmask(self.bitmask, row,
                                                remaining_tokens=self.remaining[row])
        return self.bitmask.to(self.device)

    def fill_and_apply(self, scores: torch.Tensor) -> torch.Tensor:
        bitmask = self.fill()
        _apply(scores, bitmask, self.vocab_size)
        return bitmask

    def is_terminated(self) -> torch.Tensor:
        return torch.tensor([m.is_terminated() for m in self.matchers], device=self.device)

    def check(self, reordered: Optional[torch.Tensor] = None) -> None:
        # the matchers raise at once (rejected token, runtime limit); the order was checked
        # before the accept (``LogitsProcessor.__call__``)
        pass


class _BatchRows:
    """A ``GrammarBatch`` with one slot per row; every step is device ops."""

    def __init__(self, grammars: Sequence[CompiledGrammar], device: torch.device,
                 max_new_tokens: Optional[int]):
        from gxg.batch import GrammarBatch

        info = grammars[0].tokenizer_info
        self.vocab_size = info.vocab_size
        self.batch = GrammarBatch(info, device=device, max_batch=len(grammars))
        for slot, grammar in enumerate(grammars):
            self.batch.bind(slot, grammar, max_tokens=max_new_tokens)
        self.bitmask = torch.empty((len(grammars), bitmask_words(self.vocab_size)),
                                   dtype=torch.int32, device=device)
        # Rows whose sampled token the grammar refused; read only by check() (a device read).
        self.rejected = torch.zeros(len(grammars), dtype=torch.bool, device=device)
        self.tokens = torch.zeros(len(grammars), dtype=torch.int64, device=device)

    def accept(self, tokens: torch.Tensor) -> None:
        # the tokens go to a buffer of fixed address, so that eagerly on CUDA the step below is
        # one replay of a graph (GrammarBatch.replay_cached) instead of ~7 launches
        self.tokens.copy_(tokens)

        def step():
            finished = self.batch.is_terminated()  # finished rows refuse their padding
            accepted = self.batch.accept(self.tokens)
            self.rejected.logical_or_(accepted.logical_or_(finished).logical_not_())

        if not self.batch.replay_cached(("processor accept", self.batch._budgeted), step):
            step()

    def fill(self) -> torch.Tensor:
        return self.batch.fill_next_token_bitmask(self.bitmask)

    def fill_and_apply(self, scores: torch.Tensor) -> torch.Tensor:
        # fill into the processor's own bitmask (a buffer of fixed address: eagerly on CUDA the
        # batch replays a graph of the fill), then mask the scores (new every step)
        _apply(scores, self.fill(), self.vocab_size)
        return self.bitmask

    def is_terminated(self) -> torch.Tensor:
        return self.batch.is_terminated()

    def check(self, reordered: Optional[torch.Tensor] = None) -> None:
        """Raise for the first of: rows reordered (``reordered``: bool, one element, on the
        device), a rejected token, a runtime limit; one device read for all three."""
        errors = self.batch.error_codes()
        flags = [self.rejected.any(), (errors != 0).any()]
        if reordered is not None:
            flags.append(reordered.reshape(()))
        rejected, failed, *moved = torch.stack(flags).tolist()
        if moved and moved[0]:
            raise _reordered_error()
        if rejected:
            rows = torch.nonzero(self.rejected).flatten().tolist()
            raise RuntimeError(f"rows {rows}: the sampled token was not allowed by the grammar; "
                               "the mask must be the last change to the scores before sampling")
        if failed:
            codes = errors.tolist()
            raise GrammarRuntimeError("; ".join(f"row {row}: {self.batch.limits.message(code)}"
                                         for row, code in enumerate(codes) if code))


class LogitsProcessor(transformers.LogitsProcessor):
    """Masks ``model.generate``'s scores with compiled grammars, one per batch row (see the
    module docstring for the contract).

    ``compiled_grammars``: one ``CompiledGrammar`` (every row) or a list (row i gets item i).
    ``backend``: ``"auto"`` (matchers for CPU scores, ``GrammarBatch`` otherwise),
    ``"matcher"`` or ``"batch"``. ``check_rows``: verify every step that rows were not reordered
    and every sampled token was allowed. ``max_new_tokens``: the token budget of every row (the
    ``generate`` call's ``max_new_tokens``): outputs complete within it whenever they can;
    None: no budget.
    """

    def __init__(self, compiled_grammars: Union[CompiledGrammar, Sequence[CompiledGrammar]], *,
                 backend: str = "auto", check_rows: bool = True,
                 max_new_tokens: Optional[int] = None):
        single = isinstance(compiled_grammars, CompiledGrammar)
        grammars = [compiled_grammars] if single else list(compiled_grammars)
        if not grammars or not all(isinstance(g, CompiledGrammar) for g in grammars):
            raise TypeError("LogitsProcessor needs a CompiledGrammar or a non-empty list of them")
        info = grammars[0].tokenizer_info
        if any(g.tokenizer_info is not info for g in grammars):
            raise ValueError("all grammars must be compiled for the same TokenizerInfo")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if max_new_tokens is not None and (isinstance(max_new_tokens, bool)
                                           or not isinstance(max_new_tokens, int)
                                           or max_new_tokens < 1):
            raise ValueError(f"max_new_tokens must be a positive int or None, got "
                             f"{max_new_tokens!r}")
        self.max_new_tokens = max_new_tokens
        self.grammars = grammars
        self.one_grammar_for_all_rows = single
        self.backend = backend
        self.check_rows = check_rows
        self.vocab_size = info.vocab_size
        self.stop_token_ids = list(info.stop_token_ids)
        self.reset()

    def reset(self) -> None:
        """Forget the rows: the next call starts a new generation."""
        self._rows: Optional[Union[_MatcherRows, _BatchRows]] = None
        self._grammars_per_row: List[CompiledGrammar] = []
        self._length = 0  # input_ids columns at the last call
        self._last_tokens: Optional[torch.Tensor] = None  # input_ids[:, -1] at the last call

    # ------------------------------------------------------------------ transformers' call
    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if self._rows is None:
            self.start(input_ids.shape[0], scores.device)
        else:
            self._check_continues(input_ids)
            reordered = None
            if self.check_rows:  # read with the batch's own checks: one device read a step
                reordered = (input_ids[:, -2] != self._last_tokens).any()
                if isinstance(self._rows, _MatcherRows) and bool(reordered):
                    raise _reordered_error()  # before the matchers refuse the token
            self.accept(input_ids[:, -1])
            if self.check_rows:
                self._rows.check(reordered)  # reordered rows, a rejected token, a limit
        self._length = input_ids.shape[1]
        if self.check_rows:
            self._last_tokens = input_ids[:, -1].clone()
        self.fill_and_apply(scores)
        return scores

    def _check_continues(self, input_ids: torch.Tensor) -> None:
        if input_ids.shape[0] != self.batch_size or input_ids.shape[1] != self._length + 1:
            raise ValueError(
                f"input_ids went from {self.batch_size}x{self._length} to "
                f"{tuple(input_ids.shape)} between calls; a gxg LogitsProcessor follows one "
                "generate call one token at a time (make a new one, or reset() it, per call; "
                "assisted generation is not supported)")

    # ------------------------------------------------------------------ step API
    # ``__call__`` is start/accept + fill_and_apply; a hand-written decode loop can call these
    # directly (gxg.generate does).
    @property
    def active_backend(self) -> Optional[str]:
        """"matcher" or "batch" once started (``backend="auto"`` resolved), else None."""
        if self._rows is None:
            return None
        return "matcher" if isinstance(self._rows, _MatcherRows) else "batch"

    @property
    def batch_size(self) -> int:
        return 0 if self._rows is None else len(self._grammars_per_row)

    def start(self, batch_size: int, device: Union[str, torch.device]) -> None:
        """Start ``batch_size`` rows on their grammars, on ``device`` (where the scores are)."""
        if self.one_grammar_for_all_rows:
            per_row = self.grammars * batch_size
        elif len(self.grammars) == batch_size:
            per_row = self.grammars
        else:
            raise ValueError(
                f"{len(self.grammars)} grammars for a batch of {batch_size} rows: pass one "
                "grammar per row (num_beams > 1 and num_return_sequences > 1 multiply the rows; "
                "beam search is not supported)")
        device = torch.device(device)
        backend = self.backend
        if backend == "auto":
            backend = "matcher" if device.type == "cpu" else "batch"
        self._grammars_per_row = per_row
        self._rows = (_MatcherRows if backend == "matcher" else _BatchRows)(
            per_row, device, self.max_new_tokens)

    def accept(self, tokens: torch.Tensor) -> None:
        """Advance every unfinished row by its token (int [B]); finished rows ignore theirs."""
        self._started().accept(tokens)

    def fill_and_apply(self, scores: torch.Tensor) -> torch.Tensor:
        """Mask ``scores`` [B, V] in place; returns the bitmask used (int32 [B, ceil(V/32)], on
        the scores' device). Starts the rows first if nothing has."""
        if self._rows is None:
            self.start(scores.shape[0], scores.device)
        return self._rows.fill_and_apply(scores)

    def fill_bitmask(self) -> torch.Tensor:
        """The rows' next-token bitmask, without applying it."""
        return self._started().fill()

    def is_terminated(self) -> torch.Tensor:
        """bool [B]: the row's stop token was accepted."""
        return self._started().is_terminated()

    def raise_on_errors(self) -> None:
        """Raise if a row hit a runtime limit (``GrammarRuntimeError``) or accepted a token its
        grammar refused (``RuntimeError``). The matchers raise at once; the batch ops only
        record it on the device, so this reads it (one device read)."""
        self._started().check()

    def _started(self):
        if self._rows is None:
            raise RuntimeError("the processor has not started: call start() or fill_and_apply()")
        return self._rows
