"""Sentence Transformers in, Sentence Transformers out: prompts and similarity of a sentence-transformers
folder (``config_sentence_transformers.json``) read as Sentence Transformers reads them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hf_dr.cli import main
from hf_dr.models.dense import DenseEncoder

from .conftest import SAMPLE

QUERIES = ["what causes fever?", "how do vaccines work"]
DOCS = ["Fever is caused by infection of the body.", "The cat sat on the mat.", "Vaccines train the immune system."]
E5 = {"query": "query: ", "document": "passage: "}


def _st_folder(tiny_bert_dir, out, pooling="mean", prompts=E5, similarity="dot", default_prompt_name=None):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    t = Transformer(str(tiny_bert_dir))
    p = Pooling(t.get_embedding_dimension(), pooling)
    SentenceTransformer(modules=[t, p], prompts=prompts, similarity_fn_name=similarity,
                        default_prompt_name=default_prompt_name).save(str(out))
    return out


@pytest.fixture(scope="module")
def e5_dir(tiny_bert_dir, tmp_path_factory):
    return _st_folder(tiny_bert_dir, tmp_path_factory.mktemp("e5"))


def _st(path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu")


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_encode_query_and_document_equal_sentence_transformers(tiny_bert_dir, tmp_path, pooling):
    d = _st_folder(tiny_bert_dir, tmp_path / "m", pooling=pooling)
    ours, st = DenseEncoder.from_pretrained(d), _st(d)
    assert ours.pooling == pooling and (ours.query_prefix, ours.doc_prefix) == ("query: ", "passage: ")
    q, q_st = ours.encode_query(QUERIES, device="cpu"), st.encode_query(QUERIES)
    docs, docs_st = ours.encode_document(DOCS, device="cpu"), st.encode_document(DOCS)
    np.testing.assert_allclose(q, q_st, atol=1e-5)
    np.testing.assert_allclose(docs, docs_st, atol=1e-5)
    # the prompt changes the vectors (the test would pass vacuously without one)
    assert not np.allclose(q, ours.encode_query(QUERIES, prompt="", device="cpu"), atol=1e-4)
    sim, sim_st = ours.similarity(q, docs), st.similarity(q_st, docs_st)
    assert isinstance(sim, torch.Tensor) and sim.shape == (2, 3)
    torch.testing.assert_close(sim, sim_st, atol=1e-4, rtol=1e-5)
    # dot: not cosine (the vectors are not normalised)
    assert not torch.allclose(sim, torch.nn.functional.cosine_similarity(
        torch.as_tensor(q)[:, None], torch.as_tensor(docs)[None], dim=-1), atol=1e-3)
    # the older names encode alike
    np.testing.assert_allclose(ours.encode_queries(QUERIES, device="cpu"), q, atol=1e-6)
    np.testing.assert_allclose(ours.encode_corpus(DOCS, device="cpu"), docs, atol=1e-6)


def test_encode_with_prompt_name_and_default_prompt_name(tiny_bert_dir, tmp_path):
    d = _st_folder(tiny_bert_dir, tmp_path / "m", prompts={**E5, "sts": "sts: "}, similarity="cosine",
                   default_prompt_name="sts")
    ours, st = DenseEncoder.from_pretrained(d), _st(d)
    assert ours.normalize  # cosine: hf-dr encodes unit vectors (Sentence Transformers normalises in similarity)
    for kw in ({}, {"prompt_name": "query"}, {"prompt_name": "document"}, {"prompt": "custom: "}):
        np.testing.assert_allclose(ours.encode(DOCS, device="cpu", **kw),
                                   st.encode(DOCS, normalize_embeddings=True, **kw), atol=1e-5)
    assert not np.allclose(ours.encode(DOCS, device="cpu"), ours.encode(DOCS, prompt="", device="cpu"), atol=1e-4)
    # default_prompt_name applies to encode(), not to encode_query / encode_document (as in Sentence Transformers)
    np.testing.assert_allclose(ours.encode_query(QUERIES, device="cpu"),
                               st.encode_query(QUERIES, normalize_embeddings=True), atol=1e-5)
    with pytest.raises(ValueError, match="Prompt name 'nope' not found"):
        ours.encode(DOCS, prompt_name="nope")
    # cosine: the folder's similarity
    q, docs = ours.encode_query(QUERIES, device="cpu"), ours.encode_document(DOCS, device="cpu")
    torch.testing.assert_close(ours.similarity(q, docs), st.similarity(q, docs), atol=1e-5, rtol=1e-5)


def test_document_prompt_fallback_as_sentence_transformers(tiny_bert_dir, tmp_path):
    """A folder with ``passage`` but no ``document`` prompt (what older Sentence Transformers saved for E5):
    the document prompt is whatever Sentence Transformers' ``encode_document`` uses."""
    d = _st_folder(tiny_bert_dir, tmp_path / "m", prompts={"query": "query: ", "passage": "passage: "})
    cfg = json.loads((d / "config_sentence_transformers.json").read_text())
    cfg["prompts"].pop("document", None)
    (d / "config_sentence_transformers.json").write_text(json.dumps(cfg))
    ours, st = DenseEncoder.from_pretrained(d), _st(d)
    # Sentence Transformers 6 always has a "document" prompt ("" when not saved), which comes before "passage"
    assert ours.doc_prefix == st.prompts["document"] == "" and ours.prompts["passage"] == "passage: "
    np.testing.assert_allclose(ours.encode_document(DOCS, device="cpu"), st.encode_document(DOCS), atol=1e-5)
    np.testing.assert_allclose(ours.encode_query(QUERIES, device="cpu"), st.encode_query(QUERIES), atol=1e-5)


