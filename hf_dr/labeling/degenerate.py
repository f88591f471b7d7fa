"""The degenerate rule of the labelling pipeline: which queries' labels are degenerate and why
(:data:`DEGENERATE_RULE`, the reasons as ``stats.json`` names them), the report of a run
(``stats["degenerate"]``) and its one-line summary (:func:`degenerate_summary`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["DEGENERATE_RULE", "DEGENERATE_RULE_VERSION", "KEEP_HINT", "candidate_reasons", "triplet_reasons",
           "degenerate_report", "degenerate_summary"]

#: what makes a query's labels degenerate; the reasons, as stats.json names them
DEGENERATE_RULE = {
    "no_bm25_hit": "BM25 finds no candidate (no query term in the corpus): nothing to label, always left out",
    "few_candidates": "fewer than k + m BM25 candidates: too few ranked documents for the k pseudo-positives and "
                      "m negatives (e.g. a one-word query that matches two documents)",
    "non_finite": "a teacher score (of a candidate or of a sampled negative) is NaN or infinite",
    "zero_variance": "the teacher scores all the query's candidates alike (or all the documents of its triplets): "
                     "the pseudo-positives are a tie broken by document id and the margins are 0",
    "margin_out_of_bound": "a triplet's |pos_score - neg_score| exceeds the teacher's margin_bound, the widest "
                           "margin its scale produces (fusion: 2 * sum|w| * sqrt(n - 1) over its reference set of "
                           "n documents; monoT5: 1; no bound for other teachers)",
}
#: bumped when the rule or the teacher's normalisation changes what the triplet stage writes
DEGENERATE_RULE_VERSION = 1
_REASON_TEXT = {"no_bm25_hit": "without any BM25 hit",
                "few_candidates": "with fewer than {need} BM25 candidates (k + m)",
                "non_finite": "with non-finite teacher scores", "zero_variance": "with zero-variance teacher scores",
                "margin_out_of_bound": "with a teacher margin beyond ±{bound}"}
KEEP_HINT = "hf-dr label --keep-degenerate (PseudoLabelConfig(keep_degenerate=True)) keeps them"


def candidate_reasons(n_candidates: int, scores: Mapping[str, float], need: int) -> list[str]:
    """The reasons known before sampling: fewer than ``need`` (k + m) BM25 candidates, and the
    teacher's ``scores`` of the candidates non-finite or all alike."""
    reasons = ["few_candidates"] if n_candidates < need else []
    v = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    if not np.all(np.isfinite(v)):
        reasons.append("non_finite")
    elif v.size >= 2 and v.max() == v.min():
        reasons.append("zero_variance")
    return reasons


def triplet_reasons(reasons: list[str], rows: Sequence[Mapping], bound: float | None) -> list[str]:
    """``reasons`` (:func:`candidate_reasons`) completed by what the query's triplet ``rows`` show:
    a non-finite margin, one score for every document, a margin beyond the teacher's ``bound``."""
    reasons = list(reasons)
    margins = np.array([r["pos_score"] - r["neg_score"] for r in rows], dtype=np.float64)
    if not np.all(np.isfinite(margins)) and "non_finite" not in reasons:
        reasons.append("non_finite")
    elif len(rows) and "zero_variance" not in reasons and "non_finite" not in reasons and len(
            {r["pos_score"] for r in rows} | {r["neg_score"] for r in rows}) == 1:
        reasons.append("zero_variance")  # e.g. one candidate, and negatives scored like it
    elif bound is not None and margins.size and np.all(np.isfinite(margins)) and np.abs(margins).max() > bound:
        reasons.append("margin_out_of_bound")
    return reasons


def degenerate_report(found: Mapping[str, list[str]], qids: Sequence[str], *, kept: bool, need: int,
                      bound: float | None) -> dict:
    """``stats["degenerate"]``: the reasons of each degenerate query (``found``) in query order,
    their counts by reason, and the rule."""
    found = {q: found[q] for q in qids if q in found}
    by_reason: dict[str, int] = {}
    for reasons in found.values():
        for r in reasons:
            by_reason[r] = by_reason.get(r, 0) + 1
    return {"kept": bool(kept), "min_candidates": need, "margin_bound": bound,
            "by_reason": dict(sorted(by_reason.items())), "ids": found,
            "rule": {r: DEGENERATE_RULE[r] for r in DEGENERATE_RULE}}


def degenerate_summary(stats: dict) -> str | None:
    """One line on the degenerate queries of a labelling run (``stats``: its stats), or None when
    there are none: ``dropped 32 of 2,590 queries with degenerate labels: 30 with fewer than 11
    BM25 candidates (k + m), 2 with ...; hf-dr label --keep-degenerate (...) keeps them``."""
    d = stats.get("degenerate") or {}
    ids = d.get("ids") or {}
    if not ids:
        return None
    bound = d.get("margin_bound")
    fmt = {"need": d.get("min_candidates"), "bound": f"{bound:.3g}" if bound is not None else "?"}
    parts = [f"{n:,} {_REASON_TEXT.get(r, r).format(**fmt)}" for r, n in d.get("by_reason", {}).items()
             if r != "no_bm25_hit"]
    keepable = sum(1 for v in ids.values() if "no_bm25_hit" not in v)
    no_hit = len(ids) - keepable
    total = f"{stats.get('queries', 0):,}"
    if d.get("kept"):
        line = f"kept {keepable:,} of {total} queries with degenerate labels (keep_degenerate): {', '.join(parts)}"
        return line + (f"; left out {no_hit:,} without any BM25 hit" if no_hit else "") if keepable else \
            f"left out {no_hit:,} of {total} queries without any BM25 hit (degenerate labels)"
    if no_hit:
        parts.append(f"{no_hit:,} {_REASON_TEXT['no_bm25_hit']}")
    return (f"dropped {len(ids):,} of {total} queries with degenerate labels: {', '.join(parts)} (ids in stats.json)"
            + (f"; {KEEP_HINT}" if keepable else ""))
