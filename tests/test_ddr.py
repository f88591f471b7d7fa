"""DDRModel: REM insertion, freezing, merge, REM/DAM save-load-swap, mismatch refusal,
trust_remote_code loading, Trainer and 2-process DDP training (tiny models from configs)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import run_without_hf_dr
from hf_dr.models.ddr import DAMMismatchError, DDRConfig, DDRModel, load_dam_model

REPO = Path(__file__).resolve().parent.parent
TEXTS = ["protein folding in cells", "the cat sat on the mat", "a much longer sentence about dense retrieval models"]


def _perturb_rem(model: DDRModel, seed: int = 1) -> None:
    """Give the REM non-trivial weights (a fresh REM is the identity by construction)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _name, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def _save_dam_variant(src: Path, dst: Path, seed: int, **config_changes) -> Path:
    """A second DAM: same architecture with perturbed weights (or a changed architecture)."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    if config_changes:
        cfg = BertConfig.from_pretrained(src)
        for k, v in config_changes.items():
            setattr(cfg, k, v)
        model = BertForMaskedLM(cfg)
    else:
        model = BertForMaskedLM.from_pretrained(src)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(dst)
    AutoTokenizer.from_pretrained(src).save_pretrained(dst)
    return dst


@pytest.fixture
def ddr(tiny_bert_dir):
    torch.manual_seed(0)
    return DDRModel.from_backbone(tiny_bert_dir, lora_rank=8, max_doc_length=32, max_query_length=16)


@pytest.mark.parametrize("rem_type,lora,pa", [("lora+pa", True, True), ("lora", True, False), ("pa", False, True)])
def test_rem_inserts_only_expected_trainable_parameters(tiny_bert_dir, rem_type, lora, pa):
    m = DDRModel.from_backbone(tiny_bert_dir, rem_type=rem_type, lora_rank=8)
    trainable = {n for n, p in m.named_parameters() if p.requires_grad}
    h, layers, r = 32, 2, 8
    expected = 0
    if lora:  # A: r x h, B: h x r on query, key, value of every layer
        expected += layers * 3 * (r * h + h * r)
        assert sum("lora_A" in n for n in trainable) == layers * 3
    if pa:  # down h -> h/4 (+bias), up h/4 -> h (+bias)
        b = h // 4
        expected += layers * (h * b + b + b * h + h)
        assert len(m.parallel_adapters) == layers
    assert all("lora_" in n or n.startswith("parallel_adapters.") for n in trainable)
    assert sum(p.numel() for n, p in m.named_parameters() if p.requires_grad) == expected == m.num_rem_parameters()

    # gradients reach the REM only: the DAM stays frozen (disentangled fine-tuning)
    tok = m.tokenizer(TEXTS, padding=True, return_tensors="pt")
    _perturb_rem(m)
    m.train()
    m(tok["input_ids"], tok["attention_mask"]).pow(2).sum().backward()
    for n, p in m.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), n
        else:
            assert p.grad is None, n
    assert any(p.grad.abs().sum() > 0 for p in m.parameters() if p.requires_grad)


def test_fresh_rem_leaves_backbone_embeddings_unchanged(ddr, tiny_bert_dir):
    from hf_dr.models.dense import DenseEncoder

    base = DenseEncoder.from_pretrained(tiny_bert_dir, pooling="mean", normalize=False, max_length=32)
    np.testing.assert_allclose(ddr.encode_corpus(TEXTS), base.encode_corpus(TEXTS), atol=1e-5)


def test_merge_gives_identical_embeddings(ddr):
    _perturb_rem(ddr)
    before = ddr.encode_queries(TEXTS)
    ddr.merge()
    assert ddr.is_merged
    merged = ddr.encode_queries(TEXTS)
    assert not np.allclose(before, ddr.unmerge().unmerge().encode_queries(TEXTS) * 0)  # non-trivial vectors
    np.testing.assert_allclose(merged, before, atol=1e-5)
    np.testing.assert_allclose(ddr.encode_queries(TEXTS), before, atol=1e-5)  # unmerged again


def test_save_rem_then_from_pretrained_with_dam(ddr, tmp_path):
    _perturb_rem(ddr)
    ddr.save_rem(tmp_path / "rem")
    ddr.save_dam(tmp_path / "dam")
    from safetensors.torch import load_file

    keys = load_file(str(tmp_path / "rem" / "model.safetensors")).keys()
    assert keys and all("lora_" in k or k.startswith("parallel_adapters.") for k in keys)  # REM only
    cfg = json.loads((tmp_path / "dam" / "config.json").read_text())
    assert cfg["architectures"] == ["BertForMaskedLM"]  # a plain MLM checkpoint
    m2 = DDRModel.from_pretrained(tmp_path / "rem", dam=tmp_path / "dam")
    np.testing.assert_allclose(m2.encode_corpus(TEXTS), ddr.encode_corpus(TEXTS), atol=1e-6)
    # a merged model saves the same (unmerged) REM and DAM
    ddr.merge().save_rem(tmp_path / "rem_m")
    m3 = DDRModel.from_pretrained(tmp_path / "rem_m", dam=tmp_path / "dam")
    np.testing.assert_allclose(m3.encode_corpus(TEXTS), m2.encode_corpus(TEXTS), atol=1e-5)


def test_load_dam_swaps_backbone_and_keeps_rem(ddr, tiny_bert_dir, tmp_path):
    _perturb_rem(ddr)
    rem_before = {k: v.clone() for k, v in ddr.rem_state_dict().items()}
    other = _save_dam_variant(tiny_bert_dir, tmp_path / "other_dam", seed=3)
    ddr.save_rem(tmp_path / "rem")
    emb_src = ddr.encode_corpus(TEXTS)
    ddr.merge()
    ddr.load_dam(other)  # swapping a DAM under a merged REM
    assert ddr.is_merged and ddr.config.dam_name_or_path == str(other)
    for k, v in ddr.rem_state_dict().items():
        torch.testing.assert_close(v, rem_before[k])
    ref = load_dam_model(other).state_dict()
    for k, v in ddr.dam_state_dict().items():
        torch.testing.assert_close(v, ref[k])
    emb_other = ddr.encode_corpus(TEXTS)
    assert not np.allclose(emb_other, emb_src, atol=1e-3)
    fresh = DDRModel.from_pretrained(tmp_path / "rem", dam=other)
    np.testing.assert_allclose(emb_other, fresh.encode_corpus(TEXTS), atol=1e-5)
    assert all(not p.requires_grad for n, p in ddr.backbone.named_parameters() if "lora_" not in n)


@pytest.mark.parametrize("change,match", [({"hidden_size": 48, "intermediate_size": 96}, "hidden_size"),
                                          ({"num_hidden_layers": 3}, "num_hidden_layers"),
                                          ({"vocab_size": 2000}, "vocab_size")])
def test_mismatched_dam_is_refused(ddr, tiny_bert_dir, tmp_path, change, match):
    bad = _save_dam_variant(tiny_bert_dir, tmp_path / "bad", seed=4, **change)
    ddr.save_rem(tmp_path / "rem")
    with pytest.raises(DAMMismatchError, match=match):
        ddr.load_dam(bad)
    with pytest.raises(DAMMismatchError, match=match):
        DDRModel.from_pretrained(tmp_path / "rem", dam=bad)


def test_rem_without_dam_is_an_error(ddr, tmp_path):
    ddr.save_rem(tmp_path / "rem", dam_name_or_path=None)
    cfg = json.loads((tmp_path / "rem" / "config.json").read_text())
    cfg["dam_name_or_path"] = None
    (tmp_path / "rem" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="dam="):
        DDRModel.from_pretrained(tmp_path / "rem")


def test_backbone_without_mlm_head_gets_tied_head(tiny_bert_dir, tmp_path):
    from transformers import AutoTokenizer, BertModel

    BertModel.from_pretrained(tiny_bert_dir).save_pretrained(tmp_path / "nohead")
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(tmp_path / "nohead")
    m = DDRModel.from_backbone(tmp_path / "nohead", lora_rank=4)
    emb = m.backbone.get_input_embeddings().weight
    assert m.backbone.get_output_embeddings().weight.data_ptr() == emb.data_ptr()
    m.save_dam(tmp_path / "dam")
    from transformers import AutoModelForMaskedLM

    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "dam")
    torch.testing.assert_close(reloaded.cls.predictions.transform.dense.weight,
                               m.backbone.cls.predictions.transform.dense.weight)


@pytest.mark.cli
def test_automodel_trust_remote_code_without_hf_dr(ddr, tmp_path):
    """A saved folder loads through AutoModel in a process where hf_dr cannot be imported."""
    _perturb_rem(ddr)
    ddr.save_pretrained(tmp_path / "model")
    assert (tmp_path / "model" / "modeling_ddr.py").is_file() and (tmp_path / "model" / "dam").is_dir()
    np.save(tmp_path / "ref.npy", ddr.encode_corpus(TEXTS))
    script = f"""
