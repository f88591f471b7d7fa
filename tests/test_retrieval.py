import importlib

import numpy as np
import pytest
import scipy.sparse as sp

from hf_dr.data import load_beir
from hf_dr.evaluation import remove_self_matches
from hf_dr.retrieval import (BM25Index, DenseIndex, IdList, SparseIndex, fuse, id_sequence, read_trec_run,
                             run_from_scores, write_trec_run)

from .conftest import DATA, SAMPLE, need

sparse_module = importlib.import_module("hf_dr.retrieval.sparse")

DOCS = {"a": "the cat sat on the mat", "b": "dogs chase cats in the park", "c": "quantum chromodynamics of quarks",
        "d": "a cat and a cat and a cat"}


def test_bm25_ranks_term_frequency_and_handles_no_overlap():
    idx = BM25Index(list(DOCS), list(DOCS.values()), stemmer=None)
    run = idx.search({"q1": "cat", "q2": "quarks", "q3": "zebra xylophone"}, top_k=10)
    assert list(run["q1"])[:2] == ["d", "a"]  # tf = 3 beats tf = 1 (bm25s scores real term frequency)
    assert list(run["q2"]) == ["c"]  # documents without the term are not hits
    assert run["q3"] == {}
    stemmed = BM25Index(list(DOCS), list(DOCS.values()), stemmer="english").search({"q": "cats"}, top_k=10)
    assert set(stemmed["q"]) == {"a", "b", "d"}


def test_id_list_takes_the_ids_at_rows_and_runs_are_made_from_any_id_sequence():
    ids = id_sequence(range(5))  # made str, as every index keeps them
    assert isinstance(ids, IdList) and ids == ["0", "1", "2", "3", "4"]
    assert ids.take(np.array([4, 0, 4])) == ["4", "0", "4"] and ids.take([]) == []
    ids.append("5")  # grown after a take: the gather follows
    assert ids.take([5]) == ["5"]
    assert id_sequence(ids) is ids
    scores = np.array([[0.9, 0.5, 0.1], [0.7, 0.0, 0.0]], np.float32)
    rows = np.array([[2, 0, 1], [3, -1, -1]])  # -1: no hit
    for doc_ids in (("a", "b", "c", "d"), ["a", "b", "c", "d"], IdList("abcd")):
        run = run_from_scores(scores, rows, ["q1", "q2"], doc_ids)
        assert run == {"q1": {"c": pytest.approx(0.9), "a": 0.5, "b": pytest.approx(0.1)}, "q2": {"d": pytest.approx(0.7)}}
        assert list(run["q1"]) == ["c", "a", "b"] and all(type(v) is float for v in run["q1"].values())


def test_bm25_known_top1_on_sample():
    data = load_beir(SAMPLE)
    run = BM25Index.from_beir(data).search(data.split_queries(), top_k=10)
    hits = sum(next(iter(run[q])) in data.qrels[q] for q in data.qrels)
    assert hits >= 30  # BM25 puts a relevant abstract first for most SciFact claims
    q = "1"
    assert data.split_queries()[q].startswith("0-dimensional biomaterials")
    assert next(iter(run[q])) in data.qrels[q] or len(run[q]) == 10


def test_dense_index_exact_and_approximate():
    rng = np.random.default_rng(0)
    D = rng.normal(size=(300, 16)).astype(np.float32)
    Q = rng.normal(size=(5, 16)).astype(np.float32)
    ids = [f"d{i}" for i in range(300)]
    run = DenseIndex(D, ids).search(Q, [f"q{i}" for i in range(5)], top_k=7)
    for i in range(5):
        scores = D @ Q[i]
        want = [ids[j] for j in np.argsort(-scores)[:7]]
        assert list(run[f"q{i}"]) == want
        assert np.allclose(list(run[f"q{i}"].values()), np.sort(scores)[::-1][:7], atol=1e-5)
    hnsw = DenseIndex(D, ids, index_type="hnsw").search(Q, [f"q{i}" for i in range(5)], top_k=7)
    overlap = np.mean([len(set(hnsw[q]) & set(run[q])) / 7 for q in run])
    assert overlap > 0.8
    ivf = DenseIndex(D, ids, index_type="ivfpq", nlist=4, pq_m=4, nprobe=4)
    assert len(ivf.search(Q, [f"q{i}" for i in range(5)], top_k=7)["q0"]) == 7
    with pytest.raises(ValueError, match="query embeddings must be"):
        DenseIndex(D, ids).search(Q[:, :3], ["q"] * 5)
    with pytest.raises(ValueError, match="unknown index_type"):
        DenseIndex(D, ids, index_type="lsh")


