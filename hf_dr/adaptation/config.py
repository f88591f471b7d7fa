"""What ``hf-dr adapt`` is asked to do: :class:`AdaptConfig` (the command line's flags, or the
Python API's arguments), its refusal :class:`AdaptError`, and the rules a run derives values by
(the checkpoint interval, the training queries). :func:`hf_dr.adaptation.plan.resolve` turns a
config into the frozen plan the stages read: the method's defaults applied once, every derived
value computed once, every refusal checked before anything is written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["AdaptConfig", "AdaptError", "CONFIG_FIELDS", "FALLBACKS", "default_work_dir", "work_dir", "eval_steps",
           "EVAL_FLOOR", "MAX_EVALUATIONS", "generates_queries", "fills_queries", "default_num_queries"]

#: what a method leaves unset when it has no value of its own
FALLBACKS = {"batch_size": 8}
#: the configuration fields a benchmark row records (everything that changes the result), besides the
#: methods' own options (:func:`hf_dr.adaptation.plan.resolve`: every registered method's)
CONFIG_FIELDS = ("max_steps", "batch_size", "learning_rate", "max_length", "eval_steps", "dev_queries", "negatives",
                 "k", "m", "bm25_top", "teacher", "seed", "dtype")


class AdaptError(ValueError):
    """A configuration ``adapt`` refuses (printed as one line by the command line)."""


@dataclass
class AdaptConfig:
    """Everything ``adapt`` depends on (``hf-dr adapt --help`` documents each flag)."""

    data: str
    model: str  # a folder or Hub id; a SentenceTransformer / SparseEncoder object (saved into the work folder)
    method: str  # a registered method (hf_dr.adaptation.methods)
    output: str
    split: str = "train"
    kind: str = "auto"  # how to read ``model``: auto | dense | sparse (an MLM checkpoint as SPLADE)
    max_steps: int | None = None  # None: the method's default (Method.defaults)
    batch_size: int | None = None  # None: the method's default (8 unless it has its own)
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
    labels: str | None = None
    bm25_index: str | None = None  # a saved BM25 index of the corpus (hf-dr index --backend bm25): the label stage's
    seed: int = 0
    overwrite: bool = False
    work_dir: str | None = None
    command: str | None = None
    show_progress_bar: bool = False
    dtype: str = "auto"  # auto | fp32 | bf16 | fp16: encoding and training precision (hf_dr.precision)
    # the training queries: auto = the folder's own, generated when it has no queries.jsonl; generate =
    # generated from the corpus even when it has queries (never read then); fill = the folder's own plus
    # generated ones up to default_num_queries (measured: docs/adapt.md); hf_dr.generation
    queries: str = "auto"
    generator: str | None = None  # None: hf_dr.generation.DEFAULT_GENERATOR
    queries_per_doc: int | None = None  # None: one per document drawn, num_queries of them (GPL's rule above |corpus|)
    num_queries: int | None = None  # None: default_num_queries(cfg)
    query_prompt: str | None = None  # prepended to the queries by the model (None: its own prompt; "": none)
    document_prompt: str | None = None  # prepended to the documents (None: its own prompt; "": none)
    # the method's own options ({name: value}, the fields of its Options dataclass; hf-dr adapt: the flags of
    # its argument group); those not given take the method's defaults. Another method's are refused.
    options: Mapping[str, Any] = field(default_factory=dict)


def default_work_dir(output: str | Path) -> Path:
    """``.NAME.work`` beside the output folder ``NAME`` (outside it: the output is replaced whole)."""
    out = Path(output).expanduser()
    return out.with_name(f".{out.name}.work")


def work_dir(cfg: AdaptConfig) -> Path:
    """The run's work folder: ``cfg.work_dir``, or :func:`default_work_dir`."""
    return Path(cfg.work_dir).expanduser() if cfg.work_dir else default_work_dir(cfg.output)


#: the fewest training steps between two dev evaluations by default (every measured row's setting):
#: 100 steps x batch 8 train on 800 triplets (2,400 texts forward and backward), about 7 times the
#: encoding of the default dev set (50 queries x 20 candidates)
EVAL_FLOOR = 100
#: the most dev evaluations of one run (an --eval-steps below max-steps / 10 is raised to it)
MAX_EVALUATIONS = 10


def eval_steps(cfg: AdaptConfig) -> int:
    """A checkpoint + dev evaluation every ``eval_steps``: by default every fifth of the run, never
    more often than every :data:`EVAL_FLOOR` steps; never more than :data:`MAX_EVALUATIONS` of them
    (a smaller ``--eval-steps`` is raised to ``ceil(max_steps / MAX_EVALUATIONS)``); never past the
    end. A run shorter than the floor is evaluated once, at its end (and at step 0, the starting
    model): ``--max-steps 4`` evaluates at step 4 only."""
    least = -(-cfg.max_steps // MAX_EVALUATIONS)
    return min(max(cfg.eval_steps or max(EVAL_FLOOR, cfg.max_steps // 5), least), cfg.max_steps)


def generates_queries(cfg: AdaptConfig) -> bool:
    """Whether the run's training queries are generated from the corpus: ``--queries generate``, or
    ``auto`` on a local folder without ``queries.jsonl``."""
    if cfg.queries == "generate":
        return True
    p = Path(str(cfg.data)).expanduser()
    return cfg.queries in ("auto", "fill") and p.is_dir() and not (p / "queries.jsonl").is_file()


def fills_queries(cfg: AdaptConfig, generated: bool) -> bool:
    """Whether the run trains on the folder's own queries plus generated ones (``--queries fill`` on a
    folder that has queries: as many generated as bring the training queries to
    :func:`default_num_queries`; on a folder without queries, ``fill`` generates them all).
    ``generated``: :func:`generates_queries` of ``cfg``."""
    return cfg.queries == "fill" and not generated


def default_num_queries(cfg: AdaptConfig) -> int:
    """How many queries the generate stage makes by default: as many as the training reads triplets
    (``max_steps x batch_size``: each row of a batch comes, on average, from another query; a query
    gives ``k x m`` triplets), plus ``5 x dev_queries`` (the dev set takes at most a fifth of them)."""
    return cfg.max_steps * cfg.batch_size + 5 * cfg.dev_queries

