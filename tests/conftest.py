"""Shared fixtures: tiny random models built from configs, and paths to the real data."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("HF_DR_SHARED", REPO.parent / "shared"))
DATA = SHARED / "data"
MODELS = SHARED / "models"
MINILM = MODELS / "all-MiniLM-L6-v2"
SPLADE_TINY = MODELS / "splade-tiny"
SAMPLE = REPO / "hf_dr" / "data" / "sample" / "scifact-mini"

# No test uses the network. The Hub and the libraries' own calls home (Gradio's analytics, the
# Hub's telemetry, Sentence Transformers' and datasets' look-ups of a name) are switched off, for
# this process and every process it starts; a name that is not this machine's is refused at once
# as a failed DNS look-up (as where there is no network), so a machine whose network swallows
# packets (a connection that waits for minutes) runs the suite as one without any.
for _var, _value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                     "HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False", "DO_NOT_TRACK": "1"}.items():
    os.environ.setdefault(_var, _value)
_LOCAL_NAMES = {None, "", "localhost", "127.0.0.1", "::1", "0.0.0.0", "::", socket.gethostname()}
_getaddrinfo = socket.getaddrinfo


def _local_only_getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if name in _LOCAL_NAMES or (isinstance(name, str) and name.startswith("127.")):
        return _getaddrinfo(host, *args, **kwargs)
    raise socket.gaierror(socket.EAI_NONAME, f"the tests use no network: {name!r} was not looked up")


socket.getaddrinfo = _local_only_getaddrinfo

# the Arrow cache of BEIR files (hf_dr.data.beir.cache_root) of a test session: a temporary folder,
# never the user's datasets cache (the property tests read hundreds of generated corpora)
if "HF_DR_DATA_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["HF_DR_DATA_CACHE"] = tempfile.mkdtemp(prefix="hf-dr-test-data-cache-")
    atexit.register(shutil.rmtree, os.environ["HF_DR_DATA_CACHE"], True)


def need(path: Path) -> Path:
    """Skip (with the reason) when the shared real data / weights are not beside the repo."""
    if not path.exists():
        pytest.skip(f"{path} not present (real data/weights live in ../shared)")
    return path


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory):
    """A real WordPiece tokenizer (the bert-base-uncased vocabulary of the sample models when
    present, else a small one trained on the bundled sample)."""
    from transformers import AutoTokenizer, BertTokenizerFast

    if SPLADE_TINY.exists():
        return AutoTokenizer.from_pretrained(SPLADE_TINY)
    from tokenizers import BertWordPieceTokenizer

    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train([str(SAMPLE / "corpus.jsonl")], vocab_size=2000)
    d = tmp_path_factory.mktemp("tok")
    tok.save_model(str(d))
    return BertTokenizerFast(str(d / "vocab.txt"))


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, tiny_tokenizer):
    """A tiny random BertForMaskedLM (2 layers, hidden 32) saved with its tokenizer."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    model = BertForMaskedLM(cfg)
    d = tmp_path_factory.mktemp("tiny_bert")
    model.save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


def run_without_hf_dr(script: str, cwd: Path, timeout: int = 180):
    """Run ``script`` in a fresh Python process in which ``hf_dr`` cannot be imported — what a
    Hub user who never installed this package sees. The editable install's import hook and the
    repository root are removed from the import system before the script runs (the venv may live
    inside the repository, so site-packages itself is kept), and the prelude asserts that
    ``import hf_dr`` fails."""
    import subprocess
    import sys

    prelude = f"""
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not str(getattr(f, '__module__', '')).startswith('__editable__')]
sys.path[:] = [p for p in sys.path if p not in ('', {str(REPO)!r})]
try:
    import hf_dr
except ImportError:
    pass
else:
    raise SystemExit('hf_dr is importable: ' + str(hf_dr.__file__))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = str(Path(cwd) / "hf_modules")
    return subprocess.run([sys.executable, "-c", prelude + script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


# The fast run and the full run: `python -m pytest` leaves out every test that carries one of these
# markers (declared in pyproject.toml); `python -m pytest --full` (what .ci/run runs) keeps them all.
# An explicit `-m EXPR` selects as pytest always does.
FULL_ONLY = ("shared", "pipeline", "cli", "spawn", "browser", "qdrant", "slow")


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help="run every test, including those marked " + ", ".join(FULL_ONLY))


def pytest_collection_modifyitems(config, items):
    if config.getoption("--full") or config.getoption("markexpr"):
        return
    keep, drop = [], []
    for item in items:
        (drop if any(item.get_closest_marker(m) for m in FULL_ONLY) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The test order's seed, printed last even under ``-q`` (which hides pytest-randomly's header):
    a failure that depends on the order is reproduced with ``-p randomly --randomly-seed=SEED``."""
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int) and config.pluginmanager.hasplugin("randomly"):
        terminalreporter.write_line(f"test order: -p randomly --randomly-seed={seed}")
