"""``hf-dr push``: the folder written with --local-dir loads with AutoModel(trust_remote_code=True) in a
process where hf_dr is not installed, gives the same embeddings, and carries a complete card."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_dr.cli import main as cli
from hf_dr.hub import (HubError, berm_available, detect_model_kind, prepare_model_folder, push_dataset, push_model,
                       push_space)
from tests.conftest import run_without_hf_dr

QUERIES = ["protein folding in cells", "what causes fever?"]
DOCS = ["the cat sat on the mat", "a much longer sentence about dense retrieval models and protein folding"]


def _perturb(model, seed=1, only_trainable=False):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.requires_grad or not only_trainable:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)


def _splade(src, tmp):
    from hf_dr.models.splade import SPLADECAI

    m = SPLADECAI.from_backbone(src, max_doc_length=32, max_query_length=16)
    m.fit_idf(DOCS + ["protein cells"])  # CAI: IDF on documents (Eq. 6-7) travels in the idf buffer
    m.save_pretrained(tmp / "model")
    return m


def _ddr(src, tmp):
    from hf_dr.models.ddr import DDRModel

    torch.manual_seed(0)
    m = DDRModel.from_backbone(src, lora_rank=4, max_doc_length=32, max_query_length=16)
    _perturb(m, only_trainable=True)  # a fresh REM is the identity
    m.save_dam(tmp / "dam")
    m.save_rem(tmp / "model", dam_name_or_path=str(tmp / "dam"))  # REM only, pointing at a local DAM
    return m


def _dense(src, tmp):
    from transformers import AutoModel

    from hf_dr.models.dense import DenseEncoder

    AutoModel.from_pretrained(src).save_pretrained(tmp / "base")  # a BertModel, no MLM head
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(src).save_pretrained(tmp / "base")
    m = DenseEncoder.from_pretrained(tmp / "base", pooling="mean", normalize=True, max_length=32)
    m.save_pretrained(tmp / "model")
    return m


def _berm(src, tmp):
    from hf_dr.models.berm import BERMEncoder

    m = BERMEncoder.from_backbone(str(src))
    m.save_pretrained(tmp / "model")
    return m


BUILDERS = {"splade_cai": _splade, "ddr_rem": _ddr, "dense": _dense, "berm": _berm}
KINDS = ["splade_cai", "ddr_rem", "dense",
         pytest.param("berm", marks=pytest.mark.skipif(not berm_available(),
                                                       reason="hf_dr.models.berm has no BERMEncoder yet"))]


def _metrics_json(path: Path) -> Path:
    """The shape `hf-dr evaluate --output` writes (EvalResult.to_json + info)."""
    path.write_text(json.dumps({"metrics": {"ndcg@10": 0.5123, "recall@100": 0.8}, "n_queries": 7,
                                "retriever": "dense", "data": "BeIR/scifact", "split": "test", "n_docs": 100,
                                "per_query": {"ndcg@10": {"1": 0.5}}}))
    return path


def _card_snippet(readme: str) -> str:
    """The first python block of the card that loads the repo with plain transformers / ST."""
    for block in re.findall(r"```python\n(.*?)```", readme, flags=re.S):
        if 'your-username/model")' in block and "hf_dr" not in block:
            return block
    raise AssertionError("the card has no usage snippet")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.cli
def test_push_local_dir_loads_without_hf_dr(kind, tiny_bert_dir, tmp_path):
    model = BUILDERS[kind](tiny_bert_dir, tmp_path)
    assert detect_model_kind(tmp_path / "model").name == kind
    ref_q = np.asarray(model.encode_queries(QUERIES).todense() if kind == "splade_cai" else model.encode_queries(QUERIES))
    ref_d = np.asarray(model.encode_corpus(DOCS).todense() if kind == "splade_cai" else model.encode_corpus(DOCS))
    np.save(tmp_path / "ref_q.npy", ref_q)
    np.save(tmp_path / "ref_d.npy", ref_d)
    out = tmp_path / "OUT"
    assert cli(["push", str(tmp_path / "model"), "--local-dir", str(out),
                "--metrics", str(_metrics_json(tmp_path / "metrics.json"))]) == 0

    # the folder: config, safetensors weights, tokenizer, card (+ code files for remote code)
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "README.md", "tokenizer_config.json"} <= files
    # SPLADE-CAI: two shards (mlm.*, idf) that its Sentence Transformers modules link
    assert ("model.safetensors.index.json" if kind == "splade_cai" else "model.safetensors") in files
    assert not any(f.endswith(".bin") for f in files)
    cfg = json.loads((out / "config.json").read_text())
    if kind != "dense":
        assert "AutoModel" in cfg["auto_map"]
        for ref in cfg["auto_map"].values():
            assert (out / (ref.split(".")[0] + ".py")).is_file(), ref
    if kind == "ddr_rem":  # the DAM travels with the REM so that no dam= is needed
        assert (out / "dam" / "model.safetensors").is_file() and cfg["dam_name_or_path"] == "dam"

    # the card: YAML metadata first, then a complete body
    readme = (out / "README.md").read_text()
    assert readme.startswith("---\n")
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")
    meta = card.data.to_dict()
    assert meta["license"] == "apache-2.0" and "hf-dr" in meta["tags"] and meta["library_name"]
    assert meta["datasets"] == ["BeIR/scifact"]
    assert meta["model-index"][0]["results"][0]["metrics"][0]["value"] == 0.5123
    assert "| `BeIR/scifact` | test | dense | 7 | 0.5123 | 0.8000 |" in readme  # results table
    assert "{{" not in readme and "## Citation" in readme

    # a Hub user without hf-dr: AutoModel + the card's own snippet
    snippet = _card_snippet(readme).replace("your-username/model", str(out))
    (tmp_path / "snippet.py").write_text(snippet)
    if kind == "dense":
        check = f"""
