"""Reading one of the framework's item collections (aggregates, dead letters), whatever the
table's key schema.

On a table with a sort key a collection is one partition: a strongly consistent ``Query`` on
``pk = <reserved partition>`` with a condition on the sort key, 1 MB per page (DynamoDB
Developer Guide, "Query": a page holds up to 1 MB of items).

On a table with only a partition key (:mod:`aggregator.core.layout`) the same condition applies
to the full key text ``"<reserved partition>#<sort key text>"`` through the keys-only collection
index, and the items are then read by ``BatchGetItem`` (strongly consistent, at most 100 keys a
request; DynamoDB API Reference, "BatchGetItem"), retrying ``UnprocessedKeys``. A GSI read is
eventually consistent, so an item created a moment ago may be missing from the listing; the
values of the items listed are current.

Requests per page: 1 ``Query`` with a sort key; without one, 1 ``Query`` of the index (a page
of keys, up to 1 MB) plus ``ceil(keys / 100)`` ``BatchGetItem`` (more if DynamoDB leaves keys
unprocessed).

A rule whose aggregates spread over several partition key values
(:meth:`~aggregator.core.layout.TableLayout.aggregate_partition`) is listed by
:func:`query_collections`: one such read per value, merged in sort key order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from aggregator.core.layout import TableLayout
from aggregator.dynamodb.batch import (
    BATCH_GET_KEYS,
    UnprocessedKeysError,
    WhenUnprocessed,
    batch_get,
    client_call,
    key_ident,
)

__all__ = [
    "BATCH_GET_KEYS",
    "CollectionPage",
    "UnprocessedKeysError",
    "batch_get_items",
    "client_call",
    "query_collection",
    "query_collections",
]

MERGED_PAGE_ITEMS = 1000
"""Items per page that :func:`query_collections` yields when it merges several partitions."""

CollectionPage = list[dict[str, Any]]
"""One page of items (DynamoDB JSON), in key order."""


def query_collection(
    call: Callable[..., dict[str, Any]],
    table_name: str,
    layout: TableLayout,
    partition: str,
    *,
    begins_with: str | None = None,
    between: tuple[str, str] | None = None,
    descending: bool = False,
    page_items: int | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Iterator[CollectionPage]:
    """Pages of the items under the reserved ``partition`` whose sort key text begins with
    ``begins_with`` or lies in ``between`` (inclusive), or all of them.

    Parameters
    ----------
    call
        ``call(operation, **request)`` sends one request (``"query"`` or ``"batch_get_item"``,
        the request complete) and returns the response: a boto3 client's method by name, or a
        wrapper that counts requests and translates errors.
    table_name
        The table.
    layout
        The table's layout.
    partition
        A reserved partition key value (``layout.aggregates_pk``, ``layout.dead_letters_pk``).
    descending
        Read in descending key order (``ScanIndexForward=False``).
    page_items
        At most this many items per page (``Limit``; default: 1 MB pages), for a reader that
        may stop early.

    Yields
    ------
    list
        Items in DynamoDB JSON, in key order, one list per page read.

    Raises
    ------
    Whatever ``call`` raises; :class:`~aggregator.dynamodb.batch.UnprocessedKeysError` (a
    ``RuntimeError``) when ``BatchGetItem`` leaves keys unprocessed eight times in a row.
    """
    if begins_with is not None and between is not None:
        raise ValueError("give begins_with or between, not both")
    if layout.has_sort_key:
        key_name, prefix = layout.sort_key, ""
        condition = "#pk = :pk"
        names = {"#pk": layout.partition_key}
        values: dict[str, Any] = {":pk": {"S": partition}}
        index: str | None = None
    else:
        key_name, prefix = layout.partition_key, f"{partition}#"
        condition = "#pk = :pk"
        names = {"#pk": layout.collection_attribute}
        values = {":pk": {"S": partition}}
        index = layout.collection_index
        if begins_with is None and between is None:
            begins_with = ""  # every key of the collection starts with "<partition>#"
    if begins_with is not None:
        condition += " AND begins_with(#sk, :prefix)"
        names["#sk"] = str(key_name)
        values[":prefix"] = {"S": prefix + begins_with}
    elif between is not None:
        condition += " AND #sk BETWEEN :low AND :high"
        names["#sk"] = str(key_name)
        values[":low"] = {"S": prefix + between[0]}
        values[":high"] = {"S": prefix + between[1]}
    start: dict[str, Any] | None = None
    while True:
        kwargs: dict[str, Any] = {
            "TableName": table_name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            # what the page cost, for a sender that counts read units (a reader's cost lines)
            "ReturnConsumedCapacity": "TOTAL",
        }
        if index is None:
            kwargs["ConsistentRead"] = True  # GSIs do not support strongly consistent reads
        else:
            kwargs["IndexName"] = index
        if descending:
            kwargs["ScanIndexForward"] = False
        if page_items is not None:
            kwargs["Limit"] = page_items
        if start:
            kwargs["ExclusiveStartKey"] = start
        response = call("query", **kwargs)
        items: list[dict[str, Any]] = response.get("Items", [])
        if index is not None:
            items = _fetch(call, table_name, layout, items, sleep)
        yield items
        start = response.get("LastEvaluatedKey")
        if not start:
            return


def query_collections(
    call: Callable[..., dict[str, Any]],
    table_name: str,
    layout: TableLayout,
    partitions: Sequence[str],
    *,
    begins_with: str | None = None,
    between: tuple[str, str] | None = None,
    descending: bool = False,
    page_items: int | None = None,
) -> Iterator[CollectionPage]:
    """Pages of the items under every one of ``partitions`` (the spread values of a rule's
    aggregates, :meth:`~aggregator.core.layout.TableLayout.aggregate_partitions_of`) whose sort
    key text begins with ``begins_with`` or lies in ``between``, in sort key order across them
    (descending with ``descending``), as if they were one collection.

    With one partition, exactly :func:`query_collection`'s pages. With more, each partition is
    read by :func:`query_collection` (at least one ``Query`` each, the first pages one after
    another as the merge starts: up to a 1 MB page of each in memory) and the items are merged
    by sort key text (Python compares ``str`` by code point, the order of their UTF-8 bytes,
    which is DynamoDB's order of string keys) into pages of :data:`MERGED_PAGE_ITEMS`.

    Raises
    ------
    As :func:`query_collection`.
    """
    options: dict[str, Any] = {
        "begins_with": begins_with,
        "between": between,
        "descending": descending,
        "page_items": page_items,
    }
    if len(partitions) == 1:
        yield from query_collection(call, table_name, layout, partitions[0], **options)
        return

    def items(partition: str) -> Iterator[dict[str, Any]]:
        for page in query_collection(call, table_name, layout, partition, **options):
            yield from page

    def order(item: dict[str, Any]) -> str:
        return layout.sort_key_of(item) or ""

    merged: Iterable[dict[str, Any]] = heapq.merge(
        *(items(p) for p in partitions), key=order, reverse=descending
    )
    page: CollectionPage = []
    for item in merged:
        page.append(item)
        if len(page) >= MERGED_PAGE_ITEMS:
            yield page
            page = []
    if page:
        yield page


def _fetch(
    call: Callable[..., dict[str, Any]],
    table_name: str,
    layout: TableLayout,
    index_items: list[dict[str, Any]],
    sleep: Callable[[float], None] | None,
) -> list[dict[str, Any]]:
    """The items behind a page of the keys-only index, in the page's order; items deleted since
    the index was read are left out."""
    keys = [{layout.partition_key: item[layout.partition_key]} for item in index_items]
    found = batch_get_items(call, table_name, keys, sleep=sleep, return_consumed_capacity=True)
    return [item for item in found if item is not None]


def batch_get_items(
    call: Callable[..., dict[str, Any]],
    table_name: str,
    keys: list[dict[str, Any]],
    *,
    sleep: Callable[[float], None] | None = None,
    return_consumed_capacity: bool = False,
) -> list[dict[str, Any] | None]:
    """The items of ``keys`` (primary keys in DynamoDB JSON, repeats allowed), in the same
    order, ``None`` for an item that does not exist: strongly consistent ``BatchGetItem``
    requests of at most 100 distinct keys (DynamoDB API Reference, "BatchGetItem"), retrying
    ``UnprocessedKeys`` with backoff (:func:`aggregator.dynamodb.batch.batch_get`, policy
    :attr:`~aggregator.dynamodb.batch.WhenUnprocessed.RAISE`); with
    ``return_consumed_capacity``, each asks for ``ReturnConsumedCapacity="TOTAL"``.

    Raises
    ------
    UnprocessedKeysError
        When DynamoDB leaves keys unprocessed several rounds in a row (also a
        ``RuntimeError``, as raised before).
    Exception
        Whatever ``call`` raises.
    """
    read = batch_get(
        call,
        table_name,
        keys,
        consistent=True,
        when_unprocessed=WhenUnprocessed.RAISE,
        return_consumed_capacity=return_consumed_capacity,
        sleep=sleep,
    )
    names = {name for key in keys for name in key}
    found = {key_ident({n: item[n] for n in names if n in item}): item for item in read.items}
    return [found.get(key_ident(key)) for key in keys]
