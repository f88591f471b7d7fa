"""One resolved plan of ``hf-dr adapt``: :func:`resolve` turns an :class:`~.config.AdaptConfig` (the
command line's flags or the Python API's arguments) into a frozen :class:`AdaptPlan` — the method's
defaults applied once, every derived value computed once, every refusal checked before anything is
written — and the stages read the plan (as ``run.cfg``), never the config.

Order of :func:`resolve`: the method and its options (another method's are refused), the defaults,
the derived values; then the refusals of the flags, the training queries, the labels, the judged dev
queries and the output folder; then a model given as a Sentence Transformers object is saved into
the work folder (the only write, after every refusal that does not need it), and last the method's
own checks (:meth:`~hf_dr.adaptation.methods.Method.check`), which read the model's folder.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import (CONFIG_FIELDS, FALLBACKS, AdaptConfig, AdaptError, default_num_queries, eval_steps,
                     fills_queries, generates_queries, work_dir)
from .methods import Method, get_method, option_fields, option_owner, registered_methods

__all__ = ["AdaptPlan", "resolve", "method_record"]


@dataclass(frozen=True)
class AdaptPlan:
    """Everything a run reads: the config's fields with the method's defaults applied (same names),
    ``options`` (the method's :attr:`~hf_dr.adaptation.methods.Method.Options`), and what is derived
    from them, each computed once."""

    data: str
    model: str
    method: str
    output: str
    split: str
    kind: str
    max_steps: int
    batch_size: int
    learning_rate: float
    max_length: int | None
    eval_steps: int  # a checkpoint + dev evaluation every eval_steps (config.eval_steps, the rule)
    dev_queries: int
    negatives: str
    k: int
    m: int
    bm25_top: int
    max_queries: int | None
    teacher: str
    dense_teacher: str | None
    labels: str | None
    bm25_index: str | None
    seed: int
    overwrite: bool
    work_dir: str | None
    command: str | None
    show_progress_bar: bool
    dtype: str
    queries: str
    generator: str | None
    queries_per_doc: int | None
    num_queries: int | None
    query_prompt: str | None
    document_prompt: str | None
    options: Any = None  # the method's Options (None for a method without options)
    # derived
    work: Path = Path(".")  # the work folder (config.work_dir)
    generates_queries: bool = False  # the training queries are generated from the corpus
    fills_queries: bool = False  # the folder's own queries plus generated ones
    default_num_queries: int = 0  # generated queries by default (config.default_num_queries)
    needs_dense_teacher: bool = False  # the teacher or SimANS reads a dense model
    dtype_name: str = "fp32"  # fp32 / bf16 / fp16: what dtype resolves to here (recorded in the budget)
    dtype_key: Mapping = field(default_factory=dict)  # {"dtype": ...} in cache keys when not fp32
    label_config: Any = None  # the label stage's PseudoLabelConfig (None with --labels)
    inputs: tuple = ()  # local paths the run reads (never overwritten)
    record: Mapping = field(default_factory=dict)  # metrics.json "config": what a benchmark row records

    @functools.cached_property
    def training_precision(self) -> dict:
        """The Trainer's mixed-precision arguments for ``dtype`` (:func:`hf_dr.precision.training_precision`)."""
        from ..precision import training_precision

        return training_precision(self.dtype)


def resolve(cfg: AdaptConfig, *, check: bool = True) -> AdaptPlan:
    """The frozen plan of ``cfg`` (see the module docstring). ``check=False`` applies the defaults and
    derives the values without refusing anything nor writing (what a run would record)."""
    method = get_method(cfg.method)
    if check:
        _check_before_defaults(cfg)
    plan = _plan(cfg, method)
    if not check:
        return plan
    _check_flags(plan)
    _check_queries(plan)
    _check_labels(plan)
    _check_judged_dev(plan)
    _check_output(plan)
    folders = _models_as_folders(cfg)  # writes only a model given as an object, into the work folder
    if folders is not cfg:
        plan = _plan(folders, method)
    method.check(plan)
    return plan


def _plan(cfg: AdaptConfig, method: Method) -> AdaptPlan:
    """The config with the method's defaults applied and the derived values (no refusal)."""
    from ..precision import dtype_name

    generated = generates_queries(cfg)  # reads the folder: once
    own = {**FALLBACKS, **method.defaults}
    if method.generated_defaults and generated:
        own.update(method.generated_defaults)
    common = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(AdaptConfig) if f.name != "options"}
    common.update({k: v for k, v in own.items() if k in common and common[k] is None})
    options = _options(cfg, method, own)
    filled = dataclasses.replace(cfg, **{k: common[k] for k in ("max_steps", "batch_size", "learning_rate")})
    if filled.max_steps is not None and filled.max_steps > 0:
        common["eval_steps"] = eval_steps(filled)
    name, work = dtype_name(cfg.dtype), work_dir(cfg)
    return AdaptPlan(**common, options=options, work=work, generates_queries=generated,
                     fills_queries=fills_queries(cfg, generated),
                     default_num_queries=default_num_queries(filled) if filled.max_steps else 0,
                     needs_dense_teacher=_needs_dense(cfg), dtype_name=name,
                     dtype_key={"dtype": name} if name != "fp32" else {}, label_config=_label_config(cfg),
                     inputs=_inputs(cfg, method, options, work), record=_record(common, method, options))


