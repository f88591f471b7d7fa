"""BERM unit segmentation and essential-unit annotation (Xu et al. 2023, papers/000, §4.1).

* :func:`split_units` — Eq. 1: a passage -> sentence units (pysbd, a real rule-based sentence
  splitter), as character spans of the passage text, so they are independent of any tokenizer.
* :func:`unit_token_spans` — the units' token spans ``[s_u, d_u)`` through a fast tokenizer's
  offset mapping: units cut by truncation are clipped, units truncated away entirely dropped.

Which unit is *essential* for a query (the extract loss' label) is training signal, built above
retrieval: :mod:`hf_dr.labeling.units` (``essential_unit_labels``, ``annotate_units``).

An empty / whitespace passage has no unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

__all__ = ["split_units", "unit_token_spans", "NO_LABEL"]

NO_LABEL = -100  # the ignore index of the extract loss


@lru_cache(maxsize=4)
def _segmenter(language: str):
    from ..extras import require

    return require("pysbd").Segmenter(language=language, clean=False)


def split_units(text: str, language: str = "en") -> list[tuple[int, int]]:
    """Sentence units of ``text`` (Eq. 1) as ``(start, end)`` character spans, surrounding
    whitespace excluded. ``""`` -> ``[]``; text without sentence boundary -> one unit."""
    if not text or not text.strip():
        return []
    spans: list[tuple[int, int]] = []
    cursor = 0
    for sent in _segmenter(language).segment(text):
        s = sent.strip()
        if not s:
            continue
        # clean=False keeps the sentences as substrings: locate each after the previous one
        start = text.find(s, cursor)
        if start < 0:  # pysbd changed the text (should not happen with clean=False)
            raise ValueError(f"sentence splitter returned text not found in the passage: {s[:60]!r}")
        spans.append((start, start + len(s)))
        cursor = start + len(s)
    return spans


def unit_token_spans(offsets: Sequence[Sequence[int]], char_spans: Sequence[Sequence[int]]
                     ) -> tuple[list[tuple[int, int]], list[int]]:
    """Map character spans to token spans ``[s, d)`` through one sequence's offset mapping.

    Args:
        offsets: ``(char_start, char_end)`` per token of the (truncated) tokenization; special
            tokens have empty offsets ``(0, 0)`` and belong to no unit.
        char_spans: units as character spans (:func:`split_units`).
    Returns ``(spans, kept)``: the token span of every unit that still has a token after
    truncation (clipped to the tokens present) and the indices of those units in ``char_spans``.
    A token belongs to the unit containing its first character.
    """
    starts = np.array([o[0] if o[1] > o[0] else -1 for o in offsets], dtype=np.int64)
    spans: list[tuple[int, int]] = []
    kept: list[int] = []
    for i, (a, b) in enumerate(char_spans):
        idx = np.nonzero((starts >= a) & (starts < b))[0]
        if len(idx):
            spans.append((int(idx[0]), int(idx[-1]) + 1))
            kept.append(i)
    return spans, kept
