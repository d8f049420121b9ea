"""Where a MaskBench file's time to first mask goes, stage by stage, as one shard of
``maskbench_shards.sh`` meets the files (every Nth file in name order, one process, the rule DFA
cache warming as it goes).

Per file, what ``maskbench.py``'s gxg engine times as TTFM (compile with compliant options,
``GrammarMatcher``, reset, first fill; a collection before each file, as there), with the time
inside each stage function added up: the JSON Schema front end and its normalisation, the
passes (``prepare``: left recursion, inlining, dead rules), the automaton (rule DFAs: their
cache key, Python NFA, C construction from the key's program; byte classes; flattening), the
lazy mask cache, bind and first fill. A stage's time includes the stages it calls (rule DFAs are inside the
automaton). The wrappers cost ~0.3 µs a call: TTFM here is ~0.2-0.5 ms above maskbench.py's.

``bench_frontend.py --stages`` calls the stages one by one around the p50 of a round; this
times them inside real compiles, down to the rule DFAs' parts, and for the slowest files too.

Floor: a compile is Python work on a few hundred IR nodes and automaton states at the median
(no vocabulary-sized work before the first fill); see profiling/RESULTS.md.

Usage: python profiling/bench_compile_stages.py [--every 2] [--out results/compile_stages.json]
Prints the mean per stage over the files at p40-p60 of TTFM and over the slowest 2 %, and
writes those with the TTFM percentiles (not the rows).
"""
from __future__ import annotations

import argparse
import collections
import gc
import json
import sys
import time
import warnings
from pathlib import Path

from common import MASKBENCH, RESULTS, write_json

import maskbench
from gxg import vocabularies
import gxg.grammar_compiler as grammar_compiler
from gxg.compiler import automaton, passes
from gxg.grammar import ir, json_schema
from gxg.matcher import GrammarMatcher, allocate_token_bitmask

# (module, function, label): the stage functions timed
STAGES = [
    (json_schema, "json_schema_to_grammar", "front_end"), (ir, "_normalized", "normalize"),
    (grammar_compiler, "prepare", "passes"),
    (passes, "eliminate_left_recursion", "left_recursion"),
    (passes, "inline_small_rules", "inline_small"), (passes, "remove_dead_rules", "dead_rules"),
    (grammar_compiler, "build_automaton", "automaton"), (automaton, "_rule_dfa", "rule_dfas"),
    (automaton, "_body_key", "rule_dfa_key"), (automaton._NfaBuilder, "build", "nfa"),
    (automaton, "_c_program_dfa", "c_program_dfa"),
    (automaton, "_byte_tables", "byte_classes"), (automaton, "_flatten", "flatten"),
    (grammar_compiler, "build_mask_cache", "mask_cache"),
]


def timed(owner, name: str, label: str, totals: collections.Counter) -> None:
    function = getattr(owner, name, None)
    if function is None:  # a stage an older tree (a baseline) does not have
        return

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            totals[label] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--maskbench", default=str(MASKBENCH))
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "compile_stages.json")
    args = parser.parse_args()
    info = vocabularies.tokenizer_info_for("qwen")
    grammar_compiler.token_trie(info)
    compiler = grammar_compiler.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    totals: collections.Counter = collections.Counter()
    for owner, name, label in STAGES:
        timed(owner, name, label, totals)

    def first_mask(schema) -> None:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            start = time.perf_counter()
            compiled = compiler.compile_json_schema(schema, any_whitespace=True,
                                                    strict_mode=False, any_order=True)
            totals["compile"] += time.perf_counter() - start
        start = time.perf_counter()
        matcher = GrammarMatcher(compiled, limits=maskbench.BENCH_LIMITS)
        matcher.reset()
        matcher.fill_next_token_bitmask(bitmask)
        totals["bind_first_fill"] += time.perf_counter() - start

    first_mask(maskbench.WARMUP_SCHEMA)
    rows = []
    for path in sorted(Path(args.maskbench).glob("*.json"))[::args.every]:
        schema = json.loads(path.read_text())["schema"]
        gc.collect()
        totals.clear()
        start = time.perf_counter()
        try:
            first_mask(schema)
        except Exception:  # compile errors: not a TTFM
            continue
        rows.append({"ttfm": (time.perf_counter() - start) * 1e3,
                     **{label: seconds * 1e3 for label, seconds in totals.items()}})
    rows.sort(key=lambda row: row["ttfm"])
    n = len(rows)
    labels = ["ttfm", "compile", "front_end", "normalize", "passes", "left_recursion",
              "inline_small", "dead_rules", "automaton", "rule_dfas", "rule_dfa_key", "nfa",
              "c_program_dfa",
              "byte_classes", "flatten", "mask_cache", "bind_first_fill"]
    bands = {"p40-p60": rows[int(n * 0.4):int(n * 0.6)], "top 2 %": rows[int(n * 0.98):]}
    summary = {"files": n, "every": args.every,
               "ttfm_ms": {f"p{p}": rows[min(int(n * p / 100), n - 1)]["ttfm"]
                           for p in (50, 90, 99)},
               "mean_ms": {band: {label: sum(r.get(label, 0.0) for r in sel) / len(sel)
                                  for label in labels} for band, sel in bands.items()}}
    print(f"{n} files; TTFM p50 / p90 / p99 ms: "
          + " / ".join(f"{v:.2f}" for v in summary["ttfm_ms"].values()))
    for band, means in summary["mean_ms"].items():
        print(f"{band} ({len(bands[band])} files), mean ms: "
              + "  ".join(f"{label} {value:.2f}" for label, value in means.items()))
    write_json("compile_stages", summary, args.out)


if __name__ == "__main__":
    sys.exit(main())
