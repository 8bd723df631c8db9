"""Drop a rule: delete the aggregates of a rule removed from the definitions, or of the
generations a rebuild retired, with their fences and manifest entries.

Steps per generation (:class:`DropRule`), each safe to repeat, so a killed drop is resumed by
running it again:

1. Mark the generation ``dropping`` in the manifest: from then on a handler starting with its
   definition is refused (it would write the aggregates again).
2. Delete its aggregate items (sort keys ``<storage name>#...``): pages of the aggregates
   collection, under every partition key value the generation spreads them over as its
   manifest entry records it (:func:`~aggregator.dynamodb.collections.query_collections`; a
   rule counted without a manifest: the unspread value and the table's
   ``aggregate_partitions``), deleted with
   ``BatchWriteItem``, 25 keys a request (DynamoDB API Reference, "BatchWriteItem"), unprocessed
   keys sent again (boto3's ``BatchWriter``); on a table with a sort key, each aggregate's
   partials (``write_shards``) before it, found with one ``Query`` of their collection. A run
   resumes by reading the collection again: the items already deleted are no longer there.
3. For a rule with a ``target`` (its manifest entry names the attribute): remove the attribute
   and the rule's entries of the checkpoint map from every application item that has them (a
   strongly consistent scan projecting the keys, the attribute and the map; one ``UpdateItem``
   per such item, on condition that it still exists and its attribute is as read, so an item
   written meanwhile is left for the next run). The items themselves are never deleted. The
   same scan deletes the rule's partials (``write_shards``), which have no aggregate item to be
   found by.
4. Remove its fence from each shard's fence item, its leaderboard index floors
   (:mod:`aggregator.dynamodb.floors`) and top lists (:mod:`aggregator.dynamodb.top_list_items`),
   listed under every partition key value the control items spread over
   (:func:`~aggregator.dynamodb.control.query_control`), then its manifest entry (and the
   rule's serving pointer with its last generation).

What is not checked: that no handler still *runs* the dropped definition. Deploy the rule set
without the rule first (or, for a retired generation, let the deployment of the new definition
finish): a warm container with the old rule set would write the deleted aggregates again.

Costs: reading the generation's aggregates once (1 RCU per 4 KB, strongly consistent; without a
sort key, the collection index and ``BatchGetItem``), with a sort key one ``Query`` per aggregate
for its partials (1 RCU when it has none), and one write unit per deleted item (per started 1 KB),
plus one ``UpdateItem`` per fence item that holds the generation; for a target rule, one scan of
the table and one ``UpdateItem`` per application item that held the attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.table import BatchWriter
from botocore.exceptions import ClientError

from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import PARTIAL_PREFIX
from aggregator.core.lifecycle import RuleState, generations_of
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.collections import query_collections
from aggregator.dynamodb.control import query_control
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.floors import FLOOR_PREFIX
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.targets import rule_token
from aggregator.dynamodb.top_list_items import TOP_PREFIX
from aggregator.dynamodb.updates import Update

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DropResult", "DropRule"]

BATCH_WRITE_ITEMS = 25
"""Most requests one ``BatchWriteItem`` carries (DynamoDB API Reference, "BatchWriteItem")."""


@dataclass(slots=True)
class DropResult:
    """What :meth:`DropRule.run` deleted: ``generations`` (storage names), ``items_deleted``
    (aggregate items, a target rule's ledger included), ``fences_removed`` (fence entries),
    ``targets_cleared`` (application items the target attribute was removed from) and
    ``floors_removed`` (leaderboard index floors and top lists)."""

    rule: str
    generations: list[str] = field(default_factory=list)
    items_deleted: int = 0
    fences_removed: int = 0
    targets_cleared: int = 0
    floors_removed: int = 0


class DropRule:
    """Delete a rule's aggregates (module docstring).

    Parameters
    ----------
    rules
        The rule set being deployed (the definitions). A rule named in it keeps its live
        generation: only its ``retired`` (or half-dropped) generations go. A rule not in it loses
        every generation.
    client, table_name
        A boto3 DynamoDB client and the table.
    rule_name
        The rule.
    on_deleted
        Called with the number of items of each page read and queued for deletion (progress;
        the last 24 are sent when the page's generation is done).

    Raises
    ------
    ConfigError
        On construction, for a rule in the definitions without retired generations (nothing
        the command may drop).
    """

    def __init__(
        self,
        rules: RuleSet,
        client: DynamoDBClient,
        table_name: str,
        rule_name: str,
        *,
        on_deleted: Callable[[int], None] | None = None,
    ) -> None:
        self.rules = rules
        self.layout = rules.layout
        self.client = client
        self.requests = requests_of(client)
        self.table_name = table_name
        self.rule_name = rule_name
        self.on_deleted = on_deleted
        self.manifest = Manifest(client, table_name, self.layout)
        family = generations_of(rule_name, self.manifest.load())
        if rule_name in {r.name for r in rules}:
            self.targets = [s for s in family if s.status in ("retired", "dropping")]
            if not self.targets:
                raise ConfigError(
                    f"rule {rule_name!r} is in the definitions and has no retired generation: "
                    "remove it from the rule file and deploy that first (drop-rule deletes a "
                    "removed rule's aggregates, or the generations a rebuild retired)"
                )
        else:
            # (no derived rule in the definitions reads it: a rule set names its sources)
            # a rule counted without the manifest (lifecycle off) has items but no entry
            self.targets = family or [RuleState(rule_name, "", "dropping", 0)]
            if not family and not any(self._pages(self.targets[0])):
                raise ConfigError(
                    f"table {table_name!r} has no rule {rule_name!r}: no generation in its "
                    "manifest and no aggregates (aggregator status lists the rules it has)"
                )

    def count(self) -> dict[str, int]:
        """The aggregate items each target generation holds (their partials not counted), by
        storage name: what :meth:`run` would delete. Reads the aggregates, deletes nothing."""
        return {s.name: sum(len(page) for page in self._pages(s)) for s in self.targets}

    def _partitions(self, state: RuleState) -> tuple[str, ...]:
        """The partition key values a generation's aggregates are under: those its manifest
        entry records (``partitions``); for a rule counted without a manifest (no entry, its
        spread unknown), the unspread value, the table's ``aggregate_partitions`` and the
        definition's ``partitions``."""
        lay = self.layout
        if state.fingerprint:  # a manifest entry
            return lay.aggregate_partitions_of(state.partitions)
        spread = lay.aggregate_partitions_of(lay.aggregate_partitions)
        defined = next((r.spread for r in self.rules if r.name == state.name), 1)
        return tuple(
            dict.fromkeys((lay.aggregates_pk, *spread, *lay.aggregate_partitions_of(defined)))
        )

    def _pages(self, state: RuleState) -> Iterator[list[dict[str, Any]]]:
        """Pages of a generation's aggregate items, under each of its partition key values."""
        return query_collections(
            self.requests.send,
            self.table_name,
            self.layout,
            self._partitions(state),
            begins_with=f"{state.name}#",
        )

    def run(self) -> DropResult:
        """Drop every target generation (module docstring); returns what was deleted."""
        result = DropResult(self.rule_name)
        known = self.manifest.load()
        for state in self.targets:
            name = state.name
            result.generations.append(name)
            if name in known and known[name].status != "dropping":
                self.manifest.set_state(
                    replace(known[name], status="dropping"), expected_status=known[name].status
                )
            result.items_deleted += self._delete_aggregates(state)
            if state.target_attribute is not None:
                result.targets_cleared += self._clear_targets(name, state.target_attribute)
            result.fences_removed += self._remove_fences(name)
            result.floors_removed += self._remove_floors(name)
            if name in known:
                self.manifest.remove(name)
        return result

    def _delete_aggregates(self, state: RuleState) -> int:
        deleted = 0
        pages = self._pages(state)
        # boto3's BatchWriter sends 25 deletes a request and sends unprocessed keys again
        with BatchWriter(self.table_name, self.client, flush_amount=BATCH_WRITE_ITEMS) as writer:
            for page in pages:
                for item in page:
                    sort_key = self.layout.sort_key_of(item) or ""
                    # partials first: a run killed in between finds the aggregate again
                    for partial in self._partials(sort_key):
                        writer.delete_item(Key=partial)
                    writer.delete_item(Key=self.layout.key_of(item))  # where it is
                deleted += len(page)
                if self.on_deleted is not None:
                    self.on_deleted(len(page))
        return deleted

    def _clear_targets(self, storage_name: str, attribute: str) -> int:
        """Remove ``attribute`` and the generation's checkpoint map entries from the application
        items that have them (module docstring, step 3); returns how many were cleared."""
        lay = self.layout
        names = {f"#k{i}": k for i, k in enumerate(lay.key_attributes)}
        names.update({"#a": attribute, "#m": lay.target_checkpoints_attribute})
        prefix = rule_token(storage_name)
        cleared = 0
        for page in self.requests.pages(
            "scan",
            TableName=self.table_name,
            ConsistentRead=True,
            ProjectionExpression=", ".join(names),
            ExpressionAttributeNames=names,
        ):
            for item in page.get("Items", []):
                total = lay.partial_total(item)
                if total is not None and total.startswith(f"{storage_name}#"):
                    # a partial of the rule (write_shards): its sums roll up into the targets
                    self.requests.send(
                        "delete_item", TableName=self.table_name, Key=lay.key_of(item)
                    )
                    continue
                if lay.is_reserved(item):
                    continue
                entries = [
                    e
                    for e in item.get(lay.target_checkpoints_attribute, {}).get("M", {})
                    if e.startswith(prefix)
                ]
                if attribute not in item and not entries:
                    continue
                if self._clear_item(item, attribute, entries):
                    cleared += 1
                    if self.on_deleted is not None:
                        self.on_deleted(1)
        return cleared

    def _clear_item(self, item: dict[str, Any], attribute: str, entries: list[str]) -> bool:
        """One item's ``REMOVE`` of the attribute and the rule's checkpoint map entries (the
        whole map when they are all it holds, so no empty map is left behind), on condition
        that the item exists and its attribute is as read."""
        update = Update().remove(attribute).where_exists(self.layout.partition_key)
        if attribute in item:
            update = update.where_equals(attribute, item[attribute])
        else:
            update = update.where_missing(attribute)
        checkpoints = self.layout.target_checkpoints_attribute
        if entries and set(entries) == set(item[checkpoints].get("M", {})):
            # the rule's entries are the whole map: the map goes, on condition it is as read
            # (another rule's first entry meanwhile leaves it to the next run)
            update = update.remove(checkpoints).where_equals(checkpoints, item[checkpoints])
        else:
            for entry in entries:
                update = update.remove((checkpoints, entry))
        try:
            self.requests.send(
                "update_item",
                TableName=self.table_name,
                Key=self.layout.key_of(item),
                **update.render(),
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False  # written meanwhile, or deleted: the next run looks again
            raise
        return True

    def _partials(self, sort_key: str) -> list[dict[str, Any]]:
        """Keys of the aggregate's partials (a rule with ``write_shards``): one ``Query`` of
        their item collection, on a table with a sort key."""
        lay = self.layout
        if lay.sort_key is None:
            return []
        keys = []
        for page in self.requests.pages(
            "query",
            TableName=self.table_name,
            KeyConditionExpression="#pk = :pk AND begins_with(#sk, :partial)",
            ExpressionAttributeNames={"#pk": lay.partition_key, "#sk": lay.sort_key},
            ExpressionAttributeValues={
                ":pk": {"S": f"{lay.aggregates_pk}#{sort_key}"},
                ":partial": {"S": PARTIAL_PREFIX},
            },
            ProjectionExpression="#pk, #sk",
            ConsistentRead=True,
        ):
            keys += page.get("Items", [])
        return keys

    def _remove_floors(self, storage_name: str) -> int:
        """Delete the floor items and the top lists of ``storage_name``'s index partitions
        (``<name>``, ``<name>#<n>``, ``<name>#<bucket>...``)."""
        removed = 0
        lay = self.layout
        for prefix, attribute in (
            (FLOOR_PREFIX, lay.leaderboard_attribute),
            (TOP_PREFIX, "partition"),
        ):
            for page in query_control(
                self.requests.send, self.table_name, lay, begins_with=f"{prefix}{storage_name}"
            ):
                for item in page:
                    partition = item.get(attribute, {}).get("S", "")
                    if partition != storage_name and not partition.startswith(f"{storage_name}#"):
                        continue  # another rule's whose name starts with this one's
                    self.requests.send(
                        "delete_item", TableName=self.table_name, Key=lay.key_of(item)
                    )
                    removed += 1
        return removed

    def _remove_fences(self, storage_name: str) -> int:
        removed = 0
        for page in query_control(
            self.requests.send, self.table_name, self.layout, begins_with="fence#"
        ):
            for item in page:
                if storage_name not in item.get("after", {}).get("M", {}):
                    continue
                key = self.layout.key_of(item)
                update = Update().remove(("after", storage_name)).remove(("set_by", storage_name))
                self.requests.send(
                    "update_item", TableName=self.table_name, Key=key, **update.render()
                )
                removed += 1
        return removed
