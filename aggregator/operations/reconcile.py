"""Reconcile: recompute rules from a strongly consistent scan, compare with the stored
aggregates, report the drift and optionally repair it, safely while the table is written.

Protocol
--------
A check reads the rules' stored aggregates (value and checkpoints: the item's *version*), scans
the table (``ConsistentRead``) to compute the expected values, and reads the aggregates again.
A key whose expected value differs from its stored one (a missing aggregate and a zero one are
equal) is a *candidate*. Candidates are checked a second time after ``settle_seconds``: a key is
*drift* only if its expected value is the same in both checks and its stored item (value and
checkpoints) did not change from the first read to the last; any other candidate is *moving*
(the application or the handler changed it meanwhile) and reported as such, never repaired.

``repair`` adds each drift's difference with one ``UpdateItem`` whose condition is the version
read last (value and every checkpoint attribute as read, or a missing item): if the item moved
since, the condition fails and the key is reported as moving instead of being "repaired" with a
stale difference. A repair applied once cannot apply again, since it changes the value its
condition requires.

Assumptions (stated, not checked): the handler applies a change within ``settle_seconds`` of its
write (an unprocessed change looks like drift in both checks); the default, 90 s, covers the
template's 60 s tumbling window, during which the ``window`` mode holds deltas back; with a
write-sharded rule among those checked it waits twice as long (a change reaches the aggregate
through its partial, in two passes through the stream). Rules pending a backfill cannot be
checked (they lack the items from before their fences by design): with any among the rules to
check, reconcile refuses, naming them, rather than report the others alone as clean. Rules with
``ttl_deletes: keep`` keep counting items that TTL deleted; the scan cannot see those, so such
rules are compared as if nothing had expired (pass ``rule_names`` to leave them out on a table
with TTL deletes). Time buckets past their retention are left out on both sides.
Derived rules are not reconciled (their input is their source's aggregates).

Target rules (:mod:`aggregator.dynamodb.targets`) are read where they are kept: their stored
side is the target attribute of the application items, found by a scan (projecting the keys, the
target attributes and the checkpoint map, which with the attribute is the item's version); a
repair adds to the attribute on condition that the item exists and both are as read. The same
scan sees which target items exist. A key whose items point at a target that exists in neither
read of a check (likes outliving their post, or liking one never created) is an expected state,
not drift: the item is never created and its deltas go to the rule's ledger, so there is nothing
to repair. Such keys are not candidates (reconcile does not wait on them) and are reported apart,
in ``missing_targets`` with status ``no target``. Each check then scans the table three times
(the stored reads before and after, and the expected values).

**Top lists** (``leaderboard_store: list``) of the checked rules are then checked against the
aggregates they rank, and with ``repair`` written again from them
(:mod:`aggregator.operations.top_list_check`; ``list_drifts`` of the report).

Costs: two scans per check that finds candidates (one otherwise; 1 RCU per 4 KB, strongly
consistent) and four reads of the rules' aggregates (of every partition key value a rule's
aggregates spread over: at least one ``Query`` each); one ``UpdateItem`` per repaired key.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aggregator.core.clock import Clock
from aggregator.core.engine import (
    NO_AMOUNTS,
    AggregateRef,
    Amounts,
    CoalescedDelta,
    Engine,
    add_amounts,
)
from aggregator.core.exceptions import ConfigError
from aggregator.core.kinds import COUNT_ATTRIBUTE
from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import RuleState, changed_definitions, resolved_rules
from aggregator.core.numbers import subtract
from aggregator.core.records import Image
from aggregator.core.rules import Rule, RuleSet
from aggregator.dynamodb.checkpoint import is_checkpoint_attribute
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.collections import query_collections
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.updates import Update, aggregate_update
from aggregator.operations.top_list_check import ListDrift, check_top_lists

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["NO_TARGET", "Drift", "ReconcileReport", "reconcile"]


Version = tuple[tuple[str, str, Any], ...] | None
"""An aggregate item's value and checkpoints as read (``None``: no item)."""

