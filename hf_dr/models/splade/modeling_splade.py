"""SPLADECAI: SPLADE (Formal et al. 2021) with CAI — Combination of AdaLM and IDF
(papers/003). Self-contained (torch + transformers, relative imports) so a saved folder
loads with ``AutoModel.from_pretrained(dir, trust_remote_code=True)`` without hf-dr.

Eq. 2-3: ``s = max_i log(1 + ReLU(MLM_logits_i))`` over the (unmasked) tokens. Since
``log(1 + ReLU(x))`` is monotone, the max is taken over the raw logits first and the
saturation applied to ``[batch, |V|]`` only — the ``[batch, length, |V|]`` tensor is never
transformed. Eq. 6-7: documents are multiplied by IDF weights fitted on the target corpus.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import nn
from transformers import AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel

from .configuration_splade import SPLADECAIConfig

try:  # the shared encode loop of hf-dr, when installed
    from hf_dr.encoding import EncoderMixin
except ImportError:  # loaded from the Hub without hf-dr: forward() is the whole model
    class EncoderMixin:  # type: ignore[no-redef]
        pass

__all__ = ["SPLADECAI", "splade_pool"]


def splade_pool(logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Eq. 3 over ``[B, L, |V|]`` logits: masked max over the sequence, then ``log1p(relu)``.

    Padding positions are excluded; max-then-saturate equals saturate-then-max because
    ``log1p(relu(.))`` is monotone non-decreasing. In inference the mask is written into
    ``logits`` in place, so no second ``[B, L, |V|]`` tensor is allocated.
    """
    pad = (attention_mask == 0).unsqueeze(-1)
    if logits.requires_grad:
        logits = logits.masked_fill(pad, torch.finfo(logits.dtype).min)
    else:
        logits = logits.masked_fill_(pad, torch.finfo(logits.dtype).min)
    return torch.log1p(torch.relu(logits.amax(dim=1)))


def _projection_dtype(x: torch.Tensor, w: torch.Tensor) -> torch.dtype:
    """The projection's dtype, not ``x``'s: under autocast LayerNorm may hand over float32 (CUDA
    does) while the matmul runs in bf16 / fp16; the maxima and the padding fill are in that dtype."""
    if torch.is_autocast_enabled(x.device.type) and x.dtype.is_floating_point:
        return torch.get_autocast_dtype(x.device.type)
    return torch.promote_types(x.dtype, w.dtype)


def _blocked_max(x: torch.Tensor, w: torch.Tensor, pad: torch.Tensor, block: int, out: torch.Tensor,
                 idx: torch.Tensor | None = None) -> None:
    """``out[:, s:s+block] = max over positions of x @ w[s:s+block].T`` for the whole padded batch
    (``pad`` ``[B, L, 1]``: True where masked), one vocabulary block at a time, in ``out``'s dtype;
    with ``idx``, the positions of the maxima too."""
    low = torch.finfo(out.dtype).min
    # on the CPU the padded positions are found once and set by index in each block (a masked fill
    # reads every logit); on a GPU the fill, which needs no host sync to find them
    at = None if x.is_cuda else pad[..., 0].nonzero(as_tuple=True)
    for s in range(0, w.shape[0], block):
        lg = torch.matmul(x, w[s:s + block].to(out.dtype).t())
        if at is None:
            lg.masked_fill_(pad, low)
        elif len(at[0]):
            lg[at] = low
        if idx is None:
            torch.amax(lg, dim=1, out=out[:, s:s + block])
        else:
            torch.max(lg, dim=1, out=(out[:, s:s + block], idx[:, s:s + block]))


class _MaxPooledProjection(torch.autograd.Function):
    """``max over the unmasked positions of x @ w.T`` (``[B, L, H]`` x ``[V, H]`` -> ``[B, V]``) for
    training, without the ``[B, L, |V|]`` logits: the forward projects ``block`` vocabulary rows at
    a time and keeps, per document and term, the maximum and the position it came from; the
    backward sends each term's gradient to that one position (the gradient of a max), so it costs
    ``B x |V| x H`` instead of the dense projection's ``B x L x |V| x H`` twice. The gradient is
    the dense path's (``splade_pool`` over the full logits) up to ties between positions, which the
    dense path splits and this one gives to one position. The backward runs in float32."""

    @staticmethod
    def forward(ctx, x, w, mask, block: int, dt):
        B, V = x.shape[0], w.shape[0]
        out = torch.empty(B, V, dtype=dt, device=x.device)
        idx = torch.empty(B, V, dtype=torch.long, device=x.device)
        with torch.autocast(x.device.type, enabled=False):
            _blocked_max(x.to(dt), w, ~mask.unsqueeze(-1), block, out, idx)
        ctx.save_for_backward(x, w, idx)
        ctx.block = block
        return out

    @staticmethod
    def backward(ctx, g):
        x, w, idx = ctx.saved_tensors
        H, V, blk = x.shape[-1], w.shape[0], ctx.block
        gf, xf, wf = g.float(), x.float(), w.float()
        gx = torch.zeros(x.shape, dtype=torch.float32, device=x.device) if ctx.needs_input_grad[0] else None
        gw = torch.empty(w.shape, dtype=torch.float32, device=w.device) if ctx.needs_input_grad[1] else None
        for s in range(0, V, blk):
            e = min(V, s + blk)
            at = idx[:, s:e].unsqueeze(-1).expand(-1, -1, H)  # the position each term's maximum came from
            gs = gf[:, s:e].unsqueeze(-1)
            if gw is not None:
                gw[s:e] = (gs * xf.gather(1, at)).sum(0)
            if gx is not None:
                gx.scatter_add_(1, at, gs * wf[s:e].unsqueeze(0))
        return (gx.to(x.dtype) if gx is not None else None, gw.to(w.dtype) if gw is not None else None,
                None, None, None)


