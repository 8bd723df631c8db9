"""The ``collect`` task (:func:`collect`): the backfill's one reader of the stream beside the
handler. It fences the shards first, then reads every shard after its fence, parents before
children, and hands each item's first change of the rules' contributions to the joins (B
entries), until it has read every record written before the scan ended."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aggregator.core.exceptions import ConfigError
from aggregator.core.lifecycle import Fence
from aggregator.core.records import StreamRecord, pad_sequence_number
from aggregator.dynamodb.fences import FenceStore
from aggregator.dynamodb.streams import parents_first
from aggregator.operations.backfill.distributed.flushing import FlushBuffer
from aggregator.operations.backfill.distributed.job import Job, Progress, new_attempt
from aggregator.operations.backfill.stream import item_digest, read_shard

__all__ = ["COLLECTOR", "CollectOutcome", "collect"]

COLLECTOR = "c"
"""The collector's writer name (its progress item, its data records)."""
IDLE_SECONDS = 1.0
"""Pause after a pass that read no record."""
FLUSH_SECONDS = 30.0
"""The collector commits what it has read at least this often (and when it holds
``flush_items`` entries): a killed invocation reads at most this much again."""


@dataclass(frozen=True, slots=True)
class CollectOutcome:
    """``fenced``: every shard listed at the start is fenced (the scan may begin); ``done``:
    every record written before the scan ended is read (the joins may begin)."""

    fenced: bool
    done: bool


class _Collector:
    def __init__(self, job: Job, progress: Progress) -> None:
        self.job = job
        self.progress = progress
        self.fence_store = FenceStore(job.table.client, job.table_name, job.layout)
        self.rules = list(job.settings.rules)
        state = progress.state
        self.last: dict[str, str] = dict(state.get("last", {}))
        self.done: set[str] = set(state.get("done", []))
        self.records = int(state.get("records", 0))
        self.changes = int(state.get("changes", 0))
        self.fenced_at: float | None = state.get("fenced_at")
        self.ended_seen_at: float | None = state.get("ended_seen_at")
        self.iterators: dict[str, str | None] = {}
        self.fences: dict[str, str | None] = {}

    def state(self, *, final: bool = False) -> dict[str, Any]:
        return {
            "last": self.last,
            "done": sorted(self.done),
            "records": self.records,
            "changes": self.changes,
            "fenced_at": self.fenced_at,
            "ended_seen_at": self.ended_seen_at,
            "final": final,
        }

    def shards(self) -> list[dict[str, Any]]:
        return self.job.table.source.shards()

    def read(self, shard: dict[str, Any]) -> Iterable[dict[str, Any]]:
        table = self.job.table
        return read_shard(table.streams_client, table.stream_arn, shard, self.iterators, self.last)

    # -- fencing -------------------------------------------------------------------------------

    def fence_all(self, stop_at: float) -> bool:
        """Fence every listed shard not fenced yet at the last record read from it (up to its
        bound); returns whether all are fenced (``False``: time ran out, go on next time)."""
        for shard in self.shards():
            shard_id = shard["ShardId"]
            if self.fence_of(shard_id) is not None:
                continue
            if time.monotonic() >= stop_at:
                return False
            iterators: dict[str, str | None] = {}
            last: dict[str, str] = {}
            end = "0"
            table = self.job.table
            for record in read_shard(
                table.streams_client, table.stream_arn, shard, iterators, last
            ):
                end = max(end, record["dynamodb"]["SequenceNumber"], key=pad_sequence_number)
            self.fence_store.put_if_absent(
                [Fence(r, shard_id, pad_sequence_number(end), "backfill") for r in self.rules]
            )
            self.fences.pop(shard_id, None)
            self.fence_of(shard_id)
        return True

    def fence_of(self, shard_id: str) -> str | None:
        """The rules' fence in a shard (40 digits; ``""`` for none: a shard born after the
        fences, counted whole), or ``None`` while the shard has none (cached once found).

        Raises
        ------
        ConfigError
            When the rules' fences differ in the shard (deployed at different times).
        """
        if shard_id in self.fences:
            return self.fences[shard_id]
        fences = {r: f.after for r, f in self.fence_store.get(shard_id).items() if r in self.rules}
        if not fences:
            return None
        if len(set(fences.values())) > 1 or len(fences) != len(self.rules):
            raise ConfigError(
                f"rules {', '.join(sorted(self.rules))} were fenced at different points in "
                f"shard {shard_id} (deployed at different times): backfill them apart"
            )
        fence = next(iter(fences.values()))
        self.fences[shard_id] = fence
        return fence

    # -- collecting ----------------------------------------------------------------------------

    def one_pass(self, buffer: FlushBuffer) -> int:
        """Read every listed shard up to its bound (parents before children; a child once its
        parent is read to its end); returns the records read."""
        shards = self.shards()
        listed = {s["ShardId"] for s in shards}
        read = 0
        progressed = True
        while progressed:
            progressed = False
            for shard in parents_first(shards):
                shard_id = shard["ShardId"]
                parent = shard.get("ParentShardId")
                if shard_id in self.done or (parent in listed and parent not in self.done):
                    continue
                fence = self.fence_of(shard_id)
                after = "" if fence is None else fence
                for raw in self.read(shard):
                    read += 1
                    self.records += 1
                    seq = pad_sequence_number(raw["dynamodb"]["SequenceNumber"])
                    if seq > after:
                        self.record(raw, buffer)
                if self.iterators.get(shard_id, "") is None:
                    self.done.add(shard_id)
                    progressed = True
        return read

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


