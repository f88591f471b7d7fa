"""Sentence Transformers out: every model hf-dr writes that Sentence Transformers can express
loads there — ``SentenceTransformer(folder)`` (dense, BERM) / ``SparseEncoder(folder)`` (SPLADE,
SPLADE-CAI) — with no warning, and encodes queries and documents as hf-dr does (1e-5), with the
same similarity; the folder still loads with hf-dr / ``AutoModel(trust_remote_code=True)``; the
card's Sentence Transformers snippet runs and gives hf-dr's scores."""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_dr.hub import prepare_model_folder
from hf_dr.models.st_folder import sentence_transformers_class

from .conftest import run_without_hf_dr

QUERIES = ["what causes fever?", "how do vaccines train the immune system of the body against infection "
           "and what are the many side effects that people report after the second dose of it"]
DOCS = ["Fever is caused by infection of the body.", "The cat sat on the mat.",
        "Vaccines train the immune system. " * 6]
E5 = {"query": "query: ", "document": "passage: "}


def _dense_rows(x) -> np.ndarray:
    if hasattr(x, "to_dense"):  # torch sparse (SparseEncoder)
        x = x.to_dense()
    if hasattr(x, "todense"):  # scipy CSR (hf-dr's sparse encoders)
        x = x.todense()
    return np.asarray(x.cpu().numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float32)


def load_st(folder, caplog=None):
    """``SentenceTransformer`` / ``SparseEncoder`` of ``folder`` (as its files say), asserting that
    loading raises no warning and logs nothing at WARNING or above."""
    import sentence_transformers

    kind = sentence_transformers_class(folder)
    assert kind is not None, f"{folder} has no modules.json"
    cls_name, remote, _ = kind
    cls = getattr(sentence_transformers, cls_name)
    from transformers.utils import logging as hf_logging

    logs: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = logs.append
    # the root logger (Sentence Transformers, huggingface_hub...) and transformers' own, which does not propagate
    loggers = [logging.getLogger(), hf_logging.get_logger()]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = cls(str(folder), device="cpu", **({"trust_remote_code": True} if remote else {}))
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
    assert not caught, [f"{w.category.__name__}: {w.message}" for w in caught]
    assert not logs, [r.getMessage()[:300] for r in logs]
    return model


def assert_st_matches(folder, hf_model=None, queries=QUERIES, docs=DOCS, atol=1e-5):
    """Sentence Transformers' ``encode_query`` / ``encode_document`` of ``folder`` equal hf-dr's
    ``encode_queries`` / ``encode_corpus`` (of ``hf_model``, else hf-dr's own loading of the folder),
    and ``similarity`` ranks the documents of each query alike. Returns the Sentence Transformers model."""
    from hf_dr.models import load_encoder

    st = load_st(folder)
    ours = hf_model if hf_model is not None else load_encoder(folder)
    q_ref, d_ref = _dense_rows(ours.encode_queries(queries)), _dense_rows(ours.encode_corpus(docs))
    q, d = st.encode_query(queries), st.encode_document(docs)
    np.testing.assert_allclose(_dense_rows(q), q_ref, atol=atol, rtol=1e-5)
    np.testing.assert_allclose(_dense_rows(d), d_ref, atol=atol, rtol=1e-5)
    ours_scores = ours.similarity(q_ref, d_ref).numpy()
    st_scores = _dense_rows(st.similarity(q, d))
    np.testing.assert_allclose(st_scores, ours_scores, atol=1e-4, rtol=1e-4)
    assert (np.argsort(-st_scores, axis=1, kind="stable") == np.argsort(-ours_scores, axis=1, kind="stable")).all()
    return st


def _perturb(model, seed=1, scale=0.05):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


# ------------------------------------------------------------------------------------------- builders
def _e5_dense(tiny_bert_dir, tmp, similarity="dot", pooling="mean"):
    """A Sentence Transformers folder with E5 prompts and the given similarity, loaded by hf-dr,
    with queries cut shorter than documents (hf-dr's max_query_length)."""
    from hf_dr.models.dense import DenseEncoder

    from .test_st_prompts import _st_folder

    src = _st_folder(tiny_bert_dir, tmp / "st", pooling=pooling, similarity=similarity)
    m = DenseEncoder.from_pretrained(src, max_length=48, max_query_length=12)
    m.save_pretrained(tmp / "model")
    return m


