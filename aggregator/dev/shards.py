"""A twin of DynamoDB Streams with many shards and of Lambda's event source mapping over them.

DynamoDB Local's stream has one shard, and real tables have one per partition, each closed every
few hours and followed by a child. This module spreads the records of a real stream (DynamoDB
Local's, so every record is one DynamoDB wrote) over ``P`` simulated partitions and replays them
shard by shard, as Lambda would, on a simulated clock.

What it models, from AWS's documentation:

- **Shards and lineage.** A record goes to the partition of its partition key value (a hash, like
  DynamoDB's placement of items on partitions), so all records of one item share a partition and
  keep their order. Each partition's stream is a lineage of shards: shard *g* covers simulated
  times ``[opened, closes)``, is closed at ``closes`` and its child (``ParentShardId`` = it) takes
  over, every ``rollover_seconds``, with the partitions' rollovers staggered (Developer Guide,
  "Change data capture for DynamoDB Streams": shards are ephemeral, created and deleted
  automatically; a shard has a parent). ``DescribeStream``, ``GetShardIterator`` and
  ``GetRecords`` answer as the Streams API does (iterators ``TRIM_HORIZON``, ``LATEST``,
  ``AT_``/``AFTER_SEQUENCE_NUMBER``), so the local runner
  (:class:`~aggregator.dev.runner.StreamRunner`) reads the twin unchanged, and so would the
  backfill's bounded reads (:func:`~aggregator.operations.backfill.read_shard`) of a partition.
- **Sequence numbers.** Every record gets a new one when it becomes visible, increasing in
  arrival order (so per shard and along a lineage), 21 digits like DynamoDB's.
- **Time.** A record arrives at the simulated time the workload gives it (``arrival``), or at the
  clock's time when it is read (the framework's own writes, or a workload without a schedule);
  ``ApproximateCreationDateTime`` says so. Arrivals of one item never go backwards.
- **The event source mapping.** One :class:`~aggregator.dev.runner.StreamRunner` per
  partition (a Lambda "container" per shard), each with its own processor and fault plan. Every
  ``poll_seconds`` of simulated time (Lambda polls each shard 4 times a second; Lambda Developer
  Guide, "Using AWS Lambda with Amazon DynamoDB") each partition's current shard gets at most one
  batch of what has arrived (``ParallelizationFactor: 1``: one batch at a time per shard), all
  partitions in parallel threads; a child shard starts once its parent is finished, as the
  runner does for real streams; tumbling windows close once the clock passes their end.

What it does not model: invocation duration (a batch takes no simulated time, so batches per shard
per second are bounded by the polls, not by the function's latency), shard splits into two
children, partition splits as a table grows, records trimmed after 24 hours, and throttling (the
capacity model, :mod:`aggregator.dev.capacity`, reports where DynamoDB would throttle: give the
processors its ``observe`` as their observer for the aggregates, and call its ``watch_control``
on their client with the twin's clock for the control items).
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import TYPE_CHECKING, Any, cast

from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.dev.runner import RunnerFaults, RunStats, StreamRunner
from aggregator.dynamodb.streams import StreamSource, is_closed, parents_first
from aggregator.runtime.processor import StreamProcessor

if TYPE_CHECKING:
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

__all__ = [
    "EventSourceTwin",
    "ShardPlan",
    "ShardTwin",
    "SimulatedClock",
    "partition_of",
]

FIRST_SEQUENCE_NUMBER = 10**20
"""The twin's first sequence number (21 digits, the shortest DynamoDB uses)."""
POLLS_PER_SECOND = 4
"""Lambda polls each shard 4 times a second (Lambda Developer Guide, "Using AWS Lambda with
Amazon DynamoDB")."""


class SimulatedClock:
    """A settable clock in epoch seconds; pass it as the processors' ``clock``."""

    def __init__(self, start_seconds: float) -> None:
        self.now = float(start_seconds)

    def __call__(self) -> float:
        return self.now


