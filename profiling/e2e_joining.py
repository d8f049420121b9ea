"""End to end with requests that join: new JSON Schemas arrive while the batch decodes (issue 14,
"measure it").

Setup: e2e_decode.py's random-weight Llama (8B shape by default, Qwen's vocabulary), B slots,
one CUDA graph per step: forward -> ``GrammarBatch.fill_and_apply`` -> sampling -> ``accept`` ->
reset of the rows that finished (e2e_decode's ``gxg`` configuration). Every ``--join-every``
steps one slot's request is replaced by a new one whose grammar is the next MaskBench schema
(never compiled before: the compiler's cache is off): on the host, between two replays, the
schema is compiled, bound to that slot (``GrammarBatch.bind``: the arena registers it, the slot
is reset) and the grammar it replaces is unregistered. That host work is part of that step, as
in a serving engine, which must have a request's grammar on the device before its first step.

Configurations, same run, same model: ``off`` (no grammar: forward + sampling in one graph),
``gxg_steady`` (every slot on the same grammars, no joins), ``gxg_joining_lazy`` (compile and
a lazy bind in the step: the arena takes the automaton without the mask entries, the fills walk
every token from the nodes without one, the batch's builder (``--mask-builder``: a worker
process by default here, ``gxg.entry_builder``) builds the entries and
``GrammarBatch.commit_masks`` copies them in before the first step after they are done),
``gxg_joining`` (compile and bind with every entry in the step) and ``gxg_joining_background`` (the same arrivals prepared on a host thread:
compile, then ``GrammarBatch.register_in_background``; the slot switches at the first step
after both are done, when ``bind`` only resets it; reported: the steps a request waited) and
``gxg_joining_lazy_background`` (compile on the thread, then a lazy bind in the first step
after it: a request waits only for its compile) and ``gxg_joining_process`` (compile in a
worker process, which sends ``CompiledGrammar.serialize()``; the step after it is done
deserializes it and binds lazily: what the decode loop's interpreter keeps is the deserialize
and the bind). Each step is
timed on the host with a synchronisation at its end (so the per-step times include the joins);
reported: mean, p50, p99 per step; the grammar's overhead over ``off`` in % of the mean and the
p99; and the join work alone (compile and bind, ms per join).

Written down first: ``bind`` still computes every mask entry of the new grammar (the CPU trie
walk; the device arena is not lazy yet: issue 14's open part), measured on the VM at ~0.5 ms
per node — 0.1-0.2 s for 200-330-node schemas, seconds for the largest. A step costs ~5-10 ms
at this shape, so a joining step is predicted to cost about its bind: the mean overhead about
bind / (join_every x step), the p99 the bind itself — far past the issue's targets (<= 2 % of
the mean, <= 5 % at p99) until entries are built lazily on the device.

  python profiling/e2e_joining.py --batches 16 --join-every 8 --steps 96 --schemas 24
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (MASKBENCH, maskbench_files, percentile, print_table,  # noqa: E402
                    write_json)
from e2e_decode import (QWEN_MODEL_VOCAB, DecodeState, Llama, Step,  # noqa: E402
                        add_model_arguments, gxg_step, load_schema, make_sampler, model_config,
                        plain_step, synchronize, versions)

from gxg import vocabularies  # noqa: E402
from gxg.arena import ArenaCapacity  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.compiler.automaton import clear_rule_dfa_cache  # noqa: E402
from gxg.grammar.ir import GrammarError  # noqa: E402
from gxg.grammar_compiler import CompiledGrammar, GrammarCompiler  # noqa: E402

_WORKER_COMPILER: dict = {}  # in a compile worker process: its compiler


def _start_compile_worker(info) -> None:
    _WORKER_COMPILER["compiler"] = GrammarCompiler(info, cache_enabled=False)


def _compile_serialized(path: str):
    """In the worker: compile the schema and serialize it; (bytes, compile + serialize ms)."""
    t0 = time.perf_counter()
    compiled = _WORKER_COMPILER["compiler"].compile_json_schema(load_schema(Path(path)),
                                                                strict_mode=False)
    return compiled.serialize(), 1e3 * (time.perf_counter() - t0)


def timed_steps(step, st: DecodeState, steps: int, before_step=None) -> List[float]:
    """Host seconds per step (synchronised at its end), ``before_step(i)`` included; the rows
    start at the prompt's end (a captured step's warm-up also moved the position)."""
    st.new_requests()
    times = []
    for i in range(steps):
        if st.at_length_bound():
            st.new_requests()
        st.generated += 1
        t = time.perf_counter()
        if before_step is not None:
            before_step(i)
        step()
        synchronize(st.device)
        times.append(time.perf_counter() - t)
    return times


def summary(times: List[float]) -> Dict[str, float]:
    return {"mean_ms": 1e3 * sum(times) / len(times), "p50_ms": 1e3 * percentile(times, 50),
            "p99_ms": 1e3 * percentile(times, 99)}


def compilable(files: List[Path], compiler: GrammarCompiler) -> List[Path]:
    """``files`` less those whose schema gxg does not compile (named on stderr). The rule DFA
    cache is emptied afterwards, so that a schema's compile in a joining step is still its
    first (what a server meets with a new schema)."""
    kept = []
    for path in files:
        try:
            compiler.compile_json_schema(load_schema(path), strict_mode=False)
            kept.append(path)
        except GrammarError as error:
            print(f"e2e_joining: {path.name} left out: {str(error)[:160]}", file=sys.stderr)
    clear_rule_dfa_cache()
    return kept


def run(b: int, model, info, args, device) -> List[Dict[str, object]]:
    sample = make_sampler(args.sampler, args.temperature)
    st = DecodeState(b, args.prompt_len, args.max_len, device)
    rows = []
    graphs = device.type == "cuda"  # (the CPU runs the same steps eagerly: a smoke test)
    st.new_requests()
    off = Step(plain_step(model, st, sample), graphs)
    rows.append({"config": "off", **summary(timed_steps(off, st, args.steps))})
    del off

    compiler = GrammarCompiler(info, cache_enabled=False)
    files = compilable(maskbench_files(Path(args.maskbench), args.schemas), compiler)
    first = [compiler.compile_json_schema(load_schema(f), strict_mode=False) for f in files[:b]]
    batch = GrammarBatch(info, device=device, max_batch=b, mask_builder=args.mask_builder,
                         capacity=ArenaCapacity(max_grammars=2 * b + 2, nodes=1 << 18,
                                                next_entries=1 << 23, accept_rows=8192,
                                                uncertain_tokens=1 << 22, pairs=1 << 18,
                                                pair_tokens=1 << 22))
    gids = [batch.bind(slot, first[slot % len(first)]) for slot in range(b)]
    batch.commit_masks(wait=True)  # steady state: every entry in the arena
    st.new_requests()
    step = Step(gxg_step(model, st, batch, sample), graphs)
    rows.append({"config": "gxg_steady", **summary(timed_steps(step, st, args.steps))})

    def joining(lazy: bool):
        """``before_step`` for joins in the step: compile, bind (lazily or with every entry),
        and with ``lazy`` the entries the builder thread finished copied in before each step."""
        joins: List[Dict[str, float]] = []
        queue = iter(files[b:] + files[:b])

        def join(i: int) -> None:
            if lazy:
                batch.commit_masks()
            if i % args.join_every:
                return
            slot = (i // args.join_every) % b
            path = next(queue, None)
            if path is None:
                return
            t0 = time.perf_counter()
            compiled = compiler.compile_json_schema(load_schema(path), strict_mode=False)
            t1 = time.perf_counter()
            batch.lazy_masks = lazy
            old, gids[slot] = gids[slot], batch.bind(slot, compiled)
            if old not in gids:  # the replaced grammar leaves the arena
                batch.arena.unregister(old)
            joins.append({"file": path.name, "compile_ms": 1e3 * (t1 - t0),
                          "bind_ms": 1e3 * (time.perf_counter() - t1),
                          "nodes": compiled.automaton.num_nodes})
        return join, joins

    join, joins = joining(lazy=True)
    rows.append({"config": "gxg_joining_lazy",
                 **summary(timed_steps(step, st, args.steps, join)), "joins": joins})
    batch.commit_masks(wait=True)
    join, joins = joining(lazy=False)
    rows.append({"config": "gxg_joining",
                 **summary(timed_steps(step, st, args.steps, join)), "joins": joins})

    def prepared_joins(lazy: bool, submit, finish):
        """``before_step`` for arrivals prepared off the step: ``submit(path)`` starts one (a
        Future); at the first step after it is done, ``finish(result)`` -> (compiled, its
        record) runs in the step, then the bind (lazily with ``lazy``) and the old grammar's
        retirement."""
        records: List[Dict[str, float]] = []
        pending: List[tuple] = []
        queue = iter(files[b:] + files[:b])

        def join_prepared(i: int) -> None:
            if lazy:
                batch.commit_masks()
            for entry in [p for p in pending if p[2].done()]:  # ready: bind, retire the old
                slot, arrived, future = entry
                compiled, record = finish(future.result())
                batch.lazy_masks = lazy
                t0 = time.perf_counter()
                old, gids[slot] = gids[slot], batch.bind(slot, compiled)
                if old not in gids:
                    batch.arena.unregister(old)
                records.append({**record, "bind_ms": 1e3 * (time.perf_counter() - t0),
                                "waited_steps": i - arrived})
                pending.remove(entry)
            if i % args.join_every == 0:
                path = next(queue, None)
                if path is not None:
                    pending.append(((i // args.join_every) % b, i, submit(path)))
        return join_prepared, records

    # the same arrivals, prepared on a host thread: compile, then (``lazy=False``)
    # register_in_background; the slot switches at the first step after that is done, when
    # bind only resets it (``lazy=True``: bind registers lazily in that step)
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="join")

    def on_thread(lazy: bool):
        def prepare(path: Path):
            t0 = time.perf_counter()
            compiled = compiler.compile_json_schema(load_schema(path), strict_mode=False)
            t1 = time.perf_counter()
            if not lazy:
                batch.register_in_background(compiled).result()
            return compiled, {"compile_ms": 1e3 * (t1 - t0),
                              "register_ms": 1e3 * (time.perf_counter() - t1)}
        return prepared_joins(lazy, lambda path: worker.submit(prepare, path),
                              lambda result: result)

    for lazy, name in ((False, "gxg_joining_background"), (True, "gxg_joining_lazy_background")):
        batch.commit_masks(wait=True)
        join, joins = on_thread(lazy)
        rows.append({"config": name, **summary(timed_steps(step, st, args.steps, join)),
                     "joins": joins})
    worker.shutdown(wait=True)

    # compiled in a worker process: the step that finds one ready deserializes it and binds
    # lazily (the pool is started and warmed before the timed steps)
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_compile_worker, initargs=(info,))
    warm, _ = pool.submit(_compile_serialized, str(files[0])).result()
    CompiledGrammar.deserialize(warm, info)  # (the tokenizer's parts, once per process)

    def deserialized(result):
        data, compile_ms = result
        t0 = time.perf_counter()
        compiled = CompiledGrammar.deserialize(data, info)
        return compiled, {"compile_ms": compile_ms,
                          "deserialize_ms": 1e3 * (time.perf_counter() - t0)}

    batch.commit_masks(wait=True)
    join, joins = prepared_joins(True, lambda path: pool.submit(_compile_serialized, str(path)),
                                 deserialized)
    rows.append({"config": "gxg_joining_process",
                 **summary(timed_steps(step, st, args.steps, join)), "joins": joins})
    pool.shutdown(wait=True)
    base = rows[0]
    for row in rows[1:]:
        row["overhead_mean_pct"] = 100 * (row["mean_ms"] / base["mean_ms"] - 1)
        row["overhead_p99_pct"] = 100 * (row["p99_ms"] / base["p99_ms"] - 1)
    for row in rows:
        row["batch"] = b
    return rows


def main(argv=None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[16])
    parser.add_argument("--join-every", type=int, default=8)
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--schemas", type=int, default=24)
    parser.add_argument("--maskbench", default=str(MASKBENCH))
    parser.add_argument("--sampler", choices=["sample", "greedy"], default="sample")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--mask-builder", choices=["process", "thread"], default="process",
                        help="GrammarBatch(mask_builder=...): where the lazy entries are built")
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="sys.setswitchinterval for the run (seconds; Python's default "
                             "is 0.005): how long the decode loop may wait for the "
                             "interpreter while the registering thread holds it")
    add_model_arguments(parser)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    torch.manual_seed(args.seed)
    cfg = model_config(args)
    info = vocabularies.tokenizer_info_for("qwen", vocab_size=QWEN_MODEL_VOCAB)
    model = Llama(cfg, max(args.batches), args.max_len, device, args.init_std)
    results = []
    for b in args.batches:
        results += run(b, model, info, args, device)
    table = [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()
              if k != "joins"} for r in results]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; join every {args.join_every} steps")
    print_table(table, ["batch", "config", "mean_ms", "p50_ms", "p99_ms", "overhead_mean_pct",
                        "overhead_p99_pct"])
    for r in results:
        joins = r.get("joins")
        if joins:
            parts = [f"{key} p50 {percentile([j[key] for j in joins], 50):.1f} p99 "
                     f"{percentile([j[key] for j in joins], 99):.1f}"
                     for key in ("compile_ms", "deserialize_ms", "bind_ms", "register_ms",
                                 "waited_steps")
                     if key in joins[0]]
            print(f"B={r['batch']} {r['config']}: {len(joins)} joins; " + "; ".join(parts))
    payload = {"device": name, "versions": versions(),
               "settings": vars(args), "results": results}
    print(f"wrote {write_json('e2e_joining', payload, Path(args.out) if args.out else None)}")
    return payload


if __name__ == "__main__":
    main()
