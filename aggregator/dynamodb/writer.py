"""Applies coalesced deltas to the aggregates partition (the modules here and in
:mod:`aggregator.dynamodb.checkpoint` are the only ones that write aggregates).

Modes
-----
``exactly-once`` (default, :class:`~aggregator.dynamodb.checkpoint.CheckpointWriter`)
    One conditional ``UpdateItem`` per aggregate item per batch that also records, per stream
    shard, the sequence number up to which the item includes that shard's records.
``window`` (``CheckpointWriter`` driven by the processor's window flush)
    The same updates, once per tumbling window instead of once per batch.
``at-least-once`` (:class:`AtLeastOnceWriter`)
    One unconditional ``UpdateItem ... ADD #value :delta`` per aggregate item per batch; a batch
    that Lambda delivers again is added again.

Cost model
----------
Each write's modelled capacity follows DynamoDB's pricing rules (Developer Guide, "Read/write
capacity mode" and "Item sizes and formats"): 1 WCU per started KB of the larger of the item's
sizes before and after the update (the size before comes from the ``ALL_OLD`` image every update
asks for, so other shards' checkpoints on the item count), and for items in
the leaderboard GSI 2 more per non-zero update, since changing the indexed ``value`` deletes and
re-puts the index entry (Developer Guide, "Provisioned throughput considerations for GSIs"); the
first write of an item costs only 1 there, so the index figure is an upper bound.
``reported_wcu`` is what the endpoint answered in ``ConsumedCapacity``; DynamoDB Local's figures
are not AWS's, so both are kept.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.engine import BatchDeltas, CoalescedDelta
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import (
    DEFAULT_LAYOUT,
    PARTIAL_PREFIX,
    TableLayout,
)
from aggregator.core.numbers import add
from aggregator.core.records import deserialize_value, pad_sequence_number
from aggregator.dynamodb.errors import THROTTLING_ERRORS, error_code
from aggregator.dynamodb.floors import IndexFloors
from aggregator.dynamodb.routing import ShardRouting
from aggregator.dynamodb.updates import (
    IndexAction,
    Update,
    aggregate_attributes,
    aggregate_counters,
    aggregate_update,
    index_partition,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = [
    "AtLeastOnceWriter",
    "WriteObservation",
    "WriteResult",
    "WriteStats",
    "Writer",
    "attribute_size",
    "item_size",
    "typed_attribute_size",
    "typed_item_size",
]

DEFAULT_EMPTY_VALUE_RETENTION_SECONDS = 25 * 3600
"""How long a value item whose count fell to zero stays before its TTL lets DynamoDB delete it
(:meth:`BaseWriter._expire_if_empty`): longer than the template's
``MaximumRecordAgeInSeconds`` (24 hours), like the checkpoint retention."""

MAX_ITEM_BYTES = 400 * 1024
"""DynamoDB's item size limit (Developer Guide, "Service quotas": 400 KB)."""


def _number_size(value: Decimal) -> int:
    digits = value.normalize().as_tuple().digits if value != 0 else (0,)
    return math.ceil(len(digits) / 2) + 1


def attribute_size(value: Any) -> int:
    """Bytes a deserialized attribute value takes, per DynamoDB's item-size rules.

    Strings and binary: their UTF-8 / byte length; numbers: 1 byte per two significant digits
    plus 1; booleans and null: 1; lists and maps: 3 bytes plus 1 per element plus their contents.
    """
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, Decimal | int):
        return _number_size(Decimal(value))
    if isinstance(value, Mapping):
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return 3 + sum(attribute_size(v) + 1 for v in value)
    raise TypeError(f"unsupported attribute value type {type(value).__name__}")


def item_size(item: Mapping[str, Any]) -> int:
    """Size in bytes of an item of deserialized values: attribute names plus values."""
    return sum(len(name.encode("utf-8")) + attribute_size(v) for name, v in item.items())


