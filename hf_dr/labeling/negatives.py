"""Negative samplers of the DoDress pipeline (papers/002 §4.2, papers/004 §4): global random,
BM25 hard negatives, and SimANS (Zhou et al. 2022; Eq. 1 of papers/002).

Every sampler draws from a seeded ``numpy.random.Generator``, samples without replacement and
never returns a pseudo-positive of the query. Each is a small class with one method,
``sample(query_id, positive, positives, rng)``, built once per labelling run over what it draws
from (:func:`make_sampler`); :func:`sample_negatives` draws once for one query.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = ["simans_probabilities", "simans_log_probabilities", "sample_negatives", "SAMPLERS", "NegativeSampler",
           "RandomNegatives", "BM25Negatives", "SimANSNegatives", "make_sampler"]

SAMPLERS = ("random", "bm25", "simans")


def _check_sampler(method: str) -> None:
    if method not in SAMPLERS:
        raise ValueError(f"unknown negative sampler {method!r}; choose one of {', '.join(SAMPLERS)}")


def simans_log_probabilities(neg_scores, pos_score, a: float = 0.5, b: float = 0.0) -> np.ndarray:
    """``log p_i`` of Eq. 1 (papers/002), in float64: ``l_i - logsumexp(l)`` with
    ``l_i = -a (s(q, d_i) - s(q, d~+) - b)^2``."""
    s = np.asarray(neg_scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"neg_scores must be a non-empty 1-D array, got shape {s.shape}")
    if not np.all(np.isfinite(s)) or not np.isfinite(float(pos_score)):
        raise ValueError("SimANS scores must be finite")
    logits = -a * (s - float(pos_score) - b) ** 2
    top = logits.max()
    return logits - (top + np.log(np.exp(logits - top).sum()))


def simans_probabilities(neg_scores, pos_score, a: float = 0.5, b: float = 0.0):
    """Eq. 1 of papers/002: ``p_i ∝ exp(-a (s(q, d_i) - s(q, d~+) - b)^2)`` over the candidate
    negatives ``d_i``, normalised to sum to 1.

    Computed in log space (log-sum-exp shifted by the largest logit), so a list whose scores
    all lie far from the positive's gives a valid distribution peaked on the closest ones,
    where a naive ``exp(...) / sum(exp(...))`` underflows to ``0 / 0``.

    Args:
        neg_scores: 1-D numpy array or torch tensor ``s(q, d_i)``.
        pos_score: ``s(q, d~+)``, the score of the (pseudo-)positive by the same retriever.
        a: density of the distribution (0.5 in the paper); b: offset of its peak (0).

    Returns:
        the distribution, of the input's type (a torch tensor keeps dtype and device).
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(neg_scores, torch.Tensor):
        logp = simans_log_probabilities(neg_scores.detach().cpu().double().numpy(), float(pos_score), a, b)
        dtype = neg_scores.dtype if neg_scores.is_floating_point() else torch.float64
        return torch.from_numpy(np.exp(logp)).to(device=neg_scores.device, dtype=dtype)
    return np.exp(simans_log_probabilities(neg_scores, pos_score, a, b))