_Stored = dict[str, tuple[Amounts, Version, dict[str, Any]]]
"""``{sort key: ((value, count), version, item)}``: stored aggregates as :meth:`_Checker.stored`
reads them."""

NO_TARGET = "no target"
"""The status of a key whose target item does not exist
(:attr:`ReconcileReport.missing_targets`)."""


@dataclass(frozen=True, slots=True)
class Drift:
    """One aggregate that differs from its rule over the table's items.

    ``status`` is ``drift`` (stable in both checks), ``moving`` (changed during the check, or
    its repair's condition failed), or ``repaired``; :data:`NO_TARGET` (``no target``) for a
    target rule's key whose item does not exist (``stored`` is then 0).
    """

    rule: str
    key: str
    expected: Decimal
    stored: Decimal
    status: str
    expected_count: Decimal | None = None
    """For a kind that keeps a count of items (``mean``): the expected count (else ``None``)."""
    stored_count: Decimal | None = None

    @property
    def difference(self) -> Decimal:
        return subtract(self.expected, self.stored)


@dataclass(slots=True)
class ReconcileReport:
    """What :func:`reconcile` found: the differing keys and the figures of the checks."""

    drifts: list[Drift] = field(default_factory=list)
    keys_checked: int = 0
    items_scanned: int = 0
    checks: int = 0
    lists_checked: int = 0
    """Top lists checked against their aggregates (``leaderboard_store: list`` rules)."""
    list_drifts: list[ListDrift] = field(default_factory=list)
    """Top lists that disagree with their aggregates
    (:mod:`aggregator.operations.top_list_check`)."""
    missing_targets: list[Drift] = field(default_factory=list)
    """Keys of target rules whose items point at a target item that does not exist (status
    :data:`NO_TARGET`; expected: the rule never creates the item, its deltas go to the rule's
    ledger). Not drift, never repaired, never waited on; ``drifts`` does not hold them."""

    @property
    def clean(self) -> bool:
        """No drift left unrepaired and nothing moving, in the aggregates and in the top lists
        (:attr:`missing_targets` are not drift)."""
        return all(d.status == "repaired" for d in self.drifts) and all(
            d.status == "repaired" for d in self.list_drifts
        )


def _version(item: dict[str, Any], value_attribute: str) -> tuple[tuple[str, str, Any], ...]:
    """``(attribute, type, value)`` of the item's value, count and checkpoints, sorted."""
    return tuple(
        sorted(
            (name, *next(iter(v.items())))
            for name, v in item.items()
            if name in (value_attribute, COUNT_ATTRIBUTE) or is_checkpoint_attribute(name)
        )
    )


