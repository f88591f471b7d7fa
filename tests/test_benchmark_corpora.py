"""The corpora the benchmarks build are the size their commands say."""

import importlib.util
import sys

from .conftest import DATA, REPO, need


def _module(name: str):
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"hf_dr_benchmark_{name}", REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_window_rows_returns_exactly_n_windows_in_corpus_order():
    """`speed.py --windows N` and the scale corpora: the first N windows, no more (it used to add one
    window of every later document of the file it stopped in), consecutive, unique ids."""
    need(DATA / "scifact" / "corpus.jsonl")
    mod = _module("encode_scale")
    for n in (1, 7, 300):
        rows = mod.window_rows(n)
        assert len(rows) == n
        assert len({r["_id"] for r in rows}) == n
    rows = mod.window_rows(300)
    assert rows[:7] == mod.window_rows(7)  # a prefix: the same windows whatever n
    assert all(len(r["text"].split()) <= mod.WORDS for r in rows)
    assert rows[0]["_id"].startswith("scifact:")
