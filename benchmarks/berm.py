"""BERM rows (papers/000, Table 1 and Table 5 in miniature) with all-MiniLM-L6-v2, one command:

    python benchmarks/berm.py --parts diagnostics generalisation start

1. Train two retrievers from all-MiniLM-L6-v2 on the labelled source
   ../shared/data/msmarco-trecdl2019 (grade >= 2 positives, grade-0 hard negatives, batches of
   distinct queries, same rows / seed / everything): the plain contrastive loss (baseline) and
   BERM (``L_c + 0.1 L_extract + 1.0 L_balance``) — ``examples/train_berm.py`` one flag apart.
2. Table 5: on SciFact *train* (query, positive) pairs, the mean variance of sim(t_p, E) over
   units and the essential-unit identification accuracy from m, for MiniLM before training,
   the baseline and BERM (+ a plot).
3. Zero-shot nDCG@10 / R@100 on SciFact and ArguAna test (self-matches removed) with the suite's
   evaluate path, and a paired t-test BERM vs baseline per dataset.

CPU-sized by default (see --help); every reduction is recorded in the rows and docs/berm.md.
Results: benchmarks/results/berm.json (tables ``berm``, ``berm_diagnostics``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = {"baseline": "MiniLM + contrastive (baseline)", "berm": "MiniLM + contrastive + BERM",
           "start": "all-MiniLM-L6-v2 before training (mean pool, cosine)"}


def _train_module():
    spec = importlib.util.spec_from_file_location("train_berm", ROOT / "examples" / "train_berm.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["train_berm"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def train_models(a, log) -> dict:
    """Train (or re-use, when the same settings already finished) the baseline and BERM models."""
    from hf_dr.training import RetrievalTrainingArguments

    tb = _train_module()
    out = {}
    for name in ("baseline", "berm"):
        d = Path(a.runs) / name
        want = {"steps": a.steps, "batch_size": a.batch_size, "lr": a.lr, "seed": a.seed,
                "doc_max_length": a.doc_max_length, "model": a.model, "similarity": "own"}
        done = d / "bench_settings.json"
        if done.is_file() and json.loads(done.read_text()) == want:
            log(f"{name}: re-using {d}")
            out[name] = d
            continue
        t0 = time.time()
        # pooling, similarity and the loss's scale: the model's own (MiniLM: mean pooling, cosine, scale 20)
        m = tb.ModelArguments(model_name_or_path=a.model, max_query_length=64, max_doc_length=a.doc_max_length)
        dd = tb.DataArguments(train_data=str(SHARED / "data" / "msmarco-trecdl2019"), n_negatives=1,
                              max_rows=a.steps * a.batch_size)
        b = tb.BERMArguments(style="hard_negatives", berm=name == "berm")
        args = RetrievalTrainingArguments(output_dir=str(d), per_device_train_batch_size=a.batch_size,
                                          learning_rate=a.lr, max_steps=a.steps, warmup_steps=max(1, a.steps // 10),
                                          seed=a.seed, data_seed=a.seed, logging_steps=10, save_strategy="no",
                                          report_to=[], disable_tqdm=False, dataloader_num_workers=0,
                                          use_cpu=True)
        _, info = tb.train(m, dd, b, args)
        done.write_text(json.dumps(want))
        log(f"{name}: trained {info['global_steps']} steps in {time.time() - t0:.0f}s")
        out[name] = d
    return out


def diagnostics(a, models: dict, log) -> None:
    from hf_dr.analysis import berm_diagnostics, plot_berm_diagnostics
    from hf_dr.data import load_beir, triplets_from_qrels
    from hf_dr.labeling.units import annotate_units
    from hf_dr.models.berm import BERMEncoder

    data = load_beir(SHARED / "data" / "scifact", split="train")
    rows = triplets_from_qrels(data, min_positive_grade=1, negative_grade=0, n_negatives=0, seed=a.seed)
    rows = annotate_units(rows.select(range(min(a.diag_pairs, len(rows)))), show_progress_bar=False)
    results = {}
    named = {"all-MiniLM-L6-v2 (before training)": None, SYSTEMS["baseline"]: models["baseline"],
             SYSTEMS["berm"]: models["berm"]}
    for label, path in named.items():
        model = _start_model(a) if path is None else BERMEncoder.from_pretrained(path)
        model.config.max_doc_length = a.diag_doc_max_length
        t0 = time.time()
        r = berm_diagnostics(model, rows, batch_size=16, show_progress_bar=False)
        results[label] = r
        log(f"diagnostics {label}: Var {r['variance']:.4f} Acc {r['accuracy']:.3f} "
            f"({r['n_variance']} / {r['n_accuracy']} pairs, {time.time() - t0:.0f}s)")
        save_rows("berm", [{"table": "berm_diagnostics", "dataset": "scifact (train pairs)", "system": label,
                            "command": command_line(), "machine": machine(),
                            "metrics": {"Var. (lower = more balanced)": r["variance"],
                                        "Acc. (essential unit)": r["accuracy"],
                                        "chance Acc. (1/units)": r["chance_accuracy"],
                                        "pairs (Var.)": r["n_variance"], "pairs (Acc.)": r["n_accuracy"]},
                            **_settings(a)}])
    plot_berm_diagnostics(results, ROOT / "docs" / "img" / "berm_diagnostics.png",
                          title=f"BERM Table 5 on {len(rows)} SciFact train pairs")


def _start_model(a):
    """The untrained model as a BERMEncoder with its own pooling and similarity (MiniLM: mean, cosine)."""
    from hf_dr.models.berm import BERMEncoder
    from hf_dr.models.dense import own_pooling_and_similarity

    pooling, similarity = own_pooling_and_similarity(a.model)
    return BERMEncoder.from_backbone(a.model, pooling=pooling, similarity=similarity)


def _settings(a) -> dict:
    return {"train_steps": a.steps, "train_batch_size": a.batch_size, "train_doc_max_length": a.doc_max_length,
            "eval_doc_max_length": a.eval_doc_max_length, "diag_doc_max_length": a.diag_doc_max_length,
            "eval_query_max_length": a.eval_query_max_length,
            "seed": a.seed}


def _evaluate(a, name: str, path, data, ds: str, log):
    """EvalResult of one system on one dataset (cached per setting under --runs)."""
    from hf_dr.evaluation import EvalResult
    from hf_dr.factory import evaluate_model
    from hf_dr.models.berm import BERMEncoder

    cache = Path(a.runs) / name / f"eval_{ds}_{a.eval_doc_max_length}_{a.eval_query_max_length}_own-similarity.json"
    if cache.is_file():
        obj = json.loads(cache.read_text())
        log(f"{ds} {name}: re-using {cache}")
        return EvalResult(obj["metrics"], obj["per_query"], obj["n_queries"])
    model = _start_model(a) if path is None else BERMEncoder.from_pretrained(path)
    model.config.max_doc_length = a.eval_doc_max_length
    model.config.max_query_length = a.eval_query_max_length
    t0 = time.time()
    r, _ = evaluate_model(model, data, batch_size=32, metrics=("ndcg@10", "recall@100"), show_progress_bar=True)
    r.to_json(cache)
    log(f"{ds} {name}: nDCG@10 {r.aggregate['ndcg@10']:.4f} ({time.time() - t0:.0f}s)")
    return r


def start_point(a, log) -> None:
    """The untrained starting point under the same evaluation settings (context for both rows)."""
    from hf_dr.data import load_beir

    for ds in a.datasets:
        r = _evaluate(a, "start", None, load_beir(SHARED / "data" / ds, split="test"), ds, log)
        save_rows("berm", [{"table": "berm", "dataset": ds, "system": SYSTEMS["start"], "command": command_line(),
                            "machine": machine(), "metrics": dict(r.aggregate), "n_queries": r.n_queries,
                            **_settings(a)}])


def generalisation(a, models: dict, log) -> None:
    from hf_dr.data import load_beir
    from hf_dr.evaluation import paired_ttest

    for ds in a.datasets:
        data = load_beir(SHARED / "data" / ds, split="test")
        res = {name: _evaluate(a, name, models[name], data, ds, log) for name in ("baseline", "berm")}
        t, p = paired_ttest(res["berm"], res["baseline"], "ndcg@10")
        rows = []
        for name in ("baseline", "berm"):
            metrics = dict(res[name].aggregate)
            if name == "berm":
                metrics["Δ nDCG@10"] = res["berm"].aggregate["ndcg@10"] - res["baseline"].aggregate["ndcg@10"]
                metrics["p (paired t)"] = p
            rows.append({"table": "berm", "dataset": ds, "system": SYSTEMS[name], "command": command_line(),
                         "machine": machine(), "metrics": metrics, "n_queries": res[name].n_queries, **_settings(a)})
        save_rows("berm", rows)
        log(f"{ds}: BERM - baseline = {rows[1]['metrics']['Δ nDCG@10']:+.4f} (t {t:.2f}, p {p:.3g})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(SHARED / "models" / "all-MiniLM-L6-v2"))
    ap.add_argument("--steps", type=int, default=60, help="training steps per model (CPU budget)")
    ap.add_argument("--batch-size", type=int, default=16, help="distinct queries per batch (+1 hard negative each)")
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--doc-max-length", type=int, default=128, help="training passage length (MS MARCO passages fit)")
    ap.add_argument("--eval-doc-max-length", type=int, default=256, help="evaluation passage length (MiniLM's own)")
    ap.add_argument("--eval-query-max-length", type=int, default=256,
                    help="evaluation query length (MiniLM's own; ArguAna queries are arguments)")
    ap.add_argument("--diag-doc-max-length", type=int, default=256, help="passage length for Table 5 (units past it dropped)")
    ap.add_argument("--diag-pairs", type=int, default=300, help="SciFact train (query, positive) pairs for Table 5")
    ap.add_argument("--datasets", nargs="+", default=["scifact", "arguana"])
    ap.add_argument("--parts", nargs="+", default=["diagnostics", "generalisation"],
                    choices=["diagnostics", "generalisation", "start"],
                    help="start: also evaluate the untrained MiniLM under the same settings")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default="runs/berm", help="trained models and per-query results (re-used on re-run)")
    a = ap.parse_args()
    t_start = time.time()

    def log(msg):
        print(f"[{time.time() - t_start:6.0f}s] {msg}", flush=True)

    models = train_models(a, log)
    if "diagnostics" in a.parts:
        diagnostics(a, models, log)
    if "generalisation" in a.parts:
        generalisation(a, models, log)
    if "start" in a.parts:
        start_point(a, log)
    log("done")


if __name__ == "__main__":
    main()
