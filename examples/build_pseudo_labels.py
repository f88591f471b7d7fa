"""DoDress end to end: pseudo-relevance labels for a target corpus, then (``--train``) RankNet
fine-tuning of a dense retriever on them and evaluation on the target's test queries.

    python examples/build_pseudo_labels.py --data ../shared/data/scifact \
        --dense_model ../shared/models/all-MiniLM-L6-v2 --output out/scifact-dodress \
        --negatives simans --k 1 --m 10 --train --student ../shared/models/all-MiniLM-L6-v2

The paper's training setting (defaults here): batch 8, lr 2e-6 (Adam), 10,000 steps, cosine
decay, max length 350, best checkpoint by nDCG@10 on the pseudo dev set every 1,000 steps.
Runs unchanged under ``python``, ``accelerate launch`` and ``torchrun``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig  # noqa: E402


@dataclass
class LabelArguments:
    data: str = field(metadata={"help": "BEIR folder or Hub id of the target (its train queries are labelled)"})
    output: str = field(metadata={"help": "output folder (dataset, card, cache, trained model)"})
    dense_model: str | None = field(default=None, metadata={"help": "current dense retriever (fusion reranker, SimANS)"})
    reranker: str = field(default="fusion", metadata={"help": "fusion | monot5:<id> | cross-encoder:<id>"})
    cache_dir: str | None = field(default=None, metadata={"help": "stage cache (default .OUTPUT.cache beside the output folder)"})


@dataclass
class TrainArguments:
    train: bool = field(default=False, metadata={"help": "fine-tune --student on the labels and evaluate it"})
    student: str | None = field(default=None, metadata={"help": "encoder to fine-tune (default: --dense_model)"})
    max_length: int = field(default=350, metadata={"help": "max tokens of queries and documents"})
    learning_rate: float = 2e-6
    train_batch_size: int = 8
    max_steps: int = 10_000
    eval_steps: int = 1_000
    eval_split: str = field(default="test", metadata={"help": "split evaluated after training"})


def main():
    la, cfg, ta = HfArgumentParser((LabelArguments, PseudoLabelConfig, TrainArguments)).parse_args_into_dataclasses()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from dataset_builders.dodress import pseudo_labels

    from hf_dr.data import load_beir
    from hf_dr.factory import evaluate_model
    from hf_dr.labeling.finetune import train_ranknet
    from hf_dr.models import load_encoder

    cmd = "python " + " ".join(sys.argv)
    labels = pseudo_labels(la.data, la.output, dense_model=la.dense_model, reranker=la.reranker,
                           cache_dir=la.cache_dir, command=cmd, **vars(cfg))
    print(json.dumps({k: v for k, v in labels.stats.items() if k != "config"}, indent=1))
    if not ta.train:
        return
    student_path = ta.student or la.dense_model
    if not student_path:
        raise SystemExit("--train needs --student (or --dense_model)")
    student = load_encoder(student_path)
    for attr in ("max_doc_length", "max_query_length"):
        if hasattr(student, attr):
            setattr(student, attr, ta.max_length)
    out = Path(la.output) / "student"
    trainer = train_ranknet(student, labels.train, out, dev=labels.dev, max_length=ta.max_length,
                            learning_rate=ta.learning_rate, batch_size=ta.train_batch_size, max_steps=ta.max_steps,
                            eval_steps=ta.eval_steps)
    trainer.save_model(str(out / "best"))
    res, _ = evaluate_model(trainer.model, load_beir(la.data, split=ta.eval_split))
    print(json.dumps({"split": ta.eval_split, **res.aggregate}, indent=1))


if __name__ == "__main__":
    main()
