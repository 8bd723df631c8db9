"""Exact top-N from a leaderboard index with floors (aggregator.core.ranking), against a plain
sort of every key: random keys with many ties, negative values and zeros, spread over index
partitions, each with or without a floor; the index holds every key at or above its partition's
floor, any subset of the others, and the floor's own entry, in descending order with ties (the
floor's entry among them) in random order, read in pages of random size."""

from __future__ import annotations

import random
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.core.ranking import IndexEntry, PartitionRead, exact_top, read_partition

values = st.integers(-3, 6).map(Decimal)
case = st.fixed_dictionaries(
    {
        "keys": st.dictionaries(st.text("abcdefgh", min_size=1, max_size=2), values, max_size=14),
        "partitions": st.integers(1, 3),
        "floors": st.lists(st.one_of(st.none(), values), min_size=3, max_size=3),
        "n": st.integers(1, 8),
        "page": st.integers(1, 6),
        "seed": st.integers(0, 2**16),
    }
)


def _plain_top(keys: dict[str, Decimal], n: int) -> list[tuple[Decimal, str]]:
    return sorted(((v, k) for k, v in keys.items() if v), key=lambda e: (-e[0], e[1]))[:n]


def _index(
    keys: dict[str, Decimal], floor: Decimal | None, rng: random.Random
) -> list[IndexEntry[str]]:
    """One partition's index: keys at or above the floor, a random part of those below, the
    floor's entry; descending, ties shuffled."""
    entries = [
        IndexEntry(v, k, k)
        for k, v in keys.items()
        if floor is None or v >= floor or rng.random() < 0.4
    ]
    if floor is not None:
        entries.append(IndexEntry(floor, floor=True))
    rng.shuffle(entries)
    entries.sort(key=lambda e: -e.value)  # stable: ties keep their shuffled order
    return entries


def _pages(entries: list[IndexEntry[str]], size: int, pages_read: list[int]):
    for start in range(0, max(len(entries), 1), size):
        pages_read.append(1)
        yield entries[start : start + size]


@settings(max_examples=3000, deadline=None)
@given(case=case)
def test_exact_top_is_a_plain_sort_or_says_it_cannot_be(case) -> None:
    rng = random.Random(case["seed"])
    partitions: list[dict[str, Decimal]] = [{} for _ in range(case["partitions"])]
    for key, value in case["keys"].items():
        partitions[rng.randrange(case["partitions"])][key] = value
    n = case["n"]
    reads: list[PartitionRead[str]] = []
    for i, keys in enumerate(partitions):
        floor = case["floors"][i]
        pages_read: list[int] = []
        read = read_partition(_pages(_index(keys, floor, rng), case["page"], pages_read), n)
        assert read.requests == len(pages_read)
        reads.append(read)
    top = exact_top(reads, n)
    if top is None:
        # only a floor can make the index unable to answer
        assert any(f is not None for f in case["floors"][: case["partitions"]])
        return
    assert [(v, k) for v, k, _ in top] == _plain_top(case["keys"], n)


def test_a_floor_reached_with_fewer_than_n_keys_is_no_answer() -> None:
    above = [IndexEntry(Decimal(9), "a", "a"), IndexEntry(Decimal(5), floor=True)]
    read = read_partition([[*above, IndexEntry(Decimal(4), "b", "b")]], 2)
    assert read.below == Decimal(5) and exact_top([read], 2) is None
    assert [k for _, k, _ in exact_top([read], 1) or []] == ["a"]


def test_keys_tied_with_the_floor_after_its_entry_are_read() -> None:
    index = [
        IndexEntry(Decimal(7), "a", "a"),
        IndexEntry(Decimal(5), floor=True),
        IndexEntry(Decimal(5), "c", "c"),
        IndexEntry(Decimal(5), "b", "b"),
        IndexEntry(Decimal(4), "d", "d"),
    ]
    read = read_partition([index[:2], index[2:]], 2)
    assert [k for _, k, _ in exact_top([read], 2) or []] == ["a", "b"]
    assert read.requests == 2


def test_zeros_are_read_past_and_an_index_without_floor_is_complete() -> None:
    index = [IndexEntry(Decimal(0), k, k) for k in "xyz"] + [IndexEntry(Decimal(-2), "n", "n")]
    read = read_partition([index[:2], index[2:]], 1)
    assert read.below is None
    assert [(v, k) for v, k, _ in exact_top([read], 1) or []] == [(Decimal(-2), "n")]
