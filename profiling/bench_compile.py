"""Compile time and mask-cache size: gxg vs XGrammar, same vocabulary, same run.

Work done: for every scannable automaton node, every token of the sorted vocabulary is walked
until it dies (gxg shares the work of common prefixes through the token trie). Bytes moved are
small (the vocabulary is ~1 MB); the cost is the number of (configuration, byte) steps and the
Python closure run for each configuration transition seen for the first time.

Usage: python profiling/bench_compile.py [--vocab qwen] [--repeats 5]
Prints a table and writes profiling/results/bench_compile.json.
"""
from __future__ import annotations

import argparse
import time

from common import import_xgrammar, median_seconds, print_table, write_json

from gxg import vocabularies
from gxg.compiler.automaton import build_automaton
from gxg.compiler.mask_cache import build_mask_cache
from gxg.compiler.passes import prepare
from gxg.grammar import Grammar
from gxg.grammar_compiler import compile_grammar_ir, token_trie

EBNF_GRAMMARS = {
    "arithmetic": 'root ::= expr\nexpr ::= expr ("+" | "-") term | term\n'
                  'term ::= term ("*" | "/") factor | factor\n'
                  'factor ::= [0-9]+ ("." [0-9]+)? | "(" ws expr ws ")"\nws ::= [ ]*',
    "nested_arrays": 'root ::= array\narray ::= "[" ws (value (ws "," ws value)*)? ws "]"\n'
                     'value ::= array | [0-9]+ | "\\"" [a-z]* "\\""\nws ::= [ \\n]*',
    "person_object": 'root ::= "{" ws "\\"name\\"" ws ":" ws string ws "," ws "\\"age\\"" ws ":" '
                     'ws [0-9]+ ws "," ws "\\"tags\\"" ws ":" ws "[" ws (string (ws "," ws '
                     'string)*)? ws "]" ws "}"\nstring ::= "\\"" ([^"\\\\\\x00-\\x1f] | "\\\\" '
                     '["\\\\/bfnrt])* "\\""\nws ::= [ \\n\\t]*',
    "unicode_words": 'root ::= word (" " word)*\nword ::= [a-zA-Zà-ÿ一-龥]+',
}


def grammars():
    yield "builtin_json", Grammar.builtin_json_grammar(), None
    for name, ebnf in EBNF_GRAMMARS.items():
        yield name, Grammar.from_ebnf(ebnf), ebnf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", default="qwen")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    info = vocabularies.tokenizer_info_for(args.vocab)
    start = time.perf_counter()
    info.sorted_vocab
    sorted_vocab_s = time.perf_counter() - start
    start = time.perf_counter()
    trie = token_trie(info)
    trie_s = time.perf_counter() - start

    xgr = import_xgrammar()
    if xgr is not None:
        xinfo = _xgrammar_info(xgr, args.vocab, info)
    rows = []
    for name, grammar, ebnf in grammars():
        compiled = compile_grammar_ir(grammar, info, trie)
        gxg_s = median_seconds(lambda: compile_grammar_ir(grammar, info, trie), args.repeats)
        stats = compiled.node_statistics()
        automaton = build_automaton(prepare(grammar))
        plain = build_mask_cache(automaton, trie, context_expansion=False).uncertain_counts()
        row = {
            "grammar": name, "nodes": compiled.automaton.num_nodes,
            "gxg_ms": 1e3 * gxg_s, "gxg_bytes": compiled.memory_size_bytes,
            "uncertain_max": stats["uncertain_max"],
            "uncertain_mean": stats["uncertain_mean"],
            "uncertain_max_no_expansion": int(plain.max()) if len(plain) else 0,
            "uncertain_mean_no_expansion": float(plain.mean()) if len(plain) else 0.0,
        }
        if xgr is not None:
            for threads in sorted({1, _cores()}):
                compiler = xgr.GrammarCompiler(xinfo, max_threads=threads, cache_enabled=False)
                make = ((lambda c=compiler: c.compile_builtin_json_grammar()) if ebnf is None
                        else (lambda c=compiler: c.compile_grammar(ebnf)))
                xcompiled = make()
                row[f"xgr_ms_{threads}t"] = 1e3 * median_seconds(make, args.repeats)
            row["xgr_bytes"] = xcompiled.memory_size_bytes
            best = min(v for k, v in row.items() if k.startswith("xgr_ms_"))
            row["gxg/xgr"] = row["gxg_ms"] / best
        rows.append(row)
    columns = ["grammar", "nodes", "gxg_ms", *[k for k in rows[0] if k.startswith("xgr_ms_")],
               "gxg/xgr", "gxg_bytes", "xgr_bytes", "uncertain_max", "uncertain_mean",
               "uncertain_max_no_expansion", "uncertain_mean_no_expansion"]
    print(f"vocabulary {args.vocab}: {len(info.sorted_token_ids)} sorted tokens; sorted vocab "
          f"{sorted_vocab_s * 1e3:.0f} ms, token trie {trie_s * 1e3:.0f} ms (once per vocabulary)")
    print_table(rows, [c for c in columns if c in rows[0]])
    path = write_json("bench_compile", {"vocab": args.vocab, "repeats": args.repeats,
                                        "sorted_vocab_ms": sorted_vocab_s * 1e3,
                                        "trie_ms": trie_s * 1e3, "rows": rows,
                                        "xgrammar": getattr(xgr, "__version__", None)})
    print(f"wrote {path}")


def _cores() -> int:
    import os
    return os.cpu_count() or 1


def _xgrammar_info(xgr, vocab: str, info):
    """XGrammar's TokenizerInfo over exactly gxg's decoded vocabulary (RAW bytes), so both
    engines see the same tokens."""
    return xgr.TokenizerInfo(info.decoded_vocab, xgr.VocabType.RAW, vocab_size=info.vocab_size,
                             stop_token_ids=info.stop_token_ids)


if __name__ == "__main__":
    main()
