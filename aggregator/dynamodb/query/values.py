"""Kinds with one item per value (``min``, ``max``, ``distribution``): a key's value items read
and summed up into its fields, and the percentiles of
:meth:`~aggregator.dynamodb.query.AggregateStore.percentiles`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from decimal import Context, Decimal
from typing import TYPE_CHECKING, Any

from aggregator.core.exceptions import QueryError
from aggregator.core.kinds import Kind, ValueCount
from aggregator.core.layout import TableLayout
from aggregator.core.rules import unescape_key_part
from aggregator.core.sketch import percentile_list
from aggregator.core.sortable import number_from_sortable
from aggregator.dynamodb.query.keys import KeyArgument, sort_key
from aggregator.dynamodb.query.results import Aggregate, Percentiles, WindowResult

if TYPE_CHECKING:
    from aggregator.dynamodb.query.ranges import AskedRange
    from aggregator.dynamodb.query.reader import StoreReader

__all__ = [
    "list_values",
    "percentiles",
    "percentiles_asked",
    "plain",
    "summary",
    "value_count",
    "value_items",
]


def plain(number: Decimal) -> Decimal:
    """``number`` without a positive exponent (``120``, not ``1.2E+2``, which is how a
    normalized number read back from a sort key prints), exactly."""
    _, _, exponent = number.as_tuple()
    if isinstance(exponent, int) and exponent > 0:
        return number.quantize(Decimal(1), context=Context(prec=160))
    return number


def value_count(layout: TableLayout, item: Mapping[str, Any], kind: Kind) -> tuple[str, ValueCount]:
    """``(the aggregate's sort key, the value item)`` of one value item."""
    sk = layout.sort_key_of(item) or ""
    prefix, _, suffix = sk.rpartition("#")
    try:
        number = plain(kind.number_of(number_from_sortable(suffix)))
    except ValueError:
        raise QueryError(f"{sk!r} is not a value item of a {kind.name} rule") from None
    count = Decimal(item.get(layout.value_attribute, {}).get("N", "0"))
    return prefix, ValueCount(number, count)


def value_items(
    reader: StoreReader, sort_key: str, kind: Kind, *, every: bool = False
) -> tuple[list[ValueCount], int, int]:
    """The value items of one aggregate with a count other than zero, in the kind's reading
    order (with ``first_only`` and not ``every``, the first such one only): ``(values,
    items read, RCU)``.
    ``first_only`` reads pages of 25 items, so the value items whose count fell to zero and
    that TTL has not deleted yet cost a request per 25."""
    reading = kind.reading
    first_only = reading.first_only and not every
    out: list[ValueCount] = []
    items_read = units = 0
    for page in reader.pages(
        (reader.home(sort_key),),  # the key's value items share its home
        begins_with=f"{sort_key}#",
        descending=reading.order == "descending",
        page_items=25 if first_only else None,
    ):
        items_read += len(page)
        units += reader.page_units(page)
        for item in page:
            _, value = value_count(reader.layout, item, kind)
            if value.count == 0:
                continue
            out.append(value)
            if first_only:
                return out, items_read, units
    return out, items_read, units


def summary(
    reader: StoreReader,
    rule: str,
    sort_key: str,
    stored: str,
    kind: Kind,
    values: Sequence[ValueCount],
) -> Aggregate:
    """The :class:`Aggregate` of one key of a kind with one item per value, from its value
    items with a count other than zero (``values``, in the kind's reading order)."""
    fields = kind.fields(None, None, values)
    main = fields.get(kind.headline)
    head, granularity, bucket = sort_key, None, None
    if reader.rule(rule).window is not None:  # "<key>#<granularity>#<bucket start>"
        head, granularity, bucket = sort_key.rsplit("#", 2)
    return Aggregate(
        rule,
        unescape_key_part(head[len(stored) + 1 :]),
        Decimal(0) if main is None else main,
        sort_key,
        granularity,
        bucket,
        fields=fields,
    )


def list_values(reader: StoreReader, rule: str, stored: str, kind: Kind) -> Iterator[Aggregate]:
    """One :class:`Aggregate` per key of a kind with one item per value: a key's value items
    are contiguous in sort-key order (they share its prefix and its home), read in ascending
    order across the rule's partitions."""
    current: str | None = None
    values: list[ValueCount] = []
    descending = kind.reading.order == "descending"

    def finished() -> Aggregate | None:
        if current is None or not values:
            return None
        ordered = list(reversed(values)) if descending else values
        return summary(reader, rule, current, stored, kind, ordered)

    for page in reader.pages(reader.partitions(rule), begins_with=f"{stored}#"):
        for item in page:
            prefix, value = value_count(reader.layout, item, kind)
            if prefix != current:
                done = finished()
                if done is not None:
                    yield done
                current, values = prefix, []
            if value.count != 0:
                values.append(value)
    done = finished()
    if done is not None:
        yield done


def percentiles_asked(
    reader: StoreReader,
    rule: str,
    ps: Sequence[Decimal | int | float | str],
    asked: AskedRange,
) -> tuple[list[Decimal], bool]:
    """``(the percentiles asked, whether they rank a time range)`` of a percentiles read
    (the arguments of :meth:`~aggregator.dynamodb.query.AggregateStore.percentiles`).

    Raises
    ------
    QueryError
        For a rule of a kind without value items, a percentile outside 0..100, a range given
        for a rule without a window, or none for a rule with one.
    """
    definition = reader.rule(rule)
    kind = definition.kind
    if not kind.per_value:
        raise QueryError(
            f"rule {rule!r} is of kind {kind.name!r}: percentiles need a rule of kind "
            "distribution (or min/max, exact)"
        )
    try:
        wanted = percentile_list(ps)
    except ValueError as exc:
        raise QueryError(f"rule {rule!r}: {exc}") from None
    if definition.window is None and asked.given:
        raise QueryError(f"rule {rule!r} has no window: a time range needs time buckets")
    if definition.window is not None and asked.start is None and asked.last is None:
        raise QueryError(
            f"rule {rule!r} counts per time bucket: give a range (last, or start and end)"
        )
    return wanted, definition.window is not None


def percentiles(
    reader: StoreReader,
    rule: str,
    key: KeyArgument,
    wanted: list[Decimal],
    window: WindowResult | None,
) -> Percentiles:
    """The percentiles ``wanted`` of one key: of the values ``window`` merged, or without one
    of the key's value items (one ``Query``, 1 MB pages)."""
    kind = reader.rule(rule).kind
    if window is not None:
        found, total = kind.percentiles(window.values, wanted)
        return Percentiles(
            rule,
            window.key,
            dict(zip(wanted, found, strict=True)),
            total,
            kind.percentile_accuracy,
            window.requests,
            window.items_read,
            window.read_units,
            window.start,
            window.end,
            window.asked_start,
            window.asked_end,
        )
    stored = reader.storage_name(rule)
    sk = sort_key(reader, rule, key, storage_name=stored)
    before = reader.counts.requests
    found_values, items_read, units = value_items(reader, sk, kind, every=True)
    found, total = kind.percentiles(found_values, wanted)
    return Percentiles(
        rule,
        unescape_key_part(sk[len(stored) + 1 :]),
        dict(zip(wanted, found, strict=True)),
        total,
        kind.percentile_accuracy,
        reader.counts.requests - before,
        items_read,
        units,
    )
