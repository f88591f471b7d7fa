"""Fusion of runs: weighted sums of normalised scores, and reciprocal rank fusion."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .run import Run

__all__ = ["fuse", "normalize_run"]


def normalize_run(run: Run, method: str, reference: Run | None = None) -> Run:
    """Per-query score normalisation: ``"minmax"``, ``"zscore"``, or ``"none"``/``"sum"`` (raw).

    The statistics (min and max, or mean and standard deviation) are those of the query's own
    scores, or, when ``reference`` has the query, of ``reference[q]``'s scores: every document of
    ``run[q]`` is then put on the reference's scale, whether or not it belongs to the reference
    (the fusion teacher normalises over a reference set wider than its candidate list). A
    reference equal to the run gives exactly the run's own normalisation.
    """
    if method in ("none", "sum", None):
        return run
    out: Run = {}
    for q, docs in run.items():
        if not docs:
            out[q] = {}
            continue
        v = np.fromiter(docs.values(), dtype=np.float64, count=len(docs))
        ref = v
        if reference is not None and reference.get(q):
            ref = np.fromiter(reference[q].values(), dtype=np.float64, count=len(reference[q]))
        if method == "minmax":
            lo, span = ref.min(), ref.max() - ref.min()
            v = (v - lo) / span if span > 0 else np.ones_like(v)
        elif method == "zscore":
            sd = ref.std()
            v = (v - ref.mean()) / sd if sd > 0 else np.zeros_like(v)
        else:
            raise ValueError(f"unknown normalisation {method!r}: use minmax, zscore or none")
        out[q] = dict(zip(docs.keys(), v.tolist()))
    return out


def fuse(runs: Sequence[Run], weights: Sequence[float] | None = None, method: str = "zscore",
         rrf_k: int = 60, top_k: int | None = None, missing: str = "min",
         references: Sequence[Run] | None = None) -> Run:
    """Fuse runs into one.

    * ``method="sum"``: weighted sum of raw scores (the SPLADE-CAI paper's Eq. 8-9 hybrid);
    * ``"minmax"`` / ``"zscore"``: weighted sum after per-query normalisation;
    * ``"rrf"``: reciprocal rank fusion, ``sum_r w_r / (rrf_k + rank_r(d))``.

    A document missing from one run gets that run's minimum normalised score for the query
    (``missing="min"``) or 0 (``missing="zero"``). Queries present in any run are kept.

    ``references`` (one per run, ``"minmax"`` / ``"zscore"`` only): the scores whose per-query
    statistics normalise each run (:func:`normalize_run`), instead of the run's own.
    """
    if not runs:
        raise ValueError("nothing to fuse")
    weights = list(weights) if weights is not None else [1.0] * len(runs)
    if len(weights) != len(runs):
        raise ValueError(f"{len(weights)} weights for {len(runs)} runs")
    if references is not None:
        if method not in ("minmax", "zscore"):
            raise ValueError(f"references normalise scores: they need method minmax or zscore, not {method!r}")
        if len(references) != len(runs):
            raise ValueError(f"{len(references)} references for {len(runs)} runs")
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
        refs = references if references is not None else [None] * len(runs)
        normed = [normalize_run(r, method, ref) for r, ref in zip(runs, refs)]
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
