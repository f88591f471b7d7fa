"""hf-dr ingest: extractors, the splitter, bad files, the folder (resumable, split over processes) and
the command. Fast tests build tiny files; those reading ../shared, spawning processes or running the
command in a subprocess are marked."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_dr.cli import main
from hf_dr.ingest import Block, SkipFile, TokenCounter, doc_id, extract, ingest_folder, passage_doc, split_document
from hf_dr.ingest.extract import decode_text, markdown_blocks
from hf_dr.ingest.split import document_text

from .conftest import MINILM, REPO, need

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def _prose(rng: random.Random, sentences: int, words: int = 12) -> str:
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "." for _ in range(sentences))


def _pdf(path: Path, pages: list[str], title: str = "", password: str | None = None) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    if title:
        pdf.set_title(title)
    if password:
        pdf.set_encryption(owner_password="owner", user_password=password)
    for text in pages:
        pdf.add_page()
        pdf.set_font("Helvetica", size=11)
        pdf.multi_cell(0, 5, text)
    pdf.output(str(path))
    return path


def _docx(path: Path) -> Path:
    import docx

    d = docx.Document()
    d.add_heading("The report", level=1)
    d.add_heading("Methods", level=2)
    d.add_paragraph("We counted the cells twice.")
    d.add_heading("Results", level=2)
    d.add_paragraph("The counts agreed.")
    d.save(str(path))
    return path


def _read(out: Path) -> tuple[list[dict], dict[str, dict]]:
    lines = [json.loads(x) for x in (out / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    manifest = [json.loads(x) for x in (out / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    return lines, {m["path"]: m for m in manifest}


# ---------------------------------------------------------------------------- the splitter
def _check_passages(ps, blocks, counter, window):
    text, _ = document_text(blocks)
    for p in ps:
        assert text[p.start:p.end] == p.text
        assert counter.window_used(p.title, p.text) <= window
    covered = set()
    for p in ps:
        covered.update(range(p.start, p.end))
    assert {i for i, c in enumerate(text) if not c.isspace()} <= covered  # nothing cut unseen


def _paragraph_of(blocks, pos: int) -> int:
    _, offsets = document_text(blocks)
    return max(i for i, o in enumerate(offsets) if o <= pos)


@pytest.mark.parametrize("window, overlap", [(16, 0), (40, 16), (100, 40)])
def test_passages_fit_the_window_cover_the_text_and_overlap(window, overlap):
    rng = random.Random(window)
    blocks = [Block(_prose(rng, rng.randint(1, 6), rng.randint(3, 20))) for _ in range(12)]
    blocks += [Block(_prose(rng, 12, 12))]  # longer than every window: cut into pieces
    counter = TokenCounter()
    ps = split_document("", blocks, counter, window, overlap)
    _check_passages(ps, blocks, counter, window)
    assert len(ps) > 1
    shared = [a.end > b.start for a, b in zip(ps, ps[1:])]
    assert any(shared) if overlap else not any(shared)
    for a, b in zip(ps, ps[1:]):
        assert b.start > a.start
        if a.end > b.start:  # what is shared is at most `overlap` tokens, of one paragraph
            assert counter.count(a.text[b.start - a.start:]) <= overlap
            assert _paragraph_of(blocks, a.start) == _paragraph_of(blocks, b.start)
    for p in ps:  # by default a passage is (a piece of) one paragraph
        assert _paragraph_of(blocks, p.start) == _paragraph_of(blocks, p.end - 1)


def test_whole_paragraphs_are_packed_only_below_pack_below():
    counter = TokenCounter()
    blocks = [Block("One two."), Block("Three four five six seven."), Block("Eight nine ten eleven."),
              Block("Twelve.")]
    texts = [p.text for p in split_document("", blocks, counter, 64, 8)]
    assert texts == [b.text for b in blocks]  # the default: each paragraph that fits is its own passage
    # packing while the passage holds fewer than 3 tokens: "One two." (2) takes the next paragraph (7),
    # which then stops it; "Twelve." joins "Eight ... eleven." only if that held fewer than 3 (it holds 4)
    texts = [p.text for p in split_document("", blocks, counter, 64, 8, pack_below=3)]
    assert texts == ["One two.\n\nThree four five six seven.", "Eight nine ten eleven.", "Twelve."]
    texts = [p.text for p in split_document("", blocks, counter, 64, 8, pack_below=64)]  # the window's limit
    assert texts == ["\n\n".join(b.text for b in blocks)]
    texts = [p.text for p in split_document("", blocks, counter, 8, 0, pack_below=64)]
    assert texts == ["One two.\n\nThree four five six seven.", "Eight nine ten eleven.\n\nTwelve."]


def test_the_folder_records_pack_below_and_refuses_a_change(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.txt").write_text("One two.\n\nThree four five six seven.\n\nEight nine ten eleven.\n")
    kw = dict(max_tokens=30, overlap=0, show_progress_bar=False)
    report = ingest_folder(src, tmp_path / "C", **kw)
    assert report["pack_below"] == 0 and report["passages"] == 3
    with pytest.raises(ValueError, match="pack_below: 0 -> 30"):
        ingest_folder(src, tmp_path / "C", pack_below=30, **kw)
    assert ingest_folder(src, tmp_path / "D", pack_below=30, **kw)["passages"] == 1


def test_cuts_fall_on_paragraphs_then_sentences_then_tokens():
    counter = TokenCounter()
    blocks = [Block("One two three. Four five six."), Block("Seven eight nine ten.")]
    ps = split_document("", blocks, counter, 8, 0)
    assert [p.text for p in ps] == ["One two three. Four five six.", "Seven eight nine ten."]
    ps = split_document("", blocks, counter, 4, 0)  # a paragraph too long: its sentences
    assert [p.text for p in ps] == ["One two three.", "Four five six.", "Seven eight nine ten."]
    cut = [Block("One two three. Four five six."), Block("Seven eight.")]  # a cut paragraph's rest stays apart
    assert [p.text for p in split_document("", cut, counter, 4, 0)] == ["One two three.", "Four five six.",
                                                                        "Seven eight."]
    assert [p.text for p in split_document("", cut, counter, 5, 1)] == ["One two three.", "Four five six.",
                                                                        "Seven eight."]
    long = [Block(" ".join(f"w{i}" for i in range(20)))]  # a sentence too long: token windows
    ps = split_document("", long, counter, 8, 0)
    assert [counter.count(p.text) for p in ps] == [8, 8, 4]
    _check_passages(ps, long, counter, 8)


def test_headings_make_the_title_and_split_sections():
    counter = TokenCounter()
    blocks = [Block("Intro text.", None, ()), Block("Method text.", None, ("Methods",)),
              Block("Sub text.", None, ("Methods", "Details"))]
    ps = split_document("Report", blocks, counter, 64, 8)
    assert [(p.title, p.text) for p in ps] == [("Report", "Intro text."), ("Report > Methods", "Method text."),
                                               ("Report > Methods > Details", "Sub text.")]
    # the title counts in the window: a long title leaves less room
    title = " ".join(["t"] * 10)
    ps = split_document(title, [Block(" ".join(["x"] * 60))], counter, 40, 0)
    assert all(counter.window_used(p.title, p.text) <= 40 for p in ps) and len(ps) == 2


@pytest.mark.shared
def test_passages_fit_minilm_as_its_tokenizer_counts():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(need(MINILM))
    counter = TokenCounter(tok, prompt="passage: ")
    rng = random.Random(0)
    blocks = [Block(_prose(rng, 8, 25) + " Hutchinson–Gilford (HGPS; OMIM 176670) μ-opioid", 3, ("Sec",))
              for _ in range(6)]
    ps = split_document("A title", blocks, counter, 64, 16)
    _check_passages(ps, blocks, counter, 64)
    for p in ps:  # the count is the encoder's: special tokens, prompt, title and text
        ids = tok("passage: " + p.title + " " + p.text)["input_ids"]
        assert len(ids) <= 64 and p.page == 3


# ---------------------------------------------------------------------------- extractors
def test_extractors_read_each_format(tmp_path):
    pdf = extract(_pdf(tmp_path / "a.pdf", ["First page words.", "Second page words."], title="A PDF"))
    assert pdf.title == "A PDF" and pdf.pages == 2
    assert [(b.text, b.page) for b in pdf.blocks] == [("First page words.", 1), ("Second page words.", 2)]
    titled = extract(_pdf(tmp_path / "t.pdf", ["The Title\nThe body text."], title="The Title"))
    assert [b.text for b in titled.blocks] == ["The body text."]  # the printed title is not repeated
    d = extract(_docx(tmp_path / "a.docx"))
    assert d.title == "The report"
    assert [(b.text, b.headings) for b in d.blocks] == [("We counted the cells twice.", ("Methods",)),
                                                        ("The counts agreed.", ("Results",))]
    (tmp_path / "a.html").write_text("<html><head><title>Page</title></head><body><nav>Home | About</nav><article>"
                                     "<h2>Part</h2><p>" + "Useful text about retrieval. " * 5 + "</p></article>"
                                     "<footer>Copyright notice</footer></body></html>")
    h = extract(tmp_path / "a.html")
    assert h.title == "Page" and "Useful text about retrieval." in h.blocks[0].text
    assert h.blocks[0].headings == ("Part",) and not any("Copyright" in b.text for b in h.blocks)
    title, blocks = markdown_blocks("# Doc\n\nIntro\nline two.\n\n## A\n\nIn A.\n\n```\ncode  kept\n```\n\n### B\n\nIn B.\n")
    assert title == "Doc"
    assert [(b.text, b.headings) for b in blocks] == [("Intro line two.", ()), ("In A.", ("A",)),
                                                      ("code  kept", ("A",)), ("In B.", ("A", "B"))]


def test_bad_files_are_skipped_with_their_reason(tmp_path):
    cases = {"empty.txt": b"", "junk.bin.txt": bytes(range(256)) * 8, "corrupt.pdf": b"%PDF-1.4 not a pdf",
             "bad.docx": b"PK not a zip", "blank.md": b"\n\n   \n"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    _pdf(tmp_path / "locked.pdf", ["secret"], password="pw")
    _pdf(tmp_path / "scan.pdf", [""])
    reasons = {}
    for name in [*cases, "locked.pdf", "scan.pdf"]:
        with pytest.raises(SkipFile) as e:
            extract(tmp_path / name)
        reasons[name] = str(e.value)
    assert reasons["empty.txt"] == "empty file"
    assert reasons["junk.bin.txt"].startswith("binary content")
    assert reasons["corrupt.pdf"].startswith("not a readable PDF")
    assert reasons["locked.pdf"].startswith("encrypted PDF")
    assert reasons["scan.pdf"].startswith("no text layer")
    assert reasons["bad.docx"].startswith("not a readable DOCX")
    assert reasons["blank.md"].startswith("no text")


def test_text_that_is_not_utf8_is_decoded_with_a_stated_fallback():
    assert decode_text("café".encode()) == ("café", [])
    assert decode_text("\ufeffBOM".encode("utf-8")) == ("BOM", [])
    text, notes = decode_text("naïve – “quoted”".encode("cp1252"))
    assert text == "naïve – “quoted”" and "decoded as cp1252" in notes[0]
    text, notes = decode_text(b"caf\xe9 \x81")  # 0x81 is not cp1252: latin-1 takes any byte
    assert text == "café \x81" and "decoded as latin-1" in notes[0]


def test_ids_escape_what_beir_ids_cannot_hold():
    assert doc_id("a/b.pdf") == "a/b.pdf"
    assert doc_id("my report\n2.pdf") == "my%20report%0A2.pdf"
    assert doc_id("100%.txt") == "100%25.txt"
    assert passage_doc("a#b.pdf#12") == "a#b.pdf" and passage_doc("doc") is None and passage_doc("x#y") is None


# ---------------------------------------------------------------------------- the folder
def _bad_folder(tmp_path: Path) -> Path:
    src = tmp_path / "in"
    (src / "sub" / "deeper").mkdir(parents=True)
    rng = random.Random(1)
    (src / "long.txt").write_text("\n\n".join(_prose(rng, 5) for _ in range(20)))
    (src / "sub" / "notes.md").write_text("# Notes\n\n## One\n\nFirst part.\n\n## Two\n\nSecond part.\n")
    (src / "sub" / "latin.txt").write_bytes("Une phrase en français, déjà.".encode("cp1252"))
    (src / "sub" / "weird\nname.txt").write_text("A file whose name holds a newline.")
    (src / "empty.txt").write_bytes(b"")
    (src / "junk.txt").write_bytes(bytes(range(256)) * 4)
    (src / "corrupt.pdf").write_bytes(b"%PDF-1.4 broken")
    (src / "big.txt").write_text("word " * 300_000)  # 1.4 MiB, over a cap of 1 MiB
    (src / "table.jsonl").write_text('{"_id": "r1", "text": "row one"}\n')
    (src / ".hidden.txt").write_text("not read")
    (src / "data.json").write_text('{"not": "a document"}')
    (src / "README").write_text("A name without a suffix is read as text.")
    outside = tmp_path / "secret.txt"
    outside.write_text("outside DIR")
    os.symlink(outside, src / "out-link.txt")
    os.symlink(src / "sub", src / "sub" / "deeper" / "loop")  # a folder linking to its own ancestor
    os.symlink(src / "long.txt", src / "alias.txt")
    os.symlink(src / "missing.txt", src / "broken.txt")
    os.symlink("self-a", src / "self-b")
    os.symlink("self-b", src / "self-a")
    return src


def test_bad_files_in_a_folder_are_reported_never_fatal(tmp_path):
    src = _bad_folder(tmp_path)
    report = ingest_folder(src, tmp_path / "C", max_tokens=30, overlap=5, max_file_size=1 << 20,
                           show_progress_bar=False)
    lines, m = _read(tmp_path / "C")
    assert {p for p, e in m.items() if e["status"] == "ingested"} == {
        "README", "long.txt", "sub/notes.md", "sub/latin.txt", "sub/weird\nname.txt"}
    assert m["data.json"]["reason"].startswith("not a supported format (.json")
    why = {p: e["reason"] for p, e in m.items() if e["status"] == "skipped"}
    assert why["empty.txt"] == "empty file" and why["junk.txt"].startswith("binary")
    assert why["corrupt.pdf"].startswith("not a readable PDF")
    assert "larger than the cap" in why["big.txt"] and "--text-column" in why["table.jsonl"]
    assert why["out-link.txt"].startswith("symlink pointing outside DIR: refused")
    assert why["sub/deeper/loop"].startswith("symlink loop") and why["self-a"] == why["self-b"] == "symlink loop"
    assert why["alias.txt"].startswith("symlink to long.txt") and why["broken.txt"].startswith("broken symlink")
    assert why[".hidden.txt"].startswith("hidden")
    assert "decoded as cp1252" in m["sub/latin.txt"]["notes"][0]
    assert "sub/weird%0Aname.txt#<n>" in m["sub/weird\nname.txt"]["notes"][0]
    assert not any("outside DIR" in x["text"] for x in lines)
    assert report["files"] == len(m) and report["passages"] == len(lines) and report["skipped"] == len(why)
    assert {x["metadata"]["source"] for x in lines} == {"README", "long.txt", "sub/notes.md", "sub/latin.txt",
                                                        "sub/weird\nname.txt"}
    from hf_dr.data.beir import load_corpus_data

    data = load_corpus_data(tmp_path / "C")  # a BEIR corpus: the ids are valid
    assert len(data.corpus) == len(lines)
    assert [x["title"] for x in lines if x["metadata"]["source"] == "sub/notes.md"] == ["Notes > One", "Notes > Two"]


def test_tables_are_read_row_by_row_with_text_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text('{"_id": "d1", "title": "T1", "body": "first row"}\n{"_id": "d2", "body": ""}\n'
                                 '{"_id": "d1", "body": "again"}\n')
    (src / "b.csv").write_text('id,body\nc1,"a csv row, with a comma\nand a newline"\n')
    pq.write_table(pa.table({"body": ["parquet row"]}), src / "c.parquet")
    ingest_folder(src, tmp_path / "C", max_tokens=20, text_column="body", show_progress_bar=False)
    lines, m = _read(tmp_path / "C")
    assert [(x["_id"], x["title"], x["text"]) for x in lines] == [
        ("d1#0", "T1", "first row"), ("c1#0", "", "a csv row, with a comma and a newline"),
        ("c.parquet:0#0", "", "parquet row")]
    assert m["a.jsonl"]["rows"] == 3 and len(m["a.jsonl"]["notes"]) == 2


class Crash(Exception):
    pass


def test_a_crash_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    import hf_dr.ingest.folder as F

    src = tmp_path / "in"
    src.mkdir()
    rng = random.Random(2)
    for i in range(30):
        (src / f"f{i:02d}.txt").write_text("\n\n".join(_prose(rng, 3) for _ in range(rng.randint(1, 4))))
    kw = dict(max_tokens=25, overlap=4, shard_size=4, show_progress_bar=False)
    ingest_folder(src, tmp_path / "whole", **kw)
    real, calls = F.write_atomic, []

    def crash_at_shard_3(path, write):
        calls.append(path)
        if path.name == "00003.jsonl":
            raise Crash("killed")
        return real(path, write)

    monkeypatch.setattr(F, "write_atomic", crash_at_shard_3)
    with pytest.raises(Crash):
        ingest_folder(src, tmp_path / "resumed", **kw)
    assert not (tmp_path / "resumed" / "corpus.jsonl").exists()
    monkeypatch.setattr(F, "write_atomic", real)
    ingest_folder(src, tmp_path / "resumed", **kw)
    assert (tmp_path / "resumed" / "corpus.jsonl").read_bytes() == (tmp_path / "whole" / "corpus.jsonl").read_bytes()
    assert (tmp_path / "resumed" / "manifest.jsonl").read_bytes() == (tmp_path / "whole" / "manifest.jsonl").read_bytes()
    (src / "new.txt").write_text("added later")  # another listing: refused, never mixed
    with pytest.raises(ValueError, match="begun with other settings"):
        (tmp_path / "resumed" / "ingest.json").unlink()
        (tmp_path / "resumed" / "plan.json").write_text(json.dumps({"format": 1, "listing": "old"}))
        ingest_folder(src, tmp_path / "resumed", **kw)


def test_the_command_exits_2_only_when_nothing_is_usable(tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    (src / "empty.txt").write_bytes(b"")
    (src / "corrupt.pdf").write_bytes(b"%PDF junk")
    assert main(["ingest", str(src), "--output", str(tmp_path / "C"), "--max-tokens", "50", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing usable" in err[0] and "empty file: 1" in err[0]
    (src / "ok.md").write_text("# Fine\n\nSome words.")
    assert main(["ingest", str(src), "--output", str(tmp_path / "D"), "--max-tokens", "50", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1 passages" in out and "skipped 2 file(s)" in out
    assert main(["ingest", str(src), "--output", str(tmp_path / "E")]) == 2  # neither --model nor --max-tokens
    assert "--model" in capsys.readouterr().err


def test_a_missing_extra_is_named_before_any_work(tmp_path, monkeypatch, capsys):
    src = tmp_path / "in"
    src.mkdir()
    _pdf(src / "a.pdf", ["text"])
    for name in [m for m in sys.modules if m == "pypdfium2" or m.startswith("pypdfium2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pypdfium2", None)
    assert main(["ingest", str(src), "--output", str(tmp_path / "C"), "--max-tokens", "50"]) == 2
    assert 'pip install "hf-dr[documents]"' in capsys.readouterr().err


@pytest.mark.shared
def test_acceptance_mixed_folder_with_minilm(tmp_path, capsys):
    """PDF, DOCX, HTML, Markdown, a 3,000-word text, a corrupt PDF and an empty file."""
    from transformers import AutoTokenizer

    src = tmp_path / "in"
    src.mkdir()
    rng = random.Random(3)
    _pdf(src / "report.pdf", [_prose(rng, 25), _prose(rng, 25)], title="Report")
    _docx(src / "doc.docx")
    (src / "page.html").write_text("<html><head><title>Page</title></head><body><article><p>" + _prose(rng, 6) +
                                   "</p></article></body></html>")
    (src / "notes.md").write_text("# Notes\n\n## A\n\n" + _prose(rng, 3))
    (src / "long.txt").write_text("\n\n".join(_prose(rng, 10, 10) for _ in range(30)))  # 3,000 words
    (src / "corrupt.pdf").write_bytes(b"%PDF-1.7 garbage")
    (src / "empty.txt").write_bytes(b"")
    assert main(["ingest", str(src), "--output", str(tmp_path / "C"), "--model", str(need(MINILM)), "--no-progress"]) == 0
    lines, m = _read(tmp_path / "C")
    tok = AutoTokenizer.from_pretrained(MINILM)
    long = [x for x in lines if x["metadata"]["source"] == "long.txt"]
    assert len(long) >= 12  # 3,000 words (about 3,300 tokens) in windows of 256
    assert all(len(tok(x["title"] + " " + x["text"])["input_ids"]) <= 256 for x in lines)
    assert {x["metadata"]["source"] for x in lines} == {"report.pdf", "doc.docx", "page.html", "notes.md", "long.txt"}
    assert {x["metadata"]["page"] for x in lines if x["metadata"]["source"] == "report.pdf"} == {1, 2}
    assert m["corrupt.pdf"]["reason"].startswith("not a readable PDF") and m["empty.txt"]["reason"] == "empty file"


# ---------------------------------------------------------------------------- processes
def _small_files(src: Path, n: int) -> None:
    src.mkdir()
    rng = random.Random(4)
    for i in range(n):
        (src / f"d{i // 100:02d}").mkdir(exist_ok=True)
        (src / f"d{i // 100:02d}" / f"f{i:04d}.txt").write_text(_prose(rng, rng.randint(1, 6)))


def _ingest_cmd(src: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "hf_dr.cli", "ingest", str(src), "--output", str(out), "--max-tokens", "40",
            "--shard-size", "50", "--no-progress", *extra]


@pytest.mark.spawn
@pytest.mark.cli
def test_kill_9_during_ingest_of_2000_files_then_rerun_equals_one_run(tmp_path):
    src = tmp_path / "in"
    _small_files(src, 2000)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    subprocess.run(_ingest_cmd(src, tmp_path / "whole"), check=True, env=env, timeout=600)
    proc = subprocess.Popen(_ingest_cmd(src, tmp_path / "killed"), env=env)
    shards = tmp_path / ".killed.partial" / "shards"
    deadline = time.time() + 300
    while time.time() < deadline and len(list(shards.glob("*.json"))) < 5:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(list(shards.glob("*.json")))
    assert 5 <= done < 40 and not (tmp_path / "killed").exists()  # killed mid-way
    subprocess.run(_ingest_cmd(src, tmp_path / "killed"), check=True, env=env, timeout=600)
    assert (tmp_path / "killed" / "corpus.jsonl").read_bytes() == (tmp_path / "whole" / "corpus.jsonl").read_bytes()
    assert (tmp_path / "killed" / "manifest.jsonl").read_bytes() == (tmp_path / "whole" / "manifest.jsonl").read_bytes()
    assert len((tmp_path / "whole" / "manifest.jsonl").read_text().splitlines()) == 2000


@pytest.mark.spawn
def test_workers_split_the_shards_with_the_same_result(tmp_path):
    src = tmp_path / "in"
    _small_files(src, 300)
    one = ingest_folder(src, tmp_path / "one", max_tokens=40, shard_size=20, show_progress_bar=False)
    two = ingest_folder(src, tmp_path / "two", max_tokens=40, shard_size=20, workers=3, show_progress_bar=False)
    assert one["passages"] == two["passages"]
    assert (tmp_path / "one" / "corpus.jsonl").read_bytes() == (tmp_path / "two" / "corpus.jsonl").read_bytes()


# ---------------------------------------------------------------------------- nothing cut unseen
def test_the_encode_loop_says_how_many_texts_it_truncated(tiny_tokenizer, caplog):
    import logging

    import numpy as np
    import torch

    from hf_dr.encoding import encode, one_length_report, reset_length_reports

    rng = random.Random(5)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 60))) for _ in range(40)]
    whole = [len(tiny_tokenizer(t)["input_ids"]) for t in texts]
    over = [n - 20 for n in whole if n > 20]
    assert over and len(over) < len(texts)
    reset_length_reports()
    forward = lambda ids, mask: torch.nn.functional.one_hot(ids[:, 0] % 4, 4).float()  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="hf_dr.encoding"):
        encode(texts, tiny_tokenizer, forward, max_length=20, chunk_size=7, desc="Encoding corpus")
    msgs = [r.getMessage() for r in caplog.records if r.name == "hf_dr.encoding"]
    p95 = int(np.percentile(over, 95, method="higher"))
    assert msgs == [f"corpus: {len(over):,} of {len(texts):,} texts ({100 * len(over) / len(texts):.1f}%) are longer "
                    f"than the max length of 20 tokens ({p95:,} tokens beyond it at the 95th percentile, {max(over):,} "
                    "at most): truncated to 20, the rest is not read. hf-dr ingest splits documents into passages that "
                    "fit (docs/ingest.md)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_dr.encoding"):  # the same again: not repeated
        encode(texts, tiny_tokenizer, forward, max_length=20, desc="Encoding corpus")
        encode(texts[:3], tiny_tokenizer, forward, max_length=200, desc="Encoding corpus")  # nothing cut: silent
    assert [r for r in caplog.records if r.name == "hf_dr.encoding"] == []
    with caplog.at_level(logging.WARNING, logger="hf_dr.encoding"), one_length_report():  # chunks: one report
        for i in range(0, 40, 10):
            encode(texts[i:i + 10], tiny_tokenizer, forward, max_length=21, desc="Encoding corpus")
    msgs = [r.getMessage() for r in caplog.records if r.name == "hf_dr.encoding"]
    assert len(msgs) == 1 and msgs[0].startswith(f"corpus: {sum(n > 21 for n in whole):,} of 40 texts")


def test_a_dev_evaluation_says_once_what_it_truncated_at_every_checkpoint(tiny_bert_dir, tmp_path, caplog):
    """The adapt stages score the dev set through ``RerankEvaluator.run`` (not its ``__call__``): its
    length-sorted chunks are one report, and a checkpoint (the same tokenizer saved under another path)
    cutting the same texts says nothing new."""
    import logging
    import shutil

    from hf_dr.encoding import reset_length_reports
    from hf_dr.evaluation import RerankEvaluator
    from hf_dr.models import load_encoder

    rng = random.Random(3)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 40))) for _ in range(90)]
    rows = [{"query_id": f"q{i % 3}", "query": "a query", "doc_id": f"d{i}", "doc": d, "label": int(i < 3)}
            for i, d in enumerate(docs)]
    ev = RerankEvaluator(rows, batch_size=4, max_length=12)  # chunks of 64 documents: two
    start = load_encoder(tiny_bert_dir)
    tok = start.tokenizer
    over = sum(len(tok(d)["input_ids"]) > 12 for d in docs)
    assert 64 < over < 90
    reset_length_reports()
    with caplog.at_level(logging.WARNING, logger="hf_dr.encoding"):
        ev.run(start)
    msgs = [r.getMessage() for r in caplog.records if r.name == "hf_dr.encoding"]
    assert len(msgs) == 1 and msgs[0].startswith(f"corpus: {over:,} of 90 texts"), msgs
    caplog.clear()
    shutil.copytree(tiny_bert_dir, tmp_path / "checkpoint-100")
    with caplog.at_level(logging.WARNING, logger="hf_dr.encoding"):
        ev.run(load_encoder(tmp_path / "checkpoint-100"))
        ev(start)
    assert [r.getMessage() for r in caplog.records if r.name == "hf_dr.encoding"] == []


def test_passages_are_scored_as_their_documents():
    from hf_dr.evaluation import aggregate_passages

    run = {"q": {"a#0": 1.0, "a#1": 3.0, "b#1": 2.5, "b#0": 0.5, "c": 2.0}}
    assert aggregate_passages(run, "maxp") == {"q": {"a": 3.0, "b": 2.5, "c": 2.0}}
    assert aggregate_passages(run, "firstp") == {"q": {"a": 1.0, "b": 0.5, "c": 2.0}}
    assert aggregate_passages(run, "sum") == {"q": {"a": 4.0, "b": 3.0, "c": 2.0}}
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate_passages(run, "mean")


def _sample_as_passages(tmp_path: Path, max_tokens: int) -> Path:
    """The bundled sample's corpus ingested (rows of its corpus.jsonl), with its queries and qrels."""
    from .conftest import SAMPLE

    src = tmp_path / "rows"
    src.mkdir(parents=True)
    (src / "corpus.jsonl").write_bytes((SAMPLE / "corpus.jsonl").read_bytes())
    out = tmp_path / "passages"
    ingest_folder(src, out, max_tokens=max_tokens, overlap=0, text_column="text", show_progress_bar=False)
    (out / "queries.jsonl").write_bytes((SAMPLE / "queries.jsonl").read_bytes())
    (out / "qrels").mkdir()
    (out / "qrels" / "test.tsv").write_bytes((SAMPLE / "qrels" / "test.tsv").read_bytes())
    return out


