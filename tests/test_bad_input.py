"""Every bad input is one clear error: exit status 2, a message naming the file,
line and value, no traceback, found before the expensive work; malformed BEIR files are a
BeirFormatError naming the file and nothing else (property tests); and quiet output."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest

from hf_dr.cli import main
from hf_dr.data import BeirFormatError, load_beir

from .conftest import SAMPLE

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

QRELS_HEAD = "query-id\tcorpus-id\tscore\n"


def beir(d: Path, corpus: str | bytes | None = None, queries: str | bytes | None = None,
         qrels: str | bytes | None = None) -> Path:
    """A tiny BEIR folder (2 documents, 1 query, 1 judgment); any file replaced by the given text / bytes."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "qrels").mkdir(exist_ok=True)
    for path, default, given_ in ((d / "corpus.jsonl", '{"_id": "d1", "title": "T", "text": "x y"}\n'
                                   '{"_id": "d2", "text": "y z"}\n', corpus),
                                  (d / "queries.jsonl", '{"_id": "q1", "text": "x"}\n', queries),
                                  (d / "qrels" / "test.tsv", QRELS_HEAD + "q1\td1\t1\n", qrels)):
        value = default if given_ is None else given_
        (path.write_bytes if isinstance(value, bytes) else path.write_text)(value)
    return d


