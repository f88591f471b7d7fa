"""The README's result tables are exactly what benchmarks/results/*.json hold."""

import pytest
import importlib.util

from .conftest import REPO


def _render_module():
    spec = importlib.util.spec_from_file_location("render_readme", REPO / "benchmarks" / "render_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_tables_match_result_files():
    mod = _render_module()
    for page in mod.PAGES:
        text = page.read_text()
        assert mod.render(text, mod.load_rows()) == text, f"{page.name}: run python benchmarks/render_readme.py"


def test_headline_table_lists_each_named_row():
    mod = _render_module()
    rows = mod.load_rows()
    table = mod.render_headline(rows)
    for label, t, system in mod.HEADLINE:
        want = [r for r in rows if r["table"] == t and r["system"] == system]
        assert want, f"headline row {label!r}: no result ({t}, {system})"
        line = next(row for row in table.splitlines() if row.startswith(f"| {label} |"))
        for r in want:
            assert f"{r['metrics'][mod.HEADLINE_METRIC]:.3f}" in line, (label, r["dataset"])


def test_no_machine_paths_in_docs_or_results():
    """Every command in the README, the docs and the result files runs on any clone."""
    import re

    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "benchmarks" / "results").glob("*.json"))]
    for p in pages:
        for m in re.finditer(r"(?<![\w.])/(?:work|home|tmp|root|Users|mnt)/[\w./-]+", p.read_text()):
            raise AssertionError(f"{p.relative_to(REPO)}: absolute local path {m.group(0)}")


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


@pytest.mark.shared
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


def test_robustness_table_matches_probe_results():
    """docs/robustness.md shows exactly benchmarks/results/probes.json (python benchmarks/probes.py)."""
    import json

    import sys

    spec = importlib.util.spec_from_file_location("hf_dr_probes", REPO / "benchmarks" / "probes.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    data = json.loads((REPO / "benchmarks" / "results" / "probes.json").read_text())
    doc = (REPO / "docs" / "robustness.md").read_text()
    assert mod.render_doc(doc, data) == doc, "run: python benchmarks/probes.py"
    assert {r["case"] for r in data["rows"]} == {name for name, _, _ in mod.CASES}, "a case was not run"
    assert all(r["verdict"] != "FAIL" and not r["traceback"] for r in data["rows"]), \
        [r["case"] for r in data["rows"] if r["verdict"] == "FAIL"]
