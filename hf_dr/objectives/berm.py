"""BERM objective (Xu et al. 2023, papers/000, §4.2): ``L = L_c + α·L_extract + β·L_balance``.

``L_c`` is the retrieval loss of the training style BERM is combined with (Table 1): in-batch
(vanilla, DPR) or in-batch + hard negatives (ANCE-style) contrastive loss, or knowledge
distillation from teacher scores (KL over each query's candidates). The unit terms act on the
positive passage of each row: its token states give the unit embeddings (Eq. 3), its text
representation ``t_p`` the balance term (Eq. 4), and ``m = GELU(t_q ⊙ t_p)`` the extract term
(Eq. 5). With ``alpha = beta = 0`` the unit terms are not even computed and the objective is
exactly the plain contrastive / distillation loss.

Batches come from :class:`hf_dr.data.UnitCollator`; the model must accept
``output_token_states=True`` (:class:`hf_dr.models.berm.BERMEncoder`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..losses import group_scores, kl_distillation_loss, unit_balance_loss, unit_extract_loss
from ..models.berm.modeling_berm import unit_mean_pool
from .contrastive import ContrastiveObjective
from .scale import resolve_scale

__all__ = ["BERMObjective", "ALPHA", "BETA"]

ALPHA = 0.1  # weight of L_extract (§5.1)
BETA = 1.0  # weight of L_balance (§5.1)


@dataclass
class BERMObjective:
    """``L = L_c + alpha * L_extract + beta * L_balance``.

    Args:
        alpha, beta: weights of Eq. 5 and Eq. 4 (paper: 0.1 and 1.0; 0 turns a term off).
        base: ``"contrastive"`` (in-batch + any hard negatives of the batch, gathered across
            processes) or ``"distillation"`` (KL(teacher || student) over each query's
            ``[pos, negs]``, needs ``teacher_scores``).
        scale: inverse temperature of the contrastive loss (``None``: the model's own similarity,
            20 for cos as sentence-transformers, 1 for dot).
        temperature: temperature of the distillation loss.
    """

    alpha: float = ALPHA
    beta: float = BETA
    base: str = "contrastive"
    scale: float | None = None
    temperature: float = 1.0
    gather_across_processes: bool = True

    def __post_init__(self):
        if self.base not in ("contrastive", "distillation"):
            raise ValueError(f"base must be 'contrastive' or 'distillation', got {self.base!r}")
        if self.alpha < 0 or self.beta < 0:
            raise ValueError("alpha and beta must be >= 0")
        self._contrastive = ContrastiveObjective(scale=self.scale, gather_across_processes=self.gather_across_processes)

    @property
    def uses_units(self) -> bool:
        return self.alpha > 0 or self.beta > 0

    def __call__(self, model, inputs):
        q = model(input_ids=inputs["query_input_ids"], attention_mask=inputs["query_attention_mask"], is_query=True)
        q = q if isinstance(q, torch.Tensor) else q.embeddings
        out = model(input_ids=inputs["doc_input_ids"], attention_mask=inputs["doc_attention_mask"], is_query=False,
                    output_token_states=self.uses_units)
        d = out if isinstance(out, torch.Tensor) else out.embeddings
        B = q.shape[0]
        group = d.shape[0] // B
        if self.base == "contrastive":
            loss, logs = self._contrastive.loss_from_embeddings(q, d, scale=resolve_scale(self.scale, model),
                                                                inputs=inputs)
        else:
            if "teacher_scores" not in inputs:
                raise KeyError("base='distillation' needs teacher_scores in the batch (a 'scores' column)")
            s = group_scores(q, d)
            loss = kl_distillation_loss(s, inputs["teacher_scores"].to(s.dtype), self.temperature)
            logs = {"distillation_loss": loss.detach()}
        if not self.uses_units:
            return loss, logs
        if "unit_spans" not in inputs:
            raise KeyError("BERM's unit losses need unit_spans / unit_mask / unit_labels: use hf_dr.data.UnitCollator")
        t_p = d[::group]  # each row's positive comes first in its group
        hidden = out.last_hidden_state[::group]
        units = unit_mean_pool(hidden, inputs["unit_spans"], inputs["unit_mask"])
        total = loss
        if self.beta > 0:
            bal = unit_balance_loss(t_p, units, inputs["unit_mask"])
            total = total + self.beta * bal
            logs["balance_loss"] = bal.detach()
        if self.alpha > 0:
            ext = unit_extract_loss(q, t_p, units, inputs["unit_mask"], inputs["unit_labels"])
            total = total + self.alpha * ext
            logs["extract_loss"] = ext.detach()
        return total, logs
