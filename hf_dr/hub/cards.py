"""Cards — the one place model and dataset cards are made.

Templates live in the repository's ``model_cards/``, which the package reaches through
``hf_dr/templates`` (a link in the source tree, real files in a built wheel, so a plain
``pip install`` has them); ``$HF_DR_MODEL_CARDS`` points at another folder. They are jinja files rendered by
:meth:`huggingface_hub.ModelCard.from_template` / :meth:`~huggingface_hub.DatasetCard.from_template`
with the YAML card data written between the ``---`` lines (:func:`render_card`, :func:`write_card`):
the cards of ``hf-dr push`` (:func:`render_model_card`, :func:`render_dataset_card`), of ``hf-dr
adapt`` and ``hf-dr label``, of the training scripts and the dataset builders all go through it.

What a card says beyond its template's own variables is made here too: the results table and
``model-index`` of ``hf-dr evaluate`` JSON files (:func:`load_metrics`, :func:`metrics_table`), the
usage snippets (plain transformers: :func:`usage_snippet`; Sentence Transformers:
:func:`st_usage_snippet`) and the method's citation.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..io import read_json_or_empty
from .errors import HubError
from ..models.ddr.modeling_ddr import ST_UNSUPPORTED_REASON as _DDR_UNSUPPORTED
from .paths import hub_id

if TYPE_CHECKING:
    from .kinds import ModelKind

__all__ = ["template_path", "render_card", "write_card", "card_template", "load_metrics", "metrics_table",
           "metrics_datasets", "usage_snippet", "st_usage_snippet", "ST_UNSUPPORTED", "render_model_card",
           "render_dataset_card"]

_PKG = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------- templates and rendering
def template_path(name: str) -> Path:
    """The file of card template ``name`` (e.g. ``"ddr_rem.md"``)."""
    for d in (os.environ.get("HF_DR_MODEL_CARDS"), _PKG / "templates"):
        if d and (Path(d) / name).is_file():
            return Path(d) / name
    raise FileNotFoundError(f"card template {name} not found in {os.environ.get('HF_DR_MODEL_CARDS') or _PKG / 'templates'} "
                            "(set HF_DR_MODEL_CARDS to a folder of card templates)")


def card_template(name: str, what: str) -> Path:
    """``model_cards/<name>.md`` (:func:`template_path`), a :class:`HubError` naming ``what`` it was
    for when there is none."""
    try:
        return template_path(f"{name}.md")
    except FileNotFoundError as e:
        raise HubError(f"no card template {name}.md for {what}: {e}") from None


def render_card(template: str | os.PathLike, card_data: Mapping[str, Any] | None = None, *,
                repo_type: str = "model", **variables):
    """Render ``model_cards/<template>.md`` (or the template file ``template``) with ``card_data`` (YAML metadata: ``tags``,
    ``base_model``, ``task_categories``...) and the template's ``variables``; returns the
    :class:`~huggingface_hub.ModelCard` (``repo_type="model"``) or ``DatasetCard``."""
    from huggingface_hub import DatasetCard, DatasetCardData, ModelCard, ModelCardData

    if repo_type not in ("model", "dataset"):
        raise ValueError(f"repo_type must be 'model' or 'dataset', got {repo_type!r}")
    card_cls, data_cls = (ModelCard, ModelCardData) if repo_type == "model" else (DatasetCard, DatasetCardData)
    if isinstance(template, Path) or Path(template).is_file():
        path = Path(template)
    else:
        path = template_path(template if template.endswith(".md") else f"{template}.md")
    return card_cls.from_template(data_cls(**dict(card_data or {})), template_path=str(path), **variables)


def write_card(out_dir: str | os.PathLike, template: str, card_data: Mapping[str, Any] | None = None, *,
               repo_type: str = "model", **variables) -> Path:
    """:func:`render_card` saved as ``out_dir/README.md``; returns that path."""
    path = Path(out_dir) / "README.md"
    render_card(template, card_data, repo_type=repo_type, **variables).save(path)
    return path


# ---------------------------------------------------------------------------- metrics
def load_metrics(paths: Sequence[str | os.PathLike]) -> list[dict]:
    """Read ``metrics.json`` files written by ``hf-dr evaluate --output`` (per-query scores dropped)."""
    rows = []
    for p in paths:
        obj = read_json_or_empty(Path(p))
        if not isinstance(obj.get("metrics"), dict):
            raise HubError(f"{p} is not an hf-dr evaluation JSON (no 'metrics' object); write one with "
                           "`hf-dr evaluate ... --output DIR` (DIR/metrics.json)")
        rows.append({k: v for k, v in obj.items() if k != "per_query"})
    return rows


def _dataset_label(row: dict) -> str:
    """A Hub dataset id as is; a local BEIR folder by its name (paths of this machine mean nothing on the Hub)."""
    data = str(row.get("data", "?"))
    return data if hub_id(data) else Path(data).name


def metrics_table(rows: Sequence[dict]) -> str:
    """A markdown table (dataset, split, retriever, queries, metrics...) of evaluation rows."""
    if not rows:
        return ""
    from ..evaluation import metric_label

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


def metrics_datasets(rows: Sequence[dict]) -> list[str]:
    """The Hub dataset ids the evaluation rows name (a local folder is none)."""
    return sorted({i for i in (hub_id(r.get("data")) for r in rows) if i})


# ---------------------------------------------------------------------------- usage snippets
def usage_snippet(kind: ModelKind, repo_id: str, *, max_query_length: int = 64, max_doc_length: int = 256,
                  prompts: Mapping[str, str] | None = None) -> str:
    """Python that loads the published repo with plain transformers and scores a query against two
    documents (tested: ``tests/test_hub.py`` runs it in a process where hf-dr is not installed);
    the model's ``prompts`` (``query`` / ``document``), when it has any, are prepended as hf-dr does."""
    cls = kind.hooks_class()
    if getattr(cls, "st_native", False):  # a Sentence Transformers folder: its own loader, no remote code
        return st_usage_snippet(repo_id)
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
    "ddr_rem": _DDR_UNSUPPORTED + "; load it with `AutoModel.from_pretrained(..., trust_remote_code=True)` or hf-dr",
}



