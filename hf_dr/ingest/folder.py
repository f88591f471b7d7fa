"""A folder of files -> a BEIR corpus folder of passages, through the sharded, resumable machinery
of :mod:`hf_dr.shards` (as ``hf-dr encode`` and ``hf-dr generate-queries``)::

    CORPUS/
      plan.json             settings and the listing of every input file (written first)
      shards/00000.jsonl    the passages of the shard's files (written whole, then renamed)
      shards/00000.json     its done-marker: the manifest entries of its files
      corpus.jsonl          every shard's passages, in listing order: written once all are done
      manifest.jsonl        one line per input file: what became of it
      ingest.json           settings and counts: written last (plan.json and the shards are then removed)

Each line of ``corpus.jsonl`` is a BEIR corpus line and its source::

    {"_id": "<relative path>#<n>", "title": ..., "text": ..., "metadata": {"source": "<relative path>",
     "page": <int or null>, "start": <char>, "end": <char>}}

``_id``'s path has ``%``, whitespace and control characters percent-escaped (BEIR ids hold none);
``metadata.source`` is the path as it is. A row of a JSONL / CSV / Parquet file is a document of
its own: its passages are ``<row id>#<n>`` (the row's ``--id-column``, by default ``_id`` or ``id``
when there is one, else ``<path>:<row>``).

The listing walks ``DIR`` recursively in name order and never leaves it: files are read by their suffix
(``.pdf``, ``.docx``, ``.html`` / ``.htm`` / ``.xhtml``, ``.md`` / ``.markdown``, ``.txt`` / ``.text``; a
name without a suffix as text; any other suffix is skipped, said so); a symbolic link is not
followed (one to a file or folder inside ``DIR`` is listed as skipped, its target is read under its
own name; one pointing outside ``DIR`` is refused; a loop or a broken link is reported). Hidden
files and folders (``.name``) are skipped, said so. A file is read by at most one process, in one
shard of ``shard_size`` files; a process killed at any moment leaves complete shards only, and the
same call again gives the result of an uninterrupted run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from ..shards import all_shards_done, read_json_checked, run_processes, shard_name, shards_to_do, write_atomic, write_json
from .extract import DOCUMENT_FORMATS, TABLE_FORMATS, SkipFile, extract, file_format, iter_rows
from .split import DEFAULT_PACK_BELOW, Block, TokenCounter, split_document

logger = logging.getLogger(__name__)

__all__ = ["ingest_folder", "ingest_stage", "BEIR_FILES", "IngestError", "list_inputs", "doc_id", "passage_doc",
           "DEFAULT_SHARD_SIZE", "DEFAULT_MAX_FILE_SIZE", "DEFAULT_OVERLAP", "FORMAT_VERSION"]

FORMAT_VERSION = 2  # 2: whole paragraphs are no longer packed by default (pack_below)
DEFAULT_SHARD_SIZE = 100
#: a document file larger than this is skipped (``--max-file-size``); tables are streamed, never skipped for size
DEFAULT_MAX_FILE_SIZE = 100 << 20
DEFAULT_OVERLAP = 32
_SETTINGS = ("tokenizer", "max_tokens", "overlap", "pack_below", "prompt", "text_column", "id_column", "title_column",
             "max_file_size", "shard_size")


#: a folder of documents given as --data may hold the queries and judgments beside them
BEIR_FILES = {"queries.jsonl": "queries", "qrels": "judgments"}


class IngestError(ValueError):
    """The input folder cannot be ingested, or the output folder was begun with other settings."""


def doc_id(rel: str) -> str:
    """A relative path as a BEIR id: ``%``, whitespace and control characters percent-escaped."""
    return "".join(ch if ch.isprintable() and not ch.isspace() and ch != "%" else
                "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogateescape")) for ch in rel)


def passage_doc(pid: str) -> str | None:
    """The document of a passage id ``<doc>#<n>``; None when ``pid`` is not one."""
    doc, sep, n = pid.rpartition("#")
    return doc if sep and doc and n.isdigit() else None


# ---------------------------------------------------------------------------- listing
def _entry(rel: str, st: os.stat_result | None = None, skip: str | None = None, fmt: str | None = None) -> dict:
    return {"path": rel, "format": fmt, "bytes": st.st_size if st else None,
            "mtime_ns": st.st_mtime_ns if st else None, "skip": skip}


