"""Writing a repo folder and uploading it: what models, datasets and the Space share.

:func:`published_folder` writes the folder into a temporary sibling and renames it into place once
complete, its local paths scrubbed (:mod:`hf_dr.hub.paths`); :func:`publish` either writes it to a
``local_dir`` or uploads it with one :meth:`huggingface_hub.HfApi.upload_folder` call.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..io import OutputError, check_output_folder, output_folder
from .errors import HubError, hub_error_message, hub_errors
from .paths import scrub_local_paths

__all__ = ["PLACEHOLDER_OWNER", "check_out", "published_folder", "publish"]

#: the placeholder repo id of a card written with ``--local-dir`` and no ``--repo-id``
PLACEHOLDER_OWNER = "your-username"


def check_out(out: Path, overwrite: bool, inputs) -> None:
    """Refuse, before any work, a folder that must not be written (non-empty without ``overwrite``;
    one that is or holds an input, the current or home folder)."""
    try:
        check_output_folder(out, overwrite=overwrite, inputs=inputs)
    except OutputError as e:
        raise HubError(str(e)) from None


@contextlib.contextmanager
def published_folder(out: Path, overwrite: bool, inputs, roots=()):
    """The repo folder is written into a temporary sibling of ``out`` and renamed into place once
    complete (files 0644), with every local path of this machine taken out of its text files; after
    an error ``out`` is as it was. ``overwrite`` never deletes a folder holding one of ``inputs``."""
    check_out(out, overwrite, inputs)
    with output_folder(out, overwrite=overwrite, inputs=inputs) as tmp:
        yield tmp
        scrub_local_paths(tmp, extra_roots=[*roots, out.resolve().parent, tmp])


def publish(prepare: Callable[..., Path], repo_id: str | None, local_dir, *, repo_type: str, private: bool,
            token: str | None, commit_message: str, api=None, create_kwargs: dict | None = None, **kwargs) -> str:
    """With ``local_dir``: ``prepare(local_dir, repo_id=..., **kwargs)`` and return the folder (no network).
    Otherwise prepare the folder in a temporary directory, ``create_repo`` (idempotent) and upload it
    with one ``upload_folder`` call; returns the commit URL."""
    if local_dir is not None:
        return str(prepare(Path(local_dir), repo_id=repo_id, **kwargs))
    if not repo_id:
        raise HubError("give --repo-id to upload (or --local-dir to only write the folder)")
    from huggingface_hub import HfApi

    api = api or HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="hf-dr-push-") as tmp:
        folder = prepare(Path(tmp) / "repo", repo_id=repo_id, **kwargs)
        try:
            api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True, **(create_kwargs or {}))
            info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type=repo_type,
                                     commit_message=commit_message)
        except hub_errors() as e:
            raise HubError(hub_error_message(e, repo_id)) from None
    return str(getattr(info, "commit_url", info))
