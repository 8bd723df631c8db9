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
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from dataclasses import dataclass, field

from aggregator.dynamodb.costs import WriteObservation

__all__ = ["PARTITION_WCU_PER_SECOND", "CapacityModel", "CapacityReport", "Peak"]

PARTITION_WCU_PER_SECOND = 1000
"""A partition's (and so one item's) write limit, WCU per second (Developer Guide, "Best practices
for designing and using partition keys effectively")."""


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

    ``item``, ``partition`` and ``index_partition`` are the peaks (``None``: no write of that
    kind); ``largest_item_bytes`` the largest aggregate (or partial) size any write left
    (:attr:`~aggregator.dynamodb.costs.WriteObservation.aggregate`); ``largest_item_by_hour``
    the largest size written per simulated hour since the first write; ``throttled_seconds``
    counts (item, second), (partition, second) and (index partition, second) pairs over the
    limit.
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
            peak("hottest index partition", self.index_partition),
            f"largest item: {self.largest_item_bytes:,} B ({self.largest_item_name})",
        ]


class CapacityModel:
    """Collects :class:`~aggregator.dynamodb.costs.WriteObservation` s (thread-safe); pass
    :meth:`observe` as the writers' ``observer``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: dict[tuple[str, int], int] = defaultdict(int)
        self._partition: dict[tuple[str, int], int] = defaultdict(int)
        self._index: dict[tuple[str, int], int] = defaultdict(int)
        self._largest: dict[int, tuple[int, str]] = {}  # second -> (bytes, item)
        self.writes = 0
        self.wcu = 0
        self.index_wcu = 0

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
            report.throttled_seconds = sum(
                1
                for counts in (self._item, self._partition, self._index)
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
