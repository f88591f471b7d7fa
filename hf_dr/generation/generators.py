"""Query generators: one name, one generator (:func:`get_generator`).

A generator makes ``n`` queries for each document of a batch (:meth:`QueryGenerator.generate`),
deterministically: the weight-free ones draw from a generator seeded by ``(seed, doc id)``, so a
document's queries do not depend on the batch or the process it falls in; ``doc2query`` seeds its
sampling by ``(seed, the batch's first doc id)`` (a batch is fixed by the shard layout, which the
folder's plan records).

* ``cloze`` — a sentence of the document (the inverse cloze task, Lee et al. 2019; the title counts
  as a sentence), at most :data:`MAX_WORDS` words (a window of a longer one);
* ``span`` — a random span of 4 to 16 words of the document (a short Contriever-style crop);
* ``terms`` — 3 to 8 distinct terms of the document drawn without replacement with probability
  proportional to their BM25 weight in it (the one BM25 of hf-dr: :mod:`hf_dr.retrieval.bm25`'s
  tokenisation, stemmer, stop words and Lucene IDF, computed over the corpus in a first pass),
  written in document order;
* ``doc2query:ID`` — any seq2seq model (a Hub id or a folder; GPL's is
  ``BeIR/query-gen-msmarco-t5-base-v1``): top-p (0.95) / top-k (25) sampling of at most 64 tokens,
  ``n`` sequences per document, batched, on the GPU when there is one (as GPL / BEIR's QGen do).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["QueryGenerator", "get_generator", "check_generator", "generator_names", "doc_seed", "WEIGHT_FREE",
           "DEFAULT_GENERATOR", "MAX_WORDS"]

#: the generators that need no model weights (work offline and on the CPU)
WEIGHT_FREE = ("cloze", "span", "terms")
#: the default generator, chosen by training (benchmarks/corpus_only.py, docs/adapt.md): after the same
#: corpus-only run, span queries left all-MiniLM-L6-v2 the best of the three on SciFact (0.573 vs cloze
#: 0.542, terms 0.532, at lr 2e-5), and at lr 2e-6 gained on ArguAna; the proxy's pick, terms, did not
#: survive training
DEFAULT_GENERATOR = "span"
#: the longest query a weight-free generator writes, in words
MAX_WORDS = 32


def doc_seed(seed: int, key: str) -> list[int]:
    """The seed sequence of ``(seed, key)``: ``key``'s sha1 as an integer (the same on every machine)."""
    return [int(seed), int.from_bytes(hashlib.sha1(str(key).encode()).digest()[:8], "little")]


class QueryGenerator:
    """Makes queries from documents. ``identity()`` says what its output depends on (a folder's plan
    and the adapt cache key hold it); ``fit(doc_ids, texts)`` reads the corpus once before generating
    (``terms``)."""

    name = ""
    needs_fit = False

    def identity(self) -> dict:
        return {"generator": self.name}

    def fit(self, doc_ids: Sequence[str], texts: Iterable[str]) -> None:  # pragma: no cover - reads nothing
        pass

    def generate(self, doc_ids: Sequence[str], titles: Sequence[str], texts: Sequence[str], n: int,
                 seed: int) -> list[list[str]]:
        """``n`` queries for each document (a query that would be empty is ``""``: dropped by the caller)."""
        return [self.one(d, t, x, n, np.random.default_rng(doc_seed(seed, d)))
                for d, t, x in zip(doc_ids, titles, texts)]

    def one(self, doc_id: str, title: str, text: str, n: int, rng: np.random.Generator) -> list[str]:
        raise NotImplementedError


def _draw(items: list, n: int, rng: np.random.Generator) -> list:
    """``n`` of ``items``: without replacement while they last, then again from a fresh permutation."""
    out: list = []
    while len(out) < n and items:
        out += [items[i] for i in rng.permutation(len(items))[: n - len(out)]]
    return out


def _window(words: list[str], rng: np.random.Generator, most: int = MAX_WORDS) -> str:
    if len(words) > most:
        start = int(rng.integers(0, len(words) - most + 1))
        words = words[start:start + most]
    return " ".join(words)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'])")


class ClozeGenerator(QueryGenerator):
    name = "cloze"

    def one(self, doc_id, title, text, n, rng):
        sentences = [s.split() for s in ([title] if title.strip() else []) + _SENTENCE_END.split(text.strip())]
        sentences = [s for s in sentences if len(s) >= 3] or [s for s in sentences if s]
        return [_window(s, rng) for s in _draw(sentences, n, rng)]


class SpanGenerator(QueryGenerator):
    name = "span"
    shortest, longest = 4, 16

    def one(self, doc_id, title, text, n, rng):
        words = (title + " " + text).split()
        out = []
        for _ in range(n):
            length = int(rng.integers(self.shortest, self.longest + 1))
            start = int(rng.integers(0, max(1, len(words) - length + 1)))
            out.append(" ".join(words[start:start + length]))
        return out


