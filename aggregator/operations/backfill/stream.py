"""The backfill's reads of the stream (:mod:`aggregator.operations.backfill`, "Reading a
shard"): a read of one shard up to a bound fixed when it begins (:func:`read_shard`), and the
items changed after their fences, each with the contributions of its first post-fence
``OldImage`` (:class:`ChangedItems`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from aggregator.core.deltas import AggregateRef, Amounts
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.core.records import Image, StreamRecord, pad_sequence_number
from aggregator.dynamodb.streams import (
    StreamTrimmedError,
    get_records_page,
    is_closed,
    parents_first,
    shard_iterator,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

__all__ = [
    "CLOSED_SHARD_EMPTY_PAGES",
    "OPEN_SHARD_EMPTY_PAGES",
    "ChangedItems",
    "FencedStream",
    "ReadBound",
    "fence_position",
    "item_digest",
    "read_shard",
]

OPEN_SHARD_EMPTY_PAGES = 10
"""Empty ``GetRecords`` pages in a row after which an open shard in which nothing was written
since its read began counts as read to its end (:func:`read_shard`)."""
CLOSED_SHARD_EMPTY_PAGES = 10_000
"""Empty pages followed towards an end known to come (a closed shard's, or a read's bound)
before giving up."""


def item_digest(keys: dict[str, Any], layout: TableLayout) -> bytes:
    """16-byte BLAKE2b digest of an item's primary key (DynamoDB JSON)."""
    names = layout.key_attributes
    text = json.dumps([keys.get(n) for n in names], sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class ReadBound:
    """Where a read of an open shard ends: the first record written after the read began
    (:mod:`aggregator.operations.backfill`, "Reading a shard").

    A ``LATEST`` iterator, taken when the read begins, points just after the shard's most recent
    record (DynamoDB Streams API reference, ``GetShardIterator``); :meth:`poll` reads it, one
    record at most per call, until it returns a record, whose sequence number is the bound. An
    expired iterator is renewed at ``LATEST``
    (:func:`~aggregator.dynamodb.streams.get_records_page`): the shard's end then is a bound as
    good, every record readable when the read began still coming before it.
    """

    def __init__(self, streams: DynamoDBStreamsClient, stream_arn: str, shard_id: str) -> None:
        self.streams = streams
        self.stream_arn = stream_arn
        self.shard_id = shard_id
        self.sequence_number: str | None = None  # 40 digits, once a record has come
        self.iterator: str | None = self._latest()

    def _latest(self) -> str:
        return shard_iterator(self.streams, self.stream_arn, self.shard_id, latest=True)

    def poll(self) -> str | None:
        """The bound (a 40-digit sequence number), or ``None`` while no record has come after
        the read began (one ``GetRecords`` call per poll until one has)."""
        if self.sequence_number is not None or self.iterator is None:
            return self.sequence_number
        page = get_records_page(
            self.streams, self.stream_arn, self.shard_id, self.iterator, latest=True, limit=1
        )
        if page.records:
            self.sequence_number = pad_sequence_number(
                page.records[0]["dynamodb"]["SequenceNumber"]
            )
        else:
            self.iterator = page.next_iterator  # None: the shard has closed
        return self.sequence_number


def read_shard(
    streams: DynamoDBStreamsClient,
    stream_arn: str,
    shard: dict[str, Any],
    iterators: dict[str, str | None],
    last: dict[str, str],
) -> Iterator[dict[str, Any]]:
    """Records of one shard (Lambda-shaped), from where ``iterators`` left off (the shard's start
    the first time) to a bound fixed when this read begins (:mod:`aggregator.operations.backfill`,
    "Reading a shard"): a closed shard's end, or for an open shard the first record written after
    the read began (:class:`ReadBound`), or, if none comes, the shard's end as
    :data:`OPEN_SHARD_EMPTY_PAGES` empty ``GetRecords`` pages in a row show it. So the read ends
    at any write rate. It may return records past its bound (the rest of the bound's page); the
    next read goes on after them.

    ``iterators[shard_id]`` is where the next read continues, ``None`` once a closed shard has
    ended; ``last[shard_id]`` is the last sequence number read, from which an expired iterator
    is renewed.

    ``GetRecords`` may return empty pages before a shard's records (DynamoDB Streams API
    reference, ``GetRecords``): towards a known end (a closed shard's, or a bound) the read
    follows them, up to :data:`CLOSED_SHARD_EMPTY_PAGES`. Pages come from the framework's stream
    reader (:func:`~aggregator.dynamodb.streams.get_records_page`).

    Raises
    ------
    ConfigError
        When the shard's records were trimmed (older than the stream's 24 hours) while the
        backfill still needed them, or a known end never came.
    """
    shard_id = shard["ShardId"]
    iterator = iterators.get(shard_id, "")
    if iterator is None:
        return
    # fixed before the first page: every record readable now comes before it
    bound = None if is_closed(shard) else ReadBound(streams, stream_arn, shard_id)
    empty = 0
    while True:
        try:
            page = get_records_page(
                streams, stream_arn, shard_id, iterator or None, after=last.get(shard_id)
            )
        except StreamTrimmedError:
            raise ConfigError(
                f"shard {shard_id}: the stream no longer holds records the backfill "
                "needs (older than 24 hours); deploy the rules under new names and "
                "backfill those"
            ) from None
        records = page.records
        iterator = page.next_iterator
        iterators[shard_id] = iterator
        for record in records:
            last[shard_id] = record["dynamodb"]["SequenceNumber"]
            yield record
        if iterator is None:  # a closed shard's end
            return
        empty = 0 if records else empty + 1
        if bound is not None:
            end = bound.poll()
            if end is None and empty >= OPEN_SHARD_EMPTY_PAGES:
                return  # nothing written since the read began, and the shard read to its end
            if end is not None and pad_sequence_number(last.get(shard_id, "0")) >= end:
                return  # the bound reached
        if empty >= CLOSED_SHARD_EMPTY_PAGES:
            raise ConfigError(
                f"shard {shard_id}: {CLOSED_SHARD_EMPTY_PAGES} empty pages without reaching "
                "the end of a closed shard, or the first record written after the read began; "
                "try again"
            )


def fence_position(
    streams: DynamoDBStreamsClient,
    stream_arn: str,
    shard: dict[str, Any],
    *,
    after: str | None = None,
    stop_at: float | None = None,
) -> tuple[str, bool]:
    """Where a backfill fences ``shard``: the sequence number of the last record read from its
    oldest (or from just after ``after``, a record's sequence number a read stopped at) up to
    its bound (:func:`read_shard`), 40 digits (zeros for an empty shard); and whether the read
    got there (``False``: the monotonic clock passed ``stop_at`` first; the first value is then
    where to go on from).

    Raises
    ------
    ConfigError
        As :func:`read_shard`.
    """
    last = {} if after is None else {shard["ShardId"]: str(int(after))}
    end = "0" if after is None else after
    for record in read_shard(streams, stream_arn, shard, {}, last):
        end = max(end, record["dynamodb"]["SequenceNumber"], key=pad_sequence_number)
        if stop_at is not None and time.monotonic() >= stop_at:
            return pad_sequence_number(end), False
    return pad_sequence_number(end), True


class FencedStream(Protocol):
    """What :class:`ChangedItems` reads through (a :class:`~aggregator.operations.backfill.
    Backfill`): the stream's shards, the backfilled rules' fences in each, and the rules'
    contributions of an image."""

    layout: TableLayout
    rule_names: list[str]

    def shards(self) -> list[dict[str, Any]]: ...

    def shard_fences(self, shard_id: str) -> dict[str, str]: ...

    def read_shard(
        self, shard: dict[str, Any], iterators: dict[str, str | None], last: dict[str, str]
    ) -> Iterable[dict[str, Any]]: ...

    def contributions(self, image: Image | None) -> dict[AggregateRef, Amounts]: ...


class ChangedItems:
    """Reads every shard after its fence and keeps, per item, the contributions of its first
    post-fence ``OldImage`` (thread-safe)."""

    def __init__(self, backfill: FencedStream) -> None:
        self.b = backfill
        self.lock = threading.Lock()
        self.first_old: dict[bytes, dict[AggregateRef, Amounts]] = {}
        self.iterators: dict[str, str | None] = {}
        self.last: dict[str, str] = {}
        self.done: set[str] = set()
        self.records = 0

    def pump(self) -> None:
        """Read every shard the stream lists up to its bound (:func:`read_shard`; new shards
        from their start), parents before their children, so an item's first post-fence record
        is the first one read. A child is read once its parent has been read to its end; one
        listed only after this read began is left to the next."""
        with self.lock:
            shards = self.b.shards()
            listed = {s["ShardId"] for s in shards}
            progressed = True
            while progressed:
                progressed = False
                for shard in parents_first(shards):
                    shard_id = shard["ShardId"]
                    parent = shard.get("ParentShardId")
                    if shard_id in self.done or (parent in listed and parent not in self.done):
                        continue
                    fences = self.b.shard_fences(shard_id)
                    for record in self.b.read_shard(shard, self.iterators, self.last):
                        self.records += 1
                        seq = pad_sequence_number(record["dynamodb"]["SequenceNumber"])
                        self._record(record, seq, fences)
                    if self.iterators.get(shard_id, "") is None:
                        self.done.add(shard_id)
                        progressed = True

    def _record(self, raw: dict[str, Any], seq: str, fences: dict[str, str]) -> None:
        record = StreamRecord(raw)
        keys = dict(record.keys)
        if self.b.layout.is_reserved(keys):
            return
        digest = item_digest(keys, self.b.layout)
        if digest in self.first_old:
            return
        # a rule's fence in this shard; none yet (a shard born after the fences): all of it
        rules = [r for r in self.b.rule_names if seq > fences.get(r, "")]
        if not rules:
            return
        if len(rules) != len(self.b.rule_names):  # refused up front (Backfill.run)
            raise ConfigError("the rules' fences differ within one shard; backfill them apart")
        self.first_old[digest] = self.b.contributions(record.old_image)
