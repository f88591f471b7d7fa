"""Publishing a dataset: ``data/<split>.parquet`` and a dataset card, written or uploaded.

:func:`prepare_dataset_folder` / :func:`push_dataset` take a ``datasets.Dataset``, a ``DatasetDict``,
a ``save_to_disk`` folder or a folder of parquet files; a folder written by ``hf-dr label`` is published
whole with its DoDress card.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..io import local_inputs, read_json_or_empty
from .cards import card_template, render_dataset_card, write_card
from .errors import HubError
from .passages import is_passage_corpus, write_passage_corpus
from .paths import public_values
from .publish import PLACEHOLDER_OWNER, check_out, publish, published_folder

__all__ = ["prepare_dataset_folder", "push_dataset", "write_dataset_card"]


def _as_dataset_dict(data):
    """A DatasetDict from a Dataset, a DatasetDict, a ``save_to_disk`` folder or a folder of
    parquet files (one split per file stem, or ``data/<split>*.parquet``)."""
    from datasets import Dataset, DatasetDict, load_from_disk

    if isinstance(data, DatasetDict):
        return data
    if isinstance(data, Dataset):
        return DatasetDict({"train": data})
    p = Path(data)
    if not p.is_dir():
        raise HubError(f"{p}: not a dataset folder (a folder of parquet files or one written by save_to_disk)")
    if (p / "dataset_dict.json").is_file():
        return load_from_disk(str(p))
    if (p / "state.json").is_file():
        # a save_to_disk Dataset is the train split; each sub-folder holding another is a split of
        # its own (``hf-dr label`` writes its dev set in dev/)
        splits = {"train": load_from_disk(str(p))}
        for sub in sorted(p.iterdir()):
            if sub.is_dir() and (sub / "state.json").is_file() and sub.name not in splits:
                splits[sub.name] = load_from_disk(str(sub))
        return DatasetDict(splits)
    files = sorted(p.glob("*.parquet")) or sorted((p / "data").glob("*.parquet"))
    if not files:
        raise HubError(f"{p} holds no dataset: expected *.parquet files (or data/*.parquet), "
                       "or a folder written by Dataset.save_to_disk")
    splits: dict[str, list[str]] = {}
    for f in files:
        splits.setdefault(f.stem.split("-")[0], []).append(str(f))
    return DatasetDict({s: Dataset.from_parquet(fs) for s, fs in splits.items()})


def _pseudo_labels_stats(data) -> dict | None:
    """The ``stats.json`` of a ``hf-dr label`` output folder (None for any other dataset)."""
    if not isinstance(data, (str, os.PathLike)):
        return None
    p = Path(data)
    stats = read_json_or_empty(p / "stats.json") if (p / "state.json").is_file() else {}
    if not isinstance(stats.get("config"), dict):
        return None
    if not stats.get("command") and (p / "README.md").is_file():  # a folder written before stats held it
        m = re.search(r"## Made by\s+`([^`]+)`", (p / "README.md").read_text(encoding="utf-8", errors="replace"))
        if m:
            stats["command"] = m.group(1)
    return stats


def prepare_dataset_folder(data, out_dir: str | os.PathLike, *, repo_id: str | None = None,
                           template: str | None = None, card_data: Mapping[str, Any] | None = None,
                           card_vars: Mapping[str, Any] | None = None, license: str = "apache-2.0",
                           overwrite: bool = False) -> Path:
    """Write a dataset repo folder: ``data/<split>.parquet`` per split and a ``README.md``
    rendered from ``model_cards/<template>.md`` with :class:`huggingface_hub.DatasetCard`.

    ``card_data`` adds YAML metadata fields (``task_categories``, ``source_datasets``, ``tags``...);
    ``card_vars`` are template variables. The template also gets ``repo_id``, ``splits``
    (``{split: n_rows}``), ``features`` (column -> type), ``n_rows`` and ``preview`` (a table).

    A folder written by ``hf-dr ingest`` (a passage corpus) is published in BEIR's Hub layout with its
    manifest and settings and a card naming its sources and how they were cut
    (:mod:`hf_dr.hub.passages`, template ``dataset_passages``).

    A folder written by ``hf-dr label`` is published whole — the train triplets and the dev set —
    with its DoDress card (``dataset_pseudo_labels``, naming ``repo_id``) and ``stats.json``, unless
    another ``template`` is asked for.
    """
    out = Path(out_dir)
    inputs = local_inputs(data) if isinstance(data, (str, os.PathLike)) else []
    check_out(out, overwrite, inputs)
    if isinstance(data, (str, os.PathLike)) and is_passage_corpus(data):
        with published_folder(out, overwrite, inputs, [Path(data).resolve().parent]) as tmp:
            write_passage_corpus(Path(data), tmp, repo_id=repo_id or f"{PLACEHOLDER_OWNER}/{out.resolve().name}",
                                 template=template, card_data=card_data, license=license)
        return out
    dd = _as_dataset_dict(data)
    stats = _pseudo_labels_stats(data)
    if stats is not None and template in (None, "dataset_pseudo_labels"):
        with published_folder(out, overwrite, inputs, [Path(data).resolve().parent]) as tmp:
            (tmp / "data").mkdir()
            for split, ds in dd.items():  # the names the DoDress card's `configs` globs match
                ds.to_parquet(str(tmp / "data" / f"{split}-00000-of-00001.parquet"))
            stats = public_values(stats)
            (tmp / "stats.json").write_text(json.dumps(stats, indent=1, default=str))
            write_dataset_card(tmp, stats, command=stats.get("command"),
                               repo_id=repo_id or f"{PLACEHOLDER_OWNER}/{out.resolve().name}")
        return out
    tpl = card_template(template or "dataset", "datasets")
    with published_folder(out, overwrite, inputs,
                           [Path(data).resolve().parent] if isinstance(data, (str, os.PathLike)) else []) as tmp:
        _write_dataset(dd, tmp, out, tpl, repo_id=repo_id, card_data=card_data, card_vars=card_vars, license=license)
    return out


def _split_configs(dd) -> list[dict]:
    """The card's ``configs``: one ``default`` config holding every split when they share their
    columns; otherwise (a dataset cannot mix schemas) the first split is ``default`` and every other
    split a config of its own, named after it (``load_dataset(repo, "dev", split="dev")``)."""
    names = list(dd)
    same = all(dd[n].features == dd[names[0]].features for n in names)
    groups = [("default", names)] if same else [("default", names[:1])] + [(n, [n]) for n in names[1:]]
    return [{"config_name": c, "data_files": [{"split": s, "path": f"data/{s}.parquet"} for s in splits]}
            for c, splits in groups]


def _write_dataset(dd, out: Path, final: Path, tpl: Path, *, repo_id, card_data, card_vars, license) -> None:
    (out / "data").mkdir(parents=True, exist_ok=True)
    for split, ds in dd.items():
        ds.to_parquet(str(out / "data" / f"{split}.parquet"))
    meta = {"license": license, "task_categories": ["text-retrieval"], "tags": ["hf-dr"],
            "configs": _split_configs(dd), **(card_data or {})}
    render_dataset_card(dd, out, tpl, meta, repo_id=repo_id or f"{PLACEHOLDER_OWNER}/{final.resolve().name}",
                        card_vars=card_vars)


def push_dataset(data, repo_id: str | None = None, *, local_dir: str | os.PathLike | None = None,
                 private: bool = False, token: str | None = None, commit_message: str = "Upload with hf-dr push",
                 api=None, **prepare_kwargs) -> str:
    """Publish a dataset (see :func:`prepare_dataset_folder`): written to ``local_dir``, or
    uploaded to the dataset repo ``repo_id`` with one ``upload_folder`` call."""
    return publish(lambda out, **kw: prepare_dataset_folder(data, out, **kw), repo_id, local_dir,
                   repo_type="dataset", private=private, token=token, commit_message=commit_message, api=api,
                   **prepare_kwargs)


def write_dataset_card(out: str | Path, stats: dict, command: str | None = None,
                       repo_id: str | None = None) -> Path:
    """The card of a pseudo-labels folder (``hf-dr label``'s ``stats``): fill
    ``model_cards/dataset_pseudo_labels.md`` (huggingface_hub's jinja ``DatasetCard``)."""
    out = Path(out)
    cfg = stats["config"]
    source = Path(str(stats["source"]).rstrip("/")).name or str(stats["source"])
    card_data = dict(
        language="en", task_categories=["text-retrieval"], pretty_name=f"DoDress pseudo-labels for {source}",
        tags=["hf-dr", "pseudo-labels", "dodress", f"negatives-{cfg['negatives']}"],
        # two configs: the triplets and the dev set have different columns (one config cannot mix them)
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}]},
                 {"config_name": "dev", "data_files": [{"split": "dev", "path": "data/dev-*.parquet"}]}])
    fields = {k: v for k, v in stats.items() if k not in ("config", "cache")}
    fields = {k: v for k, v in fields.items() if k not in ("fingerprints", "command")}
    return write_card(out, "dataset_pseudo_labels", card_data, repo_type="dataset", source_name=source,
                      repo_id=repo_id or f"<user>/{source}-dodress-pseudo-labels",
                      command=command or stats.get("command") or "(library call)", **{**cfg, **fields})
