"""A corpus and nothing else: which weight-free query generator should `hf-dr adapt` use?

    python benchmarks/corpus_only.py --proxy                      # cheap proxy, SciFact (a few minutes on a CPU)
    python benchmarks/corpus_only.py                              # adapt rows: SciFact, all-MiniLM-L6-v2
    python benchmarks/corpus_only.py --datasets scifact,arguana --students minilm,splade-tiny
    python benchmarks/corpus_only.py --generators terms,doc2query:BeIR/query-gen-msmarco-t5-base-v1
    python benchmarks/corpus_only.py --generators terms --learning-rate 2e-5 --judged-dev 20
    python benchmarks/corpus_only.py --students splade-tiny --generators span --method cai   # another method
    python benchmarks/corpus_only.py --sample                     # smoke test: the bundled sample, tiny budget

**Adapt rows.** For each generator, one corpus-only run: ``hf-dr adapt --data D --queries generate
--generator G --model M --method pseudo-margin-mse --output O`` — the training queries are generated
from D's corpus (its queries.jsonl is never read, so the test queries never enter training), every
other setting the command's default, and the model is evaluated on D's ``qrels/test.tsv``. Each row
records the test nDCG@10 / R@100 after, beside the zero-shot row, the paired t-test, the checkpoint the
pseudo-dev set picked and the minutes. ``--judged-dev N`` gives the run ``N`` judged dev queries as a
user would: ``benchmarks/adapt.py``'s copy of the dataset whose ``qrels/dev.tsv`` judges ``N`` seeded
training queries (``qrels/train.tsv``; never a test query; the same ones as ``adapt.py --judged-dev N``),
so selection uses their judgments (rows named ``...:judged=N``). ``--with-real`` adds the same run on
D's own training queries (``qrels/train.tsv``) as the reference a generated set is compared with. Runs of one dataset share one
work folder (the corpus encoding is computed once).

**Proxy** (``--proxy``). For each generator, one query for each of ``--proxy-docs`` (500) documents
drawn by the seed (the same documents for every generator), then what the label stage would see:

* ``bm25 R@100`` — the source document in BM25's top-100 (else the label stage adds it);
* ``teacher top-1`` — the teacher (BM25 top-100 + the source, reranked by the z-score fusion of BM25
  and the student: the label stage's default) ranks the source document first: labels that agree
  with how the query was made;
* ``student top-1`` / ``student MRR@10`` — the zero-shot student (all-MiniLM-L6-v2, full corpus)
  already finds the source first: what there is left to learn;
* ``signal`` — teacher right and student wrong: the queries whose triplets can teach the student
  something the generation vouches for;
* ``words`` — the mean query length.

A ``real`` row gives the same numbers for the dataset's own training queries (``qrels/train.tsv``;
"source" = a judged document) — the profile generated queries would ideally share.
Rows go to benchmarks/results/corpus_only.json (table ``corpus_only`` and ``corpus_only_proxy``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from adapt import with_judged_dev  # noqa: E402  (the same judged dev queries as the real-query rows')
from common import SHARED, command_line, machine, save_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODELS = {"minilm": SHARED / "models" / "all-MiniLM-L6-v2", "splade-tiny": SHARED / "models" / "splade-tiny"}
NAMES = {"minilm": "all-MiniLM-L6-v2", "splade-tiny": "splade-tiny"}
SAMPLE = REPO / "hf_dr" / "data" / "sample" / "scifact-mini"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rel(p: Path) -> str:
    import os

    return os.path.relpath(p, REPO)


def proxy_rows(data: Path, generators: list[str], n_docs: int, max_length: int, work: Path, seed: int = 0,
               cache_dir: Path | None = None) -> list[dict]:
    """The proxy of the module docstring, one row per generator (+ ``real``)."""
    import numpy as np

    from hf_dr.data.beir import has_split, load_beir, load_corpus_data
    from hf_dr.fingerprints import model_fingerprint
    from hf_dr.generation import generate_to_folder
    from hf_dr.labeling.rerankers import FUSION_REFERENCE_SIZE, FusionReranker
    from hf_dr.models.dense import DenseEncoder
    from hf_dr.retrieval import BM25Index, BM25Retriever
    from hf_dr.stage_cache import StageCache

    t0 = time.time()
    corpus = load_corpus_data(data)
    doc_ids, texts = corpus.doc_ids(), corpus.doc_texts()
    index_of = {d: i for i, d in enumerate(doc_ids)}
    bm25 = BM25Index(doc_ids, texts)
    student = DenseEncoder.from_pretrained(str(MODELS["minilm"]), max_length=max_length, max_query_length=max_length)
    # the label stage's own key: a --cache shared with hf-dr adapt runs reuses their corpus encoding
    cache = StageCache(cache_dir or work / "cache")
    emb = cache.array("doc_embeddings", {"corpus": corpus.corpus_fingerprint(), "model": model_fingerprint(student),
                                         "max_length": max_length},
                      lambda: student.encode_corpus(texts, batch_size=32, show_progress_bar=False,
                                                    max_length=max_length))
    log(f"proxy: corpus of {len(doc_ids)} documents indexed and encoded ({(time.time() - t0) / 60:.1f} min)")
    teacher = FusionReranker(bm25, student, doc_embeddings=emb, encoder_name="all-MiniLM-L6-v2",
                             reference_size=FUSION_REFERENCE_SIZE)
    teacher.set_corpus(doc_ids, texts)

    sets = []
    for g in generators:
        t = time.time()
        res = generate_to_folder(data, work / f"proxy-queries-{g.replace('/', '_').replace(':', '_')}", g,
                                 num_queries=n_docs, seed=seed, show_progress_bar=False, rank=0, world_size=1)
        sets.append((g, res.queries, {q: {d} for q, d in res.sources.items()}, time.time() - t))
    if has_split(data, "train"):
        train = load_beir(data, split="train")
        q = train.split_queries()
        qids = sorted(q)[: n_docs]
        sets.append(("real", {x: q[x] for x in qids},
                     {x: {d for d, g in train.qrels[x].items() if g > 0} for x in qids}, 0.0))
    rows = []
    for name, queries, relevant, gen_s in sets:
        t = time.time()
        qids = [q for q in queries if relevant[q] & set(index_of)]
        run = BM25Retriever.from_index(bm25).search({q: queries[q] for q in qids}, 100)
        qemb = student.encode_queries([queries[q] for q in qids], batch_size=64, show_progress_bar=False)
        scores = qemb @ emb.T
        teacher.query_embeddings.update(zip(qids, qemb))  # the teacher's dense half: the same student
        cands = {q: {**run[q], **{d: 0.0 for d in sorted(relevant[q]) if d not in run[q]}} for q in qids}
        reranked = teacher.rerank(cands, queries, show_progress_bar=False)
        bm25_r, t1, s1, s_rr, signal = [], [], [], [], []
        for i, q in enumerate(qids):
            rel_ = relevant[q]
            bm25_r.append(bool(rel_ & set(run[q])))
            # the label stage's order: score, then doc id
            top_t = min(reranked[q].items(), key=lambda x: (-x[1], x[0]))[0] if reranked[q] else None
            t1.append(top_t in rel_)
            order = np.argsort(-scores[i], kind="stable")[:10]
            ranks = [r for r, j in enumerate(order) if doc_ids[j] in rel_]
            s1.append(bool(ranks) and ranks[0] == 0)
            s_rr.append(1.0 / (ranks[0] + 1) if ranks else 0.0)
            signal.append(t1[-1] and not s1[-1])
        metrics = {"bm25 R@100": np.mean(bm25_r), "teacher top-1": np.mean(t1), "student top-1": np.mean(s1),
                   "student MRR@10": np.mean(s_rr), "signal": np.mean(signal),
                   "words": float(np.mean([len(queries[q].split()) for q in qids]))}
        rows.append({"table": "corpus_only_proxy", "dataset": data.name, "system": name, "row": name,
                     "command": command_line(), "machine": machine(), "queries": len(qids),
                     "metrics": {k: round(float(v), 1 if k == "words" else 4) for k, v in metrics.items()},
                     "seconds": {"generate": round(gen_s, 1), "measure": round(time.time() - t, 1)}})
        log(f"proxy {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
    return rows


def adapt_rows(data: Path, dataset: str, students: list[str], generators: list[str], work: Path, with_real: bool,
               extra: list[str], save=None, learning_rate: str | None = None, judged_dev: int = 0,
               method: str = "pseudo-margin-mse") -> list[dict]:
    """One corpus-only ``hf-dr adapt --method METHOD`` per (student, generator); ``save(rows)`` after
    each run (a run cut short loses only itself). ``learning_rate``: passed on, and named in the rows
    and output folders; ``judged_dev``: that many judged dev queries (:func:`with_judged_dev`), named
    likewise; a ``method`` other than pseudo-margin-mse likewise."""
    if learning_rate:
        extra = [*extra, "--learning-rate", learning_rate]
    where = f" on {machine()}" if _cuda() else ""
    other = method != "pseudo-margin-mse"
    suffix = (f"-{method}" if other else "") + (f"-lr{learning_rate}" if learning_rate else "") + \
        (f"-judged{judged_dev}" if judged_dev else "")
    tag = (f":{method}" if other else "") + (f":lr={learning_rate}" if learning_rate else "") + \
        (f":judged={judged_dev}" if judged_dev else "")
    if judged_dev:
        data = with_judged_dev(data, work, judged_dev)
    cli = [sys.executable, "-m", "hf_dr.cli"]
    rows = []
    for student in students:
        # (cai trains a SPLADE student by itself; pseudo-margin-mse is told the kind)
        method_flags = ["--kind", "sparse"] if student == "splade-tiny" and method == "pseudo-margin-mse" else []
        for g in generators + ["real"] * with_real:
            out = work / f"{dataset}-{student}-{g.replace('/', '_').replace(':', '_')}{suffix}"
            queries = [] if g == "real" else ["--queries", "generate", "--generator", g]
            cmd = ["adapt", "--data", str(data), "--model", str(MODELS[student]), "--method", method,
                   *queries, *method_flags, *extra, "--output", str(out), "--work-dir", str(work / f"work-{dataset}"),
                   "--overwrite"]
            log("$ hf-dr " + " ".join(cmd))
            subprocess.run(cli + cmd, cwd=REPO, check=True)
            m = json.loads((out / "metrics.json").read_text())
            shown = "hf-dr " + " ".join(rel(Path(x)) if x.startswith("/") else x for x in cmd)
            b = m["budget"]
            q = m.get("queries") or {}
            rows.append({"table": "corpus_only", "dataset": dataset, "row": f"{student}:zero-shot",
                         "system": f"{NAMES[student]} zero-shot{where}",
                         "command": shown, "machine": machine(),
                         "metrics": {k: round(v, 4) for k, v in m["before"].items() if k in ("ndcg@10", "recall@100")}})
            what = f"{q.get('queries')} queries by {g}" if g != "real" else "the dataset's own training queries"
            rows.append({"table": "corpus_only", "dataset": dataset,
                         "row": f"{student}:{g}{tag}",
                         "system": f"{NAMES[student]} + hf-dr adapt --method {method} ({what}; "
                                   f"{b['steps']} steps; {'judged' if m.get('selection_on') == 'judged' else 'pseudo'}-dev "
                                   f"picked step {m['selected_step']}){where}",
                         "command": shown, "machine": machine(),
                         "metrics": {**{k: round(v, 4) for k, v in m["after"].items() if k in ("ndcg@10", "recall@100")},
                                     "p (t-test)": round(m["p_value"], 4), "minutes": b["minutes"]},
                         "selection_on": m.get("selection_on"), "judged_dev": m.get("judged_dev"),
                         "queries": q, "config": m.get("config"), "dev": m["dev"], "selected_step": m["selected_step"],
                         "below_zero_shot": m["below_zero_shot"], "verdict": m.get("verdict"),
                         "pseudo_dev_fall": m.get("pseudo_dev_fall"), "budget": b})
            if save is not None:
                save(rows[-2:])
            log(f"{dataset} {student} {g}: {m['before']['ndcg@10']:.4f} -> {m['after']['ndcg@10']:.4f} "
                f"(p = {m['p_value']:.3g}, step {m['selected_step']})")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="scifact", help="comma-separated folders of ../shared/data")
    ap.add_argument("--students", default="minilm", help="minilm, splade-tiny (comma-separated)")
    ap.add_argument("--generators", default="cloze,span,terms")
    ap.add_argument("--proxy", action="store_true", help="the cheap proxy only (no training)")
    ap.add_argument("--proxy-docs", type=int, default=500, help="proxy: documents drawn, one query each")
    ap.add_argument("--max-length", type=int, default=256, help="proxy: the student's max length (MiniLM's)")
    ap.add_argument("--cache", default=None, help="proxy: the stage cache of the corpus encoding (default "
                    "WORK/DATASET/cache); an adapt work folder's cache (e.g. runs/corpus_only/work-scifact/cache) "
                    "holds the same encoding under the same key")
    ap.add_argument("--with-real", action="store_true", help="adapt rows: also the dataset's own training queries")
    ap.add_argument("--sample", action="store_true", help="smoke test: the bundled sample, 20 steps, 100 proxy docs")
    ap.add_argument("--learning-rate", default=None,
                    help="adapt rows: pass --learning-rate to hf-dr adapt (rows named ...:lr=VALUE); default: adapt's own")
    ap.add_argument("--judged-dev", type=int, default=0, metavar="N",
                    help="adapt rows: N of the dataset's judged training queries as qrels/dev.tsv (selection on them)")
    ap.add_argument("--method", default="pseudo-margin-mse",
                    help="adapt rows: hf-dr adapt's method (rows and folders named by it when not pseudo-margin-mse)")
    ap.add_argument("--work", default="runs/corpus_only")
    a = ap.parse_args()
    work = (REPO / a.work).resolve() if not Path(a.work).is_absolute() else Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    generators = a.generators.split(",")
    datasets = [SAMPLE] if a.sample else [SHARED / "data" / d for d in a.datasets.split(",")]
    extra = ["--max-steps", "20", "--eval-steps", "10", "--dev-queries", "10"] if a.sample else []
    for data in datasets:
        name = data.name
        if a.proxy:
            rows = proxy_rows(data, generators, 100 if a.sample else a.proxy_docs, a.max_length, work / name,
                              cache_dir=Path(a.cache) if a.cache else None)
            if not a.sample:
                save_rows("corpus_only", rows, merge_key=("table", "dataset", "row", "machine"))
            continue
        adapt_rows(data, name, a.students.split(","), generators, work, a.with_real, extra,
                   learning_rate=a.learning_rate, judged_dev=a.judged_dev, method=a.method, save=None if a.sample else
                   (lambda rows: save_rows("corpus_only", rows, merge_key=("table", "dataset", "row", "machine"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
