"""The teacher of the labelling pipeline, parsed once: a spec string (``"fusion"``,
``"monot5[:ID]"``, ``"cross-encoder:ID"``) or a :class:`~.rerankers.Reranker` object becomes a
:class:`Teacher` that says what the pipeline asks of it: its identity (the rerank stage's cache
key), the names it is shown by, whether it needs the dense model, its margin bound and its
normalisation, and how to build it (only when a stage that needs it is not cached)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .rerankers import FUSION_REFERENCE_SIZE, FusionReranker, Reranker

__all__ = ["Teacher", "parse_teacher", "get_reranker", "TEACHER_KINDS", "DEFAULT_MONOT5"]

#: the spec kinds (``KIND[:ID]``) a teacher string may name
TEACHER_KINDS = ("fusion", "monot5", "cross-encoder")
#: monoT5 without an id
DEFAULT_MONOT5 = "castorini/monot5-3b-msmarco"
#: the fusion teacher's weights when built from its spec (BM25, dense)
FUSION_WEIGHTS = (1.0, 1.0)


@dataclass(frozen=True)
class Teacher:
    """A parsed teacher: ``kind`` (fusion / monot5 / cross-encoder, or ``None`` for a given
    object), ``model`` (its model id or folder; ``None`` for fusion) and the object when given."""

    kind: str | None
    model: str | None = None
    obj: Any = None

    @property
    def is_fusion(self) -> bool:
        """BM25 + the dense model (its scores depend on the dense model's encodings)."""
        if self.obj is not None:
            return str(getattr(self.obj, "name", "")).startswith("fusion")
        return self.kind == "fusion"

    @property
    def needs_dense(self) -> bool:
        """Whether building or running it needs the dense model (the fusion teacher, or a given
        object still waiting for its corpus embeddings)."""
        if self.obj is not None:
            return getattr(self.obj, "doc_embeddings", "absent") is None
        return self.kind == "fusion"

    @property
    def local_model(self) -> str | None:
        """Its model when it may be a local folder (an input a run must never overwrite)."""
        return self.model if self.obj is None else None

    def identity(self) -> dict:
        """What the reranked scores depend on besides the candidates: the kind, and the weights
        (a loaded model's, or the files of a local model folder; a Hub id as is)."""
        if self.obj is not None:
            return _object_identity(self.obj)
        if self.kind == "fusion":
            return {"name": "fusion", "weights": list(FUSION_WEIGHTS)}
        from ..fingerprints import folder_fingerprint

        local = Path(self.model).expanduser()
        if local.exists():  # a local folder: its files, wherever it lives
            return {"name": self.kind, "files": folder_fingerprint(local)}
        return {"name": self.kind, "id": self.model}

    def display_name(self, dense_name: str | None) -> str:
        """The name the pipeline records (``dense_name``: the dense model's, for fusion)."""
        if self.obj is not None:
            return self.obj.name
        if self.kind == "fusion":
            return f"fusion(bm25,{dense_name},w={list(FUSION_WEIGHTS)})"
        return f"{self.kind}:{self.model}"

    def card_name(self, dense_name: str | None) -> str:
        """:meth:`display_name` as the card shows it: a local model folder by its name only."""
        from ..hub.paths import public_name

        name = self.display_name(public_name(dense_name))
        kind, sep, spec = name.partition(":")
        return f"{kind}:{public_name(spec)}" if sep and kind in ("monot5", "cross-encoder") else name

    def reference_size(self, bm25_top: int) -> int:
        """The fusion teacher normalises over at least ``max(bm25_top, 100)`` documents."""
        return max(bm25_top, FUSION_REFERENCE_SIZE)

    def normalisation(self, bm25_top: int) -> dict | None:
        """What its scale depends on besides the models (part of the rerank key), or None."""
        if self.obj is not None:
            return getattr(self.obj, "normalisation", None)
        return FusionReranker.normalisation_of(self.reference_size(bm25_top)) if self.kind == "fusion" else None

    def margin_bound(self, bm25_top: int, n_docs: int) -> float | None:
        """The widest margin its scale produces (the degenerate rule), also before it is built."""
        if self.obj is not None:
            return getattr(self.obj, "margin_bound", None)
        if self.kind == "fusion":
            return FusionReranker.bound_of(FUSION_WEIGHTS, self.reference_size(bm25_top), n_docs)
        return 1.0 if self.kind == "monot5" else None

    def build(self, *, bm25=None, encoder=None, encoder_name: str | None = None, bm25_top: int | None = None,
              **kwargs) -> Reranker:
        """The reranker (the given object as is)."""
        from .rerankers import CrossEncoderReranker, MonoT5Reranker

        if self.obj is not None:
            return self.obj
        if self.kind == "fusion":
            if bm25_top is not None:
                kwargs["reference_size"] = self.reference_size(bm25_top)
            kwargs.setdefault("weights", FUSION_WEIGHTS)
            return FusionReranker(bm25, encoder, encoder_name=encoder_name, **kwargs)
        if self.kind == "monot5":
            return MonoT5Reranker(self.model, **kwargs)
        return CrossEncoderReranker(self.model, **kwargs)


def parse_teacher(spec) -> Teacher:
    """A :class:`Teacher` from a spec string or a reranker object (a :class:`Teacher` as is);
    ``ValueError`` names what a spec may be."""
    if isinstance(spec, Teacher):
        return spec
    if not isinstance(spec, str):
        return Teacher(None, obj=spec)
    kind, _, ident = spec.partition(":")
    if kind == "fusion":
        return Teacher("fusion")
    if kind == "monot5":
        return Teacher("monot5", ident or DEFAULT_MONOT5)
    if kind == "cross-encoder":
        if not ident:
            raise ValueError("cross-encoder:<model id or path> needs a model")
        return Teacher("cross-encoder", ident)
    raise ValueError(f"unknown reranker {spec!r}: use fusion, monot5:<id> or cross-encoder:<id>")


def get_reranker(spec: str, *, bm25=None, encoder=None, encoder_name: str | None = None, **kwargs) -> Reranker:
    """``"fusion"`` (needs ``bm25`` and ``encoder``), ``"monot5:<id>"`` or ``"cross-encoder:<id>"``."""
    return parse_teacher(str(spec)).build(bm25=bm25, encoder=encoder, encoder_name=encoder_name, **kwargs)


def _object_identity(reranker) -> dict:
    """A loaded reranker's identity: its name and class, its models' weights, its fusion weights."""
    import torch

    from ..fingerprints import model_fingerprint

    ident: dict = {"name": getattr(reranker, "name", type(reranker).__name__), "class": type(reranker).__name__}
    for attr in ("model", "encoder"):
        m = getattr(reranker, attr, None)
        if m is not None and not isinstance(m, torch.nn.Module):
            m = next((getattr(m, a) for a in ("model", "_model") if isinstance(getattr(m, a, None), torch.nn.Module)),
                     None)
        if m is not None:
            ident[attr] = model_fingerprint(m)
    if hasattr(reranker, "weights"):
        ident["weights"] = list(reranker.weights)
    return ident
