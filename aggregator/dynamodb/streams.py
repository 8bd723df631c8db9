"""Reading a table's stream through the DynamoDB Streams API: its shards (parents first), an
iterator, and one ``GetRecords`` page at a time with an expired iterator renewed, its records in
the shape Lambda delivers them.

The one stream reader of the framework, shared by the local stream runner
(:mod:`aggregator.dev.runner`), the shard twin's read of the real stream
(:mod:`aggregator.dev.shards`) and the backfill (:mod:`aggregator.operations.backfill`), which
follows the stream for the items that change while it runs. Each caller keeps its own policy:
where a read starts and ends, what an empty page means, when to poll again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

from aggregator.core.exceptions import AggregatorError
from aggregator.dynamodb.client import RequestClient, requests_of
from aggregator.dynamodb.errors import AwsRequestError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

    StreamsClient = DynamoDBStreamsClient | RequestClient


__all__ = [
    "GET_RECORDS_LIMIT",
    "ITERATOR_RENEWALS",
    "RecordsPage",
    "StreamSource",
    "StreamTrimmedError",
    "TableStream",
    "get_records_page",
    "is_closed",
    "list_shards",
    "open_shard_ids",
    "parents_first",
    "ready_shards",
    "shard_iterator",
    "to_lambda_record",
]

GET_RECORDS_LIMIT = 1000
"""``GetRecords`` returns at most 1,000 records per call (DynamoDB Streams API reference)."""
_Shard = TypeVar("_Shard", bound=Mapping[str, Any])

ITERATOR_RENEWALS = 3
"""Expired iterators renewed for one page before the ``ExpiredIteratorException`` is let
through (a shard iterator is valid 15 minutes: DynamoDB Streams API reference,
``GetShardIterator``; a fresh one expiring again means something else is wrong)."""


@dataclass(frozen=True, slots=True)
class TableStream:
    """A table and its stream, with a client for each: what the operations that read both
    (:class:`~aggregator.operations.backfill.Backfill`,
    :class:`~aggregator.operations.rebuild.Rebuild`) take.

    Attributes
    ----------
    client, streams_client
        boto3 ``dynamodb`` and ``dynamodbstreams`` clients.
    table_name, stream_arn
        The table and its stream (``LatestStreamArn`` of ``DescribeTable``).
    """

    client: DynamoDBClient
    streams_client: DynamoDBStreamsClient
    table_name: str
    stream_arn: str

    @property
    def source(self) -> StreamSource:
        """The stream with its client, to read (:class:`StreamSource`)."""
        return StreamSource(self.streams_client, self.stream_arn)


class StreamTrimmedError(AggregatorError):
    """``GetRecords`` answered ``TrimmedDataAccessException``: the records asked for are past the
    stream's 24-hour retention (DynamoDB Streams API reference, ``GetRecords``; Developer Guide,
    "Change data capture for DynamoDB Streams").

    Attributes
    ----------
    shard_id
        The shard read.
    """

    def __init__(self, shard_id: str) -> None:
        super().__init__(
            f"shard {shard_id}: the stream no longer holds the records asked for "
            "(older than its 24-hour retention)"
        )
        self.shard_id = shard_id


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


def list_shards(streams_client: StreamsClient, stream_arn: str) -> list[dict[str, Any]]:
    """Every shard ``DescribeStream`` lists for the stream (following
    ``LastEvaluatedShardId``), as the API returns them (``ShardId``, ``ParentShardId``,
    ``SequenceNumberRange``)."""
    shards: list[dict[str, Any]] = []
    requests = requests_of(streams_client)
    start: str | None = None
    while True:
        kwargs: dict[str, Any] = {"StreamArn": stream_arn}
        if start:
            kwargs["ExclusiveStartShardId"] = start
        description = requests.send("describe_stream", **kwargs)["StreamDescription"]
        shards += [dict(shard) for shard in description.get("Shards", [])]
        start = description.get("LastEvaluatedShardId")
        if not start:
            return shards


def is_closed(shard: Mapping[str, Any]) -> bool:
    """Whether a shard as ``DescribeStream`` lists it is closed: its ``SequenceNumberRange`` has
    an ``EndingSequenceNumber`` (DynamoDB Streams API reference, "SequenceNumberRange")."""
    return "EndingSequenceNumber" in shard.get("SequenceNumberRange", {})


def open_shard_ids(streams_client: StreamsClient, stream_arn: str) -> list[str]:
    """The ids of the stream's open shards (:func:`list_shards`, less the closed ones)."""
    return [s["ShardId"] for s in list_shards(streams_client, stream_arn) if not is_closed(s)]


def parents_first(shards: Iterable[_Shard]) -> list[_Shard]:
    """The shards as ``DescribeStream`` lists them, each after its parent (``ParentShardId``)
    when the parent is listed; otherwise in listing order (a stable topological order).

    DynamoDB Streams: "process a parent shard before its child shards" to read an item's
    records in order (Developer Guide, "Change data capture for DynamoDB Streams").
    """
    listed = list(shards)
    by_id = {s["ShardId"]: s for s in listed}
    placed: set[str] = set()
    out: list[_Shard] = []

    def place(shard: _Shard) -> None:
        lineage = [shard]  # the shard and its listed ancestors not placed yet, child first
        seen = {shard["ShardId"]}
        parent = shard.get("ParentShardId")
        while parent in by_id and parent not in placed and parent not in seen:
            seen.add(parent)
            lineage.append(by_id[parent])
            parent = by_id[parent].get("ParentShardId")
        for each in reversed(lineage):
            if each["ShardId"] not in placed:
                placed.add(each["ShardId"])
                out.append(each)

    for shard in listed:
        place(shard)
    return out


