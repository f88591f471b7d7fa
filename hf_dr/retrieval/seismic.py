"""Approximate SPLADE search at scale with Seismic (Bruch, Nardini, Rulli, Venturini, SIGIR 2024;
``pyseismic-lsr``): posting lists pruned to their largest weights, cut into blocks of similar
documents, each block summarised by a vector whose inner product with a query bounds its
documents'; a query visits its ``query_cut`` largest terms, and a block only when its summary's
score exceeds ``heap_factor`` x the k-th best score found so far. Documents met are scored exactly
against their full vectors (kept beside the index, values in fp16).

:class:`SeismicIndex` is searched as :class:`~hf_dr.retrieval.SparseIndex` is
(``search(query_vectors, query_ids, top_k) -> Run``), saved into an index folder
(:func:`hf_dr.retrieval.saved.save_seismic_index`, ``hf-dr index --backend seismic``) and opened from
it. The exact index stays the reference and the default: on the corpora measured here (up to 8,674
documents) Seismic was at best 1.3x faster at top 10 and slower at top 1000.

Where hf-dr's wrapper differs from the engine's own API: the engine takes string query ids of at
most 100 characters, answers a batch in no fixed order and leaves out queries with no result, and
drops documents with an empty vector (renumbering the others); here each query is sent under its
position and its answer put back under its own id (a query with no term, or no hit, gets an empty
ranking), and documents are sent under their row numbers (their ids are looked up in hf-dr's own
id list: memory-mapped when the index is saved). Documents sharing no term with a query (score 0)
are not hits, as in :class:`~hf_dr.retrieval.SparseIndex`. Scores are the engine's: document
values stored in fp16, so a score may differ from the exact one in its fourth significant digit.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .run import Run, id_sequence

__all__ = ["BUILD_DEFAULTS", "SEARCH_DEFAULTS", "SeismicIndex"]

#: build parameters (Seismic's names): ``n_postings`` average postings kept per term (the
#: largest weights; the rest pruned), ``centroid_fraction`` blocks per posting list as a fraction of
#: its length, ``summary_energy`` the fraction of a block's weight its summary keeps,
#: ``min_cluster_size``, ``max_fraction`` (a list holds at most ``max_fraction x n_postings``),
#: ``doc_cut`` (terms of a document used to assign it to a block)
BUILD_DEFAULTS = {"n_postings": 3500, "centroid_fraction": 0.1, "summary_energy": 0.4, "min_cluster_size": 2,
                  "max_fraction": 1.5, "doc_cut": 15}
#: search parameters: ``query_cut`` (the query's largest terms visited) and ``heap_factor`` (a
#: block is read when its summary scores above ``heap_factor`` x the current k-th score); chosen
#: by measurement on SciFact and ArguAna (docs/retrieval.md, "Which sparse index when")
SEARCH_DEFAULTS = {"query_cut": 20, "heap_factor": 0.9}
INDEX_FILE = "seismic"  # the engine adds ".index.seismic"
ROWS_FILE = "seismic.rows.npy"
PARAMS_FILE = "seismic.json"
#: the engine's component ids are 16-bit in its default variant; a larger vocabulary takes "LV"
U16_VOCAB = 1 << 16


def _engine():
    from ..extras import require

    return require("seismic")


@contextlib.contextmanager
def _engine_output(show: bool):
    """The engine prints its progress on the process's standard output: sent to standard error
    (``show``) or nowhere, so that a command's own output stays clean (file descriptor 1 is
    redirected for the whole process while the engine runs: another thread's prints go there too)."""
    import sys

    for s in (sys.stdout, sys.stderr):
        s.flush()
    saved = os.dup(1)
    target = os.dup(2) if show else os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(target, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(target)


class SeismicIndex:
    """Seismic's approximate inner-product index over ``[n_docs, |V|]`` sparse document vectors.

    Args:
        doc_vectors: CSR ``[n, |V|]`` (or a list of row blocks, e.g. an embeddings folder's shards,
            handed to the engine one after the other).
        doc_ids: their ids (a list, or a saved index's memory-mapped ids).
        query_cut, heap_factor: search parameters (:data:`SEARCH_DEFAULTS`; change them at any time).
        threads: engine threads for building and for a batch of queries (0: all cores).
        build_params: :data:`BUILD_DEFAULTS`' keys.
    """

    def __init__(self, doc_vectors, doc_ids: Sequence[str], *, query_cut: int | None = None,
                 heap_factor: float | None = None, threads: int = 0, show_progress_bar: bool | None = None,
                 **build_params):
        engine = _engine()
        unknown = set(build_params) - set(BUILD_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown Seismic build parameters {sorted(unknown)}: use {', '.join(BUILD_DEFAULTS)}")
        build = {**BUILD_DEFAULTS, **{k: v for k, v in build_params.items() if v is not None}}
        from .dense import row_blocks

        blocks = [sp.csr_matrix(b, dtype=np.float32) for b in row_blocks(doc_vectors, doc_ids)]
        vocab = blocks[0].shape[1]
        lv = vocab > U16_VOCAB
        dataset = (engine.SeismicDatasetLV if lv else engine.SeismicDataset)(dim=vocab)
        rows, start = [], 0
        for b in blocks:
            b.sort_indices()
            b.sum_duplicates()
            ids = np.arange(start, start + b.shape[0])
            rows.append(ids[np.diff(b.indptr) > 0])
            dataset.add_documents_by_id([str(i) for i in ids.tolist()], b.indices.astype(np.int64),
                                        b.data.astype(np.float32), b.indptr.astype(np.int64))
            start += b.shape[0]
        self.rows = np.concatenate(rows)  # the documents the engine holds (an empty vector is left out)
        if not len(self.rows):
            raise ValueError("every document vector is empty: nothing to index")
        cls = engine.SeismicIndexLV if lv else engine.SeismicIndex
        with _engine_output(bool(show_progress_bar)):
            self._index = cls.build_from_dataset(dataset, num_threads=threads, **build)
        self._set(doc_ids, vocab, lv, build, query_cut, heap_factor, threads)

    def _set(self, doc_ids, vocab: int, lv: bool, build: dict, query_cut, heap_factor, threads) -> None:
        self.doc_ids = id_sequence(doc_ids)
        self.vocab_size, self.large_vocabulary, self.build_params = vocab, lv, dict(build)
        self.query_cut = int(query_cut if query_cut is not None else SEARCH_DEFAULTS["query_cut"])
        self.heap_factor = float(heap_factor if heap_factor is not None else SEARCH_DEFAULTS["heap_factor"])
        if self.query_cut < 1 or not 0 < self.heap_factor:
            raise ValueError(f"query_cut must be >= 1 and heap_factor > 0 (got {self.query_cut}, {self.heap_factor})")
        self.threads = int(threads)
        self._str = _engine().get_seismic_string()

    @property
    def params(self) -> dict:
        """What the index was built and is searched with (recorded beside metrics and in manifests)."""
        return {"index_type": "seismic", **self.build_params, "query_cut": self.query_cut,
                "heap_factor": self.heap_factor}

    def __len__(self) -> int:
        return len(self.doc_ids)

    # ------------------------------------------------------------------------- saving
    FILES = (INDEX_FILE + ".index.seismic", ROWS_FILE, PARAMS_FILE)

    def save(self, folder: str | Path, *, show_progress_bar: bool | None = None) -> None:
        """Write the engine's index file, the rows it holds and the parameters into ``folder``."""
        folder = Path(folder)
        with _engine_output(bool(show_progress_bar)):
            self._index.save(str(folder / INDEX_FILE))
        np.save(folder / ROWS_FILE, self.rows.astype(np.int64))
        (folder / PARAMS_FILE).write_text(json.dumps({"vocab_size": self.vocab_size, "large_vocabulary":
                                                      self.large_vocabulary, "build": self.build_params,
                                                      "search": {"query_cut": self.query_cut,
                                                                 "heap_factor": self.heap_factor}}))

    @classmethod
    def load(cls, folder: str | Path, doc_ids: Sequence[str], *, query_cut: int | None = None,
             heap_factor: float | None = None, threads: int = 0) -> SeismicIndex:
        """Open a saved index (the engine reads its file whole: it is not memory-mapped); ``query_cut``
        / ``heap_factor``: default, the ones saved with it."""
        engine, folder = _engine(), Path(folder)
        meta = json.loads((folder / PARAMS_FILE).read_text())
        cls_ = engine.SeismicIndexLV if meta["large_vocabulary"] else engine.SeismicIndex
        self = cls.__new__(cls)
        with _engine_output(False):
            self._index = cls_.load(str(folder / cls.FILES[0]))
        self.rows = np.load(folder / ROWS_FILE)
        if len(self.rows) != self._index.len or (len(self.rows) and self.rows[-1] >= len(doc_ids)):
            raise ValueError(f"{folder}: the Seismic index holds {self._index.len} documents, "
                             f"{ROWS_FILE} {len(self.rows)}, of {len(doc_ids)} ids")
        own = meta.get("search", {})
        self._set(doc_ids, meta["vocab_size"], meta["large_vocabulary"], meta["build"],
                  own.get("query_cut") if query_cut is None else query_cut,
                  own.get("heap_factor") if heap_factor is None else heap_factor, threads)
        return self

    # ------------------------------------------------------------------------- search
    def search(self, query_vectors: sp.spmatrix, query_ids: Sequence[str], top_k: int = 1000) -> Run:
        """Approximate top-``top_k`` of each query (a row of CSR ``[n_queries, |V|]``): ``{qid: {doc_id:
        score}}``, every query present, in order; one with no term or no hit gets ``{}``."""
        Q = sp.csr_matrix(query_vectors, dtype=np.float32)
        Q.sum_duplicates()
        if Q.shape[1] != self.vocab_size:
            raise ValueError(f"query vectors have {Q.shape[1]} dimensions, the index {self.vocab_size}")
        if Q.shape[0] != len(query_ids):
            raise ValueError(f"{len(query_ids)} query ids for {Q.shape[0]} query vectors")
        k = min(int(top_k), len(self.doc_ids))
        sent = [r for r in range(Q.shape[0]) if Q.indptr[r + 1] > Q.indptr[r]]
        hits: dict[int, list] = {}
        if sent:
            comps = [Q.indices[Q.indptr[r]:Q.indptr[r + 1]].astype(self._str) for r in sent]
            vals = [np.ascontiguousarray(Q.data[Q.indptr[r]:Q.indptr[r + 1]], np.float32) for r in sent]
            answers = self._index.batch_search(np.asarray([str(r) for r in sent], dtype=self._str), comps, vals,
                                               k=k, query_cut=self.query_cut, heap_factor=self.heap_factor,
                                               num_threads=self.threads)
            for answer in answers:  # in no fixed order, queries with no result left out: keyed by query
                if answer:
                    hits[int(answer[0][0])] = answer
        return {str(qid): self._ranking(hits.get(r, ())) for r, qid in enumerate(query_ids)}

    def _ranking(self, answer) -> dict[str, float]:
        """One query's engine answer as ``{doc_id: score}``: positive scores, best first (ties: corpus order)."""
        pairs = [(float(s), int(d)) for _, s, d in answer if s > 0]
        if not pairs:
            return {}
        pairs.sort(key=lambda x: (-x[0], x[1]))
        rows = np.fromiter((d for _, d in pairs), np.int64, len(pairs))
        names = self.doc_ids.take(rows)
        return dict(zip(names, (s for s, _ in pairs)))

    def doc_vectors(self, rows: Sequence[int]) -> sp.csr_matrix:
        """The stored vectors (fp16 values, as the engine scores them) of the documents at ``rows``
        (CSR ``[len(rows), |V|]``; a document with an empty vector gets an empty row)."""
        rows = np.asarray(rows, dtype=np.int64)
        at = np.searchsorted(self.rows, rows)
        indptr, indices, data = [0], [], []
        for r, i in zip(rows.tolist(), at.tolist()):
            if i < len(self.rows) and self.rows[i] == r:
                t, v = self._index.get(i)
                indices.extend(t)
                data.extend(v)
            indptr.append(len(indices))
        return sp.csr_matrix((np.asarray(data, np.float32), np.asarray(indices, np.int64), indptr),
                             shape=(len(rows), self.vocab_size))
