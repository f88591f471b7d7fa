"""Sentence Transformers in: a ``SentenceTransformer`` / ``SparseEncoder`` *object* is accepted
wherever hf-dr takes an encoder — retrievers, ``evaluate_model``, embeddings folders, pseudo-labelling,
and ``adapt`` as the student or the dense teacher — and encodes exactly as Sentence Transformers does."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from hf_dr.st_encoder import SentenceTransformerEncoder, as_encoder, trainable_as_folder

from .conftest import SAMPLE

QUERIES = ["what causes fever?", "how do vaccines work"]
DOCS = ["Fever is caused by infection of the body.", "The cat sat on the mat.", "Vaccines train the immune system."]
E5 = {"query": "query: ", "document": "passage: "}


def _dense(tiny_bert_dir, pooling="mean", similarity="dot", extra=()):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    t = Transformer(str(tiny_bert_dir), max_seq_length=64)
    return SentenceTransformer(modules=[t, Pooling(t.get_embedding_dimension(), pooling), *extra], prompts=E5,
                               similarity_fn_name=similarity, device="cpu")


def _sparse(tiny_bert_dir):
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    return SparseEncoder(modules=[MLMTransformer(str(tiny_bert_dir), max_seq_length=64),
                                  SpladePooling(pooling_strategy="max")], device="cpu")


@pytest.fixture(scope="module")
def st_dense(tiny_bert_dir):
    return _dense(tiny_bert_dir)


def test_a_dense_object_encodes_as_sentence_transformers(st_dense):
    enc = as_encoder(st_dense)
    assert isinstance(enc, SentenceTransformerEncoder) and not enc.output_is_sparse
    assert (enc.query_prefix, enc.doc_prefix, enc.similarity_fn_name) == ("query: ", "passage: ", "dot")
    q, q_st = enc.encode_query(QUERIES), st_dense.encode_query(QUERIES)
    d, d_st = enc.encode_document(DOCS), st_dense.encode_document(DOCS)
    np.testing.assert_allclose(q, q_st, atol=1e-5)
    np.testing.assert_allclose(d, d_st, atol=1e-5)
    # the prompt is applied (the comparison would hold vacuously without one)
    assert not np.allclose(q, enc.encode_query(QUERIES, prompt=""), atol=1e-4)
    np.testing.assert_allclose(enc.similarity(q, d).numpy(), st_dense.similarity(q_st, d_st).numpy(), atol=1e-4)
    assert as_encoder(enc) is enc and as_encoder(None) is None
    with pytest.raises(TypeError, match="not an encoder"):
        as_encoder("a string")


def test_a_sparse_object_encodes_as_sparse_encoder(tiny_bert_dir):
    from hf_dr.models import load_encoder

    st = _sparse(tiny_bert_dir)
    enc = as_encoder(st)
    assert enc.output_is_sparse and enc.similarity_fn_name == "dot"
    q = enc.encode_query(QUERIES)
    d = enc.encode_document(DOCS)
    np.testing.assert_allclose(q.toarray(), st.encode_query(QUERIES).to_dense().numpy(), atol=1e-5)
    np.testing.assert_allclose(d.toarray(), st.encode_document(DOCS).to_dense().numpy(), atol=1e-5)
    assert q.nnz > 0
    # and as hf-dr's own SPLADE over the same checkpoint
    own = load_encoder(tiny_bert_dir, kind="sparse")
    np.testing.assert_allclose(d.toarray(), own.encode_corpus(DOCS, max_length=64).toarray(), atol=1e-5)


@pytest.mark.slow
def test_a_retriever_over_an_object_searches_and_evaluates(st_dense):
    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate
    from hf_dr.factory import build_retriever, evaluate_model
    from hf_dr.retrieval import EncoderRetriever

    data = load_beir(SAMPLE)
    r = EncoderRetriever.from_data(st_dense, data, show_progress_bar=False)
    queries = data.split_queries()
    run = r.search(queries, k=10)
    # the ranking is Sentence Transformers' own: its vectors + exact inner product
    qids = list(queries)[:5]
    qv = st_dense.encode_query([queries[q] for q in qids])
    dv = st_dense.encode_document(data.doc_texts())
    for i, q in enumerate(qids):
        top = [data.doc_ids()[j] for j in np.argsort(-(dv @ qv[i]), kind="stable")[:10]]
        assert list(run[q])[:3] == top[:3]
    res = evaluate(r, data, k=100)
    assert 0 <= res.aggregate["ndcg@10"] <= 1
    res2, _ = evaluate_model(st_dense, data, top_k=100, show_progress_bar=False)
    assert res2.aggregate["ndcg@10"] == pytest.approx(res.aggregate["ndcg@10"], abs=1e-9)
    r3 = build_retriever("dense", data, st_dense, show_progress_bar=False)
    assert r3.search({qids[0]: queries[qids[0]]}, k=3)[qids[0]].keys() == dict(list(run[qids[0]].items())[:3]).keys()
    with pytest.raises(ValueError, match="not a sparse model"):
        build_retriever("sparse", data, st_dense)


def test_embeddings_of_an_object_are_checked_like_any_model(st_dense, tiny_bert_dir, tmp_path):
    from hf_dr.data import load_beir
    from hf_dr.embeddings import EmbeddingsError, encode_to_folder
    from hf_dr.retrieval import EncoderRetriever

    data = load_beir(SAMPLE)
    emb = encode_to_folder(st_dense, data, tmp_path / "emb", show_progress_bar=False)
    assert emb.manifest["document_prompt"] == "passage: " and emb.manifest["query_prompt"] == "query: "
    r = EncoderRetriever.from_embeddings(st_dense, emb, doc_ids=data.doc_ids())
    np.testing.assert_allclose(emb.matrix()[:3], st_dense.encode_document(data.doc_texts()[:3]), atol=1e-5)
    assert len(r) == len(data.corpus)
    with pytest.raises(EmbeddingsError):
        EncoderRetriever.from_embeddings(_dense(tiny_bert_dir, pooling="cls"), emb, doc_ids=data.doc_ids())


@pytest.mark.pipeline
def test_pseudo_labels_take_an_object_as_the_dense_model(st_dense, tmp_path):
    from hf_dr.data import load_beir
    from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels

    data = load_beir(SAMPLE)
    queries = dict(list(data.split_queries().items())[:8])
    labels = build_pseudo_labels(data, tmp_path / "labels", PseudoLabelConfig(k=1, m=2, dev_queries=2, negatives="simans"),
                                 dense_encoder=st_dense, queries=queries, show_progress_bar=False)
    assert len(labels.train) > 0 and labels.stats["dense_model"]


def test_what_adapt_cannot_train_exactly_is_named(tiny_bert_dir):
    from sentence_transformers.base.modules import Dense

    assert trainable_as_folder(_dense(tiny_bert_dir)) is None
    assert trainable_as_folder(_sparse(tiny_bert_dir)) is None
    why = trainable_as_folder(_dense(tiny_bert_dir, extra=[Dense(32, 16)]))
    assert why and "Dense" in why


@pytest.mark.parametrize("which", ["dense", "sparse"])
@pytest.mark.pipeline
def test_adapt_takes_an_object_as_the_student(which, tiny_bert_dir, tmp_path):
    import json

    from sentence_transformers import SentenceTransformer, SparseEncoder

    from hf_dr.adaptation.pipeline import AdaptConfig, AdaptError, adapt

    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data)
    head, *rows = (data / "qrels" / "test.tsv").read_text().splitlines()
    qids = list(dict.fromkeys(r.split("\t")[0] for r in rows))[:30]
    (data / "qrels" / "train.tsv").write_text("\n".join([head] + [r for r in rows if r.split("\t")[0] in qids]) + "\n")
    (data / "qrels" / "test.tsv").write_text("\n".join([head] + [r for r in rows if r.split("\t")[0] not in qids]) + "\n")
    st = _dense(tiny_bert_dir) if which == "dense" else _sparse(tiny_bert_dir)
    method = "dodress" if which == "dense" else "cai"
    out = tmp_path / "out"
    res = adapt(AdaptConfig(data=str(data), model=st, method=method, output=str(out), max_steps=2, eval_steps=1,
                            max_length=32, m=2, batch_size=4, negatives="bm25", max_queries=10, dev_queries=4,
                            dense_teacher=_dense(tiny_bert_dir) if which == "sparse" else None))
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["after"]["ndcg@10"] == pytest.approx(res.metrics["after"]["ndcg@10"])
    # the object came in through its own folder, with its prompts (dense) and kind (sparse)
    inputs = sorted((res.work_dir / "inputs").iterdir())
    assert inputs and (inputs[0] / "modules.json").is_file()
    loaded = (SentenceTransformer if which == "dense" else SparseEncoder)(str(inputs[0]), device="cpu")
    if which == "dense":
        assert loaded.prompts["query"] == "query: "
    # a model with modules hf-dr would drop is refused before any work
    from sentence_transformers.base.modules import Dense

    with pytest.raises(AdaptError, match="cannot be adapted by hf-dr"):
        adapt(AdaptConfig(data=str(data), model=_dense(tiny_bert_dir, extra=[Dense(32, 16)]), method="dodress",
                          output=str(tmp_path / "out2")))


@pytest.mark.parametrize("kind", ["dense", "splade-idf"])
def test_an_hf_dr_output_loaded_in_sentence_transformers_comes_back_alike(kind, tiny_bert_dir, tmp_path):
    """Round trip: an hf-dr output (queries cut shorter than documents: Sentence Transformers 6's
    query_length) loaded as a SentenceTransformer / SparseEncoder object and passed back in encodes as
    the hf-dr model does — a long query included."""
    from sentence_transformers import SentenceTransformer, SparseEncoder

    from .test_st_out import _e5_dense, _push, _splade

    model = _e5_dense(tiny_bert_dir, tmp_path) if kind == "dense" else _splade(tiny_bert_dir, tmp_path)
    out = _push(tmp_path)
    st = SentenceTransformer(str(out), device="cpu") if kind == "dense" else \
        SparseEncoder(str(out), device="cpu", trust_remote_code=True)
    enc = as_encoder(st)
    assert (enc.max_query_length, enc.max_doc_length) == (12, 48)
    long_query = [" ".join(["fever infection immune"] * 20), "cells"]
    dense = (lambda x: x) if kind == "dense" else (lambda x: x.toarray())
    np.testing.assert_allclose(dense(enc.encode_query(long_query)), dense(model.encode_queries(long_query)), atol=1e-5)
    np.testing.assert_allclose(dense(enc.encode_document(DOCS)), dense(model.encode_corpus(DOCS)), atol=1e-5)


def test_a_cosine_object_without_normalize_is_scored_by_cosine(tiny_bert_dir):
    """A model whose similarity is cosine but has no Normalize module: hf-dr retrieves by inner product,
    so the wrapper encodes unit vectors; their scores are Sentence Transformers' cosine similarity."""
    st = _dense(tiny_bert_dir, similarity="cosine")
    enc = as_encoder(st)
    q, d = enc.encode_query(QUERIES), enc.encode_document(DOCS)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(q @ d.T, st.similarity(st.encode_query(QUERIES), st.encode_document(DOCS)).numpy(),
                               atol=1e-5)
    assert not np.allclose(np.linalg.norm(st.encode_query(QUERIES), axis=1), 1.0, atol=1e-3)  # ST's own are not unit


