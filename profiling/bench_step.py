"""Per-step time of fill + apply + accept on the GPU, gxg (one CUDA graph) vs XGrammar's CPU path.

Setup: Qwen vocabulary (151,851 tokens), fp32 logits [B, V]; grammars: builtin JSON, two
MaskBench schemas (converted to EBNF by XGrammar's converter so that both engines run the same
grammar; any_whitespace=False), a tool-calling structural tag (two tools) driven through
free text ("free_text") and through text with tool calls ("tool_call"), and the same tag after
a reasoning section under a token budget (``<think>`` any_text with max_tokens=1024 ``</think>``,
driven through the reasoning: "reasoning_budget"; every token is counted; "reasoning_free":
the same without the budget); token streams
teacher-forced from valid documents tokenised by the Qwen tokenizer; slot b follows document b
mod n.

gxg: ``GrammarBatch.fill_and_apply`` + ``accept`` for T steps captured in one CUDA graph (with a
reset at its start); per-step time = (replay time - reset-only replay time) / T.
XGrammar 0.2.8: ``BatchGrammarMatcher.batch_fill_next_token_bitmask`` on the CPU (best of several
thread counts) into a pinned bitmask, host-to-device copy, its ``apply_token_bitmask_inplace``
kernel, ``batch_accept_token``; host clock with a device synchronisation per step.

Floors (write them down first): the logits pass must write B·V·4 bytes (fp32); divided by the
device-to-device copy bandwidth measured in the same run (bytes read + written per second) it
gives the floor of apply; the bitmask is B·ceil(V/32)·4 bytes.

Usage: python profiling/bench_step.py [--batches 1 8 64 256 1024] [--steps 32]
Prints tables and writes JSON (profiling/results/bench_step.json or --out).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MASKBENCH, import_xgrammar, machine, print_table  # noqa: E402

from gxg import vocabularies  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.runtime import RuntimeLimits  # noqa: E402

SCHEMAS = ["Github_easy---o27713.json", "Github_easy---o49496.json"]


def copy_bandwidth() -> float:
    """Bytes (read + written) per second of a large device-to-device copy."""
    src = torch.randn(256 * 1024 * 1024 // 4, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    return 2 * src.numel() * 4 * 20 / (start.elapsed_time(end) / 1e3)


# Tool calling (issue 16): free text until "<tool_call>", then a call whose arguments follow the
# tool's schema, then free text again (XGrammar 0.2.8's structural tag; both engines compile it).
WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "days": {"type": "integer"}}, "required": ["city"]}
SEARCH = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TOOLS_TAG = json.dumps({"type": "structural_tag", "format": {
    "type": "triggered_tags", "triggers": ["<tool_call>"],
    "tags": [{"begin": '<tool_call>\n{"name": "' + name + '", "arguments": ',
              "content": {"type": "json_schema", "json_schema": schema},
              "end": "}\n</tool_call>"} for name, schema in (("weather", WEATHER),
                                                             ("search", SEARCH))]}})


def reasoning_tag(max_tokens):
    """The same tools after a reasoning section whose length is a token budget (XGrammar's
    any_text max_tokens; gxg counts every token of it at run time); None: no budget."""
    return json.dumps({"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>",
         "content": {"type": "any_text", "max_tokens": max_tokens}, "end": "</think>"},
        json.loads(TOOLS_TAG)["format"]]}})


REASONING_TAG = reasoning_tag(1024)
PROSE = [
    "The committee met on a grey Tuesday morning to review the quarterly numbers, and after a "
    "long discussion about shipping delays, supplier contracts and the new warehouse in the "
    "north, it agreed to revisit the budget once the auditors had finished their report.",
    "Rain had been falling for three days when the river finally rose above the old stone "
    "bridge; the villagers carried sandbags through the night, singing to keep awake, while "
    "the children watched the water from the windows of the school on the hill.",
    "To bake the bread, mix the flour with warm water and a pinch of salt, let the dough rest "
    "for an hour under a damp cloth, knead it again, shape two loaves and bake them until the "
    "crust sounds hollow when you tap it with a finger.",
    "Most of the questions users asked that week were about passwords, invoices and the mobile "
    "application, which crashed whenever someone tried to upload a photo larger than ten "
    "megabytes from an older phone with little memory left.",
]
TOOL_CALLS = [
    "Let me look that up for you. <tool_call>\n" + json.dumps(
        {"name": "weather", "arguments": {"city": "San Francisco", "days": 3}})
    + "\n</tool_call> It will be sunny all week.",
    "I will search for it. <tool_call>\n" + json.dumps(
        {"name": "search", "arguments": {"query": "best bread recipe with rye flour"}})
    + "\n</tool_call> Here is what I found.",
    "Checking two things. <tool_call>\n" + json.dumps(
        {"name": "weather", "arguments": {"city": "Oslo"}}) + "\n</tool_call><tool_call>\n"
    + json.dumps({"name": "search", "arguments": {"query": "Oslo museums"}}) + "\n</tool_call>",
]


def check_inputs(maskbench_dir: Path) -> None:
    """SystemExit naming what is missing: a CUDA device, or the MaskBench files the workloads
    read (the two schemas, whose documents are the builtin JSON workload's too)."""
    missing = [name for name in SCHEMAS if not (maskbench_dir / name).is_file()]
    if missing:
        raise SystemExit(f"bench_step: {', '.join(missing)} not in {maskbench_dir}: pass "
                         "--maskbench with a folder that holds them (MaskBench's data/, or a "
                         "copy of these files and others carried to the GPU machine)")
    if not torch.cuda.is_available():
        raise SystemExit("bench_step: no CUDA device (it times CUDA graphs)")


def workloads(maskbench_dir: Path, wanted=None):
    """(name, kind, source, documents): kind "builtin_json" (source None), "ebnf" (MaskBench
    schemas converted by XGrammar's converter: only when ``wanted`` (names; None: all) asks
    for them) or "structural_tag" (JSON text); documents are the texts the slots are
    teacher-forced through."""
    json_docs = []
    out = []
    for name in SCHEMAS:
        case = json.loads((maskbench_dir / name).read_text())
        docs = [json.dumps(t["data"]) for t in case["tests"] if t.get("valid")]
        json_docs += [d for d in docs if d.startswith("{")]
        short = name.split("---")[-1].replace(".json", "")
        if wanted is None or short in wanted:
            from xgrammar.testing import _json_schema_to_ebnf
            ebnf = _json_schema_to_ebnf(json.dumps(case["schema"]), any_whitespace=False)
            out.append((short, "ebnf", ebnf, docs))
    for path in sorted(maskbench_dir.glob("*.json"))[:200]:
        case = json.loads(path.read_text())
        for test in case["tests"]:
            if test.get("valid") and isinstance(test["data"], dict):
                json_docs.append(json.dumps(test["data"]))
                break
    return [("builtin_json", "builtin_json", None, json_docs)] + out + [
        ("free_text", "structural_tag", TOOLS_TAG, PROSE),
        ("tool_call", "structural_tag", TOOLS_TAG, TOOL_CALLS),
        ("reasoning_budget", "structural_tag", REASONING_TAG, ["<think>" + p for p in PROSE]),
        ("reasoning_free", "structural_tag", reasoning_tag(None), ["<think>" + p for p in PROSE])]


def compile_workload(compiler, kind: str, source):
    """gxg's or XGrammar's compiler (the same method names) on a workload's grammar."""
    if kind == "builtin_json":
        return compiler.compile_builtin_json_grammar()
    if kind == "ebnf":
        return compiler.compile_grammar(source)
    return compiler.compile_structural_tag(source)


def token_streams(tokenizer, docs, steps):
    streams = [tokenizer.encode(d, add_special_tokens=False) for d in docs]
    streams = [s for s in streams if len(s) >= steps]
    if not streams:
        raise SystemExit(f"no document has {steps} tokens")
    return streams


def time_gxg(info, compiled, streams, batch_size, steps, reps):
    limits = RuntimeLimits()
    batch = GrammarBatch(info, device="cuda", max_batch=batch_size, limits=limits,
                         lazy_masks=False)
    for slot in range(batch_size):
        batch.bind(slot, compiled)
    tokens = torch.tensor([[streams[b % len(streams)][t] for b in range(batch_size)]
                           for t in range(steps)], dtype=torch.int64, device="cuda")
    logits = torch.randn(batch_size, info.vocab_size, device="cuda")
    accepted_all = torch.ones(batch_size, dtype=torch.bool, device="cuda")

    def run_steps():
        batch.reset()
        for t in range(steps):
            batch.fill_and_apply(logits)
            accepted_all.logical_and_(batch.accept(tokens[t]))

    run_steps()  # compiles the kernels, checks the streams
    torch.cuda.synchronize()
    if not bool(accepted_all.all()):
        raise SystemExit("gxg rejected a teacher-forced token")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run_steps()
    torch.cuda.current_stream().wait_stream(stream)
    graphs = {}
    for name, body in (("steps", run_steps), ("reset", lambda: batch.reset())):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        graphs[name] = graph
    times = {}
    for name, graph in graphs.items():
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times[name] = start.elapsed_time(end) / reps / 1e3
    return (times["steps"] - times["reset"]) / steps


def time_apply(info, batch_size, reps, xgr):
    logits = torch.randn(batch_size, info.vocab_size, device="cuda")
    bitmask = torch.randint(-2**31, 2**31 - 1, (batch_size, (info.vocab_size + 31) // 32),
                            dtype=torch.int32, device="cuda")
    out = {}
    runs = {"gxg": lambda: torch.ops.xg.apply_token_bitmask_inplace(logits, bitmask, None)}
    if xgr is not None:
        runs["xgrammar"] = lambda: xgr.apply_token_bitmask_inplace(logits, bitmask)
    for name, run in runs.items():
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            run()
        end.record()
        torch.cuda.synchronize()
        out[name] = start.elapsed_time(end) / reps / 1e3
    return out


def time_xgrammar(xgr, xinfo, xcompiled, streams, batch_size, steps, vocab_size):
    logits = torch.randn(batch_size, vocab_size, device="cuda")
    bitmask_cpu = torch.empty((batch_size, (vocab_size + 31) // 32), dtype=torch.int32,
                              pin_memory=True)
    best = None
    cores = os.cpu_count() or 1
    for threads in sorted({1, 4, 8, cores} & set(range(1, cores + 1))):
        batcher = xgr.BatchGrammarMatcher(threads)
        matchers = [xgr.GrammarMatcher(xcompiled) for _ in range(batch_size)]
        times = []
        for t in range(steps):
            start = time.perf_counter()
            batcher.batch_fill_next_token_bitmask(matchers, bitmask_cpu)
            bitmask = bitmask_cpu.to("cuda", non_blocking=True)
            xgr.apply_token_bitmask_inplace(logits, bitmask)
            ok = xgr.BatchGrammarMatcher.batch_accept_token(
                matchers, [streams[b % len(streams)][t] for b in range(batch_size)])
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            if not all(ok):
                raise SystemExit("xgrammar rejected a teacher-forced token")
        per_step = sorted(times)[len(times) // 2]
        if best is None or per_step < best[0]:
            best = (per_step, threads)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 256, 1024])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--maskbench", default=str(MASKBENCH))
    parser.add_argument("--out", default=None)
    parser.add_argument("--grammars", nargs="+", default=None,
                        help="only these workloads (builtin_json, o27713, o49496, free_text, "
                             "tool_call, reasoning_budget, reasoning_free)")
    parser.add_argument("--gxg-only", action="store_true",
                        help="time gxg alone (XGrammar still converts the schemas)")
    parser.add_argument("--define", action="append", default=[],
                        help="a macro for csrc/automaton.cu, e.g. WALK_LANES=1 (variants)")
    args = parser.parse_args()
    check_inputs(Path(args.maskbench))
    if args.define:
        from gxg.ops import cuda_automaton
        cuda_automaton.KERNEL_DEFINES = tuple(f"-D{d}" for d in args.define)
    xgr = import_xgrammar()
    device = torch.cuda.get_device_name()
    bandwidth = copy_bandwidth()
    info = vocabularies.tokenizer_info_for("qwen")
    tokenizer = vocabularies.qwen_tokenizer()
    compiler = GrammarCompiler(info)
    if xgr is not None:
        xinfo = xgr.TokenizerInfo(info.decoded_vocab, xgr.VocabType.RAW,
                                  vocab_size=info.vocab_size, stop_token_ids=info.stop_token_ids)
        xcompiler = xgr.GrammarCompiler(xinfo)
    rows = []
    for name, kind, source, docs in workloads(Path(args.maskbench), args.grammars):
        if args.grammars and name not in args.grammars:
            continue
        compiled = compile_workload(compiler, kind, source)
        streams = token_streams(tokenizer, docs, args.steps)
        if xgr is not None:
            xcompiled = compile_workload(xcompiler, kind, source)
        for batch_size in args.batches:
            per_step = time_gxg(info, compiled, streams, batch_size, args.steps, args.reps)
            floor = batch_size * info.vocab_size * 4 / bandwidth
            row = {"grammar": name, "batch": batch_size, "gxg_us": per_step * 1e6,
                   "floor_us": floor * 1e6,
                   "target_us": (1.5 * floor + 20e-6) * 1e6}
            if xgr is not None and not args.gxg_only and (batch_size <= 256 or
                                                          name == "builtin_json"):
                x_step, threads = time_xgrammar(xgr, xinfo, xcompiled, streams, batch_size,
                                                min(args.steps, 16), info.vocab_size)
                row.update({"xgrammar_us": x_step * 1e6, "xgr_threads": threads,
                            "speedup": x_step / per_step})
            rows.append(row)
            print(json.dumps(row), flush=True)
    apply_rows = []
    for batch_size in args.batches:
        times = time_apply(info, batch_size, args.reps, None if args.gxg_only else xgr)
        bytes_written = batch_size * info.vocab_size * 4
        row = {"batch": batch_size, "gxg_apply_us": times["gxg"] * 1e6,
               "gxg_GBps_logits": bytes_written / times["gxg"] / 1e9,
               "floor_us": bytes_written / bandwidth * 1e6}
        if "xgrammar" in times:
            row["xgrammar_apply_us"] = times["xgrammar"] * 1e6
        apply_rows.append(row)
    print(f"\ndevice: {device}; copy bandwidth {bandwidth / 1e9:.0f} GB/s (read+write); "
          f"vocab {info.vocab_size}; fp32 logits")
    print_table(rows, [c for c in ["grammar", "batch", "gxg_us", "floor_us", "target_us",
                                   "xgrammar_us", "xgr_threads", "speedup"]
                       if any(c in r for r in rows)])
    print()
    print_table(apply_rows, [c for c in ["batch", "gxg_apply_us", "gxg_GBps_logits", "floor_us",
                                         "xgrammar_apply_us"] if any(c in r for r in apply_rows)])
    payload = {"machine": machine(), "device": device, "copy_bandwidth_Bps": bandwidth,
               "vocab_size": info.vocab_size, "steps": args.steps, "rows": rows,
               "apply": apply_rows}
    out = Path(args.out) if args.out else (Path(__file__).resolve().parent / "results" /
                                           "bench_step.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
