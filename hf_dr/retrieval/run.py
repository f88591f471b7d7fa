"""The Run: ``dict[qid, dict[docid, score]]`` (pytrec_eval's shape), and TREC run files."""

from __future__ import annotations

import os
from itertools import islice
from pathlib import Path

import numpy as np

Run = dict[str, dict[str, float]]

__all__ = ["Run", "IdList", "id_sequence", "write_trec_run", "read_trec_run", "top_k_run", "run_from_scores"]


class IdList(list):
    """An index's document ids held in memory: a list of ``str``, with ``take(rows)`` (the ids at
    ``rows``), as a saved index's memory-mapped ids (:class:`hf_dr.retrieval.DocIds`) have it. ``take``
    is one gather over an object array of the ids, made on first use (about 10 ns an id where a
    Python loop over the list takes 50); the ids are not changed once indexed."""

    def take(self, rows) -> list[str]:
        arr = self.__dict__.get("_array")
        if arr is None or len(arr) != len(self):
            arr = self._array = np.asarray(self, dtype=object)
        return arr[np.asarray(rows, dtype=np.int64)].tolist()


def id_sequence(doc_ids) -> IdList:
    """``doc_ids`` as an index keeps them: a sequence with ``take`` (a saved index's) as it is, anything
    else as an :class:`IdList` of ``str``."""
    return doc_ids if hasattr(doc_ids, "take") else IdList(str(d) for d in doc_ids)


def write_trec_run(run: Run, path: str | os.PathLike, tag: str = "hf-dr", top_k: int | None = None) -> Path:
    """Write ``qid Q0 docid rank score tag`` lines, each query sorted by descending score (through a
    temporary file and a rename: a crash never leaves a truncated run)."""
    from ..io import atomic_write_text

    lines = []
    for qid, docs in run.items():
        ranked = sorted(docs.items(), key=lambda x: (-x[1], x[0]))
        if top_k is not None:
            ranked = ranked[:top_k]
        lines.extend(f"{qid} Q0 {did} {rank} {score:.6f} {tag}\n" for rank, (did, score) in enumerate(ranked, 1))
    return atomic_write_text(path, "".join(lines))


def read_trec_run(path: str | os.PathLike) -> Run:
    run: Run = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise ValueError(f"{path}:{lineno}: a TREC run line has 6 fields (qid Q0 docid rank score tag), got {len(parts)}")
            run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return run


def run_from_scores(scores: np.ndarray, indices: np.ndarray, query_ids, doc_ids) -> Run:
    """Turn ``[n_q, k]`` score / doc-index matrices into a Run (index -1 = no hit, skipped).
    ``doc_ids``: a sequence with ``take(rows) -> list`` (an index's :class:`IdList`, a saved index's
    memory-mapped ids: only the ids of the hits are read), or a list (the hits looked up one by one: no
    copy of a caller's whole id list on each call)."""
    scores, indices = np.asarray(scores), np.asarray(indices)
    hit = indices >= 0
    rows = indices[hit]
    take = getattr(doc_ids, "take", None)  # an index's ids; a caller's own list: only the hits looked up
    if take is not None:
        names = take(rows)
    else:
        if not isinstance(doc_ids, list):
            doc_ids = list(doc_ids)
        names = [doc_ids[i] for i in rows.tolist()]
    values = scores[hit].tolist()  # Python floats, as float(s) of each score
    pairs = zip(names, values)  # each query's dict takes its hits' pairs off the one zip
    return {str(qid): dict(islice(pairs, n)) for qid, n in zip(query_ids, hit.sum(axis=1).tolist())}


def top_k_run(run: Run, k: int) -> Run:
    return {q: dict(sorted(d.items(), key=lambda x: -x[1])[:k]) for q, d in run.items()}
