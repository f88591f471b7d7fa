"""Publishing the search demo as a Gradio Space: its folder (with a copy of this ``hf_dr`` package),
written or uploaded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..io import local_inputs
from .errors import HubError
from .publish import publish, published_folder

__all__ = ["SPACE_DIR", "prepare_space_folder", "push_space"]

_PKG = Path(__file__).resolve().parent.parent  # the hf_dr package, copied into the Space

SPACE_DIR = _PKG.parent / "spaces" / "search_demo"
_SCREENSHOT = _PKG.parent / "docs" / "img" / "search_demo.png"


def prepare_space_folder(out_dir: str | os.PathLike, space_dir: str | os.PathLike = SPACE_DIR, *,
                         overwrite: bool = False) -> Path:
    """The folder a Gradio Space repo of the search demo holds: ``app.py``, ``requirements.txt``,
    ``README.md`` (Space front-matter) and a copy of the ``hf_dr`` package beside ``app.py`` (so
    the Space runs this exact code; the bundled sample corpus comes with it)."""
    src = Path(space_dir)
    if not (src / "app.py").is_file() or not (src / "README.md").is_file():
        raise HubError(f"{src} is not a Space folder (app.py and README.md with Space front-matter expected)")
    out = Path(out_dir)
    with published_folder(out, overwrite, local_inputs(src)) as tmp:
        for f in src.iterdir():
            if f.is_file() and f.suffix in (".py", ".txt", ".md", ".json"):
                shutil.copy2(f, tmp / f.name)
        shutil.copytree(_PKG, tmp / "hf_dr", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        readme = (tmp / "README.md").read_text()
        if _SCREENSHOT.is_file():  # the README's screenshot link points into the repository's docs/
            shutil.copy2(_SCREENSHOT, tmp / _SCREENSHOT.name)
            readme = readme.replace("../../docs/img/search_demo.png", _SCREENSHOT.name)
        (tmp / "README.md").write_text(readme)
    return out


def push_space(repo_id: str | None = None, *, space_dir: str | os.PathLike = SPACE_DIR,
               local_dir: str | os.PathLike | None = None, private: bool = False, token: str | None = None,
               commit_message: str = "Upload with hf-dr push", api=None, overwrite: bool = False) -> str:
    """Deploy the search Space: written to ``local_dir``, or uploaded (one ``upload_folder``) to the
    Space ``repo_id`` (created with ``space_sdk="gradio"``)."""
    return publish(lambda out, repo_id=None: prepare_space_folder(out, space_dir, overwrite=overwrite), repo_id,
                   local_dir, repo_type="space", private=private, token=token, commit_message=commit_message,
                   api=api, create_kwargs={"space_sdk": "gradio"})
