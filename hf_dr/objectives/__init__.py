"""Training objectives: glue between a collated batch and the loss functions of
:mod:`hf_dr.losses`. One file per method; each objective is a callable

    objective(model, inputs: dict[str, Tensor]) -> (loss: Tensor, logs: dict[str, float])

used by :class:`hf_dr.training.RetrievalTrainer`. ``model`` is any encoder of the suite
(its ``forward(input_ids, attention_mask, is_query)`` returns embeddings; call it through
:func:`hf_dr.encoding.embed` so DDP wrappers work).
"""

from .contrastive import ContrastiveObjective, MarginMSEObjective, all_gather_with_grad
from .ranknet import RankNetObjective
from .splade import SpladeObjective
from .berm import BERMObjective
from .mlm import MLMObjective

OBJECTIVES = {
    "contrastive": ContrastiveObjective,
    "margin_mse": MarginMSEObjective,
    "splade": SpladeObjective,
    "berm": BERMObjective,
    "ranknet": RankNetObjective,
    "mlm": MLMObjective,
}


def get_objective(name: str, **kwargs):
    """Build a registered objective by name (clear error for an unknown one)."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; choose one of {sorted(OBJECTIVES)}")
    return OBJECTIVES[name](**kwargs)


__all__ = ["OBJECTIVES", "get_objective", "ContrastiveObjective", "MarginMSEObjective",
           "all_gather_with_grad", "SpladeObjective", "BERMObjective", "RankNetObjective",
           "MLMObjective"]
