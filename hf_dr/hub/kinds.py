"""The publishable model kinds (:data:`MODEL_KINDS`, a small registry of :class:`ModelKind`): the
card template, the loading class, the paper and the card metadata of each. Read by the folder
writer (:mod:`.models`) and the card renderer (:mod:`.cards`)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from .errors import HubError

__all__ = ["ModelKind", "MODEL_KINDS"]


# ---------------------------------------------------------------------------- the registry
@dataclass
class ModelKind:
    """One publishable model kind.

    Args:
        name: registry key (``splade_cai``, ``ddr_rem``, ``ddr_dam``, ``berm``, ``dense``).
        template: card template file name under ``model_cards/`` (without ``.md``).
        module / class_name: where the loading class lives (imported only when needed).
        title / paper: the method, and its paper (``{"title", "authors", "venue", "url"}``).
        tags / pipeline_tag / library_name: card metadata.
        remote_code: the folder loads through ``AutoModel(..., trust_remote_code=True)``.
        similarity: how the usage snippet scores queries against documents.
        hooks: ``module.Class`` holding the kind's publishing hooks when the loading class is not
            hf-dr's (the DAM, a plain transformers checkpoint); default: the loading class.

    The hooks class (:meth:`hooks_class`) provides, optionally,
    ``save_for_hub(src, out, **options) -> (model, extra card variables)`` (load the saved folder,
    write the repo files; default: ``from_pretrained(src).save_pretrained(out)``),
    ``card_variables(model, info) -> dict`` (the variables of the kind's own template, from the
    config and ``train_info.json`` / ``dam_info.json``; an ordinary method of the model classes)
    and, optionally, ``usage_snippet(repo_id, **lengths)`` or ``st_native = True``
    (a Sentence Transformers folder: Sentence Transformers' snippet; default: the ``trust_remote_code``
    snippet of :func:`hf_dr.hub.cards.usage_snippet`).
    """

    name: str
    template: str
    module: str
    class_name: str
    title: str
    paper: dict
    tags: list[str] = field(default_factory=list)
    pipeline_tag: str = "feature-extraction"
    library_name: str = "transformers"
    remote_code: bool = True
    similarity: str = "dot"
    hooks: str | None = None

    def hooks_class(self):
        module, name = self.hooks.rsplit(".", 1) if self.hooks else (self.module, self.class_name)
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise HubError(f"{self.title} support is not available in this installation "
                           f"({module}.{name} cannot be imported: {e})") from e


# the method papers (shared/papers/000, 001, 003); ``url`` only where the identifier is certain
_BERM_PAPER = {"title": "BERM: Training the Balanced and Extractable Representation for Matching to Improve "
                        "Generalization Ability of Dense Retrieval",
               "authors": "Shicheng Xu, Liang Pang, Huawei Shen, Xueqi Cheng", "venue": "ACL 2023", "url": None}
_DDR_PAPER = {"title": "Disentangled Modeling of Domain and Relevance for Adaptable Dense Retrieval",
              "authors": "Jingtao Zhan, Qingyao Ai, Yiqun Liu, Jiaxin Mao, Xiaohui Xie, Min Zhang, Shaoping Ma",
              "venue": "arXiv 2022", "url": "https://arxiv.org/abs/2208.05753"}
_CAI_PAPER = {"title": "Unsupervised Domain Adaptation for Sparse Retrieval by Filling Vocabulary and Word "
                       "Frequency Gaps", "authors": "Hiroki Iida, Naoaki Okazaki", "venue": "AACL-IJCNLP 2022",
              "url": None}
_SBERT_PAPER = {"title": "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks",
                "authors": "Nils Reimers, Iryna Gurevych", "venue": "EMNLP 2019", "url": "https://arxiv.org/abs/1908.10084"}

MODEL_KINDS: dict[str, ModelKind] = {
    "splade_cai": ModelKind("splade_cai", "splade_cai", "hf_dr.models.splade", "SPLADECAI", "SPLADE-CAI", _CAI_PAPER,
                            tags=["splade", "sparse-retrieval", "domain-adaptation", "adalm", "idf"]),
    "ddr_rem": ModelKind("ddr_rem", "ddr_rem", "hf_dr.models.ddr", "DDRModel", "DDR REM", _DDR_PAPER,
                         tags=["ddr", "rem", "dense-retrieval", "peft", "lora", "domain-adaptation"]),
    "ddr_dam": ModelKind("ddr_dam", "ddr_dam", "transformers", "AutoModelForMaskedLM", "DDR DAM", _DDR_PAPER,
                         tags=["ddr", "dam", "domain-adaptation"], pipeline_tag="fill-mask", remote_code=False,
                         hooks="hf_dr.models.ddr.DAMCheckpoint"),
    "berm": ModelKind("berm", "berm", "hf_dr.models.berm", "BERMEncoder", "BERM", _BERM_PAPER,
                      tags=["berm", "dense-retrieval", "domain-adaptation"]),
    "dense": ModelKind("dense", "dense", "hf_dr.models.dense", "DenseEncoder", "Dense retriever", _SBERT_PAPER,
                       tags=["dense-retrieval", "sentence-transformers"], library_name="sentence-transformers",
                       remote_code=False),
}
