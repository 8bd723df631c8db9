"""``aggregator query get|list|window`` on DynamoDB Local, over aggregates the stream runner
wrote: keys as ``query list`` shows them, bucket columns of windowed rules, ``--now``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from aggregator.cli import main
from aggregator.core.engine import Engine
from aggregator.core.rules import load_rules
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.modes import make_writer
from aggregator.dynamodb.table import create_table
from aggregator.runtime.processor import StreamProcessor
from tests.factories import ddb_json

pytestmark = pytest.mark.integration

RULES_YAML = """\
version: 1
rules:
  - name: flights_by_route
    match: {origin: {exists: true}, dest: {exists: true}}
    key: "{origin}#{dest}"
  - name: paths_per_player
    match: {sk: {prefix: "PATH#"}}
    key: "{pk}"
  - name: departures
    match: {ts: {exists: true}}
    key: "{origin}"
    window: {time: ts, unit: epoch_seconds, granularities: [hour, minute]}
  - name: departures_hourly
    match: {ts: {exists: true}}
    key: "{origin}"
    window: {time: ts, unit: epoch_seconds, granularities: [hour]}
  - name: mean_delay
    match: {delay: {exists: true}}
    key: "{origin}"
    delta: {attribute: delay}
    kind: mean
  - name: worst_delay
    match: {delay: {exists: true}}
    key: "{origin}"
    delta: {attribute: delay}
    kind: max
  - name: delays
    match: {delay: {exists: true}}
    key: "{origin}"
    delta: {attribute: delay}
    kind: {name: distribution, relative_accuracy: 0.01}
