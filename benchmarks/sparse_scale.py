"""SPLADE search at scale: Seismic (``hf-dr index --backend seismic``, approximate) vs the exact
inverted ``SparseIndex`` (``--backend inverted``) vs Qdrant Edge's sparse search (``--edge``), on the
scale corpus of ``benchmarks/index_scale.py`` (SciFact's 5,183 abstracts, then 12-word windows of the
offline corpora; SciFact's test judgments, each also given to the windows of the judged abstract),
encoded by splade-tiny (``hf-dr encode --kind sparse``).

Measured, each system in its own process (peak RSS: the kernel's, through index_scale's launcher):

* build: seconds (the manifest's, and the whole command's), size on disk, peak RSS;
* search of query vectors encoded once (the first ``--queries`` of SciFact's and ArguAna's queries, top
  ``--k``): queries/s with 1 and 2 threads (Seismic: its ``num_threads``; the exact index: the batch
  cut in two halves searched by two Python threads; Qdrant Edge: its own, one request batch at a time),
  accuracy@10 (the share of the exact top 10 found), nDCG@10 on the 300 judged queries, the time to
  open the saved index, peak RSS;
* the first answered query (``hf-dr evaluate --index``'s library calls in a fresh process: open the
  saved Seismic index, encode a query, search) against a rebuild from the embeddings.

    python benchmarks/sparse_scale.py                       # 1,000,000 documents (hours on 2 CPU cores)
    python benchmarks/sparse_scale.py --docs 20000 --max-length 64 --work runs/sparse-scale-20k   # minutes

Rows go to ``WORK/sparse_scale.json``; ``--save`` also writes them to
benchmarks/results/sparse_scale.json (a full-scale run on a quiet machine only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows
from index_scale import (
    _throughput_queries,
    ARGUANA,
    N_SCIFACT,
    SCIFACT,
    cli,
    judged_corpus,
    measure,
    run_first,
    run_worker,
    size_mb,
)

SPLADE = SHARED / "models" / "splade-tiny"
SYSTEMS = ("inverted", "seismic", "qdrant")


# ----------------------------------------------------------------------------- workers
def _query_texts(n: int) -> tuple[dict[str, str], dict[str, str]]:
    """(SciFact's judged test queries, the first ``n`` of SciFact's then ArguAna's queries)."""
    judged_ids = {ln.split("\t")[0] for ln in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    every = _throughput_queries()
    judged = {k.split(":", 1)[1]: t for k, t in every.items() if k.startswith("scifact:") and k.split(":", 1)[1] in judged_ids}
    return judged, dict(list(every.items())[:n])


def worker_queries(a) -> None:
    """Encode the judged and the throughput queries once (splade-tiny): WORK/queries.npz + ids."""
    import scipy.sparse as sp

    from hf_dr.models import load_encoder

    enc = load_encoder(str(SPLADE), kind="sparse")
    judged, every = _query_texts(a.queries)
    for name, qs in (("judged", judged), ("throughput", every)):
        Q = enc.encode_queries(list(qs.values()), batch_size=64, show_progress_bar=False)
        sp.save_npz(Path(a.work) / f"queries-{name}.npz", Q)
        (Path(a.work) / f"queries-{name}.json").write_text(json.dumps(list(qs)))
    print("RESULT " + json.dumps({"judged": len(judged), "throughput": len(every)}), flush=True)


def _load_queries(work: Path, name: str):
    import scipy.sparse as sp

    return sp.load_npz(work / f"queries-{name}.npz").tocsr(), json.loads((work / f"queries-{name}.json").read_text())


def _open(a):
    """``(search(Q, qids, k, threads) -> Run, seconds to open)`` of the saved index / collection."""
    t = time.perf_counter()
    if a.system == "qdrant":
        from hf_dr.models import load_encoder
        from hf_dr.retrieval.qdrant import QdrantRetriever, open_store

        r = QdrantRetriever(open_store(edge=a.index), {"sparse": load_encoder(str(SPLADE), kind="sparse")})
        return (lambda Q, qids, k, threads: r.search_vectors({"sparse": Q}, qids, k)), time.perf_counter() - t
    from hf_dr.retrieval import SavedIndex

    saved = SavedIndex(a.index)
    if a.system == "seismic":
        from hf_dr.retrieval.seismic import SeismicIndex

        index = SeismicIndex.load(saved.path, saved.doc_ids, query_cut=a.query_cut, heap_factor=a.heap_factor)
    else:
        from hf_dr.retrieval import SparseIndex

        index = SparseIndex.load(saved.path, saved.doc_ids)
    opened = time.perf_counter() - t

    def search(Q, qids, k, threads):
        if a.system == "seismic":
            index.threads = threads
            return index.search(Q, qids, k)
        if threads == 1:
            return index.search(Q, qids, k)
        half, out = Q.shape[0] // 2, [None, None]  # the exact index has no threads of its own: two halves

        def part(i, rows):
            out[i] = index.search(Q[rows], qids[rows], k)
        ts = [threading.Thread(target=part, args=(i, s)) for i, s in enumerate((slice(0, half), slice(half, None)))]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        return {**out[0], **out[1]}
    return search, opened


def worker_search(a) -> None:
    """One system: open it, search the throughput queries with 1 and 2 threads (best of 2 each),
    then the judged ones; the runs go to WORK/run-NAME-*.json for the comparison with the exact index."""
    work = Path(a.work)
    search, opened = _open(a)
    Qt, tids = _load_queries(work, "throughput")
    Qj, jids = _load_queries(work, "judged")
    search(Qt[:20], tids[:20], a.k, 1)  # warm
    out = {"open_s": round(opened, 3), "n_queries": len(tids), "k": a.k}
    for threads in (1, 2):
        best = min(_timed(lambda t=threads: search(Qt, tids, a.k, t)) for _ in range(2))
        out[f"qps_{threads}t"] = round(len(tids) / best, 1)
    for name, Q, ids in (("throughput", Qt, tids), ("judged", Qj, jids)):
        run = search(Q, ids, a.k, 1)
        (work / f"run-{a.name}-{name}.json").write_text(json.dumps(run))
    print("RESULT " + json.dumps(out), flush=True)


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def worker_first(a) -> None:
    """``hf-dr evaluate --retriever sparse --index`` (saved Seismic index) or ``--embeddings --index-type
    seismic`` (a rebuild): prints IMPORTED once the libraries the calls need are imported (the same
    for both), FIRST when the first query is answered."""
    import hf_dr.models.splade  # noqa: F401  (torch, transformers: what encoding the query imports)
    import hf_dr.retrieval.seismic  # noqa: F401
    from hf_dr.data import load_beir
    from hf_dr.factory import build_retriever

    print("IMPORTED", flush=True)
    data = load_beir(a.data, split="test")
    opts = {"index": a.index} if a.index else {"embeddings": a.embeddings, "index_type": "seismic"}
    r = build_retriever("sparse", data, str(SPLADE), show_progress_bar=False, **opts)
    q = next(iter(data.split_queries().items()))
    r.search({q[0]: q[1]}, 10)
    print("FIRST", flush=True)
    print("RESULT {}", flush=True)


# ----------------------------------------------------------------------------- main
def build_all(a, work: Path) -> dict:
    """The corpus, its encoding (reused when there) and the three indexes: what the rows need."""
    corpus = judged_corpus(work, a.docs, a.docs)
    emb = work / f"emb-{a.docs}"
    out: dict = {"corpus": corpus, "emb": emb}
    if not (emb / "manifest.json").is_file():
        r = measure(cli("encode", "--data", str(corpus), "--model", str(SPLADE), "--kind", "sparse", "--output",
                        str(emb), "--batch-size", "64", "--no-progress", "--overwrite",
                        *(("--max-length", str(a.max_length)) if a.max_length else ())))
        out["encode"] = {"seconds": r["seconds"], "peak_rss_mb": r["peak_rss_mb"],
                         "docs_per_s": round(a.docs / r["seconds"], 1)}
        print(f"encode: {out['encode']}", flush=True)
    run_worker("queries", script=__file__, work=work, queries=a.queries)
    seismic = [f"--{k.replace('_', '-')}={v}" for k, v in (("query_cut", a.query_cut), ("heap_factor", a.heap_factor))
               if v is not None]
    for name in a.systems:
        idx = work / f"idx-{name}-{a.docs}"
        if name == "qdrant":
            import shutil

            shutil.rmtree(idx, ignore_errors=True)
            argv = ("--embeddings", str(emb), "--edge", str(idx), "--batch-size", "1024")
        else:
            argv = ("--embeddings", str(emb), "--backend", name, "--output", str(idx), "--overwrite",
                    *(seismic if name == "seismic" else ()))
        r = measure(cli("index", *argv, "--no-progress"))
        mf = idx / "index.json"
        out[name] = {"path": idx, "command_s": r["seconds"], "build_rss_mb": r["peak_rss_mb"], "size_mb": size_mb(idx),
                     "build_s": json.loads(mf.read_text())["build_seconds"] if mf.is_file() else r["seconds"]}
        print(f"index {name}: {({k: v for k, v in out[name].items() if k != 'path'})}", flush=True)
    return out


def compare(a, work: Path, built: dict) -> list[tuple[str, dict]]:
    """Search with every system; accuracy@10 against the exact index's runs, nDCG@10 on the judged queries."""
    from hf_dr.data import load_qrels
    from hf_dr.evaluation import evaluate_run

    qrels = load_qrels(built["corpus"] / "qrels" / "test.tsv")
    res = {}
    for name in a.systems:
        opts = {"query_cut": a.query_cut, "heap_factor": a.heap_factor} if name == "seismic" else {}
        r = run_worker("search", script=__file__, work=work, system=name, name=name, index=built[name]["path"], k=a.k,
                       **{k: v for k, v in opts.items() if v is not None})
        res[name] = r
        print(f"search {name}: {r}", flush=True)
    exact = {n: json.loads((work / f"run-inverted-{n}.json").read_text()) for n in ("throughput", "judged")}
    rows = []
    for name, r in res.items():
        runs = {n: json.loads((work / f"run-{name}-{n}.json").read_text()) for n in ("throughput", "judged")}
        acc = [len(set(list(runs["throughput"][q])[:10]) & set(list(d)[:10])) / min(10, len(d))
               for q, d in exact["throughput"].items() if d]
        m = {"qps_1t": r["qps_1t"], "qps_2t": r["qps_2t"],
             "speedup_1t_vs_exact": round(r["qps_1t"] / res["inverted"]["qps_1t"], 2),
             "accuracy@10": round(sum(acc) / len(acc), 4),
             "ndcg@10": round(evaluate_run(qrels, runs["judged"], ["ndcg@10"]).aggregate["ndcg@10"], 4),
             "open_s": r["open_s"], "search_peak_rss_mb": r["peak_rss_mb"],
             **{k: built[name][k] for k in ("build_s", "command_s", "size_mb", "build_rss_mb")}}
        rows.append((name, m))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000, help="documents of the corpus (default 1,000,000)")
    ap.add_argument("--queries", type=int, default=1000, help="throughput queries (SciFact's then ArguAna's)")
    ap.add_argument("--k", type=int, default=10, help="documents per query (default 10)")
    ap.add_argument("--max-length", type=int, default=None, help="encoding max length (default splade-tiny's own)")
    ap.add_argument("--query-cut", type=int, default=None, help="Seismic (default: hf-dr's)")
    ap.add_argument("--heap-factor", type=float, default=None, help="Seismic (default: hf-dr's)")
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS,
                    help="what to measure (inverted, the reference, always)")
    ap.add_argument("--no-first", action="store_true", help="skip the first-answered-query comparison")
    ap.add_argument("--first-only", action="store_true",
                    help="only the first-answered-query comparison, on WORK's saved Seismic index and encoding")
    ap.add_argument("--work", default="runs/sparse-scale")
    ap.add_argument("--save", action="store_true", help="also write benchmarks/results/sparse_scale.json")
    for hidden in ("--worker", "--data", "--index", "--embeddings", "--system", "--name"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return {"queries": worker_queries, "search": worker_search, "first": worker_first}[a.worker](a)
    for p in (SPLADE, SCIFACT, ARGUANA):
        if not p.exists():
            ap.error(f"{p} not found (real data / weights live in ../shared; HF_DR_SHARED points elsewhere)")
    if a.docs <= N_SCIFACT:
        ap.error(f"--docs must be above SciFact's {N_SCIFACT}")
    a.systems = ["inverted", *[s for s in a.systems if s != "inverted"]]
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    if a.first_only:
        idx = work / f"idx-seismic-{a.docs}"
        if not (idx / "index.json").is_file():
            ap.error(f"--first-only: no saved Seismic index in {idx} (run without it first)")
        built = {"corpus": judged_corpus(work, a.docs, a.docs), "emb": work / f"emb-{a.docs}",
                 "seismic": {"path": idx, "build_s": json.loads((idx / "index.json").read_text())["build_seconds"]}}
        a.systems = ["seismic"]
    else:
        built = build_all(a, work)
    base = {"table": "sparse_scale", "dataset": f"scale corpus: SciFact + 12-word windows, {a.docs:,} documents "
            f"(splade-tiny, max length {a.max_length or 'its own'})", "command": command_line(), "machine": machine(),
            "threads": os.cpu_count()}
    rows = [] if a.first_only else [{**base, "system": f"{name}, top {a.k}", "metrics": m}
                                    for name, m in compare(a, work, built)]
    if "encode" in built:
        rows.append({**base, "table": "sparse_scale_encode", "system": "hf-dr encode --kind sparse (splade-tiny, batch 64)",
                     "metrics": built["encode"]})
    if "seismic" in a.systems and not a.no_first:
        saved = run_first(built["corpus"], script=__file__, index=built["seismic"]["path"])
        rebuilt = run_first(built["corpus"], script=__file__, embeddings=built["emb"])
        rows.append({**base, "table": "sparse_scale_first", "system": "first answered query: saved Seismic index vs a rebuild",
                     "metrics": {"saved_s": saved["first_query_s"], "rebuild_s": rebuilt["first_query_s"],
                                 "ratio": round(saved["first_query_s"] / rebuilt["first_query_s"], 4),
                                 # from the libraries imported on (the process start is the same for both)
                                 "saved_after_imports_s": saved["after_imports_s"],
                                 "rebuild_after_imports_s": rebuilt["after_imports_s"],
                                 "ratio_after_imports": round(saved["after_imports_s"] / rebuilt["after_imports_s"], 4),
                                 "saved_after_imports_vs_build": round(saved["after_imports_s"]
                                                                       / built["seismic"]["build_s"], 4),
                                 "saved_peak_rss_mb": saved["peak_rss_mb"],
                                 "rebuild_peak_rss_mb": rebuilt["peak_rss_mb"]}})
    for r in rows:
        print(json.dumps({"system": r["system"], **r["metrics"]}), flush=True)
    (work / ("sparse_scale_first.json" if a.first_only else "sparse_scale.json")).write_text(json.dumps(rows, indent=1))
    if a.save:
        save_rows("sparse_scale", rows)


if __name__ == "__main__":
    main()
