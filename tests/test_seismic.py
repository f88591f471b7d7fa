"""Seismic (``pyseismic-lsr``): approximate SPLADE search behind the one index call shape.

Fast tests on tiny random sparse matrices: answers keyed by query id whatever order the engine
answers in (an empty query in the middle of a batch gets ``{}``, its neighbours their own
answers), documents with empty vectors (which the engine drops and renumbers) keep their ids,
scores are the exact ones up to the engine's fp16 document values, a saved index searches as the
one built, the extra is named when missing; ``hf-dr index --backend seismic`` and ``hf-dr evaluate
--index`` on a tiny SPLADE, and what they refuse. On ../shared: splade-tiny on the SciFact sample,
the saved Seismic index within 0.005 nDCG@10 of the exact inverted index."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("seismic", reason="pyseismic-lsr is not installed (pip install \"hf-dr[seismic]\")")

from hf_dr.cli import main
from hf_dr.embeddings import Embeddings
from hf_dr.retrieval import (
    EncoderRetriever,
    SavedIndex,
    SavedIndexError,
    save_seismic_index,
)
from hf_dr.retrieval.seismic import SeismicIndex

from .conftest import SAMPLE, SPLADE_TINY, need

#: the engine keeps document values in fp16: each rounded to within 2**-11 of itself (relative)
FP16_REL = 2.0 ** -11
#: build parameters that keep every posting and a block per few documents, and a heap factor that
#: reads (nearly) every block: the search is then exhaustive, so its top-k is the exact one
EXHAUSTIVE = {"n_postings": 10_000, "heap_factor": 1e-6, "query_cut": 1000}


def _matrix(n: int, vocab: int, density: float, seed: int, empty=()) -> sp.csr_matrix:
    m = sp.random(n, vocab, density=density, format="lil", random_state=seed, dtype=np.float32)
    for r in empty:
        m[r] = 0
    m = m.tocsr()
    m.eliminate_zeros()
    return m


@pytest.fixture(scope="module")
def docs():
    return _matrix(600, 300, 0.04, 0, empty=(0, 3, 17)), [f"doc-{i}" for i in range(600)]


@pytest.fixture(scope="module")
def queries():
    Q = _matrix(7, 300, 0.06, 1, empty=(3,))
    ids = [f"q{i}" for i in range(7)]
    ids[5] = "ü" * 150  # longer than the engine's 100-character ids, not ASCII
    return Q, ids


@pytest.fixture(scope="module")
def index(docs):
    return SeismicIndex(*docs, threads=1, **EXHAUSTIVE)


def _tolerance(Q, D, r: int) -> np.ndarray:
    """The largest difference fp16 document values can make to query ``r``'s score of each document."""
    return FP16_REL * np.asarray(abs(Q[r]) @ abs(D).T.toarray()).ravel() + 1e-6


def test_answers_are_the_exact_ones_up_to_fp16_and_keyed_by_query(index, docs, queries):
    D, ids = docs
    Q, qids = queries
    run = index.search(Q, qids, top_k=10)
    assert list(run) == qids and run[qids[3]] == {}  # the empty query: present, empty
    exact = (Q @ D.T).toarray()
    for r, q in enumerate(qids):
        if r == 3:
            continue
        tol = _tolerance(Q, D, r)
        got = run[q]
        assert len(got) == 10 and list(got.values()) == sorted(got.values(), reverse=True)
        rows = [ids.index(d) for d in got]
        assert np.all(np.abs(np.asarray(list(got.values())) - exact[r, rows]) <= tol[rows])
        kth = np.sort(exact[r])[-10]
        assert np.all(exact[r, rows] >= kth - 2 * tol[rows])  # the top 10, up to fp16 near-ties
        # each query alone gets what it got in the batch: nothing shifted
        assert index.search(Q[r], [q], top_k=10) == {q: got}


def test_documents_with_empty_vectors_keep_their_ids(index, docs):
    D, ids = docs
    assert index.rows.tolist() == [r for r in range(len(ids)) if D[r].nnz]
    rows = [0, 1, 3, 4, 599]
    got = index.doc_vectors(rows)
    want = D[rows]
    assert got.shape == want.shape and got[0].nnz == 0 and got[2].nnz == 0
    assert np.allclose(got.toarray(), want.toarray(), rtol=FP16_REL, atol=0)
    # a query made of one document's own vector finds it first, under its id
    for r in (1, 4, 18, 599):
        best = next(iter(index.search(D[r], ["q"], top_k=3)["q"]))
        assert best == ids[int(np.argmax((D[r] @ D.T).toarray()))]


