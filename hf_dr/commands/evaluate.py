"""``hf-dr evaluate``: retrieve a BEIR split with BM25, a dense / sparse model, or a
hybrid, print the metrics table, write ``run.trec`` and ``metrics.json``.

``--embeddings EMB`` searches an embeddings folder written by ``hf-dr encode`` instead of
encoding the corpus again (refused when another model or corpus made it); ``--index IDX`` searches
an index saved by ``hf-dr index`` (faiss, inverted, Seismic or BM25: opened, nothing built;
refused when another model, corpus or BM25 tokenisation made it)."""

from __future__ import annotations

import time
from pathlib import Path

from ..cli import (add_dtype_argument, add_prompt_arguments, apply_prompt_arguments, finite_float, positive_int, stemmer_name,
                   stopwords_name)
from ..factory import RETRIEVER_KINDS


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="evaluate a retriever on a BEIR folder or Hub dataset",
                       description=__doc__)
    p.add_argument("--data", required=True, help="BEIR folder or Hub dataset id (BeIR/scifact, mteb/scifact), "
                        "or a folder of documents (PDF, DOCX, HTML, Markdown, text; with queries.jsonl and qrels/ beside them): "
                        "ingested first into passages for --model, cached (hf-dr ingest, docs/ingest.md)")
    p.add_argument("--retriever", choices=RETRIEVER_KINDS, default="bm25")
    p.add_argument("--model", help="model folder or Hub id (dense, sparse, hybrid)")
    p.add_argument("--embeddings", help="embeddings folder of the corpus by this model (hf-dr encode): no re-encoding")
    p.add_argument("--index", nargs="+", metavar="IDX",
                   help="saved index folder(s) (hf-dr index): a BM25 one and / or one of the model's vectors "
                        "(faiss, inverted, seismic); searched as they are, nothing built")
    p.add_argument("--split", default="test")
    p.add_argument("--output", help="folder for run.trec and metrics.json (checked writable first; those two files are replaced)")
    p.add_argument("--top-k", type=positive_int, default=1000)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--max-length", type=positive_int, default=None, help="max document tokens (default: the model's)")
    p.add_argument("--metrics", nargs="+", default=None, help="e.g. ndcg@10 recall@100 recall@1000 mrr@10")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ignore-identical-ids", dest="ignore_identical_ids", action="store_true", default=None,
                   help="remove every self-match (a document whose id is the query's); by default one is removed "
                        "unless the qrels judge it relevant to that query (BEIR's ignore_identical_ids)")
    g.add_argument("--keep-identical-ids", dest="ignore_identical_ids", action="store_false",
                   help="keep every self-match")
    p.add_argument("--aggregate", choices=("auto", "maxp", "firstp", "sum", "none"), default="auto",
                   help="a corpus of passages (hf-dr ingest: ids <doc>#<n>) whose documents the qrels judge: score a "
                        "document by its best passage (maxp), its first (firstp) or their sum; auto (default) = maxp "
                        "where that is so, none otherwise")
    p.add_argument("--bm25-stemmer", type=stemmer_name, default="english", help="PyStemmer language, or 'none'")
    p.add_argument("--bm25-stopwords", type=stopwords_name, default="en", help="'en' (or de, fr...) or 'none'")
    p.add_argument("--hybrid-second", choices=("dense", "sparse"), default=None,
                   help="the model side of --retriever hybrid (default: sparse for SPLADE models, else dense)")
    p.add_argument("--fusion", choices=("zscore", "minmax", "sum", "rrf", "dbsf"), default=None,
                   help="hybrid fusion (default zscore; with --backend qdrant: rrf or dbsf, in the engine, default rrf)")
    p.add_argument("--fusion-weights", type=finite_float, nargs=2, default=(1.0, 1.0), metavar=("BM25", "MODEL"))
    d = p.add_argument_group("dense index (docs/retrieval.md: which one when)")
    d.add_argument("--index-type", choices=("flat", "hnsw", "ivfpq", "seismic"), default=None,
                   help="flat: exact (default); hnsw / ivfpq: approximate, for millions of documents; seismic: "
                        "approximate SPLADE search (--retriever sparse); built for this run: `hf-dr index` saves one")
    d.add_argument("--hnsw-m", type=positive_int, default=None, help="HNSW links per node (default 32)")
    d.add_argument("--ef-search", type=positive_int, default=None,
                   help="HNSW search breadth (default 128, or a saved index's own)")
    d.add_argument("--nlist", type=positive_int, default=None, help="IVF cells (default 4*sqrt(n))")
    d.add_argument("--pq-m", type=positive_int, default=None, help="PQ sub-quantisers (default 16; must divide the dimension)")
    d.add_argument("--nprobe", type=positive_int, default=None,
                   help="IVF cells visited per query (default 32, or a saved index's own)")
    d.add_argument("--faiss-gpu", choices=("auto", "yes", "no"), default="auto",
                   help="put the dense index on GPU (faiss-gpu: pip install hf-dr[gpu]); auto = when present")
    from .index import add_seismic_arguments

    add_seismic_arguments(p, build=False)
    p.add_argument("--backend", choices=("inprocess", "qdrant"), default="inprocess",
                   help="inprocess: faiss / inverted index in this process (default); qdrant: a collection made "
                        "by hf-dr index (--retriever hybrid there fuses --model and --sparse-model in the engine)")
    p.add_argument("--sparse-model", help="--backend qdrant --retriever hybrid: the sparse model (--model is the dense one)")
    p.add_argument("--approximate", action="store_true", help="--backend qdrant: HNSW search instead of exact")
    from .index import add_qdrant_arguments

    add_qdrant_arguments(p)
    p.add_argument("--max-queries", type=positive_int, default=None, help="evaluate the first N judged queries only")
    p.add_argument("--device", default=None)
    add_dtype_argument(p, "encoding the corpus and the queries")
    add_prompt_arguments(p, "--model")
    p.set_defaults(func=run)


