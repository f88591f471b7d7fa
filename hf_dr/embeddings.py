"""Embeddings folders: a corpus encoded once, in shards, resumable, by one or many processes.

``hf-dr encode --data DIR --model M --output EMB`` (:func:`encode_to_folder`) streams the corpus
through the one encode loop (:func:`hf_dr.encoding.iter_encode`), ``shard_size`` documents at a
time, and writes::

    EMB/
      plan.json            what is being encoded: model + its fingerprint, corpus fingerprint,
                           max length, query / document prompts, pooling, dense/sparse,
                           dtype, shard size (written first)
      doc_ids.jsonl        the documents' ids, one JSON string a line, in corpus order
      shards/00000.npy     dense: float32 [rows, dim], memory-mappable (np.load(mmap_mode="r"))
      shards/00000.npz     sparse: CSR [rows, |V|] (scipy.sparse.save_npz, uncompressed)
      shards/00000.json    the shard's done-marker (written after its data file is complete)
      manifest.json        plan + shard list + dim: written last, when every shard is done

Memory holds one shard's tokens and outputs whatever the corpus size. Every file is written to
a temporary name and renamed into place, so a process killed at any moment (``kill -9``) leaves
complete shards only; the same command started again skips them and the result is identical to
an uninterrupted run (each shard holds the same documents, encoded in the same batches).
Under ``accelerate launch --num_processes N`` (or ``torchrun``) process ``r`` encodes the shards
``s`` with ``s % N == r``; rank 0 writes the manifest once all are done, and the result equals
the one-process result.

:class:`Embeddings` reads a folder back; :meth:`Embeddings.check` refuses one made by another
model, prompts, max length or corpus with an :class:`EmbeddingsError` instead of a silently wrong index.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .shards import (ShardedFolderError, all_shards_done, dist, read_json, shard_name, shards_to_do, write_atomic,
                     write_json)

logger = logging.getLogger(__name__)

__all__ = ["Embeddings", "EmbeddingsError", "encode_to_folder", "model_fingerprint", "corpus_fingerprint",
           "FORMAT_VERSION"]

FORMAT_VERSION = 1
#: plan keys that must agree for a folder to be resumed, or to be used by a retriever
_IDENTITY = ("format", "model_fingerprint", "corpus_fingerprint", "n_docs", "max_length", "sparse", "prefix",
             "query_prompt", "document_prompt", "pooling", "normalize", "dtype", "shard_size", "batch_size")
#: the value of a plan key a folder written before it existed stands for (no prompt)
_ABSENT = {"query_prompt": "", "document_prompt": ""}


class EmbeddingsError(ShardedFolderError):
    """An embeddings folder is malformed, incomplete, or was made by another model / corpus."""


# ----------------------------------------------------------------------------- fingerprints
def model_fingerprint(model) -> str:
    """A hash of a model's class, configuration and every weight it encodes with (a model lists
    unused weights' name prefixes in ``fingerprint_skip``): two models with the same fingerprint encode alike. (The tokenizer is covered by its vocabulary size and class.)"""
    import torch

    h = hashlib.sha256(type(model).__name__.encode())
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "to_dict"):
        # not what saving rewrites (``save_pretrained`` sets ``architectures`` to the saving class): a model
        # and its saved copy encode alike
        d = {k: v for k, v in cfg.to_dict().items() if k not in ("_name_or_path", "transformers_version",
                                                                  "architectures")}
        h.update(json.dumps(d, sort_keys=True, default=str).encode())
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        h.update(f"{type(tok).__name__}:{len(tok)}".encode())
        # what the encoder does around the backbone (pooling, normalisation, prefixes), not its max length
        if hasattr(model, "encoding_settings"):
            st = {k: v for k, v in model.encoding_settings(is_query=False).items() if k != "max_length"}
            st["query_prefix"] = model.encoding_settings(is_query=True)["prefix"]
            h.update(json.dumps(st, sort_keys=True).encode())
    if isinstance(model, torch.nn.Module):
        # weights the encoder never uses (e.g. a backbone's pooler, randomly initialised on each load
        # of an MLM checkpoint) must not make two loads of the same checkpoint differ
        skip = tuple(getattr(model, "fingerprint_skip", ()))
        for name, t in sorted(model.state_dict().items()):
            if skip and name.startswith(skip):
                continue
            t = t.detach().cpu().contiguous()
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:32]