def partition_of(partition_key_text: str, partitions: int) -> int:
    """The simulated partition (0 .. ``partitions`` - 1) of a partition key value: a stable hash,
    so all records of an item collection share a partition."""
    digest = hashlib.blake2b(partition_key_text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """Where and when shards open and close.

    Attributes
    ----------
    partitions
        ``P``: partitions of the table, each with its own lineage of shards.
    rollover_seconds
        A shard's life: it closes this long after it opened and its child takes over.
    start_seconds
        Epoch seconds at which the first shards open.

    Partition ``i``'s first shard closes ``(i + 1) / P`` of a rollover after the start, so the
    partitions' rollovers are spread evenly over the period.
    """

    partitions: int
    rollover_seconds: float
    start_seconds: float

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {self.partitions}")
        if self.rollover_seconds <= 0:
            raise ValueError(f"rollover_seconds must be positive, got {self.rollover_seconds}")

    def _first_close(self, partition: int) -> float:
        return self.start_seconds + self.rollover_seconds * (partition + 1) / self.partitions

    def generation(self, partition: int, at_seconds: float) -> int:
        """Index in partition ``partition``'s lineage of the shard open at ``at_seconds``."""
        first = self._first_close(partition)
        if at_seconds < first:
            return 0
        return 1 + int((at_seconds - first) // self.rollover_seconds)

    def span(self, partition: int, generation: int) -> tuple[float, float]:
        """``(opened, closes)`` of a shard, epoch seconds."""
        first = self._first_close(partition)
        if generation == 0:
            return self.start_seconds, first
        opened = first + (generation - 1) * self.rollover_seconds
        return opened, opened + self.rollover_seconds

    def shard_id(self, partition: int, generation: int) -> str:
        """A shard id in DynamoDB's form (``shardId-<20 digits>-<8 hex>``), unique per shard."""
        opened, _ = self.span(partition, generation)
        tag = hashlib.blake2b(f"{partition}/{generation}".encode(), digest_size=4).hexdigest()
        return f"shardId-{int(opened * 1000):020d}-{tag}"


@dataclass(slots=True)
class _TwinShard:
    shard_id: str
    partition: int
    generation: int
    parent_id: str | None
    opened: float
    closes: float
    records: list[dict[str, Any]] = field(default_factory=list)
    sequence_numbers: list[int] = field(default_factory=list)


@dataclass(eq=False)
class ShardTwin:
    """The records of a real stream, spread over the shards of a :class:`ShardPlan`.

    Parameters
    ----------
    streams_client
        A boto3 ``dynamodbstreams`` client of the real stream (DynamoDB Local's).
    stream_arn
        The real stream's ARN; the twin answers under the same ARN.
    plan
        Partitions and rollovers.
    clock
        The simulated clock the event source twin advances.
    arrival
        ``(Lambda-shaped record) -> epoch seconds | None``: when a record arrives (the workload's
        schedule); ``None``, or no function, means "now" (the clock when the record is read).
        Records of the framework's reserved partitions always arrive "now".
    layout
        Where the partition key is in a record's ``Keys``, and which partitions are reserved.
    """

    streams_client: DynamoDBStreamsClient
    stream_arn: str
    plan: ShardPlan
    clock: SimulatedClock
    _: KW_ONLY
    arrival: Callable[[dict[str, Any]], float | None] | None = None
    layout: TableLayout = DEFAULT_LAYOUT
    records_read: int = field(default=0, init=False)
    """Records read from the real stream so far."""

    def __post_init__(self) -> None:
        self._shards: dict[str, _TwinShard] = {}
        self._by_partition: list[list[_TwinShard]] = [[] for _ in range(self.plan.partitions)]
        self._pending: list[tuple[float, int, dict[str, Any]]] = []  # (arrival, order, record)
        self._order = 0
        self._next_sequence_number = FIRST_SEQUENCE_NUMBER
        self._latest_arrival: dict[str, float] = {}  # item key text -> its last arrival
        # real shard -> (iterator, done, last sequence number read)
        self._real: dict[str, tuple[str | None, bool, str | None]] = {}

    # -- the real stream -----------------------------------------------------------------------

    def _read_real(self) -> list[dict[str, Any]]:
        """New records of the real stream, parents' before children's (the framework's stream
        reader, :mod:`aggregator.dynamodb.streams`): each shard from its start, then after what
        the last call read; a closed shard through up to 50 empty pages in a row, an open one
        up to its first empty page."""
        out: list[dict[str, Any]] = []
        source = StreamSource(self.streams_client, self.stream_arn)
        for shard in parents_first(source.shards()):
            shard_id = shard["ShardId"]
            iterator, done, last = self._real.get(shard_id, (None, False, None))
            if done:
                continue
            closed = is_closed(shard)
            empty_pages = 0
            while True:
                page = source.page(shard_id, iterator, after=last)
                iterator = page.next_iterator
                out += page.records
                if page.records:
                    last = page.records[-1]["dynamodb"]["SequenceNumber"]
                if iterator is None:
                    break
                if page.records:
                    empty_pages = 0
                    continue
                empty_pages += 1
                if not closed or empty_pages >= 50:
                    break
            self._real[shard_id] = (iterator, iterator is None, last)
        return out

    def _arrival_of(self, record: dict[str, Any]) -> float:
        keys = record["dynamodb"].get("Keys", {})
        now = self.clock.now
        at: float | None = None
        if self.arrival is not None and not self.layout.is_reserved(keys):
            at = self.arrival(record)
        # a record read late cannot arrive in the past: DynamoDB appends to the open shard
        at = now if at is None else max(float(at), now)
        item = json.dumps(keys, sort_keys=True)
        at = max(at, self._latest_arrival.get(item, at))  # one item's records stay in order
        self._latest_arrival[item] = at
        return at

    # -- advancing -----------------------------------------------------------------------------

    def advance(self) -> int:
        """Read the real stream and make visible every record that has arrived by the clock's
        time, each in the shard open at its arrival, with a new sequence number. Returns the
        records made visible."""
        for record in self._read_real():
            self.records_read += 1
            heapq.heappush(self._pending, (self._arrival_of(record), self._order, record))
            self._order += 1
        visible = 0
        while self._pending and self._pending[0][0] <= self.clock.now:
            at, _, record = heapq.heappop(self._pending)
            self._place(at, record)
            visible += 1
        return visible

    def _place(self, at: float, record: dict[str, Any]) -> None:
        keys = record["dynamodb"].get("Keys", {})
        value = keys.get(self.layout.partition_key, {})  # the raw value, whatever its type
        partition = partition_of(json.dumps(value, sort_keys=True), self.plan.partitions)
        shard = self._shard(partition, self.plan.generation(partition, at))
        sequence_number = self._next_sequence_number
        self._next_sequence_number += 1
        dynamodb = dict(record["dynamodb"])
        dynamodb["SequenceNumber"] = str(sequence_number)
        dynamodb["ApproximateCreationDateTime"] = int(at)
        shard.records.append({**record, "dynamodb": dynamodb})
        shard.sequence_numbers.append(sequence_number)

    def _shard(self, partition: int, generation: int) -> _TwinShard:
        """The shard of ``generation``, created on its first record: a generation that received
        no record is left out of the lineage (the shard before it is the parent), as an empty
        shard has nothing to process and closes before its successor opens."""
        lineage = self._by_partition[partition]
        if lineage and lineage[-1].generation == generation:
            return lineage[-1]
        for shard in reversed(lineage):
            if shard.generation == generation:
                return shard
        opened, closes = self.plan.span(partition, generation)
        shard = _TwinShard(
            self.plan.shard_id(partition, generation),
            partition,
            generation,
            lineage[-1].shard_id if lineage else None,
            opened,
            closes,
        )
        lineage.append(shard)
        self._shards[shard.shard_id] = shard
        return shard

    def next_arrival(self) -> float | None:
        """Arrival time of the earliest record not visible yet (``None``: none pending)."""
        return self._pending[0][0] if self._pending else None

    def backlog(self, partition: int, positions: dict[str, str | None]) -> int:
        """Visible records of ``partition`` after the given shard positions (the runner's)."""
        total = 0
        for shard in self._by_partition[partition]:
            position = positions.get(shard.shard_id)
            done = (
                0
                if position is None
                else bisect.bisect_right(shard.sequence_numbers, int(position))
            )
            total += len(shard.records) - done
        return total

    def shards_opened(self) -> int:
        """Shards that received records, over every partition."""
        return len(self._shards)

    def view(self, partition: int) -> PartitionStream:
        """A ``dynamodbstreams`` client that sees only ``partition``'s shards."""
        return PartitionStream(self, partition)

    def whole(self) -> WholeStream:
        """A ``dynamodbstreams`` client that sees every partition's shards (what a reader of the
        whole stream, such as a backfill's collector, reads)."""
        return WholeStream(self)


class PartitionStream:
    """The Streams API of one partition of a :class:`ShardTwin` (what a runner reads)."""

    def __init__(self, twin: ShardTwin, partition: int) -> None:
        self.twin = twin
        self.partition = partition

    def _lineage(self) -> list[_TwinShard]:
        now = self.twin.clock.now
        return [s for s in self.twin._by_partition[self.partition] if s.opened <= now]

    def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        now = self.twin.clock.now
        shards = []
        for s in self._lineage():
            numbers: dict[str, str] = {"StartingSequenceNumber": str(FIRST_SEQUENCE_NUMBER)}
            if s.sequence_numbers:
                numbers["StartingSequenceNumber"] = str(s.sequence_numbers[0])
            if now >= s.closes:
                numbers["EndingSequenceNumber"] = str(
                    s.sequence_numbers[-1] if s.sequence_numbers else FIRST_SEQUENCE_NUMBER
                )
            shard: dict[str, Any] = {"ShardId": s.shard_id, "SequenceNumberRange": numbers}
            if s.parent_id is not None:
                shard["ParentShardId"] = s.parent_id
            shards.append(shard)
        return {"StreamDescription": {"StreamArn": self.twin.stream_arn, "Shards": shards}}

    def get_shard_iterator(
        self,
        *,
        StreamArn: str,
        ShardId: str,
        ShardIteratorType: str,
        SequenceNumber: str | None = None,
    ) -> dict[str, Any]:
        shard = self.twin._shards[ShardId]
        if ShardIteratorType == "TRIM_HORIZON":
            index = 0
        elif ShardIteratorType == "LATEST":  # just after the shard's most recent visible record
            index = len(shard.records)
        elif ShardIteratorType == "AFTER_SEQUENCE_NUMBER" and SequenceNumber is not None:
            index = bisect.bisect_right(shard.sequence_numbers, int(SequenceNumber))
        elif ShardIteratorType == "AT_SEQUENCE_NUMBER" and SequenceNumber is not None:
            index = bisect.bisect_left(shard.sequence_numbers, int(SequenceNumber))
        else:
            raise ValueError(f"unsupported iterator type {ShardIteratorType!r}")
        return {"ShardIterator": f"{ShardId}|{index}"}

    def get_records(self, *, ShardIterator: str, Limit: int = 1000) -> dict[str, Any]:
        shard_id, _, position = ShardIterator.partition("|")
        shard = self.twin._shards[shard_id]
        index = int(position)
        records = shard.records[index : index + Limit]
        end = index + len(records)
        closed = self.twin.clock.now >= shard.closes
        response: dict[str, Any] = {"Records": records}
        if not (closed and end >= len(shard.records)):
            response["NextShardIterator"] = f"{shard_id}|{end}"
        return response


class WholeStream(PartitionStream):
    """The Streams API of every partition of a :class:`ShardTwin`: ``DescribeStream`` lists the
    shards of all partitions; iterators and records are those of :class:`PartitionStream`."""

    def __init__(self, twin: ShardTwin) -> None:
        super().__init__(twin, 0)

    def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        shards = [
            shard
            for p in range(self.twin.plan.partitions)
            for shard in self.twin.view(p).describe_stream()["StreamDescription"]["Shards"]
        ]
        return {"StreamDescription": {"StreamArn": self.twin.stream_arn, "Shards": shards}}


class EventSourceTwin:
    """Lambda's event source mapping over a :class:`ShardTwin`, on its simulated clock.

    Parameters
    ----------
    twin
        The shards.
    processor_for
        ``(partition) -> StreamProcessor``: each partition's function (a container per shard);
        give them the twin's clock.
    batch_size
        Records per batch at most (Lambda's ``BatchSize``; 1 to 1,000 here).
    tumbling_window_seconds
        Tumbling windows, as the runner emulates them (``None``: plain events).
    poll_seconds
        Simulated seconds between polls of a shard (Lambda: a quarter second).
    faults_for
        ``(partition) -> RunnerFaults``: each partition's fault plan (``None``: no faults).
    threads
        Partitions processed at once.
    on_tick
        Called after every poll round with the clock's time.
    """

    def __init__(
        self,
        twin: ShardTwin,
        processor_for: Callable[[int], StreamProcessor],
        *,
        batch_size: int = 100,
        tumbling_window_seconds: int | None = 60,
        poll_seconds: float = 1 / POLLS_PER_SECOND,
        faults_for: Callable[[int], RunnerFaults] | None = None,
        threads: int = 8,
        on_tick: Callable[[float], None] | None = None,
    ) -> None:
        self.twin = twin
        self.poll_seconds = poll_seconds
        self.window_seconds = tumbling_window_seconds
        self.on_tick = on_tick
        self.processors = [processor_for(p) for p in range(twin.plan.partitions)]
        self.runners = [
            StreamRunner(
                processor,
                # the view answers the calls the stream reader makes (DescribeStream,
                # GetShardIterator, GetRecords)
                cast("DynamoDBStreamsClient", twin.view(p)),
                twin.stream_arn,
                batch_size=batch_size,
                tumbling_window_seconds=tumbling_window_seconds,
                poll_interval=0,
                faults=None if faults_for is None else faults_for(p),
                layout=twin.layout,
            )
            for p, processor in enumerate(self.processors)
        ]
        self.stats = [RunStats() for _ in self.runners]
        self.polls = 0
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="twin")

    def close(self) -> None:
        """Stop the threads and the processors' writer pools."""
        self._pool.shutdown(wait=True)
        for processor in self.processors:
            close = getattr(processor.writer, "close", None)
            if close is not None:
                close()

    def totals(self) -> RunStats:
        """Every partition's :class:`RunStats` summed."""
        total = RunStats()
        for stats in self.stats:
            for name in (f.name for f in fields(RunStats)):
                if name == "write":
                    total.write.add(stats.write)
                elif name != "elapsed_seconds":
                    setattr(total, name, getattr(total, name) + getattr(stats, name))
        return total

    def _busy(self, partition: int) -> bool:
        """Whether the partition's shard has records to deliver or a window that has ended."""
        runner = self.runners[partition]
        now = self.twin.clock.now
        if self.window_seconds is not None and any(
            start + self.window_seconds <= now for start in runner.open_windows
        ):
            return True
        return self.twin.backlog(partition, runner.positions) > 0

    def run(self, *, until_seconds: float | None = None) -> RunStats:
        """Poll every shard until every record that arrived has been processed and every window
        closed (or until the clock reaches ``until_seconds``); returns :meth:`totals`.

        Raises
        ------
        RunnerError, SimulatedCrash
            As the runner's :meth:`~aggregator.dev.runner.StreamRunner.poll`.
        """
        clock = self.twin.clock
        while until_seconds is None or clock.now < until_seconds:
            self.twin.advance()
            busy = [p for p in range(len(self.runners)) if self._busy(p)]
            if busy:
                now = clock.now
                for future in [
                    self._pool.submit(self.runners[p].poll, self.stats[p], now=now) for p in busy
                ]:
                    future.result()
                self.polls += 1
                if self.on_tick is not None:
                    self.on_tick(now)
                self.twin.advance()  # what the batches wrote arrives at once
                if any(self._busy(p) for p in range(len(self.runners))):
                    clock.now += self.poll_seconds
                    continue
            upcoming = [
                t
                for t in (
                    self.twin.next_arrival(),
                    *(
                        start + self.window_seconds
                        for runner in self.runners
                        for start in runner.open_windows
                        if self.window_seconds is not None
                    ),
                )
                if t is not None
            ]
            if not upcoming:
                break
            # jump to the next event, on the grid of polls
            steps = max(1, -int(-(min(upcoming) - clock.now) // self.poll_seconds))
            clock.now += steps * self.poll_seconds
        return self.totals()
