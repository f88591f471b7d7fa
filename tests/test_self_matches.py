"""The self-match rule (a retrieved document whose id is the query's own) is decided from the
data, never from the folder's name, and every evaluation says what it did."""

from __future__ import annotations

import json
import shutil

import pytest

from hf_dr.cli import main
from hf_dr.data import load_beir
from hf_dr.evaluation import evaluate
from hf_dr.retrieval import BM25Retriever

from .conftest import DATA, SAMPLE, need


@pytest.mark.shared
def test_arguana_under_another_name_scores_as_arguana(tmp_path, capsys):
    """ACCEPTANCE: a copy of ArguAna in a folder named otherwise gets the same nDCG@10 as the
    original (self-matches removed in both), and `hf-dr evaluate` says so in its output and metrics.json."""
    original = need(DATA / "arguana")
    copy = tmp_path / "my-debates"
    shutil.copytree(original, copy)
    with pytest.warns(UserWarning):  # ArguAna's qrels name one unknown document
        data = load_beir(original)
    res = evaluate(BM25Retriever.from_data(data), data, k=100, metrics=["ndcg@10"])
    assert res.self_matches["removed"] > 1000 and res.self_matches["rule"] == "auto"
    assert main(["evaluate", "--data", str(copy), "--top-k", "100", "--metrics", "ndcg@10",
                 "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["metrics"]["ndcg@10"] == pytest.approx(res.aggregate["ndcg@10"], abs=1e-12)
    assert metrics["self_matches"] == res.self_matches
    n = res.self_matches["removed"]
    assert f"self-matches: {n} queries had their own id among the results: removed" in out


@pytest.mark.shared
def test_scifact_has_no_self_matches_and_its_score_is_unchanged():
    data = load_beir(need(DATA / "scifact"))
    bm25 = BM25Retriever.from_data(data)
    auto = evaluate(bm25, data, k=100, metrics=["ndcg@10"])
    kept = evaluate(bm25, data, k=100, metrics=["ndcg@10"], ignore_identical_ids=False)
    assert auto.aggregate == kept.aggregate and auto.run == kept.run
    assert auto.self_matches["queries_with_own_id"] == 0


def test_a_self_match_judged_relevant_is_kept(tmp_path):
    """Where the qrels judge the query's own id relevant, that document is an answer: kept."""
    folder = tmp_path / "duplicates"
    shutil.copytree(SAMPLE, folder)
    data = load_beir(folder)
    qid, did = next((q, d) for q, docs in data.qrels.items() for d in docs)
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    others = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    for row in corpus:  # the judged document takes the query's id; another query's id goes to an unjudged one
        if row["_id"] == did:
            row["_id"] = qid
    q2 = next(r["_id"] for r in others if r["_id"] != qid and r["_id"] in data.qrels)
    unjudged = next(r for r in corpus if r["_id"] not in {qid} | {d for docs in data.qrels.values() for d in docs})
    unjudged["_id"] = q2
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    tsv = folder / "qrels" / "test.tsv"
    tsv.write_text(tsv.read_text().replace(f"\t{did}\t", f"\t{qid}\t"))
    data = load_beir(folder)
    texts = {q: t for q, t in data.split_queries().items()}

    class Own(BM25Retriever):  # ranks the document with the query's id first, when there is one
        def search(self, queries, k=1000, *, show_progress_bar=None):
            run = super().search(queries, k, show_progress_bar=show_progress_bar)
            ids = set(self.doc_ids)
            return {q: ({q: 1e9, **r} if q in ids else r) for q, r in run.items()}

    r = Own.from_data(data)
    res = evaluate(r, data, k=10, queries={qid: texts[qid], q2: texts[q2]})
    assert qid in res.run[qid] and q2 not in res.run[q2]
    assert res.self_matches == {"rule": "auto", "queries_with_own_id": 2, "removed": 1, "kept_judged_relevant": 1}
    assert evaluate(r, data, k=10, queries={qid: texts[qid]}, ignore_identical_ids=True).run[qid].get(qid) is None


@pytest.mark.pipeline
def test_a_pseudo_positive_is_never_the_querys_own_document(tmp_path):
    """Labelling (hf-dr label / adapt) follows the same rule: where the queries are documents
    (ArguAna-like: same id, same text), the query's own document is no candidate, so neither a
    pseudo-positive nor a negative."""
    from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels
    from hf_dr.labeling.rerankers import Reranker

    data = load_beir(SAMPLE, split=None)
    queries = {d: t[:200] for d, t in zip(data.doc_ids()[:8], data.doc_texts()[:8])}  # queries that are documents

    class ByCandidateScore(Reranker):  # the teacher agrees with BM25
        name = "bm25-scores"

        def score_documents(self, query_id, query, doc_ids, candidates=None):
            return [candidates[d] for d in doc_ids]

    labels = build_pseudo_labels(data, tmp_path / "labels", PseudoLabelConfig(k=2, m=3, bm25_top=20, negatives="bm25",
                                                                              dev_queries=0),
                                 reranker=ByCandidateScore(), queries=queries, show_progress_bar=False)
    rows = labels.train.to_list()
    assert rows and {r["query_id"] for r in rows} == set(queries)
    assert not [r for r in rows if r["pos_id"] == r["query_id"] or r["neg_id"] == r["query_id"]]
