"""Builders for Lambda-format DynamoDB stream records used across tests."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeSerializer

_SER = TypeSerializer()
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026-01-01T00:00:00.000"
TTL_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


def ddb_json(item: dict[str, Any] | None) -> dict[str, Any] | None:
    """Python values (numbers as int/str->Decimal) to DynamoDB JSON."""
    if item is None:
        return None
    out = {}
    for k, v in item.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            v = Decimal(str(v))
        out[k] = _SER.serialize(v)
    return out


def stream_record(
    event: str,
    old: dict[str, Any] | None = None,
    new: dict[str, Any] | None = None,
    *,
    seq: int | str = 100,
    ttl: bool = False,
    keys: tuple[str, ...] = ("pk", "sk"),
    created: int = 1_700_000_000,
) -> dict[str, Any]:
    """A record as Lambda delivers it (epoch-seconds ApproximateCreationDateTime)."""
    image = new if new is not None else old
    assert image is not None
    dynamodb: dict[str, Any] = {
        "ApproximateCreationDateTime": created,
        "Keys": ddb_json({k: image[k] for k in keys if k in image}),
        "SequenceNumber": str(seq).zfill(21),
        "SizeBytes": 100,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if new is not None:
        dynamodb["NewImage"] = ddb_json(new)
    if old is not None:
        dynamodb["OldImage"] = ddb_json(old)
    record: dict[str, Any] = {
        "eventID": f"ev-{seq}",
        "eventName": event,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": STREAM_ARN,
        "dynamodb": dynamodb,
    }
    if ttl:
        record["userIdentity"] = dict(TTL_IDENTITY)
    return record


class AggregatesStub:
    """A DynamoDB client stand-in over a dict of aggregate sort key -> item attributes (DynamoDB
    JSON): ``get_item`` by sort key, ``query`` by sort-key prefix (``:prefix``) or ``BETWEEN``
    range (``:low``/``:high``). ``requests`` records ``(operation, arguments)``; reads of the
    rule manifest (the serving generations, ``generations`` in ``items["manifest"]`` if given)
    are counted in ``manifest_reads`` instead."""

    def __init__(self, items: dict[str, dict[str, Any]]) -> None:
        self.items = items
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.manifest_reads = 0

    def describe_table(self, **kwargs: Any) -> dict[str, Any]:
        """A table keyed pk/sk (S), as the default layout has it (the CLI checks the keys)."""
        keys = [("pk", "HASH"), ("sk", "RANGE")]
        return {
            "Table": {
                "TableName": kwargs["TableName"],
                "KeySchema": [{"AttributeName": n, "KeyType": t} for n, t in keys],
                "AttributeDefinitions": [
                    {"AttributeName": n, "AttributeType": "S"} for n, _ in keys
                ],
            }
        }

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        if kwargs["Key"]["sk"]["S"] == "manifest":
            self.manifest_reads += 1
            return {"Item": self.items["manifest"]} if "manifest" in self.items else {}
        self.requests.append(("get_item", kwargs))
        sk = kwargs["Key"]["sk"]["S"]
        return {"Item": {"sk": {"S": sk}, **self.items[sk]}} if sk in self.items else {}

    def query(self, **kwargs: Any) -> dict[str, Any]:
        """Items in ascending key order; a page of ``Limit`` items (after ``ExclusiveStartKey``)
        with ``LastEvaluatedKey`` when more follow."""
        self.requests.append(("query", kwargs))
        values = kwargs["ExpressionAttributeValues"]
        if ":low" in values:
            low, high = values[":low"]["S"], values[":high"]["S"]
            keys = sorted(k for k in self.items if low <= k <= high)
        else:
            keys = sorted(k for k in self.items if k.startswith(values[":prefix"]["S"]))
        if "ExclusiveStartKey" in kwargs:
            after = kwargs["ExclusiveStartKey"]["sk"]["S"]
            keys = [k for k in keys if k > after]
        response: dict[str, Any] = {}
        limit = kwargs.get("Limit")
        if limit is not None and len(keys) > limit:
            keys = keys[:limit]
            response["LastEvaluatedKey"] = {"pk": {"S": "AGGREGATES"}, "sk": {"S": keys[-1]}}
        response["Items"] = [{"sk": {"S": k}, **self.items[k]} for k in keys]
        return response


def write_facts(delta: Any) -> tuple[Any, ...]:
    """The write facts a coalesced delta carries, read field by field (not through the
    code's own ``CoalescedDelta.spec``): leaderboard, index partitions, write shards, auto
    shards, keeps count, per value, target attribute."""
    return (
        delta.leaderboard,
        delta.index_partitions,
        delta.write_shards,
        delta.auto_shards,
        delta.keeps_count,
        delta.per_value,
        delta.target_attribute,
    )
