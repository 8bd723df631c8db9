"""``write_shards: auto``: the rule field, the pure routing by creation time, the engine's
choice per record, the heat meter's estimate, and the persisted switches (moto: request shapes
and conditions only; the multi-shard property test carries exactness on DynamoDB Local)."""

from __future__ import annotations

from decimal import Decimal

import boto3
import pytest
from moto import mock_aws

from aggregator.core.batch_state import decode_batch, encode_batch
from aggregator.core.engine import Engine
from aggregator.core.exceptions import RuleError
from aggregator.core.lifecycle import rule_fingerprint
from aggregator.core.records import StreamRecord
from aggregator.core.routing import CLOCK_MARGIN_SECONDS, moved_at, next_switch_seconds
from aggregator.core.rules import AUTO_WRITE_SHARDS, RuleSet, load_rules, rule
from aggregator.dynamodb.routing import (
    COOL_WCU_PER_SECOND,
    HOT_WCU_PER_SECOND,
    HeatMeter,
    ShardRouting,
    routing_sort_key,
)
from aggregator.dynamodb.table import create_table
from tests.factories import stream_record
from tests.fakes import Clock

AUTO = RuleSet.of(
    rule("total", match={"sk": {"prefix": "PATH#"}}, key="TOTAL", write_shards="auto"),
    rule("per_owner", match={"sk": {"prefix": "PATH#"}}, key="{owner}", leaderboard=True),
)
SHARD = "shardId-00000001700000000000-0000abcd"


def test_the_rule_field_takes_auto_and_names_the_field_otherwise(tmp_path):
    r = rule("t", key="TOTAL", write_shards="auto")
    assert (r.sharded, r.auto_shards, r.partial_slots) == (True, True, AUTO_WRITE_SHARDS)
    assert (rule("t", key="T").sharded, rule("t", key="T", write_shards=3).partial_slots) == (
        False,
        3,
    )
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - {name: r, key: K, write_shards: auto}\n")
    assert load_rules(path).get("r").write_shards == "auto"
    for bad in ("Auto", "0", 0, 101, 2.5, True):
        path.write_text(f"rules:\n  - {{name: r, key: K, write_shards: {bad}}}\n")
        with pytest.raises(RuleError, match=r"rule 'r', field 'write_shards': should be a whole"):
            load_rules(path)
    with pytest.raises(RuleError, match="write_shards cannot be combined with source"):
        rule("d", source="s", key="{value}", write_shards="auto")
    # where the aggregates are kept is part of the rule's meaning (a new generation)
    assert rule_fingerprint(r) != rule_fingerprint(rule("t", key="TOTAL", write_shards=64))


def test_a_record_goes_to_the_partials_after_an_odd_number_of_switches():
    assert [moved_at([100, 160, 200], t) for t in (99, 100, 159, 160, 199, 200, 10**10)] == [
        False,
        True,
        True,
        False,
        False,
        True,
        True,
    ]
    assert not moved_at([], 5) and not moved_at([1], None)
    assert moved_at([100], Decimal("100.0"))


@pytest.mark.parametrize("now", [1000.0, 1000.001, 1000.999, 1001.0])
def test_a_switch_takes_effect_after_every_record_that_can_exist_when_it_is_decided(now):
    at = next_switch_seconds(now)
    # a record stamped (rounded down) by a clock up to the margin ahead exists at most at:
    assert at > int(now + CLOCK_MARGIN_SECONDS)
    assert at <= now + CLOCK_MARGIN_SECONDS + 1


def owner_record(seq, created, owner="ann"):
    item = {"pk": f"P{seq}", "sk": f"PATH#{seq}", "owner": owner}
    return StreamRecord(stream_record("INSERT", None, item, seq=seq, created=created))


