"""SPLADE-CAI rows (papers/003 Tables 1-3 in miniature) with splade-tiny.

    python benchmarks/splade_cai.py --part idf                      # splade-tiny as is: IDF, SPLADE-Doc, hybrids
    python benchmarks/splade_cai.py --part chain --datasets scifact # CAI ablations (train + evaluate)

Part ``idf``: the checkpoint as published, IDF fitted on each target corpus (exponent 1 as
in the paper, 0.5 as in the authors' code), BoW queries (SPLADE-Doc), BM25 + SPLADE raw sum.
Part ``chain``: the same SPLADE training on MS MARCO TREC-DL-2019 judgments (grade >= 2
positives, grade-0 hard negatives, in-batch contrastive + FLOPS) after: nothing (control),
continual MLM only, vocabulary expansion only, and AdaLM (both), then IDF and evaluation.
Results: benchmarks/results/splade_cai.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

LABELS = {"splade": "SPLADE", "splade+idf": "SPLADE + IDF", "splade-doc": "SPLADE-Doc (BoW query)",
          "splade-doc+idf": "SPLADE-Doc + IDF", "hybrid": "BM25 + SPLADE (raw sum)",
          "hybrid+idf": "BM25 + SPLADE + IDF (raw sum)"}
CHAIN = {  # name: (expand_vocabulary, continual_mlm)
    "control (SPLADE training only)": (False, False),
    "continual pre-training only": (False, True),
    "vocabulary expansion only": (True, False),
    "AdaLM (both)": (True, True),
}


def rows_for(metrics: dict, dataset: str, prefix: str, table: str, extra: dict) -> list[dict]:
    rows = []
    for v, m in metrics.items():
        base, _, tail = v.partition(" (")
        label = LABELS.get(base, base) + (" (sqrt IDF, as the authors' code)" if "idf^0.5" in tail else
                                          " (BM25 without stemming)" if "stemmer=None" in tail else
                                          f" ({tail}" if tail else "")
        rows.append({"table": table, "dataset": dataset, "system": f"{prefix}{label}",
                     "command": command_line(), "machine": machine(),
                     "metrics": {**{k: m[k] for k in ("ndcg@10", "recall@100", "recall@1000")},
                                 "nnz_query": round(m["nnz_query"], 1), "nnz_doc": round(m["nnz_doc"], 1)},
                     **extra})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["idf", "chain"], default="idf")
    ap.add_argument("--datasets", nargs="+", default=["scifact", "arguana"])
    ap.add_argument("--model", default=str(SHARED / "models" / "splade-tiny"))
    ap.add_argument("--variants", nargs="+", default=list(CHAIN), choices=list(CHAIN))
    ap.add_argument("--mlm-steps", type=int, default=300)
    ap.add_argument("--splade-steps", type=int, default=300)
    ap.add_argument("--splade-batch-size", type=int, default=8)
    ap.add_argument("--doc-max-length", type=int, default=96)
    ap.add_argument("--lambda-q", type=float, default=0.08, help="FLOPS weight, queries (paper Sec. 4: 0.08)")
    ap.add_argument("--lambda-d", type=float, default=0.1, help="FLOPS weight, documents (paper Sec. 4: 0.1; "
                    "its NFCorpus appendix uses 0.0006 / 0.0008)")
    ap.add_argument("--runs", default="runs/splade_cai", help="stage folders (re-used when parameters match)")
    a = ap.parse_args()

    from hf_dr.adaptation.cai import CAIArguments, evaluate_splade_variants, run_cai
    from hf_dr.data import load_beir
    from hf_dr.models.splade import SPLADECAI

    for ds in a.datasets:
        data = load_beir(SHARED / "data" / ds, split="test")
        if a.part == "idf":
            model = SPLADECAI.from_backbone(a.model)
            model.fit_idf(data.doc_texts())
            metrics = evaluate_splade_variants(model, data, extra_idf_exponents=(0.5,), extra_bm25_stemmers=(None,))
            save_rows("splade_cai", rows_for(metrics, ds, "splade-tiny: ", "splade_cai", {}))
            for k, v in metrics.items():
                print(f"{ds:8s} {k:40s} nDCG@10={v['ndcg@10']:.4f}", flush=True)
        else:
            default_lambdas = (a.lambda_q, a.lambda_d) == (ap.get_default("lambda_q"), ap.get_default("lambda_d"))
            tag = "" if default_lambdas else f" (λ_Q={a.lambda_q:g}, λ_D={a.lambda_d:g})"
            for name in a.variants:
                vocab, mlm = CHAIN[name]
                folder = name.split(" ")[0].lower() + ("" if default_lambdas else f"-lq{a.lambda_q:g}-ld{a.lambda_d:g}")
                args = CAIArguments(backbone=a.model, target_data=str(SHARED / "data" / ds),
                                    source_data=str(SHARED / "data" / "msmarco-trecdl2019"),
                                    output_dir=str(Path(a.runs) / ds / folder), lambda_q=a.lambda_q, lambda_d=a.lambda_d,
                                    expand_vocabulary=vocab, continual_mlm=mlm, mlm_steps=a.mlm_steps,
                                    splade_steps=a.splade_steps, flops_warmup_steps=max(1, a.splade_steps // 3),
                                    splade_batch_size=a.splade_batch_size, doc_max_length=a.doc_max_length,
                                    mlm_max_length=128)
                report = run_cai(args)
                extra = {"vocab_size": report.get("vocabulary", {}).get("final"), "mlm_steps": a.mlm_steps if mlm else 0,
                         "lambda_q": a.lambda_q, "lambda_d": a.lambda_d,
                         "splade_steps": a.splade_steps, "splade_batch_size": a.splade_batch_size,
                         "doc_max_length": a.doc_max_length}
                save_rows("splade_cai", rows_for(report["metrics"], ds, f"CAI chain{tag}, {name}: ", "splade_cai_chain", extra))
                for k, v in report["metrics"].items():
                    print(f"{ds:8s} {name:32s} {k:16s} nDCG@10={v['ndcg@10']:.4f}", flush=True)


if __name__ == "__main__":
    main()
