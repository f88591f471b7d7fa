"""hf-dr search demo: a Gradio Space over any BEIR corpus.

Choose a corpus (a BEIR folder; the bundled SciFact sample by default), a retriever (BM25, dense,
BERM, DDR with a DAM per target domain, SPLADE-CAI with / without IDF, or the BM25 + dense hybrid),
type a query, read the ranked list. SPLADE hits show the query / document term weights that
matched; BERM hits highlight their essential matching unit. Each (corpus, model) index is built
once, with a progress bar, and cached for the life of the process.

Models come from environment variables (defaults work offline):

=====================  ==========================================================================
HF_DR_CORPUS           BEIR folder shown first (default: the bundled ``scifact-mini`` sample)
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
import sys
import threading
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


@dataclass
class SpaceConfig:
    corpus: str = field(default_factory=_default_corpus)
    dense_model: str = field(default_factory=_default_dense)
    splade_model: str | None = field(default_factory=_default_splade)
    berm_model: str | None = None
    ddr_rem: str | None = None
    ddr_dams: str | None = None
    qdrant_url: str | None = None
    qdrant_path: str | None = None
    qdrant_edge: str | None = None
    qdrant_collection: str | None = None
    device: str = "auto"
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
        for k in ("batch_size", "top_k"):
            if k in values:
                values[k] = int(values[k])
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown Space settings {sorted(unknown)}")
        return cls(**{k: (v or None) if k not in ("corpus", "dense_model", "device") else v
                      for k, v in values.items()})

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


# ---------------------------------------------------------------------------- the engine
class SearchEngine:
    """Loads corpora and models once and caches every index built from them."""

    def __init__(self, cfg: SpaceConfig):
        self.cfg = cfg
        self._corpora: dict = {}
        self._models: dict = {}
        self._indexes: dict = {}
        self._lock = threading.Lock()  # one build at a time: two clicks must not encode twice

    # -- cached pieces --------------------------------------------------------------------
    def corpus(self, path: str):
        from hf_dr.data import load_beir

        key = str(Path(path).resolve()) if Path(path).exists() else path
        if key not in self._corpora:
            self._corpora[key] = load_beir(path, split=None)
        return key, self._corpora[key]

    def model(self, key: tuple, load):
        if key not in self._models:
            from hf_dr.encoding import resolve_device

            m = load()
            if hasattr(m, "to"):
                m.to(resolve_device(self.cfg.device))
            self._models[key] = m
        return self._models[key]

    def index(self, key: tuple, build):
        if key not in self._indexes:
            self._indexes[key] = build()
        return self._indexes[key]

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
        if dam and dam != SOURCE_DAM and path is None:
            raise UserError(f"unknown DAM {dam!r}: choose one of {', '.join(self.cfg.dams()) or 'none configured'}")
        return self.model(("ddr", self.cfg.ddr_rem, path),
                          lambda: DDRModel.from_pretrained(self.cfg.ddr_rem, **({"dam": path} if path else {})).merge())

    # -- retrievers: one per (corpus, retriever, model), each behind the one Retriever interface ---
    def retriever(self, ckey: str, data, retriever: str, dam: str | None, use_idf: bool, progress):
        """The :class:`~hf_dr.retrieval.Retriever` of a choice, built (corpus encoded) once."""
        from hf_dr.retrieval import BM25Retriever, EncoderRetriever, HybridRetriever

        def encoded(model, mkey):
            progress(0.1, desc="Loading the model")
            m = model()
            progress(0.2, desc=f"Encoding {len(data.corpus)} documents (once per corpus and model)")
            return self.index((ckey, *mkey), lambda: EncoderRetriever.from_data(m, data, batch_size=self.cfg.batch_size))

        if retriever == "BM25":
            return self.index((ckey, "bm25"), lambda: BM25Retriever.from_data(data))
        if retriever == "Dense":
            return encoded(self.dense_model, ("dense", self.cfg.dense_model))
        if retriever == "Hybrid (BM25 + dense)":
            parts = [self.retriever(ckey, data, "BM25", None, use_idf, progress),
                     self.retriever(ckey, data, "Dense", None, use_idf, progress)]
            return HybridRetriever(parts, method="zscore", depth=100)
        if retriever == "DDR":
            if not self.cfg.ddr_rem:
                raise UserError("DDR is not configured: set HF_DR_DDR_REM")
            return encoded(lambda: self.ddr_model(dam), ("ddr", self.cfg.ddr_rem, dam or SOURCE_DAM))
        if retriever == "BERM":
            ok, note = berm_status()
            if not ok or not self.cfg.berm_model:
                raise UserError(note or "BERM is not configured: set HF_DR_BERM_MODEL")
            return encoded(self.berm_model, ("berm", self.cfg.berm_model))
        if retriever == "Qdrant":
            return self.index(("qdrant",), self._qdrant)
        if not self.cfg.splade_model:
            raise UserError("SPLADE-CAI is not configured: set HF_DR_SPLADE_MODEL")
        return self._splade(ckey, data, use_idf, progress)

    def _qdrant(self):
        """The configured collection (only that one: visitors cannot point the Space elsewhere)."""
        from hf_dr.retrieval.qdrant import QdrantRetriever, open_store

        c = self.cfg
        if not (c.qdrant_url or c.qdrant_path or c.qdrant_edge):
            raise UserError("Qdrant is not configured: set HF_DR_QDRANT_URL / _PATH / _EDGE and _COLLECTION")
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

    def _splade(self, ckey, data, use_idf, progress):
        """SPLADE documents are encoded once; IDF (Eq. 6, fitted on *this* corpus as CAI does) is
        the retriever's transform of the stored vectors (Eq. 7), so switching IDF on and off costs nothing."""
        from hf_dr.retrieval import EncoderRetriever

        progress(0.1, desc="Loading the SPLADE model")
        m = self.splade_model()
        mkey = ("splade", self.cfg.splade_model)

        def encode_docs():
            texts = data.doc_texts()
            old = m.config.use_idf
            m.config.use_idf = False
            try:
                plain = m.encode_corpus(texts, batch_size=self.cfg.batch_size, show_progress_bar=True)
            finally:
                m.config.use_idf = old
            m.fit_idf(texts, enable=old)  # Eq. 6 on the corpus being searched
            weights = m.idf_weights().cpu().numpy()[None, :]  # idf ** idf_exponent (Eq. 7)
            return {idf: EncoderRetriever(m, plain, data.doc_ids(), batch_size=self.cfg.batch_size,
                                          doc_transform=(lambda d: d.multiply(weights).tocsr()) if idf else None)
                    for idf in (False, True)}

        progress(0.2, desc=f"Encoding {len(data.corpus)} documents (once per corpus and model)")
        return self.index((ckey, *mkey), encode_docs)[bool(use_idf)]

    # -- search ---------------------------------------------------------------------------
    def search(self, corpus_path: str, retriever: str, query: str, dam: str | None = None, use_idf: bool = True,
               top_k: int = 10, progress=None) -> list[dict]:
        """Ranked hits ``[{doc_id, score, title, text, why, why_html}]`` for one query."""
        query = (query or "").strip()
        if not query:
            raise UserError("Type a query first.")
        if retriever not in RETRIEVERS:
            raise UserError(f"unknown retriever {retriever!r}")
        top_k = max(1, int(top_k or self.cfg.top_k))
        progress = progress or (lambda *a, **k: None)
        corpus_path = (corpus_path or "").strip() or self.cfg.corpus
        with self._lock:
            progress(0.0, desc="Loading the corpus")
            ckey, data = self.corpus(corpus_path)
            r = self.retriever(ckey, data, retriever, dam, use_idf, progress)
            run = r.search({"q": query}, top_k)["q"]
            pos = {d: i for i, d in enumerate(data.doc_ids())}
            why: dict[str, tuple[str, str]] = {}
            if retriever == "BERM":
                texts = data.doc_texts()
                why = {d: _essential_unit(r.encoder, query, texts[pos[d]]) for d in run}
            elif retriever == "SPLADE-CAI":
                why = _matched_terms(r, query, [pos[d] for d in run], list(run))
            progress(1.0, desc="Done")
        ranked = sorted(run.items(), key=lambda x: (-x[1], x[0]))[:top_k]
        hits = []
        for d, s in ranked:
            if d not in pos:  # a Qdrant collection of another corpus than the one shown
                raise UserError(f"document {d!r} of the Qdrant collection is not in the corpus {corpus_path}")
            row = data.corpus[pos[d]]
            w_text, w_html = why.get(d, ("", ""))
            hits.append({"doc_id": d, "score": float(s), "title": row["title"], "text": row["text"],
                         "why": w_text, "why_html": w_html})
        return hits


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


