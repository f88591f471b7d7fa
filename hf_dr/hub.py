"""Publishing to the Hugging Face Hub: model folders with cards, datasets with cards.

:func:`prepare_model_folder` assembles exactly the folder a Hub repo of a hf-dr model holds —
``config.json`` with ``auto_map``, ``model.safetensors``, the self-contained model code files
that ``trust_remote_code`` imports, the tokenizer, and a ``README.md`` card rendered from
``model_cards/<template>.md`` through :class:`huggingface_hub.ModelCard` (YAML card data:
base model, datasets, licence, ``library_name``, tags, the method paper, ``model-index``
results from ``hf-dr evaluate`` JSON files). A dense, BERM or SPLADE model's folder is also a
Sentence Transformers folder (:mod:`hf_dr.models.st_folder`), and its card has a Sentence
Transformers snippet (:func:`st_usage_snippet`). :func:`push_model` uploads that folder with one
:meth:`huggingface_hub.HfApi.upload_folder` call; with ``local_dir`` it only writes it.

:func:`prepare_dataset_folder` / :func:`push_dataset` do the same for a ``datasets.Dataset``,
a ``DatasetDict`` or a folder of parquet files: ``data/<split>.parquet`` + a dataset card.

Model kinds are a small registry (:data:`MODEL_KINDS`): how a folder is recognised, which
class publishes it, which card template and paper describe it. What differs per kind lives on
that class (its ``save_for_hub``, ``card_variables`` and, for repos not loaded through
``trust_remote_code``, ``usage_snippet``; see :class:`ModelKind`). Classes are imported lazily,
so this module works on a tree where ``hf_dr.models.berm`` does not exist yet.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .hub_templates import render_card, template_path
from .io import OutputError, check_output_folder, local_inputs, output_folder, public_name, scrub_local_paths

logger = logging.getLogger(__name__)

__all__ = ["HubError", "ModelKind", "MODEL_KINDS", "detect_model_kind", "prepare_model_folder", "push_model",
           "prepare_dataset_folder", "push_dataset", "metrics_table", "load_metrics",
           "berm_available", "prepare_space_folder", "push_space"]

def _template(name: str, what: str) -> Path:
    """``model_cards/<name>.md``, found where :func:`hf_dr.hub_templates.template_path` looks."""
    try:
        return template_path(f"{name}.md")
    except FileNotFoundError as e:
        raise HubError(f"no card template {name}.md for {what}: {e}") from None


#: the placeholder repo id of a card written with ``--local-dir`` and no ``--repo-id``
PLACEHOLDER_OWNER = "your-username"


class HubError(ValueError):
    """A folder that cannot be published (not a hf-dr model, missing template...)."""


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
    of the model classes) and, optionally, ``usage_snippet(repo_id, **lengths)`` (default: the
    ``trust_remote_code`` snippet of :func:`usage_snippet`).
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


def _check_out(out: Path, overwrite: bool, inputs) -> None:
    """Refuse, before any work, a folder that must not be written (non-empty without ``overwrite``;
    one that is or holds an input, the current or home folder)."""
    try:
        check_output_folder(out, overwrite=overwrite, inputs=inputs)
    except OutputError as e:
        raise HubError(str(e)) from None


@contextlib.contextmanager
def _published_folder(out: Path, overwrite: bool, inputs, roots=()):
    """The repo folder is written into a temporary sibling of ``out`` and renamed into place once
    complete (files 0644), with every local path of this machine taken out of its text files; after
    an error ``out`` is as it was. ``overwrite`` never deletes a folder holding one of ``inputs``."""
    _check_out(out, overwrite, inputs)
    with output_folder(out, overwrite=overwrite, inputs=inputs) as tmp:
        yield tmp
        scrub_local_paths(tmp, extra_roots=[*roots, out.resolve().parent, tmp])


def _read_json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def detect_model_kind(model_dir: str | os.PathLike, kind: str | None = None) -> ModelKind:
    """Which kind of hf-dr model ``model_dir`` holds (``kind`` forces one); :class:`HubError`
    when it is none."""
    d = Path(model_dir)
    if not d.is_dir():
        raise HubError(f"{d}: no such model folder")
    cfg = _read_json(d / "config.json")
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


# ---------------------------------------------------------------------------- metrics
def load_metrics(paths: Sequence[str | os.PathLike]) -> list[dict]:
    """Read ``metrics.json`` files written by ``hf-dr evaluate --output`` (per-query scores dropped)."""
    rows = []
    for p in paths:
        obj = _read_json(Path(p))
        if not isinstance(obj.get("metrics"), dict):
            raise HubError(f"{p} is not an hf-dr evaluation JSON (no 'metrics' object); write one with "
                           "`hf-dr evaluate ... --output DIR` (DIR/metrics.json)")
        rows.append({k: v for k, v in obj.items() if k != "per_query"})
    return rows


def _dataset_label(row: dict) -> str:
    """A Hub dataset id as is; a local BEIR folder by its name (paths of this machine mean nothing on the Hub)."""
    data = str(row.get("data", "?"))
    return data if _hub_id(data) else Path(data).name


def metrics_table(rows: Sequence[dict]) -> str:
    """A markdown table (dataset, split, retriever, queries, metrics...) of evaluation rows."""
    if not rows:
        return ""
    from .evaluation import metric_label

    names = list(dict.fromkeys(m for r in rows for m in r["metrics"]))
    head = ["dataset", "split", "retriever", "queries"] + [metric_label(m) for m in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"`{_dataset_label(r)}`", str(r.get("split", "")), str(r.get("retriever", "")),
                 str(r.get("n_queries", ""))]
        cells += [f"{r['metrics'][m]:.4f}" if m in r["metrics"] else "" for m in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _eval_results(rows: Sequence[dict]):
    """``model-index`` entries (huggingface_hub.EvalResult) for the card metadata."""
    from huggingface_hub import EvalResult

    out = []
    for r in rows:
        name = _dataset_label(r)
        for metric, value in r["metrics"].items():
            out.append(EvalResult(task_type="text-retrieval", task_name="Retrieval", dataset_type=name,
                                  dataset_name=name, dataset_split=r.get("split"), metric_type=metric.replace("@", "_at_"),
                                  metric_name=metric, metric_value=round(float(value), 4)))
    return out


# ---------------------------------------------------------------------------- usage snippets
def _hub_id(s: str | None) -> str | None:
    """``s`` when it looks like a Hub repo id (owner/name or name) and is not a local path."""
    if not s or Path(s).exists() or s.startswith((".", "/", "~")) or s.count("/") > 1:
        return None
    return s


def usage_snippet(kind: ModelKind, repo_id: str, *, max_query_length: int = 64, max_doc_length: int = 256,
                  prompts: Mapping[str, str] | None = None) -> str:
    """Python that loads the published repo with plain transformers and scores a query against two
    documents (tested: ``tests/test_hub.py`` runs it in a process where hf-dr is not installed);
    the model's ``prompts`` (``query`` / ``document``), when it has any, are prepended as hf-dr does."""
    cls = kind.hooks_class()
    if hasattr(cls, "usage_snippet"):  # a repo not loaded through trust_remote_code (dense, DAM)
        return cls.usage_snippet(repo_id, max_query_length=max_query_length, max_doc_length=max_doc_length)
    sparse = getattr(cls, "output_is_sparse", False)
    prompts = {k: v for k, v in (prompts or {}).items() if k in ("query", "document") and v}
    prompt_line = ("" if not prompts else f"\n    prompt = {prompts!r}.get('query' if is_query else 'document', '')"
                   "  # the model's prompts, as hf-dr prepends them\n    texts = [prompt + t for t in texts]")
    score = "q @ d.T" + ("   # sparse [n, |V|] term weights: dot product of the matching terms" if sparse
                         else "   # inner product of the embeddings")
    return f'''import torch
from transformers import AutoModel, AutoTokenizer

model = AutoModel.from_pretrained("{repo_id}", trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained("{repo_id}")


def encode(texts, is_query):{prompt_line}
    batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt",
                      max_length={max_query_length} if is_query else {max_doc_length})
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], is_query=is_query)
    return out if isinstance(out, torch.Tensor) else out.embeddings


q = encode(["what causes fever?"], is_query=True)
d = encode(["Fever is caused by infection.", "The cat sat on the mat."], is_query=False)
scores = {score}
print(scores)
'''


