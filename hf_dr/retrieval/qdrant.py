"""Qdrant as hf-dr's search engine: embeddings folders uploaded into a collection, searched
behind the one :class:`~hf_dr.retrieval.Retriever` interface (dense, sparse, or a hybrid fused
inside the engine).

One collection holds one corpus: a named dense vector ``"dense"`` and/or a named sparse vector
``"sparse"`` (SPLADE's vocabulary ids and unrounded float weights: exact inner products) per
document, the document id as payload, and a *manifest point* (a fixed UUID, no vector, so no
search ever returns it) with the models, their fingerprints and max lengths, the corpus
fingerprint and the upload progress. Point ids are the documents' row numbers in the embeddings
folder, so uploading again never duplicates a point, and an interrupted upload resumes from the
last acknowledged batch.

Two engines, one code path (:class:`QdrantStore`):

* ``qdrant-client`` (``QdrantClient(url=...)`` for a server or cluster, ``path=`` / ``":memory:"``
  for its pure-Python local mode: API tests only, slow past ~20k points);
* ``qdrant-edge-py`` (``EdgeStore``): the Rust engine in-process — what the benchmarks measure.

Reciprocal rank fusion: hf-dr's :func:`~hf_dr.retrieval.fuse` scores ``1 / (rrf_k + rank)`` with
ranks counted from 1; Qdrant counts from 0. :class:`QdrantRetriever` therefore asks the engine for
``k = rrf_k + 1``, so the two give the same scores for the same ``rrf_k`` (60 by default).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import numpy as np

from ..embeddings import Embeddings, EmbeddingsError
from ..fingerprints import model_fingerprint
from .retriever import Retriever
from .run import Run

__all__ = ["QdrantStore", "ClientStore", "EdgeStore", "QdrantRetriever", "index_embeddings", "open_store",
           "MANIFEST_ID"]

MANIFEST_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/hf-dr/manifest"))
KINDS = ("dense", "sparse")


class QdrantStore:
    """What hf-dr needs of a Qdrant engine: create a collection, upsert points, read / write the
    manifest point's payload, and run a batch of queries."""

    def exists(self) -> bool: ...
    def create(self, dims: Mapping[str, int | None], *, hnsw_m: int, ef_construct: int, on_disk: bool,
               shards: int, replicas: int) -> None: ...
    def upsert(self, ids: list[int], vectors: list[dict], payloads: list[dict]) -> None: ...
    def manifest(self) -> dict | None: ...
    def set_manifest(self, payload: dict) -> None: ...
    def query_batch(self, requests: list[dict]) -> list[list[tuple[str, float]]]: ...
    def count(self) -> int: ...
    def close(self) -> None: ...