def corpus_fingerprint(pairs) -> tuple[list[str], str]:
    """``(doc_ids, hash)`` of an iterable of ``(doc_id, text)``: the hash covers every id and text
    (:class:`hf_dr.data.beir.CorpusHash`, the one definition)."""
    from .data.beir import corpus_fingerprint as fingerprint

    return fingerprint(pairs)


def _corpus_pairs(corpus):
    """A callable giving a fresh ``(doc_id, text)`` iterator over ``corpus`` each call."""
    from .data.beir import iter_corpus

    if isinstance(corpus, tuple) and len(corpus) == 2:  # (doc_ids, texts)
        ids, texts = corpus
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
        return lambda: zip(map(str, ids), texts)
    return lambda: iter_corpus(corpus)


def encode_to_folder(model, corpus, output: str | os.PathLike, *, model_name: str | None = None,
                     batch_size: int = 32, max_length: int | None = None, shard_size: int | None = None,
                     device=None, dtype=None, show_progress_bar: bool = True,
                     rank: int | None = None, world_size: int | None = None,
                     restart: bool = False) -> Embeddings | None:
    """Encode ``corpus`` (a BEIR folder, read line by line; a :class:`~hf_dr.data.BeirData`; or
    ``(doc_ids, texts)``) with ``model`` (any encoder of the suite) into the folder ``output``.

    Resumes a folder begun with the same model, corpus and settings (finished shards are kept);
    refuses one begun with others — or, with ``restart`` (one process only), empties it and starts
    again. ``hf-dr encode`` works in a hidden ``.NAME.partial`` folder beside its output and renames
    it into place once complete (:func:`hf_dr.io.partial_folder`). Returns the :class:`Embeddings` when the folder is complete
    (always with one process; on rank 0 with several), else ``None``.
    """
    from .encoding import DEFAULT_CHUNK_SIZE  # (encoding imports torch: reading a folder does not)
    from .st_encoder import as_encoder

    model = as_encoder(model)  # a SentenceTransformer / SparseEncoder object too
    out = Path(output)
    shard_size = DEFAULT_CHUNK_SIZE if shard_size is None else shard_size
    if rank is None or world_size is None:
        rank, world_size, state = dist()
    else:
        state = None
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1 (got {shard_size})")
    pairs = _corpus_pairs(corpus)
    doc_ids, cfp = corpus_fingerprint(pairs())
    if not doc_ids:
        raise ValueError("the corpus is empty: nothing to encode")
    settings = model.encoding_settings(is_query=False, max_length=max_length)
    from .precision import encoding_dtype

    dtype_name = str(encoding_dtype(model, dtype, device)).replace("torch.", "")
    plan = {"format": FORMAT_VERSION, "model": str(model_name or getattr(getattr(model, "config", None),
                                                                           "_name_or_path", "") or type(model).__name__),
            "model_class": type(model).__name__, "model_fingerprint": model_fingerprint(model),
            "corpus_fingerprint": cfp, "n_docs": len(doc_ids), "max_length": settings["max_length"],
            "sparse": settings["sparse"], "prefix": settings["prefix"],
            "query_prompt": model.encoding_settings(is_query=True)["prefix"], "document_prompt": settings["prefix"],
            "pooling": settings["pooling"],
            "normalize": settings["normalize"], "dtype": dtype_name, "shard_size": int(shard_size),
            "batch_size": int(batch_size)}
    n_shards = -(-len(doc_ids) // shard_size)
    (out / "shards").mkdir(parents=True, exist_ok=True)
    plan_file = out / "plan.json"
    if plan_file.is_file():
        old = read_json(plan_file, EmbeddingsError)
        diff = [k for k in _IDENTITY if old.get(k, _ABSENT.get(k)) != plan.get(k)]
        if diff and restart and world_size == 1:
            import shutil

            logger.warning("%s was begun with other settings (%s): starting again", out, ", ".join(diff))
            shutil.rmtree(out)
            (out / "shards").mkdir(parents=True)
            return encode_to_folder(model, corpus, out, model_name=model_name, batch_size=batch_size,
                                    max_length=max_length, shard_size=shard_size, device=device, dtype=dtype,
                                    show_progress_bar=show_progress_bar, rank=rank, world_size=world_size)
        if diff:
            raise EmbeddingsError(
                f"{out} holds embeddings begun with other settings ({', '.join(f'{k}: {old.get(k)!r} -> {plan[k]!r}' for k in diff)}); "
                "encode into another folder, or delete this one first")
        if (out / "manifest.json").is_file():  # every process sees it: none waits for another
            logger.info("%s is complete: nothing to encode", out)
            return Embeddings(out) if rank == 0 else None
    elif rank == 0 or state is None:
        write_json(plan_file, plan)
    if not (out / "doc_ids.jsonl").is_file() and rank == 0:
        write_atomic(out / "doc_ids.jsonl",
                     lambda p: p.write_text("".join(json.dumps(d) + "\n" for d in doc_ids), encoding="utf-8"))
    suffix = ".npz" if plan["sparse"] else ".npy"

    def done(i: int) -> bool:
        return (out / "shards" / f"{shard_name(i)}.json").is_file() and \
            (out / "shards" / (shard_name(i) + suffix)).is_file()

    todo = shards_to_do(out, n_shards, rank, world_size, done)
    if todo:
        todo_set = set(todo)
        n_todo_docs = sum(min(shard_size, len(doc_ids) - i * shard_size) for i in todo)

        def texts():
            for j, (_, t) in enumerate(pairs()):
                if j // shard_size in todo_set:
                    yield t

        blocks = model.iter_encode_corpus(
            texts(), batch_size=batch_size, max_length=settings["max_length"], show_progress_bar=show_progress_bar,
            device=device, dtype=dtype, chunk_size=shard_size, total=n_todo_docs)
        for i, block in zip(todo, blocks):
            start = i * shard_size
            rows = block.shape[0]
            data_file = out / "shards" / (shard_name(i) + suffix)
            if plan["sparse"]:
                write_atomic(data_file, lambda p, b=block: sp.save_npz(open(p, "wb"), b.tocsr(), compressed=False))
            else:
                write_atomic(data_file, lambda p, b=block: np.save(open(p, "wb"), np.ascontiguousarray(b, np.float32)))
            write_json(out / "shards" / f"{shard_name(i)}.json",
                       {"shard": i, "start": start, "rows": rows, "first_id": doc_ids[start],
                        "last_id": doc_ids[start + rows - 1], "dim": int(block.shape[1]),
                        "nnz": int(block.nnz) if plan["sparse"] else None})
    if not all_shards_done(out, n_shards, done, state, rank, EmbeddingsError):
        return None
    shards = [read_json(out / "shards" / f"{shard_name(i)}.json", EmbeddingsError) for i in range(n_shards)]
    manifest = {**plan, "dim": shards[0]["dim"], "n_shards": n_shards,
                "shards": [{"file": f"shards/{shard_name(s['shard'])}{suffix}", "start": s["start"], "rows": s["rows"],
                            **({"nnz": s["nnz"]} if plan["sparse"] else {})} for s in shards],
                "doc_ids": "doc_ids.jsonl"}
    write_json(out / "manifest.json", manifest)
    return Embeddings(out)


# ----------------------------------------------------------------------------- checking
#: the fields of an embeddings manifest that say what made the vectors (copied into a saved index)
ENCODING_FIELDS = ("model", "model_class", "model_fingerprint", "corpus_fingerprint", "n_docs", "max_length", "sparse",
                   "prefix", "query_prompt", "document_prompt", "pooling", "normalize", "dtype", "dim")


class EncodedVectors:
    """Something made of a corpus's vectors by one model — an embeddings folder (:class:`Embeddings`)
    or an index saved from one (:class:`hf_dr.retrieval.saved.SavedIndex`): ``path``, ``manifest``
    (:data:`ENCODING_FIELDS`), ``doc_ids`` (a sequence, possibly memory-mapped), and the one check
    that a model, max length, prompts and corpus are those that made it (:meth:`check`)."""

    path: Path
    manifest: dict
    doc_ids: Sequence[str]
    #: how a refusal names what this is ("was encoded by another model")
    _made = "was encoded"
    _of_corpus = "these are embeddings of another corpus"

    @property
    def prompts(self) -> tuple[str, str]:
        """``(query prompt, document prompt)`` the folder was encoded with (``""``: none, as in folders
        written before prompts were recorded)."""
        m = self.manifest
        return m.get("query_prompt", ""), m.get("document_prompt", m.get("prefix") or "")

    def check_prompts(self, model) -> None:
        """Refuse (:class:`EmbeddingsError`) a ``model`` that prepends other prompts than these embeddings'."""
        q, d = self.prompts
        want_q = model.encoding_settings(is_query=True)["prefix"]
        want_d = model.encoding_settings(is_query=False)["prefix"]
        for what, flag, have, want in (("document", "--document-prompt", d, want_d),
                                       ("query", "--query-prompt", q, want_q)):
            if have != want:
                raise EmbeddingsError(
                    f"{self.path} {self._made} with the {what} prompt {have!r}, this run uses {want!r}: the vectors "
                    f"would not match; pass {flag} {have!r} (as the folder), or encode the corpus again")

    def _same_model_other_prompts(self, model) -> bool:
        """Whether ``model`` with this folder's prompts would have made it (the prompts are all that differ)."""
        q, d = self.prompts
        old = getattr(model, "query_prefix", None), getattr(model, "doc_prefix", None)
        if (old[0] or "", old[1] or "") == (q, d):
            return False
        try:
            model.query_prefix, model.doc_prefix = q, d
            return model_fingerprint(model) == self.manifest["model_fingerprint"]
        finally:
            model.query_prefix, model.doc_prefix = old

    def check(self, model=None, doc_ids: Sequence[str] | None = None, max_length: int | None = None,
              corpus_fingerprint: str | None = None) -> None:
        """Refuse (:class:`EmbeddingsError`) when ``model`` is not the one that made these embeddings
        (weights or configuration differ), ``max_length`` (when given) is not the one they were
        encoded with, ``doc_ids`` are not its documents, or ``corpus_fingerprint`` (of
        :func:`hf_dr.embeddings.corpus_fingerprint`: ids and texts) is not its corpus's."""
        from .st_encoder import as_encoder

        m = self.manifest
        model = as_encoder(model)  # a SentenceTransformer / SparseEncoder object too
        if model is not None:
            fp = model_fingerprint(model)
            if fp != m["model_fingerprint"]:
                if self._same_model_other_prompts(model):
                    self.check_prompts(model)
                raise EmbeddingsError(
                    f"{self.path} {self._made} by another model ({m.get('model')!r}, {m.get('model_class')}, "
                    f"fingerprint {m['model_fingerprint']}), not by this {type(model).__name__} (fingerprint {fp}): "
                    "its vectors would not match the query vectors; encode the corpus with this model")
        if model is not None and max_length is not None:  # not given: the folder's own max length
            want = model.encoding_settings(is_query=False, max_length=max_length)["max_length"]
            if want != m["max_length"]:
                raise EmbeddingsError(f"{self.path} {self._made} with max length {m['max_length']}, "
                                      f"this run asks for {want}")
        if doc_ids is not None:
            if len(doc_ids) != len(self.doc_ids):
                raise EmbeddingsError(f"{self.path} holds {len(self.doc_ids)} documents, the corpus has {len(doc_ids)}: "
                                      f"{self._of_corpus}")
            if not isinstance(doc_ids, list):
                doc_ids = list(doc_ids)
            mine = self.doc_ids if isinstance(self.doc_ids, list) else list(self.doc_ids)
            if doc_ids != mine:
                bad = next(i for i, (a, b) in enumerate(zip(doc_ids, mine)) if a != b)
                raise EmbeddingsError(f"{self.path}: document {bad} is {mine[bad]!r}, the corpus has "
                                      f"{doc_ids[bad]!r}: {self._of_corpus} (or another order)")
        if corpus_fingerprint is not None and m.get("corpus_fingerprint") not in (None, corpus_fingerprint):
            raise EmbeddingsError(f"{self.path}: the same document ids, other texts (corpus fingerprint "
                                  f"{m.get('corpus_fingerprint')} here, {corpus_fingerprint} now): "
                                  f"{self._of_corpus}; encode it again")


# ----------------------------------------------------------------------------- reading
class Embeddings(EncodedVectors):
    """A complete embeddings folder: ``doc_ids``, ``manifest``, the vectors shard by shard
    (:meth:`iter_shards`) or whole (:meth:`matrix`: dense float32 / CSR)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        mf = self.path / "manifest.json"
        if not mf.is_file():
            if (self.path / "plan.json").is_file():
                raise EmbeddingsError(f"{self.path}: the encoding is not finished (no manifest.json): run the same "
                                      "`hf-dr encode` command again to complete it")
            raise EmbeddingsError(f"{self.path} is not an embeddings folder (no manifest.json); make one with "
                                  "`hf-dr encode --data DIR --model M --output {self.path}`")
        m = read_json(mf, EmbeddingsError)
        need = ("format", "n_docs", "sparse", "dim", "shards", "doc_ids", "model_fingerprint", "max_length")
        missing = [k for k in need if k not in m]
        if missing:
            raise EmbeddingsError(f"{mf}: missing field(s) {missing}")
        if m["format"] != FORMAT_VERSION:
            raise EmbeddingsError(f"{mf}: format {m['format']!r}, this hf-dr reads format {FORMAT_VERSION}")
        self.manifest = m
        ids_file = self.path / m["doc_ids"]
        if not ids_file.is_file():
            raise EmbeddingsError(f"{ids_file} is missing")
        ids = []
        with open(ids_file, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    ids.append(str(json.loads(line)))
                except json.JSONDecodeError:
                    raise EmbeddingsError(f"{ids_file}:{lineno}: not a JSON string") from None
        self.doc_ids = ids
        rows = 0
        for s in m["shards"]:
            if s.get("start") != rows:
                raise EmbeddingsError(f"{mf}: shard {s.get('file')} starts at row {s.get('start')}, expected {rows}")
            if not (self.path / s["file"]).is_file():
                raise EmbeddingsError(f"{self.path / s['file']} is missing")
            rows += int(s["rows"])
        if not (rows == m["n_docs"] == len(ids)):
            raise EmbeddingsError(f"{mf}: {m['n_docs']} documents announced, {rows} rows in the shards, "
                                  f"{len(ids)} ids in {ids_file.name}")

    @property
    def is_sparse(self) -> bool:
        return bool(self.manifest["sparse"])

    def __len__(self) -> int:
        return len(self.doc_ids)

    def _load(self, s: dict):
        p = self.path / s["file"]
        try:
            if self.is_sparse:
                block = sp.load_npz(p).tocsr()
            else:
                block = np.load(p, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise EmbeddingsError(f"{p}: unreadable shard ({e})") from None
        if block.shape != (s["rows"], self.manifest["dim"]):
            raise EmbeddingsError(f"{p}: shape {block.shape}, the manifest says ({s['rows']}, {self.manifest['dim']})")
        return block

    def iter_shards(self) -> Iterator[tuple[int, np.ndarray | sp.csr_matrix]]:
        """``(first row, block)`` for each shard, in order (dense blocks are memory-mapped)."""
        for s in self.manifest["shards"]:
            yield s["start"], self._load(s)

    def matrix(self) -> np.ndarray | sp.csr_matrix:
        """All vectors: float32 ``[n, dim]`` (memory-mapped when there is one shard) or CSR ``[n, |V|]``."""
        blocks = [b for _, b in self.iter_shards()]
        if len(blocks) == 1:
            return blocks[0]
        return sp.vstack(blocks, format="csr") if self.is_sparse else np.concatenate(blocks)
