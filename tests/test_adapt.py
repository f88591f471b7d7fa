"""``hf-dr adapt``: label -> train -> select on the pseudo-dev set (step 0 included) ->
evaluate on the test split (read last) -> OUT/model + README.md + metrics.json; stage caching,
resume, no-qrels folders, composition with ``hf-dr label`` folders, refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hf_dr.cli import main
from tests.conftest import SAMPLE

FAST = ["--max-steps", "4", "--eval-steps", "2", "--max-length", "32", "--m", "2", "--batch-size", "4",
        "--learning-rate", "1e-2", "--negatives", "bm25"]


def _split_sample(dest: Path) -> Path:
    """The bundled sample with its 50 judged queries split: 30 in qrels/train.tsv, 20 in test.tsv."""
    shutil.copytree(SAMPLE, dest)
    head, *rows = (dest / "qrels" / "test.tsv").read_text().splitlines()
    qids = list(dict.fromkeys(r.split("\t")[0] for r in rows))
    train = set(qids[:30])
    (dest / "qrels" / "train.tsv").write_text("\n".join([head] + [r for r in rows if r.split("\t")[0] in train]) + "\n")
    (dest / "qrels" / "test.tsv").write_text("\n".join([head] + [r for r in rows if r.split("\t")[0] not in train]) + "\n")
    return dest


@pytest.fixture(scope="module")
def split_data(tmp_path_factory):
    return _split_sample(tmp_path_factory.mktemp("adapt") / "data")


@pytest.fixture
def no_qrels_data(tmp_path):
    d = tmp_path / "noqrels"
    shutil.copytree(SAMPLE, d)
    shutil.rmtree(d / "qrels")
    return d


def _adapt(capsys, *args) -> tuple[int, str, str]:
    rc = main(["adapt", *map(str, args)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture(scope="module")
def first_run(split_data, tiny_bert_dir, tmp_path_factory):
    """One dodress run; records every load_beir call with whether training had finished then."""
    import hf_dr.data as data_pkg
    import hf_dr.data.beir as beir

    out = tmp_path_factory.mktemp("runs") / "out"
    work = out.with_name(".out.work")
    calls = []
    real = beir.load_beir

    def recording(path, split="test"):
        calls.append((split, any(work.glob("train-*/DONE.json"))))
        return real(path, split)

    argv = ["adapt", "--data", str(split_data), "--model", str(tiny_bert_dir), "--method", "dodress",
            "--output", str(out), *FAST]
    mp = pytest.MonkeyPatch()
    mp.setattr(beir, "load_beir", recording)
    mp.setattr(data_pkg, "load_beir", recording)
    mp.setattr("sys.argv", ["hf-dr", *argv])  # the command the card records
    try:
        rc = main(argv)
    finally:
        mp.undo()
    assert rc == 0
    return out, work, calls


@pytest.mark.pipeline
def test_adapt_end_to_end(first_run, tmp_path, capsys):
    out, work, calls = first_run
    # the test split is read once, after training and selection
    assert [c for c in calls if c[0] == "test"] == [("test", True)]
    assert calls[0] == ("train", False)
    # no judged query and a teacher containing the student: the start is output, the checkpoint kept as unverified
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "metrics.json", "model", "unverified"]
    m = json.loads((out / "metrics.json").read_text())
    for key in ("before", "after", "p_value", "dev", "selected_step", "below_zero_shot", "budget", "teacher",
                "kept_starting_model", "labelled_evaluation"):
        assert key in m
    assert m["labelled_evaluation"] is True and m["test_queries"] == 20
    assert set(m["dev"]) == {"0", "2", "4"}  # step 0 = the untrained model
    # the fusion teacher fuses BM25 with this very student: step 0 is shown but is no candidate
    assert m["teacher_contains_student"] is True and m["starting_model_is_candidate"] is False
    assert m["selected_step"] == 0 and m["kept_starting_model"] is True and m["unverified"]["step"] in (2, 4)
    assert m["best_checkpoint"]["step"] == m["unverified"]["step"]  # its test score, measured after the choice
    # each evaluated model's test nDCG@10 by query: their means are the aggregates above (a paired test between runs)
    pq = m["test_per_query"]
    assert pq["metric"] == "ndcg@10" and len(pq["before"]) == 20 and pq["after"] == pq["before"]  # the start is output
    assert pq["best_checkpoint"].keys() == pq["before"].keys()
    assert (pq["last_checkpoint"] is None) == (m["last_checkpoint"] is None)
    for name, agg in (("before", m["before"]), ("best_checkpoint", m["best_checkpoint"])):
        assert abs(sum(pq[name].values()) / 20 - agg["ndcg@10"]) < 1e-9
    assert m["below_zero_shot"] == (m["after"]["ndcg@10"] < m["before"]["ndcg@10"])
    assert 0.0 <= m["p_value"] <= 1.0
    assert m["budget"]["steps"] == 4 and m["budget"]["max_length"] == 32
    card = (out / "README.md").read_text()
    assert "Before / after" in card and "zero-shot (before)" in card and "p = " in card
    assert "shown but not a candidate here" in card
    assert "fusion(bm25," in card and "hf-dr adapt --data data" in card  # teacher and command, no local paths
    assert str(tmp_path.parent) not in card
    # the model folder is a suite model that hf-dr push publishes as is
    from transformers import AutoModel

    AutoModel.from_pretrained(out / "model", trust_remote_code=True)
    assert main(["push", str(out / "model"), "--local-dir", str(tmp_path / "repo")]) == 0
    assert (tmp_path / "repo" / "README.md").is_file()


def _adapt_after_training(monkeypatch, capsys, hook, data, model, out):
    """A FAST dodress run whose training stage ends with ``hook(record, trained_model)``."""
    from hf_dr.adaptation.methods import get_method

    method = get_method("dodress")
    real = method.train

    def train(cfg, student, *args, **kwargs):
        record = real(cfg, student, *args, **kwargs)
        hook(record, student)
        return record

    monkeypatch.setattr(method, "train", train)
    return _adapt(capsys, "--data", data, "--model", model, "--method", "dodress", "--output", out, *FAST)


@pytest.mark.pipeline
def test_training_never_touches_the_starting_model(split_data, tiny_bert_dir, tmp_path, monkeypatch, capsys):
    """Training works on a copy: the "before" row scores the starting model as loaded, even when
    training scrambles the weights of the model it was given."""
    import torch

    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate
    from hf_dr.models import load_encoder
    from hf_dr.retrieval import EncoderRetriever

    def scrambling(record, model):
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p))

    rc, _, err = _adapt_after_training(monkeypatch, capsys, scrambling, split_data, tiny_bert_dir, tmp_path / "o")
    assert rc == 0, err
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    model = load_encoder(tiny_bert_dir)
    model.max_doc_length = model.max_query_length = m["budget"]["max_length"]
    test = load_beir(split_data, split="test")
    res = evaluate(EncoderRetriever.from_data(model, test, show_progress_bar=False), test,
                   metrics=("ndcg@10", "recall@100"))
    assert res.aggregate == pytest.approx(m["before"], abs=1e-9)


@pytest.mark.pipeline
def test_rerun_reuses_labels_and_training(first_run, split_data, tiny_bert_dir, tmp_path, capsys):
    _, work, _ = first_run
    # the first run's work folder, another output (the first run's output stays as other tests read it)
    out = tmp_path / "out"
    base = ["--data", split_data, "--model", tiny_bert_dir, "--method", "dodress", "--output", out, "--overwrite",
            "--work-dir", work]
    rc, text, _ = _adapt(capsys, *base, *FAST[:1], "2", *FAST[2:])  # only --max-steps changed: 4 -> 2
    assert rc == 0, text
    assert "label: cached" in text and "train: 2 steps" in text
    assert json.loads((out / "metrics.json").read_text())["budget"]["steps"] == 2
    first = json.loads((out / "metrics.json").read_text())
    rc, text, _ = _adapt(capsys, *base, *FAST[:1], "2", *FAST[2:])  # nothing changed
    assert rc == 0 and "label: cached" in text and "train: cached" in text
    again = json.loads((out / "metrics.json").read_text())  # the cached run's verdict: the same numbers
    assert again["verdict_sentence"] == first["verdict_sentence"] and "n/a" not in again["verdict_sentence"], again


@pytest.mark.pipeline
def test_killed_training_resumes(split_data, tiny_bert_dir, tmp_path, capsys, monkeypatch):
    from hf_dr.objectives.ranknet import RankNetObjective

    real = RankNetObjective.__call__
    n = {"calls": 0}

    def dies_at_step_3(self, model, inputs):
        n["calls"] += 1
        if n["calls"] == 3:
            raise KeyboardInterrupt("killed")
        return real(self, model, inputs)

    out = tmp_path / "out"
    args = ["--data", split_data, "--model", tiny_bert_dir, "--method", "dodress", "--output", out, *FAST]
    monkeypatch.setattr(RankNetObjective, "__call__", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        main(["adapt", *map(str, args)])
    capsys.readouterr()
    assert not out.exists()  # nothing half-written
    assert list(tmp_path.glob(".out.work/train-*/checkpoint-2"))
    monkeypatch.setattr(RankNetObjective, "__call__", real)
    rc, text, _ = _adapt(capsys, *args)
    assert rc == 0 and "label: cached" in text and "train: resuming from checkpoint-2" in text
    assert set(json.loads((out / "metrics.json").read_text())["dev"]) == {"0", "2", "4"}


@pytest.mark.pipeline
def test_no_qrels_folder(no_qrels_data, tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "out"
    rc, text, err = _adapt(capsys, "--data", no_qrels_data, "--model", tiny_bert_dir, "--method", "dodress",
                           "--output", out, *FAST[:1], "2", *FAST[2:])
    assert rc == 0, err
    assert "no labelled evaluation" in text.lower()
    m = json.loads((out / "metrics.json").read_text())
    assert m["labelled_evaluation"] is False and m["before"] is None and m["p_value"] is None
    assert m["training_queries_have_qrels"] is False and m["label_stats"]["train_queries"] > 0
    assert "No labelled evaluation was possible" in (out / "README.md").read_text()


@pytest.mark.pipeline
def test_label_command_without_qrels(no_qrels_data, tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "labels"
    rc = main(["label", "--data", str(no_qrels_data), "--dense-model", str(tiny_bert_dir), "--negatives", "bm25",
               "--m", "2", "--max-length", "32", "--output", str(out)])
    assert rc == 0, capsys.readouterr().err
    stats = json.loads((out / "stats.json").read_text())
    assert stats["queries"] == 50 and stats["triplets"] > 0


def test_training_queries_exclude_test_queries(tmp_path):
    from hf_dr.data.beir import BeirFormatError, load_training_queries

    d = tmp_path / "d"
    shutil.copytree(SAMPLE, d)  # only qrels/test.tsv: every query is a test query
    with pytest.raises(BeirFormatError, match="no training queries"):
        load_training_queries(d, "train")
    with (d / "queries.jsonl").open("a") as f:
        f.write(json.dumps({"_id": "new-q", "text": "an unjudged query"}) + "\n")
    _, queries, has_qrels = load_training_queries(d, "train")
    assert queries == {"new-q": "an unjudged query"} and has_qrels is False


@pytest.mark.parametrize("method", ["pseudo-margin-mse", "berm", "cai"])
@pytest.mark.pipeline
def test_methods_on_reused_labels(method, first_run, split_data, tiny_bert_dir, tmp_path, capsys):
    """--labels composes with a label folder; each method's objective trains two steps."""
    _, work, _ = first_run
    out = tmp_path / "out"
    extra = ["--mlm-steps", "2", "--no-vocabulary"] if method == "cai" else []
    rc, text, err = _adapt(capsys, "--data", split_data, "--model", tiny_bert_dir, "--method", method,
                           "--labels", work / "labels", "--output", out, "--max-steps", "2", "--eval-steps", "1",
                           "--max-length", "32", "--batch-size", "4", "--learning-rate", "1e-3", *extra)
    assert rc == 0, err
    assert "label: reusing" in text and "train: 2 steps" in text
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["dev"]) == {"0", "1", "2"} and m["method"] == method
    kind = {"pseudo-margin-mse": "hf_dr_dense.json", "berm": "modeling_berm.py", "cai": "modeling_splade.py"}[method]
    assert (out / "model" / kind).is_file()
    # OUT/model is a Sentence Transformers folder too, encoding as hf-dr does
    from tests.test_st_out import assert_st_matches

    st = assert_st_matches(out / "model")
    assert type(st).__name__ == ("SparseEncoder" if method == "cai" else "SentenceTransformer")
    if method == "cai":  # OUT's card says how
        assert 'SparseEncoder("model"' in (out / "README.md").read_text()


