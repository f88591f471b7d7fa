"""Queries from a corpus and nothing else: generators (:mod:`.generators`: ``cloze``,
``span``, ``terms``, ``doc2query:ID``) and the resumable, sharded folder they write
(:mod:`.folder`, ``hf-dr generate-queries``); ``hf-dr adapt`` runs it as its ``generate`` stage
when the data folder has no queries (or ``--queries generate``)."""

from .folder import (DEFAULT_SHARD_SIZE, GPL_TOTAL, GeneratedQueries, GenerationError, count_per_doc,
                     generate_to_folder, read_generated)
from .generators import (DEFAULT_GENERATOR, WEIGHT_FREE, QueryGenerator, check_generator, generator_names,
                         get_generator)

__all__ = ["generate_to_folder", "read_generated", "GeneratedQueries", "GenerationError", "count_per_doc",
           "GPL_TOTAL", "DEFAULT_SHARD_SIZE", "QueryGenerator", "get_generator", "check_generator",
           "generator_names", "DEFAULT_GENERATOR", "WEIGHT_FREE"]
