"""The one encode loop of hf-dr.

Every encoder of the suite (the generic :class:`DenseEncoder` baseline, ``BERMEncoder``,
``DDRModel``, ``SPLADECAI``) turns text into vectors through :func:`encode`:

* the input is read lazily, ``chunk_size`` texts at a time (:func:`iter_encode`), so memory
  holds one chunk's tokens and outputs whatever the corpus size: a corpus of millions of
  documents streams through it (:mod:`hf_dr.embeddings` writes each chunk as a shard);
* each chunk is tokenised once by the fast tokenizer (no padding), then sorted by token
  length so that each batch pads as little as possible; results are restored to input order;
* batches run under ``torch.inference_mode`` and the autocast of ``dtype`` (:mod:`hf_dr.precision`:
  ``auto`` = bf16/fp16 on a CUDA GPU, fp32 on CPU; an explicit ``bf16`` / ``fp16`` on any device);
* dense outputs stay on the device until the chunk ends (no per-batch host sync), then
  come back as ``float32``; sparse outputs come back as ``scipy.sparse.csr_matrix``;
* a tqdm progress bar shows documents, not batches;
* nothing is cut unseen: texts longer than ``max_length`` tokens are truncated to it, and the loop
  says how many were and by how much (:class:`LengthReport`: a warning per encoding, the same one
  not repeated in a process; ``hf-dr ingest`` makes passages that fit instead).

Models take part by inheriting :class:`EncoderMixin`; their ``forward(input_ids,
attention_mask, is_query=...)`` returns the embeddings ``[batch, dim]`` (a Tensor, or a
``ModelOutput`` with an ``embeddings`` field). Training calls the same ``forward`` (through
DDP when distributed), so there is one code path from training to inference.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import logging
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from .devices import encode_device, resolve_device

logger = logging.getLogger(__name__)

__all__ = ["LengthReport", "reset_length_reports", "one_length_report", "encode", "iter_encode", "concat_blocks", "EncoderMixin",
           "doc_to_text", "model_similarity", "embed", "DEFAULT_CHUNK_SIZE", "st_prompts", "apply_prompts"]

#: texts tokenised and encoded at a time (and the rows of one shard of an embeddings folder)
DEFAULT_CHUNK_SIZE = 8192


class LengthReport:
    """What an encoding did with texts longer than its max length: ``texts`` encoded, ``overflow``
    (for each text over the limit, how many tokens beyond it were cut)."""

    def __init__(self, what: str, max_length: int | None, tokenizer=None):
        self.what, self.max_length, self.texts, self.overflow = what, max_length, 0, []
        self.model = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)

    @property
    def over(self) -> int:
        return len(self.overflow)

    def percentile(self, q: float = 95) -> int:
        """The ``q``-th percentile of the overflow of the texts over the limit (0 when none is)."""
        return int(np.percentile(self.overflow, q, method="higher")) if self.overflow else 0

    def to_dict(self) -> dict:
        return {"texts": self.texts, "over_max_length": self.over, "max_length": self.max_length,
                "overflow_p95": self.percentile(95), "overflow_max": max(self.overflow, default=0),
                "action": "truncated"}

    def message(self) -> str:
        what = self.what.removeprefix("Encoding ").strip() or "texts"
        return (f"{what}: {self.over:,} of {self.texts:,} texts ({100 * self.over / max(self.texts, 1):.1f}%) are longer "
                f"than the max length of {self.max_length} tokens ({self.percentile(95):,} tokens beyond it at the 95th "
                f"percentile, {max(self.overflow):,} at most): truncated to {self.max_length}, the rest is not read. "
                "hf-dr ingest splits documents into passages that fit (docs/ingest.md)")


_REPORTED: set[tuple] = set()
_SCOPE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("hf_dr_length_scope", default=None)


def reset_length_reports() -> None:
    """Warn again about truncation already reported in this process (tests)."""
    _REPORTED.clear()


def _report_lengths(report: LengthReport) -> None:
    """A warning the first time a kind of text (corpus / queries) is truncated in this process at a max
    length, by these amounts; the same again (a dev set at each checkpoint, whose tokenizer is the
    start's under another path) at debug level: the message does not name the model, so a repeat says
    nothing new.
    Inside :func:`one_length_report`, the reports are joined and said once, when it ends."""
    scope = _SCOPE.get()
    if scope is not None:
        joined = scope.setdefault((report.what, report.model, report.max_length), report)
        if joined is not report:
            joined.texts += report.texts
            joined.overflow += report.overflow
        return
    if not report.over:
        return
    key = (report.what, report.max_length, report.texts, report.over, report.percentile(95), max(report.overflow))
    logger.log(logging.DEBUG if key in _REPORTED else logging.WARNING, "%s", report.message())
    _REPORTED.add(key)


@contextlib.contextmanager
def one_length_report():
    """Encodings inside are reported as one (per kind of text): e.g. a dev set encoded in chunks."""
    token = _SCOPE.set({})
    try:
        yield
    finally:
        reports = _SCOPE.get()
        _SCOPE.reset(token)
        for r in reports.values():
            _report_lengths(r)


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


def _autocast(device: torch.device, dtype: str | torch.dtype | None):
    """The autocast context of ``dtype`` (:func:`hf_dr.precision.autocast`: ``auto`` = bf16 / fp16 on a
    CUDA GPU, fp32 on CPU / MPS; an explicit ``bf16`` / ``fp16`` autocasts on every device, the CPU too)."""
    from .precision import autocast

    return autocast(device, dtype)


def iter_encode(
    texts: Iterable[str],
    tokenizer,
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    batch_size: int = 32,
    max_length: int | None = 512,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = "auto",
    sparse: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    show_progress_bar: bool | None = None,
    total: int | None = None,
    desc: str = "Encoding",
    convert_to: str = "numpy",
    tokenizer_kwargs: Mapping[str, Any] | None = None,
) -> Iterator:
    """Encode ``texts`` (any iterable, read lazily) chunk by chunk; yield one output block per
    ``chunk_size`` texts, in input order: ``np.ndarray[float32, (c, dim)]`` (``"numpy"``), a CPU
    ``torch.Tensor`` (``"torch"``), or with ``sparse=True`` a ``scipy.sparse.csr_matrix (c, dim)``.

    Memory holds one chunk's tokens and outputs, whatever the corpus size. Within a chunk the
    texts are length-sorted so that each batch pads as little as possible (longest batch first:
    an out-of-memory error shows up at once)."""
    if isinstance(texts, str):
        raise TypeError("encode() takes a list of strings, not a single string")
    if chunk_size < 1 or batch_size < 1:
        raise ValueError(f"chunk_size and batch_size must be at least 1 (got {chunk_size}, {batch_size})")
    device = resolve_device(device)
    if total is None and hasattr(texts, "__len__"):
        total = len(texts)
    if show_progress_bar is None:
        show_progress_bar = total is None or total > 4 * batch_size
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    it = iter(texts)
    seen = 0
    lengths = LengthReport(desc, max_length, tokenizer)
    try:
        with tqdm(total=total, desc=desc, unit="doc", disable=not show_progress_bar) as bar:
            while True:
                chunk = list(itertools.islice(it, chunk_size))
                if not chunk:
                    break
                for i, t in enumerate(chunk):
                    if not isinstance(t, str):
                        raise TypeError(f"input {seen + i} is {type(t).__name__}, expected str")
                seen += len(chunk)
                # inference mode / autocast per chunk: never left on while the caller runs between yields
                with torch.inference_mode(), _autocast(device, dtype):
                    block = _encode_chunk(chunk, tokenizer, forward, pad_id, batch_size, max_length, device, sparse,
                                          convert_to, tokenizer_kwargs, bar, lengths)
                yield block
    finally:  # also when the caller stops reading after the last block it wanted (zip over shards)
        if lengths.texts:
            _report_lengths(lengths)
    if seen == 0:
        raise ValueError("nothing to encode: the input is empty")


def _tokenize(texts, tokenizer, max_length, tokenizer_kwargs, report: LengthReport) -> list[list[int]]:
    """The ids of ``texts``, truncated to ``max_length``; counted in ``report``: the texts, and for each text
    truncation cut, by how many tokens. A fast tokenizer tokenises a text whole before it truncates, and
    returns what it cut as overflow rows (stride 0): one pass gives both. Another tokenizer: the texts
    that reached the limit are tokenised a second time, whole."""
    report.texts += len(texts)
    kw = dict(truncation=max_length is not None, max_length=max_length, padding=False, return_attention_mask=False,
              **(tokenizer_kwargs or {}))
    if max_length is None:
        return tokenizer(texts, **kw)["input_ids"]
    if getattr(tokenizer, "is_fast", False):
        tok = tokenizer(texts, return_overflowing_tokens=True, stride=0, **kw)
        rows, of = tok["input_ids"], tok.get("overflow_to_sample_mapping")
        if of is not None:
            special = tokenizer.num_special_tokens_to_add(pair=False)  # each overflow row has them too
            ids: list = [None] * len(texts)
            cut = [0] * len(texts)
            for row, i in zip(rows, of):
                if ids[i] is None:
                    ids[i] = row
                else:
                    cut[i] += len(row) - special
            report.overflow += [c for c in cut if c > 0]
            return ids
    ids = tokenizer(texts, **kw)["input_ids"]
    full = [i for i, x in enumerate(ids) if len(x) >= max_length]
    if full:
        whole = tokenizer([texts[i] for i in full], truncation=False, padding=False, return_attention_mask=False,
                          verbose=False, **(tokenizer_kwargs or {}))["input_ids"]
        report.overflow += [len(x) - max_length for x in whole if len(x) > max_length]
    return ids


def _encode_chunk(texts, tokenizer, forward, pad_id, batch_size, max_length, device, sparse, convert_to,
                  tokenizer_kwargs, bar, report: LengthReport):
    ids = _tokenize(texts, tokenizer, max_length, tokenizer_kwargs, report)
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    order = np.argsort(-lengths, kind="stable")
    outputs: list[torch.Tensor] = []
    for start in range(0, len(texts), batch_size):
        idx = order[start:start + batch_size]
        width = int(lengths[idx[0]])
        batch_ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, j in enumerate(idx):
            n = int(lengths[j])
            batch_ids[row, :n] = torch.as_tensor(ids[j], dtype=torch.long)
            mask[row, :n] = 1
        # dense outputs stay on the device until the chunk ends (no per-batch host sync)
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
    return result if convert_to == "torch" else result.numpy()


def encode(texts: Sequence[str], tokenizer, forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
           **kwargs):
    """Encode ``texts`` with ``forward(input_ids, attention_mask) -> [batch, dim]`` (keyword
    arguments: :func:`iter_encode`'s) and return the whole output: ``np.ndarray[float32, (n, dim)]``,
    a CPU ``torch.Tensor`` (``convert_to="torch"``), or with ``sparse=True`` a
    ``scipy.sparse.csr_matrix (n, dim)`` built without a dense round trip of the corpus."""
    if isinstance(texts, str):
        raise TypeError("encode() takes a list of strings, not a single string")
    return concat_blocks(list(iter_encode(texts, tokenizer, forward, **kwargs)))


def concat_blocks(blocks: list):
    """Join the blocks of :func:`iter_encode` (arrays, tensors or CSR matrices) into one."""
    if len(blocks) == 1:
        return blocks[0]
    if sp.issparse(blocks[0]):
        return sp.vstack(blocks, format="csr")
    if isinstance(blocks[0], torch.Tensor):
        return torch.cat(blocks)
    return np.concatenate(blocks)


def st_prompts(prompts: Mapping[str, str | None] | None) -> tuple[dict[str, str], str, str]:
    """``(prompts, query prompt, document prompt)`` of a sentence-transformers ``prompts`` dict, as
    Sentence Transformers reads it: ``query`` and ``document`` are always there (``""`` when not
    saved); ``encode_query`` uses ``query``, ``encode_document`` the first of ``document`` /
    ``passage`` / ``corpus`` (so ``document``, present in every model, even ``""``)."""
    out: dict[str, str | None] = {"query": None, "document": None}
    for name, text in (prompts or {}).items():
        if name not in out or out[name] is None:
            out[name] = text
    out = {k: ("" if v is None else str(v)) for k, v in out.items()}
    doc = next(out[k] for k in ("document", "passage", "corpus") if k in out)
    return out, out["query"], doc


def apply_prompts(model, query_prompt: str | None = None, document_prompt: str | None = None):
    """Set the prompts ``model`` prepends to queries / documents (``None``: keep the model's own;
    ``""``: none). Returns ``model``."""
    if query_prompt is not None:
        model.query_prefix = query_prompt
    if document_prompt is not None:
        model.doc_prefix = document_prompt
    return model


def _as_matrix(x):
    if sp.issparse(x):
        return x
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    t = t.float()
    return t[None] if t.dim() == 1 else t


def _unwrap(model):
    while hasattr(model, "module") and not hasattr(model, "normalize") and not hasattr(model, "config"):
        model = model.module  # DDP / DataParallel / accelerate wrappers
    return model


def model_similarity(model) -> str:
    """``"cos"`` for a model whose embeddings are L2-normalised, ``"dot"`` otherwise (sparse models,
    DPR-style encoders)."""
    model = _unwrap(model)
    if getattr(model, "output_is_sparse", False):
        return "dot"
    normalized = getattr(model, "normalize", None)
    if normalized is None:
        sim = str(getattr(getattr(model, "config", None), "similarity", "dot")).lower()
        normalized = sim in ("cos", "cosine")
    return "cos" if normalized else "dot"


class EncoderMixin:
    """``encode_queries`` / ``encode_corpus`` for a model whose
    ``forward(input_ids, attention_mask, is_query)`` returns embeddings (see :func:`embed`).

    The model must have a ``tokenizer`` attribute (or pass ``tokenizer=``). Optional
    attributes: ``output_is_sparse`` (bool), ``max_query_length`` / ``max_doc_length``
    (or ``config.max_query_length`` / ``config.max_doc_length``), ``query_prefix`` /
    ``doc_prefix`` (the prompts of :meth:`encode_query` / :meth:`encode_document`), ``prompts`` /
    ``default_prompt_name`` (as in Sentence Transformers, for :meth:`encode`'s ``prompt_name``).

    Sentence Transformers' names are here too: :meth:`encode_query`, :meth:`encode_document`,
    :meth:`encode` (``prompt_name`` / ``prompt``) and :meth:`similarity`.
    """

    output_is_sparse: bool = False
    #: the precision of ``encode_*`` calls that pass no ``dtype`` (``auto`` | ``fp32`` | ``bf16`` | ``fp16``,
    #: :mod:`hf_dr.precision`); the commands set it from ``--dtype``, so every encoding of a run (corpus,
    #: queries, the dev set, pseudo-labels) uses the one precision asked for
    encode_dtype: str = "auto"

    def encoding_settings(self, is_query: bool = False, max_length: int | None = None, tokenizer=None) -> dict:
        """The settings an encoding runs with: ``max_length`` (capped by the backbone's positions and
        the tokenizer's limit), ``prefix`` and ``sparse`` — what an embeddings manifest records."""
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
        return {"max_length": int(max_length), "sparse": bool(self.output_is_sparse),
                "prefix": getattr(self, "query_prefix" if is_query else "doc_prefix", None) or "",
                "pooling": getattr(self, "pooling", None), "normalize": getattr(self, "normalize", None)}

    def _iter_encode_texts(self, texts: Iterable[str], *, is_query: bool, batch_size=32, max_length=None,
                           show_progress_bar=None, device=None, dtype=None, convert_to="numpy",
                           tokenizer=None, chunk_size: int = DEFAULT_CHUNK_SIZE, total: int | None = None,
                           prompt: str | None = None):
        tokenizer = tokenizer or getattr(self, "tokenizer", None)
        if dtype is None:
            dtype = getattr(self, "encode_dtype", None) or "auto"
        settings = self.encoding_settings(is_query, max_length, tokenizer)
        prefix = settings["prefix"] if prompt is None else prompt
        if total is None and hasattr(texts, "__len__"):
            total = len(texts)
        if prefix:
            texts = (prefix + t for t in texts)
        dev = encode_device(self, device)
        if dev is not None and isinstance(self, torch.nn.Module):
            p = next(self.parameters(), None)
            if p is not None and p.device != dev:
                self.to(dev)
                dev = next(self.parameters()).device
        was_training = getattr(self, "training", False)
        if isinstance(self, torch.nn.Module):
            self.eval()
        try:
            yield from iter_encode(
                texts, tokenizer,
                lambda ids, mask: embed(self, ids, mask, is_query),
                batch_size=batch_size, max_length=settings["max_length"], device=dev, dtype=dtype,
                sparse=self.output_is_sparse, show_progress_bar=show_progress_bar, chunk_size=chunk_size,
                total=total, desc="Encoding queries" if is_query else "Encoding corpus", convert_to=convert_to)
        finally:
            if was_training:
                self.train()

    def _encode_texts(self, texts: Sequence[str], *, is_query: bool, convert_to="numpy", **kwargs):
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings, not a single string")
        return concat_blocks(list(self._iter_encode_texts(texts, is_query=is_query, convert_to=convert_to, **kwargs)))

    def encode_queries(self, queries: Sequence[str], **kwargs):
        """Queries -> float32 ``[n, d]`` (dense models) or CSR ``[n, |V|]`` (sparse models)."""
        return self._encode_texts(list(queries), is_query=True, **kwargs)

    def encode_corpus(self, corpus: Sequence[Mapping[str, Any] | str], **kwargs):
        """Documents (``str`` or BEIR dicts with title/text) -> ``[n, d]`` / CSR ``[n, |V|]``."""
        return self._encode_texts([doc_to_text(d) for d in corpus], is_query=False, **kwargs)

    def iter_encode_corpus(self, corpus: Iterable[Mapping[str, Any] | str], *, total: int | None = None, **kwargs):
        """Stream documents through the encoder: yields one ``[c, d]`` / CSR block per ``chunk_size``
        documents, in order, reading ``corpus`` lazily (memory does not grow with the corpus)."""
        if total is None and hasattr(corpus, "__len__"):
            total = len(corpus)
        return self._iter_encode_texts((doc_to_text(d) for d in corpus), is_query=False, total=total, **kwargs)

    # ------------------------------------------------------------------ Sentence Transformers' names
    def _prompts(self) -> dict[str, str]:
        """The model's prompts, with ``query`` / ``document`` as its encodings use them (flags included)."""
        return {**(getattr(self, "prompts", None) or {}), "query": getattr(self, "query_prefix", None) or "",
                "document": getattr(self, "doc_prefix", None) or ""}

    def _resolve_prompt(self, prompt: str | None, prompt_name: str | None) -> str | None:
        """Sentence Transformers' rule: ``prompt``, else ``prompts[prompt_name]``, else the prompt of
        ``default_prompt_name``, else none."""
        if prompt is not None:
            return prompt
        prompts = self._prompts()
        if prompt_name is not None:
            if prompt_name not in prompts:
                raise ValueError(f"Prompt name '{prompt_name}' not found in the configured prompts dictionary "
                                 f"with keys {list(prompts)!r}.")
            return prompts[prompt_name]
        default = getattr(self, "default_prompt_name", None)
        return prompts.get(default) if default is not None else None

    def _st_encode(self, texts, is_query: bool, prompt: str | None, convert_to_tensor: bool = False, **kwargs):
        single = isinstance(texts, str) or isinstance(texts, Mapping)
        items = [texts] if single else list(texts)
        items = [t if is_query else doc_to_text(t) for t in items]
        if convert_to_tensor:
            kwargs["convert_to"] = "torch"
        kwargs.pop("convert_to_numpy", None)
        out = self._encode_texts(items, is_query=is_query, prompt=prompt, **kwargs)
        return out[0] if single else out

    def encode_query(self, queries, prompt_name: str | None = None, prompt: str | None = None, **kwargs):
        """Sentence Transformers' ``encode_query``: queries with the query prompt (``query_prefix``)
        unless ``prompt_name`` / ``prompt`` says otherwise; keyword arguments: :meth:`encode_queries`'."""
        p = None if prompt_name is None and prompt is None else self._resolve_prompt(prompt, prompt_name)
        return self._st_encode(queries, True, p, **kwargs)

    def encode_document(self, documents, prompt_name: str | None = None, prompt: str | None = None, **kwargs):
        """Sentence Transformers' ``encode_document``: documents (``str`` or BEIR dicts) with the document
        prompt (``doc_prefix``) unless ``prompt_name`` / ``prompt`` says otherwise."""
        p = None if prompt_name is None and prompt is None else self._resolve_prompt(prompt, prompt_name)
        return self._st_encode(documents, False, p, **kwargs)

    def encode(self, sentences, prompt_name: str | None = None, prompt: str | None = None, *,
               is_query: bool = False, **kwargs):
        """Sentence Transformers' ``encode``: no prompt unless ``prompt`` / ``prompt_name`` (a key of the
        model's prompts) / the model's ``default_prompt_name`` gives one. ``is_query`` picks the query
        side of an asymmetric model (and the query max length)."""
        return self._st_encode(sentences, is_query, self._resolve_prompt(prompt, prompt_name) or "", **kwargs)

    def similarity(self, queries, documents) -> torch.Tensor:
        """Scores ``[n_q, n_d]`` (a float32 tensor) of two sets of embeddings by the model's similarity:
        cosine or dot (:func:`model_similarity`, or the ``similarity_fn_name`` of
        its sentence-transformers folder; ``euclidean`` / ``manhattan``: negative distances)."""
        a, b = _as_matrix(queries), _as_matrix(documents)
        if sp.issparse(a) or sp.issparse(b):
            a = sp.csr_matrix(a) if sp.issparse(a) else sp.csr_matrix(a.numpy())
            b = sp.csr_matrix(b) if sp.issparse(b) else sp.csr_matrix(b.numpy())
            return torch.from_numpy(np.asarray((a @ b.T).todense(), dtype=np.float32))
        name = str(getattr(self, "similarity_fn_name", None) or "").lower()
        if name in ("euclidean", "manhattan"):
            return -torch.cdist(a, b, p=2.0 if name == "euclidean" else 1.0)
        if name in ("cosine", "cos") or (not name and model_similarity(self) == "cos"):
            a, b = torch.nn.functional.normalize(a, dim=-1), torch.nn.functional.normalize(b, dim=-1)
        return a @ b.T
