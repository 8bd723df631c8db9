"""Liveness: a backfill ends while the application never stops writing, and stays exact.

A table holds items written before it had a stream; the rules are deployed (the handler, a
runner in a thread, registers them pending) and an application process writes every
:data:`WRITE_INTERVAL` seconds throughout: before the backfill, during it (never pausing while it
runs) and after it. Its writes insert, modify (points, owner, kind) and delete items, so they
change every rule's aggregates. The backfill must end within :data:`AFTER_SCAN_SECONDS` of the end
of its scan (each read of a shard ends at a bound fixed when it starts, whatever the write rate:
``aggregator/operations/backfill/``), and once the writer has stopped and the handler has
caught up, every aggregate equals the rules over the table's items (computed here, independently
of the engine).

Before the bound (a read of an open shard ended only after 10 empty ``GetRecords`` pages in a
row), this backfill scanned the table but had not finished :data:`DEADLINE_SECONDS` later, the
writer still writing: the test failed at its deadline.
"""

from __future__ import annotations

import itertools
import multiprocessing
import random
import threading
import time
from typing import Any

import boto3
import pytest

from aggregator.dev.local import ACCESS_KEY, REGION, SECRET_KEY
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import table_definition, table_stream_arn
from aggregator.dynamodb.tablecheck import prepare_table
from aggregator.operations.backfill import Backfill, BackfillStats
from tests.integration.harness import (
    RULES,
    delete,
    expected_from_items,
    final_items,
    pipeline,
    put,
    stored,
)

pytestmark = pytest.mark.integration

WRITE_INTERVAL = 0.02
"""Seconds between the application's writes, besides each write's own round trip."""
GET_RECORDS_SECONDS = 0.025
"""A ``GetRecords`` round trip of the backfill's, as on AWS (tens of milliseconds; DynamoDB Local
answers in a few, in which ten empty pages in a row fall between two writes): with the writes
above, far more often than one write per ten round trips."""
STREAM_LAG = 0.5
"""The backfill's ``stream_lag_seconds`` (DynamoDB Local shows a record once its write returns)."""
AFTER_SCAN_SECONDS = 2 * STREAM_LAG + 5.0
"""Bound on the time from the end of the scan to the end of the backfill: the last page waits
out the stream lag before its read of the stream, the final read waits it out again, and each
read ends within a bounded time of its start; 5 s covers those reads, the final writes and the
runner sharing 2 busy cores."""
DEADLINE_SECONDS = 30.0
"""How long the test waits for the backfill before it fails (the writer then stops)."""
SEED_ITEMS = 300
ITEM_IDS = 400  # the writer inserts the ids above the seed's and deletes and modifies any
OWNERS = ("ann", "bob", "cyd", "dee", "eve")
KINDS = ("ruby", "opal", "jade", None)


def path_item(rng: random.Random, i: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": f"P{i % 7}",
        "sk": f"PATH#{i}",
        "owner": rng.choice(OWNERS),
        "points": rng.randint(-5, 20),
    }
    kind = rng.choice(KINDS)
    if kind:
        item["kind"] = kind
    return item


def write_steadily(endpoint_url: str, table: str, present: list[int], writing, stop, out) -> None:
    """The application, in a process of its own (as it would be: a backfill's threads never hold
    it up): one change every :data:`WRITE_INTERVAL` seconds (``writing`` set after the first)
    until ``stop`` is set, then puts ``(write times, counts per operation)`` on ``out``."""
    ddb = boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    alive = set(present)
    rng = random.Random(30)
    times: list[float] = []
    ops = {"insert": 0, "modify": 0, "delete": 0}
    while not stop.is_set():
        i = rng.randrange(ITEM_IDS)
        if i in alive and rng.random() < 0.35:
            delete(ddb, table, f"P{i % 7}", f"PATH#{i}")
            alive.discard(i)
            ops["delete"] += 1
        else:
            ops["modify" if i in alive else "insert"] += 1
            put(ddb, table, path_item(rng, i))
            alive.add(i)
        times.append(time.monotonic())  # CLOCK_MONOTONIC: one clock for every process
        writing.set()
        stop.wait(WRITE_INTERVAL)
    out.put((times, ops))


class Application:
    """Runs :func:`write_steadily` in a process of its own."""

    def __init__(self, endpoint_url: str, table: str, present: set[int]) -> None:
        context = multiprocessing.get_context("spawn")
        self.writing, self.stop = context.Event(), context.Event()
        self.out = context.Queue()
        self.process = context.Process(
            target=write_steadily,
            args=(endpoint_url, table, sorted(present), self.writing, self.stop, self.out),
            daemon=True,
        )
        self.times: list[float] = []
        self.ops: dict[str, int] = {}

    def start(self) -> None:
        self.process.start()
        assert self.writing.wait(30), "the application did not start writing"

    def finish(self) -> None:
        self.stop.set()
        self.times, self.ops = self.out.get(timeout=30)
        self.process.join(30)

    def longest_pause(self, start: float, end: float) -> float:
        """The longest time without a write between ``start`` and ``end`` (monotonic)."""
        marks = [start, *(t for t in self.times if start < t < end), end]
        return max(b - a for a, b in itertools.pairwise(marks))