"""
DELAYS = [-5, 0, 0, 3, 10, 10, 10, 45, 120, 600]  # at LGA; 600 is deleted afterwards
BOS_DELAYS = [4, 6]  # a whole mean
T = 1_357_016_400  # 2013-01-01T05:00:00Z
DEPARTURES = [T + 10, T + 70, T + 3599, T + 3600, T + 5427]
"""JFK departures: 05:00:10, 05:01:10, 05:59:59, 06:00:00, 06:30:27."""


class Setup:
    def __init__(self, endpoint: str, name: str, defs: Path) -> None:
        self.endpoint, self.name, self.defs = endpoint, name, defs

    def query(self, *args: str) -> Result:
        try:
            runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
        except TypeError:
            runner = CliRunner()
        common = ["--table", self.name, "-d", str(self.defs), "--endpoint-url", self.endpoint]
        result = runner.invoke(main, ["query", *args, *common], env={"COLUMNS": "200"})
        assert "Traceback" not in result.stdout + result.stderr
        return result


@pytest.fixture(scope="module")
def setup(dynamodb_local: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """One table for the module: flights on three routes (two of them displayed alike), a
    player whose key holds '#', departures over two hours; aggregated by the stream runner."""
    ddb = dynamodb_local.client("dynamodb")
    streams = dynamodb_local.client("dynamodbstreams")
    name = f"query-cli-{os.getpid()}"
    arn = create_table(ddb, name)
    defs = tmp_path_factory.mktemp("rules") / "rules.yaml"
    defs.write_text(RULES_YAML)
    items: list[dict[str, Any]] = []
    routes = [("JFK", "LAX")] * 3 + [("A#B", "C")] + [("A", "B#C")] * 2
    items += [
        {"pk": "F", "sk": f"F#{i}", "origin": o, "dest": d} for i, (o, d) in enumerate(routes)
    ]
    items += [{"pk": "PLAYER#bob", "sk": f"PATH#{i}"} for i in range(4)]
    items += [
        {"pk": "D", "sk": f"D#{i}", "origin": "JFK", "ts": t} for i, t in enumerate(DEPARTURES)
    ]
    items += [
        {"pk": "L", "sk": f"L#{i}", "origin": "LGA", "delay": d} for i, d in enumerate(DELAYS)
    ]
    items += [
        {"pk": "B", "sk": f"B#{i}", "origin": "BOS", "delay": d} for i, d in enumerate(BOS_DELAYS)
    ]
    for item in items:
        ddb.put_item(TableName=name, Item=ddb_json(item))
    ddb.delete_item(TableName=name, Key=ddb_json({"pk": "L", "sk": f"L#{len(DELAYS) - 1}"}))
    writer = make_writer("at-least-once", ddb, name)
    StreamRunner(StreamProcessor(Engine(load_rules(defs)), writer), streams, arn).run()
    yield Setup(dynamodb_local.endpoint_url, name, defs)
    ddb.delete_table(TableName=name)


def rows(output: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.split(line[0])[1:-1]]
        for line in output.splitlines()
        if line[:1] in ("│", "┃")
    ]


def test_get_takes_the_key_as_listed_or_its_values(setup):
    listed = setup.query("list", "flights_by_route")
    assert listed.exit_code == 0, listed.stderr
    # two routes are displayed alike: ('A#B', 'C') and ('A', 'B#C')
    assert rows(listed.stdout) == [
        ["#", "key", "value"],
        ["1", "A#B#C", "2"],
        ["2", "A#B#C", "1"],
        ["3", "JFK#LAX", "3"],
    ]
    for args in (["JFK#LAX"], ["JFK", "LAX"]):
        result = setup.query("get", "flights_by_route", *args)
        assert (result.exit_code, result.stdout) == (0, "flights_by_route JFK#LAX: 3\n")
    result = setup.query("get", "flights_by_route", "A#B", "C")
    assert (result.exit_code, result.stdout) == (0, "flights_by_route A#B#C: 1\n")
    result = setup.query("get", "flights_by_route", "A", "B#C")
    assert (result.exit_code, result.stdout) == (0, "flights_by_route A#B#C: 2\n")

    # the listed text of those two is ambiguous: said in one line, nothing guessed
    result = setup.query("get", "flights_by_route", "A#B#C")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: rule 'flights_by_route': key text 'A#B#C' fits key '{origin}#{dest}' in more "
        "than one way (origin='A', dest='B#C' or origin='A#B', dest='C'): a value contains '#'; "
        "give the 2 values separately"
    ]

    # one placeholder: the text is the value, '#' and all
    result = setup.query("get", "paths_per_player", "PLAYER#bob")
    assert (result.exit_code, result.stdout) == (0, "paths_per_player PLAYER#bob: 4\n")


def test_list_of_a_windowed_rule_shows_granularity_and_bucket_start(setup):
    result = setup.query("list", "departures")
    assert result.exit_code == 0, result.stderr
    assert rows(result.stdout) == [
        ["#", "key", "granularity", "bucket start", "value"],
        ["1", "JFK", "hour", "2013-01-01T05:00:00Z", "3"],
        ["2", "JFK", "hour", "2013-01-01T06:00:00Z", "2"],
        ["3", "JFK", "minute", "2013-01-01T05:00:00Z", "1"],
        ["4", "JFK", "minute", "2013-01-01T05:01:00Z", "1"],
        ["5", "JFK", "minute", "2013-01-01T05:59:00Z", "1"],
        ["6", "JFK", "minute", "2013-01-01T06:00:00Z", "1"],
        ["7", "JFK", "minute", "2013-01-01T06:30:00Z", "1"],
    ]


def window(setup: Setup, *args: str) -> dict[str, str]:
    result = setup.query("window", "departures", "JFK", *args)
    assert result.exit_code == 0, result.stderr
    return {cells[0]: cells[1] for cells in rows(result.stdout) if cells[0]}


@pytest.mark.parametrize(
    ("now", "expected_range", "value", "widened"),
    [
        ("2013-01-01T06:00:00Z", "[2013-01-01T05:00:00Z, 2013-01-01T06:00:00Z)", "3", False),
        (str(T + 3600), "[2013-01-01T05:00:00Z, 2013-01-01T06:00:00Z)", "3", False),
        # the hour up to 06:30:27 widened out to whole minutes: 05:30 .. 06:30 holds 3
        ("2013-01-01T06:30:27Z", "[2013-01-01T05:30:00Z, 2013-01-01T06:31:00Z)", "3", True),
        ("2013-01-01T01:30:27-05:00", "[2013-01-01T05:30:00Z, 2013-01-01T06:31:00Z)", "3", True),
        # 05:00:00.5 rounds up to 05:00:01 as the clock's now would: the minute 05:00 counts
        ("2013-01-01T05:00:00.5Z", "[2013-01-01T04:00:00Z, 2013-01-01T05:01:00Z)", "1", True),
    ],
)
def test_window_last_with_now(setup, now, expected_range, value, widened):
    shown = window(setup, "--last", "1h", "--now", now)
    assert (shown["range"], shown["value"]) == (expected_range, value)
    assert ("asked" in shown) == widened
    # --end with --last ends the window at the same place, as it always has
    if "." not in now:
        assert window(setup, "--last", "1h", "--end", now) == shown


def test_last_hour_with_hour_buckets_covers_the_past_hour(setup):
    """Asked at 06:00:27 with hour buckets, the last hour [05:00:27, 06:00:27) is covered by the
    buckets of 05:00 and 06:00, both counted (it used to answer [06:00, 07:00): 2, not 5)."""
    now = T + 3600 + 27
    result = setup.query(
        "window", "departures_hourly", "JFK", "--last", "1h", "--now", "2013-01-01T06:00:27Z"
    )
    assert result.exit_code == 0, result.stderr
    shown = {cells[0]: cells[1] for cells in rows(result.stdout) if cells[0]}
    lo, hi = (now - 3600) // 3600 * 3600, -(-now // 3600) * 3600
    assert (lo, hi) == (T, T + 7200)
    assert shown["range"] == "[2013-01-01T05:00:00Z, 2013-01-01T07:00:00Z)"
    assert shown["asked"] == "[2013-01-01T05:00:27Z, 2013-01-01T06:00:27Z)"
    assert shown["value"] == str(sum(lo <= t < hi for t in DEPARTURES)) == "5"
    data = json.loads(
        setup.query(
            "window", "departures_hourly", "JFK", "--last", "1h", "--now", str(now), "--json"
        ).stdout
    )
    assert (data["start"], data["end"], data["value"]) == (
        "2013-01-01T05:00:00Z",
        "2013-01-01T07:00:00Z",
        "5",
    )
    assert (data["asked_start"], data["asked_end"]) == (
        "2013-01-01T05:00:27Z",
        "2013-01-01T06:00:27Z",
    )


def test_window_now_without_last_is_one_line(setup):
    result = setup.query("window", "departures", "JFK", "--now", "2013-01-01T06:00:00Z")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: --now needs --last: it ends a sliding window; use --start/--end for a range"
    ]


def test_every_query_command_prints_json(setup):
    import json

    got = setup.query("get", "flights_by_route", "JFK", "LAX", "--json")
    assert got.exit_code == 0, got.stderr
    assert json.loads(got.stdout) == {
        "rule": "flights_by_route",
        "aggregate": {"key": "JFK#LAX", "value": "3"},
    }
    missing = setup.query("get", "flights_by_route", "X", "Y", "--json")
    assert missing.exit_code == 1
    assert json.loads(missing.stdout) == {"rule": "flights_by_route", "aggregate": None}
    listed = json.loads(setup.query("list", "paths_per_player", "--json").stdout)
    assert listed == {
        "rule": "paths_per_player",
        "aggregates": [{"key": "PLAYER#bob", "value": "4"}],
    }
    top = json.loads(setup.query("top", "flights_by_route", "-n", "1", "--json").stdout)
    assert top == {
        "rule": "flights_by_route",
        "n": 1,
        "aggregates": [{"key": "JFK#LAX", "value": "3"}],
    }
    buckets = json.loads(setup.query("list", "departures", "--json").stdout)["aggregates"]
    assert {
        "key": "JFK",
        "value": "3",
        "granularity": "hour",
        "bucket": "2013-01-01T05:00:00Z",
    } in (buckets)
    window = json.loads(
        setup.query(
            "window", "departures", "JFK", "--last", "1h", "--now", "2013-01-01T06:00:00Z", "--json"
        ).stdout
    )
    assert (window["start"], window["end"], window["value"]) == (
        "2013-01-01T05:00:00Z",
        "2013-01-01T06:00:00Z",
        "3",
    )
    assert window["complete"] is True and window["requests"] >= 1
    histogram = json.loads(setup.query("histogram", "flights_by_route", "--json").stdout)
    assert histogram["rows"][-1] == {"key": "JFK#LAX", "value": "3"}


def test_histogram_of_a_rule_that_is_not_derived_shows_keys_and_values(setup):
    result = setup.query("histogram", "flights_by_route")
    assert result.exit_code == 0, result.stderr
    assert rows(result.stdout)[0] == ["key", "value", ""]
    assert ["JFK#LAX", "3", "#" * 40] in rows(result.stdout)


def test_kinds_read_back_through_the_cli(setup: Setup) -> None:
    """``query get`` shows each kind's fields, ``query percentile`` nearest-rank percentiles
    within the rule's accuracy, ``query histogram`` a distribution key's bins (the deleted 600
    is gone from the max and from the bins)."""
    assert sum(DELAYS[:-1]) == 193  # -5 0 0 3 10 10 10 45 120
    mean = setup.query("get", "mean_delay", "LGA")
    assert mean.exit_code == 0, mean.output
    # 193 / 9 = 21.44..., rounded to 2 places for people
    assert mean.stdout.strip() == "mean_delay LGA: mean 21.44, sum 193, count 9"
    exact = json.loads(setup.query("get", "mean_delay", "LGA", "--json").stdout)
    assert exact["aggregate"]["fields"] == {
        "mean": "21.444444444444444444444444444444444444",  # 38 significant digits, as before
        "sum": "193",
        "count": "9",
    }
    worst = setup.query("get", "worst_delay", "LGA")
    assert worst.stdout.strip() == "worst_delay LGA: max 120"
    ps = setup.query("percentile", "delays", "LGA", "--p", "0,50,90,100", "--json")
    assert ps.exit_code == 0, ps.output
    data = json.loads(ps.stdout)
    assert data["count"] == "9" and data["relative_accuracy"] == "0.01"
    # nearest rank of 9 values: p50 -> rank 5 (10), p90 -> rank 9 (120), p0 -> -5, p100 -> 120
    for p, true in (("0", -5), ("50", 10), ("90", 120), ("100", 120)):
        got = Decimal(data["percentiles"][p])
        assert abs(got - true) <= Decimal("0.01") * abs(true), (p, got)
    exact = setup.query("percentile", "worst_delay", "LGA", "--p", "50", "--json")
    assert json.loads(exact.stdout)["percentiles"] == {"50": "10"}
    histogram = setup.query("histogram", "delays", "LGA", "--json")
    rows = json.loads(histogram.stdout)["rows"]
    assert [r["count"] for r in rows] == ["1", "2", "1", "3", "1", "1"]
    assert Decimal(rows[-1]["value"]) < 121
    bad = setup.query("percentile", "delays", "LGA", "--p", "101")
    assert bad.exit_code == 2 and "expected numbers from 0 to 100" in bad.stderr
    wrong = setup.query("percentile", "paths_per_player", "bob")
    assert wrong.exit_code != 0
    assert "percentiles need a rule of kind distribution" in wrong.stderr


def rounded(value: Decimal, places: int = 2) -> str:
    """The expectation of a number shown to ``places`` decimals: half-even, thousands
    separated."""
    return f"{value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN):,f}"


def test_numbers_for_people_in_list_percentile_and_histogram(setup: Setup) -> None:
    """``query list`` of a mean rule shows each key's mean, sum and count, the means of one
    column to the same 2 places; percentiles and bins are rounded, counts are integers."""
    kept = DELAYS[:-1]  # 600 was deleted
    means = {
        "BOS": Decimal(sum(BOS_DELAYS)) / len(BOS_DELAYS),
        "LGA": Decimal(sum(kept)) / len(kept),
    }
    listed = setup.query("list", "mean_delay")
    assert listed.exit_code == 0, listed.stderr
    assert rows(listed.stdout) == [
        ["#", "key", "mean", "sum", "count"],
        ["1", "BOS", rounded(means["BOS"]), str(sum(BOS_DELAYS)), str(len(BOS_DELAYS))],
        ["2", "LGA", rounded(means["LGA"]), str(sum(kept)), str(len(kept))],
    ]
    assert rows(listed.stdout)[1][2:] == ["5.00", "10", "2"]
    four = setup.query("list", "mean_delay", "--digits", "4")
    assert rows(four.stdout)[2][2] == rounded(means["LGA"], 4) == "21.4444"
    assert rows(setup.query("list", "worst_delay").stdout) == [
        ["#", "key", "max"],
        ["1", "BOS", str(max(BOS_DELAYS))],
        ["2", "LGA", str(max(kept))],
    ]
    # percentiles of integer delays: bins' reported values, exact in --json, rounded here
    args = ("percentile", "delays", "LGA", "--p", "0,50,90,100")
    exact = json.loads(setup.query(*args, "--json").stdout)["percentiles"]
    shown = setup.query(*args)
    assert shown.exit_code == 0, shown.stderr
    assert "delays LGA: 9 values, percentiles within 1 %" in shown.stdout
    assert rows(shown.stdout) == [
        ["p", "value"],
        *([f"p{p}", rounded(Decimal(exact[p]))] for p in ("0", "50", "90", "100")),
    ]
    assert all(len(Decimal(v).as_tuple().digits) > 20 for v in exact.values() if v != "0")
    bins = json.loads(setup.query("histogram", "delays", "LGA", "--json").stdout)["rows"]
    histogram = setup.query("histogram", "delays", "LGA")
    assert [r[:2] for r in rows(histogram.stdout)] == [
        ["value", "count"],
        *([rounded(Decimal(b["value"])), b["count"]] for b in bins),
    ]


def test_get_of_a_value_without_its_prefix_suggests_the_key(setup: Setup) -> None:
    """The player's key is PLAYER#bob: ``get paths_per_player bob`` points at it."""
    result = setup.query("get", "paths_per_player", "bob")
    assert result.exit_code == 1
    assert result.stdout == (
        "paths_per_player bob: no aggregate (nothing counted yet); did you mean PLAYER#bob?\n"
    )
    result = setup.query("get", "paths_per_player", "alice")
    assert result.stdout == "paths_per_player alice: no aggregate (nothing counted yet)\n"


