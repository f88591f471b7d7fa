"""Why a hit matched, as plain text and as HTML: the query's terms marked in the passage (every
hit), SPLADE's matched terms (query x document weight) and BERM's essential matching unit
highlighted in its passage."""

from __future__ import annotations

import html
import re

#: how the HTML of :func:`essential_unit` starts: a page shows it in place of the hit's text
PASSAGE_HTML = '<div class="passage">'


#: a word as BM25 (bm25s) reads one: two or more letters or digits
_WORD = re.compile(r"(?u)\b\w\w+\b")


def mark_query_terms(analyzer, query: str, text: str, max_chars: int | None = None) -> tuple[list[str], str]:
    """The passage ``text`` with the words that match a term of ``query`` marked, as BM25 matches them
    (the same words, stop words and stems: ``analyzer`` is a :class:`~hf_dr.retrieval.BM25Index`, its
    :meth:`~hf_dr.retrieval.BM25Index.words`): ``(the matched words, in order of first appearance,
    HTML)``; the HTML starts with :data:`PASSAGE_HTML`. ``max_chars`` cuts a longer text at a word
    boundary (``…`` after it)."""
    cut = text
    if max_chars is not None and len(text) > max_chars:
        cut = text[:max_chars].rsplit(" ", 1)[0] if " " in text[:max_chars] else text[:max_chars]
    terms = set(analyzer.words([query])[1][0])
    spans = [(m.start(), m.end(), m.group().lower()) for m in _WORD.finditer(cut)] if terms else []
    unique = sorted({w for _, _, w in spans})
    stems = dict(zip(unique, analyzer.words(unique)[1])) if unique else {}
    out, at, matched = [], 0, []
    for start, end, word in spans:
        if stems.get(word) and stems[word][0] in terms:
            out += [html.escape(cut[at:start]), f"<mark>{html.escape(cut[start:end])}</mark>"]
            at = end
            if word not in matched:
                matched.append(word)
    out.append(html.escape(cut[at:]) + ("…" if len(cut) < len(text) else ""))
    return matched, PASSAGE_HTML + "".join(out) + "</div>"


def matched_terms(retriever, query: str, rows: list[int], doc_ids: list[str]) -> dict[str, tuple[str, str]]:
    """SPLADE: each hit's matched terms, query weight x document weight, largest first (at most 8):
    ``{doc_id: (plain text, HTML)}``. ``retriever``: an :class:`~hf_dr.retrieval.EncoderRetriever`
    of a sparse model; ``rows``: the rows of ``doc_ids`` in its index."""
    qrow = retriever.encode_queries([query]).getrow(0)
    qw = dict(zip(qrow.indices.tolist(), qrow.data.tolist()))
    docs = retriever.index.doc_vectors(rows) if rows else None
    tok = retriever.encoder.tokenizer
    why = {}
    for r, d in enumerate(doc_ids):
        drow = docs.getrow(r)
        contrib = sorted(((qw[t] * w, t, qw[t], w) for t, w in zip(drow.indices.tolist(), drow.data.tolist())
                          if t in qw), reverse=True)[:8]
        names = tok.convert_ids_to_tokens([c[1] for c in contrib])
        plain_txt = ", ".join(f"{n} {q_:.2f}×{d_:.2f}" for n, (_, _, q_, d_) in zip(names, contrib))
        chips = "".join(f'<span class="term" title="query {q_:.3f} × document {d_:.3f} = {c:.3f}">'
                        f'{html.escape(n)} <small>{q_:.2f}×{d_:.2f}</small></span>'
                        for n, (c, _, q_, d_) in zip(names, contrib))
        why[d] = (plain_txt, f'<div class="terms">matched terms (query × document weight): {chips}</div>')
    return why


def essential_unit(model, query: str, passage: str) -> tuple[str, str]:
    """BERM: the passage's units with the essential matching unit (highest score) highlighted:
    ``(plain text, HTML)``; ``("", "")`` for a passage without units. ``model``: a
    :class:`~hf_dr.models.berm.BERMEncoder` (its ``score_units``)."""
    import numpy as np

    units, scores = model.score_units(query, passage)
    if not len(units):
        return "", ""
    best = int(np.argmax(np.asarray(scores)))
    parts = [f'<mark title="essential unit score {float(scores[i]):.3f}">{html.escape(u)}</mark>' if i == best
             else html.escape(u) for i, u in enumerate(units)]
    return f"essential unit: {units[best]}", PASSAGE_HTML + " ".join(parts) + "</div>"