class _Checker:
    def __init__(
        self, rules: RuleSet, client: DynamoDBClient, table_name: str, names: list[str]
    ) -> None:
        self.rules = rules
        self.layout = rules.layout
        self.client = client
        self.requests = requests_of(client)
        self.table_name = table_name
        self.names = names
        self.engine = Engine(rules)
        self.refs: dict[str, AggregateRef] = {}

        self.targets = {
            n: rules.get(n) for n in names if getattr(rules.get(n), "target", None) is not None
        }

    def stored(self, now: float) -> tuple[_Stored, set[str]]:
        """``({sort key: ((value, count), version, item)}, target keys present)`` of the rules'
        aggregates, time buckets expired at ``now`` left out (the expected side skips them
        too); the second part: the sort keys of the target rules whose target item exists
        (holding the attribute or not)."""
        out, present = self._stored_targets()
        call = self.requests.send
        for name in self.names:
            if name in self.targets:
                continue
            for page in query_collections(
                call,
                self.table_name,
                self.layout,
                self.layout.aggregate_partitions_of(self.rules.get(name).spread),
                begins_with=f"{name}#",
            ):
                for item in page:
                    sort_key = self.layout.sort_key_of(item)
                    if sort_key is None:
                        continue
                    ttl = item.get(self.layout.ttl_attribute, {}).get("N")
                    if ttl is not None and Decimal(ttl) <= Decimal(str(now)):
                        continue  # an expired time bucket TTL has not deleted yet
                    raw = item.get(self.layout.value_attribute, {}).get("N", "0")
                    count = item.get(COUNT_ATTRIBUTE, {}).get("N", "0")
                    version = _version(item, self.layout.value_attribute)
                    out[sort_key] = ((Decimal(raw), Decimal(count)), version, item)
        return out, present

    def _stored_targets(self) -> tuple[_Stored, set[str]]:
        """The target rules' stored sums: per application item holding a target attribute, the
        attribute under the rule's sort key for that item, its version the attribute and the
        checkpoint map as read; and the sort keys of every item that exists as a rule's target
        (one strongly consistent scan, projected)."""
        out: _Stored = {}
        present: set[str] = set()
        if not self.targets:
            return out, present
        lay = self.layout
        wanted = [*lay.key_attributes, lay.target_checkpoints_attribute]
        wanted += sorted({r.target.attribute for r in self.targets.values() if r.target})
        names = {f"#p{i}": n for i, n in enumerate(wanted)}
        request = {
            "TableName": self.table_name,
            "ConsistentRead": True,
            "ProjectionExpression": ", ".join(names),
            "ExpressionAttributeNames": names,
        }
        for page in self.requests.pages("scan", **request):
            for item in page.get("Items", []):
                if lay.is_reserved(item):
                    continue
                for rule in self.targets.values():
                    assert rule.target is not None
                    sort_key = target_sort_key(rule, item, lay)
                    if sort_key is None:
                        continue
                    present.add(sort_key)
                    held = item.get(rule.target.attribute)
                    if held is None:
                        continue
                    version = (
                        (rule.target.attribute, *next(iter(held.items()))),
                        (
                            lay.target_checkpoints_attribute,
                            "M",
                            repr(item.get(lay.target_checkpoints_attribute)),
                        ),
                    )
                    number = Decimal(held["N"]) if "N" in held else Decimal(0)
                    out[sort_key] = ((number, Decimal(0)), version, item)
        return out, present

    def expected(self, now: float) -> tuple[dict[str, Amounts], int]:
        """``({sort key: (value, count)}, items scanned)`` of the rules over the table's items
        (the count of a kind that keeps none is 0)."""
        totals: dict[str, Amounts] = {}
        scanned = 0
        request = {"TableName": self.table_name, "ConsistentRead": True}
        for page in self.requests.pages("scan", **request):
            for item in page.get("Items", []):
                if self.layout.is_reserved(item):
                    continue
                scanned += 1
                found, _ = self.engine.image_entries(Image(item), self.names, now=now)
                for ref, amounts in found.items():
                    self.refs[ref.sort_key] = ref
                    totals[ref.sort_key] = add_amounts(
                        totals.get(ref.sort_key, NO_AMOUNTS), amounts
                    )
        return totals, scanned


