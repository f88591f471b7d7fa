"""The stages of ``hf-dr adapt``, in their order (:data:`STAGES`): each a function of typed inputs
and outputs, cached under its own key in the run's work folder. Each reads the run's resolved plan
(``run.cfg``, a :class:`~hf_dr.adaptation.plan.AdaptPlan`). None names a method nor a method's
option: what differs between methods is asked of the run's :class:`~hf_dr.adaptation.methods.Method`."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..hub.paths import hub_id, public_command, public_name
from ..stage_cache import StageCache, dataset_digest, digest
from .config import AdaptError
from .methods import DevSet, Method, Prepared, TrainInputs, get_method, registered_methods
from .plan import AdaptPlan
from .student import own_max_length, save_model, set_max_length, with_prompts
from .verdict import (CONTAINED_TAU, UNVERIFIED, VERDICT_RULE, decide, prediction_half_width, rank_agreement, resolution,
                      resolves_gain)

logger = logging.getLogger(__name__)

__all__ = ["STAGES", "METRICS", "AdaptRun", "Labels", "Trained", "Selection", "Evaluation", "start", "generate",
           "label", "judged_dev", "train", "select", "evaluate", "write", "results_table"]

#: the stages in their order ("generate": queries for a corpus that has none, or --queries generate)
STAGES = ("generate", "label", "train", "select", "evaluate", "write")
#: in the train stage's cache key: raised when what a training run computes changes, so a work folder
#: of before trains again (2: a copy of a query's positive is no in-batch negative; SPLADE's max-pooled
#: projection in training)
TRAINING_REVISION = 2
METRICS = ("ndcg@10", "recall@100")


@dataclass
class AdaptRun:
    """What every stage of one run reads (:func:`start`)."""

    cfg: AdaptPlan  # the resolved plan: the method's defaults applied, the derived values computed
    method: Method
    work: Path  # the work folder: stage caches, training runs
    cache: StageCache
    say: Callable[[str], None]
    data: Any  # hf_dr.data.BeirData: the corpus and the training queries (the test split is read last)
    queries: dict  # the training queries {qid: text} (never their labels)
    has_train_qrels: bool
    student: Any  # the untrained starting model: "step 0", the "before" row (never trained in place)
    max_length: int
    stages: dict = field(default_factory=dict)  # stage -> "computed" / "cached" / "reused"
    sources: dict | None = None  # generated queries: {qid: the document it was made from} (generate)
    query_source: dict | None = None  # where the training queries came from (metrics.json "queries", the card)
    started: float = field(default_factory=time.time)


def start(cfg: AdaptPlan, say: Callable[[str], None]) -> AdaptRun:
    """The run of a resolved plan (:func:`~hf_dr.adaptation.plan.resolve`): its work folder, the
    target corpus and training queries, the method's untrained starting model at its max length."""
    from ..data import beir

    work = cfg.work
    work.mkdir(parents=True, exist_ok=True)
    cache = StageCache(work / "cache")
    started = time.time()
    if cfg.generates_queries:  # the corpus only: the generate stage makes the training queries
        data, queries, has_train_qrels = beir.load_corpus_data(cfg.data), {}, False
    else:  # the corpus and the training queries only (never their labels; the test split is not read here)
        data, queries, has_train_qrels = beir.load_training_queries(cfg.data, split=cfg.split)
    method = get_method(cfg.method)
    student = with_prompts(cfg, method.load_student(cfg))
    student.encode_dtype = cfg.dtype
    max_length = cfg.max_length or own_max_length(student)
    set_max_length(student, max_length)
    return AdaptRun(cfg, method, work, cache, say, data, queries, has_train_qrels, student, max_length, started=started)


# ----------------------------------------------------------------------------- generate
def generate(run: AdaptRun) -> None:
    """The training queries made from the corpus (:func:`hf_dr.generation.generate_to_folder`), when
    the plan ``generates_queries``: ``run.queries`` and ``run.sources`` (each query's document),
    in a folder of the stage cache keyed on the corpus, the generator, the counts and the seed (a
    killed generation resumes from its finished shards). When it ``fills_queries``, the
    generated queries join the folder's own (as many as bring them to its
    ``default_num_queries``; ``run.sources`` holds the generated ones only, and the dev
    set is drawn from the folder's own). Otherwise records the folder's own queries."""
    from ..generation import DEFAULT_GENERATOR, generate_to_folder, get_generator

    cfg, say = run.cfg, run.say
    own = len(run.queries)
    fill = cfg.fills_queries
    total = cfg.num_queries or (max(0, cfg.default_num_queries - own) if fill else cfg.default_num_queries)
    if not (cfg.generates_queries or fill) or total == 0:
        if fill:
            say(f"generate: none (--queries fill: the folder's {own} queries reach the budget of "
                f"{cfg.default_num_queries})")
        run.query_source = {"source": "data", "queries": own}
        return
    t0 = time.time()
    spec = cfg.generator or DEFAULT_GENERATOR
    try:
        gen = get_generator(spec)
        key = {"corpus": run.data.corpus_fingerprint(), "generator": gen.identity(), "seed": cfg.seed,
               "queries_per_doc": cfg.queries_per_doc, "num_queries": None if cfg.queries_per_doc else total}
        folder = run.cache.path("generate", key, "")
        cached = (folder / "generation.json").is_file()
        res = generate_to_folder(run.data, folder, gen, queries_per_doc=cfg.queries_per_doc, num_queries=total,
                                 seed=cfg.seed, show_progress_bar=cfg.show_progress_bar, rank=0, world_size=1)
    except ValueError as e:  # a doc2query model that cannot be loaded, a damaged folder
        raise AdaptError(str(e)) from None
    m = res.manifest
    kind, _, ident = spec.partition(":")
    clash = sorted(set(res.queries) & set(run.queries))
    if clash:
        raise AdaptError(f"--queries fill: {len(clash)} generated query ids are ids of {cfg.data}'s own queries "
                         f"(e.g. {clash[0]!r}); rename them in its queries.jsonl or pass --queries auto")
    run.queries, run.sources = {**run.queries, **res.queries}, res.sources
    run.query_source = {"source": "data+generated" if fill else "generated",
                        "generator": f"{kind}:{public_name(ident)}" if ident else kind,
                        "queries": len(run.queries), **({"data_queries": own, "generated": len(res.queries)}
                                                        if fill else {}),
                        "queries_per_doc": m["queries_per_doc"],
                        "documents": m["documents"], "n_docs": m["n_docs"], "num_queries": m["num_queries"],
                        "seed": cfg.seed, "minutes": round((time.time() - t0) / 60, 2)}
    run.stages["generate"] = "cached" if cached else "computed"
    say(f"generate: {'cached' if cached else 'computed'} ({len(res.queries)} queries by {spec}, "
        f"{m['queries_per_doc']} per document for {m['documents']} of {m['n_docs']} documents"
        f"{f'; with the {own} of the folder: {len(run.queries)}' if fill else ''})")


