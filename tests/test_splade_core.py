"""SPLADECAI core (Eq. 1-7) on a tiny random MLM and on the real splade-tiny."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from hf_dr.models.splade import SPLADECAI, splade_pool

from .conftest import SPLADE_TINY, need


def test_eq3_pool_equals_naive_and_ignores_padding():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 7)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    naive = torch.stack([torch.log1p(torch.relu(logits[b, : int(mask[b].sum())])).amax(0) for b in range(2)])
    assert torch.allclose(splade_pool(logits.clone(), mask), naive)
    g = logits.clone().requires_grad_(True)
    out = splade_pool(g, mask)
    out.sum().backward()
    assert g.grad[0, 3].abs().sum() == 0  # padding gets no gradient


@pytest.fixture(scope="module")
def tiny_splade(tiny_bert_dir):
    return SPLADECAI.from_backbone(str(tiny_bert_dir))


@pytest.mark.slow
def test_vocabulary_blocked_pooling_gives_identical_vectors(tiny_splade):
    """The inference path (per-document, vocabulary-blocked projection + max) equals the
    full projection + masked max, for block sizes that do not divide |V|."""
    m = tiny_splade
    texts = ["apple banana cherry " * 20, "banana", "a b c d e f g"]
    assert m.config.pool_vocab_block > 0  # on by default
    blocked = m.encode_corpus(texts)
    old = m.config.pool_vocab_block
    try:
        m.config.pool_vocab_block = 0
        full = m.encode_corpus(texts)
        m.config.pool_vocab_block = 7
        odd = m.encode_corpus(texts)
    finally:
        m.config.pool_vocab_block = old
    for other in (blocked, odd):
        assert abs(full - other).max() < 1e-5 and full.nnz == other.nnz
        assert (full.indices == other.indices).all()


def test_blocked_decoder_masks_padding_and_empty_rows():
    from hf_dr.models.splade.modeling_splade import _MaxPooledDecoder
    torch.manual_seed(0)
    dec = torch.nn.Linear(8, 50)
    x = torch.randn(3, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    ref = splade_pool(dec(x).detach(), mask)
    for batched in (False, True):  # per-document (CPU) and whole-batch-per-block (GPU) paths
        with torch.no_grad(), _MaxPooledDecoder(dec, mask, 16, batched=batched):
            got = dec(x)[:, 0]
        assert torch.allclose(torch.log1p(torch.relu(got)), ref, atol=1e-6)
        assert (torch.log1p(torch.relu(got[2])) == 0).all()  # no position: all weights 0
    assert dec.forward.__func__ is torch.nn.Linear.forward  # restored on exit


def test_cpu_pooling_groups_short_documents_and_keeps_long_ones_alone():
    """The CPU path projects short documents in groups (padded to the group's longest) and a long one
    alone: every grouping, with right or left padding and an empty row, gives the masked max of the
    full projection."""
    from hf_dr.models.splade.modeling_splade import _MaxPooledDecoder, _tile_groups

    assert _tile_groups([3, 3, 9, 2, 2, 2], 8) == [(0, 2), (2, 3), (3, 6)]
    assert _tile_groups([5], 1) == [(0, 1)]
    torch.manual_seed(0)
    dec = torch.nn.Linear(8, 50)
    x = torch.randn(6, 9, 8)
    lens = [3, 3, 9, 2, 0, 2]
    right = torch.tensor([[1] * n + [0] * (9 - n) for n in lens])
    for mask in (right, right.flip(1)):  # right and left padding
        ref = splade_pool(dec(x).detach(), mask)
        for rows in (1, 8, 64):  # every document alone; groups and a long one alone; all in one group
            old = _MaxPooledDecoder.TILE_ROWS
            _MaxPooledDecoder.TILE_ROWS = rows
            try:
                with torch.no_grad(), _MaxPooledDecoder(dec, mask, 16, batched=False):
                    got = torch.log1p(torch.relu(dec(x)[:, 0]))
            finally:
                _MaxPooledDecoder.TILE_ROWS = old
            assert torch.allclose(got, ref, atol=1e-6), rows
            assert (got[4] == 0).all()  # the empty document


def _pooled_grads(m, ids, mask, block):
    m.config.pool_vocab_block = block
    m.zero_grad(set_to_none=True)
    out = m(input_ids=ids, attention_mask=mask)
    (out * torch.linspace(0.5, 1.5, out.shape[-1])).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def test_training_pooling_gives_the_dense_gradient(tiny_splade):
    """With autograd, the blocked max-pooled projection (which keeps each maximum's position and
    sends the gradient there) gives the dense path's vectors and gradients (full logits + masked
    max), padding included, for a block size that does not divide |V|."""
    m = tiny_splade.train()
    enc = m.tokenizer(["apple banana cherry " * 5, "banana", "a b c d e f g"], padding=True, return_tensors="pt")
    old = m.config.pool_vocab_block
    try:
        torch.manual_seed(0)
        m.eval()  # no dropout: both passes see the same network
        dense, gd = _pooled_grads(m, enc["input_ids"], enc["attention_mask"], 0)
        pooled, gp = _pooled_grads(m, enc["input_ids"], enc["attention_mask"], 7)
    finally:
        m.config.pool_vocab_block = old
    assert torch.allclose(dense, pooled, atol=1e-6)
    assert gd.keys() == gp.keys() and len(gd) > 3
    emb = m.get_input_embeddings().weight
    assert any(p is emb for p in m.parameters())
    for n in gd:  # float32 sums in another order: relative to the gradient's scale
        assert (gd[n] - gp[n]).abs().max() <= 1e-5 * gd[n].abs().max() + 1e-6, (n, (gd[n] - gp[n]).abs().max())
    assert gd[next(n for n in gd if "word_embeddings" in n)].abs().sum() > 0  # the tied decoder is trained


def test_fit_idf_eq6(tiny_splade):
    m = tiny_splade
    tok = m.tokenizer
    docs = ["apple banana", "apple cherry", "apple"]
    idf = m.fit_idf(docs)
    ids = {w: tok.convert_tokens_to_ids(w) for w in ("apple", "banana", "cherry", "zebra")}
    assert idf[ids["apple"]].item() == pytest.approx(0.0)  # log(3/3)
    assert idf[ids["banana"]].item() == pytest.approx(np.log(3))
    assert idf[ids["zebra"]].item() == 1.0  # N_t = 0 -> weight 1
    assert m.config.use_idf
    with pytest.raises(ValueError, match="empty corpus"):
        m.fit_idf([])


def test_idf_weights_documents_not_queries(tiny_splade):
    m = tiny_splade
    m.fit_idf(["apple banana", "apple cherry", "apple"])
    m.config.use_idf = False
    plain_d = m.encode_corpus(["apple banana"]).toarray()
    plain_q = m.encode_queries(["apple banana"]).toarray()
    m.config.use_idf = True
    for exp in (1.0, 0.5):
        m.config.idf_exponent = exp
        d = m.encode_corpus(["apple banana"]).toarray()
        assert np.allclose(d, plain_d * (m.idf.numpy() ** exp), atol=1e-6)  # Eq. 7
        assert np.allclose(m.encode_queries(["apple banana"]).toarray(), plain_q)
    m.config.idf_exponent = 1.0


def test_bow_query_mode(tiny_splade):
    m = tiny_splade
    tok = m.tokenizer
    m.config.query_mode = "bow"
    try:
        q = m.encode_queries(["apple apple banana"])
    finally:
        m.config.query_mode = "splade"
    want = sorted({tok.convert_tokens_to_ids("apple"), tok.convert_tokens_to_ids("banana")})
    assert sorted(q.indices.tolist()) == want and set(q.data.tolist()) == {1.0}


def test_save_automodel_round_trip(tiny_splade, tmp_path):
    from transformers import AutoModel

    m = tiny_splade
    m.fit_idf(["apple banana", "apple cherry"])
    m.save_pretrained(tmp_path)
    m2 = AutoModel.from_pretrained(tmp_path, trust_remote_code=True)
    assert type(m2).__name__ == "SPLADECAI" and m2.config.use_idf
    docs = ["apple banana cherry", "banana"]
    a, b = m.encode_corpus(docs), m2.encode_corpus(docs)
    assert isinstance(b, sp.csr_matrix) and abs(a - b).max() < 1e-5


def test_vocabulary_mismatch_is_refused(tiny_bert_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tok.add_tokens(["brandnewtoken"])
    with pytest.raises(ValueError, match="tokenizer has .* tokens but the model's vocabulary"):
        SPLADECAI.from_backbone(str(tiny_bert_dir), tokenizer=tok)


@pytest.mark.shared
def test_real_splade_tiny_expands_queries():
    m = SPLADECAI.from_backbone(str(need(SPLADE_TINY)))
    q = m.encode_queries(["phytates for the treatment of cancer"])
    top = m.tokenizer.convert_ids_to_tokens(np.argsort(-q.toarray()[0])[:8].tolist())
    assert {"cancer", "treatment", "tumor"} <= set(top)  # expansion: "tumor" is not in the query
    enc = m.tokenizer(["phytates for the treatment of cancer"], return_tensors="pt")
    with torch.no_grad():
        naive = torch.log1p(torch.relu(m.mlm(**enc).logits)).amax(1)
    assert np.allclose(q.toarray(), naive.numpy(), atol=1e-5)


@pytest.mark.slow
def test_cli_evaluates_a_saved_spladecai(tiny_splade, tmp_path, capsys):
    import json

    from hf_dr.cli import main

    from .conftest import SAMPLE

    tiny_splade.save_pretrained(tmp_path / "model")
    assert main(["evaluate", "--data", str(SAMPLE), "--retriever", "sparse", "--model", str(tmp_path / "model"),
                 "--output", str(tmp_path / "out"), "--max-queries", "5"]) == 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["encoder"] == "SPLADECAI" and m["n_queries"] == 5
    assert "| sparse: model |" in capsys.readouterr().out
