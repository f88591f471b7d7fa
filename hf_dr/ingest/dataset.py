"""A dataset read through :func:`datasets.load_dataset` (a Hub dataset id, or a local dataset folder /
data file) -> a corpus of passages, one document per row: its rows are written once as a Parquet
file in the stage cache (keyed by the dataset's fingerprint, the split and the config), which
:func:`~hf_dr.ingest.folder.ingest_folder` then reads as any table — the same splitter, manifest,
shards and resumption. The passages' ``metadata.source`` is ``<dataset name>/<split>.parquet``."""

from __future__ import annotations

import os
from pathlib import Path

from ..shards import write_atomic, write_json
from .folder import IngestError, ingest_folder

__all__ = ["ingest_dataset", "load_rows"]


def load_rows(source: str, split: str = "train", config: str | None = None):
    """``datasets.load_dataset(source, config, split=split)``: a Hub dataset id, a local dataset
    folder, or a data file (``.jsonl`` / ``.json`` / ``.csv`` / ``.parquet``, read with its format's
    builder). A dataset that cannot be loaded is an :class:`IngestError` naming it."""
    from datasets import load_dataset

    builders = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
    p = Path(source).expanduser()
    try:
        if p.is_file() and p.suffix.lower() in builders:
            return load_dataset(builders[p.suffix.lower()], data_files={split: str(p)}, split=split)
        return load_dataset(source, config, split=split)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise IngestError(f"the dataset {source} (split {split!r}) cannot be loaded: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}") from None
    except Exception as e:  # noqa: BLE001 - the Hub client's own errors (offline, not found, gated)
        if "huggingface_hub" in type(e).__module__ or "datasets" in type(e).__module__:
            raise IngestError(f"the dataset {source} (split {split!r}) cannot be loaded: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None
        raise


def _stage_rows(ds, source: str, split: str, config: str | None, cache: Path | None) -> Path:
    """The folder holding the dataset's rows as ``<name>/<split>.parquet``, written once (atomically)
    in the stage cache, keyed by the dataset's fingerprint: a re-run (or a resumed run) finds it."""
    from ..data.beir import cache_root
    from ..stage_cache import StageCache

    params = {"source": source, "config": config, "split": split, "fingerprint": ds._fingerprint}
    root = StageCache(cache or cache_root() / "ingest").path("dataset-rows", params, "")
    name = Path(source.rstrip("/\\")).stem if Path(source).expanduser().exists() else source.rsplit("/", 1)[-1]
    target = root / name / f"{split}.parquet"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, lambda tmp: ds.to_parquet(str(tmp)))
    return root


def ingest_dataset(source: str, output: str | os.PathLike, *, text_column: str, split: str = "train",
                   config: str | None = None, cache: str | os.PathLike | None = None, **settings) -> dict:
    """Ingest the rows of a dataset (:func:`load_rows`) into the corpus folder ``output``: each row a
    document (``text_column`` its text; ``id_column`` / ``title_column`` as for tables), cut into
    passages with ``settings`` (those of :func:`~hf_dr.ingest.folder.ingest_folder`). Returns the
    report (``ingest.json``), which also names the dataset (``dataset``: source, config, split)."""
    ds = load_rows(source, split, config)
    if text_column not in ds.column_names:
        raise IngestError(f"the dataset {source} (split {split!r}) has no column {text_column!r}: its columns are "
                          f"{', '.join(ds.column_names)} (--text-column)")
    rows = _stage_rows(ds, source, split, config, Path(cache) if cache else None)
    report = ingest_folder(rows, output, text_column=text_column, **settings)
    report["dataset"] = {"source": source, "config": config, "split": split, "rows": len(ds)}
    write_json(Path(output) / "ingest.json", report)
    return report
