"""The fusion teacher's scale on queries with few BM25 candidates, and degenerate labels.

Fast tests build a synthetic corpus (no model: the dense scores come from fixed random
embeddings); the slow one reproduces the issue on SciFact with one-word queries and MiniLM.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from datasets import load_from_disk

from tests.conftest import DATA, MINILM, SAMPLE, need

from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels, degenerate_summary
from hf_dr.labeling.rerankers import FusionReranker, Reranker
from hf_dr.retrieval import BM25Index

WORDS = ["cell", "protein", "gene", "tumor", "immune", "virus", "brain", "heart", "blood", "liver", "kidney",
         "insulin", "muscle", "bone", "skin", "lung", "growth", "signal", "receptor", "enzyme"]


def _synthetic(n_docs=300, dim=16, seed=0):
    """Documents of 30-60 common words; two of them (of nearly equal length) also hold the rare
    word "zebrafish" once, so its BM25 list has two almost equal scores."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(30, 60)))) for _ in range(n_docs)]
    texts[7] = "zebrafish " + " ".join(rng.choice(WORDS, size=40))
    texts[11] = "zebrafish " + " ".join(rng.choice(WORDS, size=41))
    ids = [f"d{i}" for i in range(n_docs)]
    emb = rng.normal(size=(n_docs, dim))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return ids, texts, emb.astype(np.float32), rng


def _fusion(ids, texts, emb, rng, queries, **kw):
    bm25 = BM25Index(ids, texts)
    rr = FusionReranker(bm25, doc_embeddings=emb, encoder_name="fixed", **kw)
    for q in queries:  # fixed query embeddings: no model involved
        v = rng.normal(size=emb.shape[1])
        rr.query_embeddings[q] = (v / np.linalg.norm(v)).astype(np.float32)
    return bm25, rr


def _old_formula(rr, q, query, doc_ids, cand):
    """The teacher without a reference set: z-scores over the candidate list alone (mean and std of the list)."""
    c_lex, c_dense = rr._raw(q, query, cand)
    lex, dense = rr._raw(q, query, doc_ids)

    def z(v, ref):
        sd = ref.std()
        return (v - ref.mean()) / sd if sd > 0 else np.zeros_like(v)

    return rr.weights[0] * z(lex, c_lex) + rr.weights[1] * z(dense, c_dense)


def test_a_two_document_list_keeps_every_document_on_one_scale():
    ids, texts, emb, rng = _synthetic()
    queries = {"rare": "zebrafish", "common": "protein receptor signal"}
    bm25, rr = _fusion(ids, texts, emb, rng, queries)
    cand = bm25.search(queries, top_k=100)
    assert len(cand["rare"]) == 2 and len(cand["common"]) == 100
    everything = {q: rr.score_documents(q, queries[q], ids, cand[q]) for q in queries}
    # with that old formula the documents outside the two-document list were hundreds of std devs away
    old = _old_formula(rr, "rare", queries["rare"], ids, list(cand["rare"]))
    assert np.abs(old).max() > 100
    # now: all on the scale of a full list, within the bound of the reference set
    bound = 2 * np.sqrt(99)  # sum|w| * sqrt(n - 1): the largest |score| of a reference set member
    for q, s in everything.items():
        assert np.all(np.isfinite(s)) and np.abs(s).max() <= bound, (q, np.abs(s).max())
    assert rr.margin_bound == pytest.approx(2 * bound)
    # the listed documents outrank the rest and keep their order within the list
    rare = dict(zip(ids, everything["rare"]))
    listed = rr.rerank({"rare": cand["rare"]}, queries, show_progress_bar=False)["rare"]
    assert min(listed.values()) > np.median(everything["rare"])
    # a listed document and an outside one are scored the same way: one call or two agree
    outside = [d for d in ids if d not in cand["rare"]][:5]
    for d, v in zip(outside, rr.score_documents("rare", "zebrafish", outside, cand["rare"])):
        assert v == pytest.approx(rare[d], abs=1e-12)
    for d, v in listed.items():
        assert v == pytest.approx(rare[d], abs=1e-12)