def test_a_sparse_object_searches_an_existing_index(tiny_bert_dir):
    """``EncoderRetriever.from_index`` with a SparseEncoder object: the retriever is sparse (the object
    gains ``output_is_sparse`` only when wrapped) and ranks as the retriever that built the index."""
    from hf_dr.retrieval import EncoderRetriever

    st = _sparse(tiny_bert_dir)
    ids = [f"d{i}" for i in range(len(DOCS))]
    built = EncoderRetriever.from_corpus(st, ids, DOCS, show_progress_bar=False)
    r = EncoderRetriever.from_index(st, built.index)
    assert r.sparse and r.name == "sparse"
    queries = {"q0": QUERIES[0], "q1": QUERIES[1]}
    assert r.search(queries, k=3) == built.search(queries, k=3)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_objects_encode_in_reduced_precision(dtype, st_dense, tiny_bert_dir):
    """The GPU's autocast paths, on CPU autocast: a wrapped object's dense and sparse vectors in bf16 / fp16
    come back float32 and follow fp32's."""
    enc = as_encoder(st_dense)
    q32, q = enc.encode_query(QUERIES, dtype="fp32"), enc.encode_query(QUERIES, dtype=dtype)
    assert q.dtype == np.float32
    np.testing.assert_allclose(q, q32, atol=5e-2)
    sp_enc = as_encoder(_sparse(tiny_bert_dir))
    d32, d = sp_enc.encode_document(DOCS, dtype="fp32"), sp_enc.encode_document(DOCS, dtype=dtype)
    assert d.dtype == np.float32 and d.nnz > 0
    np.testing.assert_allclose(d.toarray(), d32.toarray(), atol=5e-2 * max(1.0, abs(d32).max()))
