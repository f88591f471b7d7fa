"""Text extraction for ``hf-dr ingest``, chosen by measurement, and the fidelity of the whole command.

    python benchmarks/ingest.py extractors --docs 200       # candidates per format: fidelity and docs/s
    python benchmarks/ingest.py fidelity --formats pdf      # SciFact rendered, ingested, evaluated (BM25)
    python benchmarks/ingest.py fidelity --formats pdf,docx,html --dense   # + all-MiniLM-L6-v2 (heavy on CPU)
    python benchmarks/ingest.py memory --sizes 1000,5000,20000   # peak RSS and files/s by folder size

``extractors``: the first ``--docs`` documents of SciFact (``../shared/data/scifact``) are rendered
into one PDF each (fpdf2, DejaVu Sans: the title as a bold heading, the abstract as a paragraph),
one DOCX each (python-docx: a Heading 1 and a paragraph) and one HTML page each (a ``<title>``, an
``<h1>``, a ``<p>`` inside a small page with a navigation bar and a footer, the boilerplate an
extractor should drop). Each candidate extracts every file; fidelity is the word-level F1 between
its text and the document's ``title + text`` (lower-cased words, multiset overlap; 1.0 = every
word back, nothing added) and the share of the words that come back in order; speed is files per
second in one process, rendering not counted.

``fidelity``: SciFact's corpus (``--docs N``: the documents its test qrels judge, then others up to
N — fpdf2 renders about 4 PDFs a second on one busy core) rendered into one file per document (named ``<doc id>.<ext>``),
``hf-dr ingest``-ed (the library function the command runs) with all-MiniLM-L6-v2's tokenizer and
window, evaluated on SciFact's test qrels with passages aggregated to their document (MaxP), against
the ``corpus.jsonl`` run of the same documents. Rows: ``benchmarks/results/ingest.json``.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
FONT_BOLD = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
HTML_PAGE = ("<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
             "<nav><a href='/'>Home</a> | <a href='/about'>About us</a> | <a href='/contact'>Contact</a></nav>"
             "<main><article><h1>{title}</h1><p>{text}</p></article></main>"
             "<footer>Copyright 2024 Example Journal. All rights reserved. Privacy policy.</footer></body></html>")


def scifact_docs(n: int | None) -> list[dict]:
    docs = []
    with open(SHARED / "data" / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            docs.append(json.loads(line))
            if n is not None and len(docs) >= n:
                break
    return docs


# ---------------------------------------------------------------------------- rendering
def render_pdf(doc: dict, path: Path) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_font("DejaVu", "", str(FONT))
    pdf.add_font("DejaVu", "B", str(FONT_BOLD))
    pdf.set_title(doc.get("title") or "")
    pdf.add_page()
    if doc.get("title"):
        pdf.set_font("DejaVu", "B", 14)
        pdf.multi_cell(0, 7, doc["title"])
        pdf.ln(4)
    pdf.set_font("DejaVu", "", 11)
    pdf.multi_cell(0, 5.5, doc.get("text") or "")
    pdf.output(str(path))


def render_docx(doc: dict, path: Path) -> None:
    import docx

    d = docx.Document()
    if doc.get("title"):
        d.add_heading(_xml_safe(doc["title"]), level=1)
    d.add_paragraph(_xml_safe(doc.get("text") or ""))
    d.save(str(path))


def _xml_safe(s: str) -> str:
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", " ", s)


def render_html(doc: dict, path: Path) -> None:
    path.write_text(HTML_PAGE.format(title=html.escape(doc.get("title") or ""),
                                     text=html.escape(doc.get("text") or "")), encoding="utf-8")


RENDER = {"pdf": render_pdf, "docx": render_docx, "html": render_html}


def render(docs: list[dict], folder: Path, formats) -> None:
    from tqdm.auto import tqdm

    for fmt in formats:
        (folder / fmt).mkdir(parents=True, exist_ok=True)
        for d in tqdm(docs, desc=f"rendering {fmt}", unit="doc"):
            p = folder / fmt / f"{d['_id']}.{fmt}"
            if not p.is_file():
                RENDER[fmt](d, p)


# ---------------------------------------------------------------------------- candidates
def pdf_pypdfium2(p: Path) -> str:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(p))
    try:
        return "\n".join(pdf[i].get_textpage().get_text_bounded() for i in range(len(pdf)))
    finally:
        pdf.close()


def pdf_pypdf(p: Path) -> str:
    import pypdf

    return "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(str(p)).pages)


def pdf_pdfminer(p: Path) -> str:
    from pdfminer.high_level import extract_text

    return extract_text(str(p))


def docx_python_docx(p: Path) -> str:
    import docx

    return "\n".join(par.text for par in docx.Document(str(p)).paragraphs)


def docx_mammoth(p: Path) -> str:
    import mammoth

    with open(p, "rb") as f:
        return mammoth.extract_raw_text(f).value


def html_trafilatura(p: Path) -> str:
    import trafilatura

    return trafilatura.extract(p.read_text(encoding="utf-8"), include_comments=False, favor_recall=True) or ""


def html_lxml(p: Path) -> str:
    import lxml.html

    tree = lxml.html.fromstring(p.read_bytes())
    for bad in tree.xpath("//script|//style|//nav|//footer|//header"):
        bad.drop_tree()
    return tree.text_content()


def html_hf_dr(p: Path) -> str:
    from hf_dr.ingest.extract import extract

    return "\n".join(b.text for b in extract(p).blocks)


CANDIDATES = {"pdf": {"pypdfium2": pdf_pypdfium2, "pypdf": pdf_pypdf, "pdfminer.six": pdf_pdfminer},
              "docx": {"python-docx": docx_python_docx, "mammoth": docx_mammoth},
              "html": {"trafilatura": html_trafilatura, "lxml (nav/footer dropped)": html_lxml}}


def words(s: str) -> Counter:
    return Counter(re.findall(r"\w+", s.lower()))


def f1(ref: str, hyp: str) -> float:
    a, b = words(ref), words(hyp)
    common = sum((a & b).values())
    if not common:
        return 0.0
    p, r = common / sum(b.values()), common / sum(a.values())
    return 2 * p * r / (p + r)


def in_order(ref: str, hyp: str) -> float:
    """The share of the reference's words that come back in order (longest matching blocks, difflib)."""
    from difflib import SequenceMatcher

    a, b = re.findall(r"\w+", ref.lower()), re.findall(r"\w+", hyp.lower())
    return sum(m.size for m in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()) / max(len(a), 1)


