"""Evaluate a retriever on a BEIR folder or Hub dataset (the library calls behind `hf-dr evaluate`).

    python examples/evaluate_beir.py --data ../shared/data/scifact --retriever dense \
        --model ../shared/models/all-MiniLM-L6-v2 --output out/minilm
"""

from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from hf_dr.data import load_beir
from hf_dr.evaluation import evaluate, format_table
from hf_dr.factory import build_retriever
from hf_dr.retrieval import write_trec_run


@dataclass
class Args:
    data: str = field(metadata={"help": "BEIR folder or Hub dataset id"})
    retriever: str = field(default="bm25", metadata={"help": "bm25, dense, sparse or hybrid"})
    model: str | None = field(default=None, metadata={"help": "model folder or Hub id"})
    split: str = field(default="test", metadata={"help": "qrels split"})
    output: str | None = field(default=None, metadata={"help": "folder for run.trec and metrics.json"})
    fusion: str = field(default="zscore", metadata={"help": "hybrid fusion: zscore, minmax, sum, rrf"})


def main():
    (a,) = HfArgumentParser(Args).parse_args_into_dataclasses()
    data = load_beir(a.data, split=a.split)
    retriever = build_retriever(a.retriever, data, a.model, fusion=a.fusion)
    result = evaluate(retriever, data)
    print(format_table({a.retriever: result.aggregate}))
    if a.output:
        write_trec_run(result.run, Path(a.output) / "run.trec")
        result.to_json(Path(a.output) / "metrics.json", **retriever.info())


if __name__ == "__main__":
    main()
