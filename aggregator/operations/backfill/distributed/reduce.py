"""The ``reduce`` task (:func:`reduce_bucket_task`): every amount for the aggregates of one hash
bucket, summed and applied with the exactly-once writer under one checkpoint of its own."""

from __future__ import annotations

import json
import time
from typing import Any

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

__all__ = ["join_writers", "reduce_bucket_task"]


def join_writers(job: Job) -> list[str]:
    """The joins' writers, in order: ``j0`` .. ``j<join_buckets - 1>``."""
    return [f"j{n}" for n in range(job.settings.join_buckets)]


def reduce_bucket_task(job: Job, bucket: int, *, stop_at: float) -> bool:
    """Sum the amounts the scan and the joins committed for the aggregates of ``bucket`` and
    apply them, at most ``carry_keys`` aggregates at a time, each time as the next sequence
    number of the pseudo-shard ``backfill.<id>.<bucket>`` (so every aggregate carries one
    checkpoint entry of the backfill's, however many segments counted it). Before applying,
    the task records which records it sums; a killed invocation's successor sums them again
    and applies them again, which the checkpoint makes harmless. Returns whether the bucket is
    done.

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
    writers = job.progresses([*segment_writers(job), *join_writers(job)])
    if not all(p.done for p in writers.values()):
        raise ConfigError(f"backfill {job.backfill_id}: reduce {bucket} before the joins are done")
    keys = job.committed_keys("part", bucket, writers)
    writer = make_writer(
        "exactly-once",
        job.table.client,
        job.table_name,
        layout=job.layout,
        max_workers=8,
        clock=job.clock,
    )
    pseudo_shard = f"backfill.{job.backfill_id}.{bucket}"
    applied = int(state.get("applied", 0))
    upto = int(state.get("upto", 0))
    keys_written = int(state.get("aggregates", 0))

    def save(*, pending_from: int | None = None, done: bool = False) -> None:
        job.put(
            key,
            {
                "state": {
                    "S": json.dumps(
                        {
                            "applied": applied,
                            "upto": upto,
                            "pending_from": pending_from,
                            "aggregates": keys_written,
                            "records": len(keys),
                            "done": done,
                        }
                    )
                }
            },
        )

    def apply(amounts: Contribution, sequence: int) -> None:
        nonlocal keys_written
        amounts = {ref: a for ref, a in amounts.items() if a[0] or a[1]}
        if not amounts:
            return
        result = writer.apply(amounts_batch(job.rules, amounts, sequence), shard_id=pseudo_shard)
        if result.retry_from is not None:
            raise ConfigError(f"backfill write failed: {'; '.join(result.errors[:3])}")
        keys_written += len(amounts)

    def summed(start: int, end: int) -> Contribution:
        total: Contribution = {}
        for _, blob in job.blobs(keys[start:end]):
            add_contribution(total, decode_amounts(blob))
        return total

    try:
        pending = state.get("pending_from")
        if pending is not None:  # recorded, perhaps applied: apply again (a no-op where it was)
            apply(summed(int(pending), upto), applied)
            save()
        while upto < len(keys):
            if time.monotonic() >= stop_at:
                return False
            total: Contribution = {}
            end = upto
            for _, blob in job.blobs(keys[upto:]):
                add_contribution(total, decode_amounts(blob))
                end += 1
                if len(total) >= job.settings.carry_keys:
                    break
            start, upto, applied = upto, end, applied + 1
            save(pending_from=start)
            apply(total, applied)
            save()
        save(done=True)
        job.add_stats(reduces_done=1, aggregates=keys_written)
        return True
    finally:
        writer.close()
