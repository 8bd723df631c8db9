"""A capacity model of the aggregate writes: where DynamoDB would throttle (DynamoDB Local
enforces no limit).

Every write a writer makes is reported to :meth:`CapacityModel.observe` (the writers'
``observer``) with its modelled WCU and the item's size, at the writer's clock (the shard twin's
simulated clock, :mod:`aggregator.dev.shards`). The model sums them per simulated second:

- per **item**: one item cannot take more than a partition's 1,000 WCU a second;
- per **table partition**: items sharing a partition key value are counted as one partition,
  1,000 WCU a second (Developer Guide, "Best practices for designing and using partition keys
  effectively": "every partition in a DynamoDB table is designed to deliver a maximum capacity of
  3,000 read units per second and 1,000 write units per second"). DynamoDB may split a hot item
  collection by sort key ranges ("split for heat", Developer Guide, "DynamoDB burst and adaptive
  capacity"), but it is not guaranteed (not for a sort key that grows monotonically, not with a
  local secondary index), so the model does not count on it;
- per **index partition**: the leaderboard index's writes per index partition key value, with the
  same 1,000 WCU a second; a throttled index throttles the table's writes (Developer Guide,
  "Understanding GSI write throttling and back pressure").

It is a model, not a measurement: it takes writes as spread evenly over each simulated second,
ignores burst capacity (up to 300 seconds of unused capacity) and adaptive capacity, and models an
``UpdateItem``'s WCU as DynamoDB prices it (the larger of the item's sizes before and after, 1 WCU
per started KB; an index entry change as a delete plus a put).

**Control items.** The writers report only the aggregate writes (and the top lists' merges). The
control items (the manifest, fences, routing items, top lists, floors, backfill records) are
written through the same boto3 client by other code, so :meth:`CapacityModel.watch_control`
hooks the client itself (a botocore ``before-parameter-build`` handler, which sees every
``PutItem``, ``UpdateItem``, ``DeleteItem``, ``TransactWriteItems`` and ``BatchWriteItem`` once
per call) and counts the writes whose key is under a control partition key value
(:meth:`~aggregator.core.layout.TableLayout.is_control_partition`: ``control_pk`` or one of its
spread values) at the clock's time (the shard twin's simulated one). A request does not show the
item's size before the write, which DynamoDB charges when it is the larger, so each write is
modelled from the request alone (:func:`control_writes`): 1 WCU per started KB of its key plus
the attributes it writes (a put's item; an update's attribute names and values), 1 for a delete,
twice that inside a transaction (Developer Guide, "Amazon DynamoDB Transactions: How it works",
capacity management: transactional writes take two write units per KB), a transaction's
``ConditionCheck`` not at all. It is therefore a lower bound (but for the few bytes of a
condition's values, which an update's values include). The report's control peak covers them
all; :attr:`CapacityReport.throttled_seconds` counts a control partition's seconds from them
(not also from the top-list merges the writers report for the same partitions).
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aggregator.core.layout import TableLayout
from aggregator.dynamodb.costs import WriteObservation
from aggregator.dynamodb.sizes import typed_attribute_size, typed_item_size, write_units

__all__ = [
    "CONTROL_OPERATIONS",
    "PARTITION_WCU_PER_SECOND",
    "CapacityModel",
    "CapacityReport",
    "ControlWrite",
    "Peak",
    "control_writes",
]

PARTITION_WCU_PER_SECOND = 1000
"""A partition's (and so one item's) write limit, WCU per second (Developer Guide, "Best practices
for designing and using partition keys effectively")."""

CONTROL_OPERATIONS = (
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "TransactWriteItems",
    "BatchWriteItem",
)
"""The write operations :meth:`CapacityModel.watch_control` observes (botocore's names)."""

TRANSACTION_FACTOR = 2
"""Write units of a transactional write per standard one (Developer Guide, "Amazon DynamoDB
Transactions: How it works", "Capacity management for transactions")."""


@dataclass(frozen=True, slots=True)
class ControlWrite:
    """One modelled write of a control item (:func:`control_writes`).

    Attributes
    ----------
    partition
        The item's partition key value (``control_pk`` or one of its spread values).
    sort_key
        The item's sort key text (``""`` on a table without a sort key: then the partition key
        value names the item).
    wcu
        Modelled write units: a lower bound (module docstring).
    item_bytes
        The bytes the request writes (its key and attributes; the key alone for a delete).
    """

    partition: str
    sort_key: str
    wcu: int
    item_bytes: int


def _written_bytes(action: Mapping[str, Any]) -> int:
    """Bytes an ``UpdateItem`` (or a transaction's ``Update``) writes, as far as the request
    shows: its key, the attribute names it names and the values it carries."""
    names = action.get("ExpressionAttributeNames") or {}
    values = action.get("ExpressionAttributeValues") or {}
    return (
        typed_item_size(action.get("Key") or {})
        + sum(len(str(name).encode("utf-8")) for name in names.values())
        + sum(typed_attribute_size(value) for value in values.values())
    )


def _one(
    layout: TableLayout, key: Mapping[str, Any], size: int, factor: int, *, delete: bool
) -> ControlWrite | None:
    partition = layout.partition_of(key)
    if not layout.is_control_partition(partition):
        return None
    assert partition is not None  # is_control_partition(None) is False
    wcu = factor * (1 if delete else write_units(size))
    return ControlWrite(partition, layout.sort_key_of(key) or "", wcu, size)


def control_writes(
    operation: str,
    params: Mapping[str, Any],
    layout: TableLayout,
    *,
    table: str | None = None,
) -> list[ControlWrite]:
    """The control-item writes of one request (module docstring), modelled from the request.

    Parameters
    ----------
    operation
        Botocore's operation name (one of :data:`CONTROL_OPERATIONS`; any other gives ``[]``).
    params
        The request's parameters in DynamoDB JSON, as the low-level client takes them.
    layout
        Which partition key values hold control items
        (:meth:`~aggregator.core.layout.TableLayout.is_control_partition`).
    table
        Count only writes to this table (``None``: any table).

    Returns
    -------
    list of ControlWrite
        One per item written under a control partition key value, in request order: ``PutItem``
        1 WCU per started KB of its item, ``UpdateItem`` of its key, named attributes and values
        (:func:`~aggregator.dynamodb.sizes.write_units`), ``DeleteItem`` 1; a transaction's
        ``Put``, ``Update`` and ``Delete`` the same times
        :data:`TRANSACTION_FACTOR` (a ``ConditionCheck`` none); a batch's ``PutRequest`` and
        ``DeleteRequest`` as a put and a delete.

    Raises
    ------
    TypeError
        For a value that is not DynamoDB JSON (:func:`~aggregator.dynamodb.sizes.typed_item_size`).
    """
    out: list[ControlWrite | None] = []

    def ours(name: Any) -> bool:
        return table is None or name == table

    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        if not ours(params.get("TableName")):
            return []
        if operation == "PutItem":
            item = params.get("Item") or {}
            out.append(_one(layout, item, typed_item_size(item), 1, delete=False))
        elif operation == "UpdateItem":
            out.append(
                _one(layout, params.get("Key") or {}, _written_bytes(params), 1, delete=False)
            )
        else:
            key = params.get("Key") or {}
            out.append(_one(layout, key, typed_item_size(key), 1, delete=True))
    elif operation == "TransactWriteItems":
        for entry in params.get("TransactItems") or ():
            if "Put" in entry and ours(entry["Put"].get("TableName")):
                item = entry["Put"].get("Item") or {}
                out.append(
                    _one(layout, item, typed_item_size(item), TRANSACTION_FACTOR, delete=False)
                )
            elif "Update" in entry and ours(entry["Update"].get("TableName")):
                update = entry["Update"]
                key = update.get("Key") or {}
                out.append(
                    _one(layout, key, _written_bytes(update), TRANSACTION_FACTOR, delete=False)
                )
            elif "Delete" in entry and ours(entry["Delete"].get("TableName")):
                key = entry["Delete"].get("Key") or {}
                out.append(_one(layout, key, typed_item_size(key), TRANSACTION_FACTOR, delete=True))
    elif operation == "BatchWriteItem":
        for name, requests in (params.get("RequestItems") or {}).items():
            if not ours(name):
                continue
            for request in requests:
                if "PutRequest" in request:
                    item = request["PutRequest"].get("Item") or {}
                    out.append(_one(layout, item, typed_item_size(item), 1, delete=False))
                elif "DeleteRequest" in request:
                    key = request["DeleteRequest"].get("Key") or {}
                    out.append(_one(layout, key, typed_item_size(key), 1, delete=True))
    return [w for w in out if w is not None]


@dataclass(frozen=True, slots=True)
class Peak:
    """The busiest second of the busiest item or partition."""

    name: str
    wcu_per_second: int
    at_seconds: int

    @property
    def over_limit(self) -> bool:
        return self.wcu_per_second > PARTITION_WCU_PER_SECOND


@dataclass(slots=True)
class CapacityReport:
    """What :meth:`CapacityModel.report` found. Sizes in bytes.

    ``item``, ``partition`` and ``index_partition`` are the peaks of what the writers report
    (``None``: no write of that kind); ``control_partition`` the peak of the control items'
    writes :meth:`CapacityModel.watch_control` saw (``None``: none, or not watched);
    ``hottest_partition`` the peak over every partition key value, aggregates and control items
    alike (a control partition's seconds from the watched writes); ``largest_item_bytes`` the
    largest aggregate (or partial) size any write left
    (:attr:`~aggregator.dynamodb.costs.WriteObservation.aggregate`); ``largest_item_by_hour``
    the largest size written per simulated hour since the first write; ``throttled_seconds``
    counts (item, second), (partition, second) (control partitions included) and (index
    partition, second) pairs over the limit.
    """

    writes: int = 0
    wcu: int = 0
    index_wcu: int = 0
    item: Peak | None = None
    partition: Peak | None = None
    index_partition: Peak | None = None
    largest_item_bytes: int = 0
    largest_item_name: str = ""
    largest_item_by_hour: list[int] = field(default_factory=list)
    throttled_seconds: int = 0
    control_writes: int = 0
    control_wcu: int = 0
    control_partition: Peak | None = None
    hottest_partition: Peak | None = None

    @property
    def within_limits(self) -> bool:
        return self.throttled_seconds == 0

    def lines(self) -> list[str]:
        """Human-readable summary."""

        def peak(label: str, p: Peak | None) -> str:
            if p is None:
                return f"{label}: no writes"
            flag = " OVER LIMIT" if p.over_limit else ""
            return f"{label}: {p.wcu_per_second:,} WCU/s ({p.name}){flag}"

        return [
            peak("hottest item", self.item),
            peak("hottest table partition", self.partition),
            peak("hottest control partition", self.control_partition),
            peak("hottest index partition", self.index_partition),
            f"largest item: {self.largest_item_bytes:,} B ({self.largest_item_name})",
        ]


class CapacityModel:
    """Collects :class:`~aggregator.dynamodb.costs.WriteObservation` s (thread-safe); pass
    :meth:`observe` as the writers' ``observer``, and call :meth:`watch_control` on their client
    to count the control items' writes too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: dict[tuple[str, int], int] = defaultdict(int)
        self._partition: dict[tuple[str, int], int] = defaultdict(int)
        self._index: dict[tuple[str, int], int] = defaultdict(int)
        self._control: dict[tuple[str, int], int] = defaultdict(int)
        self._largest: dict[int, tuple[int, str]] = {}  # second -> (bytes, item)
        self.writes = 0
        self.wcu = 0
        self.index_wcu = 0
        self.control_writes = 0
        self.control_wcu = 0

    def observe_control(self, write: ControlWrite, at_seconds: float) -> None:
        """Count one control item's write (:func:`control_writes`) at ``at_seconds`` (epoch
        seconds)."""
        second = math.floor(at_seconds)
        with self._lock:
            self.control_writes += 1
            self.control_wcu += write.wcu
            self._control[(write.partition, second)] += write.wcu

    def watch_control(
        self,
        client: Any,
        clock: Callable[[], float],
        layout: TableLayout,
        *,
        table: str | None = None,
    ) -> Callable[[], None]:
        """Count every control-item write ``client`` sends from now on (module docstring).

        Parameters
        ----------
        client
            A boto3 ``dynamodb`` client (the one the processors write through); a botocore
            ``before-parameter-build`` handler is registered on its event system for each of
            :data:`CONTROL_OPERATIONS`.
        clock
            Epoch seconds each write is counted at (the shard twin's simulated clock).
        layout
            Which partition key values hold control items.
        table
            Count only this table's writes (``None``: any table).

        Returns
        -------
        callable
            Unregisters the handlers.
        """

        def handler(params: Mapping[str, Any], model: Any, **_: Any) -> None:
            try:
                writes = control_writes(model.name, params, layout, table=table)
            except (TypeError, ValueError, AttributeError, KeyError):
                return  # not DynamoDB JSON: botocore's validation refuses the request itself
            now = clock()
            for write in writes:
                self.observe_control(write, now)

        events = client.meta.events
        # a unique id per event: botocore keeps one registration per unique id, whatever the event
        names = {
            f"before-parameter-build.dynamodb.{op}": f"capacity-model-{id(self)}-{op}"
            for op in CONTROL_OPERATIONS
        }
        for name, unique in names.items():
            events.register(name, handler, unique_id=unique)

        def unregister() -> None:
            for name, unique in names.items():
                events.unregister(name, handler, unique_id=unique)

        return unregister

    def observe(self, write: WriteObservation) -> None:
        second = math.floor(write.at_seconds)
        item = f"{write.partition}/{write.sort_key}"
        with self._lock:
            self.writes += 1
            self.wcu += write.wcu
            self.index_wcu += write.index_wcu
            self._item[(item, second)] += write.wcu
            self._partition[(write.partition, second)] += write.wcu
            if write.index_partition is not None:
                self._index[(write.index_partition, second)] += write.index_wcu
            if write.aggregate and write.item_bytes > self._largest.get(second, (0, ""))[0]:
                self._largest[second] = (write.item_bytes, item)

    @staticmethod
    def _peak(counts: dict[tuple[str, int], int]) -> Peak | None:
        if not counts:
            return None
        (name, second), wcu = max(counts.items(), key=lambda kv: (kv[1], kv[0][1]))
        return Peak(name, wcu, second)

    def report(self) -> CapacityReport:
        with self._lock:
            report = CapacityReport(self.writes, self.wcu, self.index_wcu)
            report.item = self._peak(self._item)
            report.partition = self._peak(self._partition)
            report.index_partition = self._peak(self._index)
            report.control_writes, report.control_wcu = self.control_writes, self.control_wcu
            report.control_partition = self._peak(self._control)
            # every partition key value per second: a watched control partition's seconds from
            # the watched writes alone (they include the top-list merges the writers report)
            watched = {name for name, _ in self._control}
            partitions = {k: v for k, v in self._partition.items() if k[0] not in watched}
            partitions.update(self._control)
            report.hottest_partition = self._peak(partitions)
            report.throttled_seconds = sum(
                1
                for counts in (self._item, partitions, self._index)
                for wcu in counts.values()
                if wcu > PARTITION_WCU_PER_SECOND
            )
            if self._largest:
                size, name = max(self._largest.values())
                report.largest_item_bytes, report.largest_item_name = size, name
                first = min(self._largest)
                hours = (max(self._largest) - first) // 3600 + 1
                by_hour = [0] * hours
                for second, (size, _) in self._largest.items():
                    hour = (second - first) // 3600
                    by_hour[hour] = max(by_hour[hour], size)
                report.largest_item_by_hour = by_hour
            return report