def typed_attribute_size(value: Mapping[str, Any]) -> int:
    """:func:`attribute_size` of a value in DynamoDB JSON (``{"N": "12"}``, ``{"B": b"..."}``)."""
    (kind, inner), *_ = value.items()
    if kind == "S":
        return len(str(inner).encode("utf-8"))
    if kind == "N":
        return _number_size(Decimal(inner))
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + typed_attribute_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(typed_attribute_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        element = {"SS": "S", "NS": "N", "BS": "B"}[kind]
        return sum(typed_attribute_size({element: v}) for v in inner)
    raise TypeError(f"unsupported attribute value type {kind!r}")


def typed_item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """:func:`item_size` of an item in DynamoDB JSON (an ``ALL_OLD`` image, say)."""
    return sum(len(name.encode("utf-8")) + typed_attribute_size(v) for name, v in item.items())


def _sizes(
    value_attribute: str,
    amount: Decimal,
    written: dict[str, Any],
    old: Mapping[str, Mapping[str, Any]] | None,
    removed: tuple[str, ...],
    applied: bool,
) -> tuple[int, int]:
    """``(before, after)`` bytes of an item that an update writes ``written`` to (deserialized,
    its value attribute the delta's ``amount``), removing ``removed``, when it was ``old``
    (DynamoDB JSON; ``None`` or empty: a new item). ``applied=False``: the item is unchanged."""
    if not old:
        return 0, item_size(written)
    before = typed_item_size(old)
    sizes = {
        name: len(name.encode("utf-8")) + typed_attribute_size(value)
        for name, value in old.items()
        if name not in removed
    }
    if applied:
        previous = old.get(value_attribute, {}).get("N")
        written[value_attribute] = amount if previous is None else add(Decimal(previous), amount)
        sizes.update(
            (name, len(name.encode("utf-8")) + attribute_size(value))
            for name, value in written.items()
        )
    return before, sum(sizes.values())


def write_units(size_bytes: int) -> int:
    """Standard write capacity units for writing an item of ``size_bytes`` (1 per started KB)."""
    return max(1, math.ceil(size_bytes / 1024))


@dataclass(slots=True)
class WriteStats:
    """Counters for one batch's writes.

    Attributes
    ----------
    requests
        DynamoDB requests sent (each attempt counts, including retries made by this module).
    items_written
        Aggregate items successfully updated.
    modelled_wcu
        Write capacity units by AWS's pricing rules (table plus leaderboard GSI).
    modelled_index_wcu
        The part of ``modelled_wcu`` spent on leaderboards: the GSI, and the top lists' writes
        (``leaderboard_store: list``).
    reported_wcu
        Sum of ``ConsumedCapacity.CapacityUnits`` the endpoint returned.
    skipped_zero
        Coalesced deltas that summed to zero and needed no write in this mode.
    throttle_retries
        Requests retried by this module after a throttling error.
    conditional_recoveries
        Exactly-once mode: updates whose checkpoint condition failed and were recomputed from the
        item's checkpoint (an earlier attempt had applied part of the batch).
    already_applied
        Exactly-once mode: items whose checkpoint showed the batch was already applied to them.
    pruned_checkpoints
        Exactly-once mode: stale checkpoints of other shards removed.
    expired_skipped
        Items not written because their time bucket passed its retention between evaluation and
        writing (an ``ADD`` would recreate a bucket that TTL may have deleted).
    failed_items
        Items whose update still failed after retries.
    emptied_values
        Value items (kinds with one item per value) whose count fell to zero and were given a
        TTL, one extra update each.
    target_writes
        Updates of application items that target rules keep their sums on.
    missing_targets
        Target deltas whose item did not exist: written to the rule's ledger instead
        (:mod:`aggregator.dynamodb.targets`).
    target_checkpoints_evicted
        Live checkpoints removed from a full checkpoint map on a target item.
    unusable_targets
        Target deltas whose item holds the target attribute (or the checkpoint map) as another
        type than the update needs (``likeTally = "lots"``): written to the rule's ledger
        instead, as for a missing item, so the shard moves on.
    dead_letters
        Dead letters recorded (in the table, or in the last-resort queue) for records a rule
        could not evaluate and malformed records.
    dead_letters_compacted
        Dead letters whose record did not fit whole as JSON (stored compressed, by keys only, or
        by digest only; :mod:`aggregator.dynamodb.deadletters`).
    dead_letter_fallbacks
        Dead letters rejected by DynamoDB and written again in their minimal form.
    dead_letters_to_queue
        Dead letters sent to the last-resort queue because DynamoDB rejected even the minimal
        form.
    top_list_writes, top_list_reads
        Conditional writes of top lists (``leaderboard_store: list``; failed ones too), whose
        WCU are in ``modelled_wcu`` and ``modelled_index_wcu``, and their strongly consistent
        reads (a merge that changes nothing by what its process knows reads the list first).
    index_entries_added, index_entries_removed
        Items put into or taken out of the leaderboard index by a second update, because their
        value crossed their index partition's floor (:mod:`aggregator.dynamodb.floors`).
    """

    requests: int = 0
    items_written: int = 0
    modelled_wcu: int = 0
    modelled_index_wcu: int = 0
    reported_wcu: Decimal = Decimal(0)
    skipped_zero: int = 0
    throttle_retries: int = 0
    conditional_recoveries: int = 0
    already_applied: int = 0
    pruned_checkpoints: int = 0
    expired_skipped: int = 0
    failed_items: int = 0
    emptied_values: int = 0
    target_writes: int = 0
    missing_targets: int = 0
    target_checkpoints_evicted: int = 0
    unusable_targets: int = 0
    dead_letters: int = 0
    dead_letters_compacted: int = 0
    dead_letter_fallbacks: int = 0
    dead_letters_to_queue: int = 0
    top_list_writes: int = 0
    top_list_reads: int = 0
    index_entries_added: int = 0
    index_entries_removed: int = 0

    def add(self, other: WriteStats) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True, slots=True)
