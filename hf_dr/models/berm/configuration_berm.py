"""Configuration of BERMEncoder (Xu et al. 2023, "BERM: Training the Balanced and Extractable
Representation for Matching to Improve Generalization Ability of Dense Retrieval", papers/000).

Self-contained (transformers only) so ``trust_remote_code`` can load a saved folder.
"""

from __future__ import annotations

from transformers import AutoConfig, PretrainedConfig

POOLINGS = ("cls", "mean")
SIMILARITIES = ("dot", "cos")


class BERMConfig(PretrainedConfig):
    """Composite config: ``backbone_config`` is the encoder backbone's config (any ``AutoModel``).

    BERM adds no parameter: at inference the model is a plain single-vector bi-encoder (§4.2,
    Fig. 3c); the unit losses live in :mod:`hf_dr.losses` and act only in training.

    Args:
        backbone_config: config (or dict) of the backbone.
        pooling: ``"cls"`` (the paper: ``t_p`` is the [CLS] state) or ``"mean"``.
        similarity: ``"dot"`` (the paper) or ``"cos"`` (L2-normalised outputs).
        max_query_length / max_doc_length: truncation lengths of ``encode_queries`` / ``encode_corpus``.
        backbone_name_or_path: the checkpoint the model was built from (informational).
    """

    model_type = "berm"
    sub_configs = {"backbone_config": AutoConfig}

    def __init__(self, backbone_config=None, pooling: str = "cls", similarity: str = "dot",
                 max_query_length: int = 64, max_doc_length: int = 256, backbone_name_or_path: str | None = None,
                 **kwargs):
        if isinstance(backbone_config, dict):
            backbone_config = AutoConfig.for_model(**backbone_config)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")
        self.backbone_config = backbone_config
        self.pooling = pooling
        self.similarity = similarity
        self.max_query_length = max_query_length
        self.max_doc_length = max_doc_length
        self.backbone_name_or_path = backbone_name_or_path
        super().__init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        return getattr(self.backbone_config, "hidden_size", 0) if self.backbone_config is not None else 0