class ClientStore(QdrantStore):
    """A collection through ``qdrant-client`` (server / cluster by ``url``, local mode by ``path``)."""

    def __init__(self, collection: str, *, url: str | None = None, path: str | None = None,
                 api_key: str | None = None, client=None):
        from qdrant_client import QdrantClient

        if client is None:
            if (url is None) == (path is None):
                raise ValueError("give a Qdrant url= (server or cluster) or path= (local store), not both")
            client = QdrantClient(url=url, api_key=api_key) if url else QdrantClient(path=path)
        self.client, self.collection = client, collection

    def exists(self) -> bool:
        return self.client.collection_exists(self.collection)

    def create(self, dims, *, hnsw_m=16, ef_construct=100, on_disk=False, shards=1, replicas=1):
        from qdrant_client import models

        vectors = {k: models.VectorParams(size=d, distance=models.Distance.DOT, on_disk=on_disk,
                                          hnsw_config=models.HnswConfigDiff(m=hnsw_m, ef_construct=ef_construct))
                   for k, d in dims.items() if k == "dense"}
        sparse = {k: models.SparseVectorParams(index=models.SparseIndexParams(on_disk=on_disk))
                  for k in dims if k == "sparse"}
        self.client.create_collection(self.collection, vectors_config=vectors, sparse_vectors_config=sparse or None,
                                      shard_number=shards, replication_factor=replicas)

    def _vec(self, v):
        from qdrant_client import models

        return models.SparseVector(indices=v[0], values=v[1]) if isinstance(v, tuple) else v

    def upsert(self, ids, vectors, payloads):
        from qdrant_client import models

        pts = [models.PointStruct(id=i, vector={k: self._vec(x) for k, x in v.items()}, payload=p)
               for i, v, p in zip(ids, vectors, payloads)]
        self.client.upsert(self.collection, pts, wait=True)

    def manifest(self):
        got = self.client.retrieve(self.collection, [MANIFEST_ID], with_payload=True)
        return got[0].payload if got else None

    def set_manifest(self, payload):
        from qdrant_client import models

        self.client.upsert(self.collection, [models.PointStruct(id=MANIFEST_ID, vector={}, payload=payload)], wait=True)

    def query_batch(self, requests):
        from qdrant_client import models

        reqs = []
        for r in requests:
            params = models.SearchParams(exact=r["exact"], hnsw_ef=r.get("hnsw_ef"))
            if "fusion" in r:
                pre = [models.Prefetch(query=self._vec(v), using=k, limit=r["depth"], params=params)
                       for k, v in r["parts"].items()]
                q = models.RrfQuery(rrf=models.Rrf(k=r["rrf_k"])) if r["fusion"] == "rrf" \
                    else models.FusionQuery(fusion=models.Fusion.DBSF)
                reqs.append(models.QueryRequest(prefetch=pre, query=q, limit=r["limit"], with_payload=["doc_id"]))
            else:
                (k, v), = r["parts"].items()
                reqs.append(models.QueryRequest(query=self._vec(v), using=k, limit=r["limit"], params=params,
                                                with_payload=["doc_id"]))
        import warnings

        with warnings.catch_warnings():  # local mode: "search_params has no effect" (it is exact anyway)
            warnings.simplefilter("ignore", UserWarning)
            res = self.client.query_batch_points(self.collection, requests=reqs)
        return [[(p.payload["doc_id"], float(p.score)) for p in r.points] for r in res]

    def count(self):
        return self.client.count(self.collection, exact=True).count - (self.manifest() is not None)

    def close(self):
        self.client.close()


class EdgeStore(QdrantStore):
    """A collection in ``qdrant-edge-py``: Qdrant's Rust engine in this process (one shard on disk)."""

    def __init__(self, path: str):
        from pathlib import Path

        import qdrant_edge

        self.q, self.path = qdrant_edge, Path(path)
        self.shard = qdrant_edge.EdgeShard.load(str(self.path)) if self.exists() else None

    def exists(self) -> bool:
        return self.path.is_dir() and any(self.path.iterdir())

    def create(self, dims, *, hnsw_m=16, ef_construct=100, on_disk=False, shards=1, replicas=1):
        q = self.q
        cfg = q.EdgeConfig(
            vectors={k: q.EdgeVectorParams(size=d, distance=q.Distance.Dot, on_disk=on_disk)
                     for k, d in dims.items() if k == "dense"},
            sparse_vectors={k: q.EdgeSparseVectorParams(on_disk=on_disk) for k in dims if k == "sparse"},
            hnsw_config=q.HnswIndexConfig(m=hnsw_m, ef_construct=ef_construct, full_scan_threshold=10_000))
        self.shard = q.EdgeShard.create(str(self.path), cfg)

    def _vec(self, v):
        return self.q.SparseVector(indices=list(v[0]), values=list(v[1])) if isinstance(v, tuple) else v

    def upsert(self, ids, vectors, payloads):
        pts = [self.q.Point(i, {k: self._vec(x) for k, x in v.items()}, p) for i, v, p in zip(ids, vectors, payloads)]
        self.shard.update(self.q.UpdateOperation.upsert_points(pts))

    def manifest(self):
        got = self.shard.retrieve([MANIFEST_ID], True, False)
        return dict(got[0].payload) if got else None

    def set_manifest(self, payload):
        self.shard.update(self.q.UpdateOperation.upsert_points([self.q.Point(MANIFEST_ID, {}, payload)]))

    def query_batch(self, requests):
        q = self.q
        reqs = []
        for r in requests:
            params = q.SearchParams(exact=r["exact"], hnsw_ef=r.get("hnsw_ef"))
            if "fusion" in r:
                pre = [q.Prefetch(limit=r["depth"], query=q.Query.Nearest(self._vec(v), using=k), params=params)
                       for k, v in r["parts"].items()]
                fusion = q.Fusion.Rrf(k=r["rrf_k"]) if r["fusion"] == "rrf" else q.Fusion.Dbsf()
                reqs.append(q.QueryRequest(limit=r["limit"], prefetches=pre, query=fusion, with_payload=True))
            else:
                (k, v), = r["parts"].items()
                reqs.append(q.QueryRequest(limit=r["limit"], query=q.Query.Nearest(self._vec(v), using=k),
                                           params=params, with_payload=True))
        res = self.shard.query_batch(q.QueryBatchRequest(queries=reqs))
        return [[(p.payload["doc_id"], float(p.score)) for p in r] for r in res]

    def count(self):
        return self.shard.count(self.q.CountRequest(exact=True)) - (self.manifest() is not None)

    def close(self):
        if self.shard is not None:
            self.shard.close()
            self.shard = None


