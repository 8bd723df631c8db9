"""Spread aggregates on DynamoDB Local (``table: aggregate_partitions``): a read of one key is one
request, a listing, reconcile and drop-rule cover every partition key value, and the manifest
records each generation's spread. Expected values and placements are computed here with plain
Python from the table's items and sort keys (a CRC-32 of the rule and key), not with the
framework's functions."""

from __future__ import annotations

import zlib
from collections import defaultdict
from decimal import Decimal

import pytest

from aggregator.core.layout import TableLayout
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.streams import TableStream
from aggregator.operations.backfill import Backfill
from aggregator.operations.drop import DropRule
from aggregator.operations.reconcile import reconcile
from tests.integration.harness import deploy, final_items, put, table_items

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

N = 8
SPREAD = TableLayout(aggregate_partitions=N)
HOUR = 1_700_000_000 // 3600 * 3600
OWNERS = [f"owner{i:02d}" for i in range(40)]  # enough keys to reach every one of the 8 values

PER_OWNER = rule("per_owner", key="{owner}", delta={"attribute": "points"})
BY_HOUR = rule(
    "by_hour",
    key="{owner}",
    window={"time": "ts", "unit": "epoch_seconds", "granularities": ["hour", "minute"]},
)
MAXIMUM = rule("best", key="{owner}", delta={"attribute": "points"}, kind="max")
PAIR = rule("pair", key="{owner}#{kind}")  # a key of two fields: its home is both
RULES = RuleSet.of(PER_OWNER, BY_HOUR, MAXIMUM, PAIR, layout=SPREAD)


def home_partition(sort_key: str, fields: int) -> str:
    """Where the design puts an item: the CRC-32 of ``<rule>#<first key fields>`` modulo N."""
    home = "#".join(sort_key.split("#")[: 1 + fields])
    return f"AGGREGATES#{zlib.crc32(home.encode()) % N}"


def write(ddb, name: str) -> None:
    for i in range(120):
        item = {
            "pk": f"P{i}",
            "sk": f"PATH#{i}",
            "owner": OWNERS[i % len(OWNERS)],
            "points": i % 7,
            "kind": "ab"[i % 2],
            "ts": HOUR + 60 * (i % 90),  # two hours of minutes
        }
        put(ddb, name, item)


def truth(ddb, name: str) -> dict[str, dict[str, Decimal]]:
    sums: dict[str, Decimal] = defaultdict(Decimal)
    best: dict[str, Decimal] = {}
    pairs: dict[str, Decimal] = defaultdict(Decimal)
    for item in final_items(ddb, name):
        owner, points = item["owner"], Decimal(item["points"])
        sums[owner] += points
        best[owner] = max(best.get(owner, points), points)
        pairs[f"{owner}#{item['kind']}"] += 1
    return {
        "per_owner": {k: v for k, v in sums.items() if v},
        "best": best,
        "pair": dict(pairs),
    }


def aggregate_items(ddb, name: str) -> list[tuple[str, str]]:
    """``(partition key, sort key)`` of every item under an ``AGGREGATES`` value."""
    return [
        (i["pk"]["S"], i["sk"]["S"])
        for i in table_items(ddb, name)
        if i["pk"]["S"] == "AGGREGATES" or i["pk"]["S"].startswith("AGGREGATES#")
    ]