# ---------------------------------------------------------------------------- a model's card
def _flat_config(model) -> dict:
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "to_dict"):
        return {}
    return {k: v for k, v in cfg.to_dict().items() if not isinstance(v, dict)}


def _citation(paper: dict) -> str:
    """One line naming the paper: authors, *title*, venue (linked when the URL is known)."""
    title = f"[{paper['title']}]({paper['url']})" if paper.get("url") else paper["title"]
    return f"{paper['authors']}. *{title}*. {paper['venue']}."


def _similarity_words(cfg: dict) -> str:
    return "cosine" if cfg.get("similarity") == "cos" else "inner product"


def render_model_card(kind: ModelKind, model, template: Path, out: Path, *, repo_id: str, rows: list[dict],
                      base_model: str | None, datasets: list[str], license: str, language: str | None,
                      info: dict, extra: dict) -> None:
    """Write ``out/README.md``, the card of ``model`` (of ``kind``) published as ``repo_id``: card data
    (base model, datasets, licence, tags, ``model-index`` from the evaluation ``rows``) and the
    variables every template may use, the kind's own first (``card_variables``)."""
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
    from ..models.st_folder import sentence_transformers_class

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


# ---------------------------------------------------------------------------- a dataset's card
def render_dataset_card(dd, out: Path, template: Path, meta: dict, *, repo_id: str,
                        card_vars: Mapping[str, Any] | None = None) -> None:
    """Write ``out/README.md``, the card of the ``DatasetDict`` ``dd`` published as ``repo_id``: the
    YAML ``meta`` and the variables ``repo_id``, ``splits`` (``{split: n_rows}``), ``configs``,
    ``features`` (column -> type), ``n_rows``, ``preview`` (a table), ``pretty_name`` and ``card_vars``."""
    first = next(iter(dd.values()))
    variables = dict(repo_id=repo_id, splits={s: len(ds) for s, ds in dd.items()},
                     configs=[c["config_name"] for c in meta["configs"]],
                     n_rows=sum(len(ds) for ds in dd.values()),
                     features={k: str(v) for k, v in first.features.items()}, preview=_preview(first),
                     pretty_name=meta.get("pretty_name", repo_id.split("/")[-1]), **(card_vars or {}))
    render_card(template, meta, repo_type="dataset", **variables).save(out / "README.md")


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
