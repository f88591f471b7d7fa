"""``adapt``: adapt a retriever to a target corpus in one call (``hf-dr adapt``).

label (DoDress pseudo-relevance labels of the *training* queries, or a ``hf-dr label`` folder)
-> train (the method's objective through the one :class:`~hf_dr.training.RetrievalTrainer`)
-> select (nDCG@10 on the pseudo-labelled dev set of held-out training queries, the untrained
starting model included as "step 0": no checkpoint beating it keeps the starting model; not when
the teacher fuses BM25 with the starting model itself, whose dev labels then favour it)
-> evaluate (only now is the test split read; before / after with a paired t-test, when it has
qrels) -> a Hub-ready folder ``OUT/model`` + card ``OUT/README.md`` + ``OUT/metrics.json``,
written whole through :func:`hf_dr.io.output_folder`.

Methods (:data:`METHODS`):

* ``dodress``: RankNet on the pseudo-label triplets (papers/002, 004);
* ``pseudo-margin-mse``: Margin-MSE on the teacher's scores of the same triplets (as GPL does);
* ``cai``: SPLADE-CAI (papers/003): AdaLM vocabulary expansion + continual MLM (``--mlm-steps 0``:
  none) + IDF on the target corpus (:func:`hf_dr.adaptation.cai.run_cai`), then SPLADE training on
  the target pseudo-labels in the paper's target-supervision setting (contrastive, FLOPS weights
  0.0006 / 0.0008), documents weighted by IDF only in the output; the student is an MLM checkpoint;
* ``berm``: BERM (papers/000) on the pseudo-labels, sentence units annotated by BM25;
* ``ddr``: DDR (papers/001) for a trained REM (``--model REM``): a target DAM by continual MLM on
  the corpus, started from the REM's own (source) DAM (the paper's sequential initialisation); every
  MLM checkpoint, paired with the unchanged REM, is a candidate on the dev set. The REM is not
  retrained (train a REM on pseudo-labels with ``dodress`` / ``pseudo-margin-mse`` and a REM as
  ``--model``: its DAM stays frozen).

Every stage is cached in a work folder beside the output (``.OUT.work``, or ``work_dir``),
keyed on the content of its inputs and its parameters: the label stage by
:class:`~hf_dr.labeling.pseudo_relevance.StageCache`, the CAI stages by their ``DONE.json``
markers, training by a folder named by the hash of (method, starting weights, labels,
hyper-parameters) whose checkpoints are resumed after a crash, the evaluations by the model's
weights and the test data. A re-run with one changed parameter redoes only what depends on it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["METHODS", "AdaptConfig", "AdaptResult", "AdaptError", "adapt", "check_config", "default_work_dir", "results_table"]

#: method -> what it trains with (the card says it)
METHODS = {
    "dodress": "RankNet on DoDress pseudo-label triplets (papers/002, papers/004)",
    "pseudo-margin-mse": "Margin-MSE on the teacher's scores of the DoDress pseudo-label triplets (as GPL does)",
    "cai": "SPLADE-CAI: AdaLM vocabulary expansion + continual MLM + IDF on the target corpus, then SPLADE "
           "training on the target pseudo-labels (papers/003; IDF on the documents of the output)",
    "berm": "BERM (balance + extract unit losses, papers/000) on the DoDress pseudo-label triplets",
    "ddr": "DDR: a target DAM by continual MLM on the corpus for a given REM (papers/001)",
}
METRICS = ("ndcg@10", "recall@100")

#: each method's defaults: the configuration of its measured row in benchmarks/results/adapt.json
#: (``python benchmarks/adapt.py``, which runs ``hf-dr adapt`` with no tuning flag; a test checks that
#: the two agree). cai: no vocabulary expansion and no continual MLM — both measured to collapse
#: splade-tiny (0.644 -> 0.30-0.33 with the AdaLM vocabulary; 0.20 after 1,000 MLM steps), see
#: docs/splade_cai.md — and SPLADE training at lr 1e-4.
METHOD_DEFAULTS = {
    "pseudo-margin-mse": {"max_steps": 500, "learning_rate": 2e-5},
    "dodress": {"max_steps": 300, "learning_rate": 2e-5},
    "cai": {"max_steps": 300, "learning_rate": 1e-4, "mlm_steps": 0, "expand_vocabulary": False},
    "berm": {"max_steps": 200, "learning_rate": 2e-5},
    "ddr": {"max_steps": 300, "learning_rate": 2e-5},
}
#: what a method leaves unset when it has no value of its own (cai's chain, when asked for)
FALLBACKS = {"mlm_steps": 1000, "expand_vocabulary": True}
#: the configuration fields a benchmark row records (everything that changes the result)
CONFIG_FIELDS = ("max_steps", "batch_size", "learning_rate", "max_length", "eval_steps", "dev_queries", "negatives",
                 "k", "m", "bm25_top", "teacher", "mlm_steps", "expand_vocabulary", "delta_v", "margin_scale", "seed",
                 "dtype")


class AdaptError(ValueError):
    """A configuration ``adapt`` refuses (printed as one line by the command line)."""


@dataclass
class AdaptConfig:
    """Everything ``adapt`` depends on (``hf-dr adapt --help`` documents each flag)."""

    data: str
    model: str
    method: str
    output: str
    split: str = "train"
    kind: str = "auto"  # how to read ``model``: auto | dense | sparse (an MLM checkpoint as SPLADE)
    max_steps: int | None = None  # None: the method's default (METHOD_DEFAULTS)
    batch_size: int = 8
    learning_rate: float | None = None  # None: the method's default
    max_length: int | None = None
    eval_steps: int | None = None
    dev_queries: int = 50
    negatives: str = "simans"
    k: int = 1
    m: int = 10
    bm25_top: int = 100
    max_queries: int | None = None
    teacher: str = "fusion"
    dense_teacher: str | None = None
    mlm_steps: int | None = None  # cai; None: the method's default (0)
    expand_vocabulary: bool | None = None  # cai; None: the method's default (False)
    delta_v: int = 3000
    rem: str | None = None
    margin_scale: float | str | None = None  # Margin-MSE: None = default_scale, "auto" = calibrated, or a factor
    labels: str | None = None
    bm25_index: str | None = None  # a saved BM25 index of the corpus (hf-dr index --backend bm25): the label stage's
    seed: int = 0
    overwrite: bool = False
    work_dir: str | None = None
    command: str | None = None
    show_progress_bar: bool = False
    dtype: str = "auto"  # auto | fp32 | bf16 | fp16: encoding and training precision (hf_dr.precision)
    query_prompt: str | None = None  # prepended to the queries by the model (None: its own prompt; "": none)
    document_prompt: str | None = None  # prepended to the documents (None: its own prompt; "": none)


@dataclass
class AdaptResult:
    output: Path
    metrics: dict
    work_dir: Path
    stages: dict = field(default_factory=dict)  # stage -> "cached" / "computed" / "reused"


def with_method_defaults(cfg: AdaptConfig) -> AdaptConfig:
    """``cfg`` with every field left at ``None`` set to its method's default (:data:`METHOD_DEFAULTS`),
    and ``eval_steps`` resolved (:func:`_eval_steps`)."""
    import dataclasses

    own = {**FALLBACKS, **METHOD_DEFAULTS.get(cfg.method, {})}
    filled = {k: v for k, v in own.items() if getattr(cfg, k) is None}
    cfg = dataclasses.replace(cfg, **filled)
    if cfg.eval_steps is None and cfg.max_steps and cfg.max_steps > 0:
        cfg = dataclasses.replace(cfg, eval_steps=_eval_steps(cfg))
    return cfg


def resolved_config(cfg: AdaptConfig) -> dict:
    """The fields of :data:`CONFIG_FIELDS` after :func:`with_method_defaults` (what metrics.json records)."""
    cfg = with_method_defaults(cfg)
    return {k: getattr(cfg, k) for k in CONFIG_FIELDS}


def default_work_dir(output: str | Path) -> Path:
    """``.NAME.work`` beside the output folder ``NAME`` (outside it: the output is replaced whole)."""
    out = Path(output).expanduser()
    return out.with_name(f".{out.name}.work")


def _digest(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _dataset_digest(ds) -> str:
    """A hash of a ``datasets.Dataset``'s columns and values (its content, not its fingerprint)."""
    h = hashlib.sha1(json.dumps(sorted(ds.column_names)).encode())
    for batch in ds.iter(batch_size=10_000):
        h.update(json.dumps(batch, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def _is_local(p) -> bool:
    return bool(p) and Path(str(p)).expanduser().exists()


# ----------------------------------------------------------------------------- checks
def check_config(cfg: AdaptConfig) -> None:
    """Refuse, before any work, what cannot run (:class:`AdaptError`)."""
    from ..io import check_output_folder, local_inputs
    from ..labeling.pseudo_relevance import PseudoLabelConfig

    if cfg.method not in METHODS:
        raise AdaptError(f"unknown method {cfg.method!r}: one of {', '.join(METHODS)}")
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
    if cfg.method == "ddr":
        _ddr_rem(cfg)
    for name in ("max_steps", "batch_size", "dev_queries", "k", "m", "bm25_top"):
        if getattr(cfg, name) < 1:
            raise AdaptError(f"--{name.replace('_', '-')} must be at least 1")
    if cfg.margin_scale is not None and cfg.method != "pseudo-margin-mse":
        raise AdaptError(f"--margin-scale sets Margin-MSE's factor: it applies to --method pseudo-margin-mse, "
                         f"not {cfg.method}")
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
    if cfg.method == "cai":
        from ..models import check_model

        mcfg = check_model(cfg.model, kind="sparse")  # no MLM head: ModelLoadError (a ValueError)
        if "auto_map" in mcfg:
            raise AdaptError(f"--method cai starts from a masked-LM checkpoint (e.g. splade-tiny, "
                             f"bert-base-uncased); {cfg.model} is a saved hf-dr model "
                             f"({mcfg.get('model_type')}): adapt it with dodress or pseudo-margin-mse instead")
    work = Path(cfg.work_dir).expanduser() if cfg.work_dir else default_work_dir(cfg.output)
    out = Path(cfg.output).expanduser()
    if work.resolve() == out.resolve() or out.resolve() in work.resolve().parents:
        raise AdaptError(f"--work-dir {work} lies inside the output folder {out}, which is replaced as a whole")
    check_output_folder(out, overwrite=cfg.overwrite,
                        inputs=local_inputs(cfg.data, cfg.model, cfg.labels, cfg.dense_teacher, cfg.rem, cfg.bm25_index,
                                            work))


# ----------------------------------------------------------------------------- models
def _ddr_rem(cfg: AdaptConfig) -> str:
    """The trained REM ``--method ddr`` adapts: ``--model`` when it is a DDR REM folder (or Hub id
    given as ``--rem``); anything else is refused (:class:`AdaptError`)."""
    if cfg.rem and str(cfg.rem) != str(cfg.model):
        raise AdaptError(f"--method ddr: give the REM once, as --model (got --model {cfg.model} and --rem {cfg.rem})")
    cfg_file = Path(str(cfg.model)).expanduser() / "config.json"
    model_type = None
    if cfg_file.is_file():
        try:
            model_type = json.loads(cfg_file.read_text()).get("model_type")
        except ValueError:
            model_type = None
    elif cfg.rem:  # a Hub id named as a REM
        return str(cfg.rem)
    if model_type != "ddr":
        raise AdaptError(f"--method ddr adapts a trained DDR REM to the corpus (a target DAM for it): {cfg.model} is "
                         f"not a REM ({model_type or 'no DDR config.json'}); train one with examples/train_ddr.py, "
                         f"or adapt this model with dodress / pseudo-margin-mse")
    return str(cfg.model)


def _max_positions(model) -> int | None:
    cfg = getattr(model, "config", None)
    for c in (getattr(cfg, "backbone_config", None), cfg):
        n = getattr(c, "max_position_embeddings", None)
        if isinstance(n, int) and n > 0:
            return n
    return None


def _own_max_length(model) -> int:
    own = getattr(model, "max_doc_length", None) or getattr(getattr(model, "config", None), "max_doc_length", None)
    own = own or 256
    cap = _max_positions(model)
    return min(own, cap) if cap else own


def _set_max_length(model, n: int) -> None:
    """The student encodes (and is saved) with max length ``n``."""
    if hasattr(model, "max_doc_length") and not hasattr(model.config, "max_doc_length"):
        model.max_doc_length = model.max_query_length = n  # DenseEncoder
    for c in (getattr(model, "config", None),):
        if c is not None and hasattr(c, "max_doc_length"):
            c.max_doc_length = n
            if hasattr(c, "max_query_length"):
                c.max_query_length = min(c.max_query_length or n, n)


def _load_student(cfg: AdaptConfig):
    """The untrained starting model of the method (a suite encoder)."""
    from ..models import load_encoder

    if cfg.method == "cai":
        return load_encoder(cfg.model, kind="sparse")
    if cfg.method == "ddr":
        from ..models.ddr import DDRModel

        return DDRModel.from_pretrained(_ddr_rem(cfg))  # the REM on its source DAM
    model = load_encoder(cfg.model, kind=cfg.kind)
    if cfg.method == "berm" and type(model).__name__ != "BERMEncoder":
        from ..models.berm import BERMEncoder

        if getattr(model, "output_is_sparse", False):
            raise AdaptError(f"--method berm trains a dense encoder; {cfg.model} is a sparse model")
        pooling = getattr(model, "pooling", "cls")
        similarity = "cos" if getattr(model, "normalize", False) else "dot"
        model = BERMEncoder.from_backbone(cfg.model, pooling=pooling, similarity=similarity,
                                          max_doc_length=_own_max_length(model),
                                          max_query_length=_own_max_length(model))
    return model


def _with_prompts(cfg: AdaptConfig, model):
    """``model`` with ``--query-prompt`` / ``--document-prompt`` (when given) set."""
    from ..encoding import apply_prompts

    return apply_prompts(model, cfg.query_prompt, cfg.document_prompt)


def _save_model(model, folder: Path) -> Path:
    """``model.save_pretrained`` into ``folder``, atomically."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok = getattr(model, "tokenizer", None)
    if tok is not None and not (tmp / "tokenizer_config.json").is_file():
        tok.save_pretrained(tmp)
    from ..io import replace_folder

    replace_folder(tmp, folder)  # the old folder goes only once the new one is in place
    return folder


# ----------------------------------------------------------------------------- the pipeline
def adapt(cfg: AdaptConfig, progress: Callable[[str], None] | None = None) -> AdaptResult:
    """Run ``cfg.method`` end to end and write ``cfg.output`` (see the module docstring).
    ``progress`` receives one line per stage (the command prints them)."""
    from datasets import load_from_disk

    from ..data import beir
    from ..embeddings import model_fingerprint
    from ..evaluation import RerankEvaluator
    from ..labeling.pseudo_relevance import PseudoLabelConfig, StageCache, build_pseudo_labels

    say = progress or (lambda s: logger.info("%s", s))
    check_config(cfg)
    cfg = with_method_defaults(cfg)
    out = Path(cfg.output).expanduser()
    work = Path(cfg.work_dir).expanduser() if cfg.work_dir else default_work_dir(out)
    work.mkdir(parents=True, exist_ok=True)
    cache = StageCache(work / "cache")
    stages: dict[str, str] = {}
    t_start = time.time()

    # the corpus and the training queries only (never their labels; the test split is not read here)
    data, queries, has_train_qrels = beir.load_training_queries(cfg.data, split=cfg.split)
    student = _with_prompts(cfg, _load_student(cfg))
    student.encode_dtype = cfg.dtype
    max_length = cfg.max_length or _own_max_length(student)
    _set_max_length(student, max_length)

    # 1. label
    t0 = time.time()
    if cfg.labels:
        lab = Path(cfg.labels).expanduser()
        train, dev = load_from_disk(str(lab)), load_from_disk(str(lab / "dev"))
        try:
            label_stats = json.loads((lab / "stats.json").read_text())
        except (OSError, ValueError):
            label_stats = {}
        stages["label"] = "reused"
        say(f"label: reusing {cfg.labels} ({len(train)} triplets, {len(dev)} dev rows)")
    else:
        dense = None
        dense_name = cfg.dense_teacher
        if cfg.dense_teacher:
            from ..models import load_encoder

            dense = load_encoder(cfg.dense_teacher)
            dense.encode_dtype = cfg.dtype
            if cfg.max_length:
                _set_max_length(dense, max_length)
        elif not getattr(student, "output_is_sparse", False):
            dense, dense_name = student, cfg.model
        elif cfg.teacher == "fusion" or cfg.negatives == "simans":  # a sparse student: the quickstart's dense model
            from ..models import default_model_path, load_encoder

            dense_name = default_model_path()
            say("label: the dense half of the teacher / SimANS is all-MiniLM-L6-v2, the quickstart's model "
                "(--dense-teacher to change)")
            dense = load_encoder(dense_name)
            if cfg.max_length:
                _set_max_length(dense, max_length)
        pl_cfg = PseudoLabelConfig(split=cfg.split, bm25_top=cfg.bm25_top, k=cfg.k, m=cfg.m, negatives=cfg.negatives,
                                   dev_queries=cfg.dev_queries, max_queries=cfg.max_queries, seed=cfg.seed,
                                   dense_max_length=max_length if dense is not None else None)
        bm25 = None
        if cfg.bm25_index:
            from ..retrieval.saved import SavedIndex

            bm25 = SavedIndex(cfg.bm25_index).bm25_index(data)
        labels = build_pseudo_labels(data, work / "labels", pl_cfg, reranker=cfg.teacher, dense_encoder=dense,
                                     dense_name=dense_name, bm25=bm25, queries=queries, cache_dir=work / "cache",
                                     command=cfg.command, show_progress_bar=cfg.show_progress_bar, overwrite=True,
                                     inputs=[cfg.data, cfg.model, cfg.dense_teacher])
        train, dev, label_stats = labels.train, labels.dev, labels.stats
        computed = label_stats["cache"]["computed"]
        stages["label"] = "computed" if computed else "cached"
        say(f"label: {'cached' if not computed else 'computed'} ({len(train)} triplets from "
            f"{label_stats['train_queries']} queries, dev set of {label_stats['dev_queries']} queries)")
        from ..labeling.pseudo_relevance import degenerate_summary

        summary = degenerate_summary(label_stats, keep_hint="hf-dr label --keep-degenerate, then --labels, keeps them")
        if summary:  # #21: queries whose labels cannot be trusted (dropped)
            say(f"label: {summary}")
    label_minutes = (time.time() - t0) / 60
    if len(dev) == 0:
        raise AdaptError("the pseudo-labelled dev set is empty (too few training queries: the dev set takes at most "
                         "1/5 of them): the checkpoint cannot be chosen; label more queries")
    labels_key = {"train": _dataset_digest(train), "dev": _dataset_digest(dev)}
    teacher_name = label_stats.get("reranker") or cfg.teacher

    # 2. dev score of the untrained starting model ("step 0")
    start_fp = model_fingerprint(student)
    evaluator = RerankEvaluator(dev, metrics=("ndcg@10",), max_length=max_length)
    dev0 = cache.json("dev_step0", {"model": start_fp, "dev": labels_key["dev"], "max_length": max_length},
                      lambda: float(evaluator(student)["ndcg@10"]))
    say(f"dev: starting model nDCG@10 = {dev0:.4f} (step 0)")

    # 3. method-specific preparation + training
    t1 = time.time()
    init, init_fp, prep = student, start_fp, {}
    if cfg.method == "cai":
        init, prep = _cai_backbone(cfg, data, work, max_length, say, stages)
        init_fp = model_fingerprint(init)
    train_params = {"method": cfg.method, "init": init_fp,
                    "labels": labels_key if cfg.method != "ddr" else {"dev": labels_key["dev"]}, "max_steps": cfg.max_steps,
                    "batch_size": cfg.batch_size, "lr": cfg.learning_rate, "max_length": max_length,
                    "eval_steps": _eval_steps(cfg), "seed": cfg.seed, **_dtype_key(cfg),
                    **({"margin_scale": cfg.margin_scale} if cfg.method == "pseudo-margin-mse" else {})}
    run_dir = work / f"train-{cfg.method}-{_digest(train_params)}"
    done = run_dir / "DONE.json"
    if done.is_file():
        record = json.loads(done.read_text())
        stages["train"] = "cached"
        say(f"train: cached ({cfg.max_steps} steps, {run_dir.name})")
    else:
        # train a copy: ``student`` stays the untrained starting model ("step 0", the "before" row)
        if cfg.method == "ddr":  # the DAM is trained (MLM); the REM is kept
            record = _train_ddr(cfg, student, data.doc_texts(), evaluator, labels_key["dev"], run_dir, max_length,
                                    say, cache)
        else:
            record = _train(cfg, copy.deepcopy(init) if init is student else init, train, dev, run_dir, max_length,
                            say, cache)
        record["minutes"] = round((time.time() - t1) / 60, 2)
        stages["train"] = "computed"
    dev_scores = {"0": dev0, **{str(k): v for k, v in record["dev"].items()}}
    best_step, best = max(((int(s), v) for s, v in record["dev"].items()), key=lambda x: (x[1], -x[0]),
                          default=(0, float("-inf")))
    # a fusion teacher over the starting model itself grades the dev set partly with the starting
    # model's own scores: step 0 would be judged on labels it helped make, so it is no candidate then
    label_dense_fp = (label_stats.get("fingerprints") or {}).get("dense_model")
    teacher_has_student = str(teacher_name).startswith("fusion") and label_dense_fp == start_fp
    if teacher_has_student and record["dev"]:
        say("select: the teacher fuses BM25 with the starting model itself, so the dev labels favour it: step 0 "
            "is shown but is no candidate")
    kept_start = not record["dev"] or (not teacher_has_student and not best > dev0)
    if kept_start:
        selected_step, selected_dev = 0, dev0
        say(f"select: no checkpoint beats the starting model on the dev set (best {best:.4f} at step {best_step} "
            f"<= {dev0:.4f}): keeping the starting model")
        selected_dir = work / f"start-{start_fp[:16]}"
        if not (selected_dir / "config.json").is_file():
            _save_model(student, selected_dir)
    else:
        selected_step, selected_dev = best_step, best
        selected_dir = run_dir / "selected"
        say(f"select: step {best_step} (dev nDCG@10 {best:.4f}; {dev0:.4f} at step 0)")
    last_step = max((int(x) for x in record["dev"]), default=0)
    last_dir = run_dir / "last"
    if not done.is_file():
        from ..io import atomic_write_json

        if last_step and last_step != selected_step:  # kept for the test-split report of what selection avoided
            _save_checkpoint_model(cfg, init, run_dir / f"checkpoint-{last_step}", last_dir)
        atomic_write_json(done, record, indent=1)
        for c in run_dir.glob("checkpoint-*"):  # the selected weights are saved: checkpoints are not needed
            shutil.rmtree(c, ignore_errors=True)
    train_minutes = record.get("minutes", 0.0)

    # 4. evaluation on the test split: read only now
    before = after = last_eval = None
    t_stat = p_value = None
    labelled_eval = beir.has_split(cfg.data, "test")
    if labelled_eval:
        from ..models import load_encoder

        test = beir.load_beir(cfg.data, split="test")
        selected = student if kept_start else _with_prompts(cfg, load_encoder(selected_dir))
        selected.encode_dtype = cfg.dtype
        before = _evaluate_cached(cache, student, test, cfg.batch_size)
        after = before if kept_start else _evaluate_cached(cache, selected, test, cfg.batch_size)
        t_stat, p_value = _ttest(after, before)
        say(f"evaluate: test nDCG@10 {before['aggregate']['ndcg@10']:.4f} -> {after['aggregate']['ndcg@10']:.4f} "
            f"(p = {p_value:.3g}, {after['n_queries']} queries)")
        if last_step != selected_step and (last_dir / "config.json").is_file():
            last_model = _with_prompts(cfg, load_encoder(last_dir))
            last_model.encode_dtype = cfg.dtype
            res = _evaluate_cached(cache, last_model, test, cfg.batch_size)["aggregate"]
            last_eval = {"step": last_step, **res}
            say(f"evaluate: the last checkpoint (step {last_step}, not selected) would score test nDCG@10 "
                f"{res['ndcg@10']:.4f}")
    else:
        say("evaluate: no qrels/test.tsv: no labelled evaluation possible (the pseudo-labelled dev set is the only "
            "yardstick)")

    below = None
    if before is not None:
        below = after["aggregate"]["ndcg@10"] < before["aggregate"]["ndcg@10"]
    metrics = {
        "method": cfg.method, "method_description": METHODS[cfg.method],
        "model": _public(cfg.model), "data": _public(cfg.data), "split": cfg.split,
        "training_queries_have_qrels": has_train_qrels, "teacher": teacher_name,
        "dense_teacher": _public(cfg.dense_teacher) if cfg.dense_teacher else label_stats.get("dense_model"),
        "labels": _public(cfg.labels) if cfg.labels else None,
        **({"bm25_index": _public(cfg.bm25_index)} if cfg.bm25_index else {}),
        "labelled_evaluation": labelled_eval,
        "before": before["aggregate"] if before else None, "after": after["aggregate"] if after else None,
        "test_queries": after["n_queries"] if after else None,
        "t_statistic": t_stat, "p_value": p_value,
        "dev": dev_scores, "selected_step": selected_step, "selected_dev_ndcg@10": selected_dev,
        "kept_starting_model": kept_start, "below_zero_shot": below,
        "teacher_contains_student": teacher_has_student, "starting_model_is_candidate": not teacher_has_student,
        # the test score of the last checkpoint when selection chose another: how selection fared
        "last_checkpoint": last_eval,
        "budget": {"steps": cfg.max_steps, "eval_steps": _eval_steps(cfg), "batch_size": cfg.batch_size,
                   "learning_rate": cfg.learning_rate, "max_length": max_length,
                   "mlm_steps": cfg.mlm_steps if cfg.method == "cai" else None,
                   "margin_scale": record.get("margin_scale"),
                   "dtype": _dtype_name(cfg), "label_minutes": round(label_minutes, 2), "train_minutes": train_minutes,
                   "minutes": round((time.time() - t_start) / 60, 2)},
        "label_stats": {k: label_stats.get(k) for k in ("train_queries", "dev_queries", "triplets", "dev_rows",
                                                      "queries_without_bm25_hits", "dtype") if k in label_stats},
        "negatives": (label_stats.get("config") or {}).get("negatives", cfg.negatives),
        "cai": prep or None,
        "ddr": {"rem": _public(_ddr_rem(cfg)), "trained": "the target DAM (continual MLM); the REM unchanged",
                "source_dam": _public(student.config.dam_name_or_path)} if cfg.method == "ddr" else None,
        "config": resolved_config(cfg), "command": _public_command(cfg.command), "stages": stages,
    }
    _write_output(cfg, out, work, selected_dir, metrics, after)
    say(f"wrote {out} (model/, README.md, metrics.json)")
    return AdaptResult(out, metrics, work, stages)


def _eval_steps(cfg: AdaptConfig) -> int:
    """A checkpoint + dev evaluation every ``eval_steps``; by default every fifth of the run but not
    more often than every 100 steps (every measured row's setting), never past the end."""
    return min(cfg.eval_steps or max(100, cfg.max_steps // 5), cfg.max_steps)


def _dtype_name(cfg: AdaptConfig) -> str:
    """``fp32`` / ``bf16`` / ``fp16``: what ``cfg.dtype`` resolves to here (recorded in the budget)."""
    from ..precision import dtype_name

    return dtype_name(cfg.dtype)


def _public(v):
    from ..io import public_name

    return public_name(v) if v else v


def _public_command(command):
    from ..labeling.pseudo_relevance import _public_command as pc

    return pc(command)


def _cai_backbone(cfg: AdaptConfig, data, work: Path, max_length: int, say, stages):
    """The CAI chain's target-corpus stages (vocabulary expansion, continual MLM, IDF) by
    :func:`run_cai`, cached in a folder keyed on the backbone's weights, the corpus and the
    parameters; returns the SPLADE model the training starts from and the chain's report."""
    from ..models.splade import SPLADECAI
    from ..models import check_model
    from .cai import CAIArguments, run_cai
    from ..labeling.pseudo_relevance import _folder_fingerprint

    corpus_fp = data.corpus_fingerprint()
    local = Path(str(cfg.model)).expanduser()
    params = {"backbone": _folder_fingerprint(local) if local.exists() else str(cfg.model), "corpus": corpus_fp, "vocab": cfg.expand_vocabulary,
              "delta_v": cfg.delta_v, "mlm_steps": cfg.mlm_steps, "bs": cfg.batch_size, "len": max_length,
              "seed": cfg.seed, **_dtype_key(cfg)}
    check_model(cfg.model, kind="sparse")
    d = work / f"cai-{_digest(params)}"
    fresh = not (d / "report.json").is_file()
    say(f"cai: {'vocabulary expansion + ' if cfg.expand_vocabulary else ''}"
        f"{f'continual MLM ({cfg.mlm_steps} steps) + ' if cfg.mlm_steps else ''}IDF on the target corpus"
        if fresh else f"cai: cached ({d.name})")
    report = run_cai(CAIArguments(backbone=str(cfg.model), target_data=str(cfg.data), source_data="",
                                  output_dir=str(d), target_split=None, expand_vocabulary=cfg.expand_vocabulary,
                                  delta_v=cfg.delta_v, continual_mlm=cfg.mlm_steps > 0,
                                  mlm_steps=max(1, cfg.mlm_steps), mlm_batch_size=cfg.batch_size,
                                  mlm_max_length=max_length, train_splade=False, evaluate=False, seed=cfg.seed),
                     dtype=cfg.dtype) \
        if fresh else json.loads((d / "report.json").read_text())
    stages["cai"] = "computed" if fresh else "cached"
    model = SPLADECAI.from_pretrained(report["model_dir"])
    _set_max_length(model, max_length)
    model.config.use_idf = False  # fitted; switched on in the trained model (_as_output), never while training
    vocab = report.get("vocabulary") or {}
    return model, {"vocabulary_added": vocab.get("added"), "vocabulary_size": vocab.get("final"),
                   "mlm_steps": cfg.mlm_steps, "idf": True}


def _margin_scale(cfg: AdaptConfig, model, train, max_length: int, say) -> float:
    """Margin-MSE's factor on the student's scores: ``--margin-scale`` as given, ``auto``
    (:func:`~hf_dr.labeling.finetune.calibrate_margin_scale`: the student's margins put on the
    teacher's scale), or by default :func:`~hf_dr.labeling.finetune.default_scale`."""
    from ..labeling.finetune import calibrate_margin_scale, default_scale

    if cfg.margin_scale is None:
        return default_scale(model)
    if cfg.margin_scale == "auto":
        scale = calibrate_margin_scale(model, train, seed=cfg.seed, batch_size=cfg.batch_size, max_length=max_length)
        say(f"train: margin scale {scale:.3g} (mean teacher margin / mean student margin on 256 training triplets)")
        return scale
    return float(cfg.margin_scale)


def _train(cfg: AdaptConfig, model, train, dev, run_dir: Path, max_length: int, say, cache) -> dict:
    """Train ``model`` on the pseudo-labels with the method's objective, checkpoints (and their dev
    nDCG@10) every ``eval_steps``; resumes from the newest complete checkpoint of ``run_dir``.
    Saves the best checkpoint's weights to ``run_dir/selected``; returns ``{"dev": {step: score}}``."""
    from ..labeling.finetune import train_on_pseudo_labels
    from ..training import last_complete_checkpoint, quiet_progress_bars

    kwargs: dict = {}
    scale = None  # Margin-MSE's factor on the student's scores (recorded)
    if cfg.method == "dodress":
        from ..objectives import RankNetObjective

        kwargs["objective"] = RankNetObjective()  # scale: the model's own similarity
    elif cfg.method == "pseudo-margin-mse":
        from ..objectives import MarginMSEObjective

        scale = _margin_scale(cfg, model, train, max_length, say)
        kwargs.update(objective=MarginMSEObjective(scale=scale), teacher_scores=True)
    elif cfg.method == "cai":
        from ..objectives import SpladeObjective

        # the paper's setting for SPLADE trained on target-domain supervision (papers/003 App. A,
        # Table 9): in-batch + hard-negative contrastive loss, FLOPS weights lambda_Q = 0.0006,
        # lambda_D = 0.0008 (Formal et al. 2021); the source-domain weights 0.08 / 0.1 strip an
        # already sparse model's documents (measured at lr 1e-4: 263 -> 174 active dimensions in 100 steps,
        # dev nDCG@10 down). Documents without IDF while training.
        kwargs["objective"] = SpladeObjective(lambda_q=0.0006, lambda_d=0.0008,
                                              warmup_steps=max(1, cfg.max_steps // 3))
    elif cfg.method == "berm":
        from ..data import UnitCollator
        from ..data.units import annotate_units
        from ..objectives import BERMObjective

        parts, _ = cache.datasets("berm_units", {"train": _dataset_digest(train)},
                                  lambda: ({"train": annotate_units(train, show_progress_bar=False)}, {}))
        train = parts["train"]
        kwargs.update(objective=BERMObjective(),  # scale: the model's own similarity
                      collator=UnitCollator.for_model(model, query_max_length=max_length, doc_max_length=max_length,
                                                      neg_column="neg", score_column=None))
    last = last_complete_checkpoint(run_dir)
    if last:
        say(f"train: resuming from {Path(last).name} ({cfg.max_steps} steps in all)")
    else:
        say(f"train: {cfg.max_steps} steps ({cfg.method}, batch {cfg.batch_size}, lr {cfg.learning_rate:g}, "
            f"max length {max_length})")
    if not cfg.show_progress_bar:
        quiet_progress_bars()
    model.train()
    trainer = train_on_pseudo_labels(
        model, train, run_dir, dev, max_length=max_length, learning_rate=cfg.learning_rate,
        batch_size=cfg.batch_size, max_steps=cfg.max_steps, eval_steps=_eval_steps(cfg), seed=cfg.seed,
        logging_steps=max(1, min(50, cfg.max_steps // 10)), save_total_limit=None,
        resume_from_checkpoint="last" if last else None, disable_tqdm=not cfg.show_progress_bar, dtype=cfg.dtype,
        **kwargs)
    model = trainer.model
    model.eval()
    dev_scores = {int(e["step"]): float(e["eval_ndcg@10"]) for e in trainer.state.log_history if "eval_ndcg@10" in e}
    if dev_scores:  # the best checkpoint is loaded at the end of training
        _save_model(_as_output(cfg, model), run_dir / "selected")
    return {"dev": dev_scores, "margin_scale": scale,
            "best_checkpoint": Path(trainer.state.best_model_checkpoint).name
            if trainer.state.best_model_checkpoint else None}


def _train_ddr(cfg: AdaptConfig, model, texts, evaluator, dev_key: str, run_dir: Path, max_length: int, say,
               cache) -> dict:
    """DDR's target DAM (papers/001 Sec. 3.3): continual MLM on the corpus ``texts`` from the REM's
    source DAM, a checkpoint every ``eval_steps``; each checkpoint, paired with the unchanged REM, is
    scored on the dev set. Saves the best pair (REM + ``dam/``) to ``run_dir/selected``; returns
    ``{"dev": {step: score}}``. Resumes from the newest complete checkpoint of ``run_dir``."""
    from transformers import TrainingArguments

    from ..embeddings import model_fingerprint
    from ..training import last_complete_checkpoint, quiet_progress_bars
    from .mlm import MLMArguments, load_mlm_model, train_mlm

    source = model.config.dam_name_or_path
    last = last_complete_checkpoint(run_dir)
    if last:
        say(f"train: resuming the target DAM's MLM from {Path(last).name} ({cfg.max_steps} steps in all)")
    else:
        say(f"train: target DAM by continual MLM on {len(texts)} documents ({cfg.max_steps} steps, batch "
            f"{cfg.batch_size}, lr {cfg.learning_rate:g}, max length {max_length}), from the REM's DAM")
    if not cfg.show_progress_bar:
        quiet_progress_bars()
    args = TrainingArguments(output_dir=str(run_dir), max_steps=cfg.max_steps, per_device_train_batch_size=cfg.batch_size,
                             learning_rate=cfg.learning_rate, save_strategy="steps", save_steps=_eval_steps(cfg),
                             save_total_limit=None, seed=cfg.seed, data_seed=cfg.seed, report_to=[],
                             logging_steps=max(1, min(50, cfg.max_steps // 10)), disable_tqdm=not cfg.show_progress_bar,
                             **_training_precision(cfg))
    mlm = load_mlm_model(source)
    train_mlm(mlm, model.tokenizer, texts, args, MLMArguments(max_length=max_length),
              resume_from_checkpoint=last or False, save=False)
    del mlm
    checkpoints = sorted(run_dir.glob("checkpoint-*"), key=lambda c: int(c.name.split("-")[-1]))
    candidate, dev = copy.deepcopy(model), {}
    for ckpt in checkpoints:
        step = int(ckpt.name.split("-")[-1])
        candidate.load_dam(str(ckpt))
        dev[step] = cache.json("dev_ddr", {"model": model_fingerprint(candidate), "dev": dev_key,
                                           "max_length": max_length},
                               lambda: float(evaluator(candidate)["ndcg@10"]))
        say(f"dev: target DAM at step {step}: nDCG@10 = {dev[step]:.4f}")
    if dev:
        best = max(dev, key=lambda s: (dev[s], -s))
        _save_checkpoint_model(cfg, model, run_dir / f"checkpoint-{best}", run_dir / "selected")
    return {"dev": dev}


def _dtype_key(cfg: AdaptConfig) -> dict:
    """``{"dtype": ...}`` in a stage's cache key when it is not fp32 (fp32 keeps the keys of before)."""
    name = _dtype_name(cfg)
    return {"dtype": name} if name != "fp32" else {}


def _training_precision(cfg: AdaptConfig) -> dict:
    from ..precision import training_precision

    return training_precision(cfg.dtype)


def _save_checkpoint_model(cfg: AdaptConfig, init, checkpoint: Path, folder: Path) -> None:
    """The model of a training checkpoint, saved whole to ``folder`` (``init``: the model training
    started from; for DDR the checkpoint is a DAM for the unchanged REM)."""
    from ..training import load_checkpoint_into

    model = copy.deepcopy(init)
    if cfg.method == "ddr":
        model.load_dam(str(checkpoint))
    else:
        load_checkpoint_into(model, checkpoint)
    _save_model(_as_output(cfg, model), folder)


def _as_output(cfg: AdaptConfig, model):
    """A trained model as the method outputs it: ``cai`` switches on the IDF document weighting
    (papers/003 Eq. 7, fitted on the target corpus before training and kept off while training and
    on the dev set: the weighting applies at search time)."""
    if cfg.method == "cai":
        model.config.use_idf = True
    return model


def _evaluate_cached(cache, model, test, batch_size: int) -> dict:
    """``{"aggregate", "per_query", "n_queries"}`` of ``model`` on the test split (the one
    :func:`hf_dr.evaluation.evaluate` path), cached by the model's weights and the test data."""
    from ..embeddings import model_fingerprint
    from ..evaluation import evaluate
    from ..retrieval import EncoderRetriever

    corpus_fp = test.corpus_fingerprint()
    from ..precision import dtype_name, encoding_dtype

    dt = dtype_name(encoding_dtype(model))
    key = {"model": model_fingerprint(model), "corpus": corpus_fp, "qrels": _digest(test.qrels),
           "queries": _digest(test.split_queries()), "metrics": list(METRICS), **({"dtype": dt} if dt != "fp32" else {})}

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


def results_table(m: dict) -> str:
    from ..evaluation import metric_label

    if not m["labelled_evaluation"]:
        return ""
    lines = ["| model | " + " | ".join(metric_label(x) for x in METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    for name, agg in (("zero-shot (before)", m["before"]), (f"adapted ({m['method']}, after)", m["after"])):
        lines.append(f"| {name} | " + " | ".join(f"{agg[x]:.4f}" for x in METRICS) + " |")
    return "\n".join(lines)


def _write_output(cfg: AdaptConfig, out: Path, work: Path, selected_dir: Path, metrics: dict, after) -> None:
    """``OUT/model`` (the Hub folder of the model's kind, as ``hf-dr push`` writes it), ``OUT/README.md``
    and ``OUT/metrics.json``, written whole."""
    from ..hub import _hub_id, prepare_model_folder
    from ..hub_templates import write_card
    from ..io import atomic_write_json, local_inputs, output_folder

    eval_files = []
    if after is not None:  # the results table of the model's own card (hf-dr evaluate's JSON shape)
        p = work / "eval-after.json"
        atomic_write_json(p, {"metrics": after["aggregate"], "n_queries": after["n_queries"], "data": str(cfg.data),
                              "split": "test", "retriever": f"adapted ({cfg.method})"}, indent=1)
        eval_files.append(p)
    inputs = local_inputs(cfg.data, cfg.model, cfg.labels, cfg.dense_teacher, cfg.rem, work)
    with output_folder(out, overwrite=cfg.overwrite, inputs=inputs) as tmp:
        prepare_model_folder(selected_dir, tmp / "model", metrics=eval_files, base_model=_hub_id(cfg.model))
        atomic_write_json(tmp / "metrics.json", metrics, indent=1)
        source = Path(str(cfg.data).rstrip("/")).name
        card_data = dict(language="en", license="apache-2.0", library_name="transformers",
                         pipeline_tag="feature-extraction", base_model=_hub_id(cfg.model),
                         tags=["hf-dr", "domain-adaptation", cfg.method])
        b = metrics["budget"]
        warning = ""
        if metrics["below_zero_shot"]:
            warning = (f"The adapted model scores below the zero-shot model on the test split "
                       f"({metrics['after']['ndcg@10']:.4f} < {metrics['before']['ndcg@10']:.4f}).")
        write_card(tmp, "adapted", card_data, m=metrics, source_name=source, results=results_table(metrics),
                   dev_rows="\n".join(f"| {s}{' (starting model)' if s == '0' else ''} | {v:.4f} |"
                                      for s, v in sorted(metrics["dev"].items(), key=lambda x: int(x[0]))),
                   budget=b, warning=warning, model_name=_public(cfg.model),
                   command=metrics["command"] or "(library call: hf_dr.adaptation.pipeline.adapt)")
