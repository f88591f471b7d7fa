"""BERMEncoder (Xu et al. 2023, papers/000): a single-vector dense retriever trained with
BERM's unit constraints — semantic unit balance (Eq. 4) and essential matching unit
extractability (Eq. 5) — on top of the usual contrastive loss.

At inference it is exactly a bi-encoder (Fig. 3c: no extra module, no extra cost):
``t = pool(g(text))`` (the [CLS] state by default, §4.2), scored by dot product. The unit
machinery exists only in training (:mod:`hf_dr.losses`, :mod:`hf_dr.objectives.berm`) and in
:meth:`BERMEncoder.score_units`, which shows which sentence of a passage the query matches; both
use the unit embeddings (Eq. 3, :func:`unit_mean_pool`) and the matching representation
(:func:`matching_representation`) defined here, pure tensor functions of the model.

Self-contained (torch + transformers, relative imports) so a saved folder loads with
``AutoModel.from_pretrained(dir, trust_remote_code=True)`` without hf-dr installed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer, PreTrainedModel
from transformers.utils import ModelOutput

from .configuration_berm import BERMConfig

try:  # the shared encode loop of hf-dr, when installed
    from hf_dr.encoding import EncoderMixin
except ImportError:  # loaded from the Hub without hf-dr: forward() is the whole model
    class EncoderMixin:  # type: ignore[no-redef]
        pass

__all__ = ["BERMEncoder", "BERMOutput", "unit_mean_pool", "matching_representation"]


def unit_mean_pool(hidden: torch.Tensor, unit_spans: torch.Tensor, unit_mask: torch.Tensor) -> torch.Tensor:
    """Unit embeddings ``E`` (BERM Eq. 3): ``e_i = mean(Z[s_i:d_i])`` for every unit of every
    passage of the batch at once (no Python loop over examples).

    Args:
        hidden: ``[B, L, d]`` token states ``Z`` of the passages.
        unit_spans: ``[B, U, 2]`` token span ``[start, end)`` of each unit (end exclusive),
            already clipped to the truncated sequence (see :mod:`hf_dr.data.units`).
        unit_mask: ``[B, U]`` bool, ``False`` for padding units (a passage with fewer than
            ``U`` units) and for units with an empty span.
    Returns ``[B, U, d]``; masked units are zero vectors.
    """
    L = hidden.shape[1]
    pos = torch.arange(L, device=hidden.device).view(1, 1, L)
    start = unit_spans[..., 0:1].to(hidden.device)
    end = unit_spans[..., 1:2].to(hidden.device).clamp(max=L)
    member = (pos >= start) & (pos < end) & unit_mask.to(hidden.device).bool().unsqueeze(-1)  # [B, U, L]
    member = member.to(hidden.dtype)
    counts = member.sum(-1, keepdim=True).clamp(min=1.0)
    return torch.einsum("bul,bld->bud", member, hidden) / counts


def matching_representation(t_q: torch.Tensor, t_p: torch.Tensor) -> torch.Tensor:
    """BERM's matching representation ``m = GELU(t_q ⊙ t_p)`` (Sec. 4.2, R2)."""
    return nn.functional.gelu(t_q * t_p)


def _read_prompts(model) -> None:
    """The prompts saved in the config (``prompts``: ``query`` / ``document``) as the model's
    ``query_prefix`` / ``doc_prefix``, the prompts hf-dr's encodings prepend."""
    prompts = getattr(model.config, "prompts", None)
    if isinstance(prompts, dict):
        model.query_prefix, model.doc_prefix = prompts.get("query") or "", prompts.get("document") or ""


def _write_prompts(model) -> None:
    """The model's prompts (``query_prefix`` / ``doc_prefix``, when any) into its config, saved with it."""
    q, d = getattr(model, "query_prefix", None) or "", getattr(model, "doc_prefix", None) or ""
    if q or d:
        model.config.prompts = {"query": q, "document": d}
    elif hasattr(model.config, "prompts"):
        del model.config.prompts


@dataclass
class BERMOutput(ModelOutput):
    """``embeddings`` ``[B, d]`` (the text representation ``t``) and, when asked for with
    ``output_token_states=True``, the token states ``Z`` ``[B, L, d]`` the unit embeddings
    (Eq. 3) are pooled from."""

    embeddings: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None


