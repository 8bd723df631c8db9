"""``min`` and ``max``: the exact smallest or largest value of a numeric attribute per key, also
after the current extreme is deleted or modified.

A sum cannot give that back, so these kinds keep the multiset of values, as every streaming
engine that is exact under retraction does (Flink's ``MaxWithRetractAggFunction`` keeps a
value -> count map; RisingWave an ordered state table): one item per (key, distinct value),
the value in the sort key as order-preserving text (:mod:`aggregator.core.sortable`) and the
number of items holding it as the item's value. The extreme is the first value item whose count
is not zero in an ordered ``Query`` (ascending for ``min``, descending for ``max``). A value
item whose count falls to zero gets a TTL from the writer, so such items do not pile up in
front of the extreme.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import ClassVar

from aggregator.core.kinds.base import Entry, Kind, Reading, ValueCount
from aggregator.core.sortable import MAX_SORTABLE_BYTES, sortable_number

__all__ = ["Max", "Min"]


class _Extreme(Kind):
    needs_attribute: ClassVar[bool] = True
    per_value: ClassVar[bool] = True
    suffix_bytes: ClassVar[int] = 1 + MAX_SORTABLE_BYTES

    def entry(self, number: Decimal) -> Entry:
        return Entry(sortable_number(number), Decimal(1))

    def fields(
        self, value: Decimal | None, count: Decimal | None, values: Sequence[ValueCount]
    ) -> dict[str, Decimal | None]:
        # the first value item in the reading's order is the extreme, named by the headline
        return {self.headline: values[0].number if values else None}


class Min(_Extreme):
    """The smallest value per key. Write: one update per (key, distinct value) per batch, and
    one more when a value's count falls to zero. Read: ``Query`` pages of the key's value items
    in ascending order up to the first non-zero one. Fields: ``min`` (``None`` without items)."""

    name: ClassVar[str] = "min"
    summary: ClassVar[str] = "smallest value of the attribute (one item per distinct value)"
    reading: ClassVar[Reading] = Reading("values", "ascending", first_only=True)
    headline: ClassVar[str] = "min"


class Max(_Extreme):
    """The largest value per key: as :class:`Min`, reading in descending order. Fields:
    ``max``."""

    name: ClassVar[str] = "max"
    summary: ClassVar[str] = "largest value of the attribute (one item per distinct value)"
    reading: ClassVar[Reading] = Reading("values", "descending", first_only=True)
    headline: ClassVar[str] = "max"
