"""Render the README's result tables from benchmarks/results/*.json (pyserini-2CR style).

    python benchmarks/render_readme.py          # rewrite the tables in README.md
    python benchmarks/render_readme.py --check  # exit 1 if README.md is out of date

Each table sits between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` in the
README; NAME is a row's ``table`` field. Every row shows the command that produced it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
LABELS = {"ndcg@10": "nDCG@10", "recall@100": "R@100", "recall@1000": "R@1000", "mrr@10": "MRR@10",
          "nnz_query": "nnz/query", "nnz_doc": "nnz/doc"}


def load_rows() -> list[dict]:
    rows = []
    for p in sorted(RESULTS.glob("*.json")):
        data = json.loads(p.read_text())
        if isinstance(data, list):
            rows.extend(r for r in data if isinstance(r, dict) and "table" in r and "metrics" in r)
    return rows


def _fmt(v, key: str = "") -> str:
    if isinstance(v, float) and key.endswith("_per_s"):
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


def render(readme: str, rows: list[dict]) -> str:
    tables: dict[str, list[dict]] = {}
    for r in rows:
        tables.setdefault(r["table"], []).append(r)

    def sub(m):
        name = m.group(1)
        body = render_table(tables[name]) if name in tables else "_no results recorded yet_"
        return f"<!-- results:{name} -->\n{body}\n<!-- /results:{name} -->"

    return re.sub(r"<!-- results:([\w-]+) -->.*?<!-- /results:\1 -->", sub, readme, flags=re.S)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    path = ROOT / "README.md"
    old = path.read_text()
    new = render(old, load_rows())
    if a.check:
        if new != old:
            print("README.md tables differ from benchmarks/results: run python benchmarks/render_readme.py")
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