def _tile_groups(lengths: list[int], rows: int) -> list[tuple[int, int]]:
    """Consecutive ``[i, j)`` groups of documents whose count times their longest length stays within
    ``rows`` (a longer document is a group of its own)."""
    out, i = [], 0
    while i < len(lengths):
        j, longest = i + 1, lengths[i]
        while j < len(lengths) and max(longest, lengths[j]) * (j - i + 1) <= rows:
            longest = max(longest, lengths[j])
            j += 1
        out.append((i, j))
        i = j
    return out


class _MaxPooledDecoder:
    """Temporarily turns the MLM head's output projection (``get_output_embeddings()``) into
    "project and max-pool over the sequence". The ``[batch, length, |V|]`` logits never exist.
    For inference, each document's real (unpadded) positions are projected onto ``block``
    vocabulary rows at a time and reduced at once into the output, so every logits tile
    ``[length, block]`` stays in cache. The projection is the same FLOPs on fewer (unpadded)
    positions, but the tensor SPLADE normally writes and re-reads — several GB for a batch of
    32 x 512 tokens — is gone, which is where a small backbone's time goes (measured 2.6x faster
    than the full projection on 2 CPU cores). With autograd (training), :class:`_MaxPooledProjection`
    does the same over the padded batch and keeps the positions of the maxima for its backward.
    The bias is constant over positions, so it is added after the max. The head then returns
    ``[batch, 1, |V|]`` masked maxima; a document without any unmasked position gets the dtype's
    minimum (weight 0)."""

    #: on the CPU, positions projected together (a group of short documents padded to its longest, or
    #: one longer document alone): one product of at most ``TILE_ROWS x block`` per vocabulary block.
    #: A product per 12-word document was 2.3x slower (one thread); groups of 1,024 rows were slower
    #: for 256-token documents than one document at a time
    TILE_ROWS = 256

    def __init__(self, decoder: nn.Module, attention_mask: torch.Tensor, block: int, batched: bool | None = None):
        self.decoder, self.mask, self.block, self.batched = decoder, attention_mask.bool(), block, batched

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.decoder.weight, self.decoder.bias
        V, blk = w.shape[0], self.block
        dt = _projection_dtype(x, w)
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
            out = _MaxPooledProjection.apply(x, w, self.mask, blk, dt)
            return (out + b.to(dt) if b is not None else out).unsqueeze(1)
        low = torch.finfo(dt).min
        out = torch.full((x.shape[0], V), low, dtype=dt, device=x.device)
        if x.is_cuda if self.batched is None else self.batched:  # GPU: one big launch per block, whole batch
            _blocked_max(x, w, ~self.mask.unsqueeze(-1), blk, out)
        else:  # CPU: documents in groups of about TILE_ROWS positions, each group's tile kept in cache
            for i, j in _tile_groups(self.mask.sum(1).tolist(), self.TILE_ROWS):
                if j - i == 1:  # a long document alone: its real positions only
                    xi = x[i][self.mask[i]]
                    if xi.shape[0] == 0:
                        continue
                    for s in range(0, V, blk):
                        torch.amax(torch.mm(xi, w[s:s + blk].t()), dim=0, out=out[i, s:s + blk])
                else:  # short documents together: one product per block for the group (padded to its longest)
                    cols = self.mask[i:j].any(0)
                    _blocked_max(x[i:j][:, cols], w, ~self.mask[i:j][:, cols].unsqueeze(-1), blk, out[i:j])
        if b is not None:  # an empty document stays at ~min: log1p(relu(.)) gives it 0 everywhere
            out += b
        return out.unsqueeze(1)

    def __enter__(self):
        self.decoder.forward = self
        return self

    def __exit__(self, *exc):
        del self.decoder.forward  # back to the class's forward


