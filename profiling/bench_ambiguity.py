"""Grammars whose parse stacks multiply: what a byte and a fill cost on the CPU matcher's
stacks, on its Earley sets past the stack ceiling, and in XGrammar (its Earley parser), same run.

Inputs: tests/grammar_zoo.py's EXPONENTIAL_GRAMMARS (distinct stacks exponential in the input),
a random string of --length characters over each grammar's alphabet (seeded), a small
synthetic vocabulary built from it. gxg's default GrammarMatcher takes the string one character
at a time (accept_string): on its stacks until a step would need more than max_state_bytes,
then on Earley sets (the step that crossed replays every step since the reset); the table
splits the steps by where they ran. At the end one fill of the next-token mask. XGrammar 0.2.8
(when importable) takes the same characters and fills the same mask.

Work, written down first: on stacks, a byte moves every live stack (up to 4,096 at the default
ceiling, each through its closure); on Earley sets, a byte scans the items of the last set and
closes the new one: at most (nodes x position) items, each completion visiting the callers
waiting at its origin, so the cost grows with the position, not with the number of parses.
A fill ORs the accept rows of the live nodes and walks their uncertain tokens from the set.

Usage: python profiling/bench_ambiguity.py [--length 48] [--seed 0] [--repeats 3]
Prints a table and writes profiling/results/bench_ambiguity.json.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from common import import_xgrammar, percentile, print_table, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from grammar_zoo import EXPONENTIAL_GRAMMARS, make_info, synthetic_vocab  # noqa: E402

from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.matcher import GrammarMatcher, allocate_token_bitmask  # noqa: E402


def gxg_walk(compiled, text: str, vocab_size: int) -> dict:
    matcher = GrammarMatcher(compiled)
    on_stacks, on_sets, switch_ms, switched_at = [], [], None, None
    walk_start = time.perf_counter()
    for position, char in enumerate(text):
        before = matcher.on_earley_sets
        start = time.perf_counter()
        if not matcher.accept_string(char):
            raise AssertionError(f"{char!r} at {position} rejected")
        elapsed = 1e3 * (time.perf_counter() - start)
        if matcher.on_earley_sets and not before:
            switch_ms, switched_at = elapsed, position
        else:
            (on_sets if before else on_stacks).append(elapsed)
    walk_ms = 1e3 * (time.perf_counter() - walk_start)
    bitmask = allocate_token_bitmask(1, vocab_size)
    start = time.perf_counter()
    matcher.fill_next_token_bitmask(bitmask)
    fill_ms = 1e3 * (time.perf_counter() - start)
    return {"walk_ms": walk_ms, "stack_steps": len(on_stacks), "stack_p50_ms": percentile(on_stacks, 50),
            "stack_max_ms": max(on_stacks, default=None), "switch_at": switched_at,
            "switch_ms": switch_ms, "earley_steps": len(on_sets),
            "earley_p50_ms": percentile(on_sets, 50), "earley_max_ms": max(on_sets, default=None),
            "fill_ms": fill_ms}


def xgrammar_walk(xgr, ebnf: str, info_vocab, text: str, vocab_size: int) -> dict:
    tokenizer = xgr.TokenizerInfo(list(info_vocab), vocab_size=vocab_size,
                                  stop_token_ids=[len(info_vocab) - 1])
    compiled = xgr.GrammarCompiler(tokenizer, max_threads=1,
                                   cache_enabled=False).compile_grammar(ebnf)
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    steps = []
    walk_start = time.perf_counter()
    for char in text:
        start = time.perf_counter()
        if not matcher.accept_string(char):
            raise AssertionError("XGrammar rejected a character gxg accepted")
        steps.append(1e3 * (time.perf_counter() - start))
    walk_ms = 1e3 * (time.perf_counter() - walk_start)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    start = time.perf_counter()
    matcher.fill_next_token_bitmask(bitmask)
    return {"walk_ms": walk_ms, "p50_ms": percentile(steps, 50), "max_ms": max(steps),
            "fill_ms": 1e3 * (time.perf_counter() - start)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=48, help="characters per input")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="runs per grammar (best kept)")
    args = parser.parse_args()
    xgr = import_xgrammar()
    rows = []
    for name, ebnf, alphabet in EXPONENTIAL_GRAMMARS:
        rng = random.Random(f"{args.seed}:{name}")
        text = "".join(rng.choice(alphabet) for _ in range(args.length))
        vocab = synthetic_vocab([text], seed=args.seed)
        info = make_info(vocab)
        compiled = GrammarCompiler(info, cache_enabled=False).compile_grammar(ebnf)
        runs = [gxg_walk(compiled, text, info.vocab_size) for _ in range(args.repeats)]
        best = min(runs, key=lambda run: run["walk_ms"] + run["fill_ms"])
        row = {"grammar": name, "characters": len(text), **best}
        if xgr is not None:
            try:
                theirs = min((xgrammar_walk(xgr, ebnf, vocab, text, info.vocab_size)
                              for _ in range(args.repeats)), key=lambda r: r["walk_ms"])
                row.update({f"xgrammar_{k}": v for k, v in theirs.items()})
            except Exception as error:  # noqa: BLE001 - a comparison, not the subject
                row["xgrammar_error"] = f"{type(error).__name__}: {error}"[:200]
        rows.append(row)
    columns = ["grammar", "characters", "walk_ms", "stack_steps", "stack_p50_ms", "stack_max_ms",
               "switch_at", "switch_ms", "earley_steps", "earley_p50_ms", "earley_max_ms",
               "fill_ms"]
    if xgr is not None:
        columns += ["xgrammar_walk_ms", "xgrammar_p50_ms", "xgrammar_max_ms", "xgrammar_fill_ms"]
    print_table(rows, columns)
    path = write_json("bench_ambiguity", {"args": vars(args), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
