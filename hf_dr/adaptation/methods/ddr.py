"""``ddr``: DDR (papers/001) for a trained REM (``--model REM``): a target DAM by continual MLM on
the corpus, started from the REM's own (source) DAM (the paper's sequential initialisation); every
MLM checkpoint, paired with the unchanged REM, is a candidate on the dev set. The REM is not
retrained (train a REM on pseudo-labels with ``dodress`` / ``pseudo-margin-mse`` and a REM as
``--model``: its DAM stays frozen)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

from ..config import AdaptError
from .base import Method, TrainInputs, option
from .registry import register_method


@dataclass(frozen=True)
class DDROptions:
    rem: str | None = option(None, "ddr: the REM the target DAM is made for, when --model cannot say so (a Hub id); "
                             "a REM folder is given as --model", is_input=True, record=False)


def rem_of(cfg) -> str:
    """The trained REM ``--method ddr`` adapts: ``--model`` when it is a DDR REM folder (or a Hub id
    given as ``--rem``); anything else is refused (:class:`~hf_dr.adaptation.config.AdaptError`)."""
    rem = cfg.options.rem
    if rem and str(rem) != str(cfg.model):
        raise AdaptError(f"--method ddr: give the REM once, as --model (got --model {cfg.model} and --rem {rem})")
    cfg_file = Path(str(cfg.model)).expanduser() / "config.json"
    model_type = None
    if cfg_file.is_file():
        try:
            model_type = json.loads(cfg_file.read_text()).get("model_type")
        except ValueError:
            model_type = None
    elif rem:  # a Hub id named as a REM
        return str(rem)
    if model_type != "ddr":
        raise AdaptError(f"--method ddr adapts a trained DDR REM to the corpus (a target DAM for it): {cfg.model} is "
                         f"not a REM ({model_type or 'no DDR config.json'}); train one with examples/train_ddr.py, "
                         f"or adapt this model with dodress / pseudo-margin-mse")
    return str(cfg.model)


@register_method
class DDR(Method):
    name = "ddr"
    description = "DDR: a target DAM by continual MLM on the corpus for a given REM (papers/001)"
    defaults = {"max_steps": 300, "learning_rate": 2e-5}
    Options = DDROptions
    trains_on_triplets = False  # the labels only make the dev set
    reports = True

    def check(self, cfg) -> None:
        rem_of(cfg)

    def load_student(self, cfg):
        from ...models.ddr import DDRModel

        return DDRModel.from_pretrained(rem_of(cfg))  # the REM on its source DAM

    def train(self, cfg, model, inputs: TrainInputs) -> dict:
        """DDR's target DAM (papers/001 Sec. 3.3): continual MLM on the corpus from the REM's source
        DAM, a checkpoint every ``eval_steps``, each (a DAM for the unchanged REM) scored on the dev
        set. Resumes from the newest complete checkpoint of ``inputs.run_dir``."""
        from transformers import TrainingArguments

        from ...training import last_complete_checkpoint, quiet_progress_bars
        from ..mlm import MLMArguments, load_mlm_model, train_mlm

        run_dir, max_length, say = inputs.run_dir, inputs.max_length, inputs.say
        texts = inputs.data.doc_texts()
        last = last_complete_checkpoint(run_dir)
        if last:
            say(f"train: resuming the target DAM's MLM from {Path(last).name} ({cfg.max_steps} steps in all)")
        else:
            say(f"train: target DAM by continual MLM on {len(texts)} documents ({cfg.max_steps} steps, batch "
                f"{cfg.batch_size}, lr {cfg.learning_rate:g}, max length {max_length}), from the REM's DAM")
        if not cfg.show_progress_bar:
            quiet_progress_bars()
        args = TrainingArguments(output_dir=str(run_dir), max_steps=cfg.max_steps,
                                 per_device_train_batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
                                 save_strategy="steps", save_steps=cfg.eval_steps, save_total_limit=None,
                                 seed=cfg.seed, data_seed=cfg.seed, report_to=[],
                                 logging_steps=max(1, min(50, cfg.max_steps // 10)),
                                 disable_tqdm=not cfg.show_progress_bar, **cfg.training_precision)
        mlm = load_mlm_model(model.config.dam_name_or_path)
        train_mlm(mlm, model.tokenizer, texts, args, MLMArguments(max_length=max_length),
                  resume_from_checkpoint=last or False, save=False)
        del mlm
        checkpoints = sorted(run_dir.glob("checkpoint-*"), key=lambda c: int(c.name.split("-")[-1]))
        dev, by_set = {}, {"dev_pseudo": {}, "dev_judged": {}}
        for ckpt in checkpoints:  # ``model`` is a copy: each checkpoint's DAM is loaded into it in turn
            step = int(ckpt.name.split("-")[-1])
            model.load_dam(str(ckpt))
            scores = inputs.dev.scores("dev_ddr", model)
            dev[step] = scores["ndcg@10"]
            for name in ("pseudo", "judged"):
                if f"{name}_ndcg@10" in scores:
                    by_set[f"dev_{name}"][step] = scores[f"{name}_ndcg@10"]
            say(f"dev: target DAM at step {step}: nDCG@10 = {dev[step]:.4f}")
        if dev:
            best = max(dev, key=lambda s: (dev[s], -s))
            self.save_checkpoint(cfg, model, run_dir / f"checkpoint-{best}", run_dir / "selected")
        return {"dev": dev, **{k: v for k, v in by_set.items() if v}}

    def checkpoint_to_model(self, init, checkpoint: Path):
        """``init`` (the REM) with the checkpoint's DAM."""
        model = copy.deepcopy(init)
        model.load_dam(str(checkpoint))
        return model

    def report(self, cfg, student, prepared) -> dict | None:
        from ...hub.paths import public_name

        source = student.config.dam_name_or_path
        return {"rem": public_name(rem_of(cfg)), "trained": "the target DAM (continual MLM); the REM unchanged",
                "source_dam": public_name(source) if source else source}

    def card_rows(self, metrics: dict) -> list[str]:
        ddr = metrics.get("ddr")
        if not ddr:
            return []
        return [f"| DDR | the target DAM was trained (continual MLM on the corpus, from the REM's DAM "
                f"`{ddr['source_dam']}`); the REM `{ddr['rem']}` is unchanged; the steps above are MLM steps |"]
