"""Keys of aggregates: the placeholder values of a key as given, its rendered sort key text, and
the did-you-mean suggestions of :meth:`~aggregator.dynamodb.query.AggregateStore.suggest_keys`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeAlias

from aggregator.core.exceptions import QueryError
from aggregator.core.rules import Rule, unescape_key_part
from aggregator.dynamodb.query.results import KeySuggestions

if TYPE_CHECKING:
    from aggregator.dynamodb.query.reader import StoreReader

__all__ = [
    "SUGGESTIONS_SHOWN",
    "SUGGESTION_PROBES",
    "SUGGESTION_SAMPLE",
    "KeyArgument",
    "key_values",
    "rendered_key",
    "sort_key",
    "suggest_keys",
]

KeyArgument: TypeAlias = str | Sequence[Any] | Mapping[str, Any]
"""A key as the store's reads take it
(:meth:`~aggregator.dynamodb.query.AggregateStore.sort_key`)."""

SUGGESTION_SAMPLE = 100
"""Most items :meth:`AggregateStore.suggest_keys` reads of a rule's aggregates to find keys like
the one asked: one ``Query`` page (``Limit``)."""

SUGGESTION_PROBES = 3
"""Most keys :meth:`AggregateStore.suggest_keys` tries by prefix (``PLAYER#`` + the value asked),
one small read each."""

SUGGESTIONS_SHOWN = 3
"""Most keys :meth:`AggregateStore.suggest_keys` returns."""


def resembles(candidate: str, asked: str) -> bool:
    """Whether ``candidate`` may be the key meant by ``asked``: the same text but for case, or
    one of them is the other with a prefix ending in a separator (``PLAYER#p13`` and ``p13``;
    any character but a letter or a digit separates)."""
    c, a = candidate.casefold(), asked.casefold()
    if candidate == asked:
        return False
    if c == a:
        return True
    longer, shorter = (c, a) if len(c) > len(a) else (a, c)
    return (
        len(longer) > len(shorter) > 0
        and longer.endswith(shorter)
        and not longer[-len(shorter) - 1].isalnum()
    )


def prefixes(values: Sequence[str]) -> list[str]:
    """The prefixes of ``values`` up to and including their last separator (``PLAYER#`` of
    ``PLAYER#p1``; any character but a letter or a digit), most frequent first."""
    counts: dict[str, int] = {}
    for value in values:
        cut = max((i for i, ch in enumerate(value) if not ch.isalnum()), default=-1)
        if cut >= 0:
            counts[value[: cut + 1]] = counts.get(value[: cut + 1], 0) + 1
    return sorted(counts, key=lambda prefix: -counts[prefix])


def key_values(rule: Rule, key: KeyArgument) -> list[Any]:
    """The placeholder values of ``key`` (as for
    :meth:`~aggregator.dynamodb.query.AggregateStore.sort_key`), in template order.

    Raises
    ------
    QueryError
        When the values do not fit the rule's key template.
    """
    template = rule.key
    if isinstance(key, str) and len(template.placeholders) > 1:
        try:
            values: list[Any] = template.split_display(key)
        except ValueError as exc:
            raise QueryError(f"rule {rule.name!r}: {exc}") from None
    elif isinstance(key, str):
        values = [key]
    elif isinstance(key, Mapping):
        missing = [p for p in template.placeholders if p not in key]
        if missing:
            raise QueryError(f"rule {rule.name!r}: key needs values for {missing}")
        values = [key[p] for p in template.placeholders]
    else:
        values = list(key)
    if template.is_literal and values in ([], [template.template]):
        values = []
    if template.is_literal and values:
        raise QueryError(
            f"rule {rule.name!r} has one aggregate, under the fixed key {template.template!r}: "
            f"give no key (or {template.template!r}), not {', '.join(map(str, values))!r}"
        )
    if len(values) != len(template.placeholders):
        raise QueryError(
            f"rule {rule.name!r}: key template {template.template!r} takes "
            f"{len(template.placeholders)} value(s) {list(template.placeholders)}, got {values}"
        )
    return [v if isinstance(v, str | bool | Decimal) else Decimal(str(v)) for v in values]


def rendered_key(rule: Rule, key: KeyArgument) -> tuple[str, str]:
    """``(encoded, display)`` key text of ``key`` (as :func:`key_values` reads it)."""
    return rule.key.render_values(key_values(rule, key))


def sort_key(
    reader: StoreReader, rule: str, key: KeyArgument, *, storage_name: str | None = None
) -> str:
    """The sort key of one aggregate
    (:meth:`~aggregator.dynamodb.query.AggregateStore.sort_key`)."""
    encoded, _ = rendered_key(reader.rule(rule), key)
    return f"{storage_name or reader.storage_name(rule)}#{encoded}"


def suggest_keys(reader: StoreReader, rule: str, key: KeyArgument) -> KeySuggestions:
    """Keys of ``rule`` that exist and look like ``key``, which ``get`` did not find
    (:meth:`~aggregator.dynamodb.query.AggregateStore.suggest_keys`: what it reads and costs)."""
    definition = reader.rule(rule)
    template = definition.key
    if definition.target is not None or template.is_literal:
        return KeySuggestions([])
    windowed = definition.window is not None
    single = len(template.placeholders) == 1
    values = key_values(definition, key)
    asked = str(values[0]) if single else rendered_key(definition, key)[1]
    stored = reader.storage_name(rule)
    before = reader.counts.requests
    per_value = definition.kind.per_value
    displayed: list[str] = []
    # the parts after the key: a bucket's granularity and start, a kind's value
    after_key = (2 if windowed else 0) + (1 if per_value else 0)
    for sk in key_page(reader, reader.partitions(rule), f"{stored}#", SUGGESTION_SAMPLE):
        head = sk.rsplit("#", after_key)[0] if after_key else sk
        text = unescape_key_part(head[len(stored) + 1 :])
        if text not in displayed:
            displayed.append(text)
    arguments: list[str] = []
    for text in displayed:
        try:
            arguments.append(template.split_display(text)[0] if single else text)
        except ValueError:  # a value holding a separator: shown as listed
            continue
    found = [a for a in arguments if resembles(a, asked)]
    if not found and single and not windowed:
        for prefix in prefixes(arguments)[:SUGGESTION_PROBES]:
            candidate = f"{prefix}{asked}"
            sk = sort_key(reader, rule, candidate, storage_name=stored)
            if exists(reader, sk, per_value):
                found.append(candidate)
    return KeySuggestions(
        found[:SUGGESTIONS_SHOWN], reader.counts.requests - before, len(displayed)
    )


def key_page(reader: StoreReader, partitions: Sequence[str], prefix: str, limit: int) -> list[str]:
    """The sort key texts of the first ``limit`` aggregate items under ``partitions`` (one
    key's home, or a rule's partitions) whose sort key begins with ``prefix``, in sort key
    order: one eventually consistent ``Query`` page projecting the keys per partition (of the
    collection index on a table without a sort key), the first ``limit`` of their union."""
    lay = reader.layout
    found: list[str] = []
    for partition in partitions:
        if lay.sort_key is not None:
            request: dict[str, Any] = {
                "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
                "ExpressionAttributeNames": {"#pk": lay.partition_key, "#sk": lay.sort_key},
                "ExpressionAttributeValues": {
                    ":pk": {"S": partition},
                    ":prefix": {"S": prefix},
                },
                "ProjectionExpression": "#sk",
            }
        else:
            request = {
                "IndexName": lay.collection_index,
                "KeyConditionExpression": "#c = :pk AND begins_with(#pk, :prefix)",
                "ExpressionAttributeNames": {
                    "#c": lay.collection_attribute,
                    "#pk": lay.partition_key,
                },
                "ExpressionAttributeValues": {
                    ":pk": {"S": partition},
                    ":prefix": {"S": f"{partition}#{prefix}"},
                },
            }
        response = reader.call("query", Limit=limit, ReturnConsumedCapacity="TOTAL", **request)
        keys = (lay.sort_key_of(item) for item in response.get("Items", []))
        found += [k for k in keys if k is not None]
    return sorted(found)[:limit]


def exists(reader: StoreReader, sort_key: str, per_value: bool) -> bool:
    """Whether the aggregate ``sort_key`` has an item (a value item for a kind with one per
    value): one eventually consistent read."""
    if per_value:
        return bool(key_page(reader, (reader.home(sort_key),), f"{sort_key}#", 1))
    response = reader.call(
        "get_item",
        Key=reader.aggregate_key(sort_key),
        ProjectionExpression="#pk",
        ExpressionAttributeNames={"#pk": reader.layout.partition_key},
        ReturnConsumedCapacity="TOTAL",
    )
    return "Item" in response
