"""The requests a writer sends to its table's items, and the one place that sends them.

Every request of the writers' parts (:mod:`aggregator.dynamodb.atleastonce`,
:mod:`aggregator.dynamodb.checkpoint`, :mod:`aggregator.dynamodb.targets`,
:mod:`aggregator.dynamodb.membership`, :mod:`aggregator.dynamodb.expiry`) goes through
:meth:`ItemRequests.call`, which counts it and retries throttling.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.engine import CoalescedDelta
from aggregator.core.layout import TableLayout
from aggregator.dynamodb.errors import THROTTLING_ERRORS, error_code
from aggregator.dynamodb.stats import WriteStats
from aggregator.dynamodb.updates import IndexAction, Update, add_update, item_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["ItemRequests"]


class ItemRequests:
    """Sends a writer's requests to ``table_name`` on ``client``.

    Parameters
    ----------
    client
        A boto3 DynamoDB *client* (thread-safe; botocore retries throttling itself).
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
        self.throttle_retries = throttle_retries
        self.backoff_seconds = backoff_seconds

    def key(self, delta: CoalescedDelta) -> dict[str, Any]:
        """The key of ``delta``'s item (its partial's, for a rule with ``write_shards``)."""
        return item_key(self.layout, delta)

    def call(self, operation: str, request: dict[str, Any], stats: WriteStats) -> dict[str, Any]:
        """Send one request (``operation``, a client method name such as ``"update_item"``),
        counting it in ``stats.requests`` and its ``ConsumedCapacity`` in
        ``stats.reported_wcu``.

        Raises
        ------
        botocore.exceptions.ClientError
            Throttling errors once ``throttle_retries`` retries with exponential backoff
            (``backoff_seconds * 2**attempt``, each counted in ``stats.throttle_retries``) are
            spent; any other error at once.
        """
        attempt = 0
        while True:
            stats.requests += 1
            try:
                response: dict[str, Any] = getattr(self.client, operation)(**request)
            except ClientError as exc:
                if error_code(exc) in THROTTLING_ERRORS and attempt < self.throttle_retries:
                    stats.throttle_retries += 1
                    time.sleep(self.backoff_seconds * 2**attempt)
                    attempt += 1
                    continue
                raise
            consumed = response.get("ConsumedCapacity") or {}
            stats.reported_wcu += Decimal(str(consumed.get("CapacityUnits", 0)))
            return response

    def send_update(self, delta: CoalescedDelta, update: Update, stats: WriteStats) -> None:
        """One ``UpdateItem`` of ``update`` on ``delta``'s item.

        Raises
        ------
        botocore.exceptions.ClientError
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
