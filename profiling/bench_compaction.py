"""What an arena compaction costs the registration that needs it (gxg/arena.py, ``_compact``).

Setup: the Qwen vocabulary; --grammars MaskBench schemas compiled with the default (lazy) mask
cache and registered lazily, as ``GrammarBatch.bind`` does on CUDA, into an arena sized to
hold exactly them (plus the new grammar's worth of spare entries); every second one is then
unregistered, so the free entries are holes between the grammars that stay. The new grammar
is ``anyOf`` of the two largest schemas that left: larger than any hole, smaller than the free
entries together, so registering it compacts the arena. The same grammar registered into an
arena with room to spare is the baseline. Times are host clock around ``register`` with a
device synchronisation after it (``--device cuda``: the copies and shifts included).

Work, written down first: per moved grammar and buffer group, one device copy of its range
(through a temporary) and an in-place shift of the fields that point into it: a handful of
small torch ops each (~10 µs of host dispatch apiece on CUDA), so about (moved grammars) x
(buffer groups moved) x 3 ops; the bytes moved are the grammars' tables (kilobytes each).

Usage: python profiling/bench_compaction.py [--device cuda] [--grammars 32] [--repeats 5]
Prints a table and writes profiling/results/bench_compaction.json.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MASKBENCH, maskbench_files, print_table, write_json  # noqa: E402
from e2e_decode import load_schema  # noqa: E402

from gxg import vocabularies  # noqa: E402
from gxg.arena import ArenaCapacity, DeviceArena, entry_counts, mask_entries  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402

# ArenaCapacity field -> the buffers (entry_counts' names) it sizes
CAPACITY_OF = {"nodes": ("nodes",), "next_entries": ("next_flat",), "ref_edges": ("refs",),
               "accept_rows": ("accept_rows",), "uncertain_tokens": ("uncertain",),
               "pairs": ("pairs",), "pair_tokens": ("pair_acc", "pair_unc")}


def lazy_counts(compiled) -> dict:
    return entry_counts(compiled, mask_entries(compiled, lazy=True))


def capacity_for(counts, spare) -> ArenaCapacity:
    fields = {field: max(1, max(sum(c[b] for c in counts) + spare[b] for b in buffers))
              for field, buffers in CAPACITY_OF.items()}
    return ArenaCapacity(max_grammars=len(counts) + 1, **fields)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed_register(arena: DeviceArena, compiled, device: str) -> float:
    synchronize(device)
    start = time.perf_counter()
    arena.register(compiled, lazy=True)
    synchronize(device)
    return 1e3 * (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--grammars", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--maskbench", default=str(MASKBENCH))
    args = parser.parse_args()
    info = vocabularies.tokenizer_info_for("qwen")
    compiler = GrammarCompiler(info, cache_enabled=False)
    schemas, compiled = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in maskbench_files(Path(args.maskbench), 4 * args.grammars):
            if len(compiled) == args.grammars:
                break
            try:
                schema = load_schema(path)
                compiled.append(compiler.compile_json_schema(schema))
                schemas.append(schema)
            except Exception:  # noqa: BLE001 - a schema gxg refuses is not this benchmark's
                continue
        leaving = sorted(range(1, len(compiled), 2),
                         key=lambda i: compiled[i].automaton.num_nodes)[-2:]
        new_schema = {"anyOf": [schemas[i] for i in leaving]}
    counts = [lazy_counts(c) for c in compiled]
    rows = []
    for repeat in range(args.repeats):
        new = compiler.compile_json_schema(new_schema)  # a new object: registered anew
        spare = lazy_counts(new)
        tight = DeviceArena(info, args.device, capacity_for(counts, spare))
        ids = [tight.register(c, lazy=True) for c in compiled]
        for i in range(1, len(ids), 2):
            tight.unregister(ids[i])
        largest_hole = max(counts[i]["nodes"] for i in range(1, len(ids), 2))
        with_compaction = timed_register(tight, new, args.device)
        roomy = DeviceArena(info, args.device, capacity_for(counts + [spare], spare))
        for c in compiled:
            roomy.register(c, lazy=True)
        without = timed_register(roomy, new, args.device)
        rows.append({"repeat": repeat, "grammars": len(compiled),
                     "staying": len(compiled) - len(compiled) // 2, "new_nodes": spare["nodes"],
                     "largest_hole_nodes": largest_hole,
                     "register_with_compaction_ms": with_compaction,
                     "register_with_room_ms": without})
    summary = {"device": args.device, "grammars": len(compiled),
               "with_compaction_ms_median": statistics.median(
                   r["register_with_compaction_ms"] for r in rows),
               "with_room_ms_median": statistics.median(r["register_with_room_ms"] for r in rows)}
    print_table(rows, list(rows[0]))
    print_table([summary], list(summary))
    if args.device == "cuda":
        summary["card"] = torch.cuda.get_device_name()
    path = write_json("bench_compaction", {"args": vars(args), "rows": rows, "summary": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
