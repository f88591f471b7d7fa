"""hf-dr search demo: a Gradio Space over the BEIR corpora its owner configured.

Choose a corpus (from the owner's list; the bundled SciFact sample by default), a retriever (BM25,
dense, BERM, DDR with a DAM per target domain, SPLADE-CAI with / without IDF, or the BM25 + dense
hybrid), type a query, read the ranked list. SPLADE hits show the query / document term weights that
matched; BERM hits highlight their essential matching unit.

Visitors only ever pick a corpus *name*: every endpoint refuses any other value (a path, a Hub id)
with "unknown corpus", and messages shown to visitors carry no server path and no traceback (the
detail goes to the server log). Indexes are built in background threads (the configured corpora's
at start-up), one build per (corpus, retriever, model) key, so a build never blocks searches on
indexes that are ready; a search on an index that is still being built waits at most
``HF_DR_BUILD_WAIT`` seconds, then says so. Built indexes live in a bounded LRU cache.

Settings come from environment variables (defaults work offline):

=====================  ==========================================================================
HF_DR_CORPUS           one BEIR folder (or ``name=folder``; default: the bundled ``scifact-mini``
                       sample); its name in the list is the folder's name
HF_DR_CORPORA          several corpora: ``name=folder;name=folder`` (``;`` or new lines between
                       entries; a Hub dataset id also works as the folder). Without HF_DR_CORPUS
                       only these are offered; with it, HF_DR_CORPUS comes first
HF_DR_CACHE_SIZE       built indexes kept (LRU, default 4; loaded corpora: the same bound)
HF_DR_BUILD_WAIT       seconds a search waits for an index being built (default 20)
HF_DR_PREBUILD         retrievers built for every configured corpus at start-up, in the background
                       (default ``BM25,Dense``; empty: none)
HF_DR_CONCURRENCY      searches served at once (Gradio's concurrency_limit, default 16)
HF_DR_DENSE_MODEL      dense model (default: all-MiniLM-L6-v2, as ``hf-dr quickstart``)
HF_DR_SPLADE_MODEL     SPLADECAI folder / MLM checkpoint (default: ``../shared/models/splade-tiny``
                       beside the repository when present, else ``naver/splade-cocondenser-ensembledistil``)
HF_DR_BERM_MODEL       BERMEncoder folder or Hub id (BERM is hidden when unset or not installed)
HF_DR_DDR_REM          DDR REM folder or Hub id (DDR is hidden when unset)
HF_DR_DDR_DAMS         a folder with one DAM folder per target domain, or ``name=path,name=path``
HF_DR_QDRANT_URL       a Qdrant server / cluster holding a collection of the corpus (``hf-dr index``);
HF_DR_QDRANT_PATH      ... or a qdrant-client local store, or
HF_DR_QDRANT_EDGE      ... an embedded qdrant-edge shard folder
HF_DR_QDRANT_COLLECTION  the collection (url / path); its dense vectors are searched with HF_DR_DENSE_MODEL,
                       its sparse ones with HF_DR_SPLADE_MODEL (both: the engine's RRF hybrid)
HF_DR_INDEXES          saved indexes (``hf-dr index``) opened instead of building: ``corpus:BM25=folder;
                       corpus:Dense=folder`` (a BM25 index; a faiss index of HF_DR_DENSE_MODEL's
                       vectors), memory-mapped; each is checked against its corpus and model
HF_DR_DEVICE           ``auto`` (GPU when there is one), ``cpu``, ``cuda``...
HF_DR_SPACE_CONFIG     a JSON file with the same keys in lower case (``dense_model``...), read first
GRADIO_SERVER_PORT     port (Gradio reads it; 7860 by default)
=====================  ==========================================================================
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
_REPO = HERE.parent.parent
if (_REPO / "hf_dr" / "__init__.py").is_file() and str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))  # run from a checkout: use its hf_dr

import gradio as gr  # noqa: E402

logger = logging.getLogger("hf_dr.space")

RETRIEVERS = ("BM25", "Dense", "BERM", "DDR", "SPLADE-CAI", "Hybrid (BM25 + dense)", "Qdrant")
SOURCE_DAM = "source DAM (the REM's own)"
#: the retrievers a saved index (HF_DR_INDEXES) can serve
SAVED_INDEX_RETRIEVERS = ("BM25", "Dense")
TABLE_HEADERS = ["rank", "doc_id", "score", "title", "why"]


# ---------------------------------------------------------------------------- configuration
def _default_dense() -> str:
    from hf_dr.models import default_model_path

    return default_model_path()


def _default_splade() -> str:
    local = _REPO.parent / "shared" / "models" / "splade-tiny"
    return str(local) if (local / "config.json").is_file() else "naver/splade-cocondenser-ensembledistil"


def _default_corpus() -> str:
    from hf_dr.data import SAMPLE

    return str(SAMPLE)


def _corpus_name(path_or_id: str) -> str:
    """The name a visitor sees for a corpus: its folder's (or Hub dataset's) last part, never a path."""
    return Path(path_or_id.rstrip("/\\")).name or path_or_id


@dataclass
class SpaceConfig:
    corpus: str = field(default_factory=_default_corpus)
    corpora: str | None = None
    cache_size: int = 4
    build_wait: float = 20.0
    prebuild: str | None = "BM25,Dense"
    concurrency: int = 16
    dense_model: str = field(default_factory=_default_dense)
    splade_model: str | None = field(default_factory=_default_splade)
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

    @classmethod
    def from_env(cls) -> SpaceConfig:
        values: dict = {}
        path = os.environ.get("HF_DR_SPACE_CONFIG")
        if path:
            values.update(json.loads(Path(path).read_text()))
        for f in fields(cls):
            env = os.environ.get(f"HF_DR_{f.name.upper()}")
            if env is not None:
                values[f.name] = env
        for k in ("batch_size", "top_k", "cache_size", "concurrency"):
            if k in values:
                values[k] = int(values[k])
        if "build_wait" in values:
            values["build_wait"] = float(values["build_wait"])
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown Space settings {sorted(unknown)}")
        if values.get("corpora") and "corpus" not in values:
            values["corpus"] = ""  # HF_DR_CORPORA alone: only its corpora, not the bundled sample
        if "dtype" in values:  # checked at start-up: a bad value is a clear error, not a failure at the first query
            from hf_dr.precision import canonical_dtype

            values["dtype"] = canonical_dtype(values["dtype"])
        keep = ("corpus", "dense_model", "device", "dtype", "batch_size", "top_k", "cache_size", "build_wait", "concurrency")
        return cls(**{k: (v or None) if k not in keep else v for k, v in values.items()})

    def corpus_map(self) -> dict[str, str]:
        """``{name shown to visitors: BEIR folder or Hub id}``, in the order of the list: the only
        corpora this Space ever opens."""
        entries = ([self.corpus] if self.corpus else []) + [
            e for e in re.split(r"[;\n]", self.corpora or "") if e.strip()]
        out: dict[str, str] = {}
        for entry in entries:
            entry = entry.strip()
            name, sep, path = entry.partition("=")
            if not sep or Path(entry).exists() or "/" in name or os.sep in name:
                name, path = _corpus_name(entry), entry  # a bare folder / Hub id: named after its last part
            name, path = name.strip(), path.strip()
            if not name or not path:
                raise ValueError(f"bad corpus entry {entry!r}: use name=folder")
            if name in out:
                if out[name] == path:
                    continue
                raise ValueError(f"two corpora are named {name!r}: name them (HF_DR_CORPORA=\"name=folder;...\")")
            out[name] = path
        if not out:
            raise ValueError("no corpus configured: set HF_DR_CORPUS or HF_DR_CORPORA")
        return out

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
                                 f"{' and '.join(SAVED_INDEX_RETRIEVERS)}, not {retriever!r}")
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


def berm_status() -> tuple[bool, str]:
    from hf_dr.hub import berm_available

    if not berm_available():
        return False, "BERM is not available in this installation (`hf_dr.models.berm` has no `BERMEncoder`)."
    return True, ""


def available_retrievers(cfg: SpaceConfig) -> tuple[list[str], list[str]]:
    """The retrievers this Space can offer, and a note for each one it hides."""
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


class UserError(Exception):
    """Bad input: shown to the user as a message, never as a traceback."""


class StillBuilding(UserError):
    """The index a search needs is being built (in the background): try again in a moment."""


UNKNOWN_CORPUS = "unknown corpus: choose one of the corpora in the list"


class BuildCache:
    """Values built once per key in background threads, kept in a bounded LRU.

    One build per key (a second request for a key being built waits for that build; it never
    starts another), no lock held while building (builds of other keys and look-ups of built keys
    go on), at most ``size`` values kept: the least recently used are dropped (``size=None``:
    unbounded). A failed build is not cached: its error goes to the requests waiting for it, and the
    next request builds again.
    """

    class _Job:
        def __init__(self):
            self.done = threading.Event()
            self.value = None
            self.error: BaseException | None = None

    def __init__(self, size: int | None, name: str = "build"):
        self.size = None if size is None else max(1, int(size))
        self.name = name
        self._mu = threading.Lock()  # guards the two dicts only: never held while building
        self._ready: OrderedDict = OrderedDict()
        self._jobs: dict = {}
        self.evicted = 0

    def __contains__(self, key) -> bool:
        with self._mu:
            return key in self._ready

    def keys(self) -> list:
        with self._mu:
            return list(self._ready)

    def building(self) -> list:
        with self._mu:
            return list(self._jobs)

    def start(self, key, build):
        """The job building ``key`` (started now when none is), or None when ``key`` is built."""
        with self._mu:
            if key in self._ready:
                self._ready.move_to_end(key)
                return None
            job = self._jobs.get(key)
            if job is None:
                job = self._jobs[key] = self._Job()
                threading.Thread(target=self._run, args=(key, job, build), daemon=True,
                                 name=f"hf-dr-{self.name}-{key}").start()
            return job

    def get(self, key, build, wait: float | None = None, on_wait=None):
        """The value of ``key``, built (in the background) when missing; waits at most ``wait``
        seconds (None: as long as it takes), calling ``on_wait(seconds waited)`` every half second,
        then raises :class:`TimeoutError` while the build goes on."""
        with self._mu:
            if key in self._ready:
                self._ready.move_to_end(key)
                return self._ready[key]
        job = self.start(key, build)
        if job is None:
            return self.get(key, build, wait, on_wait)
        t0 = time.monotonic()
        while not job.done.is_set():
            left = None if wait is None else wait - (time.monotonic() - t0)
            if left is not None and left <= 0:
                raise TimeoutError(key)
            job.done.wait(0.5 if left is None else min(0.5, left))
            if on_wait is not None and not job.done.is_set():
                on_wait(time.monotonic() - t0)
        if job.error is not None:
            raise job.error
        return job.value

    def wait_built(self, key, timeout: float | None = None) -> bool:
        """Wait until no build of ``key`` is running; whether ``key`` is then built."""
        with self._mu:
            job = self._jobs.get(key)
        if job is not None:
            job.done.wait(timeout)
        return key in self

    def _run(self, key, job, build) -> None:
        try:
            job.value = build()
        except BaseException as e:  # noqa: BLE001 - handed to the requests waiting for this build
            job.error = e
            if not isinstance(e, UserError):
                logger.exception("building %s %r failed", self.name, key)
        with self._mu:
            self._jobs.pop(key, None)
            if job.error is None:
                self._ready[key] = job.value
                self._ready.move_to_end(key)
                while self.size is not None and len(self._ready) > self.size:
                    old, _ = self._ready.popitem(last=False)
                    self.evicted += 1
                    logger.info("evicted %s %r (cache size %d)", self.name, old, self.size)
        job.done.set()


# ---------------------------------------------------------------------------- the engine
class SearchEngine:
    """Serves the configured corpora only; builds each index once, in the background, and keeps
    the ``cfg.cache_size`` most recently used."""

    def __init__(self, cfg: SpaceConfig):
        self.cfg = cfg
        self.corpora = cfg.corpus_map()  # name -> folder / Hub id: never shown to visitors
        self.saved = cfg.index_map()  # (corpus name, retriever) -> saved index folder
        unknown = sorted({n for n, _ in self.saved} - set(self.corpora))
        if unknown:
            raise ValueError(f"HF_DR_INDEXES names corpora that are not configured: {', '.join(unknown)}")
        self._corpora = BuildCache(cfg.cache_size, "corpus")
        self._models = BuildCache(None, "model")  # one per configured model / DAM: bounded by the configuration
        self._indexes = BuildCache(cfg.cache_size, "index")
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
        return _redact_paths(message)

    # -- cached pieces --------------------------------------------------------------------
    def corpus(self, name: str, wait: float | None = None, on_wait=None):
        from hf_dr.data import load_beir

        name = self._check_corpus(name)
        return self._corpora.get(name, lambda: load_beir(self.corpora[name], split=None), wait, on_wait)

    def model(self, key: tuple, load):
        def build():
            from hf_dr.encoding import resolve_device

            m = load()
            if hasattr(m, "to"):
                m.to(resolve_device(self.cfg.device))
            m.encode_dtype = self.cfg.dtype  # every encoding of the Space (corpus and queries) in one precision
            return m

        return self._models.get(key, build)

    # -- models ---------------------------------------------------------------------------
    def dense_model(self):
        from hf_dr.models import load_encoder

        return self.model(("dense", self.cfg.dense_model), lambda: load_encoder(self.cfg.dense_model, kind="dense"))

    def berm_model(self):
        def load():
            from hf_dr.models.berm import BERMEncoder

            return BERMEncoder.from_pretrained(self.cfg.berm_model)

        return self.model(("berm", self.cfg.berm_model), load)

    def splade_model(self):
        from hf_dr.models import load_encoder

        return self.model(("splade", self.cfg.splade_model),
                          lambda: load_encoder(self.cfg.splade_model, kind="sparse"))

    def ddr_model(self, dam: str | None):
        """The REM on the chosen DAM (one model per DAM; a DAM that does not fit is refused)."""
        from hf_dr.models.ddr import DDRModel

        path = self.cfg.dams().get(dam) if dam and dam != SOURCE_DAM else None
        return self.model(("ddr", self.cfg.ddr_rem, path),
                          lambda: DDRModel.from_pretrained(self.cfg.ddr_rem, **({"dam": path} if path else {})).merge())

    # -- index builders (run in background threads) ---------------------------------------
    def _build_bm25(self, data):
        from hf_dr.retrieval import BM25Retriever

        return BM25Retriever.from_data(data)

    def _build_encoded(self, model, data):
        from hf_dr.retrieval import EncoderRetriever

        return EncoderRetriever.from_data(model(), data, batch_size=self.cfg.batch_size)

    def _build_splade(self, data):
        """SPLADE documents are encoded once; IDF (Eq. 6, fitted on *this* corpus as CAI does) is
        the retriever's transform of the stored vectors (Eq. 7), so switching IDF on and off costs nothing."""
        from hf_dr.retrieval import EncoderRetriever

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
        from hf_dr.retrieval.saved import SavedIndex

        saved = SavedIndex(folder)
        if retriever == "BM25":
            return saved.retriever(data=data)
        return saved.retriever(self.dense_model(), data, batch_size=self.cfg.batch_size)

    def _qdrant(self):
        """The configured collection (only that one: visitors cannot point the Space elsewhere)."""
        from hf_dr.retrieval.qdrant import QdrantRetriever, open_store

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
        from hf_dr.retrieval import HybridRetriever

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
    def search(self, corpus: str, retriever: str, query: str, dam: str | None = None, use_idf: bool = True,
               top_k: int = 10, progress=None, wait: float | None = None) -> list[dict]:
        """Ranked hits ``[{doc_id, score, title, text, why, why_html}]`` for one query on the
        configured corpus named ``corpus``."""
        name = self._check_corpus(corpus)
        if not isinstance(query, str) or not query.strip():
            raise UserError("Type a query first.")
        query = query.strip()
        if not isinstance(retriever, str) or retriever not in RETRIEVERS:
            raise UserError("unknown retriever: choose one in the list")
        if dam is not None and not isinstance(dam, str):
            raise UserError("unknown DAM")
        try:
            top_k = max(1, min(1000, int(top_k or self.cfg.top_k)))
        except (TypeError, ValueError):
            raise UserError("the number of results must be a number") from None
        progress = progress or (lambda *a, **k: None)
        progress(0.0, desc="Loading the corpus")
        wait = self.cfg.build_wait if wait is None else wait
        r = self.retriever(name, retriever, dam, use_idf, progress, wait)  # its build loads the corpus
        try:
            data = self.corpus(name, wait)
        except TimeoutError:
            raise StillBuilding(f"The corpus “{name}” is being loaded: try again in a moment.") from None
        run = r.search({"q": query}, top_k)["q"]
        # the rows of the hits only, looked up in the memory-mapped corpus (nothing of its size is made)
        pos = {d: i for d, i in zip(run, data.rows_of(list(run))) if i is not None}
        why: dict[str, tuple[str, str]] = {}
        if retriever == "BERM":
            def text(i):
                row = data.corpus[i]
                return (row["title"] + " " + row["text"]).strip()

            why = {d: _essential_unit(r.encoder, query, text(pos[d])) for d in run if d in pos}
        elif retriever == "SPLADE-CAI":
            why = _matched_terms(r, query, [pos[d] for d in run], list(run))
        progress(1.0, desc="Done")
        ranked = sorted(run.items(), key=lambda x: (-x[1], x[0]))[:top_k]
        hits = []
        for d, s in ranked:
            if d not in pos:  # a Qdrant collection of another corpus than the one shown
                raise UserError(f"a document of the Qdrant collection is not in the corpus “{name}”: "
                                "choose the corpus the collection was built from")
            row = data.corpus[pos[d]]
            w_text, w_html = why.get(d, ("", ""))
            hits.append({"doc_id": d, "score": float(s), "title": row["title"], "text": row["text"],
                         "why": w_text, "why_html": w_html})
        return hits


