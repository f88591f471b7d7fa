"""Fusion of runs: weighted sums of normalised scores, and reciprocal rank fusion."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .run import Run

__all__ = ["fuse", "normalize_run"]


def normalize_run(run: Run, method: str) -> Run:
    """Per-query score normalisation: ``"minmax"``, ``"zscore"``, or ``"none"``/``"sum"`` (raw)."""
    if method in ("none", "sum", None):
        return run
    out: Run = {}
    for q, docs in run.items():
        if not docs:
            out[q] = {}
            continue
        v = np.fromiter(docs.values(), dtype=np.float64, count=len(docs))
        if method == "minmax":
            lo, span = v.min(), v.max() - v.min()
            v = (v - lo) / span if span > 0 else np.ones_like(v)
        elif method == "zscore":
            sd = v.std()
            v = (v - v.mean()) / sd if sd > 0 else np.zeros_like(v)
        else:
            raise ValueError(f"unknown normalisation {method!r}: use minmax, zscore or none")
        out[q] = dict(zip(docs.keys(), v.tolist()))
    return out


def fuse(runs: Sequence[Run], weights: Sequence[float] | None = None, method: str = "zscore",
         rrf_k: int = 60, top_k: int | None = None, missing: str = "min") -> Run:
    """Fuse runs into one.

    * ``method="sum"``: weighted sum of raw scores (the SPLADE-CAI paper's Eq. 8-9 hybrid);
    * ``"minmax"`` / ``"zscore"``: weighted sum after per-query normalisation;
    * ``"rrf"``: reciprocal rank fusion, ``sum_r w_r / (rrf_k + rank_r(d))``.

    A document missing from one run gets that run's minimum normalised score for the query
    (``missing="min"``) or 0 (``missing="zero"``). Queries present in any run are kept.
    """
    if not runs:
        raise ValueError("nothing to fuse")
    weights = list(weights) if weights is not None else [1.0] * len(runs)
    if len(weights) != len(runs):
        raise ValueError(f"{len(weights)} weights for {len(runs)} runs")
    if method == "rrf":
        normed = []
        for run in runs:
            r = {}
            for q, docs in run.items():
                ranked = sorted(docs.items(), key=lambda x: -x[1])
                r[q] = {d: 1.0 / (rrf_k + i) for i, (d, _) in enumerate(ranked, 1)}
            normed.append(r)
        missing = "zero"
    else:
        normed = [normalize_run(r, method) for r in runs]
    qids = list(dict.fromkeys(q for r in normed for q in r))
    fused: Run = {}
    for q in qids:
        total: dict[str, float] = {}
        per_run = [r.get(q, {}) for r in normed]
        docs = list(dict.fromkeys(d for scores in per_run for d in scores))  # first appearance: deterministic
        for w, scores in zip(weights, per_run):
            floor = min(scores.values()) if (scores and missing == "min") else 0.0
            for d in docs:
                total[d] = total.get(d, 0.0) + w * scores.get(d, floor)
        if top_k is not None:
            total = dict(sorted(total.items(), key=lambda x: -x[1])[:top_k])
        fused[q] = total
    return fused
