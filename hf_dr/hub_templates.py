"""Card templates and their rendering — the one place model and dataset cards are made.

Templates live in the repository's ``model_cards/``, which the package reaches through
``hf_dr/templates`` (a link in the source tree, real files in a built wheel, so a plain
``pip install`` has them); ``$HF_DR_MODEL_CARDS`` points at another folder. They are jinja files rendered by
:meth:`huggingface_hub.ModelCard.from_template` / :meth:`~huggingface_hub.DatasetCard.from_template`
with the YAML card data written between the ``---`` lines.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_PKG = Path(__file__).resolve().parent

__all__ = ["template_path", "render_card", "write_card"]


def template_path(name: str) -> Path:
    """The file of card template ``name`` (e.g. ``"ddr_rem.md"``)."""
    for d in (os.environ.get("HF_DR_MODEL_CARDS"), _PKG / "templates"):
        if d and (Path(d) / name).is_file():
            return Path(d) / name
    raise FileNotFoundError(f"card template {name} not found in {os.environ.get('HF_DR_MODEL_CARDS') or _PKG / 'templates'} "
                            "(set HF_DR_MODEL_CARDS to a folder of card templates)")


def render_card(template: str | os.PathLike, card_data: Mapping[str, Any] | None = None, *,
                repo_type: str = "model", **variables):
    """Render ``model_cards/<template>.md`` (or the template file ``template``) with ``card_data`` (YAML metadata: ``tags``,
    ``base_model``, ``task_categories``...) and the template's ``variables``; returns the
    :class:`~huggingface_hub.ModelCard` (``repo_type="model"``) or ``DatasetCard``."""
    from huggingface_hub import DatasetCard, DatasetCardData, ModelCard, ModelCardData

    if repo_type not in ("model", "dataset"):
        raise ValueError(f"repo_type must be 'model' or 'dataset', got {repo_type!r}")
    card_cls, data_cls = (ModelCard, ModelCardData) if repo_type == "model" else (DatasetCard, DatasetCardData)
    if isinstance(template, Path) or Path(template).is_file():
        path = Path(template)
    else:
        path = template_path(template if template.endswith(".md") else f"{template}.md")
    return card_cls.from_template(data_cls(**dict(card_data or {})), template_path=str(path), **variables)


def write_card(out_dir: str | os.PathLike, template: str, card_data: Mapping[str, Any] | None = None, *,
               repo_type: str = "model", **variables) -> Path:
    """:func:`render_card` saved as ``out_dir/README.md``; returns that path."""
    path = Path(out_dir) / "README.md"
    render_card(template, card_data, repo_type=repo_type, **variables).save(path)
    return path
