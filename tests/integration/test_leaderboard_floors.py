"""The leaderboard index's floors (:mod:`aggregator.dynamodb.floors`) against a plain sort.

Random scenarios on DynamoDB Local: scores are written, moved up and down (negative points,
zero), moved to another player and deleted, while the handler crashes mid-batch and delivers
batches twice; the writer keeps only 3 keys above a floor and checks it after every new entry,
so the floor rises often; and the scenario itself raises floors behind the writer's back (another
container's check: this writer keeps its older, lower floor) and makes the writer forget what it
saw (a cold container). After every run of the stream:

- every aggregate at or above its partition's stored floor is in the index (the invariant);
- ``top(n)`` for several ``n`` equals a plain sort of sums computed from the score items
  themselves, ties broken by key, keys at zero left out.

The test fails when the writer skips the membership check after an already-applied update, when
the floor's entry is not read past (ties), or when ``exact_top`` trusts a partition that stopped
at its floor.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import strategies as st

from aggregator.core.layout import leaderboard_partition
from aggregator.core.rules import RuleSet, rule
from aggregator.dev.faults import FaultInjectingClient
from aggregator.dynamodb.floors import FLOOR_PREFIX, IndexFloors, floor_sort_key
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from aggregator.operations.drop import DropRule
from tests.integration.harness import SOAK, run_property, table_items
from tests.integration.scores import (
    RULE,
    delete,
    faulty_stream,
    move,
    put,
    run,
    score_rules,
    score_scenarios,
    score_truth,
    write_step,
)

pytestmark = pytest.mark.integration

scenario = score_scenarios(
    put,
    move,
    delete,
    st.tuples(st.just("raise"), st.integers(0, 1), st.just(""), st.integers(0, 30)),
    st.tuples(st.just("forget"), st.just(0), st.just(""), st.just(0)),
    st.tuples(st.just("forget"), st.just(0), st.just(""), st.just(0)),
    run,
)


def _rules(partitions: int) -> RuleSet:
    return score_rules(partitions)


def _check_invariant(items: list[dict[str, Any]], partitions: int, report: dict[str, int]) -> None:
    """Every aggregate at or above its partition's stored floor carries the index attribute."""
    floors = {
        item["lb"]["S"]: Decimal(item["value"]["N"])
        for item in items
        if item["sk"]["S"].startswith(FLOOR_PREFIX)
    }
    report["floors_seen"] = max(report["floors_seen"], len(floors))
    for item in items:
        sort_key = item["sk"]["S"]
        if item["pk"]["S"] != "AGGREGATES" or not sort_key.startswith(f"{RULE}#"):
            continue
        if "lb" in item:
            continue
        report["unindexed"] += 1
        value = Decimal(item["value"]["N"])
        floor = floors.get(leaderboard_partition(RULE, sort_key, partitions))
        assert floor is not None and value < floor, f"{sort_key} = {value} unindexed, {floors}"


