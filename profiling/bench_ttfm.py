"""Time to first mask on the GPU path, and what a fill pays for nodes without an entry (issue 14).

For each MaskBench schema (Qwen vocabulary, compiler cache off, one slot):

* ``ttfm_ms``: host clock of compile + ``GrammarBatch.bind`` + the first
  ``fill_next_token_bitmask`` and a synchronisation, in two modes, each on its own batch and its
  own compile: ``lazy`` (the CUDA default: the arena takes the automaton and no vocabulary is
  walked; the fill walks every token from the nodes without an entry) and ``eager``
  (``lazy_masks=False``: every entry computed on the host at bind, as before). The lazy mode
  goes first: its compile meets the schema for the first time in the process (the rule DFA
  cache holds only the earlier schemas' rules), as a server's would; the eager mode's compile
  is the schema's second;
* the fills of a walk of ``--steps`` random allowed tokens, each timed as a replay of a CUDA
  graph of the fill (device time, CUDA events; the mean of 3 replays), first with the entries
  missing (the builder thread held
  back), then, on the same tokens, after ``commit_masks``: ``extra_us`` = the first minus the
  second, step by step (what a fill that meets nodes without an entry costs more than a
  steady one at B = 1).

Floor, written down first: a node without an entry has all S = 151,387 sorted tokens walked
from the real stack; most die at their first byte (1.0-1.4 bytes on average), each walk a few
hundred cycles of dependent loads, spread over xg_uncertain's UNBUILT_THREADS = 32,768 threads
at B = 1 (5 tokens per thread): ~5-20 µs more per such top; a fill has one to a few tops.

  python profiling/bench_ttfm.py --maskbench <folder> --files 16 --steps 24
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (MASKBENCH, maskbench_files, percentile, print_table,  # noqa: E402
                    write_json)
from e2e_decode import load_schema  # noqa: E402

from gxg import vocabularies  # noqa: E402
from gxg.arena import ArenaFullError, mask_entries  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.grammar.ir import GrammarError  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402


def first_mask_ms(compiler, schema, lazy: bool, bitmask) -> tuple:
    batch = GrammarBatch(compiler.tokenizer_info, device="cuda", max_batch=1, lazy_masks=lazy,
                         eager_graphs=False)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(schema, strict_mode=False)
    t1 = time.perf_counter()
    gid = batch.bind(0, compiled)
    t2 = time.perf_counter()
    batch.fill_next_token_bitmask(bitmask)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    return batch, compiled, gid, {"compile_ms": 1e3 * (t1 - t0), "bind_ms": 1e3 * (t2 - t1),
                                  "fill_ms": 1e3 * (t3 - t2), "ttfm_ms": 1e3 * (t3 - t0)}


def fill_graph(batch, bitmask):
    """A CUDA graph of the batch's fill (it reads the arena's node rows at every replay)."""
    batch.fill_next_token_bitmask(bitmask)   # kernels built outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        batch.fill_next_token_bitmask(bitmask)
    return graph


def timed_fill(graph, replays: int = 3) -> float:
    """Device µs of one replay of the fill's graph (the mean of ``replays``: a fill rewrites
    the whole row, so replays are idempotent)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return 1e3 * start.elapsed_time(end) / replays


