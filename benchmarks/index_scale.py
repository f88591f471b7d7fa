"""Corpus scale: a million documents on one machine — encode -> index (faiss flat and
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
  ``BM25.retrieve`` on an index bm25s builds in the same process), on the first ``--queries`` (1,000)
  of SciFact's and ArguAna's queries, top ``--k`` (1,000); and the peak RSS of BM25 search alone (open the saved index, answer the
  judged queries 32 at a time, top 1000: a search service's memory), beside ``hf-dr evaluate``'s.

    python benchmarks/index_scale.py                      # 1,000,000 documents (about 2 hours on 2 CPU cores,
                                                          # most of it encoding; the encodings are kept and reused)
    python benchmarks/index_scale.py --docs 20000 --max-length 64 --work runs/index-scale-20k   # a quick run

Rows: benchmarks/results/index_scale.json (tables ``index_scale_build``, ``_memory``, ``_growth``,
``_first``, ``_bm25`` in docs/results.md).
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
from common import SHARED, bm25s_own, command_line, machine, save_rows  # noqa: E402
from encode_scale import build_corpus  # noqa: E402

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


#: runs a command and reports its own peak memory: the kernel's high-water mark of the command's
#: process (``wait4``'s ru_maxrss, which after a spawn from a big parent would start at the parent's
#: peak: hence this small launcher between them) and the peaks of its anonymous and file-backed
#: resident memory (``/proc/PID/status`` RssAnon / RssFile, read every 20 ms: the memory-mapped index
#: is file-backed, everything else anonymous)
LAUNCHER = r"""
import json, os, subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t = time.perf_counter()
p = subprocess.Popen(cmd)
peak = {"RssAnon": 0, "RssFile": 0}
while True:
    pid, status, ru = os.wait4(p.pid, os.WNOHANG)  # (not p.poll(): the rusage comes with the wait)
    if pid:
        break
    try:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                key = line.split(":")[0]
                if key in peak:
                    peak[key] = max(peak[key], int(line.split()[1]))
    except OSError:
        pass
    time.sleep(0.02)
p.returncode = os.waitstatus_to_exitcode(status)
with open(out, "w") as f:
    json.dump({"code": p.returncode, "seconds": round(time.perf_counter() - t, 2),
               "peak_rss_mb": round(ru.ru_maxrss / 1024, 1), "peak_anon_mb": round(peak["RssAnon"] / 1024, 1),
               "peak_file_mb": round(peak["RssFile"] / 1024, 1)}, f)
"""


def measure(cmd: list[str]) -> dict:
    """Run ``cmd`` in its own process (through :data:`LAUNCHER`): seconds, peak RSS, peak anonymous /
    file-backed RSS, and its output."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        res = Path(d) / "res.json"
        p = subprocess.run([sys.executable, "-c", LAUNCHER, str(res), *cmd], capture_output=True, text=True)
        if not res.is_file():
            raise SystemExit(f"{' '.join(cmd)}: the launcher failed:\n{p.stderr[-3000:]}")
        r = json.loads(res.read_text())
    if r.pop("code"):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{(p.stdout + p.stderr)[-3000:]}")
    return {**r, "log": p.stdout}


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
    from hf_dr.factory import build_retriever

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
    from hf_dr.data import load_beir
    from hf_dr.retrieval import SavedIndex

    queries = dict(list(_throughput_queries().items())[:a.queries])
    data = load_beir(a.data, split=None)
    t = time.perf_counter()
    ours = SavedIndex(a.index).bm25_index(data)
    open_s = time.perf_counter() - t
    ours.search(dict(list(queries.items())[:20]), a.k)  # warm: page in what the first queries touch
    t = time.perf_counter()
    run = ours.search(queries, a.k)
    ours_s = time.perf_counter() - t
    # bm25s' own: its index of the same texts, its retrieve
    t = time.perf_counter()
    theirs = bm25s_own((x for _, x in data.iter_docs()), k=a.k)
    build_s = time.perf_counter() - t
    texts = list(queries.values())
    theirs(texts[:20])
    t = time.perf_counter()
    docs, scores = theirs(texts)
    theirs_s = time.perf_counter() - t
    # the same scores rank by rank (top 10; bm25s pads a short list with zero scores; which of the
    # documents tied at a score come first is bm25s' arbitrary choice, corpus order in hf-dr)
    same = sum(1 for i, q in enumerate(queries)
               if list(run[q].values())[:10] == [float(s) for s in scores[i][:10] if s > 0])
    print("RESULT " + json.dumps({"n_queries": len(queries), "k": a.k, "open_s": round(open_s, 3),
                                  "hf_dr_qps": round(len(queries) / ours_s, 1),
                                  "bm25s_qps": round(len(queries) / theirs_s, 1),
                                  "bm25s_build_s": round(build_s, 1), "same_top10_scores": same}), flush=True)