class _Unordered:
    """The engine as its API allows: a batch answered in reverse order, queries with no result left out."""

    def __init__(self, engine):
        self.engine = engine

    def batch_search(self, *a, **k):
        return [ans for ans in reversed(self.engine.batch_search(*a, **k)) if ans]

    def __getattr__(self, name):
        return getattr(self.engine, name)


def test_answers_out_of_order_and_missing_are_put_back_under_their_query(index, queries, monkeypatch):
    Q, qids = queries
    want = index.search(Q, qids, top_k=5)
    monkeypatch.setattr(index, "_index", _Unordered(index._index))
    got = index.search(Q, qids, top_k=5)
    assert list(got) == qids and got == want
    # a query whose terms no document has: no hit, an empty ranking
    lonely = sp.csr_matrix(([1.0], ([0], [299])), shape=(1, 300), dtype=np.float32)
    D0 = _matrix(50, 300, 0.05, 3).tolil()
    D0[:, 299] = 0
    D0 = D0.tocsr()
    D0.eliminate_zeros()
    small = SeismicIndex(D0, [str(i) for i in range(50)], threads=1)
    assert small.search(sp.vstack([Q[0], lonely, Q[1]]), ["a", "b", "c"], top_k=3)["b"] == {}


def test_saved_index_searches_as_the_built_one(index, docs, queries, tmp_path):
    _, ids = docs
    Q, qids = queries
    index.save(tmp_path)
    loaded = SeismicIndex.load(tmp_path, ids, threads=1)
    assert loaded.params == index.params
    assert loaded.search(Q, qids, top_k=20) == index.search(Q, qids, top_k=20)
    assert SeismicIndex.load(tmp_path, ids, query_cut=2).query_cut == 2
    with pytest.raises(ValueError, match="of 3 ids"):
        SeismicIndex.load(tmp_path, ids[:3])


@pytest.mark.slow  # the engine's build costs time in proportion to the vocabulary
def test_large_vocabulary_and_bad_input(tmp_path):
    D = _matrix(40, 70_000, 0.0001, 4).tolil()
    D[5, 69_999] = 2.0
    D = D.tocsr()
    idx = SeismicIndex(D, [str(i) for i in range(40)], threads=1, **EXHAUSTIVE)
    assert idx.large_vocabulary
    q = sp.csr_matrix(([1.0], ([0], [69_999])), shape=(1, 70_000), dtype=np.float32)
    assert next(iter(idx.search(q, ["q"], top_k=1)["q"])) == "5"
    idx.save(tmp_path)
    assert SeismicIndex.load(tmp_path, [str(i) for i in range(40)]).search(q, ["q"], 1) == idx.search(q, ["q"], 1)
    with pytest.raises(ValueError, match="dimensions"):
        idx.search(sp.csr_matrix((1, 10), dtype=np.float32), ["q"])
    with pytest.raises(ValueError, match="ids for"):
        SeismicIndex(D, ["a"])
    with pytest.raises(ValueError, match="every document vector is empty"):
        SeismicIndex(sp.csr_matrix((3, 10), dtype=np.float32), ["a", "b", "c"])
    with pytest.raises(ValueError, match="unknown Seismic build parameters"):
        SeismicIndex(D, [str(i) for i in range(40)], n_posting=3)


def test_missing_extra_is_named(monkeypatch):
    from hf_dr.extras import MissingExtraError

    monkeypatch.setitem(sys.modules, "seismic", None)
    with pytest.raises(MissingExtraError, match=r'pip install "hf-dr\[seismic\]"'):
        SeismicIndex(sp.eye(3, format="csr", dtype=np.float32), ["a", "b", "c"])


