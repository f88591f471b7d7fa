"""DoDress (papers/002, 004): SimANS (Eq. 1), negative samplers, the cached labelling pipeline,
rerankers (monoT5 Eq. 3, cross-encoder, fusion), RankNet (Eq. 4) through RetrievalTrainer, the
conversational variant (rewriter input, CANARD / CAsT readers, CDR triplets, frozen passage
tower). Tiny models built from configs; a 200-document slice of the real SciFact."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from datasets import load_from_disk

from tests.conftest import DATA, need

from hf_dr.labeling import simans_probabilities
from hf_dr.labeling.negatives import sample_negatives
from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels
from hf_dr.losses import ranknet_loss

SCIFACT = DATA / "scifact"


# ---------------------------------------------------------------- SimANS (Eq. 1) and samplers
def test_simans_matches_eq1_on_hand_made_scores():
    neg, pos = np.array([0.2, 0.9, 1.5, 3.0]), 1.0
    for a, b in [(0.5, 0.0), (2.0, 0.3)]:
        w = np.array([math.exp(-a * (s - pos - b) ** 2) for s in neg])
        np.testing.assert_allclose(simans_probabilities(neg, pos, a=a, b=b), w / w.sum(), rtol=1e-12)
    # torch in, torch out (same dtype), same values
    t = simans_probabilities(torch.tensor(neg, dtype=torch.float32), pos)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    np.testing.assert_allclose(t.numpy(), simans_probabilities(neg, pos), rtol=1e-6)
    # the peak is at s = s+ + b
    p = simans_probabilities(np.linspace(-3, 3, 61), 0.0, a=0.5, b=1.0)
    assert np.linspace(-3, 3, 61)[p.argmax()] == pytest.approx(1.0)


def test_simans_never_underflows_with_huge_score_gaps():
    neg, pos = np.array([1e3, 2e3, 5e3]), 0.0
    naive = np.exp(-0.5 * (neg - pos) ** 2)
    assert naive.sum() == 0.0  # what a naive implementation divides by
    p = simans_probabilities(neg, pos)
    assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0)
    assert p.argmax() == 0 and p[0] == pytest.approx(1.0)
    # and the sampler still returns m distinct negatives from such a list
    ranked = {f"d{i}": float(1e3 * (i + 1)) for i in range(20)}
    negs = sample_negatives("simans", 5, positives=[], rng=np.random.default_rng(0), ranked=ranked, pos_score=0.0)
    assert len(negs) == len(set(negs)) == 5
    with pytest.raises(ValueError, match="non-empty"):
        simans_probabilities(np.array([]), 0.0)


def test_simans_sampling_follows_eq1():
    ranked = {"near": 1.0, "mid": 2.0, "far": 4.0}
    rng = np.random.default_rng(0)
    counts = {d: 0 for d in ranked}
    for _ in range(4000):
        counts[sample_negatives("simans", 1, positives=[], rng=rng, ranked=ranked, pos_score=1.0)[0]] += 1
    p = simans_probabilities(np.array(list(ranked.values())), 1.0)
    for (_d, c), pi in zip(counts.items(), p):
        assert c / 4000 == pytest.approx(pi, abs=0.03)


@pytest.mark.parametrize("method", ["random", "bm25", "simans"])
def test_samplers_never_return_a_pseudo_positive_and_are_seeded(method):
    ids = [f"d{i}" for i in range(30)]
    ranked = {d: float(30 - i) for i, d in enumerate(ids)}
    positives = ["d0", "d1", "d5"]
    kw = dict(positives=positives, all_doc_ids=ids, ranked=ranked, pos_score=29.0)
    for seed in range(30):
        negs = sample_negatives(method, 10, rng=np.random.default_rng(seed), **kw)
        assert len(negs) == len(set(negs)) == 10 and not set(negs) & set(positives)
    a = sample_negatives(method, 10, rng=np.random.default_rng(7), **kw)
    assert a == sample_negatives(method, 10, rng=np.random.default_rng(7), **kw)


def test_sampler_bad_input():
    with pytest.raises(ValueError, match="unknown negative sampler 'hard'"):
        sample_negatives("hard", 3, positives=[], rng=np.random.default_rng(0), all_doc_ids=["a"])
    # fewer candidates than m: all of them (documented), never a positive
    negs = sample_negatives("bm25", 10, positives=["a"], rng=np.random.default_rng(0), ranked={"a": 3, "b": 2, "c": 1})
    assert sorted(negs) == ["b", "c"]
    with pytest.raises(ValueError, match="unknown negative sampler"):
        PseudoLabelConfig(negatives="hard").validate()


# ---------------------------------------------------------------- RankNet (Eq. 4)
def test_ranknet_equals_its_formula():
    pos, neg = torch.tensor([2.0, -1.0, 0.3, 50.0]), torch.tensor([1.0, 0.5, 0.3, -60.0])
    want = torch.stack([-torch.log(torch.sigmoid(p - n)) for p, n in zip(pos.double(), neg.double())]).mean()
    assert ranknet_loss(pos, neg).item() == pytest.approx(want.item(), rel=1e-6)
    assert torch.isfinite(ranknet_loss(torch.tensor([-500.0]), torch.tensor([500.0])))  # no overflow


def test_ranknet_objective_scores_pairs_by_inner_product(tiny_encoder):
    from hf_dr.data import RetrievalCollator
    from hf_dr.objectives import RankNetObjective, get_objective

    assert isinstance(get_objective("ranknet"), RankNetObjective)
    tiny_encoder.eval()
    rows = [{"query": "protein folding", "pos": "proteins fold in cells", "neg": "the cat sat"},
            {"query": "dense retrieval", "pos": "retrieval with dense vectors", "neg": "a mat"}]
    batch = RetrievalCollator(tiny_encoder.tokenizer, score_column=None)(rows)
    loss, logs = RankNetObjective(scale=2.0)(tiny_encoder, batch)
    with torch.no_grad():
        q = tiny_encoder.encode_queries([r["query"] for r in rows], convert_to="torch")
        p = tiny_encoder.encode_corpus([r["pos"] for r in rows], convert_to="torch")
        n = tiny_encoder.encode_corpus([r["neg"] for r in rows], convert_to="torch")
    sp, sn = 2.0 * (q * p).sum(-1), 2.0 * (q * n).sum(-1)
    assert loss.item() == pytest.approx((-torch.log(torch.sigmoid(sp - sn))).mean().item(), rel=1e-4)
    assert 0.0 <= logs["pair_accuracy"].item() <= 1.0


# ---------------------------------------------------------------- fixtures
@pytest.fixture
def tiny_encoder(tiny_bert_dir):
    from hf_dr.models.dense import DenseEncoder

    torch.manual_seed(0)
    return DenseEncoder.from_pretrained(tiny_bert_dir, pooling="mean", normalize=False, max_length=48)


@pytest.fixture(scope="module")
def scifact200():
    from hf_dr.data import load_beir

    data = load_beir(need(SCIFACT), split="train")
    data.corpus = data.corpus.select(range(200))
    return data


def _label(data, out, enc, cache=None, **cfg):
    cfg = {"max_queries": 25, "dev_queries": 5, "k": 2, "m": 3, **cfg}
    return build_pseudo_labels(data, out, PseudoLabelConfig(**cfg), dense_encoder=enc, dense_name="tiny",
                               cache_dir=cache, show_progress_bar=False)


# ---------------------------------------------------------------- the pipeline
@pytest.mark.parametrize("negatives", ["simans", "bm25", "random"])
@pytest.mark.pipeline
@pytest.mark.shared
def test_end_to_end_on_a_scifact_slice(tmp_path, tiny_encoder, scifact200, negatives):
    res = _label(scifact200, tmp_path / "out", tiny_encoder, negatives=negatives)
    s = res.stats
    # k x m triplets for every training query (every query of the slice has >= k candidates)
    assert s["queries_without_bm25_hits"] == 0 and s["queries_with_fewer_than_k_candidates"] == 0
    assert s["dev_queries"] == 5 and s["train_queries"] == 20
    assert len(res.train) == s["triplets"] == 20 * 2 * 3
    per_q = {}
    for r in res.train:
        per_q.setdefault(r["query_id"], []).append(r)
    assert all(len(v) == 6 and len({x["pos_id"] for x in v}) == 2 for v in per_q.values())
    # negatives never include one of the query's pseudo-positives; positives outrank negatives
    # the stage cache lives beside the output folder (which is written whole), not inside it
    assert not (tmp_path / "out" / "cache").exists()
    rerank = next((tmp_path / ".out.cache").glob("rerank-*.json"))
    import json

    reranked = json.loads(rerank.read_text())["value"]
    for q, rows in per_q.items():
        top = sorted(reranked[q].items(), key=lambda x: (-x[1], x[0]))[:2]
        assert {x["pos_id"] for x in rows} == {d for d, _ in top}
        assert not {x["neg_id"] for x in rows} & {d for d, _ in top}
        if negatives == "bm25":  # negatives from the reranked list itself
            assert all(x["pos_score"] >= x["neg_score"] for x in rows)
    # dev: 10 graded pseudo-positives (2, 2, 1 x 8) + 10 hard negatives per query (from the
    # teacher's ranks below 20 of the BM25 candidates, where papers/004 has 90 random ones), disjoint from train
    dev_q = set(res.dev["query_id"])
    assert len(res.dev) == 5 * 20 and not dev_q & set(per_q)
    q0 = sorted(dev_q)[0]
    labels = [r["label"] for r in res.dev if r["query_id"] == q0]
    assert labels.count(2) == 2 and labels.count(1) == 8 and labels.count(0) == 10
    ranked = [d for d, _ in sorted(reranked[q0].items(), key=lambda x: (-x[1], x[0]))]
    assert {r["doc_id"] for r in res.dev if r["query_id"] == q0 and r["label"] == 0} <= set(ranked[20:])
    # on disk: load_from_disk(out) gives the triplets, parquet files, a card naming the counts
    out = tmp_path / "out"
    ds = load_from_disk(str(out))
    assert {"query_id", "query", "pos_id", "pos", "neg_id", "neg", "pos_score", "neg_score"} <= set(ds.column_names)
    assert load_from_disk(str(out / "dev")).num_rows == 100
    assert (out / "data" / "train-00000-of-00001.parquet").is_file()
    card = (out / "README.md").read_text()
    assert "task_categories" in card and f"| {len(ds)} | 20 |" in card and negatives in card


@pytest.mark.pipeline
@pytest.mark.shared
def test_stages_are_cached_and_invalidated(tmp_path, tiny_encoder, scifact200, monkeypatch):
    calls = {"corpus": 0}
    real = tiny_encoder.encode_corpus

    def counting(*a, **k):
        calls["corpus"] += 1
        return real(*a, **k)

    monkeypatch.setattr(tiny_encoder, "encode_corpus", counting)
    cache = tmp_path / "cache"
    first = _label(scifact200, tmp_path / "a", tiny_encoder, cache)
    assert set(first.stats["cache"]["computed"]) == {"bm25", "doc_embeddings", "query_embeddings", "rerank",
                                                      "dense_run", "triplets"}
    n = calls["corpus"]
    # the key adapt looks the corpus encoding up by (LabelKeys.dense_of) is the one the label stage wrote
    from hf_dr.fingerprints import model_fingerprint
    from hf_dr.labeling.context import DOC_EMBEDDINGS_STAGE, LabelKeys
    from hf_dr.stage_cache import StageCache

    key = LabelKeys.dense_of(scifact200.corpus_fingerprint(), model_fingerprint(tiny_encoder), None, "fp32")
    assert StageCache(cache).path(DOC_EMBEDDINGS_STAGE, key, ".npy").is_file()
    again = _label(scifact200, tmp_path / "a2", tiny_encoder, cache)
    assert again.stats["cache"]["computed"] == [] and calls["corpus"] == n
    assert again.train["neg_id"] == first.train["neg_id"]
    # a sampler parameter: only the triplets are redone
    m4 = _label(scifact200, tmp_path / "b", tiny_encoder, cache, m=4)
    assert m4.stats["cache"]["computed"] == ["triplets"] and len(m4.train) == 20 * 2 * 4
    # another sampler reuses BM25 and the reranking
    bm = _label(scifact200, tmp_path / "c", tiny_encoder, cache, negatives="bm25")
    assert bm.stats["cache"]["computed"] == ["triplets"]
    # the candidate depth: BM25, reranking and everything after them are redone, not the encoding
    deep = _label(scifact200, tmp_path / "d", tiny_encoder, cache, bm25_top=50)
    assert set(deep.stats["cache"]["computed"]) == {"bm25", "rerank", "triplets"} and calls["corpus"] == n


@pytest.mark.pipeline
@pytest.mark.shared
def test_bad_queries_and_bad_k(tmp_path, tiny_encoder, scifact200):
    # queries without any BM25 hit are left out and counted; a query with fewer than k
    # candidates keeps those it has
    queries = {"nohit": "zzqxv wwqyk", "ok": scifact200.doc_texts()[0][:80]}
    res = build_pseudo_labels(scifact200, tmp_path / "o", PseudoLabelConfig(k=5, m=2, bm25_top=10, dev_queries=0),
                              dense_encoder=tiny_encoder, dense_name="tiny", queries=queries, show_progress_bar=False)
    assert res.stats["queries_without_bm25_hits"] == 1 and "nohit" not in set(res.train["query_id"])
    assert "without any BM25 hit (left out): 1" in (tmp_path / "o" / "README.md").read_text()
    # every query without a hit: a clear error, not an empty dataset
    with pytest.raises(ValueError, match="none of the 2 queries has a BM25 hit"):
        build_pseudo_labels(scifact200, tmp_path / "x", PseudoLabelConfig(), dense_encoder=tiny_encoder,
                            queries={"a": "zzqxv", "b": "qqwwzz"}, show_progress_bar=False)
    with pytest.raises(ValueError, match="k must be smaller"):
        PseudoLabelConfig(k=100, bm25_top=100).validate()
    with pytest.raises(ValueError, match="test split"):
        PseudoLabelConfig(split="test").validate()
    with pytest.raises(ValueError, match="dense retriever"):
        build_pseudo_labels(scifact200, tmp_path / "y", PseudoLabelConfig(negatives="simans"), reranker="fusion")


@pytest.mark.pipeline
@pytest.mark.shared
def test_k_larger_than_a_query_candidate_list_is_counted(tmp_path, tiny_encoder, scifact200):
    # a made-up word present in one document only: BM25 returns one candidate
    words = {}
    for t in scifact200.doc_texts():
        for w in set(t.lower().split()):
            words[w] = words.get(w, 0) + 1
    from hf_dr.retrieval import BM25Index

    bm25 = BM25Index.from_beir(scifact200)
    unique = next(w for w, c in sorted(words.items()) if c == 1 and w.isalpha() and len(w) > 6
                  and 0 < len(bm25.search({"u": w}, top_k=100)["u"]) < 3)
    n_hits = len(bm25.search({"u": unique}, top_k=100)["u"])
    res = build_pseudo_labels(scifact200, tmp_path / "o", PseudoLabelConfig(k=3, m=2, negatives="random", dev_queries=0,
                                                                          keep_degenerate=True),
                              dense_encoder=tiny_encoder, dense_name="tiny", queries={"u": unique},
                              show_progress_bar=False)
    # fewer than k + m candidates: degenerate (reported; kept here, dropped by default)
    assert res.stats["degenerate"]["ids"] == {"u": ["few_candidates"]}
    assert res.stats["queries_with_fewer_than_k_candidates"] == 1
    assert len(set(res.train["pos_id"])) == n_hits and len(res.train) == n_hits * 2


# ---------------------------------------------------------------- rerankers
@pytest.mark.shared
def test_fusion_reranker_is_the_spines_zscore_fusion(tiny_encoder, scifact200):
    from hf_dr.labeling.rerankers import FusionReranker
    from hf_dr.retrieval import BM25Index, fuse

    bm25 = BM25Index.from_beir(scifact200)
    emb = tiny_encoder.encode_corpus(scifact200.doc_texts())
    # a list of reference_size documents (or more) is normalised over itself: the plain fusion of the list
    rr = FusionReranker(bm25, tiny_encoder, doc_embeddings=emb, encoder_name="tiny", reference_size=20)
    q = {"q": "protein folding in cells"}
    cand = bm25.search(q, top_k=20)
    got = rr.rerank(cand, q, show_progress_bar=False)["q"]
    qv = tiny_encoder.encode_queries([q["q"]])[0]
    idx = {d: i for i, d in enumerate(scifact200.doc_ids())}

    def dense_of(ids):
        return {"q": {d: float(emb[idx[d]] @ qv) for d in ids}}

    dense = dense_of(cand["q"])
    want = fuse([cand, dense], method="zscore")["q"]
    assert got.keys() == want.keys() and all(got[d] == pytest.approx(want[d], abs=1e-5) for d in got)
    # a shorter list (the default reference size, 100): normalised over the list topped up with a corpus sample
    wide = FusionReranker(bm25, tiny_encoder, doc_embeddings=emb, encoder_name="tiny")
    ref = wide.reference_ids("q", cand["q"])
    assert len(ref) == 100 and ref[:20] == list(cand["q"])
    lex = {"q": dict(zip(ref, bm25.score(q["q"], [idx[d] for d in ref]).tolist()))}
    want_wide = fuse([cand, dense], method="zscore", references=[lex, dense_of(ref)])["q"]
    got_wide = wide.rerank(cand, q, show_progress_bar=False)["q"]
    assert all(got_wide[d] == pytest.approx(want_wide[d], abs=1e-5) for d in got_wide)
    # a document outside the list is scored on the candidates' scale
    other = next(d for d in scifact200.doc_ids() if d not in cand["q"])
    s = rr.score_documents("q", q["q"], [other, next(iter(cand["q"]))], cand["q"])
    assert s[1] == pytest.approx(got[next(iter(cand["q"]))], abs=1e-5) and np.isfinite(s[0])


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    """A tiny T5 and a SentencePiece-style Unigram tokenizer built here (no T5 weights offline): ``</s>`` is the
    EOS / separator, ``▁true`` / ``▁false`` are tokens (as in monoT5's vocabulary)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    texts = ["Query: what is protein folding Document: proteins fold Relevant: true false",
             "what group disbanded when did they disband zappa and the mothers of invention ?",
             "frank disbandment is throat cancer treatable what are lung cancer symptoms"]
    words = sorted({w for t in texts for w in t.lower().split()} | {w for t in texts for w in t.split()})
    chars = sorted({c for t in texts for c in t if c != " "})
    # a SentencePiece-style Unigram vocabulary (whole words as "▁word", characters as fallback)
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)] + \
        [("▁" + w, -1.0) for w in words] + [(c, -5.0) for c in chars]
    sp = Tokenizer(models.Unigram(vocab, unk_id=2))
    sp.pre_tokenizer = pre_tokenizers.Metaspace()
    sp.decoder = decoders.Metaspace()
    sp.add_special_tokens(["<pad>", "</s>", "<unk>"])
    sp.post_processor = TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=sp, pad_token="<pad>", eos_token="</s>",
                                  unk_token="<unk>")
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(tok), d_model=32, d_ff=64, d_kv=16, num_layers=1, num_heads=2,
                   decoder_start_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id,
                   eos_token_id=tok.eos_token_id)
    d = tmp_path_factory.mktemp("tiny_t5")
    T5ForConditionalGeneration(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_monot5_is_eq3(tiny_t5):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_dr.labeling.rerankers import MonoT5Reranker
    from hf_dr.labeling.teacher import get_reranker

    rr = get_reranker(f"monot5:{tiny_t5}", device="cpu")
    assert isinstance(rr, MonoT5Reranker)
    docs = ["proteins fold", "the cat sat", "sharks live"]
    got = rr.score("what is protein folding", docs)
    tok, model = AutoTokenizer.from_pretrained(tiny_t5), AutoModelForSeq2SeqLM.from_pretrained(tiny_t5).eval()
    t, f = tok.convert_tokens_to_ids("▁true"), tok.convert_tokens_to_ids("▁false")
    for d, g in zip(docs, got):
        enc = tok(f"Query: what is protein folding Document: {d} Relevant:", return_tensors="pt")
        with torch.no_grad():
            z = model(**enc, decoder_input_ids=torch.tensor([[model.config.decoder_start_token_id]])).logits[0, 0]
        assert g == pytest.approx(math.exp(z[t]) / (math.exp(z[t]) + math.exp(z[f])), rel=1e-4)


def test_cross_encoder_gives_raw_logits(tmp_path, tiny_tokenizer):
    from transformers import BertConfig, BertForSequenceClassification

    from hf_dr.labeling.teacher import get_reranker

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, num_labels=1)
    m = BertForSequenceClassification(cfg)
    with torch.no_grad():
        m.classifier.bias.fill_(5.0)  # logits far outside (0, 1): a sigmoid would squash them
    m.save_pretrained(tmp_path / "ce")
    tiny_tokenizer.save_pretrained(tmp_path / "ce")
    rr = get_reranker(f"cross-encoder:{tmp_path / 'ce'}", device="cpu")
    s = rr.score("protein folding", ["proteins fold", "a cat"])
    enc = tiny_tokenizer(["protein folding"] * 2, ["proteins fold", "a cat"], padding=True, return_tensors="pt")
    with torch.no_grad():
        want = m.eval()(**enc).logits[:, 0].numpy()
    np.testing.assert_allclose(s, want, rtol=1e-4)
    with pytest.raises(ValueError, match="unknown reranker"):
        get_reranker("bm25")


