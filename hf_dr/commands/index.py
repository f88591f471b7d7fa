"""``hf-dr index``: build an index once, search it many times.

In this process, saved to a folder (``--output IDX``; ``hf-dr evaluate / label / adapt --index IDX``
and the Space open it memory-mapped, nothing rebuilt):

* ``--embeddings EMB --backend faiss --index-type flat|hnsw|ivfpq``: a faiss index of a dense
  embeddings folder (``hf-dr encode``), written with faiss' own writer;
* ``--embeddings EMB --backend inverted``: the inverted index of a sparse (SPLADE) embeddings folder;
* ``--embeddings EMB --backend seismic`` (or ``--data DIR --model SPLADE``, encoded first): Seismic's
  approximate index of SPLADE vectors, for millions of documents (``pip install "hf-dr[seismic]"``);
* ``--data DIR --backend bm25``: BM25 (bm25s' own save, memory-mapped when opened).

Each folder records what it was made from (the model and its fingerprint, prompts and max length
of the embeddings; the corpus fingerprint; the parameters): a search with another model, corpus
or BM25 tokenisation is refused.

Qdrant (``--backend qdrant``), the backend past one machine: upload embeddings folders into a
collection. One collection holds a corpus's dense and/or sparse vectors (give one folder of each for
a hybrid), the document ids as payload, and the models / max lengths in a manifest point. Point
ids are row numbers: running the command again after a crash resumes the upload, and running it
on the same data duplicates nothing; a collection built from another model, max length or corpus
is refused. ``--url`` talks to a server or cluster, ``--path`` to qdrant-client's local store
(tests and small corpora), ``--edge`` to Qdrant's engine embedded in this process (qdrant-edge-py).
(``--backend`` defaults to qdrant when one of those is given.)"""

from __future__ import annotations

from ..cli import (
    non_negative_int,
    positive_float,
    positive_int,
    stemmer_name,
    stopwords_name,
)

BACKENDS = ("faiss", "inverted", "seismic", "bm25", "qdrant")


def add_qdrant_arguments(p) -> None:
    """``--url | --path | --edge`` and ``--collection`` (shared with ``hf-dr evaluate --backend qdrant``)."""
    g = p.add_argument_group("Qdrant (--backend qdrant)")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--url", help="Qdrant server or cluster, e.g. http://localhost:6333 (QDRANT_API_KEY read)")
    where.add_argument("--path", help="qdrant-client local store folder (pure Python: tests, small corpora)")
    where.add_argument("--edge", help="qdrant-edge-py shard folder: Qdrant's engine in this process")
    g.add_argument("--collection", help="collection name (--url / --path)")


