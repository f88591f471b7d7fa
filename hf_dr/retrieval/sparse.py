"""Sparse (SPLADE-style) retrieval: exact top-k over an inverted index, never densified; saved as
three ``.npy`` arrays and opened memory-mapped (:meth:`SparseIndex.save` / :meth:`SparseIndex.load`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .run import Run

__all__ = ["SparseIndex"]


class SparseIndex:
    """Inverted index over ``[n_docs, |V|]`` CSR document vectors.

    The documents are stored transposed in CSR (``|V| x n_docs``), i.e. one posting list
    per term. A group of queries ``Q [c, |V|]`` is scored as ``Q @ D^T`` in one sparse
    product that touches only the posting lists of the query terms; its result stays sparse
    (only documents sharing a term with a query have an entry), and each query's top-k is
    taken from its own entries with ``argpartition``. Nothing of size ``n_docs`` is ever
    made dense, so a multi-million-row CSR is searched in memory proportional to the
    postings touched: queries are grouped so that a group touches at most ``max_entries``
    postings. Scores are exact; ties are broken by document order.
    """

    def __init__(self, doc_vectors: sp.spmatrix, doc_ids: Sequence[str]):
        D = sp.csr_matrix(doc_vectors, dtype=np.float32)
        if D.shape[0] != len(doc_ids):
            raise ValueError(f"{len(doc_ids)} ids for {D.shape[0]} document vectors")
        if D.shape[0] == 0:
            raise ValueError("cannot index an empty corpus")
        postings = D.T.tocsr()  # [|V|, n_docs]
        del D
        postings.sort_indices()
        self._set(postings, doc_ids)

    def _set(self, postings: sp.csr_matrix, doc_ids) -> None:
        self.doc_ids = doc_ids if hasattr(doc_ids, "take") else [str(d) for d in doc_ids]
        self.postings = postings
        self.posting_lengths = np.diff(self.postings.indptr)
        self.vocab_size = self.postings.shape[0]

    @classmethod
    def from_postings(cls, postings: sp.csr_matrix, doc_ids: Sequence[str]) -> SparseIndex:
        """An index over ready posting lists (CSR ``[|V|, n_docs]``, used as they are: e.g. bm25s'
        score matrix, :meth:`hf_dr.retrieval.BM25Index.search`)."""
        if postings.shape[1] != len(doc_ids):
            raise ValueError(f"postings of {postings.shape[1]} documents for {len(doc_ids)} ids")
        self = cls.__new__(cls)
        self._set(postings, doc_ids)
        return self

    #: the files of a saved index
    FILES = ("postings.data.npy", "postings.indices.npy", "postings.indptr.npy", "postings.json")

    def save(self, folder: str | Path) -> None:
        """Write the posting lists (CSR ``[|V|, n]``: data, indices, indptr as ``.npy``, the shape as JSON)."""
        folder = Path(folder)
        P = self.postings
        for name, arr in zip(self.FILES, (P.data, P.indices, P.indptr)):
            np.save(folder / name, arr)
        (folder / self.FILES[3]).write_text(json.dumps({"shape": list(P.shape), "nnz": int(P.nnz)}))

    @classmethod
    def load(cls, folder: str | Path, doc_ids: Sequence[str], *, mmap: bool = True) -> SparseIndex:
        """Open a saved index: the three arrays memory-mapped (``mmap``), nothing rebuilt."""
        folder = Path(folder)
        data, indices, indptr = (np.load(folder / name, mmap_mode="r" if mmap else None) for name in cls.FILES[:3])
        shape = tuple(json.loads((folder / cls.FILES[3]).read_text())["shape"])
        postings = sp.csr_matrix((data, indices, indptr), shape=shape, copy=False)
        postings.has_sorted_indices = True  # saved sorted
        if postings.shape[1] != len(doc_ids):
            raise ValueError(f"{folder} holds postings of {postings.shape[1]} documents for {len(doc_ids)} ids")
        self = cls.__new__(cls)
        self._set(postings, doc_ids)
        return self

    def __len__(self) -> int:
        return len(self.doc_ids)

    def doc_vectors(self, rows: Sequence[int]) -> sp.csr_matrix:
        """The stored vectors of the documents at ``rows`` (CSR ``[len(rows), |V|]``)."""
        return self.postings[:, np.asarray(rows)].T.tocsr()

    def search(self, query_vectors: sp.spmatrix, query_ids: Sequence[str], top_k: int = 1000,
               max_entries: int = 32_000_000, canonical: bool = True) -> Run:
        """``canonical=False``: the query rows are used as given (repeated terms kept, in their order:
        a document's score then adds its terms' weights in that order)."""
        Q = sp.csr_matrix(query_vectors, dtype=np.float32) if canonical else query_vectors
        if Q.shape[1] != self.vocab_size:
            raise ValueError(f"query vectors have {Q.shape[1]} dimensions, the index {self.vocab_size}")
        if Q.shape[0] != len(query_ids):
            raise ValueError(f"{len(query_ids)} query ids for {Q.shape[0]} query vectors")
        k = min(top_k, len(self.doc_ids))
        # postings each query touches (an upper bound of its result entries)
        # (differences of a running sum: a query without terms costs 0, wherever it stands)
        touched = np.concatenate([[0], np.cumsum(self.posting_lengths[Q.indices], dtype=np.int64)])
        cost = touched[Q.indptr[1:]] - touched[Q.indptr[:-1]]
        run: Run = {}
        s = 0
        while s < Q.shape[0]:
            e, budget = s + 1, cost[s]
            while e < Q.shape[0] and budget + cost[e] <= max_entries:
                budget += cost[e]
                e += 1
            scores = (Q[s:e] @ self.postings).tocsr()  # sparse [c, n_docs]
            scores.sort_indices()
            for r in range(e - s):
                lo, hi = scores.indptr[r], scores.indptr[r + 1]
                docs, vals = scores.indices[lo:hi], scores.data[lo:hi]
                keep = vals > 0  # documents sharing no (positive) term with the query are not hits
                docs, vals = docs[keep], vals[keep]
                if len(vals) > k:  # the k best; at the k-th score, the first documents in corpus order
                    kth = -np.partition(-vals, k - 1)[k - 1]
                    above = np.flatnonzero(vals > kth)
                    ties = np.flatnonzero(vals == kth)[: k - len(above)]
                    sel = np.concatenate([above, ties])
                    docs, vals = docs[sel], vals[sel]
                order = np.lexsort((docs, -vals))
                names = self.doc_ids.take(docs[order]) if hasattr(self.doc_ids, "take") else \
                    [self.doc_ids[d] for d in docs[order]]
                run[str(query_ids[s + r])] = {n: float(v) for n, v in zip(names, vals[order])}
            s = e
        return run
