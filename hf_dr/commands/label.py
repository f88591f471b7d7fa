"""``hf-dr label``: pseudo-relevance labels (DoDress) for the training queries of a BEIR
folder: BM25 -> rerank -> top-k positives -> m negatives each -> a dataset + card."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("label", help="build pseudo-labelled triplets for a target corpus (DoDress)",
                       description=__doc__)
    p.add_argument("--data", required=True, help="BEIR folder or Hub id (its queries are used, not its labels)")
    p.add_argument("--split", default="train", help="query split to label (never test)")
    p.add_argument("--dense-model", default=None, help="dense model: fusion reranker and SimANS negatives")
    p.add_argument("--reranker", default="fusion", help="fusion | monot5:<id> | cross-encoder:<id>")
    p.add_argument("--negatives", default="simans", help="random | bm25 | simans")
    p.add_argument("--k", type=int, default=1)
    p.add_argument("--m", type=int, default=10)
    p.add_argument("--bm25-top", type=int, default=100)
    p.add_argument("--simans-top-k", type=int, default=500)
    p.add_argument("--dev-fraction", type=float, default=0.1)
    p.add_argument("--max-queries", type=int, default=None, help="label only the first N queries (quick checks)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", required=True)
    p.set_defaults(func=run)


def write_card(out: Path, stats: dict, data_name: str, command: str) -> Path:
    from huggingface_hub import DatasetCard, DatasetCardData

    from ..hub_templates import template_path

    cfg = stats["config"]
    card_data = DatasetCardData(language="en", task_categories=["text-retrieval"],
                                tags=["hf-dr", "pseudo-labels", "dodress", cfg["negatives"]],
                                source_datasets=[str(data_name)], pretty_name=f"Pseudo-labels for {Path(str(data_name)).name}")
    card = DatasetCard.from_template(
        card_data, template_path=str(template_path("dataset_pseudo_labels.md")),
        source_name=Path(str(data_name)).name, repo_id=f"your-name/{Path(str(data_name)).name}-pseudo-labels",
        command=command, license="that of the source dataset", **{k: v for k, v in stats.items() if k != "config"}, **cfg)
    card.save(out / "README.md")
    return out / "README.md"


def run(args) -> int:
    from ..cli import CLIError
    from ..data import load_beir
    from ..labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels
    from ..labeling.rerankers import get_reranker
    from ..models import load_encoder
    from ..retrieval import BM25Index

    cfg = PseudoLabelConfig(split=args.split, bm25_top=args.bm25_top, k=args.k, m=args.m, negatives=args.negatives,
                            simans_top_k=args.simans_top_k, dev_fraction=args.dev_fraction,
                            max_queries=args.max_queries, seed=args.seed)
    try:
        cfg.validate()
    except ValueError as e:
        raise CLIError(str(e)) from None
    data = load_beir(args.data, split=args.split)
    bm25 = BM25Index.from_beir(data)
    encoder = load_encoder(args.dense_model) if args.dense_model else None
    reranker = get_reranker(args.reranker, bm25=bm25, encoder=encoder)
    out = Path(args.output)
    labels = build_pseudo_labels(data, reranker, cfg, out, bm25=bm25, dense_encoder=encoder,
                                 dense_name=args.dense_model)
    command = "hf-dr " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[0].endswith("hf-dr") else \
        f"hf-dr label --data {args.data} --split {args.split} --reranker {args.reranker} --negatives {args.negatives} " \
        f"--k {args.k} --m {args.m} --output {args.output}"
    write_card(out, labels.stats, args.data, command)
    s = labels.stats
    print(f"{s['triplets']} triplets from {s['train_queries']} queries; dev: {s['dev_rows']} rows from "
          f"{s['dev_queries']} queries; {s['queries_without_bm25_hits']} queries without BM25 hits")
    print(f"wrote {out}/train (load_from_disk), {out}/train.parquet, {out}/dev, {out}/README.md")
    return 0
