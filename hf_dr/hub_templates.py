"""Where card templates live: ``$HF_DR_MODEL_CARDS``, the repository's ``model_cards/``, or the
copy installed inside the package (``hf_dr/templates``)."""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def template_path(name: str) -> Path:
    for d in (os.environ.get("HF_DR_MODEL_CARDS"), _PKG.parent / "model_cards", _PKG / "templates"):
        if d and (Path(d) / name).is_file():
            return Path(d) / name
    raise FileNotFoundError(f"card template {name} not found (set HF_DR_MODEL_CARDS to the model_cards/ folder)")
