"""Indexes built once and searched many times (``hf-dr index --backend faiss|inverted|seismic|bm25 --output IDX``).

An index folder holds::

    IDX/
      index.json       the manifest (written last): format, backend, parameters, number of
                       documents, corpus fingerprint; for faiss / inverted / seismic also what made the vectors
                       (the embeddings folder's model + fingerprint, prompts, max length, pooling...)
      doc_ids.utf8     the documents' ids in index order (UTF-8, one after the other) and where each
      doc_ids.offsets.npy  starts: memory-mapped (:class:`DocIds`)
      faiss.index      --backend faiss: faiss' own writer (flat, HNSW or IVF-PQ), opened memory-mapped
      postings.*.npy   --backend inverted: the posting lists of a sparse embeddings folder, memory-mapped
      seismic.*        --backend seismic: the engine's own file (read whole when opened), the rows it
                       holds, its build parameters
      bm25s/           --backend bm25: bm25s' own save (opened with ``mmap=True``), bm25.json its tokenisation

:func:`save_dense_index`, :func:`save_sparse_index` and :func:`save_bm25_index` write one;
:class:`SavedIndex` opens one and makes its :class:`~hf_dr.retrieval.Retriever`
(:meth:`SavedIndex.retriever`) after checking it against what the search uses — the model (the
one check of :class:`hf_dr.embeddings.EncodedVectors`: fingerprint, prompts, max length), the corpus
(number of documents and fingerprint), BM25's tokenisation — and refusing, with a
:class:`SavedIndexError` or :class:`~hf_dr.embeddings.EmbeddingsError`, what does not match.
Nothing is rebuilt: opening a saved HNSW graph costs what reading its header costs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..embeddings import ENCODING_FIELDS, EmbeddingsError, EncodedVectors

__all__ = ["SavedIndex", "SavedIndexError", "DocIds", "save_dense_index", "save_sparse_index", "save_seismic_index",
           "save_bm25_index", "BACKENDS", "INDEX_FORMAT"]

INDEX_FORMAT = 1
BACKENDS = ("faiss", "inverted", "seismic", "bm25")
#: the retriever each backend serves
KINDS = {"bm25": "bm25", "faiss": "dense", "inverted": "sparse", "seismic": "sparse"}
MANIFEST = "index.json"
IDS_FILE = "doc_ids.utf8"
OFFSETS_FILE = "doc_ids.offsets.npy"


class SavedIndexError(EmbeddingsError):
    """An index folder is not one, is damaged, or does not match the corpus / settings of a search."""


# ----------------------------------------------------------------------------- ids
class DocIds(Sequence):
    """The documents' ids of a saved index, memory-mapped: their UTF-8 bytes one after the other
    (``doc_ids.utf8``) and where each starts (``doc_ids.offsets.npy``, int64 ``[n + 1]``). ``len``,
    ``ids[i]``, iteration, and ``take(rows) -> list[str]`` (what a search uses: only the hits' ids
    are read), so a million ids cost no Python object each — and no library beyond numpy."""

    def __init__(self, folder: str | os.PathLike):
        import mmap

        self.folder = Path(folder)
        self._offsets = np.load(self.folder / OFFSETS_FILE, mmap_mode="r")
        size = int(self._offsets[-1]) if len(self._offsets) else 0
        with open(self.folder / IDS_FILE, "rb") as f:
            self._blob = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        if len(self._blob) != size:
            raise SavedIndexError(f"{self.folder / IDS_FILE}: {len(self._blob)} bytes, the offsets say {size}")

    @staticmethod
    def write(folder: str | os.PathLike, ids: Iterable[str]) -> int:
        """Write ``ids`` (any iterable, consumed once) into ``folder``; returns how many."""
        folder = Path(folder)
        offsets = [0]
        with open(folder / IDS_FILE, "wb") as f:
            for d in ids:
                b = d.encode("utf-8", "surrogatepass")
                f.write(b)
                offsets.append(offsets[-1] + len(b))
        np.save(folder / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
        return len(offsets) - 1

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _get(self, start: int, end: int) -> str:
        return self._blob[start:end].decode("utf-8", "surrogatepass")

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"document {i} of {n}")
        i %= n
        return self._get(int(self._offsets[i]), int(self._offsets[i + 1]))

    def __iter__(self):
        for s in range(0, len(self), 65_536):
            yield from self.take(np.arange(s, min(len(self), s + 65_536)))

    def take(self, rows) -> list[str]:
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self._offsets[rows].tolist(), self._offsets[rows + 1].tolist()
        blob = self._blob
        return [blob[a:b].decode("utf-8", "surrogatepass") for a, b in zip(starts, ends)]

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and list(self) == list(other)

    __hash__ = None


# ----------------------------------------------------------------------------- writing
def _finish(folder: Path, manifest: dict) -> dict:
    manifest = {"format": INDEX_FORMAT, **manifest}
    tmp = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, folder / MANIFEST)
    return manifest


def _encoded(embeddings):
    from ..embeddings import Embeddings

    emb = embeddings if isinstance(embeddings, Embeddings) else Embeddings(embeddings)
    return emb, {k: emb.manifest[k] for k in ENCODING_FIELDS if k in emb.manifest}


def save_dense_index(embeddings, folder: str | os.PathLike, *, index_type: str = "flat", hnsw_m: int = 32,
                     ef_search: int = 128, nlist: int | None = None, pq_m: int = 16, nprobe: int = 32,
                     show_progress_bar: bool | None = None) -> dict:
    """Build a faiss index (:class:`~hf_dr.retrieval.DenseIndex`, the one dense index) of a dense
    embeddings folder (``hf-dr encode``; its shards are added as they are, memory-mapped) and write
    it into ``folder`` with faiss' own writer. Returns the manifest."""
    from .dense import DenseIndex

    emb, enc = _encoded(embeddings)
    if emb.is_sparse:
        raise SavedIndexError(f"{emb.path} holds sparse vectors: index them with --backend inverted")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    index = DenseIndex([b for _, b in emb.iter_shards()], emb.doc_ids, index_type=index_type, hnsw_m=hnsw_m,
                       ef_search=ef_search, nlist=nlist, pq_m=pq_m, nprobe=nprobe, use_gpu=False,
                       show_progress_bar=show_progress_bar)
    build = time.perf_counter() - t0
    index.save(folder)
    DocIds.write(folder, emb.doc_ids)
    return _finish(folder, {"backend": "faiss", **index.params, **enc, "build_seconds": round(build, 2)})