# ----------------------------------------------------------------------------- label
@dataclass
class Labels:
    """The pseudo-labels: triplets of the training queries and the dev set of held-out ones."""

    train: Any  # datasets.Dataset of triplets
    train_key: str  # the hash of their content
    dev: DevSet
    stats: dict  # the labelling's stats.json
    teacher: str  # the reranker that labelled them
    minutes: float


def label(run: AdaptRun) -> Labels:
    """DoDress pseudo-relevance labels of the training queries
    (:func:`~hf_dr.labeling.pseudo_relevance.build_pseudo_labels`, its stages cached in the work
    folder's ``cache/``), or a ``hf-dr label`` folder given as ``cfg.labels``."""
    from datasets import load_from_disk

    from ..labeling.pseudo_relevance import build_pseudo_labels

    cfg, say, max_length = run.cfg, run.say, run.max_length
    t0 = time.time()
    if cfg.labels:
        lab = Path(cfg.labels).expanduser()
        train, dev = load_from_disk(str(lab)), load_from_disk(str(lab / "dev"))
        try:
            stats = json.loads((lab / "stats.json").read_text())
        except (OSError, ValueError):
            stats = {}
        run.stages["label"] = "reused"
        say(f"label: reusing {cfg.labels} ({len(train)} triplets, {len(dev)} dev rows)")
    else:
        dense, dense_name = _dense_teacher(run)
        pl_cfg = dataclasses.replace(cfg.label_config, dense_max_length=max_length if dense is not None else None)
        bm25 = None
        if cfg.bm25_index:
            from ..retrieval.saved import SavedIndex

            bm25 = SavedIndex(cfg.bm25_index).bm25_index(run.data)
        labels = build_pseudo_labels(run.data, run.work / "labels", pl_cfg, reranker=cfg.teacher, dense_encoder=dense,
                                     dense_name=dense_name, bm25=bm25, queries=run.queries, sources=run.sources,
                                     cache_dir=run.work / "cache",
                                     command=cfg.command, show_progress_bar=cfg.show_progress_bar, overwrite=True,
                                     inputs=[cfg.data, cfg.model, cfg.dense_teacher])
        train, dev, stats = labels.train, labels.dev, labels.stats
        computed = stats["cache"]["computed"]
        run.stages["label"] = "computed" if computed else "cached"
        say(f"label: {'cached' if not computed else 'computed'} ({len(train)} triplets from "
            f"{stats['train_queries']} queries, dev set of {stats['dev_queries']} queries)")
    minutes = (time.time() - t0) / 60
    if len(dev) == 0:
        raise AdaptError("the pseudo-labelled dev set is empty (too few training queries: the dev set takes at most "
                         "1/5 of them): the checkpoint cannot be chosen; label more queries")
    return Labels(train, dataset_digest(train), _pseudo_dev(dev, cfg.seed, max_length, run.cache), stats,
                  stats.get("reranker") or cfg.teacher, minutes)


def _pseudo_dev(rows, seed: int, max_length: int, cache) -> DevSet:
    """The pseudo-labelled dev set, its queries split by the seed (:func:`~.judged.split_judged`) into a
    selection half, which chooses the checkpoint when no query is judged, and a verdict half, which
    then states the verdict (:func:`_pseudo_gain`): the queries that chose are never those that judge."""
    from .judged import SPLIT_SALT, split_judged

    qids = rows["query_id"] if "query_id" in rows.column_names else []
    halves = split_judged(qids, seed)
    key = digest([dataset_digest(rows), {"pseudo_split": seed, "salt": SPLIT_SALT, "v": 1}])
    return DevSet(rows, key, max_length, cache, pseudo_halves=halves)


def judged_dev(run: AdaptRun, labels: Labels) -> Labels:
    """``labels`` with the user's judged dev queries (``qrels/dev.tsv``, those with at least one
    relevant document: all of them) added to its dev set, split by the seed into a selection half
    and a verdict half (:class:`~.judged.JudgedDev`, scored by full-corpus retrieval): the
    selection half chooses the checkpoint, the verdict half states the verdict. These queries are
    never training queries (:func:`hf_dr.data.beir.load_training_queries`); a dev query also judged
    in ``qrels/test.tsv``, or a ``--labels`` folder that trained on one, is refused."""
    import dataclasses

    from ..data import beir
    from .judged import JudgedDev, judged_key, split_judged

    cfg, say = run.cfg, run.say
    if cfg.split == "dev" or not beir.has_split(cfg.data, "dev"):
        return labels
    dev = beir.load_beir(cfg.data, split="dev")
    qrels = {str(q): {str(d): int(g) for d, g in docs.items()} for q, docs in dev.qrels.items()
             if any(int(g) > 0 for g in docs.values())}
    texts = dev.split_queries()
    qids = sorted(q for q in qrels if q in texts)  # none judged in qrels/test.tsv (plan.resolve)
    labelled = {str(q) for ds in (labels.train, labels.dev.rows) if "query_id" in ds.column_names
                for q in ds["query_id"]}
    trained_on = sorted(set(qids) & labelled)
    if trained_on:
        raise AdaptError(f"--labels {cfg.labels}: it labels {len(trained_on)} queries judged in qrels/dev.tsv "
                         "(they choose the checkpoint, and are never trained on); label again (hf-dr label leaves "
                         "them out now)")
    if not qids:
        say("select: qrels/dev.tsv judges no query with a relevant document: the pseudo-labelled dev set chooses")
        return labels
    select, verdict = split_judged(qids, cfg.seed)
    key = judged_key(run.data, qids, qrels, texts, cfg.seed)
    judged = JudgedDev(dev, select, verdict, cfg.seed, run.max_length, run.cache, key, cfg.show_progress_bar)
    say(f"select: {len(qids)} judged dev queries (qrels/dev.tsv), split by the seed: {len(select)} choose the "
        f"checkpoint, {len(verdict)} held out state the verdict; each scored by full-corpus retrieval")
    dev_set = dataclasses.replace(labels.dev, judged=judged, key=digest([labels.dev.key, key]))
    return dataclasses.replace(labels, dev=dev_set)


def _label_doc_vectors(run: AdaptRun, fingerprint: str, data=None) -> tuple[list[str], Any] | None:
    """``(doc_ids, matrix)``: the label stage's encoding of the corpus by the model of
    ``fingerprint`` (the fusion teacher's dense half: the student itself for a dense student) at
    the run's max length and precision, when it is in the work folder's cache; else None."""
    import numpy as np

    from ..labeling.context import DOC_EMBEDDINGS_STAGE, LabelKeys
    from ..precision import dtype_name as precision_name
    from ..precision import encoding_dtype

    data = data if data is not None else run.data
    key = LabelKeys.dense_of(data.corpus_fingerprint(), fingerprint, run.max_length,
                             precision_name(encoding_dtype(run.student)))
    p = run.cache.path(DOC_EMBEDDINGS_STAGE, key, ".npy")
    if not p.is_file():
        return None
    mat = np.load(p, mmap_mode="r")
    ids = data.doc_ids()
    return (ids, mat) if mat.ndim == 2 and mat.shape[0] == len(ids) else None


