"""``python -m bench.reference_counts``: what a like costs when the handler keeps the tally on the
post (rule ``like_tally`` of ``definitions/reference_counts.yaml``), against the article's
transaction (``TransactWriteItems`` of the like and ``ADD likeTally``: 2 items at 2 WCU each,
about 4 WCU per like; Developer Guide, "Amazon DynamoDB Transactions: capacity management").

On DynamoDB Local, a PK/SK table made with plain boto3 holds ``--posts`` posts (a ``META`` item
each, with a body of ``--body-bytes``); ``--likes`` likes land on them with a Zipf-like skew
(post ``i`` drawn with weight ``1/(i+1)``), each a conditional ``PutItem``, then a fifth of them
are taken back (conditional ``DeleteItem``), then the stream is run in the exactly-once mode in
batches of 100. Every like and unlike counts as a like event.

WCU per like event = (the application's writes + everything the aggregator writes) / events: the
application's as DynamoDB Local reports them (sized by item), the aggregator's as its modelled
WCU (reported for writes that succeeded, sized from the item for those whose condition failed,
which DynamoDB charges too). The aggregator's reads (two ``GetItem`` per target item's first
write of a shard: its map and the ledger's checkpoint) are listed apart, in RCU. The run checks
each post's ``likeTally`` against its number of ``LIKE#`` items.

    .venv/bin/python -m bench.reference_counts          # about 30 s on 2 cores
"""

from __future__ import annotations

import argparse
import math
import random
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

from aggregator.core.rules import RuleSet, load_rules
from aggregator.dev.local import DynamoDBLocal
from aggregator.dev.runner import StreamRunner
from aggregator.runtime.processor import create_processor
from tests.integration.harness import article_table

ROOT = Path(__file__).resolve().parents[1]
TRANSACTION_WCU_PER_LIKE = Decimal(4)
"""The article's like: ``TransactWriteItems`` of two items under 1 KB, 2 WCU each."""
GOAL_WCU_PER_LIKE = Decimal("2.2")


class ReadCounter:
    """Counts the RCU of the aggregator's reads (``GetItem``), passing every call through."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.read_units = Decimal(0)
        self.gets = 0

    def get_item(self, **request: Any) -> Any:
        request.setdefault("ReturnConsumedCapacity", "TOTAL")
        response = self._client.get_item(**request)
        self.gets += 1
        units = (response.get("ConsumedCapacity") or {}).get("CapacityUnits", 0)
        self.read_units += Decimal(str(units))
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def like_tally_rules() -> RuleSet:
    rules = load_rules(
        [ROOT / "definitions" / "reference_counts.yaml", ROOT / "definitions/layouts/PK_SK.yaml"]
    )
    return RuleSet.of(rules.get("like_tally"), layout=rules.layout)


def run(server: DynamoDBLocal, posts: int, likes: int, body_bytes: int) -> dict[str, Any]:
    ddb, streams = server.client("dynamodb"), server.client("dynamodbstreams")
    rules = like_tally_rules()
    name = f"likes-{uuid.uuid4().hex[:6]}"
    arn = article_table(ddb, name)
    assert arn is not None  # made with a stream
    for p in range(posts):
        item = {"PK": {"S": f"POST#{p:05d}"}, "SK": {"S": "META"}, "body": {"S": "x" * body_bytes}}
        ddb.put_item(TableName=name, Item=item)
    rng = random.Random(2)
    weights = [1 / (i + 1) for i in range(posts)]
    app_wcu = Decimal(0)
    liked: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    user = 0
    while len(liked) < likes:
        post = rng.choices(range(posts), weights)[0]
        user += 1
        response = ddb.put_item(
            TableName=name,
            Item={
                "PK": {"S": f"POST#{post:05d}"},
                "SK": {"S": f"LIKE#USER#{user:07d}"},
                "likedAt": {"N": "1750636800"},
            },
            ConditionExpression="attribute_not_exists(SK)",
            ReturnConsumedCapacity="TOTAL",
        )
        app_wcu += Decimal(str(response["ConsumedCapacity"]["CapacityUnits"]))
        liked.append((post, user))
        seen.add((post, user))
    for post, user in rng.sample(liked, likes // 5):
        response = ddb.delete_item(
            TableName=name,
            Key={"PK": {"S": f"POST#{post:05d}"}, "SK": {"S": f"LIKE#USER#{user:07d}"}},
            ConditionExpression="attribute_exists(SK)",
            ReturnConsumedCapacity="TOTAL",
        )
        app_wcu += Decimal(str(response["ConsumedCapacity"]["CapacityUnits"]))
        seen.discard((post, user))
    events = likes + likes // 5
    client = ReadCounter(ddb)
    processor = create_processor(rules, client, name, mode="exactly-once")
    stats = StreamRunner(processor, streams, arn, batch_size=100).run()
    truth = Counter(f"POST#{p:05d}" for p, _ in seen)
    exact = True
    for p in range(posts):
        key = f"POST#{p:05d}"
        item = ddb.get_item(
            TableName=name, Key={"PK": {"S": key}, "SK": {"S": "META"}}, ConsistentRead=True
        )["Item"]
        exact &= Decimal(item.get("likeTally", {"N": "0"})["N"]) == truth[key]
    ddb.delete_table(TableName=name)
    aggregator_wcu = Decimal(stats.write.modelled_wcu)
    return {
        "events": events,
        "app_wcu": app_wcu,
        "aggregator_wcu": aggregator_wcu,
        "per_like": (app_wcu + aggregator_wcu) / events,
        "target_writes": stats.write.target_writes,
        "batches": stats.batches,
        "gets": client.gets,
        "read_units": client.read_units,
        "exact": exact,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=200)
    parser.add_argument("--likes", type=int, default=5000)
    parser.add_argument("--body-bytes", type=int, default=200)
    args = parser.parse_args()
    server = DynamoDBLocal(install_dir=ROOT / ".cache" / "dynamodb-local")
    server.start()
    try:
        r = run(server, args.posts, args.likes, args.body_bytes)
    finally:
        server.stop()
    per_like = r["per_like"]
    print(
        f"reference counts: {r['events']:,} like events on {args.posts} posts: application "
        f"{r['app_wcu']:.0f} WCU, aggregator {r['aggregator_wcu']:.0f} WCU "
        f"({r['target_writes']:,} updates of META items in {r['batches']} batches), "
        f"{r['gets']} GetItem ({math.ceil(r['read_units'])} RCU) for first writes"
    )
    verdict = "met" if per_like <= GOAL_WCU_PER_LIKE else "MISSED"
    print(
        f"reference counts: {per_like:.2f} WCU per like "
        f"({per_like / TRANSACTION_WCU_PER_LIKE:.2f} of the article's transaction, "
        f"{TRANSACTION_WCU_PER_LIKE} WCU); goal {GOAL_WCU_PER_LIKE} {verdict}; "
        f"exact {'yes' if r['exact'] else 'no'}"
    )
    return 0 if r["exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