def _berm(tiny_bert_dir, tmp, similarity="dot", pooling="cls"):
    from hf_dr.encoding import apply_prompts
    from hf_dr.models.berm import BERMEncoder

    m = BERMEncoder.from_backbone(str(tiny_bert_dir), pooling=pooling, similarity=similarity, max_query_length=12,
                                  max_doc_length=48)
    apply_prompts(m, "query: ", "passage: ")
    m.save_pretrained(tmp / "model")
    return m


def _splade(tiny_bert_dir, tmp, use_idf=True, idf_exponent=0.5, query_mode="splade"):
    from hf_dr.encoding import apply_prompts
    from hf_dr.models.splade import SPLADECAI

    m = SPLADECAI.from_backbone(str(tiny_bert_dir), max_query_length=12, max_doc_length=48,
                                idf_exponent=idf_exponent, query_mode=query_mode)
    _perturb(m.mlm, scale=0.5)  # a random tiny MLM head gives few positive logits: spread them
    m.fit_idf(DOCS + ["fever infection cells", "the immune system"], enable=use_idf)
    apply_prompts(m, "query: ", "passage: ")
    m.save_pretrained(tmp / "model")
    return m


def _push(tmp, repo_id=None) -> Path:
    out = tmp / "OUT"
    prepare_model_folder(tmp / "model", out, repo_id=repo_id)
    return out


# ---------------------------------------------------------------------------------------------- dense
def test_dense_output_with_prompts_and_dot_product(tiny_bert_dir, tmp_path):
    model = _e5_dense(tiny_bert_dir, tmp_path, similarity="dot")
    out = _push(tmp_path)
    st = assert_st_matches(out, model)
    assert st.similarity_fn_name == "dot" and st.prompts["query"] == "query: " and st.prompts["document"] == "passage: "
    # the long query is cut at hf-dr's max_query_length: a query length of its own
    assert json.loads((out / "sentence_bert_config.json").read_text())["query_length"] == 12
    # the prompts change the vectors (the comparison would pass vacuously without them)
    assert not np.allclose(st.encode_query(QUERIES), st.encode_query(QUERIES, prompt=""), atol=1e-4)
    # hf-dr's own loading: unchanged
    assert_st_matches(out)


def test_dense_output_cosine(tiny_bert_dir, tmp_path):
    model = _e5_dense(tiny_bert_dir, tmp_path, similarity="cosine", pooling="cls")
    st = assert_st_matches(_push(tmp_path), model)
    assert st.similarity_fn_name == "cosine"


# ----------------------------------------------------------------------------------------------- BERM
@pytest.mark.parametrize("similarity,pooling", [("dot", "cls"), ("cos", "mean")])
def test_berm_output(similarity, pooling, tiny_bert_dir, tmp_path):
    from transformers import AutoModel

    model = _berm(tiny_bert_dir, tmp_path, similarity, pooling)
    out = _push(tmp_path)
    st = assert_st_matches(out, model)
    assert st.similarity_fn_name == ("cosine" if similarity == "cos" else "dot")
    assert sentence_transformers_class(out) == ("SentenceTransformer", [], st.similarity_fn_name)
    # the Transformer reads the root's weights file: one file on disk
    assert os.path.samefile(out / "model.safetensors", out / "0_Transformer" / "model.safetensors")
    # still a trust_remote_code folder, and hf-dr reads its prompts back
    m = AutoModel.from_pretrained(out, trust_remote_code=True)
    assert type(m).__name__ == "BERMEncoder" and (m.query_prefix, m.doc_prefix) == ("query: ", "passage: ")
    assert_st_matches(out)


# --------------------------------------------------------------------------------------------- SPLADE
def test_splade_cai_with_idf(tiny_bert_dir, tmp_path):
    """IDF on documents (exponent 0.5), prompts, queries cut at 12 tokens: a Router whose document
    route adds the IDF module, loaded with trust_remote_code; weights once on disk."""
    import sentence_transformers
    from transformers import AutoModel

    model = _splade(tiny_bert_dir, tmp_path, use_idf=True, idf_exponent=0.5)
    out = _push(tmp_path)
    assert sentence_transformers_class(out) == ("SparseEncoder", ["splade_idf.SpladeIDF"], "dot")
    st = assert_st_matches(out, model)
    d_plain = _dense_rows(model.encode_corpus(DOCS, show_progress_bar=False))
    model.config.use_idf = False
    assert not np.allclose(d_plain, _dense_rows(model.encode_corpus(DOCS)), atol=1e-4)  # the IDF matters here
    model.config.use_idf = True
    assert st.prompts["query"] == "query: "
    # without trust_remote_code: Sentence Transformers' own refusal, naming the flag
    with pytest.raises(ValueError, match="trust_remote_code"):
        sentence_transformers.SparseEncoder(str(out), device="cpu")
    # every weight once on disk: the modules link the root's two shards
    assert os.path.samefile(out / "model-00001-of-00002.safetensors", out / "0_Transformer" / "model.safetensors")
    assert os.path.samefile(out / "model-00002-of-00002.safetensors", out / "2_SpladeIDF" / "model.safetensors")
    assert not (out / "model.safetensors").exists()
    # hf-dr and AutoModel load the folder as before (the same vectors)
    m = AutoModel.from_pretrained(out, trust_remote_code=True)
    assert type(m).__name__ == "SPLADECAI" and m.config.use_idf and torch.equal(m.idf, model.idf)
    assert_st_matches(out)


