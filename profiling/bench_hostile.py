"""Front-end time on hostile schema shapes: nested oneOf chains, long prefixItems (CPU).

Shape: ``oneOf: [<the chain one level down>, b_i]`` ``depth`` levels deep, b_i either the
string "v<i>" (disjoint from everything below: the branches can be proven apart) or the
integers >= i (overlapping the integers below: exclusivity needs complements). Work done
(written down first): converting the chain is linear in its size when the branches are proven
disjoint without complements; a complement of a nested oneOf contains the complements of the
levels below, so building them is exponential in the depth unless bounded — the merge budget
(``MERGE_BUDGET`` normalisations per top-level merge, shared by the oneOfs nested in it)
bounds it, after which the oneOf is compiled as anyOf with a warning (or refused in the
compliant mode). Also ``prefixItems`` of k integers (``items: false``): what may follow
the n-th item is one rule per n, linear in k (one alternative per item count was quadratic).
And ``minLength`` n compiled whole with an empty vocabulary: ~10 automaton nodes per required
character (a UTF-8 character class), linear in n.

Usage: python profiling/bench_hostile.py [--depths 5 10 15 20 50 100] [--timeout 60]
Prints a table and writes JSON (profiling/results/bench_hostile.json or --out).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine, print_table  # noqa: E402

from gxg.grammar import Grammar, GrammarError  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402
from gxg.tokenizer import TokenizerInfo, VocabType  # noqa: E402


def one_of_chain(depth: int, overlapping: bool) -> dict:
    schema: dict = {"type": "string"} if overlapping else {"type": "integer"}
    for i in range(depth):
        other = {"type": "integer", "minimum": i} if overlapping else \
            {"type": "string", "const": f"v{i}"}
        schema = {"oneOf": [schema, other]}
    return schema


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def convert(schema: dict, timeout: int, compile_too: bool = False) -> dict:
    """Time of the front end (``compile_too``: and of the whole compile, with an empty
    vocabulary: automaton and mask cache without a vocabulary walk)."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            grammar = Grammar.from_json_schema(schema)
            if compile_too:
                GrammarCompiler(TokenizerInfo([], VocabType.RAW, vocab_size=1),
                                cache_enabled=False).compile_grammar(grammar)
            outcome = "relaxed" if any("compiled as anyOf" in str(w.message) for w in caught) \
                else "exact"
        except GrammarError:
            outcome = "refused"
        except _Timeout:
            outcome = f"timeout ({timeout} s)"
        finally:
            signal.alarm(0)
    return {"ms": (time.perf_counter() - start) * 1e3, "outcome": outcome}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[5, 10, 15, 20, 50, 100])
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("--prefix-items", type=int, nargs="+", default=[100, 1000, 3000],
                        help="also: an array of this many prefixItems (depth = the count)")
    parser.add_argument("--min-length", type=int, nargs="+", default=[500, 1000, 2000, 4000],
                        help="also: a string of at least this many characters, fully compiled")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    for overlapping in (False, True):
        for depth in args.depths:
            row = {"branches": "overlapping" if overlapping else "disjoint", "depth": depth,
                   **convert(one_of_chain(depth, overlapping), args.timeout)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["outcome"].startswith("timeout"):
                break  # deeper ones take longer still
    for count in args.prefix_items:
        schema = {"type": "array", "prefixItems": [{"type": "integer"}] * count, "items": False}
        row = {"branches": "prefixItems", "depth": count, **convert(schema, args.timeout)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    for length in args.min_length:
        row = {"branches": "minLength (full compile)", "depth": length,
               **convert({"type": "string", "minLength": length}, args.timeout, True)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print_table(rows, ["branches", "depth", "ms", "outcome"])
    out = Path(args.out) if args.out else RESULTS / "bench_hostile.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
