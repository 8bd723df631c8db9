"""The distributed backfill on DynamoDB Local: a property test, the state machine's definition
executed end to end, and the twin (each below, with what it checks); one file, so that
pytest-xdist hands its long tests out early.

Property: a distributed backfill (:mod:`aggregator.operations.backfill.distributed`), its
tasks run as the state machine runs them (:class:`~aggregator.dev.backfill_execution.
LocalExecution`) with a small time budget, racing random writes and a lagging, crashing stream
handler, with invocations killed at random requests (mid-page, between writing a flush and
committing it, mid-apply), leaves every backfilled aggregate equal to the rules over the final
items; computed here, independently of the engine (:func:`tests.integration.harness.
expected_from_items`).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

from aggregator.deploy.backfill_machine import FUNCTION_ARN_PLACEHOLDER, backfill_definition
from aggregator.dev.backfill_execution import LocalExecution
from aggregator.dev.backfill_twin import TwinSettings, run_backfill_twin
from aggregator.dev.faults import SimulatedCrash
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import create_table
from aggregator.operations.backfill.distributed import run_task
from tests.integration.backfill_property import OLD_RULES, Writer, ops, put_op
from tests.integration.harness import (
    RULES,
    SOAK,
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
        "kills": st.integers(1, 4),
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


PARTS = 3
"""The property's scenarios in parts (each a test): pytest-xdist (``--dist loadfile``) hands out
files with more tests first, so this file's long tests start early instead of trailing."""


@pytest.mark.parametrize("part", range(PARTS))
def test_distributed_backfill_racing_writes_kills_and_crashes_is_exact(dynamodb_local, part):
    ddb = dynamodb_local.client("dynamodb")
    streams = dynamodb_local.client("dynamodbstreams")
    report = dict.fromkeys(("scenarios", "items", "changed", "kills", "invocations"), 0)
    examples = EXAMPLES // PARTS + (1 if part < EXAMPLES % PARTS else 0)

    @scenario_seed(f"distributed backfill {part}")
    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=scenario)
    def scenarios(case):
        run_scenario(ddb, streams, case, report)

    scenarios()
    print(f"\ndistributed backfill property {part}: {report}")
    assert report["scenarios"] >= examples
    assert report["kills"] > 0 and report["changed"] > 0  # the paths were reached


# -- the state machine's definition, executed end to end ------------------------------------------
"""The deployed backfill end to end, without AWS: moto's interpreter of the Amazon States
Language executes the stack's state machine definition (:mod:`aggregator.deploy.
backfill_machine`), and each Lambda invocation it makes runs the real task
(:func:`~aggregator.operations.backfill.distributed.run_task`) on DynamoDB Local, while the
application writes and the stream handler runs; some invocations die midway (reported as
``Lambda.Unknown``, as Step Functions reports an invocation that ran out of memory or time) and
are retried by the definition. Every aggregate then equals the rules over the final items,
computed without the engine.

moto runs Lambda tasks only in Docker: its call (``lambda_eval_utils._invoke_lambda_function``)
is replaced here by the task run in this process. DynamoDB Local's requests pass through moto."""

FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:backfill"
ROLE_ARN = "arn:aws:iam::123456789012:role/backfill-state-machine"