def _link_entry(root: Path, p: Path, rel: str) -> dict:
    """What a symbolic link inside ``root`` is: refused (outside), a loop, broken, or a duplicate."""
    try:
        target = p.resolve(strict=True)
    except RuntimeError:
        return _entry(rel, skip="symlink loop")
    except OSError as e:
        if getattr(e, "errno", None) == errno.ELOOP:
            return _entry(rel, skip="symlink loop")
        return _entry(rel, skip="broken symlink (its target does not exist)")
    try:
        inside = target.relative_to(root)
    except ValueError:
        return _entry(rel, skip="symlink pointing outside DIR: refused (nothing outside DIR is read)")
    if target.is_dir() and (p.parent.resolve() == target or target in p.parent.resolve().parents):
        return _entry(rel, skip=f"symlink loop (points to its own parent folder {inside.as_posix() or '.'})")
    return _entry(rel, skip=f"symlink to {inside.as_posix() or '.'} inside DIR: read under that name, not twice")


def list_inputs(root: str | os.PathLike, max_file_size: int = DEFAULT_MAX_FILE_SIZE,
                text_column: str | None = None, beir: bool = False) -> list[dict]:
    """Every entry under ``root`` (recursively, in name order) that is a file or a link: ``path``
    (relative, ``/``-separated), ``format``, ``bytes``, ``mtime_ns`` and ``skip`` (the reason it will
    not be read, or None). ``beir``: ``queries.jsonl`` and ``qrels/`` at the top are a BEIR folder's
    queries and judgments, listed as such, not read as documents."""
    root = Path(root).resolve()
    out: list[dict] = []

    def walk(folder: Path, prefix: str) -> None:
        try:
            names = sorted(os.listdir(folder))
        except OSError as e:
            out.append(_entry(prefix.rstrip("/") or ".", skip=f"folder not readable ({e.strerror})"))
            return
        for name in names:
            p, rel = folder / name, prefix + name
            if beir and rel in BEIR_FILES:
                out.append(_entry(rel + ("/" if p.is_dir() else ""), skip=f"the BEIR {BEIR_FILES[rel]} of DIR (read as "
                                                                          "such, not as a document)"))
            elif p.is_symlink():
                out.append(_link_entry(root, p, rel))
            elif name.startswith("."):
                out.append(_entry(rel + ("/" if p.is_dir() else ""), skip="hidden (its name starts with a dot)"))
            elif p.is_dir():
                walk(p, rel + "/")
            elif p.is_file():
                out.append(_file_entry(p, rel, max_file_size, text_column))
            else:
                out.append(_entry(rel, skip="not a regular file (a device, socket or pipe)"))

    walk(root, "")
    return out


def _file_entry(p: Path, rel: str, max_file_size: int, text_column: str | None) -> dict:
    st = p.stat()
    fmt = file_format(p)
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return _entry(rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), st,
                      "its name is not valid UTF-8 (rename it)", fmt)
    if fmt is None and p.suffix:
        return _entry(rel, st, f"not a supported format ({p.suffix}: read are "
                               f"{', '.join(sorted({*DOCUMENT_FORMATS, *TABLE_FORMATS}))}, and names without a suffix "
                               "as text)", fmt)
    if fmt in TABLE_FORMATS.values() and not text_column:
        return _entry(rel, st, f"a {fmt} table: pass --text-column to read its rows", fmt)
    if fmt not in TABLE_FORMATS.values() and st.st_size > max_file_size:
        return _entry(rel, st, f"{st.st_size / 2**20:.1f} MiB, larger than the cap of {max_file_size / 2**20:.1f} "
                               "MiB (--max-file-size)", fmt)
    if not os.access(p, os.R_OK):
        return _entry(rel, st, "not readable (permission denied)", fmt)
    return _entry(rel, st, None, fmt)


def _listing_key(entries: list[dict]) -> str:
    h = hashlib.sha256()
    for e in entries:
        h.update(json.dumps([e["path"], e["bytes"], e["mtime_ns"], e["skip"]]).encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:32]


