"""The search Space as a person uses it: start ``spaces/search_demo/app.py`` on localhost (port from
GRADIO_SERVER_PORT), query it through gradio_client, check the ranked lists and the readable
messages for bad input (empty query, a folder that is not BEIR, a DAM that does not fit)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, SAMPLE

sys.path.insert(0, str(REPO / "benchmarks"))
from space_screenshot import APP, find_chromium, screenshot, start_app, stop_app  # noqa: E402  (the same driver as the docs)


def _small_beir(path: Path, n_docs: int = 60) -> Path:
    """The first documents of the bundled sample (plus every query): a corpus that encodes in seconds."""
    path.mkdir(parents=True)
    lines = (SAMPLE / "corpus.jsonl").read_text().splitlines()[:n_docs]
    (path / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (path / "queries.jsonl").write_text((SAMPLE / "queries.jsonl").read_text())
    return path


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
    corpus = _small_beir(tmp / "corpus")
    env = {"HF_HUB_OFFLINE": "1", "HF_DR_CORPUS": str(corpus), "HF_DR_DENSE_MODEL": str(tiny_bert_dir),
           "HF_DR_SPLADE_MODEL": str(tmp / "splade"), "HF_DR_DDR_REM": str(tmp / "rem"),
           "HF_DR_DDR_DAMS": str(tmp / "dams"), "HF_DR_DEVICE": "cpu", "OMP_NUM_THREADS": "1",
           "HF_DR_BERM_MODEL": ""}
    proc, port = start_app(env, log_path=tmp / "server.log")  # GRADIO_SERVER_PORT = a free port
    try:
        from gradio_client import Client

        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        yield {"client": client, "corpus": corpus, "tmp": tmp}
    finally:
        stop_app(proc)


def _query(space, retriever, query, *, corpus=None, dam="source DAM (the REM's own)", idf=True, k=5):
    status, html, table = space["client"].predict(str(corpus or space["corpus"]), retriever, dam, idf, k, query,
                                                  api_name="/search")
    return status, html, table["data"] if isinstance(table, dict) else table


QUERY = "vitamin D deficiency and bone loss"


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


def test_bad_input_gives_readable_messages(space, tmp_path):
    status, html, rows = _query(space, "BM25", "   ")
    assert "Type a query" in status and rows == [] and "Traceback" not in status
    (tmp_path / "notes.txt").write_text("not a corpus")
    status, _, rows = _query(space, "BM25", QUERY, corpus=tmp_path)
    assert "not a BEIR folder" in status and "corpus.jsonl" in status and rows == []
    status, _, rows = _query(space, "DDR", QUERY, dam="wrong-size")
    assert "does not fit" in status and "hidden_size" in status and rows == []
    status, _, rows = _query(space, "DDR", QUERY, dam="scifact")  # the fitting DAM still works afterwards
    assert "⚠️" not in status and len(rows) == 5


def _load_app():
    spec = importlib.util.spec_from_file_location("search_demo_app", APP)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def test_berm_is_hidden_with_a_note_when_unavailable(monkeypatch):
    app = _load_app()
    cfg = app.SpaceConfig(berm_model="some/berm", ddr_rem=None)
    monkeypatch.setattr(app, "berm_status", lambda: (False, "BERM is not available in this installation."))
    choices, notes = app.available_retrievers(cfg)
    assert "BERM" not in choices and "DDR" not in choices
    assert any("BERM" in n and "not available" in n for n in notes) and any("HF_DR_DDR_REM" in n for n in notes)
    monkeypatch.setattr(app, "berm_status", lambda: (True, ""))
    assert "BERM" in app.available_retrievers(cfg)[0]


def test_config_from_env_and_file(tmp_path, monkeypatch):
    app = _load_app()
    (tmp_path / "dams" / "bio").mkdir(parents=True)
    (tmp_path / "dams" / "bio" / "config.json").write_text("{}")
    (tmp_path / "dams" / "empty").mkdir()
    (tmp_path / "cfg.json").write_text(json.dumps({"top_k": 7, "ddr_dams": str(tmp_path / "dams")}))
    monkeypatch.setenv("HF_DR_SPACE_CONFIG", str(tmp_path / "cfg.json"))
    monkeypatch.setenv("HF_DR_DENSE_MODEL", "/some/model")
    cfg = app.SpaceConfig.from_env()
    assert cfg.top_k == 7 and cfg.dense_model == "/some/model" and cfg.dams() == {"bio": str(tmp_path / "dams" / "bio")}
    assert app.SpaceConfig(ddr_dams="a=/x, b=/y").dams() == {"a": "/x", "b": "/y"}
    assert Path(app.SpaceConfig().corpus) == SAMPLE


def test_space_folder_for_the_hub(tmp_path):
    from huggingface_hub import RepoCard

    from hf_dr.cli import main as cli

    out = tmp_path / "space"
    assert cli(["push", str(APP.parent), "--space", "--local-dir", str(out)]) == 0
    assert {"app.py", "requirements.txt", "README.md"} <= {p.name for p in out.iterdir()}
    assert (out / "hf_dr" / "models" / "ddr" / "modeling_ddr.py").is_file()  # the package travels with the app
    assert (out / "hf_dr" / "data" / "sample" / "scifact-mini" / "corpus.jsonl").is_file()
    assert not list(out.rglob("__pycache__"))
    meta = RepoCard.load(out / "README.md").data.to_dict()
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    assert "../../docs" not in (out / "README.md").read_text()
    reqs = (out / "requirements.txt").read_text()
    assert "faiss-cpu" in reqs and "bm25s" in reqs


@pytest.mark.skipif(find_chromium() is None, reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_headless_chromium_types_a_query_and_sees_results(tmp_path):
    """What benchmarks/space_screenshot.py does for docs/img/search_demo.png, on a small corpus with BM25."""
    corpus = _small_beir(tmp_path / "corpus")
    proc, port = start_app({"HF_DR_CORPUS": str(corpus), "HF_HUB_OFFLINE": "1",
                                             "OMP_NUM_THREADS": "1"}, log_path=tmp_path / "app.log")
    try:
        seen = screenshot(f"http://127.0.0.1:{port}/", tmp_path / "shot.png",
                                           "vitamin D deficiency and bone loss", "BM25", timeout=120)
    finally:
        stop_app(proc)
    assert "BM25" in seen["status"] and seen["hits"] and seen["hits"][0].startswith("1. ")
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
