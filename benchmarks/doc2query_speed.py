"""How long GPL's query generation takes per document on a GPU.

    python benchmarks/doc2query_speed.py                     # a CUDA GPU: T5 at t5-base's size
    python benchmarks/doc2query_speed.py --docs 20 --size tiny --allow-cpu   # a smoke test of the script

GPL generates its queries with ``BeIR/query-gen-msmarco-t5-base-v1``: T5 at t5-base's size (12+12
layers, d_model 768, d_ff 3072, 12 heads), top-p 0.95 / top-k 25 sampling, up to 64 new tokens.
Those weights cannot be fetched here, so this builds a T5 of that size **from its config** (seeded
random weights) beside all-MiniLM-L6-v2's WordPiece tokenizer (its vocabulary, 30,522 entries, sets
the embedding size instead of T5's 32,128), and times ``hf-dr generate-queries --generator
doc2query:FOLDER`` over the first ``--docs`` documents of SciFact, in one process: docs/s and seconds
per document over the whole command (model load included), peak GPU memory.

What the number is: an **upper bound** on the trained model's generation time at this size. Random
weights rarely sample the end-of-sequence token, so nearly every query runs all 64 new tokens, where
a trained doc2query model stops after a query's 10-20 tokens; the row records the mean number of
tokens generated. Rows: benchmarks/results/corpus_only.json (table ``doc2query_speed``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
#: t5-base's architecture (what GPL's generator has), and a tiny one for a smoke test
SIZES = {"base": dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_decoder_layers=12, num_heads=12),
         "tiny": dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4)}


def build_t5(folder: Path, size: str, tokenizer_from: Path, seed: int = 0) -> int:
    """A T5 of ``size`` with seeded random weights and ``tokenizer_from``'s tokenizer, saved to ``folder``;
    returns its parameter count."""
    import torch
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(str(tokenizer_from))
    cfg = T5Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id,
                   decoder_start_token_id=tok.pad_token_id, **SIZES[size])
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(cfg)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(SHARED / "data" / "scifact"))
    ap.add_argument("--docs", type=int, default=1000, help="the first N documents of the corpus (default 1000)")
    ap.add_argument("--queries-per-doc", type=int, default=3, help="GPL's default on a corpus of 83k+ documents")
    ap.add_argument("--batch-size", type=int, default=32, help="documents per generation batch (the command's default)")
    ap.add_argument("--size", choices=sorted(SIZES), default="base")
    ap.add_argument("--work", default="runs/doc2query_speed")
    ap.add_argument("--allow-cpu", action="store_true", help="run without a GPU (a smoke test of this script)")
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available() and not a.allow_cpu:
        ap.error("no CUDA GPU here: this benchmark measures the GPU (--allow-cpu for a smoke test)")
    from hf_dr.cli import main as cli

    work = Path(a.work)
    model_dir, sub, out = work / f"t5-{a.size}-random", work / f"corpus-{a.docs}", work / "queries"
    params = build_t5(model_dir, a.size, SHARED / "models" / "all-MiniLM-L6-v2")
    sub.mkdir(parents=True, exist_ok=True)
    with open(Path(a.data) / "corpus.jsonl", encoding="utf-8") as f, open(sub / "corpus.jsonl", "w", encoding="utf-8") as g:
        for i, line in enumerate(f):
            if i >= a.docs:
                break
            g.write(line)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    rc = cli(["generate-queries", "--data", str(sub), "--output", str(out), "--generator", f"doc2query:{model_dir}",
              "--queries-per-doc", str(a.queries_per_doc), "--batch-size", str(a.batch_size), "--no-progress",
              "--overwrite"])
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if rc:
        raise SystemExit(f"hf-dr generate-queries exited {rc}")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    queries = [json.loads(line)["text"] for line in open(out / "queries.jsonl", encoding="utf-8") if line.strip()]
    tokens = sum(len(tok(q, add_special_tokens=False)["input_ids"]) for q in queries) / max(len(queries), 1)
    peak = round(torch.cuda.max_memory_allocated() / 2**20, 1) if torch.cuda.is_available() else None
    row = {"table": "doc2query_speed", "dataset": Path(a.data).name, "row": f"t5-{a.size}",
           "system": f"T5 ({a.size} size, {params / 1e6:.0f}M parameters, random weights) doc2query on {machine()}",
           "command": command_line(), "machine": machine(), "docs": a.docs, "queries_per_doc": a.queries_per_doc,
           "batch_size": a.batch_size, "queries": len(queries),
           "metrics": {"docs/s": round(a.docs / wall, 2), "s/doc": round(wall / a.docs, 4),
                       "queries/s": round(len(queries) / wall, 1), "tokens/query": round(tokens, 1),
                       "peak GPU MB": peak, "wall s": round(wall, 1)}}
    print(json.dumps(row, indent=1), flush=True)
    save_rows("corpus_only", [row], merge_key=("table", "dataset", "row", "machine"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
