"""Fuzz campaign: hostile and random input against gxg, each case in its own process (CPU).

In:  nothing but a seed: every input is generated here, each case from its own seed derived
     from (--seed, family, index), so a case can be rerun alone. The families:

     ebnf-mutations     the grammar zoo's EBNF and the builtin JSON grammar, mutated by a few
                        character edits. Expected: GrammarError (with line and column) or a
                        grammar that compiles; one that compiles is exercised (below).
     regex-mutations    realistic regexes mutated the same way; same expectation.
     schema-mutations   MaskBench schemas with random edits (values replaced, keywords added or
                        removed, subschemas wrapped, odd $refs), compiled with random options;
                        one that compiles is exercised, and a complete instance it generates
                        must validate against the schema (jsonschema) unless the compile
                        warned that something is not enforced.
     hostile-schemas    a fixed list: nesting 48/500/30000 deep of objects, anyOf, allOf, oneOf,
                        prefixItems; {"not": {"enum": 5}}; non-object schemas; nested oneOf
                        chains; a 10k-value enum; minLength 10000; 2,000 required properties;
                        3,000 prefixItems; a 2,000-key const; ... (see hostile_schemas()).
     random-grammars    random well-formed EBNF grammars x random strings (sampled sentences,
                        edits of them, byte prefixes): gxg's GrammarMatcher (accepts, viable
                        prefix) against the Earley recognizer (gxg.testing) per string, and
                        XGrammar's matcher (in a process of its own) when it is importable;
                        at the end of a few strings, every token's mask bit against the
                        recognizer (tests/mask_oracles.py's recognizer_mask).
     token-budgets      random grammars whose rules carry token budgets (``name[max_tokens=N]``,
                        regular bodies, in contexts around them), walked token by token over a
                        small vocabulary: each mask against the brute-force oracle (every token
                        walked from every live stack), and XGrammar's mask, filled before each
                        token of the same walk, against gxg's. Generated outside the two shapes
                        where XGrammar is known to differ (tests/test_rule_token_budgets.py:
                        one rule twice in a row; max_tokens=0 where the output starts).
     token-consistency  MaskBench schemas with the Qwen vocabulary: a valid instance walked
                        token by token; at each step the mask bit of sampled tokens (allowed and
                        refused) must equal what accept_token does (then rolled back), and random
                        rollbacks of 1-4 tokens must restore the mask seen before.

     "Exercised" (mutations, hostile schemas): sampled sentences must be accepted by the
     recognizer and the matcher; a random token walk over a small vocabulary checks mask bits
     against accept_token with rollbacks, and what it consumed must be a viable prefix (and,
     after a stop token, a sentence) for the recognizer. Checks stop once a case has used
     EXERCISE_SHARE of --timeout (counted as "cut_short" in the JSON), so a timeout is one
     operation of gxg running for seconds, never the harness asking for too much.

Out: one table row per family — cases, checks (strings, mask bits and rollbacks compared), then
     the outcome of each case for gxg: ok, GrammarError (the honest refusal), compile timeout
     (``CompileTimeoutError`` at --compile-timeout), runtime limit (``GrammarRuntimeError``:
     too many parallel stacks, a full stack pool), other exceptions, timeouts (the process
     killed at --timeout), crashes (killed by a signal, e.g. a segfault), memory (MemoryError or
     a kill at the --memory-mb cap), disagreements (a case with at least one check that
     disagrees; "bad checks" counts those checks) — and XGrammar's crashes and disagreements in
     columns of their own. A random grammar is a runtime-limit case when any of its strings
     hit a limit (the JSON counts the strings: runtime_limited_strings). Below the table, the
     first --details non-ok cases of each family with a short reproducer (rerun one with
     --family F --index I). JSON to profiling/results/fuzz.json or --out: the rows, rollbacks
     checked, the indices of every non-ok case by outcome, the details (trimmed), XGrammar's
     timeouts, the commit and how many files differed from it.

How: the parent imports everything (gxg, torch, XGrammar, the vocabularies) and generates the
     inputs; each case runs in a forked child (fork: no import cost per case) with an
     address-space cap (resource.setrlimit: --memory-mb more than the parent's address space)
     and a wall-clock limit; the child sends its result back through a pipe. XGrammar runs in a
     separate child so that its segfaults are counted as its own. --jobs children at a time.

Usage:
  python profiling/fuzz.py                                  # the full campaign (~8 min, 2 cores)
  python profiling/fuzz.py --families random-grammars --cases 50 --seed 3
  python profiling/fuzz.py --family random-grammars --index 17   # one case, with its input
  python profiling/fuzz.py --family ebnf-mutations --index 5 --in-process   # with a traceback
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS",
             "TOKENIZERS_PARALLELISM"):
    os.environ.setdefault(_var, "1" if _var != "TOKENIZERS_PARALLELISM" else "false")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import functools  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from multiprocessing.connection import wait as wait_for_pipes  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Dict, List, Optional  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_hostile import one_of_chain  # noqa: E402
from common import MASKBENCH, RESULTS, machine, print_table  # noqa: E402
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab  # noqa: E402
from mask_oracles import (OracleRefused, brute_force_mask, mask_to_bool,  # noqa: E402
                          recognizer_mask)

from gxg import vocabularies  # noqa: E402
from gxg import compile_budget  # noqa: E402
from gxg.compile_budget import CompileTimeoutError  # noqa: E402
from gxg.grammar import Grammar, GrammarError  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.matcher import GrammarMatcher, GrammarRuntimeError, allocate_token_bitmask  # noqa: E402
from gxg.runtime import RuntimeLimits  # noqa: E402
from gxg.testing import Recognizer, sample_sentence  # noqa: E402

torch.set_num_threads(1)

# ------------------------------------------------------------------------------------ outcomes

OK, GRAMMAR_ERROR, COMPILE_TIMEOUT = "ok", "GrammarError", "compile timeout"
RUNTIME_LIMIT, OTHER, TIMEOUT = "runtime limit", "other exceptions", "timeouts"
CRASH, MEMORY, DISAGREEMENT = "crashes", "memory", "disagreements"
OUTCOMES = (OK, GRAMMAR_ERROR, COMPILE_TIMEOUT, RUNTIME_LIMIT, OTHER, TIMEOUT, CRASH, MEMORY,
            DISAGREEMENT)
XGR_CRASHES, XGR_DISAGREEMENTS = "xgr crashes", "xgr disagreements"
COLUMNS = ["family", "cases", "checks", *OUTCOMES, "bad checks", XGR_CRASHES, XGR_DISAGREEMENTS]
MAX_TEXT = 400  # characters of a reproducer or message kept in the report


def clip(text, limit: int = MAX_TEXT) -> str:
    text = text if isinstance(text, str) else repr(text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def outcome_of_exception(error: BaseException) -> dict:
    """An exception raised in a case, as a result: its outcome, type and message, and for
    unexpected ones the innermost frame (where to look)."""
    if isinstance(error, CompileTimeoutError):
        outcome = COMPILE_TIMEOUT
    elif isinstance(error, GrammarError):
        outcome = GRAMMAR_ERROR
    elif isinstance(error, GrammarRuntimeError):
        outcome = RUNTIME_LIMIT
    elif isinstance(error, MemoryError):
        outcome = MEMORY
    else:
        outcome = OTHER
    result = {"outcome": outcome, "error": clip(f"{type(error).__name__}: {error}", 300)}
    if isinstance(error, GrammarError):
        result["position"] = error.line is not None
    if outcome == OTHER:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        result["where"] = f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"
    return result


def case_seed(seed: int, family: str, index: int) -> int:
    """The seed of one case: independent of which other cases run, and of the order."""
    digest = hashlib.sha256(f"{seed}/{family}/{index}".encode()).hexdigest()
    return int(digest[:16], 16)


# ------------------------------------------------------------------------- running isolated

# The checks after a compile stop once a case has used this share of its time limit, so that
# a timeout means that one operation of gxg (a compile past its compile_timeout, one fill or
# accept) ran for seconds, not that the harness asked for too many checks.
EXERCISE_SHARE = 0.6
_exercise_deadline = float("inf")


def start_clock(payload: dict) -> None:
    global _exercise_deadline
    _exercise_deadline = time.monotonic() + payload.get("exercise_seconds", float("inf"))


def out_of_time() -> bool:
    return time.monotonic() > _exercise_deadline



def _child(writer, func: Callable[[dict], dict], payload: dict, memory_mb: int,
           quiet: bool) -> None:
    """The body of a forked case process: cap the address space, run, send the result
    (``quiet``: stderr to /dev/null, for XGrammar's C++ warnings)."""
    if quiet:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    pages, _ = Path("/proc/self/statm").read_text().split()[:2]
    inherited = int(pages) * resource.getpagesize()
    cap = inherited + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    start_clock(payload)
    try:
        result = func(payload)
    except BaseException as error:  # noqa: BLE001 - every exception is an outcome
        result = outcome_of_exception(error)
    try:
        writer.send(result)
    except MemoryError:
        writer.send({"outcome": MEMORY, "error": "MemoryError while sending the result"})
    writer.close()
    os._exit(0)  # no atexit handlers (torch's, XGrammar's) in a forked child


def _died(exitcode: int) -> dict:
    """The result of a child that exited without sending one."""
    if exitcode < 0:
        number = -exitcode
        name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
        if number == signal.SIGKILL:  # not ours (timeouts are handled before): the OOM killer
            return {"outcome": MEMORY, "error": f"killed by {name} (out of memory?)"}
        return {"outcome": CRASH, "error": f"killed by signal {name}"}
    return {"outcome": CRASH, "error": f"exited with status {exitcode} without a result"}


def run_isolated(jobs: List[dict], workers: int, timeout: float, memory_mb: int,
                 progress: Optional[Callable[[int], None]] = None) -> List[dict]:
    """Run every job ``{"func", "payload"}`` in a forked child, ``workers`` at a time; returns
    their results in order (a child that hangs past ``timeout`` s is killed: TIMEOUT)."""
    context = multiprocessing.get_context("fork")
    results: List[Optional[dict]] = [None] * len(jobs)
    pending = list(range(len(jobs)))[::-1]
    running: Dict[object, tuple] = {}  # reader -> (index, process, deadline)
    done = 0
    while pending or running:
        while pending and len(running) < workers:
            index = pending.pop()
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(
                writer, jobs[index]["func"], jobs[index]["payload"], memory_mb,
                jobs[index].get("quiet", False)), daemon=True)
            process.start()
            writer.close()
            running[reader] = (index, process, time.monotonic() + timeout)
        next_deadline = min(deadline for _, _, deadline in running.values())
        ready = wait_for_pipes(list(running), timeout=max(0.0, next_deadline - time.monotonic()))
        now = time.monotonic()
        for reader in list(running):
            index, process, deadline = running[reader]
            if reader in ready:
                try:
                    result = reader.recv()
                except (EOFError, OSError):
                    result = None
                process.join(5)
                if process.is_alive():
                    process.kill()
                    process.join()
                if result is None:
                    result = _died(process.exitcode)
            elif now >= deadline:
                process.kill()
                process.join()
                result = {"outcome": TIMEOUT, "error": f"no result within {timeout:g} s"}
            else:
                continue
            reader.close()
            del running[reader]
            results[index] = result
            done += 1
            if progress:
                progress(done)
    return results


