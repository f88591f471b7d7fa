"""The model being adapted (the student): its max length, its prompts, and saving it whole."""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["own_max_length", "set_max_length", "with_prompts", "save_model"]


def _max_positions(model) -> int | None:
    cfg = getattr(model, "config", None)
    for c in (getattr(cfg, "backbone_config", None), cfg):
        n = getattr(c, "max_position_embeddings", None)
        if isinstance(n, int) and n > 0:
            return n
    return None


def own_max_length(model) -> int:
    """The model's own max length (256 when it has none), capped by its position embeddings."""
    own = getattr(model, "max_doc_length", None) or getattr(getattr(model, "config", None), "max_doc_length", None)
    own = own or 256
    cap = _max_positions(model)
    return min(own, cap) if cap else own


def set_max_length(model, n: int) -> None:
    """The student encodes (and is saved) with max length ``n``."""
    if hasattr(model, "max_doc_length") and not hasattr(model.config, "max_doc_length"):
        model.max_doc_length = model.max_query_length = n  # DenseEncoder
    for c in (getattr(model, "config", None),):
        if c is not None and hasattr(c, "max_doc_length"):
            c.max_doc_length = n
            if hasattr(c, "max_query_length"):
                c.max_query_length = min(c.max_query_length or n, n)


def with_prompts(cfg, model):
    """``model`` with ``cfg.query_prompt`` / ``cfg.document_prompt`` (when given) set."""
    from ..encoding import apply_prompts

    return apply_prompts(model, cfg.query_prompt, cfg.document_prompt)


def save_model(model, folder: Path) -> Path:
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