def _options(cfg: AdaptConfig, method: Method, own: Mapping):
    """The method's options: its :attr:`defaults` over the fields' own, the given ones over both;
    an option of another method, or of none, is refused."""
    given = dict(cfg.options or {})
    for name in given:
        owner = option_owner(name)
        flag = _flag(owner, name) if owner is not None else name
        if owner is None:
            raise AdaptError(f"unknown option {name!r} of --method {cfg.method}")
        if owner.name != method.name:
            raise AdaptError(f"{flag}: it applies to --method {owner.name}, not {cfg.method}")
    if method.Options is None:
        return None
    names = {f.name for f in option_fields(method)}
    values = {**{k: v for k, v in own.items() if k in names}, **{k: v for k, v in given.items() if v is not None}}
    try:
        return method.Options(**values)
    except (TypeError, ValueError) as e:
        raise AdaptError(str(e)) from None


def _flag(method: Method, name: str) -> str:
    f = next(f for f in option_fields(method) if f.name == name)
    return f.metadata.get("flag") or "--" + name.replace("_", "-")


def method_record(method: Method, options) -> dict:
    """A method's options as a row records them (fields with ``record``): ``options``' values, or
    the fields' own defaults for another method's (``options=None``)."""
    return {f.name: (getattr(options, f.name) if options is not None else f.default)
            for f in option_fields(method) if f.metadata.get("record", True)}


def _record(common: dict, method: Method, options) -> dict:
    """metrics.json ``config``: :data:`~.config.CONFIG_FIELDS`, every registered method's recorded
    options (the run's method's values, the others' own defaults), and the training queries when
    not the folder's own (auto: the keys of the rows measured before --queries fill)."""
    out = {k: common[k] for k in CONFIG_FIELDS}
    for m in registered_methods():
        out.update(method_record(m, options if m.name == method.name else None))
    return {**out, **({"queries": common["queries"]} if common["queries"] != "auto" else {})}


def _needs_dense(cfg: AdaptConfig) -> bool:
    from ..labeling.teacher import parse_teacher

    try:
        return parse_teacher(cfg.teacher).needs_dense or cfg.negatives == "simans"
    except ValueError as e:
        raise AdaptError(f"--teacher: {e}") from None


def _label_config(cfg: AdaptConfig):
    """The label stage's :class:`~hf_dr.labeling.pseudo_relevance.PseudoLabelConfig` (its dense max
    length is the run's, known once the student is loaded), or None with ``--labels``."""
    from ..labeling.pseudo_relevance import PseudoLabelConfig

    if cfg.labels is not None:
        return None
    return PseudoLabelConfig(split=cfg.split, bm25_top=cfg.bm25_top, k=cfg.k, m=cfg.m, negatives=cfg.negatives,
                             dev_queries=cfg.dev_queries, max_queries=cfg.max_queries, seed=cfg.seed)


def _inputs(cfg: AdaptConfig, method: Method, options, work: Path) -> tuple:
    """The local paths the run reads (the data, the models, the labels, the index, the method's
    input options, the work folder): an output folder is never one of them, nor holds one."""
    from ..io import local_inputs

    own = [getattr(options, f.name) for f in option_fields(method) if f.metadata.get("input")] if options else []
    paths = [x for x in (cfg.data, cfg.model, cfg.labels, cfg.dense_teacher, *own, cfg.bm25_index)
             if x is None or isinstance(x, (str, os.PathLike))]
    return tuple(local_inputs(*paths, work))


# ----------------------------------------------------------------------------- refusals
def _check_before_defaults(cfg: AdaptConfig) -> None:
    """What the defaults and the derived values cannot be computed from."""
    for name in ("max_steps", "eval_steps"):  # (eval_steps' rule reads 0 as "not given")
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise AdaptError(f"--{name.replace('_', '-')} must be at least 1")
    if cfg.queries not in ("auto", "generate", "fill"):
        raise AdaptError(f"--queries {cfg.queries!r}: auto (the folder's own, generated when it has none), generate "
                         "or fill (the folder's own plus generated ones)")
    _check_model_objects(cfg)


def _check_flags(plan: AdaptPlan) -> None:
    """The flags: the precision, the split, the counts, the index."""
    try:  # a bad --dtype, or fp16 training without a GPU, before any work
        _ = plan.training_precision  # resolved (and refused) when read
    except ValueError as e:
        raise AdaptError(str(e)) from None
    if plan.split == "test":
        raise AdaptError("--split test would train on the test queries: the test split is for evaluation only "
                         "(use --split train)")
    for name in ("batch_size", "dev_queries", "k", "m", "bm25_top"):
        if getattr(plan, name) < 1:
            raise AdaptError(f"--{name.replace('_', '-')} must be at least 1")
    if plan.labels and plan.bm25_index:
        raise AdaptError("--index is the BM25 index of the label stage: with --labels nothing is labelled")
    if plan.bm25_index:
        from ..retrieval.saved import SavedIndex

        if SavedIndex(plan.bm25_index).backend != "bm25":  # not an index folder: SavedIndexError, a ValueError
            raise AdaptError(f"--index {plan.bm25_index} is not a BM25 index (hf-dr index --data DIR --backend bm25)")


