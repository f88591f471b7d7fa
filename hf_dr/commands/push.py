"""``hf-dr push``: publish a saved model (BERMEncoder, DDR REM or DAM, SPLADECAI, DenseEncoder), a
dataset (``--dataset``: parquet files, a ``save_to_disk`` folder, the pseudo-labels of ``hf-dr label``, or
a passage corpus of ``hf-dr ingest``, with a card naming its sources and how they were cut) or the search
Space (``--space``) to the Hugging Face Hub, with its card. ``--local-dir OUT`` writes exactly the folder
that would be uploaded, without network."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("push", help="publish a model or dataset folder to the Hub (or write it with --local-dir)",
                       description=__doc__)
    p.add_argument("path", metavar="MODEL_DIR", help="a folder saved by a hf-dr model (or, with --dataset, "
                   "a folder of parquet files / a datasets.save_to_disk folder / a passage corpus written by "
                   "hf-dr ingest)")
    p.add_argument("--repo-id", default=None, help="Hub repo id (owner/name); needed unless --local-dir")
    p.add_argument("--local-dir", default=None, metavar="OUT", help="write the repo folder here, upload nothing")
    p.add_argument("--metrics", nargs="+", default=[], metavar="JSON",
                   help="metrics.json files of `hf-dr evaluate --output`: the card's results table")
    p.add_argument("--dataset", action="store_true", help="MODEL_DIR is a dataset: push parquet + dataset card")
    p.add_argument("--space", action="store_true", help="MODEL_DIR is the search Space (spaces/search_demo): "
                   "push app.py, requirements.txt, README.md and the hf_dr package to a Gradio Space")
    p.add_argument("--template", default=None, help="card template name under model_cards/ (default: the kind's; "
                   "for --dataset: the DoDress card of a `hf-dr label` folder, else `dataset`)")
    p.add_argument("--base-model", default=None, help="Hub id of the base model (default: inferred when a Hub id)")
    p.add_argument("--datasets", nargs="+", default=[], metavar="ID", help="Hub ids of the training / evaluation data")
    p.add_argument("--license", default="apache-2.0")
    p.add_argument("--dam", default=None, help="DDR REM only: a DAM folder to bundle in dam/, or a Hub id to "
                   "reference instead (default: bundle the REM's own DAM)")
    p.add_argument("--kind", default=None, choices=["splade_cai", "ddr_rem", "ddr_dam", "berm", "dense"],
                   help="the model kind, when it cannot be recognised from the folder (e.g. a DAM saved by "
                   "DDRModel.save_dam: --kind ddr_dam)")
    p.add_argument("--private", action="store_true")
    p.add_argument("--token", default=None, help="Hub token (default: the logged-in one / HF_TOKEN)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty --local-dir (once the new folder is complete; never a folder holding "
                        "MODEL_DIR or another input)")
    p.set_defaults(func=run)


def run(args) -> int:
    # HubError is a ValueError: the CLI prints it without a traceback (exit status 2)
    from ..hub import push_dataset, push_model, push_space

    if args.space:
        where = push_space(args.repo_id, space_dir=args.path, local_dir=args.local_dir, private=args.private,
                           token=args.token, overwrite=args.overwrite)
    elif args.dataset:
        where = push_dataset(args.path, args.repo_id, local_dir=args.local_dir, private=args.private,
                             token=args.token, template=args.template, license=args.license,
                             overwrite=args.overwrite,
                             card_data={"source_datasets": args.datasets} if args.datasets else None)
    else:
        where = push_model(args.path, args.repo_id, local_dir=args.local_dir, private=args.private,
                           token=args.token, metrics=args.metrics, base_model=args.base_model,
                           datasets=args.datasets, license=args.license, template=args.template,
                           dam=args.dam, overwrite=args.overwrite, kind=args.kind)
    print(f"wrote {where}" if args.local_dir else f"uploaded: {where}")
    return 0
