"""``aggregator demo`` on a DynamoDB Local of the test's own: it names its table and prints
queries that work on it; ``--keep`` waits for Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import re
import shlex
import signal
import threading
import time

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.cli.commands.demo import _wait_for_a_stop_signal
from aggregator.dev import demo as demo_module
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]


def test_demo_names_its_table_and_prints_queries_that_work(dynamodb_local, monkeypatch):
    # every eighth flight of the day (about 110): what is checked here is the command (its
    # table, the queries it prints); the replay's counts are checked in test_flights.py
    read_flights = demo_module.read_flights
    monkeypatch.setattr(demo_module, "read_flights", lambda **days: read_flights(**days)[::8])
    flights = str(ROOT / "definitions" / "flights.yaml")
    endpoint = dynamodb_local.endpoint_url
    cli = CliRunner()
    result = cli.invoke(
        main,
        ["demo", "--days", "1", "-d", flights, "--endpoint-url", endpoint],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    (table_line,) = [line for line in lines if line.startswith("Table flights-demo-")]
    table = table_line.split()[1]
    assert table_line == f"Table {table} at {endpoint}"
    tries = [line.strip() for line in lines if line.startswith("  aggregator ")]
    assert [t.split()[1:3] for t in tries] == [
        ["query", "top"],
        ["query", "window"],
        ["query", "histogram"],
        ["query", "get"],
        ["query", "percentile"],
        ["status", "--table"],
    ]
    outputs = []
    for command in tries:
        ran = cli.invoke(main, shlex.split(command)[1:], env={"COLUMNS": "200"})
        assert ran.exit_code == 0, (command, ran.output)
        outputs.append(ran.stdout)
    assert "UA" in cli.invoke(main, shlex.split(tries[0])[1:]).output
    assert re.search(
        r"^mean_delay_by_carrier \S+: mean -?[0-9.]+, sum -?\d+, count \d+$", outputs[3], re.M
    )
    assert all(f"p{p}" in outputs[4] for p in (50, 90, 99))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_keep_waits_until_ctrl_c_or_sigterm(signum):
    # a SIGINT handler that swallows the signal (as a library may leave one; the CDK tests'
    # jsii runs in the same worker) must not make the wait endless
    def swallow(signum: int, frame: object) -> None:
        pass

    before = {s: signal.signal(s, swallow) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        threading.Timer(0.3, os.kill, (os.getpid(), signum)).start()
        began = time.monotonic()
        _wait_for_a_stop_signal()  # returns on the signal, raises nothing
        assert 0.2 < time.monotonic() - began < 10
        # the previous handlers are back
        assert all(signal.getsignal(s) is swallow for s in before)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
