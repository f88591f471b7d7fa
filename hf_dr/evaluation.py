"""Evaluation: the one metric path of hf-dr (pytrec_eval), significance tests, and
:func:`evaluate` — any :class:`~hf_dr.retrieval.Retriever` on a BEIR split. The self-match rule
(BEIR's ``ignore_identical_ids``: :func:`apply_self_match_rule`) lives here and nowhere else."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .retrieval.run import Run, top_k_run

__all__ = ["EvalResult", "evaluate", "evaluate_run", "paired_ttest", "paired_t", "paired_spread", "DEFAULT_METRICS",
           "parse_metric",
           "format_table", "RerankEvaluator", "remove_self_matches", "apply_self_match_rule", "aggregate_passages",
           "passage_aggregation", "AGGREGATIONS", "n_documents"]

DEFAULT_METRICS = ("ndcg@10", "recall@100", "recall@1000", "mrr@10")

_NAMES = {"ndcg": ("ndcg_cut", "nDCG"), "recall": ("recall", "R"), "map": ("map_cut", "MAP"),
          "p": ("P", "P"), "precision": ("P", "P"), "mrr": ("recip_rank", "MRR")}


def parse_metric(metric: str) -> tuple[str, int | None]:
    """``ndcg@10`` -> ``("ndcg", 10)``; a ``ValueError`` naming the metrics there are for any other name."""
    m = re.fullmatch(r"([a-zA-Z_]+)(?:@(\d+))?", metric.strip())
    if not m or m.group(1).lower() not in _NAMES:
        raise ValueError(f"unknown metric {metric!r}; use e.g. ndcg@10, recall@100, mrr@10, map@100, p@10")
    return m.group(1).lower(), int(m.group(2)) if m.group(2) else None


def metric_label(metric: str) -> str:
    """``ndcg@10`` -> ``nDCG@10`` (the papers' spelling)."""
    name, k = parse_metric(metric)
    return _NAMES[name][1] + (f"@{k}" if k else "")


@dataclass
class EvalResult:
    """``aggregate[metric]`` = mean over judged queries; ``per_query[metric][qid]`` for
    significance tests. Keys are the metric names as asked (``ndcg@10``...)."""

    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]] = field(repr=False)
    n_queries: int = 0
    #: the ranking that was scored (set by :func:`evaluate`)
    run: Run | None = field(default=None, repr=False)
    #: what the self-match rule did (set by :func:`evaluate`; see :func:`apply_self_match_rule`)
    self_matches: dict | None = None
    #: how passages were scored as their documents (set by :func:`evaluate` when it did; see
    #: :func:`aggregate_passages`)
    aggregation: dict | None = None

    def to_json(self, path: str | Path | None = None, **extra) -> dict:
        obj = {"metrics": self.aggregate, "n_queries": self.n_queries,
               **({"self_matches": self.self_matches} if self.self_matches is not None else {}),
               **({"aggregation": self.aggregation} if self.aggregation is not None else {}), **extra,
               "per_query": self.per_query}
        if path is not None:
            from .io import atomic_write_json

            atomic_write_json(path, obj, indent=1)
        return obj


def remove_self_matches(run: Run) -> Run:
    """Drop every document whose id equals the query id (BEIR's ``ignore_identical_ids``)."""
    return apply_self_match_rule(run, ignore_identical_ids=True)[0]


def apply_self_match_rule(run: Run, qrels: Mapping[str, Mapping[str, int]] | None = None,
                          ignore_identical_ids: bool | None = None) -> tuple[Run, dict]:
    """The self-match rule: what happens to a retrieved document whose id is the query's own
    (ArguAna, Quora: the queries are also documents). Returns ``(run, report)``.

    * ``None`` (the default, ``"auto"``): it is dropped (BEIR's ``ignore_identical_ids=True``),
      unless ``qrels`` judge that very document relevant to that query (grade > 0): then it is
      an answer, and kept. Decided from the data, never from the dataset's name;
    * ``True``: always dropped; ``False``: always kept.

    ``report``: ``rule`` (auto / removed / kept), ``queries_with_own_id`` (queries whose own id
    was among the results), ``removed``, ``kept_judged_relevant``."""
    qrels = qrels or {}
    found = [q for q, docs in run.items() if q in docs]
    if ignore_identical_ids is None:
        keep = {q for q in found if qrels.get(q, {}).get(q, 0) > 0}
    else:
        keep = set() if ignore_identical_ids else set(found)
    drop = set(found) - keep
    if drop:
        run = {q: ({d: s for d, s in docs.items() if d != q} if q in drop else docs) for q, docs in run.items()}
    rule = "auto" if ignore_identical_ids is None else "removed" if ignore_identical_ids else "kept"
    return run, {"rule": rule, "queries_with_own_id": len(found), "removed": len(drop),
                 "kept_judged_relevant": len(keep) if ignore_identical_ids is None else 0}


