"""The CAI chain end to end on a tiny model, and its resumable stages."""

import json

import pytest

from hf_dr.adaptation.cai import CAIArguments, run_cai
from hf_dr.data import load_beir, save_beir

from .conftest import SAMPLE


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("cai")
    data = load_beir(SAMPLE)
    keep_q = list(data.qrels)[:10]
    rel = {d for q in keep_q for d in data.qrels[q]}
    docs = [d for d in data.corpus["_id"] if d in rel][:15] + [d for d in data.corpus["_id"] if d not in rel][:45]
    data.corpus = data.corpus.filter(lambda r: r["_id"] in set(docs))
    data.qrels = {q: {d: 2 for d in data.qrels[q] if d in set(docs)} for q in keep_q}
    data.qrels = {q: v for q, v in data.qrels.items() if v}
    # grade-0 judgments as hard negatives for the source side
    others = [d for d in docs if d not in rel]
    for i, q in enumerate(data.qrels):
        data.qrels[q][others[i]] = 0
    save_beir(data, root / "data")
    return root


@pytest.mark.pipeline
def test_chain_runs_and_resumes(tiny_bert_dir, folders):
    args = CAIArguments(backbone=str(tiny_bert_dir), target_data=str(folders / "data"), source_data=str(folders / "data"),
                        output_dir=str(folders / "run"), delta_v=50, max_vocab_iterations=1, mlm_steps=2,
                        mlm_batch_size=4, mlm_max_length=32, splade_steps=2, splade_batch_size=2,
                        query_max_length=16, doc_max_length=32, flops_warmup_steps=1)
    report = run_cai(args)
    assert report["vocabulary"]["final"] > report["vocabulary"]["original"]
    assert set(report["metrics"]) == {"splade", "splade+idf", "splade-doc", "splade-doc+idf", "hybrid", "hybrid+idf"}
    assert all(0.0 <= m["ndcg@10"] <= 1.0 for m in report["metrics"].values())
    for stage in ("1-vocabulary", "2-mlm", "3-splade"):
        assert (folders / "run" / stage / "DONE.json").is_file()
    assert (folders / "run" / "1-vocabulary" / "entropy.png").is_file()
    final = json.loads((folders / "run" / "final" / "config.json").read_text())
    assert final["use_idf"] is True and final["backbone_config"]["vocab_size"] == report["vocabulary"]["final"]
    stamp = (folders / "run" / "3-splade" / "model.safetensors.index.json").stat().st_mtime
    run_cai(args)  # same parameters: every stage is skipped
    assert (folders / "run" / "3-splade" / "model.safetensors.index.json").stat().st_mtime == stamp
    args.splade_steps = 3  # a changed parameter re-runs that stage
    run_cai(args)
    assert (folders / "run" / "3-splade" / "model.safetensors.index.json").stat().st_mtime != stamp
