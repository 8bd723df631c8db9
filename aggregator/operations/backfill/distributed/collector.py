"""The ``collect`` task (:func:`collect`): the backfill's one reader of the stream beside the
handler. It fences the shards first, then reads every shard after its fence, parents before
children, and hands each item's first change of the rules' contributions to the joins (B
entries), until it has read every record written before the scan ended."""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aggregator.core.exceptions import ConfigError
from aggregator.core.lifecycle import Fence
from aggregator.core.records import StreamRecord, pad_sequence_number
from aggregator.dynamodb.fences import FenceStore
from aggregator.dynamodb.streams import ready_shards
from aggregator.operations.backfill.distributed.flushing import FlushBuffer
from aggregator.operations.backfill.distributed.job import Job, Progress, new_attempt
from aggregator.operations.backfill.stream import fence_position, item_digest, read_shard

__all__ = ["COLLECTOR", "CollectOutcome", "collect"]

COLLECTOR = "c"
"""The collector's writer name (its progress item, its data records)."""
PASS_SECONDS = 2.0
"""A pass over the shards begins at most this often (each polls every open shard for its bound:
with the handler's four polls a second, a shard's readers stay within DynamoDB Streams' five
``GetRecords`` calls a second)."""
FLUSH_SECONDS = 60.0
"""The collector commits what it has read at least this often (and when it holds
``flush_items`` entries): a killed invocation reads at most this much again, and the progress
item grows by one attempt id (9 bytes) a commit with entries: 400 KB hold some 40,000 of them,
four weeks of flushes."""
FENCE_THREADS = 16
"""Shards read at once to fence them (each to its bound, from its oldest record)."""


@dataclass(frozen=True, slots=True)
class CollectOutcome:
    """``fenced``: every shard listed at the start is fenced (the scan may begin); ``done``:
    every record written before the scan ended is read (the joins may begin)."""

    fenced: bool
    done: bool


