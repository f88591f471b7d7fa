"""Passages that fit the model that will read them.

A document (its title and blocks, :mod:`hf_dr.ingest.extract`) is cut into passages of at most
``max_tokens`` tokens *as the model reads them*: its special tokens, its document prompt, the
passage's title (the document's title and the heading path above the passage) and the text, counted
with the model's own tokenizer (:class:`TokenCounter`; whitespace-separated words without one).

A passage is one paragraph where the paragraph fits the window; a longer paragraph is cut on
sentence boundaries into pieces packed up to the window, and only a sentence longer than a whole
passage is cut between tokens. Whole paragraphs are not packed together unless ``pack_below`` says
so (a passage then takes the next paragraph while it holds fewer tokens than that): packing two
paragraphs that each stand alone puts two topics in one vector, and cost all-MiniLM-L6-v2 MaxP
nDCG@10 on all three long-document sets measured (docs/ingest.md, "Packing paragraphs"). The rest of a
cut paragraph is never packed with the next one. A passage never spans two heading paths.
Consecutive pieces of one paragraph share up to ``overlap`` tokens (whole sentences: the last
sentences of a piece open the next); overlap mends cuts inside a paragraph, not the boundaries its
author made.

The document's text is its blocks joined by a blank line (``"\\n\\n"``); each passage's ``start`` and
``end`` are character offsets into it, and its text is exactly ``doc_text[start:end]``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .extract import Block

__all__ = ["TokenCounter", "Passage", "split_document", "document_text", "BLOCK_SEPARATOR", "passage_title",
           "DEFAULT_PACK_BELOW"]

BLOCK_SEPARATOR = "\n\n"
#: whole paragraphs are packed into one passage only while it holds fewer tokens than this; by
#: default never: a paragraph is its author's unit of one topic, and two in one vector mix their
#: topics (measured on three corpora, docs/ingest.md "Packing paragraphs")
DEFAULT_PACK_BELOW = 0
TITLE_SEPARATOR = " > "
_SPACE = re.compile(r"\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?;])([\"')\]]*)\s+")


class TokenCounter:
    """Counts tokens as a model reads them: with a Hugging Face tokenizer (a fast one: its offsets
    say where each token is), or, given none, whitespace-separated words."""

    def __init__(self, tokenizer=None, prompt: str = ""):
        self.tokenizer = tokenizer
        if tokenizer is not None and not getattr(tokenizer, "is_fast", False):
            raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer: splitting needs its offsets")
        #: tokens the model adds to every text ([CLS], [SEP] ...) and those of its document prompt
        self.specials = tokenizer.num_special_tokens_to_add(pair=False) if tokenizer is not None else 0
        self.prompt = self.count(prompt) if prompt else 0

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The character span of each token of ``text`` (no special tokens)."""
        if self.tokenizer is None:
            return [m.span() for m in re.finditer(r"\S+", text)]
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [tuple(o) for o in enc["offset_mapping"]]

    def count(self, text: str) -> int:
        return len(self.spans(text))

    def window_used(self, title: str, text: str) -> int:
        """Tokens of the passage as the encoder sees it (``prompt + title + " " + text``, specials)."""
        return self.specials + self.prompt + self.count((title + " " + text).strip())


@dataclass
class Passage:
    text: str
    title: str
    page: int | None
    start: int
    end: int


@dataclass
class _Unit:
    start: int  # offsets into the document's text
    end: int
    tokens: int
    page: int | None
    headings: tuple[str, ...]
    block: int = 0  # the paragraph it is (a piece of)
    whole: bool = True  # the whole paragraph


def _joins(a: _Unit, b: _Unit, pack: bool) -> bool:
    """May ``b`` follow ``a`` in a passage: one heading path, and pieces of one paragraph, or (where
    ``pack``) whole paragraphs."""
    return a.headings == b.headings and (a.block == b.block or (pack and a.whole and b.whole))


def document_text(blocks: Sequence[Block]) -> tuple[str, list[int]]:
    """The document's text (its blocks joined by :data:`BLOCK_SEPARATOR`) and each block's offset."""
    offsets, pos = [], 0
    for b in blocks:
        offsets.append(pos)
        pos += len(b.text) + len(BLOCK_SEPARATOR)
    return BLOCK_SEPARATOR.join(b.text for b in blocks), offsets


