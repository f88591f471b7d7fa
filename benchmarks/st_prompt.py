"""A Sentence Transformers model with prompts, through hf-dr and through Sentence Transformers.

    python benchmarks/st_prompt.py

all-MiniLM-L6-v2 on SciFact (test) given E5-style prompts by flag ("query: " / "passage: "):

* hf-dr: ``hf-dr encode --query-prompt --document-prompt`` (the manifest must record both), then
  ``hf-dr evaluate --embeddings`` with the same flags (a folder encoded with other prompts is refused);
* the peer, in the same run: ``SentenceTransformer.encode(..., prompt=...)`` for queries and documents
  + exact inner-product search (numpy), scored by hf-dr's one metric path (``evaluate_run``).

Row: nDCG@10 of both and their difference (target: equal to 4 decimals), and the zero-shot
MiniLM without prompts for reference (hf-dr, same run). Results: benchmarks/results/st_prompt.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

QUERY_PROMPT, DOC_PROMPT = "query: ", "passage: "


def _hf_dr(data: Path, model: Path, work: Path, prompts: bool) -> tuple[float, dict]:
    from hf_dr.cli import main

    flags = ["--query-prompt", QUERY_PROMPT, "--document-prompt", DOC_PROMPT] if prompts else []
    emb, out = work / ("emb-prompt" if prompts else "emb"), work / ("eval-prompt" if prompts else "eval")
    rc = main(["encode", "--data", str(data), "--model", str(model), "--output", str(emb), "--dtype", "fp32", *flags])
    assert rc == 0, "hf-dr encode failed"
    manifest = json.loads((emb / "manifest.json").read_text())
    rc = main(["evaluate", "--data", str(data), "--retriever", "dense", "--model", str(model), "--embeddings", str(emb),
               "--output", str(out), "--dtype", "fp32", *flags])
    assert rc == 0, "hf-dr evaluate failed"
    if prompts:  # the same folder without the flags: refused (another encoding), exit status 2
        assert main(["evaluate", "--data", str(data), "--retriever", "dense", "--model", str(model), "--embeddings",
                     str(emb), "--output", str(work / "refused")]) == 2
    return json.loads((out / "metrics.json").read_text())["metrics"]["ndcg@10"], manifest


def _sentence_transformers(data: Path, model: Path) -> float:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from hf_dr.data import load_beir
    from hf_dr.evaluation import apply_self_match_rule, evaluate_run

    d = load_beir(data, split="test")
    st = SentenceTransformer(str(model), device="cpu")
    queries = d.split_queries()
    qids = list(queries)
    docs = st.encode(d.doc_texts(), prompt=DOC_PROMPT, batch_size=32)
    qv = st.encode([queries[q] for q in qids], prompt=QUERY_PROMPT, batch_size=32)
    scores = qv @ docs.T
    ids = d.doc_ids()
    run = {}
    for i, q in enumerate(qids):
        top = np.argsort(-scores[i], kind="stable")[:1001]
        run[q] = {ids[j]: float(scores[i, j]) for j in top}
    run, _ = apply_self_match_rule(run, d.qrels)
    run = {q: dict(list(r.items())[:1000]) for q, r in run.items()}
    return evaluate_run(d.qrels, run, ["ndcg@10"]).aggregate["ndcg@10"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    a = ap.parse_args()
    data, model = SHARED / "data" / "scifact", SHARED / "models" / "all-MiniLM-L6-v2"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.work or tmp)
        plain, _ = _hf_dr(data, model, work, prompts=False)
        ours, manifest = _hf_dr(data, model, work, prompts=True)
        peer = _sentence_transformers(data, model)
    recorded = (manifest.get("query_prompt"), manifest.get("document_prompt"))
    row = {"table": "st_prompt", "dataset": "scifact",
           "system": "all-MiniLM-L6-v2 + E5-style prompts by flag: hf-dr encode/evaluate"
                     " vs SentenceTransformer.encode(prompt=) + exact search",
           "command": command_line(), "machine": machine(),
           "metrics": {"hf_dr_ndcg@10": round(ours, 4), "st_ndcg@10": round(peer, 4),
                       "abs_diff": round(abs(ours - peer), 6), "no_prompt_ndcg@10": round(plain, 4),
                       "manifest_records_prompts": recorded == (QUERY_PROMPT, DOC_PROMPT)},
           "manifest_prompts": list(recorded),
           "target": "equal to 4 decimals; the manifest records both prompts"}
    print(json.dumps(row, indent=1))
    if recorded != (QUERY_PROMPT, DOC_PROMPT):
        raise SystemExit(f"the manifest records {recorded}, not the prompts asked for")
    save_rows("st_prompt", [row])


if __name__ == "__main__":
    main()
