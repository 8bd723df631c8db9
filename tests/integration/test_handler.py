"""The Lambda handler on an event as Lambda delivers it (eventSourceARN, epoch seconds)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from aggregator import handler as handler_module
from aggregator.query import AggregateStore
from aggregator.rules import load_rules

pytestmark = pytest.mark.integration

EVENTS = Path(__file__).resolve().parents[1] / "events"


@dataclass
class LambdaContext:
    function_name: str = "aggregator"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:aggregator"
    aws_request_id: str = "5f3e0a5e-0000-4000-8000-000000000001"


@pytest.fixture
def configured(monkeypatch, dynamodb_local, table):
    name, _ = table
    monkeypatch.setenv("AGGREGATOR_TABLE_NAME", name)
    monkeypatch.setenv("AGGREGATOR_DEFINITIONS", str(EVENTS / "rules.yaml"))
    monkeypatch.setenv("AGGREGATOR_ENDPOINT_URL", dynamodb_local.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    handler_module.reset()
    yield name
    handler_module.reset()


def test_handler_applies_lambda_event(configured, ddb, capsys):
    event = json.loads((EVENTS / "dynamodb_stream_event.json").read_text())

    response = handler_module.handler(event, LambdaContext())

    # THEN the batch succeeded (the poison record was dead-lettered, not retried)
    assert response == {"batchItemFailures": []}
    store = AggregateStore(ddb, configured, load_rules(EVENTS / "rules.yaml"))
    assert store.get("total_paths_found").value == Decimal(2)
    assert {a.key: a.value for a in store.list("paths_per_player")} == {
        "PLAYER#alice": Decimal(1),
        "PLAYER#bob": Decimal(1),
    }
    # TTL delete of carol's path kept (default policy): no aggregate for carol at all
    assert store.get("paths_per_player", "PLAYER#carol") is None
    assert {a.key: a.value for a in store.list("points_per_player")} == {
        "PLAYER#alice": Decimal("7.5")
    }
    assert [(a.key, a.value) for a in store.top("paths_per_player", 5)] in (
        [("PLAYER#alice", 1), ("PLAYER#bob", 1)],
        [("PLAYER#bob", 1), ("PLAYER#alice", 1)],
    )
    # the poison record is in a dead-letter item keyed by shard and sequence number
    items = ddb.query(
        TableName=configured,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "AGGREGATOR#DEAD_LETTERS"}},
    )["Items"]
    assert [(i["sk"]["S"], i["rule"]["S"], i["reason"]["S"]) for i in items] == [
        (
            "unknown-shard#" + "0" * 19 + "111000000000000000003#points_per_player",
            "points_per_player",
            "NewImage: delta attribute 'points' is str, not a number",
        )
    ]
    assert json.loads(items[0]["record"]["S"])["eventID"] == "eccbc87e4b5ce2fe28308fd9f2a7baf3"
    # and Powertools emitted the batch's metrics as CloudWatch EMF
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert emf, "no EMF metrics blob printed"
    assert emf[-1]["RecordsReceived"] == [7.0]
    assert emf[-1]["SelfWritesSkipped"] == [1.0]
    assert emf[-1]["DeadLetters"] == [1.0]
    assert emf[-1]["AggregateItemsWritten"] == [4.0]


def test_handler_returns_state_for_tumbling_window_events(configured):
    event = json.loads((EVENTS / "dynamodb_stream_event.json").read_text())
    event.update(
        shardId="shardId-00000001763762400000-abcdef01",
        window={"start": "2026-11-21T22:00:00Z", "end": "2026-11-21T22:01:00Z"},
        state={"carried": "1"},
        isFinalInvokeForWindow=False,
        isWindowTerminatedEarly=False,
    )
    response = handler_module.handler(event, LambdaContext())
    assert response["batchItemFailures"] == []
    assert response["state"] == {"carried": "1"}


def test_missing_table_name_is_a_clear_configuration_error(monkeypatch):
    from aggregator.exceptions import ConfigError
    from aggregator.handler import HandlerSettings

    with pytest.raises(ConfigError, match="AGGREGATOR_TABLE_NAME is not set"):
        HandlerSettings.from_env({})
