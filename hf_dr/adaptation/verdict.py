"""What ``hf-dr adapt`` says about its output (issue #23): one of :data:`VERDICTS`, with the numbers.

* **better on labelled queries**: the user judged a few queries (``qrels/dev.tsv``), selection used
  those judgments, and the output beats the starting model on them by at least what they can
  resolve: the half-width of the 95% confidence interval of the mean paired per-query difference
  in nDCG@10 (paired t), :func:`resolution`. Equivalently, a two-sided paired t-test at 0.05.
* **better on pseudo-labels only**: a trained checkpoint was output on the evidence of the
  pseudo-labels alone: there is no judged dev query, or the judged ones lean its way by less than
  they can resolve. When the teacher contains the student (:func:`rank_agreement`), the starting
  model could not be compared on the pseudo-labels either: only trained checkpoints competed.
* **kept the starting model**: no checkpoint beat it on the yardstick selection used; or the training
  queries were generated, the teacher contains the student, and the best trained checkpoint fell below
  the start on the pseudo-dev queries by more than they resolve (``fell``: such labels can show a
  checkpoint worse, never better — every measured corpus-only run whose pseudo-dev score fell so lost
  on the test split, docs/adapt.md).

The teacher-contains-student rule is behavioural: a fusion teacher's dense half ranks the dev
candidates as the student does when the student *is* it, wraps it (a ``BERMEncoder`` around it),
or was built from it. Checked by recorded identity first (the student's fingerprint, or that of
the dense model it is built on: :meth:`~hf_dr.adaptation.methods.Method.base_fingerprints`), then
by mean Kendall tau between the two models' scores of each pseudo-dev query's candidates, at
least :data:`CONTAINED_TAU`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

__all__ = ["VERDICTS", "LABELLED", "PSEUDO_ONLY", "KEPT", "CONTAINED_TAU", "JUDGED_DEV_MAX", "JUDGED_POOL",
           "resolution", "rank_agreement", "decide"]

LABELLED, PSEUDO_ONLY, KEPT = VERDICTS = ("better on labelled queries", "better on pseudo-labels only",
                                          "kept the starting model")
#: the mean Kendall tau (over the pseudo-dev queries' candidates) from which the student counts as
#: contained in the teacher's dense half. Measured on the bundled scifact-mini (20 queries x BM25
#: top 20, max length 128): a BERMEncoder around all-MiniLM-L6-v2 vs all-MiniLM-L6-v2 1.00;
#: splade-tiny vs all-MiniLM-L6-v2 0.38, BM25 vs all-MiniLM-L6-v2 0.35, splade-tiny vs BM25 0.32
#: (unrelated retrievers agree on the obvious candidates). 0.8 lies far from both: a student that
#: close ranks the candidates as the labels' dense half does, whose grades then favour it.
CONTAINED_TAU = 0.8
#: judged dev queries used at most (a seeded sample of qrels/dev.tsv), each a candidate pool
JUDGED_DEV_MAX = 50
#: BM25 candidates per judged dev query; the judged documents are added to them
JUDGED_POOL = 30


def resolution(after: Mapping[str, float], before: Mapping[str, float]) -> dict:
    """The paired comparison of per-query scores ``after`` vs ``before`` (their shared queries):
    ``difference`` (mean), ``resolution`` (the half-width of its 95% confidence interval, paired
    t: the smallest mean difference these queries resolve, given their spread), ``p_value``
    (two-sided paired t-test) and ``queries``. Fewer than two queries resolve nothing
    (``resolution`` None)."""
    qs = sorted(set(after) & set(before))
    d = np.array([after[q] - before[q] for q in qs], dtype=np.float64)
    mean = float(d.mean()) if len(d) else 0.0
    if len(d) < 2:
        return {"queries": len(d), "difference": mean, "resolution": None, "p_value": None,
                "method": "paired t, 95% confidence interval of the mean per-query difference"}
    from scipy.stats import t

    from ..evaluation import paired_t

    sd = float(d.std(ddof=1))
    half = float(t.ppf(0.975, len(d) - 1) * sd / math.sqrt(len(d)))
    p = paired_t(after, before)[1]
    return {"queries": len(d), "difference": mean, "resolution": half, "p_value": p,
            "method": "paired t, 95% confidence interval of the mean per-query difference"}


def rank_agreement(a: Mapping[str, Mapping[str, float]], b: Mapping[str, Mapping[str, float]], k: int = 10) -> dict:
    """How closely two rankings of the same candidates agree, over the queries both scored: mean
    Kendall tau-b of the scores, and mean overlap of the top ``k`` (a fraction). A query whose
    scores are all alike in either ranking counts as tau 0."""
    from scipy.stats import kendalltau

    taus, overlaps = [], []
    for q in sorted(set(a) & set(b)):
        docs = sorted(set(a[q]) & set(b[q]))
        if len(docs) < 2:
            continue
        x, y = [a[q][d] for d in docs], [b[q][d] for d in docs]
        tau = kendalltau(x, y).statistic
        taus.append(0.0 if tau is None or not np.isfinite(tau) else float(tau))
        n = min(k, len(docs))
        top = lambda s: set(sorted(docs, key=lambda d: (-s[q][d], d))[:n])  # noqa: E731
        overlaps.append(len(top(a) & top(b)) / n)
    return {"kendall_tau": float(np.mean(taus)) if taus else None,
            f"top{k}_overlap": float(np.mean(overlaps)) if overlaps else None, "queries": len(taus)}


def decide(kept_start: bool, judged: dict | None, contained: bool, pseudo: dict,
           fell: dict | None = None) -> tuple[str, str]:
    """``(verdict, sentence)``: one of :data:`VERDICTS` and the numbers behind it. ``judged``: the
    :func:`resolution` of the output against the starting model on the judged dev queries, with
    ``start`` and ``selected`` (their nDCG@10; with ``kept_start``, ``selected`` is the best
    checkpoint, which lost), or None; ``pseudo``: ``start`` and ``selected``
    pseudo-dev nDCG@10 (``selected`` None when not scored); ``fell``: with generated queries and a
    teacher containing the start, the :func:`resolution` of the best checkpoint against the start on
    the pseudo-dev queries that made selection keep the start (it fell by more than they resolve)."""
    def f(x):
        return "n/a" if x is None else f"{x:.4f}"

    def p(x):
        return "n/a" if x is None else format(x, ".3g")

    pseudo_part = f"pseudo-dev nDCG@10 {f(pseudo.get('start'))} (start) -> {f(pseudo.get('selected'))}"
    if judged is not None:
        n, res = judged["queries"], judged["resolution"]
        other = "the best checkpoint" if kept_start else "the output"
        judged_part = (f"{n} judged dev queries: nDCG@10 {f(judged['start'])} (start) -> {f(judged['selected'])} "
                       f"({other}), difference {judged['difference']:+.4f}, resolution ±{f(res)} (p = "
                       f"{p(judged['p_value'])})")
        if kept_start:
            return KEPT, f"{KEPT}: no checkpoint beat it on the {judged_part}"
        if res is not None and judged["difference"] > 0 and judged["difference"] >= res:
            return LABELLED, f"{LABELLED}: {judged_part}"
        return PSEUDO_ONLY, (f"{PSEUDO_ONLY}: the {judged_part} lean its way by less than they can resolve, so "
                             f"only the pseudo-labels it was trained on speak for it; {pseudo_part}")
    if kept_start and fell is not None:
        return KEPT, (f"{KEPT}: its training queries were generated and the teacher contains it, so the pseudo-labels "
                      f"could show a trained checkpoint worse, never better; the best one (step {fell['compared_step']}) "
                      f"fell below it on the {fell['queries']} pseudo-dev queries: nDCG@10 {f(fell['start'])} (start) -> "
                      f"{f(fell['selected'])}, difference {fell['difference']:+.4f}, more than they resolve "
                      f"(±{f(fell['resolution'])}, p = {p(fell['p_value'])}); "
                      "judge a few queries (qrels/dev.tsv) to compare on real ones")
    if kept_start:
        return KEPT, f"{KEPT}: no checkpoint beat it on the pseudo-labelled dev set ({pseudo_part})"
    if contained:
        return PSEUDO_ONLY, (f"{PSEUDO_ONLY}: trained on them, and chosen among the trained checkpoints only: the "
                             f"teacher contains the starting model, whose pseudo-dev score favours it and compares "
                             f"nothing ({pseudo_part}); no judged query compared the output with the starting model "
                             "(qrels/dev.tsv)")
    return PSEUDO_ONLY, f"{PSEUDO_ONLY}: {pseudo_part}; no judged dev query (qrels/dev.tsv)"