from transformers import AutoModel, AutoTokenizer
m = AutoModel.from_pretrained({str(out)!r}, trust_remote_code=True).eval()
tok = AutoTokenizer.from_pretrained({str(out)!r})
def enc(texts, n):
    b = tok(texts, padding=True, truncation=True, max_length=n, return_tensors="pt")
    with torch.no_grad():
        h = m(**b).last_hidden_state
    mask = b["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1), dim=-1).numpy()
q, d = enc({QUERIES!r}, 32), enc({DOCS!r}, 32)
"""
    else:
        check = f"""
from transformers import AutoModel, AutoTokenizer
m = AutoModel.from_pretrained({str(out)!r}, trust_remote_code=True).eval()
assert type(m).__module__.startswith("transformers_modules"), type(m).__module__
tok = AutoTokenizer.from_pretrained({str(out)!r})
def enc(texts, n, is_query):
    b = tok(texts, padding=True, truncation=True, max_length=n, return_tensors="pt")
    with torch.no_grad():
        o = m(input_ids=b["input_ids"], attention_mask=b["attention_mask"], is_query=is_query)
    return (o if isinstance(o, torch.Tensor) else o.embeddings).numpy()
q, d = enc({QUERIES!r}, 16, True), enc({DOCS!r}, 32, False)
"""
    script = "import numpy as np, runpy, torch\n" + check + f"""
np.testing.assert_allclose(q, np.load({str(tmp_path / 'ref_q.npy')!r}), atol=1e-5)
np.testing.assert_allclose(d, np.load({str(tmp_path / 'ref_d.npy')!r}), atol=1e-5)
runpy.run_path({str(tmp_path / 'snippet.py')!r}, run_name="__main__")
print("OK")
"""
    res = run_without_hf_dr(script, tmp_path)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]


def test_ddr_rem_can_reference_a_hub_dam(tiny_bert_dir, tmp_path):
    _ddr(tiny_bert_dir, tmp_path)
    out = prepare_model_folder(tmp_path / "model", tmp_path / "OUT", dam="someone/dam-scifact",
                               repo_id="someone/ddr-rem")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["dam_name_or_path"] == "someone/dam-scifact" and not (out / "dam").exists()
    readme = (out / "README.md").read_text()
    assert "downloaded from `someone/dam-scifact`" in readme and "## How to pick a DAM" in readme
    assert 'DDRModel.from_pretrained("someone/ddr-rem", dam=' in readme


def test_push_uploads_one_folder(tiny_bert_dir, tmp_path):
    _splade(tiny_bert_dir, tmp_path)
    calls = []

    class FakeApi:  # the Hub is not reachable here: record what would be sent
        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw["repo_type"], *([kw["space_sdk"]] if "space_sdk" in kw else [])))

        def upload_folder(self, folder_path, repo_id, repo_type, commit_message):
            calls.append(("upload_folder", repo_id, repo_type, sorted(p.name for p in Path(folder_path).iterdir())))
            return "https://huggingface.co/me/splade/commit/1"

    url = push_model(tmp_path / "model", "me/splade", api=FakeApi())
    assert url.endswith("/commit/1")
    assert calls[0] == ("create_repo", "me/splade", "model")
    assert calls[1][:3] == ("upload_folder", "me/splade", "model") and len(calls) == 2
    assert {"README.md", "config.json", "model.safetensors.index.json", "modeling_splade.py"} <= set(calls[1][3])
    calls.clear()
    push_space("me/search", api=FakeApi())  # the Space: created with the gradio SDK, uploaded in one call
    assert calls[0] == ("create_repo", "me/search", "space", "gradio")
    assert calls[1][:3] == ("upload_folder", "me/search", "space") and {"app.py", "hf_dr"} <= set(calls[1][3])


def test_push_errors_are_readable(tiny_bert_dir, tmp_path, capsys):
    assert cli(["push", str(tiny_bert_dir), "--local-dir", str(tmp_path / "o")]) == 2
    assert "is not a hf-dr model folder" in capsys.readouterr().err
    assert cli(["push", str(tmp_path / "missing"), "--local-dir", str(tmp_path / "o")]) == 2
    assert "no such model folder" in capsys.readouterr().err
    _splade(tiny_bert_dir, tmp_path)
    assert cli(["push", str(tmp_path / "model")]) == 2
    assert "--repo-id" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert cli(["push", str(tmp_path / "model"), "--local-dir", str(tmp_path / "o"),
                "--metrics", str(tmp_path / "bad.json")]) == 2
    assert "not an hf-dr evaluation JSON" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(HubError, match="not empty"):
        prepare_model_folder(tmp_path / "model", tmp_path / "full")


@pytest.mark.pipeline
def test_dataset_push_writes_parquet_and_card(tmp_path):
    from datasets import Dataset, DatasetDict, load_dataset
    from huggingface_hub import DatasetCard

    rows = {"query": ["q one", "q two", "q three"], "pos": ["d1", "d2", "d3"], "neg": [["n1"], ["n2"], ["n3"]]}
    dd = DatasetDict({"train": Dataset.from_dict(rows), "test": Dataset.from_dict({k: v[:1] for k, v in rows.items()})})
    out = Path(push_dataset(dd, local_dir=tmp_path / "OUT", repo_id="me/pseudo",
                            card_vars={"description": "Pseudo-labelled triplets."},
                            card_data={"source_datasets": ["BeIR/scifact"]}))
    assert (out / "data" / "train.parquet").is_file() and (out / "data" / "test.parquet").is_file()
    card = DatasetCard.load(out / "README.md")
    assert card.data.license == "apache-2.0" and card.data.source_datasets == ["BeIR/scifact"]
    assert card.data.configs[0]["data_files"][0] == {"split": "train", "path": "data/train.parquet"}
    text = (out / "README.md").read_text()
    assert text.startswith("---\n") and "Pseudo-labelled triplets." in text and "| train | 3 |" in text
    assert "| `neg` |" in text and 'load_dataset("me/pseudo")' in text
    # the folder loads as the Hub would serve it (the card's `configs` name the files)
    back = load_dataset(str(out))
    assert back["train"]["query"] == rows["query"] and back["test"].num_rows == 1

    # the CLI on a folder of parquet files
    (tmp_path / "pq").mkdir()
    dd["train"].to_parquet(str(tmp_path / "pq" / "train.parquet"))
    assert cli(["push", str(tmp_path / "pq"), "--dataset", "--local-dir", str(tmp_path / "OUT2")]) == 0
    assert (tmp_path / "OUT2" / "data" / "train.parquet").is_file()
    assert cli(["push", str(tmp_path), "--dataset", "--local-dir", str(tmp_path / "OUT3")]) == 2


def test_write_card_one_renderer(tmp_path, monkeypatch):
    """Every card (training scripts, dataset builders, push) goes through hf_dr.hub.cards.write_card:
    YAML card data between the --- lines, jinja variables filled, a missing template a clear error."""
    from huggingface_hub import DatasetCard, ModelCard

    from hf_dr.hub.cards import render_card, write_card

    tpl = tmp_path / "tpls"
    tpl.mkdir()
    (tpl / "toy.md").write_text("---\n{{ card_data }}\n---\n\n# {{ name }}: {{ n_rows }} rows\n")
    monkeypatch.setenv("HF_DR_MODEL_CARDS", str(tpl))
    (tmp_path / "m").mkdir()
    path = write_card(tmp_path / "m", "toy", {"tags": ["hf-dr"], "pipeline_tag": "fill-mask"}, name="DAM", n_rows=7)
    card = ModelCard.load(path)
    assert card.data.tags == ["hf-dr"] and card.data.pipeline_tag == "fill-mask"
    assert "# DAM: 7 rows" in card.text
    (tmp_path / "d").mkdir()
    dcard = DatasetCard.load(write_card(tmp_path / "d", "toy.md", {"task_categories": ["text-retrieval"]},
                                        repo_type="dataset", name="units", n_rows=3))
    assert dcard.data.task_categories == ["text-retrieval"] and "# units: 3 rows" in dcard.text
    with pytest.raises(FileNotFoundError, match="HF_DR_MODEL_CARDS"):
        write_card(tmp_path, "no_such_template", name="x", n_rows=0)
    assert not (tmp_path / "README.md").exists()
    with pytest.raises(ValueError, match="repo_type"):
        render_card("toy", repo_type="space")


@pytest.mark.cli
def test_built_wheel_ships_the_card_templates(tmp_path):
    """A plain (non-editable) install has every template of model_cards/ inside the package."""
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("setuptools", reason="building without isolation needs setuptools in this environment")
    repo = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path), str(repo)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next(tmp_path.glob("hf_dr-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = sorted(p.name for p in (repo / "model_cards").glob("*.md"))
    assert templates and all(f"hf_dr/templates/{t}" in names for t in templates)
    assert "hf_dr/models/splade/modeling_splade.py" in names


@pytest.mark.parametrize("kind", ["splade", "berm"])
def test_saved_model_loads_its_tokenizer_without_a_config_warning(kind, tiny_bert_dir, tmp_path):
    """The tokenizer of a saved composite model is read with the backbone's config: transformers
    does not try the model's own config.json as a plain config ("a model of type ... to
    instantiate a model of type ``") on every load and every `hf-dr push`."""
    import logging

    from transformers.utils import logging as hf_logging

    from hf_dr.models.berm import BERMEncoder
    from hf_dr.models.splade import SPLADECAI

    cls = {"splade": SPLADECAI, "berm": BERMEncoder}[kind]
    cls.from_backbone(str(tiny_bert_dir)).save_pretrained(tmp_path / "m")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    root = hf_logging.get_logger()
    root.addHandler(handler)
    try:
        model = cls.from_pretrained(tmp_path / "m")
    finally:
        root.removeHandler(handler)
    assert model.tokenizer is not None and len(model.tokenizer) > 10
    assert not [r for r in records if "model of type" in r.getMessage()]


def _ingested(tmp_path, tokenizer=None, max_tokens=40):
    from hf_dr.ingest import ingest_folder
    from tests.test_serving import documents_folder

    docs = documents_folder(tmp_path / "docs")
    out = tmp_path / "corpus"
    report = ingest_folder(docs, out, tokenizer=str(tokenizer) if tokenizer else None, max_tokens=max_tokens,
                           show_progress_bar=False)
    return out, report


def test_a_passage_corpus_is_published_with_its_sources_and_settings(tmp_path, capsys):
    """``hf-dr push CORPUS --dataset`` on an ``hf-dr ingest`` folder: the passages (with their
    metadata) in BEIR's Hub layout, the manifest and settings, and a card saying the sources, their
    formats, the counts, what was skipped and why, and how the passages were cut."""
    from datasets import load_dataset
    from huggingface_hub import DatasetCard

    src, report = _ingested(tmp_path)
    assert cli(["push", str(src), "--dataset", "--local-dir", str(tmp_path / "OUT"), "--repo-id", "me/docs"]) == 0
    out = tmp_path / "OUT"
    assert {p.name for p in out.iterdir()} == {"README.md", "data", "manifest.jsonl", "ingest.json"}
    back = load_dataset(str(out), "corpus", split="corpus")
    lines = [json.loads(line) for line in (src / "corpus.jsonl").read_text().splitlines()]
    assert [dict(r) for r in back] == lines and len(lines) == report["passages"]
    card = DatasetCard.load(out / "README.md")
    assert card.data.configs == [{"config_name": "corpus", "data_files": [{"split": "corpus",
                                                                           "path": "data/corpus.parquet"}]}]
    text = (out / "README.md").read_text()
    assert f"A corpus of **{report['passages']} passages** cut from {report['ingested']} file(s)" in text
    assert f"{report['files']} file(s) were found: {report['ingested']} read, {report['skipped']} skipped" in text
    assert "| empty file | 1 |" in text and "| html | 1 |" in text and "| markdown | 1 |" in text
    assert "| `notes/long report.txt` | text |" in text and "**40 whitespace-separated words**" in text
    assert f"up to {report['overlap']} words" in text and 'load_dataset("me/docs", "corpus", split="corpus")' in text
    for f in out.rglob("*"):
        if f.is_file() and f.suffix != ".parquet":
            assert str(tmp_path) not in f.read_text()


def test_a_passage_corpus_names_its_tokenizer_not_its_path_and_uploads_in_one_call(tmp_path, tiny_bert_dir):
    from hf_dr.hub import push_dataset

    src, report = _ingested(tmp_path, tokenizer=tiny_bert_dir, max_tokens=64)
    (src / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "vitamin D"}) + "\n")
    (src / "qrels").mkdir()
    first = json.loads((src / "corpus.jsonl").read_text().splitlines()[0])["_id"]
    (src / "qrels" / "test.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\t{first}\t1\n")
    calls = []

    class FakeApi:  # the Hub is not reachable here: record what would be sent
        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw["repo_type"]))

        def upload_folder(self, folder_path, repo_id, repo_type, commit_message):
            folder = Path(folder_path)
            calls.append(("upload_folder", repo_id, repo_type, sorted(p.name for p in (folder / "data").iterdir()),
                          (folder / "README.md").read_text(), json.loads((folder / "ingest.json").read_text())))
            return "https://huggingface.co/datasets/me/docs/commit/1"

    assert push_dataset(src, "me/docs", api=FakeApi()).endswith("/commit/1")
    assert calls[0] == ("create_repo", "me/docs", "dataset")
    _, _, _, files, readme, settings = calls[1]
    assert files == ["corpus.parquet", "qrels-test.parquet", "queries.parquet"]
    name = Path(tiny_bert_dir).name
    assert f"**64 tokens of `{name}`'s tokenizer**" in readme and str(tiny_bert_dir) not in readme
    assert settings["tokenizer"] == name and settings["passages"] == report["passages"]
    assert 'queries = load_dataset("me/docs", "queries", split="queries")' in readme
