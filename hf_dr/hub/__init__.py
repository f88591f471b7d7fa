"""Publishing to the Hugging Face Hub: model folders with cards, datasets with cards, the Space.

- :mod:`~hf_dr.hub.models`: :func:`prepare_model_folder` / :func:`push_model` — the folder a Hub
  repo of a hf-dr model holds (weights, config with ``auto_map``, the model code, the tokenizer, a
  card), and the registry of model kinds (:data:`MODEL_KINDS`).
- :mod:`~hf_dr.hub.datasets`: :func:`prepare_dataset_folder` / :func:`push_dataset` —
  ``data/<split>.parquet`` and a dataset card.
- :mod:`~hf_dr.hub.spaces`: :func:`prepare_space_folder` / :func:`push_space` — the search demo.
- :mod:`~hf_dr.hub.cards`: the one card renderer (:func:`render_card`, :func:`write_card`), used by
  every card of hf-dr, and what cards say (results tables, usage snippets).
- :mod:`~hf_dr.hub.paths`: the one path scrubber — a published file names no path of this machine.
- :mod:`~hf_dr.hub.publish` / :mod:`~hf_dr.hub.errors`: writing a repo folder whole or not at all,
  one ``upload_folder`` call, and a Hub that cannot be reached said in one line (:class:`HubError`).
"""

from .cards import load_metrics, metrics_table, render_card, st_usage_snippet, template_path, usage_snippet, write_card
from .datasets import prepare_dataset_folder, push_dataset
from .errors import HubError
from .models import MODEL_KINDS, ModelKind, berm_available, detect_model_kind, prepare_model_folder, push_model
from .paths import hub_id, public_name, scrub_local_paths
from .publish import PLACEHOLDER_OWNER
from .spaces import SPACE_DIR, prepare_space_folder, push_space

__all__ = ["HubError", "ModelKind", "MODEL_KINDS", "detect_model_kind", "prepare_model_folder", "push_model",
           "prepare_dataset_folder", "push_dataset", "metrics_table", "load_metrics", "berm_available",
           "prepare_space_folder", "push_space", "render_card", "write_card", "template_path", "usage_snippet",
           "st_usage_snippet", "hub_id", "public_name", "scrub_local_paths", "PLACEHOLDER_OWNER", "SPACE_DIR"]
