"""BERM (papers/000): Eq. 3-5 by hand, units / annotation, objective, model round trip, training."""

import math

import numpy as np
import pytest
import torch
from datasets import Dataset

from hf_dr.data import UnitCollator
from hf_dr.data.units import NO_LABEL, split_units, unit_token_spans
from hf_dr.labeling.units import annotate_units, essential_unit_labels
from hf_dr.losses import unit_balance_loss, unit_extract_loss
from hf_dr.models.berm.modeling_berm import unit_mean_pool
from hf_dr.objectives import BERMObjective, ContrastiveObjective

from .conftest import MINILM, need, run_without_hf_dr


def _gelu(x):
    return x * 0.5 * (1 + math.erf(x / math.sqrt(2)))


# -- Eq. 3: unit mean pooling -------------------------------------------------------------------

def test_eq3_unit_pooling_by_hand_with_padding_units():
    hidden = torch.tensor([[[0.0, 0.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]])
    spans = torch.tensor([[[1, 3], [3, 5], [0, 0]]])
    mask = torch.tensor([[True, True, False]])
    e = unit_mean_pool(hidden, spans, mask)
    assert e.shape == (1, 3, 2)
    assert torch.allclose(e[0, 0], torch.tensor([2.0, 3.0]))  # mean of tokens 1, 2
    assert torch.allclose(e[0, 1], torch.tensor([6.0, 7.0]))  # mean of tokens 3, 4
    assert torch.equal(e[0, 2], torch.zeros(2))  # padding unit


def test_eq3_batched_pooling_equals_per_example_reference():
    g = torch.Generator().manual_seed(0)
    B, L, U, d = 4, 12, 5, 3
    hidden = torch.randn(B, L, d, generator=g)
    spans = torch.zeros(B, U, 2, dtype=torch.long)
    mask = torch.zeros(B, U, dtype=torch.bool)
    n_units = [5, 3, 1, 0]
    for b, n in enumerate(n_units):
        cuts = sorted(torch.randperm(L - 2, generator=g)[:n + 1].add(1).tolist())
        for u in range(n):
            spans[b, u] = torch.tensor([cuts[u], cuts[u + 1]])
            mask[b, u] = True
    got = unit_mean_pool(hidden, spans, mask)
    for b, n in enumerate(n_units):
        for u in range(U):
            want = hidden[b, spans[b, u, 0]:spans[b, u, 1]].mean(0) if u < n else torch.zeros(d)
            assert torch.allclose(got[b, u], want, atol=1e-6)


# -- Eq. 4: balance -----------------------------------------------------------------------------

def test_eq4_balance_by_hand_padding_single_and_empty_rows():
    t_p = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    units = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [99.0, 0.0]],   # 2 units + a padding unit (ignored)
                          [[3.0, 0.0], [0.0, 0.0], [0.0, 0.0]],    # one unit: loss 0
                          [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])   # no unit: left out of the mean
    mask = torch.tensor([[True, True, False], [True, False, False], [False, False, False]])
    s1 = math.e / (math.e + 1)
    kl = 0.5 * (math.log(0.5) - math.log(s1)) + 0.5 * (math.log(0.5) - math.log(1 - s1))
    loss = unit_balance_loss(t_p, units, mask)
    assert loss.item() == pytest.approx((kl + 0.0) / 2, rel=1e-5)
    assert unit_balance_loss(t_p[1:2], units[1:2], mask[1:2]).item() == 0.0
    empty = unit_balance_loss(t_p[2:], units[2:], mask[2:])
    assert empty.item() == 0.0 and empty.requires_grad is False or empty.item() == 0.0
    # gradients stay finite with a unit-less row in the batch
    tp = t_p.clone().requires_grad_(True)
    unit_balance_loss(tp, units, mask).backward()
    assert torch.isfinite(tp.grad).all()


# -- Eq. 5: extract -----------------------------------------------------------------------------