def test_margin_mse_needs_teacher_scores():
    from datasets import Dataset

    from hf_dr.labeling.finetune import with_teacher_scores

    ds = with_teacher_scores(Dataset.from_list([{"query": "q", "pos": "a", "neg": "b", "pos_score": 2.0,
                                                 "neg_score": 0.5}]))
    assert ds[0]["scores"] == [2.0, 0.5]
    with pytest.raises(ValueError, match="teacher's scores"):
        with_teacher_scores(Dataset.from_list([{"query": "q", "pos": "a", "neg": "b"}]))


@pytest.mark.parametrize("args, message", [
    (["--method", "ddr"], "not a REM"),
    (["--method", "dodress", "--split", "test"], "test split is for evaluation only"),
    (["--method", "ddr", "--rem", "REM"], "give the REM once"),
    (["--method", "dodress", "--margin-scale", "auto"], "applies to --method pseudo-margin-mse"),
])
def test_refusals(args, message, split_data, tiny_bert_dir, tmp_path, capsys):
    rc, _, err = _adapt(capsys, "--data", split_data, "--model", tiny_bert_dir, "--output", tmp_path / "o",
                        *[str(tmp_path) if a == "REM" else a for a in args])
    assert rc == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.pipeline
def test_cai_refuses_a_model_without_mlm_head(split_data, tmp_path, capsys, tiny_bert_dir):
    from transformers import AutoConfig, AutoTokenizer, BertModel

    enc = tmp_path / "encoder"
    BertModel(AutoConfig.from_pretrained(tiny_bert_dir)).save_pretrained(enc)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(enc)
    rc, _, err = _adapt(capsys, "--data", split_data, "--model", enc, "--method", "cai", "--output", tmp_path / "o")
    assert rc == 2 and "masked-LM head" in err


