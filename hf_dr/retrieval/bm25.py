"""BM25 over any corpus, by bm25s (Lucene scoring by default) — the only BM25 of hf-dr; saved and
opened memory-mapped with bm25s' own ``save`` / ``load(mmap=True)`` (:meth:`BM25Index.save` /
:meth:`BM25Index.load`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from .run import Run, id_sequence, run_from_scores

__all__ = ["BM25Index", "import_bm25s", "check_stemmer", "check_stopwords", "stemmer_names"]


def import_bm25s():
    """``import bm25s``, undoing its ``logging.getLogger("bm25s").setLevel(DEBUG)`` (which prints
    "DEBUG bm25s: Building index..." through any configured handler): its logger inherits the
    application's level again, so the messages show only under debug logging (``hf-dr -v``)."""
    import bm25s

    log = logging.getLogger("bm25s")
    if log.level == logging.DEBUG:
        log.setLevel(logging.NOTSET)
    return bm25s


def stemmer_names() -> list[str]:
    """PyStemmer's languages (``english``, ``french``, ``porter``...)."""
    import Stemmer

    return sorted(Stemmer.algorithms())


def check_stemmer(name: str | None) -> str | None:
    """``name`` when PyStemmer knows it (``None`` / ``"none"``: no stemming); else ``ValueError``
    listing some valid names."""
    if name is None or str(name).lower() in ("none", ""):
        return None
    names = stemmer_names()
    if name not in names:
        common = [n for n in ("english", "porter", "french", "german", "spanish") if n in names]
        raise ValueError(f"unknown stemmer {name!r}: use none or a PyStemmer language, e.g. {', '.join(common)} "
                         f"({len(names)} in all: {', '.join(names)})")
    return name


def check_stopwords(stopwords: str | list[str] | None) -> str | list[str] | None:
    """``stopwords`` when bm25s knows them (``"en"``, ``"de"``, ``"french"``..., a list, or
    ``None`` / ``"none"``); else ``ValueError`` naming the value."""
    if stopwords is None or (isinstance(stopwords, str) and stopwords.lower() in ("none", "")):
        return None
    if isinstance(stopwords, str):
        bm25s = import_bm25s()
        try:
            bm25s.tokenize(["x"], stopwords=stopwords, show_progress=False)
        except ValueError:
            raise ValueError(f"unknown stopwords {stopwords!r}: use none, en, de, nl, fr, es, pt, it, ru, sv, no, "
                             "zh, tr, ko or da (or a list of words)") from None
    return stopwords


#: BM25Index's parameters by default (a labelling cache key names the parameters only when they differ)
DEFAULT_PARAMS = {"stemmer": "english", "stopwords": "en", "k1": 1.5, "b": 0.75, "method": "lucene"}


