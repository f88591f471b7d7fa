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
    per term. A query is scored from the posting lists of its terms only (:meth:`search`):
    only documents sharing a term with it get a score, and its top-k is taken from those with
    ``partition``. Beside the postings one query touches, a search holds one float32 score
    accumulator per document (4 bytes; a sparse product's workspace was 20), so a
    multi-million-row CSR, memory-mapped, is searched in little more memory than its mapped
    pages. Scores are exact; ties are broken by document order.
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
               canonical: bool = True) -> Run:
        """Exact top-``top_k`` of each query (a row of ``query_vectors``, CSR ``[n_queries, |V|]``).

        Term at a time, one query after the other: the posting lists of the query's terms are
        gathered (slices of the memory-mapped arrays: only their pages are read), weighted by the
        query's weight of each term, and added into one float32 accumulator per document in the
        query's term order — the order of a sparse product ``q @ D^T``, so the scores are the same
        bits. The accumulator (4 bytes a document, made once per call and cleared after each query,
        untouched pages never becoming memory) is all that grows with the corpus; the rest is the
        postings one query touches. ``canonical=False``: the query rows are used
        as given (repeated terms kept, in their order: a document's score then adds its terms'
        weights in that order)."""
        Q = sp.csr_matrix(query_vectors, dtype=np.float32) if canonical else query_vectors
        if Q.shape[1] != self.vocab_size:
            raise ValueError(f"query vectors have {Q.shape[1]} dimensions, the index {self.vocab_size}")
        if Q.shape[0] != len(query_ids):
            raise ValueError(f"{len(query_ids)} query ids for {Q.shape[0]} query vectors")
        k = min(top_k, len(self.doc_ids))
        run: Run = {}
        acc = np.zeros(len(self.doc_ids), np.float32)  # calloc'd: only the pages of documents hit become memory
        for r in range(Q.shape[0]):
            lo, hi = Q.indptr[r], Q.indptr[r + 1]
            docs, vals = self._scores(np.asarray(Q.indices[lo:hi]), np.asarray(Q.data[lo:hi], np.float32), acc)
            keep = vals > 0  # documents sharing no (positive) term with the query are not hits
            docs, vals = docs[keep], vals[keep]
            if len(vals) > k:  # the k best; at the k-th score, the first documents in corpus order
                kth = -np.partition(-vals, k - 1)[k - 1]
                above = np.flatnonzero(vals > kth)
                ties = np.flatnonzero(vals == kth)[: k - len(above)]
                sel = np.concatenate([above, ties])
                docs, vals = docs[sel], vals[sel]
            order = np.lexsort((docs, -vals))
            rows = docs[order]
            names = self.doc_ids.take(rows) if hasattr(self.doc_ids, "take") else \
                [self.doc_ids[d] for d in rows.tolist()]
            run[str(query_ids[r])] = dict(zip(names, vals[order].tolist()))  # Python floats, float(s) of each
        return run

    def _scores(self, terms: np.ndarray, weights: np.ndarray, acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(documents in corpus order, their float32 scores) of one query: every document on a
        posting list of ``terms``, its score the sum of ``weight x posting`` over the query's terms,
        added in ``terms``' order into ``acc`` (zeros, one per document; left zeros again)."""
        indptr = self.postings.indptr
        spans = [(a, b, w) for a, b, w in zip(indptr[terms].tolist(), indptr[terms + 1].tolist(), weights.tolist())
                 if b > a]
        if not spans:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        # the postings of the query's terms, term after term (slices: only their pages are read)
        docs = np.concatenate([self.postings.indices[a:b] for a, b, _ in spans])
        vals = np.concatenate([self.postings.data[a:b] for a, b, _ in spans]).astype(np.float32, copy=False)
        if any(w != 1.0 for _, _, w in spans):
            vals = vals * np.repeat(np.asarray([w for _, _, w in spans], np.float32), [b - a for a, b, _ in spans])
        np.add.at(acc, docs, vals)  # in order, unbuffered: each document's terms added one after the other
        # the documents touched, in corpus order: a scan of the accumulator (~2.5 ns a document) where
        # the postings are many for the corpus, else a sort of the postings touched (~25 ns each)
        if 10 * len(docs) >= len(acc):
            hit = np.flatnonzero(acc)
        else:
            docs.sort(kind="stable")  # (timsort: the term lists are sorted runs to merge)
            hit = docs[np.concatenate([[True], docs[1:] != docs[:-1]])]
        scores = acc[hit]
        acc[hit] = 0
        return hit, scores
