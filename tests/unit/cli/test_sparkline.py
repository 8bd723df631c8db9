"""The sparkline of ``query window --series``: eight bars from the smallest value to the
largest."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from aggregator.cli.output import SPARK_BARS, sparkline


def test_bars_scale_from_the_smallest_to_the_largest() -> None:
    assert sparkline([Decimal(n) for n in (0, 1, 2, 3, 4, 5, 6, 7, 8)]) == "▁▂▃▄▅▆▇██"
    assert sparkline([Decimal(-3), Decimal(0), Decimal(3)]) == "▁▅█"
    assert sparkline([Decimal("2.5")] * 3) == "▄▄▄"
    assert sparkline([Decimal(7)]) == "▄"
    assert sparkline([Decimal(-2)] * 2) == "▄▄"
    # all zero (a key's buckets that nothing reached): the lowest bar, not a level of data
    assert sparkline([Decimal(0)] * 4) == "▁▁▁▁"
    assert sparkline([Decimal("0.00"), None, Decimal(0)]) == "▁ ▁"
    assert sparkline([]) == ""
    # no value (a mean's empty bucket): a gap, the others scaled without it
    assert sparkline([None, Decimal(2), None, Decimal(4)]) == " ▁ █"
    assert sparkline([None, Decimal(1), None]) == " ▄ "
    assert sparkline([None, None]) == "  "


@given(st.lists(st.integers(-(10**6), 10**6), min_size=2, max_size=40))
def test_order_is_kept_and_the_ends_are_the_extremes(numbers: list[int]) -> None:
    line = sparkline([Decimal(n) for n in numbers])
    assert len(line) == len(numbers)
    if min(numbers) == max(numbers):
        assert set(line) == ({"▁"} if numbers[0] == 0 else {"▄"})
        return
    rank = [SPARK_BARS.index(c) for c in line]
    for a, b, ra, rb in zip(numbers, numbers[1:], rank, rank[1:], strict=False):
        if a < b:
            assert ra <= rb
    assert rank[numbers.index(min(numbers))] == 0
    assert rank[numbers.index(max(numbers))] == len(SPARK_BARS) - 1
