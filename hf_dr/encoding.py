"""The one encode loop of hf-dr.

Every encoder of the suite (the generic :class:`DenseEncoder` baseline, ``BERMEncoder``,
``DDRModel``, ``SPLADECAI``) turns text into vectors through :func:`encode`:

* the whole input is tokenised once by the fast tokenizer (no padding), then sorted by
  token length so that each batch pads as little as possible; results are restored to
  input order at the end;
* batches run under ``torch.inference_mode`` (and autocast to fp16/bf16 on GPU when asked);
* dense outputs stay on the device until the loop ends (no per-batch host sync), then
  come back as one ``float32`` array; sparse outputs come back as ``scipy.sparse.csr_matrix``;
* a tqdm progress bar shows documents, not batches.

Models take part by inheriting :class:`EncoderMixin`; their ``forward(input_ids,
attention_mask, is_query=...)`` returns the embeddings ``[batch, dim]`` (a Tensor, or a
``ModelOutput`` with an ``embeddings`` field). Training calls the same ``forward`` (through
DDP when distributed), so there is one code path from training to inference.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

__all__ = ["encode", "EncoderMixin", "doc_to_text", "resolve_device", "embed"]


def embed(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, is_query: bool, **kwargs) -> torch.Tensor:
    """Run ``model``'s forward (DDP-wrapped or not) and return its embeddings tensor."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, is_query=is_query, **kwargs)
    return out if isinstance(out, torch.Tensor) else out.embeddings


def doc_to_text(doc: Mapping[str, Any] | str, sep: str = " ") -> str:
    """BEIR's document text: ``title + " " + text``, stripped (plain strings pass through)."""
    if isinstance(doc, str):
        return doc
    title = doc.get("title") or ""
    text = doc.get("text") or ""
    return (title + sep + text).strip()


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(device)


def _autocast(device: torch.device, dtype: str | torch.dtype | None):
    """fp16/bf16 autocast on GPU; ``"auto"`` picks bf16 where supported, fp32 on CPU."""
    if dtype in (None, "float32", torch.float32) or device.type == "cpu":
        return contextlib.nullcontext()
    if dtype == "auto":
        if device.type != "cuda":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if isinstance(dtype, str):
        dtype = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
                 "float16": torch.float16}[dtype]
    return torch.autocast(device_type=device.type, dtype=dtype)


def encode(
    texts: Sequence[str],
    tokenizer,
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    batch_size: int = 32,
    max_length: int | None = 512,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = "auto",
    sparse: bool = False,
    show_progress_bar: bool | None = None,
    desc: str = "Encoding",
    convert_to: str = "numpy",
    tokenizer_kwargs: Mapping[str, Any] | None = None,
):
    """Encode ``texts`` with ``forward(input_ids, attention_mask) -> [batch, dim]``.

    Returns ``np.ndarray[float32, (n, dim)]`` (``convert_to="numpy"``), a CPU
    ``torch.Tensor`` (``"torch"``), or, with ``sparse=True``, a
    ``scipy.sparse.csr_matrix (n, dim)`` built without a dense round trip of the corpus.
    """
    if isinstance(texts, str):
        raise TypeError("encode() takes a list of strings, not a single string")
    texts = list(texts)
    device = resolve_device(device)
    if len(texts) == 0:
        raise ValueError("nothing to encode: the input list is empty")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"input {i} is {type(t).__name__}, expected str")
    if show_progress_bar is None:
        show_progress_bar = len(texts) > 4 * batch_size

    tok = tokenizer(texts, truncation=max_length is not None, max_length=max_length,
                    padding=False, return_attention_mask=False, **(tokenizer_kwargs or {}))
    ids = tok["input_ids"]
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    order = np.argsort(-lengths, kind="stable")  # longest first: OOM shows up at once
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    outputs: list[torch.Tensor] = []
    with torch.inference_mode(), _autocast(device, dtype), tqdm(
        total=len(texts), desc=desc, unit="doc", disable=not show_progress_bar
    ) as bar:
        for start in range(0, len(texts), batch_size):
            idx = order[start:start + batch_size]
            width = int(lengths[idx[0]])
            batch_ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, j in enumerate(idx):
                n = int(lengths[j])
                batch_ids[row, :n] = torch.as_tensor(ids[j], dtype=torch.long)
                mask[row, :n] = 1
            out = forward(batch_ids.to(device, non_blocking=True), mask.to(device, non_blocking=True))
            if sparse:
                with warnings.catch_warnings():  # "sparse CSR support is in beta"
                    warnings.simplefilter("ignore", UserWarning)
                    out = out.float().to_sparse_csr()
            outputs.append(out)
            bar.update(len(idx))

    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    if sparse:
        blocks = []
        for out in outputs:
            out = out.cpu()
            blocks.append(sp.csr_matrix(
                (out.values().numpy(), out.col_indices().numpy(), out.crow_indices().numpy()),
                shape=tuple(out.shape)))
        mat = sp.vstack(blocks, format="csr")[inverse]
        mat.sort_indices()
        return mat.astype(np.float32)
    result = torch.cat(outputs, dim=0).float()[torch.as_tensor(inverse, device=outputs[0].device)].cpu()
    if convert_to == "torch":
        return result
    return result.numpy()


