import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, TrainingArguments

from hf_dr.adaptation.mlm import MLMArguments, RandomWindowMLMCollator, load_mlm_model, mlm_loss, tokenize_corpus, train_mlm

from .conftest import MINILM, SAMPLE, need

LONG = " ".join(f"word{i}" for i in range(200))


@pytest.mark.pipeline
def test_window_crops_and_masking(tiny_tokenizer):
    ds = tokenize_corpus([LONG, "short document", "  "], tiny_tokenizer)
    assert len(ds) == 2  # the blank document is dropped
    torch.manual_seed(0)
    col = RandomWindowMLMCollator(tiny_tokenizer, MLMArguments(max_length=32), seed=0)
    starts = set()
    for _ in range(5):
        b = col([ds[0], ds[1]])
        assert b["input_ids"].shape == (2, 32)
        ids = b["input_ids"][0]
        assert ids[0] == tiny_tokenizer.cls_token_id and ids[-1] == tiny_tokenizer.sep_token_id
        starts.add(tuple(b["labels"][0].tolist()))
    assert len(starts) > 1  # different windows / masks each time
    big = col([ds[0]] * 200)
    labelled = big["labels"] != -100
    frac = labelled.float().mean().item()
    assert 0.10 < frac < 0.20  # 15% of tokens selected
    masked = (big["input_ids"] == tiny_tokenizer.mask_token_id) & labelled
    assert 0.7 < masked.sum().item() / labelled.sum().item() < 0.9  # 80% of them become [MASK]


@pytest.mark.shared
def test_head_added_to_checkpoint_without_one():
    model = load_mlm_model(str(need(MINILM)))
    assert model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()


@pytest.mark.slow
def test_train_mlm_lowers_loss(tiny_bert_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir)
    texts = [line for line in (SAMPLE / "corpus.jsonl").read_text().splitlines()[:40]]
    before = mlm_loss(model, tok, texts, MLMArguments(max_length=64))
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=3,
                             learning_rate=5e-3, save_strategy="no", report_to="none", use_cpu=True, seed=0,
                             disable_tqdm=True)
    train_mlm(model, tok, texts, args, MLMArguments(max_length=64))
    after = mlm_loss(model, tok, texts, MLMArguments(max_length=64))
    assert after < before
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "tokenizer.json").is_file()
