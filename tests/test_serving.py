"""The Space's engine without the Space (``hf_dr.serving``): importable and searching where Gradio
cannot be imported, a build that does not hold up searches on other corpora, one build per key, a
bounded LRU, prebuilding, and why a hit matched (SPLADE's terms, BERM's essential unit)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE

QUERY = "vitamin D deficiency and bone loss"


def small_beir(path: Path, n_docs: int = 60) -> Path:
    """The first documents of the bundled sample (plus every query): a corpus that encodes in seconds."""
    path.mkdir(parents=True)
    lines = (SAMPLE / "corpus.jsonl").read_text().splitlines()[:n_docs]
    (path / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (path / "queries.jsonl").write_text((SAMPLE / "queries.jsonl").read_text())
    return path


_WITHOUT_GRADIO = """
import json, sys

class Blocker:
    tried = []

    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in ('gradio', 'gradio_client'):
            Blocker.tried.append(name)
            raise ImportError(name + ' is not installed here')
        return None

sys.meta_path.insert(0, Blocker())
import hf_dr.serving as serving

engine = serving.SearchEngine(serving.ServingConfig(prebuild=None))
hits = engine.search('scifact-mini', 'BM25', sys.argv[1], top_k=5, wait=600)
tried = list(Blocker.tried)
try:
    import gradio
    blocked = False
except ImportError:
    blocked = True
print(json.dumps({'hits': hits, 'names': engine.corpus_names(), 'tried': tried, 'blocked': blocked,
                  'cli': sorted(m for m in sys.modules if m == 'hf_dr.cli' or m.startswith('hf_dr.commands'))}))
"""


@pytest.mark.cli
def test_the_engine_searches_where_gradio_cannot_be_imported():
    """``import hf_dr.serving`` and a BM25 search of the bundled sample in a process where any import
    of gradio fails: nothing tries to import it (nor the CLI), and the hits are BM25's."""
    from hf_dr.data import load_beir
    from hf_dr.retrieval import BM25Retriever

    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_GRADIO, QUERY], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["blocked"] and out["tried"] == [] and out["cli"] == [] and out["names"] == ["scifact-mini"]
    data = load_beir(SAMPLE, split=None)
    want = BM25Retriever.from_data(data).search({"q": QUERY}, 5)["q"]
    want = sorted(want.items(), key=lambda x: (-x[1], x[0]))
    hits = out["hits"]
    assert [h["doc_id"] for h in hits] == [d for d, _ in want] and len(hits) == 5
    assert [h["score"] for h in hits] == pytest.approx([s for _, s in want], abs=1e-5)
    for h in hits:
        doc = data.doc(h["doc_id"])
        assert (h["title"], h["text"]) == (doc["title"], doc["text"]) and (h["why"], h["why_html"]) == ("", "")


def _engine(**kw):
    from hf_dr.serving import SearchEngine, ServingConfig

    return SearchEngine(ServingConfig(**{"prebuild": None, **kw}))


def test_only_configured_corpora_are_searched(tmp_path):
    from hf_dr.serving import UNKNOWN_CORPUS, UserError

    a = small_beir(tmp_path / "a")
    engine = _engine(corpus="", corpora=f"alpha={a}")
    for value in (str(a), "a", "../a", "scifact-mini", "BeIR/scifact", None, 7):
        with pytest.raises(UserError, match=re.escape(UNKNOWN_CORPUS)):
            engine.search(value, "BM25", QUERY)
    with pytest.raises(UserError, match="Type a query"):
        engine.search("alpha", "BM25", "  ")
    with pytest.raises(UserError, match="SPLADE-CAI is not configured"):
        engine.search("alpha", "SPLADE-CAI", QUERY)
    assert len(engine.search("alpha", "BM25", QUERY, top_k=3, wait=60)) == 3


def test_errors_read_by_visitors_name_things_never_paths(tmp_path, caplog):
    from hf_dr.serving import redact_paths

    good = small_beir(tmp_path / "good")
    broken = tmp_path / "private" / "broken"
    broken.mkdir(parents=True)
    (broken / "notes.txt").write_text("not a corpus")
    engine = _engine(corpus="", corpora=f"good={good};broken={broken}")
    with pytest.raises(Exception) as e:
        engine.search("broken", "BM25", QUERY, wait=60)
    message = engine.visitor_message(e.value)
    assert "not a BEIR folder" in message and "“broken”" in message and str(tmp_path) not in message
    assert "Unexpected error (RuntimeError)" in engine.visitor_message(RuntimeError(f"boom in {tmp_path}/x.py"))
    assert str(tmp_path) in caplog.text  # the detail is in the server log
    assert redact_paths("/srv/data/x.jsonl:3: bad, ../up/x and ./a/b; owner/name N/A") == \
        "<path> bad, <path> and <path>; owner/name N/A"


