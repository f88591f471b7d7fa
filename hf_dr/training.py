"""The one Trainer of hf-dr.

:class:`RetrievalTrainer` is a ``transformers.Trainer`` whose ``compute_loss`` calls a
training objective (see :mod:`hf_dr.objectives`), so every method gets checkpointing,
resume, mixed precision, gradient accumulation and multi-GPU (``accelerate launch`` /
``torchrun``) from Trainer, and nothing else trains models in this package.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedModel, Trainer, TrainingArguments
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .io import publishable_modes, replace_folder
from .objectives import ContrastiveObjective

__all__ = ["RetrievalTrainer", "RetrievalTrainingArguments", "CheckpointError", "resolve_checkpoint",
           "last_complete_checkpoint", "is_complete_checkpoint", "final_output", "start_training",
           "quiet_progress_bars"]

logger = logging.getLogger(__name__)

TRAINER_STATE_NAME = "trainer_state.json"
_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
_STAGING_PREFIX = f".staging-{PREFIX_CHECKPOINT_DIR}-"
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin")
_LAST = {"last", "true", "latest", "yes", "1"}
_NONE = {"", "no", "none", "false", "0"}


# ---------------------------------------------------------------------- checkpoints
class CheckpointError(ValueError):
    """A checkpoint asked for (``--resume_from_checkpoint``) does not exist or is incomplete."""


def is_complete_checkpoint(path: str | os.PathLike) -> bool:
    """A checkpoint folder that a finished save left: a readable ``trainer_state.json`` (Trainer
    writes it last) and model weights. Folders half-written by a killed run fail this."""
    p = Path(path)
    try:
        json.loads((p / TRAINER_STATE_NAME).read_text())
    except (OSError, ValueError):
        return False
    return any((p / f).is_file() for f in _WEIGHT_FILES)


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest complete ``checkpoint-N`` folder of ``output_dir`` (``None`` when there is none).
    Incomplete ones (a run killed while saving, before checkpoints were written atomically) are
    skipped with one warning line."""
    d = Path(output_dir)
    if not d.is_dir():
        return None
    found = sorted(((int(m.group(1)), c) for c in d.iterdir()
                    if c.is_dir() and (m := _CHECKPOINT_RE.match(c.name))), reverse=True)
    skipped = []
    for _, c in found:
        if is_complete_checkpoint(c):
            if skipped:
                logger.warning("skipped incomplete checkpoint(s) %s (no readable %s or weights: a run killed while "
                               "saving); using %s", ", ".join(skipped), TRAINER_STATE_NAME, c.name)
            return str(c)
        skipped.append(c.name)
    if skipped:
        logger.warning("skipped incomplete checkpoint(s) %s in %s (no readable %s or weights)",
                       ", ".join(skipped), d, TRAINER_STATE_NAME)
    return None


def rotate_checkpoints(output_dir: str | os.PathLike, save_total_limit: int | None,
                       best_model_checkpoint: str | None = None) -> list[str]:
    """Delete the oldest ``checkpoint-N`` folders of ``output_dir`` (by step) until at most
    ``save_total_limit`` remain, never the newest (to resume) nor ``best_model_checkpoint``
    (Trainer's rule; its ``rotate_checkpoints`` exists in transformers 5 only). Nothing is
    deleted when the limit is ``None`` or below 1. Returns the deleted folders."""
    if not save_total_limit or save_total_limit <= 0:
        return []
    d = Path(output_dir)
    steps = {c: int(m.group(1)) for c in (d.iterdir() if d.is_dir() else ())
             if c.is_dir() and (m := _CHECKPOINT_RE.match(c.name))}
    found = sorted(steps, key=steps.get)
    protected = set(found[-1:]) | ({Path(best_model_checkpoint)} if best_model_checkpoint else set())
    keep = max(save_total_limit, len(protected & set(found)))
    deleted = []
    for c in found:
        if len(found) - len(deleted) <= keep:
            break
        if c not in protected:
            shutil.rmtree(c, ignore_errors=True)
            deleted.append(str(c))
    return deleted


