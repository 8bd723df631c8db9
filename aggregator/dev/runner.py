"""Local stream runner: reads a table's stream through the DynamoDB Streams API and feeds the same
:class:`~aggregator.runtime.processor.StreamProcessor` the Lambda handler uses.

It behaves like Lambda's event source mapping with ``ParallelizationFactor: 1``:

- shards are processed parents first, one invocation at a time per shard, records in order;
- each batch becomes a Lambda-shaped event (``eventSourceARN``, epoch-seconds
  ``ApproximateCreationDateTime``); with tumbling windows (``tumbling_window_seconds``, as
  ``template.yaml`` configures) events also carry ``shardId``, ``window``, ``state`` and
  ``isFinalInvokeForWindow``; windows follow the records' insertion time, a batch never spans two
  windows, and a window closes with a final invocation without records;
- ``batchItemFailures`` make it re-read from the lowest reported sequence number (the retry batch
  can extend past the failed one); a function error retries the batch, or its first half with
  ``bisect_on_error``; both bounded by ``max_retries``;
- with a ``positions`` store it keeps each shard's position (and open window state) in the table
  under the reserved runner partition key, and resumes there after a restart.

:class:`RunnerFaults` injects duplicate deliveries, crashes and kills.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from aggregator.core.exceptions import ConfigError, RunnerError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.records import pad_sequence_number
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.streams import (
    GET_RECORDS_LIMIT,
    StreamSource,
    StreamTrimmedError,
    is_closed,
    ready_shards,
)
from aggregator.dynamodb.write_stats import WriteStats
from aggregator.runtime.processor import BatchCounts, BatchOutcome, StreamProcessor

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

__all__ = [
    "PositionStore",
    "RunStats",
    "RunnerFaults",
    "SimulatedCrash",
    "StreamRunner",
]


class SimulatedCrash(Exception):
    """The function or the runner "died": raised by
    :class:`~aggregator.dev.faults.FaultInjectingClient` to abort an invocation, and by the runner
    when :attr:`RunnerFaults.kill_after_batches` is reached."""


class CrashingClient(Protocol):
    """A client the runner arms to crash during a delivery
    (:class:`aggregator.dev.faults.FaultInjectingClient`)."""

    def arm(self, crash_after_updates: int) -> None: ...

    def disarm(self) -> None: ...


@dataclass
class RunnerFaults:
    """What the local runner does to batches, to reproduce the event source mapping's failures.

    Attributes
    ----------
    duplicate
        ``(batch number) -> bool``: deliver this batch a second time after it succeeded
        (Lambda's at-least-once delivery).
    crash
        ``(batch number) -> int | None``: arm the wrapped client to crash after that many
        updates during this batch.
    bisect_on_error
        On a function error, retry the first half of the batch, then continue from there
        (``BisectBatchOnFunctionError``); otherwise retry the whole batch.
    kill_after_batches
        Stop the runner (raise :class:`SimulatedCrash`) after this many batches in total,
        simulating a killed process; a new runner resumes from the stored positions.
    transform
        Applied to each Lambda-shaped record at every delivery (e.g. to mark TTL deletes or to
        corrupt a record); positions and retries follow the records as read.
    client
        A client to ``arm(n)`` for crashes and ``disarm()`` after each delivery
        (:class:`aggregator.dev.faults.FaultInjectingClient`).
    """

    duplicate: Callable[[int], bool] = lambda n: False
    crash: Callable[[int], int | None] = lambda n: None
    bisect_on_error: bool = False
    kill_after_batches: int | None = None
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    client: CrashingClient | None = None
    log: list[str] = field(default_factory=list)

    @staticmethod
    def schedule(batches: Iterable[int]) -> Callable[[int], bool]:
        """A predicate true for the given batch numbers."""
        chosen = frozenset(batches)
        return lambda n: n in chosen


EMPTY_PAGES_FOLLOWED = 50
"""Empty ``GetRecords`` pages followed in one read of a closed shard before yielding."""
POLL_INTERVAL_SECONDS = 0.25
"""Default seconds between two polls of caught-up shards: Lambda polls each shard of a DynamoDB
stream four times per second (Lambda Developer Guide, "Using AWS Lambda with Amazon DynamoDB")."""


def _seq(record: dict[str, Any]) -> str:
    sequence: str = record["dynamodb"]["SequenceNumber"]
    return sequence


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class RunStats(BatchCounts):
    """Totals of one :meth:`StreamRunner.run` call (times in seconds; the batches' counts as
    :class:`~aggregator.runtime.outcome.BatchCounts`)."""

    invocations: int = 0
    batches: int = 0
    retries: int = 0
    function_errors: int = 0
    duplicates: int = 0
    windows_closed: int = 0
    threshold_events: int = 0
    write: WriteStats = field(default_factory=WriteStats)
    elapsed_seconds: float = 0.0

    def add(self, outcome: BatchOutcome) -> None:
        self.invocations += 1
        self.add_counts(outcome)
        self.threshold_events += outcome.threshold_events
        self.write.add(outcome.write)


class PositionStore:
    """Shard positions and open window state, one item per shard under the runner partition key.

    Item: ``pk = <layout.runner_pk>``, ``sk = <stream ARN>#<shard id>``, ``sequence_number``
    (last record fully processed), ``window_start`` (epoch seconds, or absent) and ``state``
    (the window state as JSON).
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        layout: TableLayout = DEFAULT_LAYOUT,
        *,
        fresh: bool = False,
    ) -> None:
        self.client = client
        self.requests = requests_of(client)
        self.table_name = table_name
        self.layout = layout
        self.fresh = fresh
        """Start every shard from its beginning (no stored position is read), and still save the
        positions reached, so that the next run continues from them (``run --from-start``)."""

    def _key(self, stream_arn: str, shard_id: str) -> dict[str, Any]:
        return self.layout.item_key(self.layout.runner_pk, f"{stream_arn}#{shard_id}")

    def load(self, stream_arn: str, shard_id: str) -> tuple[str | None, int | None, dict[str, Any]]:
        if self.fresh:
            return None, None, {}
        item = self.requests.send(
            "get_item",
            TableName=self.table_name,
            Key=self._key(stream_arn, shard_id),
            ConsistentRead=True,
        ).get("Item")
        if not item:
            return None, None, {}
        window = item.get("window_start", {}).get("N")
        return (
            item.get("sequence_number", {}).get("S"),
            None if window is None else int(window),
            json.loads(item.get("state", {}).get("S", "{}")),
        )

    def save(
        self,
        stream_arn: str,
        shard_id: str,
        sequence_number: str,
        window_start: int | None,
        state: dict[str, Any],
    ) -> None:
        fields = self.layout.item_fields(self.layout.runner_pk, f"{stream_arn}#{shard_id}")
        item = {
            **{name: {"S": value} for name, value in fields.items()},
            "sequence_number": {"S": sequence_number},
            "state": {"S": json.dumps(state)},
        }
        if window_start is not None:
            item["window_start"] = {"N": str(window_start)}
        self.requests.send("put_item", TableName=self.table_name, Item=item)


