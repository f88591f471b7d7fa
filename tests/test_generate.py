"""Queries from a corpus and nothing else: the generators (deterministic per document),
doc2query with a tiny T5 built from a config, ``hf-dr generate-queries`` (resumable after
``kill -9``: the same queries.jsonl as one uninterrupted run), and ``hf-dr adapt`` on a folder
holding only corpus.jsonl (the source document among the teacher's candidates; the card names
the query source)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hf_dr.cli import main
from hf_dr.generation import generate_to_folder, get_generator
from tests.conftest import REPO, SAMPLE


def _docs(n=12):
    from hf_dr.data.beir import load_corpus

    ds, _ = load_corpus(SAMPLE)
    rows = ds[:n]
    return rows["_id"], rows["title"], rows["text"]


@pytest.mark.parametrize("spec", ["cloze", "span", "terms"])
def test_weight_free_generators_are_deterministic_per_document(spec):
    ids, titles, texts = _docs()
    gen = get_generator(spec)
    if gen.needs_fit:
        gen.fit(ids, [t + " " + x for t, x in zip(titles, texts)])
    whole = gen.generate(ids, titles, texts, 3, seed=0)
    assert whole == gen.generate(ids, titles, texts, 3, seed=0)
    # a document's queries do not depend on the batch it falls in
    alone = [gen.generate([d], [t], [x], 3, seed=0)[0] for d, t, x in zip(ids, titles, texts)]
    assert alone == whole
    assert whole != gen.generate(ids, titles, texts, 3, seed=1)
    for qs, t, x in zip(whole, titles, texts):
        assert len(qs) == 3 and all(q.strip() for q in qs)
        if spec != "terms":  # made of the document's own words
            words = set((t + " " + x).split())
            assert all(set(q.split()) <= words for q in qs)


def test_terms_are_weighted_by_the_one_bm25():
    """The terms generator draws by BM25Index's weights: a document's weight for a term is bm25s'
    score of that term for the document, and every query word is a term the document holds."""
    ids, titles, texts = _docs()
    gen = get_generator("terms")
    gen.fit(ids, [t + " " + x for t, x in zip(titles, texts)])
    W, vocab = gen.index.document_weights()
    assert W.shape == (len(ids), len(vocab))
    for row in (0, 7):
        lo, hi = W.indptr[row], W.indptr[row + 1]
        assert hi > lo
        for j, w in zip(W.indices[lo:hi], W.data[lo:hi]):
            assert gen.index.retriever.get_scores([vocab[j]])[row] == pytest.approx(float(w), rel=1e-6)
    queries = gen.generate(ids[:1], titles[:1], texts[:1], 5, seed=0)[0]
    held = {vocab[j] for j in W.indices[W.indptr[0]:W.indptr[1]]}
    for q in queries:
        assert set(gen.index.words([q])[1][0]) <= held


def test_unknown_generator_is_refused(tmp_path, capsys):
    rc = main(["generate-queries", "--data", str(SAMPLE), "--output", str(tmp_path / "q"), "--generator", "bogus"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "unknown generator 'bogus'" in err and "Traceback" not in err


def test_malformed_corpus_names_file_and_line(tmp_path, capsys):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "corpus.jsonl").write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "text": \n')
    rc = main(["generate-queries", "--data", str(d), "--output", str(tmp_path / "q")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "corpus.jsonl:2:" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def tiny_t5_dir(tmp_path_factory, tiny_tokenizer):
    """A tiny random T5 (1 layer, d_model 32) with the tests' WordPiece tokenizer (vocabulary sizes match)."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    tok = tiny_tokenizer
    cfg = T5Config(vocab_size=len(tok), d_model=32, d_ff=64, d_kv=16, num_layers=1, num_decoder_layers=1,
                   num_heads=2, pad_token_id=tok.pad_token_id, decoder_start_token_id=tok.pad_token_id,
                   eos_token_id=tok.sep_token_id)
    d = tmp_path_factory.mktemp("tiny_t5")
    T5ForConditionalGeneration(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture
def small_corpus(tmp_path):
    d = tmp_path / "small"
    d.mkdir()
    lines = (SAMPLE / "corpus.jsonl").read_text().splitlines()[:10]
    (d / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_doc2query_tiny_t5_samples_n_queries_per_document(tiny_t5_dir, small_corpus, tmp_path):
    gen = get_generator(f"doc2query:{tiny_t5_dir}", device="cpu")
    model, _ = gen.load()
    calls = []
    real = model.generate

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    model.generate = spy
    gen.max_new_tokens = 8
    res = generate_to_folder(small_corpus, tmp_path / "q", gen, queries_per_doc=3, batch_size=4,
                             show_progress_bar=False)
    assert calls and all(c["do_sample"] and c["top_p"] == 0.95 and c["num_return_sequences"] == 3 for c in calls)
    assert len(calls) == 3  # 10 documents in batches of 4
    per_doc = {}
    for q, d in res.sources.items():
        per_doc.setdefault(d, []).append(q)
        assert q.startswith(f"{d}-q")
    assert len(per_doc) == 10 and sum(map(len, per_doc.values())) >= 27  # 3 each (a repeat or empty one dropped)
    assert res.manifest["generator"]["generator"] == "doc2query" and res.manifest["queries_per_doc"] == 3
    # the same seed samples the same queries; another seed others
    again = generate_to_folder(small_corpus, tmp_path / "q2", gen, queries_per_doc=3, batch_size=4,
                               show_progress_bar=False)
    assert again.queries == res.queries
    other = generate_to_folder(small_corpus, tmp_path / "q3", gen, queries_per_doc=3, batch_size=4, seed=1,
                               show_progress_bar=False)
    assert other.queries != res.queries


def test_count_rules(tmp_path):
    # GPL's rule above the corpus size: ceil(total / |corpus|) per document
    res = generate_to_folder(SAMPLE, tmp_path / "a", "span", num_queries=1200, show_progress_bar=False)
    assert res.manifest["queries_per_doc"] == 3 and res.manifest["documents"] == 500
    # below it: one query for each of that many documents, drawn by the seed whatever the shards
    b = generate_to_folder(SAMPLE, tmp_path / "b", "span", num_queries=40, show_progress_bar=False)
    c = generate_to_folder(SAMPLE, tmp_path / "c", "span", num_queries=40, shard_size=7, show_progress_bar=False)
    assert len(b.queries) == 40 and b.queries == c.queries and len(set(b.sources.values())) == 40


def test_split_over_processes_equals_one_process(tmp_path):
    one = generate_to_folder(SAMPLE, tmp_path / "one", "cloze", queries_per_doc=2, shard_size=64,
                             show_progress_bar=False)
    folder = tmp_path / "two"
    assert generate_to_folder(SAMPLE, folder, "cloze", queries_per_doc=2, shard_size=64, rank=1, world_size=2,
                              show_progress_bar=False) is None  # its shards: 1, 3, 5, 7
    with pytest.raises(ValueError, match="shard"):  # rank 0 alone cannot finish
        generate_to_folder(SAMPLE, tmp_path / "alone", "cloze", queries_per_doc=2, shard_size=64, rank=0,
                           world_size=2, show_progress_bar=False)
    two = generate_to_folder(SAMPLE, folder, "cloze", queries_per_doc=2, shard_size=64, rank=0, world_size=2,
                             show_progress_bar=False)
    assert (folder / "queries.jsonl").read_bytes() == (tmp_path / "one" / "queries.jsonl").read_bytes()
    assert two.queries == one.queries and two.sources == one.sources
    # begun with other settings: refused, not mixed
    with pytest.raises(ValueError, match="other settings"):
        generate_to_folder(SAMPLE, tmp_path / "alone", "cloze", queries_per_doc=3, shard_size=64,
                           show_progress_bar=False)


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "hf_dr.cli", "generate-queries", "--data", str(SAMPLE), "--no-progress", *args]


@pytest.mark.cli
def test_killed_generation_resumes_to_the_same_file(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    args = ["--generator", "terms", "--queries-per-doc", "200", "--shard-size", "5"]
    whole = tmp_path / "whole"
    subprocess.run(_cli("--output", str(whole), *args), check=True, env=env, cwd=tmp_path, timeout=300)
    out = tmp_path / "killed"
    partial = tmp_path / ".killed.partial"
    proc = subprocess.Popen(_cli("--output", str(out), *args), env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and len(list(partial.glob("shards/*.json"))) < 3:
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (out / "queries.jsonl").exists() and partial.is_dir()
    done = len(list(partial.glob("shards/*.json")))
    assert 0 < done < 100
    subprocess.run(_cli("--output", str(out), *args), check=True, env=env, cwd=tmp_path, timeout=300)
    assert (out / "queries.jsonl").read_bytes() == (whole / "queries.jsonl").read_bytes()
    assert not partial.exists()
    m = json.loads((out / "generation.json").read_text())
    assert m["queries"] == len((out / "queries.jsonl").read_text().splitlines())


@pytest.mark.pipeline
def test_source_document_is_among_the_teachers_candidates(tmp_path):
    from hf_dr.data.beir import load_corpus_data
    from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels
    from hf_dr.labeling.rerankers import Reranker

    data = load_corpus_data(SAMPLE)
    gen = generate_to_folder(SAMPLE, tmp_path / "q", "terms", num_queries=30, show_progress_bar=False)
    seen = {}

    class Recording(Reranker):
        name = "recording"

        def score_documents(self, query_id, query, doc_ids, candidates=None):
            seen.setdefault(query_id, list(doc_ids))  # the first call: the reranking of the candidates
            return -np.arange(len(doc_ids), dtype=np.float64)

    cfg = PseudoLabelConfig(bm25_top=2, k=1, m=1, negatives="random", dev_queries=0, dev_positives=1,
                            keep_degenerate=True)
    labels = build_pseudo_labels(data, tmp_path / "labels", cfg, reranker=Recording(), queries=gen.queries,
                                 sources=gen.sources, cache_dir=tmp_path / "cache", show_progress_bar=False)
    assert set(seen) == set(gen.queries)
    assert all(gen.sources[q] in seen[q] for q in seen)
    # with two BM25 candidates, terms queries miss their own document now and then: it was added
    assert labels.stats["sources_added"] == sum(len(c) == 3 for c in seen.values()) > 0


FAST = ["--max-steps", "4", "--eval-steps", "2", "--max-length", "32", "--m", "2", "--batch-size", "4",
        "--learning-rate", "1e-2", "--negatives", "bm25", "--dev-queries", "5"]


@pytest.mark.pipeline
def test_adapt_on_a_corpus_alone(tmp_path, tiny_bert_dir, capsys, monkeypatch):
    data = tmp_path / "corpus-only"
    data.mkdir()
    shutil.copy(SAMPLE / "corpus.jsonl", data / "corpus.jsonl")
    out = tmp_path / "out"
    argv = ["adapt", "--data", str(data), "--model", str(tiny_bert_dir), "--method", "pseudo-margin-mse",
            "--output", str(out), *FAST]
    monkeypatch.setattr("sys.argv", ["hf-dr", *argv])
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "generate: computed (41 queries by span" in text  # 4 steps x 4 + 5 x 5 dev queries
    assert (out / "model").is_dir()
    m = json.loads((out / "metrics.json").read_text())
    assert m["queries"]["source"] == "generated" and m["queries"]["generator"] == "span"
    assert m["queries"]["queries"] == 41 and m["labelled_evaluation"] is False and m["after"] is None
    card = (out / "README.md").read_text()
    assert "generated from the corpus by `span`: 41 queries" in card
    # a re-run finds the generated queries (and everything after them) cached
    assert main([*argv, "--overwrite"]) == 0
    assert "generate: cached" in capsys.readouterr().out
    # asked for queries the folder does not need: refused
    shutil.copy(SAMPLE / "queries.jsonl", data / "queries.jsonl")
    assert main(["adapt", "--data", str(data), "--model", str(tiny_bert_dir), "--method", "pseudo-margin-mse",
                 "--output", str(tmp_path / "o2"), "--generator", "cloze"]) == 2
    assert "--queries generate ignores it" in capsys.readouterr().err


@pytest.mark.pipeline
def test_queries_generate_ignores_the_folders_queries(tmp_path, tiny_bert_dir, capsys):
    """--queries generate on a folder with queries and test qrels: trained on generated queries
    only (the folder's never read), evaluated on the test split."""
    import hf_dr.data.beir as beir

    out = tmp_path / "out"
    real = beir.load_training_queries

    def refuse(*a, **k):
        raise AssertionError("the folder's queries were read for training")

    beir.load_training_queries = refuse
    try:
        rc = main(["adapt", "--data", str(SAMPLE), "--model", str(tiny_bert_dir), "--method", "pseudo-margin-mse",
                   "--output", str(out), "--queries", "generate", "--generator", "cloze", *FAST])
    finally:
        beir.load_training_queries = real
    assert rc == 0, capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    assert m["queries"]["generator"] == "cloze" and m["labelled_evaluation"] is True and m["test_queries"] == 50


@pytest.mark.pipeline
def test_queries_fill_adds_generated_queries_to_the_folders_own(tmp_path, tiny_bert_dir, capsys):
    """--queries fill: the folder's training queries plus generated ones up to the generated-query
    budget (4 steps x 4 + 5 x 5 dev queries = 41); the dev set is drawn from the folder's own queries
    only, every generated query trains; metrics.json and the card say both counts."""
    from hf_dr.data.beir import load_training_queries
    from tests.test_adapt import _split_sample

    data = _split_sample(tmp_path / "data")  # 30 training queries (qrels/train.tsv), 20 test ones
    _, own, _ = load_training_queries(data)
    out = tmp_path / "out"
    rc = main(["adapt", "--data", str(data), "--model", str(tiny_bert_dir), "--method", "pseudo-margin-mse",
               "--output", str(out), "--queries", "fill", *FAST])
    assert rc == 0, capsys.readouterr().err
    assert 0 < 41 - len(own) < 41
    m = json.loads((out / "metrics.json").read_text())
    q = m["queries"]
    assert q["source"] == "data+generated" and q["data_queries"] == len(own)
    assert q["generated"] == 41 - len(own) and q["queries"] == 41 and q["generator"] == "span"
    assert m["config"]["queries"] == "fill"  # recorded: a row made with it is not a defaults row
    from datasets import load_from_disk

    work = tmp_path / ".out.work" / "labels"
    dev_ids = set(load_from_disk(str(work / "dev"))["query_id"])
    train_ids = set(load_from_disk(str(work))["query_id"])
    assert dev_ids and dev_ids <= set(own)  # the dev set: the folder's own queries only
    generated = {i for i in train_ids if i not in own}
    assert generated and all("-q" in i for i in generated)
    card = (out / "README.md").read_text()
    assert f"the folder's {len(own)} and {41 - len(own)} generated from the corpus by `span`" in card
    # a folder whose own queries reach the budget (1 step x 4 + 5 x 1 dev = 9 < 30): none generated, said
    capsys.readouterr()
    small = [*FAST, "--max-steps", "1", "--eval-steps", "1", "--dev-queries", "1"]  # the last of a flag wins
    assert main(["adapt", "--data", str(data), "--model", str(tiny_bert_dir), "--method", "pseudo-margin-mse",
                 "--output", str(tmp_path / "o3"), "--queries", "fill", *small]) == 0
    assert "generate: none (--queries fill: the folder's 30 queries reach the budget of 9)" in capsys.readouterr().out
    assert json.loads((tmp_path / "o3" / "metrics.json").read_text())["queries"] == {"source": "data", "queries": 30}
    # --labels names the training queries: --queries fill with it is refused, one line
    assert main(["adapt", "--data", str(data), "--model", str(tiny_bert_dir), "--method", "pseudo-margin-mse",
                 "--output", str(tmp_path / "o2"), "--queries", "fill", "--labels", str(work)]) == 2
    assert "--labels reuses labelled queries" in capsys.readouterr().err


@pytest.mark.pipeline
def test_corpus_only_refusals(tmp_path, tiny_bert_dir, capsys):
    """Refused before any work, one line each: test qrels with no queries to evaluate them; an unknown
    generator; --labels with generated queries."""
    data = tmp_path / "d"
    (data / "qrels").mkdir(parents=True)
    shutil.copy(SAMPLE / "corpus.jsonl", data / "corpus.jsonl")
    shutil.copy(SAMPLE / "qrels" / "test.tsv", data / "qrels" / "test.tsv")
    base = ["adapt", "--data", str(data), "--model", str(tiny_bert_dir), "--method", "pseudo-margin-mse",
            "--output", str(tmp_path / "o")]
    for extra, message in (([], "no queries.jsonl"), (["--generator", "bogus"], "unknown generator 'bogus'"),
                           (["--labels", str(tmp_path)], "--labels reuses labelled queries")):
        if extra:  # the corpus alone from here on
            (data / "qrels" / "test.tsv").unlink(missing_ok=True)
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists() and not (tmp_path / ".o.work").exists()


def test_generated_queries_train_at_the_measured_corpus_only_rate(tmp_path):
    """pseudo-margin-mse on generated queries defaults to DoDress' learning rate 2e-6 (at 2e-5 every
    corpus-only run lost); a folder's own queries keep the method's default; a flag wins. And the
    corpus-only default is the configuration of a measured row (benchmarks/results/corpus_only.json)."""
    from hf_dr.adaptation.pipeline import AdaptConfig, resolve

    def with_method_defaults(cfg):
        return resolve(cfg, check=False)

    def resolved_config(cfg):
        return dict(resolve(cfg, check=False).record)
    from hf_dr.generation import DEFAULT_GENERATOR

    corpus_only = tmp_path / "c"
    corpus_only.mkdir()
    shutil.copy(SAMPLE / "corpus.jsonl", corpus_only / "corpus.jsonl")
    cfg = lambda data, **kw: with_method_defaults(  # noqa: E731
        AdaptConfig(data=str(data), model="m", method="pseudo-margin-mse", output="o", **kw))
    assert cfg(corpus_only).learning_rate == 2e-6
    assert cfg(SAMPLE).learning_rate == 2e-5  # its own queries
    assert cfg(SAMPLE, queries="generate").learning_rate == 2e-6
    assert cfg(corpus_only, learning_rate=1e-5).learning_rate == 1e-5
    # methods without a measured corpus-only row keep their own rate
    assert with_method_defaults(AdaptConfig(data=str(corpus_only), model="m", method="dodress",
                                            output="o")).learning_rate == 2e-5
    want = resolved_config(AdaptConfig(data=str(corpus_only), model="m", method="pseudo-margin-mse", output="o"))
    rows = json.loads((Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "corpus_only.json")
                      .read_text())
    measured = [r for r in rows if r.get("table") == "corpus_only" and r.get("config") == want
                and (r.get("queries") or {}).get("generator") == DEFAULT_GENERATOR]
    assert measured, f"no corpus-only row was measured with the defaults {want}"
