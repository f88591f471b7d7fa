"""The inverse temperature every objective uses by default.

A model's similarity (:func:`hf_dr.encoding.model_similarity`) comes from its own configuration:
sentence-transformers' ``Normalize`` module or ``similarity_fn_name`` (read into
:class:`~hf_dr.models.dense.DenseEncoder`'s ``normalize``), or the ``similarity`` field of a suite
config (BERM, DDR). Scores of a cosine model live in [-1, 1]:
a softmax / sigmoid over them at temperature 1 is nearly flat, so sentence-transformers multiplies
them by 20 (``MultipleNegativesRankingLoss(scale=20)``); dot-product models (the papers' DPR-style
encoders, SPLADE) are trained at scale 1. Every objective whose ``scale`` is left at ``None`` takes
:func:`default_scale` of the model it trains.
"""

from __future__ import annotations

from ..encoding import model_similarity

__all__ = ["COSINE_SCALE", "default_scale", "resolve_scale"]

#: sentence-transformers' inverse temperature for cosine similarity (MultipleNegativesRankingLoss)
COSINE_SCALE = 20.0


def default_scale(model) -> float:
    """20 for cosine models (as sentence-transformers), 1 for dot-product ones (the papers)."""
    return COSINE_SCALE if model_similarity(model) == "cos" else 1.0


def resolve_scale(scale: float | None, model) -> float:
    """``scale`` when given, else :func:`default_scale` of ``model``."""
    return float(scale) if scale is not None else default_scale(model)
