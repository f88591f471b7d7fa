"""SPLADE training objective: Margin-MSE (Eq. 15) or in-batch contrastive, plus the FLOPS
regulariser on queries and documents (Eq. 14, 16-17) with a quadratic warm-up of the weights."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import TrainerCallback

from ..encoding import embed
from ..losses import contrastive_loss, flops_loss, group_scores, margin_mse_loss
from .contrastive import positives_in_batch
from .scale import resolve_scale

__all__ = ["SpladeObjective", "FlopsWarmupCallback"]


class FlopsWarmupCallback(TrainerCallback):
    """Keeps the objective's step in sync with the Trainer (gradient accumulation included)."""

    def __init__(self, objective: SpladeObjective):
        self.objective = objective

    def on_step_begin(self, args, state, control, **kwargs):
        self.objective.step = state.global_step


@dataclass
class SpladeObjective:
    """``L = L_rank + w(t) * (lambda_q * FLOPS(Q) + lambda_d * FLOPS(D))``.

    ``L_rank`` is Margin-MSE against ``inputs["teacher_scores"]`` (the paper's choice) when
    the batch has teacher scores, else in-batch + hard-negative contrastive loss; ``scale``
    multiplies the student's scores in both (the inverse temperature of the contrastive loss; the
    factor that puts the margins on the teacher's scale, see
    :func:`hf_dr.labeling.finetune.calibrate_margin_scale`).
    ``w(t) = min(1, (t / warmup_steps)^2)``: the quadratic warm-up of SPLADE's training,
    which keeps the regulariser from collapsing the vectors to zero before they learn to rank.
    Logs the mean number of active (non-zero) dimensions of queries and documents.
    """

    lambda_q: float = 0.08
    lambda_d: float = 0.1
    warmup_steps: int = 1000
    scale: float | None = None  # None: the model's own similarity (SPLADE: dot, 1)
    step: int = field(default=0, repr=False)

    def trainer_callbacks(self):
        return [FlopsWarmupCallback(self)]

    def weight(self) -> float:
        if self.warmup_steps <= 0:
            return 1.0
        return min(1.0, (self.step / self.warmup_steps) ** 2)

    def __call__(self, model, inputs):
        q = embed(model, inputs["query_input_ids"], inputs["query_attention_mask"], is_query=True)
        d = embed(model, inputs["doc_input_ids"], inputs["doc_attention_mask"], is_query=False)
        B = q.shape[0]
        group = d.shape[0] // B
        if "teacher_scores" in inputs:
            s = group_scores(q, d, resolve_scale(self.scale, model))
            t = inputs["teacher_scores"].to(s.dtype)
            m = group - 1
            rank = margin_mse_loss(s[:, :1].expand(-1, m).reshape(-1), s[:, 1:].reshape(-1),
                                   t[:, :1].expand(-1, m).reshape(-1), t[:, 1:].reshape(-1))
        else:
            targets = torch.arange(B, device=q.device) * group
            rank = contrastive_loss(q, d, targets, resolve_scale(self.scale, model),
                                    exclude=positives_in_batch(inputs, B, group))
        w = self.weight()
        fq, fd = flops_loss(q), flops_loss(d)
        loss = rank + w * (self.lambda_q * fq + self.lambda_d * fd)
        logs = {"rank_loss": rank.detach(), "flops_q": fq.detach(), "flops_d": fd.detach(),
                "flops_weight": torch.tensor(w),
                "active_dims_q": (q.detach() > 0).sum(-1).float().mean(),
                "active_dims_d": (d.detach() > 0).sum(-1).float().mean()}
        return loss, logs