@pytest.mark.parametrize("empty", [(3,), (8,), (0,), (0, 8), tuple(range(9))],
                         ids=["middle", "last", "first", "first+last", "all"])  # queries without a term
def test_sparse_index_equals_the_sparse_product_bit_for_bit(empty):
    D = sp.random(500, 1000, density=0.01, random_state=1, format="csr", dtype=np.float32)
    Q = sp.random(9, 1000, density=0.02, random_state=2, format="csr", dtype=np.float32)
    Q = (sp.diags([0.0 if i in empty else 1.0 for i in range(9)]) @ Q).tocsr()  # no term: an empty ranking
    Q.eliminate_zeros()
    ids = [str(i) for i in range(500)]
    idx = SparseIndex(D, ids)
    run = idx.search(Q, [f"q{i}" for i in range(9)], top_k=20)
    full = (Q.astype(np.float32) @ D.T.tocsr()).toarray()  # float32, each document's terms added in order
    assert full.dtype == np.float32
    assert set(run) == {f"q{i}" for i in range(9)}
    assert all(run[f"q{i}"] == {} for i in empty)
    for i in range(9):
        nz = np.flatnonzero(full[i] > 0)
        want = nz[np.lexsort((nz, -full[i][nz]))][:20]  # score, then corpus order
        assert [int(d) for d in run[f"q{i}"]] == want.tolist()
        assert list(run[f"q{i}"].values()) == [float(v) for v in full[i][want]]  # the same bits
    assert (idx.doc_vectors([4, 2]) != D[[4, 2]]).nnz == 0


@pytest.mark.parametrize("postings", ["float32", "float64", "scipy-public-product"])
@pytest.mark.parametrize("top_k", [0, 1, 7, 60, 1000])
def test_sparse_index_ties_and_non_positive_scores_in_both_searches(top_k, postings, monkeypatch):
    """Scores from a few values, so that many documents tie (at the k-th score too), weights of either
    sign (negative and zero scores are not hits), k above the hits: the top-k by score, then corpus
    order, whether a query is scored alone (few postings) or in a group (postings for many documents),
    over postings multiplied as they are (SciPy's adding pass alone, or its public product where SciPy
    lacks it) or (other types) through a copy of the rows used, in float32."""
    if postings == "scipy-public-product":
        monkeypatch.setattr(sparse_module, "_csr_matmat", None)
    rng = np.random.default_rng(5)
    n, vocab = 400, 30
    dense = rng.choice([0.0, 0.5, 1.0, 2.0], size=(n, vocab), p=[0.7, 0.1, 0.1, 0.1]).astype(np.float32)
    dense[:, :5] *= rng.random((n, 5)) < 0.05  # rare terms: a query of these alone is scored on its own
    D = sp.csr_matrix(dense)
    rows = [{0: 1.0}, {1: 2.0, 3: -1.0}, {2: 0.5, 4: 0.5, 0: 1.0}, {5: 1.0, 6: 2.0, 7: -1.0, 8: 1.0},
            {9: 1.0, 10: 1.0, 11: 1.0, 12: 1.0, 13: 0.5}, {14: -1.0}, {15: 1.0, 16: -1.0}, {}]
    Q = sp.lil_matrix((len(rows), vocab), dtype=np.float32)
    for i, row in enumerate(rows):
        for t, w in row.items():
            Q[i, t] = w
    Q = Q.tocsr()
    ids = [f"d{i}" for i in range(n)]
    idx = SparseIndex(D, ids)
    if postings == "float64":  # the values are float32's too: the same scores expected
        P = idx.postings
        idx = SparseIndex.from_postings(sp.csr_matrix((P.data.astype(np.float64), P.indices, P.indptr),
                                                      shape=P.shape), ids)
    run = idx.search(Q, [f"q{i}" for i in range(len(rows))], top_k=top_k)
    full = (Q @ D.T.tocsr()).toarray()
    for i in range(len(rows)):
        nz = np.flatnonzero(full[i] > 0)
        want = nz[np.lexsort((nz, -full[i][nz]))][:top_k]
        assert list(run[f"q{i}"]) == [ids[d] for d in want]
        assert list(run[f"q{i}"].values()) == [float(v) for v in full[i][want]]