class _Collector:
    def __init__(self, job: Job, progress: Progress, stop_at: float) -> None:
        self.job = job
        self.progress = progress
        self.stop_at = stop_at
        self.fence_store = FenceStore(job.table.client, job.table_name, job.layout)
        self.rules = list(job.settings.rules)
        state = progress.state
        self.last: dict[str, str] = dict(state.get("last", {}))
        self.done: set[str] = set(state.get("done", []))
        self.records = int(state.get("records", 0))
        self.changes = int(state.get("changes", 0))
        self.failures = int(state.get("failures", 0))
        self.fenced_at: float | None = state.get("fenced_at")
        self.fencing: dict[str, str] = dict(state.get("fencing", {}))
        """Shards whose fence read stopped for time: where it goes on from."""
        self.ended_seen_at: float | None = state.get("ended_seen_at")
        self.iterators: dict[str, str | None] = {}
        self.fences: dict[str, Fence] = {}

    def state(self, *, final: bool = False) -> dict[str, Any]:
        return {
            "last": self.last,
            "done": sorted(self.done),
            "records": self.records,
            "changes": self.changes,
            "failures": self.failures + self.job.evaluation_failures,
            "fenced_at": self.fenced_at,
            "fencing": self.fencing,
            "ended_seen_at": self.ended_seen_at,
            "final": final,
        }

    def shards(self) -> list[dict[str, Any]]:
        """The listed shards; shards read to their end and no longer listed are forgotten (the
        progress item stays the size of what the stream lists)."""
        shards = self.job.table.source.shards()
        listed = {s["ShardId"] for s in shards}
        self.done &= listed
        self.last = {k: v for k, v in self.last.items() if k in listed}
        return shards

    def read(self, shard: dict[str, Any]) -> Iterable[dict[str, Any]]:
        table = self.job.table
        return read_shard(table.streams_client, table.stream_arn, shard, self.iterators, self.last)

    # -- fencing -------------------------------------------------------------------------------

    def fence_all(self) -> bool:
        """Fence every listed shard not fenced yet at the last record read from it (up to its
        bound), the shards read in parallel, each from its start; returns whether all are fenced
        (``False``: time ran out; the shards fenced stay fenced, the next invocation goes on)."""
        shards = [s for s in self.shards() if self.fence_of(s["ShardId"]) is None]
        if not shards:
            return True
        with ThreadPoolExecutor(max_workers=min(FENCE_THREADS, len(shards))) as pool:
            finished = list(pool.map(self._fence_one, shards))
        return all(finished)

    def _fence_one(self, shard: dict[str, Any]) -> bool:
        """Fence one shard, going on from where an earlier invocation's read of it stopped
        (:attr:`fencing`, committed with the collector's state)."""
        table, shard_id = self.job.table, shard["ShardId"]
        end, whole = fence_position(
            table.streams_client,
            table.stream_arn,
            shard,
            after=self.fencing.get(shard_id),
            stop_at=self.stop_at,
        )
        if not whole:
            if int(end):
                self.fencing[shard_id] = end
            return False
        self.fence_store.put_if_absent([Fence(r, shard_id, end, "backfill") for r in self.rules])
        self.fencing.pop(shard_id, None)
        return True

    def fence_of(self, shard_id: str) -> Fence | None:
        """The rules' fence in a shard, or ``None`` while the shard has none (a shard born after
        the fences is counted whole; cached once found).

        Raises
        ------
        ConfigError
            When the rules' fences differ in the shard (deployed at different times).
        """
        if shard_id in self.fences:
            return self.fences[shard_id]
        fences = {r: f for r, f in self.fence_store.get(shard_id).items() if r in self.rules}
        if not fences:
            return None
        if len({f.after for f in fences.values()}) > 1 or len(fences) != len(self.rules):
            raise ConfigError(
                f"rules {', '.join(sorted(self.rules))} were fenced at different points in "
                f"shard {shard_id} (deployed at different times): backfill them apart"
            )
        fence = next(iter(fences.values()))
        self.fences[shard_id] = fence
        return fence

    # -- collecting ----------------------------------------------------------------------------

    def one_pass(self, buffer: FlushBuffer) -> bool:
        """Read the listed shards up to their bounds (parents before children; a child once its
        parent is read to its end); returns whether the pass was whole (``False``: time ran
        out, or the buffer filled, before the last shard's bound; the positions reached are
        kept, and the next pass goes on from them)."""
        shards = self.shards()
        read: set[str] = set()
        while True:
            ready = [s for s in ready_shards(shards, self.done) if s["ShardId"] not in read]
            if not ready:
                return True
            for shard in ready:
                shard_id = shard["ShardId"]
                read.add(shard_id)
                if not self._read_shard(shard, buffer):
                    return False
                if self.iterators.get(shard_id, "") is None:
                    self.done.add(shard_id)  # its children are ready in the next round

    def _read_shard(self, shard: dict[str, Any], buffer: FlushBuffer) -> bool:
        """One shard from its position (its fence, the first time, when the backfill set it: a
        record's own sequence number) to its bound; returns whether it got there."""
        shard_id = shard["ShardId"]
        fence = self.fence_of(shard_id)
        after = "" if fence is None else fence.after
        unread = shard_id not in self.last
        if unread and fence is not None and fence.set_by == "backfill" and int(fence.after):
            self.last[shard_id] = str(int(fence.after))  # AFTER_SEQUENCE_NUMBER of that record
            unread = False
        for raw in self.read(shard):
            self.records += 1
            seq = pad_sequence_number(raw["dynamodb"]["SequenceNumber"])
            if unread:
                unread = False
                # read from the shard's oldest record: nothing after the handler's fence (the
                # sequence number before its first record's) may be missing
                if (
                    fence is not None
                    and fence.set_by == "handler"
                    and int(seq) > int(fence.after) + 1
                ):
                    raise ConfigError(
                        f"shard {shard_id}: the stream no longer holds records the backfill "
                        "needs (the collector fell a day behind); deploy the rules under new "
                        "names and backfill those"
                    )
            if seq > after:
                self.record(raw, buffer)
            if buffer.entry_count >= self.job.settings.flush_items or (
                time.monotonic() >= self.stop_at
            ):
                # stopped inside a page: the next read starts after the last record taken, not
                # at the next page's iterator (which would skip the rest of this page)
                self.iterators.pop(shard_id, None)
                return False
        return True

    def record(self, raw: dict[str, Any], buffer: FlushBuffer) -> None:
        """A B entry for a record that changes the rules' contributions."""
        record = StreamRecord(raw)
        keys = dict(record.keys)
        if self.job.layout.is_reserved(keys):
            return
        old = self.job.contributions(record.old_image)
        new = self.job.contributions(record.new_image)
        if old == new:
            return
        self.changes += 1
        buffer.add_entry(item_digest(keys, self.job.layout), old)