def walk_fills(batch, graph, bitmask, tokens=None, steps=0, seed=0):
    """Fill, then accept (given tokens, or random allowed ones): the fills' µs and the tokens."""
    rng = random.Random(seed)
    times, chosen = [], []
    batch.reset()
    for i in range(len(tokens) if tokens is not None else steps):
        times.append(timed_fill(graph))
        if tokens is None:
            row = bitmask[0].cpu().numpy().view(np.uint32)
            bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:batch.vocab_size]
            allowed = np.flatnonzero(bits)
            allowed = allowed[~np.isin(allowed, batch.arena.tokenizer_info.stop_token_ids)]
            if len(allowed) == 0:
                break
            token = int(rng.choice(allowed.tolist()))
        else:
            token = tokens[i]
        chosen.append(token)
        batch.accept(torch.tensor([token], device="cuda"))
    return times, chosen


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--maskbench", default=str(MASKBENCH))
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    info = vocabularies.tokenizer_info_for("qwen")
    words = (info.vocab_size + 31) // 32
    bitmask = torch.zeros((1, words), dtype=torch.int32, device="cuda")
    # one compiler, as a serving engine keeps (its vocabulary tables are made once); warm-up:
    # kernels built
    compiler = GrammarCompiler(info, cache_enabled=False)
    first_mask_ms(compiler, {"type": "object"}, True, bitmask)
    first_mask_ms(compiler, {"type": "object"}, False, bitmask)
    rows, extra, lazy_fill, steady_fill, skipped = [], [], [], [], {}
    for path in maskbench_files(Path(args.maskbench), args.files):
        schema = load_schema(path)
        row = {"file": path.name}
        for mode in ("lazy", "eager"):  # lazy first: its compile is the schema's first
            try:
                batch, compiled, gid, t = first_mask_ms(compiler, schema, mode == "lazy",
                                                        bitmask)
            except (GrammarError, ArenaFullError) as error:  # not compiled; larger than the arena
                skipped[f"{path.name} {mode}"] = f"{type(error).__name__}: {str(error)[:160]}"
                print(json.dumps({"file": path.name, "mode": mode,
                                  "skipped": skipped[f"{path.name} {mode}"]}), flush=True)
                continue
            row.update({f"{mode}_{k}": v for k, v in t.items()})
            row["nodes"] = compiled.automaton.num_nodes
            try:
                batch.commit_masks(wait=True)  # (its builder thread must not run into the next)
            except ArenaFullError:  # (trees before 2f5d147 raised it for entries without room)
                pass
        if "lazy_ttfm_ms" not in row:
            continue
        # the lazy batch's builder is running; a batch of its own holds its entries back
        held = GrammarBatch(info, device="cuda", max_batch=1, lazy_masks=True,
                            eager_graphs=False)
        held._build_masks = lambda gid, compiled: None
        compiled = compiler.compile_json_schema(schema, strict_mode=False)
        gid = held.bind(0, compiled)
        row["unbuilt_nodes"] = held.arena.unbuilt_nodes(gid)
        graph = fill_graph(held, bitmask)
        before, tokens = walk_fills(held, graph, bitmask, steps=args.steps, seed=len(rows))
        try:
            held.arena.complete_entries(gid, compiled, mask_entries(compiled))
        except ArenaFullError:  # every entry does not fit: no steady fills to compare with
            rows.append(row)
            continue
        after, _ = walk_fills(held, graph, bitmask, tokens=tokens)
        lazy_fill += before
        steady_fill += after
        extra += [b - a for b, a in zip(before, after)]
        row["fill_unbuilt_us_p50"] = percentile(before, 50) if before else None
        row["fill_built_us_p50"] = percentile(after, 50) if after else None
        rows.append(row)
        print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v)
                          for k, v in row.items()}), flush=True)

    def p(values, q):
        return round(percentile(values, q), 2) if values else None
    def column(key):
        return [r[key] for r in rows if r.get(key) is not None]
    summary = [{"what": name, "p50": p(values, 50), "p99": p(values, 99), "n": len(values)}
               for name, values in (
                   ("TTFM ms, lazy", column("lazy_ttfm_ms")),
                   ("TTFM ms, eager", column("eager_ttfm_ms")),
                   ("compile ms (lazy)", column("lazy_compile_ms")),
                   ("bind ms, lazy", column("lazy_bind_ms")),
                   ("bind ms, eager", column("eager_bind_ms")),
                   ("first fill ms, lazy", column("lazy_fill_ms")),
                   ("fill µs, entries missing", lazy_fill),
                   ("fill µs, entries in", steady_fill),
                   ("fill µs, missing - in (same step)", extra))]
    print_table(summary, ["what", "p50", "p99", "n"])
    if skipped:
        print(f"{len(skipped)} runs left out (a file not compiled, or a mode's grammar larger "
              "than the default arena)")
    payload = {"device": torch.cuda.get_device_name(), "rows": rows, "summary": summary,
               "files": args.files, "steps": args.steps, "skipped": skipped}
    print(f"wrote {write_json('bench_ttfm', payload, Path(args.out) if args.out else None)}")


if __name__ == "__main__":
    main()
