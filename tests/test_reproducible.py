"""Reproducible and resumable training: same seed -> same weights, atomic checkpoints, resume
from the last complete checkpoint, clean resume output."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import warnings
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file

from hf_dr.data import RetrievalCollator
from hf_dr.models.dense import DenseEncoder
from hf_dr.objectives import get_objective
from hf_dr.training import (CheckpointError, RetrievalTrainer, RetrievalTrainingArguments, final_output,
                            last_complete_checkpoint, resolve_checkpoint)

from .conftest import REPO

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
ROWS = [{"query": f"what is topic {w}", "pos": f"{w} is a topic about {w} things", "neg": [f"unrelated {i} text"]}
        for i, w in enumerate(WORDS)]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture()
def rows_file(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in ROWS))
    return f


@pytest.fixture()
def train_ddr(monkeypatch, tiny_bert_dir, rows_file):
    """``run(out, *extra)`` runs examples/train_ddr.py's main() in this process on a tiny DAM."""
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # main() replaces it
    mod = _script("train_ddr")

    def run(out: Path, *extra: str):
        argv = ["train_ddr.py", "--model_name_or_path", str(tiny_bert_dir), "--train_data", str(rows_file),
                "--lora_rank", "4", "--per_device_train_batch_size", "4", "--max_query_length", "16",
                "--max_doc_length", "16", "--use_cpu", "true", "--seed", "0", "--disable_tqdm", "true",
                "--report_to", "none", "--output_dir", str(out), *extra]
        monkeypatch.setattr(sys, "argv", argv)
        mod.main()
    yield run
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()  # main() turned them off (--disable_tqdm true)
    datasets.enable_progress_bars()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _same_weights(a: Path, b: Path) -> bool:
    x, y = load_file(str(a)), load_file(str(b))
    return x.keys() == y.keys() and all(torch.allclose(x[k], y[k], atol=1e-6) for k in x)


def test_ddr_same_seed_writes_identical_weights(train_ddr, tmp_path, tiny_bert_dir):
    train_ddr(tmp_path / "a", "--max_steps", "3", "--save_strategy", "no")
    torch.rand(100)  # whatever happened to the global RNG in between must not matter
    train_ddr(tmp_path / "b", "--max_steps", "3", "--save_strategy", "no")
    assert _sha(tmp_path / "a" / "model.safetensors") == _sha(tmp_path / "b" / "model.safetensors")
    # what training writes carries no absolute local path, and is readable by others
    for name in ("train_info.json", "config.json"):
        text = (tmp_path / "a" / name).read_text()
        assert str(tmp_path) not in text and str(tiny_bert_dir) not in text, name
        assert ((tmp_path / "a" / name).stat().st_mode & 0o777) == 0o644
    info = json.loads((tmp_path / "a" / "train_info.json").read_text())
    assert info["model_name_or_path"] == tiny_bert_dir.name and "model_name_or_path" in info["local_inputs"]
    assert not list(tmp_path.glob(".a.*"))  # no temporary sibling left
    from hf_dr.models.ddr import DDRModel

    m = DDRModel.from_pretrained(tmp_path / "a")  # the DAM is found from the relative reference
    assert Path(m.config.dam_name_or_path).resolve() == Path(tiny_bert_dir).resolve()


def test_berm_same_seed_same_weights(tiny_bert_dir, rows_file, tmp_path):
    from transformers import HfArgumentParser

    tb = _script("train_berm")
    outs = []
    for name in ("a", "b"):
        parser = HfArgumentParser((tb.ModelArguments, tb.DataArguments, tb.BERMArguments, RetrievalTrainingArguments))
        m, d, b, args = parser.parse_args_into_dataclasses(
            ["--model_name_or_path", str(tiny_bert_dir), "--train_data", str(rows_file), "--style", "vanilla",
             "--output_dir", str(tmp_path / name), "--max_steps", "3", "--per_device_train_batch_size", "2",
             "--use_cpu", "true", "--save_strategy", "no", "--disable_tqdm", "true", "--max_doc_length", "32",
             "--seed", "3"])
        tb.train(m, d, b, args)
        outs.append(tmp_path / name / "model.safetensors")
        torch.rand(100)
    assert _same_weights(*outs)
    assert str(tiny_bert_dir) not in (tmp_path / "a" / "config.json").read_text()


