"""Conversational query rewriting for DoDress's conversational variant (papers/002 §5.1).

A T5 sequence-to-sequence model (``t5-large`` in the paper; any seq2seq id or folder works)
is trained on CANARD-format data to turn a conversational question plus its history into a
self-contained query. The input puts the current question first and the history after it,
nearest turn first (as in ConvTrans, Mao et al. 2022), joined by T5's ``</s>``:

    </s>cur</s>his_-1</s>his_-2...

The rewriter is scored by corpus BLEU (sacrebleu) against the manual rewrites (CANARD's
``Rewrite``, CAsT's ``manual_rewritten_utterance``). Its output goes through the same
labelling pipeline as ad hoc queries (:func:`~.pseudo_relevance.build_pseudo_labels` with
``queries=``), and :mod:`.conversational` turns the result into CDR training rows.

Training uses ``transformers.Seq2SeqTrainer``: the rewriter is a generator, not a retrieval
encoder, so :class:`~hf_dr.training.RetrievalTrainer` (whose losses score embeddings) does
not apply to it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset

logger = logging.getLogger(__name__)

__all__ = ["rewriter_input", "load_canard", "RewriterConfig", "tokenize_rewriting", "train_rewriter", "rewrite",
           "bleu", "SEP"]

SEP = "</s>"


def rewriter_input(current: str, history: Sequence[str], max_history: int | None = None, sep: str = SEP) -> str:
    """``"</s>cur</s>his_-1</s>his_-2..."`` (papers/002 §5.1): ``history`` is given oldest
    first (as dialogs are stored); the nearest ``max_history`` turns are kept."""
    turns = [h.strip() for h in history if h and h.strip()]
    turns = list(reversed(turns))
    if max_history is not None:
        turns = turns[:max_history]
    return "".join(sep + t for t in [current.strip(), *turns])


def load_canard(path: str | Path, include_answers: bool = False, include_topic: bool = True) -> Dataset:
    """A CANARD json file (a list of ``{History, Question, Rewrite, QuAC_dialog_id, Question_no}``)
    as a Dataset with columns ``dialog_id, turn, history, question, rewrite``.

    CANARD's ``History`` is ``[article title, section title, q1, a1, q2, a2, ...]``. By default
    the history keeps the topic (the two titles) and the previous *questions* — what a search
    engine sees in a conversational session such as TREC CAsT, which has no answers;
    ``include_answers`` keeps the answers too.
    """
    path = Path(path)
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a CANARD json file ({e})") from None
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a JSON list of CANARD examples")
    rows = []
    for i, it in enumerate(items):
        missing = [k for k in ("History", "Question", "Rewrite") if k not in it]
        if missing:
            raise ValueError(f"{path}: example {i} lacks {missing}")
        hist = list(it["History"])
        topic, turns = hist[:2], hist[2:]
        if not include_answers:
            turns = turns[0::2]
        rows.append({"dialog_id": str(it.get("QuAC_dialog_id", "")), "turn": int(it.get("Question_no", 0)),
                     "history": (topic if include_topic else []) + turns, "question": it["Question"],
                     "rewrite": it["Rewrite"]})
    return Dataset.from_list(rows)


@dataclass
class RewriterConfig:
    """Training settings (defaults: papers/002 §6.2 — lr 5e-5, batch 4, AdamW)."""

    max_source_length: int = field(default=512, metadata={"help": "tokens of the input (question + history)"})
    max_target_length: int = field(default=64, metadata={"help": "tokens of the rewrite"})
    max_history: int | None = field(default=None, metadata={"help": "history turns kept (nearest first); None: all"})
    learning_rate: float = 5e-5
    batch_size: int = 4
    max_steps: int = 20_000
    eval_steps: int = 5_000
    num_beams: int = 4


def tokenize_rewriting(ds: Dataset, tokenizer, config: RewriterConfig | None = None) -> Dataset:
    """Rows ``history, question[, rewrite]`` -> ``input_ids, attention_mask[, labels]``."""
    config = config or RewriterConfig()

    def fn(batch):
        src = [rewriter_input(q, h, config.max_history) for q, h in zip(batch["question"], batch["history"])]
        enc = tokenizer(src, truncation=True, max_length=config.max_source_length)
        if "rewrite" in batch:
            enc["labels"] = tokenizer(text_target=batch["rewrite"], truncation=True,
                                      max_length=config.max_target_length)["input_ids"]
        return enc

    return ds.map(fn, batched=True, remove_columns=ds.column_names)


def rewrite(model, tokenizer, questions: Sequence[str], histories: Sequence[Sequence[str]], *,
            batch_size: int = 16, config: RewriterConfig | None = None, device=None,
            show_progress_bar: bool = False) -> list[str]:
    """Rewrite each ``questions[i]`` given ``histories[i]`` (oldest first) with beam search."""
    import torch
    from tqdm.auto import tqdm

    from ..devices import resolve_device

    if len(questions) != len(histories):
        raise ValueError(f"{len(questions)} questions for {len(histories)} histories")
    config = config or RewriterConfig()
    device = resolve_device(device) if device is not None else next(model.parameters()).device
    model = model.to(device).eval()
    out: list[str] = []
    src = [rewriter_input(q, h, config.max_history) for q, h in zip(questions, histories)]
    with torch.inference_mode():
        for s in tqdm(range(0, len(src), batch_size), desc="Rewriting", disable=not show_progress_bar):
            enc = tokenizer(src[s:s + batch_size], truncation=True, max_length=config.max_source_length,
                            padding=True, return_tensors="pt").to(device)
            gen = model.generate(**enc, max_new_tokens=config.max_target_length, num_beams=config.num_beams)
            out += [t.strip() for t in tokenizer.batch_decode(gen, skip_special_tokens=True)]
    return out


def bleu(predictions: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]) -> float:
    """Corpus BLEU (sacrebleu, 0-100) of ``predictions`` against one reference each (or a list
    of references each)."""
    from ..extras import require

    sacrebleu = require("sacrebleu")
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    if not predictions:
        raise ValueError("no predictions to score")
    refs = [[r] if isinstance(r, str) else list(r) for r in references]
    n = max(len(r) for r in refs)
    streams = [[r[i] if i < len(r) else r[0] for r in refs] for i in range(n)]
    return float(sacrebleu.corpus_bleu(list(predictions), streams).score)


def train_rewriter(model, tokenizer, train: Dataset, output_dir: str | Path, dev: Dataset | None = None,
                   config: RewriterConfig | None = None, **training_kwargs):
    """Fine-tune a seq2seq ``model`` on CANARD-format rows (``history, question, rewrite``); with
    ``dev`` the checkpoint with the best BLEU on it is kept (papers/002 §6.2). Returns the trainer."""
    import numpy as np
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    config = config or RewriterConfig()
    has_dev = dev is not None and len(dev) > 0
    eval_steps = min(config.eval_steps, config.max_steps)
    args = Seq2SeqTrainingArguments(
        output_dir=str(output_dir), learning_rate=config.learning_rate, per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size, max_steps=config.max_steps, predict_with_generate=True,
        generation_max_length=config.max_target_length, generation_num_beams=config.num_beams,
        eval_strategy="steps" if has_dev else "no", eval_steps=eval_steps if has_dev else None,
        save_strategy="steps", save_steps=eval_steps, load_best_model_at_end=has_dev,
        metric_for_best_model="bleu" if has_dev else None, greater_is_better=True, report_to="none",
        save_total_limit=2, **training_kwargs)

    def compute_metrics(pred):
        preds, labels = pred
        preds = np.where(preds < 0, tokenizer.pad_token_id, preds)
        labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
        p = [t.strip() for t in tokenizer.batch_decode(preds, skip_special_tokens=True)]
        r = [t.strip() for t in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        return {"bleu": bleu(p, r)}

    trainer = Seq2SeqTrainer(
        model=model, args=args, train_dataset=tokenize_rewriting(train, tokenizer, config),
        eval_dataset=tokenize_rewriting(dev, tokenizer, config) if has_dev else None,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model), processing_class=tokenizer,
        compute_metrics=compute_metrics if has_dev else None)
    trainer.train()
    return trainer
