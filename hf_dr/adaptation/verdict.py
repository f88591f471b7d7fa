"""What ``hf-dr adapt`` says about its output: one of :data:`VERDICTS`, with the numbers, and the
word Sentence Transformers' training examples print against a baseline evaluated first
(:data:`WORDS`, :func:`verdict_word`).

* **better on labelled queries** (``WIN``): the user judged some queries (``qrels/dev.tsv``); the
  seed split them in two (:func:`hf_dr.adaptation.judged.split_judged`); one half chose the
  checkpoint and the other, held out, shows the output beating the starting model by at least the
  half-width of the 95% *prediction* interval of the mean paired per-query difference in nDCG@10 for
  as many other queries (:func:`prediction_half_width`, from the paired t of :func:`resolution`):
  where the difference on as many *other* queries like them should fall (the sampling of both sets),
  both scored by full-corpus retrieval. The claim is about the user's other queries, so its bar is
  that interval, not the confidence interval of the held-out mean (sqrt(2) narrower): at the default
  budgets the confidence bar let a test loss through (SciFact, ``cai``, seed 1: +0.0599 ± 0.0495
  held out, -0.0068 on the test queries; docs/adapt.md, "Does the verdict hold?"). The choice was
  made on other queries, so it does not bias the held-out difference. With judged queries this is
  the only verdict that outputs a trained checkpoint.
* **better on pseudo-labels only** (``MARGINAL``): no judged query, and the pseudo-dev set of a
  teacher that does not contain the student shows the best trained checkpoint better than the start
  by at least the half-width of the 95% *prediction* interval of its held-out queries (the
  difference expected on as many new queries leans its way; :func:`resolves_gain`):
  it is output, on the pseudo-labels' word alone. As with judged queries, the seed
  splits the pseudo-dev queries in two: one half chooses the checkpoint, the other, held out, states
  the verdict, with the same bar; the pseudo-labels also carry the teacher's errors, which no
  interval accounts for: measured in
  ``benchmarks/verdict.py``, the confidence interval alone let a loss below zero-shot through
  (docs/adapt.md, "Does the verdict hold?").
* **kept the starting model** (``REGRESSION``; ``MARGINAL`` when a trained checkpoint is kept beside
  it as *unverified*): no checkpoint beat the start on the evidence that chose; or the held-out
  judged queries show the chosen one worse by more than they resolve; or nothing says it is better
  by more than the evidence resolves (held-out judged queries leaning its way by less than their
  prediction interval; with no judged query, a teacher that contains the student, or a pseudo-dev gain smaller
  than its prediction interval): the start is the output and the best trained checkpoint is kept beside it as
  ``unverified/``, which the first words of the sentence say.

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

__all__ = ["VERDICTS", "LABELLED", "PSEUDO_ONLY", "KEPT", "UNVERIFIED", "VERDICT_RULE", "WORDS", "CONTAINED_TAU", "resolution",
           "prediction_half_width", "resolves_gain", "rank_agreement", "decide", "verdict_word"]

LABELLED, PSEUDO_ONLY, KEPT = VERDICTS = ("better on labelled queries", "better on pseudo-labels only",
                                          "kept the starting model")
#: the mean Kendall tau (over the pseudo-dev queries' candidates) from which the student counts as
#: contained in the teacher's dense half. Measured on the bundled scifact-mini (20 queries x BM25
#: top 20, max length 128): a BERMEncoder around all-MiniLM-L6-v2 vs all-MiniLM-L6-v2 1.00;
#: splade-tiny vs all-MiniLM-L6-v2 0.38, BM25 vs all-MiniLM-L6-v2 0.35, splade-tiny vs BM25 0.32
#: (unrelated retrievers agree on the obvious candidates). 0.8 lies far from both: a student that
#: close ranks the candidates as the labels' dense half does, whose grades then favour it.
CONTAINED_TAU = 0.8
#: Sentence Transformers' words for a fine-tuned model against its baseline (evaluated first)
WIN, MARGINAL, REGRESSION = WORDS = ("WIN", "MARGINAL", "REGRESSION")
#: the folder of the output beside ``model/`` that holds a trained checkpoint not shipped for want of evidence
UNVERIFIED = "unverified"
#: metrics.json's ``verdict_rule``: the bar a held-out gain must pass for a trained checkpoint to be output
#: (changed 2026-12-06: judged queries had the confidence interval's half-width)
VERDICT_RULE = ("held-out gain >= the 95% prediction interval's half-width for as many other queries, judged or "
                "pseudo-dev queries alike")


def verdict_word(verdict: str, unverified: bool = False) -> str:
    """The Sentence Transformers word of ``verdict``: better on labelled queries -> ``WIN``, better on
    pseudo-labels only -> ``MARGINAL``, kept the starting model -> ``REGRESSION`` (the training did not
    beat the baseline), or ``MARGINAL`` when a trained checkpoint is kept beside it as unverified
    (nothing independent of the student compared them)."""
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}: one of {VERDICTS}")
    if verdict == KEPT:
        return MARGINAL if unverified else REGRESSION
    return WIN if verdict == LABELLED else MARGINAL


def word_line(word: str) -> str:
    """The line that gives the verdict's Sentence Transformers word (said once the verdict is made, and
    in the command's summary: the same words)."""
    return f"verdict: {word} (Sentence Transformers' word, against the starting model evaluated first)"


