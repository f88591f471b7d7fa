"""Robertson-Spärck Jones weight analysis (SPLADE-CAI paper §7 and Appendix B, after
Formal et al. 2022b): does a model under-weight rare exact-match terms?

For each query Q and each of its terms t, ``RSJ_{t,Q}`` (Eq. 18) is computed with the judged
relevant documents, and ``RSJ^_{t,Q}`` (Eq. 19) with the model's top-K documents in their
place. The paper prints Eq. 10 as ``RSJ - RSJ^`` but reads it as "> 0: the model
over-estimates the term, < 0: under-estimates" (as Formal et al. 2022b define it); only
``dRSJ = RSJ^ - RSJ`` has that meaning, so that is what is computed here. Terms are split into
HighRSJ / LowRSJ at the 75th percentile of RSJ and HighIDF / LowIDF at the median IDF of the
query terms. Probabilities use the usual +0.5 smoothing (the unsmoothed ratio is infinite
whenever a term is in all or none of a set).
Terms come from bm25s' analyser (lower-case words, English stop words removed, Snowball
stemming), standing in for pyserini's Lucene analyser.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .plotting import save_figure

__all__ = ["rsj_weight", "delta_rsj", "plot_delta_rsj"]


def rsj_weight(r: int, R: int, n: int, N: int) -> float:
    """Smoothed Eq. 18: ``r`` of the ``R`` (pseudo-)relevant documents contain t, ``n`` of all ``N``."""
    return math.log((r + 0.5) / (R - r + 0.5)) - math.log((n - r + 0.5) / (N - n - R + r + 0.5))


def _analyser(stem: bool = True):
    from ..retrieval.bm25 import import_bm25s

    bm25s = import_bm25s()
    stemmer = None
    if stem:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
    return lambda texts: bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)


def delta_rsj(data, runs: Mapping[str, Mapping[str, Mapping[str, float]]], k: int = 100, stem: bool = True) -> dict:
    """ΔRSJ of each run on ``data`` (a :class:`hf_dr.data.BeirData` with qrels).

    Returns ``{"groups": {run_name: {"HighRSJ/HighIDF": mean ΔRSJ, ...}}, "records": [...]}``;
    each record is ``(run, qid, term, rsj, rsj_hat, delta, idf)``."""
    analyse = _analyser(stem)
    ids = data.doc_ids()
    doc_terms = [set(t) for t in analyse(data.doc_texts())]
    index = {d: i for i, d in enumerate(ids)}
    N = len(ids)
    df: dict[str, int] = {}
    for terms in doc_terms:
        for t in terms:
            df[t] = df.get(t, 0) + 1
    queries = data.split_queries()
    qterms = dict(zip(queries, (set(t) for t in analyse(list(queries.values())))))

    def contains(docs, t):
        return sum(1 for d in docs if t in doc_terms[d])

    base = []  # (qid, term, rsj, idf)
    for q, terms in qterms.items():
        rel = [index[d] for d, g in data.qrels.get(q, {}).items() if g > 0 and d in index]
        if not rel:
            continue
        for t in sorted(terms):
            n = df.get(t, 0)
            if n == 0:
                continue
            base.append((q, t, rsj_weight(contains(rel, t), len(rel), n, N), math.log(N / n)))
    if not base:
        raise ValueError("no judged query has a term that occurs in the corpus")
    rsj_cut = float(np.percentile([b[2] for b in base], 75))
    idf_cut = float(np.median([b[3] for b in base]))
    groups: dict = {}
    records = []
    for name, run in runs.items():
        sums: dict[str, list[float]] = {}
        for q, t, rsj, idf in base:
            top = [index[d] for d, _ in sorted(run.get(q, {}).items(), key=lambda x: -x[1])[:k] if d in index]
            if not top:
                continue
            hat = rsj_weight(contains(top, t), len(top), df[t], N)
            g = f"{'High' if rsj >= rsj_cut else 'Low'}RSJ/{'High' if idf >= idf_cut else 'Low'}IDF"
            sums.setdefault(g, []).append(hat - rsj)
            records.append((name, q, t, rsj, hat, hat - rsj, idf))
        groups[name] = {g: float(np.mean(v)) for g, v in sorted(sums.items())}
    return {"groups": groups, "records": records, "rsj_75th": rsj_cut, "idf_median": idf_cut, "k": k}


def plot_delta_rsj(result: dict, path: str | os.PathLike, title: str = "") -> Path:
    """Figure 2 of the paper: mean ΔRSJ per group, one bar per run."""
    from ..extras import require

    require("matplotlib").use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["groups"])
    groups = sorted({g for v in result["groups"].values() for g in v})
    x = np.arange(len(groups))
    w = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for i, n in enumerate(names):
        ax.bar(x + i * w, [result["groups"][n].get(g, np.nan) for g in groups], w, label=n)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x + w * (len(names) - 1) / 2, groups)
    ax.set_ylabel(f"mean ΔRSJ (RSJ − RSĴ, K={result['k']:d})")
    ax.set_title(title or "Under- (<0) / over- (>0) weighting of query terms")
    ax.legend(fontsize=8)
    return save_figure(fig, path)
