"""Configuration of DDR (Zhan et al. 2022, "Disentangled Modeling of Domain and Relevance for
Adaptable Dense Retrieval"): a Transformer backbone (the Domain Adaption Module, DAM) plus a
Relevance Estimation Module (REM) made of LoRA and parallel adapters (paper Sec. 3.1, Fig. 2).

Self-contained (torch / transformers only) so ``trust_remote_code`` can load a saved folder.
"""

from __future__ import annotations

import copy

from transformers import AutoConfig, PretrainedConfig

REM_TYPES = ("lora+pa", "lora", "pa")
POOLINGS = ("mean", "cls")
SIMILARITIES = ("dot", "cos")


class DDRConfig(PretrainedConfig):
    """Composite config: ``backbone_config`` describes the DAM (any ``*ForMaskedLM`` model of
    the BERT family); the other fields describe the REM and the embedding.

    Args:
        backbone_config: config (or dict) of the DAM backbone.
        rem_type: ``"lora+pa"`` (the paper's default), ``"lora"`` or ``"pa"`` (Table 5).
        lora_rank: LoRA bottleneck; 192 in the paper's released models (96 also in Table 5).
        lora_alpha: LoRA scaling numerator (scaling = alpha / rank); defaults to ``lora_rank``
            (scaling 1, as adapter-transformers' LoRA used by the authors).
        lora_dropout: dropout on the LoRA input.
        lora_target_modules: attention projections that get LoRA (names inside the backbone).
        pa_bottleneck: parallel-adapter bottleneck; ``None`` = hidden_size // 4 (reduction 4).
        pa_scaling: multiplier of the parallel-adapter output (4, He et al. 2022).
        pooling: ``"mean"`` (paper) or ``"cls"``.
        similarity: ``"dot"`` (paper, English) or ``"cos"`` (paper, Chinese; L2-normalised outputs).
        max_query_length / max_doc_length: truncation lengths of ``encode_queries`` / ``encode_corpus``.
        dam_name_or_path: the DAM this REM was last paired with (used when no ``dam=`` is given).
    """

    model_type = "ddr"
    sub_configs = {"backbone_config": AutoConfig}

    def __init__(self, backbone_config=None, rem_type: str = "lora+pa", lora_rank: int = 192,
                 lora_alpha: float | None = None, lora_dropout: float = 0.0,
                 lora_target_modules: list[str] | None = None, pa_bottleneck: int | None = None,
                 pa_scaling: float = 4.0, pooling: str = "mean", similarity: str = "dot",
                 max_query_length: int = 64, max_doc_length: int = 512,
                 dam_name_or_path: str | None = None, **kwargs):
        if isinstance(backbone_config, dict):
            from transformers import CONFIG_MAPPING

            backbone_config = dict(backbone_config)
            mt = backbone_config.pop("model_type", None)
            if mt is None:
                raise ValueError("backbone_config needs a model_type")
            backbone_config = CONFIG_MAPPING[mt](**backbone_config)
        elif backbone_config is not None:
            # a copy: PretrainedConfig.__init__ resets sub-configs' attention implementation,
            # which must not reach the live config of an already loaded backbone
            backbone_config = copy.deepcopy(backbone_config)
        self.backbone_config = backbone_config
        if rem_type not in REM_TYPES:
            raise ValueError(f"rem_type must be one of {REM_TYPES}, got {rem_type!r}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")
        if lora_rank <= 0:
            raise ValueError(f"lora_rank must be positive, got {lora_rank}")
        self.rem_type = rem_type
        self.lora_rank = int(lora_rank)
        self.lora_alpha = float(lora_alpha) if lora_alpha is not None else float(lora_rank)
        self.lora_dropout = float(lora_dropout)
        self.lora_target_modules = list(lora_target_modules or ["query", "key", "value"])
        self.pa_bottleneck = pa_bottleneck
        self.pa_scaling = float(pa_scaling)
        self.pooling = pooling
        self.similarity = similarity
        self.max_query_length = int(max_query_length)
        self.max_doc_length = int(max_doc_length)
        self.dam_name_or_path = dam_name_or_path
        super().__init__(**kwargs)

    @property
    def use_lora(self) -> bool:
        return "lora" in self.rem_type

    @property
    def use_pa(self) -> bool:
        return "pa" in self.rem_type

    def pa_dim(self) -> int:
        return int(self.pa_bottleneck or self.backbone_config.hidden_size // 4)

    def dam_signature(self) -> dict:
        """What a DAM must share with this REM to be swapped in."""
        b = self.backbone_config
        return {"model_type": b.model_type, "hidden_size": b.hidden_size,
                "num_hidden_layers": b.num_hidden_layers, "vocab_size": b.vocab_size}
