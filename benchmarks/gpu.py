"""hf-dr on a GPU: encoding in fp32 and bf16 against Sentence
Transformers, DDR training under ``accelerate launch`` in bf16, one ``hf-dr adapt`` at the paper's
step count. Every row records the card (``machine``).

(a) ``encode``: ``hf-dr encode`` (dense all-MiniLM-L6-v2, sparse splade-tiny) against
    ``SentenceTransformer.encode_document`` / ``SparseEncoder.encode_document`` on the same texts,
    batch size and max length, in fp32 and bf16 (hf-dr: ``--dtype bf16``, autocast over fp32
    weights; Sentence Transformers: the model loaded in bf16, its own way), on SciFact (plus its
    test nDCG@10: hf-dr through ``hf-dr evaluate --embeddings``, Sentence Transformers through
    ``encode_query`` + exact search, both scored by hf-dr's one metric path) and on a corpus of
    ``--docs`` documents (default 1,000,000: 12-word windows of the offline corpora at a 2-word
    stride, ``encode_scale.build_corpus``). Each system runs in a fresh process: docs/s over the
    whole job (model load, corpus read, encode, output written) and peak GPU memory
    (``torch.cuda.max_memory_allocated``).
(b) ``ddr``: ``accelerate launch --mixed_precision bf16 examples/train_ddr.py`` (a REM on
    all-MiniLM-L6-v2, TREC-DL 2019 graded judgments, ``--ddr-steps`` steps): time, steps/s, loss.
(c) ``adapt``: ``hf-dr adapt --method dodress`` on SciFact at DoDress' step count (10,000 steps,
    lr 2e-6, max length 350; papers/002) in bf16, on the labels of ``--labels`` (an ``hf-dr label``
    folder, e.g. the one ``benchmarks/adapt.py`` made) or its own.

    python benchmarks/gpu.py                                   # everything (a CUDA GPU)
    python benchmarks/gpu.py --parts encode --docs 20000       # a smaller corpus
    python benchmarks/gpu.py --parts encode --docs 2000 --allow-cpu   # a smoke test of the script

Rows: benchmarks/results/gpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MINILM, SPLADE = SHARED / "models" / "all-MiniLM-L6-v2", SHARED / "models" / "splade-tiny"
SCIFACT = SHARED / "data" / "scifact"
MODELS = {"dense": (MINILM, 256), "sparse": (SPLADE, 256)}  # each model's own document max length in hf-dr


def _device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _peak_and_reset() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    peak = torch.cuda.max_memory_allocated() / 2**20
    torch.cuda.reset_peak_memory_stats()
    return round(peak, 1)


def _read_corpus(data: Path) -> list[str]:
    from hf_dr.encoding import doc_to_text

    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        return [doc_to_text(json.loads(line)) for line in f if line.strip()]


def worker(spec: dict) -> dict:
    """One (system, kind, dtype, corpus) in this process."""
    import torch

    kind, system, dtype, data, out = spec["kind"], spec["system"], spec["dtype"], Path(spec["data"]), Path(spec["out"])
    model, max_length = MODELS[kind]
    bs = spec["batch_size"]
    res: dict = {}
    t0 = time.perf_counter()
    if system == "hf-dr":
        from hf_dr.cli import main as cli

        rc = cli(["encode", "--data", str(data), "--model", str(model), "--output", str(out), "--kind", kind,
                  "--max-length", str(max_length), "--batch-size", str(bs), "--dtype", dtype, "--no-progress",
                  "--overwrite"])
        if rc:
            raise SystemExit(f"hf-dr encode exited {rc}")
        n = json.loads((out / "manifest.json").read_text())["n_docs"]
    else:
        texts = _read_corpus(data)
        n = len(texts)
        kw = {"model_kwargs": {"dtype": torch.bfloat16}} if dtype == "bf16" else {}
        if kind == "dense":
            from sentence_transformers import SentenceTransformer

            st = SentenceTransformer(str(model), device=_device(), **kw)
        else:
            from sentence_transformers import SparseEncoder

            st = SparseEncoder(str(model), device=_device(), **kw)
        st.max_seq_length = max_length
        emb = st.encode_document(texts, batch_size=bs, convert_to_tensor=True, show_progress_bar=False)
        out.mkdir(parents=True, exist_ok=True)
        if kind == "dense":
            import numpy as np

            np.save(out / "embeddings.npy", emb.float().cpu().numpy())
        else:
            torch.save(emb.float().cpu().coalesce(), out / "embeddings.pt")
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    res.update(n_docs=n, wall_s=round(wall, 2), docs_per_s=round(n / wall, 1), peak_gpu_mb=_peak_and_reset())
    if spec.get("evaluate"):
        res["ndcg@10"] = round(_ndcg(spec, locals().get("st"), locals().get("emb")), 4)
    return res


def _ndcg(spec: dict, st, emb) -> float:
    """SciFact test nDCG@10 of what the worker encoded."""
    import torch

    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate_run
    from hf_dr.retrieval.run import run_from_scores

    kind, dtype, out = spec["kind"], spec["dtype"], Path(spec["out"])
    if spec["system"] == "hf-dr":
        from hf_dr.cli import main as cli

        ev = out.parent / (out.name + "-eval")
        rc = cli(["evaluate", "--data", str(SCIFACT), "--retriever", kind, "--model", str(MODELS[kind][0]),
                  "--embeddings", str(out), "--dtype", dtype, "--metrics", "ndcg@10", "--output", str(ev)])
        if rc:
            raise SystemExit(f"hf-dr evaluate exited {rc}")
        return float(json.loads((ev / "metrics.json").read_text())["metrics"]["ndcg@10"])
    data = load_beir(str(SCIFACT), split="test")
    queries = {q: t for q, t in data.split_queries().items() if q in data.qrels}
    qids = list(queries)
    q = st.encode_query([queries[i] for i in qids], batch_size=spec["batch_size"], convert_to_tensor=True,
                        show_progress_bar=False)
    d = emb
    if kind == "sparse":
        q, d = q.to_dense(), d.to_dense()
    scores = (q.float() @ d.float().T).cpu()
    top = torch.topk(scores, k=min(1000, scores.shape[1]), dim=1)
    run = run_from_scores(top.values.numpy(), top.indices.numpy(), qids, list(data.corpus["_id"]))
    return evaluate_run(data.qrels, run, metrics=("ndcg@10",)).aggregate["ndcg@10"]


def _child(spec: dict) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True,
                       text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode or not lines:
        tail = (p.stdout + p.stderr)[-3000:]
        raise RuntimeError(f"{spec['system']} {spec['kind']} {spec['dtype']} failed (exit {p.returncode}):\n{tail}")
    return json.loads(lines[-1][len("RESULT "):])


def encode_part(a) -> list[dict]:
    from encode_scale import build_corpus

    work = Path(a.work)
    big = build_corpus(work / f"corpus-{a.docs}", n=a.docs, stride=2)
    corpora = [{"scifact": ("scifact", SCIFACT, True), "scale": (big.name, big, False)}[c] for c in a.corpora]
    rows = []
    for corpus_name, data, with_eval in corpora:
        for kind in a.kinds:
            for dtype in a.dtypes:
                for system in ("hf-dr", "sentence-transformers"):
                    out = work / "emb" / f"{corpus_name}-{kind}-{dtype}-{system}"
                    spec = {"kind": kind, "system": system, "dtype": dtype, "data": str(data), "out": str(out),
                            "batch_size": a.batch_size, "evaluate": with_eval}
                    t = time.perf_counter()
                    try:
                        res = _child(spec)
                    except RuntimeError as e:
                        print(e, flush=True)
                        res = {"error": str(e)[-600:]}
                    shutil.rmtree(out, ignore_errors=True)
                    model = MODELS[kind][0].name
                    st_name = ("SentenceTransformer" if kind == "dense" else "SparseEncoder") + ".encode_document"
                    shown = ("hf-dr encode --dtype " + dtype) if system == "hf-dr" else f"{st_name} ({dtype} weights)"
                    row = {"table": "gpu_encode", "dataset": corpus_name, "system": f"{model}: {shown} on {machine()}",
                           "encoder": "hf-dr encode" if system == "hf-dr" else st_name, "kind": kind,
                           "dtype": dtype, "batch_size": a.batch_size, "max_length": MODELS[kind][1],
                           "command": command_line(), "machine": machine(), **res,
                           "metrics": {k: res[k] for k in ("docs_per_s", "peak_gpu_mb", "ndcg@10") if k in res}}
                    rows.append(row)
                    print(f"[{time.perf_counter() - t:6.1f} s] {corpus_name:14s} {row['system']:45s} "
                          + " ".join(f"{k}={v}" for k, v in res.items() if k != "error"), flush=True)
                    save_rows("gpu", [row])
    return rows


def ddr_part(a) -> list[dict]:
    out = Path(a.work) / "ddr-rem"
    cmd = ["accelerate", "launch", "--num_processes", "1", "--mixed_precision", "bf16",
           str(REPO / "examples" / "train_ddr.py"), "--model_name_or_path", str(MINILM),
           "--train_data", str(SHARED / "data" / "msmarco-trecdl2019"), "--output_dir", str(out),
           "--max_steps", str(a.ddr_steps), "--per_device_train_batch_size", "32", "--logging_steps", "10",
           "--save_steps", str(a.ddr_steps), "--dtype", "bf16"]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - t
    losses = [float(json.loads(ln.replace("'", '"'))["loss"]) for ln in p.stdout.splitlines()
              if ln.startswith("{'loss'") or ln.startswith('{"loss"')]
    row = {"table": "ddr", "dataset": "msmarco-trecdl2019", "system": "train_ddr.py bf16 (accelerate launch)",
           "cli": " ".join(["accelerate launch --mixed_precision bf16 examples/train_ddr.py",
                            "--model_name_or_path ../shared/models/all-MiniLM-L6-v2",
                            "--train_data ../shared/data/msmarco-trecdl2019", f"--max_steps {a.ddr_steps} --dtype bf16"]),
           "command": command_line(), "machine": machine(), "exit": p.returncode, "wall_s": round(wall, 1),
           "steps": a.ddr_steps, "steps_per_s": round(a.ddr_steps / wall, 2) if p.returncode == 0 else None,
           "first_losses": losses[:3], "last_losses": losses[-3:]}
    if p.returncode:
        row["error"] = (p.stdout + p.stderr)[-1500:]
        print(row["error"], flush=True)
    print(f"ddr: exit {p.returncode}, {wall:.0f} s, losses {losses[:2]} ... {losses[-2:]}", flush=True)
    save_rows("gpu", [row])
    return [row]


def adapt_part(a) -> list[dict]:
    out = Path(a.work) / "adapt-dodress-paper"
    cmd = [sys.executable, "-m", "hf_dr.cli", "adapt", "--data", str(SCIFACT), "--model", str(MINILM),
           "--method", "dodress", "--output", str(out), "--overwrite", "--max-steps", str(a.adapt_steps),
           "--dense-teacher", str(MINILM),
           "--learning-rate", "2e-6", "--max-length", "350", "--dtype", "bf16"]
    if a.labels:
        cmd += ["--labels", a.labels]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - t
    row = {"table": "adapt", "dataset": "scifact", "system": f"all-MiniLM-L6-v2 dodress {a.adapt_steps} steps bf16",
           "cli": f"hf-dr adapt --data ../shared/data/scifact --model ../shared/models/all-MiniLM-L6-v2 "
                  f"--method dodress --max-steps {a.adapt_steps} --learning-rate 2e-6 --max-length 350 --dtype bf16",
           "command": command_line(), "machine": machine(), "exit": p.returncode, "wall_s": round(wall, 1)}
    metrics = out / "metrics.json"
    if p.returncode == 0 and metrics.is_file():
        m = json.loads(metrics.read_text())
        row["metrics"] = m
    else:
        row["error"] = (p.stdout + p.stderr)[-1500:]
    print((p.stdout + p.stderr)[-2500:], flush=True)
    save_rows("gpu", [row])
    return [row]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", nargs="+", choices=("encode", "ddr", "adapt"), default=["encode", "ddr", "adapt"])
    p.add_argument("--kinds", nargs="+", choices=("dense", "sparse"), default=["dense", "sparse"],
                   help="encoders of the encode part (default both)")
    p.add_argument("--dtypes", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    p.add_argument("--docs", type=int, default=1_000_000, help="documents of the scale corpus (default 1,000,000)")
    p.add_argument("--corpora", nargs="+", choices=("scifact", "scale"), default=["scifact", "scale"],
                   help="the encode part's corpora, in this order")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--ddr-steps", type=int, default=300)
    p.add_argument("--adapt-steps", type=int, default=10_000)
    p.add_argument("--labels", default=None, help="an `hf-dr label` folder for the adapt part (default: its own)")
    p.add_argument("--work", default="runs/gpu")
    p.add_argument("--allow-cpu", action="store_true", help="run without a GPU (a smoke test of this script)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print("RESULT " + json.dumps(worker(json.loads(a.worker))), flush=True)
        return
    import torch

    if not torch.cuda.is_available() and not a.allow_cpu:
        p.error("no CUDA GPU here: this benchmark measures the GPU (--allow-cpu for a smoke test)")
    for path in [SCIFACT] + [MODELS[k][0] for k in a.kinds]:
        if not path.exists():
            p.error(f"{path} not found (real data/weights live in ../shared; HF_DR_SHARED points elsewhere)")
    print(f"machine: {machine()}", flush=True)
    if "encode" in a.parts:
        encode_part(a)
    if "ddr" in a.parts:
        ddr_part(a)
    if "adapt" in a.parts:
        adapt_part(a)


if __name__ == "__main__":
    main()
