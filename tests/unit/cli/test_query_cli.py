"""``aggregator query get|list|window`` against a stub DynamoDB client (no DynamoDB Local): keys
as displayed, bucket columns, ``--now``, numbers for people (``--digits``), ``--last`` at a
bucket edge, "did you mean" for a key without an aggregate; and shell completion of the
installed script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from decimal import ROUND_HALF_EVEN, Context, Decimal
from pathlib import Path
from typing import Any

import pytest
from click.shell_completion import get_completion_class
from click.testing import CliRunner, Result

import aggregator.cli.clients as clients
import aggregator.dynamodb.query.keys as query_keys
from aggregator.cli import main
from aggregator.core.rules import load_rules
from aggregator.core.sortable import sortable_number
from aggregator.dynamodb.query import AggregateStore
from tests.factories import AggregatesStub

RULES_YAML = """\
version: 1
rules:
  - name: flights_by_route
    key: "{origin}#{dest}"
  - name: paths_per_player
    key: "{pk}"
  - name: per_path
    key: "P#{pk}"
  - name: total
    key: TOTAL
  - name: events
    key: "{provider}"
    window: {time: ts, unit: epoch_seconds, granularities: [hour, minute]}
  - name: hourly
    key: "{provider}"
    window: {time: ts, unit: epoch_seconds, granularities: [hour]}
  - name: scores
    key: "{pk}"
    delta: {attribute: score}
  - name: ratings
    key: "{pk}"
    delta: {attribute: rating}
  - name: mean_score
    key: "{pk}"
    delta: {attribute: score}
    kind: mean
"""
T = 1_357_016_400  # 2013-01-01T05:00:00Z
MEAN_SCORES = {"ann": [1500, 1501, 1502], "bob": [1, 2, 2], "cy": [10, 20]}
"""The scores behind the ``mean_score`` aggregates below (their sums and counts)."""


def counter(value: int, key: str | None = None, **attributes: str) -> dict[str, Any]:
    item: dict[str, Any] = {"value": {"N": str(value)}}
    if key is not None:
        item["key"] = {"S": key}
    item.update({name: {"S": text} for name, text in attributes.items()})
    return item


ITEMS = {
    "flights_by_route#JFK#LAX": counter(3, "JFK#LAX"),
    "flights_by_route#A%23B#C": counter(5, "A#B#C"),
    "paths_per_player#PLAYER%23bob": counter(4, "PLAYER#bob"),
    "per_path#P#bob": counter(2, "P#bob"),
    "total#TOTAL": counter(9, "TOTAL"),
    "events#p1#hour#2013-01-01T05:00:00Z": counter(
        10, "p1", granularity="hour", bucket="2013-01-01T05:00:00Z"
    ),
    "events#p1#minute#2013-01-01T05:00:00Z": counter(
        4, "p1", granularity="minute", bucket="2013-01-01T05:00:00Z"
    ),
    "events#p1#minute#2013-01-01T05:59:00Z": counter(
        6, "p1", granularity="minute", bucket="2013-01-01T05:59:00Z"
    ),
    # hour buckets only: the hour before 06:00 holds 10, the hour from 06:00 holds 1
    "hourly#p1#hour#2013-01-01T05:00:00Z": counter(
        10, "p1", granularity="hour", bucket="2013-01-01T05:00:00Z"
    ),
    "hourly#p1#hour#2013-01-01T06:00:00Z": counter(
        1, "p1", granularity="hour", bucket="2013-01-01T06:00:00Z"
    ),
    "scores#PLAYER%23p1": counter(42512, "PLAYER#p1"),
    "scores#PLAYER%23p13": counter(7, "PLAYER#p13"),
    "scores#PLAYER%23p2": {"value": {"N": "38275.0"}, "key": {"S": "PLAYER#p2"}},
    "ratings#a": {"value": {"N": "12.5"}, "key": {"S": "a"}},
    "ratings#b": counter(3, "b"),
    **{
        f"mean_score#{name}": {
            "value": {"N": str(sum(scores))},
            "count": {"N": str(len(scores))},
            "key": {"S": name},
        }
        for name, scores in MEAN_SCORES.items()
    },
}


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> AggregatesStub:
    client = AggregatesStub(ITEMS)
    monkeypatch.setattr(clients, "make_client", lambda service, endpoint_url=None: client)
    return client


@pytest.fixture
def defs(tmp_path: Path) -> str:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES_YAML)
    return str(path)


def runner() -> CliRunner:
    """Stderr apart from stdout (click < 8.2 needs mix_stderr=False, later ones dropped it)."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def query(defs: str, *args: str) -> Result:
    return runner().invoke(
        main, ["query", *args, "--table", "game", "-d", defs], env={"COLUMNS": "200"}
    )