# ---------------------------------------------------------------- training
@pytest.mark.pipeline
@pytest.mark.shared
def test_ranknet_training_keeps_the_best_dev_checkpoint(tmp_path, tiny_encoder, scifact200):
    from hf_dr.labeling.finetune import train_ranknet

    res = _label(scifact200, tmp_path / "l", tiny_encoder)
    trainer = train_ranknet(tiny_encoder, res.train, tmp_path / "s", dev=res.dev, max_length=32,
                            learning_rate=1e-3, max_steps=4, eval_steps=2, logging_steps=2, disable_tqdm=True)
    evals = [h["eval_ndcg@10"] for h in trainer.state.log_history if "eval_ndcg@10" in h]
    assert len(evals) == 2 and trainer.state.best_metric == pytest.approx(max(evals))
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{2 * (1 + evals.index(max(evals)))}")
    assert any("ranknet_loss" in h for h in trainer.state.log_history)


# ---------------------------------------------------------------- conversational variant
def test_rewriter_input_format():
    from hf_dr.labeling.rewriting import rewriter_input

    assert rewriter_input("cur", ["h1", "h2", "h3"]) == "</s>cur</s>h3</s>h2</s>h1"
    assert rewriter_input("cur", ["h1", "h2", "h3"], max_history=2) == "</s>cur</s>h3</s>h2"
    assert rewriter_input(" cur ", []) == "</s>cur"


