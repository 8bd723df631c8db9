"""Item sizes by DynamoDB's rules, and the write capacity they cost.

DynamoDB sizes an item by its attribute names plus values (Developer Guide, "Item sizes and
formats") and charges a standard write 1 WCU per started kilobyte of the larger of the item's
sizes before and after it (Developer Guide, "Read/write capacity mode"). Values come in two
forms here: deserialized (``Decimal``, ``str``, ...; :func:`attribute_size`, :func:`item_size`)
and DynamoDB JSON (``{"N": "12"}``; :func:`typed_attribute_size`, :func:`typed_item_size`), such
as an ``ALL_OLD`` image. :func:`aggregate_item` is what an aggregate update writes, the size the
cost model (:mod:`aggregator.dynamodb.costs`) charges it for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from aggregator.core.engine import CoalescedDelta
from aggregator.core.layout import TableLayout
from aggregator.core.numbers import add
from aggregator.core.records import deserialize_value
from aggregator.dynamodb.updates import aggregate_attributes, aggregate_counters, item_key

__all__ = [
    "MAX_ITEM_BYTES",
    "aggregate_item",
    "attribute_size",
    "item_size",
    "typed_attribute_size",
    "typed_item_size",
    "update_sizes",
    "write_units",
]

MAX_ITEM_BYTES = 400 * 1024
"""DynamoDB's item size limit (Developer Guide, "Service quotas": 400 KB)."""


def _number_size(value: Decimal) -> int:
    digits = value.normalize().as_tuple().digits if value != 0 else (0,)
    return math.ceil(len(digits) / 2) + 1


def attribute_size(value: Any) -> int:
    """Bytes a deserialized attribute value takes, per DynamoDB's item-size rules.

    Strings and binary: their UTF-8 / byte length; numbers: 1 byte per two significant digits
    plus 1; booleans and null: 1; lists and maps: 3 bytes plus 1 per element plus their contents.

    Raises
    ------
    TypeError
        For a value of a type DynamoDB does not store.
    """
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, Decimal | int):
        return _number_size(Decimal(value))
    if isinstance(value, Mapping):
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return 3 + sum(attribute_size(v) + 1 for v in value)
    raise TypeError(f"unsupported attribute value type {type(value).__name__}")


def item_size(item: Mapping[str, Any]) -> int:
    """Size in bytes of an item of deserialized values: attribute names plus values."""
    return sum(len(name.encode("utf-8")) + attribute_size(v) for name, v in item.items())


def typed_attribute_size(value: Mapping[str, Any]) -> int:
    """:func:`attribute_size` of a value in DynamoDB JSON (``{"N": "12"}``, ``{"B": b"..."}``).

    Raises
    ------
    TypeError
        For an unknown type descriptor.
    """
    (kind, inner), *_ = value.items()
    if kind == "S":
        return len(str(inner).encode("utf-8"))
    if kind == "N":
        return _number_size(Decimal(inner))
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + typed_attribute_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(typed_attribute_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        element = {"SS": "S", "NS": "N", "BS": "B"}[kind]
        return sum(typed_attribute_size({element: v}) for v in inner)
    raise TypeError(f"unsupported attribute value type {kind!r}")


def typed_item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """:func:`item_size` of an item in DynamoDB JSON (an ``ALL_OLD`` image, say)."""
    return sum(len(name.encode("utf-8")) + typed_attribute_size(v) for name, v in item.items())


def write_units(size_bytes: int) -> int:
    """Standard write capacity units for writing an item of ``size_bytes`` (1 per started KB)."""
    return max(1, math.ceil(size_bytes / 1024))


def aggregate_item(
    layout: TableLayout, delta: CoalescedDelta, amount: Decimal, extra: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The attributes an update of ``delta``'s item writes (deserialized), its key included:
    those of :func:`~aggregator.dynamodb.updates.aggregate_update`
    (:func:`~aggregator.dynamodb.updates.aggregate_counters` with ``amount`` and
    :func:`~aggregator.dynamodb.updates.aggregate_attributes`; a partial carries no collection
    attribute) and ``extra`` (a checkpoint, say)."""
    item: dict[str, Any] = {
        **{name: value["S"] for name, value in item_key(layout, delta).items()},
        **aggregate_counters(layout, delta, amount),
        **{
            name: deserialize_value(value)
            for name, value in aggregate_attributes(layout, delta).items()
        },
    }
    if delta.slot is not None:
        item.pop(layout.collection_attribute, None)
    if extra:
        item.update(extra)
    return item


def update_sizes(
    value_attribute: str,
    amount: Decimal,
    written: dict[str, Any],
    old: Mapping[str, Mapping[str, Any]] | None,
    removed: tuple[str, ...],
    applied: bool,
) -> tuple[int, int]:
    """``(before, after)`` bytes of an item that an update writes ``written`` to (deserialized,
    its value attribute the delta's ``amount``; :func:`aggregate_item`), removing ``removed``,
    when it was ``old`` (DynamoDB JSON; ``None`` or empty: a new item). ``applied=False``: the
    item is unchanged. ``written``'s value attribute becomes the item's new value."""
    if not old:
        return 0, item_size(written)
    before = typed_item_size(old)
    sizes = {
        name: len(name.encode("utf-8")) + typed_attribute_size(value)
        for name, value in old.items()
        if name not in removed
    }
    if applied:
        previous = old.get(value_attribute, {}).get("N")
        written[value_attribute] = amount if previous is None else add(Decimal(previous), amount)
        sizes.update(
            (name, len(name.encode("utf-8")) + attribute_size(value))
            for name, value in written.items()
        )
    return before, sum(sizes.values())
