import json
import subprocess
import sys

import pytest

from hf_dr.cli import main

from .conftest import DATA, MINILM, SAMPLE, need


def test_evaluate_bm25_writes_run_and_metrics(tmp_path, capsys):
    assert main(["evaluate", "--data", str(SAMPLE), "--retriever", "bm25", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| bm25 |" in out and "nDCG@10" in out
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert set(metrics["metrics"]) == {"ndcg@10", "recall@100", "recall@1000", "mrr@10"}
    assert 0.5 < metrics["metrics"]["ndcg@10"] <= 1.0
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert len(lines[0].split()) == 6 and lines[0].split()[3] == "1"


def test_bad_input_is_a_message_not_a_traceback(tmp_path, capsys):
    (tmp_path / "notbeir").mkdir()
    assert main(["evaluate", "--data", str(tmp_path / "notbeir")]) == 2
    err = capsys.readouterr().err
    assert "corpus.jsonl is missing" in err and "Traceback" not in err
    assert main(["evaluate", "--data", str(SAMPLE), "--retriever", "dense"]) == 2
    assert "needs --model" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.cli
@pytest.mark.shared
def test_evaluate_dense_end_to_end_with_real_minilm(tmp_path):
    """`hf-dr evaluate` in a subprocess on a 40-query SciFact subset with the real MiniLM."""
    scifact, model = need(DATA / "scifact"), need(MINILM)
    # a subset folder: 40 test queries, their relevant abstracts and 300 others
    from hf_dr.data import load_beir, save_beir

    data = load_beir(scifact)
    qids = list(data.qrels)[:40]
    rel = {d for q in qids for d in data.qrels[q]}
    keep = rel | set(data.corpus["_id"][:300])
    data.corpus = data.corpus.filter(lambda r: r["_id"] in keep)
    data.qrels = {q: data.qrels[q] for q in qids}
    data.queries = data.queries.filter(lambda r: r["_id"] in set(qids))
    save_beir(data, tmp_path / "sub")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "hf_dr.cli", "evaluate", "--data", str(tmp_path / "sub"),
                           "--retriever", "dense", "--model", str(model), "--output", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "| dense: all-MiniLM-L6-v2 |" in proc.stdout
    m = json.loads((out / "metrics.json").read_text())
    assert m["encoder"] == "DenseEncoder" and m["n_queries"] == 40
    assert m["metrics"]["ndcg@10"] > 0.6  # MiniLM scores 0.645 on the full corpus; easier on a subset


@pytest.mark.cli
def test_quiet_output_and_verbose_shows_everything(tmp_path):
    """A BM25 run prints the table and nothing on stderr (bm25s sets its own logger to DEBUG on
    import: "DEBUG bm25s: Building index..." used to appear on every run); -v shows it."""
    cmd = [sys.executable, "-m", "hf_dr.cli", "evaluate", "--data", str(SAMPLE), "--max-queries", "3"]
    quiet = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "| bm25 |" in quiet.stdout and quiet.stderr == ""
    verbose = subprocess.run(cmd[:3] + ["-v"] + cmd[3:], capture_output=True, text=True, timeout=300)
    assert verbose.returncode == 0 and "DEBUG bm25s" in verbose.stderr


def test_argument_errors_are_one_line_and_exit_2(capsys):
    assert main(["evaluate", "--data", str(SAMPLE), "--top-k", "0"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "hf-dr evaluate: error: argument --top-k: must be a positive integer (at least 1), got 0 "
        "(see hf-dr evaluate --help)"]
    assert main(["--help"]) == 0 and "evaluate" in capsys.readouterr().out
