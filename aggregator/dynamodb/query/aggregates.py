"""Aggregates as stored: one read back (``get``), a target rule's sum on the application's item,
and every aggregate of a rule (``list``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from aggregator.core.exceptions import EvaluationError, QueryError
from aggregator.core.kinds import COUNT_ATTRIBUTE
from aggregator.core.rules import unescape_key_part
from aggregator.dynamodb.query.keys import KeyArgument, key_values, sort_key
from aggregator.dynamodb.query.results import Aggregate
from aggregator.dynamodb.query.values import list_values, summary, value_items

if TYPE_CHECKING:
    from aggregator.dynamodb.query.reader import StoreReader

__all__ = ["aggregate", "get", "list_aggregates", "target"]


def _s(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else value.get("S")


def aggregate(reader: StoreReader, item: Mapping[str, Any], rule: str, stored: str) -> Aggregate:
    """An :class:`Aggregate` of one aggregate item (DynamoDB JSON) of ``rule`` stored as
    ``stored``."""
    sk = reader.layout.sort_key_of(item) or ""
    key = _s(item.get("key"))
    if key is None:
        key = unescape_key_part(sk[len(stored) + 1 :])
    value = Decimal(item.get(reader.layout.value_attribute, {}).get("N", "0"))
    count = item.get(COUNT_ATTRIBUTE, {}).get("N")
    ttl = item.get(reader.layout.ttl_attribute, {}).get("N")
    kind = reader.rule(rule).kind
    fields = (
        kind.fields(value, None if count is None else Decimal(count), ())
        if kind.reading.scope == "item"
        else {}
    )
    return Aggregate(
        rule,
        key,
        value,
        sk,
        _s(item.get("granularity")),
        _s(item.get("bucket")),
        None if ttl is None else int(Decimal(ttl)),
        fields,
    )


def get(reader: StoreReader, rule: str, key: KeyArgument = ()) -> Aggregate | None:
    """One aggregate, or ``None`` (:meth:`~aggregator.dynamodb.query.AggregateStore.get`)."""
    if reader.rule(rule).window is not None:
        raise QueryError(
            f"rule {rule!r} keeps time buckets: read them with window() "
            "(aggregator query window) or list()"
        )
    if reader.rule(rule).target is not None:
        return target(reader, rule, key)
    stored = reader.storage_name(rule)
    sk = sort_key(reader, rule, key, storage_name=stored)
    kind = reader.rule(rule).kind
    if kind.reading.scope == "values":
        values, _, _ = value_items(reader, sk, kind)
        return summary(reader, rule, sk, stored, kind, values) if values else None
    response = reader.call(
        "get_item",
        Key=reader.aggregate_key(sk),  # under the key's home: one request, spread or not
        ConsistentRead=True,
    )
    item = response.get("Item")
    return None if item is None else aggregate(reader, item, rule, stored)


def target(reader: StoreReader, rule: str, key: KeyArgument) -> Aggregate | None:
    """A target rule's sum, where it is kept: the target attribute of the application item
    (one strongly consistent ``GetItem`` projecting the attribute); ``None`` when the item
    does not exist, a value of 0 when it has no such attribute yet. ``key`` may also be the
    key as :meth:`~aggregator.dynamodb.query.AggregateStore.list` shows it (``POST#b#META``
    for ``{PK}#META``): when no item has the text as its value, it is read as that (a second
    ``GetItem``).

    Raises
    ------
    QueryError
        When the attribute holds something other than a number (the handler then keeps the
        rule's deltas for the item in its ledger), or as ``get``.
    """
    found = target_item(reader, rule, key)
    template = reader.rule(rule).key
    if found is None and isinstance(key, str) and len(template.placeholders) == 1:
        try:
            (value,) = template.split_display(key)
        except ValueError:
            return None
        if value != key:
            return target_item(reader, rule, value)
    return found


def target_item(reader: StoreReader, rule: str, key: KeyArgument) -> Aggregate | None:
    definition = reader.rule(rule)
    target = definition.target
    assert target is not None
    values = key_values(definition, key)
    encoded, display = definition.key.render_values(values)
    try:
        item_key = target.render(dict(zip(definition.key.placeholders, values, strict=True)))
    except EvaluationError as exc:
        raise QueryError(f"rule {rule!r}: {exc}") from None
    response = reader.call(
        "get_item",
        Key=reader.layout.target_key(item_key),
        ConsistentRead=True,
        ProjectionExpression="#pk, #a, #m",
        ExpressionAttributeNames={
            "#pk": reader.layout.partition_key,
            "#a": target.attribute,
            "#m": reader.layout.target_checkpoints_attribute,
        },
    )
    item = response.get("Item")
    if item is None:
        return None
    checkpoints = item.get(reader.layout.target_checkpoints_attribute)
    if checkpoints is not None and "M" not in checkpoints:
        raise QueryError(
            f"rule {rule!r}: {reader.layout.target_checkpoints_attribute} of the target item "
            f"{display} is not a map ({next(iter(checkpoints))}); the handler keeps its deltas "
            "in the rule's ledger until it is: remove that attribute, then run aggregator "
            "reconcile --repair"
        )
    held = item.get(target.attribute, {"N": "0"})
    if "N" not in held:
        raise QueryError(
            f"rule {rule!r}: {target.attribute} of the target item {display} is not a number "
            f"({next(iter(held))}); the handler keeps its deltas in the rule's ledger until "
            "it is: fix the item, then run aggregator reconcile --repair"
        )
    value = Decimal(held["N"])
    return Aggregate(rule, display, value, f"{rule}#{encoded}", fields={"value": value})


def list_aggregates(reader: StoreReader, rule: str) -> Iterator[Aggregate]:
    """Every aggregate of ``rule`` in sort-key order
    (:meth:`~aggregator.dynamodb.query.AggregateStore.list`)."""
    kind = reader.rule(rule).kind
    stored = reader.storage_name(rule)
    if kind.reading.scope == "values":
        yield from list_values(reader, rule, stored, kind)
        return
    for page in reader.pages(reader.partitions(rule), begins_with=f"{stored}#"):
        for item in page:
            yield aggregate(reader, item, rule, stored)
