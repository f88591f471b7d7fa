"""Sparse (SPLADE-style) retrieval: exact top-k over an inverted index, never densified; saved as
three ``.npy`` arrays and opened memory-mapped (:meth:`SparseIndex.save` / :meth:`SparseIndex.load`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .run import Run, id_sequence

try:  # the adding pass of SciPy's sparse product, called alone (SparseIndex._product)
    from scipy.sparse._sparsetools import csr_matmat as _csr_matmat
except ImportError:  # pragma: no cover - a SciPy without it: its public product
    _csr_matmat = None

__all__ = ["SparseIndex"]


class SparseIndex:
    """Inverted index over ``[n_docs, |V|]`` CSR document vectors.

    The documents are stored transposed in CSR (``|V| x n_docs``), i.e. one posting list
    per term. A query is scored from the posting lists of its terms only (:meth:`search`):
    only documents sharing a term with it get a score, and its top-k is taken from those with
    ``partition``. Beside the postings one query touches, a search holds one float32 score
    accumulator per document (4 bytes), or, for queries that touch postings for more than a tenth
    of the documents, a sparse product's workspace (~12 bytes a document), so a multi-million-row
    CSR, memory-mapped, is searched in little more memory than its mapped pages. Scores are
    exact; ties are broken by document order.
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
        self.doc_ids = id_sequence(doc_ids)
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

    #: postings a group of queries scored by one sparse product may touch (the output, and a copy of
    #: them where the postings' types need one: ~16 bytes each; a query touching more is a group of its own)
    GROUP_POSTINGS = 1 << 20

    def search(self, query_vectors: sp.spmatrix, query_ids: Sequence[str], top_k: int = 1000,
               canonical: bool = True) -> Run:
        """Exact top-``top_k`` of each query (a row of ``query_vectors``, CSR ``[n_queries, |V|]``).

        Term at a time: a query's score of a document adds ``weight x posting`` over the query's
        terms, in the query's term order, in float32 — the order of a sparse product ``q @ D^T``,
        so the scores are the same bits. A query touching few postings for the corpus (fewer than a
        tenth of its documents) is scored alone: its postings (slices of the memory-mapped arrays:
        only their pages are read) added into one float32 accumulator per document (4 bytes a
        document, made once per call, untouched pages never becoming memory). Queries touching more
        (SPLADE's expanded queries on a small corpus) are scored in groups by SciPy's sparse product
        of the group and the posting lists of its terms (in C; the same additions in the same
        order; a workspace of ~12 bytes a document, and the group's scores, at most
        :attr:`GROUP_POSTINGS` of them). ``canonical=False``: the query rows are used as given
        (repeated terms kept, in their order: a document's score then adds its terms' weights in
        that order)."""
        Q = sp.csr_matrix(query_vectors, dtype=np.float32) if canonical else query_vectors
        if Q.shape[1] != self.vocab_size:
            raise ValueError(f"query vectors have {Q.shape[1]} dimensions, the index {self.vocab_size}")
        if Q.shape[0] != len(query_ids):
            raise ValueError(f"{len(query_ids)} query ids for {Q.shape[0]} query vectors")
        n, nq = len(self.doc_ids), Q.shape[0]
        k = min(top_k, n)
        lens = np.diff(np.asarray(self.postings.indptr))[np.asarray(Q.indices)]
        touched = np.bincount(np.repeat(np.arange(nq), np.diff(Q.indptr)), weights=lens, minlength=nq)
        dense = 10 * touched >= n
        run: Run = {}
        acc = None
        r = 0
        while r < nq:
            if not dense[r]:
                if acc is None:
                    acc = np.zeros(n, np.float32)  # calloc'd: only the pages of documents hit become memory
                lo, hi = Q.indptr[r], Q.indptr[r + 1]
                docs, vals = self._scores(np.asarray(Q.indices[lo:hi]), np.asarray(Q.data[lo:hi], np.float32), acc)
                run[str(query_ids[r])] = self._rankings(np.array([0, len(docs)]), docs, vals, k)[0]
                r += 1
                continue
            end, group = r + 1, touched[r]
            while end < nq and dense[end] and group + touched[end] <= self.GROUP_POSTINGS:
                group += touched[end]
                end += 1
            indptr, docs, vals = self._product(Q[r:end], np.minimum(touched[r:end], n))
            for i, ranking in enumerate(self._rankings(indptr, docs, vals, k), r):
                run[str(query_ids[i])] = ranking
            r = end
        return run

    def _product(self, Q: sp.csr_matrix, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``Q @ D^T`` as CSR arrays (indptr, documents in no order, float32 scores) of ``[len(Q), n]``,
        computed on the posting lists of ``Q``'s terms only (their rows of the memory-mapped arrays),
        ``Q``'s rows kept as they are; in float32, as a query scored alone. ``bound``: per row of ``Q``,
        at least the number of documents it can score (the postings it touches, at most n).

        SciPy's sparse product (C++) makes two passes: one counting each output row's entries, one
        adding. Where SciPy has it and the postings are float32 with two index arrays of one type, the
        adding pass is called alone, into arrays of ``bound``'s size (the count would be ~40% of the
        product's time); otherwise the public product (SciPy would convert whole arrays of other types:
        those rows are copied first). The same additions in the same order either way."""
        P = self.postings
        same = P.dtype == np.float32 and P.indptr.dtype == P.indices.dtype
        idx = P.indices.dtype if same else np.int64
        if same and _csr_matmat is not None and int(bound.sum()) < np.iinfo(idx).max:
            m = Q.shape[0]
            out_ptr, out_docs = np.empty(m + 1, idx), np.empty(int(bound.sum()), idx)
            out_vals = np.empty(len(out_docs), np.float32)
            _csr_matmat(m, P.shape[1], np.asarray(Q.indptr, idx), np.asarray(Q.indices, idx),
                        np.asarray(Q.data, np.float32), np.asarray(P.indptr), np.asarray(P.indices),
                        np.asarray(P.data), out_ptr, out_docs, out_vals)
            nnz = int(out_ptr[-1])
            return out_ptr, out_docs[:nnz], out_vals[:nnz]
        if same:
            Qc = sp.csr_matrix((np.asarray(Q.data, np.float32), np.asarray(Q.indices, idx), np.asarray(Q.indptr, idx)),
                               shape=Q.shape)
            S = Qc @ P
        else:
            terms = np.unique(Q.indices)
            sub = self.postings[terms].astype(np.float32, copy=False)
            Qc = sp.csr_matrix((np.asarray(Q.data, np.float32), np.searchsorted(terms, Q.indices), Q.indptr),
                               shape=(Q.shape[0], len(terms)))
            S = Qc @ sub
        return S.indptr, S.indices, S.data

    def _rankings(self, indptr: np.ndarray, docs: np.ndarray, vals: np.ndarray, k: int) -> list[dict[str, float]]:
        """Per row of CSR arrays (``indptr``; ``docs``: rows of the corpus, ``vals``: their float32
        scores), ``{doc_id: score}`` of its best ``k`` documents with a positive score (documents
        sharing no positive term are not hits), best first; at the k-th score the first documents in
        corpus order. The rows are ranked together: one key a document for all of them, one decoding,
        one lookup of the names; per row only a partition and a sort."""
        hit = vals > 0
        if not hit.all():
            indptr = np.concatenate([[0], np.cumsum(hit)])[np.asarray(indptr)]
            docs, vals = docs[hit], vals[hit]
        # one int64 key a document, ordered as (score, then corpus order reversed): the bits of a positive
        # float32 (they order as the floats do) above the row's complement; a row's k largest keys are its
        # k best documents, ties at the k-th score going to the first in corpus order
        keys = vals.view(np.int32).astype(np.int64) << 32 | (0xFFFFFFFF - docs.astype(np.int64))
        tops = []
        for a, b in zip(np.asarray(indptr)[:-1].tolist(), np.asarray(indptr)[1:].tolist()):
            row = np.partition(keys[a:b], b - a - k)[b - a - k:] if 0 < k < b - a else keys[a:b][:k if k > 0 else 0]
            row.sort()
            tops.append(row[::-1])
        best = np.concatenate(tops) if tops else np.zeros(0, np.int64)
        names = self.doc_ids.take(0xFFFFFFFF - (best & 0xFFFFFFFF))
        scores = (best >> 32).astype(np.int32).view(np.float32).tolist()  # Python floats, float(s) of each
        pairs = zip(names, scores)  # each row's dict takes its length of pairs off the one zip (no slices)
        return [dict(islice(pairs, len(t))) for t in tops]

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
