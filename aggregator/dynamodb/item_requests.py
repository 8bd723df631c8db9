"""The requests a writer sends to its table's items, and the one place that sends them.

Every request of the writers' parts (:mod:`aggregator.dynamodb.atleastonce`,
:mod:`aggregator.dynamodb.checkpoint`, :mod:`aggregator.dynamodb.targets`,
:mod:`aggregator.dynamodb.membership`, :mod:`aggregator.dynamodb.expiry`) goes through
:meth:`ItemRequests.call`, which counts it in the writer's stats and sends it through the one
request path (:class:`~aggregator.dynamodb.client.RequestClient`: throttling retried with the
writer's backoff, errors wrapped into :class:`~aggregator.dynamodb.errors.AwsRequestError`).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.engine import CoalescedDelta
from aggregator.core.layout import TableLayout
from aggregator.dynamodb.client import Backoff, RequestClient
from aggregator.dynamodb.updates import IndexAction, Update, add_update, item_key
from aggregator.dynamodb.write_stats import WriteStats

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["ItemRequests"]


class ItemRequests:
    """Sends a writer's requests to ``table_name`` on ``client``.

    Parameters
    ----------
    client
        A boto3 DynamoDB *client* (thread-safe; botocore retries throttling itself), wrapped
        in this writer's :class:`~aggregator.dynamodb.client.RequestClient`.
    table_name
        The user's table.
    layout
        Attribute names and reserved partition keys.
    throttle_retries, backoff_seconds
        Extra retries of throttled requests after botocore's own, with exponential backoff
        (``backoff_seconds * 2**attempt``).
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        layout: TableLayout,
        *,
        throttle_retries: int = 3,
        backoff_seconds: float = 0.05,
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.layout = layout
        self.requests = RequestClient(
            client,
            backoff=Backoff(retries=throttle_retries, first=backoff_seconds, ceiling=math.inf),
        )

    def key(self, delta: CoalescedDelta) -> dict[str, Any]:
        """The key of ``delta``'s item (its partial's, for a rule with ``write_shards``)."""
        return item_key(self.layout, delta)

    def call(self, operation: str, request: dict[str, Any], stats: WriteStats) -> dict[str, Any]:
        """Send one request (``operation``, a client method name such as ``"update_item"``)
        through the writer's :class:`~aggregator.dynamodb.client.RequestClient`, counting it
        (each attempt) in ``stats.requests``, its retries in ``stats.throttle_retries`` and its
        ``ConsumedCapacity`` in ``stats.reported_wcu`` (a target rule's map read included, as
        the writer always counted it).

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            Throttling errors once ``throttle_retries`` retries with exponential backoff
            (``backoff_seconds * 2**attempt``) are spent; any other error at once (a failed
            condition included: ``code`` ``ConditionalCheckFailedException``). Also a
            ``ClientError``.
        aggregator.dynamodb.errors.AwsConnectionError
            The request got no answer.
        """
        return self.requests.send(operation, counts=_StatsCounts(stats), **request)

    def read_projected(
        self,
        key: dict[str, Any],
        names: dict[str, str],
        stats: WriteStats,
        *,
        capacity: bool = False,
    ) -> dict[str, Any] | None:
        """One strongly consistent ``GetItem`` of the item at ``key`` projecting the attributes
        ``names`` (``{placeholder: attribute name}``; a projection, not the whole item); the
        item as read (DynamoDB JSON, those attributes only) or ``None`` when there is none.
        ``capacity`` asks for the ``ConsumedCapacity`` (counted by :meth:`call`).

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            As :meth:`call`.
        """
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": key,
            "ConsistentRead": True,
            "ProjectionExpression": ", ".join(names),
            "ExpressionAttributeNames": names,
        }
        if capacity:
            request["ReturnConsumedCapacity"] = "TOTAL"
        item: dict[str, Any] | None = self.call("get_item", request, stats).get("Item")
        return item

    def send_update(self, delta: CoalescedDelta, update: Update, stats: WriteStats) -> None:
        """One ``UpdateItem`` of ``update`` on ``delta``'s item.

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            As :meth:`call` (a failed condition included).
        """
        request = {
            "TableName": self.table_name,
            "Key": self.key(delta),
            **update.render(),
            "ReturnConsumedCapacity": "TOTAL",
        }
        self.call("update_item", request, stats)

    def best_effort(self, delta: CoalescedDelta, update: Update, stats: WriteStats) -> bool:
        """Send ``update`` to ``delta``'s item after its aggregate update succeeded (pruning
        checkpoints, expiring an empty value item): whether it was applied. A failure (its
        condition, throttling past the retries) is left for the item's next update to retry."""
        try:
            self.send_update(delta, update, stats)
        except (ClientError, BotoCoreError):
            return False
        return True

    def add_request(
        self,
        delta: CoalescedDelta,
        amount: Decimal,
        count: Decimal | None = None,
        *,
        index: IndexAction = "set",
    ) -> dict[str, Any]:
        """``UpdateItem`` arguments that ``ADD`` ``amount`` (and ``count``) and set the
        descriptive attributes (:func:`~aggregator.dynamodb.updates.add_update`; ``index`` as
        there) on ``delta``'s item, returning the item as it was (which sizes the write; no
        extra capacity)."""
        request = add_update(self.table_name, self.layout, delta, amount, count, index=index)
        request["Key"] = self.key(delta)  # a partial's, for a rule with write_shards
        request["ReturnConsumedCapacity"] = "TOTAL"
        request["ReturnValues"] = "ALL_OLD"
        return request


class _StatsCounts:
    """Counts a writer's request into its item's :class:`WriteStats` (a
    :class:`~aggregator.dynamodb.client.CountSink`; one thread owns the stats, so no lock)."""

    __slots__ = ("stats",)

    def __init__(self, stats: WriteStats) -> None:
        self.stats = stats

    def add(
        self,
        *,
        requests: int = 0,
        throttle_retries: int = 0,
        read_units: Decimal = Decimal(0),
        write_units: Decimal = Decimal(0),
    ) -> None:
        self.stats.requests += requests
        self.stats.throttle_retries += throttle_retries
        self.stats.reported_wcu += write_units + read_units
