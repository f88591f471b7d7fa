"""Retrieval: BM25 (bm25s), dense (faiss), sparse (inverted index) and fusion; all return a Run."""

from .bm25 import BM25Index
from .dense import DenseIndex
from .fusion import fuse, normalize_run
from .run import Run, read_trec_run, remove_self_matches, run_from_scores, top_k_run, write_trec_run
from .search import build_index, search
from .sparse import SparseIndex

__all__ = ["BM25Index", "DenseIndex", "SparseIndex", "fuse", "normalize_run", "Run", "read_trec_run",
           "write_trec_run", "remove_self_matches", "run_from_scores", "top_k_run", "build_index", "search"]
