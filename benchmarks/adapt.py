"""`hf-dr adapt` on a target corpus with training queries: does adaptation help, and at what CPU cost?

    python benchmarks/adapt.py                                   # SciFact, the default rows
    python benchmarks/adapt.py --rows splade-tiny:cai,minilm:berm     # student:method: `hf-dr adapt` with no flag
    python benchmarks/adapt.py --rows minilm:pseudo-margin-mse:500    # student:method[:steps][:flag=value...]
    python benchmarks/adapt.py --rows splade-tiny:cai:300:mlm-steps=0:margin-scale=auto
    python benchmarks/adapt.py --data ../shared/data/msmarco-trecdl2019 --train-fraction 0.5
    python benchmarks/adapt.py --rows ddr-rem:ddr:300             # DDR: a target DAM for a source-trained REM

A row ``student:method`` runs ``hf-dr adapt --data D --model M --method X --output O`` with no other
flag: the command a user types, every setting its default (labels too: the adapt run labels its own
training queries; rows of one dataset share one work folder, so the label stage is computed once).
These are the rows whose configuration the defaults of `hf-dr adapt` are (``METHOD_DEFAULTS``; the
row records it as ``config``, and tests/test_adapt.py checks the two agree).
A row with steps or ``flag=value`` parts (passed to `hf-dr adapt` as ``--flag value``) is an
experiment: it trains on the shared `hf-dr label` set below with the benchmark's budget flags.

One labelled set per dataset (`hf-dr label`: its *train* queries, BM25 top-100 reranked by the
z-score fusion of BM25 and all-MiniLM-L6-v2, SimANS negatives on the 20 x cosine scale, 20
training queries held out as the pseudo-dev set), then one `hf-dr adapt ... --labels` run per
row (student x method), each a separate process, one at a time. Every row records the test
nDCG@10 / R@100 before and after, the paired t-test, the checkpoint the pseudo-dev set picked
(step 0 = the starting model kept), the last checkpoint's test score when another was picked, and
the CPU budget (steps, batch, max length, minutes).
The ``ddr-rem`` student is a DDR REM trained on a source domain, built first (skipped when it
exists) by ``benchmarks/ddr_grid.py`` in ``WORK/ddr``: its miniature setting (all-MiniLM-L6-v2, a
source DAM by 60 MLM steps on the TREC-DL 2019 passages, the REM trained for 0.3 epoch on their
graded judgments, documents cut at 128 tokens; docs/ddr.md). Its zero-shot row is that REM on its
source DAM; `--method ddr` gives it a target DAM.
Reference rows: BM25 and the teacher (BM25 top-100 reranked by the same fusion) on the test split.
Work folders go under ``--work`` (default ``runs/adapt``); rows are saved as each finishes.

A folder whose queries are all judged in ``qrels/test.tsv`` (TREC-DL, ArguAna) has no training
queries: ``--train-fraction F`` writes a copy beside the work folders whose ``qrels/train.tsv``
names a seeded F of the queries (their judgments are never read: `hf-dr adapt` takes only their
ids) and whose ``qrels/test.tsv`` keeps the rest, the only queries evaluated.

``--judged-dev N`` writes a copy (``DATA-judgedN``) whose ``qrels/dev.tsv`` judges N seeded
training queries (from ``qrels/train.tsv``): the user's judged dev queries, never trained on, which
then choose the checkpoint. Every row records the verdict (better on labelled queries / better on
pseudo-labels only / kept the starting model) and its numbers, so a run with and one without
judged queries count how many runs that end below zero-shot each verdict catches.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODELS = {"minilm": SHARED / "models" / "all-MiniLM-L6-v2", "splade-tiny": SHARED / "models" / "splade-tiny"}
NAMES = {"minilm": "all-MiniLM-L6-v2", "splade-tiny": "splade-tiny",
         "ddr-rem": "DDR REM (all-MiniLM-L6-v2; source DAM + REM on TREC-DL 2019)"}
# ddr_grid.py's miniature, building only the source DAM and the REM trained on it
DDR_REM_BUILD = ["benchmarks/ddr_grid.py", "--targets", "", "--systems", "DDR (source DAM)",
                 "--mlm_steps", "60", "--rem_epochs", "0.3"]
DEFAULT_ROWS = "splade-tiny:cai,minilm:berm,minilm:pseudo-margin-mse,minilm:dodress"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd: list[str]) -> None:
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, cwd=REPO, check=True)


def rel(p: Path) -> str:
    import os

    return os.path.relpath(p, REPO)


def reference_rows(data_dir: Path, dataset: str, max_length: int) -> list[dict]:
    """BM25 and the teacher (the label stage's fusion reranker) on the test split."""
    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate_run
    from hf_dr.labeling.rerankers import FusionReranker
    from hf_dr.models.dense import DenseEncoder
    from hf_dr.retrieval import BM25Retriever

    test = load_beir(data_dir, split="test")
    queries = test.split_queries()
    bm25 = BM25Retriever.from_data(test)
    t = time.time()
    run100 = bm25.search(queries, 100)
    rows = [("BM25 (bm25s, stemmed; top-100)", evaluate_run(test.qrels, run100, ("ndcg@10", "recall@100")), t)]
    t = time.time()
    encoder = DenseEncoder.from_pretrained(str(MODELS["minilm"]), max_length=max_length, max_query_length=max_length)
    emb = encoder.encode_corpus(test.doc_texts(), show_progress_bar=False)
    teacher = FusionReranker(bm25.index, encoder, doc_embeddings=emb, encoder_name="all-MiniLM-L6-v2")
    teacher.set_corpus(test.doc_ids(), test.doc_texts())
    reranked = teacher.rerank(run100, queries, show_progress_bar=False)
    rows.append((f"teacher: BM25 top-100 reranked by z-score fusion BM25 + all-MiniLM-L6-v2 (max length {max_length})",
                 evaluate_run(test.qrels, reranked, ("ndcg@10", "recall@100")), t))
    return [{"table": "adapt", "dataset": dataset, "row": row, "system": name, "command": command_line(), "machine": machine(),
             "metrics": {k: round(v, 4) for k, v in res.aggregate.items()}, "minutes": round((time.time() - t0) / 60, 2)}
            for row, (name, res, t0) in zip(("bm25", "teacher"), rows)]


def split_queries(data: Path, work: Path, fraction: float, seed: int = 0) -> Path:
    """A copy of ``data`` (corpus and queries linked) whose judged queries are split: a seeded
    ``fraction`` in ``qrels/train.tsv`` (training queries), the rest in ``qrels/test.tsv``."""
    import random

    head, *rows = (data / "qrels" / "test.tsv").read_text().splitlines()
    qids = sorted(dict.fromkeys(r.split("\t")[0] for r in rows))
    random.Random(seed).shuffle(qids)
    train = set(qids[:round(fraction * len(qids))])
    if not train or len(train) == len(qids):
        raise SystemExit(f"--train-fraction {fraction} leaves no training or no test query of {len(qids)}")
    out = work / f"{data.name}-train{round(100 * fraction)}"
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        link = out / name
        if not link.exists():
            link.symlink_to((data / name).resolve())
    for split, keep in (("train", True), ("test", False)):
        lines = [r for r in rows if (r.split("\t")[0] in train) == keep]
        (out / "qrels" / f"{split}.tsv").write_text("\n".join([head] + lines) + "\n")
    log(f"{out.name}: {len(train)} training queries, {len(qids) - len(train)} test queries")
    return out


def with_judged_dev(data: Path, work: Path, n: int, seed: int = 0) -> Path:
    """A copy of ``data`` (corpus, queries and the other qrels linked) whose ``qrels/dev.tsv`` holds the
    judgments of ``n`` seeded queries of ``qrels/train.tsv`` (they stay listed there; `hf-dr label`
    and `hf-dr adapt` leave them out of training)."""
    import random

    head, *rows = (data / "qrels" / "train.tsv").read_text().splitlines()
    qids = sorted(dict.fromkeys(r.split("\t")[0] for r in rows if int(r.split("\t")[-1]) > 0))
    random.Random(seed).shuffle(qids)
    dev = set(qids[:n])
    out = work / f"{data.name}-judged{n}"
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"):
        link = out / name
        if (data / name).exists() and not link.exists():
            link.symlink_to((data / name).resolve())
    (out / "qrels" / "dev.tsv").write_text("\n".join([head] + [r for r in rows if r.split("\t")[0] in dev]) + "\n")
    log(f"{out.name}: {len(dev)} judged dev queries (qrels/dev.tsv), never trained on")
    return out


def parse_row(spec: str, default_steps: int) -> tuple[str, str, int | None, dict[str, str]]:
    """``student:method[:steps][:flag=value...]`` -> (student, method, steps, {flag: value}); a bare
    ``student:method`` -> steps None (a defaults row: `hf-dr adapt` with no flag)."""
    student, method, *rest = spec.split(":")
    if not rest:
        return student, method, None, {}
    steps = int(rest.pop(0)) if rest and "=" not in rest[0] else default_steps
    extra = dict(part.split("=", 1) for part in rest)
    return student, method, steps, extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(SHARED / "data" / "scifact"))
    ap.add_argument("--rows", default=DEFAULT_ROWS,
                    help="student:method[:steps], comma-separated, run in this order")
    ap.add_argument("--max-steps", type=int, default=300, help="steps of a row that names none")
    ap.add_argument("--eval-steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--learning-rate", type=float, default=2e-5)
    ap.add_argument("--max-length", type=int, default=256, help="MiniLM's default; the labels' dense encoding too")
    ap.add_argument("--dev-queries", type=int, default=20,
                    help="training queries held out as the pseudo-dev set (20 candidates each: the "
                         "teacher's top 10 and 10 hard negatives; formerly 100: 10 + 90 random)")
    ap.add_argument("--judged-dev", type=int, default=None, metavar="N",
                    help="judge N training queries for selection: a copy of --data with qrels/dev.tsv")
    ap.add_argument("--mlm-steps", type=int, default=300, help="cai: continual MLM steps")
    ap.add_argument("--work", default="runs/adapt")
    ap.add_argument("--no-refs", action="store_true", help="skip the BM25 / teacher rows")
    ap.add_argument("--train-fraction", type=float, default=None,
                    help="for a folder without training queries: train on this seeded fraction of its judged "
                         "queries, evaluate on the rest (a copy under --work; see the module docstring)")
    a = ap.parse_args()
    data = Path(a.data)
    work = (REPO / a.work).resolve() if not Path(a.work).is_absolute() else Path(a.work)
    if a.train_fraction is not None:
        data = split_queries(data, work, a.train_fraction)
    if a.judged_dev:
        data = with_judged_dev(data, work, a.judged_dev)
    dataset = data.name
    cli = [sys.executable, "-m", "hf_dr.cli"]
    labels = work / f"labels-{dataset}"
    specs = [parse_row(spec, a.max_steps) + (spec,) for spec in a.rows.split(",")]
    build_rem = ""
    if any(student == "ddr-rem" for student, *_ in specs):
        run([sys.executable] + DDR_REM_BUILD + ["--work_dir", str(work / "ddr")])
        MODELS["ddr-rem"] = work / "ddr" / "rem"
        build_rem = shlex.join(["python", *DDR_REM_BUILD, "--work_dir", f"{a.work}/ddr"]) + " && "
    if any(steps is not None for _, _, steps, _, _ in specs):
        # the experiments' shared label set; stages cached (beside the output): a re-run redoes only what changed
        run(cli + ["label", "--data", str(data), "--split", "train", "--dense-model", str(MODELS["minilm"]),
                   "--max-length", str(a.max_length), "--negatives", "simans", "--simans-score-scale", "20",
                   "--dev-queries", str(a.dev_queries), "--output", str(labels), "--overwrite"])
    for student, method, max_steps, extra, spec in specs:
        defaults = max_steps is None
        out = work / "-".join([dataset, student, method] + [f"{k}{v}" for k, v in extra.items()]
                              + ["defaults"] * defaults)
        shown_data = rel(data) if a.train_fraction is None and not a.judged_dev else f"{a.work}/{dataset}"
        shown_model = f"{a.work}/ddr/rem" if student == "ddr-rem" else rel(MODELS[student])
        if defaults:  # the command a user types: no flag but the inputs, the output and where to cache
            flags = ["--work-dir", str(work / f"work-{dataset}")]
            run(cli + ["adapt", "--data", str(data), "--model", str(MODELS[student]), "--method", method,
                       "--output", str(out), "--overwrite"] + flags)
            shown = build_rem * (student == "ddr-rem") + \
                f"hf-dr adapt --data {shown_data} --model {shown_model} --method {method} --output {rel(out)} " \
                f"--work-dir {a.work}/work-{dataset}"
        else:
            if method == "cai":
                extra = {"mlm-steps": str(a.mlm_steps), **extra}
            cmd = cli + ["adapt", "--data", str(data), "--model", str(MODELS[student]), "--method", method,
                         "--labels", str(labels), "--max-steps", str(max_steps), "--eval-steps", str(a.eval_steps),
                         "--batch-size", str(a.batch_size), "--learning-rate", str(a.learning_rate),
                         "--output", str(out), "--overwrite"]
            # splade-tiny is an MLM checkpoint, trained and searched as SPLADE; a ddr-rem is trained and
            # searched at its own lengths (ddr_grid's)
            flags = {"minilm": ["--max-length", str(a.max_length)], "splade-tiny": ["--kind", "sparse"]}.get(student, [])
            flags += ["--no-vocabulary"] * (method == "cai") + [x for k, v in extra.items() for x in (f"--{k}", v)]
            run(cmd + flags)
            shown = build_rem * (student == "ddr-rem") + "hf-dr adapt --data " + shown_data + \
                f" --model {shown_model} --method {method} --labels {a.work}/labels-{dataset} --max-steps {max_steps} " \
                f"--eval-steps {a.eval_steps}" + "".join(f" {x}" for x in flags)
        m = json.loads((out / "metrics.json").read_text())
        b = m["budget"]
        budget = (f"{b['steps']} steps x batch {b['batch_size']}, lr {b['learning_rate']:g}, max length "
                  f"{b['max_length']}" + (f", {b['mlm_steps']} MLM steps" if b.get("mlm_steps") is not None else "") +
                  (f", margin scale {b['margin_scale']:.3g}" if b.get("margin_scale") is not None else ""))
        last = m.get("last_checkpoint")
        rows = [{"table": "adapt", "dataset": dataset, "row": f"{student}:zero-shot",
                 "system": f"{NAMES[student]} zero-shot (max length {b['max_length']})",
                 "command": shown, "machine": machine(), "metrics": {k: round(v, 4) for k, v in m["before"].items()
                                                                     if k in ("ndcg@10", "recall@100")}},
                {"table": "adapt", "dataset": dataset, "row": spec,
                 "system": f"{NAMES[student]} + hf-dr adapt --method {method}{', no flags' * defaults} ({budget}; "
                           f"{'judged' if m.get('selection_on') == 'judged' else 'pseudo'}-dev picked step "
                           f"{m['selected_step']}" + ("" if m.get("starting_model_is_candidate", True)
                                                      else ", step 0 no candidate") + ")",
                 "command": shown, "machine": machine(),
                 "metrics": {**{k: round(v, 4) for k, v in m["after"].items() if k in ("ndcg@10", "recall@100")},
                             "p (t-test)": round(m["p_value"], 4),
                             **({"last checkpoint nDCG@10": round(last["ndcg@10"], 4)} if last else {}),
                             # the training's own time (a cached re-run records the run that trained)
                             "train minutes": round(b["train_minutes"], 1)},
                 "defaults": defaults, "config": m.get("config"),
                 "dev": m["dev"], "selected_step": m["selected_step"], "below_zero_shot": m["below_zero_shot"],
                 "starting_model_is_candidate": m.get("starting_model_is_candidate"), "last_checkpoint": last,
                 # what the output says, and on what evidence
                 "verdict": m.get("verdict"), "verdict_sentence": m.get("verdict_sentence"),
                 "selection_on": m.get("selection_on"), "judged_dev": m.get("judged_dev"),
                 "containment": m.get("containment"),
                 "budget": b}]
        save_rows("adapt", rows, merge_key=("table", "dataset", "row"))
        log(f"{spec}: before {m['before']['ndcg@10']:.4f} after {m['after']['ndcg@10']:.4f} p={m['p_value']:.3g} "
            f"selected step {m['selected_step']} (training {b['train_minutes']:.1f} min); verdict: {m.get('verdict')}")
    if not a.no_refs:
        log("reference rows: BM25, teacher")
        save_rows("adapt", reference_rows(data, dataset, a.max_length), merge_key=("table", "dataset", "row"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