def index_options(args) -> dict:
    """The dense index options of the parsed arguments (only those given: the others are the
    defaults of :class:`~hf_dr.retrieval.DenseIndex`, or a saved index's own)."""
    if args.retriever == "bm25":
        return {}
    opts = {k: getattr(args, k) for k in ("index_type", "hnsw_m", "ef_search", "nlist", "pq_m", "nprobe",
                                          "query_cut", "heap_factor", "threads")
            if getattr(args, k) is not None}
    if opts.get("index_type") == "flat" and not args.index:
        del opts["index_type"]
    if args.faiss_gpu != "auto":
        opts["use_gpu"] = args.faiss_gpu == "yes"
    return opts


def qdrant_retriever(args):
    """A :class:`~hf_dr.retrieval.qdrant.QdrantRetriever` from the arguments."""
    from ..models import load_encoder
    from ..retrieval.qdrant import QdrantRetriever
    from .index import store_from_args

    fusion = args.fusion or "rrf"
    if args.retriever == "sparse":
        encoders = {"sparse": load_encoder(args.model, kind="sparse")}
    else:
        encoders = {"dense": load_encoder(args.model, kind="dense")}
        if args.retriever == "hybrid":
            encoders["sparse"] = load_encoder(args.sparse_model, kind="sparse")
    for e in encoders.values():
        e.encode_dtype = args.dtype
    apply_prompt_arguments(encoders.get("dense"), args)
    return QdrantRetriever(store_from_args(args), encoders, mode=args.retriever, exact=not args.approximate,
                           fusion=fusion, batch_size=args.batch_size)


