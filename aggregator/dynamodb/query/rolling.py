"""``top`` over a range of buckets ("top players in the last 60 minutes"): the keys of a windowed
leaderboard rule ranked by their sum over the range.

Two paths, both exact:

1. **The buckets' top lists** (``leaderboard_store: list``): one eventually consistent
   ``BatchGetItem`` of every bucket's lists (100 lists a request: a 60-minute range of a
   minute rule is one request), merged with the threshold algorithm
   (:mod:`aggregator.core.rolling_top`); when the lists leave a few keys' sums undecided (a key
   listed in some buckets and under a floor in others), one strongly consistent
   ``BatchGetItem`` of those keys' aggregates in those buckets (at most
   :data:`MAX_READ_BACK`; more, and path 2 answers), then decide again. Cost: about
   ``buckets x partitions / 100`` requests and 0.5 RCU per started 4 KB of each list (a full
   list of 256 short keys is about 2.4 KB), plus 1 RCU per aggregate read back.
2. **Every aggregate of the rule**, read and summed per key over the range's buckets (the
   lists cannot prove the answer, or the rule ranks in the leaderboard index, whose partitions
   are ranked by one bucket's value, not by a sum). Cost: one ``Query`` page per 1 MB of the
   rule's aggregates, every bucket and granularity it keeps (its retention bounds them).

Buckets past the rule's retention at ``now`` are left out of both (their items and lists may be
gone already) and the result says so (``complete``), as :meth:`window` does.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import TYPE_CHECKING

from aggregator.core.exceptions import QueryError
from aggregator.core.numbers import add
from aggregator.core.rolling_top import decide
from aggregator.core.rules import unescape_key_part
from aggregator.core.windows import bucket_text
from aggregator.dynamodb.batch import WhenUnprocessed, batch_get
from aggregator.dynamodb.query.aggregates import list_aggregates
from aggregator.dynamodb.query.ranges import AskedRange, bucket_range
from aggregator.dynamodb.query.results import Aggregate, RollingTop
from aggregator.dynamodb.query.top import (
    definition_changed,
    index_complete,
    index_partitions,
    read_top_lists,
)

if TYPE_CHECKING:
    from aggregator.dynamodb.query.reader import StoreReader

__all__ = ["MAX_READ_BACK", "MAX_ROLLING_BUCKETS", "rolling_top"]

MAX_ROLLING_BUCKETS = 1_000
"""Most buckets one rolling top ranks over (a day of minutes is 1,440: rank hours instead)."""
MAX_READ_BACK = 500
"""Most (key, bucket) aggregates the lists' path reads back (5 ``BatchGetItem`` requests);
past it, every aggregate of the rule is read instead."""


def rolling_top(
    reader: StoreReader, rule: str, n: int, granularity: str | None, asked: AskedRange
) -> RollingTop:
    """The top ``n`` keys of a windowed leaderboard rule by their sum over a range
    (:meth:`~aggregator.dynamodb.query.AggregateStore.rolling_top`)."""
    if n < 1:
        raise QueryError(f"n must be at least 1, got {n}")
    definition = reader.rule(rule)
    spec = definition.window
    if spec is not None and not definition.kind.ranks:
        raise QueryError(f"rule {rule!r} is of kind {definition.kind.name!r}: top ranks sums")
    planned = bucket_range(
        rule,
        spec,
        granularity,
        asked,
        most=MAX_ROLLING_BUCKETS,
        what="a rolling top",
        why="ask for coarser buckets (a granularity the rule keeps) or a shorter range",
    )
    assert spec is not None  # bucket_range refuses a rule without a window
    size, lo, hi, clock = planned.granularity, planned.lo, planned.hi, planned.clock
    label = size.label
    asked_start, asked_end = planned.asked
    starts = list(planned.starts)
    live = [t for t in starts if not spec.bucket(size, t).expired(clock)]
    result = RollingTop(
        rule,
        label,
        lo,
        hi,
        complete=len(live) == len(starts),
        asked_start=asked_start,
        asked_end=asked_end,
    )
    requests, units = reader.counts.requests, reader.counts.read_units
    texts = [bucket_text(t) for t in live]
    top = None
    if (
        definition.top_listed
        and index_complete(reader, rule)
        and not definition_changed(reader, rule)
    ):
        top = _from_lists(reader, rule, label, texts, n, result)
        if top is None:
            reader.top_fallbacks += 1
    if top is None:
        result.path = "aggregates"
        top = _from_aggregates(reader, rule, label, set(texts), n, result)
    result.aggregates = top
    result.requests = reader.counts.requests - requests
    result.read_units = reader.counts.read_units - units
    return result


def _aggregate(reader: StoreReader, rule: str, label: str, key: str, value: Decimal) -> Aggregate:
    stored = reader.storage_name(rule)
    return Aggregate(rule, unescape_key_part(key), value, f"{stored}#{key}", label, None)


def _from_lists(
    reader: StoreReader, rule: str, label: str, texts: list[str], n: int, result: RollingTop
) -> list[Aggregate] | None:
    """The top from the buckets' lists (module docstring, path 1), or ``None``."""
    lay = reader.layout
    stored = reader.storage_name(rule)
    partitions = reader.rule(rule).leaderboard_partitions
    # each bucket's index partitions (leaderboard_partition), its lists read with the others
    names = [index_partitions(f"{stored}#{label}#{text}", partitions) for text in texts]
    read = read_top_lists(reader, [name for bucket in names for name in bucket])
    if read is None:
        return None
    found, items = read
    result.items_read += items
    buckets = [[found[name] for name in bucket] for bucket in names]
    decision = decide(buckets, n, order=unescape_key_part)
    if len(decision.fetch) > MAX_READ_BACK:
        return None  # reading every aggregate is then about as cheap, and one read decides
    if decision.top is None and decision.fetch:
        wanted = sorted(decision.fetch)
        sort_keys = {(i, key): f"{stored}#{key}#{label}#{texts[i]}" for i, key in wanted}
        fetched_read = batch_get(
            reader.send,
            reader.table_name,
            [reader.aggregate_key(sk) for sk in sort_keys.values()],
            consistent=True,
            when_unprocessed=WhenUnprocessed.RETURN,
            return_consumed_capacity=True,
        )
        if fetched_read.unprocessed:
            return None
        result.items_read += len(fetched_read.items)
        by_sort_key = {lay.sort_key_of(item): item for item in fetched_read.items}
        fetched: dict[tuple[int, str], Decimal] = {}
        for (i, key), sk in sort_keys.items():
            got = by_sort_key.get(sk)
            value = got.get(lay.value_attribute, {}).get("N", "0") if got is not None else "0"
            fetched[i, key] = Decimal(value)
        decision = decide(buckets, n, fetched=fetched, order=unescape_key_part)
    if decision.top is None:
        return None
    return [_aggregate(reader, rule, label, key, value) for value, key in decision.top]


def _from_aggregates(
    reader: StoreReader, rule: str, label: str, texts: set[str], n: int, result: RollingTop
) -> list[Aggregate]:
    """The top from every aggregate of the rule, summed per key over the buckets ``texts``
    (module docstring, path 2)."""
    sums: dict[str, Decimal] = defaultdict(Decimal)
    sort_keys: dict[str, str] = {}
    for aggregate in list_aggregates(reader, rule):
        result.items_read += 1
        if aggregate.granularity == label and aggregate.bucket in texts:
            sums[aggregate.key] = add(sums[aggregate.key], aggregate.value)
            suffix = f"#{label}#{aggregate.bucket}"
            sort_keys[aggregate.key] = aggregate.sort_key[: -len(suffix)]
    ranked = sorted(((v, k) for k, v in sums.items() if v != 0), key=lambda e: (-e[0], e[1]))
    return [Aggregate(rule, key, value, sort_keys[key], label, None) for value, key in ranked[:n]]
