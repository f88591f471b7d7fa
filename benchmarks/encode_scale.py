"""Corpus-scale encoding: memory, throughput, kill -9 + resume, two processes — `hf-dr encode`
against today's (pre-streaming) encode loop and sentence-transformers, all in one run.

The scale corpus (built here, from ../shared/data, deterministic): the documents of BEIR SciFact,
BEIR ArguAna and the TREC-DL-2019 passages, in that order, cut into consecutive non-overlapping
windows of 12 words (a passage-like unit of a real corpus). Once 200,000 windows are reached the
builder takes only the first window of each remaining document of that file: ``corpus-200k`` holds
201,441 documents, ``corpus-20k`` every 10th of them (20,145). Model: all-MiniLM-L6-v2 at max length 16, batch 64 (CPU minutes);
the two-process check also runs splade-tiny (sparse).

Each system runs in its own process (peak RSS from the kernel's rusage of that process, wall
time of the whole command: model load, corpus reading, encoding, writing the output):

* ``hf-dr encode`` (streaming, sharded: this issue);
* today's loop: ``hf_dr.encoding.encode`` as of commit 6297cc0 (read from git), on the corpus
  loaded into memory, output saved as one .npy;
* ``SentenceTransformer.encode`` on the same texts, max length and batch size.

    python benchmarks/encode_scale.py                     # everything (~40 min on 2 CPU cores)
    python benchmarks/encode_scale.py --parts rss         # corpus, rss, resume, distributed

Results: benchmarks/results/encode_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LEGACY_COMMIT = "6297cc0"  # the last commit with the whole-corpus encode loop
WORDS = 12
MODEL = SHARED / "models" / "all-MiniLM-L6-v2"
SPARSE_MODEL = SHARED / "models" / "splade-tiny"


def window_rows(n: int, stride: int = WORDS) -> list[dict]:
    """The first ``n`` windows of ``WORDS`` words, a window every ``stride`` words, of the offline
    corpora in order (SciFact, ArguAna, TREC-DL 2019). ``stride = WORDS``: consecutive,
    non-overlapping windows (the offline corpora hold about 264k); a 3-word stride gives about 1.05M
    overlapping ones. (Before 2026-11-29 it returned ``n`` plus one window of every later document of
    the corpus file it stopped in: 201,441 for 200,000, 1,002,809 for 1,000,000, 8,965 for 4,000.)"""
    rows = []
    for name in ("scifact", "arguana", "msmarco-trecdl2019"):
        with open(SHARED / "data" / name / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                words = ((d.get("title") or "") + " " + (d.get("text") or "")).split()
                for i in range(0, max(1, len(words) - WORDS + stride) if stride < WORDS else len(words), stride):
                    rows.append({"_id": f"{name}:{d['_id']}:{i // stride}", "title": "",
                                 "text": " ".join(words[i:i + WORDS])})
                    if len(rows) == n:
                        return rows
    if len(rows) < n:
        raise SystemExit(f"only {len(rows)} windows in ../shared/data: cannot build a {n}-document corpus")
    return rows


def write_corpus(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    (folder / "queries.jsonl").write_text("")
    return folder


def build_corpus(work: Path, n: int = 200_000, stride: int | None = None):
    """``stride=None``: ``corpus-200k`` and ``corpus-20k`` (every 10th) under ``work`` (this
    benchmark's pair); a stride: one folder ``work`` of ``n`` windows at that stride."""
    if stride is not None:
        if (work / "corpus.jsonl").is_file():
            return work
        return write_corpus(work, window_rows(n, stride))
    big, small = work / "corpus-200k", work / "corpus-20k"
    if (big / "corpus.jsonl").is_file() and (small / "corpus.jsonl").is_file():
        return big, small
    rows = window_rows(n)
    write_corpus(big, rows)
    write_corpus(small, rows[::10])
    return big, small


def run_measured(cmd: list[str], env: dict | None = None, kill_when=None) -> dict:
    """Run ``cmd``; wall seconds and peak RSS (MB) of the process (and its children: rusage of the
    waited process covers its own peak; children are waited by it). ``kill_when()`` -> SIGKILL."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    killed = False
    if kill_when is not None:
        while p.poll() is None:
            if kill_when():
                p.send_signal(signal.SIGKILL)
                killed = True
                break
            time.sleep(0.2)
    _, status, ru = os.wait4(p.pid, 0)
    out = p.stdout.read()
    wall = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code != 0 and not killed:
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{out[-3000:]}")
    return {"seconds": round(wall, 2), "peak_rss_mb": round(ru.ru_maxrss / 1024, 1), "killed": killed, "log": out}


def hf_dr_encode(data: Path, out: Path, model: Path, max_length: int, batch_size: int, launcher=None,
                 kind: str = "auto") -> list[str]:
    args = ["encode", "--data", str(data), "--model", str(model), "--output", str(out), "--max-length",
            str(max_length), "--batch-size", str(batch_size), "--kind", kind, "--no-progress"]
    if launcher:
        return [*launcher, "-m", "hf_dr.cli", *args]
    return [sys.executable, "-m", "hf_dr.cli", *args]


def worker(kind: str, data: Path, out: Path, max_length: int, batch_size: int) -> None:
    """Today's loop or sentence-transformers on the whole corpus in memory (run in a child process)."""
    import numpy as np

    texts = []
    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            texts.append((d["title"] + " " + d["text"]).strip())
    if kind == "st":
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(MODEL), device="cpu")
        st.max_seq_length = max_length
        emb = st.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    else:
        import importlib.util
        import tempfile

        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{LEGACY_COMMIT}:hf_dr/encoding.py"], check=True,
                             capture_output=True, text=True).stdout
        path = Path(tempfile.mkdtemp()) / "legacy_encoding.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location("legacy_encoding", path)
        legacy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(legacy)
        from hf_dr.encoding import embed
        from hf_dr.models import load_encoder

        m = load_encoder(str(MODEL)).eval()
        emb = legacy.encode(texts, m.tokenizer, lambda ids, mask: embed(m, ids, mask, False), batch_size=batch_size,
                            max_length=max_length, device="cpu", show_progress_bar=False)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "embeddings.npy", np.asarray(emb, dtype=np.float32))