# ---------------------------------------------------------------------------- reading one file
class _Reader:
    """One process's reader: the token counter of the plan's tokenizer, and the settings."""

    def __init__(self, settings: dict):
        tok = None
        if settings["tokenizer"]:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(settings["tokenizer"])
        self.s = settings
        self.counter = TokenCounter(tok, settings["prompt"] or "")

    def _lines(self, did: str, rel: str, title: str, blocks: list[Block], n0: int = 0) -> list[str]:
        ps = split_document(title, blocks, self.counter, self.s["max_tokens"], self.s["overlap"],
                            self.s["pack_below"])
        return [json.dumps({"_id": f"{did}#{n0 + k}", "title": p.title, "text": p.text,
                            "metadata": {"source": rel, "page": p.page, "start": p.start, "end": p.end}},
                           ensure_ascii=False) + "\n" for k, p in enumerate(ps)]

    def read(self, root: Path, e: dict, f) -> dict:
        """Read the listed file ``e`` and write its passage lines to ``f``; its manifest entry."""
        rel = e["path"]
        out = {"path": rel, "format": e["format"], "bytes": e["bytes"], "status": "skipped", "passages": 0,
               "pages": None, "reason": e["skip"]}
        if e["skip"]:
            return out
        try:
            if e["format"] in TABLE_FORMATS.values():
                return {**out, **self._table(root / rel, e, f)}
            doc = extract(root / rel, e["format"] if e["format"] in DOCUMENT_FORMATS.values() else None)
        except SkipFile as err:
            return {**out, "reason": str(err)}
        except OSError as err:
            return {**out, "reason": f"could not be read ({err.strerror or err})"}
        lines = self._lines(doc_id(rel), rel, doc.title, doc.blocks)
        f.writelines(lines)
        notes = list(doc.notes)
        if doc_id(rel) != rel:
            notes.append(f"its name holds whitespace, control characters or '%': its passages' ids are "
                         f"{doc_id(rel)}#<n>")
        return {**out, "status": "ingested", "passages": len(lines), "pages": doc.pages, "reason": None,
                **({"notes": notes} if notes else {})}

    def _table(self, path: Path, e: dict, f) -> dict:
        from .extract import text_blocks

        rel, n_rows, empty, dup, passages, seen = e["path"], 0, 0, 0, 0, set()
        idc = self.s["id_column"]
        if path.stat().st_size == 0:
            raise SkipFile("empty file")
        for i, (rid, title, text) in enumerate(iter_rows(path, e["format"], self.s["text_column"], idc,
                                                         self.s["title_column"])):
            did = doc_id(rid) if rid is not None else f"{doc_id(rel)}:{i}"
            n_rows += 1
            blocks = text_blocks(text)
            if not blocks:
                empty += 1
                continue
            if did in seen:
                dup += 1
                continue
            seen.add(did)
            lines = self._lines(did, rel, title, blocks)
            f.writelines(lines)
            passages += len(lines)
        if not passages:
            raise SkipFile(f"no row with text in column {self.s['text_column']!r} ({n_rows} row(s))")
        notes = [f"{empty} row(s) without text in {self.s['text_column']!r} skipped"] if empty else []
        notes += [f"{dup} row(s) repeating an earlier row's id skipped"] if dup else []
        return {"status": "ingested", "passages": passages, "rows": n_rows, "reason": None,
                **({"notes": notes} if notes else {})}


# ---------------------------------------------------------------------------- the folder
def _shard_files(out: Path, i: int) -> tuple[Path, Path]:
    return out / "shards" / f"{shard_name(i)}.jsonl", out / "shards" / f"{shard_name(i)}.json"


def _done(out: Path, i: int) -> bool:
    return all(p.is_file() for p in _shard_files(out, i))