def register(sub) -> None:
    p = sub.add_parser("index", help="build a saved index (faiss, inverted, BM25) or upload into Qdrant",
                       description=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--embeddings", nargs="+",
                     help="embeddings folder(s) (hf-dr encode): one for faiss / inverted; for Qdrant one dense "
                          "and/or one sparse, of the same corpus")
    src.add_argument("--data", help="BEIR folder or Hub id (--backend bm25; --backend seismic with --model)")
    p.add_argument("--model", help="--backend seismic --data DIR: the SPLADE model that encodes the corpus first "
                                   "(as hf-dr encode --kind sparse; the encoding is not kept)")
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="faiss (a dense folder), inverted (a sparse folder, exact), seismic (a sparse folder, "
                        "approximate: millions of documents), bm25 (--data), qdrant (--url / --path / --edge). "
                        "Default: qdrant when one of those is given, bm25 with --data, else faiss or inverted by "
                        "the folder")
    p.add_argument("--output", help="the index folder (faiss, inverted, bm25; written whole, must be new or empty)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --output once the new index is complete")
    g = p.add_argument_group("faiss (--backend faiss; docs/retrieval.md: which one when)")
    g.add_argument("--index-type", choices=("flat", "hnsw", "ivfpq"), default="flat",
                   help="flat: exact (default); hnsw / ivfpq: approximate, for millions of documents")
    g.add_argument("--hnsw-m", type=positive_int, default=None,
                   help="HNSW links per node (default 32; Qdrant's default 16)")
    g.add_argument("--ef-search", type=positive_int, default=128, help="HNSW search breadth (saved; evaluate can change it)")
    g.add_argument("--nlist", type=positive_int, default=None, help="IVF cells (default 4*sqrt(n))")
    g.add_argument("--pq-m", type=positive_int, default=16, help="PQ sub-quantisers (must divide the dimension)")
    g.add_argument("--nprobe", type=positive_int, default=32, help="IVF cells visited per query (saved; evaluate can change it)")
    add_seismic_arguments(p)
    b = p.add_argument_group("BM25 (--backend bm25)")
    b.add_argument("--bm25-stemmer", type=stemmer_name, default="english", help="PyStemmer language, or 'none'")
    b.add_argument("--bm25-stopwords", type=stopwords_name, default="en", help="'en' (or de, fr...) or 'none'")
    add_qdrant_arguments(p)
    q = p.add_argument_group("Qdrant upload")
    q.add_argument("--batch-size", type=positive_int, default=256, help="points per upsert")
    q.add_argument("--ef-construct", type=positive_int, default=100)
    q.add_argument("--on-disk", action="store_true", help="vectors and sparse index on disk (memory-mapped)")
    q.add_argument("--shards", type=positive_int, default=1, help="collection shards (cluster)")
    q.add_argument("--replicas", type=positive_int, default=1, help="replication factor (cluster)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def add_seismic_arguments(p, build: bool = True) -> None:
    """Seismic's search options (saved with the index; ``hf-dr evaluate`` may change them) and,
    with ``build``, its build options (docs/retrieval.md, "Seismic")."""
    from ..retrieval.seismic import BUILD_DEFAULTS as B
    from ..retrieval.seismic import SEARCH_DEFAULTS as S

    g = p.add_argument_group("Seismic (--backend seismic; docs/retrieval.md: which sparse index when)")
    g.add_argument("--query-cut", type=positive_int, default=None,
                   help=f"the query's largest terms visited (default {S['query_cut']}" +
                        ("; saved, evaluate can change it)" if build else ", or the saved index's own)"))
    g.add_argument("--heap-factor", type=positive_float, default=None,
                   help=f"a block is read when its summary scores above this x the current k-th score (default "
                        f"{S['heap_factor']}" + ("; saved, evaluate can change it)" if build
                                                 else ", or the index's own)"))
    g.add_argument("--threads", type=non_negative_int, default=None,
                   help="engine threads (default 0: all cores)")
    if not build:
        return
    g.add_argument("--n-postings", type=positive_int, default=None,
                   help=f"average postings kept per term, the largest weights (default {B['n_postings']})")
    g.add_argument("--centroid-fraction", type=positive_float, default=None,
                   help=f"blocks per posting list, as a fraction of its length (default {B['centroid_fraction']})")
    g.add_argument("--summary-energy", type=positive_float, default=None,
                   help=f"the share of a block's weight its summary keeps (default {B['summary_energy']})")


#: the build options of ``--backend seismic`` (argument name = SeismicIndex's)
SEISMIC_BUILD = ("n_postings", "centroid_fraction", "summary_energy")
SEISMIC_SEARCH = ("query_cut", "heap_factor", "threads")


def store_from_args(args):
    import os

    from ..cli import CLIError
    from ..retrieval.qdrant import open_store

    if not (args.url or args.path or args.edge):
        raise CLIError("--backend qdrant needs --url URL, --path DIR or --edge DIR")
    if (args.url or args.path) and not args.collection:
        raise CLIError("--url / --path need --collection NAME")
    return open_store(args.collection, url=args.url, path=args.path, edge=args.edge,
                      api_key=os.environ.get("QDRANT_API_KEY"))


def _backend(args) -> str:
    """The backend asked for, or the one the other arguments imply."""
    if args.backend:
        return args.backend
    if args.url or args.path or args.edge:
        return "qdrant"
    if args.data:
        return "bm25"
    if len(args.embeddings) == 1:
        import json
        from pathlib import Path

        mf = Path(args.embeddings[0]) / "manifest.json"
        try:
            return "inverted" if json.loads(mf.read_text()).get("sparse") else "faiss"
        except (OSError, ValueError):
            return "faiss"  # the folder's own error comes when it is opened
    return "qdrant"


def check_args(args, backend: str) -> None:
    """The combinations of the arguments, checked before anything is read (exit status 2)."""
    from ..cli import CLIError

    if backend == "qdrant":
        if args.data:
            raise CLIError("--backend qdrant uploads embeddings folders: give --embeddings, not --data")
        if args.output:
            raise CLIError("--backend qdrant writes into a collection (--url / --path / --edge), not --output")
        return
    if args.url or args.path or args.edge or args.collection:
        raise CLIError(f"--url / --path / --edge / --collection go with --backend qdrant, not {backend}")
    if not args.output:
        raise CLIError(f"--backend {backend} writes an index folder: give --output IDX")
    seismic = [f"--{k.replace('_', '-')}" for k in SEISMIC_BUILD + SEISMIC_SEARCH if getattr(args, k) is not None]
    if backend != "seismic" and seismic:
        raise CLIError(f"{' / '.join(seismic)} go with --backend seismic, not {backend}")
    if args.model and not (backend == "seismic" and args.data):
        raise CLIError("--model goes with --backend seismic --data DIR (the corpus is encoded first); other "
                       "backends index an embeddings folder (hf-dr encode) or, for bm25, the texts")
    if backend == "seismic" and args.data:
        if not args.model:
            raise CLIError("--backend seismic --data DIR needs --model (the SPLADE model that encodes the corpus), "
                           "or give --embeddings EMB (hf-dr encode --kind sparse)")
    elif backend == "bm25" and not args.data:
        raise CLIError("--backend bm25 indexes a corpus: give --data DIR (not --embeddings)")
    elif backend != "bm25":
        if not args.embeddings:
            raise CLIError(f"--backend {backend} indexes an embeddings folder (hf-dr encode): give --embeddings EMB")
        if len(args.embeddings) != 1:
            raise CLIError(f"--backend {backend} indexes one embeddings folder (got {len(args.embeddings)})")
    if backend != "faiss" and (args.index_type != "flat" or args.hnsw_m or args.nlist):
        raise CLIError(f"--index-type / --hnsw-m / --nlist go with --backend faiss, not {backend}")


def run(args) -> int:
    backend = _backend(args)
    check_args(args, backend)
    if backend == "qdrant":
        return _run_qdrant(args)
    from ..io import local_inputs, output_folder
    from ..retrieval.saved import save_bm25_index, save_dense_index, save_sparse_index

    inputs = local_inputs(args.data, *(args.embeddings or ()))
    with output_folder(args.output, overwrite=args.overwrite, inputs=inputs) as tmp:
        if backend == "bm25":
            from ..data import load_beir

            data = load_beir(args.data, split=None)
            m = save_bm25_index(data, tmp, stemmer=args.bm25_stemmer, stopwords=args.bm25_stopwords,
                                show_progress_bar=not args.no_progress)
        elif backend == "faiss":
            m = save_dense_index(args.embeddings[0], tmp, index_type=args.index_type, hnsw_m=args.hnsw_m or 32,
                                 ef_search=args.ef_search, nlist=args.nlist, pq_m=args.pq_m, nprobe=args.nprobe,
                                 show_progress_bar=not args.no_progress)
        elif backend == "seismic":
            m = _seismic(args, tmp)
        else:
            m = save_sparse_index(args.embeddings[0], tmp)
    what = {"bm25": "BM25", "faiss": f"faiss {m.get('index_type')}", "inverted": "inverted",
            "seismic": "Seismic"}[backend]
    print(f"wrote {args.output}: {what} index of {m['n_docs']} documents, built in {m['build_seconds']} s")
    return 0


def _seismic(args, folder) -> dict:
    """``--backend seismic``: the index of ``--embeddings``, or of ``--data`` encoded by ``--model``
    first (into a folder beside the index's, removed once the index is written)."""
    from pathlib import Path

    from ..retrieval.saved import save_seismic_index

    opts = {k: getattr(args, k) for k in SEISMIC_BUILD + SEISMIC_SEARCH if getattr(args, k) is not None}
    if args.embeddings:
        return save_seismic_index(args.embeddings[0], folder, show_progress_bar=not args.no_progress, **opts)
    import shutil

    from ..data import load_beir
    from ..embeddings import encode_to_folder
    from ..models import check_model, load_encoder

    check_model(args.model, kind="sparse")
    encoder = load_encoder(args.model, kind="sparse")
    emb = Path(folder).parent / f".{Path(folder).name}.embeddings"
    try:
        encode_to_folder(encoder, load_beir(args.data, split=None), emb, model_name=args.model,
                         show_progress_bar=not args.no_progress)
        return save_seismic_index(emb, folder, show_progress_bar=not args.no_progress, **opts)
    finally:
        shutil.rmtree(emb, ignore_errors=True)


def _run_qdrant(args) -> int:
    from ..cli import CLIError
    from ..retrieval.qdrant import index_embeddings

    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be at least 1 (got {args.batch_size})")
    store = store_from_args(args)
    try:
        m = index_embeddings(store, args.embeddings, batch_size=args.batch_size, hnsw_m=args.hnsw_m or 16,
                             ef_construct=args.ef_construct, on_disk=args.on_disk, shards=args.shards,
                             replicas=args.replicas, show_progress_bar=not args.no_progress)
    finally:
        store.close()
    where = args.url or args.path or args.edge
    print(f"indexed {m['n_docs']} documents ({' + '.join(sorted(m['vectors']))}) into "
          f"{args.collection or 'the edge shard'} at {where}")
    return 0