def load(folder: Path):
    from hf_dr.embeddings import Embeddings

    return Embeddings(folder).matrix()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="runs/encode-scale", help="corpora and outputs (deleted outputs are re-made)")
    ap.add_argument("--parts", nargs="+", default=["rss", "resume", "distributed"],
                    choices=["rss", "resume", "distributed"])
    ap.add_argument("--max-length", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--worker", choices=["legacy", "st"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, Path(a.data), Path(a.out), a.max_length, a.batch_size)

    import shutil

    import numpy as np

    work = Path(a.work)
    big, small = build_corpus(work)
    L, B = a.max_length, a.batch_size
    setting = f"MiniLM, max_len {L}, batch {B}"
    cmd = command_line()
    rows = []

    def fresh(name: str) -> Path:
        p = work / name
        shutil.rmtree(p, ignore_errors=True)
        return p

    def row(system: str, metrics: dict, **extra) -> None:
        r = {"table": "scale", "dataset": "scale corpus (12-word windows of SciFact+ArguAna+TREC-DL)",
             "system": system, "command": cmd, "machine": machine(), "threads": os.cpu_count(),
             "metrics": metrics, **extra}
        print(json.dumps({"system": system, **metrics}), flush=True)
        rows.append(r)
        save_rows("encode_scale", [r])

    res = {}
    if "rss" in a.parts or "resume" in a.parts:
        for name, data in (("20k", small), ("200k", big)):
            res[f"new-{name}"] = run_measured(hf_dr_encode(data, fresh(f"emb-{name}"), MODEL, L, B))
    if "rss" in a.parts:
        for kind in ("legacy", "st"):
            res[kind] = run_measured([sys.executable, __file__, "--worker", kind, "--data", str(big),
                                      "--out", str(fresh(f"out-{kind}")), "--max-length", str(L),
                                      "--batch-size", str(B)])
        n = 200_000
        new20, new200 = res["new-20k"], res["new-200k"]
        row(f"hf-dr encode: peak RSS 200k / 20k documents ({setting})",
            {"rss_20k_mb": new20["peak_rss_mb"], "rss_200k_mb": new200["peak_rss_mb"],
             "ratio": round(new200["peak_rss_mb"] / new20["peak_rss_mb"], 3)}, target="ratio <= 1.3")
        legacy_emb = np.load(work / "out-legacy" / "embeddings.npy")
        st_emb = np.load(work / "out-st" / "embeddings.npy")
        ours = load(work / "emb-200k")
        for kind, label, other in (("legacy", f"today's encode loop ({LEGACY_COMMIT})", legacy_emb),
                                   ("st", "SentenceTransformer.encode", st_emb)):
            row(f"200k documents: hf-dr encode vs {label} ({setting})",
                {"hf_dr_docs_per_s": round(n / new200["seconds"], 1),
                 "peer_docs_per_s": round(n / res[kind]["seconds"], 1),
                 "ratio": round(res[kind]["seconds"] / new200["seconds"], 3),
                 "hf_dr_rss_mb": new200["peak_rss_mb"], "peer_rss_mb": res[kind]["peak_rss_mb"],
                 "max_abs_diff": float(np.abs(ours - other).max())}, target="ratio >= 0.95 (throughput)")
    if "resume" in a.parts:
        out = fresh("emb-200k-killed")
        plan = json.loads((work / "emb-200k" / "manifest.json").read_text())
        half = plan["n_shards"] // 2
        first = run_measured(hf_dr_encode(big, out, MODEL, L, B),
                             kill_when=lambda: len(list((out / "shards").glob("*.json"))) >= half)
        done_at_kill = len(list((out / "shards").glob("*.json")))
        second = run_measured(hf_dr_encode(big, out, MODEL, L, B))
        a_, b_ = load(work / "emb-200k"), load(out)
        total = first["seconds"] + second["seconds"]
        row(f"kill -9 at {done_at_kill}/{plan['n_shards']} shards, then the same command again (200k, {setting})",
            {"uninterrupted_s": res["new-200k"]["seconds"], "killed_s": first["seconds"], "resumed_s": second["seconds"],
             "ratio": round(total / res["new-200k"]["seconds"], 3), "identical": bool(np.array_equal(a_, b_))},
            target="identical, ratio <= 1.25")
    if "distributed" in a.parts:
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2",
                    "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        for label, model in (("MiniLM (dense)", MODEL), ("splade-tiny (sparse)", SPARSE_MODEL)):
            tag = "dense" if model == MODEL else "sparse"
            one_dir = work / "emb-20k" if tag == "dense" and (work / "emb-20k" / "manifest.json").is_file() \
                else fresh(f"emb-20k-{tag}-1")
            if not (one_dir / "manifest.json").is_file():
                res[f"one-{tag}"] = run_measured(hf_dr_encode(small, one_dir, model, L, B, kind=tag))
            two_dir = fresh(f"emb-20k-{tag}-2")
            res[f"two-{tag}"] = run_measured(hf_dr_encode(small, two_dir, model, L, B, launcher=launcher, kind=tag))
            one, two = load(one_dir), load(two_dir)
            if tag == "sparse":
                same_structure = bool(np.array_equal(one.indptr, two.indptr) and np.array_equal(one.indices, two.indices))
                diff = float(abs(one - two).max())
                nnz = float(np.diff(one.indptr).mean())
            else:
                same_structure = one.shape == two.shape
                diff = float(np.abs(one - two).max())
                nnz = None
            row(f"accelerate launch --cpu --num_processes 2 vs 1 process: {label}, 20k, max_len {L}",
                {"max_abs_diff": diff, "same_structure": same_structure,
                 **({"nnz_doc": round(nnz, 1)} if nnz is not None else {})},
                target="dense <= 1e-5, sparse identical structure")
    (work / "logs.json").write_text(json.dumps({k: v["log"][-4000:] for k, v in res.items()}, indent=1))


if __name__ == "__main__":
    main()
