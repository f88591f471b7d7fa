"""Dense retrieval with faiss: exact inner product by default, HNSW / IVF-PQ for large corpora;
saved with faiss' own writer and opened memory-mapped (:meth:`DenseIndex.save` / :meth:`DenseIndex.load`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .run import Run, id_sequence, run_from_scores

__all__ = ["DenseIndex", "INDEX_TYPES"]

INDEX_TYPES = ("flat", "hnsw", "ivfpq")
#: vectors handed to faiss per ``add`` call (the progress bar's step; blocks of one embeddings shard
#: are added as they are, never concatenated)
ADD_CHUNK = 65_536
FAISS_FILE = "faiss.index"


def _blocks(embeddings) -> list:
    """``embeddings`` as a list of 2-D blocks: a list / tuple of arrays as it is (e.g. the
    memory-mapped shards of an embeddings folder), an array cut into row slices."""
    if isinstance(embeddings, (list, tuple)):
        blocks = list(embeddings)
    else:
        arr = embeddings if hasattr(embeddings, "shape") else np.asarray(embeddings, dtype=np.float32)
        blocks = [arr]
    for b in blocks:
        if len(getattr(b, "shape", ())) != 2:
            raise ValueError(f"embeddings must be 2-D [n, d], got shape {getattr(b, 'shape', None)}")
    out = []
    for b in blocks:
        out.extend(b[s:s + ADD_CHUNK] for s in range(0, b.shape[0], ADD_CHUNK))
    return out


def row_blocks(vectors, doc_ids) -> list:
    """:func:`_blocks` of ``vectors`` (dense arrays or sparse matrices), checked against ``doc_ids``:
    one id per row, and at least one row (what every index built here needs)."""
    blocks = _blocks(vectors)
    n = sum(b.shape[0] for b in blocks)
    if len(doc_ids) != n:
        raise ValueError(f"{len(doc_ids)} ids for {n} document vectors")
    if n == 0:
        raise ValueError("cannot index an empty corpus")
    return blocks


class DenseIndex:
    """Inner-product index over ``[n, d]`` float32 document embeddings.

    Args:
        embeddings: document embeddings (normalise them first for cosine similarity): one array,
            or a list of row blocks (the shards of an embeddings folder), added block by block.
        doc_ids: ids in the same order (a list, or any sequence such as a saved index's
            memory-mapped :class:`~hf_dr.retrieval.saved.DocIds`).
        index_type: ``"flat"`` (exact, default), ``"hnsw"`` (``hnsw_m`` links, ``ef_search``),
            or ``"ivfpq"`` (``nlist`` cells, ``pq_m`` sub-quantisers, ``nprobe``).
        use_gpu: ``"auto"`` moves the index to GPU when faiss-gpu and a GPU are present.
    """

    def __init__(self, embeddings: np.ndarray, doc_ids: Sequence[str], *, index_type: str = "flat",
                 hnsw_m: int = 32, ef_search: int = 128, nlist: int | None = None, pq_m: int = 16,
                 nprobe: int = 32, use_gpu: bool | str = "auto", show_progress_bar: bool | None = None):
        import faiss
        from tqdm.auto import tqdm

        if index_type not in INDEX_TYPES:
            raise ValueError(f"unknown index_type {index_type!r}: use flat, hnsw or ivfpq")
        blocks = row_blocks(embeddings, doc_ids)
        n, d = len(doc_ids), blocks[0].shape[1]
        if index_type == "flat":
            index = faiss.IndexFlatIP(d)
        elif index_type == "hnsw":
            index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = ef_search
        else:
            nlist = nlist or max(1, int(4 * np.sqrt(n)))
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFPQ(quantizer, d, nlist, pq_m, 8, faiss.METRIC_INNER_PRODUCT)
            index.train(np.ascontiguousarray(np.concatenate(blocks) if len(blocks) > 1 else blocks[0], np.float32))
            index.nprobe = nprobe
        self.params = {"index_type": index_type, **({"hnsw_m": hnsw_m, "ef_search": ef_search} if index_type == "hnsw"
                                                     else {"nlist": nlist, "pq_m": pq_m, "nprobe": nprobe}
                                                     if index_type == "ivfpq" else {})}
        if show_progress_bar is None:
            show_progress_bar = n > ADD_CHUNK
        with tqdm(total=n, desc=f"Indexing ({index_type})", unit="vec", disable=not show_progress_bar) as bar:
            for b in blocks:
                index.add(np.ascontiguousarray(b, dtype=np.float32))
                bar.update(b.shape[0])
        self._set(index, doc_ids, use_gpu)

    def _set(self, index, doc_ids, use_gpu) -> None:
        import faiss

        self.doc_ids = id_sequence(doc_ids)
        self.cpu_index = index
        if use_gpu and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
            self._gpu_res = faiss.StandardGpuResources()
            index = faiss.index_cpu_to_gpu(self._gpu_res, 0, index)
        elif use_gpu is True:
            raise RuntimeError("use_gpu=True but faiss has no GPU here (install faiss-gpu)")
        self.index = index
        self.dim = index.d

    def save(self, folder: str | Path) -> Path:
        """Write the index with faiss' own writer to ``folder/faiss.index`` (the ids and the manifest
        are the caller's: :func:`hf_dr.retrieval.saved.save_dense_index`)."""
        import faiss

        path = Path(folder) / FAISS_FILE
        faiss.write_index(self.cpu_index, str(path))
        return path

    @classmethod
    def load(cls, folder: str | Path, doc_ids: Sequence[str], params: dict, *, mmap: bool = True,
             ef_search: int | None = None, nprobe: int | None = None, use_gpu: bool | str = "auto") -> DenseIndex:
        """Open ``folder/faiss.index``: memory-mapped (``mmap``; faiss' ``IO_FLAG_MMAP_IFC`` for flat and
        HNSW indexes — their vectors and graph stay in the file, paged in as searches touch them —
        ``IO_FLAG_MMAP`` for IVF-PQ's inverted lists), nothing rebuilt. ``ef_search`` / ``nprobe``
        (search-time breadth) default to the saved ones."""
        import faiss

        path = Path(folder) / FAISS_FILE
        flags = 0
        if mmap:
            ifc = getattr(faiss, "IO_FLAG_MMAP_IFC", None)
            flags = ifc if ifc is not None and params.get("index_type") in ("flat", "hnsw") else faiss.IO_FLAG_MMAP
        index = faiss.read_index(str(path), flags)
        self = cls.__new__(cls)
        self.params = dict(params)
        if self.params.get("index_type") == "hnsw":
            self.params["ef_search"] = ef_search or self.params.get("ef_search", 128)
            faiss.downcast_index(index).hnsw.efSearch = self.params["ef_search"]
        elif self.params.get("index_type") == "ivfpq":
            self.params["nprobe"] = nprobe or self.params.get("nprobe", 32)
            faiss.extract_index_ivf(index).nprobe = self.params["nprobe"]
        if index.ntotal != len(doc_ids):
            raise ValueError(f"{path} holds {index.ntotal} vectors for {len(doc_ids)} ids")
        self._set(index, doc_ids, use_gpu)
        return self

    def __len__(self) -> int:
        return len(self.doc_ids)

    def search(self, query_embeddings: np.ndarray, query_ids: Sequence[str], top_k: int = 1000,
               batch_size: int = 4096) -> Run:
        q = np.ascontiguousarray(query_embeddings, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise ValueError(f"query embeddings must be [n, {self.dim}], got {q.shape}")
        if len(query_ids) != q.shape[0]:
            raise ValueError(f"{len(query_ids)} query ids for {q.shape[0]} embeddings")
        k = min(top_k, len(self.doc_ids))
        run: Run = {}
        for s in range(0, q.shape[0], batch_size):
            scores, idx = self.index.search(q[s:s + batch_size], k)
            run.update(run_from_scores(scores, idx, query_ids[s:s + batch_size], self.doc_ids))
        return run