def test_sparse_search_memory_is_an_accumulator_and_the_postings_touched():
    """A million documents, a query on two rare terms: beside its one float32 accumulator per
    document (4 MB), the search allocates what the 6,000 postings it touches need, no copy of the
    index's arrays (16 MB) and nothing else per document."""
    import tracemalloc

    n, vocab = 1_000_000, 1000
    rng = np.random.default_rng(0)
    docs = np.sort(rng.choice(n, size=2_000_000))  # term t: the documents of 2,000 random draws each
    indptr = np.arange(0, 2_000_001, 2000, dtype=np.int64)
    for t in range(vocab):
        docs[indptr[t]:indptr[t + 1]] = np.sort(rng.choice(n, size=2000, replace=False))
    P = sp.csr_matrix((rng.random(2_000_000, dtype=np.float32), docs.astype(np.int32), indptr),
                      shape=(vocab, n), copy=False)
    idx = SparseIndex.from_postings(P, np.arange(n).astype(str))
    Q = sp.csr_matrix((np.ones(3, np.float32), np.array([7, 9, 7]), np.array([0, 3])), shape=(1, vocab))
    tracemalloc.start()
    run = idx.search(Q, ["q"], top_k=10, canonical=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(run["q"]) == 10
    assert peak < 4 * n + 400_000, peak  # the accumulator + 6,000 postings touched, ~40 bytes each


def test_sparse_group_product_copies_nothing_of_the_index():
    """Queries touching postings for more than a tenth of the documents (scored in a group by SciPy's
    product): the index's arrays (16 MB) are multiplied as they are, not converted or copied."""
    import tracemalloc

    n, vocab, per_term = 200_000, 100, 20_000
    rng = np.random.default_rng(1)
    docs = np.concatenate([np.sort(rng.choice(n, size=per_term, replace=False)) for _ in range(vocab)])
    P = sp.csr_matrix((rng.random(vocab * per_term, dtype=np.float32), docs.astype(np.int32),
                       np.arange(0, vocab * per_term + 1, per_term, dtype=np.int32)), shape=(vocab, n), copy=False)
    idx = SparseIndex.from_postings(P, np.arange(n).astype(str))
    Q = sp.csr_matrix((np.ones(6, np.float32), np.array([3, 50, 97, 1, 2, 3]), np.array([0, 3, 6])), shape=(2, vocab))
    tracemalloc.start()
    run = idx.search(Q, ["a", "b"], top_k=10)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [len(r) for r in run.values()] == [10, 10]
    assert peak < 4_000_000, peak  # the group's scores (<= 120,000) and their ranking


def test_bm25_scores_are_bm25s_own_to_the_bit():
    data = load_beir(SAMPLE)
    idx = BM25Index.from_beir(data)
    queries = {q: t for q, t in list(data.split_queries().items())[:20]}
    queries["rep"] = "cell cell cells protein cell"  # repeated terms: added once per occurrence, in order
    run = idx.search(queries, top_k=1000)
    row = {d: i for i, d in enumerate(data.doc_ids())}
    for q, text in queries.items():
        want = idx.score(text)  # bm25s' get_scores over every document
        assert len(run[q]) == int((want > 0).sum())
        assert all(s == float(want[row[d]]) for d, s in run[q].items())


def test_sparse_index_never_densifies(monkeypatch):
    """A search over many documents makes nothing dense: toarray / todense are never called."""
    rng = np.random.default_rng(3)
    n, nnz_row = 200_000, 6
    D = sp.csr_matrix((rng.random(n * nnz_row, dtype=np.float32), rng.integers(0, 3000, n * nnz_row),
                       np.arange(0, n * nnz_row + 1, nnz_row)), shape=(n, 3000))
    D.sum_duplicates()
    Q = sp.random(4, 3000, density=0.01, random_state=4, format="csr", dtype=np.float32)
    idx = SparseIndex(D, [str(i) for i in range(D.shape[0])])

    def boom(*a, **k):
        raise AssertionError("densified")

    for cls in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix):
        monkeypatch.setattr(cls, "toarray", boom)
        monkeypatch.setattr(cls, "todense", boom)
    run = idx.search(Q, ["a", "b", "c", "d"], top_k=5)
    assert all(len(r) == 5 for r in run.values())