_PATH = re.compile(r"""(?<![\w.~/-])(?:[A-Za-z]:\\|~/|\.{1,2}/|/)[^\s'"`,;()\[\]<>]*""")


def _redact_paths(message: str) -> str:
    """Absolute and relative file paths in ``message`` replaced by ``<path>``."""
    return _PATH.sub("<path>", message)


def _matched_terms(retriever, query: str, rows: list[int], doc_ids: list[str]) -> dict[str, tuple[str, str]]:
    """SPLADE: each hit's matched terms, query weight x document weight, largest first."""
    qrow = retriever.encode_queries([query]).getrow(0)
    qw = dict(zip(qrow.indices.tolist(), qrow.data.tolist()))
    docs = retriever.index.doc_vectors(rows) if rows else None
    tok = retriever.encoder.tokenizer
    why = {}
    for r, d in enumerate(doc_ids):
        drow = docs.getrow(r)
        contrib = sorted(((qw[t] * w, t, qw[t], w) for t, w in zip(drow.indices.tolist(), drow.data.tolist())
                          if t in qw), reverse=True)[:8]
        names = tok.convert_ids_to_tokens([c[1] for c in contrib])
        plain_txt = ", ".join(f"{n} {q_:.2f}×{d_:.2f}" for n, (_, _, q_, d_) in zip(names, contrib))
        chips = "".join(f'<span class="term" title="query {q_:.3f} × document {d_:.3f} = {c:.3f}">'
                        f'{html.escape(n)} <small>{q_:.2f}×{d_:.2f}</small></span>'
                        for n, (c, _, q_, d_) in zip(names, contrib))
        why[d] = (plain_txt, f'<div class="terms">matched terms (query × document weight): {chips}</div>')
    return why


