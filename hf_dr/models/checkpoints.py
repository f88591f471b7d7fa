"""Reading model folders and Hub ids before and while loading them: :func:`check_model` (what
can be loaded, checked before any expensive work), :class:`ModelLoadError`, the checkpoint
reader that renames transformers' legacy keys (:func:`read_checkpoint`), and
:func:`quiet_loading` (transformers' load report replaced by one line of ours)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from pathlib import Path

logger = logging.getLogger("hf_dr.models")  # the name of before the split: -v and the tests filter on it

__all__ = ["ModelLoadError", "check_model", "model_config", "read_checkpoint", "quiet_loading", "hub_reason",
           "WEIGHT_FILES"]


class ModelLoadError(ValueError):
    """A model folder / Hub id that cannot be loaded as asked (printed without a traceback by the CLI)."""


#: weight files a transformers folder may hold (sharded ones come with an index)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_MLM_ARCH = re.compile(r"(ForMaskedLM|ForPreTraining)$")
_MLM_KEY = re.compile(r"(^|\.)(cls\.predictions|lm_head|vocab_projector|generator_lm_head)\.")


def model_config(path: str) -> dict:
    """The config.json of a folder or Hub id; ``{}`` when there is none or it cannot be read."""
    try:
        return check_model(path)
    except ModelLoadError:
        return {}


def _weight_names(folder: Path) -> list[str] | None:
    """The parameter names stored in a local folder (safetensors headers / shard index), or
    ``None`` when they cannot be read cheaply (``pytorch_model.bin``)."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            try:
                return list(json.loads((folder / index).read_text())["weight_map"])
            except (ValueError, KeyError, TypeError):
                return None
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    names: list[str] = []
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as g:
                names += list(g.keys())
        except Exception as e:  # a truncated / foreign file
            raise ModelLoadError(f"{f}: not a readable safetensors file ({e})") from None
    return names


# transformers' "legacy" key renamings: its from_pretrained applies them to every checkpoint it reads.
# transformers 5.0-5.5 also apply them in reverse when saving a model that from_pretrained loaded, so the
# LayerNorms of such a checkpoint are stored as LayerNorm.gamma / LayerNorm.beta (5.6 and later store
# .weight / .bias again): a checkpoint is read back through the same renaming, not by a raw load_state_dict.
_LEGACY_KEYS = ((re.compile(r"LayerNorm\.gamma$"), "LayerNorm.weight"), (re.compile(r"LayerNorm\.beta$"), "LayerNorm.bias"),
                (re.compile(r"\.weight_g$"), ".parametrizations.weight.original0"),
                (re.compile(r"\.weight_v$"), ".parametrizations.weight.original1"))


def read_checkpoint(path: str | os.PathLike, expected) -> dict:
    """The tensors of the safetensors file ``path``, for a model whose state-dict keys are ``expected``.
    A stored key the model does not have is renamed as transformers' ``from_pretrained`` renames legacy
    names (``LayerNorm.gamma`` -> ``LayerNorm.weight``...) only when the new name is one the model has
    and the file does not; every other key stays as stored, so weights that do not fit still show up
    as missing / unexpected keys (and a shape mismatch still fails in ``load_state_dict``)."""
    from safetensors.torch import load_file

    path = Path(path)
    index = path.parent / (path.name + ".index.json")
    if not path.is_file() and index.is_file():  # sharded (a SPLADE-CAI folder: mlm.* and idf)
        state = {}
        for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
            state.update(load_file(str(path.parent / shard)))
    else:
        state = load_file(str(path))
    want = set(expected)
    for key in [k for k in state if k not in want]:
        for pattern, name in _LEGACY_KEYS:
            new = pattern.sub(name, key)
            if new != key:
                if new in want and new not in state:
                    state[new] = state.pop(key)
                break
    return state


def hub_reason(e: BaseException) -> str:
    name, text = type(e).__name__, str(e)
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") or "Offline" in name + text:
        return "HF_HUB_OFFLINE is set and it is not in the local cache"
    if "NotFound" in name or "404" in text or "Gated" in name or "401" in text:
        return "no such model on the Hub (or it is private / gated)"
    return f"the Hub cannot be reached ({name})"