def _dense_teacher(run: AdaptRun):
    """The dense model of the fusion teacher and SimANS, and its name: ``--dense-teacher``, else the
    student when it is dense, else (when one is needed) the quickstart's model."""
    from ..models import default_model_path, load_encoder

    cfg = run.cfg
    if cfg.dense_teacher:
        dense = load_encoder(cfg.dense_teacher)
        dense.encode_dtype = cfg.dtype
        if cfg.max_length:
            set_max_length(dense, run.max_length)
        return dense, cfg.dense_teacher
    if not getattr(run.student, "output_is_sparse", False):
        return run.student, cfg.model
    if cfg.needs_dense_teacher:  # a sparse student: the quickstart's dense model
        dense_name = default_model_path()
        run.say("label: the dense half of the teacher / SimANS is all-MiniLM-L6-v2, the quickstart's model "
                "(--dense-teacher to change)")
        dense = load_encoder(dense_name)
        if cfg.max_length:
            set_max_length(dense, run.max_length)
        return dense, dense_name
    return None, None


# ----------------------------------------------------------------------------- train
@dataclass
class Trained:
    """The candidates of the selection: the starting model ("step 0") and the checkpoints of training."""

    start_dev: float  # the starting model's dev nDCG@10 (selection's: judged when there are judged dev queries)
    start_fp: str  # its fingerprint
    init: Any  # the model training started from (the student, or the method's preparation of it)
    prepared: Prepared
    record: dict  # the training's record: {"dev": {step: dev nDCG@10}, ...} (its DONE.json)
    run_dir: Path  # the training's folder, named by the hash of its inputs
    cached: bool  # the run was finished before (DONE.json)
    start_scores: dict = field(default_factory=dict)  # DevSet.scores of the starting model
    containment: dict = field(default_factory=dict)  # does the teacher contain the student (_containment)


def train(run: AdaptRun, labels: Labels) -> Trained:
    """The starting model scored on the dev set (step 0); the method's preparation; its training on
    a copy of the model, in a folder keyed on (method, starting weights, labels, hyper-parameters)
    whose checkpoints a crashed run resumes from."""
    from ..fingerprints import model_fingerprint

    cfg, method, student, say = run.cfg, run.method, run.student, run.say
    start_fp = model_fingerprint(student)
    label_vectors = _label_doc_vectors(run, start_fp)  # a dense student labelled with itself: encoded already
    start_scores = labels.dev.scores("dev_step0", student, start_fp, doc_vectors=_as_vectors(label_vectors),
                                     corpus=label_vectors)
    dev0 = float(start_scores["ndcg@10"])
    say(f"dev: starting model nDCG@10 = {dev0:.4f} (step 0{', judged dev queries' if labels.dev.judged else ''})")
    containment = _containment(run, labels, student, start_fp, start_scores)

    t1 = time.time()
    prepared = method.prepare(cfg, student, run.data, run.max_length, run.work, say)
    if prepared.status:
        run.stages[method.name] = prepared.status
    # the user's prompts on a model the method made from the student (cai's): trained and scored on the dev set as
    # it ships (base.Method.save applies them), as the student is (before 2026-12-02 a prepared model
    # was scored without them)
    init = prepared.model if prepared.model is student else with_prompts(cfg, prepared.model)
    label_key = {"train": labels.train_key, "dev": labels.dev.key} if method.trains_on_triplets \
        else {"dev": labels.dev.key}
    params = {"method": cfg.method, "init": start_fp if init is student else model_fingerprint(init),
              "labels": label_key, "max_steps": cfg.max_steps, "batch_size": cfg.batch_size, "lr": cfg.learning_rate,
              "max_length": run.max_length, "eval_steps": cfg.eval_steps, "seed": cfg.seed, **cfg.dtype_key,
              "revision": TRAINING_REVISION, **method.train_key(cfg)}
    run_dir = run.work / f"train-{cfg.method}-{digest(params)}"
    done = run_dir / "DONE.json"
    cached = done.is_file()
    if cached:
        record = json.loads(done.read_text())
        run.stages["train"] = "cached"
        say(f"train: cached ({cfg.max_steps} steps, {run_dir.name})")
    else:
        inputs = TrainInputs(labels.train, labels.train_key, labels.dev, run.data, run_dir, run.max_length,
                             run.cache, say)
        # training works on a copy: ``student`` stays the untrained starting model
        record = method.train(cfg, copy.deepcopy(init) if init is student else init, inputs)
        record["minutes"] = round((time.time() - t1) / 60, 2)
        run.stages["train"] = "computed"
    return Trained(dev0, start_fp, init, prepared, record, run_dir, cached, start_scores, containment)


def _as_vectors(found):
    """``{doc_id: vector}`` of :func:`_label_doc_vectors`' result (None stays None)."""
    if found is None:
        return None
    ids, mat = found
    return {d: mat[i] for i, d in enumerate(ids)}


def _containment(run: AdaptRun, labels: Labels, student, start_fp: str, start_scores: dict) -> dict:
    """Whether the teacher contains the starting model (its dev labels then favour it): a fusion
    teacher whose dense half is the student, or the dense model the student is built on (recorded
    identity: :meth:`~hf_dr.adaptation.methods.Method.base_fingerprints`), or ranks the pseudo-dev
    candidates as the student does (mean Kendall tau >= :data:`~.verdict.CONTAINED_TAU`: behaviour,
    for a student built on it that records no identity, e.g. a DDR REM whose DAM was made from it)."""
    label_fp = (labels.stats.get("fingerprints") or {}).get("dense_model")
    bases = run.method.base_fingerprints(run.cfg, student)
    # the recorded identities (metrics.json): the student's, the dense models it is built on, the teacher's dense half
    out = {"contained": False, "by": None, "threshold": CONTAINED_TAU, "kendall_tau": None, "top10_overlap": None,
           "student_fingerprint": start_fp, "base_fingerprints": bases, "teacher_dense_fingerprint": label_fp}
    if not str(labels.teacher).startswith("fusion"):
        return {**out, "why": "the teacher has no dense half"}
    if not label_fp:
        return {**out, "why": "the labels do not record their dense model"}
    if label_fp == start_fp:
        return {**out, "contained": True, "by": "identity", "kendall_tau": 1.0, "top10_overlap": 1.0,
                "why": "the teacher's dense half is the starting model"}
    if label_fp in bases:
        return {**out, "contained": True, "by": "identity",
                "why": "the starting model is built on the teacher's dense half"}
    dense = _teacher_dense_model(run, label_fp)
    if dense is None:
        return {**out, "why": "the teacher's dense model is not at hand (--dense-teacher): its agreement with the "
                              "student was not measured"}
    scores = labels.dev.scores("dev_teacher_dense", dense, label_fp,
                               doc_vectors=_as_vectors(_label_doc_vectors(run, label_fp)))
    agreement = rank_agreement(start_scores["pseudo_run"], scores["pseudo_run"])
    tau = agreement["kendall_tau"]
    contained = tau is not None and tau >= CONTAINED_TAU
    run.say(f"dev: the starting model ranks the dev candidates like the teacher's dense half with mean Kendall tau "
            f"{'n/a' if tau is None else format(tau, '.3f')} ({'>=' if contained else '<'} {CONTAINED_TAU}: "
            f"{'contained' if contained else 'not contained'})")
    return {**out, "contained": contained, "by": "behaviour" if contained else None, "kendall_tau": tau,
            "top10_overlap": agreement["top10_overlap"],
            "why": f"mean Kendall tau over {agreement['queries']} pseudo-dev queries' candidates"}


