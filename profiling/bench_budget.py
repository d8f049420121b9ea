"""What a token budget costs the GPU fill: ``fill_next_token_bitmask`` with no budget, with a
loose budget (every token passes the ``max_rise`` bound: no walk) and with a tight one (the
tokens that fail the bound are walked), each captured in a CUDA graph.

Setup: Qwen vocabulary (151,851 ids), grammars: builtin JSON and a schema with a required array
and an optional long string; slot b is advanced through the first 3 + b % 17 tokens of a valid
document (teacher-forced, no budget), so the slots sit in different states. Tight budget = the
slot's completion distance + 2 tokens.

Floors (written down first): the budget kernels read the filled row and write the kept row
(2·B·ceil(V/32)·4 bytes, 0.6 MB at B = 256) and copy it back for slots that fit (as much
again): ~1 µs at 3 TB/s — so the loose budget should cost about the launch of two kernels over
the no-budget fill. A tight budget walks every allowed token that fails the bound: in a JSON
string that is nearly the whole vocabulary, one thread per token, ~5 bytes each, with the
closure in local memory; predicted tens of µs per slot in such states, spread over the SMs.

On the CPU (``--device cpu``) the same three fills of one ``GrammarMatcher`` per state (the
median over the slots' states of the median of ``--reps`` fills): the CPU reference walks the
tokens that fail the bound with the vectorised trie walker.

Usage: python profiling/bench_budget.py [--device cuda|cpu] [--batches 1 8 64 256] [--reps 9]
Prints a table and writes JSON (profiling/results/bench_budget[_cpu].json or --out).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, graph_time, machine, median_seconds, print_table  # noqa: E402

from gxg import vocabularies  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string"},
                         "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                         "note": {"type": "string", "minLength": 20}},
          "required": ["name", "tags"]}
DOCUMENTS = {
    "builtin_json": '{"name": "Ada Lovelace", "tags": ["math", "poetry"], "born": 1815, '
                    '"notes": {"engine": "analytical", "program": [1, 2, 3]}}',
    "schema": '{"name": "Grace Hopper", "tags": ["navy", "cobol", "compilers"], '
              '"note": "she found the first actual bug in a relay"}',
}


def measure(info, compiled, tokens, batch_size: int, reps: int) -> dict:
    batch = GrammarBatch(info, device="cuda", max_batch=batch_size, lazy_masks=False)
    for slot in range(batch_size):
        batch.bind(slot, compiled)
    for slot in range(batch_size):
        matcher = batch.to_matcher(slot)
        for token in tokens[: 3 + slot % 17]:
            assert matcher.accept_token(token)
        batch.from_matcher(slot, matcher)
    distances = [batch.to_matcher(slot).completion_distance() for slot in range(batch_size)]
    bitmask = torch.empty((batch_size, (info.vocab_size + 31) // 32), dtype=torch.int32,
                          device="cuda")
    loose = torch.full((batch_size,), 1 << 30, dtype=torch.int32, device="cuda")
    tight = torch.tensor([d + 2 for d in distances], dtype=torch.int32, device="cuda")
    row = {"batch": batch_size}
    for name, budget in (("none", None), ("loose", loose), ("tight", tight)):
        def fill(budget=budget):
            torch.ops.xg.fill_next_token_bitmask(batch.runtime, batch.arena.op_tensors(),
                                                 bitmask, budget)
        fill()  # compiles the kernels outside the capture
        row[f"{name}_us"] = graph_time(fill, replays=reps) * 1e6
        if name == "tight":  # every slot must keep some token (a completion fits)
            row["tight_empty_rows"] = int((bitmask == 0).all(dim=1).sum())
    row["mean_distance"] = sum(distances) / len(distances)
    return row


def measure_cpu(info, compiled, tokens, states: int, reps: int) -> dict:
    """Median fill time of a host matcher over ``states`` states (no budget, loose, tight)."""
    from gxg.matcher import GrammarMatcher, allocate_token_bitmask
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    times = {"none": [], "loose": [], "tight": []}
    distances = []
    for slot in range(states):
        matcher = GrammarMatcher(compiled)
        for token in tokens[: 3 + slot % 17]:
            assert matcher.accept_token(token)
        distance = matcher.completion_distance()
        distances.append(distance)
        for name, budget in (("none", None), ("loose", 1 << 30), ("tight", distance + 2)):
            times[name].append(median_seconds(
                lambda: matcher.fill_next_token_bitmask(bitmask, remaining_tokens=budget),
                reps))
    row = {"states": states}
    for name, values in times.items():
        row[f"{name}_us"] = statistics.median(values) * 1e6
    row["mean_distance"] = sum(distances) / len(distances)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--reps", type=int, default=9,
                        help="graph replays (median) on CUDA, fills per state on the CPU")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--define", action="append", default=[],
                        help="a macro for csrc/automaton.cu, e.g. BUDGET_STACKS=4 (repeatable)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    args.out = args.out or str(RESULTS / ("bench_budget.json" if args.device == "cuda"
                                          else "bench_budget_cpu.json"))
    if args.define:
        from gxg.ops import cuda_automaton
        cuda_automaton.KERNEL_DEFINES = tuple(f"-D{d}" for d in args.define)
    info = vocabularies.tokenizer_info_for("qwen")
    tokenizer = vocabularies.qwen_tokenizer()
    compiler = GrammarCompiler(info)
    grammars = {"builtin_json": compiler.compile_builtin_json_grammar(),
                "schema": compiler.compile_json_schema(SCHEMA)}
    rows = []
    for name, compiled in grammars.items():
        tokens = tokenizer.encode(DOCUMENTS[name], add_special_tokens=False)
        for batch_size in args.batches:
            measured = (measure(info, compiled, tokens, batch_size, args.reps)
                        if args.device == "cuda"
                        else measure_cpu(info, compiled, tokens, batch_size, args.reps))
            row = {"grammar": name, "max_rise": compiled.completion.max_rise, **measured}
            rows.append(row)
            print_table([row], list(row))
    print()
    print_table(rows, list(rows[0]))
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    out = {"device": device, "machine": machine(), "defines": args.define,
           "vocab_size": info.vocab_size, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
