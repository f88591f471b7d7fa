"""Building retrievers from names: the layer above models and retrieval.

The retrieval layer (:mod:`hf_dr.retrieval`) searches with encoders it is given; the models layer
(:mod:`hf_dr.models`) loads encoders; evaluation (:mod:`hf_dr.evaluation`) scores runs and
retrievers it is given. Only this module joins them: :func:`build_retriever` makes a retriever of
any kind from a model name or folder (what ``hf-dr evaluate`` and ``hf-dr quickstart`` call), and
:func:`evaluate_model` encodes a corpus with an encoder and evaluates it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .evaluation import DEFAULT_METRICS, evaluate
from .retrieval.retriever import BM25Retriever, EncoderRetriever, HybridRetriever, Retriever

__all__ = ["RETRIEVER_KINDS", "build_retriever", "evaluate_model"]

#: the retrievers :func:`build_retriever` makes by name
RETRIEVER_KINDS = ("bm25", "dense", "sparse", "hybrid")


def _none(x):
    return None if x in (None, "none", "None", "") else x


def _saved_indexes(index) -> dict:
    """``{kind: SavedIndex}`` of the ``index`` argument of :func:`build_retriever` (a folder, a
    :class:`~hf_dr.retrieval.saved.SavedIndex`, or several): at most one per kind."""
    if index is None:
        return {}
    from .retrieval.saved import SavedIndex, SavedIndexError

    items = [index] if isinstance(index, (str, bytes, SavedIndex)) or hasattr(index, "__fspath__") else list(index)
    out: dict = {}
    for item in items:
        saved = item if isinstance(item, SavedIndex) else SavedIndex(item)
        if saved.kind in out:
            raise SavedIndexError(f"two {saved.kind} indexes ({out[saved.kind].path}, {saved.path}): give one of each kind")
        out[saved.kind] = saved
    return out


#: options of a dense index fixed when it is built (a saved index has its own)
_BUILD_OPTIONS = ("index_type", "hnsw_m", "nlist", "pq_m")
#: options of a saved index that may change at search time (faiss; Seismic)
SEARCH_OPTIONS = ("ef_search", "nprobe", "use_gpu", "query_cut", "heap_factor", "threads")


def build_retriever(kind: str, data, model=None, *, embeddings=None, index=None, batch_size: int = 32,
                    max_length: int | None = None, device=None, dtype: str | None = None,
                    query_prompt: str | None = None, document_prompt: str | None = None, bm25_stemmer: str | None = "english",
                    bm25_stopwords: str | None = "en", hybrid_second: str | None = None, fusion: str = "zscore",
                    fusion_weights: Sequence[float] = (1.0, 1.0), show_progress_bar: bool | None = True,
                    **index_kwargs) -> Retriever:
    """A retriever over ``data``'s corpus (a :class:`hf_dr.data.BeirData`) by name.

    ``kind``: ``bm25``, ``dense``, ``sparse`` or ``hybrid`` (BM25 + the model, dense or sparse by
    ``hybrid_second``, default: the model's own kind). ``model``: a folder / Hub id or a loaded
    encoder. ``embeddings``: an embeddings folder of the corpus to use instead of encoding it.
    ``index``: saved index folder(s) (``hf-dr index``; one BM25 and / or one of the model's
    vectors) searched instead of building that side: opened memory-mapped, nothing is built; each
    is checked against ``data``'s corpus, the model and the BM25 options, and refused when they
    differ (:class:`~hf_dr.retrieval.saved.SavedIndexError`, a ``ValueError``).
    ``index_kwargs``: dense index options (``index_type``, ``hnsw_m``, ``nlist``, ``use_gpu``...;
    with a saved index only the search-time ones: ``ef_search``, ``nprobe``, ``use_gpu``; a Seismic
    index's ``query_cut``, ``heap_factor``, ``threads``).
    ``dtype``: the precision the model encodes the corpus and the queries in (``auto`` | ``fp32`` | ``bf16``
    | ``fp16``, :mod:`hf_dr.precision`; default: the encoder's own ``encode_dtype``). ``query_prompt`` /
    ``document_prompt``: texts prepended to the queries / documents (default: the model's own prompts;
    :func:`hf_dr.encoding.apply_prompts`).
    """
    if kind not in RETRIEVER_KINDS:
        raise ValueError(f"unknown retriever {kind!r}: choose {', '.join(RETRIEVER_KINDS)}")
    saved = _saved_indexes(index)
    stemmer, stopwords = _none(bm25_stemmer), _none(bm25_stopwords)

    def bm25_side():
        if "bm25" in saved:
            return saved["bm25"].retriever(data=data, bm25_stemmer=stemmer, bm25_stopwords=stopwords, check_bm25=True)
        return BM25Retriever.from_data(data, stemmer=stemmer, stopwords=stopwords)

    if kind == "bm25":
        if model is not None or embeddings is not None:
            raise ValueError("the bm25 retriever takes no model and no embeddings")
        other = [s for k, s in saved.items() if k != "bm25"]
        if other:
            raise ValueError(f"{other[0].path} is a {other[0].describe()}: the bm25 retriever searches a BM25 index")
        return bm25_side()
    if model is None:
        raise ValueError(f"the {kind} retriever needs a model")
    want = {"dense": "dense", "sparse": "sparse"}.get(kind, hybrid_second or "auto")
    encoder = _encoder(model, want, device, dtype, query_prompt, document_prompt)
    side = _side(kind, want, model, encoder, saved)
    if side in saved:
        enc = _saved_side(saved[side], encoder, data, embeddings, max_length, batch_size, index_kwargs)
    else:
        index_kwargs = {k: v for k, v in index_kwargs.items() if v is not None}
        if embeddings is not None:
            enc = EncoderRetriever.from_embeddings(encoder, embeddings, doc_ids=data.doc_ids(), max_length=max_length,
                                                   batch_size=batch_size, **index_kwargs)
        else:
            enc = EncoderRetriever.from_data(encoder, data, batch_size=batch_size, max_length=max_length,
                                             show_progress_bar=show_progress_bar, **index_kwargs)
    if kind != "hybrid":
        return enc
    return HybridRetriever([bm25_side(), enc], weights=fusion_weights, method=fusion)


def _encoder(model, want: str, device, dtype, query_prompt, document_prompt):
    """``model`` (a folder / Hub id loaded as ``want``, or an encoder object) on ``device``, in
    ``dtype``, with the prompts."""
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        from .models import load_encoder

        encoder = load_encoder(model, kind=want)
    else:
        from .st_encoder import as_encoder

        encoder = as_encoder(model)
    if device is not None and hasattr(encoder, "to"):
        from .devices import resolve_device

        encoder.to(resolve_device(device))
    if dtype is not None:
        encoder.encode_dtype = dtype
    from .encoding import apply_prompts

    apply_prompts(encoder, query_prompt, document_prompt)
    return encoder


def _side(kind: str, want: str, model, encoder, saved: dict) -> str:
    """``dense`` or ``sparse``: the vectors the encoder makes, checked against the retriever asked
    for and the saved indexes given."""
    is_sparse = bool(getattr(encoder, "output_is_sparse", False))
    if want == "sparse" and not is_sparse:
        raise ValueError(f"{model} is not a sparse model")
    if want == "dense" and is_sparse:
        raise ValueError(f"{model} is a sparse model: use --retriever sparse")
    side = "sparse" if is_sparse else "dense"
    if kind != "hybrid" and "bm25" in saved:
        raise ValueError(f"{saved['bm25'].path} is a BM25 index: the {kind} retriever searches the model's vectors")
    wrong = [s for k, s in saved.items() if k not in ("bm25", side)]
    if wrong:
        raise ValueError(f"{wrong[0].path} is a {wrong[0].describe()}: the model {type(encoder).__name__} "
                         f"makes {side} vectors")
    return side


def _saved_side(saved, encoder, data, embeddings, max_length, batch_size, index_kwargs: dict):
    """The retriever of a saved index of the model's vectors (search-time options only)."""
    if embeddings is not None:
        raise ValueError("give either an embeddings folder or a saved index of the model's vectors, not both "
                         "(the index holds them)")
    fixed = [k for k in _BUILD_OPTIONS if index_kwargs.get(k) is not None]
    if fixed:
        raise ValueError(f"{saved.path} was built with its own {', '.join(fixed)} "
                         f"({saved.describe()}): they cannot change at search time")
    search_opts = {k: index_kwargs[k] for k in SEARCH_OPTIONS if index_kwargs.get(k) is not None}
    return saved.retriever(encoder, data, max_length=max_length, batch_size=batch_size, **search_opts)


def evaluate_model(encoder, data, *, top_k: int = 1000, metrics: Sequence[str] = DEFAULT_METRICS,
                   batch_size: int = 32, ignore_identical_ids: bool | None = None,
                   show_progress_bar: bool | None = True, index_kwargs: Mapping | None = None,
                   doc_vectors: tuple | None = None, queries: Mapping[str, str] | None = None):
    """Encode ``data``'s corpus with ``encoder`` (dense or sparse by ``output_is_sparse``) and
    :func:`~hf_dr.evaluation.evaluate` it. Returns ``(EvalResult, run)``. ``doc_vectors``:
    ``(doc_ids, matrix)``, the corpus already encoded by this encoder (a dense array or a CSR
    matrix; used, not encoded again, when its ids are ``data``'s in order). ``queries``: score
    only these of ``data``'s judged queries."""
    if doc_vectors is not None and list(doc_vectors[0]) == list(data.doc_ids()):
        import numpy as np

        mat = doc_vectors[1] if hasattr(doc_vectors[1], "tocsr") else np.asarray(doc_vectors[1])
        retriever = EncoderRetriever(encoder, mat, doc_vectors[0], batch_size=batch_size, **(index_kwargs or {}))
    else:
        retriever = EncoderRetriever.from_data(encoder, data, batch_size=batch_size,
                                               show_progress_bar=show_progress_bar, **(index_kwargs or {}))
    result = evaluate(retriever, data, k=top_k, metrics=metrics, ignore_identical_ids=ignore_identical_ids,
                      queries=queries, show_progress_bar=show_progress_bar)
    return result, result.run