class AwsPacedStreams:
    """A DynamoDB Streams client whose ``GetRecords`` takes :data:`GET_RECORDS_SECONDS`."""

    def __init__(self, streams) -> None:
        self._streams = streams

    def get_records(self, **kwargs: Any) -> Any:
        time.sleep(GET_RECORDS_SECONDS)
        return self._streams.get_records(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._streams, name)


class ScanClock:
    """The DynamoDB client the backfill uses, noting when its last ``Scan`` returned."""

    def __init__(self, ddb) -> None:
        self._ddb = ddb
        self.last_scan: float | None = None

    def scan(self, **kwargs: Any) -> Any:
        response = self._ddb.scan(**kwargs)
        self.last_scan = time.monotonic()
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ddb, name)


def test_backfill_ends_within_a_bound_of_its_scan_while_the_application_writes(
    dynamodb_local, ddb, streams
):
    name = f"live-{time.monotonic_ns()}"
    # GIVEN a table holding items written before it had a stream
    definition = table_definition(RULES.layout)
    definition.pop("StreamSpecification", None)
    ddb.create_table(TableName=name, **definition)
    ddb.get_waiter("table_exists").wait(TableName=name)
    try:
        seed_rng = random.Random(2)
        for i in range(SEED_ITEMS):
            put(ddb, name, path_item(seed_rng, i))
        prepare_table(ddb, name, RULES, poll_seconds=0.1)  # enables the stream
        arn = table_stream_arn(ddb, name)
        # ... an application that writes all along, and the handler, deployed with the rules
        app = Application(dynamodb_local.endpoint_url, name, set(range(SEED_ITEMS)))
        handler = pipeline(ddb, streams, name, arn, rules=RULES, lifecycle=True).runner
        handler.poll_interval = 0.005
        handler.run(idle_polls=1)  # registers the rules: pending
        assert {s.status for s in Manifest(ddb, name, RULES.layout).load().values()} == {"pending"}
        app.start()
        handling = threading.Event()

        def handle() -> None:
            while not handling.is_set():
                handler.run(until_caught_up=False, max_seconds=0.3)

        handler_thread = threading.Thread(target=handle, daemon=True)
        handler_thread.start()
        time.sleep(0.5)  # writes before the backfill
        # WHEN the backfill runs, the application writing throughout
        client = ScanClock(ddb)
        results: dict[str, BackfillStats | BaseException] = {}

        def backfill() -> None:
            try:
                results["stats"] = Backfill(
                    RULES,
                    TableStream(
                        client,  # type: ignore[arg-type]
                        AwsPacedStreams(streams),  # type: ignore[arg-type]
                        name,
                        arn,
                    ),
                    segments=2,
                    page_items=50,
                    stream_lag_seconds=STREAM_LAG,
                ).run()
            except BaseException as exc:  # reported below
                results["error"] = exc

        started = time.monotonic()
        backfill_thread = threading.Thread(target=backfill, daemon=True)
        backfill_thread.start()
        backfill_thread.join(DEADLINE_SECONDS)
        ended = time.monotonic()
        hung = backfill_thread.is_alive()
        time.sleep(0.5)  # writes after the backfill
        app.finish()
        backfill_thread.join()  # (a hung one ends once the writes stop)
        handling.set()
        handler_thread.join()
        handler.run()  # the handler catches up
        # THEN the backfill ended within the bound of its scan, the writes never pausing
        assert not hung, (
            f"the backfill did not end within {DEADLINE_SECONDS:.0f} s while the application "
            f"wrote (scan ended: {client.last_scan is not None})"
        )
        assert "error" not in results, results.get("error")
        stats = results["stats"]
        assert isinstance(stats, BackfillStats)
        assert client.last_scan is not None
        scan_seconds, after_scan = client.last_scan - started, ended - client.last_scan
        assert after_scan <= AFTER_SCAN_SECONDS, (scan_seconds, after_scan)
        assert app.longest_pause(started, ended) < 0.5
        assert all(n > 0 for n in app.ops.values()), app.ops
        assert stats.items_scanned >= SEED_ITEMS // 2 and stats.changed_items > 0
        # ... and every aggregate is exact
        states = Manifest(ddb, name, RULES.layout).load()
        assert {s.status for s in states.values()} == {"active"}
        expected = expected_from_items(final_items(ddb, name), RULES)
        assert stored(ddb, name, RULES) == expected
        print(
            f"\nbackfill under live writes: {stats.items_scanned} items scanned in "
            f"{scan_seconds:.1f} s, ended {after_scan:.1f} s after its scan; "
            f"{stats.changed_items} items changed since the fences, "
            f"{stats.stream_records_read} stream records read; writes {app.ops}"
        )
    finally:
        ddb.delete_table(TableName=name)
