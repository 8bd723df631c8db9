"""The ``join`` task (:func:`join_bucket_task`): for the items of one hash bucket, the
correction each first change owes (:mod:`aggregator.operations.backfill.distributed`)."""

from __future__ import annotations

import time

from aggregator.core.exceptions import ConfigError
from aggregator.operations.backfill.distributed.collector import COLLECTOR
from aggregator.operations.backfill.distributed.entries import (
    Contribution,
    add_contribution,
    decode_entries,
    subtract_contribution,
)
from aggregator.operations.backfill.distributed.flushing import FlushBuffer
from aggregator.operations.backfill.distributed.job import Job, new_attempt

__all__ = ["join_bucket_task", "segment_writers"]


def segment_writers(job: Job) -> list[str]:
    """The scan's writers, in order: ``s0`` .. ``s<segments - 1>``."""
    return [f"s{n}" for n in range(job.settings.segments)]


def join_bucket_task(job: Job, bucket: int, *, stop_at: float) -> bool:
    """Join the collector's B entries of ``bucket`` with the scan's S entries: per item with a
    B entry, its first one's contribution ``c(old)`` minus what the scan counted for it (its S
    entry, if the scan returned it with a contribution); write the sums as amounts for the
    reducers and commit. Returns whether the bucket is done (``False``: time ran out; the next
    invocation starts it again, having committed nothing).

    Memory: the bucket's B entries (the items the application changed during the backfill
    that hash to it) and one data record at a time.

    Raises
    ------
    ConfigError
        When the collector or a segment is not done (the state machine runs joins after both),
        or an item was returned twice by the scan.
    """
    writer = f"j{bucket}"
    progress = job.progress(writer)
    if progress.done:
        return True
    collector = job.progress(COLLECTOR)
    segments = job.progresses(segment_writers(job))
    if not collector.done or not all(p.done for p in segments.values()):
        raise ConfigError(
            f"backfill {job.backfill_id}: join {bucket} before the scan and the collector are done"
        )
    first: dict[bytes, Contribution] = {}
    changes = 0
    for _, blob in job.blobs(job.committed_keys("changed", bucket, {COLLECTOR: collector})):
        for digest, old in decode_entries(blob):
            changes += 1
            first.setdefault(digest, old)
        if time.monotonic() >= stop_at:
            return False
    corrections: Contribution = {}
    for old in first.values():
        add_contribution(corrections, old)
    seen: set[bytes] = set()
    for _, blob in job.blobs(job.committed_keys("scanned", bucket, segments)):
        for digest, scanned in decode_entries(blob):
            if digest in first:
                if digest in seen:
                    raise ConfigError(
                        f"backfill {job.backfill_id}: the scan returned an item twice"
                    )
                seen.add(digest)
                subtract_contribution(corrections, scanned)
        if time.monotonic() >= stop_at:
            return False
    buffer = FlushBuffer(job, "corrections")
    buffer.add_amounts(corrections)
    attempt = new_attempt()
    buffer.write(writer, 0, attempt)
    state = {"changed_items": len(first), "changes": changes, "scanned_changed": len(seen)}
    if job.commit(writer, progress, attempt, state, done=True):
        job.add_stats(joins_done=1, changed_items=len(first))
    return True
