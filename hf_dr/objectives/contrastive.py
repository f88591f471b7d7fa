"""Contrastive (in-batch + hard negatives, gathered across processes) and Margin-MSE."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..encoding import embed
from ..losses import contrastive_loss, group_scores, in_batch_positives, margin_mse_loss
from .scale import resolve_scale


def all_gather_with_grad(t: torch.Tensor) -> torch.Tensor:
    """Concatenate ``t`` from every process along dim 0, keeping the gradient of the
    local slice (negatives from other GPUs act as constants for this one). Identity when
    not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return t
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(t), dim=0)


def all_gather_keys(t: torch.Tensor) -> torch.Tensor:
    """Concatenate an integer tensor (the documents' keys) from every process along dim 0, in the
    order of :func:`all_gather_with_grad`. Identity when not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return t
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim=0)


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def embed_batch(model, inputs):
    """Query and document embeddings of a collated batch (see :class:`hf_dr.data.RetrievalCollator`)."""
    q = embed(model, inputs["query_input_ids"], inputs["query_attention_mask"], is_query=True)
    d = embed(model, inputs["doc_input_ids"], inputs["doc_attention_mask"], is_query=False)
    return q, d


@dataclass
class ContrastiveObjective:
    """InfoNCE with in-batch negatives, hard negatives, and negatives from every process.

    Batch layout: ``doc_*`` holds ``B * group_size`` documents, each query's positive first
    in its group. ``scale`` is the inverse temperature; ``None`` (the default) takes the model's
    own similarity (:func:`~hf_dr.objectives.scale.default_scale`: 20 for cosine models, as
    sentence-transformers, 1 for dot).
    """

    scale: float | None = None
    gather_across_processes: bool = True

    def __call__(self, model, inputs):
        q, d = embed_batch(model, inputs)
        return self.loss_from_embeddings(q, d, scale=resolve_scale(self.scale, model), inputs=inputs)

    def loss_from_embeddings(self, q, d, scale: float | None = None, inputs: dict | None = None):
        """The loss of already computed ``q [B, d]`` / ``d [B * group, d]`` (objectives that
        add terms on top of the contrastive loss, e.g. BERM, reuse it) at inverse temperature
        ``scale`` (default: the objective's own, 1 when that is unset too). With the batch's
        ``inputs`` (its ``doc_keys`` / ``query_keys``), a query's positives elsewhere in the batch
        are not its negatives (:func:`~hf_dr.losses.in_batch_positives`)."""
        B, group = q.shape[0], d.shape[0] // q.shape[0]
        gather = self.gather_across_processes
        offset = _rank() * d.shape[0] if gather else 0
        if gather:
            d = all_gather_with_grad(d)
        targets = offset + torch.arange(B, device=q.device) * group
        scale = scale if scale is not None else (self.scale if self.scale is not None else 1.0)
        loss = contrastive_loss(q, d, targets, scale, exclude=positives_in_batch(inputs, B, group, offset, gather))
        return loss, {"contrastive_loss": loss.detach()}


def positives_in_batch(inputs: dict | None, B: int, group: int, offset: int = 0, gather: bool = False):
    """``exclude`` for :func:`~hf_dr.losses.contrastive_loss` from a collated batch's keys (gathered
    across processes as the documents are), or ``None`` when the batch has none."""
    if not inputs or "doc_keys" not in inputs or "query_keys" not in inputs:
        return None
    dk, qk = inputs["doc_keys"], inputs["query_keys"]
    if gather:
        dk, qk = all_gather_keys(dk), all_gather_keys(qk)
    first = offset // group
    return in_batch_positives(dk, qk, group, slice(first, first + B))


@dataclass
class MarginMSEObjective:
    """Margin-MSE against teacher scores ``inputs["teacher_scores"] [B, 1 + m]``
    (positive first); each hard negative forms one (pos, neg) pair. ``scale`` multiplies the
    student's scores first: a cosine student's margins live in [-2, 2], which cannot match a
    teacher's margins of several units (GPL's dot-product students need none). ``None`` (the
    default): the model's own similarity, :func:`~hf_dr.objectives.scale.default_scale` (20 for
    cosine, 1 for dot)."""

    scale: float | None = None

    def __call__(self, model, inputs):
        q, d = embed_batch(model, inputs)
        s = group_scores(q, d, resolve_scale(self.scale, model))
        t = inputs["teacher_scores"].to(s.dtype)
        m = s.shape[1] - 1
        loss = margin_mse_loss(s[:, :1].expand(-1, m).reshape(-1), s[:, 1:].reshape(-1),
                               t[:, :1].expand(-1, m).reshape(-1), t[:, 1:].reshape(-1))
        return loss, {"margin_mse_loss": loss.detach()}
