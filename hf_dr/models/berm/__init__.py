"""BERM: balanced and extractable representations for generalisable dense retrieval (papers/000)."""

from .configuration_berm import BERMConfig
from .modeling_berm import BERMEncoder, BERMOutput

__all__ = ["BERMConfig", "BERMEncoder", "BERMOutput"]
