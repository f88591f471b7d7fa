"""Retrieval: one :class:`Retriever` interface (``search(queries, k) -> Run``) over BM25 (bm25s),
any encoder of the suite (dense: faiss; sparse: an inverted index, or Seismic's approximate one,
:mod:`.seismic`, imported on use: an extra) and hybrids (fusion); indexes
saved once and opened memory-mapped (:mod:`.saved`). Retrievers are made from model names by
:func:`hf_dr.factory.build_retriever`: this package loads no model."""

from .bm25 import BM25Index
from .dense import DenseIndex
from .fusion import fuse, normalize_run
from .retriever import BM25Retriever, EncoderRetriever, HybridRetriever, Retriever
from .run import IdList, Run, id_sequence, read_trec_run, run_from_scores, top_k_run, write_trec_run
from .saved import (DocIds, SavedIndex, SavedIndexError, save_bm25_index, save_dense_index, save_seismic_index,
                    save_sparse_index)
from .sparse import SparseIndex

__all__ = ["Retriever", "BM25Retriever", "EncoderRetriever", "HybridRetriever",
           "BM25Index", "DenseIndex", "SparseIndex", "fuse", "normalize_run", "Run", "read_trec_run",
           "write_trec_run", "run_from_scores", "top_k_run", "IdList", "id_sequence", "SavedIndex", "SavedIndexError", "DocIds",
           "save_dense_index", "save_sparse_index", "save_seismic_index", "save_bm25_index"]
