"""``hf-dr ingest``: a folder of documents (PDF, DOCX, HTML, Markdown, text; JSONL / CSV / Parquet
rows) -> a BEIR corpus folder of passages that fit the model that will read them, each with its
source (file, page, character span), and a manifest of what became of every file.

extract.py   one extractor per format (the ``documents`` extra), bad files -> :class:`SkipFile`
split.py     token-aware passages on paragraph / sentence boundaries, with overlap and heading paths
folder.py    the driver: listing (never outside DIR), shards (:mod:`hf_dr.shards`), manifest
dataset.py   a dataset of ``datasets.load_dataset`` (a Hub id): its rows staged once, then read as a table
"""

from .extract import Block, Extracted, SkipFile, extract
from .folder import (BEIR_FILES, DEFAULT_MAX_FILE_SIZE, DEFAULT_OVERLAP, DEFAULT_SHARD_SIZE, IngestError, doc_id, ingest_folder,
                     ingest_stage, list_inputs, passage_doc)
from .dataset import ingest_dataset, load_rows
from .split import DEFAULT_PACK_BELOW, Passage, TokenCounter, split_document

__all__ = ["ingest_dataset", "load_rows", "BEIR_FILES", "Block", "Extracted", "SkipFile", "extract", "IngestError",
           "ingest_folder", "ingest_stage", "list_inputs", "doc_id", "passage_doc", "Passage", "TokenCounter",
           "split_document", "DEFAULT_MAX_FILE_SIZE", "DEFAULT_OVERLAP", "DEFAULT_SHARD_SIZE",
           "DEFAULT_PACK_BELOW"]
