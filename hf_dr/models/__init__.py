"""Encoders of the suite. ``load_encoder`` (:mod:`.loading`) opens any saved encoder folder or Hub
id; :mod:`.checkpoints` checks and reads model folders."""

from __future__ import annotations

from .checkpoints import WEIGHT_FILES, ModelLoadError, check_model, model_config, quiet_loading, read_checkpoint
from .loading import default_model_path, load_encoder

__all__ = ["load_encoder", "check_model", "model_config", "quiet_loading", "ModelLoadError", "default_model_path",
           "read_checkpoint", "WEIGHT_FILES", "DenseEncoder", "QueryTowerEncoder"]


def __getattr__(name):
    if name == "DenseEncoder":
        from .dense import DenseEncoder

        return DenseEncoder
    if name == "QueryTowerEncoder":
        from .query_tower import QueryTowerEncoder

        return QueryTowerEncoder
    raise AttributeError(name)