def test_fusion_methods():
    a = {"q": {"x": 10.0, "y": 5.0, "z": 0.0}}
    b = {"q": {"y": 1.0, "w": 0.5}}
    s = fuse([a, b], method="sum", missing="zero")["q"]
    assert s == {"x": 10.0, "y": 6.0, "z": 0.0, "w": 0.5}
    mm = fuse([a, b], method="minmax", missing="zero")["q"]
    assert mm["y"] == pytest.approx(0.5 + 1.0) and mm["x"] == pytest.approx(1.0) and mm["w"] == pytest.approx(0.0)
    z = fuse([a, b], method="zscore", weights=[1.0, 0.0])["q"]
    va = np.array([10.0, 5.0, 0.0])
    assert z["x"] == pytest.approx((10 - va.mean()) / va.std())
    rrf = fuse([a, b], method="rrf", rrf_k=60)["q"]
    assert rrf["y"] == pytest.approx(1 / 62 + 1 / 61)
    assert max(rrf, key=rrf.get) == "y"
    with pytest.raises(ValueError):
        fuse([a, b], weights=[1.0])


def test_trec_round_trip_and_self_matches(tmp_path):
    run = {"q1": {"d1": 1.5, "q1": 9.0, "d2": 0.25}, "q2": {"d3": -1.0}}
    p = write_trec_run(run, tmp_path / "run.trec", tag="t")
    lines = p.read_text().splitlines()
    assert lines[0] == "q1 Q0 q1 1 9.000000 t"
    assert read_trec_run(p) == run
    assert remove_self_matches(run)["q1"] == {"d1": 1.5, "d2": 0.25}
    (tmp_path / "bad.trec").write_text("q1 Q0 d1 1\n")
    with pytest.raises(ValueError, match="bad.trec:1"):
        read_trec_run(tmp_path / "bad.trec")


@pytest.mark.shared
def test_self_match_removal_changes_arguana_scores():
    from hf_dr.evaluation import evaluate_run

    with pytest.warns(UserWarning):
        data = load_beir(need(DATA / "arguana"))
    qids = list(data.qrels)[:200]
    queries = {q: data.split_queries()[q] for q in qids}
    run = BM25Index.from_beir(data).search(queries, top_k=100)
    qrels = {q: data.qrels[q] for q in qids}
    kept = evaluate_run(qrels, run).aggregate["ndcg@10"]
    removed = evaluate_run(qrels, run, ignore_identical_ids=True).aggregate["ndcg@10"]
    assert sum(q in run[q] for q in qids) > 150  # the query itself is usually BM25's top hit
    assert removed > kept + 0.05


def test_bm25_unknown_stemmer_or_stopwords_is_a_clear_error():
    from hf_dr.retrieval import BM25Index

    with pytest.raises(ValueError, match="unknown stemmer 'klingon'.*english"):
        BM25Index(["d1"], ["text"], stemmer="klingon")
    with pytest.raises(ValueError, match="unknown stopwords 'klingon'"):
        BM25Index(["d1"], ["text"], stopwords="klingon")
    assert len(BM25Index(["d1"], ["text"], stemmer="none", stopwords="none")) == 1


def test_bm25_corpus_without_terms_is_a_clear_error():
    from hf_dr.retrieval import BM25Index

    with pytest.raises(ValueError, match="none of the 2 documents has a term to index"):
        BM25Index(["d1", "d2"], ["a b", "the of"])