@dataclass(slots=True)
class _Shard:
    shard_id: str
    parent_id: str | None
    iterator: str | None = None
    exhausted: bool = False  # the shard is closed and every record was read
    finished: bool = False  # ... and processed, window closed
    position: str | None = None  # last sequence number fully processed
    buffer: list[dict[str, Any]] = field(default_factory=list)
    window_start: int | None = None
    state: dict[str, Any] = field(default_factory=dict)
    loaded: bool = False
    attempts: int = 0  # consecutive failed deliveries of the batch at the shard's position
    closed: bool = False
    read_position: str | None = None  # last sequence number read into the buffer


class StreamRunner:
    """Poll a table's stream and process it invocation by invocation.

    Parameters
    ----------
    processor
        The processing function shared with the Lambda handler.
    streams_client
        A boto3 ``dynamodbstreams`` client.
    stream_arn
        The table's stream ARN (``aggregator.dynamodb.table.table_stream_arn``).
    batch_size
        Records per event, 1 to 1,000 (``GetRecords`` limit; Lambda allows up to 10,000).
    tumbling_window_seconds
        Emulate Lambda's tumbling windows of this length (events then carry ``shardId``, which
        the exactly-once modes need); ``None`` sends plain events.
    max_retries
        Retries of one batch (after ``batchItemFailures`` or a function error) before
        :class:`RunnerError`.
    poll_interval
        Seconds between polls when caught up; default :data:`POLL_INTERVAL_SECONDS`.
    positions
        Where to keep shard positions across restarts (``None``: in memory only).
    faults
        Fault injection for tests.
    on_batch
        Called with each :class:`BatchOutcome` (progress bars).
    layout
        Table layout (default: the processor's); records of the runner's own position items are
        dropped before delivery.
    """

    def __init__(
        self,
        processor: StreamProcessor,
        streams_client: DynamoDBStreamsClient,
        stream_arn: str,
        *,
        batch_size: int = 100,
        tumbling_window_seconds: int | None = 60,
        max_retries: int = 10,
        poll_interval: float | None = None,
        positions: PositionStore | None = None,
        faults: RunnerFaults | None = None,
        on_batch: Callable[[BatchOutcome], None] | None = None,
        layout: TableLayout | None = None,
    ) -> None:
        if not 1 <= batch_size <= GET_RECORDS_LIMIT:
            raise ValueError(f"batch_size must be 1..{GET_RECORDS_LIMIT}, got {batch_size}")
        if tumbling_window_seconds is not None and not 1 <= tumbling_window_seconds <= 900:
            raise ValueError("tumbling_window_seconds must be 1..900 (Lambda's range)")
        self.processor = processor
        self.stream = StreamSource(streams_client, stream_arn)
        self.batch_size = batch_size
        self.window_seconds = tumbling_window_seconds
        self.max_retries = max_retries
        self.poll_interval = POLL_INTERVAL_SECONDS if poll_interval is None else poll_interval
        self.positions_store = positions
        self.faults = faults or RunnerFaults()
        self.on_batch = on_batch
        if layout is None:  # the processor's engine knows the rule set's layout
            engine = getattr(processor, "engine", None)
            layout = engine.layout if engine is not None else DEFAULT_LAYOUT
        self.layout = layout
        self._shards: dict[str, _Shard] = {}
        self._deliveries = 0

    @property
    def positions(self) -> dict[str, str | None]:
        """Last fully processed sequence number per shard id."""
        return {s.shard_id: s.position for s in self._shards.values()}

    # -- shards --------------------------------------------------------------------------------

    def _refresh_shards(self) -> None:
        for shard in self.stream.shards():
            if shard["ShardId"] not in self._shards:
                self._shards[shard["ShardId"]] = _Shard(
                    shard["ShardId"], shard.get("ParentShardId")
                )
            known = self._shards[shard["ShardId"]]
            known.closed = is_closed(shard)

    def _ready(self) -> list[_Shard]:
        """Unfinished shards whose parent is finished or no longer listed, parents first
        (:func:`~aggregator.dynamodb.streams.ready_shards` over every shard seen)."""
        known: list[dict[str, Any]] = [
            {"ShardId": s.shard_id, "ParentShardId": s.parent_id} for s in self._shards.values()
        ]
        finished = {s.shard_id for s in self._shards.values() if s.finished}
        return [self._shards[s["ShardId"]] for s in ready_shards(known, finished)]

    def _load(self, shard: _Shard) -> None:
        if shard.loaded:
            return
        shard.loaded = True
        if self.positions_store is not None:
            shard.position, shard.window_start, shard.state = self.positions_store.load(
                self.stream.arn, shard.shard_id
            )

    def _save(self, shard: _Shard) -> None:
        if self.positions_store is not None and shard.position is not None:
            self.positions_store.save(
                self.stream.arn, shard.shard_id, shard.position, shard.window_start, shard.state
            )

    def _fill(self, shard: _Shard) -> int:
        """Read ``GetRecords`` pages into the shard's buffer; returns records kept.

        ``GetRecords`` may return an empty page in the middle of a shard (DynamoDB Streams API
        reference: "it might take multiple calls to get to a portion of the shard that contains
        stream records"), so a closed shard is followed until a page has records or the shard
        ends; an open shard's empty page means caught up for now. Pages come from
        :func:`~aggregator.dynamodb.streams.get_records_page`, which renews an expired iterator
        after the last record read; records past the stream's retention leave the iterator to
        be taken again at the next read.
        """
        if shard.exhausted or len(shard.buffer) >= self.batch_size:
            return 0
        records: list[dict[str, Any]] = []
        for _ in range(EMPTY_PAGES_FOLLOWED if shard.closed else 1):
            try:
                page = self.stream.page(
                    shard.shard_id,
                    shard.iterator,
                    after=shard.read_position or shard.position,  # never re-read the buffer
                )
            except StreamTrimmedError:
                shard.iterator = None
                return 0
            records = page.records
            shard.iterator = page.next_iterator
            if shard.iterator is None:
                shard.exhausted = True
            if records or shard.exhausted:
                break
        if records:
            shard.read_position = _seq(records[-1])
        # Like the template's FilterCriteria, drop the runner's own bookkeeping records before
        # any invocation (saving a position would otherwise produce a record to process, forever).
        kept = [r for r in records if not self._is_bookkeeping(r)]
        if records and not kept and not shard.buffer:
            shard.position = _seq(records[-1])
        shard.buffer.extend(kept)
        return len(kept)

    def _is_bookkeeping(self, record: dict[str, Any]) -> bool:
        keys = record["dynamodb"].get("Keys", {})
        return self.layout.partition_of(keys) == self.layout.runner_pk

    # -- windows -------------------------------------------------------------------------------

    def _window_of(self, record: dict[str, Any]) -> int | None:
        if self.window_seconds is None:
            return None
        created = record["dynamodb"].get("ApproximateCreationDateTime")
        seconds = int(Decimal(str(created))) if created is not None else int(time.time())
        return seconds - seconds % self.window_seconds

    def _event(self, shard: _Shard, records: list[dict[str, Any]], final: bool) -> dict[str, Any]:
        # the transform (a test's view of what Lambda delivers: TTL marks, corrupted records)
        # applies at delivery; positions, windows and retries follow the records as read
        if self.faults.transform is not None:
            records = [self.faults.transform(r) for r in records]
        event: dict[str, Any] = {"Records": records}
        if self.window_seconds is not None and shard.window_start is not None:
            event.update(
                shardId=shard.shard_id,
                eventSourceARN=self.stream.arn,
                window={
                    "start": _iso(shard.window_start),
                    "end": _iso(shard.window_start + self.window_seconds),
                },
                state=dict(shard.state),
                isFinalInvokeForWindow=final,
                isWindowTerminatedEarly=False,
            )
        return event

    def _close_window(self, shard: _Shard, stats: RunStats) -> None:
        """Final invocation of the shard's open window (no records); retried until it succeeds."""
        if self.window_seconds is None or shard.window_start is None:
            return
        self._invoke(shard, [], stats, final=True)
        shard.window_start = None
        shard.state = {}
        stats.windows_closed += 1
        self._save(shard)

    # -- invocations ---------------------------------------------------------------------------

    def _invoke(
        self, shard: _Shard, records: list[dict[str, Any]], stats: RunStats, *, final: bool = False
    ) -> list[dict[str, Any]]:
        """Deliver ``records`` (and the window state) until the processor accepts them.

        Returns the records that remain to be delivered again because of ``batchItemFailures``
        (a suffix of ``records``), after updating the shard's state and position for the rest.
        """
        while True:
            self._deliveries += 1
            self._arm_crash()
            event = self._event(shard, records, final)
            try:
                outcome = self.processor.process_event(event)
            except ConfigError:
                raise
            except Exception as exc:  # a function error: Lambda retries the batch
                records = self._function_error(shard, records, stats, exc)
                continue
            finally:
                self._disarm()
            stats.add(outcome)
            if self.on_batch is not None:
                self.on_batch(outcome)
            if outcome.response.get("batchItemFailures"):
                return self._partial_failure(shard, records, stats, outcome)
            return self._delivered(shard, records, stats, event, outcome)

    def _arm_crash(self) -> None:
        """Arm the faults' client to crash during this delivery when the faults say so."""
        crash_after = self.faults.crash(self._deliveries)
        if crash_after is not None and self.faults.client is not None:
            self.faults.client.arm(crash_after)

    def _disarm(self) -> None:
        """Disarm the faults' client, if any."""
        if self.faults.client is not None:
            self.faults.client.disarm()

    def _function_error(
        self, shard: _Shard, records: list[dict[str, Any]], stats: RunStats, exc: Exception
    ) -> list[dict[str, Any]]:
        """Count a function error and return the records to retry (the first half with
        ``bisect_on_error``, the rest going back to the buffer).

        Raises
        ------
        RunnerError
            When the shard's attempts exceed ``max_retries``.
        """
        stats.function_errors += 1
        self.faults.log.append(f"delivery {self._deliveries}: function error {exc!r}")
        self._attempt_again(shard, "invocation", repr(exc), cause=exc)
        stats.retries += 1
        self._disarm()
        if self.faults.bisect_on_error and len(records) > 1:
            half = len(records) // 2
            shard.buffer[:0] = records[half:]
            records = records[:half]
        return records

    def _attempt_again(
        self, shard: _Shard, failing: str, detail: str, *, cause: Exception | None = None
    ) -> None:
        """Count one more attempt of the shard's batch (``failing``: what still fails).

        Raises
        ------
        RunnerError
            When the shard's attempts exceed ``max_retries`` (``detail`` says why the last failed).
        """
        shard.attempts += 1
        if shard.attempts > self.max_retries:
            raise RunnerError(
                f"shard {shard.shard_id}: {failing} still failing after "
                f"{self.max_retries} retries: {detail}"
            ) from cause

    def _partial_failure(
        self, shard: _Shard, records: list[dict[str, Any]], stats: RunStats, outcome: BatchOutcome
    ) -> list[dict[str, Any]]:
        """Accept the records before the lowest ``batchItemFailures`` entry, back off, and return
        the records from it on.

        Raises
        ------
        RunnerError
            When the shard's attempts exceed ``max_retries``.
        """
        failures = outcome.response["batchItemFailures"]
        retry_from = pad_sequence_number(
            min((f["itemIdentifier"] for f in failures), key=pad_sequence_number)
        )
        done = [r for r in records if pad_sequence_number(_seq(r)) < retry_from]
        rest = [r for r in records if pad_sequence_number(_seq(r)) >= retry_from]
        stats.retries += 1
        self._attempt_again(
            shard, f"batch from {retry_from.lstrip('0')}", "; ".join(outcome.errors[:3])
        )
        self._accept(shard, done, outcome)
        time.sleep(min(1.0, 0.02 * 2**shard.attempts))
        return rest

    def _delivered(
        self,
        shard: _Shard,
        records: list[dict[str, Any]],
        stats: RunStats,
        event: dict[str, Any],
        outcome: BatchOutcome,
    ) -> list[dict[str, Any]]:
        """Accept a fully processed batch, deliver it again when the faults duplicate it, and
        return no records to retry."""
        shard.attempts = 0
        self._accept(shard, records, outcome)
        if records and self.faults.duplicate(self._deliveries):
            stats.duplicates += 1
            duplicate = self.processor.process_event(event)
            stats.add(duplicate)
        return []

    def _accept(self, shard: _Shard, records: list[dict[str, Any]], outcome: BatchOutcome) -> None:
        if "state" in outcome.response:
            shard.state = dict(outcome.response["state"])
        if records:
            shard.position = max((_seq(r) for r in records), key=pad_sequence_number)
            self._save(shard)

    def _step(self, shard: _Shard, stats: RunStats, caught_up_close: bool) -> int:
        """Deliver one batch of ``shard`` (reading first if needed); returns records delivered."""
        self._load(shard)
        self._fill(shard)
        if not shard.buffer:
            if shard.exhausted or caught_up_close:
                self._close_window(shard, stats)
            if shard.exhausted:
                shard.finished = True
            return 0
        window = self._window_of(shard.buffer[0])
        if shard.window_start is not None and window != shard.window_start:
            self._close_window(shard, stats)
        shard.window_start = window
        batch: list[dict[str, Any]] = []
        while shard.buffer and len(batch) < self.batch_size:
            if self._window_of(shard.buffer[0]) != window:
                break
            batch.append(shard.buffer.pop(0))
        stats.batches += 1
        rest = self._invoke(shard, batch, stats)
        shard.buffer[:0] = rest
        kill = self.faults.kill_after_batches
        if kill is not None and stats.batches >= kill:
            raise SimulatedCrash(f"runner killed after {stats.batches} batches")
        return len(batch) - len(rest)

    def poll(self, stats: RunStats, *, now: float) -> int:
        """One poll, as the event source mapping makes 4 times a second: one batch from each
        ready shard (parents finished), then the close of each open window that ended by ``now``
        (epoch seconds; the shard twin's simulated clock). Returns the records delivered.

        Raises
        ------
        RunnerError, SimulatedCrash
            As :meth:`run`.
        """
        self._refresh_shards()
        delivered = 0
        for shard in self._ready():
            ended = (
                self.window_seconds is not None
                and shard.window_start is not None
                and now >= shard.window_start + self.window_seconds
            )
            delivered += self._step(shard, stats, caught_up_close=ended)
        return delivered

    @property
    def open_windows(self) -> list[int]:
        """Start (epoch seconds) of each shard's open tumbling window."""
        return [s.window_start for s in self._shards.values() if s.window_start is not None]

    @property
    def caught_up(self) -> bool:
        """Whether no shard holds records read but not yet delivered."""
        return not any(s.buffer for s in self._shards.values())

    def run(
        self,
        *,
        until_caught_up: bool = True,
        idle_polls: int = 2,
        max_seconds: float | None = None,
        stats: RunStats | None = None,
    ) -> RunStats:
        """Process the stream.

        Parameters
        ----------
        stats
            Count into this object (the caller keeps the figures when the run is interrupted);
            a new one by default.
        until_caught_up
            Return once ``idle_polls`` consecutive passes over all shards read nothing new (open
            windows are closed first). ``False`` runs until ``max_seconds`` (or forever).
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
        SimulatedCrash
            When ``faults.kill_after_batches`` is reached.
        """
        stats = RunStats() if stats is None else stats
        started = time.monotonic()
        idle = 0
        while True:
            self._refresh_shards()
            delivered = 0
            closed_before = stats.windows_closed
            for shard in self._ready():
                while not shard.finished:
                    n = self._step(shard, stats, caught_up_close=until_caught_up and idle > 0)
                    delivered += n
                    if n == 0:
                        break
            # closing a window writes aggregates, whose own stream records must be read too
            idle = 0 if delivered or stats.windows_closed > closed_before else idle + 1
            stats.elapsed_seconds = time.monotonic() - started
            open_windows = any(s.window_start is not None for s in self._shards.values())
            if until_caught_up and idle >= idle_polls and not open_windows:
                return stats
            if max_seconds is not None and stats.elapsed_seconds >= max_seconds:
                return stats
            if not delivered:
                time.sleep(self.poll_interval)
