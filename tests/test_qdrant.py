"""Qdrant backend: round trip against in-process exact search, idempotent and resumable upload,
refusals — through qdrant-client's local mode and the embedded Rust engine (qdrant-edge-py).
No server is started here; the server test runs only where QDRANT_URL points to one."""

from __future__ import annotations

import os
import uuid

import pytest

from hf_dr.cli import main
from hf_dr.data import load_beir
from hf_dr.embeddings import EmbeddingsError, encode_to_folder
from hf_dr.evaluation import evaluate
from hf_dr.retrieval import EncoderRetriever, fuse

from .conftest import SAMPLE

qdrant_client = pytest.importorskip("qdrant_client")
from hf_dr.retrieval.qdrant import ClientStore, EdgeStore, QdrantRetriever, index_embeddings  # noqa: E402

pytestmark = pytest.mark.qdrant


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_bert_dir):
    from hf_dr.models.dense import DenseEncoder
    from hf_dr.models.splade import SPLADECAI

    d = tmp_path_factory.mktemp("qd")
    dense = DenseEncoder.from_pretrained(tiny_bert_dir, normalize=True, max_length=64)
    sparse = SPLADECAI.from_backbone(str(tiny_bert_dir), max_doc_length=64)
    e_dense = encode_to_folder(dense, SAMPLE, d / "dense", shard_size=128, show_progress_bar=False)
    e_sparse = encode_to_folder(sparse, SAMPLE, d / "sparse", shard_size=200, show_progress_bar=False)
    return {"dense": dense, "sparse": sparse, "e_dense": e_dense, "e_sparse": e_sparse,
            "data": load_beir(SAMPLE, split="test")}


def _store(engine, tmp_path):
    if engine == "client":  # in memory: the on-disk local store re-writes itself on every upsert
        return ClientStore("c", client=qdrant_client.QdrantClient(":memory:"))
    pytest.importorskip("qdrant_edge")
    return EdgeStore(str(tmp_path / "edge"))


def _same_ranking(got, want):
    """The same scores in the same order, up to float32 summation order (near-ties may swap)."""
    for q in want:
        assert list(got[q].values()) == pytest.approx(list(want[q].values()), rel=1e-5)
        assert all(got[q][d] == pytest.approx(want[q][d], rel=1e-5) for d in got[q].keys() & want[q].keys())
        assert len(got[q].keys() & want[q].keys()) >= len(want[q]) - 2


@pytest.mark.parametrize("engine", ["client", "edge"])
def test_round_trip_equals_in_process_exact_search(engine, setup, tmp_path):
    s = setup
    store = _store(engine, tmp_path)
    index_embeddings(store, [s["e_dense"], s["e_sparse"]] if engine == "edge" else [s["e_dense"]], batch_size=128,
                     show_progress_bar=False)
    assert store.count() == 500
    data = s["data"]
    queries = dict(list(data.split_queries().items())[:10])
    dense_in = EncoderRetriever.from_embeddings(s["dense"], s["e_dense"])
    sparse_in = EncoderRetriever.from_embeddings(s["sparse"], s["e_sparse"])
    encoders = {"dense": s["dense"], "sparse": s["sparse"]} if engine == "edge" else {"dense": s["dense"]}
    runs = {}
    for mode, inproc in (("dense", dense_in), ("sparse", sparse_in)):
        runs[mode] = QdrantRetriever(store, encoders, mode=mode).search(queries, 50)
        _same_ranking(runs[mode], inproc.search(queries, 50))
        if engine == "client":  # local mode's sparse search is pure Python (seconds a query with this
            break               # random model's ~10^4 non-zeros a document): sparse and hybrid via the edge engine
    if engine == "edge":
        # the engine's hybrid is hf-dr's fuse(rrf, rrf_k=60) of the two sides' top-50 (ranks from 1 in both)
        got = QdrantRetriever(store, encoders, mode="hybrid", depth=50).search(queries, 20)
        want = fuse([runs["dense"], runs["sparse"]], method="rrf", rrf_k=60, top_k=20)
        for q in queries:
            assert sorted(got[q].values(), reverse=True) == pytest.approx(sorted(want[q].values(), reverse=True))
            assert all(got[q][d] == pytest.approx(want[q][d]) for d in got[q].keys() & want[q].keys())
    res = evaluate(QdrantRetriever(store, {"dense": s["dense"]}), data)
    assert res.aggregate == pytest.approx(evaluate(dense_in, data).aggregate, abs=1e-4)
    store.close()


