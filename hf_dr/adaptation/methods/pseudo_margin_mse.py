"""``pseudo-margin-mse``: Margin-MSE on the teacher's scores of the pseudo-label triplets (as GPL does)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .base import TrainingSetup, TripletMethod, option
from .registry import register_method


def parse_margin_scale(text: str):
    """``auto`` or a positive finite factor (``ValueError`` otherwise)."""
    if text == "auto":
        return text
    try:
        v = float(text)
    except (TypeError, ValueError):
        v = float("nan")
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{text!r}: 'auto' or a positive number")
    return v


@dataclass(frozen=True)
class MarginMSEOptions:
    margin_scale: float | str | None = option(
        None, "pseudo-margin-mse: factor on the student's scores before their margins are matched to the teacher's; "
        "auto = mean teacher margin / mean student margin on 256 training triplets (default: 20 for cosine "
        "students, 1 for dot-product ones)", parse=parse_margin_scale, metavar="auto|FACTOR")

    def __post_init__(self):
        if self.margin_scale is not None:
            try:
                parse_margin_scale(self.margin_scale if self.margin_scale == "auto" else str(self.margin_scale))
            except ValueError as e:
                raise ValueError(f"--margin-scale {e}") from None


@register_method
class PseudoMarginMSE(TripletMethod):
    name = "pseudo-margin-mse"
    description = "Margin-MSE on the teacher's scores of the DoDress pseudo-label triplets (as GPL does)"
    defaults = {"max_steps": 500, "learning_rate": 2e-5}
    # generated queries: DoDress' learning rate (papers/002). At 2e-5 every corpus-only run lost (SciFact
    # 0.645 -> 0.51-0.57 with each weight-free generator, ArguAna 0.502 -> 0.39); at 2e-6 ArguAna gained
    # (0.5017 -> 0.5106, p 0.04) and SciFact held (0.6451 -> 0.6517, an H200 run): docs/adapt.md
    generated_defaults = {"learning_rate": 2e-6}
    Options = MarginMSEOptions
    budget_fields = ("margin_scale",)

    def train_key(self, cfg) -> dict:
        return {"margin_scale": cfg.options.margin_scale}

    def objective(self, cfg, model, inputs) -> TrainingSetup:
        from ...objectives import MarginMSEObjective

        scale = self.margin_scale(cfg, model, inputs)
        return TrainingSetup(MarginMSEObjective(scale=scale), teacher_scores=True, record={"margin_scale": scale})

    @staticmethod
    def margin_scale(cfg, model, inputs) -> float:
        """Margin-MSE's factor on the student's scores: ``--margin-scale`` as given, ``auto``
        (:func:`~hf_dr.labeling.finetune.calibrate_margin_scale`: the student's margins put on the
        teacher's scale), or by default :func:`~hf_dr.labeling.finetune.default_scale`."""
        from ...labeling.finetune import calibrate_margin_scale, default_scale

        given = cfg.options.margin_scale
        if given is None:
            return default_scale(model)
        if given == "auto":
            scale = calibrate_margin_scale(model, inputs.triplets, seed=cfg.seed, batch_size=cfg.batch_size,
                                           max_length=inputs.max_length)
            inputs.say(f"train: margin scale {scale:.3g} (mean teacher margin / mean student margin on 256 "
                       "training triplets)")
            return scale
        return float(given)

    def budget(self, cfg, record: dict) -> dict:
        return {"margin_scale": record.get("margin_scale")}

    def card_rows(self, metrics: dict) -> list[str]:
        scale = metrics["budget"].get("margin_scale")
        if scale is None:
            return []
        return [f"| Margin-MSE scale | the student's scores x {scale:.3g} before their margins are matched to the "
                "teacher's |"]
