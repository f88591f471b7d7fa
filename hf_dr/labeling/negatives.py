"""Negative samplers of the DoDress pipeline (papers/002 §4, papers/004): global random,
BM25 hard negatives, and SimANS (Zhou et al. 2022; Eq. 1 of papers/002).

Every sampler is seeded (a ``numpy.random.Generator``) and never returns a pseudo-positive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["simans_probabilities", "sample_negatives", "SAMPLERS"]

SAMPLERS = ("random", "bm25", "simans")


def simans_probabilities(neg_scores, pos_score, a: float = 0.5, b: float = 0.0):
    """Eq. 1 of papers/002: ``p_i ∝ exp(-a (s(q, d_i) - s(q, d~+) - b)^2)`` over the
    candidate negatives, normalised to sum to 1.

    Computed in log space (``log p = l - logsumexp(l)``), so scores far from the positive give
    tiny but valid probabilities instead of an all-zero ``exp`` underflow and a 0/0.
    Takes and returns a 1-D numpy array or torch tensor (same type as ``neg_scores``).
    """
    try:
        import torch

        if isinstance(neg_scores, torch.Tensor):
            logits = -a * (neg_scores.double() - float(pos_score) - b) ** 2
            return torch.softmax(logits, dim=0).to(neg_scores.dtype if neg_scores.is_floating_point() else torch.float64)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    s = np.asarray(neg_scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError("neg_scores must be a non-empty 1-D array")
    logits = -a * (s - float(pos_score) - b) ** 2
    logits -= logits.max()
    p = np.exp(logits - np.log(np.exp(logits).sum()))
    return p


def sample_negatives(method: str, m: int, *, positives: Sequence[str], rng: np.random.Generator,
                     all_doc_ids: Sequence[str] | None = None, ranked: Mapping[str, float] | None = None,
                     pos_score: float | None = None, top_k: int = 500, a: float = 0.5, b: float = 0.0) -> list[str]:
    """``m`` negatives for one (query, positive).

    * ``random``: uniform over the corpus (``all_doc_ids``);
    * ``bm25``: uniform over the BM25 top list ``ranked`` (``{doc_id: score}``);
    * ``simans``: from the top ``top_k`` of ``ranked`` (the current dense retriever's run),
      with probability Eq. 1 around ``pos_score`` (the positive's score by the same retriever).

    Pseudo-positives are never returned. When fewer than ``m`` candidates are left, all of
    them are returned (documented; the pipeline counts such cases).
    """
    excluded = set(positives)
    if method == "random":
        if not all_doc_ids:
            raise ValueError("random negatives need all_doc_ids")
        pool = [d for d in all_doc_ids if d not in excluded]
        k = min(m, len(pool))
        return [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]
    if method not in SAMPLERS:
        raise ValueError(f"unknown negative sampler {method!r}; choose one of {', '.join(SAMPLERS)}")
    if ranked is None:
        raise ValueError(f"{method} negatives need a ranked candidate list")
    cand = [(d, s) for d, s in sorted(ranked.items(), key=lambda x: -x[1]) if d not in excluded]
    if method == "simans":
        cand = cand[:top_k]
    if not cand:
        return []
    k = min(m, len(cand))
    if method == "bm25":
        idx = rng.choice(len(cand), size=k, replace=False)
    else:
        if pos_score is None:
            raise ValueError("simans negatives need the positive's score")
        p = simans_probabilities(np.array([s for _, s in cand]), pos_score, a=a, b=b)
        nz = int((p > 0).sum())
        idx = rng.choice(len(cand), size=min(k, nz), replace=False, p=p)
    return [cand[i][0] for i in idx]
