"""``aggregator watch`` under a pseudo-terminal (pexpect) on DynamoDB Local: it starts, shows a
panel per rule, updates after writes that a runner processes (the new value marked), and leaves
cleanly on ``q``, on Ctrl-C and on SIGTERM, restoring the terminal."""

from __future__ import annotations

import math
import os
import random
import signal
import sys
import time
from decimal import Context, Decimal
from pathlib import Path

import pexpect
import pytest

from aggregator.core.rules import load_rules
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.table import create_table
from tests.integration.harness import pipeline, put

pytestmark = pytest.mark.integration

RULES_TEXT = """version: 1
rules:
  - name: likes
    match: {type: like}
    key: "{post}"
    leaderboard: true
  - name: likes_hourly
    match: {type: like}
    key: "{post}"
    leaderboard: true
    leaderboard_store: list
    window: {time: ts, unit: epoch_seconds, granularities: [hour], retention: 2h}
"""
AGGREGATOR = Path(sys.prefix) / "bin" / "aggregator"
GAP = r"(?:\x1b\[[0-9;]*m|\s)*"
"""Spaces and the terminal's style codes (a changed row is bold) between two cells' texts."""


def cells(*texts: str) -> str:
    """A pattern of cells in a row: ``cells("beta", "5")`` matches ``beta │ 5``, styled or not."""
    return f"{GAP}│{GAP}".join(texts)


def _like(ddb, table: str, i: int, post: str) -> None:
    put(
        ddb,
        table,
        {"pk": f"LIKE#{i}", "sk": "LIKE", "type": "like", "post": post, "ts": int(time.time())},
    )


def _watch(table: str, rules: Path, endpoint_url: str, interval: str = "0.3") -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGGREGATOR_")}
    env.update(TERM="xterm", COLUMNS="120", LINES="40")
    args = ["watch", "--table", table, "-d", str(rules), "--endpoint-url", endpoint_url]
    return pexpect.spawn(
        str(AGGREGATOR),
        [*args, "--interval", interval],
        env=env,
        dimensions=(40, 120),
        encoding="utf-8",
        timeout=30,
    )


def _liked_table(ddb, streams, tmp_path: Path, prefix: str) -> tuple[str, Path, StreamRunner]:
    """A table of :data:`RULES_TEXT`'s rules (written to ``tmp_path``) with likes alpha 2 and
    beta 1, processed: ``(table name, rules file, the runner)``."""
    rules_path = tmp_path / "rules.yaml"
    rules_path.write_text(RULES_TEXT, encoding="utf-8")
    name = f"{prefix}-{random.randrange(10**9)}"
    arn = create_table(ddb, name)
    for i, post in enumerate(["alpha", "alpha", "beta"]):
        _like(ddb, name, i, post)
    runner = pipeline(ddb, streams, name, arn, rules=load_rules(rules_path)).runner
    runner.run()
    return name, rules_path, runner


def test_watch_shows_panels_updates_and_leaves_on_q_and_ctrl_c(
    ddb, streams, dynamodb_local, tmp_path
) -> None:
    name, rules_path, runner = _liked_table(ddb, streams, tmp_path, "watch")

    view = _watch(name, rules_path, dynamodb_local.endpoint_url)
    view.expect("likes: top 10")
    view.expect(r"likes_hourly: top 10, \[\d\d:\d\dZ, \d\d:\d\dZ\) \(hour buckets\)")
    view.expect(cells("alpha", "2"))
    view.expect("refresh 2")
    # the application writes, a runner processes the stream: the view shows the new values
    for i in range(3, 7):
        _like(ddb, name, i, "beta")
    runner.run()
    view.expect(cells("beta", "5") + r"[^\n]*▲")
    view.send("q")
    view.expect(pexpect.EOF)
    view.close()
    assert view.exitstatus == 0, view.before
    assert "watched 2 rules: " in view.before and "Traceback" not in view.before

    for stop in ("Ctrl-C", "SIGTERM"):
        # a long interval: leaving does not wait for the next refresh
        again = _watch(name, rules_path, dynamodb_local.endpoint_url, interval="600")
        again.expect(cells("beta", "5"))
        if stop == "Ctrl-C":
            again.sendintr()
        else:
            again.kill(signal.SIGTERM)
        again.expect(pexpect.EOF, timeout=15)
        again.close()
        assert again.exitstatus == 0, (stop, again.before)
        assert "watched 2 rules: " in again.before and "Traceback" not in again.before


PANEL_RULES = """version: 1
rules:
  - name: dwell
    match: {type: view}
    key: "{page}"
    delta: {attribute: seconds}
    kind: mean
    window: {time: ts, unit: epoch_seconds, granularities: [minute], retention: 2d}
  - name: views
    match: {type: view}
    key: "{page}"
    leaderboard: true
    leaderboard_store: list
    window: {time: ts, unit: epoch_seconds, granularities: [minute], retention: 2d}
"""