def test_eq5_extract_by_hand_one_softmax_and_ignored_rows():
    t_q = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    t_p = torch.tensor([[2.0, -1.0], [2.0, -1.0], [2.0, -1.0]])
    units = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [50.0, 50.0]]] * 3)
    mask = torch.tensor([[True, True, False]] * 3)
    labels = torch.tensor([1, NO_LABEL, 2])  # row 2's label is a padding unit: ignored too
    m = [_gelu(2.0), _gelu(-1.0)]
    want = -(m[1] - math.log(math.exp(m[0]) + math.exp(m[1])))  # one log-softmax, label 1
    assert unit_extract_loss(t_q, t_p, units, mask, labels).item() == pytest.approx(want, rel=1e-5)
    # a one-unit passage: exactly 0; no usable row: 0
    assert unit_extract_loss(t_q[:1], t_p[:1], units[:1, :1], mask[:1, :1], torch.tensor([0])).item() == 0.0
    assert unit_extract_loss(t_q, t_p, units, mask, torch.full((3,), NO_LABEL)).item() == 0.0


# -- units and annotation -----------------------------------------------------------------------

def test_split_units_sentences_and_edge_cases():
    text = "Dr. Smith went to Washington. He arrived at 5 p.m. and left!  Did he?"
    spans = split_units(text)
    assert [text[a:b] for a, b in spans] == ["Dr. Smith went to Washington.", "He arrived at 5 p.m. and left!", "Did he?"]
    assert split_units("") == [] and split_units("   ") == []
    assert split_units("no boundary here") == [(0, 16)]


def test_token_spans_clip_and_drop_truncated_units(tiny_tokenizer):
    text = "apple banana. cherry date elder lime. grape."
    spans = split_units(text)
    enc = tiny_tokenizer(text, truncation=True, max_length=7, return_offsets_mapping=True)
    toks, kept = unit_token_spans(enc["offset_mapping"], spans)
    # [CLS] apple banana . cherry date [SEP]: unit 1 clipped to 2 tokens, unit 2 gone
    assert kept == [0, 1]
    assert toks == [(1, 4), (4, 6)]


def test_collator_units_and_truncated_label(tiny_tokenizer):
    text = "apple banana. cherry date elder lime. grape."
    rows = [{"query": "grape", "pos": text, "neg": ["x"], "unit_char_spans": [list(s) for s in split_units(text)],
             "essential_unit": 2},
            {"query": "cherry", "pos": text, "neg": ["y"], "unit_char_spans": [list(s) for s in split_units(text)],
             "essential_unit": 1}]
    batch = UnitCollator(tiny_tokenizer, 8, 7)(rows)
    assert batch["unit_spans"].tolist()[0] == [[1, 4], [4, 6]]
    assert batch["unit_mask"].tolist() == [[True, True], [True, True]]
    assert batch["unit_labels"].tolist() == [NO_LABEL, 1]  # the essential unit was truncated away
    # Eq. 3 on the collated spans = hand means over the token states of the positive's row
    hidden = torch.randn(batch["doc_input_ids"].shape[0], batch["doc_input_ids"].shape[1], 3)
    e = unit_mean_pool(hidden[::2], batch["unit_spans"], batch["unit_mask"])
    assert torch.allclose(e[1, 1], hidden[2, 4:6].mean(0))


def test_annotator_uses_bm25_term_frequency_and_idf():
    units = [["dogs run fast in parks", "dogs chase dogs near dogs", "cats sleep"],
             ["zebra grazes alone", "cat cat cat", "another cat"],
             ["one sentence only"], [], ["nothing shared here", "at all"]]
    queries = ["dogs", "zebra cat", "anything", "empty passage", "quantum"]
    scores, labels = essential_unit_labels(queries, units, bm25_kwargs={"stopwords": None})
    assert labels[0] == 1  # tf 3 beats tf 1 at equal length (a BM25 that ignores tf ties them)
    assert labels[1] == 0  # rare "zebra" outweighs frequent "cat" (IDF over the unit collection)
    assert labels[2] == NO_LABEL  # no overlap: no essential unit
    assert labels[3] == NO_LABEL and scores[3] == []  # no unit
    assert labels[4] == NO_LABEL
    # a reader can decide when BM25 is silent: h = bm25 + δ r
    _, lab = essential_unit_labels(["quantum"], [units[4]], reader_scores=[[0.2, 0.9]], delta=0.1)
    assert lab == [1]


