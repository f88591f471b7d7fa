"""SPLADE-CAI's IDF document weighting (papers/003 Eq. 7) as a Sentence Transformers module.

A SPLADE-CAI folder written by hf-dr loads as ``SparseEncoder(folder, trust_remote_code=True)``: a
``Router`` whose query route is ``Transformer`` (fill-mask) + ``SpladePooling`` and whose document
route adds this module, which multiplies the pooled term weights by ``idf ** idf_exponent`` exactly
as ``SPLADECAI.forward`` does for documents. Sentence Transformers has no module of its own for an
element-wise weighting of the vocabulary, so this file is copied beside the model (``splade_idf.py``,
referenced from ``router_config.json`` as ``splade_idf.SpladeIDF``) and imported through
``trust_remote_code``, like the model code that ``AutoModel`` uses.

Self-contained (torch + sentence-transformers): it never imports hf-dr.
"""

from __future__ import annotations

import torch
from sentence_transformers.base.modules.module import Module

__all__ = ["SpladeIDF"]


class SpladeIDF(Module):
    """``sentence_embedding * idf ** idf_exponent`` (``idf`` clamped at 0 when the exponent is not 1,
    as ``SPLADECAI.idf_weights``). ``idf`` is stored in this module's ``model.safetensors``."""

    config_keys: list[str] = ["vocab_size", "idf_exponent"]

    def __init__(self, vocab_size: int, idf_exponent: float = 1.0, idf: torch.Tensor | None = None):
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.idf_exponent = float(idf_exponent)
        self.register_buffer("idf", torch.ones(self.vocab_size) if idf is None else idf.detach().clone().float(),
                             persistent=True)

    def weights(self) -> torch.Tensor:
        e = self.idf_exponent
        return self.idf if e == 1.0 else self.idf.clamp(min=0) ** e

    def forward(self, features: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        s = features["sentence_embedding"]
        features["sentence_embedding"] = s * self.weights().to(s.dtype)
        return features

    def get_embedding_dimension(self) -> int:
        return self.vocab_size

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token=None, cache_folder=None, revision=None,
             local_files_only: bool = False, **kwargs):
        hub = dict(subfolder=subfolder, token=token, cache_folder=cache_folder, revision=revision,
                   local_files_only=local_files_only)
        module = cls(**cls.load_config(model_name_or_path, **hub))
        cls.load_torch_weights(model_name_or_path, model=module, **hub)
        return module
