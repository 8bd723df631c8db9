"""Writing ledger carries: a deleted target item's checkpoints set on the target rule's ledger
item (the ``exactly-once`` and ``window`` modes; why: :mod:`aggregator.dynamodb.targets`,
"After the delete").

For a :class:`~aggregator.core.deltas.LedgerCarry` (the rule's ledger item ``<rule>#<key>`` for
the deleted item, and the entries ``{shard token: checkpoint}`` its map held), one
``UpdateItem`` of the ledger item sets each carried ``c#<shard token>`` to the larger of its value
and the carried one::

    SET c#<t1> = :v1, c#<t2> = :v2, ..., rule = :rule, key = :key [, <TTL> = :expires]
    condition  (attribute_not_exists(c#<t1>) OR c#<t1> < :v1) AND (... <t2> ...) ...
               [AND (attribute_not_exists(value) OR value = :zero)]

Binary values compare byte by byte (the sequence number's 17 big-endian bytes first), as every
checkpoint condition of the protocol does; the carried value keeps its time suffix, so the
ledger's usual pruning (:mod:`aggregator.dynamodb.checkpoint`) removes it after the checkpoint
retention like any other. When the condition fails (a checkpoint at or past its carried value,
or a value on the ledger: the item as it was comes back with the failure,
``ReturnValuesOnConditionCheckFailure``; a strongly consistent ``GetItem`` on endpoints that do
not return it), only the checkpoints behind are set, on condition that each is still as read;
none behind: done. So a carry applied twice (the ``REMOVE`` delivered again) changes nothing,
and carries and the ledger's own writes, in any order, leave each checkpoint at the largest
value written: an idempotent maximum.

A ledger item that a carry creates has no value, and readers take it as 0 (``query list`` leaves
keys at zero out of its table; ``AggregateStore.list`` returns them with value 0; reconcile reads
target rules on the application's items, never the ledger). It gets the TTL of the checkpoint
retention, the time after which its checkpoints protect nothing (set while the ledger's value is
missing or 0, on that condition), so it does not stay as a zero entry: every later delta written
to the ledger removes the TTL, and one that brings its value back to 0 sets it again
(:class:`~aggregator.dynamodb.expiry.EmptyValueExpiry`; the table's TTL must be on the layout's
``ttl_attribute``: ``check-table``). Cost: one ``UpdateItem`` per target rule per deleted item
whose map held entries of it (1 WCU: the item is small), a second one and no read on a conflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from aggregator.core.checkpoint_names import CHECKPOINT_PREFIX
from aggregator.core.engine import CoalescedDelta, LedgerCarry
from aggregator.core.exceptions import WriteError
from aggregator.dynamodb.checkpoint import MAX_RECOVERY_ROUNDS
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.updates import Update, aggregate_attributes
from aggregator.dynamodb.write_parts import WriteParts
from aggregator.dynamodb.write_stats import WriteStats

__all__ = ["LedgerCarries", "ledger_delta"]


def ledger_delta(delta: CoalescedDelta) -> CoalescedDelta:
    """``delta`` (a target rule's change to its target item) as a change to the rule's ledger
    item ``<rule>#<key>`` in the aggregates partition: no target, no target attribute, and an
    item whose value at zero expires (``per_value``: every write removes its TTL, one that
    leaves it at 0 sets it again, :class:`~aggregator.dynamodb.expiry.EmptyValueExpiry`)."""
    return replace(
        delta, ref=replace(delta.ref, target=None), target_attribute=None, per_value=True
    )


class LedgerCarries:
    """Sets a deleted target item's checkpoints on the rule's ledger item (module docstring).

    Parameters
    ----------
    parts
        The writer's parts (requests, cost model, clock).
    retention_seconds
        The checkpoint retention: a ledger item that a carry leaves without a value expires
        this long after the carry.
    """

    def __init__(self, parts: WriteParts, retention_seconds: int) -> None:
        self.parts = parts
        self.retention_seconds = retention_seconds

    def carry(self, carry: LedgerCarry) -> WriteStats:
        """Raise the ledger item's checkpoints to ``carry``'s entries (module docstring).

        Returns
        -------
        WriteStats
            ``ledger_carries`` is 1 when a checkpoint was raised (0 when every one was at or
            past its carried value already).

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            When an update fails other than by its condition (throttling past the retries).
        WriteError
            When the ledger's checkpoints kept changing for the recovery rounds.
        """
        stats = WriteStats()
        delta = ledger_delta(carry.delta)
        wanted = {CHECKPOINT_PREFIX + token: value for token, value in carry.entries.items()}
        held: dict[str, Any] | None = None  # the ledger item as read, after a failed condition
        for _ in range(MAX_RECOVERY_ROUNDS):
            behind = dict(wanted) if held is None else _behind(wanted, held)
            if not behind:
                stats.already_applied += 1
                return stats
            update = self._update(delta, behind, held)
            request = {
                "TableName": self.parts.requests.table_name,
                "Key": self.parts.requests.key(delta),
                **update.render(),
                "ReturnConsumedCapacity": "TOTAL",
                "ReturnValues": "ALL_OLD",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
            extra: dict[str, Any] = dict(behind)  # what the update adds, for its size
            try:
                response = self.parts.requests.call("update_item", request, stats)
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                failed: Mapping[str, Any] = exc.response
                item = failed.get("Item")
                stats.modelled_wcu += self.parts.costs.units(delta, extra, item, applied=False)[0]
                stats.conditional_recoveries += 1
                held = dict(item) if item is not None else self._read(delta, list(wanted), stats)
                continue
            stats.items_written += 1
            stats.ledger_carries += 1
            stats.modelled_wcu += self.parts.costs.units(delta, extra, response.get("Attributes"))[
                0
            ]
            return stats
        raise WriteError(
            f"{delta.ref.sort_key}: the ledger's checkpoints kept changing during "
            f"{MAX_RECOVERY_ROUNDS} recovery rounds (is another consumer writing this shard?)"
        )

    def _update(
        self, delta: CoalescedDelta, behind: Mapping[str, bytes], held: Mapping[str, Any] | None
    ) -> Update:
        """The update that sets the checkpoints ``behind``: on condition that each is below its
        value (first attempt, ``held`` ``None``), or still as ``held`` shows it. The item's
        descriptive attributes too; and its TTL when the value is missing or 0 (on that
        condition; on the first attempt, which assumes so, a value fails it)."""
        layout = self.parts.requests.layout
        update = Update()
        for name, value in behind.items():
            update = update.set(name, {"B": value})
            if held is None:
                update = update.where_missing_or_below(name, {"B": value})
            elif name in held:
                update = update.where_equals(name, dict(held[name]))
            else:
                update = update.where_missing(name)
        for attribute, described in aggregate_attributes(layout, delta).items():
            update = update.set(attribute, described)
        value_attribute = layout.value_attribute
        current = None if held is None else held.get(value_attribute)
        if current is None or current == {"N": "0"}:
            expires = int(self.parts.clock()) + self.retention_seconds
            update = update.set(layout.ttl_attribute, {"N": str(expires)})
            update = update.where_any(
                Update().where_missing(value_attribute),
                Update().where_equals(value_attribute, {"N": "0"}),
            )
        return update

    def _read(self, delta: CoalescedDelta, names: list[str], stats: WriteStats) -> dict[str, Any]:
        """The ledger item's value and the checkpoints ``names``, read strongly consistently
        (an endpoint that returned no item with the failed condition)."""
        requests = self.parts.requests
        projected = [requests.layout.value_attribute, *names]
        placeholders = {f"#a{i}": name for i, name in enumerate(projected)}
        return requests.read_projected(requests.key(delta), placeholders, stats) or {}


def _behind(wanted: Mapping[str, bytes], held: Mapping[str, Any]) -> dict[str, bytes]:
    """The checkpoints of ``wanted`` that the item as ``held`` (DynamoDB JSON) has below their
    wanted value, or not at all (or not as a binary, which no write of the framework leaves)."""
    out = {}
    for name, value in wanted.items():
        found = (held.get(name) or {}).get("B")
        if not isinstance(found, bytes | bytearray) or bytes(found) < value:
            out[name] = value
    return out
