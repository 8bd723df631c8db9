"""``python -m bench.kinds``: what each aggregate kind costs to write and to read, measured on
DynamoDB Local (modelled capacity: DynamoDB Local enforces and reports none).

Writes: one day of the 2013 New York City departures (``definitions/flights.yaml``'s replay),
then each carrier's max-delay flight deleted and its min-delay flight modified, through the
stream in the exactly-once mode (batches of 100), once per kind with one rule keyed by carrier
over ``dep_delay``; modelled WCU per 1,000 source records, and the value items given a TTL
because their count fell to zero.

Reads: ``get`` of every carrier (``min``/``max``: Query pages to the first non-zero value item),
and ``percentiles`` of one key holding 1,000 and 1,000,000 values (log-normal delays, written
through the engine and the exactly-once writer in batches of 10,000), with requests, items read
and modelled RCU.

    .venv/bin/python -m bench.kinds              # about two minutes on 2 cores
    .venv/bin/python -m bench.kinds --large 100000
"""

from __future__ import annotations

import argparse
import random
import uuid
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from aggregator.core.engine import Engine
from aggregator.core.records import StreamRecord
from aggregator.core.rules import RuleSet, rule
from aggregator.dev.demo import replay_flights, write_steps
from aggregator.dev.flights import ReplayStep, read_flights
from aggregator.dev.local import DynamoDBLocal
from aggregator.dev.runner import StreamRunner
from aggregator.dynamodb.modes import make_writer
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.table import create_table
from aggregator.runtime.processor import create_processor

ROOT = Path(__file__).resolve().parents[1]
DAY = date(2013, 1, 1)
KINDS: dict[str, Any] = {
    "sum": "sum",
    "mean": "mean",
    "min": "min",
    "max": "max",
    "distribution": {"name": "distribution", "relative_accuracy": "0.01"},
}


@dataclass
class WriteCost:
    kind: str
    records: int
    wcu: int
    emptied: int
    value_items: int


def kind_rule(kind: str) -> RuleSet:
    return RuleSet.of(
        rule(
            f"delay_{kind}",
            match={"status": "departed"},
            key="{carrier}",
            delta={"attribute": "dep_delay"},
            kind=KINDS[kind],
        )
    )


def write_cost(server: DynamoDBLocal, kind: str) -> tuple[WriteCost, AggregateStore]:
    ddb, streams = server.client("dynamodb"), server.client("dynamodbstreams")
    rules = kind_rule(kind)
    name = f"kinds-{kind}-{uuid.uuid4().hex[:6]}"
    arn = create_table(ddb, name, layout=rules.layout)
    flights = read_flights(start=DAY, end=DAY)
    replay_flights(ddb, name, flights, layout=rules.layout)
    departed = [f for f in flights if f.dep_delay is not None and f.row % 50 != 7]
    by_carrier: dict[str, list[Any]] = {}
    for f in departed:
        by_carrier.setdefault(f.carrier, []).append(f)
    deleted, modified = [], []
    for group in by_carrier.values():
        if len(group) > 1:
            worst = max(group, key=lambda f: (f.dep_delay, -f.row))
            best = min((f for f in group if f is not worst), key=lambda f: (f.dep_delay, f.row))
            deleted.append(worst.key(rules.layout))
            modified.append(
                {**best.item("departed", rules.layout), "dep_delay": best.dep_delay + 45}
            )
    write_steps(
        ddb,
        name,
        [
            ReplayStep(DAY, "delete max", "delete", tuple(deleted)),
            ReplayStep(DAY, "modify min", "put", tuple(modified)),
        ],
    )
    processor = create_processor(rules, ddb, name, mode="exactly-once")
    stats = StreamRunner(processor, streams, arn, batch_size=100).run()
    records = stats.records - stats.self_writes
    items = ddb.query(
        TableName=name,
        KeyConditionExpression="pk = :a",
        ExpressionAttributeValues={":a": {"S": "AGGREGATES"}},
        Select="COUNT",
    )["Count"]
    return (
        WriteCost(kind, records, stats.write.modelled_wcu, stats.write.emptied_values, items),
        AggregateStore(ddb, name, rules),
    )


def percentile_read(server: DynamoDBLocal, values: int) -> tuple[int, int, int, int]:
    """Write ``values`` log-normal delays under one key of a distribution rule, then read its
    p50/p90/p99: ``(bins, requests, items read, RCU)``."""
    ddb = server.client("dynamodb")
    rules = kind_rule("distribution")
    name = f"kinds-read-{uuid.uuid4().hex[:6]}"
    create_table(ddb, name, layout=rules.layout)
    engine = Engine(rules)
    writer = make_writer("exactly-once", ddb, name, layout=rules.layout)
    rng = random.Random(7)
    chunk = 10_000
    for start in range(0, values, chunk):
        records = []
        for i in range(start, min(values, start + chunk)):
            delay = Decimal(str(round(rng.lognormvariate(2.5, 1.2), 1)))
            image = {
                "pk": {"S": f"F#{i}"},
                "sk": {"S": "x"},
                "status": {"S": "departed"},
                "carrier": {"S": "UA"},
                "dep_delay": {"N": str(delay)},
            }
            records.append(
                StreamRecord(
                    {
                        "eventName": "INSERT",
                        "dynamodb": {
                            "SequenceNumber": str(10**6 + i),
                            "Keys": {"pk": image["pk"], "sk": image["sk"]},
                            "NewImage": image,
                        },
                    }
                )
            )
        batch = engine.process(records)
        assert not batch.failures, batch.failures[0].reason
        result = writer.apply(batch, shard_id="shardId-bench")
        assert result.retry_from is None, result.errors[:1]
    writer.close()
    store = AggregateStore(ddb, name, rules)
    got = store.percentiles("delay_distribution", "UA", [50, 90, 99])
    assert got.count == values, (got.count, values)
    return got.items_read, got.requests, got.items_read, got.read_units


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=1_000_000, help="values of the large key")
    args = parser.parse_args()
    server = DynamoDBLocal(install_dir=ROOT / ".cache" / "dynamodb-local")
    server.start()
    try:
        base = None
        print("kind          records  WCU/1k records  x sum   value items  emptied  gets")
        for kind in KINDS:
            cost, store = write_cost(server, kind)
            per_k = 1000 * cost.wcu / cost.records
            base = per_k if base is None else base
            carriers = [a.key for a in store.list(f"delay_{kind}")]
            before = store.requests
            for carrier in carriers:
                store.get(f"delay_{kind}", carrier)
            per_get = (store.requests - before) / len(carriers)
            print(
                f"{kind:<13} {cost.records:>7}  {per_k:>14.0f}  {per_k / base:>5.2f}  "
                f"{cost.value_items:>11}  {cost.emptied:>7}  {per_get:.2f} request(s) per get"
            )
        for values in (1_000, args.large):
            bins, requests, items, rcu = percentile_read(server, values)
            print(
                f"percentiles of a key with {values:,} values: {bins} bins, {requests} "
                f"Query request(s), {items} items, {rcu} RCU"
            )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