def test_full_candidate_lists_score_exactly_as_before():
    """A list of at least reference_size documents is its own reference: the old formula, bit for bit."""
    ids, texts, emb, rng = _synthetic()
    queries = {"a": "protein receptor signal", "b": "immune virus blood"}
    bm25, rr = _fusion(ids, texts, emb, rng, queries)
    cand = bm25.search(queries, top_k=100)
    got = rr.rerank(cand, queries, show_progress_bar=False)
    for q in queries:
        c = list(cand[q])
        assert len(c) == 100
        assert list(got[q].values()) == _old_formula(rr, q, queries[q], c, c).tolist()
        outside = [d for d in ids if d not in cand[q]]
        assert rr.score_documents(q, queries[q], outside, cand[q]).tolist() == \
            _old_formula(rr, q, queries[q], outside, c).tolist()
    # a smaller reference size leaves a 2-document list alone: the old explosion, as a check of the test
    _, small = _fusion(ids, texts, emb, np.random.default_rng(1), {"rare": "zebrafish"}, reference_size=2)
    two = list(bm25.search({"rare": "zebrafish"}, top_k=100)["rare"])
    assert small.score_documents("rare", "zebrafish", ids, two).tolist() == \
        _old_formula(small, "rare", "zebrafish", ids, two).tolist()


def test_the_reference_sample_is_deterministic():
    ids, texts, emb, rng = _synthetic()
    _, a = _fusion(ids, texts, emb, np.random.default_rng(5), {"rare": "zebrafish"})
    _, b = _fusion(ids, texts, emb, np.random.default_rng(5), {"rare": "zebrafish"})
    cand = {"d7": 1.0, "d11": 1.0}
    ra, rb = a.reference_ids("rare", cand), b.reference_ids("rare", cand)
    assert ra == rb and len(ra) == 100 and len(set(ra)) == 100 and ra[:2] == ["d7", "d11"]
    assert a.reference_ids("other", cand) != ra  # per query
    assert np.array_equal(a.score_documents("rare", "zebrafish", ids, cand),
                          b.score_documents("rare", "zebrafish", ids, cand))
    # a corpus smaller than the reference size: the whole corpus
    _, c = _fusion(ids[:40], texts[:40], emb[:40], np.random.default_rng(5), {"rare": "zebrafish"})
    assert sorted(c.reference_ids("rare", cand)) == sorted(ids[:40])
    with pytest.raises(ValueError, match="reference_size"):
        FusionReranker(c.bm25, doc_embeddings=emb, reference_size=0)


# ---------------------------------------------------------------- degenerate queries in the pipeline
class CraftedTeacher(Reranker):
    """Scores by BM25 rank, except for the queries named after a defect."""

    name = "crafted"
    margin_bound = 50.0

    def __init__(self, bm25):
        self.bm25 = bm25
        self._index_of = {d: i for i, d in enumerate(bm25.doc_ids)}

    def score_documents(self, query_id, query, doc_ids, candidates=None):
        s = np.asarray(self.bm25.score(query, [self._index_of[d] for d in doc_ids]), dtype=np.float64)
        if query_id == "flat":
            return np.ones(len(doc_ids))
        if query_id == "nan":
            s[-1] = np.nan
        if query_id == "huge":
            s = s * 1e3
        return s


@pytest.fixture(scope="module")
def sample():
    from hf_dr.data import load_beir

    return load_beir(SAMPLE, split="test")


def _queries(data):
    texts = data.doc_texts()
    bm25 = BM25Index(data.doc_ids(), texts)
    counts: dict[str, int] = {}
    for t in texts:
        for w in set(t.lower().split()):
            counts[w] = counts.get(w, 0) + 1
    few = next(w for w, c in sorted(counts.items()) if c == 1 and w.isalpha() and len(w) > 6
               and 0 < len(bm25.search({"u": w}, top_k=100)["u"]) < 3)
    q = {f"ok{i}": texts[i][:80] for i in range(6)}
    q.update({"few": few, "nohit": "zzqxv wwqyk", "flat": texts[10][:80], "nan": texts[11][:80],
              "huge": texts[12][:80]})
    return q, bm25


