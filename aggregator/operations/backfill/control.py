"""A backfill's control items (:mod:`aggregator.operations.backfill`), under the table's control
partition: its meta item (``backfill#<id>#meta``: rules, segments, start, and the lease that
keeps two processes from running it at once), the marker of its fences (``#fenced``), each
segment's progress (``#segment#<n>``) and each page's record (``#page#<n>#<page>``)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aggregator.core.clock import Clock
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.updates import Update

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["LEASE_SECONDS", "ControlItems"]

LEASE_SECONDS = 120
"""A running backfill renews its lease at least every third of this; another process may take
over (resume) a backfill whose lease has lapsed."""


class ControlItems:
    """Reads and writes a backfill's control items, and holds its lease.

    Parameters
    ----------
    client
        A boto3 ``dynamodb`` client (its requests go through a
        :class:`~aggregator.dynamodb.client.RequestClient`: failures raise
        :class:`~aggregator.dynamodb.errors.AwsRequestError`).
    table_name, layout
        The table and its layout (the control partition's key).
    clock
        Epoch seconds (the lease's times).
    """

    def __init__(
        self, client: DynamoDBClient, table_name: str, layout: TableLayout, clock: Clock
    ) -> None:
        self.requests = requests_of(client)
        self.table_name = table_name
        self.layout = layout
        self.clock = clock
        self._owner = uuid.uuid4().hex
        self._leased_at = 0.0
        self._lock = threading.Lock()

    def key(self, sort_key: str) -> dict[str, Any]:
        """The primary key of the control item ``sort_key``."""
        return self.layout.control_key(sort_key)

    def get(self, sort_key: str) -> dict[str, Any] | None:
        """The control item ``sort_key`` (strongly consistent), or ``None``."""
        item: dict[str, Any] | None = self.requests.send(
            "get_item", TableName=self.table_name, Key=self.key(sort_key), ConsistentRead=True
        ).get("Item")
        return item

    def put(self, sort_key: str, attributes: dict[str, Any]) -> None:
        """Write the control item ``sort_key`` with ``attributes`` (DynamoDB JSON)."""
        fields = self.layout.control_fields(sort_key)
        item = {**{k: {"S": v} for k, v in fields.items()}, **attributes}
        self.requests.send("put_item", TableName=self.table_name, Item=item)

    def take_lease(self, backfill_id: str) -> None:
        """Own the backfill for :data:`LEASE_SECONDS` (a conditional write on its meta item), so
        that two processes never run one backfill at once.

        Raises
        ------
        ConfigError
            When another process holds the lease.
        """
        now = int(self.clock())
        try:
            me = {"S": self._owner}
            update = (
                Update()
                .set("owner", me)
                .set("lease_until", {"N": str(now + LEASE_SECONDS)})
                .where_exists("rules")
                .where_any(
                    Update().where_missing("lease_until"),
                    Update().where_below("lease_until", {"N": str(now)}),
                    Update().where_equals("owner", me),
                )
            )
            self.requests.send(
                "update_item",
                TableName=self.table_name,
                Key=self.key(f"backfill#{backfill_id}#meta"),
                **update.render(),
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            raise ConfigError(
                f"backfill {backfill_id} is running in another process (its lease "
                f"lasts {LEASE_SECONDS} s from its last page); wait for it, or run this again "
                "once it has stopped"
            ) from None
        self._leased_at = time.monotonic()

    def renew_lease(self, backfill_id: str) -> None:
        """Take the lease again once a third of it has passed (segment threads call this after
        each stream read; one at a time renews it)."""
        if time.monotonic() - self._leased_at > LEASE_SECONDS / 3:
            with self._lock:
                self.take_lease(backfill_id)
