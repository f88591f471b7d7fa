"""``hf-dr evaluate``: retrieve a BEIR split with BM25, a dense / sparse model, or a
hybrid, print the metrics table, write ``run.trec`` and ``metrics.json``."""

from __future__ import annotations

import json
import time
from pathlib import Path

RETRIEVERS = ("bm25", "dense", "sparse", "hybrid")


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="evaluate a retriever on a BEIR folder or Hub dataset",
                       description=__doc__)
    p.add_argument("--data", required=True, help="BEIR folder or Hub dataset id (BeIR/scifact, mteb/scifact)")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument("--model", help="model folder or Hub id (dense, sparse, hybrid)")
    p.add_argument("--split", default="test")
    p.add_argument("--output", help="folder for run.trec and metrics.json")
    p.add_argument("--top-k", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--metrics", nargs="+", default=None, help="e.g. ndcg@10 recall@100 recall@1000 mrr@10")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ignore-identical-ids", dest="ignore_identical_ids", action="store_true", default=None,
                   help="remove self-matches (query id == doc id); on by default for ArguAna / Quora")
    g.add_argument("--keep-identical-ids", dest="ignore_identical_ids", action="store_false")
    p.add_argument("--bm25-stemmer", default="english", help="PyStemmer language, or 'none'")
    p.add_argument("--bm25-stopwords", default="en", help="'en' or 'none'")
    p.add_argument("--hybrid-second", choices=("dense", "sparse"), default=None,
                   help="the model side of --retriever hybrid (default: sparse for SPLADE models, else dense)")
    p.add_argument("--fusion", choices=("zscore", "minmax", "sum", "rrf"), default="zscore")
    p.add_argument("--fusion-weights", type=float, nargs=2, default=(1.0, 1.0), metavar=("BM25", "MODEL"))
    p.add_argument("--max-queries", type=int, default=None, help="evaluate the first N judged queries only")
    p.add_argument("--device", default=None)
    p.set_defaults(func=run)


def _none(x):
    return None if x in (None, "none", "None", "") else x


def evaluate_retriever(data, retriever: str, model: str | None = None, *, top_k: int = 1000, batch_size: int = 32,
                       metrics=None, ignore_identical_ids=None, bm25_stemmer="english", bm25_stopwords="en",
                       hybrid_second=None, fusion="zscore", fusion_weights=(1.0, 1.0), device=None,
                       cache: dict | None = None):
    """The library call behind ``hf-dr evaluate``: returns ``(EvalResult, run, info)``.

    ``cache`` (a dict kept by the caller) re-uses the BM25 / model runs of earlier calls on
    the same data, so a benchmark evaluating BM25, a model and their hybrid encodes once.
    """
    cache = {} if cache is None else cache
    from ..evaluation import DEFAULT_METRICS, evaluate_run
    from ..models import load_encoder
    from ..retrieval import BM25Index, build_index, fuse, remove_self_matches, search, top_k_run
    from ..cli import CLIError

    if retriever not in RETRIEVERS:
        raise CLIError(f"unknown retriever {retriever!r}: choose {', '.join(RETRIEVERS)}")
    if retriever != "bm25" and not model:
        raise CLIError(f"--retriever {retriever} needs --model")
    if ignore_identical_ids is None:
        ignore_identical_ids = data.ignore_identical_ids
    queries = data.split_queries()
    if not queries:
        raise CLIError(f"no judged queries in split {data.split!r} of {data.name}")
    k = top_k + int(bool(ignore_identical_ids))
    info = {"retriever": retriever, "model": model, "data": str(data.name), "split": data.split,
            "n_queries": len(queries), "n_docs": len(data.corpus), "ignore_identical_ids": bool(ignore_identical_ids)}
    t0 = time.perf_counter()
    runs = []
    if retriever in ("bm25", "hybrid"):
        key = ("bm25", id(data), _none(bm25_stemmer), _none(bm25_stopwords), k)
        if key not in cache:
            bm25 = BM25Index.from_beir(data, stemmer=_none(bm25_stemmer), stopwords=_none(bm25_stopwords))
            cache[key] = bm25.search(queries, top_k=k)
        runs.append(cache[key])
    if retriever != "bm25":
        kind = {"dense": "dense", "sparse": "sparse"}.get(retriever, hybrid_second or "auto")
        key = ("model", id(data), str(model), kind, k)
        if key not in cache:
            encoder = load_encoder(model, kind=kind)
            if device is not None:
                encoder.to(device)
            if kind == "sparse" and not getattr(encoder, "output_is_sparse", False):
                raise CLIError(f"{model} is not a sparse model")
            index = build_index(encoder, data.doc_ids(), data.doc_texts(), batch_size=batch_size)
            cache[key] = (search(encoder, index, queries, top_k=k, batch_size=batch_size), type(encoder).__name__)
        model_run, info["encoder"] = cache[key]
        runs.append(model_run)
    run = runs[0] if len(runs) == 1 else fuse(runs, weights=fusion_weights, method=fusion)
    if ignore_identical_ids:
        run = remove_self_matches(run)
    run = top_k_run(run, top_k)
    info["seconds"] = round(time.perf_counter() - t0, 2)
    if retriever == "hybrid":
        info["fusion"] = {"method": fusion, "weights": list(fusion_weights)}
    result = evaluate_run(data.qrels, run, metrics or DEFAULT_METRICS)
    return result, run, info


def run(args) -> int:
    from ..data import load_beir
    from ..evaluation import format_table
    from ..retrieval import write_trec_run

    data = load_beir(args.data, split=args.split)
    if args.max_queries:
        keep = list(data.split_queries())[: args.max_queries]
        data.qrels = {q: data.qrels[q] for q in keep}
    result, run_, info = evaluate_retriever(
        data, args.retriever, args.model, top_k=args.top_k, batch_size=args.batch_size, metrics=args.metrics,
        ignore_identical_ids=args.ignore_identical_ids, bm25_stemmer=args.bm25_stemmer,
        bm25_stopwords=args.bm25_stopwords, hybrid_second=args.hybrid_second, fusion=args.fusion,
        fusion_weights=args.fusion_weights, device=args.device)
    name = args.retriever if not args.model else f"{args.retriever}: {Path(args.model).name}"
    print(format_table({name: result.aggregate}, list(result.aggregate)))
    print(f"{result.n_queries} queries, {info['n_docs']} documents, {info['seconds']} s"
          + (", self-matches removed" if info["ignore_identical_ids"] else ""))
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        write_trec_run(run_, out / "run.trec", tag=f"hf-dr-{args.retriever}", top_k=args.top_k)
        result.to_json(out / "metrics.json", **info)
        print(f"wrote {out / 'run.trec'} and {out / 'metrics.json'}")
    return 0
