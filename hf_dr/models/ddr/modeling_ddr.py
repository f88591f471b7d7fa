"""DDR: Disentangled Dense Retrieval (Zhan et al. 2022).

* DAM (Domain Adaption Module) = the Transformer backbone, an ordinary ``*ForMaskedLM``
  checkpoint (its MLM head is only used while the DAM is adapted by MLM, Sec. 3.3).
* REM (Relevance Estimation Module) = LoRA (Hu et al. 2021) on the attention projections,
  through peft, plus a parallel adapter (He et al. 2022) around each feed-forward block
  (Sec. 3.1, Fig. 2). Only the REM is trained on labelled data; DAMs are swapped per domain.

The embedding is the mean (or CLS) pooled last hidden state; relevance is the inner product
(or cosine). Self-contained (torch / transformers / peft, relative imports only) so a folder
saved by :meth:`DDRModel.save_pretrained` / :meth:`DDRModel.save_rem` loads with
``AutoModel.from_pretrained(path, trust_remote_code=True)`` without hf-dr installed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel

from .configuration_ddr import DDRConfig

try:  # the shared encode loop of hf-dr, when installed
    from hf_dr.encoding import EncoderMixin
except ImportError:  # standalone (trust_remote_code): inference via forward() only
    class EncoderMixin:  # type: ignore[no-redef]
        pass

logger = logging.getLogger(__name__)

__all__ = ["DDRModel", "ParallelAdapter", "DAMMismatchError", "load_dam_model", "DAMCheckpoint"]

REM_WEIGHTS_NAME = "model.safetensors"
DAM_SUBFOLDER = "dam"
# keyword arguments that AutoModel / PreTrainedModel plumbing may pass and that do not apply here
_HF_PLUMBING = {"trust_remote_code", "code_revision", "adapter_kwargs", "_from_auto", "_from_pipeline",
                "_commit_hash", "use_safetensors", "low_cpu_mem_usage", "device_map", "attn_implementation",
                "output_loading_info", "subfolder", "proxies", "force_download", "resume_download"}
_HUB_KWARGS = ("revision", "cache_dir", "token", "local_files_only")


#: why no Sentence Transformers module (nor a transformers architecture) expresses a REM
ST_UNSUPPORTED_REASON = ("a DDR REM is LoRA and / or parallel adapters inside the layers of a DAM's backbone, which "
                         "no Sentence Transformers module (nor a transformers architecture) expresses")


class DAMMismatchError(ValueError):
    """A DAM does not fit the REM (hidden size, layer count, vocabulary or architecture differ)."""


class ParallelAdapter(nn.Module):
    """Parallel adapter of He et al. (2022), the PA half of DDR's REM.

    ``FFN'(x) = FFN(x) + s * W_up ReLU(W_down x)``: computed from the FFN's input ``x`` and
    added to the FFN's output before the residual LayerNorm. ``W_up`` starts at zero, so a
    fresh REM leaves the DAM's embeddings unchanged (Sec. 3.2: "randomly initialized REM"
    is inserted into a frozen DAM).
    """

    def __init__(self, hidden_size: int, bottleneck: int, scaling: float = 4.0):
        super().__init__()
        self.down = nn.Linear(hidden_size, bottleneck)
        self.up = nn.Linear(bottleneck, hidden_size)
        self.scaling = scaling
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.down.weight, a=math.sqrt(5))
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scaling * self.up(torch.relu(self.down(x)))

    def ffn_output_pre_hook(self, module, args, kwargs):
        """Forward pre-hook for a BERT-style FFN output module ``output(h, input_tensor)``
        that computes ``LayerNorm(dropout(dense(h)) + input_tensor)``: adding the adapter
        to ``input_tensor`` adds it to the FFN output, leaving the backbone untouched."""
        if len(args) >= 2:
            args = (args[0], args[1] + self(args[1]), *args[2:])
        elif "input_tensor" in kwargs:
            kwargs = {**kwargs, "input_tensor": kwargs["input_tensor"] + self(kwargs["input_tensor"])}
        else:
            raise RuntimeError(f"{type(module).__name__} was called without the FFN input; "
                               "the parallel adapter needs BERT-style output(hidden_states, input_tensor)")
        return args, kwargs


def _is_rem_key(key: str) -> bool:
    return "lora_" in key or key.startswith("parallel_adapters.")


def _dam_key(key: str) -> str:
    """Backbone state-dict key without peft's wrapping (``query.base_layer.weight`` -> ``query.weight``)."""
    return key.replace(".base_layer.", ".")


