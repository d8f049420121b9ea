"""Per-kernel times of a gxg decode step on the GPU, and apply-kernel variants.

Where the step's time goes: for the builtin JSON grammar on the Qwen vocabulary, a batch is
advanced a few teacher-forced tokens into real documents, then each part of the step is timed
alone as CUDA-graph replays (R launches per graph, median of several replays): the dense fill
(Triton), the uncertain-token check (CUDA C++: xg_uncertain + xg_uncertain_wide), the apply
(Triton), the whole fill_and_apply op,
and accept (an accept + rollback pair minus a rollback alone). Also the floor of the logits
pass (a fill of B x V fp32) and apply variants (block size, warps, read-before-write) against
XGrammar's apply kernel.

Usage: python profiling/bench_kernels.py [--batches 1 64 1024]
Prints tables and writes JSON (profiling/results/bench_kernels.json or --out).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    MASKBENCH, graph_time, import_xgrammar, machine, maskbench_documents, print_table,
)

from gxg import vocabularies  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.ops import cuda_automaton  # noqa: E402
from gxg.ops.apply_triton import apply_token_bitmask_inplace_triton  # noqa: E402
from gxg.ops.fill_triton import fill_dense  # noqa: E402

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64, 1024])
    parser.add_argument("--advance", type=int, default=6)
    parser.add_argument("--maskbench", default=str(MASKBENCH))
    parser.add_argument("--out", default=None)
    parser.add_argument("--define", action="append", default=[],
                        help="a macro for csrc/automaton.cu, e.g. WALK_LANES=1 (variants)")
    parser.add_argument("--no-apply-variants", action="store_true")
    args = parser.parse_args()
    cuda_automaton.KERNEL_DEFINES = tuple(f"-D{d}" for d in args.define)
    xgr = import_xgrammar()
    info = vocabularies.tokenizer_info_for("qwen")
    tokenizer = vocabularies.qwen_tokenizer()
    compiled = GrammarCompiler(info).compile_builtin_json_grammar()
    docs = maskbench_documents(64, (dict,), Path(args.maskbench))
    streams = [s for s in (tokenizer.encode(d, add_special_tokens=False) for d in docs)
               if len(s) > args.advance + 2]
    v = info.vocab_size
    rows, apply_rows = [], []
    for b in args.batches:
        batch = GrammarBatch(info, device="cuda", max_batch=b, lazy_masks=False)
        for slot in range(b):
            batch.bind(slot, compiled)
        for t in range(args.advance):
            ok = batch.accept(torch.tensor([streams[s % len(streams)][t] for s in range(b)],
                                           device="cuda"))
        assert bool(ok.all())
        next_tokens = torch.tensor([streams[s % len(streams)][args.advance] for s in range(b)],
                                   device="cuda")
        logits = torch.randn(b, v, device="cuda")
        bitmask = torch.empty((b, (v + 31) // 32), dtype=torch.int32, device="cuda")
        runtime = batch.runtime
        ones = torch.ones(b, dtype=torch.int64, device="cuda")
        parts = {
            "fill_dense": lambda: fill_dense(runtime, bitmask),
            "uncertain": lambda: cuda_automaton.uncertain(runtime, b, bitmask),
            "apply": lambda: apply_token_bitmask_inplace_triton(logits, bitmask),
            "fill_and_apply": lambda: batch.fill_and_apply(logits, bitmask),
            "accept+rollback": lambda: (batch.accept(next_tokens), batch.rollback(ones)),
            "rollback": lambda: batch.rollback(ones),
            "logits_write_floor": lambda: logits.fill_(0.5),
        }
        times = {name: graph_time(body) for name, body in parts.items()}
        times["accept"] = times["accept+rollback"] - times["rollback"]
        row = {"batch": b, **{f"{k}_us": 1e6 * t for k, t in times.items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
        for block_words in () if args.no_apply_variants else (16, 32, 64, 128):
            for warps in (4, 8):
                t = graph_time(lambda: apply_token_bitmask_inplace_triton(
                    logits, bitmask, block_words=block_words, num_warps=warps))
                apply_rows.append({"batch": b, "block_words": block_words, "warps": warps,
                                   "us": 1e6 * t, "GBps": b * v * 4 / t / 1e9})
        if xgr is not None and not args.no_apply_variants:
            t = graph_time(lambda: xgr.apply_token_bitmask_inplace(logits, bitmask))
            apply_rows.append({"batch": b, "block_words": "xgrammar", "us": 1e6 * t,
                               "GBps": b * v * 4 / t / 1e9})
    print(f"\ndevice: {torch.cuda.get_device_name()}; builtin JSON, Qwen vocab {v}, fp32")
    print_table(rows, list(rows[0]))
    print()
    best = {}
    for r in apply_rows:
        key = r["batch"]
        if isinstance(r["block_words"], int) and (key not in best or r["us"] < best[key]["us"]):
            best[key] = r
    if apply_rows:
        print_table(list(best.values()) + [r for r in apply_rows
                                           if not isinstance(r["block_words"], int)],
                    ["batch", "block_words", "warps", "us", "GBps"])
    out = Path(args.out) if args.out else (Path(__file__).resolve().parent / "results" /
                                           "bench_kernels.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), "device": torch.cuda.get_device_name(),
                               "rows": rows, "apply": apply_rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
