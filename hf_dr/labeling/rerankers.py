"""Rerankers of the DoDress pipeline behind one interface: ``score(query, docs) -> np.ndarray``.

* :class:`MonoT5Reranker` — monoT5 (Nogueira et al. 2020; Eq. 3 of papers/004): the input
  ``"Query: q Document: d Relevant:"``, score = softmax over the ``true`` / ``false`` logits of
  the first decoded token (the log-probability of ``true`` is returned, a monotone transform
  that keeps margins usable). Default ``castorini/monot5-3b-msmarco``; any size works.
* :class:`CrossEncoderReranker` — a sentence-transformers ``CrossEncoder``, raw logits (no
  sigmoid: margins are used downstream).
* :class:`FusionReranker` — wraps scorers of the suite where no cross-encoder exists: z-score
  fusion of BM25 and a dense model over the candidates (the offline default).

``get_reranker("fusion" | "monot5:<id>" | "cross-encoder:<id>", ...)`` builds one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..encoding import resolve_device

__all__ = ["MonoT5Reranker", "CrossEncoderReranker", "FusionReranker", "get_reranker"]


class MonoT5Reranker:
    def __init__(self, model_name_or_path: str = "castorini/monot5-3b-msmarco", batch_size: int = 16,
                 max_length: int = 512, device=None, true_token: str = "▁true", false_token: str = "▁false"):
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        self.device = resolve_device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(model_name_or_path).to(self.device).eval()
        vocab = self.tokenizer.get_vocab()
        ids = [vocab.get(t, vocab.get(t.lstrip("▁"))) for t in (true_token, false_token)]
        if None in ids:
            raise ValueError(f"{model_name_or_path}: tokenizer has no {true_token!r}/{false_token!r} tokens")
        self.true_id, self.false_id = ids
        self.batch_size, self.max_length = batch_size, max_length
        self.name = f"monot5:{model_name_or_path}"

    @staticmethod
    def format(query: str, doc: str) -> str:
        return f"Query: {query} Document: {doc} Relevant:"

    @torch.inference_mode()
    def score(self, query: str, docs: Sequence[str]) -> np.ndarray:
        out = []
        start = self.model.config.decoder_start_token_id
        for s in range(0, len(docs), self.batch_size):
            enc = self.tokenizer([self.format(query, d) for d in docs[s:s + self.batch_size]], padding=True,
                                 truncation=True, max_length=self.max_length, return_tensors="pt").to(self.device)
            dec = torch.full((enc["input_ids"].shape[0], 1), start, dtype=torch.long, device=self.device)
            logits = self.model(**enc, decoder_input_ids=dec).logits[:, 0, [self.true_id, self.false_id]]
            out.append(torch.log_softmax(logits.float(), dim=-1)[:, 0].cpu())
        return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)


class CrossEncoderReranker:
    def __init__(self, model_name_or_path: str, batch_size: int = 32, max_length: int = 512, device=None):
        from sentence_transformers import CrossEncoder

        self.model = CrossEncoder(model_name_or_path, max_length=max_length, device=str(resolve_device(device)))
        self.batch_size = batch_size
        self.name = f"cross-encoder:{model_name_or_path}"

    def score(self, query: str, docs: Sequence[str]) -> np.ndarray:
        if not docs:
            return np.zeros(0, dtype=np.float32)
        # raw logits: identity activation instead of the default sigmoid
        return np.asarray(self.model.predict([(query, d) for d in docs], batch_size=self.batch_size,
                                             activation_fn=torch.nn.Identity(), show_progress_bar=False))


class FusionReranker:
    """z-score fusion of BM25 and a dense encoder's scores over the candidate list, per query
    (the same ``hf_dr.retrieval.normalize_run`` the spine's hybrid retrieval uses)."""

    def __init__(self, bm25, encoder, weights: tuple[float, float] = (1.0, 1.0), batch_size: int = 32):
        self.bm25, self.encoder, self.weights, self.batch_size = bm25, encoder, weights, batch_size
        self.name = "fusion"

    def score(self, query: str, docs: Sequence[str], doc_indices: Sequence[int] | None = None) -> np.ndarray:
        from ..retrieval import normalize_run

        if not docs:
            return np.zeros(0, dtype=np.float32)
        if doc_indices is None:
            raise ValueError("FusionReranker needs the candidates' corpus indices (for BM25 scores)")
        lex = self.bm25.score(query, doc_indices)
        q = self.encoder.encode_queries([query])
        d = self.encoder.encode_corpus(list(docs), batch_size=self.batch_size, show_progress_bar=False)
        dense = (d @ q[0]).astype(np.float64)
        keys = [str(i) for i in range(len(docs))]
        zl = normalize_run({"q": dict(zip(keys, lex.tolist()))}, "zscore")["q"]
        zd = normalize_run({"q": dict(zip(keys, dense.tolist()))}, "zscore")["q"]
        return np.array([self.weights[0] * zl[k] + self.weights[1] * zd[k] for k in keys])


def get_reranker(spec: str, *, bm25=None, encoder=None, **kwargs):
    """``"fusion"`` (needs ``bm25`` and ``encoder``), ``"monot5:<id>"`` or ``"cross-encoder:<id>"``."""
    kind, _, ident = spec.partition(":")
    if kind == "fusion":
        if bm25 is None or encoder is None:
            raise ValueError("the fusion reranker needs a BM25 index and a dense model (--dense-model)")
        return FusionReranker(bm25, encoder, **kwargs)
    if kind == "monot5":
        return MonoT5Reranker(ident or "castorini/monot5-3b-msmarco", **kwargs)
    if kind == "cross-encoder":
        if not ident:
            raise ValueError("cross-encoder:<model id or path> needs a model")
        return CrossEncoderReranker(ident, **kwargs)
    raise ValueError(f"unknown reranker {spec!r}: use fusion, monot5:<id> or cross-encoder:<id>")
