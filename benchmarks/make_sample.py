"""Rebuild the bundled sample hf_dr/data/sample/scifact-mini from a SciFact BEIR folder.

    python benchmarks/make_sample.py --scifact ../shared/data/scifact
"""

import argparse
import json
import random
from pathlib import Path

from hf_dr.data import load_qrels


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scifact", default="../shared/data/scifact")
    ap.add_argument("--out", default="hf_dr/data/sample/scifact-mini")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--docs", type=int, default=500)
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()
    src, out = Path(a.scifact), Path(a.out)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    qrels = load_qrels(src / "qrels" / "test.tsv")
    qids = list(qrels)[: a.queries]
    rel = {d for q in qids for d in qrels[q]}
    corpus = [json.loads(line) for line in open(src / "corpus.jsonl", encoding="utf-8")]
    others = [c for c in corpus if c["_id"] not in rel]
    keep = rel | {c["_id"] for c in random.Random(a.seed).sample(others, a.docs - len(rel))}
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for c in corpus:
            if c["_id"] in keep:
                f.write(json.dumps({"_id": c["_id"], "title": c["title"], "text": c["text"]}) + "\n")
    queries = {json.loads(line)["_id"]: json.loads(line)["text"] for line in open(src / "queries.jsonl", encoding="utf-8")}
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in qids:
            f.write(json.dumps({"_id": q, "text": queries[q]}) + "\n")
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q in qids:
            for d, s in qrels[q].items():
                f.write(f"{q}\t{d}\t{s}\n")


if __name__ == "__main__":
    main()