# ------------------------------------------------------------------------------ vocabularies

SMALL_VOCAB_TEXTS = [sentence for _, _, sentences in GRAMMAR_ZOO for sentence in sentences] + [
    '{"key": "value", "n": [1, -2.5e+3, true, false, null], "x": {}}',
    'Grammaire élégante 中文 αβγ 😀 \\u00e9 \\n\\t\\"',
]


@functools.lru_cache(maxsize=None)
def small_info():
    """A raw-bytes vocabulary of a few hundred tokens (single bytes, pieces of JSON and of the
    zoo's sentences, random bytes; the last one stops): small enough to walk every token."""
    return make_info(synthetic_vocab(SMALL_VOCAB_TEXTS, seed=0))


@functools.lru_cache(maxsize=None)
def small_compiler(compile_timeout: float) -> GrammarCompiler:
    compiler = GrammarCompiler(small_info(), cache_enabled=False, compile_timeout=compile_timeout)
    compiler._token_trie()  # built once in the parent: the forked children share it
    return compiler


@functools.lru_cache(maxsize=None)
def qwen_compiler(compile_timeout: float) -> GrammarCompiler:
    compiler = GrammarCompiler(vocabularies.tokenizer_info_for("qwen"), cache_enabled=False,
                               compile_timeout=compile_timeout)
    compiler._token_trie()
    return compiler


def xgrammar_module():
    """The xgrammar module, or None when it is not installed (its columns then stay empty)."""
    try:
        import xgrammar
        return xgrammar
    except ImportError:
        return None


# ------------------------------------------------------------------------- exercising gxg


def fill_mask(matcher: GrammarMatcher, vocab_size: int, remaining: Optional[int] = None):
    bitmask = allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask, remaining_tokens=remaining)
    return mask_to_bool(bitmask[0].numpy(), vocab_size)


class WalkReport:
    """What a token walk checked and what disagreed (the first few, as text)."""

    def __init__(self):
        self.checks = 0
        self.rollbacks = 0
        self.bad = 0
        self.examples: List[str] = []
        self.consumed = b""
        self.stopped = False
        self.oracle_skipped = 0  # checks the oracle could not make (its own recursion limit)
        self.cut_short = False  # the case's time for checks ran out

    def disagree(self, text: str) -> None:
        self.bad += 1
        if len(self.examples) < 3:
            self.examples.append(clip(text, 200))

    def as_dict(self) -> dict:
        counts = {"checks": self.checks, "rollbacks": self.rollbacks, "bad": self.bad,
                  "examples": self.examples}
        if self.oracle_skipped:
            counts["oracle_skipped"] = self.oracle_skipped
        if self.cut_short:
            counts["cut_short"] = True
        return counts


def probe_tokens(allowed: np.ndarray, rng: random.Random, count: int, stop_ids) -> List[int]:
    """Up to ``count`` allowed and ``count`` refused token ids, and the stop tokens."""
    permitted, refused = np.flatnonzero(allowed).tolist(), np.flatnonzero(~allowed).tolist()
    return (rng.sample(permitted, min(count, len(permitted)))
            + rng.sample(refused, min(count, len(refused))) + list(stop_ids))


def check_bits_against_accept(matcher, allowed, tokens, decoded, report: WalkReport) -> None:
    """Each token's mask bit must say whether accept_token takes it; an accepted probe is
    rolled back at once."""
    for token in tokens:
        accepted = matcher.accept_token(token)
        if accepted:
            matcher.rollback(1)
        report.checks += 1
        if accepted != bool(allowed[token]):
            report.disagree(f"after {report.consumed!r}: token {token} {decoded[token]!r} has "
                            f"mask bit {int(allowed[token])} but accept_token -> {accepted}")


def check_rollback(matcher, history, accepted_tokens, rng, vocab_size, report) -> None:
    """Roll back 1-4 tokens: the mask must be the one seen before them; then re-accept them."""
    steps = rng.randint(1, min(4, len(accepted_tokens)))
    matcher.rollback(steps)
    report.rollbacks += 1
    if not np.array_equal(fill_mask(matcher, vocab_size), history[-steps]):
        report.disagree(f"after {report.consumed!r}: the mask after rolling back {steps} "
                        f"tokens differs from the mask before them")
    for token in accepted_tokens[-steps:]:
        if not matcher.accept_token(token):
            report.disagree(f"token {token} was accepted before a rollback, not after it")


def token_walk(matcher, info, rng: random.Random, next_token, steps: int, probes: int,
               rollback_every: float, budget: Optional[int] = None) -> WalkReport:
    """Walk up to ``steps`` tokens chosen by ``next_token(allowed, budget_allowed, step)``
    (None: stop walking), checking mask bits against accept_token and random rollbacks."""
    report = WalkReport()
    history: List[np.ndarray] = []  # the mask before each accepted token
    accepted_tokens: List[int] = []
    for step in range(steps):
        if out_of_time():
            report.cut_short = True
            break
        with saying_where(f"in a token walk after {report.consumed!r}"):
            token = walk_step(matcher, info, rng, next_token, step, probes, rollback_every,
                              budget, history, accepted_tokens, report)
        if token is None:
            break
        if token in matcher.stop_token_ids:
            report.stopped = True
            break
        report.consumed += info.decoded_vocab[token]
    return report


def walk_step(matcher, info, rng, next_token, step, probes, rollback_every, budget, history,
              accepted_tokens, report) -> Optional[int]:
    """One step of ``token_walk``: the checks, then the next token accepted (None: the walk
    ends here)."""
    decoded = info.decoded_vocab
    allowed = fill_mask(matcher, info.vocab_size)
    if accepted_tokens and rng.random() < rollback_every:
        check_rollback(matcher, history, accepted_tokens, rng, info.vocab_size, report)
    check_bits_against_accept(matcher, allowed,
                              probe_tokens(allowed, rng, probes, matcher.stop_token_ids),
                              decoded, report)
    within_budget = (None if budget is None else
                     fill_mask(matcher, info.vocab_size, max(budget - step, 0)))
    token = next_token(allowed, within_budget, step)
    if token is None:
        return None
    accepted = matcher.accept_token(token)
    report.checks += 1
    if accepted != bool(allowed[token]):
        report.disagree(f"after {report.consumed!r}: token {token} {decoded[token]!r} has "
                        f"mask bit {int(allowed[token])} but accept_token -> {accepted}")
    if not accepted:
        return None
    history.append(allowed)
    accepted_tokens.append(token)
    return token