import numpy as np, torch
from transformers import AutoModel
m = AutoModel.from_pretrained({str(tmp_path / 'model')!r}, trust_remote_code=True)
assert type(m).__name__ == "DDRModel"
tok = m.tokenizer({TEXTS!r}, padding=True, truncation=True, max_length=32, return_tensors="pt")
with torch.no_grad():
    e = m(tok["input_ids"], tok["attention_mask"]).numpy()
np.testing.assert_allclose(e, np.load({str(tmp_path / 'ref.npy')!r}), atol=1e-5)
m.merge()
with torch.no_grad():
    e2 = m(tok["input_ids"], tok["attention_mask"]).numpy()
np.testing.assert_allclose(e2, e, atol=1e-5)
print("OK")
"""
    out = run_without_hf_dr(script, tmp_path)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def _rows(n):
    return [{"query": f"query number {i} about topic {i % 3}", "pos": f"document {i} answering topic {i % 3}",
             "neg": [f"unrelated passage {i} on something else"]} for i in range(n)]


def test_retrieval_trainer_trains_rem_only(ddr, tmp_path):
    from datasets import Dataset

    from hf_dr.data import RetrievalCollator
    from hf_dr.training import RetrievalTrainer, RetrievalTrainingArguments

    dam_before = {k: v.clone() for k, v in ddr.dam_state_dict().items()}
    rem_before = {k: v.clone() for k, v in ddr.rem_state_dict().items()}
    args = RetrievalTrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                                      max_steps=3, learning_rate=1e-2, save_steps=3, logging_steps=1,
                                      use_cpu=True, seed=0)
    trainer = RetrievalTrainer(model=ddr, args=args, train_dataset=Dataset.from_list(_rows(12)),
                               data_collator=RetrievalCollator(ddr.tokenizer, 16, 32))
    trainer.train()
    for k, v in ddr.dam_state_dict().items():
        torch.testing.assert_close(v, dam_before[k])
    assert any(not torch.equal(v, rem_before[k]) for k, v in ddr.rem_state_dict().items())
    ckpt = tmp_path / "out" / "checkpoint-3"
    reloaded = DDRModel.from_pretrained(ckpt)  # Trainer checkpoints are full DDR folders
    np.testing.assert_allclose(reloaded.encode_queries(TEXTS), ddr.encode_queries(TEXTS), atol=1e-5)


def _ddp_worker(rank, world, port, model_dir, batch, result_file):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from hf_dr.objectives import ContrastiveObjective

    # loopback only (gloo would otherwise pick the interface of the machine's hostname), and a
    # bounded wait: a process that never joins fails the test instead of holding it for 30 minutes
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = DDRModel.from_pretrained(model_dir)
    model.eval()  # no dropout: the processes must compute what the single reference process does
    ddp = DDP(model)
    B = batch["query_input_ids"].shape[0] // world
    G = batch["doc_input_ids"].shape[0] // batch["query_input_ids"].shape[0]
    local = {k: (v[rank * B:(rank + 1) * B] if k.startswith("query") else v[rank * B * G:(rank + 1) * B * G])
             for k, v in batch.items()}
    loss, _ = ContrastiveObjective()(ddp, local)
    loss.backward()  # DDP averages the REM gradients over the processes
    total = loss.detach().clone()
    dist.all_reduce(total)
    if rank == 0:
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        torch.save({"loss": total / world, "grads": grads}, result_file)
    dist.destroy_process_group()


@pytest.mark.spawn
def test_ddp_two_processes_gather_negatives(ddr, tmp_path):
    """2 CPU processes (gloo): each process's queries are scored against the documents of
    both processes, so the mean loss and the averaged gradients equal those of one process
    seeing the whole batch."""
    import socket

    import torch.multiprocessing as mp

    from hf_dr.data import RetrievalCollator
    from hf_dr.objectives import ContrastiveObjective

    _perturb_rem(ddr)
    ddr.save_pretrained(tmp_path / "model")
    batch = RetrievalCollator(ddr.tokenizer, 16, 32)(_rows(4))
    ref_model = DDRModel.from_pretrained(tmp_path / "model")
    ref_model.eval()
    ref_loss, _ = ContrastiveObjective(gather_across_processes=False)(ref_model, batch)
    ref_loss.backward()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_worker, args=(2, port, str(tmp_path / "model"), batch, str(tmp_path / "r.pt")), nprocs=2)
    res = torch.load(tmp_path / "r.pt")
    torch.testing.assert_close(res["loss"], ref_loss.detach(), atol=1e-5, rtol=1e-4)
    # without gathering, each process would only see its own 2 x 2 documents: another loss
    local_only = ContrastiveObjective(gather_across_processes=False)(
        ref_model, {k: v[:2] if k.startswith("query") else v[:4] for k, v in batch.items()})[0]
    assert not torch.isclose(local_only, ref_loss, atol=1e-4)
    for n, p in ref_model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(res["grads"][n], p.grad, atol=1e-5, rtol=1e-3)


def test_config_validation():
    with pytest.raises(ValueError, match="rem_type"):
        DDRConfig(rem_type="prefix")
    with pytest.raises(ValueError, match="pooling"):
        DDRConfig(pooling="max2")


def test_triplets_from_qrels_blocks_of_distinct_queries():
    from datasets import Dataset

    from hf_dr.data import triplets_from_qrels
    from hf_dr.data.beir import BeirData

    corpus = Dataset.from_list([{"_id": f"d{i}", "title": "", "text": f"doc {i}"} for i in range(40)])
    queries = Dataset.from_list([{"_id": f"q{i}", "text": f"query {i}"} for i in range(5)])
    qrels = {f"q{i}": {**{f"d{8 * i + j}": 2 + (j % 2) for j in range(4)}, f"d{8 * i + 4}": 0, f"d{8 * i + 5}": 1}
             for i in range(5)}
    data = BeirData(corpus=corpus, queries=queries, qrels=qrels, split="test", name="toy")
    ds = triplets_from_qrels(data, batch_size=4, n_negatives=2, seed=0)
    assert len(ds) % 4 == 0 and len(ds) > 0
    for s in range(0, len(ds), 4):
        assert len(set(ds[s:s + 4]["qid"])) == 4
    texts = {r["_id"]: r["text"] for r in corpus}
    for r in ds:
        q = r["qid"]
        pos_ids = [d for d, g in qrels[q].items() if g >= 2]
        assert r["pos"] in {texts[d] for d in pos_ids}
        assert texts[f"d{8 * int(q[1:]) + 4}"] in r["neg"]  # the judged grade-0 document
        assert texts[f"d{8 * int(q[1:]) + 5}"] not in r["neg"]  # grade 1 is neither
    assert len(triplets_from_qrels(data)) == 20  # without blocks: every positive once
    with pytest.raises(ValueError, match="distinct"):
        triplets_from_qrels(data, batch_size=6)


@pytest.mark.cli
def test_example_scripts_run(tiny_bert_dir, tmp_path):
    """adapt_dam.py then train_ddr.py (python), as a user runs them, on a tiny model."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"document number {i} about retrieval and proteins" for i in range(40)))
    dam = tmp_path / "dam"
    r = subprocess.run([sys.executable, "examples/adapt_dam.py", "--model_name_or_path", str(tiny_bert_dir),
                        "--corpus", str(corpus), "--eval_documents", "8", "--max_length", "16", "--max_steps", "2",
                        "--per_device_train_batch_size", "4", "--save_strategy", "no", "--report_to", "none",
                        "--use_cpu", "--output_dir", str(dam)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((dam / "dam_info.json").read_text())["global_steps"] == 2
    assert (dam / "README.md").read_text().count("{{") == 0
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(x) for x in _rows(8)))
    rem = tmp_path / "rem"
    r = subprocess.run([sys.executable, "examples/train_ddr.py", "--model_name_or_path", str(dam), "--train_data",
                        str(rows), "--lora_rank", "4", "--max_steps", "2", "--per_device_train_batch_size", "4",
                        "--max_query_length", "16", "--max_doc_length", "16", "--save_strategy", "no", "--use_cpu",
                        "--output_dir", str(rem)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    m = DDRModel.from_pretrained(rem)  # the source DAM is recorded in the REM's config
    assert Path(m.config.dam_name_or_path) == dam
    assert m.encode_queries(["a query"]).shape == (1, 32)
    assert (rem / "README.md").read_text().count("{{") == 0
