"""The deployed backfill end to end, without AWS: moto's interpreter of the Amazon States
Language executes the stack's state machine definition (:mod:`aggregator.deploy.
backfill_machine`), and each Lambda invocation it makes runs the real task
(:func:`~aggregator.operations.backfill.distributed.run_task`) on DynamoDB Local, while the
application writes and the stream handler runs; some invocations die midway (reported as
``Lambda.Unknown``, as Step Functions reports an invocation that ran out of memory or time) and
are retried by the definition. Every aggregate then equals the rules over the final items,
computed without the engine.

moto runs Lambda tasks only in Docker: its call (``lambda_eval_utils._invoke_lambda_function``)
is replaced here by the task run in this process. DynamoDB Local's requests pass through moto.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

from aggregator.deploy.backfill_machine import FUNCTION_ARN_PLACEHOLDER, backfill_definition
from aggregator.dev.faults import SimulatedCrash
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import create_table
from aggregator.operations.backfill.distributed import run_task
from tests.integration.backfill_property import OLD_RULES, Writer
from tests.integration.harness import RULES, expected_from_items, final_items, pipeline, stored
from tests.integration.test_distributed_backfill import Killer
from tests.integration.test_property import mark_ttl

pytestmark = [pytest.mark.integration]

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