# ----------------------------------------------------------------------------- the commands
@pytest.fixture(scope="module")
def sparse_bert_dir(tiny_bert_dir, tmp_path_factory):
    """The tiny random MLM with an output bias of -100 on all but 200 vocabulary entries: its SPLADE
    vectors use those 200 terms only (a random SPLADE's vectors are nearly dense, and Seismic's
    build costs about a millisecond per non-empty posting list whatever its length)."""
    import torch
    from transformers import BertForMaskedLM

    d = tmp_path_factory.mktemp("sparse-bert")
    shutil.copytree(tiny_bert_dir, d, dirs_exist_ok=True)
    m = BertForMaskedLM.from_pretrained(d)
    bias = m.get_output_embeddings().bias
    with torch.no_grad():
        keep = torch.randperm(bias.shape[0], generator=torch.Generator().manual_seed(0))[:200]
        off = torch.ones_like(bias, dtype=torch.bool)
        off[keep] = False
        bias[off] = -100.0
    m.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def splade_folders(sparse_bert_dir, tmp_path_factory):
    """The sparse tiny SPLADE's vectors of the sample's first 30 documents (hf-dr encode)."""
    from hf_dr.models import load_encoder

    d = tmp_path_factory.mktemp("seismic")
    small = d / "small"
    small.mkdir()
    (small / "corpus.jsonl").write_text("\n".join((SAMPLE / "corpus.jsonl").read_text().splitlines()[:30]) + "\n")
    shutil.copy(SAMPLE / "queries.jsonl", small)
    lines = (SAMPLE / "qrels" / "test.tsv").read_text().splitlines()
    first = {json.loads(x)["_id"] for x in (small / "corpus.jsonl").read_text().splitlines()}
    (small / "qrels").mkdir()
    judged = [x for x in lines[1:] if x.split("\t")[1] in first]
    (small / "qrels" / "test.tsv").write_text("\n".join([lines[0], *judged]) + "\n")
    assert main(["encode", "--data", str(small), "--model", str(sparse_bert_dir), "--kind", "sparse", "--max-length",
                 "64", "--shard-size", "8", "--output", str(d / "emb"), "--no-progress"]) == 0
    assert 0 < (Embeddings(d / "emb").matrix().getnnz(axis=0) > 0).sum() <= 200
    model = load_encoder(str(sparse_bert_dir), kind="sparse")
    return {"small": small, "emb": d / "emb", "model": model, "dir": d}


def test_saved_seismic_index_is_checked_and_searched_like_the_inverted_one(splade_folders, sparse_bert_dir, tmp_path):
    from hf_dr.data import load_beir

    f = splade_folders
    m = save_seismic_index(f["emb"], tmp_path / "idx", threads=1, **EXHAUSTIVE)
    assert m["backend"] == "seismic" and m["n_docs"] == 30 and m["query_cut"] == 1000 and m["n_postings"] == 10_000
    saved = SavedIndex(tmp_path / "idx")
    assert saved.kind == "sparse" and "Seismic index" in saved.describe()
    data = load_beir(f["small"], split=None)
    r = saved.retriever(f["model"], data)
    exact = EncoderRetriever.from_embeddings(f["model"], f["emb"])
    queries = dict(list(zip(data.queries["_id"], data.queries["text"]))[:8])
    got, want = r.search(queries, 5), exact.search(queries, 5)
    assert list(got) == list(want)
    for q in queries:  # the same documents, scores to fp16 (the random SPLADE's ties aside)
        assert np.allclose(list(got[q].values()), list(want[q].values()), rtol=4 * FP16_REL)
    with pytest.raises(SavedIndexError, match="--ef-search do not apply"):
        saved.retriever(f["model"], data, ef_search=3)


