"""Corpus scale: BEIR corpora memory-mapped through ``datasets`` (an Arrow cache keyed by
content), and indexes built once (faiss flat / HNSW / IVF-PQ, the inverted index, BM25), saved
with their manifests, opened memory-mapped and searched exactly as the in-memory builds; a search
with another model, corpus or tokenisation is refused (exit status 2); a second ``hf-dr evaluate
--index`` builds nothing; ``hf-dr label`` and the Space take a saved index."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hf_dr.cli import main
from hf_dr.data import BeirFormatError, load_beir
from hf_dr.data import beir as B
from hf_dr.embeddings import EmbeddingsError, encode_to_folder
from hf_dr.fingerprints import corpus_fingerprint
from hf_dr.retrieval import (BM25Index, BM25Retriever, DenseIndex, DocIds, EncoderRetriever, SavedIndex,
                             SavedIndexError, SparseIndex, save_bm25_index, save_dense_index, save_sparse_index)

from .conftest import SAMPLE


@pytest.fixture(scope="module")
def data():
    return load_beir(SAMPLE, split="test")


@pytest.fixture(scope="module")
def models(tiny_bert_dir):
    from hf_dr.models.dense import DenseEncoder
    from hf_dr.models.splade import SPLADECAI

    return (DenseEncoder.from_pretrained(tiny_bert_dir, normalize=True, max_length=64),
            SPLADECAI.from_backbone(str(tiny_bert_dir), max_doc_length=64))


@pytest.fixture(scope="module")
def folders(models, tmp_path_factory):
    """Embeddings folders: the sample's dense vectors in 3 shards (a saved faiss index adds them block
    by block); sparse vectors of its first 20 documents (a random SPLADE's vectors are nearly dense:
    slow to encode)."""
    d = tmp_path_factory.mktemp("emb")
    dense, sparse = models
    small = d / "small"
    small.mkdir()
    (small / "corpus.jsonl").write_text("\n".join((SAMPLE / "corpus.jsonl").read_text().splitlines()[:20]) + "\n")
    shutil.copy(SAMPLE / "queries.jsonl", small)
    return {"dense": encode_to_folder(dense, SAMPLE, d / "dense", shard_size=200, show_progress_bar=False),
            "sparse": encode_to_folder(sparse, small, d / "sparse", shard_size=8, show_progress_bar=False),
            "small": small}


def _mapped(arr) -> bool:
    """Whether ``arr`` is (a view of) a memory-mapped file."""
    import mmap

    while arr is not None:
        if isinstance(arr, (np.memmap, mmap.mmap)):
            return True
        arr = getattr(arr, "base", None)
    return False


@pytest.fixture
def one_thread():
    """faiss on one thread while a test builds HNSW graphs twice: the two builds are then the same
    graph whatever the machine (a multi-threaded insertion order may differ)."""
    import faiss

    n = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(n)


def _ranked(run):
    """Each query's (doc id, score) list in rank order: equal only when ids, order and scores are."""
    return {q: list(r.items()) for q, r in run.items()}


