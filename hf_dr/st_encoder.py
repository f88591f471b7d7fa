"""A ``SentenceTransformer`` or ``SparseEncoder`` object as an encoder of the suite.

A user who holds a Sentence Transformers model passes it wherever hf-dr takes an encoder
(:class:`~hf_dr.retrieval.EncoderRetriever`, :func:`~hf_dr.factory.build_retriever`,
:func:`~hf_dr.factory.evaluate_model`, pseudo-labelling's dense model, ``adapt``'s student and
dense teacher): :func:`as_encoder` wraps it in :class:`SentenceTransformerEncoder`, which runs
the model's own modules (``model(features, task=...)``: its Transformer, Pooling, Normalize, Dense,
a query/document ``Router``, SPLADE pooling...) inside hf-dr's one encode loop. So the model's
prompts (``prompts``, ``default_prompt_name``), its max length and its similarity are those Sentence
Transformers uses, the vectors are those of its ``encode_query`` / ``encode_document``, and
hf-dr's precision (``--dtype``), chunking and embeddings manifests apply as to any encoder.

The one difference from Sentence Transformers is the similarity of a model that names none and has
no ``Normalize`` module: scored by dot product here (as the same folder is when hf-dr loads it,
:mod:`hf_dr.models.dense`), where Sentence Transformers' ``similarity`` defaults to cosine.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
from torch import nn

from .encoding import EncoderMixin, st_prompts

__all__ = ["SentenceTransformerEncoder", "as_encoder", "is_sentence_transformers_model", "trainable_as_folder"]


def is_sentence_transformers_model(obj) -> bool:
    """``True`` for a ``SentenceTransformer`` / ``SparseEncoder`` instance (checked without importing
    Sentence Transformers when ``obj`` does not come from it)."""
    if not type(obj).__module__.startswith("sentence_transformers"):
        return False
    from sentence_transformers import SentenceTransformer, SparseEncoder

    return isinstance(obj, (SentenceTransformer, SparseEncoder))


def as_encoder(obj):
    """``obj`` as an encoder of the suite: a ``SentenceTransformer`` / ``SparseEncoder`` is wrapped in
    :class:`SentenceTransformerEncoder`; an encoder of the suite (anything with ``encode_queries``) and
    ``None`` pass through. Anything else is a ``TypeError`` naming what an encoder must be."""
    if obj is None or hasattr(obj, "encode_queries"):
        return obj
    if is_sentence_transformers_model(obj):
        return SentenceTransformerEncoder(obj)
    raise TypeError(f"{type(obj).__name__} is not an encoder: pass an encoder of the suite (hf_dr.models.load_encoder), "
                    "a SentenceTransformer or a SparseEncoder")


def _modules(model) -> list[nn.Module]:
    """Every module of ``model``'s pipeline, those inside a ``Router``'s routes included."""
    out = []
    for m in model.children():
        subs = getattr(m, "sub_modules", None)
        if isinstance(subs, nn.ModuleDict):
            for route in subs.values():
                out += list(route.children()) if isinstance(route, nn.Sequential) else [route]
        else:
            out.append(m)
    return out


class SentenceTransformerEncoder(nn.Module, EncoderMixin):
    """An encoder of the suite over a ``SentenceTransformer`` / ``SparseEncoder`` object (see the
    module's docstring). ``forward(input_ids, attention_mask, is_query)`` runs the model's modules
    with ``task="query"`` / ``"document"``; ``model`` is the wrapped object (trained in place);
    :meth:`save_pretrained` writes a Sentence Transformers folder (``model.save``)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.tokenizer = model.tokenizer
        if self.tokenizer is None:
            raise TypeError(f"{type(model).__name__} has no tokenizer: hf-dr encodes text models only")
        from sentence_transformers import SparseEncoder

        self.output_is_sparse = isinstance(model, SparseEncoder)
        self.prompts, self.query_prefix, self.doc_prefix = st_prompts(getattr(model, "prompts", None))
        self.default_prompt_name = getattr(model, "default_prompt_name", None)
        mods = _modules(model)
        names = [type(m).__name__ for m in mods]
        # what the folder rule of hf_dr.models.dense reads: a Normalize module or a cosine similarity
        sim = getattr(model, "_similarity_fn_name", None)
        sim = getattr(sim, "value", sim)
        self.normalize = not self.output_is_sparse and ("Normalize" in names or str(sim).lower() == "cosine")
        #: cosine without a Normalize module: the forward normalises (decided once, not per batch)
        self._normalize_output = self.normalize and "Normalize" not in names
        self.similarity_fn_name = sim or ("dot" if self.output_is_sparse or not self.normalize else "cosine")
        pooling = next((m for m in mods if type(m).__name__ == "Pooling"), None)
        mode = getattr(pooling, "pooling_mode", None)
        self.pooling = "+".join(mode) if isinstance(mode, (list, tuple)) else mode
        if pooling is not None and getattr(pooling, "include_prompt", True) is False and (self.query_prefix or self.doc_prefix):
            warnings.warn(f"{type(model).__name__}: its pooling leaves the prompt tokens out (include_prompt: false), "
                          "hf-dr pools over them: its vectors differ from Sentence Transformers'", UserWarning, stacklevel=3)
        # Sentence Transformers 6's per-task lengths (query_length / document_length), else max_seq_length
        first = next((m for m in mods if hasattr(m, "max_seq_length")), None)
        self.max_doc_length = getattr(first, "document_length", None) or model.max_seq_length or None
        self.max_query_length = getattr(first, "query_length", None) or model.max_seq_length or None
        self.config = getattr(getattr(model, "transformers_model", None), "config", None)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, is_query: bool = False) -> torch.Tensor:
        features = {"input_ids": input_ids, "attention_mask": attention_mask}
        out = self.model(features, task="query" if is_query else "document")["sentence_embedding"]
        if out.is_sparse:  # SparseEncoder modules that sparsify (max_active_dims, CSR autoencoders)
            out = out.to_dense()
        if self._normalize_output:  # cosine without a Normalize module
            out = nn.functional.normalize(out, dim=-1)
        return out

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """The wrapped model's own folder (``model.save``): loads in Sentence Transformers and in hf-dr."""
        Path(save_directory).mkdir(parents=True, exist_ok=True)
        self.model.save(str(save_directory))

    @property
    def name_or_path(self) -> str:
        cfg = self.config
        return getattr(cfg, "_name_or_path", None) or type(self.model).__name__


