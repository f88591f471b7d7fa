"""Target-domain training signal: pseudo-relevance labels (DoDress), negative samplers,
rerankers, query rewriting."""

from .negatives import SAMPLERS, sample_negatives, simans_probabilities

__all__ = ["simans_probabilities", "sample_negatives", "SAMPLERS"]
