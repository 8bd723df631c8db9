"""``aggregator watch`` under a pseudo-terminal (pexpect) on DynamoDB Local: it starts, shows a
panel per rule, updates after writes that a runner processes (the new value marked), and leaves
cleanly on ``q``, on Ctrl-C and on SIGTERM, restoring the terminal."""

from __future__ import annotations

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


def _watch(table: str, rules: Path, endpoint_url: str) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGGREGATOR_")}
    env.update(TERM="xterm", COLUMNS="120", LINES="40")
    args = ["watch", "--table", table, "-d", str(rules), "--endpoint-url", endpoint_url]
    return pexpect.spawn(
        str(AGGREGATOR),
        [*args, "--interval", "0.3"],
        env=env,
        dimensions=(40, 120),
        encoding="utf-8",
        timeout=30,
    )


def test_watch_shows_panels_updates_and_leaves_on_q_and_ctrl_c(
    ddb, streams, dynamodb_local, tmp_path
) -> None:
    rules_path = tmp_path / "rules.yaml"
    rules_path.write_text(RULES_TEXT, encoding="utf-8")
    rules = load_rules(rules_path)
    name = f"watch-{random.randrange(10**9)}"
    arn = create_table(ddb, name)
    for i, post in enumerate(["alpha", "alpha", "beta"]):
        _like(ddb, name, i, post)
    runner = pipeline(ddb, streams, name, arn, rules=rules).runner
    runner.run()

    view = _watch(name, rules_path, dynamodb_local.endpoint_url)
    view.expect("likes: top 10")
    view.expect("likes_hourly: top 10 over the last 1h")
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
    assert "watched 2 rule(s)" in view.before and "Traceback" not in view.before

    for stop in ("Ctrl-C", "SIGTERM"):
        again = _watch(name, rules_path, dynamodb_local.endpoint_url)
        again.expect(cells("beta", "5"))
        if stop == "Ctrl-C":
            again.sendintr()
        else:
            again.kill(signal.SIGTERM)
        again.expect(pexpect.EOF)
        again.close()
        assert again.exitstatus == 0, (stop, again.before)
        assert "watched 2 rule(s)" in again.before and "Traceback" not in again.before


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
    # 121 minute buckets over the last two hours: the sparkline draws the last 24
    assert len(views.rows[0].spark) == SPARK_BUCKETS
    assert views.note == f"sparklines: the last {SPARK_BUCKETS} of 121 buckets"
