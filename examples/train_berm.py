"""Train a dense retriever with or without BERM (Xu et al. 2023, papers/000), in the three
training styles of the paper's Table 1 — every comparison is one flag apart:

    # vanilla (DPR: in-batch negatives only), + BERM
    python examples/train_berm.py --model_name_or_path bert-base-uncased \
        --train_data ../shared/data/msmarco-trecdl2019 --style vanilla --output_dir out/dpr-berm
    # the same without BERM (alpha = beta = 0: exactly the contrastive loss)
    python examples/train_berm.py ... --style vanilla --berm false --output_dir out/dpr
    # hard negatives (ANCE-style): judged grade-0 passages, or mined with BM25
    python examples/train_berm.py ... --style hard_negatives --negative_source bm25
    # knowledge distillation: rows {query, pos, neg, scores} with teacher scores (positive first)
    python examples/train_berm.py --train_data rows_with_scores.jsonl --style distillation ...

Runs unchanged under ``python``, ``accelerate launch`` and ``torchrun`` (RetrievalTrainer).
Data: a BEIR folder with graded qrels (grade >= ``--min_positive_grade`` positives), or a
.jsonl / .parquet file of rows ``{query, pos[, neg][, scores]}`` (already annotated rows —
``unit_char_spans``, ``essential_unit`` from ``dataset_builders/berm_units.py`` — are used as is).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser


STYLES = ("vanilla", "hard_negatives", "distillation")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "Backbone checkpoint (folder or Hub id), e.g. roberta-base (the paper)."})
    pooling: str | None = field(default=None, metadata={"help": "cls (the paper) or mean; default: the model's own "
                                                         "(its sentence-transformers Pooling), else cls."})
    similarity: str | None = field(default=None, metadata={"help": "dot (the paper) or cos; default: the model's own "
                                                            "(sentence-transformers Normalize / similarity_fn_name), else dot."})
    max_query_length: int = field(default=64, metadata={"help": "Query truncation (training and encode_queries)."})
    max_doc_length: int = field(default=256, metadata={"help": "Passage truncation (training and encode_corpus); units past it are clipped / dropped."})


@dataclass
class DataArguments:
    train_data: str = field(metadata={"help": "BEIR folder with graded qrels, or a .jsonl / .parquet file of training rows."})
    qrels_split: str = field(default="test", metadata={"help": "Qrels split of a BEIR folder used as training labels."})
    min_positive_grade: int = field(default=2, metadata={"help": "Judgments with at least this grade are positives."})
    negative_grade: int = field(default=0, metadata={"help": "Judgments with this grade are hard negatives (--negative_source qrels)."})
    n_negatives: int = field(default=1, metadata={"help": "Hard negatives per query (style hard_negatives)."})
    negative_source: str = field(default="qrels", metadata={"help": "hard_negatives from 'qrels' (judged grade --negative_grade) or 'bm25' (mined: top BM25 passages not judged positive)."})
    bm25_depth: int = field(default=100, metadata={"help": "BM25 depth searched for mined negatives."})
    distinct_queries_per_batch: bool = field(default=True, metadata={"help": "Batches of distinct queries (BEIR folders; sequential sampling over pre-built blocks)."})
    max_rows: int | None = field(default=None, metadata={"help": "Use the first N training rows only."})
    reader: str | None = field(default=None, metadata={"help": "AutoModelForQuestionAnswering id/folder for the reader score of Eq. 2; none = BM25 only."})
    delta: float = field(default=0.1, metadata={"help": "δ: weight of the reader score in h_i = BM25 + δ r_i."})


@dataclass
class BERMArguments:
    style: str = field(default="vanilla", metadata={"help": "vanilla (in-batch), hard_negatives or distillation (needs a 'scores' column)."})
    berm: bool = field(default=True, metadata={"help": "Add BERM's unit losses (false: alpha = beta = 0, the plain retrieval loss)."})
    alpha: float = field(default=0.1, metadata={"help": "Weight of L_extract (Eq. 5); the paper: 0.1."})
    beta: float = field(default=1.0, metadata={"help": "Weight of L_balance (Eq. 4); the paper: 1.0."})
    scale: float | None = field(default=None, metadata={"help": "Inverse temperature of the contrastive loss; default: the model's similarity (20 for cos, as sentence-transformers; 1 for dot)."})
    kd_temperature: float = field(default=1.0, metadata={"help": "Temperature of the distillation loss."})


def mine_bm25_negatives(data, rows, n: int, depth: int = 100, min_positive_grade: int = 1, seed: int = 0):
    """Hard negatives mined with the suite's BM25: for each row's query, ``n`` of the top-``depth``
    BM25 passages that are not judged positive (ANCE-style static mining)."""
    import random

    from hf_dr.retrieval import BM25Index

    rng = random.Random(seed)
    index = BM25Index.from_beir(data)
    qids = sorted(set(rows["qid"]))
    queries = data.split_queries()
    run = index.search({q: queries[q] for q in qids}, top_k=depth)
    texts = dict(zip(data.doc_ids(), data.doc_texts()))
    pools = {}
    for q in qids:
        judged_pos = {d for d, g in data.qrels.get(q, {}).items() if g >= min_positive_grade}
        ranked = [d for d, _ in sorted(run.get(q, {}).items(), key=lambda x: -x[1]) if d not in judged_pos]
        if len(ranked) < n:
            raise ValueError(f"query {q}: BM25 found only {len(ranked)} non-positive passages (need {n})")
        pools[q] = ranked
    negs = [[texts[d] for d in rng.sample(pools[q][:max(n, 10)], n)] for q in rows["qid"]]
    return rows.remove_columns("neg").add_column("neg", negs) if "neg" in rows.column_names else rows.add_column("neg", negs)


def build_dataset(d: DataArguments, b: BERMArguments, args):
    from datasets import Dataset

    from hf_dr.data import load_beir, triplets_from_qrels

    p = Path(d.train_data)
    if p.is_file():
        if p.suffix in (".jsonl", ".json"):
            rows = Dataset.from_json(str(p))
        elif p.suffix == ".parquet":
            rows = Dataset.from_parquet(str(p))
        else:
            raise ValueError(f"{p}: training rows must be .jsonl or .parquet")
        if b.style == "vanilla" and "neg" in rows.column_names:
            rows = rows.remove_columns("neg")
    else:
        if b.style == "distillation":
            raise ValueError("--style distillation needs a file of rows with teacher 'scores' (positive first)")
        data = load_beir(d.train_data, split=d.qrels_split)
        global_batch = None
        if d.distinct_queries_per_batch:
            global_batch = args.per_device_train_batch_size * max(1, args.world_size) * args.gradient_accumulation_steps
            args.train_sampling_strategy = "sequential"
        n_neg = d.n_negatives if (b.style == "hard_negatives" and d.negative_source == "qrels") else 0
        rows = triplets_from_qrels(data, d.min_positive_grade, d.negative_grade, n_neg, batch_size=global_batch,
                                   seed=args.seed)
        if d.max_rows:
            rows = rows.select(range(min(d.max_rows, len(rows))))
        if b.style == "hard_negatives" and d.negative_source == "bm25":
            rows = mine_bm25_negatives(data, rows, d.n_negatives, d.bm25_depth, d.min_positive_grade, args.seed)
        elif b.style == "hard_negatives" and d.negative_source != "qrels":
            raise ValueError(f"--negative_source must be qrels or bm25, got {d.negative_source!r}")
    if d.max_rows and len(rows) > d.max_rows:
        rows = rows.select(range(d.max_rows))
    if b.style == "distillation" and "scores" not in rows.column_names:
        raise ValueError("--style distillation needs a 'scores' column (teacher scores, positive first)")
    return rows


def build_objective(m: ModelArguments, b: BERMArguments):
    from hf_dr.objectives import BERMObjective

    if b.style not in STYLES:
        raise ValueError(f"--style must be one of {STYLES}, got {b.style!r}")
    # scale None: the trained model's own similarity (hf_dr.objectives.scale.default_scale)
    return BERMObjective(alpha=b.alpha if b.berm else 0.0, beta=b.beta if b.berm else 0.0,
                         base="distillation" if b.style == "distillation" else "contrastive",
                         scale=b.scale, temperature=b.kd_temperature)


def resolve_model_arguments(m: ModelArguments) -> ModelArguments:
    """``m`` with pooling / similarity left unset taken from the checkpoint's own configuration."""
    from dataclasses import replace

    from hf_dr.models.dense import own_pooling_and_similarity

    if m.pooling is None or m.similarity is None:
        pooling, similarity = own_pooling_and_similarity(m.model_name_or_path, default_pooling="cls")
        m = replace(m, pooling=m.pooling or pooling, similarity=m.similarity or similarity)
    return m


