"""The stages of ``hf-dr adapt``, in their order (:data:`STAGES`): each a function of typed inputs
and outputs, cached under its own key in the run's work folder. None names a method: what differs
between methods is asked of the run's :class:`~hf_dr.adaptation.methods.Method`."""

from __future__ import annotations

import copy
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..stage_cache import StageCache, dataset_digest, digest
from .config import (AdaptConfig, AdaptError, default_num_queries, dtype_key, dtype_name, eval_steps,
                     generates_queries, work_dir)
from .methods import DevSet, Method, Prepared, TrainInputs, get_method, registered_methods, resolved_config
from .student import own_max_length, save_model, set_max_length, with_prompts

logger = logging.getLogger(__name__)

__all__ = ["STAGES", "METRICS", "Run", "Labels", "Trained", "Selection", "Evaluation", "start", "generate", "label",
           "train", "select", "evaluate", "write", "results_table"]

#: the stages in their order ("generate": queries for a corpus that has none, or --queries generate)
STAGES = ("generate", "label", "train", "select", "evaluate", "write")
METRICS = ("ndcg@10", "recall@100")


@dataclass
class Run:
    """What every stage of one run reads (:func:`start`)."""

    cfg: AdaptConfig  # resolved: each field the method leaves unset holds its default
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


def start(cfg: AdaptConfig, say: Callable[[str], None]) -> Run:
    """The run of a checked, resolved ``cfg``: its work folder, the target corpus and training
    queries, the method's untrained starting model at its max length."""
    from ..data import beir

    work = work_dir(cfg)
    work.mkdir(parents=True, exist_ok=True)
    cache = StageCache(work / "cache")
    started = time.time()
    if generates_queries(cfg):  # the corpus only: the generate stage makes the training queries
        data, queries, has_train_qrels = beir.load_corpus_data(cfg.data), {}, False
    else:  # the corpus and the training queries only (never their labels; the test split is not read here)
        data, queries, has_train_qrels = beir.load_training_queries(cfg.data, split=cfg.split)
    method = get_method(cfg.method)
    student = with_prompts(cfg, method.load_student(cfg))
    student.encode_dtype = cfg.dtype
    max_length = cfg.max_length or own_max_length(student)
    set_max_length(student, max_length)
    return Run(cfg, method, work, cache, say, data, queries, has_train_qrels, student, max_length, started=started)


# ----------------------------------------------------------------------------- generate
def generate(run: Run) -> None:
    """The training queries made from the corpus (:func:`hf_dr.generation.generate_to_folder`), when
    :func:`~.config.generates_queries`: ``run.queries`` and ``run.sources`` (each query's document),
    in a folder of the stage cache keyed on the corpus, the generator, the counts and the seed (a
    killed generation resumes from its finished shards). Otherwise records the folder's own queries."""
    from ..generation import DEFAULT_GENERATOR, generate_to_folder, get_generator
    from ..io import public_name

    cfg, say = run.cfg, run.say
    if not generates_queries(cfg):
        run.query_source = {"source": "data", "queries": len(run.queries)}
        return
    t0 = time.time()
    spec = cfg.generator or DEFAULT_GENERATOR
    total = cfg.num_queries or default_num_queries(cfg)
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
    run.queries, run.sources = res.queries, res.sources
    run.query_source = {"source": "generated", "generator": f"{kind}:{public_name(ident)}" if ident else kind,
                        "queries": len(res.queries), "queries_per_doc": m["queries_per_doc"],
                        "documents": m["documents"], "n_docs": m["n_docs"], "num_queries": m["num_queries"],
                        "seed": cfg.seed, "minutes": round((time.time() - t0) / 60, 2)}
    run.stages["generate"] = "cached" if cached else "computed"
    say(f"generate: {'cached' if cached else 'computed'} ({len(res.queries)} queries by {spec}, "
        f"{m['queries_per_doc']} per document for {m['documents']} of {m['n_docs']} documents)")


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