class BM25Index:
    """Lexical index built with `bm25s <https://github.com/xhluca/bm25s>`_.

    Args:
        doc_ids: ids of the documents, in the order of ``texts`` (a list, or any sequence such as a
            saved index's memory-mapped :class:`~hf_dr.retrieval.saved.DocIds`).
        texts: document texts (BEIR: ``title + " " + text``), any iterable: read once, lazily.
        stemmer: a PyStemmer language (``"english"``) or ``None`` for no stemming.
        stopwords: ``"en"``, a list of words, or ``None``.
        k1, b, method: BM25 parameters (``method`` one of bm25s' lucene, robertson, atire, bm25l, bm25+).
    """

    #: bm25s' own files of a saved index, in ``folder/BM25S_DIR``
    BM25S_DIR = "bm25s"

    def __init__(self, doc_ids: Sequence[str], texts: Iterable[str], *, stemmer: str | None = "english",
                 stopwords: str | list[str] | None = "en", k1: float = 1.5, b: float = 0.75,
                 method: str = "lucene", show_progress_bar: bool = False):
        bm25s = import_bm25s()

        self._setup(doc_ids, stemmer, stopwords, k1, b, method)
        if isinstance(texts, str):
            raise TypeError("texts must be an iterable of documents, not one string")
        tokens = bm25s.tokenize(texts, stopwords=self.stopwords, stemmer=self._stemmer, show_progress=show_progress_bar)
        n = len(tokens.ids)
        if len(self.doc_ids) != n:
            raise ValueError(f"{len(self.doc_ids)} ids for {n} texts")
        if not n:
            raise ValueError("cannot index an empty corpus")
        if not tokens.vocab:
            raise ValueError(f"none of the {n} documents has a term to index (words of two or more "
                             "letters or digits that are not stop words): BM25 has nothing to search")
        self.retriever = bm25s.BM25(k1=k1, b=b, method=method)
        self.retriever.index(tokens, show_progress=show_progress_bar)

    @classmethod
    def analyzer(cls, stemmer: str | None = "english", stopwords: str | list[str] | None = "en") -> BM25Index:
        """An index of no document, for its :meth:`words` only: the terms an index with these
        settings (by default, :data:`DEFAULT_PARAMS`'s) makes of a text. It searches nothing."""
        self = cls.__new__(cls)
        self._setup([], stemmer, stopwords, DEFAULT_PARAMS["k1"], DEFAULT_PARAMS["b"], DEFAULT_PARAMS["method"])
        return self

    def _setup(self, doc_ids, stemmer, stopwords, k1, b, method) -> None:
        self._bm25s = import_bm25s()
        self.doc_ids = id_sequence(doc_ids)
        self.stopwords = check_stopwords(stopwords)
        self.stemmer = check_stemmer(stemmer)
        self._stemmer = None
        if self.stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(self.stemmer)
        self.params = {"stemmer": self.stemmer, "stopwords": self.stopwords, "k1": float(k1), "b": float(b),
                       "method": method}

    def save(self, folder: str | Path) -> Path:
        """Write the index with bm25s' own ``save`` into ``folder/bm25s`` and its tokenisation
        (stemmer, stop words) beside (the ids and the manifest are the caller's:
        :func:`hf_dr.retrieval.saved.save_bm25_index`)."""
        folder = Path(folder)
        self.retriever.save(str(folder / self.BM25S_DIR), show_progress=False)
        (folder / "bm25.json").write_text(json.dumps(self.params))
        return folder

    @classmethod
    def load(cls, folder: str | Path, doc_ids: Sequence[str], *, mmap: bool = True) -> BM25Index:
        """Open a saved index with bm25s' own ``load`` (``mmap``: its score arrays memory-mapped),
        nothing re-indexed."""
        folder = Path(folder)
        params = json.loads((folder / "bm25.json").read_text())
        self = cls.__new__(cls)
        self._setup(doc_ids, params["stemmer"], params["stopwords"], params["k1"], params["b"], params["method"])
        self.retriever = self._bm25s.BM25.load(str(folder / self.BM25S_DIR), mmap=mmap, load_corpus=False,
                                               show_progress=False)
        # plain ndarray views of the memory-mapped arrays (no copy: still the file's pages), so that each
        # slice a query takes is a plain ndarray slice, not a Python-level np.memmap.__getitem__ call
        for key in ("data", "indices", "indptr"):
            self.retriever.scores[key] = np.asarray(self.retriever.scores[key])
        n = self.retriever.scores["num_docs"]
        if n != len(self.doc_ids):
            raise ValueError(f"{folder} indexes {n} documents for {len(self.doc_ids)} ids")
        return self

    @classmethod
    def from_beir(cls, data, **kwargs) -> BM25Index:
        """Index a :class:`hf_dr.data.BeirData` corpus (its texts read lazily from the dataset)."""
        return cls(data.doc_ids(), (t for _, t in data.iter_docs()), **kwargs)

    def __len__(self) -> int:
        return len(self.doc_ids)

    def search(self, queries: Mapping[str, str], top_k: int = 1000, show_progress_bar: bool = False,
               n_threads: int = 0) -> Run:
        """BM25 top-``top_k`` for each query. A query with no indexed term gets an empty ranking.

        bm25s' score matrix (a BM25 score per document and term, CSC ``[n_docs, |V|]``) read as
        posting lists (CSR ``[|V|, n_docs]``: the same three arrays, memory-mapped for a saved index)
        is searched by the one exact inverted-index search, :class:`~hf_dr.retrieval.SparseIndex`:
        each query (its tokens) against the postings of its terms only — never a score per document
        of the corpus. A document's score adds its terms' scores in the query's token order, in float32,
        as bm25s' own ``get_scores`` does: the scores are bm25s' to the bit; at the k-th score the
        first documents in corpus order are kept (bm25s keeps an arbitrary few). BM25 variants with
        a score for absent terms (bm25l, bm25+) go through bm25s' ``retrieve``."""
        qids = list(queries)
        if not qids:
            return {}
        k = min(top_k, len(self.doc_ids))
        tokens = self._bm25s.tokenize([queries[q] for q in qids], stopwords=self.stopwords,
                                      stemmer=self._stemmer, show_progress=False, return_ids=False)
        vocab = self.retriever.vocab_dict
        tokens = [[t for t in toks if t in vocab] for toks in tokens]
        run: Run = {q: {} for q in qids}
        keep = [i for i, t in enumerate(tokens) if t]
        if not keep:
            return run
        if getattr(self.retriever, "nonoccurrence_array", None) is None:
            import scipy.sparse as sp

            ids = [vocab[t] for i in keep for t in tokens[i]]  # in token order, repeats kept (as bm25s adds them)
            indptr = np.concatenate([[0], np.cumsum([len(tokens[i]) for i in keep])])
            Q = sp.csr_matrix((np.ones(len(ids), np.float32), np.asarray(ids, np.int64), indptr),
                              shape=(len(keep), self._postings().vocab_size))
            run.update(self._postings().search(Q, [qids[i] for i in keep], top_k=k, canonical=False))
            return run
        docs, scores = self.retriever.retrieve([tokens[i] for i in keep], k=k, show_progress=show_progress_bar,
                                               n_threads=n_threads, return_as="tuple")
        docs = np.asarray(docs)
        scores = np.asarray(scores)
        # bm25s pads with zero-score hits when fewer than k documents match: drop them
        docs = np.where(scores > 0, docs, -1)
        run.update(run_from_scores(scores, docs, [qids[i] for i in keep], self.doc_ids))
        return run

    def _postings(self):
        """bm25s' score matrix as a :class:`~hf_dr.retrieval.SparseIndex` (made once, no copy)."""
        if getattr(self, "_sparse", None) is None:
            import scipy.sparse as sp

            from .sparse import SparseIndex

            sc = self.retriever.scores
            P = sp.csr_matrix((sc["data"], sc["indices"], sc["indptr"]),
                              shape=(len(sc["indptr"]) - 1, int(sc["num_docs"])), copy=False)
            self._sparse = SparseIndex.from_postings(P, self.doc_ids)
        return self._sparse

    def words(self, texts: list[str]) -> tuple[list[list[str]], list[list[str]]]:
        """(words, their terms) of each text as the index tokenises it: bm25s' words less its stop
        words, and each word's stem (the word itself without a stemmer): the index's terms."""
        words = self._bm25s.tokenize(texts, stopwords=self.stopwords, stemmer=None, show_progress=False,
                                     return_ids=False)
        return words, [self._stemmer.stemWords(w) if self._stemmer else list(w) for w in words]

    def document_weights(self):
        """Each document's terms and their BM25 weights, the scores its postings hold (bm25s' score
        matrix, document-major; made once): ``(W, terms)`` with ``W`` a SciPy CSR matrix (documents x
        vocabulary, rows in ``doc_ids`` order, float32) and ``terms`` the vocabulary's stems by column."""
        if getattr(self, "_by_doc", None) is None:
            W = self._postings().postings.T.tocsr()
            terms = [""] * W.shape[1]
            for term, i in self.retriever.vocab_dict.items():
                if i < len(terms):  # (bm25s' vocabulary ends with "", which has no postings)
                    terms[i] = term
            self._by_doc = (W, terms)
        return self._by_doc

    def score(self, query: str, doc_indices: Sequence[int] | None = None) -> np.ndarray:
        """BM25 scores of one query against all (or the given) documents."""
        toks = self._bm25s.tokenize([query], stopwords=self.stopwords, stemmer=self._stemmer,
                                    show_progress=False, return_ids=False)[0]
        toks = [t for t in toks if t in self.retriever.vocab_dict]
        s = self.retriever.get_scores(toks) if toks else np.zeros(len(self.doc_ids), dtype=np.float32)
        return s if doc_indices is None else s[np.asarray(doc_indices)]
