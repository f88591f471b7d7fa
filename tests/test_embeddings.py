"""Embeddings folders: streaming, sharded, resumable encoding (hf-dr encode) and their use by retrievers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from hf_dr.cli import main
from hf_dr.data import load_beir
from hf_dr.embeddings import Embeddings, EmbeddingsError, encode_to_folder
from hf_dr.retrieval import EncoderRetriever

from .conftest import SAMPLE


@pytest.fixture(scope="module")
def data():
    return load_beir(SAMPLE, split="test")


@pytest.fixture(scope="module")
def dense(tiny_bert_dir):
    from hf_dr.models.dense import DenseEncoder

    return DenseEncoder.from_pretrained(tiny_bert_dir, normalize=True, max_length=64)


@pytest.fixture(scope="module")
def sparse(tiny_bert_dir):
    from hf_dr.models.splade import SPLADECAI

    return SPLADECAI.from_backbone(str(tiny_bert_dir), max_doc_length=64)


def _same(a, b):
    if sp.issparse(a):
        assert a.shape == b.shape and (a != b).nnz == 0
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_round_trip_equals_in_memory_encoding(kind, data, dense, sparse, tmp_path):
    model = dense if kind == "dense" else sparse
    emb = encode_to_folder(model, SAMPLE, tmp_path / "emb", shard_size=128, show_progress_bar=False)
    assert emb.doc_ids == data.doc_ids() and len(emb) == 500 and emb.is_sparse == (kind == "sparse")
    m = json.loads((tmp_path / "emb" / "manifest.json").read_text())
    assert m["n_shards"] == 4 and [s["rows"] for s in m["shards"]] == [128, 128, 128, 116]
    assert m["max_length"] == 64 and m["model_class"] == type(model).__name__
    # the same chunks in memory (encode_corpus with the same chunk size) give the same vectors
    ref = model.encode_corpus(data.doc_texts(), chunk_size=128, show_progress_bar=False)
    _same(Embeddings(tmp_path / "emb").matrix(), ref)
    if kind == "dense":  # memory-mappable float32 shards
        first = np.load(tmp_path / "emb" / "shards" / "00000.npy", mmap_mode="r")
        assert first.dtype == np.float32 and first.shape == (128, m["dim"])


def test_streaming_memory_is_one_chunk(dense):
    """The encode loop reads its input lazily: a generator is consumed one chunk at a time."""
    pulled = []

    def texts():
        for i in range(50):
            pulled.append(i)
            yield f"text number {i}"

    blocks = dense._iter_encode_texts(texts(), is_query=False, chunk_size=20, show_progress_bar=False)
    first = next(blocks)
    assert first.shape[0] == 20 and len(pulled) <= 21  # one chunk read (+1 to see the next exists)
    assert sum(b.shape[0] for b in blocks) == 30


class Crash(RuntimeError):
    pass


def test_resume_after_a_crash_is_identical(dense, tmp_path):
    whole = encode_to_folder(dense, SAMPLE, tmp_path / "whole", shard_size=100, show_progress_bar=False).matrix()
    calls = {"n": 0}
    real = type(dense).forward

    def crashing(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 10:  # in the middle of the third shard (4 batches of 32 a shard)
            raise Crash("killed")
        return real(self, *a, **k)

    type(dense).forward = crashing
    try:
        with pytest.raises(Crash):
            encode_to_folder(dense, SAMPLE, tmp_path / "emb", shard_size=100, show_progress_bar=False)
    finally:
        type(dense).forward = real
    done = sorted(p.name for p in (tmp_path / "emb" / "shards").glob("*.json"))
    assert done == ["00000.json", "00001.json"] and not (tmp_path / "emb" / "manifest.json").exists()
    with pytest.raises(EmbeddingsError, match="not finished"):
        Embeddings(tmp_path / "emb")
    # a half-written file of the killed shard is ignored (only renamed files count)
    (tmp_path / "emb" / "shards" / ".00002.npy.123.tmp").write_bytes(b"partial")
    seen = []
    type(dense).forward = lambda self, input_ids, attention_mask, **k: (seen.append(len(input_ids)),
                                                                         real(self, input_ids, attention_mask, **k))[1]
    try:
        resumed = encode_to_folder(dense, SAMPLE, tmp_path / "emb", shard_size=100, show_progress_bar=False)
    finally:
        type(dense).forward = real
    assert sum(seen) == 300  # only the three unfinished shards were encoded
    _same(resumed.matrix(), whole)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_sharded_over_processes_equals_one_process(kind, dense, sparse, tmp_path):
    model = dense if kind == "dense" else sparse
    one = encode_to_folder(model, SAMPLE, tmp_path / "one", shard_size=64, show_progress_bar=False).matrix()
    # two processes: rank 1 encodes shards 1, 3, 5, 7; rank 0 the others and writes the manifest
    assert encode_to_folder(model, SAMPLE, tmp_path / "two", shard_size=64, show_progress_bar=False,
                            rank=1, world_size=2) is None
    assert not (tmp_path / "two" / "manifest.json").exists()
    two = encode_to_folder(model, SAMPLE, tmp_path / "two", shard_size=64, show_progress_bar=False,
                           rank=0, world_size=2).matrix()
    _same(two, one)


def test_folder_begun_with_other_settings_is_refused(dense, sparse, tmp_path):
    encode_to_folder(dense, SAMPLE, tmp_path / "emb", shard_size=128, show_progress_bar=False)
    with pytest.raises(EmbeddingsError, match="max_length: 64 -> 32"):
        encode_to_folder(dense, SAMPLE, tmp_path / "emb", shard_size=128, max_length=32, show_progress_bar=False)
    with pytest.raises(EmbeddingsError, match="model_fingerprint"):
        encode_to_folder(sparse, SAMPLE, tmp_path / "emb", shard_size=128, show_progress_bar=False)


def test_retrievers_refuse_a_wrong_folder(data, dense, sparse, tmp_path):
    emb = encode_to_folder(dense, SAMPLE, tmp_path / "emb", shard_size=256, show_progress_bar=False)
    r = EncoderRetriever.from_embeddings(dense, emb, doc_ids=data.doc_ids())
    direct = EncoderRetriever.from_data(dense, data, show_progress_bar=False)
    q = dict(list(data.split_queries().items())[:5])
    got, want = r.search(q, 10), direct.search(q, 10)
    assert [list(got[x]) for x in q] == [list(want[x]) for x in q]
    # another model (a changed weight counts)
    with pytest.raises(EmbeddingsError, match="another model"):
        EncoderRetriever.from_embeddings(sparse, emb)
    import torch

    with torch.no_grad():
        p = next(dense.parameters())
        p[0, 0] += 1.0
        try:
            with pytest.raises(EmbeddingsError, match="another model"):
                EncoderRetriever.from_embeddings(dense, emb)
        finally:
            p[0, 0] -= 1.0
    # another corpus: fewer documents, or other ids
    with pytest.raises(EmbeddingsError, match="holds 500 documents, the corpus has 499"):
        emb.check(doc_ids=data.doc_ids()[:499])
    with pytest.raises(EmbeddingsError, match="another corpus"):
        emb.check(doc_ids=list(reversed(data.doc_ids())))
    with pytest.raises(EmbeddingsError, match="max length 64, this run asks for 32"):
        emb.check(dense, max_length=32)


def test_bad_folders_give_clear_errors(dense, tmp_path):
    with pytest.raises(EmbeddingsError, match="not an embeddings folder"):
        Embeddings(tmp_path)
    encode_to_folder(dense, SAMPLE, tmp_path / "emb", shard_size=256, show_progress_bar=False)
    mf = tmp_path / "emb" / "manifest.json"
    good = mf.read_text()
    mf.write_text(good[:40])
    with pytest.raises(EmbeddingsError, match="manifest.json: not valid JSON"):
        Embeddings(tmp_path / "emb")
    m = json.loads(good)
    m["n_docs"] = 501
    mf.write_text(json.dumps(m))
    with pytest.raises(EmbeddingsError, match="501 documents announced, 500 rows"):
        Embeddings(tmp_path / "emb")
    m = json.loads(good)
    del m["model_fingerprint"]
    mf.write_text(json.dumps(m))
    with pytest.raises(EmbeddingsError, match="missing field"):
        Embeddings(tmp_path / "emb")
    mf.write_text(good)
    (tmp_path / "emb" / "shards" / "00001.npy").unlink()
    with pytest.raises(EmbeddingsError, match="00001.npy is missing"):
        Embeddings(tmp_path / "emb")


def test_cli_encode_then_evaluate_with_embeddings(tiny_bert_dir, tmp_path, capsys):
    args = ["--data", str(SAMPLE), "--model", str(tiny_bert_dir)]
    assert main(["encode", *args, "--output", str(tmp_path / "emb"), "--shard-size", "200", "--no-progress"]) == 0
    assert "500 documents, dense float32" in capsys.readouterr().out
    assert main(["evaluate", *args, "--retriever", "dense", "--output", str(tmp_path / "a")]) == 0
    assert main(["evaluate", *args, "--retriever", "dense", "--embeddings", str(tmp_path / "emb"),
                 "--output", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "metrics.json").read_text())
    b = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert a["metrics"] == b["metrics"] and b["embeddings"] == str(tmp_path / "emb")
    capsys.readouterr()
    # the wrong model: exit status 2 and a message, no traceback
    assert main(["evaluate", "--data", str(SAMPLE), "--retriever", "sparse", "--model", str(tiny_bert_dir),
                 "--embeddings", str(tmp_path / "emb")]) == 2
    err = capsys.readouterr().err
    assert "encoded by another model" in err and "Traceback" not in err


def test_cli_encode_writes_the_folder_whole_and_resumes_after_a_kill(tiny_bert_dir, tmp_path, capsys, monkeypatch):
    """hf-dr encode works in a hidden .NAME.partial folder beside its output and renames it into place
    when every shard is done: the output is complete or absent, and a re-run resumes the partial work."""
    import shutil

    import hf_dr.embeddings as E

    out = tmp_path / "emb"
    argv = ["encode", "--data", str(SAMPLE), "--model", str(tiny_bert_dir), "--output", str(out),
            "--shard-size", "100", "--no-progress"]
    real = E.write_atomic
    written = []

    def killed_at_shard_2(path, write):
        if path.name == "00002.npy":
            raise Crash("killed")
        written.append(path.name)
        return real(path, write)

    monkeypatch.setattr(E, "write_atomic", killed_at_shard_2)
    with pytest.raises(Crash):
        main(argv)
    partial = tmp_path / ".emb.partial"
    assert not out.exists() and sorted(p.name for p in (partial / "shards").glob("*.json")) == ["00000.json",
                                                                                                  "00001.json"]
    # the same command again: only the unfinished shards are encoded, then the folder appears whole
    written.clear()
    monkeypatch.setattr(E, "write_atomic", lambda path, write: (written.append(path.name), real(path, write))[1])
    assert main(argv) == 0
    assert sorted(n for n in written if n.endswith(".npy")) == ["00002.npy", "00003.npy", "00004.npy"]
    assert not partial.exists() and len(Embeddings(out)) == 500
    assert {oct(p.stat().st_mode & 0o777) for p in out.rglob("*") if p.is_file()} == {"0o644"}
    capsys.readouterr()
    # a complete folder is not replaced without --overwrite; with it, once the new one is complete
    assert main(argv) == 2 and "not empty" in capsys.readouterr().err
    assert main([*argv, "--overwrite", "--max-length", "16"]) == 0
    assert Embeddings(out).manifest["max_length"] == 16
    # a folder of the user's, and an --overwrite that would delete the --data folder: refused before any work
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert main([*argv[:-5], "--output", str(tmp_path / "mine"), "--no-progress"]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    data = tmp_path / "work" / "scifact-mini"
    shutil.copytree(SAMPLE, data)
    assert main(["encode", "--data", str(data), "--model", str(tiny_bert_dir), "--output", str(tmp_path / "work"),
                 "--overwrite", "--no-progress"]) == 2
    assert "contains the input" in capsys.readouterr().err and (data / "corpus.jsonl").is_file()


def test_cli_encode_partial_work_of_other_settings(tiny_bert_dir, tmp_path, capsys, monkeypatch):
    import hf_dr.embeddings as E

    argv = ["encode", "--data", str(SAMPLE), "--model", str(tiny_bert_dir), "--output", str(tmp_path / "emb"),
            "--shard-size", "250", "--no-progress"]
    real = E.write_atomic

    def killed(path, write):
        if path.name == "00001.npy":
            raise Crash("killed")
        return real(path, write)

    monkeypatch.setattr(E, "write_atomic", killed)
    with pytest.raises(Crash):
        main(argv)
    monkeypatch.setattr(E, "write_atomic", real)
    # resumed with other settings: refused (the partial work is kept); --overwrite starts again
    assert main([*argv, "--max-length", "16"]) == 2
    assert "begun with other settings" in capsys.readouterr().err
    assert (tmp_path / ".emb.partial" / "shards" / "00000.json").is_file()
    assert main([*argv, "--max-length", "16", "--overwrite"]) == 0
    assert Embeddings(tmp_path / "emb").manifest["max_length"] == 16 and not (tmp_path / ".emb.partial").exists()


def test_a_model_has_one_fingerprint_whatever_path_it_was_read_from(tiny_bert_dir, tmp_path, monkeypatch):
    """A SPLADE model records its backbone's config, path included: the fingerprint ignores where a
    model was read from at every depth, so embeddings and indexes made with ``../m`` open with
    ``/abs/m`` (they were refused as "encoded by another model")."""
    import os

    from hf_dr.fingerprints import model_fingerprint
    from hf_dr.models import load_encoder

    monkeypatch.chdir(tmp_path)
    rel = os.path.relpath(tiny_bert_dir, tmp_path)
    a, b = load_encoder(rel, kind="sparse"), load_encoder(str(tiny_bert_dir), kind="sparse")
    assert a.config.to_dict()["backbone_config"]["_name_or_path"] != b.config.to_dict()["backbone_config"]["_name_or_path"]
    assert model_fingerprint(a) == model_fingerprint(b)
    # what it hashes still tells models apart
    b.config.backbone_config.hidden_dropout_prob = 0.3
    assert model_fingerprint(a) != model_fingerprint(b)