def test_window_of_a_key_without_buckets_suggests_the_key(setup: Setup) -> None:
    """``jfk`` has no bucket; ``JFK`` has: the window answers 0 and says which key was meant."""
    result = setup.query(
        "window", "departures", "jfk", "--last", "2h", "--now", "2013-01-01T07:00:00Z"
    )
    assert result.exit_code == 0, result.stderr
    assert {c[0]: c[1] for c in rows(result.stdout) if c[0]}["value"] == "0"
    assert result.stderr == (
        "note: departures jfk has no bucket in this range; did you mean JFK?\n"
    )
    # the key meant has buckets there: no note
    meant = setup.query(
        "window", "departures", "JFK", "--last", "2h", "--now", "2013-01-01T07:00:00Z"
    )
    assert (meant.stderr, {c[0]: c[1] for c in rows(meant.stdout) if c[0]}["value"]) == ("", "5")


def test_percentile_and_histogram_of_a_key_without_values_suggest_the_key(setup: Setup) -> None:
    """``lga`` holds no delays; ``LGA`` does: both commands say which key was meant."""
    percentile = setup.query("percentile", "delays", "lga")
    assert (percentile.exit_code, percentile.stdout) == (
        1,
        "delays lga: no values (none counted, or all removed); did you mean LGA?\n",
    )
    histogram = setup.query("histogram", "delays", "lga")
    assert (histogram.exit_code, histogram.stdout) == (
        0,
        "delays lga: no values (none counted, or all removed); did you mean LGA?\n",
    )