#: how :func:`resolution` computes its interval, with and without ``spread_from``
PAIRED_T = "paired t, 95% confidence interval of the mean per-query difference"
PAIRED_T_POOLED = ("paired t, 95% confidence interval of the mean per-query difference of these queries, its spread "
                   "pooled with that of the queries that chose (each set about its own mean)")


def resolution(after: Mapping[str, float], before: Mapping[str, float],
               spread_from: tuple[Mapping[str, float], Mapping[str, float]] | None = None) -> dict:
    """The paired comparison of per-query scores ``after`` vs ``before`` (their shared queries):
    ``difference`` (mean), ``resolution`` (the half-width of its 95% confidence interval, paired
    t: the smallest mean difference these queries resolve, given their spread), ``sd`` (the per-query
    differences' standard deviation), ``p_value`` (two-sided paired t-test), ``queries`` and ``df``
    (the t's degrees of freedom). Fewer than two queries resolve nothing (``resolution`` None).

    ``spread_from``: the same two models' scores on the queries that chose the checkpoint. Their
    mean difference is biased by the choice (the winner's curse), so it is never used; their spread
    about that mean is not, and it joins the estimate of the per-query spread (pooled variance, ``df``
    = n1 + n2 - 2; ``spread_queries`` counts both sets). A held-out half of 11 queries whose
    differences are mostly zero estimates the spread too small; with the other 11 the estimate rests
    on 22 (docs/adapt.md, "Does the verdict hold?")."""
    from ..evaluation import paired_spread

    method = PAIRED_T if spread_from is None else PAIRED_T_POOLED
    qs = set(after) & set(before)
    if len(qs) < 2:
        mean = float(np.mean([after[q] - before[q] for q in qs])) if qs else 0.0
        return {"queries": len(qs), "difference": mean, "resolution": None, "sd": None, "p_value": None, "df": None,
                "spread_queries": len(qs), "method": method}
    from scipy.stats import t

    s = paired_spread(after, before, spread_from)
    half = float(t.ppf(0.975, s["df"]) * s["sd"] / math.sqrt(s["queries"]))
    return {"queries": s["queries"], "difference": s["difference"], "resolution": half, "sd": s["sd"],
            "p_value": s["p"], "df": s["df"], "spread_queries": s["spread_queries"], "method": method}


def prediction_half_width(comparison: Mapping, other_queries: int | None = None) -> float | None:
    """The half-width of the 95% prediction interval of the mean paired difference on ``other_queries``
    *other* queries drawn like the ``comparison``'s ``queries`` n (default: as many): t * sd *
    sqrt(1/n + 1/m), that is :func:`resolution`'s half-width times sqrt(1 + n/m). A confidence
    interval says where the population's mean difference lies; the difference a user will see on
    new queries also carries their own sampling, which this adds (as many new queries: sqrt(2)
    wider). None when the comparison resolves nothing."""
    half, n = comparison.get("resolution"), comparison.get("queries")
    if half is None or not n:
        return None
    m = other_queries or n
    return float(half * math.sqrt(1.0 + n / m))


def resolves_gain(comparison: Mapping | None) -> bool:
    """Whether a paired comparison (:func:`resolution`) shows a gain of at least the half-width of its
    95% prediction interval for as many other queries (:func:`prediction_half_width`, sqrt(2) the
    confidence half-width): the gain a user would see on as many new queries then leans its way too.
    The one bar for shipping a trained checkpoint, on judged queries and on pseudo-labels alike (judged
    queries had the confidence half-width until 2026-12-06: :data:`VERDICT_RULE`)."""
    if not comparison or comparison.get("resolution") is None or comparison["difference"] <= 0:
        return False
    bar = prediction_half_width(comparison)
    return bar is not None and comparison["difference"] >= bar


def _top(scores: dict, docs: list, n: int) -> set:
    """The ``n`` best of ``docs`` by ``scores`` (ties by id)."""
    return set(sorted(docs, key=lambda d: (-scores[d], d))[:n])


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
        overlaps.append(len(_top(a[q], docs, n) & _top(b[q], docs, n)) / n)
    return {"kendall_tau": float(np.mean(taus)) if taus else None,
            f"top{k}_overlap": float(np.mean(overlaps)) if overlaps else None, "queries": len(taus)}


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _p(x) -> str:
    return "n/a" if x is None else format(x, ".3g")


def _judged_part(judged: dict, kept_start: bool) -> str:
    other = "the best checkpoint" if kept_start else "the output"
    chose = f", not the {judged['select_count']} that chose" if judged.get("select_count") else ""
    return (f"{judged['queries']} held-out judged dev queries{chose}: nDCG@10 {_f(judged['start'])} (start) -> "
            f"{_f(judged['selected'])} ({other}), difference {judged['difference']:+.4f}, 95% interval "
            f"±{_f(judged['resolution'])} (p = {_p(judged['p_value'])}); on as many other queries like them, "
            f"expect {judged['difference']:+.4f} ±{_f(prediction_half_width(judged))}")


