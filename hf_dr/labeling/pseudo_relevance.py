"""The DoDress pseudo-relevance labelling pipeline (papers/002 §4, papers/004 §4-5).

For each real target query of the *training* split (test queries are never used, nor the
training labels):

1. BM25 top-``bm25_top`` (100) candidates (the one :class:`~hf_dr.retrieval.BM25Index`);
2. rerank them (monoT5 / cross-encoder / BM25+dense fusion, :mod:`.rerankers`);
3. the top-``k`` reranked documents are pseudo-positives (§4.1);
4. ``m`` negatives per pseudo-positive: global random, BM25 hard, or SimANS (Eq. 1) over the
   top-``K`` (500) of the current dense retriever (§4.2);
5. ``k x m`` triplets per query with the reranker's scores of both documents (so Margin-MSE
   can train on the same rows as RankNet).

A held-out set of the queries forms the dev set that picks the best checkpoint by nDCG@10: the
top-10 reranked documents (graded 2 for the first two, 1 for the next eight, as in papers/004
§5.2) + 10 hard negatives (grade 0) per query, drawn from the teacher's ranks 21-100 of the BM25
candidates (``dev_negatives_from="teacher"``; the paper's 90 random negatives of the corpus:
``dev_negatives=90, dev_negatives_from="random"``). Random negatives are easy for any retriever
and cost 4.5 times the candidates to encode at every dev evaluation; negatives the teacher ranks
below its top-20 separate checkpoints on what nDCG@10 measures, the order at the top.

Every stage (BM25 run, corpus / query embeddings, dense run, reranked run, triplets) is
cached under ``cache_dir`` (default: ``.NAME.cache`` beside the output folder ``NAME``) in a
file named by the hash of what it depends on — the *content* of its inputs, not their names:
the corpus texts (:func:`hf_dr.fingerprints.corpus_fingerprint`), the query texts, the dense
model's weights and configuration (:func:`hf_dr.fingerprints.model_fingerprint`), the reranker
(its weights when it is a local folder or a loaded model) and every parameter. A re-run skips
finished stages, a changed input or parameter recomputes exactly the stages that depend on it
(an edited corpus or a model retrained in place included), and a crash loses at most the stage
that was running (cache files are written atomically). Several runs may share one ``cache_dir``
(a grid over samplers, ``k`` and ``m`` computes BM25, the dense run and the reranking once).

The output folder is written whole or not at all: into a temporary sibling renamed into place
when complete (:func:`hf_dr.io.output_folder`); a non-empty one is refused unless
``overwrite``, which never deletes a folder holding an input (the data, the models, the cache).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from datasets import Dataset, Features, Value
from tqdm.auto import tqdm

from ..fingerprints import corpus_fingerprint, model_fingerprint
from ..evaluation import apply_self_match_rule
from ..hub.datasets import write_dataset_card
from ..hub.paths import public_command, public_name
from ..io import check_output_folder, local_inputs, output_folder
from ..stage_cache import StageCache
from .context import LabelContext, LabelKeys
from .degenerate import (DEGENERATE_RULE, DEGENERATE_RULE_VERSION, KEEP_HINT, candidate_reasons, degenerate_report,
                         degenerate_summary, triplet_reasons)
from .negatives import _check_sampler, make_sampler, sample_negatives
from .rerankers import Reranker
from .teacher import Teacher, parse_teacher

logger = logging.getLogger(__name__)

__all__ = ["PseudoLabelConfig", "PseudoLabels", "build_pseudo_labels", "write_dataset_card",
           "default_cache_dir", "resolve_cache_dir", "degenerate_summary", "DEGENERATE_RULE",
           "DEGENERATE_RULE_VERSION", "KEEP_HINT", "LabelContext", "LabelKeys", "TRAIN_COLUMNS", "DEV_COLUMNS"]

TRAIN_COLUMNS = ["query_id", "query", "pos_id", "pos", "neg_id", "neg", "pos_score", "neg_score"]
DEV_COLUMNS = ["query_id", "query", "doc_id", "doc", "label"]


@dataclass
class PseudoLabelConfig:
    """Parameters of the pipeline (defaults: the paper's)."""

    split: str = field(default="train", metadata={"help": "query split to label (never the test split)"})
    bm25_top: int = field(default=100, metadata={"help": "BM25 candidates reranked per query"})
    k: int = field(default=1, metadata={"help": "top-k reranked documents taken as pseudo-positives"})
    m: int = field(default=10, metadata={"help": "negatives per pseudo-positive"})
    negatives: str = field(default="simans", metadata={"help": "random, bm25 or simans"})
    simans_top_k: int = field(default=500, metadata={"help": "SimANS candidates: top-K of the dense retriever"})
    simans_a: float = field(default=0.5, metadata={"help": "SimANS a (density of Eq. 1)"})
    simans_b: float = field(default=0.0, metadata={"help": "SimANS b (offset of the peak of Eq. 1)"})
    simans_score_scale: float | None = field(default=None, metadata={
        "help": "multiply the dense scores by this before Eq. 1. a=0.5 suits dot-product scores (the paper); "
                "with cosine scores in [-1, 1] Eq. 1 is then almost uniform over the top-K. Default: the dense "
                "model's own similarity (hf_dr.objectives.scale.default_scale: 20 for cosine models, 1 for dot)"})
    dev_queries: int = field(default=50, metadata={"help": "queries held out for the dev set (at most 1/5 of them)"})
    dev_positives: int = field(default=10, metadata={"help": "dev set: top reranked documents counted relevant"})
    dev_negatives: int = field(default=10, metadata={"help": "dev set: negatives per query"})
    dev_negatives_from: str = field(default="teacher", metadata={
        "help": "dev set negatives: 'teacher' (drawn from the teacher's ranks below 2 x dev_positives of the BM25 "
                "candidates; corpus documents at random when too few) or 'random' (the corpus, papers/004)"})
    max_queries: int | None = field(default=None, metadata={"help": "label only the first N queries"})
    seed: int = field(default=0, metadata={"help": "seed of the dev split and of the samplers"})
    dense_max_length: int | None = field(default=None, metadata={"help": "max tokens when encoding with the dense model"})
    batch_size: int = field(default=32, metadata={"help": "encoding batch size"})
    keep_degenerate: bool = field(default=False, metadata={
        "help": "keep the rows of queries whose labels are degenerate (DEGENERATE_RULE; always reported)"})

    #: the command-line flag of each count (named in the errors)
    _FLAGS = {"bm25_top": "--bm25-top", "k": "--k", "m": "--m", "simans_top_k": "--simans-top-k",
              "dev_queries": "--dev-queries", "dev_positives": "dev_positives", "dev_negatives": "dev_negatives",
              "max_queries": "--max-queries", "dense_max_length": "--max-length", "batch_size": "--batch-size"}

    def validate(self) -> None:
        _check_sampler(self.negatives)
        if not isinstance(self.keep_degenerate, (bool, np.bool_)):
            raise ValueError(f"keep_degenerate must be True or False (got {self.keep_degenerate!r})")
        if self.split == "test":
            raise ValueError("pseudo-labels are built from training queries; the test split is for evaluation only")
        minimum = {"bm25_top": 1, "k": 1, "m": 1, "simans_top_k": 1, "dev_queries": 0, "dev_positives": 1,
                   "dev_negatives": 0, "max_queries": 1, "dense_max_length": 1, "batch_size": 1}
        for name, low in minimum.items():
            v = getattr(self, name)
            if v is None and name in ("max_queries", "dense_max_length"):  # None: all queries / the model's own
                continue
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"{self._FLAGS[name]} must be a whole number (got {v!r})")
            if v < low:
                what = "a positive number" if low == 1 else "zero or more"
                extra = " (omit it to label all the queries)" if name == "max_queries" else ""
                raise ValueError(f"{self._FLAGS[name]} must be {what} (got {v}){extra}")
        for name, flag in (("simans_score_scale", "--simans-score-scale"), ("simans_a", "simans_a")):
            v = getattr(self, name)
            if v is None and name == "simans_score_scale":  # the dense model's own (build_pseudo_labels)
                continue
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
                raise ValueError(f"{flag} must be a positive number (got {v!r})")
        if self.k >= self.bm25_top:
            raise ValueError(f"k={self.k} pseudo-positives leave no BM25 candidate out of {self.bm25_top} "
                             "(k must be smaller than --bm25-top)")
        if self.dev_negatives_from not in ("teacher", "random"):
            raise ValueError(f"dev_negatives_from must be 'teacher' or 'random' (got {self.dev_negatives_from!r})")
        if self.dev_positives > self.bm25_top:
            raise ValueError(f"dev_positives={self.dev_positives} exceeds the {self.bm25_top} BM25 candidates")


