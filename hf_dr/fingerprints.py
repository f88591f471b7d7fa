"""The fingerprints of hf-dr: what a cache key, an embeddings folder or a saved index records of
its inputs, by content, never by name.

* :func:`corpus_fingerprint` (:class:`CorpusHash`): every ``(doc_id, text)`` of a corpus, in order;
* :func:`model_fingerprint`: a model's class, configuration and the weights it encodes with;
* :func:`folder_fingerprint`: the names and bytes of the files of a folder (a model folder given by path).

Each is a 32-character hex string. (:func:`hf_dr.stage_cache.digest` hashes the parameters of a key.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

__all__ = ["CorpusHash", "corpus_fingerprint", "model_fingerprint", "folder_fingerprint"]


class CorpusHash:
    """The corpus fingerprint: a hash of every ``(doc_id, text)`` in order (``text`` joined as
    :meth:`BeirData.doc_texts` does). The one definition, used by embeddings folders, saved
    indexes, the labelling cache and the corpus cache."""

    def __init__(self):
        self._h = hashlib.sha256()
        self.n = 0

    def update(self, doc_id: str, text: str) -> None:
        self._h.update(doc_id.encode("utf-8", "surrogatepass") + b"\0" + text.encode("utf-8", "surrogatepass") + b"\0")
        self.n += 1

    def hexdigest(self) -> str:
        return self._h.hexdigest()[:32]


def corpus_fingerprint(pairs: Iterable[tuple[str, str]]) -> str:
    """The fingerprint of a corpus given as an iterable of ``(doc_id, text)`` (:class:`CorpusHash`;
    a :class:`~hf_dr.data.BeirData` has its own, cached: ``data.corpus_fingerprint()``)."""
    h = CorpusHash()
    for d, t in pairs:
        h.update(d, t)
    return h.hexdigest()


#: configuration entries that say where a model was read from or how it was saved, not how it encodes
#: (``use_cache``: a generation setting the Trainer switches off while training, no encoder reads it; with
#: it, a checkpoint scored during training and its saved copy had two fingerprints; ``prompts``: where
#: ``save_pretrained`` writes the prompts a model prepends, which the fingerprint covers as the encoder's
#: prefixes, set or saved)
_NOT_IDENTITY = ("_name_or_path", "transformers_version", "architectures", "use_cache", "prompts")


def _config_identity(d):
    """A configuration dict without :data:`_NOT_IDENTITY`, at every depth (a nested backbone config
    records the path it was read from too): the same model read from ``../m`` and ``/abs/m``, or saved
    again, has the same identity."""
    if isinstance(d, dict):
        return {k: _config_identity(v) for k, v in d.items() if k not in _NOT_IDENTITY}
    if isinstance(d, list):
        return [_config_identity(v) for v in d]
    return d


def model_fingerprint(model) -> str:
    """A hash of a model's class, configuration and every weight it encodes with (a model lists
    unused weights' name prefixes in ``fingerprint_skip``): two models with the same fingerprint
    encode alike. (The tokenizer is covered by its vocabulary size and class.)"""
    import torch

    h = hashlib.sha256(type(model).__name__.encode())
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "to_dict"):
        # not what saving rewrites (``save_pretrained`` sets ``architectures`` to the saving class): a model
        # and its saved copy encode alike
        h.update(json.dumps(_config_identity(cfg.to_dict()), sort_keys=True, default=str).encode())
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        h.update(f"{type(tok).__name__}:{len(tok)}".encode())
        # what the encoder does around the backbone (pooling, normalisation, prefixes), not its max length
        if hasattr(model, "encoding_settings"):
            st = {k: v for k, v in model.encoding_settings(is_query=False).items() if k != "max_length"}
            st["query_prefix"] = model.encoding_settings(is_query=True)["prefix"]
            h.update(json.dumps(st, sort_keys=True).encode())
    if isinstance(model, torch.nn.Module):
        # weights the encoder never uses (e.g. a backbone's pooler, randomly initialised on each load
        # of an MLM checkpoint) must not make two loads of the same checkpoint differ
        skip = tuple(getattr(model, "fingerprint_skip", ()))
        for name, t in sorted(model.state_dict().items()):
            if skip and name.startswith(skip):
                continue
            t = t.detach().cpu().contiguous()
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:32]


def folder_fingerprint(path: Path) -> str:
    """A hash of the names and contents of every file under ``path`` (a model folder), or of one file."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
    for f in files:
        h.update(str(f.relative_to(path) if f != path else f.name).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:32]
