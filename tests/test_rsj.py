import math

import pytest

from hf_dr.analysis import delta_rsj, plot_delta_rsj, rsj_weight
from hf_dr.data import BeirData
from datasets import Dataset


def test_rsj_weight_formula():
    r, R, n, N = 3, 4, 10, 100
    want = math.log((3.5 / 1.5) * ((100 - 10 - 4 + 3 + 0.5) / (10 - 3 + 0.5)))
    assert rsj_weight(r, R, n, N) == pytest.approx(want)
    assert rsj_weight(0, 4, 10, 100) < 0 < rsj_weight(4, 4, 10, 100)


def _data():
    docs = {"d1": "phytate cancer therapy", "d2": "phytate diet study", "d3": "cancer therapy outcome",
            "d4": "therapy outcome review", "d5": "diet review"}
    corpus = Dataset.from_dict({"_id": list(docs), "title": [""] * 5, "text": list(docs.values())})
    queries = Dataset.from_dict({"_id": ["q"], "text": ["phytate cancer therapy"]})
    return BeirData(corpus, queries, {"q": {"d1": 1, "d2": 1}}, split="test", name="toy")


def test_delta_rsj_sign_follows_the_ranking():
    data = _data()
    good = {"q": {"d1": 3.0, "d2": 2.0}}  # retrieves the relevant documents: ΔRSJ ~ 0
    lexical_miss = {"q": {"d3": 3.0, "d4": 2.0}}  # ignores "phytate": under-weights it
    res = delta_rsj(data, {"good": good, "miss": lexical_miss}, k=2, stem=False)
    rec = {(r[0], r[2]): r[5] for r in res["records"]}
    assert rec[("good", "phytate")] == pytest.approx(0.0)
    assert rec[("miss", "phytate")] < 0  # the model's RSJ^ is below the true RSJ: under-weighted
    assert set(res["groups"]) == {"good", "miss"}


def test_plot(tmp_path):
    res = delta_rsj(_data(), {"m": {"q": {"d1": 1.0}}}, k=1, stem=False)
    assert plot_delta_rsj(res, tmp_path / "rsj.png").stat().st_size > 1000
