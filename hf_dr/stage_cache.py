"""Content-keyed stage caching: a stage's result on disk, in a file named by the hash of what it
depends on (the content of its inputs and its parameters, never their names), written atomically.
A re-run finds finished stages; a changed input or parameter makes a new key, so exactly the
stages that depend on it are recomputed. Used by the labelling pipeline
(:mod:`hf_dr.labeling.pseudo_relevance`) and by ``hf-dr adapt`` (:mod:`hf_dr.adaptation`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["StageCache", "digest", "dataset_digest"]


def digest(obj) -> str:
    """A short hash of ``obj``'s JSON (keys sorted): the name of a cache entry."""
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def dataset_digest(ds) -> str:
    """A hash of a ``datasets.Dataset``'s columns and values (its content, not its fingerprint)."""
    h = hashlib.sha1(json.dumps(sorted(ds.column_names)).encode())
    for batch in ds.iter(batch_size=10_000):
        h.update(json.dumps(batch, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


class StageCache:
    """Stage results on disk, one file per (stage, parameters); writes are atomic. ``hits`` and
    ``computed`` list the stages found and computed, in order."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.hits: list[str] = []
        self.computed: list[str] = []

    def path(self, stage: str, params: dict, suffix: str) -> Path:
        return self.root / f"{stage}-{digest(params)}{suffix}"

    def _done(self, stage: str, hit: bool, p: Path) -> None:
        (self.hits if hit else self.computed).append(stage)
        logger.info("%s: %s %s", stage, "cached in" if hit else "computed into", p)

    def json(self, stage: str, params: dict, fn):
        """``fn()`` (a JSON value), cached."""
        p = self.path(stage, params, ".json")
        if p.is_file():
            self._done(stage, True, p)
            return json.loads(p.read_text())["value"]
        value = fn()
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps({"stage": stage, "params": params, "value": value}))
        tmp.replace(p)
        self._done(stage, False, p)
        return value

    def array(self, stage: str, params: dict, fn) -> np.ndarray:
        """``fn()`` (an array), cached as ``.npy``."""
        p = self.path(stage, params, ".npy")
        if p.is_file():
            self._done(stage, True, p)
            return np.load(p)
        value = np.asarray(fn())
        tmp = p.with_name(p.stem + ".tmp.npy")
        np.save(tmp, value)
        tmp.replace(p)
        p.with_suffix(".params.json").write_text(json.dumps(params, default=str))
        self._done(stage, False, p)
        return value

    def datasets(self, stage: str, params: dict, fn):
        """``fn() -> ({name: Dataset}, meta)`` saved as a folder; returns the same pair."""
        from datasets import load_from_disk

        p = self.path(stage, params, "")
        if (p / "meta.json").is_file():
            self._done(stage, True, p)
            meta = json.loads((p / "meta.json").read_text())
            return {n: load_from_disk(str(p / n)) for n in meta["splits"]}, meta["meta"]
        parts, meta = fn()
        tmp = p.with_name(p.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        for n, ds in parts.items():
            ds.save_to_disk(str(tmp / n), num_shards=1)  # one shard even when empty (loadable)
        (tmp / "meta.json").write_text(json.dumps({"params": params, "splits": list(parts), "meta": meta}, default=str))
        shutil.rmtree(p, ignore_errors=True)
        tmp.rename(p)
        self._done(stage, False, p)
        return {n: load_from_disk(str(p / n)) for n in parts}, meta
