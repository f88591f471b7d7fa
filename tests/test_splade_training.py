"""SPLADE-CAI training pieces: FLOPS / Margin-MSE against sentence-transformers, the
objective's warm-up, a few training steps, and AdaLM vocabulary expansion."""

import pytest
import torch
from datasets import Dataset

from hf_dr.adaptation.vocabulary import apply_vocabulary, expand_vocabulary, is_noise_token, plot_entropy_curve
from hf_dr.data import RetrievalCollator
from hf_dr.losses import flops_loss, margin_mse_loss
from hf_dr.models.splade import SPLADECAI
from hf_dr.objectives import SpladeObjective
from hf_dr.training import RetrievalTrainer, RetrievalTrainingArguments

from .conftest import SAMPLE


class _Dummy(torch.nn.Module):
    pass


def test_flops_equals_sentence_transformers():
    from sentence_transformers.sparse_encoder.losses import FlopsLoss

    torch.manual_seed(0)
    reps = torch.relu(torch.randn(6, 50))
    st = FlopsLoss.__new__(FlopsLoss)  # no model needed for the tensor part
    torch.nn.Module.__init__(st)
    st.threshold = None
    theirs = st.compute_loss_from_embeddings(reps)
    assert torch.isclose(flops_loss(reps), theirs)
    assert torch.isclose(flops_loss(reps), ((reps.abs().mean(0)) ** 2).sum())


def test_margin_mse_equals_sentence_transformers():
    from sentence_transformers.sentence_transformer.losses import MarginMSELoss

    torch.manual_seed(1)
    q, p, n = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
    teacher = torch.randn(4, 2)
    st = MarginMSELoss.__new__(MarginMSELoss)
    torch.nn.Module.__init__(st)
    st.similarity_fct = lambda a, b: (a * b).sum(-1)
    st.loss_fct = torch.nn.MSELoss()
    theirs = st.compute_loss_from_embeddings([q, p, n], teacher)
    ours = margin_mse_loss((q * p).sum(-1), (q * n).sum(-1), teacher[:, 0], teacher[:, 1])
    assert torch.isclose(ours, theirs)


def test_quadratic_warmup():
    obj = SpladeObjective(warmup_steps=10)
    ws = []
    for step in (0, 5, 10, 20):
        obj.step = step
        ws.append(obj.weight())
    assert ws == [0.0, 0.25, 1.0, 1.0]


ROWS = [{"query": f"what causes {w}", "pos": f"{w} is caused by {v} in cells", "neg": "the weather is nice today",
         "scores": [8.0, 1.0]} for w, v in [("cancer", "mutation"), ("fever", "infection"), ("anemia", "iron loss"),
                                            ("obesity", "diet"), ("asthma", "allergy"), ("scurvy", "vitamin c")]]


def test_margin_mse_scale_multiplies_the_student_scores(tiny_bert_dir):
    """With teacher scores, ``scale`` puts the student's scores on the teacher's scale before the
    margins are matched (what ``--margin-scale`` sets); the FLOPS term is untouched by it."""
    torch.manual_seed(0)
    model = SPLADECAI.from_backbone(str(tiny_bert_dir))
    model.eval()
    batch = RetrievalCollator(model.tokenizer, 16, 32)(ROWS)
    with torch.no_grad():
        q = model(batch["query_input_ids"], batch["query_attention_mask"], is_query=True)
        d = model(batch["doc_input_ids"], batch["doc_attention_mask"]).view(len(ROWS), 2, -1)
        s = torch.einsum("bv,bgv->bg", q, d)
        t = batch["teacher_scores"]
        for scale in (1.0, 0.25):
            obj = SpladeObjective(warmup_steps=0, lambda_q=0.0, lambda_d=0.0, scale=scale)
            loss = obj(model, batch)[1]["rank_loss"]
            assert torch.isclose(loss, margin_mse_loss(scale * s[:, 0], scale * s[:, 1], t[:, 0], t[:, 1]))