def resolve_checkpoint(output_dir: str | os.PathLike, resume_from_checkpoint: str | bool | None = None, *,
                       auto: bool = False) -> str | None:
    """The checkpoint folder to resume from, or ``None`` to start from scratch.

    ``resume_from_checkpoint``: a checkpoint folder; ``True`` / ``"last"`` / ``"true"`` = the newest
    complete checkpoint under ``output_dir`` (:class:`CheckpointError` when there is none);
    ``False`` / ``"no"`` / ``"none"`` = start from scratch; ``None`` (not given) = the newest
    complete checkpoint when ``auto`` is true and one exists (logged on one line), else scratch.
    """
    if resume_from_checkpoint is None:
        if not auto:
            return None
        found = last_complete_checkpoint(output_dir)
        if found is not None:
            logger.warning("resuming from %s (found in the output folder); pass --resume_from_checkpoint no to "
                           "start over", found)
        return found
    if isinstance(resume_from_checkpoint, bool):
        value = "last" if resume_from_checkpoint else "no"
    else:
        value = str(resume_from_checkpoint).strip()
    if value.lower() in _NONE:
        return None
    if value.lower() in _LAST and not Path(value).is_dir():
        found = last_complete_checkpoint(output_dir)
        if found is None:
            raise CheckpointError(f"--resume_from_checkpoint {value}: no complete checkpoint in {output_dir} "
                                  f"(nothing to resume; drop the flag to start from scratch)")
        return found
    p = Path(value)
    if not p.is_dir():
        raise CheckpointError(f"--resume_from_checkpoint {value}: no such checkpoint folder "
                              f"(give a {PREFIX_CHECKPOINT_DIR}-N folder, or 'last' for the newest in --output_dir)")
    if not is_complete_checkpoint(p):
        raise CheckpointError(f"--resume_from_checkpoint {value}: incomplete checkpoint (no readable "
                              f"{TRAINER_STATE_NAME} or weights); use 'last' for the newest complete one")
    return str(p)


# ---------------------------------------------------------------------- final output
_OLD_WEIGHTS_RE = re.compile(r"^(model|pytorch_model|adapter_model)([-.].*)?\.(safetensors|bin|json)$")