def random_next_token(rng: random.Random, stop_ids, stop_chance: float = 0.4):
    """A chooser for token_walk: a random token of the budget mask (or the grammar's), a stop
    token with ``stop_chance`` when one is allowed."""
    def choose(allowed, within_budget, step):
        usable = allowed if within_budget is None else within_budget
        stops = [t for t in stop_ids if usable[t]]
        if stops and rng.random() < stop_chance:
            return stops[0]
        candidates = np.flatnonzero(usable).tolist()
        return rng.choice(candidates) if candidates else None
    return choose


@contextlib.contextmanager
def saying_where(place: str):
    """A GrammarRuntimeError raised in the block names ``place`` (the input that hit it)."""
    try:
        yield
    except GrammarRuntimeError as error:
        raise GrammarRuntimeError(f"{error} ({clip(place, 160)})") from error


def check_sentences(grammar, matcher, recognizer, rng, count: int, report: WalkReport) -> None:
    """Sampled sentences of the grammar: the recognizer and the matcher must accept each."""
    for _ in range(count):
        if out_of_time():
            report.cut_short = True
            return
        try:
            sentence = sample_sentence(grammar, rng, max_depth=5, max_extra_repeats=2)
        except ValueError:  # the root derives no finite sentence
            return
        except RecursionError:  # the sampler recurses along rule chains (gxg.testing's limit,
            report.oracle_skipped += 1  # not the matcher's): no sentences for this grammar
            return
        if len(sentence) > 256:
            continue
        matcher.reset()
        with saying_where(f"on the sampled sentence {sentence!r}"):
            ours = matcher.accept_string(sentence) and matcher.is_completed()
        report.checks += 1
        if not recognizer.accepts(sentence):
            report.disagree(f"the recognizer rejects its own sampled sentence {sentence!r}")
        elif not ours:
            report.disagree(f"the matcher rejects the sampled sentence {sentence!r}")
    matcher.reset()


def exercise(grammar: Grammar, compiled, rng: random.Random, *, sentences: int = 4,
             steps: int = 24, budget: Optional[int] = None) -> WalkReport:
    """The checks every compiled grammar gets (see the module docstring)."""
    info = compiled.tokenizer_info
    matcher = GrammarMatcher(compiled)
    recognizer = Recognizer(grammar)
    report = WalkReport()
    check_sentences(grammar, matcher, recognizer, rng, sentences, report)
    walk = token_walk(matcher, info, rng, random_next_token(rng, matcher.stop_token_ids),
                      steps, probes=6, rollback_every=0.2, budget=budget)
    for name in ("checks", "rollbacks", "bad"):
        setattr(report, name, getattr(report, name) + getattr(walk, name))
    report.examples += walk.examples
    report.consumed, report.stopped = walk.consumed, walk.stopped
    report.cut_short = report.cut_short or walk.cut_short
    report.checks += 1
    if not recognizer.accepts_prefix(walk.consumed):
        report.disagree(f"the matcher walked to {walk.consumed!r}, which the recognizer says "
                        f"is no prefix of the language")
    elif walk.stopped and not recognizer.accepts(walk.consumed):
        report.disagree(f"the matcher accepted a stop token after {walk.consumed!r}, which the "
                        f"recognizer says is not a sentence")
    return report


def walk_result(report: WalkReport, **extra) -> dict:
    return {"outcome": DISAGREEMENT if report.bad else OK, **report.as_dict(), **extra}


# ----------------------------------------------------------------------- text mutations

EBNF_PIECES = ["::=", "|", "(", ")", "[", "]", "{", "}", "*", "+", "?", '"', "'", "\\", "^", "-",
               ",", "=", "(=", "#", "\n", " ", "root", "x", "0", "9", "{2,}", "{,3}", "{3,1}",
               "{99999999}", "\\x", "\\u12", "\\U0010ffff", "\\uD800", "é", "😀", "\x00", "[^]",
               "[]", "Regex(", "root ::= ", '""', "()", "(=", "-1"]
REGEX_PIECES = ["(", ")", "[", "]", "{", "}", "*", "+", "?", "|", "^", "$", ".", "\\", "\\d",
                "\\w", "\\s", "\\b", "\\B", "\\1", "\\k<a>", "(?:", "(?=", "(?!", "(?<n>", "-",
                ",", "{2,}", "{3,1}", "{100000}", "\\u{110000}", "\\uD800", "\\x4", "\\c", "a",
                "é", "😀", "\x00", "[^]", "*?", "{0}", "\\p{L}", "[\\d-z]", "\\0", "\\01"]
REGEX_BASES = [
    r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}",
    r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?",
    r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?",
    r"(https?|ftp)://[^\s/$.?#].[^\s]*",
    r"[A-Z][a-z]+( [A-Z][a-z]+)*",
    r"(\+\d{1,3} )?\(?\d{3}\)?[ .-]?\d{3}[ .-]?\d{4}",
    r"^(?:[01]\d|2[0-3]):[0-5]\d$",
    r"[\u4e00-\u9fff]+|[α-ω]{1,3}|😀+",
    r"(a|b|ab)*c{2,5}d?",
    r"\"([^\"\\\\]|\\\\.)*\"",
    r"(?<word>\w+)(,\s*\w+){0,4}",
    r"[^\n]{0,20}\n",
    r"#[0-9a-fA-F]{6}|#[0-9a-fA-F]{3}",
    r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)",
    r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?",
]


def mutate_text(text: str, rng: random.Random, pieces: List[str], edits: int) -> str:
    """``edits`` random edits: delete a span, insert a piece, replace a character, duplicate or
    swap a span, cut the text short."""
    for _ in range(edits):
        at = rng.randint(0, len(text))
        span = rng.randint(1, 4)
        kind = rng.choice(("delete", "insert", "insert", "replace", "duplicate", "swap", "cut"))
        if kind == "delete":
            text = text[:at] + text[at + span:]
        elif kind == "insert":
            text = text[:at] + rng.choice(pieces) + text[at:]
        elif kind == "replace":
            text = text[:at] + rng.choice(pieces) + text[at + 1:]
        elif kind == "duplicate":
            text = text[:at + span] + text[at:]
        elif kind == "swap" and len(text) > 1:
            other = rng.randrange(len(text))
            first, second = sorted((min(at, len(text) - 1), other))
            text = (text[:first] + text[second] + text[first + 1:second] + text[first]
                    + text[second + 1:])
        elif kind == "cut":
            text = text[:at]
    return text


@functools.lru_cache(maxsize=None)
def ebnf_bases() -> List[str]:
    return [ebnf for _, ebnf, _ in GRAMMAR_ZOO if ebnf is not None] + [
        str(Grammar.builtin_json_grammar())]


def make_ebnf_mutation(rng: random.Random) -> dict:
    text = mutate_text(rng.choice(ebnf_bases()), rng, EBNF_PIECES, rng.randint(1, 4))
    return {"ebnf": text, "repro": f"Grammar.from_ebnf({text!r})"}


def make_regex_mutation(rng: random.Random) -> dict:
    text = mutate_text(rng.choice(REGEX_BASES), rng, REGEX_PIECES, rng.randint(1, 3))
    return {"regex": text, "repro": f"Grammar.from_regex({text!r})"}


def compile_and_exercise(make_grammar: Callable[[], Grammar], payload: dict) -> dict:
    """The front end, then (when it accepts) a compile with the small vocabulary and the
    checks of ``exercise``."""
    grammar = make_grammar()
    compiled = small_compiler(payload["compile_timeout"]).compile_grammar(grammar)
    return walk_result(exercise(grammar, compiled, random.Random(payload["seed"])))


def run_ebnf_mutation(payload: dict) -> dict:
    return compile_and_exercise(lambda: Grammar.from_ebnf(payload["ebnf"]), payload)


def run_regex_mutation(payload: dict) -> dict:
    return compile_and_exercise(lambda: Grammar.from_regex(payload["regex"]), payload)


# ------------------------------------------------------------------------ schema mutations

