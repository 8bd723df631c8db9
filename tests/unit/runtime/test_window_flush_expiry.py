"""Window mode: deltas waiting in the tumbling-window state are not flushed into time buckets
that passed their retention meanwhile (pure: a recording writer, no DynamoDB)."""

from __future__ import annotations

from decimal import Decimal

from aggregator.core.engine import Engine
from aggregator.core.layout import DEFAULT_LAYOUT
from aggregator.dynamodb.writer import WriteResult, WriteStats
from aggregator.runtime.processor import StreamProcessor
from tests.factories import stream_record
from tests.unit.dynamodb.test_limits import WINDOWED, T


class RecordingWriter:
    mode = "window"
    layout = DEFAULT_LAYOUT
    client = None  # no dead letters in these batches
    table_name = "t"
    observer = None
    routing = None

    def __init__(self) -> None:
        self.applied: list[dict[str, Decimal]] = []

    def check_shard(self, shard_id):
        return None

    def close(self):
        return None

    def apply(self, batch, *, shard_id=None):
        self.applied.append({sk: d.amount for sk, d in batch.deltas.items()})
        return WriteResult()

    def write_dead_letters(self, failures, *, shard_id=None):
        return WriteStats()


def test_flush_drops_buckets_that_expired_while_waiting_in_the_state():
    clock = {"now": T + 30}
    writer = RecordingWriter()
    processor = StreamProcessor(
        Engine(WINDOWED), writer, flush="window", clock=lambda: clock["now"]
    )
    record = stream_record("INSERT", new={"pk": "e1", "sk": "E", "p": "a", "ts": T + 5})
    event = {"Records": [record], "shardId": "s-1", "window": {"start": "a", "end": "b"}}
    first = processor.process_event(event)
    assert writer.applied == [] and first.expired == 0
    # the window closes after the minute bucket's TTL (end 05:01 + 120 s) but before the hour's
    clock["now"] = T + 60 + 120
    final = {
        "Records": [],
        "shardId": "s-1",
        "window": {"start": "a", "end": "b"},
        "state": first.response["state"],
        "isFinalInvokeForWindow": True,
    }
    outcome = processor.process_event(final)
    assert writer.applied == [{"events#a#hour#2013-01-01T05:00:00Z": Decimal(1)}]
    assert (outcome.expired, outcome.expired_retractions) == (1, 0)
    assert outcome.response["state"] == {}
