"""DoDress on SciFact (papers/002 Table 2 in miniature), on CPU.

Target = SciFact; only its 809 *train* queries are used, without their labels. Teacher =
z-score fusion of BM25 and all-MiniLM-L6-v2 over the BM25 top-100 (no monoT5 / cross-encoder
offline). Student = all-MiniLM-L6-v2, fine-tuned with RankNet (Eq. 4 of papers/004) on
k x m pseudo-labelled triplets per query, the best checkpoint picked by nDCG@10 on the
pseudo-labelled dev set; evaluated on the 300 SciFact *test* queries.

    python benchmarks/dodress.py --work_dir ../dodress_runs

Grid: negatives SimANS / BM25 / random x k in {1, 2}, m = 10, run in that order of
importance (k=1 first). Labelling stages (BM25 run, corpus embeddings, fused run, dense run)
are cached in ``work_dir/cache`` and computed once for the whole grid; each row is written to
``benchmarks/results/dodress.json`` as soon as it is measured, so an interrupted run keeps
the rows it finished (re-running skips nothing but the cached labelling stages).

CPU reductions (the paper: 10k steps, batch 8, lr 2e-6, max length 350, on a GPU) are the
defaults below and are stated next to the numbers in docs/dodress.md and the README.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

METRICS = ("ndcg@10", "recall@100")
GRID = [("simans", 1), ("bm25", 1), ("random", 1), ("simans", 2), ("bm25", 2), ("random", 2)]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work_dir", required=True)
    ap.add_argument("--data", default=str(SHARED / "data" / "scifact"))
    ap.add_argument("--model", default=str(SHARED / "models" / "all-MiniLM-L6-v2"))
    ap.add_argument("--max_length", type=int, default=128,
                    help="tokens per text for labelling, training and evaluation (paper: 350; MiniLM default 256)")
    ap.add_argument("--steps", type=int, default=48, help="training steps per cell (paper: 10,000)")
    ap.add_argument("--eval_steps", type=int, default=0,
                    help="dev evaluation / best-checkpoint interval (paper: 1,000); 0: no dev selection, last step kept")
    ap.add_argument("--lr", type=float, default=2e-5, help="peak learning rate, cosine decay (paper: 2e-6 over 10k steps)")
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--m", type=int, default=10)
    ap.add_argument("--dev_queries", type=int, default=10, help="train queries held out as the pseudo dev set (paper: 40-50)")
    ap.add_argument("--cells", default=",".join(f"{n}:{k}" for n, k in GRID), help="negatives:k cells, in order")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--simans_score_scale", type=float, default=1.0,
                    help="dense scores x this before SimANS Eq. 1 (20: the cosine student's training scale)")
    ap.add_argument("--no_refs", action="store_true", help="skip the zero-shot / BM25 / teacher rows")
    args = ap.parse_args()

    import numpy as np
    import torch

    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate, evaluate_run
    from hf_dr.factory import evaluate_model
    from hf_dr.labeling.finetune import train_ranknet
    from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels
    from hf_dr.labeling.rerankers import FusionReranker
    from hf_dr.models.dense import DenseEncoder
    from hf_dr.retrieval import BM25Index, EncoderRetriever

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    cmd = command_line()
    L = args.max_length
    setting = f"max length {L}, {args.steps} steps x batch {args.batch_size}, lr {args.lr:g} cosine" + \
        (f", best of dev every {args.eval_steps}" if args.eval_steps > 0 else ", last step")
    base_row = {"table": "dodress", "dataset": "scifact (test)", "command": cmd, "machine": machine()}

    train_data = load_beir(args.data, split="train")
    test_data = load_beir(args.data, split="test")
    bm25 = BM25Index.from_beir(train_data)
    teacher_model = DenseEncoder.from_pretrained(args.model, max_length=L, max_query_length=L)
    model_name = f"{Path(args.model).name}@{L}"

    def label(neg: str, k: int):
        cfg = PseudoLabelConfig(negatives=neg, k=k, m=args.m, dev_queries=args.dev_queries, seed=args.seed,
                                dense_max_length=L, simans_score_scale=args.simans_score_scale)
        return build_pseudo_labels(train_data, work / f"labels-{neg}-k{k}", cfg, reranker="fusion",
                                   dense_encoder=teacher_model, dense_name=model_name, bm25=bm25,
                                   cache_dir=work / "cache", command=cmd)

    # labelling stages shared by the grid (the first cell computes them)
    t = time.time()
    first = label(*GRID[0])
    log(f"labelled ({first.stats['cache']}) in {time.time() - t:.0f}s: {first.stats['triplets']} triplets")

    # reference rows from the cached corpus embeddings: zero-shot student, BM25, the teacher
    if not args.no_refs:
        emb = np.load(sorted((work / "cache").glob("doc_embeddings-*.npy"))[0])
        qs = test_data.split_queries()
        q_emb = teacher_model.encode_queries(list(qs.values()))
        zero = evaluate(EncoderRetriever(teacher_model, emb, test_data.doc_ids(), use_gpu=False), test_data,
                        metrics=METRICS)
        bm25_run = bm25.search(qs, top_k=100)
        teacher = FusionReranker(bm25, teacher_model, doc_embeddings=emb, encoder_name=model_name)
        teacher.query_embeddings.update(zip(qs, q_emb))
        fused = teacher.rerank(bm25_run, qs, show_progress_bar=False)
        refs = [(f"all-MiniLM-L6-v2 zero-shot ({setting.split(',')[0]})", zero.aggregate),
                ("BM25 (bm25s, top-100)", evaluate_run(test_data.qrels, bm25_run, METRICS).aggregate),
                ("teacher: BM25 top-100 reranked by z-score fusion BM25 + MiniLM",
                 evaluate_run(test_data.qrels, fused, METRICS).aggregate)]
        save_rows("dodress", [{**base_row, "system": s, "metrics": {m: round(v, 4) for m, v in agg.items()}}
                              for s, agg in refs])
        for s, agg in refs:
            log(f"{s}: {agg}")

    for cell in args.cells.split(","):
        neg, k = cell.split(":")
        k = int(k)
        t = time.time()
        labels = label(neg, k)
        torch.manual_seed(args.seed)
        student = DenseEncoder.from_pretrained(args.model, max_length=L, max_query_length=L)
        out = work / f"student-{neg}-k{k}"
        trainer = train_ranknet(student, labels.train.shuffle(seed=args.seed), out,
                                dev=labels.dev if args.eval_steps > 0 else None, max_length=L,
                                learning_rate=args.lr, batch_size=args.batch_size, max_steps=args.steps,
                                eval_steps=args.eval_steps or args.steps, seed=args.seed, logging_steps=max(1, args.steps // 8),
                                disable_tqdm=True)
        dev_hist = [h["eval_ndcg@10"] for h in trainer.state.log_history if "eval_ndcg@10" in h]
        train_s = time.time() - t
        res, _ = evaluate_model(trainer.model, test_data, top_k=1000, metrics=METRICS, show_progress_bar=False)
        scaled = f" on {args.simans_score_scale:g} x cosine" if neg == "simans" and args.simans_score_scale != 1 else ""
        row = {**base_row, "system": f"DoDress: {neg}{scaled} negatives, k={k}, m={args.m} ({setting})",
               "metrics": {m: round(v, 4) for m, v in res.aggregate.items()},
               "triplets": labels.stats["triplets"], "dev_ndcg@10": [round(v, 4) for v in dev_hist],
               "best_checkpoint": trainer.state.best_model_checkpoint and Path(trainer.state.best_model_checkpoint).name}
        save_rows("dodress", [row])
        log(f"{neg} k={k}: {res.aggregate} (dev {dev_hist}, best {row['best_checkpoint']}); "
            f"train {train_s:.0f}s, total {time.time() - t:.0f}s")
        shutil.rmtree(out, ignore_errors=True)  # checkpoints are not kept (disk)
        (work / f"student-{neg}-k{k}.json").write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