def describe_self_matches(report: dict) -> str:
    """One line for :func:`apply_self_match_rule`'s report, e.g. ``self-matches: 1298 queries had
    their own id among the results: removed``."""
    n, removed, kept = report["queries_with_own_id"], report["removed"], report["kept_judged_relevant"]
    how = {"auto": "the default rule", "removed": "--ignore-identical-ids", "kept": "--keep-identical-ids"}[report["rule"]]
    if not n:
        return f"self-matches: no query had its own id among the results ({how})"
    what = "removed" if removed == n else "kept" if not removed else f"{removed} removed"
    extra = f", {kept} kept (judged relevant in the qrels)" if kept else ""
    return f"self-matches: {n} queries had their own id among the results: {what}{extra} ({how})"


#: how a document's passages score it: the best one (MaxP), its first one (FirstP), their sum
AGGREGATIONS = ("maxp", "firstp", "sum")


def aggregate_passages(run: Run, how: str = "maxp") -> Run:
    """A run of passages (ids ``<doc>#<n>``, :func:`hf_dr.ingest.passage_doc`) as a run of their
    documents: ``maxp`` scores a document by its best retrieved passage, ``firstp`` by its first
    passage (``#0``; a document whose first passage was not retrieved is left out), ``sum`` by the sum
    of its retrieved passages' scores. An id that is not a passage's stands for itself."""
    from .ingest import passage_doc

    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {how!r}: use one of {', '.join(AGGREGATIONS)}")
    out: Run = {}
    for q, docs in run.items():
        agg: dict[str, float] = {}
        for pid, score in docs.items():
            doc = passage_doc(pid) or pid
            if how == "maxp":
                agg[doc] = max(agg.get(doc, -math.inf), score)
            elif how == "sum":
                agg[doc] = agg.get(doc, 0.0) + score
            elif doc == pid or pid.endswith("#0"):
                agg[doc] = score
        out[q] = agg
    return out


def passage_aggregation(data, qrels: Mapping[str, Mapping[str, int]], aggregate: str | None = "auto") -> str | None:
    """How :func:`evaluate` scores ``data``'s corpus against ``qrels``: ``None`` (as it is) or one of
    :data:`AGGREGATIONS`. ``auto`` (the default) is ``maxp`` where the corpus holds passages
    (``<doc>#<n>``, what ``hf-dr ingest`` writes) and the qrels judge none of its ids but documents
    of its passages, else ``None``; ``none`` / ``None`` never aggregates; a name is used as it is."""
    if aggregate in (None, "none"):
        return None
    if aggregate != "auto":
        if aggregate not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation {aggregate!r}: use auto, none or one of {', '.join(AGGREGATIONS)}")
        return aggregate
    import pyarrow as pa
    import pyarrow.compute as pc

    judged = pa.array(sorted({d for docs in qrels.values() for d in docs}), pa.string())
    ids = data.corpus.with_format("arrow")["_id"]
    if not len(judged) or not pc.any(pc.match_substring(ids, "#")).as_py() or \
            pc.any(pc.is_in(ids, value_set=judged)).as_py():
        return None
    docs = pc.replace_substring_regex(ids, r"#[0-9]+$", "")
    return "maxp" if pc.any(pc.is_in(docs, value_set=judged)).as_py() else None