def open_store(collection: str | None = None, *, url: str | None = None, path: str | None = None,
               edge: str | None = None, api_key: str | None = None) -> QdrantStore:
    """A :class:`ClientStore` (``url`` or ``path`` + ``collection``) or an :class:`EdgeStore` (``edge`` folder)."""
    if edge is not None:
        return EdgeStore(edge)
    if not collection:
        raise ValueError("a Qdrant collection name is needed")
    return ClientStore(collection, url=url, path=path, api_key=api_key)


def _spec(embs: Mapping[str, Embeddings]) -> dict:
    first = next(iter(embs.values())).manifest
    return {"format": 1, "corpus_fingerprint": first["corpus_fingerprint"], "n_docs": first["n_docs"],
            "vectors": {k: {f: e.manifest[f] for f in ("model", "model_class", "model_fingerprint", "max_length",
                                                        "dim", "pooling", "normalize")}
                        for k, e in embs.items()}}


class _RowReader:
    """Rows ``[start, end)`` of an embeddings folder, read in increasing order: only the shards a
    range spans are loaded, and the current one is kept for the next range."""

    def __init__(self, emb: Embeddings):
        self.emb, self.shards, self._cache = emb, emb.manifest["shards"], (None, None)

    def _block(self, s: dict):
        if self._cache[0] is not s:
            self._cache = (s, self.emb._load(s))
        return self._cache[1]

    def rows(self, start: int, end: int):
        parts = []
        for s in self.shards:
            s0, s1 = s["start"], s["start"] + s["rows"]
            if s1 <= start or s0 >= end:
                continue
            parts.append(self._block(s)[max(start, s0) - s0: min(end, s1) - s0])
        if self.emb.is_sparse:
            import scipy.sparse as sp

            return sp.vstack(parts, format="csr") if len(parts) > 1 else parts[0].tocsr()
        return np.concatenate(parts) if len(parts) > 1 else np.asarray(parts[0])