SCHEMA_KEYWORDS = {
    "type": ["string", "integer", "number", "object", "array", "boolean", "null",
             ["string", "null"], ["integer", "array"], [], "any", 5],
    "enum": [[1, "a", None], [], [{"a": 1}, [1]], 5, ["x"] * 3],
    "const": ["x", 0, None, {"a": [1, {}]}, [True]],
    "minLength": [0, 3, 2049, -1, 1.5, "3"], "maxLength": [0, 2, 2049, -5, None],
    "pattern": ["^[a-z]+$", "(a|b)*c", "[", "\\d{2,}", "^$", "a{3,1}", "(?<x>a)\\k<x>"],
    "format": ["date-time", "email", "uuid", "ipv4", "uri", "no-such-format", 7],
    "minimum": [0, -1.5, 1e300, "0"], "maximum": [10, -3, 1e-300, None],
    "exclusiveMinimum": [0, True, 2.5], "exclusiveMaximum": [100, False],
    "multipleOf": [2, 0.5, 0, -1, 1e-9],
    "items": [{"type": "integer"}, False, True, [{"type": "string"}], 5],
    "prefixItems": [[{"type": "string"}, {"const": 1}], [], {"type": "string"}],
    "additionalProperties": [False, True, {"type": "integer"}, "no"],
    "properties": [{"a": {"type": "string"}}, {}, [], {"": True, "b": False}],
    "required": [["a"], [], [5], "a", ["a", "a"]],
    "anyOf": [[{"type": "string"}, {"type": "integer"}], [], {"type": "string"}, [True, False]],
    "oneOf": [[{"type": "string"}, {"const": "x"}], [{}], [False], 3],
    "allOf": [[{"minLength": 2}, {"maxLength": 4}], [], [True, {"type": "number"}]],
    "not": [{"type": "string"}, {"enum": 5}, True, {}],
    "$ref": ["#", "#/properties/a", "#/$defs/missing", "#/definitions/x", "http://x.invalid/s",
             "#/properties/~1a", 5],
    "$defs": [{"x": {"type": "string"}}, {"x": {"$ref": "#/$defs/x"}}, []],
    "minItems": [0, 3, 5000, -1], "maxItems": [0, 1, 2049],
    "uniqueItems": [True, False], "minProperties": [1, 3], "maxProperties": [0, 2],
    "patternProperties": [{"^x": {"type": "integer"}}, {"[": {}}],
    "propertyNames": [{"pattern": "^[a-z]+$"}, {"maxLength": 2}, False],
    "if": [{"type": "string"}], "then": [{"minLength": 1}], "else": [{"type": "null"}],
    "dependentRequired": [{"a": ["b"]}], "contains": [{"type": "integer"}],
    "unevaluatedProperties": [False], "default": [None, 1], "nullable": [True],
}
ODD_VALUES = [None, True, False, 0, -1, 1e308, 10 ** 30, "", "x", [], {}, [1, "a"], {"type": 5},
              0.5, {"$ref": "#"}, {"type": "string", "minLength": 5, "maxLength": 2}]


def json_paths(value, path=(), depth: int = 0) -> List[tuple]:
    """Paths to every node of a JSON value (keys and indices), the root included (iterative
    enough for real schemas: depth is capped at 64)."""
    paths = [path]
    if depth >= 64:
        return paths
    if isinstance(value, dict):
        for key, child in value.items():
            paths += json_paths(child, path + (key,), depth + 1)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            paths += json_paths(child, path + (index,), depth + 1)
    return paths


def node_at(value, path: tuple):
    for step in path:
        value = value[step]
    return value


def replaced_at(root, path: tuple, new):
    """``root`` with the node at ``path`` replaced by ``new`` (the root itself when path=())."""
    if not path:
        return new
    node_at(root, path[:-1])[path[-1]] = new
    return root


def mutate_schema(schema, rng: random.Random, edits: int):
    schema = copy.deepcopy(schema)
    for _ in range(edits):
        paths = json_paths(schema)
        path = rng.choice(paths)
        node = node_at(schema, path)
        kind = rng.choice(("keyword", "keyword", "odd", "delete", "wrap", "copy", "type"))
        if kind == "keyword" and isinstance(node, dict):
            keyword = rng.choice(list(SCHEMA_KEYWORDS))
            node[keyword] = copy.deepcopy(rng.choice(SCHEMA_KEYWORDS[keyword]))
        elif kind == "odd":
            schema = replaced_at(schema, path, copy.deepcopy(rng.choice(ODD_VALUES)))
        elif kind == "delete" and path:
            parent = node_at(schema, path[:-1])
            del parent[path[-1]]
        elif kind == "wrap":
            wrapper = rng.choice(("anyOf", "oneOf", "allOf", "not", "items"))
            inner = [node] if wrapper.endswith("Of") else node
            schema = replaced_at(schema, path, {wrapper: inner})
        elif kind == "copy":
            schema = replaced_at(schema, path, copy.deepcopy(node_at(schema, rng.choice(paths))))
        elif kind == "type" and isinstance(node, dict):
            node["type"] = copy.deepcopy(rng.choice(SCHEMA_KEYWORDS["type"]))
    return schema


@functools.lru_cache(maxsize=None)
def maskbench_files() -> List[Path]:
    return sorted(Path(MASKBENCH).glob("*.json")) if Path(MASKBENCH).is_dir() else []


def make_schema_mutation(rng: random.Random) -> dict:
    files = maskbench_files()
    if not files:
        raise FileNotFoundError(f"MaskBench is not at {MASKBENCH}")
    path = rng.choice(files)
    schema = mutate_schema(json.loads(path.read_text())["schema"], rng, rng.randint(1, 4))
    options = {"any_whitespace": rng.random() < 0.5, "strict_mode": rng.random() < 0.5,
               "any_order": rng.random() < 0.3}
    text = json.dumps(schema)
    return {"schema": schema, "options": options, "source": path.name,
            "repro": f"compile_json_schema({clip(text, 300)}, **{options})  # {path.name}"}


class _ValidatorTimeout(Exception):
    pass


