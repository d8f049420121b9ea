"""Time to first mask of the CPU ops over MaskBench schemas, and where the compile spends it.

What is timed is what ``maskbench.py``'s gxg engine times as TTFM, file by file in name order:
``GrammarCompiler(cache_enabled=False).compile_json_schema`` (compliant options), a
``GrammarMatcher`` (bind), its reset and its first fill (the root's mask entry is walked then).
``batch_bind``, apart from TTFM: a lazy ``GrammarBatch.bind`` of the same compiled grammar on
the CPU arena (the host side of a GPU bind). The vocabulary and its token trie are built before the clock starts. Round 1 meets every
schema once, with the process's caches as the schemas before it left them (what a server
sees: the rule DFA cache holds the rules of earlier schemas); a later round compiles each
schema again. ``--stages`` times the compile's parts by hand in one more pass, each schema once
more: the schema to grammar (front end), ``prepare`` (passes), ``build_automaton``, the lazy
mask cache, bind and first mask, as means over the files around the p50 TTFM of round 1.

Floor: a compile is Python work on a few hundred IR nodes and automaton states (~250 nodes at
the median); nothing vocabulary-sized happens before the first fill, which walks the
vocabulary from the root's node only.

Usage: python profiling/bench_frontend.py [--maskbench DIR] [--every N] [--rounds 2] [--stages]
Prints tables and writes profiling/results/bench_frontend.json (``--out`` elsewhere). Runs on
older trees too (the rule DFA cache's hit count is reported where it exists).
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Optional

from common import MASKBENCH, percentile, print_table, write_json

from gxg import compile_budget, vocabularies
from gxg.arena import ArenaFullError
from gxg.compiler import automaton as automaton_module
from gxg.compiler.automaton import build_automaton, gc_paused
from gxg.compiler.mask_cache import build_mask_cache
from gxg.compiler.passes import prepare
from gxg.grammar.ir import Grammar, GrammarError
from gxg.grammar_compiler import CompiledGrammar, GrammarCompiler, token_trie
from gxg.batch import GrammarBatch
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from gxg.runtime import RuntimeLimits

OPTIONS = dict(any_whitespace=True, strict_mode=False, any_order=True)
# maskbench.py's limits (BENCH_LIMITS): the same bind
LIMITS = RuntimeLimits(max_stacks=512, pool_entries=1 << 16, max_closure=4096)
WARMUP = {"type": "object", "properties": {"a": {"type": "string"}}}
PARTS = ("compile", "bind", "first_mask", "ttfm", "batch_bind")
STAGES = ("front_end", "passes", "automaton", "mask_cache", "bind", "first_mask")


def batch_bind(batch, compiled) -> Optional[float]:
    """ms of a lazy ``GrammarBatch.bind`` on the CPU arena (what a GPU bind computes on the
    host, with the copies to a CPU arena), then the slot is freed again; None for a grammar
    larger than the arena (counted apart)."""
    t = time.perf_counter()
    try:
        gid = batch.bind(0, compiled)
    except ArenaFullError:
        return None
    elapsed = 1e3 * (time.perf_counter() - t)
    batch.unbind(0)
    batch.arena.unregister(gid)  # the arena holds a bounded number of grammars
    return elapsed


def ttfm(compiler, schema, bitmask, has_tests: bool) -> dict:
    clock = time.perf_counter
    t0 = clock()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        compiled = compiler.compile_json_schema(schema, **OPTIONS)
    t1 = clock()
    matcher = GrammarMatcher(compiled, limits=LIMITS)
    t2 = clock()
    matcher.reset()
    if has_tests:  # maskbench fills only for a schema with tests
        matcher.fill_next_token_bitmask(bitmask)
    t3 = clock()
    return {"compile": 1e3 * (t1 - t0), "bind": 1e3 * (t2 - t1),
            "first_mask": 1e3 * (t3 - t2), "ttfm": 1e3 * (t3 - t0), "compiled": compiled}


def stages(compiler, schema, bitmask) -> dict:
    """The compile's parts called one by one, as ``GrammarCompiler`` calls them."""
    clock = time.perf_counter
    info = compiler.tokenizer_info
    trie = token_trie(info)
    out = {}
    with warnings.catch_warnings(record=True), compile_budget.within(None), gc_paused():
        warnings.simplefilter("always")
        t = clock()
        grammar = Grammar.from_json_schema(schema, **OPTIONS)
        out["front_end"] = 1e3 * (clock() - t)
        t = clock()
        prepared = prepare(grammar)
        out["passes"] = 1e3 * (clock() - t)
        t = clock()
        automaton = build_automaton(prepared, max_nodes=compiler.max_automaton_nodes)
        out["automaton"] = 1e3 * (clock() - t)
        t = clock()
        cache = build_mask_cache(automaton, trie, max_bytes=None, lazy=True,
                                 sorted_token_ids=info.sorted_token_ids)
        compiled = CompiledGrammar(grammar, info, automaton, cache)
        out["mask_cache"] = 1e3 * (clock() - t)
    t = clock()
    matcher = GrammarMatcher(compiled, limits=LIMITS)
    out["bind"] = 1e3 * (clock() - t)
    t = clock()
    matcher.reset()
    matcher.fill_next_token_bitmask(bitmask)
    out["first_mask"] = 1e3 * (clock() - t)
    out["nodes"] = int(automaton.num_nodes)
    return out


