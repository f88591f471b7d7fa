"""``adapt``: adapt a retriever to a target corpus in one call (``hf-dr adapt``), in stages
(:mod:`.stages`), the method's part asked of its :class:`~hf_dr.adaptation.methods.Method`:

generate (queries made from the corpus — :mod:`hf_dr.generation` — when the folder has none, or
``--queries generate``: they are the training queries) -> label (DoDress pseudo-relevance labels of
the *training* queries, or a ``hf-dr label`` folder; a generated query's own document is always
among the teacher's candidates) -> train (the starting model scored on the dev set as "step 0"; the
method's training, on a copy)
-> select (nDCG@10 on the dev set, the untrained starting model included: no checkpoint beating it
keeps the starting model. The user's judged dev queries, ``qrels/dev.tsv``, when there are some:
split by the seed into a half that chooses and a held-out half that states the verdict, each
scored by full-corpus retrieval (:mod:`hf_dr.adaptation.judged`); else the pseudo-labelled
held-out training queries, where a trained checkpoint replaces the start only when the teacher
does not contain it and its gain is resolved, else it is kept beside the start as unverified;
then the verdict, :mod:`hf_dr.adaptation.verdict`)
-> evaluate (only now is the test split read; before / after with a paired t-test, when it has
qrels) -> write (a Hub-ready folder ``OUT/model`` + card ``OUT/README.md`` + ``OUT/metrics.json``,
written whole through :func:`hf_dr.io.output_folder`).

Methods (:data:`METHODS`, one module each in :mod:`hf_dr.adaptation.methods`): ``dodress``
(RankNet), ``pseudo-margin-mse`` (Margin-MSE on the teacher's scores), ``cai`` (SPLADE-CAI),
``berm`` (BERM's unit losses), ``ddr`` (a target DAM for a trained REM); a method registered with
:func:`~hf_dr.adaptation.methods.register_method` runs the same way.

Every stage is cached in a work folder beside the output (``.OUT.work``, or ``work_dir``),
keyed on the content of its inputs and its parameters: the label stage by
:class:`~hf_dr.stage_cache.StageCache`, a method's preparation by its own folder (CAI: ``DONE.json``
markers), training by a folder named by the hash of (method, starting weights, labels,
hyper-parameters) whose checkpoints are resumed after a crash, the evaluations by the model's
weights and the test data. A re-run with one changed parameter redoes only what depends on it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import stages
from .config import AdaptConfig, AdaptError, default_work_dir, fills_queries, generates_queries, work_dir
from .methods import (METHOD_DEFAULTS, METHODS, get_method, registered_methods, resolved_config,
                      with_method_defaults)
from .stages import results_table

logger = logging.getLogger(__name__)

__all__ = ["METHODS", "METHOD_DEFAULTS", "AdaptConfig", "AdaptResult", "AdaptError", "adapt", "check_config",
           "default_work_dir", "resolved_config", "results_table", "with_method_defaults"]


@dataclass
class AdaptResult:
    output: Path
    metrics: dict
    work_dir: Path
    stages: dict = field(default_factory=dict)  # stage -> "cached" / "computed" / "reused"


def adapt(cfg: AdaptConfig, progress: Callable[[str], None] | None = None) -> AdaptResult:
    """Run ``cfg.method`` end to end and write ``cfg.output`` (see the module docstring).
    ``progress`` receives one line per stage (the command prints them)."""
    say = progress or (lambda s: logger.info("%s", s))
    cfg = _models_as_folders(cfg)
    check_config(cfg)
    run = stages.start(with_method_defaults(cfg), say)
    stages.generate(run)  # queries for a corpus that has none (or --queries generate)
    labels = stages.label(run)
    labels = stages.judged_dev(run, labels)  # qrels/dev.tsv: the user's judged dev queries choose
    trained = stages.train(run, labels)
    chosen = stages.select(run, labels, trained)
    evaluation = stages.evaluate(run, chosen)
    metrics = stages.write(run, labels, trained, chosen, evaluation)
    return AdaptResult(Path(run.cfg.output).expanduser(), metrics, run.work, run.stages)


def check_config(cfg: AdaptConfig) -> None:
    """Refuse, before any work, what cannot run (:class:`AdaptError`): the flags, then the method's
    own checks (:meth:`~hf_dr.adaptation.methods.Method.check`), then the output folder."""
    from ..io import check_output_folder, local_inputs
    from ..labeling.pseudo_relevance import PseudoLabelConfig

    method = get_method(cfg.method)
    if cfg.max_steps is not None and cfg.max_steps < 1:
        raise AdaptError("--max-steps must be at least 1")
    cfg = with_method_defaults(cfg)
    try:  # a bad --dtype, or fp16 training without a GPU, before any work
        from ..precision import training_precision

        training_precision(cfg.dtype)
    except ValueError as e:
        raise AdaptError(str(e)) from None
    if cfg.split == "test":
        raise AdaptError("--split test would train on the test queries: the test split is for evaluation only "
                         "(use --split train)")
    for name in ("max_steps", "batch_size", "dev_queries", "k", "m", "bm25_top"):
        if getattr(cfg, name) < 1:
            raise AdaptError(f"--{name.replace('_', '-')} must be at least 1")
    for other in registered_methods():  # a flag of another method's own
        for name, what in other.options.items():
            if getattr(cfg, name) is not None and other.name != cfg.method:
                raise AdaptError(f"{what}: it applies to --method {other.name}, not {cfg.method}")
    if cfg.mlm_steps < 0:
        raise AdaptError("--mlm-steps must be at least 0 (0: no continual MLM)")
    if cfg.eval_steps is not None and cfg.eval_steps < 1:
        raise AdaptError("--eval-steps must be at least 1")
    if cfg.labels and cfg.bm25_index:
        raise AdaptError("--index is the BM25 index of the label stage: with --labels nothing is labelled")
    if cfg.bm25_index:
        from ..retrieval.saved import SavedIndex

        if SavedIndex(cfg.bm25_index).backend != "bm25":  # not an index folder: SavedIndexError, a ValueError
            raise AdaptError(f"--index {cfg.bm25_index} is not a BM25 index (hf-dr index --data DIR --backend bm25)")
    if cfg.queries not in ("auto", "generate", "fill"):
        raise AdaptError(f"--queries {cfg.queries!r}: auto (the folder's own, generated when it has none), generate "
                         "or fill (the folder's own plus generated ones)")
    for name in ("queries_per_doc", "num_queries"):
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise AdaptError(f"--{name.replace('_', '-')} must be at least 1")
    if generates_queries(cfg) or fills_queries(cfg):
        from ..generation import DEFAULT_GENERATOR, check_generator

        if cfg.labels:
            raise AdaptError(f"--labels reuses labelled queries: with --queries {cfg.queries} (or a folder "
                             "without queries.jsonl) nothing would be generated; pass --queries auto to train on the "
                             "labelled ones")
        try:
            check_generator(cfg.generator or DEFAULT_GENERATOR)
        except ValueError as e:
            raise AdaptError(str(e)) from None
        folder = Path(str(cfg.data)).expanduser()
        if folder.is_dir() and not (folder / "corpus.jsonl").is_file():
            raise AdaptError(f"{cfg.data} is not a BEIR folder: corpus.jsonl is missing")
        if generates_queries(cfg) and (folder / "qrels" / "test.tsv").is_file() and \
                not (folder / "queries.jsonl").is_file():
            raise AdaptError(f"{folder / 'qrels' / 'test.tsv'} judges queries that {cfg.data} lacks (no queries.jsonl): "
                             "the test split could not be evaluated; add queries.jsonl or remove qrels/")
    elif cfg.generator is not None or cfg.queries_per_doc is not None or cfg.num_queries is not None:
        raise AdaptError("--generator / --queries-per-doc / --num-queries apply to generated queries: "
                         f"{cfg.data} has its own queries.jsonl (--queries generate ignores it)")
    if cfg.labels is None:
        try:
            PseudoLabelConfig(split=cfg.split, bm25_top=cfg.bm25_top, k=cfg.k, m=cfg.m, negatives=cfg.negatives,
                              dev_queries=cfg.dev_queries, max_queries=cfg.max_queries).validate()
        except ValueError as e:
            raise AdaptError(str(e)) from None
    else:
        lab = Path(cfg.labels).expanduser()
        if not (lab / "state.json").is_file() or not (lab / "dev" / "state.json").is_file():
            raise AdaptError(f"--labels {cfg.labels} is not a `hf-dr label` output folder (a datasets folder "
                             "with the triplets and dev/)")
    _check_judged_dev(cfg)
    method.check(cfg)
    work = work_dir(cfg)
    out = Path(cfg.output).expanduser()
    if work.resolve() == out.resolve() or out.resolve() in work.resolve().parents:
        raise AdaptError(f"--work-dir {work} lies inside the output folder {out}, which is replaced as a whole")
    check_output_folder(out, overwrite=cfg.overwrite,
                        inputs=local_inputs(cfg.data, cfg.model, cfg.labels, cfg.dense_teacher, cfg.rem, cfg.bm25_index,
                                            work))


def _check_judged_dev(cfg: AdaptConfig) -> None:
    """Refuse a ``qrels/dev.tsv`` (the judged queries that choose the checkpoint) that judges a
    query of ``qrels/test.tsv``: the test queries would then choose."""
    from ..data.beir import judged_query_ids

    qrels = Path(str(cfg.data)).expanduser() / "qrels"
    if cfg.split == "dev" or not (qrels / "dev.tsv").is_file() or not (qrels / "test.tsv").is_file():
        return
    both = sorted(judged_query_ids(qrels / "dev.tsv") & judged_query_ids(qrels / "test.tsv"))
    if both:
        raise AdaptError(f"qrels/dev.tsv judges {len(both)} queries that qrels/test.tsv judges too (e.g. {both[0]}): "
                         "the test queries would choose the checkpoint; judge other queries for dev.tsv")


def _models_as_folders(cfg: AdaptConfig) -> AdaptConfig:
    """``cfg`` with a ``SentenceTransformer`` / ``SparseEncoder`` object given as ``model`` or
    ``dense_teacher`` replaced by its own saved folder (``model.save``, under the work folder's
    ``inputs/``, named by its fingerprint): every stage then reads it as it reads any folder, its
    prompts, pooling, similarity and max length included. A model hf-dr cannot train exactly
    (:func:`hf_dr.st_encoder.trainable_as_folder`) is refused, not approximated."""
    from ..st_encoder import as_encoder, is_sentence_transformers_model, trainable_as_folder

    changes = {}
    for field_name in ("model", "dense_teacher"):
        obj = getattr(cfg, field_name)
        if obj is None or isinstance(obj, (str, os.PathLike)):
            continue
        if not is_sentence_transformers_model(obj):
            raise AdaptError(f"{field_name}: a folder, a Hub id, a SentenceTransformer or a SparseEncoder "
                             f"(got {type(obj).__name__})")
        why = trainable_as_folder(obj)
        if why:
            raise AdaptError(f"{field_name}: this {type(obj).__name__} cannot be adapted by hf-dr: {why}")
        from ..embeddings import model_fingerprint

        folder = work_dir(cfg) / "inputs" / f"{field_name}-{model_fingerprint(as_encoder(obj))[:16]}"
        if not (folder / "modules.json").is_file():
            tmp = folder.with_name(folder.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            obj.save(str(tmp))
            shutil.rmtree(folder, ignore_errors=True)
            tmp.replace(folder)
        changes[field_name] = str(folder)
        if field_name == "model" and type(obj).__name__ == "SparseEncoder":
            changes["kind"] = "sparse"
    return dataclasses.replace(cfg, **changes) if changes else cfg