@pytest.mark.slow
def test_evaluation_of_passages_goes_through_the_one_metric_path(tmp_path):
    """One passage per document: the same nDCG as the corpus itself; many: MaxP by default, FirstP and
    sum when asked, each equal to scoring the aggregated run with evaluate_run."""
    from hf_dr.data import load_beir
    from hf_dr.evaluation import aggregate_passages, evaluate, evaluate_run
    from hf_dr.retrieval import BM25Retriever

    from .conftest import SAMPLE

    ref = load_beir(SAMPLE, split="test")
    base = evaluate(BM25Retriever.from_data(ref), ref)
    assert base.aggregation is None
    whole = load_beir(_sample_as_passages(tmp_path / "one", 100_000), split="test")
    res = evaluate(BM25Retriever.from_data(whole), whole)
    assert res.aggregation["how"] == "maxp" and res.aggregation["passages"] == res.aggregation["documents"] == 500
    assert res.aggregate == pytest.approx(base.aggregate, abs=1e-12)
    data = load_beir(_sample_as_passages(tmp_path / "many", 24), split="test")
    assert len(data.corpus) > 1.5 * len(ref.corpus)
    bm25 = BM25Retriever.from_data(data)
    passages = bm25.search(data.split_queries(), len(data.corpus))
    for how in ("maxp", "firstp", "sum"):
        res = evaluate(bm25, data, aggregate=how)
        assert res.aggregation["how"] == how
        assert res.aggregate == evaluate_run(data.qrels, aggregate_passages(passages, how)).aggregate
    none = evaluate(bm25, data, aggregate="none")
    assert none.aggregation is None and none.aggregate["ndcg@10"] == 0.0  # the qrels judge no passage


