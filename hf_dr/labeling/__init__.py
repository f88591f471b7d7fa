"""Target-domain training signal: pseudo-relevance labels (DoDress, papers/002 and 004):
rerankers, negative samplers, the labelling pipeline, conversational query rewriting."""

from .negatives import SAMPLERS, sample_negatives, simans_log_probabilities, simans_probabilities

__all__ = ["simans_probabilities", "simans_log_probabilities", "sample_negatives", "SAMPLERS",
           "PseudoLabelConfig", "build_pseudo_labels", "get_reranker"]


def __getattr__(name):  # the pipeline pulls in datasets / transformers: load it on first use
    if name in ("PseudoLabelConfig", "build_pseudo_labels", "PseudoLabels"):
        from . import pseudo_relevance

        return getattr(pseudo_relevance, name)
    if name == "get_reranker":
        from .teacher import get_reranker

        return get_reranker
    raise AttributeError(name)
