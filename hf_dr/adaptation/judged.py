"""The user's judged dev queries (``qrels/dev.tsv``) in ``hf-dr adapt``: split into two disjoint
halves by the seed, one that chooses the checkpoint and one that states the verdict
(:func:`split_judged`), each scored by full-corpus retrieval with the candidate model
(:meth:`JudgedDev.scores`: :func:`hf_dr.factory.evaluate_model`, the one evaluate path), never a
reranked pool that holds the judged documents.

A model's corpus encoding is made once and kept in the work folder's stage cache, keyed on the
corpus, the model's fingerprint, the max length and the precision (:func:`corpus_vectors`): the
selection half's evaluation of a checkpoint, the verdict half's of the chosen one and the test
split's evaluation of the same model (``stages.evaluate``) all read that one encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..stage_cache import StageCache, digest

__all__ = ["SELECT", "VERDICT", "SPLIT_SALT", "split_judged", "JudgedDev", "corpus_vectors", "cached_corpus_vectors"]

SELECT, VERDICT = "select", "verdict"
#: mixed with the run's seed for the split (a split of its own, not the draw of any other seeded step)
SPLIT_SALT = 40


def split_judged(qids, seed: int) -> tuple[list[str], list[str]]:
    """``(select, verdict)``: every query of ``qids`` in exactly one half, drawn by ``seed`` (the
    same ids and seed give the same halves, whatever their order). The selection half holds
    ``n // 2`` queries, the verdict half the rest (an odd one narrows the verdict's interval); a
    single query chooses and states nothing (verdict half empty)."""
    import numpy as np

    ids = sorted(dict.fromkeys(str(q) for q in qids))
    if len(ids) < 2:
        return ids, []
    order = np.random.default_rng([int(seed), SPLIT_SALT]).permutation(len(ids))
    shuffled = [ids[i] for i in order]
    half = len(ids) // 2
    return sorted(shuffled[:half]), sorted(shuffled[half:])


def _vectors_key(data, model, fingerprint: str, max_length: int) -> dict:
    from ..precision import dtype_name, encoding_dtype

    dt = dtype_name(encoding_dtype(model))
    return {"corpus": data.corpus_fingerprint(), "model": fingerprint, "max_length": max_length,
            **({"dtype": dt} if dt != "fp32" else {})}


def cached_corpus_vectors(cache: StageCache, data, model, fingerprint: str, max_length: int):
    """``(doc_ids, matrix)`` of ``data``'s corpus encoded by ``model`` (dense array or CSR) when
    :func:`corpus_vectors` has stored it; else None."""
    import numpy as np

    key = _vectors_key(data, model, fingerprint, max_length)
    dense, sparse = cache.path("corpus_vectors", key, ".npy"), cache.path("corpus_vectors", key, ".npz")
    if dense.is_file():
        return data.doc_ids(), np.load(dense, mmap_mode="r")
    if sparse.is_file():
        import scipy.sparse as sp

        return data.doc_ids(), sp.load_npz(sparse).tocsr()
    return None


def corpus_vectors(cache: StageCache, data, model, fingerprint: str, max_length: int,
                   show_progress_bar: bool | None = None):
    """``(doc_ids, matrix)``: ``data``'s corpus encoded by ``model`` through the one encode loop
    (:meth:`~hf_dr.encoding.EncoderMixin.iter_encode_corpus`), stored in ``cache`` the first time
    and read from it after."""
    found = cached_corpus_vectors(cache, data, model, fingerprint, max_length)
    if found is not None:
        return found
    import numpy as np

    from ..encoding import concat_blocks

    ids = data.doc_ids()
    texts = (t for _, t in data.iter_docs())
    if hasattr(model, "iter_encode_corpus"):
        mat = concat_blocks(list(model.iter_encode_corpus(texts, batch_size=32, max_length=max_length,
                                                          show_progress_bar=show_progress_bar, total=len(ids))))
    else:  # an encoder outside the suite
        mat = model.encode_corpus(list(texts), batch_size=32, max_length=max_length,
                                  show_progress_bar=show_progress_bar)
    key = _vectors_key(data, model, fingerprint, max_length)
    if hasattr(mat, "tocsr"):
        import scipy.sparse as sp

        p = cache.path("corpus_vectors", key, ".npz")
        tmp = p.with_name(p.stem + ".tmp.npz")
        sp.save_npz(tmp, mat.tocsr())
        tmp.replace(p)
        return ids, mat.tocsr()
    return ids, cache.array("corpus_vectors", key, lambda: np.asarray(mat, dtype=np.float32))


@dataclass
class JudgedDev:
    """The judged dev queries of a run: ``data`` (the corpus with ``qrels/dev.tsv``'s queries that
    have a relevant document), the ``select`` ids that choose the checkpoint and the ``verdict``
    ids that state the verdict (:func:`split_judged`, disjoint), scored by full-corpus retrieval."""

    data: Any  # hf_dr.data.BeirData, split "dev"
    select: list[str]
    verdict: list[str]
    seed: int
    max_length: int
    cache: StageCache
    key: str  # the hash of the corpus, the queries, their judgments and the split
    show_progress_bar: bool | None = None

    @property
    def queries(self) -> int:
        return len(self.select) + len(self.verdict)

    def ids(self, part: str) -> list[str]:
        if part not in (SELECT, VERDICT):
            raise ValueError(f"part {part!r}: {SELECT} or {VERDICT}")
        return self.select if part == SELECT else self.verdict

    def scores(self, part: str, model, fingerprint: str | None = None, vectors=None) -> dict:
        """``model``'s nDCG@10 on the ``part`` half (``select`` / ``verdict``) by full-corpus
        retrieval: ``{"ndcg@10", "per_query", "queries"}``, cached by the model's weights. Its corpus
        encoding is ``vectors`` (``(doc_ids, matrix)`` by this model, e.g. the label stage's), else
        :func:`corpus_vectors`' (made once per model)."""
        from ..fingerprints import model_fingerprint
        from ..factory import evaluate_model

        qids = self.ids(part)
        if not qids:
            return {"ndcg@10": None, "per_query": {}, "queries": 0}
        fp = fingerprint or model_fingerprint(model)
        texts = self.data.split_queries()

        def run():
            found = vectors if vectors is not None else \
                corpus_vectors(self.cache, self.data, model, fp, self.max_length, self.show_progress_bar)
            res, _ = evaluate_model(model, self.data, metrics=("ndcg@10",), batch_size=32, show_progress_bar=False,
                                    doc_vectors=found, queries={q: texts[q] for q in qids})
            return {"ndcg@10": float(res.aggregate["ndcg@10"]), "per_query": res.per_query["ndcg@10"],
                    "queries": res.n_queries}

        return self.cache.json(f"judged_{part}", {"model": fp, "judged": self.key, "part": part,
                                                  "max_length": self.max_length}, run)

    def describe(self) -> dict:
        """metrics.json's account of the split."""
        return {"select_queries": self.select, "verdict_queries": self.verdict, "seed": self.seed,
                "split": f"seeded (seed {self.seed}, salt {SPLIT_SALT}): {len(self.select)} choose the checkpoint, "
                         f"{len(self.verdict)} held out state the verdict",
                "scoring": "full-corpus retrieval with each candidate model (nDCG@10 over the whole corpus)"}


def judged_key(data, qids, qrels, texts, seed: int) -> str:
    """The hash that names a judged dev set (:attr:`JudgedDev.key`)."""
    return digest({"corpus": data.corpus_fingerprint(), "queries": [(q, texts[q]) for q in sorted(qids)],
                   "qrels": {q: qrels[q] for q in sorted(qids)}, "seed": seed, "salt": SPLIT_SALT, "v": 1})
