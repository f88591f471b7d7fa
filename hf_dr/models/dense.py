"""The generic dense encoder: any Hugging Face / sentence-transformers checkpoint.

This is the baseline every method is compared with. Pooling and normalisation are read
from a sentence-transformers folder (``modules.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``) when present, else given explicitly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer

from ..encoding import EncoderMixin, st_prompts

__all__ = ["DenseEncoder", "pool", "own_pooling_and_similarity"]

_CONFIG_NAME = "hf_dr_dense.json"


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """``mean`` (masked average), ``cls`` (first token) or ``max`` pooling of ``[B, L, d]``."""
    if pooling == "cls":
        return hidden[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    if pooling == "mean":
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    if pooling == "max":
        return hidden.masked_fill(mask == 0, torch.finfo(hidden.dtype).min).max(1).values
    raise ValueError(f"unknown pooling {pooling!r}: use mean, cls or max")


def _read_json(path: Path) -> dict:
    """A JSON file of a model folder; ``{}`` when it does not exist. A file that exists but cannot
    be read or parsed raises :class:`~hf_dr.models.ModelLoadError`: guessing the pooling instead
    would encode with the wrong one, silently."""
    from .checkpoints import ModelLoadError

    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ModelLoadError(f"{path} cannot be read ({type(e).__name__}: {e.strerror or e})") from None
    except ValueError as e:
        raise ModelLoadError(f"{path}: malformed JSON ({e})") from None


def _st_settings(path: str) -> dict:
    """Pooling / normalisation / max length of a local sentence-transformers folder (or Hub id)."""
    p = Path(path)
    if not p.is_dir():
        # a Hub id: its *.json files (a plain transformers checkpoint has no sentence-transformers
        # ones, and gets the defaults); a Hub that cannot be reached is an error, not mean pooling
        import huggingface_hub

        from .checkpoints import ModelLoadError, hub_reason

        try:
            p = Path(huggingface_hub.snapshot_download(path, allow_patterns=["*.json"]))
        except Exception as e:
            raise ModelLoadError(f"{path}: the sentence-transformers configuration (pooling, normalisation) of the "
                                 f"Hub model {path!r} cannot be fetched: {hub_reason(e)}; {type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")) from None
    out: dict = {}
    own = _read_json(p / _CONFIG_NAME)
    if own:
        return own
    modules = _read_json(p / "modules.json")
    if isinstance(modules, list):
        for m in modules:
            t = m.get("type", "")
            if t.endswith("Pooling"):
                pc = _read_json(p / m.get("path", "") / "config.json")
                if pc.get("include_prompt") is False:
                    out["include_prompt"] = False
                mode = pc.get("pooling_mode")  # Sentence Transformers >= 6: "mean" / "cls" / "max" (or a list)
                mode = mode[0] if isinstance(mode, list) and len(mode) == 1 else mode
                if isinstance(mode, str) and mode in ("mean", "cls", "max"):
                    out["pooling"] = mode
                elif mode is not None:
                    from .checkpoints import ModelLoadError

                    raise ModelLoadError(f"{path}: pooling {mode!r} is not one hf-dr encodes with (mean, cls, max)")
                elif pc.get("pooling_mode_cls_token"):
                    out["pooling"] = "cls"
                elif pc.get("pooling_mode_max_tokens"):
                    out["pooling"] = "max"
                elif pc.get("pooling_mode_mean_tokens"):
                    out["pooling"] = "mean"
            if t.endswith("Normalize"):
                out["normalize"] = True
        # a model scored by cosine without a Normalize module: cosine = the inner product of unit vectors
        stc = _read_json(p / "config_sentence_transformers.json")
        if str(stc.get("similarity_fn_name")).lower() == "cosine":
            out["normalize"] = True
        out.setdefault("normalize", False)
        for key in ("prompts", "default_prompt_name", "similarity_fn_name"):
            if stc.get(key) is not None:
                out[key] = stc[key]
    sb = _read_json(p / "sentence_bert_config.json")
    if "max_seq_length" in sb:
        out["max_length"] = int(sb["max_seq_length"])
    if sb.get("document_length"):  # Sentence Transformers 6: per-task lengths (encode_query / encode_document)
        out["max_length"] = int(sb["document_length"])
    if sb.get("query_length"):
        out["max_query_length"] = int(sb["query_length"])
    return out


def own_pooling_and_similarity(path_or_id: str | os.PathLike, default_pooling: str = "cls") -> tuple[str, str]:
    """The pooling and similarity (``"cos"`` / ``"dot"``) a checkpoint declares in its own
    sentence-transformers configuration (``Pooling``, ``Normalize``, ``similarity_fn_name``);
    ``default_pooling`` and ``"dot"`` for a plain transformers checkpoint that declares neither."""
    st = _st_settings(str(path_or_id))
    return st.get("pooling", default_pooling), ("cos" if st.get("normalize") else "dot")


class DenseEncoder(nn.Module, EncoderMixin):
    """A bi-encoder over any ``AutoModel`` backbone: pooling + optional L2 normalisation
    (cosine), scored by inner product.

    ``DenseEncoder.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")`` reads mean
    pooling, normalisation and max length 256 from the folder, as sentence-transformers does; the
    ``prompts`` of ``config_sentence_transformers.json`` give ``query_prefix`` (``encode_query``) and
    ``doc_prefix`` (``encode_document``) as in Sentence Transformers (:func:`~hf_dr.encoding.st_prompts`).
    """

    #: weights the encoding never uses (the backbone's pooler): left out of embeddings fingerprints
    fingerprint_skip = ("backbone.pooler.",)

    def __init__(self, backbone: nn.Module, tokenizer, pooling: str = "mean", normalize: bool = False,
                 max_length: int = 512, max_query_length: int | None = None, prompts: dict | None = None,
                 default_prompt_name: str | None = None, similarity_fn_name: str | None = None):
        super().__init__()
        self.prompts, self.query_prefix, self.doc_prefix = st_prompts(prompts)
        if default_prompt_name is not None and default_prompt_name not in self.prompts:
            raise ValueError(f"Default prompt name '{default_prompt_name}' not found in the configured prompts "
                             f"dictionary with keys {list(self.prompts)!r}.")
        self.default_prompt_name = default_prompt_name
        self.similarity_fn_name = similarity_fn_name
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.normalize = normalize
        self.max_doc_length = max_length
        self.max_query_length = max_query_length or max_length
        self.config = backbone.config

    @classmethod
    def from_pretrained(cls, path_or_id: str | os.PathLike, pooling: str | None = None,
                        normalize: bool | None = None, max_length: int | None = None,
                        max_query_length: int | None = None, **model_kwargs) -> DenseEncoder:
        path_or_id = str(path_or_id)
        st = _st_settings(path_or_id)
        tokenizer = AutoTokenizer.from_pretrained(path_or_id)
        backbone = AutoModel.from_pretrained(path_or_id, **model_kwargs)
        max_length = max_length or st.get("max_length") or min(512, getattr(tokenizer, "model_max_length", 512) or 512)
        encoder = cls(backbone, tokenizer, pooling=pooling or st.get("pooling", "mean"),
                      normalize=st.get("normalize", False) if normalize is None else normalize,
                      max_length=max_length, max_query_length=max_query_length or st.get("max_query_length"),
                      prompts=st.get("prompts"), default_prompt_name=st.get("default_prompt_name"),
                      similarity_fn_name=st.get("similarity_fn_name"))
        if st.get("include_prompt") is False and (encoder.query_prefix or encoder.doc_prefix):
            import warnings

            warnings.warn(f"{path_or_id}: its pooling leaves the prompt tokens out (include_prompt: false), hf-dr "
                          "pools over them: its vectors differ from Sentence Transformers'", UserWarning, stacklevel=2)
        return encoder.eval()  # as transformers' from_pretrained: a loaded model is in eval mode

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, is_query: bool = False) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        emb = pool(hidden, attention_mask, self.pooling)
        return nn.functional.normalize(emb, dim=-1) if self.normalize else emb

    def load_weights(self, directory: str | os.PathLike) -> None:
        """Load backbone weights saved by :meth:`save_pretrained` (Trainer resume / best model)."""
        from .checkpoints import read_checkpoint

        state = read_checkpoint(Path(directory) / "model.safetensors", self.backbone.state_dict())
        missing, unexpected = self.backbone.load_state_dict(state, strict=False)
        tied = getattr(self.backbone, "_tied_weights_keys", None) or ()
        missing = [k for k in missing if k not in tied]
        if unexpected or missing:
            raise ValueError(f"{directory}: weights do not fit this encoder (missing {missing[:3]}, unexpected {unexpected[:3]})")

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """Save backbone, tokenizer and the pooling settings (re-read by ``from_pretrained``)."""
        save_directory = Path(save_directory)
        save_directory.mkdir(parents=True, exist_ok=True)
        kwargs.pop("state_dict", None)
        self.backbone.save_pretrained(save_directory, **kwargs)
        self.tokenizer.save_pretrained(save_directory)
        (save_directory / _CONFIG_NAME).write_text(json.dumps(
            {"pooling": self.pooling, "normalize": self.normalize, "max_length": self.max_doc_length,
             "max_query_length": self.max_query_length, **self._st_config()}, indent=1))
        self.save_sentence_transformers_config(save_directory)

    def _st_config(self) -> dict:
        """``prompts`` (as encoded now: ``query_prefix`` / ``doc_prefix`` included), ``default_prompt_name``,
        ``similarity_fn_name``: what ``config_sentence_transformers.json`` holds."""
        sim = self.similarity_fn_name or ("cosine" if self.normalize else "dot")
        return {"prompts": self._prompts(), "default_prompt_name": self.default_prompt_name,
                "similarity_fn_name": sim}

    def save_sentence_transformers_config(self, save_directory: str | os.PathLike) -> None:
        """``modules.json``, ``sentence_bert_config.json``, the pooling (+ normalise) configs and
        ``config_sentence_transformers.json`` (prompts, similarity), so ``SentenceTransformer(folder)``
        loads the folder written by :meth:`save_pretrained` and encodes as this encoder does
        (:func:`hf_dr.models.st_folder.write_dense_modules`; read back here too)."""
        from .st_folder import write_dense_modules

        st = self._st_config()
        write_dense_modules(save_directory, hidden_size=self.config.hidden_size, pooling=self.pooling,
                            normalize=self.normalize, max_length=self.encoding_settings(False)["max_length"],
                            max_query_length=self.encoding_settings(True)["max_length"], prompts=st["prompts"],
                            default_prompt_name=st["default_prompt_name"], similarity_fn_name=st["similarity_fn_name"])

    # ------------------------------------------------------------------ Hub repo (``hf-dr push``)
    @classmethod
    def save_for_hub(cls, src, out, **options):
        """Load the saved folder ``src`` and write the files of its Hub repo to ``out``: a
        sentence-transformers folder (no remote code). Returns ``(model, {})``."""
        model = cls.from_pretrained(src)
        model.save_pretrained(out, safe_serialization=True)
        return model, {}

    def card_variables(self, info: dict) -> dict:
        """``model_cards/dense.md`` needs only the variables every card gets."""
        return {}

    #: a published dense folder is a Sentence Transformers folder (no remote code): its card's usage
    #: snippet is Sentence Transformers' own (:func:`hf_dr.hub.cards.usage_snippet`)
    st_native = True
