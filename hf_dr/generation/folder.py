"""Generated queries folders: queries made from a corpus, in shards, resumable, by one or many
processes — the layout and the machinery of an embeddings folder (:mod:`hf_dr.embeddings`: the
same atomic files, done-markers and process split)::

    Q/
      plan.json            the generator and what its output depends on, the corpus fingerprint,
                           queries per document, the documents drawn, seed, shard size (written first)
      shards/00000.jsonl   the queries of the shard's documents (written whole, then renamed)
      shards/00000.json    the shard's done-marker (written after its queries)
      queries.jsonl        every shard's queries in corpus order: written once all are done
      generation.json      plan + counts: written last (the folder is complete; the shards and
                           plan.json are then removed)

Each line of ``queries.jsonl`` is a BEIR query with the id of the document it was made from::

    {"_id": "<doc id>-q<i>", "text": "...", "doc_id": "<doc id>"}

(``i`` counts the document's queries from 0; a query that is empty, or that the document already
has, is dropped and its number not reused). The file is a valid ``queries.jsonl`` of a BEIR folder (``doc_id`` is an
extra field BEIR readers ignore).

How many: ``queries_per_doc`` per document, or GPL's rule ``ceil(num_queries / |corpus|)``; when
``num_queries`` is smaller than the corpus, one query for each of ``num_queries`` documents drawn
by the seed (those whose hash of ``(seed, doc id)`` is smallest: the same documents whatever the
shards or processes). A process killed at any moment leaves complete shards only; the same call
again skips them, and the result equals an uninterrupted run's. Under ``accelerate launch
--num_processes N`` (or ``torchrun``) process ``r`` writes the shards ``s`` with ``s % N == r``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..shards import all_shards_done, dist, read_json_checked, shard_name, shards_to_do, write_atomic, write_json
from .generators import QueryGenerator, doc_seed, get_generator

logger = logging.getLogger(__name__)

__all__ = ["generate_to_folder", "GeneratedQueries", "read_generated", "count_per_doc", "GenerationError",
           "GPL_TOTAL", "DEFAULT_SHARD_SIZE", "FORMAT_VERSION"]

FORMAT_VERSION = 1
#: GPL's target total: ceil(250k / |corpus|) queries per document
GPL_TOTAL = 250_000
#: documents per shard: the unit of resumption
DEFAULT_SHARD_SIZE = 1000
_IDENTITY = ("format", "generator", "corpus_fingerprint", "n_docs", "queries_per_doc", "num_queries", "seed",
             "shard_size", "batch_size")


class GenerationError(ValueError):
    """A generated queries folder is malformed, incomplete, or was begun with other settings."""


@dataclass
class GeneratedQueries:
    """A complete folder: ``queries`` ``{qid: text}`` and ``sources`` ``{qid: doc id}`` in file order."""

    path: Path
    queries: dict
    sources: dict
    manifest: dict


def count_per_doc(n_docs: int, per_doc: int | None = None, num_queries: int | None = GPL_TOTAL) -> int:
    """Queries per document: ``per_doc`` when given, else GPL's ``ceil(num_queries / n_docs)`` (1 when
    ``num_queries`` is below ``n_docs``: one for each of ``num_queries`` drawn documents)."""
    if per_doc is not None:
        return int(per_doc)
    return max(1, math.ceil((num_queries or GPL_TOTAL) / max(n_docs, 1)))


def _corpus(corpus):
    """``(the corpus Dataset: _id, title, text, its fingerprint)`` of a BEIR folder / BeirData."""
    from ..data.beir import BeirData, load_beir, load_corpus

    if isinstance(corpus, BeirData):
        return corpus.corpus, corpus.corpus_fingerprint()
    p = Path(corpus).expanduser()
    if p.is_dir():
        return load_corpus(p)
    data = load_beir(corpus, split=None)
    return data.corpus, data.corpus_fingerprint()


def _drawn(doc_ids: list[str], seed: int, num_queries: int | None, per_doc_given: bool) -> list[bool]:
    """Which documents get queries: all, or (``num_queries`` below the corpus size, no per-document
    count given) the ``num_queries`` whose ``(seed, id)`` hash is smallest."""
    if per_doc_given or num_queries is None or num_queries >= len(doc_ids):
        return [True] * len(doc_ids)
    keys = sorted(range(len(doc_ids)), key=lambda i: (doc_seed(seed, doc_ids[i])[1], i))
    keep = [False] * len(doc_ids)
    for i in keys[:num_queries]:
        keep[i] = True
    return keep


def generate_to_folder(corpus, output: str | os.PathLike, generator: str | QueryGenerator, *,
                       queries_per_doc: int | None = None, num_queries: int | None = GPL_TOTAL, seed: int = 0,
                       shard_size: int = DEFAULT_SHARD_SIZE, batch_size: int = 32, device=None,
                       show_progress_bar: bool = True, rank: int | None = None, world_size: int | None = None,
                       restart: bool = False) -> GeneratedQueries | None:
    """Generate queries for ``corpus`` (a BEIR folder — only ``corpus.jsonl`` is read, memory-mapped
    — a :class:`~hf_dr.data.BeirData` or a Hub id) into the folder ``output`` (see the module docstring).

    Resumes a folder begun with the same settings; refuses one begun with others
    (:class:`GenerationError`) — or, with ``restart`` (one process), empties it first. Returns the
    :class:`GeneratedQueries` when the folder is complete (always with one process; on rank 0 with
    several), else ``None``."""
    gen = get_generator(generator, device=device) if isinstance(generator, str) else generator
    for name, v in (("queries_per_doc", queries_per_doc), ("num_queries", num_queries), ("shard_size", shard_size),
                    ("batch_size", batch_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name} must be a positive whole number (got {v!r})")
    out = Path(output)
    if rank is None or world_size is None:
        rank, world_size, state = dist()
    else:
        state = None
    ds, cfp = _corpus(corpus)
    doc_ids = [str(d) for d in ds["_id"]]
    n = count_per_doc(len(doc_ids), queries_per_doc, num_queries)
    drawn = _drawn(doc_ids, seed, num_queries, queries_per_doc is not None)
    plan = {"format": FORMAT_VERSION, "generator": gen.identity(), "generator_name": gen.name,
            "corpus_fingerprint": cfp, "n_docs": len(doc_ids), "queries_per_doc": int(n),
            "num_queries": None if queries_per_doc is not None else num_queries, "documents": sum(drawn),
            "seed": int(seed), "shard_size": int(shard_size), "batch_size": int(batch_size)}
    n_shards = -(-len(doc_ids) // shard_size)
    plan_file, manifest_file = out / "plan.json", out / "generation.json"
    (out / "shards").mkdir(parents=True, exist_ok=True)
    if manifest_file.is_file() or plan_file.is_file():
        old = read_json_checked(manifest_file if manifest_file.is_file() else plan_file, GenerationError)
        diff = [k for k in _IDENTITY if old.get(k) != plan.get(k)]
        if diff and restart and world_size == 1:
            import shutil

            logger.warning("%s was begun with other settings (%s): starting again", out, ", ".join(diff))
            shutil.rmtree(out)
            (out / "shards").mkdir(parents=True)
        elif diff:
            raise GenerationError(
                f"{out} holds queries begun with other settings "
                f"({', '.join(f'{k}: {old.get(k)!r} -> {plan[k]!r}' for k in diff)}); generate into another "
                "folder, or delete this one first")
        elif manifest_file.is_file():
            return read_generated(out) if rank == 0 else None
    if not plan_file.is_file() and (rank == 0 or state is None):
        write_json(plan_file, plan)

    def done(i: int) -> bool:
        return (out / "shards" / f"{shard_name(i)}.json").is_file() and \
            (out / "shards" / f"{shard_name(i)}.jsonl").is_file()

    todo = shards_to_do(out, n_shards, rank, world_size, done)
    if todo:
        _generate_shards(gen, ds, doc_ids, drawn, todo, out, n=n, seed=seed, shard_size=shard_size,
                         batch_size=batch_size, show_progress_bar=show_progress_bar)
    if not all_shards_done(out, n_shards, done, state, rank, GenerationError):
        return None
    return _finish(out, plan, n_shards)


def _generate_shards(gen, ds, doc_ids: list[str], drawn: list[bool], todo: list[int], out: Path, *, n: int,
                     seed: int, shard_size: int, batch_size: int, show_progress_bar: bool) -> None:
    """Generate the queries of the shards ``todo`` (the drawn documents of each), each shard written
    as its ``.jsonl`` and its ``.json`` (written last: a shard is done when both exist)."""
    from tqdm.auto import tqdm

    if hasattr(gen, "load"):  # a model: refused before any work when it cannot be loaded
        gen.load()
    if gen.needs_fit:
        gen.fit(doc_ids, (((t or "") + " " + (x or "")).strip() for b in ds.iter(batch_size=10_000)
                          for t, x in zip(b["title"], b["text"])))
    total = sum(sum(drawn[i * shard_size:(i + 1) * shard_size]) for i in todo)
    with tqdm(total=total, desc=f"Generating queries ({gen.name})", unit="doc",
              disable=not show_progress_bar) as bar:
        for i in todo:
            start = i * shard_size
            rows = ds[start:start + shard_size]  # one shard's documents, read from the memory map
            picked = [j for j in range(len(rows["_id"])) if drawn[start + j]]
            lines = []
            for b in range(0, len(picked), batch_size):
                idx = picked[b:b + batch_size]
                ids = [doc_ids[start + j] for j in idx]
                made = gen.generate(ids, [rows["title"][j] or "" for j in idx],
                                    [rows["text"][j] or "" for j in idx], n, seed)
                lines += _query_lines(ids, made)
                bar.update(len(idx))
            text = "".join(lines)
            write_atomic(out / "shards" / f"{shard_name(i)}.jsonl", lambda p, text=text: _fsynced(p, text))
            write_json(out / "shards" / f"{shard_name(i)}.json",
                       {"shard": i, "start": start, "documents": len(picked), "queries": len(lines)})


def _query_lines(doc_ids: list[str], made: list[list[str]]) -> list[str]:
    """The ``queries.jsonl`` lines of the queries made from each document (a query made twice from
    one document is written once; an empty one never)."""
    lines = []
    for d, qs in zip(doc_ids, made):
        seen = set()
        for k, q in enumerate(qs):
            if q.strip() and q not in seen:
                seen.add(q)
                lines.append(json.dumps({"_id": f"{d}-q{k}", "text": q, "doc_id": d}, ensure_ascii=False) + "\n")
    return lines


def _finish(out: Path, plan: dict, n_shards: int) -> GeneratedQueries:
    """The shards joined into ``queries.jsonl``, ``generation.json`` written (last), the shards and
    the plan removed (they are in those two files)."""
    def concat(p):
        with open(p, "w", encoding="utf-8") as f:
            for i in range(n_shards):
                with open(out / "shards" / f"{shard_name(i)}.jsonl", encoding="utf-8") as s:
                    for line in s:
                        f.write(line)
            f.flush()
            os.fsync(f.fileno())

    write_atomic(out / "queries.jsonl", concat)
    shards = [read_json_checked(out / "shards" / f"{shard_name(i)}.json", GenerationError) for i in range(n_shards)]
    write_json(out / "generation.json", {**plan, "queries": sum(s["queries"] for s in shards), "n_shards": n_shards,
                                         "file": "queries.jsonl"})
    import shutil

    shutil.rmtree(out / "shards", ignore_errors=True)
    (out / "plan.json").unlink(missing_ok=True)
    return read_generated(out)


def _fsynced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def read_generated(folder: str | os.PathLike) -> GeneratedQueries:
    """A complete generated queries folder (:class:`GenerationError` when it is not one)."""
    folder = Path(folder)
    if not (folder / "generation.json").is_file() or not (folder / "queries.jsonl").is_file():
        raise GenerationError(f"{folder} is not a complete generated queries folder (hf-dr generate-queries): "
                              "generation.json or queries.jsonl is missing")
    manifest = read_json_checked(folder / "generation.json", GenerationError)
    queries, sources = {}, {}
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                row = json.loads(line)
                qid, text, doc = str(row["_id"]), str(row["text"]), str(row["doc_id"])
            except (ValueError, KeyError, TypeError) as e:
                raise GenerationError(f"{folder / 'queries.jsonl'}, line {lineno}: not a generated query "
                                      f"({{\"_id\", \"text\", \"doc_id\"}}): {e}") from None
            queries[qid] = text
            sources[qid] = doc
    return GeneratedQueries(folder, queries, sources, manifest)