def collect(job: Job, *, stop_at: float, sleep: Any = time.sleep) -> CollectOutcome:
    """Fence the shards (once), then read the stream pass after pass until the monotonic
    clock passes ``stop_at`` or the collector is done: once the scan has ended (its ``ended``
    item), and ``stream_lag_seconds`` after this task first saw it, one last pass, which lists
    the shards and reads each to its bound, reads every record written before the scan ended.
    Each pass is flushed and committed with the shards' positions: a killed invocation's
    uncommitted reads are read again by the next.

    Raises
    ------
    ConfigError
        When the rules' fences differ in a shard, or the stream no longer holds records the
        backfill needs (older than 24 hours: the collector fell a day behind).
    """
    progress = job.progress(COLLECTOR)
    if progress.done:
        return CollectOutcome(True, True)
    collector = _Collector(job, progress)
    if collector.fenced_at is None:
        if not collector.fence_all(stop_at):
            return CollectOutcome(False, False)
        collector.fenced_at = job.clock()
        if not job.commit(COLLECTOR, progress, None, collector.state(), done=False):
            return CollectOutcome(False, False)
        return CollectOutcome(True, False)
    attempt = new_attempt()
    lag = job.settings.stream_lag_seconds
    buffer = FlushBuffer(job, "changed")
    flushed_at = time.monotonic()
    final = False
    while time.monotonic() < stop_at:
        if collector.ended_seen_at is None and job.get(job.key("ended")) is not None:
            collector.ended_seen_at = job.clock()
        if collector.ended_seen_at is not None:
            wait = collector.ended_seen_at + lag - job.clock()
            if wait > 0:
                if time.monotonic() + wait >= stop_at:
                    break
                sleep(wait)
            final = True
        read = collector.one_pass(buffer)
        if (
            final
            or buffer.entry_count >= job.settings.flush_items
            or (time.monotonic() - flushed_at >= FLUSH_SECONDS)
        ):
            if not _flush(job, collector, buffer, attempt, final=final):
                return CollectOutcome(True, False)
            if final:
                return CollectOutcome(True, True)
            buffer = FlushBuffer(job, "changed")
            flushed_at = time.monotonic()
        if not read:
            sleep(min(IDLE_SECONDS, max(0.0, stop_at - time.monotonic())))
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