def reconcile(
    rules: RuleSet,
    client: DynamoDBClient,
    table_name: str,
    *,
    rule_names: Iterable[str] | None = None,
    repair: bool = False,
    settle_seconds: float = 90.0,
    clock: Clock = time.time,
) -> ReconcileReport:
    """Compare the rules' aggregates with the rules over the table's items (module docstring).

    Parameters
    ----------
    rules
        The deployed rule set.
    client, table_name
        A boto3 DynamoDB client and the table.
    rule_names
        Base rules to check (default: every base rule; every one must be active in the table's
        rule manifest, or there is no manifest).
    repair
        Add each stable drift's difference, once, conditionally on the item not having moved.
    settle_seconds
        Wait between the two checks of the candidates (doubled when a checked rule has
        ``write_shards``).

    Returns
    -------
    ReconcileReport

    Raises
    ------
    ConfigError
        For an unknown or derived rule, or one pending a backfill.
    """
    states = Manifest(client, table_name, rules.layout).load()
    _refuse_changed(rules, states, rule_names)
    rules, renamed = _resolve(rules, states, rule_names)
    names = _default_names(rules, states) if renamed is None else list(renamed)
    _refuse_unchecked(rules, states, names)
    checker = _Checker(rules, client, table_name, names)
    report = ReconcileReport()
    first = _check(checker, report, clock)
    keys = set(first.expected) | set(first.after)
    report.keys_checked = len(keys)
    differing = sorted(
        k for k in keys if first.expected.get(k, NO_AMOUNTS) != _value(first.after, k)
    )
    # a target that does not exist is an expected state (its deltas go to the ledger), not a
    # difference to wait on: reported apart at once
    missing = [k for k in differing if _no_target(checker, k, first)]
    report.missing_targets.extend(_missing_target(checker, k, first) for k in missing)
    candidates = [k for k in differing if k not in set(missing)]
    # a write-sharded rule's change reaches its aggregate in two passes through the stream (the
    # partial, then the aggregate): wait for both before calling a difference stable
    sharded = any(r.sharded for r in rules if r.name in names)
    if candidates:
        time.sleep(settle_seconds * (2 if sharded else 1))
        second = _check(checker, report, clock)
        for key in candidates:
            drift = _judge(checker, key, first, second, repair)
            if drift is not None:
                found = report.missing_targets if drift.status == NO_TARGET else report.drifts
                found.append(drift)
    # the top lists, once the aggregates they rank are repaired: a list follows its aggregates
    # one more pass through the stream behind
    report.lists_checked, report.list_drifts = check_top_lists(
        client,
        table_name,
        rules,
        names,
        repair=repair,
        settle_seconds=settle_seconds * (3 if sharded else 2),
        clock=clock,
    )
    return report


@dataclass(frozen=True, slots=True)
class _Check:
    """One check's reads: the stored aggregates before and after the scan, the expected values
    the scan computed, and the target rules' keys whose target item either read saw."""

    before: _Stored
    expected: dict[str, Amounts]
    after: _Stored
    present: frozenset[str] = frozenset()


def _no_target(checker: _Checker, key: str, check: _Check) -> bool:
    """Whether ``key`` is a target rule's whose target item exists in neither read of
    ``check`` (so nothing holds its sum, and nothing may)."""
    return (
        key.partition("#")[0] in checker.targets
        and key not in check.present
        and key not in check.after
        and key in checker.refs
    )


def _missing_target(checker: _Checker, key: str, check: _Check) -> Drift:
    """The :data:`NO_TARGET` report of ``key``: what its items add up to, nothing stored."""
    expected = check.expected.get(key, NO_AMOUNTS)
    display = checker.refs[key].display_key
    return _drift(checker, key.partition("#")[0], display, expected, NO_AMOUNTS, NO_TARGET)


def _refuse_changed(
    rules: RuleSet, states: dict[str, RuleState], rule_names: Iterable[str] | None
) -> None:
    """Raise :class:`ConfigError` for a rule to check whose definition differs from every
    generation in the table (its stored aggregates mean something else)."""
    changed = changed_definitions(rules, states)
    if rule_names is not None:
        changed = [n for n in changed if n in rule_names]
    if changed:
        raise ConfigError(
            f"rule(s) {', '.join(changed)}: the definition differs from every generation in the "
            "table, so its aggregates cannot be checked against it; run `aggregator rebuild`"
        )


def _resolve(
    rules: RuleSet, states: dict[str, RuleState], rule_names: Iterable[str] | None
) -> tuple[RuleSet, list[str] | None]:
    """Each rule under the storage name of the generation its definition builds, and
    ``rule_names`` (if given) renamed to match."""
    try:
        resolved = resolved_rules(rules, states)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    renamed = {r.name: s.name for r, s in zip(rules, resolved, strict=True)}
    if rule_names is None:
        return resolved, None
    return resolved, [renamed.get(n, n) for n in rule_names]