def test_prompts_survive_save_and_sentence_transformers_export(e5_dir, tmp_path):
    ours = DenseEncoder.from_pretrained(e5_dir)
    ours.save_pretrained(tmp_path / "saved")
    ours.save_sentence_transformers_config(tmp_path / "saved")
    again = DenseEncoder.from_pretrained(tmp_path / "saved")
    assert (again.query_prefix, again.doc_prefix, again.similarity_fn_name) == ("query: ", "passage: ", "dot")
    st = _st(tmp_path / "saved")
    assert st.prompts["query"] == "query: " and st.similarity_fn_name == "dot"
    np.testing.assert_allclose(again.encode_document(DOCS, device="cpu"), st.encode_document(DOCS), atol=1e-5)


def test_apply_prompts_overrides_the_folder(e5_dir):
    from hf_dr.encoding import apply_prompts

    ours = DenseEncoder.from_pretrained(e5_dir)
    plain = ours.encode_query(QUERIES, prompt="", device="cpu")
    apply_prompts(ours, query_prompt="", document_prompt="doc: ")
    assert (ours.query_prefix, ours.doc_prefix) == ("", "doc: ")
    np.testing.assert_allclose(ours.encode_query(QUERIES, device="cpu"), plain, atol=1e-6)
    np.testing.assert_allclose(ours.encode_document(DOCS, device="cpu"),
                               ours.encode(["doc: " + t for t in DOCS], device="cpu", prompt=""), atol=1e-6)
    apply_prompts(ours)  # nothing given: nothing changes
    assert (ours.query_prefix, ours.doc_prefix) == ("", "doc: ")


