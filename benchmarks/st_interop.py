"""Sentence Transformers out: an `hf-dr adapt` output, loaded by Sentence Transformers, ranks as in hf-dr.

    python benchmarks/st_interop.py                       # the SciFact outputs of benchmarks/adapt.py (runs/adapt/scifact-*)
    python benchmarks/st_interop.py --data ../shared/data/scifact --outputs runs/adapt/scifact-minilm-berm-defaults
    python benchmarks/st_interop.py --sample              # the bundled 500-document sample: two tiny adapt runs first

For every output folder OUT (written by `hf-dr adapt`):

* hf-dr: `hf-dr evaluate --data DATA --retriever dense|sparse --model OUT/model --output ...`, the command
  as a user types it, in its own process (the prompts, similarity and lengths saved with the model);
* Sentence Transformers: `SentenceTransformer(OUT/model)` / `SparseEncoder(OUT/model)` (with
  `trust_remote_code=True` when the folder needs it: SPLADE-CAI's IDF module), `encode_document` over
  the corpus and `encode_query` over the test queries, exact search by the model's own `similarity`
  (top 1000), scored by hf-dr's one metric path (`hf_dr.evaluation.evaluate`, its self-match rule
  included).

A row per output: both nDCG@10 (and R@100) and whether they agree to 4 decimals. An output that
Sentence Transformers cannot load (DDR) gets a row saying so. Results: benchmarks/results/st_interop.json.

`--sample` proves the path in a few CPU minutes: the bundled sample (hf_dr/data/sample/scifact-mini)
with 30 of its judged queries as training queries and 20 as the test split, `hf-dr adapt` of
all-MiniLM-L6-v2 (dodress, with an E5-style query prompt by flag) and of splade-tiny (cai: IDF on
documents) at 4 steps, then the check above.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "hf_dr" / "data" / "sample" / "scifact-mini"
MINILM, SPLADE_TINY = SHARED / "models" / "all-MiniLM-L6-v2", SHARED / "models" / "splade-tiny"
METRICS = ("ndcg@10", "recall@100")
TINY = ["--max-steps", "4", "--eval-steps", "2", "--max-length", "64", "--batch-size", "4", "--m", "2",
        "--learning-rate", "1e-4", "--negatives", "bm25"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rel(p: Path) -> str:
    return os.path.relpath(Path(p).resolve(), REPO)


def hf_cli(*args) -> None:
    cmd = [sys.executable, "-m", "hf_dr.cli", *map(str, args)]
    log("$ hf-dr " + " ".join(map(str, args)))
    subprocess.run(cmd, cwd=REPO, check=True)


class STRetriever:
    """A :class:`hf_dr.retrieval.Retriever` made of Sentence Transformers calls only: ``encode_document``
    once, then ``encode_query`` + ``similarity`` against every document (exact search)."""

    name = "sentence-transformers"

    def __init__(self, model, doc_ids, doc_texts, batch_size: int = 32):
        self.model, self.doc_ids = model, list(doc_ids)
        self.docs = model.encode_document(list(doc_texts), batch_size=batch_size, convert_to_tensor=True,
                                          show_progress_bar=False)

    def __len__(self) -> int:
        return len(self.doc_ids)

    def search(self, queries, k: int = 1000, *, show_progress_bar=None):
        import torch

        from hf_dr.retrieval.run import run_from_scores

        qids = list(queries)
        run = {}
        for s in range(0, len(qids), 64):
            block = qids[s:s + 64]
            q = self.model.encode_query([queries[i] for i in block], convert_to_tensor=True, show_progress_bar=False)
            scores = self.model.similarity(q, self.docs)
            scores = scores.to_dense() if scores.is_sparse else scores
            top = torch.topk(scores.float(), min(k, len(self.doc_ids)), dim=1)
            run.update(run_from_scores(top.values.numpy(), top.indices.numpy(), block, self.doc_ids))
        return run


def check(out: Path, data: Path, dataset: str, work: Path) -> dict:
    """The row of one `hf-dr adapt` output folder ``out``."""
    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate
    from hf_dr.models.st_folder import sentence_transformers_class

    adapt = json.loads((out / "metrics.json").read_text())
    st_kind = sentence_transformers_class(out / "model")
    row = {"table": "st_interop", "dataset": dataset, "output": rel(out), "machine": machine(),
           "system": f"{Path(str(adapt['model'])).name} + hf-dr adapt --method {adapt['method']}: OUT/model"
                     + (" (the starting model, kept)" if adapt.get("kept_starting_model") else ""),
           "command": command_line(), "adapt_command": adapt.get("command")}
    if st_kind is None:
        return {**row, "metrics": {}, "note": "Sentence Transformers cannot load this model (no modules.json)"}
    cls_name, remote, similarity = st_kind
    retriever_kind = "sparse" if cls_name == "SparseEncoder" else "dense"
    t = time.time()
    ev = work / f"evaluate-{out.name}"
    hf_cli("evaluate", "--data", data, "--retriever", retriever_kind, "--model", out / "model", "--metrics", *METRICS,
           "--output", ev)
    ours = json.loads((ev / "metrics.json").read_text())["metrics"]
    hf_minutes = (time.time() - t) / 60

    import sentence_transformers

    t = time.time()
    model = getattr(sentence_transformers, cls_name)(str(out / "model"), device="cpu",
                                                     **({"trust_remote_code": True} if remote else {}))
    test = load_beir(data, split="test")
    res = evaluate(STRetriever(model, test.doc_ids(), test.doc_texts()), test, metrics=METRICS)
    st_minutes = (time.time() - t) / 60
    theirs = res.aggregate
    same = all(round(ours[m], 4) == round(theirs[m], 4) for m in METRICS)
    loader = f'{cls_name}("OUT/model"{", trust_remote_code=True" if remote else ""})'
    log(f"{out.name}: hf-dr evaluate nDCG@10 {ours['ndcg@10']:.4f}, {loader} + exact search {theirs['ndcg@10']:.4f}"
        f" ({'equal' if same else 'DIFFERENT'} to 4 decimals)")
    return {**row, "st_loader": loader, "similarity": similarity, "queries": res.n_queries,
            "kept_starting_model": adapt.get("kept_starting_model"),
            "metrics": {"hf-dr nDCG@10": round(ours["ndcg@10"], 4), "ST nDCG@10": round(theirs["ndcg@10"], 4),
                        "hf-dr R@100": round(ours["recall@100"], 4), "ST R@100": round(theirs["recall@100"], 4),
                        "equal to 4 decimals": same,
                        "max abs difference": float(max(abs(ours[m] - theirs[m]) for m in METRICS))},
            "wall_minutes": {"hf-dr evaluate": round(hf_minutes, 2), "sentence-transformers": round(st_minutes, 2)}}


def sample_outputs(work: Path) -> tuple[Path, list[Path]]:
    """The bundled sample split 30 / 20 (training / test queries) and two tiny `hf-dr adapt` outputs on it
    (made once; delete ``work`` to make them again)."""
    data = work / "scifact-mini"
    if not (data / "qrels" / "train.tsv").is_file():
        shutil.copytree(SAMPLE, data, dirs_exist_ok=True)
        head, *rows = (data / "qrels" / "test.tsv").read_text().splitlines()
        qids = list(dict.fromkeys(r.split("\t")[0] for r in rows))
        train = set(qids[:30])
        for split, keep in (("train", True), ("test", False)):
            lines = [r for r in rows if (r.split("\t")[0] in train) == keep]
            (data / "qrels" / f"{split}.tsv").write_text("\n".join([head] + lines) + "\n")
    dense, sparse = work / "minilm-dodress", work / "splade-tiny-cai"
    if not (dense / "metrics.json").is_file():
        hf_cli("adapt", "--data", data, "--model", MINILM, "--method", "dodress", "--output", dense, "--overwrite",
               "--work-dir", work / "work-minilm", "--query-prompt", "query: ", *TINY)
    if not (sparse / "metrics.json").is_file():
        hf_cli("adapt", "--data", data, "--model", SPLADE_TINY, "--method", "cai", "--output", sparse, "--overwrite",
               "--labels", work / "work-minilm" / "labels", "--mlm-steps", "0", "--no-vocabulary", *TINY)
    return data, [dense, sparse]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(SHARED / "data" / "scifact"))
    ap.add_argument("--outputs", default=None,
                    help="comma-separated `hf-dr adapt` output folders (default: runs/adapt/<dataset>-*/ with metrics.json)")
    ap.add_argument("--sample", action="store_true", help="the bundled sample and two tiny adapt runs (see above)")
    ap.add_argument("--work", default="runs/st_interop")
    a = ap.parse_args()
    work = REPO / a.work
    work.mkdir(parents=True, exist_ok=True)
    if a.sample:
        data, outputs = sample_outputs(work)
    else:
        data = Path(a.data)
        outputs = ([Path(o) for o in a.outputs.split(",")] if a.outputs else
                   sorted(p.parent for p in (REPO / "runs" / "adapt").glob(f"{data.name}-*/metrics.json")))
    if not outputs:
        raise SystemExit(f"no `hf-dr adapt` output for {data.name}: run python benchmarks/adapt.py first, or give --outputs")
    rows = []
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        for out in outputs:
            rows.append(check(Path(out).resolve(), data, data.name, Path(tmp)))
            save_rows("st_interop", rows, merge_key=("table", "dataset", "output"))
    bad = [r["output"] for r in rows if r["metrics"] and not r["metrics"]["equal to 4 decimals"]]
    if bad:
        log(f"Sentence Transformers ranks differently from hf-dr for: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
