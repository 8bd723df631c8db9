"""Exactly-once aggregates by per-item shard checkpoints (the default write mode).

Every aggregate item remembers, for each stream shard that wrote it, the sequence number up to
which that shard's records are included in its value: attribute ``c#<shard token>``
(:func:`checkpoint_attribute`: 12 characters of a digest of the shard id) holding 21 bytes of
Binary, the sequence number as 17 big-endian bytes followed by the write time in 4 bytes of epoch
seconds (:func:`encode_checkpoint`). DynamoDB compares binary values byte by byte, so the order
is numeric, and the time suffix never changes a ``<`` against a bare 17-byte bound (a longer
value with the same prefix is greater). A checkpoint takes 35 bytes of the item; the first
format (``ck#<shardId>`` = ``"<seq40>@<epoch s>"``) took 91, and is still honoured.

For a batch of one shard, per aggregate item ``X`` (coalesced: summed delta ``D``, sequence
number ``first`` of the first record that touched ``X``, the batch's ``last``):

1. ``UpdateItem``: ``ADD value :D SET ck = :last+now`` on condition
   ``attribute_not_exists(ck) OR ck < :first`` (and the same on the shard's old-format
   checkpoint, which the update removes); 1 WCU for an item under 1 KB, the same as
   at-least-once. Keys whose deltas sum to zero are written too (``ADD 0``) so their checkpoint
   moves: skipping them lets a later redelivery with other batch boundaries re-apply half of them.
2. ``ConditionalCheckFailed`` means an earlier attempt applied part of this batch to ``X``: read
   ``X``'s checkpoint ``c``, recompute ``D`` from the records after ``c`` and update on condition
   ``ck = :c``; nothing after ``c`` means the batch is already in ``X``.
3. Throttled requests are retried with backoff; items still failing make the handler report
   ``batchItemFailures`` from the smallest ``first`` among them. Everything before it is applied
   to every item, and items already past it are protected by their checkpoints.

Invariant on every path: for each aggregate item and shard, the applied records are a prefix of
that shard's records touching the item. It needs in-order, one-batch-at-a-time processing per shard
(``ParallelizationFactor: 1``) and the shard's identity, which Lambda passes only with tumbling
windows (``shardId``).

Pruning: a checkpoint written more than ``checkpoint_retention_seconds`` ago (default 25 hours:
``MaximumRecordAgeInSeconds`` of 24 hours in ``template.yaml`` plus one hour) can no longer
protect anything, because no record it covers can be delivered again (Lambda drops records older
than the maximum record age). Each update returns the item's previous image (``ReturnValues:
ALL_OLD``, no extra request); stale checkpoints of other shards found there are removed by one
conditional ``REMOVE`` when that brings the item under a kilobyte boundary (every later write
then costs less), and otherwise left (they cost nothing below the boundary). So an item carries
the checkpoints of shards that wrote it within the retention, plus at most about a kilobyte of
stale ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from aggregator.core.checkpoint_names import (
    CHECKPOINT_PREFIX,
    SEQUENCE_NUMBER_BYTES,
    checkpoint_attribute,
)
from aggregator.core.engine import BatchDeltas, CoalescedDelta
from aggregator.core.exceptions import WriteError
from aggregator.core.records import SEQUENCE_NUMBER_WIDTH, pad_sequence_number
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.expiry import DEFAULT_EMPTY_VALUE_RETENTION_SECONDS
from aggregator.dynamodb.sizes import typed_attribute_size, typed_item_size, write_units
from aggregator.dynamodb.updates import IndexAction, aggregate_update, prune_update
from aggregator.dynamodb.write_parts import WriteParts
from aggregator.dynamodb.write_stats import WriteStats

# CHECKPOINT_PREFIX, SEQUENCE_NUMBER_BYTES and checkpoint_attribute live in
# aggregator.core.checkpoint_names (the engine reads target items' checkpoint maps too) and are
# importable from here as before.
__all__ = [
    "CHECKPOINT_PREFIX",
    "LEGACY_CHECKPOINT_PREFIX",
    "SEQUENCE_NUMBER_BYTES",
    "CheckpointWrites",
    "checkpoint_attribute",
    "decode_checkpoint",
    "encode_checkpoint",
    "is_checkpoint_attribute",
    "legacy_checkpoint_attribute",
    "parse_checkpoint",
    "shard_applied_to",
]

LEGACY_CHECKPOINT_PREFIX = "ck#"
"""Checkpoints in the first format were ``ck#<shardId>`` = ``"<seq40>@<epoch s>"``
(91 bytes for a DynamoDB shard id); they are still honoured, removed by the next write of their
shard, and pruned by age like the others."""

DEFAULT_CHECKPOINT_RETENTION_SECONDS = DEFAULT_EMPTY_VALUE_RETENTION_SECONDS
"""How long another shard's checkpoint stays on an item: the same bound on redelivery as for an
empty value item (25 hours, over the template's ``MaximumRecordAgeInSeconds``)."""
MAX_RECOVERY_ROUNDS = 5


def legacy_checkpoint_attribute(shard_id: str) -> str:
    """Name of the checkpoint attribute of ``shard_id`` in the first format."""
    return f"{LEGACY_CHECKPOINT_PREFIX}{shard_id}"


def is_checkpoint_attribute(name: str) -> bool:
    """Whether an attribute name is a checkpoint's (either format)."""
    return name.startswith((CHECKPOINT_PREFIX, LEGACY_CHECKPOINT_PREFIX))


def sequence_bytes(sequence_number: str) -> bytes:
    """A sequence number as :data:`SEQUENCE_NUMBER_BYTES` big-endian bytes: DynamoDB compares
    binary values byte by byte, unsigned (Developer Guide, "Supported data types": Binary), so
    byte order is numeric order."""
    return int(sequence_number).to_bytes(SEQUENCE_NUMBER_BYTES, "big")


def encode_checkpoint(sequence_number: str, written_seconds: float) -> bytes:
    """A checkpoint value: the sequence number's 17 bytes, then the write time as 4 bytes of
    epoch seconds (21 bytes; 51 in the old text form). Longer than a bare :func:`sequence_bytes`
    bound with the same prefix, so ``value < bound`` holds exactly when the checkpoint's
    sequence number is below the bound's."""
    return sequence_bytes(sequence_number) + int(written_seconds).to_bytes(4, "big")


def decode_checkpoint(value: Any) -> tuple[str, int]:
    """A checkpoint value of either format -> ``(seq40, epoch seconds)``.

    Raises
    ------
    ValueError
        When the value is in neither form.
    """
    if isinstance(value, bytes | bytearray):
        if len(value) != SEQUENCE_NUMBER_BYTES + 4:
            raise ValueError(f"not a checkpoint value: {bytes(value)!r}")
        number = int.from_bytes(value[:SEQUENCE_NUMBER_BYTES], "big")
        return pad_sequence_number(str(number)), int.from_bytes(value[-4:], "big")
    return parse_checkpoint(str(value))


def parse_checkpoint(value: str) -> tuple[str, int]:
    """``"<seq40>@<epoch seconds>"`` (the first format) -> ``(seq40, epoch seconds)``.

    Raises
    ------
    ValueError
        When the value is not in that form.
    """
    seq, _, written = value.partition("@")
    if len(seq) != SEQUENCE_NUMBER_WIDTH or not seq.isdigit() or not written.isdigit():
        raise ValueError(f"not a checkpoint value: {value!r}")
    return seq, int(written)


def _typed_value(value: Mapping[str, Any]) -> Any:
    return value.get("B", value.get("S"))


def _others(item: Mapping[str, Any], shard_id: str) -> Iterator[tuple[str, Mapping[str, Any], int]]:
    """``(name, value, write time in epoch seconds)`` of every other shard's readable checkpoint
    on ``item`` (DynamoDB JSON; values in neither format are skipped)."""
    own = (checkpoint_attribute(shard_id), legacy_checkpoint_attribute(shard_id))
    for name, value in item.items():
        if not is_checkpoint_attribute(name) or name in own:
            continue
        try:
            _, written = decode_checkpoint(_typed_value(value))
        except ValueError:
            continue
        yield name, value, written


@dataclass(frozen=True, slots=True)
class _Checkpoints:
    """A shard's checkpoint attributes on an item as read (DynamoDB JSON; ``None``: absent)."""

    value: Mapping[str, Any] | None
    legacy: Mapping[str, Any] | None

    def applied_to(self) -> str | None:
        """The 40-digit sequence number up to which the shard's records are in the item."""
        found = []
        for value in (self.value, self.legacy):
            if value is not None:
                try:
                    found.append(decode_checkpoint(_typed_value(value))[0])
                except ValueError:
                    continue
        return max(found) if found else None


def shard_applied_to(item: Mapping[str, Any], shard_id: str) -> str | None:
    """The 40-digit sequence number up to which ``item`` (DynamoDB JSON, as read) includes the
    records of ``shard_id``, by its checkpoint in either format; ``None`` without one."""
    return _Checkpoints(
        item.get(checkpoint_attribute(shard_id)), item.get(legacy_checkpoint_attribute(shard_id))
    ).applied_to()


class CheckpointWrites:
    """The exactly-once protocol for aggregate items through per-item shard checkpoints (module
    docstring; an :class:`~aggregator.dynamodb.write_parts.ItemProtocol`).

    Parameters
    ----------
    parts
        The writer's requests, cost model, index membership, expiry, clock and routing.
    retention_seconds
        Age in seconds after which another shard's checkpoint on an item is pruned. Must exceed
        the event source mapping's ``MaximumRecordAgeInSeconds``.
    """

    needs_shard = True

    def __init__(
        self, parts: WriteParts, retention_seconds: int = DEFAULT_CHECKPOINT_RETENTION_SECONDS
    ) -> None:
        self.parts = parts
        self.retention_seconds = retention_seconds

    def select(self, batch: BatchDeltas, stats: WriteStats) -> list[CoalescedDelta]:
        """Every delta of the batch, zero ones too: their checkpoint moves (module docstring)."""
        return list(batch.deltas.values())

    def checkpoint_value(self, last: str) -> bytes:
        """The checkpoint of a batch ending at ``last``, written now."""
        return encode_checkpoint(last, self.parts.clock())

    def _request(
        self,
        delta: CoalescedDelta,
        amount: Decimal,
        count: Decimal,
        shard_id: str,
        last: str,
        current: _Checkpoints | None,
        index: IndexAction = "set",
    ) -> dict[str, Any]:
        """The conditional update: on condition that the shard's checkpoint is below the item's
        first record in the batch (``current`` is ``None``), or still what was read (``current``:
        recovery). It also removes the shard's checkpoint in the old format, whose condition it
        checks the same way (the new checkpoint covers at least as much)."""
        requests = self.parts.requests
        ck = checkpoint_attribute(shard_id)
        legacy = legacy_checkpoint_attribute(shard_id)
        update = (
            aggregate_update(requests.layout, delta, amount, count, index=index)
            .set(ck, {"B": self.checkpoint_value(last)})
            .remove(legacy)
        )
        if current is None:
            update = update.where_missing_or_below(
                ck, {"B": sequence_bytes(delta.first_sequence_number)}
            ).where_missing_or_below(
                legacy, {"S": pad_sequence_number(delta.first_sequence_number)}
            )
        else:
            for name, value in ((ck, current.value), (legacy, current.legacy)):
                update = (
                    update.where_missing(name)
                    if value is None
                    else update.where_equals(name, dict(value))
                )
        return {
            "TableName": requests.table_name,
            "Key": requests.key(delta),
            **update.render(),
            "ReturnConsumedCapacity": "TOTAL",
            "ReturnValues": "ALL_OLD",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _current_checkpoint(
        self, delta: CoalescedDelta, shard_id: str, failure: ClientError, stats: WriteStats
    ) -> _Checkpoints:
        # botocore-stubs' error response does not declare the "Item" that DynamoDB adds for
        # ReturnValuesOnConditionCheckFailure
        error_response: Mapping[str, Any] = failure.response
        ck = checkpoint_attribute(shard_id)
        legacy = legacy_checkpoint_attribute(shard_id)
        item = error_response.get("Item")
        if item is None:  # endpoints that do not return the item on a failed condition
            requests = self.parts.requests
            names = {"#ck": ck, "#legacy": legacy}
            item = requests.read_projected(requests.key(delta), names, stats) or {}
        return _Checkpoints(item.get(ck), item.get(legacy))

    def write(self, delta: CoalescedDelta, shard_id: str | None, last: str) -> WriteStats:
        """Write ``delta`` on condition of the shard's checkpoint, recovering from a failed
        condition (module docstring), then keep the item's index membership, feed the heat
        meter, prune stale checkpoints and expire an empty value item.

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            When the update fails other than by its condition.
        WriteError
            When the checkpoint kept changing for :data:`MAX_RECOVERY_ROUNDS` rounds.
        """
        assert shard_id is not None
        membership = self.parts.membership
        stats = WriteStats()
        amount, count = delta.amount, delta.count
        floor = membership.floor(delta)  # the same for every attempt: it decides the update's shape
        index = membership.action(delta, floor)
        # the checkpoints the next attempt expects (None: below the batch's first record)
        expected: _Checkpoints | None = None
        for _ in range(MAX_RECOVERY_ROUNDS):
            request = self._request(delta, amount, count, shard_id, last, expected, index)
            try:
                response = self.parts.requests.call("update_item", request, stats)
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                recovery = self._recover(delta, shard_id, last, floor, exc, stats)
                if recovery is None:
                    return stats
                expected, amount, count = recovery
                continue
            self._applied(delta, shard_id, last, response, amount, floor, index, stats)
            return stats
        raise WriteError(
            f"{delta.ref.sort_key}: checkpoint kept changing during {MAX_RECOVERY_ROUNDS} "
            "recovery rounds (is another consumer writing this shard?)"
        )

    def _recover(
        self,
        delta: CoalescedDelta,
        shard_id: str,
        last: str,
        floor: Decimal | None,
        failure: ClientError,
        stats: WriteStats,
    ) -> tuple[_Checkpoints | None, Decimal, Decimal] | None:
        """After the update's condition failed: ``(checkpoints expected, amount, count)`` of the
        next attempt (the records after the shard's checkpoint on the item), or ``None`` when
        the batch is already in the item."""
        # a failed conditional write still consumes write capacity (the item's size)
        failed: Mapping[str, Any] = failure.response
        total, _ = self.parts.costs.units(
            delta, self._checkpoint_extra(shard_id, last), failed.get("Item"), applied=False
        )
        stats.modelled_wcu += total
        current = self._current_checkpoint(delta, shard_id, failure, stats)
        applied_to = current.applied_to()
        if applied_to is None:  # checkpoint vanished meanwhile: start over
            return None, delta.amount, delta.count
        stats.conditional_recoveries += 1
        if not any(pad_sequence_number(s) > applied_to for s, _ in delta.parts):
            stats.already_applied += 1
            if delta.leaderboard:  # a crash may have come between update and fix
                self.parts.membership.check(delta, floor, failed.get("Item"), stats)
            return None
        return current, delta.amount_after(applied_to), delta.count_after(applied_to)

    def _applied(
        self,
        delta: CoalescedDelta,
        shard_id: str,
        last: str,
        response: Mapping[str, Any],
        amount: Decimal,
        floor: Decimal | None,
        index: IndexAction,
        stats: WriteStats,
    ) -> None:
        """Count an applied update of ``amount`` and do what follows it."""
        parts = self.parts
        stats.items_written += 1
        old = response.get("Attributes") or {}
        total, index_units = parts.costs.units(
            delta,
            self._checkpoint_extra(shard_id, last),
            old,
            removed=(legacy_checkpoint_attribute(shard_id),),
            index=index,
        )
        stats.modelled_wcu += total
        stats.modelled_index_wcu += index_units
        parts.membership.after_update(delta, floor, index, old, amount, stats)
        self._observe_heat(delta, shard_id, old)
        self._prune(delta, shard_id, old, stats)
        parts.expiry.after_update(delta, old, amount, stats)

    def _observe_heat(self, delta: CoalescedDelta, shard_id: str, old: Mapping[str, Any]) -> None:
        """Tell the routing's heat meter of a write of a ``write_shards: auto`` rule's item:
        for the aggregate, its size and how many other shards wrote it within the meter's window
        (their checkpoints' times in ``ALL_OLD``)."""
        routing = self.parts.routing
        if routing is None or not delta.auto_shards:
            return
        now = self.parts.clock()
        if delta.slot is not None:
            routing.heat.record(shard_id, delta.ref.rule, now)
            return
        horizon = now - routing.heat.window_seconds
        writers = 1 + sum(written >= horizon for _, _, written in _others(old, shard_id))
        units = write_units(typed_item_size(old)) if old else 1
        routing.heat.record(shard_id, delta.ref.rule, now, units, writers)

    def _checkpoint_extra(self, shard_id: str, last: str) -> dict[str, Any]:
        return {checkpoint_attribute(shard_id): self.checkpoint_value(last)}

    def _prune(
        self, delta: CoalescedDelta, shard_id: str, old: Mapping[str, Any], stats: WriteStats
    ) -> None:
        horizon = self.parts.clock() - self.retention_seconds
        own = (checkpoint_attribute(shard_id), legacy_checkpoint_attribute(shard_id))
        stale = {
            name: dict(value)
            for name, value, written in _others(old, shard_id)
            if written < horizon
        }
        if not stale:
            return
        # Removing stale checkpoints costs a write; it pays only when it brings the item under a
        # kilobyte boundary (1 WCU per started KB on every later write). Until then they stay:
        # an item holds at most a kilobyte's worth of them.
        # the item as this update left it: without the shard's old checkpoints, with its new one
        kept = {name: value for name, value in old.items() if name not in own}
        size = typed_item_size(kept) + len(own[0]) + SEQUENCE_NUMBER_BYTES + 4
        stale_bytes = sum(
            len(name.encode("utf-8")) + typed_attribute_size(value) for name, value in stale.items()
        )
        if write_units(size) == write_units(size - stale_bytes):
            return
        # best effort: the aggregate update itself succeeded; the next update tries again
        if not self.parts.requests.best_effort(delta, prune_update(stale), stats):
            return
        stats.pruned_checkpoints += len(stale)
        stats.modelled_wcu += write_units(size)