def error_line(result: Result) -> str:
    """The one stderr line of a run that failed with exit code 1 (no traceback)."""
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def rows(output: str) -> list[list[str]]:
    """The cells of a rich table's header and body rows."""
    return [
        [cell.strip() for cell in line.split(line[0])[1:-1]]
        for line in output.splitlines()
        if line[:1] in ("│", "┃")
    ]


# -- query get ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "sort_key", "line"),
    [
        (["flights_by_route", "JFK", "LAX"], "flights_by_route#JFK#LAX", "JFK#LAX: 3"),
        (["flights_by_route", "JFK#LAX"], "flights_by_route#JFK#LAX", "JFK#LAX: 3"),
        (["flights_by_route", "A#B", "C"], "flights_by_route#A%23B#C", "A#B#C: 5"),
        (["paths_per_player", "PLAYER#bob"], "paths_per_player#PLAYER%23bob", "PLAYER#bob: 4"),
        (["per_path", "bob"], "per_path#P#bob", "P#bob: 2"),
        (["total"], "total#TOTAL", "TOTAL: 9"),
        (["total", "TOTAL"], "total#TOTAL", "TOTAL: 9"),
    ],
)
def test_get_takes_the_key_as_listed_or_its_values(stub, defs, args, sort_key, line):
    result = query(defs, "get", *args)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{args[0]} {line}\n"
    assert [r[1]["Key"]["sk"]["S"] for r in stub.requests] == [sort_key]


def test_get_refuses_key_text_that_splits_in_more_than_one_way(stub, defs):
    line = error_line(query(defs, "get", "flights_by_route", "A#B#C"))
    assert line == (
        "error: rule 'flights_by_route': key text 'A#B#C' fits key '{origin}#{dest}' in more "
        "than one way (origin='A', dest='B#C' or origin='A#B', dest='C'): a value contains '#'; "
        "give the 2 values separately"
    )
    assert stub.requests == []


def test_get_says_what_does_not_fit(stub, defs):
    line = error_line(query(defs, "get", "flights_by_route", "JFK"))
    assert line == (
        "error: rule 'flights_by_route': key text 'JFK' does not fit key '{origin}#{dest}': no "
        "'#' between origin and dest"
    )


def test_get_of_a_listed_key_with_a_prefix_hints_at_its_value(stub, defs):
    # one placeholder: the argument is the value ('P#bob' -> sort key per_path#P#P%23bob)
    result = query(defs, "get", "per_path", "P#bob")
    assert result.exit_code == 1
    assert result.stdout == (
        "per_path P#bob: no aggregate (nothing counted yet); if P#bob is the key as query list "
        "shows it, give its value: bob\n"
    )
    result = query(defs, "get", "paths_per_player", "nobody")
    assert result.stdout == "paths_per_player nobody: no aggregate (nothing counted yet)\n"


# -- query list / top ---------------------------------------------------------------------------


