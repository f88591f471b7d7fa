"""The protocol of an adaptation method (:class:`Method`), what it is handed, and the one way to
train on pseudo-label triplets (:class:`TripletMethod`)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...stage_cache import StageCache
from ..config import AdaptConfig
from ..student import save_model, with_prompts

__all__ = ["Method", "TripletMethod", "TrainingSetup", "TrainInputs", "DevSet", "Prepared", "option"]


def option(default: Any = None, help: str = "", *, flag: str | None = None, minimum: int | None = None,
           parse: Callable[[str], Any] | None = None, metavar: str | None = None, is_input: bool = False,
           record: bool = True):
    """A field of a method's :attr:`Method.Options` dataclass, with what the command line makes of
    it: ``help``; ``flag`` (default ``--NAME`` with dashes); ``minimum`` (a whole number at least
    that); ``parse`` (text -> value, ``ValueError`` on bad text) for any other value type; ``is_input``
    (a local path the run reads: never overwritten); ``record`` (``False``: not in metrics.json's
    ``config``). A ``bool`` field is a ``--flag / --no-flag`` pair. ``None`` means "not given" on the
    command line, so a field's own default is what the method uses unless :attr:`Method.defaults`
    sets another."""
    return field(default=default, metadata={"help": help, "flag": flag, "minimum": minimum, "parse": parse,
                                            "metavar": metavar, "input": is_input, "record": record})


@dataclass
class DevSet:
    """The dev set that chooses the checkpoint, and how a model is scored on it (nDCG@10, cached by
    the model's weights): the pseudo-labelled rows (``query_id, query, doc_id, doc, label``: held-out
    training queries, their teacher's top 10 and a few hard negatives, reranked) and, when the user
    judged a few queries (``qrels/dev.tsv``), ``judged``
    (:class:`~hf_dr.adaptation.judged.JudgedDev`): selection's nDCG@10 is then that of its
    selection half, by full-corpus retrieval; its verdict half is never scored here. One
    evaluation encodes each candidate document once, with a progress bar (on a terminal)."""

    rows: Any  # a datasets.Dataset (the pseudo-labelled dev set)
    key: str  # the hash of its content (hf_dr.stage_cache.dataset_digest), the judged set's included
    max_length: int
    cache: StageCache
    judged: Any = None  # hf_dr.adaptation.judged.JudgedDev (qrels/dev.tsv), or None
    #: ``(select, verdict)``: the pseudo-dev query ids split by the seed (``stages._pseudo_dev``); with no
    #: judged query the selection half chooses the checkpoint and the verdict half states the verdict
    pseudo_halves: tuple[list[str], list[str]] | None = None
    _evaluator: Any = field(default=None, init=False, repr=False)

    @property
    def source(self) -> str:
        """What selection's nDCG@10 is measured on: ``judged`` or ``pseudo``."""
        return "judged" if self.judged else "pseudo"

    @property
    def pseudo_verdict(self) -> list[str] | None:
        """The held-out pseudo-dev queries that state the verdict when no query is judged (None: the
        pseudo-dev set is not split, or holds one query)."""
        return self.pseudo_halves[1] if self.pseudo_halves and self.pseudo_halves[1] and not self.judged else None

    def _get_evaluator(self):
        from ...evaluation import RerankEvaluator

        if self._evaluator is None:
            self._evaluator = RerankEvaluator(list(self.rows), metrics=("ndcg@10",), max_length=self.max_length,
                                              show_progress_bar=None)
        return self._evaluator

    def evaluate(self, model, doc_vectors=None, fingerprint: str | None = None, corpus=None) -> dict:
        """``model`` on the dev set: ``ndcg@10`` (selection's), ``pseudo_ndcg@10`` (and
        ``judged_ndcg@10``: the judged selection half), their per-query scores, and the pseudo-dev
        ranking (``pseudo_run``). ``doc_vectors``: ``{doc_id: vector}`` this model has encoded
        already; ``corpus``: ``(doc_ids, matrix)``, its encoding of the whole corpus."""
        from ...evaluation import evaluate_run

        ev = self._get_evaluator()
        run = ev.run(model, doc_vectors)
        res = evaluate_run(ev.qrels, run, ("ndcg@10",))
        out: dict = {"pseudo_ndcg@10": float(res.aggregate["ndcg@10"]), "pseudo_per_query": res.per_query["ndcg@10"]}
        if self.judged:
            from ..judged import SELECT

            s = self.judged.scores(SELECT, model, fingerprint, corpus)
            out["judged_ndcg@10"], out["judged_per_query"] = s["ndcg@10"], s["per_query"]
        out["ndcg@10"] = out[f"{self.source}_ndcg@10"]
        if self.pseudo_verdict:  # the selection half chooses; the verdict half is never part of the choice
            pq = out["pseudo_per_query"]
            chosen = [pq[q] for q in self.pseudo_halves[0] if q in pq]
            out["ndcg@10"] = float(sum(chosen) / len(chosen)) if chosen else 0.0
        out["pseudo_run"] = run
        return out

    def scores(self, stage: str, model, fingerprint: str | None = None, doc_vectors=None, corpus=None) -> dict:
        """:meth:`evaluate`, cached as ``stage`` (``fingerprint``: the model's, when known;
        ``doc_vectors`` / ``corpus``: documents this model has encoded already)."""
        from ...fingerprints import model_fingerprint

        fp = fingerprint or model_fingerprint(model)
        key = {"model": fp, "dev": self.key, "max_length": self.max_length, "v": 4}
        return self.cache.json(stage, key, lambda: self.evaluate(model, doc_vectors, fp, corpus))

    def score(self, stage: str, model, fingerprint: str | None = None) -> float:
        """``model``'s dev nDCG@10 (selection's), cached as ``stage``."""
        return float(self.scores(stage, model, fingerprint)["ndcg@10"])

    def describe_pseudo_split(self) -> dict | None:
        """metrics.json's account of the pseudo-dev split (None when it is not used: judged queries
        choose, or it is not split)."""
        if not self.pseudo_verdict:
            return None
        from ..judged import SPLIT_SALT

        select, verdict = self.pseudo_halves
        return {"select_queries": select, "verdict_queries": verdict,
                "split": f"seeded (salt {SPLIT_SALT}): {len(select)} pseudo-dev queries choose the checkpoint, "
                         f"{len(verdict)} held out state the verdict"}

    def trainer_evaluator(self, view=None):
        """The Trainer's evaluator: ``{"ndcg@10", "pseudo_ndcg@10"[, "judged_ndcg@10"]}`` of the
        training model, or of ``view(model)`` (:meth:`Method.output_view`: the model as it ships)."""
        def evaluator(model) -> dict[str, float]:
            scored = model if view is None else view(model)
            return {k: v for k, v in self.evaluate(scored).items() if k.endswith("ndcg@10")}

        return evaluator


@dataclass
class Prepared:
    """What :meth:`Method.prepare` hands the training: the model it starts from, and what to report."""

    model: Any
    report: dict | None = None  # metrics.json's entry for the method (Method.report)
    status: str | None = None  # "computed" / "cached" when the preparation is a stage of its own


@dataclass
class TrainInputs:
    """Everything a method's training reads besides its configuration and its model."""

    triplets: Any  # the pseudo-label triplets (a datasets.Dataset: query, pos, neg, pos_score, neg_score)
    triplets_key: str  # the hash of their content
    dev: DevSet
    data: Any  # the target data (hf_dr.data.BeirData): its corpus; the test split is never read here
    run_dir: Path  # checkpoints (a crashed run resumes from the newest complete one); ``selected/`` at the end
    max_length: int
    cache: StageCache
    say: Callable[[str], None]


class Method:
    """One adaptation method: what it starts from, how it trains, what it outputs and says.

    Set the class attributes, override what differs from the defaults below, and register the
    class (:func:`~.registry.register_method`): ``hf-dr adapt --method NAME`` then runs it through
    every stage (:mod:`hf_dr.adaptation.stages`), which names no method. Its training writes scored
    checkpoints; the stages cache the run by its inputs, choose among the checkpoints (the
    untrained model included), evaluate and write the output.
    """

    name: str = ""
    #: what it trains with (``--help``, metrics.json and the card say it)
    description: str = ""
    #: the configuration of its measured row: AdaptConfig fields left at None, and its own options not
    #: given, take these values (applied once, by :func:`~hf_dr.adaptation.plan.resolve`)
    defaults: Mapping[str, Any] = {}
    #: what differs from ``defaults`` when the training queries are generated from the corpus (
    #: :func:`~hf_dr.adaptation.config.generates_queries`): the configuration of its measured corpus-only row
    generated_defaults: Mapping[str, Any] = {}
    #: the method's own options: a dataclass of :func:`option` fields (``hf-dr adapt`` makes a flag of
    #: each, in the method's argument group; given to another method, it is refused); the run reads
    #: them as ``cfg.options`` (:class:`~hf_dr.adaptation.plan.AdaptPlan`), filled by :attr:`defaults`
    Options: type | None = None
    #: metrics.json ``budget`` entries this method fills (:meth:`budget`): every run's budget holds
    #: them, None for the other methods
    budget_fields: tuple[str, ...] = ()
    #: False: training reads no triplet (only the dev set), and its cache key leaves them out
    trains_on_triplets: bool = True
    #: metrics.json holds an entry named after the method (:meth:`report`; None for the others)
    reports: bool = False

    def check(self, cfg: AdaptConfig) -> None:
        """Refuse (:class:`~hf_dr.adaptation.config.AdaptError`) what this method cannot run, before any work."""

    def load_student(self, cfg: AdaptConfig):
        """The untrained starting model (a suite encoder)."""
        from ...models import load_encoder

        return load_encoder(cfg.model, kind=cfg.kind)

    def prepare(self, cfg: AdaptConfig, student, data, max_length: int, work: Path, say) -> Prepared:
        """The model training starts from (by default the student itself, which training copies)."""
        return Prepared(student)

    def train_key(self, cfg: AdaptConfig) -> dict:
        """Parameters of the training's cache key beyond those every method has."""
        return {}

    def train(self, cfg: AdaptConfig, model, inputs: TrainInputs) -> dict:
        """Train ``model`` (a copy: train it in place), a checkpoint ``inputs.run_dir/checkpoint-STEP``
        every :func:`~hf_dr.adaptation.config.eval_steps`, each scored on ``inputs.dev``; save the
        best as the output model to ``inputs.run_dir/selected`` (:meth:`save`). Returns the record
        of the run: ``{"dev": {step: dev nDCG@10}, ...}`` (saved as its ``DONE.json``)."""
        raise NotImplementedError

    def checkpoint_to_model(self, init, checkpoint: Path):
        """The model of a training checkpoint (``init``: the model training started from)."""
        from ...training import load_checkpoint_into

        model = copy.deepcopy(init)
        load_checkpoint_into(model, checkpoint)
        return model

    def as_output(self, cfg: AdaptConfig, model):
        """A trained model as the method outputs it."""
        return model

    def output_view(self, cfg: AdaptConfig, model):
        """``model`` as :meth:`as_output` makes it, sharing its weights and leaving ``model`` as it
        trains: what the dev set scores at each evaluation during training, so the checkpoints are
        compared as they would ship and the one chosen scores, saved, what selection saw. The model
        itself where :meth:`as_output` changes nothing (the default); a method whose output differs
        from its training model (``cai``: IDF on the documents) overrides both."""
        return model

    def save(self, cfg: AdaptConfig, model, folder: Path) -> Path:
        """A trained model, as the method outputs it, saved whole to ``folder`` with ``--query-prompt`` /
        ``--document-prompt`` set (the saved model carries the prompts it is evaluated with)."""
        return save_model(with_prompts(cfg, self.as_output(cfg, model)), folder)

    def save_checkpoint(self, cfg: AdaptConfig, init, checkpoint: Path, folder: Path) -> Path:
        """The model of a training checkpoint, saved whole to ``folder``."""
        return self.save(cfg, self.checkpoint_to_model(init, checkpoint), folder)

    def base_fingerprints(self, cfg: AdaptConfig, student) -> list[str]:
        """Fingerprints (:func:`hf_dr.fingerprints.model_fingerprint`) of the dense models the student
        is built on, besides its own (e.g. the backbone a ``BERMEncoder`` wraps): a fusion teacher
        whose dense half is one of them contains the student. By default what the student records
        as ``base_fingerprints``."""
        return list(getattr(student, "base_fingerprints", None) or [])

    def budget(self, cfg: AdaptConfig, record: dict) -> dict:
        """The method's own entries of metrics.json's ``budget`` (e.g. ``mlm_steps``)."""
        return {}

    def report(self, cfg: AdaptConfig, student, prepared: Prepared) -> dict | None:
        """metrics.json's entry named after the method (with :attr:`reports`)."""
        return prepared.report

    def card_rows(self, metrics: dict) -> list[str]:
        """The method's rows of the card's training table (``| name | value |``)."""
        return []


@dataclass
class TrainingSetup:
    """How a :class:`TripletMethod` trains: its objective and what it reads."""

    objective: Any  # objective(model, inputs) -> (loss, logs), as hf_dr.objectives
    triplets: Any = None  # the triplets as the objective reads them (None: the labels' own)
    collator: Any = None  # None: a RetrievalCollator for the model
    teacher_scores: bool = False  # the batches carry the teacher's scores of each triplet
    record: dict = field(default_factory=dict)  # kept in the run's record (e.g. Margin-MSE's scale)


class TripletMethod(Method):
    """A method that trains the student on the pseudo-label triplets with one objective
    (:meth:`objective`), through :func:`hf_dr.labeling.finetune.train_on_pseudo_labels`: the one
    :class:`~hf_dr.training.RetrievalTrainer`, the dev set scored at every checkpoint, the best
    loaded at the end."""

    def objective(self, cfg: AdaptConfig, model, inputs: TrainInputs) -> TrainingSetup:
        raise NotImplementedError

    def train(self, cfg: AdaptConfig, model, inputs: TrainInputs) -> dict:
        from ...labeling.finetune import train_on_pseudo_labels
        from ...training import last_complete_checkpoint, quiet_progress_bars

        setup = self.objective(cfg, model, inputs)
        run_dir, max_length = inputs.run_dir, inputs.max_length
        last = last_complete_checkpoint(run_dir)
        if last:
            inputs.say(f"train: resuming from {Path(last).name} ({cfg.max_steps} steps in all)")
        else:
            inputs.say(f"train: {cfg.max_steps} steps ({cfg.method}, batch {cfg.batch_size}, "
                       f"lr {cfg.learning_rate:g}, max length {max_length})")
        if not cfg.show_progress_bar:
            quiet_progress_bars()
        model.train()
        trainer = train_on_pseudo_labels(
            model, inputs.triplets if setup.triplets is None else setup.triplets, run_dir, inputs.dev.rows,
            objective=setup.objective, collator=setup.collator, teacher_scores=setup.teacher_scores,
            max_length=max_length, learning_rate=cfg.learning_rate, batch_size=cfg.batch_size,
            max_steps=cfg.max_steps, eval_steps=cfg.eval_steps, seed=cfg.seed,
            logging_steps=max(1, min(50, cfg.max_steps // 10)), save_total_limit=None,
            resume_from_checkpoint="last" if last else None, disable_tqdm=not cfg.show_progress_bar,
            dtype=cfg.dtype, evaluator=inputs.dev.trainer_evaluator(lambda m: self.output_view(cfg, m)))
        model = trainer.model
        model.eval()
        logs = trainer.state.log_history
        dev = {int(e["step"]): float(e["eval_ndcg@10"]) for e in logs if "eval_ndcg@10" in e}
        by_set = {f"dev_{name}": {int(e["step"]): float(e[f"eval_{name}_ndcg@10"]) for e in logs
                                  if f"eval_{name}_ndcg@10" in e} for name in ("pseudo", "judged")}
        if dev:  # the best checkpoint is loaded at the end of training
            self.save(cfg, model, run_dir / "selected")
        best = trainer.state.best_model_checkpoint
        return {"dev": dev, **{k: v for k, v in by_set.items() if v}, **setup.record,
                "best_checkpoint": Path(best).name if best else None}
