"""The ``reduce`` task (:func:`reduce_bucket_task`): every amount for the aggregates of one hash
bucket, summed and applied with the exactly-once writer under one checkpoint of its own, each
aggregate written once."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from aggregator.core.deltas import AggregateRef
from aggregator.core.exceptions import ConfigError
from aggregator.dynamodb.modes import make_writer
from aggregator.operations.backfill.distributed.entries import (
    Contribution,
    add_contribution,
    amounts_batch,
    decode_amounts,
)
from aggregator.operations.backfill.distributed.job import Job
from aggregator.operations.backfill.distributed.join import segment_writers

__all__ = ["REAPPLY_SECONDS", "join_writers", "reduce_bucket_task", "residue"]

REAPPLY_SECONDS = 24 * 3600
"""How old a reducer's pass may be when a later invocation applies it again: the exactly-once
writer's checkpoints, which make the second application a no-op, are pruned 25 hours after they
were written (:mod:`aggregator.dynamodb.checkpoint`, "Pruning")."""


def join_writers(job: Job) -> list[str]:
    """The joins' writers, in order: ``j0`` .. ``j<join_buckets - 1>``."""
    return [f"j{n}" for n in range(job.settings.join_buckets)]


def residue(ref: AggregateRef, modulus: int) -> int:
    """Which pass of a reducer counts ``ref``: a hash of its batch key (another than the one
    that chose its bucket) modulo ``modulus``."""
    digest = hashlib.blake2b(ref.batch_key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % modulus


def reduce_bucket_task(job: Job, bucket: int, *, stop_at: float) -> bool:
    """Sum the amounts the scan and the joins committed for the aggregates of ``bucket`` and
    apply them, each aggregate once, under the pseudo-shard ``backfill.<id>.<bucket>`` (so every
    aggregate carries one checkpoint entry of the backfill's, however many segments counted it).

    The bucket's aggregates are summed in passes: with a modulus ``P`` (at first 1), pass ``r``
    sums the aggregates whose :func:`residue` is ``r``, reading all the bucket's records. A pass
    that meets more than ``carry_keys`` aggregates is dropped before anything of it is applied,
    and ``P`` doubles (the residues done stay done: ``r`` mod ``P`` done means ``r`` and
    ``r + P`` mod ``2P`` are). So memory holds at most ``carry_keys`` aggregates, and the reads
    are the bucket's records times the passes. Before applying a pass the task records it (its
    residue, modulus and sequence number); a killed invocation's successor sums it again and
    applies it again, which the checkpoint makes harmless. A pass the time budget cuts short is
    dropped and read again by the next invocation. Returns whether the bucket is done.

    Raises
    ------
    ConfigError
        When a segment or a join is not done, or a write keeps failing (run the task again).
    """
    key = job.key("reduce", bucket)
    item = job.get(key)
    state: dict[str, Any] = json.loads(item["state"]["S"]) if item else {}
    if state.get("done"):
        return True
    version = int(state.get("version", 0))
    writers = job.progresses([*segment_writers(job), *join_writers(job)])
    if not all(p.done for p in writers.values()):
        raise ConfigError(f"backfill {job.backfill_id}: reduce {bucket} before the joins are done")
    keys = job.committed_keys("part", bucket, writers)
    applied = int(state.get("applied", 0))
    modulus = int(state.get("modulus", 1))
    done: set[int] = set(state.get("residues_done", []))
    written = int(state.get("aggregates", 0))
    writer = make_writer(
        "exactly-once",
        job.table.client,
        job.table_name,
        layout=job.layout,
        max_workers=8,
        clock=job.clock,
    )
    pseudo_shard = f"backfill.{job.backfill_id}.{bucket}"

    def save(*, pending: int | None = None, finished: bool = False) -> None:
        """Record the reducer's state, on condition that no other invocation has since (a second
        invocation of the bucket then stops: :class:`_Overtaken`)."""
        nonlocal version
        data = {
            "applied": applied,
            "modulus": modulus,
            "residues_done": sorted(done),
            "pending": pending,
            "pending_at": int(job.clock()) if pending is not None else None,
            "aggregates": written,
            "records": len(keys),
            "done": finished,
            "version": version + 1,
        }
        if not job.put_if_version(key, {"state": {"S": json.dumps(data)}}, version):
            raise _Overtaken
        version += 1

    def one_pass(r: int, limit: int | None) -> Contribution | None:
        """The sums of residue ``r``; ``None`` when over ``limit`` aggregates or out of time."""
        total: Contribution = {}
        for _, blob in job.blobs(keys):
            found = decode_amounts(blob)
            add_contribution(total, {k: a for k, a in found.items() if residue(k, modulus) == r})
            if limit is not None and len(total) > limit:
                return None
            if time.monotonic() >= stop_at:
                return None
        return total

    def apply(amounts: Contribution, sequence: int) -> None:
        nonlocal written
        amounts = {ref: a for ref, a in amounts.items() if a[0] or a[1]}
        if not amounts:
            return
        result = writer.apply(amounts_batch(job.rules, amounts, sequence), shard_id=pseudo_shard)
        if result.retry_from is not None:
            raise ConfigError(f"backfill write failed: {'; '.join(result.errors[:3])}")
        written += len(amounts)

    try:
        pending = state.get("pending")
        if pending is not None and job.clock() - int(state["pending_at"]) > REAPPLY_SECONDS:
            raise ConfigError(
                f"backfill {job.backfill_id}: reduce {bucket} stopped while writing, over "
                f"{REAPPLY_SECONDS // 3600} hours ago: the checkpoints that would skip what it had "
                "written may be gone; run `aggregator reconcile --repair` on its rules after the "
                "backfill, or backfill them anew"
            )
        if pending is not None:  # recorded, perhaps applied: apply again (a no-op where it was)
            again = one_pass(int(pending), None)
            if again is None:
                return False
            apply(again, applied)
            done.add(int(pending))
            save()
        while len(done) < modulus:
            if time.monotonic() >= stop_at:
                return False
            r = min(set(range(modulus)) - done)
            total = one_pass(r, job.settings.carry_keys)
            if total is None:
                if time.monotonic() >= stop_at:
                    return False
                done = {d + k * modulus for d in done for k in (0, 1)}
                modulus *= 2
                save()
                continue
            applied += 1
            save(pending=r)
            apply(total, applied)
            done.add(r)
            save()
        save(finished=True)
        job.add_stats(reduces_done=1, aggregates=written)
        return True
    except _Overtaken:
        return False  # another invocation of this bucket moved on: the next call looks again
    finally:
        writer.close()


class _Overtaken(Exception):
    """Another invocation saved the reducer's state since this one read it."""