def check_output(out, files=("run.trec", "metrics.json")) -> Path:
    """An ``--output`` folder that receives ``files``, checked before the run: it may exist
    (earlier results in it are replaced: those files only, nothing else is touched) but must be
    a folder that can be created and written."""
    from ..cli import CLIError
    from ..io import check_writable

    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise CLIError(f"cannot write {out}: it exists and is not a folder")
    for name in files:
        if (out / name).exists() and not (out / name).is_file():
            raise CLIError(f"cannot write {out / name}: it exists and is not a file")
    return check_writable(out)


#: the fusions of each backend (--backend qdrant fuses in the engine)
FUSIONS = {"inprocess": ("zscore", "minmax", "sum", "rrf"), "qdrant": ("rrf", "dbsf")}


def check_args(args) -> None:
    """Every combination of the arguments, checked before anything is loaded or encoded
    (:class:`~hf_dr.cli.CLIError`, exit status 2)."""
    from ..cli import CLIError

    if args.retriever != "bm25" and not args.model:
        raise CLIError(f"--retriever {args.retriever} needs --model")
    if args.retriever == "bm25" and args.model:
        raise CLIError("--retriever bm25 takes no --model (did you mean --retriever dense / sparse / hybrid?)")
    if args.embeddings and args.retriever == "bm25":
        raise CLIError("--embeddings goes with a model retriever (dense, sparse, hybrid), not bm25")
    if args.index:
        if args.backend == "qdrant":
            raise CLIError("--index is a saved index searched in this process: it does not go with --backend qdrant")
        if len(args.index) > (2 if args.retriever == "hybrid" else 1):
            raise CLIError(f"--retriever {args.retriever} searches one index (got {len(args.index)}); a hybrid "
                           "takes two: a BM25 one and one of the model's vectors")
        fixed = [f"--{k.replace('_', '-')}" for k in ("index_type", "hnsw_m", "nlist", "pq_m")
                 if getattr(args, k) is not None]
        if fixed:
            raise CLIError(f"{' / '.join(fixed)} are fixed when the index is built (`hf-dr index`): a saved index "
                           "has its own (--ef-search / --nprobe, or a Seismic index's --query-cut / --heap-factor, "
                           "may change)")
    seismic = [f"--{k.replace('_', '-')}" for k in ("query_cut", "heap_factor", "threads")
               if getattr(args, k) is not None]
    if seismic and not (args.index or args.index_type == "seismic"):
        raise CLIError(f"{' / '.join(seismic)} search a Seismic index: give --index IDX (hf-dr index --backend "
                       "seismic) or --index-type seismic")
    if args.index_type == "seismic" and args.retriever not in ("sparse", "hybrid"):
        raise CLIError(f"--index-type seismic indexes SPLADE vectors: it goes with --retriever sparse, not "
                       f"{args.retriever}")
    if args.retriever != "hybrid" and (args.fusion or args.hybrid_second):
        raise CLIError(f"--fusion / --hybrid-second go with --retriever hybrid, not {args.retriever}")
    if args.backend != "qdrant":
        if args.url or args.path or args.edge or args.sparse_model or args.approximate:
            raise CLIError("--url / --path / --edge / --sparse-model / --approximate go with --backend qdrant")
        if args.fusion and args.fusion not in FUSIONS["inprocess"]:
            raise CLIError(f"--fusion {args.fusion} is fused by Qdrant: it needs --backend qdrant "
                           f"(in process: {', '.join(FUSIONS['inprocess'])})")
        return
    if args.retriever == "bm25":
        raise CLIError("--backend qdrant searches dense, sparse or hybrid vectors, not bm25")
    if args.embeddings:
        raise CLIError("--backend qdrant searches the collection: --embeddings goes to `hf-dr index`")
    if args.retriever == "hybrid" and not args.sparse_model:
        raise CLIError("--backend qdrant --retriever hybrid needs --sparse-model (and --model, the dense one)")
    if args.fusion and args.fusion not in FUSIONS["qdrant"]:
        raise CLIError(f"Qdrant fuses with {' or '.join(FUSIONS['qdrant'])}, not {args.fusion}")


