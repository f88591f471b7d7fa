"""Shared helpers of the benchmark scripts: where results go and how rows are recorded.

Every benchmark writes ``benchmarks/results/<name>.json``: a list of rows
``{table, dataset, system, command, metrics, ...}``. ``render_readme.py`` turns them into
the README's tables (pyserini-2CR style), and ``tests/test_readme_tables.py`` checks that
the README shows exactly what the result files hold.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SHARED = Path(os.environ.get("HF_DR_SHARED", Path(__file__).resolve().parent.parent.parent / "shared"))


def command_line() -> str:
    """The command that is running, as a user would type it from the repo root."""
    argv = [Path(sys.argv[0]).as_posix()] + sys.argv[1:]
    rel = os.path.relpath(argv[0], Path(__file__).resolve().parent.parent)
    return "python " + " ".join(shlex.quote(a) for a in [rel] + argv[1:])


def bm25s_own(texts, k: int = 1000):
    """The BM25 peer of the speed benchmarks: bm25s' own index of ``texts`` (English stop words and
    stemmer, as hf-dr's BM25 by default) and ``search(query_texts) -> (docs, scores)``, its own
    ``retrieve`` with its own tokenisation of the queries, top ``k``."""
    import Stemmer
    import bm25s

    stemmer = Stemmer.Stemmer("english")
    peer = bm25s.BM25()
    peer.index(bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)

    def search(queries: list[str]):
        return peer.retrieve(bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False), k=k,
                             show_progress=False)

    return search


def require_installed() -> None:
    """Exit with status 2 and one line when this interpreter cannot run hf-dr (a benchmark started outside
    hf-dr's environment would otherwise fail in its first ``hf-dr`` child, with that child's traceback)."""
    missing = [m for m in ("torch", "transformers", "datasets") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"error: {sys.executable} has no {', '.join(missing)}: run the benchmark in hf-dr's environment "
              "(`. .venv/bin/activate`, or `pip install -e .`)", file=sys.stderr)
        sys.exit(2)


def cpu_model() -> str | None:
    """The processor's model name (``/proc/cpuinfo``'s first ``model name``; ``platform.processor()``
    elsewhere), or None: speed ratios between peers move with the processor (docs/results.md, "Speed"),
    so a row names it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def machine() -> str:
    import torch

    if torch.cuda.is_available():
        dev = torch.cuda.get_device_name(0)
    else:
        model = cpu_model()
        dev = f"CPU x{os.cpu_count()}" + (f" ({model})" if model else "")
    return f"{platform.machine()} {dev}, torch {torch.__version__}"


def save_rows(name: str, rows: list[dict], merge_key=("table", "dataset", "system")) -> Path:
    """Write (or update, row by row) ``results/<name>.json``: a new row replaces the old one with the
    same ``merge_key`` (field names, or a function of a row)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    old = json.loads(path.read_text()) if path.is_file() else []
    key = merge_key if callable(merge_key) else lambda r: tuple(r.get(k) for k in merge_key)  # noqa: E731
    new_keys = {key(r) for r in rows}
    stamp = time.strftime("%Y-%m-%d")
    merged = [r for r in old if key(r) not in new_keys] + [{**r, "date": r.get("date", stamp)} for r in rows]
    path.write_text(json.dumps(merged, indent=1) + "\n")
    return path
