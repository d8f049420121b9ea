"""Compile time on hostile JSON Schema shapes, by size (CPU, empty vocabulary).

In:  the shapes below at a few sizes each (flags choose the sizes), each measured in a
     subprocess of its own with a wall-clock limit (``--timeout``).
Out: per shape and size: front end (``Grammar.from_json_schema``), grammar passes
     (``gxg.compiler.passes.prepare``), automaton (``build_automaton``) and their sum, the
     automaton's node count, and the full compile (``from_json_schema`` + ``compile_grammar_ir``
     with an EMPTY vocabulary: passes, automaton and the mask cache's per-node work, no
     vocabulary walk) in ms; the growth exponent between consecutive sizes
     (log(t2/t1)/log(n2/n1): 1 is linear, 2 quadratic) and the full compile per unit of size.
     A table on stdout and JSON in profiling/results/bench_hostile.json (or ``--out``).

The work each shape should take (written down before measuring; L = total characters):

* ``enum`` of n strings (distinct 12-letter words) / n integers: a choice of n literals, which
  the automaton builder determinises into a trie and minimises: O(L) nodes and time.
* ``const`` object of n keys ({"key<i>": i}), ``const`` array of n integers, ``const`` string
  of n characters: one sequence of literals (and separators), O(L).
* n required properties, each ``{"type": "integer"}`` (with the default additionalProperties, or
  ``false``): in XGrammar's mode one member after the other (a table of 2(n + 1) entries when
  nothing is counted), O(n). In the compliant mode (``strict_mode=False, any_order=True``)
  more than 9 required members keep their schema order: a chain of n + 1 state rules, O(n).
* n properties of which every other one is required (compliant mode): the same chain of n/2
  states; the n/2 optional members (and extra members) are one shared rule that each state
  refers to once, O(n) (one alternative per optional member in every state would be O(n²)).
* ``minLength`` n: about ten automaton nodes per required character (a UTF-8 class), O(n).
* ``prefixItems`` of k integers (``items: false``): what may follow the k-th item is one rule
  per k, O(k).
* nested ``oneOf`` chains (``one_of_chain``): linear in the depth when the branches are proven
  disjoint (each level's possible values are summarised once, per type, from the level below);
  overlapping ones cost up to the shared complement budget, then are relaxed to anyOf.
* the mask cache with an empty vocabulary: one closure per automaton node. A closure that
  completes a rule escapes into every place that calls it, so k nodes that can complete a rule
  with c call sites cost k·c (the tail-called chains of prefixItems, the shared optional-member
  rule of an any-order object): that part is gxg/compiler/stack_walk.py's.

Usage: python profiling/bench_hostile.py [--shapes enum_strings required ...] [--timeout 60]
       [--scale 1.0] [--depths 5 10 20 50 100] [--before EARLIER.json] [--out PATH]
(``--before``: the JSON of a run on another tree, e.g. ``PYTHONPATH=<that tree> python
profiling/bench_hostile.py --out before.json`` run from outside this checkout, shown beside.)
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine, print_table  # noqa: E402

COMPLIANT = {"strict_mode": False, "any_order": True}  # MaskBench's JSON-Schema-compliant mode


def one_of_chain(depth: int, overlapping: bool) -> dict:
    """``oneOf: [<the chain one level down>, b_i]`` ``depth`` levels deep, b_i the string
    "v<i>" (disjoint from everything below) or the integers >= i (overlapping those below)."""
    schema: dict = {"type": "string"} if overlapping else {"type": "integer"}
    for i in range(depth):
        other = {"type": "integer", "minimum": i} if overlapping else \
            {"type": "string", "const": f"v{i}"}
        schema = {"oneOf": [schema, other]}
    return schema


def word(i: int) -> str:
    """A distinct 12-letter word per i, spread over the alphabet (no shared structure for the
    minimiser to fold, unlike "value0".."value9999")."""
    letters, x = [], (i * 2654435761 + 12345) % (26 ** 12)
    for _ in range(12):
        x, digit = divmod(x, 26)
        letters.append(chr(97 + digit))
    return "".join(letters)


def properties(n: int, required_every: int = 1, closed: bool = False) -> dict:
    names = [f"p{i}" for i in range(n)]
    schema = {"type": "object", "properties": {name: {"type": "integer"} for name in names},
              "required": names[::required_every]}
    if closed:
        schema["additionalProperties"] = False
    return schema


# shape -> (what n counts, schema of size n, options, default sizes)
SHAPES: Dict[str, Tuple[str, Callable[[int], dict], dict, List[int]]] = {
    "enum_strings": ("values", lambda n: {"enum": [word(i) for i in range(n)]}, {},
                     [1000, 3000, 10000]),
    "enum_integers": ("values", lambda n: {"enum": list(range(0, 7 * n, 7))}, {},
                      [1000, 3000, 10000]),
    "const_object": ("keys", lambda n: {"const": {f"key{i}": i for i in range(n)}}, {},
                     [500, 2000, 5000]),
    "const_array": ("items", lambda n: {"const": list(range(n))}, {}, [500, 2000, 5000]),
    "const_string": ("chars", lambda n: {"const": "x" * n}, {}, [1000, 10000, 100000]),
    "required": ("properties", properties, {}, [500, 2000, 5000]),
    "required_closed": ("properties", lambda n: properties(n, closed=True), {},
                        [500, 2000, 5000]),
    "required_compliant": ("properties", properties, COMPLIANT, [500, 2000, 5000]),
    "required_closed_compliant": ("properties", lambda n: properties(n, closed=True), COMPLIANT,
                                  [500, 2000, 5000]),
    "half_required_compliant": ("properties", lambda n: properties(n, required_every=2),
                                COMPLIANT, [500, 2000, 5000]),
    "min_length": ("chars", lambda n: {"type": "string", "minLength": n}, {},
                   [500, 1000, 2000, 4000]),
    "prefix_items": ("items", lambda n: {"type": "array", "prefixItems": [{"type": "integer"}] * n,
                                         "items": False}, {}, [100, 1000, 3000]),
}


# compiled first in each child, so that no measurement pays for the lazy imports
WARM_UP = {"type": "object", "properties": {"a": {"type": "string", "minLength": 2},
                                            "b": {"enum": [1, "x"]}}, "required": ["a"]}


def measure(shape: str, size: int) -> dict:
    """Runs in the child: the stage times (ms) of one schema, and its outcome."""
    from gxg.compiler.automaton import build_automaton
    from gxg.compiler.passes import prepare
    from gxg.grammar import Grammar, GrammarError
    from gxg.grammar_compiler import compile_grammar_ir, token_trie
    from gxg.tokenizer import TokenizerInfo, VocabType

    _, build, options, _ = SHAPES[shape]
    schema = build(size)
    info = TokenizerInfo([], VocabType.RAW, vocab_size=1)
    trie = token_trie(info)
    compile_grammar_ir(Grammar.from_json_schema(WARM_UP), info, trie)
    row: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            start = time.perf_counter()
            grammar = Grammar.from_json_schema(schema, **options)
            row["schema_ms"] = _ms_since(start)
            start = time.perf_counter()
            prepared = prepare(grammar)
            row["passes_ms"] = _ms_since(start)
            start = time.perf_counter()
            row["nodes"] = build_automaton(prepared).num_nodes
            row["automaton_ms"] = _ms_since(start)
            row["front_ms"] = row["schema_ms"] + row["passes_ms"] + row["automaton_ms"]
            start = time.perf_counter()
            compile_grammar_ir(Grammar.from_json_schema(schema, **options), info, trie)
            row["full_ms"] = _ms_since(start)
            row["outcome"] = "relaxed" if caught else "compiled"
        except GrammarError as error:
            row["outcome"] = f"refused: {str(error)[:60]}"
    return row


def chain_outcome(depth: int, overlapping: bool) -> dict:
    """Runs in the child: front-end time of a oneOf chain, and whether it stayed exact."""
    from gxg.grammar import Grammar, GrammarError
    Grammar.from_json_schema(WARM_UP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        try:
            Grammar.from_json_schema(one_of_chain(depth, overlapping))
            outcome = "relaxed" if any("compiled as anyOf" in str(w.message) for w in caught) \
                else "exact"
        except GrammarError:
            outcome = "refused"
    return {"schema_ms": _ms_since(start), "front_ms": _ms_since(start), "outcome": outcome}


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def in_child(kind: str, a, b, timeout: float) -> dict:
    """One measurement in a fresh interpreter (no warm caches, its own memory), killed at
    ``timeout`` seconds."""
    code = (f"import sys, json; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
            f"import bench_hostile as b; print(json.dumps(b.{kind}({a!r}, {b!r})))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"outcome": f"timeout ({timeout:g} s)"}
    if done.returncode != 0:
        return {"outcome": f"crash: {done.stderr.strip().splitlines()[-1][:60]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def with_growth(rows: List[dict]) -> None:
    """Adds to each row of one shape the growth exponent from the row before (front end, full
    compile) and the full compile per unit of size."""
    for before, row in zip(rows, rows[1:]):
        for column in ("front_ms", "full_ms"):
            if before.get(column) and row.get(column):
                row[column.replace("_ms", "_growth")] = round(
                    math.log(row[column] / before[column]) / math.log(row["n"] / before["n"]), 2)
    for row in rows:
        if row.get("full_ms"):
            row["full_ms_per_unit"] = round(row["full_ms"] / row["n"], 3)


def with_before(rows: List[dict], before_path: Optional[str]) -> List[str]:
    """Adds the front-end and full-compile times and outcome of an earlier run (its JSON, e.g.
    of the tree before a change) to the rows of the same shape and size; the added columns."""
    if not before_path:
        return []
    earlier = {(row["shape"], row["n"]): row
               for row in json.loads(Path(before_path).read_text())["rows"]}
    for row in rows:
        old = earlier.get((row["shape"], row["n"]), {})
        row.update({f"before_{key}": old.get(key) for key in ("front_ms", "full_ms", "outcome")})
    return ["before_front_ms", "before_full_ms", "before_outcome"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES) + ["one_of_chain"],
                        choices=list(SHAPES) + ["one_of_chain"])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every default size")
    parser.add_argument("--depths", type=int, nargs="+", default=[5, 10, 20, 50, 100],
                        help="depths of the oneOf chains")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per measurement")
    parser.add_argument("--before", default=None,
                        help="JSON of an earlier run, shown beside this one (same shapes, sizes)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows: List[dict] = []
    for shape in args.shapes:
        if shape == "one_of_chain":
            for overlapping in (False, True):
                for depth in args.depths:
                    row = {"shape": f"one_of_chain {'overlapping' if overlapping else 'disjoint'}",
                           "unit": "levels", "n": depth,
                           **in_child("chain_outcome", depth, overlapping, args.timeout)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if row["outcome"].startswith("timeout"):
                        break  # deeper ones take longer still
            continue
        unit, _, _, sizes = SHAPES[shape]
        shape_rows = []
        for size in (max(1, round(s * args.scale)) for s in sizes):
            row = {"shape": shape, "unit": unit, "n": size,
                   **in_child("measure", shape, size, args.timeout)}
            shape_rows.append(row)
            print(json.dumps(row), flush=True)
            if not row["outcome"].startswith(("compiled", "relaxed")):
                break  # larger ones time out (or are refused) too
        with_growth(shape_rows)
        rows += shape_rows
    before_columns = with_before(rows, args.before)
    print_table(rows, ["shape", "n", "schema_ms", "passes_ms", "automaton_ms", "front_ms",
                       "front_growth", "nodes", "full_ms", "full_growth", "full_ms_per_unit",
                       "outcome"] + before_columns)
    out = Path(args.out) if args.out else RESULTS / "bench_hostile.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), "timeout_s": args.timeout,
                               "before": args.before, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
