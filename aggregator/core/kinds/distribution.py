"""``distribution``: each key's value distribution in logarithmic bins of a stated relative
accuracy, read as percentiles.

The bins are DDSketch's (:mod:`aggregator.core.sketch`): for a relative accuracy ``alpha`` a
value goes to the bin of growth ``gamma = (1 + alpha) / (1 - alpha)`` that holds it, reported as
a value within ``alpha`` of every value of the bin. Each bin is one item under the key whose
value is an exact count, so deletes decrement it; bins never merge. The bin's item carries the
bin in its sort key as order-preserving text of ``sign * (index + 10^7)``
(:mod:`aggregator.core.sortable`, at most 13 bytes), so a ``Query`` of the key returns the bins
in value order and a percentile is read from their counts
(:meth:`~aggregator.core.kinds.base.Kind.percentiles`, nearest rank). The number of bins a key
can have is bounded by the range of its values: ``ln(max/min) / ln(gamma)`` per sign, e.g. 461
bins for values from 1 to 10,000 at 1 %.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from functools import cached_property
from typing import Annotated, ClassVar

from pydantic import BeforeValidator

from aggregator.core.kinds.base import Entry, Kind, Reading, ValueCount
from aggregator.core.sketch import Bin, LogBins
from aggregator.core.sortable import sortable_number

__all__ = ["DEFAULT_PERCENTILES", "Distribution"]

_INDEX_OFFSET = 10**7
"""Added to a bin's index before it goes into a sort key, so that the text orders by index:
bin indexes stay within +-1.5 million even at the finest accuracy (``ln(1E+126) / ln(gamma)``
for ``alpha = 0.0001``)."""

DEFAULT_PERCENTILES = (Decimal(50), Decimal(90), Decimal(99))
"""The percentiles ``query get`` shows for a distribution rule."""


MIN_ACCURACY, MAX_ACCURACY = Decimal("0.0001"), Decimal("0.5")


def _accuracy(value: object) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | str | Decimal):
        raise ValueError(f"expected a number such as 0.01 (1 %), got {type(value).__name__}")
    try:
        number = Decimal(value)
    except ArithmeticError:
        raise ValueError(f"expected a number such as 0.01 (1 %), got {value!r}") from None
    if not (number.is_finite() and MIN_ACCURACY <= number <= MAX_ACCURACY):
        raise ValueError(
            f"relative accuracy {value} must be from {MIN_ACCURACY} to {MAX_ACCURACY}, e.g. "
            "0.01 for 1 %"
        )
    return number


Accuracy = Annotated[Decimal, BeforeValidator(_accuracy)]


class Distribution(Kind):
    """Log bins of relative accuracy ``relative_accuracy`` (default 0.01: every percentile read
    is within 1 % of the true one, relatively; zero exactly).

    Write: one update per (key, bin) per batch, and one more when a bin's count falls to zero.
    Read: one ``Query`` of the key's bins (1 MB pages). Fields: ``count``, ``min``, ``max`` and
    ``p50``, ``p90``, ``p99``, each a bin's reported value.
    """

    relative_accuracy: Accuracy = Decimal("0.01")
    name: ClassVar[str] = "distribution"
    summary: ClassVar[str] = "value distribution in log bins, read as percentiles"
    needs_attribute: ClassVar[bool] = True
    per_value: ClassVar[bool] = True
    suffix_bytes: ClassVar[int] = 1 + 13
    reading: ClassVar[Reading] = Reading("values", "ascending")
    headline: ClassVar[str] = "count"

    @cached_property
    def bins(self) -> LogBins:
        return LogBins(self.relative_accuracy)

    def entry(self, number: Decimal) -> Entry:
        b = self.bins.bin_of(number)
        return Entry(sortable_number(Decimal(b.sign * (b.index + _INDEX_OFFSET))), Decimal(1))

    @staticmethod
    def bin_of_number(number: Decimal) -> Bin:
        """The bin a value item's number (decoded from its suffix) names."""
        if number == 0:
            return Bin(0)
        return Bin(1 if number > 0 else -1, int(abs(number)) - _INDEX_OFFSET)

    def number_of(self, number: Decimal) -> Decimal:
        """The bin's reported value, for the number its item's suffix holds."""
        return self.bins.value_of(self.bin_of_number(number))

    @property
    def percentile_accuracy(self) -> Decimal:
        return self.relative_accuracy

    def fields(
        self, value: Decimal | None, count: Decimal | None, values: Sequence[ValueCount]
    ) -> dict[str, Decimal | None]:
        found, total = self.percentiles(values, (Decimal(0), *DEFAULT_PERCENTILES, Decimal(100)))
        out: dict[str, Decimal | None] = {"count": total, "min": found[0]}
        for p, v in zip(DEFAULT_PERCENTILES, found[1:-1], strict=True):
            out[f"p{p}"] = v
        out["max"] = found[-1]
        return out

    def describe(self) -> str:
        return f"distribution (alpha {self.relative_accuracy})"
