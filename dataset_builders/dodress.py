"""Dataset builders of DoDress (papers/002): pseudo-labelled triplets for a target corpus, and
the conversational (CDR) variant. Thin functions over :mod:`hf_dr.labeling`; each writes a
folder with the data (``datasets`` + parquet) and a dataset card.

    from dataset_builders.dodress import pseudo_labels, cdr_pseudo_labels
    pseudo_labels("../shared/data/scifact", "out/scifact-dodress", dense_model="../shared/models/all-MiniLM-L6-v2")
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["pseudo_labels", "cdr_pseudo_labels"]


def pseudo_labels(data: str, output: str, *, dense_model: str | None = None, reranker: str = "fusion",
                  cache_dir: str | None = None, command: str | None = None, **config):
    """DoDress triplets for the training queries of the BEIR folder (or Hub id) ``data``.
    ``config``: fields of :class:`hf_dr.labeling.PseudoLabelConfig` (k, m, negatives, ...)."""
    from hf_dr.data import load_beir
    from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels
    from hf_dr.models import load_encoder

    cfg = PseudoLabelConfig(**config)
    cfg.validate()
    encoder = load_encoder(dense_model) if dense_model else None
    return build_pseudo_labels(load_beir(data, split=cfg.split), output, cfg, reranker=reranker,
                               dense_encoder=encoder, dense_name=dense_model, cache_dir=cache_dir, command=command)


def cdr_pseudo_labels(sessions: dict, corpus: str, output: str, *, rewriter: str, dense_model: str,
                      reranker: str = "fusion", cache_dir: str | None = None, **config):
    """CDR triplets (papers/002 §5): ``sessions`` ``{qid: {"current", "history"}}`` (e.g.
    :func:`hf_dr.labeling.conversational.load_cast_sessions`) are rewritten by the seq2seq
    ``rewriter`` (folder or Hub id), labelled on the corpus of the BEIR folder ``corpus`` like
    ad hoc queries, and written with queries ``hisQ1|...|curQ`` to ``output/cdr``."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_dr.data import load_beir
    from hf_dr.labeling.conversational import build_cdr_triplets
    from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels
    from hf_dr.labeling.rewriting import rewrite
    from hf_dr.models import load_encoder

    cfg = PseudoLabelConfig(**config)
    tok = AutoTokenizer.from_pretrained(rewriter)
    model = AutoModelForSeq2SeqLM.from_pretrained(rewriter)
    qids = list(sessions)
    rewritten = rewrite(model, tok, [sessions[q]["current"] for q in qids], [sessions[q]["history"] for q in qids],
                        show_progress_bar=True)
    labels = build_pseudo_labels(load_beir(corpus, split=None), output, cfg, reranker=reranker,
                                 dense_encoder=load_encoder(dense_model), dense_name=dense_model,
                                 queries=dict(zip(qids, rewritten)), cache_dir=cache_dir)
    cdr = build_cdr_triplets(labels.train, sessions)
    cdr.save_to_disk(str(Path(output) / "cdr"))
    cdr.to_parquet(str(Path(output) / "data" / "cdr-00000-of-00001.parquet"))
    return cdr
