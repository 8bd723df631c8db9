"""Writing a target rule's sum onto the application's own items (:class:`~aggregator.core.rules.
Target`): ``ADD likeTally`` on the post's ``META`` item, never creating it, exactly once.

The update
----------
One ``UpdateItem`` per target item and batch, as for aggregate items::

    ADD <attribute> :delta  SET <map>.<shard token> = :checkpoint
    condition  attribute_exists(<partition key>)
               AND ((attribute_exists(<map>.<token>) AND <map>.<token> < :first)
                    OR (attribute_not_exists(<map>.<token>) AND size(<map>) < :max_entries))

``<map>`` is the one attribute the framework keeps on the item (``table:
target_checkpoints_attribute``, default ``aggregator_checkpoints``): a map from a (rule, shard)
token (18 characters, :func:`target_token`) to the shard's 21-byte checkpoint
(:func:`~aggregator.dynamodb.checkpoint.encode_checkpoint`): the same per-item, per-shard prefix
invariant as on aggregate items, kept per rule so that several rules can target one item. The
request asks for ``ReturnValues: UPDATED_OLD`` only and never for the item on a failed
condition, so a role whose policy allows just the target attributes can send it (Developer
Guide, "Using IAM policy conditions for fine-grained access control": with
``dynamodb:Attributes``, ``ReturnValues`` limited to ``NONE``, ``UPDATED_OLD`` or
``UPDATED_NEW``).

When the condition fails, one strongly consistent ``GetItem`` of the key and the map says why:

* **no item**: the target does not exist (never written, or deleted). Nothing is written to
  it, ever: the delta goes to the rule's *ledger*, an ordinary aggregate item ``<rule>#<key>``
  in the aggregates partition, written with the same protocol, and ``missing_targets`` counts
  it. ``aggregator query list RULE`` lists the ledger: per target key, the sum of the deltas
  that found no item (likes outliving their post, or unlikes after it).
* **the attribute (or the map) is of another type** (``likeTally = "lots"``, which ``ADD``
  refuses with a ``ValidationException``; the same read tells): the item cannot hold the sum, so
  the delta goes to the ledger as for a missing item, ``unusable_targets`` counts it, and the
  shard moves on. Once the application fixes the attribute, ``aggregator reconcile --repair``
  brings the item's sum back.
* **no map yet** (the item's first write): ``SET <map> = {token: checkpoint}`` with the
  ``ADD``, on condition ``attribute_not_exists(<map>)``. DynamoDB refuses a ``SET`` of a path
  inside a missing map (``ValidationException``), hence this one extra request per item.
* **the shard's checkpoint is at or past the batch's first record**: an earlier attempt applied
  part of the batch; the rest is added on condition that the checkpoint is still what was read.
* **the map is full** (:data:`MAX_TARGET_CHECKPOINTS` entries, none of this shard): entries older
  than the checkpoint retention are removed (each on condition it is unchanged); when none is
  that old, the oldest is (``target_checkpoints_evicted``), which protects nothing unless that
  shard redelivers a batch after more than ``MAX_TARGET_CHECKPOINTS`` other shards wrote the item.
  The map therefore holds at most ``MAX_TARGET_CHECKPOINTS`` entries of about 41 bytes: 660
  bytes at any shard count. A target written from many partitions at once is a hot parent: give
  the rule ``write_shards``.

The framework's write comes back on the stream as a ``MODIFY`` of the application item: rules
that do not read the target attribute (or the map, which no rule may read) get ``c(new) - c(old)
= 0`` from it, and a rule that reads the attribute gets the exact change. A re-created item
starts from what the application writes; a batch retried after the item was deleted and created
again within the retry may add its records to the new item (its checkpoint went with the old).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from aggregator.core.engine import CoalescedDelta
from aggregator.core.exceptions import WriteError
from aggregator.core.numbers import add
from aggregator.core.records import pad_sequence_number
from aggregator.dynamodb.checkpoint import (
    CHECKPOINT_PREFIX,
    MAX_RECOVERY_ROUNDS,
    CheckpointWriter,
    checkpoint_attribute,
    decode_checkpoint,
    sequence_bytes,
)
from aggregator.dynamodb.updates import Update, prune_update
from aggregator.dynamodb.writer import AtLeastOnceWriter, WriteStats, error_code, write_units

__all__ = [
    "MAX_TARGET_CHECKPOINTS",
    "TargetAtLeastOnceWriter",
    "TargetCheckpointWriter",
    "rule_token",
    "target_token",
]

MAX_TARGET_CHECKPOINTS = 16
"""Most entries of the checkpoint map on a target item, across the rules that target it (about 41
bytes each: an 18-character name, a 21-byte binary value and DynamoDB's per-element overhead)."""


RULE_TOKEN_CHARS = 6
"""Characters of a rule's digest that start its entries' names in a checkpoint map."""


def rule_token(rule: str) -> str:
    """The start of every entry of ``rule`` in a target item's checkpoint map: 6 URL-safe base64
    characters (36 bits) of a digest of the rule's name, so several target rules can share an
    item (each has its own checkpoints) and ``drop-rule`` can find one rule's entries."""
    return checkpoint_attribute(f"rule:{rule}")[len(CHECKPOINT_PREFIX) :][:RULE_TOKEN_CHARS]


def target_token(rule: str, shard_id: str) -> str:
    """The name of a (rule, shard) entry in a target item's checkpoint map: :func:`rule_token`
    and the 12 characters of :func:`~aggregator.dynamodb.checkpoint.checkpoint_attribute` after
    ``c#`` (18 characters)."""
    return rule_token(rule) + checkpoint_attribute(shard_id)[len(CHECKPOINT_PREFIX) :]


def _ledger(delta: CoalescedDelta) -> CoalescedDelta:
    """The delta as a change to the rule's ledger item (``<rule>#<key>`` in the aggregates
    partition)."""
    return replace(delta, ref=replace(delta.ref, target=None), target_attribute=None)


class _TargetWrites:
    """What both target writers share: the item's key, the names, the ``GetItem`` of the map."""

    layout: Any
    table_name: str

    def _target_key(self, delta: CoalescedDelta) -> dict[str, Any]:
        assert delta.ref.target is not None
        return dict(self.layout.target_key(delta.ref.target))

    def _read_map(
        self, delta: CoalescedDelta, stats: WriteStats
    ) -> tuple[bool, dict[str, Any] | None]:
        """``(exists, checkpoint map in DynamoDB JSON or None)`` of the target item, read
        strongly consistently (only its partition key and the map: a projection the
        attribute-limited policy allows)."""
        response = self._call(  # type: ignore[attr-defined]
            "get_item",
            {
                "TableName": self.table_name,
                "Key": self._target_key(delta),
                "ConsistentRead": True,
                "ProjectionExpression": "#pk, #m",
                "ExpressionAttributeNames": {
                    "#pk": self.layout.partition_key,
                    "#m": self.layout.target_checkpoints_attribute,
                },
                "ReturnConsumedCapacity": "TOTAL",
            },
            stats,
        )
        item = response.get("Item")
        if item is None:
            return False, None
        found = item.get(self.layout.target_checkpoints_attribute)
        return True, (dict(found["M"]) if found and "M" in found else None)

    def _to_ledger(
        self,
        delta: CoalescedDelta,
        shard_id: str | None,
        last: str,
        stats: WriteStats,
        *,
        unusable: bool = False,
    ) -> WriteStats:
        """Write ``delta`` to the rule's ledger item instead of its target (missing, or
        ``unusable``: holding the attribute as another type), with the writer's own protocol
        for aggregate items; counted in ``missing_targets`` or ``unusable_targets``."""
        if unusable:
            stats.unusable_targets += 1
        else:
            stats.missing_targets += 1
        # the ledger's delta has no target attribute: the writer's aggregate-item protocol
        stats.add(self._apply_item(_ledger(delta), shard_id, last))  # type: ignore[attr-defined]
        return stats

    def _unusable(self, delta: CoalescedDelta, exc: ClientError, stats: WriteStats) -> bool:
        """Whether ``exc``, raised by an update of the target item, says the item holds the
        target attribute or the checkpoint map as a type the update cannot use (a
        ``ValidationException``, confirmed by a strongly consistent read of the two)."""
        if error_code(exc) != "ValidationException":
            return False
        attribute = str(delta.target_attribute)
        names = {
            "#pk": self.layout.partition_key,
            "#a": attribute,
            "#m": self.layout.target_checkpoints_attribute,
        }
        response = self._call(  # type: ignore[attr-defined]
            "get_item",
            {
                "TableName": self.table_name,
                "Key": self._target_key(delta),
                "ConsistentRead": True,
                "ProjectionExpression": "#pk, #a, #m",
                "ExpressionAttributeNames": names,
            },
            stats,
        )
        item = response.get("Item") or {}
        held = item.get(attribute)
        checkpoints = item.get(self.layout.target_checkpoints_attribute)
        return (held is not None and "N" not in held) or (
            checkpoints is not None and "M" not in checkpoints
        )

    @staticmethod
    def _charged(response: Mapping[str, Any], fallback: int) -> int:
        """WCU of a successful write of an application item: what the endpoint reports
        (``ReturnConsumedCapacity``: DynamoDB and DynamoDB Local size it by the whole item, which
        the framework never reads), else ``fallback``."""
        units = (response.get("ConsumedCapacity") or {}).get("CapacityUnits")
        return math.ceil(units) if units else fallback

    def _target_units(self, delta: CoalescedDelta) -> int:
        """Modelled WCU of one update of a target item, from what the framework knows of it
        (its key, the attribute, a checkpoint); the application's own attributes add to it on a
        large item (DynamoDB charges by item size, Developer Guide, "Read/write capacity
        mode"), which :meth:`_charged` counts for a write that succeeded. A write whose condition
        failed is charged too, and reported by no endpoint."""
        assert delta.ref.target is not None
        size = sum(len(v.encode("utf-8")) for v in delta.ref.target) + len(
            self.layout.partition_key
        )
        size += len(str(delta.target_attribute)) + 21
        return write_units(size)


class TargetAtLeastOnceWriter(AtLeastOnceWriter, _TargetWrites):
    """:class:`~aggregator.dynamodb.writer.AtLeastOnceWriter` that also writes target rules:
    ``ADD`` on condition ``attribute_exists(<partition key>)``; a missing target's delta goes to
    the rule's ledger (module docstring)."""

    writes_targets = True

    def _apply_item(self, delta: CoalescedDelta, shard_id: str | None, last: str) -> WriteStats:
        if delta.target_attribute is None:
            return super()._apply_item(delta, shard_id, last)
        stats = WriteStats()
        update = Update().add(str(delta.target_attribute), delta.amount)
        request = {
            "TableName": self.table_name,
            "Key": self._target_key(delta),
            "ReturnConsumedCapacity": "TOTAL",
            **update.where_exists(self.layout.partition_key).render(),
        }
        try:
            response = self._call("update_item", request, stats)
        except ClientError as exc:
            if self._unusable(delta, exc, stats):
                return self._to_ledger(delta, shard_id, last, stats, unusable=True)
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            stats.modelled_wcu += self._target_units(delta)
            return self._to_ledger(delta, shard_id, last, stats)
        stats.items_written += 1
        stats.target_writes += 1
        stats.modelled_wcu += self._charged(response, self._target_units(delta))
        return stats


class TargetCheckpointWriter(CheckpointWriter, _TargetWrites):
    """:class:`~aggregator.dynamodb.checkpoint.CheckpointWriter` that also writes target rules,
    exactly once through the item's checkpoint map (module docstring)."""

    writes_targets = True

    def _apply_item(self, delta: CoalescedDelta, shard_id: str | None, last: str) -> WriteStats:
        if delta.target_attribute is None:
            return super()._apply_item(delta, shard_id, last)
        assert shard_id is not None
        stats = WriteStats()
        token = target_token(delta.ref.rule, shard_id)
        entry = (self.layout.target_checkpoints_attribute, token)
        checkpoint = {"B": self._checkpoint_value(last)}
        amount = delta.amount
        expected: dict[str, Any] | None = None  # the shard's entry as read, in recovery
        for _ in range(MAX_RECOVERY_ROUNDS + 2):
            update = Update().add(str(delta.target_attribute), amount).set(entry, checkpoint)
            update = update.where_exists(self.layout.partition_key)
            if expected is None:
                first = {"B": sequence_bytes(delta.first_sequence_number)}
                update = update.where_any(
                    Update().where_exists(entry).where_below(entry, first),
                    Update()
                    .where_missing(entry)
                    .where_size_below(entry[0], MAX_TARGET_CHECKPOINTS),
                )
            else:
                update = update.where_equals(entry, expected)
            request = {
                "TableName": self.table_name,
                "Key": self._target_key(delta),
                "ReturnConsumedCapacity": "TOTAL",
                "ReturnValues": "UPDATED_OLD",
                **update.render(),
            }
            try:
                response = self._call("update_item", request, stats)
            except ClientError as exc:
                if self._unusable(delta, exc, stats):
                    return self._to_ledger(delta, shard_id, last, stats, unusable=True)
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                stats.modelled_wcu += self._target_units(delta)  # a failed write is charged
                exists, entries = self._read_map(delta, stats)
                if not exists:
                    return self._to_ledger(delta, shard_id, last, stats)
                if entries is None:
                    try:
                        if self._create_map(delta, amount, token, checkpoint, stats):
                            return stats
                    except ClientError as first_write:
                        if not self._unusable(delta, first_write, stats):
                            raise
                        return self._to_ledger(delta, shard_id, last, stats, unusable=True)
                    continue
                own = entries.get(token)
                if own is not None:
                    applied_to, _ = decode_checkpoint(own.get("B"))
                    stats.conditional_recoveries += 1
                    remaining = [
                        (s, a) for s, a in delta.parts if pad_sequence_number(s) > applied_to
                    ]
                    if not remaining:
                        stats.already_applied += 1
                        return stats
                    amount = Decimal(0)
                    for _, part in remaining:
                        amount = add(amount, part)
                    expected = dict(own)
                    continue
                expected = None
                amount = delta.amount
                if len(entries) >= MAX_TARGET_CHECKPOINTS:
                    self._make_room(delta, entries, stats)
                continue
            stats.items_written += 1
            stats.target_writes += 1
            stats.modelled_wcu += self._charged(response, self._target_units(delta))
            return stats
        raise WriteError(
            f"{delta.ref.display_key}: the target's checkpoint map kept changing during "
            f"{MAX_RECOVERY_ROUNDS} recovery rounds (is another consumer writing this shard?)"
        )

    def _create_map(
        self,
        delta: CoalescedDelta,
        amount: Decimal,
        token: str,
        checkpoint: Mapping[str, Any],
        stats: WriteStats,
    ) -> bool:
        """The item's first write: the map with this shard's entry, and the ``ADD``. ``False``
        when the condition failed (the map appeared meanwhile, or the item went): try again."""
        checkpoints = self.layout.target_checkpoints_attribute
        update = (
            Update()
            .add(str(delta.target_attribute), amount)
            .set(checkpoints, {"M": {token: dict(checkpoint)}})
            .where_exists(self.layout.partition_key)
            .where_missing(checkpoints)
        )
        request = {
            "TableName": self.table_name,
            "Key": self._target_key(delta),
            "ReturnConsumedCapacity": "TOTAL",
            **update.render(),
        }
        try:
            response = self._call("update_item", request, stats)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            stats.modelled_wcu += self._target_units(delta)
            return False
        stats.items_written += 1
        stats.target_writes += 1
        stats.modelled_wcu += self._charged(response, self._target_units(delta))
        return True

    def _make_room(
        self, delta: CoalescedDelta, entries: Mapping[str, Any], stats: WriteStats
    ) -> None:
        """Remove the map's entries older than the checkpoint retention, or else its oldest one
        (module docstring); each on condition that it is unchanged."""
        horizon = self._clock() - self.checkpoint_retention_seconds
        written: dict[str, int] = {}
        for name, value in entries.items():
            try:
                written[name] = decode_checkpoint(value.get("B"))[1]
            except (ValueError, TypeError):
                written[name] = 0  # not a checkpoint: protects nothing
        stale = [name for name, at in written.items() if at < horizon]
        evicted = not stale
        if evicted:
            stale = [min(written, key=written.__getitem__)]
        checkpoints = self.layout.target_checkpoints_attribute
        update = prune_update({name: entries[name] for name in stale}, within=checkpoints)
        request = {
            "TableName": self.table_name,
            "Key": self._target_key(delta),
            "ReturnConsumedCapacity": "TOTAL",
            **update.render(),
        }
        try:
            response = self._call("update_item", request, stats)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return  # changed meanwhile: the next round reads it again
        stats.modelled_wcu += self._charged(response, self._target_units(delta))
        stats.pruned_checkpoints += len(stale)
        stats.target_checkpoints_evicted += evicted