def _teacher_dense_model(run: AdaptRun, fingerprint: str):
    """The labels' dense model when at hand (``--dense-teacher``, else the quickstart's model that
    a sparse student's labels use) and its weights are those recorded (``fingerprint``); else None."""
    from ..fingerprints import model_fingerprint
    from ..models import default_model_path, load_encoder

    for name in dict.fromkeys(x for x in (run.cfg.dense_teacher, default_model_path()) if x):
        try:
            model = load_encoder(name)
        except Exception:  # noqa: BLE001 (not at hand: not measured)
            continue
        model.encode_dtype = run.cfg.dtype
        set_max_length(model, run.max_length)
        if model_fingerprint(model) == fingerprint:
            return model
    return None


# ----------------------------------------------------------------------------- select
@dataclass
class Selection:
    """The model chosen on the dev set, the last checkpoint when it is another, and the verdict."""

    step: int  # 0: the starting model was kept
    dev: float  # its dev nDCG@10 (selection's)
    folder: Path  # its saved model
    kept_start: bool
    teacher_has_student: bool  # the teacher contains the starting model (_containment)
    dev_scores: dict  # {"0": ..., "STEP": ...} (selection's nDCG@10)
    last_step: int
    last_dir: Path  # the last checkpoint's model (when it is not the selected one)
    start_is_candidate: bool = True  # False: step 0 shown but no candidate (contained, no judged dev query)
    verdict: str = ""  # one of hf_dr.adaptation.verdict.VERDICTS
    verdict_sentence: str = ""  # the verdict with its numbers
    judged: dict | None = None  # the held-out judged queries' comparison (verdict.resolution + start / selected)
    pseudo: dict = field(default_factory=dict)  # pseudo-dev nDCG@10 per step, of the start and the selected model
    fell: dict | None = None  # generated queries, contained teacher: the best checkpoint's significant fall (verdict.decide)
    unverified: dict | None = None  # {"step", "why", "folder"}: a trained checkpoint kept beside the start, unverified
    word: str = ""  # Sentence Transformers' WIN / MARGINAL / REGRESSION (verdict.verdict_word)
    best_step: int = 0  # the best trained checkpoint (the output, or what the start was kept over)
    best_dir: Path | None = None  # its saved model


def select(run: AdaptRun, labels: Labels, trained: Trained) -> Selection:
    """The best checkpoint by dev nDCG@10, the untrained starting model included as "step 0", and
    whether it replaces the start. With judged dev queries (``qrels/dev.tsv``) their selection half
    chooses (step 0 always competes), and the held-out verdict half states the verdict
    (:func:`_judged_verdict`): a chosen checkpoint is output only when it shows it better by at least
    the 95% prediction interval for as many other queries, else the start is output and the
    checkpoint kept beside it as unverified (or not kept, when it shows it worse by more than it
    resolves). Without them, a trained checkpoint
    replaces the start only when evidence that does not contain the student says it is better: the
    pseudo-labels of a teacher that does not contain it (:func:`_containment`), by at least the 95%
    prediction interval of their held-out queries (:func:`_pseudo_gain`); otherwise the start is output and the best checkpoint is
    kept beside it as unverified. Then the verdict
    (:func:`hf_dr.adaptation.verdict.decide`). Finishes the training folder (:func:`_finish_training`)."""
    say, record, dev0 = run.say, trained.record, trained.start_dev
    judged = bool(labels.dev.judged)
    dev_scores = {"0": dev0, **{str(k): v for k, v in record["dev"].items()}}
    best_step, best = max(((int(s), v) for s, v in record["dev"].items()), key=lambda x: (x[1], -x[0]),
                          default=(0, float("-inf")))
    contained = bool(trained.containment.get("contained"))
    start_is_candidate = judged or not contained
    if contained and record["dev"]:
        say(f"select: the teacher contains the starting model ({trained.containment.get('why')}), so its pseudo dev "
            "labels favour it: " + ("the judged dev queries choose, step 0 included" if judged else
                                    "they cannot compare a trained checkpoint with it"))
    won = bool(record["dev"]) and (best > dev0 or not start_is_candidate)
    best_dir = trained.run_dir / "selected"  # the best trained checkpoint's model (the Trainer's choice)
    fell = _fell(run, labels, trained, best_step) if contained and not judged and record["dev"] else None
    comparison = _judged_verdict(run, labels, trained, best_dir, best_step if record["dev"] else 0) if judged else None
    pseudo_gain = _pseudo_gain(run, labels, trained, best_step) if not judged and not contained and won else None
    unverified = None
    if judged:
        res = comparison["resolution"]
        worse = won and res is not None and comparison["difference"] < -res
        # the claim is about other queries (the user's next ones): past the 95% prediction interval, as without
        # judged queries (a confidence-interval bar let a test loss through at the default budgets, 2026-12-06)
        kept_start = not (won and resolves_gain(comparison))
        if worse:
            say(f"select: step {best_step} won on the {len(labels.dev.judged.select)} judged queries that choose, but "
                f"falls below the starting model on the {comparison['queries']} held-out ones by "
                f"{-comparison['difference']:.4f} (more than ±{res:.4f}): keeping the starting model")
        elif won and kept_start and (best_dir / "config.json").is_file():
            pred = prediction_half_width(comparison)
            unverified = {"step": best_step, "why": (
                f"it won on the {len(labels.dev.judged.select)} judged queries that chose it, but its difference on "
                f"the {comparison['queries']} held-out ones ({comparison['difference']:+.4f}) is less than the 95% "
                f"prediction interval for as many other queries (±{'n/a' if pred is None else format(pred, '.4f')}; "
                f"confidence ±{'n/a' if res is None else format(res, '.4f')})")}
    else:
        kept_start = not (won and resolves_gain(pseudo_gain))
        if fell is not None:
            say(f"select: the queries were generated and the best checkpoint (step {best_step}) falls below the "
                f"starting model on the pseudo-dev set by {-fell['difference']:.4f}, more than its {fell['queries']} "
                f"queries resolve (±{fell['resolution']:.4f}): keeping the starting model")
        if kept_start and record["dev"] and (best_dir / "config.json").is_file():
            unverified = {"step": best_step, "why": _unverified_why(contained, won, pseudo_gain)}
    if unverified is not None:
        say(f"select: keeping the starting model; step {best_step} is kept beside it as unverified: "
            f"{unverified['why']}")
    if kept_start and not unverified and won is False and record["dev"]:
        say(f"select: no checkpoint beats the starting model on the dev set (best {best:.4f} at step {best_step} "
            f"<= {dev0:.4f}): keeping the starting model")
    step, dev, folder = (0, dev0, _start_folder(run, trained)) if kept_start else (best_step, best, best_dir)
    if not kept_start:
        say(f"select: step {best_step} (dev nDCG@10 {best:.4f}; {dev0:.4f} at step 0)")
    last_step, last_dir = _finish_training(run, trained, step)
    pseudo = _pseudo_report(trained, labels, kept_start, step, judged, pseudo_gain)
    if comparison is not None and not kept_start and comparison.get("selected_pseudo") is not None:
        pseudo["selected"] = comparison["selected_pseudo"]
    if unverified is not None:
        unverified["folder"] = str(best_dir)
    verdict, sentence = decide(kept_start, comparison, contained and not judged, pseudo, fell, unverified)
    from .verdict import verdict_word, word_line

    word = verdict_word(verdict, unverified is not None)
    say(f"verdict: {sentence}")
    say(word_line(word))
    return Selection(step, dev, folder, kept_start, contained, dev_scores, last_step, last_dir, start_is_candidate,
                     verdict, sentence, comparison, pseudo, fell, unverified, word, best_step if record["dev"] else 0,
                     best_dir if record["dev"] and (best_dir / "config.json").is_file() else None)


