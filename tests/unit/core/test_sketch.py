"""Logarithmic bins and percentiles: every percentile within the stated relative accuracy of the
true nearest-rank percentile, computed here by sorting the values, also after deletes."""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregator.core.sketch import Bin, LogBins, percentile

ACCURACIES = [Decimal("0.01"), Decimal("0.05"), Decimal("0.001")]
values = st.builds(
    lambda sign, digits, exponent: Decimal(f"{sign}{digits}E{exponent}"),
    st.sampled_from(["", "-"]),
    st.integers(1, 10**12),
    st.integers(-20, 20),
) | st.just(Decimal(0))
# the reported value is rounded to 38 digits: allow that much beyond alpha
SLACK = Decimal("1E-36")


def true_percentile(sorted_values: list[Decimal], p: Decimal) -> Decimal:
    rank = max(1, math.ceil(p * len(sorted_values) / 100))
    return sorted_values[rank - 1]


def within(estimate: Decimal, truth: Decimal, alpha: Decimal) -> bool:
    return abs(estimate - truth) <= (alpha + SLACK) * abs(truth)


@given(
    st.sampled_from(ACCURACIES),
    st.lists(values, min_size=1, max_size=60),
    st.lists(st.integers(0, 59), max_size=20),
)
def test_percentiles_are_within_alpha_also_after_deletes(alpha, written, deleted):
    bins = LogBins(alpha)
    counts: Counter[Bin] = Counter(bins.bin_of(v) for v in written)
    kept = list(written)
    for i in sorted({i for i in deleted if i < len(written)}, reverse=True):
        counts[bins.bin_of(kept[i])] -= 1  # a delete decrements the same bin
        del kept[i]
    for p in map(Decimal, ("0", "1", "25", "50", "90", "99", "99.9", "100")):
        found = percentile(bins, counts, p)
        if not kept:
            assert found is None
            continue
        estimate, total = found
        assert total == len(kept)
        truth = true_percentile(sorted(kept), p)
        assert within(estimate, truth, alpha), (p, estimate, truth)


@given(st.sampled_from(ACCURACIES), values, values)
def test_bins_order_as_their_values(alpha, a, b):
    bins = LogBins(alpha)
    if a <= b:
        assert bins.sort_key(bins.bin_of(a)) <= bins.sort_key(bins.bin_of(b))


@given(st.sampled_from(ACCURACIES), values)
def test_a_value_is_within_alpha_of_its_bin(alpha, value):
    bins = LogBins(alpha)
    assert within(bins.value_of(bins.bin_of(value)), value, alpha)


def test_bin_edges_follow_gamma():
    bins = LogBins(Decimal("0.01"))  # gamma = 1.01 / 0.99
    assert bins.bin_of(Decimal(1)) == Bin(1, 0)  # 1 = gamma^0: the top of bin 0
    assert bins.bin_of(Decimal("1.0001")) == Bin(1, 1)
    assert bins.bin_of(Decimal(-1)) == Bin(-1, 0)
    assert bins.bin_of(Decimal(0)) == Bin(0)
    # bin 0 is (1/gamma, 1]: reported as 2 / (1 + gamma) = 1 - alpha, alpha from both edges
    assert bins.value_of(Bin(1, 0)) == Decimal("0.99")


@pytest.mark.parametrize("alpha", ["0", "1", "-0.1", "1.5"])
def test_accuracy_outside_0_1_is_refused(alpha):
    with pytest.raises(ValueError, match="between 0 and 1"):
        LogBins(Decimal(alpha))


def test_percentile_outside_0_100_is_refused():
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile(LogBins(Decimal("0.01")), {}, Decimal(101))
