"""Sharded, resumable output folders: the one machinery behind ``hf-dr encode`` (embeddings folders,
:mod:`hf_dr.embeddings`) and ``hf-dr generate-queries`` (generated-query folders,
:mod:`hf_dr.generation`). A folder is cut into shards, each written atomically with a JSON marker;
a process under a launcher takes the shards ``s % world_size == rank`` (or, without a launcher,
:func:`run_processes` starts the processes itself); a re-run skips the finished shards, so a crash
(``kill -9`` included) loses at most the shard being written."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["ShardedFolderError", "write_atomic", "write_json", "read_json_checked", "shard_name", "dist",
           "shards_to_do", "all_shards_done", "run_processes"]


class ShardedFolderError(ValueError):
    """A sharded folder that cannot be read or finished (damaged, or shards missing)."""


def write_atomic(path: Path, write) -> None:
    """``write(tmp)`` then rename ``tmp`` to ``path``: the file is whole or absent."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def write_json(path: Path, obj) -> None:
    write_atomic(path, lambda p: p.write_text(json.dumps(obj, indent=1)))


def read_json_checked(path: Path, error: type = ShardedFolderError) -> dict:
    """The JSON object of a folder's own file; ``error`` (naming the file) when it is damaged (not
    JSON, not an object). Optional files whose absence or damage means "nothing" are read with
    :func:`hf_dr.io.read_json_or_empty`."""
    try:
        obj = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON ({e.msg}, line {e.lineno}): the folder is damaged; "
                    "run the command again into a new folder") from None
    if not isinstance(obj, dict):
        raise error(f"{path}: expected a JSON object")
    return obj


def shard_name(i: int) -> str:
    return f"{i:05d}"


def dist() -> tuple[int, int, object]:
    """(rank, world size, accelerate state or None) — a launcher sets WORLD_SIZE."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import PartialState

        state = PartialState()
        return state.process_index, state.num_processes, state
    return 0, 1, None


def shards_to_do(out: Path, n_shards: int, rank: int, world_size: int, done) -> list[int]:
    """This process's shards (``s % world_size == rank``) that ``done(s)`` says are not finished."""
    mine = [i for i in range(n_shards) if i % world_size == rank]
    todo = [i for i in mine if not done(i)]
    if len(todo) < len(mine):
        logger.warning("%s: resuming, %d of %d shard(s) of this process already done", out,
                       len(mine) - len(todo), len(mine))
    return todo


def all_shards_done(out: Path, n_shards: int, done, state, rank: int, error: type = ShardedFolderError) -> bool:
    """After this process's shards: wait for the other processes (under a launcher); True on rank 0
    once every shard is done (``error`` when one is not), False on the other ranks (rank 0 finishes
    the folder)."""
    if state is not None:
        state.wait_for_everyone()
    if rank != 0:
        return False
    missing = [i for i in range(n_shards) if not done(i)]
    if missing:
        raise error(f"{out}: {len(missing)} shard(s) not done ({missing[:5]}...): run the "
                    "command again (finished shards are kept)")
    return True


def run_processes(target, kwargs: dict, n: int) -> None:
    """Run ``target(**kwargs, rank=r, world_size=n)`` for ``r`` in ``1..n-1`` in fresh processes (spawned:
    no state of this one is inherited) and ``r = 0`` in this one; return once all are done.
    :class:`ShardedFolderError` when a process failed (its shards are then not done: a re-run does them)."""
    if n <= 1:
        target(**kwargs, rank=0, world_size=1)
        return
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, kwargs={**kwargs, "rank": r, "world_size": n}, daemon=True)
             for r in range(1, n)]
    for p in procs:
        p.start()
    try:
        target(**kwargs, rank=0, world_size=n)
    finally:
        for p in procs:
            p.join()
    failed = [r for r, p in enumerate(procs, 1) if p.exitcode != 0]
    if failed:
        raise ShardedFolderError(f"process(es) {failed} of {n} failed (exit status "
                                 f"{[procs[r - 1].exitcode for r in failed]}): run the command again "
                                 "(finished shards are kept)")
