"""Supervised training rows from graded judgments (DDR's source-domain REM data in the
offline protocol: TREC DL 2019 judgments, grade >= 2 positive, grade 0 hard negative)."""

from __future__ import annotations

import random

from datasets import Dataset

from .beir import BeirData

__all__ = ["triplets_from_qrels"]


def triplets_from_qrels(data: BeirData, min_positive_grade: int = 2, negative_grade: int = 0,
                        n_negatives: int = 1, batch_size: int | None = None, epochs: int = 1,
                        seed: int = 0) -> Dataset:
    """Rows ``{query, pos, neg: list[str], qid}`` for :class:`~hf_dr.data.RetrievalCollator`.

    Every judged (query, doc) with grade >= ``min_positive_grade`` is a positive, paired
    with ``n_negatives`` documents judged exactly ``negative_grade`` for the same query
    (random unjudged corpus documents when a query has too few).

    Graded collections have many positives per query (TREC DL: ~58), so a shuffled batch
    would hold the same query several times and its other positives would act as in-batch
    negatives. With ``batch_size`` (the *global* batch: per-device batch x processes x
    gradient accumulation) rows come in blocks of ``batch_size`` distinct queries; train
    with ``train_sampling_strategy="sequential"`` to keep the blocks. Each of ``epochs``
    passes uses every positive once (leftovers that cannot fill a block are dropped).
    """
    if min_positive_grade <= negative_grade:
        raise ValueError("min_positive_grade must be above negative_grade")
    rng = random.Random(seed)
    qtext = data.split_queries()
    texts = dict(zip(data.doc_ids(), data.doc_texts()))
    all_ids = list(texts)
    pos: dict[str, list[str]] = {}
    neg: dict[str, list[str]] = {}
    for q, docs in data.qrels.items():
        if q not in qtext:
            continue
        p = [d for d, g in docs.items() if g >= min_positive_grade and d in texts]
        if p:
            pos[q] = sorted(p)
            neg[q] = sorted(d for d, g in docs.items() if g == negative_grade and d in texts)
    if not pos:
        raise ValueError(f"no judged positives with grade >= {min_positive_grade} in {data.name}")
    if batch_size is not None and batch_size > len(pos):
        raise ValueError(f"batch_size {batch_size} exceeds the {len(pos)} queries with positives: "
                         "a batch of distinct queries is impossible")

    def negatives(q: str) -> list[str]:
        cand = list(neg[q])
        rng.shuffle(cand)
        chosen = cand[:n_negatives]
        judged = set(data.qrels[q])
        while len(chosen) < n_negatives:
            d = rng.choice(all_ids)
            if d not in judged and d not in chosen:
                chosen.append(d)
        return [texts[d] for d in chosen]

    rows = []
    for _ in range(epochs):
        queue = {q: rng.sample(p, len(p)) for q, p in pos.items()}
        if batch_size is None:
            pairs = [(q, d) for q, ds in queue.items() for d in ds]
            rng.shuffle(pairs)
            blocks = [pairs]
        else:
            blocks = []
            while sum(1 for v in queue.values() if v) >= batch_size:
                # the queries with most positives left first (ties broken at random), so
                # every query's positives are used before the pass ends
                live = sorted((q for q, v in queue.items() if v), key=lambda q: (-len(queue[q]), rng.random()))
                chosen = live[:batch_size]
                rng.shuffle(chosen)
                blocks.append([(q, queue[q].pop()) for q in chosen])
        for block in blocks:
            for q, d in block:
                rows.append({"qid": q, "query": qtext[q], "pos": texts[d], "neg": negatives(q)})
    return Dataset.from_list(rows)
