"""BEIR folders <-> ``datasets``.

A BEIR folder holds ``corpus.jsonl`` ({"_id", "title", "text"}), ``queries.jsonl``
({"_id", "text"}) and ``qrels/<split>.tsv`` (header ``query-id corpus-id score``).
:func:`load_beir` reads one (or a Hub dataset id such as ``BeIR/scifact`` /
``mteb/scifact``) into :class:`BeirData`; :func:`save_beir` writes one back.
Bad input raises :class:`BeirFormatError` naming the file and line.

A local folder's ``corpus.jsonl`` and ``queries.jsonl`` are read once, validated line by line,
and written as Arrow files into a cache keyed by their content (:func:`cache_root`); every later
load memory-maps those files (``datasets.Dataset.from_file``): the documents stay on disk and are
paged in as they are read, so holding a corpus costs no memory of its size. A changed file has
another content hash, hence a new cache entry.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset

from ..fingerprints import CorpusHash, corpus_fingerprint

logger = logging.getLogger(__name__)

__all__ = ["BeirData", "BeirFormatError", "BeirSourceError", "load_beir", "looks_local", "parse_grade", "save_beir",
           "load_qrels", "save_qrels", "judged_query_ids",
           "iter_corpus", "has_split", "load_training_queries", "load_corpus", "load_corpus_data", "cache_root",
           "corpus_fingerprint"]

Qrels = dict[str, dict[str, int]]

#: the bundled sample: 500 SciFact abstracts, 50 test claims (CC BY-NC 2.0, see its README)
SAMPLE = Path(__file__).resolve().parent / "sample" / "scifact-mini"


class BeirFormatError(ValueError):
    """A BEIR file is malformed; the message names the file and line."""


class BeirSourceError(BeirFormatError):
    """The folder does not exist, or the Hub dataset cannot be found or reached."""


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
    #: ``(the corpus Dataset, its fingerprint)``: a corpus replaced later (``data.corpus = ...select(...)``)
    #: is fingerprinted again
    _fingerprint: tuple | None = field(default=None, repr=False)

    def doc_ids(self) -> list[str]:
        return list(self.corpus["_id"])

    def iter_docs(self, batch_size: int = 10_000) -> Iterator[tuple[str, str]]:
        """``(doc_id, text)`` in corpus order, read batch by batch from the (memory-mapped) corpus."""
        return iter_corpus(self, batch_size=batch_size)

    def corpus_fingerprint(self) -> str:
        """The hash of every id and text of the corpus (:class:`CorpusHash`, what an embeddings folder
        or a saved index records): read from the cache of a local folder, computed once otherwise."""
        if self._fingerprint is None or self._fingerprint[0] is not self.corpus:
            self._fingerprint = (self.corpus, corpus_fingerprint(self.iter_docs()))
        return self._fingerprint[1]

    def rows_of(self, doc_ids: Sequence[str]) -> list[int | None]:
        """The corpus row of each id (``None`` for an id the corpus lacks), looked up in the Arrow
        column (no per-document Python object is made)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not doc_ids:
            return []
        return pc.index_in(pa.array(list(doc_ids), pa.string()), value_set=_id_column(self.corpus)).to_pylist()

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


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 file, split on ``\n`` only (``\r\n`` tolerated, a BOM
    at the start dropped); bytes that are not UTF-8 raise :class:`BeirFormatError` with the line."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise BeirFormatError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                      f"{e.start + 1})") from None
            yield lineno, line.rstrip("\r\n")


