"""DDR grid (paper Tables 2 and 6 in miniature): MS MARCO (TREC DL 2019 judged passages)
-> SciFact and ArguAna, all-MiniLM-L6-v2 backbone, on CPU.

One command runs every step through the example scripts (skipping steps whose output
folder already exists in ``--work_dir``), evaluates every system on each target's test
queries and writes ``benchmarks/results/ddr.json``:

    python benchmarks/ddr_grid.py --work_dir ../ddr_runs

Systems per target: zero-shot backbone; DR (full fine-tuning on the source labels);
DDR with the source DAM (before target adaptation); DDR (REM + target DAM initialised from
the source DAM); DDR\\SI (REM + target DAM initialised from the raw backbone); DDR\\DF
(REM trained on the raw backbone + target DAM from the raw backbone).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
METRICS = ("ndcg@10", "recall@100", "recall@1000")


def run_step(cmd: list[str], out: Path, log: Path, steps: list[str]) -> None:
    pretty = "python " + " ".join(shlex.quote(c) for c in cmd)
    steps.append(pretty)
    if (out / "config.json").is_file():
        print(f"[skip] {out} exists", flush=True)
        return
    print(f"[run] {pretty}", flush=True)
    t = time.time()
    with open(log, "a") as f:
        f.write(f"\n$ {pretty}\n")
        f.flush()
        subprocess.run([sys.executable, *cmd], cwd=REPO, check=True, stdout=f, stderr=subprocess.STDOUT)
    print(f"[done] {out} in {time.time() - t:.0f}s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work_dir", required=True, help="where DAMs, REMs and the DR model are written")
    ap.add_argument("--backbone", default=str(SHARED / "models" / "all-MiniLM-L6-v2"))
    ap.add_argument("--source", default=str(SHARED / "data" / "msmarco-trecdl2019"))
    ap.add_argument("--targets", default="scifact,arguana")
    ap.add_argument("--mlm_steps", type=int, default=150, help="MLM steps of each DAM")
    ap.add_argument("--mlm_batch", type=int, default=16)
    ap.add_argument("--mlm_length", type=int, default=64)
    ap.add_argument("--rem_batch", type=int, default=16, help="queries per batch (distinct)")
    ap.add_argument("--rem_epochs", type=float, default=1.0)
    ap.add_argument("--rem_lr", type=float, default=1e-4)
    ap.add_argument("--dr_lr", type=float, default=2e-5)
    ap.add_argument("--lora_rank", type=int, default=192)
    ap.add_argument("--max_query_length", type=int, default=64)
    ap.add_argument("--max_doc_length", type=int, default=128)
    ap.add_argument("--similarity", default="cos", help="cos: the backbone is a cosine model")
    ap.add_argument("--systems", default="zero-shot,DR,DDR (source DAM),DDR,DDR\\SI,DDR\\DF")
    a = ap.parse_args()

    work = Path(a.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "steps.log"
    targets = [t.strip() for t in a.targets.split(",") if t.strip()]
    systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    steps: list[str] = []

    def dam(init: str, corpus: str, out: Path, lr: float, role: str):
        run_step(["examples/adapt_dam.py", "--model_name_or_path", init, "--corpus", corpus, "--role", role,
                  "--eval_documents", "256",
                  "--max_length", str(a.mlm_length), "--per_device_train_batch_size", str(a.mlm_batch),
                  "--max_steps", str(a.mlm_steps), "--learning_rate", str(lr), "--warmup_steps", "10",
                  "--logging_steps", "25", "--save_strategy", "no", "--report_to", "none", "--seed", "0",
                  "--output_dir", str(out)], out, log, steps)

    def train(mode: str, init: str, out: Path, lr: float):
        run_step(["examples/train_ddr.py", "--mode", mode, "--model_name_or_path", init, "--train_data", a.source,
                  "--lora_rank", str(a.lora_rank), "--similarity", a.similarity,
                  "--max_query_length", str(a.max_query_length), "--max_doc_length", str(a.max_doc_length),
                  "--per_device_train_batch_size", str(a.rem_batch), "--num_train_epochs", str(a.rem_epochs),
                  "--learning_rate", str(lr), "--warmup_steps", "10", "--logging_steps", "10",
                  "--save_strategy", "no", "--report_to", "none", "--seed", "0", "--output_dir", str(out)],
                 out, log, steps)

    src_dam, rem, rem_df, dr = work / "dam-source", work / "rem", work / "rem-df", work / "dr"

    from hf_dr.data import load_beir
    from hf_dr.evaluation import format_table
    from hf_dr.factory import evaluate_model
    from hf_dr.models.ddr import DDRModel
    from hf_dr.models.dense import DenseEncoder

    grid_cmd = command_line()
    rows, table, datasets = [], {}, {}

    def evaluate(t: str, s: str) -> None:
        if s not in systems:
            return
        if t not in datasets:
            datasets[t] = load_beir(str(SHARED / "data" / t), split="test")
        data = datasets[t]
        builders = {
            "zero-shot": lambda: DenseEncoder.from_pretrained(a.backbone, pooling="mean", normalize=a.similarity == "cos",
                                                              max_length=a.max_doc_length, max_query_length=a.max_query_length),
            "DR": lambda: DenseEncoder.from_pretrained(str(dr)),
            "DDR (source DAM)": lambda: DDRModel.from_pretrained(str(rem), dam=str(src_dam)),
            "DDR": lambda: DDRModel.from_pretrained(str(rem), dam=str(work / f"dam-{t}-si")),
            "DDR\\SI": lambda: DDRModel.from_pretrained(str(rem), dam=str(work / f"dam-{t}-raw")),
            "DDR\\DF": lambda: DDRModel.from_pretrained(str(rem_df), dam=str(work / f"dam-{t}-raw")),
        }
        enc = builders[s]()
        if isinstance(enc, DDRModel):
            enc.merge()
        t0 = time.time()
        res, _ = evaluate_model(enc, data, top_k=1000, metrics=METRICS, batch_size=64)
        agg = {k: round(v, 4) for k, v in res.aggregate.items()}
        print(f"{t:8s} {s:18s} {agg}  ({time.time() - t0:.0f}s)", flush=True)
        table[f"{t} / {s}"] = agg
        rows.append({"table": "ddr", "dataset": t, "system": s, "command": grid_cmd, "metrics": agg,
                     "n_queries": res.n_queries, "self_matches": res.self_matches,
                     "machine": machine(), "per_query_ndcg10": res.per_query["ndcg@10"]})
        save_rows("ddr", rows)

    # main rows first (each target evaluated as soon as its DAM exists), ablations last
    if any(s in systems for s in ("DDR", "DDR (source DAM)", "DDR\\SI")):
        dam(a.backbone, a.source, src_dam, 5e-5, "source")        # disentangled fine-tuning, step 1
        train("ddr", str(src_dam), rem, a.rem_lr)                  # step 2: REM on the frozen source DAM
    for i, t in enumerate(targets):
        corpus = str(SHARED / "data" / t)
        if "DDR" in systems:
            dam(str(src_dam), corpus, work / f"dam-{t}-si", 2e-5, "target")   # sequential initialisation
        for s in ("zero-shot", "DDR (source DAM)", "DDR"):
            evaluate(t, s)
        if "DR" in systems:
            if i == 0:
                train("dr", a.backbone, dr, a.dr_lr)
            evaluate(t, "DR")
    for t in targets:
        if "DDR\\SI" in systems or "DDR\\DF" in systems:
            dam(a.backbone, str(SHARED / "data" / t), work / f"dam-{t}-raw", 2e-5, "target")
        evaluate(t, "DDR\\SI")
        if "DDR\\DF" in systems:
            train("ddr", a.backbone, rem_df, a.rem_lr)             # REM on the raw backbone
        evaluate(t, "DDR\\DF")
    for f in ("dam_info.json", "train_info.json"):
        for p in sorted(work.glob(f"*/{f}")):
            print(p.parent.name, json.loads(p.read_text()).get("train_loss"),
                  json.loads(p.read_text()).get("heldout_mlm_loss_after"))
    print(format_table(table, METRICS))
    (work / "steps.txt").write_text("\n".join(steps) + "\n")


if __name__ == "__main__":
    main()