def schema_violation(schema, instance, seconds: float = 2.0) -> Optional[str]:
    """jsonschema's complaint about ``instance`` (None: valid, or the validator cannot judge:
    an invalid schema, a remote $ref, more than ``seconds`` of work)."""
    import jsonschema

    def give_up(signum, frame):
        raise _ValidatorTimeout()
    previous = signal.signal(signal.SIGALRM, give_up)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with warnings.catch_warnings():  # "the metaschema of $schema was not found" etc.
            warnings.simplefilter("ignore")
            validator_class = jsonschema.validators.validator_for(schema)
            validator_class.check_schema(schema)
            error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(
                instance))
        return None if error is None else clip(error.message, 200)
    except Exception:  # noqa: BLE001 - a schema the validator cannot judge is not a verdict
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def compile_schema_and_exercise(schema, options: dict, payload: dict) -> dict:
    """Compile with the small vocabulary, exercise with a token budget (so that walks end in a
    complete instance), and validate what a walk completed against the schema."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = small_compiler(payload["compile_timeout"]).compile_json_schema(schema,
                                                                                  **options)
    report = exercise(compiled.grammar, compiled, random.Random(payload["seed"]), steps=160,
                      budget=150)
    extra = {"warnings": len(caught)}
    if report.stopped and not caught:
        try:
            instance = json.loads(report.consumed.decode("utf-8"))
        except ValueError as error:
            report.disagree(f"completed {report.consumed!r}, which is not JSON: {error}")
        else:
            violation = schema_violation(schema, instance)
            report.checks += 1
            extra["validated"] = 1
            if violation is not None:
                report.disagree(f"completed {report.consumed!r}, which the schema forbids: "
                                f"{violation}")
    return walk_result(report, **extra)


def run_schema_mutation(payload: dict) -> dict:
    return compile_schema_and_exercise(payload["schema"], payload["options"], payload)


# ------------------------------------------------------------------------- hostile schemas


def nested(depth: int, wrap: Callable[[object], dict], leaf) -> object:
    """``wrap`` applied ``depth`` times around ``leaf`` (a loop: no recursion in the builder)."""
    value = leaf
    for _ in range(depth):
        value = wrap(value)
    return value


def nested_json_text(depth: int, wrap, leaf) -> str:
    """The JSON text of ``nested(depth, wrap, leaf)`` without recursing (json.dumps would):
    the text of one level, split where the inner value goes, repeated."""
    marker = "@@inner@@"
    head, tail = json.dumps(wrap(marker)).split(json.dumps(marker))
    return head * depth + json.dumps(leaf) + tail * depth


NESTINGS = {
    "objects": lambda inner: {"type": "object", "properties": {"a": inner}, "required": ["a"]},
    "anyOf": lambda inner: {"anyOf": [inner, {"type": "integer"}]},
    "allOf": lambda inner: {"allOf": [inner]},
    "oneOf": lambda inner: {"oneOf": [inner, {"type": "null"}]},
    "prefixItems": lambda inner: {"type": "array", "prefixItems": [inner], "items": False},
    "items": lambda inner: {"type": "array", "items": inner},
    "not": lambda inner: {"not": inner},
}
LEAF = {"type": "string"}


def _many_properties(count: int) -> dict:
    names = [f"p{i}" for i in range(count)]
    return {"type": "object", "properties": {n: {"type": "integer"} for n in names},
            "required": names}


def hostile_schemas() -> Dict[str, Callable[[], object]]:
    """name -> builder of a hostile schema (built in the child: some are large)."""
    cases: Dict[str, Callable[[], object]] = {}
    for shape, wrap in NESTINGS.items():
        for depth in (48, 500, 30000):
            cases[f"{shape} nested {depth} deep"] = functools.partial(nested, depth, wrap, LEAF)
    cases.update({
        'not enum 5': lambda: {"not": {"enum": 5}},
        'oneOf [not enum 5, string]': lambda: {"oneOf": [{"not": {"enum": 5}},
                                                         {"type": "string"}]},
        "schema True": lambda: True,
        "schema False": lambda: False,
        "schema [..] (a list)": lambda: [{"type": "string"}],
        "schema 5": lambda: 5,
        "schema None": lambda: None,
        'schema "" (empty JSON text)': lambda: "",
        "schema '{' (bad JSON text)": lambda: "{",
        "enum of 10,000 strings": lambda: {"enum": [f"value{i}" for i in range(10000)]},
        "enum of 10,000 integers": lambda: {"enum": list(range(10000))},
        "minLength 10000": lambda: {"type": "string", "minLength": 10000},
        "minLength 10000 maxLength 10001": lambda: {"type": "string", "minLength": 10000,
                                                    "maxLength": 10001},
        "2,000 required properties": lambda: _many_properties(2000),
        "3,000 prefixItems": lambda: {"type": "array", "items": False,
                                      "prefixItems": [{"type": "integer"}] * 3000},
        "const with 2,000 keys": lambda: {"const": {f"k{i}": i for i in range(2000)}},
        "minItems 100000": lambda: {"type": "array", "minItems": 100000},
        "$ref cycle without base case": lambda: {"$defs": {"a": {"$ref": "#/$defs/a"}},
                                                 "$ref": "#/$defs/a"},
        "$ref to itself": lambda: {"$ref": "#"},
        "anyOf of itself": lambda: {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
        "pattern (a*)*b": lambda: {"type": "string", "pattern": "^(a*)*b$"},
        "pattern of 5,000 alternatives": lambda: {
            "type": "string", "pattern": "^(" + "|".join(f"w{i}" for i in range(5000)) + ")$"},
        "property name of 100,000 characters": lambda: {
            "type": "object", "properties": {"k" * 100000: {"type": "integer"}},
            "required": ["k" * 100000]},
        "lone surrogate in enum and key": lambda: {
            "enum": ["\ud800"], "properties": {"\udfff": {"type": "string"}}},
        "minimum 1e400 (inf)": lambda: {"type": "number", "minimum": float("inf")},
        "multipleOf 1e-320": lambda: {"type": "number", "multipleOf": 1e-320},
        "integer between 10**30 and 10**30+5": lambda: {"type": "integer", "minimum": 10 ** 30,
                                                        "maximum": 10 ** 30 + 5},
        "type list of everything": lambda: {"type": ["string", "integer", "number", "object",
                                                     "array", "boolean", "null"]},
    })
    for depth in (14, 20, 50, 100):
        for overlapping in (False, True):
            name = f"oneOf chain {depth} deep, {'overlapping' if overlapping else 'disjoint'}"
            cases[name] = functools.partial(one_of_chain, depth, overlapping)
    return cases


def make_hostile(index: int) -> dict:
    name = list(hostile_schemas())[index]
    return {"name": name, "repro": f"hostile schema: {name} (fuzz.hostile_schemas()[{name!r}])"}


def run_hostile(payload: dict) -> dict:
    """A GrammarError or a compile, then exercise; for a schema that is not an object, both
    entry points (Grammar.from_json_schema, compile_json_schema) must give the same answer."""
    schema = hostile_schemas()[payload["name"]]()
    front_end = None  # not asked
    if not isinstance(schema, dict):  # where the entry points parted (issue 15); for dicts
        try:                          # the front end would only double the time
            with compile_budget.within(payload["compile_timeout"]):
                Grammar.from_json_schema(schema)
            front_end = "compiled"
        except GrammarError as error:
            front_end = f"GrammarError: {clip(str(error), 120)}"
    try:
        result = compile_schema_and_exercise(schema, {}, payload)
    except GrammarError as error:
        result = outcome_of_exception(error)
        compiler_said = f"GrammarError: {clip(str(error), 120)}"
    else:
        compiler_said = "compiled"
    if front_end is not None and (front_end == "compiled") != (compiler_said == "compiled"):
        return {"outcome": DISAGREEMENT, "checks": 1, "bad": 1, "examples": [
            f"Grammar.from_json_schema: {front_end}; compile_json_schema: {compiler_said}"]}
    return result


def run_hostile_xgrammar(payload: dict) -> dict:
    xgr = xgrammar_module()
    name = payload["name"]
    shape = next((s for s in NESTINGS if name.startswith(f"{s} nested ")), None)
    if shape is not None:  # deep schemas as text: json.dumps would recurse
        depth = int(name.split()[2])
        schema = nested_json_text(depth, NESTINGS[shape], LEAF)
    else:
        schema = hostile_schemas()[name]()
        schema = schema if isinstance(schema, str) else json.dumps(schema)
    try:
        xgr.GrammarCompiler(xgr.TokenizerInfo([]), max_threads=1,
                            cache_enabled=False).compile_json_schema(schema)
    except Exception as error:  # noqa: BLE001 - XGrammar refusing is an answer
        return {"outcome": OK, "error": clip(f"{type(error).__name__}: {error}", 200)}
    return {"outcome": OK}


# ------------------------------------------------------------------------- random grammars

ALPHABET = ["a", "b", "c", "é", "中", "😀"]
CLASSES = ["[abc]", "[a-c]", "[^a]", "[é😀]", "[^]", "[a-zé]", "[^abc中]", "[\\u0100-\\u4e2d]"]
QUANTIFIERS = ["*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "{0,}"]


def random_expression(rng: random.Random, names: List[str], depth: int) -> str:
    """An EBNF expression (XGrammar's dialect) over ALPHABET, CLASSES and the rule names."""
    kind = rng.choice(("literal", "class", "ref", "ref") if depth >= 3 else
                      ("literal", "class", "ref", "sequence", "choice", "repeat", "repeat"))
    if kind == "literal":
        return '"' + "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 3))) + '"'
    if kind == "class":
        return rng.choice(CLASSES)
    if kind == "ref":
        return rng.choice(names)
    parts = [random_expression(rng, names, depth + 1) for _ in range(rng.randint(2, 3))]
    if kind == "sequence":
        return "(" + " ".join(parts) + ")"
    if kind == "choice":
        return "(" + " | ".join(parts) + ")"
    return "(" + parts[0] + ")" + rng.choice(QUANTIFIERS)


def every_rule_derives_a_sentence(grammar: Grammar) -> bool:
    for rule in grammar.rules:
        try:
            sample_sentence(Grammar(grammar.rules, root_rule_name=rule.name), random.Random(0),
                            max_depth=2, max_extra_repeats=0)
        except ValueError:
            return False
    return True


def random_grammar(rng: random.Random) -> str:
    """A random grammar whose every rule derives some finite sentence (well-formed: it parses,
    and no rule is dead), with recursion through any rule, root included."""
    while True:
        names = ["root"] + [f"r{i}" for i in range(1, rng.randint(1, 4))]
        text = "\n".join(f"{name} ::= {random_expression(rng, names, 0)}" for name in names)
        try:
            if every_rule_derives_a_sentence(Grammar.from_ebnf(text)):
                return text
        except GrammarError:
            continue


def random_strings(grammar: Grammar, rng: random.Random, count: int) -> List[bytes]:
    """Sampled sentences (at most 48 bytes), character edits and concatenations of them, and
    byte prefixes (which may end inside a UTF-8 sequence)."""
    samples = []
    for _ in range(3 * count):
        sentence = sample_sentence(grammar, rng, max_depth=4, max_extra_repeats=2)
        if len(sentence) <= 48:
            samples.append(sentence)
        if len(samples) >= max(1, count // 3):
            break
    samples = samples or [b""]
    strings = list(samples)
    while len(strings) < count:
        base = rng.choice(samples).decode("utf-8")
        kind = rng.choice(("edit", "edit", "concat", "prefix"))
        if kind == "edit":
            strings.append(mutate_text(base, rng, ALPHABET, rng.randint(1, 2)).encode())
        elif kind == "concat":
            strings.append(base.encode() + rng.choice(samples))
        else:
            data = base.encode()
            strings.append(data[:rng.randint(0, len(data))])
    return strings[:count]


def make_random_grammar(rng: random.Random, strings: int) -> dict:
    ebnf = random_grammar(rng)
    texts = random_strings(Grammar.from_ebnf(ebnf), rng, strings)
    return {"ebnf": ebnf, "strings": [s.decode("latin-1") for s in texts],
            "repro": f"Grammar.from_ebnf({ebnf!r})"}


def payload_strings(payload: dict) -> List[bytes]:
    return [s.encode("latin-1") for s in payload["strings"]]  # bytes kept 1:1 in JSON


MASK_CHECKS_PER_GRAMMAR = 3


def run_random_grammar(payload: dict) -> dict:
    """gxg's matcher against the recognizer on every string (verdict = (sentence, viable
    prefix)); the full mask against the recognizer at the end of a few viable strings."""
    grammar = Grammar.from_ebnf(payload["ebnf"])
    strings = payload_strings(payload)
    info = make_info(synthetic_vocab([s.decode("utf-8", "replace") for s in strings], seed=0))
    compiled = GrammarCompiler(info, cache_enabled=False,
                               compile_timeout=payload["compile_timeout"]).compile_grammar(grammar)
    # fixed_limits: RuntimeLimits() as the GPU batch has them (a number: with that many
    # stacks); else the matcher grows its own
    fixed = payload.get("fixed_limits")
    limits = None if not fixed else (RuntimeLimits() if fixed is True
                                     else RuntimeLimits(max_stacks=int(fixed)))
    matcher = GrammarMatcher(compiled, limits=limits)
    recognizer = Recognizer(grammar)
    report, limited, earley, mask_checks = WalkReport(), [], [], 0
    for data in strings:
        if out_of_time():
            report.cut_short = True
            break
        expected = (recognizer.accepts(data), recognizer.accepts_prefix(data))
        earley.append(expected)
        matcher.reset()
        try:
            alive = matcher.accept_string(data)
            ours = (alive and matcher.is_completed(), alive)
        except GrammarRuntimeError as error:
            limited.append(clip(f"{data!r}: {error}", 160))
            continue
        report.checks += 1
        if ours != expected:
            report.disagree(f"{data!r}: matcher (sentence, prefix) = {ours}, recognizer = "
                            f"{expected}")
        elif alive and mask_checks < MASK_CHECKS_PER_GRAMMAR:
            mask_checks += 1
            expected_mask = recognizer_mask(recognizer, data, info, matcher.stop_token_ids)
            report.checks += 1
            got = fill_mask(matcher, info.vocab_size)
            if not np.array_equal(got, expected_mask):
                wrong = np.flatnonzero(got != expected_mask)[:3].tolist()
                spelt = [info.decoded_vocab[t] for t in wrong]
                report.disagree(f"mask after {data!r}: tokens {spelt} are "
                                f"{[bool(got[t]) for t in wrong]}, the recognizer says not")
    result = walk_result(report, earley=earley, limited_strings=len(limited))
    if limited and not report.bad:
        result.update(outcome=RUNTIME_LIMIT, error=f"{len(limited)} strings: {limited[0]}")
    return result


def run_random_grammar_xgrammar(payload: dict) -> dict:
    """XGrammar's verdicts (sentence, viable prefix) on every non-empty string (None: empty)."""
    xgr = xgrammar_module()
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([]), max_threads=1,
                                   cache_enabled=False).compile_grammar(payload["ebnf"])
    verdicts = []
    for data in payload_strings(payload):
        if not data:
            verdicts.append(None)
            continue
        matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        prefix = matcher.accept_string(data)
        verdicts.append((prefix and matcher.is_terminated(), prefix))
    return {"outcome": OK, "verdicts": verdicts}


def xgrammar_disagreements(payload: dict, ours: dict, theirs: dict) -> List[str]:
    """Strings where XGrammar's verdict differs from the recognizer's."""
    if "earley" not in ours or "verdicts" not in theirs:
        return []
    found = []
    for data, expected, verdict in zip(payload_strings(payload), ours["earley"],
                                       theirs["verdicts"]):
        if verdict is not None and tuple(verdict) != tuple(expected):
            found.append(clip(f"{data!r}: XGrammar (sentence, prefix) = {tuple(verdict)}, "
                              f"recognizer = {tuple(expected)}", 200))
    return found


# ----------------------------------------------------------------------- token budgets

BUDGET_VOCAB = ["a", "b", "ab", "ba", "c", "ca", "abc", "x", "xa", "E", "N", "END", "aE", "<",
                "/", "</", "a>", "</a>", "bb", "</s>"]  # the last is the stop token
BUDGET_ATOMS = ['"a"', '"b"', '"ab"', '"c"', '[a-c]', '[ab]', '"<"', '"/"']
# (context, where the budgeted rule r may start the output) -- r never twice in one parse
BUDGET_CONTEXTS = [('"x" r "E"', False), ('r "END"', True), ('("x" r)+ "E"', False),
                   ('"x" r "</a>"', False), ('r "E" | "x" r "N"', True), ('"x" r? "E"', False),
                   ('r s "E"', True), ('"x" (r | "ab") "E"', False)]
BUDGET_STEPS, BUDGET_WALKS = 10, 4


def budget_body(rng: random.Random, depth: int = 0) -> str:
    """A random regular body over a few letters and symbols."""
    kind = rng.randrange(6 if depth < 2 else 1)
    if kind == 0:
        return rng.choice(BUDGET_ATOMS)
    inner = budget_body(rng, depth + 1)
    if kind in (1, 2, 5):
        return f"({inner})" + "*+?"[kind % 3 if kind != 5 else 2]
    other = budget_body(rng, depth + 1)
    return f"({inner} | {other})" if kind == 3 else f"{inner} {other}"


def make_token_budget(rng: random.Random) -> dict:
    context, starts_output = rng.choice(BUDGET_CONTEXTS)
    low = 1 if starts_output else 0  # max_tokens=0 at the output's start: XGrammar differs
    ebnf = (f"root ::= {context}\nr[max_tokens={rng.randrange(low, 4)}] ::= "
            f"{budget_body(rng)}\n")
    if " s " in context:  # s starts the output where r is empty
        ebnf += f"s[max_tokens={rng.randrange(low, 3)}] ::= {budget_body(rng)}\n"
    return {"ebnf": ebnf, "repro": f"Grammar.from_ebnf({ebnf!r})"}


def budget_info():
    from gxg.tokenizer import TokenizerInfo, VocabType
    return TokenizerInfo([t.encode() for t in BUDGET_VOCAB], VocabType.RAW,
                         stop_token_ids=[len(BUDGET_VOCAB) - 1])


def run_token_budget(payload: dict) -> dict:
    """Walks of allowed tokens (seeded); each step's mask against the brute-force oracle. The
    walks (tokens and masks) are compared with XGrammar's own walks, made with the same seed
    from its masks: the same walk as long as the masks agree."""
    info = budget_info()
    compiled = GrammarCompiler(info, cache_enabled=False,
                               compile_timeout=payload["compile_timeout"]).compile_grammar(
        payload["ebnf"])
    rng, report, walks = random.Random(payload["seed"]), WalkReport(), []
    stop = len(BUDGET_VOCAB) - 1
    for _ in range(BUDGET_WALKS):
        matcher, tokens, masks = GrammarMatcher(compiled), [], []
        for step in range(BUDGET_STEPS):
            got = fill_mask(matcher, info.vocab_size)
            masks.append(np.flatnonzero(got).tolist())
            try:
                oracle = brute_force_mask(matcher)
                report.checks += 1
                if not np.array_equal(got, oracle):
                    wrong = np.flatnonzero(got != oracle)[:3].tolist()
                    report.disagree(f"after {[BUDGET_VOCAB[t] for t in tokens]}: tokens "
                                    f"{[BUDGET_VOCAB[t] for t in wrong]} are "
                                    f"{[bool(got[t]) for t in wrong]} in the mask, not in the "
                                    f"oracle's")
            except OracleRefused:
                report.oracle_skipped += 1
            allowed = [t for t in masks[-1] if t != stop]
            if not allowed:
                break
            token = rng.choice(allowed)
            if not matcher.accept_token(token):
                report.disagree(f"after {[BUDGET_VOCAB[t] for t in tokens]}: the mask allows "
                                f"{BUDGET_VOCAB[token]!r}, accept_token refuses it")
                break
            tokens.append(token)
        walks.append({"tokens": tokens, "masks": masks})
    return walk_result(report, walks=walks)


def run_token_budget_xgrammar(payload: dict) -> dict:
    """The same seeded walks as ``run_token_budget``, from XGrammar's masks (a fill before
    each token, as a decode loop does)."""
    xgr = xgrammar_module()
    info = xgr.TokenizerInfo(BUDGET_VOCAB, stop_token_ids=[len(BUDGET_VOCAB) - 1])
    compiled = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False).compile_grammar(
        payload["ebnf"])
    rng, walks, stop = random.Random(payload["seed"]), [], len(BUDGET_VOCAB) - 1
    bitmask = xgr.allocate_token_bitmask(1, len(BUDGET_VOCAB))
    for _ in range(BUDGET_WALKS):
        matcher, tokens, masks = xgr.GrammarMatcher(compiled), [], []
        for _ in range(BUDGET_STEPS):
            matcher.fill_next_token_bitmask(bitmask)
            masks.append(np.flatnonzero(mask_to_bool(bitmask[0].numpy(),
                                                     len(BUDGET_VOCAB))).tolist())
            allowed = [t for t in masks[-1] if t != stop]
            if not allowed:
                break
            token = rng.choice(allowed)
            if not matcher.accept_token(token):
                break
            tokens.append(token)
        walks.append({"tokens": tokens, "masks": masks})
    return {"outcome": OK, "walks": walks}