def test_top_is_a_plain_sort_under_floors_faults_and_stale_writers(ddb, streams) -> None:
    report: dict[str, int] = defaultdict(int)
    counter = iter(range(10_000))

    def run(case: dict[str, Any]) -> None:
        report["scenarios"] += 1
        rules = _rules(case["partitions"])
        name = f"floors-{next(counter)}"
        _, processor, make_runner = faulty_stream(ddb, streams, rules, name, case)
        writer = processor.writer
        writer.parts.membership.floors.keep, writer.parts.membership.floors.check_every = 3, 1
        writer.parts.membership.floors.removal_grace_seconds = (
            0  # DynamoDB Local updates its index at once
        )
        runner = make_runner()
        store = AggregateStore(ddb, name, rules)
        other = IndexFloors(ddb, name, rules.layout)  # another container's floor checks
        partitions = [RULE] if case["partitions"] == 1 else [f"{RULE}#0", f"{RULE}#1"]

        def check() -> None:
            assert runner.run().failures == 0
            items = table_items(ddb, name)
            _check_invariant(items, case["partitions"], report)
            expected = score_truth(items)
            for n in (1, 2, 3, 4, 7, 20):
                got = [(a.key, a.value) for a in store.top(RULE, n)]
                if got != expected[:n]:
                    report["drift"] += 1
                assert got == expected[:n], (n, got, expected)
            report["checks"] += 1

        for kind, slot, player, points in case["steps"]:
            if write_step(ddb, name, kind, slot, player, points):
                continue
            if kind == "raise":  # behind the writer's back, with a keep of its own
                other.keep = 1 + points % 4
                other.raise_floor(partitions[slot % len(partitions)])
            elif kind == "forget":  # a cold container: no floors, nothing seen
                writer.parts.membership.seen.clear()
                writer.parts.membership.floors._known.clear()
            else:
                check()
        check()
        report["raised"] += writer.parts.membership.floors.raised + other.raised
        report["fallbacks"] = store.top_fallbacks + report.get("fallbacks", 0)
        ddb.delete_table(TableName=name)

    run_property(
        scenario,
        40 if SOAK else 8,
        run,
        report,
        lambda r: (
            f"floors: {r['scenarios']} scenarios, {r['checks']} checks, {r['raised']} floors "
            f"raised, {r['unindexed']} aggregates left out of the index, {r['fallbacks']} "
            f"top calls read every aggregate; drift {r['drift']}"
        ),
        "leaderboard_floors.json",
    )
    # the scenarios reached the floors' every path
    assert report["raised"] > 0 and report["unindexed"] > 0
    assert report["floors_seen"] >= 1


def test_a_floor_item_is_not_an_aggregate(ddb) -> None:
    """The floor's item lives in the control partition: ``list`` and ``get`` never show it."""
    rules = _rules(1)
    name = "floors-listing"
    create_table(ddb, name, layout=rules.layout)
    for player, points in (("a", 5), ("b", 3), ("c", 1), ("d", 1)):
        ddb.update_item(
            TableName=name,
            Key=rules.layout.aggregate_key(f"{RULE}#{player}"),
            UpdateExpression="SET #v = :v, #lb = :lb, #r = :r, #k = :k",
            ExpressionAttributeNames={"#v": "value", "#lb": "lb", "#r": "rule", "#k": "key"},
            ExpressionAttributeValues={
                ":v": {"N": str(points)},
                ":lb": {"S": RULE},
                ":r": {"S": RULE},
                ":k": {"S": player},
            },
        )
    floors = IndexFloors(ddb, name, rules.layout, keep=2)
    assert floors.raise_floor(RULE) > 0
    item = ddb.get_item(
        TableName=name, Key=rules.layout.item_key("AGGREGATOR#CONTROL", floor_sort_key(RULE))
    )
    assert item["Item"]["value"] == {"N": "3"}
    store = AggregateStore(ddb, name, rules)
    assert [(a.key, a.value) for a in store.list(RULE)] == [("a", 5), ("b", 3), ("c", 1), ("d", 1)]
    assert [(a.key, a.value) for a in store.top(RULE, 2)] == [("a", 5), ("b", 3)]
    assert store.top_fallbacks == 0
    # three keys need c and d, below the floor: top proves it cannot answer from the index
    assert [(a.key, a.value) for a in store.top(RULE, 3)] == [("a", 5), ("b", 3), ("c", 1)]
    assert store.top_fallbacks == 1
    # drop-rule of the rule (gone from the rule set) deletes its floor with its aggregates, and
    # leaves the floor of another rule whose name starts with this one's
    other = IndexFloors(ddb, name, rules.layout, keep=1)
    ddb.update_item(
        TableName=name,
        Key=rules.layout.aggregate_key(f"{RULE}s#x"),
        UpdateExpression="SET #v = :v, #lb = :lb",
        ExpressionAttributeNames={"#v": "value", "#lb": "lb"},
        ExpressionAttributeValues={":v": {"N": "2"}, ":lb": {"S": f"{RULE}s"}},
    )
    assert other.raise_floor(f"{RULE}s") > 0
    without = RuleSet.of(rule("other", match={"kind": "x"}, key="{k}"))
    result = DropRule(without, ddb, name, RULE).run()
    assert (result.items_deleted, result.floors_removed) == (4, 1)
    left = [i["sk"]["S"] for i in table_items(ddb, name) if i["sk"]["S"].startswith(FLOOR_PREFIX)]
    assert left == [floor_sort_key(f"{RULE}s")]
    ddb.delete_table(TableName=name)