@dataclass
class PseudoLabels:
    train: Dataset
    dev: Dataset
    stats: dict
    path: Path | None = None


def default_cache_dir(output_dir: str | Path) -> Path:
    """The stage cache of an output folder ``NAME`` when none is given: ``.NAME.cache`` beside it
    (outside the folder, which is replaced as a whole; a re-run into the same folder reuses it)."""
    out = Path(output_dir).expanduser()
    if out.name in ("", ".", ".."):  # "." or "..": name the folder itself
        out = out.resolve()
    return out.with_name(f".{out.name}.cache")


def resolve_cache_dir(output_dir: str | Path, cache_dir: str | Path | None = None) -> Path:
    """``cache_dir`` (default :func:`default_cache_dir`), refused with ``ValueError`` when it lies
    inside ``output_dir`` (replaced as a whole at the end of a run, it would lose the cache)."""
    out = Path(output_dir).expanduser()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir(out)
    if root.resolve() == out.resolve() or out.resolve() in root.resolve().parents:
        raise ValueError(f"--cache-dir {root} lies inside the output folder {out}, which is replaced as a whole: "
                         "give a cache folder outside it (default: .NAME.cache beside the output)")
    return root



def build_pseudo_labels(data, output_dir: str | Path, config: PseudoLabelConfig | None = None, *,
                        reranker: str | Reranker | Teacher = "fusion", dense_encoder=None,
                        dense_name: str | None = None,
                        bm25=None, queries: Mapping[str, str] | None = None,
                        sources: Mapping[str, str] | None = None, cache_dir: str | Path | None = None,
                        doc_embeddings=None, write_card: bool = True, command: str | None = None,
                        show_progress_bar: bool = True, overwrite: bool = False, inputs=()) -> PseudoLabels:
    """Run the pipeline on ``data`` (a :class:`hf_dr.data.BeirData`; only its corpus and the
    query texts of ``config.split`` are read — never its relevance labels) and write the dataset
    to ``output_dir``: the triplets as a ``datasets`` folder (``load_from_disk(output_dir)``),
    the dev set in ``output_dir/dev``, both as parquet in ``output_dir/data/``, ``stats.json``
    and a dataset card ``README.md``. The stages, in order, over one :class:`LabelContext`:
    :func:`candidates` -> :func:`rerank` -> :func:`dense_run` -> :func:`dev_split` ->
    :func:`triplets` -> :func:`label_stats` -> :func:`write`.

    Args:
        reranker: the teacher: a :class:`~.rerankers.Reranker`, or a spec ``"fusion"`` / ``"monot5:<id>"`` /
            ``"cross-encoder:<id>"`` (:func:`~.teacher.parse_teacher`; built only when a stage that needs it
            is not cached).
        dense_encoder: the current dense retriever (any encoder of the suite, or a ``SentenceTransformer``):
            needed by the fusion reranker and SimANS. ``dense_name`` names it in cache keys and on the card.
        bm25: a :class:`~hf_dr.retrieval.BM25Index` of ``data``'s corpus (built when needed), e.g. a
            saved one (``hf-dr label --index IDX``: :meth:`hf_dr.retrieval.SavedIndex.bm25_index`).
        queries: ``{qid: text}`` to label instead of ``data``'s split queries (e.g. rewritten
            conversational queries, see :mod:`.rewriting`).
        sources: ``{qid: doc id}``, the document each query was made from (generated queries,
            :mod:`hf_dr.generation`): always among the teacher's candidates (added after BM25's
            top-``bm25_top`` when BM25 missed it; ``stats["sources_added"]`` counts them). When some
            queries have none (a folder's own queries beside generated ones), the dev set is drawn from those.
        cache_dir: where stages are cached (default :func:`default_cache_dir`: ``.NAME.cache`` beside
            the output folder); share it across runs. It must not lie inside ``output_dir``.
        doc_embeddings: an embeddings folder (``hf-dr encode``) of ``data``'s corpus by ``dense_encoder``,
            used instead of encoding the corpus (refused when another model or corpus made it).
        overwrite: replace a non-empty ``output_dir`` (once the new one is complete); never one that is
            or holds one of ``inputs`` (local paths of the data / models), the cache or ``doc_embeddings``.

    ``output_dir`` is checked first (before any work) and written whole: into a temporary sibling
    renamed into place at the end, so a crash leaves the previous folder (or none), never a mix.

    **Degenerate queries** (:mod:`.degenerate`) — no BM25 hit, fewer than ``k + m`` BM25 candidates,
    a non-finite teacher score, a teacher that scores all the candidates alike, or a triplet margin
    beyond the teacher's ``margin_bound`` (:data:`DEGENERATE_RULE`) — are reported
    (``stats["degenerate"]``, the card, a logged warning: :func:`degenerate_summary`) and their rows
    dropped from the triplets and the dev set, unless ``config.keep_degenerate`` (queries without a
    hit have no rows to keep). Dropping removes those rows only: the dev split and every other
    query's rows are those of a kept run. With ``keep_degenerate``, a query with fewer than ``k``
    candidates keeps the ones it has and a positive with fewer than ``m`` available negatives keeps
    what there is (both counted). Nothing usable at all raises ``ValueError``.
    """
    ctx = open_run(data, output_dir, config, teacher=parse_teacher(reranker), dense_encoder=dense_encoder,
                   dense_name=dense_name, bm25=bm25, queries=queries, sources=sources, cache_dir=cache_dir,
                   doc_embeddings=doc_embeddings, show_progress_bar=show_progress_bar, overwrite=overwrite,
                   inputs=inputs)
    candidates(ctx)
    rerank(ctx)
    dense_run(ctx)
    dev_split(ctx)
    train, dev, meta = triplets(ctx)
    stats = label_stats(ctx, train, dev, meta, command)
    write(ctx, train, dev, stats, write_card=write_card, overwrite=overwrite)
    return PseudoLabels(train, dev, stats, ctx.out)


