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
the corpus texts (:func:`hf_dr.embeddings.corpus_fingerprint`), the query texts, the dense
model's weights and configuration (:func:`hf_dr.embeddings.model_fingerprint`), the reranker
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

from ..embeddings import corpus_fingerprint, model_fingerprint
from ..evaluation import apply_self_match_rule
from ..hub.paths import public_command, public_name
from ..io import check_output_folder, local_inputs, output_folder
from ..stage_cache import StageCache, digest, folder_fingerprint
from .negatives import SAMPLERS, _check_sampler, sample_negatives
from .rerankers import FUSION_REFERENCE_SIZE, FusionReranker, Reranker, get_reranker

logger = logging.getLogger(__name__)

__all__ = ["PseudoLabelConfig", "PseudoLabels", "build_pseudo_labels", "write_dataset_card",
           "default_cache_dir", "resolve_cache_dir", "degenerate_summary", "DEGENERATE_RULE"]

#: what makes a query's labels degenerate (#21); the reasons, as stats.json names them
DEGENERATE_RULE = {
    "no_bm25_hit": "BM25 finds no candidate (no query term in the corpus): nothing to label, always left out",
    "few_candidates": "fewer than k + m BM25 candidates: too few ranked documents for the k pseudo-positives and "
                      "m negatives (e.g. a one-word query that matches two documents)",
    "non_finite": "a teacher score (of a candidate or of a sampled negative) is NaN or infinite",
    "zero_variance": "the teacher scores all the query's candidates alike (or all the documents of its triplets): "
                     "the pseudo-positives are a tie broken by document id and the margins are 0",
    "margin_out_of_bound": "a triplet's |pos_score - neg_score| exceeds the teacher's margin_bound, the widest "
                           "margin its scale produces (fusion: 2 * sum|w| * sqrt(n - 1) over its reference set of "
                           "n documents; monoT5: 1; no bound for other teachers)",
}
#: bumped when the rule or the teacher's normalisation changes what the triplet stage writes
DEGENERATE_RULE_VERSION = 1
_REASON_TEXT = {"no_bm25_hit": "without any BM25 hit",
                "few_candidates": "with fewer than {need} BM25 candidates (k + m)",
                "non_finite": "with non-finite teacher scores", "zero_variance": "with zero-variance teacher scores",
                "margin_out_of_bound": "with a teacher margin beyond ±{bound}"}

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


def _reranker_identity(reranker) -> dict:
    """What the reranked scores depend on besides the candidates: the reranker's kind, and its
    weights (a loaded model's, or the files of a local model folder; a Hub id as is)."""
    import torch

    if not isinstance(reranker, str):
        ident: dict = {"name": getattr(reranker, "name", type(reranker).__name__), "class": type(reranker).__name__}
        for attr in ("model", "encoder"):
            m = getattr(reranker, attr, None)
            if m is not None and not isinstance(m, torch.nn.Module):
                m = next((getattr(m, a) for a in ("model", "_model") if isinstance(getattr(m, a, None), torch.nn.Module)),
                         None)
            if m is not None:
                ident[attr] = model_fingerprint(m)
        if hasattr(reranker, "weights"):
            ident["weights"] = list(reranker.weights)
        return ident
    kind, _, spec = str(reranker).partition(":")
    if kind == "fusion":
        return {"name": "fusion", "weights": [1.0, 1.0]}
    if kind == "monot5" and not spec:
        spec = "castorini/monot5-3b-msmarco"
    local = Path(spec).expanduser()
    if spec and local.exists():  # a local folder: its files, wherever it lives
        return {"name": kind, "files": folder_fingerprint(local)}
    return {"name": kind, "id": spec}


def _reranker_name(reranker, dense_name) -> str:
    if isinstance(reranker, Reranker) or hasattr(reranker, "score_documents"):
        return reranker.name
    spec = str(reranker)
    if spec == "fusion":
        return f"fusion(bm25,{dense_name},w=[1.0, 1.0])"
    if spec == "monot5":
        return "monot5:castorini/monot5-3b-msmarco"
    return spec