def test_a_crash_between_an_update_and_its_index_fix_is_healed_by_the_redelivery(ddb) -> None:
    """The writer guesses an item's membership from the value it saw last; another shard
    moved the value meanwhile, so the update lands at or above the floor without an index
    entry and a second update must add one. The process dies before it: the redelivered batch
    finds the update applied (its checkpoint) and adds the entry then."""
    from aggregator.core.engine import AggregateRef, BatchDeltas, CoalescedDelta
    from aggregator.dev.faults import SimulatedCrash
    from aggregator.dynamodb.modes import make_writer

    rules = _rules(1)
    name = "floors-crash"
    create_table(ddb, name, layout=rules.layout)
    key = rules.layout.aggregate_key(f"{RULE}#a")
    # the item as another shard left it: 4, below the floor of 5, not indexed
    ddb.put_item(
        TableName=name,
        Item={**key, "value": {"N": "4"}, "rule": {"S": RULE}, "key": {"S": "a"}},
    )
    client = FaultInjectingClient(ddb, layout=rules.layout)
    writer = make_writer("exactly-once", client, name, layout=rules.layout, max_workers=1)
    writer.parts.membership.floors._known[RULE] = (
        Decimal(5),
        0.0,
        float("inf"),
    )  # known, never refreshed
    writer.parts.membership.seen[f"{RULE}#a"] = (Decimal(0), False)  # what this writer saw last
    delta = CoalescedDelta(
        AggregateRef(RULE, "a", "a"), Decimal(3), "100", [("100", Decimal(3))], leaderboard=True
    )
    batch = BatchDeltas(deltas={f"{RULE}#a": delta})
    batch.first_sequence_number = batch.last_sequence_number = "100"
    client.arm(1)  # the update succeeds, the index fix does not happen
    with pytest.raises(SimulatedCrash):
        writer.apply(batch, shard_id="shard-1")
    client.disarm()
    item = ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]
    assert item["value"] == {"N": "7"} and "lb" not in item  # 7 >= 5, out of the index
    result = writer.apply(batch, shard_id="shard-1")  # Lambda delivers the batch again
    assert result.stats.already_applied == 1
    item = ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]
    assert item["value"] == {"N": "7"} and item["lb"] == {"S": RULE}
    writer.close()
    ddb.delete_table(TableName=name)


def _single_writer(ddb, name: str):
    """A table with one aggregate of RULE, ``a``, and a checkpointed writer for it."""
    from aggregator.dynamodb.modes import make_writer

    rules = _rules(1)
    create_table(ddb, name, layout=rules.layout)
    client = FaultInjectingClient(ddb, layout=rules.layout)
    return (
        rules,
        client,
        make_writer("exactly-once", client, name, layout=rules.layout, max_workers=1),
    )


def _batch(amount: int, sequence_number: str):
    from aggregator.core.engine import AggregateRef, BatchDeltas, CoalescedDelta

    delta = CoalescedDelta(
        AggregateRef(RULE, "a", "a"),
        Decimal(amount),
        sequence_number,
        [(sequence_number, Decimal(amount))],
        leaderboard=True,
    )
    batch = BatchDeltas(deltas={f"{RULE}#a": delta})
    batch.first_sequence_number = batch.last_sequence_number = sequence_number
    return batch


