"""``hf-dr berm-diagnostics``: BERM's Table 5 (papers/000) for one or more models on the
(query, positive) pairs of a BEIR split — mean variance of sim(t_p, E) over units (R1, lower
= more balanced) and essential-unit identification accuracy from m = GELU(t_q ⊙ t_p) (R2) —
printed as a table, written as JSON, and plotted before/after."""

from __future__ import annotations

import json
from pathlib import Path

from ..cli import positive_int


def register(sub) -> None:
    p = sub.add_parser("berm-diagnostics", help="BERM Table 5: unit balance variance and essential-unit accuracy",
                       description=__doc__)
    p.add_argument("--data", required=True, help="BEIR folder (or Hub dataset id) with qrels for --split")
    p.add_argument("--split", default="train")
    p.add_argument("--model", nargs="+", required=True,
                   help="BERM folders / Hub ids, or any encoder checkpoint (wrapped with --pooling, untrained BERM)")
    p.add_argument("--pooling", choices=("cls", "mean"), default="cls", help="pooling for plain checkpoints")
    p.add_argument("--max-pairs", type=positive_int, default=1000, help="(query, positive) pairs to use (a seeded sample)")
    p.add_argument("--min-grade", type=positive_int, default=1, help="judgments with at least this grade are positives")
    p.add_argument("--max-doc-length", type=positive_int, default=None, help="passage truncation (default: the model's)")
    p.add_argument("--reader", default=None, help="AutoModelForQuestionAnswering for the annotation (Eq. 2)")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="folder for berm_diagnostics.json and berm_diagnostics.png")
    p.add_argument("--device", default=None)
    p.set_defaults(func=run)


def load_berm(path: str, pooling: str = "cls"):
    """A saved BERM model, or any encoder checkpoint wrapped as an (untrained) BERM encoder."""
    from ..models import model_config
    from ..models.berm import BERMEncoder

    if model_config(path).get("model_type") == "berm":
        return BERMEncoder.from_pretrained(path)
    return BERMEncoder.from_backbone(path, pooling=pooling)


def run(args) -> int:
    from ..analysis import berm_diagnostics, plot_berm_diagnostics
    from ..data import load_beir, triplets_from_qrels
    from ..labeling.units import annotate_units
    from ..models import check_model, quiet_loading
    from .evaluate import check_output

    if args.output:
        check_output(args.output, files=("berm_diagnostics.json", "berm_diagnostics.png"))
    for path in args.model:
        check_model(path)
    data = load_beir(args.data, split=args.split)
    rows = triplets_from_qrels(data, min_positive_grade=args.min_grade, negative_grade=0, n_negatives=0,
                               seed=args.seed)
    rows = annotate_units(rows.select(range(min(args.max_pairs, len(rows)))), reader=args.reader)
    results = {}
    for path in args.model:
        with quiet_loading(path):
            model = load_berm(path, args.pooling)
        if args.max_doc_length:
            model.config.max_doc_length = args.max_doc_length
        results[path] = berm_diagnostics(model, rows, batch_size=args.batch_size, device=args.device)
    print("| model | Var. (lower = more balanced) | Acc. (essential unit) | chance Acc. | pairs (Var. / Acc.) |")
    print("|---|---:|---:|---:|---:|")
    for path, r in results.items():
        print(f"| {path} | {r['variance']:.4f} | {r['accuracy']:.4f} | {r['chance_accuracy']:.4f} "
              f"| {r['n_variance']} / {r['n_accuracy']} |")
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "berm_diagnostics.json").write_text(json.dumps(
            {p: {k: v for k, v in r.items() if not k.startswith("per_pair")} for p, r in results.items()}, indent=1))
        plot_berm_diagnostics({Path(p).name or p: r for p, r in results.items()}, out / "berm_diagnostics.png",
                              title=f"{data.name} {args.split}: {len(rows)} pairs")
        print(f"wrote {out / 'berm_diagnostics.json'} and {out / 'berm_diagnostics.png'}")
    return 0