def measure_extractors(args) -> list[dict]:
    docs = scifact_docs(args.docs)
    folder = Path(args.work)
    render(docs, folder, ("pdf", "docx", "html"))
    rows = []
    for fmt, cands in CANDIDATES.items():
        for name, fn in cands.items():
            for d in docs[:3]:  # warm-up: imports, caches
                fn(folder / fmt / f"{d['_id']}.{fmt}")
            t0 = time.perf_counter()
            texts = [fn(folder / fmt / f"{d['_id']}.{fmt}") for d in docs]
            dt = time.perf_counter() - t0
            refs = [d.get("title", "") + "\n" + d["text"] for d in docs]
            scores = [f1(r, t) for r, t in zip(refs, texts)]
            order = [in_order(r, t) for r, t in zip(refs, texts)]
            row = {"table": "ingest_extractors", "dataset": f"scifact[:{len(docs)}] as {fmt}", "system": name,
                   "command": command_line(), "machine": machine(),
                   "metrics": {"word_f1": round(sum(scores) / len(scores), 4),
                               "min_word_f1": round(min(scores), 4), "words_in_order": round(sum(order) / len(order), 4),
                               "docs_per_s": round(len(docs) / dt, 1)}}
            print(f"{fmt:5} {name:28} F1 {row['metrics']['word_f1']:.4f} (min {row['metrics']['min_word_f1']:.4f}) "
                  f"in order {row['metrics']['words_in_order']:.4f} "
                  f"{row['metrics']['docs_per_s']:8.1f} docs/s", flush=True)
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------- whole command
def fidelity_subset(n: int | None, work: Path) -> tuple[list[dict], Path]:
    """SciFact's documents judged in its test qrels, then the corpus's first others up to ``n`` (all
    when None), written as a BEIR folder ``work/reference`` (the ``corpus.jsonl`` run's data)."""
    src = SHARED / "data" / "scifact"
    qrels = (src / "qrels" / "test.tsv").read_text().splitlines()
    judged = {line.split("\t")[1] for line in qrels[1:]}
    docs = scifact_docs(None)
    keep = [d for d in docs if d["_id"] in judged]
    keep += [d for d in docs if d["_id"] not in judged][:max(0, (n or len(docs)) - len(keep))]
    ref = work / "reference"
    (ref / "qrels").mkdir(parents=True, exist_ok=True)
    (ref / "corpus.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in keep))
    (ref / "queries.jsonl").write_bytes((src / "queries.jsonl").read_bytes())
    (ref / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return keep, ref


def measure_fidelity(args) -> list[dict]:
    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate
    from hf_dr.ingest import ingest_folder
    from hf_dr.models import load_encoder
    from hf_dr.retrieval import BM25Retriever, EncoderRetriever

    work = Path(args.work)
    docs, ref_dir = fidelity_subset(args.docs, work)
    formats = args.formats.split(",")
    render(docs, work / "full", formats)
    model = str(SHARED / "models" / "all-MiniLM-L6-v2")
    encoder = load_encoder(model)
    max_tokens = encoder.encoding_settings()["max_length"]
    ref = load_beir(ref_dir, split="test")
    systems = {"BM25": lambda d: BM25Retriever.from_data(d)}
    if args.dense:
        systems["all-MiniLM-L6-v2"] = lambda d: EncoderRetriever.from_data(encoder, d)
    rows = []
    base = {name: evaluate(make(ref), ref).aggregate["ndcg@10"] for name, make in systems.items()}
    for fmt in formats:
        out = work / f"corpus-{fmt}"
        if out.exists():
            import shutil

            shutil.rmtree(out)
        folder = work / f"files-{fmt}"  # the subset's files only
        folder.mkdir(exist_ok=True)
        for d in docs:
            link = folder / f"{d['_id']}.{fmt}"
            if not link.exists():
                os.link(work / "full" / fmt / f"{d['_id']}.{fmt}", link)
        t0 = time.perf_counter()
        # --whole: one passage per file (a window of 100,000 words): the extraction alone, no splitting
        report = ingest_folder(folder, out, tokenizer=None if args.whole else model,
                               max_tokens=100_000 if args.whole else max_tokens, workers=args.workers,
                               show_progress_bar=True)
        dt = time.perf_counter() - t0
        (out / "queries.jsonl").write_bytes((ref_dir / "queries.jsonl").read_bytes())
        (out / "qrels").mkdir(exist_ok=True)
        qrels = (ref_dir / "qrels" / "test.tsv").read_text().splitlines()
        # the qrels judge SciFact's ids; the files are <id>.<fmt>: the same documents under their file names
        (out / "qrels" / "test.tsv").write_text("\n".join(
            [qrels[0]] + [re.sub(r"^(\S+)\t(\S+)\t", lambda m, fmt=fmt: f"{m[1]}\t{m[2]}.{fmt}\t", line) for line in qrels[1:]]
        ) + "\n")
        data = load_beir(out, split="test")
        for name, make in systems.items():
            res = evaluate(make(data), data)
            rows.append({"table": "ingest_fidelity", "dataset": f"scifact ({len(docs)} docs) as {fmt}",
                         "system": name + (" (whole files: one passage each)" if args.whole else
                                           " (passages of all-MiniLM-L6-v2's window, MaxP)"),
                         "command": command_line(), "machine": machine(),
                         "metrics": {"ndcg@10": round(res.aggregate["ndcg@10"], 4),
                                     "corpus_jsonl_ndcg@10": round(base[name], 4),
                                     "difference": round(res.aggregate["ndcg@10"] - base[name], 4),
                                     "files": report["files"], "passages": report["passages"],
                                     "ingest_seconds": round(dt, 1), "ingest_docs_per_s": round(report["files"] / dt, 1),
                                     "ingest_pages_per_s": round(report["pages"] / dt, 1)}})
            print(json.dumps(rows[-1]["metrics"]), name, fmt, flush=True)
    return rows


def measure_memory(args) -> list[dict]:
    """Peak RSS and files/s of ``hf-dr ingest`` (a subprocess, all-MiniLM-L6-v2's window) over folders of
    1,000 .. 20,000 small text files (SciFact abstracts, cycled): flat memory means streamed. The peak
    is the largest of this and the smaller sizes' (``RUSAGE_CHILDREN``): sizes run smallest first, so a
    growth shows."""
    import resource
    import subprocess

    docs = scifact_docs(None)
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        folder = Path(args.work) / f"text-{n}"
        if not folder.is_dir():
            for i in range(n):
                d = docs[i % len(docs)]
                sub = folder / f"{i // 1000:03d}"
                sub.mkdir(parents=True, exist_ok=True)
                (sub / f"{i:06d}.txt").write_text(d.get("title", "") + "\n\n" + d["text"], encoding="utf-8")
        out = Path(args.work) / f"corpus-text-{n}"
        cmd = [sys.executable, "-m", "hf_dr.cli", "ingest", str(folder), "--output", str(out), "--model",
               str(SHARED / "models" / "all-MiniLM-L6-v2"), "--no-progress", "--overwrite"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        dt = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        rows.append({"table": "ingest_memory", "dataset": f"{n} text files", "system": "hf-dr ingest --model all-MiniLM-L6-v2",
                     "command": command_line(), "machine": machine(),
                     "metrics": {"files": n, "seconds": round(dt, 1), "files_per_s": round(n / dt, 1),
                                 "peak_rss_mib": round(rss / 1024, 1)}})
        print(rows[-1]["dataset"], rows[-1]["metrics"], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("extractors", "fidelity", "memory"))
    ap.add_argument("--sizes", default="1000,5000,20000", help="memory: folder sizes, smallest first")
    ap.add_argument("--docs", type=int, default=None,
                    help="extractors: the first N SciFact documents (200); fidelity: the judged ones and others up to N "
                         "(default: all 5,183)")
    ap.add_argument("--formats", default="pdf,docx,html")
    ap.add_argument("--dense", action="store_true", help="fidelity: all-MiniLM-L6-v2 as well as BM25")
    ap.add_argument("--whole", action="store_true", help="fidelity: one passage per file (extraction alone)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--work", default="runs/bench-ingest", help="where the rendered files go (kept: re-used)")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    if args.what == "extractors":
        args.docs = args.docs or 200
        rows = measure_extractors(args)
    elif args.what == "memory":
        rows = measure_memory(args)
    else:
        rows = measure_fidelity(args)
    if not args.no_save:
        print("wrote", save_rows("ingest", rows))


if __name__ == "__main__":
    main()
