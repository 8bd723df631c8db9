"""One key of a windowed rule as a series: every bucket of one granularity over a range.

The buckets of one key and granularity are adjacent in sort key order
(``"<rule>#<key>#<granularity>#<bucket start>"``, :mod:`aggregator.dynamodb.query.series`), so a
series is one ``Query`` with ``sk BETWEEN`` its first and last bucket (more requests only past
1 MB a page). Buckets never written have no item: they cost nothing and read as 0.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from aggregator.core.kinds import COUNT_ATTRIBUTE, Kind, ValueCount
from aggregator.core.numbers import add
from aggregator.core.rules import unescape_key_part
from aggregator.core.windows import RangePart, bucket_text
from aggregator.dynamodb.query.keys import KeyArgument, sort_key
from aggregator.dynamodb.query.ranges import AskedRange, bucket_range
from aggregator.dynamodb.query.results import SeriesBucket, SeriesResult, WindowResult
from aggregator.dynamodb.query.series import window_part
from aggregator.dynamodb.query.values import value_count

if TYPE_CHECKING:
    from aggregator.dynamodb.query.reader import StoreReader

__all__ = ["MAX_SERIES_BUCKETS", "series"]

MAX_SERIES_BUCKETS = 10_000
"""Most buckets one series reads (a week of minutes is 10,080: ask for hours instead)."""


def series(
    reader: StoreReader,
    rule: str,
    key: KeyArgument,
    granularity: str | None,
    asked: AskedRange,
) -> SeriesResult:
    """The buckets of one key of a windowed rule over a range
    (:meth:`~aggregator.dynamodb.query.AggregateStore.series`)."""
    definition = reader.rule(rule)
    spec = definition.window
    planned = bucket_range(
        rule,
        spec,
        granularity,
        asked,
        most=MAX_SERIES_BUCKETS,
        what="a series",
        why="ask for a shorter range or coarser buckets",
    )
    assert spec is not None  # bucket_range refuses a rule without a window
    size, lo, hi, clock = planned.granularity, planned.lo, planned.hi, planned.clock
    label = size.label
    asked_start, asked_end = planned.asked
    stored = reader.storage_name(rule)
    prefix = sort_key(reader, rule, key, storage_name=stored)
    display = (
        definition.key.template
        if definition.key.is_literal
        else unescape_key_part(prefix[len(stored) + 1 :])
    )
    # window_part counts its reads and expiry into a WindowResult: the series' own
    reads = WindowResult(rule, display, lo, hi)
    starts = {bucket_text(t): t for t in planned.starts}
    sums: dict[int, tuple[Decimal, Decimal]] = {}
    values: dict[int, dict[Decimal, Decimal]] = {}
    kind = definition.kind
    head = f"{prefix}#{label}#"
    layout = reader.layout
    for item in window_part(reader, reads, spec, RangePart(size, lo, hi), prefix, kind, clock):
        text = (layout.sort_key_of(item) or "")[len(head) :]
        start = starts.get(text[: len(bucket_text(lo))])
        if start is None:
            continue  # not a bucket of this range (cannot happen for a BETWEEN of its own)
        if kind.per_value:
            _, value = value_count(layout, item, kind)
            merged = values.setdefault(start, {})
            merged[value.number] = add(merged.get(value.number, Decimal(0)), value.count)
            continue
        total = Decimal(item.get(layout.value_attribute, {}).get("N", 0))
        n = Decimal(item.get(COUNT_ATTRIBUTE, {}).get("N", 0))
        old_total, old_n = sums.get(start, (Decimal(0), Decimal(0)))
        sums[start] = (add(old_total, total), add(old_n, n))
    result = SeriesResult(
        rule,
        display,
        label,
        lo,
        hi,
        requests=reads.requests,
        items_read=reads.items_read,
        read_units=reads.read_units,
        complete=reads.complete,
        asked_start=asked_start,
        asked_end=asked_end,
    )
    all_total = all_count = Decimal(0)
    all_values: dict[Decimal, Decimal] = {}
    for start in starts.values():
        bucket = SeriesBucket(start)
        if start in sums or start in values:
            total, n = sums.get(start, (Decimal(0), Decimal(0)))
            merged = values.get(start, {})
            bucket.fields, bucket.value = _fields(kind, total, n, merged)
            bucket.written = True
            all_total, all_count = add(all_total, total), add(all_count, n)
            for number, c in merged.items():
                all_values[number] = add(all_values.get(number, Decimal(0)), c)
        result.buckets.append(bucket)
    result.fields, result.total = _fields(kind, all_total, all_count, all_values)
    if set(result.fields) - {"value"}:
        result.headline = kind.headline
    return result


def _fields(
    kind: Kind, total: Decimal, count: Decimal, merged: dict[Decimal, Decimal]
) -> tuple[dict[str, Decimal | None], Decimal]:
    """The kind's fields and main value of merged sums, counts and value items, as
    :func:`~aggregator.dynamodb.query.series.window` computes them over a range."""
    ordered = [ValueCount(n, c) for n, c in sorted(merged.items()) if c != 0]
    in_order = ordered[::-1] if kind.reading.order == "descending" else ordered
    fields = kind.fields(total, count, in_order)
    main = fields.get(kind.headline) if kind.per_value else total
    return fields, Decimal(0) if main is None else main
