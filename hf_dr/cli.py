"""``hf-dr`` command line: thin front ends over the library, one module per subcommand
in :mod:`hf_dr.commands` (each exposes ``register(subparsers)``)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# one line per subcommand module; a module that fails to import (an optional extra missing)
# only loses its own subcommand
COMMANDS = [
    "hf_dr.commands.evaluate",
    "hf_dr.commands.encode",
    "hf_dr.commands.index",
    "hf_dr.commands.quickstart",
    "hf_dr.commands.push",
    "hf_dr.commands.berm_diagnostics",
    "hf_dr.commands.label",
]


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-dr", description="Domain adaptation of neural retrievers.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # libraries that set their own loggers to DEBUG
        for name in ("bm25s",):
            logging.getLogger(name).setLevel(logging.WARNING)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    from .data.beir import BeirFormatError

    try:
        return int(args.func(args) or 0)
    except (CLIError, BeirFormatError, FileNotFoundError, ValueError) as e:
        if args.verbose:
            raise
        print(f"hf-dr {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # run the module as imported (hf_dr.cli), so its CLIError is the one the commands raise
    from hf_dr.cli import main as _main

    sys.exit(_main())
