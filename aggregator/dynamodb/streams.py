"""Reading a table's stream through the DynamoDB Streams API: its shards, and its records in the
shape Lambda delivers them. Shared by the local stream runner (:mod:`aggregator.dev.runner`) and
the backfill (:mod:`aggregator.operations.backfill`), which follows the stream for the items
that change while it runs."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient


__all__ = ["GET_RECORDS_LIMIT", "is_closed", "list_shards", "open_shard_ids", "to_lambda_record"]

GET_RECORDS_LIMIT = 1000
"""``GetRecords`` returns at most 1,000 records per call (DynamoDB Streams API reference)."""


def _epoch_seconds(value: Any) -> Any:
    if isinstance(value, datetime):
        seconds = value.timestamp()
        return int(seconds) if seconds == int(seconds) else Decimal(str(seconds))
    return value


def to_lambda_record(record: Mapping[str, Any], stream_arn: str) -> dict[str, Any]:
    """Turn a Streams API record into the shape Lambda delivers.

    ``ApproximateCreationDateTime`` (a ``datetime`` from boto3) becomes epoch seconds and
    ``eventSourceARN`` is added; everything else is kept as is.
    """
    out = dict(record)
    dynamodb = dict(record["dynamodb"])
    if "ApproximateCreationDateTime" in dynamodb:
        dynamodb["ApproximateCreationDateTime"] = _epoch_seconds(
            dynamodb["ApproximateCreationDateTime"]
        )
    out["dynamodb"] = dynamodb
    out["eventSourceARN"] = stream_arn
    return out


def list_shards(streams_client: DynamoDBStreamsClient, stream_arn: str) -> list[dict[str, Any]]:
    """Every shard ``DescribeStream`` lists for the stream (following
    ``LastEvaluatedShardId``), as the API returns them (``ShardId``, ``ParentShardId``,
    ``SequenceNumberRange``)."""
    shards: list[dict[str, Any]] = []
    start: str | None = None
    while True:
        kwargs: dict[str, Any] = {"StreamArn": stream_arn}
        if start:
            kwargs["ExclusiveStartShardId"] = start
        description = streams_client.describe_stream(**kwargs)["StreamDescription"]
        shards += [dict(shard) for shard in description.get("Shards", [])]
        start = description.get("LastEvaluatedShardId")
        if not start:
            return shards


def is_closed(shard: Mapping[str, Any]) -> bool:
    """Whether a shard as ``DescribeStream`` lists it is closed: its ``SequenceNumberRange`` has
    an ``EndingSequenceNumber`` (DynamoDB Streams API reference, "SequenceNumberRange")."""
    return "EndingSequenceNumber" in shard.get("SequenceNumberRange", {})


def open_shard_ids(streams_client: DynamoDBStreamsClient, stream_arn: str) -> list[str]:
    """The ids of the stream's open shards (:func:`list_shards`, less the closed ones)."""
    return [s["ShardId"] for s in list_shards(streams_client, stream_arn) if not is_closed(s)]
