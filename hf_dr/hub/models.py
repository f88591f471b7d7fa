"""Publishing a model: the folder a Hub repo of a hf-dr model holds, and its upload.

:func:`prepare_model_folder` assembles exactly that folder — ``config.json`` with ``auto_map``,
``model.safetensors``, the self-contained model code files that ``trust_remote_code`` imports, the
tokenizer, and a ``README.md`` card (:func:`hf_dr.hub.cards.render_model_card`: base model, datasets,
licence, ``library_name``, tags, the method paper, ``model-index`` results from ``hf-dr evaluate`` JSON
files). A dense, BERM or SPLADE model's folder is also a Sentence Transformers folder
(:mod:`hf_dr.models.st_folder`), and its card has a Sentence Transformers snippet. :func:`push_model`
uploads that folder with one :meth:`huggingface_hub.HfApi.upload_folder` call; with ``local_dir`` it
only writes it.

Model kinds are a small registry (:data:`MODEL_KINDS`): how a folder is recognised, which
class publishes it, which card template and paper describe it. What differs per kind lives on
that class (its ``save_for_hub``, ``card_variables`` and, for repos not loaded through
``trust_remote_code``, ``usage_snippet``; see :class:`ModelKind`). Classes are imported lazily,
so this module works on a tree where ``hf_dr.models.berm`` does not exist yet.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..io import local_inputs, read_json_or_empty
from .cards import card_template, load_metrics, metrics_datasets, render_model_card
from .errors import HubError
from .kinds import MODEL_KINDS, ModelKind
from .paths import hub_id, public_configs, public_values
from .publish import PLACEHOLDER_OWNER, check_out, publish, published_folder

__all__ = ["ModelKind", "MODEL_KINDS", "berm_available", "detect_model_kind", "prepare_model_folder", "push_model"]


def berm_available() -> bool:
    """True when ``hf_dr.models.berm`` provides ``BERMEncoder`` (it is developed separately)."""
    try:
        return hasattr(importlib.import_module("hf_dr.models.berm"), "BERMEncoder")
    except ImportError:
        return False


def detect_model_kind(model_dir: str | os.PathLike, kind: str | None = None) -> ModelKind:
    """Which kind of hf-dr model ``model_dir`` holds (``kind`` forces one); :class:`HubError`
    when it is none."""
    d = Path(model_dir)
    if not d.is_dir():
        raise HubError(f"{d}: no such model folder")
    cfg = read_json_or_empty(d / "config.json")
    if not cfg:
        raise HubError(f"{d} is not a hf-dr model folder: it has no (readable) config.json")
    if kind is not None:
        if kind not in MODEL_KINDS:
            raise HubError(f"unknown model kind {kind!r}: one of {', '.join(MODEL_KINDS)}")
        return MODEL_KINDS[kind]
    model_type = str(cfg.get("model_type", ""))
    archs = cfg.get("architectures") or []
    if model_type == "splade_cai" or "SPLADECAI" in archs:
        return MODEL_KINDS["splade_cai"]
    if model_type == "ddr" or "DDRModel" in archs:
        return MODEL_KINDS["ddr_rem"]
    if model_type.startswith("berm") or any(str(a).startswith("BERM") for a in archs):
        return MODEL_KINDS["berm"]
    if (d / "dam_info.json").is_file():  # written by examples/adapt_dam.py
        return MODEL_KINDS["ddr_dam"]
    if (d / "hf_dr_dense.json").is_file():  # written by DenseEncoder.save_pretrained
        return MODEL_KINDS["dense"]
    raise HubError(
        f"{d} is not a hf-dr model folder (config model_type {model_type!r}, architectures {archs}). "
        "Expected a folder saved by SPLADECAI / DDRModel / BERMEncoder / DenseEncoder.save_pretrained, "
        "DDRModel.save_rem, or a DAM written by examples/adapt_dam.py (dam_info.json); "
        "for a DAM saved otherwise pass --kind ddr_dam.")


def _base_model(model, info: dict) -> str | None:
    cfg = getattr(model, "config", None)
    # a model that names its DAM (DDR REM) is based on that DAM first
    local = set(info.get("local_inputs") or ())  # recorded by name only: not Hub ids
    cands = [getattr(cfg, "dam_name_or_path", None)] + \
        [info.get(k) for k in ("base_model", "model_name_or_path") if k not in local]
    bcfg = getattr(cfg, "backbone_config", None)
    cands.append(getattr(bcfg, "_name_or_path", None))
    cands.append(getattr(cfg, "_name_or_path", None))
    return next((c for c in map(hub_id, cands) if c), None)


def prepare_model_folder(model_dir: str | os.PathLike, out_dir: str | os.PathLike, *, repo_id: str | None = None,
                         metrics: Sequence[str | os.PathLike] = (), base_model: str | None = None,
                         datasets: Sequence[str] = (), license: str = "apache-2.0", template: str | None = None,
                         dam: str | None = None, language: str | None = "en", overwrite: bool = False,
                         kind: str | None = None, card_vars: Mapping[str, Any] | None = None) -> Path:
    """Write the folder a Hub repo of the model in ``model_dir`` holds (nothing is uploaded).

    Args:
        model_dir: a folder saved by a hf-dr model (see :func:`detect_model_kind`).
        out_dir: the folder to write (must be empty or absent unless ``overwrite``).
        repo_id: the Hub id written into the card's usage snippet (a placeholder when ``None``).
        metrics: ``metrics.json`` files of ``hf-dr evaluate``: the card's results table + model-index.
        base_model / datasets / license / language: card metadata (``base_model`` is inferred
            from the model's config / training info when it is a Hub id).
        template: card template name under ``model_cards/`` (default: the kind's).
        dam: DDR REM only — a DAM folder to bundle (default: the REM's own), or a Hub id to
            reference instead of bundling one.
        kind: force the model kind (a :data:`MODEL_KINDS` key) instead of detecting it.
        card_vars: extra template variables.
    """
    src = Path(model_dir)
    kind = detect_model_kind(src, kind)
    out = Path(out_dir)
    if out.resolve() == src.resolve():
        raise HubError("--local-dir must differ from the model folder")
    inputs = local_inputs(src, dam, *metrics)
    check_out(out, overwrite, inputs)  # before loading anything
    tpl = card_template(template or kind.template, f"{kind.title} models")
    rows = load_metrics(metrics)  # fail before writing anything
    hooks = kind.hooks_class()
    roots = [src.resolve().parent] + ([Path(dam).resolve().parent] if dam and Path(dam).exists() else [])
    with published_folder(out, overwrite, inputs, roots) as tmp:
        if hasattr(hooks, "save_for_hub"):
            model, extra = hooks.save_for_hub(src, tmp, dam=dam)
        else:  # the common case: load the folder, save weights + config (auto_map) + code + tokenizer
            model, extra = hooks.from_pretrained(str(src)), {}
            model.save_pretrained(tmp, safe_serialization=True)
        info = {**read_json_or_empty(src / "train_info.json"), **read_json_or_empty(src / "dam_info.json")}
        for name in ("train_info.json", "dam_info.json"):
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        public_configs(tmp)
        render_model_card(kind, model, tpl, tmp, repo_id=repo_id or f"{PLACEHOLDER_OWNER}/{src.resolve().name}",
                          rows=rows, base_model=base_model or _base_model(model, info),
                          datasets=list(datasets) or metrics_datasets(rows),
                          license=license, language=language, info=public_values(info),
                          extra={**extra, **(card_vars or {})})
    return out


def push_model(model_dir: str | os.PathLike, repo_id: str | None = None, *, local_dir: str | os.PathLike | None = None,
               private: bool = False, token: str | None = None, commit_message: str = "Upload with hf-dr push",
               api=None, **prepare_kwargs) -> str:
    """Publish a hf-dr model: with ``local_dir``, write the repo folder there (no network) and
    return its path; otherwise assemble it in a temporary folder and upload it to ``repo_id``."""
    return publish(lambda out, **kw: prepare_model_folder(model_dir, out, **kw), repo_id, local_dir,
                   repo_type="model", private=private, token=token, commit_message=commit_message, api=api,
                   **prepare_kwargs)