def budget_disagreements(payload: dict, ours: dict, theirs: dict) -> List[str]:
    """Steps where XGrammar's mask differs from gxg's along the same walk."""
    found = []
    for walk, their_walk in zip(ours.get("walks", []), theirs.get("walks", [])):
        for step, (mine, other) in enumerate(zip(walk["masks"], their_walk["masks"])):
            if mine != other:
                found.append(clip(f"after {[BUDGET_VOCAB[t] for t in walk['tokens'][:step]]}: "
                                  f"gxg {[BUDGET_VOCAB[t] for t in mine]}, XGrammar "
                                  f"{[BUDGET_VOCAB[t] for t in other]}", 200))
                break
    return found


# ----------------------------------------------------------------------- token consistency

TOKEN_STEPS = 160   # tokens of an instance walked per schema (keeps a case within seconds)
PROBES = 12         # allowed and refused tokens probed per step (each)


@functools.lru_cache(maxsize=None)
def qwen_encoding():
    from maskbench import qwen_encoding as encoding
    return encoding()


def first_valid_instance(path: Path) -> Optional[str]:
    case = json.loads(path.read_text())
    for test in case.get("tests", []):
        if test.get("valid") and isinstance(test.get("data"), (dict, list)):
            return json.dumps(test["data"], ensure_ascii=False)
    return None


