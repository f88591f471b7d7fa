"""hf-dr search demo: a Gradio Space over the BEIR corpora its owner configured.

Choose a corpus (from the owner's list; the bundled SciFact sample by default), a retriever (BM25,
dense, BERM, DDR with a DAM per target domain, SPLADE-CAI with / without IDF, or the BM25 + dense
hybrid), type a query, read the ranked list. Each hit shows its passage with the query's terms marked;
SPLADE hits show the query / document term weights that matched; BERM hits highlight their essential
matching unit. A corpus may be a folder of documents (PDF, Word, HTML, Markdown, text): it is
ingested into passages once (``hf-dr ingest``'s machinery, cached), and each hit names its file and
page. Results are documents (each file once, scored by its best passage, that passage shown) or
passages.

Visitors only ever pick a corpus *name*: every endpoint refuses any other value (a path, a Hub id)
with "unknown corpus", and messages shown to visitors carry no server path and no traceback (the
detail goes to the server log). Indexes are built in background threads (the configured corpora's
at start-up), one build per (corpus, retriever, model) key, so a build never blocks searches on
indexes that are ready; a search on an index that is still being built waits at most
``HF_DR_BUILD_WAIT`` seconds, then says so. Built indexes live in a bounded LRU cache.

This file is the page: its layout, its event wiring and its configuration. The search engine, its
build cache and the highlighting are :mod:`hf_dr.serving` (usable and tested without Gradio).

Settings come from environment variables (defaults work offline):

=====================  ==========================================================================
HF_DR_CORPUS           one BEIR folder (or ``name=folder``; default: the bundled ``scifact-mini``
                       sample); its name in the list is the folder's name
HF_DR_CORPORA          several corpora: ``name=folder;name=folder`` (``;`` or new lines between
                       entries; a Hub dataset id also works as the folder). Without HF_DR_CORPUS
                       only these are offered; with it, HF_DR_CORPUS comes first
HF_DR_DOCUMENTS        folders of documents (``name=folder;name=folder``, or one folder; a folder
                       written by ``hf-dr ingest`` too), listed after the corpora; ingested into
                       passages once (cached), each hit naming its file, page and passage. Without
                       HF_DR_CORPUS only these (and HF_DR_CORPORA's) are offered
HF_DR_DOCUMENTS_MAX_WORDS  passages of this many words (default: HF_DR_DENSE_MODEL's window, counted
                       with its tokenizer)
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
                       corpus:Dense=folder;corpus:SPLADE-CAI=folder`` (a BM25 index; a faiss index of
                       HF_DR_DENSE_MODEL's vectors; an inverted or Seismic index of HF_DR_SPLADE_MODEL's,
                       searched as encoded: the IDF switch does not change it); each is checked against
                       its corpus and model
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
from dataclasses import dataclass, field, fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
_REPO = HERE.parent.parent
if (_REPO / "hf_dr" / "__init__.py").is_file() and str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))  # run from a checkout: use its hf_dr

import gradio as gr  # noqa: E402

from hf_dr.serving import (PASSAGE_HTML, SOURCE_DAM, SearchEngine, ServingConfig,  # noqa: E402
                           available_retrievers)

TABLE_HEADERS = ["rank", "doc_id", "score", "title", "why", "file", "page"]
RESULTS_CHOICES = ["documents", "passages"]


# ---------------------------------------------------------------------------- configuration
def _default_splade() -> str:
    local = _REPO.parent / "shared" / "models" / "splade-tiny"
    return str(local) if (local / "config.json").is_file() else "naver/splade-cocondenser-ensembledistil"


@dataclass
class SpaceConfig(ServingConfig):
    """The engine's settings (:class:`hf_dr.serving.ServingConfig`), the Space's SPLADE model by
    default, and the page's concurrency; :meth:`from_env` reads them from the environment."""

    splade_model: str | None = field(default_factory=_default_splade)
    concurrency: int = 16

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
        for k in ("batch_size", "top_k", "cache_size", "concurrency", "documents_max_words"):
            if values.get(k) not in (None, ""):
                values[k] = int(values[k])
        if "build_wait" in values:
            values["build_wait"] = float(values["build_wait"])
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown Space settings {sorted(unknown)}")
        if (values.get("corpora") or values.get("documents")) and "corpus" not in values:
            values["corpus"] = ""  # HF_DR_CORPORA / _DOCUMENTS alone: only those, not the bundled sample
        if "dtype" in values:  # checked at start-up: a bad value is a clear error, not a failure at the first query
            from hf_dr.precision import canonical_dtype

            values["dtype"] = canonical_dtype(values["dtype"])
        keep = ("corpus", "dense_model", "device", "dtype", "batch_size", "top_k", "cache_size", "build_wait", "concurrency")
        return cls(**{k: (v or None) if k not in keep else v for k, v in values.items()})


