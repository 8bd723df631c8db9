"""Checkpoint pruning and the window mode's early flush, on DynamoDB Local."""

from __future__ import annotations

from decimal import Decimal

import pytest

from aggregator.core.engine import Engine
from aggregator.core.records import StreamRecord
from aggregator.dynamodb.checkpoint import CheckpointWriter
from aggregator.runtime.processor import StreamProcessor, create_processor
from tests.factories import stream_record
from tests.integration.harness import RULES, stored

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def checkpoints(ddb, table: str) -> dict[str, str]:
    item = ddb.get_item(
        TableName=table,
        Key={"pk": {"S": "AGGREGATES"}, "sk": {"S": "paths#TOTAL"}},
        ConsistentRead=True,
    )["Item"]
    return {k: v["S"] for k, v in item.items() if k.startswith("ck#")}


def test_stale_checkpoints_of_other_shards_are_pruned(ddb, table):
    name, _ = table
    clock = Clock(1_000_000)
    writer = CheckpointWriter(ddb, name, checkpoint_retention_seconds=3600, clock=clock)
    engine = Engine(RULES)

    def apply(shard: str, seq: int, sk: str) -> None:
        record = stream_record("INSERT", None, {"pk": "P", "sk": sk, "owner": "ann"}, seq=seq)
        result = writer.apply(engine.process([StreamRecord(record)]), shard_id=shard)
        assert result.retry_from is None

    apply("shard-old", 1, "PATH#1")
    clock.now += 1800  # within the retention: both checkpoints stay
    apply("shard-new", 2, "PATH#2")
    assert set(checkpoints(ddb, name)) == {"ck#shard-old", "ck#shard-new"}
    clock.now += 3601  # shard-old's checkpoint is now older than the retention
    apply("shard-new", 3, "PATH#3")
    assert set(checkpoints(ddb, name)) == {"ck#shard-new"}
    assert stored(ddb, name)["paths"] == {"TOTAL": Decimal(3)}


def test_window_state_over_the_limit_is_flushed_early(ddb, table):
    name, _ = table
    processor = create_processor(RULES, ddb, name, mode="window")
    assert isinstance(processor, StreamProcessor)
    processor.state_limit_bytes = 10  # any state is "too large"
    event = {
        "Records": [stream_record("INSERT", None, {"pk": "P", "sk": "PATH#1", "owner": "ann"})],
        "shardId": "shard-1",
        "window": {"start": "2026-11-21T22:00:00Z", "end": "2026-11-21T22:01:00Z"},
        "state": {},
        "isFinalInvokeForWindow": False,
        "isWindowTerminatedEarly": False,
    }
    outcome = processor.process_event(event)
    assert outcome.flushed and outcome.response["state"] == {}
    assert stored(ddb, name)["paths"] == {"TOTAL": Decimal(1)}
