"""Dense retrieval with faiss: exact inner product by default, HNSW / IVF-PQ for large corpora."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .run import Run, run_from_scores

__all__ = ["DenseIndex"]


class DenseIndex:
    """Inner-product index over ``[n, d]`` float32 document embeddings.

    Args:
        embeddings: document embeddings (normalise them first for cosine similarity).
        doc_ids: ids in the same order.
        index_type: ``"flat"`` (exact, default), ``"hnsw"`` (``hnsw_m`` links, ``ef_search``),
            or ``"ivfpq"`` (``nlist`` cells, ``pq_m`` sub-quantisers, ``nprobe``).
        use_gpu: ``"auto"`` moves the index to GPU when faiss-gpu and a GPU are present.
    """

    def __init__(self, embeddings: np.ndarray, doc_ids: Sequence[str], *, index_type: str = "flat",
                 hnsw_m: int = 32, ef_search: int = 128, nlist: int | None = None, pq_m: int = 16,
                 nprobe: int = 32, use_gpu: bool | str = "auto"):
        import faiss

        emb = np.ascontiguousarray(embeddings, dtype=np.float32)
        if emb.ndim != 2:
            raise ValueError(f"embeddings must be 2-D [n, d], got shape {emb.shape}")
        if len(doc_ids) != emb.shape[0]:
            raise ValueError(f"{len(doc_ids)} ids for {emb.shape[0]} embeddings")
        if emb.shape[0] == 0:
            raise ValueError("cannot index an empty corpus")
        self.doc_ids = [str(d) for d in doc_ids]
        d = emb.shape[1]
        if index_type == "flat":
            index = faiss.IndexFlatIP(d)
        elif index_type == "hnsw":
            index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = ef_search
        elif index_type == "ivfpq":
            nlist = nlist or max(1, int(4 * np.sqrt(emb.shape[0])))
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFPQ(quantizer, d, nlist, pq_m, 8, faiss.METRIC_INNER_PRODUCT)
            index.train(emb)
            index.nprobe = nprobe
        else:
            raise ValueError(f"unknown index_type {index_type!r}: use flat, hnsw or ivfpq")
        if use_gpu and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
            self._gpu_res = faiss.StandardGpuResources()
            index = faiss.index_cpu_to_gpu(self._gpu_res, 0, index)
        elif use_gpu is True:
            raise RuntimeError("use_gpu=True but faiss has no GPU here (install faiss-gpu)")
        index.add(emb)
        self.index = index
        self.dim = d

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