@contextlib.contextmanager
def final_output(output_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of ``output_dir`` to write the trained model into; on success it
    replaces ``output_dir`` in one rename, with files 0644 / folders 0755. What training left in
    ``output_dir`` (checkpoints, logs, other files) is kept, unless the new model has a file of the
    same name; old weight files (``model*.safetensors``, shards, indexes) are dropped so they never
    mix with the new ones. ``training_args.bin`` (a pickle holding local paths) is left out. On an
    error the temporary folder is removed and ``output_dir`` is as it was."""
    out = Path(output_dir).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.final-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        (tmp / TRAINING_ARGS_NAME).unlink(missing_ok=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.is_dir():
        def order(e: Path):  # plain renames, the newest checkpoint last
            m = _CHECKPOINT_RE.match(e.name)
            return (1, int(m.group(1))) if m else (0, 0)

        for e in sorted(out.iterdir(), key=order):
            if (tmp / e.name).exists() or e.name.startswith(_STAGING_PREFIX) or e.name == TRAINING_ARGS_NAME \
                    or (e.is_file() and _OLD_WEIGHTS_RE.match(e.name)):
                continue
            os.replace(e, tmp / e.name)
    publishable_modes(tmp)
    replace_folder(tmp, out)


def start_training(args) -> str | None:
    """What a training script does first, in this order: no progress bars under ``--disable_tqdm``;
    the checkpoint to resume (:func:`resolve_checkpoint` with ``auto=True``: a :class:`CheckpointError`
    before any work when the one asked for is missing); the seed, before any weight is initialised
    (so the same seed gives the same weights). Returns the checkpoint to resume from, or None."""
    from transformers import enable_full_determinism, set_seed

    if args.report_to == [None]:  # HfArgumentParser turns RetrievalTrainingArguments' "none" default into [None]
        args.report_to = []
    if args.disable_tqdm:  # also the loading / saving / dataset progress bars
        quiet_progress_bars()
    resume = resolve_checkpoint(args.output_dir, args.resume_from_checkpoint, auto=True)
    enable_full_determinism(args.seed) if args.full_determinism else set_seed(args.seed)
    return resume


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
        if self.args.dataloader_pin_memory and self.args.device.type == "cpu":
            self.args.dataloader_pin_memory = False  # nothing to pin to (and torch warns on every epoch)
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

    # ------------------------------------------------------------------ resume
    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """``Trainer.train``; ``resume_from_checkpoint`` as :func:`resolve_checkpoint` reads it
        (a folder, ``True`` / ``"last"`` = the newest *complete* checkpoint of ``output_dir``,
        ``"no"``), raising :class:`CheckpointError` for a missing or incomplete one."""
        resume = resolve_checkpoint(self.args.output_dir, resume_from_checkpoint)
        return super().train(resume, *args, **kwargs)

    # ------------------------------------------------------------------ atomic checkpoints
    def _get_output_dir(self, trial) -> str:
        staging = getattr(self, "_staging_run_dir", None)
        return staging if staging is not None else super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        """Write ``checkpoint-N`` into a hidden staging folder of the run folder, then rename it into
        place, so a run killed while saving leaves no half-written ``checkpoint-N`` behind."""
        if self.args.push_to_hub:  # Trainer uploads the folder in the background: keep its path
            return super()._save_checkpoint(model, trial)
        run_dir = Path(super()._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = run_dir / f"{_STAGING_PREFIX}{self.state.global_step}"
        if self.args.should_save and staging.exists():
            shutil.rmtree(staging)  # left by a run killed while saving
        self.accelerator.wait_for_everyone()
        staged, final = staging / name, run_dir / name
        best_before = self.state.best_model_checkpoint
        self._staging_run_dir = str(staging)
        try:
            super()._save_checkpoint(model, trial)
        except BaseException:
            if self.args.should_save:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            self._staging_run_dir = None
        if self.state.best_model_checkpoint == str(staged):  # this checkpoint is the best: name its real place
            self.state.best_model_checkpoint = str(final)
            if self.args.should_save and (staged / TRAINER_STATE_NAME).is_file():
                self.state.save_to_json(str(staged / TRAINER_STATE_NAME))
        elif self.state.best_model_checkpoint is None and best_before is not None:
            self.state.best_model_checkpoint = best_before
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            replace_folder(staged, final)
            shutil.rmtree(staging, ignore_errors=True)
            rotate_checkpoints(run_dir, self.args.save_total_limit, self.state.best_model_checkpoint)
        self.accelerator.wait_for_everyone()

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

    def _load_weights(self, folder: str, model=None) -> None:
        """Load a checkpoint's weights through the model's own loader (:func:`load_checkpoint_into`)."""
        load_checkpoint_into(self.accelerator.unwrap_model(model if model is not None else self.model), folder)

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        if self.is_deepspeed_enabled or self.is_fsdp_enabled or \
                not _safetensors_in(resume_from_checkpoint):
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        self._load_weights(resume_from_checkpoint, model)

    def _load_best_model(self):
        best = self.state.best_model_checkpoint
        if self.is_deepspeed_enabled or self.is_fsdp_enabled or best is None or \
                not _safetensors_in(best):
            return super()._load_best_model()
        self._load_weights(best)


def _safetensors_in(folder) -> bool:
    """The folder's weights are safetensors: one file, or shards with their index."""
    return any((Path(folder) / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json"))


def load_checkpoint_into(model: torch.nn.Module, folder: str | os.PathLike) -> None:
    """Load a :class:`RetrievalTrainer` checkpoint's weights into ``model`` through its own loader:
    ``load_weights`` (plain encoders), ``load_checkpoint_weights`` (e.g. DDR: the REM only, the frozen
    DAM stays), or the safetensors file with tied / shared weights accounted for -- no spurious
    missing-key reports; a real mismatch is an error."""
    if hasattr(model, "load_weights") and not isinstance(model, PreTrainedModel):
        model.load_weights(folder)
    elif hasattr(model, "load_checkpoint_weights"):
        model.load_checkpoint_weights(folder)
    else:
        load_state_dict_checked(model, folder)
    logger.info("loaded the weights of %s", folder)


def load_state_dict_checked(model: torch.nn.Module, folder: str | os.PathLike) -> None:
    """Load ``folder/model.safetensors`` into ``model``. Keys absent from the file because they
    share storage with a key that is there (tied embeddings / decoder) are expected; any other
    missing or unexpected key is a :class:`CheckpointError`."""
    from .models.checkpoints import read_checkpoint

    state = read_checkpoint(Path(folder) / "model.safetensors", model.state_dict())
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing:
        own = model.state_dict(keep_vars=True)
        present = {own[k].data_ptr() for k in state if k in own}
        missing = [k for k in missing if own[k].data_ptr() not in present]
    if missing or unexpected:
        raise CheckpointError(f"{folder}: weights do not fit this model (missing {sorted(missing)[:3]}, "
                              f"unexpected {sorted(unexpected)[:3]})")


def quiet_progress_bars() -> None:
    """Turn off the transformers (weight loading / saving) and datasets progress bars; for scripts
    run with ``--disable_tqdm true``."""
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