@pytest.mark.pipeline
def test_degenerate_queries_are_reported_and_dropped_or_kept(tmp_path, sample):
    queries, bm25 = _queries(sample)
    cfg = dict(k=1, m=3, bm25_top=20, negatives="bm25", dev_queries=0)
    drop = build_pseudo_labels(sample, tmp_path / "drop", PseudoLabelConfig(**cfg), reranker=CraftedTeacher(bm25),
                               bm25=bm25, queries=queries, show_progress_bar=False)
    want = {"few": ["few_candidates"], "nohit": ["no_bm25_hit"], "flat": ["zero_variance"], "nan": ["non_finite"],
            "huge": ["margin_out_of_bound"]}
    d = drop.stats["degenerate"]
    assert d["ids"] == want and d["kept"] is False and drop.stats["degenerate_queries"] == 5
    assert d["by_reason"] == {"few_candidates": 1, "margin_out_of_bound": 1, "no_bm25_hit": 1, "non_finite": 1,
                              "zero_variance": 1}
    assert set(drop.train["query_id"]) == {f"ok{i}" for i in range(6)} and drop.stats["train_queries"] == 6
    assert np.isfinite(drop.train["pos_score"]).all() and np.isfinite(drop.train["neg_score"]).all()
    # stats.json and the card say it; the summary line names the count, the reasons and the flag
    on_disk = json.loads((tmp_path / "drop" / "stats.json").read_text())
    assert on_disk["degenerate"]["ids"] == want
    card = (tmp_path / "drop" / "README.md").read_text()
    assert "degenerate labels (dropped): 5" in card and "few_candidates" in card and "`huge`" in card
    line = degenerate_summary(drop.stats)
    assert line.startswith("dropped 5 of 11 queries with degenerate labels: ") and "--keep-degenerate" in line
    assert "keep_degenerate=True" in line  # the library's name too
    assert "\n" not in line
    # --keep-degenerate: the same report, every query with a candidate kept, the others' rows unchanged
    keep = build_pseudo_labels(sample, tmp_path / "keep", PseudoLabelConfig(**cfg, keep_degenerate=True),
                               reranker=CraftedTeacher(bm25), bm25=bm25, queries=queries, show_progress_bar=False)
    assert keep.stats["degenerate"]["ids"] == want and keep.stats["degenerate"]["kept"] is True
    assert set(keep.train["query_id"]) == set(queries) - {"nohit"}
    assert [r for r in keep.train.to_list() if r["query_id"].startswith("ok")] == drop.train.to_list()
    assert "degenerate labels (kept): 5" in (tmp_path / "keep" / "README.md").read_text()
    assert degenerate_summary(keep.stats).startswith("kept 4 of 11 queries with degenerate labels")
    # nothing degenerate: no line
    clean = build_pseudo_labels(sample, tmp_path / "clean", PseudoLabelConfig(**cfg), reranker=CraftedTeacher(bm25),
                                bm25=bm25, queries={q: t for q, t in queries.items() if q.startswith("ok")},
                                show_progress_bar=False)
    assert clean.stats["degenerate_queries"] == 0 and degenerate_summary(clean.stats) is None
    # only degenerate queries: a clear error naming the flag, not an empty dataset
    with pytest.raises(ValueError, match="--keep-degenerate"):
        build_pseudo_labels(sample, tmp_path / "none", PseudoLabelConfig(**cfg), reranker=CraftedTeacher(bm25),
                            bm25=bm25, queries={"few": queries["few"], "flat": queries["flat"]},
                            show_progress_bar=False)


