"""Real data, adopted mid-stream: the first part of the flights replay is written before the
table has a stream or any rule; the rules are then deployed (the runner starts with them) and a
backfill runs while the rest of the replay is written and the runner processes it, all three at
once. Every aggregate must equal the CSV ground truth (computed independently in
test_flights.py), in every write mode."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from aggregator.core.rules import load_rules
from aggregator.dev.demo import write_steps
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dev.flights import replay_steps
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import table_definition, table_stream_arn
from aggregator.dynamodb.tablecheck import prepare_table
from aggregator.operations.backfill import Backfill
from aggregator.runtime.processor import create_processor
from tests.integration.harness import SOAK, stored
from tests.integration.test_flights import (
    FIRST_DAY,
    LAYOUTS,
    ROOT,
    SAMPLE,
    ground_truth,
    replayed_flights,
)
from tests.integration.test_kinds_flights import check_kinds, csv_departures

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

LAST_DAY = FIRST_DAY + timedelta(days=1)  # two days: the first before the stream, then the second


if SOAK:

    @pytest.fixture
    def dynamodb_local(fresh_dynamodb_local):
        """In a soak, one fresh server per replay (see test_flights.py)."""
        return fresh_dynamodb_local


@pytest.mark.parametrize("mode", ["exactly-once", "window", "at-least-once"])
def test_backfill_during_the_replay_equals_csv_ground_truth(ddb, streams, tmp_path, mode):
    (tmp_path / "table.yaml").write_text(LAYOUTS["PK-SK"])
    rules = load_rules([ROOT / "definitions" / "flights.yaml", tmp_path / "table.yaml"])
    name = f"adopt-{mode}"
    # GIVEN a table that already holds items, written before it had a stream
    definition = table_definition(rules.layout)
    definition.pop("StreamSpecification", None)
    ddb.create_table(TableName=name, **definition)
    ddb.get_waiter("table_exists").wait(TableName=name)
    steps = list(replay_steps(replayed_flights(FIRST_DAY, LAST_DAY), rules.layout))
    assert [(s.day, s.phase) for s in steps[3:5]] == [(LAST_DAY, "schedule"), (LAST_DAY, "depart")]
    # the first day, and the second day's schedule; the second day's departures and corrections
    # then change items the backfill scans, while it scans them
    before, during = steps[:4], steps[4:]
    write_steps(ddb, name, before)
    prepare_table(ddb, name, rules, poll_seconds=0.1)  # enables the stream (prepare-table)
    stream_arn = table_stream_arn(ddb, name)
    # WHEN the rules are deployed (the runner registers them, pending) ...
    client = FaultInjectingClient(ddb, layout=rules.layout)
    faults = RunnerFaults(client=client)
    if mode != "at-least-once":
        faults.crash = lambda n: 5 if client.crashes < 3 else None
        faults.duplicate = lambda n: n % 4 == 0
    processor = create_processor(rules, client, name, mode=mode, lifecycle=True)
    runner = StreamRunner(processor, streams, stream_arn, batch_size=100, faults=faults)
    # ... and the backfill runs while the rest of the replay is written and processed
    results: dict[str, object] = {}

    def backfill() -> None:
        results["backfill"] = Backfill(
            rules,
            TableStream(ddb, streams, name, stream_arn),
            segments=3,
            page_items=100,
            stream_lag_seconds=0.5,
        ).run()

    threads = [
        threading.Thread(
            target=lambda: results.setdefault("writes", write_steps(ddb, name, during))
        ),
        threading.Thread(target=backfill),
    ]
    started = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        runner.run(until_caught_up=False, max_seconds=0.5)
    for t in threads:
        t.join()
    runner.run()
    assert "backfill" in results, "the backfill thread failed"
    stats = results["backfill"]
    # THEN every aggregate equals the CSV ground truth
    truth = ground_truth(FIRST_DAY, LAST_DAY)
    sums = [r for r in rules if r.kind.name == "sum"]
    aggregates = stored(ddb, name, rules)
    assert {r.name: aggregates[r.name] for r in sums} == {r.name: truth[r.name] for r in sums}
    check_kinds(
        AggregateStore(ddb, name, rules), csv_departures(FIRST_DAY, LAST_DAY, sample=SAMPLE)
    )
    states = Manifest(ddb, name, rules.layout).load()
    assert {s.status for s in states.values()} == {"active"}
    assert stats.items_scanned > 0 and stats.changed_items > 0
    print(
        f"\n{mode}: backfill of {stats.items_scanned} items in {stats.elapsed_seconds:.1f} s "
        f"({stats.items_scanned / stats.elapsed_seconds:.0f} items/s), "
        f"{stats.modelled_rcu} RCU ({stats.modelled_rcu / stats.items_scanned:.3f} per item), "
        f"{stats.write.modelled_wcu} WCU for {stats.write.items_written} aggregate updates, "
        f"{stats.changed_items} items changed during it; all {time.monotonic() - started:.1f} s"
    )
