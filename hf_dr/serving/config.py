"""What a :class:`~hf_dr.serving.SearchEngine` serves: its corpora (by name), models, saved indexes,
DAMs, cache bounds and device. A Space reads these settings from its environment (see
``spaces/search_demo/app.py``); a script builds a :class:`ServingConfig` directly."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

#: the retrievers a saved index (``indexes``) can serve
SAVED_INDEX_RETRIEVERS = ("BM25", "Dense", "SPLADE-CAI")


def _default_dense() -> str:
    from ..models import default_model_path

    return default_model_path()


def _default_corpus() -> str:
    from ..data import SAMPLE

    return str(SAMPLE)


def corpus_name(path_or_id: str) -> str:
    """The name a visitor sees for a corpus: its folder's (or Hub dataset's) last part, never a path."""
    return Path(path_or_id.rstrip("/\\")).name or path_or_id


def _named(entries: list[str], out: dict[str, str]) -> dict[str, str]:
    """``out`` with the ``name=folder`` (or bare folder / Hub id, named after its last part) entries added."""
    for entry in entries:
        entry = entry.strip()
        name, sep, path = entry.partition("=")
        if not sep or Path(entry).exists() or "/" in name or os.sep in name:
            name, path = corpus_name(entry), entry  # a bare folder / Hub id: named after its last part
        name, path = name.strip(), path.strip()
        if not name or not path:
            raise ValueError(f"bad corpus entry {entry!r}: use name=folder")
        if name in out:
            if out[name] == path:
                continue
            raise ValueError(f"two corpora are named {name!r}: name them (HF_DR_CORPORA=\"name=folder;...\")")
        out[name] = path
    return out


@dataclass
class ServingConfig:
    """Settings of a :class:`~hf_dr.serving.SearchEngine`.

    ``corpus``: one BEIR folder / Hub dataset id (or ``name=folder``; default: the bundled
    ``scifact-mini`` sample); ``corpora``: more, ``name=folder;name=folder`` (``;`` or new lines).
    ``cache_size``: built indexes (and loaded corpora) kept, least recently used dropped.
    ``build_wait``: seconds a search waits for an index being built. ``prebuild``: retrievers built
    for every corpus by :meth:`~hf_dr.serving.SearchEngine.prebuild` (``"BM25,Dense"``).
    ``dense_model`` / ``splade_model`` / ``berm_model`` / ``ddr_rem``: folders or Hub ids (a
    retriever whose model is unset is not offered); ``ddr_dams``: a folder of DAM folders or
    ``name=path,name=path``. ``qdrant_url`` / ``qdrant_path`` / ``qdrant_edge`` with
    ``qdrant_collection``: a Qdrant collection of the corpus. ``indexes``: saved indexes opened
    instead of building, ``corpus:BM25=folder;corpus:Dense=folder;corpus:SPLADE-CAI=folder`` (an
    inverted or Seismic index of ``splade_model``'s vectors, searched as they were encoded: the IDF
    switch does not change it). ``device``, ``dtype``
    (``auto`` | ``fp32`` | ``bf16`` | ``fp16``, :mod:`hf_dr.precision`), ``batch_size``: encoding;
    ``top_k``: results of a search by default.

    ``documents``: folders of documents (PDF, DOCX, HTML, Markdown, text; or the output of ``hf-dr
    ingest``), one or ``name=folder;name=folder`` like ``corpora``: each is listed with the corpora,
    ingested once into passages (:mod:`hf_dr.ingest`, cached by the listing of its files), and its hits
    name their file, page and passage. Passages fit ``dense_model``'s window (its tokenizer), or are
    ``documents_max_words`` words when that is set (no model is loaded for them then).
    """

    corpus: str = field(default_factory=_default_corpus)
    corpora: str | None = None
    documents: str | None = None
    documents_max_words: int | None = None
    cache_size: int = 4
    build_wait: float = 20.0
    prebuild: str | None = "BM25,Dense"
    dense_model: str = field(default_factory=_default_dense)
    splade_model: str | None = None
    berm_model: str | None = None
    ddr_rem: str | None = None
    ddr_dams: str | None = None
    qdrant_url: str | None = None
    qdrant_path: str | None = None
    qdrant_edge: str | None = None
    qdrant_collection: str | None = None
    indexes: str | None = None
    device: str = "auto"
    dtype: str = "auto"  # auto | fp32 | bf16 | fp16, as hf-dr's --dtype (hf_dr.precision): bf16 on a GPU, fp32 on CPU
    batch_size: int = 32
    top_k: int = 10

    def corpus_map(self) -> dict[str, str]:
        """``{name shown to visitors: BEIR folder, Hub id or folder of documents}``, in the order of
        the list (the corpora, then the folders of documents): the only corpora the engine ever opens."""
        entries = ([self.corpus] if self.corpus else []) + [
            e for e in re.split(r"[;\n]", self.corpora or "") if e.strip()]
        out = _named(entries, {})
        out = _named([e for e in re.split(r"[;\n]", self.documents or "") if e.strip()], out)
        if not out:
            raise ValueError("no corpus configured: set HF_DR_CORPUS, HF_DR_CORPORA or HF_DR_DOCUMENTS")
        return out

    def documents_map(self) -> dict[str, str]:
        """``{name: folder}`` of ``documents``: the corpora of :meth:`corpus_map` ingested first."""
        if not self.documents:
            return {}
        return _named([e for e in re.split(r"[;\n]", self.documents) if e.strip()], {})

    def index_map(self) -> dict[tuple[str, str], str]:
        """``{(corpus name, retriever): saved index folder}`` from ``indexes`` (``corpus:BM25=folder;...``)."""
        out: dict[tuple[str, str], str] = {}
        for entry in re.split(r"[;\n]", self.indexes or ""):
            entry = entry.strip()
            if not entry:
                continue
            key, sep, path = entry.partition("=")
            name, colon, retriever = key.rpartition(":")
            if not sep or not colon or not path.strip():
                raise ValueError(f"bad index entry {entry!r}: use corpus:BM25=folder or corpus:Dense=folder")
            retriever = retriever.strip()
            if retriever not in SAVED_INDEX_RETRIEVERS:
                raise ValueError(f"bad index entry {entry!r}: saved indexes serve "
                                 f"{', '.join(SAVED_INDEX_RETRIEVERS)}, not {retriever!r}")
            out[(name.strip(), retriever)] = path.strip()
        return out

    def dams(self) -> dict[str, str]:
        """``{target domain: DAM path}`` from ``ddr_dams`` (a folder of DAM folders, or name=path pairs)."""
        if not self.ddr_dams:
            return {}
        p = Path(self.ddr_dams)
        if p.is_dir():
            return {d.name: str(d) for d in sorted(p.iterdir()) if (d / "config.json").is_file()}
        out = {}
        for item in self.ddr_dams.split(","):
            name, _, path = item.partition("=")
            if path:
                out[name.strip()] = path.strip()
        return out
