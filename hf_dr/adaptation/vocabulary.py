"""AdaLM vocabulary expansion (Yao et al. 2021; Algorithm 1 of the SPLADE-CAI paper).

:func:`expand_vocabulary` grows a WordPiece vocabulary with frequent target-domain tokens;
:func:`apply_vocabulary` rebuilds a real WordPiece tokenizer from the extended vocabulary
(new ``##x`` pieces are continuation pieces, not "added tokens" matched before WordPiece)
and resizes the MLM, initialising each new embedding row **explicitly** with the mean of
the original tokenizer's sub-token embeddings of that token (and the decoder bias alike).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..analysis.plotting import save_figure

logger = logging.getLogger(__name__)

__all__ = ["VocabularyExpansion", "expand_vocabulary", "apply_vocabulary", "unigram_entropy",
           "is_noise_token", "plot_entropy_curve"]


def is_noise_token(token: str) -> bool:
    """Tokens made only of digits and punctuation / symbols (``##`` ignored): excluded by AdaLM."""
    t = token[2:] if token.startswith("##") else token
    return all(c.isdigit() or unicodedata.category(c)[0] in "PS" for c in t)


def _count_tokens(tokenizer, corpus: Sequence[str], batch_size: int = 1000) -> Counter:
    counts: Counter = Counter()
    for s in range(0, len(corpus), batch_size):
        for ids in tokenizer(list(corpus[s:s + batch_size]), add_special_tokens=False, verbose=False)["input_ids"]:
            counts.update(ids)
    return counts


def unigram_entropy(tokenizer, corpus: Sequence[str]) -> float:
    """Eq. 21-22 (Appendix E): ``I(C) = sum_x sum_i log p(x_i)`` with ``p`` the unigram
    probability of each sub-word under ``tokenizer`` on ``corpus`` (a negative number; it
    rises towards 0 as the vocabulary fits the corpus better)."""
    counts = _count_tokens(tokenizer, corpus)
    total = sum(counts.values())
    return float(sum(c * math.log(c / total) for c in counts.values()))


@dataclass
class VocabularyExpansion:
    """Result of Algorithm 1: the final vocabulary (original tokens first, in id order), the
    added tokens, and per iteration the vocabulary size and the corpus unigram entropy."""

    vocab: list[str]
    added: list[str]
    sizes: list[int] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.vocab)


def expand_vocabulary(tokenizer, corpus: Sequence[str], delta_v: int = 3000, max_iterations: int | None = None,
                      compute_entropy: bool = True, show_progress: bool = True) -> VocabularyExpansion:
    """Algorithm 1. ``tokenizer`` is the original (fast WordPiece) tokenizer, ``corpus`` the
    target-domain texts. Iteration ``i`` trains a WordPiece tokenizer of size
    ``|V0| + i * delta_v`` on the corpus, ranks its tokens by frequency on the corpus, and adds
    them to ``V0`` (no duplicates, no digit/punctuation-only tokens) until the target size; it
    stops when an iteration adds fewer than ``delta_v`` tokens."""
    from tqdm.auto import tqdm

    corpus = [c for c in corpus if c and c.strip()]
    if not corpus:
        raise ValueError("vocabulary expansion needs a non-empty corpus")
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("vocabulary expansion needs a fast (tokenizers-backed) WordPiece tokenizer")
    v0 = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda x: x[1])]
    known = set(v0)
    result = VocabularyExpansion(vocab=list(v0), added=[])
    if compute_entropy:
        result.sizes.append(len(v0))
        result.entropies.append(unigram_entropy(tokenizer, corpus))
    prev_added: list[str] = []
    i = 0
    bar = tqdm(desc="AdaLM vocabulary expansion", unit="step", disable=not show_progress)
    while max_iterations is None or i < max_iterations:
        i += 1
        target = len(v0) + i * delta_v
        t_i = tokenizer.train_new_from_iterator(iter(corpus), vocab_size=target, show_progress=False)
        freq = _count_tokens(t_i, corpus)
        id_to_tok = {v: k for k, v in t_i.get_vocab().items()}
        ranked = sorted(id_to_tok, key=lambda j: (-freq.get(j, 0), j))
        added = []
        for j in ranked:
            if len(v0) + len(added) >= target:
                break
            tok = id_to_tok[j]
            if freq.get(j, 0) == 0 or tok in known or tok in t_i.all_special_tokens or is_noise_token(tok):
                continue
            added.append(tok)
        grew = len(added) - len(prev_added)
        bar.update(1)
        bar.set_postfix(size=len(v0) + len(added), grew=grew)
        if grew <= 0:
            break
        prev_added = added
        result.added = added
        result.vocab = v0 + added
        if compute_entropy:
            new_tok = _build_tokenizer(tokenizer, result.vocab)
            result.sizes.append(len(result.vocab))
            result.entropies.append(unigram_entropy(new_tok, corpus))
        if grew < delta_v:  # line 13: |V_i| - |V_{i-1}| < delta_v
            break
    bar.close()
    logger.info("AdaLM: %d -> %d tokens (%d added) in %d iterations", len(v0), len(result.vocab), len(result.added), i)
    return result


