"""Publishing a passage corpus: the folder ``hf-dr ingest`` writes (``corpus.jsonl`` of passages with
their source, ``manifest.jsonl``, ``ingest.json``) as a dataset repo in the layout of BEIR's Hub
mirrors — config ``corpus`` (split ``corpus``: ``_id, title, text, metadata{source, page, start,
end}``), ``queries`` and the judgments (config ``default``, one split per ``qrels/<split>.tsv``) where
the folder has them — with the manifest, the settings and a card that says where the passages come
from: the files and their formats, how many passages, what was skipped and why, and how they were
cut (the tokenizer, the window, the overlap)."""

from __future__ import annotations

import json
from pathlib import Path

from ..io import read_json_or_empty
from .cards import card_template, render_dataset_card
from .paths import public_name, public_values

__all__ = ["is_passage_corpus", "write_passage_corpus"]

#: the files of an ingest folder that make it one
INGEST_FILES = ("ingest.json", "corpus.jsonl")
#: source files listed by name in the card (the manifest lists them all)
LISTED_SOURCES = 20


def is_passage_corpus(data) -> bool:
    """Whether ``data`` is a folder written by ``hf-dr ingest`` (or its stage of ``evaluate --data``)."""
    try:
        p = Path(data)
    except TypeError:
        return False
    return all((p / f).is_file() for f in INGEST_FILES)


def _splits(src: Path) -> dict:
    """``{split: Dataset}``: the passages, the queries and each qrels file of ``src`` (those it has)."""
    from datasets import Dataset, Features, Value

    from ..data import load_qrels

    meta = {"source": Value("string"), "page": Value("int64"), "start": Value("int64"), "end": Value("int64")}
    features = Features({"_id": Value("string"), "title": Value("string"), "text": Value("string"), "metadata": meta})
    out = {"corpus": Dataset.from_json(str(src / "corpus.jsonl"), features=features)}
    if (src / "queries.jsonl").is_file():
        rows = [json.loads(line) for line in (src / "queries.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
        out["queries"] = Dataset.from_dict({"_id": [str(r["_id"]) for r in rows], "text": [r["text"] for r in rows]})
    for f in sorted((src / "qrels").glob("*.tsv")) if (src / "qrels").is_dir() else []:
        qrels = load_qrels(f)
        pairs = [(q, d, g) for q, docs in qrels.items() for d, g in docs.items()]
        out[f.stem] = Dataset.from_dict({"query-id": [q for q, _, _ in pairs], "corpus-id": [d for _, d, _ in pairs],
                                         "score": [g for _, _, g in pairs]})
    return out


def _configs(splits: dict) -> list[dict]:
    """BEIR's Hub layout: ``corpus`` and ``queries`` configs, the judgments as ``default``."""
    configs = [{"config_name": name, "data_files": [{"split": name, "path": f"data/{name}.parquet"}]}
               for name in ("corpus", "queries") if name in splits]
    judged = [s for s in splits if s not in ("corpus", "queries")]
    if judged:
        configs.append({"config_name": "default",
                        "data_files": [{"split": s, "path": f"data/qrels-{s}.parquet"} for s in judged]})
    return configs


def _card_vars(report: dict, manifest: list[dict]) -> dict:
    """What the card says of the ingest: its settings (the tokenizer by its public name) and counts,
    the formats of the files read, the first :data:`LISTED_SOURCES` files."""
    read = [e for e in manifest if e.get("status") == "ingested"]
    formats: dict[str, int] = {}
    for e in read:
        formats[e.get("format") or "text"] = formats.get(e.get("format") or "text", 0) + 1
    return dict(files=report.get("files", len(manifest)), ingested=report.get("ingested", len(read)),
                skipped=report.get("skipped", len(manifest) - len(read)), passages=report.get("passages"),
                pages=report.get("pages") or 0, skipped_by_reason=report.get("skipped_by_reason") or {},
                formats=dict(sorted(formats.items(), key=lambda kv: (-kv[1], kv[0]))),
                sources=read[:LISTED_SOURCES], more_sources=max(0, len(read) - LISTED_SOURCES),
                tokenizer=public_name(report.get("tokenizer")), max_tokens=report.get("max_tokens"),
                overlap=report.get("overlap"), prompt=report.get("prompt") or "",
                text_column=report.get("text_column"),
                dataset={**report["dataset"], "source": public_name(report["dataset"].get("source"))}
                if isinstance(report.get("dataset"), dict) else None)


def write_passage_corpus(src: Path, out: Path, *, repo_id: str, template: str | None, card_data: dict | None,
                         license: str) -> None:
    """Write the repo folder of the passage corpus ``src`` (an ``hf-dr ingest`` folder) into ``out``:
    ``data/*.parquet``, ``manifest.jsonl``, ``ingest.json`` (local paths replaced by their names) and
    the card (template ``dataset_passages``)."""
    from datasets import DatasetDict

    report = read_json_or_empty(src / "ingest.json")
    manifest_file = src / "manifest.jsonl"
    manifest = [json.loads(line) for line in manifest_file.read_text(encoding="utf-8").splitlines()
                if line.strip()] if manifest_file.is_file() else []
    splits = _splits(src)
    (out / "data").mkdir(parents=True)
    for name, ds in splits.items():
        ds.to_parquet(str(out / "data" / (f"{name}.parquet" if name in ("corpus", "queries") else
                                          f"qrels-{name}.parquet")))
    if manifest_file.is_file():
        (out / "manifest.jsonl").write_bytes(manifest_file.read_bytes())
    public = public_values({**report, "tokenizer": public_name(report.get("tokenizer"))})
    (out / "ingest.json").write_text(json.dumps(public, indent=1, ensure_ascii=False))
    name = repo_id.split("/")[-1]
    meta = {"license": license, "task_categories": ["text-retrieval"], "tags": ["hf-dr", "passages", "beir"],
            "pretty_name": name, "configs": _configs(splits), **(card_data or {})}
    render_dataset_card(DatasetDict(splits), out, card_template(template or "dataset_passages", "passage corpora"),
                        meta, repo_id=repo_id, card_vars=_card_vars(report, manifest))
