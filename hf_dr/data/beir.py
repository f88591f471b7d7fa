"""BEIR folders <-> ``datasets``.

A BEIR folder holds ``corpus.jsonl`` ({"_id", "title", "text"}), ``queries.jsonl``
({"_id", "text"}) and ``qrels/<split>.tsv`` (header ``query-id corpus-id score``).
:func:`load_beir` reads one (or a Hub dataset id such as ``BeIR/scifact`` /
``mteb/scifact``) into :class:`BeirData`; :func:`save_beir` writes one back.
Bad input raises :class:`BeirFormatError` naming the file and line.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset

logger = logging.getLogger(__name__)

__all__ = ["BeirData", "BeirFormatError", "load_beir", "save_beir", "load_qrels", "save_qrels",
           "SELF_MATCH_DATASETS", "iter_corpus"]

Qrels = dict[str, dict[str, int]]

#: the bundled sample: 500 SciFact abstracts, 50 test claims (CC BY-NC 2.0, see its README)
SAMPLE = Path(__file__).resolve().parent / "sample" / "scifact-mini"

#: datasets whose queries also appear in the corpus: evaluate with self-matches removed.
SELF_MATCH_DATASETS = ("arguana", "quora", "cqadupstack")


class BeirFormatError(ValueError):
    """A BEIR file is malformed; the message names the file and line."""


@dataclass
class BeirData:
    """A BEIR dataset: ``corpus`` (columns ``_id, title, text``), ``queries`` (``_id, text``),
    ``qrels`` ``{qid: {docid: grade}}`` for ``split``. ``name`` is the folder / Hub id."""

    corpus: Dataset
    queries: Dataset
    qrels: Qrels
    split: str | None = None
    name: str = ""
    n_unknown_qrels: int = 0
    _doc_index: dict | None = field(default=None, repr=False)

    @property
    def ignore_identical_ids(self) -> bool:
        """True for datasets (ArguAna, Quora) whose queries are also documents."""
        base = os.path.basename(str(self.name).rstrip("/")).lower()
        return any(k in base for k in SELF_MATCH_DATASETS)

    def doc_ids(self) -> list[str]:
        return list(self.corpus["_id"])

    def doc_texts(self) -> list[str]:
        """``title + " " + text`` stripped, BEIR's joining, in corpus order."""
        return [(t + " " + x).strip() for t, x in zip(self.corpus["title"], self.corpus["text"])]

    def split_queries(self) -> dict[str, str]:
        """``{qid: text}`` for the queries that have judgments in ``split`` (all when no qrels)."""
        q = dict(zip(self.queries["_id"], self.queries["text"]))
        if not self.qrels:
            return q
        return {qid: q[qid] for qid in self.qrels if qid in q}

    def doc(self, doc_id: str) -> dict:
        if self._doc_index is None:
            self._doc_index = {d: i for i, d in enumerate(self.corpus["_id"])}
        return self.corpus[self._doc_index[doc_id]]


