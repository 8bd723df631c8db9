"""Kinds per time bucket ("the mean, worst and p90 delay of each origin, per hour"): windowed
``mean``, ``min``, ``max`` and ``distribution`` rules read over ranges that mix hour and minute
buckets, exact (the distribution within its alpha) when flights are inserted, moved to another
delay, origin or time, and deleted, the current extreme included. The first flights are written
before the table has a stream and counted by a backfill that runs while the rest are written and
the stream runner (crashing, delivering twice) processes them. The truth is computed from the
table's own items, independently of the engine."""

from __future__ import annotations

import math
import random
import threading
from decimal import ROUND_HALF_EVEN, Context, Decimal

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.exceptions import QueryError
from aggregator.core.rules import load_rules
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import table_definition, table_stream_arn
from aggregator.dynamodb.tablecheck import prepare_table
from aggregator.operations.backfill import Backfill
from aggregator.operations.reconcile import reconcile
from aggregator.runtime.processor import create_processor
from tests.factories import ddb_json
from tests.integration.harness import SOAK, table_items

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

HOUR = 3600
START = 1_767_225_600  # 2026-01-01T00:00:00Z
ORIGINS = ["JFK", "LGA", "EWR"]
ALPHA = Decimal("0.02")

RULES = """version: 1
x-window: &window {time: ts, unit: epoch_seconds, granularities: [hour, minute]}
rules:
  - name: mean_delay
    match: {type: flight}
    key: "{origin}"
    delta: {attribute: delay}
    kind: mean
    write_shards: 2
    window: *window
  - name: worst_delay
    match: {type: flight}
    key: "{origin}"
    delta: {attribute: delay}
    kind: max
    write_shards: 2
    window: *window
  - name: best_delay
    match: {type: flight}
    key: "{origin}"
    delta: {attribute: delay}
    kind: min
    window: *window
  - name: delay_distribution
    match: {type: flight}
    key: "{origin}"
    delta: {attribute: delay}
    kind: {name: distribution, relative_accuracy: 0.02}
    window: *window
"""


def _delays(items: list[dict], origin: str, start: int, end: int) -> list[Decimal]:
    """The delays of ``origin``'s flights with ``start <= ts < end``, from the items."""
    return sorted(
        Decimal(i["delay"]["N"])
        for i in items
        if i.get("type", {}).get("S") == "flight"
        and i["origin"]["S"] == origin
        and start <= int(i["ts"]["N"]) < end
    )


def _nearest_rank(ordered: list[Decimal], p: int) -> Decimal:
    return ordered[max(1, math.ceil(p * len(ordered) / 100)) - 1]


def _flight(rng: random.Random, flight_id: str) -> dict:
    return {
        "pk": flight_id,
        "sk": "FLIGHT",
        "type": "flight",
        "origin": rng.choice(ORIGINS),
        "delay": rng.choice([0, rng.randint(-15, 5), rng.randint(1, 400), rng.randint(1, 60)]),
        "ts": START + rng.randrange(3 * HOUR),
    }


def _changes(rng: random.Random, flights: dict[str, dict], prefix: str, count: int):
    """``count`` writes: new flights, moves (delay, origin or time) and deletes; each origin's
    current worst and best flight among the moved and deleted ones."""
    for i in range(count):
        choice = rng.random()
        if flights and choice < 0.1:  # the worst delay of an origin goes
            origin = rng.choice(ORIGINS)
            mine = [f for f in flights.values() if f["origin"] == origin]
            if mine:
                worst = max(mine, key=lambda f: f["delay"])
                del flights[worst["pk"]]
                yield "delete", worst
                continue
        if flights and choice < 0.2:  # the best delay of an origin moves up
            origin = rng.choice(ORIGINS)
            mine = [f for f in flights.values() if f["origin"] == origin]
            if mine:
                best = dict(min(mine, key=lambda f: f["delay"]))
                best["delay"] += rng.randint(1, 30)
                flights[best["pk"]] = best
                yield "put", best
                continue
        if flights and choice < 0.4:
            moved = dict(flights[rng.choice(sorted(flights))])
            field = rng.choice(["delay", "origin", "ts"])
            moved[field] = _flight(rng, moved["pk"])[field]
            flights[moved["pk"]] = moved
            yield "put", moved
        elif flights and choice < 0.45:
            gone = flights.pop(rng.choice(sorted(flights)))
            yield "delete", gone
        else:
            new = _flight(rng, f"FLIGHT#{prefix}{i}")
            flights[new["pk"]] = new
            yield "put", new


def _write(ddb, name: str, writes) -> None:
    for op, flight in writes:
        if op == "put":
            ddb.put_item(TableName=name, Item=ddb_json(flight))
        else:
            ddb.delete_item(TableName=name, Key=ddb_json({"pk": flight["pk"], "sk": "FLIGHT"}))


