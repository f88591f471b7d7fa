"""BM25 over any corpus, by bm25s (Lucene scoring by default) — the only BM25 of hf-dr."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .run import Run, run_from_scores

__all__ = ["BM25Index"]


class BM25Index:
    """Lexical index built with `bm25s <https://github.com/xhluca/bm25s>`_.

    Args:
        doc_ids: ids of the documents, in the order of ``texts``.
        texts: document texts (BEIR: ``title + " " + text``).
        stemmer: a PyStemmer language (``"english"``) or ``None`` for no stemming.
        stopwords: ``"en"``, a list of words, or ``None``.
        k1, b, method: BM25 parameters (``method`` one of bm25s' lucene, robertson, atire, bm25l, bm25+).
    """

    def __init__(self, doc_ids: Sequence[str], texts: Sequence[str], *, stemmer: str | None = "english",
                 stopwords: str | list[str] | None = "en", k1: float = 1.5, b: float = 0.75,
                 method: str = "lucene", show_progress_bar: bool = False):
        import bm25s

        doc_ids = [str(d) for d in doc_ids]
        texts = list(texts)
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} ids for {len(texts)} texts")
        if not texts:
            raise ValueError("cannot index an empty corpus")
        self.doc_ids = doc_ids
        self.stopwords = stopwords
        self._stemmer = None
        if stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(stemmer)
        self._bm25s = bm25s
        tokens = bm25s.tokenize(texts, stopwords=stopwords, stemmer=self._stemmer, show_progress=show_progress_bar)
        self.retriever = bm25s.BM25(k1=k1, b=b, method=method)
        self.retriever.index(tokens, show_progress=show_progress_bar)

    @classmethod
    def from_beir(cls, data, **kwargs) -> BM25Index:
        """Index a :class:`hf_dr.data.BeirData` corpus."""
        return cls(data.doc_ids(), data.doc_texts(), **kwargs)

    def __len__(self) -> int:
        return len(self.doc_ids)

    def search(self, queries: Mapping[str, str], top_k: int = 1000, show_progress_bar: bool = False,
               n_threads: int = 0) -> Run:
        """BM25 top-``top_k`` for each query. A query with no indexed term gets an empty ranking."""
        qids = list(queries)
        if not qids:
            return {}
        k = min(top_k, len(self.doc_ids))
        tokens = self._bm25s.tokenize([queries[q] for q in qids], stopwords=self.stopwords,
                                      stemmer=self._stemmer, show_progress=False, return_ids=False)
        vocab = self.retriever.vocab_dict
        tokens = [[t for t in toks if t in vocab] for toks in tokens]
        has_terms = [bool(t) for t in tokens]
        run: Run = {q: {} for q in qids}
        keep = [i for i, h in enumerate(has_terms) if h]
        if keep:
            docs, scores = self.retriever.retrieve([tokens[i] for i in keep], k=k, show_progress=show_progress_bar,
                                                   n_threads=n_threads, return_as="tuple")
            docs = np.asarray(docs)
            scores = np.asarray(scores)
            # bm25s pads with zero-score hits when fewer than k documents match: drop them
            docs = np.where(scores > 0, docs, -1)
            run.update(run_from_scores(scores, docs, [qids[i] for i in keep], self.doc_ids))
        return run

    def score(self, query: str, doc_indices: Sequence[int] | None = None) -> np.ndarray:
        """BM25 scores of one query against all (or the given) documents."""
        toks = self._bm25s.tokenize([query], stopwords=self.stopwords, stemmer=self._stemmer,
                                    show_progress=False, return_ids=False)[0]
        toks = [t for t in toks if t in self.retriever.vocab_dict]
        s = self.retriever.get_scores(toks) if toks else np.zeros(len(self.doc_ids), dtype=np.float32)
        return s if doc_indices is None else s[np.asarray(doc_indices)]