def label(run: Run) -> Labels:
    """DoDress pseudo-relevance labels of the training queries
    (:func:`~hf_dr.labeling.pseudo_relevance.build_pseudo_labels`, its stages cached in the work
    folder's ``cache/``), or a ``hf-dr label`` folder given as ``cfg.labels``."""
    from datasets import load_from_disk

    from ..labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels, degenerate_summary

    cfg, say, student, max_length = run.cfg, run.say, run.student, run.max_length
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
        pl_cfg = PseudoLabelConfig(split=cfg.split, bm25_top=cfg.bm25_top, k=cfg.k, m=cfg.m, negatives=cfg.negatives,
                                   dev_queries=cfg.dev_queries, max_queries=cfg.max_queries, seed=cfg.seed,
                                   dense_max_length=max_length if dense is not None else None)
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
        summary = degenerate_summary(stats, keep_hint="hf-dr label --keep-degenerate, then --labels, keeps them")
        if summary:  # #21: queries whose labels cannot be trusted (dropped)
            say(f"label: {summary}")
    minutes = (time.time() - t0) / 60
    if len(dev) == 0:
        raise AdaptError("the pseudo-labelled dev set is empty (too few training queries: the dev set takes at most "
                         "1/5 of them): the checkpoint cannot be chosen; label more queries")
    return Labels(train, dataset_digest(train), DevSet(dev, dataset_digest(dev), max_length, run.cache), stats,
                  stats.get("reranker") or cfg.teacher, minutes)


def _dense_teacher(run: Run):
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
    if cfg.teacher == "fusion" or cfg.negatives == "simans":  # a sparse student: the quickstart's dense model
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

    start_dev: float  # the starting model's dev nDCG@10
    start_fp: str  # its fingerprint
    init: Any  # the model training started from (the student, or the method's preparation of it)
    prepared: Prepared
    record: dict  # the training's record: {"dev": {step: dev nDCG@10}, ...} (its DONE.json)
    run_dir: Path  # the training's folder, named by the hash of its inputs
    cached: bool  # the run was finished before (DONE.json)


def train(run: Run, labels: Labels) -> Trained:
    """The starting model scored on the dev set (step 0); the method's preparation; its training on
    a copy of the model, in a folder keyed on (method, starting weights, labels, hyper-parameters)
    whose checkpoints a crashed run resumes from."""
    from ..embeddings import model_fingerprint

    cfg, method, student, say = run.cfg, run.method, run.student, run.say
    start_fp = model_fingerprint(student)
    dev0 = labels.dev.score("dev_step0", student, start_fp)
    say(f"dev: starting model nDCG@10 = {dev0:.4f} (step 0)")

    t1 = time.time()
    prepared = method.prepare(cfg, student, run.data, run.max_length, run.work, say)
    if prepared.status:
        run.stages[method.name] = prepared.status
    init = prepared.model
    label_key = {"train": labels.train_key, "dev": labels.dev.key} if method.trains_on_triplets \
        else {"dev": labels.dev.key}
    params = {"method": cfg.method, "init": start_fp if init is student else model_fingerprint(init),
              "labels": label_key, "max_steps": cfg.max_steps, "batch_size": cfg.batch_size, "lr": cfg.learning_rate,
              "max_length": run.max_length, "eval_steps": eval_steps(cfg), "seed": cfg.seed, **dtype_key(cfg),
              **method.train_key(cfg)}
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
    return Trained(dev0, start_fp, init, prepared, record, run_dir, cached)


# ----------------------------------------------------------------------------- select
@dataclass
class Selection:
    """The model chosen on the dev set, and the last checkpoint when it is another."""

    step: int  # 0: the starting model was kept
    dev: float  # its dev nDCG@10
    folder: Path  # its saved model
    kept_start: bool
    teacher_has_student: bool  # the step-0 model is shown but no candidate
    dev_scores: dict  # {"0": ..., "STEP": ...}
    last_step: int
    last_dir: Path  # the last checkpoint's model (when it is not the selected one)