def test_panels_of_a_windowed_mean_and_a_long_sparkline(ddb, streams, dynamodb_local, tmp_path):
    """Each key of a windowed mean, even past the first key's many buckets, with its mean as the
    value; a sparkline of a range longer than the panel draws is its last buckets, said so."""
    from aggregator.cli.commands.watch import SPARK_BUCKETS, collect
    from aggregator.dynamodb.query import AggregateStore

    path = tmp_path / "rules.yaml"
    path.write_text(PANEL_RULES, encoding="utf-8")
    rules = load_rules(path)
    name = f"watch-panels-{random.randrange(10**9)}"
    arn = create_table(ddb, name)
    now = int(time.time()) // 60 * 60
    seconds: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    rng = random.Random(35)
    i = 0
    for page, minutes in (("a", 80), ("b", 3), ("c", 2)):  # "a" alone has 80 bucket items
        for m in range(minutes):
            value = rng.randrange(1, 100)
            seconds[page].append(value)
            item = {"pk": f"VIEW#{i}", "sk": "VIEW", "type": "view", "page": page,
                    "seconds": value, "ts": now - 60 * m - 30}  # fmt: skip
            put(ddb, name, item)
            i += 1
    pipeline(ddb, streams, name, arn, rules=rules, batch_size=100).runner.run()
    store = AggregateStore(ddb, name, rules)
    snapshot = collect(store, list(rules.rules), 5, 2 * 3600)
    dwell, views = snapshot.panels
    assert [r.key for r in dwell.rows] == ["a", "b", "c"]
    for row in dwell.rows:
        got = seconds[row.key]
        assert dict(row.fields) == {"sum": sum(got), "count": len(got)}
        assert row.value == Context(prec=38).divide(Decimal(sum(got)), len(got))  # 38 digits
    assert [(r.key, r.value) for r in views.rows] == [("a", 80), ("b", 3), ("c", 2)]
    # the titles give the range summed: the two hours up to the refresh (its second rounded
    # up), widened out to whole minutes
    asked_end = math.ceil(snapshot.at)
    start, end = (asked_end - 2 * 3600) // 60 * 60, math.ceil(asked_end / 60) * 60
    span = "[{}, {})".format(*(time.strftime("%H:%MZ", time.gmtime(t)) for t in (start, end)))
    assert views.title == f"views: top 5, {span} (minute buckets)"
    assert dwell.title == f"dwell: first 5 keys, {span} (mean)"
    # more minute buckets than the sparkline draws: it draws the last 24
    assert len(views.rows[0].spark) == SPARK_BUCKETS
    # 121 minute buckets (120 when the refresh's second is a minute's first)
    assert views.note == f"sparklines: the last {SPARK_BUCKETS} of {(end - start) // 60} buckets"


def test_watch_piped_named_rules_a_refused_panel_and_errors(
    ddb, streams, dynamodb_local, tmp_path, monkeypatch
) -> None:
    """In process, piped (no terminal): the panels in the order the rules are named, the last
    view then the summary on a line of its own; a --last of too many buckets is one panel's
    note; an unknown rule or table is one line and exit 1."""
    from click.testing import CliRunner

    from aggregator.cli.commands import watch
    from aggregator.cli.main import main

    name, rules_path, _ = _liked_table(ddb, streams, tmp_path, "watch-piped")

    read = watch.collect
    calls = []

    def one_refresh(*args, **kwargs):  # the second refresh is Ctrl-C
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return read(*args, **kwargs)

    monkeypatch.setattr(watch, "collect", one_refresh)
    base = ["--table", name, "-d", str(rules_path), "--endpoint-url", dynamodb_local.endpoint_url]
    base += ["--interval", "0.2"]
    runner = CliRunner()
    shown = runner.invoke(main, ["watch", "likes_hourly", "likes", *base])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    titles = [line for line in lines if ": top 10" in line]
    assert [t.split(":")[0] for t in titles] == ["likes_hourly", "likes"]
    assert lines[-2].endswith("(q or Ctrl-C to leave)") and "refresh 1: " in lines[-2]
    requests = int(lines[-2].split("refresh 1: ")[1].split()[0])
    assert requests > 0
    word = "request" if requests == 1 else "requests"
    assert lines[-1] == f"watched 2 rules: 1 refresh, {requests} read {word}"

    calls.clear()
    # wide enough for the note on one line (the shared console's width is set at import)
    monkeypatch.setattr(watch.console, "width", 200)
    long = runner.invoke(main, ["watch", *base, "--last", "400d"])
    assert long.exit_code == 0, long.output
    assert "likes: top 10" in long.output and "alpha" in long.output  # the other panel stays
    assert (
        "the range holds 9,601 hour buckets, more than a rolling top reads (1,000); "
        "watch a shorter --last (at most 41d)"
    ) in long.output

    unknown = runner.invoke(main, ["watch", "nosuch", *base])
    assert unknown.exit_code == 1
    assert unknown.output == (
        "error: no rule named 'nosuch'; known rules: likes, likes_hourly\n"
    ), unknown.output
    no_table = runner.invoke(main, ["watch", *base[:1], "nosuch-table", *base[2:]])
    assert no_table.exit_code == 1 and len(no_table.output.splitlines()) == 1, no_table.output
    assert "Traceback" not in no_table.output and "nosuch-table" in no_table.output
