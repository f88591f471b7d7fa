"""``hf-dr`` command line: thin front ends over the library, one module per subcommand
in :mod:`hf_dr.commands` (each exposes ``register(subparsers)``).

Errors are one line on stderr, ``hf-dr COMMAND: error: MESSAGE``, and exit status 2 — bad
arguments (checked by the argument types below, before any work), :class:`CLIError` from a
command, and the library's ``ValueError`` / ``FileNotFoundError`` (a malformed BEIR file, a model
folder without weights...). ``-v`` shows debug logging, third-party load reports and tracebacks.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import sys
import warnings

# one line per subcommand module; a module that fails to import (an optional extra missing)
# only loses its own subcommand
COMMANDS = [
    "hf_dr.commands.evaluate",
    "hf_dr.commands.encode",
    "hf_dr.commands.generate",
    "hf_dr.commands.ingest",
    "hf_dr.commands.index",
    "hf_dr.commands.quickstart",
    "hf_dr.commands.push",
    "hf_dr.commands.berm_diagnostics",
    "hf_dr.commands.label",
    "hf_dr.commands.adapt",
]


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


# ---------------------------------------------------------------- argument types (checked at parse time)
def _int_at_least(text: str, minimum: int, expected: str, bound: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
    return value


def positive_int(text: str) -> int:
    """``type=`` for counts and sizes: an integer >= 1 (``--top-k 0`` would score nothing)."""
    return _int_at_least(text, 1, "a positive integer", "a positive integer (at least 1)")


def non_negative_int(text: str) -> int:
    """``type=`` for an integer >= 0."""
    return _int_at_least(text, 0, "an integer >= 0", "0 or more")


def finite_float(text: str) -> float:
    """``type=`` for a weight: a finite number (no ``inf`` / ``nan``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """``type=`` for a finite number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text!r}")
    return value


def stemmer_name(text: str) -> str | None:
    """``type=`` for ``--bm25-stemmer``: a PyStemmer language or ``none``."""
    from .retrieval.bm25 import check_stemmer

    try:
        return check_stemmer(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def stopwords_name(text: str) -> str | None:
    """``type=`` for ``--bm25-stopwords``: a bm25s stop-word language or ``none``."""
    from .retrieval.bm25 import check_stopwords

    try:
        return check_stopwords(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def dtype_name(text: str) -> str:
    """``type=`` for ``--dtype``: auto | fp32 | bf16 | fp16 (``float32``, ``bfloat16``, ``float16`` too)."""
    from .precision import canonical_dtype

    try:
        return canonical_dtype(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def process_device(device: str | None) -> str | None:
    """``--device``, or under a launcher (``accelerate launch`` / ``torchrun``: ``WORLD_SIZE`` > 1) with a
    GPU, this process's own (``cuda:LOCAL_RANK``)."""
    import os

    if device is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch

        if torch.cuda.is_available():  # one GPU per process
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def is_other_process() -> bool:
    """Under a launcher, a process other than rank 0 (it writes its shards; rank 0 finishes the folder)."""
    import os

    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and int(os.environ.get("RANK", "0")) != 0


def add_resumable_output_arguments(parser, inputs: str) -> None:
    """``--no-progress`` and ``--overwrite`` of a command writing a resumable sharded folder
    (``hf-dr encode``, ``hf-dr generate-queries``); ``inputs``: what ``--overwrite`` never deletes."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace a non-empty --output (once the new folder is complete; never one holding "
                             f"{inputs}), and start again a crashed run begun with other settings")


def add_dtype_argument(parser, what: str = "encoding") -> None:
    """``--dtype auto|fp32|bf16|fp16``, the one precision flag of every command that encodes or trains
    (:mod:`hf_dr.precision`)."""
    parser.add_argument("--dtype", type=dtype_name, default="auto", metavar="{auto,fp32,bf16,fp16}",
                        help=f"precision of {what}: auto = bf16 on a GPU that supports it (fp16 on older ones), fp32 "
                             "on CPU; bf16 / fp16 autocast on any device, the CPU included (fp16 training needs a "
                             "GPU); fp32 = no autocast")


def add_prompt_arguments(parser, what: str = "the model") -> None:
    """``--query-prompt`` / ``--document-prompt``: the text prepended to each query / document by
    ``what`` (default: the ``query`` / ``document`` prompts of its sentence-transformers folder, else
    none; ``""``: none). :func:`apply_prompt_arguments` sets them on an encoder."""
    parser.add_argument("--query-prompt", default=None, metavar="TEXT",
                        help=f"text prepended to every query encoded by {what}, e.g. 'query: ' (E5) or a BGE "
                             "instruction (default: the model's own 'query' prompt, else none; '' for none)")
    parser.add_argument("--document-prompt", default=None, metavar="TEXT",
                        help=f"text prepended to every document encoded by {what}, e.g. 'passage: ' (E5) "
                             "(default: the model's own 'document' prompt, else none; '' for none)")


def apply_prompt_arguments(encoder, args):
    """Set ``--query-prompt`` / ``--document-prompt`` (when given) on ``encoder``; returns it."""
    from .encoding import apply_prompts

    if encoder is None:
        return None
    return apply_prompts(encoder, getattr(args, "query_prompt", None), getattr(args, "document_prompt", None))


class _Parser(argparse.ArgumentParser):
    """argparse, with errors as one line (``hf-dr evaluate: error: argument --top-k: ...``) and
    a pointer to ``--help`` instead of the whole usage text."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hf-dr", description="Domain adaptation of neural retrievers.")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging, third-party load reports and tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def configure_logging(verbose: bool) -> None:
    """WARNING and up (DEBUG with ``-v``) as ``LEVEL name: message``. Third-party loggers that
    set themselves to DEBUG (bm25s) are quieted where they are imported (:mod:`hf_dr.retrieval.bm25`)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not verbose:  # in case bm25s was imported directly before this
        log = logging.getLogger("bm25s")
        if log.level == logging.DEBUG:
            log.setLevel(logging.NOTSET)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # a bad argument (status 2, message printed) or --help (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    configure_logging(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    from .data.beir import BeirFormatError
    from .io import one_line_warnings

    try:
        with warnings.catch_warnings():
            if not args.verbose:  # one line each, without the file:line of the library and its source
                one_line_warnings("hf-dr")
            return int(args.func(args) or 0)
    except (CLIError, BeirFormatError, FileNotFoundError, ValueError) as e:
        if args.verbose:
            raise
        msg = str(e) if not isinstance(e, FileNotFoundError) or not e.filename else \
            f"{e.filename}: {e.strerror or 'no such file or folder'}"
        print(f"hf-dr {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # run the module as imported (hf_dr.cli), so its CLIError is the one the commands raise
    from hf_dr.cli import main as _main

    sys.exit(_main())