@pytest.mark.pipeline
def test_non_empty_output_refused(split_data, tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep").write_text("x")
    rc, _, err = _adapt(capsys, "--data", split_data, "--model", tiny_bert_dir, "--method", "dodress",
                        "--output", out)
    assert rc == 2 and "--overwrite" in err and (out / "keep").is_file()


@pytest.fixture(scope="module")
def rem_dir(tiny_bert_dir, tmp_path_factory):
    """A REM (untrained; LoRA + parallel adapters) saved with its source DAM in ``dam/``."""
    import torch

    from hf_dr.models.ddr import DDRModel

    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("rem") / "rem"
    DDRModel.from_backbone(tiny_bert_dir, lora_rank=4, max_doc_length=32, max_query_length=16).save_pretrained(d)
    return d


@pytest.mark.pipeline
def test_ddr_trains_a_target_dam_for_the_rem(first_run, split_data, rem_dir, tmp_path, capsys):
    """--method ddr: MLM of the REM's DAM on the corpus; each checkpoint + the unchanged REM is a dev
    candidate; the output is the REM with the chosen DAM, loadable with AutoModel."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel

    _, work, _ = first_run
    out = tmp_path / "out"
    rc, text, err = _adapt(capsys, "--data", split_data, "--model", rem_dir, "--method", "ddr", "--labels",
                           work / "labels", "--output", out, "--max-steps", "4", "--eval-steps", "2",
                           "--max-length", "32", "--batch-size", "4", "--learning-rate", "5e-3")
    assert rc == 0, err
    assert "target DAM by continual MLM" in text and "dev: target DAM at step 4" in text
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["dev"]) == {"0", "2", "4"} and m["ddr"]["rem"] == "rem"
    assert m["teacher_contains_student"] is False  # the labels' dense model is the backbone, not this REM
    loaded = AutoModel.from_pretrained(out / "model", trust_remote_code=True)
    assert type(loaded).__name__ == "DDRModel"
    rem_name = next(p.name for p in rem_dir.glob("*.safetensors"))
    before, after = load_file(rem_dir / rem_name), load_file(out / "model" / rem_name)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)  # REM kept
    src = load_file(rem_dir / "dam" / "model.safetensors")
    dam = load_file(out / "model" / "dam" / "model.safetensors")
    changed = any(not torch.equal(src[k], dam[k]) for k in src if k in dam)
    assert changed == (m["selected_step"] != 0)
    assert "REM" in (out / "README.md").read_text()


@pytest.mark.pipeline
def test_last_checkpoint_is_reported_when_selection_chose_another(split_data, tiny_bert_dir, tmp_path, monkeypatch,
                                                                  capsys):
    """When the dev set picks an earlier step, the last checkpoint's test score is reported beside
    the selected one (how often selection saves a run is then countable)."""
    import hf_dr.adaptation.stages as stages

    def early_best(record, model):
        record["dev"] = {2: 2.0, 4: -1.0}  # step 2 best, the last step worst

    # a teacher that does not contain the student, whose pseudo-labels resolve the gain: the checkpoint is output
    monkeypatch.setattr(stages, "_containment", lambda *a: {"contained": False, "by": None, "why": "forced"})
    monkeypatch.setattr(stages, "_pseudo_gain", lambda run, labels, trained, step: {
        "queries": 6, "difference": 0.2, "resolution": 0.1, "p_value": 0.01, "compared_step": step})
    rc, text, err = _adapt_after_training(monkeypatch, capsys, early_best, split_data, tiny_bert_dir, tmp_path / "o")
    assert rc == 0, err
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert m["selected_step"] == 2 and m["verdict"] == "better on pseudo-labels only" and m["unverified"] is None
    assert m["verdict_interval"]["difference"] == 0.2 and m["verdict_interval"]["half_width"] == 0.1
    assert m["last_checkpoint"]["step"] == 4 and 0.0 <= m["last_checkpoint"]["ndcg@10"] <= 1.0
    pq = m["test_per_query"]
    assert pq["best_checkpoint"] is None and pq["last_checkpoint"].keys() == pq["after"].keys() == pq["before"].keys()
    assert abs(sum(pq["last_checkpoint"].values()) / len(pq["before"]) - m["last_checkpoint"]["ndcg@10"]) < 1e-9
    assert "the last checkpoint (step 4, not selected) would score test nDCG@10" in text
    assert "the last\ncheckpoint, step 4, would have scored" in (tmp_path / "o" / "README.md").read_text()


@pytest.mark.pipeline
def test_an_unresolved_pseudo_gain_keeps_the_start_and_the_checkpoint_as_unverified(split_data, tiny_bert_dir, tmp_path,
                                                                                    monkeypatch, capsys):
    """No judged query and a teacher that does not contain the student: a checkpoint that beats the
    start on the pseudo-labels by less than their prediction interval does not replace it; it is kept
    beside it."""
    import hf_dr.adaptation.stages as stages

    def best_is_better(record, model):
        record["dev"] = {2: 2.0, 4: -1.0}

    monkeypatch.setattr(stages, "_containment", lambda *a: {"contained": False, "by": None, "why": "forced"})
    monkeypatch.setattr(stages, "_pseudo_gain", lambda run, labels, trained, step: {
        "queries": 6, "difference": 0.02, "resolution": 0.1, "p_value": 0.6, "compared_step": step})
    out = tmp_path / "o"
    rc, text, err = _adapt_after_training(monkeypatch, capsys, best_is_better, split_data, tiny_bert_dir, out)
    assert rc == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["kept_starting_model"] is True and m["selected_step"] == 0 and m["verdict_word"] == "MARGINAL"
    assert m["unverified"]["step"] == 2 and \
        "less than the 95% prediction interval of the 6 held-out pseudo-dev queries (±0.1414" in m["unverified"]["why"]
    assert m["verdict_sentence"].startswith("kept the starting model; the trained checkpoint (step 2, in unverified/)")
    assert (out / "unverified" / "config.json").is_file() and m["after"] == m["before"]
    assert m["best_checkpoint"]["step"] == 2 and "is in" in text and "unverified" in text


def test_calibrated_margin_scale_puts_student_margins_on_the_teachers_scale(tiny_bert_dir):
    """``--margin-scale auto``: mean teacher margin / mean student margin on a sample of triplets;
    a student that ranks the sampled negatives first has no scale to calibrate (the default then)."""
    import numpy as np
    from datasets import Dataset

    from hf_dr.labeling.finetune import calibrate_margin_scale, default_scale
    from hf_dr.models import load_encoder

    model = load_encoder(str(tiny_bert_dir), kind="sparse")
    words = ["cancer", "fever", "anemia", "obesity", "asthma", "scurvy", "malaria", "rickets"]
    rows = [{"query": f"{w} cause", "pos": f"{w} cause {w}", "neg": f"{v} weather", "pos_score": 6.0 + i,
             "neg_score": 1.0} for i, (w, v) in enumerate(zip(words, words[::-1]))]
    q = model.encode_queries([r["query"] for r in rows], max_length=32)
    margin = (np.asarray(q.multiply(model.encode_corpus([r["pos"] for r in rows], max_length=32)).sum(1)) -
              np.asarray(q.multiply(model.encode_corpus([r["neg"] for r in rows], max_length=32)).sum(1))).mean()
    assert margin > 0
    teacher = np.mean([r["pos_score"] - r["neg_score"] for r in rows])
    scale = calibrate_margin_scale(model, Dataset.from_list(rows), max_length=32)
    # float32 encodes of a text agree to ~1e-6 relative across batch compositions and thread counts
    # (padding, blocked reductions); a margin is the difference of two such scores, so its relative
    # error grows by |score| / |margin|: the tolerance is 1e-5 times that ratio (at least 1e-5)
    score_scale = float(np.mean(np.abs(np.asarray(q.multiply(model.encode_corpus([r["pos"] for r in rows],
                                                                                  max_length=32)).sum(1)))))
    rel = 1e-5 * max(1.0, score_scale / float(abs(margin)))
    assert scale == pytest.approx(teacher / margin, rel=rel)
    doubled = [{**r, "pos_score": 2 * r["pos_score"], "neg_score": 2 * r["neg_score"]} for r in rows]
    # doubling the teacher doubles the ratio (the student's margins, encoded again, within ``rel``)
    assert calibrate_margin_scale(model, Dataset.from_list(doubled), max_length=32) == pytest.approx(2 * scale, rel=rel)
    swapped = [{**r, "pos": r["neg"], "neg": r["pos"]} for r in rows]
    assert calibrate_margin_scale(model, Dataset.from_list(swapped), max_length=32) == default_scale(model)


@pytest.mark.pipeline
def test_cai_without_mlm_trains_without_idf_and_outputs_with_it(first_run, split_data, tiny_bert_dir, tmp_path,
                                                                 capsys, monkeypatch):
    """``--method cai --mlm-steps 0``: IDF fitted on the target corpus, off while training (the
    paper's target-supervision setting: contrastive, small FLOPS weights), on in the output model."""
    import torch

    from hf_dr.models.splade import SPLADECAI
    from hf_dr.objectives import SpladeObjective

    seen = []
    real = SpladeObjective.__call__

    def spy(self, model, inputs):
        seen.append((bool(model.config.use_idf), "teacher_scores" in inputs, self.lambda_q, self.lambda_d))
        return real(self, model, inputs)

    monkeypatch.setattr(SpladeObjective, "__call__", spy)
    from hf_dr.adaptation.methods.base import DevSet

    scored, prompts, real_evaluate = [], [], DevSet.evaluate

    def spy_dev(self, model, *a, **k):  # every dev evaluation: the model's class, IDF switch and fingerprint
        from hf_dr.fingerprints import model_fingerprint

        scored.append((type(model).__name__, bool(model.config.use_idf), model_fingerprint(model)))
        prompts.append(getattr(model, "query_prefix", None))
        return real_evaluate(self, model, *a, **k)

    monkeypatch.setattr(DevSet, "evaluate", spy_dev)
    _, work, _ = first_run
    out = tmp_path / "out"
    args = ["--data", split_data, "--model", tiny_bert_dir, "--method", "cai", "--labels", work / "labels",
            "--output", out, "--max-steps", "2", "--eval-steps", "1", "--max-length", "32", "--batch-size", "4",
            "--learning-rate", "1e-3", "--mlm-steps", "0", "--no-vocabulary", "--query-prompt", "query: "]
    rc, text, err = _adapt(capsys, *args)
    assert rc == 0, err
    assert "cai: IDF on the target corpus" in text and "continual MLM" not in text
    # the default FLOPS weights: the paper's (0.0006 / 0.0008 at batch 32) scaled to this run's batch of 4,
    # times the default --flops-scale 4 (at batch 8, the paper's own)
    assert seen and all(s == (False, False, pytest.approx(0.0006 / 8 * 4), pytest.approx(0.0008 / 8 * 4))
                        for s in seen)
    # the dev set scores each checkpoint as it ships (IDF on), the training model staying as it trains:
    # selection chooses among the models it would output, and the saved choice scores what selection saw
    # (the objective saw IDF off at step 2, after step 1's evaluation: the view did not leak into training)
    (_, start_idf, _), *trained = [(name, idf, fp) for name, idf, fp in scored]
    assert not start_idf  # step 0: the student as it is (and as it ships when kept)
    trained = [(idf, fp) for name, idf, fp in trained if name == "SPLADECAI"]
    assert len(trained) >= 2 and all(idf for idf, _ in trained)  # steps 1 and 2, IDF on
    # and with the user's prompt, as the output ships with it (the start's and every checkpoint's)
    assert len(prompts) == len(scored) and set(prompts) == {"query: "}

    # the trained weights chosen on the dev set, as the method outputs them (OUT/model when they beat step 0)
    selected, = (tmp_path / ".out.work").glob("train-cai-*/selected")
    model = SPLADECAI.from_pretrained(selected)
    assert model.config.use_idf and not torch.allclose(model.idf, torch.ones_like(model.idf))
    m = json.loads((out / "metrics.json").read_text())
    from hf_dr.fingerprints import model_fingerprint

    best_step = max(m["dev"].items(), key=lambda kv: (kv[1], -int(kv[0])) if kv[0] != "0" else (float("-inf"), 0))[0]
    assert model_fingerprint(model) == trained[[int(s) for s in m["dev"] if s != "0"].index(int(best_step))][1]
    assert m["cai"]["mlm_steps"] == 0 and m["cai"]["idf"]
    assert SPLADECAI.from_pretrained(out / "model").config.use_idf == (not m["kept_starting_model"])
    # the work folder moved: its cached stages are read from their new place
    moved = tmp_path / "moved.work"
    shutil.move(tmp_path / ".out.work", moved)
    rc, text, err = _adapt(capsys, *args, "--overwrite", "--work-dir", moved)
    assert rc == 0, err
    assert "cai: cached" in text and "train: cached" in text


def test_cai_flops_weights_follow_the_batch():
    """FLOPS on a batch estimates sum_j mu_j^2 + sigma_j^2 / B: the paper's weights were set at batch
    32, so a batch of B gets them times B / 32 (and a run at another batch another training key)."""
    import torch

    from hf_dr.adaptation.config import AdaptConfig
    from hf_dr.adaptation.methods.cai import PAPER_FLOPS, SpladeCAI, flops_weights
    from hf_dr.losses import flops_loss

    assert flops_weights(32) == PAPER_FLOPS == (0.0006, 0.0008)
    assert flops_weights(8) == pytest.approx((0.00015, 0.0002))
    from hf_dr.adaptation.plan import resolve

    cfg = lambda b, **o: resolve(AdaptConfig(data="d", model="m", method="cai", output="o", batch_size=b,  # noqa: E731
                                             max_steps=30, options=o), check=False)
    assert SpladeCAI().train_key(cfg(8)) != SpladeCAI().train_key(cfg(32))
    obj = SpladeCAI().objective(cfg(8, flops_scale=1.0), None, None).objective
    assert (obj.lambda_q, obj.lambda_d, obj.warmup_steps) == (pytest.approx(0.00015), pytest.approx(0.0002), 10)
    # --flops-scale multiplies both weights, keys the training and is recorded in the budget; 0 is no FLOPS.
    # The method's default is 4 (measured on three corpora): at batch 8, the paper's own weights
    from hf_dr.adaptation.methods.cai import CAIOptions

    scaled = cfg(8, flops_scale=4.0)
    assert cfg(8).options.flops_scale == 4.0
    assert SpladeCAI().train_key(cfg(8)) == SpladeCAI().train_key(scaled)  # the default is the explicit value
    obj = SpladeCAI().objective(scaled, None, None).objective
    assert (obj.lambda_q, obj.lambda_d) == (pytest.approx(0.0006), pytest.approx(0.0008))
    assert SpladeCAI().train_key(scaled) != SpladeCAI().train_key(cfg(8, flops_scale=1.0))
    assert SpladeCAI().budget(scaled, {})["flops_weights"] == pytest.approx([0.0006, 0.0008])
    assert flops_weights(8, 0.0) == (0.0, 0.0)
    with pytest.raises(ValueError, match="--flops-scale"):
        CAIOptions(flops_scale=-1.0)
    # the premise: for terms active in few documents, a small batch's FLOPS is larger by about 32 / B
    g = torch.Generator().manual_seed(0)
    reps = torch.rand(4096, 2000, generator=g) * (torch.rand(4096, 2000, generator=g) < 0.01)
    small = torch.stack([flops_loss(b) for b in reps.split(8)]).mean()
    large = torch.stack([flops_loss(b) for b in reps.split(32)]).mean()
    assert 3.0 < float(small / large) < 4.0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "big"])