def rule_dfa_hits() -> int:
    """Rule DFAs the cache holds (0 on a tree without it)."""
    return len(getattr(automaton_module, "_rule_dfas", ()))


def summary(label: str, values) -> dict:
    return {"what": label, "p50": percentile(values, 50), "p90": percentile(values, 90),
            "p99": percentile(values, 99), "max": max(values),
            "mean": sum(values) / len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--maskbench", default=str(MASKBENCH))
    parser.add_argument("--every", type=int, default=1, help="every Nth file (name order)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    files = sorted(Path(args.maskbench).glob("*.json"))[::args.every]
    cases = []
    for path in files:
        case = json.loads(path.read_text())
        cases.append((path.name, case["schema"], bool(case.get("tests"))))
    info = vocabularies.tokenizer_info_for("qwen")
    token_trie(info)
    compiler = GrammarCompiler(info, max_threads=1, cache_enabled=False)
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    batch = GrammarBatch(info, device="cpu", max_batch=1, lazy_masks=True)
    batch._build_masks = lambda gid, compiled: None  # no builder thread (as bench_ttfm's held batch)
    batch_bind(batch, ttfm(compiler, WARMUP, bitmask, True)["compiled"])  # imports, tables

    rounds, errors = [], {}
    for _ in range(args.rounds):
        times = {}
        for name, schema, has_tests in cases:
            if name in errors:
                continue
            gc.collect()
            try:
                times[name] = ttfm(compiler, schema, bitmask, has_tests)
                times[name]["batch_bind"] = batch_bind(batch, times[name].pop("compiled"))
            except GrammarError as error:
                errors[name] = str(error)[:200]
        rounds.append(times)
        print(f"round {len(rounds)}: {len(times)} schemas, rule DFAs cached {rule_dfa_hits()}",
              file=sys.stderr)
    rows = [dict(summary(f"{part}, round {r + 1}", [t[part] for t in times.values()
                                                   if t[part] is not None]))
            for r, times in enumerate(rounds) for part in PARTS]
    too_large = sum(t["batch_bind"] is None for t in rounds[0].values()) if rounds else 0
    print(f"{len(files)} MaskBench files, {len(errors)} not compiled; ms"
          + (f"; batch_bind: {too_large} grammars larger than the CPU arena left out"
             if too_large else ""))
    print_table(rows, ["what", "p50", "p90", "p99", "max", "mean"])
    payload = {"files": len(files), "errors": errors, "rows": rows}
    if args.stages:
        first = rounds[0]
        order = sorted(first, key=lambda name: first[name]["ttfm"])
        middle = set(order[max(0, len(order) // 2 - 25): len(order) // 2 + 25])
        parts = [stages(compiler, schema, bitmask) for name, schema, _ in cases
                 if name in middle]
        stage_rows = [{"stage": key, "ms": sum(p[key] for p in parts) / len(parts)}
                      for key in (*STAGES, "nodes")]
        print(f"\nstages, means over the {len(parts)} files around the p50 TTFM of round 1")
        print_table(stage_rows, ["stage", "ms"])
        payload["stages"] = stage_rows
    print(f"wrote {write_json('bench_frontend', payload, args.out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