@pytest.mark.shared
def test_canard_reader_and_tiny_t5_rewriter(tmp_path, tiny_t5):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_dr.labeling.rewriting import RewriterConfig, bleu, load_canard, rewrite, tokenize_rewriting, train_rewriter

    ds = load_canard(need(DATA / "canard" / "dev.json"))
    assert len(ds) == 3430
    r = ds[1]  # "When did they disband?" after "What group disbanded?"
    assert r["history"] == ["Frank Zappa", "Disbandment", "What group disbanded?"]
    assert r["rewrite"] == "When did Zappa and the Mothers of Invention disband?"
    assert load_canard(DATA / "canard" / "dev.json", include_answers=True)[1]["history"][-1] == \
        "Zappa and the Mothers of Invention"
    tok = AutoTokenizer.from_pretrained(tiny_t5)
    small = ds.select(range(8))
    enc = tokenize_rewriting(small, tok)
    eos = tok.eos_token_id
    # "</s>" separators are T5's EOS token: 1 before the question, 1 per history turn, 1 final EOS
    assert enc[1]["input_ids"].count(eos) == 1 + 3 + 1 and enc[1]["input_ids"][0] == eos
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_t5)
    cfg = RewriterConfig(max_steps=2, eval_steps=2, batch_size=4, num_beams=1, max_target_length=8)
    trainer = train_rewriter(model, tok, small, tmp_path / "rw", dev=small.select(range(4)), config=cfg,
                             disable_tqdm=True)
    assert any("eval_bleu" in h for h in trainer.state.log_history)
    out = rewrite(trainer.model, tok, small["question"][:3], small["history"][:3], config=cfg)
    assert len(out) == 3 and all(isinstance(o, str) for o in out)
    assert bleu(["when did zappa and the mothers disband ?"], ["when did zappa and the mothers disband ?"]) == \
        pytest.approx(100.0)
    assert bleu(["a b c d e"], ["v w x y z"]) == 0.0


