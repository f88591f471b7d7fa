"""The search Space as a person uses it: start ``spaces/search_demo/app.py`` on localhost (port from
GRADIO_SERVER_PORT), query it through gradio_client, check the ranked lists and the readable
messages for bad input (empty query, a corpus that is not configured, a DAM that does not fit).

And as an untrusted visitor uses it: every endpoint refuses corpora the owner did not configure
(other folders, ``../``, Hub ids) and no message carries a server path. The engine behind the page
(``hf_dr.serving``: background builds, the bounded cache, highlighting) is tested without Gradio in
test_serving.py."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, SAMPLE, SPLADE_TINY
from tests.test_serving import QUERY, documents_folder, small_beir

sys.path.insert(0, str(REPO / "benchmarks"))
from space_screenshot import APP, find_chromium, screenshot, start_app, stop_app  # noqa: E402  (the same driver as the docs)


@pytest.fixture(scope="module")
def space(tiny_bert_dir, tmp_path_factory):
    """A running app with tiny models: dense = the tiny BERT, SPLADE-CAI from it, a DDR REM with two
    target DAMs (one that fits, one with another hidden size)."""
    from transformers import BertConfig, BertForMaskedLM

    from hf_dr.models.ddr import DDRModel
    from hf_dr.models.splade import SPLADECAI

    tmp = tmp_path_factory.mktemp("space")
    SPLADECAI.from_backbone(tiny_bert_dir, max_doc_length=64).save_pretrained(tmp / "splade")
    torch.manual_seed(0)
    ddr = DDRModel.from_backbone(tiny_bert_dir, lora_rank=4, max_doc_length=64)
    ddr.save_dam(tmp / "dams" / "scifact")
    ddr.save_rem(tmp / "rem", dam_name_or_path=str(tmp / "dams" / "scifact"))
    cfg = BertConfig.from_pretrained(tiny_bert_dir)
    cfg.hidden_size, cfg.intermediate_size = 48, 96
    BertForMaskedLM(cfg).save_pretrained(tmp / "dams" / "wrong-size")
    corpus = small_beir(tmp / "corpus")
    env = {"HF_DR_CORPUS": str(corpus), "HF_DR_DENSE_MODEL": str(tiny_bert_dir),
           "HF_DR_SPLADE_MODEL": str(tmp / "splade"), "HF_DR_DDR_REM": str(tmp / "rem"),
           "HF_DR_DDR_DAMS": str(tmp / "dams"), "HF_DR_DEVICE": "cpu", "OMP_NUM_THREADS": "1",
           "HF_DR_BERM_MODEL": "", "HF_DR_BUILD_WAIT": "600"}  # a slow machine waits for a build, never says "try again"
    proc, port = start_app(env, log_path=tmp / "server.log")  # GRADIO_SERVER_PORT = a free port
    try:
        from gradio_client import Client

        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        yield {"client": client, "corpus": corpus, "tmp": tmp}
    finally:
        stop_app(proc)


def _query(space, retriever, query, *, corpus="corpus", dam="source DAM (the REM's own)", idf=True, k=5,
           results="documents"):
    """``corpus``: a name in the Space's list (HF_DR_CORPUS's folder is named ``corpus``)."""
    status, html, table = space["client"].predict(corpus, retriever, dam, idf, k, query, results,
                                                  api_name="/search")
    return status, html, table["data"] if isinstance(table, dict) else table



def test_bm25_ranked_list_matches_the_library(space):
    from hf_dr.data import load_beir
    from hf_dr.retrieval import BM25Index

    status, html, rows = _query(space, "BM25", QUERY, k=5)
    data = load_beir(space["corpus"], split=None)
    want = BM25Index(data.doc_ids(), data.doc_texts()).search({"q": QUERY}, top_k=5)["q"]
    want = sorted(want.items(), key=lambda x: (-x[1], x[0]))
    assert [r[1] for r in rows] == [d for d, _ in want]
    assert [r[2] for r in rows] == pytest.approx([round(s, 4) for _, s in want], abs=1e-4)
    assert [r[0] for r in rows] == list(range(1, len(want) + 1)) and "results" in status
    assert 'class="hit"' in html and data.doc(want[0][0])["title"][:30] in html


@pytest.mark.parametrize("retriever", ["Dense", "Hybrid (BM25 + dense)", "DDR"])
def test_model_retrievers_answer(space, retriever):
    status, html, rows = _query(space, retriever, QUERY, k=4)
    assert "⚠️" not in status, status
    assert len(rows) == 4 and len({r[1] for r in rows}) == 4
    scores = [r[2] for r in rows]
    assert scores == sorted(scores, reverse=True)


def test_splade_shows_matched_term_weights(space):
    status, html, rows = _query(space, "SPLADE-CAI", QUERY, idf=True, k=3)
    assert "with IDF" in status and rows
    assert "matched terms" in html and 'class="term"' in html
    assert all("×" in r[4] for r in rows)  # "term q×d" for every hit
    _, _, rows_plain = _query(space, "SPLADE-CAI", QUERY, idf=False, k=3)
    assert [r[2] for r in rows_plain] != [r[2] for r in rows]  # IDF re-weights the stored vectors


def test_bad_input_gives_readable_messages(space):
    status, html, rows = _query(space, "BM25", "   ")
    assert "Type a query" in status and rows == [] and "Traceback" not in status
    status, _, rows = _query(space, "DDR", QUERY, dam="wrong-size")
    assert "does not fit" in status and "hidden_size" in status and rows == []
    assert str(space["tmp"]) not in status and "<path>" not in status  # the DAM is named, not its folder
    status, _, rows = _query(space, "DDR", QUERY, dam="scifact")  # the fitting DAM still works afterwards
    assert "⚠️" not in status and len(rows) == 5
    assert "corpus “corpus”" in status and str(space["corpus"]) not in status


def test_the_running_space_refuses_other_folders(space, tmp_path):
    """Through gradio_client, as any client of the API: other folders, ``../`` and Hub ids are refused
    (by the dropdown's check or the app's), and nothing of those folders nor their paths comes back."""
    other = _marked_beir(tmp_path / "other")
    for value in _hostile_corpora(other, space["corpus"]):
        try:
            out = space["client"].predict(value, "BM25", "source DAM (the REM's own)", True, 5, QUERY, "documents",
                                          api_name="/search")
        except Exception as e:  # noqa: BLE001 - gradio's own refusal of a value not in the list
            out = str(e)
        text = json.dumps(out, default=str)
        assert MARKER not in text and str(other) not in text.replace(str(value), "") and "Traceback" not in text
    port = space["client"].src.rstrip("/").rsplit(":", 1)[1]
    import httpx

    for f in ("corpus.jsonl", "queries.jsonl"):  # gradio's file route does not serve it either
        r = httpx.get(f"http://127.0.0.1:{port}/gradio_api/file={other / f}", timeout=30)
        assert MARKER not in r.text


# ------------------------------------------------------------------ untrusted visitors, in process
MARKER = "zqxmarker7731"


def _marked_beir(path: Path) -> Path:
    """A BEIR folder the Space is not configured with: every document carries ``MARKER`` and the
    words of ``QUERY`` (so any search of it would return the marker)."""
    path.mkdir(parents=True)
    docs = [{"_id": f"m{i}", "title": f"{MARKER} title {i}", "text": f"{MARKER} {QUERY} secret {i}"} for i in range(5)]
    (path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": QUERY}) + "\n")
    return path


def _hostile_corpora(other: Path, configured: Path) -> list:
    import os

    rel = os.path.relpath(other)
    return [str(other), str(other) + "/", f"{other}/../{other.name}", rel, "../" + other.name,
            "./" + rel, f"file://{other}", other.name, "BeIR/scifact", "mteb/scifact", "scifact",
            str(configured), str(configured / "corpus.jsonl"), "/etc", "/etc/passwd", "../../../../etc/passwd",
            "corpus/../" + other.name, "", " corpus", "CORPUS", "~"]


@pytest.fixture
def app():
    return _load_app()


def test_every_endpoint_serves_only_the_configured_corpus(app, tmp_path, monkeypatch, tiny_bert_dir):
    """The acceptance test: the Space started with HF_DR_CORPUS set never returns text from any
    other folder, whatever a client sends to any of its endpoints (each registered function of the
    Blocks, called with hostile values in every argument)."""
    corpus = small_beir(tmp_path / "corpus")
    other = _marked_beir(tmp_path / "other")
    for k in ("HF_DR_CORPORA", "HF_DR_SPACE_CONFIG", "HF_DR_PREBUILD"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_DR_CORPUS", str(corpus))
    monkeypatch.setenv("HF_DR_PREBUILD", "")
    monkeypatch.setenv("HF_DR_DENSE_MODEL", str(tiny_bert_dir))
    monkeypatch.setenv("HF_DR_DEVICE", "cpu")
    monkeypatch.setenv("HF_DR_BUILD_WAIT", "600")
    cfg = app.SpaceConfig.from_env()
    assert cfg.corpus_map() == {"corpus": str(corpus)}
    demo = app.build_demo(cfg)
    fns = list(demo.fns.values())
    assert fns and any(f.api_name == "search" for f in fns)
    hostile = _hostile_corpora(other, corpus) + [None, 7, ["corpus"], {"path": str(other)}]
    calls = 0
    for f in fns:
        defaults = [getattr(c, "value", None) for c in f.inputs]
        for i in range(len(defaults)):
            for value in hostile:
                args = list(defaults)
                args[i] = value
                if i == 5 or (len(defaults) >= 6 and not args[5]):
                    args[5] = QUERY if i != 5 else value
                out = f.fn(*args)
                calls += 1
                text = json.dumps(out, default=str)
                assert MARKER not in text, (f.api_name, i, value)
                assert str(other) not in text.replace(str(value), "") and str(tmp_path) not in text.replace(
                    str(value), ""), (f.api_name, i, value, text)
                assert "Traceback" not in text
    assert calls > 100
    search = next(f.fn for f in fns if f.api_name == "search")
    status, _, rows = search(str(other), "BM25", None, True, 5, QUERY)
    assert "unknown corpus" in status and rows == []
    status, html, rows = search("corpus", "BM25", None, True, 5, QUERY)  # the configured corpus still answers
    assert len(rows) == 5 and MARKER not in html and "corpus “corpus”" in status and str(corpus) not in status


def test_the_corpus_list_shows_names_never_paths(app, tmp_path, monkeypatch):
    a, b = small_beir(tmp_path / "a"), small_beir(tmp_path / "b")
    monkeypatch.delenv("HF_DR_CORPUS", raising=False)
    monkeypatch.delenv("HF_DR_SPACE_CONFIG", raising=False)
    monkeypatch.setenv("HF_DR_CORPORA", f"alpha={a};\n beta = {b} ;")
    cfg = app.SpaceConfig.from_env()
    assert cfg.corpus_map() == {"alpha": str(a), "beta": str(b)}  # only these: not the bundled sample
    monkeypatch.setenv("HF_DR_CORPUS", str(a))
    assert list(app.SpaceConfig.from_env().corpus_map()) == ["a", "alpha", "beta"]
    assert app.SpaceConfig(corpus=f"{b}", corpora=str(a)).corpus_map() == {"b": str(b), "a": str(a)}
    with pytest.raises(ValueError, match="two corpora are named"):
        app.SpaceConfig(corpus="", corpora=f"x={a};x={b}").corpus_map()
    demo = app.build_demo(app.SpaceConfig(corpus="", corpora=f"alpha={a};beta={b}", prebuild=None))
    config = json.dumps(demo.get_config_file(), default=str)
    assert '"alpha"' in config and '"beta"' in config and str(tmp_path) not in config


def test_a_folder_of_documents_shows_each_hits_file_page_and_marked_terms(app, tmp_path, monkeypatch):
    """HF_DR_DOCUMENTS alone: only that folder is listed; each hit shows its file (the path inside the
    folder, never the server's), its passage with the query's terms marked; documents once each, or
    every passage."""
    docs = documents_folder(tmp_path / "docs")
    for k in ("HF_DR_CORPUS", "HF_DR_CORPORA", "HF_DR_SPACE_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_DR_DOCUMENTS", f"mine={docs}")
    monkeypatch.setenv("HF_DR_DOCUMENTS_MAX_WORDS", "40")
    monkeypatch.setenv("HF_DR_PREBUILD", "")
    monkeypatch.setenv("HF_DR_BUILD_WAIT", "600")
    cfg = app.SpaceConfig.from_env()
    assert cfg.corpus_map() == {"mine": str(docs)} and cfg.documents_max_words == 40
    demo = app.build_demo(cfg)
    search = next(f.fn for f in demo.fns.values() if f.api_name == "search")
    status, html, rows = search("mine", "BM25", None, True, 10, QUERY, "documents")
    files = [r[5] for r in rows]
    assert "⚠️" not in status and len(files) == len(set(files)) and "notes/long report.txt" in files
    assert html.count('class="source"') == len(rows) and "📄 notes/long report.txt" in html and "<mark>" in html
    assert str(tmp_path) not in html + status
    status, html, rows = search("mine", "BM25", None, True, 10, QUERY, "passages")
    assert "passages" in status and len(rows) == 10 and len({r[5] for r in rows}) < len(rows)
    status, _, rows = search("mine", "BM25", None, True, 10, QUERY, "chapters")
    assert "documents or passages" in status and rows == []


def test_errors_shown_to_visitors_carry_no_server_path(app, tmp_path, monkeypatch, caplog):
    good = small_beir(tmp_path / "good")
    broken = tmp_path / "private" / "broken"
    broken.mkdir(parents=True)
    (broken / "notes.txt").write_text("not a corpus")
    cfg = app.SpaceConfig(corpus="", corpora=f"good={good};broken={broken}", prebuild=None,
                          dense_model=str(tmp_path / "private" / "no-such-model"), splade_model=None)
    demo = app.build_demo(cfg)
    search = next(f.fn for f in demo.fns.values() if f.api_name == "search")
    status, _, rows = search("broken", "BM25", None, True, 5, QUERY)
    assert "not a BEIR folder" in status and "corpus.jsonl" in status and "“broken”" in status and rows == []
    status2, _, _ = search("good", "Dense", None, True, 5, QUERY)  # a model folder that is not there
    status3, _, _ = search("good", "SPLADE-CAI", None, True, 5, QUERY)
    assert "not configured" in status3
    monkeypatch.setattr(demo.engine, "search", lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError(f"boom in {tmp_path}/private/secret.py line 3")))
    status4, _, _ = search("good", "BM25", None, True, 5, QUERY)
    assert "Unexpected error (RuntimeError)" in status4
    for s in (status, status2, status3, status4):
        assert str(tmp_path) not in s and "private" not in s and "Traceback" not in s and "⚠️" in s
    assert str(tmp_path) in caplog.text  # ... the detail is in the server log


def _load_app():
    spec = importlib.util.spec_from_file_location("search_demo_app", APP)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.shared
def test_config_from_env_and_file(tmp_path, monkeypatch):
    app = _load_app()
    (tmp_path / "dams" / "bio").mkdir(parents=True)
    (tmp_path / "dams" / "bio" / "config.json").write_text("{}")
    (tmp_path / "dams" / "empty").mkdir()
    (tmp_path / "cfg.json").write_text(json.dumps({"top_k": 7, "ddr_dams": str(tmp_path / "dams")}))
    monkeypatch.setenv("HF_DR_SPACE_CONFIG", str(tmp_path / "cfg.json"))
    monkeypatch.setenv("HF_DR_DENSE_MODEL", "/some/model")
    monkeypatch.setenv("HF_DR_CACHE_SIZE", "2")
    monkeypatch.setenv("HF_DR_PREBUILD", "")
    monkeypatch.setenv("HF_DR_CONCURRENCY", "3")
    cfg = app.SpaceConfig.from_env()
    assert cfg.top_k == 7 and cfg.dense_model == "/some/model" and cfg.dams() == {"bio": str(tmp_path / "dams" / "bio")}
    assert cfg.cache_size == 2 and cfg.prebuild is None and cfg.concurrency == 3
    from hf_dr.serving import ServingConfig

    assert isinstance(cfg, ServingConfig) and ServingConfig().splade_model is None  # the Space has a default SPLADE
    assert app.SpaceConfig().splade_model in (str(SPLADE_TINY), "naver/splade-cocondenser-ensembledistil")
    assert app.SpaceConfig(ddr_dams="a=/x, b=/y").dams() == {"a": "/x", "b": "/y"}
    assert Path(app.SpaceConfig().corpus) == SAMPLE


def test_space_folder_for_the_hub(tmp_path):
    from huggingface_hub import RepoCard

    from hf_dr.cli import main as cli

    out = tmp_path / "space"
    assert cli(["push", str(APP.parent), "--space", "--local-dir", str(out)]) == 0
    assert {"app.py", "requirements.txt", "README.md"} <= {p.name for p in out.iterdir()}
    assert (out / "hf_dr" / "models" / "ddr" / "modeling_ddr.py").is_file()  # the package travels with the app
    assert (out / "hf_dr" / "serving" / "engine.py").is_file()  # ... the engine behind the page included
    assert (out / "hf_dr" / "data" / "sample" / "scifact-mini" / "corpus.jsonl").is_file()
    assert not list(out.rglob("__pycache__"))
    meta = RepoCard.load(out / "README.md").data.to_dict()
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    assert "../../docs" not in (out / "README.md").read_text()
    reqs = (out / "requirements.txt").read_text()
    assert "faiss-cpu" in reqs and "bm25s" in reqs


def test_space_requirements_have_the_package_floors():
    """The Space's requirements.txt asks for what pyproject.toml asks for, floor for floor."""
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    floors = {canonicalize_name(r.name): str(r.specifier) for r in map(Requirement, specs)}
    lines = [ln.strip() for ln in (APP.parent / "requirements.txt").read_text().splitlines()]
    reqs = [Requirement(ln) for ln in lines if ln and not ln.startswith("#")]
    assert len(reqs) > 10
    for r in reqs:
        assert str(r.specifier) == floors.get(canonicalize_name(r.name)), r.name


@pytest.mark.skipif(find_chromium() is None, reason="Debian's chromium is not installed (apt-get install -y chromium)")
@pytest.mark.browser
def test_headless_chromium_types_a_query_and_sees_results(tmp_path):
    """What benchmarks/space_screenshot.py does for docs/img/search_demo.png, on a small corpus with BM25."""
    corpus = small_beir(tmp_path / "corpus")
    proc, port = start_app({"HF_DR_CORPUS": str(corpus), "OMP_NUM_THREADS": "1"}, log_path=tmp_path / "app.log")
    try:
        seen = screenshot(f"http://127.0.0.1:{port}/", tmp_path / "shot.png",
                                           "vitamin D deficiency and bone loss", "BM25", timeout=120)
    finally:
        stop_app(proc)
    assert "BM25" in seen["status"] and seen["hits"] and seen["hits"][0].startswith("1. ")
    assert seen["corpus"] == "corpus" and not seen["server_path_shown"] and str(tmp_path) not in seen["status"]
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