def check_model_args(args) -> None:
    """The models of the arguments can be loaded as asked (folder with weights, an MLM head
    for sparse, a reachable Hub id): checked before the corpus is read."""
    from ..models import check_model

    if args.model:
        kind = {"dense": "dense", "sparse": "sparse"}.get(args.retriever, args.hybrid_second or "auto")
        if args.backend == "qdrant" and args.retriever == "hybrid":
            kind = "dense"
        check_model(args.model, kind=kind)
    if args.sparse_model:
        check_model(args.sparse_model, kind="sparse")


def _dtype_info(args) -> dict:
    """The precision the model encoded in (``fp32`` / ``bf16`` / ``fp16``), for metrics.json."""
    if args.retriever == "bm25":
        return {}
    from ..precision import dtype_name

    return {"dtype": dtype_name(args.dtype, args.device)}


def run(args) -> int:
    from ..cli import CLIError
    from ..data import load_beir
    from ..evaluation import DEFAULT_METRICS, describe_self_matches, evaluate, format_table
    from ..evaluation import parse_metric
    from ..factory import build_retriever
    from ..retrieval import write_trec_run

    check_args(args)
    for m in args.metrics or ():
        parse_metric(m)
    out = check_output(args.output) if args.output else None
    check_model_args(args)
    from .ingest import documents_as_data

    args.data = documents_as_data(args.data, args.model, document_prompt=args.document_prompt)
    data = load_beir(args.data, split=args.split)
    queries = data.split_queries()
    if not queries:
        raise CLIError(f"no judged queries in split {data.split!r} of {data.name}")
    if args.max_queries:
        queries = dict(list(queries.items())[: args.max_queries])
    t0 = time.perf_counter()
    if args.backend == "qdrant":
        retriever = qdrant_retriever(args)
    else:
        retriever = build_retriever(
            args.retriever, data, args.model, embeddings=args.embeddings, index=args.index, batch_size=args.batch_size,
            max_length=args.max_length, device=args.device, dtype=args.dtype, query_prompt=args.query_prompt,
            document_prompt=args.document_prompt, bm25_stemmer=args.bm25_stemmer,
            bm25_stopwords=args.bm25_stopwords, hybrid_second=args.hybrid_second, fusion=args.fusion or "zscore",
            fusion_weights=args.fusion_weights, **index_options(args))
    result = evaluate(retriever, data, k=args.top_k, metrics=args.metrics or DEFAULT_METRICS,
                      ignore_identical_ids=args.ignore_identical_ids, queries=queries, aggregate=args.aggregate)
    info = {**retriever.info(), "model": args.model, "sparse_model": args.sparse_model, "embeddings": args.embeddings,
            **({"saved_indexes": args.index} if args.index else {}), "data": str(data.name),
            "split": data.split, "n_queries": len(queries), "n_docs": len(data.corpus),
            **_dtype_info(args), "seconds": round(time.perf_counter() - t0, 2)}
    name = args.retriever if not args.model else f"{args.retriever}: {Path(args.model).name}"
    print(format_table({name: result.aggregate}, list(result.aggregate)))
    print(f"{result.n_queries} queries, {info['n_docs']} documents, {info['seconds']} s")
    print(describe_self_matches(result.self_matches))
    if result.aggregation:
        a = result.aggregation
        by = {"maxp": "its best passage (MaxP)", "firstp": "its first passage (FirstP)",
              "sum": "the sum of its passages' scores"}[a["how"]]
        print(f"passages -> documents: {a['passages']} passages of {a['documents']} documents, each document scored by "
              f"{by} ({a['passages_retrieved']} passages retrieved per query)")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_trec_run(result.run, out / "run.trec", tag=f"hf-dr-{args.retriever}", top_k=args.top_k)
        result.to_json(out / "metrics.json", **info)
        print(f"wrote {out / 'run.trec'} and {out / 'metrics.json'}")
    return 0