def resolve_config(config: PseudoLabelConfig | None, dense_encoder) -> PseudoLabelConfig:
    """``config`` (default :class:`PseudoLabelConfig`) validated, with ``simans_score_scale`` the dense
    model's own similarity when unset (20 for cosine, 1 for dot; 1 without a dense model)."""
    config = config or PseudoLabelConfig()
    config.validate()
    if config.simans_score_scale is None:
        from ..objectives.scale import default_scale

        config = dataclasses.replace(config, simans_score_scale=default_scale(dense_encoder)
                                     if dense_encoder is not None else 1.0)
    return config


def open_run(data, output_dir, config, *, teacher: Teacher, dense_encoder, dense_name, bm25, queries, sources,
             cache_dir, doc_embeddings, show_progress_bar, overwrite, inputs) -> LabelContext:
    """The run's :class:`LabelContext`: the config resolved, the output folder checked (before any
    work), the queries, the dense model, the fingerprints and every stage's key."""
    from ..st_encoder import as_encoder

    dense_encoder = as_encoder(dense_encoder)  # a SentenceTransformer object too
    config = resolve_config(config, dense_encoder)
    out = Path(output_dir).expanduser()
    cache_root = resolve_cache_dir(out, cache_dir)
    emb_path = getattr(doc_embeddings, "path", doc_embeddings)
    protected = local_inputs(*inputs, getattr(data, "name", None), cache_root,
                             emb_path if isinstance(emb_path, (str, os.PathLike)) else None)
    check_output_folder(out, overwrite=overwrite, inputs=protected)  # before any work
    queries = {str(q): t for q, t in (data.split_queries() if queries is None else queries).items()}
    if not queries:
        raise ValueError(f"no queries to label in split {config.split!r} of {data.name}")
    qids = list(queries)[: config.max_queries] if config.max_queries else list(queries)
    if (config.negatives == "simans" or teacher.needs_dense) and dense_encoder is None:
        raise ValueError("the fusion reranker and SimANS negatives need the current dense retriever (--dense-model)")
    doc_ids, texts = data.doc_ids(), data.doc_texts()
    sources = {str(q): str(d) for q, d in sources.items()} if sources else sources
    fps = _fingerprints(data, doc_ids, texts, dense_encoder)
    keys = LabelKeys.of(config=config, teacher=teacher, queries=queries, qids=qids, sources=sources,
                        bm25_params=_bm25_params(bm25, doc_ids), **fps)
    return LabelContext(data, config, teacher, dense_encoder,
                        dense_name or (type(dense_encoder).__name__ if dense_encoder is not None else None),
                        queries, qids, sources, StageCache(cache_root), out, protected, doc_ids, texts, keys,
                        doc_embeddings=doc_embeddings, show_progress_bar=show_progress_bar, bm25=bm25, **fps)


