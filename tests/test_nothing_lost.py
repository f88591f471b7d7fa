"""Nothing lost: every command that writes a folder writes it whole or not at all,
refuses a non-empty one without --overwrite, never deletes an input with --overwrite; the label
stage cache is keyed on content; published folders carry no local path; an unreachable Hub is a
one-line error."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from datasets import load_from_disk

from hf_dr.cli import main
from hf_dr.hub import HubError, prepare_model_folder, push_dataset, push_model
from hf_dr.labeling import pseudo_relevance as pr
from hf_dr.labeling.negatives import RandomNegatives
from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels
from hf_dr.labeling.teacher import parse_teacher

from .conftest import REPO, SAMPLE


# ---------------------------------------------------------------- helpers
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _siblings(folder: Path) -> list[str]:
    """Hidden work folders left beside ``folder`` (a temporary output must not survive an error)."""
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.tmp"))


def _splade(src: Path, dest: Path) -> Path:
    from hf_dr.models.splade import SPLADECAI

    m = SPLADECAI.from_backbone(src, max_doc_length=32, max_query_length=16)
    m.fit_idf(["protein folding in cells", "the cat sat on the mat"])
    m.save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def beir_train(tmp_path_factory) -> Path:
    """The bundled sample with its queries as a *train* split (the labeller refuses test queries)."""
    d = tmp_path_factory.mktemp("sf") / "scifact-mini"
    shutil.copytree(SAMPLE, d)
    (d / "qrels" / "test.tsv").rename(d / "qrels" / "train.tsv")
    return d


@pytest.fixture(scope="module")
def data(beir_train):
    from hf_dr.data import load_beir

    return load_beir(beir_train, split="train")


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    from hf_dr.models.dense import DenseEncoder

    return DenseEncoder.from_pretrained(tiny_bert_dir, pooling="mean", normalize=False, max_length=32)


def _label(data, out, enc, cache, overwrite=False, **kw):
    cfg = PseudoLabelConfig(**{"max_queries": 10, "dev_queries": 2, "k": 1, "m": 3, "bm25_top": 20,
                               "simans_top_k": 50, **kw})
    return build_pseudo_labels(data, out, cfg, dense_encoder=enc, dense_name="tiny", cache_dir=cache,
                               show_progress_bar=False, overwrite=overwrite)


@pytest.fixture(scope="module")
def labels_dir(tmp_path_factory, data, encoder) -> Path:
    out = tmp_path_factory.mktemp("labels") / "labels"
    _label(data, out, encoder, None, negatives="bm25")
    return out


# ---------------------------------------------------------------- push --local-dir
def test_push_overwrite_never_deletes_the_model_it_pushes(tiny_bert_dir, tmp_path, capsys, monkeypatch):
    model = _splade(tiny_bert_dir, tmp_path / "proj" / "model")
    before = _snapshot(model)
    # out/proj/model pushed to out/proj: the parent of the model
    assert main(["push", str(model), "--local-dir", str(tmp_path / "proj"), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "refusing to overwrite" in err and "contains the input" in err and "Traceback" not in err
    assert _snapshot(model) == before
    # the current directory, with or without --overwrite, even when empty
    monkeypatch.chdir(tmp_path / "proj")
    for extra in ([], ["--overwrite"]):
        assert main(["push", "model", "--local-dir", ".", *extra]) == 2
        assert "current directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")
    assert main(["push", str(model), "--local-dir", "."]) == 2
    assert (tmp_path / "empty").is_dir() and _snapshot(model) == before


def test_push_overwrite_replaces_the_folder_only_once_complete(tiny_bert_dir, tmp_path, monkeypatch):
    model = _splade(tiny_bert_dir, tmp_path / "model")
    out = tmp_path / "OUT"
    prepare_model_folder(model, out)
    before = _snapshot(out)
    with pytest.raises(HubError, match="not empty"):
        prepare_model_folder(model, out)

    from hf_dr.hub import models

    def broken(*a, **k):
        raise RuntimeError("killed while rendering the card")

    monkeypatch.setattr(models, "render_model_card", broken)
    with pytest.raises(RuntimeError, match="killed"):
        prepare_model_folder(model, out, overwrite=True)
    assert _snapshot(out) == before and _siblings(out) == []
    with pytest.raises(RuntimeError, match="killed"):  # a first push that fails leaves no folder at all
        prepare_model_folder(model, tmp_path / "NEW")
    assert not (tmp_path / "NEW").exists() and _siblings(tmp_path / "NEW") == []


def _no_local_paths(folder: Path, *paths: Path) -> None:
    needles = {str(p) for p in paths} | {str(p.resolve()) for p in paths}
    for f in folder.rglob("*"):
        if not f.is_file() or f.suffix in (".safetensors", ".parquet", ".arrow", ".png", ".py"):
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        for n in needles:
            assert n not in text, f"{f.relative_to(folder)} names the local path {n}"


def test_published_model_folder_has_no_local_path_and_readable_files(tiny_bert_dir, tmp_path):
    model = _splade(tiny_bert_dir, tmp_path / "work" / "model")
    # what a training run leaves: absolute paths of this machine in the config and train_info.json
    cfg = json.loads((model / "config.json").read_text())
    cfg["_name_or_path"] = str(tiny_bert_dir)
    (model / "config.json").write_text(json.dumps(cfg))
    (model / "train_info.json").write_text(json.dumps({
        "base_model": str(tiny_bert_dir), "output_dir": str(model), "data": str(REPO / "hf_dr" / "data"),
        "command": f"python train.py --data {tmp_path / 'data'} --output {model}", "steps": 3}))
    for weights in model.glob("*.safetensors"):  # a SPLADE-CAI folder's two shards (mlm.*, idf)
        os.chmod(weights, 0o600)
    out = Path(push_model(model, local_dir=tmp_path / "OUT", metrics=[]))
    _no_local_paths(out, tmp_path, tiny_bert_dir, REPO)
    info = json.loads((out / "train_info.json").read_text())
    assert info["base_model"] == tiny_bert_dir.name and info["output_dir"] == "model" and info["steps"] == 3
    assert json.loads((out / "config.json").read_text()).get("_name_or_path") in (None, tiny_bert_dir.name)
    modes = {f.name: f.stat().st_mode & 0o777 for f in out.rglob("*") if f.is_file()}
    assert modes["model-00001-of-00002.safetensors"] == 0o644 and set(modes.values()) == {0o644}

    # the folder that is uploaded is the same: no local path either
    seen = {}

    class FakeApi:
        def create_repo(self, *a, **k):
            pass

        def upload_folder(self, folder_path, **k):
            seen["files"] = _snapshot(Path(folder_path))
            _no_local_paths(Path(folder_path), tmp_path, tiny_bert_dir, REPO)
            return "https://huggingface.co/me/m/commit/1"

    push_model(model, "me/m", api=FakeApi())
    assert "README.md" in seen["files"] and "model.safetensors.index.json" in seen["files"]  # SPLADE-CAI: 2 shards


# ---------------------------------------------------------------- push: an unreachable Hub
@pytest.mark.parametrize("error", ["offline", "connect", "unauthorized"])
def test_push_without_the_hub_is_a_one_line_error(error, tiny_bert_dir, tmp_path, capsys, monkeypatch):
    import httpx
    import huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    model = _splade(tiny_bert_dir, tmp_path / "model")

    def fail(*a, **k):
        if error == "offline":
            raise OfflineModeIsEnabled("Cannot reach https://huggingface.co/api/repos/create: offline mode is enabled.")
        if error == "connect":
            raise httpx.ConnectError("[Errno -3] Temporary failure in name resolution")
        response = httpx.Response(401, request=httpx.Request("POST", "https://huggingface.co/api/repos/create"))
        raise HfHubHTTPError("401 Client Error: Unauthorized", response=response)

    class NoHub:
        def __init__(self, *a, **k):
            pass

        create_repo = upload_folder = staticmethod(fail)

    monkeypatch.setattr(huggingface_hub, "HfApi", NoHub)
    assert main(["push", str(model), "--repo-id", "me/splade"]) == 2
    full = capsys.readouterr().err
    err = full.strip().splitlines()[-1]  # (progress bars of the model loading come before it)
    assert "Traceback" not in full and err.startswith("hf-dr push: error: ") and "--local-dir" in err
    if error == "unauthorized":
        assert "refused" in err and "--token" in err
    else:
        assert "could not reach the Hugging Face Hub" in err and "HF_HUB_OFFLINE" in err
    with pytest.raises(HubError):
        push_model(model, "me/splade", api=NoHub())


# ---------------------------------------------------------------- label: the output folder
@pytest.mark.pipeline
def test_label_refuses_a_folder_with_user_files_and_an_overwrite_that_deletes_its_data(
        beir_train, tiny_bert_dir, tmp_path, capsys):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "README.md").write_text("my notes")
    (user / "data-00000-of-00001.arrow").write_bytes(b"my arrow file")
    before = _snapshot(user)
    args = ["label", "--data", str(beir_train), "--dense-model", str(tiny_bert_dir), "--negatives", "bm25",
            "--max-queries", "5", "--dev-queries", "0"]
    assert main([*args, "--output", str(user)]) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and "--overwrite" in err and _snapshot(user) == before
    # --overwrite of a folder that holds the --data folder: refused, nothing touched
    assert main([*args, "--output", str(beir_train.parent), "--overwrite"]) == 2
    assert "contains the input" in capsys.readouterr().err and (beir_train / "corpus.jsonl").is_file()
    # a cache inside the output folder would be lost when the folder is replaced
    assert main([*args, "--output", str(tmp_path / "new"), "--cache-dir", str(tmp_path / "new" / "cache")]) == 2
    assert "inside the output folder" in capsys.readouterr().err and not (tmp_path / "new").exists()


@pytest.mark.parametrize("argv, flag", [(["--max-queries", "0"], "--max-queries"), (["--k", "0"], "--k"),
                                        (["--m", "0"], "--m"), (["--m", "-2"], "--m"),
                                        (["--bm25-top", "-1"], "--bm25-top"), (["--dev-queries", "-1"], "--dev-queries"),
                                        (["--batch-size", "0"], "--batch-size")])
@pytest.mark.pipeline
def test_label_counts_are_checked_before_any_work(argv, flag, beir_train, tiny_bert_dir, tmp_path, capsys):
    assert main(["label", "--data", str(beir_train), "--dense-model", str(tiny_bert_dir),
                 "--output", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err and "must be" in err and "Traceback" not in err and not (tmp_path / "o").exists()


@pytest.mark.pipeline
def test_a_crash_mid_label_leaves_no_folder_or_the_previous_one(data, encoder, tmp_path, monkeypatch):
    out = tmp_path / "labels"
    real_save = pr._save_dataset
    calls = []

    def killed_between_train_and_dev(ds, path):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed while the dev set is being saved
        return real_save(ds, path)

    monkeypatch.setattr(pr, "_save_dataset", killed_between_train_and_dev)
    with pytest.raises(KeyboardInterrupt):
        _label(data, out, encoder, None, negatives="bm25")
    assert not out.exists() and _siblings(out) == []
    monkeypatch.setattr(pr, "_save_dataset", real_save)
    first = _label(data, out, encoder, None, negatives="bm25")  # the cache beside it kept the stages
    assert set(first.stats["cache"]["reused"]) >= {"bm25", "rerank"}
    before = _snapshot(out)

    # an --overwrite run that crashes in a stage: the previous complete folder is untouched
    def boom(*a, **k):
        raise RuntimeError("crash in the sampler")

    monkeypatch.setattr(RandomNegatives, "sample", boom)
    with pytest.raises(RuntimeError, match="crash in the sampler"):
        _label(data, out, encoder, None, negatives="random", overwrite=True)
    assert _snapshot(out) == before and _siblings(out) == []
    assert load_from_disk(str(out)).num_rows == first.stats["triplets"]
    assert load_from_disk(str(out / "dev")).num_rows == first.stats["dev_rows"]
    assert not (out / "cache").exists() and (tmp_path / ".labels.cache").is_dir()


# ---------------------------------------------------------------- label: a cache keyed on content
@pytest.mark.pipeline
def test_label_cache_is_keyed_on_content_not_paths(beir_train, tiny_bert_dir, tmp_path):
    from hf_dr.data import load_beir
    from hf_dr.models import load_encoder

    cache = tmp_path / "cache"
    model_dir = tmp_path / "dense"
    shutil.copytree(tiny_bert_dir, model_dir)
    enc = load_encoder(str(model_dir))
    stages = {"bm25", "doc_embeddings", "query_embeddings", "rerank", "dense_run", "triplets"}
    first = _label(load_beir(beir_train, split="train"), tmp_path / "a", enc, cache)
    assert set(first.stats["cache"]["computed"]) == stages

    # the same content at another path: everything reused
    moved = tmp_path / "elsewhere" / "copy-of-data"
    shutil.copytree(beir_train, moved)
    again = _label(load_beir(moved, split="train"), tmp_path / "b", enc, cache)
    assert again.stats["cache"]["computed"] == [] and again.train.to_list() == first.train.to_list()

    # the same ids, other texts: every stage that reads the corpus is recomputed
    lines = (moved / "corpus.jsonl").read_text().splitlines()
    edited = []
    for line in lines:
        row = json.loads(line)
        row["text"] = "rewritten " + row["text"][::-1]
        edited.append(json.dumps(row))
    (moved / "corpus.jsonl").write_text("\n".join(edited) + "\n")
    changed = _label(load_beir(moved, split="train"), tmp_path / "c", enc, cache)
    assert set(changed.stats["cache"]["computed"]) == stages - {"query_embeddings"}
    assert changed.stats["fingerprints"]["corpus"] != first.stats["fingerprints"]["corpus"]

    # the dense model retrained in place (same path, same name): its stages are recomputed, BM25 is not
    from transformers import AutoModelForMaskedLM

    m = AutoModelForMaskedLM.from_pretrained(model_dir)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.01)
    m.save_pretrained(model_dir)
    retrained = _label(load_beir(beir_train, split="train"), tmp_path / "d", load_encoder(str(model_dir)), cache)
    assert set(retrained.stats["cache"]["computed"]) == stages - {"bm25"}
    assert "bm25" in retrained.stats["cache"]["reused"]
    # and unchanged inputs once more: all reused
    assert _label(load_beir(beir_train, split="train"), tmp_path / "e", load_encoder(str(model_dir)),
                  cache).stats["cache"]["computed"] == []


def test_label_reranker_folder_retrained_in_place_is_recomputed(tmp_path):
    ce = tmp_path / "ce"
    ce.mkdir()
    (ce / "model.safetensors").write_bytes(b"weights v1")
    one = parse_teacher(f"cross-encoder:{ce}").identity()
    shutil.copytree(ce, tmp_path / "moved")
    assert parse_teacher(f"cross-encoder:{tmp_path / 'moved'}").identity() == one  # the same files elsewhere
    (ce / "model.safetensors").write_bytes(b"weights v2")
    assert parse_teacher(f"cross-encoder:{ce}").identity() != one
    assert parse_teacher("monot5").identity() == {"name": "monot5", "id": "castorini/monot5-3b-msmarco"}


# ---------------------------------------------------------------- push --dataset of a label output
@pytest.mark.pipeline
def test_push_dataset_of_labels_keeps_dev_and_the_dodress_card(labels_dir, tmp_path, capsys):
    from datasets import load_dataset
    from huggingface_hub import DatasetCard

    stats = json.loads((labels_dir / "stats.json").read_text())
    # a cache of this test's own: datasets' shared cache can answer for a folder of the same path
    # and file names written by an earlier run (another dev set), whatever the files hold now
    hf_cache = str(tmp_path / "hf-datasets-cache")
    out = tmp_path / "pub"
    assert main(["push", str(labels_dir), "--dataset", "--local-dir", str(out)]) == 0
    assert sorted(p.name for p in (out / "data").iterdir()) == ["dev-00000-of-00001.parquet",
                                                                 "train-00000-of-00001.parquet"]
    # as the Hub serves it: the triplets (default config) and the dev set (its own columns, its own config)
    assert load_dataset(str(out), split="train", cache_dir=hf_cache).num_rows == stats["triplets"]
    dev = load_dataset(str(out), "dev", split="dev", cache_dir=hf_cache)
    assert dev.num_rows == stats["dev_rows"] > 0 and "label" in dev.column_names
    card = DatasetCard.load(out / "README.md")
    text = (out / "README.md").read_text()
    assert "# DoDress pseudo-labels for" in text and "pseudo-labels" in card.data.tags
    assert 'load_dataset("your-username/pub", split="train")' in text
    _no_local_paths(out, labels_dir.parent, REPO, SAMPLE)
    # the same through push_dataset with a repo id, and the generic card when asked for
    pub2 = Path(push_dataset(labels_dir, "me/labels", local_dir=tmp_path / "pub2"))
    assert 'load_dataset("me/labels", "dev", split="dev")' in (pub2 / "README.md").read_text()
    pub3 = Path(push_dataset(labels_dir, local_dir=tmp_path / "pub3", template="dataset"))
    assert {p.name for p in (pub3 / "data").iterdir()} == {"train.parquet", "dev.parquet"}
    assert load_dataset(str(pub3), "dev", split="dev", cache_dir=hf_cache).num_rows == stats["dev_rows"]
    assert 'load_dataset("your-username/pub3", "dev", split="dev")' in (pub3 / "README.md").read_text()
    # the labels folder is an input: --overwrite of a folder holding it is refused
    assert main(["push", str(labels_dir), "--dataset", "--local-dir", str(labels_dir.parent), "--overwrite"]) == 2
    assert "contains the input" in capsys.readouterr().err and (labels_dir / "stats.json").is_file()
