"""Builders of a lazily registered grammar's mask entries, off the decode loop (``GrammarBatch``
with ``lazy_masks``).

In:  a ``CompiledGrammar`` whose arena registration lacks entries.
Out: a ``Future`` of its ``MaskEntries`` (``gxg.arena.mask_entries``: every entry, the slow
     part of a registration: ~0.5 ms of Python per node with Qwen's vocabulary), which
     ``GrammarBatch.commit_masks`` copies into the arena between steps.

Two kinds, one submit:
* ``ThreadBuilder``: one daemon thread, builds one at a time in submission order, giving up
  the interpreter lock every 0.2 ms (``compile_budget.yielding``). Its Python still shares
  the interpreter with the decode loop.
* ``ProcessBuilder``: one worker process per tokenizer (spawned, so it never inherits a CUDA
  context), shared by every batch of the process (a cache that says so). The parent sends the
  automaton (~0.3 ms to pickle for a BFCL schema; the tokenizer once, when the worker starts)
  and unpickles the entries (~0.3 ms); the walk itself holds no lock of the decode loop's.
  The worker's first start imports gxg (seconds); builds wait for it. At exit the worker is
  terminated: a process done decoding does not wait for a build. Opt-in
  (``GrammarBatch(mask_builder="process")``): spawning re-imports the caller's main module in
  the worker, so a script must keep its work under ``if __name__ == "__main__":`` (the usual
  rule of Python's spawn start method), which a library cannot assume of every caller.
"""
from __future__ import annotations

import multiprocessing
import queue
import threading
import weakref
from concurrent.futures import Future, ProcessPoolExecutor

from gxg import compile_budget
from gxg.arena import MaskEntries, mask_entries
from gxg.compiler.mask_cache import build_mask_cache
from gxg.grammar_compiler import CompiledGrammar, token_trie
from gxg.tokenizer import TokenizerInfo


def _build_entries(compiled: CompiledGrammar) -> MaskEntries:
    """The builder thread's work: every mask entry of ``compiled``, yielding as it goes."""
    with compile_budget.yielding():
        return mask_entries(compiled)


class ThreadBuilder:
    """One daemon thread that runs builds one at a time, in submission order. A daemon (unlike
    a ThreadPoolExecutor's workers): a process that is done decoding does not wait at exit for
    a build nobody will use. Cancelling a queued build skips it; the thread ends when the
    builder is dropped (with its batch)."""

    def __init__(self):
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        threading.Thread(target=_run_builds, args=(self._queue,), name="gxg-masks",
                         daemon=True).start()

    def submit(self, compiled: CompiledGrammar) -> Future:
        future: Future = Future()
        self._queue.put((future, compiled))
        return future

    def __del__(self):
        self._queue.put(None)


def _run_builds(jobs: "queue.SimpleQueue") -> None:
    """The builder thread (it holds the queue, not the builder, so that the builder can go)."""
    while True:
        job = jobs.get()
        if job is None:
            return
        future, compiled = job
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(_build_entries(compiled))
        except BaseException as error:  # noqa: BLE001 - handed to commit_masks
            future.set_exception(error)


class ProcessBuilder:
    """Builds in the tokenizer's worker process (module docstring)."""

    def __init__(self, tokenizer_info: TokenizerInfo):
        self._pool = _worker_pool(tokenizer_info)

    def submit(self, compiled: CompiledGrammar) -> Future:
        return self._pool.submit(_entries_in_worker, compiled.automaton)


# A cache that says so: one worker pool per live tokenizer (weakly held), shared by every batch
# of this process.
_POOLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_POOLS_LOCK = threading.Lock()


def _worker_pool(tokenizer_info: TokenizerInfo) -> ProcessPoolExecutor:
    with _POOLS_LOCK:
        pool = _POOLS.get(tokenizer_info)
        if pool is None:
            pool = _POOLS[tokenizer_info] = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker, initargs=(tokenizer_info,))
            _stop_at_exit(pool)
    return pool


def _stop_at_exit(pool: ProcessPoolExecutor) -> None:
    """A process that is done decoding does not wait at exit for a build nobody will use: the
    worker is terminated before ``concurrent.futures`` joins it (its exit hook, registered
    earlier, runs later: ``threading`` runs these hooks last registered first)."""
    reference = weakref.ref(pool)

    def stop() -> None:
        pool = reference()
        if pool is None:
            return
        workers = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
    threading._register_atexit(stop)  # what concurrent.futures uses for its own hook


_WORKER: dict = {}  # in the worker process: its tokenizer and token trie


def _start_worker(tokenizer_info: TokenizerInfo) -> None:
    _WORKER["info"] = tokenizer_info
    _WORKER["trie"] = token_trie(tokenizer_info)


def _entries_in_worker(automaton) -> MaskEntries:
    """Every mask entry of ``automaton`` over the worker's tokenizer (what ``mask_entries``
    computes in the parent, from the automaton alone: the entries are a function of it and
    the vocabulary)."""
    info = _WORKER["info"]
    cache = build_mask_cache(automaton, _WORKER["trie"], lazy=True,
                             sorted_token_ids=info.sorted_token_ids)
    return mask_entries(CompiledGrammar(None, info, automaton, cache))
