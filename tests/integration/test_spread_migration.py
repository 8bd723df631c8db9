"""Migration of a live table from the single-partition layout to spread aggregates, through the
CLI on DynamoDB Local, as the docs describe it (docs/deployment/capacity.md): the rule files
gain ``table: aggregate_partitions: 8``; the handler refuses the changed definitions;
``aggregator rebuild`` requests a spread generation of each rule, the handler takes them up,
the rebuilds backfill them while the application writes and switch readers; ``drop-rule``
removes the old generations. Expected values are computed here from the table's items with
plain Python, and where each item must be from its sort key (a CRC-32 of the rule and key)."""

from __future__ import annotations

import threading
import time
import zlib
from collections import defaultdict
from decimal import Decimal

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import load_rules
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from tests.factories import ddb_json

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

N = 8
RULE_FILE = """version: 1
table: {{partition_key: PK, sort_key: SK{spread}}}
rules:
  - name: likes_per_post
    match: {{SK: {{prefix: "LIKE#USER#"}}}}
    key: "{{PK}}"
    delta: {{attribute: weight}}
  - name: likes_per_user
    match: {{SK: {{prefix: "LIKE#USER#"}}}}
    key: "{{user}}"
"""
RULES = ("likes_per_post", "likes_per_user")


def like(ddb, name: str, i: int) -> None:
    """Like number ``i``: 30 posts, 17 users; every fifth one liked again with more weight (a
    MODIFY), every seventh one taken back (a REMOVE)."""
    post, user = f"POST#{i % 30:03d}", f"u{i % 17:02d}"
    item = {"PK": post, "SK": f"LIKE#USER#{user}#{i}", "user": user, "weight": 1 + i % 4}
    ddb.put_item(TableName=name, Item=ddb_json(item))
    if i % 5 == 0:
        ddb.put_item(TableName=name, Item=ddb_json({**item, "weight": 9}))
    if i % 7 == 3:
        key = {"PK": {"S": post}, "SK": {"S": item["SK"]}}
        ddb.delete_item(TableName=name, Key=key)


def scan(ddb, name: str) -> list[dict]:
    items, start = [], None
    while True:
        page = ddb.scan(
            TableName=name, ConsistentRead=True, **({"ExclusiveStartKey": start} if start else {})
        )
        items += page["Items"]
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def truth(ddb, name: str) -> dict[str, dict[str, Decimal]]:
    posts: dict[str, Decimal] = defaultdict(Decimal)
    users: dict[str, Decimal] = defaultdict(Decimal)
    for item in scan(ddb, name):
        if item["SK"]["S"].startswith("LIKE#USER#") and not item["PK"]["S"].startswith("AGG"):
            posts[item["PK"]["S"]] += Decimal(item["weight"]["N"])
            users[item["user"]["S"]] += 1
    return {"likes_per_post": dict(posts), "likes_per_user": dict(users)}


def aggregates(ddb, name: str) -> list[tuple[str, str]]:
    """``(partition key, sort key)`` of every item under an ``AGGREGATES`` value."""
    return [
        (i["PK"]["S"], i["SK"]["S"])
        for i in scan(ddb, name)
        if i["PK"]["S"] == "AGGREGATES" or i["PK"]["S"].startswith("AGGREGATES#")
    ]


def read(store: AggregateStore) -> dict[str, dict[str, Decimal]]:
    return {r: {a.key: a.value for a in store.list(r) if a.value} for r in RULES}


