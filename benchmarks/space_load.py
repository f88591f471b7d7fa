"""Load test of the search Space: many visitors search corpus A while corpus B's index is built.

    python benchmarks/space_load.py                          # 20 clients, 60 s
    python benchmarks/space_load.py --clients 4 --seconds 10  # a quick check

Starts ``spaces/search_demo/app.py`` on a free loopback port (GRADIO_SERVER_PORT) with two
configured corpora (``HF_DR_CORPORA="A=...;B=..."``: A = the bundled SciFact sample, 500 documents,
B = ``../shared/data/scifact``, 5,183 documents) and BM25 built for both at start-up. Once A
answers, one client asks for a dense search on B (all-MiniLM-L6-v2 by default: encoding B takes a
while on a CPU) and keeps asking until B answers, while ``--clients`` clients (one gradio_client
each) send BM25 searches on A (the sample's queries, round robin) for ``--seconds`` seconds.

Reports total requests, errors (exceptions or a ⚠️ message: expect 0), and p50 / p95 / max
latency of the BM25 searches on A, overall and for those sent while B's index was being built.
Results: benchmarks/results/space_load.json (the command line, machine and date recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402
from space_screenshot import REPO, start_app, stop_app  # noqa: E402

SAMPLE = REPO / "hf_dr" / "data" / "sample" / "scifact-mini"
SOURCE_DAM = "source DAM (the REM's own)"


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def _stats(lat: list[float]) -> dict:
    r = lambda x: None if x is None else round(x, 3)  # noqa: E731
    return {"n": len(lat), "p50_s": r(_pct(lat, 50)), "p95_s": r(_pct(lat, 95)), "max_s": r(max(lat) if lat else None)}


def _rel(p: Path) -> str:
    return os.path.relpath(p, REPO)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--corpus-a", default=str(SAMPLE), help="searched with BM25 by every client")
    ap.add_argument("--corpus-b", default=str(SHARED / "data" / "scifact"), help="its index is built meanwhile")
    ap.add_argument("--b-retriever", default="Dense", help="the index built on B (as labelled in the app)")
    ap.add_argument("--startup-timeout", type=float, default=300)
    ap.add_argument("--no-save", action="store_true", help="print only; do not write the results file")
    a = ap.parse_args()

    from gradio_client import Client

    corpus_a, corpus_b = Path(a.corpus_a).resolve(), Path(a.corpus_b).resolve()
    queries = [json.loads(line)["text"] for line in (corpus_a / "queries.jsonl").read_text().splitlines()
               if line.strip()][:200]
    env = {"HF_DR_CORPUS": "", "HF_DR_CORPORA": f"A={corpus_a};B={corpus_b}", "HF_DR_PREBUILD": "BM25",
           "HF_HUB_OFFLINE": "1", "GRADIO_SERVER_NAME": "127.0.0.1"}
    tmp = tempfile.TemporaryDirectory(prefix="hf-dr-space-load-")
    log = Path(tmp.name) / "app.log"
    proc, port = start_app(env, log_path=log)
    url = f"http://127.0.0.1:{port}/"

    def search(client, corpus, retriever, query):
        status, _html, table = client.predict(corpus, retriever, SOURCE_DAM, True, 10, query, api_name="/search")
        rows = table.get("data", []) if isinstance(table, dict) else table
        return status, rows

    try:
        boot = Client(url, verbose=False)
        t0 = time.time()
        while True:  # A's BM25 index (prebuilt at start-up) answers
            status, rows = search(boot, "A", "BM25", queries[0])
            if rows:
                break
            if time.time() - t0 > a.startup_timeout:
                raise RuntimeError(f"corpus A does not answer: {status}")
            time.sleep(0.5)

        b = {"start": None, "end": None, "being_built_replies": 0, "error": None}
        stop = threading.Event()

        def build_b():
            client = Client(url, verbose=False)
            b["start"] = time.perf_counter()
            while time.perf_counter() - b["start"] < a.seconds + 3600:
                try:
                    status, rows = search(client, "B", a.b_retriever, queries[0])
                except Exception as e:  # noqa: BLE001 - recorded (not when the server is being stopped)
                    if not stop.is_set():
                        b["error"] = repr(e)
                    return
                if rows:
                    b["end"] = time.perf_counter()
                    return
                if "being built" not in status:
                    b["error"] = status
                    return
                b["being_built_replies"] += 1

        clients = [Client(url, verbose=False) for _ in range(a.clients)]
        results: list[tuple[float, float, bool]] = []  # (sent, latency, ok)
        errors: list[str] = []
        lock = threading.Lock()

        def visitor(i: int, client):
            j = i
            while not stop.is_set():
                q = queries[j % len(queries)]
                j += a.clients
                t = time.perf_counter()
                try:
                    status, rows = search(client, "A", "BM25", q)
                    ok = "⚠️" not in status
                    err = None if ok else status
                except Exception as e:  # noqa: BLE001 - counted
                    ok, err = False, repr(e)
                with lock:
                    results.append((t, time.perf_counter() - t, ok))
                    if err:
                        errors.append(err[:300])

        builder = threading.Thread(target=build_b, daemon=True)
        builder.start()
        time.sleep(0.2)  # B's build has been asked for
        threads = [threading.Thread(target=visitor, args=(i, c), daemon=True) for i, c in enumerate(clients)]
        t_start = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(a.seconds)
        stop.set()
        for t in threads:
            t.join(120)
        t_end = time.perf_counter()
    finally:
        stop_app(proc)
        log_tail = log.read_text()[-3000:] if log.is_file() else ""
        tmp.cleanup()

    lat = [x for _, x, ok in results if ok]
    b_end = b["end"] or float("inf")
    during = [x for s, x, ok in results if ok and b["start"] <= s < b_end]
    overall, while_building = _stats(lat), _stats(during)
    # flat numbers (the README tables take numeric metrics); the rest of the record beside them
    metrics = {
        "requests": len(results), "errors": sum(not ok for _, _, ok in results),
        "requests_per_s": round(len(results) / (t_end - t_start), 2),
        "p50_s": overall["p50_s"], "p95_s": overall["p95_s"], "max_s": overall["max_s"],
        "searches_during_B_build": while_building["n"], "p95_s_during_B_build": while_building["p95_s"],
        "max_s_during_B_build": while_building["max_s"],
    }
    metrics = {k: v for k, v in metrics.items() if v is not None}
    build = {"B_build_s": None if b["end"] is None else round(b["end"] - b["start"], 1),
             "B_build_finished_during_run": b["end"] is not None and b["end"] <= t_end,
             "B_being_built_replies": b["being_built_replies"], "B_error": b["error"]}
    report = {"table": "space_load", "dataset": f"A={corpus_a.name}, B={corpus_b.name}",
              "system": f"BM25 searches on A while the {a.b_retriever} index of B is built",
              "command": command_line(), "machine": machine(), "clients": a.clients, "seconds": a.seconds,
              "corpus_a": _rel(corpus_a), "corpus_b": _rel(corpus_b), "metrics": metrics, **build,
              "sample_errors": errors[:5]}
    print(json.dumps(report, indent=1, ensure_ascii=False))
    if metrics["errors"] or b["error"]:
        print(log_tail, file=sys.stderr)
    if not a.no_save:
        print(f"wrote {save_rows('space_load', [report])}")
    return 0 if not metrics["errors"] and not b["error"] else 1


if __name__ == "__main__":
    sys.exit(main())