def _sparse_source(embeddings, folder) -> tuple:
    """``(embeddings, its encoding record, the index folder, created)``; refused when the vectors are dense."""
    emb, enc = _encoded(embeddings)
    if not emb.is_sparse:
        raise SavedIndexError(f"{emb.path} holds dense vectors: index them with --backend faiss")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return emb, enc, folder


def save_sparse_index(embeddings, folder: str | os.PathLike) -> dict:
    """Build the inverted index (:class:`~hf_dr.retrieval.SparseIndex`) of a sparse embeddings folder
    and write its posting lists into ``folder``. Returns the manifest."""
    from .sparse import SparseIndex

    emb, enc, folder = _sparse_source(embeddings, folder)
    t0 = time.perf_counter()
    index = SparseIndex(emb.matrix(), emb.doc_ids)
    build = time.perf_counter() - t0
    index.save(folder)
    DocIds.write(folder, emb.doc_ids)
    return _finish(folder, {"backend": "inverted", "nnz": int(index.postings.nnz), **enc,
                            "build_seconds": round(build, 2)})


def save_seismic_index(embeddings, folder: str | os.PathLike, *, query_cut: int | None = None,
                       heap_factor: float | None = None, threads: int = 0, show_progress_bar: bool | None = None,
                       **build_params) -> dict:
    """Build a Seismic index (:class:`~hf_dr.retrieval.seismic.SeismicIndex`: approximate, for
    millions of SPLADE vectors) of a sparse embeddings folder (its shards handed to the engine one
    after the other) and write it into ``folder``. ``build_params``: ``n_postings``,
    ``centroid_fraction``, ``summary_energy``, ... (:data:`~hf_dr.retrieval.seismic.BUILD_DEFAULTS`);
    ``query_cut`` / ``heap_factor``: the search defaults saved with it. Returns the manifest."""
    from .seismic import SeismicIndex

    emb, enc, folder = _sparse_source(embeddings, folder)
    t0 = time.perf_counter()
    index = SeismicIndex([b for _, b in emb.iter_shards()], emb.doc_ids, query_cut=query_cut,
                         heap_factor=heap_factor, threads=threads, show_progress_bar=show_progress_bar,
                         **build_params)
    build = time.perf_counter() - t0
    index.save(folder, show_progress_bar=show_progress_bar)
    DocIds.write(folder, emb.doc_ids)
    return _finish(folder, {"backend": "seismic", **index.params, "indexed_docs": len(index.rows), **enc,
                            "build_seconds": round(build, 2)})