def _check_queries(plan: AdaptPlan) -> None:
    """Refuse what the training queries cannot be: generation options without generated queries, a
    folder that cannot be generated from."""
    for name in ("queries_per_doc", "num_queries"):
        if getattr(plan, name) is not None and getattr(plan, name) < 1:
            raise AdaptError(f"--{name.replace('_', '-')} must be at least 1")
    if not (plan.generates_queries or plan.fills_queries):
        if plan.generator is not None or plan.queries_per_doc is not None or plan.num_queries is not None:
            raise AdaptError("--generator / --queries-per-doc / --num-queries apply to generated queries: "
                             f"{plan.data} has its own queries.jsonl (--queries generate ignores it)")
        return
    from ..generation import DEFAULT_GENERATOR, check_generator

    if plan.labels:
        raise AdaptError(f"--labels reuses labelled queries: with --queries {plan.queries} (or a folder "
                         "without queries.jsonl) nothing would be generated; pass --queries auto to train on the "
                         "labelled ones")
    try:
        check_generator(plan.generator or DEFAULT_GENERATOR)
    except ValueError as e:
        raise AdaptError(str(e)) from None
    folder = Path(str(plan.data)).expanduser()
    if folder.is_dir() and not (folder / "corpus.jsonl").is_file():
        raise AdaptError(f"{plan.data} is not a BEIR folder: corpus.jsonl is missing")
    if plan.generates_queries and (folder / "qrels" / "test.tsv").is_file() and \
            not (folder / "queries.jsonl").is_file():
        raise AdaptError(f"{folder / 'qrels' / 'test.tsv'} judges queries that {plan.data} lacks (no queries.jsonl): "
                         "the test split could not be evaluated; add queries.jsonl or remove qrels/")


def _check_labels(plan: AdaptPlan) -> None:
    """The label stage's parameters, or a ``--labels`` folder."""
    if plan.label_config is not None:
        try:
            plan.label_config.validate()
        except ValueError as e:
            raise AdaptError(str(e)) from None
        return
    lab = Path(plan.labels).expanduser()
    if not (lab / "state.json").is_file() or not (lab / "dev" / "state.json").is_file():
        raise AdaptError(f"--labels {plan.labels} is not a `hf-dr label` output folder (a datasets folder "
                         "with the triplets and dev/)")


def _check_judged_dev(plan: AdaptPlan) -> None:
    """Refuse a ``qrels/dev.tsv`` (the judged queries that choose the checkpoint) that judges a
    query of ``qrels/test.tsv``: the test queries would then choose."""
    from ..data.beir import judged_query_ids

    qrels = Path(str(plan.data)).expanduser() / "qrels"
    if plan.split == "dev" or not (qrels / "dev.tsv").is_file() or not (qrels / "test.tsv").is_file():
        return
    both = sorted(judged_query_ids(qrels / "dev.tsv") & judged_query_ids(qrels / "test.tsv"))
    if both:
        raise AdaptError(f"qrels/dev.tsv judges {len(both)} queries that qrels/test.tsv judges too (e.g. {both[0]}): "
                         "the test queries would choose the checkpoint; judge other queries for dev.tsv")


def _check_output(plan: AdaptPlan) -> None:
    """The work folder outside the output folder, and the output folder new, empty or ``--overwrite``
    (never one that is or holds an input)."""
    from ..io import check_output_folder

    out = Path(plan.output).expanduser()
    if plan.work.resolve() == out.resolve() or out.resolve() in plan.work.resolve().parents:
        raise AdaptError(f"--work-dir {plan.work} lies inside the output folder {out}, which is replaced as a whole")
    check_output_folder(out, overwrite=plan.overwrite, inputs=list(plan.inputs))


def _check_model_objects(cfg: AdaptConfig) -> None:
    """A model given as an object (``model`` / ``dense_teacher``): a Sentence Transformers model that
    hf-dr can train exactly (:func:`hf_dr.st_encoder.trainable_as_folder`), else refused."""
    from ..st_encoder import is_sentence_transformers_model, trainable_as_folder

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


def _models_as_folders(cfg: AdaptConfig) -> AdaptConfig:
    """``cfg`` with a ``SentenceTransformer`` / ``SparseEncoder`` object given as ``model`` or
    ``dense_teacher`` replaced by its own saved folder (``model.save``, under the work folder's
    ``inputs/``, named by its fingerprint): every stage then reads it as it reads any folder, its
    prompts, pooling, similarity and max length included (checked by :func:`_check_model_objects`)."""
    from ..fingerprints import model_fingerprint
    from ..st_encoder import as_encoder

    changes = {}
    for field_name in ("model", "dense_teacher"):
        obj = getattr(cfg, field_name)
        if obj is None or isinstance(obj, (str, os.PathLike)):
            continue
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