def train(m: ModelArguments, d: DataArguments, b: BERMArguments, args):
    """Build, train and save (``args.output_dir``) a :class:`~hf_dr.models.berm.BERMEncoder`;
    returns ``(model, info)``."""
    from hf_dr.data import RetrievalCollator, UnitCollator
    from hf_dr.labeling.units import annotate_units
    from hf_dr.io import atomic_write_json
    from hf_dr.models.berm import BERMEncoder
    from hf_dr.hub.paths import portable_reference
    from hf_dr.training import RetrievalTrainer, final_output, start_training

    # CheckpointError (a ValueError) before any work when the checkpoint asked for is missing; the seed before any init
    resume = start_training(args)
    m = resolve_model_arguments(m)
    model = BERMEncoder.from_backbone(m.model_name_or_path, pooling=m.pooling, similarity=m.similarity,
                                      max_query_length=m.max_query_length, max_doc_length=m.max_doc_length)
    rows = build_dataset(d, b, args)
    objective = build_objective(m, b)
    if objective.uses_units:
        if "essential_unit" not in rows.column_names:
            rows = annotate_units(rows, reader=d.reader, delta=d.delta)
        collator = UnitCollator(model.tokenizer, m.max_query_length, m.max_doc_length)
    else:
        collator = RetrievalCollator(model.tokenizer, m.max_query_length, m.max_doc_length)
    trainer = RetrievalTrainer(model=model, args=args, train_dataset=rows, data_collator=collator, objective=objective)
    trainer.train(resume_from_checkpoint=resume or False)
    src, src_local = portable_reference(m.model_name_or_path)
    data, data_local = portable_reference(d.train_data)
    info = {"model_name_or_path": src, "train_data": data,
            "local_inputs": [k for k, local in (("model_name_or_path", src_local), ("train_data", data_local)) if local],
            "style": b.style,
            "berm": b.berm, "alpha": objective.alpha, "beta": objective.beta, "n_rows": len(rows),
            "global_steps": trainer.state.global_step, "learning_rate": args.learning_rate,
            "per_device_train_batch_size": args.per_device_train_batch_size, "seed": args.seed,
            "pooling": m.pooling, "similarity": m.similarity, "max_doc_length": m.max_doc_length,
            "log_history": trainer.state.log_history}
    if trainer.is_world_process_zero():
        with final_output(args.output_dir) as tmp:
            model.save_pretrained(tmp)
            atomic_write_json(tmp / "train_info.json", info, indent=1, default=str)
            _write_card(model, tmp, info, d)
    return model, info


