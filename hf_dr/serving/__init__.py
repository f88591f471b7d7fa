"""Serving search over configured corpora, without any web framework: what the Gradio Space
(``spaces/search_demo/app.py``) shows is built here.

* :class:`SearchEngine` (:mod:`.engine`): one query on a configured corpus with any retriever kind,
  each index built once in the background; errors as sentences a visitor may read.
* :class:`ServingConfig` (:mod:`.config`): its corpora, models, saved indexes, DAMs and bounds.
* :class:`BuildCache` (:mod:`.cache`): values built once per key in background threads, in a bounded LRU.
* :func:`matched_terms` / :func:`essential_unit` (:mod:`.highlight`): why a hit matched (SPLADE's
  terms, BERM's essential unit), as text and HTML.
"""

from .cache import BuildCache
from .config import SAVED_INDEX_RETRIEVERS, ServingConfig, corpus_name
from .engine import (RETRIEVERS, SOURCE_DAM, UNKNOWN_CORPUS, SearchEngine, StillBuilding, UserError,
                     available_retrievers, berm_status, redact_paths)
from .highlight import PASSAGE_HTML, essential_unit, matched_terms

__all__ = ["BuildCache", "PASSAGE_HTML", "RETRIEVERS", "SAVED_INDEX_RETRIEVERS", "SOURCE_DAM", "SearchEngine",
           "ServingConfig", "StillBuilding", "UNKNOWN_CORPUS", "UserError", "available_retrievers", "berm_status",
           "corpus_name", "essential_unit", "matched_terms", "redact_paths"]
