"""Habits of the codebase: the linter's rules hold (when ruff is installed), no code or comment
names an issue number (the history is in git), and the test suite itself uses no network and cannot
wait for ever."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from .conftest import REPO

CODE_DIRS = ("hf_dr", "tests", "benchmarks", "examples", "dataset_builders", "spaces", ".ci")
# "#23", "(#23)", "issue 23", "issue #23" — not a colour ("#1f77b4"), an anchor ("x.md#tests") nor a
# passage id's suffix ("doc#0", "#0")
ISSUE_REF = re.compile(r"(?<![\w/.`-])(?:issue\s+#?\d+|#[1-9]\d{0,3}\b(?![0-9a-fA-F]))", re.IGNORECASE)


def _code_files():
    for d in CODE_DIRS:
        root = REPO / d
        if root.is_dir():
            yield from (p for p in root.rglob("*") if (p.suffix in (".py", ".sh") or p.name == "run")
                        and p.name != "test_codebase.py")  # this file spells the pattern out


def test_no_issue_numbers_in_code_or_comments():
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()[:100]}" for p in _code_files()
            for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if ISSUE_REF.search(line)]
    assert not hits, "issue numbers in code (the history is in git):\n" + "\n".join(hits[:30])


def test_the_pattern_finds_issue_numbers_and_nothing_else():
    assert ISSUE_REF.search("# the fusion teacher (#21)") and ISSUE_REF.search('"""Issue #23, items 2"""')
    assert ISSUE_REF.search("see issue 14 for the cases")
    assert not ISSUE_REF.search('color="#1f77b4"') and not ISSUE_REF.search("docs/development.md#tests")
    assert not ISSUE_REF.search("its first passage (``#0``)") and not ISSUE_REF.search('pid.endswith("#0")')
    assert not ISSUE_REF.search("x[0] # 8 rows") and not ISSUE_REF.search("passage_id = f'{doc}#{n}'")


@pytest.mark.cli
def test_ruff_passes():
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (the dev extra installs it)")
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_the_suite_uses_no_network_and_no_test_waits_for_ever(pytestconfig):
    """A name outside this machine is refused at once (no DNS look-up, no connection that waits),
    the Hub and the libraries' calls home are off for every process the tests start, and a test
    that hangs is ended by pytest-timeout (the run's limit is set, in the thread method)."""
    import os
    import socket

    with pytest.raises(socket.gaierror, match="no network"):
        socket.getaddrinfo("huggingface.co", 443)
    with pytest.raises(OSError):
        socket.create_connection(("api.gradio.app", 443), timeout=30)
    assert socket.getaddrinfo("127.0.0.1", 80) and socket.getaddrinfo("localhost", 80)
    # read as the libraries read them (a library may write its own spelling: Gradio sets the Hub's
    # telemetry switch to "True" when a Blocks is built)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        assert os.environ[var].upper() in ("1", "ON", "YES", "TRUE"), var
    assert os.environ["GRADIO_ANALYTICS_ENABLED"].upper() in ("0", "OFF", "NO", "FALSE")
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout (the dev extra) is not installed"
    assert float(pytestconfig.getini("timeout")) == 600 and pytestconfig.getini("timeout_method") == "thread"
