import numpy as np
import pytest
import scipy.sparse as sp
import torch

from hf_dr.encoding import EncoderMixin, doc_to_text, encode
from hf_dr.models.dense import DenseEncoder, pool

from .conftest import MINILM, need

TEXTS = ["short", "a somewhat longer text with more tokens in it", "medium length text here", "x y z w",
         "the longest text of all of these texts, by quite a margin, with many many words"]


class Recorder:
    """A fake forward that records batch widths and returns per-row features."""

    def __init__(self):
        self.widths = []

    def __call__(self, ids, mask):
        self.widths.append(ids.shape[1])
        return torch.stack([mask.sum(1).float(), ids[:, 1].float()], dim=1)


def test_length_sorted_batches_restored_to_input_order(tiny_tokenizer):
    rec = Recorder()
    out = encode(TEXTS, tiny_tokenizer, rec, batch_size=2, max_length=64)
    lengths = [len(tiny_tokenizer(t)["input_ids"]) for t in TEXTS]
    assert out.dtype == np.float32 and out.shape == (5, 2)
    assert out[:, 0].tolist() == lengths  # row i is text i's own length: order restored
    assert rec.widths == sorted(rec.widths, reverse=True)  # longest batch first
    assert rec.widths[0] == max(lengths)
    assert out[:, 1].tolist() == [tiny_tokenizer(t)["input_ids"][1] for t in TEXTS]


def test_truncation_sparse_output_and_errors(tiny_tokenizer):
    rec = Recorder()
    out = encode(TEXTS, tiny_tokenizer, rec, batch_size=8, max_length=5)
    assert out[:, 0].max() == 5

    def dense_vocab(ids, mask):
        v = torch.zeros(ids.shape[0], 50)
        v[torch.arange(ids.shape[0]), ids[:, 1] % 50] = 1.0 + mask.sum(1).float()
        return v

    csr = encode(TEXTS, tiny_tokenizer, dense_vocab, batch_size=2, sparse=True)
    ref = encode(TEXTS, tiny_tokenizer, dense_vocab, batch_size=2)
    assert isinstance(csr, sp.csr_matrix) and csr.shape == (5, 50) and csr.dtype == np.float32
    assert np.array_equal(csr.toarray(), ref) and csr.nnz == 5
    with pytest.raises(ValueError, match="empty"):
        encode([], tiny_tokenizer, rec)
    with pytest.raises(TypeError, match="single string"):
        encode("abc", tiny_tokenizer, rec)
    with pytest.raises(TypeError, match="input 1 is NoneType"):
        encode(["a", None], tiny_tokenizer, rec)


@pytest.mark.parametrize("max_length", [5, 8, 64])
def test_one_tokenisation_counts_what_truncation_cut_as_a_second_whole_one_does(tiny_tokenizer, monkeypatch, max_length):
    """The fast path (overflow rows of one pass) against the other tokenizers' path (the texts at the
    limit tokenised again, whole): the same ids, the same overflow, text by text."""
    from hf_dr.encoding import LengthReport, _tokenize

    texts = TEXTS + ["", " ".join(TEXTS * 3)]
    whole = [len(tiny_tokenizer(t)["input_ids"]) for t in texts]
    fast = LengthReport("corpus", max_length)
    ids = _tokenize(texts, tiny_tokenizer, max_length, None, fast)
    assert tiny_tokenizer.is_fast
    monkeypatch.setattr(type(tiny_tokenizer), "is_fast", property(lambda self: False))
    other = LengthReport("corpus", max_length)
    assert _tokenize(texts, tiny_tokenizer, max_length, None, other) == ids
    assert ids == tiny_tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    assert fast.overflow == other.overflow == [n - max_length for n in whole if n > max_length]
    assert fast.texts == other.texts == len(texts)


def test_doc_to_text_is_beir_joining():
    assert doc_to_text({"title": "T", "text": "body"}) == "T body"
    assert doc_to_text({"title": "", "text": "body"}) == "body"
    assert doc_to_text("plain") == "plain"


def test_pooling():
    h = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    m = torch.tensor([[1, 1, 0]])
    assert pool(h, m, "mean").tolist() == [[2.0, 3.0]]
    assert pool(h, m, "cls").tolist() == [[1.0, 2.0]]
    assert pool(h, m, "max").tolist() == [[3.0, 4.0]]


@pytest.mark.shared
def test_dense_encoder_equals_sentence_transformers():
    path = need(MINILM)
    from sentence_transformers import SentenceTransformer

    enc = DenseEncoder.from_pretrained(path)
    assert (enc.pooling, enc.normalize, enc.max_doc_length) == ("mean", True, 256)
    st = SentenceTransformer(str(path), device="cpu")
    ours = enc.encode_corpus([{"title": "", "text": t} for t in TEXTS], batch_size=2)
    theirs = st.encode(TEXTS, batch_size=2)
    assert np.allclose(ours, theirs, atol=1e-5)
    assert np.allclose(enc.encode_queries(TEXTS[:2]), theirs[:2], atol=1e-5)


def test_mixin_restores_training_mode(tiny_bert_dir):
    enc = DenseEncoder.from_pretrained(tiny_bert_dir, pooling="cls")
    enc.train()
    e = enc.encode_queries(["hello world"])
    assert enc.training and e.shape == (1, 32)
    assert isinstance(enc, EncoderMixin)


def test_encode_goes_to_the_gpu_when_there_is_one(tiny_bert_dir, monkeypatch, tmp_path):
    """Loading leaves a model on the CPU; with no device asked for, encoding must move it to the
    GPU when one is present, and record the dtype of that device (the defect: `hf-dr encode` ran on
    the CPU of an H100 machine, 85 docs/s where Sentence Transformers did 411). The GPU is faked:
    ``resolve_device(None)`` says cuda and ``Module.to`` is recorded instead of run."""
    import hf_dr.devices as devices
    from hf_dr.embeddings import encode_to_folder
    from hf_dr.precision import encoding_dtype

    real = devices.resolve_device
    monkeypatch.setattr(devices, "resolve_device",
                        lambda d: torch.device("cuda") if d in (None, "auto") else real(d))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    enc = DenseEncoder.from_pretrained(tiny_bert_dir, pooling="mean")
    moved = []
    monkeypatch.setattr(type(enc), "to", lambda self, *a, **k: moved.append(a[0]) or self, raising=False)
    assert devices.encode_device(enc) == torch.device("cuda")
    assert encoding_dtype(enc) == torch.bfloat16  # auto on a bf16 GPU, as the encode loop will run
    enc.encode_corpus(["a b c", "d e"])
    assert moved == [torch.device("cuda")]
    # an explicit device wins; a model being trained stays where the Trainer put it
    assert devices.encode_device(enc, "cpu") == torch.device("cpu")
    enc.train()
    assert devices.encode_device(enc) == torch.device("cpu")
    enc.eval()
    # the embeddings manifest records the dtype of the device the documents were encoded on
    moved.clear()
    emb = encode_to_folder(enc, (["d1", "d2"], ["a b c", "d e"]), tmp_path / "emb", show_progress_bar=False,
                           dtype="auto")
    assert moved and emb.manifest["dtype"] in ("bfloat16", "bf16")
