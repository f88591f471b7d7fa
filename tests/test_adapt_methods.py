"""Adaptation methods as plug-ins: methods defined in this file, registered with
``register_method``, run end to end through ``hf-dr adapt``'s pipeline — labelled, trained,
selected, evaluated, written with their own card rows and metrics — without a line of ``hf_dr/``
naming them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_dr.adaptation.methods import (Method, TrainingSetup, TripletMethod, get_method, register_method,
                                      unregister_method)
from hf_dr.cli import main
from tests.test_adapt import _split_sample


class Toy(TripletMethod):
    """One objective on the pseudo-label triplets: all a new triplet method writes."""

    name = "toy"
    description = "in-batch contrastive loss on the pseudo-label triplets (a test's toy method)"
    defaults = {"max_steps": 2, "learning_rate": 1e-3}
    calls = 0

    def objective(self, cfg, model, inputs):
        from hf_dr.objectives import ContrastiveObjective

        def counted(model, batch):
            Toy.calls += 1
            return ContrastiveObjective()(model, batch)

        return TrainingSetup(counted, record={"toy_objective": "contrastive"})

    def budget(self, cfg, record):
        return {"toy_objective": record.get("toy_objective")}

    def card_rows(self, metrics):
        return [f"| toy | {metrics['budget']['toy_objective']} loss, from a test file |"]


class ToyNoise(Method):
    """A method with its own training loop (no Trainer, no triplets): each step nudges the weights
    by seeded noise; every step is a checkpoint scored on the dev set."""

    name = "toy-noise"
    description = "seeded weight noise, a checkpoint per step (a test's toy method)"
    defaults = {"max_steps": 3, "learning_rate": 1e-3}
    trains_on_triplets = False
    reports = True

    def train(self, cfg, model, inputs):
        import torch

        torch.manual_seed(cfg.seed)
        dev = {}
        for step in range(1, cfg.max_steps + 1):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * cfg.learning_rate)
            ckpt = inputs.run_dir / f"checkpoint-{step}"
            ckpt.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), ckpt / "weights.pt")
            dev[step] = inputs.dev.score("dev_toy_noise", model)
        best = max(dev, key=lambda s: (dev[s], -s))
        self.save_checkpoint(cfg, model, inputs.run_dir / f"checkpoint-{best}", inputs.run_dir / "selected")
        return {"dev": dev}

    def checkpoint_to_model(self, init, checkpoint):
        import copy

        import torch

        model = copy.deepcopy(init)
        model.load_state_dict(torch.load(Path(checkpoint) / "weights.pt"))
        return model

    def report(self, cfg, student, prepared):
        return {"noise": cfg.learning_rate}


@pytest.fixture(scope="module")
def toys():
    for method in (Toy, ToyNoise):
        register_method(method)
    yield
    for method in (Toy, ToyNoise):
        unregister_method(method.name)


@pytest.fixture(scope="module")
def toy_run(toys, tiny_bert_dir, tmp_path_factory):
    data = _split_sample(tmp_path_factory.mktemp("toy") / "data")
    out = tmp_path_factory.mktemp("runs") / "out"
    rc = main(["adapt", "--data", str(data), "--model", str(tiny_bert_dir), "--method", "toy", "--output", str(out),
               "--eval-steps", "1", "--max-length", "32", "--m", "2", "--batch-size", "4", "--negatives", "bm25"])
    assert rc == 0
    return data, out


@pytest.mark.pipeline
def test_a_method_from_a_test_file_runs_end_to_end(toy_run, capsys):
    data, out = toy_run
    assert Toy.calls >= 2  # its objective trained the model
    m = json.loads((out / "metrics.json").read_text())
    assert m["method"] == "toy" and m["method_description"] == Toy.description
    assert (m["config"]["max_steps"], m["config"]["learning_rate"]) == (2, 1e-3)  # its defaults
    assert set(m["dev"]) == {"0", "1", "2"} and m["labelled_evaluation"] and m["test_queries"] == 20
    assert m["budget"]["toy_objective"] == "contrastive" and m["budget"]["margin_scale"] is None
    assert m["cai"] is None and m["ddr"] is None and "toy" not in m
    assert m["stages"] == {"label": "computed", "train": "computed"}
    card = (out / "README.md").read_text()
    assert "| toy | contrastive loss, from a test file |" in card and "- toy" in card
    assert (out / "model" / "config.json").is_file()
    # --method offers every registered method
    assert main(["adapt", "--help"]) == 0
    assert "toy-noise" in capsys.readouterr().out


@pytest.mark.pipeline
def test_a_method_with_its_own_training_loop(toy_run, tiny_bert_dir, tmp_path, capsys):
    data, first = toy_run
    out = tmp_path / "out"
    rc = main(["adapt", "--data", str(data), "--model", str(tiny_bert_dir), "--method", "toy-noise",
               "--labels", str(first.with_name(".out.work") / "labels"), "--output", str(out), "--max-length", "32"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "label: reusing" in text
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["dev"]) == {"0", "1", "2", "3"} and m["method"] == "toy-noise"
    assert m["toy-noise"] == {"noise": 1e-3} and m["cai"] is None
    # the teacher fuses BM25 with this very student and no query is judged: the start is output, the best
    # checkpoint kept beside it as unverified
    assert m["teacher_contains_student"] and m["selected_step"] == 0 and m["unverified"]["step"] in (1, 2, 3)
    assert (out / "unverified" / "config.json").is_file()
    # the last checkpoint, not the output, is made a model by the method's own hook and evaluated
    assert m["last_checkpoint"]["step"] == 3
    # a re-run finds the training cached
    rc = main(["adapt", "--data", str(data), "--model", str(tiny_bert_dir), "--method", "toy-noise",
               "--labels", str(first.with_name(".out.work") / "labels"), "--output", str(out), "--max-length", "32",
               "--overwrite"])
    assert rc == 0 and "train: cached" in capsys.readouterr().out


def test_registry_refusals(toys):
    with pytest.raises(ValueError, match="already registered"):
        register_method(Toy)
    with pytest.raises(TypeError):
        register_method(object())
    with pytest.raises(ValueError, match="unknown method 'nope': one of dodress, .*, toy, toy-noise"):
        get_method("nope")


def test_the_pipeline_names_no_method():
    import hf_dr.adaptation.pipeline as pipeline
    import hf_dr.adaptation.stages as stages

    for module in (pipeline, stages):
        source = Path(module.__file__).read_text()
        assert "method ==" not in source and "method in (" not in source
        assert not any(f'"{name}"' in source for name in ("dodress", "pseudo-margin-mse", "cai", "berm", "ddr"))


def test_a_method_with_an_option_of_its_own_gets_a_flag(tmp_path, capsys):
    """A new method with an option is one class: its Options dataclass gives `hf-dr adapt` a flag in
    the method's own argument group, the plan hands the value to the method, and another method
    given the flag is refused."""
    from dataclasses import dataclass

    from hf_dr.adaptation.methods import option
    from hf_dr.adaptation.pipeline import AdaptConfig, resolve
    from hf_dr.commands import adapt as adapt_cmd

    @dataclass(frozen=True)
    class WidthOptions:
        toy_width: int = option(3, "toy-width: how wide the toy is", minimum=1)

    class ToyWidth(Toy):
        name = "toy-width"
        description = "a toy with an option (a test's toy method)"
        Options = WidthOptions

    register_method(ToyWidth)
    try:
        assert main(["adapt", "--help"]) == 0
        text = capsys.readouterr().out
        assert "--method toy-width:" in text and "--toy-width TOY_WIDTH" in text and "how wide the toy is" in text
        import argparse

        parser = argparse.ArgumentParser()
        adapt_cmd.register(parser.add_subparsers())
        base = ["adapt", "--data", "d", "--model", "m", "--output", "o"]
        args = parser.parse_args([*base, "--method", "toy-width", "--toy-width", "7"])
        assert resolve(adapt_cmd.config_from_args(args), check=False).options.toy_width == 7
        assert resolve(AdaptConfig(data="d", model="m", method="toy-width", output="o"), check=False).options \
            == WidthOptions(3)
        with pytest.raises(ValueError, match="--toy-width: it applies to --method toy-width, not dodress"):
            resolve(adapt_cmd.config_from_args(parser.parse_args([*base, "--method", "dodress", "--toy-width", "7"])),
                    check=False)
        rc = main([*base[:-1], str(tmp_path / "o"), "--method", "toy-width", "--toy-width", "0"])
        assert rc == 2 and "--toy-width" in capsys.readouterr().err
        with pytest.raises(ValueError, match="already an option of toy-width"):
            register_method(type("Clash", (Toy,), {"name": "clash", "Options": WidthOptions}))
    finally:
        unregister_method("toy-width")


#: options of the built-in methods, and modules of adaptation/ that are a method's own (the CAI chain's)
METHOD_OPTIONS = ("mlm_steps", "expand_vocabulary", "delta_v", "flops_scale", "margin_scale")
METHOD_OWN = {"cai.py", "vocabulary.py", "mlm.py"}


def test_no_method_option_is_named_outside_its_method():
    root = Path(__file__).resolve().parent.parent / "hf_dr" / "adaptation"
    named = [f"{p.relative_to(root)}: {o}" for p in sorted(root.rglob("*.py"))
             if "methods" not in p.relative_to(root).parts and p.name not in METHOD_OWN
             for o in METHOD_OPTIONS if o in p.read_text()]
    assert named == []
