import pytest
import pytrec_eval

from hf_dr.evaluation import evaluate_run, format_table, paired_ttest

QRELS = {"q1": {"a": 2, "b": 1, "z": 1}, "q2": {"c": 1}, "q3": {"d": 1}}
RUN = {"q1": {"b": 3.0, "x": 2.5, "a": 2.0, "y": 1.0}, "q2": {"x": 5.0, "y": 4.0, "c": 3.0}, "q3": {}}


def test_matches_pytrec_eval_directly():
    res = evaluate_run(QRELS, RUN, metrics=("ndcg@10", "recall@100", "map@100", "p@5"))
    ev = pytrec_eval.RelevanceEvaluator({q: d for q, d in QRELS.items()},
                                        {"ndcg_cut.10", "recall.100", "map_cut.100", "P.5"})
    ref = ev.evaluate({q: d for q, d in RUN.items() if d})
    for q in ("q1", "q2"):
        assert res.per_query["ndcg@10"][q] == pytest.approx(ref[q]["ndcg_cut_10"])
        assert res.per_query["recall@100"][q] == pytest.approx(ref[q]["recall_100"])
        assert res.per_query["map@100"][q] == pytest.approx(ref[q]["map_cut_100"])
        assert res.per_query["p@5"][q] == pytest.approx(ref[q]["P_5"])
    # a judged query with an empty ranking scores zero and counts in the mean
    assert res.per_query["ndcg@10"]["q3"] == 0.0 and res.n_queries == 3
    assert res.aggregate["ndcg@10"] == pytest.approx((ref["q1"]["ndcg_cut_10"] + ref["q2"]["ndcg_cut_10"]) / 3)


def test_hand_computed_values():
    import math

    res = evaluate_run(QRELS, RUN, metrics=("mrr@10", "mrr@2", "recall@2", "ndcg@10"))
    assert res.per_query["mrr@10"] == {"q1": 1.0, "q2": pytest.approx(1 / 3), "q3": 0.0}
    assert res.per_query["mrr@2"]["q2"] == 0.0  # first relevant at rank 3: cut away at 2
    assert res.per_query["recall@2"]["q1"] == pytest.approx(1 / 3)
    # trec_eval (and so BEIR) uses linear gain: rel / log2(rank + 1)
    dcg = 1 / math.log2(2) + 2 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert res.per_query["ndcg@10"]["q1"] == pytest.approx(dcg / idcg)


def test_identical_ids_and_errors():
    run = {"q1": {"q1": 9.0, "a": 1.0}}
    assert evaluate_run({"q1": {"a": 1}}, run, ["mrr@10"]).aggregate["mrr@10"] == 0.5
    assert evaluate_run({"q1": {"a": 1}}, run, ["mrr@10"], ignore_identical_ids=True).aggregate["mrr@10"] == 1.0
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate_run(QRELS, RUN, ["bleu@4"])
    with pytest.raises(ValueError, match="no judged queries"):
        evaluate_run({}, RUN)


def test_paired_ttest_and_table():
    from scipy.stats import ttest_rel

    qrels = {f"q{i}": {"a": 1} for i in range(6)}
    good = {f"q{i}": {"a": 2.0, "b": 1.0} for i in range(6)}
    mixed = {f"q{i}": ({"b": 2.0, "a": 1.0} if i % 2 else {"a": 2.0}) for i in range(6)}
    a, b = evaluate_run(qrels, good), evaluate_run(qrels, mixed)
    t, p = paired_ttest(a, b, "mrr@10")
    ref = ttest_rel([1.0] * 6, [1.0, 0.5] * 3)
    assert t == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue)
    assert paired_ttest(a, a) == (0.0, 1.0)
    table = format_table({"good": a.aggregate})
    assert "| good | 1.0000 |" in table and "nDCG@10" in table


def test_evaluate_module_uses_the_same_metric_path():
    import json

    import evaluate

    import hf_dr.metrics

    ir = evaluate.load(hf_dr.metrics.IR_METRICS_PATH)
    got = ir.compute(predictions=[json.dumps(RUN)], references=[json.dumps(QRELS)], metrics=["ndcg@10", "mrr@10"])
    want = evaluate_run(QRELS, RUN, ["ndcg@10", "mrr@10"]).aggregate
    assert got == pytest.approx(want)
