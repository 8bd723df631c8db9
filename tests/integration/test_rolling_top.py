"""Rolling top-N on DynamoDB Local: ``AggregateStore.rolling_top`` (``query top --last``) over a
windowed leaderboard rule kept in top lists, against a plain sort of the keys' sums computed from
the table's own items, after moves between players and hours, deletes, negative points, ties and
buckets past their retention. The lists keep 3 keys, so their floors rise and the merge must read
keys back or fall back to every aggregate."""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from decimal import Decimal

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import load_rules
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from tests.integration.harness import delete, final_items, pipeline, put

pytestmark = pytest.mark.integration

HOUR = 3600
RULES_TEXT = """version: 1
rules:
  - name: points
    match: {type: score}
    key: "{player}"
    delta: {attribute: points}
    leaderboard: true
    leaderboard_store: list
    window: {time: ts, unit: epoch_seconds, granularities: [hour], retention: 5h}
"""
PLAYERS = [f"p{i}" for i in range(9)]


def test_rolling_top_is_a_plain_sort_of_the_sums(
    ddb, streams, dynamodb_local, tmp_path, monkeypatch
) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES_TEXT, encoding="utf-8")
    rules = load_rules(path)
    name = f"rolling-{random.randrange(10**9)}"
    arn = create_table(ddb, name)
    rng = random.Random(34)
    now = (int(time.time()) // HOUR) * HOUR + 1200
    first = now - 1200 - 5 * HOUR  # six hours, the last one running
    items: dict[str, dict] = {}
    for i in range(140):
        sk = f"S#{i}"
        if items and rng.random() < 0.25:  # move or delete an earlier score
            old = rng.choice(sorted(items))
            if rng.random() < 0.4:
                delete(ddb, name, "SCORE", old)
                del items[old]
                continue
            sk = old
        item = {
            "pk": "SCORE",
            "sk": sk,
            "type": "score",
            "player": rng.choice(PLAYERS),
            "ts": first + rng.randrange(6 * HOUR - 2400),
            "points": rng.choice([1, 2, 3, 5, -2]),
        }
        put(ddb, name, item)
        items[sk] = item
    built = pipeline(ddb, streams, name, arn, rules=rules, batch_size=20)
    built.runner.processor.top_lists.keep = 3  # small lists: floors rise
    built.runner.run()
    store = AggregateStore(ddb, name, rules)

    stored = [i for i in final_items(ddb, name) if i.get("type") == "score"]
    paths = defaultdict(int)
    for last_hours, n, at in [(1, 3, now), (2, 2, now), (3, 5, now), (6, 4, now), (6, 9, now)]:
        at_ = at
        result = store.rolling_top("points", n, last=last_hours * HOUR, now=at_)
        lo, hi = result.start, result.end
        sums: dict[str, Decimal] = defaultdict(Decimal)
        for item in stored:
            start = int(item["ts"]) // HOUR * HOUR
            if lo <= start < hi and start + HOUR + 5 * HOUR > at_:
                sums[item["player"]] += Decimal(item["points"])
        expected = sorted(((v, k) for k, v in sums.items() if v), key=lambda e: (-e[0], e[1]))
        assert [(a.value, a.key) for a in result.aggregates] == expected[:n], (last_hours, n)
        # AggregateStore.top(..., last=) is the same answer
        same = store.top("points", n, last=last_hours * HOUR, now=at_)
        assert [(a.value, a.key) for a in same] == expected[:n]
        assert result.complete == (lo + HOUR + 5 * HOUR > at_)  # the oldest bucket still live
        paths[result.path] += 1
        print(  # pytest -s: what each answer cost, by path
            f"\nrolling top {n} of {last_hours} h: {result.path}, {result.requests} requests, "
            f"{result.items_read} items, {result.read_units} RCU"
        )
    assert paths["lists"] >= 1  # the lists answered some

    # the path through every aggregate costs the pages of the rule's aggregates, as DynamoDB
    # reports them for the same Query read here (it was left out of the cost once)
    from aggregator.dynamodb.query import rolling

    monkeypatch.setattr(rolling, "_from_lists", lambda *args, **kwargs: None)
    every = store.rolling_top("points", 3, last=3 * HOUR, now=now)
    assert every.path == "aggregates"
    units, pages, start = Decimal(0), 0, None
    while True:
        page = ddb.query(
            TableName=name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :rule)",
            ExpressionAttributeValues={
                ":pk": {"S": rules.layout.aggregates_pk},
                ":rule": {"S": "points#"},
            },
            ConsistentRead=True,
            ReturnConsumedCapacity="TOTAL",
            **({"ExclusiveStartKey": start} if start else {}),
        )
        units += Decimal(str(page["ConsumedCapacity"]["CapacityUnits"]))
        pages += 1
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    assert (every.requests, every.read_units) == (pages, units) and units >= 1
    monkeypatch.undo()

    # later: the first hours are past their 5 h retention and left out, flagged
    later = now + 2 * HOUR
    result = store.rolling_top("points", 4, end=now, last=6 * HOUR, now=later)
    assert not result.complete
    sums = defaultdict(Decimal)
    for item in stored:
        start = int(item["ts"]) // HOUR * HOUR
        if result.start <= start < result.end and start + 6 * HOUR > later:
            sums[item["player"]] += Decimal(item["points"])
    expected = sorted(((v, k) for k, v in sums.items() if v), key=lambda e: (-e[0], e[1]))
    assert [(a.value, a.key) for a in result.aggregates] == expected[:4]

    # the command prints the path and the cost; --json has the keys and sums
    runner = CliRunner()
    args = ["query", "top", "points", "-n", "3", "--last", "3h", "--now", str(now)]
    args += ["-d", str(path), "--table", name, "--endpoint-url", dynamodb_local.endpoint_url]
    shown = runner.invoke(main, args)
    assert shown.exit_code == 0, shown.output
    assert "cost:" in shown.output and (
        "top lists" in shown.output or "every aggregate" in shown.output
    )
    data = json.loads(runner.invoke(main, [*args, "--json"]).output)
    direct = store.rolling_top("points", 3, last=3 * HOUR, now=now)
    assert [(Decimal(a["value"]), a["key"]) for a in data["aggregates"]] == [
        (a.value, a.key) for a in direct.aggregates
    ]
    assert data["path"] in ("lists", "aggregates")
    both = runner.invoke(main, [*args, "--at", str(now)])
    assert both.exit_code != 0 and "not both" in both.output and "Traceback" not in both.output