def build_demo(cfg: SpaceConfig | None = None) -> gr.Blocks:
    cfg = cfg or SpaceConfig.from_env()
    engine = SearchEngine(cfg)
    choices, notes = available_retrievers(cfg)
    dam_choices = [SOURCE_DAM, *cfg.dams()]

    def run_search(corpus_path, retriever, dam, use_idf, top_k, query, progress=gr.Progress(track_tqdm=True)):
        from hf_dr.data import BeirFormatError
        from hf_dr.models.ddr import DAMMismatchError

        try:
            hits = engine.search(corpus_path, retriever, query, dam=dam, use_idf=use_idf, top_k=top_k,
                                 progress=progress)
        except DAMMismatchError as e:
            return _error(f"This DAM does not fit the REM: {e}")
        except (UserError, BeirFormatError) as e:
            return _error(str(e))
        except (OSError, ValueError, ImportError) as e:  # unreadable model / corpus paths, offline Hub ids
            logger.exception("search failed")
            return _error(f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - the UI shows a message, the log keeps the traceback
            logger.exception("search failed")
            return _error(f"Unexpected error ({type(e).__name__}): {e}")
        rows = [[i, h["doc_id"], round(h["score"], 4), h["title"], h["why"]] for i, h in enumerate(hits, 1)]
        label = retriever + (f" · DAM {dam}" if retriever == "DDR" else "") + (
            f" · {'with' if use_idf else 'without'} IDF" if retriever == "SPLADE-CAI" else "")
        status = f"**{len(hits)} results** for “{html.escape(query.strip())}” · {label} · corpus `{corpus_path}`"
        return status, render_hits(hits), rows

    with gr.Blocks(title="hf-dr search demo") as demo:
        gr.Markdown("# hf-dr search demo\nDomain-adapted retrievers over any BEIR corpus: BM25, dense, BERM, "
                    "DDR (swappable DAMs), SPLADE-CAI and a hybrid. The first query on a corpus builds its index.")
        if notes:
            gr.Markdown("\n".join(f"- {n}" for n in notes), elem_id="notes")
        with gr.Row():
            corpus = gr.Textbox(value=cfg.corpus, label="Corpus (BEIR folder: corpus.jsonl, queries.jsonl)", scale=3,
                                elem_id="corpus")
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
        button.click(run_search, inputs, [status, results, table], api_name="search")
        query.submit(run_search, inputs, [status, results, table], api_name=False)
        retriever.change(lambda r: (gr.update(visible=r == "DDR"), gr.update(visible=r == "SPLADE-CAI")),
                         retriever, [dam, use_idf], api_name=False)
    return demo


def _error(message: str):
    gr.Warning(message)
    return f"**⚠️ {html.escape(message)}**", "", []


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    build_demo().launch(css=CSS)  # GRADIO_SERVER_NAME / GRADIO_SERVER_PORT are read by Gradio


if __name__ == "__main__":
    main()
