"""``hf-dr ingest DIR --output CORPUS``: a folder of files (recursively: PDF, DOCX, HTML, Markdown,
plain text; JSONL / CSV / Parquet rows with --text-column) becomes a BEIR corpus folder of passages
that fit the model that will read them. Each line of CORPUS/corpus.jsonl is a BEIR corpus line with
its source::

    {"_id": "<relative path>#<n>", "title": ..., "text": ..., "metadata": {"source": "<relative path>",
     "page": <int or null>, "start": <char>, "end": <char>}}

Passages are cut on paragraph and sentence boundaries to at most the model's window as its own
tokenizer counts it (--model: its special tokens, document prompt, the passage's title — the
document's title and heading path — and text), or --max-tokens words without a model: a paragraph
that fits is one passage (--pack-below packs short ones), a longer one is cut into pieces that share
up to --overlap tokens. CORPUS/manifest.jsonl says what became of every file
(passages, pages, or skipped and why: empty, binary, corrupt or encrypted PDF, too large, a symbolic
link out of DIR — refused — or a loop). Bad files never stop the run; the exit status is 2 only
when nothing usable was found. Streamed, resumable (run the same command again after a crash,
``kill -9`` included: the result equals an uninterrupted run's) and split over --workers processes,
as ``hf-dr encode``.

DIR may instead be a dataset of ``datasets.load_dataset`` — a Hub dataset id (``owner/name``), or,
with --load-dataset, a local dataset folder or data file — read with --text-column (--split,
--dataset-config): each row is a document, its rows staged once in the cache, then cut as a table's.
Needs the ``documents`` extra for PDF, DOCX and HTML: pip install "hf-dr[documents]"."""

from __future__ import annotations

from ..cli import add_resumable_output_arguments, non_negative_int, positive_int


def register(sub) -> None:
    from ..ingest import DEFAULT_MAX_FILE_SIZE, DEFAULT_OVERLAP, DEFAULT_PACK_BELOW, DEFAULT_SHARD_SIZE

    p = sub.add_parser("ingest", help="a folder of documents -> a BEIR corpus of passages (sharded, resumable)",
                       description=__doc__)
    p.add_argument("dir", metavar="DIR", help="the folder of files (read recursively; nothing outside it is read), "
                                              "or a Hub dataset id (with --text-column)")
    p.add_argument("--output", required=True, help="the corpus folder (OUTPUT/corpus.jsonl, manifest.jsonl, ingest.json)")
    p.add_argument("--model", default=None, help="the model that will read the passages: its tokenizer counts "
                                                 "tokens, its max length is the window")
    p.add_argument("--max-tokens", type=positive_int, default=None,
                   help="the window in tokens (with --model: at most its max length; without: whitespace words)")
    p.add_argument("--overlap", type=non_negative_int, default=None,
                   help=f"tokens shared by consecutive passages of a section, whole sentences (default {DEFAULT_OVERLAP}, "
                        "at most an eighth of the window)")
    p.add_argument("--pack-below", type=non_negative_int, default=DEFAULT_PACK_BELOW, metavar="TOKENS",
                   help="pack whole paragraphs into one passage while it holds fewer tokens than this (default "
                        f"{DEFAULT_PACK_BELOW}: each paragraph that fits is its own passage; raise it for files with "
                        "many one-line paragraphs; docs/ingest.md)")
    p.add_argument("--text-column", default=None, help="JSONL / CSV / Parquet files: the column holding the text "
                                                       "(without it such files are skipped, said so)")
    p.add_argument("--id-column", default=None, help="tables: the row id column (default _id or id, else path:row)")
    p.add_argument("--title-column", default="title", help="tables: the title column when there is one (default title)")
    p.add_argument("--load-dataset", action="store_true",
                   help="read DIR with datasets.load_dataset (implied for a Hub dataset id): a local dataset folder "
                        "or data file; needs --text-column")
    p.add_argument("--split", default="train", help="the dataset's split (Hub dataset / --load-dataset; default train)")
    p.add_argument("--dataset-config", default=None, metavar="NAME", help="the dataset's configuration, if it has several")
    p.add_argument("--max-file-size", type=positive_int, default=DEFAULT_MAX_FILE_SIZE >> 20, metavar="MIB",
                   help=f"document files larger than this many MiB are skipped (default {DEFAULT_MAX_FILE_SIZE >> 20})")
    p.add_argument("--workers", type=positive_int, default=1, help="processes sharing the files (default 1)")
    p.add_argument("--shard-size", type=positive_int, default=DEFAULT_SHARD_SIZE,
                   help=f"files per shard (default {DEFAULT_SHARD_SIZE}): the unit of resumption")
    p.add_argument("--document-prompt", default=None, metavar="TEXT",
                   help="the prompt the model prepends to documents, counted in the window (default: the model's own)")
    add_resumable_output_arguments(p, "DIR or the --model folder")
    p.set_defaults(func=run)


#: the window, in words, of documents ingested for a retriever without a model (BM25)
WORDS_WITHOUT_A_MODEL = 256


