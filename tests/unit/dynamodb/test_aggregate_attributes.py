"""One list of an aggregate's attributes: what ``aggregate_update`` writes is what the writer's
size model counts (``updates.aggregate_counters`` and ``updates.aggregate_attributes``)."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from aggregator.core.engine import CoalescedDelta, Engine
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.records import StreamRecord, deserialize_value
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.sizes import aggregate_item, item_size
from aggregator.dynamodb.updates import aggregate_update, item_key, resolved
from aggregator.dynamodb.writer import place
from tests.factories import stream_record

NOW = time.time()
WINDOW = {"time": "ts", "unit": "iso8601", "granularities": ["hour"], "retention": "25h"}
TALLY = {"partition_key": "{pk}", "sort_key": "META", "attribute": "pathCount"}
PATHS = {"sk": {"prefix": "PATH#"}}
RULES = [
    rule("ranked", match=PATHS, key="{owner}", leaderboard=True, leaderboard_partitions=2),
    rule("hourly", match=PATHS, key="{owner}", window=WINDOW, leaderboard=True),
    rule("mean", match=PATHS, key="{owner}", delta={"attribute": "n"}, kind="mean"),
    rule("max", match=PATHS, key="{owner}", delta={"attribute": "n"}, kind="max"),
    rule("tally", match=PATHS, target=TALLY, write_shards=2),  # its partials carry the target
]
ITEM = {
    "pk": "P1",
    "sk": "PATH#1",
    "owner": "ann",
    "n": 5,
    "ts": datetime.fromtimestamp(NOW, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
}


def _deltas(layout: TableLayout) -> list[CoalescedDelta]:
    rules = RuleSet.of(*(r for r in RULES if layout.has_sort_key or not r.sharded), layout=layout)
    item = ITEM if layout.has_sort_key else {**ITEM, "id": ITEM["pk"]}
    record = StreamRecord(stream_record("INSERT", None, item, seq=7))
    batch = Engine(rules).process([record], now=NOW)
    return [place(d, "shard-1") for d in batch.deltas.values()]


@pytest.mark.parametrize(
    "layout", [DEFAULT_LAYOUT, TableLayout(partition_key="id", sort_key=None)], ids=str
)
def test_the_size_model_counts_what_the_update_writes(layout: TableLayout) -> None:
    deltas = _deltas(layout)
    # every shape: index entry, time bucket with TTL, count, value item, target partial
    assert {d.ref.rule for d in deltas} == {"ranked", "hourly", "mean", "max"} | (
        {"tally"} if layout.has_sort_key else set()
    )
    for delta in deltas:
        written = resolved(aggregate_update(layout, delta, delta.amount).render())
        expected: dict[str, Any] = {
            name: deserialize_value(v) for name, v in item_key(layout, delta).items()
        }
        expected |= {n: deserialize_value(v) for n, v in (written["ADD"] | written["SET"]).items()}
        assert aggregate_item(layout, delta, delta.amount, None) == expected, delta.ref


def test_a_target_partials_size_counts_its_target() -> None:
    (partial,) = (d for d in _deltas(DEFAULT_LAYOUT) if d.ref.rule == "tally" and d.ref.partial)
    modelled = aggregate_item(DEFAULT_LAYOUT, partial, partial.amount, None)
    assert modelled["target"] == ["P1", "META"]
    without = {k: v for k, v in modelled.items() if k != "target"}
    # "target" (6 bytes) + a list (3) of two strings, each 1 byte of overhead and its text
    assert item_size(modelled) - item_size(without) == 6 + 3 + (1 + 2) + (1 + 4)
    ledger = replace(partial, ref=replace(partial.ref, target=None), target_attribute=None)
    assert "target" not in aggregate_item(DEFAULT_LAYOUT, ledger, Decimal(1), None)
