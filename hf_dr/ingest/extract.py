"""Text out of a file: one extractor per format, each giving the document's title and its blocks
(paragraphs, with the page they are on and the heading path above them).

The libraries were chosen by measurement (``python benchmarks/ingest.py extractors``, docs/ingest.md):
PDF through pypdfium2, DOCX through python-docx, HTML through trafilatura (the page's main text,
navigation and footers dropped); Markdown and plain text need no library. They are the
``documents`` extra; a missing one is named (:func:`hf_dr.extras.require`).

A file that cannot be read raises :class:`SkipFile` with the reason the manifest records; nothing
else a file holds makes an extractor fail (any other exception is turned into a :class:`SkipFile`
by :func:`extract`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Block", "Extracted", "SkipFile", "extract", "decode_text", "file_format", "DOCUMENT_FORMATS",
           "TABLE_FORMATS", "iter_rows", "text_blocks", "markdown_blocks"]

#: file suffix -> format
DOCUMENT_FORMATS = {".pdf": "pdf", ".docx": "docx", ".html": "html", ".htm": "html", ".xhtml": "html",
                    ".md": "markdown", ".markdown": "markdown", ".txt": "text", ".text": "text"}
TABLE_FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}


class SkipFile(Exception):
    """A file that gives no text: ``str(e)`` is the reason written to the manifest."""


@dataclass
class Block:
    """A paragraph: its text (whitespace inside it collapsed), the page it is on (1-based; None where
    the format has no pages) and the headings above it (outermost first)."""

    text: str
    page: int | None = None
    headings: tuple[str, ...] = ()


@dataclass
class Extracted:
    title: str
    blocks: list[Block]
    pages: int | None = None
    #: what was done to read it (e.g. a fallback encoding), for the manifest
    notes: list[str] = field(default_factory=list)


def file_format(path: str | os.PathLike) -> str | None:
    """The format of a file by its suffix (``pdf``, ``docx``, ``html``, ``markdown``, ``text``, ``jsonl``,
    ``csv``, ``parquet``), None when it has none of these."""
    suffix = Path(path).suffix.lower()
    return DOCUMENT_FORMATS.get(suffix) or TABLE_FORMATS.get(suffix)


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def _looks_binary(data: bytes) -> bool:
    """NUL bytes, or more than 10% control characters in the first 8 KiB: not text."""
    head = data[:8192]
    if b"\0" in head:
        return True
    ctrl = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return bool(head) and ctrl / len(head) > 0.10


def decode_text(data: bytes) -> tuple[str, list[str]]:
    """Text of a file: UTF-8 (a BOM dropped); where that fails, Windows-1252, where that fails too,
    Latin-1 (which decodes any byte). Returns ``(text, notes)``; the note names the fallback used.
    Binary content is a :class:`SkipFile`."""
    if _looks_binary(data):
        raise SkipFile("binary content, not text (NUL or control bytes)")
    try:
        return data.decode("utf-8-sig"), []
    except UnicodeDecodeError as e:
        where = e.start
    for enc in ("cp1252", "latin-1"):
        try:
            return data.decode(enc), [f"not UTF-8 (first bad byte at {where}): decoded as {enc}"]
        except UnicodeDecodeError:
            continue
    raise AssertionError("latin-1 decodes any byte")  # pragma: no cover


def text_blocks(text: str, page: int | None = None, headings: tuple[str, ...] = ()) -> list[Block]:
    """Blocks of plain text: paragraphs are separated by blank lines; lines within one are joined."""
    out = []
    for par in re.split(r"\n\s*\n", text.replace("\r\n", "\n").replace("\r", "\n")):
        t = _norm(par)
        if t:
            out.append(Block(t, page, headings))
    return out


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_blocks(text: str) -> tuple[str, list[Block]]:
    """``(title, blocks)`` of Markdown: ATX headings (``#`` .. ``######``) set the heading path of
    the paragraphs under them; a first-level heading that opens the document is its title. Fenced
    code is kept as one block; other markup stays as written."""
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    title, para, fence = "", [], None

    def flush():
        t = _norm(" ".join(para)) if fence is None else "\n".join(para).strip()
        if t:
            blocks.append(Block(t, None, tuple(h for _, h in stack)))
        para.clear()

    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if fence is not None:
            if line.strip().startswith(fence):
                flush()
                fence = None
            else:
                para.append(line)
            continue
        if line.strip().startswith(("```", "~~~")):
            flush()
            fence = line.strip()[:3]
            continue
        m = _HEADING.match(line)
        if m:
            flush()
            level, head = len(m.group(1)), _norm(m.group(2))
            if level == 1 and not blocks and not stack and not title:
                title = head
                continue
            stack = [(lv, h) for lv, h in stack if lv < level] + [(level, head)]
        elif not line.strip():
            flush()
        else:
            para.append(line)
    flush()
    return title, blocks


def _text(path: Path) -> Extracted:
    text, notes = decode_text(path.read_bytes())
    return Extracted("", text_blocks(text), None, notes)


def _markdown(path: Path) -> Extracted:
    text, notes = decode_text(path.read_bytes())
    title, blocks = markdown_blocks(text)
    return Extracted(title, blocks, None, notes)


def _pdf(path: Path) -> Extracted:
    from ..extras import require

    pdfium = require("pypdfium2")
    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as e:
        msg = str(e)
        if "password" in msg.lower():
            raise SkipFile("encrypted PDF (a password is needed)") from None
        raise SkipFile(f"not a readable PDF ({msg.removeprefix('Failed to load document ').strip('().')})") from None
    try:
        title = _norm(str((pdf.get_metadata_dict() or {}).get("Title") or ""))
        blocks, n = [], len(pdf)
        for i in range(n):
            page = pdf[i]
            try:
                raw = page.get_textpage().get_text_bounded()
            finally:
                page.close()
            # a line broken after a hyphen joins without a space; other line breaks are spaces
            raw = re.sub(r"-\r?\n(?=\S)", "-", raw)
            blocks += text_blocks(raw, i + 1)
    finally:
        pdf.close()
    if not blocks:
        raise SkipFile(f"no text layer in {n} page(s) (a scanned PDF? text recognition is not done)")
    if title and blocks[0].text.startswith(title):  # the title printed on page 1 is the passages' title already
        rest = blocks[0].text[len(title):].strip()
        blocks = ([Block(rest, blocks[0].page)] if rest else []) + blocks[1:]
    return Extracted(title, blocks, n)


def _docx(path: Path) -> Extracted:
    from ..extras import require

    docx = require("docx")
    import zipfile

    from docx.opc.exceptions import PackageNotFoundError

    try:
        d = docx.Document(str(path))
    except (zipfile.BadZipFile, PackageNotFoundError, KeyError, ValueError) as e:
        raise SkipFile(f"not a readable DOCX ({type(e).__name__})") from None
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    title = _norm(d.core_properties.title or "")
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    for child in d.element.body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "tbl":
            rows = [" | ".join(_norm(c.text) for c in r.cells) for r in Table(child, d).rows]
            t = _norm(" ; ".join(r for r in rows if r.strip(" |")))
            if t:
                blocks.append(Block(t, None, tuple(h for _, h in stack)))
            continue
        if tag != "p":
            continue
        par = Paragraph(child, d)
        t, style = _norm(par.text), (par.style.name if par.style is not None else "") or ""
        if not t:
            continue
        m = re.fullmatch(r"Heading (\d)", style)
        if style == "Title" or (m and not title and not blocks and not stack and m.group(1) == "1"):
            title = title or t  # the document's title (a core-properties title comes first)
        elif m:
            level = int(m.group(1))
            stack = [(lv, h) for lv, h in stack if lv < level] + [(level, t)]
        else:
            blocks.append(Block(t, None, tuple(h for _, h in stack)))
    return Extracted(title, blocks, None)


def _html(path: Path) -> Extracted:
    from ..extras import require

    trafilatura = require("trafilatura")
    text, notes = decode_text(path.read_bytes())
    md = trafilatura.extract(text, output_format="markdown", include_tables=True, include_comments=False,
                             favor_recall=True) or ""
    title, blocks = markdown_blocks(md)
    m = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
    if m:
        import html as _h

        title = _norm(_h.unescape(m.group(1))) or title
    return Extracted(title, blocks, None, notes)


_EXTRACTORS = {"pdf": _pdf, "docx": _docx, "html": _html, "markdown": _markdown, "text": _text}


def extract(path: str | os.PathLike, fmt: str | None = None) -> Extracted:
    """The title and blocks of a document file (``fmt``: its format, by default from its suffix; a
    file with another suffix is read as plain text when it is text). :class:`SkipFile` with the
    reason when it gives no text: empty, binary, corrupt, encrypted, no text layer."""
    from ..extras import MissingExtraError

    path = Path(path)
    fmt = fmt or file_format(path) or "text"
    if path.stat().st_size == 0:
        raise SkipFile("empty file")
    try:
        out = _EXTRACTORS[fmt](path)
    except (SkipFile, MissingExtraError):
        raise
    except Exception as e:  # a library's own error on a malformed file: reported, never fatal
        raise SkipFile(f"could not be read as {fmt} ({type(e).__name__}: {str(e)[:200]})") from None
    if not any(b.text for b in out.blocks):
        raise SkipFile("no text in it" if not out.title else "no text in it besides its title")
    return out


def iter_rows(path: str | os.PathLike, fmt: str, text_column: str, id_column: str | None = None,
              title_column: str | None = "title") -> Iterator[tuple[str | None, str, str]]:
    """``(id or None, title, text)`` of each row of a JSONL / CSV / Parquet file, streamed (the id:
    ``id_column``'s value, by default ``_id``'s or ``id``'s). A row
    without the text column, or with an empty one, is passed as ``(id, "", "")``."""
    path = Path(path)
    for row in _raw_rows(path, fmt):
        if not isinstance(row, dict):
            yield None, "", ""
            continue
        rid = row.get(id_column) if id_column else row.get("_id", row.get("id"))
        text, title = row.get(text_column), row.get(title_column) if title_column else None
        yield (None if rid is None else str(rid)), _norm(str(title or "")), str(text) if text is not None else ""


def _raw_rows(path: Path, fmt: str) -> Iterator[object]:
    import json

    if fmt == "jsonl":
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    yield json.loads(raw)
                except ValueError as e:
                    raise SkipFile(f"line {lineno} is not JSON ({e})") from None
    elif fmt == "csv":
        import csv
        import io
        import sys

        csv.field_size_limit(sys.maxsize)
        text, _ = decode_text(path.read_bytes())
        yield from csv.DictReader(io.StringIO(text, newline=""))
    else:
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except Exception as e:
            raise SkipFile(f"not a readable Parquet file ({type(e).__name__}: {e})") from None
        for batch in pf.iter_batches(batch_size=1024):
            yield from batch.to_pylist()
