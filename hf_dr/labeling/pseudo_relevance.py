"""The DoDress pseudo-relevance labelling pipeline (papers/002 §4, papers/004).

For each real target query of the *training* split (test queries are never used):
BM25 top-``bm25_top`` -> rerank -> top-``k`` as pseudo-positives -> ``m`` negatives per
positive (random / BM25 / SimANS) -> ``k x m`` triplets with the reranker's scores (so
Margin-MSE can use the same rows). A held-out share of the queries forms the dev set of the
paper: top-10 pseudo-positives + 90 random negatives per query, for model selection.

Every stage (BM25 run, reranked run, dense run, triplets) is cached under
``output_dir/cache`` in a file named by the hash of its parameters: a re-run skips finished
stages, and changing a parameter recomputes exactly the stages that depend on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from datasets import Dataset
from tqdm.auto import tqdm

from .negatives import SAMPLERS, sample_negatives

logger = logging.getLogger(__name__)

__all__ = ["PseudoLabelConfig", "PseudoLabels", "build_pseudo_labels"]


@dataclass
class PseudoLabelConfig:
    split: str = field(default="train", metadata={"help": "query split to label (never the test split)"})
    bm25_top: int = field(default=100, metadata={"help": "BM25 candidates reranked per query"})
    k: int = field(default=1, metadata={"help": "top-k reranked documents taken as pseudo-positives"})
    m: int = field(default=10, metadata={"help": "negatives per pseudo-positive"})
    negatives: str = field(default="simans", metadata={"help": "random, bm25 or simans"})
    simans_top_k: int = field(default=500, metadata={"help": "SimANS candidates: top-K of the dense retriever"})
    simans_a: float = field(default=0.5, metadata={"help": "SimANS a (density)"})
    simans_b: float = field(default=0.0, metadata={"help": "SimANS b (peak offset)"})
    dev_fraction: float = field(default=0.1, metadata={"help": "share of the queries held out as the dev set"})
    dev_positives: int = field(default=10)
    dev_negatives: int = field(default=90)
    max_queries: int | None = field(default=None, metadata={"help": "label only the first N queries"})
    seed: int = field(default=0)

    def validate(self):
        if self.negatives not in SAMPLERS:
            raise ValueError(f"unknown negative sampler {self.negatives!r}; choose one of {', '.join(SAMPLERS)}")
        if self.split == "test":
            raise ValueError("pseudo-labels are built from training queries; the test split is for evaluation only")
        if self.k < 1 or self.m < 1:
            raise ValueError("k and m must be at least 1")
        if self.k > self.bm25_top:
            raise ValueError(f"k={self.k} pseudo-positives cannot come from {self.bm25_top} BM25 candidates")


@dataclass
class PseudoLabels:
    train: Dataset
    dev: Dataset
    stats: dict


class _Cache:
    def __init__(self, root: Path):
        self.root = root / "cache"
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, stage: str, params: dict) -> Path:
        h = hashlib.sha1(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return self.root / f"{stage}-{h}.json"

    def get_or_compute(self, stage: str, params: dict, fn):
        p = self.path(stage, params)
        if p.is_file():
            logger.info("%s: cached in %s", stage, p)
            return json.loads(p.read_text())["value"]
        value = fn()
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps({"params": params, "value": value}))
        tmp.replace(p)  # atomic: a crash never leaves a half-written cache entry
        return value


def build_pseudo_labels(data, reranker, config: PseudoLabelConfig, output_dir: str | Path, *, bm25=None,
                        dense_encoder=None, dense_name: str | None = None, show_progress_bar: bool = True) -> PseudoLabels:
    """Run the pipeline on ``data`` (a :class:`hf_dr.data.BeirData` loaded with
    ``split=config.split``; only its queries are used, never its labels). ``reranker`` has
    ``score(query, docs[, doc_indices])`` and a ``name``; ``dense_encoder`` is needed for SimANS."""
    from ..retrieval import BM25Index, DenseIndex

    config.validate()
    out = Path(output_dir)
    cache = _Cache(out)
    rng = np.random.default_rng(config.seed)
    doc_ids, texts = data.doc_ids(), data.doc_texts()
    index_of = {d: i for i, d in enumerate(doc_ids)}
    queries = data.split_queries()
    if not queries:
        raise ValueError(f"no queries in split {config.split!r} of {data.name}")
    qids = list(queries)[: config.max_queries] if config.max_queries else list(queries)
    base = {"data": str(data.name), "split": config.split, "n_docs": len(doc_ids), "qids": qids}

    bm25_params = {**base, "bm25_top": config.bm25_top}

    def run_bm25():
        idx = bm25 or BM25Index(doc_ids, texts)
        return idx.search({q: queries[q] for q in qids}, top_k=config.bm25_top)

    bm25_run = cache.get_or_compute("bm25", bm25_params, run_bm25)
    bm25_index = bm25

    rr_params = {**bm25_params, "reranker": getattr(reranker, "name", type(reranker).__name__),
                 "dense": dense_name}

    def run_rerank():
        res = {}
        for q in tqdm(qids, desc="Reranking", disable=not show_progress_bar):
            cand = list(bm25_run[q])
            if not cand:
                res[q] = {}
                continue
            idx = [index_of[d] for d in cand]
            scores = _score(reranker, queries[q], [texts[i] for i in idx], idx)
            res[q] = dict(zip(cand, map(float, scores)))
        return res

    reranked = cache.get_or_compute("rerank", rr_params, run_rerank)
    no_hits = [q for q in qids if not reranked[q]]
    labelled = [q for q in qids if reranked[q]]
    if not labelled:
        raise ValueError("no query has a BM25 hit: nothing to label (check the corpus and queries)")
    if no_hits:
        logger.warning("%d queries have no BM25 hit and get no pseudo-labels", len(no_hits))

    dense_run = None
    if config.negatives == "simans":
        if dense_encoder is None:
            raise ValueError("SimANS negatives need the current dense retriever (--dense-model)")
        d_params = {**base, "dense": dense_name, "top_k": config.simans_top_k + config.k}

        def run_dense():
            emb = dense_encoder.encode_corpus(texts, show_progress_bar=show_progress_bar)
            q = dense_encoder.encode_queries([queries[x] for x in labelled])
            return DenseIndex(emb, doc_ids).search(q, labelled, top_k=config.simans_top_k + config.k)

        dense_run = cache.get_or_compute("dense", d_params, run_dense)

    # split queries into train / dev (seeded), as the paper holds part of the queries out
    order = rng.permutation(len(labelled))
    n_dev = int(round(config.dev_fraction * len(labelled)))
    dev_q = sorted(labelled[i] for i in order[:n_dev])
    train_q = [q for q in labelled if q not in set(dev_q)]

    rows, short = [], 0
    for q in tqdm(train_q, desc="Sampling negatives", disable=not show_progress_bar):
        ranked = sorted(reranked[q].items(), key=lambda x: -x[1])
        positives = [d for d, _ in ranked[: config.k]]
        if len(positives) < config.k:
            short += 1
        for pos in positives:
            if config.negatives == "random":
                negs = sample_negatives("random", config.m, positives=positives, rng=rng, all_doc_ids=doc_ids)
            elif config.negatives == "bm25":
                negs = sample_negatives("bm25", config.m, positives=positives, rng=rng, ranked=bm25_run[q])
            else:
                pos_score = dense_run[q].get(pos)
                if pos_score is None:  # the positive is outside the dense top list: score it directly
                    qv = dense_encoder.encode_queries([queries[q]])
                    pv = dense_encoder.encode_corpus([texts[index_of[pos]]], show_progress_bar=False)
                    pos_score = float(pv[0] @ qv[0])
                negs = sample_negatives("simans", config.m, positives=positives, rng=rng, ranked=dense_run[q],
                                        pos_score=pos_score, top_k=config.simans_top_k, a=config.simans_a,
                                        b=config.simans_b)
            missing = [n for n in negs if n not in reranked[q]]
            extra = dict(zip(missing, map(float, _score(reranker, queries[q], [texts[index_of[n]] for n in missing],
                                                        [index_of[n] for n in missing])))) if missing else {}
            for n in negs:
                rows.append({"query_id": q, "query": queries[q], "pos_id": pos, "pos": texts[index_of[pos]],
                             "neg_id": n, "neg": texts[index_of[n]], "pos_score": reranked[q][pos],
                             "neg_score": reranked[q].get(n, extra.get(n))})
    if not rows:
        raise ValueError("no triplet could be built (every query lacked candidates)")

    dev_rows = []
    for q in dev_q:
        ranked = sorted(reranked[q].items(), key=lambda x: -x[1])
        positives = [d for d, _ in ranked[: config.dev_positives]]
        negs = sample_negatives("random", config.dev_negatives, positives=positives, rng=rng, all_doc_ids=doc_ids)
        for d, label in [(p, 1) for p in positives] + [(n, 0) for n in negs]:
            dev_rows.append({"query_id": q, "query": queries[q], "doc_id": d, "doc": texts[index_of[d]], "label": label})

    train = Dataset.from_list(rows)
    dev = Dataset.from_list(dev_rows) if dev_rows else Dataset.from_dict(
        {"query_id": [], "query": [], "doc_id": [], "doc": [], "label": []})
    stats = {"queries": len(qids), "queries_without_bm25_hits": len(no_hits), "train_queries": len(train_q),
             "dev_queries": len(dev_q), "triplets": len(train), "dev_rows": len(dev),
             "queries_with_fewer_than_k_candidates": short, "config": asdict(config),
             "reranker": rr_params["reranker"], "dense_model": dense_name}
    train.save_to_disk(str(out / "train"))
    dev.save_to_disk(str(out / "dev"))
    train.to_parquet(str(out / "train.parquet"))
    dev.to_parquet(str(out / "dev.parquet"))
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    return PseudoLabels(train, dev, stats)


def _score(reranker, query, docs, indices):
    try:
        return reranker.score(query, docs, doc_indices=indices)
    except TypeError:  # rerankers that need only the texts
        return reranker.score(query, docs)