def test_margin_scale_refuses_non_positive_values(value, split_data, tiny_bert_dir, tmp_path, capsys):
    rc, _, err = _adapt(capsys, "--data", split_data, "--model", tiny_bert_dir, "--method", "pseudo-margin-mse",
                        "--output", tmp_path / "o", "--margin-scale", value)
    assert rc == 2 and "'auto' or a positive number" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- defaults = measured rows
def _adapt_rows():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "adapt.json"
    return json.loads(path.read_text())


def test_method_defaults_are_measured_rows():
    """Every default of `hf-dr adapt` is the configuration of a measured row: each ``defaults`` row
    (a run with no tuning flag) recorded exactly today's resolved defaults, and every method's
    training budget (steps, eval steps, lr, batch, MLM steps) is that of a SciFact row."""
    from hf_dr.adaptation.pipeline import METHOD_DEFAULTS, AdaptConfig, resolve

    def resolved_config(cfg):
        return dict(resolve(cfg, check=False).record)

    rows = [r for r in _adapt_rows() if r.get("budget")]
    # the two no-flag rows were measured: `hf-dr adapt --method cai` on splade-tiny and
    # `--method berm` on MiniLM, each with nothing but the inputs
    measured = {r["row"] for r in rows if r.get("defaults") and r["dataset"] == "scifact"}
    assert {"splade-tiny:cai", "minilm:berm"} <= measured, measured
    for r in rows:
        if r.get("defaults"):
            method = r["row"].split(":")[1]
            want = resolved_config(AdaptConfig(data="d", model="m", method=method, output="o"))
            assert r["config"] == want, (r["row"], r["config"], want)
    for method in METHOD_DEFAULTS:
        cfg = resolved_config(AdaptConfig(data="d", model="m", method=method, output="o"))
        budgets = [r["budget"] for r in rows if r["dataset"] == "scifact" and r["row"].split(":")[1] == method]
        match = [b for b in budgets if (b["steps"], b["eval_steps"], b["learning_rate"], b["batch_size"]) ==
                 (cfg["max_steps"], cfg["eval_steps"], cfg["learning_rate"], cfg["batch_size"])
                 and b.get("mlm_steps") == (cfg["mlm_steps"] if method == "cai" else None)]
        assert match, f"{method}: no SciFact row was measured with the defaults {cfg} (rows: {budgets})"


