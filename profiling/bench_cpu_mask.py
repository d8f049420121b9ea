"""Per-token CPU mask fill and accept along real JSON documents: gxg vs XGrammar, same run.

Documents: valid MaskBench instances whose top level is an object or array, serialised with
json.dumps(ensure_ascii=False), tokenised with the real tokenizer; grammar: builtin JSON.
Work per fill: OR the cached accept rows of the live stack tops (vocab/32 words each) and walk
the tops' uncertain tokens against the full stack. Bytes moved per fill: one bitmask row
(19 KB for 151k tokens) per top.

Usage: python profiling/bench_cpu_mask.py [--vocab qwen] [--documents 40]
Prints a table and writes profiling/results/bench_cpu_mask.json.
"""
from __future__ import annotations

import argparse
import time

from common import maskbench_documents, percentile, print_table, write_json

from gxg import vocabularies
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask

FALLBACK_DOCUMENTS = [
    '{"name": "gxg", "tags": ["gpu", "grammar"], "score": -1.5e-3, "ok": true, "none": null}',
    '[{"id": 1, "text": "héllo 中文 😀"}, {"id": 2, "nested": {"a": [1, 2, [3, {"b": {}}]]}}]',
]


def walk_times(matcher_factory, bitmask_factory, token_lists):
    fill, accept = [], []
    for tokens in token_lists:
        matcher = matcher_factory()
        bitmask = bitmask_factory()
        for token in tokens:
            start = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            middle = time.perf_counter()
            ok = matcher.accept_token(token)
            end = time.perf_counter()
            if not ok:
                raise AssertionError(f"token {token} rejected")
            fill.append(1e6 * (middle - start))
            accept.append(1e6 * (end - middle))
    return fill, accept


def summary(engine: str, what: str, values):
    return {"engine": engine, "op": what, "n": len(values),
            **{f"p{q}_us": percentile(values, q) for q in (50, 90, 99)},
            "max_us": max(values), "mean_us": sum(values) / len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", default="qwen")
    parser.add_argument("--documents", type=int, default=40)
    args = parser.parse_args()

    tokenizer = {"qwen": vocabularies.qwen_tokenizer,
                 "smollm2": vocabularies.smollm2_tokenizer}[args.vocab]()
    info = vocabularies.tokenizer_info_for(args.vocab)
    documents = maskbench_documents(args.documents) or FALLBACK_DOCUMENTS
    token_lists = [tokenizer.encode(doc, add_special_tokens=False) for doc in documents]
    compiled = GrammarCompiler(info).compile_builtin_json_grammar()
    rows = []
    fill, accept = walk_times(lambda: GrammarMatcher(compiled),
                              lambda: allocate_token_bitmask(1, info.vocab_size), token_lists)
    rows += [summary("gxg", "fill", fill), summary("gxg", "accept", accept)]
    try:
        import xgrammar as xgr
    except ImportError:
        xgr = None
    if xgr is not None:
        xinfo = xgr.TokenizerInfo(info.decoded_vocab, xgr.VocabType.RAW,
                                  vocab_size=info.vocab_size, stop_token_ids=info.stop_token_ids)
        xcompiled = xgr.GrammarCompiler(xinfo).compile_builtin_json_grammar()
        fill, accept = walk_times(lambda: xgr.GrammarMatcher(xcompiled),
                                  lambda: xgr.allocate_token_bitmask(1, info.vocab_size),
                                  token_lists)
        rows += [summary("xgrammar", "fill", fill), summary("xgrammar", "accept", accept)]
    print(f"vocabulary {args.vocab}; {len(documents)} documents, "
          f"{sum(map(len, token_lists))} tokens; builtin JSON grammar")
    print_table(rows, ["engine", "op", "n", "p50_us", "p90_us", "p99_us", "max_us", "mean_us"])
    path = write_json("bench_cpu_mask", {"vocab": args.vocab, "documents": len(documents),
                                         "tokens": sum(map(len, token_lists)), "rows": rows,
                                         "xgrammar": getattr(xgr, "__version__", None)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
