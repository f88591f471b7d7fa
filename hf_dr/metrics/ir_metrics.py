"""IR metrics (nDCG@k, Recall@k, MRR@k, MAP@k, P@k) for ``evaluate``, computed by hf-dr's
pytrec_eval path. Inputs are JSON strings (a Run and its qrels) so that the features are
plain strings: ``predictions=[json.dumps({qid: {docid: score}})]``,
``references=[json.dumps({qid: {docid: grade}})]``; several pairs are merged."""

import json

import datasets
import evaluate

_DESCRIPTION = __doc__
_KWARGS = """
Args:
    predictions: list of JSON strings, each a run {qid: {docid: score}}.
    references: list of JSON strings, each qrels {qid: {docid: grade}}.
    metrics: list like ["ndcg@10", "recall@100"] (default: nDCG@10, R@100, R@1000, MRR@10).
    ignore_identical_ids: drop documents whose id equals the query id.
Returns:
    dict metric -> mean over judged queries.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS)
class IRMetrics(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION, citation="", inputs_description=_KWARGS,
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Value("string")}))

    def _compute(self, predictions, references, metrics=None, ignore_identical_ids=False):
        from hf_dr.evaluation import DEFAULT_METRICS, evaluate_run

        run, qrels = {}, {}
        for p, r in zip(predictions, references):
            run.update(json.loads(p))
            qrels.update(json.loads(r))
        res = evaluate_run(qrels, run, metrics or DEFAULT_METRICS, ignore_identical_ids=ignore_identical_ids)
        return res.aggregate
