"""``aggregator backfill --on-aws``: the backfill begun here (its rules checked and marked
``backfilling`` under a new id, the settings in its meta item), the stack's state machine started
on it with the settings as input; one-line errors without a state machine or with a wrong one;
the local command and ``status`` then see it as a backfill on AWS. moto stands in for DynamoDB
and Step Functions (request shapes: nothing here runs the tasks)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from aggregator.core.rules import load_rules
from aggregator.dynamodb.manifest import Manifest
from aggregator.operations.backfill.distributed import start
from tests.unit.cli.test_boundary import error_line, invoke

ROOT = Path(__file__).resolve().parents[3]
DEFS = str(ROOT / "definitions" / "cloud_adventure.yaml")


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    # moto's DynamoDB Streams answers no DescribeStream here: no shard, no fence to compare
    monkeypatch.setattr(start, "check_fences", lambda *args: None)
    for name in ("AGGREGATOR_ENDPOINT_URL", "AGGREGATOR_BACKFILL_STATE_MACHINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        ddb = boto3.client("dynamodb")
        ddb.create_table(
            TableName="game",
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
        rules = load_rules(Path(DEFS))
        Manifest(ddb, "game", rules.layout).register(rules)  # the handler met them: pending
        machine = boto3.client("stepfunctions").create_state_machine(
            name="backfill",
            definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
            roleArn="arn:aws:iam::123456789012:role/backfill",
        )["stateMachineArn"]
        yield {"ddb": ddb, "rules": rules, "machine": machine}


def test_it_begins_the_backfill_and_starts_the_state_machine_on_it(aws) -> None:
    args = ["backfill", "--table", "game", "-d", DEFS, "--on-aws", "--state-machine"]
    result = invoke([*args, aws["machine"], "--segments", "300", "--workers", "12"])
    assert result.exit_code == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("backfill ") and " started on AWS: " in line, line
    assert "300 segments, 12 workers; execution arn:aws:states:" in line
    states = Manifest(aws["ddb"], "game", aws["rules"].layout).load()
    ids = {s.backfill_id for s in states.values()}
    assert {s.status for s in states.values()} == {"backfilling"} and len(ids) == 1
    backfill_id = ids.pop()
    assert line.startswith(f"backfill {backfill_id} started on AWS")
    sfn = boto3.client("stepfunctions")
    [execution] = sfn.list_executions(stateMachineArn=aws["machine"])["executions"]
    assert execution["name"].startswith(f"backfill-{backfill_id}-")
    sent = json.loads(sfn.describe_execution(executionArn=execution["executionArn"])["input"])
    assert sent["segments"] == 300 and sent["workers"] == 12
    assert sent["backfill_id"] == backfill_id  # the machine's start resumes this one
    # a second start while the execution runs is refused
    again = invoke([*args, aws["machine"]])
    assert "running on AWS already" in error_line(again)
    assert sorted(sent["rules"]) == sorted(states)
    # the local command and status see it as a backfill on AWS
    local = invoke(["backfill", "--table", "game", "-d", DEFS])
    assert "runs on AWS" in error_line(local)
    status = json.loads(invoke(["status", "--table", "game", "-d", DEFS, "--json"]).stdout)
    progress = [g["backfill"] for r in status["rules"] for g in r["generations"] if g["backfill"]]
    assert progress and all(p["on_aws"] and p["segments"] == 300 for p in progress), progress


def test_without_a_state_machine_it_says_how_to_name_one(aws) -> None:
    result = invoke(["backfill", "--table", "game", "-d", DEFS, "--on-aws"])
    assert "--state-machine" in error_line(result)
    states = Manifest(aws["ddb"], "game", aws["rules"].layout).load()
    assert {s.status for s in states.values()} == {"pending"}  # nothing begun


def test_a_wrong_state_machine_fails_in_one_line_and_begins_nothing(aws) -> None:
    wrong = aws["machine"].replace(":backfill", ":nothing")
    result = invoke(
        ["backfill", "--table", "game", "-d", DEFS, "--on-aws", "--state-machine", wrong]
    )
    assert "StateMachineDoesNotExist" in error_line(result)
    states = Manifest(aws["ddb"], "game", aws["rules"].layout).load()
    assert {s.status for s in states.values()} == {"pending"}


def test_more_segments_than_one_process_takes_points_to_on_aws(aws) -> None:
    result = invoke(["backfill", "--table", "game", "-d", DEFS, "--segments", "65"])
    assert "--on-aws" in error_line(result)


def test_aws_options_without_on_aws_are_refused(aws) -> None:
    result = invoke(["backfill", "--table", "game", "-d", DEFS, "--workers", "5"])
    assert error_line(result) == "error: --workers apply to a backfill on AWS: add --on-aws"


def test_a_failed_start_says_what_it_left_and_how_to_go_on(aws, monkeypatch) -> None:
    from aggregator.dynamodb.client import RequestClient

    send = RequestClient.send

    def refusing(self, operation, **kwargs):
        if operation == "start_execution":
            raise ClientError(
                {"Error": {"Code": "ExecutionLimitExceeded", "Message": "too many"}},
                "StartExecution",
            )
        return send(self, operation, **kwargs)

    monkeypatch.setattr(RequestClient, "send", refusing)
    args = ["backfill", "--table", "game", "-d", DEFS, "--on-aws", "--state-machine"]
    line = error_line(invoke([*args, aws["machine"]]))
    assert "is begun (its rules are backfilling) but no execution started" in line
    assert "run this command again to start it" in line
    monkeypatch.setattr(RequestClient, "send", send)
    again = invoke([*args, aws["machine"]])  # the same command starts it, resuming it
    assert again.exit_code == 0 and "(resumed) started on AWS" in again.stdout
