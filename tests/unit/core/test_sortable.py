"""Order-preserving sort-key text for numbers: byte order equals numeric order for every number
DynamoDB stores, equal numbers share a text, and the text reads back to the number."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregator.core.sortable import number_from_sortable, sortable_number

# every number DynamoDB stores: up to 38 significant digits, adjusted exponent -130..125
dynamodb_numbers = st.builds(
    lambda sign, digits, adjusted: Decimal(f"{sign}{digits}E{adjusted - len(digits) + 1}"),
    st.sampled_from(["", "-"]),
    st.from_regex(r"[1-9][0-9]{0,37}", fullmatch=True),
    st.integers(-130, 125),
) | st.sampled_from([Decimal(0), Decimal("-0"), Decimal("0.00"), Decimal("1.50"), Decimal(-1)])


def _key(value: Decimal) -> bytes:
    return sortable_number(value).encode("utf-8")  # DynamoDB compares UTF-8 bytes


@given(dynamodb_numbers, dynamodb_numbers)
def test_byte_order_is_numeric_order(a, b):
    assert (_key(a) < _key(b)) == (a < b)
    assert (_key(a) == _key(b)) == (a == b)


@given(dynamodb_numbers)
def test_the_text_reads_back_to_the_number(value):
    text = sortable_number(value)
    assert number_from_sortable(text) == value
    assert len(text) <= 43 and text.isascii()


@given(st.lists(dynamodb_numbers, min_size=2, max_size=30))
def test_sorting_the_texts_sorts_the_numbers(values):
    assert [number_from_sortable(t) for t in sorted(map(sortable_number, values))] == sorted(values)


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [
        ("-10", "-9"),
        ("-0.12", "-0.1"),
        ("-1E-130", "0"),
        ("0", "1E-130"),
        ("0.1", "0.12"),
        ("9", "10"),
        ("1E+125", "9.9999999999999999999999999999999999999E+125"),
        ("-9.9999999999999999999999999999999999999E+125", "-1E+125"),
        ("1.2345678901234567890123456789012345677", "1.2345678901234567890123456789012345678"),
    ],
)
def test_known_pairs(smaller, larger):
    assert _key(Decimal(smaller)) < _key(Decimal(larger))


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "1E+126", "1E-131", "1" * 39])
def test_numbers_dynamodb_cannot_store_are_refused(bad):
    with pytest.raises(ValueError):
        sortable_number(Decimal(bad))


@pytest.mark.parametrize("bad", ["", "3", "2", "0499", "2abc1", "20010", "04989~x", "05000"])
def test_text_that_is_no_encoding_is_refused(bad):
    with pytest.raises(ValueError, match="not a sortable number"):
        number_from_sortable(bad)