@pytest.mark.shared
def test_cast_sessions_and_cdr_concatenation(tmp_path, tiny_encoder):
    from datasets import Dataset

    from hf_dr.labeling.conversational import build_cdr_triplets, cdr_query, load_cast_sessions

    assert cdr_query(["hisQ1", "hisQ2"], "curQ") == "hisQ1|hisQ2|curQ"
    assert cdr_query([], "curQ") == "curQ"
    root = need(DATA / "trec-cast" / "2019" / "evaluation")
    s = load_cast_sessions(root / "evaluation_topics_v1.0.json", root / "evaluation_topics_annotated_resolved_v1.0.tsv")
    assert s["31_2"]["history"] == ["What is throat cancer?"] and s["31_2"]["current"] == "Is it treatable?"
    assert s["31_2"]["manual"] == "Is throat cancer treatable?"
    s20 = load_cast_sessions(need(DATA / "trec-cast" / "2020" / "2020_manual_evaluation_topics_v1.0.json"))
    assert s20["81_2"]["manual"] == "Now my garage door opener stopped working. Why?"
    trip = Dataset.from_list([{"query_id": "31_3", "query": "Tell me about lung cancer.", "pos": "p", "neg": "n"}])
    cdr = build_cdr_triplets(trip, s)
    assert cdr[0]["query"] == "What is throat cancer?|Is it treatable?|Tell me about lung cancer."
    assert cdr[0]["rewritten_query"] == "Tell me about lung cancer."
    with pytest.raises(ValueError, match="no conversational session"):
        build_cdr_triplets(Dataset.from_list([{"query_id": "999_1", "query": "x"}]), s)


