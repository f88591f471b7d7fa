"""``dodress``: RankNet on the DoDress pseudo-label triplets (papers/002, papers/004)."""

from __future__ import annotations

from .base import TrainingSetup, TripletMethod
from .registry import register_method


@register_method
class DoDress(TripletMethod):
    name = "dodress"
    description = "RankNet on DoDress pseudo-label triplets (papers/002, papers/004)"
    defaults = {"max_steps": 300, "learning_rate": 2e-5}

    def objective(self, cfg, model, inputs) -> TrainingSetup:
        from ...objectives import RankNetObjective

        return TrainingSetup(RankNetObjective())  # scale: the model's own similarity