def test_a_build_does_not_hold_up_searches_on_other_corpora(tmp_path, monkeypatch):
    """While corpus B's index is being built (held open by an Event), a BM25 search on corpus A
    answers, and a search on B says the index is being built (without waiting for it)."""
    from hf_dr.serving import StillBuilding

    a, b = small_beir(tmp_path / "a"), small_beir(tmp_path / "b", n_docs=40)
    engine = _engine(corpus="", corpora=f"A={a};B={b}", build_wait=0)
    assert len(engine.search("A", "BM25", QUERY, top_k=3, wait=60)) == 3  # A is built

    started, release = threading.Event(), threading.Event()
    real = engine._build_bm25

    def slow_build(data):
        started.set()
        assert release.wait(60), "the test never released the build"
        return real(data)

    monkeypatch.setattr(engine, "_build_bm25", slow_build)
    with pytest.raises(StillBuilding) as e:  # starts B's build, does not wait (build_wait=0)
        engine.search("B", "BM25", QUERY, top_k=5)
    assert started.wait(60)
    message = engine.visitor_message(e.value)
    assert "being built" in message and "“B”" in message and str(b) not in message
    try:
        assert engine._indexes.building() == [("B", "bm25")]
        assert len(engine.search("A", "BM25", QUERY, top_k=5)) == 5  # answers while B is still being built
        assert engine._indexes.building() == [("B", "bm25")] and not release.is_set()
        with pytest.raises(StillBuilding):  # one build per key: still the same one
            engine.search("B", "BM25", QUERY, top_k=5)
    finally:
        release.set()
    assert engine._indexes.wait_built(("B", "bm25"), timeout=60)
    assert len(engine.search("B", "BM25", QUERY, top_k=5)) == 5


def test_a_failed_build_is_reported_and_retried(tmp_path, monkeypatch):
    a = small_beir(tmp_path / "a")
    engine = _engine(corpus=str(a))
    calls = []
    real = engine._build_bm25

    def flaky(data):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(f"disk full at {tmp_path}")
        return real(data)

    monkeypatch.setattr(engine, "_build_bm25", flaky)
    with pytest.raises(OSError):
        engine.search("a", "BM25", QUERY, wait=60)
    assert ("a", "bm25") not in engine._indexes._ready
    assert len(engine.search("a", "BM25", QUERY, top_k=2, wait=60)) == 2 and len(calls) == 2


def test_built_indexes_live_in_a_bounded_lru_cache(tmp_path):
    dirs = {n: small_beir(tmp_path / n, n_docs=20) for n in "abc"}
    engine = _engine(corpus="", corpora=";".join(f"{n}={p}" for n, p in dirs.items()), cache_size=2)
    for n in "abc":
        assert engine.search(n, "BM25", QUERY, top_k=1, wait=60)
    assert engine._indexes.keys() == [("b", "bm25"), ("c", "bm25")] and engine._indexes.evicted == 1
    assert len(engine._corpora.keys()) == 2
    assert engine.search("b", "BM25", QUERY, top_k=1, wait=60)  # b is now the most recently used ...
    assert engine.search("a", "BM25", QUERY, top_k=1, wait=60)  # ... so a's rebuild evicts c
    assert engine._indexes.keys() == [("b", "bm25"), ("a", "bm25")] and engine._indexes.evicted == 2


def test_prebuild_builds_the_configured_corpora_in_the_background(tmp_path):
    a, b = small_beir(tmp_path / "a", n_docs=20), small_beir(tmp_path / "b", n_docs=20)
    engine = _engine(corpus="", corpora=f"a={a};b={b}", prebuild="BM25, Nope", cache_size=4)
    t = engine.prebuild()
    t.join(60)
    assert not t.is_alive() and sorted(engine._indexes.keys()) == [("a", "bm25"), ("b", "bm25")]


def test_berm_is_hidden_with_a_note_when_unavailable(monkeypatch):
    from hf_dr.serving import ServingConfig, available_retrievers, engine

    cfg = ServingConfig(berm_model="some/berm", ddr_rem=None)
    monkeypatch.setattr(engine, "berm_status", lambda: (False, "BERM is not available in this installation."))
    choices, notes = available_retrievers(cfg)
    assert "BERM" not in choices and "DDR" not in choices and "SPLADE-CAI" not in choices
    assert any("BERM" in n and "not available" in n for n in notes) and any("HF_DR_DDR_REM" in n for n in notes)
    monkeypatch.setattr(engine, "berm_status", lambda: (True, ""))
    assert "BERM" in available_retrievers(cfg)[0]


