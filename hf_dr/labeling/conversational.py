"""Pseudo-relevance labels for conversational dense retrieval (CDR; papers/002 §5).

Pipeline: conversational turns -> rewritten by the T5 rewriter (:mod:`.rewriting`) -> the
ordinary labelling pipeline on the rewritten queries (BM25 -> rerank -> top-k positives ->
SimANS negatives) -> CDR triplets whose query is the raw session, written
``"hisQ1|hisQ2|...|curQ"`` (papers/002 §5.2, following CQE, Lin et al. 2021), with the pseudo
positive / negative texts of the rewritten query. A CDR model's *query* encoder is then
trained on them with the passage encoder frozen
(:class:`hf_dr.models.query_tower.QueryTowerEncoder`), as ConvDR / CQE do.

TREC CAsT topics (2019 / 2020 json) are read by :func:`load_cast_sessions`.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from datasets import Dataset

__all__ = ["cdr_query", "load_cast_sessions", "build_cdr_triplets"]


def cdr_query(history: Sequence[str], current: str, sep: str = "|") -> str:
    """``"hisQ1|hisQ2|...|curQ"``: the session's previous queries, oldest first, then the current one."""
    return sep.join([h.strip() for h in history if h and h.strip()] + [current.strip()])


def load_cast_sessions(path: str | os.PathLike, resolved: str | os.PathLike | None = None) -> dict[str, dict]:
    """TREC CAsT topics as ``{qid: {"current", "history", "manual"}}`` (qid ``<topic>_<turn>``).

    ``path``: a CAsT topics json (2019 ``*_topics_v1.0.json`` or 2020
    ``2020_manual_evaluation_topics_v1.0.json``). ``history`` holds the session's previous
    raw utterances, oldest first. ``manual`` is the manual rewrite when known: from the 2020
    json's ``manual_rewritten_utterance``, or from the 2019 ``*_annotated_resolved_v1.0.tsv``
    given as ``resolved`` (used only to *evaluate* the rewriter — the labelling pipeline runs
    on the rewriter's output).
    """
    topics = json.loads(Path(path).read_text(encoding="utf-8"))
    manual: dict[str, str] = {}
    if resolved is not None:
        with open(resolved, encoding="utf-8") as f:
            for row in csv.reader(f, delimiter="\t"):
                if len(row) >= 2:
                    manual[row[0].strip()] = row[1].strip()
    sessions: dict[str, dict] = {}
    for t in topics:
        prev: list[str] = []
        for turn in t["turn"]:
            qid = f"{t['number']}_{turn['number']}"
            raw = turn["raw_utterance"].strip()
            sessions[qid] = {"current": raw, "history": list(prev),
                             "manual": turn.get("manual_rewritten_utterance", manual.get(qid))}
            prev.append(raw)
    return sessions


def build_cdr_triplets(triplets: Dataset, sessions: Mapping[str, Mapping], sep: str = "|") -> Dataset:
    """The pipeline's triplets (built on rewritten queries, ``query_id`` = session turn id) with
    their ``query`` replaced by the concatenated session ``hisQ1|...|curQ``; the rewritten query
    is kept as ``rewritten_query``. Rows of turns missing from ``sessions`` raise an error."""
    missing = sorted({q for q in triplets["query_id"] if q not in sessions})
    if missing:
        raise ValueError(f"{len(missing)} query ids have no conversational session (e.g. {missing[:3]})")

    def fn(row):
        s = sessions[row["query_id"]]
        return {"rewritten_query": row["query"], "query": cdr_query(s["history"], s["current"], sep)}

    return triplets.map(fn)
