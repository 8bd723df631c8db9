"""Checkpoint pruning and the window mode's early flush, on DynamoDB Local."""

from __future__ import annotations

from decimal import Decimal

import pytest

from aggregator.core.engine import Engine
from aggregator.core.records import StreamRecord
from aggregator.dynamodb.checkpoint import checkpoint_attribute, decode_checkpoint
from aggregator.dynamodb.modes import WriterOptions, make_writer
from aggregator.runtime.processor import StreamProcessor, create_processor
from tests.factories import stream_record
from tests.fakes import Clock
from tests.integration.harness import RULES, stored

pytestmark = pytest.mark.integration


def checkpoints(ddb, table: str) -> dict[str, str]:
    """Checkpoint attribute -> its value (text or bytes) on paths#TOTAL."""
    item = ddb.get_item(
        TableName=table,
        Key={"pk": {"S": "AGGREGATES"}, "sk": {"S": "paths#TOTAL"}},
        ConsistentRead=True,
    )["Item"]
    return {k: next(iter(v.values())) for k, v in item.items() if k.startswith(("ck#", "c#"))}


def test_stale_checkpoints_are_pruned_when_that_saves_a_write_unit(ddb, table):
    name, _ = table
    clock = Clock(1_000_000)
    writer = make_writer(
        "exactly-once",
        ddb,
        name,
        options=WriterOptions(checkpoint_retention_seconds=3600),
        clock=clock,
    )
    engine = Engine(RULES)
    seq = iter(range(1, 1000))

    def apply(shard: str) -> None:
        n = next(seq)
        record = stream_record("INSERT", None, {"pk": "P", "sk": f"PATH#{n}"}, seq=n)
        result = writer.apply(engine.process([StreamRecord(record)]), shard_id=shard)
        assert result.retry_from is None

    apply("shard-old")
    clock.now += 1800  # within the retention: both checkpoints stay
    apply("shard-new")
    assert set(checkpoints(ddb, name)) == {
        checkpoint_attribute(s) for s in ("shard-old", "shard-new")
    }
    clock.now += 3601  # shard-old's checkpoint is stale, but the item is far under 1 KB: it stays
    apply("shard-new")
    assert len(checkpoints(ddb, name)) == 2
    # 30 more shards: at about 1 KB, removing shard-old's stale checkpoint saves a write unit
    for i in range(30):
        apply(f"shard-{i}")
    assert checkpoint_attribute("shard-old") not in checkpoints(ddb, name)
    assert len(checkpoints(ddb, name)) == 31
    clock.now += 3601  # all stale but the next writer's: removing them saves a write unit
    apply("shard-new")
    assert set(checkpoints(ddb, name)) == {checkpoint_attribute("shard-new")}
    assert stored(ddb, name)["paths"] == {"TOTAL": Decimal(34)}
    # 14 bytes of name and 21 of value: the sequence number and the time of the write
    (value,) = checkpoints(ddb, name).values()
    assert len(checkpoint_attribute("shard-new")) == 14 and len(value) == 21
    assert decode_checkpoint(value) == ("34".zfill(40), int(clock.now))


def test_old_format_checkpoints_still_protect_and_are_replaced(ddb, table):
    """An item written in the first format carries ck#<shardId> = "<seq40>@<time>": a batch it
    already covers is not applied again, a later one is, and the old attribute gives way to the
    new."""
    name, _ = table
    clock = Clock(1_000_000)
    writer = make_writer("exactly-once", ddb, name, clock=clock)
    engine = Engine(RULES)
    ddb.put_item(
        TableName=name,
        Item={
            "pk": {"S": "AGGREGATES"},
            "sk": {"S": "paths#TOTAL"},
            "value": {"N": "2"},
            "rule": {"S": "paths"},
            "key": {"S": "TOTAL"},
            "ck#shard-1": {"S": "5".zfill(40) + "@999000"},
        },
    )

    def apply(seqs: list[int]) -> None:
        records = [
            StreamRecord(stream_record("INSERT", None, {"pk": "P", "sk": f"PATH#{s}"}, seq=s))
            for s in seqs
        ]
        assert writer.apply(engine.process(records), shard_id="shard-1").retry_from is None

    apply([4, 5])  # redelivered: covered by the old checkpoint
    assert stored(ddb, name)["paths"] == {"TOTAL": Decimal(2)}
    assert set(checkpoints(ddb, name)) == {"ck#shard-1"}
    apply([5, 6, 7])  # half covered: only 6 and 7 count
    assert stored(ddb, name)["paths"] == {"TOTAL": Decimal(4)}
    assert set(checkpoints(ddb, name)) == {checkpoint_attribute("shard-1")}
    apply([6, 7])  # and the new checkpoint protects as the old one did
    assert stored(ddb, name)["paths"] == {"TOTAL": Decimal(4)}


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
