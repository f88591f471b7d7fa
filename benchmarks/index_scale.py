"""Corpus scale (issue #24): a million documents on one machine — encode -> index (faiss flat and
HNSW, BM25) -> ``hf-dr evaluate --index`` on judged queries, with the issue's numbers measured in one run.

The corpus (built here, deterministic, from ../shared/data): SciFact's 5,183 abstracts whole, under
their own ids, followed by 12-word windows of the offline corpora at a 2-word stride
(``encode_scale.build_corpus(work, n, stride=2)``: SciFact, then ArguAna, then TREC-DL 2019), ``--docs``
documents in all (default 1,000,000), and the same at ``--small`` (default a tenth). The judged
queries are SciFact's 300 test claims; their judgments are SciFact's, each also given to every
window (in the corpus) of the judged abstract, since a window is a passage of it. Model:
all-MiniLM-L6-v2 (its own max length, 256); indexes with hf-dr's defaults (HNSW M=32, efSearch
128; BM25 Lucene, English stemmer and stop words).

Every command runs in its own process (peak RSS: the kernel's rusage of that process, ``wait4``):

* ``hf-dr encode`` (reused when the folder exists), ``hf-dr index`` (faiss flat, faiss HNSW, BM25:
  build seconds, size on disk);
* **memory**: peak RSS of ``hf-dr evaluate --index`` (dense HNSW) and of BM25 search (``hf-dr evaluate
  --retriever bm25 --index``) against 1.5 x (the index's size on disk + the model's weights); the
  non-index memory (peak RSS - index size - model size) at ``--small`` and ``--docs``: growth <= 1.3;
* **first answered query**: a process that opens the saved HNSW index (the library calls of ``hf-dr
  evaluate --index``) and answers one query, against one that rebuilds it from the embeddings (``hf-dr
  evaluate --embeddings --index-type hnsw``): seconds from start to the first answer, <= 1/20; both then
  evaluate every judged query: the metrics (and the runs) must be identical;
* **BM25 throughput**: queries/s of the saved BM25 index (opened memory-mapped, searched through
  ``BM25Index.search``: ranked ``{doc_id: score}`` lists) against bm25s' own (``bm25s.tokenize`` +
  ``BM25.retrieve`` on an index bm25s builds in the same process), on SciFact's and ArguAna's 2,515
  queries, top ``--k``.

    python benchmarks/index_scale.py                      # 1,000,000 documents (hours on 2 CPU cores: the encode)
    python benchmarks/index_scale.py --docs 20000 --max-length 64 --work runs/index-scale-20k   # a quick run

Rows: benchmarks/results/index_scale.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402
from encode_scale import build_corpus, run_measured  # noqa: E402

MODEL = SHARED / "models" / "all-MiniLM-L6-v2"
SCIFACT = SHARED / "data" / "scifact"
ARGUANA = SHARED / "data" / "arguana"
STRIDE = 2
N_SCIFACT = 5183
MB = 1 << 20


# ----------------------------------------------------------------------------- the corpus
def judged_corpus(work: Path, n: int, n_max: int) -> Path:
    """``work/corpus-N``: SciFact whole, then the first ``n - 5183`` windows of the ``n_max``-document
    window set (the small corpus is a prefix of the big one's), SciFact's queries, its test judgments
    given to the judged abstracts and to their windows."""
    folder = work / f"corpus-{n}"
    if (folder / "qrels" / "test.tsv").is_file():
        return folder
    windows = build_corpus(work / f"windows-{n_max - N_SCIFACT}-s{STRIDE}", n_max - N_SCIFACT, stride=STRIDE)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "qrels").mkdir(parents=True)
    from hf_dr.data import load_qrels, save_qrels

    qrels = load_qrels(SCIFACT / "qrels" / "test.tsv")
    judged = {d for docs in qrels.values() for d in docs}
    windows_of: dict[str, list[str]] = {}
    with open(tmp / "corpus.jsonl", "w", encoding="utf-8") as out:
        with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    out.write(line if line.endswith("\n") else line + "\n")
        with open(windows / "corpus.jsonl", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= n - N_SCIFACT:
                    break
                out.write(line)
                wid = json.loads(line)["_id"]
                name, doc, _ = wid.split(":")
                if name == "scifact" and doc in judged:
                    windows_of.setdefault(doc, []).append(wid)
    shutil.copy(SCIFACT / "queries.jsonl", tmp / "queries.jsonl")
    save_qrels({q: {**docs, **{w: g for d, g in docs.items() for w in windows_of.get(d, ())}}
                for q, docs in qrels.items()}, tmp / "qrels" / "test.tsv")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder


def size_mb(path: Path) -> float:
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / MB, 1)


def model_mb() -> float:
    return round(sum(p.stat().st_size for p in MODEL.glob("*.safetensors")) / MB, 1)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "hf_dr.cli", *args]


# ----------------------------------------------------------------------------- workers
def _run_sha(run: dict) -> str:
    h = hashlib.sha256()
    for q in sorted(run):
        for d, s in sorted(run[q].items(), key=lambda x: (-x[1], x[0])):
            h.update(f"{q}\t{d}\t{s:.6f}\n".encode())
    return h.hexdigest()[:16]


def worker_first(a) -> None:
    """The steps of ``hf-dr evaluate --retriever dense`` (the same library calls): the saved index
    (``--index``) or a rebuild (``--embeddings``); prints FIRST when the first query is answered,
    then evaluates every judged query."""
    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate
    from hf_dr.retrieval import build_retriever

    data = load_beir(a.data, split="test")
    opts = {"index": a.index} if a.index else {"embeddings": a.embeddings, "index_type": "hnsw"}
    r = build_retriever("dense", data, str(MODEL), show_progress_bar=False, **opts)
    queries = data.split_queries()
    first = next(iter(queries))
    r.search({first: queries[first]}, 10)
    print("FIRST", flush=True)
    res = evaluate(r, data, k=1000, queries=queries)
    print("RESULT " + json.dumps({"metrics": res.aggregate, "run_sha": _run_sha(res.run)}), flush=True)


def _throughput_queries() -> dict[str, str]:
    out = {}
    for name, folder in (("scifact", SCIFACT), ("arguana", ARGUANA)):
        with open(folder / "queries.jsonl", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    q = json.loads(line)
                    out[f"{name}:{q['_id']}"] = q["text"]
    return out


def worker_bm25(a) -> None:
    """BM25 queries/s: the saved index through hf-dr against bm25s' own index and retrieve, same
    queries, same depth, same tokenisation, in this process."""
    import Stemmer
    import bm25s

    from hf_dr.data import load_beir
    from hf_dr.retrieval import SavedIndex

    queries = _throughput_queries()
    data = load_beir(a.data, split=None)
    t = time.perf_counter()
    ours = SavedIndex(a.index).bm25_index(data)
    open_s = time.perf_counter() - t
    ours.search(dict(list(queries.items())[:20]), a.k)  # warm: page in what the first queries touch
    t = time.perf_counter()
    run = ours.search(queries, a.k)
    ours_s = time.perf_counter() - t
    # bm25s' own: its index of the same texts, its retrieve
    stemmer = Stemmer.Stemmer("english")
    t = time.perf_counter()
    tokens = bm25s.tokenize([x for _, x in data.iter_docs()], stopwords="en", stemmer=stemmer, show_progress=False)
    theirs = bm25s.BM25()
    theirs.index(tokens, show_progress=False)
    build_s = time.perf_counter() - t
    texts = list(queries.values())
    theirs.retrieve(bm25s.tokenize(texts[:20], stopwords="en", stemmer=stemmer, show_progress=False), k=a.k,
                    show_progress=False)
    t = time.perf_counter()
    docs, scores = theirs.retrieve(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
                                   k=a.k, show_progress=False)
    theirs_s = time.perf_counter() - t
    # the same top 10 (queries with a term in the corpus; bm25s pads the others with zero scores)
    ids = ours.doc_ids
    same = sum(1 for i, q in enumerate(queries)
               if list(run[q])[:10] == [ids[j] for j, s in zip(docs[i][:10], scores[i][:10]) if s > 0])
    print("RESULT " + json.dumps({"n_queries": len(queries), "k": a.k, "open_s": round(open_s, 3),
                                  "hf_dr_qps": round(len(queries) / ours_s, 1),
                                  "bm25s_qps": round(len(queries) / theirs_s, 1),
                                  "bm25s_build_s": round(build_s, 1), "same_top10": same}), flush=True)


def run_first(data: Path, **opt) -> dict:
    """Seconds from the start of a worker process to its first answered query, its metrics and peak RSS."""
    argv = [sys.executable, __file__, "--worker", "first", "--data", str(data)]
    for k, v in opt.items():
        argv += [f"--{k}", str(v)]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first, result, log = None, None, []
    for line in p.stdout:
        log.append(line)
        if line.startswith("FIRST") and first is None:
            first = time.perf_counter() - t0
        elif line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) or result is None:
        raise SystemExit(f"{' '.join(argv)} failed:\n{''.join(log)[-3000:]}")
    return {**result, "first_query_s": round(first, 2), "peak_rss_mb": round(ru.ru_maxrss / 1024, 1)}


def run_worker(kind: str, **opt) -> dict:
    argv = [sys.executable, __file__, "--worker", kind]
    for k, v in opt.items():
        argv += [f"--{k}", str(v)]
    p = subprocess.run(argv, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode or not lines:
        raise SystemExit(f"{' '.join(argv)} failed:\n{(p.stdout + p.stderr)[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


# ----------------------------------------------------------------------------- main
def measure_size(a, work: Path, n: int, n_max: int) -> dict:
    """Encode (once), index, evaluate one corpus size; returns what the rows need."""
    corpus = judged_corpus(work, n, n_max)
    emb = work / f"emb-{n}"
    out: dict = {"n": n, "corpus": corpus, "emb": emb}
    if not (emb / "manifest.json").is_file():
        r = run_measured(cli("encode", "--data", str(corpus), "--model", str(MODEL), "--output", str(emb),
                             "--batch-size", "64", "--no-progress", "--overwrite",
                             *(("--max-length", str(a.max_length)) if a.max_length else ())))
        out["encode"] = {"seconds": r["seconds"], "peak_rss_mb": r["peak_rss_mb"],
                         "docs_per_s": round(n / r["seconds"], 1)}
        print(f"[{n}] encode: {out['encode']}", flush=True)
    for name, argv in (("hnsw", ("--embeddings", str(emb), "--backend", "faiss", "--index-type", "hnsw")),
                       ("flat", ("--embeddings", str(emb), "--backend", "faiss", "--index-type", "flat")),
                       ("bm25", ("--data", str(corpus), "--backend", "bm25"))):
        idx = work / f"idx-{name}-{n}"
        r = run_measured(cli("index", *argv, "--output", str(idx), "--overwrite", "--no-progress"))
        manifest = json.loads((idx / "index.json").read_text())
        out[name] = {"path": idx, "build_s": manifest["build_seconds"], "command_s": r["seconds"],
                     "build_rss_mb": r["peak_rss_mb"], "size_mb": size_mb(idx)}
        print(f"[{n}] index {name}: {out[name]}", flush=True)
    for name, argv in (("hnsw", ("--retriever", "dense", "--model", str(MODEL))),
                       ("flat", ("--retriever", "dense", "--model", str(MODEL))),
                       ("bm25", ())):
        ev = work / f"eval-{name}-{n}"
        r = run_measured(cli("evaluate", "--data", str(corpus), *argv, "--index", str(out[name]["path"]),
                             "--output", str(ev)))
        out[name]["eval"] = {"seconds": r["seconds"], "peak_rss_mb": r["peak_rss_mb"],
                             "metrics": json.loads((ev / "metrics.json").read_text())["metrics"]}
        print(f"[{n}] evaluate --index {name}: {out[name]['eval']}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000, help="documents of the big corpus (default 1,000,000)")
    ap.add_argument("--small", type=int, default=None, help="documents of the small corpus (default --docs / 10)")
    ap.add_argument("--k", type=int, default=1000, help="BM25 throughput: documents per query (default 1000)")
    ap.add_argument("--max-length", type=int, default=None,
                    help="encoding max length (default: the model's own, 256; a smaller one makes SciFact's long "
                         "abstracts cheaper to encode in a quick run)")
    ap.add_argument("--work", default="runs/index-scale", help="corpora, embeddings, indexes (kept: re-runs reuse "
                                                               "the corpora and embeddings)")
    ap.add_argument("--worker", choices=["first", "bm25"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--index", help=argparse.SUPPRESS)
    ap.add_argument("--embeddings", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker == "first":
        return worker_first(a)
    if a.worker == "bm25":
        return worker_bm25(a)
    for p in (MODEL, SCIFACT, ARGUANA):
        if not p.exists():
            ap.error(f"{p} not found (real data / weights live in ../shared; HF_DR_SHARED points elsewhere)")
    small = a.small or max(a.docs // 10, N_SCIFACT + 1_000)
    if not N_SCIFACT < small < a.docs:
        ap.error(f"need {N_SCIFACT} < --small ({small}) < --docs ({a.docs})")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    cmd, mach = command_line(), machine()
    dataset = f"scale corpus: SciFact + 12-word windows, {a.docs:,} documents (SciFact test judgments)"
    res = {n: measure_size(a, work, n, a.docs) for n in (small, a.docs)}
    big, sm = res[a.docs], res[small]
    m_mb = model_mb()
    rows = []

    def row(system: str, metrics: dict, target: str, **extra) -> None:
        r = {"table": "index_scale", "dataset": dataset, "system": system, "command": cmd, "machine": mach,
             "threads": os.cpu_count(), "metrics": metrics, "target": target, **extra}
        print(json.dumps({"system": system, **metrics, "target": target}), flush=True)
        rows.append(r)

    for n, r in res.items():
        if "encode" in r:
            row(f"hf-dr encode, {n:,} documents (all-MiniLM-L6-v2, max length {a.max_length or 256}, batch 64)",
                r["encode"], "recorded")
    # 1. memory
    for name, what in (("hnsw", "hf-dr evaluate --retriever dense --index (faiss HNSW)"),
                       ("bm25", "hf-dr evaluate --retriever bm25 --index (BM25)"), ("flat", "hf-dr evaluate "
                                                                                     "--retriever dense --index (faiss flat)")):
        model = m_mb if name != "bm25" else 0.0
        rss, idx = big[name]["eval"]["peak_rss_mb"], big[name]["size_mb"]
        non = {n: round(res[n][name]["eval"]["peak_rss_mb"] - res[n][name]["size_mb"] - model, 1) for n in res}
        row(f"peak RSS of {what}, {a.docs:,} documents",
            {"peak_rss_mb": rss, "index_mb": idx, "model_mb": model,
             "ratio": round(rss / (idx + model), 3), "seconds": big[name]["eval"]["seconds"],
             "ndcg@10": big[name]["eval"]["metrics"].get("ndcg@10")},
            "ratio <= 1.5" if name != "flat" else "recorded")
        row(f"non-index memory of {what} (peak RSS - index - model), {small:,} -> {a.docs:,} documents",
            {f"non_index_{small}_mb": non[small], f"non_index_{a.docs}_mb": non[a.docs],
             f"peak_rss_{small}_mb": sm[name]["eval"]["peak_rss_mb"], f"index_{small}_mb": sm[name]["size_mb"],
             "ratio": round(non[a.docs] / non[small], 3)},
            "ratio <= 1.3" if name != "flat" else "recorded")
    for name in ("hnsw", "flat", "bm25"):
        row(f"hf-dr index ({name}), {a.docs:,} documents",
            {"build_s": big[name]["build_s"], "command_s": big[name]["command_s"], "size_mb": big[name]["size_mb"],
             "build_rss_mb": big[name]["build_rss_mb"]}, "recorded")
    # 2. first answered query: saved HNSW vs a rebuild, and identical metrics
    saved = run_first(big["corpus"], index=big["hnsw"]["path"])
    rebuilt = run_first(big["corpus"], embeddings=big["emb"])
    row(f"time to the first answered query, saved HNSW vs rebuilt, {a.docs:,} documents",
        {"saved_s": saved["first_query_s"], "rebuild_s": rebuilt["first_query_s"],
         "ratio": round(saved["first_query_s"] / rebuilt["first_query_s"], 4),
         "identical_metrics": saved["metrics"] == rebuilt["metrics"],
         "identical_runs": saved["run_sha"] == rebuilt["run_sha"],
         "ndcg@10_saved": saved["metrics"]["ndcg@10"], "ndcg@10_rebuilt": rebuilt["metrics"]["ndcg@10"],
         "saved_peak_rss_mb": saved["peak_rss_mb"], "rebuild_peak_rss_mb": rebuilt["peak_rss_mb"]},
        "ratio <= 0.05, identical metrics")
    # 3. BM25 throughput
    bm = run_worker("bm25", data=big["corpus"], index=big["bm25"]["path"], k=a.k)
    row(f"BM25 queries/s, saved index (hf-dr) vs bm25s' own, {a.docs:,} documents, top {a.k}",
        {**bm, "ratio": round(bm["hf_dr_qps"] / bm["bm25s_qps"], 3)}, "ratio >= 1.0")
    save_rows("index_scale", rows)
    print(f"wrote {len(rows)} rows to benchmarks/results/index_scale.json")


if __name__ == "__main__":
    main()
