"""Writing a target rule's sum onto the application's own items (:class:`~aggregator.core.rules.
Target`): ``ADD likeTally`` on the post's ``META`` item, never creating it, exactly once.

The update
----------
One ``UpdateItem`` per target item and batch, as for aggregate items::

    ADD <attribute> :delta  SET <map>.<shard token> = :checkpoint
    condition  attribute_exists(<partition key>)
               AND attribute_exists(<map>.<token>) AND <map>.<token> < :first

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
  in the aggregates partition, written with the same protocol (whose value at zero expires
  after the checkpoint retention: :func:`~aggregator.dynamodb.ledger_carries.ledger_delta`),
  and ``missing_targets`` counts it. ``aggregator query list RULE`` lists the ledger: per
  target key, the sum of the deltas that found no item (likes outliving their post, or unlikes
  after it).
* **the attribute (or the map) is of another type** (``likeTally = "lots"``, which ``ADD``
  refuses with a ``ValidationException``; the same read tells): the item cannot hold the sum, so
  the delta goes to the ledger as for a missing item, ``unusable_targets`` counts it, and the
  shard moves on. Once the application fixes the attribute, ``aggregator reconcile --repair``
  brings the item's sum back.
* **no map yet** (the item's first write): ``SET <map> = {token: checkpoint}`` with the
  ``ADD``, on condition ``attribute_not_exists(<map>)``, starting from the ledger's checkpoint
  (below, "First write of a shard"). DynamoDB refuses a ``SET`` of a path inside a missing map
  (``ValidationException``), hence this one extra request per item.
* **no entry of this (rule, shard)** (the shard's first write of the item): the ``ADD`` with
  ``SET <map>.<token>``, on condition ``attribute_not_exists(<map>.<token>) AND size(<map>) <
  :max_entries``, starting from the ledger's checkpoint (below).
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
starts from what the application writes (below).

First write of a shard
----------------------
An item with no entry of the (rule, shard) (no map, or a map without it: a new item, a
re-created one, or a shard that never wrote it) may still meet records of the shard that are
accounted for elsewhere: in the rule's ledger (they found no item, before it was created or
after an earlier item of the key was deleted) or, through a carry (below), on a deleted item of
the same key. The ledger item's ``c#<shard token>`` says up to which record that holds: on this
path only, one strongly consistent ``GetItem`` of the ledger item projects it (and its old
format, :meth:`TargetItems.ledger_checkpoint`). When it is at or past the delta's first record,
the delta is recomputed from the records after it, as the protocol's recovery does, and the
entry is written as the larger of the batch's last record and the ledger's checkpoint, with an
``ADD 0`` when nothing is left (so the shard's next batches take the steady path). A record
accounted for in the ledger, or carried, is thus never added to the item too: a re-created post
gets none of the likes counted on the deleted one when they are delivered again (``run
--from-start``), and likes that went to the ledger before the post existed stay there only.

Cost: once per target item and (rule, shard), the steady-state update's condition fails (1 WCU,
charged), then the map's read, the ledger's read (1 RCU each: strongly consistent, small
items), and the write; later batches of the shard take the steady path, with nothing more. As
exact as the carries: a redelivery processed before the delete's ``REMOVE`` finds a ledger
checkpoint that does not yet hold the old item's (below, "not").

After the delete
----------------
Deleting the item deletes its map: a batch delivered again afterwards (a Lambda retry, ``run
--from-start``, a stale redelivery) finds no item, and its deltas go to the ledger, whose own
checkpoints have never seen the records that reached the item. The map outlives the item in one
place, the delete's stream record: a ``REMOVE`` whose ``OldImage`` holds it (TTL deletes too;
the first filter of :mod:`aggregator.deploy.filters` passes every record of an application item,
on both layouts). In the ``exactly-once`` and ``window`` modes the engine reads it there
(:mod:`aggregator.core.ledger_carries`) and the writer sets each of the rule's entries on the
rule's ledger item as the shard's ``c#<token>`` checkpoint, the larger of the ledger's and the
carried value, before the batch's deltas (:mod:`aggregator.dynamodb.ledger_carries`; in the
``window`` mode at the ``REMOVE``'s invocation, not at the window's end). A redelivered delta
that finds no item then meets that checkpoint on the ledger, and the protocol's recovery adds
only the records after it: those that never reached the item. A carry that fails retries the
batch from the ``REMOVE`` (or from the first record of a delta aimed at the deleted item in the
same batch, which is held back with it).

What is promised, exactly:

* **Exact** when the ``REMOVE`` record is processed before the redelivery reaches the ledger:
  ``run --from-start``, a stale redelivery, and a retried batch that holds the ``REMOVE`` itself
  (the carry is written before the batch's deltas).
* **Not** when the redelivery is processed first: within the item's shard's iterator age after
  the delete (until its ``REMOVE`` is processed), a batch delivered again (a Lambda retry of a
  batch that wrote the item and failed, with the delete made meanwhile and the ``REMOVE`` not in
  the retried batch; a batch of another shard delivered again before the item's shard reaches
  the delete) still adds to the ledger the records of it that reached the item: counted twice.
* **At-least-once mode** keeps no checkpoints and promises nothing here.
* **Bounded**: the ledger item carries at most one checkpoint per shard (35 bytes each, as any
  aggregate item), each with the time it was written on the item, pruned after the checkpoint
  retention like the ledger's own. A ledger item that only a carry wrote has no value: it
  expires after the checkpoint retention (its TTL; any later ledger delta removes it, and one
  that brings the ledger back to 0 sets it again), so it never stays as a zero entry.
* **Cost**: one ``UpdateItem`` per target rule per deleted item whose map held entries of it
  (1 WCU); a second one on a conflict (a checkpoint already at or past the carried one, or a
  value on the ledger), and a read only on an endpoint that does not return the item with a
  failed condition.

A map the application rewrote in a form the framework does not write (an entry's name or value,
or the attribute's type) carries nothing: such entries are counted, not dead-lettered
(:mod:`aggregator.core.ledger_carries`). An item whose key values fit the rule's templates in
more than one way (a value holding the templates' separator) has no one ledger key: its entries
carry nothing either.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from aggregator.core.checkpoint_names import rule_token, target_token
from aggregator.core.engine import BatchDeltas, CoalescedDelta
from aggregator.core.exceptions import WriteError
from aggregator.core.layout import TableLayout
from aggregator.core.records import pad_sequence_number
from aggregator.dynamodb.checkpoint import (
    MAX_RECOVERY_ROUNDS,
    CheckpointWrites,
    checkpoint_attribute,
    decode_checkpoint,
    encode_checkpoint,
    legacy_checkpoint_attribute,
    sequence_bytes,
    shard_applied_to,
)
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.ledger_carries import ledger_delta
from aggregator.dynamodb.sizes import write_units
from aggregator.dynamodb.updates import Update, prune_update
from aggregator.dynamodb.write_parts import ItemProtocol, WriteParts
from aggregator.dynamodb.write_stats import WriteStats

__all__ = [
    "MAX_TARGET_CHECKPOINTS",
    "TargetAtLeastOnceWrites",
    "TargetCheckpointWrites",
    "TargetItems",
    "rule_token",
    "target_token",
]


class _NoEntry:
    """The attempt that writes the shard's first entry on the item: on condition that the entry
    is still missing and the map has room (:data:`NO_ENTRY`)."""


NO_ENTRY = _NoEntry()
Expected = dict[str, Any] | None | _NoEntry
"""What an attempt's condition expects of the shard's entry: below the batch's first record
(``None``), missing (:data:`NO_ENTRY`), or still the value read (recovery)."""

MAX_TARGET_CHECKPOINTS = 16
"""Most entries of the checkpoint map on a target item, across the rules that target it (about 41
bytes each: an 18-character name, a 21-byte binary value and DynamoDB's per-element overhead)."""


class TargetItems:
    """What both target protocols share: the item's key, its requests, the ``GetItem`` of the
    map, the ledger and the capacity of a write.

    Parameters
    ----------
    parts
        The writer's parts (requests, layout, clock).
    ledger
        The mode's protocol for aggregate items, which writes a delta whose target is missing
        or unusable to the rule's ledger item.
    """

    def __init__(self, parts: WriteParts, ledger: ItemProtocol) -> None:
        self.parts = parts
        self.layout: TableLayout = parts.requests.layout
        self.ledger = ledger

    def key(self, delta: CoalescedDelta) -> dict[str, Any]:
        """The key of ``delta``'s target item (DynamoDB JSON)."""
        assert delta.ref.target is not None
        return dict(self.layout.target_key(delta.ref.target))

    def send(
        self,
        delta: CoalescedDelta,
        update: Update,
        stats: WriteStats,
        *,
        returning: str | None = None,
    ) -> dict[str, Any]:
        """One ``UpdateItem`` of ``update`` on ``delta``'s target item (``ReturnValues``
        ``returning``, if given).

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            As :meth:`~aggregator.dynamodb.item_requests.ItemRequests.call`.
        """
        request: dict[str, Any] = {
            "TableName": self.parts.requests.table_name,
            "Key": self.key(delta),
            "ReturnConsumedCapacity": "TOTAL",
            **({} if returning is None else {"ReturnValues": returning}),
            **update.render(),
        }
        return self.parts.requests.call("update_item", request, stats)

    def _get(
        self, delta: CoalescedDelta, names: dict[str, str], stats: WriteStats, *, capacity: bool
    ) -> dict[str, Any] | None:
        """The target item's ``names`` (placeholders), read strongly consistently."""
        return self.parts.requests.read_projected(self.key(delta), names, stats, capacity=capacity)

    def read_map(
        self, delta: CoalescedDelta, stats: WriteStats
    ) -> tuple[bool, dict[str, Any] | None]:
        """``(exists, checkpoint map in DynamoDB JSON or None)`` of the target item, read
        strongly consistently (only its partition key and the map: a projection the
        attribute-limited policy allows)."""
        names = {"#pk": self.layout.partition_key, "#m": self.layout.target_checkpoints_attribute}
        item = self._get(delta, names, stats, capacity=True)
        if item is None:
            return False, None
        found = item.get(self.layout.target_checkpoints_attribute)
        return True, (dict(found["M"]) if found and "M" in found else None)

    def ledger_checkpoint(
        self, delta: CoalescedDelta, shard_id: str, stats: WriteStats
    ) -> str | None:
        """The 40-digit sequence number up to which the rule's ledger item for ``delta``'s
        target accounts for ``shard_id``'s records (its ``c#<shard token>``, written by the
        ledger's own deltas or by a carry), ``None`` without one: one strongly consistent
        ``GetItem`` of the ledger item projecting that checkpoint (and its old format), made
        only for a target item's first write of a shard (module docstring, "First write of a
        shard")."""
        requests = self.parts.requests
        names = {
            "#ck": checkpoint_attribute(shard_id),
            "#legacy": legacy_checkpoint_attribute(shard_id),
        }
        item = requests.read_projected(
            requests.key(ledger_delta(delta)), names, stats, capacity=True
        )
        return shard_applied_to(item or {}, shard_id)

    def to_ledger(
        self,
        delta: CoalescedDelta,
        shard_id: str | None,
        last: str,
        stats: WriteStats,
        *,
        unusable: bool = False,
    ) -> WriteStats:
        """Write ``delta`` to the rule's ledger item instead of its target (missing, or
        ``unusable``: holding the attribute as another type), with the mode's protocol for
        aggregate items; counted in ``missing_targets`` or ``unusable_targets``."""
        if unusable:
            stats.unusable_targets += 1
        else:
            stats.missing_targets += 1
        # the ledger's delta has no target attribute: the mode's aggregate-item protocol
        stats.add(self.ledger.write(ledger_delta(delta), shard_id, last))
        return stats

    def unusable(self, delta: CoalescedDelta, exc: ClientError, stats: WriteStats) -> bool:
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
        item = self._get(delta, names, stats, capacity=False) or {}
        held = item.get(attribute)
        checkpoints = item.get(self.layout.target_checkpoints_attribute)
        return (held is not None and "N" not in held) or (
            checkpoints is not None and "M" not in checkpoints
        )

    def written(
        self, delta: CoalescedDelta, response: Mapping[str, Any], stats: WriteStats
    ) -> None:
        """Count a successful write of ``delta``'s target item: what the endpoint reports
        (``ReturnConsumedCapacity``: DynamoDB and DynamoDB Local size it by the whole item,
        which the framework never reads), else :meth:`units`."""
        stats.items_written += 1
        stats.target_writes += 1
        stats.modelled_wcu += self.charged(response, delta)

    def charged(self, response: Mapping[str, Any], delta: CoalescedDelta) -> int:
        """WCU of a successful write of ``delta``'s target item (:meth:`written`)."""
        units = (response.get("ConsumedCapacity") or {}).get("CapacityUnits")
        return math.ceil(units) if units else self.units(delta)

    def units(self, delta: CoalescedDelta) -> int:
        """Modelled WCU of one update of a target item, from what the framework knows of it
        (its key, the attribute, a checkpoint); the application's own attributes add to it on a
        large item (DynamoDB charges by item size, Developer Guide, "Read/write capacity
        mode"), which :meth:`charged` counts for a write that succeeded. A write whose condition
        failed is charged too, and reported by no endpoint."""
        assert delta.ref.target is not None
        size = sum(len(v.encode("utf-8")) for v in delta.ref.target) + len(
            self.layout.partition_key
        )
        size += len(str(delta.target_attribute)) + 21
        return write_units(size)


class TargetAtLeastOnceWrites:
    """At-least-once writes of target rules' deltas: ``ADD`` on condition
    ``attribute_exists(<partition key>)``; a missing target's delta goes to the rule's ledger
    (module docstring). An :class:`~aggregator.dynamodb.write_parts.ItemProtocol` for the deltas
    with a target attribute."""

    needs_shard = False

    def __init__(self, items: TargetItems) -> None:
        self.items = items

    def select(self, batch: BatchDeltas, stats: WriteStats) -> list[CoalescedDelta]:
        """As the ledger's protocol selects."""
        return self.items.ledger.select(batch, stats)

    def write(self, delta: CoalescedDelta, shard_id: str | None, last: str) -> WriteStats:
        """``ADD`` ``delta`` to its target item (or its ledger).

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            When the update fails other than by its condition or an unusable item.
        """
        items = self.items
        stats = WriteStats()
        update = Update().add(str(delta.target_attribute), delta.amount)
        try:
            response = items.send(delta, update.where_exists(items.layout.partition_key), stats)
        except ClientError as exc:
            if items.unusable(delta, exc, stats):
                return items.to_ledger(delta, shard_id, last, stats, unusable=True)
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            stats.modelled_wcu += items.units(delta)
            return items.to_ledger(delta, shard_id, last, stats)
        items.written(delta, response, stats)
        return stats


class TargetCheckpointWrites:
    """Exactly-once writes of target rules' deltas through the item's checkpoint map (module
    docstring). An :class:`~aggregator.dynamodb.write_parts.ItemProtocol` for the deltas with a
    target attribute.

    Parameters
    ----------
    items
        The target items' requests and ledger (a :class:`CheckpointWrites` ledger).
    checkpoints
        The aggregate items' protocol, whose checkpoint values and retention the map's entries
        share.
    """

    needs_shard = True

    def __init__(self, items: TargetItems, checkpoints: CheckpointWrites) -> None:
        self.items = items
        self.checkpoints = checkpoints

    def select(self, batch: BatchDeltas, stats: WriteStats) -> list[CoalescedDelta]:
        """As the checkpointed protocol selects (zero deltas too)."""
        return self.checkpoints.select(batch, stats)

    def _update(
        self,
        delta: CoalescedDelta,
        amount: Decimal,
        entry: tuple[str, str],
        checkpoint: Mapping[str, Any],
        expected: Expected,
    ) -> Update:
        """The conditional ``ADD`` of ``amount`` that sets the shard's entry (module docstring):
        on condition that the entry is below the batch's first record (``expected`` ``None``:
        the steady state), or missing with room in the map (:data:`NO_ENTRY`: the shard's first
        write, after the ledger was read), or (in recovery) still the value read."""
        update = Update().add(str(delta.target_attribute), amount).set(entry, dict(checkpoint))
        update = update.where_exists(self.items.layout.partition_key)
        if isinstance(expected, _NoEntry):
            return update.where_missing(entry).where_size_below(entry[0], MAX_TARGET_CHECKPOINTS)
        if expected is not None:
            return update.where_equals(entry, expected)
        first = {"B": sequence_bytes(delta.first_sequence_number)}
        return update.where_exists(entry).where_below(entry, first)

    def _first_write(
        self, delta: CoalescedDelta, shard_id: str, last: str, stats: WriteStats
    ) -> tuple[Decimal, dict[str, Any]]:
        """``(amount, checkpoint)`` of the item's first write of the shard: the records after
        the ledger's checkpoint of the shard and ``max(last, that checkpoint)`` when it is at or
        past the batch's first record, else the whole delta and ``last`` (module docstring,
        "First write of a shard")."""
        checkpoint = {"B": self.checkpoints.checkpoint_value(last)}
        accounted = self.items.ledger_checkpoint(delta, shard_id, stats)
        if accounted is None or accounted < pad_sequence_number(delta.first_sequence_number):
            return delta.amount, checkpoint
        stats.conditional_recoveries += 1
        if accounted > pad_sequence_number(last):
            checkpoint = {"B": encode_checkpoint(accounted, self.items.parts.clock())}
        if not any(pad_sequence_number(s) > accounted for s, _ in delta.parts):
            stats.already_applied += 1  # in the ledger, or carried: only the entry is written
        return delta.amount_after(accounted), checkpoint

    def write(self, delta: CoalescedDelta, shard_id: str | None, last: str) -> WriteStats:
        """Write ``delta`` to its target item exactly once (or to its ledger).

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            When an update fails other than by its condition or an unusable item.
        WriteError
            When the map kept changing for the recovery rounds.
        """
        assert shard_id is not None
        items = self.items
        stats = WriteStats()
        token = target_token(delta.ref.rule, shard_id)
        entry = (items.layout.target_checkpoints_attribute, token)
        checkpoint: dict[str, Any] = {"B": self.checkpoints.checkpoint_value(last)}
        amount = delta.amount
        expected: Expected = None  # the steady state: the shard's entry below the first record
        first_write: list[tuple[Decimal, dict[str, Any]]] = []  # the ledger read, at most once

        def seeded() -> tuple[Decimal, dict[str, Any]]:
            if not first_write:
                first_write.append(self._first_write(delta, shard_id, last, stats))
            return first_write[0]

        for _ in range(MAX_RECOVERY_ROUNDS + 2):
            update = self._update(delta, amount, entry, checkpoint, expected)
            try:
                response = items.send(delta, update, stats, returning="UPDATED_OLD")
            except ClientError as exc:
                if items.unusable(delta, exc, stats):
                    return items.to_ledger(delta, shard_id, last, stats, unusable=True)
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                stats.modelled_wcu += items.units(delta)  # a failed write is charged
                attempt = (expected, amount, checkpoint)
                following = self._recover(delta, shard_id, last, token, attempt, seeded, stats)
                if following is None:
                    return stats
                expected, amount, checkpoint = following
                continue
            items.written(delta, response, stats)
            return stats
        raise WriteError(
            f"{delta.ref.display_key}: the target's checkpoint map kept changing during "
            f"{MAX_RECOVERY_ROUNDS} recovery rounds (is another consumer writing this shard?)"
        )

    def _recover(
        self,
        delta: CoalescedDelta,
        shard_id: str,
        last: str,
        token: str,
        attempt: tuple[Expected, Decimal, dict[str, Any]],
        seeded: Callable[[], tuple[Decimal, dict[str, Any]]],
        stats: WriteStats,
    ) -> tuple[Expected, Decimal, dict[str, Any]] | None:
        """After the condition of ``attempt`` (its expected entry, amount and checkpoint)
        failed, read the map and act on why (module docstring): ``None`` when the delta is done
        with (written, already in the item, or in the ledger), else the next attempt's
        ``(expected entry, amount, checkpoint)``. ``seeded`` gives the amount and checkpoint of
        the shard's first write on the item (reading the ledger's checkpoint once)."""
        items = self.items
        _, _, checkpoint = attempt
        exists, entries = items.read_map(delta, stats)
        if not exists:
            items.to_ledger(delta, shard_id, last, stats)
            return None
        if entries is None:
            amount, checkpoint = seeded()
            try:
                if self._create_map(delta, amount, token, checkpoint, stats):
                    return None
            except ClientError as first_write:
                if not items.unusable(delta, first_write, stats):
                    raise
                items.to_ledger(delta, shard_id, last, stats, unusable=True)
                return None
            return NO_ENTRY, amount, checkpoint  # a map appeared meanwhile (or the item went)
        own = entries.get(token)
        if own is not None:
            applied_to, _ = decode_checkpoint(own.get("B"))
            stats.conditional_recoveries += 1
            if not any(pad_sequence_number(s) > applied_to for s, _ in delta.parts):
                stats.already_applied += 1
                return None
            return dict(own), delta.amount_after(applied_to), checkpoint
        amount, checkpoint = seeded()
        if len(entries) >= MAX_TARGET_CHECKPOINTS:
            self._make_room(delta, entries, stats)
        return NO_ENTRY, amount, checkpoint

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
        items = self.items
        checkpoints = items.layout.target_checkpoints_attribute
        update = (
            Update()
            .add(str(delta.target_attribute), amount)
            .set(checkpoints, {"M": {token: dict(checkpoint)}})
            .where_exists(items.layout.partition_key)
            .where_missing(checkpoints)
        )
        response = self._conditional(delta, update, stats)
        if response is None:
            stats.modelled_wcu += items.units(delta)
            return False
        items.written(delta, response, stats)
        return True

    def _make_room(
        self, delta: CoalescedDelta, entries: Mapping[str, Any], stats: WriteStats
    ) -> None:
        """Remove the map's entries older than the checkpoint retention, or else its oldest one
        (module docstring); each on condition that it is unchanged."""
        items = self.items
        horizon = items.parts.clock() - self.checkpoints.retention_seconds
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
        update = prune_update(
            {name: entries[name] for name in stale},
            within=items.layout.target_checkpoints_attribute,
        )
        response = self._conditional(delta, update, stats)
        if response is None:
            return  # changed meanwhile: the next round reads it again
        stats.modelled_wcu += items.charged(response, delta)
        stats.pruned_checkpoints += len(stale)
        stats.target_checkpoints_evicted += evicted

    def _conditional(
        self, delta: CoalescedDelta, update: Update, stats: WriteStats
    ) -> dict[str, Any] | None:
        """:meth:`TargetItems.send`, ``None`` when its condition failed.

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            For any other failure.
        """
        try:
            return self.items.send(delta, update, stats)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return None