@pytest.mark.parametrize("mode", ["exactly-once", "window"])
def test_kinds_per_hour_and_over_ranges_are_exact_under_backfill_moves_and_faults(
    ddb, streams, dynamodb_local, tmp_path, mode
):
    (tmp_path / "rules.yaml").write_text(RULES)
    rules = load_rules(tmp_path / "rules.yaml")
    name = f"delays-{mode}"
    definition = table_definition(rules.layout)
    definition.pop("StreamSpecification", None)
    ddb.create_table(TableName=name, **definition)
    ddb.get_waiter("table_exists").wait(TableName=name)
    rng = random.Random(19)
    flights: dict[str, dict] = {}
    # writes before the stream, during the backfill, after it (make soak: twice as many)
    n_before, n_during, n_after = (100, 150, 60) if SOAK else (30, 45, 20)
    _write(ddb, name, list(_changes(rng, flights, "a", n_before)))  # before the stream
    prepare_table(ddb, name, rules, poll_seconds=0.1)  # DynamoDB Local: ACTIVE at once
    stream_arn = table_stream_arn(ddb, name)
    client = FaultInjectingClient(ddb, layout=rules.layout)
    faults = RunnerFaults(client=client)
    faults.crash = lambda n: 3 if client.crashes < 3 else None
    faults.duplicate = lambda n: n % 3 == 0
    processor = create_processor(rules, client, name, mode=mode, lifecycle=True)
    runner = StreamRunner(processor, streams, stream_arn, batch_size=40, faults=faults)
    runner.run()  # the rules are registered, pending
    during = list(_changes(rng, flights, "b", n_during))
    results: dict[str, object] = {}

    def backfill() -> None:
        results["backfill"] = Backfill(
            rules,
            TableStream(ddb, streams, name, stream_arn),
            segments=2,
            page_items=40,
            stream_lag_seconds=0.5,
        ).run()

    threads = [
        threading.Thread(target=_write, args=(ddb, name, during)),
        threading.Thread(target=backfill),
    ]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        runner.run(until_caught_up=False, max_seconds=0.5)
    for t in threads:
        t.join()
    _write(ddb, name, list(_changes(rng, flights, "c", n_after)))  # after it: the stream alone
    assert runner.run().failures == 0
    assert "backfill" in results, "the backfill thread failed"
    assert client.crashes == 3

    items = table_items(ddb, name)
    store = AggregateStore(ddb, name, rules)
    context = Context(prec=38, rounding=ROUND_HALF_EVEN)
    # every hour, the first 30 minutes of each, and ranges that mix hour and minute buckets
    ranges = [(START + h * HOUR, START + (h + 1) * HOUR) for h in range(3)]
    ranges += [(START + h * HOUR, START + h * HOUR + 1800) for h in range(3)]
    ranges += [(START + 1800, START + 2 * HOUR + 60), (START, START + 3 * HOUR)]
    checked = 0
    for origin in ORIGINS:
        for start, end in ranges:
            delays = _delays(items, origin, start, end)
            window = {"start": start, "end": end}
            mean = store.window("mean_delay", origin, **window)
            worst = store.window("worst_delay", origin, **window)
            best = store.window("best_delay", origin, **window)
            assert (mean.start, mean.end) == (start, end)
            if not delays:
                assert mean.fields == {"mean": None, "sum": 0, "count": 0}
                assert worst.fields == {"max": None} and best.fields == {"min": None}
                continue
            total, count = sum(delays, Decimal(0)), Decimal(len(delays))
            assert mean.fields == {
                "mean": context.divide(total, count),
                "sum": total,
                "count": count,
            }, (origin, start, end)
            assert worst.fields == {"max": max(delays)}, (origin, start, end)
            assert best.fields == {"min": min(delays)}, (origin, start, end)
            ps = [0, 50, 90, 99, 100]
            within = store.percentiles("delay_distribution", origin, ps, **window)
            exact = store.percentiles("worst_delay", origin, ps, **window)
            assert within.count == exact.count == len(delays)
            for p in ps:
                truth = _nearest_rank(delays, p)
                assert exact.values[Decimal(p)] == truth
                got = within.values[Decimal(p)]
                assert abs(got - truth) <= ALPHA * abs(truth), (origin, start, end, p, got, truth)
            checked += 1
    assert checked >= 20
    with pytest.raises(QueryError, match="is of kind 'mean': top ranks sums"):
        store.top("mean_delay", 3, granularity="hour", at=START)
    # p90 of the last hour, as the CLI's --last reads it
    last = store.percentiles("delay_distribution", "JFK", [90], last=HOUR, now=START + 2 * HOUR)
    assert (last.start, last.end) == (START + HOUR, START + 2 * HOUR)
    if mode == "exactly-once":  # the CLI: percentiles of the last hour, a window's fields
        common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url]
        common += ["-d", str(tmp_path / "rules.yaml")]
        cli = CliRunner()
        hour = ["--last", "1h", "--now", "2026-01-01T02:00:00Z"]
        result = cli.invoke(
            main, ["query", "percentile", "delay_distribution", "JFK", "--p", "90", *hour, *common]
        )
        assert result.exit_code == 0, result.output
        delays = _delays(items, "JFK", START + HOUR, START + 2 * HOUR)
        assert (
            f"delay_distribution JFK in [2026-01-01T01:00:00Z, 2026-01-01T02:00:00Z): "
            f"{len(delays)} values, percentiles within 2 %"
        ) in " ".join(result.stdout.split())
        result = cli.invoke(
            main, ["query", "window", "mean_delay", "JFK", *hour, *common, "--json"]
        )
        assert result.exit_code == 0, result.output
        assert f'"count": "{len(delays)}"' in result.stdout
        result = cli.invoke(main, ["query", "percentile", "delay_distribution", "JFK", *common])
        assert result.exit_code == 1
        assert (
            "counts per time bucket: give a range, --last D (--last 24h) or --start T --end T"
            in (result.stderr)
        )
        result = cli.invoke(main, ["query", "histogram", "delay_distribution", "JFK", *common])
        assert result.exit_code == 1 and "keeps its values per time bucket" in result.stderr
    # the stored items equal what the items make them: reconcile finds nothing to repair
    report = reconcile(rules, ddb, name, settle_seconds=0)
    assert report.clean, [d for d in report.drifts if d.status != "repaired"][:5]