def st_usage_snippet(repo_id: str, st_class: str = "SentenceTransformer", remote_modules: Sequence[str] = (),
                     similarity: str | None = None) -> str:
    """Python that loads the published repo with Sentence Transformers (``SentenceTransformer`` or
    ``SparseEncoder``; ``trust_remote_code=True`` when the repo has ``remote_modules``, module classes of
    its own) and scores a query against two documents with the model's own prompts and similarity
    (tested: ``tests/test_st_out.py`` runs it and compares the scores with hf-dr's)."""
    trust = ", trust_remote_code=True" if remote_modules else ""
    why = f"  # runs this repository's {', '.join(remote_modules)}" if remote_modules else ""
    return (f'from sentence_transformers import {st_class}\n\n'
            f'model = {st_class}("{repo_id}"{trust}){why}\n'
            f'queries = ["what causes fever?"]\n'
            f'documents = ["Fever is caused by infection.", "The cat sat on the mat."]\n'
            f'q = model.encode_query(queries)  # with the query prompt, if any\n'
            f'd = model.encode_document(documents)\n'
            f'scores = model.similarity(q, d){"  # " + _SIMILARITY_NAMES.get(similarity, similarity) if similarity else ""}\n'
            f'print(scores)\n')


_SIMILARITY_NAMES = {"dot": "dot product", "cosine": "cosine similarity"}

