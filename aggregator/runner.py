"""Local stream runner: reads a table's stream through the DynamoDB Streams API and feeds the same
:class:`~aggregator.processor.StreamProcessor` the Lambda handler uses.

It behaves like Lambda's event source mapping for one function with ``ParallelizationFactor: 1``:
shards are processed parents first, one batch at a time per shard, records in order; each batch
becomes a Lambda-shaped event (``eventSourceARN``, epoch-seconds ``ApproximateCreationDateTime``);
``batchItemFailures`` make it re-read from the lowest reported sequence number (bounded retries).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from .exceptions import RunnerError
from .processor import BatchOutcome, StreamProcessor
from .records import pad_sequence_number
from .writer import WriteStats

__all__ = ["RunStats", "StreamRunner", "to_lambda_record"]

GET_RECORDS_LIMIT = 1000
"""``GetRecords`` returns at most 1,000 records per call (DynamoDB Streams API reference)."""


def _epoch_seconds(value: Any) -> Any:
    if isinstance(value, datetime):
        seconds = value.timestamp()
        return int(seconds) if seconds == int(seconds) else Decimal(str(seconds))
    return value


def to_lambda_record(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """Turn a Streams API record into the shape Lambda delivers.

    ``ApproximateCreationDateTime`` (a ``datetime`` from boto3) becomes epoch seconds and
    ``eventSourceARN`` is added; everything else is kept as is.
    """
    out = dict(record)
    dynamodb = dict(record["dynamodb"])
    if "ApproximateCreationDateTime" in dynamodb:
        dynamodb["ApproximateCreationDateTime"] = _epoch_seconds(
            dynamodb["ApproximateCreationDateTime"]
        )
    out["dynamodb"] = dynamodb
    out["eventSourceARN"] = stream_arn
    return out


@dataclass(slots=True)
class RunStats:
    """Totals of one :meth:`StreamRunner.run` call."""

    batches: int = 0
    records: int = 0
    self_writes: int = 0
    record_deltas: int = 0
    aggregate_items: int = 0
    failures: int = 0
    retries: int = 0
    write: WriteStats = field(default_factory=WriteStats)
    elapsed_seconds: float = 0.0

    def add(self, outcome: BatchOutcome) -> None:
        self.batches += 1
        self.records += outcome.records
        self.self_writes += outcome.self_writes
        self.record_deltas += outcome.record_deltas
        self.aggregate_items += outcome.aggregate_items
        self.failures += outcome.failures
        self.write.add(outcome.write)


@dataclass(slots=True)
class _Shard:
    shard_id: str
    parent_id: str | None
    closed: bool
    iterator: str | None = None
    position: str | None = None  # last sequence number fully processed
    finished: bool = False
    attempts: int = 0


class StreamRunner:
    """Poll a table's stream and process it batch by batch.

    Parameters
    ----------
    processor
        The processing function shared with the Lambda handler.
    streams_client
        A boto3 ``dynamodbstreams`` client.
    stream_arn
        The table's stream ARN (``aggregator.table.table_stream_arn``).
    batch_size
        Records per event, 1 to 1,000 (``GetRecords`` limit; Lambda allows up to 10,000).
    max_retries
        Times one batch is retried after reporting failures before :class:`RunnerError`.
    poll_interval
        Seconds between polls when caught up (Lambda polls each shard 4 times per second).
    on_batch
        Called with each :class:`BatchOutcome` (progress bars).
    """

    def __init__(
        self,
        processor: StreamProcessor,
        streams_client: Any,
        stream_arn: str,
        *,
        batch_size: int = 100,
        max_retries: int = 5,
        poll_interval: float = 0.25,
        on_batch: Callable[[BatchOutcome], None] | None = None,
    ) -> None:
        if not 1 <= batch_size <= GET_RECORDS_LIMIT:
            raise ValueError(f"batch_size must be 1..{GET_RECORDS_LIMIT}, got {batch_size}")
        self.processor = processor
        self.streams = streams_client
        self.stream_arn = stream_arn
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.poll_interval = poll_interval
        self.on_batch = on_batch
        self._shards: dict[str, _Shard] = {}

    @property
    def positions(self) -> dict[str, str | None]:
        """Last fully processed sequence number per shard id."""
        return {s.shard_id: s.position for s in self._shards.values()}

    # -- shards --------------------------------------------------------------------------------

    def _refresh_shards(self) -> None:
        start: str | None = None
        while True:
            kwargs: dict[str, Any] = {"StreamArn": self.stream_arn}
            if start:
                kwargs["ExclusiveStartShardId"] = start
            description = self.streams.describe_stream(**kwargs)["StreamDescription"]
            for shard in description.get("Shards", []):
                closed = "EndingSequenceNumber" in shard.get("SequenceNumberRange", {})
                known = self._shards.get(shard["ShardId"])
                if known is None:
                    self._shards[shard["ShardId"]] = _Shard(
                        shard["ShardId"], shard.get("ParentShardId"), closed
                    )
                else:
                    known.closed = closed
            start = description.get("LastEvaluatedShardId")
            if not start:
                break

    def _ready(self) -> list[_Shard]:
        """Unfinished shards whose parent is finished or no longer listed, parents first."""
        return [
            s
            for s in self._shards.values()
            if not s.finished
            and (
                s.parent_id is None
                or s.parent_id not in self._shards
                or self._shards[s.parent_id].finished
            )
        ]

    def _iterator(self, shard: _Shard, at: str | None = None) -> str:
        kwargs: dict[str, Any] = {"StreamArn": self.stream_arn, "ShardId": shard.shard_id}
        if at is not None:
            kwargs.update(ShardIteratorType="AT_SEQUENCE_NUMBER", SequenceNumber=at)
        elif shard.position is not None:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=shard.position)
        else:
            kwargs["ShardIteratorType"] = "TRIM_HORIZON"
        return self.streams.get_shard_iterator(**kwargs)["ShardIterator"]

    # -- batches -------------------------------------------------------------------------------

    def _poll_shard(self, shard: _Shard, stats: RunStats) -> int:
        """Read and process one batch of ``shard``; returns the number of records read."""
        if shard.iterator is None:
            shard.iterator = self._iterator(shard)
        try:
            response = self.streams.get_records(ShardIterator=shard.iterator, Limit=self.batch_size)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ExpiredIteratorException":
                shard.iterator = self._iterator(shard)
                return 0
            raise
        records = response.get("Records", [])
        next_iterator = response.get("NextShardIterator")
        if not records:
            shard.iterator = next_iterator
            if next_iterator is None:
                shard.finished = True
            return 0
        event = {"Records": [to_lambda_record(r, self.stream_arn) for r in records]}
        outcome = self.processor.process_event(event)
        stats.add(outcome)
        if self.on_batch is not None:
            self.on_batch(outcome)
        failures = outcome.response.get("batchItemFailures") or []
        if failures:
            retry_from = min((f["itemIdentifier"] for f in failures), key=pad_sequence_number)
            shard.attempts += 1
            stats.retries += 1
            if shard.attempts > self.max_retries:
                raise RunnerError(
                    f"shard {shard.shard_id}: batch from {retry_from} still failing after "
                    f"{self.max_retries} retries: {'; '.join(outcome.errors[:3])}"
                )
            time.sleep(min(2.0, 0.05 * 2**shard.attempts))
            shard.iterator = self._iterator(shard, at=retry_from)
            # records before the failure point are done
            done = [
                r
                for r in records
                if pad_sequence_number(r["dynamodb"]["SequenceNumber"])
                < pad_sequence_number(retry_from)
            ]
            if done:
                shard.position = done[-1]["dynamodb"]["SequenceNumber"]
            return len(records)
        shard.attempts = 0
        shard.position = records[-1]["dynamodb"]["SequenceNumber"]
        shard.iterator = next_iterator
        if next_iterator is None:
            shard.finished = True
        return len(records)

    def run(
        self,
        *,
        until_caught_up: bool = True,
        idle_polls: int = 2,
        max_seconds: float | None = None,
    ) -> RunStats:
        """Process the stream.

        Parameters
        ----------
        until_caught_up
            Return once ``idle_polls`` consecutive passes over all shards read nothing new.
            ``False`` runs until ``max_seconds`` (or forever).
        idle_polls
            Empty passes that count as caught up.
        max_seconds
            Wall-clock limit in seconds, ``None`` for none.

        Returns
        -------
        RunStats

        Raises
        ------
        RunnerError
            When a batch keeps failing after ``max_retries`` retries.
        """
        stats = RunStats()
        started = time.monotonic()
        idle = 0
        while True:
            self._refresh_shards()
            read = 0
            for shard in self._ready():
                # drain a shard before moving on, so children wait for finished parents
                while not shard.finished:
                    n = self._poll_shard(shard, stats)
                    read += n
                    if n == 0:
                        break
            idle = 0 if read else idle + 1
            stats.elapsed_seconds = time.monotonic() - started
            if until_caught_up and idle >= idle_polls:
                return stats
            if max_seconds is not None and stats.elapsed_seconds >= max_seconds:
                return stats
            if not read:
                time.sleep(self.poll_interval)
