"""Loss functions of hf-dr: pure tensor functions, one per loss, each citing its paper.

Shapes: ``B`` queries, ``N`` documents (``N = B * (1 + m)`` with ``m`` hard negatives per
query, laid out ``[pos_0, neg_0_1..neg_0_m, pos_1, ...]``), ``d`` the embedding size.
The training objectives in :mod:`hf_dr.objectives` turn a batch into these tensors.

Mixed precision: under autocast (``--dtype bf16`` / ``fp16``) the embeddings arrive in 16 bits; every
loss computes its scores and reductions in float32 with autocast off (:func:`full_precision`), so a
dot product of SPLADE vectors times an inverse temperature cannot overflow fp16 (max 65504), a
softmax / log-sum-exp is not taken in half precision, and the squares of the FLOPS regulariser do
not underflow. The cost is a few ``[B, N]`` / ``[B, |V|]`` float32 tensors.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from .models.berm.modeling_berm import matching_representation

__all__ = ["full_precision", "group_scores", "contrastive_loss", "in_batch_positives", "margin_mse_loss", "kl_distillation_loss",
           "flops_loss", "ranknet_loss", "unit_balance_loss", "unit_extract_loss"]


def full_precision(*tensors: torch.Tensor):
    """A context with autocast off on the tensors' device, and the tensors as float32 (a tuple)."""
    dev = next((t.device.type for t in tensors if isinstance(t, torch.Tensor)), "cpu")
    return _FullPrecision(dev, tensors)


class _FullPrecision(contextlib.AbstractContextManager):
    def __init__(self, device_type: str, tensors):
        self._ctx = torch.autocast(device_type=device_type, enabled=False)
        self.tensors = tensors

    def __enter__(self):
        self._ctx.__enter__()
        return tuple(t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in self.tensors)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