def _write_card(model, out: Path, info: dict, d: DataArguments) -> None:
    """Fill ``model_cards/berm.md`` (hf-dr's one card renderer, huggingface_hub's jinja ModelCard)."""
    from hf_dr.hub.cards import write_card

    c = model.config
    src = info["model_name_or_path"]
    write_card(
        out, "berm", dict(library_name="transformers", pipeline_tag="feature-extraction",
                          tags=["hf-dr", "berm", "dense-retrieval"],
                          base_model=None if "model_name_or_path" in info.get("local_inputs", ()) else src),
        backbone=src, style=info["style"],
        berm="on" if info["berm"] else "off", alpha=info["alpha"], beta=info["beta"], delta=d.delta,
        reader=d.reader or "none (BM25 only)", train_data=f"`{info['train_data']}`", n_rows=info["n_rows"],
        global_steps=info["global_steps"], learning_rate=info["learning_rate"], pooling=c.pooling,
        similarity="inner product" if c.similarity == "dot" else "cosine",
        max_query_length=c.max_query_length, max_doc_length=c.max_doc_length,
        results="See `docs/berm.md` of hf-dr for the benchmark of this configuration.")


def main():
    from hf_dr.io import one_line_warnings
    from hf_dr.cli import add_dtype_argument
    from hf_dr.precision import with_training_precision
    from hf_dr.training import CheckpointError, RetrievalTrainingArguments

    one_line_warnings()
    parser = HfArgumentParser((ModelArguments, DataArguments, BERMArguments, RetrievalTrainingArguments),
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dtype_argument(parser, "training (the Trainer's mixed precision; overrides --bf16 / --fp16 unless auto)")
    m, d, b, args, extra = parser.parse_args_into_dataclasses()
    try:
        args = with_training_precision(args, extra.dtype)
        _, info = train(m, d, b, args)
    except (CheckpointError, ValueError) as e:  # a usage error: one line, exit 2
        print(f"{Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        sys.exit(2)
    info.pop("log_history", None)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