def _work(src: str, out: str, show_progress_bar: bool, rank: int, world_size: int) -> None:
    """Write this process's shards (``s % world_size == rank``) of the plan in ``out``."""
    from tqdm.auto import tqdm

    root, out = Path(src), Path(out)
    plan = read_json_checked(out / "plan.json", IngestError)
    entries, size = plan["entries"], plan["shard_size"]
    n_shards = -(-len(entries) // size)
    todo = shards_to_do(out, n_shards, rank, world_size, lambda i: _done(out, i))
    if not todo:
        return
    reader = _Reader(plan)
    total = sum(len(entries[i * size:(i + 1) * size]) for i in todo)
    with tqdm(total=total, desc="Ingesting" + (f" (process {rank + 1} of {world_size})" if world_size > 1 else ""),
              unit="file", disable=not show_progress_bar or rank != 0) as bar:
        for i in todo:
            manifest: list[dict] = []

            def write(tmp: Path, chunk=entries[i * size:(i + 1) * size], manifest=manifest) -> None:
                with open(tmp, "w", encoding="utf-8") as f:
                    for e in chunk:
                        manifest.append(reader.read(root, e, f))
                        bar.update(1)
                    f.flush()
                    os.fsync(f.fileno())

            data, marker = _shard_files(out, i)
            write_atomic(data, write)
            write_json(marker, {"shard": i, "files": manifest})


def _check_plan(out: Path, plan: dict, restart: bool) -> bool:
    """True when ``out`` already holds the finished result of ``plan``; refuses (or, with ``restart``,
    empties) a folder begun with other settings or another listing of the input."""
    manifest_file, plan_file = out / "ingest.json", out / "plan.json"
    if not (manifest_file.is_file() or plan_file.is_file()):
        return False
    old = read_json_checked(manifest_file if manifest_file.is_file() else plan_file, IngestError)
    keys = ("format", "listing", *_SETTINGS)
    diff = [k for k in keys if old.get(k) != plan.get(k)]
    if not diff:
        return manifest_file.is_file()
    if restart:
        logger.warning("%s was begun with other settings (%s): starting again", out, ", ".join(diff))
        shutil.rmtree(out)
        return False
    what = ", ".join("the files in DIR (added, removed or changed since)" if k == "listing" else
                     f"{k}: {old.get(k)!r} -> {plan.get(k)!r}" for k in diff)
    raise IngestError(f"{out} holds an ingest begun with other settings ({what}); ingest into another folder, "
                      "or delete this one first")


def _finish(out: Path, plan: dict, n_shards: int) -> dict:
    """Join the shards into corpus.jsonl and manifest.jsonl; write ingest.json; remove the shards."""
    files: list[dict] = []

    def concat(p: Path) -> None:
        with open(p, "w", encoding="utf-8") as f:
            for i in range(n_shards):
                with open(_shard_files(out, i)[0], encoding="utf-8") as s:
                    shutil.copyfileobj(s, f)
            f.flush()
            os.fsync(f.fileno())

    for i in range(n_shards):
        files += read_json_checked(_shard_files(out, i)[1], IngestError)["files"]
    write_atomic(out / "corpus.jsonl", concat)
    write_atomic(out / "manifest.jsonl", lambda p: p.write_text(
        "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in files), encoding="utf-8"))
    reasons: dict[str, int] = {}
    for e in files:
        if e["status"] == "skipped":
            key = e["reason"].split(" (")[0]
            reasons[key] = reasons.get(key, 0) + 1
    report = {k: v for k, v in plan.items() if k != "entries"}
    report.update(files=len(files), ingested=sum(e["status"] == "ingested" for e in files),
                  skipped=sum(e["status"] == "skipped" for e in files), passages=sum(e["passages"] for e in files),
                  pages=sum(e.get("pages") or 0 for e in files), skipped_by_reason=reasons, n_shards=n_shards,
                  corpus="corpus.jsonl", manifest="manifest.jsonl")
    write_json(out / "ingest.json", report)
    shutil.rmtree(out / "shards", ignore_errors=True)
    (out / "plan.json").unlink(missing_ok=True)
    return report


#: format -> the module of the ``documents`` extra that reads it
_LIBRARIES = {"pdf": "pypdfium2", "docx": "docx", "html": "trafilatura"}


def _require_libraries(entries: list[dict]) -> None:
    """The extraction libraries the listed files need, before any work (the missing extra is named)."""
    from ..extras import require

    for fmt in sorted({e["format"] for e in entries if not e["skip"]} & set(_LIBRARIES)):
        require(_LIBRARIES[fmt])


def ingest_folder(src: str | os.PathLike, output: str | os.PathLike, *, max_tokens: int, tokenizer: str | None = None,
                  overlap: int | None = None, prompt: str = "", text_column: str | None = None,
                  id_column: str | None = None, title_column: str | None = "title",
                  max_file_size: int = DEFAULT_MAX_FILE_SIZE, shard_size: int = DEFAULT_SHARD_SIZE, workers: int = 1,
                  show_progress_bar: bool = True, restart: bool = False, beir: bool = False,
                  pack_below: int = DEFAULT_PACK_BELOW) -> dict:
    """Ingest the folder ``src`` into the corpus folder ``output`` (see the module docstring) and
    return its report (``ingest.json``: settings, counts, skipped files by reason).

    ``tokenizer``: the folder or Hub id of the model whose tokenizer counts tokens (None: words);
    ``max_tokens``: its window, special tokens included; ``prompt``: its document prompt (counted in
    the window); ``overlap``: tokens shared by consecutive passages (default: ``DEFAULT_OVERLAP``, at
    most an eighth of the window); ``pack_below``: whole paragraphs share a passage only while it
    holds fewer tokens than this (default 0: never, :mod:`hf_dr.ingest.split`). ``workers`` processes share the
    shards. Resumes a folder begun with the same settings and files; refuses one begun with others
    (:class:`IngestError`) or, with ``restart``, starts it again. ``beir``: see :func:`list_inputs`."""
    root, out = Path(src).expanduser(), Path(output)
    if not root.is_dir():
        raise IngestError(f"{src} is not a folder")
    if overlap is None and isinstance(max_tokens, int):
        overlap = min(DEFAULT_OVERLAP, max_tokens // 8)
    for name, v, low in (("max_tokens", max_tokens, 8), ("shard_size", shard_size, 1), ("workers", workers, 1),
                         ("overlap", overlap, 0), ("max_file_size", max_file_size, 1), ("pack_below", pack_below, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} must be a whole number of at least {low} (got {v!r})")
    if overlap > max_tokens // 2:
        raise ValueError(f"overlap ({overlap}) must be at most half the window ({max_tokens} tokens)")
    entries = list_inputs(root, max_file_size, text_column, beir)
    if not entries:
        raise IngestError(f"{src} holds no files")
    _require_libraries(entries)
    plan = {"format": FORMAT_VERSION, "tokenizer": str(tokenizer) if tokenizer else None, "max_tokens": max_tokens,
            "overlap": overlap, "pack_below": pack_below, "prompt": prompt or "", "text_column": text_column,
            "id_column": id_column,
            "title_column": title_column, "max_file_size": max_file_size, "shard_size": shard_size,
            "listing": _listing_key(entries), "entries": entries}
    out.mkdir(parents=True, exist_ok=True)
    if _check_plan(out, plan, restart):
        return read_json_checked(out / "ingest.json", IngestError)
    (out / "shards").mkdir(parents=True, exist_ok=True)
    if not (out / "plan.json").is_file():
        write_json(out / "plan.json", plan)
    n_shards = -(-len(entries) // shard_size)
    run_processes(_work, {"src": str(root), "out": str(out), "show_progress_bar": show_progress_bar},
                  min(workers, n_shards))
    all_shards_done(out, n_shards, lambda i: _done(out, i), None, 0, IngestError)
    return _finish(out, plan, n_shards)


def ingest_stage(data: str | os.PathLike, *, max_tokens: int, tokenizer: str | None = None, prompt: str = "",
                 cache: str | os.PathLike | None = None, show_progress_bar: bool = True) -> tuple[Path, dict | None]:
    """``data`` as a BEIR folder: itself when it holds ``corpus.jsonl``; else a folder of documents,
    ingested (with the defaults of :func:`ingest_folder`) into a folder of the stage cache ``cache``
    (default: ``ingest/`` in the BEIR cache, :func:`hf_dr.data.beir.cache_root`) keyed by the
    listing of its files (names, sizes, modification times) and the settings; its ``queries.jsonl``
    and ``qrels/`` come along. A re-run finds the folder (or resumes it). Returns ``(folder, report)``,
    ``report`` None when ``data`` was a BEIR folder already."""
    from ..data.beir import cache_root
    from ..stage_cache import StageCache

    root = Path(data).expanduser()
    if (root / "corpus.jsonl").is_file() or not root.is_dir():
        return root, None
    entries = list_inputs(root, DEFAULT_MAX_FILE_SIZE, None, beir=True)
    params = {"format": FORMAT_VERSION, "data": str(root.resolve()), "listing": _listing_key(entries),
              "tokenizer": str(tokenizer) if tokenizer else None, "max_tokens": max_tokens, "prompt": prompt or ""}
    for name in BEIR_FILES:  # the queries and judgments are part of the result: their content keys it
        p = root / name
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else []
        params[name] = [hashlib.sha256(f.read_bytes()).hexdigest()[:16] for f in files]
    out = StageCache(Path(cache) if cache else cache_root() / "ingest").path("ingest", params, "")
    report = ingest_folder(root, out, tokenizer=tokenizer, max_tokens=max_tokens, prompt=prompt,
                           show_progress_bar=show_progress_bar, beir=True)
    if (root / "queries.jsonl").is_file():
        shutil.copyfile(root / "queries.jsonl", out / "queries.jsonl")
    if (root / "qrels").is_dir():
        shutil.copytree(root / "qrels", out / "qrels", dirs_exist_ok=True)
    return out, report