def test_list_of_a_windowed_rule_shows_granularity_and_bucket_start(stub, defs):
    result = query(defs, "list", "events")
    assert result.exit_code == 0, result.output
    assert rows(result.stdout) == [
        ["#", "key", "granularity", "bucket start", "value"],
        ["1", "p1", "hour", "2013-01-01T05:00:00Z", "10"],
        ["2", "p1", "minute", "2013-01-01T05:00:00Z", "4"],
        ["3", "p1", "minute", "2013-01-01T05:59:00Z", "6"],
    ]
    # top ranks the keys of one bucket (a rule with several granularities names one)
    at = ["--at", "2013-01-01T05:59:30Z"]
    result = query(defs, "top", "events", "-n", "2", "--granularity", "minute", *at)
    assert result.exit_code == 0, result.output
    assert "top 2: events (minute bucket 2013-01-01T05:59:00Z)" in result.stdout
    assert rows(result.stdout)[1:] == [["1", "p1", "minute", "2013-01-01T05:59:00Z", "6"]]
    result = query(defs, "top", "events", "--granularity", "hour", *at)
    assert rows(result.stdout)[1:] == [["1", "p1", "hour", "2013-01-01T05:00:00Z", "10"]]
    # without --granularity (with --at or without): the option to add, with the rule's
    # granularities; a rule that keeps one needs none
    for when in (at, []):
        assert error_line(query(defs, "top", "events", *when)) == (
            "error: rule 'events' keeps buckets of hour, minute: add --granularity hour or "
            "--granularity minute to rank the keys of one bucket"
        )
    result = query(defs, "top", "hourly", *at)
    assert result.exit_code == 0, result.output
    assert "top 10: hourly (hour bucket 2013-01-01T05:00:00Z)" in result.stdout
    assert error_line(query(defs, "top", "nothing", *at)).startswith("error: no rule named")


def test_list_of_other_rules_keeps_its_columns(stub, defs):
    result = query(defs, "list", "flights_by_route")
    assert result.exit_code == 0, result.output
    assert rows(result.stdout) == [
        ["#", "key", "value"],
        ["1", "A#B#C", "5"],
        ["2", "JFK#LAX", "3"],
    ]


# -- query window --now -------------------------------------------------------------------------


def window_range(result: Result) -> str:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    (cells,) = [r for r in rows(result.stdout) if r[0] == "range"]
    return cells[1]


@pytest.mark.parametrize(
    ("now", "clock"),
    [
        ("2013-01-01T06:00:00Z", T + 3600),  # on a boundary: the window ends there
        (str(T + 3600), T + 3600),
        ("2013-01-01T06:30:27Z", T + 5427),  # up to the next minute, 06:31
        ("2013-01-01T01:30:27-05:00", T + 5427),
        ("2013-01-01T06:00:00.5Z", T + 3600.5),  # the minute holding 06:00:00.5 counts: 06:01
        (f"{T + 3600}.5", T + 3600.5),
    ],
)
def test_now_ends_the_window_as_the_clock_would(stub, defs, now, clock):
    result = query(defs, "window", "events", "p1", "--last", "1h", "--now", now)
    store = AggregateStore(AggregatesStub(ITEMS), "t", load_rules(defs))
    expected = store.window("events", "p1", last=3600, now=clock)
    assert window_range(result) == f"[{expected.start_text}, {expected.end_text})"


def test_now_counts_the_buckets_of_its_window(stub, defs):
    result = query(defs, "window", "events", "p1", "--last", "1h", "--now", "2013-01-01T06:00Z")
    assert window_range(result) == "[2013-01-01T05:00:00Z, 2013-01-01T06:00:00Z)"
    assert ["value", "10"] in rows(result.stdout)  # the hour bucket, not its minutes
    # the last hour from 06:00:01 starts inside the minute 05:00, which counts in full: the
    # hour bucket 05:00 and the minute 06:00 (never hit)
    result = query(defs, "window", "events", "p1", "--last", "1h", "--now", "2013-01-01T06:00:01Z")
    assert window_range(result) == "[2013-01-01T05:00:00Z, 2013-01-01T06:01:00Z)"
    assert ["value", "10"] in rows(result.stdout)