class WriteObservation:
    """One modelled write of an aggregate item, for capacity models
    (:mod:`aggregator.dev.capacity`).

    Attributes
    ----------
    at_seconds
        The writer's clock at the write (epoch seconds; a simulated clock in the shard twin).
    partition
        The table partition key value of the item.
    sort_key
        The aggregate's sort key text (``rule#key``; ``rule#key/PARTIAL#<n>`` for a partial).
    wcu
        Modelled table write capacity units of the write.
    item_bytes
        The item's size after the write (before it, for a write whose condition failed).
    index_partition
        The leaderboard index's partition key value the write changes, ``None`` when it changes
        no index entry.
    index_wcu
        Modelled index write capacity units.
    aggregate
        Whether the item is an aggregate (or a partial); ``False`` for the framework's other
        items, such as top lists, which count for throughput but not as aggregates' sizes.
    """

    at_seconds: float
    partition: str
    sort_key: str
    wcu: int
    item_bytes: int
    index_partition: str | None
    index_wcu: int
    aggregate: bool = True


@dataclass(slots=True)
class WriteResult:
    """Outcome of :meth:`Writer.apply`.

    ``retry_from`` is the sequence number Lambda must retry from (the smallest first sequence
    number among items that could not be written), or ``None`` when everything was applied.
    """

    stats: WriteStats = field(default_factory=WriteStats)
    retry_from: str | None = None
    errors: list[str] = field(default_factory=list)


class Writer(Protocol):
    """What the handler and runner need from a write mode."""

    mode: str
    routing: ShardRouting | None
    """Where the writer reports its writes of ``write_shards: auto`` rules (``None``: none)."""

    def apply(self, batch: BatchDeltas, *, shard_id: str | None = None) -> WriteResult:
        """Apply a batch's coalesced deltas; never raises for per-item write failures."""
        ...

    def check_shard(self, shard_id: str | None) -> None:
        """Raise ``ConfigError`` if this mode needs a shard id and ``shard_id`` is missing."""
        ...


def add_update(
    table_name: str,
    layout: TableLayout,
    delta: CoalescedDelta,
    amount: Decimal,
    count: Decimal | None = None,
    *,
    index: IndexAction = "set",
) -> dict[str, Any]:
    """``UpdateItem`` arguments (or a ``TransactWriteItems`` ``Update`` action) that ``ADD``
    ``amount`` (and ``count``, for a kind that keeps one) to ``delta``'s aggregate item and set
    its descriptive attributes (:func:`aggregator.dynamodb.updates.aggregate_update`; ``index``
    as there)."""
    return {
        "TableName": table_name,
        "Key": layout.aggregate_key(delta.ref.sort_key),
        **aggregate_update(layout, delta, amount, count, index=index).render(),
    }