@pytest.mark.pipeline
def test_cli_defaults_are_the_method_defaults():
    """`hf-dr adapt` with no tuning flag leaves every per-method field unset, and the pipeline fills
    it from METHOD_DEFAULTS (cai: no vocabulary, no MLM, lr 1e-4)."""
    import argparse

    from hf_dr.adaptation.pipeline import METHOD_DEFAULTS, AdaptConfig, resolve
    from hf_dr.commands import adapt as adapt_cmd

    parser = argparse.ArgumentParser()
    adapt_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["adapt", "--data", "d", "--model", "m", "--method", "cai", "--output", "o"])
    assert (args.max_steps, args.learning_rate, args.mlm_steps, args.expand_vocabulary) == (None, None, None, None)
    cfg = resolve(adapt_cmd.config_from_args(args), check=False)
    assert (cfg.max_steps, cfg.learning_rate, cfg.options.mlm_steps, cfg.options.expand_vocabulary,
            cfg.eval_steps) == (300, 1e-4, 0, False, 100)
    for method, own in METHOD_DEFAULTS.items():
        cfg = resolve(AdaptConfig(data="d", model="m", method=method, output="o"), check=False)
        assert all(getattr(cfg.options if hasattr(cfg.options, k) else cfg, k) == v for k, v in own.items()), method
    # a flag given wins, and the paper's chain stays reachable
    args = parser.parse_args(["adapt", "--data", "d", "--model", "m", "--method", "cai", "--output", "o",
                              "--vocabulary", "--mlm-steps", "1000", "--max-steps", "1000"])
    cfg = resolve(adapt_cmd.config_from_args(args), check=False)
    assert (cfg.max_steps, cfg.options.mlm_steps, cfg.options.expand_vocabulary,
            cfg.eval_steps) == (1000, 1000, True, 200)