def check_model(path_or_id: str | os.PathLike, kind: str = "auto") -> dict:
    """Check, before any expensive work, that ``path_or_id`` can be loaded as a ``kind`` encoder;
    return its ``config.json``. Raises :class:`ModelLoadError` (a ``ValueError``) for:

    * a folder without ``config.json`` or without weights (``model.safetensors`` /
      ``pytorch_model.bin``), or a file;
    * a path that does not exist and looks local (``./m``, ``runs/m`` where ``runs`` exists...):
      "no such model folder", never a Hub download;
    * a Hub id whose config cannot be fetched (offline and not cached, unreachable, not found);
    * ``kind="sparse"`` for a checkpoint without a masked-LM head (``BertModel``, a
      sentence-transformers model...): SPLADE would score through a randomly initialised head.
    """
    from ..data.beir import looks_local

    s = os.fspath(path_or_id)
    p = Path(s).expanduser()
    names = None
    if p.is_dir():
        cfg_file = p / "config.json"
        if not cfg_file.is_file():
            raise ModelLoadError(f"{s} is not a model folder: config.json is missing")
        try:
            cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise ModelLoadError(f"{cfg_file}: not a readable JSON config ({e})") from None
        if not isinstance(cfg, dict):
            raise ModelLoadError(f"{cfg_file}: expected a JSON object")
        if not any((p / f).is_file() for f in WEIGHT_FILES) and not any(p.glob("*.safetensors")):
            raise ModelLoadError(f"{s} has no weights: config.json but no model.safetensors or pytorch_model.bin "
                                 "(an unfinished copy or download?)")
        if kind == "sparse":
            names = _weight_names(p)
    elif p.exists():
        raise ModelLoadError(f"{s} is a file, not a model folder")
    elif looks_local(s):
        raise ModelLoadError(f"{s}: no such model folder")
    else:
        try:
            from huggingface_hub import hf_hub_download

            cfg = json.loads(Path(hf_hub_download(s, "config.json")).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:  # offline, unreachable, 404 / gated (huggingface_hub errors are OSErrors)
            raise ModelLoadError(f"{s}: no such local folder, and the Hub model {s!r} cannot be loaded: "
                                 f"{hub_reason(e)}") from None
    if kind == "sparse" and "auto_map" not in cfg:
        archs = [a for a in cfg.get("architectures") or [] if isinstance(a, str)]
        has_head = any(_MLM_ARCH.search(a) for a in archs) or any(_MLM_KEY.search(n) for n in names or ())
        if not has_head and (archs or names is not None):
            raise ModelLoadError(
                f"{s} has no masked-LM head (architectures: {', '.join(archs) or 'none'}"
                + ("; its weights hold no cls.predictions / lm_head" if names is not None else "")
                + "): as a sparse (SPLADE) model it would score through a randomly initialised head. "
                "Use a *ForMaskedLM checkpoint (e.g. naver/splade-cocondenser-ensembledistil) or load it as dense")
    return cfg


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REPORT_ROW = re.compile(r"^(\S+)\s*\|\s*(MISSING|UNEXPECTED|MISMATCH)", re.M)


class _Capture(logging.Filter):
    """Keeps transformers' weight-loading report (and its tied-weights notes) out of the logs."""

    def __init__(self):
        super().__init__()
        self.records: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        msg = _ANSI.sub("", record.getMessage())
        if "LOAD REPORT" in msg or "seem corrupted" in msg or "were not initialized" in msg \
                or "were not used when initializing" in msg:
            self.records.append(msg)
            return False
        return True


@contextlib.contextmanager
def quiet_loading(name: str, expected_missing: tuple[str, ...] = ("pooler.",)):
    """Load weights without transformers' load report and progress bar, unless debug logging is
    on (``hf-dr -v``). Afterwards, weights the checkpoint lacks that were randomly initialised
    (other than ``expected_missing`` prefixes: the unused pooler) give one WARNING line of ours;
    ignored extra weights (an MLM head under an encoder) give a DEBUG line."""
    if logger.isEnabledFor(logging.DEBUG):
        yield
        return
    from transformers.utils import logging as hf_logging

    capture = _Capture()
    targets = [logging.getLogger(n) for n in ("transformers.modeling_utils", "transformers.utils.loading_report")]
    for t in targets:
        t.addFilter(capture)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        for t in targets:
            t.removeFilter(capture)
        if bars:
            hf_logging.enable_progress_bar()
    missing, unexpected = [], []
    for msg in capture.records:
        for key, status in _REPORT_ROW.findall(msg):
            (missing if status != "UNEXPECTED" else unexpected).append(key)
    bad = [k for k in missing if not k.startswith(expected_missing)]
    if bad:
        logger.warning("%s: %d weight(s) missing from the checkpoint were randomly initialised (%s%s); "
                       "run with -v for transformers' load report", name, len(bad), ", ".join(bad[:3]),
                       ", ..." if len(bad) > 3 else "")
    if unexpected or len(bad) < len(missing):
        logger.debug("%s: ignored %d checkpoint weight(s) this encoder does not use (%s), %d expected missing",
                     name, len(unexpected), ", ".join(unexpected[:3]), len(missing) - len(bad))