def _pseudo_part(pseudo: dict) -> str:
    part = f"pseudo-dev nDCG@10 {_f(pseudo.get('start'))} (start) -> {_f(pseudo.get('selected'))}"
    if pseudo.get("difference") is None:
        return part
    if pseudo.get("select_count") is not None:  # stated on the held-out half (stages._pseudo_gain)
        part += (f"; on the {pseudo.get('queries')} held-out pseudo-dev queries (the other {pseudo['select_count']} "
                 f"chose the checkpoint): {_f(pseudo.get('held_out_start'))} -> {_f(pseudo.get('held_out_selected'))}")
        part += (f", difference {pseudo['difference']:+.4f}, 95% interval ±{_f(pseudo.get('resolution'))}; on as "
                 f"many other queries graded by the teacher (not by relevance), expect {pseudo['difference']:+.4f} "
                 f"±{_f(prediction_half_width(pseudo))}")
        return part
    return part + f", difference {pseudo['difference']:+.4f}, resolution ±{_f(pseudo.get('resolution'))}"


def decide(kept_start: bool, judged: dict | None, contained: bool, pseudo: dict,
           fell: dict | None = None, unverified: dict | None = None) -> tuple[str, str]:
    """``(verdict, sentence)``: one of :data:`VERDICTS` and the numbers behind it. ``judged``: the
    :func:`resolution` of the output against the starting model on the held-out (verdict) half of
    the judged dev queries, with ``start`` and ``selected`` (their nDCG@10; with ``kept_start``,
    ``selected`` is the best checkpoint, which lost) and ``select_count`` (the queries that chose), or None; ``pseudo``:
    ``start`` and ``selected`` pseudo-dev nDCG@10 (with no judged query and a teacher that does not
    contain the start, also the :func:`resolution` of the best checkpoint against it there);
    ``fell``: generated queries, a teacher containing the start, and the best checkpoint below it on
    the pseudo-dev queries by more than they resolve; ``unverified``: ``{"step", "why"}`` when the
    start is output for want of evidence independent of the student and the best trained
    checkpoint is kept beside it (:data:`UNVERIFIED`). With ``judged``, a trained checkpoint is output
    only on a held-out gain past its prediction interval (:func:`resolves_gain`; a ValueError
    otherwise)."""
    pseudo_part = _pseudo_part(pseudo)
    head = (f"{KEPT}; the trained checkpoint (step {unverified['step']}, in {UNVERIFIED}/) is unverified and may be "
            "worse") if unverified is not None else ""
    if judged is not None:
        judged_part = _judged_part(judged, kept_start)
        res = judged["resolution"]
        if not kept_start:
            if not resolves_gain(judged):
                raise ValueError("a trained checkpoint is output on judged queries only when their held-out half "
                                 "shows its gain past the 95% prediction interval")
            return LABELLED, f"{LABELLED}: {judged_part}"
        if res is not None and judged["difference"] < -res:
            return KEPT, f"{KEPT}: the checkpoint chosen on the other judged queries fell below it on the {judged_part}"
        if unverified is not None:
            lean = ("lean its way by less than their 95% prediction interval for as many other queries"
                    if judged["difference"] > 0 else "do not lean its way, and resolve no loss either")
            return KEPT, f"{head}: the held-out judged dev queries {lean} ({judged_part})"
        return KEPT, f"{KEPT}: no checkpoint beat it on the judged dev queries that chose ({judged_part})"
    if unverified is not None:
        if fell is not None:
            return KEPT, (f"{head}: its training queries were generated and the teacher contains the starting model, "
                          f"so the pseudo-labels could show a trained checkpoint worse, never better; the best one "
                          f"(step {fell['compared_step']}) fell below it on the {fell['queries']} pseudo-dev queries: "
                          f"nDCG@10 {_f(fell['start'])} (start) -> {_f(fell['selected'])}, difference "
                          f"{fell['difference']:+.4f}, more than they resolve (±{_f(fell['resolution'])}, p = "
                          f"{_p(fell['p_value'])}); judge a few queries (qrels/dev.tsv) to compare on real ones")
        return KEPT, f"{head}: {unverified['why']} ({pseudo_part}); judge a few queries (qrels/dev.tsv) to compare"
    if kept_start:
        return KEPT, f"{KEPT}: no checkpoint beat it on the pseudo-dev queries that choose ({pseudo_part})"
    if contained:  # not reached by the pipeline: a contained start is kept, the checkpoint unverified
        return PSEUDO_ONLY, (f"{PSEUDO_ONLY}: trained on them, and chosen among the trained checkpoints only: the "
                             f"teacher contains the starting model, whose pseudo-dev score favours it and compares "
                             f"nothing ({pseudo_part}); no judged query compared the output with the starting model "
                             "(qrels/dev.tsv)")
    return PSEUDO_ONLY, (f"{PSEUDO_ONLY}: the teacher does not contain the starting model, and its pseudo-labels "
                         f"show the output better ({pseudo_part}); no judged dev query (qrels/dev.tsv)")