def test_query_tower_training_leaves_the_passage_encoder_frozen(tmp_path, tiny_encoder):
    from datasets import Dataset

    from hf_dr.labeling.finetune import train_ranknet
    from hf_dr.models import QueryTowerEncoder

    model = QueryTowerEncoder.from_encoder(tiny_encoder)
    before_p = {k: v.clone() for k, v in model.passage_encoder.state_dict().items()}
    before_q = {k: v.clone() for k, v in model.query_encoder.state_dict().items()}
    rows = [{"query": f"hist {i}|what about protein {i}", "pos": f"protein {i} folds", "neg": "a cat sat"}
            for i in range(8)]
    train_ranknet(model, Dataset.from_list(rows), tmp_path / "cdr", max_length=16, learning_rate=1e-2,
                  max_steps=2, batch_size=4, freeze_documents=True, disable_tqdm=True)
    assert all(torch.equal(v, model.passage_encoder.state_dict()[k]) for k, v in before_p.items())
    assert any(not torch.equal(v, model.query_encoder.state_dict()[k]) for k, v in before_q.items())
    assert (tmp_path / "cdr" / "checkpoint-2" / "passage_encoder").is_dir()


# ---------------------------------------------------------------- CLI
@pytest.mark.pipeline
@pytest.mark.shared
def test_cli_label(tmp_path, tiny_bert_dir, scifact200, capsys):
    from hf_dr.cli import main
    from hf_dr.data import save_beir

    save_beir(scifact200, tmp_path / "sf")
    out = tmp_path / "labels"
    argv = ["label", "--data", str(tmp_path / "sf"), "--split", "train", "--dense-model", str(tiny_bert_dir),
            "--reranker", "fusion", "--negatives", "simans", "--k", "1", "--m", "10", "--output", str(out),
            "--max-queries", "12"]
    assert main(argv) == 0
    ds = load_from_disk(str(out))
    assert {"query_id", "query", "pos_id", "pos", "neg_id", "neg"} <= set(ds.column_names)
    # 10 training queries, less those with fewer than k + m = 11 BM25 candidates in this 200-document slice
    stats = __import__("json").loads((out / "stats.json").read_text())
    thin = stats["degenerate"]["ids"]
    assert thin and all(v == ["few_candidates"] for v in thin.values()) and not set(thin) & set(ds["query_id"])
    assert stats["train_queries"] + stats["dev_queries"] == 12 - len(thin)
    assert len(ds) == 10 * stats["train_queries"] and (out / "README.md").is_file()
    assert main(argv[:-4] + ["--negatives", "hard", "--output", str(out)]) == 2
    assert "unknown negative sampler 'hard'" in capsys.readouterr().err
    assert main(argv[:4] + ["test"] + argv[5:]) == 2
    assert "test split" in capsys.readouterr().err
    # the corpus encoded once by hf-dr encode: the same labels without re-encoding it
    emb = tmp_path / "emb"
    assert main(["encode", "--data", str(tmp_path / "sf"), "--model", str(tiny_bert_dir), "--output", str(emb),
                 "--no-progress"]) == 0
    out2 = tmp_path / "labels2"
    assert main(argv[:-4] + ["--max-queries", "12", "--embeddings", str(emb), "--output", str(out2)]) == 0
    assert load_from_disk(str(out2)).to_list() == ds.to_list()
    # embeddings of another corpus are refused
    save_beir(scifact200, tmp_path / "sf2")
    (tmp_path / "sf2" / "corpus.jsonl").write_text("".join(
        (tmp_path / "sf" / "corpus.jsonl").read_text().splitlines(keepends=True)[:-1]))
    assert main(["label", "--data", str(tmp_path / "sf2")] + argv[3:-4]
                + ["--max-queries", "12", "--embeddings", str(emb), "--output", str(tmp_path / "l3")]) == 2
    assert "these are embeddings of another corpus" in capsys.readouterr().err