def model_window(model: str | None, max_tokens: int | None, document_prompt: str | None) -> tuple[str | None, int, str]:
    """(tokenizer, window, document prompt) of --model / --max-tokens / --document-prompt: the model's
    max length and prompt as its encodings use them (--max-tokens may only lower the window)."""
    from ..cli import CLIError

    if model is None:
        if max_tokens is None:
            raise CLIError("give --model (the model that will read the passages) or --max-tokens")
        return None, max_tokens, document_prompt or ""
    from ..models import load_encoder

    settings = load_encoder(model).encoding_settings(is_query=False)
    window, prompt = settings["max_length"], settings["prefix"]
    if max_tokens is not None:
        if max_tokens > window:
            raise CLIError(f"--max-tokens {max_tokens} exceeds the window of {model} ({window} tokens): "
                           "its passages would be cut when encoded")
        window = max_tokens
    return model, window, prompt if document_prompt is None else document_prompt


def documents_as_data(data: str, model: str | None, *, show_progress_bar: bool = True,
                      document_prompt: str | None = None) -> str:
    """``--data`` of ``hf-dr evaluate`` / ``adapt``: a folder of documents (a folder without
    corpus.jsonl; its queries.jsonl and qrels/ are read as such) is ingested first into passages for
    ``model`` (BM25: 256 words), cached by content (:func:`hf_dr.ingest.ingest_stage`); returns the BEIR
    folder to read (``data`` itself when it is one, or a Hub id)."""
    from pathlib import Path

    from ..cli import CLIError
    from ..ingest import ingest_stage

    from ..ingest import BEIR_FILES

    p = Path(data).expanduser()
    if not p.is_dir() or (p / "corpus.jsonl").is_file() or \
            not any(c.name not in BEIR_FILES and not c.name.startswith(".") for c in p.iterdir()):
        return data  # a BEIR folder (or a broken one: its own error), a Hub id
    tokenizer, window, prompt = model_window(model, None if model else WORDS_WITHOUT_A_MODEL, document_prompt)
    out, r = ingest_stage(p, tokenizer=tokenizer, max_tokens=window, prompt=prompt, show_progress_bar=show_progress_bar)
    if not r["passages"]:
        raise CLIError(f"{data} holds no corpus.jsonl and no usable document: {r['files']} file(s), all skipped "
                       f"(see {out / 'manifest.jsonl'})")
    print(f"{data}: a folder of documents, ingested into {r['passages']} passages from {r['ingested']} of {r['files']} "
          f"file(s) ({out}, cached; hf-dr ingest)")
    return str(out)


def _source(args) -> tuple:
    """What reads DIR: ``(ingest_folder, {})`` for a folder of files, ``(ingest_dataset, {its options})``
    for a dataset of datasets.load_dataset (a Hub id; a local path with --load-dataset)."""
    from pathlib import Path

    from ..cli import CLIError
    from ..data.beir import looks_local
    from ..ingest import ingest_dataset, ingest_folder

    if args.load_dataset or (not Path(args.dir).exists() and not looks_local(args.dir)):
        if not args.text_column:
            raise CLIError(f"{args.dir} is read as a dataset (datasets.load_dataset): give --text-column, "
                           "the column holding each row's text")
        return ingest_dataset, {"source": args.dir, "split": args.split, "config": args.dataset_config}
    if not Path(args.dir).is_dir():
        raise CLIError(f"{args.dir} is not a folder (nor a Hub dataset id)")
    return ingest_folder, {"src": args.dir}


def run(args) -> int:
    from pathlib import Path

    from ..cli import CLIError
    from ..ingest import IngestError
    from ..io import check_output_folder, local_inputs, output_folder, partial_folder

    out = Path(args.output)
    inputs = local_inputs(args.dir, args.model)
    check_output_folder(out, overwrite=args.overwrite, inputs=inputs)  # before reading anything
    ingest, source = _source(args)
    tokenizer, window, prompt = model_window(args.model, args.max_tokens, args.document_prompt)
    try:
        with output_folder(out, overwrite=args.overwrite, inputs=inputs, work=partial_folder(out)) as tmp:
            r = ingest(output=tmp, tokenizer=tokenizer, max_tokens=window, overlap=args.overlap,
                       pack_below=args.pack_below, prompt=prompt, text_column=args.text_column, id_column=args.id_column,
                       title_column=args.title_column, max_file_size=args.max_file_size << 20,
                       shard_size=args.shard_size, workers=args.workers,
                       show_progress_bar=not args.no_progress, restart=args.overwrite, **source)
    except IngestError as e:
        if "begun with other settings" in str(e):
            raise CLIError(f"{e} (or pass --overwrite to start again)") from None
        raise
    why = "; ".join(f"{k}: {v}" for k, v in sorted(r["skipped_by_reason"].items(), key=lambda kv: -kv[1]))
    counted = f"{window} tokens of {tokenizer}" if tokenizer else f"{window} words"
    if not r["passages"]:
        raise CLIError(f"nothing usable in {args.dir}: {r['files']} file(s), all skipped ({why}); "
                       f"see {out / 'manifest.jsonl'}")
    pages = f", {r['pages']} PDF page(s)" if r["pages"] else ""
    print(f"wrote {out / 'corpus.jsonl'}: {r['passages']} passages (at most {counted}) from {r['ingested']} of "
          f"{r['files']} file(s){pages}")
    if r["skipped"]:
        print(f"skipped {r['skipped']} file(s) ({why}): see {out / 'manifest.jsonl'}")
    return 0
