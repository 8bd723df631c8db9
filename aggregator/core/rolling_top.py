"""Rolling top-N: the keys of a windowed leaderboard rule ranked by their sum over a range of
buckets ("top players in the last 60 minutes"), merged from the buckets' top lists (pure).

Each bucket of the range has its top lists (:mod:`aggregator.core.top_list_merge`), one per index
partition. A list's invariant gives, for every key, what its value in that bucket can be:

- listed: exactly the listed value;
- unlisted, no list of the bucket has a floor: 0 (every non-zero aggregate is listed);
- unlisted under a floor ``F``: unknown, at most ``max(F, 0)`` (at or below the floor, or zero,
  which is never listed).

So a key's sum over the range lies between a lower bound (``-infinity`` as soon as one bucket is
unknown) and an upper bound (listed values plus each unknown bucket's ``max(F, 0)``), and a key
listed nowhere has at most ``U``, the sum of every bucket's bound. This is Fagin's threshold
algorithm with the lists as its sorted access: :func:`decide` returns the top ``n`` when the
known sums prove it, or the (key, bucket) values whose *random access* (one read of the bucket's
aggregate) would settle it, or neither (the answer needs keys no list names: read every
aggregate of the range).

The top ``n`` are the non-zero sums in the order of a plain sort of ``(-sum, key)`` (ties by the
key as users see it, :func:`decide`'s ``order``), as the rule's other reads rank. It is proven
when, with ``T`` the ``n``-th known sum (its key ``K``):

- every other listed key either has a known sum (it is then sorted with the rest), or an upper
  bound below ``T``, or equal to ``T`` with a key after ``K`` (even at ``T`` it sorts after);
- a key listed nowhere has at most ``U``: when some bucket has a floor, ``U < T`` (an unknown key
  might sort before ``K`` at ``T``); without floors such a key's buckets are all 0 and it is never
  ranked.

With fewer than ``n`` non-zero known sums, the answer is all of them only when no bucket has a
floor and every listed key's sum is known.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from aggregator.core.numbers import add
from aggregator.core.top_list_merge import TopList

__all__ = ["Decision", "decide"]


@dataclass(frozen=True)
class Decision:
    """What the lists (and the values read so far) prove.

    Attributes
    ----------
    top
        ``[(sum, key)]``, largest first, when proven; else ``None``.
    fetch
        ``{(bucket index, key)}`` whose values would settle the answer (read them, then decide
        again); empty when ``top`` is proven or when only reading every aggregate can settle it.
    """

    top: list[tuple[Decimal, str]] | None
    fetch: frozenset[tuple[int, str]] = frozenset()


def decide(
    buckets: Sequence[Sequence[TopList]],
    n: int,
    *,
    fetched: Mapping[tuple[int, str], Decimal] | None = None,
    order: Callable[[str], str] = str,
) -> Decision:
    """The top ``n`` keys by their sum over ``buckets`` (each the lists of one bucket's index
    partitions), or what to read to prove it (module docstring).

    Parameters
    ----------
    buckets
        Per bucket of the range, its partitions' lists (an empty sequence: the bucket has no
        list, so none of its aggregates is non-zero).
    n
        How many keys (at least 1).
    fetched
        Values read since: ``(bucket index, key) -> value`` (0 for an aggregate that does not
        exist).
    order
        The key as users see it, for ties (``unescape_key_part``).

    Raises
    ------
    ValueError
        For ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    fetched = fetched or {}
    listed: list[dict[str, Decimal]] = []
    bound: list[Decimal | None] = []  # None: an unlisted key is 0 in that bucket
    for lists in buckets:
        values: dict[str, Decimal] = {}
        floors = [one.floor for one in lists if one.floor is not None]
        for one in lists:
            values.update(one.entries)
        listed.append(values)
        bound.append(None if not floors else max(max(floors), Decimal(0)))
    floored = any(b is not None for b in bound)
    unseen = sum((b for b in bound if b is not None), Decimal(0))
    known: dict[str, Decimal] = {}
    upper: dict[str, Decimal] = {}
    missing: dict[str, list[int]] = {}
    for key in {k for values in listed for k in values}:
        total = high = Decimal(0)
        for i, values in enumerate(listed):
            if key in values:
                value: Decimal | None = values[key]
            elif (i, key) in fetched:
                value = fetched[i, key]
            elif bound[i] is None:
                value = Decimal(0)
            else:
                value = None
            if value is None:
                missing.setdefault(key, []).append(i)
                high = add(high, bound[i] or Decimal(0))
            else:
                total, high = add(total, value), add(high, value)
        if key in missing:
            upper[key] = high
        else:
            known[key] = total
    ranked = sorted(
        ((v, k) for k, v in known.items() if v != 0), key=lambda e: (-e[0], order(e[1]))
    )
    if len(ranked) < n:
        if not floored and not missing:
            return Decision(ranked)
        if missing:
            return Decision(None, _fetch(missing, missing))
        return Decision(None)
    top = ranked[:n]
    threshold, last_key = top[-1]
    if floored and unseen >= threshold:
        return Decision(None)  # a key no list names could be among the top n
    contenders = {
        key: buckets_of
        for key, buckets_of in missing.items()
        if upper[key] > threshold or (upper[key] == threshold and order(key) < order(last_key))
    }
    if contenders:
        return Decision(None, _fetch(contenders, missing))
    return Decision(top)


def _fetch(
    keys: Mapping[str, list[int]], missing: Mapping[str, list[int]]
) -> frozenset[tuple[int, str]]:
    return frozenset((i, key) for key in keys for i in missing[key])
