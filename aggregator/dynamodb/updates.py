"""Every update expression the framework sends, built in one place.

An :class:`Update` collects actions (``ADD``, ``SET``, ``REMOVE``) and a condition, assigns the
expression placeholders itself (``#n0``, ``:v0``, ...) and renders the ``UpdateItem`` arguments,
the same way for every caller: the writers' parts (:mod:`aggregator.dynamodb.atleastonce`,
:mod:`aggregator.dynamodb.checkpoint`, :mod:`aggregator.dynamodb.targets`,
:mod:`aggregator.dynamodb.membership`, :mod:`aggregator.dynamodb.expiry`), dead-letter replay,
the manifest and its fences (:mod:`aggregator.dynamodb.manifest`), and the operator jobs
(:mod:`aggregator.operations`). No ``UpdateExpression`` is written anywhere else. Attribute
names always go through ``ExpressionAttributeNames`` (``value`` is a DynamoDB reserved word;
Developer Guide, "Reserved words in DynamoDB").

Examples
--------
>>> u = Update().add("value", Decimal(2)).set("rule", {"S": "r"})
>>> u = u.where_missing_or_below("ck#s", {"S": "0005"})
>>> r = u.render()
>>> r["UpdateExpression"], r["ConditionExpression"]
('ADD #n0 :v0 SET #n1 = :v1', 'attribute_not_exists(#n2) OR #n2 < :v2')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Literal

from aggregator.core.engine import CoalescedDelta
from aggregator.core.kinds import COUNT_ATTRIBUTE
from aggregator.core.layout import TableLayout, leaderboard_partition

__all__ = [
    "IndexAction",
    "Path",
    "Update",
    "add_update",
    "added_amounts",
    "aggregate_attributes",
    "aggregate_counters",
    "aggregate_update",
    "index_partition",
    "item_key",
    "prune_update",
    "resolved",
    "with_collection",
]

AttributeValue = dict[str, Any]
"""A value in DynamoDB JSON, e.g. ``{"N": "1"}``."""
Path = str | tuple[str, ...]
"""An attribute (``"value"``) or a path into nested maps (``("rules", "orders", "status")``,
rendered ``#n0.#n1.#n2``: each name through ``ExpressionAttributeNames``)."""
IndexAction = Literal["set", "keep", "remove"]
"""What an aggregate update does to the leaderboard attribute (:func:`aggregate_update`)."""

_Condition = tuple[str, Path, Any]
"""(kind, path, operand): kinds ``missing_or_below``, ``equals``, ``missing``, ``exists``,
``below``, ``at_least``, ``size_below`` (operand an :data:`AttributeValue`) and ``any``
(operand a tuple of alternatives, each a tuple of conditions ANDed)."""


@dataclass(frozen=True)
class Update:
    """An immutable set of update actions plus an optional condition.

    Every method returns a new :class:`Update`; :meth:`render` assigns placeholders in the order
    the actions were added, so equal updates render identically. Attributes are names or
    :data:`Path` tuples into nested maps.
    """

    adds: tuple[tuple[Path, Decimal], ...] = ()
    # (path, value, only if missing: SET path = if_not_exists(path, :value))
    sets: tuple[tuple[Path, AttributeValue, bool], ...] = ()
    removes: tuple[Path, ...] = ()
    conditions: tuple[_Condition, ...] = ()

    def add(self, attribute: Path, amount: Decimal) -> Update:
        """``ADD attribute :amount`` (starts from 0 when the attribute or item is missing)."""
        return replace(self, adds=(*self.adds, (attribute, amount)))

    def set(self, attribute: Path, value: AttributeValue) -> Update:
        """``SET attribute = :value``."""
        return replace(self, sets=(*self.sets, (attribute, value, False)))

    def set_if_missing(self, attribute: Path, value: AttributeValue) -> Update:
        """``SET attribute = if_not_exists(attribute, :value)``: an existing value stays."""
        return replace(self, sets=(*self.sets, (attribute, value, True)))

    def remove(self, attribute: Path) -> Update:
        """``REMOVE attribute``."""
        return replace(self, removes=(*self.removes, attribute))

    def _where(self, kind: str, attribute: Path, operand: Any) -> Update:
        return replace(self, conditions=(*self.conditions, (kind, attribute, operand)))

    def where_missing_or_below(self, attribute: Path, bound: AttributeValue) -> Update:
        """Condition ``attribute_not_exists(attribute) OR attribute < :bound`` (ANDed with the
        others)."""
        return self._where("missing_or_below", attribute, bound)

    def where_equals(self, attribute: Path, value: AttributeValue) -> Update:
        """Condition ``attribute = :value`` (ANDed with the others)."""
        return self._where("equals", attribute, value)

    def where_missing(self, attribute: Path) -> Update:
        """Condition ``attribute_not_exists(attribute)`` (ANDed with the others)."""
        return self._where("missing", attribute, {})

    def where_exists(self, attribute: Path) -> Update:
        """Condition ``attribute_exists(attribute)`` (ANDed with the others)."""
        return self._where("exists", attribute, {})

    def where_below(self, attribute: Path, bound: AttributeValue) -> Update:
        """Condition ``attribute < :bound`` (false when the attribute is missing; ANDed with the
        others)."""
        return self._where("below", attribute, bound)

    def where_at_least(self, attribute: Path, bound: AttributeValue) -> Update:
        """Condition ``attribute >= :bound`` (false when the attribute is missing; ANDed with the
        others)."""
        return self._where("at_least", attribute, bound)

    def where_size_below(self, attribute: Path, bound: int) -> Update:
        """Condition ``size(attribute) < :bound`` (for a map, its number of entries; ANDed with
        the others)."""
        return self._where("size_below", attribute, {"N": str(bound)})

    def where_any(self, *alternatives: Update) -> Update:
        """Condition: the conditions of one of ``alternatives`` hold (each alternative's ANDed,
        the alternatives ORed; the whole ANDed with the others). Only the alternatives'
        conditions count, not their actions."""
        return self._where("any", "", tuple(a.conditions for a in alternatives))

    def render(self) -> dict[str, Any]:
        """``UpdateExpression``, ``ExpressionAttributeNames``, ``ExpressionAttributeValues`` and,
        when there is a condition, ``ConditionExpression`` (``UpdateItem`` keyword arguments, or
        the body of a ``TransactWriteItems`` ``Update``)."""
        out = _Placeholders()
        clauses = []
        if self.adds:
            adds = (f"{out.name(a)} {out.value({'N': str(n)})}" for a, n in self.adds)
            clauses.append("ADD " + ", ".join(adds))
        if self.sets:
            clauses.append("SET " + ", ".join(out.assignment(*s) for s in self.sets))
        if self.removes:
            clauses.append("REMOVE " + ", ".join(out.name(a) for a in self.removes))
        conditions = tuple(out.condition(*c) for c in self.conditions)
        rendered: dict[str, Any] = {
            "UpdateExpression": " ".join(clauses),
            "ExpressionAttributeNames": out.names,
        }
        if out.values:
            rendered["ExpressionAttributeValues"] = out.values
        if conditions:
            text = _all_of(conditions)
            rendered["ConditionExpression"] = text[1:-1] if len(conditions) > 1 else text
        return rendered


class _Placeholders:
    """The placeholders of one rendering: names reused per attribute name, values one each."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, AttributeValue] = {}

    def name(self, path: Path) -> str:
        if isinstance(path, tuple):
            return ".".join(self.name(part) for part in path)
        for placeholder, known in self.names.items():
            if known == path:
                return placeholder
        placeholder = f"#n{len(self.names)}"
        self.names[placeholder] = path
        return placeholder

    def value(self, value: AttributeValue) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def assignment(self, path: Path, value: AttributeValue, only_if_missing: bool) -> str:
        target = self.name(path)
        if only_if_missing:
            return f"{target} = if_not_exists({target}, {self.value(value)})"
        return f"{target} = {self.value(value)}"

    def condition(self, kind: str, path: Path, operand: Any) -> str:
        if kind == "any":
            return " OR ".join(
                _all_of(tuple(self.condition(*c) for c in alternative)) for alternative in operand
            )
        placeholder = self.name(path)
        if kind == "missing":
            return f"attribute_not_exists({placeholder})"
        if kind == "exists":
            return f"attribute_exists({placeholder})"
        if kind == "missing_or_below":
            return f"attribute_not_exists({placeholder}) OR {placeholder} < {self.value(operand)}"
        if kind == "size_below":
            return f"size({placeholder}) < {self.value(operand)}"
        operator = {"below": "<", "at_least": ">=", "equals": "="}[kind]
        return f"{placeholder} {operator} {self.value(operand)}"


def _all_of(conditions: tuple[str, ...]) -> str:
    """``conditions`` ANDed (in parentheses when more than one, each OR parenthesized)."""
    if len(conditions) == 1:
        return conditions[0]
    return "(" + " AND ".join(f"({c})" if " OR " in c else c for c in conditions) + ")"


def added_amounts(request: Mapping[str, Any]) -> dict[str, Decimal]:
    """``{attribute: amount}`` of the ``ADD`` actions of a rendered request (``UpdateItem``
    arguments), e.g. to count requests that add zero; ``{}`` when it adds nothing."""
    expression = str(request.get("UpdateExpression", ""))
    names = request.get("ExpressionAttributeNames") or {}
    values = request.get("ExpressionAttributeValues") or {}
    if not expression.startswith("ADD "):  # render() puts the ADD clause first
        return {}
    clause = expression[4:].split(" SET ")[0].split(" REMOVE ")[0]
    out: dict[str, Decimal] = {}
    for action in clause.split(", "):
        placeholder, value = action.split()
        out[names.get(placeholder, placeholder)] = Decimal(values[value]["N"])
    return out


def resolved(request: Mapping[str, Any]) -> dict[str, Any]:
    """A rendered request with its placeholders replaced, for tests and logs::

    {"ADD": {"value": {"N": "1"}}, "SET": {"rule": {"S": "r"}}, "REMOVE": [],
     "CONDITION": "attribute_not_exists(ck#s) OR ck#s < {'S': '…'}"}

    Paths read ``rules.orders.status``; ``SET_IF_MISSING`` holds the ``if_not_exists``
    assignments, when there are any.
    """
    names = request.get("ExpressionAttributeNames") or {}
    values = request.get("ExpressionAttributeValues") or {}

    def path(text: str) -> str:
        return ".".join(names[part] for part in text.split("."))

    out: dict[str, Any] = {"ADD": {}, "SET": {}, "REMOVE": []}
    for clause in re.split(r" (?=(?:ADD|SET|REMOVE) )", str(request.get("UpdateExpression", ""))):
        verb, _, body = clause.partition(" ")
        for action in re.split(r", (?![^()]*\))", body) if body else []:
            if verb == "REMOVE":
                out["REMOVE"].append(path(action))
            elif verb == "ADD":
                placeholder, value = action.split()
                out["ADD"][path(placeholder)] = values[value]
            else:
                placeholder, value = action.split(" = ")
                kept = re.fullmatch(r"if_not_exists\(\S+, (:v\d+)\)", value)
                if kept:  # SET path = if_not_exists(path, :v)
                    out.setdefault("SET_IF_MISSING", {})[path(placeholder)] = values[kept[1]]
                else:
                    out["SET"][path(placeholder)] = values[value]
    condition = request.get("ConditionExpression")
    if condition is not None:
        condition = re.sub(r"#n\d+", lambda m: names[m.group()], condition)
        condition = re.sub(r":v\d+", lambda m: repr(values[m.group()]), condition)
    out["CONDITION"] = condition
    return out


def index_partition(delta: CoalescedDelta) -> str:
    """The leaderboard index's partition key value of ``delta``'s item: the rule's (``<rule>#<n>``
    with ``leaderboard_partitions``), or for a time bucket the rule's, granularity's and bucket
    start's (:func:`~aggregator.core.layout.leaderboard_partition`), so ``top`` ranks the keys of
    one bucket."""
    bucket = delta.ref.bucket
    return leaderboard_partition(
        delta.ref.rule,
        delta.ref.sort_key,
        delta.index_partitions,
        None if bucket is None else bucket.suffix(),
    )


def item_key(layout: TableLayout, delta: CoalescedDelta) -> dict[str, Any]:
    """The key of the item an update of ``delta`` writes (DynamoDB JSON): its partial's
    (``delta.slot``, a rule with ``write_shards``) or else its aggregate's, under the rule's
    spread partition (:meth:`~aggregator.core.engine.CoalescedDelta.partition`)."""
    if delta.slot is not None:
        return dict(layout.partial_key(delta.ref.sort_key, delta.slot))
    return dict(layout.aggregate_key(delta.ref.sort_key, delta.partition(layout)))


def aggregate_counters(
    layout: TableLayout, delta: CoalescedDelta, amount: Decimal, count: Decimal | None = None
) -> dict[str, Decimal]:
    """The counters an update of ``delta``'s item ``ADD``s to: ``{value attribute: amount}``
    and, for a kind that keeps a count, ``{"count": count}`` (``count`` defaults to
    ``delta.count``)."""
    counters = {layout.value_attribute: amount}
    if delta.keeps_count:
        counters[COUNT_ATTRIBUTE] = delta.count if count is None else count
    return counters


def aggregate_attributes(layout: TableLayout, delta: CoalescedDelta) -> dict[str, AttributeValue]:
    """The descriptive attributes an update of ``delta``'s item ``SET``s (DynamoDB JSON), in the
    order the update writes them: ``rule``, ``key``; ``target``, the application item's key
    values, on a partial of a target rule (its ledger items carry none); the collection
    attribute on a table without a sort key; the leaderboard attribute for a leaderboard rule's
    item (:func:`index_partition`); ``granularity``, ``bucket`` and the TTL attribute for a time
    bucket. The one list of both the update (:func:`aggregate_update`) and the size the writer
    models for it (:func:`aggregator.dynamodb.sizes.aggregate_item`)."""
    attributes: dict[str, AttributeValue] = {
        "rule": {"S": delta.ref.rule},
        "key": {"S": delta.ref.display_key},
    }
    if delta.ref.target is not None:  # a target rule's partial: where its roll-up goes
        attributes["target"] = {"L": [{"S": v} for v in delta.ref.target]}
    if not layout.has_sort_key:
        attributes[layout.collection_attribute] = {"S": layout.aggregates_pk}
    if delta.leaderboard:
        attributes[layout.leaderboard_attribute] = {"S": index_partition(delta)}
    bucket = delta.ref.bucket
    if bucket is not None:
        attributes["granularity"] = {"S": bucket.granularity}
        attributes["bucket"] = {"S": bucket.text}
        if bucket.expires is not None:
            attributes[layout.ttl_attribute] = {"N": str(bucket.expires)}
    return attributes


def aggregate_update(
    layout: TableLayout,
    delta: CoalescedDelta,
    amount: Decimal,
    count: Decimal | None = None,
    *,
    index: IndexAction = "set",
) -> Update:
    """The update of one aggregate item: ``ADD value :amount`` (and ``ADD count :count`` for a
    kind that keeps a count; ``count`` defaults to ``delta.count``) and ``SET`` of its
    descriptive attributes (``rule``, ``key``; ``target``, the application item's key values, on a
    partial of a target rule (its ledger items carry none); the leaderboard attribute for
    leaderboard rules; ``granularity``, ``bucket`` and the TTL attribute for time buckets; the
    collection attribute on a table without a sort key). Every attribute but the counters is the
    same on every update of the item, so repeating an update never changes them. A value item of
    a kind with one item per value (``delta.per_value``, not in a time bucket) also loses the
    TTL its count falling to zero gave it
    (:class:`aggregator.dynamodb.expiry.EmptyValueExpiry`). The attributes are
    :func:`aggregate_counters` and :func:`aggregate_attributes`.

    ``index`` is what happens to the leaderboard attribute of a leaderboard rule's item:
    ``"set"`` (the default, and always without a floor), ``"keep"`` (left alone) or
    ``"remove"``. With a floor (:mod:`aggregator.dynamodb.floors`) whether the item belongs in
    the index depends on its new value, known only once the update returns: the writers guess
    from the value they saw last and check afterwards."""
    update = Update()
    for attribute, added in aggregate_counters(layout, delta, amount, count).items():
        update = update.add(attribute, added)
    for attribute, value in aggregate_attributes(layout, delta).items():
        if attribute != layout.leaderboard_attribute or index == "set":
            update = update.set(attribute, value)
    if delta.leaderboard and index == "remove":
        update = update.remove(layout.leaderboard_attribute)
    if delta.ref.bucket is None and delta.per_value:
        update = update.remove(layout.ttl_attribute)
    return update


def add_update(
    table_name: str,
    layout: TableLayout,
    delta: CoalescedDelta,
    amount: Decimal,
    count: Decimal | None = None,
    *,
    index: IndexAction = "set",
) -> dict[str, Any]:
    """``UpdateItem`` arguments (or a ``TransactWriteItems`` ``Update`` action) that ``ADD``
    ``amount`` (and ``count``, for a kind that keeps one) to ``delta``'s aggregate item and set
    its descriptive attributes (:func:`aggregate_update`; ``index`` as there)."""
    return {
        "TableName": table_name,
        "Key": layout.aggregate_key(delta.ref.sort_key, delta.partition(layout)),
        **aggregate_update(layout, delta, amount, count, index=index).render(),
    }


def with_collection(update: Update, layout: TableLayout, partition: str) -> Update:
    """``update`` and, on a table without a sort key, ``SET`` of the collection attribute that
    every framework item under the reserved ``partition`` carries there (its attribute besides
    the key in :meth:`~aggregator.core.layout.TableLayout.item_fields`)."""
    if layout.has_sort_key:
        return update
    return update.set(layout.collection_attribute, {"S": partition})


def prune_update(stale: Mapping[str, AttributeValue], within: str | None = None) -> Update:
    """``REMOVE`` of stale checkpoints (attributes, or with ``within`` entries of that map
    attribute), each on condition that it still holds the value read (``{name: value}``,
    values in DynamoDB JSON), so a checkpoint written meanwhile is never lost."""
    update = Update()
    for name, value in stale.items():
        path: Path = name if within is None else (within, name)
        update = update.remove(path).where_equals(path, dict(value))
    return update
