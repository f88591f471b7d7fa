
import pytest

from hf_dr.data import BeirFormatError, load_beir, load_qrels, save_beir

from .conftest import DATA, SAMPLE, need


def write(d, corpus=None, queries=None, qrels=None):
    d.mkdir(parents=True, exist_ok=True)
    (d / "corpus.jsonl").write_text(corpus if corpus is not None else
                                    '{"_id": "d1", "title": "T", "text": "x"}\n{"_id": "d2", "text": "y"}\n')
    (d / "queries.jsonl").write_text(queries if queries is not None else '{"_id": "q1", "text": "query"}\n')
    (d / "qrels").mkdir(exist_ok=True)
    (d / "qrels" / "test.tsv").write_text(qrels if qrels is not None else "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return d


def test_load_sample_and_title_joining():
    data = load_beir(SAMPLE)
    assert len(data.corpus) == 500 and len(data.qrels) == 50
    assert set(data.corpus.column_names) == {"_id", "title", "text"}
    row = data.corpus[0]
    assert data.doc_texts()[0] == (row["title"] + " " + row["text"]).strip()
    assert set(data.split_queries()) == set(data.qrels)


def test_round_trip(tmp_path):
    data = load_beir(SAMPLE)
    save_beir(data, tmp_path / "copy")
    again = load_beir(tmp_path / "copy")
    assert again.corpus.to_list() == data.corpus.to_list()
    assert again.queries.to_list() == data.queries.to_list()
    assert again.qrels == data.qrels


def test_crlf_qrels_and_trec_qrels(tmp_path):
    d = write(tmp_path / "b", qrels="query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq1\td2\t0\r\n")
    assert load_beir(d).qrels == {"q1": {"d1": 1, "d2": 0}}
    (tmp_path / "trec.txt").write_text("q1 0 d1 2\nq1 0 d2 0\n")
    assert load_qrels(tmp_path / "trec.txt") == {"q1": {"d1": 2, "d2": 0}}


@pytest.mark.shared
def test_real_crlf_qrels_parse():
    scifact = need(DATA / "scifact")
    data = load_beir(scifact, split="train")
    assert len(data.qrels) == 809
    assert all("\r" not in d for docs in data.qrels.values() for d in docs)


@pytest.mark.parametrize("kwargs, message", [
    ({"corpus": '{"_id": "d1", "text": "x"}\n{"_id": "d2", "text": \n'}, "corpus.jsonl:2: malformed JSON"),
    ({"corpus": '{"_id": "d1", "title": "no text"}\n'}, "corpus.jsonl:1: missing column(s) ['text']"),
    ({"corpus": '{"_id": "d1", "text": "x"}\n{"_id": "d1", "text": "y"}\n'}, "corpus.jsonl:2: duplicate _id 'd1'"),
    ({"corpus": "\n"}, "corpus is empty"),
    ({"queries": '{"text": "no id"}\n'}, "queries.jsonl:1: missing column(s) ['_id']"),
    ({"qrels": "query-id\tcorpus-id\tscore\nq1\td1\n"}, "test.tsv:2: expected 3 tab-separated fields"),
    ({"qrels": "query-id\tcorpus-id\tscore\nq1\td1\thigh\n"}, "test.tsv:2: score 'high' is not a number"),
])
def test_bad_input_names_file_and_line(tmp_path, kwargs, message):
    d = write(tmp_path / "bad", **kwargs)
    with pytest.raises(BeirFormatError) as e:
        load_beir(d)
    assert message in str(e.value)


def test_unknown_ids_in_qrels_are_counted(tmp_path):
    d = write(tmp_path / "u", qrels="query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tnope\t1\nq9\td2\t1\n")
    with pytest.warns(UserWarning, match="1 judgment.*missing from the corpus and 1 name unknown queries"):
        data = load_beir(d)
    assert data.n_unknown_qrels == 2


def test_not_a_beir_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BeirFormatError, match="corpus.jsonl is missing"):
        load_beir(tmp_path / "empty")
    with pytest.raises(BeirFormatError, match="splits available: \\['test'\\]"):
        load_beir(write(tmp_path / "s"), split="dev")
    with pytest.raises(BeirFormatError, match="no such BEIR folder"):
        load_beir(tmp_path / "missing" / "deeper")


def test_no_self_match_rule_by_name():
    """Self-matches are decided from the data (hf_dr.evaluation.apply_self_match_rule), not the name."""
    import hf_dr.data

    assert not hasattr(load_beir(SAMPLE), "ignore_identical_ids") and not hasattr(hf_dr.data, "SELF_MATCH_DATASETS")


@pytest.mark.parametrize("path, local", [
    ("./nope/scifact", True), ("/abs/scifact", True), ("~/scifact", True), ("a/b/c", True), ("a\\b", True),
    ("hf_dr/scifcat", True),  # first component exists here (the repository root)
    ("BeIR/scifact", False), ("mteb/scifact", False), ("scifact", False), ("a/b c", True), ("a/..b", True),
])
def test_looks_local(path, local, monkeypatch):
    from hf_dr.data import looks_local

    from .conftest import REPO

    monkeypatch.chdir(REPO)
    assert looks_local(path) is local


def test_a_local_looking_path_is_never_sent_to_the_hub(tmp_path, monkeypatch):
    import datasets

    def hub(*a, **k):
        raise AssertionError("contacted the Hub")

    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for path in ("data/scifcat", "./data/scifact", str(tmp_path / "x" / "y")):
        with pytest.raises(BeirFormatError, match=f"{path}: no such BEIR folder"):
            load_beir(path)


def test_whitespace_separated_test_qrels_keep_test_queries_out_of_training(tmp_path):
    """A TREC-style (space-separated) qrels/test.tsv is read by the one qrels parser: its queries
    are held out of the training queries, as with a tab-separated one."""
    import shutil

    from hf_dr.data.beir import load_training_queries

    folder = tmp_path / "mine"
    shutil.copytree(SAMPLE, folder)
    tsv = folder / "qrels" / "test.tsv"
    test_ids = set(load_qrels(tsv))
    tsv.write_text("".join(" ".join(line.split("\t")) for line in tsv.read_text().splitlines(keepends=True)))
    with open(folder / "queries.jsonl", "a") as f:  # two queries without judgments: the training ones
        f.write('{"_id": "own-1", "text": "a training question"}\n{"_id": "own-2", "text": "another one"}\n')
    assert set(load_qrels(tsv)) == test_ids
    _, queries, has_qrels = load_training_queries(folder)
    assert not has_qrels
    assert set(queries) == {"own-1", "own-2"}
    assert not set(queries) & test_ids


def test_an_id_with_any_unicode_whitespace_or_control_character_is_refused(tmp_path):
    """Ids go into TSV qrels and TREC run files, whose fields whitespace separates: every Unicode
    whitespace (NBSP, the line separator, the ideographic space...) and control character is refused,
    naming the file and line; printable non-ASCII ids are kept as they are."""
    from hf_dr.data.beir import BeirFormatError, _check_id

    for c in (" ", "\t", "\n", "\x0b", "\x1f", "\x85", "\xa0", "\u1680", "\u2003", "\u2028", "\u2029",
              "\u202f", "\u3000", "\x00", "\x7f", "\u200b"):
        with pytest.raises(BeirFormatError, match=r"qrels\.tsv:7: query-id .* whitespace or control"):
            _check_id(f"q{c}1", tmp_path / "qrels.tsv", 7, "query-id")
    for ok in ("d1", "doc-é", "文档42", "a/b:c#1", 12):
        assert _check_id(ok, tmp_path / "corpus.jsonl", 1) == str(ok)