def _essential_unit(model, query: str, passage: str) -> tuple[str, str]:
    """BERM: the passage's units with the essential matching unit (highest score) highlighted."""
    import numpy as np

    units, scores = model.score_units(query, passage)
    if not len(units):
        return "", ""
    best = int(np.argmax(np.asarray(scores)))
    parts = [f'<mark title="essential unit score {float(scores[i]):.3f}">{html.escape(u)}</mark>' if i == best
             else html.escape(u) for i, u in enumerate(units)]
    return f"essential unit: {units[best]}", '<div class="passage">' + " ".join(parts) + "</div>"


# ---------------------------------------------------------------------------- rendering
CSS = """
.hit {border: 1px solid #e5e7eb; border-radius: 8px; padding: 10px 14px; margin: 8px 0;}
.hit .head {font-weight: 600;} .hit .score {color: #2563eb; font-family: monospace; margin-left: 8px;}
.hit .doc {color: #6b7280; font-size: 0.85em; margin-left: 8px;}
.hit .text {margin-top: 4px; font-size: 0.92em;}
.term {display: inline-block; background: #eef2ff; border-radius: 6px; padding: 1px 6px; margin: 2px;}
mark {background: #fde68a; padding: 0 2px;}
"""


def render_hits(hits: list[dict], max_chars: int = 400) -> str:
    if not hits:
        return "<p>No document matched.</p>"
    out = []
    for i, h in enumerate(hits, 1):
        if h["why_html"].startswith('<div class="passage">'):  # BERM: the passage with its essential unit marked
            body, extra = h["why_html"], ""
        else:
            body = html.escape(h["text"][:max_chars]) + ("…" if len(h["text"]) > max_chars else "")
            extra = h["why_html"]
        out.append(f'<div class="hit"><div class="head">{i}. {html.escape(h["title"] or "(untitled)")}'
                   f'<span class="score">{h["score"]:.4f}</span><span class="doc">{html.escape(h["doc_id"])}</span>'
                   f'</div><div class="text">{body}</div>{extra}</div>')
    return "\n".join(out)