def _fingerprints(data, doc_ids, texts, dense_encoder) -> dict:
    """``corpus_fp``, ``dense_fp`` (the dense model's weights + configuration) and ``dense_dtype``
    (the precision it encodes in, ``--dtype``)."""
    from ..precision import dtype_name, encoding_dtype

    corpus_fp = data.corpus_fingerprint() if hasattr(data, "corpus_fingerprint") else \
        corpus_fingerprint(zip(doc_ids, texts))
    if dense_encoder is None:
        return {"corpus_fp": corpus_fp, "dense_fp": None, "dense_dtype": None}
    return {"corpus_fp": corpus_fp, "dense_fp": model_fingerprint(dense_encoder),
            "dense_dtype": dtype_name(encoding_dtype(dense_encoder))}


def _bm25_params(bm25, doc_ids) -> dict | None:
    """A given index's parameters when not the defaults (they join the BM25 key); refused when it
    indexes another corpus."""
    if bm25 is None:
        return None
    from ..retrieval.bm25 import DEFAULT_PARAMS

    if len(bm25) != len(doc_ids):
        raise ValueError(f"the BM25 index holds {len(bm25)} documents, the corpus {len(doc_ids)}: it indexes "
                         "another corpus")
    params = getattr(bm25, "params", DEFAULT_PARAMS)
    return params if params != DEFAULT_PARAMS else None