def passage_title(title: str, headings: Sequence[str]) -> str:
    """The title carried into a passage: the document's title, then the headings above the passage
    (a heading that repeats the one before it is left out)."""
    parts: list[str] = []
    for p in [title, *headings]:
        if p and (not parts or parts[-1] != p):
            parts.append(p)
    return TITLE_SEPARATOR.join(parts)


def _units(block: Block, offset: int, counter: TokenCounter, budget: int, index: int = 0) -> list[_Unit]:
    """A block as units of at most ``budget`` tokens: itself, else its sentences, else token windows."""
    toks = counter.spans(block.text)
    starts = [s for s, _ in toks]

    def n_tokens(a: int, b: int) -> int:  # tokens starting in [a, b)
        return bisect.bisect_left(starts, b) - bisect.bisect_left(starts, a)

    def unit(a: int, b: int, n: int) -> _Unit:
        return _Unit(offset + a, offset + b, n, block.page, block.headings, index, len(toks) <= budget)

    if len(toks) <= budget:
        return [unit(0, len(block.text), len(toks))]
    out, a = [], 0
    cuts = [m.end(1) for m in _SENTENCE_END.finditer(block.text)] + [len(block.text)]
    for cut in cuts:
        b = cut
        n = n_tokens(a, b)
        if n <= budget:
            if n:
                out.append(unit(a, b, n))
        else:  # a sentence longer than a passage: cut between tokens
            i, j = bisect.bisect_left(starts, a), bisect.bisect_left(starts, b)
            for w in range(i, j, budget):
                last = min(w + budget, j) - 1
                out.append(unit(toks[w][0], toks[last][1], last - w + 1))
        a = _SPACE.match(block.text, b).end()
    return out


def _title_within(title: str, counter: TokenCounter, limit: int) -> str:
    """``title`` cut to ``limit`` tokens (a title never takes more than a quarter of the window)."""
    spans = counter.spans(title)
    return title if len(spans) <= limit else title[:spans[limit - 1][1]].rstrip() if limit > 0 else ""


def split_document(title: str, blocks: Sequence[Block], counter: TokenCounter, max_tokens: int,
                   overlap: int = 0, pack_below: int = DEFAULT_PACK_BELOW) -> list[Passage]:
    """The passages of a document (see the module docstring); ``max_tokens``: the model's window;
    ``pack_below``: whole paragraphs share a passage only while it holds fewer tokens than this
    (default 0: never)."""
    room = max_tokens - counter.specials - counter.prompt
    if room < 1:
        raise ValueError(f"a window of {max_tokens} tokens leaves {room} for text (after special tokens and the "
                         "prompt): too small to split into")
    text, offsets = document_text(blocks)
    titles: dict[tuple[str, ...], tuple[str, int]] = {}

    def title_of(headings):  # (passage title, its tokens)
        if headings not in titles:
            t = _title_within(passage_title(title, headings), counter, room // 4)
            titles[headings] = (t, counter.count(t))
        return titles[headings]

    units: list[_Unit] = []
    for n, (b, off) in enumerate(zip(blocks, offsets)):
        units += _units(b, off, counter, room - title_of(b.headings)[1], n)
    passages: list[Passage] = []
    i = 0
    while i < len(units):
        t, t_tokens = title_of(units[i].headings)
        budget = room - t_tokens
        j, used = i, 0
        while j < len(units) and (j == i or _joins(units[j - 1], units[j], used < pack_below)) and \
                used + units[j].tokens <= budget:
            used += units[j].tokens
            j += 1
        j = max(j, i + 1)
        while j > i + 1 and counter.window_used(t, text[units[i].start:units[j - 1].end]) > max_tokens:
            j -= 1  # the tokenizer joins units differently than counted apart: one unit fewer
        passages.append(Passage(text[units[i].start:units[j - 1].end], t, units[i].page, units[i].start,
                                units[j - 1].end))
        if j >= len(units) or not _joins(units[j - 1], units[j], False):  # overlap mends cuts inside a paragraph
            i = j
            continue
        k, carried = j, 0  # the last units, up to `overlap` tokens, open the next passage
        while k - 1 > i and carried + units[k - 1].tokens <= overlap:
            k -= 1
            carried += units[k].tokens
        i = k
    return passages
