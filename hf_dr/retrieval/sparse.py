"""Sparse (SPLADE-style) retrieval: exact top-k by sparse matrix products, query chunk by chunk."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from .run import Run, run_from_scores

__all__ = ["SparseIndex"]


class SparseIndex:
    """Inverted index over ``[n_docs, |V|]`` CSR document vectors.

    The documents are stored transposed in CSR (``|V| x n_docs``), i.e. one posting list
    per term; a chunk of queries ``Q [c, |V|]`` is scored as ``Q @ D^T`` in one sparse
    product that touches only the posting lists of the query terms, then the top-k is
    taken per row with ``argpartition``. Scores are exact.
    """

    def __init__(self, doc_vectors: sp.spmatrix, doc_ids: Sequence[str]):
        D = sp.csr_matrix(doc_vectors, dtype=np.float32)
        if D.shape[0] != len(doc_ids):
            raise ValueError(f"{len(doc_ids)} ids for {D.shape[0]} document vectors")
        if D.shape[0] == 0:
            raise ValueError("cannot index an empty corpus")
        self.doc_ids = [str(d) for d in doc_ids]
        self.postings = D.T.tocsr()  # [|V|, n_docs]
        self.postings.sort_indices()
        self.vocab_size = D.shape[1]

    def __len__(self) -> int:
        return len(self.doc_ids)

    def search(self, query_vectors: sp.spmatrix, query_ids: Sequence[str], top_k: int = 1000,
               chunk_size: int | None = None) -> Run:
        Q = sp.csr_matrix(query_vectors, dtype=np.float32)
        if Q.shape[1] != self.vocab_size:
            raise ValueError(f"query vectors have {Q.shape[1]} dimensions, the index {self.vocab_size}")
        if Q.shape[0] != len(query_ids):
            raise ValueError(f"{len(query_ids)} query ids for {Q.shape[0]} query vectors")
        n = len(self.doc_ids)
        k = min(top_k, n)
        # keep the dense score block around 256 MB whatever the corpus size
        chunk_size = chunk_size or max(1, min(1024, (64 * 1024 * 1024) // max(n, 1)))
        run: Run = {}
        for s in range(0, Q.shape[0], chunk_size):
            block = (Q[s:s + chunk_size] @ self.postings).toarray()
            if k < n:
                idx = np.argpartition(-block, k - 1, axis=1)[:, :k]
            else:
                idx = np.tile(np.arange(n), (block.shape[0], 1))
            top = np.take_along_axis(block, idx, axis=1)
            order = np.argsort(-top, axis=1, kind="stable")
            idx = np.take_along_axis(idx, order, axis=1)
            top = np.take_along_axis(top, order, axis=1)
            idx = np.where(top > 0, idx, -1)  # documents sharing no term with the query are not hits
            run.update(run_from_scores(top, idx, query_ids[s:s + chunk_size], self.doc_ids))
        return run