def candidates(ctx: LabelContext) -> None:
    """BM25's top-``bm25_top`` of each query (cached), without the query's own document (the
    self-match rule of evaluation: never a pseudo-positive nor a negative); a generated query's
    own document always among them. Sets ``bm25_run``, ``no_hits``, ``labelled``, ``sources_added``."""
    from ..retrieval import BM25Retriever

    qids, queries = ctx.qids, ctx.queries
    run = ctx.cache.json("bm25", ctx.keys.bm25, lambda: BM25Retriever.from_index(ctx.bm25_index()).search(
        {q: queries[q] for q in qids}, ctx.config.bm25_top))
    run, _ = apply_self_match_rule(run)
    for q in qids if ctx.sources else ():
        d = ctx.sources.get(q)
        if d is not None and d in ctx.index_of and d not in run.get(q, {}):
            run[q] = {**run.get(q, {}), d: 0.0}
            ctx.sources_added += 1
    ctx.bm25_run = run
    ctx.no_hits = [q for q in qids if not run.get(q)]
    ctx.labelled = [q for q in qids if run.get(q)]
    if not ctx.labelled:
        raise ValueError(f"none of the {len(qids)} queries has a BM25 hit in the corpus: nothing to label "
                         "(check that the corpus and the queries share a language / tokenisation)")
    if ctx.no_hits:
        logger.warning("%d of %d queries have no BM25 hit and get no pseudo-labels", len(ctx.no_hits), len(qids))


def rerank(ctx: LabelContext) -> None:
    """The teacher's scores of each labelled query's candidates (cached): ``reranked``."""
    ctx.reranked = ctx.cache.json("rerank", ctx.keys.rerank, lambda: ctx.reranker().rerank(
        {q: ctx.bm25_run[q] for q in ctx.labelled}, ctx.queries, show_progress_bar=ctx.show_progress_bar))


