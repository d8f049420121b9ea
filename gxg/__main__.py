"""Command line: ``gxg generate`` / ``python -m gxg generate``.

Constrained generation with the embedded SmolLM2-135M-Instruct model arrives with the
generation issue; until then the command says so and exits with status 2.
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gxg", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("generate", help="constrained generation (not yet available)")
    args, _ = parser.parse_known_args(argv)
    if args.command == "generate":
        print("gxg generate: not yet available — constrained generation lands with the "
              "end-to-end issue; the grammar front-ends and tokenizer support are in place.",
              file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