def _utf8(text: str, path: Path, lineno: int, column: str) -> str:
    """``text`` when it can be written as UTF-8 (a JSON escape such as ``\\ud800`` makes an
    unpaired surrogate, which Arrow and every writer refuse)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BeirFormatError(f"{path}:{lineno}: {column} holds an unpaired surrogate "
                              f"{text[e.start]!r} (a \\ud800-\\udfff escape) at character {e.start + 1}") from None
    return text


def _check_id(value, path: Path, lineno: int, column: str = "_id") -> str:
    """A document / query id: a non-empty string (or integer) without whitespace, which the qrels
    TSV and TREC run files could not hold."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BeirFormatError(f"{path}:{lineno}: {column} must be a string, got {type(value).__name__} {value!r:.60}")
    rid = _utf8(str(value), path, lineno, column)
    if not rid:
        raise BeirFormatError(f"{path}:{lineno}: {column} is empty")
    # whitespace or control characters: every Unicode whitespace but the ASCII space is non-printable
    # (a separator or a control), so two C-level scans say it (ids are checked by the million)
    if not rid.isprintable() or " " in rid:
        raise BeirFormatError(f"{path}:{lineno}: {column} {rid!r:.60} contains whitespace or control characters "
                              "(qrels and TREC run files separate fields with them)")
    return rid


