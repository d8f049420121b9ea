"""CompiledGrammar.serialize / deserialize: what moving a compiled grammar between processes
costs (a compile in a worker process, a cache on disk), gxg vs XGrammar's JSON form, same run.

Setup: --files MaskBench schemas (spread over the folder), the Qwen vocabulary, compiled with
the default lazy mask cache (as a worker would before sending), cache off. Per schema: the
median over --repeats of serialize and of deserialize (host clock); the first call of each
per process is reported apart (what is derived from the whole vocabulary: the token trie and
the tokenizer's fingerprint, ~20 ms each for Qwen's, is built once per tokenizer).

Work, written down first: the archive holds the automaton's arrays and the entries computed so
far (tens of KB for a BFCL schema): copying them is microseconds; parsing the grammar's text
back and rebuilding the automaton's Python lists are the rest — a few ms at most.

Usage: python profiling/bench_serialize.py [--files 16] [--repeats 5] [--maskbench DIR]
Prints a table and writes profiling/results/bench_serialize.json.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (MASKBENCH, import_xgrammar, maskbench_files, print_table,  # noqa: E402
                    write_json)
from e2e_decode import load_schema  # noqa: E402

from gxg import vocabularies  # noqa: E402
from gxg.grammar_compiler import CompiledGrammar, GrammarCompiler  # noqa: E402


def ms(run) -> float:
    start = time.perf_counter()
    run()
    return 1e3 * (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--maskbench", default=str(MASKBENCH))
    args = parser.parse_args()
    info = vocabularies.tokenizer_info_for("qwen")
    compiler = GrammarCompiler(info, cache_enabled=False)
    xgr = import_xgrammar()
    xgr_compiler = None
    if xgr is not None:
        xgr_info = xgr.TokenizerInfo.from_huggingface(vocabularies.qwen_tokenizer(),
                                                      vocab_size=info.vocab_size)
        xgr_compiler = xgr.GrammarCompiler(xgr_info, max_threads=1, cache_enabled=False)
    rows, first = [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in maskbench_files(Path(args.maskbench), args.files):
            schema = load_schema(path)
            try:
                compiled = compiler.compile_json_schema(schema)
            except Exception:  # noqa: BLE001 - a schema gxg refuses is not this benchmark's
                continue
            if not first:  # the per-tokenizer parts are built by the first of each
                start = time.perf_counter()
                data = compiled.serialize()
                first = {"first_serialize_ms": 1e3 * (time.perf_counter() - start),
                         "first_deserialize_ms": ms(
                             lambda: CompiledGrammar.deserialize(data, info))}
            data = compiled.serialize()
            row = {"schema": path.name[:40], "nodes": compiled.automaton.num_nodes,
                   "bytes": len(data),
                   "serialize_ms": statistics.median(
                       ms(lambda: compiled.serialize()) for _ in range(args.repeats)),
                   "deserialize_ms": statistics.median(
                       ms(lambda: CompiledGrammar.deserialize(data, info))
                       for _ in range(args.repeats))}
            if xgr_compiler is not None:
                theirs = xgr_compiler.compile_json_schema(schema)
                text = theirs.serialize_json()
                row["xgrammar_serialize_ms"] = statistics.median(
                    ms(lambda: theirs.serialize_json()) for _ in range(args.repeats))
                row["xgrammar_deserialize_ms"] = statistics.median(
                    ms(lambda: xgr.CompiledGrammar.deserialize_json(text, xgr_info))
                    for _ in range(args.repeats))
            rows.append(row)
    columns = [c for c in rows[0]]
    print_table(rows, columns)
    summary = {"schemas": len(rows), **first,
               **{f"{c}_median": statistics.median(r[c] for r in rows)
                  for c in columns if c.endswith("_ms")}}
    print_table([summary], list(summary))
    print(f"wrote {write_json('bench_serialize', {'args': vars(args), 'rows': rows, 'summary': summary})}")


if __name__ == "__main__":
    main()