def evaluate(retriever, data, k: int = 1000, metrics: Sequence[str] = DEFAULT_METRICS,
             ignore_identical_ids: bool | None = None, queries: Mapping[str, str] | None = None,
             show_progress_bar: bool | None = None, aggregate: str | None = "auto") -> EvalResult:
    """Retrieve ``data``'s judged queries (``data.split_queries()``, or ``queries``) with
    ``retriever`` (any :class:`~hf_dr.retrieval.Retriever`) and score the top-``k`` against
    ``data.qrels``. Where the corpus holds passages of the documents the qrels judge, passages are
    scored as their documents (:func:`passage_aggregation`: MaxP by default, ``aggregate`` =
    ``firstp`` / ``sum`` / ``none``); ``k`` times the passages per document are retrieved then, so
    the ranking still holds about ``k`` documents. A retrieved document whose id is the query's own is
    dropped unless the qrels judge it relevant (:func:`apply_self_match_rule`; ``ignore_identical_ids``
    True / False forces removal / keeping); one more document is retrieved then. Given ``queries``,
    only those are scored. The scored run is ``result.run``, what the rule did ``result.self_matches``,
    the aggregation ``result.aggregation``."""
    queries = data.split_queries() if queries is None else dict(queries)
    if not queries:
        raise ValueError(f"no judged queries to evaluate in split {getattr(data, 'split', None)!r} of "
                         f"{getattr(data, 'name', 'the data')}")
    if len(retriever) != len(data.corpus):
        raise ValueError(f"the retriever searches {len(retriever)} documents, {data.name} has "
                         f"{len(data.corpus)}: it was built on another corpus")
    qrels = data.qrels if set(queries) >= set(data.qrels) else {q: data.qrels[q] for q in queries if q in data.qrels}
    how, depth = passage_aggregation(data, qrels, aggregate), k
    if how:
        n_docs = n_documents(data)
        depth = min(len(data.corpus), k * math.ceil(len(data.corpus) / max(n_docs, 1)))
    run = retriever.search(queries, depth + int(ignore_identical_ids is not False), show_progress_bar=show_progress_bar)
    if how:
        run = aggregate_passages(run, how)
    run, report = apply_self_match_rule(run, qrels, ignore_identical_ids)
    run = top_k_run(run, k)
    result = evaluate_run(qrels, run, metrics)
    result.run, result.self_matches = run, report
    if how:
        result.aggregation = {"how": how, "passages": len(data.corpus), "documents": n_docs, "passages_retrieved": depth}
    return result


def n_documents(data) -> int:
    """How many documents a passage corpus holds (ids ``<doc>#<n>``)."""
    import pyarrow.compute as pc

    ids = data.corpus.with_format("arrow")["_id"]
    return len(pc.unique(pc.replace_substring_regex(ids, r"#[0-9]+$", "")))


def evaluate_run(qrels: Mapping[str, Mapping[str, int]], run: Run, metrics: Sequence[str] = DEFAULT_METRICS,
                 ignore_identical_ids: bool = False) -> EvalResult:
    """Score ``run`` against ``qrels`` with pytrec_eval.

    Queries judged in ``qrels`` but absent from ``run`` score 0 (as trec_eval -c does), so
    a retriever cannot gain by dropping hard queries. ``ignore_identical_ids`` removes
    documents whose id equals the query id (:func:`remove_self_matches`). MRR@k truncates the ranking
    at k before pytrec_eval's reciprocal rank.
    """
    import pytrec_eval

    if ignore_identical_ids:
        run = remove_self_matches(run)
    qrels = {str(q): {str(d): int(g) for d, g in docs.items()} for q, docs in qrels.items() if docs}
    if not qrels:
        raise ValueError("no judged queries to evaluate")
    run = {q: {d: float(s) for d, s in run.get(q, {}).items()} for q in qrels}
    # group metrics by the ranking they are computed on: MRR@k needs the run cut at k
    groups: dict[int | None, list[tuple[str, str, str]]] = {}
    for orig in metrics:
        name, k = parse_metric(orig)
        trec = _NAMES[name][0]
        if name == "mrr":
            groups.setdefault(k, []).append((orig, "recip_rank", "recip_rank"))
        else:
            measure, key = (f"{trec}.{k}", f"{trec}_{k}") if k else (trec, trec)
            groups.setdefault(None, []).append((orig, measure, key))
    per_query: dict[str, dict[str, float]] = {m: {} for m in metrics}
    for cut, triples in groups.items():
        r = top_k_run(run, cut) if cut else run
        ev = pytrec_eval.RelevanceEvaluator(qrels, {measure for _, measure, _ in triples})
        # pytrec_eval skips queries with an empty ranking: they score 0
        scored = ev.evaluate({q: (docs if docs else {"__none__": 0.0}) for q, docs in r.items()})
        for orig, _, key in triples:
            for q in qrels:
                per_query[orig][q] = float(scored.get(q, {}).get(key, 0.0))
    aggregate = {m: float(np.mean(list(per_query[m].values()))) for m in metrics}
    return EvalResult(aggregate, per_query, n_queries=len(qrels))