def dense_run(ctx: LabelContext) -> None:
    """SimANS only: the current dense retriever's top ``simans_top_k + k`` of each query (cached,
    over the stored corpus encoding): ``dense_run``."""
    from ..retrieval import EncoderRetriever

    cfg = ctx.config
    if cfg.negatives != "simans":
        return
    top = cfg.simans_top_k + cfg.k
    run = ctx.cache.json("dense_run", ctx.keys.dense_run(top), lambda: EncoderRetriever(
        ctx.dense_encoder, ctx.doc_emb(), ctx.doc_ids, use_gpu=False, batch_size=cfg.batch_size).search(
        {q: ctx.queries[q] for q in ctx.qids}, top))
    ctx.dense_run, _ = apply_self_match_rule(run)


def dev_split(ctx: LabelContext) -> None:
    """The held-out dev queries (the same for every sampler, k and m): ``dev_queries`` of them, at
    most a fifth, drawn from the queries not made from a document when there are some (a folder's
    own queries beside generated ones: the dev set judges on queries of the kind users ask).
    Sets ``dev_q`` and ``train_q``."""
    cfg = ctx.config
    split_rng = np.random.default_rng([cfg.seed, 0])
    pool = [q for q in ctx.labelled if q not in ctx.sources] if ctx.sources else []
    pool = pool or ctx.labelled
    n_dev = min(cfg.dev_queries, len(pool) // 5)
    ctx.dev_q = sorted(pool[i] for i in split_rng.permutation(len(pool))[:n_dev])
    dev_set = set(ctx.dev_q)
    ctx.train_q = [q for q in ctx.labelled if q not in dev_set]


def triplets(ctx: LabelContext) -> tuple[Dataset, Dataset, dict]:
    """The triplets of the training queries and the dev rows of the held-out ones, without the
    degenerate queries' rows unless ``keep_degenerate`` (cached): ``(train, dev, meta)``."""
    def make():
        state = _Sampling(ctx)
        rows = [r for q in tqdm(ctx.train_q, desc=f"Sampling {ctx.config.negatives} negatives",
                                disable=not ctx.show_progress_bar) for r in state.query_rows(q)]
        if not rows:
            raise ValueError("no triplet could be built: every query lacked positives or negatives"
                             + (f" or had degenerate labels ({len(state.degenerate)} dropped; --keep-degenerate / "
                                "keep_degenerate=True keeps them)" if state.degenerate else ""))
        dev_rows = _dev_rows(ctx, state.degenerate)
        train = Dataset.from_list(rows)
        dev = Dataset.from_list(dev_rows) if dev_rows else Dataset.from_dict(
            {c: [] for c in DEV_COLUMNS}, features=Features({c: Value("int64" if c == "label" else "string")
                                                              for c in DEV_COLUMNS}))
        return {"train": train, "dev": dev}, state.meta()

    parts, meta = ctx.cache.datasets("triplets", ctx.triplets_key(), make)
    return parts["train"], parts["dev"], meta


def _ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """A query's reranked candidates, best first (ties by document id)."""
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))


