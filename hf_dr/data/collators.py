"""Collators that turn rows of (query, positive, negatives[, scores]) into model inputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["RetrievalCollator"]


@dataclass
class RetrievalCollator:
    """Tokenise a batch of training rows for :mod:`hf_dr.objectives`.

    Each row has ``query`` (str), ``pos`` (str) and optionally ``neg`` (str or list of
    str: hard negatives) and ``scores`` (``[1 + m]`` teacher scores, positive first).
    Output keys: ``query_input_ids``, ``query_attention_mask`` ``[B, Lq]``;
    ``doc_input_ids``, ``doc_attention_mask`` ``[B * (1 + m), Ld]`` laid out
    ``[pos_0, neg_0_1..neg_0_m, pos_1, ...]``; ``teacher_scores`` ``[B, 1 + m]`` when given.
    """

    tokenizer: object
    query_max_length: int = 64
    doc_max_length: int = 256
    query_column: str = "query"
    pos_column: str = "pos"
    neg_column: str | None = "neg"
    score_column: str | None = "scores"

    def __call__(self, rows: Sequence[dict]) -> dict[str, torch.Tensor]:
        if not rows:
            raise ValueError("empty batch")
        queries, docs, scores = [], [], []
        n_neg = None
        for i, r in enumerate(rows):
            for col in (self.query_column, self.pos_column):
                if col not in r:
                    raise KeyError(f"training row {i} has no {col!r} column (has {sorted(r)})")
            negs = r.get(self.neg_column) if self.neg_column else None
            negs = [] if negs is None else ([negs] if isinstance(negs, str) else list(negs))
            if n_neg is None:
                n_neg = len(negs)
            elif len(negs) != n_neg:
                raise ValueError(f"every row needs the same number of negatives ({n_neg}); row {i} has {len(negs)}")
            queries.append(r[self.query_column])
            docs.append(r[self.pos_column])
            docs.extend(negs)
            if self.score_column and r.get(self.score_column) is not None:
                scores.append(list(r[self.score_column]))
        q = self.tokenizer(queries, padding=True, truncation=True, max_length=self.query_max_length, return_tensors="pt")
        d = self.tokenizer(docs, padding=True, truncation=True, max_length=self.doc_max_length, return_tensors="pt")
        batch = {"query_input_ids": q["input_ids"], "query_attention_mask": q["attention_mask"],
                 "doc_input_ids": d["input_ids"], "doc_attention_mask": d["attention_mask"]}
        if scores:
            if len(scores) != len(rows):
                raise ValueError("teacher scores are given for some rows but not all")
            batch["teacher_scores"] = torch.tensor(scores, dtype=torch.float32)
        return batch
