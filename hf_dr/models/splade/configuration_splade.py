"""Configuration of SPLADECAI: SPLADE with CAI domain adaptation (AdaLM + IDF)."""

from __future__ import annotations

from transformers import AutoConfig, PretrainedConfig


class SPLADECAIConfig(PretrainedConfig):
    """Composite config: ``backbone_config`` is the ``*ForMaskedLM`` backbone's config.

    Args:
        query_mode: ``"splade"`` — full SPLADE query vectors (Eq. 4); ``"bow"`` — SPLADE-Doc,
            a binary bag of the query's tokens (Eq. 5, no query expansion).
        use_idf: multiply document vectors by the fitted IDF weights (Eq. 7). Queries never are.
        idf_exponent: documents are multiplied by ``idf ** idf_exponent``; 1.0 is the paper's
            Eq. 7, 0.5 is what the authors' released code does (sqrt(IDF)).
        max_query_length / max_doc_length: truncation lengths of the encode loop.
        pool_vocab_block: vocabulary rows projected at a time while max-pooling: each
            document's unpadded positions are projected onto ``block`` rows of the MLM decoder
            and reduced at once, so the ``[batch, length, |V|]`` logits are never written (on
            GPU, and in training: the whole batch per block; training keeps the position of
            each maximum and sends the gradient there). Identical vectors; 2.6x faster pooling
            on 2 CPU cores for splade-tiny at inference. 0 projects everything at once.
    """

    model_type = "splade_cai"
    sub_configs = {"backbone_config": AutoConfig}

    def __init__(self, backbone_config=None, query_mode: str = "splade", use_idf: bool = False,
                 idf_exponent: float = 1.0, max_query_length: int = 64, max_doc_length: int = 256,
                 pool_vocab_block: int = 1024, **kwargs):
        if isinstance(backbone_config, dict):
            backbone_config = AutoConfig.for_model(**backbone_config)
        if query_mode not in ("splade", "bow"):
            raise ValueError(f"query_mode must be 'splade' or 'bow', got {query_mode!r}")
        self.backbone_config = backbone_config
        self.query_mode = query_mode
        self.use_idf = use_idf
        self.idf_exponent = float(idf_exponent)
        self.max_query_length = max_query_length
        self.max_doc_length = max_doc_length
        self.pool_vocab_block = pool_vocab_block
        kwargs.pop("pool_chunk_size", None)  # older configs: position chunks, replaced by vocabulary blocks
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return self.backbone_config.vocab_size if self.backbone_config is not None else 0