#: why Sentence Transformers cannot load a kind at all (the card says so instead of a snippet)
ST_UNSUPPORTED = {
    "ddr_rem": "a DDR REM is LoRA and / or parallel adapters inside the layers of a DAM's backbone, which no "
               "Sentence Transformers module (nor a transformers architecture) expresses; load it with "
               "`AutoModel.from_pretrained(..., trust_remote_code=True)` or hf-dr",
}


# ---------------------------------------------------------------------------- saving
def _flat_config(model) -> dict:
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "to_dict"):
        return {}
    return {k: v for k, v in cfg.to_dict().items() if not isinstance(v, dict)}


def _base_model(model, info: dict) -> str | None:
    cfg = getattr(model, "config", None)
    # a model that names its DAM (DDR REM) is based on that DAM first
    local = set(info.get("local_inputs") or ())  # recorded by name only: not Hub ids
    cands = [getattr(cfg, "dam_name_or_path", None)] + \
        [info.get(k) for k in ("base_model", "model_name_or_path") if k not in local]
    bcfg = getattr(cfg, "backbone_config", None)
    cands.append(getattr(bcfg, "_name_or_path", None))
    cands.append(getattr(cfg, "_name_or_path", None))
    return next((c for c in map(_hub_id, cands) if c), None)


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
    _check_out(out, overwrite, inputs)  # before loading anything
    tpl = _template(template or kind.template, f"{kind.title} models")
    rows = load_metrics(metrics)  # fail before writing anything
    hooks = kind.hooks_class()
    roots = [src.resolve().parent] + ([Path(dam).resolve().parent] if dam and Path(dam).exists() else [])
    with _published_folder(out, overwrite, inputs, roots) as tmp:
        if hasattr(hooks, "save_for_hub"):
            model, extra = hooks.save_for_hub(src, tmp, dam=dam)
        else:  # the common case: load the folder, save weights + config (auto_map) + code + tokenizer
            model, extra = hooks.from_pretrained(str(src)), {}
            model.save_pretrained(tmp, safe_serialization=True)
        info = {**_read_json(src / "train_info.json"), **_read_json(src / "dam_info.json")}
        for name in ("train_info.json", "dam_info.json"):
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        _public_configs(tmp)
        _render_model_card(kind, model, tpl, tmp, repo_id=repo_id or f"{PLACEHOLDER_OWNER}/{src.resolve().name}",
                           rows=rows, base_model=base_model or _base_model(model, info),
                           datasets=list(datasets) or sorted({i for i in (_hub_id(r.get("data")) for r in rows) if i}),
                           license=license, language=language, info=_public_values(info),
                           extra={**extra, **(card_vars or {})})
    return out


#: config / info fields that name a model or data folder: a local path there becomes its name
_PATH_FIELDS = ("_name_or_path", "name_or_path", "model_name_or_path", "base_model", "dam_name_or_path",
                "dam_path", "backbone", "backbone_name_or_path", "data", "train_data", "output_dir", "model")


