"""The writers' cost model: the modelled write capacity of each aggregate update, and the
observer it reports every write to.

Each write's modelled capacity follows DynamoDB's pricing rules (Developer Guide, "Read/write
capacity mode" and "Item sizes and formats"): 1 WCU per started KB of the larger of the item's
sizes before and after the update (the size before comes from the ``ALL_OLD`` image every update
asks for, so other shards' checkpoints on the item count), and for items in the leaderboard GSI
2 more per non-zero update, since changing the indexed ``value`` deletes and re-puts the index
entry (Developer Guide, "Provisioned throughput considerations for GSIs"); the first write of an
item costs only 1 there, so the index figure is an upper bound. ``reported_wcu`` is what the
endpoint answered in ``ConsumedCapacity``; DynamoDB Local's figures are not AWS's, so both are
kept (:class:`~aggregator.dynamodb.write_stats.WriteStats`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aggregator.core.clock import Clock
from aggregator.core.engine import CoalescedDelta
from aggregator.core.layout import PARTIAL_PREFIX, TableLayout
from aggregator.dynamodb.sizes import aggregate_item, item_size, update_sizes, write_units
from aggregator.dynamodb.updates import IndexAction, index_partition

__all__ = ["CostModel", "WriteObservation", "WriteObserver"]


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


WriteObserver = Callable[[WriteObservation], None]
"""Receives every modelled write (:meth:`aggregator.dev.capacity.CapacityModel.observe`)."""


class CostModel:
    """Modelled WCU of aggregate updates (module docstring), each reported to :attr:`observer`.

    Parameters
    ----------
    layout
        The table's attribute names (the item's key, value and leaderboard attributes).
    clock
        Epoch seconds, the time each observation is stamped with.
    observer
        Called with a :class:`WriteObservation` per modelled write; ``None``: none.
    """

    def __init__(
        self,
        layout: TableLayout,
        *,
        clock: Clock = time.time,
        observer: WriteObserver | None = None,
    ) -> None:
        self.layout = layout
        self.clock = clock
        self.observer = observer

    def units(
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

        ``extra`` are attributes the update writes besides the aggregate's own (a checkpoint).
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
        written = aggregate_item(lay, delta, delta.amount, extra)
        before, after = update_sizes(
            lay.value_attribute, delta.amount, written, old, removed, applied
        )
        units = write_units(max(before, after))
        index_units = self.index_units(delta, written, old, applied, index)
        if self.observer is not None:
            self.observer(
                WriteObservation(
                    at_seconds=float(self.clock()),
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

    def index_units(
        self,
        delta: CoalescedDelta,
        written: Mapping[str, Any],
        old: Mapping[str, Mapping[str, Any]] | None,
        applied: bool,
        index: IndexAction,
    ) -> int:
        """The leaderboard index's part of an update's WCU (:meth:`units`; ``written`` as
        :func:`~aggregator.dynamodb.sizes.aggregate_item` gives it)."""
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
                *lay.aggregate_key(delta.ref.sort_key, delta.partition(lay)),
                lay.leaderboard_attribute,
                lay.value_attribute,
            )
        }
        return entries * write_units(item_size(index_entry))