def _unverified_why(contained: bool, won: bool, gain: dict | None) -> str:
    """Why no evidence independent of the student says the best trained checkpoint is better."""
    if contained:
        return ("the teacher contains the starting model, so its pseudo-labels cannot compare a trained checkpoint "
                "with it, and no query is judged")
    if not won:
        return "it did not beat the starting model on the pseudo-dev queries that choose, and no query is judged"
    if gain is None:
        return "no pseudo-dev comparison with the starting model could be made, and no query is judged"
    if not gain["queries"]:
        return ("the pseudo-dev set holds too few queries to hold any out of the choice (raise --dev-queries), "
                "and no query is judged")
    pred = prediction_half_width(gain)
    return (f"its pseudo-dev gain ({gain['difference']:+.4f}) is less than the 95% prediction interval of the "
            f"{gain['queries']} held-out pseudo-dev queries (±{'n/a' if pred is None else format(pred, '.4f')}; "
            f"confidence ±{'n/a' if gain['resolution'] is None else format(gain['resolution'], '.4f')}): pseudo-labels "
            "carry the teacher's errors, so their gain must show on as many new queries; and no query is judged")


def _start_folder(run: AdaptRun, trained: Trained) -> Path:
    """The starting model saved whole (the output when it is kept)."""
    folder = run.work / f"start-{trained.start_fp[:16]}"
    if not (folder / "config.json").is_file():
        save_model(run.student, folder)
    return folder


def _finish_training(run: AdaptRun, trained: Trained, step: int) -> tuple[int, Path]:
    """``(last_step, last_dir)``: the last checkpoint's model saved when it is not the output
    (for the test split's report of what selection avoided), ``DONE.json`` written, the
    checkpoints removed (the selected weights are saved)."""
    record, run_dir = trained.record, trained.run_dir
    last_step = max((int(x) for x in record["dev"]), default=0)
    last_dir = run_dir / "last"
    if not trained.cached:
        from ..io import atomic_write_json

        if last_step and last_step != step:
            run.method.save_checkpoint(run.cfg, trained.init, run_dir / f"checkpoint-{last_step}", last_dir)
        atomic_write_json(run_dir / "DONE.json", record, indent=1)
        for c in run_dir.glob("checkpoint-*"):
            shutil.rmtree(c, ignore_errors=True)
    return last_step, last_dir


def _pseudo_report(trained: Trained, labels: Labels, kept_start: bool, step: int, judged: bool,
                   gain: dict | None) -> dict:
    """The pseudo-dev nDCG@10 of the start, of the output and of every step (and, when it decided,
    the best checkpoint's paired comparison with the start there)."""
    record, dev0 = trained.record, trained.start_dev
    # int steps: a cached record comes back from DONE.json with str keys
    pseudo_steps = {int(k): v for k, v in (record.get("dev_pseudo") or ({} if judged else record["dev"])).items()}
    start_pseudo = trained.start_scores.get("pseudo_ndcg@10", dev0 if not judged else None)
    out = {"start": start_pseudo, "selected": start_pseudo if kept_start else pseudo_steps.get(step),
           "steps": {"0": start_pseudo, **{str(k): v for k, v in pseudo_steps.items()}}}
    if gain is not None:
        out.update({k: gain[k] for k in ("difference", "resolution", "p_value", "queries", "compared_step")})
        out.update({k: gain.get(k) for k in ("sd", "df", "spread_queries", "method", "accounts_for", "select_count",
                                             "per_query_differences")})
        out.update({"held_out_start": gain.get("start"), "held_out_selected": gain.get("selected")})
    return out


def _pseudo_gain(run: AdaptRun, labels: Labels, trained: Trained, best_step: int) -> dict | None:
    """No judged query, a teacher that does not contain the start: the best trained checkpoint's
    paired comparison with the start (:func:`~.verdict.resolution`) on the held-out verdict half of
    the pseudo-dev queries (the other half chose it, so the choice does not bias it), with ``start``
    and ``selected`` (their nDCG@10 there); or None when it has no saved model."""
    best_dir = trained.run_dir / "selected"
    start_pq = trained.start_scores.get("pseudo_per_query")
    if not start_pq or not (best_dir / "config.json").is_file():
        return None
    chosen = labels.dev.scores("dev_selected", _load_output(run, best_dir))["pseudo_per_query"]
    held_out = labels.dev.pseudo_verdict
    if held_out is None:  # an unsplit dev set (one query): nothing held out states a verdict
        return {**resolution({}, {}), "compared_step": best_step, "start": None, "selected": None,
                "accounts_for": "nothing: the pseudo-dev set holds too few queries to hold any out"}
    after, before = ({q: pq[q] for q in held_out if q in pq} for pq in (chosen, start_pq))
    candidates = 1 + len(trained.record["dev"])
    select = labels.dev.pseudo_halves[0]
    chose = tuple({q: pq[q] for q in select if q in pq} for pq in (chosen, start_pq))

    def mean(x):
        return float(sum(x.values()) / len(x)) if x else None

    return {**resolution(after, before, spread_from=chose), "compared_step": best_step, "start": mean(before),
            "selected": mean(after), "select_count": len(select), "per_query_differences": _differences(
                (after, before), chose),
            "accounts_for": (f"the sampling of the {len(held_out)} held-out pseudo-dev queries (paired t, 95%; the "
                             f"per-query spread estimated on them and the {len(select)} that chose, each about its "
                             f"own mean): the checkpoint was chosen among {candidates} candidates on those "
                             f"{len(select)} other pseudo-dev queries, whose mean difference is not used, so the choice "
                             "does not bias it; not the teacher's errors, so a checkpoint is output only on a gain of "
                             "at least the 95% prediction interval (as many new queries)")}