def test_a_live_table_moves_to_spread_aggregates_through_the_cli(ddb, dynamodb_local, tmp_path):
    rules_file = tmp_path / "likes.yaml"
    rules_file.write_text(RULE_FILE.format(spread=""))
    name = f"spread-{time.monotonic_ns()}"
    create_table(ddb, name, layout=load_rules(rules_file).layout)
    cli = CliRunner()
    common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url, "-d", str(rules_file)]

    def invoke(*args):
        return cli.invoke(main, [*args, *common])

    def ok(*args):
        result = invoke(*args)
        assert result.exit_code == 0, result.output + result.stderr
        return " ".join(result.output.split())

    # today's layout: every aggregate under AGGREGATES
    for i in range(60):
        like(ddb, name, i)
    ok("run")
    ok("backfill", "--stream-lag", "0")
    for i in range(60, 90):
        like(ddb, name, i)
    ok("run")
    old_rules = load_rules(rules_file)
    assert read(AggregateStore(ddb, name, old_rules)) == truth(ddb, name)
    assert {pk for pk, _ in aggregates(ddb, name)} == {"AGGREGATES"}

    # the rule files spread the aggregates: the handler refuses them until rebuilt
    rules_file.write_text(RULE_FILE.format(spread=f", aggregate_partitions: {N}"))
    spread_rules = load_rules(rules_file)
    refused = invoke("run")
    assert refused.exit_code == 1
    assert "changed definition under the same name" in refused.stderr
    assert "Traceback" not in refused.stderr
    for rule in RULES:  # request both generations before the handler starts with them
        assert f"generation 2 ({rule}@2) requested" in ok("rebuild", rule, "--wait", "0")
    rules_file.write_text(RULE_FILE.format(spread=""))  # the old handler still counts
    for i in range(90, 110):
        like(ddb, name, i)
    ok("run")
    at_deployment = truth(ddb, name)
    rules_file.write_text(RULE_FILE.format(spread=f", aggregate_partitions: {N}"))
    ok("run")  # the new handler takes both generations up
    states = Manifest(ddb, name, spread_rules.layout).load()
    assert {r: (states[f"{r}@2"].status, states[f"{r}@2"].partitions) for r in RULES} == {
        r: ("pending", N) for r in RULES
    }
    assert {r: states[r].partitions for r in RULES} == {r: 1 for r in RULES}
    for i in range(110, 130):
        like(ddb, name, i)
    ok("run")
    # until the switch, readers with the new rule files read the old generations, unspread
    reader = AggregateStore(ddb, name, spread_rules, generation_cache_seconds=0)
    assert read(reader) == at_deployment
    post = "POST#007"
    got = ok("query", "get", "likes_per_post", post)
    assert got.startswith("warning: rule 'likes_per_post' was changed since its aggregates")
    assert got.endswith(f"likes_per_post {post}: {at_deployment['likes_per_post'][post]}")

    # each rebuild backfills its spread generation while the application writes, and switches
    for rule in RULES:
        first = 130 + 40 * RULES.index(rule)
        writer = threading.Thread(
            target=lambda first=first: [like(ddb, name, i) for i in range(first, first + 40)]
        )
        writer.start()
        try:
            out = ok("rebuild", rule, "--stream-lag", "0")
        finally:
            writer.join()
        assert f"readers switched from generation 1 ({rule}) to generation 2 ({rule}@2)" in out
    ok("run")
    expected = truth(ddb, name)
    assert read(reader) == expected
    for post in ("POST#000", "POST#007", "POST#029"):  # one request per key, spread or not
        before = reader.requests
        got = reader.get("likes_per_post", post)
        assert reader.requests - before == 1
        assert got is not None and got.value == expected["likes_per_post"][post]
        assert ok("query", "get", "likes_per_post", post) == (
            f"likes_per_post {post}: {expected['likes_per_post'][post]}"
        )

    # the spread generations are where the design puts them, over all 8 values
    spread = [(pk, sk) for pk, sk in aggregates(ddb, name) if pk != "AGGREGATES"]
    for pk, sk in spread:
        home = "#".join(
            sk.split("#")[:3] if sk.startswith("likes_per_post@2#") else sk.split("#")[:2]
        )
        assert pk == f"AGGREGATES#{zlib.crc32(home.encode()) % N}", sk
    assert {pk for pk, _ in spread} == {f"AGGREGATES#{n}" for n in range(N)}
    assert {sk.partition("#")[0] for _, sk in spread} == {f"{r}@2" for r in RULES}

    # drop-rule removes the old generations: nothing left under AGGREGATES
    for rule in RULES:
        assert f"drop-rule {rule}: {rule} dropped" in ok("drop-rule", rule, "--yes")
    assert [p for p in aggregates(ddb, name) if p[0] == "AGGREGATES"] == []
    for i in range(250, 270):
        like(ddb, name, i)
    ok("run")
    assert read(reader) == truth(ddb, name)
    ddb.delete_table(TableName=name)
