"""A folder of documents served by the engine: ingested (:func:`hf_dr.ingest.ingest_stage`, cached by
the listing of its files and the settings) into a corpus of passages, each hit then shown with its
source — the file, the page, the character span (``metadata`` of the passage's line in
``corpus.jsonl``, read for the hits only)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


class NoDocuments(ValueError):
    """A configured folder of documents gave no passage (every file skipped, the reasons named)."""


class PassageSources:
    """``metadata`` (``source``, ``page``, ``start``, ``end``) of the passages of an ingested
    ``corpus.jsonl``, by corpus row: the file's line offsets are kept (8 bytes a passage), a hit's
    line is read when it is shown."""

    def __init__(self, corpus_file: str | Path):
        self.path = Path(corpus_file)
        offsets, at = [], 0
        with open(self.path, "rb") as f:
            for line in f:
                if line.strip():
                    offsets.append(at)
                at += len(line)
        self.offsets = np.asarray(offsets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.offsets)

    def get(self, row: int, doc_id: str) -> dict:
        """The ``metadata`` of the passage at corpus row ``row`` (checked to be ``doc_id``'s line; an
        empty dict for a line without one)."""
        with open(self.path, "rb") as f:
            f.seek(int(self.offsets[row]))
            line = json.loads(f.readline())
        if line.get("_id") != doc_id:
            raise ValueError(f"{self.path}: row {row} is {line.get('_id')!r}, not {doc_id!r} (the corpus changed)")
        meta = line.get("metadata")
        return meta if isinstance(meta, dict) else {}


def is_ingested(folder: str | Path) -> bool:
    """Whether ``folder`` is the output of ``hf-dr ingest`` (its ``ingest.json`` and ``corpus.jsonl``)."""
    p = Path(folder)
    return (p / "ingest.json").is_file() and (p / "corpus.jsonl").is_file()


def ingest_documents(folder: str | Path, *, tokenizer: str | None, max_tokens: int, prompt: str = "") -> Path:
    """The corpus folder of passages of the documents in ``folder`` (ingested once, cached; a re-run
    finds it): :func:`hf_dr.ingest.ingest_stage`. A folder with no usable file is a ``ValueError``
    naming the reasons (:class:`NoDocuments`; the manifest has the detail)."""
    from ..ingest import ingest_stage

    root = Path(folder)
    if not root.is_dir():
        raise NoDocuments(f"{folder} is not a folder of documents")
    if is_ingested(root):
        return root
    out, report = ingest_stage(root, tokenizer=tokenizer, max_tokens=max_tokens, prompt=prompt,
                               show_progress_bar=False)
    if report is not None and not report["passages"]:
        why = "; ".join(f"{k}: {v}" for k, v in report["skipped_by_reason"].items())
        raise NoDocuments(f"{folder} holds no usable document ({report['files']} file(s), all skipped: {why})")
    return out


def load_passages(folder: str | Path):
    """An ingested corpus folder as ``(BeirData without queries, PassageSources)``."""
    from ..data.beir import load_corpus_data

    data = load_corpus_data(folder)
    sources = PassageSources(Path(folder) / "corpus.jsonl")
    if len(sources) != len(data.corpus):
        raise ValueError(f"{folder}: corpus.jsonl holds {len(sources)} lines, its table {len(data.corpus)} rows")
    return data, sources