def test_the_engine_routes_each_record_by_its_creation_time():
    engine = Engine(AUTO)
    assert engine.auto_rules == ("total",)
    batch = engine.process(
        [owner_record(1, 99), owner_record(2, 100), owner_record(3, 100), owner_record(4, 161)],
        routing={"total": [100, 160]},
    )
    # records 2 and 3 (created in [100, 160)) go to a partial, 1 and 4 to the aggregate
    direct, partial = batch.deltas["total#TOTAL"], batch.deltas["~total#TOTAL"]
    assert [s for s, _ in direct.parts] == ["000000000000000000001", "000000000000000000004"]
    assert [s for s, _ in partial.parts] == ["000000000000000000002", "000000000000000000003"]
    assert (direct.amount, partial.amount) == (2, 2)
    assert direct.auto_shards and partial.write_shards == AUTO_WRITE_SHARDS
    # the rule without auto is untouched; without routing everything goes to the aggregate
    assert not batch.deltas["per_owner#ann"].ref.partial
    plain = engine.process([owner_record(2, 100)])
    assert set(plain.deltas) == {"total#TOTAL", "per_owner#ann"}


def test_the_window_state_keeps_the_auto_flag():
    batch = Engine(AUTO).process(
        [owner_record(1, 99), owner_record(2, 100)], routing={"total": [100]}
    )
    decoded = decode_batch(encode_batch(batch))
    assert {k: (d.auto_shards, d.ref.partial) for k, d in decoded.deltas.items()} == {
        "total#TOTAL": (True, False),
        "~total#TOTAL": (True, True),
        "per_owner#ann": (False, False),
    }


def test_the_heat_estimate_is_writes_a_second_times_units_times_writers():
    meter = HeatMeter(window_seconds=10)
    assert meter.estimate(SHARD, "total", 5.0) == 0.0
    for t in range(20):  # 2 writes a second for 10 s of a 3-WCU aggregate that 50 shards write
        meter.record(SHARD, "total", 100 + t / 2, 3, 50)
    assert meter.estimate(SHARD, "total", 110.0) == pytest.approx(2 * 3 * 50)
    # a write of a partial counts with the aggregate's units and writers as last seen
    meter.record(SHARD, "total", 110.0)
    assert meter.estimate(SHARD, "total", 110.0) == pytest.approx(21 * 150 / 10)
    # the shard's own deltas a second, apart from its writes
    meter.record_deltas(SHARD, "total", 110.0, 40)
    assert meter.deltas_per_second(SHARD, "total", 110.0) == pytest.approx(4.0)
    # writes leave the window; other shards and rules are apart
    assert meter.estimate(SHARD, "total", 200.0) == 0.0
    assert meter.estimate("shardId-other", "total", 110.0) == 0.0


def test_a_spread_rules_estimate_is_shared_by_its_partition_key_values_but_a_hot_key_is_not():
    meter = HeatMeter(window_seconds=10)
    for t in range(100):  # 10 writes a second of cold keys: 2 WCU each, this shard alone
        meter.record(SHARD, "likes", 100 + t / 10, 2, 1)
    assert meter.estimate(SHARD, "likes", 110.0) == pytest.approx(20.0)
    assert meter.estimate(SHARD, "likes", 110.0, spread=8) == pytest.approx(20.0 / 8)
    for t in range(10):  # one key that 40 shards write, once a second
        meter.record(SHARD, "likes", 100 + t, 1, 40)
    everything = (100 * 2 + 10 * 40) / 10
    assert meter.estimate(SHARD, "likes", 110.0) == pytest.approx(everything)
    # the hot key's writes land on one value: never divided
    assert meter.estimate(SHARD, "likes", 110.0, spread=64) == pytest.approx(
        (100 * 2 / 64 + 10 * 40) / 10
    )