def paired_ttest(a: EvalResult, b: EvalResult, metric: str = "ndcg@10") -> tuple[float, float]:
    """Two-sided paired t-test on per-query ``metric`` over the queries both results share
    (the † of the papers' tables). Returns ``(t, p)``; ``(0, 1)`` when the runs agree."""
    return paired_t(a.per_query[metric], b.per_query[metric])


def paired_t(a: Mapping[str, float], b: Mapping[str, float],
             spread_from: tuple[Mapping[str, float], Mapping[str, float]] | None = None) -> tuple[float, float]:
    """Two-sided paired t-test of per-query scores ``a`` vs ``b`` (``{query: score}``) over the
    queries both hold: ``(t, p)``; ``(0, 1)`` when they agree. The one paired test of hf-dr
    (:func:`paired_ttest`, the adapt verdict's judged dev queries); ``spread_from`` as
    :func:`paired_spread`'s."""
    s = paired_spread(a, b, spread_from)
    return s["t"], s["p"]


def paired_spread(a: Mapping[str, float], b: Mapping[str, float],
                  spread_from: tuple[Mapping[str, float], Mapping[str, float]] | None = None) -> dict:
    """The paired t of ``a`` vs ``b`` over the queries both hold (at least two): ``queries``,
    ``difference`` (mean), ``sd`` and ``df`` of the per-query differences, ``t`` and ``p`` (two-sided;
    ``(0, 1)`` when they agree).

    ``spread_from``: another pair of per-query scores of the same two models, on other queries
    (those both hold, less ``a``'s): their differences, each set about its own mean, join the
    estimate of the per-query spread (pooled variance, ``n1 + n2 - 2`` degrees of freedom; a set of
    one adds nothing); the mean is ``a``'s alone. The verdict of ``hf-dr adapt`` tests its held-out
    half so, with the spread of the half that chose (:func:`hf_dr.adaptation.verdict.resolution`)."""
    from scipy.stats import t as student_t

    qs = sorted(set(a) & set(b))
    if len(qs) < 2:
        raise ValueError("a paired t-test needs at least two shared queries")
    x = np.array([a[q] for q in qs], dtype=np.float64)
    y = np.array([b[q] for q in qs], dtype=np.float64)
    d = x - y
    other = _other_differences(spread_from, set(qs))
    ss, df = float(((d - d.mean()) ** 2).sum()), len(d) - 1
    if len(other) >= 2:
        ss, df = ss + float(((other - other.mean()) ** 2).sum()), df + len(other) - 1
    sd = math.sqrt(ss / df)
    out = {"queries": len(d), "difference": float(d.mean()), "sd": sd, "df": df,
           "spread_queries": len(d) + (len(other) if len(other) >= 2 else 0)}
    if np.allclose(x, y) and np.allclose(other, 0.0):
        return {**out, "t": 0.0, "p": 1.0}
    if sd == 0.0:
        return {**out, "t": math.copysign(math.inf, d.mean()), "p": 0.0}
    stat = float(d.mean() / (sd / math.sqrt(len(d))))
    return {**out, "t": stat, "p": float(2.0 * student_t.sf(abs(stat), df))}


def _other_differences(spread_from, exclude: set) -> np.ndarray:
    """The per-query differences of ``spread_from`` (a pair of ``{query: score}``) over the queries
    both hold and ``exclude`` does not (empty when None)."""
    if spread_from is None:
        return np.zeros(0)
    a2, b2 = spread_from
    qs = sorted((set(a2) & set(b2)) - exclude)
    return np.array([a2[q] - b2[q] for q in qs], dtype=np.float64)


def format_table(rows: Mapping[str, Mapping[str, float]], metrics: Sequence[str] = DEFAULT_METRICS) -> str:
    """A Markdown table: one row per system, one column per metric."""
    head = "| system | " + " | ".join(metric_label(m) for m in metrics) + " |"
    sep = "|---|" + "---:|" * len(metrics)
    lines = [head, sep]
    for name, agg in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{agg[m]:.4f}" if m in agg else "" for m in metrics) + " |")
    return "\n".join(lines)


