"""hf-dr: Hugging Face-native domain adaptation of neural retrievers."""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Heavy submodules load on first use, so `import hf_dr` stays fast and the CLI starts quickly.
_LAZY = {
    "DenseEncoder": "hf_dr.models.dense",
    "load_encoder": "hf_dr.models",
    "BERMEncoder": "hf_dr.models.berm",
    "BERMConfig": "hf_dr.models.berm",
    "DDRModel": "hf_dr.models.ddr",
    "DDRConfig": "hf_dr.models.ddr",
    "SPLADECAI": "hf_dr.models.splade",
    "SPLADECAIConfig": "hf_dr.models.splade",
    "load_beir": "hf_dr.data",
    "save_beir": "hf_dr.data",
    "Retriever": "hf_dr.retrieval",
    "BM25Retriever": "hf_dr.retrieval",
    "EncoderRetriever": "hf_dr.retrieval",
    "HybridRetriever": "hf_dr.retrieval",
    "build_retriever": "hf_dr.factory",
    "evaluate_model": "hf_dr.factory",
    "Embeddings": "hf_dr.embeddings",
    "encode_to_folder": "hf_dr.embeddings",
    "evaluate": "hf_dr.evaluation",
    "BM25Index": "hf_dr.retrieval",
    "DenseIndex": "hf_dr.retrieval",
    "SparseIndex": "hf_dr.retrieval",
    "fuse": "hf_dr.retrieval",
    "evaluate_run": "hf_dr.evaluation",
    "RetrievalTrainer": "hf_dr.training",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hf_dr' has no attribute {name!r}")
