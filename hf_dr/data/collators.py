"""Collators that turn rows of (query, positive, negatives[, scores]) into model inputs."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["RetrievalCollator", "UnitCollator", "text_keys"]


def text_keys(texts: Sequence[str]) -> torch.Tensor:
    """A stable 63-bit key of each text (blake2b, the same in every process, unlike ``hash``):
    which queries and documents of a batch are the same (:func:`hf_dr.losses.in_batch_positives`)."""
    return torch.tensor([int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little") >> 1
                         for t in texts], dtype=torch.long)


@dataclass
class RetrievalCollator:
    """Tokenise a batch of training rows for :mod:`hf_dr.objectives`.

    Each row has ``query`` (str), ``pos`` (str) and optionally ``neg`` (str or list of
    str: hard negatives) and ``scores`` (``[1 + m]`` teacher scores, positive first).
    Output keys: ``query_input_ids``, ``query_attention_mask`` ``[B, Lq]``;
    ``doc_input_ids``, ``doc_attention_mask`` ``[B * (1 + m), Ld]`` laid out
    ``[pos_0, neg_0_1..neg_0_m, pos_1, ...]``; ``query_keys`` ``[B]`` and ``doc_keys``
    ``[B * (1 + m)]``, which queries and documents are the same text (:func:`text_keys`: the
    contrastive losses do not treat a query's positives as its in-batch negatives,
    :func:`hf_dr.losses.in_batch_positives`); ``teacher_scores`` ``[B, 1 + m]`` when given.
    ``query_prefix`` / ``doc_prefix``: the model's prompts, prepended as its encodings prepend them
    (:meth:`for_model`).
    """

    tokenizer: object
    query_max_length: int = 64
    doc_max_length: int = 256
    query_column: str = "query"
    pos_column: str = "pos"
    neg_column: str | None = "neg"
    score_column: str | None = "scores"
    query_prefix: str = ""
    doc_prefix: str = ""

    @classmethod
    def for_model(cls, model, **kwargs):
        """A collator for ``model``: its tokenizer and the prompts its encodings use (``query_prefix`` /
        ``doc_prefix``), so training sees the texts that inference encodes."""
        return cls(model.tokenizer, query_prefix=getattr(model, "query_prefix", None) or "",
                   doc_prefix=getattr(model, "doc_prefix", None) or "", **kwargs)

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
            queries.append(self.query_prefix + r[self.query_column])
            docs.append(self.doc_prefix + r[self.pos_column])
            docs.extend(self.doc_prefix + n for n in negs)
            if self.score_column and r.get(self.score_column) is not None:
                scores.append(list(r[self.score_column]))
        q = self.tokenizer(queries, padding=True, truncation=True, max_length=self.query_max_length, return_tensors="pt")
        d = self.tokenizer(docs, padding=True, truncation=True, max_length=self.doc_max_length, return_tensors="pt")
        batch = {"query_input_ids": q["input_ids"], "query_attention_mask": q["attention_mask"],
                 "doc_input_ids": d["input_ids"], "doc_attention_mask": d["attention_mask"],
                 "query_keys": text_keys(queries), "doc_keys": text_keys(docs)}
        if scores:
            if len(scores) != len(rows):
                raise ValueError("teacher scores are given for some rows but not all")
            batch["teacher_scores"] = torch.tensor(scores, dtype=torch.float32)
        return batch


@dataclass
class UnitCollator(RetrievalCollator):
    """:class:`RetrievalCollator` plus BERM's unit spans of each row's positive (papers/000 §4.1).

    Rows also carry ``unit_char_spans`` (list of ``[start, end)`` character spans of the
    positive's sentence units) and ``essential_unit`` (int, ``-100`` = none), as written by
    :func:`hf_dr.data.units.annotate_units`. Extra output keys:

    * ``unit_spans`` ``[B, U, 2]``: token spans ``[s, d)`` in the positive's row of
      ``doc_input_ids`` (clipped by truncation; units truncated away are dropped);
    * ``unit_mask`` ``[B, U]`` bool; ``unit_labels`` ``[B]``: the essential unit's index among
      the kept units, ``-100`` when it has none or was truncated away.
    """

    spans_column: str = "unit_char_spans"
    label_column: str = "essential_unit"

    def __call__(self, rows: Sequence[dict]) -> dict[str, torch.Tensor]:
        from .units import NO_LABEL, unit_token_spans

        batch = super().__call__(rows)
        group = batch["doc_input_ids"].shape[0] // len(rows)
        pos = [self.doc_prefix + r[self.pos_column] for r in rows]
        off = len(self.doc_prefix)  # the units' character spans, in the prefixed text
        # the positives again, alone, for their offsets: the same text, truncation and
        # tokenizer give the same tokens as in the batch (shifted by left padding, if any)
        enc = self.tokenizer(pos, truncation=True, max_length=self.doc_max_length, return_offsets_mapping=True)
        spans, labels = [], []
        for i, r in enumerate(rows):
            if self.spans_column not in r:
                raise KeyError(f"training row {i} has no {self.spans_column!r} column: annotate the data with "
                               "hf_dr.data.units.annotate_units (or dataset_builders/berm_units.py)")
            mask_row = batch["doc_attention_mask"][i * group]
            shift = int(mask_row.argmax()) if self.tokenizer.padding_side == "left" else 0
            s, kept = unit_token_spans(enc["offset_mapping"][i], [(a + off, b + off) for a, b in r[self.spans_column] or []])
            spans.append([(a + shift, b + shift) for a, b in s])
            label = r.get(self.label_column, NO_LABEL)
            label = NO_LABEL if label is None or label < 0 or label not in kept else kept.index(label)
            labels.append(label)
        U = max(1, max(len(s) for s in spans))
        unit_spans = torch.zeros((len(rows), U, 2), dtype=torch.long)
        unit_mask = torch.zeros((len(rows), U), dtype=torch.bool)
        for i, s in enumerate(spans):
            if s:
                unit_spans[i, :len(s)] = torch.tensor(s, dtype=torch.long)
                unit_mask[i, :len(s)] = True
        batch.update(unit_spans=unit_spans, unit_mask=unit_mask, unit_labels=torch.tensor(labels, dtype=torch.long))
        return batch
