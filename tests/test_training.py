import torch
from datasets import Dataset

from hf_dr.data import RetrievalCollator
from hf_dr.losses import contrastive_loss, margin_mse_loss
from hf_dr.models.dense import DenseEncoder
from hf_dr.objectives import ContrastiveObjective, MarginMSEObjective, get_objective
from hf_dr.training import RetrievalTrainer, RetrievalTrainingArguments

ROWS = [{"query": f"what is topic {w}", "pos": f"{w} is a topic about {w} things", "neg": [f"unrelated {v} text"],
         "scores": [5.0, 1.0]} for w, v in zip(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"],
                                                ["one", "two", "three", "four", "five", "six", "seven", "eight"])]


def test_contrastive_loss_formula():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.0, 0.0]])
    t = torch.tensor([0, 2])
    s = q @ d.T
    want = -(torch.log_softmax(s, 1)[0, 0] + torch.log_softmax(s, 1)[1, 2]) / 2
    assert torch.isclose(contrastive_loss(q, d, t), want)
    assert torch.isclose(margin_mse_loss(torch.tensor([3.0]), torch.tensor([1.0]), torch.tensor([5.0]),
                                         torch.tensor([4.0])), torch.tensor(1.0))


def test_a_querys_positives_are_not_its_in_batch_negatives():
    """in_batch_positives + exclude: a query's positives elsewhere in the batch leave its softmax:
    a copy of its own positive (the same query's other row, or another query sharing the document)
    and the positive of another row of the same query (k > 1). The loss is then the one of the batch
    without them; counted as negatives (no exclude), they raise it."""
    from hf_dr.losses import in_batch_positives

    q = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    d = torch.tensor([[2.0, 0.0], [0.5, 0.5], [2.0, 0.0], [0.3, 0.1], [0.0, 2.0], [0.2, 0.2], [1.5, 0.1], [0.1, 0.1]])
    t = torch.tensor([0, 2, 4, 6])
    query_keys = torch.tensor([1, 1, 2, 1])  # rows 0, 1, 3: one query; row 1 repeats row 0's positive
    doc_keys = torch.tensor([10, 11, 10, 12, 13, 14, 15, 16])  # row 3: another positive of that query
    exclude = in_batch_positives(doc_keys, query_keys, 2, slice(0, 4))
    want_excluded = {(0, 2), (0, 6), (1, 0), (1, 6), (3, 0), (3, 2), (0, 0), (1, 2), (3, 6)}
    assert {tuple(x) for x in exclude.nonzero().tolist()} == want_excluded | {(2, 4)}  # targets included
    s = q @ d.T
    keep = ~exclude
    keep[torch.arange(4), t] = True
    want = torch.stack([-torch.log_softmax(s[i][keep[i]], 0)[int(keep[i][:t[i]].sum())] for i in range(4)]).mean()
    got = contrastive_loss(q, d, t, exclude=exclude)
    assert torch.isclose(got, want)
    assert contrastive_loss(q, d, t) > got + 0.3
    g = d.clone().requires_grad_(True)
    contrastive_loss(q, g, t, exclude=exclude).backward()
    assert torch.isfinite(g.grad).all()
    # another process's rows (gathered): rows 2-3 of the same batch seen from the second process
    assert torch.equal(in_batch_positives(doc_keys, query_keys, 2, slice(2, 4)), exclude[2:])


def test_contrastive_objective_reads_the_batch_keys(tiny_bert_dir):
    """ContrastiveObjective on a batch where a query repeats: its loss equals the loss computed with
    the repeated positive left out by hand, and is lower than with the keys dropped."""
    enc = DenseEncoder.from_pretrained(tiny_bert_dir)
    enc.eval()
    batch = RetrievalCollator(enc.tokenizer, 16, 32)([ROWS[0], ROWS[1], {**ROWS[0], "neg": ["something else"]}])
    obj = ContrastiveObjective(scale=20.0)
    loss, _ = obj(enc, batch)
    no_keys, _ = obj(enc, {k: v for k, v in batch.items() if k not in ("doc_keys", "query_keys")})
    q = enc(batch["query_input_ids"], batch["query_attention_mask"], is_query=True)
    d = enc(batch["doc_input_ids"], batch["doc_attention_mask"])
    exclude = torch.zeros(3, 6, dtype=torch.bool)
    exclude[0, 4] = exclude[2, 0] = True  # rows 0 and 2: the same query and positive
    assert torch.isclose(loss, contrastive_loss(q, d, torch.tensor([0, 2, 4]), 20.0, exclude=exclude), atol=1e-5)
    assert no_keys > loss