def test_end_with_last_still_ends_the_window(stub, defs):
    args = ("window", "events", "p1", "--last", "1h")
    by_end = query(defs, *args, "--end", "2013-01-01T06:30:27Z")
    by_now = query(defs, *args, "--now", "2013-01-01T06:30:27Z")
    assert window_range(by_end) == window_range(by_now)
    assert by_end.stdout == by_now.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--now", "2013-01-01T06:00:00Z"],
            "error: --now needs --last: it ends a sliding window; use --start/--end for a range",
        ),
        (
            ["--start", str(T), "--end", str(T + 60), "--now", str(T)],
            "error: --now needs --last: it ends a sliding window; use --start/--end for a range",
        ),
        (
            ["--last", "1h", "--now", str(T), "--end", str(T)],
            "error: give --now or --end with --last, not both (they set the same end)",
        ),
        (
            ["--last", "1h", "--now", "2013-01-01T06:00:00"],
            "error: --now: bad time: '2013-01-01T06:00:00' has no UTC offset; write a time with "
            "one, e.g. 2013-01-01T05:00:00Z or 2013-01-01T00:00:00-05:00",
        ),
        (
            ["--last", "1h", "--now", "yesterday"],
            "error: --now: bad time: 'yesterday' is not an ISO 8601 time",
        ),
        # the range options, in the options' words (not the Python API's start/end/last)
        (
            [],
            "error: rule 'events' counts per time bucket: give a range, --last D (--last 24h) "
            "or --start T --end T",
        ),
        (["--start", str(T)], "error: give --end with --start"),
        (["--end", str(T)], "error: --end needs --start (or --last): it ends a range"),
        (
            ["--start", str(T), "--end", str(T + 60), "--last", "1h"],
            "error: give --last or --start/--end, not both",
        ),
        (
            ["--start", "2013-01-01T06:00:00Z", "--end", "2013-01-01T05:00:00Z"],
            "error: --end (2013-01-01T05:00:00Z) is before --start (2013-01-01T06:00:00Z)",
        ),
    ],
)
def test_now_errors_are_one_line(stub, defs, args, message):
    assert error_line(query(defs, "window", "events", "p1", *args)) == message
    assert stub.requests == []


def test_window_takes_the_key_as_listed(monkeypatch, tmp_path):
    client = AggregatesStub({})
    monkeypatch.setattr(clients, "make_client", lambda service, endpoint_url=None: client)
    path = tmp_path / "rules.yaml"
    path.write_text(
        "version: 1\nrules:\n  - name: routes\n    key: '{origin}#{dest}'\n"
        "    window: {time: ts, unit: epoch_seconds, granularities: [hour]}\n"
    )
    result = query(str(path), "window", "routes", "JFK#LAX", "--start", str(T), "--end", str(T))
    assert result.exit_code == 0, result.output
    assert "routes JFK#LAX" in result.stdout
    assert ["value", "0"] in rows(result.stdout)


# -- --last covers the last D (hour buckets only) --------------------------------------------------

HOURLY = {T: 10, T + 3600: 1}
"""The ``hourly`` buckets of p1: start -> count (the items above)."""


def hourly_sum(lo: int, hi: int) -> int:
    return sum(n for start, n in HOURLY.items() if lo <= start < hi)


def window_cells(result: Result) -> dict[str, str]:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return {cells[0]: cells[1] for cells in rows(result.stdout) if cells[0]}