def _build_tokenizer(original, vocab: list[str]):
    """A WordPiece tokenizer with ``original``'s normalisation and special tokens over ``vocab``."""
    import inspect

    from transformers import BertTokenizerFast

    init = getattr(original, "init_kwargs", {}) or {}
    kwargs = dict(do_lower_case=init.get("do_lower_case", True),
                  tokenize_chinese_chars=init.get("tokenize_chinese_chars", True),
                  strip_accents=init.get("strip_accents", None), model_max_length=original.model_max_length)
    if "vocab" in inspect.signature(BertTokenizerFast.__init__).parameters:  # transformers >= 5
        return BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, **kwargs)
    with tempfile.TemporaryDirectory() as d:  # transformers 4: from a vocab.txt
        path = os.path.join(d, "vocab.txt")
        Path(path).write_text("\n".join(vocab) + "\n", encoding="utf-8")
        tok = BertTokenizerFast(vocab_file=path, **kwargs)
    return tok


def _subtoken_ids(original, token: str) -> list[int]:
    """Ids of ``token``'s pieces under the original tokenizer (a ``##x`` piece is split as
    the word ``x``; its first piece is taken as a continuation piece when one exists)."""
    cont = token.startswith("##")
    word = token[2:] if cont else token
    pieces = original.tokenize(word)
    if cont and pieces and ("##" + pieces[0]) in original.get_vocab():
        pieces[0] = "##" + pieces[0]
    ids = original.convert_tokens_to_ids(pieces)
    return [i for i in ids if i is not None and i != original.unk_token_id] or [original.unk_token_id]


def apply_vocabulary(model, original_tokenizer, expansion: VocabularyExpansion | Sequence[str]):
    """Resize ``model`` (a ``*ForMaskedLM``) to the expanded vocabulary and return
    ``(model, new_tokenizer)``. New rows = mean of the original sub-token embeddings; new
    decoder-bias entries = mean of the same sub-tokens' biases; decoder stays tied."""
    vocab = expansion.vocab if isinstance(expansion, VocabularyExpansion) else list(expansion)
    old_vocab = original_tokenizer.get_vocab()
    n_old = len(old_vocab)
    if vocab[:n_old] != [t for t, _ in sorted(old_vocab.items(), key=lambda x: x[1])]:
        raise ValueError("the expanded vocabulary must start with the original vocabulary in id order")
    emb_old = model.get_input_embeddings().weight.detach().clone()
    if emb_old.shape[0] < n_old:
        raise ValueError(f"the model has {emb_old.shape[0]} embeddings but the tokenizer {n_old} tokens")
    out = model.get_output_embeddings()
    bias = getattr(out, "bias", None)
    bias_old = bias.detach().clone() if bias is not None else None
    new_tok = _build_tokenizer(original_tokenizer, vocab)
    model.resize_token_embeddings(len(vocab), mean_resizing=False)
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        for j, token in enumerate(vocab[n_old:], start=n_old):
            ids = torch.tensor(_subtoken_ids(original_tokenizer, token))
            emb[j] = emb_old[ids].mean(0)
            out_now = model.get_output_embeddings()
            if bias_old is not None and getattr(out_now, "bias", None) is not None:
                out_now.bias[j] = bias_old[ids].mean()
    model.tie_weights()
    return model, new_tok


def plot_entropy_curve(expansion: VocabularyExpansion, path: str | os.PathLike, title: str = "") -> Path:
    """Appendix E / Figure 3: corpus unigram entropy against vocabulary size."""
    from ..extras import require

    require("matplotlib").use("Agg")
    import matplotlib.pyplot as plt

    if not expansion.sizes:
        raise ValueError("no entropy recorded: run expand_vocabulary(..., compute_entropy=True)")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(expansion.sizes, expansion.entropies, marker="o")
    ax.set_xlabel("vocabulary size")
    ax.set_ylabel("unigram entropy I(C)")
    ax.set_title(title or "AdaLM vocabulary expansion")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)
