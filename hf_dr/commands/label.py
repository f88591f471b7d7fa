"""``hf-dr label``: DoDress pseudo-relevance labels for the training queries of a BEIR folder
(BM25 top-100 -> rerank -> top-k pseudo-positives -> m negatives each) written as a
``datasets`` folder with parquet files, a dev set and a dataset card."""

from __future__ import annotations

from ..cli import add_dtype_argument, add_prompt_arguments, apply_prompt_arguments, finite_float, non_negative_int, positive_int

import shlex
import sys


def register(sub) -> None:
    p = sub.add_parser("label", help="build pseudo-labelled triplets for a target corpus (DoDress)",
                       description=__doc__)
    p.add_argument("--data", required=True, help="BEIR folder or Hub id (its queries are used, never its labels)")
    p.add_argument("--split", default="train",
                   help="query split to label (default train; test is refused). A folder without qrels/SPLIT.tsv "
                        "(e.g. only a corpus and queries) has all its queries labelled, except any judged in "
                        "qrels/test.tsv")
    p.add_argument("--dense-model", default=None,
                   help="the current dense retriever: the fusion reranker and SimANS negatives use it")
    p.add_argument("--reranker", default="fusion", help="fusion | monot5:<id> | cross-encoder:<id> (default fusion)")
    p.add_argument("--negatives", default="simans", help="random | bm25 | simans (default simans)")
    p.add_argument("--k", type=positive_int, default=1, help="pseudo-positives per query (top-k reranked)")
    p.add_argument("--m", type=positive_int, default=10, help="negatives per pseudo-positive")
    p.add_argument("--bm25-top", type=positive_int, default=100, help="BM25 candidates reranked per query")
    p.add_argument("--simans-top-k", type=positive_int, default=500, help="SimANS: top-K of the dense retriever")
    p.add_argument("--simans-score-scale", type=finite_float, default=None,
                   help="dense scores x this before SimANS (default: the dense model's own similarity, 20 for "
                        "cosine models, so that a=0.5 is not ~uniform over cosine scores; 1 for dot)")
    p.add_argument("--dev-queries", type=non_negative_int, default=50, help="queries held out for the dev set")
    p.add_argument("--max-queries", type=positive_int, default=None, help="label only the first N queries (quick checks)")
    p.add_argument("--max-length", type=positive_int, default=None, help="max tokens when encoding with the dense model")
    p.add_argument("--embeddings", default=None,
                   help="embeddings folder of the corpus by --dense-model (hf-dr encode): no re-encoding")
    p.add_argument("--index", default=None, metavar="IDX",
                   help="a saved BM25 index of the corpus (hf-dr index --data DIR --backend bm25): its candidates, "
                        "nothing re-indexed (refused when it indexes another corpus)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--keep-degenerate", action="store_true",
                   help="keep the queries whose labels are degenerate (fewer than k + m BM25 candidates, non-finite "
                        "or all-equal teacher scores, teacher margins beyond the teacher's sane bound; see "
                        "docs/dodress.md); by default they are reported and dropped")
    add_dtype_argument(p, "encoding with --dense-model")
    add_prompt_arguments(p, "--dense-model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=None,
                   help="stage cache, keyed on the content of the inputs (default: .OUTPUT.cache beside the output "
                        "folder); share it across runs")
    p.add_argument("--output", required=True, help="output folder (written whole once complete; must be new or empty)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty --output once the new one is complete (never a folder holding --data, "
                        "a model, --embeddings or the cache)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..cli import CLIError
    from ..data.beir import load_training_queries
    from ..io import check_output_folder, local_inputs
    from ..labeling.pseudo_relevance import PseudoLabelConfig, build_pseudo_labels, resolve_cache_dir
    from ..labeling.teacher import parse_teacher
    from ..models import check_model, load_encoder

    cfg = PseudoLabelConfig(split=args.split, bm25_top=args.bm25_top, k=args.k, m=args.m, negatives=args.negatives,
                            simans_top_k=args.simans_top_k,
                            simans_score_scale=args.simans_score_scale, dev_queries=args.dev_queries,
                            max_queries=args.max_queries, seed=args.seed, dense_max_length=args.max_length,
                            batch_size=args.batch_size, keep_degenerate=args.keep_degenerate)
    try:
        cfg.validate()
    except ValueError as e:
        raise CLIError(str(e)) from None
    try:
        teacher = parse_teacher(args.reranker)
    except ValueError as e:
        raise CLIError(f"--reranker: {e}") from None
    if not args.dense_model and (teacher.needs_dense or args.negatives == "simans"):
        raise CLIError("--dense-model is needed by --reranker fusion and --negatives simans")
    if args.embeddings and not args.dense_model:
        raise CLIError("--embeddings are the corpus encoded by --dense-model: give --dense-model too")
    # the output folder is checked before anything is loaded or computed
    cache = resolve_cache_dir(args.output, args.cache_dir)
    inputs = local_inputs(args.data, args.dense_model, args.embeddings, teacher.local_model, cache, args.index)
    check_output_folder(args.output, overwrite=args.overwrite, inputs=inputs)
    if args.dense_model:
        check_model(args.dense_model, kind="dense")  # weights present / reachable, before the corpus is read
    data, queries, has_qrels = load_training_queries(args.data, split=args.split)
    bm25 = None
    if args.index:
        from ..retrieval.saved import SavedIndex

        bm25 = SavedIndex(args.index).bm25_index(data)
    if not has_qrels:
        print(f"no qrels/{args.split}.tsv in {args.data}: labelling {len(queries)} queries (all the queries "
              "not judged in a test split)")
    encoder = apply_prompt_arguments(load_encoder(args.dense_model) if args.dense_model else None, args)
    if encoder is not None:
        encoder.encode_dtype = args.dtype
    command = "hf-dr label " + " ".join(shlex.quote(a) for a in sys.argv[sys.argv.index("label") + 1:]) \
        if "label" in sys.argv else None
    labels = build_pseudo_labels(data, args.output, cfg, reranker=teacher, queries=queries, dense_encoder=encoder,
                                 dense_name=args.dense_model, bm25=bm25, cache_dir=args.cache_dir, command=command,
                                 doc_embeddings=args.embeddings, overwrite=args.overwrite, inputs=inputs)
    s = labels.stats
    print(f"{s['triplets']} triplets from {s['train_queries']} queries; dev set: {s['dev_rows']} rows from "
          f"{s['dev_queries']} queries; {s['queries_without_bm25_hits']} queries without BM25 hits")
    print(f"wrote {args.output} (datasets.load_from_disk), {args.output}/dev, {args.output}/data/*.parquet, "
          f"{args.output}/README.md")
    return 0