def test_spread_aggregates_read_one_key_in_one_request_and_list_every_value(ddb, streams, table):
    name, arn = table
    write(ddb, name)
    deploy(ddb, streams, name, arn, RULES)  # registers the rules: the manifest's partitions
    states = Manifest(ddb, name, RULES.layout).load()
    assert {n: s.partitions for n, s in states.items()} == {r.name: N for r in RULES}

    # every item under its home's value, and the 8 values all in use
    placed = aggregate_items(ddb, name)
    fields = {"pair": 2}
    assert [
        (pk, sk) for pk, sk in placed if pk != home_partition(sk, fields.get(sk.split("#")[0], 1))
    ] == []
    assert {pk for pk, _ in placed} == {f"AGGREGATES#{n}" for n in range(N)}

    store = AggregateStore(ddb, name, RULES)
    expected = truth(ddb, name)
    # per-key reads: one request each, spread or not
    for owner in OWNERS[:10]:
        before = store.requests
        got = store.get("per_owner", owner)
        assert store.requests - before == 1
        assert (got.value if got else Decimal(0)) == expected["per_owner"].get(owner, 0)
        before = store.requests
        best = store.get("best", owner)  # the max's value items: one Query
        assert store.requests - before == 1
        assert best is not None and best.value == expected["best"][owner]
        before = store.requests
        window = store.window("by_hour", owner, start=HOUR, end=HOUR + 2 * 3600)
        assert window.requests == store.requests - before == len(window.parts)
        assert window.value == sum(1 for i in range(120) if OWNERS[i % len(OWNERS)] == owner)
    before = store.requests
    assert store.get("pair", ["owner03", "b"]).value == expected["pair"]["owner03#b"]
    assert store.requests - before == 1

    # listings: every value, in sort key order
    listed = list(store.list("per_owner"))
    assert [a.key for a in listed] == sorted(a.key for a in listed)
    assert {a.key: a.value for a in listed if a.value} == expected["per_owner"]
    assert {a.key: a.value for a in store.list("best")} == expected["best"]
    assert {a.key: a.value for a in store.list("pair")} == expected["pair"]
    top = store.top("per_owner", 3)  # no index: every aggregate, sorted
    ranked = sorted(expected["per_owner"].items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    assert [(a.key, a.value) for a in top] == ranked


def test_reconcile_and_drop_cover_every_spread_value(ddb, streams, table):
    name, arn = table
    write(ddb, name)
    deploy(ddb, streams, name, arn, RULES)
    # the items written before the rules were deployed: the backfill writes them, spread
    Backfill(RULES, TableStream(ddb, streams, name, arn), stream_lag_seconds=0).run()

    clean = reconcile(RULES, ddb, name, rule_names=["per_owner", "pair"], settle_seconds=0)
    assert clean.drifts == []
    assert clean.keys_checked == len(OWNERS) + len(truth(ddb, name)["pair"])

    # break one aggregate in each of two partition key values, by hand, where the design puts it
    broken = {}
    for owner in ("owner01", "owner02"):
        sk = f"per_owner#{owner}"
        key = {"pk": {"S": home_partition(sk, 1)}, "sk": {"S": sk}}
        ddb.update_item(
            TableName=name,
            Key=key,
            UpdateExpression="ADD #v :d",
            ExpressionAttributeNames={"#v": "value"},
            ExpressionAttributeValues={":d": {"N": "100"}},
        )
        broken[owner] = key
    assert len({k["pk"]["S"] for k in broken.values()}) == 2
    report = reconcile(RULES, ddb, name, rule_names=["per_owner"], repair=True, settle_seconds=0)
    assert sorted((d.key, d.stored - d.expected, d.status) for d in report.drifts) == [
        ("owner01", 100, "repaired"),
        ("owner02", 100, "repaired"),
    ]
    expected = truth(ddb, name)["per_owner"]
    for owner, key in broken.items():  # repaired in place, under its own value
        item = ddb.get_item(TableName=name, Key=key, ConsistentRead=True)["Item"]
        assert Decimal(item["value"]["N"]) == expected[owner]
    assert reconcile(RULES, ddb, name, rule_names=["per_owner"], settle_seconds=0).drifts == []

    # drop-rule of a removed rule deletes its items under every value, and nothing else
    remaining = RuleSet.of(BY_HOUR, MAXIMUM, PAIR, layout=SPREAD)
    deploy(ddb, streams, name, arn, remaining)
    others = [p for p in aggregate_items(ddb, name) if not p[1].startswith("per_owner#")]
    dropped = DropRule(remaining, ddb, name, "per_owner").run()
    assert dropped.items_deleted == len(OWNERS)
    assert sorted(aggregate_items(ddb, name)) == sorted(others)
