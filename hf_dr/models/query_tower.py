"""Two-tower query encoder: train a query encoder against a frozen passage encoder.

Used for conversational dense retrieval (CDR; papers/002 §6.2, following ConvDR / CQE): the
query tower learns on the CDR triplets of :mod:`hf_dr.labeling.conversational` while the
passage tower stays the starting model, so an index built with it stays valid.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from ..encoding import EncoderMixin

__all__ = ["QueryTowerEncoder"]


class QueryTowerEncoder(nn.Module, EncoderMixin):
    """Two towers: a trainable query encoder and a frozen passage encoder (a copy of the
    starting model), for training a CDR query encoder on an index that stays valid
    (papers/002 §6.2, following ConvDR / CQE). ``forward(..., is_query)`` routes to the tower.

    ``QueryTowerEncoder.from_encoder(encoder)`` wraps any encoder of the suite. Saving writes
    the query tower to the folder (loadable as the original class) and the passage tower to
    ``passage_encoder/``.
    """

    def __init__(self, query_encoder: nn.Module, passage_encoder: nn.Module):
        super().__init__()
        self.query_encoder = query_encoder
        self.passage_encoder = passage_encoder.eval().requires_grad_(False)
        self.tokenizer = query_encoder.tokenizer
        self.config = getattr(query_encoder, "config", None)

    @classmethod
    def from_encoder(cls, encoder: nn.Module) -> QueryTowerEncoder:
        return cls(encoder, copy.deepcopy(encoder))

    @property
    def normalize(self):
        return getattr(self.query_encoder, "normalize", None)

    @property
    def max_query_length(self):
        return getattr(self.query_encoder, "max_query_length", None)

    @property
    def max_doc_length(self):
        return getattr(self.passage_encoder, "max_doc_length", None)

    def train(self, mode: bool = True):
        super().train(mode)
        self.passage_encoder.eval()  # frozen: no dropout either
        return self

    def forward(self, input_ids, attention_mask, is_query: bool = False, **kwargs):
        if is_query:
            return self.query_encoder(input_ids=input_ids, attention_mask=attention_mask, is_query=True, **kwargs)
        with torch.no_grad():
            return self.passage_encoder(input_ids=input_ids, attention_mask=attention_mask, is_query=False, **kwargs)

    def save_pretrained(self, save_directory, **kwargs) -> None:
        self.query_encoder.save_pretrained(save_directory, **kwargs)
        self.passage_encoder.save_pretrained(Path(save_directory) / "passage_encoder", **kwargs)

    def load_weights(self, directory) -> None:
        """Reload the query tower saved by :meth:`save_pretrained` (Trainer resume / best model)."""
        if hasattr(self.query_encoder, "load_weights"):
            self.query_encoder.load_weights(directory)
        else:
            from .checkpoints import read_checkpoint

            self.query_encoder.load_state_dict(read_checkpoint(Path(directory) / "model.safetensors",
                                                               self.query_encoder.state_dict()))
