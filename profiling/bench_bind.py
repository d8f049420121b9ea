"""The host side of binding a new grammar to a GPU batch: what ``DeviceArena.register`` computes
before its copies, per schema (issue 14: a joining request waits for it, or a background thread
spends it).

Parts, in the order register needs them (each timed alone, after the previous one is cached):
* entries: the mask-cache entry of every scannable node (the vocabulary walk of
  ``NodeClassifier``, ``MaskCache.precompute``);
* layout: the kernels' per-node view of them (``kernel_layout``: dense accept rows over token
  ids, deduplicated, and the uncertain-token CSR);
* pairs: the second level (``build_context_pairs``: each node's uncertain tokens walked again
  with the node below it).
The front end (schema -> automaton) is timed too. Work done: entries walk the token trie from
every node (the cost the device build of issue 14 would move to the GPU); layout touches one
vocabulary-sized row per distinct entry (W = ceil(V / 32) words, 4,746 for Qwen); pairs walk
only the uncertain tokens.

Usage: python profiling/bench_bind.py [--maskbench DIR] [--prefix BFCL_] [--schemas 16]
Prints a table (ms per part, per schema, and medians) and writes
profiling/results/bench_bind.json (``--out`` overrides).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common import MASKBENCH, machine, print_table, write_json

from gxg import vocabularies
from gxg.grammar_compiler import GrammarCompiler


def timed(run):
    start = time.perf_counter()
    value = run()
    return value, 1e3 * (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--maskbench", type=Path, default=MASKBENCH)
    parser.add_argument("--prefix", default="BFCL_", help="schema files whose name starts so")
    parser.add_argument("--schemas", type=int, default=16)
    parser.add_argument("--vocab", default="qwen")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    info = vocabularies.tokenizer_info_for(args.vocab)
    compiler = GrammarCompiler(info, cache_enabled=False, mask_cache="lazy")
    files = sorted(args.maskbench.glob(f"{args.prefix}*.json"))[: args.schemas]
    if not files:
        raise SystemExit(f"no {args.prefix}*.json under {args.maskbench}")
    compiler.compile_json_schema('{"type": "string"}').mask_cache.precompute()  # warm the trie
    rows = []
    for path in files:
        schema = json.dumps(json.loads(path.read_text())["schema"])
        compiled, front_ms = timed(lambda: compiler.compile_json_schema(schema))
        cache = compiled.mask_cache
        _, entries_ms = timed(cache.precompute)
        _, layout_ms = timed(lambda: compiled.kernel_layout)
        _, pairs_ms = timed(lambda: compiled.context_pairs)
        distinct = len({(int(e.store_type), e.indices.tobytes(), e.bitset.tobytes(),
                         e.uncertain.tobytes()) for e in cache.entries})
        rows.append({"schema": path.stem, "nodes": int(len(cache.nodes)),
                     "distinct_entries": distinct, "front_ms": round(front_ms, 2),
                     "entries_ms": round(entries_ms, 2), "layout_ms": round(layout_ms, 2),
                     "pairs_ms": round(pairs_ms, 2)})
    columns = ["schema", "nodes", "distinct_entries", "front_ms", "entries_ms", "layout_ms",
               "pairs_ms"]
    medians = {"schema": "median", **{c: round(statistics.median(r[c] for r in rows), 2)
                                      for c in columns[1:]}}
    print_table(rows + [medians], columns)
    out = write_json("bench_bind", {"machine": machine(), "vocab": args.vocab, "rows": rows,
                                    "median": medians}, args.out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