def select(run: Run, labels: Labels, trained: Trained) -> Selection:
    """The best checkpoint by dev nDCG@10, the untrained starting model included as "step 0" (no
    checkpoint beating it keeps it) unless the teacher fuses BM25 with the starting model itself,
    whose dev labels then favour it. Finishes the training folder: the last checkpoint's model
    (when not selected), ``DONE.json``; the checkpoints go."""
    say, record, run_dir, dev0 = run.say, trained.record, trained.run_dir, trained.start_dev
    dev_scores = {"0": dev0, **{str(k): v for k, v in record["dev"].items()}}
    best_step, best = max(((int(s), v) for s, v in record["dev"].items()), key=lambda x: (x[1], -x[0]),
                          default=(0, float("-inf")))
    # a fusion teacher over the starting model itself grades the dev set partly with the starting
    # model's own scores: step 0 would be judged on labels it helped make, so it is no candidate then
    label_dense_fp = (labels.stats.get("fingerprints") or {}).get("dense_model")
    teacher_has_student = str(labels.teacher).startswith("fusion") and label_dense_fp == trained.start_fp
    if teacher_has_student and record["dev"]:
        say("select: the teacher fuses BM25 with the starting model itself, so the dev labels favour it: step 0 "
            "is shown but is no candidate")
    kept_start = not record["dev"] or (not teacher_has_student and not best > dev0)
    if kept_start:
        step, dev = 0, dev0
        say(f"select: no checkpoint beats the starting model on the dev set (best {best:.4f} at step {best_step} "
            f"<= {dev0:.4f}): keeping the starting model")
        folder = run.work / f"start-{trained.start_fp[:16]}"
        if not (folder / "config.json").is_file():
            save_model(run.student, folder)
    else:
        step, dev = best_step, best
        folder = run_dir / "selected"
        say(f"select: step {best_step} (dev nDCG@10 {best:.4f}; {dev0:.4f} at step 0)")
    last_step = max((int(x) for x in record["dev"]), default=0)
    last_dir = run_dir / "last"
    if not trained.cached:
        from ..io import atomic_write_json

        if last_step and last_step != step:  # kept for the test-split report of what selection avoided
            run.method.save_checkpoint(run.cfg, trained.init, run_dir / f"checkpoint-{last_step}", last_dir)
        atomic_write_json(run_dir / "DONE.json", record, indent=1)
        for c in run_dir.glob("checkpoint-*"):  # the selected weights are saved: checkpoints are not needed
            shutil.rmtree(c, ignore_errors=True)
    return Selection(step, dev, folder, kept_start, teacher_has_student, dev_scores, last_step, last_dir)


# ----------------------------------------------------------------------------- evaluate
@dataclass
class Evaluation:
    """Before / after on the test split (None without its qrels), each ``{"aggregate", "per_query",
    "n_queries"}``; the paired t-test on nDCG@10; the last checkpoint's scores when not selected."""

    labelled: bool
    before: dict | None = None
    after: dict | None = None
    last: dict | None = None
    t_statistic: float | None = None
    p_value: float | None = None


def evaluate(run: Run, chosen: Selection) -> Evaluation:
    """The starting and the selected model on the test split, read only now (when it has qrels),
    each evaluation cached by the model's weights and the test data."""
    from ..data import beir
    from ..models import load_encoder

    cfg, say = run.cfg, run.say
    if not beir.has_split(cfg.data, "test"):
        say("evaluate: no qrels/test.tsv: no labelled evaluation possible (the pseudo-labelled dev set is the only "
            "yardstick)")
        return Evaluation(False)
    test = beir.load_beir(cfg.data, split="test")

    def loaded(folder):
        model = with_prompts(cfg, load_encoder(folder))
        model.encode_dtype = cfg.dtype
        return model

    before = _evaluate_cached(run.cache, run.student, test)
    after = before if chosen.kept_start else _evaluate_cached(run.cache, loaded(chosen.folder), test)
    t_stat, p_value = _ttest(after, before)
    say(f"evaluate: test nDCG@10 {before['aggregate']['ndcg@10']:.4f} -> {after['aggregate']['ndcg@10']:.4f} "
        f"(p = {p_value:.3g}, {after['n_queries']} queries)")
    last = None
    if chosen.last_step != chosen.step and (chosen.last_dir / "config.json").is_file():
        res = _evaluate_cached(run.cache, loaded(chosen.last_dir), test)["aggregate"]
        last = {"step": chosen.last_step, **res}
        say(f"evaluate: the last checkpoint (step {chosen.last_step}, not selected) would score test nDCG@10 "
            f"{res['ndcg@10']:.4f}")
    return Evaluation(True, before, after, last, t_stat, p_value)