def test_evaluate_reads_a_folder_of_documents_through_the_cached_ingest_stage(tmp_path, capsys):
    src = tmp_path / "docs"
    (src / "qrels").mkdir(parents=True)
    rng = random.Random(6)
    topics = {"cats.md": "cats whiskers purr", "dogs.txt": "dogs bark fetch", "birds.txt": "birds wings feathers"}
    for name, words in topics.items():
        body = "\n\n".join(_prose(rng, 4) + " " + words for _ in range(6))  # several passages each
        (src / name).write_text(("# About\n\n" if name.endswith(".md") else "") + body)
    (src / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": w}) + "\n"
                                               for i, w in enumerate(topics.values())))
    (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\t{name}\t1\n" for i, name in enumerate(topics)))
    assert main(["evaluate", "--data", str(src), "--retriever", "bm25", "--metrics", "ndcg@10"]) == 0
    out = capsys.readouterr().out
    assert "a folder of documents, ingested into" in out and "3 of 5 file(s)" in out
    assert "scored by its best passage (MaxP)" in out and "| 1.0000 |" in out
    folder = out.split("file(s) (")[1].split(", cached")[0]
    stamp = (Path(folder) / "corpus.jsonl").stat().st_mtime_ns
    assert main(["evaluate", "--data", str(src), "--retriever", "bm25", "--aggregate", "firstp"]) == 0
    assert (Path(folder) / "corpus.jsonl").stat().st_mtime_ns == stamp  # the stage was cached
    assert "its first passage (FirstP)" in capsys.readouterr().out


@pytest.mark.slow
def test_hf_dr_encode_says_what_its_max_length_cut(tiny_bert_dir, tmp_path, caplog):
    """The streamed, sharded encoding (the caller stops reading after its last shard) reports too:
    one warning for the whole corpus, its numbers those of the tokenizer."""
    import logging

    from transformers import AutoTokenizer

    from hf_dr.data import load_beir
    from hf_dr.encoding import doc_to_text, reset_length_reports

    from .conftest import SAMPLE

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    docs = load_beir(SAMPLE, split=None).corpus
    n_over = sum(len(tok(doc_to_text(d), verbose=False)["input_ids"]) > 48 for d in docs)
    reset_length_reports()
    with caplog.at_level(logging.WARNING, logger="hf_dr.encoding"):
        assert main(["encode", "--data", str(SAMPLE), "--model", str(tiny_bert_dir), "--output", str(tmp_path / "e"),
                     "--max-length", "48", "--shard-size", "128", "--no-progress"]) == 0
    msgs = [r.getMessage() for r in caplog.records if r.name == "hf_dr.encoding"]
    assert len(msgs) == 1 and msgs[0].startswith(f"corpus: {n_over:,} of {len(docs):,} texts") and "truncated to 48" in msgs[0]


# ---------------------------------------------------------------------------- a dataset of load_dataset
def _rows(n: int = 6) -> list[dict]:
    words = "vitamin bone heart rain protein cell river stone".split()
    return [{"id": f"r{i}", "title": f"Row {i}",
             "body": "\n\n".join(" ".join(words[(i + j + k) % len(words)] for k in range(9)) + "."
                                 for j in range(4 + i))} for i in range(n)]


def _corpus(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]


def test_a_dataset_folder_is_ingested_through_load_dataset_as_its_rows_as_a_table(tmp_path, capsys):
    """``hf-dr ingest FOLDER --load-dataset --text-column body``: a local dataset folder read by
    ``datasets.load_dataset`` gives the passages of the same rows written as a JSONL table (ids,
    titles, texts, spans), its source the dataset's; a second run finds the staged rows."""
    rows = _rows()
    (tmp_path / "ds" / "data").mkdir(parents=True)
    (tmp_path / "ds" / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "table").mkdir()
    (tmp_path / "table" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["--text-column", "body", "--max-tokens", "20", "--no-progress"]
    assert main(["ingest", str(tmp_path / "ds"), "--load-dataset", "--output", str(tmp_path / "A"), *args]) == 0
    assert main(["ingest", str(tmp_path / "table"), "--output", str(tmp_path / "B"), *args]) == 0
    a, b = _corpus(tmp_path / "A"), _corpus(tmp_path / "B")
    assert len(a) > len(rows) and [p["_id"] for p in a] == [p["_id"] for p in b] and a[0]["_id"] == "r0#0"
    assert [(p["title"], p["text"], p["metadata"]["start"], p["metadata"]["end"]) for p in a] == \
        [(p["title"], p["text"], p["metadata"]["start"], p["metadata"]["end"]) for p in b]
    assert {p["metadata"]["source"] for p in a} == {"ds/train.parquet"}
    report = json.loads((tmp_path / "A" / "ingest.json").read_text())
    assert report["dataset"] == {"source": str(tmp_path / "ds"), "config": None, "split": "train", "rows": len(rows)}
    assert main(["ingest", str(tmp_path / "ds"), "--load-dataset", "--output", str(tmp_path / "C"), *args]) == 0
    assert (tmp_path / "C" / "corpus.jsonl").read_bytes() == (tmp_path / "A" / "corpus.jsonl").read_bytes()


def test_a_hub_dataset_id_goes_through_load_dataset(tmp_path, monkeypatch, capsys):
    """A Hub id (no such local path) is read with ``datasets.load_dataset(id, config, split=...)``
    (replaced here by a local Dataset: the Hub is not reachable); a missing --text-column or column
    is a sentence and exit status 2."""
    import datasets

    calls = []

    def fake_load(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        return datasets.Dataset.from_list(_rows(3))

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    out = tmp_path / "H"
    assert main(["ingest", "someone/reports", "--output", str(out), "--text-column", "body", "--split", "test",
                 "--dataset-config", "en", "--max-tokens", "20", "--no-progress"]) == 0
    assert calls == [("someone/reports", "en", "test")]
    corpus = _corpus(out)
    assert {p["metadata"]["source"] for p in corpus} == {"reports/test.parquet"} and corpus[0]["_id"] == "r0#0"
    assert json.loads((out / "ingest.json").read_text())["dataset"]["source"] == "someone/reports"
    assert main(["push", str(out), "--dataset", "--local-dir", str(tmp_path / "repo")]) == 0  # its card names it
    assert "The rows of the dataset `someone/reports` (configuration `en`), split `test` (3 rows), each row a " \
        "document." in (tmp_path / "repo" / "README.md").read_text()
    capsys.readouterr()
    assert main(["ingest", "someone/reports", "--output", str(tmp_path / "I"), "--max-tokens", "20"]) == 2
    assert "give --text-column" in capsys.readouterr().err
    assert main(["ingest", "someone/reports", "--output", str(tmp_path / "J"), "--text-column", "nope",
                 "--max-tokens", "20"]) == 2
    err = capsys.readouterr().err
    assert "has no column 'nope'" in err and "body" in err and "Traceback" not in err


def test_a_data_file_is_read_with_its_formats_builder(tmp_path):
    from datasets import Dataset

    from hf_dr.ingest import ingest_dataset

    Dataset.from_list(_rows(4)).to_parquet(str(tmp_path / "rows.parquet"))
    report = ingest_dataset(str(tmp_path / "rows.parquet"), tmp_path / "P", text_column="body", max_tokens=20,
                            show_progress_bar=False)
    corpus = _corpus(tmp_path / "P")
    assert report["passages"] == len(corpus) and {p["metadata"]["source"] for p in corpus} == {"rows/train.parquet"}
    assert sorted({passage_doc(p["_id"]) for p in corpus}) == ["r0", "r1", "r2", "r3"]
