"""Logarithmic bins of a stated relative accuracy, and percentiles read from exact bin counts
(pure).

The mapping is DDSketch's (Masson, Rim and Lee, "DDSketch: a fast and fully-mergeable quantile
sketch with relative-error guarantees", VLDB 2019): for a relative accuracy ``alpha`` the bins
grow by ``gamma = (1 + alpha) / (1 - alpha)``; a value ``v > 0`` falls in bin
``i = ceil(log_gamma(v))``, i.e. ``gamma^(i-1) < v <= gamma^i``, and the bin is reported as
``2 * gamma^i / (1 + gamma)``, which is within ``alpha`` of every value of the bin, relatively.
Negative values use the bins of their magnitude, mirrored; zero has a bin of its own. Bins never
merge (no collapsing store), so a count per bin stays exact under deletes: a retraction
decrements the bin the value went to, which is always the same bin.

The logarithm is computed in ``Decimal`` with 60 significant digits, so a value's bin is the same
on every machine and at every delivery (a float ``log`` could differ across platforms at a bin's
edge, and one value must never count in one bin and be retracted from another).

Percentiles use the nearest-rank definition: the ``p``-th percentile of ``n`` values (``0 < p <=
100``) is the value of rank ``ceil(p / 100 * n)`` in ascending order (rank 1 for ``p = 0``).
:func:`percentile` returns the representative of the bin that holds that rank, so it is within
``alpha`` of the true percentile, relatively (zero exactly).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Context, Decimal
from typing import TypeVar

__all__ = ["Bin", "LogBins", "nearest_rank", "percentile", "percentile_list"]

T = TypeVar("T")

_CONTEXT = Context(prec=60, Emin=-9999, Emax=9999)
_DYNAMODB = Context(prec=38)


@dataclass(frozen=True, order=True, slots=True)
class Bin:
    """One bin: ``sign`` -1, 0 or 1 and, for a non-zero sign, the ``index`` of the magnitude's
    bin (0 for zero). Bins order as their values do: :meth:`LogBins.sort_key`."""

    sign: int
    index: int = 0


class LogBins:
    """The bins of relative accuracy ``relative_accuracy`` (``alpha``, e.g. ``Decimal("0.01")``
    for 1 %; module docstring).

    Raises
    ------
    ValueError
        When ``relative_accuracy`` is not strictly between 0 and 1.
    """

    def __init__(self, relative_accuracy: Decimal) -> None:
        if not Decimal(0) < relative_accuracy < Decimal(1):
            raise ValueError(
                f"relative accuracy {relative_accuracy} must be between 0 and 1, e.g. 0.01"
            )
        self.relative_accuracy = relative_accuracy
        c = _CONTEXT
        self.gamma = c.divide(c.add(1, relative_accuracy), c.subtract(1, relative_accuracy))
        self._ln_gamma = self.gamma.ln(c)

    def bin_of(self, value: Decimal) -> Bin:
        """The bin ``value`` (finite) counts in."""
        if value == 0:
            return Bin(0)
        magnitude = abs(value)
        ratio = _CONTEXT.divide(magnitude.ln(_CONTEXT), self._ln_gamma)
        index = int(ratio.to_integral_value(rounding=ROUND_CEILING, context=_CONTEXT))
        return Bin(1 if value > 0 else -1, index)

    def value_of(self, b: Bin) -> Decimal:
        """The value a bin is reported as: ``±2 * gamma^i / (1 + gamma)``, to 38 significant
        digits (DynamoDB's precision)."""
        if b.sign == 0:
            return Decimal(0)
        c = _CONTEXT
        magnitude = c.divide(c.multiply(2, c.power(self.gamma, b.index)), c.add(1, self.gamma))
        return _DYNAMODB.plus(magnitude if b.sign > 0 else -magnitude)

    @staticmethod
    def sort_key(b: Bin) -> tuple[int, int]:
        """A key that orders bins as their values: negatives by descending index, zero, then
        positives by ascending index."""
        return (b.sign, b.index * b.sign)


def percentile(
    bins: LogBins, counts: Mapping[Bin, int] | Iterable[tuple[Bin, int]], p: Decimal
) -> tuple[Decimal, int] | None:
    """The nearest-rank ``p``-th percentile (``0 <= p <= 100``; module docstring) of the values
    counted in ``counts`` (bin -> count; counts of zero or below are skipped), as the value of its
    bin, with the number of values; ``None`` when there are none.

    Raises
    ------
    ValueError
        When ``p`` is outside 0..100.
    """
    if not Decimal(0) <= p <= Decimal(100):
        raise ValueError(f"percentile {p} must be between 0 and 100")
    items = counts.items() if isinstance(counts, Mapping) else counts
    ordered = sorted(((b, n) for b, n in items if n > 0), key=lambda bn: bins.sort_key(bn[0]))
    found = nearest_rank(ordered, p)
    return None if found is None else (bins.value_of(found), sum(n for _, n in ordered))


def nearest_rank(ordered: Sequence[tuple[T, int | Decimal]], p: Decimal) -> T | None:
    """The nearest-rank ``p``-th percentile of values given as ``(value, count)`` in ascending
    order (positive counts): the value of rank ``ceil(p / 100 * n)``, rank 1 for ``p = 0``;
    ``None`` when there are no values."""
    total = sum(n for _, n in ordered)
    if total == 0:
        return None
    rank = max(1, math.ceil(p * total / 100))
    seen: int | Decimal = 0
    for value, n in ordered:
        seen += n
        if seen >= rank:
            return value
    raise AssertionError("unreachable: rank <= total")  # pragma: no cover


def percentile_list(ps: Iterable[Decimal | int | float | str]) -> list[Decimal]:
    """Percentiles as ``Decimal`` s, each from 0 to 100, at least one.

    Raises
    ------
    ValueError
        Naming what was given, e.g. ``expected numbers from 0 to 100 such as 50,90,99, got
        ['101']``.
    """
    given = list(ps)
    problem = f"expected numbers from 0 to 100 such as 50,90,99, got {given}"
    try:
        out = [Decimal(str(p).strip()) for p in given]
    except ArithmeticError:
        raise ValueError(problem) from None
    if not out or any(not (p.is_finite() and 0 <= p <= 100) for p in out):
        raise ValueError(problem)
    return out