def _public_values(obj):
    """``obj`` with every string that is a local path replaced by its name (a Hub id is kept)."""
    if isinstance(obj, dict):
        return {k: _public_values(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_public_values(v) for v in obj]
    if isinstance(obj, str) and (os.path.isabs(obj) or obj.startswith("~/")) and obj.count("/") >= 2:
        return public_name(obj)
    return obj


def _public_configs(folder: Path) -> None:
    """The JSON files of a repo folder (config.json, train_info.json, the DAM's...) with no local
    path: ``_name_or_path`` and the other path fields become the folder's name, absolute paths too."""
    from .io import _is_vocabulary

    for p in folder.rglob("*.json"):
        if _is_vocabulary(p):  # tokens, not paths
            continue
        obj = _read_json(p)
        if not obj:
            continue
        new = _public_values(obj)
        for k in _PATH_FIELDS:
            v = new.get(k)
            if isinstance(v, str) and v and not _hub_id(v) and Path(v).exists():
                new[k] = public_name(v)
        if new != obj:
            p.write_text(json.dumps(new, indent=2, sort_keys=p.name == "config.json") + "\n")


def _render_model_card(kind: ModelKind, model, template: Path, out: Path, *, repo_id: str, rows: list[dict],
                       base_model: str | None, datasets: list[str], license: str, language: str | None,
                       info: dict, extra: dict) -> None:
    cfg = _flat_config(model)
    data = dict(
        language=language, license=license, library_name=kind.library_name,
        pipeline_tag=kind.pipeline_tag, base_model=base_model,
        datasets=datasets or None, tags=["hf-dr", *kind.tags], model_name=repo_id.split("/")[-1],
        eval_results=_eval_results(rows) or None)
    # variables every template may use; the kind's own (config fields, training info) come first so
    # that the generic names below always mean the same thing
    kind_vars = kind.hooks_class().card_variables(model, info)  # the names the kind's own template uses
    variables = {**cfg, **info}
    variables.update(
        repo_id=repo_id, model_id=repo_id, kind=kind.name, method=kind.title, paper=kind.paper,
        paper_title=kind.paper["title"], paper_url=kind.paper.get("url") or "",
        paper_citation=_citation(kind.paper), base_model=base_model or info.get("base_model")
        or info.get("model_name_or_path") or "", datasets=datasets, license=license,
        results=metrics_table(rows) or "No evaluation was attached when this repo was published "
        "(`hf-dr push --metrics metrics.json`).",
        usage=usage_snippet(kind, repo_id, max_query_length=int(cfg.get("max_query_length") or 64),
                            max_doc_length=int(cfg.get("max_doc_length") or 256),
                            prompts=getattr(getattr(model, "config", None), "prompts", None)),
        model_class=kind.class_name, similarity=_similarity_words(cfg), **kind_vars, **extra)
    from .models.st_folder import sentence_transformers_class

    st = sentence_transformers_class(out)
    variables.update(st_class=st[0] if st else "", st_remote_code=bool(st and st[1]),
                     st_usage=st_usage_snippet(repo_id, *st) if st else "",
                     st_unsupported=extra.get("st_unsupported") or ("" if st else ST_UNSUPPORTED.get(kind.name, "")))
    if st and "sentence-transformers" not in data["tags"]:
        data["tags"].append("sentence-transformers")
    card = render_card(template, data, **variables)
    if not re.search(r"{{\s*usage\s*}}", template.read_text()):
        # a template without the snippet (e.g. written for the training script): the published card
        # still says how to load the repo without hf-dr, with a snippet that runs
        card.text = card.text.rstrip() + ("\n\n## Usage without hf-dr\n\nThe model code is in this repository "
                                          "(hence `trust_remote_code=True`):\n\n```python\n"
                                          f"{variables['usage']}```\n")
    card.save(out / "README.md")


def _citation(paper: dict) -> str:
    """One line naming the paper: authors, *title*, venue (linked when the URL is known)."""
    title = f"[{paper['title']}]({paper['url']})" if paper.get("url") else paper["title"]
    return f"{paper['authors']}. *{title}*. {paper['venue']}."


def _similarity_words(cfg: dict) -> str:
    return "cosine" if cfg.get("similarity") == "cos" else "inner product"


# ---------------------------------------------------------------------------- upload
def _publish(prepare: Callable[..., Path], repo_id: str | None, local_dir, *, repo_type: str, private: bool,
             token: str | None, commit_message: str, api=None, create_kwargs: dict | None = None, **kwargs) -> str:
    """With ``local_dir``: ``prepare(local_dir, repo_id=..., **kwargs)`` and return the folder (no network).
    Otherwise prepare the folder in a temporary directory, ``create_repo`` (idempotent) and upload it
    with one ``upload_folder`` call; returns the commit URL."""
    if local_dir is not None:
        return str(prepare(Path(local_dir), repo_id=repo_id, **kwargs))
    if not repo_id:
        raise HubError("give --repo-id to upload (or --local-dir to only write the folder)")
    from huggingface_hub import HfApi

    api = api or HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="hf-dr-push-") as tmp:
        folder = prepare(Path(tmp) / "repo", repo_id=repo_id, **kwargs)
        try:
            api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True, **(create_kwargs or {}))
            info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type=repo_type,
                                     commit_message=commit_message)
        except _hub_errors() as e:
            raise HubError(_hub_error_message(e, repo_id)) from None
    return str(getattr(info, "commit_url", info))


