"""Which value of a default wins across corpora? The grid behind a method's default in `hf-dr adapt`.

    python benchmarks/defaults.py --grid splade-tiny:cai:learning-rate=3e-5,1e-4,3e-4 \\
        --grid minilm:pseudo-margin-mse:learning-rate=2e-6,2e-5 --max-steps 60 --max-length 64 --max-docs 2000

Runs on the folders of ``benchmarks/verdict.py`` (the same corpora, the same test split: half of each
corpus's judged test queries; the copy without judged dev queries, so selection and the verdict are
those of a user with a corpus and no judgments) and in its work folders, so the labels are shared and
a training the verdict grid made with the same settings is found cached. ``--split fixed`` (the
default, the split every row before 2026-12-07 used): one draw of the test split per corpus, the same
for every seed; ``--split per-seed``: as the verdict grid's default, seed s runs on the split drawn by
seed s + 1 (so its default-valued runs reuse that grid's trainings), and a value's per-query score
averages the seeds whose test split holds the query. Training queries as there: SciFact's
own, generated from the corpus for ArguAna and TREC-DL (every corpus generates its queries for a grid
over a generation flag: ``--generator``, ``--queries-per-doc``, ``--num-queries``). One `hf-dr adapt` per (corpus, method,
value, seed), every other setting the default but the budget flags given here, each cached by its
output's ``metrics.json`` (the grid resumes).

What is compared is the **trained model**, not the output: the test nDCG@10 of the checkpoint
selection chose (the output when it shipped, the ``unverified`` / best checkpoint when the start was
kept), against the zero-shot model. Per corpus the value with the best mean over the seeds wins. A
value **ties** when the corpus's test queries do not tell it from the winner: within ``--tie`` (0.005
nDCG@10 by default) of it, or the winner's paired advantage on the test queries (each query's
nDCG@10 averaged over the seeds) smaller than the half-width of its 95% confidence interval
(``hf_dr.adaptation.verdict.resolution``, the paired t interval the verdict states). A value is
*supported* when it wins or ties on at least three corpora; the rows also give the count under the
fixed margin alone (``within 0.005``), the rule of the rows made before per-query scores were kept
(2026-11-29). Per-query scores are ``metrics.json``'s ``test_per_query``: a run written without them
is made again (its stages found cached). Rows: ``benchmarks/results/defaults.json`` (docs/adapt.md,
"Defaults across corpora").
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, machine, require_installed, save_rows  # noqa: E402
from verdict import BUDGET_FLAGS, CORPORA, REPO, adapt_run, log, prepare  # noqa: E402


def parse_grid(spec: str) -> tuple[str, str, str, list[str]]:
    """``student:method:flag=v1,v2,...`` -> (student, method, flag, values)."""
    student, method, rest = spec.split(":", 2)
    flag, values = rest.split("=", 1)
    return student, method, flag, values.split(",")


#: flags of query generation: a grid of one of them generates every corpus's training queries (SciFact's
#: own queries included), since a generator is compared on what it writes
GENERATION_FLAGS = ("generator", "queries-per-doc", "num-queries")


def generates(flag: str, corpus_generates: bool) -> bool:
    """Whether a corpus's runs of a grid over ``flag`` train on generated queries."""
    return corpus_generates or flag in GENERATION_FLAGS


def trained_score(m: dict) -> float | None:
    """The test nDCG@10 of the checkpoint selection chose (the output, or the best checkpoint kept
    beside the start), None when no trained checkpoint was evaluated."""
    if not m["kept_starting_model"]:
        return m["after"]["ndcg@10"]
    best = m.get("best_checkpoint")
    return best["ndcg@10"] if best else None


def trained_per_query(m: dict) -> dict[str, float] | None:
    """The test nDCG@10 by query of the checkpoint :func:`trained_score` scores (None when the run
    kept no per-query scores, or evaluated no trained checkpoint)."""
    pq = m.get("test_per_query")
    if not pq:
        return None
    return pq["after"] if not m["kept_starting_model"] else pq.get("best_checkpoint")