class BERMEncoder(EncoderMixin, PreTrainedModel):
    """A bi-encoder over any ``AutoModel`` backbone (``self.backbone``), CLS pooling and dot
    product by default, as in the paper.

    ``BERMEncoder.from_backbone("bert-base-uncased")`` builds one from any checkpoint;
    ``forward(input_ids, attention_mask, is_query)`` returns ``[B, d]``;
    ``encode_queries`` / ``encode_corpus`` run hf-dr's one encode loop.
    """

    config_class = BERMConfig
    base_model_prefix = "berm"
    main_input_name = "input_ids"
    _no_split_modules: list[str] = []
    _supports_sdpa = True  # attention is the backbone's: let it keep SDPA / flash attention
    _supports_flash_attn = True
    _supports_attention_backend = True

    def __init__(self, config: BERMConfig, backbone: nn.Module | None = None):
        super().__init__(config)
        if config.backbone_config is None:
            raise ValueError("BERMConfig.backbone_config is required")
        self.backbone = backbone if backbone is not None else AutoModel.from_config(config.backbone_config)
        self.tokenizer = None
        self.post_init()

    def _init_weights(self, module):  # the backbone initialises itself; BERM adds no parameter
        pass

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    # ------------------------------------------------------------------ building / loading
    @classmethod
    def from_backbone(cls, path_or_id: str | os.PathLike, pooling: str = "cls", similarity: str = "dot",
                      tokenizer=None, **config_kwargs) -> BERMEncoder:
        """Wrap any encoder checkpoint (folder or Hub id) as a BERM encoder; ``config_kwargs``
        set other :class:`BERMConfig` fields (``max_query_length``, ``max_doc_length``)."""
        path_or_id = str(path_or_id)
        backbone = AutoModel.from_pretrained(path_or_id)
        attn = backbone.config._attn_implementation
        config = BERMConfig(backbone_config=backbone.config, pooling=pooling, similarity=similarity,
                            backbone_name_or_path=path_or_id, **config_kwargs)
        model = cls(config, backbone=backbone)
        model.tokenizer = tokenizer or AutoTokenizer.from_pretrained(path_or_id)
        if attn and model.backbone.config._attn_implementation != attn:
            model.backbone.set_attn_implementation(attn)
        return model.eval()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        try:
            model.tokenizer = AutoTokenizer.from_pretrained(pretrained_model_name_or_path, trust_remote_code=False,
                                                            config=model.config.backbone_config)
        except (OSError, ValueError):
            model.tokenizer = None
        _read_prompts(model)
        return model

    def save_pretrained(self, save_directory, *args, **kwargs):
        # auto_map in config.json + the code files beside the weights: trust_remote_code loading
        self.register_for_auto_class("AutoModel")
        self.config.register_for_auto_class()
        _write_prompts(self)
        # a local backbone folder is recorded by its name only: no local path in config.json
        holders = [(self.config, "backbone_name_or_path"), (self.config.backbone_config, "_name_or_path")]
        saved = [(o, a, getattr(o, a, None)) for o, a in holders if o is not None]
        for o, a, v in saved:
            if v and os.path.exists(str(v)):
                setattr(o, a, os.path.basename(os.path.abspath(str(v))))
        try:
            super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            for o, a, v in saved:
                if v is not None:
                    setattr(o, a, v)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory)
        if kwargs.get("is_main_process", True):
            self._write_sentence_transformers_modules(save_directory)

    def _write_sentence_transformers_modules(self, out) -> None:
        """The folder is also a Sentence Transformers folder (Transformer in ``0_Transformer/`` sharing
        the root's weights, Pooling, Normalize for ``cos``); hf-dr writes it (a Hub user re-saving
        without hf-dr gets the ``trust_remote_code`` folder only)."""
        try:
            from hf_dr.models.st_folder import write_dense_modules, write_unsupported
        except ImportError:
            return
        if self.tokenizer is None:
            return write_unsupported(out, "the model was saved without its tokenizer")
        if not any(os.path.exists(os.path.join(out, f)) for f in ("model.safetensors", "model.safetensors.index.json")):
            return write_unsupported(out, "its weights were not saved as safetensors")
        c = self.config
        write_dense_modules(out, hidden_size=c.hidden_size, pooling=c.pooling, normalize=c.similarity == "cos",
                            max_length=self.encoding_settings(False)["max_length"],
                            max_query_length=self.encoding_settings(True)["max_length"],
                            prompts={"query": getattr(self, "query_prefix", None) or "",
                                     "document": getattr(self, "doc_prefix", None) or ""},
                            similarity_fn_name="cosine" if c.similarity == "cos" else "dot",
                            backbone_config=c.backbone_config, tokenizer=self.tokenizer, weights_prefix="backbone.")

    # ------------------------------------------------------------------ Hub repo (``hf-dr push``)
    @classmethod
    def save_for_hub(cls, src, out, **options):
        """Load the saved folder ``src`` and write its Hub repo to ``out``: the ``trust_remote_code``
        folder of :meth:`save_pretrained`, which is also a Sentence Transformers folder (Transformer in
        ``0_Transformer/`` sharing the root's weights, Pooling, Normalize for ``cos``; needs hf-dr).
        Returns ``(model, {})``."""
        model = cls.from_pretrained(str(src))
        model.save_pretrained(out, safe_serialization=True)
        return model, {}

    def card_variables(self, info: dict) -> dict:
        """The variables of ``model_cards/berm.md`` beyond the ones every card gets, from the
        config and ``info`` (the folder's ``train_info.json``, as examples/train_berm.py writes it)."""
        berm = info.get("berm")
        return dict(backbone=info.get("model_name_or_path") or getattr(self.config, "backbone_name_or_path", None)
                    or "?",
                    style=info.get("style", "not recorded"),
                    berm="not recorded" if berm is None else ("on" if berm else "off"),
                    alpha=info.get("alpha", "?"), beta=info.get("beta", "?"), delta=info.get("delta", "?"),
                    reader=info.get("reader") or "not recorded",
                    train_data=f"`{info['train_data']}`" if info.get("train_data") else "not recorded",
                    n_rows=info.get("n_rows", "?"), global_steps=info.get("global_steps", "?"),
                    learning_rate=info.get("learning_rate", "?"))

    # ------------------------------------------------------------------ forward
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, is_query: bool = False,
                output_token_states: bool = False, **kwargs):
        """Text representation ``t`` ``[B, d]`` (queries and passages share the encoder).
        With ``output_token_states`` a :class:`BERMOutput` that also holds ``Z`` (training)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.config.pooling == "cls":
            t = hidden[:, 0]
        else:  # masked mean over the tokens
            m = attention_mask.unsqueeze(-1).to(hidden.dtype)
            t = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        if self.config.similarity == "cos":
            t = nn.functional.normalize(t, dim=-1)
        if output_token_states:
            return BERMOutput(embeddings=t, last_hidden_state=hidden)
        return t

    # ------------------------------------------------------------------ interpretation (demo)
    def score_units(self, query: str, passage: str, max_length: int | None = None):
        """Which sentence of ``passage`` does ``query`` match? Returns ``(units, scores)``: the
        passage's sentence units that survive truncation to ``max_length`` (default the
        model's ``max_doc_length``) and, per unit, the extract score of Eq. 5,
        ``m . e_i`` with ``m = GELU(t_q ⊙ t_p)`` and ``e_i`` the unit's mean token state
        (Eq. 3); the highest-scoring unit is the essential matching unit. A one-sentence
        passage gives one unit; an empty passage gives ``([], empty array)``.

        Needs hf-dr (its sentence splitter).
        """
        try:
            from hf_dr.data.units import split_units, unit_token_spans
        except ImportError as e:  # a Hub user without hf-dr still has forward / encode
            raise ImportError("score_units needs hf-dr (pip install hf-dr) for sentence units") from e
        import numpy as np

        if self.tokenizer is None:
            raise ValueError("score_units needs the model's tokenizer (model.tokenizer)")
        char_spans = split_units(passage)
        max_length = max_length or self.config.max_doc_length
        dev = next(self.parameters()).device
        enc = self.tokenizer(passage, truncation=True, max_length=max_length, return_offsets_mapping=True,
                             return_tensors="pt")
        spans, kept = unit_token_spans(enc.pop("offset_mapping")[0].tolist(), char_spans)
        if not kept:
            return [], np.zeros(0, dtype=np.float32)
        q = self.tokenizer([query], truncation=True, max_length=self.config.max_query_length, return_tensors="pt")
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                t_q = self(q["input_ids"].to(dev), q["attention_mask"].to(dev), is_query=True)
                out = self(enc["input_ids"].to(dev), enc["attention_mask"].to(dev), output_token_states=True)
                e = unit_mean_pool(out.last_hidden_state, torch.tensor([spans], device=dev),
                                   torch.ones((1, len(spans)), dtype=torch.bool, device=dev))
                scores = torch.einsum("bd,bud->bu", matching_representation(t_q, out.embeddings), e)[0]
        finally:
            if was_training:
                self.train()
        return [passage[char_spans[i][0]:char_spans[i][1]] for i in kept], scores.float().cpu().numpy()