def _default_names(rules: RuleSet, states: dict[str, RuleState]) -> list[str]:
    """Every base rule's name; raise :class:`ConfigError` when one is pending a backfill."""
    # a rule pending a backfill lacks, by design, what the table held before its fences
    incomplete = {n for n, s in states.items() if s.status != "active"}
    names = [r.name for r in rules.base_rules if r.name not in incomplete]
    left_out = [r.name for r in rules.base_rules if r.name in incomplete]
    if left_out:
        # checking the others only would report "no drift" for rules it never looked at
        listed = ", ".join(f"{n} ({states[n].status})" for n in left_out)
        others = f", or check the others with --rules {','.join(names)}" if names else ""
        raise ConfigError(
            f"rule(s) {listed} do not count the items from before their fences yet, so "
            f"their aggregates cannot be checked: run `aggregator backfill` first{others}"
        )
    return names


def _refuse_unchecked(rules: RuleSet, states: dict[str, RuleState], names: list[str]) -> None:
    """Raise :class:`ConfigError` for a name that is no rule, a derived rule, or a rule pending a
    backfill."""
    base = {r.name for r in rules.base_rules}
    incomplete = {n for n, s in states.items() if s.status != "active"}
    for name in names:
        if name not in {r.name for r in rules}:
            raise ConfigError(f"no rule named {name!r} in the definitions")
        if name not in base:
            raise ConfigError(f"rule {name!r} is derived: reconcile checks base rules only")
        if name in incomplete:
            raise ConfigError(
                f"rule {name!r} is {states[name].status}: its aggregates do not count the items "
                "from before its fences yet; run `aggregator backfill` first"
            )


def _check(checker: _Checker, report: ReconcileReport, clock: Clock) -> _Check:
    """Read the stored aggregates, scan for the expected values, read the aggregates again, and
    count the check (and its items scanned) in ``report``."""
    now = clock()
    before, present_before = checker.stored(now)
    expected, scanned = checker.expected(now)
    after, present_after = checker.stored(now)
    report.items_scanned = scanned  # per check
    report.checks += 1
    return _Check(before, expected, after, frozenset(present_before | present_after))


def _value(table: _Stored, key: str) -> Amounts:
    """The stored ``(value, count)`` under ``key`` (zeros when there is no item)."""
    found: Amounts = table[key][0] if key in table else NO_AMOUNTS
    return found


def _read_version(table: _Stored, key: str) -> Version:
    """The stored version under ``key`` (``None`` when there is no item)."""
    return table[key][1] if key in table else None


def _stable(key: str, first: _Check, second: _Check) -> bool:
    """Whether ``key``'s expected value is the same in both checks and its stored version did not
    change from the first read to the last."""
    return (
        first.expected.get(key, NO_AMOUNTS) == second.expected.get(key, NO_AMOUNTS)
        and _read_version(first.before, key) == _read_version(first.after, key)
        and _read_version(first.after, key)
        == _read_version(second.before, key)
        == _read_version(second.after, key)
    )


def _judge(
    checker: _Checker, key: str, first: _Check, second: _Check, repair: bool
) -> Drift | None:
    """A candidate's drift after the second check (``None`` when its expected and stored values
    agree by then): ``drift``, ``moving`` or :data:`NO_TARGET` (its target item went between
    the checks), or the repair's outcome."""
    rule = key.partition("#")[0]
    ref = checker.refs.get(key)
    display = ref.display_key if ref is not None else _stored_key(second.after, key)
    exp, stored = second.expected.get(key, NO_AMOUNTS), _value(second.after, key)
    stable = _stable(key, first, second)
    if exp == stored:
        return None
    status = "drift" if stable else "moving"
    if _no_target(checker, key, second):
        status = NO_TARGET
    if status == "drift" and repair:
        status = _repair(checker, key, rule, display, ref, exp, stored, second.after.get(key))
    return _drift(checker, rule, display, exp, stored, status)


def _drift(
    checker: _Checker, rule: str, display: str, expected: Amounts, stored: Amounts, status: str
) -> Drift:
    """The :class:`Drift` of one key, with its counts when the rule's kind keeps one."""
    counted = checker.rules.get(rule).kind.keeps_count
    return Drift(
        rule,
        display,
        expected[0],
        stored[0],
        status,
        expected[1] if counted else None,
        stored[1] if counted else None,
    )