@pytest.mark.pipeline
def test_degenerate_dev_queries_are_dropped_too(tmp_path, sample):
    queries, bm25 = _queries(sample)
    queries = {q: t for q, t in queries.items() if q != "nohit"}
    cfg = dict(k=1, m=3, bm25_top=20, negatives="bm25", dev_queries=2, dev_positives=2, dev_negatives=3)
    for seed in range(20):  # a seed whose dev split holds a query degenerate before sampling
        keep = build_pseudo_labels(sample, tmp_path / f"k{seed}", PseudoLabelConfig(**cfg, seed=seed,
                                                                                   keep_degenerate=True),
                                   reranker=CraftedTeacher(bm25), bm25=bm25, queries=queries,
                                   show_progress_bar=False)
        if {"few", "flat"} & set(keep.dev["query_id"]):
            break
    else:
        pytest.fail("no seed puts a degenerate query in the dev split")
    drop = build_pseudo_labels(sample, tmp_path / "d", PseudoLabelConfig(**cfg, seed=seed), reranker=CraftedTeacher(bm25),
                               bm25=bm25, queries=queries, show_progress_bar=False)
    assert not {"few", "flat", "nan"} & set(drop.dev["query_id"])
    # the other dev queries keep their rows
    assert [r for r in keep.dev.to_list() if r["query_id"] not in ("few", "flat", "nan")] == drop.dev.to_list()
    assert drop.stats["dev_queries"] == len(set(drop.dev["query_id"]))


@pytest.mark.pipeline
def test_the_label_cache_keys_hold_the_normalisation_and_the_rule(tmp_path, sample):
    queries, bm25 = _queries(sample)
    queries = {q: t for q, t in queries.items() if q.startswith("ok")}
    cfg = dict(k=1, m=3, bm25_top=20, negatives="bm25", dev_queries=0)
    ids = sample.doc_ids()
    emb = np.random.default_rng(0).normal(size=(len(ids), 8)).astype(np.float32)
    rr = FusionReranker(bm25, doc_embeddings=emb, encoder_name="fixed")
    for q in queries:
        rr.query_embeddings[q] = emb[0]
    cache = tmp_path / "cache"
    build_pseudo_labels(sample, tmp_path / "a", PseudoLabelConfig(**cfg), reranker=rr, bm25=bm25, queries=queries,
                        cache_dir=cache, show_progress_bar=False)
    rerank = json.loads(next(cache.glob("rerank-*.json")).read_text())["params"]
    assert rerank["reranker"]["normalisation"] == {"zscore_over": "bm25 list topped up with a corpus sample",
                                                   "reference_size": 100, "reference_seed": 0}
    meta = json.loads(next(cache.glob("triplets-*/meta.json")).read_text())["params"]
    assert meta["cfg"]["keep_degenerate"] is False and meta["degenerate_rule"] >= 1
    # keeping the degenerate queries redoes the triplets only; another reference size the reranking too
    again = build_pseudo_labels(sample, tmp_path / "b", PseudoLabelConfig(**cfg, keep_degenerate=True), reranker=rr,
                                bm25=bm25, queries=queries, cache_dir=cache, show_progress_bar=False)
    assert again.stats["cache"]["computed"] == ["triplets"]
    rr.reference_size = 50
    other = build_pseudo_labels(sample, tmp_path / "c", PseudoLabelConfig(**cfg), reranker=rr, bm25=bm25,
                                queries=queries, cache_dir=cache, show_progress_bar=False)
    assert other.stats["cache"]["computed"] == ["rerank", "triplets"]


@pytest.mark.pipeline
def test_cli_reports_the_summary_once_and_keeps_with_the_flag(tmp_path, sample, tiny_bert_dir, capsys, caplog):
    from hf_dr.cli import main

    queries, _ = _queries(sample)
    queries = {q: t for q, t in queries.items() if q.startswith("ok") or q in ("few", "nohit")}
    folder = tmp_path / "sf"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text((SAMPLE / "corpus.jsonl").read_text())
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    argv = ["label", "--data", str(folder), "--dense-model", str(tiny_bert_dir), "--k", "1", "--m", "3",
            "--bm25-top", "20", "--dev-queries", "0"]
    assert main(argv + ["--output", str(tmp_path / "a")]) == 0
    lines = [r.getMessage() for r in caplog.records if "degenerate" in r.getMessage()]
    assert len(lines) == 1 and "degenerate" not in capsys.readouterr().out  # one report: the library's warning
    assert lines[0].startswith("dropped 2 of 8 queries with degenerate labels: ")
    assert "hf-dr label --keep-degenerate" in lines[0]
    assert "few" not in set(load_from_disk(str(tmp_path / "a"))["query_id"])
    caplog.clear()
    assert main(argv + ["--keep-degenerate", "--output", str(tmp_path / "b")]) == 0
    assert sum("kept 1 of 8 queries with degenerate labels" in r.getMessage() for r in caplog.records) == 1
    assert "few" in set(load_from_disk(str(tmp_path / "b"))["query_id"])
    assert json.loads((tmp_path / "b" / "stats.json").read_text())["degenerate"]["kept"] is True