@pytest.fixture(scope="module")
def headless_dir(tmp_path_factory):
    """A tiny random BertModel (no MLM head) saved like all-MiniLM-L6-v2: config + safetensors."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32)
    d = tmp_path_factory.mktemp("headless")
    BertModel(cfg).save_pretrained(d)
    return d


def _hub_offline(*args, **kwargs):
    from huggingface_hub.errors import OfflineModeIsEnabled

    raise OfflineModeIsEnabled("Cannot reach https://huggingface.co: offline mode is enabled.")


def _repo_not_found(*args, **kwargs):
    from huggingface_hub.errors import RepositoryNotFoundError

    e = RepositoryNotFoundError.__new__(RepositoryNotFoundError)
    Exception.__init__(e, "404 Client Error. Repository Not Found for url: https://huggingface.co/nope/model")
    raise e


def _dataset_not_found(*args, **kwargs):
    from datasets.exceptions import DatasetNotFoundError

    raise DatasetNotFoundError("Dataset 'nope/scifact' doesn't exist on the Hub or cannot be accessed.")


def _case(name):
    """Build (argv, expected message parts) for one case in ``tmp`` (the cwd)."""
    ev = ["evaluate", "--data", str(SAMPLE)]
    cases = {
        # --retriever sparse on a checkpoint without an MLM head (all-MiniLM-L6-v2 is a BertModel)
        "sparse-without-mlm-head": lambda t, h: (ev + ["--retriever", "sparse", "--model", str(h)],
                                                 [str(h), "no masked-LM head", "BertModel"]),
        "qrels-fractional-grade": lambda t, h: (["evaluate", "--data", str(beir(t / "b", qrels=QRELS_HEAD + "q1\td1\t0.5\n"))],
                                                ["test.tsv:2", "'0.5'", "not an integer"]),
        "qrels-inf-grade": lambda t, h: (["evaluate", "--data",
                                          str(beir(t / "b", qrels=QRELS_HEAD + "q1\td1\t1\nq1\td2\tinf\n"))],
                                         ["test.tsv:3", "'inf'"]),
        "qrels-nan-grade": lambda t, h: (["evaluate", "--data", str(beir(t / "b", qrels=QRELS_HEAD + "q1\td1\tnan\n"))],
                                         ["test.tsv:2", "'nan'"]),
        "corpus-not-utf8": lambda t, h: (["evaluate", "--data", str(beir(t / "b", corpus=b'{"_id": "d1", "text": "x"}\n'
                                                                                    b'{"_id": "d2", "text": "caf\xe9"}\n'))],
                                         ["corpus.jsonl:2", "not UTF-8", "0xe9"]),
        "top-k-0": lambda t, h: (ev + ["--top-k", "0"], ["--top-k", "got 0"]),
        "max-queries-0": lambda t, h: (ev + ["--max-queries", "0"], ["--max-queries", "got 0"]),
        "batch-size-0": lambda t, h: (ev + ["--batch-size", "0"], ["--batch-size", "got 0"]),
        "batch-size-negative": lambda t, h: (ev + ["--batch-size", "-3"], ["--batch-size", "got -3"]),
        "max-length-0": lambda t, h: (ev + ["--max-length", "0"], ["--max-length", "got 0"]),
        "top-k-not-a-number": lambda t, h: (ev + ["--top-k", "ten"], ["--top-k", "'ten'"]),
        # a typo in a local path is not sent to the Hub
        "data-typo-first-component-exists": lambda t, h: ((t / "data").mkdir() or ["evaluate", "--data", "data/scifcat"],
                                                          ["data/scifcat", "no such BEIR folder"]),
        "data-typo-dot-path": lambda t, h: (["evaluate", "--data", "./nope/scifact"], ["./nope/scifact", "no such BEIR folder"]),
        "data-hub-offline": lambda t, h: (["evaluate", "--data", "nope/scifact"],
                                          ["'nope/scifact'", "cannot be loaded", "not in the local cache"]),
        "data-hub-not-found": lambda t, h: (["evaluate", "--data", "nope/scifact"],
                                            ["'nope/scifact'", "no such dataset on the Hub"]),
        "model-without-weights": lambda t, h: ((t / "m").mkdir()
                                               or (t / "m" / "config.json").write_text('{"model_type": "bert"}') and
                                               ["evaluate", "--data", str(t / "missing-data"), "--retriever", "dense",
                                                "--model", str(t / "m")],
                                               [str(t / "m"), "has no weights", "model.safetensors"]),
        "model-no-such-folder": lambda t, h: (ev + ["--retriever", "dense", "--model", "./nomodel"],
                                              ["./nomodel", "no such model folder"]),
        "model-typo-first-component-exists": lambda t, h: ((t / "runs").mkdir()
                                                            or ev + ["--retriever", "dense", "--model", "runs/modl"],
                                                           ["runs/modl", "no such model folder"]),
        "model-hub-offline": lambda t, h: (ev + ["--retriever", "dense", "--model", "nope/model"],
                                           ["'nope/model'", "not in the local cache"]),
        "model-hub-not-found": lambda t, h: (ev + ["--retriever", "dense", "--model", "nope/model"],
                                             ["'nope/model'", "no such model on the Hub"]),
        "unknown-stemmer": lambda t, h: (ev + ["--bm25-stemmer", "klingon"],
                                         ["--bm25-stemmer", "'klingon'", "english", "porter"]),
        "unknown-stopwords": lambda t, h: (ev + ["--bm25-stopwords", "klingon"], ["--bm25-stopwords", "'klingon'"]),
        # checked before the data is read: the (missing) data folder is not what is reported
        "output-unwritable": lambda t, h: ((t / "afile").write_text("x") and
                                           ["evaluate", "--data", str(t / "missing-data"), "--output", str(t / "afile" / "out")],
                                           ["cannot write", str(t / "afile" / "out")]),
        "output-is-a-file": lambda t, h: ((t / "afile").write_text("x") and ev + ["--output", str(t / "afile")],
                                          [str(t / "afile"), "not a folder"]),
        "unknown-metric": lambda t, h: (ev + ["--metrics", "ndcg@ten"], ["'ndcg@ten'", "unknown metric"]),
    }
    return cases[name]


CASES = ["sparse-without-mlm-head", "qrels-fractional-grade", "qrels-inf-grade", "qrels-nan-grade", "corpus-not-utf8",
         "top-k-0", "max-queries-0", "batch-size-0", "batch-size-negative", "max-length-0", "top-k-not-a-number",
         "data-typo-first-component-exists", "data-typo-dot-path", "data-hub-offline", "data-hub-not-found",
         "model-without-weights", "model-no-such-folder", "model-typo-first-component-exists", "model-hub-offline",
         "model-hub-not-found", "unknown-stemmer", "unknown-stopwords", "output-unwritable", "output-is-a-file",
         "unknown-metric"]


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_exit_2_and_one_message(name, tmp_path, monkeypatch, capsys, headless_dir):
    monkeypatch.chdir(tmp_path)
    import datasets
    import huggingface_hub

    # the Hub is never contacted: offline / not found are simulated where a case needs them
    fake = {"data-hub-offline": _hub_offline, "data-hub-not-found": _dataset_not_found,
            "model-hub-offline": _hub_offline, "model-hub-not-found": _repo_not_found}.get(name)

    def no_network(*a, **k):
        raise AssertionError(f"{name}: contacted the Hub")

    # the answer of a Hub that is reached (not found) is told apart from offline mode, which the
    # test session sets (tests/conftest.py): here the simulated Hub alone decides
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", fake if name.startswith("data-hub") else no_network)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake if name.startswith("model-hub") else no_network)
    argv, expected = _case(name)(tmp_path, headless_dir)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("hf-dr evaluate: error: "), err
    for part in expected:
        assert part in err, (part, err)


def test_grade_1_0_reads_as_1_and_trec_negative_grades(tmp_path):
    d = beir(tmp_path / "b", qrels=QRELS_HEAD + "q1\td1\t1.0\r\nq1\td2\t-1\r\n")
    assert load_beir(d).qrels == {"q1": {"d1": 1, "d2": -1}}


@pytest.mark.parametrize("qrels, message", [
    ("q1\td1\t1e400\n", "'1e400' is not an integer"),
    ("q1\td1\t99999999999\n", "out of range"),
    ("q1\td1\t1\nq1\td1\t2\n", "judges document 'd1' twice"),
    ("q1\t\t1\n", "corpus-id is empty"),
    ("q 1\td1\t1\n", "whitespace"),
    ("q1\td1\t\u0661\n", "is not an integer"),  # Arabic-Indic digit one: int() would take it
    ("q1\td1\thigh\n", "is not a number"),
])
def test_bad_grades_and_ids(tmp_path, qrels, message):
    d = beir(tmp_path / "b", qrels=QRELS_HEAD + qrels)
    with pytest.raises(BeirFormatError, match="test.tsv:") as e:
        load_beir(d)
    assert message in str(e.value)


@pytest.mark.parametrize("corpus, message", [
    ('{"_id": ["d1"], "text": "x"}\n', "_id must be a string, got list"),
    ('{"_id": null, "text": "x"}\n', "_id must be a string, got NoneType"),
    ('{"_id": true, "text": "x"}\n', "_id must be a string, got bool"),
    ('{"_id": "d1", "text": 3}\n', "text must be a string, got int"),
    ('{"_id": "d1", "text": "x", "title": {"a": 1}}\n', "title must be a string, got dict"),
    ('{"_id": "d\\t1", "text": "x"}\n', "whitespace"),
    ('{"_id": "d1", "text": "\\ud800"}\n', "unpaired surrogate"),
    ('{"_id": 1' + "0" * 5000 + ', "text": "x"}\n', "malformed JSON"),
])
def test_wrong_json_types(tmp_path, corpus, message):
    with pytest.raises(BeirFormatError, match="corpus.jsonl:1") as e:
        load_beir(beir(tmp_path / "b", corpus=corpus))
    assert message in str(e.value)


def test_bom_crlf_and_integer_ids_load(tmp_path):
    d = beir(tmp_path / "b", corpus='\ufeff{"_id": 1, "text": "x", "title": null}\r\n\r\n{"_id": "2", "text": "y"}\r\n',
             qrels="\ufeff" + QRELS_HEAD.replace("\n", "\r\n") + "q1\t1\t1\r\n")
    data = load_beir(d)
    assert data.doc_ids() == ["1", "2"] and data.doc_texts() == ["x", "y"] and data.qrels == {"q1": {"1": 1}}


# ---------------------------------------------------------------- property tests: the BEIR loader
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=8), st.sampled_from(["d1", "d2", "q1", "", " ", "a\tb", "\ufeffd1", "\ud800"]))
_value = st.one_of(_scalar, st.lists(_scalar, max_size=2), st.dictionaries(st.text(max_size=3), _scalar, max_size=2))


_good_id = st.text(alphabet="abcdef0123-_.", min_size=1, max_size=4)


@st.composite
def _json_line(draw, fields):
    """A JSON object line: mostly well-formed, sometimes a field missing or of the wrong type
    (``_id`` as list / dict / null / bool / float, text as a number...), extra fields, ASCII or not."""
    sloppy = draw(st.integers(0, 3)) == 0
    row = {}
    for f in fields:
        if sloppy and draw(st.integers(0, 4)) == 0:
            continue  # missing
        if f == "_id":
            row[f] = draw(_value) if sloppy and draw(st.booleans()) else draw(st.one_of(_good_id, st.integers(0, 99)))
        else:
            row[f] = draw(_value) if sloppy and draw(st.booleans()) else draw(st.text(max_size=12))
    if draw(st.integers(0, 4)) == 0:
        row[draw(st.text(max_size=4))] = draw(_value)
    return json.dumps(row, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")


_garbage = st.one_of(st.binary(max_size=12), st.just(b""), st.just(b"   "), st.just(b"\xff\xfe"), st.just(b"\xc3"),
                     st.just(b"[1, 2]"), st.just(b"null"), st.just(b"{"), st.just(b'"s"'), st.just(b"\xef\xbb\xbf{}"))


def _lines(line_strategy):
    """File bytes: lines (mostly of ``line_strategy``, 1 in 8 garbage: random bytes, invalid UTF-8,
    JSON that is no object, a BOM mid-file) joined by \\n or \\r\\n, maybe a BOM first."""
    line = st.integers(0, 7).flatmap(lambda i: _garbage if i == 0 else line_strategy)
    return st.tuples(st.lists(line, max_size=5), st.sampled_from([b"\n", b"\r\n"]), st.booleans()).map(
        lambda t: (b"\xef\xbb\xbf" if t[2] else b"") + t[1].join(t[0]) + (t[1] if t[0] and t[2] else b""))


_qrels_field = st.one_of(_good_id, _good_id, st.sampled_from(["q1", "d1", "d2", "", " q1", "a b", "a\u00a0b"]),
                        st.text(max_size=6))
_grade = st.one_of(st.integers(-3, 5).map(str), st.integers(-3, 5).map(str),
                   st.sampled_from(["0.5", "1.0", "2.00", "inf", "-inf", "nan", "NaN", "1e3", "1e999", "99999999999999",
                                    "high", "", " 2 ", "\u0661", "1_0", "+1", "0x1"]),
                   st.floats(allow_nan=True).map(repr), st.text(max_size=4))
_qrels_line = st.one_of(
    st.tuples(_qrels_field, _qrels_field, _grade).map(lambda t: "\t".join(t)),
    st.tuples(_qrels_field, _qrels_field, _grade).map(lambda t: "\t".join(t)),
    st.tuples(_qrels_field, st.just("0"), _qrels_field, _grade).map(lambda t: " ".join(t)),  # TREC qrels
    st.lists(_qrels_field, max_size=5).map("\t".join),  # wrong field counts, tabs inside ids
    st.just("query-id\tcorpus-id\tscore"),
).map(lambda s: s.encode("utf-8", "surrogatepass"))


def _check(files: dict[str, bytes]):
    """load_beir on a folder of ``files``: a correct load, or a BeirFormatError naming the file."""
    with tempfile.TemporaryDirectory() as tmp:
        d = beir(Path(tmp) / "b", corpus=files.get("corpus"), queries=files.get("queries"), qrels=files.get("qrels"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                data = load_beir(d)
        except BeirFormatError as e:
            # the file that was given bad content is the one named, with its path
            (kind,) = files
            bad = {"corpus": d / "corpus.jsonl", "queries": d / "queries.jsonl", "qrels": d / "qrels" / "test.tsv"}[kind]
            assert str(e).startswith(str(bad)), str(e)
            return None
        # loaded: every id is a clean string, every text a string, every grade an int
        ids = data.doc_ids()
        assert len(ids) == len(set(ids)) and all(i and not any(c.isspace() for c in i) for i in ids)
        assert all(isinstance(t, str) for t in data.doc_texts())
        assert all(isinstance(q, str) and q for q in data.queries["_id"])
        assert all(type(g) is int for docs in data.qrels.values() for g in docs.values())
        # each non-blank corpus line became one document
        raw = files.get("corpus")
        if raw is not None:
            assert len(ids) == sum(1 for ln in raw.decode("utf-8-sig").split("\n") if ln.strip())
        return data


_settings = settings(max_examples=80, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@_settings
@given(_lines(_json_line(("_id", "title", "text"))))
def test_property_corpus(corpus):
    _check({"corpus": corpus})


@_settings
@given(_lines(_json_line(("_id", "text"))))
def test_property_queries(queries):
    _check({"queries": queries})


@_settings
@given(_lines(_qrels_line))
def test_property_qrels(qrels):
    _check({"qrels": qrels})


# ---------------------------------------------------------------- quiet output
def test_bm25s_debug_lines_only_under_debug_logging(caplog):
    from hf_dr.retrieval import BM25Index

    caplog.set_level(logging.INFO)
    BM25Index(["d1", "d2"], ["alpha beta", "beta gamma"])
    assert not [r for r in caplog.records if r.name.startswith("bm25s")]
    caplog.set_level(logging.DEBUG)
    BM25Index(["d1", "d2"], ["alpha beta", "beta gamma"])
    assert any(r.name.startswith("bm25s") for r in caplog.records)  # -v still shows everything


def test_expected_load_reports_are_silent(tiny_bert_dir, capfd, caplog):
    """An MLM checkpoint loaded as a dense encoder: transformers' report (pooler missing, MLM head
    unused) is expected and is not shown; no warning of ours either."""
    from hf_dr.models import load_encoder

    caplog.set_level(logging.WARNING)
    load_encoder(tiny_bert_dir, kind="dense")
    err = capfd.readouterr().err
    assert "LOAD REPORT" not in err and "Loading weights" not in err, err
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_randomly_initialised_weights_are_one_warning_and_verbose_shows_the_report(tiny_bert_dir, tmp_path, capfd, caplog):
    from safetensors.torch import load_file, save_file

    from hf_dr.models import load_encoder

    d = tmp_path / "broken"
    shutil.copytree(tiny_bert_dir, d)
    state = load_file(str(d / "model.safetensors"))
    del state["bert.encoder.layer.0.attention.self.query.weight"]
    save_file(state, str(d / "model.safetensors"))
    caplog.set_level(logging.WARNING)
    load_encoder(d, kind="dense")
    ours = [r.getMessage() for r in caplog.records if r.name == "hf_dr.models"]
    assert len(ours) == 1 and "1 weight(s) missing" in ours[0] and "encoder.layer.0.attention.self.query.weight" in ours[0]
    assert "LOAD REPORT" not in capfd.readouterr().err
    assert not [r for r in caplog.records if "LOAD REPORT" in r.getMessage()]
    caplog.set_level(logging.DEBUG, logger="hf_dr")
    hf = logging.getLogger("transformers")  # its records reach the root logger (caplog) in some releases only,
    hf.addHandler(caplog.handler)           # and its stderr handler may hold an older capture's stream
    try:
        load_encoder(d, kind="dense")
    finally:
        hf.removeHandler(caplog.handler)
    shown = capfd.readouterr().err + "\n".join(r.getMessage() for r in caplog.records)
    assert "LOAD REPORT" in shown  # -v: transformers' own report


@pytest.mark.parametrize("extra, message", [
    (["--retriever", "hybrid", "--fusion", "dbsf"], "--fusion dbsf is fused by Qdrant: it needs --backend qdrant"),
    (["--retriever", "dense", "--fusion", "rrf"], "--fusion / --hybrid-second go with --retriever hybrid"),
    (["--retriever", "dense", "--approximate"], "go with --backend qdrant"),
    (["--retriever", "hybrid", "--backend", "qdrant", "--sparse-model", "s", "--fusion", "zscore", "--path", "q"],
     "Qdrant fuses with rrf or dbsf, not zscore"),
])
def test_argument_combinations_are_refused_before_anything_is_loaded(extra, message, tmp_path, monkeypatch, capsys,
                                                                     headless_dir):
    """A combination that cannot run is exit 2 before the data is read, a model loaded or the corpus
    encoded: all three are made to fail loudly here."""
    import hf_dr.data
    import hf_dr.factory
    import hf_dr.models

    def boom(*a, **k):
        raise AssertionError("loaded / encoded before the arguments were checked")

    for mod, name in ((hf_dr.data, "load_beir"), (hf_dr.models, "load_encoder"), (hf_dr.models, "check_model"),
                      (hf_dr.factory, "build_retriever")):
        monkeypatch.setattr(mod, name, boom)
    rc = main(["evaluate", "--data", str(SAMPLE), "--model", str(headless_dir)] + extra)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert message in err
