"""BERM's essential-unit labels (Xu et al. 2023, papers/000, §4.1): which sentence unit of a
positive passage the query needs, the label of the extract loss.

* :func:`essential_unit_labels` — ``h_i = BM25(q, u_i) + δ·r_i`` with the suite's one BM25
  (:class:`hf_dr.retrieval.BM25Index`, bm25s; term frequency counts) over the collection of
  all units, and an optional reader score ``r_i`` (Eq. 2, :class:`UnitReader`); the essential
  unit is ``argmax_i h_i``.
* :func:`annotate_units` — all of it over a ``datasets.Dataset`` of (query, positive) rows.

Units themselves (:func:`hf_dr.data.units.split_units`, ``unit_token_spans``) are data, used by the
model too; these labels are training signal, so they live here, above retrieval.

Defined behaviour for awkward input (documented in docs/berm.md):

* an empty / whitespace passage has no unit; its label is ``-100`` (no supervision);
* a one-unit passage gets label 0 (its unit losses are exactly 0);
* a query with no term overlap with any unit (and no reader) has ``max h = 0``: there is
  no essential unit to name, the label is ``-100`` (the extract loss skips the row, the
  balance loss still applies); ties between positive scores go to the first unit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..data.units import NO_LABEL, split_units, unit_token_spans

__all__ = ["essential_unit_labels", "UnitReader", "annotate_units", "NO_LABEL", "DELTA"]

DELTA = 0.1  # δ of §4.1: BM25 weighs more than the reader


class UnitReader:
    """Reader score of Eq. 2: ``r_i = max(A[s_i:d_i])`` where ``A`` is the start-position
    distribution of an extractive QA model over the passage tokens.

    ``model_name_or_path``: any ``AutoModelForQuestionAnswering`` checkpoint (a folder, or a Hub
    id such as ``deepset/roberta-base-squad2`` for users who have the Hub).
    """

    def __init__(self, model_name_or_path: str, max_length: int = 384, device: str | None = None):
        import torch
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer

        from ..devices import resolve_device

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_name_or_path))
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(f"{model_name_or_path}: the reader needs a fast tokenizer (offset mapping)")
        self.device = resolve_device(device)
        self.model = AutoModelForQuestionAnswering.from_pretrained(str(model_name_or_path)).to(self.device).eval()
        self.max_length = max_length
        self._torch = torch

    def __call__(self, query: str, passage: str, char_spans: Sequence[Sequence[int]]) -> np.ndarray:
        torch = self._torch
        if not char_spans:
            return np.zeros(0, dtype=np.float32)
        enc = self.tokenizer(query, passage, truncation="only_second", max_length=self.max_length,
                             return_offsets_mapping=True, return_tensors="pt")
        seq = enc.sequence_ids(0)
        offsets = enc.pop("offset_mapping")[0].tolist()
        with torch.inference_mode():
            logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).start_logits[0].float().cpu()
        ctx = torch.tensor([s == 1 for s in seq])
        # A: start distribution over the passage's tokens only (question / special tokens excluded)
        a = torch.softmax(logits.masked_fill(~ctx, float("-inf")), dim=0).numpy()
        passage_offsets = [tuple(o) if s == 1 else (0, 0) for o, s in zip(offsets, seq)]
        spans, kept = unit_token_spans(passage_offsets, char_spans)
        r = np.zeros(len(char_spans), dtype=np.float32)
        for (s, d), i in zip(spans, kept):
            r[i] = float(a[s:d].max())
        return r


def essential_unit_labels(queries: Sequence[str], units: Sequence[Sequence[str]], *,
                          reader_scores: Sequence[Sequence[float]] | None = None, delta: float = DELTA,
                          bm25_kwargs: dict | None = None) -> tuple[list[list[float]], list[int]]:
    """Hybrid scores ``h_i = BM25(q, u_i) + δ·r_i`` and the essential unit ``argmax_i h_i`` (§4.1).

    BM25 is :class:`hf_dr.retrieval.BM25Index` built over every unit of every row (so IDF comes
    from a real unit collection); each query is scored against its own passage's units.
    Returns ``(scores, labels)``; a row without units, or whose best score is 0 (no overlap
    and no reader), gets ``NO_LABEL``.
    """
    from ..retrieval import BM25Index

    if len(queries) != len(units):
        raise ValueError(f"{len(queries)} queries for {len(units)} unit lists")
    if reader_scores is not None and len(reader_scores) != len(units):
        raise ValueError("reader_scores must have one list per row")
    flat = [u for row in units for u in row]
    starts = np.cumsum([0] + [len(row) for row in units])
    index = BM25Index([str(i) for i in range(len(flat))], flat, **(bm25_kwargs or {})) if flat else None
    scores, labels = [], []
    for k, (q, row) in enumerate(zip(queries, units)):
        if not row:
            scores.append([])
            labels.append(NO_LABEL)
            continue
        h = np.asarray(index.score(q, np.arange(starts[k], starts[k + 1])), dtype=np.float64)
        if reader_scores is not None:
            r = np.asarray(reader_scores[k], dtype=np.float64)
            if r.shape != h.shape:
                raise ValueError(f"row {k}: {len(r)} reader scores for {len(h)} units")
            h = h + delta * r
        scores.append([float(x) for x in h])
        labels.append(int(np.argmax(h)) if h.max() > 0 else NO_LABEL)
    return scores, labels


def annotate_units(dataset, *, query_column: str = "query", pos_column: str = "pos", reader: str | UnitReader | None = None,
                   delta: float = DELTA, language: str = "en", bm25_kwargs: dict | None = None,
                   show_progress_bar: bool = True):
    """Add BERM unit columns to a ``datasets.Dataset`` of (query, positive) rows:

    * ``units`` (list[str]) and ``unit_char_spans`` (list of ``[start, end)``) of the positive;
    * ``unit_scores`` (list[float]): ``h_i``; ``essential_unit`` (int): ``argmax h`` or ``-100``.

    ``reader``: an ``AutoModelForQuestionAnswering`` id / folder or a :class:`UnitReader`
    (Eq. 2); ``None`` (default) = BM25 only.
    """
    from tqdm.auto import tqdm

    for col in (query_column, pos_column):
        if col not in dataset.column_names:
            raise KeyError(f"the dataset has no {col!r} column (has {dataset.column_names})")
    queries = list(dataset[query_column])
    passages = list(dataset[pos_column])
    spans = [split_units(p, language) for p in tqdm(passages, desc="Sentence units", disable=not show_progress_bar)]
    texts = [[p[a:b] for a, b in s] for p, s in zip(passages, spans)]
    r = None
    if reader is not None:
        reader = reader if isinstance(reader, UnitReader) else UnitReader(reader)
        r = [reader(q, p, s) for q, p, s in tqdm(list(zip(queries, passages, spans)), desc="Reader scores",
                                                 disable=not show_progress_bar)]
    scores, labels = essential_unit_labels(queries, texts, reader_scores=r, delta=delta, bm25_kwargs=bm25_kwargs)
    ds = dataset
    for name, col in (("units", texts), ("unit_char_spans", [[list(x) for x in s] for s in spans]),
                      ("unit_scores", scores), ("essential_unit", labels)):
        if name in ds.column_names:
            ds = ds.remove_columns(name)
        ds = ds.add_column(name, col)
    return ds
