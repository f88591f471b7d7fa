"""Fine-tuning a retriever on DoDress pseudo-labels (papers/002 §6.1, papers/004 §5.2):
RankNet (Eq. 4 of papers/004) through the one :class:`~hf_dr.training.RetrievalTrainer`,
mean pooling + inner product, max length 350, cosine learning-rate decay, and the best
checkpoint chosen by nDCG@10 on the pseudo-labelled dev set.

Works for any encoder of the suite (``DenseEncoder``, ``BERMEncoder``, ``DDRModel``: anything
with ``tokenizer``, ``forward(input_ids, attention_mask, is_query)`` and the
``EncoderMixin`` ``encode_queries`` / ``encode_corpus``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..objectives.scale import default_scale  # re-exported: the one rule

logger = logging.getLogger(__name__)

__all__ = ["train_ranknet", "train_on_pseudo_labels", "with_teacher_scores", "default_scale", "calibrate_margin_scale"]


def calibrate_margin_scale(model, train, n: int = 256, seed: int = 0, batch_size: int = 32,
                           max_length: int | None = None) -> float:
    """The factor that puts the student's score margins on the teacher's scale: mean teacher margin
    (``pos_score - neg_score``) / mean student margin over ``n`` training triplets (a seeded
    sample), for Margin-MSE (``MarginMSEObjective(scale=...)``). Margin-MSE matches margins in
    absolute units: a student whose margins are 2x the teacher's (SPLADE's dot products against
    z-score fusion) otherwise spends its first steps shrinking every weight instead of reordering
    documents, and a cosine student (margins in [-2, 2]) widening them. Falls back to
    :func:`default_scale` when the sample's mean student margin is not positive (a student that
    ranks the sampled negatives above the positives has no scale to calibrate).
    """
    import numpy as np

    from ..evaluation import RerankEvaluator

    train = with_teacher_scores(train)
    rows = train.shuffle(seed=seed).select(range(min(n, len(train))))
    teacher = np.array([s[0] - s[1] for s in rows["scores"]], dtype=np.float64)
    # every (query, pos) and (query, neg) pair scored by the one pair-scoring path of the dev set
    pairs = [{"query_id": str(i), "query": r["query"], "doc_id": f"{col}{i}", "doc": r[col], "label": 0}
             for i, r in enumerate(rows) for col in ("pos", "neg")]
    was_training = getattr(model, "training", False)
    model.eval()
    scores = RerankEvaluator(pairs, batch_size=batch_size, max_length=max_length).run(model)
    model.train(was_training)
    margins = np.array([scores[str(i)][f"pos{i}"] - scores[str(i)][f"neg{i}"] for i in range(len(rows))])
    student = float(np.mean(margins))
    if not (np.isfinite(student) and student > 0):
        return default_scale(model)
    return float(np.mean(teacher) / student)


def train_ranknet(model, train, output_dir: str | Path, dev=None, *, scale: float | None = None,
                  freeze_documents: bool = False, **kwargs):
    """Train ``model`` with RankNet (papers/004 Eq. 4) on ``train`` (rows ``query, pos, neg``: the
    pipeline's triplets): :func:`train_on_pseudo_labels` with a
    :class:`~hf_dr.objectives.RankNetObjective` (``scale`` default :func:`default_scale`).
    Defaults are the paper's: batch 8, lr 2e-6 (Adam, no weight decay), 10k steps, cosine decay.
    Returns the trainer (``trainer.model`` holds the selected weights).
    """
    from ..objectives import RankNetObjective

    objective = RankNetObjective(scale=scale, freeze_documents=freeze_documents)  # None: the model's own
    return train_on_pseudo_labels(model, train, output_dir, dev, objective=objective, **kwargs)


def with_teacher_scores(train):
    """``train`` with a ``scores`` column ``[pos_score, neg_score]`` (the teacher's scores that the
    label stage stores on each triplet), the input of Margin-MSE / SPLADE distillation."""
    if "scores" in train.column_names:
        return train
    missing = {"pos_score", "neg_score"} - set(train.column_names)
    if missing:
        raise ValueError(f"Margin-MSE needs the teacher's scores: the training rows lack {sorted(missing)} "
                         "(label them with hf-dr label, which stores pos_score / neg_score)")
    return train.add_column("scores", [[float(p), float(n)] for p, n in zip(train["pos_score"], train["neg_score"])])


def train_on_pseudo_labels(model, train, output_dir: str | Path, dev=None, *, objective=None, collator=None,
                           teacher_scores: bool = False, max_length: int = 350, learning_rate: float = 2e-6,
                           batch_size: int = 8, max_steps: int = 10_000, eval_steps: int = 1000,
                           dev_max_length: int | None = None, seed: int = 42, logging_steps: int = 50,
                           save_total_limit: int | None = 2, resume_from_checkpoint=None, dtype: str | None = None,
                           evaluator=None, **training_kwargs):
    """Train ``model`` on pseudo-label triplets (rows ``query, pos, neg``, and ``pos_score`` /
    ``neg_score`` for ``teacher_scores``) with ``objective`` (default RankNet) through the one
    :class:`~hf_dr.training.RetrievalTrainer`. With ``dev`` (rows ``query_id, query, doc_id, doc,
    label``) the model is evaluated by nDCG@10 (:class:`~hf_dr.evaluation.RerankEvaluator`) and
    checkpointed every ``eval_steps``; the best checkpoint is loaded at the end (the scores per step
    are in ``trainer.state.log_history``, ``eval_ndcg@10``). ``collator`` defaults to a
    :class:`~hf_dr.data.RetrievalCollator` (with the ``scores`` column when ``teacher_scores``).
    ``resume_from_checkpoint`` as :meth:`RetrievalTrainer.train` reads it (``"last"``: the newest
    complete checkpoint of ``output_dir``). ``evaluator``: ``model -> {"ndcg@10": ..., ...}`` used on
    ``dev`` instead of its :class:`~hf_dr.evaluation.RerankEvaluator` (e.g. the adapt pipeline's
    dev set with judged queries). ``dtype`` (``auto`` | ``fp32`` | ``bf16`` | ``fp16``,
    :mod:`hf_dr.precision`): the Trainer's mixed precision and the precision of the dev set's encoding
    (``None``: neither is changed). Returns the trainer.
    """
    from ..data import RetrievalCollator
    from ..evaluation import RerankEvaluator
    from ..objectives import RankNetObjective
    from ..training import RetrievalTrainer, RetrievalTrainingArguments

    if len(train) == 0:
        raise ValueError("no training triplets")
    missing = {"query", "pos", "neg"} - set(train.column_names)
    if missing:
        raise ValueError(f"training rows need columns query, pos, neg (missing {sorted(missing)})")
    if teacher_scores:
        train = with_teacher_scores(train)
    has_dev = dev is not None and len(dev) > 0
    eval_steps = min(eval_steps, max_steps)
    if dtype is not None:
        from ..precision import training_precision

        training_kwargs = {**training_kwargs, **training_precision(dtype)}
        model.encode_dtype = dtype
    args = RetrievalTrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=batch_size, learning_rate=learning_rate,
        weight_decay=0.0, max_steps=max_steps, lr_scheduler_type="cosine", logging_steps=logging_steps,
        eval_strategy="steps" if has_dev else "no", eval_steps=eval_steps if has_dev else None,
        save_strategy="steps", save_steps=eval_steps, save_total_limit=save_total_limit,
        load_best_model_at_end=has_dev, metric_for_best_model="ndcg@10" if has_dev else None,
        greater_is_better=True, seed=seed, dataloader_num_workers=0, **training_kwargs)
    if collator is None:
        collator = RetrievalCollator.for_model(model, query_max_length=max_length, doc_max_length=max_length,
                                               neg_column="neg", score_column="scores" if teacher_scores else None)
    if objective is None:
        objective = RankNetObjective()  # scale: the model's own similarity
    if evaluator is None and has_dev:
        evaluator = RerankEvaluator(dev, metrics=("ndcg@10",), max_length=dev_max_length or max_length)
    trainer = RetrievalTrainer(model=model, args=args, train_dataset=train, eval_dataset=dev if has_dev else None,
                               data_collator=collator, objective=objective, evaluator=evaluator)
    trainer.train(resume_from_checkpoint)
    return trainer
