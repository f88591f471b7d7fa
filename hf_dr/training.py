"""The one Trainer of hf-dr.

:class:`RetrievalTrainer` is a ``transformers.Trainer`` whose ``compute_loss`` calls a
training objective (see :mod:`hf_dr.objectives`), so every method gets checkpointing,
resume, mixed precision, gradient accumulation and multi-GPU (``accelerate launch`` /
``torchrun``) from Trainer, and nothing else trains models in this package.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import os

import torch
from transformers import PreTrainedModel, Trainer, TrainingArguments
from transformers.trainer import TRAINING_ARGS_NAME

from .objectives import ContrastiveObjective

__all__ = ["RetrievalTrainer", "RetrievalTrainingArguments"]


@dataclass
class RetrievalTrainingArguments(TrainingArguments):
    """``TrainingArguments`` with retrieval defaults (columns are never dropped: the
    collators produce the model inputs)."""

    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep dataset columns; hf-dr collators need them."})
    report_to: str | list[str] = field(default="none", metadata={"help": "Where to report logs (none, tensorboard, wandb, ...)."})


class RetrievalTrainer(Trainer):
    """``Trainer`` for encoders of the suite.

    Args:
        objective: callable ``(model, inputs) -> (loss, logs)``; defaults to
            :class:`~hf_dr.objectives.ContrastiveObjective`.
        evaluator: optional callable ``(model) -> {metric: value}`` (e.g.
            :class:`~hf_dr.evaluation.RerankEvaluator`) that replaces Trainer's loss-based
            evaluation, so ``metric_for_best_model="ndcg@10"`` picks the best checkpoint by a
            retrieval metric. Pass the dev set as ``eval_dataset`` too (Trainer checks it).
        Everything else is passed to ``transformers.Trainer``.
    """

    def __init__(self, *args, objective=None, evaluator=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.evaluator = evaluator
        if getattr(self.args, "remove_unused_columns", False):
            self.args.remove_unused_columns = False
        self.objective = objective if objective is not None else ContrastiveObjective()
        # objectives that follow the training schedule (e.g. FLOPS weight warm-up) bring callbacks
        for cb in getattr(self.objective, "trainer_callbacks", lambda: [])():
            self.add_callback(cb)
        self._objective_logs: dict[str, list[float]] = defaultdict(list)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, logs = self.objective(model, inputs)
        for k, v in logs.items():
            self._objective_logs[k].append(v.detach() if isinstance(v, torch.Tensor) else torch.tensor(float(v)))
        return (loss, {"loss": loss}) if return_outputs else loss

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        if self.evaluator is None:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        metrics = {f"{metric_key_prefix}_{k}": float(v)
                   for k, v in self.evaluator(self.accelerator.unwrap_model(self.model)).items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if self._objective_logs and "loss" in logs:
            for k, vals in self._objective_logs.items():
                logs[k] = round(torch.stack([v.float().cpu() for v in vals]).mean().item(), 6)
            self._objective_logs.clear()
        super().log(logs, *args, **kwargs)

    # Encoders that are plain nn.Modules (DenseEncoder) save and reload themselves through
    # save_pretrained / load_weights, so checkpoints are loadable folders and resume works.
    def _plain_encoder(self, model=None):
        m = self.accelerator.unwrap_model(model if model is not None else self.model)
        return m if not isinstance(m, PreTrainedModel) and hasattr(m, "load_weights") else None

    def _save(self, output_dir=None, state_dict=None):
        output_dir = output_dir or self.args.output_dir
        plain = self._plain_encoder()
        if plain is not None:
            os.makedirs(output_dir, exist_ok=True)
            plain.save_pretrained(output_dir)
            torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))
        else:
            super()._save(output_dir, state_dict=state_dict)
        tok = getattr(self.accelerator.unwrap_model(self.model), "tokenizer", None)
        if tok is not None and self.processing_class is None:
            tok.save_pretrained(output_dir)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        plain = self._plain_encoder(model)
        if plain is None:
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        plain.load_weights(resume_from_checkpoint)

    def _load_best_model(self):
        plain = self._plain_encoder()
        if plain is None:
            return super()._load_best_model()
        plain.load_weights(self.state.best_model_checkpoint)
