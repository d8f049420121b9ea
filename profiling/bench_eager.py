"""The eager (no CUDA graph) step: what one token costs a runner that does not capture.

1. ``GrammarBatch`` at B = 1: ``fill_next_token_bitmask`` + ``accept`` + reading the accepted
   flag (one host synchronisation), teacher-forced through a valid document, host clock per
   step (median and p99 over the steps); then the same with ``fill_and_apply`` on logits
   [1, 151936] instead of the fill (``apply_step``), and with ``fill_and_sample`` (greedy) on
   them (``sample_step``).
2. ``gxg.contrib.hf.LogitsProcessor`` on CUDA: one call per step as transformers makes it
   (accept the last token, fill, apply to scores [1, 151936]), teacher-forced through the same
   document, host clock with a synchronisation after each call (``check_rows=False``, and
   again with the default ``check_rows=True``: its checks' device read); and inside
   ``model.generate`` (greedy, 64 new tokens) with a SmolLM2-135M-shaped Llama of random weights over the Qwen
   vocabulary: time per token with the grammar and without (median of 5 runs; the difference
   is within the run-to-run noise of generate itself, so the per-call number is the one to
   read).

Floor (written down first): the GPU work of the step is ~20 µs (the same fill + accept inside a
graph, profiling/RESULTS.md); the rest is host time: op dispatch, argument checks, launches and
the synchronisation. Target (issue 13): step 1 <= 60 µs.

Setup: Qwen vocabulary (151,851 ids, the model's head 151,936), builtin JSON grammar.
Usage: python profiling/bench_eager.py [--steps 200] [--no-generate] [--out FILE]
       python profiling/bench_eager.py --parts   # the step's host time, call by call
Prints a table and writes JSON (profiling/results/bench_eager.json or --out).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine, percentile, print_table  # noqa: E402

from gxg import vocabularies  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.ops import xg_ops  # noqa: E402

DOCUMENT = ('{"name": "Ada Lovelace", "tags": ["math", "poetry", "engines"], "born": 1815, '
            '"notes": {"engine": "analytical", "program": [1, 2, 3, 5, 8, 13, 21, 34]}, '
            '"letters": [{"to": "Babbage", "year": 1843}, {"to": "Somerville", "year": 1834}]}')


def eager_step_times(info, compiled, tokens, mask: str = "fill") -> list:
    """Seconds per eager step (fill + accept + reading accepted) along ``tokens``; with
    ``mask="apply"`` the fill is ``fill_and_apply`` on logits [1, 151936] (float32), as a
    runner that masks logits makes it; with ``mask="sample"`` it is ``fill_and_sample``
    (greedy) on them, as a runner that samples with the grammar's op makes it (the document's
    token is accepted, not the one drawn)."""
    batch = GrammarBatch(info, device="cuda", max_batch=1, lazy_masks=False)
    batch.bind(0, compiled)
    bitmask = torch.empty((1, (info.vocab_size + 31) // 32), dtype=torch.int32, device="cuda")
    logits = torch.randn(1, 151936, device="cuda")
    stream = torch.tensor(tokens, dtype=torch.int64, device="cuda").view(-1, 1)

    def masked_fill():
        if mask == "apply":
            batch.fill_and_apply(logits)
        elif mask == "sample":
            batch.fill_and_sample(logits)
        else:
            batch.fill_next_token_bitmask(bitmask)

    for _ in range(2):  # warm-up: the kernels, then the graphs' capture
        batch.reset()
        masked_fill()
        assert bool(batch.accept(stream[0]).item())
    batch.reset()
    torch.cuda.synchronize()
    times = []
    for t in range(len(tokens)):
        start = time.perf_counter()
        masked_fill()
        ok = bool(batch.accept(stream[t]).item())
        times.append(time.perf_counter() - start)
        if not ok:
            raise SystemExit(f"token {t} of the document was rejected")
    return times


def eager_step_parts(info, compiled, tokens, passes: int = 8) -> dict:
    """Median host time (µs) of each part of the eager step: ``fill_next_token_bitmask`` (one
    graph replay), ``accept`` (a direct launch of its kernel; on a tree that replays a graph
    for it, the tokens' copy into the graph's buffer, the replay and the flags' clone) and the
    flag's ``.item()`` (waiting for the device); then, alone, the direct launch (``launch``)
    and, where the tree has an accept graph, the copy, the clone and a replay of it."""
    parts = {name: [] for name in ("fill", "accept", "item", "launch", "copy", "clone",
                                   "replay")}
    for _ in range(passes):
        batch = GrammarBatch(info, device="cuda", max_batch=1, lazy_masks=False)
        batch.bind(0, compiled)
        bitmask = torch.empty((1, (info.vocab_size + 31) // 32), dtype=torch.int32,
                              device="cuda")
        stream = torch.tensor(tokens, dtype=torch.int64, device="cuda").view(-1, 1)
        for _ in range(2):  # warm-up: the kernels, then the graphs' capture
            batch.reset()
            batch.fill_next_token_bitmask(bitmask)
            batch.accept(stream[0]).item()
        batch.reset()
        torch.cuda.synchronize()
        for t in range(len(tokens)):
            a = time.perf_counter()
            batch.fill_next_token_bitmask(bitmask)
            b = time.perf_counter()
            accepted = batch.accept(stream[t])
            c = time.perf_counter()
            accepted.item()
            d = time.perf_counter()
            parts["fill"].append(b - a)
            parts["accept"].append(c - b)
            parts["item"].append(d - c)
        # the accept's pieces alone: a graph's (the tokens' copy in, the flags' clone out, the
        # replay), where the tree replays one for accept; the direct launch of its kernel
        graph = next((g for key, g in batch._graphs.items() if key[0] == "accept"), None)
        for _ in range(50):
            torch.cuda.synchronize()
            a = time.perf_counter()
            xg_ops.CUDA_KERNELS["accept_token"](batch.runtime, batch._arena_tensors, stream[1])
            b = time.perf_counter()
            parts["launch"].append(b - a)
            if graph is None:
                continue
            torch.cuda.synchronize()
            a = time.perf_counter()
            batch._step_tokens.copy_(stream[1])
            b = time.perf_counter()
            batch._step_accepted.clone()
            c = time.perf_counter()
            graph.replay()
            d = time.perf_counter()
            parts["copy"].append(b - a)
            parts["clone"].append(c - b)
            parts["replay"].append(d - c)
    return {f"{name}_p50_us": 1e6 * statistics.median(values) if values else None
            for name, values in parts.items()}


def processor_call_times(compiled, tokens, check_rows: bool = False) -> list:
    """Seconds per LogitsProcessor call (accept the previous token, fill, apply; with
    ``check_rows``, the default of the processor, also its checks: one device read)."""
    from gxg.contrib.hf import LogitsProcessor
    processor = LogitsProcessor(compiled, check_rows=check_rows)
    scores = torch.randn(1, 151936, device="cuda")
    ids = torch.tensor([[9707]], device="cuda")
    times = []
    for token in tokens:
        step_scores = scores.clone()
        torch.cuda.synchronize()
        start = time.perf_counter()
        processor(ids, step_scores)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        ids = torch.cat([ids, torch.tensor([[token]], device="cuda")], dim=1)
    return times[1:]  # the first call starts the rows


def processor_times(info, compiled, new_tokens: int) -> dict:
    """Seconds per generated token of model.generate with and without the processor."""
    import transformers
    from gxg.contrib.hf import LogitsProcessor
    stop = info.stop_token_ids[0]
    config = transformers.LlamaConfig(vocab_size=151936, hidden_size=576, intermediate_size=1536,
                                      num_hidden_layers=30, num_attention_heads=9,
                                      num_key_value_heads=3, max_position_embeddings=2048,
                                      bos_token_id=stop, eos_token_id=stop, pad_token_id=stop,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    prompt = torch.tensor([[9707, 11, 1879, 0, 3838, 374, 279, 30]], device="cuda")

    def run(with_grammar: bool) -> float:
        processors = [LogitsProcessor(compiled, check_rows=False)] if with_grammar else []
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                             logits_processor=processors, do_sample=False,
                             min_new_tokens=new_tokens, max_new_tokens=new_tokens,
                             pad_token_id=stop, eos_token_id=stop)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / (out.shape[1] - prompt.shape[1])

    run(True), run(False)  # warm-up
    on = statistics.median(run(True) for _ in range(5))
    off = statistics.median(run(False) for _ in range(5))
    return {"per_token_grammar_us": on * 1e6, "per_token_no_grammar_us": off * 1e6,
            "processor_overhead_us": (on - off) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--label", default="")
    parser.add_argument("--no-generate", action="store_true",
                        help="leave out the model.generate runs (the slowest part)")
    parser.add_argument("--profile", action="store_true",
                        help="also print the host functions that take the eager step's time "
                             "(cProfile, cumulative)")
    parser.add_argument("--parts", action="store_true",
                        help="only the eager step's parts (host time of each call), a table")
    parser.add_argument("--out", default=str(RESULTS / "bench_eager.json"))
    args = parser.parse_args()
    info = vocabularies.tokenizer_info_for("qwen", vocab_size=151936)
    tokenizer = vocabularies.qwen_tokenizer()
    compiled = GrammarCompiler(info).compile_builtin_json_grammar()
    document = tokenizer.encode(DOCUMENT, add_special_tokens=False)
    if args.parts:
        parts = eager_step_parts(info, compiled, document)
        print_table([parts], list(parts))
        return
    times = []
    while len(times) < args.steps:  # the document again from the start after each pass
        times += eager_step_times(info, compiled, document)
    times = [t * 1e6 for t in times[: args.steps]]
    if args.profile:
        import cProfile
        import pstats
        profiler = cProfile.Profile()
        profiler.runcall(eager_step_times, info, compiled, document)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    applied, sampled = [], []
    while len(applied) < args.steps:
        applied += eager_step_times(info, compiled, document, mask="apply")
    applied = [t * 1e6 for t in applied[: args.steps]]
    while len(sampled) < args.steps:
        sampled += eager_step_times(info, compiled, document, mask="sample")
    sampled = [t * 1e6 for t in sampled[: args.steps]]
    calls = [t * 1e6 for t in processor_call_times(compiled, document)]
    checked = [t * 1e6 for t in processor_call_times(compiled, document, check_rows=True)]
    row = {"label": args.label, "eager_step_p50_us": statistics.median(times),
           "eager_step_p99_us": percentile(times, 99),
           "apply_step_p50_us": statistics.median(applied),
           "apply_step_p99_us": percentile(applied, 99),
           "sample_step_p50_us": statistics.median(sampled),
           "sample_step_p99_us": percentile(sampled, 99),
           "processor_call_p50_us": statistics.median(calls),
           "processor_call_p99_us": percentile(calls, 99),
           "checked_call_p50_us": statistics.median(checked),
           "checked_call_p99_us": percentile(checked, 99),
           **({} if args.no_generate else processor_times(info, compiled, args.new_tokens))}
    print_table([row], list(row))
    out = {"device": torch.cuda.get_device_name(), "machine": machine(), "rows": [row]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
