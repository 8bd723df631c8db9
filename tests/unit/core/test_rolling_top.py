"""Rolling top-N from the buckets' top lists (aggregator.core.rolling_top) against a plain sort
of the keys' sums: the lists are built by the real merge from random histories (keys entering
and leaving, values falling to zero or below it, ties), with small lists so that floors rise."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.core.rolling_top import decide
from aggregator.core.top_list_merge import TopList, merge

KEYS = [f"k{i}" for i in range(8)]


def plain_top(truth: list[dict[str, Decimal]], n: int) -> list[tuple[Decimal, str]]:
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for bucket in truth:
        for key, value in bucket.items():
            sums[key] += value
    return sorted(((v, k) for k, v in sums.items() if v != 0), key=lambda e: (-e[0], e[1]))[:n]


# one bucket's history: batches of (key, new value), values small so that ties are common
history = st.lists(
    st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-3, 6)), min_size=1, max_size=6),
    min_size=0,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(history, st.booleans()), min_size=1, max_size=5),
    st.integers(1, 5),
    st.integers(1, 4),
)
def test_the_answer_is_a_plain_sort_whenever_the_lists_give_one(
    buckets: list[tuple[list[list[tuple[str, int]]], bool]], n: int, keep: int
) -> None:
    truth: list[dict[str, Decimal]] = []
    lists: list[list[TopList]] = []
    for batches, two_partitions in buckets:
        values: dict[str, Decimal] = {}
        parts = [TopList(), TopList()] if two_partitions else [TopList()]
        for batch in batches:
            newest: dict[str, Decimal] = {}
            for key, value in batch:
                newest[key] = Decimal(value)
            values.update(newest)
            for p in range(len(parts)):  # each key in one partition, by its name
                mine = {k: v for k, v in newest.items() if int(k[1:]) % len(parts) == p}
                if mine:
                    parts[p] = merge(parts[p], mine, keep)
        truth.append({k: v for k, v in values.items() if v != 0})
        lists.append(parts)
    expected = plain_top(truth, n)
    decision = decide(lists, n)
    if decision.top is None and decision.fetch:
        fetched = {(i, key): truth[i].get(key, Decimal(0)) for i, key in decision.fetch}
        decision = decide(lists, n, fetched=fetched)
    if decision.top is not None:
        assert decision.top == expected
    if all(one.floor is None for parts in lists for one in parts):
        assert decision.top == expected  # nothing was ever left out: always decided


def test_a_key_listed_in_some_buckets_is_read_back_where_it_is_not() -> None:
    # bucket 0 lists a and b; bucket 1 keeps one key above its floor 5: a could have up to
    # 11 + 5 = 16 > 15 (b's sum), so a is read back there
    buckets = [
        [TopList({"a": Decimal(11), "b": Decimal(8)})],
        [TopList({"b": Decimal(7)}, floor=Decimal(5))],
    ]
    first = decide(buckets, 1)
    assert first.top is None and first.fetch == {(1, "a")}
    assert decide(buckets, 1, fetched={(1, "a"): Decimal(3)}).top == [(Decimal(15), "b")]
    # a tie at the top is broken by key, as a plain sort breaks it
    assert decide(buckets, 1, fetched={(1, "a"): Decimal(4)}).top == [(Decimal(15), "a")]
    assert decide(buckets, 2, fetched={(1, "a"): Decimal(5)}).top == [
        (Decimal(16), "a"),
        (Decimal(15), "b"),
    ]
    # below b, a key's upper bound under the sum of the floors decides nothing: a key no list
    # names may have up to 0 + 5
    assert decide(buckets, 3, fetched={(1, "a"): Decimal(-9)}).top is None
    # b alone above a's bound: decided without a read
    assert decide([[TopList({"a": Decimal(9), "b": Decimal(8)})], buckets[1]], 1).top == [
        (Decimal(15), "b")
    ]


def test_unlisted_keys_are_zero_without_floors_and_zero_sums_are_not_ranked() -> None:
    buckets = [[TopList({"a": Decimal(2), "b": Decimal(-2)})], [TopList({"b": Decimal(2)})], []]
    assert decide(buckets, 5).top == [(Decimal(2), "a")]
