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
           "partial_folder", "publishable_modes", "replace_folder", "check_writable", "one_line_warnings",
           "local_inputs", "read_json_or_empty"]


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
    for special, what in ((Path.cwd().resolve(), "the current directory"), (Path.home().resolve(), "the home folder")):
        if resolved == special:  # replaced as a whole, even when empty: the shell would be left in a deleted folder
            raise OutputError(f"refusing to write into {what} ({out}): the output folder is replaced as a whole; "
                              "give a new folder")
    if resolved.parent == resolved:
        raise OutputError(f"refusing to write into the filesystem root {out}: give a new folder")
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
    check_writable(out)
    return out


def check_writable(path: str | os.PathLike) -> Path:
    """The nearest existing folder of ``path`` (itself or a parent) accepts a new entry: checked by
    creating and removing one (``os.access`` says yes to root and knows nothing of read-only
    mounts). :class:`OutputError` otherwise, e.g. when a parent is a file."""
    import tempfile

    path = Path(path).expanduser()
    where = path.resolve() if path.is_dir() else path.resolve().parent
    while not where.exists() and where.parent != where:
        where = where.parent
    if not where.is_dir():
        raise OutputError(f"cannot write {path}: {where} is a file, not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".hf-dr-probe-", dir=where))
    except OSError as e:
        raise OutputError(f"cannot write {path}: {where} is not writable ({e.strerror or e})") from None
    return path


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
    replace_folder(tmp, out)


def replace_folder(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename ``src`` to ``dst``; an existing ``dst`` is moved aside first and deleted only once
    ``src`` is in place, so ``dst`` is always a whole folder (the old one or the new one)."""
    src, dst = Path(src), Path(dst)
    old = None
    if dst.exists():
        old = _tmp_sibling(dst, "old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(dst, old)
    os.replace(src, dst)
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


def one_line_warnings(prefix: str | None = None) -> None:
    """Show Python warnings as one line, ``[prefix: ]warning: message`` (no file path, no raw source
    line): for the command line and the example scripts, never set by the library itself."""
    import sys
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        kind = "warning" if category is UserWarning else category.__name__
        print(f"{prefix}: {kind}: {message}" if prefix else f"{kind}: {message}", file=file or sys.stderr)

    warnings.showwarning = show


def read_json_or_empty(path: str | os.PathLike) -> dict:
    """The JSON object in ``path``; ``{}`` when there is none (no file, not JSON, not an object): for
    optional files (a model's ``train_info.json``). A folder's own file that must be sound is read
    with :func:`hf_dr.shards.read_json_checked`, which names the damage instead."""
    try:
        obj = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


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


def local_inputs(*paths) -> list[str]:
    """The arguments that name existing local files or folders (a Hub id is not an input that an
    overwrite could delete): the ``inputs=`` of :func:`output_folder`."""
    return [str(p) for p in paths if p and Path(str(p)).expanduser().exists()]
