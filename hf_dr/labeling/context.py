"""What every stage of one labelling run reads (:class:`LabelContext`), and the cache keys of its
stages (:class:`LabelKeys`): each key holds the content its stage depends on, not a path or a
name — the corpus texts, the query texts, the dense model's weights and configuration, the
teacher's identity, the parameters. ``hf-dr adapt`` reuses the corpus encoding of the label stage
through :meth:`LabelKeys.dense_of` (one definition of that key, on both sides)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..stage_cache import StageCache, digest
from .teacher import Teacher

__all__ = ["LabelKeys", "LabelContext", "DOC_EMBEDDINGS_STAGE"]

#: the stage (a :class:`~hf_dr.stage_cache.StageCache` entry) holding the corpus encoded by the dense model
DOC_EMBEDDINGS_STAGE = "doc_embeddings"


@dataclass(frozen=True)
class LabelKeys:
    """The cache keys of a run's stages (the triplets' key is :meth:`LabelContext.triplets_key`)."""

    corpus: dict  # {"corpus": the corpus fingerprint}
    queries: dict  # {"queries": the digest of the labelled queries' ids and texts}
    bm25: dict
    dense: dict  # the corpus encoding by the dense model (DOC_EMBEDDINGS_STAGE)
    query_embeddings: dict
    rerank: dict

    @staticmethod
    def dense_of(corpus_fingerprint: str, model_fingerprint: str | None, max_length: int | None,
                 dtype: str | None) -> dict:
        """The key of the corpus encoded by the model of ``model_fingerprint`` at ``max_length``
        in ``dtype`` (``fp32``, the CPU default, keeps the keys of before)."""
        return {"corpus": corpus_fingerprint, "model": model_fingerprint, "max_length": max_length,
                **({"dtype": dtype} if dtype not in (None, "fp32") else {})}

    @classmethod
    def of(cls, *, config, teacher: Teacher, queries: Mapping[str, str], qids: list, sources: Mapping | None,
           corpus_fp: str, dense_fp: str | None, dense_dtype: str | None, bm25_params=None) -> LabelKeys:
        """The keys of a run (``bm25_params``: a given index's parameters, when not the defaults)."""
        corpus = {"corpus": corpus_fp}
        query_key = {"queries": digest([(q, queries[q]) for q in qids])}
        bm25 = {**corpus, **query_key, "bm25_top": config.bm25_top,
                **({"bm25": bm25_params} if bm25_params is not None else {})}
        dense = cls.dense_of(corpus_fp, dense_fp, config.dense_max_length, dense_dtype)
        dtype = {k: v for k, v in dense.items() if k == "dtype"}
        query_emb = {**query_key, "model": dense_fp, "max_length": config.dense_max_length, **dtype}
        ident = teacher.identity()
        normalisation = teacher.normalisation(config.bm25_top)
        if normalisation is not None:
            ident["normalisation"] = normalisation
        rerank = {**bm25, "reranker": ident, **({"dense": dense} if teacher.is_fusion else {}),
                  **({"sources": digest([(q, sources.get(q)) for q in qids])} if sources else {})}
        return cls(corpus, query_key, bm25, dense, query_emb, rerank)

    def dense_run(self, top_k: int) -> dict:
        return {**self.dense, **self.queries, "top_k": top_k}


@dataclass
class LabelContext:
    """One labelling run: its inputs, its keys, and what each stage leaves for the next ones."""

    data: Any  # hf_dr.data.BeirData (its corpus)
    config: Any  # the validated PseudoLabelConfig (simans_score_scale resolved)
    teacher: Teacher
    dense_encoder: Any
    dense_name: str | None
    queries: dict  # {qid: text}
    qids: list  # the queries labelled (max_queries of them)
    sources: dict | None  # {qid: the document it was made from}
    cache: StageCache
    out: Path
    protected: list  # inputs an --overwrite never deletes
    doc_ids: list
    texts: Any
    keys: LabelKeys
    corpus_fp: str
    dense_fp: str | None
    dense_dtype: str | None
    doc_embeddings: Any = None  # an embeddings folder of the corpus by the dense model, or None
    show_progress_bar: bool = True
    bm25: Any = None  # the BM25 index (built when first needed)
    # what the stages leave: candidates -> rerank -> dense run -> dev split
    bm25_run: dict = field(default_factory=dict)
    no_hits: list = field(default_factory=list)
    labelled: list = field(default_factory=list)
    sources_added: int = 0
    reranked: dict = field(default_factory=dict)
    dense_run: dict | None = None
    dev_q: list = field(default_factory=list)
    train_q: list = field(default_factory=list)
    _lazy: dict = field(default_factory=dict, repr=False)

    @property
    def index_of(self) -> dict[str, int]:
        if "index_of" not in self._lazy:
            self._lazy["index_of"] = {d: i for i, d in enumerate(self.doc_ids)}
        return self._lazy["index_of"]

    @property
    def need(self) -> int:
        """The BM25 candidates a query needs for its labels (k + m)."""
        return self.config.k + self.config.m

    def text(self, doc_id: str) -> str:
        return self.texts[self.index_of[doc_id]]

    def bm25_index(self):
        """The BM25 index of the corpus (the given one, else built on first use)."""
        if self.bm25 is None:
            from ..retrieval import BM25Index

            self.bm25 = BM25Index(self.doc_ids, self.texts)
        return self.bm25

    def doc_emb(self) -> np.ndarray:
        """The corpus encoded by the dense model (one encoding, shared by the fusion teacher and SimANS)."""
        if "docs" not in self._lazy:
            self._lazy["docs"] = self.cache.array(DOC_EMBEDDINGS_STAGE, self.keys.dense, self._encode_docs)
        return self._lazy["docs"]

    def _encode_docs(self):
        cfg = self.config
        if self.doc_embeddings is None:
            return self.dense_encoder.encode_corpus(self.texts, batch_size=cfg.batch_size,
                                                    show_progress_bar=self.show_progress_bar,
                                                    max_length=cfg.dense_max_length)
        from ..embeddings import Embeddings

        folder = self.doc_embeddings if isinstance(self.doc_embeddings, Embeddings) else Embeddings(self.doc_embeddings)
        folder.check(self.dense_encoder, doc_ids=self.doc_ids, max_length=cfg.dense_max_length,
                     corpus_fingerprint=self.corpus_fp)
        if folder.is_sparse:
            raise ValueError(f"{folder.path} holds sparse vectors: the pipeline's dense retriever needs dense ones")
        return folder.matrix()

    def query_emb(self) -> Mapping[str, np.ndarray]:
        """``{qid: the query encoded by the dense model}``."""
        if "queries" not in self._lazy:
            texts = [self.queries[q] for q in self.qids]
            arr = self.cache.array("query_embeddings", self.keys.query_embeddings,
                                   lambda: self.dense_encoder.encode_queries(texts, batch_size=self.config.batch_size))
            self._lazy["queries"] = dict(zip(self.qids, arr))
        return self._lazy["queries"]

    def reranker(self):
        """The teacher, built on first use, with the corpus (and the dense encodings) it reads."""
        if "reranker" not in self._lazy:
            self._lazy["reranker"] = self.teacher.build(
                bm25=self.bm25_index(), encoder=self.dense_encoder, encoder_name=self.dense_name,
                batch_size=self.config.batch_size, bm25_top=self.config.bm25_top)
        r = self._lazy["reranker"]
        if hasattr(r, "query_embeddings") and getattr(r, "doc_embeddings", 0) is None:
            r.doc_embeddings = self.doc_emb()
            r.query_embeddings.update(self.query_emb())
        if getattr(r, "texts", None) is None and hasattr(r, "set_corpus"):
            r.set_corpus(self.doc_ids, self.texts)
        return r

    def triplets_key(self) -> dict:
        """The triplet stage's key: the reranked run's, the parameters, the rule, the dense run's model."""
        from dataclasses import asdict

        from .degenerate import DEGENERATE_RULE_VERSION

        cfg = {k: v for k, v in asdict(self.config).items() if k not in ("batch_size", "split")}
        return {**self.keys.rerank, "cfg": cfg, "degenerate_rule": DEGENERATE_RULE_VERSION,
                "dense": self.keys.dense if self.dense_run is not None else None}