def test_collator_keys_say_which_documents_are_the_same(tiny_tokenizer):
    from hf_dr.data.collators import text_keys

    rows = [ROWS[0], ROWS[0], {**ROWS[1], "neg": [ROWS[0]["pos"]]}]
    batch = RetrievalCollator(tiny_tokenizer, 16, 32)(rows)
    keys = batch["doc_keys"].tolist()
    qk = batch["query_keys"].tolist()
    assert qk[0] == qk[1] != qk[2]
    assert keys[0] == keys[2] == keys[5] and len(set(keys)) == 3  # pos 0 three times; neg 0 twice; pos 1
    laid_out = [ROWS[0]["pos"], ROWS[0]["neg"][0], ROWS[0]["pos"], ROWS[0]["neg"][0], ROWS[1]["pos"], ROWS[0]["pos"]]
    assert keys == text_keys(laid_out).tolist()  # stable: the same keys in every process


def test_collator_layout(tiny_tokenizer):
    batch = RetrievalCollator(tiny_tokenizer, 16, 32)(ROWS[:3])
    assert batch["query_input_ids"].shape[0] == 3 and batch["doc_input_ids"].shape[0] == 6
    assert batch["teacher_scores"].tolist() == [[5.0, 1.0]] * 3
    second_pos = tiny_tokenizer.decode(batch["doc_input_ids"][2], skip_special_tokens=True)
    assert second_pos.startswith("beta")


def test_trainer_lowers_loss_and_saves(tiny_bert_dir, tmp_path):
    torch.manual_seed(0)
    enc = DenseEncoder.from_pretrained(tiny_bert_dir, pooling="mean")
    collator = RetrievalCollator(enc.tokenizer, 16, 32)
    batch = collator(ROWS[:4])
    obj = get_objective("contrastive", scale=1.0)
    before = obj(enc, batch)[0].item()
    args = RetrievalTrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                                      num_train_epochs=15, learning_rate=1e-3, logging_steps=5, save_strategy="no",
                                      seed=0, use_cpu=True, disable_tqdm=True)
    trainer = RetrievalTrainer(model=enc, args=args, train_dataset=Dataset.from_list(ROWS[:4]),
                               data_collator=collator, objective=obj)
    trainer.train()
    enc.eval()
    after = obj(enc, batch)[0].item()
    assert after < before
    assert any("contrastive_loss" in h for h in trainer.state.log_history)
    trainer.save_model(str(tmp_path / "saved"))
    again = DenseEncoder.from_pretrained(tmp_path / "saved")
    assert again.pooling == "mean"
    assert torch.allclose(torch.tensor(again.encode_queries(["what is topic beta"])),
                          torch.tensor(enc.encode_queries(["what is topic beta"])), atol=1e-5)


def test_margin_mse_objective(tiny_bert_dir):
    enc = DenseEncoder.from_pretrained(tiny_bert_dir)
    batch = RetrievalCollator(enc.tokenizer, 16, 32)(ROWS[:2])
    loss, logs = MarginMSEObjective()(enc, batch)
    q = enc(batch["query_input_ids"], batch["query_attention_mask"], is_query=True)
    d = enc(batch["doc_input_ids"], batch["doc_attention_mask"]).view(2, 2, -1)
    s = (q.unsqueeze(1) * d).sum(-1)
    want = ((s[:, 0] - s[:, 1] - 4.0) ** 2).mean()
    assert torch.isclose(loss, want, atol=1e-5) and "margin_mse_loss" in logs


def test_rotate_checkpoints_keeps_the_newest_and_the_best(tmp_path):
    from hf_dr.training import rotate_checkpoints

    for step in (5, 10, 15, 20, 100):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint: never touched
    assert rotate_checkpoints(tmp_path, None) == [] and rotate_checkpoints(tmp_path, 0) == []
    deleted = rotate_checkpoints(tmp_path, 2, best_model_checkpoint=str(tmp_path / "checkpoint-10"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-10", "checkpoint-100", "checkpoint-x"]
    assert [p.rsplit("/", 1)[1] for p in deleted] == ["checkpoint-5", "checkpoint-15", "checkpoint-20"]
    assert rotate_checkpoints(tmp_path, 1, best_model_checkpoint=str(tmp_path / "checkpoint-10")) == []
