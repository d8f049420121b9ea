"""The ``torch.ops.xg`` dispatcher path: what a runner that calls the ops itself, eagerly, pays.

B = 1, builtin JSON grammar, Qwen vocabulary (151,851 ids): per step
``torch.ops.xg.fill_next_token_bitmask`` + ``torch.ops.xg.accept_token`` + reading the accepted
flag (one synchronisation), teacher-forced through a 53-token JSON document, 4 passes (the
first discarded), host clock; median and p90 over the steps.

Floor (written down first): the GPU work is ~20 µs (the same fill + accept inside a graph,
bench_step.py / bench_kernels.py); everything above it is host time — the dispatcher's
per-call layers (autograd and ADInplaceOrView wrappers, alias checks, a version bump per
mutated tensor), which grow with the number of tensor arguments, then the launches. The ops
take two byte tensors (runtime, arena) plus their own arguments, not lists of tensors.

Usage: python profiling/bench_dispatch.py [--passes 4] [--out FILE]
Prints a table and writes JSON (profiling/results/bench_dispatch.json or --out).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine, print_table  # noqa: E402

from gxg import vocabularies  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402

DOCUMENT = ('{"name": "Ada Lovelace", "tags": ["math", "poetry", "engines"], "born": 1815, '
            '"notes": {"a": [1, 2, 3], "b": "x"}}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=4)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    info = vocabularies.tokenizer_info_for("qwen")
    tokenizer = vocabularies.qwen_tokenizer()
    batch = GrammarBatch(info, device="cuda", max_batch=1, lazy_masks=False)
    batch.bind(0, GrammarCompiler(info).compile_builtin_json_grammar())
    runtime, arena = batch.runtime, batch.arena.op_tensors()
    bitmask = torch.zeros((1, (info.vocab_size + 31) // 32), dtype=torch.int32, device="cuda")
    everyone = torch.ones(1, dtype=torch.bool, device="cuda")
    tokens = [torch.tensor([t], device="cuda")
              for t in tokenizer.encode(DOCUMENT, add_special_tokens=False)]
    times = []
    for _ in range(args.passes):
        torch.ops.xg.reset(runtime, arena, everyone)
        for token in tokens:
            start = time.perf_counter()
            torch.ops.xg.fill_next_token_bitmask(runtime, arena, bitmask)
            if not bool(torch.ops.xg.accept_token(runtime, arena, token)[0]):
                raise SystemExit("a teacher-forced token was rejected")
            times.append(time.perf_counter() - start)
    times = sorted(times[len(tokens):])
    row = {"device": torch.cuda.get_device_name(), "steps": len(times),
           "step_p50_us": times[len(times) // 2] * 1e6,
           "step_p90_us": times[int(len(times) * 0.9)] * 1e6}
    print_table([row], list(row))
    out = Path(args.out) if args.out else RESULTS / "bench_dispatch.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), "rows": [row]}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
