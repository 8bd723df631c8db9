"""Reads over time and over values: the sum of a windowed rule's buckets over a range
(``window``) and a histogram of a rule's aggregates or of one key's values (``histogram``).

A windowed rule keeps one item per key, granularity and bucket, with sort keys
``"<rule>#<key>#<granularity>#<bucket start>"`` that sort in time order; a range is read as runs
of buckets of one granularity (:func:`aggregator.core.windows.plan_range`), one ``Query`` with
``sk BETWEEN`` each.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from aggregator.core.exceptions import QueryError
from aggregator.core.kinds import COUNT_ATTRIBUTE, Kind, ValueCount
from aggregator.core.numbers import add
from aggregator.core.rules import Window, unescape_key_part
from aggregator.core.windows import RangePart, plan_range
from aggregator.dynamodb.query.aggregates import list_aggregates
from aggregator.dynamodb.query.keys import KeyArgument, sort_key
from aggregator.dynamodb.query.ranges import AskedRange
from aggregator.dynamodb.query.results import HistogramBucket, WindowResult
from aggregator.dynamodb.query.values import value_count, value_items

if TYPE_CHECKING:
    from aggregator.dynamodb.query.reader import StoreReader

__all__ = ["VALUE_ITEMS_END", "histogram", "window"]

VALUE_ITEMS_END = "$"
"""Appended to a time bucket's sort key, the upper bound of a ``Query`` that reads the bucket's
value items too (``<bucket>#<value>``): ``$`` (0x24) sorts right after ``#`` (0x23), and DynamoDB
compares string sort keys by their UTF-8 bytes (Developer Guide, "Working with queries": key
condition expressions)."""


def histogram(
    reader: StoreReader, rule: str, key: KeyArgument | None = None
) -> list[HistogramBucket]:
    """Every aggregate of ``rule`` as rows, or one key's values
    (:meth:`~aggregator.dynamodb.query.AggregateStore.histogram`)."""
    definition = reader.rule(rule)
    if definition.kind.per_value and definition.window is not None:
        raise QueryError(
            f"rule {rule!r} keeps its values per time bucket: read a range with "
            "percentiles (query percentile --last) or window"
        )
    if definition.kind.per_value:
        if key is None:
            raise QueryError(
                f"rule {rule!r} is of kind {definition.kind.name!r}: give one key (its "
                "bins are per key)"
            )
        values, _, _ = value_items(reader, sort_key(reader, rule, key), definition.kind, every=True)
        return sorted((HistogramBucket(v.number, v.count) for v in values), key=lambda r: r.value)
    if key is not None:
        raise QueryError(
            f"rule {rule!r}: a histogram of a {definition.kind.name} rule takes no key"
        )
    rows: list[HistogramBucket] = []
    for a in list_aggregates(reader, rule):
        if a.value == 0:
            continue
        try:
            value: Decimal | str = Decimal(a.key)
        except ArithmeticError:
            value = a.key
        if isinstance(value, Decimal) and (not value.is_finite() or "_" in a.key):
            value = a.key  # "NaN", "Infinity", "1_000": text, not numbers
        rows.append(HistogramBucket(value, a.value))
    if all(isinstance(r.value, Decimal) for r in rows):
        return sorted(rows, key=lambda r: r.value)
    return sorted(rows, key=lambda r: str(r.value))


def window(reader: StoreReader, rule: str, key: KeyArgument, asked: AskedRange) -> WindowResult:
    """The sum of a windowed rule's buckets for one key over the time range ``asked``
    (:meth:`~aggregator.dynamodb.query.AggregateStore.window`)."""
    spec = reader.rule(rule).window
    if spec is None:
        raise QueryError(f"rule {rule!r} has no window; window queries need time buckets")
    clock = asked.clock()
    (lo, hi), (asked_start, asked_end) = asked.covering(spec.finest, clock)
    stored = reader.storage_name(rule)
    prefix = sort_key(reader, rule, key, storage_name=stored)
    template = reader.rule(rule).key
    display = (
        template.template if template.is_literal else unescape_key_part(prefix[len(stored) + 1 :])
    )
    result = WindowResult(rule, display, lo, hi, asked_start=asked_start, asked_end=asked_end)
    result.parts = plan_range(spec.granularities, lo, hi)
    kind = reader.rule(rule).kind
    total = count = Decimal(0)
    merged: dict[Decimal, Decimal] = {}
    for part in result.parts:
        for item in window_part(reader, result, spec, part, prefix, kind, clock):
            if kind.per_value:
                _, value = value_count(reader.layout, item, kind)
                merged[value.number] = add(merged.get(value.number, Decimal(0)), value.count)
                continue
            total = add(total, Decimal(item.get(reader.layout.value_attribute, {}).get("N", 0)))
            count = add(count, Decimal(item.get(COUNT_ATTRIBUTE, {}).get("N", 0)))
    result.values = [ValueCount(n, c) for n, c in sorted(merged.items()) if c != 0]
    in_order = result.values[::-1] if kind.reading.order == "descending" else result.values
    result.fields = kind.fields(total, count, in_order)
    main = result.fields.get(kind.headline) if kind.per_value else total
    result.value = Decimal(0) if main is None else main
    return result


def window_part(
    reader: StoreReader,
    result: WindowResult,
    spec: Window,
    part: RangePart,
    prefix: str,
    kind: Kind,
    clock: float,
) -> list[dict[str, Any]]:
    """The live items of one part of a window's range (one ``Query`` range of one
    granularity's buckets), its reads counted in ``result``; ``result.complete`` is cleared
    when its oldest bucket has expired."""
    first_bucket = spec.bucket(part.granularity, part.first_bucket)
    last_bucket = spec.bucket(part.granularity, part.last_bucket)
    # coarser buckets outlive the finer ones inside them: the first is the oldest
    if first_bucket.expired(clock):
        result.complete = False
    high = f"{prefix}#{last_bucket.suffix()}"
    if kind.per_value:  # the last bucket's value items, "<bucket>#<value>", too
        high += VALUE_ITEMS_END
    items, requests, units = reader.range(f"{prefix}#{first_bucket.suffix()}", high)
    result.requests += requests
    result.read_units += units
    result.items_read += len(items)
    ttl = reader.layout.ttl_attribute
    live = []
    for item in items:
        expires = item.get(ttl, {}).get("N")
        if expires is not None and int(Decimal(expires)) <= clock:
            continue  # past its retention: DynamoDB may delete it at any moment
        live.append(item)
    return live