def index_embeddings(store: QdrantStore, embeddings: Sequence, *, batch_size: int = 256, hnsw_m: int = 16,
                     ef_construct: int = 100, on_disk: bool = False, shards: int = 1, replicas: int = 1,
                     show_progress_bar: bool = True) -> dict:
    """Upload embeddings folders (one dense and/or one sparse, of the same corpus) into ``store``.

    Creates the collection, or resumes the upload of one begun with the same models, max lengths
    and corpus (point ids are row numbers: nothing is duplicated); refuses one built otherwise
    (:class:`~hf_dr.embeddings.EmbeddingsError`). Returns the manifest."""
    from tqdm.auto import tqdm

    embs: dict[str, Embeddings] = {}
    for e in embeddings:
        e = e if isinstance(e, Embeddings) else Embeddings(e)
        kind = "sparse" if e.is_sparse else "dense"
        if kind in embs:
            raise ValueError(f"two {kind} embeddings folders ({embs[kind].path}, {e.path}): a collection holds one of each")
        embs[kind] = e
    if not embs:
        raise ValueError("no embeddings folder to index")
    fps = {e.manifest["corpus_fingerprint"] for e in embs.values()}
    if len(fps) > 1:
        raise EmbeddingsError(f"{' and '.join(str(e.path) for e in embs.values())} encode different corpora")
    spec = _spec(embs)
    n = spec["n_docs"]
    if store.exists():
        old = store.manifest()
        if old is None:
            raise EmbeddingsError("the collection exists but was not made by hf-dr (no manifest point): "
                                  "use another collection name")
        if {k: v for k, v in old.items() if k != "uploaded"} != spec:
            diff = _describe_diff(old, spec)
            raise EmbeddingsError(f"the collection holds other embeddings ({diff}): use another collection name")
        done = int(old.get("uploaded", 0))
    else:
        store.create({k: (e.manifest["dim"] if k == "dense" else None) for k, e in embs.items()}, hnsw_m=hnsw_m,
                     ef_construct=ef_construct, on_disk=on_disk, shards=shards, replicas=replicas)
        store.set_manifest({**spec, "uploaded": 0})
        done = 0
    doc_ids = next(iter(embs.values())).doc_ids
    readers = {k: _RowReader(e) for k, e in embs.items()}
    with tqdm(total=n, initial=done, desc="Uploading", unit="doc", disable=not show_progress_bar) as bar:
        for start in range(done, n, batch_size):
            end = min(n, start + batch_size)
            blocks = {k: r.rows(start, end) for k, r in readers.items()}
            vectors = []
            for r in range(end - start):
                v = {}
                for k, b in blocks.items():
                    if k == "dense":
                        v[k] = b[r].astype(np.float32).tolist()
                    else:
                        row = b[r]
                        v[k] = (row.indices.tolist(), row.data.astype(np.float32).tolist())
                vectors.append(v)
            store.upsert(list(range(start, end)), vectors, [{"doc_id": d} for d in doc_ids[start:end]])
            store.set_manifest({**spec, "uploaded": end})  # acknowledged: a re-run starts here
            bar.update(end - start)
    return {**spec, "uploaded": n}


def _describe_diff(old: dict, new: dict) -> str:
    out = []
    for k in ("corpus_fingerprint", "n_docs"):
        if old.get(k) != new.get(k):
            out.append(f"{k}: {old.get(k)!r} -> {new.get(k)!r}")
    ov, nv = old.get("vectors", {}), new.get("vectors", {})
    if set(ov) != set(nv):
        out.append(f"vectors: {sorted(ov)} -> {sorted(nv)}")
    for k in set(ov) & set(nv):
        for f in ("model_fingerprint", "max_length", "model"):
            if ov[k].get(f) != nv[k].get(f):
                out.append(f"{k} {f}: {ov[k].get(f)!r} -> {nv[k].get(f)!r}")
    return "; ".join(out) or "format"


