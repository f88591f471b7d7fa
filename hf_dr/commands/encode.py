"""``hf-dr encode``: encode a corpus once into an embeddings folder (shards + manifest), streaming
(memory does not grow with the corpus), resumable (run the same command again after a crash:
finished shards are kept in a hidden ``.OUTPUT.partial`` folder beside the output, which is renamed
to OUTPUT once every shard is done — OUTPUT is a complete folder or absent) and parallel
(``accelerate launch --num_processes N -m hf_dr.cli encode ...`` or ``torchrun``: each process
encodes its own shards). ``hf-dr evaluate --embeddings``,
``hf-dr label --embeddings`` and ``EncoderRetriever.from_embeddings`` use the folder."""

from __future__ import annotations

from ..cli import (add_dtype_argument, add_prompt_arguments, add_resumable_output_arguments, apply_prompt_arguments,
                   positive_int)


def register(sub) -> None:
    p = sub.add_parser("encode", help="encode a corpus into an embeddings folder (sharded, resumable)",
                       description=__doc__)
    p.add_argument("--data", required=True, help="BEIR folder (corpus.jsonl is streamed) or Hub dataset id")
    p.add_argument("--model", required=True, help="encoder folder or Hub id")
    p.add_argument("--output", required=True, help="the embeddings folder")
    p.add_argument("--kind", choices=("auto", "dense", "sparse"), default="auto",
                   help="sparse: an MLM checkpoint as SPLADE (auto: the folder's own model)")
    p.add_argument("--max-length", type=positive_int, default=None, help="max document tokens (default: the model's)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--shard-size", type=positive_int, default=None,
                   help="documents per shard (default 8192): the unit of resumption and of memory")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: a GPU when there is one; "
                                                  "under accelerate each process its own)")
    add_dtype_argument(p)
    add_prompt_arguments(p)
    add_resumable_output_arguments(p, "--data or --model")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from ..cli import CLIError, is_other_process, process_device
    from ..embeddings import EmbeddingsError, encode_to_folder
    from ..encoding import DEFAULT_CHUNK_SIZE
    from ..io import check_output_folder, local_inputs, output_folder, partial_folder
    from ..models import load_encoder

    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be at least 1 (got {args.batch_size})")
    if args.max_length is not None and args.max_length < 1:
        raise CLIError(f"--max-length must be at least 1 (got {args.max_length})")
    if args.shard_size is not None and args.shard_size < 1:
        raise CLIError(f"--shard-size must be at least 1 (got {args.shard_size})")
    out = Path(args.output)
    inputs = local_inputs(args.data, args.model)
    check_output_folder(out, overwrite=args.overwrite, inputs=inputs)  # before loading anything
    work = partial_folder(out)
    model = apply_prompt_arguments(load_encoder(args.model, kind=args.kind), args)
    device = process_device(args.device)
    kwargs = dict(model_name=args.model, batch_size=args.batch_size, max_length=args.max_length,
                  shard_size=args.shard_size or DEFAULT_CHUNK_SIZE, device=device, dtype=args.dtype,
                  show_progress_bar=not args.no_progress, restart=args.overwrite)
    if is_other_process():
        # another process: its shards go into the work folder; rank 0 renames it once all are done
        encode_to_folder(model, args.data, work, **kwargs)
        return 0
    try:
        with output_folder(out, overwrite=args.overwrite, inputs=inputs, work=work) as tmp:
            emb = encode_to_folder(model, args.data, tmp, **kwargs)
    except EmbeddingsError as e:
        if "begun with other settings" in str(e):  # the unfinished work of another command
            raise CLIError(f"{e} (or pass --overwrite to start again)") from None
        raise
    if emb is not None:
        m = emb.manifest
        kind = "sparse CSR" if m["sparse"] else f"dense float32 x {m['dim']}"
        print(f"wrote {args.output}: {m['n_docs']} documents, {kind}, {m['n_shards']} shard(s), "
              f"max length {m['max_length']}")
    return 0