def make_token_consistency(rng: random.Random) -> dict:
    files = maskbench_files()
    if not files:
        raise FileNotFoundError(f"MaskBench is not at {MASKBENCH}")
    while True:
        path = rng.choice(files)
        text = first_valid_instance(path)
        if text is not None:
            break
    tokens = qwen_encoding().encode_ordinary(text)[:TOKEN_STEPS]
    any_order = rng.random() < 0.3
    return {"file": path.name, "tokens": tokens, "any_order": any_order,
            "repro": f"MaskBench {path.name}, compile_json_schema(strict_mode=False, "
                     f"any_order={any_order}), instance {clip(text, 200)}"}


def run_token_consistency(payload: dict) -> dict:
    schema = json.loads((Path(MASKBENCH) / payload["file"]).read_text())["schema"]
    compiled = qwen_compiler(payload["compile_timeout"]).compile_json_schema(
        schema, strict_mode=False, any_order=payload["any_order"])
    matcher = GrammarMatcher(compiled)
    info = compiled.tokenizer_info
    tokens = payload["tokens"] + [matcher.stop_token_ids[0]]
    report = token_walk(matcher, info, random.Random(payload["seed"]),
                        lambda allowed, budget, step: tokens[step] if step < len(tokens) else None,
                        len(tokens), probes=PROBES, rollback_every=0.15)
    return walk_result(report, walked=len(report.consumed))


# ------------------------------------------------------------------------------- families


class Family:
    """How to make case ``index`` (in the parent), run it for gxg and, optionally, for XGrammar
    (each in its own child), and compare XGrammar's answer."""

    def __init__(self, name: str, default_cases: int,
                 make: Callable[[random.Random, int, dict], dict],
                 run: Callable[[dict], dict], run_xgrammar: Optional[Callable] = None,
                 compare_xgrammar: Optional[Callable] = None, grammar_error_expected=True,
                 needs: Callable[[], Optional[str]] = lambda: None):
        self.name, self.default_cases, self.make, self.run = name, default_cases, make, run
        self.run_xgrammar, self.compare_xgrammar = run_xgrammar, compare_xgrammar
        self.grammar_error_expected = grammar_error_expected
        self.needs = needs  # what is missing for this family to run (None: nothing)


def _maskbench_missing() -> Optional[str]:
    return None if maskbench_files() else f"MaskBench data not found at {MASKBENCH}"


def _qwen_missing() -> Optional[str]:
    missing = vocabularies.missing_packages("qwen")
    return _maskbench_missing() or (f"the Qwen vocabulary needs {missing}" if missing else None)


FAMILIES = {family.name: family for family in [
    Family("ebnf-mutations", 2000, lambda rng, index, options: make_ebnf_mutation(rng),
           run_ebnf_mutation),
    Family("regex-mutations", 1000, lambda rng, index, options: make_regex_mutation(rng),
           run_regex_mutation),
    Family("schema-mutations", 500, lambda rng, index, options: make_schema_mutation(rng),
           run_schema_mutation, needs=_maskbench_missing),
    Family("hostile-schemas", len(hostile_schemas()),
           lambda rng, index, options: make_hostile(index), run_hostile,
           run_xgrammar=run_hostile_xgrammar),
    Family("random-grammars", 500,
           lambda rng, index, options: make_random_grammar(rng, options["strings"]),
           run_random_grammar,
           run_xgrammar=run_random_grammar_xgrammar, compare_xgrammar=xgrammar_disagreements,
           grammar_error_expected=False),
    Family("token-budgets", 300, lambda rng, index, options: make_token_budget(rng),
           run_token_budget, run_xgrammar=run_token_budget_xgrammar,
           compare_xgrammar=budget_disagreements, grammar_error_expected=False),
    Family("token-consistency", 30, lambda rng, index, options: make_token_consistency(rng),
           run_token_consistency, grammar_error_expected=False, needs=_qwen_missing),
]}


def make_case(family: Family, seed: int, index: int, options: dict) -> dict:
    """The input of one case (JSON-serialisable), with the seed its child uses."""
    case = family.make(random.Random(case_seed(seed, family.name, index)), index, options)
    return {**case, "seed": case_seed(seed, family.name, index) ^ 1,
            "compile_timeout": options["compile_timeout"],
            "fixed_limits": options.get("fixed_limits", False),
            "exercise_seconds": EXERCISE_SHARE * options["timeout"]}


def prepare(families: List[Family], options: dict) -> None:
    """Load in the parent what the children share (compilers, tries, the Qwen vocabulary)."""
    small_compiler(options["compile_timeout"])
    if any(f.name == "token-consistency" for f in families):
        qwen_compiler(options["compile_timeout"])
        qwen_encoding()


# ------------------------------------------------------------------------------- reporting


def combine(family: Family, case: dict, ours: dict, theirs: Optional[dict]) -> dict:
    """One case's record: gxg's result, and XGrammar's crash or disagreements."""
    record = {"outcome": ours["outcome"], "checks": ours.get("checks", 0),
              "rollbacks": ours.get("rollbacks", 0), "bad": ours.get("bad", 0)}
    for key in ("error", "where", "examples", "position", "limited_strings", "oracle_skipped",
                "cut_short"):
        if key in ours:
            record[key] = ours[key]
    if theirs is not None:
        record["xgrammar"] = theirs["outcome"]
        if theirs["outcome"] in (CRASH, TIMEOUT, MEMORY):
            record["xgrammar_error"] = theirs.get("error")
        if family.compare_xgrammar:
            found = family.compare_xgrammar(case, ours, theirs)
            if found:
                record["xgrammar_disagreements"] = found
    return record


def unplaced_refusal(family: Family, record: dict, case: dict) -> bool:
    """A GrammarError for mutated EBNF or regex text that gives no line and column."""
    return (family.grammar_error_expected and ("ebnf" in case or "regex" in case)
            and record["outcome"] == GRAMMAR_ERROR and not record.get("position"))