def group_scores(q: torch.Tensor, d: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """``scale * <q_b, d_bg>``, float32 ``[B, group]``: each query against its own group of ``d``
    (``[B * group, dim]``, laid out query by query), as Margin-MSE, RankNet, SPLADE and BERM's
    distillation score their candidates."""
    with full_precision(q, d) as (q, d):
        B = q.shape[0]
        return scale * torch.einsum("bd,bgd->bg", q, d.view(B, -1, d.shape[-1]))


def contrastive_loss(q: torch.Tensor, d: torch.Tensor, targets: torch.Tensor, scale: float = 1.0,
                     exclude: torch.Tensor | None = None) -> torch.Tensor:
    """InfoNCE over in-batch and hard negatives (DPR, Karpukhin et al. 2020, Eq. 2).

    ``L = -log softmax(scale * q_i . D^T)[targets_i]``, mean over the batch.

    Args:
        q: ``[B, d]`` query embeddings.
        d: ``[N, d]`` document embeddings: every document of the batch (and of the other
            processes, when gathered) is a negative for every query except its target.
        targets: ``[B]`` index of each query's positive in ``d``.
        scale: inverse temperature (1 for dot-product models, ~20 for cosine models).
        exclude: ``[B, N]`` bool, documents left out of a query's softmax (its targets never are):
            the query's own positives elsewhere in the batch (:func:`in_batch_positives`).
    """
    with full_precision(q, d) as (q, d):
        logits = scale * (q @ d.T)
        if exclude is not None:
            exclude = exclude.to(logits.device, copy=True)
            exclude[torch.arange(len(targets), device=exclude.device), targets.to(exclude.device)] = False
            logits = logits.masked_fill(exclude, float("-inf"))
        return F.cross_entropy(logits, targets)


def in_batch_positives(doc_keys: torch.Tensor, query_keys: torch.Tensor, group: int, rows: slice) -> torch.Tensor:
    """Which documents of a batch are positives of each query of ``rows``: ``[len(rows), N]`` bool.

    ``doc_keys [N]`` and ``query_keys [R]`` say which texts are the same (the collator's
    ``doc_keys`` / ``query_keys``, gathered like the embeddings); the batch holds ``R`` rows of
    ``group`` documents, the row's positive first. A query's positives are the positives of every
    row with the same query: with ``k x m`` rows per query a batch holds the same query more than
    once, with its same or its other positives, and two queries can share a relevant document. As
    in-batch negatives they would push down what the row's target pushes up, so
    :func:`contrastive_loss` leaves them out (``exclude``)."""
    pos_keys = doc_keys[::group]  # [R]: each row's positive
    same_query = (query_keys[rows].unsqueeze(1) == query_keys.unsqueeze(0)).float()  # [B, R]
    is_pos_of_row = (pos_keys.unsqueeze(1) == doc_keys.unsqueeze(0)).float()  # [R, N]
    own = doc_keys.unsqueeze(0) == pos_keys[rows].unsqueeze(1)  # [B, N]: copies of the row's own positive
    return (same_query @ is_pos_of_row > 0) | own


def margin_mse_loss(pos_scores: torch.Tensor, neg_scores: torch.Tensor,
                    teacher_pos: torch.Tensor, teacher_neg: torch.Tensor) -> torch.Tensor:
    """Margin-MSE (Hofstätter et al. 2020, Eq. 1; Eq. 15 of the SPLADE-CAI paper).

    ``L = mean((s(q,d+) - s(q,d-) - (t(q,d+) - t(q,d-)))^2)``. All inputs are 1-D of equal length.
    """
    with full_precision(pos_scores, neg_scores, teacher_pos, teacher_neg) as (p, n, tp, tn):
        return F.mse_loss(p - n, tp - tn)


def kl_distillation_loss(student_scores: torch.Tensor, teacher_scores: torch.Tensor,
                         temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher || student) over each query's candidate list (RocketQAv2-style distillation).

    Both ``[B, C]``: scores of the same C candidates per query.
    """
    with full_precision(student_scores, teacher_scores) as (student_scores, teacher_scores):
        t = F.log_softmax(teacher_scores / temperature, dim=-1)
        s = F.log_softmax(student_scores / temperature, dim=-1)
        return F.kl_div(s, t, log_target=True, reduction="batchmean")


def flops_loss(reps: torch.Tensor) -> torch.Tensor:
    """FLOPS regulariser (Paria et al. 2020; Eq. 16-17 of the SPLADE-CAI paper).

    ``L = sum_j (mean_i |R_ij|)^2`` over a ``[B, |V|]`` batch of sparse representations: the
    squared mean activation of each vocabulary entry, which pushes rarely useful terms to 0.
    """
    with full_precision(reps) as (reps,):
        return torch.sum(torch.mean(torch.abs(reps), dim=0) ** 2)


# -- BERM (Xu et al. 2023, papers/000): unit-level constraints on the representations ------------

_NEG = torch.finfo(torch.float32).min


def _unit_rows(unit_mask: torch.Tensor) -> torch.Tensor:
    """Rows with at least one unit: the only rows where a distribution over units exists."""
    return unit_mask.bool().any(dim=1)


def _mean_or_zero(per_row: torch.Tensor, rows: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    # no usable row: 0, still attached to the graph so backward() and DDP see the parameters
    if not bool(rows.any()):
        return anchor.sum() * 0.0
    return per_row[rows].mean()


def unit_balance_loss(t_p: torch.Tensor, units: torch.Tensor, unit_mask: torch.Tensor) -> torch.Tensor:
    """Semantic unit balance, BERM Eq. 4: ``KL(b || softmax_i(t_p . e_i))`` with ``b`` the
    uniform distribution over the passage's ``n`` units, mean over the batch.

    Args:
        t_p: ``[B, d]`` passage representations.
        units: ``[B, U, d]`` unit embeddings (Eq. 3, :func:`hf_dr.models.berm.modeling_berm.unit_mean_pool`).
        unit_mask: ``[B, U]`` bool, valid units.

    Defined behaviour: a passage with one unit has loss exactly 0 (a one-point distribution
    is uniform); a passage with no unit (empty, or every unit truncated away) has no
    distribution and is left out of the mean; a batch without units gives 0.
    """
    mask = unit_mask.bool()
    with full_precision(t_p, units) as (t_p, units):
        # a finite fill keeps rows without units finite (an all -inf row would give NaN gradients)
        sim = torch.einsum("bd,bud->bu", t_p, units).masked_fill(~mask, _NEG)
        n = mask.sum(1).clamp(min=1).to(sim.dtype)
        log_s = torch.log_softmax(sim, dim=1).masked_fill(~mask, 0.0)
        # KL(b || s) = sum_i b_i (log b_i - log s_i) = -log n - (1/n) sum_i log s_i
        per_row = -torch.log(n) - log_s.sum(1) / n
        return _mean_or_zero(per_row, _unit_rows(mask), t_p)


def unit_extract_loss(t_q: torch.Tensor, t_p: torch.Tensor, units: torch.Tensor, unit_mask: torch.Tensor,
                      labels: torch.Tensor) -> torch.Tensor:
    """Essential matching unit extractability, BERM Eq. 5: cross-entropy of the unit scores
    ``m . e_i`` (``m = GELU(t_q ⊙ t_p)``) against the annotated essential unit, mean over the batch.

    One ``log_softmax`` over the passage's valid units turns Eq. 5's ``log dot(m, e_i)`` into a
    proper log-probability (the authors' code applies softmax twice; we do not).

    Args:
        t_q, t_p: ``[B, d]`` query / positive-passage representations.
        units: ``[B, U, d]`` unit embeddings; unit_mask: ``[B, U]`` bool.
        labels: ``[B]`` index of the essential unit; ``-100`` (or a masked unit) = no label
            (no term overlap, or the unit was truncated away): the row is left out of the mean.
    A one-unit passage with label 0 has loss exactly 0; a batch without a usable row gives 0.
    """
    mask = unit_mask.bool()
    with full_precision(t_q, t_p, units) as (t_q, t_p, units):
        return _extract(t_q, t_p, units, mask, labels)


def _extract(t_q, t_p, units, mask, labels):
    m = matching_representation(t_q, t_p)
    scores = torch.einsum("bd,bud->bu", m, units).masked_fill(~mask, _NEG)
    labels = labels.to(scores.device).long()
    U = mask.shape[1]
    safe = labels.clamp(min=0, max=max(U - 1, 0))
    ok = (labels >= 0) & (labels < U) & mask.gather(1, safe.unsqueeze(1)).squeeze(1) if U else labels < -1
    if not bool(ok.any()):
        return t_q.sum() * 0.0 + t_p.sum() * 0.0
    log_p = torch.log_softmax(scores[ok], dim=1)
    return -log_p.gather(1, safe[ok].unsqueeze(1)).mean()


def ranknet_loss(pos_scores: torch.Tensor, neg_scores: torch.Tensor) -> torch.Tensor:
    """RankNet pairwise loss (Burges 2010; Eq. 4 of papers/004, the DoDress paper):

    ``L(q, d+, d-) = -log σ(S(q, d+) - S(q, d-))``, mean over the pairs. Computed as
    ``softplus(-(S+ - S-))``, the same value without overflow for large margins.
    Both inputs are 1-D of equal length (one entry per (q, d+, d-) triplet).
    """
    with full_precision(pos_scores, neg_scores) as (pos_scores, neg_scores):
        return F.softplus(neg_scores - pos_scores).mean()
