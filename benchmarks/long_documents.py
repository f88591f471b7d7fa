"""Long documents: what truncation to the model's window loses, and what passages + MaxP win back.

    python benchmarks/long_documents.py                                   # SciFact, ArguAna, TREC-DL, whole (heavy on CPU)
    python benchmarks/long_documents.py --docs 600 --max-queries 150      # a reduced run
    python benchmarks/long_documents.py --docs 600 --max-queries 150 --passages-only --pack-below 0,32,64,128
                                                                          # how paragraphs are packed

Each long document is the concatenation of 8 documents of the corpus (drawn by ``--seed``: the
corpus shuffled, then cut into groups of 8; each part its title then its text, parts separated by
a blank line); a long document is relevant to a query where one of its parts was (the highest
grade of its parts). ArguAna's queries are arguments of its corpus: those documents are left out of
the long documents (in the short corpus the self-match rule removes them; in a long one the query's
own text would be a part of some long document). TREC-DL 2019 keeps every judged passage (9,260,
more than ``--docs``): its parts are MS MARCO passages, short paragraphs (~75 tokens).

Rows, each all-MiniLM-L6-v2 (and BM25) on the test queries, nDCG@10:

* ``short``: the documents as they are (the subset of ``--docs`` when given);
* ``long, truncated``: the long documents encoded as every command does, cut at 256 tokens (the
  encode loop's report: how many are longer and by how much);
* ``long, passages + MaxP / FirstP / sum``: the long documents ``hf-dr ingest``-ed (rows of their
  corpus.jsonl, ``--text-column text``) into passages that fit all-MiniLM-L6-v2's window, scored as
  their documents by ``hf-dr evaluate``'s aggregation; with ``--pack-below N`` (several: a row each,
  MaxP only), whole paragraphs packed into one passage while it holds fewer than N tokens
  (``hf-dr ingest --pack-below``; 0, the default, never packs): table ``long_documents_packing``.

Rows: ``benchmarks/results/long_documents.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, command_line, machine, save_rows  # noqa: E402

PARTS = 8


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _qrels(path: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        out.setdefault(q, {})[d] = int(g)
    return out


def _write(folder: Path, corpus: list[dict], queries: list[dict], qrels: dict) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    return folder


def build(name: str, work: Path, n_docs: int | None, max_queries: int | None, seed: int) -> tuple[Path, Path]:
    """The short (subset) and long BEIR folders of dataset ``name``."""
    src = SHARED / "data" / name
    corpus, queries, qrels = _jsonl(src / "corpus.jsonl"), _jsonl(src / "queries.jsonl"), _qrels(src / "qrels" / "test.tsv")
    qids = sorted(qrels)
    if max_queries:
        qids = random.Random(seed).sample(qids, min(max_queries, len(qids)))
    qrels = {q: qrels[q] for q in qids}
    queries = [q for q in queries if q["_id"] in qrels]
    own = {q["_id"] for q in queries}
    judged = {d for docs in qrels.values() for d in docs}
    usable = [d for d in corpus if d["_id"] not in own]
    keep = [d for d in usable if d["_id"] in judged]
    keep += [d for d in usable if d["_id"] not in judged][:max(0, (n_docs or len(usable)) - len(keep))]
    short = _write(work / name / "short", keep, queries, qrels)
    order = list(range(len(keep)))
    random.Random(seed).shuffle(order)
    long_docs, part_of = [], {}
    for g in range(0, len(order), PARTS):
        lid = f"long-{g // PARTS:05d}"
        parts = [keep[i] for i in order[g:g + PARTS]]
        for p in parts:
            part_of[p["_id"]] = lid
        long_docs.append({"_id": lid, "title": "", "text": "\n\n".join(
            ((p.get("title") or "") + "\n" + p["text"]).strip() for p in parts)})
    long_qrels: dict[str, dict[str, int]] = {}
    for q, docs in qrels.items():
        for d, grade in docs.items():
            if d in part_of:
                cur = long_qrels.setdefault(q, {})
                cur[part_of[d]] = max(cur.get(part_of[d], 0), grade)
    long = _write(work / name / "long", long_docs, queries, long_qrels)
    return short, long


def run_dataset(name: str, args, encoder, model: str, window: int) -> list[dict]:
    import shutil

    from hf_dr.data import load_beir
    from hf_dr.evaluation import evaluate
    from hf_dr.ingest import ingest_folder
    from hf_dr.retrieval import BM25Retriever, EncoderRetriever

    work = Path(args.work)
    short, long = build(name, work, args.docs, args.max_queries, args.seed)
    rows_dir = work / name / "rows"
    shutil.rmtree(rows_dir, ignore_errors=True)
    rows_dir.mkdir(parents=True)
    (rows_dir / "corpus.jsonl").write_bytes((long / "corpus.jsonl").read_bytes())

    def ingested(pack: int) -> tuple[Path, dict]:
        passages = work / name / f"passages-pack{pack}"
        shutil.rmtree(passages, ignore_errors=True)
        report = ingest_folder(rows_dir, passages, tokenizer=model, max_tokens=window, text_column="text",
                               overlap=args.overlap, pack_below=pack, show_progress_bar=True)
        (passages / "queries.jsonl").write_bytes((long / "queries.jsonl").read_bytes())
        shutil.copytree(long / "qrels", passages / "qrels")
        return passages, report
    tok = encoder.tokenizer
    lengths = [len(tok(d["title"] + " " + d["text"], verbose=False)["input_ids"]) for d in _jsonl(long / "corpus.jsonl")]
    over = sorted(n - window for n in lengths if n > window)
    rows, sizes = [], {}
    packs = [int(x) for x in str(args.pack_below).split(",")]
    ingested_once: dict[int, tuple[Path, dict]] = {}

    def row(system: str, what: str, res, extra=None, table: str = "long_documents"):
        rows.append({"table": table, "dataset": name, "system": f"{system}: {what}",
                     "command": command_line(), "machine": machine(),
                     "metrics": {"ndcg@10": round(res.aggregate["ndcg@10"], 4), "queries": res.n_queries, **sizes,
                                 **(extra or {})}})
        print(name, rows[-1]["system"], rows[-1]["metrics"], flush=True)

    for system, make in (("BM25", BM25Retriever.from_data),
                         ("all-MiniLM-L6-v2", lambda d: EncoderRetriever.from_data(encoder, d))):
        if system == "BM25" and args.no_bm25:
            continue
        if not args.passages_only:
            data = load_beir(short, split="test")
            sizes = {"documents": len(data.corpus)}
            row(system, "short documents", evaluate(make(data), data))
            data = load_beir(long, split="test")
            t0 = time.perf_counter()
            res = evaluate(make(data), data)
            sizes = {"documents": len(data.corpus)}
            row(system, "long documents, truncated" if system != "BM25" else "long documents", res,
                {"over_window": len(over), "overflow_p95": int(np.percentile(over, 95, method="higher")) if over else 0,
                 "seconds": round(time.perf_counter() - t0, 1)} if system != "BM25" else None)
        for pack in packs:
            if pack not in ingested_once:
                ingested_once[pack] = ingested(pack)
            passages, report = ingested_once[pack]
            data = load_beir(passages, split="test")
            retriever = make(data)
            sizes = {"documents": len(long_docs_ids(long)), "passages": report["passages"]}
            tag = ", ".join(([f"overlap {args.overlap}"] if args.overlap is not None else []) +
                            ([f"paragraphs packed below {pack} tokens"] if pack else []))
            tag = f" ({tag})" if tag else ""
            for how in ("maxp", "firstp", "sum") if pack == 0 else ("maxp",):
                row(system, f"long documents, passages{tag} + {how}", evaluate(retriever, data, aggregate=how),
                    table="long_documents" if pack == 0 else "long_documents_packing")
    return rows


def long_docs_ids(long: Path) -> list[str]:
    return [d["_id"] for d in _jsonl(long / "corpus.jsonl")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="scifact,arguana,msmarco-trecdl2019")
    ap.add_argument("--docs", type=int, default=None, help="documents kept: the judged ones, then others up to N")
    ap.add_argument("--max-queries", type=int, default=None, help="test queries drawn by --seed (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-bm25", action="store_true")
    ap.add_argument("--overlap", type=int, default=None, help="the passages' overlap (default: hf-dr ingest's)")
    ap.add_argument("--pack-below", default="0", help="hf-dr ingest's --pack-below, or several (0,32,64): passage "
                                                      "rows for each (default 0, ingest's)")
    ap.add_argument("--passages-only", action="store_true", help="only the passage rows (e.g. with --overlap)")
    ap.add_argument("--work", default="runs/bench-long")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    from hf_dr.models import load_encoder

    model = str(SHARED / "models" / "all-MiniLM-L6-v2")
    encoder = load_encoder(model)
    window = encoder.encoding_settings()["max_length"]
    rows = []
    for name in args.datasets.split(","):
        rows += run_dataset(name, args, encoder, model, window)
    for r in rows:
        r["reduced"] = {"docs": args.docs, "max_queries": args.max_queries}
    if not args.no_save:
        print("wrote", save_rows("long_documents", rows))


if __name__ == "__main__":
    main()