def test_killed_run_resumes_from_last_complete_checkpoint(train_ddr, tmp_path, capfd, caplog):
    steps = ("--max_steps", "4", "--save_steps", "2")
    train_ddr(tmp_path / "ref", *steps)
    ref = tmp_path / "ref" / "model.safetensors"
    run = tmp_path / "run"
    train_ddr(run, *steps)
    # what a kill leaves: the last checkpoint half-written, a staging folder, no final model
    (run / "checkpoint-4" / "trainer_state.json").unlink()
    (run / ".staging-checkpoint-6" / "checkpoint-6").mkdir(parents=True)
    (run / "model.safetensors").unlink()
    assert last_complete_checkpoint(run) == str(run / "checkpoint-2")
    capfd.readouterr()
    caplog.clear()
    train_ddr(run, *steps)  # the same command again: resumes on its own
    ours = [r.getMessage() for r in caplog.records if r.name == "hf_dr.training"]
    assert [m for m in ours if m.startswith("resuming from")] == \
        [f"resuming from {run / 'checkpoint-2'} (found in the output folder); pass --resume_from_checkpoint no to start over"]
    assert len([m for m in ours if m.startswith("skipped incomplete checkpoint(s) checkpoint-4")]) == 1
    err = capfd.readouterr().err + caplog.text
    assert "missing keys" not in err and "corrupted" not in err  # our own loading path, no spurious report
    assert _same_weights(run / "model.safetensors", ref)
    assert json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4


def test_resume_true_without_checkpoint_is_a_clear_error(train_ddr, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        train_ddr(tmp_path / "none", "--max_steps", "2", "--resume_from_checkpoint", "True")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error: --resume_from_checkpoint True: no complete checkpoint" in err and "Traceback" not in err
    assert not (tmp_path / "none").exists()  # refused before any work


def test_resolve_checkpoint_values(tmp_path):
    assert resolve_checkpoint(tmp_path, None) is None and resolve_checkpoint(tmp_path, "no") is None
    assert resolve_checkpoint(tmp_path, False) is None and resolve_checkpoint(tmp_path, None, auto=True) is None
    for value in (True, "last", "True"):
        with pytest.raises(CheckpointError, match="no complete checkpoint"):
            resolve_checkpoint(tmp_path, value)
    half = tmp_path / "checkpoint-5"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="incomplete checkpoint"):
        resolve_checkpoint(tmp_path, str(half))
    with pytest.raises(CheckpointError, match="no such checkpoint folder"):
        resolve_checkpoint(tmp_path, str(tmp_path / "checkpoint-9"))
    good = tmp_path / "checkpoint-3"
    good.mkdir()
    (good / "model.safetensors").write_bytes(b"")
    (good / "trainer_state.json").write_text("{}")
    assert resolve_checkpoint(tmp_path, "last") == str(good) == resolve_checkpoint(tmp_path, None, auto=True)
    assert resolve_checkpoint(tmp_path, str(good)) == str(good)


def _dense_trainer(tiny_bert_dir, out: Path, **kw) -> RetrievalTrainer:
    torch.manual_seed(0)
    enc = DenseEncoder.from_pretrained(tiny_bert_dir, pooling="mean")
    args = RetrievalTrainingArguments(output_dir=str(out), per_device_train_batch_size=4, max_steps=4,
                                      save_steps=2, learning_rate=1e-3, seed=0, use_cpu=True, disable_tqdm=True, **kw)
    return RetrievalTrainer(model=enc, args=args, train_dataset=Dataset.from_list(ROWS),
                            data_collator=RetrievalCollator(enc.tokenizer, 16, 16),
                            objective=get_objective("contrastive", scale=1.0))


