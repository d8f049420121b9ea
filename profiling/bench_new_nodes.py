"""Which mask-cache walks the CPU ops' slowest steps spend their time in (issue 14's TBM p99).

For every Nth MaskBench file (name order; Qwen vocabulary, the compliant options and runtime
limits of ``maskbench.py``'s gxg engine, compiler cache off, lazy mask cache): each test
document is tokenized and matched token by token on a ``GrammarMatcher``; every
``fill_next_token_bitmask`` is timed (the collector off during the fill, so a collection does not
land in one step), and so is every walk of the mask cache inside it (the walks that compute the
entries of nodes met for the first time). The walks are found by wrapping the cache's classifier
(``MaskCache._classify``, a private attribute: this is a measuring tool), and named by the
rules of the nodes walked, numbers dropped (``extra_member_12`` -> ``extra_member``).

Reports: the steps' p50 / p99 / p99.9 and the share of new-node steps; of the steps at or above a
threshold (``--slow-ms``, default the p99), the share of their time in walks, and the walks
grouped by the rules of the nodes walked together, by total time. Writes the table and the
groups to profiling/results/bench_new_nodes.json (``--out`` elsewhere).

Floor, written down first: a walk classifies the whole sorted vocabulary (151,387 tokens) from
each new node, so a step that meets new nodes costs at least a few vocabulary-sized numpy
passes per node (~0.2-0.5 ms each on the 2-core VM); steady steps only read entries.

  python profiling/bench_new_nodes.py [--maskbench DIR] [--every 10] [--slow-ms X]
"""
from __future__ import annotations

import argparse
import gc
import json
import re
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

from common import MASKBENCH, percentile, print_table, write_json
from maskbench import BENCH_LIMITS, qwen_encoding

from gxg import vocabularies
from gxg.grammar.ir import GrammarError
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask

OPTIONS = dict(any_whitespace=True, strict_mode=False, any_order=True)


def rule_kind(name: str) -> str:
    """A rule's name without its number (``json_key_rest_47`` -> ``json_key_rest``)."""
    return re.sub(r"_\d+$", "", name)


def timed_walks(compiled, walks: list) -> None:
    """Wrap the compiled grammar's mask-cache classifier so that each walk appends (ms, the
    kinds of the rules of its nodes) to ``walks``."""
    cache, automaton = compiled.mask_cache, compiled.automaton
    classify = cache._classify
    if classify is None:
        return

    def walk(nodes):
        start = time.perf_counter()
        entries = classify(nodes)
        kinds = tuple(rule_kind(automaton.rule_names[automaton.node_rule[n]])
                      for n in nodes.tolist())
        walks.append(((time.perf_counter() - start) * 1e3, kinds))
        return entries

    cache._classify = walk


def step_row(what: str, values: list) -> dict:
    return {"what": what, "n": len(values), "p50": percentile(values, 50),
            "p99": percentile(values, 99), "p99.9": percentile(values, 99.9),
            "mean": sum(values) / max(len(values), 1)}


def steps_of(path: Path, compiler, encoding, bitmask) -> list:
    """(ms, [(walk ms, kinds)]) for every fill of the file's tests (an invalid one up to the
    token its grammar refuses, as ``maskbench.py`` times them)."""
    case = json.loads(path.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compiler.compile_json_schema(case["schema"], **OPTIONS)
    walks: list = []
    timed_walks(compiled, walks)
    matcher = GrammarMatcher(compiled, limits=BENCH_LIMITS)
    steps = []
    for test in case.get("tests", []):
        matcher.reset()
        text = json.dumps(test["data"], indent=None, ensure_ascii=False)
        for token in encoding.encode(text, allowed_special=set()):
            walks.clear()
            gc.disable()
            start = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            elapsed = (time.perf_counter() - start) * 1e3
            gc.enable()
            steps.append((elapsed, list(walks)))
            if not matcher.accept_token(token):
                break
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--maskbench", default=str(MASKBENCH))
    parser.add_argument("--every", type=int, default=10, help="every Nth file (name order)")
    parser.add_argument("--slow-ms", type=float, default=None,
                        help="steps at or above this are 'slow' (default: the steps' p99)")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    files = sorted(Path(args.maskbench).glob("*.json"))[::args.every]
    info = vocabularies.tokenizer_info_for("qwen")
    compiler = GrammarCompiler(info, max_threads=1, cache_enabled=False)
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    encoding = qwen_encoding()
    steps, errors = [], {}
    for path in files:
        gc.collect()
        try:
            steps.extend(steps_of(path, compiler, encoding, bitmask))
        except GrammarError as error:
            errors[path.name] = str(error)[:200]
    if not steps:
        raise SystemExit("no steps: no file compiled")

    times = [ms for ms, _ in steps]
    threshold = args.slow_ms if args.slow_ms is not None else percentile(times, 99)
    slow = [(ms, walks) for ms, walks in steps if ms >= threshold]
    walk_share = (sum(w for _, walks in slow for w, _ in walks)
                  / max(sum(ms for ms, _ in slow), 1e-9))
    rows = [step_row("steps", times),
            step_row("steps with walks", [ms for ms, walks in steps if walks])]
    groups = defaultdict(lambda: [0, 0.0])
    for _, walks in slow:
        for ms, kinds in walks:
            key = " + ".join(sorted(kinds))
            groups[key][0] += 1
            groups[key][1] += ms
    group_rows = [{"nodes walked together": key, "walks": count, "ms": total,
                   "ms per walk": total / count}
                  for key, (count, total) in sorted(groups.items(), key=lambda kv: -kv[1][1])]
    print(f"{len(files)} MaskBench files (every {args.every}), {len(errors)} not compiled; ms")
    print_table(rows, ["what", "n", "p50", "p99", "p99.9", "mean"])
    print(f"\nsteps at or above {threshold:.2f} ms: {len(slow)}, "
          f"{100 * walk_share:.0f} % of their time "
          f"in mask-cache walks; the walks by the rules of the nodes walked together:")
    print_table(group_rows[:args.top], ["nodes walked together", "walks", "ms", "ms per walk"])
    path = write_json("bench_new_nodes", {
        "files": len(files), "every": args.every, "errors": errors, "threshold_ms": threshold,
        "slow_steps": len(slow), "walk_share_of_slow": walk_share,
        "rows": rows, "groups": group_rows}, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
