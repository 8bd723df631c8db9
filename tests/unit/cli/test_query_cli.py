"""``aggregator query get|list|window`` against a stub DynamoDB client (no DynamoDB Local): keys
as displayed, bucket columns, ``--now``; and shell completion of the installed script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.shell_completion import get_completion_class
from click.testing import CliRunner, Result

import aggregator.cli.clients as clients
from aggregator.cli import main
from aggregator.core.rules import load_rules
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
"""
T = 1_357_016_400  # 2013-01-01T05:00:00Z


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
    result = query(defs, "top", "events", *at)
    assert result.exit_code == 1
    assert "keeps buckets of hour, minute: give the granularity" in result.stderr


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
    result = query(defs, "window", "events", "p1", "--last", "1h", "--now", "2013-01-01T06:00:01Z")
    assert window_range(result) == "[2013-01-01T05:01:00Z, 2013-01-01T06:01:00Z)"
    assert ["value", "6"] in rows(result.stdout)  # minutes 05:01 .. 06:00: only 05:59 was hit


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