def test_splade_hits_list_their_matched_terms(tmp_path, tiny_bert_dir):
    """Each SPLADE-CAI hit lists the terms its query and document vectors share, largest
    query x document weight first, with those weights."""
    from hf_dr.models.splade import SPLADECAI

    SPLADECAI.from_backbone(tiny_bert_dir, max_doc_length=64).save_pretrained(tmp_path / "splade")
    engine = _engine(corpus=str(small_beir(tmp_path / "c", n_docs=30)), splade_model=str(tmp_path / "splade"),
                     device="cpu")
    hits = engine.search("c", "SPLADE-CAI", QUERY, top_k=3, wait=600)
    r = engine.retriever("c", "SPLADE-CAI")
    q = r.encode_queries([QUERY]).getrow(0)
    qw = dict(zip(q.indices.tolist(), q.data.tolist()))
    rows = engine.corpus("c").rows_of([h["doc_id"] for h in hits])
    docs = r.index.doc_vectors(rows)
    tok = r.encoder.tokenizer
    for i, h in enumerate(hits):
        d = docs.getrow(i)
        shared = sorted(((qw[t] * w, t) for t, w in zip(d.indices.tolist(), d.data.tolist()) if t in qw),
                        reverse=True)[:8]
        assert shared, "the tiny model's query and hits share no term"
        listed = re.findall(r"(\S+) (\d+\.\d\d)×(\d+\.\d\d)", h["why"])
        assert [n for n, _, _ in listed] == tok.convert_ids_to_tokens([t for _, t in shared])
        assert [float(x) for _, a, b in listed for x in (a, b)] == pytest.approx(
            [x for c, t in shared for x in (qw[t], c / qw[t])], abs=0.006)  # query, document weight
        assert h["why_html"].count('class="term"') == len(shared) and "matched terms" in h["why_html"]