class RerankEvaluator:
    """Rank each query's judged candidates with an encoder and score the ranking (the dev-set
    protocol of DoDress, papers/004 §5.2: 10 pseudo-positives + 90 random negatives per query; the
    label pipeline's default: 10 pseudo-positives + 10 hard negatives). Each document is
    encoded once per call, in length-sorted chunks, with a progress bar when ``show_progress_bar``
    (None: on a terminal only).

    ``rows``: a ``datasets.Dataset`` / list of dicts with ``query_id, query, doc_id, doc, label``.
    Calling it with a model (``encode_queries`` / ``encode_corpus``) returns
    ``{metric: value}``; used as :class:`~hf_dr.training.RetrievalTrainer`'s ``evaluator``.
    """

    def __init__(self, rows, metrics: Sequence[str] = ("ndcg@10",), batch_size: int = 32,
                 max_length: int | None = None, show_progress_bar: bool | None = False,
                 desc: str = "dev evaluation"):
        rows = list(rows)
        if not rows:
            raise ValueError("the dev set is empty: nothing to evaluate")
        self.queries = {str(r["query_id"]): r["query"] for r in rows}
        self.docs = {str(r["doc_id"]): r["doc"] for r in rows}  # each document encoded once
        self.qrels: dict[str, dict[str, int]] = {}
        for r in rows:
            self.qrels.setdefault(str(r["query_id"]), {})[str(r["doc_id"])] = int(r["label"])
        self.metrics, self.batch_size, self.max_length = tuple(metrics), batch_size, max_length
        # None: a progress bar on a terminal only (tqdm's disable=None)
        self.show_progress_bar, self.desc = show_progress_bar, desc

    def _encode_docs(self, model, dids: list[str], kw: dict):
        """The documents ``dids`` encoded in length-sorted chunks, one progress bar over them."""
        from tqdm.auto import tqdm

        order = sorted(range(len(dids)), key=lambda i: -len(self.docs[dids[i]]))
        chunk = max(4 * self.batch_size, 64)
        parts = []
        disable = None if self.show_progress_bar is None else not self.show_progress_bar
        with tqdm(total=len(dids), desc=f"{self.desc} ({len(self.queries)} queries)", unit="doc",
                  disable=disable, leave=False) as bar:
            for s in range(0, len(order), chunk):
                idx = order[s:s + chunk]
                parts.append(model.encode_corpus([self.docs[dids[i]] for i in idx], **kw))
                bar.update(len(idx))
        back = np.argsort(np.asarray(order, dtype=np.int64))
        if parts and hasattr(parts[0], "tocsr"):
            import scipy.sparse as sp

            return sp.vstack([p.tocsr() for p in parts]).tocsr()[back]
        return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts])[back]

    def run(self, model, doc_vectors: Mapping[str, np.ndarray] | None = None) -> Run:
        """Every query's candidates scored by ``model``. ``doc_vectors``: dense vectors of some of the
        documents by this very model (e.g. the label stage's corpus encoding), not encoded again. What
        truncation cut in the chunks is said once (:func:`~hf_dr.encoding.one_length_report`)."""
        from .encoding import one_length_report

        with one_length_report():
            return self._run(model, doc_vectors)

    def _run(self, model, doc_vectors: Mapping[str, np.ndarray] | None) -> Run:
        qids, dids = list(self.queries), list(self.docs)
        kw = {"batch_size": self.batch_size, "show_progress_bar": False}
        if self.max_length is not None:
            kw["max_length"] = self.max_length
        q = model.encode_queries([self.queries[i] for i in qids], **kw)
        if hasattr(q, "tocsr"):  # sparse (SPLADE) vectors: one sparse product, never densified
            d = self._encode_docs(model, dids, kw)
            col = {x: j for j, x in enumerate(dids)}
            s = (q.tocsr() @ d.T).toarray()
            return {qid: {x: float(s[i, col[x]]) for x in self.qrels[qid]} for i, qid in enumerate(qids)}
        known = doc_vectors or {}
        todo = [x for x in dids if x not in known]
        new = self._encode_docs(model, todo, kw) if todo else None
        vec = {x: new[j] for j, x in enumerate(todo)}
        q = np.asarray(q, dtype=np.float32)
        d = np.stack([np.asarray(vec[x] if x in vec else known[x], dtype=np.float32) for x in dids])
        col = {x: j for j, x in enumerate(dids)}
        return {qid: {x: float(d[col[x]] @ q[i]) for x in self.qrels[qid]} for i, qid in enumerate(qids)}

    def __call__(self, model) -> dict[str, float]:
        return evaluate_run(self.qrels, self.run(model), self.metrics).aggregate