class TermsGenerator(QueryGenerator):
    """Terms drawn by their BM25 weight in the document: the score the document's posting of the term
    holds in a :class:`~hf_dr.retrieval.BM25Index` of the corpus (built by :meth:`fit`; read with
    :meth:`~hf_dr.retrieval.BM25Index.document_weights`), so the weights are hf-dr's one BM25's."""

    name = "terms"
    needs_fit = True
    shortest, longest = 3, 8

    def __init__(self):
        from ..retrieval.bm25 import DEFAULT_PARAMS

        self.params = DEFAULT_PARAMS
        self.index = None
        self._row: dict[str, int] = {}

    def identity(self) -> dict:
        return {"generator": self.name, "bm25": self.params, "lengths": [self.shortest, self.longest]}

    def fit(self, doc_ids: Sequence[str], texts: Iterable[str]) -> None:
        """Index the corpus (``texts`` in the order of ``doc_ids``: BEIR's ``title + " " + text``)."""
        from ..retrieval.bm25 import BM25Index

        p = self.params
        self.index = BM25Index(doc_ids, texts, stemmer=p["stemmer"], stopwords=p["stopwords"], k1=p["k1"], b=p["b"],
                               method=p["method"])
        self._row = {str(d): i for i, d in enumerate(doc_ids)}

    def generate(self, doc_ids, titles, texts, n, seed):
        if self.index is None:
            raise RuntimeError("TermsGenerator.fit(doc ids, corpus texts) first")
        weights, vocab = self.index.document_weights()
        words, stems = self.index.words([(t + " " + x).strip() for t, x in zip(titles, texts)])
        out = []
        for d, w, s in zip(doc_ids, words, stems):
            rng = np.random.default_rng(doc_seed(seed, d))
            row = self._row.get(str(d))
            if row is None:
                raise KeyError(f"document {d!r} is not in the corpus TermsGenerator.fit indexed")
            lo, hi = weights.indptr[row], weights.indptr[row + 1]
            weight_of = {vocab[j]: float(v) for j, v in zip(weights.indices[lo:hi], weights.data[lo:hi])}
            surface = {}
            for word, st in zip(w, s):
                if st in weight_of:
                    surface.setdefault(st, word)
            terms = list(surface)  # in document order
            if not terms:
                out.append([""] * n)
                continue
            weight = np.maximum(np.array([weight_of[t] for t in terms]), 1e-12)
            p = weight / weight.sum()
            queries = []
            for _ in range(n):
                length = min(int(rng.integers(self.shortest, self.longest + 1)), len(terms))
                chosen = sorted(rng.choice(len(terms), size=length, replace=False, p=p))
                queries.append(" ".join(surface[terms[i]] for i in chosen))
            out.append(queries)
        return out


class Doc2QueryGenerator(QueryGenerator):
    """A seq2seq model's sampled queries (T5 doc2query as GPL uses it)."""

    needs_fit = False
    top_p, top_k, max_new_tokens, max_doc_length = 0.95, 25, 64, 350

    def __init__(self, model_id: str, device=None):
        self.model_id = model_id
        self.name = f"doc2query:{model_id}"
        self.device = device
        self._model = None
        self._tokenizer = None

    def identity(self) -> dict:
        from ..fingerprints import folder_fingerprint

        p = Path(self.model_id).expanduser()
        ident = {"generator": "doc2query", "top_p": self.top_p, "top_k": self.top_k,
                 "max_new_tokens": self.max_new_tokens, "max_doc_length": self.max_doc_length,
                 "device": self._device().type}
        ident["model"] = folder_fingerprint(p) if p.exists() else self.model_id
        return ident

    def _device(self):
        from ..encoding import resolve_device

        return resolve_device(self.device)

    def load(self):
        if self._model is None:
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

            from ..data.beir import looks_local

            if looks_local(self.model_id) and not Path(self.model_id).expanduser().is_dir():
                raise ValueError(f"doc2query:{self.model_id}: no such model folder")
            try:
                self._tokenizer = AutoTokenizer.from_pretrained(self.model_id)
                self._model = AutoModelForSeq2SeqLM.from_pretrained(self.model_id)
            except (OSError, ValueError) as e:
                raise ValueError(f"doc2query:{self.model_id}: cannot load a seq2seq model and its tokenizer "
                                 f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
            self._model.to(self._device()).eval()
        return self._model, self._tokenizer

    def generate(self, doc_ids, titles, texts, n, seed):
        import torch

        model, tok = self.load()
        dev = self._device()
        joined = [(t + " " + x).strip() for t, x in zip(titles, texts)]
        enc = tok(joined, padding=True, truncation=True, max_length=self.max_doc_length, return_tensors="pt")
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []), torch.inference_mode():
            torch.manual_seed(doc_seed(seed, doc_ids[0])[1] ^ int(seed))
            outputs = model.generate(input_ids=enc["input_ids"].to(dev), attention_mask=enc["attention_mask"].to(dev),
                                     do_sample=True, top_p=self.top_p, top_k=self.top_k,
                                     max_new_tokens=self.max_new_tokens, num_return_sequences=n)
        decoded = [" ".join(q.split()) for q in tok.batch_decode(outputs, skip_special_tokens=True)]
        return [decoded[i * n:(i + 1) * n] for i in range(len(doc_ids))]


def generator_names() -> str:
    return ", ".join(WEIGHT_FREE) + " or doc2query:ID (a seq2seq model id or folder)"


def check_generator(spec: str) -> str:
    """``spec`` when it names a generator; else ``ValueError`` listing them."""
    kind, sep, ident = str(spec).partition(":")
    if (kind in WEIGHT_FREE and not sep) or (kind == "doc2query" and ident):
        return spec
    if kind == "doc2query":
        raise ValueError(f"--generator {spec!r}: doc2query needs a model, e.g. doc2query:BeIR/query-gen-msmarco-t5-base-v1")
    raise ValueError(f"unknown generator {spec!r}: use {generator_names()}")


def get_generator(spec: str, device=None) -> QueryGenerator:
    """The generator ``spec`` names (:func:`check_generator`)."""
    check_generator(spec)
    kind, _, ident = spec.partition(":")
    if kind == "doc2query":
        return Doc2QueryGenerator(ident, device=device)
    return {"cloze": ClozeGenerator, "span": SpanGenerator, "terms": TermsGenerator}[kind]()