def _resolve(path_or_id: str, **hub_kwargs) -> Path:
    p = Path(path_or_id)
    if p.is_dir():
        return p
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(path_or_id), **{k: v for k, v in hub_kwargs.items() if v is not None}))
    except Exception as e:  # noqa: BLE001 - re-raised with the path named
        raise OSError(f"{path_or_id!r} is neither a folder nor a reachable Hub repository: {e}") from e


def load_dam_model(path_or_id: str, **kwargs) -> PreTrainedModel:
    """A DAM as ``AutoModelForMaskedLM``. A checkpoint without MLM head weights (e.g. the
    sentence-transformers ``BertModel`` all-MiniLM-L6-v2) gets a freshly initialised head
    whose decoder is tied to the word embeddings; the missing weights are logged."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report / tied-weights notes: we log our own line below
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(str(path_or_id), output_loading_info=True, **kwargs)
    finally:
        hf_logging.set_verbosity(level)
    missing = list(info.get("missing_keys") or [])
    if missing:
        head_only = all(not k.startswith(model.base_model_prefix + ".") for k in missing)
        if not head_only:
            raise ValueError(f"{path_or_id}: backbone weights missing from the checkpoint: {sorted(missing)[:5]}")
        logger.warning("%s has no MLM head (%d weights missing, e.g. %s): initialised a new head with the decoder "
                       "tied to the word embeddings", path_or_id, len(missing), sorted(missing)[0])
    if not getattr(model.config, "tie_word_embeddings", True):
        model.config.tie_word_embeddings = True
    model.tie_weights()
    return model


class DDRModel(PreTrainedModel, EncoderMixin):
    """Disentangled dense retriever: a swappable DAM (``self.backbone``, a ``*ForMaskedLM``)
    with a REM (LoRA inside the attention projections + ``self.parallel_adapters``).

    Build one with :meth:`from_backbone` (fresh REM) or :meth:`from_pretrained` (saved REM,
    ``dam=`` any compatible DAM). ``forward(input_ids, attention_mask)`` returns ``[B, d]``.
    """

    config_class = DDRConfig
    base_model_prefix = "ddr"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _no_split_modules: list[str] = []

    def __init__(self, config: DDRConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        if config.backbone_config is None:
            raise ValueError("DDRConfig.backbone_config is required")
        if backbone is None:
            backbone = AutoModelForMaskedLM.from_config(config.backbone_config)
        else:
            _check_dam(config, backbone.config, "the given backbone")
        self.backbone = backbone
        self.tokenizer = None
        self._merged = False
        layers = _ffn_output_modules(self.backbone.base_model)
        if config.use_pa:
            h = config.backbone_config.hidden_size
            self.parallel_adapters = nn.ModuleList(
                ParallelAdapter(h, config.pa_dim(), config.pa_scaling) for _ in layers)
            for adapter, out in zip(self.parallel_adapters, layers):
                out.register_forward_pre_hook(adapter.ffn_output_pre_hook, with_kwargs=True)
        else:
            self.parallel_adapters = nn.ModuleList()
        if config.use_lora:
            from peft import LoraConfig, inject_adapter_in_model

            lcfg = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                              target_modules=list(config.lora_target_modules), bias="none")
            inject_adapter_in_model(lcfg, self.backbone)
        self.freeze_dam()

    # ------------------------------------------------------------------ parameters
    def _init_weights(self, module):  # the DAM comes from a checkpoint; the REM inits itself
        if isinstance(module, ParallelAdapter):
            module.reset_parameters()

    def freeze_dam(self) -> None:
        """Train only the REM (disentangled fine-tuning, Sec. 3.2)."""
        for name, p in self.named_parameters():
            p.requires_grad = _is_rem_key(name)

    def rem_state_dict(self) -> dict[str, torch.Tensor]:
        """LoRA + parallel-adapter weights (what :meth:`save_rem` writes)."""
        return {k: v for k, v in self.state_dict().items() if _is_rem_key(k)}

    def dam_state_dict(self) -> dict[str, torch.Tensor]:
        """Backbone weights under the plain ``*ForMaskedLM`` names (LoRA not folded in)."""
        with self._unmerged():
            return {_dam_key(k): v.detach().clone() for k, v in self.backbone.state_dict().items()
                    if not _is_rem_key(k)}

    def num_rem_parameters(self) -> int:
        return sum(v.numel() for v in self.rem_state_dict().values())

    # ------------------------------------------------------------------ forward
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, is_query: bool = False,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Embeddings ``[B, d]`` (queries and documents share the encoder; ``is_query`` is
        accepted for the suite's encoder contract)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.backbone.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                          token_type_ids=token_type_ids).last_hidden_state
        if self.config.pooling == "cls":
            emb = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        if self.config.similarity == "cos":
            emb = nn.functional.normalize(emb, dim=-1)
        return emb

    def score(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """Relevance of every query to every document: ``q @ d.T`` (inner product, or cosine
        when ``similarity="cos"`` since the embeddings are then unit length)."""
        return q @ d.T

    # ------------------------------------------------------------------ merge
    def _lora_layers(self):
        from peft.tuners.lora import LoraLayer

        return [m for m in self.backbone.modules() if isinstance(m, LoraLayer)]

    def merge(self) -> DDRModel:
        """Fold LoRA into the attention weights (zero inference overhead; the parallel
        adapters stay). Reversible with :meth:`unmerge`; :meth:`load_dam` and
        :meth:`save_dam` unmerge internally."""
        if not self._merged:
            for m in self._lora_layers():
                m.merge()
            self._merged = True
        return self

    def unmerge(self) -> DDRModel:
        if self._merged:
            for m in self._lora_layers():
                m.unmerge()
            self._merged = False
        return self

    @property
    def is_merged(self) -> bool:
        return self._merged

    @contextlib.contextmanager
    def _unmerged(self):
        was = self._merged
        self.unmerge()
        try:
            yield
        finally:
            if was:
                self.merge()

    # ------------------------------------------------------------------ DAM swapping
    def load_dam(self, path_or_id: str | os.PathLike | PreTrainedModel, **kwargs) -> DDRModel:
        """Replace the backbone weights by another DAM (keeps the REM). A DAM whose
        architecture, hidden size, layer count or vocabulary does not fit is refused."""
        if isinstance(path_or_id, PreTrainedModel):
            dam, name = path_or_id, getattr(path_or_id, "name_or_path", None)
        else:
            name = str(path_or_id)
            dam = load_dam_model(name, **kwargs)
            self._check_tokenizer(name)
        _check_dam(self.config, dam.config, name)
        state = dam.state_dict()
        with self._unmerged(), torch.no_grad():
            own = self.backbone.state_dict(keep_vars=True)
            wanted = {_dam_key(k): k for k in own if not _is_rem_key(k)}
            missing = sorted(set(wanted) - set(state))
            if missing:
                raise DAMMismatchError(f"DAM {name} lacks weights the REM's backbone has: {missing[:5]}")
            for clean, k in wanted.items():
                src = state[clean]
                if own[k].shape != src.shape:
                    raise DAMMismatchError(f"DAM {name}: {clean} has shape {tuple(src.shape)}, "
                                           f"the REM's backbone {tuple(own[k].shape)}")
                own[k].copy_(src.to(own[k].device, own[k].dtype))
        if name is not None:
            self.config.dam_name_or_path = name
        self.freeze_dam()
        return self

    def _check_tokenizer(self, path: str) -> None:
        if self.tokenizer is None:
            return
        try:
            other = AutoTokenizer.from_pretrained(path, config=self.config.backbone_config)
        except (OSError, ValueError):
            return  # a DAM without tokenizer files: the vocabulary size was checked
        if other.get_vocab() != self.tokenizer.get_vocab():
            raise DAMMismatchError(f"DAM {path} has a different vocabulary from this REM's tokenizer "
                                   f"({len(other)} vs {len(self.tokenizer)} tokens)")

    # ------------------------------------------------------------------ building / loading
    @classmethod
    def from_backbone(cls, path_or_id: str | os.PathLike, **config_kwargs) -> DDRModel:
        """A DDR model whose DAM is the checkpoint ``path_or_id`` and whose REM is fresh
        (an untrained REM leaves the backbone's embeddings unchanged). ``config_kwargs``
        set :class:`DDRConfig` fields (``rem_type``, ``lora_rank``, ``pooling``, ...)."""
        dam = load_dam_model(str(path_or_id))
        config = DDRConfig(backbone_config=dam.config, dam_name_or_path=str(path_or_id), **config_kwargs)
        model = cls(config, backbone=dam)
        model.tokenizer = AutoTokenizer.from_pretrained(str(path_or_id))
        return model

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, dam=None, config=None, **kwargs) -> DDRModel:
        """Load a saved REM (``save_rem`` / ``save_pretrained`` folder or Hub id) onto a DAM.

        ``dam``: DAM folder / Hub id; default: the DAM saved beside the REM
        (``save_pretrained``) or the one recorded in the config (``dam_name_or_path``).
        """
        if model_args:
            raise TypeError(f"unexpected positional arguments {model_args}")
        hub = {k: kwargs.pop(k) for k in _HUB_KWARGS if k in kwargs}
        dtype = kwargs.pop("dtype", None) or kwargs.pop("torch_dtype", None)
        for k in list(kwargs):
            if k in _HF_PLUMBING:
                kwargs.pop(k)
        root = _resolve(str(pretrained_model_name_or_path), **hub)
        if config is None or not isinstance(config, DDRConfig):
            cfg_file = root / "config.json"
            if not cfg_file.is_file():
                raise FileNotFoundError(f"{pretrained_model_name_or_path}: no config.json (not a saved DDR REM)")
            config = DDRConfig.from_dict(json.loads(cfg_file.read_text()))
        for k, v in kwargs.items():  # config overrides, e.g. max_doc_length=256
            if not hasattr(config, k):
                raise TypeError(f"DDRModel.from_pretrained got an unexpected argument {k!r}")
            setattr(config, k, v)
        dam = dam if dam is not None else config.dam_name_or_path
        if dam is None:
            raise ValueError(f"{pretrained_model_name_or_path} holds a REM only and names no DAM: pass dam=...")
        if not isinstance(dam, PreTrainedModel):
            dam = str(dam)
            if not Path(dam).is_absolute() and (root / dam).is_dir():
                dam = os.path.normpath(root / dam)
            dam_model = load_dam_model(dam, **hub)
        else:
            dam_model = dam
        _check_dam(config, dam_model.config, str(dam))
        model = cls(config, backbone=dam_model)
        model.config.dam_name_or_path = dam if isinstance(dam, str) else config.dam_name_or_path
        tok_src = root if (root / "tokenizer_config.json").is_file() else dam
        # config= keeps AutoTokenizer from opening the REM's config.json (a custom-code config)
        model.tokenizer = AutoTokenizer.from_pretrained(str(tok_src), config=config.backbone_config)
        if isinstance(dam, str) and tok_src is root:
            model._check_tokenizer(dam)
        model._load_rem_file(root / REM_WEIGHTS_NAME)
        if dtype is not None and dtype != "auto":
            model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
        model.eval()
        return model

    def load_checkpoint_weights(self, directory: str | os.PathLike) -> None:
        """Load the REM of a training checkpoint (``RetrievalTrainer`` resume / best model); the
        frozen DAM is not in it and stays as it is."""
        self._load_rem_file(Path(directory) / REM_WEIGHTS_NAME)

    def _load_rem_file(self, path: Path) -> None:
        from safetensors.torch import load_file

        if not path.is_file():
            raise FileNotFoundError(f"no REM weights at {path}")
        state = load_file(str(path))
        want = self.rem_state_dict()
        missing, unexpected = sorted(set(want) - set(state)), sorted(set(state) - set(want))
        if missing or unexpected:
            raise DAMMismatchError(f"{path}: REM weights do not fit this configuration "
                                   f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
        with self._unmerged():
            self.load_state_dict(state, strict=False)

    # ------------------------------------------------------------------ saving
    def _write_config(self, directory: Path, dam_name_or_path: str | None) -> None:
        if self._auto_class is not None:
            from transformers.dynamic_module_utils import custom_object_save

            custom_object_save(self, directory, config=self.config)
        old = self.config.dam_name_or_path
        self.config.dam_name_or_path = dam_name_or_path
        self.config.architectures = [type(self).__name__]
        bb = self.config.backbone_config
        old_bb = getattr(bb, "_name_or_path", None)
        if old_bb and Path(str(old_bb)).exists():  # a local folder: its name only, no local path
            bb._name_or_path = Path(str(old_bb)).resolve().name
        try:
            self.config.save_pretrained(directory)
        finally:
            self.config.dam_name_or_path = old
            if old_bb is not None:
                bb._name_or_path = old_bb

    def save_rem(self, save_directory: str | os.PathLike, dam_name_or_path: str | None = None) -> None:
        """Save the REM only (LoRA + adapters, unmerged), its config, tokenizer and model
        code. ``dam_name_or_path`` (default: the current DAM's) is recorded as the DAM to
        pair it with when ``from_pretrained`` gets no ``dam=``."""
        from safetensors.torch import save_file

        d = Path(save_directory)
        d.mkdir(parents=True, exist_ok=True)
        dam_ref = dam_name_or_path if dam_name_or_path is not None else self.config.dam_name_or_path
        if dam_ref is not None and not (not Path(dam_ref).is_absolute() and (d / dam_ref).is_dir()) \
                and Path(dam_ref).is_dir():
            # relative to the REM folder (from_pretrained resolves it from there): no absolute local
            # path in config.json, and the pair keeps loading when moved together
            try:
                dam_ref = os.path.relpath(Path(dam_ref).resolve(), d.resolve())
            except ValueError:  # another drive (Windows): the folder name only
                dam_ref = Path(dam_ref).resolve().name
        self._write_config(d, dam_ref)
        with self._unmerged():
            state = {k: v.detach().contiguous().cpu() for k, v in self.rem_state_dict().items()}
        save_file(state, str(d / REM_WEIGHTS_NAME), metadata={"format": "pt"})  # one key: byte-identical files per seed
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(d)
        try:  # SentenceTransformer(d) then fails with one sentence (hf-dr writes it; a Hub user re-saving has none)
            from hf_dr.models.st_folder import write_unsupported
        except ImportError:
            return
        write_unsupported(d, ST_UNSUPPORTED_REASON)

    def save_dam(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """Save the DAM as a plain ``*ForMaskedLM`` checkpoint (+ tokenizer) that any
        transformers user can load; LoRA is not folded in."""
        d = Path(save_directory)
        d.mkdir(parents=True, exist_ok=True)
        kwargs.pop("state_dict", None)
        dam = AutoModelForMaskedLM.from_config(self.config.backbone_config)
        missing, unexpected = dam.load_state_dict(self.dam_state_dict(), strict=False)
        tied = set(getattr(dam, "_tied_weights_keys", None) or {})
        if unexpected or [k for k in missing if k not in tied]:
            raise RuntimeError(f"could not rebuild the DAM (missing {missing[:3]}, unexpected {unexpected[:3]})")
        dam.tie_weights()
        dam.save_pretrained(d, **kwargs)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(d)

    def save_pretrained(self, save_directory: str | os.PathLike, include_dam: bool = True, **kwargs) -> None:
        """The whole model in one folder: the REM at the top, the DAM in ``dam/`` (so
        ``from_pretrained(folder)`` / ``AutoModel.from_pretrained(folder,
        trust_remote_code=True)`` need no ``dam=``). ``include_dam=False`` = :meth:`save_rem`."""
        for k in ("state_dict", "safe_serialization", "is_main_process", "push_to_hub", "max_shard_size"):
            kwargs.pop(k, None)
        d = Path(save_directory)
        if not include_dam:
            return self.save_rem(d)
        self.save_dam(d / DAM_SUBFOLDER)
        self.save_rem(d, dam_name_or_path=DAM_SUBFOLDER)

    # ------------------------------------------------------------------ Hub repo (``hf-dr push``)
    @classmethod
    def save_for_hub(cls, src, out, dam: str | None = None, **options):
        """Load the saved REM folder ``src`` and write the files of its Hub repo to ``out``.
        Returns ``(model, extra card variables)``.

        By default the DAM travels in ``dam/`` so that ``AutoModel.from_pretrained(repo)`` needs
        no ``dam=``; ``dam`` a folder bundles that DAM instead of the REM's own; ``dam`` a Hub id
        writes the REM only, naming that DAM (loading pulls it from the Hub)."""
        local_dam = bool(dam) and Path(dam).is_dir()
        model = cls.from_pretrained(str(src), dam=dam) if local_dam else cls.from_pretrained(str(src))
        if dam and not local_dam:
            model.save_rem(out, dam_name_or_path=dam)
            extra = dict(bundled_dam=False, dam_ref=dam)
        else:
            model.save_pretrained(out)
            extra = dict(bundled_dam=True, dam_ref=DAM_SUBFOLDER)
        extra["dam_signature"] = model.config.dam_signature()
        extra["rem_parameters"] = f"{model.num_rem_parameters():,}"
        return model, extra

    def card_variables(self, info: dict) -> dict:
        """The variables of ``model_cards/ddr_rem.md`` beyond the ones every card gets, from the
        config and ``info`` (the folder's ``train_info.json``, as examples/train_ddr.py writes it)."""
        c = self.config
        return dict(rem_type=c.rem_type, lora_rank=c.lora_rank,
                    lora_targets=", ".join(c.lora_target_modules) if c.use_lora else "none",
                    pa_bottleneck=c.pa_dim() if c.use_pa else "none", pa_scaling=c.pa_scaling,
                    source_dam=info.get("model_name_or_path") or "dam/ (bundled)",
                    train_data=f"`{info['train_data']}`" if info.get("train_data") else "not recorded",
                    objective=info.get("objective", "not recorded"), n_rows=info.get("n_rows", "?"),
                    global_steps=info.get("global_steps", "?"), learning_rate=info.get("learning_rate", "?"),
                    pooling=c.pooling, max_query_length=c.max_query_length, max_doc_length=c.max_doc_length)


class DAMCheckpoint:
    """A DAM published on its own. A DAM is a plain ``*ForMaskedLM`` checkpoint with no class of
    its own: this class only holds the hooks ``hf-dr push`` publishes it with, the same ones
    :class:`DDRModel` has (static here, taking the loaded checkpoint)."""

    @staticmethod
    def save_for_hub(src, out, **options):
        """Load the DAM folder ``src`` and write it (safetensors + tokenizer) to ``out``; ``(model, {})``."""
        model = AutoModelForMaskedLM.from_pretrained(src)
        model.save_pretrained(out, safe_serialization=True)
        AutoTokenizer.from_pretrained(src).save_pretrained(out)
        return model, {}

    @staticmethod
    def card_variables(model, info: dict) -> dict:
        """The variables of ``model_cards/ddr_dam.md``, from ``info`` (the folder's ``dam_info.json``,
        as examples/adapt_dam.py writes it)."""
        mlm = info.get("mlm", {})
        return dict(corpus=info.get("corpus", "?"), role=info.get("role", "target"),
                    n_documents=info.get("n_documents", "?"), learning_rate=info.get("learning_rate", "?"),
                    global_steps=info.get("global_steps", "?"), mlm_probability=mlm.get("mlm_probability", "?"),
                    max_length=mlm.get("max_length", "?"), train_loss=info.get("train_loss"),
                    heldout_before=info.get("heldout_mlm_loss_before"),
                    heldout_after=info.get("heldout_mlm_loss_after"))

    @staticmethod
    def usage_snippet(repo_id: str, **lengths) -> str:
        """Python that loads the published DAM with plain transformers."""
        return (f'from transformers import AutoModelForMaskedLM, AutoTokenizer\n\n'
                f'dam = AutoModelForMaskedLM.from_pretrained("{repo_id}")\n'
                f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}")\n'
                f'batch = tokenizer(["Fever is a [MASK] of infection."], return_tensors="pt")\n'
                f'print(dam(**batch).logits.shape)\n')


def _ffn_output_modules(base_model: nn.Module) -> list[nn.Module]:
    """The FFN output module of every layer of a BERT-family encoder (BERT, RoBERTa,
    ELECTRA, XLM-R, MiniLM...): ``encoder.layer[i].output``."""
    layers = getattr(getattr(base_model, "encoder", None), "layer", None)
    if layers is None or not all(hasattr(layer, "output") and hasattr(layer, "intermediate") for layer in layers):
        raise ValueError(f"DDR's parallel adapter supports BERT-family encoders (encoder.layer[i].intermediate/"
                         f"output); {type(base_model).__name__} is not one. Use rem_type='lora' for other backbones.")
    return [layer.output for layer in layers]


def _check_dam(config: DDRConfig, dam_config, name) -> None:
    want = config.dam_signature()
    got = {k: getattr(dam_config, k, None) for k in want}
    diff = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
    if diff:
        details = ", ".join(f"{k}: REM expects {a}, DAM has {b}" for k, (a, b) in diff.items())
        raise DAMMismatchError(f"DAM {name} does not fit this REM ({details})")


DDRConfig.register_for_auto_class()
DDRModel.register_for_auto_class("AutoModel")
