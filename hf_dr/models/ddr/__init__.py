"""DDR: Disentangled Dense Retrieval (Zhan et al. 2022) — swappable Domain Adaption
Modules (the backbone) under a once-trained Relevance Estimation Module (LoRA + parallel
adapters)."""

from .configuration_ddr import DDRConfig
from .modeling_ddr import DAMCheckpoint, DAMMismatchError, DDRModel, ParallelAdapter, load_dam_model

__all__ = ["DDRConfig", "DDRModel", "DAMMismatchError", "ParallelAdapter", "load_dam_model", "DAMCheckpoint"]
