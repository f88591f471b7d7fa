"""Qdrant through its embedded Rust engine (qdrant-edge-py) against hf-dr's in-process indexes.

1. ``quality``: SciFact and ArguAna (test), nDCG@10 / R@100 of dense (all-MiniLM-L6-v2), sparse
   (splade-tiny) and their hybrid (reciprocal rank fusion, rrf_k=60, each side's top 1000),
   searched exactly in Qdrant vs in process (faiss flat / the inverted index / ``fuse``). The
   corpora are encoded once into embeddings folders (``hf-dr encode``) which both sides use.
2. ``speed``: the scale corpus of ``benchmarks/encode_scale.py`` (200,000 documents, MiniLM at max
   length 16: its ``runs/encode-scale/emb-200k`` folder, made first when missing): ingest docs/s
   (Qdrant upsert of the folder vs building the faiss flat index) and queries/s (exact top-100 of
   1,000 SciFact + ArguAna queries, batched, vs faiss flat) — the cost of the engine, no target.

    python benchmarks/qdrant.py                    # both parts
    python benchmarks/qdrant.py --parts speed

Results: benchmarks/results/qdrant.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

DENSE = SHARED / "models" / "all-MiniLM-L6-v2"
SPARSE = SHARED / "models" / "splade-tiny"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="runs/qdrant")
    ap.add_argument("--parts", nargs="+", default=["quality", "speed"], choices=["quality", "speed"])
    ap.add_argument("--datasets", nargs="+", default=["scifact", "arguana"])
    a = ap.parse_args()

    import numpy as np
    import qdrant_edge

    from hf_dr.data import load_beir
    from hf_dr.embeddings import Embeddings, encode_to_folder
    from hf_dr.evaluation import evaluate
    from hf_dr.models import load_encoder
    from hf_dr.retrieval import DenseIndex, EncoderRetriever, HybridRetriever
    from hf_dr.retrieval.qdrant import EdgeStore, QdrantRetriever, index_embeddings

    work = Path(a.work)
    cmd = command_line()
    version = f"qdrant-edge-py {getattr(qdrant_edge, '__version__', '0.9.0')}"
    dense, sparse = load_encoder(DENSE), load_encoder(SPARSE, kind="sparse")

    def emb(model, name, ds):
        folder = work / f"{ds}-{name}"
        if (folder / "manifest.json").is_file():
            return Embeddings(folder)
        return encode_to_folder(model, SHARED / "data" / ds, folder, model_name=str(model), show_progress_bar=True)

    if "quality" in a.parts:
        for ds in a.datasets:
            data = load_beir(SHARED / "data" / ds, split="test")
            e_dense, e_sparse = emb(dense, "minilm", ds), emb(sparse, "splade-tiny", ds)
            shard = work / f"{ds}-edge"
            shutil.rmtree(shard, ignore_errors=True)
            store = EdgeStore(str(shard))
            index_embeddings(store, [e_dense, e_sparse], batch_size=512)
            d_in = EncoderRetriever.from_embeddings(dense, e_dense, doc_ids=data.doc_ids())
            s_in = EncoderRetriever.from_embeddings(sparse, e_sparse, doc_ids=data.doc_ids())
            systems = {"dense (all-MiniLM-L6-v2)": (d_in, "dense"), "sparse (splade-tiny)": (s_in, "sparse"),
                       "hybrid (RRF k=60, top-1000 each)": (HybridRetriever([d_in, s_in], method="rrf", depth=1000),
                                                            "hybrid")}
            for label, (inproc, mode) in systems.items():
                q = QdrantRetriever(store, {"dense": dense, "sparse": sparse}, mode=mode, depth=1000)
                t = time.perf_counter()
                ours = evaluate(q, data, metrics=("ndcg@10", "recall@100"))
                t_q = time.perf_counter() - t
                ref = evaluate(inproc, data, metrics=("ndcg@10", "recall@100"))
                same = all(round(ours.aggregate[m], 4) == round(ref.aggregate[m], 4) for m in ref.aggregate)
                row = {"table": "qdrant", "dataset": ds, "system": f"{label}: Qdrant exact vs in process",
                       "command": cmd, "machine": machine(), "engine": version,
                       "metrics": {"qdrant_ndcg@10": round(ours.aggregate["ndcg@10"], 4),
                                   "inprocess_ndcg@10": round(ref.aggregate["ndcg@10"], 4),
                                   "qdrant_recall@100": round(ours.aggregate["recall@100"], 4),
                                   "inprocess_recall@100": round(ref.aggregate["recall@100"], 4),
                                   "equal_4_decimals": same}}
                print(row["dataset"], row["system"], row["metrics"], f"{t_q:.1f}s", flush=True)
                save_rows("qdrant", [row])
            store.close()

    if "speed" in a.parts:
        folder = Path("runs/encode-scale/emb-200k")
        if not (folder / "manifest.json").is_file():
            import subprocess

            subprocess.run([sys.executable, str(Path(__file__).parent / "encode_scale.py"), "--parts", "rss"],
                           check=True)
        e = Embeddings(folder)
        n = len(e)
        queries = {}
        for ds in ("scifact", "arguana"):
            queries.update({f"{ds}:{k}": v for k, v in load_beir(SHARED / "data" / ds, split="test")
                            .split_queries().items()})
        queries = dict(list(queries.items())[:1000])
        small = load_encoder(DENSE, max_length=16)  # the encoder of the folder (same weights, its max length)
        shard = work / "scale-edge"
        shutil.rmtree(shard, ignore_errors=True)
        store = EdgeStore(str(shard))
        t = time.perf_counter()
        index_embeddings(store, [e], batch_size=1024)
        ingest_q = time.perf_counter() - t
        t = time.perf_counter()
        flat = DenseIndex(e.matrix(), e.doc_ids, use_gpu=False)
        ingest_f = time.perf_counter() - t
        qv = small.encode_queries(list(queries.values()), show_progress_bar=False)
        reqs = [{"parts": {"dense": np.asarray(v, dtype=np.float32).tolist()}, "limit": 100, "exact": True}
                for v in qv]
        t = time.perf_counter()
        for s in range(0, len(reqs), 64):
            store.query_batch(reqs[s:s + 64])
        search_q = time.perf_counter() - t
        t = time.perf_counter()
        flat.search(qv, list(queries), top_k=100)
        search_f = time.perf_counter() - t
        row = {"table": "qdrant_speed", "dataset": "scale corpus (200k, MiniLM max_len 16)",
               "system": f"Qdrant embedded engine (exact) vs in process (faiss flat): ingest {n} docs, "
                         f"top-100 for {len(queries)} queries",
               "command": cmd, "machine": machine(), "engine": version,
               "metrics": {"qdrant_ingest_docs_per_s": round(n / ingest_q, 1),
                           "inprocess_ingest_docs_per_s": round(n / ingest_f, 1),
                           "qdrant_queries_per_s": round(len(queries) / search_q, 1),
                           "inprocess_queries_per_s": round(len(queries) / search_f, 1)}}
        print(row["system"], row["metrics"], flush=True)
        save_rows("qdrant", [row])
        store.close()


if __name__ == "__main__":
    main()
