"""RankNet pairwise objective (DoDress: Eq. 4 of papers/004) over (query, pos, neg) triplets."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..encoding import embed
from ..losses import group_scores, ranknet_loss
from .scale import resolve_scale

__all__ = ["RankNetObjective"]


@dataclass
class RankNetObjective:
    """``-log σ(S(q, d+) - S(q, d-))`` for every (positive, negative) pair of the batch.

    Batch layout of :class:`~hf_dr.data.RetrievalCollator`: ``B`` queries and ``B * (1 + m)``
    documents, each query's positive first in its group; every hard negative forms one pair
    with its query's positive (no in-batch negatives: the paper trains on the pairs only).

    ``S = scale * <q, d>``: the inner product of the encoder's embeddings — a dot product for
    unnormalised encoders (the paper's setting, ``scale=1``), a cosine for encoders that
    L2-normalise, where a ``scale`` > 1 (an inverse temperature) keeps the sigmoid off its flat
    middle part. With ``freeze_documents`` the document embeddings carry no gradient (use a
    two-tower model with a frozen passage tower, see :class:`hf_dr.models.query_tower.QueryTowerEncoder`).
    """

    scale: float | None = None  # None: the model's own similarity (20 for cosine, 1 for dot)
    freeze_documents: bool = False

    def __call__(self, model, inputs):
        q = embed(model, inputs["query_input_ids"], inputs["query_attention_mask"], is_query=True)
        with torch.no_grad() if self.freeze_documents else torch.enable_grad():
            d = embed(model, inputs["doc_input_ids"], inputs["doc_attention_mask"], is_query=False)
        s = group_scores(q, d, resolve_scale(self.scale, model))
        m = s.shape[1] - 1
        if m < 1:
            raise ValueError("RankNet needs at least one negative per row (a 'neg' column)")
        loss = ranknet_loss(s[:, :1].expand(-1, m).reshape(-1), s[:, 1:].reshape(-1))
        return loss, {"ranknet_loss": loss.detach(), "pair_accuracy": (s[:, :1] > s[:, 1:]).float().mean().detach()}