class _Sampling:
    """The triplet stage's walk over the training queries: one sampler (chosen once), the counts
    and the degenerate queries found on the way."""

    def __init__(self, ctx: LabelContext):
        cfg = ctx.config
        self.ctx, self.rng = ctx, np.random.default_rng([cfg.seed, 1])
        self.sampler = make_sampler(cfg.negatives, cfg.m, **_sampler_sources(ctx))
        self.bound = ctx.teacher.margin_bound(cfg.bm25_top, len(ctx.doc_ids))
        self.short_k = self.short_m = 0
        self.degenerate: dict[str, list[str]] = {}

    def query_rows(self, q: str) -> list[dict]:
        """Query ``q``'s ``k x m`` triplets with the teacher's scores (none when degenerate and dropped)."""
        ctx, cfg = self.ctx, self.ctx.config
        positives = [d for d, _ in _ranked(ctx.reranked[q])[: cfg.k]]
        self.short_k += len(positives) < cfg.k
        pairs = []
        for pos in positives:
            negs = self.sampler.sample(q, pos, positives, self.rng)
            self.short_m += len(negs) < cfg.m
            pairs += [(pos, n) for n in negs]
        scores = dict(ctx.reranked[q])
        extra = sorted({n for _, n in pairs if n not in scores})
        if extra:  # teacher scores of negatives outside the reranked list
            scores.update(zip(extra, map(float, ctx.reranker().score_documents(
                q, ctx.queries[q], extra, ctx.bm25_run[q]))))
        rows = [{"query_id": q, "query": ctx.queries[q], "pos_id": pos, "pos": ctx.text(pos), "neg_id": n,
                 "neg": ctx.text(n), "pos_score": float(scores[pos]), "neg_score": float(scores[n])}
                for pos, n in pairs]
        reasons = triplet_reasons(_candidate_reasons(ctx, q), rows, self.bound)
        if reasons:
            self.degenerate[q] = reasons
        # dropping happens after sampling: the other queries' rows are unchanged
        return rows if not reasons or cfg.keep_degenerate else []

    def meta(self) -> dict:
        ctx = self.ctx
        meta = {"queries_with_fewer_than_k_candidates": self.short_k,
                "pairs_with_fewer_than_m_negatives": self.short_m,
                "positives_outside_dense_top_k": getattr(self.sampler, "positives_outside", 0),
                "degenerate_ids": self.degenerate}
        if not ctx.config.keep_degenerate:  # the queries whose rows are in the folder
            meta["train_queries"] = sum(q not in self.degenerate for q in ctx.train_q)
            meta["dev_queries"] = sum(q not in self.degenerate for q in ctx.dev_q)
        return meta


def _sampler_sources(ctx: LabelContext) -> dict:
    """What the run's negative sampler draws from: the corpus, the BM25 run, or the dense run and
    the positive's score by the same retriever (from the stored embeddings)."""
    cfg = ctx.config
    if cfg.negatives == "random":
        return {"all_doc_ids": ctx.doc_ids}
    if cfg.negatives == "bm25":
        return {"runs": ctx.bm25_run}
    doc_emb, query_emb, index_of = ctx.doc_emb(), ctx.query_emb(), ctx.index_of
    return {"runs": ctx.dense_run, "pos_score": lambda q, d: doc_emb[index_of[d]] @ query_emb[q],
            "top_k": cfg.simans_top_k, "a": cfg.simans_a, "b": cfg.simans_b, "scale": cfg.simans_score_scale}


def _candidate_reasons(ctx: LabelContext, q: str) -> list[str]:
    return candidate_reasons(len(ctx.bm25_run[q]), ctx.reranked[q], ctx.need)


def _dev_rows(ctx: LabelContext, degenerate: dict[str, list[str]]) -> list[dict]:
    """The dev set's rows: each held-out query's top ``dev_positives`` reranked documents (papers/004
    §5.2: the first two graded 2, the next ones 1) and its ``dev_negatives`` (grade 0)."""
    cfg = ctx.config
    rng = np.random.default_rng([cfg.seed, 2])
    rows = []
    for q in ctx.dev_q:
        ranked = _ranked(ctx.reranked[q])
        positives = [d for d, _ in ranked[: cfg.dev_positives]]
        negs = _dev_negatives(cfg, ranked, positives, rng, ctx.doc_ids)
        reasons = _candidate_reasons(ctx, q)
        if reasons:
            degenerate[q] = reasons
            if not cfg.keep_degenerate:
                continue
        graded = [(d, 2 if rank < 2 else 1) for rank, d in enumerate(positives)] + [(d, 0) for d in negs]
        rows += [{"query_id": q, "query": ctx.queries[q], "doc_id": d, "doc": ctx.text(d), "label": g}
                 for d, g in graded]
    return rows