def trainable_as_folder(model) -> str | None:
    """Why ``model`` (a ``SentenceTransformer`` / ``SparseEncoder``) cannot be trained by ``hf-dr adapt``
    through its saved folder, or ``None`` when it can: adapt trains a Transformer + Pooling (mean, cls or
    max, prompt tokens included) (+ Normalize) model, or a masked-LM Transformer + SPLADE pooling (max,
    ReLU) — what hf-dr's encoders express exactly. Anything else (Dense projections, a query/document
    ``Router``, another pooling) would be trained without its extra modules: refused, not approximated."""
    mods = list(model.children())
    names = [type(m).__name__ for m in mods]
    from sentence_transformers import SparseEncoder

    if isinstance(model, SparseEncoder):
        ok = len(mods) == 2 and names[0] in ("Transformer", "MLMTransformer") and names[1] == "SpladePooling" \
            and getattr(mods[1], "pooling_strategy", "max") == "max" \
            and getattr(mods[1], "activation_function", "relu") == "relu"
        return None if ok else (f"its modules are {' -> '.join(names)}; hf-dr trains a masked-LM Transformer -> "
                                "SpladePooling(max, relu)")
    if not mods or names[0] != "Transformer" or names[1:2] != ["Pooling"] or names[2:] not in ([], ["Normalize"]):
        return f"its modules are {' -> '.join(names)}; hf-dr trains Transformer -> Pooling (-> Normalize)"
    mode = getattr(mods[1], "pooling_mode", None)
    mode = mode[0] if isinstance(mode, (list, tuple)) and len(mode) == 1 else mode
    if mode not in ("mean", "cls", "max"):
        return f"its pooling is {mode!r}; hf-dr trains mean, cls or max pooling"
    if getattr(mods[1], "include_prompt", True) is False:
        return "its pooling leaves the prompt tokens out (include_prompt: false), which hf-dr does not"
    return None