def _changed_copy(tmp_path: Path, name: str = "changed") -> Path:
    """The sample with one more word in its first document (same ids, another text)."""
    folder = tmp_path / name
    shutil.copytree(SAMPLE, folder)
    lines = (folder / "corpus.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["text"] += " changed"
    lines[0] = json.dumps(row)
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    return folder


# ----------------------------------------------------------------------------- the corpus
def test_corpus_is_memory_mapped_arrow_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DR_DATA_CACHE", str(tmp_path / "cache"))
    writes = []
    real = B._write_arrow
    monkeypatch.setattr(B, "_write_arrow", lambda src, kind, folder: (writes.append(kind), real(src, kind, folder))[1])
    folder = tmp_path / "a"
    shutil.copytree(SAMPLE, folder)
    first = load_beir(folder)
    assert sorted(writes) == ["corpus", "queries"]
    files = [Path(f["filename"]) for f in first.corpus.cache_files]
    assert len(files) == 1 and files[0].is_file() and (tmp_path / "cache") in files[0].parents
    assert type(first.corpus.data).__name__ == "MemoryMappedTable"  # on disk, not in memory
    assert len(first.corpus) == 500 and first.corpus[3]["_id"] == first.doc_ids()[3]
    # the fingerprint of the cache is the one embeddings folders and saved indexes record
    assert first.corpus_fingerprint() == corpus_fingerprint(zip(first.doc_ids(), first.doc_texts()))
    # the same content (in another folder too): read from the cache, nothing converted again
    writes.clear()
    shutil.copytree(folder, tmp_path / "b")
    again = load_beir(tmp_path / "b")
    assert writes == [] and again.corpus.cache_files == first.corpus.cache_files
    assert again.doc_ids() == first.doc_ids() and again.split_queries() == first.split_queries()
    assert again.qrels == first.qrels
    # a changed file has another key: a new entry
    changed = load_beir(_changed_copy(tmp_path))
    assert writes == ["corpus"] and changed.corpus.cache_files != first.corpus.cache_files
    assert changed.corpus[0]["text"].endswith(" changed")
    assert changed.corpus_fingerprint() != first.corpus_fingerprint()
    # a damaged entry is converted again (replaced, not written over: ``first`` maps the old file)
    ids = first.doc_ids()
    files[0].unlink()
    files[0].write_bytes(b"not arrow")
    writes.clear()
    assert load_beir(folder).doc_ids() == ids and writes == ["corpus"]
    # a replaced corpus (a subset) is fingerprinted again, never with the whole corpus's fingerprint
    sub = load_beir(folder)
    sub.corpus = sub.corpus.select(range(10))
    assert sub.corpus_fingerprint() == corpus_fingerprint(zip(sub.doc_ids(), sub.doc_texts()))
    assert sub.rows_of([sub.doc_ids()[4], "nope"]) == [4, None]


def test_bad_corpus_errors_are_never_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DR_DATA_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "bad"
    shutil.copytree(SAMPLE, folder)
    with open(folder / "corpus.jsonl", "a") as f:
        f.write('{"_id": "103007", "text": "a duplicate"}\n')
    for _ in range(2):  # the same error, file and line, every time
        with pytest.raises(BeirFormatError, match=r"corpus.jsonl:501: duplicate _id '103007'"):
            load_beir(folder)
    assert not list((tmp_path / "cache").rglob("meta.json"))


# ----------------------------------------------------------------------------- saved = built
@pytest.mark.parametrize("index_type, opts", [("flat", {}), ("hnsw", {"hnsw_m": 8}),
                                              ("ivfpq", {"nlist": 8, "pq_m": 4, "nprobe": 4})])
def test_saved_faiss_index_searches_as_the_in_memory_build(index_type, opts, data, models, folders, tmp_path,
                                                           monkeypatch, one_thread):
    import faiss

    dense = models[0]
    m = save_dense_index(folders["dense"], tmp_path / "idx", index_type=index_type, show_progress_bar=False, **opts)
    assert m["backend"] == "faiss" and m["index_type"] == index_type and m["n_docs"] == 500
    assert m["model_fingerprint"] == folders["dense"].manifest["model_fingerprint"]
    flags = []
    real = faiss.read_index
    monkeypatch.setattr(faiss, "read_index", lambda path, f=0: (flags.append(f), real(path, f))[1])
    saved = SavedIndex(tmp_path / "idx").retriever(dense, data)
    # memory-mapped: flat and HNSW in place (their vectors and graph stay in the file), IVF-PQ's lists
    assert flags == [faiss.IO_FLAG_MMAP if index_type == "ivfpq" else faiss.IO_FLAG_MMAP_IFC]
    assert isinstance(saved.doc_ids, DocIds) and saved.doc_ids == data.doc_ids()
    built = EncoderRetriever.from_embeddings(dense, folders["dense"], index_type=index_type, **opts)
    queries = data.split_queries()
    assert _ranked(saved.search(queries, 100)) == _ranked(built.search(queries, 100))


def test_saved_inverted_index_searches_as_the_in_memory_build(data, models, folders, tmp_path):
    sparse = models[1]
    small = load_beir(folders["small"], split=None)
    m = save_sparse_index(folders["sparse"], tmp_path / "idx")
    assert m["backend"] == "inverted" and m["sparse"] is True and m["n_docs"] == 20
    saved = SavedIndex(tmp_path / "idx").retriever(sparse, small)
    assert _mapped(saved.index.postings.data) and _mapped(saved.index.postings.indices)  # not read into memory
    built = EncoderRetriever.from_embeddings(sparse, folders["sparse"])
    queries = dict(list(data.split_queries().items())[:10])
    assert _ranked(saved.search(queries, 10)) == _ranked(built.search(queries, 10))
    with pytest.raises(SavedIndexError, match="holds dense vectors: index them with --backend faiss"):
        save_sparse_index(folders["dense"], tmp_path / "x")
    with pytest.raises(SavedIndexError, match="holds sparse vectors: index them with --backend inverted"):
        save_dense_index(folders["sparse"], tmp_path / "y")
    with pytest.raises(SavedIndexError, match="indexes 20 documents"):
        SavedIndex(tmp_path / "idx").retriever(sparse, data)


def test_saved_bm25_searches_as_the_in_memory_build(data, tmp_path):
    save_bm25_index(data, tmp_path / "idx", show_progress_bar=False)
    saved = SavedIndex(tmp_path / "idx").retriever(data=data)
    assert _mapped(saved.index.retriever.scores["data"])  # bm25s' own load, mmap=True
    built = BM25Retriever.from_data(data)
    queries = data.split_queries()
    assert _ranked(saved.search(queries, 100)) == _ranked(built.search(queries, 100))
    assert np.array_equal(saved.index.score("vitamin D", [0, 5, 9]), built.index.score("vitamin D", [0, 5, 9]))


# ----------------------------------------------------------------------------- the commands
def _metrics(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def test_cli_index_once_then_evaluate_twice_builds_nothing(tiny_bert_dir, tmp_path, capsys, monkeypatch, one_thread):
    import faiss

    emb, hnsw, bm25 = tmp_path / "emb", tmp_path / "hnsw", tmp_path / "bm25"
    assert main(["encode", "--data", str(SAMPLE), "--model", str(tiny_bert_dir), "--output", str(emb),
                 "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(emb), "--backend", "faiss", "--index-type", "hnsw", "--output", str(hnsw),
                 "--no-progress"]) == 0
    assert main(["index", "--data", str(SAMPLE), "--backend", "bm25", "--output", str(bm25), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "faiss hnsw index of 500 documents" in out and "BM25 index of 500 documents" in out
    dense = ["evaluate", "--data", str(SAMPLE), "--retriever", "dense", "--model", str(tiny_bert_dir)]
    # the references: indexes built for one run
    assert main([*dense, "--embeddings", str(emb), "--index-type", "hnsw", "--output", str(tmp_path / "rebuilt")]) == 0
    assert main(["evaluate", "--data", str(SAMPLE), "--output", str(tmp_path / "bm25-built")]) == 0

    # from here on nothing may be built: no faiss index, graph, BM25 or inverted index, no corpus conversion
    def built(*a, **k):
        raise AssertionError("something was built")

    for cls in (DenseIndex, BM25Index, SparseIndex):
        monkeypatch.setattr(cls, "__init__", built)
    for name in ("IndexHNSWFlat", "IndexFlatIP", "IndexIVFPQ"):
        monkeypatch.setattr(faiss, name, built)
    monkeypatch.setattr(B, "_write_arrow", built)
    for i in (1, 2):
        assert main([*dense, "--index", str(hnsw), "--output", str(tmp_path / f"saved{i}")]) == 0
        assert main(["evaluate", "--data", str(SAMPLE), "--index", str(bm25), "--output", str(tmp_path / f"bm25-{i}")]) == 0
    assert main(["evaluate", "--data", str(SAMPLE), "--retriever", "hybrid", "--model", str(tiny_bert_dir),
                 "--index", str(bm25), str(hnsw), "--output", str(tmp_path / "hybrid")]) == 0
    rebuilt, s1, s2 = (_metrics(tmp_path / n) for n in ("rebuilt", "saved1", "saved2"))
    assert s1["metrics"] == s2["metrics"] == rebuilt["metrics"]
    assert (tmp_path / "saved1" / "run.trec").read_text() == (tmp_path / "rebuilt" / "run.trec").read_text()
    assert _metrics(tmp_path / "bm25-1")["metrics"] == _metrics(tmp_path / "bm25-2")["metrics"] == \
        _metrics(tmp_path / "bm25-built")["metrics"]
    assert s1["saved_indexes"] == [str(hnsw)] and s1["saved_index"] == str(hnsw)
    assert s1["index"] == {"index_type": "hnsw", "hnsw_m": 32, "ef_search": 128}


@pytest.mark.pipeline
def test_cli_refuses_what_does_not_match(tiny_bert_dir, tmp_path, capsys):
    import torch
    from transformers import BertForMaskedLM

    emb, idx, bm25 = tmp_path / "emb", tmp_path / "idx", tmp_path / "bm25"
    assert main(["encode", "--data", str(SAMPLE), "--model", str(tiny_bert_dir), "--output", str(emb),
                 "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(emb), "--output", str(idx), "--no-progress"]) == 0  # faiss flat by default
    assert main(["index", "--data", str(SAMPLE), "--output", str(bm25), "--no-progress"]) == 0  # bm25 by default
    assert SavedIndex(idx).manifest["index_type"] == "flat" and SavedIndex(bm25).backend == "bm25"
    other = tmp_path / "other-model"  # the same architecture, one weight changed
    m = BertForMaskedLM.from_pretrained(tiny_bert_dir)
    with torch.no_grad():
        m.bert.embeddings.word_embeddings.weight[5, 0] += 1.0
    m.save_pretrained(other)
    for f in Path(tiny_bert_dir).glob("*"):
        if f.name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(f, other)
    changed = _changed_copy(tmp_path)
    fewer = tmp_path / "fewer"
    shutil.copytree(SAMPLE, fewer)
    (fewer / "corpus.jsonl").write_text("\n".join((SAMPLE / "corpus.jsonl").read_text().splitlines()[:499]) + "\n")
    ev = ["evaluate", "--data", str(SAMPLE), "--retriever", "dense", "--model", str(tiny_bert_dir)]
    capsys.readouterr()  # what building the other model printed
    cases = [
        (["evaluate", "--data", str(SAMPLE), "--retriever", "dense", "--model", str(other), "--index", str(idx)],
         "was built from vectors encoded by another model"),
        ([*ev, "--index", str(idx), "--query-prompt", "query: "], "with the query prompt ''"),
        ([*ev[:2], str(changed), *ev[3:], "--index", str(idx)], "indexes another corpus than"),
        ([*ev[:2], str(fewer), *ev[3:], "--index", str(idx)], "indexes 500 documents"),
        (["evaluate", "--data", str(SAMPLE), "--index", str(bm25), "--bm25-stemmer", "none"],
         "was built with --bm25-stemmer english, this run asks for none"),
        (["evaluate", "--data", str(changed), "--index", str(bm25)], "indexes another corpus than"),
        ([*ev, "--index", str(idx), "--index-type", "hnsw"], "--index-type are fixed when the index is built"),
        ([*ev, "--index", str(bm25)], "is a BM25 index: the dense retriever searches the model's vectors"),
        (["evaluate", "--data", str(SAMPLE), "--index", str(idx)], "the bm25 retriever searches a BM25 index"),
        ([*ev, "--index", str(emb)], "is not an hf-dr index"),
        ([*ev, "--index", str(idx), "--embeddings", str(emb)], "not both"),
        (["evaluate", "--data", str(SAMPLE), "--retriever", "sparse", "--model", str(tiny_bert_dir), "--index", str(idx)],
         "makes sparse vectors"),
        (["index", "--embeddings", str(emb), "--backend", "inverted", "--output", str(tmp_path / "x")],
         "holds dense vectors"),
        (["index", "--embeddings", str(emb), "--backend", "bm25", "--output", str(tmp_path / "x")], "give --data DIR"),
        (["index", "--data", str(SAMPLE), "--backend", "bm25"], "give --output IDX"),
        (["index", "--data", str(SAMPLE), "--output", str(idx)], "is not empty"),
        (["index", "--embeddings", str(emb), "--backend", "faiss", "--output", str(tmp_path / "x"), "--path",
          str(tmp_path / "q")], "go with --backend qdrant"),
        (["adapt", "--data", str(SAMPLE), "--model", str(tiny_bert_dir), "--method", "dodress", "--output",
          str(tmp_path / "x"), "--index", str(idx)], "is not a BM25 index"),
        (["adapt", "--data", str(SAMPLE), "--model", str(tiny_bert_dir), "--method", "dodress", "--output",
          str(tmp_path / "x"), "--index", str(bm25), "--labels", str(tmp_path)], "with --labels nothing is labelled"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and message in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "x").exists()


@pytest.mark.pipeline
def test_label_with_a_saved_bm25_index_labels_as_with_a_built_one(data, models, folders, tmp_path):
    from hf_dr.labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels

    save_bm25_index(data, tmp_path / "bm25", show_progress_bar=False)
    cfg = PseudoLabelConfig(negatives="bm25", max_queries=12, dev_queries=2, k=1, m=2, bm25_top=10)
    kw = dict(reranker="fusion", dense_encoder=models[0], dense_name="tiny", queries=data.split_queries(),
              doc_embeddings=folders["dense"], show_progress_bar=False)
    built = build_pseudo_labels(data, tmp_path / "a", cfg, cache_dir=tmp_path / "ca", **kw)
    saved = build_pseudo_labels(data, tmp_path / "b", cfg, cache_dir=tmp_path / "cb",
                                bm25=SavedIndex(tmp_path / "bm25").bm25_index(data), **kw)
    assert built.train.to_list() == saved.train.to_list() and built.dev.to_list() == saved.dev.to_list()
    other = load_beir(_changed_copy(tmp_path), split="test")
    with pytest.raises(SavedIndexError, match="indexes another corpus"):
        SavedIndex(tmp_path / "bm25").bm25_index(other)
    assert issubclass(SavedIndexError, EmbeddingsError) and issubclass(SavedIndexError, ValueError)


def test_the_space_opens_saved_indexes_instead_of_building(tiny_bert_dir, tmp_path, monkeypatch):
    from hf_dr.models import load_encoder
    from hf_dr.serving import SearchEngine, ServingConfig

    from .test_serving import QUERY, small_beir

    folder = small_beir(tmp_path / "small")
    small = load_beir(folder, split=None)
    save_bm25_index(small, tmp_path / "bm25", show_progress_bar=False)
    emb = encode_to_folder(load_encoder(str(tiny_bert_dir), kind="dense"), folder, tmp_path / "emb",
                           show_progress_bar=False)  # the Space's dense model, as it loads it
    save_dense_index(emb, tmp_path / "flat", show_progress_bar=False)
    with pytest.raises(ValueError, match="saved indexes serve BM25, Dense, SPLADE-CAI"):
        ServingConfig(indexes="small:BERM=x").index_map()
    cfg = ServingConfig(corpus=str(folder), prebuild=None, splade_model=None, dense_model=str(tiny_bert_dir),
                        indexes=f"small:BM25={tmp_path / 'bm25'}; small:Dense={tmp_path / 'flat'}")
    engine = SearchEngine(cfg)

    def built(*a, **k):
        raise AssertionError("the Space built an index")

    monkeypatch.setattr(engine, "_build_bm25", built)
    monkeypatch.setattr(engine, "_build_encoded", built)
    hits = engine.search("small", "BM25", QUERY, top_k=5, wait=60)
    want = BM25Retriever.from_data(small).search({"q": QUERY}, 5)["q"]
    assert [h["doc_id"] for h in hits] == list(want) and hits[0]["text"] == small.doc(hits[0]["doc_id"])["text"]
    assert len(engine.search("small", "Dense", QUERY, top_k=5, wait=60)) == 5
    assert len(engine.search("small", "Hybrid (BM25 + dense)", QUERY, top_k=5, wait=60)) == 5
    with pytest.raises(ValueError, match="names corpora that are not configured"):
        SearchEngine(ServingConfig(corpus=str(folder), prebuild=None, indexes=f"nope:BM25={tmp_path / 'bm25'}"))
    save_bm25_index(small, tmp_path / "bm25-raw", stemmer=None, show_progress_bar=False)
    raw = SearchEngine(ServingConfig(corpus=str(folder), prebuild=None, indexes=f"small:BM25={tmp_path / 'bm25-raw'}"))
    with pytest.raises(SavedIndexError, match="--bm25-stemmer"):  # not the tokenisation of the BM25 it stands for
        raw.search("small", "BM25", QUERY, wait=60)
