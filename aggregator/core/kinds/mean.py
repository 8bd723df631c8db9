"""``mean``: the exact mean of a numeric attribute per key, kept as its sum and count.

AVG is kept as ``{sum, count}`` by the streaming SQL engines that stay exact under retraction
(Flink's ``AvgAggFunction``, ksqlDB, TiDB): a retraction subtracts from both, and the mean is
read as their ratio, never stored rounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import ClassVar

from aggregator.core.kinds.base import Entry, Kind, ValueCount

__all__ = ["MEAN_CONTEXT", "Mean", "mean_of"]

MEAN_CONTEXT = Context(prec=38, rounding=ROUND_HALF_EVEN)
"""The precision of a mean as read: the exact ratio rounded half-even to 38 significant digits
(DynamoDB's number precision, Developer Guide, "Supported data types")."""


def mean_of(total: Decimal, count: Decimal) -> Decimal | None:
    """``total / count`` to :data:`MEAN_CONTEXT`, ``None`` for a count of zero (no items)."""
    if count == 0:
        return None
    return MEAN_CONTEXT.divide(total, count)


class Mean(Kind):
    """One item per key with ``value`` (the sum of the attribute) and ``count`` (how many items
    hold it), both added by the same update: a mean costs what a sum costs.

    Read: one ``GetItem``. Fields: ``mean`` (``None`` without items), ``sum``, ``count``.
    """

    name: ClassVar[str] = "mean"
    summary: ClassVar[str] = "mean of the attribute (its sum and count in one item)"
    needs_attribute: ClassVar[bool] = True
    keeps_count: ClassVar[bool] = True
    headline: ClassVar[str] = "mean"

    def entry(self, number: Decimal) -> Entry:
        return Entry(None, number, Decimal(1))

    def fields(
        self, value: Decimal | None, count: Decimal | None, values: Sequence[ValueCount]
    ) -> dict[str, Decimal | None]:
        total = Decimal(0) if value is None else value
        items = Decimal(0) if count is None else count
        return {"mean": mean_of(total, items), "sum": total, "count": items}