def _dev_negatives(config: PseudoLabelConfig, ranked: list, positives: list[str], rng, doc_ids) -> list[str]:
    """A dev query's ``dev_negatives`` negatives: with ``dev_negatives_from="teacher"``, drawn
    without replacement from the teacher's ranking of its BM25 candidates below rank
    ``2 * dev_positives`` (a gap of ``dev_positives`` ranks keeps the near-misses, likely relevant,
    out), completed by corpus documents at random when too few; else random corpus documents."""
    if config.dev_negatives_from == "random":
        return sample_negatives("random", config.dev_negatives, positives=positives, rng=rng, all_doc_ids=doc_ids)
    pool = [d for d, _ in ranked[2 * config.dev_positives:]]
    if len(pool) > config.dev_negatives:
        pool = [pool[i] for i in sorted(rng.choice(len(pool), config.dev_negatives, replace=False))]
    missing = config.dev_negatives - len(pool)
    if missing > 0:
        pool += sample_negatives("random", missing, positives=[d for d, _ in ranked], rng=rng, all_doc_ids=doc_ids)
    return pool


def label_stats(ctx: LabelContext, train: Dataset, dev: Dataset, meta: dict, command: str | None) -> dict:
    """``stats.json``: the counts, the degenerate queries, the teacher, the config, the cache, the
    fingerprints. What the folder says about its inputs: names, never paths of this machine (it
    gets published). Logs the one report of the run's degenerate queries."""
    cfg, meta = ctx.config, dict(meta)
    found = {**{q: ["no_bm25_hit"] for q in ctx.no_hits}, **meta.pop("degenerate_ids")}
    degenerate = degenerate_report(found, ctx.qids, kept=cfg.keep_degenerate, need=ctx.need,
                                   bound=ctx.teacher.margin_bound(cfg.bm25_top, len(ctx.doc_ids)))
    stats = {"source": public_name(ctx.data.name), "queries": len(ctx.qids),
             "queries_without_bm25_hits": len(ctx.no_hits),
             **({"sources_added": ctx.sources_added} if ctx.sources else {}),
             "train_queries": len(ctx.train_q), "dev_queries": len(ctx.dev_q), "triplets": len(train),
             "dev_rows": len(dev), **meta, "degenerate_queries": len(degenerate["ids"]), "degenerate": degenerate,
             "reranker": ctx.teacher.card_name(ctx.dense_name), "dense_model": public_name(ctx.dense_name),
             "config": asdict(cfg), "cache": {"reused": ctx.cache.hits, "computed": ctx.cache.computed},
             "dtype": ctx.dense_dtype, "fingerprints": {"corpus": ctx.corpus_fp, "queries": ctx.keys.queries["queries"],
                                                        "dense_model": ctx.dense_fp},
             "command": public_command(command)}
    summary = degenerate_summary(stats)
    if summary:  # the one report of a labelling run's degenerate queries (hf-dr label and adapt print no other)
        logger.warning("%s", summary)
    return stats


def write(ctx: LabelContext, train: Dataset, dev: Dataset, stats: dict, *, write_card: bool = True,
          overwrite: bool = False) -> None:
    """The dataset folder, written whole: the triplets at the top (``load_from_disk(output_dir)``),
    the dev set in ``dev/``, both as parquet in ``data/``, ``stats.json`` and the card."""
    with output_folder(ctx.out, overwrite=overwrite, inputs=ctx.protected) as tmp:
        _save_dataset(train, tmp)
        _save_dataset(dev, tmp / "dev")
        (tmp / "data").mkdir(exist_ok=True)
        train.to_parquet(str(tmp / "data" / "train-00000-of-00001.parquet"))
        dev.to_parquet(str(tmp / "data" / "dev-00000-of-00001.parquet"))
        (tmp / "stats.json").write_text(json.dumps(stats, indent=1, default=str))
        if write_card:
            write_dataset_card(tmp, stats, command=stats["command"])


def _save_dataset(ds: Dataset, path: Path) -> None:
    """``save_to_disk`` into ``path`` (which may hold other things: the card, ``dev/``), replacing a
    previous save's shards only."""
    path.mkdir(parents=True, exist_ok=True)
    for old in list(path.glob("data-*.arrow")) + [path / "dataset_info.json", path / "state.json"]:
        old.unlink(missing_ok=True)
    tmp = path / ".tmp_save"
    shutil.rmtree(tmp, ignore_errors=True)
    ds.save_to_disk(str(tmp), num_shards=1)
    for f in tmp.iterdir():
        f.replace(path / f.name)
    tmp.rmdir()