def notable(family: Family, record: dict, case: dict) -> bool:
    """Worth a line below the table: anything but ok and an expected, well-placed refusal."""
    if record.get("xgrammar") in (CRASH, TIMEOUT, MEMORY) or record.get("xgrammar_disagreements"):
        return True
    if record["outcome"] == GRAMMAR_ERROR:
        return not family.grammar_error_expected or unplaced_refusal(family, record, case)
    return record["outcome"] != OK


def summarise(family: Family, cases: List[dict], records: List[dict], details: int) -> dict:
    counts = {outcome: 0 for outcome in OUTCOMES}
    for record in records:
        counts[record["outcome"]] += 1
    shown = []
    for case, record in zip(cases, records):
        if notable(family, record, case) and len(shown) < details:
            shown.append({"index": case["index"], **record, "repro": clip(case["repro"])})
    return {
        "family": family.name, "cases": len(records),
        "checks": sum(r["checks"] for r in records), **counts,
        "rollbacks": sum(r["rollbacks"] for r in records),
        "bad checks": sum(r["bad"] for r in records),
        XGR_CRASHES: sum(r.get("xgrammar") == CRASH for r in records),
        XGR_DISAGREEMENTS: sum(bool(r.get("xgrammar_disagreements")) for r in records),
        "xgrammar_timeouts": sum(r.get("xgrammar") == TIMEOUT for r in records),
        "xgrammar_disagreeing_strings": sum(len(r.get("xgrammar_disagreements", ()))
                                            for r in records),
        "runtime_limited_strings": sum(r.get("limited_strings", 0) for r in records),
        "oracle_skipped": sum(r.get("oracle_skipped", 0) for r in records),
        "cut_short": sum(bool(r.get("cut_short")) for r in records),
        "grammar_errors_without_position": sum(
            unplaced_refusal(family, r, c) for c, r in zip(cases, records)),
        # every case that is not ok, by outcome (details holds only the first few)
        "indices": {outcome: [c["index"] for c, r in zip(cases, records)
                              if r["outcome"] == outcome]
                    for outcome in OUTCOMES if outcome not in (OK, GRAMMAR_ERROR)},
        "xgrammar_crash_indices": [c["index"] for c, r in zip(cases, records)
                                   if r.get("xgrammar") == CRASH],
        "details": shown,
    }


def print_details(summary: dict) -> None:
    for item in summary["details"]:
        head = f"  [{summary['family']} #{item['index']}] {item['outcome']}"
        if item.get("xgrammar") not in (None, OK):
            head += f"; XGrammar: {item['xgrammar']} {item.get('xgrammar_error') or ''}"
        print(head)
        for key in ("error", "where"):
            if item.get(key):
                print(f"      {key}: {item[key]}")
        for example in item.get("examples", [])[:2] + item.get("xgrammar_disagreements", [])[:2]:
            print(f"      {example}")
        print(f"      repro: {item['repro']}")


# ---------------------------------------------------------------------------------- driver


def run_family(family: Family, indices: List[int], options: dict, in_process=False,
               progress=True) -> tuple:
    """Make, run and combine the cases ``indices`` of one family: (cases, records)."""
    cases = [{"index": i, **make_case(family, options["seed"], i, options)} for i in indices]
    xgr = family.run_xgrammar if (family.run_xgrammar and xgrammar_module()) else None
    jobs = [{"func": family.run, "payload": case} for case in cases]
    if xgr:
        jobs += [{"func": xgr, "payload": case, "quiet": True} for case in cases]
    started = time.monotonic()

    def report(done: int) -> None:
        if progress and (done % 50 == 0 or done == len(jobs)):
            print(f"  {family.name}: {done}/{len(jobs)} runs, {time.monotonic() - started:.0f} s",
                  file=sys.stderr, flush=True)
    if in_process:
        results = []
        for job in jobs:
            start_clock(job["payload"])
            results.append(job["func"](job["payload"]))
    else:
        results = run_isolated(jobs, options["jobs"], options["timeout"], options["memory_mb"],
                               report)
    ours, theirs = results[:len(cases)], (results[len(cases):] if xgr else [None] * len(cases))
    return cases, [combine(family, c, o, t) for c, o, t in zip(cases, ours, theirs)]


def run_campaign(families: List[str], cases: Optional[int] = None, *, seed: int = 0,
                 timeout: float = 10.0, compile_timeout: Optional[float] = None,
                 memory_mb: int = 4096, jobs: int = 2, strings: int = 30, details: int = 10,
                 progress: bool = True, fixed_limits=False) -> dict:
    """Run ``cases`` cases (None: each family's default) of each named family; returns the
    summary per family (the table's rows, with details) and the skipped families."""
    options = {"seed": seed, "timeout": timeout, "memory_mb": memory_mb, "jobs": jobs,
               "strings": strings, "fixed_limits": fixed_limits,
               "compile_timeout": compile_timeout if compile_timeout else timeout / 2}
    chosen, skipped = [], {}
    for name in families:
        family = FAMILIES[name]
        missing = family.needs()
        if missing:
            skipped[name] = missing
        else:
            chosen.append(family)
    prepare(chosen, options)
    summaries = []
    for family in chosen:
        count = family.default_cases if cases is None else cases
        if family.name == "hostile-schemas":
            count = min(count, family.default_cases)
        started = time.monotonic()
        case_list, records = run_family(family, list(range(count)), options, progress=progress)
        summary = summarise(family, case_list, records, details)
        summary["seconds"] = round(time.monotonic() - started, 1)
        summaries.append(summary)
    return {"options": options, "families": summaries, "skipped": skipped}


def rerun_one(family_name: str, index: int, options: dict, in_process: bool) -> None:
    family = FAMILIES[family_name]
    prepare([family], options)
    cases, records = run_family(family, [index], options, in_process, progress=False)
    print(json.dumps({"case": cases[0], "result": records[0]}, indent=2, ensure_ascii=False,
                     default=str))


def git_state() -> dict:
    """The commit the campaign ran on and how many files differed from it (results are for
    the working tree as it was)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True).stdout.strip()
    return {"head": git("rev-parse", "HEAD"),
            "changed_files": len(git("status", "--porcelain").splitlines())}


def main(argv: Optional[List[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--cases", type=int, default=None,
                        help="cases per family (default: each family's full size)")
    parser.add_argument("--strings", type=int, default=30, help="strings per random grammar")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per case")
    parser.add_argument("--compile-timeout", type=float, default=None,
                        help="gxg's compile_timeout (default: half of --timeout)")
    parser.add_argument("--memory-mb", type=int, default=4096,
                        help="address space a case may add to what it inherits")
    parser.add_argument("--jobs", type=int, default=2, help="cases running at once")
    parser.add_argument("--details", type=int, default=10, help="non-ok cases shown per family")
    parser.add_argument("--family", choices=list(FAMILIES), help="rerun one case: its family")
    parser.add_argument("--index", type=int, help="rerun one case: its index")
    parser.add_argument("--in-process", action="store_true",
                        help="with --family/--index: run in this process (tracebacks)")
    parser.add_argument("--fixed-limits", nargs="?", const=True, default=False, type=int,
                        help="random grammars: the matcher keeps RuntimeLimits() (the GPU "
                             "batch's) instead of growing them; a number: with that many "
                             "stacks (max_stacks)")
    parser.add_argument("--out", default=None, help="JSON (default profiling/results/fuzz.json)")
    args = parser.parse_args(argv)
    if args.family is not None:
        options = {"seed": args.seed, "timeout": args.timeout, "memory_mb": args.memory_mb,
                   "jobs": 1, "strings": args.strings,
                   "compile_timeout": args.compile_timeout or args.timeout / 2}
        rerun_one(args.family, args.index or 0, options, args.in_process)
        return {}
    started = time.monotonic()
    result = run_campaign(args.families, args.cases, seed=args.seed, timeout=args.timeout,
                          compile_timeout=args.compile_timeout, memory_mb=args.memory_mb,
                          jobs=args.jobs, strings=args.strings, details=args.details,
                          fixed_limits=args.fixed_limits)
    print_table(result["families"], COLUMNS)
    for name, why in result["skipped"].items():
        print(f"skipped {name}: {why}")
    for summary in result["families"]:
        print_details(summary)
    out = Path(args.out) if args.out else RESULTS / "fuzz.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine(), "git": git_state(),
               "wall_s": round(time.monotonic() - started, 1),
               "xgrammar": getattr(xgrammar_module(), "__version__", None), **result}
    out.write_text(json.dumps(payload, indent=1, ensure_ascii=False, default=str) + "\n")
    print(f"wrote {out}")
    return payload


if __name__ == "__main__":
    main()