def build_demo(cfg: SpaceConfig | None = None, engine: SearchEngine | None = None, prebuild: bool = True) -> gr.Blocks:
    """The Space's Blocks (``demo.engine``: its :class:`SearchEngine`); starts the configured
    prebuilds in the background unless ``prebuild=False``."""
    cfg = cfg or SpaceConfig.from_env()
    engine = engine or SearchEngine(cfg)
    choices, notes = available_retrievers(cfg)
    dam_choices = [SOURCE_DAM, *cfg.dams()]
    names = engine.corpus_names()

    def run_search(corpus, retriever, dam, use_idf, top_k, query, progress=gr.Progress()):
        # every endpoint of this app goes through here: a client can send anything for any argument
        try:
            hits = engine.search(corpus, retriever, query, dam=dam, use_idf=use_idf, top_k=top_k, progress=progress)
        except Exception as e:  # noqa: BLE001 - visitors get a message, the log keeps the detail
            return _error(visitor_message(engine, e))
        rows = [[i, h["doc_id"], round(h["score"], 4), h["title"], h["why"]] for i, h in enumerate(hits, 1)]
        label = retriever + (f" · DAM {dam}" if retriever == "DDR" else "") + (
            f" · {'with' if use_idf else 'without'} IDF" if retriever == "SPLADE-CAI" else "")
        status = (f"**{len(hits)} results** for “{html.escape(query.strip())}” · {html.escape(label)} · "
                  f"corpus “{html.escape(corpus)}”")
        return status, render_hits(hits), rows

    with gr.Blocks(title="hf-dr search demo") as demo:
        gr.Markdown("# hf-dr search demo\nDomain-adapted retrievers over BEIR corpora: BM25, dense, BERM, "
                    "DDR (swappable DAMs), SPLADE-CAI and a hybrid. Indexes are built once per corpus and model.")
        if notes:  # for the Space's owner: closed, so visitors see the search first
            with gr.Accordion("Retrievers not offered here", open=False, elem_id="notes-box"):
                gr.Markdown("\n".join(f"- {n}" for n in notes), elem_id="notes")
        with gr.Row():
            corpus = gr.Dropdown(names, value=names[0], label="Corpus", scale=2, elem_id="corpus",
                                 allow_custom_value=False, filterable=False)
            retriever = gr.Dropdown(choices, value="Dense" if "Dense" in choices else choices[0], label="Retriever",
                                    elem_id="retriever")
            dam = gr.Dropdown(dam_choices, value=SOURCE_DAM, label="DAM (DDR: one per target domain)",
                              visible=False, elem_id="dam")
            use_idf = gr.Checkbox(value=True, label="SPLADE-CAI: IDF weights on documents", visible=False,
                                  elem_id="idf")
            top_k = gr.Slider(1, 50, value=cfg.top_k, step=1, label="Results", elem_id="topk")
        with gr.Row():
            query = gr.Textbox(label="Query", placeholder="e.g. vitamin D deficiency and bone loss", scale=5,
                               elem_id="query")
            button = gr.Button("Search", variant="primary", scale=1, elem_id="search")
        status = gr.Markdown(elem_id="status")
        results = gr.HTML(elem_id="results")
        table = gr.Dataframe(headers=TABLE_HEADERS, label="Ranked list", interactive=False, elem_id="table")
        inputs = [corpus, retriever, dam, use_idf, top_k, query]
        limit = max(1, int(cfg.concurrency))
        button.click(run_search, inputs, [status, results, table], api_name="search", concurrency_limit=limit,
                     concurrency_id="search")
        query.submit(run_search, inputs, [status, results, table], api_name=False, concurrency_limit=limit,
                     concurrency_id="search")
        retriever.change(_toggle_options, retriever, [dam, use_idf], api_name=False, queue=False)
    demo.queue(default_concurrency_limit=limit)
    demo.engine = engine
    if prebuild:
        engine.prebuild()
    return demo