def test_last_just_after_a_bucket_edge_covers_the_past_hour(stub, defs):
    # asked at 06:00:27 with hour buckets: the last hour is [05:00:27, 06:00:27), which the
    # buckets 05:00 and 06:00 cover; the old answer, [06:00, 07:00), left out the past hour
    args = ("window", "hourly", "p1", "--last", "1h")
    cells = window_cells(query(defs, *args, "--now", "2013-01-01T06:00:27Z"))
    assert cells["range"] == "[2013-01-01T05:00:00Z, 2013-01-01T07:00:00Z)"
    assert cells["asked"] == "[2013-01-01T05:00:27Z, 2013-01-01T06:00:27Z)"
    assert cells["value"] == str(hourly_sum(T, T + 7200)) == "11"
    # on the edge itself the last hour is one whole bucket: nothing widened, no asked row
    cells = window_cells(query(defs, *args, "--now", "2013-01-01T06:00:00Z"))
    assert cells["range"] == "[2013-01-01T05:00:00Z, 2013-01-01T06:00:00Z)"
    assert "asked" not in cells
    assert cells["value"] == str(hourly_sum(T, T + 3600)) == "10"


def test_last_without_now_reads_the_clock(stub, defs, monkeypatch):
    monkeypatch.setattr(time, "time", lambda: T + 3600 + 27.25)
    cells = window_cells(query(defs, "window", "hourly", "p1", "--last", "1h"))
    assert cells["range"] == "[2013-01-01T05:00:00Z, 2013-01-01T07:00:00Z)"
    # the clock's now rounds up to the second: 06:00:28
    assert cells["asked"] == "[2013-01-01T05:00:28Z, 2013-01-01T06:00:28Z)"
    assert cells["value"] == "11"


def test_last_prints_the_asked_range_in_json(stub, defs):
    result = query(
        defs, "window", "hourly", "p1", "--last", "1h", "--now", "2013-01-01T06:00:27Z", "--json"
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["start"], data["end"]) == ("2013-01-01T05:00:00Z", "2013-01-01T07:00:00Z")
    assert (data["asked_start"], data["asked_end"]) == (
        "2013-01-01T05:00:27Z",
        "2013-01-01T06:00:27Z",
    )
    assert data["value"] == "11"


# -- numbers for people -------------------------------------------------------------------------


def rounded(value: Decimal, places: int) -> str:
    """``value`` to ``places`` decimals, half-even, with thousands separators (the expectation,
    from the scores, not from the code under test)."""
    exact = Context(prec=60).divide(value, 1)
    return f"{exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN):,f}"


def test_list_of_a_mean_rule_shows_mean_sum_and_count(stub, defs):
    result = query(defs, "list", "mean_score")
    assert result.exit_code == 0, result.stderr
    means = {n: Decimal(sum(v)) / Decimal(len(v)) for n, v in MEAN_SCORES.items()}
    assert means["bob"] == Decimal(5) / 3  # not whole: the column has 2 places throughout
    assert rows(result.stdout) == [
        ["#", "key", "mean", "sum", "count"],
        *(
            [str(i), name, rounded(means[name], 2), f"{sum(v):,}", str(len(v))]
            for i, (name, v) in enumerate(sorted(MEAN_SCORES.items()), 1)
        ),
    ]
    assert rows(result.stdout)[1] == ["1", "ann", "1,501.00", "4,503", "3"]
    assert rows(result.stdout)[2] == ["2", "bob", "1.67", "5", "3"]


def test_get_rounds_a_mean_and_digits_sets_the_places(stub, defs):
    mean = Decimal(5) / Decimal(3)
    result = query(defs, "get", "mean_score", "bob")
    assert result.stdout == f"mean_score bob: mean {rounded(mean, 2)}, sum 5, count 3\n"
    assert result.stdout == "mean_score bob: mean 1.67, sum 5, count 3\n"
    result = query(defs, "get", "mean_score", "bob", "--digits", "5")
    assert result.stdout == "mean_score bob: mean 1.66667, sum 5, count 3\n"
    result = query(defs, "get", "mean_score", "bob", "--digits", "0")
    assert result.stdout == "mean_score bob: mean 2, sum 5, count 3\n"
    result = query(defs, "get", "mean_score", "ann")  # a whole mean shows as an integer
    assert result.stdout == "mean_score ann: mean 1,501, sum 4,503, count 3\n"
    # --json keeps the exact decimal: the ratio to 38 significant digits, as before
    data = json.loads(query(defs, "get", "mean_score", "bob", "--json", "--digits", "0").stdout)
    assert data["aggregate"]["fields"] == {
        "mean": str(Context(prec=38).divide(Decimal(5), Decimal(3))),
        "sum": "5",
        "count": "3",
    }
    assert data["aggregate"]["fields"]["mean"] == "1.6666666666666666666666666666666666667"


