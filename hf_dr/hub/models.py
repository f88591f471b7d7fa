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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..io import local_inputs, read_json
from .cards import card_template, load_metrics, metrics_datasets, render_model_card
from .errors import HubError
from .paths import hub_id, public_configs, public_values
from .publish import PLACEHOLDER_OWNER, check_out, publish, published_folder

__all__ = ["ModelKind", "MODEL_KINDS", "berm_available", "detect_model_kind", "prepare_model_folder", "push_model"]


# ---------------------------------------------------------------------------- the registry
@dataclass
class ModelKind:
    """One publishable model kind.

    Args:
        name: registry key (``splade_cai``, ``ddr_rem``, ``ddr_dam``, ``berm``, ``dense``).
        template: card template file name under ``model_cards/`` (without ``.md``).
        module / class_name: where the loading class lives (imported only when needed).
        title / paper: the method, and its paper (``{"title", "authors", "venue", "url"}``).
        tags / pipeline_tag / library_name: card metadata.
        remote_code: the folder loads through ``AutoModel(..., trust_remote_code=True)``.
        similarity: how the usage snippet scores queries against documents.
        hooks: ``module.Class`` holding the kind's publishing hooks when the loading class is not
            hf-dr's (the DAM, a plain transformers checkpoint); default: the loading class.

    The hooks class (:meth:`hooks_class`) provides, optionally,
    ``save_for_hub(src, out, **options) -> (model, extra card variables)`` (load the saved folder,
    write the repo files; default: ``from_pretrained(src).save_pretrained(out)``), ``card_variables(model, info) -> dict`` (the variables of the kind's
    own template, from the config and ``train_info.json`` / ``dam_info.json``; an ordinary method
    of the model classes) and, optionally, ``usage_snippet(repo_id, **lengths)`` or ``st_native = True``
    (a Sentence Transformers folder: Sentence Transformers' snippet; default: the ``trust_remote_code``
    snippet of :func:`hf_dr.hub.cards.usage_snippet`).
    """

    name: str
    template: str
    module: str
    class_name: str
    title: str
    paper: dict
    tags: list[str] = field(default_factory=list)
    pipeline_tag: str = "feature-extraction"
    library_name: str = "transformers"
    remote_code: bool = True
    similarity: str = "dot"
    hooks: str | None = None

    def hooks_class(self):
        module, name = self.hooks.rsplit(".", 1) if self.hooks else (self.module, self.class_name)
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise HubError(f"{self.title} support is not available in this installation "
                           f"({module}.{name} cannot be imported: {e})") from e


# the method papers (shared/papers/000, 001, 003); ``url`` only where the identifier is certain
_BERM_PAPER = {"title": "BERM: Training the Balanced and Extractable Representation for Matching to Improve "
                        "Generalization Ability of Dense Retrieval",
               "authors": "Shicheng Xu, Liang Pang, Huawei Shen, Xueqi Cheng", "venue": "ACL 2023", "url": None}
_DDR_PAPER = {"title": "Disentangled Modeling of Domain and Relevance for Adaptable Dense Retrieval",
              "authors": "Jingtao Zhan, Qingyao Ai, Yiqun Liu, Jiaxin Mao, Xiaohui Xie, Min Zhang, Shaoping Ma",
              "venue": "arXiv 2022", "url": "https://arxiv.org/abs/2208.05753"}
_CAI_PAPER = {"title": "Unsupervised Domain Adaptation for Sparse Retrieval by Filling Vocabulary and Word "
                       "Frequency Gaps", "authors": "Hiroki Iida, Naoaki Okazaki", "venue": "AACL-IJCNLP 2022",
              "url": None}
_SBERT_PAPER = {"title": "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks",
                "authors": "Nils Reimers, Iryna Gurevych", "venue": "EMNLP 2019", "url": "https://arxiv.org/abs/1908.10084"}

MODEL_KINDS: dict[str, ModelKind] = {
    "splade_cai": ModelKind("splade_cai", "splade_cai", "hf_dr.models.splade", "SPLADECAI", "SPLADE-CAI", _CAI_PAPER,
                            tags=["splade", "sparse-retrieval", "domain-adaptation", "adalm", "idf"]),
    "ddr_rem": ModelKind("ddr_rem", "ddr_rem", "hf_dr.models.ddr", "DDRModel", "DDR REM", _DDR_PAPER,
                         tags=["ddr", "rem", "dense-retrieval", "peft", "lora", "domain-adaptation"]),
    "ddr_dam": ModelKind("ddr_dam", "ddr_dam", "transformers", "AutoModelForMaskedLM", "DDR DAM", _DDR_PAPER,
                         tags=["ddr", "dam", "domain-adaptation"], pipeline_tag="fill-mask", remote_code=False,
                         hooks="hf_dr.models.ddr.DAMCheckpoint"),
    "berm": ModelKind("berm", "berm", "hf_dr.models.berm", "BERMEncoder", "BERM", _BERM_PAPER,
                      tags=["berm", "dense-retrieval", "domain-adaptation"]),
    "dense": ModelKind("dense", "dense", "hf_dr.models.dense", "DenseEncoder", "Dense retriever", _SBERT_PAPER,
                       tags=["dense-retrieval", "sentence-transformers"], library_name="sentence-transformers",
                       remote_code=False),
}


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
    cfg = read_json(d / "config.json")
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
        info = {**read_json(src / "train_info.json"), **read_json(src / "dam_info.json")}
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


