"""Quality of the spine's baselines on real BEIR data: BM25 (bm25s), all-MiniLM-L6-v2,
splade-tiny, and their hybrids, on SciFact and ArguAna (self-matches removed).

    python benchmarks/quality.py                       # every system on both datasets
    python benchmarks/quality.py --datasets scifact --systems bm25 minilm

Each row goes through the same library calls as ``hf-dr evaluate`` (``build_retriever`` +
``evaluate``) and records the equivalent CLI command. Results: benchmarks/results/quality.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, machine, save_rows  # noqa: E402

SYSTEMS = {
    # name: (label, retriever, model, extra kwargs, extra CLI flags)
    "bm25-nostem": ("BM25 (bm25s, stopwords, no stemming)", "bm25", None, {"bm25_stemmer": None}, "--bm25-stemmer none"),
    "bm25": ("BM25 (bm25s, stopwords, Snowball stemming)", "bm25", None, {}, ""),
    "minilm": ("all-MiniLM-L6-v2 (mean pool, cosine)", "dense", "models/all-MiniLM-L6-v2", {}, ""),
    "splade-tiny": ("splade-tiny (SPLADE, max-pooled log1p ReLU)", "sparse", "models/splade-tiny", {}, ""),
    "hybrid-minilm": ("BM25 + MiniLM (z-score fusion)", "hybrid", "models/all-MiniLM-L6-v2",
                      {"hybrid_second": "dense"}, "--hybrid-second dense --fusion zscore"),
    "hybrid-splade": ("BM25 + splade-tiny (raw-score sum)", "hybrid", "models/splade-tiny",
                      {"hybrid_second": "sparse", "fusion": "sum"}, "--hybrid-second sparse --fusion sum"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["scifact", "arguana"])
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    ap.add_argument("--batch-size", type=int, default=32)
    a = ap.parse_args()

    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate
    from hf_dr.factory import build_retriever
    from hf_dr.retrieval import HybridRetriever

    rows = []
    for ds in a.datasets:
        data = load_beir(SHARED / "data" / ds, split="test")
        built: dict = {}  # one retriever per (kind, model, options): the hybrids re-use the encoded corpus

        def get(kind, model, kw, built=built, data=data):  # bound now: the closure runs in this iteration only
            key = (kind, model, tuple(sorted(kw.items())))
            if key not in built:
                if kind == "hybrid":
                    second = get(kw["hybrid_second"], model, {})
                    built[key] = HybridRetriever([get("bm25", None, {}), second], method=kw.get("fusion", "zscore"))
                else:
                    built[key] = build_retriever(kind, data, str(SHARED / model) if model else None,
                                                 batch_size=a.batch_size, **kw)
            return built[key]

        for key in a.systems:
            label, retriever, model, kw, flags = SYSTEMS[key]
            res = evaluate(get(retriever, model, kw), data)
            cmd = f"hf-dr evaluate --data ../shared/data/{ds} --retriever {retriever}"
            cmd += f" --model ../shared/{model}" if model else ""
            cmd += f" {flags}" if flags else ""
            row = {"table": "baselines", "dataset": ds, "system": label, "command": cmd.strip(),
                   "metrics": {k: round(v, 4) for k, v in res.aggregate.items()},
                   "machine": machine(), "self_matches": res.self_matches}
            print(f"{ds:8s} {label:48s} " + "  ".join(f"{k}={v:.4f}" for k, v in res.aggregate.items())
                  , flush=True)
            rows.append(row)
            save_rows("quality", [row])


if __name__ == "__main__":
    main()
