"""Writing one flush of a task (:class:`FlushBuffer`): amounts routed to the reduce tasks and
item entries routed to the join tasks, chunked to fit DynamoDB's items, written under the
invocation's attempt, then committed (:meth:`~aggregator.operations.backfill.distributed.job.
Job.commit`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aggregator.core.deltas import AggregateRef, Amounts
from aggregator.operations.backfill.distributed.entries import (
    Contribution,
    Entry,
    add_contribution,
    encode_amounts,
    encode_entries,
    join_bucket,
    reduce_bucket,
)
from aggregator.operations.backfill.distributed.job import MAX_RECORD_BYTES, Job

__all__ = ["FlushBuffer"]

T = TypeVar("T")


class FlushBuffer:
    """What a task has counted since its last flush: amounts per aggregate (for the reducers)
    and item entries per join bucket (``entry_kind``: ``scanned`` or ``changed``)."""

    def __init__(self, job: Job, entry_kind: str) -> None:
        self.job = job
        self.entry_kind = entry_kind
        self.amounts: Contribution = {}
        self.entries: dict[int, list[Entry]] = defaultdict(list)
        self.entry_count = 0

    def add_amounts(self, amounts: Mapping[AggregateRef, Amounts]) -> None:
        add_contribution(self.amounts, amounts)

    def add_entry(self, digest: bytes, contribution: Contribution) -> None:
        self.entries[join_bucket(digest, self.job.settings.join_buckets)].append(
            (digest, contribution)
        )
        self.entry_count += 1

    @property
    def empty(self) -> bool:
        return not self.amounts and not self.entry_count

    def write(self, writer: str, index: int, attempt: str) -> None:
        """Write the buffer's data records as flush ``index`` of ``writer`` under ``attempt``
        (not committed: the caller commits). The first chunk of each bucket's data says how
        many chunks it has."""
        job = self.job
        records: dict[str, dict[str, Any]] = {}

        def add(kind: str, bucket: int, chunks: list[bytes]) -> None:
            for c, blob in enumerate(chunks):
                attributes: dict[str, Any] = {"data": {"B": blob}}
                if c == 0:
                    attributes["chunks"] = {"N": str(len(chunks))}
                records[job.data_key(kind, bucket, writer, index, attempt, c)] = attributes

        by_reducer: dict[int, Contribution] = defaultdict(dict)
        for ref, found in self.amounts.items():
            if found[0] or found[1]:
                by_reducer[reduce_bucket(ref, job.settings.reduce_buckets)][ref] = found
        for bucket, amounts in sorted(by_reducer.items()):
            add(
                "part",
                bucket,
                _chunks(list(amounts.items()), lambda v: encode_amounts(job.rules, dict(v))),
            )
        for bucket, entries in sorted(self.entries.items()):
            add(self.entry_kind, bucket, _chunks(entries, lambda v: encode_entries(job.rules, v)))
        job.put_records(records)


def _chunks(values: list[T], encode: Callable[[list[T]], bytes]) -> list[bytes]:
    """``values`` encoded in as few blobs as keep each under :data:`MAX_RECORD_BYTES` (halving
    a list whose blob is too big)."""
    blob = encode(values)
    if len(blob) <= MAX_RECORD_BYTES or len(values) <= 1:
        return [blob]
    middle = len(values) // 2
    return _chunks(values[:middle], encode) + _chunks(values[middle:], encode)