def seed_mean(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each query's score averaged over the seeds' runs that scored it (on a fixed split, every run
    scores every test query; per seed, each run its own split's). Every value of a grid runs on the
    same splits, so two values' means of one query average the same seeds: still paired."""
    queries = sorted(set().union(*runs)) if runs else []
    return {q: statistics.fmean(r[q] for r in runs if q in r) for q in queries}


def query_mean(runs: list[dict[str, float]]) -> float:
    """The mean over the queries of :func:`seed_mean`: the runs' mean score when they share their
    queries (a fixed split), each query once when the seeds' splits differ."""
    return statistics.fmean(seed_mean(runs).values())


def tie_test(per: dict[str, float], per_query: dict[str, dict[str, float]] | None, value: str, tie: float) -> dict:
    """Whether ``value`` wins or ties on one corpus: ``per`` {value: mean trained test nDCG@10},
    ``per_query`` {value: {query: nDCG@10}} (None or a value missing: the fixed margin alone). The
    winner's paired advantage over ``value`` on the test queries and its 95% half-width come with it."""
    best = max(per, key=per.get)
    out = {"best": best, "from_best": per[value] - per[best], "within_tie": per[value] >= per[best] - tie,
           "half_width": None, "unresolved": None}
    if value != best and per_query and value in per_query and best in per_query:
        from hf_dr.adaptation.verdict import resolution

        cmp = resolution(per_query[best], per_query[value])
        if cmp["resolution"] is not None:
            out["half_width"], out["unresolved"] = cmp["resolution"], cmp["difference"] < cmp["resolution"]
    out["ties"] = out["within_tie"] or bool(out["unresolved"])
    return out


def decide(scores: dict[str, dict[str, float]], tie: float,
           per_query: dict[str, dict[str, dict[str, float]]] | None = None) -> dict:
    """``scores``: {corpus: {value: mean trained test nDCG@10}}, ``per_query``: {corpus: {value:
    {query: nDCG@10 averaged over the seeds}}} -> per value, the corpora it wins or ties on (within
    ``tie`` of the corpus's best, or not resolved from it by the corpus's test queries:
    :func:`tie_test`), the corpora within ``tie`` alone, and whether each is at least three."""
    out = {}
    values = sorted({v for per in scores.values() for v in per})
    for v in values:
        tests = {c: tie_test(per, (per_query or {}).get(c), v, tie) for c, per in scores.items() if v in per}
        won = [c for c, t in tests.items() if t["ties"]]
        within = [c for c, t in tests.items() if t["within_tie"]]
        out[v] = {"wins_or_ties": won, "within_tie": within, "corpora": list(tests), "supported": len(won) >= 3,
                  "supported_within_tie": len(within) >= 3, "tests": tests}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", action="append", required=True, help="student:method:flag=v1,v2 (repeatable)")
    ap.add_argument("--corpora", default=",".join(CORPORA))
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--tie", type=float, default=0.005)
    ap.add_argument("--dev-fraction", type=float, default=0.5)
    ap.add_argument("--split", choices=("fixed", "per-seed"), default="fixed",
                    help="fixed: one test split per corpus for every seed (the earlier rows); per-seed: seed s on "
                         "the split of seed s + 1, the verdict grid's, whose trainings are then reused")
    ap.add_argument("--max-docs", type=int, default=None)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--work", default="runs/verdict", help="benchmarks/verdict.py's work folder (shared)")
    a = ap.parse_args(argv)
    require_installed()
    work = (REPO / a.work).resolve() if not Path(a.work).is_absolute() else Path(a.work)
    budget = "-".join(f"{k}{getattr(a, k)}" for k in BUDGET_FLAGS if getattr(a, k, None) is not None) or "defaults"
    tag = (f"{budget}-dev{round(100 * a.dev_fraction)}" + (f"-docs{a.max_docs}" if a.max_docs else "")
           + ("-resplit" if a.split == "per-seed" else ""))
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = []
    for spec in a.grid:
        student, method, flag, values = parse_grid(spec)
        scores: dict[str, dict[str, float]] = {}
        per_query: dict[str, dict[str, dict[str, float]]] = {}
        zero: dict[str, float] = {}
        for corpus in a.corpora.split(","):
            zeros: dict[int, float] = {}  # the zero-shot test score of each seed's split
            zeros_pq: dict[int, dict[str, float] | None] = {}  # ... and by query
            for value in values:
                got, got_pq = [], []
                for seed in seeds:
                    folders = prepare(corpus, work, a.dev_fraction, a.max_docs,
                                      split_seed=seed + 1 if a.split == "per-seed" else 0)
                    data = folders["without"]
                    out = work / f"{data.name}-{student}-{method}-seed{seed}-{budget}-{flag}{value}"
                    res = adapt_run(data, out, work / f"work-{data.name.rsplit('-', 1)[0]}", student, method, seed,
                                    a, generates(flag, folders["generate"]), (f"--{flag}", value),
                                    needs=("test_per_query",))
                    m = res["metrics"]
                    zeros[seed] = m["before"]["ndcg@10"]
                    zeros_pq[seed] = (m.get("test_per_query") or {}).get("before")
                    zero[corpus] = (query_mean(list(zeros_pq.values())) if all(zeros_pq.values())
                                    else statistics.fmean(zeros.values()))
                    s = trained_score(m)
                    log(f"{corpus} {student}:{method} {flag}={value} seed {seed}: trained {s}, zero-shot "
                        f"{zeros[seed]:.4f} ({m['verdict']})")
                    if s is not None:
                        got.append(s)
                        got_pq.append(trained_per_query(m))
                if got:
                    # with per-query scores, the mean over the queries of their seed means: on a fixed
                    # split the mean of the runs' scores, per seed the score the paired test compares
                    scores.setdefault(corpus, {})[value] = (query_mean(got_pq) if all(got_pq)
                                                            else statistics.fmean(got))
                    if all(got_pq):
                        per_query.setdefault(corpus, {})[value] = seed_mean(got_pq)
        verdicts = decide(scores, a.tie, per_query)
        for value in values:
            for corpus, per in scores.items():
                if value not in per:
                    continue
                t = verdicts[value]["tests"][corpus]
                rows.append({"table": "defaults", "dataset": corpus,
                             "system": f"{student}:{method} --{flag} {value} ({tag}; seeds {a.seeds})",
                             "command": command_line(), "machine": machine(),
                             "metrics": {"trained test ndcg@10": round(per[value], 4),
                                         "zero-shot": round(zero[corpus], 4),
                                         "difference": round(per[value] - zero[corpus], 4),
                                         "best on corpus (1/0)": int(per[value] == max(per.values())),
                                         # this value minus the corpus's best, and the half-width of the paired 95%
                                         # interval over the test queries (absent: this is the best, or no
                                         # per-query scores)
                                         "from best": round(t["from_best"], 4),
                                         **({} if t["half_width"] is None else {"± (95%)": round(t["half_width"], 4)}),
                                         "ties (1/0)": int(t["ties"])},
                             "budget": tag, "method": f"{student}:{method}", "flag": flag, "value": value})
            v = verdicts.get(value)
            if v:
                on = ", ".join(v["wins_or_ties"]) or "none"
                rows.append({"table": "defaults_summary", "dataset": ",".join(scores),
                             "system": f"{student}:{method} --{flag} {value} ({tag}; seeds {a.seeds}): wins or ties "
                                       f"on {on}",
                             "command": command_line(), "machine": machine(),
                             "metrics": {"wins or ties": len(v["wins_or_ties"]),
                                         f"within {a.tie:g}": len(v["within_tie"]), "corpora": len(v["corpora"]),
                                         "supported (>= 3)": int(v["supported"])},
                             "budget": tag, "method": f"{student}:{method}", "flag": flag, "value": value,
                             "on": v["wins_or_ties"]})
                log(f"{student}:{method} --{flag} {value}: wins or ties on {v['wins_or_ties']} of {v['corpora']}")
    save_rows("defaults", rows, merge_key=row_key)
    return 0


def row_key(r: dict) -> tuple:
    """A row's identity: its table, corpus and run (a summary row's system less what it found, so that a
    run made again replaces its row whatever it now finds)."""
    return r["table"], r.get("dataset"), r["system"].split(": wins or ties on ")[0]


if __name__ == "__main__":
    sys.exit(main())
