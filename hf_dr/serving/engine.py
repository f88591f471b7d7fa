"""The search engine of the Space: one query over a configured corpus with any retriever kind
(BM25, dense, BERM, DDR on a chosen DAM, SPLADE-CAI with / without IDF, the BM25 + dense hybrid, a
Qdrant collection), each index built once in the background and kept in a bounded LRU.

A corpus may be a folder of documents (``ServingConfig.documents``): it is ingested into passages
first (cached), and each hit names its file, page and passage. Every hit's passage comes with the
query's terms marked, as BM25 matches them; results are documents (passages scored as their
document, MaxP, the best passage shown) or passages.

Whoever calls it (a visitor of a page) only ever names a configured corpus: any other value (a
path, a Hub id) is refused with :data:`UNKNOWN_CORPUS`, and :meth:`SearchEngine.visitor_message`
turns any error into a sentence without server paths nor traceback (the detail goes to the log).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

from .cache import BuildCache
from .config import ServingConfig
from .highlight import essential_unit, mark_query_terms, matched_terms

logger = logging.getLogger(__name__)

RETRIEVERS = ("BM25", "Dense", "BERM", "DDR", "SPLADE-CAI", "Hybrid (BM25 + dense)", "Qdrant")
SOURCE_DAM = "source DAM (the REM's own)"
UNKNOWN_CORPUS = "unknown corpus: choose one of the corpora in the list"
#: what a search returns: documents (a document's passages scored as it, MaxP) or the passages themselves
RESULTS = ("documents", "passages")
#: a hit's passage is shown up to this many characters (a passage of documents is shorter than its window)
SHOWN_CHARS = 1500


class UserError(Exception):
    """Bad input: shown to the user as a message, never as a traceback."""


class StillBuilding(UserError):
    """The index a search needs is being built (in the background): try again in a moment."""


def berm_status() -> tuple[bool, str]:
    """Whether BERM can be served here, and why not."""
    from ..hub import berm_available

    if not berm_available():
        return False, "BERM is not available in this installation (`hf_dr.models.berm` has no `BERMEncoder`)."
    return True, ""


def available_retrievers(cfg: ServingConfig) -> tuple[list[str], list[str]]:
    """The retrievers ``cfg`` can offer, and a note (Markdown) for each one it hides."""
    ok, notes = ["BM25", "Dense"], []
    berm_ok, why = berm_status()
    if not berm_ok:
        notes.append(f"**BERM** hidden: {why}")
    elif not cfg.berm_model:
        notes.append("**BERM** hidden: set `HF_DR_BERM_MODEL` to a BERMEncoder folder or Hub id.")
    else:
        ok.append("BERM")
    if cfg.ddr_rem:
        ok.append("DDR")
    else:
        notes.append("**DDR** hidden: set `HF_DR_DDR_REM` (a REM) and `HF_DR_DDR_DAMS` (one DAM per target domain).")
    if cfg.splade_model:
        ok.append("SPLADE-CAI")
    else:
        notes.append("**SPLADE-CAI** hidden: set `HF_DR_SPLADE_MODEL`.")
    ok.append("Hybrid (BM25 + dense)")
    if cfg.qdrant_url or cfg.qdrant_path or cfg.qdrant_edge:
        ok.append("Qdrant")
    return ok, notes


# transformers' loading is not thread-safe: two ``from_pretrained`` calls in two build threads at once
# leave parameters on the meta device ("Cannot copy out of meta tensor"), so the engine loads one
# model at a time (indexes still build in parallel).
_LOAD = threading.Lock()

_PATH = re.compile(r"""(?<![\w.~/-])(?:[A-Za-z]:\\|~/|\.{1,2}/|/)[^\s'"`,;()\[\]<>]*""")


def redact_paths(message: str) -> str:
    """Absolute and relative file paths in ``message`` replaced by ``<path>``."""
    return _PATH.sub("<path>", message)


class SearchEngine:
    """Serves the configured corpora only; builds each index once, in the background, and keeps
    the ``cfg.cache_size`` most recently used."""

    def __init__(self, cfg: ServingConfig):
        self.cfg = cfg
        self.corpora = cfg.corpus_map()  # name -> folder / Hub id: never shown to visitors
        self.documents = cfg.documents_map()  # the corpora that are folders of documents, ingested first
        self.saved = cfg.index_map()  # (corpus name, retriever) -> saved index folder
        unknown = sorted({n for n, _ in self.saved} - set(self.corpora))
        if unknown:
            raise ValueError(f"HF_DR_INDEXES names corpora that are not configured: {', '.join(unknown)}")
        self._corpora = BuildCache(cfg.cache_size, "corpus", quiet=(UserError,))
        # one per configured model / DAM: bounded by the configuration
        self._models = BuildCache(None, "model", quiet=(UserError,))
        self._indexes = BuildCache(cfg.cache_size, "index", quiet=(UserError,))
        self._splade_fit = threading.Lock()  # fitting IDF sets the shared SPLADE model's weights: one corpus at a time

    # -- what visitors may name -----------------------------------------------------------
    def corpus_names(self) -> list[str]:
        return list(self.corpora)

    def _check_corpus(self, name) -> str:
        if not isinstance(name, str) or name not in self.corpora:
            raise UserError(UNKNOWN_CORPUS)
        return name

    def public(self, message: str) -> str:
        """``message`` with every server path replaced by the name of what it is (or ``<path>``)."""
        known = {path: f"“{name}”" for name, path in self.corpora.items()}
        for name, path in self.corpora.items():
            if Path(path).exists():
                known[str(Path(path).resolve())] = f"“{name}”"
        known.update({path: f"DAM “{name}”" for name, path in self.cfg.dams().items()})
        known.update({path: f"the {r} index of “{n}”" for (n, r), path in self.saved.items()})
        for attr in ("dense_model", "splade_model", "berm_model", "ddr_rem", "ddr_dams", "qdrant_path",
                     "qdrant_edge", "qdrant_url"):
            v = getattr(self.cfg, attr)
            if v:
                known.setdefault(v, f"<{attr}>")
        for path in sorted(known, key=len, reverse=True):
            message = message.replace(path, known[path])
        return redact_paths(message)

    def visitor_message(self, e: BaseException) -> str:
        """What a visitor reads for an error: a sentence without server paths or tracebacks (the
        detail goes to the server log)."""
        from ..data import BeirFormatError
        from ..models.ddr import DAMMismatchError
        from .documents import NoDocuments

        if isinstance(e, UserError):
            return self.public(str(e))
        logger.error("search failed", exc_info=e)
        if isinstance(e, DAMMismatchError):
            return self.public(f"This DAM does not fit the REM: {e}")
        if isinstance(e, NoDocuments):
            return self.public(f"The folder of documents could not be searched: {e}")
        if isinstance(e, BeirFormatError):
            return self.public(f"The corpus could not be loaded: {e}")
        if isinstance(e, (OSError, ValueError, ImportError)):  # unreadable model / corpus, offline Hub ids
            return f"The server could not load what this search needs ({type(e).__name__}); the details are in its log."
        return f"Unexpected error ({type(e).__name__}); the details are in the server log."

    # -- cached pieces --------------------------------------------------------------------
    def corpus(self, name: str, wait: float | None = None, on_wait=None):
        """The corpus ``name`` (a :class:`~hf_dr.data.BeirData`, loaded once, kept in the LRU); that of
        a folder of documents (or of ``hf-dr ingest``'s output) has ``passage_sources``
        (:class:`~hf_dr.serving.documents.PassageSources`), None otherwise."""
        name = self._check_corpus(name)
        return self._corpora.get(name, lambda: self._load_corpus(name), wait, on_wait)

    def _load_corpus(self, name: str):
        from ..data import load_beir
        from .documents import ingest_documents, is_ingested, load_passages

        path = self.corpora[name]
        if name in self.documents or is_ingested(path):
            folder = ingest_documents(path, **self.passage_settings()) if name in self.documents else path
            data, sources = load_passages(folder)
        else:
            data, sources = load_beir(path, split=None), None
        data.passage_sources = sources
        return data

    def passage_settings(self) -> dict:
        """How the folders of documents are cut into passages: ``documents_max_words`` words, or
        ``dense_model``'s window as its tokenizer counts it (with its document prompt)."""
        if self.cfg.documents_max_words:
            return {"tokenizer": None, "max_tokens": int(self.cfg.documents_max_words), "prompt": ""}
        settings = self.dense_model().encoding_settings(is_query=False)
        return {"tokenizer": self.cfg.dense_model, "max_tokens": int(settings["max_length"]),
                "prompt": settings["prefix"] or ""}

    def model(self, key: tuple, load):
        def build():
            from ..devices import resolve_device

            with _LOAD:
                m = load()
            if hasattr(m, "to"):
                m.to(resolve_device(self.cfg.device))
            m.encode_dtype = self.cfg.dtype  # every encoding of the engine (corpus and queries) in one precision
            return m

        return self._models.get(key, build)

    # -- models ---------------------------------------------------------------------------
    def dense_model(self):
        from ..models import load_encoder

        return self.model(("dense", self.cfg.dense_model), lambda: load_encoder(self.cfg.dense_model, kind="dense"))

    def berm_model(self):
        def load():
            from ..models.berm import BERMEncoder

            return BERMEncoder.from_pretrained(self.cfg.berm_model)

        return self.model(("berm", self.cfg.berm_model), load)

    def splade_model(self):
        from ..models import load_encoder

        return self.model(("splade", self.cfg.splade_model),
                          lambda: load_encoder(self.cfg.splade_model, kind="sparse"))

    def ddr_model(self, dam: str | None):
        """The REM on the chosen DAM (one model per DAM; a DAM that does not fit is refused)."""
        from ..models.ddr import DDRModel

        path = self.cfg.dams().get(dam) if dam and dam != SOURCE_DAM else None
        return self.model(("ddr", self.cfg.ddr_rem, path),
                          lambda: DDRModel.from_pretrained(self.cfg.ddr_rem, **({"dam": path} if path else {})).merge())

    # -- index builders (run in background threads) ---------------------------------------
    def _build_bm25(self, data):
        from ..factory import build_retriever

        return build_retriever("bm25", data)

    def _build_encoded(self, model, data):
        from ..factory import build_retriever

        return build_retriever("dense", data, model(), batch_size=self.cfg.batch_size)

    def _build_splade(self, data):
        """SPLADE documents are encoded once; IDF (Eq. 6, fitted on *this* corpus as CAI does) is
        the retriever's transform of the stored vectors (Eq. 7), so switching IDF on and off costs nothing."""
        from ..retrieval import EncoderRetriever

        m = self.splade_model()
        texts = data.doc_texts()
        with self._splade_fit:
            old = m.config.use_idf
            m.config.use_idf = False
            try:
                plain = m.encode_corpus(texts, batch_size=self.cfg.batch_size, show_progress_bar=False)
            finally:
                m.config.use_idf = old
            m.fit_idf(texts, enable=old)  # Eq. 6 on the corpus being searched
            weights = m.idf_weights().cpu().numpy()[None, :]  # idf ** idf_exponent (Eq. 7)
        return {idf: EncoderRetriever(m, plain, data.doc_ids(), batch_size=self.cfg.batch_size,
                                      doc_transform=(lambda d: d.multiply(weights).tocsr()) if idf else None)
                for idf in (False, True)}

    def _open_saved(self, folder: str, retriever: str, data):
        """A saved index (``hf-dr index``) opened memory-mapped, checked against the corpus and the
        model (another one's index is refused: the error goes to the log, visitors read a sentence)."""
        from ..factory import build_retriever

        if retriever == "BM25":
            return build_retriever("bm25", data, index=folder)
        if retriever == "SPLADE-CAI":  # an inverted or Seismic index: its vectors as encoded, with or without IDF
            r = build_retriever("sparse", data, self.splade_model(), index=folder, batch_size=self.cfg.batch_size)
            return {False: r, True: r}
        return build_retriever("dense", data, self.dense_model(), index=folder, batch_size=self.cfg.batch_size)

    def _qdrant(self):
        """The configured collection (only that one: visitors cannot point the engine elsewhere)."""
        from ..retrieval.qdrant import QdrantRetriever, open_store

        c = self.cfg
        store = open_store(c.qdrant_collection, url=c.qdrant_url, path=c.qdrant_path, edge=c.qdrant_edge,
                           api_key=os.environ.get("QDRANT_API_KEY"))
        kinds = sorted((store.manifest() or {}).get("vectors", {}))
        encoders = {}
        if "dense" in kinds:
            encoders["dense"] = self.dense_model()
        if "sparse" in kinds and self.cfg.splade_model:
            encoders["sparse"] = self.splade_model()
        if not encoders:
            raise UserError("the Qdrant collection has no vectors this Space can encode queries for")
        return QdrantRetriever(store, encoders, exact=False)

    def index_key(self, name: str, retriever: str, dam: str | None = None) -> tuple:
        """The cache key of a (corpus, retriever, model) index."""
        c = self.cfg
        return {"BM25": (name, "bm25"), "Dense": (name, "dense", c.dense_model),
                "DDR": (name, "ddr", c.ddr_rem, dam or SOURCE_DAM), "BERM": (name, "berm", c.berm_model),
                "SPLADE-CAI": (name, "splade", c.splade_model), "Qdrant": ("qdrant",)}[retriever]

    def _check_retriever(self, retriever: str, dam: str | None) -> None:
        c = self.cfg
        if retriever == "DDR":
            if not c.ddr_rem:
                raise UserError("DDR is not configured: set HF_DR_DDR_REM")
            if dam and dam != SOURCE_DAM and dam not in c.dams():
                raise UserError(f"unknown DAM: choose one of {', '.join([SOURCE_DAM, *c.dams()])}")
        elif retriever == "BERM":
            ok, note = berm_status()
            if not ok or not c.berm_model:
                raise UserError(note or "BERM is not configured: set HF_DR_BERM_MODEL")
        elif retriever == "Qdrant" and not (c.qdrant_url or c.qdrant_path or c.qdrant_edge):
            raise UserError("Qdrant is not configured: set HF_DR_QDRANT_URL / _PATH / _EDGE and _COLLECTION")
        elif retriever == "SPLADE-CAI" and not c.splade_model:
            raise UserError("SPLADE-CAI is not configured: set HF_DR_SPLADE_MODEL")

    def _builder(self, name: str, retriever: str, dam: str | None):
        """What builds the index of a key: loads the corpus, then encodes / indexes it."""
        if retriever == "Qdrant":
            return self._qdrant

        def build():
            data = self.corpus(name)
            if (name, retriever) in self.saved:
                return self._open_saved(self.saved[(name, retriever)], retriever, data)
            if retriever == "BM25":
                return self._build_bm25(data)
            if retriever == "SPLADE-CAI":
                return self._build_splade(data)
            model = {"Dense": self.dense_model, "BERM": self.berm_model, "DDR": lambda: self.ddr_model(dam)}[retriever]
            return self._build_encoded(model, data)

        return build

    def start_build(self, name: str, retriever: str, dam: str | None = None):
        """Start building an index in the background (nothing when it is built or being built)."""
        self._check_corpus(name)
        self._check_retriever(retriever, dam)
        return self._indexes.start(self.index_key(name, retriever, dam), self._builder(name, retriever, dam))

    def prebuild(self) -> threading.Thread | None:
        """Build ``cfg.prebuild``'s retrievers for every configured corpus, one after the other, in a
        background thread (at most ``cfg.cache_size`` indexes: more would evict the first ones)."""
        wanted = [r.strip() for r in (self.cfg.prebuild or "").split(",") if r.strip()]
        todo = [(n, r) for n in self.corpora for r in wanted if r in RETRIEVERS and r != "Qdrant"][:self.cfg.cache_size]
        if not todo:
            return None

        def run():
            for name, retriever in todo:
                try:
                    job = self.start_build(name, retriever)
                    if job is not None:
                        job.done.wait()
                except Exception:  # noqa: BLE001 - logged; a visitor's search shows the error
                    logger.exception("prebuilding %s on %s failed", retriever, name)

        t = threading.Thread(target=run, daemon=True, name="hf-dr-prebuild")
        t.start()
        return t

    def retriever(self, name: str, retriever: str, dam: str | None = None, use_idf: bool = True,
                  progress=None, wait: float | None = None):
        """The :class:`~hf_dr.retrieval.Retriever` of a choice: built (corpus encoded) once, in the
        background; waits at most ``wait`` seconds (default ``cfg.build_wait``) for a build."""
        from ..retrieval import HybridRetriever

        self._check_corpus(name)
        if retriever == "Hybrid (BM25 + dense)":
            parts = [self.retriever(name, r, None, use_idf, progress, wait) for r in ("BM25", "Dense")]
            return HybridRetriever(parts, method="zscore", depth=100)
        self._check_retriever(retriever, dam)
        wait = self.cfg.build_wait if wait is None else wait
        label = f"{retriever} index of “{name}”"

        def on_wait(seconds):
            if progress is not None:
                progress((int(seconds), None), desc=f"Building the {label} (once per corpus and model)", unit="s")

        try:
            r = self._indexes.get(self.index_key(name, retriever, dam), self._builder(name, retriever, dam),
                                  wait, on_wait)
        except TimeoutError:
            raise StillBuilding(f"The {label} is being built: try again in a moment.") from None
        return r[bool(use_idf)] if retriever == "SPLADE-CAI" else r

    # -- search ---------------------------------------------------------------------------
    def _check_search(self, corpus, retriever, query, dam, top_k, results) -> tuple[str, str, int]:
        """The checked ``(corpus name, query, top_k)`` of a search; a :class:`UserError` for bad input."""
        name = self._check_corpus(corpus)
        if not isinstance(query, str) or not query.strip():
            raise UserError("Type a query first.")
        if not isinstance(retriever, str) or retriever not in RETRIEVERS:
            raise UserError("unknown retriever: choose one in the list")
        if dam is not None and not isinstance(dam, str):
            raise UserError("unknown DAM")
        if results not in RESULTS:
            raise UserError(f"results are {' or '.join(RESULTS)}")
        try:
            top_k = max(1, min(1000, int(top_k or self.cfg.top_k)))
        except (TypeError, ValueError):
            raise UserError("the number of results must be a number") from None
        return name, query.strip(), top_k

    def search(self, corpus: str, retriever: str, query: str, dam: str | None = None, use_idf: bool = True,
               top_k: int = 10, progress=None, wait: float | None = None, results: str = "documents") -> list[dict]:
        """Ranked hits for one query on the configured corpus named ``corpus``: ``[{doc_id, passage_id,
        score, title, text, source, page, start, end, matched, text_html, why, why_html}]``.

        ``results="documents"``: on a corpus of passages (a folder of documents), each document once,
        scored by its best passage (MaxP, :func:`hf_dr.evaluation.aggregate_passages`), that passage
        shown (``passage_id``); ``"passages"``: the passages themselves (``doc_id`` is the passage's).
        On a BEIR corpus both are its documents. ``source`` / ``page`` / ``start`` / ``end``: where the
        passage comes from (its file, 1-based page or None, character span), None on a BEIR corpus.
        ``text_html``: the passage with the query's terms marked (``matched``: those words), as BM25
        matches them; ``why`` / ``why_html``: SPLADE-CAI's matched terms, BERM's essential unit."""
        name, query, top_k = self._check_search(corpus, retriever, query, dam, top_k, results)
        progress = progress or (lambda *a, **k: None)
        progress(0.0, desc="Loading the corpus")
        wait = self.cfg.build_wait if wait is None else wait
        r = self.retriever(name, retriever, dam, use_idf, progress, wait)  # its build loads the corpus
        try:
            data = self.corpus(name, wait)
        except TimeoutError:
            raise StillBuilding(f"The corpus “{name}” is being loaded: try again in a moment.") from None
        ranked = self._ranked(r, data, query, top_k, results == "documents" and data.passage_sources is not None)
        # the rows of the hits only, looked up in the memory-mapped corpus (nothing of its size is made)
        pos = {p: i for p, i in zip([p for _, p, _ in ranked], data.rows_of([p for _, p, _ in ranked]))
               if i is not None}
        if len(pos) < len(ranked):  # a Qdrant collection of another corpus than the one shown
            raise UserError(f"a document of the Qdrant collection is not in the corpus “{name}”: "
                            "choose the corpus the collection was built from")
        why = self._why(r, retriever, data, query, [p for _, p, _ in ranked], pos)
        progress(1.0, desc="Done")
        return [self._hit(data, pos[p], d, p, s, query, why.get(p, ("", ""))) for d, p, s in ranked]

    def _ranked(self, r, data, query: str, top_k: int, as_documents: bool) -> list[tuple[str, str, float]]:
        """``[(document or passage id, the passage shown, score)]``, best first. Documents: the
        passages retrieved deep enough for ``top_k`` documents (the average passages per document,
        deeper while fewer come back), scored as their document by MaxP."""
        from ..evaluation import aggregate_passages, n_documents
        from ..ingest import passage_doc

        if not as_documents:
            run = r.search({"q": query}, top_k)["q"]
            return [(p, p, float(s)) for p, s in sorted(run.items(), key=lambda x: (-x[1], x[0]))[:top_k]]
        n = len(data.corpus)
        if getattr(data, "n_documents", None) is None:
            data.n_documents = n_documents(data)
        depth = min(n, top_k * -(-n // max(1, data.n_documents)))
        while True:
            run = r.search({"q": query}, depth)
            docs = aggregate_passages(run, "maxp")["q"]
            if len(docs) >= top_k or depth >= n:
                break
            depth = min(n, depth * 4)
        best: dict[str, tuple[float, str]] = {}
        for p, s in run["q"].items():
            d = passage_doc(p) or p
            if d not in best or (-s, p) < (-best[d][0], best[d][1]):  # the best passage; ties: the first id
                best[d] = (s, p)
        ranked = sorted(docs.items(), key=lambda x: (-x[1], x[0]))[:top_k]
        return [(d, best[d][1], float(s)) for d, s in ranked]

    def _why(self, r, retriever: str, data, query: str, passages: list[str], pos: dict) -> dict:
        """Why each shown passage matched, for the retrievers that say: ``{passage id: (text, HTML)}``."""
        if retriever == "BERM":
            def text(i):
                row = data.corpus[i]
                return (row["title"] + " " + row["text"]).strip()

            return {p: essential_unit(r.encoder, query, text(pos[p])) for p in passages}
        if retriever == "SPLADE-CAI":
            return matched_terms(r, query, [pos[p] for p in passages], passages)
        return {}

    def _analyzer(self):
        """The BM25 analysis (words, stop words, stems) that marks a query's terms in a passage."""
        from ..retrieval import BM25Index

        return self._models.get(("bm25-analyzer",), BM25Index.analyzer)

    def _hit(self, data, row: int, doc_id: str, passage_id: str, score: float, query: str,
             why: tuple[str, str]) -> dict:
        item = data.corpus[row]
        meta = data.passage_sources.get(row, passage_id) if data.passage_sources is not None else {}
        matched, text_html = mark_query_terms(self._analyzer(), query, item["text"], SHOWN_CHARS)
        return {"doc_id": doc_id, "passage_id": passage_id, "score": score, "title": item["title"],
                "text": item["text"], "source": meta.get("source"), "page": meta.get("page"),
                "start": meta.get("start"), "end": meta.get("end"), "matched": matched, "text_html": text_html,
                "why": why[0], "why_html": why[1]}
