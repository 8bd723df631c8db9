"""Property: a distributed backfill (:mod:`aggregator.operations.backfill.distributed`), its
tasks run as the state machine runs them (:class:`~aggregator.dev.backfill_execution.
LocalExecution`) with a small time budget, racing random writes and a lagging, crashing stream
handler, with invocations killed at random requests (mid-page, between writing a flush and
committing it, mid-apply), leaves every backfilled aggregate equal to the rules over the final
items; computed here, independently of the engine (:func:`tests.integration.harness.
expected_from_items`).
"""

from __future__ import annotations

import itertools
import os
import random
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregator.dev.backfill_execution import LocalExecution
from aggregator.dev.faults import SimulatedCrash
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import create_table
from tests.integration.backfill_property import OLD_RULES, Writer, ops, put_op
from tests.integration.harness import (
    RULES,
    expected_from_items,
    final_items,
    pipeline,
    scenario_seed,
    stored,
)
from tests.integration.test_property import mark_ttl

pytestmark = [pytest.mark.integration]

EXAMPLES = int(os.environ.get("AGGREGATOR_DISTRIBUTED_BACKFILL_EXAMPLES", "6"))
_names = itertools.count()

scenario = st.fixed_dictionaries(
    {
        "history": st.lists(put_op, max_size=14),
        "before": st.lists(put_op, max_size=5),
        "during": st.lists(st.tuples(ops, st.booleans()), min_size=1, max_size=10),
        "after": ops,
        "segments": st.integers(1, 4),
        "join_buckets": st.integers(1, 3),
        "reduce_buckets": st.integers(1, 3),
        "page_items": st.integers(1, 4),
        "carry_keys": st.integers(1, 6),
        "flush_items": st.integers(1, 8),
        "kills": st.integers(0, 4),
        "seed": st.integers(0, 2**16),
        "mode": st.sampled_from(["exactly-once", "window"]),
        "crashes": st.lists(st.tuples(st.integers(1, 12), st.integers(0, 3)), max_size=2),
        "stream_lag": st.sampled_from([0, 0, 0.2]),
    }
)


class Killer:
    """Wraps the DynamoDB client of the tasks: in the thread of an armed invocation, the n-th
    request raises :class:`SimulatedCrash` (the invocation is killed there)."""

    def __init__(self, client: Any, local: threading.local | None = None) -> None:
        self._client = client
        self._local = threading.local() if local is None else local
        self.kills = 0

    def arm(self, after_requests: int | None) -> None:
        self._local.left = after_requests

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute) or name.startswith("_") or name in ("meta", "exceptions"):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            left = getattr(self._local, "left", None)
            if left is not None:
                if left <= 0:
                    self._local.left = None
                    self.kills += 1
                    raise SimulatedCrash(f"invocation killed at {name}")
                self._local.left = left - 1
            return attribute(*args, **kwargs)

        return call


def run_scenario(ddb, streams, case: dict[str, Any], report: dict[str, int]) -> None:
    name = f"dbf-{os.getpid()}-{next(_names)}"
    arn = create_table(ddb, name)
    rnd = random.Random(case["seed"])
    try:
        writer = Writer(ddb, name)
        writer.apply(case["history"])
        old = pipeline(ddb, streams, name, arn, rules=OLD_RULES, lifecycle=True).runner
        old.poll_interval = 0.005
        old.run(idle_polls=1)
        crashes = dict(case["crashes"])
        handler = pipeline(
            ddb,
            streams,
            name,
            arn,
            rules=RULES,
            lifecycle=True,
            mode=case["mode"],
            batch_size=3,
            window_seconds=1,
            crash=lambda n: crashes.get(n),
            transform=mark_ttl,
        ).runner
        handler.poll_interval = 0.005
        writer.apply(case["before"])
        handler.run(idle_polls=1)  # the deployment: the rules are registered, pending
        during = iter(case["during"])
        kills_left = case["kills"]
        one_at_a_time = threading.Lock()
        killer = Killer(ddb)
        stream_killer = Killer(streams, killer._local)  # one count for both clients

        def before(request: dict[str, Any]) -> None:
            nonlocal kills_left
            with one_at_a_time:
                step = next(during, None)
                if step is not None:
                    operations, catch_up = step
                    writer.apply(operations)
                    if catch_up:
                        handler.run(idle_polls=1)
                kill = kills_left > 0 and request["task"] != "start" and rnd.random() < 0.3
                if kill:
                    kills_left -= 1
                killer.arm(rnd.randint(0, 12) if kill else None)

        table = TableStream(killer, stream_killer, name, arn)  # type: ignore[arg-type]
        execution = LocalExecution.in_process(
            RULES, table, budget_seconds=0.6, before=before, died_retries=100
        )
        summary = execution.run(
            {
                "segments": case["segments"],
                "join_buckets": case["join_buckets"],
                "reduce_buckets": case["reduce_buckets"],
                "workers": 2,
                "stream_lag_seconds": case["stream_lag"],
                "page_items": case["page_items"],
                "carry_keys": case["carry_keys"],
                "flush_items": case["flush_items"],
            }
        )["summary"]
        for operations, _ in during:
            writer.apply(operations)
        writer.apply(case["after"])
        handler.run()
        states = Manifest(ddb, name, RULES.layout).load()
        assert all(states[r.name].status == "active" for r in RULES)
        expected = expected_from_items(final_items(ddb, name), RULES, kept=writer.kept)
        actual = stored(ddb, name, RULES)
        report["scenarios"] += 1
        report["items"] += summary["items_scanned"]
        report["changed"] += summary["changed_items"]
        report["kills"] += killer.kills + stream_killer.kills
        report["invocations"] += len(execution.calls)
        assert actual == expected
    finally:
        ddb.delete_table(TableName=name)


def test_distributed_backfill_racing_writes_kills_and_crashes_is_exact(dynamodb_local):
    ddb = dynamodb_local.client("dynamodb")
    streams = dynamodb_local.client("dynamodbstreams")
    report = dict.fromkeys(("scenarios", "items", "changed", "kills", "invocations"), 0)

    @scenario_seed("distributed backfill")
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=scenario)
    def scenarios(case):
        run_scenario(ddb, streams, case, report)

    scenarios()
    print(f"\ndistributed backfill property: {report}")
    assert report["scenarios"] >= EXAMPLES
    assert report["kills"] > 0 and report["changed"] > 0  # the paths were reached
