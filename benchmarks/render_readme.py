"""Render the result tables of README.md and docs/results.md from benchmarks/results/*.json
(pyserini-2CR style).

    python benchmarks/render_readme.py          # rewrite the tables in README.md and docs/results.md
    python benchmarks/render_readme.py --check  # exit 1 if either is out of date

Each table sits between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``; NAME is a row's
``table`` field, and every row shows the command that produced it. ``headline`` is the README's
one summary table: the rows named in :data:`HEADLINE`, one column per dataset (nDCG@10), their
commands in docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGES = [ROOT / "README.md", ROOT / "docs" / "results.md", ROOT / "docs" / "adapt.md", ROOT / "docs" / "precision.md",
         ROOT / "docs" / "publishing.md", ROOT / "docs" / "ingest.md", ROOT / "docs" / "retrieval.md"]
#: the README's summary: (label, table, system) -> nDCG@10 per dataset, in this order
HEADLINE = [
    ("BM25 (bm25s, Snowball stemming)", "baselines", "BM25 (bm25s, stopwords, Snowball stemming)"),
    ("all-MiniLM-L6-v2, zero-shot", "baselines", "all-MiniLM-L6-v2 (mean pool, cosine)"),
    ("BM25 + all-MiniLM-L6-v2 (z-score fusion)", "baselines", "BM25 + MiniLM (z-score fusion)"),
    ("all-MiniLM-L6-v2 + `hf-dr adapt` (pseudo-margin-mse, 500 CPU steps, no labels)", "adapt",
     "all-MiniLM-L6-v2 + hf-dr adapt --method pseudo-margin-mse (500 steps x batch 8, lr 2e-05, max length 256; "
     "pseudo-dev picked step 300, step 0 no candidate)"),
    ("splade-tiny, zero-shot", "splade_cai", "splade-tiny: SPLADE"),
    ("splade-tiny + target IDF (SPLADE-CAI, Eq. 6-7)", "splade_cai", "splade-tiny: SPLADE + IDF"),
    ("splade-tiny + `hf-dr adapt --method cai`, no flags (300 CPU steps, no labels; the output is the start: "
     "its trained checkpoint stays in `unverified/`)", "adapt",
     "splade-tiny + hf-dr adapt --method cai, no flags (300 steps x batch 8, lr 0.0001, max length 256, 0 MLM "
     "steps; pseudo-dev picked step 0)"),
    ("splade-tiny + BM25 (raw-score sum, Eq. 8-9)", "splade_cai", "splade-tiny: BM25 + SPLADE (raw sum)"),
    ("MiniLM + contrastive on TREC-DL (cosine, scale 20; 60 steps)", "berm", "MiniLM + contrastive (baseline)"),
    ("MiniLM + contrastive + BERM (same; BERM's gain does not survive)", "berm", "MiniLM + contrastive + BERM"),
]
HEADLINE_METRIC = "ndcg@10"
LABELS = {"docs_per_s": "docs/s", "peak_gpu_mb": "peak GPU MB", "ndcg@10": "nDCG@10", "recall@100": "R@100",
          "recall@1000": "R@1000", "mrr@10": "MRR@10",
          "nnz_query": "nnz/query", "nnz_doc": "nnz/doc",
          "requests_per_s": "req/s", "p50_s": "p50 (s)", "p95_s": "p95 (s)", "max_s": "max (s)",
          "searches_during_B_build": "searches during B's build", "p95_s_during_B_build": "p95 during B's build (s)",
          "max_s_during_B_build": "max during B's build (s)", "word_f1": "word F1", "min_word_f1": "min word F1",
          "words_in_order": "words in order", "corpus_jsonl_ndcg@10": "corpus.jsonl nDCG@10",
          "ingest_docs_per_s": "ingest files/s", "ingest_pages_per_s": "ingest pages/s", "peak_rss_mib": "peak RSS (MiB)",
          "ingest_seconds": "ingest (s)",
          "files_per_s": "files/s", "over_window": "over the window", "overflow_p95": "overflow p95 (tokens)",
          "qps_1t": "queries/s, 1 thread", "qps_2t": "queries/s, 2 threads", "speedup_1t_vs_exact": "vs exact",
          "open_s": "open (s)", "search_peak_rss_mb": "search peak RSS (MB)", "build_s": "build (s)",
          "command_s": "build command (s)", "size_mb": "size (MB)", "build_rss_mb": "build peak RSS (MB)"}


def load_rows() -> list[dict]:
    rows = []
    for p in sorted(RESULTS.glob("*.json")):
        data = json.loads(p.read_text())
        if isinstance(data, list):
            rows.extend(r for r in data if isinstance(r, dict) and "table" in r and "metrics" in r)
    return rows


def _fmt(v, key: str = "") -> str:
    if isinstance(v, float) and (key.endswith("_per_s") or key.endswith("minutes") or key.endswith("_seconds")):
        return f"{v:.1f}"
    if isinstance(v, float) and key == "ratio":
        return f"{v:.2f}"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def render_table(rows: list[dict]) -> str:
    keys: list[str] = []
    for r in rows:
        for k in r["metrics"]:
            if k not in keys:
                keys.append(k)
    head = "| dataset | system | " + " | ".join(LABELS.get(k, k) for k in keys) + " | command |"
    lines = [head, "|---|---|" + "---:|" * len(keys) + "---|"]
    rank = {d: i for i, d in enumerate(dict.fromkeys(r.get("dataset", "") for r in rows))}  # first appearance
    for r in sorted(rows, key=lambda r: rank[r.get("dataset", "")]):  # grouped by dataset, stable within
        cells = [_fmt(r["metrics"][k], k) if k in r["metrics"] else "" for k in keys]
        lines.append(f"| {r.get('dataset', '')} | {r['system']} | " + " | ".join(cells) + f" | `{r['command']}` |")
    return "\n".join(lines)


def render_headline(rows: list[dict]) -> str:
    """One row per :data:`HEADLINE` entry, one nDCG@10 column per dataset it has results on."""
    found = {(r["table"], r["system"], r.get("dataset", "")): r for r in rows}
    wanted = {(table, system) for _, table, system in HEADLINE}
    datasets = list(dict.fromkeys(r.get("dataset", "") for r in rows if (r["table"], r["system"]) in wanted))
    lines = ["| system | " + " | ".join(datasets) + " |", "|---|" + "---:|" * len(datasets)]
    for label, table, system in HEADLINE:
        cells = [found.get((table, system, d), {}).get("metrics", {}).get(HEADLINE_METRIC) for d in datasets]
        if all(c is None for c in cells):
            continue
        lines.append(f"| {label} | " + " | ".join("" if c is None else f"{c:.3f}" for c in cells) + " |")
    return "\n".join(lines)


def render(readme: str, rows: list[dict]) -> str:
    tables: dict[str, list[dict]] = {}
    for r in rows:
        tables.setdefault(r["table"], []).append(r)

    def sub(m):
        name = m.group(1)
        if name == "headline":
            body = render_headline(rows)
        else:
            body = render_table(tables[name]) if name in tables else "_no results recorded yet_"
        return f"<!-- results:{name} -->\n{body}\n<!-- /results:{name} -->"

    return re.sub(r"<!-- results:([\w-]+) -->.*?<!-- /results:\1 -->", sub, readme, flags=re.S)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    rows, stale = load_rows(), []
    for path in PAGES:
        old = path.read_text()
        new = render(old, rows)
        if new == old:
            continue
        if a.check:
            stale.append(path.relative_to(ROOT))
        else:
            path.write_text(new)
    if stale:
        print(f"{', '.join(map(str, stale))}: tables differ from benchmarks/results: "
              "run python benchmarks/render_readme.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