def test_cli_index_seismic_then_evaluate_and_refusals(splade_folders, sparse_bert_dir, tmp_path, capsys):
    f = splade_folders
    idx, inv = tmp_path / "seismic", tmp_path / "inverted"
    assert main(["index", "--embeddings", str(f["emb"]), "--backend", "seismic", "--output", str(idx),
                 "--n-postings", "10000", "--heap-factor", "0.000001", "--query-cut", "1000", "--threads", "1",
                 "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(f["emb"]), "--backend", "inverted", "--output", str(inv),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "Seismic index of 30 documents" in out and "Building" not in out  # the engine's chatter kept off stdout
    ev = ["evaluate", "--data", str(f["small"]), "--retriever", "sparse", "--model", str(sparse_bert_dir)]
    assert main([*ev, "--index", str(idx), "--output", str(tmp_path / "s")]) == 0
    assert main([*ev, "--index", str(inv), "--output", str(tmp_path / "i")]) == 0
    # built for the run (--index-type seismic), from the embeddings
    assert main([*ev, "--embeddings", str(f["emb"]), "--index-type", "seismic", "--query-cut", "1000",
                 "--heap-factor", "0.000001", "--output", str(tmp_path / "b")]) == 0
    s, i, b = (json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("s", "i", "b"))
    assert s["index"]["index_type"] == "seismic" and s["saved_index"] == str(idx)
    assert b["index"]["index_type"] == "seismic" and b["index"]["query_cut"] == 1000
    for name, value in i["metrics"].items():
        assert abs(s["metrics"][name] - value) <= 0.005 and abs(b["metrics"][name] - value) <= 0.005, name
    other = tmp_path / "other"  # another model: one weight changed
    shutil.copytree(sparse_bert_dir, other)
    import torch
    from transformers import BertForMaskedLM

    m = BertForMaskedLM.from_pretrained(other)
    with torch.no_grad():
        m.bert.embeddings.word_embeddings.weight[5, 0] += 1.0
    m.save_pretrained(other)
    capsys.readouterr()
    cases = [
        ([*ev[:-1], str(other), "--index", str(idx)], "was built from vectors encoded by another model"),
        ([*ev, "--index", str(inv), "--query-cut", "3"], "--query-cut do not apply"),
        ([*ev, "--query-cut", "3"], "search a Seismic index"),
        (["evaluate", "--data", str(f["small"]), "--index-type", "seismic"], "goes with --retriever sparse"),
        (["index", "--embeddings", str(f["emb"]), "--backend", "inverted", "--n-postings", "5", "--output",
          str(tmp_path / "x")], "go with --backend seismic"),
        (["index", "--data", str(f["small"]), "--backend", "seismic", "--output", str(tmp_path / "x")],
         "needs --model"),
        (["index", "--data", str(f["small"]), "--model", str(sparse_bert_dir), "--output", str(tmp_path / "x")],
         "--model goes with --backend seismic"),
        (["label", "--data", str(f["small"]), "--negatives", "bm25", "--reranker", "monot5:x", "--index", str(idx),
          "--output", str(tmp_path / "x")], "not a BM25 index"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and message in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "x").exists()


def test_cli_index_seismic_from_model_and_data(splade_folders, sparse_bert_dir, tmp_path):
    f = splade_folders
    idx = tmp_path / "idx"
    assert main(["index", "--data", str(f["small"]), "--model", str(sparse_bert_dir), "--backend", "seismic",
                 "--output", str(idx), "--threads", "1", "--no-progress"]) == 0
    from_emb = save_seismic_index(f["emb"], tmp_path / "from-emb", threads=1)
    m = SavedIndex(idx).manifest
    for key in ("model_fingerprint", "corpus_fingerprint", "n_docs", "query_cut", "heap_factor", "n_postings"):
        assert m[key] == from_emb[key], key
    assert sorted(p.name for p in tmp_path.iterdir()) == ["from-emb", "idx"]  # the encoding is not kept


def test_the_space_opens_a_saved_seismic_index(splade_folders, sparse_bert_dir, tmp_path, monkeypatch):
    from hf_dr.serving import SearchEngine, ServingConfig

    f = splade_folders
    save_seismic_index(f["emb"], tmp_path / "idx", threads=1, **EXHAUSTIVE)
    cfg = ServingConfig(corpus=str(f["small"]), prebuild=None, splade_model=str(sparse_bert_dir),
                        indexes=f"small:SPLADE-CAI={tmp_path / 'idx'}")
    engine = SearchEngine(cfg)
    monkeypatch.setattr(engine, "_build_splade", lambda *a: (_ for _ in ()).throw(AssertionError("built")))
    query = "vitamin D deficiency and bone"
    hits = engine.search("small", "SPLADE-CAI", query, top_k=3, wait=60)
    want = SavedIndex(tmp_path / "idx").retriever(f["model"]).search({"q": query}, 3)["q"]
    assert hits and [h["doc_id"] for h in hits] == list(want) and all(h["why"] for h in hits)  # matched terms


# ----------------------------------------------------------------------------- real weights
@pytest.mark.shared
@pytest.mark.slow
def test_splade_tiny_sample_seismic_within_0005_of_exact(tmp_path):
    """splade-tiny on the bundled SciFact sample (500 documents): the saved Seismic index with its
    default parameters within 0.005 nDCG@10 of the exact inverted index."""
    need(SPLADE_TINY)
    emb = tmp_path / "emb"
    assert main(["encode", "--data", str(SAMPLE), "--model", str(SPLADE_TINY), "--kind", "sparse", "--output",
                 str(emb), "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(emb), "--backend", "seismic", "--output", str(tmp_path / "idx"),
                 "--no-progress"]) == 0
    ev = ["evaluate", "--data", str(SAMPLE), "--retriever", "sparse", "--model", str(SPLADE_TINY)]
    assert main([*ev, "--index", str(tmp_path / "idx"), "--output", str(tmp_path / "s")]) == 0
    assert main([*ev, "--embeddings", str(emb), "--output", str(tmp_path / "e")]) == 0
    s, e = (json.loads((tmp_path / n / "metrics.json").read_text())["metrics"] for n in ("s", "e"))
    assert abs(s["ndcg@10"] - e["ndcg@10"]) <= 0.005, (s, e)