def test_a_spread_rules_first_batch_is_hot_only_past_its_start_line_times_its_values():
    per = RuleSet.of(
        rule("per", match={"sk": {"prefix": "PATH#"}}, key="{owner}", write_shards="auto")
    )
    records = [owner_record(i, 100 + i // 3, owner=f"o{i}") for i in range(6)]  # 6 keys, 3 a s
    times = [r.approximate_creation_time for r in records]
    batch = Engine(per).process(records)
    spread = ShardRouting(
        None, "t", per.layout, ["per"], spreads={"per": 2}, start_hot_deltas_per_second=2
    )
    assert spread.hot_at_start(batch, times) == set()  # 3 a second, under 2 x 2
    single = ShardRouting(None, "t", per.layout, ["per"], start_hot_deltas_per_second=2)
    assert single.hot_at_start(batch, times) == {"per"}
    # one key's deltas land on one value: its line is not multiplied
    total = Engine(AUTO).process([owner_record(i, 100 + i // 3) for i in range(6)])
    wide = ShardRouting(
        None, "t", AUTO.layout, ["total"], spreads={"total": 64}, start_hot_deltas_per_second=3
    )
    assert wide.hot_at_start(total, times) == {"total"}  # TOTAL: 3 a second on one aggregate


@mock_aws
def test_a_shard_starts_with_its_routing_item_and_the_first_creator_wins():
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_table(client, "routes")
    clock = Clock(1_700_000_000.4)
    routing = ShardRouting(client, "routes", AUTO.layout, ["total"], clock=clock)
    assert routing.read(SHARD) is None and routing.reads == 1
    assert routing.start(SHARD, {"total", "per_owner"}) == {"total": [0]}
    assert routing.read(SHARD) == {"total": [0]}
    # a second start (another invocation that read nothing) gets what the first stored
    other = ShardRouting(client, "routes", AUTO.layout, ["total"], clock=clock)
    assert other.start(SHARD, set()) == {"total": [0]}
    assert (routing.started, routing.started_hot, other.started) == (1, 1, 0)
    assert other.start("shardId-00000001700000000000-cold", set()) == {}
    assert other.read("shardId-00000001700000000000-cold") == {}


def test_a_first_batch_shows_a_rule_hot_by_its_deltas_a_second():
    engine = Engine(AUTO)
    routing = ShardRouting(None, "t", AUTO.layout, ["total"], start_hot_deltas_per_second=2)
    records = [owner_record(i, 100 + i // 3) for i in range(6)]  # 6 records over 2 seconds
    batch = engine.process(records)
    times = [r.approximate_creation_time for r in records]
    assert routing.hot_at_start(batch, times) == {"total"}  # 3 a second
    slow = [owner_record(i, 100 + 2 * i) for i in range(3)]  # 3 over 5 seconds
    assert (
        routing.hot_at_start(engine.process(slow), [r.approximate_creation_time for r in slow])
        == set()
    )


@mock_aws
def test_switches_are_persisted_in_the_future_and_a_concurrent_decision_wins():
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_table(client, "routes")
    clock = Clock(1_700_000_000.4)
    routing = ShardRouting(client, "routes", AUTO.layout, ["total"], clock=clock)
    assert routing.start(SHARD, set()) == {}
    assert routing.decide(SHARD, {}) == 0  # no heat: nothing to decide
    for _ in range(10):
        routing.heat.record(SHARD, "total", clock.now, 3, 64)
    assert routing.decide(SHARD, {}) == 1
    switches = routing.read(SHARD)
    assert switches == {"total": [next_switch_seconds(clock.now)]}
    item = client.get_item(
        TableName="routes",
        Key={"pk": {"S": "AGGREGATOR#CONTROL"}, "sk": {"S": routing_sort_key(SHARD)}},
    )["Item"]
    assert int(item["ttl"]["N"]) > switches["total"][0]
    # a pending switch waits for its time
    assert routing.decide(SHARD, switches) == 0
    # another invocation of the shard that read nothing loses the condition: what is stored stands
    other = ShardRouting(client, "routes", AUTO.layout, ["total"], clock=clock)
    for _ in range(10):
        other.heat.record(SHARD, "total", clock.now, 3, 64)
    assert other.decide(SHARD, {}) == 0
    assert routing.read(SHARD) == switches
    # once it took effect, a cool shard switches back
    clock.now += 30
    routing.heat.record(SHARD, "total", clock.now, 1, 1)
    assert routing.heat.estimate(SHARD, "total", clock.now) < COOL_WCU_PER_SECOND
    assert routing.decide(SHARD, switches) == 1
    assert routing.read(SHARD)["total"] == [switches["total"][0], next_switch_seconds(clock.now)]


def test_the_at_least_once_routing_is_in_memory_and_immediate():
    routing = ShardRouting(None, "t", AUTO.layout, ["total"], clock=Clock(500.5))
    assert routing.read(SHARD) is None and routing.start(SHARD, set()) == {}
    for _ in range(100):
        routing.heat.record(SHARD, "total", 500.5, 4, 1)
    assert routing.heat.estimate(SHARD, "total", 500.5) > HOT_WCU_PER_SECOND
    assert routing.decide(SHARD, {}) == 1
    assert routing.read(SHARD) == {"total": [500]} and routing.reads == 0
    assert routing.read(None) == {}
