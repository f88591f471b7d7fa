"""The README's result tables are exactly what benchmarks/results/*.json hold."""

import importlib.util

from .conftest import REPO


def _render_module():
    spec = importlib.util.spec_from_file_location("render_readme", REPO / "benchmarks" / "render_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_tables_match_result_files():
    mod = _render_module()
    readme = (REPO / "README.md").read_text()
    assert mod.render(readme, mod.load_rows()) == readme, "run: python benchmarks/render_readme.py"


def test_every_row_has_a_command_and_metrics():
    rows = _render_module().load_rows()
    for r in rows:
        assert r["command"].strip() and r["metrics"], r
        assert all(isinstance(v, (int, float)) for v in r["metrics"].values()), r


def test_render_fills_markers():
    mod = _render_module()
    rows = [{"table": "t", "dataset": "d", "system": "s", "command": "c", "metrics": {"ndcg@10": 0.5}}]
    out = mod.render("x\n<!-- results:t -->\nold\n<!-- /results:t -->\ny", rows)
    assert "| d | s | 0.5000 | `c` |" in out and "old" not in out


def test_bm25_rows_are_re_derived_within_tolerance(tmp_path):
    """The cheap rows (BM25) are re-run exactly as recorded, 2CR-style; model rows are
    re-derived by `python benchmarks/regress.py` (minutes of encoding, not CI)."""
    import json
    import shlex

    from hf_dr.cli import main

    from .conftest import DATA, need

    rows = [r for r in _render_module().load_rows()
            if r["table"] == "baselines" and "--retriever bm25" in r["command"]]
    assert rows, "no BM25 baseline rows recorded"
    for i, r in enumerate(rows):
        need(DATA / r["dataset"])
        argv = [a.replace("../shared", str(DATA.parent)) for a in shlex.split(r["command"])[1:]]
        assert main(argv + ["--output", str(tmp_path / str(i))]) == 0
        got = json.loads((tmp_path / str(i) / "metrics.json").read_text())["metrics"]
        for k, want in r["metrics"].items():
            assert abs(got[k] - want) <= 0.002, (r["system"], k, got[k], want)
