"""BERM: balanced and extractable representations for generalisable dense retrieval (papers/000)."""

from transformers import AutoConfig

from .configuration_berm import BERMConfig
from .modeling_berm import BERMEncoder, BERMOutput

# so that AutoConfig / AutoTokenizer read a saved BERM folder without trust_remote_code in a
# process that has hf-dr (AutoModel still follows the folder's auto_map)
AutoConfig.register(BERMConfig.model_type, BERMConfig, exist_ok=True)

__all__ = ["BERMConfig", "BERMEncoder", "BERMOutput"]