@pytest.mark.cli
def test_splade_cai_with_idf_loads_without_hf_dr(tiny_bert_dir, tmp_path):
    """A user without hf-dr: the IDF module comes from the folder (splade_idf.py)."""
    model = _splade(tiny_bert_dir, tmp_path, use_idf=True, idf_exponent=1.0)
    out = _push(tmp_path)
    np.save(tmp_path / "q.npy", _dense_rows(model.encode_queries(QUERIES)))
    np.save(tmp_path / "d.npy", _dense_rows(model.encode_corpus(DOCS)))
    script = f"""
import numpy as np
from sentence_transformers import SparseEncoder
m = SparseEncoder({str(out)!r}, device="cpu", trust_remote_code=True)
np.testing.assert_allclose(m.encode_query({QUERIES!r}).to_dense().numpy(), np.load({str(tmp_path / 'q.npy')!r}),
                           atol=1e-5, rtol=1e-5)
np.testing.assert_allclose(m.encode_document({DOCS!r}).to_dense().numpy(), np.load({str(tmp_path / 'd.npy')!r}),
                           atol=1e-5, rtol=1e-5)
print("OK")
"""
    res = run_without_hf_dr(script, tmp_path)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]


@pytest.mark.parametrize("query_mode", ["splade", "bow"])
def test_splade_without_idf_needs_no_remote_code(query_mode, tiny_bert_dir, tmp_path):
    model = _splade(tiny_bert_dir, tmp_path, use_idf=False, query_mode=query_mode)
    out = _push(tmp_path)
    assert sentence_transformers_class(out) == ("SparseEncoder", [], "dot")
    assert not (out / "splade_idf.py").exists()
    assert_st_matches(out, model)


def test_splade_doc_with_idf(tiny_bert_dir, tmp_path):
    """SPLADE-Doc (binary bag-of-tokens queries) + IDF documents: both routes differ."""
    model = _splade(tiny_bert_dir, tmp_path, use_idf=True, idf_exponent=1.0, query_mode="bow")
    assert_st_matches(_push(tmp_path), model)


# ---------------------------------------------------------------------------------------------- cards
def _st_snippet(readme: str) -> str:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "from sentence_transformers" in b]
    assert len(blocks) == 1, readme
    return blocks[0]


@pytest.mark.parametrize("kind", ["dense", "berm", "splade_cai"])
def test_card_snippet_runs_and_scores_as_hf_dr(kind, tiny_bert_dir, tmp_path, capsys):
    build = {"dense": _e5_dense, "berm": _berm, "splade_cai": _splade}[kind]
    model = build(tiny_bert_dir, tmp_path)
    out = _push(tmp_path, repo_id="someone/st-out-test")
    code = _st_snippet((out / "README.md").read_text()).replace("someone/st-out-test", str(out))
    ns: dict = {}
    exec(compile(code, "card-snippet", "exec"), ns)
    assert "tensor" in capsys.readouterr().out  # it prints the scores
    ours = model.similarity(model.encode_queries(ns["queries"]), model.encode_corpus(ns["documents"])).numpy()
    np.testing.assert_allclose(_dense_rows(ns["scores"]), ours, atol=1e-4, rtol=1e-5)
    assert ("trust_remote_code=True" in code) == (kind == "splade_cai")
    if kind == "dense":
        return
    # the plain-transformers snippet (trust_remote_code) prepends the saved prompts too
    plain, = [b for b in re.findall(r"```python\n(.*?)```", (out / "README.md").read_text(), flags=re.S)
              if "AutoModel.from_pretrained(\"someone/st-out-test\"" in b]
    assert "'query: '" in plain
    ns = {}
    exec(compile(plain.replace("someone/st-out-test", str(out)), "card-snippet", "exec"), ns)
    ours = model.similarity(model.encode_queries(["what causes fever?"]),
                            model.encode_corpus(["Fever is caused by infection.", "The cat sat on the mat."])).numpy()
    np.testing.assert_allclose(_dense_rows(ns["scores"]), ours, atol=1e-4, rtol=1e-5)