def _evaluate_cached(cache: StageCache, model, test) -> dict:
    """``{"aggregate", "per_query", "n_queries"}`` of ``model`` on the test split (the one
    :func:`hf_dr.evaluation.evaluate` path), cached by the model's weights and the test data."""
    from ..embeddings import model_fingerprint
    from ..evaluation import evaluate
    from ..precision import dtype_name as precision_name
    from ..precision import encoding_dtype
    from ..retrieval import EncoderRetriever

    corpus_fp = test.corpus_fingerprint()
    dt = precision_name(encoding_dtype(model))
    key = {"model": model_fingerprint(model), "corpus": corpus_fp, "qrels": digest(test.qrels),
           "queries": digest(test.split_queries()), "metrics": list(METRICS), **({"dtype": dt} if dt != "fp32" else {})}

    def run():
        retriever = EncoderRetriever.from_data(model, test, batch_size=32, show_progress_bar=False)
        res = evaluate(retriever, test, metrics=METRICS, show_progress_bar=False)
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
def write(run: Run, labels: Labels, trained: Trained, chosen: Selection, evaluation: Evaluation) -> dict:
    """``OUT/model`` (the Hub folder of the model's kind, as ``hf-dr push`` writes it), ``OUT/README.md``
    and ``OUT/metrics.json``, written whole; returns the metrics."""
    metrics = _metrics(run, labels, trained, chosen, evaluation)
    out = Path(run.cfg.output).expanduser()
    _write_output(run, out, chosen.folder, metrics, evaluation.after)
    run.say(f"wrote {out} (model/, README.md, metrics.json)")
    return metrics


def _metrics(run: Run, labels: Labels, trained: Trained, chosen: Selection, ev: Evaluation) -> dict:
    """metrics.json: what was run, before / after, the selection and the budget."""
    cfg, method, record, stats = run.cfg, run.method, trained.record, labels.stats
    below = ev.after["aggregate"]["ndcg@10"] < ev.before["aggregate"]["ndcg@10"] if ev.before is not None else None
    return {
        "method": cfg.method, "method_description": method.description,
        "model": _public(cfg.model), "data": _public(cfg.data), "split": cfg.split,
        "training_queries_have_qrels": run.has_train_qrels, "queries": run.query_source, "teacher": labels.teacher,
        "dense_teacher": _public(cfg.dense_teacher) if cfg.dense_teacher else stats.get("dense_model"),
        "labels": _public(cfg.labels) if cfg.labels else None,
        **({"bm25_index": _public(cfg.bm25_index)} if cfg.bm25_index else {}),
        "labelled_evaluation": ev.labelled,
        "before": ev.before["aggregate"] if ev.before else None, "after": ev.after["aggregate"] if ev.after else None,
        "test_queries": ev.after["n_queries"] if ev.after else None,
        "t_statistic": ev.t_statistic, "p_value": ev.p_value,
        "dev": chosen.dev_scores, "selected_step": chosen.step, "selected_dev_ndcg@10": chosen.dev,
        "kept_starting_model": chosen.kept_start, "below_zero_shot": below,
        "teacher_contains_student": chosen.teacher_has_student,
        "starting_model_is_candidate": not chosen.teacher_has_student,
        # the test score of the last checkpoint when selection chose another: how selection fared
        "last_checkpoint": ev.last,
        # mlm_steps, margin_scale: the method's own (Method.budget), None for the others
        "budget": {"steps": cfg.max_steps, "eval_steps": eval_steps(cfg), "batch_size": cfg.batch_size,
                   "learning_rate": cfg.learning_rate, "max_length": run.max_length,
                   "mlm_steps": None, "margin_scale": None, **method.budget(cfg, record),
                   "dtype": dtype_name(cfg), "label_minutes": round(labels.minutes, 2),
                   "train_minutes": record.get("minutes", 0.0),
                   "minutes": round((time.time() - run.started) / 60, 2)},
        "label_stats": {k: stats.get(k) for k in ("train_queries", "dev_queries", "triplets", "dev_rows",
                                                  "queries_without_bm25_hits", "sources_added", "dtype") if k in stats},
        "negatives": (stats.get("config") or {}).get("negatives", cfg.negatives),
        # an entry per reporting method (Method.report), None but for this run's
        **{m.name: None for m in registered_methods() if m.reports},
        **({method.name: method.report(cfg, run.student, trained.prepared)} if method.reports else {}),
        "config": resolved_config(cfg), "command": _public_command(cfg.command), "stages": run.stages,
    }


