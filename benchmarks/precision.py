"""Mixed precision (``--dtype``): does bf16 change what hf-dr computes?

(a) SciFact test nDCG@10 of all-MiniLM-L6-v2 and splade-tiny encoded in fp32 and in bf16 (CPU
    autocast on a CPU machine, the GPU's autocast on a GPU), through ``build_retriever`` + ``evaluate``
    as ``hf-dr evaluate --dtype ...`` runs them; the difference is reported (target: |diff| <= 0.003).
(b) every objective (contrastive, margin-mse, ranknet, berm, splade+flops, mlm): a short
    ``RetrievalTrainer`` run in fp32 and in bf16 from the same seed on a slice of SciFact's train
    qrels triplets; both loss curves, their max / mean absolute difference, and a plot
    (docs/img/precision_losses.png).

    python benchmarks/precision.py                              # the whole benchmark
    python benchmarks/precision.py --limit 300 --steps 5 --parts train --no-plot   # a smoke test

Rows: benchmarks/results/precision.json (command, machine, date).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MINILM, SPLADE = SHARED / "models" / "all-MiniLM-L6-v2", SHARED / "models" / "splade-tiny"
OBJECTIVES = ("contrastive", "margin-mse", "ranknet", "berm", "splade+flops", "mlm")


def retrieval(args) -> list[dict]:
    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate
    from hf_dr.precision import dtype_name
    from hf_dr.factory import build_retriever

    data = load_beir(str(SHARED / "data" / "scifact"), split="test")
    if args.limit:  # a smoke test: the first --limit documents, and the queries judged on them
        import dataclasses

        corpus = data.corpus.select(range(min(args.limit, len(data.corpus))))
        keep = set(corpus["_id"])
        qrels = {q: {d: g for d, g in r.items() if d in keep} for q, r in data.qrels.items()}
        data = dataclasses.replace(data, corpus=corpus, qrels={q: r for q, r in qrels.items() if r})
    queries = {q: t for q, t in data.split_queries().items() if q in data.qrels}
    rows = []
    for kind, model in (("dense", MINILM), ("sparse", SPLADE)):
        scores = {}
        for dtype in ("fp32", "bf16"):
            t0 = time.perf_counter()
            r = build_retriever(kind, data, str(model), dtype=dtype, batch_size=32, show_progress_bar=False)
            res = evaluate(r, data, metrics=("ndcg@10", "recall@100"), queries=queries, show_progress_bar=False)
            scores[dtype] = res.aggregate
            print(f"{model.name:18s} {dtype}: nDCG@10 {res.aggregate['ndcg@10']:.4f} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        diff = scores["bf16"]["ndcg@10"] - scores["fp32"]["ndcg@10"]
        rows.append({"table": "precision_retrieval",
                     "dataset": "scifact" + (f"[:{args.limit} docs]" if args.limit else ""),
                     "system": f"{model.name} ({machine()})", "command": command_line(), "machine": machine(),
                     "metrics": {"nDCG@10 fp32": round(scores["fp32"]["ndcg@10"], 4),
                                 "nDCG@10 bf16": round(scores["bf16"]["ndcg@10"], 4),
                                 "bf16 - fp32": round(diff, 4)},
                     "cli": f"hf-dr evaluate --data ../shared/data/scifact --retriever {kind} "
                            f"--model ../shared/models/{model.name} --dtype bf16",
                     "bf16_resolves_to": dtype_name("bf16"),
                     "fp32": {k: round(v, 4) for k, v in scores["fp32"].items()},
                     "bf16": {k: round(v, 4) for k, v in scores["bf16"].items()},
                     "ndcg@10_diff": round(diff, 4), "within_0.003": abs(diff) <= 0.003})
        print(f"{model.name}: bf16 - fp32 nDCG@10 = {diff:+.4f}", flush=True)
    return rows


def _case(name: str, limit: int):
    """(model, objective, dataset, collator) of one objective, from fresh weights."""
    from datasets import Dataset
    from transformers import AutoModelForMaskedLM

    from hf_dr.adaptation.mlm import RandomWindowMLMCollator, tokenize_corpus
    from hf_dr.data import RetrievalCollator, UnitCollator, load_beir
    from hf_dr.data.qrels_triplets import triplets_from_qrels
    from hf_dr.labeling.units import annotate_units
    from hf_dr.models import load_encoder
    from hf_dr.models.berm import BERMEncoder
    from hf_dr.models.splade import SPLADECAI
    from hf_dr.objectives import (BERMObjective, ContrastiveObjective, MarginMSEObjective, MLMObjective,
                                  RankNetObjective, SpladeObjective)

    data = load_beir(str(SHARED / "data" / "scifact"), split="train")
    rows = triplets_from_qrels(data, min_positive_grade=1, seed=0)
    rows = rows.select(range(min(limit, len(rows))))
    # Margin-MSE's teacher: a fixed margin of 1 per triplet (the curves compare precisions, not teachers)
    scored = rows.add_column("scores", [[1.0, 0.0]] * len(rows))
    if name == "mlm":
        model = AutoModelForMaskedLM.from_pretrained(str(SPLADE))
        texts = [r["pos"] for r in rows]
        return model, MLMObjective(), tokenize_corpus(texts, data_tokenizer(SPLADE)), \
            RandomWindowMLMCollator(data_tokenizer(SPLADE), seed=0)
    if name == "splade+flops":
        model = SPLADECAI.from_backbone(str(SPLADE), max_query_length=32, max_doc_length=128)
        return model, SpladeObjective(warmup_steps=0), scored, RetrievalCollator(model.tokenizer, 32, 128)
    if name == "berm":
        model = BERMEncoder.from_backbone(str(MINILM), pooling="mean", similarity="cos", max_doc_length=128)
        units = annotate_units(Dataset.from_dict({k: rows[k] for k in ("query", "pos", "neg")}),
                               show_progress_bar=False)
        return model, BERMObjective(), units, UnitCollator(model.tokenizer, 32, 128, score_column=None)
    model = load_encoder(str(MINILM), kind="dense")
    collator = RetrievalCollator(model.tokenizer, 32, 128, score_column="scores" if name == "margin-mse" else None)
    objective = {"contrastive": ContrastiveObjective(), "margin-mse": MarginMSEObjective(),
                 "ranknet": RankNetObjective()}[name]
    return model, objective, scored if name == "margin-mse" else rows, collator


def data_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def train_curve(name: str, dtype: str, steps: int, limit: int, batch_size: int) -> list[float]:
    from transformers import set_seed

    from hf_dr.precision import with_training_precision
    from hf_dr.training import RetrievalTrainer, RetrievalTrainingArguments

    set_seed(0)
    model, objective, ds, collator = _case(name, limit)
    with tempfile.TemporaryDirectory() as tmp:
        args = RetrievalTrainingArguments(output_dir=tmp, max_steps=steps, per_device_train_batch_size=batch_size,
                                          learning_rate=2e-5, logging_steps=1, save_strategy="no", seed=0,
                                          report_to=[], disable_tqdm=True, train_sampling_strategy="sequential")
        args = with_training_precision(args, dtype)
        trainer = RetrievalTrainer(model=model, args=args, train_dataset=ds, data_collator=collator,
                                   objective=objective)
        model.train()
        trainer.train()
    return [round(e["loss"], 6) for e in trainer.state.log_history if "loss" in e]


def training(args) -> tuple[list[dict], dict]:
    rows, curves = [], {}
    for name in args.objectives:
        t0 = time.perf_counter()
        fp32 = train_curve(name, "fp32", args.steps, args.limit or 2000, args.batch_size)
        bf16 = train_curve(name, "bf16", args.steps, args.limit or 2000, args.batch_size)
        diffs = [abs(a - b) for a, b in zip(fp32, bf16)]
        curves[name] = (fp32, bf16)
        rows.append({"table": "precision_training", "dataset": "scifact-train-qrels", "system": name,
                     "command": command_line(), "machine": machine(), "steps": args.steps,
                     "metrics": {"mean fp32 loss": round(sum(fp32) / len(fp32), 4),
                                 "max abs(bf16 - fp32)": round(max(diffs), 4),
                                 "mean abs(bf16 - fp32)": round(sum(diffs) / len(diffs), 4)},
                     "batch_size": args.batch_size, "loss_fp32": fp32, "loss_bf16": bf16,
                     "max_abs_diff": round(max(diffs), 6), "mean_abs_diff": round(sum(diffs) / len(diffs), 6),
                     "mean_fp32_loss": round(sum(fp32) / len(fp32), 6)})
        print(f"{name:14s} max |bf16 - fp32| {max(diffs):.4f}, mean {sum(diffs) / len(diffs):.4f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return rows, curves


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(curves)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 2.8), squeeze=False)
    for ax, (name, (fp32, bf16)) in zip(axes[0], curves.items()):
        ax.plot(range(1, len(fp32) + 1), fp32, label="fp32", lw=1.5)
        ax.plot(range(1, len(bf16) + 1), bf16, label="bf16", lw=1.0, ls="--")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("training loss", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("hf-dr: training loss in fp32 and bf16 (same seed, SciFact train triplets)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path.relative_to(REPO)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", nargs="+", choices=("retrieval", "train"), default=["retrieval", "train"])
    p.add_argument("--objectives", nargs="+", choices=OBJECTIVES, default=list(OBJECTIVES))
    p.add_argument("--limit", type=int, default=None,
                   help="smoke test: retrieval over the first N documents; training on the first N triplets")
    p.add_argument("--steps", type=int, default=100, help="training steps per run (default 100)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--no-plot", action="store_true")
    a = p.parse_args()
    for path in (MINILM, SPLADE, SHARED / "data" / "scifact"):
        if not path.exists():
            p.error(f"{path} not found (real data/weights live in ../shared)")
    if "retrieval" in a.parts:
        save_rows("precision", retrieval(a))
    if "train" in a.parts:
        rows, curves = training(a)
        save_rows("precision", rows)
        if not a.no_plot:
            plot(curves, REPO / "docs" / "img" / "precision_losses.png")


if __name__ == "__main__":
    main()