@pytest.mark.parametrize("with_teacher", [True, False])
def test_training_lowers_loss_and_keeps_vectors_sparse(tiny_bert_dir, tmp_path, with_teacher):
    torch.manual_seed(0)
    model = SPLADECAI.from_backbone(str(tiny_bert_dir))
    rows = ROWS if with_teacher else [{k: v for k, v in r.items() if k != "scores"} for r in ROWS]
    collator = RetrievalCollator(model.tokenizer, 16, 32)
    obj = SpladeObjective(lambda_q=0.08, lambda_d=0.1, warmup_steps=2)
    batch = collator(rows)
    model.train()
    obj.step = 10
    before = obj(model, batch)[0].item()
    args = RetrievalTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=6, num_train_epochs=20,
                                      learning_rate=2e-3, logging_steps=5, save_strategy="no", use_cpu=True, seed=0,
                                      disable_tqdm=True)
    trainer = RetrievalTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), data_collator=collator,
                               objective=obj)
    trainer.train()
    model.train()
    obj.step = 10
    after = obj(model, batch)[0].item()
    assert after < before
    logs = [h for h in trainer.state.log_history if "active_dims_d" in h]
    assert logs and logs[-1]["flops_weight"] == 1.0
    vecs = model.encode_corpus([r["pos"] for r in rows])
    assert 0 < vecs.nnz / vecs.shape[0] < 0.5 * vecs.shape[1]  # neither collapsed nor dense


CORPUS = [line for line in (SAMPLE / "corpus.jsonl").read_text().splitlines()[:200]]


def test_noise_tokens():
    assert is_noise_token("1234") and is_noise_token("##)") and is_noise_token("--") and is_noise_token("3.5%")
    assert not is_noise_token("p53") and not is_noise_token("##ase")


def test_vocabulary_expansion_is_real_wordpiece(tiny_tokenizer, tiny_bert_dir, tmp_path):
    from transformers import AutoModelForMaskedLM

    ex = expand_vocabulary(tiny_tokenizer, CORPUS, delta_v=300, max_iterations=2, show_progress=False)
    n0 = len(tiny_tokenizer)
    assert ex.size > n0 and ex.vocab[:n0] == [t for t, _ in sorted(tiny_tokenizer.get_vocab().items(), key=lambda x: x[1])]
    assert len(set(ex.added)) == len(ex.added) and not set(ex.added) & set(tiny_tokenizer.get_vocab())
    assert not any(is_noise_token(t) for t in ex.added)
    assert len(ex.entropies) == len(ex.sizes) >= 2 and ex.entropies[-1] > ex.entropies[0]
    model = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir)
    old_emb = model.get_input_embeddings().weight.detach().clone()
    model, tok = apply_vocabulary(model, tiny_tokenizer, ex)
    whole = next(t for t in ex.added if not t.startswith("##") and len(tiny_tokenizer.tokenize(t)) > 1)
    assert tok.tokenize(whole) == [whole]  # a new whole word is one piece
    # a hand-made extension: "##zzq" must behave as a WordPiece continuation piece (an "added
    # token" would be cut out before WordPiece and leave "zzq" to be split on its own)
    base = [t for t, _ in sorted(tiny_tokenizer.get_vocab().items(), key=lambda x: x[1])]
    m2, tok2 = apply_vocabulary(AutoModelForMaskedLM.from_pretrained(tiny_bert_dir), tiny_tokenizer,
                                base + ["qwertyx", "##zzq"])
    assert tok2.tokenize("qwertyxzzq") == ["qwertyx", "##zzq"]
    assert tok2.tokenize("thezzq") == ["the", "##zzq"]
    assert tok2.tokenize("zzq")[0] != "##zzq"
    j = tok.convert_tokens_to_ids(whole)
    sub = tiny_tokenizer.convert_tokens_to_ids(tiny_tokenizer.tokenize(whole))
    assert torch.allclose(model.get_input_embeddings().weight[j], old_emb[sub].mean(0))
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert "[CLS]" in tok.convert_ids_to_tokens(tok("x")["input_ids"])
    assert plot_entropy_curve(ex, tmp_path / "entropy.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="non-empty corpus"):
        expand_vocabulary(tiny_tokenizer, ["  "])
