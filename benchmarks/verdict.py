"""Does the verdict of `hf-dr adapt` hold on test queries it never saw? A calibration benchmark.

    python benchmarks/verdict.py                  # the full grid (many CPU-hours on 2 cores)
    python benchmarks/verdict.py --corpora scifact,arguana,msmarco-trecdl2019 --methods minilm:pseudo-margin-mse \
        --seeds 0,1 --max-steps 60 --max-docs 1500 --max-length 128     # a reduced grid

For each corpus, the benchmark writes one copy of the folder (``WORK/CORPUS-...``, corpus and
queries linked or subsampled) whose judged test queries are split by a seeded draw (``--split
per-seed``, the default: each run's seed draws its own split and reduced corpus, so runs of different
seeds are independent draws of the queries; ``--split fixed``: one draw per corpus): a fraction
(``--dev-fraction``) becomes the judged dev queries (``qrels/dev.tsv``) and is removed from
``qrels/test.tsv``, the only queries the benchmark reports on; a second copy is the same without
``qrels/dev.tsv``. Training queries are the folder's own where it has training queries (SciFact's
``qrels/train.tsv``), else generated from the corpus (``--queries generate``: ArguAna, TREC-DL,
whose every query is judged). Then one `hf-dr adapt` per (corpus, method, seed, with / without
judged dev queries), each a separate process, one at a time, every setting its default but the
budget flags given here; each run is cached (its output folder's ``metrics.json``: a re-run skips
it), so the grid resumes where it stopped.

For every run: the verdict (and Sentence Transformers' word), the interval it states (the
held-out judged queries' 95% interval, or the pseudo-dev one), and the test difference of the
compared model (the output, or the best trained checkpoint when the start was kept) against the
starting model. Summaries: how many "better on labelled queries" claims hold on the test queries
(test difference > 0), how often the test difference falls inside the stated interval (the 95%
prediction interval for as many queries as the test split: ``judge``; for a run that records its
per-query differences, also with the spread of the held-out half alone, the rule before 2026-12-01,
so both rules are judged on the same runs), how many
test losses were let through as "better", the same for "better on pseudo-labels only", and how
many runs without judged queries ship something below zero-shot. Results to
``benchmarks/results/verdict.json`` (tables ``verdict`` and ``verdict_summary`` of docs/adapt.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, machine, require_installed, save_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODELS = {"minilm": SHARED / "models" / "all-MiniLM-L6-v2", "splade-tiny": SHARED / "models" / "splade-tiny"}
CORPORA = ("scifact", "arguana", "msmarco-trecdl2019")
METHODS = ("minilm:pseudo-margin-mse", "splade-tiny:cai")
LABELLED, PSEUDO_ONLY, KEPT = "better on labelled queries", "better on pseudo-labels only", "kept the starting model"
#: the interval rule, in the rows' budget: since 2026-12-01 the verdict's spread pools the held-out half with the half
#: that chose (hf_dr.adaptation.verdict.resolution); rows without the suffix were judged with the held-out half's alone;
#: since 2026-12-06 a judged held-out gain must pass the prediction interval, not the confidence interval, to ship
#: (metrics.json's verdict_rule; a run recorded without it is made again, its training found cached)
RULE = "-spread-both-halves-prediction-bar"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _qrels(path: Path) -> tuple[str, list[str]]:
    head, *rows = path.read_text().replace("\r", "").splitlines()
    return head, [r for r in rows if r.strip()]


def _subsample_corpus(src: Path, dst: Path, keep: set[str], max_docs: int, seed: int) -> None:
    """``dst``: ``src``'s corpus.jsonl cut to ``max_docs`` documents: the relevant ones (``keep``; a
    seeded draw of them when they alone exceed ``max_docs``) and a seeded draw of the others."""
    lines = src.read_text().splitlines()
    ids = [json.loads(line)["_id"] for line in lines]
    rng = random.Random(seed)
    relevant = [i for i, d in enumerate(ids) if d in keep]
    others = [i for i, d in enumerate(ids) if d not in keep]
    rng.shuffle(relevant)
    rng.shuffle(others)
    chosen = set(relevant[:max_docs]) | set(others[:max(0, max_docs - len(relevant))])
    dst.write_text("\n".join(lines[i] for i in sorted(chosen)) + "\n")


def prepare(corpus: str, work: Path, dev_fraction: float, max_docs: int | None, split_seed: int = 0) -> dict:
    """The two folders of ``corpus`` (with and without ``qrels/dev.tsv``), made once: ``{"with",
    "without", "dev", "test", "generate"}``."""
    src = SHARED / "data" / corpus
    tag = (f"{corpus}-dev{round(100 * dev_fraction)}" + (f"-docs{max_docs}" if max_docs else "")
           + (f"-split{split_seed}" if split_seed else ""))
    folders = {v: work / f"{tag}-{v}" for v in ("with", "without")}
    head, test_rows = _qrels(src / "qrels" / "test.tsv")
    qids = sorted(dict.fromkeys(r.split("\t")[0] for r in test_rows if int(r.split("\t")[2]) > 0))
    random.Random(split_seed).shuffle(qids)
    dev = set(qids[:round(dev_fraction * len(qids))])
    has_train = (src / "qrels" / "train.tsv").is_file()
    for variant, out in folders.items():
        if (out / "READY").is_file():
            continue
        (out / "qrels").mkdir(parents=True, exist_ok=True)
        if max_docs:
            keep = {r.split("\t")[1] for r in test_rows if int(r.split("\t")[2]) > 0}
            _subsample_corpus(src / "corpus.jsonl", out / "corpus.jsonl", keep, max_docs, split_seed)
        elif not (out / "corpus.jsonl").exists():
            (out / "corpus.jsonl").symlink_to((src / "corpus.jsonl").resolve())
        if not (out / "queries.jsonl").exists():
            (out / "queries.jsonl").symlink_to((src / "queries.jsonl").resolve())
        if has_train:
            (out / "qrels" / "train.tsv").write_text((src / "qrels" / "train.tsv").read_text())
        (out / "qrels" / "test.tsv").write_text(
            "\n".join([head] + [r for r in test_rows if r.split("\t")[0] not in dev]) + "\n")
        if variant == "with":
            (out / "qrels" / "dev.tsv").write_text(
                "\n".join([head] + [r for r in test_rows if r.split("\t")[0] in dev]) + "\n")
        (out / "READY").write_text("")
    return {**folders, "dev": len(dev), "test": len(qids) - len(dev), "generate": not has_train}


#: `hf-dr adapt` flags a run of the grid may set (when given), named in its output folder and its rows' budget
BUDGET_FLAGS = ("max_steps", "max_length", "batch_size", "dev_queries")


def adapt_run(data: Path, out: Path, work_dir: Path, student: str, method: str, seed: int, a, generate: bool,
              extra: tuple[str, ...] = (), needs: tuple[str, ...] = ()) -> dict:
    """One `hf-dr adapt` (skipped when ``out/metrics.json`` exists and has every key of ``needs``: a run
    written before a key was recorded is made again, its stages found cached in ``work_dir``), ``extra``
    flags last; returns its metrics and the command."""
    cmd = ["adapt", "--data", str(data), "--model", str(MODELS[student]), "--method", method, "--seed", str(seed),
           "--output", str(out), "--work-dir", str(work_dir), "--overwrite"]
    cmd += ["--kind", "sparse"] * (student == "splade-tiny") + ["--queries", "generate"] * generate
    for flag in BUDGET_FLAGS:
        if getattr(a, flag, None) is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(a, flag))]
    cmd += list(extra)
    shown = "hf-dr " + " ".join(os.path.relpath(x, REPO) if x.startswith("/") else x for x in cmd)
    done = out / "metrics.json"
    missing = sorted(set(needs) - set(json.loads(done.read_text()))) if done.is_file() else []
    if missing:
        log(f"{out.name}: metrics.json has no {', '.join(missing)}: made again")
        done.unlink()
    if not done.is_file():
        log(f"$ {shown}")
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        subprocess.run([sys.executable, "-m", "hf_dr.cli", *cmd], cwd=REPO, check=True, env=env)
    return {"metrics": json.loads((out / "metrics.json").read_text()), "command": shown}


def judge(m: dict) -> dict:
    """One run's verdict, stated interval and test differences (``compared``: the model the interval is
    about: the output, or the best trained checkpoint when the start was kept). Coverage asks whether
    the compared model's test difference lies inside the verdict's 95% *prediction* interval for as
    many queries as the test split has (``hf_dr.adaptation.verdict.prediction_half_width``: the
    difference on other queries carries their sampling too); ``covered_ci`` asks the same of the
    confidence interval alone, which is about the population's mean, not about another sample."""
    from hf_dr.adaptation.verdict import prediction_half_width, resolution

    before = m["before"]["ndcg@10"]
    out_diff = m["after"]["ndcg@10"] - before
    best = m.get("best_checkpoint")
    compared = out_diff if not m["kept_starting_model"] else (best["ndcg@10"] - before if best else None)
    iv = m.get("verdict_interval")
    interval = None
    if iv:
        interval = {"on": iv["on"], "difference": iv["difference"], "half": iv["half_width"],
                    "queries": iv.get("queries"), "test_queries": m.get("test_queries"),
                    "prediction": prediction_half_width({"resolution": iv["half_width"], "queries": iv.get("queries")},
                                                        m.get("test_queries"))}
    covered = covered_ci = covered_alone = None
    if interval and interval["prediction"] is not None and compared is not None:
        covered = abs(compared - interval["difference"]) <= interval["prediction"]
        covered_ci = abs(compared - interval["difference"]) <= interval["half"]
        # the same prediction interval with the spread of the held-out half alone (the rule before
        # 2026-12-01), from the per-query differences a run records: both rules judged on the same runs
        diffs = (iv.get("per_query_differences") or {}).get("verdict")
        if diffs and iv.get("spread_queries", 0) > len(diffs):
            interval["spread_queries"] = iv["spread_queries"]
            alone = prediction_half_width(resolution(diffs, dict.fromkeys(diffs, 0.0)), m.get("test_queries"))
            interval["prediction_held_out_spread"] = alone
            covered_alone = alone is not None and abs(compared - interval["difference"]) <= alone
    resplit = resplit_coverage(m)
    return {"verdict": m["verdict"], "word": m.get("verdict_word"), "output_test_difference": out_diff,
            "compared_test_difference": compared, "interval": interval, "covered": covered, "covered_ci": covered_ci,
            "covered_held_out_spread": covered_alone, "resplit": resplit,
            "shipped_trained": not m["kept_starting_model"], "unverified": m.get("unverified") is not None,
            "judged": m.get("judged_dev") is not None}