def _stored_key(table: dict[str, Any], sort_key: str) -> str:
    item = table.get(sort_key, (None, None, {}))[2]
    return str(item.get("key", {}).get("S", sort_key.partition("#")[2]))


def _repair(
    checker: _Checker,
    sort_key: str,
    rule: str,
    display: str,
    ref: AggregateRef | None,
    expected: Amounts,
    stored: Amounts,
    row: tuple[Amounts, Version, dict[str, Any]] | None,
) -> str:
    layout = checker.layout
    if rule in checker.targets:
        return _repair_target(checker, rule, expected, stored, row, ref)
    if ref is None:  # no item counts for it any more: the stored item's own description
        ref = AggregateRef(rule, sort_key.partition("#")[2], display)
    difference = subtract(expected[0], stored[0])
    delta = CoalescedDelta.of(
        checker.rules.get(rule).write_spec,
        ref,
        difference,
        "0",
        [],
        count=subtract(expected[1], stored[1]),
    )
    update = aggregate_update(layout, delta, difference)
    # the live generation's definition (reconcile refuses changed ones): its spread partition
    key = layout.aggregate_key(sort_key, delta.partition(layout))
    if row is None:
        update = update.where_missing(layout.value_attribute)
    else:
        for attribute, kind, value in row[1] or ():
            update = update.where_equals(attribute, {kind: value})
    try:
        requests_of(checker.client).send(
            "update_item",
            TableName=checker.table_name,
            Key=key,
            **update.render(),
        )
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return "moving"
        raise
    return "repaired"


def _repair_target(
    checker: _Checker,
    rule: str,
    expected: Amounts,
    stored: Amounts,
    row: tuple[Amounts, Version, dict[str, Any]] | None,
    ref: AggregateRef | None,
) -> str:
    """``ADD`` the difference to the target attribute, on condition that the item exists and its
    attribute and checkpoint map are as read (absent, when no row was read); a status saying
    what to fix instead when either has a type the update cannot take."""
    layout = checker.layout
    target = checker.targets[rule].target
    assert target is not None
    if row is not None:
        key = {n: v for n, v in row[2].items() if n in (layout.partition_key, layout.sort_key)}
    elif ref is not None and ref.target is not None:
        key = layout.target_key(ref.target)
    else:
        return "moving"
    item = row[2] if row is not None else {}
    # an attribute the application gave another type: ADD would be refused (ValidationException)
    if "N" not in item.get(target.attribute, {"N": "0"}):
        return f"{target.attribute} is not a number: fix the item"
    if "M" not in item.get(layout.target_checkpoints_attribute, {"M": {}}):
        return f"{layout.target_checkpoints_attribute} is not a map: fix the item"
    update = Update().add(target.attribute, subtract(expected[0], stored[0]))
    update = update.where_exists(layout.partition_key)
    for attribute in (target.attribute, layout.target_checkpoints_attribute):
        if attribute in item:
            update = update.where_equals(attribute, item[attribute])
        else:
            update = update.where_missing(attribute)
    try:
        requests_of(checker.client).send(
            "update_item", TableName=checker.table_name, Key=key, **update.render()
        )
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return "moving"
        raise
    return "repaired"


def target_sort_key(rule: Rule, item: dict[str, Any], layout: TableLayout) -> str | None:
    """The sort key (``<rule>#<key>``) under which ``rule`` counts toward the application item
    ``item`` (DynamoDB JSON) as its target, or ``None`` when no image could target it: each key
    template's values are read back from the item's key (:meth:`Rule.ledger_key
    <aggregator.core.rules.Rule.ledger_key>`, which the engine's ledger carries use too), and
    a placeholder in both templates must agree."""
    target = rule.target
    if target is None:
        return None
    texts = [item.get(layout.partition_key, {}).get("S")]
    if target.sort_key is not None:
        texts.append(item.get(layout.sort_key, {}).get("S") if layout.sort_key else None)
    if not all(isinstance(text, str) for text in texts):
        return None
    key = rule.ledger_key([str(text) for text in texts])
    return None if key is None else f"{rule.name}#{key[0]}"