def test_annotate_dataset_and_reader(tiny_tokenizer, tmp_path):
    from transformers import BertConfig, BertForQuestionAnswering

    from hf_dr.labeling.units import UnitReader

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    BertForQuestionAnswering(cfg).save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    reader = UnitReader(str(tmp_path), device="cpu")
    text = "apple banana. cherry date elder lime. grape."
    r = reader("which fruit?", text, split_units(text))
    assert r.shape == (3,) and (r > 0).all() and r.sum() <= 1.0 + 1e-6  # maxima of one distribution
    ds = Dataset.from_list([{"query": "cherry", "pos": text}, {"query": "grape", "pos": "grape."}])
    out = annotate_units(ds, reader=reader, show_progress_bar=False)
    assert out["essential_unit"] == [1, 0]
    assert out["units"][0] == ["apple banana.", "cherry date elder lime.", "grape."]


# -- model --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_berm(tiny_bert_dir):
    from hf_dr import BERMEncoder

    torch.manual_seed(0)
    return BERMEncoder.from_backbone(str(tiny_bert_dir), max_doc_length=64)


def _rows():
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    rows = [{"query": f"what is {w}", "pos": f"The weather is fine. {w} is a topic about {w}. Nothing else here.",
             "neg": [f"unrelated text number {i}."]} for i, w in enumerate(words)]
    return annotate_units(Dataset.from_list(rows), show_progress_bar=False)


def test_alpha_beta_zero_is_plain_contrastive(tiny_berm):
    tiny_berm.eval()
    batch = UnitCollator(tiny_berm.tokenizer, 16, 64)(_rows().to_list()[:4])
    a, _ = BERMObjective(alpha=0.0, beta=0.0)(tiny_berm, batch)
    b, _ = ContrastiveObjective(scale=1.0)(tiny_berm, batch)
    torch.testing.assert_close(a, b)  # the same loss, up to float32 rounding of the zero terms
    full, logs = BERMObjective()(tiny_berm, batch)
    assert {"balance_loss", "extract_loss", "contrastive_loss"} <= set(logs)
    assert torch.isclose(full, b + 0.1 * logs["extract_loss"] + 1.0 * logs["balance_loss"])


def test_distillation_base(tiny_berm):
    tiny_berm.eval()
    rows = [dict(r, scores=[3.0, 0.0]) for r in _rows().to_list()[:2]]
    batch = UnitCollator(tiny_berm.tokenizer, 16, 64)(rows)
    loss, logs = BERMObjective(base="distillation")(tiny_berm, batch)
    assert "distillation_loss" in logs and torch.isfinite(loss)
    with pytest.raises(ValueError, match="base"):
        BERMObjective(base="nope")


