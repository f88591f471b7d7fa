"""Masked-language-model objective (continual pre-training of DAMs / SPLADE-CAI backbones)."""

from __future__ import annotations


class MLMObjective:
    """``loss = model(**inputs).loss`` for a ``*ForMaskedLM`` model and a batch of
    :class:`~hf_dr.adaptation.mlm.RandomWindowMLMCollator` (``input_ids``, ``attention_mask``,
    ``labels``), so continual MLM trains through :class:`~hf_dr.training.RetrievalTrainer` too."""

    def __call__(self, model, inputs):
        return model(**inputs).loss, {}
