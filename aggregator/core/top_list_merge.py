"""A leaderboard's top list: the largest aggregates of one index partition, in one item (pure).

Why one item instead of the sparse GSI
--------------------------------------
A GSI entry whose sort key is the value is deleted and put again on every change of the value:
2 WCU per update of an indexed aggregate (Developer Guide, "Global secondary indexes", writes to
an index), however many updates a batch makes. A **top list** keeps the ``keep`` largest
aggregates of a partition (a rule's, a time bucket's, or one of ``leaderboard_partitions``) as a
map ``key -> value`` in one item. It is written once per stream batch that changes it, whatever
the number of keys the batch changed, and ``top`` reads it with one ``GetItem``.

Who keeps it, and why the values are exact
------------------------------------------
The list is kept from the stream records of the aggregate items themselves (their new images),
not by the writer that updated them. That is what makes a plain "last value wins" merge exact
without versions or tombstones:

- DynamoDB Streams shows the records of one item in the order of its modifications (Developer
  Guide, "Change data capture for DynamoDB Streams"), and Lambda reads each shard in order,
  parents before children, with ``ParallelizationFactor`` 1; with more, still in order per
  partition key (Lambda Developer Guide, "Using Lambda with DynamoDB"). So the observations
  of one aggregate reach the lists in the order of its values.
- A failed batch is delivered again before any later record of its shard, so a repeated
  observation is repeated before any newer one of the same key: merging it again changes
  nothing.
- Observations of different keys may come from different shards at once. Each merge is one
  conditional write of the whole item (:mod:`aggregator.dynamodb.top_list_items`), so merges are
  serialized per item.

The invariant
-------------
A list has a ``floor`` (``None``: minus infinity). **Every aggregate of the partition whose value
is non-zero and above the floor is in the list, with its current value** (once the stream has
been read to the end; between a write and its record's merge the list lags, as a GSI does).
Keys at or below the floor may be listed too. :func:`merge` keeps it:

- An observation of a listed key replaces its value (a key whose value fell to zero, or whose
  item is gone, leaves the list).
- An unlisted key is added when its new value is above the floor. One at or below the floor
  stays out: it is at or below the floor, which only rises.
- When more than ``keep`` keys are listed, the floor rises to the ``keep + 1``-th largest value
  and every key at or below it leaves: at most ``keep`` keys stay, all above the new floor
  (ties at the floor all leave, so ties never grow the list). Long keys may make it rise
  further (:data:`MAX_BYTES`).

So ``top(n)`` of a partition is exact when its ``n``-th largest listed value is above the
floor (:func:`exact_top`): whatever is not listed is at or below the floor. Values that fall can
leave fewer than ``n`` keys above it; the caller then reads every aggregate (exact, slower), as
with the GSI's floors (:mod:`aggregator.core.ranking`). A floor never falls: a rebuild of the
rule starts a new list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType

from aggregator.core.layout import leaderboard_partition

__all__ = [
    "KEEP",
    "MAX_BYTES",
    "TopList",
    "entry_bytes",
    "exact_top",
    "latest",
    "merge",
    "placement",
]

KEEP = 256
"""Keys a list keeps. ``top`` of up to 100 keys is answered from the list unless more than 156
keys tie at its floor (they all leave together) or keys fell below it. With 256 tail numbers
(``N12345``) and two-digit counts the item is about 2.4 KB: 3 WCU a write, 0.5 RCU a read."""


MAX_BYTES = 8 * 1024
"""About how many bytes a list's entries may take (:func:`entry_bytes`); past it the floor
rises further. Keys of a few bytes never reach it with :data:`KEEP` keys, but key parts can be
near 1 KB, and 256 of them would make each write of the list some 260 WCU."""


def entry_bytes(key: str, value: Decimal) -> int:
    """About what one entry adds to the list item: the key's UTF-8 bytes, the number's (a byte
    per two digits, plus one) and a few bytes of map overhead (Developer Guide, "Item sizes")."""
    return len(key.encode("utf-8")) + len(str(value)) // 2 + 3


@dataclass(frozen=True)
class TopList:
    """One partition's list.

    Attributes
    ----------
    entries
        ``{key: value}``: every non-zero aggregate above ``floor`` (and perhaps some others).
        Values are ``Decimal``; no value is zero.
    floor
        What every unlisted aggregate is at or below; ``None`` when every non-zero aggregate
        is listed.
    """

    entries: Mapping[str, Decimal] = field(default_factory=lambda: MappingProxyType({}))
    floor: Decimal | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", MappingProxyType(dict(self.entries)))


def placement(
    rule: str, sort_key: str, partitions: int, bucket: str | None = None
) -> tuple[str, str]:
    """Where an aggregate is ranked: ``(index partition, key)``, the partition as
    :func:`~aggregator.core.layout.leaderboard_partition` names it and the key part of the sort
    key as stored (between ``"<rule>#"`` and, for a time bucket, ``"#<bucket>"``; ``bucket`` is
    ``"<granularity>#<bucket start>"``).

    Examples
    --------
    >>> placement("score", "score#ann", 1)
    ('score', 'ann')
    >>> placement("spend", "spend#c1#hour#2026-01-01T00:00:00Z", 1, "hour#2026-01-01T00:00:00Z")
    ('spend#hour#2026-01-01T00:00:00Z', 'c1')
    """
    end = len(sort_key) - (0 if bucket is None else len(bucket) + 1)
    partition = leaderboard_partition(rule, sort_key, partitions, bucket)
    return partition, sort_key[len(rule) + 1 : end]


def latest(observations: Iterable[tuple[str, Decimal | None]]) -> dict[str, Decimal | None]:
    """The last observation of each key, in the order given (a batch's records, in stream
    order): ``{key: value}``, ``None`` for an aggregate whose item is gone."""
    last: dict[str, Decimal | None] = {}
    for key, value in observations:
        last[key] = value
    return last


def merge(
    state: TopList,
    observations: Mapping[str, Decimal | None],
    keep: int = KEEP,
    max_bytes: int = MAX_BYTES,
) -> TopList:
    """``state`` after ``observations`` (``{key: new value}``, ``None`` or zero when the
    aggregate is gone), each the key's newest value in stream order. Returns ``state`` itself
    when nothing changes (the caller then writes nothing). At most ``keep`` keys stay, and
    fewer when their entries would pass ``max_bytes`` (:func:`entry_bytes`): the floor rises to
    the first value that does not fit.

    Raises
    ------
    ValueError
        For ``keep < 1``.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    entries = dict(state.entries)
    for key, value in observations.items():
        if value is None or value == 0:
            entries.pop(key, None)
        elif key in entries or state.floor is None or value > state.floor:
            entries[key] = value
        # else: unlisted and at or below the floor, which only rises; it stays out
    floor = state.floor
    bound: Decimal | None = None
    if len(entries) > keep:
        bound = sorted(entries.values(), reverse=True)[keep]  # the keep + 1-th largest
    if sum(entry_bytes(k, v) for k, v in entries.items()) > max_bytes:
        used = 0
        for key, value in sorted(entries.items(), key=lambda e: -e[1]):
            used += entry_bytes(key, value)
            if used > max_bytes:  # the first that does not fit, and all at or below it, leave
                bound = value if bound is None else max(bound, value)
                break
    if bound is not None:
        entries = {k: v for k, v in entries.items() if v > bound}
        floor = bound if floor is None else max(floor, bound)
    if floor == state.floor and entries == dict(state.entries):
        return state
    return TopList(entries, floor)


def exact_top(
    lists: Iterable[TopList], n: int, order: Callable[[str], str] = str
) -> list[tuple[Decimal, str]] | None:
    """The ``n`` largest listed aggregates over ``lists`` (the partitions of one leaderboard),
    largest first, ties by ``order(key)`` (the key as users see it), as ``(value, key)``; or
    ``None`` when the lists do not prove it: a list with a floor that the ``n``-th value does
    not exceed (an unlisted aggregate could be among the top ``n``).

    Raises
    ------
    ValueError
        For ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    lists = list(lists)
    merged = sorted(
        ((v, k) for one in lists for k, v in one.entries.items()),
        key=lambda e: (-e[0], order(e[1])),
    )
    top = merged[:n]
    for one in lists:
        if one.floor is not None and (len(top) < n or top[-1][0] <= one.floor):
            return None
    return top