class QdrantRetriever(Retriever):
    """Search a collection made by :func:`index_embeddings`.

    Args:
        store: the collection (:func:`open_store`).
        encoders: ``{"dense": encoder, "sparse": encoder}`` — the models that made the collection's
            vectors (checked against the manifest's fingerprints), used to encode queries.
        mode: ``"dense"``, ``"sparse"`` or ``"hybrid"`` (both, fused in the engine); default: what
            ``encoders`` give.
        exact: exact search (evaluation: the numbers equal in-process brute force); ``False`` uses
            the HNSW index (``hnsw_ef`` its breadth) — for serving.
        fusion, rrf_k, depth: hybrid fusion (``"rrf"`` or ``"dbsf"``) over each side's top ``max(k, depth)``.
    """

    def __init__(self, store: QdrantStore, encoders: Mapping[str, object], *, mode: str | None = None,
                 exact: bool = True, hnsw_ef: int | None = None, fusion: str = "rrf", rrf_k: int = 60,
                 depth: int = 100, batch_size: int = 32, request_batch: int = 64):
        m = store.manifest() if store.exists() else None
        if m is None:
            raise EmbeddingsError("no hf-dr collection there (no manifest point): build it with `hf-dr index`")
        if int(m.get("uploaded", 0)) < int(m["n_docs"]):
            raise EmbeddingsError(f"the upload stopped at {m.get('uploaded')} of {m['n_docs']} documents: "
                                  "run the same `hf-dr index` command again to finish it")
        mode = mode or ("hybrid" if len(encoders) > 1 else next(iter(encoders)))
        need = KINDS if mode == "hybrid" else (mode,)
        for kind in need:
            if kind not in encoders:
                raise ValueError(f"mode {mode!r} needs a {kind} encoder")
            if kind not in m["vectors"]:
                raise EmbeddingsError(f"the collection has no {kind} vectors (it has {sorted(m['vectors'])})")
            fp = model_fingerprint(encoders[kind])
            if fp != m["vectors"][kind]["model_fingerprint"]:
                raise EmbeddingsError(f"the collection's {kind} vectors were made by another model "
                                      f"({m['vectors'][kind]['model']!r}), not by this {type(encoders[kind]).__name__}")
        if fusion not in ("rrf", "dbsf"):
            raise ValueError(f"unknown engine fusion {fusion!r}: use rrf or dbsf")
        self.store, self.encoders, self.mode, self.manifest = store, {k: encoders[k] for k in need}, mode, m
        self.exact, self.hnsw_ef, self.fusion, self.rrf_k, self.depth = exact, hnsw_ef, fusion, rrf_k, depth
        self.batch_size, self.request_batch = batch_size, request_batch
        self.name = f"qdrant-{mode}"
        self._doc_ids = None

    def __len__(self) -> int:
        return int(self.manifest["n_docs"])

    @property
    def doc_ids(self) -> list[str]:
        raise AttributeError("a Qdrant collection's documents are in the engine; len(retriever) counts them")

    def search(self, queries, k=1000, *, show_progress_bar=None) -> Run:
        from .retriever import _check_k

        k = _check_k(k)
        qids = list(queries)
        if not qids:
            return {}
        texts = [queries[q] for q in qids]
        vecs = {kind: enc.encode_queries(texts, batch_size=self.batch_size, show_progress_bar=False)
                for kind, enc in self.encoders.items()}
        return self.search_vectors(vecs, qids, k)

    def search_vectors(self, vecs: Mapping[str, object], qids: Sequence[str], k: int = 1000) -> Run:
        """:meth:`search` of query vectors already encoded: ``vecs`` ``{kind: [n, d] array or CSR [n, |V|]}``
        (each of this retriever's encoders' kinds), one row per id of ``qids``."""
        def vec(kind, i):
            v = vecs[kind]
            if kind == "dense":
                return np.asarray(v[i], dtype=np.float32).tolist()
            row = v.getrow(i)
            return row.indices.tolist(), row.data.astype(np.float32).tolist()

        requests = []
        for i in range(len(qids)):
            parts = {kind: vec(kind, i) for kind in self.encoders}
            r = {"parts": parts, "limit": k, "exact": self.exact, "hnsw_ef": self.hnsw_ef}
            if self.mode == "hybrid":
                r.update(fusion=self.fusion, rrf_k=self.rrf_k + 1, depth=max(k, self.depth))
            requests.append(r)
        run: Run = {}
        for s in range(0, len(requests), self.request_batch):
            for qid, hits in zip(qids[s:s + self.request_batch], self.store.query_batch(requests[s:s + self.request_batch])):
                # the engine returns documents with score 0 too (no shared term): not hits, as in SparseIndex
                run[qid] = {d: sc for d, sc in hits if self.mode != "sparse" or sc > 0}
        return run

    def info(self) -> dict:
        return {"retriever": self.name, "backend": "qdrant", "exact": self.exact,
                **({"fusion": {"method": self.fusion, "rrf_k": self.rrf_k}} if self.mode == "hybrid" else {})}