def _gumbel_top_m(logp: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` indices drawn without replacement with probabilities ``exp(logp)`` (the Gumbel-top-k
    trick): exact, in log space, and never short of draws when some probabilities round to 0."""
    keys = logp + rng.gumbel(size=logp.shape)
    return np.argsort(-keys, kind="stable")[:m]


class NegativeSampler:
    """``m`` negatives for one (query, pseudo-positive): :meth:`sample`."""

    name = ""

    def __init__(self, m: int):
        if m < 1:
            raise ValueError("m must be at least 1")
        self.m = m

    def sample(self, query_id: str, positive: str, positives: Sequence[str], rng: np.random.Generator) -> list[str]:
        """``m`` negatives (fewer when fewer candidates remain), none of the query's ``positives``."""
        raise NotImplementedError


class RandomNegatives(NegativeSampler):
    """Uniform over the whole corpus (``all_doc_ids``): global random negatives."""

    name = "random"

    def __init__(self, m: int, all_doc_ids: Sequence[str] | None):
        super().__init__(m)
        if not all_doc_ids:
            raise ValueError("random negatives need all_doc_ids (the corpus)")
        self.all_doc_ids = all_doc_ids

    def sample(self, query_id, positive, positives, rng) -> list[str]:
        excluded = set(positives)
        n = len(self.all_doc_ids)
        want = min(self.m, n - len(excluded))  # the positives are corpus documents
        # rejection sampling: O(m) per call instead of copying the corpus for every positive
        chosen: list[str] = []
        seen: set[int] = set()
        while len(chosen) < want:
            i = int(rng.integers(n))
            if i in seen:
                continue
            seen.add(i)
            if self.all_doc_ids[i] not in excluded:
                chosen.append(self.all_doc_ids[i])
        return chosen


def _candidates(ranked: Mapping[str, float], positives) -> list[tuple[str, float]]:
    """``ranked`` best first (ties by id), without the positives."""
    excluded = set(positives)
    return [(d, s) for d, s in sorted(ranked.items(), key=lambda x: (-x[1], x[0])) if d not in excluded]


class BM25Negatives(NegativeSampler):
    """Uniform over each query's BM25 top list (``runs[query_id]``: ``{doc_id: score}``)."""

    name = "bm25"

    def __init__(self, m: int, runs: Mapping[str, Mapping[str, float]]):
        super().__init__(m)
        self.runs = runs

    def sample(self, query_id, positive, positives, rng) -> list[str]:
        cand = _candidates(self.runs[query_id], positives)
        if not cand:
            return []
        idx = rng.choice(len(cand), size=min(self.m, len(cand)), replace=False)
        return [cand[i][0] for i in idx]


class SimANSNegatives(NegativeSampler):
    """From the top ``top_k`` of each query's dense run (``runs[query_id]``), with the
    probabilities of Eq. 1 around the positive's score by the same retriever
    (``pos_score(query_id, positive)``); scores are multiplied by ``scale`` first. Counts the
    positives outside the query's dense run (:attr:`positives_outside`)."""

    name = "simans"

    def __init__(self, m: int, runs: Mapping[str, Mapping[str, float]],
                 pos_score: Callable[[str, str], float], top_k: int = 500, a: float = 0.5, b: float = 0.0,
                 scale: float = 1.0):
        super().__init__(m)
        self.runs, self.pos_score, self.top_k, self.a, self.b, self.scale = runs, pos_score, top_k, a, b, scale
        self.positives_outside = 0

    def sample(self, query_id, positive, positives, rng) -> list[str]:
        run = self.runs[query_id]
        # s(q, d~+) by the same dense retriever (also for a positive outside its top-K, which papers/004 would drop)
        pos_score = self.scale * float(self.pos_score(query_id, positive))
        self.positives_outside += positive not in run
        ranked = run if self.scale == 1.0 else {d: self.scale * v for d, v in run.items()}
        cand = _candidates(ranked, positives)[: self.top_k]
        if not cand:
            return []
        logp = simans_log_probabilities(np.array([s for _, s in cand]), pos_score, a=self.a, b=self.b)
        idx = _gumbel_top_m(logp, min(self.m, len(cand)), rng)
        return [cand[i][0] for i in idx]


#: sampler name -> class
SAMPLER_CLASSES = {"random": RandomNegatives, "bm25": BM25Negatives, "simans": SimANSNegatives}


def make_sampler(method: str, m: int, **sources) -> NegativeSampler:
    """The sampler ``method`` over its ``sources`` (``all_doc_ids`` / ``runs`` / ``pos_score``,
    ``top_k``, ``a``, ``b``, ``scale``): the one dispatch on the sampler's name."""
    _check_sampler(method)
    return SAMPLER_CLASSES[method](m, **sources)


def sample_negatives(method: str, m: int, *, positives: Sequence[str], rng: np.random.Generator,
                     all_doc_ids: Sequence[str] | None = None, ranked: Mapping[str, float] | None = None,
                     pos_score: float | None = None, top_k: int = 500, a: float = 0.5, b: float = 0.0) -> list[str]:
    """``m`` negatives for one (query, pseudo-positive), without replacement.

    * ``random``: uniform over the whole corpus (``all_doc_ids``) — global random negatives;
    * ``bm25``: uniform over the BM25 top list ``ranked`` (``{doc_id: score}``);
    * ``simans``: from the top ``top_k`` of ``ranked`` (the current dense retriever's run), with
      the probabilities of Eq. 1 around ``pos_score`` (the positive's score by that retriever).

    The query's pseudo-positives (all ``positives``, not only the current one) are never
    returned. When fewer than ``m`` candidates remain, all of them are returned (the pipeline
    counts these cases and reports them on the dataset card).
    """
    _check_sampler(method)
    if m < 1:
        raise ValueError("m must be at least 1")
    if method == "random":
        return RandomNegatives(m, all_doc_ids).sample("", "", positives, rng)
    if ranked is None:
        raise ValueError(f"{method} negatives need a ranked candidate list")
    if method == "bm25":
        return BM25Negatives(m, {"": ranked}).sample("", "", positives, rng)
    if pos_score is None:
        raise ValueError("simans negatives need the positive's score by the same retriever")
    score = float(pos_score)
    return SimANSNegatives(m, {"": ranked}, lambda q, d: score, top_k=top_k, a=a, b=b).sample("", "", positives, rng)
