"""The shard twin's plan and stream API, the capacity model, and write sizing from the old item."""

from __future__ import annotations

from decimal import Decimal

import pytest

from aggregator.dev.capacity import CapacityModel
from aggregator.dev.shards import PartitionStream, ShardPlan, ShardTwin, SimulatedClock
from aggregator.dynamodb.costs import WriteObservation
from aggregator.dynamodb.sizes import typed_item_size
from tests.fakes import FakeStreams

HOUR = 3600


def test_plan_staggers_rollovers_and_chains_lineage():
    plan = ShardPlan(4, 4 * HOUR, 0)
    # partition i's first shard closes (i + 1) / 4 of a rollover after the start
    assert [plan.span(p, 0) for p in range(4)] == [(0, HOUR * (p + 1)) for p in range(4)]
    assert plan.span(0, 1) == (HOUR, 5 * HOUR)
    assert plan.span(0, 2) == (5 * HOUR, 9 * HOUR)
    assert plan.generation(0, HOUR - 1) == 0
    assert plan.generation(0, HOUR) == 1
    assert plan.generation(0, 9 * HOUR) == 3
    ids = {plan.shard_id(p, g) for p in range(4) for g in range(12)}
    assert len(ids) == 48
    assert all(i.startswith("shardId-") and len(i) == len("shardId-") + 20 + 1 + 8 for i in ids)


def test_plan_rejects_nonsense():
    with pytest.raises(ValueError, match="partitions"):
        ShardPlan(0, HOUR, 0)
    with pytest.raises(ValueError, match="rollover"):
        ShardPlan(1, 0, 0)


def record(pk: str, seq: int, name: str = "INSERT"):
    return {
        "eventName": name,
        "dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": "x"}}, "SequenceNumber": str(seq)},
    }


