"""``hf-dr adapt``: adapt a retriever to a corpus in one command — generate (queries made from the
corpus when the folder has none: a folder holding only corpus.jsonl is enough) -> label (DoDress
pseudo-relevance labels of the training queries, never their judgments) -> train (``--method``) -> choose the
checkpoint on a pseudo-labelled dev set (the untrained model included) -> evaluate before / after
on the test split when it has qrels -> OUT/model (Hub folder), OUT/README.md, OUT/metrics.json.
Every stage is cached in a work folder beside OUT (a re-run redoes only what changed; a killed
training resumes from its last checkpoint)."""

from __future__ import annotations

import shlex
import sys

from ..cli import add_dtype_argument, add_prompt_arguments, finite_float, non_negative_int, positive_int


def _defaults(field: str) -> str:
    from ..adaptation.pipeline import METHOD_DEFAULTS

    return ", ".join(f"{m} {v[field]:g}" for m, v in METHOD_DEFAULTS.items() if field in v)


def _own_batches() -> str:
    from ..adaptation.pipeline import METHOD_DEFAULTS

    own = ", ".join(f"{m} {v['batch_size']}" for m, v in METHOD_DEFAULTS.items() if "batch_size" in v)
    return f"; {own}" if own else ""


def register(sub) -> None:
    from ..adaptation.methods import registered_methods
    from ..adaptation.pipeline import METHODS

    p = sub.add_parser("adapt", help="adapt a retriever to a corpus: label, train, select, evaluate, card",
                       description=__doc__)
    p.add_argument("--data", required=True, help="BEIR folder (corpus.jsonl, queries.jsonl; qrels optional; corpus.jsonl "
                   "alone: queries are generated), or a folder of documents: ingested first, cached (hf-dr ingest)")
    p.add_argument("--model", required=True, help="the retriever to adapt (any hf-dr encoder; an MLM checkpoint "
                   "for --method cai; a trained DDR REM for --method ddr)")
    p.add_argument("--method", required=True, choices=list(METHODS), help="; ".join(f"{k}: {v}" for k, v in METHODS.items()))
    p.add_argument("--output", required=True, help="output folder (written whole at the end; must be new or empty)")
    p.add_argument("--kind", default="auto", choices=["auto", "dense", "sparse"],
                   help="how to read --model: auto (a saved hf-dr model as it is, anything else dense), dense, "
                        "or sparse (an MLM checkpoint such as splade-tiny as SPLADE; cai always reads it so)")
    p.add_argument("--split", default="train", help="training query split (default train; test is refused). "
                   "Without qrels/SPLIT.tsv every query not judged in qrels/test.tsv is a training query")
    p.add_argument("--queries", default="auto", choices=["auto", "generate", "fill"],
                   help="the training queries: auto (the folder's own; generated from the corpus when it has no "
                        "queries.jsonl), generate (generated even when it has queries, which are then never read) "
                        "or fill (the folder's own plus generated ones up to --num-queries' default; the dev set "
                        "from the folder's own; measured, not a default: docs/adapt.md)")
    p.add_argument("--generator", default=None,
                   help="generated queries: span | terms | cloze | doc2query:ID (default span: wins or ties on three "
                        "corpora with cai, docs/adapt.md \"Defaults across corpora\")")
    p.add_argument("--queries-per-doc", type=positive_int, default=None,
                   help="generated queries per document (default: one for each of --num-queries documents drawn "
                        "by --seed; above the corpus size GPL's ceil(--num-queries / |corpus|))")
    p.add_argument("--num-queries", type=positive_int, default=None,
                   help="generated queries in all (default: max-steps x batch-size + 5 x dev-queries, as many as "
                        "the training reads triplets; with --queries fill, that less the folder's own)")
    p.add_argument("--labels", default=None, metavar="DIR", help="re-use a `hf-dr label` output folder (train + dev) "
                   "instead of labelling")
    p.add_argument("--index", dest="bm25_index", default=None, metavar="IDX",
                   help="a saved BM25 index of the corpus (hf-dr index --data DIR --backend bm25) for the label "
                        "stage's BM25 candidates: nothing re-indexed (refused when it indexes another corpus)")
    p.add_argument("--max-steps", type=positive_int, default=None,
                   help=f"training steps (default per method, its measured row: {_defaults('max_steps')}; "
                        "the papers: 10000 on a GPU)")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help=f"training rows per step (default per method, its measured row: 8{_own_batches()})")
    p.add_argument("--learning-rate", type=finite_float, default=None,
                   help=f"default per method, its measured row: {_defaults('learning_rate')} (DoDress's paper: "
                        "2e-6 for 10k steps)")
    p.add_argument("--max-length", type=positive_int, default=None, help="max tokens (default: the model's own)")
    p.add_argument("--eval-steps", type=positive_int, default=None,
                   help="checkpoint + dev evaluation every N steps (default max-steps / 5, at least 100: a shorter "
                        "run is evaluated at its end; at most 10 evaluations, a smaller N is raised to max-steps / 10)")
    p.add_argument("--dev-queries", type=positive_int, default=50,
                   help="training queries held out for the pseudo-labelled dev set (each: its teacher's top 10 + 10 "
                        "hard negatives)")
    p.add_argument("--negatives", default="simans", choices=["bm25", "simans", "random"])
    p.add_argument("--k", type=positive_int, default=1, help="pseudo-positives per query")
    p.add_argument("--m", type=positive_int, default=10, help="negatives per pseudo-positive")
    p.add_argument("--bm25-top", type=positive_int, default=100, help="BM25 candidates reranked by the teacher")
    p.add_argument("--max-queries", type=positive_int, default=None, help="label only the first N queries")
    p.add_argument("--teacher", default="fusion", help="fusion | cross-encoder:ID | monot5:ID (default fusion)")
    p.add_argument("--dense-teacher", default=None,
                   help="the dense model of the fusion teacher and SimANS (default: --model when it is dense, "
                        "else all-MiniLM-L6-v2: the quickstart's model)")
    add_dtype_argument(p, "encoding (labels, dev set, test) and training (the Trainer's mixed precision)")
    add_prompt_arguments(p, "the model (labels, training, dev set, test)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", default=None, help="stage cache and checkpoints (default: .OUTPUT.work beside it)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --output once the new one is complete")
    for method in registered_methods():
        add_option_arguments(p, method)
    p.set_defaults(func=run)


