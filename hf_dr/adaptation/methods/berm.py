"""``berm``: BERM (papers/000), its balance + extract unit losses on the pseudo-label triplets,
sentence units annotated by BM25."""

from __future__ import annotations

from ..config import AdaptError
from ..student import own_max_length
from .base import TrainingSetup, TripletMethod
from .registry import register_method


@register_method
class BERM(TripletMethod):
    name = "berm"
    description = "BERM (balance + extract unit losses, papers/000) on the DoDress pseudo-label triplets"
    defaults = {"max_steps": 200, "learning_rate": 2e-5}

    def load_student(self, cfg):
        """The model as a ``BERMEncoder`` (a dense model's backbone, pooling and similarity kept)."""
        model = super().load_student(cfg)
        if type(model).__name__ == "BERMEncoder":
            return model
        from ...models.berm import BERMEncoder

        if getattr(model, "output_is_sparse", False):
            raise AdaptError(f"--method berm trains a dense encoder; {cfg.model} is a sparse model")
        pooling = getattr(model, "pooling", "cls")
        similarity = "cos" if getattr(model, "normalize", False) else "dot"
        berm = BERMEncoder.from_backbone(cfg.model, pooling=pooling, similarity=similarity,
                                         max_doc_length=own_max_length(model), max_query_length=own_max_length(model))
        # the starting model's prompts (a Sentence Transformers folder's): BERM trains, encodes and saves with them
        berm.query_prefix, berm.doc_prefix = getattr(model, "query_prefix", ""), getattr(model, "doc_prefix", "")
        from ...fingerprints import model_fingerprint

        # the dense model it is built on: a fusion teacher with it as its dense half contains the student
        berm.base_fingerprints = [model_fingerprint(model)]
        return berm

    def objective(self, cfg, model, inputs) -> TrainingSetup:
        from ...data import UnitCollator
        from ...labeling.units import annotate_units
        from ...objectives import BERMObjective

        parts, _ = inputs.cache.datasets("berm_units", {"train": inputs.triplets_key},
                                         lambda: ({"train": annotate_units(inputs.triplets, show_progress_bar=False)},
                                                  {}))
        n = inputs.max_length
        return TrainingSetup(BERMObjective(), triplets=parts["train"],  # scale: the model's own similarity
                             collator=UnitCollator.for_model(model, query_max_length=n, doc_max_length=n,
                                                             neg_column="neg", score_column=None))