class EncoderMixin:
    """``encode_queries`` / ``encode_corpus`` for a model whose
    ``forward(input_ids, attention_mask, is_query)`` returns embeddings (see :func:`embed`).

    The model must have a ``tokenizer`` attribute (or pass ``tokenizer=``). Optional
    attributes: ``output_is_sparse`` (bool), ``max_query_length`` / ``max_doc_length``
    (or ``config.max_query_length`` / ``config.max_doc_length``), ``query_prefix`` /
    ``doc_prefix``.
    """

    output_is_sparse: bool = False

    def _encode_texts(self, texts, *, is_query: bool, batch_size=32, max_length=None,
                      show_progress_bar=None, device=None, dtype="auto", convert_to="numpy",
                      tokenizer=None):
        tokenizer = tokenizer or getattr(self, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(f"{type(self).__name__} has no tokenizer: pass tokenizer=... or set model.tokenizer")
        cfg = getattr(self, "config", None)
        key = "max_query_length" if is_query else "max_doc_length"
        if max_length is None:
            max_length = getattr(self, key, None) or getattr(cfg, key, None) or 512
        # never past the backbone's position embeddings (a clear cap, not an index error)
        limit = getattr(getattr(cfg, "backbone_config", None), "max_position_embeddings", None) \
            or getattr(cfg, "max_position_embeddings", None)
        tok_limit = getattr(tokenizer, "model_max_length", None)
        if tok_limit and tok_limit < 100_000:  # tokenizers without a limit report ~1e30
            limit = min(limit, tok_limit) if limit else tok_limit
        if limit and max_length > limit:
            max_length = limit
        prefix = getattr(self, "query_prefix" if is_query else "doc_prefix", None) or ""
        if prefix:
            texts = [prefix + t for t in texts]
        if device is not None and isinstance(self, torch.nn.Module):
            self.to(resolve_device(device))
        dev = device
        if dev is None and isinstance(self, torch.nn.Module):
            p = next(self.parameters(), None)
            dev = p.device if p is not None else None
        was_training = getattr(self, "training", False)
        if isinstance(self, torch.nn.Module):
            self.eval()
        try:
            return encode(
                texts, tokenizer,
                lambda ids, mask: embed(self, ids, mask, is_query),
                batch_size=batch_size, max_length=max_length, device=dev, dtype=dtype,
                sparse=self.output_is_sparse, show_progress_bar=show_progress_bar,
                desc="Encoding queries" if is_query else "Encoding corpus", convert_to=convert_to)
        finally:
            if was_training:
                self.train()

    def encode_queries(self, queries: Sequence[str], **kwargs):
        """Queries -> float32 ``[n, d]`` (dense models) or CSR ``[n, |V|]`` (sparse models)."""
        return self._encode_texts(list(queries), is_query=True, **kwargs)

    def encode_corpus(self, corpus: Sequence[Mapping[str, Any] | str], **kwargs):
        """Documents (``str`` or BEIR dicts with title/text) -> ``[n, d]`` / CSR ``[n, |V|]``."""
        return self._encode_texts([doc_to_text(d) for d in corpus], is_query=False, **kwargs)