def _hub_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of an unreachable or refusing Hub (offline mode, connection, HTTP status, no token)."""
    errs: list[type[BaseException]] = [ConnectionError, TimeoutError]
    with contextlib.suppress(ImportError):
        from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

        errs += [HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled]
    with contextlib.suppress(ImportError):
        import httpx

        errs.append(httpx.HTTPError)
    with contextlib.suppress(ImportError):
        import requests

        errs.append(requests.RequestException)
    return tuple(errs)


def _hub_error_message(e: BaseException, repo_id: str) -> str:
    """One line saying what went wrong with the Hub and what to do."""
    first = (str(e).strip().splitlines() or [""])[0][:200]
    what = f"{type(e).__name__}: {first}" if first else type(e).__name__
    status = getattr(getattr(e, "response", None), "status_code", None)
    if type(e).__name__ == "LocalTokenNotFoundError" or status in (401, 403):
        return (f"the Hugging Face Hub refused to publish {repo_id} ({what}): log in (`hf auth login`), or pass "
                "--token / set HF_TOKEN with write access, or write the folder with --local-dir")
    if isinstance(status, int) and not isinstance(e, ConnectionError):
        return (f"the Hugging Face Hub answered {status} for {repo_id} ({what}): check the repo id and your "
                "rights on it, or write the folder with --local-dir")
    return (f"could not reach the Hugging Face Hub ({what}): check the network / HF_HUB_OFFLINE, or write the "
            "folder with --local-dir")


def push_model(model_dir: str | os.PathLike, repo_id: str | None = None, *, local_dir: str | os.PathLike | None = None,
               private: bool = False, token: str | None = None, commit_message: str = "Upload with hf-dr push",
               api=None, **prepare_kwargs) -> str:
    """Publish a hf-dr model: with ``local_dir``, write the repo folder there (no network) and
    return its path; otherwise assemble it in a temporary folder and upload it to ``repo_id``."""
    return _publish(lambda out, **kw: prepare_model_folder(model_dir, out, **kw), repo_id, local_dir,
                    repo_type="model", private=private, token=token, commit_message=commit_message, api=api,
                    **prepare_kwargs)


# ---------------------------------------------------------------------------- datasets
def _as_dataset_dict(data):
    """A DatasetDict from a Dataset, a DatasetDict, a ``save_to_disk`` folder or a folder of
    parquet files (one split per file stem, or ``data/<split>*.parquet``)."""
    from datasets import Dataset, DatasetDict, load_from_disk

    if isinstance(data, DatasetDict):
        return data
    if isinstance(data, Dataset):
        return DatasetDict({"train": data})
    p = Path(data)
    if not p.is_dir():
        raise HubError(f"{p}: not a dataset folder (a folder of parquet files or one written by save_to_disk)")
    if (p / "dataset_dict.json").is_file():
        return load_from_disk(str(p))
    if (p / "state.json").is_file():
        # a save_to_disk Dataset is the train split; each sub-folder holding another is a split of
        # its own (``hf-dr label`` writes its dev set in dev/)
        splits = {"train": load_from_disk(str(p))}
        for sub in sorted(p.iterdir()):
            if sub.is_dir() and (sub / "state.json").is_file() and sub.name not in splits:
                splits[sub.name] = load_from_disk(str(sub))
        return DatasetDict(splits)
    files = sorted(p.glob("*.parquet")) or sorted((p / "data").glob("*.parquet"))
    if not files:
        raise HubError(f"{p} holds no dataset: expected *.parquet files (or data/*.parquet), "
                       "or a folder written by Dataset.save_to_disk")
    splits: dict[str, list[str]] = {}
    for f in files:
        splits.setdefault(f.stem.split("-")[0], []).append(str(f))
    return DatasetDict({s: Dataset.from_parquet(fs) for s, fs in splits.items()})


def _pseudo_labels_stats(data) -> dict | None:
    """The ``stats.json`` of a ``hf-dr label`` output folder (None for any other dataset)."""
    if not isinstance(data, (str, os.PathLike)):
        return None
    p = Path(data)
    stats = _read_json(p / "stats.json") if (p / "state.json").is_file() else {}
    if not isinstance(stats.get("config"), dict):
        return None
    if not stats.get("command") and (p / "README.md").is_file():  # a folder written before stats held it
        m = re.search(r"## Made by\s+`([^`]+)`", (p / "README.md").read_text(encoding="utf-8", errors="replace"))
        if m:
            stats["command"] = m.group(1)
    return stats


def prepare_dataset_folder(data, out_dir: str | os.PathLike, *, repo_id: str | None = None,
                           template: str | None = None, card_data: Mapping[str, Any] | None = None,
                           card_vars: Mapping[str, Any] | None = None, license: str = "apache-2.0",
                           overwrite: bool = False) -> Path:
    """Write a dataset repo folder: ``data/<split>.parquet`` per split and a ``README.md``
    rendered from ``model_cards/<template>.md`` with :class:`huggingface_hub.DatasetCard`.

    ``card_data`` adds YAML metadata fields (``task_categories``, ``source_datasets``, ``tags``...);
    ``card_vars`` are template variables. The template also gets ``repo_id``, ``splits``
    (``{split: n_rows}``), ``features`` (column -> type), ``n_rows`` and ``preview`` (a table).

    A folder written by ``hf-dr label`` is published whole — the train triplets and the dev set —
    with its DoDress card (``dataset_pseudo_labels``, naming ``repo_id``) and ``stats.json``, unless
    another ``template`` is asked for.
    """
    out = Path(out_dir)
    inputs = local_inputs(data) if isinstance(data, (str, os.PathLike)) else []
    _check_out(out, overwrite, inputs)
    dd = _as_dataset_dict(data)
    stats = _pseudo_labels_stats(data)
    if stats is not None and template in (None, "dataset_pseudo_labels"):
        from .labeling.pseudo_relevance import write_dataset_card

        with _published_folder(out, overwrite, inputs, [Path(data).resolve().parent]) as tmp:
            (tmp / "data").mkdir()
            for split, ds in dd.items():  # the names the DoDress card's `configs` globs match
                ds.to_parquet(str(tmp / "data" / f"{split}-00000-of-00001.parquet"))
            stats = _public_values(stats)
            (tmp / "stats.json").write_text(json.dumps(stats, indent=1, default=str))
            write_dataset_card(tmp, stats, command=stats.get("command"),
                               repo_id=repo_id or f"{PLACEHOLDER_OWNER}/{out.resolve().name}")
        return out
    tpl = _template(template or "dataset", "datasets")
    with _published_folder(out, overwrite, inputs,
                           [Path(data).resolve().parent] if isinstance(data, (str, os.PathLike)) else []) as tmp:
        _write_dataset(dd, tmp, out, tpl, repo_id=repo_id, card_data=card_data, card_vars=card_vars, license=license)
    return out


def _split_configs(dd) -> list[dict]:
    """The card's ``configs``: one ``default`` config holding every split when they share their
    columns; otherwise (a dataset cannot mix schemas) the first split is ``default`` and every other
    split a config of its own, named after it (``load_dataset(repo, "dev", split="dev")``)."""
    names = list(dd)
    same = all(dd[n].features == dd[names[0]].features for n in names)
    groups = [("default", names)] if same else [("default", names[:1])] + [(n, [n]) for n in names[1:]]
    return [{"config_name": c, "data_files": [{"split": s, "path": f"data/{s}.parquet"} for s in splits]}
            for c, splits in groups]


def _write_dataset(dd, out: Path, final: Path, tpl: Path, *, repo_id, card_data, card_vars, license) -> None:
    (out / "data").mkdir(parents=True, exist_ok=True)
    for split, ds in dd.items():
        ds.to_parquet(str(out / "data" / f"{split}.parquet"))
    meta = {"license": license, "task_categories": ["text-retrieval"], "tags": ["hf-dr"],
            "configs": _split_configs(dd), **(card_data or {})}
    first = next(iter(dd.values()))
    repo_id = repo_id or f"{PLACEHOLDER_OWNER}/{final.resolve().name}"
    variables = dict(repo_id=repo_id, splits={s: len(ds) for s, ds in dd.items()},
                     configs=[c["config_name"] for c in meta["configs"]],
                     n_rows=sum(len(ds) for ds in dd.values()),
                     features={k: str(v) for k, v in first.features.items()}, preview=_preview(first),
                     pretty_name=meta.get("pretty_name", repo_id.split("/")[-1]), **(card_vars or {}))
    card = render_card(tpl, meta, repo_type="dataset", **variables)
    card.save(out / "README.md")


def _preview(ds, n: int = 3, width: int = 80) -> str:
    cols = ds.column_names
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in ds.select(range(min(n, len(ds)))):
        cells = []
        for c in cols:
            s = json.dumps(row[c], ensure_ascii=False) if not isinstance(row[c], str) else row[c]
            s = s.replace("|", "\\|").replace("\n", " ")
            cells.append(s if len(s) <= width else s[:width - 1] + "…")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def push_dataset(data, repo_id: str | None = None, *, local_dir: str | os.PathLike | None = None,
                 private: bool = False, token: str | None = None, commit_message: str = "Upload with hf-dr push",
                 api=None, **prepare_kwargs) -> str:
    """Publish a dataset (see :func:`prepare_dataset_folder`): written to ``local_dir``, or
    uploaded to the dataset repo ``repo_id`` with one ``upload_folder`` call."""
    return _publish(lambda out, **kw: prepare_dataset_folder(data, out, **kw), repo_id, local_dir,
                    repo_type="dataset", private=private, token=token, commit_message=commit_message, api=api,
                    **prepare_kwargs)


# ---------------------------------------------------------------------------- the Space
SPACE_DIR = Path(__file__).resolve().parent.parent / "spaces" / "search_demo"
_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "search_demo.png"


def prepare_space_folder(out_dir: str | os.PathLike, space_dir: str | os.PathLike = SPACE_DIR, *,
                         overwrite: bool = False) -> Path:
    """The folder a Gradio Space repo of the search demo holds: ``app.py``, ``requirements.txt``,
    ``README.md`` (Space front-matter) and a copy of the ``hf_dr`` package beside ``app.py`` (so
    the Space runs this exact code; the bundled sample corpus comes with it)."""
    src = Path(space_dir)
    if not (src / "app.py").is_file() or not (src / "README.md").is_file():
        raise HubError(f"{src} is not a Space folder (app.py and README.md with Space front-matter expected)")
    out = Path(out_dir)
    with _published_folder(out, overwrite, local_inputs(src)) as tmp:
        for f in src.iterdir():
            if f.is_file() and f.suffix in (".py", ".txt", ".md", ".json"):
                shutil.copy2(f, tmp / f.name)
        pkg = Path(__file__).resolve().parent
        shutil.copytree(pkg, tmp / "hf_dr", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        readme = (tmp / "README.md").read_text()
        if _SCREENSHOT.is_file():  # the README's screenshot link points into the repository's docs/
            shutil.copy2(_SCREENSHOT, tmp / _SCREENSHOT.name)
            readme = readme.replace("../../docs/img/search_demo.png", _SCREENSHOT.name)
        (tmp / "README.md").write_text(readme)
    return out


def push_space(repo_id: str | None = None, *, space_dir: str | os.PathLike = SPACE_DIR,
               local_dir: str | os.PathLike | None = None, private: bool = False, token: str | None = None,
               commit_message: str = "Upload with hf-dr push", api=None, overwrite: bool = False) -> str:
    """Deploy the search Space: written to ``local_dir``, or uploaded (one ``upload_folder``) to the
    Space ``repo_id`` (created with ``space_sdk="gradio"``)."""
    return _publish(lambda out, repo_id=None: prepare_space_folder(out, space_dir, overwrite=overwrite), repo_id,
                    local_dir, repo_type="space", private=private, token=token, commit_message=commit_message,
                    api=api, create_kwargs={"space_sdk": "gradio"})