def _differences(held_out: tuple[dict, dict], chose: tuple[dict, dict]) -> dict:
    """metrics.json's per-query differences (compared model minus start) of the ``verdict`` half and
    the ``select`` half: any interval rule can be recomputed from them without a run."""
    return {part: {q: a[q] - b[q] for q in sorted(set(a) & set(b))}
            for part, (a, b) in (("verdict", held_out), ("select", chose))}


def _judged_verdict(run: AdaptRun, labels: Labels, trained: Trained, best_dir: Path, best_step: int) -> dict:
    """The best trained checkpoint (the output, or what the start beat) against the starting model on
    the held-out verdict half of the judged dev queries, by full-corpus retrieval: their
    :func:`~.verdict.resolution`, ``start`` / ``selected`` nDCG@10, the ids of both halves and what the
    interval accounts for. The verdict half scores these two models only."""
    from .judged import VERDICT

    jd = labels.dev.judged
    start = jd.scores(VERDICT, run.student, trained.start_fp, _label_doc_vectors(run, trained.start_fp, jd.data))
    start_chose = trained.start_scores.get("judged_per_query") or {}
    chosen, chosen_chose, pseudo = start, start_chose, None
    if (best_dir / "config.json").is_file() and trained.record["dev"]:
        model = _load_output(run, best_dir)
        scores = labels.dev.scores("dev_selected", model)
        chosen = jd.scores(VERDICT, model)
        chosen_chose = scores.get("judged_per_query") or {}
        pseudo = scores.get("pseudo_ndcg@10")
    candidates = 1 + len(trained.record["dev"])
    chose = (chosen_chose, start_chose)
    return {**jd.describe(), **resolution(chosen["per_query"], start["per_query"], spread_from=chose),
            "start": start["ndcg@10"], "selected": chosen["ndcg@10"],
            "compared_step": best_step if trained.record["dev"] else 0, "select_count": len(jd.select),
            "selected_pseudo": pseudo,
            "per_query_differences": _differences((chosen["per_query"], start["per_query"]), chose),
            "accounts_for": (f"the sampling of the {len(jd.verdict)} held-out judged queries (paired t, 95%; the "
                             f"per-query spread estimated on them and the {len(jd.select)} that chose, each about its "
                             f"own mean): the checkpoint was chosen among {candidates} candidates on those "
                             f"{len(jd.select)} other judged queries, whose mean difference is not used, so the choice "
                             "does not bias it; not the training seed, nor queries unlike the judged ones")}


def _fell(run: AdaptRun, labels: Labels, trained: Trained, best_step: int) -> dict | None:
    """Generated training queries and a teacher that contains the starting model (no judged dev query):
    the pseudo-dev set cannot show a checkpoint better than the start (its labels favour the start), but
    it can show one worse. The best trained checkpoint's paired comparison with the start on the
    pseudo-dev queries (:func:`hf_dr.adaptation.verdict.resolution`) when it falls below the start by
    more than they resolve, else None. Real queries are exempt: with them, measured runs whose pseudo-dev
    score fell this way gained on the test split (docs/adapt.md); with generated ones, every measured
    run whose score fell lost."""
    if (run.query_source or {}).get("source") != "generated":
        return None
    best_dir = trained.run_dir / "selected"
    start_pq = trained.start_scores.get("pseudo_per_query")
    if not start_pq or not (best_dir / "config.json").is_file():
        return None
    chosen = labels.dev.scores("dev_selected", _load_output(run, best_dir))
    cmp = resolution(chosen["pseudo_per_query"], start_pq)
    if cmp["resolution"] is None or not cmp["difference"] < -cmp["resolution"]:
        return None
    return {**cmp, "start": trained.start_scores.get("pseudo_ndcg@10"), "selected": chosen.get("pseudo_ndcg@10"),
            "compared_step": best_step}


def _load_output(run: AdaptRun, folder: Path):
    """A saved model of the run (the selected one, a checkpoint), with the run's prompts and precision."""
    from ..models import load_encoder

    model = with_prompts(run.cfg, load_encoder(folder))
    model.encode_dtype = run.cfg.dtype
    return model


# ----------------------------------------------------------------------------- evaluate
@dataclass
class Evaluation:
    """Before / after on the test split (None without its qrels), each ``{"aggregate", "per_query",
    "n_queries"}``; the paired t-test on nDCG@10; the last checkpoint's scores when not selected, and
    the best trained checkpoint's when the starting model is the output (``best``: what the verdict
    compared the start with); ``per_query``: each of these models' test nDCG@10 by query id (None for
    a model not evaluated), for a paired comparison of runs made apart (``benchmarks/defaults.py``)."""

    labelled: bool
    before: dict | None = None
    after: dict | None = None
    last: dict | None = None
    t_statistic: float | None = None
    p_value: float | None = None
    best: dict | None = None
    per_query: dict | None = None  # test nDCG@10 per query: {"metric", "before", "after", "last_checkpoint", "best_checkpoint"}


def evaluate(run: AdaptRun, chosen: Selection) -> Evaluation:
    """The starting and the selected model on the test split, read only now (when it has qrels),
    each evaluation cached by the model's weights and the test data."""
    from ..data import beir

    cfg, say = run.cfg, run.say
    if not beir.has_split(cfg.data, "test"):
        say("evaluate: no qrels/test.tsv: no labelled evaluation possible (the pseudo-labelled dev set is the only "
            "yardstick)")
        return Evaluation(False)
    test = beir.load_beir(cfg.data, split="test")

    def loaded(folder):
        return _load_output(run, folder)

    before = _evaluate_cached(run.cache, run.student, test, _encoded(run, run.student, test))
    if chosen.kept_start:
        after = before
    else:
        model = loaded(chosen.folder)
        after = _evaluate_cached(run.cache, model, test, _encoded(run, model, test))
    t_stat, p_value = _ttest(after, before)
    last_eval = best_eval = None
    say(f"evaluate: test nDCG@10 {before['aggregate']['ndcg@10']:.4f} -> {after['aggregate']['ndcg@10']:.4f} "
        f"(p = {p_value:.3g}, {after['n_queries']} queries)")
    last = None
    if chosen.last_step != chosen.step and (chosen.last_dir / "config.json").is_file():
        model = loaded(chosen.last_dir)
        last_eval = _evaluate_cached(run.cache, model, test, _encoded(run, model, test))
        res = last_eval["aggregate"]
        last = {"step": chosen.last_step, **res}
        say(f"evaluate: the last checkpoint (step {chosen.last_step}, not selected) would score test nDCG@10 "
            f"{res['ndcg@10']:.4f}")
    best = None
    if chosen.kept_start and chosen.best_dir is not None:  # after the choice: what the start was kept over
        model = loaded(chosen.best_dir)
        best_eval = _evaluate_cached(run.cache, model, test, _encoded(run, model, test))
        res = best_eval["aggregate"]
        best = {"step": chosen.best_step, **res}
        say(f"evaluate: the best trained checkpoint (step {chosen.best_step}, not output) would score test nDCG@10 "
            f"{res['ndcg@10']:.4f}")
    per_query = {"metric": "ndcg@10", **{name: e["per_query"]["ndcg@10"] if e else None for name, e in
                                         (("before", before), ("after", after), ("last_checkpoint", last_eval),
                                          ("best_checkpoint", best_eval))}}
    return Evaluation(True, before, after, last, t_stat, p_value, best, per_query)


