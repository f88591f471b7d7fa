"""Pseudo-relevance labels for conversational dense retrieval (CDR; papers/002 §5).

Pipeline: conversational turns -> rewritten by the T5 rewriter (:mod:`.rewriting`) -> the
ordinary labelling pipeline on the rewritten queries (BM25 -> rerank -> top-k positives ->
SimANS negatives) -> CDR triplets whose query is the raw session, written
``"hisQ1|hisQ2|...|curQ"`` (papers/002 §5.2, following CQE, Lin et al. 2021), with the pseudo
positive / negative texts of the rewritten query. A CDR model's *query* encoder is then
trained on them with the passage encoder frozen (:class:`QueryTowerEncoder`), as ConvDR / CQE do.

TREC CAsT topics (2019 / 2020 json) are read by :func:`load_cast_sessions`.
"""

from __future__ import annotations

import copy
import csv
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from datasets import Dataset
from torch import nn

from ..encoding import EncoderMixin

__all__ = ["cdr_query", "load_cast_sessions", "build_cdr_triplets", "QueryTowerEncoder"]


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


class QueryTowerEncoder(nn.Module, EncoderMixin):
    """Two towers: a trainable query encoder and a frozen passage encoder (a copy of the
    starting model), for training a CDR query encoder on an index that stays valid
    (papers/002 §6.2, following ConvDR / CQE). ``forward(..., is_query)`` routes to the tower.

    ``QueryTowerEncoder.from_encoder(encoder)`` wraps any encoder of the suite. Saving writes
    the query tower to the folder (loadable as the original class) and the passage tower to
    ``passage_encoder/``.
    """

    def __init__(self, query_encoder: nn.Module, passage_encoder: nn.Module):
        super().__init__()
        self.query_encoder = query_encoder
        self.passage_encoder = passage_encoder.eval().requires_grad_(False)
        self.tokenizer = query_encoder.tokenizer
        self.config = getattr(query_encoder, "config", None)

    @classmethod
    def from_encoder(cls, encoder: nn.Module) -> QueryTowerEncoder:
        return cls(encoder, copy.deepcopy(encoder))

    @property
    def normalize(self):
        return getattr(self.query_encoder, "normalize", None)

    @property
    def max_query_length(self):
        return getattr(self.query_encoder, "max_query_length", None)

    @property
    def max_doc_length(self):
        return getattr(self.passage_encoder, "max_doc_length", None)

    def train(self, mode: bool = True):
        super().train(mode)
        self.passage_encoder.eval()  # frozen: no dropout either
        return self

    def forward(self, input_ids, attention_mask, is_query: bool = False, **kwargs):
        if is_query:
            return self.query_encoder(input_ids=input_ids, attention_mask=attention_mask, is_query=True, **kwargs)
        with torch.no_grad():
            return self.passage_encoder(input_ids=input_ids, attention_mask=attention_mask, is_query=False, **kwargs)

    def save_pretrained(self, save_directory, **kwargs) -> None:
        self.query_encoder.save_pretrained(save_directory, **kwargs)
        self.passage_encoder.save_pretrained(Path(save_directory) / "passage_encoder", **kwargs)

    def load_weights(self, directory) -> None:
        """Reload the query tower saved by :meth:`save_pretrained` (Trainer resume / best model)."""
        if hasattr(self.query_encoder, "load_weights"):
            self.query_encoder.load_weights(directory)
        else:
            from safetensors.torch import load_file

            self.query_encoder.load_state_dict(load_file(str(Path(directory) / "model.safetensors")))
