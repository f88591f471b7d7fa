"""Writing outputs so that nothing is lost: whole folders or none, atomic files, no deleted inputs.

Every command that writes a folder goes through :func:`output_folder`::

    with output_folder(out, overwrite=args.overwrite, inputs=[args.model, args.data]) as tmp:
        ...  # write everything into tmp (a hidden sibling of out)
    # out now holds the complete result (renamed into place), or is untouched after an error

The checks run on entry, before any expensive work: a non-empty target is refused unless
``overwrite``; ``overwrite`` never deletes a
folder that is, or contains, one of ``inputs``; the parent must be writable.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["OutputError", "output_folder", "check_output_folder", "atomic_write_text", "atomic_write_json",
           "partial_folder", "publishable_modes"]


class OutputError(ValueError):
    """An output folder cannot be written as asked (printed without a traceback by the CLI)."""


def _within(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
        return True
    except ValueError:
        return False


def check_output_folder(out: str | os.PathLike, *, overwrite: bool = False,
                        inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
    """Refuse, with :class:`OutputError`, an output folder that cannot or must not be written.

    * ``out`` exists and is not a folder, or is a non-empty folder and ``overwrite`` is False;
    * ``overwrite`` would delete an input (``out`` is, or contains, one of ``inputs``), or the
      current working directory, or the home folder, or a filesystem root;
    * the folder that will hold ``out`` cannot be created or written.
    """
    out = Path(out).expanduser()
    resolved = out.resolve()
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise OutputError(f"{out} is not empty: choose a new folder, or pass --overwrite to replace it")
        protected = [Path(p).expanduser().resolve() for p in inputs if p]
        protected += [Path.cwd().resolve(), Path.home().resolve()]
        for p in protected:
            if _within(p, resolved):
                what = "the current directory" if p == Path.cwd().resolve() else \
                    "the home folder" if p == Path.home().resolve() else f"the input {p}"
                raise OutputError(f"refusing to overwrite {out}: it {'is' if p == resolved else 'contains'} "
                                  f"{what}; choose another output folder")
        if resolved.parent == resolved:
            raise OutputError(f"refusing to overwrite the filesystem root {out}")
    parent = resolved.parent
    while not parent.exists() and parent.parent != parent:
        parent = parent.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {out}: {parent} is not writable")
    return out


def _tmp_sibling(out: Path, tag: str) -> Path:
    return out.with_name(f".{out.name}.{tag}-{os.getpid()}")


@contextlib.contextmanager
def output_folder(out: str | os.PathLike, *, overwrite: bool = False,
                  inputs: Iterable[str | os.PathLike | None] = (), work: str | os.PathLike | None = None
                  ) -> Iterator[Path]:
    """Yield a temporary sibling of ``out`` to write into; rename it to ``out`` on success.

    On an exception the temporary folder is removed (or, when ``work`` is given, that folder is
    kept: it is the caller's resumable work folder, see :func:`partial_folder`) and ``out`` is left
    as it was. With ``overwrite`` an existing ``out`` is replaced only once the new one is complete.
    """
    out = check_output_folder(out, overwrite=overwrite, inputs=inputs)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(work) if work is not None else _tmp_sibling(out, "tmp")
    if work is None and tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        yield tmp
    except BaseException:
        if work is None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    publishable_modes(tmp)
    old = None
    if out.exists():
        old = _tmp_sibling(out, "old")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def partial_folder(out: str | os.PathLike) -> Path:
    """The fixed work folder beside ``out`` (``.NAME.partial``) where a resumable command keeps
    its progress across crashes; pass it as ``work=`` to :func:`output_folder`."""
    out = Path(out).expanduser()
    return out.with_name(f".{out.name}.partial")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename (mode 0644)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def atomic_write_json(path: str | os.PathLike, obj, **kwargs) -> Path:
    kwargs.setdefault("indent", 2)
    return atomic_write_text(path, json.dumps(obj, **kwargs) + "\n")


def publishable_modes(folder: str | os.PathLike) -> None:
    """Files 0644 and folders 0755 under ``folder`` (some writers create 0600 files, which a
    web server or another user cannot read)."""
    folder = Path(folder)
    os.chmod(folder, 0o755)
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            p = os.path.join(root, d)
            if not os.path.islink(p):
                os.chmod(p, 0o755)
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p) and stat.S_ISREG(os.lstat(p).st_mode):
                os.chmod(p, 0o644)