SEEN_ITEMS = 20_000
"""Leaderboard items whose last seen value a writer keeps to guess index membership (about
300 bytes each in CPython); past it the memory is cleared and rebuilt as items are written."""


class BaseWriter:
    mode = "base"
    writes_targets = False
    """Whether it writes the deltas of target rules (:mod:`aggregator.dynamodb.targets`)."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        layout: TableLayout = DEFAULT_LAYOUT,
        max_workers: int = 8,
        throttle_retries: int = 3,
        backoff_seconds: float = 0.05,
        clock: Any = time.time,
        observer: Callable[[WriteObservation], None] | None = None,
    ) -> None:
        self.client = client
        self.observer = observer
        self.table_name = table_name
        self.layout = layout
        self.max_workers = max_workers
        self.throttle_retries = throttle_retries
        self.backoff_seconds = backoff_seconds
        self._clock = clock
        self.empty_value_retention_seconds = DEFAULT_EMPTY_VALUE_RETENTION_SECONDS
        self.floors = IndexFloors(client, table_name, layout, clock=clock)
        """The leaderboard index floors this writer knows (:mod:`aggregator.dynamodb.floors`)."""
        self.routing: ShardRouting | None = None
        """The ``write_shards: auto`` rules' routing, whose heat meter this writer feeds
        (:mod:`aggregator.dynamodb.routing`; set by the processor)."""
        self._seen: dict[str, tuple[Decimal, bool]] = {}
        """Leaderboard items' value and index membership as this writer last saw them (its
        guess of what an update will do to them; bounded by :data:`SEEN_ITEMS`)."""
        self._pool = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="aggregator-write"
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    # -- items ---------------------------------------------------------------------------------

    def _key(self, delta: CoalescedDelta) -> dict[str, Any]:
        if delta.slot is not None:
            return self.layout.partial_key(delta.ref.sort_key, delta.slot)
        return self.layout.aggregate_key(delta.ref.sort_key)

    @staticmethod
    def _placed(delta: CoalescedDelta, shard_id: str | None) -> CoalescedDelta:
        """``delta`` with its partial chosen: CRC-32 of the shard id modulo ``write_shards``,
        so a shard always writes the same partial (its checkpoint lives there). Without a shard
        id (at-least-once without tumbling windows: nothing to protect) the first record's
        sequence number decides."""
        if not delta.ref.partial or delta.slot is not None:
            return delta
        basis = shard_id or delta.first_sequence_number
        return replace(delta, slot=zlib.crc32(basis.encode("utf-8")) % delta.write_shards)

    def _new_attributes(
        self, delta: CoalescedDelta, amount: Decimal, extra: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The attributes an update of ``delta``'s item writes (deserialized), its key included:
        those of :func:`~aggregator.dynamodb.updates.aggregate_update`
        (:func:`~aggregator.dynamodb.updates.aggregate_counters` and
        :func:`~aggregator.dynamodb.updates.aggregate_attributes`) and ``extra``."""
        lay = self.layout
        item: dict[str, Any] = {
            **{name: value["S"] for name, value in self._key(delta).items()},
            **aggregate_counters(lay, delta, amount),
            **{
                name: deserialize_value(value)
                for name, value in aggregate_attributes(lay, delta).items()
            },
        }
        if delta.slot is not None:
            item.pop(lay.collection_attribute, None)
        if extra:
            item.update(extra)
        return item

    def _modelled_units(
        self,
        delta: CoalescedDelta,
        extra: Mapping[str, Any] | None = None,
        old: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        removed: tuple[str, ...] = (),
        applied: bool = True,
        index: IndexAction = "set",
    ) -> tuple[int, int]:
        """``(total, index part)`` modelled WCU of one update of ``delta``'s item.

        ``old`` is the item before the update in DynamoDB JSON (the ``ALL_OLD`` the update
        returned; ``None`` or empty for a new item): DynamoDB charges an ``UpdateItem`` for the
        larger of the item's sizes before and after it (Developer Guide, "Read/write capacity
        mode", write request units), so checkpoints of other shards on the item count. Without
        ``old`` the item is taken to hold only what this update writes. ``removed`` are
        attributes the update removes; ``applied=False`` models a write whose condition failed
        (charged for the item's size, no index change). ``index`` is what the update did to the
        leaderboard attribute (:data:`~aggregator.dynamodb.updates.IndexAction`). The index part
        is 2 WCU a kilobyte of entry when an indexed value changes (the entry is deleted and put
        again), 1 when the update puts a new entry or deletes one, 0 for an item outside the
        index. Each call is also reported to :attr:`observer`.
        """
        lay = self.layout
        written = self._new_attributes(delta, delta.amount, extra)
        before, after = _sizes(lay.value_attribute, delta.amount, written, old, removed, applied)
        units = write_units(max(before, after))
        index_units = self._index_units(delta, written, old, applied, index)
        if self.observer is not None:
            self.observer(
                WriteObservation(
                    at_seconds=float(self._clock()),
                    partition=str(written[lay.partition_key]),
                    sort_key=delta.ref.sort_key
                    if delta.slot is None
                    else f"{delta.ref.sort_key}/{PARTIAL_PREFIX}{delta.slot}",
                    wcu=units,
                    item_bytes=after if applied else before,
                    index_partition=index_partition(delta) if index_units else None,
                    index_wcu=index_units,
                )
            )
        return units + index_units, index_units

    def _index_units(
        self,
        delta: CoalescedDelta,
        written: Mapping[str, Any],
        old: Mapping[str, Mapping[str, Any]] | None,
        applied: bool,
        index: IndexAction,
    ) -> int:
        """The leaderboard index's part of an update's WCU (:meth:`_modelled_units`)."""
        lay = self.layout
        indexed = lay.leaderboard_attribute in (old or {})
        if not applied or not delta.leaderboard:
            entries = 0
        elif index == "remove":
            entries = 1 if indexed else 0  # the entry's delete
        elif indexed:
            entries = 2 if delta.amount != 0 else 0  # delete and put, when the value changes
        else:
            entries = 1 if index == "set" else 0  # a new entry's put
        if not entries:
            return 0
        index_entry = {
            k: written[k]
            for k in (
                *lay.aggregate_key(delta.ref.sort_key),
                lay.leaderboard_attribute,
                lay.value_attribute,
            )
        }
        return entries * write_units(item_size(index_entry))

    def _expire_if_empty(
        self,
        delta: CoalescedDelta,
        old: Mapping[str, Mapping[str, Any]] | None,
        amount: Decimal,
        stats: WriteStats,
    ) -> None:
        """Give a value item whose count this update brought to zero a TTL: now plus
        :attr:`empty_value_retention_seconds`, on condition that its count is still zero (a
        later update, which removes the TTL, wins). Such items are read past by ``min``/``max``
        and hold no value, so without it they would pile up in front of the extreme.

        Exactly-once survives the deletion: every update of the item removes the TTL and one
        that leaves it at zero sets it again, so the item is deleted no sooner than the
        retention after its last write, when no record that touched it can be delivered again
        (the retention exceeds the event source mapping's ``MaximumRecordAgeInSeconds``, as for
        pruned checkpoints). Items in a time bucket keep the bucket's TTL instead. Best effort:
        a failure leaves the item at zero, to be retried on its next write."""
        if not delta.per_value or delta.ref.bucket is not None:
            return
        previous = (old or {}).get(self.layout.value_attribute, {}).get("N")
        if add(Decimal(previous or 0), amount) != 0:
            return
        expires = int(self._clock()) + self.empty_value_retention_seconds
        update = (
            Update()
            .set(self.layout.ttl_attribute, {"N": str(expires)})
            .where_equals(self.layout.value_attribute, {"N": "0"})
        )
        if not self._best_effort_update(delta, update, stats):
            return
        stats.emptied_values += 1
        stats.modelled_wcu += write_units(typed_item_size(old)) if old else 1

    # -- the leaderboard index's floor (aggregator.dynamodb.floors) -----------------------------

    def _floor(self, delta: CoalescedDelta) -> Decimal | None:
        """The floor of ``delta``'s index partition as this writer knows it (``None``: no
        floor, or not a leaderboard item; the update then sets the index attribute)."""
        if not delta.leaderboard:
            return None
        return self.floors.get(index_partition(delta))

    def _index_action(self, delta: CoalescedDelta, floor: Decimal | None) -> IndexAction:
        """What the update of ``delta``'s item does to its index attribute: set it without a
        floor; with one, what the value this writer saw last plus ``delta.amount`` calls for
        (a guess: another shard may have changed the value since, which
        :meth:`_after_update` checks), an item not seen yet taken for a new one."""
        if floor is None:
            return "set"
        seen = self._seen.get(delta.ref.sort_key)
        # an item not seen yet is taken for a new one (a long tail's items mostly are)
        value, indexed = (Decimal(0), False) if seen is None else seen
        wanted = add(value, delta.amount) >= floor
        if wanted and not indexed:
            return "set"
        if not wanted and indexed and self.floors.removable(index_partition(delta)):
            return "remove"
        return "keep"

    def _after_update(
        self,
        delta: CoalescedDelta,
        floor: Decimal | None,
        index: IndexAction,
        old: Mapping[str, Any] | None,
        amount: Decimal,
        stats: WriteStats,
    ) -> None:
        """Keep the index's invariant after an applied update of ``amount`` that did ``index``
        to an item that was ``old`` (``ALL_OLD``): count a new entry (the floor's check) and,
        with a floor, fix the item's membership for its new value."""
        if not delta.leaderboard:
            return
        lay = self.layout
        before = lay.leaderboard_attribute in (old or {})
        indexed = {"set": True, "remove": False}.get(index, before)
        if indexed and not before:
            self._count_entry(delta, stats)
        previous = (old or {}).get(lay.value_attribute, {}).get("N")
        value = add(Decimal(previous or 0), amount)
        if floor is not None:
            indexed = self._fix_membership(delta, floor, value, indexed, old, stats)
        self._remember(delta, value, indexed)

    def _remember(self, delta: CoalescedDelta, value: Decimal, indexed: bool) -> None:
        if len(self._seen) >= SEEN_ITEMS:
            self._seen.clear()  # a guess only: forgetting costs a second update at worst
        self._seen[delta.ref.sort_key] = (value, indexed)

    def _check_membership(
        self,
        delta: CoalescedDelta,
        floor: Decimal | None,
        item: Mapping[str, Any] | None,
        stats: WriteStats,
    ) -> None:
        """:meth:`_fix_membership` for ``item`` as it is now (an update found it already
        applied and returned it); nothing for a missing item. Without a known floor (none, or
        its read failed) the item is put into the index if it is not there: the update that
        was applied may have left it out under a floor this attempt could not read."""
        if not item or not delta.leaderboard:
            return
        lay = self.layout
        value = item.get(lay.value_attribute, {}).get("N")
        if value is None:
            return
        indexed = lay.leaderboard_attribute in item
        indexed = self._fix_membership(
            delta, floor, Decimal(value), indexed, item, stats, unknown_floor=floor is None
        )
        self._remember(delta, Decimal(value), indexed)

    def _count_entry(self, delta: CoalescedDelta, stats: WriteStats) -> None:
        bucket = delta.ref.bucket
        units = self.floors.added(
            index_partition(delta), None if bucket is None else bucket.expires
        )
        stats.modelled_wcu += units
        stats.modelled_index_wcu += units

    def _fix_membership(
        self,
        delta: CoalescedDelta,
        floor: Decimal | None,
        value: Decimal,
        indexed: bool,
        item: Mapping[str, Any] | None,
        stats: WriteStats,
        *,
        unknown_floor: bool = False,
    ) -> bool:
        """Put ``delta``'s item into the index when ``value`` is at least ``floor`` and it is not
        there, or take it out when ``value`` is below and it is: one ``UpdateItem`` on condition
        that the value still says so (a concurrent update that changed it is followed by its own
        writer's check). ``item`` is the item before (sizes the write). Returns whether the
        item is in the index now, as far as this writer knows.

        Taking an item out waits until the floor has stood for
        :data:`~aggregator.dynamodb.floors.REMOVAL_GRACE_SECONDS`, and a failed removal is left
        for the item's next write. ``unknown_floor``: the floor could not be read; the item is
        put into the index unconditionally if it is not there (an extra entry never misleads).

        Raises
        ------
        botocore.exceptions.ClientError
            When an addition fails other than by its condition: the item is retried with its
            batch, whose checkpointed update then returns the item and this check runs again.
        """
        lay = self.layout
        partition = index_partition(delta)
        wanted = unknown_floor or (floor is not None and value >= floor)
        if wanted == indexed:
            return indexed
        if not wanted and not self.floors.removable(partition):
            return indexed
        update = Update()
        if wanted:
            update = update.set(lay.leaderboard_attribute, {"S": partition})
            if floor is not None and not unknown_floor:
                update = update.where_at_least(lay.value_attribute, {"N": str(floor)})
            else:  # never re-create an item that is gone (a time bucket past its TTL)
                update = update.where_exists(lay.value_attribute)
        else:
            update = update.remove(lay.leaderboard_attribute).where_below(
                lay.value_attribute, {"N": str(floor)}
            )
        try:
            self._send_update(delta, update, stats)
        except (ClientError, BotoCoreError) as exc:
            if (
                isinstance(exc, ClientError)
                and error_code(exc) == "ConditionalCheckFailedException"
            ):
                return indexed
            if not wanted:
                return indexed  # an extra entry never misleads: the next write tries again
            raise
        units = write_units(typed_item_size(item)) if item else 1
        stats.modelled_wcu += units + 1
        stats.modelled_index_wcu += units + 1
        if wanted:
            stats.index_entries_added += 1
            self._count_entry(delta, stats)
        else:
            stats.index_entries_removed += 1
        return wanted

    def _best_effort_update(self, delta: CoalescedDelta, update: Update, stats: WriteStats) -> bool:
        """Send ``update`` to ``delta``'s item after its aggregate update succeeded (pruning
        checkpoints, expiring an empty value item): whether it was applied. A failure (its
        condition, throttling past the retries) is left for the item's next update to retry."""
        try:
            self._send_update(delta, update, stats)
        except (ClientError, BotoCoreError):
            return False
        return True

    def _send_update(self, delta: CoalescedDelta, update: Update, stats: WriteStats) -> None:
        """One ``UpdateItem`` of ``update`` on ``delta``'s item (throttling retried by
        :meth:`_call`; other errors raised)."""
        request = {
            "TableName": self.table_name,
            "Key": self._key(delta),
            **update.render(),
            "ReturnConsumedCapacity": "TOTAL",
        }
        self._call("update_item", request, stats)

    def _update_request(
        self,
        delta: CoalescedDelta,
        amount: Decimal,
        count: Decimal | None = None,
        *,
        index: IndexAction = "set",
    ) -> dict[str, Any]:
        """``UpdateItem`` arguments that ``ADD`` ``amount`` (and ``count``) and set the
        descriptive attributes (returning the item as it was, which sizes the write; no extra
        capacity; ``index`` as :func:`add_update` takes it)."""
        request = add_update(self.table_name, self.layout, delta, amount, count, index=index)
        request["Key"] = self._key(delta)  # a partial's, for a rule with write_shards
        request["ReturnConsumedCapacity"] = "TOTAL"
        request["ReturnValues"] = "ALL_OLD"
        return request

    def _call(self, operation: str, request: dict[str, Any], stats: WriteStats) -> dict[str, Any]:
        """Send one request; throttling errors are retried ``throttle_retries`` times with
        exponential backoff (``backoff_seconds * 2**attempt``). Other errors propagate."""
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

    # -- batches -------------------------------------------------------------------------------

    def _select(self, batch: BatchDeltas, stats: WriteStats) -> list[CoalescedDelta]:
        return list(batch.deltas.values())

    def _apply_item(
        self, delta: CoalescedDelta, shard_id: str | None, last: str
    ) -> WriteStats:  # pragma: no cover - abstract
        raise NotImplementedError

    def check_shard(self, shard_id: str | None) -> None:
        return None

    def apply(self, batch: BatchDeltas, *, shard_id: str | None = None) -> WriteResult:
        """Apply a batch's coalesced deltas concurrently (``max_workers`` at a time).

        Returns
        -------
        WriteResult
            ``retry_from`` is the smallest ``first_sequence_number`` among items that still
            failed (after throttling retries), ``None`` when every item was written.

        Raises
        ------
        ConfigError
            In a checkpointed mode, when ``shard_id`` is missing.
        """
        self.check_shard(shard_id)
        result = WriteResult()
        now = self._clock()
        todo = []
        for delta in self._select(batch, result.stats):
            if delta.target_attribute is not None and not self.writes_targets:
                raise ConfigError(
                    f"rule {delta.ref.rule!r} has a target: write it with a writer of "
                    "aggregator.dynamodb.targets (make_writer)"
                )
            if delta.ref.bucket is not None and delta.ref.bucket.expired(now):
                result.stats.expired_skipped += 1
                continue
            todo.append(self._placed(delta, shard_id))
        last = batch.last_sequence_number or ""
        self.floors.load(index_partition(d) for d in todo if d.leaderboard)

        def run(delta: CoalescedDelta) -> tuple[WriteStats, str | None]:
            stats = WriteStats()
            try:
                stats.add(self._apply_item(delta, shard_id, last))
            except (ClientError, BotoCoreError) as exc:
                stats.failed_items += 1
                return stats, f"{delta.ref.sort_key}: {exc}"
            return stats, None

        failed_first: list[str] = []
        for delta, (stats, error) in zip(todo, self._pool.map(run, todo), strict=True):
            result.stats.add(stats)
            if error is not None:
                result.errors.append(error)
                failed_first.append(delta.first_sequence_number)
        if failed_first:
            result.retry_from = min(failed_first, key=pad_sequence_number)
        return result