def save_bm25_index(data, folder: str | os.PathLike, *, stemmer: str | None = "english",
                    stopwords: str | list[str] | None = "en", k1: float = 1.5, b: float = 0.75,
                    method: str = "lucene", show_progress_bar: bool = True) -> dict:
    """Build the BM25 index (:class:`~hf_dr.retrieval.BM25Index`, the one BM25) of ``data``'s corpus
    (a :class:`hf_dr.data.BeirData`; its texts streamed from the memory-mapped dataset) and write it
    into ``folder`` with bm25s' own ``save``. Returns the manifest."""
    from .bm25 import BM25Index

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n = DocIds.write(folder, (d for d, _ in data.iter_docs()))
    ids = DocIds(folder)
    t0 = time.perf_counter()
    index = BM25Index(ids, (t for _, t in data.iter_docs()), stemmer=stemmer, stopwords=stopwords, k1=k1, b=b,
                      method=method, show_progress_bar=show_progress_bar)
    build = time.perf_counter() - t0
    index.save(folder)
    return _finish(folder, {"backend": "bm25", **index.params, "n_docs": n,
                            "corpus_fingerprint": data.corpus_fingerprint(), "corpus": str(data.name),
                            "build_seconds": round(build, 2)})


# ----------------------------------------------------------------------------- reading
class SavedIndex(EncodedVectors):
    """An index folder written by :func:`save_dense_index` / :func:`save_sparse_index` /
    :func:`save_bm25_index` (``hf-dr index``): ``manifest``, ``backend``, ``doc_ids`` (memory-mapped)."""

    _made = "was built from vectors encoded"
    _of_corpus = "the index is of another corpus"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        mf = self.path / MANIFEST
        if not mf.is_file():
            why = "no such folder" if not self.path.exists() else f"no {MANIFEST}"
            raise SavedIndexError(f"{self.path} is not an hf-dr index ({why}); build one with `hf-dr index "
                                  "--embeddings EMB --backend faiss --output IDX` or `hf-dr index --data DIR "
                                  "--backend bm25 --output IDX`")
        try:
            m = json.loads(mf.read_text())
        except json.JSONDecodeError as e:
            raise SavedIndexError(f"{mf}: not valid JSON ({e.msg}, line {e.lineno}): the index is damaged; "
                                  "build it again") from None
        if not isinstance(m, dict) or m.get("format") != INDEX_FORMAT or m.get("backend") not in BACKENDS:
            raise SavedIndexError(f"{mf}: not an index manifest of this hf-dr (format {INDEX_FORMAT}, backend one of "
                                  f"{', '.join(BACKENDS)})")
        self.manifest, self.backend = m, m["backend"]
        for name in (IDS_FILE, OFFSETS_FILE):
            if not (self.path / name).is_file():
                raise SavedIndexError(f"{self.path / name} is missing: the index is damaged; build it again")
        self.doc_ids = DocIds(self.path)
        if len(self.doc_ids) != m.get("n_docs"):
            raise SavedIndexError(f"{mf}: {m.get('n_docs')} documents announced, {len(self.doc_ids)} ids in "
                                  f"{OFFSETS_FILE}")

    def __len__(self) -> int:
        return len(self.doc_ids)

    @property
    def kind(self) -> str:
        """The retriever it serves: ``bm25``, ``dense`` or ``sparse``."""
        return KINDS[self.backend]

    def describe(self) -> str:
        m = self.manifest
        what = {"faiss": f"faiss {m.get('index_type')} index", "inverted": "inverted index",
                "seismic": "Seismic index", "bm25": "BM25 index"}[self.backend]
        by = f" of the vectors of {m.get('model')!r}" if self.backend != "bm25" else ""
        return f"{what}{by}, {m['n_docs']} documents"

    def check_corpus(self, data) -> None:
        """Refuse (:class:`SavedIndexError`) a corpus (a :class:`hf_dr.data.BeirData`) that is not the
        indexed one: another number of documents, or other ids / texts (the corpus fingerprint)."""
        m = self.manifest
        n = len(data.corpus)
        if n != m["n_docs"]:
            raise SavedIndexError(f"{self.path} indexes {m['n_docs']} documents, {data.name} has {n}: "
                                  f"{self._of_corpus}; build the index from this corpus")
        fp = data.corpus_fingerprint()
        if m.get("corpus_fingerprint") != fp:
            raise SavedIndexError(f"{self.path} indexes another corpus than {data.name} (the same number of documents, "
                                  f"other ids or texts: corpus fingerprint {m.get('corpus_fingerprint')} there, {fp} "
                                  "here); build the index from this corpus")

    def check_bm25(self, stemmer: str | None = "english", stopwords: str | list[str] | None = "en") -> None:
        """Refuse a BM25 search with another tokenisation than the index's."""
        m = self.manifest
        for key, flag, want in (("stemmer", "--bm25-stemmer", stemmer), ("stopwords", "--bm25-stopwords", stopwords)):
            if m.get(key) != want:
                raise SavedIndexError(f"{self.path} was built with {flag} {m.get(key) or 'none'}, this run asks for "
                                      f"{want or 'none'}: pass {flag} {m.get(key) or 'none'}, or build another index")

    def bm25_index(self, data=None, *, stemmer=None, stopwords=None, check_bm25: bool = False, mmap: bool = True):
        """The :class:`~hf_dr.retrieval.BM25Index` of a saved BM25 index (e.g. for the labelling
        pipeline, which shares it with its reranker), checked against ``data``'s corpus."""
        if self.backend != "bm25":
            raise SavedIndexError(f"{self.path} is a {self.describe()}, not a BM25 index")
        if data is not None:
            self.check_corpus(data)
        if check_bm25:
            self.check_bm25(stemmer, stopwords)
        from .bm25 import BM25Index

        return BM25Index.load(self.path, self.doc_ids, mmap=mmap)

    #: the search-time options of each backend
    _SEARCH_OPTIONS: ClassVar[dict] = {"faiss": ("ef_search", "nprobe"), "seismic": ("query_cut", "heap_factor", "threads")}

    def _check_search_options(self, **given) -> None:
        own = self._SEARCH_OPTIONS.get(self.backend, ())
        wrong = [k for k, v in given.items() if v is not None and k not in own]
        if wrong:
            def flags(names):
                return " / ".join(f"--{k.replace('_', '-')}" for k in names)

            theirs = f"its search options are {flags(own)}" if own else "it has no search options"
            raise SavedIndexError(f"{flags(wrong)} do not apply to {self.path} (a {self.describe()}): {theirs}")

    def retriever(self, encoder=None, data=None, *, max_length: int | None = None, batch_size: int = 32,
                  bm25_stemmer: str | None = None, bm25_stopwords: str | list[str] | None = None,
                  check_bm25: bool = False, ef_search: int | None = None, nprobe: int | None = None,
                  use_gpu: bool | str = "auto", query_cut: int | None = None, heap_factor: float | None = None,
                  threads: int | None = None, mmap: bool = True, **retriever_kwargs):
        """The :class:`~hf_dr.retrieval.Retriever` of this index, opened (memory-mapped), not rebuilt.

        Checked first: ``data`` (the corpus searched, when given) is the indexed corpus; for a
        faiss / inverted index ``encoder`` (needed: it encodes the queries) made the vectors
        (fingerprint, prompts, ``max_length`` when given); for BM25 with ``check_bm25`` the
        tokenisation is ``bm25_stemmer`` / ``bm25_stopwords``. Search-time options: ``ef_search`` /
        ``nprobe`` (faiss), ``query_cut`` / ``heap_factor`` / ``threads`` (Seismic; default: the
        index's own)."""
        from .retriever import BM25Retriever, EncoderRetriever

        if data is not None:
            self.check_corpus(data)
        self._check_search_options(ef_search=ef_search, nprobe=nprobe, query_cut=query_cut, heap_factor=heap_factor,
                                   threads=threads)
        if self.backend == "bm25":
            if encoder is not None:
                raise SavedIndexError(f"{self.path} is a BM25 index: it takes no model")
            r = BM25Retriever.from_index(self.bm25_index(stemmer=bm25_stemmer, stopwords=bm25_stopwords,
                                                         check_bm25=check_bm25, mmap=mmap))
        else:
            if encoder is None:
                raise SavedIndexError(f"{self.path} is a {self.describe()}: searching it needs the model that "
                                      "encoded them (--model)")
            self.check(encoder, max_length=max_length)
            if self.backend == "faiss":
                from .dense import DenseIndex

                params = {k: self.manifest[k] for k in ("index_type", "hnsw_m", "ef_search", "nlist", "pq_m", "nprobe")
                          if k in self.manifest}
                index = DenseIndex.load(self.path, self.doc_ids, params, mmap=mmap, ef_search=ef_search,
                                        nprobe=nprobe, use_gpu=use_gpu)
            elif self.backend == "seismic":
                from .seismic import SeismicIndex

                index = SeismicIndex.load(self.path, self.doc_ids, query_cut=query_cut, heap_factor=heap_factor,
                                          threads=threads or 0)
            else:
                from .sparse import SparseIndex

                index = SparseIndex.load(self.path, self.doc_ids, mmap=mmap)
            r = EncoderRetriever.from_index(encoder, index, batch_size=batch_size, **retriever_kwargs)
        r.saved = self
        return r
