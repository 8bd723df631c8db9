"""AggregateStore.window and histogram against a stub client: the Query requests it plans, and
its errors (no DynamoDB needed)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from aggregator.core.exceptions import QueryError
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.query import AggregateStore
from tests.factories import AggregatesStub

RULES = RuleSet.of(
    rule(
        "events",
        key="{provider}",
        window={
            "time": "ts",
            "unit": "epoch_seconds",
            "granularities": ["hour", "minute"],
            "retention": "25h",
        },
    ),
    rule("per_player", key="{pk}"),
    rule("players_by_paths", source="per_player", key="{value}"),
)
T = 1_357_016_400  # 2013-01-01T05:00:00Z


def bucket(value: int, ttl: int | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"value": {"N": str(value)}}
    if ttl is not None:
        item["ttl"] = {"N": str(ttl)}
    return item


def test_sliding_window_reads_hour_run_and_minute_edges_in_three_queries():
    items = {
        "events#p1#minute#2013-01-01T04:57:00Z": bucket(100),  # before the window
        "events#p1#minute#2013-01-01T04:58:00Z": bucket(40),  # holds its first second: counted
        "events#p1#minute#2013-01-01T04:59:00Z": bucket(1),
        "events#p1#hour#2013-01-01T05:00:00Z": bucket(10),
        "events#p1#hour#2013-01-02T03:00:00Z": bucket(20),
        "events#p1#hour#2013-01-02T04:00:00Z": bucket(1000),  # read as minutes instead
        "events#p1#minute#2013-01-02T04:00:00Z": bucket(2),
        "events#p1#minute#2013-01-02T04:58:00Z": bucket(3),
        "events#p1#minute#2013-01-02T04:59:00Z": bucket(500),  # at the end: excluded
        "events#p2#minute#2013-01-02T04:00:00Z": bucket(7000),  # another key
    }
    client = AggregatesStub(items)
    store = AggregateStore(client, "t", RULES)
    # 2013-01-02T04:58:58.5Z, up to the second: the last 24 h are [04:58:59, 04:58:59), widened
    # out to whole minutes: [04:58, 04:59)
    now = T + 86400 - 61.5
    result = store.window("events", "p1", last=86400, now=now)
    assert (result.asked_start, result.asked_end) == (T - 61, T + 86400 - 61)
    assert (result.start_text, result.end_text) == ("2013-01-01T04:58:00Z", "2013-01-02T04:59:00Z")
    assert result.widened
    assert result.value == Decimal(40 + 1 + 10 + 20 + 2 + 3)
    assert [(p.granularity.label, p.buckets) for p in result.parts] == [
        ("minute", 2),
        ("hour", 23),
        ("minute", 59),
    ]
    assert (result.requests, result.items_read, result.complete) == (3, 6, True)
    ranges = [
        (r["ExpressionAttributeValues"][":low"]["S"], r["ExpressionAttributeValues"][":high"]["S"])
        for _, r in client.requests
    ]
    assert ranges == [
        ("events#p1#minute#2013-01-01T04:58:00Z", "events#p1#minute#2013-01-01T04:59:00Z"),
        ("events#p1#hour#2013-01-01T05:00:00Z", "events#p1#hour#2013-01-02T03:00:00Z"),
        ("events#p1#minute#2013-01-02T04:00:00Z", "events#p1#minute#2013-01-02T04:58:00Z"),
    ]
    assert all(r["ConsistentRead"] for _, r in client.requests)


def test_expired_buckets_are_not_counted_and_the_result_says_incomplete():
    items = {
        "events#p1#hour#2013-01-01T05:00:00Z": bucket(10, ttl=T + 3600 + 90000),
        "events#p1#hour#2013-01-01T06:00:00Z": bucket(5, ttl=T + 7200 + 90000),
    }
    store = AggregateStore(AggregatesStub(items), "t", RULES)
    now = T + 3600 + 90000  # the first bucket's TTL: expired at that very second
    result = store.window("events", "p1", start=T, end=T + 7200, now=now)
    assert result.value == Decimal(5)
    assert not result.complete
    fresh = store.window("events", "p1", start=T, end=T + 7200, now=T + 7200)
    assert (fresh.value, fresh.complete) == (Decimal(15), True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"last": 0}, "positive duration"),
        ({"start": T, "last": 3600}, "either start"),
        ({}, "either start"),
        ({"start": T}, "give end with start"),
        ({"start": T + 60, "end": T}, "before start"),
    ],
)
def test_bad_ranges_are_query_errors(kwargs, message):
    store = AggregateStore(AggregatesStub({}), "t", RULES)
    with pytest.raises(QueryError, match=message):
        store.window("events", "p1", now=T, **kwargs)


def test_window_needs_a_windowed_rule_and_get_refuses_one():
    store = AggregateStore(AggregatesStub({}), "t", RULES)
    with pytest.raises(QueryError, match="has no window"):
        store.window("per_player", "ann", last=3600, now=T)
    with pytest.raises(QueryError, match="keeps time buckets"):
        store.get("events", "p1")


def test_unaligned_edges_widen_out_to_whole_minutes():
    items = {
        "events#p1#minute#2013-01-01T04:59:00Z": bucket(100),  # before the range
        "events#p1#minute#2013-01-01T05:00:00Z": bucket(1),  # holds its start
        "events#p1#minute#2013-01-01T05:01:00Z": bucket(2),  # holds its end
        "events#p1#minute#2013-01-01T05:02:00Z": bucket(100),  # after it
    }
    store = AggregateStore(AggregatesStub(items), "t", RULES)
    result = store.window("events", "p1", start=T + 1, end=T + 61, now=T + 61)
    assert (result.asked_start, result.asked_end) == (T + 1, T + 61)
    assert (result.start, result.end) == (T, T + 120) and result.widened
    assert result.value == 3
    aligned = store.window("events", "p1", start=T, end=T + 120, now=T + 120)
    assert (aligned.start, aligned.end, aligned.value) == (T, T + 120, 3)
    assert not aligned.widened
    # an empty range on a boundary stays empty and reads nothing
    empty = AggregateStore(AggregatesStub({}), "t", RULES)
    result = empty.window("events", "p1", start=T + 60, end=T + 60, now=T + 60)
    assert (result.start, result.end) == (T + 60, T + 60) and result.parts == []
    assert result.requests == 0 and result.value == 0


def test_histogram_sorts_numerically_and_drops_zero_counts():
    items = {
        "players_by_paths#10": bucket(1),
        "players_by_paths#2": bucket(3),
        "players_by_paths#9": bucket(0),
        "players_by_paths#-1": bucket(2),
    }
    rows = AggregateStore(AggregatesStub(items), "t", RULES).histogram("players_by_paths")
    assert [(r.value, r.count) for r in rows] == [
        (Decimal(-1), Decimal(2)),
        (Decimal(2), Decimal(3)),
        (Decimal(10), Decimal(1)),
    ]
