"""Rerankers of the DoDress pipeline (papers/002 §4.1, papers/004 §3-4) behind one interface.

Every reranker has

* ``score(query, docs) -> np.ndarray`` — one score per document text, batched (on GPU when
  there is one);
* ``score_documents(query_id, query, doc_ids, candidates) -> np.ndarray`` — scores of corpus
  documents, given the query's BM25 candidate list ``{doc_id: bm25_score}`` (only the fusion
  scorer looks at it: its scores are normalised over that list, topped up with a corpus sample
  when shorter than 100 documents);
* ``rerank(candidates: Run, queries) -> Run`` — the candidate lists rescored;
* ``name`` — what the pipeline's cache key and the dataset card record.

Implementations:

* :class:`MonoT5Reranker` — monoT5 (Nogueira et al. 2020; Eq. 3 of papers/004): the input
  ``"Query: q Document: d Relevant:"``, ``RSV = e^{Z_true} / (e^{Z_true} + e^{Z_false})`` over
  the logits of the first decoded token. Default ``castorini/monot5-3b-msmarco``; any size works.
* :class:`CrossEncoderReranker` — a sentence-transformers ``CrossEncoder``, raw logits (no
  sigmoid: the margins are used downstream by Margin-MSE).
* :class:`FusionReranker` — for targets where no cross-encoder exists: z-score fusion of BM25
  and a dense model of the suite (``hf_dr.retrieval.fuse``), over each query's candidates (and
  a corpus sample when they are few: one scale for every query).

A spec string (``"fusion"`` | ``"monot5:<id>"`` | ``"cross-encoder:<id>"``) is parsed once into a
:class:`~.teacher.Teacher`, which builds one (:func:`~.teacher.get_reranker`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..devices import resolve_device
from ..retrieval import fuse
from ..retrieval.run import Run

__all__ = ["Reranker", "MonoT5Reranker", "CrossEncoderReranker", "FusionReranker", "FUSION_REFERENCE_SIZE"]

#: the fewest documents the fusion teacher normalises each query's scores over
FUSION_REFERENCE_SIZE = 100


class Reranker:
    """Base class: subclasses implement :meth:`score` (texts) or :meth:`score_documents` (ids)."""

    name = "reranker"
    #: the widest |pos_score - neg_score| a sane scale of this teacher produces (None: unknown, not
    #: checked); the pipeline reports a query whose margins exceed it as degenerate
    margin_bound: float | None = None
    #: corpus texts in the order of ``doc_ids`` (set by the pipeline or the constructor)
    doc_ids: Sequence[str] | None = None
    texts: Sequence[str] | None = None

    def set_corpus(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self.doc_ids, self.texts = list(doc_ids), list(texts)
        self._index_of = {d: i for i, d in enumerate(self.doc_ids)}

    def score(self, query: str, docs: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def score_documents(self, query_id: str, query: str, doc_ids: Sequence[str],
                        candidates: Mapping[str, float] | None = None) -> np.ndarray:
        if self.texts is None:
            raise ValueError(f"{type(self).__name__}: call set_corpus(doc_ids, texts) first")
        return np.asarray(self.score(query, [self.texts[self._index_of[d]] for d in doc_ids]), dtype=np.float64)

    def rerank(self, candidates: Run, queries: Mapping[str, str], show_progress_bar: bool = True) -> Run:
        out: Run = {}
        for q in tqdm(list(candidates), desc=f"Reranking ({self.name})", disable=not show_progress_bar):
            ids = list(candidates[q])
            out[q] = dict(zip(ids, map(float, self.score_documents(q, queries[q], ids, candidates[q])))) if ids else {}
        return out


class MonoT5Reranker(Reranker):
    """monoT5: Eq. 3 of papers/004, the probability of ``true`` against ``false``."""

    def __init__(self, model_name_or_path: str = "castorini/monot5-3b-msmarco", batch_size: int = 16,
                 max_length: int = 512, device=None, true_token: str = "▁true", false_token: str = "▁false",
                 model=None, tokenizer=None):
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        self.device = resolve_device(device)
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_name_or_path)
        self.model = (model or AutoModelForSeq2SeqLM.from_pretrained(model_name_or_path)).to(self.device).eval()
        vocab = self.tokenizer.get_vocab()
        ids = [vocab.get(t, vocab.get(t.lstrip("▁"))) for t in (true_token, false_token)]
        if None in ids:
            raise ValueError(f"{model_name_or_path}: the tokenizer has no {true_token!r} / {false_token!r} token "
                             "(not a monoT5 checkpoint?)")
        self.true_id, self.false_id = ids
        self.batch_size, self.max_length = batch_size, max_length
        self.name = f"monot5:{model_name_or_path}"
        self.margin_bound = 1.0  # probabilities

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
            # Eq. 3: softmax over the two logits, the probability of "true"
            out.append(torch.softmax(logits.float(), dim=-1)[:, 0].cpu())
        return torch.cat(out).numpy().astype(np.float64) if out else np.zeros(0)


class CrossEncoderReranker(Reranker):
    """A sentence-transformers ``CrossEncoder`` scored by its raw logits."""

    def __init__(self, model_name_or_path: str, batch_size: int = 32, max_length: int = 512, device=None):
        from sentence_transformers import CrossEncoder

        self.model = CrossEncoder(model_name_or_path, max_length=max_length, device=str(resolve_device(device)))
        self.batch_size = batch_size
        self.name = f"cross-encoder:{model_name_or_path}"

    def score(self, query: str, docs: Sequence[str]) -> np.ndarray:
        if not docs:
            return np.zeros(0)
        # identity instead of the default sigmoid: raw logits keep the margins
        s = self.model.predict([(query, d) for d in docs], batch_size=self.batch_size,
                               activation_fn=torch.nn.Identity(), show_progress_bar=False)
        return np.asarray(s, dtype=np.float64).reshape(len(docs), -1)[:, -1]


class FusionReranker(Reranker):
    """z-score fusion of BM25 and a dense model of the suite (``fuse([bm25, dense], method="zscore")``):
    the offline stand-in for a cross-encoder.

    The dense scores are inner products of stored embeddings: the corpus is encoded once (by
    the encoder's ``encode_corpus``, or handed over precomputed by the pipeline's cache), never
    per query. BM25 scores come from the one :class:`~hf_dr.retrieval.BM25Index`.

    **One scale for every query and every document.** Each component is z-normalised
    with the mean and standard deviation of a per-query *reference set*: the query's BM25
    candidate list, topped up to ``reference_size`` documents (100 by default; the corpus when
    smaller) with a deterministic sample of other corpus documents (seeded by ``reference_seed``
    and the query id), each with its real scores — a BM25 score of 0 when it shares no term with
    the query. Every scored document, in the list or not (a SimANS or random negative), gets
    ``w_lex * z(lex) + w_dense * z(dense)`` with those statistics, through the one fusion path
    (``fuse(..., references=...)``). A list of at least ``reference_size`` documents is its own
    reference set, so a query with a full candidate list scores exactly as the plain fusion over
    its list (SciFact's labels do not change).

    Why: normalising over the list alone rests the statistics on as many points as the list
    has. A one-word query that matches two documents gets two nearly equal BM25 scores, a
    standard deviation near 0, and a document outside the list is then thousands of standard
    deviations away (teacher scores down to -3,459 where the usual range is -5 to 16; their
    margins carried 99% of a Margin-MSE loss). With a reference set of ``n`` documents, every
    member's z-score lies within ``±sqrt(n - 1)`` (Samuelson's inequality), the sampled
    documents stand for the rest of the corpus (whose BM25 scores are mostly 0), and a
    non-matching negative is scored like the sampled non-matching documents. Rejected
    alternatives: a floor on the standard deviation (a scale-dependent constant), or leaving the
    list's statistics alone and clipping scores (hides the problem, keeps the wrong scale).

    :attr:`margin_bound` is the widest teacher margin two reference documents can have,
    ``2 * sum|w| * sqrt(n - 1)``; the pipeline reports a query whose margins exceed it as
    degenerate (:func:`hf_dr.labeling.pseudo_relevance.build_pseudo_labels`).
    """

    def __init__(self, bm25, encoder=None, weights: Sequence[float] = (1.0, 1.0), batch_size: int = 32,
                 doc_embeddings: np.ndarray | None = None, encoder_name: str | None = None,
                 reference_size: int = FUSION_REFERENCE_SIZE, reference_seed: int = 0):
        if bm25 is None or (encoder is None and doc_embeddings is None):
            raise ValueError("the fusion reranker needs a BM25 index and a dense model (--dense-model)")
        if isinstance(reference_size, bool) or not isinstance(reference_size, (int, np.integer)) or reference_size < 1:
            raise ValueError(f"reference_size must be a positive whole number (got {reference_size!r})")
        from ..st_encoder import as_encoder

        encoder = as_encoder(encoder)
        self.bm25, self.encoder, self.weights, self.batch_size = bm25, encoder, tuple(weights), batch_size
        self.doc_embeddings = doc_embeddings
        self.reference_size, self.reference_seed = int(reference_size), int(reference_seed)
        self.query_embeddings: dict[str, np.ndarray] = {}
        self._index_of = {d: i for i, d in enumerate(bm25.doc_ids)}
        self.name = f"fusion(bm25,{encoder_name or type(encoder).__name__},w={list(self.weights)})"

    @staticmethod
    def normalisation_of(reference_size: int, reference_seed: int = 0) -> dict:
        """What the scale depends on besides the models (part of the pipeline's cache key)."""
        return {"zscore_over": "bm25 list topped up with a corpus sample", "reference_size": int(reference_size),
                "reference_seed": int(reference_seed)}

    @property
    def normalisation(self) -> dict:
        return self.normalisation_of(self.reference_size, self.reference_seed)

    @staticmethod
    def bound_of(weights: Sequence[float], reference_size: int, n_docs: int) -> float:
        """``2 * sum|w| * sqrt(n - 1)``, ``n = min(reference_size, n_docs)`` the reference set's
        size: the widest margin between two members of the reference set (the z-score of each
        lies within ``±sqrt(n - 1)``, Samuelson's inequality)."""
        n = max(2, min(int(reference_size), int(n_docs)))
        return 2.0 * float(sum(abs(w) for w in weights)) * float(np.sqrt(n - 1))

    @property
    def margin_bound(self) -> float:
        return self.bound_of(self.weights, self.reference_size, len(self.bm25.doc_ids))

    def _doc_emb(self) -> np.ndarray:
        if self.doc_embeddings is None:
            raise ValueError("FusionReranker: no corpus embeddings; the pipeline sets them (or pass doc_embeddings=)")
        return self.doc_embeddings

    def _query_emb(self, query_id: str, query: str) -> np.ndarray:
        if query_id not in self.query_embeddings:
            self.query_embeddings[query_id] = self.encoder.encode_queries([query])[0]
        return self.query_embeddings[query_id]

    def score(self, query: str, docs: Sequence[str]) -> np.ndarray:
        raise TypeError("the fusion reranker scores corpus documents: use score_documents(query_id, query, doc_ids)")

    def _raw(self, query_id, query, doc_ids):
        idx = np.array([self._index_of[d] for d in doc_ids], dtype=np.int64)
        lex = np.asarray(self.bm25.score(query, idx), dtype=np.float64)
        dense = self._doc_emb()[idx].astype(np.float64) @ self._query_emb(query_id, query).astype(np.float64)
        return lex, dense

    def reference_ids(self, query_id: str, candidates: Sequence[str]) -> list[str]:
        """The query's reference set: its candidates, then (when fewer than ``reference_size``)
        other corpus documents drawn without replacement by a generator seeded with
        ``(reference_seed, sha1(query_id))`` — the same set on every call and every machine."""
        cand = list(dict.fromkeys(candidates))
        n = len(self.bm25.doc_ids)
        need = min(self.reference_size, n) - len(cand)
        if need <= 0:
            return cand
        qseed = int.from_bytes(hashlib.sha1(str(query_id).encode()).digest()[:8], "little")
        rng = np.random.default_rng([self.reference_seed, qseed])
        listed = set(cand)
        # need + len(cand) <= n distinct draws hold at least `need` documents outside the list
        draw = rng.choice(n, size=need + len(cand), replace=False)
        extra = [d for d in (self.bm25.doc_ids[i] for i in draw) if d not in listed][:need]
        return cand + extra

    def score_documents(self, query_id, query, doc_ids, candidates=None) -> np.ndarray:
        doc_ids = list(doc_ids)
        if not doc_ids:
            return np.zeros(0)
        ref_ids = self.reference_ids(query_id, list(candidates) if candidates else doc_ids)
        ref_lex, ref_dense = self._raw(query_id, query, ref_ids)
        if doc_ids == ref_ids:  # the (full) candidate list itself: the spine's fusion over it
            lex, dense = ref_lex, ref_dense
        elif set(doc_ids) <= set(ref_ids):
            pos = {d: i for i, d in enumerate(ref_ids)}
            at = np.array([pos[d] for d in doc_ids], dtype=np.int64)
            lex, dense = ref_lex[at], ref_dense[at]
        else:
            lex, dense = self._raw(query_id, query, doc_ids)
        q = query_id
        runs = [{q: dict(zip(doc_ids, lex.tolist()))}, {q: dict(zip(doc_ids, dense.tolist()))}]
        refs = [{q: dict(zip(ref_ids, ref_lex.tolist()))}, {q: dict(zip(ref_ids, ref_dense.tolist()))}]
        fused = fuse(runs, weights=self.weights, method="zscore", references=refs)[q]
        return np.array([fused[d] for d in doc_ids], dtype=np.float64)

    def rerank(self, candidates: Run, queries: Mapping[str, str], show_progress_bar: bool = True) -> Run:
        missing = [q for q in candidates if q not in self.query_embeddings]
        if missing and self.encoder is not None:  # one batched pass over the queries
            emb = self.encoder.encode_queries([queries[q] for q in missing], batch_size=self.batch_size)
            self.query_embeddings.update(zip(missing, emb))
        return super().rerank(candidates, queries, show_progress_bar)

