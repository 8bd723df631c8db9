"""Top-N per time bucket ("top customers this hour"): a rule with a ``window`` and a
``leaderboard`` ranks the keys of each bucket through the leaderboard index (or its top lists,
``leaderboard_store: list``), exact under inserts, modifications that move an amount, a
customer or a time to another bucket, deletes, negative amounts and values falling to zero,
with crashes and duplicate deliveries. The truth is summed from the table's own items,
independently of the engine."""

from __future__ import annotations

import random
from collections import defaultdict
from decimal import Decimal

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.core.rules import load_rules
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from aggregator.operations.rebuild import reindex_leaderboard
from aggregator.runtime.processor import create_processor
from tests.factories import ddb_json
from tests.integration.harness import SOAK, table_items

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

HOUR = 3600
START = 1_767_225_600  # 2026-01-01T00:00:00Z
CUSTOMERS = [f"c{i:02d}" for i in range(12)]

RULES = """version: 1
rules:
  - name: spend_per_customer
    match: {{type: order}}
    key: "{{customer}}"
    delta: {{attribute: amount}}
    leaderboard: true{extra}
    window: {{time: ts, unit: epoch_seconds, granularities: [hour, minute]}}
"""


def _truth(items: list[dict]) -> dict[int, dict[str, Decimal]]:
    """Per hour start, each customer's sum of amounts, from the order items themselves."""
    out: dict[int, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for item in items:
        if item.get("type", {}).get("S") != "order":
            continue
        hour = int(item["ts"]["N"]) // HOUR * HOUR
        out[hour][item["customer"]["S"]] += Decimal(item["amount"]["N"])
    return out


def _ranked(sums: dict[str, Decimal]) -> list[tuple[str, Decimal]]:
    return sorted(((k, v) for k, v in sums.items() if v), key=lambda kv: (-kv[1], kv[0]))


@pytest.mark.parametrize(
    "extra",
    [
        "",
        "\n    leaderboard_partitions: 3",
        "\n    write_shards: 2",
        "\n    leaderboard_store: list\n    leaderboard_partitions: 3\n    write_shards: 2",
    ],
    ids=["one", "spread", "shards", "lists"],
)
def test_top_n_per_hour_is_exact_under_moves_deletes_and_faults(
    ddb, streams, dynamodb_local, tmp_path, extra
):
    (tmp_path / "rules.yaml").write_text(RULES.format(extra=extra))
    rules = load_rules(tmp_path / "rules.yaml")
    name = f"orders-{abs(hash(extra)) % 10_000}"
    stream_arn = create_table(ddb, name, layout=rules.layout)
    client = FaultInjectingClient(ddb, layout=rules.layout)
    faults = RunnerFaults(client=client)
    window_mode = "partitions" in extra
    # In the window mode only a window's final invocation writes, and how many windows close
    # depends on the wall clock (windows follow the records' creation times): every delivery is
    # armed until three crashes have happened, each retry getting further than the last.
    faults.crash = lambda n: (
        2 + client.crashes if client.crashes < 3 and (window_mode or n % 2 == 1) else None
    )
    faults.duplicate = lambda n: n % 2 == 0
    runner = StreamRunner(
        # the spread variant in the window mode (Lambda's tumbling-window state), the others
        # exactly-once
        create_processor(rules, client, name, mode="window" if window_mode else "exactly-once"),
        streams,
        stream_arn,
        batch_size=20,
        faults=faults,
    )
    rng = random.Random(20)
    orders: dict[str, dict] = {}
    for round_ in range(4):
        for i in range(70 if SOAK else 35):  # writes per round
            choice = rng.random()
            if orders and choice < 0.25:  # move: amount, customer or time (maybe another hour)
                order_id = rng.choice(sorted(orders))
                item = dict(orders[order_id])
                field = rng.choice(["amount", "customer", "ts"])
                if field == "amount":
                    item["amount"] = rng.choice([0, rng.randint(-20, 80)])
                elif field == "customer":
                    item["customer"] = rng.choice(CUSTOMERS)
                else:
                    item["ts"] = START + rng.randrange(3 * HOUR)
                orders[order_id] = item
                ddb.put_item(TableName=name, Item=ddb_json(item))
            elif orders and choice < 0.35:
                order_id = rng.choice(sorted(orders))
                del orders[order_id]
                ddb.delete_item(TableName=name, Key=ddb_json({"pk": order_id, "sk": "ORDER"}))
            else:
                order_id = f"ORDER#{round_}-{i}"
                orders[order_id] = {
                    "pk": order_id,
                    "sk": "ORDER",
                    "type": "order",
                    "customer": rng.choice(CUSTOMERS),
                    "amount": rng.randint(-10, 100),
                    "ts": START + rng.randrange(3 * HOUR),
                }
                ddb.put_item(TableName=name, Item=ddb_json(orders[order_id]))
        assert runner.run().failures == 0
    assert client.crashes == 3  # crashes mid-batch happened

    truth = _truth(table_items(ddb, name))
    assert len(truth) == 3
    store = AggregateStore(ddb, name, rules)
    for hour, sums in truth.items():
        expected = _ranked(sums)
        before = store.requests
        everything = store.top("spend_per_customer", 100, granularity="hour", at=hour + 1800)
        partitions = 3 if "partitions" in extra else 1
        # the index, not the whole rule (spread: each partition, then the unspread name, which
        # serves a generation built before leaderboard_partitions changed)
        assert store.requests - before <= partitions + (partitions > 1)
        assert [(a.key, a.value) for a in everything] == expected  # keys at zero left out
        assert {(a.granularity, a.bucket) for a in everything} == {
            ("hour", f"2026-01-01T{(hour - START) // HOUR:02d}:00:00Z")
        }
        top3 = store.top("spend_per_customer", 3, granularity="hour", at=hour)
        assert [a.value for a in top3] == [v for _, v in expected[:3]]
    # a minute bucket ranks the orders of that minute only
    minute = next(int(o["ts"]) // 60 * 60 for o in orders.values())
    per_minute: dict[str, Decimal] = defaultdict(Decimal)
    for o in orders.values():
        if int(o["ts"]) // 60 * 60 == minute:
            per_minute[o["customer"]] += Decimal(o["amount"])
    got = store.top("spend_per_customer", 100, granularity="minute", at=minute + 59)
    assert [(a.key, a.value) for a in got if a.value] == _ranked(per_minute)
    # an hour with no orders has no entries
    assert store.top("spend_per_customer", 5, granularity="hour", at=START + 5 * HOUR) == []

    if extra == "":  # the CLI: the bucket named, JSON, and mistakes in one line
        common = ["--table", name, "--endpoint-url", dynamodb_local.endpoint_url]
        common += ["-d", str(tmp_path / "rules.yaml")]
        cli = CliRunner()
        top = ["query", "top", "spend_per_customer", *common]
        result = cli.invoke(
            main, [*top, "-n", "2", "--granularity", "hour", "--at", "2026-01-01T01:30:00Z"]
        )
        assert result.exit_code == 0, result.output
        assert "top 2: spend_per_customer (hour bucket 2026-01-01T01:00:00Z)" in result.stdout
        assert _ranked(truth[START + HOUR])[0][0] in result.stdout
        result = cli.invoke(
            main, [*top, "--granularity", "hour", "--json", "--at", str(START + 2 * HOUR)]
        )
        assert result.exit_code == 0, result.output
        assert '"bucket": "2026-01-01T02:00:00Z"' in result.stdout
        for args, message in (
            ([], "keeps buckets of hour, minute: add --granularity hour or --granularity minute"),
            (["--granularity", "day"], "has no 'day' buckets (it keeps hour, minute)"),
            (["--granularity", "hour", "--at", "noon"], "bad time"),
        ):
            result = cli.invoke(main, [*top, *args])
            assert result.exit_code == 1, result.output
            assert message in result.stderr and len(result.stderr.splitlines()) == 1
        # rebuild's reindexing (a leaderboard turned on for existing buckets) files each bucket
        # under its own index partition: strip the index attribute, reindex, rank again
        lb = rules.layout.leaderboard_attribute
        for item in table_items(ddb, name):
            if lb in item:
                key = {k: item[k] for k in ("pk", "sk")}
                ddb.update_item(TableName=name, Key=key, UpdateExpression=f"REMOVE {lb}")
        assert store.top("spend_per_customer", 5, granularity="hour", at=START) == []
        stored = store.storage_name("spend_per_customer")
        rule = rules.get("spend_per_customer")
        assert reindex_leaderboard(ddb, name, rules, rule, stored) > 0
        for hour, sums in truth.items():
            got = store.top("spend_per_customer", 100, granularity="hour", at=hour)
            assert [(a.key, a.value) for a in got if a.value] == _ranked(sums)
    ddb.delete_table(TableName=name)