@pytest.mark.pipeline
@pytest.mark.shared
def test_ranknet_training_works_for_a_ddr_model(tmp_path, tiny_bert_dir, tiny_encoder, scifact200):
    """Labels from the pipeline feed the other encoders of the suite through the same trainer."""
    from hf_dr.labeling.finetune import default_scale, train_ranknet
    from hf_dr.models.ddr import DDRModel

    res = _label(scifact200, tmp_path / "l", tiny_encoder, negatives="bm25")
    torch.manual_seed(0)
    ddr = DDRModel.from_backbone(tiny_bert_dir, lora_rank=4, max_doc_length=32, max_query_length=16)
    assert default_scale(ddr) == 1.0  # dot product
    trainer = train_ranknet(ddr, res.train, tmp_path / "s", dev=res.dev, max_length=32, learning_rate=1e-3,
                            max_steps=2, eval_steps=1, logging_steps=1, disable_tqdm=True)
    assert trainer.state.best_model_checkpoint is not None
    assert len([h for h in trainer.state.log_history if "eval_ndcg@10" in h]) == 2


@pytest.mark.shared
def test_example_builds_labels_and_trains(tmp_path, tiny_bert_dir, scifact200, monkeypatch, capsys):
    import runpy
    import sys

    from hf_dr.data import save_beir

    save_beir(scifact200, tmp_path / "sf")
    example = __import__("pathlib").Path(__file__).resolve().parent.parent / "examples" / "build_pseudo_labels.py"
    monkeypatch.setattr(sys, "argv", [str(example), "--data", str(tmp_path / "sf"), "--output", str(tmp_path / "o"),
                                      "--dense_model", str(tiny_bert_dir), "--negatives", "random", "--max_queries", "10",
                                      "--dev_queries", "2", "--train", "--max_length", "32", "--max_steps", "2",
                                      "--eval_steps", "1", "--eval_split", "train"])
    runpy.run_path(str(example), run_name="__main__")
    out = capsys.readouterr().out
    # 8 training queries, one of which has fewer than k + m = 11 BM25 candidates in this 200-document
    # slice: dropped as degenerate
    assert '"triplets": 70' in out and '"degenerate_queries": 1' in out and '"ndcg@10"' in out
    assert (tmp_path / "o" / "student" / "best").is_dir() and (tmp_path / "o" / "README.md").is_file()


@pytest.mark.pipeline
@pytest.mark.shared
def test_simans_score_scale_concentrates_negatives_near_the_positive(tmp_path, tiny_encoder, scifact200):
    """With cosine-range scores, a=0.5 is almost uniform over the top-K; scaling the scores
    (the student's training scale) gives Eq. 1 its intended peak around the positive."""
    import json

    tiny_encoder.normalize = True  # a cosine retriever
    cache2 = tmp_path / "c2"
    flat = _label(scifact200, tmp_path / "a", tiny_encoder, cache2, m=5)
    sharp = _label(scifact200, tmp_path / "b", tiny_encoder, cache2, m=5, simans_score_scale=200.0)
    run = json.loads(next(cache2.glob("dense_run-*.json")).read_text())["value"]

    def mean_gap(res):
        gaps = [abs(run[r["query_id"]][r["neg_id"]] - run[r["query_id"]].get(r["pos_id"], 0.0)) for r in res.train
                if r["pos_id"] in run[r["query_id"]]]
        return float(np.mean(gaps))

    assert mean_gap(sharp) < 0.7 * mean_gap(flat)
