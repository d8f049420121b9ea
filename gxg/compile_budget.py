"""A deadline for one compilation (``GrammarCompiler(compile_timeout=...)``).

In:  seconds (None: no deadline) for the duration of a ``with within(seconds):`` block.
Out: ``check(stage)``: raises ``CompileTimeoutError`` (a ``GrammarError``) naming the stage once
     the deadline has passed. The stages call it at coarse points — per subschema of the JSON
     Schema converter, per grammar pass, per automaton rule, per batch of mask-cache nodes and
     per level of their vocabulary walk, per context pair — so it costs nothing measurable and
     a compilation stops within one such step of its deadline.

The deadline is a context variable (each thread, each task its own), not global state.
"""
from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager
from typing import Iterator, Optional, Tuple

from gxg.grammar.ir import GrammarError

_DEADLINE: "contextvars.ContextVar[Optional[Tuple[float, float]]]" = contextvars.ContextVar(
    "gxg_compile_deadline", default=None)


class CompileTimeoutError(GrammarError):
    """A compilation ran past its ``compile_timeout`` (the message says where it was)."""


@contextmanager
def within(seconds: Optional[float]) -> Iterator[None]:
    """Compilations inside the block stop with CompileTimeoutError ``seconds`` from now (an
    enclosing, earlier deadline still holds)."""
    if seconds is None:
        yield
        return
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"compile_timeout must be a positive number of seconds or None, "
                         f"got {seconds!r}")
    deadline = time.monotonic() + seconds
    outer = _DEADLINE.get()
    if outer is not None and outer[0] <= deadline:
        yield
        return
    token = _DEADLINE.set((deadline, float(seconds)))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check(stage: str, where: Optional[str] = None) -> None:
    """CompileTimeoutError if the current deadline has passed (``where``: a place within the
    stage, e.g. a JSON pointer; formatted only then)."""
    current = _DEADLINE.get()
    if current is not None and time.monotonic() > current[0]:
        place = stage if where is None else f"{stage}, at {where}"
        raise CompileTimeoutError(f"compilation stopped by compile_timeout={current[1]:g} s "
                                  f"(in {place})")