def ready_shards(shards: Iterable[_Shard], done: Collection[str]) -> list[_Shard]:
    """The shards not ``done`` whose parent is ``done`` or not listed, parents first
    (:func:`parents_first`): what may be read now without reading an item's records out of
    order. ``shards`` as ``DescribeStream`` lists them (``ShardId``, ``ParentShardId``)."""
    ordered = parents_first(shards)
    listed = {s["ShardId"] for s in ordered}
    return [
        s
        for s in ordered
        if s["ShardId"] not in done
        and (
            s.get("ParentShardId") is None
            or s["ParentShardId"] not in listed
            or s["ParentShardId"] in done
        )
    ]


def shard_iterator(
    streams_client: StreamsClient,
    stream_arn: str,
    shard_id: str,
    *,
    after: str | None = None,
    latest: bool = False,
) -> str:
    """A ``GetShardIterator`` iterator of one shard: just after sequence number ``after``
    (``AFTER_SEQUENCE_NUMBER``), else at the shard's most recent record with ``latest``
    (``LATEST``: only records written from now on), else at its oldest (``TRIM_HORIZON``).

    Errors of the request raise :class:`~aggregator.dynamodb.errors.AwsRequestError` or
    :class:`~aggregator.dynamodb.errors.AwsConnectionError`.
    """
    kwargs: dict[str, Any] = {"StreamArn": stream_arn, "ShardId": shard_id}
    if after is not None:
        kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=after)
    else:
        kwargs["ShardIteratorType"] = "LATEST" if latest else "TRIM_HORIZON"
    iterator: str = requests_of(streams_client).send("get_shard_iterator", **kwargs)[
        "ShardIterator"
    ]
    return iterator


@dataclass(frozen=True, slots=True)
class RecordsPage:
    """One ``GetRecords`` page.

    Attributes
    ----------
    records
        The page's records, Lambda-shaped (:func:`to_lambda_record`), in sequence order; may be
        empty anywhere in a shard.
    next_iterator
        Where the next page starts; ``None`` once a closed shard has been read to its end.
    """

    records: list[dict[str, Any]]
    next_iterator: str | None


def get_records_page(
    streams_client: StreamsClient,
    stream_arn: str,
    shard_id: str,
    iterator: str | None,
    *,
    after: str | None = None,
    latest: bool = False,
    limit: int = GET_RECORDS_LIMIT,
) -> RecordsPage:
    """Read one ``GetRecords`` page of a shard.

    Parameters
    ----------
    iterator
        Where to read; ``None`` takes a new one (:func:`shard_iterator` with ``after`` and
        ``latest``).
    after
        The last sequence number the caller has read of the shard (``None``: none): an expired
        iterator (``ExpiredIteratorException``, 15 minutes after it was issued) is renewed just
        after it, or as ``latest`` says when ``None``, and the page read again, up to
        :data:`ITERATOR_RENEWALS` times.
    limit
        Records per page, 1 to :data:`GET_RECORDS_LIMIT`.

    Returns
    -------
    RecordsPage

    Raises
    ------
    StreamTrimmedError
        ``TrimmedDataAccessException``: the records are past the stream's retention.
    aggregator.dynamodb.errors.AwsRequestError
        Any other error of the requests (``code``: the AWS error code), and an iterator still
        expired after :data:`ITERATOR_RENEWALS` renewals.
    aggregator.dynamodb.errors.AwsConnectionError
        A request got no answer.
    """
    requests = requests_of(streams_client)
    renewals = 0
    while True:
        if iterator is None:
            iterator = shard_iterator(requests, stream_arn, shard_id, after=after, latest=latest)
        try:
            response = requests.send("get_records", ShardIterator=iterator, Limit=limit)
        except AwsRequestError as exc:
            code = exc.code
            if code == "TrimmedDataAccessException":
                raise StreamTrimmedError(shard_id) from exc
            if code != "ExpiredIteratorException" or renewals >= ITERATOR_RENEWALS:
                raise
            renewals += 1
            iterator = None
            continue
        records = [to_lambda_record(r, stream_arn) for r in response.get("Records", [])]
        return RecordsPage(records, response.get("NextShardIterator"))


@dataclass(frozen=True, slots=True)
class StreamSource:
    """One stream and a client that reads it: the stream reader of this module bound to that
    stream (what :class:`~aggregator.dev.runner.StreamRunner` reads, and
    :attr:`TableStream.source`).

    Attributes
    ----------
    client
        A boto3 ``dynamodbstreams`` client, or anything that answers its ``DescribeStream``,
        ``GetShardIterator`` and ``GetRecords`` calls (the shard twin's views).
    arn
        The stream's ARN.
    """

    client: StreamsClient
    arn: str
    requests: RequestClient = field(init=False, repr=False, compare=False)
    """The request client over :attr:`client`, made once (not once a page)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", requests_of(self.client))

    def shards(self) -> list[dict[str, Any]]:
        """Every shard of the stream (:func:`list_shards`)."""
        return list_shards(self.requests, self.arn)

    def page(self, shard_id: str, iterator: str | None, *, after: str | None = None) -> RecordsPage:
        """One ``GetRecords`` page of shard ``shard_id`` (:func:`get_records_page`, whose errors
        it raises)."""
        return get_records_page(self.requests, self.arn, shard_id, iterator, after=after)
