"""The Lambda handler on events as Lambda delivers them (eventSourceARN, epoch seconds)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from aggregator import handler as handler_module
from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import load_rules
from aggregator.dynamodb.query import AggregateStore
from tests.factories import stream_record

pytestmark = pytest.mark.integration

EVENTS = Path(__file__).resolve().parents[1] / "events"
RULES = load_rules(EVENTS / "rules.yaml")
SHARD = "shardId-00000001763762400000-4f3a9b21"


@dataclass
class LambdaContext:
    function_name: str = "aggregator"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:aggregator"
    aws_request_id: str = "5f3e0a5e-0000-4000-8000-000000000001"


def load_event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def configure(monkeypatch, dynamodb_local, table):
    name, _ = table

    def apply(mode: str) -> str:
        monkeypatch.setenv("AGGREGATOR_TABLE_NAME", name)
        monkeypatch.setenv("AGGREGATOR_DEFINITIONS", str(EVENTS / "rules.yaml"))
        monkeypatch.setenv("AGGREGATOR_ENDPOINT_URL", dynamodb_local.endpoint_url)
        monkeypatch.setenv("AGGREGATOR_MODE", mode)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        handler_module.reset()
        return name

    yield apply
    handler_module.reset()


def expected_aggregates(store: AggregateStore) -> None:
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


def dead_letters(ddb, table_name: str) -> list:
    return ddb.query(
        TableName=table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "AGGREGATOR#DEAD_LETTERS"}},
    )["Items"]


def test_windowed_event_exactly_once_even_when_delivered_twice(configure, ddb, capsys):
    # GIVEN the default (exactly-once) mode and an event with tumbling-window fields
    table_name = configure("exactly-once")
    event = load_event("dynamodb_stream_window_event.json")

    # WHEN Lambda delivers the same batch twice
    first = handler_module.handler(event, LambdaContext())
    second = handler_module.handler(event, LambdaContext())

    # THEN both invocations succeed, return the window state, and everything counts once
    assert first == second == {"batchItemFailures": [], "state": {}}
    store = AggregateStore(ddb, table_name, RULES)
    expected_aggregates(store)
    assert [(a.key, a.value) for a in store.top("paths_per_player", 5)] in (
        [("PLAYER#alice", 1), ("PLAYER#bob", 1)],
        [("PLAYER#bob", 1), ("PLAYER#alice", 1)],
    )
    # the poison record is in one dead-letter item keyed by shard and sequence number
    items = dead_letters(ddb, table_name)
    assert [(i["sk"]["S"], i["rule"]["S"], i["reason"]["S"]) for i in items] == [
        (
            f"{SHARD}#" + "0" * 19 + "111000000000000000003#points_per_player",
            "points_per_player",
            "NewImage: delta attribute 'points' is str, not a number",
        )
    ]
    assert json.loads(items[0]["record"]["S"])["eventID"] == "eccbc87e4b5ce2fe28308fd9f2a7baf3"
    # the second delivery found every item already applied
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    emf = [blob for blob in blobs if "RecordsReceived" in blob]
    by_cause = [blob for blob in blobs if "DeadLettersByCause" in blob]
    assert len(emf) == 2
    # the dead letter, once per delivery (the second write of it is idempotent)
    assert [(b["Cause"], b["DeadLettersByCause"]) for b in by_cause] == [("wrong-type", [1.0])] * 2
    assert emf[0]["RecordsReceived"] == [7.0]
    assert emf[0]["SelfWritesSkipped"] == [1.0]
    assert emf[0]["DeadLetters"] == [1.0]
    # what the template's DeadLettersAlarm watches: DeadLetters by the service dimension
    (directive,) = emf[0]["_aws"]["CloudWatchMetrics"]
    assert directive["Dimensions"] == [["service"]]
    assert "DeadLetters" in [m["Name"] for m in directive["Metrics"]]
    assert emf[0]["AggregateItemsWritten"] == [4.0]
    assert emf[0]["ConditionalCheckRecoveries"] == [0.0]
    assert emf[1]["AggregateItemsWritten"] == [0.0]
    assert emf[1]["ConditionalCheckRecoveries"] == [4.0]
    # the dashboard's modelled WCU per rule: one blob per rule written, dimensions service and
    # Rule, adding up to the aggregate writes' share of the batch's ModelledWCU
    by_rule = [b for b in blobs if "ModelledWCUByRule" in b]
    first = [b for b in by_rule if blobs.index(b) < blobs.index(emf[0])]  # printed before it
    written = {a.rule for a in store.list("paths_per_player")} | {"points_per_player"}
    assert {b["Rule"] for b in first} <= {r.name for r in RULES} and "paths_per_player" in {
        b["Rule"] for b in first
    }
    assert written
    (directive,) = first[0]["_aws"]["CloudWatchMetrics"]
    assert directive["Dimensions"] == [["service", "Rule"]]
    assert 0 < sum(b["ModelledWCUByRule"][0] for b in first) <= emf[0]["ModelledWCU"][0]


def test_plain_event_in_at_least_once_mode(configure, ddb):
    table_name = configure("at-least-once")
    response = handler_module.handler(load_event("dynamodb_stream_event.json"), LambdaContext())
    assert response == {"batchItemFailures": []}
    expected_aggregates(AggregateStore(ddb, table_name, RULES))
    assert dead_letters(ddb, table_name)[0]["sk"]["S"].startswith("unknown-shard#")


def test_exactly_once_needs_the_shard_id(configure, ddb):
    table_name = configure("exactly-once")
    with pytest.raises(ConfigError, match="set TumblingWindowInSeconds"):
        handler_module.handler(load_event("dynamodb_stream_event.json"), LambdaContext())
    # nothing was written before the error
    assert dead_letters(ddb, table_name) == []
    assert list(AggregateStore(ddb, table_name, RULES).list("total_paths_found")) == []


def test_window_mode_accumulates_in_state_and_flushes_at_window_end(configure, ddb):
    table_name = configure("window")
    event = load_event("dynamodb_stream_window_event.json")
    store = AggregateStore(ddb, table_name, RULES)

    # a non-final invocation keeps the deltas in the state and writes no aggregate
    response = handler_module.handler(event, LambdaContext())
    assert response["batchItemFailures"] == []
    assert set(response["state"]) == {"aggregator"}
    assert store.get("total_paths_found") is None

    # the final invocation of the window applies them
    final = {**event, "Records": [], "state": response["state"], "isFinalInvokeForWindow": True}
    assert handler_module.handler(final, LambdaContext()) == {"batchItemFailures": [], "state": {}}
    expected_aggregates(store)

    # a duplicate of the final invocation changes nothing
    assert handler_module.handler(final, LambdaContext())["state"] == {}
    expected_aggregates(store)


def test_missing_table_name_is_a_clear_configuration_error():
    from aggregator.handler import HandlerSettings

    with pytest.raises(ConfigError, match="AGGREGATOR_TABLE_NAME is not set"):
        HandlerSettings.from_env({})
    with pytest.raises(ConfigError, match="AGGREGATOR_MODE must be one of exactly-once"):
        HandlerSettings.from_env({"AGGREGATOR_TABLE_NAME": "t", "AGGREGATOR_MODE": "twice"})


def test_derived_rules_read_their_source_aggregates_and_nothing_else(
    configure, ddb, capsys, monkeypatch
):
    # GIVEN the Cloud Adventure definitions, whose derived rules read paths_per_player
    table_name = configure("exactly-once")
    definitions = EVENTS.parents[1] / "definitions" / "cloud_adventure.yaml"
    monkeypatch.setenv("AGGREGATOR_DEFINITIONS", str(definitions))
    handler_module.reset()
    source = {"pk": "AGGREGATES", "sk": "paths_per_player#ann", "rule": "paths_per_player"}
    other = {"pk": "AGGREGATES", "sk": "total_paths_found#TOTAL_PATHS_FOUND"}
    runner = {"pk": "AGGREGATOR#RUNNER", "sk": "arn#shard", "sequence_number": "1"}
    records = [
        # ann's aggregate goes 2 -> 3 and bob's appears with 1
        stream_record("MODIFY", {**source, "value": 2}, {**source, "value": 3}, seq=1),
        stream_record(
            "INSERT",
            new={**source, "sk": "paths_per_player#bob", "key": "bob", "value": 1},
            seq=2,
        ),
        # other aggregates and the runner's bookkeeping are self-writes
        stream_record("MODIFY", {**other, "value": 5}, {**other, "value": 6}, seq=3),
        stream_record("INSERT", new=runner, seq=4),
    ]
    event = {"Records": records, "shardId": SHARD, "window": {"start": "x", "end": "y"}}

    # WHEN the handler runs
    assert handler_module.handler(event, LambdaContext()) == {"batchItemFailures": [], "state": {}}

    # THEN the histogram moved ann from bucket 2 to 3, and the player count grew by bob only
    store = AggregateStore(ddb, table_name, load_rules(definitions))
    assert {a.key: a.value for a in store.list("players_by_paths_found")} == {
        "1": Decimal(1),
        "2": Decimal(-1),
        "3": Decimal(1),
    }
    assert store.get("total_players", "TOTAL_PLAYERS").value == Decimal(1)
    assert list(store.list("total_paths_found")) == []
    assert list(store.list("paths_per_player")) == []
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    emf = [blob for blob in blobs if "RecordsReceived" in blob]  # the batch's own metrics
    assert emf[0]["SelfWritesSkipped"] == [2.0]
    assert emf[0]["DerivedInputs"] == [2.0]