#: re-draws of one run's judged queries for its re-split coverage
RESPLITS = 2000


def resplit_coverage(m: dict, draws: int = RESPLITS, seed: int = 0) -> dict | None:
    """How often the verdict's rule covers the test difference over ``draws`` seeded re-draws of one
    run's judged queries, the compared model held fixed: its per-query differences on every judged
    query (the half that chose, the held-out half, the test split: metrics.json's
    ``verdict_interval.per_query_differences`` and ``test_per_query``) are dealt again into sets of the
    same sizes, and each deal is judged as the run was (the held-out set's mean, the spread pooled
    with the choosing set's: ``hf_dr.adaptation.verdict.resolution``; the prediction half-width for
    the test set's size; and the held-out set's spread alone beside it). The run's one split gives one
    0/1; this is that draw's probability for this model, resolved to about ±0.5 points: coverage
    measured without the noise of how few runs there are. Conditional on the compared model: where
    the choice among several trained checkpoints depends on the split, a re-draw would also change the
    model, which this does not follow. None for a run without judged queries or without those records."""
    import numpy as np

    from hf_dr.adaptation.verdict import prediction_half_width, resolution

    iv, tp = m.get("verdict_interval") or {}, m.get("test_per_query") or {}
    halves = iv.get("per_query_differences") or {}
    compared = "best_checkpoint" if m.get("kept_starting_model") else "after"
    if not (m.get("judged_dev") is not None and halves.get("verdict") and halves.get("select") and tp.get(compared)):
        return None
    test = [tp[compared][q] - tp["before"][q] for q in sorted(tp["before"])]
    # sorted: the deals depend on the run's differences, not on which set each fell in
    pool = np.sort(np.array(list(halves["select"].values()) + list(halves["verdict"].values()) + test))
    n_sel, n_ver, n_test = len(halves["select"]), len(halves["verdict"]), len(test)
    rng = np.random.default_rng([seed, 40])
    hit = alone = 0
    for _ in range(draws):
        order = rng.permutation(len(pool))
        sel, ver = pool[order[:n_sel]], pool[order[n_sel:n_sel + n_ver]]
        err = abs(pool[order[n_sel + n_ver:]].mean() - ver.mean())
        v = {str(i): float(x) for i, x in enumerate(ver)}
        s = {f"s{i}": float(x) for i, x in enumerate(sel)}
        zero_v, zero_s = dict.fromkeys(v, 0.0), dict.fromkeys(s, 0.0)
        pooled = prediction_half_width(resolution(v, zero_v, spread_from=(s, zero_s)), n_test)
        own = prediction_half_width(resolution(v, zero_v), n_test)
        hit += pooled is not None and err <= pooled
        alone += own is not None and err <= own
    return {"draws": draws, "covered": float(hit / draws), "covered_held_out_spread": float(alone / draws),
            "queries": {"select": n_sel, "verdict": n_ver, "test": n_test}}