def build_pseudo_labels(data, output_dir: str | Path, config: PseudoLabelConfig | None = None, *,
                        reranker: str | Reranker = "fusion", dense_encoder=None, dense_name: str | None = None,
                        bm25=None, queries: Mapping[str, str] | None = None,
                        sources: Mapping[str, str] | None = None, cache_dir: str | Path | None = None,
                        doc_embeddings=None,
                        write_card: bool = True, command: str | None = None,
                        show_progress_bar: bool = True, overwrite: bool = False,
                        inputs=()) -> PseudoLabels:
    """Run the pipeline on ``data`` (a :class:`hf_dr.data.BeirData`; only its corpus and the
    query texts of ``config.split`` are read — never its relevance labels) and write the dataset
    to ``output_dir``: the triplets as a ``datasets`` folder (``load_from_disk(output_dir)``),
    the dev set in ``output_dir/dev``, both as parquet in ``output_dir/data/``, ``stats.json``
    and a dataset card ``README.md``.

    Args:
        reranker: a :class:`~.rerankers.Reranker`, or a spec ``"fusion"`` / ``"monot5:<id>"`` /
            ``"cross-encoder:<id>"`` (built only when a stage that needs it is not cached).
        dense_encoder: the current dense retriever (any encoder of the suite, or a ``SentenceTransformer``): needed by the
            fusion reranker and SimANS. ``dense_name`` names it in cache keys and on the card.
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

    **Degenerate queries** (#21) — no BM25 hit, fewer than ``k + m`` BM25 candidates, a
    non-finite teacher score, a teacher that scores all the candidates alike, or a triplet
    margin beyond the teacher's ``margin_bound`` (:data:`DEGENERATE_RULE`) — are reported
    (``stats["degenerate"]``: counts by reason and the ids; the card; a logged warning,
    :func:`degenerate_summary`) and their rows dropped from the triplets and the dev set, unless
    ``config.keep_degenerate`` (queries without a hit have no rows to keep). Dropping removes
    those rows only: the dev split and every other query's rows are those of a kept run. With
    ``keep_degenerate``, a query with fewer than ``k`` candidates keeps the ones it has and a
    positive with fewer than ``m`` available negatives keeps what there is (both counted).
    Nothing usable at all raises ``ValueError`` — never a silent empty dataset.
    """
    from ..retrieval import BM25Index, BM25Retriever, EncoderRetriever

    from ..st_encoder import as_encoder

    dense_encoder = as_encoder(dense_encoder)  # a SentenceTransformer object too
    config = config or PseudoLabelConfig()
    config.validate()
    if config.simans_score_scale is None:  # the dense model's own similarity: 20 for cosine, 1 for dot
        from ..objectives.scale import default_scale

        config = dataclasses.replace(config, simans_score_scale=default_scale(dense_encoder)
                                     if dense_encoder is not None else 1.0)
    out = Path(output_dir).expanduser()
    cache_root = resolve_cache_dir(out, cache_dir)
    emb_path = getattr(doc_embeddings, "path", doc_embeddings)
    protected = local_inputs(*inputs, getattr(data, "name", None), cache_root,
                             emb_path if isinstance(emb_path, (str, os.PathLike)) else None)
    check_output_folder(out, overwrite=overwrite, inputs=protected)  # before any work
    cache = StageCache(cache_root)
    doc_ids, texts = data.doc_ids(), data.doc_texts()
    index_of = {d: i for i, d in enumerate(doc_ids)}
    if queries is None:
        queries = data.split_queries()
    queries = {str(q): t for q, t in queries.items()}
    if not queries:
        raise ValueError(f"no queries to label in split {config.split!r} of {data.name}")
    qids = list(queries)[: config.max_queries] if config.max_queries else list(queries)
    needs_dense = config.negatives == "simans" or (isinstance(reranker, str) and reranker == "fusion") \
        or getattr(reranker, "doc_embeddings", "absent") is None
    if needs_dense and dense_encoder is None:
        raise ValueError("the fusion reranker and SimANS negatives need the current dense retriever (--dense-model)")
    dense_name = dense_name or (type(dense_encoder).__name__ if dense_encoder is not None else None)

    # every key holds the content its stage depends on, not a path or a name: the corpus texts, the
    # query texts, the dense model's weights + configuration, the reranker's identity, the parameters
    corpus_fp = data.corpus_fingerprint() if hasattr(data, "corpus_fingerprint") else \
        corpus_fingerprint(zip(doc_ids, texts))[1]
    dense_fp = model_fingerprint(dense_encoder) if dense_encoder is not None else None
    corpus_key = {"corpus": corpus_fp}
    query_key = {"queries": digest([(q, queries[q]) for q in qids])}
    bm25_key = {**corpus_key, **query_key, "bm25_top": config.bm25_top}
    if bm25 is not None:  # a given index (e.g. a saved one): its corpus, and its parameters when not the defaults
        from ..retrieval.bm25 import DEFAULT_PARAMS

        if len(bm25) != len(doc_ids):
            raise ValueError(f"the BM25 index holds {len(bm25)} documents, the corpus {len(doc_ids)}: it indexes "
                             "another corpus")
        if getattr(bm25, "params", DEFAULT_PARAMS) != DEFAULT_PARAMS:
            bm25_key["bm25"] = bm25.params
    state = {"bm25": bm25}

    def get_bm25():
        if state["bm25"] is None:
            state["bm25"] = BM25Index(doc_ids, texts)
        return state["bm25"]

    # 1. BM25 candidates
    bm25_run = cache.json("bm25", bm25_key, lambda: BM25Retriever.from_index(get_bm25()).search(
        {q: queries[q] for q in qids}, config.bm25_top))
    # the self-match rule of evaluation: a query's own document (same id, where the queries are
    # documents, as in ArguAna) is never a candidate, so never a pseudo-positive nor a negative
    bm25_run, _ = apply_self_match_rule(bm25_run)
    sources_added = 0
    if sources:  # a generated query's own document is always a candidate of the teacher
        sources = {str(q): str(d) for q, d in sources.items()}
        for q in qids:
            d = sources.get(q)
            if d is not None and d in index_of and d not in bm25_run.get(q, {}):
                bm25_run[q] = {**bm25_run.get(q, {}), d: 0.0}
                sources_added += 1
    no_hits = [q for q in qids if not bm25_run.get(q)]
    labelled = [q for q in qids if bm25_run.get(q)]
    if not labelled:
        raise ValueError(f"none of the {len(qids)} queries has a BM25 hit in the corpus: nothing to label "
                         "(check that the corpus and the queries share a language / tokenisation)")
    if no_hits:
        logger.warning("%d of %d queries have no BM25 hit and get no pseudo-labels", len(no_hits), len(qids))

    # 2. dense embeddings (one corpus encoding, shared by the fusion reranker and SimANS)
    # the precision the dense model encodes in (--dtype); fp32, the CPU default, keeps the keys of before
    from ..precision import dtype_name, encoding_dtype

    dense_dtype = dtype_name(encoding_dtype(dense_encoder)) if dense_encoder is not None else None
    dtype_key = {"dtype": dense_dtype} if dense_dtype not in (None, "fp32") else {}
    dense_key = {**corpus_key, "model": dense_fp, "max_length": config.dense_max_length, **dtype_key}
    emb = {}

    def encode_docs():
        if doc_embeddings is None:
            return dense_encoder.encode_corpus(texts, batch_size=config.batch_size, show_progress_bar=show_progress_bar,
                                               max_length=config.dense_max_length)
        from ..embeddings import Embeddings

        folder = doc_embeddings if isinstance(doc_embeddings, Embeddings) else Embeddings(doc_embeddings)
        folder.check(dense_encoder, doc_ids=doc_ids, max_length=config.dense_max_length,
                     corpus_fingerprint=corpus_fp)
        if folder.is_sparse:
            raise ValueError(f"{folder.path} holds sparse vectors: the pipeline's dense retriever needs dense ones")
        return folder.matrix()

    def doc_emb():
        if "docs" not in emb:
            emb["docs"] = cache.array("doc_embeddings", dense_key, encode_docs)
        return emb["docs"]

    def query_emb() -> dict[str, np.ndarray]:
        if "queries" not in emb:
            arr = cache.array("query_embeddings", {**query_key, "model": dense_fp, "max_length": config.dense_max_length,
                                                   **dtype_key},
                              lambda: dense_encoder.encode_queries([queries[q] for q in qids], batch_size=config.batch_size))
            emb["queries"] = dict(zip(qids, arr))
        return emb["queries"]

    # 3. rerank
    rr_name = _reranker_name(reranker, dense_name)
    rr_ident = _reranker_identity(reranker)
    # the fusion teacher normalises over at least max(bm25_top, 100) documents (#21): its scale is in the key
    ref_size = max(config.bm25_top, FUSION_REFERENCE_SIZE)
    if isinstance(reranker, str) and reranker == "fusion":
        rr_ident["normalisation"] = FusionReranker.normalisation_of(ref_size)
    elif getattr(reranker, "normalisation", None) is not None:
        rr_ident["normalisation"] = reranker.normalisation
    rr_key = {**bm25_key, "reranker": rr_ident, **({"dense": dense_key} if rr_name.startswith("fusion") else {}),
              **({"sources": digest([(q, sources.get(q)) for q in qids])} if sources else {})}
    rr_state = {"obj": reranker if not isinstance(reranker, str) else None}

    def get_reranker_obj() -> Reranker:
        if rr_state["obj"] is None:
            rr_state["obj"] = get_reranker(reranker, bm25=get_bm25(), encoder=dense_encoder, encoder_name=dense_name,
                                           batch_size=config.batch_size,
                                           **({"reference_size": ref_size} if reranker == "fusion" else {}))
        r = rr_state["obj"]
        if hasattr(r, "query_embeddings") and getattr(r, "doc_embeddings", 0) is None:
            r.doc_embeddings = doc_emb()
            r.query_embeddings.update(query_emb())
        if getattr(r, "texts", None) is None and hasattr(r, "set_corpus"):
            r.set_corpus(doc_ids, texts)
        return r

    reranked = cache.json("rerank", rr_key, lambda: get_reranker_obj().rerank(
        {q: bm25_run[q] for q in labelled}, queries, show_progress_bar=show_progress_bar))

    # 4. the current dense retriever's run (SimANS only)
    dense_run = None
    if config.negatives == "simans":
        top = config.simans_top_k + config.k
        dense_run = cache.json("dense_run", {**dense_key, **query_key, "top_k": top},
                               lambda: EncoderRetriever(dense_encoder, doc_emb(), doc_ids, use_gpu=False,
                                                        batch_size=config.batch_size).search(
                                   {q: queries[q] for q in qids}, top))
        dense_run, _ = apply_self_match_rule(dense_run)

    # 5. dev split (the same for every sampler / k / m) and triplets
    # drawn from the queries not made from a document when there are some (a folder's own queries beside
    # generated ones: the dev set judges on queries of the kind users ask)
    split_rng = np.random.default_rng([config.seed, 0])
    pool = [q for q in labelled if q not in sources] if sources else []
    pool = pool or labelled
    n_dev = min(config.dev_queries, len(pool) // 5)
    dev_q = sorted(pool[i] for i in split_rng.permutation(len(pool))[:n_dev])
    dev_set = set(dev_q)
    train_q = [q for q in labelled if q not in dev_set]
    need = config.k + config.m
    bound = _teacher_margin_bound(reranker, ref_size, len(doc_ids))

    def early_reasons(q) -> list[str]:
        """The degenerate reasons known before sampling (DEGENERATE_RULE)."""
        reasons = ["few_candidates"] if len(bm25_run[q]) < need else []
        v = np.fromiter(reranked[q].values(), dtype=np.float64, count=len(reranked[q]))
        if not np.all(np.isfinite(v)):
            reasons.append("non_finite")
        elif v.size >= 2 and v.max() == v.min():
            reasons.append("zero_variance")
        return reasons

    trip_key = {**rr_key, "cfg": {k: v for k, v in asdict(config).items() if k not in ("batch_size", "split")},
                "degenerate_rule": DEGENERATE_RULE_VERSION,
                "dense": dense_key if dense_run is not None else None}

    def make():
        rng = np.random.default_rng([config.seed, 1])
        rows, short_k, short_m, outside = [], 0, 0, 0
        degenerate: dict[str, list[str]] = {}
        for q in tqdm(train_q, desc=f"Sampling {config.negatives} negatives", disable=not show_progress_bar):
            ranked = sorted(reranked[q].items(), key=lambda x: (-x[1], x[0]))
            positives = [d for d, _ in ranked[: config.k]]
            short_k += len(positives) < config.k
            pairs = []
            for pos in positives:
                if config.negatives == "random":
                    negs = sample_negatives("random", config.m, positives=positives, rng=rng, all_doc_ids=doc_ids)
                elif config.negatives == "bm25":
                    negs = sample_negatives("bm25", config.m, positives=positives, rng=rng, ranked=bm25_run[q])
                else:
                    # s(q, d~+) by the same dense retriever, from the stored embeddings (also for a
                    # positive outside its top-K, which papers/004 would drop)
                    sc = config.simans_score_scale
                    pos_score = sc * float(doc_emb()[index_of[pos]] @ query_emb()[q])
                    outside += pos not in dense_run[q]
                    ranked = dense_run[q] if sc == 1.0 else {d: sc * v for d, v in dense_run[q].items()}
                    negs = sample_negatives("simans", config.m, positives=positives, rng=rng, ranked=ranked,
                                            pos_score=pos_score, top_k=config.simans_top_k, a=config.simans_a,
                                            b=config.simans_b)
                short_m += len(negs) < config.m
                pairs += [(pos, n) for n in negs]
            scores = dict(reranked[q])
            extra = sorted({n for _, n in pairs if n not in scores})
            if extra:  # teacher scores of negatives outside the reranked list
                scores.update(zip(extra, map(float, get_reranker_obj().score_documents(
                    q, queries[q], extra, bm25_run[q]))))
            q_rows = [{"query_id": q, "query": queries[q], "pos_id": pos, "pos": texts[index_of[pos]],
                       "neg_id": n, "neg": texts[index_of[n]], "pos_score": float(scores[pos]),
                       "neg_score": float(scores[n])} for pos, n in pairs]
            reasons = early_reasons(q)
            margins = np.array([r["pos_score"] - r["neg_score"] for r in q_rows], dtype=np.float64)
            if not np.all(np.isfinite(margins)) and "non_finite" not in reasons:
                reasons.append("non_finite")
            elif len(q_rows) and "zero_variance" not in reasons and "non_finite" not in reasons and len(
                    {r["pos_score"] for r in q_rows} | {r["neg_score"] for r in q_rows}) == 1:
                reasons.append("zero_variance")  # e.g. one candidate, and negatives scored like it
            elif bound is not None and margins.size and np.all(np.isfinite(margins)) \
                    and np.abs(margins).max() > bound:
                reasons.append("margin_out_of_bound")
            if reasons:
                degenerate[q] = reasons
            if not reasons or config.keep_degenerate:  # dropping happens after sampling: others unchanged
                rows += q_rows
        if not rows:
            raise ValueError("no triplet could be built: every query lacked positives or negatives"
                             + (f" or had degenerate labels ({len(degenerate)} dropped; --keep-degenerate / "
                                "keep_degenerate=True keeps them)" if degenerate else ""))
        dev_rng = np.random.default_rng([config.seed, 2])
        dev_rows = []
        for q in dev_q:
            ranked = sorted(reranked[q].items(), key=lambda x: (-x[1], x[0]))
            positives = [d for d, _ in ranked[: config.dev_positives]]
            negs = _dev_negatives(config, ranked, positives, dev_rng, doc_ids)
            reasons = early_reasons(q)
            if reasons:
                degenerate[q] = reasons
                if not config.keep_degenerate:
                    continue
            # papers/004 §5.2: the first two pseudo-positives graded 2, the next eight 1
            for rank, d in enumerate(positives):
                dev_rows.append({"query_id": q, "query": queries[q], "doc_id": d, "doc": texts[index_of[d]],
                                 "label": 2 if rank < 2 else 1})
            for d in negs:
                dev_rows.append({"query_id": q, "query": queries[q], "doc_id": d, "doc": texts[index_of[d]], "label": 0})
        train = Dataset.from_list(rows)
        dev = Dataset.from_list(dev_rows) if dev_rows else Dataset.from_dict(
            {c: [] for c in DEV_COLUMNS}, features=Features({c: Value("int64" if c == "label" else "string")
                                                              for c in DEV_COLUMNS}))
        meta = {"queries_with_fewer_than_k_candidates": short_k, "pairs_with_fewer_than_m_negatives": short_m,
                "positives_outside_dense_top_k": outside,
                "degenerate_ids": degenerate}
        if not config.keep_degenerate:  # the queries whose rows are in the folder
            meta["train_queries"] = sum(q not in degenerate for q in train_q)
            meta["dev_queries"] = sum(q not in degenerate for q in dev_q)
        return {"train": train, "dev": dev}, meta

    parts, meta = cache.datasets("triplets", trip_key, make)
    train, dev = parts["train"], parts["dev"]
    found = {**{q: ["no_bm25_hit"] for q in no_hits}, **meta.pop("degenerate_ids")}
    found = {q: found[q] for q in qids if q in found}  # in query order
    by_reason: dict[str, int] = {}
    for reasons in found.values():
        for r in reasons:
            by_reason[r] = by_reason.get(r, 0) + 1
    degenerate = {"kept": bool(config.keep_degenerate), "min_candidates": need, "margin_bound": bound,
                  "by_reason": dict(sorted(by_reason.items())), "ids": found,
                  "rule": {r: DEGENERATE_RULE[r] for r in DEGENERATE_RULE}}
    # what the folder says about its inputs: names, never paths of this machine (it gets published)
    stats = {"source": public_name(data.name), "queries": len(qids), "queries_without_bm25_hits": len(no_hits),
             **({"sources_added": sources_added} if sources else {}),
             "train_queries": len(train_q), "dev_queries": len(dev_q), "triplets": len(train), "dev_rows": len(dev),
             **meta, "degenerate_queries": len(found), "degenerate": degenerate,
             "reranker": _public_reranker_name(reranker, dense_name), "dense_model": public_name(dense_name),
             "config": asdict(config), "cache": {"reused": cache.hits, "computed": cache.computed},
             "dtype": dense_dtype, "fingerprints": {"corpus": corpus_fp, "queries": query_key["queries"], "dense_model": dense_fp},
             "command": public_command(command)}

    summary = degenerate_summary(stats)
    if summary:  # the one report of a labelling run's degenerate queries (hf-dr label and adapt print no other)
        logger.warning("%s", summary)

    # the dataset folder, written whole: triplets at the top (load_from_disk(output_dir)), dev beside them
    with output_folder(out, overwrite=overwrite, inputs=protected) as tmp:
        _save_dataset(train, tmp)
        _save_dataset(dev, tmp / "dev")
        (tmp / "data").mkdir(exist_ok=True)
        train.to_parquet(str(tmp / "data" / "train-00000-of-00001.parquet"))
        dev.to_parquet(str(tmp / "data" / "dev-00000-of-00001.parquet"))
        (tmp / "stats.json").write_text(json.dumps(stats, indent=1, default=str))
        if write_card:
            write_dataset_card(tmp, stats, command=stats["command"])
    return PseudoLabels(train, dev, stats, out)


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


def _teacher_margin_bound(reranker, reference_size: int, n_docs: int) -> float | None:
    """The teacher's ``margin_bound`` (DEGENERATE_RULE), also for a spec not built yet."""
    if not isinstance(reranker, str):
        return getattr(reranker, "margin_bound", None)
    kind = reranker.partition(":")[0]
    if kind == "fusion":
        return FusionReranker.bound_of((1.0, 1.0), reference_size, n_docs)
    return 1.0 if kind == "monot5" else None


KEEP_HINT = "hf-dr label --keep-degenerate (PseudoLabelConfig(keep_degenerate=True)) keeps them"


def degenerate_summary(stats: dict) -> str | None:
    """One line on the degenerate queries of a labelling run (``stats``: its stats), or None when
    there are none: ``dropped 32 of 2,590 queries with degenerate labels: 30 with fewer than 11
    BM25 candidates (k + m), 2 with ...; hf-dr label --keep-degenerate (...) keeps them``."""
    d = stats.get("degenerate") or {}
    ids = d.get("ids") or {}
    if not ids:
        return None
    bound = d.get("margin_bound")
    fmt = {"need": d.get("min_candidates"), "bound": f"{bound:.3g}" if bound is not None else "?"}
    parts = [f"{n:,} {_REASON_TEXT.get(r, r).format(**fmt)}" for r, n in d.get("by_reason", {}).items()
             if r != "no_bm25_hit"]
    keepable = sum(1 for v in ids.values() if "no_bm25_hit" not in v)
    no_hit = len(ids) - keepable
    total = f"{stats.get('queries', 0):,}"
    if d.get("kept"):
        line = f"kept {keepable:,} of {total} queries with degenerate labels (keep_degenerate): {', '.join(parts)}"
        return line + (f"; left out {no_hit:,} without any BM25 hit" if no_hit else "") if keepable else \
            f"left out {no_hit:,} of {total} queries without any BM25 hit (degenerate labels)"
    if no_hit:
        parts.append(f"{no_hit:,} {_REASON_TEXT['no_bm25_hit']}")
    return (f"dropped {len(ids):,} of {total} queries with degenerate labels: {', '.join(parts)} (ids in stats.json)"
            + (f"; {KEEP_HINT}" if keepable else ""))


def _public_reranker_name(reranker, dense_name) -> str:
    """The reranker as the card names it: a local model folder by its name only."""
    name = _reranker_name(reranker, public_name(dense_name))
    kind, sep, spec = name.partition(":")
    return f"{kind}:{public_name(spec)}" if sep and kind in ("monot5", "cross-encoder") else name


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


def write_dataset_card(out: str | Path, stats: dict, command: str | None = None,
                       repo_id: str | None = None) -> Path:
    """Fill ``model_cards/dataset_pseudo_labels.md`` (huggingface_hub's jinja ``DatasetCard``)."""
    from ..hub.cards import write_card

    out = Path(out)
    cfg = stats["config"]
    source = Path(str(stats["source"]).rstrip("/")).name or str(stats["source"])
    card_data = dict(
        language="en", task_categories=["text-retrieval"], pretty_name=f"DoDress pseudo-labels for {source}",
        tags=["hf-dr", "pseudo-labels", "dodress", f"negatives-{cfg['negatives']}"],
        # two configs: the triplets and the dev set have different columns (one config cannot mix them)
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}]},
                 {"config_name": "dev", "data_files": [{"split": "dev", "path": "data/dev-*.parquet"}]}])
    fields = {k: v for k, v in stats.items() if k not in ("config", "cache")}
    fields = {k: v for k, v in fields.items() if k not in ("fingerprints", "command")}
    return write_card(out, "dataset_pseudo_labels", card_data, repo_type="dataset", source_name=source,
                      repo_id=repo_id or f"<user>/{source}-dodress-pseudo-labels",
                      command=command or stats.get("command") or "(library call)", **{**cfg, **fields})