def _toggle_options(retriever):
    return gr.update(visible=retriever == "DDR"), gr.update(visible=retriever == "SPLADE-CAI")


def visitor_message(engine: SearchEngine, e: BaseException) -> str:
    """What a visitor reads for an error: a sentence without server paths or tracebacks (the
    detail goes to the server log)."""
    from hf_dr.data import BeirFormatError
    from hf_dr.models.ddr import DAMMismatchError

    if isinstance(e, UserError):
        return engine.public(str(e))
    logger.error("search failed", exc_info=e)
    if isinstance(e, DAMMismatchError):
        return engine.public(f"This DAM does not fit the REM: {e}")
    if isinstance(e, BeirFormatError):
        return engine.public(f"The corpus could not be loaded: {e}")
    if isinstance(e, (OSError, ValueError, ImportError)):  # unreadable model / corpus, offline Hub ids
        return f"The server could not load what this search needs ({type(e).__name__}); the details are in its log."
    return f"Unexpected error ({type(e).__name__}); the details are in the server log."


def _error(message: str):
    try:
        gr.Warning(message)
    except Exception:  # noqa: BLE001 - outside a request (tests, scripts) there is no page to warn
        pass
    return f"**⚠️ {html.escape(message)}**", "", []


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    build_demo().launch(css=CSS)  # GRADIO_SERVER_NAME / GRADIO_SERVER_PORT are read by Gradio


if __name__ == "__main__":
    main()
