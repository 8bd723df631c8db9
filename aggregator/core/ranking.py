"""Exact top-N from a leaderboard index with floors (pure).

The index (:mod:`aggregator.dynamodb.floors`) holds, per index partition value, every aggregate
at or above the partition's floor, some below it, and one entry for the floor itself, all in
descending order of value; equal values come in no particular order (a GSI orders equal sort
key values as it likes). :func:`read_partition` reads one partition's entries a page at a time
and says what the read proves about the aggregates it did not see; :func:`exact_top` merges the
partitions of a rule and returns the top ``n`` only when those proofs make it exact, else
``None`` (the caller then ranks every aggregate).

Keys whose value is zero are never ranked (as ``aggregator query list`` leaves them out); ties
are broken by key, as a plain sort of ``(-value, key)`` breaks them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Generic, TypeVar

__all__ = ["IndexEntry", "PartitionRead", "exact_top", "read_partition"]

T = TypeVar("T")


@dataclass(frozen=True)
class IndexEntry(Generic[T]):
    """One entry of the index as a ``Query`` returned it: an aggregate's ``value``, ``key``
    and ``payload`` (whatever the caller ranks), or, with ``floor=True``, the partition's floor
    (``value``; ``key`` and ``payload`` unused)."""

    value: Decimal
    key: str = ""
    payload: T | None = None
    floor: bool = False


@dataclass(frozen=True)
class PartitionRead(Generic[T]):
    """What reading one index partition gave.

    Attributes
    ----------
    entries
        Non-zero aggregates read, largest first: ``(value, key, payload)``.
    below
        Every aggregate of the partition not in ``entries`` (zeros aside) has a value strictly
        below it; ``None`` when none was left out (the index ended and had no floor).
    requests
        Pages read.
    """

    entries: tuple[tuple[Decimal, str, T], ...]
    below: Decimal | None
    requests: int


def read_partition(pages: Iterable[list[IndexEntry[T]]], n: int) -> PartitionRead[T]:
    """Read pages of one index partition (largest value first) until the top ``n`` of the
    partition, ties at the ``n``-th value included, are known, or the floor is passed, or the
    pages end. ``pages`` is consumed lazily: the caller issues one ``Query`` per page."""
    entries: list[tuple[Decimal, str, T]] = []
    floor: Decimal | None = None
    requests = 0
    iterator: Iterator[list[IndexEntry[T]]] = iter(pages)
    for page in iterator:
        requests += 1
        for entry in page:
            if entry.floor:
                floor = entry.value
                continue
            if floor is not None and entry.value < floor:
                # aggregates below the floor may be missing from the index: what is not read is
                # below it (the indexed ones come after this entry, the others are below it)
                return PartitionRead(tuple(entries), floor, requests)
            if len(entries) >= n and entry.value < entries[-1][0]:
                # the n-th value and its ties are all read; the rest is below them
                return PartitionRead(tuple(entries), entries[-1][0], requests)
            if entry.value == 0:
                continue
            assert entry.payload is not None
            entries.append((entry.value, entry.key, entry.payload))
    # the index ended: nothing is left out, but for the aggregates below a floor, which the
    # index need not hold
    return PartitionRead(tuple(entries), floor, requests)


def exact_top(reads: Iterable[PartitionRead[T]], n: int) -> list[tuple[Decimal, str, T]] | None:
    """The ``n`` largest non-zero aggregates over the partitions ``reads`` (largest first, ties
    by key), or ``None`` when the reads do not prove it: a partition left out aggregates below
    some value that the ``n``-th of the merged result does not reach."""
    reads = list(reads)
    merged = sorted((e for r in reads for e in r.entries), key=lambda e: (-e[0], e[1]))
    top = merged[:n]
    for read in reads:
        if read.below is None:
            continue
        if len(top) < n or top[-1][0] < read.below:
            return None
    return top