def test_models_loaded_by_concurrent_builds_are_whole(tmp_path, tiny_bert_dir):
    """Requests for several retrievers at once load their models in parallel build threads;
    transformers' loading is not thread-safe (parameters left on the meta device), so every model
    the engine hands out has real weights however many were requested together."""
    import threading

    from hf_dr.models.splade import SPLADECAI

    SPLADECAI.from_backbone(tiny_bert_dir, max_doc_length=64).save_pretrained(tmp_path / "splade")
    corpus = small_beir(tmp_path / "c", n_docs=10)
    got, errors = [], []

    def load(f):
        try:
            got.append(f())
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    for _ in range(4):  # a fresh engine (empty model cache) each round: without the lock some round fails
        engine = _engine(corpus=str(corpus), splade_model=str(tmp_path / "splade"), dense_model=str(tiny_bert_dir),
                         device="cpu")
        threads = [threading.Thread(target=load, args=(f,)) for f in (engine.splade_model, engine.dense_model)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == [] and len(got) == 8
    for m in got:
        assert all(p.device.type == "cpu" for p in m.parameters())


def test_berm_hits_highlight_their_essential_unit(tmp_path, tiny_bert_dir):
    """A BERM hit's passage is shown with one unit marked: the one ``score_units`` scores highest."""
    import numpy as np

    from hf_dr.models.berm import BERMEncoder
    from hf_dr.serving import PASSAGE_HTML, berm_status

    if not berm_status()[0]:
        pytest.skip(berm_status()[1])
    BERMEncoder.from_backbone(str(tiny_bert_dir), max_doc_length=64).save_pretrained(tmp_path / "berm")
    engine = _engine(corpus=str(small_beir(tmp_path / "c", n_docs=20)), berm_model=str(tmp_path / "berm"),
                     device="cpu")
    hits = engine.search("c", "BERM", QUERY, top_k=3, wait=600)
    model = engine.berm_model()
    assert len(hits) == 3
    for h in hits:
        units, scores = model.score_units(QUERY, (h["title"] + " " + h["text"]).strip())
        best = units[int(np.argmax(np.asarray(scores)))]
        assert h["why"] == f"essential unit: {best}"
        assert h["why_html"].startswith(PASSAGE_HTML) and h["why_html"].count("<mark") == 1
        marked = re.search(r"<mark[^>]*>(.*?)</mark>", h["why_html"]).group(1)
        assert marked == __import__("html").escape(best)


# ------------------------------------------------------------------ a folder of documents
_TOPICS = ["vitamin D deficiency weakens the bones of older adults", "bone loss follows a long deficiency of calcium",
           "the heart pumps blood through the arteries", "rain falls on the plains of the north",
           "proteins fold into shapes that decide their function"]


def documents_folder(path: Path) -> Path:
    """Generated files: a long text (several passages of 40 words), a Markdown file with headings, an
    HTML page, and an empty file (skipped by the ingest)."""
    path.mkdir(parents=True)
    paras = [f"Paragraph {i} says that {_TOPICS[i % len(_TOPICS)]}. It adds a second sentence about "
             f"{_TOPICS[(i * 2 + 1) % len(_TOPICS)]}." for i in range(12)]
    (path / "notes").mkdir()
    (path / "notes" / "long report.txt").write_text("\n\n".join(paras) + "\n")
    (path / "guide.md").write_text("# Bone health\n\n## Vitamins\n\nVitamin D keeps bones strong; its deficiency "
                                   "brings bone loss.\n\n## Weather\n\nRain falls on the plains.\n")
    (path / "page.html").write_text("<html><head><title>Hearts</title></head><body><article><h1>Hearts</h1>"
                                    "<p>The heart pumps blood through the arteries of the body, day and night, "
                                    "without rest.</p></article></body></html>")
    (path / "empty.txt").write_text("")
    return path


@pytest.fixture
def documents(tmp_path):
    return documents_folder(tmp_path / "my documents")


def _passages_run(engine, name, query):
    """Every passage of the corpus ``name`` scored by the engine's BM25 for ``query``."""
    data = engine.corpus(name, wait=60)
    return engine.retriever(name, "BM25", wait=60).search({"q": query}, len(data.corpus))["q"]


def test_a_folder_of_documents_is_ingested_and_its_hits_name_their_source(documents):
    """The configured folder is ingested into passages (hf_dr.ingest, cached); each passage hit names
    its file (the path inside the folder), page and character span, and its text is that span of the
    file; the empty file is in no hit."""
    from hf_dr.ingest import passage_doc

    engine = _engine(corpus="", documents=f"mine={documents}", documents_max_words=40)
    assert engine.corpus_names() == ["mine"]
    hits = engine.search("mine", "BM25", QUERY, top_k=50, wait=60, results="passages")
    run = _passages_run(engine, "mine", QUERY)
    want = sorted(run.items(), key=lambda x: (-x[1], x[0]))
    assert [h["doc_id"] for h in hits] == [p for p, _ in want][:50] and len(hits) == len(run)
    assert [h["score"] for h in hits] == pytest.approx([s for _, s in want][:50], abs=1e-6)
    sources = {h["source"] for h in hits}
    assert sources <= {"notes/long report.txt", "guide.md", "page.html"} and "notes/long report.txt" in sources
    long_text = (documents / "notes" / "long report.txt").read_text().strip()
    long_hits = [h for h in hits if h["source"] == "notes/long report.txt"]
    assert len(long_hits) > 3  # the long file is several passages
    for h in hits:
        assert h["page"] is None and h["passage_id"] == h["doc_id"] and passage_doc(h["doc_id"])
        assert len(h["text"].split()) <= 40 and h["end"] > h["start"] >= 0
    for h in long_hits:
        assert long_text[h["start"]:h["end"]] == h["text"]
        assert passage_doc(h["doc_id"]) == "notes/long%20report.txt"  # the id escapes the space; source keeps it
    guide = [h for h in hits if h["source"] == "guide.md"]
    assert guide and all(h["title"].startswith("Bone health") for h in guide)


def test_documents_are_their_best_passage(documents):
    """``results="documents"``: each file once, scored by its best passage (MaxP over every passage's
    BM25 score), that passage shown, in MaxP order."""
    from hf_dr.ingest import passage_doc

    engine = _engine(corpus="", documents=f"mine={documents}", documents_max_words=40)
    hits = engine.search("mine", "BM25", QUERY, top_k=10, wait=60)  # documents by default
    run = _passages_run(engine, "mine", QUERY)
    best: dict[str, tuple[float, str]] = {}
    for p, s in run.items():
        d = passage_doc(p)
        if d not in best or s > best[d][0]:
            best[d] = (s, p)
    want = sorted(best.items(), key=lambda x: (-x[1][0], x[0]))
    assert [h["doc_id"] for h in hits] == [d for d, _ in want] and len({h["source"] for h in hits}) == len(hits)
    for h, (d, (s, _)) in zip(hits, want):
        assert h["score"] == pytest.approx(s, abs=1e-6) and run[h["passage_id"]] == pytest.approx(s, abs=1e-6)
        assert passage_doc(h["passage_id"]) == d
    top2 = engine.search("mine", "BM25", QUERY, top_k=2, wait=60)
    assert [h["doc_id"] for h in top2] == [d for d, _ in want[:2]]
    from hf_dr.serving import UserError

    with pytest.raises(UserError, match="documents or passages"):
        engine.search("mine", "BM25", QUERY, results="files")


def test_matched_terms_are_marked_as_bm25_matches_them(documents):
    """Every word of a hit's passage whose BM25 term is one of the query's is marked, and no other:
    stop words ("and") are not, inflections ("bones" for "bone") are."""
    import html as html_lib

    from hf_dr.retrieval import BM25Index
    from hf_dr.serving import PASSAGE_HTML

    engine = _engine(corpus="", documents=f"mine={documents}", documents_max_words=40)
    analyzer = BM25Index.analyzer()
    q_terms = set(analyzer.words([QUERY])[1][0])
    for h in engine.search("mine", "BM25", QUERY, top_k=20, wait=60, results="passages"):
        marked = re.findall(r"<mark>(.*?)</mark>", h["text_html"])
        words = re.findall(r"(?u)\b\w\w+\b", h["text"])
        want = [w for w in words if (analyzer.words([w])[1][0] or [None])[0] in q_terms]
        assert marked == want and h["matched"] == list(dict.fromkeys(w.lower() for w in want))
        assert h["text_html"].startswith(PASSAGE_HTML)
        assert html_lib.unescape(re.sub(r"<[^>]+>", "", h["text_html"])) == h["text"]
    hits = engine.search("mine", "BM25", "bone", top_k=5, wait=60, results="passages")
    assert any("bones" in h["matched"] for h in hits) and not any("and" in h["matched"] for h in hits)


def test_documents_are_cut_for_the_dense_model_and_ingested_once(documents, tiny_bert_dir, monkeypatch):
    """Without ``documents_max_words`` the passages fit the dense model's window as its tokenizer counts
    them; a second engine finds the ingested folder in the cache (nothing is ingested again)."""
    from transformers import AutoTokenizer

    import hf_dr.ingest.folder as folder

    engine = _engine(corpus="", documents=f"mine={documents}", dense_model=str(tiny_bert_dir), device="cpu")
    settings = engine.passage_settings()
    window = engine.dense_model().encoding_settings(is_query=False)["max_length"]
    assert settings["tokenizer"] == str(tiny_bert_dir) and settings["max_tokens"] == window
    hits = engine.search("mine", "Dense", QUERY, top_k=4, wait=600, results="passages")
    assert len(hits) == 4 and all(h["source"] for h in hits)
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    data = engine.corpus("mine")
    for title, text in zip(data.corpus["title"], data.corpus["text"]):
        assert len(tok((title + " " + text).strip())["input_ids"]) <= window
    calls = []
    monkeypatch.setattr(folder, "_work", lambda *a, **k: calls.append(1))
    again = _engine(corpus="", documents=f"mine={documents}", dense_model=str(tiny_bert_dir), device="cpu")
    assert again.corpus("mine", wait=600).name == data.name and calls == []


def test_a_folder_without_usable_documents_is_a_sentence(tmp_path):
    bad = tmp_path / "private" / "bad"
    bad.mkdir(parents=True)
    (bad / "empty.txt").write_text("")
    engine = _engine(corpus="", documents=f"bad={bad}", documents_max_words=40)
    with pytest.raises(ValueError) as e:
        engine.search("bad", "BM25", QUERY, wait=60)
    message = engine.visitor_message(e.value)
    assert message == "The folder of documents could not be searched: “bad” holds no usable document (1 file(s), " \
        "all skipped: empty file: 1)"


def test_a_pdf_hit_names_the_page_its_passage_starts_on(tmp_path):
    """A hit of a PDF says its page: the passage about the query's terms is on page 2 of 3."""
    from fpdf import FPDF

    folder = tmp_path / "pdfs"
    folder.mkdir()
    pdf = FPDF()
    for text in ("The river flows past the old mill in spring.", "Vitamin D deficiency and bone loss in the old.",
                 "Rain falls on the plains of the north."):
        pdf.add_page()
        pdf.set_font("Helvetica", size=11)
        pdf.multi_cell(0, 5, text)
    pdf.output(str(folder / "report 2024.pdf"))
    engine = _engine(corpus="", documents=f"pdfs={folder}", documents_max_words=12)
    hits = engine.search("pdfs", "BM25", QUERY, top_k=3, wait=60, results="passages")
    assert hits[0]["source"] == "report 2024.pdf" and hits[0]["page"] == 2
    assert hits[0]["matched"] == ["vitamin", "deficiency", "bone", "loss"]
    assert [h["page"] for h in engine.search("pdfs", "BM25", "river mill", top_k=1, wait=60)] == [1]