def test_twin_delivers_each_item_in_order_along_its_lineage():
    clock = SimulatedClock(0)
    arrivals = {1: 10, 2: 5000, 3: 100, 4: 7000}  # record 3 is scheduled before record 2
    real = [record("A", 1), record("A", 2, "MODIFY"), record("A", 3, "MODIFY"), record("B", 4)]
    twin = ShardTwin(
        FakeStreams({"real": (None, False, real)}, page=1000),
        "arn",
        ShardPlan(2, HOUR, 0),
        clock,
        arrival=lambda r: arrivals[int(r["dynamodb"]["SequenceNumber"])],
    )
    clock.now = 3 * HOUR
    twin.advance()
    assert twin.next_arrival() is None
    seen = []
    for p in range(2):
        view: PartitionStream = twin.view(p)
        shards = view.describe_stream()["StreamDescription"]["Shards"]
        parents = [s.get("ParentShardId") for s in shards]
        assert parents == [None, *[s["ShardId"] for s in shards[:-1]]][: len(shards)]
        for s in shards:
            it = view.get_shard_iterator(
                StreamArn="arn", ShardId=s["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            page = view.get_records(ShardIterator=it)
            seen += [(r["dynamodb"]["Keys"]["pk"]["S"], r["eventName"]) for r in page["Records"]]
            closed = "EndingSequenceNumber" in s["SequenceNumberRange"]
            assert ("NextShardIterator" not in page) == closed
    # A's records in their stream order (record 3 waited for record 2), B's too
    assert [e for pk, e in seen if pk == "A"] == ["INSERT", "MODIFY", "MODIFY"]
    assert [pk for pk, _ in seen].count("B") == 1


def test_twin_latest_iterator_points_after_the_most_recent_visible_record():
    clock = SimulatedClock(0)
    real = [record("A", 1), record("A", 2, "MODIFY"), record("A", 3, "MODIFY")]
    arrivals = {1: 10, 2: 20, 3: 30}
    twin = ShardTwin(
        FakeStreams({"real": (None, False, real)}, page=1000),
        "arn",
        ShardPlan(1, 10 * HOUR, 0),
        clock,
        arrival=lambda r: arrivals[int(r["dynamodb"]["SequenceNumber"])],
    )
    clock.now = 25
    twin.advance()  # records 1 and 2 visible
    view = twin.view(0)
    (shard,) = view.describe_stream()["StreamDescription"]["Shards"]
    latest = view.get_shard_iterator(
        StreamArn="arn", ShardId=shard["ShardId"], ShardIteratorType="LATEST"
    )["ShardIterator"]
    empty = view.get_records(ShardIterator=latest)
    assert empty["Records"] == []
    clock.now = 35
    twin.advance()  # record 3 arrives after the iterator was taken
    page = view.get_records(ShardIterator=empty["NextShardIterator"])
    assert [r["eventName"] for r in page["Records"]] == ["MODIFY"]
    assert len(view.get_records(ShardIterator=page["NextShardIterator"])["Records"]) == 0


def test_capacity_model_peaks_per_second_and_largest_item():
    model = CapacityModel()
    for i in range(1200):
        model.observe(WriteObservation(10 + i / 1200, "AGG", "r#hot", 1, 100, "r", 2))
    model.observe(WriteObservation(3600 * 2 + 10, "AGG", "r#big", 5, 4500, None, 0))
    report = model.report()
    assert report.item is not None and report.item.wcu_per_second == 1200
    assert report.item.over_limit
    assert report.index_partition is not None and report.index_partition.wcu_per_second == 2400
    assert report.largest_item_bytes == 4500
    assert report.largest_item_by_hour == [100, 0, 4500]
    assert report.throttled_seconds == 3  # the item, its partition and the index partition


def test_typed_item_size_counts_names_and_values():
    item = {
        "pk": {"S": "AGGREGATES"},  # 2 + 10
        "value": {"N": "12345"},  # 5 + 4
        "ck": {"B": b"\x00" * 21},  # 2 + 21
        "flag": {"BOOL": True},  # 4 + 1
    }
    assert typed_item_size(item) == 12 + 9 + 23 + 5
    assert typed_item_size({"m": {"M": {"a": {"N": "1"}}}}) == 1 + 3 + 1 + 2 + 1


class OldItemClient:
    """Answers every UpdateItem with the given ALL_OLD item."""

    def __init__(self, old):
        self.old = old

    def update_item(self, **request):
        assert request["ReturnValues"] == "ALL_OLD"
        return {"Attributes": self.old}


def test_writes_are_charged_for_the_larger_of_the_item_sizes_before_and_after():
    from aggregator.core.engine import AggregateRef, BatchDeltas, CoalescedDelta
    from aggregator.dynamodb.writer import AtLeastOnceWriter

    delta = CoalescedDelta(AggregateRef("r", "k", "k"), Decimal(1), "1", [("1", Decimal(1))])
    seen: list[WriteObservation] = []
    small = AtLeastOnceWriter(OldItemClient({}), "t", clock=lambda: 5.0, observer=seen.append)
    result = small.apply(BatchDeltas(deltas={"r#k": delta}, last_sequence_number="1"))
    assert result.stats.modelled_wcu == 1
    # other shards' checkpoints on the item (3,000 bytes) make the same update cost 3 WCU
    old = {"pk": {"S": "AGGREGATES"}, "sk": {"S": "r#k"}, "value": {"N": "7"}}
    old["ck#other"] = {"S": "x" * 3000}
    big = AtLeastOnceWriter(OldItemClient(old), "t", clock=lambda: 5.0, observer=seen.append)
    result = big.apply(BatchDeltas(deltas={"r#k": delta}, last_sequence_number="1"))
    assert result.stats.modelled_wcu == 3
    assert [(w.sort_key, w.wcu, w.at_seconds) for w in seen] == [("r#k", 1, 5.0), ("r#k", 3, 5.0)]
    assert seen[1].item_bytes > 3000
    small.close()
    big.close()