def test_cli_flags_recorded_and_other_prompts_refused(e5_dir, tmp_path, capsys):
    args = ["--data", str(SAMPLE), "--model", str(e5_dir)]
    emb = tmp_path / "emb"
    assert main(["encode", *args, "--output", str(emb), "--no-progress"]) == 0
    m = json.loads((emb / "manifest.json").read_text())
    assert (m["query_prompt"], m["document_prompt"]) == ("query: ", "passage: ")
    emb2 = tmp_path / "emb2"
    assert main(["encode", *args, "--output", str(emb2), "--no-progress", "--query-prompt", "",
                 "--document-prompt", "doc: "]) == 0
    m2 = json.loads((emb2 / "manifest.json").read_text())
    assert (m2["query_prompt"], m2["document_prompt"]) == ("", "doc: ")
    capsys.readouterr()
    # the folder's prompts: the same embeddings are accepted
    assert main(["evaluate", *args, "--retriever", "dense", "--max-queries", "5", "--embeddings", str(emb),
                 "--output", str(tmp_path / "a")]) == 0
    # other prompts than the embeddings': refused, exit status 2, a message naming the prompts
    assert main(["evaluate", *args, "--retriever", "dense", "--max-queries", "5", "--embeddings", str(emb2),
                 "--output", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "document prompt" in err and "'doc: '" in err and "Traceback" not in err
    assert main(["evaluate", *args, "--retriever", "dense", "--max-queries", "5", "--embeddings", str(emb2),
                 "--query-prompt", "", "--document-prompt", "doc: ", "--output", str(tmp_path / "c")]) == 0


def test_old_manifest_without_prompt_fields_is_no_prompt(tiny_bert_dir, tmp_path):
    from hf_dr.embeddings import Embeddings, encode_to_folder

    enc = DenseEncoder.from_pretrained(tiny_bert_dir)
    emb = encode_to_folder(enc, (["a", "b"], DOCS[:2]), tmp_path / "emb", show_progress_bar=False)
    mf = tmp_path / "emb" / "manifest.json"
    m = json.loads(mf.read_text())
    for k in ("query_prompt", "document_prompt"):
        m.pop(k)
    mf.write_text(json.dumps(m))
    Embeddings(tmp_path / "emb").check(enc)  # an old folder: read as "no prompt", accepted
    enc.doc_prefix = "passage: "
    with pytest.raises(ValueError, match="document prompt"):
        Embeddings(tmp_path / "emb").check(enc)
    assert emb is not None


def test_training_sees_the_prompts(e5_dir):
    """The collator of training prepends the prompts the encodings prepend (else a model would be
    trained on other texts than it is searched with)."""
    from hf_dr.data import RetrievalCollator
    from hf_dr.data.collators import UnitCollator

    enc = DenseEncoder.from_pretrained(e5_dir)
    batch = RetrievalCollator.for_model(enc, neg_column="neg", score_column=None)(
        [{"query": QUERIES[0], "pos": DOCS[0], "neg": DOCS[1]}])
    tok = enc.tokenizer
    assert batch["query_input_ids"][0].tolist() == tok("query: " + QUERIES[0])["input_ids"]
    n = len(tok("passage: " + DOCS[1])["input_ids"])
    assert batch["doc_input_ids"][1, :n].tolist() == tok("passage: " + DOCS[1])["input_ids"]
    # BERM's unit spans stay on the units' tokens, after the prompt
    row = {"query": "q", "pos": "Alpha beta. Gamma delta.", "unit_char_spans": [[0, 11], [12, 24]], "essential_unit": 1}
    ub = UnitCollator.for_model(enc, neg_column=None, score_column=None)([row])
    ids = ub["doc_input_ids"][0]
    s, e = ub["unit_spans"][0, 1].tolist()
    assert tok.decode(ids[s:e]) == "gamma delta."


@pytest.mark.parametrize("command", ["encode", "evaluate", "label", "adapt"])
@pytest.mark.pipeline
def test_every_encoding_command_has_the_prompt_flags(command):
    from hf_dr.cli import build_parser

    required = {"encode": ["--data", "d", "--model", "m", "--output", "o"],
                "evaluate": ["--data", "d", "--model", "m"],
                "label": ["--data", "d", "--output", "o"],
                "adapt": ["--data", "d", "--model", "m", "--method", "dodress", "--output", "o"]}[command]
    args = build_parser().parse_args([command, *required, "--query-prompt", "query: ", "--document-prompt", ""])
    assert (args.query_prompt, args.document_prompt) == ("query: ", "")
    args = build_parser().parse_args([command, *required])
    assert (args.query_prompt, args.document_prompt) == (None, None)


def test_pooling_that_excludes_the_prompt_is_not_silently_changed(tiny_bert_dir, tmp_path):
    """``include_prompt: false`` (prompt tokens left out of the mean): hf-dr pools over them, and says so."""
    d = _st_folder(tiny_bert_dir, tmp_path / "m")
    cfg_file = d / "1_Pooling" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["include_prompt"] = False
    cfg_file.write_text(json.dumps(cfg))
    with pytest.warns(UserWarning, match="include_prompt"):
        DenseEncoder.from_pretrained(d)


@pytest.mark.pipeline
def test_adapt_trains_and_saves_with_the_prompts(e5_dir, tmp_path, capsys, monkeypatch):
    from hf_dr.data import collators

    from .test_adapt import FAST, _split_sample

    seen = set()
    real = collators.RetrievalCollator.__call__

    def spy(self, rows):
        seen.add((self.query_prefix, self.doc_prefix))
        return real(self, rows)

    monkeypatch.setattr(collators.RetrievalCollator, "__call__", spy)
    data = _split_sample(tmp_path / "data")
    out = tmp_path / "out"
    assert main(["adapt", "--data", str(data), "--model", str(e5_dir), "--method", "dodress", "--output", str(out),
                 *FAST, "--query-prompt", "q: "]) == 0, capsys.readouterr().err
    assert seen == {("q: ", "passage: ")}  # the flag replaces the folder's query prompt; its document prompt stays
    model = DenseEncoder.from_pretrained(out / "model")
    assert (model.query_prefix, model.doc_prefix) == ("q: ", "passage: ")
    # Sentence Transformers loads OUT/model with those prompts and encodes as hf-dr does
    from .test_st_out import assert_st_matches

    st = assert_st_matches(out / "model", model)
    assert (st.prompts["query"], st.prompts["document"]) == ("q: ", "passage: ")


def test_every_encoder_of_the_suite_has_the_names(tiny_bert_dir):
    """A sparse encoder (SPLADE on an MLM checkpoint): the same names, CSR vectors, dot scores."""
    from hf_dr.models import load_encoder

    enc = load_encoder(tiny_bert_dir, kind="sparse")
    q, d = enc.encode_query(QUERIES, device="cpu"), enc.encode_document(DOCS, device="cpu")
    assert (q != enc.encode_queries(QUERIES, device="cpu")).nnz == 0
    sim = enc.similarity(q, d)
    assert isinstance(sim, torch.Tensor) and sim.shape == (2, 3)
    np.testing.assert_allclose(sim.numpy(), (q @ d.T).toarray(), rtol=1e-6)
    prompted = enc.encode_query(QUERIES, prompt="query: ", device="cpu")
    assert (prompted != q).nnz > 0  # a prompt changes a sparse encoding too
    with pytest.raises(ValueError, match="Prompt name 'query2' not found"):
        enc.encode_query(QUERIES, prompt_name="query2")


def test_another_model_with_other_prompts_is_another_model(e5_dir, tiny_bert_dir, tmp_path):
    from hf_dr.embeddings import encode_to_folder

    emb = encode_to_folder(DenseEncoder.from_pretrained(e5_dir), (["a", "b"], DOCS[:2]), tmp_path / "emb",
                           show_progress_bar=False)
    with pytest.raises(ValueError, match="encoded by another model"):
        emb.check(DenseEncoder.from_pretrained(tiny_bert_dir, pooling="cls"))