# ---------------------------------------------------------------------------- rendering
CSS = """
.hit {border: 1px solid #e5e7eb; border-radius: 8px; padding: 10px 14px; margin: 8px 0;}
.hit .head {font-weight: 600;} .hit .score {color: #2563eb; font-family: monospace; margin-left: 8px;}
.hit .doc {color: #6b7280; font-size: 0.85em; margin-left: 8px;}
.hit .text {margin-top: 4px; font-size: 0.92em;}
.hit .source {color: #374151; font-size: 0.85em; margin-top: 2px;}
.term {display: inline-block; background: #eef2ff; border-radius: 6px; padding: 1px 6px; margin: 2px;}
mark {background: #fde68a; padding: 0 2px;}
"""


def render_hits(hits: list[dict]) -> str:
    """The hits as HTML: title, score and id; the file and page of a passage of documents; the
    passage with the query's terms marked (BERM: its essential unit instead); SPLADE's terms."""
    if not hits:
        return "<p>No document matched.</p>"
    out = []
    for i, h in enumerate(hits, 1):
        berm = h["why_html"].startswith(PASSAGE_HTML)  # BERM: the passage with its essential unit marked
        body, extra = (h["why_html"], "") if berm else (h["text_html"], h["why_html"])
        source = ""
        if h.get("source"):
            where = f" · page {h['page']}" if h.get("page") else ""
            source = (f'<div class="source">📄 {html.escape(h["source"])}{where} · characters '
                      f'{h["start"]}–{h["end"]}</div>')
        title = h["title"] or (h.get("source") or "").rsplit("/", 1)[-1] or "(untitled)"
        out.append(f'<div class="hit"><div class="head">{i}. {html.escape(title)}'
                   f'<span class="score">{h["score"]:.4f}</span><span class="doc">{html.escape(h["doc_id"])}</span>'
                   f'</div>{source}<div class="text">{body}</div>{extra}</div>')
    return "\n".join(out)


def build_demo(cfg: SpaceConfig | None = None, engine: SearchEngine | None = None, prebuild: bool = True) -> gr.Blocks:
    """The Space's Blocks (``demo.engine``: its :class:`SearchEngine`); starts the configured
    prebuilds in the background unless ``prebuild=False``."""
    cfg = cfg or SpaceConfig.from_env()
    engine = engine or SearchEngine(cfg)
    choices, notes = available_retrievers(cfg)
    dam_choices = [SOURCE_DAM, *cfg.dams()]
    names = engine.corpus_names()

    def run_search(corpus, retriever, dam, use_idf, top_k, query, results="documents", progress=gr.Progress()):
        # every endpoint of this app goes through here: a client can send anything for any argument
        try:
            hits = engine.search(corpus, retriever, query, dam=dam, use_idf=use_idf, top_k=top_k, progress=progress,
                                 results=results)
        except Exception as e:  # noqa: BLE001 - visitors get a message, the log keeps the detail
            return _error(engine.visitor_message(e))
        rows = [[i, h["doc_id"], round(h["score"], 4), h["title"], h["why"], h["source"] or "", h["page"] or ""]
                for i, h in enumerate(hits, 1)]
        label = retriever + (f" · DAM {dam}" if retriever == "DDR" else "") + (
            f" · {'with' if use_idf else 'without'} IDF" if retriever == "SPLADE-CAI" else "")
        what = "passages" if results == "passages" else "results"
        status = (f"**{len(hits)} {what}** for “{html.escape(query.strip())}” · {html.escape(label)} · "
                  f"corpus “{html.escape(corpus)}”")
        return status, render_hits(hits), rows

    with gr.Blocks(title="hf-dr search demo") as demo:
        gr.Markdown("# hf-dr search demo\nDomain-adapted retrievers over BEIR corpora: BM25, dense, BERM, "
                    "DDR (swappable DAMs), SPLADE-CAI and a hybrid, over BEIR corpora and folders of documents "
                    "(each hit names its file and page). Indexes are built once per corpus and model.")
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
            results_as = gr.Radio(RESULTS_CHOICES, value="documents", label="Show (folders of documents)",
                                  info="documents: each file once, by its best passage; passages: every passage",
                                  elem_id="results-as")
        with gr.Row():
            query = gr.Textbox(label="Query", placeholder="e.g. vitamin D deficiency and bone loss", scale=5,
                               elem_id="query")
            button = gr.Button("Search", variant="primary", scale=1, elem_id="search")
        status = gr.Markdown(elem_id="status")
        results = gr.HTML(elem_id="results")
        table = gr.Dataframe(headers=TABLE_HEADERS, label="Ranked list", interactive=False, elem_id="table")
        inputs = [corpus, retriever, dam, use_idf, top_k, query, results_as]
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