class SPLADECAI(EncoderMixin, PreTrainedModel):
    """SPLADE over any ``*ForMaskedLM`` backbone, with an IDF vector in its saved state.

    ``forward(input_ids, attention_mask, is_query)`` returns ``[B, |V|]`` term weights
    (dense tensor, for training); ``encode_queries`` / ``encode_corpus`` return CSR.
    """

    config_class = SPLADECAIConfig
    base_model_prefix = "splade"
    output_is_sparse = True
    _no_split_modules: list[str] = []
    _supports_sdpa = True  # attention is the backbone's: let it keep SDPA / flash attention
    _supports_flash_attn = True
    _supports_attention_backend = True

    def __init__(self, config: SPLADECAIConfig, mlm: nn.Module | None = None):
        super().__init__(config)
        self.mlm = mlm if mlm is not None else AutoModelForMaskedLM.from_config(config.backbone_config)
        self.register_buffer("idf", torch.ones(config.backbone_config.vocab_size), persistent=True)
        self.tokenizer = None
        self.post_init()

    def _init_weights(self, module):  # the backbone initialises itself; the idf buffer starts at 1
        pass

    def get_input_embeddings(self):
        return self.mlm.get_input_embeddings()

    @classmethod
    def from_backbone(cls, path_or_id: str, tokenizer=None, **config_kwargs) -> SPLADECAI:
        """Wrap an MLM checkpoint (e.g. ``naver/splade-cocondenser-ensembledistil`` or a
        folder) as SPLADE; ``config_kwargs`` set :class:`SPLADECAIConfig` fields."""
        mlm = AutoModelForMaskedLM.from_pretrained(str(path_or_id))
        attn = mlm.config._attn_implementation
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(path_or_id))
        if len(tokenizer) > mlm.config.vocab_size:
            raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary {mlm.config.vocab_size}: "
                             "resize the model (hf_dr.adaptation.vocabulary) or pass the matching tokenizer")
        config = SPLADECAIConfig(backbone_config=mlm.config, **config_kwargs)
        model = cls(config, mlm=mlm)
        model.tokenizer = tokenizer
        if attn and model.mlm.config._attn_implementation != attn:
            model.mlm.set_attn_implementation(attn)
        return model.eval()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        try:
            model.tokenizer = AutoTokenizer.from_pretrained(pretrained_model_name_or_path, trust_remote_code=False,
                                                            config=model.config.backbone_config)
        except (OSError, ValueError):
            model.tokenizer = None
        prompts = getattr(model.config, "prompts", None)  # the prompts hf-dr's encodings prepend
        if isinstance(prompts, dict):
            model.query_prefix, model.doc_prefix = prompts.get("query") or "", prompts.get("document") or ""
        return model

    def save_pretrained(self, save_directory, *args, **kwargs):
        # auto_map in config.json + the code files beside the weights: trust_remote_code loading
        self.register_for_auto_class("AutoModel")
        self.config.register_for_auto_class()
        q, d = getattr(self, "query_prefix", None) or "", getattr(self, "doc_prefix", None) or ""
        if q or d:  # the model's prompts (hf-dr adapt --query-prompt ...) travel in its config
            self.config.prompts = {"query": q, "document": d}
        elif hasattr(self.config, "prompts"):
            del self.config.prompts
        # a local backbone folder is recorded by its name only: no local path in config.json
        bb = getattr(self.config, "backbone_config", None)
        old_path = getattr(bb, "_name_or_path", None) if bb is not None else None
        if old_path and os.path.exists(str(old_path)):
            bb._name_or_path = os.path.basename(os.path.abspath(str(old_path)))
        try:
            super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            if old_path is not None:
                bb._name_or_path = old_path
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory)
        if kwargs.get("is_main_process", True):
            self._write_sentence_transformers_modules(save_directory)

    def _write_sentence_transformers_modules(self, out) -> None:
        """The folder is also a Sentence Transformers ``SparseEncoder`` folder (its root weights as two
        shards, ``mlm.*`` and ``idf``: :func:`hf_dr.models.st_folder.write_splade_modules`), or says in
        one sentence why not. hf-dr writes it (a Hub user re-saving without hf-dr gets the
        ``trust_remote_code`` folder only). ``self._st_unsupported``: that sentence, or ``None``."""
        try:
            from hf_dr.models.st_folder import write_splade_modules, write_unsupported
        except ImportError:
            return
        if not any(os.path.exists(os.path.join(out, f)) for f in ("model.safetensors", "model.safetensors.index.json")):
            why = "its weights were not saved as safetensors"
        else:
            why = write_splade_modules(out, self)
        self._st_unsupported = why
        if why:
            write_unsupported(out, why)

    # ------------------------------------------------------------------ Hub repo (``hf-dr push``)
    @classmethod
    def save_for_hub(cls, src, out, **options):
        """Load the saved folder ``src`` and write its Hub repo to ``out``: the ``trust_remote_code``
        folder of :meth:`save_pretrained` (weights in two shards, ``mlm.*`` and ``idf``), which is also
        a Sentence Transformers ``SparseEncoder`` folder (:func:`hf_dr.models.st_folder.write_splade_modules`;
        needs hf-dr). Returns ``(model, {"st_unsupported": why})`` (``None`` when expressed)."""
        model = cls.from_pretrained(str(src))
        model.save_pretrained(out, safe_serialization=True)
        return model, {"st_unsupported": getattr(model, "_st_unsupported", None)}

    def card_variables(self, info: dict) -> dict:
        """The variables of ``model_cards/splade_cai.md`` beyond the ones every card gets."""
        return dict(vocab_size=f"{self.config.vocab_size:,}")

    # -- Eq. 6: IDF on the target corpus, with the model's own tokenizer --------------------
    def fit_idf(self, docs: Sequence[str], tokenizer=None, batch_size: int = 1000,
                enable: bool = True) -> torch.Tensor:
        """Compute Eq. 6, ``w_t = log(N / N_t)`` (``1`` where ``N_t = 0``), over ``docs``
        (document texts: title + " " + text), store it in the ``idf`` buffer (saved with
        the model) and, with ``enable``, weight documents by it from now on (Eq. 7)."""
        tokenizer = tokenizer or self.tokenizer
        if tokenizer is None:
            raise ValueError("fit_idf needs the model's tokenizer")
        docs = [d if isinstance(d, str) else (d.get("title", "") + " " + d.get("text", "")).strip() for d in docs]
        if not docs:
            raise ValueError("cannot fit IDF on an empty corpus")
        V = self.config.backbone_config.vocab_size
        df = torch.zeros(V, dtype=torch.float64)
        special = set(tokenizer.all_special_ids)
        for s in range(0, len(docs), batch_size):
            ids = tokenizer(docs[s:s + batch_size], add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
            for row in ids:
                uniq = torch.tensor(sorted(set(row) - special), dtype=torch.long)
                if len(uniq) and int(uniq.max()) >= V:
                    raise ValueError(f"the tokenizer produced id {int(uniq.max())} but the model has {V} tokens: "
                                     "tokenizer and model vocabularies do not match")
                df[uniq] += 1
        n = float(len(docs))
        idf = torch.where(df > 0, torch.log(n / df.clamp(min=1)), torch.ones_like(df))
        self.idf.copy_(idf.to(self.idf.dtype))
        self.config.use_idf = bool(enable)
        return self.idf

    # -- Eq. 1-5, 7 ----------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, is_query: bool = False,
                **kwargs) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if is_query and self.config.query_mode == "bow":
            return self.bag_of_words(input_ids, attention_mask)
        decoder = self.mlm.get_output_embeddings()
        block = getattr(self.config, "pool_vocab_block", 0)
        if block and isinstance(decoder, nn.Linear):
            with _MaxPooledDecoder(decoder, attention_mask, block):
                pooled = self.mlm(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0]
            s = torch.log1p(torch.relu(pooled))  # Eq. 3 on [B, |V|] only
        else:
            s = splade_pool(self.mlm(input_ids=input_ids, attention_mask=attention_mask).logits, attention_mask)
        if not is_query and self.config.use_idf:
            s = s * self.idf_weights().to(s.dtype)
        return s

    def idf_weights(self) -> torch.Tensor:
        """``idf ** idf_exponent`` (Eq. 7 with exponent 1; sqrt(IDF) with 0.5)."""
        e = self.config.idf_exponent
        return self.idf if e == 1.0 else self.idf.clamp(min=0) ** e

    def bag_of_words(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """SPLADE-Doc query (Eq. 5): 1 for every token of the query (special tokens and
        padding excluded), so the score is the sum of the document's weights of those tokens."""
        V = self.config.backbone_config.vocab_size
        keep = attention_mask.bool()
        specials = [i for i in (self.config.backbone_config.pad_token_id, getattr(self.tokenizer, "cls_token_id", None),
                                getattr(self.tokenizer, "sep_token_id", None)) if i is not None]
        for i in specials:
            keep &= input_ids != i
        out = torch.zeros(input_ids.shape[0], V, device=input_ids.device, dtype=torch.float32)
        # amax-scatter: repeated tokens count once, dropped positions (value 0) never erase a 1
        return out.scatter_reduce_(1, input_ids, keep.float(), reduce="amax")
