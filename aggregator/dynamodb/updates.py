"""Every update expression the framework sends, built in one place.

An :class:`Update` collects actions (``ADD``, ``SET``, ``REMOVE``) and a condition, assigns the
expression placeholders itself (``#n0``, ``:v0``, ...) and renders the ``UpdateItem`` arguments,
the same way for every caller: the writers (:mod:`aggregator.dynamodb.writer`,
:mod:`aggregator.dynamodb.checkpoint`) and dead-letter replay. Attribute names always go through
``ExpressionAttributeNames`` (``value`` is a DynamoDB reserved word; Developer Guide, "Reserved
words in DynamoDB").

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
    "Update",
    "added_amounts",
    "aggregate_update",
    "index_partition",
    "prune_update",
    "resolved",
]

AttributeValue = dict[str, Any]
"""A value in DynamoDB JSON, e.g. ``{"N": "1"}``."""
IndexAction = Literal["set", "keep", "remove"]
"""What an aggregate update does to the leaderboard attribute (:func:`aggregate_update`)."""


@dataclass(frozen=True)
class Update:
    """An immutable set of update actions plus an optional condition.

    Every method returns a new :class:`Update`; :meth:`render` assigns placeholders in the order
    the actions were added, so equal updates render identically.
    """

    adds: tuple[tuple[str, Decimal], ...] = ()
    sets: tuple[tuple[str, AttributeValue], ...] = ()
    removes: tuple[str, ...] = ()
    # ("missing_or_below" | "equals" | "missing" | "exists" | "below" | "at_least", attribute,
    # value)
    conditions: tuple[tuple[str, str, AttributeValue], ...] = ()

    def add(self, attribute: str, amount: Decimal) -> Update:
        """``ADD attribute :amount`` (starts from 0 when the attribute or item is missing)."""
        return replace(self, adds=(*self.adds, (attribute, amount)))

    def set(self, attribute: str, value: AttributeValue) -> Update:
        """``SET attribute = :value``."""
        return replace(self, sets=(*self.sets, (attribute, value)))

    def remove(self, attribute: str) -> Update:
        """``REMOVE attribute``."""
        return replace(self, removes=(*self.removes, attribute))

    def where_missing_or_below(self, attribute: str, bound: AttributeValue) -> Update:
        """Condition ``attribute_not_exists(attribute) OR attribute < :bound`` (ANDed with the
        others)."""
        return replace(self, conditions=(*self.conditions, ("missing_or_below", attribute, bound)))

    def where_equals(self, attribute: str, value: AttributeValue) -> Update:
        """Condition ``attribute = :value`` (ANDed with the others)."""
        return replace(self, conditions=(*self.conditions, ("equals", attribute, value)))

    def where_missing(self, attribute: str) -> Update:
        """Condition ``attribute_not_exists(attribute)`` (ANDed with the others)."""
        return replace(self, conditions=(*self.conditions, ("missing", attribute, {})))

    def where_exists(self, attribute: str) -> Update:
        """Condition ``attribute_exists(attribute)`` (ANDed with the others)."""
        return replace(self, conditions=(*self.conditions, ("exists", attribute, {})))

    def where_below(self, attribute: str, bound: AttributeValue) -> Update:
        """Condition ``attribute < :bound`` (false when the attribute is missing; ANDed with the
        others)."""
        return replace(self, conditions=(*self.conditions, ("below", attribute, bound)))

    def where_at_least(self, attribute: str, bound: AttributeValue) -> Update:
        """Condition ``attribute >= :bound`` (false when the attribute is missing; ANDed with the
        others)."""
        return replace(self, conditions=(*self.conditions, ("at_least", attribute, bound)))

    def render(self) -> dict[str, Any]:
        """``UpdateExpression``, ``ExpressionAttributeNames``, ``ExpressionAttributeValues`` and,
        when there is a condition, ``ConditionExpression`` (``UpdateItem`` keyword arguments, or
        the body of a ``TransactWriteItems`` ``Update``)."""
        names: dict[str, str] = {}
        values: dict[str, AttributeValue] = {}

        def name(attribute: str) -> str:
            for placeholder, known in names.items():
                if known == attribute:
                    return placeholder
            placeholder = f"#n{len(names)}"
            names[placeholder] = attribute
            return placeholder

        def value(v: AttributeValue) -> str:
            placeholder = f":v{len(values)}"
            values[placeholder] = v
            return placeholder

        clauses = []
        if self.adds:
            clauses.append(
                "ADD "
                + ", ".join(f"{name(a)} {value({'N': str(amount)})}" for a, amount in self.adds)
            )
        if self.sets:
            clauses.append("SET " + ", ".join(f"{name(a)} = {value(v)}" for a, v in self.sets))
        if self.removes:
            clauses.append("REMOVE " + ", ".join(name(a) for a in self.removes))
        conditions = []
        for kind, attribute, bound in self.conditions:
            placeholder = name(attribute)
            if kind == "missing":
                conditions.append(f"attribute_not_exists({placeholder})")
            elif kind == "exists":
                conditions.append(f"attribute_exists({placeholder})")
            elif kind == "missing_or_below":
                conditions.append(
                    f"attribute_not_exists({placeholder}) OR {placeholder} < {value(bound)}"
                )
            elif kind == "below":
                conditions.append(f"{placeholder} < {value(bound)}")
            elif kind == "at_least":
                conditions.append(f"{placeholder} >= {value(bound)}")
            else:
                conditions.append(f"{placeholder} = {value(bound)}")
        rendered: dict[str, Any] = {
            "UpdateExpression": " ".join(clauses),
            "ExpressionAttributeNames": names,
        }
        if values:
            rendered["ExpressionAttributeValues"] = values
        if conditions:
            joined = (
                conditions[0]
                if len(conditions) == 1
                else " AND ".join(f"({c})" if " OR " in c else c for c in conditions)
            )
            rendered["ConditionExpression"] = joined
        return rendered


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
    """
    names = request.get("ExpressionAttributeNames") or {}
    values = request.get("ExpressionAttributeValues") or {}
    out: dict[str, Any] = {"ADD": {}, "SET": {}, "REMOVE": []}
    for clause in re.split(r" (?=(?:ADD|SET|REMOVE) )", str(request.get("UpdateExpression", ""))):
        verb, _, body = clause.partition(" ")
        for action in body.split(", ") if body else []:
            if verb == "REMOVE":
                out["REMOVE"].append(names[action])
            elif verb == "ADD":
                placeholder, value = action.split()
                out["ADD"][names[placeholder]] = values[value]
            else:
                placeholder, value = action.split(" = ")
                out["SET"][names[placeholder]] = values[value]
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
    (:meth:`aggregator.dynamodb.writer.BaseWriter._expire_if_empty`).

    ``index`` is what happens to the leaderboard attribute of a leaderboard rule's item:
    ``"set"`` (the default, and always without a floor), ``"keep"`` (left alone) or
    ``"remove"``. With a floor (:mod:`aggregator.dynamodb.floors`) whether the item belongs in
    the index depends on its new value, known only once the update returns: the writers guess
    from the value they saw last and check afterwards."""
    update = Update().add(layout.value_attribute, amount)
    if delta.keeps_count:
        update = update.add(COUNT_ATTRIBUTE, delta.count if count is None else count)
    update = update.set("rule", {"S": delta.ref.rule}).set("key", {"S": delta.ref.display_key})
    if delta.ref.target is not None:  # a target rule's partial: where its roll-up goes
        update = update.set("target", {"L": [{"S": v} for v in delta.ref.target]})
    if not layout.has_sort_key:
        update = update.set(layout.collection_attribute, {"S": layout.aggregates_pk})
    if delta.leaderboard and index == "set":
        update = update.set(layout.leaderboard_attribute, {"S": index_partition(delta)})
    elif delta.leaderboard and index == "remove":
        update = update.remove(layout.leaderboard_attribute)
    bucket = delta.ref.bucket
    if bucket is not None:
        update = update.set("granularity", {"S": bucket.granularity}).set(
            "bucket", {"S": bucket.text}
        )
        if bucket.expires is not None:
            update = update.set(layout.ttl_attribute, {"N": str(bucket.expires)})
    elif delta.per_value:
        update = update.remove(layout.ttl_attribute)
    return update


def prune_update(stale: Mapping[str, AttributeValue]) -> Update:
    """``REMOVE`` of stale checkpoint attributes, each on condition that it still holds the value
    read (``{attribute: value}``, values in DynamoDB JSON), so a checkpoint written meanwhile is
    never lost."""
    update = Update()
    for attribute, value in stale.items():
        update = update.remove(attribute).where_equals(attribute, dict(value))
    return update