def test_digits_is_checked(stub, defs):
    result = query(defs, "get", "mean_score", "bob", "--digits", "-1")
    assert result.exit_code == 2
    assert "--digits" in result.stderr
    assert stub.requests == []


def test_a_column_of_whole_numbers_is_formatted_alike(stub, defs):
    # 38275.0 is whole: it shows as 38,275 beside 42,512, not as 38,275.0
    result = query(defs, "list", "scores")
    assert result.exit_code == 0, result.stderr
    assert rows(result.stdout) == [
        ["#", "key", "value"],
        ["1", "PLAYER#p1", "42,512"],
        ["2", "PLAYER#p13", "7"],
        ["3", "PLAYER#p2", "38,275"],
    ]
    result = query(defs, "top", "scores", "-n", "2")
    assert rows(result.stdout)[1:] == [["1", "PLAYER#p1", "42,512"], ["2", "PLAYER#p2", "38,275"]]
    # one number that is not whole gives the column its places
    result = query(defs, "list", "ratings")
    assert rows(result.stdout)[1:] == [["1", "a", "12.50"], ["2", "b", "3.00"]]
    json_rows = json.loads(query(defs, "list", "scores", "--json").stdout)["aggregates"]
    assert [r["value"] for r in json_rows] == ["42512", "7", "38275.0"]


# -- did you mean -------------------------------------------------------------------------------


def test_get_of_a_value_without_its_prefix_suggests_the_key_that_exists(stub, defs):
    result = query(defs, "get", "scores", "p13")
    assert result.exit_code == 1
    assert result.stdout == (
        "scores p13: no aggregate (nothing counted yet); did you mean PLAYER#p13?\n"
    )
    # its cost: the GetItem of the key asked, then one Query page of at most 100 keys
    operations = [(op, r.get("Limit")) for op, r in stub.requests]
    assert operations == [("get_item", None), ("query", query_keys.SUGGESTION_SAMPLE)]
    assert query_keys.SUGGESTION_SAMPLE == 100
    assert query(defs, "get", "scores", "PLAYER#p13").stdout == "scores PLAYER#p13: 7\n"
    # another case
    result = query(defs, "get", "scores", "player#P13")
    assert result.stdout.endswith("; did you mean PLAYER#p13?\n")


def test_a_key_beyond_the_sample_is_found_by_its_prefix(stub, defs, monkeypatch):
    # a sample of one key (PLAYER#p1) does not hold PLAYER#p13: its prefix PLAYER# is tried
    monkeypatch.setattr(query_keys, "SUGGESTION_SAMPLE", 1)
    result = query(defs, "get", "scores", "p13")
    assert result.stdout.endswith("; did you mean PLAYER#p13?\n")
    assert [op for op, _ in stub.requests] == ["get_item", "query", "get_item"]
    assert stub.requests[2][1]["Key"]["sk"]["S"] == "scores#PLAYER%23p13"


def test_no_suggestion_when_nothing_alike_exists_and_the_reads_are_bounded(stub, defs):
    result = query(defs, "get", "scores", "nobody")
    assert result.stdout == "scores nobody: no aggregate (nothing counted yet)\n"
    # the GetItem asked, one Query page, and at most SUGGESTION_PROBES prefixes tried
    assert len(stub.requests) <= 2 + query_keys.SUGGESTION_PROBES
    assert [r["Key"]["sk"]["S"] for op, r in stub.requests[2:]] == ["scores#PLAYER%23nobody"]