def test_checkpoint_appears_only_complete(tiny_bert_dir, tmp_path, monkeypatch):
    trainer = _dense_trainer(tiny_bert_dir, tmp_path / "out")

    def killed(self, output_dir):
        assert Path(output_dir).name == "checkpoint-2" and (Path(output_dir) / "model.safetensors").is_file()
        raise KeyboardInterrupt("killed while saving")

    monkeypatch.setattr(RetrievalTrainer, "_save_optimizer_and_scheduler", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert not (tmp_path / "out" / "checkpoint-2").exists()
    assert [p.name for p in (tmp_path / "out").iterdir()] == []  # no staging folder left either


def test_checkpoints_rotate_and_best_checkpoint_is_the_real_folder(tiny_bert_dir, tmp_path):
    trainer = _dense_trainer(tiny_bert_dir, tmp_path / "out", save_total_limit=1)
    trainer.train()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["checkpoint-4"]
    state = json.loads((tmp_path / "out" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4


def test_mlm_resume_is_quiet_and_final_folder_is_atomic(tiny_bert_dir, tmp_path, capfd, caplog):
    from transformers import AutoModelForMaskedLM, AutoTokenizer, TrainingArguments

    from hf_dr.adaptation.mlm import MLMArguments, train_mlm

    texts = [f"document {i} about {w} and proteins" for i, w in enumerate(WORDS * 2)]
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)

    def run(resume):
        torch.manual_seed(0)
        model = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir)
        args = TrainingArguments(output_dir=str(tmp_path / "dam"), per_device_train_batch_size=4, max_steps=2,
                                 save_steps=1, report_to="none", use_cpu=True, seed=0, disable_tqdm=True)
        return train_mlm(model, tok, texts, args, MLMArguments(max_length=16), resume_from_checkpoint=resume)

    run(None)
    capfd.readouterr()
    trainer = run(str(tmp_path / "dam" / "checkpoint-1"))  # tied decoder: absent from the file, expected
    err = capfd.readouterr().err + caplog.text
    assert trainer.state.global_step == 2
    assert "missing keys" not in err and "corrupted" not in err
    out = tmp_path / "dam"
    assert (out / "model.safetensors").is_file() and (out / "checkpoint-2").is_dir()
    assert not (out / "training_args.bin").exists()
    assert ((out / "config.json").stat().st_mode & 0o777) == 0o644


def test_checkpoint_with_legacy_layernorm_names_reloads_and_a_foreign_one_is_refused(tiny_bert_dir, tmp_path):
    """transformers 5.0-5.5 save a model that from_pretrained loaded with its LayerNorms as
    LayerNorm.gamma / .beta: such a checkpoint reloads (renamed as from_pretrained renames them), and
    weights that do not fit are still refused."""
    from safetensors.torch import save_file
    from transformers import AutoModelForMaskedLM

    from hf_dr.training import load_checkpoint_into, load_state_dict_checked

    enc = DenseEncoder.from_pretrained(str(tiny_bert_dir))
    enc.save_pretrained(tmp_path / "ckpt")
    f = tmp_path / "ckpt" / "model.safetensors"
    state = {k: v.clone() for k, v in enc.backbone.state_dict().items()}
    legacy = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
              for k, v in state.items()}
    assert sum(k.endswith("LayerNorm.gamma") for k in legacy) == 5
    save_file(legacy, str(f), metadata={"format": "pt"})
    other = DenseEncoder.from_pretrained(str(tiny_bert_dir))
    with torch.no_grad():
        for p in other.parameters():
            p.zero_()
    load_checkpoint_into(other, tmp_path / "ckpt")
    for k, v in other.backbone.state_dict().items():
        assert torch.equal(v, state[k]), k
    save_file({k: v for k, v in legacy.items() if k != "encoder.layer.0.output.LayerNorm.gamma"}, str(f))
    with pytest.raises(ValueError, match="missing .'encoder.layer.0.output.LayerNorm.weight'"):
        load_checkpoint_into(other, tmp_path / "ckpt")
    save_file({**legacy, "encoder.layer.0.output.Norm.gamma": torch.ones(32)}, str(f))
    with pytest.raises(ValueError, match="unexpected .'encoder.layer.0.output.Norm.gamma'"):
        load_checkpoint_into(other, tmp_path / "ckpt")

    mlm = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir)  # a PreTrainedModel: load_state_dict_checked
    mlm.save_pretrained(tmp_path / "mlm")
    mlm_state = {k: v.clone() for k, v in mlm.state_dict().items() if k != "cls.predictions.decoder.weight"}  # tied
    save_file({k.replace("LayerNorm.weight", "LayerNorm.gamma"): v for k, v in mlm_state.items()},
              str(tmp_path / "mlm" / "model.safetensors"), metadata={"format": "pt"})
    load_state_dict_checked(mlm, tmp_path / "mlm")
    wide = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir)
    wide.bert.embeddings.LayerNorm = torch.nn.LayerNorm(33)
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_state_dict_checked(wide, tmp_path / "mlm")


def test_final_output_keeps_folder_on_error(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text("old")
    with pytest.raises(RuntimeError):
        with final_output(out) as tmp:
            (tmp / "config.json").write_text("new")
            raise RuntimeError("boom")
    assert (out / "config.json").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
