"""Train DDR's Relevance Estimation Module (disentangled fine-tuning, paper Sec. 3.2, Fig. 3)
— or a baseline on the same data.

DDR: freeze the source DAM, insert a fresh REM (LoRA + parallel adapters), train only the REM:

    python examples/train_ddr.py --model_name_or_path out/dam-msmarco \
        --train_data ../shared/data/msmarco-trecdl2019 --output_dir out/rem

Baselines (same script, same data; only the starting checkpoint / trained parameters change):

* DR      ``--mode dr --model_name_or_path <backbone>``  (full fine-tuning)
* DDR\\DF ``--mode ddr --model_name_or_path <backbone>``  (REM on the raw backbone)
* DDR\\SI a DDR REM paired at test time with a target DAM adapted from the raw backbone
* DDR\\D  ``--mode dr --model_name_or_path <target DAM>`` (full fine-tuning per target domain)

Data: a BEIR folder with graded qrels (grade >= ``--min_positive_grade`` positive, grade
``--negative_grade`` hard negatives), or a jsonl / parquet file of rows ``{query, pos, neg,
[scores]}``; with ``scores`` (teacher scores, positive first) ``--objective margin_mse``.
Negatives are gathered across processes under ``accelerate launch`` / ``torchrun``.

Reproducible and resumable: ``--seed`` is set before the REM is initialised (same seed, same
weights). Checkpoints (``--save_steps N``) are written atomically; re-running the same command
resumes from the newest complete checkpoint in ``--output_dir`` (one log line says so).
``--resume_from_checkpoint last`` (or ``True``) asks for it explicitly (an error when there is
none), ``--resume_from_checkpoint PATH`` names one, ``--resume_from_checkpoint no`` starts over.
The trained model replaces ``--output_dir`` in one rename at the end (checkpoints are kept).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from hf_dr.io import one_line_warnings
from hf_dr.data import RetrievalCollator, load_beir, triplets_from_qrels
from hf_dr.objectives import get_objective
from hf_dr.objectives.scale import resolve_scale
from hf_dr.io import atomic_write_json
from hf_dr.cli import add_dtype_argument
from hf_dr.precision import with_training_precision
from hf_dr.hub.paths import portable_reference
from hf_dr.training import CheckpointError, RetrievalTrainer, RetrievalTrainingArguments, final_output, start_training

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "DDR: the (source) DAM the REM is trained on; DR: the checkpoint to fine-tune."})
    mode: str = field(default="ddr", metadata={"help": "'ddr' (train a REM on the frozen DAM) or 'dr' (full fine-tuning baseline)."})
    rem_type: str = field(default="lora+pa", metadata={"help": "REM architecture: lora+pa (paper default), lora or pa (Table 5)."})
    lora_rank: int = field(default=192, metadata={"help": "LoRA rank (192 as the paper's released models; 96 in Table 5)."})
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA alpha (scaling alpha/rank); default = rank."})
    lora_target_modules: str = field(default="query,key,value", metadata={"help": "Comma-separated attention projections that get LoRA."})
    pa_bottleneck: int | None = field(default=None, metadata={"help": "Parallel-adapter bottleneck; default hidden_size // 4."})
    pa_scaling: float = field(default=4.0, metadata={"help": "Parallel-adapter output scaling."})
    pooling: str | None = field(default=None, metadata={"help": "mean (paper) or cls; default: the model's own "
                                                         "(its sentence-transformers Pooling), else mean."})
    similarity: str | None = field(default=None, metadata={"help": "dot (paper, English) or cos (unit-length embeddings); "
                                                            "default: the model's own (sentence-transformers Normalize / "
                                                            "similarity_fn_name), else dot."})
    max_query_length: int = field(default=64, metadata={"help": "Query truncation (training and encode_queries)."})
    max_doc_length: int = field(default=256, metadata={"help": "Document truncation (training and encode_corpus)."})


@dataclass
class DataArguments:
    train_data: str = field(metadata={"help": "BEIR folder with graded qrels, or a .jsonl / .parquet file of {query, pos, neg[, scores]} rows."})
    qrels_split: str = field(default="test", metadata={"help": "Qrels split of a BEIR folder used as training labels."})
    min_positive_grade: int = field(default=2, metadata={"help": "Judgments with at least this grade are positives."})
    negative_grade: int = field(default=0, metadata={"help": "Judgments with this grade are hard negatives."})
    n_negatives: int = field(default=1, metadata={"help": "Hard negatives per query (from qrels)."})
    distinct_queries_per_batch: bool = field(default=True, metadata={"help": "Batches of distinct queries (no positive of a query acts as its in-batch negative); uses sequential sampling over pre-built blocks."})
    objective: str = field(default="contrastive", metadata={"help": "contrastive (in-batch + hard negatives, gathered across processes) or margin_mse (needs scores)."})
    scale: float | None = field(default=None, metadata={"help": "Inverse temperature of the objective; default: the model's similarity (20 for cos, as sentence-transformers; 1 for dot)."})


def build_model(m: ModelArguments):
    from dataclasses import replace

    from hf_dr.models.dense import own_pooling_and_similarity

    if m.pooling is None or m.similarity is None:  # the checkpoint's own (sentence-transformers config)
        pooling, similarity = own_pooling_and_similarity(m.model_name_or_path, default_pooling="mean")
        m = replace(m, pooling=m.pooling or pooling, similarity=m.similarity or similarity)
    if m.mode == "ddr":
        from hf_dr.models.ddr import DDRModel

        return DDRModel.from_backbone(
            m.model_name_or_path, rem_type=m.rem_type, lora_rank=m.lora_rank, lora_alpha=m.lora_alpha,
            lora_target_modules=[t.strip() for t in m.lora_target_modules.split(",") if t.strip()],
            pa_bottleneck=m.pa_bottleneck, pa_scaling=m.pa_scaling, pooling=m.pooling, similarity=m.similarity,
            max_query_length=m.max_query_length, max_doc_length=m.max_doc_length)
    if m.mode == "dr":
        from hf_dr.models.dense import DenseEncoder

        return DenseEncoder.from_pretrained(m.model_name_or_path, pooling=m.pooling, normalize=m.similarity == "cos",
                                            max_length=m.max_doc_length, max_query_length=m.max_query_length)
    raise ValueError(f"--mode must be 'ddr' or 'dr', got {m.mode!r}")


def build_dataset(d: DataArguments, args: RetrievalTrainingArguments):
    from datasets import Dataset

    p = Path(d.train_data)
    if p.is_file():
        if p.suffix in (".jsonl", ".json"):
            return Dataset.from_json(str(p))
        if p.suffix == ".parquet":
            return Dataset.from_parquet(str(p))
        raise ValueError(f"{p}: training rows must be .jsonl or .parquet")
    data = load_beir(d.train_data, split=d.qrels_split)
    global_batch = None
    if d.distinct_queries_per_batch:
        global_batch = args.per_device_train_batch_size * max(1, args.world_size) * args.gradient_accumulation_steps
        args.train_sampling_strategy = "sequential"
    return triplets_from_qrels(data, d.min_positive_grade, d.negative_grade, d.n_negatives,
                               batch_size=global_batch, seed=args.seed)


def fail(message: str) -> None:
    """Exit 2 with ``train_ddr.py: error: message`` (a usage error, no traceback)."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    one_line_warnings()
    parser = HfArgumentParser((ModelArguments, DataArguments, RetrievalTrainingArguments), description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dtype_argument(parser, "training (the Trainer's mixed precision; overrides --bf16 / --fp16 unless auto)")
    m, d, args, extra = parser.parse_args_into_dataclasses()
    try:  # progress bars, the checkpoint to resume, the seed before any weight is initialised (the REM)
        args = with_training_precision(args, extra.dtype)
        resume = start_training(args)
    except (CheckpointError, ValueError) as e:
        fail(str(e))
    model = build_model(m)
    train = build_dataset(d, args)
    if d.objective == "margin_mse" and "scores" not in train.column_names:
        raise ValueError("--objective margin_mse needs a 'scores' column (teacher scores, positive first)")
    # scale None: the model's own similarity (hf_dr.objectives.scale.default_scale), for either objective
    objective = get_objective(d.objective, scale=d.scale)
    collator = RetrievalCollator(model.tokenizer, m.max_query_length, m.max_doc_length)
    trainer = RetrievalTrainer(model=model, args=args, train_dataset=train, data_collator=collator, objective=objective)
    if m.mode == "ddr":
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        n_all = sum(p.numel() for p in model.parameters())
        logger.warning("training the REM only: %d of %d parameters (%.2f%%)", n_train, n_all, 100 * n_train / n_all)
    trainer.train(resume_from_checkpoint=resume or False)
    if not trainer.is_world_process_zero():
        return
    src, src_local = portable_reference(m.model_name_or_path)
    data, data_local = portable_reference(d.train_data)
    info = {"mode": m.mode, "model_name_or_path": src, "train_data": data,
            "local_inputs": [k for k, local in (("model_name_or_path", src_local), ("train_data", data_local)) if local],
            "n_rows": len(train), "objective": d.objective, "scale": resolve_scale(d.scale, model), "global_steps": trainer.state.global_step,
            "learning_rate": args.learning_rate, "seed": args.seed,
            "train_loss": next((h["train_loss"] for h in reversed(trainer.state.log_history) if "train_loss" in h), None)}
    out = Path(args.output_dir)
    with final_output(out) as tmp:
        if m.mode == "ddr":
            # a local DAM is recorded relative to the folder (tmp is a sibling of out: same relative path)
            model.save_rem(tmp, dam_name_or_path=m.model_name_or_path)
            _write_rem_card(model, tmp, info, d)
        else:
            model.save_pretrained(tmp)
        atomic_write_json(tmp / "train_info.json", info, indent=1)
    print(json.dumps(info, indent=1))


def _write_rem_card(model, out: Path, info: dict, d: DataArguments) -> None:
    """Fill ``model_cards/ddr_rem.md`` (hf-dr's one card renderer, huggingface_hub's jinja ModelCard)."""
    from hf_dr.hub.cards import write_card

    c = model.config
    src = info["model_name_or_path"]
    write_card(
        out, "ddr_rem", dict(library_name="transformers", pipeline_tag="feature-extraction",
                             tags=["hf-dr", "ddr", "rem", "dense-retrieval", "peft", "lora"],
                             base_model=None if "model_name_or_path" in info["local_inputs"] else src),
        rem_type=c.rem_type, lora_rank=c.lora_rank,
        lora_targets=", ".join(c.lora_target_modules) if c.use_lora else "none",
        pa_bottleneck=c.pa_dim() if c.use_pa else "none", pa_scaling=c.pa_scaling,
        rem_parameters=f"{model.num_rem_parameters():,}", similarity="inner product" if c.similarity == "dot" else "cosine",
        source_dam=src, train_data=f"`{info['train_data']}` (grade >= {d.min_positive_grade} positive, grade {d.negative_grade} hard negatives)"
        if not Path(d.train_data).is_file() else f"`{info['train_data']}`",
        objective=d.objective + (f" (scale {info['scale']})" if "scale" in info else ""), n_rows=info["n_rows"],
        global_steps=info["global_steps"], learning_rate=info["learning_rate"], pooling=c.pooling,
        max_query_length=c.max_query_length, max_doc_length=c.max_doc_length,
        results="See `docs/ddr.md` of hf-dr for the benchmark of this configuration.")


if __name__ == "__main__":
    main()
