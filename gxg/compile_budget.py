"""Checkpoints of long host work: a deadline for one compilation
(``GrammarCompiler(compile_timeout=...)``), and courtesy to other threads for work done in the
background.

In:  seconds (None: no deadline) for the duration of a ``with within(seconds):`` block; a
     ``with yielding(period):`` block around work on a background thread.
Out: ``check(stage)``: raises ``CompileTimeoutError`` (a ``GrammarError``) naming the stage once
     the deadline has passed. The stages call it at coarse points — per subschema of the JSON
     Schema converter, per grammar pass, per automaton rule, per batch of mask-cache nodes and
     per level of their vocabulary walk, per context pair — so it costs nothing measurable and
     a compilation stops within one such step of its deadline. Inside ``yielding``, ``check``
     also lets the other threads run (``time.sleep(0)`` gives up the interpreter lock) once
     ``period`` has passed since it last did: a thread that is building mask entries while the
     decode loop steps then holds up the loop's Python for about ``period``, not for the
     interpreter's switch interval (5 ms by default) each time the loop wants the lock back.

The deadline and the yielding period are context variables (each thread, each task its own),
not global state.
"""
from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager
from typing import Iterator, Optional, Tuple

from gxg.grammar.ir import GrammarError

_DEADLINE: "contextvars.ContextVar[Optional[Tuple[float, float]]]" = contextvars.ContextVar(
    "gxg_compile_deadline", default=None)


# (period, monotonic time of the last yield) while inside ``yielding``
_YIELD: "contextvars.ContextVar[Optional[list]]" = contextvars.ContextVar("gxg_yield",
                                                                          default=None)


@contextmanager
def yielding(period: float = 0.0002) -> Iterator[None]:
    """Inside the block, ``check`` gives up the interpreter lock every ``period`` seconds."""
    token = _YIELD.set([period, time.monotonic()])
    try:
        yield
    finally:
        _YIELD.reset(token)


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
    courtesy = _YIELD.get()
    if courtesy is not None and time.monotonic() - courtesy[1] > courtesy[0]:
        time.sleep(0)
        courtesy[1] = time.monotonic()
    current = _DEADLINE.get()
    if current is not None and time.monotonic() > current[0]:
        raise timed_out(stage, where)


def seconds_left() -> Optional[float]:
    """Seconds before the current deadline (0 once past it), None without one: for work that
    watches the clock itself (the C kernels of ``gxg.native``)."""
    current = _DEADLINE.get()
    return None if current is None else max(current[0] - time.monotonic(), 0.0)


def timed_out(stage: str, where: Optional[str] = None) -> CompileTimeoutError:
    """The error ``check`` raises past the deadline, for work that found it passed by its own
    clock."""
    current = _DEADLINE.get()
    limit = f"{current[1]:g}" if current is not None else "?"
    place = stage if where is None else f"{stage}, at {where}"
    return CompileTimeoutError(f"compilation stopped by compile_timeout={limit} s (in {place})")
