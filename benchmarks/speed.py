"""Speed of the spine, each against a peer measured in the same run.

1. Encoding: documents/s of hf-dr's encode loop (``DenseEncoder.encode_corpus``) vs
   ``sentence_transformers.SentenceTransformer.encode`` on the same model, texts, batch size
   and max length; reported as a ratio (best of ``--repeats`` alternating runs each).
2. SPLADE training: seconds per step (forward + backward + AdamW, in-batch contrastive loss +
   FLOPS) of ``SPLADECAI`` (its max-pooled projection, no ``[batch, length, |V|]`` logits) vs
   ``sentence_transformers.SparseEncoder`` (MLMTransformer + SpladePooling, full logits) on the
   same splade-tiny weights, batches of SciFact triplets and max length; ratio of steps/s.
2b. Encoding against Sentence Transformers' ONNX (or OpenVINO) CPU backend, which cannot be installed
   beside hf-dr: ``--st-backend-python PY``, the Python of an environment that has it
   (``benchmarks/st_backend_peer.py`` runs there, answering encodes over a pipe, alternated with hf-dr's
   as in 1.), with a check that its embeddings are the model's (cosine to hf-dr's).
3. Search: queries/s of ``DenseIndex`` (faiss flat IP), ``SparseIndex`` (splade-tiny vectors; and
   the approximate ``SeismicIndex`` of them, hf-dr[seismic]) and ``BM25Index`` (bm25s' scores
   searched by ``SparseIndex``) vs bm25s' own ``BM25.retrieve``
   (its tokenisation of the queries included), top-1000 over the whole corpus, all queries; and
   (``ratio_same_output``) vs bm25s giving what hf-dr's searches give, a Run (``{query id: {document
   id: score}}`` of the hits: its arrays through ``run_from_scores``).

    python benchmarks/speed.py                        # SciFact, 1000 documents for encoding
    python benchmarks/speed.py --n-docs 0             # the whole corpus
    python benchmarks/speed.py --windows 2000 --skip train-sparse dense-search sparse-search bm25-search
                                                      # encoding short documents: 12-word windows
    python benchmarks/speed.py --skip encode encode-sparse dense-search sparse-search bm25-search
                                                      # SPLADE training only
    python benchmarks/speed.py --st-backend-python .venv-onnx/bin/python --skip encode encode-sparse \
        train-sparse dense-search sparse-search bm25-search   # vs ST's ONNX backend (st_backend_peer.py)
    OMP_NUM_THREADS=1 python benchmarks/speed.py --clock cpu --skip encode encode-sparse train-sparse \
        dense-search --sparse-embeddings EMB           # search only, CPU time (a shared machine)

Results: benchmarks/results/speed.json.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, bm25s_own, command_line, machine, save_rows  # noqa: E402

#: the clock of every timing: wall (``--clock wall``, default) or this process's CPU time (``--clock cpu``:
#: single-threaded work on a machine shared with other jobs, whose wall times are noise)
CLOCK = time.perf_counter


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = CLOCK()
        fn()
        times.append(CLOCK() - t)
    return min(times)


def compare_encode(ours, peer, sample: list[str], batch_size: int, repeats: int) -> tuple[float, float]:
    """docs/s of ``ours`` and ``peer`` (each ``fn(texts, batch_size=...)``) on ``sample``: a warm-up
    of both, then ``repeats`` alternating timed runs (drifts in machine load hit both), best of each."""
    ours(sample[:64], batch_size=batch_size)
    peer(sample[:64], batch_size=batch_size)
    t_ours, t_peer = [], []
    for _ in range(repeats):
        t_ours.append(best_time(lambda: ours(sample, batch_size=batch_size), 1))
        t_peer.append(best_time(lambda: peer(sample, batch_size=batch_size), 1))
    return len(sample) / min(t_ours), len(sample) / min(t_peer)


def st_backend_row(a, sample: list[str], what: str) -> dict:
    """docs/s of hf-dr's encode loop vs ``SentenceTransformer(backend=a.st_backend)`` run by
    ``a.st_backend_python`` (``benchmarks/st_backend_peer.py``), through :func:`compare_encode`: the same
    model, texts, batch size and max length; the peer's time includes passing the texts over its pipe
    (milliseconds against seconds of encoding). The peer's embeddings of the first 256 texts are compared
    with hf-dr's (the lowest cosine), so that the row is about the same model."""
    import json
    import subprocess
    import tempfile

    import numpy as np

    from hf_dr.models.dense import DenseEncoder

    ours = DenseEncoder.from_pretrained(a.model)
    peer = subprocess.Popen([a.st_backend_python, str(Path(__file__).resolve().parent / "st_backend_peer.py"),
                             "--model", a.model, "--backend", a.st_backend, "--max-length", str(ours.max_doc_length)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(req: dict) -> dict:
        peer.stdin.write(json.dumps(req) + "\n")
        peer.stdin.flush()
        line = peer.stdout.readline()
        if not line:
            raise SystemExit(f"error: {a.st_backend_python} st_backend_peer.py ended (its stderr is above)")
        return json.loads(line)

    hello = json.loads(peer.stdout.readline() or "{}")
    if not hello.get("ready"):
        raise SystemExit(f"error: {a.st_backend_python} could not load {a.model} with backend={a.st_backend}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ask({"texts": sample[:256], "batch_size": a.batch_size, "save": f"{tmp}/peer.npy"})
            theirs = np.load(f"{tmp}/peer.npy")
        mine = np.asarray(ours.encode_corpus(sample[:256], batch_size=a.batch_size, show_progress_bar=False))
        cos = (mine * theirs).sum(1) / (np.linalg.norm(mine, axis=1) * np.linalg.norm(theirs, axis=1))
        ours_dps, peer_dps = compare_encode(
            lambda x, **kw: ours.encode_corpus(x, show_progress_bar=False, **kw),
            lambda x, batch_size: ask({"texts": x, "batch_size": batch_size}), sample, a.batch_size, a.repeats)
    finally:
        peer.stdin.close()
        peer.wait()
    versions = ", ".join(f"{k} {v}" for k, v in hello["versions"].items())
    print(f"encode: hf-dr {ours_dps:.1f} docs/s, SentenceTransformer(backend={a.st_backend!r}) {peer_dps:.1f} "
          f"docs/s, ratio {ours_dps / peer_dps:.2f}x; lowest cosine {cos.min():.6f} ({versions})", flush=True)
    return {"system": f"encode: hf-dr vs SentenceTransformer(backend={a.st_backend!r}) in its own environment "
                      f"({versions}; MiniLM, batch {a.batch_size}, max_len {ours.max_doc_length}, {what})",
            "metrics": {"hf_dr_docs_per_s": round(ours_dps, 2), "peer_docs_per_s": round(peer_dps, 2),
                        "ratio": round(ours_dps / peer_dps, 3), "lowest_cosine": round(float(cos.min()), 6),
                        "peer_load_s": hello["load_seconds"]}}


def compare_splade_training(a, data, texts) -> dict:
    """Seconds per SPLADE training step of hf-dr's SPLADECAI and of sentence-transformers'
    SparseEncoder, from the same weights, on the same batches (query, a random document as its
    positive, another as its negative: speed does not depend on the labels), the same loss
    (``hf_dr.losses``: in-batch contrastive + FLOPS) and AdamW; a warm-up step each, then
    ``--repeats`` alternating rounds of ``--train-steps`` steps, best round of each."""
    import torch
    from sentence_transformers import SparseEncoder

    from hf_dr.data import RetrievalCollator
    from hf_dr.losses import contrastive_loss, flops_loss
    from hf_dr.models.splade import SPLADECAI

    rng = random.Random(0)
    qtexts = list(data.queries["text"])
    B, n = a.train_batch_size, a.train_steps
    batches = [[{"query": rng.choice(qtexts), "pos": rng.choice(texts), "neg": rng.choice(texts)} for _ in range(B)]
               for _ in range(n)]
    st = SparseEncoder(a.sparse_model, device="cpu")
    ours = SPLADECAI.from_backbone(a.sparse_model, max_doc_length=st.max_seq_length)
    collate = RetrievalCollator(ours.tokenizer, 64, st.max_seq_length, score_column=None)
    enc = [collate(b) for b in batches]

    def loss_of(q, d):
        targets = torch.arange(q.shape[0]) * (d.shape[0] // q.shape[0])
        return contrastive_loss(q, d, targets) + 0.0006 * flops_loss(q) + 0.0008 * flops_loss(d)

    def ours_embed(ids, mask, is_query):
        return ours(ids, mask, is_query=is_query)

    def st_embed(ids, mask, is_query):
        return st({"input_ids": ids, "attention_mask": mask})["sentence_embedding"]

    def runner(model, embed):
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

        def run(batches):
            for x in batches:
                q = embed(x["query_input_ids"], x["query_attention_mask"], True)
                d = embed(x["doc_input_ids"], x["doc_attention_mask"], False)
                loss_of(q, d).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        return run

    run_ours, run_st = runner(ours, ours_embed), runner(st, st_embed)
    run_ours(enc[:1])
    run_st(enc[:1])
    t_ours, t_st = [], []
    for _ in range(a.repeats):
        t_ours.append(best_time(lambda: run_ours(enc), 1) / n)
        t_st.append(best_time(lambda: run_st(enc), 1) / n)
    so, ss = min(t_ours), min(t_st)
    print(f"train sparse: hf-dr SPLADECAI {so:.2f} s/step, SparseEncoder {ss:.2f} s/step, ratio {ss / so:.2f}x",
          flush=True)
    return {"system": f"SPLADE training step: SPLADECAI vs sentence-transformers SparseEncoder (splade-tiny, {B} "
                      f"triplets, max_len {st.max_seq_length}, contrastive + FLOPS, AdamW)",
            "metrics": {"hf_dr_s_per_step": round(so, 3), "peer_s_per_step": round(ss, 3),
                        "ratio": round(ss / so, 3)}}


def search_rows(a, data, texts: list[str], base: dict) -> list[dict]:
    """Queries/s of each index against bm25s' own retrieve, top 1000, all the corpus's queries."""
    import numpy as np
    import torch

    from hf_dr.models import load_encoder
    from hf_dr.models.dense import DenseEncoder
    from hf_dr.retrieval import BM25Index, DenseIndex, SparseIndex
    from hf_dr.retrieval.run import run_from_scores

    rows = []
    queries = dict(zip(data.queries["_id"], data.queries["text"]))
    qids, qtexts = list(queries), list(queries.values())
    # the peer: bm25s' own index and retrieve (tokenising the queries included, as a search does),
    # not hf-dr's BM25Index, which searches bm25s' scores through SparseIndex, the code under test
    bm25s_search = bm25s_own(texts, k=1000)
    bm25s_search(qtexts[:10])
    bm25_qps = len(qids) / best_time(lambda: bm25s_search(qtexts), a.repeats)
    print(f"search: bm25s {bm25_qps:.1f} queries/s", flush=True)
    # the same peer giving what every hf-dr search gives (a Run: per query id, {document id: score} of its
    # hits), as a user of bm25s would make it: its arrays, zero-score padding dropped, through run_from_scores
    doc_ids = data.doc_ids()

    def bm25s_run(qs: list[str]):
        docs, scores = bm25s_search(qs)
        return run_from_scores(scores, np.where(scores > 0, docs, -1), qids[:len(qs)], doc_ids)

    bm25s_run(qtexts[:10])
    run_qps = len(qids) / best_time(lambda: bm25s_run(qtexts), a.repeats)
    print(f"search: bm25s made a Run {run_qps:.1f} queries/s", flush=True)
    peer = {"bm25s_queries_per_s": round(bm25_qps, 1), "bm25s_run_queries_per_s": round(run_qps, 1)}
    def timed_row(name: str, search, warm) -> None:
        """Time ``search()`` (all queries; ``warm()`` first: ten of them) against both peer figures."""
        warm()
        qps = len(qids) / best_time(search, a.repeats)
        print(f"search: {name} {qps:.1f} queries/s = {qps / bm25_qps:.2f}x bm25s, {qps / run_qps:.2f}x bm25s made a "
              "Run", flush=True)
        rows.append({**base, "system": f"search: {name} vs bm25s' own retrieve ({len(qids)} queries, top-1000, "
                                       f"{len(texts)} docs)",
                     "metrics": {"hf_dr_queries_per_s": round(qps, 1), **peer, "ratio": round(qps / bm25_qps, 3),
                                 "ratio_same_output": round(qps / run_qps, 3)}})

    if "bm25-search" not in a.skip:  # hf-dr's BM25 (bm25s' scores, searched by SparseIndex) against it
        bm25 = BM25Index.from_beir(data)
        timed_row("BM25Index (bm25s' scores, SparseIndex search)", lambda: bm25.search(queries, top_k=1000),
                  lambda: bm25.search(dict(list(queries.items())[:10]), top_k=1000))

    def search_row(name, index, qvecs):
        timed_row(name, lambda: index.search(qvecs, qids, top_k=1000),
                  lambda: index.search(qvecs[:10], qids[:10], top_k=1000))

    if "dense-search" not in a.skip:
        # search speed does not depend on the embedding values: random unit vectors of the
        # model's width stand in for an encoded corpus (encoding speed is measured above)
        g = torch.Generator().manual_seed(0)
        dim = DenseEncoder.from_pretrained(a.model).config.hidden_size
        D = torch.nn.functional.normalize(torch.randn(len(texts), dim, generator=g), dim=-1).numpy()
        Q = torch.nn.functional.normalize(torch.randn(len(qids), dim, generator=g), dim=-1).numpy()
        search_row("DenseIndex (faiss flat IP)", DenseIndex(D, data.doc_ids()), Q)
    if "sparse-search" not in a.skip:
        enc = load_encoder(a.sparse_model, kind="sparse")
        if a.sparse_embeddings:
            from hf_dr.embeddings import Embeddings

            emb = Embeddings(a.sparse_embeddings)
            emb.check(enc, doc_ids=data.doc_ids())
            D = emb.matrix()
        else:
            D = enc.encode_corpus(texts, batch_size=a.batch_size)
        Q = enc.encode_queries(qtexts, batch_size=a.batch_size)
        search_row("SparseIndex (splade-tiny vectors)", SparseIndex(D, data.doc_ids()), Q)
        if "seismic-search" not in a.skip:  # the approximate index (hf-dr[seismic]), its default parameters
            from hf_dr.retrieval.seismic import SeismicIndex

            search_row("SeismicIndex (splade-tiny vectors, approximate, 1 thread)",
                       SeismicIndex(D, data.doc_ids(), threads=1), Q)
    return rows

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--model", default=str(SHARED / "models" / "all-MiniLM-L6-v2"))
    ap.add_argument("--sparse-model", default=str(SHARED / "models" / "splade-tiny"))
    ap.add_argument("--n-docs", type=int, default=1000, help="documents encoded (random, seed 0); 0 = all")
    ap.add_argument("--windows", type=int, default=0,
                    help="encode this many 12-word windows of the offline corpora (the scale corpus's short "
                         "documents, encode_scale.window_rows) instead of the dataset's documents")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=["encode", "encode-sparse", "encode-st-backend", "train-sparse", "dense-search",
                             "sparse-search", "seismic-search", "bm25-search"])
    ap.add_argument("--st-backend-python", default=None,
                    help="the Python of an environment with sentence-transformers[onnx] (or [openvino]): encode "
                         "against SentenceTransformer(backend=--st-backend) there (benchmarks/st_backend_peer.py)")
    ap.add_argument("--st-backend", default="onnx", choices=["onnx", "openvino"])
    ap.add_argument("--train-batch-size", type=int, default=8, help="triplets per SPLADE training step")
    ap.add_argument("--train-steps", type=int, default=5, help="timed SPLADE training steps per repeat")
    ap.add_argument("--sparse-embeddings", default=None,
                    help="sparse-search: the corpus's splade-tiny embeddings folder (hf-dr encode --kind sparse) "
                         "instead of encoding it")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: this process's CPU time (a shared machine; with OMP_NUM_THREADS=1), printed and not "
                         "saved (benchmarks/results holds wall-clock rows)")
    a = ap.parse_args()
    if a.st_backend_python and a.clock == "cpu":
        ap.error("--st-backend-python times the peer in its own process: wall clock only")
    global CLOCK
    CLOCK = time.process_time if a.clock == "cpu" else time.perf_counter

    import torch
    from sentence_transformers import SentenceTransformer

    from hf_dr.data import load_beir
    from hf_dr.models.dense import DenseEncoder

    data = load_beir(SHARED / "data" / a.dataset, split=None)
    texts = data.doc_texts()
    rows = []
    base = {"table": "speed", "dataset": a.dataset, "command": command_line(), "machine": machine(),
            "threads": torch.get_num_threads()}

    def encode_sample() -> tuple[list[str], str]:
        if a.windows:
            from encode_scale import window_rows

            return [r["text"] for r in window_rows(a.windows)], f"{a.windows} 12-word windows"
        sample = texts if a.n_docs <= 0 else random.Random(0).sample(texts, min(a.n_docs, len(texts)))
        return sample, f"{len(sample)} docs"

    where = {"dataset": "scale corpus windows (SciFact, ArguAna, TREC-DL)"} if a.windows else {}
    if "encode" not in a.skip:
        sample, what = encode_sample()
        ours = DenseEncoder.from_pretrained(a.model)
        st = SentenceTransformer(a.model, device="cpu")
        assert st.max_seq_length == ours.max_doc_length, (st.max_seq_length, ours.max_doc_length)
        ours_dps, st_dps = compare_encode(lambda x, **kw: ours.encode_corpus(x, show_progress_bar=False, **kw),
                                          lambda x, **kw: st.encode(x, show_progress_bar=False, **kw),
                                          sample, a.batch_size, a.repeats)
        print(f"encode: hf-dr {ours_dps:.1f} docs/s, sentence-transformers {st_dps:.1f} docs/s, "
              f"ratio {ours_dps / st_dps:.2f}x", flush=True)
        rows.append({**base, **where, "system": "encode: hf-dr vs SentenceTransformer.encode (MiniLM, batch "
                     f"{a.batch_size}, max_len {ours.max_doc_length}, {what})",
                     "metrics": {"hf_dr_docs_per_s": round(ours_dps, 2), "peer_docs_per_s": round(st_dps, 2),
                                 "ratio": round(ours_dps / st_dps, 3)}})

    if "encode-sparse" not in a.skip:
        from sentence_transformers import SparseEncoder

        from hf_dr.models.splade import SPLADECAI

        sample, what = encode_sample()
        st_sparse = SparseEncoder(a.sparse_model, device="cpu")
        ours = SPLADECAI.from_backbone(a.sparse_model, max_doc_length=st_sparse.max_seq_length)
        ours_dps, st_dps = compare_encode(lambda x, **kw: ours.encode_corpus(x, show_progress_bar=False, **kw),
                                          st_sparse.encode_document, sample, a.batch_size, a.repeats)
        print(f"encode sparse: hf-dr SPLADECAI {ours_dps:.1f} docs/s, SparseEncoder {st_dps:.1f} docs/s, "
              f"ratio {ours_dps / st_dps:.2f}x", flush=True)
        rows.append({**base, **where, "system": "encode: SPLADECAI vs sentence-transformers SparseEncoder (splade-tiny, batch "
                     f"{a.batch_size}, max_len {st_sparse.max_seq_length}, {what})",
                     "metrics": {"hf_dr_docs_per_s": round(ours_dps, 2), "peer_docs_per_s": round(st_dps, 2),
                                 "ratio": round(ours_dps / st_dps, 3)}})

    if a.st_backend_python and "encode-st-backend" not in a.skip:
        rows.append({**base, **where, **st_backend_row(a, *encode_sample())})

    if "train-sparse" not in a.skip:
        rows.append({**base, **compare_splade_training(a, data, texts)})

    rows += search_rows(a, data, texts, base)
    if a.clock == "wall":
        save_rows("speed", rows)


if __name__ == "__main__":
    main()