def test_ddr_card_says_sentence_transformers_cannot_load_it(tiny_bert_dir, tmp_path):
    from hf_dr.models.ddr import DDRModel

    m = DDRModel.from_backbone(str(tiny_bert_dir), lora_rank=4, max_doc_length=32, max_query_length=16)
    m.save_dam(tmp_path / "dam")
    m.save_rem(tmp_path / "model", dam_name_or_path=str(tmp_path / "dam"))
    out = _push(tmp_path)
    assert sentence_transformers_class(out) is None  # no Sentence Transformers snippet on the card
    assert "Sentence Transformers cannot load this model" in (out / "README.md").read_text()


# ------------------------------------------------------------- a save_pretrained folder, as saved
# The folder that ``save_pretrained`` writes (no ``hf-dr push``) loads where its format says it does.
def test_dense_save_pretrained_folder_loads_in_sentence_transformers(tiny_bert_dir, tmp_path):
    model = _e5_dense(tiny_bert_dir, tmp_path, similarity="cosine", pooling="cls")
    assert_st_matches(tmp_path / "model", model)


@pytest.mark.parametrize("similarity,pooling", [("dot", "cls"), ("cos", "mean")])
def test_berm_save_pretrained_folder_loads_in_sentence_transformers(similarity, pooling, tiny_bert_dir, tmp_path):
    model = _berm(tiny_bert_dir, tmp_path, similarity, pooling)
    assert_st_matches(tmp_path / "model", model)
    # a second save into the same folder (a Trainer checkpoint overwritten) still loads
    model.save_pretrained(tmp_path / "model")
    assert_st_matches(tmp_path / "model", model)


@pytest.mark.parametrize("use_idf", [True, False])
def test_splade_save_pretrained_folder_loads_in_sparse_encoder(use_idf, tiny_bert_dir, tmp_path):
    model = _splade(tiny_bert_dir, tmp_path, use_idf=use_idf)
    assert sentence_transformers_class(tmp_path / "model")[0] == "SparseEncoder"
    assert_st_matches(tmp_path / "model", model)


def test_a_folder_sentence_transformers_cannot_express_fails_with_one_sentence(tiny_bert_dir, tmp_path):
    """A DDR REM: ``SentenceTransformer(folder)`` raises one sentence of hf-dr's, never an error from
    inside another library; without ``trust_remote_code`` Sentence Transformers asks for it first."""
    from sentence_transformers import SentenceTransformer

    from hf_dr.models.ddr import DDRModel
    from hf_dr.models.st_folder import unsupported_reason

    m = DDRModel.from_backbone(str(tiny_bert_dir), lora_rank=4, max_doc_length=32, max_query_length=16)
    m.save_pretrained(tmp_path / "ddr")
    why = unsupported_reason(tmp_path / "ddr")
    assert why and why.startswith("Sentence Transformers cannot load the model in this folder: a DDR REM")
    with pytest.raises(ValueError) as e:
        SentenceTransformer(str(tmp_path / "ddr"), trust_remote_code=True, device="cpu")
    assert str(e.value) == why
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        SentenceTransformer(str(tmp_path / "ddr"), device="cpu")
    # the folder still loads with hf-dr
    from hf_dr.models import load_encoder

    assert type(load_encoder(str(tmp_path / "ddr"))).__name__ == "DDRModel"


def test_the_warning_check_sees_transformers_load_report(tiny_bert_dir, tmp_path):
    """The no-warning check is not vacuous: a Transformer module reading the root's weights without
    the key mapping (every weight unexpected / missing) is caught by :func:`load_st`."""
    _berm(tiny_bert_dir, tmp_path)
    out = _push(tmp_path)
    cfg_file = out / "0_Transformer" / "sentence_bert_config.json"
    cfg = json.loads(cfg_file.read_text())
    del cfg["model_args"]
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(AssertionError, match="LOAD REPORT|MISSING|UNEXPECTED"):
        load_st(out)