# ---------------------------------------------------------------- the teacher's scale on SciFact
SCIFACT = DATA / "scifact"


@pytest.mark.slow
@pytest.mark.pipeline
@pytest.mark.shared
def test_one_word_queries_on_scifact(tmp_path):
    """The issue's setting on a SciFact slice: fusion teacher (BM25 + MiniLM), SimANS negatives from
    MiniLM, real claims plus one-word queries of which some match only 1-3 documents. Before the
    fix the negatives of the two- and three-document queries got teacher scores down to -56.6
    (the claims' range: -2.5 to 9.8) and a mean squared margin of 1,781 (claims: 40); now -1.5
    to 12.0 and 79."""
    from hf_dr.data import load_beir
    from hf_dr.models import load_encoder

    data = load_beir(need(SCIFACT), split="train")
    data.corpus = data.corpus.select(range(300))
    enc = load_encoder(need(MINILM))
    texts = data.doc_texts()
    bm25 = BM25Index(data.doc_ids(), texts)
    counts: dict[str, int] = {}
    for t in texts:
        for w in set(t.lower().split()):
            if w.isalpha() and len(w) > 7:
                counts[w] = counts.get(w, 0) + 1
    # rare words, alphabetically: the first four matching 1-3 documents, and two matching 5-20
    hits = {w: len(bm25.search({"w": w}, top_k=100)["w"]) for w in sorted(counts) if counts[w] <= 20}
    rare = [w for w, n in hits.items() if 1 <= n <= 3][:4]
    some = [w for w, n in hits.items() if 11 <= n <= 20][:2]
    claims = dict(list(data.split_queries().items())[:10])
    queries = {**claims, **{f"w-{w}": w for w in rare + some}}
    cfg = dict(k=1, m=10, negatives="simans", simans_score_scale=20.0, dev_queries=0, dense_max_length=64)
    common = dict(dense_encoder=enc, dense_name="minilm", queries=queries, bm25=bm25, show_progress_bar=False,
                  cache_dir=tmp_path / "cache")
    keep = build_pseudo_labels(data, tmp_path / "keep", PseudoLabelConfig(**cfg, keep_degenerate=True), **common)
    rows = keep.train.to_list()
    scores = {q: [] for q in queries}
    for r in rows:
        scores[r["query_id"]] += [r["pos_score"], r["neg_score"]]
    claim_range = max(abs(s) for q in claims for s in scores[q])
    worst = max(abs(s) for q in queries for s in scores[q])
    assert np.isfinite(worst) and worst <= 2 * claim_range, (worst, claim_range)
    # the one-word queries with fewer than k + m = 11 candidates are degenerate: reported, kept here
    thin = {f"w-{w}" for w in rare}
    assert set(keep.stats["degenerate"]["ids"]) == thin
    assert all(v == ["few_candidates"] for v in keep.stats["degenerate"]["ids"].values())
    assert set(keep.train["query_id"]) == set(queries)
    # ... and dropped by default (the rest unchanged)
    drop = build_pseudo_labels(data, tmp_path / "drop", PseudoLabelConfig(**cfg), **common)
    assert set(drop.train["query_id"]) == set(queries) - thin
    assert drop.train.to_list() == [r for r in rows if r["query_id"] not in thin]
    assert degenerate_summary(drop.stats).startswith(f"dropped {len(thin)} of {len(queries)} queries")
