"""Continual masked-language-model pre-training on a target corpus.

Used for DDR's Domain Adaption Modules (DAMs) and for SPLADE-CAI's continual
pre-training: BERT masking (15% of tokens; of those 80% ``[MASK]``, 10% random, 10% kept)
on random windows of the corpus documents, trained by :class:`hf_dr.training.RetrievalTrainer`
(atomic checkpoints, resume) with :class:`hf_dr.objectives.MLMObjective`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from datasets import Dataset
from transformers import AutoModelForMaskedLM, DataCollatorForLanguageModeling, Trainer, TrainingArguments

logger = logging.getLogger(__name__)

__all__ = ["MLMArguments", "RandomWindowMLMCollator", "tokenize_corpus", "load_mlm_model", "train_mlm", "mlm_loss"]


@dataclass
class MLMArguments:
    """Masking and windowing of continual MLM."""

    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of tokens selected for prediction."})
    mask_replace_prob: float = field(default=0.8, metadata={"help": "Of the selected tokens, fraction replaced by [MASK]."})
    random_replace_prob: float = field(default=0.1, metadata={
        "help": "Of the selected tokens, fraction replaced by a random token."})
    max_length: int = field(default=256, metadata={"help": "Window length in tokens, special tokens included."})


def tokenize_corpus(texts: Sequence[str], tokenizer, batch_size: int = 1000) -> Dataset:
    """Tokenise whole documents (no truncation, no special tokens) into a ``Dataset``
    with an ``input_ids`` column; empty documents are dropped."""
    texts = [t for t in texts if t and t.strip()]
    if not texts:
        raise ValueError("the MLM corpus is empty")
    ds = Dataset.from_dict({"text": list(texts)})

    def tokenize(b):  # the whole texts, chunked below (verbose=False: no "longer than the maximum" warning)
        return {"input_ids": tokenizer(b["text"], add_special_tokens=False, truncation=False, verbose=False)["input_ids"]}

    return ds.map(tokenize, batched=True, batch_size=batch_size, remove_columns=["text"], desc="Tokenising MLM corpus")


class RandomWindowMLMCollator:
    """Crop each document to a random window of ``max_length`` tokens (a new crop every
    epoch, so long documents are seen whole over training), add special tokens, pad, mask."""

    def __init__(self, tokenizer, args: MLMArguments | None = None, seed: int | None = None):
        self.tokenizer = tokenizer
        self.args = args or MLMArguments()
        self.rng = random.Random(seed)
        self.inner = DataCollatorForLanguageModeling(
            tokenizer, mlm=True, mlm_probability=self.args.mlm_probability,
            mask_replace_prob=self.args.mask_replace_prob, random_replace_prob=self.args.random_replace_prob)
        # the special tokens the tokenizer puts around a text, e.g. [CLS] ... [SEP]
        self.specials = list(tokenizer("", add_special_tokens=True)["input_ids"])
        self.n_special = len(self.specials)

    def _wrap(self, ids: list[int]) -> list[int]:
        sp = self.specials
        if len(sp) == 2:
            return [sp[0], *ids, sp[1]]
        if len(sp) == 1:
            return [*ids, sp[0]] if sp[0] == self.tokenizer.eos_token_id else [sp[0], *ids]
        return ids

    def __call__(self, rows):
        width = self.args.max_length - self.n_special
        feats = []
        for r in rows:
            ids = list(r["input_ids"])
            if len(ids) > width:
                start = self.rng.randrange(0, len(ids) - width + 1)
                ids = ids[start:start + width]
            feats.append({"input_ids": self._wrap(ids)})
        return self.inner(feats)  # pads, builds the attention mask, masks 80/10/10


def load_mlm_model(path_or_id: str, **kwargs):
    """``AutoModelForMaskedLM`` from any checkpoint. A checkpoint without an MLM head (e.g.
    a sentence-transformers ``BertModel``) gets a fresh head whose decoder is tied to the
    input embeddings; the missing weights are logged."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report / tied-weights notes: we log our own line below
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(path_or_id, output_loading_info=True, **kwargs)
    finally:
        hf_logging.set_verbosity(level)
    if info.get("missing_keys"):
        logger.warning("%s has no MLM head weights (%d missing: %s...): initialised a new head, decoder tied to "
                       "the embeddings", path_or_id, len(info["missing_keys"]), sorted(info["missing_keys"])[:3])
    model.tie_weights()
    return model


def train_mlm(model, tokenizer, texts: Sequence[str], training_args: TrainingArguments,
              mlm_args: MLMArguments | None = None, eval_texts: Sequence[str] | None = None,
              resume_from_checkpoint: str | bool | None = None, save: bool = True) -> Trainer:
    """Continual MLM of ``model`` on ``texts`` with :class:`~hf_dr.training.RetrievalTrainer`;
    returns the trainer (its ``state.log_history`` holds the losses). ``resume_from_checkpoint``
    as :func:`hf_dr.training.resolve_checkpoint` reads it. With ``save``, model + tokenizer replace
    ``training_args.output_dir`` in one rename (checkpoints kept); the caller saves otherwise."""
    from ..objectives import MLMObjective
    from ..training import RetrievalTrainer, final_output

    mlm_args = mlm_args or MLMArguments()
    if getattr(training_args, "remove_unused_columns", True):
        training_args.remove_unused_columns = False
    train_ds = tokenize_corpus(texts, tokenizer)
    eval_ds = tokenize_corpus(eval_texts, tokenizer) if eval_texts else None
    collator = RandomWindowMLMCollator(tokenizer, mlm_args, seed=training_args.seed)
    trainer = RetrievalTrainer(model=model, args=training_args, train_dataset=train_ds, eval_dataset=eval_ds,
                               data_collator=collator, processing_class=tokenizer, objective=MLMObjective())
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    if save and trainer.is_world_process_zero():
        with final_output(training_args.output_dir) as tmp:
            trainer.save_model(str(tmp))
    return trainer


def mlm_loss(model, tokenizer, texts: Sequence[str], mlm_args: MLMArguments | None = None,
             batch_size: int = 16, seed: int = 0) -> float:
    """Mean masked-LM loss of ``model`` on ``texts`` (fixed seed), e.g. to compare DAMs."""
    mlm_args = mlm_args or MLMArguments()
    ds = tokenize_corpus(texts, tokenizer)
    torch.manual_seed(seed)
    collator = RandomWindowMLMCollator(tokenizer, mlm_args, seed=seed)
    device = next(model.parameters()).device
    model.eval()
    losses = []
    with torch.inference_mode():
        for s in range(0, len(ds), batch_size):
            batch = collator([ds[i] for i in range(s, min(s + batch_size, len(ds)))])
            out = model(**{k: v.to(device) for k, v in batch.items()})
            losses.append(out.loss.item())
    return float(sum(losses) / len(losses))