def test_a_kind_with_one_item_per_value_is_probed_by_a_query_of_one_item(monkeypatch, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(
        "version: 1\nrules:\n  - name: best\n    key: '{pk}'\n"
        "    delta: {attribute: score}\n    kind: max\n"
    )
    client = AggregatesStub(
        {
            f"best#PLAYER%23p1#{sortable_number(Decimal(5))}": counter(1),
            f"best#PLAYER%23p13#{sortable_number(Decimal(9))}": counter(1),
        }
    )
    monkeypatch.setattr(clients, "make_client", lambda service, endpoint_url=None: client)
    monkeypatch.setattr(query_keys, "SUGGESTION_SAMPLE", 1)
    result = query(str(path), "get", "best", "p13")
    assert result.stdout.endswith("; did you mean PLAYER#p13?\n"), result.stdout
    probe = client.requests[-1][1]
    assert probe["Limit"] == 1
    assert probe["ExpressionAttributeValues"][":prefix"]["S"] == "best#PLAYER%23p13#"
    assert query(str(path), "get", "best", "PLAYER#p13").stdout == "best PLAYER#p13: max 9\n"


def test_several_keys_alike_are_all_suggested(monkeypatch, defs):
    client = AggregatesStub(
        {"scores#PLAYER%23p13": counter(1, "PLAYER#p13"), "scores#TEAM%23p13": counter(2)}
    )
    monkeypatch.setattr(clients, "make_client", lambda service, endpoint_url=None: client)
    result = query(defs, "get", "scores", "p13")
    assert result.stdout == (
        "scores p13: no aggregate (nothing counted yet); did you mean PLAYER#p13 or TEAM#p13?\n"
    )


def test_a_failed_suggestion_read_leaves_the_hint_out(stub, defs, monkeypatch):
    from botocore.exceptions import ClientError

    def refused(**kwargs: Any) -> dict[str, Any]:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "Query")

    monkeypatch.setattr(stub, "query", refused)
    result = query(defs, "get", "scores", "p13")
    assert (result.exit_code, result.stderr) == (1, "")
    assert result.stdout == "scores p13: no aggregate (nothing counted yet)\n"


def test_json_of_a_missing_key_reads_no_suggestion(stub, defs):
    result = query(defs, "get", "scores", "p13", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"rule": "scores", "aggregate": None}
    assert [op for op, _ in stub.requests] == ["get_item"]


# -- shell completion ---------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_source_through_clicks_api(shell):
    complete = get_completion_class(shell)
    assert complete is not None
    source = complete(main, {}, "aggregator", "_AGGREGATOR_COMPLETE").source()
    assert "_AGGREGATOR_COMPLETE" in source
    assert "aggregator" in source


def _script() -> str:
    script = Path(sys.executable).parent / "aggregator"
    if script.exists():
        return str(script)
    found = shutil.which("aggregator")
    if found is None:  # pragma: no cover - the package is always installed in .venv
        pytest.fail("the aggregator script is not installed (make install)")
    return found


def _complete(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_script()],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_installed_script_prints_a_completion_script(shell):
    proc = _complete({"_AGGREGATOR_COMPLETE": f"{shell}_source"})
    assert proc.returncode == 0, proc.stderr
    assert "_AGGREGATOR_COMPLETE" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_installed_script_completes_query_subcommands():
    proc = _complete(
        {
            "_AGGREGATOR_COMPLETE": "bash_complete",
            "COMP_WORDS": "aggregator query ",
            "COMP_CWORD": "2",
        }
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        f"plain,{c}" for c in ("get", "histogram", "list", "percentile", "top", "window")
    ]
    proc = _complete(
        {
            "_AGGREGATOR_COMPLETE": "bash_complete",
            "COMP_WORDS": "aggregator query window r --n",
            "COMP_CWORD": "4",
        }
    )
    assert proc.stdout.split() == ["plain,--now"]