def test_upload_is_idempotent_and_resumes(setup, tmp_path, monkeypatch):
    s = setup
    store = ClientStore("c", path=str(tmp_path / "local"))
    calls = {"n": 0}
    real = ClientStore.upsert

    def dying(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise ConnectionError("the node went away")
        return real(self, *a, **k)

    monkeypatch.setattr(ClientStore, "upsert", dying)
    with pytest.raises(ConnectionError):
        index_embeddings(store, [s["e_dense"]], batch_size=50, show_progress_bar=False)
    assert store.manifest()["uploaded"] == 150
    with pytest.raises(EmbeddingsError, match="upload stopped at 150 of 500"):
        QdrantRetriever(store, {"dense": s["dense"]})
    sent = []
    monkeypatch.setattr(ClientStore, "upsert", lambda self, ids, *a: (sent.extend(ids), real(self, ids, *a))[1])
    index_embeddings(store, [s["e_dense"]], batch_size=50, show_progress_bar=False)
    assert sent[0] == 150 and len(sent) == 350  # resumed where it stopped
    index_embeddings(store, [s["e_dense"]], batch_size=50, show_progress_bar=False)  # again: nothing new
    assert store.count() == 500 and len(sent) == 350


def test_mismatches_are_refused(setup, tmp_path, capsys):
    s = setup
    store = ClientStore("c", path=str(tmp_path / "local"))
    index_embeddings(store, [s["e_dense"]], show_progress_bar=False)
    with pytest.raises(EmbeddingsError, match="holds other embeddings.*vectors"):
        index_embeddings(store, [s["e_dense"], s["e_sparse"]], show_progress_bar=False)
    with pytest.raises(EmbeddingsError, match="another model"):
        QdrantRetriever(store, {"dense": s["sparse"]})
    with pytest.raises(EmbeddingsError, match="no sparse vectors"):
        QdrantRetriever(store, {"sparse": s["sparse"]})
    store.close()
    # the CLI: exit status 2, a message
    assert main(["index", "--embeddings", str(s["e_sparse"].path), "--path", str(tmp_path / "local"),
                 "--collection", "c", "--no-progress"]) == 2
    assert "holds other embeddings" in capsys.readouterr().err


def test_cli_index_then_evaluate_equals_in_process(setup, tiny_bert_dir, tmp_path, capsys):
    args = ["--path", str(tmp_path / "q"), "--collection", "sample"]
    assert main(["encode", "--data", str(SAMPLE), "--model", str(tiny_bert_dir), "--output", str(tmp_path / "emb"),
                 "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(tmp_path / "emb"), *args, "--no-progress"]) == 0
    assert "indexed 500 documents (dense)" in capsys.readouterr().out
    common = ["--data", str(SAMPLE), "--retriever", "dense", "--model", str(tiny_bert_dir)]
    assert main(["evaluate", *common, "--output", str(tmp_path / "a")]) == 0
    assert main(["evaluate", *common, "--backend", "qdrant", *args, "--output", str(tmp_path / "b")]) == 0
    import json

    a = json.loads((tmp_path / "a" / "metrics.json").read_text())["metrics"]
    b = json.loads((tmp_path / "b" / "metrics.json").read_text())["metrics"]
    assert b == pytest.approx(a, abs=1e-4)


@pytest.mark.skipif(not os.environ.get("QDRANT_URL"), reason="QDRANT_URL not set: no Qdrant server to test against")
def test_against_a_real_server(setup):
    s = setup
    store = ClientStore(f"hf-dr-test-{uuid.uuid4().hex[:8]}", url=os.environ["QDRANT_URL"],
                        api_key=os.environ.get("QDRANT_API_KEY"))
    try:
        index_embeddings(store, [s["e_dense"], s["e_sparse"]], show_progress_bar=False)
        data = s["data"]
        got = evaluate(QdrantRetriever(store, {"dense": s["dense"]}), data).aggregate
        want = evaluate(EncoderRetriever.from_embeddings(s["dense"], s["e_dense"]), data).aggregate
        assert got == pytest.approx(want, abs=1e-4)
    finally:
        store.client.delete_collection(store.collection)


def test_the_space_searches_only_its_configured_collection(setup, tmp_path, tiny_bert_dir):
    from hf_dr.serving import SearchEngine, ServingConfig, available_retrievers

    s = setup
    cfg = ServingConfig(corpus=str(SAMPLE), dense_model=str(tiny_bert_dir), splade_model=None,
                        qdrant_path=str(tmp_path / "q"), qdrant_collection="sample")
    assert "Qdrant" in available_retrievers(cfg)[0]
    engine = SearchEngine(cfg)
    emb = encode_to_folder(engine.dense_model(), SAMPLE, tmp_path / "emb", show_progress_bar=False)
    store = ClientStore("sample", path=str(tmp_path / "q"))
    index_embeddings(store, [emb], show_progress_bar=False)
    store.close()
    query = next(iter(s["data"].split_queries().values()))
    name = next(iter(cfg.corpus_map()))  # visitors choose a configured name, never a path
    hits = engine.search(name, "Qdrant", query, top_k=5)
    want = EncoderRetriever.from_embeddings(engine.dense_model(), emb).search({"q": query}, 5)["q"]
    assert [h["doc_id"] for h in hits] == list(want) and all(h["text"] for h in hits)
