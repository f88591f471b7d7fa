"""SPLADE with CAI domain adaptation (papers/003)."""

from .configuration_splade import SPLADECAIConfig
from .modeling_splade import SPLADECAI, splade_pool

__all__ = ["SPLADECAI", "SPLADECAIConfig", "splade_pool"]