class AtLeastOnceWriter(BaseWriter):
    """``ADD`` each coalesced delta with one ``UpdateItem`` per aggregate item.

    Parameters
    ----------
    client
        A boto3 DynamoDB *client* (thread-safe; botocore retries throttling itself).
    table_name
        The user's table.
    layout
        Attribute names and reserved partition keys.
    max_workers
        Concurrent ``UpdateItem`` requests per batch.
    throttle_retries, backoff_seconds
        Extra retries of throttled requests after botocore's own, with exponential backoff.

    Notes
    -----
    Each update is ``ADD #value :delta SET #rule = :rule, #key = :key`` (plus ``#lb = :rule`` for
    leaderboard rules whose index partition has no floor: :mod:`aggregator.dynamodb.floors`).
    Zero deltas are not written. Guarantee: every record is applied at least once; a redelivered
    batch is applied again.
    """

    mode = "at-least-once"

    def _select(self, batch: BatchDeltas, stats: WriteStats) -> list[CoalescedDelta]:
        todo = [d for d in batch.deltas.values() if d.amount != 0 or d.count != 0]
        stats.skipped_zero += len(batch.deltas) - len(todo)
        return todo

    def _apply_item(self, delta: CoalescedDelta, shard_id: str | None, last: str) -> WriteStats:
        stats = WriteStats()
        floor = self._floor(delta)
        index = self._index_action(delta, floor)
        request = self._update_request(delta, delta.amount, index=index)
        response = self._call("update_item", request, stats)
        stats.items_written = 1
        old = response.get("Attributes")
        stats.modelled_wcu, stats.modelled_index_wcu = self._modelled_units(
            delta, old=old, index=index
        )
        self._after_update(delta, floor, index, old, delta.amount, stats)
        self._expire_if_empty(delta, old, delta.amount, stats)
        if self.routing is not None and delta.auto_shards and shard_id is not None:
            # no checkpoints in this mode: this shard's own writes are all the meter sees
            units = write_units(typed_item_size(old)) if old and delta.slot is None else None
            self.routing.heat.record(shard_id, delta.ref.rule, self._clock(), units, 1)
        return stats
