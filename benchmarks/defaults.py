"""Which value of a default wins across corpora? The grid behind a method's default in `hf-dr adapt`.

    python benchmarks/defaults.py --grid splade-tiny:cai:learning-rate=3e-5,1e-4,3e-4 \\
        --grid minilm:pseudo-margin-mse:learning-rate=2e-6,2e-5 --max-steps 60 --max-length 64 --max-docs 2000

Runs on the folders of ``benchmarks/verdict.py`` (the same corpora, the same test split: half of each
corpus's judged test queries; the copy without judged dev queries, so selection and the verdict are
those of a user with a corpus and no judgments) and in its work folders, so the labels are shared and
a run the verdict grid made with the same flags is found cached. Training queries as there: SciFact's
own, generated from the corpus for ArguAna and TREC-DL (every corpus generates its queries for a grid
over a generation flag: ``--generator``, ``--queries-per-doc``, ``--num-queries``). One `hf-dr adapt` per (corpus, method,
value, seed), every other setting the default but the budget flags given here, each cached by its
output's ``metrics.json`` (the grid resumes).

What is compared is the **trained model**, not the output: the test nDCG@10 of the checkpoint
selection chose (the output when it shipped, the ``unverified`` / best checkpoint when the start was
kept), against the zero-shot model. Per corpus the value with the best mean over the seeds wins; a
value within ``--tie`` (0.005 nDCG@10 by default) of the winner ties. A value is *supported* when it
wins or ties on at least three corpora. Rows: ``benchmarks/results/defaults.json`` (docs/adapt.md,
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


def decide(scores: dict[str, dict[str, float]], tie: float) -> dict:
    """``scores``: {corpus: {value: mean trained test nDCG@10}} -> per value, the corpora it wins or
    ties on (within ``tie`` of the corpus's best), and whether that is at least three."""
    out = {}
    values = sorted({v for per in scores.values() for v in per})
    for v in values:
        won = [c for c, per in scores.items() if v in per and per[v] >= max(per.values()) - tie]
        out[v] = {"wins_or_ties": won, "corpora": [c for c, per in scores.items() if v in per],
                  "supported": len(won) >= 3}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", action="append", required=True, help="student:method:flag=v1,v2 (repeatable)")
    ap.add_argument("--corpora", default=",".join(CORPORA))
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--tie", type=float, default=0.005)
    ap.add_argument("--dev-fraction", type=float, default=0.5)
    ap.add_argument("--max-docs", type=int, default=None)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--work", default="runs/verdict", help="benchmarks/verdict.py's work folder (shared)")
    a = ap.parse_args(argv)
    require_installed()
    work = (REPO / a.work).resolve() if not Path(a.work).is_absolute() else Path(a.work)
    budget = "-".join(f"{k}{getattr(a, k)}" for k in BUDGET_FLAGS if getattr(a, k, None) is not None) or "defaults"
    tag = f"{budget}-dev{round(100 * a.dev_fraction)}" + (f"-docs{a.max_docs}" if a.max_docs else "")
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = []
    for spec in a.grid:
        student, method, flag, values = parse_grid(spec)
        scores: dict[str, dict[str, float]] = {}
        zero: dict[str, float] = {}
        for corpus in a.corpora.split(","):
            folders = prepare(corpus, work, a.dev_fraction, a.max_docs)
            data = folders["without"]
            for value in values:
                got = []
                for seed in seeds:
                    out = work / f"{data.name}-{student}-{method}-seed{seed}-{budget}-{flag}{value}"
                    res = adapt_run(data, out, work / f"work-{data.name.rsplit('-', 1)[0]}", student, method, seed,
                                    a, generates(flag, folders["generate"]), (f"--{flag}", value))
                    m = res["metrics"]
                    zero[corpus] = m["before"]["ndcg@10"]
                    s = trained_score(m)
                    log(f"{corpus} {student}:{method} {flag}={value} seed {seed}: trained {s}, zero-shot "
                        f"{zero[corpus]:.4f} ({m['verdict']})")
                    if s is not None:
                        got.append(s)
                if got:
                    scores.setdefault(corpus, {})[value] = statistics.fmean(got)
        verdicts = decide(scores, a.tie)
        for value in values:
            for corpus, per in scores.items():
                if value not in per:
                    continue
                rows.append({"table": "defaults", "dataset": corpus,
                             "system": f"{student}:{method} --{flag} {value} ({tag}; seeds {a.seeds})",
                             "command": command_line(), "machine": machine(),
                             "metrics": {"trained test ndcg@10": round(per[value], 4),
                                         "zero-shot": round(zero[corpus], 4),
                                         "difference": round(per[value] - zero[corpus], 4),
                                         "best on corpus (1/0)": int(per[value] == max(per.values()))},
                             "budget": tag, "method": f"{student}:{method}", "flag": flag, "value": value})
            v = verdicts.get(value)
            if v:
                on = ", ".join(v["wins_or_ties"]) or "none"
                rows.append({"table": "defaults_summary", "dataset": ",".join(scores),
                             "system": f"{student}:{method} --{flag} {value} ({tag}; seeds {a.seeds}): wins or ties "
                                       f"on {on}",
                             "command": command_line(), "machine": machine(),
                             "metrics": {"wins or ties": len(v["wins_or_ties"]), "corpora": len(v["corpora"]),
                                         "supported (>= 3)": int(v["supported"])},
                             "budget": tag, "method": f"{student}:{method}", "flag": flag, "value": value,
                             "on": v["wins_or_ties"]})
                log(f"{student}:{method} --{flag} {value}: wins or ties on {v['wins_or_ties']} of {v['corpora']}")
    save_rows("defaults", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