def collect(
    job: Job, *, stop_at: float, until_fenced: bool = False, sleep: Any = time.sleep
) -> CollectOutcome:
    """Fence the shards (once), then read the stream pass after pass until the monotonic
    clock passes ``stop_at`` or the collector is done: once the scan has ended (its ``ended``
    item), and ``stream_lag_seconds`` after this task first saw it, one last pass, which lists
    the shards and reads each to its bound, reads every record written before the scan ended.
    What is read is flushed and committed with the shards' positions every
    :data:`FLUSH_SECONDS` (or ``flush_items`` entries): a killed invocation's uncommitted reads
    are read again by the next. With ``until_fenced`` it returns as soon as the shards are
    fenced (the state machine's fence loop: the scan begins then).

    Raises
    ------
    ConfigError
        When the rules' fences differ in a shard, or the stream no longer holds records the
        backfill needs (older than 24 hours: the collector fell a day behind).
    """
    progress = job.progress(COLLECTOR)
    if progress.done:
        return CollectOutcome(True, True)
    collector = _Collector(job, progress, stop_at)
    if collector.fenced_at is None:
        if not collector.fence_all():
            # the fence reads cut short go on from where they stopped next time
            job.commit(COLLECTOR, progress, None, collector.state(), done=False)
            return CollectOutcome(False, False)
        collector.fenced_at = job.clock()
        if not job.commit(COLLECTOR, progress, None, collector.state(), done=False):
            return CollectOutcome(False, False)
        return CollectOutcome(True, False)
    if until_fenced:
        return CollectOutcome(True, False)
    attempt = new_attempt()
    lag = job.settings.stream_lag_seconds
    buffer = FlushBuffer(job, "changed")
    flushed_at = time.monotonic()
    while time.monotonic() < stop_at:
        began = time.monotonic()
        final = False
        if collector.ended_seen_at is None and job.get(job.key("ended")) is not None:
            collector.ended_seen_at = job.clock()
        if collector.ended_seen_at is not None:
            wait = collector.ended_seen_at + lag - job.clock()
            if wait > 0:
                if time.monotonic() + wait >= stop_at:
                    break
                sleep(wait)
            final = True
        whole = collector.one_pass(buffer)
        final = final and whole
        if final or not whole or time.monotonic() - flushed_at >= FLUSH_SECONDS:
            if not _flush(job, collector, buffer, attempt, final=final):
                return CollectOutcome(True, False)
            if final:
                return CollectOutcome(True, True)
            buffer = FlushBuffer(job, "changed")
            flushed_at = time.monotonic()
        # passes at most every PASS_SECONDS: each pass polls every open shard for its bound
        pause = PASS_SECONDS - (time.monotonic() - began) if whole else 0.0
        if pause > 0:
            sleep(min(pause, max(0.0, stop_at - time.monotonic())))
    _flush(job, collector, buffer, attempt, final=False)
    return CollectOutcome(True, False)


def _flush(
    job: Job, collector: _Collector, buffer: FlushBuffer, attempt: str, *, final: bool
) -> bool:
    """Write the buffer's B entries and commit them with the shards' positions (a flush
    without entries commits the positions alone); returns whether the commit held."""
    progress = collector.progress
    written: str | None = None
    if not buffer.empty:
        buffer.write(COLLECTOR, len(progress.attempts), attempt)
        written = attempt
    records, changes = collector.records, collector.changes
    before = progress.state
    if not job.commit(COLLECTOR, progress, written, collector.state(final=final), done=final):
        return False
    job.add_stats(
        stream_records=records - int(before.get("records", 0)),
        changes=changes - int(before.get("changes", 0)),
    )
    return True