def _read_jsonl(path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Iterator[dict]:
    seen: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise BeirFormatError(f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(row, dict):
                raise BeirFormatError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            missing = [c for c in required if c not in row]
            if missing:
                raise BeirFormatError(f"{path}:{lineno}: missing column(s) {missing} (has {sorted(row)})")
            rid = str(row["_id"])
            if rid in seen:
                raise BeirFormatError(f"{path}:{lineno}: duplicate _id {rid!r}")
            seen.add(rid)
            out = {"_id": rid}
            for c in required[1:] + optional:
                v = row.get(c)
                out[c] = "" if v is None else str(v)
            yield out


def load_qrels(path: str | os.PathLike) -> Qrels:
    """Read a BEIR qrels TSV (header optional, CRLF tolerated) or a TREC qrels file
    (``qid 0 docid grade``)."""
    path = Path(path)
    qrels: Qrels = {}
    with open(path, encoding="utf-8", newline="") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t") if "\t" in line else line.split()
            if lineno == 1 and parts[0].lower() in ("query-id", "query_id", "qid"):
                continue
            if len(parts) == 4:  # TREC format: qid iter docid grade
                parts = [parts[0], parts[2], parts[3]]
            if len(parts) != 3:
                raise BeirFormatError(f"{path}:{lineno}: expected 3 tab-separated fields (query-id corpus-id score), got {len(parts)}")
            qid, did, score = parts
            try:
                grade = int(float(score))
            except ValueError:
                raise BeirFormatError(f"{path}:{lineno}: score {score!r} is not a number") from None
            qrels.setdefault(qid.strip(), {})[did.strip()] = grade
    return qrels


def save_qrels(qrels: Qrels, path: str | os.PathLike) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["query-id", "corpus-id", "score"])
        for qid, docs in qrels.items():
            for did, g in docs.items():
                w.writerow([qid, did, g])


def _load_local(path: Path, split: str | None) -> BeirData:
    corpus_file, queries_file = path / "corpus.jsonl", path / "queries.jsonl"
    for f in (corpus_file, queries_file):
        if not f.is_file():
            raise BeirFormatError(f"{path} is not a BEIR folder: {f.name} is missing "
                                  "(expected corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
    corpus_rows = list(_read_jsonl(corpus_file, ("_id", "text"), ("title",)))
    if not corpus_rows:
        raise BeirFormatError(f"{corpus_file}: the corpus is empty")
    query_rows = list(_read_jsonl(queries_file, ("_id", "text")))
    corpus = Dataset.from_list([{"_id": r["_id"], "title": r.get("title", ""), "text": r["text"]} for r in corpus_rows])
    queries = Dataset.from_list([{"_id": r["_id"], "text": r["text"]} for r in query_rows]) if query_rows \
        else Dataset.from_dict({"_id": [], "text": []})
    qrels: Qrels = {}
    if split is not None:
        qfile = path / "qrels" / f"{split}.tsv"
        if not qfile.is_file():
            avail = sorted(p.stem for p in (path / "qrels").glob("*.tsv")) if (path / "qrels").is_dir() else []
            raise BeirFormatError(f"{qfile} not found; splits available: {avail or 'none'}")
        qrels = load_qrels(qfile)
    data = BeirData(corpus, queries, qrels, split=split, name=str(path))
    data.n_unknown_qrels = _check_qrels(data, qfile if split is not None else path)
    return data


def _check_qrels(data: BeirData, where) -> int:
    """Drop nothing, but count and warn about qrels naming unknown queries / documents."""
    doc_ids = set(data.corpus["_id"])
    q_ids = set(data.queries["_id"])
    unknown_docs = sum(1 for docs in data.qrels.values() for d in docs if d not in doc_ids)
    unknown_q = sum(1 for q in data.qrels if q not in q_ids)
    if unknown_docs or unknown_q:
        warnings.warn(f"{where}: {unknown_docs} judgment(s) name documents missing from the corpus and "
                      f"{unknown_q} name unknown queries; they count as relevant-but-unretrievable",
                      stacklevel=3)
    return unknown_docs + unknown_q


def _load_hub(repo_id: str, split: str | None) -> BeirData:
    """Load a BEIR mirror from the Hub (``BeIR/<name>`` + ``BeIR/<name>-qrels``, or ``mteb/<name>``)."""
    from datasets import load_dataset

    if repo_id.startswith("BeIR/"):
        corpus = load_dataset(repo_id, "corpus", split="corpus")
        queries = load_dataset(repo_id, "queries", split="queries")
        qrels_ds = load_dataset(f"{repo_id}-qrels", split=split) if split else None
    else:
        corpus = load_dataset(repo_id, "corpus", split="corpus")
        queries = load_dataset(repo_id, "queries", split="queries")
        qrels_ds = load_dataset(repo_id, "default", split=split) if split else None
    corpus = corpus.map(lambda r: {"_id": str(r["_id"]), "title": r.get("title") or "", "text": r.get("text") or ""},
                        remove_columns=[c for c in corpus.column_names if c not in ("_id", "title", "text")])
    queries = queries.map(lambda r: {"_id": str(r["_id"]), "text": r["text"]},
                          remove_columns=[c for c in queries.column_names if c not in ("_id", "text")])
    qrels: Qrels = {}
    if qrels_ds is not None:
        for r in qrels_ds:
            qrels.setdefault(str(r["query-id"]), {})[str(r["corpus-id"])] = int(r["score"])
    data = BeirData(corpus, queries, qrels, split=split, name=repo_id)
    data.n_unknown_qrels = _check_qrels(data, repo_id)
    return data


def load_beir(path_or_id: str | os.PathLike, split: str | None = "test") -> BeirData:
    """Load a BEIR folder, or a Hub dataset id when no such folder exists.

    ``split=None`` loads corpus and queries only. Raises :class:`BeirFormatError` for a
    malformed folder (file and line in the message).
    """
    p = Path(path_or_id)
    if p.is_dir():
        return _load_local(p, split)
    s = str(path_or_id)
    if p.exists():
        raise BeirFormatError(f"{s} is a file, not a BEIR folder")
    if s.count("/") == 1 and not s.startswith((".", "/")):
        return _load_hub(s, split)
    raise BeirFormatError(f"{s}: no such BEIR folder (and not a Hub dataset id of the form owner/name)")


def iter_corpus(source: BeirData | str | os.PathLike, batch_size: int = 10_000) -> Iterator[tuple[str, str]]:
    """``(doc_id, text)`` of a corpus in order, text joined as :meth:`BeirData.doc_texts` does,
    read lazily: a BEIR folder's ``corpus.jsonl`` line by line (malformed lines raise
    :class:`BeirFormatError` with file and line), a :class:`BeirData` / Hub id batch by batch."""
    if not isinstance(source, BeirData):
        p = Path(source)
        if p.is_dir():
            corpus_file = p / "corpus.jsonl"
            if not corpus_file.is_file():
                raise BeirFormatError(f"{p} is not a BEIR folder: corpus.jsonl is missing")
            n = 0
            for row in _read_jsonl(corpus_file, ("_id", "text"), ("title",)):
                n += 1
                yield row["_id"], (row.get("title", "") + " " + row["text"]).strip()
            if n == 0:
                raise BeirFormatError(f"{corpus_file}: the corpus is empty")
            return
        source = load_beir(source, split=None)
    for batch in source.corpus.iter(batch_size=batch_size):
        for d, t, x in zip(batch["_id"], batch["title"], batch["text"]):
            yield str(d), ((t or "") + " " + (x or "")).strip()


def save_beir(data: BeirData, path: str | os.PathLike) -> Path:
    """Write ``data`` as a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "corpus.jsonl", "w", encoding="utf-8") as f:
        for r in data.corpus:
            f.write(json.dumps({"_id": r["_id"], "title": r["title"], "text": r["text"]}, ensure_ascii=False) + "\n")
    with open(path / "queries.jsonl", "w", encoding="utf-8") as f:
        for r in data.queries:
            f.write(json.dumps({"_id": r["_id"], "text": r["text"]}, ensure_ascii=False) + "\n")
    if data.qrels and data.split:
        save_qrels(data.qrels, path / "qrels" / f"{data.split}.tsv")
    return path