def test_the_state_machine_runs_the_backfill_exactly(dynamodb_local, monkeypatch) -> None:
    ddb = dynamodb_local.client("dynamodb")
    streams = dynamodb_local.client("dynamodbstreams")
    name = "machine-e2e"
    arn = create_table(ddb, name)
    rnd = random.Random(7)
    writer = Writer(ddb, name)
    writer.apply([("put", i, rnd.choice(["ann", "bob"]), i - 3, "ruby") for i in range(8)])
    old = pipeline(ddb, streams, name, arn, rules=OLD_RULES, lifecycle=True).runner
    old.poll_interval = 0.005
    old.run(idle_polls=1)
    handler = pipeline(
        ddb, streams, name, arn, rules=RULES, lifecycle=True, transform=mark_ttl, batch_size=3
    ).runner
    handler.poll_interval = 0.005
    writer.apply([("put", 8, "cyd", 5, None)])
    handler.run(idle_polls=1)  # the deployment: the rules registered, pending
    killer = Killer(ddb)
    table = TableStream(killer, streams, name, arn)  # type: ignore[arg-type]
    lock = threading.Lock()
    calls: list[str] = []
    died = 0

    def invoke(parameters: dict[str, Any], region: str, state_credentials: Any) -> Any:
        nonlocal died
        request = json.loads(parameters["Payload"])["aggregator_backfill"]
        with lock:  # the application and the handler go on between invocations
            calls.append(request["task"])
            i = rnd.randrange(12)
            if rnd.random() < 0.5:
                writer.apply(
                    [("put", i, rnd.choice(["ann", "bob", "cyd"]), rnd.randint(-3, 9), "opal")]
                )
            else:
                writer.apply([("delete", i)])
            if rnd.random() < 0.3:
                handler.run(idle_polls=1)
            # one scan dies midway (the property test kills every kind of task)
            kill = request["task"] == "scan" and calls.count("scan") == 2
            killer.arm(rnd.randint(1, 4) if kill else None)
        try:
            response = run_task(request, rules=RULES, table=table, remaining_seconds=0.6)
        except SimulatedCrash:
            died += 1
            error = {"errorType": "Lambda.Unknown", "errorMessage": "the invocation died"}
            return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": error}
        return {"StatusCode": 200, "Payload": response}

    passthrough = {"urls": [r"http://127\.0\.0\.1:\d+.*", r"http://localhost:\d+.*"]}
    config = {
        "core": {"passthrough": passthrough},
        "stepfunctions": {"execute_state_machine": True},
    }
    with mock_aws(config=config):
        monkeypatch.setattr(lambda_eval_utils, "_invoke_lambda_function", invoke)
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        definition = json.dumps(backfill_definition()).replace(
            FUNCTION_ARN_PLACEHOLDER, FUNCTION_ARN
        )
        machine = sfn.create_state_machine(name="backfill", definition=definition, roleArn=ROLE_ARN)
        execution = {
            "backfill_id": None,
            "rules": None,
            "segments": 3,
            "join_buckets": 2,
            "reduce_buckets": 2,
            "workers": 2,
            "max_rcu": None,
            "stream_lag_seconds": 0,
        }
        started = sfn.start_execution(
            stateMachineArn=machine["stateMachineArn"], input=json.dumps(execution)
        )
        deadline = time.monotonic() + 120
        while (ended := sfn.describe_execution(executionArn=started["executionArn"]))[
            "status"
        ] == "RUNNING":
            assert time.monotonic() < deadline, "the execution did not end"
            time.sleep(0.1)
    assert ended["status"] == "SUCCEEDED", ended
    summary = json.loads(ended["output"])["finish"]["summary"]
    assert summary["segments_done"] == 3
    writer.apply([("put", 3, "ann", 2, None)])
    handler.run()
    states = Manifest(ddb, name, RULES.layout).load()
    assert all(states[r.name].status == "active" for r in RULES)
    expected = expected_from_items(final_items(ddb, name), RULES, kept=writer.kept)
    assert stored(ddb, name, RULES) == expected
    assert calls[0] == "start" and calls[-1] == "finish"
    assert died > 0  # some invocations died, and the definition retried them


# -- the twin --------------------------------------------------------------------------------------
"""The distributed backfill's twin (:mod:`aggregator.dev.backfill_twin`): an adopted table,
a stream of rolling shards with crashing handlers, an application writing throughout, scan, join
and reduce invocations as separate processes with a time budget, some killed at a random
moment; every aggregate equals a count of the items made without the engine, and the backfill
ends while the application writes.

``make soak`` runs it at the issue's size (64 shards at once, 256 segments, 40,000 items:
:class:`~aggregator.dev.backfill_twin.TwinSettings`' defaults), with a few seeds;
``AGGREGATOR_TWIN=1`` runs it small (8 shards at once, 8 segments) with the other tests."""

SMALL = TwinSettings(
    posts=40,
    likes=600,
    partitions=8,
    rollover_seconds=5.0,
    segments=8,
    workers=4,
    join_buckets=2,
    reduce_buckets=2,
    budget_seconds=1.0,
    kill_share=0.3,
    writes_per_second=60.0,
    crash_share=0.1,
    stream_lag_seconds=0.5,
    page_items=20,
    carry_keys=15,
    flush_items=15,
)


@pytest.mark.skipif(
    not SOAK and not os.environ.get("AGGREGATOR_TWIN"),
    reason="the twin runs in make soak (and with AGGREGATOR_TWIN=1): make test's property test "
    "above covers the protocol under the same faults, in one process",
)
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", range(3) if SOAK else [0])
def test_the_twin_backfill_is_exact_and_ends_while_the_application_writes(request, seed):
    # at the soak's size a server of its own: DynamoDB Local slows down as the streams of the
    # property test's deleted tables pile up
    server = request.getfixturevalue("fresh_dynamodb_local" if SOAK else "dynamodb_local")
    settings = TwinSettings(seed=seed) if SOAK else SMALL
    result = run_backfill_twin(server, settings)
    print(
        f"\n{result.line()}: {result.items_scanned} items in {result.backfill_seconds:.1f} s, "
        f"{result.shards} shards, {result.invocations} invocations, {result.killed} killed, "
        f"{result.application_writes} writes, {result.handler_crashes} handler crashes, "
        f"{result.changes} changes"
    )
    soak_dir = os.environ.get("AGGREGATOR_SOAK_DIR")
    if soak_dir:
        Path(soak_dir).mkdir(parents=True, exist_ok=True)
        line = {"line": result.line(), "seconds": result.backfill_seconds, "wrong": result.wrong}
        (Path(soak_dir) / f"backfill-twin-{seed}.json").write_text(json.dumps(line))
    assert result.wrong == []
    assert result.overruns == 0  # every invocation stopped itself within its budget
    # one checkpoint of the backfill's per aggregate, however many segments counted it
    assert result.most_backfill_checkpoints == 1
    # the paths were reached: kills, changes racing the scan, crashes, rollovers
    assert result.killed > 0 and result.changes > 0 and result.handler_crashes > 0
    assert result.shards > settings.partitions
    assert result.application_writes > 0  # the application wrote throughout
