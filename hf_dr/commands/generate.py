"""``hf-dr generate-queries``: queries made from a corpus (and nothing else), written as
``OUTPUT/queries.jsonl`` — each line ``{"_id", "text", "doc_id"}``, ``doc_id`` the document the query
was made from — streamed over the memory-mapped corpus, resumable (run the same command again after a
crash, ``kill -9`` included: finished shards are kept in a hidden ``.OUTPUT.partial`` folder beside
the output, renamed to OUTPUT once every shard is done; the result equals an uninterrupted run's)
and parallel (``accelerate launch --num_processes N -m hf_dr.cli generate-queries ...`` or
``torchrun``: each process its own shards), as ``hf-dr encode``.

Generators: ``span`` (default; 4-16 consecutive words of the document), ``terms`` (BM25-weighted
terms of it) and ``cloze`` (a sentence of it) need no model weights; ``doc2query:ID`` samples a seq2seq model's
queries (GPL's T5: doc2query:BeIR/query-gen-msmarco-t5-base-v1), on the GPU when there is one.
How many: GPL's rule, ceil(--num-queries / |corpus|) per document (default 250,000 in all), or
--queries-per-doc. ``hf-dr adapt`` runs this itself on a folder without queries.jsonl."""

from __future__ import annotations

from ..cli import add_resumable_output_arguments, positive_int


def register(sub) -> None:
    from ..generation import DEFAULT_GENERATOR, DEFAULT_SHARD_SIZE, GPL_TOTAL

    p = sub.add_parser("generate-queries", help="generate queries from a corpus (sharded, resumable)",
                       description=__doc__)
    p.add_argument("--data", required=True, help="BEIR folder (only corpus.jsonl is read, streamed) or Hub dataset id")
    p.add_argument("--output", required=True, help="the output folder (OUTPUT/queries.jsonl, OUTPUT/generation.json)")
    p.add_argument("--generator", default=DEFAULT_GENERATOR,
                   help=f"terms | cloze | span | doc2query:ID (default {DEFAULT_GENERATOR}: measured, docs/adapt.md)")
    p.add_argument("--queries-per-doc", type=positive_int, default=None,
                   help="queries per document (default: GPL's ceil(--num-queries / |corpus|))")
    p.add_argument("--num-queries", type=positive_int, default=GPL_TOTAL,
                   help=f"target total (default {GPL_TOTAL:,}, GPL's); below the corpus size, one query for each of "
                        "that many documents drawn by --seed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=positive_int, default=32, help="documents per generation batch")
    p.add_argument("--shard-size", type=positive_int, default=DEFAULT_SHARD_SIZE,
                   help=f"documents per shard (default {DEFAULT_SHARD_SIZE}): the unit of resumption")
    p.add_argument("--device", default=None, help="doc2query: cpu, cuda, cuda:1 ... (default: a GPU when there is one; "
                                                  "under accelerate each process its own)")
    add_resumable_output_arguments(p, "--data or a doc2query model folder")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from ..cli import CLIError, is_other_process, process_device
    from ..generation import GenerationError, check_generator, generate_to_folder
    from ..io import check_output_folder, local_inputs, output_folder, partial_folder

    try:
        check_generator(args.generator)
    except ValueError as e:
        raise CLIError(str(e)) from None
    out = Path(args.output)
    inputs = local_inputs(args.data, args.generator.partition(":")[2] or None)
    check_output_folder(out, overwrite=args.overwrite, inputs=inputs)  # before reading anything
    work = partial_folder(out)
    kwargs = dict(queries_per_doc=args.queries_per_doc, num_queries=args.num_queries, seed=args.seed,
                  shard_size=args.shard_size, batch_size=args.batch_size, device=process_device(args.device),
                  show_progress_bar=not args.no_progress, restart=args.overwrite)
    if is_other_process():  # its shards go into the work folder; rank 0 renames it once all are done
        generate_to_folder(args.data, work, args.generator, **kwargs)
        return 0
    try:
        with output_folder(out, overwrite=args.overwrite, inputs=inputs, work=work) as tmp:
            res = generate_to_folder(args.data, tmp, args.generator, **kwargs)
            res.path = out
    except GenerationError as e:
        if "begun with other settings" in str(e):
            raise CLIError(f"{e} (or pass --overwrite to start again)") from None
        raise
    m = res.manifest
    print(f"wrote {out / 'queries.jsonl'}: {m['queries']} queries ({m['generator_name']}, {m['queries_per_doc']} per "
          f"document, {m['documents']} of {m['n_docs']} documents)")
    return 0