def add_option_arguments(parser, method) -> None:
    """An argument group of ``method``'s own options (:attr:`~hf_dr.adaptation.methods.Method.Options`),
    one flag per field: its ``option`` metadata says the flag, the help and how the text is read
    (every flag defaults to None: not given, the method's default applies)."""
    import argparse

    from ..adaptation.methods import option_fields

    fields = option_fields(method)
    if not fields:
        return
    group = parser.add_argument_group(f"--method {method.name}", method.description)
    for f in fields:
        meta = f.metadata
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        kw = {"dest": f.name, "default": None, "help": meta.get("help") or None}
        if meta.get("metavar"):
            kw["metavar"] = meta["metavar"]
        if f.type in ("bool", bool):
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = _option_type(f)
        group.add_argument(flag, **kw)


def _option_type(f):
    """The argparse ``type`` of an option field: its ``parse``, a whole number at least its
    ``minimum``, a finite number for a float, else the text."""
    import argparse

    meta = f.metadata
    if meta.get("parse") is not None:
        parse = meta["parse"]

        def parsed(text: str):
            try:
                return parse(text)
            except ValueError as e:
                raise argparse.ArgumentTypeError(str(e)) from None

        return parsed
    if meta.get("minimum") is not None:
        return positive_int if meta["minimum"] >= 1 else non_negative_int
    return finite_float if f.type in ("float", float) else str


def config_from_args(args, command: str | None = None):
    """The :class:`~hf_dr.adaptation.config.AdaptConfig` of the parsed flags: each flag's ``dest`` is
    the field it sets; every method's option flags given go to ``options`` (another method's are
    refused by :func:`~hf_dr.adaptation.plan.resolve`)."""
    import dataclasses

    from ..adaptation.methods import option_fields, registered_methods
    from ..adaptation.pipeline import AdaptConfig

    common = {f.name: getattr(args, f.name) for f in dataclasses.fields(AdaptConfig) if hasattr(args, f.name)}
    options = {f.name: getattr(args, f.name) for m in registered_methods() for f in option_fields(m)
               if getattr(args, f.name, None) is not None}
    return AdaptConfig(**{**common, "command": command, "show_progress_bar": False, "options": options})


def run(args) -> int:
    from ..adaptation.pipeline import AdaptError, adapt
    from ..adaptation.verdict import word_line
    from ..cli import CLIError

    from .ingest import documents_as_data

    args.data = documents_as_data(args.data, args.model, document_prompt=args.document_prompt)
    argv = sys.argv[sys.argv.index("adapt") + 1:] if "adapt" in sys.argv else None
    command = "hf-dr adapt " + " ".join(shlex.quote(a) for a in argv) if argv is not None else None
    cfg = config_from_args(args, command)
    try:
        res = adapt(cfg, progress=print)
    except AdaptError as e:
        raise CLIError(str(e)) from None
    m = res.metrics
    print()
    if m["labelled_evaluation"]:
        from ..adaptation.pipeline import results_table

        print(results_table(m))
        print(f"paired t-test on nDCG@10: p = {m['p_value']:.4g}")
        if m.get("last_checkpoint"):
            print(f"the last checkpoint (step {m['last_checkpoint']['step']}, not selected) would score test nDCG@10 "
                  f"{m['last_checkpoint']['ndcg@10']:.4f}")
        if m["below_zero_shot"]:
            print(f"WARNING: the adapted model scores below the zero-shot model on the test split "
                  f"({m['after']['ndcg@10']:.4f} < {m['before']['ndcg@10']:.4f})")
    else:
        print("no labelled evaluation was possible (no qrels/test.tsv): the pseudo-labelled dev set is the only "
              f"yardstick; dev nDCG@10 {m['dev']['0']:.4f} (step 0) -> {m['selected_dev_ndcg@10']:.4f} "
              f"(step {m['selected_step']})")
    print(f"verdict: {m['verdict_sentence']}")
    print(word_line(m["verdict_word"]))
    if m.get("unverified"):
        print(f"the trained checkpoint (step {m['unverified']['step']}) is in {res.output / 'unverified'}: unverified, "
              "it may be worse than the starting model in model/")
    return 0
