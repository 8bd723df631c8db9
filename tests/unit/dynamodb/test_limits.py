"""Edge cases around windowed and derived rules: DynamoDB's sort-key limit, buckets that expire
between evaluation and writing, granularity labels, odd histogram keys, dead-letter replay of a
rule that became derived (pure or stub clients; no DynamoDB)."""

from __future__ import annotations

from decimal import Decimal

from aggregator.core.engine import MAX_SORT_KEY_BYTES, Engine
from aggregator.core.records import StreamRecord
from aggregator.core.rules import RuleSet, rule
from aggregator.core.windows import Granularity
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.writer import AtLeastOnceWriter
from tests.factories import AggregatesStub, stream_record
from tests.unit.dynamodb.test_query_window import bucket
from tests.unit.dynamodb.test_writer import FakeClient

T = 1_357_016_400  # 2013-01-01T05:00:00Z
WINDOWED = RuleSet.of(
    rule(
        "events",
        key="{p}",
        window={
            "time": "ts",
            "unit": "epoch_seconds",
            "granularities": ["hour", "minute"],
            "retention": 120,
        },
    )
)


def test_a_sort_key_over_1024_bytes_is_a_record_failure_not_a_failing_write():
    engine = Engine(WINDOWED)
    # "events#" + key + "#minute#2013-01-01T05:00:00Z" (28 bytes): the hour suffix is 26
    fits = "x" * (MAX_SORT_KEY_BYTES - len("events#") - len("#minute#2013-01-01T05:00:00Z"))
    ok = engine.process(
        [StreamRecord(stream_record("INSERT", new={"pk": "e", "sk": "E", "p": fits, "ts": T}))],
        now=T,
    )
    assert ok.failures == [] and len(ok.deltas) == 2
    too_long = engine.process(
        [
            StreamRecord(
                stream_record("INSERT", new={"pk": "e", "sk": "E", "p": fits + "y", "ts": T})
            )
        ],
        now=T,
    )
    assert too_long.deltas == {}
    assert [f.reason for f in too_long.failures] == [
        "NewImage: the aggregate's sort key would be 1025 bytes, over DynamoDB's 1024-byte "
        "limit for a sort key"
    ]


def test_writer_skips_buckets_that_expired_after_evaluation():
    engine = Engine(WINDOWED)
    record = stream_record("INSERT", new={"pk": "e", "sk": "E", "p": "a", "ts": T})
    batch = engine.process([StreamRecord(record)], now=T)
    assert len(batch.deltas) == 2
    client = FakeClient()
    # by the time the writer runs, the minute bucket (end T+60, TTL T+180) has expired
    writer = AtLeastOnceWriter(client, "t", clock=lambda: T + 180)
    result = writer.apply(batch)
    assert result.stats.expired_skipped == 1
    assert [c[1]["Key"]["sk"]["S"] for c in client.calls] == ["events#a#hour#2013-01-01T05:00:00Z"]


def test_granularity_label_form_is_accepted_as_input():
    assert Granularity.parse("300s") == Granularity("300s", 300)
    assert Granularity.parse("3600s") == Granularity("hour", 3600)
    assert Granularity.parse(Granularity.parse(900).label).seconds == 900


def test_histogram_keeps_non_numeric_keys_as_text():
    items = {"h#NaN": bucket(1), "h#1_000": bucket(2), "h#7": bucket(3)}
    rules = RuleSet.of(rule("src", key="{pk}"), rule("h", source="src", key="{value}"))
    rows = AggregateStore(AggregatesStub(items), "t", rules).histogram("h")
    assert [(r.value, r.count) for r in rows] == [
        ("1_000", Decimal(2)),
        (Decimal(7), Decimal(3)),
        ("NaN", Decimal(1)),
    ]


def test_lineage_engine_over_a_user_item_also_runs_the_source_rule():
    # why dead-letter replay keeps only the dead letter's own rule's deltas
    rules = RuleSet.of(rule("S", key="{pk}"), rule("D", source="S", key="{value}"))
    record = StreamRecord(stream_record("INSERT", new={"pk": "a", "sk": "b"}))
    batch = Engine(rules.lineage("D")).process([record])
    assert {d.ref.rule for d in batch.deltas.values()} == {"S"}
