"""Loss functions of hf-dr: pure tensor functions, one per loss, each citing its paper.

Shapes: ``B`` queries, ``N`` documents (``N = B * (1 + m)`` with ``m`` hard negatives per
query, laid out ``[pos_0, neg_0_1..neg_0_m, pos_1, ...]``), ``d`` the embedding size.
The training objectives in :mod:`hf_dr.objectives` turn a batch into these tensors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["contrastive_loss", "margin_mse_loss", "kl_distillation_loss", "flops_loss", "ranknet_loss"]


def contrastive_loss(q: torch.Tensor, d: torch.Tensor, targets: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """InfoNCE over in-batch and hard negatives (DPR, Karpukhin et al. 2020, Eq. 2).

    ``L = -log softmax(scale * q_i . D^T)[targets_i]``, mean over the batch.

    Args:
        q: ``[B, d]`` query embeddings.
        d: ``[N, d]`` document embeddings: every document of the batch (and of the other
            processes, when gathered) is a negative for every query except its target.
        targets: ``[B]`` index of each query's positive in ``d``.
        scale: inverse temperature (1 for dot-product models, ~20 for cosine models).
    """
    scores = scale * (q @ d.T)
    return F.cross_entropy(scores, targets)


def margin_mse_loss(pos_scores: torch.Tensor, neg_scores: torch.Tensor,
                    teacher_pos: torch.Tensor, teacher_neg: torch.Tensor) -> torch.Tensor:
    """Margin-MSE (Hofstätter et al. 2020, Eq. 1; Eq. 15 of the SPLADE-CAI paper).

    ``L = mean((s(q,d+) - s(q,d-) - (t(q,d+) - t(q,d-)))^2)``. All inputs are 1-D of equal length.
    """
    return F.mse_loss(pos_scores - neg_scores, teacher_pos - teacher_neg)


def kl_distillation_loss(student_scores: torch.Tensor, teacher_scores: torch.Tensor,
                         temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher || student) over each query's candidate list (RocketQAv2-style distillation).

    Both ``[B, C]``: scores of the same C candidates per query.
    """
    t = F.log_softmax(teacher_scores / temperature, dim=-1)
    s = F.log_softmax(student_scores / temperature, dim=-1)
    return F.kl_div(s, t, log_target=True, reduction="batchmean")


def flops_loss(reps: torch.Tensor) -> torch.Tensor:
    """FLOPS regulariser (Paria et al. 2020; Eq. 16-17 of the SPLADE-CAI paper).

    ``L = sum_j (mean_i |R_ij|)^2`` over a ``[B, |V|]`` batch of sparse representations: the
    squared mean activation of each vocabulary entry, which pushes rarely useful terms to 0.
    """
    return torch.sum(torch.mean(torch.abs(reps), dim=0) ** 2)


def ranknet_loss(pos_scores: torch.Tensor, neg_scores: torch.Tensor) -> torch.Tensor:
    """RankNet pairwise loss (Burges 2010; Eq. 4 of papers/004, the DoDress paper):

    ``L(q, d+, d-) = -log σ(S(q, d+) - S(q, d-))``, mean over the pairs. Computed as
    ``softplus(-(S+ - S-))``, the same value without overflow for large margins.
    Both inputs are 1-D of equal length (one entry per (q, d+, d-) triplet).
    """
    return F.softplus(neg_scores - pos_scores).mean()
