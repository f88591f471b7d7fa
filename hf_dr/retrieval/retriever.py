"""One retrieval interface for every kind of retriever (pyserini's searchers are the model).

Build a retriever over a corpus, then ``retriever.search(queries, k) -> Run`` with
``queries = {qid: text}``, whatever its kind:

* :class:`BM25Retriever` — the one BM25 (:class:`~hf_dr.retrieval.BM25Index`, bm25s);
* :class:`EncoderRetriever` — any encoder of the suite; the index follows the encoder's
  ``output_is_sparse`` (an inverted :class:`~hf_dr.retrieval.SparseIndex` or a faiss
  :class:`~hf_dr.retrieval.DenseIndex`), with an optional document-vector transform (CAI's IDF);
  built by encoding a corpus (:meth:`EncoderRetriever.from_corpus`) or from an embeddings
  folder written by ``hf-dr encode`` (:meth:`EncoderRetriever.from_embeddings`);
* :class:`HybridRetriever` — retrievers fused by :func:`~hf_dr.retrieval.fuse`.

:func:`hf_dr.factory.build_retriever` makes any of them from names (what ``hf-dr evaluate`` calls);
:func:`hf_dr.evaluation.evaluate` scores any of them on a BEIR split. This layer takes encoders already
loaded: it loads no model (the factory, above it, does).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .run import Run

__all__ = ["Retriever", "BM25Retriever", "EncoderRetriever", "HybridRetriever"]


class Retriever(ABC):
    """Searches one corpus. ``doc_ids`` are its documents, in corpus order."""

    doc_ids: list[str]
    #: a short name for tables and run files
    name: str = "retriever"

    @abstractmethod
    def search(self, queries: Mapping[str, str], k: int = 1000, *, show_progress_bar: bool | None = None) -> Run:
        """The top-``k`` documents of each query ``{qid: text}``: ``{qid: {doc_id: score}}``
        (a query with no hit gets an empty ranking, never a missing key)."""

    def __len__(self) -> int:
        return len(self.doc_ids)

    def info(self) -> dict:
        """What this retriever is (written beside metrics)."""
        return {"retriever": self.name}


def _check_k(k: int) -> int:
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer (got {k!r})")
    return k


class BM25Retriever(Retriever):
    """BM25 over ``texts`` (see :class:`~hf_dr.retrieval.BM25Index` for the parameters)."""

    name = "bm25"

    def __init__(self, doc_ids: Sequence[str], texts: Sequence[str], **bm25_kwargs):
        from .bm25 import BM25Index

        self.index = BM25Index(doc_ids, texts, **bm25_kwargs)
        self.doc_ids = self.index.doc_ids
        self._kwargs = {k: v for k, v in bm25_kwargs.items() if k != "show_progress_bar"}

    @classmethod
    def from_data(cls, data, **bm25_kwargs) -> BM25Retriever:
        """Index a :class:`hf_dr.data.BeirData` corpus (``title + " " + text``, read lazily)."""
        return cls(data.doc_ids(), (t for _, t in data.iter_docs()), **bm25_kwargs)

    @classmethod
    def from_index(cls, index) -> BM25Retriever:
        """Search an existing :class:`~hf_dr.retrieval.BM25Index` (shared with, e.g., a reranker, or
        opened from a saved index)."""
        self = cls.__new__(cls)
        self.index, self.doc_ids = index, index.doc_ids
        self._kwargs = {"stemmer": index.stemmer, "stopwords": index.stopwords}
        return self

    def search(self, queries, k=1000, *, show_progress_bar=None) -> Run:
        return self.index.search(queries, top_k=_check_k(k), show_progress_bar=bool(show_progress_bar))

    def info(self) -> dict:
        saved = getattr(self, "saved", None)
        return {"retriever": "bm25", "bm25": {"stemmer": self._kwargs.get("stemmer", "english"),
                                              "stopwords": self._kwargs.get("stopwords", "en")},
                **({"index": str(saved.path)} if saved is not None else {})}


class EncoderRetriever(Retriever):
    """An encoder of the suite over stored document vectors.

    Args:
        encoder: any encoder of the suite (``encode_queries``; ``output_is_sparse`` picks the index), or a
            ``SentenceTransformer`` / ``SparseEncoder`` object (:func:`hf_dr.st_encoder.as_encoder`).
        doc_vectors: the documents' vectors, ``[n, d]`` float32 or CSR ``[n, |V|]``.
        doc_ids: their ids.
        doc_transform: applied to ``doc_vectors`` before indexing (e.g. CAI's IDF weighting);
            the stored vectors are left as they are, so several retrievers can share them.
        query_settings: model ``config`` attributes set while queries are encoded (e.g.
            ``{"query_mode": "bow"}`` for SPLADE-Doc), restored afterwards.
        batch_size, max_query_length: query encoding.
        index_kwargs: dense index options (``index_type="flat" | "hnsw" | "ivfpq"``, ...); for a sparse
            encoder ``index_type="seismic"`` (and :class:`~hf_dr.retrieval.seismic.SeismicIndex`'s
            options) builds an approximate Seismic index instead of the exact inverted one.
    """

    def __init__(self, encoder, doc_vectors, doc_ids: Sequence[str], *, doc_transform: Callable | None = None,
                 query_settings: Mapping[str, Any] | None = None, batch_size: int = 32,
                 max_query_length: int | None = None, name: str | None = None, **index_kwargs):
        from ..st_encoder import as_encoder
        from .dense import DenseIndex
        from .sparse import SparseIndex

        self.encoder = encoder = as_encoder(encoder)
        self.sparse = bool(getattr(encoder, "output_is_sparse", False))
        vecs = doc_transform(doc_vectors) if doc_transform is not None else doc_vectors
        if self.sparse:
            if index_kwargs.get("index_type") == "seismic":  # approximate, for millions of documents
                from .seismic import SeismicIndex

                self.index = SeismicIndex(vecs, doc_ids, **{k: v for k, v in index_kwargs.items() if k != "index_type"})
            elif index_kwargs:
                raise ValueError(f"a sparse index takes no dense index options ({sorted(index_kwargs)}; "
                                 "index_type='seismic' builds an approximate Seismic index)")
            else:
                self.index = SparseIndex(vecs, doc_ids)
        else:
            self.index = DenseIndex(vecs, doc_ids, **index_kwargs)
        self.doc_ids = self.index.doc_ids
        self.query_settings = dict(query_settings or {})
        self.batch_size, self.max_query_length = batch_size, max_query_length
        self.name = name or ("sparse" if self.sparse else "dense")
        self.index_kwargs = index_kwargs

    @classmethod
    def from_index(cls, encoder, index, *, query_settings: Mapping[str, Any] | None = None, batch_size: int = 32,
                   max_query_length: int | None = None, name: str | None = None) -> EncoderRetriever:
        """Search an existing :class:`~hf_dr.retrieval.DenseIndex` / :class:`~hf_dr.retrieval.SparseIndex`
        (e.g. opened from a saved index, :class:`hf_dr.retrieval.saved.SavedIndex`) with ``encoder``'s
        query vectors: nothing is indexed."""
        from ..st_encoder import as_encoder

        self = cls.__new__(cls)
        self.encoder = encoder = as_encoder(encoder)  # a SparseEncoder object is sparse only once wrapped
        self.index, self.doc_ids = index, index.doc_ids
        self.sparse = bool(getattr(encoder, "output_is_sparse", False))
        self.query_settings = dict(query_settings or {})
        self.batch_size, self.max_query_length = batch_size, max_query_length
        self.name = name or ("sparse" if self.sparse else "dense")
        self.index_kwargs = dict(getattr(index, "params", {}))
        return self

    @classmethod
    def from_corpus(cls, encoder, doc_ids: Sequence[str], texts: Iterable[str], *, batch_size: int = 32,
                    max_length: int | None = None, show_progress_bar: bool | None = True, **kwargs) -> EncoderRetriever:
        """Encode ``texts`` (any iterable, read lazily, chunk by chunk) with ``encoder`` and index them."""
        from ..encoding import concat_blocks
        from ..st_encoder import as_encoder

        encoder = as_encoder(encoder)  # a SentenceTransformer / SparseEncoder object too
        if not hasattr(encoder, "iter_encode_corpus"):  # an encoder outside the suite: encode_corpus only
            vecs = encoder.encode_corpus(list(texts), batch_size=batch_size, max_length=max_length,
                                         show_progress_bar=show_progress_bar)
            return cls(encoder, vecs, doc_ids, batch_size=batch_size, **kwargs)
        total = len(texts) if hasattr(texts, "__len__") else len(doc_ids)
        blocks = list(encoder.iter_encode_corpus(texts, batch_size=batch_size, max_length=max_length,
                                                 show_progress_bar=show_progress_bar, total=total))
        vecs = blocks if not getattr(encoder, "output_is_sparse", False) and len(blocks) > 1 and \
            not kwargs.get("doc_transform") else concat_blocks(blocks)
        return cls(encoder, vecs, doc_ids, batch_size=batch_size, **kwargs)

    @classmethod
    def from_data(cls, encoder, data, **kwargs) -> EncoderRetriever:
        """Encode a :class:`hf_dr.data.BeirData` corpus (read lazily from its dataset) and index it."""
        return cls.from_corpus(encoder, data.doc_ids(), (t for _, t in data.iter_docs()), **kwargs)

    @classmethod
    def from_embeddings(cls, encoder, embeddings, *, doc_ids: Sequence[str] | None = None,
                        max_length: int | None = None, **kwargs) -> EncoderRetriever:
        """Index an embeddings folder (``hf-dr encode``) instead of encoding: refused
        (:class:`~hf_dr.embeddings.EmbeddingsError`) when ``encoder`` did not make it, or when
        ``doc_ids`` (the corpus searched) are not its documents."""
        from ..embeddings import Embeddings
        from ..st_encoder import as_encoder

        encoder = as_encoder(encoder)
        emb = embeddings if isinstance(embeddings, Embeddings) else Embeddings(embeddings)
        emb.check(encoder, doc_ids=doc_ids, max_length=max_length)
        # dense shards are added one by one, memory-mapped (never concatenated in memory)
        vecs = emb.matrix() if emb.is_sparse or kwargs.get("doc_transform") else [b for _, b in emb.iter_shards()]
        return cls(encoder, vecs, emb.doc_ids, **kwargs)

    @contextlib.contextmanager
    def _query_mode(self):
        cfg = getattr(self.encoder, "config", None)
        old = {k: getattr(cfg, k) for k in self.query_settings}
        for k, v in self.query_settings.items():
            setattr(cfg, k, v)
        try:
            yield
        finally:
            for k, v in old.items():
                setattr(cfg, k, v)

    def encode_queries(self, texts: Sequence[str]):
        with self._query_mode():
            return self.encoder.encode_queries(list(texts), batch_size=self.batch_size,
                                               max_length=self.max_query_length, show_progress_bar=False)

    def search(self, queries, k=1000, *, show_progress_bar=None) -> Run:
        k = _check_k(k)
        qids = list(queries)
        if not qids:
            return {}
        return self.index.search(self.encode_queries([queries[q] for q in qids]), qids, top_k=k)

    def info(self) -> dict:
        saved = getattr(self, "saved", None)
        return {"retriever": self.name, "encoder": type(self.encoder).__name__,
                **({"index": self.index_kwargs} if self.index_kwargs else {}),
                **({"saved_index": str(saved.path)} if saved is not None else {}),
                **({"query_settings": self.query_settings} if self.query_settings else {})}


class HybridRetriever(Retriever):
    """Retrievers fused into one ranking: each retrieves ``max(k, depth)`` documents, then
    :func:`~hf_dr.retrieval.fuse` (``method`` sum / minmax / zscore / rrf, ``weights``) keeps ``k``."""

    name = "hybrid"

    def __init__(self, retrievers: Sequence[Retriever], weights: Sequence[float] | None = None,
                 method: str = "zscore", depth: int | None = None, missing: str | None = None, rrf_k: int = 60):
        if len(retrievers) < 2:
            raise ValueError("a hybrid needs at least two retrievers")
        ids = retrievers[0].doc_ids
        if any(len(r.doc_ids) != len(ids) for r in retrievers[1:]):
            raise ValueError("the retrievers of a hybrid must search the same corpus")
        self.retrievers = list(retrievers)
        self.weights = list(weights) if weights is not None else [1.0] * len(retrievers)
        if len(self.weights) != len(self.retrievers):
            raise ValueError(f"{len(self.weights)} weights for {len(self.retrievers)} retrievers")
        self.method, self.depth, self.rrf_k = method, depth, rrf_k
        self.missing = missing or "min"  # see fuse(): a document one run lacks gets its minimum
        self.doc_ids = ids

    def search(self, queries, k=1000, *, show_progress_bar=None) -> Run:
        from .fusion import fuse

        k = _check_k(k)
        depth = max(k, self.depth or 0)
        runs = [r.search(queries, depth, show_progress_bar=show_progress_bar) for r in self.retrievers]
        fused = fuse(runs, weights=self.weights, method=self.method, top_k=k, missing=self.missing, rrf_k=self.rrf_k)
        return {q: fused.get(q, {}) for q in queries}

    def info(self) -> dict:
        return {"retriever": "hybrid", "parts": [r.info() for r in self.retrievers],
                "fusion": {"method": self.method, "weights": self.weights}}
