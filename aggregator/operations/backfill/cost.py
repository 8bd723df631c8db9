"""What a distributed backfill costs: a pure model of its wall time, DynamoDB units, stream reads,
Lambda GB-seconds, Step Functions state transitions and dollars (issue 33: "a billion 1 KB items
with 1,000 application writes a second").

The model follows the code of :mod:`aggregator.operations.backfill.distributed` (its defaults
imported from it) and the command line's (``aggregator backfill --on-aws``: 64 workers, 64 join
and 64 reduce buckets, 256 segments). It does no I/O: every figure comes from
:class:`BackfillCostInputs`, :data:`PRICES` and the constants below. Numbers here are ``float``:
an estimate, never written to DynamoDB (the project's rule of ``Decimal`` near DynamoDB does not
apply).

Phases, in the order they run (``N`` items of ``b`` bytes, ``w`` application writes a second,
``P`` shards, ``W`` workers, ``S`` segments, ``H`` join and ``R`` reduce buckets; an invocation
of a ``T``-second function reads for ``T - min(60, T/5)`` seconds:
:data:`~aggregator.operations.backfill.distributed.tasks.RESERVE_SECONDS`):

- **Fence** (the collector's catch-up; the scan starts only once every shard is fenced): the
  collector reads every shard's retained records once, ``w * retained_seconds`` of them (24 h:
  86.4 million at 1,000 writes a second), one thread per shard: records of
  ``stream_record_bytes`` (a 1 KB item's ``NEW_AND_OLD_IMAGES`` record: about 2.2 KB),
  ``min(1,000, 1 MB / record)`` a ``GetRecords`` call (DynamoDB Streams API Reference,
  ``GetRecords``), each shard at the calls a second the handler leaves it. Its time is the
  longer of those calls and its CPU (botocore parsing every record, both images' contributions
  of the records after a handler's fence: measured; one core whatever the memory: Python's
  threads share one).
- **Scan**: ``min(W' * r, read budget, write budget)`` items a second, ``r`` a worker's rate
  (the least of its CPU, measured on the real scan path, its pages, and a partition's 3,000
  read units a second), ``W' = min(W, S, Lambda concurrency - P - 1)`` (``W`` at most
  10,000: a Distributed Map's most child executions at once, Step Functions Developer Guide,
  "Using Map state in Distributed mode"); the read budget
  ``max_rcu`` (default: the table's read quota), a strongly consistent ``Scan`` costing one read
  unit per 4 KB; the write budget what the records may take under the control partitions. A
  segment flushes when its carry holds ``carry_keys`` aggregates or ``flush_items`` entries
  (checked after each page) and at the end of each invocation: per flush a record per join
  bucket its S entries touch and one per reduce bucket its partials touch (sizes measured), and
  a commit that rewrites the segment's progress item (9 bytes more per flush).
- **Collector** (beside the scan, from the fence to the scan's end, its lag and a last pass):
  a pass over the shards every 2 s (a ``GetRecords`` per shard), a flush of its B entries (one
  per record whose contributions change) every 60 s; its progress item holds every shard's
  position, rewritten at each commit.
- **Join** (``H`` tasks, ``W`` at once): per invocation, a probe of the first chunk of every
  committed flush of the collector and of every segment (strongly consistent ``BatchGetItem``:
  a missing key costs one read unit, a present one its size), then every record of its bucket;
  CPU: a JSON parse per S entry, a full decode of the matches and of the B entries (measured);
  it commits every 500 records it reads.
- **Reduce** (``R`` tasks, ``W`` at once): per invocation, a probe of the first chunk of every
  committed flush of every segment and join; then passes: with ``M`` the next power of two
  ``>= keys per bucket / carry_keys``, the bucket's records read ``M + log2 M`` times (``M``
  passes and at most one abandoned pass per doubling), each partial decoded and hashed each
  time (measured); each aggregate written once (one ``UpdateItem``, its checkpoint included).
- **Finish**: settle the top lists, mark the rules active.

Limits (each sourced where it is defined below), prices (:class:`Prices`) and what the model
omits are listed in ``docs/operations/backfill-cost.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from aggregator.dynamodb.checkpoint import SEQUENCE_NUMBER_BYTES, checkpoint_attribute
from aggregator.operations.backfill.distributed.collector import FLUSH_SECONDS, PASS_SECONDS
from aggregator.operations.backfill.distributed.job import MAX_RECORD_BYTES
from aggregator.operations.backfill.distributed.join import JOIN_FLUSH_RECORDS
from aggregator.operations.backfill.distributed.start import (
    DEFAULT_CARRY_KEYS,
    DEFAULT_FLUSH_ITEMS,
    DEFAULT_PAGE_ITEMS,
    MAX_BUCKETS,
    MAX_ITEMS,
)
from aggregator.operations.backfill.distributed.tasks import RESERVE_SECONDS
from aggregator.operations.backfill.operation import DEFAULT_STREAM_LAG_SECONDS

__all__ = [
    "BOUNDS",
    "PRICES",
    "SCAN_CPU_ITEMS_PER_SECOND",
    "BackfillCostInputs",
    "CostEstimate",
    "Phase",
    "Prices",
    "components_table",
    "estimate",
    "figures_list",
    "read_seconds",
    "workers_table",
]

# -- limits (sourced) -----------------------------------------------------------------------------
LAMBDA_VCPU_MB = 1769
"""Memory at which a Lambda function has one vCPU (Lambda Developer Guide, "Configure Lambda
function memory")."""
LAMBDA_TIMEOUT_SECONDS = 900
"""Lambda's longest invocation, and the template's timeout for the function (Lambda Developer
Guide, "Lambda quotas": 15 minutes)."""
LAMBDA_CONCURRENCY = 1000
"""Concurrent executions per Region by default (Lambda Developer Guide, "Lambda quotas"; can be
raised to tens of thousands)."""
STATE_ITEMS = MAX_ITEMS
"""Segments, join buckets and reduce buckets in all that ``start`` accepts: the state machine
carries their lists in its state, at most 256 KiB (Step Functions Developer Guide, "Step
Functions service quotas")."""
TABLE_READ_QUOTA = 40_000
TABLE_WRITE_QUOTA = 40_000
"""An on-demand table's default throughput quota, read and write request units a second
(Developer Guide, "Quotas in Amazon DynamoDB"; can be raised)."""
PARTITION_READ_UNITS = 3000
PARTITION_WRITE_UNITS = 1000
"""What one partition serves a second (Developer Guide, "Understanding DynamoDB warm throughput in
different scenarios"; "Best practices for designing and using partition keys effectively")."""
ITEM_MAX_BYTES = 400 * 1024
"""DynamoDB's largest item (Developer Guide, "Service, account, and table quotas": 400 KB)."""
GET_RECORDS_MAX_RECORDS = 1000
GET_RECORDS_MAX_BYTES = 1024 * 1024
"""What one ``GetRecords`` returns at most: 1,000 records or 1 MB, whichever comes first
(DynamoDB Streams API Reference, ``GetRecords``)."""
STREAM_SHARD_CALLS_PER_SECOND = 5.0
"""``GetRecords`` calls a second one shard serves, all its readers together. DynamoDB's own
documentation states only "do not allow more than two processes to read from the same DynamoDB
Streams shard at the same time" (Developer Guide, "Quotas", DynamoDB Streams; the API's
``LimitExceededException``); five a second is Kinesis Data Streams' documented per-shard read
limit ("Quotas and limits": "up to 5 transactions per second for reads"), which DynamoDB Streams
is reported to follow (aws/aws-sdk-java-v2 issue 470). An assumption of that strength."""
HANDLER_POLLS_PER_SECOND = 4.0
"""``GetRecords`` calls the stream handler's event source mapping makes per shard a second
(Lambda Developer Guide, "Using AWS Lambda with Amazon DynamoDB": four times a second;
/work/shared/notes/aws-facts.md). The collector has the rest of a shard's calls."""
STREAM_READ_PRICE_UNIT = 100_000

# -- the code's own figures -----------------------------------------------------------------
# PASS_SECONDS, FLUSH_SECONDS (the collector's) and JOIN_FLUSH_RECORDS are imported above.
REDUCE_WRITER_THREADS = 8
"""A reducer's writer's concurrent requests (``make_writer(..., max_workers=8)``)."""
ATTEMPT_BYTES = 9
"""A progress item grows by one attempt id (8 hex digits and a comma) per committed flush."""
BATCH_GET_KEYS = 100
"""``BatchGetItem`` reads 100 keys at most (DynamoDB API Reference, ``BatchGetItem``)."""

# -- sizes (derived from the protocol; assumptions marked) ----------------------------------------
CHECKPOINT_BYTES = len(checkpoint_attribute("shard")) + SEQUENCE_NUMBER_BYTES + 4
"""One checkpoint on an aggregate item: its name (``c#`` and 12 characters) and its value (the
sequence number's 17 bytes and 4 bytes of time): 35 bytes."""
RECORD_OVERHEAD_BYTES = 150
"""A data record's key (``backfill#<id>#scanned#<h>#<writer>#<flush>#<attempt>#<chunk>``), its
partition key, ``chunks`` and TTL attributes: an assumption."""
PROGRESS_BASE_BYTES = 300
"""A scan's or join's progress item without its attempts: keys, ``state`` (a scan's next key and
figures), ``done``, ``commits``, TTL: an assumption."""
SHARD_POSITION_BYTES = 90
"""What the collector's progress item holds per shard: its id (``shardId-<20 digits>-<8 hex>``)
and its last sequence number in ``state.last``, and its id in ``state.done``: an assumption."""
STATS_WRITE_UNITS = 1
"""The ``stats`` item's ``ADD`` after each commit (a few small numbers)."""
REDUCER_STATE_WRITE_UNITS = 1
"""A reducer's state item (``put_if_version``: a few hundred bytes)."""
KB = 1024
MB = 1024 * 1024
READ_UNIT_BYTES = 4096

# -- this machine (measured: ``python -m bench.backfill_scale --measure``) -----------------------
SCAN_CPU_ITEMS_PER_SECOND = 19_000
"""Items one core scans a second on the real scan path: botocore parsing each ``Scan`` page, per
item :func:`~aggregator.operations.backfill.item_digest`, ``Job.contributions``
(``Engine.image_entries`` of ``likes_per_post``), ``FlushBuffer.add_amounts`` and ``add_entry``,
and one ``FlushBuffer.write`` of 20 pages (20,000 keys: a flush at ``carry_keys``) over 64 join
and 64 reduce buckets with ``Job.put_records`` stubbed out. MEASURED on the development machine
(x86, 2 shared cores): 19,355, 19,361 and 19,371; rounded down. Lambda's arm64 core is taken as
equal (not measured)."""
S_ENTRY_BYTES = 37.7
"""Bytes of a record per S or B entry as ``encode_entries`` writes them (the digest, the
contribution, the aggregate's name once per record, zlib): MEASURED, 312 entries a record."""
PARTIAL_BYTES = 12.6
"""Bytes of a record per partial amount as ``encode_amounts`` writes them: MEASURED, 312 a
record."""
JOIN_SKIP_ENTRIES_PER_SECOND = 1_150_000
"""S entries a join passes over a second (JSON parsed, digest looked up, not a match): MEASURED
1,239,049, 1,198,516 and 1,221,402."""
JOIN_DECODE_ENTRIES_PER_SECOND = 145_000
"""Entries a join decodes in full a second (``decode_entries``: the Decimals, the aggregates):
MEASURED 149,343, 154,642 and 155,208."""
REDUCE_ENTRIES_PER_SECOND = 155_000
"""Partials a reducer decodes and hashes a second (``decode_amounts`` and ``residue``'s
BLAKE2b): MEASURED 157,794, 166,071 and 172,989."""
STREAM_PARSE_RECORDS_PER_SECOND = 21_000
"""Stream records (2.2 KB, both images) botocore parses a second from a ``GetRecords``
response: MEASURED 21,240, 21,743 and 23,368."""
STREAM_EVALUATE_RECORDS_PER_SECOND = 64_000
"""Records a second whose two images' contributions the collector computes and compares:
MEASURED 66,283, 64,780 and 67,708."""
SCAN_PAGE_SECONDS = 0.1
"""Seconds one strongly consistent 1 MB of ``Scan`` page takes to arrive (and 1 MB of
``BatchGetItem`` records): an ASSUMPTION (AWS publishes "single-digit millisecond" latency for
small requests, nothing per 1 MB page)."""
STREAM_REQUEST_SECONDS = 0.05
"""Seconds one ``GetRecords`` takes: an assumption."""
UPDATE_SECONDS = 0.008
"""Seconds one ``UpdateItem`` takes: an assumption (the one ``bench.shard_throughput`` makes)."""

# -- worker memory (measured with tracemalloc on the development machine) -------------------------
PYTHON_BASE_MB = 49.0
"""Resident memory of Python with boto3 and the engine imported (``ru_maxrss``)."""
PAGE_PYTHON_FACTOR = 3.1
"""Peak Python memory of a parsed response per byte of it (3.08 MB for a 1 MB ``Scan`` page)."""
CARRY_ENTRY_BYTES = 620
"""Python memory of one aggregate key in a carry (its reference and amounts)."""
ENTRY_PYTHON_BYTES = 430
"""Python memory of one S or B entry held before a flush (digest and contribution)."""


def read_seconds(timeout_seconds: float) -> float:
    """How long an invocation of a ``timeout_seconds`` function reads before its last flush:
    ``T - min(RESERVE_SECONDS, T / 5)`` (``distributed.tasks.stop_time``)."""
    return timeout_seconds - min(RESERVE_SECONDS, timeout_seconds / 5)


@dataclass(frozen=True)
class Prices:
    """Dollar prices, US East (N. Virginia), free tiers ignored; sources in
    ``docs/operations/backfill-cost.md``."""

    read_unit: float = 0.125 / 1e6
    """On-demand, per read request unit."""
    write_unit: float = 0.625 / 1e6
    """On-demand, per write request unit."""
    stream_read: float = 0.02 / STREAM_READ_PRICE_UNIT
    """Per streams read request unit (one ``GetRecords`` call)."""
    lambda_gb_second: float = 0.0000133334
    """arm64."""
    lambda_request: float = 0.20 / 1e6
    state_transition: float = 0.025 / 1000
    """Standard workflows."""


PRICES = Prices()


@dataclass(frozen=True)
class BackfillCostInputs:
    """What the model needs; the defaults are issue 33's case with the code's and the command
    line's defaults.

    Parameters
    ----------
    items, item_bytes
        Items in the table (``N``) and bytes per item (DynamoDB's item size).
    contributing_share
        Share of items whose contribution is not empty (they get S entries and partials).
    contributions_per_item
        Aggregate keys one contributing item adds to (rules times granularities).
    aggregate_keys
        Distinct aggregate keys of the rules being backfilled (``K``).
    app_writes_per_second
        The application's writes a second throughout (one stream record each).
    changing_share
        Share of those writes whose record changes a rule's contribution (a B entry each).
    shards
        Open stream shards (about one per table partition).
    retained_seconds
        How much of the application's writes the stream holds when the backfill starts (its
        retention, 24 hours, for a stream older than that): the collector's catch-up.
    fence_age_seconds
        How long before the backfill the handler fenced the shards (its records since then are
        changes the collector turns into B entries); 0: the backfill fences them.
    stream_record_bytes
        Bytes per stream record (``None``: ``2 * item_bytes + 200``, both images and the keys).
    workers
        ``MaxConcurrency`` of the maps (``--workers``): concurrent scan, join and reduce tasks.
    segments, join_buckets, reduce_buckets
        ``--segments``, ``--join-buckets``, ``--reduce-buckets``: at most 30,000 in all.
    page_items, carry_keys, flush_items
        The ``Scan`` page's ``Limit``; a carry's aggregates and a flush's entries (the code's
        defaults).
    lambda_memory_mb, lambda_timeout_seconds
        The function's memory (the template's 1,769 MB: one vCPU) and timeout (900 s).
    scan_cpu_items_per_second, s_entry_bytes, partial_bytes, join_skip_entries_per_second,
    join_decode_entries_per_second, reduce_entries_per_second,
    stream_parse_records_per_second, stream_evaluate_records_per_second
        This machine's figures (:data:`SCAN_CPU_ITEMS_PER_SECOND` and the constants after it:
        ``python -m bench.backfill_scale --measure`` measures them).
    scan_page_seconds, stream_request_seconds
        Seconds per 1 MB read (``Scan`` page or ``BatchGetItem``) and per ``GetRecords``
        (assumed).
    overlap_reads
        Whether a worker counts one page while the next is read (else the two add up).
    max_rcu
        The backfill's read budget, read units a second (``None``: the table's read quota).
    table_read_quota, table_write_quota, lambda_concurrency
        The table's throughput quotas (on-demand default 40,000 each) and the Region's Lambda
        concurrency (1,000).
    stream_shard_calls_per_second, handler_polls_per_second
        ``GetRecords`` calls a shard serves a second, and those the handler takes of them.
    control_partitions, aggregate_partitions
        Partition key values the control items and the aggregates spread over (the layout's
        ``control_partitions``, ``aggregate_partitions``).
    aggregate_item_bytes, aggregate_checkpoints
        An aggregate item without checkpoints, and the checkpoints already on it.
    stream_lag_seconds
        The protocol's bound on the stream's delay.
    """

    items: int = 1_000_000_000
    item_bytes: int = 1024
    contributing_share: float = 0.9
    contributions_per_item: int = 1
    aggregate_keys: int = 10_000_000
    app_writes_per_second: float = 1000.0
    changing_share: float = 0.5
    shards: int = 128
    retained_seconds: float = 86_400.0
    fence_age_seconds: float = 0.0
    stream_record_bytes: int | None = None
    workers: int = 64
    segments: int = 256
    join_buckets: int = 64
    reduce_buckets: int = 64
    page_items: int = DEFAULT_PAGE_ITEMS
    carry_keys: int = DEFAULT_CARRY_KEYS
    flush_items: int = DEFAULT_FLUSH_ITEMS
    lambda_memory_mb: int = 1769
    lambda_timeout_seconds: float = float(LAMBDA_TIMEOUT_SECONDS)
    scan_cpu_items_per_second: float = SCAN_CPU_ITEMS_PER_SECOND
    s_entry_bytes: float = S_ENTRY_BYTES
    partial_bytes: float = PARTIAL_BYTES
    join_skip_entries_per_second: float = JOIN_SKIP_ENTRIES_PER_SECOND
    join_decode_entries_per_second: float = JOIN_DECODE_ENTRIES_PER_SECOND
    reduce_entries_per_second: float = REDUCE_ENTRIES_PER_SECOND
    stream_parse_records_per_second: float = STREAM_PARSE_RECORDS_PER_SECOND
    stream_evaluate_records_per_second: float = STREAM_EVALUATE_RECORDS_PER_SECOND
    scan_page_seconds: float = SCAN_PAGE_SECONDS
    stream_request_seconds: float = STREAM_REQUEST_SECONDS
    overlap_reads: bool = True
    max_rcu: float | None = None
    table_read_quota: float = TABLE_READ_QUOTA
    table_write_quota: float = TABLE_WRITE_QUOTA
    lambda_concurrency: int = LAMBDA_CONCURRENCY
    stream_shard_calls_per_second: float = STREAM_SHARD_CALLS_PER_SECOND
    handler_polls_per_second: float = HANDLER_POLLS_PER_SECOND
    control_partitions: int = 16
    aggregate_partitions: int = 16
    aggregate_item_bytes: int = 120
    aggregate_checkpoints: int = 4
    stream_lag_seconds: float = DEFAULT_STREAM_LAG_SECONDS

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or value is None:
                continue
            if value < 0 or (value == 0 and f.name not in _MAY_BE_ZERO):
                raise ValueError(f"{f.name} must be positive, not {value}")
        for name in ("contributing_share", "changing_share"):
            if getattr(self, name) > 1:
                raise ValueError(f"{name} is a share: 0 to 1, not {getattr(self, name)}")
        if self.lambda_timeout_seconds > LAMBDA_TIMEOUT_SECONDS:
            raise ValueError(
                f"lambda_timeout_seconds must stay within Lambda's {LAMBDA_TIMEOUT_SECONDS} s, "
                f"not {self.lambda_timeout_seconds}"
            )
        for name in ("join_buckets", "reduce_buckets", "workers"):
            if getattr(self, name) > MAX_BUCKETS:
                raise ValueError(f"{name} must be 1 to {MAX_BUCKETS:,}, not {getattr(self, name)}")
        in_state = self.segments + self.join_buckets + self.reduce_buckets
        if in_state > STATE_ITEMS:
            raise ValueError(
                f"segments, join buckets and reduce buckets are {in_state:,} in all, over "
                f"{STATE_ITEMS:,} (the state machine carries their lists in 256 KiB)"
            )
        if self.shards + 1 >= self.lambda_concurrency:
            raise ValueError(
                f"lambda_concurrency {self.lambda_concurrency} leaves no worker beside "
                f"{self.shards} shards' handlers and the collector"
            )
        if self.handler_polls_per_second >= self.stream_shard_calls_per_second:
            raise ValueError(
                "handler_polls_per_second leaves the collector no GetRecords calls of a shard"
            )

    def with_(self, **changes: Any) -> BackfillCostInputs:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return replace(self, **changes)

    @property
    def record_bytes(self) -> float:
        """Bytes per stream record."""
        if self.stream_record_bytes is not None:
            return float(self.stream_record_bytes)
        return 2.0 * self.item_bytes + 200


_MAY_BE_ZERO = {
    "contributing_share",
    "changing_share",
    "app_writes_per_second",
    "aggregate_checkpoints",
    "stream_lag_seconds",
    "retained_seconds",
    "fence_age_seconds",
    "handler_polls_per_second",
}


@dataclass(frozen=True)
class Phase:
    """One phase's figures: wall seconds, invocations, GB-seconds, units and calls."""

    name: str
    seconds: float
    invocations: float = 0.0
    gb_seconds: float = 0.0
    read_units: float = 0.0
    write_units: float = 0.0
    stream_reads: float = 0.0
    transitions: float = 0.0


BOUNDS = (
    "workers",
    "segments",
    "Lambda concurrency",
    "read capacity",
    "write capacity",
)
"""What can bound the scan's rate (:attr:`CostEstimate.bound`)."""


@dataclass(frozen=True)
class CostEstimate:
    """The model's answer for one :class:`BackfillCostInputs` (:func:`estimate`).

    ``phases`` are fence, scan, collector tail, join, reduce, finish, in order (the collector runs
    beside the scan: its reads and GB-seconds count in ``collector``, its tail's seconds in the
    wall time). Dollars are per component; ``bound`` names what limits the scan's rate and
    ``saturating_workers`` the fewest workers that reach it (more add nothing to the scan).
    ``warnings`` are one-line findings: where the inputs take the code past a limit.
    """

    inputs: BackfillCostInputs
    phases: tuple[Phase, ...]
    collector: Phase
    scan_items_per_second: float
    worker_items_per_second: float
    effective_workers: int
    bound: str
    saturating_workers: int
    s_entries: float
    b_entries: float
    partial_entries: float
    aggregate_updates: float
    reduce_passes: int
    probe_read_units: float
    progress_write_units: float
    catch_up_records: float
    fence_shard_seconds: float
    collector_capacity: float
    """Records a second the collector can read beside the scan (it must exceed the
    application's writes)."""
    worker_memory_mb: dict[str, float]
    dollars: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        """Wall time, fence to finish."""
        return sum(p.seconds for p in self.phases)

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    def phase(self, name: str) -> Phase:
        return next(p for p in (*self.phases, self.collector) if p.name == name)

    def _total(self, name: str) -> float:
        return float(sum(getattr(p, name) for p in (*self.phases, self.collector)))

    @property
    def read_units(self) -> float:
        return self._total("read_units")

    @property
    def write_units(self) -> float:
        return self._total("write_units")

    @property
    def stream_reads(self) -> float:
        return self._total("stream_reads")

    @property
    def gb_seconds(self) -> float:
        return self._total("gb_seconds")

    @property
    def invocations(self) -> float:
        return self._total("invocations")

    @property
    def transitions(self) -> float:
        return self._total("transitions")

    @property
    def total_dollars(self) -> float:
        return sum(self.dollars.values())

    @property
    def dollars_per_item(self) -> float:
        return self.total_dollars / self.inputs.items

    @property
    def worker_peak_mb(self) -> float:
        """The largest peak memory of any task (scan, collector, join, reduce)."""
        return max(self.worker_memory_mb.values())


# -- helpers --------------------------------------------------------------------------------------


def touched(buckets: int, entries: float) -> float:
    """Expected buckets ``entries`` uniformly hashed entries fall into."""
    if entries <= 0:
        return 0.0
    return buckets * -math.expm1(entries * math.log1p(-1 / buckets)) if buckets > 1 else 1.0


def distinct(keys: float, draws: float) -> float:
    """Expected distinct keys among ``draws`` uniform draws from ``keys``."""
    return keys * -math.expm1(-draws / keys)


def draws_for(keys: float, wanted: float) -> float:
    """Expected uniform draws from ``keys`` until ``wanted`` distinct ones (``inf`` when
    ``wanted >= keys``)."""
    if wanted >= keys:
        return math.inf
    return -keys * math.log1p(-wanted / keys)


def record_units(payload_bytes: float, unit_bytes: int) -> int:
    """Units of one data record of ``payload_bytes`` (its blob) and its overhead: one per
    started ``unit_bytes`` (1 KB written, 4 KB read strongly consistent)."""
    return math.ceil((RECORD_OVERHEAD_BYTES + payload_bytes) / unit_bytes)


@dataclass(frozen=True)
class Records:
    """The data records of one kind a flush writes, in expectation: ``records`` (chunks
    included), the ``firsts`` (buckets touched: one first chunk each), write and read units."""

    records: float
    firsts: float
    write_units: float
    read_units: float
    entries: float

    def times(self, n: float) -> Records:
        return Records(
            self.records * n,
            self.firsts * n,
            self.write_units * n,
            self.read_units * n,
            self.entries * n,
        )


NO_RECORDS = Records(0.0, 0.0, 0.0, 0.0, 0.0)


def flush_records(buckets: int, entries: float, entry_bytes: float) -> Records:
    """The records of one flush of ``entries`` over ``buckets`` buckets: one per bucket touched,
    split into chunks of at most ``MAX_RECORD_BYTES`` (350 KB: items are at most 400 KB),
    ``entry_bytes`` an entry (the bucket's entries shared evenly among its chunks)."""
    firsts = touched(buckets, entries)
    if firsts == 0:
        return NO_RECORDS
    per_bucket = entries / firsts
    chunks = max(1, math.ceil(per_bucket * entry_bytes / MAX_RECORD_BYTES))
    payload = per_bucket / chunks * entry_bytes
    records = firsts * chunks
    return Records(
        records,
        firsts,
        records * record_units(payload, KB),
        records * record_units(payload, READ_UNIT_BYTES),
        entries,
    )


def progress_write_units(commits: int, flushes: int, base_bytes: float) -> float:
    """Write units of ``commits`` commits of a progress item of ``base_bytes`` that grows
    :data:`ATTEMPT_BYTES` with each of ``flushes`` of them (spread evenly): each commit rewrites
    the item, one unit per started KB."""
    if commits <= 0:
        return 0.0
    if flushes <= 0:
        return commits * math.ceil(base_bytes / KB)
    total = 0.0
    # commit c (1..commits) holds about c * flushes / commits attempts
    step = ATTEMPT_BYTES * flushes / commits
    first = base_bytes + step
    last = base_bytes + step * commits
    level = math.ceil(first / KB)
    while level <= math.ceil(last / KB):
        # commits whose size falls in ((level - 1) KB, level KB]
        low = max(1, math.floor(((level - 1) * KB - base_bytes) / step) + 1)
        high = min(commits, math.floor((level * KB - base_bytes) / step))
        if high >= low:
            total += (high - low + 1) * level
        level += 1
    return total


def probe_units(probes: float, present_share: float, present_units: float) -> float:
    """Read units of ``probes`` strongly consistent reads of first chunks, a share of them present
    (``present_units`` each: the whole item is read) and the rest missing (one unit each)."""
    return probes * (present_share * present_units + (1 - present_share))


def estimate(inputs: BackfillCostInputs | None = None, prices: Prices = PRICES) -> CostEstimate:
    """The model's estimate for ``inputs`` (default: issue 33's case) at ``prices``.

    Returns
    -------
    CostEstimate
        Wall time per phase, units, invocations, transitions, dollars per component, the bound
        on the scan's rate, each task's peak memory and the warnings.

    Raises
    ------
    ValueError
        When the application's writes take the whole table write quota.
    """
    i = inputs or BackfillCostInputs()
    warnings: list[str] = []
    gb = i.lambda_memory_mb / 1024
    core = min(1.0, i.lambda_memory_mb / LAMBDA_VCPU_MB)  # Python uses one core at most
    reading = read_seconds(i.lambda_timeout_seconds)
    contributing = i.items * i.contributing_share
    contributions = contributing * i.contributions_per_item
    item_read_units = i.item_bytes / READ_UNIT_BYTES
    page_items = min(float(i.page_items), MB / i.item_bytes)
    page_seconds = i.scan_page_seconds * page_items * i.item_bytes / MB
    bytes_per_second = MB / i.scan_page_seconds
    app_wcu = i.app_writes_per_second * (
        math.ceil(i.item_bytes / KB) + i.changing_share * i.contributions_per_item
    )
    read_budget = i.max_rcu if i.max_rcu is not None else i.table_read_quota

    # -- fence: the collector's catch-up of every shard's retained records ----------------------
    record_bytes = i.record_bytes
    per_call = max(
        1.0, min(GET_RECORDS_MAX_RECORDS, math.floor(GET_RECORDS_MAX_BYTES / record_bytes))
    )
    calls_share = i.stream_shard_calls_per_second - i.handler_polls_per_second
    catch_up = i.app_writes_per_second * i.retained_seconds
    after_fence = i.app_writes_per_second * min(i.fence_age_seconds, i.retained_seconds)
    catch_cpu = (
        catch_up / i.stream_parse_records_per_second
        + after_fence / i.stream_evaluate_records_per_second
    ) / core
    catch_api = catch_up / i.shards / (calls_share * per_call)
    fence_seconds = 1.0 + max(catch_cpu, catch_api)
    # every shard read at once: each progresses at the pace of all
    fence_shard_seconds = fence_seconds - 1.0
    if fence_shard_seconds > reading:
        warnings.append(
            f"a shard's fence read takes {fence_shard_seconds:,.0f} s, past one invocation's "
            f"{reading:,.0f} s: it goes on over {math.ceil(fence_shard_seconds / reading)} "
            "invocations (the collector commits where each stopped)"
        )
    fence_invocations = max(1, math.ceil(fence_seconds / reading))
    fence_calls = catch_up / per_call + i.shards
    fence = Phase(
        "fence",
        fence_seconds,
        invocations=fence_invocations + 1,  # and start
        gb_seconds=(fence_seconds + 1.0) * gb,
        stream_reads=fence_calls,
        # a fence item per shard, the meta item, the collector's commit
        write_units=i.shards
        + 1
        + math.ceil((PROGRESS_BASE_BYTES + i.shards * SHARD_POSITION_BYTES) / KB),
        transitions=4 + 2 * fence_invocations,
    )

    # -- one scan worker ------------------------------------------------------------------------
    cpu = i.scan_cpu_items_per_second * core
    dynamodb = min(page_items / page_seconds, PARTITION_READ_UNITS / item_read_units)
    worker = min(cpu, dynamodb) if i.overlap_reads else 1 / (1 / cpu + 1 / dynamodb)

    # -- what a segment writes, per flush ------------------------------------------------------
    per_segment = i.items / i.segments
    contributions_per_page = page_items * i.contributing_share * i.contributions_per_item
    # a flush when the carry holds carry_keys aggregates or flush_items entries, after a page
    by_keys = draws_for(i.aggregate_keys, i.carry_keys)
    by_entries = i.flush_items * i.contributions_per_item
    per_flush = min(by_keys, by_entries)
    if contributions_per_page > 0 and math.isfinite(per_flush):
        per_flush = math.ceil(per_flush / contributions_per_page) * contributions_per_page
    segment_contributions = contributions / i.segments

    # -- the scan's rate and its bound ----------------------------------------------------------
    def segment_flushes(invocations: float) -> tuple[float, float]:
        """Flushes of a segment, and contributions per flush."""
        full = segment_contributions / per_flush if math.isfinite(per_flush) else 0.0
        count = max(math.ceil(full), invocations, 1.0)
        return count, segment_contributions / count

    def scan_writes(invocations: float) -> tuple[Records, Records, float, float]:
        count, contributions_each = segment_flushes(invocations)
        entries_each = contributions_each / i.contributions_per_item
        s = flush_records(i.join_buckets, entries_each, i.s_entry_bytes)
        keys_each = distinct(i.aggregate_keys, contributions_each)
        p = flush_records(i.reduce_buckets, keys_each, i.partial_bytes)
        return s.times(count * i.segments), p.times(count * i.segments), count, keys_each

    lambda_room = i.lambda_concurrency - i.shards - 1
    caps = {
        "workers": i.workers,
        "segments": i.segments,
        "Lambda concurrency": lambda_room,
    }
    effective = min(caps.values())
    # the write budget, from the records of one invocation per segment (the fewest flushes)
    s_min, p_min, _, _ = scan_writes(1)
    scan_wcu_per_item = (s_min.write_units + p_min.write_units) / i.items
    write_budget = min(i.control_partitions * PARTITION_WRITE_UNITS, i.table_write_quota - app_wcu)
    if write_budget <= 0:
        raise ValueError("the application's writes take the whole table write quota")
    rates = {
        **{name: cap * worker for name, cap in caps.items()},
        "read capacity": read_budget / item_read_units,
        "write capacity": write_budget / scan_wcu_per_item if scan_wcu_per_item else math.inf,
    }
    bound = min(BOUNDS, key=lambda name: rates[name])  # the first of equal ones
    rate = rates[bound]
    ceiling = min(rates[name] for name in BOUNDS if name != "workers")
    saturating = min(
        math.ceil(ceiling / worker - 1e-9), *(v for k, v in caps.items() if k != "workers")
    )
    per_worker = rate / effective
    scan_seconds = max(i.items / rate, per_segment / worker)
    segment_seconds = per_segment / per_worker
    per_segment_invocations = max(1, math.ceil(segment_seconds / reading))
    s_records, p_records, seg_flushes, keys_per_flush = scan_writes(per_segment_invocations)
    scan_flushes = seg_flushes * i.segments
    scan_commit_units = i.segments * progress_write_units(
        int(seg_flushes), int(seg_flushes), PROGRESS_BASE_BYTES
    )
    scan_invocations = i.segments * per_segment_invocations
    scan = Phase(
        "scan",
        scan_seconds,
        invocations=scan_invocations,
        gb_seconds=effective * scan_seconds * gb,
        read_units=i.items * item_read_units,
        write_units=s_records.write_units
        + p_records.write_units
        + scan_commit_units
        + scan_flushes * STATS_WRITE_UNITS,
        transitions=i.segments * 2 + scan_invocations * 2,
    )

    # -- the collector beside the scan, and its tail ---------------------------------------------
    pass_seconds = i.shards * i.stream_request_seconds
    tail_seconds = i.stream_lag_seconds + max(PASS_SECONDS, pass_seconds)
    collect_seconds = scan_seconds + tail_seconds
    b_entries = (
        i.app_writes_per_second
        * i.changing_share
        * (i.fence_age_seconds + fence_shard_seconds + scan_seconds + tail_seconds)
    )
    collector_invocations = max(1, math.ceil(collect_seconds / reading))
    b_flushes = max(
        collector_invocations,
        math.ceil(collect_seconds / FLUSH_SECONDS),
        math.ceil(b_entries / i.flush_items),
    )
    b_records = flush_records(i.join_buckets, b_entries / b_flushes, i.s_entry_bytes).times(
        b_flushes
    )
    collector_commit_units = progress_write_units(
        b_flushes,
        b_flushes if b_entries else 0,
        PROGRESS_BASE_BYTES + i.shards * SHARD_POSITION_BYTES,
    )
    collector_item = (
        PROGRESS_BASE_BYTES + i.shards * SHARD_POSITION_BYTES + ATTEMPT_BYTES * b_flushes
    )
    passes = collect_seconds / max(PASS_SECONDS, pass_seconds)
    per_pass_shard = i.app_writes_per_second * max(PASS_SECONDS, pass_seconds) / i.shards
    collector = Phase(
        "collector",
        collect_seconds,
        invocations=collector_invocations,
        gb_seconds=collect_seconds * gb,
        stream_reads=passes * i.shards * max(1, math.ceil(per_pass_shard / per_call)),
        write_units=b_records.write_units + collector_commit_units + b_flushes * STATS_WRITE_UNITS,
        transitions=collector_invocations * 2,
    )
    collector_capacity = core / (
        1 / i.stream_parse_records_per_second
        + i.changing_share / i.stream_evaluate_records_per_second
    )
    if collector_capacity <= i.app_writes_per_second:
        warnings.append(
            f"the collector reads {collector_capacity:,.0f} records/s, no more than the "
            f"application's {i.app_writes_per_second:,.0f} writes/s: it falls behind"
        )
    tail = Phase("collector tail", tail_seconds)

    # -- join -----------------------------------------------------------------------------------
    # every invocation probes the first chunk of every committed flush of the collector and of
    # every segment (a present one costs its size, a missing one 1 unit); then reads its records
    def present(records: Records, flushes: float, buckets: int) -> tuple[float, float]:
        """Share of a bucket's probes that find a first chunk, and its read units."""
        if flushes == 0 or records.firsts == 0:
            return 0.0, 1.0
        return records.firsts / (flushes * buckets), records.read_units / records.records

    s_present, s_units = present(s_records, scan_flushes, i.join_buckets)
    b_present, b_units = present(b_records, b_flushes, i.join_buckets)
    join_bucket_records = (s_records.records + b_records.records) / i.join_buckets
    join_bucket_units = (s_records.read_units + b_records.read_units) / i.join_buckets
    join_bucket_bytes = (
        join_bucket_records * RECORD_OVERHEAD_BYTES
        + (contributing * i.s_entry_bytes + b_entries * i.s_entry_bytes) / i.join_buckets
    )
    changed_items = b_entries  # an upper bound: every change another item
    matches = changed_items * i.contributing_share
    join_cpu = (
        contributing / i.join_buckets / i.join_skip_entries_per_second
        + (matches + b_entries) / i.join_buckets / i.join_decode_entries_per_second
    ) / core
    join_probes_each = probe_units(scan_flushes, s_present, s_units) + probe_units(
        b_flushes, b_present, b_units
    )
    probe_seconds = (scan_flushes + b_flushes) / BATCH_GET_KEYS * i.stream_request_seconds
    join_task = probe_seconds + join_bucket_bytes / bytes_per_second + join_cpu
    join_invocations_each = max(1, math.ceil(join_task / reading))
    join_task += (join_invocations_each - 1) * probe_seconds
    join_workers = min(effective, i.join_buckets)
    join_read_units = i.join_buckets * (
        join_invocations_each * join_probes_each + join_bucket_units
    )
    join_seconds = max(
        math.ceil(i.join_buckets / join_workers) * join_task, join_read_units / read_budget
    )
    # its corrections: the first changes' old contributions, then a flush every 500 records
    olds = changed_items / i.join_buckets * i.contributions_per_item
    j_first = flush_records(i.reduce_buckets, distinct(i.aggregate_keys, olds), i.partial_bytes)
    scanned_records = s_records.records / i.join_buckets
    later = math.ceil(scanned_records / JOIN_FLUSH_RECORDS)
    matches_each = matches / i.join_buckets * i.contributions_per_item
    with_data = later * -math.expm1(-matches_each / later) if later else 0.0
    j_later = flush_records(i.reduce_buckets, matches_each / max(with_data, 1), i.partial_bytes)
    j_records = Records(
        j_first.records + j_later.records * with_data,
        j_first.firsts + j_later.firsts * with_data,
        j_first.write_units + j_later.write_units * with_data,
        j_first.read_units + j_later.read_units * with_data,
        j_first.entries + j_later.entries * with_data,
    ).times(i.join_buckets)
    join_flushes = (1 + later) * i.join_buckets
    join_commit_units = i.join_buckets * progress_write_units(
        1 + later, int(1 + with_data), PROGRESS_BASE_BYTES
    )
    join = Phase(
        "join",
        join_seconds,
        invocations=i.join_buckets * join_invocations_each,
        gb_seconds=i.join_buckets * join_task * gb,
        read_units=join_read_units,
        write_units=j_records.write_units + join_commit_units + i.join_buckets * STATS_WRITE_UNITS,
        transitions=i.join_buckets * 2 + i.join_buckets * join_invocations_each * 2,
    )

    # -- reduce ---------------------------------------------------------------------------------
    updates = distinct(i.aggregate_keys, contributions)
    keys_per_bucket = updates / i.reduce_buckets
    modulus = 1 << max(0, math.ceil(math.log2(max(keys_per_bucket / i.carry_keys, 1.0)) - 1e-12))
    reads_per_bucket = modulus + int(math.log2(modulus))
    partial_records = p_records.records + j_records.records
    partial_entries = p_records.entries + j_records.entries
    bucket_units = (p_records.read_units + j_records.read_units) / i.reduce_buckets
    bucket_bytes = (
        partial_records * RECORD_OVERHEAD_BYTES + partial_entries * i.partial_bytes
    ) / i.reduce_buckets
    p_present, p_units = present(p_records, scan_flushes, i.reduce_buckets)
    jp_present, jp_units = present(j_records, join_flushes, i.reduce_buckets)
    reduce_probes_each = probe_units(scan_flushes, p_present, p_units) + probe_units(
        join_flushes, jp_present, jp_units
    )
    reduce_probe_seconds = (scan_flushes + join_flushes) / BATCH_GET_KEYS * i.stream_request_seconds
    update_units = math.ceil(
        (i.aggregate_item_bytes + (i.aggregate_checkpoints + 1) * CHECKPOINT_BYTES) / KB
    )
    reduce_task = (
        reduce_probe_seconds
        + reads_per_bucket * bucket_bytes / bytes_per_second
        + reads_per_bucket * partial_entries / i.reduce_buckets / i.reduce_entries_per_second / core
        + keys_per_bucket * UPDATE_SECONDS / REDUCE_WRITER_THREADS
    )
    reduce_invocations_each = max(1, math.ceil(reduce_task / reading))
    reduce_task += (reduce_invocations_each - 1) * reduce_probe_seconds
    reduce_workers = min(effective, i.reduce_buckets)
    reduce_read_units = i.reduce_buckets * (
        reduce_invocations_each * reduce_probes_each + reads_per_bucket * bucket_units
    )
    update_budget = min(
        i.aggregate_partitions * PARTITION_WRITE_UNITS, i.table_write_quota - app_wcu
    )
    reduce_seconds = max(
        math.ceil(i.reduce_buckets / reduce_workers) * reduce_task,
        updates * update_units / update_budget,
        reduce_read_units / read_budget,
    )
    # the reducer's state: a doubling each, two saves per pass, the last
    saves = int(math.log2(modulus)) + 2 * modulus + 1
    reduce = Phase(
        "reduce",
        reduce_seconds,
        invocations=i.reduce_buckets * reduce_invocations_each,
        gb_seconds=i.reduce_buckets * reduce_task * gb,
        read_units=reduce_read_units,
        write_units=updates * update_units
        + i.reduce_buckets * (saves * REDUCER_STATE_WRITE_UNITS + STATS_WRITE_UNITS),
        transitions=i.reduce_buckets * 2 + i.reduce_buckets * reduce_invocations_each * 2,
    )
    finish = Phase("finish", 1.0, invocations=2, gb_seconds=2.0 * gb, write_units=4, transitions=6)

    # -- progress items past 400 KB -------------------------------------------------------------
    largest = max(collector_item, PROGRESS_BASE_BYTES + ATTEMPT_BYTES * seg_flushes)
    if largest > ITEM_MAX_BYTES:
        warnings.append(
            f"a progress item reaches {largest / KB:,.0f} KB, past DynamoDB's 400 KB item"
        )

    # -- memory ---------------------------------------------------------------------------------
    def response(records: float, payload: float) -> float:
        """Python bytes of one ``BatchGetItem`` response (100 records, 16 MB at most)."""
        mean = RECORD_OVERHEAD_BYTES + (payload / records if records else 0)
        return min(16 * MB, BATCH_GET_KEYS * mean) * PAGE_PYTHON_FACTOR

    held = ENTRY_PYTHON_BYTES + i.s_entry_bytes
    flush_entries = min(float(i.flush_items), per_flush / i.contributions_per_item)
    memory = {
        "scan": (2 if i.overlap_reads else 1) * page_items * i.item_bytes * PAGE_PYTHON_FACTOR
        + min(i.carry_keys, keys_per_flush) * CARRY_ENTRY_BYTES
        + min(flush_entries, contributing / i.segments) * held,
        # the catch-up: a GetRecords response per shard at once
        "collector": max(
            i.shards * min(GET_RECORDS_MAX_BYTES, per_call * record_bytes) * PAGE_PYTHON_FACTOR,
            min(float(i.flush_items), b_entries / b_flushes) * held,
        ),
        "join": changed_items / i.join_buckets * ENTRY_PYTHON_BYTES
        + response(s_records.records, contributing * i.s_entry_bytes),
        "reduce": min(i.carry_keys, keys_per_bucket) * CARRY_ENTRY_BYTES
        + response(partial_records, partial_entries * i.partial_bytes),
    }
    memory_mb = {task: PYTHON_BASE_MB + size / MB for task, size in memory.items()}
    over = {t: m for t, m in memory_mb.items() if m > i.lambda_memory_mb}
    for task, mb in over.items():
        warnings.append(f"the {task} task needs about {mb:,.0f} MB, over the function's memory")

    phases = (fence, scan, tail, join, reduce, finish)
    every = (*phases, collector)
    dollars = {
        "DynamoDB reads": sum(p.read_units for p in every) * prices.read_unit,
        "DynamoDB writes": sum(p.write_units for p in every) * prices.write_unit,
        "stream reads": sum(p.stream_reads for p in every) * prices.stream_read,
        "Lambda GB-s": sum(p.gb_seconds for p in every) * prices.lambda_gb_second,
        "Lambda requests": sum(p.invocations for p in every) * prices.lambda_request,
        "Step Functions": sum(p.transitions for p in every) * prices.state_transition,
    }
    return CostEstimate(
        inputs=i,
        phases=phases,
        collector=collector,
        scan_items_per_second=rate,
        worker_items_per_second=worker,
        effective_workers=effective,
        bound=bound,
        saturating_workers=saturating,
        s_entries=contributing,
        b_entries=b_entries,
        partial_entries=partial_entries,
        aggregate_updates=updates,
        reduce_passes=modulus,
        probe_read_units=i.join_buckets * join_invocations_each * join_probes_each
        + i.reduce_buckets * reduce_invocations_each * reduce_probes_each,
        progress_write_units=scan_commit_units + collector_commit_units + join_commit_units,
        catch_up_records=catch_up,
        fence_shard_seconds=fence_shard_seconds,
        collector_capacity=collector_capacity,
        worker_memory_mb=memory_mb,
        dollars=dollars,
        warnings=tuple(warnings),
    )


DOLLAR_COLUMNS = (
    ("DynamoDB reads", "reads"),
    ("DynamoDB writes", "writes"),
    ("stream reads", "stream reads"),
    ("Lambda GB-s", "Lambda GB-s"),
    ("Lambda requests", "Lambda requests"),
    ("Step Functions", "Step Functions"),
)


def workers_table(inputs: BackfillCostInputs, workers: tuple[int, ...]) -> str:
    """A Markdown table of :func:`estimate` for ``inputs`` at each worker count: hours (total and
    the scan's), dollars per component and in all, and the scan's bound.

    Returns
    -------
    str
        The table's lines, with a final newline.
    """
    head = ["workers", "hours", "scan hours", "bound"]
    head += [f"{label} $" for _, label in DOLLAR_COLUMNS] + ["total $", "$ per million items"]
    lines = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    lines[1] = lines[1].replace(" ---: | ---: | ---: | ---: |", " ---: | ---: | ---: | --- |", 1)
    for count in workers:
        e = estimate(inputs.with_(workers=count))
        row = [f"{count:,}", f"{e.hours:.2f}", f"{e.phase('scan').seconds / 3600:.2f}", e.bound]
        row += [f"{e.dollars[key]:,.2f}" for key, _ in DOLLAR_COLUMNS]
        row += [f"{e.total_dollars:,.2f}", f"{e.dollars_per_item * 1e6:,.3f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def components_table(e: CostEstimate) -> str:
    """A Markdown table of one estimate's phases: wall time, invocations, GB-seconds, read and
    write units, ``GetRecords`` calls and state transitions (the collector beside the scan).

    Returns
    -------
    str
        The table's lines, with a final newline.
    """
    head = ["phase", "wall s", "invocations", "GB-s", "read units", "write units"]
    head += ["GetRecords", "transitions"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for p in (*e.phases[:2], e.collector, *e.phases[2:]):
        name = "collector (beside the scan)" if p is e.collector else p.name
        wall = "" if p is e.collector else f"{p.seconds:,.0f}"
        row = [name, wall, f"{p.invocations:,.0f}", f"{p.gb_seconds:,.0f}"]
        row += [f"{p.read_units:,.0f}", f"{p.write_units:,.0f}", f"{p.stream_reads:,.0f}"]
        row += [f"{p.transitions:,.0f}"]
        lines.append("| " + " | ".join(row) + " |")
    total = ["total", f"{e.seconds:,.0f}", f"{e.invocations:,.0f}", f"{e.gb_seconds:,.0f}"]
    total += [f"{e.read_units:,.0f}", f"{e.write_units:,.0f}", f"{e.stream_reads:,.0f}"]
    total += [f"{e.transitions:,.0f}"]
    lines.append("| " + " | ".join(total) + " |")
    return "\n".join(lines) + "\n"


def figures_list(e: CostEstimate) -> str:
    """A Markdown list of one estimate's inputs and the figures the docs' prose rests on (the
    catch-up, the scan's bound, the flushes, the passes, the probes, the progress items, the
    warnings), so that no figure in the prose is typed by hand.

    Returns
    -------
    str
        The list's lines, with a final newline.
    """
    i = e.inputs
    fence, scan, join, reduce = (e.phase(n) for n in ("fence", "scan", "join", "reduce"))
    reading = read_seconds(i.lambda_timeout_seconds)
    lines = [
        f"- Inputs: {i.items:,} items of {i.item_bytes:,} bytes, {i.contributing_share:.0%} "
        f"contributing to {i.contributions_per_item} of {i.aggregate_keys:,} aggregates each; "
        f"{i.app_writes_per_second:,.0f} application writes a second, "
        f"{i.changing_share:.0%} of them changing a contribution; {i.shards:,} shards holding "
        f"{i.retained_seconds / 3600:,.0f} h of writes; {i.workers:,} workers, "
        f"{i.segments:,} segments, {i.join_buckets:,} join and {i.reduce_buckets:,} reduce "
        f"buckets; pages of {i.page_items:,} items, carries of {i.carry_keys:,} aggregates, "
        f"flushes of {i.flush_items:,} entries; a {i.lambda_memory_mb:,} MB function of "
        f"{i.lambda_timeout_seconds:,.0f} s, reading {reading:,.0f} s an invocation; the "
        f"table's quotas {i.table_read_quota:,.0f} read and {i.table_write_quota:,.0f} write "
        f"units a second; {i.control_partitions:,} control and {i.aggregate_partitions:,} "
        "aggregate partition key values.",
        f"- Fence: {e.catch_up_records:,.0f} retained records read once, "
        f"{fence.stream_reads:,.0f} `GetRecords` calls, {fence.seconds / 3600:.2f} h before "
        f"the scan begins ({e.fence_shard_seconds:,.0f} s a shard, every shard at once).",
        f"- Scan: {e.worker_items_per_second:,.0f} items/s a worker, "
        f"{e.scan_items_per_second:,.0f} items/s in all (bound: {e.bound}; "
        f"{e.saturating_workers:,} workers reach it), {scan.seconds / 3600:.2f} h, "
        f"{scan.read_units:,.0f} read and {scan.write_units:,.0f} write units.",
        f"- Collector: {e.b_entries:,.0f} B entries; it keeps up with "
        f"{e.collector_capacity:,.0f} records/s.",
        f"- Join: {join.seconds / 3600:.2f} h, {join.read_units:,.0f} read units.",
        f"- Reduce: {e.aggregate_updates:,.0f} aggregates written once each, "
        f"{e.reduce_passes} passes a bucket, {reduce.seconds / 3600:.2f} h, "
        f"{reduce.read_units:,.0f} read and {reduce.write_units:,.0f} write units.",
        f"- Probes of committed flushes (joins and reducers): {e.probe_read_units:,.0f} read "
        f"units; progress items' commits: {e.progress_write_units:,.0f} write units.",
        "- Peak memory: "
        + ", ".join(f"{task} {mb:,.0f} MB" for task, mb in e.worker_memory_mb.items())
        + ".",
    ]
    lines += [f"- Warning: {w}." for w in e.warnings]
    return "\n".join(lines) + "\n"