@pytest.mark.cli
def test_encode_score_units_and_round_trip_without_hf_dr(tiny_berm, tmp_path):
    q = tiny_berm.encode_queries(["what is beta"])
    d = tiny_berm.encode_corpus([{"title": "t", "text": "beta is a topic."}, "other"])
    assert q.dtype == np.float32 and q.shape == (1, 32) and d.shape == (2, 32)
    units, s = tiny_berm.score_units("what is beta", "The weather is fine. Beta is a topic. Nothing else.")
    assert units == ["The weather is fine.", "Beta is a topic.", "Nothing else."] and s.shape == (3,)
    units, s = tiny_berm.score_units("beta", "One unit only")
    assert units == ["One unit only"] and s.shape == (1,) and np.isfinite(s).all()
    assert tiny_berm.score_units("beta", "")[0] == []

    tiny_berm.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / "modeling_berm.py").is_file()
    ids = tiny_berm.tokenizer(["what is beta"], return_tensors="pt")
    with torch.no_grad():
        want = tiny_berm(ids["input_ids"], ids["attention_mask"])[0].tolist()
    script = f"""
import torch
from transformers import AutoModel, AutoTokenizer
m = AutoModel.from_pretrained({str(tmp_path / 'm')!r}, trust_remote_code=True).eval()
assert type(m).__name__ == 'BERMEncoder', type(m)
tok = AutoTokenizer.from_pretrained({str(tmp_path / 'm')!r}, trust_remote_code=True)
ids = tok(['what is beta'], return_tensors='pt')
with torch.no_grad():
    print('OUT:' + repr(m(ids['input_ids'], ids['attention_mask'])[0].tolist()))
"""
    r = run_without_hf_dr(script, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    got = eval(r.stdout.split('OUT:')[-1].strip())
    assert np.allclose(got, want, atol=1e-5)
    # with hf-dr: AutoModel gives back the encode loop too
    from transformers import AutoModel

    m2 = AutoModel.from_pretrained(tmp_path / "m", trust_remote_code=True)
    assert np.allclose(m2.encode_queries(["what is beta"]), q, atol=1e-5)


def test_few_training_steps_lower_the_total_loss(tiny_bert_dir, tmp_path):
    from hf_dr import BERMEncoder
    from hf_dr.training import RetrievalTrainer, RetrievalTrainingArguments

    torch.manual_seed(0)
    model = BERMEncoder.from_backbone(str(tiny_bert_dir), max_doc_length=64)
    rows = _rows()
    collator = UnitCollator(model.tokenizer, 16, 64)
    batch = collator(rows.to_list()[:4])
    obj = BERMObjective()
    model.eval()
    before = obj(model, batch)[0].item()
    args = RetrievalTrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                                      num_train_epochs=8, learning_rate=1e-3, logging_steps=2, save_strategy="no",
                                      seed=0, use_cpu=True, disable_tqdm=True)
    trainer = RetrievalTrainer(model=model, args=args, train_dataset=rows.select(range(4)), data_collator=collator,
                               objective=obj)
    trainer.train()
    model.eval()
    after = obj(model, batch)[0].item()
    assert after < before
    assert any("balance_loss" in h for h in trainer.state.log_history)


@pytest.mark.pipeline
def test_diagnostics_counts_and_plot(tiny_berm, tmp_path):
    from hf_dr.analysis import berm_diagnostics, plot_berm_diagnostics

    rows = [{"query": "beta", "pos": "Alpha here. Beta there. Gamma too."},
            {"query": "beta", "pos": "One unit."},
            {"query": "quantum", "pos": "No overlap. At all."}]
    r = berm_diagnostics(tiny_berm, rows, show_progress_bar=False)
    assert r["n_pairs"] == 3 and r["n_variance"] == 2 and r["n_accuracy"] == 1
    assert r["variance"] >= 0 and r["accuracy"] in (0.0, 1.0)
    assert r["chance_accuracy"] == pytest.approx(1 / 3)  # the one labelled pair has 3 units
    p = plot_berm_diagnostics({"a": r, "b": r}, tmp_path / "d.png")
    assert p.is_file() and p.stat().st_size > 1000


@pytest.mark.shared
def test_real_minilm_acceptance():
    from hf_dr import BERMEncoder

    m = BERMEncoder.from_backbone(str(need(MINILM)))
    q = m.encode_queries(["what causes fever?"])
    d = m.encode_corpus(["Fever is caused by infection.", "The sky is blue."])
    assert q.shape == (1, 384) and d.shape == (2, 384) and q.dtype == np.float32
    assert m.config.pooling == "cls" and m.config.similarity == "dot"