def summary(rows: list[dict], judged: bool | None) -> dict:
    """The counts of the issue over ``rows`` (runs with judged dev queries, without, or all)."""
    rs = [r for r in rows if judged is None or r["judged"] == judged]
    out = {"runs": len(rs)}
    for name, verdict in (("labelled", LABELLED), ("pseudo", PSEUDO_ONLY)):
        claims = [r for r in rs if r["verdict"] == verdict]
        out[f"{name} claims"] = len(claims)
        out[f"{name} held on test"] = sum(r["output_test_difference"] > 0 for r in claims)
        out[f"{name} losses let through"] = sum(r["output_test_difference"] < 0 for r in claims)
    with_interval = [r for r in rs if r["covered"] is not None]
    out["intervals"] = len(with_interval)
    out["test difference inside"] = sum(r["covered"] for r in with_interval)  # the prediction interval
    out["inside the confidence interval"] = sum(bool(r.get("covered_ci")) for r in with_interval)
    both = [r for r in with_interval if r.get("covered_held_out_spread") is not None]
    if both:  # runs whose interval pooled both halves' spread: the held-out half's spread alone, on the same runs
        out["intervals, spread of both halves"] = len(both)
        out["inside, spread of the held-out half alone"] = sum(r["covered_held_out_spread"] for r in both)
    resplit = [r["resplit"] for r in with_interval if r.get("resplit")]
    if resplit:  # the same rule's coverage over re-draws of each run's queries (resplit_coverage), averaged
        out["runs re-split"] = len(resplit)
        out["re-split coverage, mean"] = round(sum(x["covered"] for x in resplit) / len(resplit), 4)
        out["re-split coverage, lowest"] = round(min(x["covered"] for x in resplit), 4)
        out["re-split coverage, held-out spread alone, mean"] = round(
            sum(x["covered_held_out_spread"] for x in resplit) / len(resplit), 4)
    out["shipped below zero-shot"] = sum(r["output_test_difference"] < 0 for r in rs)
    out["kept start, unverified"] = sum(r["unverified"] for r in rs)
    out["unverified worse on test"] = sum(r["unverified"] and (r["compared_test_difference"] or 0) < 0 for r in rs)
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", default=",".join(CORPORA))
    ap.add_argument("--methods", default=",".join(METHODS), help="student:method, comma-separated")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--variants", default="with,without", help="with / without judged dev queries")
    ap.add_argument("--dev-fraction", type=float, default=0.5,
                    help="of the judged test queries, judged dev queries (removed from the test split reported)")
    ap.add_argument("--split", choices=("per-seed", "fixed"), default="per-seed",
                    help="per-seed: each seed draws its own dev/test split (and reduced corpus), so runs of "
                         "different seeds are independent draws of the queries; fixed: one split per corpus")
    ap.add_argument("--max-docs", type=int, default=None,
                    help="a reduced corpus: every judged document and a seeded draw of the others, this many in all")
    ap.add_argument("--max-steps", type=int, default=None, help="default: each method's")
    ap.add_argument("--max-length", type=int, default=None, help="default: the model's own")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--dev-queries", type=int, default=None,
                    help="hf-dr adapt --dev-queries (the pseudo-labelled dev set; default: adapt's, 50)")
    ap.add_argument("--work", default="runs/verdict")
    ap.add_argument("--summary-only", action="store_true",
                    help="run nothing: write the summary rows over the recorded runs of --corpora, --methods, "
                         "--seeds and --variants with this budget")
    ap.add_argument("--plot", default=None, metavar="PNG",
                    help="also draw the recorded runs of this budget (--corpora, --methods, --seeds, --variants): "
                         "each run's stated interval and its test difference (docs/img/verdict_calibration.png)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    require_installed()
    work = (REPO / a.work).resolve() if not Path(a.work).is_absolute() else Path(a.work)
    budget = "-".join(f"{k}{getattr(a, k)}" for k in BUDGET_FLAGS if getattr(a, k) is not None) or "defaults"
    # what the rows and the summary are grouped by: the budget and the data (dev fraction, reduced corpus)
    tag = (f"{budget}-dev{round(100 * a.dev_fraction)}" + (f"-docs{a.max_docs}" if a.max_docs else "")
           + ("-resplit" if a.split == "per-seed" else "") + RULE)
    if a.summary_only:  # no run: the summary rows of the recorded runs of these seeds
        rows = summaries_of(tag, seeds={int(s) for s in a.seeds.split(",")}, variants=tuple(a.variants.split(",")),
                            corpora=set(a.corpora.split(",")), methods=set(a.methods.split(",")))
        if not rows:
            print(f"verdict.py: no run of {a.corpora} / {a.methods} / seeds {a.seeds} is recorded with the budget "
                  f"{tag}", file=sys.stderr)
            return 2
        save_rows("verdict", rows, merge_key=("table", "dataset", "system"))
        if a.plot:
            _plot_runs(a, tag)
        return 0
    for corpus in a.corpora.split(","):
        for spec in a.methods.split(","):
            student, method = spec.split(":")
            for seed in (int(s) for s in a.seeds.split(",")):
                # per-seed: split seed = run seed + 1 (seed 0 of a fixed split is the one the earlier rows used)
                folders = prepare(corpus, work, a.dev_fraction, a.max_docs,
                                  split_seed=seed + 1 if a.split == "per-seed" else 0)
                for variant in a.variants.split(","):
                    data = folders[variant]
                    out = work / f"{data.name}-{student}-{method}-seed{seed}-{budget}"
                    # one work folder per corpus: both variants share the labels (the same training queries)
                    res = adapt_run(data, out, work / f"work-{data.name.rsplit('-', 1)[0]}", student, method, seed, a,
                                    folders["generate"], needs=("verdict_rule",))
                    m, row = res["metrics"], judge(res["metrics"])
                    save_rows("verdict", [_row(corpus, spec, seed, variant, folders, m, row, res["command"], tag)],
                              merge_key=("table", "dataset", "budget", "method", "seed", "variant"))
                    log(f"{corpus} {spec} seed {seed} {variant}: {row['verdict']} ({row['word']}), output test "
                        f"difference {row['output_test_difference']:+.4f}")
    save_rows("verdict", summaries_of(tag), merge_key=("table", "dataset", "system"))
    if a.plot:
        _plot_runs(a, tag)
    return 0


def _plot_runs(a, tag: str) -> None:
    from common import RESULTS

    rows = [r for r in runs_of(json.loads((RESULTS / "verdict.json").read_text()), tag,
                               {int(s) for s in a.seeds.split(",")}, set(a.corpora.split(",")),
                               set(a.methods.split(",")))
            if r["variant"] in a.variants.split(",")]
    from hf_dr.analysis.plotting import save_figure

    log(f"wrote {save_figure(calibration_figure(rows, tag), Path(a.plot))} ({len(rows)} runs)")


#: marker colour of each verdict in the calibration figure
COLOURS = {LABELLED: "tab:green", PSEUDO_ONLY: "tab:orange", KEPT: "tab:gray"}


def calibration_figure(rows: list[dict], title: str):
    """One panel per variant (with / without judged dev queries), one column per run: the verdict's
    interval (its difference, and the 95% prediction interval for as many queries as the test split)
    as a bar, the compared model's test difference as a dot coloured by the verdict; a dot outside its
    bar is a miss, a green dot below zero a loss let through."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    variants = [v for v in ("with", "without") if any(r["variant"] == v for r in rows)]
    width = max(6.0, 0.7 * len(rows) / max(1, len(variants)) + 1.5)
    fig, axes = plt.subplots(len(variants), 1, figsize=(width, 3.2 * len(variants)), squeeze=False)
    for ax, variant in zip(axes[:, 0], variants):
        these = sorted((r for r in rows if r["variant"] == variant),
                       key=lambda r: (CORPORA.index(r["dataset"]) if r["dataset"] in CORPORA else 9, r["method"], r["seed"]))
        for x, r in enumerate(these):
            j = r["judged_fields"]
            iv, test = j["interval"], j["compared_test_difference"]
            if iv and iv.get("prediction") is not None:
                ax.errorbar(x, iv["difference"], yerr=iv["prediction"], fmt="_", ms=12, color="tab:blue", capsize=4,
                            lw=1.2)
            if test is not None:
                ax.plot(x, test, "o", color=COLOURS.get(j["verdict"], "black"), ms=6,
                        mfc="none" if j["covered"] is False else None)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(range(len(these)))
        ax.set_xticklabels([f"{r['dataset'].split('-')[0]}\n{r['method'].split(':')[0]}\nseed {r['seed']}"
                            for r in these], fontsize=7)
        ax.set_ylabel("nDCG@10 difference")
        ax.set_title(f"{variant} judged dev queries" + ("" if variant == "with" else " (intervals: held-out pseudo-dev "
                     "queries; none where the teacher contains the student)"), fontsize=9)
    handles = [Line2D([], [], color="tab:blue", marker="_", ms=12, label="stated: held-out difference, 95% "
                      "prediction interval")]
    handles += [Line2D([], [], color=c, marker="o", ls="", label=f"test difference; verdict: {v}")
                for v, c in COLOURS.items()]
    handles.append(Line2D([], [], color="black", marker="o", mfc="none", ls="", label="outside the interval"))
    axes[0, 0].legend(handles=handles, fontsize=7, loc="best")
    fig.suptitle(f"Does the verdict hold? Test difference of the output, or of the best trained checkpoint where "
                 f"the start was kept\n({title})", fontsize=9)
    return fig


def summaries_of(budget: str, seeds: set[int] | None = None, rows: list[dict] | None = None,
                 variants: tuple[str, ...] = ("with", "without"), corpora: set[str] | None = None,
                 methods: set[str] | None = None) -> list[dict]:
    """The summary rows over every run recorded with this budget (this command's and earlier ones':
    the grid resumes across commands), or with ``seeds`` over those seeds' runs alone (``--summary-only``:
    a fresh sample, without seeds re-made because they had missed; ``corpora``, ``methods`` and ``variants``,
    with / without judged dev queries, narrow it alike). ``rows``: default the recorded ones."""
    if rows is None:
        from common import RESULTS

        rows = json.loads((RESULTS / "verdict.json").read_text())
    runs = runs_of(rows, budget, seeds, corpora, methods)
    datasets = ",".join(dict.fromkeys(r["dataset"] for r in runs))
    out = []
    for variant, label, flag in (("with", "with judged dev queries", True),
                                 ("without", "without judged dev queries", False)):
        if variant not in variants:
            continue
        these = [r for r in runs if bool(r["judged_fields"].get("judged")) == flag]
        if not these:  # this variant was not run with this budget
            continue
        specs = ",".join(sorted({r["method"] for r in these}))
        listed = ",".join(str(s) for s in sorted({r["seed"] for r in these}))
        row = {"table": "verdict_summary", "dataset": datasets,
               "system": f"{label} ({budget}; {specs}; seeds {listed})", "budget": budget,
               "command": _one_run_command(datasets, specs, listed, None if len(variants) == 2 else variant),
               "machine": machine(),
               "metrics": summary([r["judged_fields"] for r in runs], flag)}
        log(f"{row['system']}: {row['metrics']}")
        out.append(row)
    return out


def runs_of(rows: list[dict], budget: str, seeds: set[int] | None = None, corpora: set[str] | None = None,
            methods: set[str] | None = None) -> list[dict]:
    """The run rows recorded with this budget, of these seeds, corpora and methods (None: any)."""
    return [r for r in rows if r["table"] == "verdict" and r.get("budget") == budget
            and (seeds is None or r["seed"] in seeds) and (corpora is None or r["dataset"] in corpora)
            and (methods is None or r["method"] in methods)]


def _one_run_command(corpus: str, spec: str, seed, variant: str | None) -> str:
    """This command narrowed to these runs (it prepares the folders, then runs or reads them)."""
    import shlex

    argv = sys.argv[1:]
    keep = []
    skip = {"--corpora", "--methods", "--seeds", "--variants"}
    i = 0
    while i < len(argv):
        name = argv[i].split("=", 1)[0]
        if name in skip:
            i += 1 if "=" in argv[i] else 2
            continue
        keep.append(argv[i])
        i += 1
    return "python benchmarks/verdict.py " + " ".join(
        shlex.quote(x) for x in ["--corpora", corpus, "--methods", spec, "--seeds", str(seed),
                                 *(["--variants", variant] if variant else []), *keep])


def _row(corpus, spec, seed, variant, folders, m, row, command, budget) -> dict:
    iv = row["interval"]
    stated = f"; stated on {iv['on']}" if iv and iv["half"] is not None else "; no interval"
    metrics = {}
    if iv and iv["half"] is not None:
        metrics.update({"interval Δ": round(iv["difference"], 4), "interval ±": round(iv["half"], 4)})
        if iv.get("prediction") is not None:
            metrics["prediction ±"] = round(iv["prediction"], 4)  # for as many queries as the test split
    metrics["test Δ (output)"] = round(row["output_test_difference"], 4)
    if row["compared_test_difference"] is not None:
        metrics["test Δ (compared)"] = round(row["compared_test_difference"], 4)
    if row["covered"] is not None:
        metrics["inside (1/0)"] = int(row["covered"])
    if row.get("covered_held_out_spread") is not None:
        metrics["prediction ±, held-out spread"] = round(iv["prediction_held_out_spread"], 4)
        metrics["inside, held-out spread (1/0)"] = int(row["covered_held_out_spread"])
    if row.get("resplit"):
        metrics["re-split coverage"] = round(row["resplit"]["covered"], 4)
        metrics["re-split coverage, held-out spread"] = round(row["resplit"]["covered_held_out_spread"], 4)
    return {"table": "verdict", "dataset": corpus,
            "system": f"{spec}, seed {seed}, {variant} judged dev queries ({budget}; {folders['dev']} dev / "
                      f"{folders['test']} test queries): {row['verdict']} ({row['word']}){stated}",
            "command": _one_run_command(corpus, spec, seed, variant), "adapt_command": command, "machine": machine(),
            "metrics": metrics,
            "budget": budget, "method": spec, "seed": seed, "variant": variant, "judged_fields": row,
            "verdict_sentence": m["verdict_sentence"], "judged_dev": m.get("judged_dev"),
            "unverified": m.get("unverified"), "before": m["before"], "after": m["after"],
            "best_checkpoint": m.get("best_checkpoint"), "minutes": m["budget"]["minutes"],
            # the run's recorded settings (e.g. cai's FLOPS weights): rows of one budget tag made under different
            # method defaults (cai's FLOPS weights before and after 2026-12-07) are told apart by it
            "adapt_budget": {k: v for k, v in m["budget"].items() if not k.endswith("minutes")}}


if __name__ == "__main__":
    sys.exit(main())
