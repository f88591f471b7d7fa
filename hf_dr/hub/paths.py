"""The one path scrubber: what a published file may say about a path of this machine.

A published folder (a model or dataset repo, a Space, an ``hf-dr adapt`` output, a card) names no
local path: a Hub id is kept as is, a local file or folder by its last component only.
:func:`public_name` does that for one value (:func:`portable_reference` also says whether it was
local, for ``train_info.json``), :func:`public_values` for every string of a JSON
object, :func:`public_command` for every argument of a command line, :func:`public_configs` for the
JSON files of a repo folder, and :func:`scrub_local_paths` for the text of every file of a folder
(cards, configs, training info).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..io import read_json_or_empty

__all__ = ["hub_id", "public_name", "portable_reference", "public_values", "public_command", "public_configs",
           "scrub_local_paths", "is_vocabulary", "PATH_FIELDS"]

#: the checkout (or site-packages folder) this package lives in: a local root
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent


def hub_id(s: str | None) -> str | None:
    """``s`` when it looks like a Hub repo id (owner/name or name) and is not a local path."""
    if not s or Path(s).exists() or s.startswith((".", "/", "~")) or s.count("/") > 1:
        return None
    return s


def public_name(value) -> str | None:
    """What a published file may say about ``value``: a Hub id (or any non-path string) as is, a
    local path by its last component only (a path of this machine means nothing elsewhere)."""
    if value is None:
        return None
    s = str(value)
    if s.startswith(("/", "~", "./", "../")) or os.path.isabs(s) or (os.sep in s and Path(s).expanduser().exists()) \
            or s.count("/") > 1:
        name = Path(s.rstrip("/")).name
        return name or s
    return s


def portable_reference(path_or_id: str | os.PathLike | None) -> tuple[str | None, bool]:
    """``(reference, is_local)`` to record in ``train_info.json``: a Hub id (or anything that is not
    a local path) as given; a local file or folder by its name only, so no absolute local path
    lands in a published folder."""
    if path_or_id is None:
        return None, False
    local = Path(str(path_or_id)).expanduser().exists()
    return (Path(str(path_or_id)).expanduser().resolve().name if local else public_name(path_or_id)), local


def public_values(obj):
    """``obj`` with every string that is a local path replaced by its name (a Hub id is kept)."""
    if isinstance(obj, dict):
        return {k: public_values(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [public_values(v) for v in obj]
    if isinstance(obj, str) and (os.path.isabs(obj) or obj.startswith("~/")) and obj.count("/") >= 2:
        return public_name(obj)
    return obj


def public_command(command: str | None) -> str | None:
    """``command`` with every local path replaced by its name (a card that quotes it is published)."""
    if not command:
        return command
    try:
        parts = shlex.split(command)
    except ValueError:
        return command
    out = []
    for a in parts:
        if a.startswith("-") and "=" not in a:  # a flag alone (its value is the next argument)
            out.append(a)
            continue
        flag, eq, val = a.partition("=") if a.startswith("--") else ("", "", a)
        val = public_name(val) if (os.path.isabs(val) or Path(val).expanduser().exists()) and val not in (".", "..") \
            else val
        out.append(f"{flag}{eq}{val}" if eq else val)
    return " ".join(shlex.quote(a) for a in out)


#: config / info fields that name a model or data folder: a local path there becomes its name
PATH_FIELDS = ("_name_or_path", "name_or_path", "model_name_or_path", "base_model", "dam_name_or_path",
               "dam_path", "backbone", "backbone_name_or_path", "data", "train_data", "output_dir", "model")

#: files of a published folder that may quote a local path (code is left alone)
_TEXT_SUFFIXES = (".json", ".md", ".txt", ".yaml", ".yml", ".cfg", ".jsonl")


def is_vocabulary(p: Path) -> bool:
    """Tokenizer files: their strings are tokens (``/usr`` may be one), never paths to rewrite."""
    name = p.name.lower()
    return name.startswith(("tokenizer", "vocab", "merges", "special_tokens_map", "added_tokens", "spiece"))


def public_configs(folder: str | os.PathLike) -> None:
    """The JSON files of a repo folder (config.json, train_info.json, the DAM's...) with no local
    path: ``_name_or_path`` and the other path fields become the folder's name, absolute paths too."""
    for p in Path(folder).rglob("*.json"):
        if is_vocabulary(p):  # tokens, not paths
            continue
        obj = read_json_or_empty(p)
        if not obj:
            continue
        new = public_values(obj)
        for k in PATH_FIELDS:
            v = new.get(k)
            if isinstance(v, str) and v and not hub_id(v) and Path(v).exists():
                new[k] = public_name(v)
        if new != obj:
            p.write_text(json.dumps(new, indent=2, sort_keys=p.name == "config.json") + "\n")


def _path_roots(extra: Iterable[str | os.PathLike | None]) -> list[str]:
    cands = [Path.cwd(), Path.home(), Path(tempfile.gettempdir()), _PACKAGE_ROOT,
             Path(sys.prefix), *[Path(str(e)).expanduser().absolute() for e in extra if e]]
    roots = set()
    for c in cands:
        for r in (c, c.resolve()):
            s = str(r).rstrip("/")
            if len(s) > 1 and s.count("/") >= 1:
                roots.add(s)
    return sorted(roots, key=len, reverse=True)


def scrub_local_paths(folder: str | os.PathLike, extra_roots: Iterable[str | os.PathLike | None] = ()) -> list[Path]:
    """Replace, in every text file of ``folder`` (cards, JSON configs, training info), each absolute
    path under a local root (the current and home folders, the temporary folder, this package's
    checkout, ``extra_roots``) by its last component: a published folder names no path of this
    machine. Returns the files changed."""
    roots = _path_roots(extra_roots)
    if not roots:
        return []
    pattern = re.compile("(?:" + "|".join(re.escape(r) for r in roots) + r")(?:/[^\s\"'`<>|()\[\]{},;]*)?(?![\w.-])")

    def repl(m: re.Match) -> str:
        return Path(m.group(0).rstrip("/")).name or "."

    changed = []
    for root, _, files in os.walk(folder):
        for f in files:
            p = Path(root) / f
            if p.suffix.lower() not in _TEXT_SUFFIXES or p.is_symlink() or is_vocabulary(p):
                continue
            try:
                text = p.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            new = pattern.sub(repl, text)
            if new != text:
                p.write_text(new, encoding="utf-8")
                changed.append(p)
    return changed
