"""BERM's Table 5 (Xu et al. 2023, papers/000, §5.4): how balanced and how extractable a
model's representations are, measured on (query, positive passage) pairs.

* **Var.** — for each passage, the variance over its units of ``sim(t_p, E) = {t_p . e_i}``
  (Eq. 4's similarities, before the softmax), averaged over passages. Smaller = the text
  representation expresses its units more evenly (R1).
* **Acc.** — how often the unit with the highest extract score ``m . e_i`` (``m = GELU(t_q ⊙
  t_p)``, Eq. 5) is the annotated essential unit (§4.1: BM25 + optional reader). Bigger = the
  matching representation extracts the matching unit (R2).

Only passages with at least two units count (with one unit the variance is 0 and the
"identification" is trivially right); for Acc. the pair must also have a label (a query with
no term overlap has none). The counts are reported next to the numbers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from .plotting import save_figure

__all__ = ["berm_diagnostics", "plot_berm_diagnostics"]


def berm_diagnostics(model, rows, *, batch_size: int = 16, max_query_length: int | None = None,
                     max_doc_length: int | None = None, show_progress_bar: bool = True, device=None) -> dict:
    """Table-5 numbers of ``model`` (a :class:`~hf_dr.models.berm.BERMEncoder`, or any model
    whose forward takes ``output_token_states=True``) on ``rows``: a ``datasets.Dataset`` /
    list of dicts with ``query``, ``pos`` and the unit columns of
    :func:`hf_dr.data.units.annotate_units` (annotated here when missing).

    Returns ``{"variance", "accuracy", "chance_accuracy" (mean 1/n_units), "n_pairs", "n_variance", "n_accuracy",
    "per_pair_variance", "per_pair_correct"}``.
    """
    from tqdm.auto import tqdm

    from ..data.collators import UnitCollator
    from ..devices import resolve_device
    from ..labeling.units import annotate_units
    from ..models.berm.modeling_berm import matching_representation, unit_mean_pool

    if not isinstance(rows, list):
        if "essential_unit" not in rows.column_names:
            rows = annotate_units(rows, show_progress_bar=show_progress_bar)
        rows = rows.to_list()
    elif rows and "essential_unit" not in rows[0]:
        from datasets import Dataset

        rows = annotate_units(Dataset.from_list(rows), show_progress_bar=show_progress_bar).to_list()
    if not rows:
        raise ValueError("no (query, positive) pairs to diagnose")
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise ValueError("the model has no tokenizer (model.tokenizer)")
    cfg = model.config
    collator = UnitCollator(tok, query_max_length=max_query_length or getattr(cfg, "max_query_length", 64),
                            doc_max_length=max_doc_length or getattr(cfg, "max_doc_length", 256),
                            neg_column=None, score_column=None)
    dev = resolve_device(device) if device is not None else next(model.parameters()).device
    model.to(dev)
    was_training = model.training
    model.eval()
    variances: list[float] = []
    correct: list[bool] = []
    chance: list[float] = []  # 1 / n_units: the accuracy of picking a unit at random
    try:
        with torch.inference_mode():
            for s in tqdm(range(0, len(rows), batch_size), desc="BERM diagnostics", disable=not show_progress_bar):
                batch = {k: v.to(dev) for k, v in collator(rows[s:s + batch_size]).items()}
                t_q = model(batch["query_input_ids"], batch["query_attention_mask"], is_query=True)
                out = model(batch["doc_input_ids"], batch["doc_attention_mask"], output_token_states=True)
                mask = batch["unit_mask"]
                units = unit_mean_pool(out.last_hidden_state, batch["unit_spans"], mask)
                sim = torch.einsum("bd,bud->bu", out.embeddings, units).float()
                ext = torch.einsum("bd,bud->bu", matching_representation(t_q, out.embeddings), units).float()
                ext = ext.masked_fill(~mask, float("-inf"))
                n = mask.sum(1)
                for i in range(len(n)):
                    if int(n[i]) < 2:
                        continue
                    variances.append(float(sim[i][mask[i]].var(unbiased=False)))
                    label = int(batch["unit_labels"][i])
                    if label >= 0:
                        correct.append(int(ext[i].argmax()) == label)
                        chance.append(1.0 / int(n[i]))
    finally:
        if was_training:
            model.train()
    return {"variance": float(np.mean(variances)) if variances else float("nan"),
            "accuracy": float(np.mean(correct)) if correct else float("nan"),
            "chance_accuracy": float(np.mean(chance)) if chance else float("nan"), "n_pairs": len(rows),
            "n_variance": len(variances), "n_accuracy": len(correct),
            "per_pair_variance": variances, "per_pair_correct": [bool(c) for c in correct]}


def plot_berm_diagnostics(results: Mapping[str, dict], path: str | os.PathLike, title: str = "") -> Path:
    """Before/after plot: per-passage variance distributions (log scale) and accuracies,
    one colour per model (``results``: name -> :func:`berm_diagnostics` output)."""
    from ..extras import require

    require("matplotlib").use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for name in names:
        v = np.asarray(results[name]["per_pair_variance"], dtype=float)
        v = v[v > 0]
        if len(v):
            a1.hist(np.log10(v), bins=40, alpha=0.5, label=f"{name} (mean {results[name]['variance']:.3g})")
    a1.set_xlabel("log10 Var(sim(t_p, E)) per passage")
    a1.set_ylabel("passages")
    a1.set_title("R1: semantic unit balance (lower = better)")
    a1.legend(fontsize=8)
    acc = [results[n]["accuracy"] for n in names]
    a2.bar(range(len(names)), acc, color=[f"C{i}" for i in range(len(names))])
    a2.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    a2.set_ylim(0, 1)
    a2.set_title("R2: essential unit identification accuracy")
    for i, a in enumerate(acc):
        a2.text(i, a + 0.02, f"{a:.3f}", ha="center")
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)
