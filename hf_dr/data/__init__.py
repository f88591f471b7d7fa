"""Data: BEIR folders <-> ``datasets``, collators, and BERM sentence units (:mod:`.units`)."""

from .beir import (SAMPLE, BeirData, BeirFormatError, BeirSourceError, iter_corpus, load_beir,
                   load_qrels, looks_local, parse_grade, save_beir, save_qrels)
from .collators import RetrievalCollator, UnitCollator
from .qrels_triplets import triplets_from_qrels

__all__ = ["BeirData", "BeirFormatError", "BeirSourceError", "looks_local", "parse_grade", "load_beir", "save_beir",
           "load_qrels", "save_qrels", "SAMPLE", "iter_corpus", "RetrievalCollator",
           "UnitCollator", "triplets_from_qrels"]