def _encoded(run: AdaptRun, model, data):
    """``(doc_ids, matrix)``: ``data``'s corpus as ``model`` has encoded it already in this work folder
    (the label stage's encoding of the fusion teacher's dense half, or a judged dev evaluation's,
    :func:`~.judged.corpus_vectors`), else None (then encoded by the test evaluation)."""
    from ..fingerprints import model_fingerprint
    from .judged import cached_corpus_vectors

    fp = model_fingerprint(model)
    return _label_doc_vectors(run, fp, data) or cached_corpus_vectors(run.cache, data, model, fp, run.max_length)


def _evaluate_cached(cache: StageCache, model, test, doc_vectors=None) -> dict:
    """``{"aggregate", "per_query", "n_queries"}`` of ``model`` on the test split (the one
    :func:`hf_dr.evaluation.evaluate` path), cached by the model's weights and the test data.
    ``doc_vectors``: ``(doc_ids, matrix)``, the corpus encoded by this model already (not again)."""
    from ..fingerprints import model_fingerprint
    from ..factory import evaluate_model
    from ..precision import dtype_name as precision_name
    from ..precision import encoding_dtype

    corpus_fp = test.corpus_fingerprint()
    dt = precision_name(encoding_dtype(model))
    key = {"model": model_fingerprint(model), "corpus": corpus_fp, "qrels": digest(test.qrels),
           "queries": digest(test.split_queries()), "metrics": list(METRICS), **({"dtype": dt} if dt != "fp32" else {})}

    def run():
        res, _ = evaluate_model(model, test, metrics=METRICS, batch_size=32, show_progress_bar=False,
                                doc_vectors=doc_vectors)
        return {"aggregate": res.aggregate, "per_query": res.per_query, "n_queries": res.n_queries}

    return cache.json("test_eval", key, run)


def _ttest(after: dict, before: dict) -> tuple[float, float]:
    from ..evaluation import EvalResult, paired_ttest

    a = EvalResult(after["aggregate"], after["per_query"], after["n_queries"])
    b = EvalResult(before["aggregate"], before["per_query"], before["n_queries"])
    try:
        return paired_ttest(a, b, "ndcg@10")
    except ValueError:  # fewer than two test queries
        return 0.0, 1.0


# ----------------------------------------------------------------------------- write
def write(run: AdaptRun, labels: Labels, trained: Trained, chosen: Selection, evaluation: Evaluation) -> dict:
    """``OUT/model`` (the Hub folder of the model's kind, as ``hf-dr push`` writes it), ``OUT/README.md``
    and ``OUT/metrics.json``, written whole; returns the metrics."""
    metrics = _metrics(run, labels, trained, chosen, evaluation)
    out = Path(run.cfg.output).expanduser()
    _write_output(run, out, chosen.folder, metrics, evaluation.after,
                  Path(chosen.unverified["folder"]) if chosen.unverified else None)
    run.say(f"wrote {out} (model/, README.md, metrics.json)")
    return metrics


def _metrics(run: AdaptRun, labels: Labels, trained: Trained, chosen: Selection, ev: Evaluation) -> dict:
    """metrics.json: what was run, before / after, the selection and the budget."""
    cfg, method, record, stats = run.cfg, run.method, trained.record, labels.stats
    below = ev.after["aggregate"]["ndcg@10"] < ev.before["aggregate"]["ndcg@10"] if ev.before is not None else None
    return {
        "method": cfg.method, "method_description": method.description,
        "model": public_name(cfg.model), "data": public_name(cfg.data), "split": cfg.split,
        "training_queries_have_qrels": run.has_train_qrels, "queries": run.query_source, "teacher": labels.teacher,
        "dense_teacher": public_name(cfg.dense_teacher) if cfg.dense_teacher else stats.get("dense_model"),
        "labels": public_name(cfg.labels) if cfg.labels else None,
        **({"bm25_index": public_name(cfg.bm25_index)} if cfg.bm25_index else {}),
        "labelled_evaluation": ev.labelled,
        "before": ev.before["aggregate"] if ev.before else None, "after": ev.after["aggregate"] if ev.after else None,
        "test_queries": ev.after["n_queries"] if ev.after else None,
        "t_statistic": ev.t_statistic, "p_value": ev.p_value,
        "dev": chosen.dev_scores, "selected_step": chosen.step, "selected_dev_ndcg@10": chosen.dev,
        "kept_starting_model": chosen.kept_start, "below_zero_shot": below,
        # the verdict (hf_dr.adaptation.verdict): one of its three phrases, and the numbers behind it
        "verdict": chosen.verdict, "verdict_sentence": chosen.verdict_sentence,
        "verdict_word": chosen.word,  # Sentence Transformers' WIN / MARGINAL / REGRESSION (verdict.verdict_word)
        "verdict_interval": _verdict_interval(chosen),
        "verdict_rule": VERDICT_RULE,  # the bar a held-out gain passed, or did not, for a trained checkpoint to ship
        # a trained checkpoint kept beside the starting model (OUT/unverified), for want of independent evidence
        "unverified": ({"step": chosen.unverified["step"], "why": chosen.unverified["why"], "folder": "unverified"}
                       if chosen.unverified else None),
        "selection_on": labels.dev.source,  # "judged" (qrels/dev.tsv) or "pseudo"
        "judged_dev": _judged_report(labels, chosen, record),
        "pseudo_dev_fall": chosen.fell,  # generated queries, contained teacher: why the start was kept (or None)
        # no judged query: the pseudo-dev queries that chose the checkpoint and those that stated the verdict
        "pseudo_dev_split": labels.dev.describe_pseudo_split(),
        "dev_pseudo": chosen.pseudo.get("steps"),
        "teacher_contains_student": chosen.teacher_has_student,
        "containment": trained.containment,
        "starting_model_is_candidate": chosen.start_is_candidate,
        # the test score of the last checkpoint when selection chose another: how selection fared
        "last_checkpoint": ev.last,
        # the test score of the best trained checkpoint when the starting model is the output (unverified, or lost)
        "best_checkpoint": ev.best,
        # test nDCG@10 of each model above by query id: paired tests between runs (e.g. two values of a flag)
        "test_per_query": ev.per_query,
        # the methods' own entries (Method.budget_fields): this run's method's values, None for the others
        "budget": {"steps": cfg.max_steps, "eval_steps": cfg.eval_steps, "batch_size": cfg.batch_size,
                   "learning_rate": cfg.learning_rate, "max_length": run.max_length,
                   **{k: None for m in registered_methods() for k in m.budget_fields}, **method.budget(cfg, record),
                   "dtype": cfg.dtype_name, "label_minutes": round(labels.minutes, 2),
                   "train_minutes": record.get("minutes", 0.0),
                   "minutes": round((time.time() - run.started) / 60, 2)},
        "label_stats": {k: stats.get(k) for k in ("train_queries", "dev_queries", "triplets", "dev_rows",
                                                  "queries_without_bm25_hits", "sources_added", "dtype") if k in stats},
        "negatives": (stats.get("config") or {}).get("negatives", cfg.negatives),
        # an entry per reporting method (Method.report), None but for this run's
        **{m.name: None for m in registered_methods() if m.reports},
        **({method.name: method.report(cfg, run.student, trained.prepared)} if method.reports else {}),
        "config": dict(cfg.record), "command": public_command(cfg.command), "stages": run.stages,
    }


