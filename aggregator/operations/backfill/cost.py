"""What a distributed backfill costs: a pure model of its wall time, DynamoDB units, stream reads,
Lambda GB-seconds, Step Functions state transitions and dollars (issue 33: "a billion 1 KB items
with 1,000 application writes a second").

The model follows the distributed protocol (:mod:`aggregator.operations.backfill`'s successor on
Step Functions and Lambda): a **fence** of every stream shard, a **scan** of ``segments``
``Scan`` segments by ``workers`` concurrent Lambda invocations that count every item and write its
*S entry* (16-byte digest of its key, its contribution) to a join bucket and its amounts as
*partials* to a reduce bucket, a **collector** reading the stream beside the handler and writing a
*B entry* for every record whose contributions differ, a **join** (``join_buckets`` tasks: an
item's first B entry against its S entry gives its correction), a **reduce** (``reduce_buckets``
tasks: one exactly-once ``UpdateItem`` per aggregate key) and a **finish**. It does no I/O: every
figure comes from :class:`BackfillCostInputs`, :data:`PRICES` and the constants below.

Numbers here are ``float``: an estimate, never written to DynamoDB (the project's rule of
``Decimal`` near DynamoDB does not apply).

Formulas (``N`` items of ``b`` bytes, ``p`` of them contributing, ``e`` aggregate keys each, ``K``
aggregate keys, ``w`` application writes a second of which a share ``q`` change a contribution,
``W`` workers, ``S`` segments, ``H`` join and ``R`` reduce buckets, ``P`` shards):

- **Per-worker scan rate** ``r = min(cpu, dynamodb)`` (with ``overlap_reads``; else
  ``1 / (1/cpu + 1/dynamodb)``): ``cpu = scan_cpu_items_per_second * min(1, memory / 1,769 MB)``
  (Lambda allocates CPU in proportion to memory, one vCPU at 1,769 MB: Lambda Developer Guide,
  "Configure Lambda function memory"); ``dynamodb = min(items per page / scan_page_seconds,
  3,000 RRU/s / RRU per item)`` (a segment's ``Scan`` reads one partition at a time (AWS's
  DynamoDB workshop, "Sequential and parallel table scans": secondary source) and a partition
  serves at most 3,000 read units a second: Developer Guide, "Understanding DynamoDB warm
  throughput in different scenarios").
- **Scan rate** ``min(W' * r, read budget, write budget)``: ``W' = min(W, S, 10,000, Lambda
  concurrency - P - 1)`` (the stream handler holds one concurrent execution per shard, the
  collector one); the read budget is ``max_rcu`` (default: the table's read quota, 40,000 read
  request units a second for an on-demand table: Developer Guide, "Quotas"), a strongly
  consistent ``Scan`` costing 1 read unit per 4 KB of items (Developer Guide, "Read consumption");
  the write budget is what the backfill's records may take: ``control_partitions * 1,000`` WCU/s
  (a partition takes at most 1,000 write units a second; the records live under the control
  partition key values) and the table's write quota (40,000) less the application's writes.
- **Scan time** ``max(N / rate, N / S / r)`` (at least one segment's time).
- **B entries** ``w * q * (scan time + stream lag)``: every record written between the fence and
  the scan's end whose contributions differ (an upper bound on the changed items: each is counted
  as a different item).
- **Records**: a flush of ``n`` entries over ``B`` buckets writes one record per bucket it touches
  (``B * (1 - (1 - 1/B)**n)`` of them; more where a bucket's entries pass 350 KB), each
  ``ceil((100 + entries * bytes) / 1,024)`` write units; scan workers flush S entries every
  ``flush_items`` and partials every ``carry_keys`` distinct keys; the collector every
  ``flush_items`` B entries and at least once per invocation.
- **Join** reads every S and B record (strongly consistent: 1 read unit per started 4 KB per
  record) in ``ceil(H / W')`` waves; **reduce** reads every partial (``ceil(K / R /
  carry_keys)`` times) and writes each of the ``K`` aggregates once, ``ceil((aggregate bytes +
  checkpoints * 35) / 1,024)`` write units each, at most ``aggregate_partitions * 1,000`` WCU/s.
- **Lambda** GB-seconds = concurrent invocations * seconds * memory; requests = invocations, an
  invocation stopping itself after ``invocation_seconds``.
- **Step Functions** (standard workflow): a transition per state executed: 2 per loop iteration
  (the task and its choice), 1 per child execution a Distributed Map starts ("Transitions in
  Distributed Map state", Step Functions Developer Guide, "Transitions") and its end, a few at
  the top.

Prices (:class:`Prices`, US East (N. Virginia), free tiers ignored):

- DynamoDB on-demand: $0.125 per million read request units, $0.625 per million write request
  units, after the November 2024 reduction (secondary sources: airbyte.com "Amazon DynamoDB
  Pricing", 2025; jusdb.com, 2025; AWS's pricing page defines the units: aws.amazon.com/dynamodb/
  pricing/on-demand).
- DynamoDB Streams: reads by your own code (not a Lambda trigger) are charged, one *streams read
  request unit* per ``GetRecords`` call, up to 1,000 records or 1 MB; Lambda triggers read free
  and the first 2,500,000 a month are free (Developer Guide, "Evaluate your DynamoDB streams
  usage"); $0.02 per 100,000 (secondary source: a public cost table, gist allenheltondev). The
  collector is such a reader; the stream handler is a trigger.
- Lambda (arm64, the template's architecture): $0.0000133334 per GB-second, $0.20 per million
  requests (secondary sources: /work/shared/notes/aws-facts.md, a public Lambda cost note).
- Step Functions standard workflows: $0.025 per 1,000 state transitions (aws.amazon.com/
  step-functions/pricing); each child execution of a Distributed Map is one transition plus its
  own states'.

What it omits: the on-demand table's ramp (a table serves at once up to its *warm throughput*;
pre-warm it with ``UpdateTable`` before a big backfill: Developer Guide, "Understanding DynamoDB
warm throughput"), hot partitions and uneven segments, throttling retries and their transitions,
Lambda cold starts and the scaling rate, the stream handler's own cost (unchanged by the
backfill), the Scan pages' per-page rounding, storage of the records until their TTL deletes
them (free deletes), the free tiers, and Regions other than US East.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from aggregator.dynamodb.checkpoint import SEQUENCE_NUMBER_BYTES, checkpoint_attribute
from aggregator.dynamodb.writer import DEFAULT_MAX_WORKERS
from aggregator.operations.backfill.operation import DEFAULT_STREAM_LAG_SECONDS
from aggregator.operations.backfill.segments import MAX_PAGE_RECORD_BYTES

__all__ = [
    "BOUNDS",
    "DIGEST_BYTES",
    "PRICES",
    "SCAN_CPU_ITEMS_PER_SECOND",
    "BackfillCostInputs",
    "CostEstimate",
    "Phase",
    "Prices",
    "components_table",
    "estimate",
    "workers_table",
]

# -- limits (sourced) -----------------------------------------------------------------------------
LAMBDA_VCPU_MB = 1769
"""Memory at which a Lambda function has one vCPU (Lambda Developer Guide, "Configure Lambda
function memory")."""
LAMBDA_TIMEOUT_SECONDS = 900
"""Lambda's longest invocation (Lambda Developer Guide, "Lambda quotas": 15 minutes)."""
LAMBDA_CONCURRENCY = 1000
"""Concurrent executions per Region by default (Lambda Developer Guide, "Lambda quotas"; can be
raised to tens of thousands)."""
MAP_CONCURRENCY = 10_000
"""Child executions a Distributed Map runs at once at most (Step Functions Developer Guide,
"Using Map state in Distributed mode")."""
TABLE_READ_QUOTA = 40_000
TABLE_WRITE_QUOTA = 40_000
"""An on-demand table's default throughput quota, read and write request units a second
(Developer Guide, "Quotas in Amazon DynamoDB"; can be raised)."""
PARTITION_READ_UNITS = 3000
PARTITION_WRITE_UNITS = 1000
"""What one partition serves a second (Developer Guide, "Understanding DynamoDB warm throughput in
different scenarios")."""
GET_RECORDS_MAX_RECORDS = 1000
"""Records one ``GetRecords`` returns at most (DynamoDB Streams API reference)."""
STREAM_READ_PRICE_UNIT = 100_000

# -- sizes (derived from the protocol; assumptions marked) ----------------------------------------
DIGEST_BYTES = 16
"""An item's digest (BLAKE2b of its key: :func:`~aggregator.operations.backfill.item_digest`)."""
CHECKPOINT_BYTES = len(checkpoint_attribute("shard")) + SEQUENCE_NUMBER_BYTES + 4
"""One checkpoint on an aggregate item: its name (``c#`` and 12 characters) and its value (the
sequence number's 17 bytes and 4 bytes of time): 35 bytes."""
RECORD_OVERHEAD_BYTES = 100
"""A data record's key and other attributes (``backfill#<id>#scanned#<h>#<writer>#<flush>#
<attempt>`` and its partition key): an assumption."""
ENTRY_BYTES = 32
"""An S entry, a B entry or a partial amount as stored, compressed: an assumption. Measured for
``likes_per_post`` (definitions/reference_counts.yaml): an S entry is the 16-byte digest and a
43-byte contribution (``{"likes_per_post#POST%235741736":["1","0"]}``), 24.4 bytes an entry
once a thousand are zlib-compressed together."""
KB = 1024
READ_UNIT_BYTES = 4096

# -- this machine (measured) and DynamoDB's side (assumed) ----------------------------------------
SCAN_CPU_ITEMS_PER_SECOND = 36_000
"""Items one core counts a second: parsing the ``Scan`` response (botocore), the item's digest,
``Engine.image_entries`` for ``likes_per_post`` (definitions/reference_counts.yaml), adding to the
carry and encoding its S entry, on 1 KB items. MEASURED with ``python -m bench.backfill_scale
--measure`` on the development machine (x86, 2 shared cores): 36,676, 38,060 and 37,272 in three
runs; the lowest, rounded down. Lambda's arm64 core is taken as equal (not measured)."""
SCAN_PAGE_SECONDS = 0.1
"""Seconds one strongly consistent 1 MB ``Scan`` page takes to arrive: an ASSUMPTION (AWS
publishes "single-digit millisecond" latency for small requests, nothing per 1 MB page)."""
STREAM_REQUEST_SECONDS = 0.05
"""Seconds one ``GetRecords`` (or ``GetShardIterator``) takes: an assumption."""
UPDATE_SECONDS = 0.008
"""Seconds one ``UpdateItem`` takes: an assumption (the one ``bench.shard_throughput`` makes)."""
WRITER_CONCURRENCY = DEFAULT_MAX_WORKERS
"""Concurrent requests of a reducer's writer (the handler's writer's, 32)."""
JOIN_CPU_SECONDS_PER_ENTRY = 2e-6
"""CPU seconds a join spends on one S or B entry (decompress, slice, look up): an assumption."""

# -- worker memory (measured with tracemalloc on the development machine) -------------------------
PYTHON_BASE_MB = 49.0
"""Resident memory of Python with boto3 and the engine imported (``ru_maxrss``)."""
PAGE_PYTHON_FACTOR = 3.1
"""Peak Python memory of a parsed ``Scan`` page per byte of its response (3.08 MB for 1 MB)."""
CARRY_ENTRY_BYTES = 620
"""Python memory of one aggregate key in a carry (its reference and amounts)."""
ENTRY_PYTHON_BYTES = 430
"""Python memory of one S or B entry held before a flush (digest and contribution)."""


@dataclass(frozen=True)
class Prices:
    """Dollar prices, US East (N. Virginia); sources in the module docstring."""

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
    """What the model needs; the defaults are issue 33's case.

    Parameters
    ----------
    items
        Items in the table (``N``).
    item_bytes
        Bytes per item (DynamoDB's item size).
    contributing_share
        Share of items whose contribution is not empty (they get S entries and partials).
    contributions_per_item
        Aggregate keys one contributing item adds to (rules times granularities).
    aggregate_keys
        Distinct aggregate keys of the rules being backfilled (``K``).
    app_writes_per_second
        The application's writes a second during the backfill (one stream record each).
    changing_share
        Share of those writes whose record changes a rule's contribution (a B entry each).
    shards
        Open stream shards (about one per table partition).
    workers
        ``MaxConcurrency`` of the maps: concurrent scan, join and reduce invocations.
    segments
        ``TotalSegments`` of the scan (the Distributed Map's items).
    scan_cpu_items_per_second
        Items one vCPU counts a second (:data:`SCAN_CPU_ITEMS_PER_SECOND`, measured).
    scan_page_seconds
        Seconds per 1 MB ``Scan`` page (:data:`SCAN_PAGE_SECONDS`, assumed).
    page_bytes
        Bytes per ``Scan`` page (DynamoDB returns at most 1 MB).
    overlap_reads
        Whether a worker counts one page while the next is read (else the two add up).
    lambda_memory_mb
        The function's memory (the template's 1,769 MB: one vCPU).
    invocation_seconds
        How long an invocation works before it returns ``done: false`` (within Lambda's 900 s).
    flush_items
        S or B entries a writer holds before it flushes them.
    carry_keys
        Aggregate keys a scan worker's or reducer's carry holds before it flushes.
    join_buckets, reduce_buckets
        ``H`` and ``R``.
    max_rcu
        The backfill's read budget, read units a second (``None``: the table's read quota).
    table_read_quota, table_write_quota
        The table's throughput quotas (on-demand default 40,000 each).
    lambda_concurrency
        The Region's Lambda concurrency quota (default 1,000).
    control_partitions, aggregate_partitions
        Partition key values the control items (the backfill's records) and the aggregates
        spread over (the table layout's ``control_partitions``, ``aggregate_partitions``).
    aggregate_item_bytes
        An aggregate item without checkpoints.
    aggregate_checkpoints
        Checkpoints already on an aggregate item (shards that wrote it recently).
    stream_lag_seconds
        The protocol's bound on the stream's delay.
    stream_request_seconds
        Seconds per ``GetRecords`` (:data:`STREAM_REQUEST_SECONDS`, assumed).
    """

    items: int = 1_000_000_000
    item_bytes: int = 1024
    contributing_share: float = 0.9
    contributions_per_item: int = 1
    aggregate_keys: int = 10_000_000
    app_writes_per_second: float = 1000.0
    changing_share: float = 0.5
    shards: int = 128
    workers: int = 16
    segments: int = 1024
    scan_cpu_items_per_second: float = SCAN_CPU_ITEMS_PER_SECOND
    scan_page_seconds: float = SCAN_PAGE_SECONDS
    page_bytes: int = 1024 * 1024
    overlap_reads: bool = True
    lambda_memory_mb: int = 1769
    invocation_seconds: float = 600.0
    flush_items: int = 100_000
    carry_keys: int = 100_000
    join_buckets: int = 64
    reduce_buckets: int = 256
    max_rcu: float | None = None
    table_read_quota: float = TABLE_READ_QUOTA
    table_write_quota: float = TABLE_WRITE_QUOTA
    lambda_concurrency: int = LAMBDA_CONCURRENCY
    control_partitions: int = 16
    aggregate_partitions: int = 16
    aggregate_item_bytes: int = 120
    aggregate_checkpoints: int = 4
    stream_lag_seconds: float = DEFAULT_STREAM_LAG_SECONDS
    stream_request_seconds: float = STREAM_REQUEST_SECONDS

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
        if self.invocation_seconds > LAMBDA_TIMEOUT_SECONDS:
            raise ValueError(
                f"invocation_seconds must stay within Lambda's {LAMBDA_TIMEOUT_SECONDS} s, "
                f"not {self.invocation_seconds}"
            )
        if self.shards + 1 >= self.lambda_concurrency:
            raise ValueError(
                f"lambda_concurrency {self.lambda_concurrency} leaves no worker beside "
                f"{self.shards} shards' handlers and the collector"
            )

    def with_(self, **changes: Any) -> BackfillCostInputs:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return replace(self, **changes)


_MAY_BE_ZERO = {
    "contributing_share",
    "changing_share",
    "app_writes_per_second",
    "aggregate_checkpoints",
    "stream_lag_seconds",
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
    "Distributed Map concurrency",
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
    ``saturating_workers`` the fewest workers that reach it (more add nothing).
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
    collector_capacity: float
    """Records a second the collector can read (it must exceed the application's writes)."""
    worker_memory_mb: dict[str, float]
    dollars: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Wall time, fence to finish."""
        return sum(p.seconds for p in self.phases)

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    def phase(self, name: str) -> Phase:
        return next(p for p in (*self.phases, self.collector) if p.name == name)

    @property
    def read_units(self) -> float:
        return sum(p.read_units for p in (*self.phases, self.collector))

    @property
    def write_units(self) -> float:
        return sum(p.write_units for p in (*self.phases, self.collector))

    @property
    def stream_reads(self) -> float:
        return sum(p.stream_reads for p in (*self.phases, self.collector))

    @property
    def gb_seconds(self) -> float:
        return sum(p.gb_seconds for p in (*self.phases, self.collector))

    @property
    def invocations(self) -> float:
        return sum(p.invocations for p in (*self.phases, self.collector))

    @property
    def transitions(self) -> float:
        return sum(p.transitions for p in (*self.phases, self.collector))

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


def touched(buckets: int, entries: float) -> float:
    """Expected buckets ``entries`` uniformly hashed entries fall into."""
    if entries <= 0:
        return 0.0
    return buckets * -math.expm1(entries * math.log1p(-1 / buckets)) if buckets > 1 else 1.0


def distinct(keys: int, draws: float) -> float:
    """Expected distinct keys among ``draws`` uniform draws from ``keys``."""
    return keys * -math.expm1(-draws / keys)


def flush_write_units(buckets: int, entries: float) -> tuple[float, float]:
    """``(records, write units)`` of one flush of ``entries`` entries over ``buckets`` buckets:
    one record per bucket touched, split into records of at most
    :data:`~aggregator.operations.backfill.MAX_PAGE_RECORD_BYTES` (350 KB: items are at most
    400 KB), each ``ceil((overhead + its entries * ENTRY_BYTES) / 1 KB)`` write units (a bucket's
    entries shared evenly among its records)."""
    touched_buckets = touched(buckets, entries)
    if touched_buckets == 0:
        return 0.0, 0.0
    per_bucket = entries / touched_buckets
    fit = (MAX_PAGE_RECORD_BYTES - RECORD_OVERHEAD_BYTES) // ENTRY_BYTES
    chunks = max(1, math.ceil(per_bucket / fit))
    records = touched_buckets * chunks
    per_record = math.ceil((RECORD_OVERHEAD_BYTES + per_bucket / chunks * ENTRY_BYTES) / KB)
    return records, records * per_record


def record_read_units(records: float, entries: float) -> float:
    """Strongly consistent read units to read ``records`` records holding ``entries`` entries in
    all (1 per started 4 KB of each record, its entries taken as the mean)."""
    if records == 0:
        return 0.0
    return records * math.ceil((RECORD_OVERHEAD_BYTES + entries / records * ENTRY_BYTES) / 4096)


def estimate(inputs: BackfillCostInputs | None = None, prices: Prices = PRICES) -> CostEstimate:
    """The model's estimate for ``inputs`` (default: issue 33's case) at ``prices``.

    Returns
    -------
    CostEstimate
        Wall time per phase, units, invocations, transitions, dollars per component, the bound
        on the scan rate and each task's peak memory.
    """
    i = inputs or BackfillCostInputs()
    gb = i.lambda_memory_mb / 1024
    contributing = i.items * i.contributing_share
    contributions = contributing * i.contributions_per_item
    item_read_units = i.item_bytes / READ_UNIT_BYTES
    items_per_page = i.page_bytes / i.item_bytes
    app_wcu = i.app_writes_per_second * (
        math.ceil(i.item_bytes / KB) + i.changing_share * i.contributions_per_item
    )

    # -- one worker -----------------------------------------------------------------------------
    cpu = i.scan_cpu_items_per_second * min(1.0, i.lambda_memory_mb / LAMBDA_VCPU_MB)
    dynamodb = min(items_per_page / i.scan_page_seconds, PARTITION_READ_UNITS / item_read_units)
    worker = min(cpu, dynamodb) if i.overlap_reads else 1 / (1 / cpu + 1 / dynamodb)

    # -- what a scanned item writes -------------------------------------------------------------
    per_segment = i.items / i.segments
    s_per_segment = contributing / i.segments
    s_flushes = max(1, math.ceil(s_per_segment / i.flush_items)) if s_per_segment else 0
    s_records, s_wcu = flush_write_units(i.join_buckets, s_per_segment / max(s_flushes, 1))
    s_records *= s_flushes * i.segments
    s_wcu *= s_flushes * i.segments
    draws = contributions / i.segments
    # a carry flushes when it holds carry_keys keys: each flush covers m contributions
    keys_in_segment = distinct(i.aggregate_keys, draws)
    if keys_in_segment <= i.carry_keys:
        p_flushes, p_entries_per_flush = 1, keys_in_segment
    else:
        m = -i.aggregate_keys * math.log1p(-i.carry_keys / i.aggregate_keys)
        p_flushes, p_entries_per_flush = math.ceil(draws / m), float(i.carry_keys)
    p_records, p_wcu = flush_write_units(i.reduce_buckets, p_entries_per_flush)
    p_records *= p_flushes * i.segments
    p_wcu *= p_flushes * i.segments
    scan_partials = p_entries_per_flush * p_flushes * i.segments
    scan_wcu_per_item = (s_wcu + p_wcu) / i.items

    # -- the scan's rate and its bound ----------------------------------------------------------
    lambda_room = i.lambda_concurrency - i.shards - 1
    caps = {
        "workers": i.workers,
        "segments": i.segments,
        "Lambda concurrency": lambda_room,
        "Distributed Map concurrency": MAP_CONCURRENCY,
    }
    effective = min(caps.values())
    read_budget = i.max_rcu if i.max_rcu is not None else i.table_read_quota
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
    # the fewest workers whose scan reaches the other bounds' rate
    ceiling = min(rates[name] for name in BOUNDS if name != "workers")
    saturating = min(
        math.ceil(ceiling / worker - 1e-9), *(v for k, v in caps.items() if k != "workers")
    )
    per_worker = rate / effective
    scan_seconds = max(i.items / rate, per_segment / worker)
    segment_seconds = per_segment / per_worker
    scan_invocations = i.segments * max(1, math.ceil(segment_seconds / i.invocation_seconds))
    scan = Phase(
        "scan",
        scan_seconds,
        invocations=scan_invocations,
        gb_seconds=effective * scan_seconds * gb,
        read_units=i.items * item_read_units,
        # the records, and one progress commit per flush
        write_units=s_wcu + p_wcu + i.segments * (s_flushes + p_flushes),
        transitions=i.segments * 2 + scan_invocations * 2,
    )

    # -- fence, collector and its tail ----------------------------------------------------------
    fence_seconds = 1.0 + i.shards * 3 * i.stream_request_seconds
    fence = Phase(
        "fence",
        fence_seconds,
        invocations=2,
        gb_seconds=fence_seconds * gb,
        stream_reads=i.shards * 2,
        write_units=i.shards + 2,
        transitions=6,
    )
    pass_seconds = i.shards * i.stream_request_seconds
    tail_seconds = i.stream_lag_seconds + pass_seconds
    collect_seconds = scan_seconds + tail_seconds
    b_entries = i.app_writes_per_second * i.changing_share * (scan_seconds + i.stream_lag_seconds)
    collector_invocations = max(1, math.ceil(collect_seconds / i.invocation_seconds))
    b_flushes = max(collector_invocations, math.ceil(b_entries / i.flush_items))
    b_records, b_wcu = flush_write_units(i.join_buckets, b_entries / b_flushes)
    b_records *= b_flushes
    b_wcu *= b_flushes
    records_read = i.app_writes_per_second * collect_seconds
    collector = Phase(
        "collector",
        collect_seconds,
        invocations=collector_invocations,
        gb_seconds=collect_seconds * gb,
        # every shard once per pass, and a call per 1,000 records beyond the first of each
        stream_reads=collect_seconds / i.stream_request_seconds
        + records_read / GET_RECORDS_MAX_RECORDS,
        write_units=b_wcu + b_flushes,
        transitions=collector_invocations * 2,
    )
    collector_capacity = min(
        GET_RECORDS_MAX_RECORDS / i.stream_request_seconds,
        i.scan_cpu_items_per_second / 2 * min(1.0, i.lambda_memory_mb / LAMBDA_VCPU_MB),
    )
    tail = Phase("collector tail", tail_seconds)

    # -- join -----------------------------------------------------------------------------------
    join_entries = contributing + b_entries
    join_records = s_records + b_records
    join_read_units = record_read_units(join_records, join_entries)
    bytes_per_second = i.page_bytes / i.scan_page_seconds
    join_workers = min(effective, i.join_buckets)
    bucket_bytes = (
        join_records * RECORD_OVERHEAD_BYTES + join_entries * ENTRY_BYTES
    ) / i.join_buckets
    join_task = bucket_bytes / bytes_per_second + join_entries / i.join_buckets * (
        JOIN_CPU_SECONDS_PER_ENTRY / min(1.0, i.lambda_memory_mb / LAMBDA_VCPU_MB)
    )
    join_seconds = max(
        math.ceil(i.join_buckets / join_workers) * join_task, join_read_units / read_budget
    )
    corrections = b_entries * i.contributions_per_item
    j_per_bucket = corrections / i.join_buckets
    j_flushes = max(1, math.ceil(j_per_bucket / i.flush_items))
    j_records, j_wcu = flush_write_units(i.reduce_buckets, j_per_bucket / j_flushes)
    join_invocations = i.join_buckets * max(1, math.ceil(join_task / i.invocation_seconds))
    join = Phase(
        "join",
        join_seconds,
        invocations=join_invocations,
        gb_seconds=join_workers * join_seconds * gb,
        read_units=join_read_units,
        write_units=(j_wcu + j_flushes) * i.join_buckets,
        transitions=i.join_buckets * 2 + join_invocations * 2,
    )

    # -- reduce ---------------------------------------------------------------------------------
    partial_entries = scan_partials + corrections
    partial_records = p_records + j_records * j_flushes * i.join_buckets
    keys_per_bucket = i.aggregate_keys / i.reduce_buckets
    passes = max(1, math.ceil(keys_per_bucket / i.carry_keys))
    reduce_read_units = record_read_units(partial_records, partial_entries) * passes
    updates = distinct(i.aggregate_keys, contributions)
    update_units = math.ceil(
        (i.aggregate_item_bytes + (i.aggregate_checkpoints + 1) * CHECKPOINT_BYTES) / KB
    )
    update_budget = min(
        i.aggregate_partitions * PARTITION_WRITE_UNITS, i.table_write_quota - app_wcu
    )
    reduce_workers = min(effective, i.reduce_buckets)
    reduce_bytes = (
        partial_records * RECORD_OVERHEAD_BYTES + partial_entries * ENTRY_BYTES
    ) * passes
    reduce_task = (
        reduce_bytes / i.reduce_buckets / bytes_per_second
        + updates / i.reduce_buckets / (WRITER_CONCURRENCY / UPDATE_SECONDS)
    )
    reduce_seconds = max(
        math.ceil(i.reduce_buckets / reduce_workers) * reduce_task,
        updates * update_units / update_budget,
        reduce_read_units / read_budget,
    )
    reduce_invocations = i.reduce_buckets * max(1, math.ceil(reduce_task / i.invocation_seconds))
    reduce = Phase(
        "reduce",
        reduce_seconds,
        invocations=reduce_invocations,
        gb_seconds=reduce_workers * reduce_seconds * gb,
        read_units=reduce_read_units,
        write_units=updates * update_units + i.reduce_buckets * passes,
        transitions=i.reduce_buckets * 2 + reduce_invocations * 2,
    )
    finish = Phase("finish", 1.0, invocations=2, gb_seconds=1.0 * gb, write_units=4, transitions=6)

    # -- memory ---------------------------------------------------------------------------------
    def response(records: float, entries: float) -> float:
        """Python bytes of one ``BatchGetItem`` response (100 records, 16 MB at most)."""
        mean = RECORD_OVERHEAD_BYTES + (entries / records * ENTRY_BYTES if records else 0)
        return min(16 * 1024 * 1024, 100 * mean) * PAGE_PYTHON_FACTOR

    held = ENTRY_PYTHON_BYTES + ENTRY_BYTES  # an entry in Python, and encoded for its record
    memory = {
        "scan": (2 if i.overlap_reads else 1) * i.page_bytes * PAGE_PYTHON_FACTOR
        + min(i.carry_keys, keys_in_segment) * CARRY_ENTRY_BYTES
        + min(i.flush_items, s_per_segment) * held,
        "collector": min(i.flush_items, b_entries / b_flushes) * held
        # one pass's records, both images of each
        + i.app_writes_per_second * pass_seconds * 2 * i.item_bytes * PAGE_PYTHON_FACTOR,
        "join": b_entries / i.join_buckets * ENTRY_PYTHON_BYTES
        + response(join_records, join_entries),
        "reduce": min(i.carry_keys, keys_per_bucket) * CARRY_ENTRY_BYTES
        + response(partial_records, partial_entries),
    }
    memory_mb = {task: PYTHON_BASE_MB + size / (1024 * 1024) for task, size in memory.items()}

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
        collector_capacity=collector_capacity,
        worker_memory_mb=memory_mb,
        dollars=dollars,
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
