"""Data: BEIR folders <-> ``datasets``, collators, and BERM sentence units (:mod:`.units`)."""

from .beir import (SAMPLE, BeirData, BeirFormatError, BeirSourceError, iter_corpus, load_beir, load_corpus,
                   load_qrels, looks_local, parse_grade, save_beir, save_qrels)

# the collators need torch: loaded on first use, so reading a corpus (hf-dr evaluate --retriever bm25)
# does not import it
_LAZY = {"RetrievalCollator": ".collators", "UnitCollator": ".collators", "triplets_from_qrels": ".qrels_triplets"}

__all__ = ["BeirData", "BeirFormatError", "BeirSourceError", "looks_local", "parse_grade", "load_beir", "save_beir",
           "load_qrels", "save_qrels", "SAMPLE", "iter_corpus", "load_corpus", "RetrievalCollator",
           "UnitCollator", "triplets_from_qrels"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