def _verdict_interval(chosen: Selection) -> dict | None:
    """The interval the verdict states: the compared model's mean paired nDCG@10 difference from the
    start, its 95% half-width, on which queries, and what it accounts for (None when none was stated)."""
    for on, c in (("held-out judged dev queries", chosen.judged), ("pseudo-dev queries", chosen.pseudo),
                  ("pseudo-dev queries", chosen.fell)):
        if c and c.get("difference") is not None:
            return {"on": on, "queries": c.get("queries"), "difference": c["difference"], "half_width": c.get("resolution"),
                    "sd": c.get("sd"), "df": c.get("df"), "spread_queries": c.get("spread_queries"),
                    "method": c.get("method"),
                    # the compared model's per-query differences from the start on the held-out ("verdict")
                    # half and on the half that chose ("select"): any interval can be recomputed from them
                    "per_query_differences": c.get("per_query_differences"),
                    # where the difference on as many other queries like these should fall (95%; the sampling
                    # of both sets): verdict.prediction_half_width(this, m) gives it for m other queries
                    "prediction_half_width": prediction_half_width(c),
                    "compared_step": c.get("compared_step"),
                    "accounts_for": c.get("accounts_for") or "the sampling of the pseudo-dev queries; not the choice "
                                                             "among checkpoints made on the same queries, nor the "
                                                             "teacher's errors"}
    return None


def _judged_report(labels: Labels, chosen: Selection, record: dict) -> dict | None:
    """metrics.json's ``judged_dev``: how many judged dev queries, the smallest difference they
    resolve (and how it is computed), the output against the starting model on them."""
    if chosen.judged is None:
        return None
    jd = labels.dev.judged
    return {**{k: v for k, v in chosen.judged.items()
               if k not in ("selected_pseudo", "select_count", "per_query_differences")},  # those: verdict_interval's
            "judged_queries": jd.queries,
            # selection's nDCG@10 of every step: the selection half's
            "steps": {"0": chosen.dev_scores["0"], **{str(k): v for k, v in (record.get("dev_judged") or {}).items()}}}


def results_table(m: dict) -> str:
    """The before / after table of metrics.json ``m`` (markdown; empty without a labelled evaluation)."""
    from ..evaluation import metric_label

    if not m["labelled_evaluation"]:
        return ""
    lines = ["| model | " + " | ".join(metric_label(x) for x in METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    for name, agg in (("zero-shot (before)", m["before"]), (f"adapted ({m['method']}, after)", m["after"])):
        lines.append(f"| {name} | " + " | ".join(f"{agg[x]:.4f}" for x in METRICS) + " |")
    return "\n".join(lines)


def _write_output(run: AdaptRun, out: Path, selected_dir: Path, metrics: dict, after, unverified_dir: Path | None = None) -> None:
    from ..hub import prepare_model_folder
    from ..hub.cards import write_card
    from ..io import atomic_write_json, output_folder

    cfg, work = run.cfg, run.work
    eval_files = []
    if after is not None:  # the results table of the model's own card (hf-dr evaluate's JSON shape)
        p = work / "eval-after.json"
        atomic_write_json(p, {"metrics": after["aggregate"], "n_queries": after["n_queries"], "data": str(cfg.data),
                              "split": "test", "retriever": f"adapted ({cfg.method})"}, indent=1)
        eval_files.append(p)
    with output_folder(out, overwrite=cfg.overwrite, inputs=list(cfg.inputs)) as tmp:
        prepare_model_folder(selected_dir, tmp / "model", metrics=eval_files, base_model=hub_id(cfg.model))
        if metrics.get("unverified"):  # the trained checkpoint not shipped for want of independent evidence
            prepare_model_folder(unverified_dir, tmp / UNVERIFIED, base_model=hub_id(cfg.model))
        atomic_write_json(tmp / "metrics.json", metrics, indent=1)
        source = Path(str(cfg.data).rstrip("/")).name
        card_data = dict(language="en", license="apache-2.0", library_name="transformers",
                         pipeline_tag="feature-extraction", base_model=hub_id(cfg.model),
                         tags=["hf-dr", "domain-adaptation", cfg.method])
        warning = ""
        if metrics["below_zero_shot"]:
            warning = (f"The adapted model scores below the zero-shot model on the test split "
                       f"({metrics['after']['ndcg@10']:.4f} < {metrics['before']['ndcg@10']:.4f}).")
        from ..models.st_folder import sentence_transformers_class

        write_card(tmp, "adapted", card_data, m=metrics, source_name=source, results=results_table(metrics),
                   st=sentence_transformers_class(tmp / "model"),
                   dev_rows=_dev_table(metrics),
                   budget=metrics["budget"], warning=warning, model_name=public_name(cfg.model),
                   method_rows="".join(f"{row}\n" for row in run.method.card_rows(metrics)),
                   command=metrics["command"] or "(library call: hf_dr.adaptation.pipeline.adapt)")


def _dev_table(m: dict) -> str:
    """The card's table of dev nDCG@10 per step (the judged queries' and the pseudo-labels' when
    both were scored)."""
    pseudo = m.get("dev_pseudo") or {}
    judged = m.get("selection_on") == "judged"
    halves = judged or bool(m.get("pseudo_dev_split"))  # selection's half beside every pseudo-dev query

    def cell(v):
        return "" if v is None else f"{v:.4f}"

    head = "| step | judged dev nDCG@10 | pseudo-dev nDCG@10 |\n|---:|---:|---:|" if judged else \
        "| step | dev nDCG@10 (selection half) | pseudo-dev nDCG@10 (every query) |\n|---:|---:|---:|" if halves else \
        "| step | dev nDCG@10 |\n|---:|---:|"
    rows = [f"| {s}{' (starting model)' if s == '0' else ''} | {cell(v)} |" + (f" {cell(pseudo.get(s))} |" if halves else "")
            for s, v in sorted(m["dev"].items(), key=lambda x: int(x[0]))]
    return "\n".join([head, *rows])

