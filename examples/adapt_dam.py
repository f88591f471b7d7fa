"""Train a DDR Domain Adaption Module (DAM): continual masked-LM on a corpus (paper Sec. 3.3, Fig. 3).

Source DAM (disentangled fine-tuning, step 1): MLM of the backbone on the labelled corpus,
learning rate 5e-5:

    python examples/adapt_dam.py --model_name_or_path ../shared/models/all-MiniLM-L6-v2 \
        --corpus ../shared/data/msmarco-trecdl2019 --output_dir out/dam-msmarco --learning_rate 5e-5

Target DAM (sequential initialisation): start from the *source DAM*, smaller learning rate 2e-5:

    python examples/adapt_dam.py --model_name_or_path out/dam-msmarco \
        --corpus ../shared/data/scifact --output_dir out/dam-scifact --learning_rate 2e-5

Runs unchanged under ``accelerate launch`` and ``torchrun``. The output folder is an
ordinary ``*ForMaskedLM`` checkpoint (+ tokenizer and a model card): a DAM for
``DDRModel.load_dam`` / ``DDRModel.from_pretrained(rem, dam=...)``. A backbone without an
MLM head (all-MiniLM-L6-v2) gets a new head, decoder tied to the word embeddings.

Reproducible and resumable: ``--seed`` is set before the new head is initialised. Checkpoints
(``--save_steps N``) are written atomically; re-running the same command resumes from the newest
complete checkpoint in ``--output_dir`` (one log line says so). ``--resume_from_checkpoint last``
(or ``True``) asks for it explicitly (an error when there is none), ``--resume_from_checkpoint
PATH`` names one, ``--resume_from_checkpoint no`` starts over. The DAM replaces ``--output_dir``
in one rename at the end (checkpoints are kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments

from hf_dr.cli import add_dtype_argument
from hf_dr.io import one_line_warnings
from hf_dr.precision import with_training_precision
from hf_dr.adaptation.mlm import MLMArguments, load_mlm_model, mlm_loss, train_mlm
from hf_dr.data import load_beir
from hf_dr.io import atomic_write_json
from hf_dr.hub.paths import portable_reference
from hf_dr.training import CheckpointError, final_output, start_training


@dataclass
class DAMArguments:
    model_name_or_path: str = field(metadata={"help": "Backbone (source DAM) or source DAM (target DAM): folder or Hub id."})
    corpus: str = field(metadata={"help": "BEIR folder / Hub dataset id (its corpus.jsonl), or a text file with one document per line."})
    max_documents: int | None = field(default=None, metadata={"help": "Use only the first N documents (quick runs)."})
    eval_documents: int = field(default=0, metadata={"help": "Hold out the last N documents and report MLM loss before/after."})
    role: str = field(default="target", metadata={"help": "'source' or 'target': recorded in the model card."})


def read_corpus(path: str) -> list[str]:
    p = Path(path)
    if p.is_file():
        texts = [line.strip() for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not texts:
            raise ValueError(f"{path}: empty text file")
        return texts
    return load_beir(path, split=None).doc_texts()


def fail(message: str) -> None:
    """Exit 2 with ``adapt_dam.py: error: message`` (a usage error, no traceback)."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    one_line_warnings()
    parser = HfArgumentParser((DAMArguments, MLMArguments, TrainingArguments), description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dtype_argument(parser, "training (the Trainer's mixed precision; overrides --bf16 / --fp16 unless auto)")
    dam_args, mlm_args, training_args, extra = parser.parse_args_into_dataclasses()
    try:
        training_args = with_training_precision(training_args, extra.dtype)
    except ValueError as e:
        fail(str(e))
    if dam_args.role not in ("source", "target"):
        fail("--role must be 'source' or 'target'")
    try:  # progress bars, the checkpoint to resume, the seed before any weight is initialised (a new MLM head)
        resume = start_training(training_args)
    except CheckpointError as e:
        fail(str(e))
    texts = read_corpus(dam_args.corpus)
    if dam_args.max_documents:
        texts = texts[:dam_args.max_documents]
    eval_texts = None
    if dam_args.eval_documents:
        if dam_args.eval_documents >= len(texts):
            raise ValueError("--eval_documents must be smaller than the corpus")
        texts, eval_texts = texts[:-dam_args.eval_documents], texts[-dam_args.eval_documents:]
    tokenizer = AutoTokenizer.from_pretrained(dam_args.model_name_or_path)
    model = load_mlm_model(dam_args.model_name_or_path)
    before = mlm_loss(model, tokenizer, eval_texts, mlm_args) if eval_texts else None
    model.train()
    trainer = train_mlm(model, tokenizer, texts, training_args, mlm_args, resume_from_checkpoint=resume or False,
                        save=False)
    if trainer.is_world_process_zero():
        base, base_local = portable_reference(dam_args.model_name_or_path)
        corpus, corpus_local = portable_reference(dam_args.corpus)
        info = {"base_model": base, "corpus": corpus,
                "local_inputs": [k for k, local in (("base_model", base_local), ("corpus", corpus_local)) if local],
                "role": dam_args.role, "seed": training_args.seed,
                "n_documents": len(texts), "mlm": asdict(mlm_args), "learning_rate": training_args.learning_rate,
                "epochs": training_args.num_train_epochs, "max_steps": training_args.max_steps,
                "global_steps": trainer.state.global_step,
                "train_loss": next((h["train_loss"] for h in reversed(trainer.state.log_history) if "train_loss" in h), None)}
        if eval_texts:
            info["heldout_mlm_loss_before"] = before
            info["heldout_mlm_loss_after"] = mlm_loss(model, tokenizer, eval_texts, mlm_args)
        with final_output(training_args.output_dir) as tmp:
            trainer.save_model(str(tmp))
            atomic_write_json(tmp / "dam_info.json", info, indent=1)
            _write_card(tmp, info)
        print(json.dumps(info, indent=1))


def _write_card(out: Path, info: dict) -> None:
    """Fill ``model_cards/ddr_dam.md`` (hf-dr's one card renderer, huggingface_hub's jinja ModelCard)."""
    from hf_dr.hub.cards import write_card

    write_card(
        out, "ddr_dam", dict(library_name="transformers", pipeline_tag="fill-mask", tags=["hf-dr", "ddr", "dam"],
                             base_model=None if "base_model" in info["local_inputs"] else info["base_model"]),
        base_model=info["base_model"], corpus=info["corpus"], role=info["role"],
        n_documents=info["n_documents"], learning_rate=info["learning_rate"],
        global_steps=info["global_steps"], mlm_probability=info["mlm"]["mlm_probability"],
        max_length=info["mlm"]["max_length"], train_loss=info["train_loss"],
        heldout_before=info.get("heldout_mlm_loss_before"), heldout_after=info.get("heldout_mlm_loss_after"))


if __name__ == "__main__":
    main()
