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
from aggregator.operations.backfill.distributed.job import Job, Progress, new_attempt

__all__ = ["JOIN_FLUSH_RECORDS", "join_bucket_task", "segment_writers"]

JOIN_FLUSH_RECORDS = 500
"""A join commits its corrections so far at least every this many scanned records read (and
when its time is up): a bucket too big for one invocation is joined over several."""


def segment_writers(job: Job) -> list[str]:
    """The scan's writers, in order: ``s0`` .. ``s<segments - 1>``."""
    return [f"s{n}" for n in range(job.settings.segments)]


def join_bucket_task(job: Job, bucket: int, *, stop_at: float) -> bool:
    """Join the collector's B entries of ``bucket`` with the scan's S entries: per item with a
    B entry, its first one's contribution ``c(old)`` minus what the scan counted for it (its S
    entry, if the scan returned it with a contribution). The corrections are additive, so they
    are written as they come, as amounts for the reducers: first every ``c(old)``, then, a few
    hundred scanned records at a time, minus the scanned contributions of those items; each
    flush is committed with the position reached, and the next invocation goes on from there.
    Returns whether the bucket is done. A bucket without B entries is done at once (the
    application changed none of its items during the backfill: nothing to correct).

    Memory: the bucket's first changes (the items the application changed during the backfill
    that hash to it) and a flush's corrections.

    Raises
    ------
    ConfigError
        When the collector or a segment is not done (the state machine runs joins after both).
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
    attempt = new_attempt()
    state = dict(progress.state)
    if not state.get("olds_added"):
        buffer = FlushBuffer(job, "corrections")
        for old in first.values():
            buffer.add_amounts(old)
        state = {"olds_added": True, "next": 0, "changed_items": len(first), "changes": changes}
        if not _commit(job, writer, progress, buffer, attempt, state, done=not first):
            return False
        if not first:
            job.add_stats(joins_done=1)
            return True
    keys = job.committed_keys("scanned", bucket, segments)
    position = int(state["next"])
    scanned: Contribution = {}
    read = 0
    for _, blob in job.blobs(keys[position:]):
        for _, contribution in decode_entries(blob, wanted=first):
            add_contribution(scanned, contribution)
        position += 1
        read += 1
        out_of_time = time.monotonic() >= stop_at
        if position == len(keys) or read >= JOIN_FLUSH_RECORDS or out_of_time:
            buffer = FlushBuffer(job, "corrections")
            negated: Contribution = {}
            subtract_contribution(negated, scanned)
            buffer.add_amounts(negated)
            state = {**state, "next": position}
            done = position == len(keys)
            if not _commit(job, writer, progress, buffer, attempt, state, done=done):
                return False
            if done:
                job.add_stats(joins_done=1, changed_items=len(first))
                return True
            if out_of_time:
                return False
            scanned, read = {}, 0
    # no scanned record at all (position was already at the end)
    if job.commit(writer, progress, None, state, done=True):
        job.add_stats(joins_done=1, changed_items=len(first))
    return True


def _commit(
    job: Job,
    writer: str,
    progress: Progress,
    buffer: FlushBuffer,
    attempt: str,
    state: dict[str, object],
    *,
    done: bool,
) -> bool:
    """Write the buffer (if it holds anything) as the writer's next flush and commit it with
    ``state``; returns whether the commit held (another invocation may have committed first)."""
    written: str | None = None
    if not buffer.empty:
        buffer.write(writer, len(progress.attempts), attempt)
        written = attempt
    return job.commit(writer, progress, written, dict(state), done=done)
