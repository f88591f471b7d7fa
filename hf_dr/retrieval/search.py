"""Retrieval with any encoder of the suite: encode the corpus once, index it, search."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .dense import DenseIndex
from .run import Run
from .sparse import SparseIndex

__all__ = ["build_index", "search"]


def build_index(encoder, doc_ids: Sequence[str], docs: Sequence, *, batch_size: int = 32,
                show_progress_bar: bool | None = True, **index_kwargs):
    """Encode ``docs`` with ``encoder.encode_corpus`` and index them: a :class:`SparseIndex`
    for sparse encoders (``output_is_sparse``), else a :class:`DenseIndex`."""
    vecs = encoder.encode_corpus(list(docs), batch_size=batch_size, show_progress_bar=show_progress_bar)
    if getattr(encoder, "output_is_sparse", False):
        return SparseIndex(vecs, doc_ids)
    return DenseIndex(vecs, doc_ids, **index_kwargs)


def search(encoder, index, queries: Mapping[str, str], top_k: int = 1000, batch_size: int = 32,
           show_progress_bar: bool | None = None) -> Run:
    """Encode ``queries`` ``{qid: text}`` and search ``index``."""
    qids = list(queries)
    if not qids:
        return {}
    q = encoder.encode_queries([queries[i] for i in qids], batch_size=batch_size, show_progress_bar=show_progress_bar)
    return index.search(q, qids, top_k=top_k)
