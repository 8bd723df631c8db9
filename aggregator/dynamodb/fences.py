"""The fences of each shard, kept in the table among the control items: one item
``fence#<shardId>`` per shard, under ``layout.control_key`` of its sort key (the format and its
costs: :mod:`aggregator.dynamodb.manifest`, which exports :class:`FenceStore` too)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import Fence, ShardOpening
from aggregator.core.records import pad_sequence_number
from aggregator.dynamodb.client import RequestClient, requests_of
from aggregator.dynamodb.updates import Update, with_collection

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["FenceStore"]


class FenceStore:
    """Fences per shard among the control items (``layout.control_key``): one item
    ``fence#<shardId>`` whose map attributes ``after`` and ``set_by`` are keyed by rule name
    (module docstring)."""

    def __init__(
        self, client: DynamoDBClient | RequestClient, table_name: str, layout: TableLayout
    ) -> None:
        self.client = client
        self.requests = requests_of(client)
        self.table_name = table_name
        self.layout = layout

    def _key(self, shard_id: str) -> dict[str, Any]:
        return self.layout.control_key(f"fence#{shard_id}")

    @staticmethod
    def _fences(shard_id: str, item: dict[str, Any] | None) -> dict[str, Fence]:
        if not item:
            return {}
        after = item.get("after", {}).get("M", {})
        set_by = item.get("set_by", {}).get("M", {})
        return {
            rule: Fence(rule, shard_id, value["S"], set_by.get(rule, {}).get("S", "handler"))
            for rule, value in after.items()
        }

    def get(self, shard_id: str) -> dict[str, Fence]:
        """The fences written for ``shard_id``, by rule (strongly consistent read)."""
        return dict(self.opening(shard_id).fences)

    def opening(self, shard_id: str) -> ShardOpening:
        """Where the first batch a handler processed in ``shard_id`` began, and the shard's
        fences (one strongly consistent read)."""
        item = self.requests.send(
            "get_item", TableName=self.table_name, Key=self._key(shard_id), ConsistentRead=True
        ).get("Item")
        opened = (item or {}).get("opened_after", {}).get("S")
        return ShardOpening(opened, self._fences(shard_id, item))

    def put_if_absent(
        self, fences: list[Fence], *, opened_after: str | None = None
    ) -> dict[str, Fence]:
        """Write the fences (all of one shard) whose rule has none there yet; returns every
        fence of the shard in force afterwards. Two requests: one that creates the item's maps
        if missing, one ``SET after.<rule> = if_not_exists(after.<rule>, :fence)`` per rule.

        ``opened_after`` (the handler's: the fence before its batch's first record) is recorded
        once, by the first handler batch that reaches the shard: where any handler began
        processing it (:class:`~aggregator.core.lifecycle.ShardOpening`)."""
        if not fences:
            return {}
        shard_id = fences[0].shard_id
        key = self._key(shard_id)
        maps = Update().set_if_missing("after", {"M": {}}).set_if_missing("set_by", {"M": {}})
        if opened_after is not None:
            maps = maps.set_if_missing("opened_after", {"S": pad_sequence_number(opened_after)})
        maps = with_collection(maps, self.layout, self.layout.control_pk)
        self.requests.send("update_item", TableName=self.table_name, Key=key, **maps.render())
        update = Update()
        for fence in fences:
            after = {"S": pad_sequence_number(fence.after)}
            update = update.set_if_missing(("after", fence.rule), after)
            update = update.set_if_missing(("set_by", fence.rule), {"S": fence.set_by})
        response = self.requests.send(
            "update_item",
            TableName=self.table_name,
            Key=key,
            ReturnValues="ALL_NEW",
            **update.render(),
        )
        return self._fences(shard_id, response.get("Attributes"))