def test_an_aggregate_leaves_the_index_only_once_its_floor_has_stood(ddb) -> None:
    """A reader must see a new floor's entry before it sees entries gone below it: writers wait
    REMOVAL_GRACE_SECONDS after the raise before they take aggregates out."""
    import time

    name = "floors-grace"
    rules, _, writer = _single_writer(ddb, name)
    key = rules.layout.aggregate_key(f"{RULE}#a")
    writer.apply(_batch(10, "100"), shard_id="s")  # no floor: indexed
    now = time.time()
    writer.parts.membership.floors._known[RULE] = (Decimal(5), now, float("inf"))  # raised just now
    writer.apply(_batch(-8, "101"), shard_id="s")  # 2, below the floor
    item = ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]
    assert item["value"] == {"N": "2"} and item["lb"] == {"S": RULE}  # still in: too early
    writer.parts.membership.floors._known[RULE] = (
        Decimal(5),
        now - 61,
        float("inf"),
    )  # it has stood
    writer.apply(_batch(-1, "102"), shard_id="s")  # 1, below the floor
    item = ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]
    assert item["value"] == {"N": "1"} and "lb" not in item
    writer.close()
    ddb.delete_table(TableName=name)


def test_a_redelivery_that_cannot_read_the_floor_indexes_the_aggregate(ddb) -> None:
    """The first attempt leaves the aggregate out under a floor and dies; the second cannot read
    the floor (a new container whose read failed): it puts the aggregate into the index, which
    is always allowed."""
    from aggregator.dev.faults import SimulatedCrash

    name = "floors-unknown"
    rules, client, writer = _single_writer(ddb, name)
    key = rules.layout.aggregate_key(f"{RULE}#a")
    writer.parts.membership.floors._known[RULE] = (Decimal(50), 0.0, float("inf"))
    client.arm(1)  # the update lands at 7, below the floor: no fix needed, then a crash
    with pytest.raises(SimulatedCrash):
        writer.apply(_batch(7, "100"), shard_id="s")
        writer.apply(_batch(0, "101"), shard_id="s")
    client.disarm()
    assert "lb" not in ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]
    writer.parts.membership.floors._known.clear()
    writer.parts.membership.floors.load = lambda partitions: None  # the floor's read fails
    assert writer.apply(_batch(7, "100"), shard_id="s").stats.already_applied == 1
    item = ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]
    assert item["value"] == {"N": "7"} and item["lb"] == {"S": RULE}
    writer.close()
    ddb.delete_table(TableName=name)


def test_the_floor_of_a_time_bucket_goes_with_the_bucket(ddb) -> None:
    rules = _rules(1)
    name = "floors-ttl"
    create_table(ddb, name, layout=rules.layout)
    partition = f"{RULE}#hour#2026-01-01T00:00:00Z"
    ddb.update_item(
        TableName=name,
        Key=rules.layout.aggregate_key(f"{RULE}#a#hour#2026-01-01T00:00:00Z"),
        UpdateExpression="SET #v = :v, #lb = :lb",
        ExpressionAttributeNames={"#v": "value", "#lb": "lb"},
        ExpressionAttributeValues={":v": {"N": "3"}, ":lb": {"S": partition}},
    )
    floors = IndexFloors(ddb, name, rules.layout, keep=1)
    assert floors.raise_floor(partition, expires=1_767_229_200) > 0
    key = rules.layout.item_key("AGGREGATOR#CONTROL", floor_sort_key(partition))
    item = ddb.get_item(TableName=name, Key=key)["Item"]
    assert (item["value"], item["ttl"]) == ({"N": "3"}, {"N": "1767229200"})
    assert int(item["raised_at"]["N"]) > 1_700_000_000
    ddb.delete_table(TableName=name)
