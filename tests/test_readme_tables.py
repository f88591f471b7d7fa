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