def worker_bm25_search(a) -> None:
    """BM25 search alone, as a search service runs it: open the saved index (memory-mapped) and answer
    the judged queries, top 1000, 32 at a time (no corpus read, no evaluation): its memory is the search's."""
    from hf_dr.retrieval import SavedIndex

    folder = Path(a.data)
    judged = {line.split("\t")[0] for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    queries = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            if q["_id"] in judged:
                queries[q["_id"]] = q["text"]
    index = SavedIndex(a.index).bm25_index()
    qids, answered, hits = list(queries), 0, 0
    for s in range(0, len(qids), 32):  # as a service answers them: 32 at a time, each answer handed on
        run = index.search({q: queries[q] for q in qids[s:s + 32]}, 1000)
        answered, hits = answered + len(run), hits + sum(map(len, run.values()))
    print("RESULT " + json.dumps({"queries": answered, "hits": hits}), flush=True)


def run_first(data: Path, script: str | None = None, **opt) -> dict:
    """Seconds from the start of a worker process (``script --worker first``, this file by default)
    to its first answered query, then its metrics and memory; ``after_imports_s``: from the worker's
    IMPORTED line (its libraries imported: the same cost for a saved index and a rebuild) to the first
    answered query, when the worker prints one."""
    import tempfile

    argv = [sys.executable, script or __file__, "--worker", "first", "--data", str(data)]
    for k, v in opt.items():
        argv += [f"--{k}", str(v)]
    with tempfile.TemporaryDirectory() as d:
        res = Path(d) / "res.json"
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(res), *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        first, imported, result, log = None, None, None, []
        for line in p.stdout:
            log.append(line)
            if line.startswith("IMPORTED") and imported is None:
                imported = time.perf_counter() - t0
            elif line.startswith("FIRST") and first is None:
                first = time.perf_counter() - t0
            elif line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
        p.wait()
        mem = json.loads(res.read_text()) if res.is_file() else {"code": 1}
    if mem.pop("code") or result is None:
        raise SystemExit(f"{' '.join(argv)} failed:\n{''.join(log)[-3000:]}")
    return {**result, "first_query_s": round(first, 2),
            "after_imports_s": round(first - imported, 2) if imported is not None else None, **mem}


def run_worker(kind: str, script: str | None = None, **opt) -> dict:
    """``script --worker KIND --OPT VALUE...`` (this file by default) in its own process: its RESULT and memory."""
    argv = [sys.executable, script or __file__, "--worker", kind]
    for k, v in opt.items():
        argv += [f"--{k}", str(v)]
    r = measure(argv)
    lines = [ln for ln in r.pop("log").splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{' '.join(argv)}: no result")
    return {**json.loads(lines[-1][len("RESULT "):]), **r}


# ----------------------------------------------------------------------------- main
def measure_size(a, work: Path, n: int, n_max: int) -> dict:
    """Encode (once), index, search and evaluate one corpus size; returns what the rows need."""
    corpus = judged_corpus(work, n, n_max)
    emb = work / f"emb-{n}"
    out: dict = {"n": n, "corpus": corpus, "emb": emb}
    if not (emb / "manifest.json").is_file():
        r = measure(cli("encode", "--data", str(corpus), "--model", str(MODEL), "--output", str(emb),
                        "--batch-size", "64", "--no-progress", "--overwrite",
                        *(("--max-length", str(a.max_length)) if a.max_length else ())))
        out["encode"] = {"seconds": r["seconds"], "peak_rss_mb": r["peak_rss_mb"],
                         "docs_per_s": round(n / r["seconds"], 1)}
        print(f"[{n}] encode: {out['encode']}", flush=True)
    for name, argv in (("hnsw", ("--embeddings", str(emb), "--backend", "faiss", "--index-type", "hnsw")),
                       ("flat", ("--embeddings", str(emb), "--backend", "faiss", "--index-type", "flat")),
                       ("bm25", ("--data", str(corpus), "--backend", "bm25"))):
        idx = work / f"idx-{name}-{n}"
        r = measure(cli("index", *argv, "--output", str(idx), "--overwrite", "--no-progress"))
        manifest = json.loads((idx / "index.json").read_text())
        out[name] = {"path": idx, "build_s": manifest["build_seconds"], "command_s": r["seconds"],
                     "build_rss_mb": r["peak_rss_mb"], "size_mb": size_mb(idx)}
        print(f"[{n}] index {name}: {({k: v for k, v in out[name].items() if k != 'path'})}", flush=True)
    for name, argv in (("hnsw", ("--retriever", "dense", "--model", str(MODEL))),
                       ("flat", ("--retriever", "dense", "--model", str(MODEL))),
                       ("bm25", ())):
        ev = work / f"eval-{name}-{n}"
        r = measure(cli("evaluate", "--data", str(corpus), *argv, "--index", str(out[name]["path"]),
                        "--output", str(ev)))
        out[name]["eval"] = {k: r[k] for k in ("seconds", "peak_rss_mb", "peak_anon_mb", "peak_file_mb")}
        out[name]["eval"]["metrics"] = json.loads((ev / "metrics.json").read_text())["metrics"]
        print(f"[{n}] evaluate --index {name}: {out[name]['eval']}", flush=True)
    out["bm25"]["search"] = run_worker("bm25-search", data=corpus, index=out["bm25"]["path"])
    print(f"[{n}] BM25 search: {out['bm25']['search']}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000, help="documents of the big corpus (default 1,000,000)")
    ap.add_argument("--small", type=int, default=None, help="documents of the small corpus (default --docs / 10)")
    ap.add_argument("--k", type=int, default=1000, help="BM25 throughput: documents per query (default 1000)")
    ap.add_argument("--queries", type=int, default=1000,
                    help="BM25 throughput: the first N of SciFact's and ArguAna's 2,515 queries (default 1000)")
    ap.add_argument("--max-length", type=int, default=None,
                    help="encoding max length (default: the model's own, 256; a smaller one makes SciFact's long "
                         "abstracts cheaper to encode in a quick run)")
    ap.add_argument("--work", default="runs/index-scale", help="corpora, embeddings, indexes (kept: re-runs reuse "
                                                               "the corpora and embeddings)")
    ap.add_argument("--worker", choices=["first", "bm25", "bm25-search"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--index", help=argparse.SUPPRESS)
    ap.add_argument("--embeddings", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return {"first": worker_first, "bm25": worker_bm25, "bm25-search": worker_bm25_search}[a.worker](a)
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
    big = res[a.docs]
    m_mb = model_mb()
    rows = []

    def row(kind: str, system: str, metrics: dict, target: str) -> None:
        """One row of table ``index_scale_KIND`` (build, memory, growth, first, bm25: the docs show one
        table per kind, each with few columns)."""
        r = {"table": f"index_scale_{kind}", "dataset": dataset, "system": system, "command": cmd, "machine": mach,
             "threads": os.cpu_count(), "metrics": metrics, "target": target}
        print(json.dumps({"system": system, **metrics, "target": target}), flush=True)
        rows.append(r)

    for n, r in res.items():
        if "encode" in r:
            row("build", f"hf-dr encode, {n:,} documents (all-MiniLM-L6-v2, max length {a.max_length or 256}, batch 64)",
                r["encode"], "recorded")
    # 1. memory: peak RSS against the index on disk + the model; the memory that is not the index,
    # small -> big, two ways: peak RSS - index - model, and the peak of anonymous memory (the index is
    # memory-mapped: file-backed)
    for name, what, mem, model in (
            ("hnsw", "hf-dr evaluate --retriever dense --index (faiss HNSW)", lambda r: r["hnsw"]["eval"], m_mb),
            ("bm25", "BM25 search (open the saved index, answer the 300 judged queries, 32 at a time)",
             lambda r: r["bm25"]["search"], 0.0),
            ("bm25", "hf-dr evaluate --retriever bm25 --index (BM25)", lambda r: r["bm25"]["eval"], 0.0),
            ("flat", "hf-dr evaluate --retriever dense --index (faiss flat)", lambda r: r["flat"]["eval"], m_mb)):
        m, idx = mem(big), big[name]["size_mb"]
        target = "recorded" if name == "flat" or what.startswith("hf-dr evaluate --retriever bm25") else None
        row("memory", f"peak RSS of {what}, {a.docs:,} documents",
            {"peak_rss_mb": m["peak_rss_mb"], "index_mb": idx, "model_mb": model,
             "ratio": round(m["peak_rss_mb"] / (idx + model), 3), "peak_anon_mb": m["peak_anon_mb"],
             "peak_file_mb": m["peak_file_mb"], "seconds": m["seconds"]},
            target or "ratio <= 1.5")
        non = {n: round(mem(r)["peak_rss_mb"] - r[name]["size_mb"] - model, 1) for n, r in res.items()}
        anon = {n: mem(r)["peak_anon_mb"] for n, r in res.items()}
        row("growth", f"memory beside the index of {what}, {small:,} -> {a.docs:,} documents",
            {"rss_minus_index_model_small_mb": non[small], "rss_minus_index_model_big_mb": non[a.docs],
             "ratio": round(non[a.docs] / non[small], 3), "peak_anon_small_mb": anon[small],
             "peak_anon_big_mb": anon[a.docs], "anon_ratio": round(anon[a.docs] / anon[small], 3)},
            target or "ratio <= 1.3 (both)")
    for name in ("hnsw", "flat", "bm25"):
        row("build", f"hf-dr index ({name}), {a.docs:,} documents",
            {k: big[name][k] for k in ("build_s", "command_s", "size_mb", "build_rss_mb")}, "recorded")
    # 2. first answered query: saved HNSW vs a rebuild, and identical metrics
    saved = run_first(big["corpus"], index=big["hnsw"]["path"])
    print(f"first answered query, saved: {saved}", flush=True)
    rebuilt = run_first(big["corpus"], embeddings=big["emb"])
    print(f"first answered query, rebuilt: {rebuilt}", flush=True)
    row("first", f"time to the first answered query, saved HNSW vs rebuilt, {a.docs:,} documents",
        {"saved_s": saved["first_query_s"], "rebuild_s": rebuilt["first_query_s"],
         "ratio": round(saved["first_query_s"] / rebuilt["first_query_s"], 4),
         "identical_metrics": saved["metrics"] == rebuilt["metrics"],
         "identical_runs": saved["run_sha"] == rebuilt["run_sha"],
         "ndcg@10_saved": saved["metrics"]["ndcg@10"], "ndcg@10_rebuilt": rebuilt["metrics"]["ndcg@10"],
         "saved_peak_rss_mb": saved["peak_rss_mb"], "rebuild_peak_rss_mb": rebuilt["peak_rss_mb"]},
        "ratio <= 0.05, identical metrics")
    # 3. BM25 throughput
    bm = run_worker("bm25", data=big["corpus"], index=big["bm25"]["path"], k=a.k, queries=a.queries)
    row("bm25", f"BM25 queries/s, saved index (hf-dr) vs bm25s' own, {a.docs:,} documents, top {a.k}",
        {**{k: v for k, v in bm.items() if k not in ("seconds", "peak_anon_mb", "peak_file_mb")},
         "ratio": round(bm["hf_dr_qps"] / bm["bm25s_qps"], 3)}, "ratio >= 1.0")
    save_rows("index_scale", rows)
    print(f"wrote {len(rows)} rows to benchmarks/results/index_scale.json")


if __name__ == "__main__":
    main()
