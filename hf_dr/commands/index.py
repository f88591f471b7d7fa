"""``hf-dr index``: upload embeddings folders (``hf-dr encode``) into a search engine collection.

Qdrant: one collection holds a corpus's dense and/or sparse vectors (give one folder of each for
a hybrid), the document ids as payload, and the models / max lengths in a manifest point. Point
ids are row numbers: running the command again after a crash resumes the upload, and running it
on the same data duplicates nothing; a collection built from another model, max length or corpus
is refused. ``--url`` talks to a server or cluster, ``--path`` to qdrant-client's local store
(tests and small corpora), ``--edge`` to Qdrant's engine embedded in this process (qdrant-edge-py)."""

from __future__ import annotations

from ..cli import positive_int


def add_qdrant_arguments(p) -> None:
    """``--url | --path | --edge`` and ``--collection`` (shared with ``hf-dr evaluate --backend qdrant``)."""
    g = p.add_argument_group("Qdrant (--backend qdrant)")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--url", help="Qdrant server or cluster, e.g. http://localhost:6333 (QDRANT_API_KEY read)")
    where.add_argument("--path", help="qdrant-client local store folder (pure Python: tests, small corpora)")
    where.add_argument("--edge", help="qdrant-edge-py shard folder: Qdrant's engine in this process")
    g.add_argument("--collection", help="collection name (--url / --path)")


def register(sub) -> None:
    p = sub.add_parser("index", help="upload embeddings folders into a Qdrant collection (resumable)",
                       description=__doc__)
    p.add_argument("--embeddings", nargs="+", required=True,
                   help="embeddings folder(s): one dense and/or one sparse, of the same corpus")
    p.add_argument("--backend", choices=("qdrant",), default="qdrant")
    add_qdrant_arguments(p)
    p.add_argument("--batch-size", type=positive_int, default=256, help="points per upsert")
    p.add_argument("--hnsw-m", type=positive_int, default=16, help="HNSW links per node (serving; evaluation is exact)")
    p.add_argument("--ef-construct", type=positive_int, default=100)
    p.add_argument("--on-disk", action="store_true", help="vectors and sparse index on disk (memory-mapped)")
    p.add_argument("--shards", type=positive_int, default=1, help="collection shards (cluster)")
    p.add_argument("--replicas", type=positive_int, default=1, help="replication factor (cluster)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


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


def run(args) -> int:
    from ..cli import CLIError
    from ..retrieval.qdrant import index_embeddings

    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be at least 1 (got {args.batch_size})")
    store = store_from_args(args)
    try:
        m = index_embeddings(store, args.embeddings, batch_size=args.batch_size, hnsw_m=args.hnsw_m,
                             ef_construct=args.ef_construct, on_disk=args.on_disk, shards=args.shards,
                             replicas=args.replicas, show_progress_bar=not args.no_progress)
    finally:
        store.close()
    where = args.url or args.path or args.edge
    print(f"indexed {m['n_docs']} documents ({' + '.join(sorted(m['vectors']))}) into "
          f"{args.collection or 'the edge shard'} at {where}")
    return 0
