"""The one Retriever interface: every kind answers search(queries, k) -> Run; evaluate() alone
removes self-matches and scores."""

from __future__ import annotations

import pytest

from hf_dr.data import load_beir
from hf_dr.evaluation import evaluate, evaluate_run
from hf_dr.factory import build_retriever
from hf_dr.retrieval import BM25Retriever, EncoderRetriever, HybridRetriever, Retriever, fuse

from .conftest import SAMPLE


@pytest.fixture(scope="module")
def data():
    return load_beir(SAMPLE, split="test")


@pytest.fixture(scope="module")
def retrievers(data, tiny_bert_dir):
    from hf_dr.models.dense import DenseEncoder
    from hf_dr.models.splade import SPLADECAI

    dense = DenseEncoder.from_pretrained(tiny_bert_dir, normalize=True, max_length=64)
    sparse = SPLADECAI.from_backbone(str(tiny_bert_dir), max_doc_length=64)
    bm25 = BM25Retriever.from_data(data)
    d = EncoderRetriever.from_data(dense, data, show_progress_bar=False)
    s = EncoderRetriever.from_data(sparse, data, show_progress_bar=False)
    return {"bm25": bm25, "dense": d, "sparse": s, "hybrid": HybridRetriever([bm25, d], method="rrf")}


@pytest.mark.parametrize("kind", ["bm25", "dense", "sparse", "hybrid"])
def test_every_kind_has_the_same_call(kind, retrievers, data):
    r = retrievers[kind]
    assert isinstance(r, Retriever) and r.doc_ids == data.doc_ids()
    queries = dict(list(data.split_queries().items())[:4]) | {"empty": "zzzqqq"}
    run = r.search(queries, k=7)
    assert set(run) == set(queries)
    for q in data.split_queries().keys() & run.keys():
        scores = list(run[q].values())
        assert scores == sorted(scores, reverse=True)
        assert len(scores) == 7 if kind != "bm25" else 0 < len(scores) <= 7  # BM25: documents sharing a term
        assert set(run[q]) <= set(data.doc_ids())
    with pytest.raises(ValueError, match="k must be a positive integer"):
        r.search(queries, k=0)


def test_hybrid_is_the_fusion_of_its_parts(retrievers, data):
    queries = dict(list(data.split_queries().items())[:5])
    bm25, dense = retrievers["bm25"], retrievers["dense"]
    h = HybridRetriever([bm25, dense], weights=[1.0, 2.0], method="zscore", depth=50)
    want = fuse([bm25.search(queries, 50), dense.search(queries, 50)], weights=[1.0, 2.0], method="zscore", top_k=10)
    assert h.search(queries, 10) == want
    with pytest.raises(ValueError, match="at least two"):
        HybridRetriever([bm25])


def test_sparse_retriever_document_transform_and_query_settings(retrievers, data):
    s = retrievers["sparse"]
    model = s.encoder
    plain = model.encode_corpus(data.doc_texts(), show_progress_bar=False)
    doubled = EncoderRetriever(model, plain, data.doc_ids(), doc_transform=lambda d: d * 2.0)
    q = dict(list(data.split_queries().items())[:3])
    a, b = s.search(q, 5), doubled.search(q, 5)
    for x in q:
        assert list(a[x]) == list(b[x]) and [2 * v for v in a[x].values()] == pytest.approx(list(b[x].values()))
    bow = EncoderRetriever(model, plain, data.doc_ids(), query_settings={"query_mode": "bow"})
    qv = bow.encode_queries(["cells"])
    assert set(qv.data.tolist()) == {1.0} and model.config.query_mode == "splade"  # restored


class Echo(Retriever):
    """Returns each query's own id as the best document (as ArguAna's self-matches do)."""

    def __init__(self, doc_ids):
        self.doc_ids = list(doc_ids)
        self.asked = []

    def search(self, queries, k=1000, *, show_progress_bar=None):
        self.asked.append(k)
        return {q: {q: 10.0, **{d: 1.0 / (i + 2) for i, d in enumerate([x for x in self.doc_ids if x != q][:k - 1])}}
                for q in queries}


def test_evaluate_owns_the_self_match_rule(data):
    qid = next(iter(data.split_queries()))
    # a corpus in which the query id is also a document id (ArguAna-like)
    data2 = type(data)(data.corpus, data.queries, {qid: data.qrels[qid]}, split="test", name="my-arguana")
    data2.corpus = data.corpus.map(lambda r, i: {"_id": qid if i == 0 else r["_id"]}, with_indices=True)
    r = Echo(data2.doc_ids())
    res = evaluate(r, data2, k=5)
    assert r.asked == [6]  # one more, so that dropping the self-match still leaves k
    assert qid not in res.run[qid] and len(res.run[qid]) == 5
    kept = evaluate(r, data2, k=5, ignore_identical_ids=False)
    assert qid in kept.run[qid] and r.asked[-1] == 5
    assert res.aggregate == evaluate_run(data2.qrels, res.run).aggregate


def test_evaluate_refuses_a_retriever_of_another_corpus(retrievers, data):
    small = BM25Retriever(data.doc_ids()[:10], data.doc_texts()[:10])
    with pytest.raises(ValueError, match="another corpus"):
        evaluate(small, data)


def test_build_retriever_by_name(data, tiny_bert_dir):
    assert isinstance(build_retriever("bm25", data), BM25Retriever)
    h = build_retriever("hybrid", data, str(tiny_bert_dir), hybrid_second="sparse", fusion="sum",
                        show_progress_bar=False)
    assert isinstance(h, HybridRetriever) and h.retrievers[1].sparse and h.method == "sum"
    with pytest.raises(ValueError, match="needs a model"):
        build_retriever("dense", data)
    with pytest.raises(ValueError, match="unknown retriever"):
        build_retriever("colbert", data)
    with pytest.raises(ValueError, match="is a sparse model"):
        build_retriever("dense", data, h.retrievers[1].encoder)
