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
scored by full-corpus retrieval (:mod:`hf_dr.adaptation.judged`), a trained checkpoint output only
on a held-out gain past its 95% prediction interval; else the pseudo-labelled
held-out training queries, where a trained checkpoint replaces the start only when the teacher
does not contain it and its gain passes the same bar, else it is kept beside the start as unverified;
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

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import stages
from .config import AdaptConfig, AdaptError, default_work_dir
from .methods import METHOD_DEFAULTS, METHODS
from .plan import AdaptPlan, resolve
from .stages import results_table

logger = logging.getLogger(__name__)

__all__ = ["METHODS", "METHOD_DEFAULTS", "AdaptConfig", "AdaptPlan", "AdaptResult", "AdaptError", "adapt", "resolve",
           "default_work_dir", "results_table"]


@dataclass
class AdaptResult:
    output: Path
    metrics: dict
    work_dir: Path
    stages: dict = field(default_factory=dict)  # stage -> "cached" / "computed" / "reused"


def adapt(cfg: AdaptConfig | AdaptPlan, progress: Callable[[str], None] | None = None) -> AdaptResult:
    """Run ``cfg.method`` end to end and write ``cfg.output`` (see the module docstring): the config
    resolved into its plan (:func:`~.plan.resolve`: every refusal before anything is written), then
    the stages in order. ``progress`` receives one line per stage (the command prints them)."""
    say = progress or (lambda s: logger.info("%s", s))
    plan = cfg if isinstance(cfg, AdaptPlan) else resolve(cfg)
    run = stages.start(plan, say)
    stages.generate(run)  # queries for a corpus that has none (or --queries generate)
    labels = stages.label(run)
    labels = stages.judged_dev(run, labels)  # qrels/dev.tsv: the user's judged dev queries choose
    trained = stages.train(run, labels)
    chosen = stages.select(run, labels, trained)
    evaluation = stages.evaluate(run, chosen)
    metrics = stages.write(run, labels, trained, chosen, evaluation)
    return AdaptResult(Path(run.cfg.output).expanduser(), metrics, run.work, run.stages)
