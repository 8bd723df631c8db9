"""``sum``: the default kind: counts (``delta: 1``) and sums (``delta: {attribute: NAME}``)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import ClassVar

from aggregator.core.kinds.base import Entry, Kind, ValueCount

__all__ = ["Sum"]


class Sum(Kind):
    """One item per key whose ``value`` is the sum of the matching items' deltas.

    Write cost: one update per aggregate item per batch. Read: one ``GetItem``. Fields:
    ``value``.
    """

    name: ClassVar[str] = "sum"
    summary: ClassVar[str] = "sum of the deltas (a count for delta: 1)"
    ranks: ClassVar[bool] = True

    def entry(self, number: Decimal) -> Entry:
        return Entry(None, number)

    def fields(
        self, value: Decimal | None, count: Decimal | None, values: Sequence[ValueCount]
    ) -> dict[str, Decimal | None]:
        return {"value": Decimal(0) if value is None else value}