def results_table(m: dict) -> str:
    """The before / after table of metrics.json ``m`` (markdown; empty without a labelled evaluation)."""
    from ..evaluation import metric_label

    if not m["labelled_evaluation"]:
        return ""
    lines = ["| model | " + " | ".join(metric_label(x) for x in METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    for name, agg in (("zero-shot (before)", m["before"]), (f"adapted ({m['method']}, after)", m["after"])):
        lines.append(f"| {name} | " + " | ".join(f"{agg[x]:.4f}" for x in METRICS) + " |")
    return "\n".join(lines)


def _write_output(run: Run, out: Path, selected_dir: Path, metrics: dict, after) -> None:
    from ..hub import _hub_id, prepare_model_folder
    from ..hub_templates import write_card
    from ..io import atomic_write_json, local_inputs, output_folder

    cfg, work = run.cfg, run.work
    eval_files = []
    if after is not None:  # the results table of the model's own card (hf-dr evaluate's JSON shape)
        p = work / "eval-after.json"
        atomic_write_json(p, {"metrics": after["aggregate"], "n_queries": after["n_queries"], "data": str(cfg.data),
                              "split": "test", "retriever": f"adapted ({cfg.method})"}, indent=1)
        eval_files.append(p)
    inputs = local_inputs(cfg.data, cfg.model, cfg.labels, cfg.dense_teacher, cfg.rem, cfg.bm25_index, work)
    with output_folder(out, overwrite=cfg.overwrite, inputs=inputs) as tmp:
        prepare_model_folder(selected_dir, tmp / "model", metrics=eval_files, base_model=_hub_id(cfg.model))
        atomic_write_json(tmp / "metrics.json", metrics, indent=1)
        source = Path(str(cfg.data).rstrip("/")).name
        card_data = dict(language="en", license="apache-2.0", library_name="transformers",
                         pipeline_tag="feature-extraction", base_model=_hub_id(cfg.model),
                         tags=["hf-dr", "domain-adaptation", cfg.method])
        warning = ""
        if metrics["below_zero_shot"]:
            warning = (f"The adapted model scores below the zero-shot model on the test split "
                       f"({metrics['after']['ndcg@10']:.4f} < {metrics['before']['ndcg@10']:.4f}).")
        from ..models.st_folder import sentence_transformers_class

        write_card(tmp, "adapted", card_data, m=metrics, source_name=source, results=results_table(metrics),
                   st=sentence_transformers_class(tmp / "model"),
                   dev_rows="\n".join(f"| {s}{' (starting model)' if s == '0' else ''} | {v:.4f} |"
                                      for s, v in sorted(metrics["dev"].items(), key=lambda x: int(x[0]))),
                   budget=metrics["budget"], warning=warning, model_name=_public(cfg.model),
                   method_rows="".join(f"{row}\n" for row in run.method.card_rows(metrics)),
                   command=metrics["command"] or "(library call: hf_dr.adaptation.pipeline.adapt)")


def _public(v):
    from ..io import public_name

    return public_name(v) if v else v


def _public_command(command):
    from ..labeling.pseudo_relevance import _public_command as public_command

    return public_command(command)