def test_cli_berm_diagnostics(tiny_berm, tmp_path, capsys):
    import json

    from hf_dr.cli import main

    from .conftest import SAMPLE

    tiny_berm.save_pretrained(tmp_path / "m")
    rc = main(["berm-diagnostics", "--data", str(SAMPLE), "--split", "test", "--model", str(tmp_path / "m"),
               "--max-pairs", "6", "--output", str(tmp_path / "out")])
    assert rc == 0
    res = json.loads((tmp_path / "out" / "berm_diagnostics.json").read_text())
    r = res[str(tmp_path / "m")]
    assert r["n_pairs"] == 6 and r["n_variance"] > 0 and 0.0 <= r["accuracy"] <= 1.0
    assert (tmp_path / "out" / "berm_diagnostics.png").is_file()
    assert "Var." in capsys.readouterr().out


def test_unit_dataset_builder(tmp_path):
    import importlib.util

    from .conftest import REPO, SAMPLE

    spec = importlib.util.spec_from_file_location("berm_units", REPO / "dataset_builders" / "berm_units.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ds = mod.build_berm_units(str(SAMPLE), split="test", max_rows=5, output=str(tmp_path / "u"), show_progress_bar=False)
    assert len(ds) == 5
    assert {"query", "pos", "units", "unit_char_spans", "unit_scores", "essential_unit"} <= set(ds.column_names)
    for r in ds:
        assert [r["pos"][a:b] for a, b in r["unit_char_spans"]] == r["units"]
        assert r["essential_unit"] == NO_LABEL or r["unit_scores"][r["essential_unit"]] == max(r["unit_scores"])
    card = (tmp_path / "u" / "README.md").read_text()
    assert "essential matching unit" in card and "Rows: 5" in card
    assert (tmp_path / "u" / "data.parquet").is_file()


def _train_script():
    import importlib.util
    import sys

    from .conftest import REPO

    spec = importlib.util.spec_from_file_location("train_berm", REPO / "examples" / "train_berm.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["train_berm"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("style,extra", [
    ("vanilla", ["--train_data", "ROWS"]),
    ("hard_negatives", ["--train_data", "SAMPLE", "--min_positive_grade", "1", "--negative_source", "bm25",
                        "--distinct_queries_per_batch", "false", "--max_rows", "4"]),
    ("distillation", ["--train_data", "ROWS", "--berm", "false"]),
])
def test_train_script_styles(tiny_bert_dir, tmp_path, style, extra):
    from transformers import HfArgumentParser

    from hf_dr.training import RetrievalTrainingArguments

    from .conftest import SAMPLE

    tb = _train_script()
    rows = tmp_path / "rows.jsonl"
    Dataset.from_list([{"query": f"what is {w}", "pos": f"Intro. {w} is {w}.", "neg": [f"other {i}."],
                        "scores": [2.0, 0.0]} for i, w in enumerate(["alpha", "beta", "gamma", "delta"])]).to_json(str(rows))
    extra = [str(rows) if x == "ROWS" else str(SAMPLE) if x == "SAMPLE" else x for x in extra]
    parser = HfArgumentParser((tb.ModelArguments, tb.DataArguments, tb.BERMArguments, RetrievalTrainingArguments))
    m, d, b, args = parser.parse_args_into_dataclasses(
        ["--model_name_or_path", str(tiny_bert_dir), "--style", style, "--output_dir", str(tmp_path / "out"),
         "--max_steps", "2", "--per_device_train_batch_size", "2", "--use_cpu", "true", "--save_strategy", "no",
         "--disable_tqdm", "true", "--max_doc_length", "32", *extra])
    model, info = tb.train(m, d, b, args)
    assert info["global_steps"] == 2 and info["style"] == style
    assert (info["alpha"], info["beta"]) == ((0.1, 1.0) if b.berm else (0.0, 0.0))
    assert (tmp_path / "out" / "config.json").is_file() and (tmp_path / "out" / "README.md").is_file()
    assert "BERM" in (tmp_path / "out" / "README.md").read_text()