def _read_jsonl(path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Iterator[dict]:
    seen: set[str] = set()
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BeirFormatError(f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
        except ValueError as e:  # e.g. an integer of more than 4300 digits
            raise BeirFormatError(f"{path}:{lineno}: malformed JSON ({e})") from None
        except RecursionError:
            raise BeirFormatError(f"{path}:{lineno}: malformed JSON (nested too deeply)") from None
        if not isinstance(row, dict):
            raise BeirFormatError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        missing = [c for c in required if c not in row]
        if missing:
            raise BeirFormatError(f"{path}:{lineno}: missing column(s) {missing} (has {sorted(row)[:10]})")
        rid = _check_id(row["_id"], path, lineno)
        if rid in seen:
            raise BeirFormatError(f"{path}:{lineno}: duplicate _id {rid!r}")
        seen.add(rid)
        out = {"_id": rid}
        surrogates = "\\ud" in line or "\\uD" in line  # the only way a decoded line holds one
        for c in required[1:] + optional:
            v = row.get(c)
            if v is not None and not isinstance(v, str):
                raise BeirFormatError(f"{path}:{lineno}: {c} must be a string, got {type(v).__name__} {v!r:.60}")
            out[c] = _utf8(v or "", path, lineno, c) if surrogates else v or ""
        yield out


_INT = re.compile(r"[+-]?[0-9]+(?:\.0*)?")
#: grades beyond a C int would overflow pytrec_eval
_MAX_GRADE = 2**31 - 1


def parse_grade(score, where: str) -> int:
    """A relevance grade: an integer (``1.0`` is read as 1). Fractions, ``inf``, ``nan``, words and
    grades beyond ±2^31 raise :class:`BeirFormatError` naming ``where`` (file:line) and the value."""
    if isinstance(score, bool):
        raise BeirFormatError(f"{where}: grade {score!r} is not an integer")
    if isinstance(score, float):
        if not (math.isfinite(score) and score.is_integer()):
            raise BeirFormatError(f"{where}: grade {score!r} is not an integer (relevance grades are 0, 1, 2...)")
        score = int(score)
    if isinstance(score, int):
        grade = score
    else:
        text = str(score).strip()
        if not _INT.fullmatch(text):
            try:
                float(text)
            except ValueError:
                raise BeirFormatError(f"{where}: score {text!r:.60} is not a number") from None
            raise BeirFormatError(f"{where}: grade {text!r:.60} is not an integer (relevance grades are 0, 1, 2...)")
        grade = int(text.split(".")[0])
    if abs(grade) > _MAX_GRADE:
        raise BeirFormatError(f"{where}: grade {grade} is out of range (at most {_MAX_GRADE})")
    return grade


def _qrels_lines(path: Path) -> Iterator[tuple[int, str, str, str]]:
    """``(line number, query-id, corpus-id, score text)`` of each judgment of a qrels file: the one
    qrels line parser. Fields are tab-separated (BEIR) or, on a line without tabs, separated by
    whitespace (TREC); a header is skipped; the TREC format's four fields ``qid iter docid grade``
    lose their second. Ids are checked (:func:`_check_id`), grades are not (``score text``)."""
    first = True
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        if first and parts[0].strip().lower() in ("query-id", "query_id", "qid"):
            first = False
            continue
        first = False
        if len(parts) == 4:  # TREC format: qid iter docid grade
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3:
            raise BeirFormatError(f"{path}:{lineno}: expected 3 tab-separated fields (query-id corpus-id score), "
                                  f"got {len(parts)}")
        yield (lineno, _check_id(parts[0].strip(), path, lineno, "query-id"),
               _check_id(parts[1].strip(), path, lineno, "corpus-id"), parts[2])


def load_qrels(path: str | os.PathLike) -> Qrels:
    """Read a BEIR qrels TSV (header optional, CRLF tolerated) or a TREC qrels file
    (``qid 0 docid grade``, or three whitespace-separated fields). Grades must be integers (``1.0``
    reads as 1); anything else raises :class:`BeirFormatError` naming the file, line and value."""
    path = Path(path)
    qrels: Qrels = {}
    for lineno, qid, did, score in _qrels_lines(path):
        grade = parse_grade(score, f"{path}:{lineno}")
        docs = qrels.setdefault(qid, {})
        if did in docs and docs[did] != grade:
            raise BeirFormatError(f"{path}:{lineno}: query {qid!r} judges document {did!r} twice, "
                                  f"with grades {docs[did]} and {grade}")
        docs[did] = grade
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


#: bumped when the layout of the cached Arrow files changes
_CACHE_FORMAT = 1
_COLUMNS = {"corpus": ("_id", "title", "text"), "queries": ("_id", "text")}


def cache_root() -> Path:
    """Where BEIR files are cached as Arrow: ``$HF_DR_DATA_CACHE``, else ``hf_dr/beir`` in the
    ``datasets`` cache (``$HF_DATASETS_CACHE``, by default ``~/.cache/huggingface/datasets``)."""
    env = os.environ.get("HF_DR_DATA_CACHE")
    if env:
        return Path(env).expanduser()
    from datasets import config

    return Path(config.HF_DATASETS_CACHE) / "hf_dr" / "beir"


def _content_key(path: Path) -> str:
    """A hash of a file's bytes (xxh3-128: gigabytes a second), the key of its cache entry."""
    import xxhash

    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def _write_arrow(source: Path, kind: str, folder: Path) -> dict:
    """Validate ``source`` line by line (:func:`_read_jsonl`: errors name the file and line) and
    write it as ``folder/data.arrow`` + ``meta.json`` (written last, through renames: a killed
    process leaves no entry that looks complete)."""
    from datasets import Features, Value
    from datasets.arrow_writer import ArrowWriter
    from tqdm.auto import tqdm

    cols = _COLUMNS[kind]
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".data.arrow.{os.getpid()}.tmp"
    fp = CorpusHash() if kind == "corpus" else None
    big = source.stat().st_size > 64 << 20
    writer = ArrowWriter(features=Features({c: Value("string") for c in cols}), path=str(tmp), writer_batch_size=10_000)
    n = 0
    try:
        batch: dict[str, list] = {c: [] for c in cols}
        with tqdm(desc=f"Reading {source.name} (once: cached as Arrow)", unit="doc" if fp else "query",
                  disable=not big) as bar:
            for row in _read_jsonl(source, ("_id", "text"), ("title",) if kind == "corpus" else ()):
                for c in cols:
                    batch[c].append(row.get(c, ""))
                if fp is not None:
                    fp.update(row["_id"], (row.get("title", "") + " " + row["text"]).strip())
                n += 1
                if len(batch["_id"]) == 10_000:
                    writer.write_batch(batch)
                    batch = {c: [] for c in cols}
                    bar.update(10_000)
            if batch["_id"]:
                writer.write_batch(batch)
                bar.update(len(batch["_id"]))
        if kind == "corpus" and n == 0:
            raise BeirFormatError(f"{source}: the corpus is empty")
        writer.finalize()
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    writer.close()
    os.replace(tmp, folder / "data.arrow")
    meta = {"format": _CACHE_FORMAT, "kind": kind, "rows": n, **({"corpus_fingerprint": fp.hexdigest()} if fp else {})}
    mtmp = folder / f".meta.json.{os.getpid()}.tmp"
    mtmp.write_text(json.dumps(meta))
    os.replace(mtmp, folder / "meta.json")
    return meta


def _cached_table(source: Path, kind: str) -> tuple[Dataset, dict]:
    """``source`` (a corpus or queries JSONL) as a memory-mapped ``Dataset``, and its cache entry's
    metadata (rows; the corpus fingerprint). Read and validated once per content."""
    folder = cache_root() / f"{kind}-{_content_key(source)}"
    meta_file, data_file = folder / "meta.json", folder / "data.arrow"
    if meta_file.is_file() and data_file.is_file():
        try:
            meta = json.loads(meta_file.read_text())
            ds = Dataset.from_file(str(data_file))  # memory-mapped, not read
            if meta.get("format") == _CACHE_FORMAT and meta.get("rows") == len(ds) and \
                    tuple(ds.column_names) == _COLUMNS[kind]:
                return ds, meta
        except (OSError, ValueError, KeyError) as e:
            logger.warning("%s: damaged cache entry (%s): reading %s again", folder, e, source)
    meta = _write_arrow(source, kind, folder)
    return Dataset.from_file(str(data_file)), meta


def load_corpus(path: str | os.PathLike) -> tuple[Dataset, str]:
    """The corpus of a BEIR folder (``_id, title, text``) as a memory-mapped ``Dataset`` and its
    fingerprint (:class:`CorpusHash`); validated and converted to Arrow once per content of
    ``corpus.jsonl`` (:func:`cache_root`). Only ``corpus.jsonl`` is needed."""
    p = Path(path)
    corpus_file = p / "corpus.jsonl"
    if not corpus_file.is_file():
        raise BeirFormatError(f"{p} is not a BEIR folder: corpus.jsonl is missing")
    ds, meta = _cached_table(corpus_file, "corpus")
    if len(ds) == 0:
        raise BeirFormatError(f"{corpus_file}: the corpus is empty")
    return ds, meta["corpus_fingerprint"]


def _id_column(ds: Dataset):
    """The ``_id`` column of a dataset as a pyarrow array (zero-copy when it is memory-mapped)."""
    if getattr(ds, "_indices", None) is None:
        return ds.data.column("_id")
    return ds.with_format("arrow")["_id"]


def _present(ds: Dataset, ids: set[str]) -> set[str]:
    """Those of ``ids`` that are ``_id`` values of ``ds`` (a scan of the Arrow column against the
    small set ``ids``: nothing of the dataset's size is made in Python)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not ids or len(ds) == 0:
        return set()
    col = _id_column(ds)
    return set(col.filter(pc.is_in(col, value_set=pa.array(sorted(ids), pa.string()))).to_pylist())


def _load_local(path: Path, split: str | None) -> BeirData:
    corpus_file, queries_file = path / "corpus.jsonl", path / "queries.jsonl"
    for f in (corpus_file, queries_file):
        if not f.is_file():
            raise BeirFormatError(f"{path} is not a BEIR folder: {f.name} is missing "
                                  "(expected corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
    corpus, fingerprint = load_corpus(path)
    queries, _ = _cached_table(queries_file, "queries")
    qrels: Qrels = {}
    if split is not None:
        qfile = path / "qrels" / f"{split}.tsv"
        if not qfile.is_file():
            avail = sorted(p.stem for p in (path / "qrels").glob("*.tsv")) if (path / "qrels").is_dir() else []
            raise BeirFormatError(f"{qfile} not found; splits available: {avail or 'none'}")
        qrels = load_qrels(qfile)
    data = BeirData(corpus, queries, qrels, split=split, name=str(path), _fingerprint=(corpus, fingerprint))
    data.n_unknown_qrels = _check_qrels(data, qfile if split is not None else path)
    return data


def _check_qrels(data: BeirData, where) -> int:
    """Drop nothing, but count and warn about qrels naming unknown queries / documents."""
    judged_docs = {d for docs in data.qrels.values() for d in docs}
    doc_ids = _present(data.corpus, judged_docs)
    q_ids = _present(data.queries, set(data.qrels))
    unknown = {d for d in judged_docs if d not in doc_ids}
    # documents held as passages (<doc>#<n>, hf-dr ingest): evaluation scores their passages as them
    as_passages = {p.rpartition("#")[0] for p in _present(data.corpus, {d + "#0" for d in unknown})}
    unknown_docs = sum(1 for docs in data.qrels.values() for d in docs if d in unknown and d not in as_passages)
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
            qrels.setdefault(str(r["query-id"]), {})[str(r["corpus-id"])] = \
                parse_grade(r["score"], f"{repo_id} qrels ({split}), query {r['query-id']!r}")
    data = BeirData(corpus, queries, qrels, split=split, name=repo_id)
    data.n_unknown_qrels = _check_qrels(data, repo_id)
    return data


def looks_local(path_or_id: str | os.PathLike) -> bool:
    """True when ``path_or_id`` can only mean a local path, never a Hub id ``owner/name``: it
    starts with ``.``, ``/`` or ``~``, holds a backslash / OS separator or several slashes, is not
    made of Hub id characters, or its first component exists here."""
    s = os.fspath(path_or_id)
    if not s or s.startswith((".", "/", "~")) or "\\" in s or (os.sep != "/" and os.sep in s):
        return True
    if os.path.splitdrive(s)[0]:
        return True
    if not _HUB_ID.fullmatch(s) or ".." in s or "--" in s:
        return True
    return "/" in s and os.path.exists(s.split("/", 1)[0])


#: a Hub repo id: ``name`` or ``owner/name``, letters, digits, ``-``, ``_`` and ``.``, at most 96 each
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(?:/[A-Za-z0-9][\w.-]{0,95})?")


def _hub_error(repo_id: str, e: BaseException) -> BeirSourceError:
    """One line for a Hub dataset that cannot be loaded (offline, unreachable, not found)."""
    name = type(e).__name__
    text = str(e)
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") or "Offline" in name + text:
        why = "HF_HUB_OFFLINE is set and it is not in the local cache"
    elif "NotFound" in name or "404" in text or isinstance(e, FileNotFoundError):
        why = "no such dataset on the Hub (or it is private / gated)"
    else:
        why = f"the Hub cannot be reached ({name})"
    return BeirSourceError(f"{repo_id}: no such local folder, and the Hub dataset {repo_id!r} cannot be loaded: {why}")


def load_beir(path_or_id: str | os.PathLike, split: str | None = "test") -> BeirData:
    """Load a BEIR folder, or a Hub dataset id when no such folder exists.

    ``split=None`` loads corpus and queries only. Raises :class:`BeirFormatError` for a
    malformed folder (file and line in the message), :class:`BeirSourceError` (a
    :class:`BeirFormatError`) for a folder that does not exist or a Hub dataset that cannot be
    loaded. A path that looks local (see :func:`looks_local`) is never sent to the Hub.
    """
    s = os.fspath(path_or_id)
    p = Path(s).expanduser()
    if p.is_dir():
        return _load_local(p, split)
    if p.exists():
        raise BeirFormatError(f"{s} is a file, not a BEIR folder")
    if looks_local(s) or "/" not in s:
        raise BeirSourceError(f"{s}: no such BEIR folder" + (
            "" if looks_local(s) else " (and not a Hub dataset id of the form owner/name)"))
    try:
        return _load_hub(s, split)
    except BeirFormatError:
        raise
    except (ConnectionError, OSError, TimeoutError) as e:  # offline, unreachable, 404 (FileNotFoundError)
        raise _hub_error(s, e) from None
    except Exception as e:
        if "huggingface_hub" in type(e).__module__ or "NotFound" in type(e).__name__:
            raise _hub_error(s, e) from None
        raise


def load_corpus_data(path_or_id: str | os.PathLike) -> BeirData:
    """The corpus alone, as a :class:`BeirData` without queries or qrels: a local folder's
    ``corpus.jsonl`` (memory-mapped, :func:`load_corpus`; nothing else is read, nor needed), or a Hub
    dataset's corpus. For queries made from the corpus (:mod:`hf_dr.generation`)."""
    from datasets import Features, Value

    p = Path(os.fspath(path_or_id)).expanduser()
    empty = Dataset.from_dict({"_id": [], "text": []}, features=Features({"_id": Value("string"),
                                                                          "text": Value("string")}))
    if p.is_dir():
        corpus, fingerprint = load_corpus(p)
        return BeirData(corpus, empty, {}, split=None, name=str(p), _fingerprint=(corpus, fingerprint))
    data = load_beir(path_or_id, split=None)
    data.queries = empty
    return data


def has_split(path_or_id: str | os.PathLike, split: str) -> bool:
    """Whether a local BEIR folder has ``qrels/<split>.tsv`` (checked without reading it). A Hub id
    is assumed to have the split (loading it says otherwise)."""
    p = Path(os.fspath(path_or_id)).expanduser()
    return (p / "qrels" / f"{split}.tsv").is_file() if p.is_dir() else True


def judged_query_ids(qfile: Path) -> set[str]:
    """The query ids of a qrels file (read by the one qrels line parser), without its judgments."""
    return {qid for _, qid, _, _ in _qrels_lines(Path(qfile))}


def load_training_queries(path_or_id: str | os.PathLike, split: str = "train"
                          ) -> tuple[BeirData, dict[str, str], bool]:
    """The corpus and the *training* queries of a BEIR folder, never their labels:
    ``(data, {qid: text}, has_qrels)``.

    * with ``qrels/<split>.tsv``: the queries judged in it (``has_qrels`` True);
    * without it (no qrels folder at all: a user's own corpus and queries): every query is a
      training query, except those judged in the folder's ``qrels/test.tsv`` (held out for
      evaluation; only their ids are read). ``data`` is then loaded with ``split=None``.

    Either way, a query judged in ``qrels/dev.tsv`` (the user's judged dev queries, which choose
    the checkpoint in ``hf-dr adapt``) is never a training query, unless ``split`` is ``dev``.

    ``split="test"`` is refused (``ValueError``): test queries are for evaluation only.
    """
    if split == "test":
        raise ValueError("training queries cannot come from the test split (it is for evaluation only); "
                         "use --split train")
    dev_file = Path(os.fspath(path_or_id)).expanduser() / "qrels" / "dev.tsv"
    dev_ids = judged_query_ids(dev_file) if split != "dev" and dev_file.is_file() else set()
    if has_split(path_or_id, split):
        data = load_beir(path_or_id, split=split)
        return data, {q: t for q, t in data.split_queries().items() if q not in dev_ids}, True
    data = load_beir(path_or_id, split=None)
    queries = dict(zip(data.queries["_id"], data.queries["text"]))
    test_file = Path(os.fspath(path_or_id)).expanduser() / "qrels" / "test.tsv"
    queries = {q: t for q, t in queries.items() if q not in dev_ids}
    if test_file.is_file():
        held_out = judged_query_ids(test_file)
        queries = {q: t for q, t in queries.items() if q not in held_out}
        if not queries:
            raise BeirFormatError(f"{path_or_id}: no training queries: every query is judged in qrels/test.tsv "
                                  f"(held out for evaluation) and there is no qrels/{split}.tsv; add training "
                                  "queries (queries.jsonl without judgments, or a qrels file for them)")
    return data, queries, False


def iter_corpus(source: BeirData | str | os.PathLike, batch_size: int = 10_000) -> Iterator[tuple[str, str]]:
    """``(doc_id, text)`` of a corpus in order, text joined as :meth:`BeirData.doc_texts` does,
    read lazily, batch by batch: a BEIR folder's corpus through its Arrow cache (:func:`load_corpus`:
    validated once, malformed lines raise :class:`BeirFormatError` with file and line; only
    ``corpus.jsonl`` is needed), a :class:`BeirData` / Hub id from its dataset."""
    if not isinstance(source, BeirData):
        p = Path(source)
        if p.is_dir():
            corpus, _ = load_corpus(p)
        else:
            corpus = load_beir(source, split=None).corpus
    else:
        corpus = source.corpus
    for batch in corpus.iter(batch_size=batch_size):
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
