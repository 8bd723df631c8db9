"""The rule manifest and the fences, kept in the table under the reserved ``control_pk``.

Items (sort key text, or on a table without a sort key the partition key
``"<control_pk>#<sort key text>"``):

``manifest``
    One item whose map attribute ``rules`` holds each deployed rule's state
    (:class:`~aggregator.core.lifecycle.RuleState`): ``{"fingerprint", "status",
    "registered_at", "backfill_id", "active_since"}``. Rules are added by the handler or the
    local runner when they start with a rule the manifest does not know (status ``pending``), one
    conditional ``UpdateItem`` per new rule, so two starting containers cannot both register it.
``fence#<rule>#<shardId>``
    Where the handler's part of a rule begins in one shard (:class:`~aggregator.core.lifecycle.
    Fence`): attribute ``after`` (40 digits) and ``set_by``. Written once, by whichever of the
    handler (its first batch of the shard with the rule) and the backfill (the shard's last record
    when it fences) comes first: a conditional ``PutItem`` on ``attribute_not_exists``; the loser
    reads the winner's.

Costs: starting a handler reads the manifest once (1 ``GetItem``); each container reads a shard's
fences once per pending rule (1 strongly consistent ``GetItem``, plus 1 ``PutItem`` the first time
anyone sees the shard) and caches them, since a fence never changes once written. Rules that are
active and past :data:`~aggregator.core.lifecycle.FENCE_RETENTION_SECONDS` cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import Fence, RuleState, fence_before, rule_fingerprint
from aggregator.core.records import pad_sequence_number
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.writer import error_code

__all__ = ["FenceStore", "Manifest", "RuleLifecycle"]

MANIFEST_SORT_KEY = "manifest"


def _state_value(state: RuleState) -> dict[str, Any]:
    value: dict[str, Any] = {
        "fingerprint": {"S": state.fingerprint},
        "status": {"S": state.status},
        "registered_at": {"N": str(state.registered_at)},
    }
    if state.backfill_id is not None:
        value["backfill_id"] = {"S": state.backfill_id}
    if state.active_since is not None:
        value["active_since"] = {"N": str(state.active_since)}
    if state.unfenced:
        value["unfenced"] = {"BOOL": True}
    return {"M": value}


def _state_of(name: str, value: dict[str, Any]) -> RuleState:
    m = value["M"]
    return RuleState(
        name=name,
        fingerprint=m["fingerprint"]["S"],
        status=m["status"]["S"],
        registered_at=int(m["registered_at"]["N"]),
        backfill_id=m.get("backfill_id", {}).get("S"),
        active_since=int(m["active_since"]["N"]) if "active_since" in m else None,
        unfenced=m.get("unfenced", {}).get("BOOL", False),
    )


class Manifest:
    """The deployed rules' states (module docstring).

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table_name
        The table.
    layout
        Where the control items live (``layout.control_pk``).
    """

    def __init__(self, client: Any, table_name: str, layout: TableLayout) -> None:
        self.client = client
        self.table_name = table_name
        self.layout = layout
        self.key = layout.item_key(layout.control_pk, MANIFEST_SORT_KEY)

    def load(self) -> dict[str, RuleState]:
        """Every rule's state (strongly consistent read); ``{}`` when nothing is deployed yet."""
        item = self.client.get_item(
            TableName=self.table_name, Key=self.key, ConsistentRead=True
        ).get("Item")
        if not item:
            return {}
        return {name: _state_of(name, v) for name, v in item.get("rules", {}).get("M", {}).items()}

    def register(self, rules: RuleSet, *, now: float | None = None) -> dict[str, RuleState]:
        """Record the rules the manifest does not know as ``pending``; returns every state.

        Raises
        ------
        ConfigError
            When a rule's definition differs from the one its aggregates were built with (the
            same name, another fingerprint), naming the rule and what to do.
        """
        clock = int(time.time() if now is None else now)
        states = self.load()
        changed = [
            r.name
            for r in rules
            if r.name in states and states[r.name].fingerprint != rule_fingerprint(r)
        ]
        if changed:
            raise ConfigError(
                f"rule(s) {', '.join(changed)} changed definition under the same name: their "
                "aggregates were built with the old one, and mixing two definitions in one "
                "aggregate is silent corruption; give the changed rule a new name (and drop the "
                "old one), or rebuild it"
            )
        new = [
            RuleState(r.name, rule_fingerprint(r), "pending", clock)
            for r in rules
            if r.name not in states
        ]
        if new:
            states.update(self._add(new))
        return states

    def _add(self, new: list[RuleState]) -> dict[str, RuleState]:
        """Add the rules' states unless present (one request for all of them when no other
        writer raced us); returns the states in force."""
        # the item itself (on a table without a sort key it carries the collection attribute)
        fields = self.layout.item_fields(self.layout.control_pk, MANIFEST_SORT_KEY)
        extra = {k: v for k, v in fields.items() if k not in self.key}
        sets = "".join(f", #e{i} = :e{i}" for i in range(len(extra)))
        self.client.update_item(
            TableName=self.table_name,
            Key=self.key,
            UpdateExpression="SET #rules = if_not_exists(#rules, :empty)" + sets,
            ExpressionAttributeNames={
                "#rules": "rules",
                **{f"#e{i}": name for i, name in enumerate(extra)},
            },
            ExpressionAttributeValues={
                ":empty": {"M": {}},
                **{f":e{i}": {"S": value} for i, value in enumerate(extra.values())},
            },
        )
        names = {f"#r{i}": s.name for i, s in enumerate(new)}
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=self.key,
                UpdateExpression="SET "
                + ", ".join(f"#rules.#r{i} = :r{i}" for i in range(len(new))),
                ConditionExpression=" AND ".join(
                    f"attribute_not_exists(#rules.#r{i})" for i in range(len(new))
                ),
                ExpressionAttributeNames={"#rules": "rules", **names},
                ExpressionAttributeValues={
                    f":r{i}": _state_value(state) for i, state in enumerate(new)
                },
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            if len(new) > 1:  # another container registered some: one at a time
                out: dict[str, RuleState] = {}
                for state in new:
                    out.update(self._add([state]))
                return out
            stored = self.load()
            return {new[0].name: stored.get(new[0].name, new[0])}
        return {state.name: state for state in new}

    def mark_unfenced(self, names: Iterable[str]) -> None:
        """Record that a handler counts these rules without fences (its events name no shard):
        a backfill of them could not be exact, and refuses to start."""
        for name in names:
            try:
                self.client.update_item(
                    TableName=self.table_name,
                    Key=self.key,
                    UpdateExpression="SET #rules.#name.#u = :true",
                    ConditionExpression="attribute_exists(#rules.#name)",
                    ExpressionAttributeNames={"#rules": "rules", "#name": name, "#u": "unfenced"},
                    ExpressionAttributeValues={":true": {"BOOL": True}},
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise

    def set_state(self, state: RuleState, *, expected_status: str | None = None) -> bool:
        """Replace one rule's state; with ``expected_status``, only if its status is still that.

        Returns whether the state was written.
        """
        condition: dict[str, Any] = {}
        if expected_status is not None:
            condition = {
                "ConditionExpression": "#rules.#name.#status = :expected",
                "ExpressionAttributeValues": {
                    ":state": _state_value(state),
                    ":expected": {"S": expected_status},
                },
            }
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=self.key,
                UpdateExpression="SET #rules.#name = :state",
                ExpressionAttributeNames={
                    "#rules": "rules",
                    "#name": state.name,
                    **({"#status": "status"} if expected_status is not None else {}),
                },
                **(condition or {"ExpressionAttributeValues": {":state": _state_value(state)}}),
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True


class FenceStore:
    """Fences per shard under ``layout.control_pk``: one item ``fence#<shardId>`` whose map
    attributes ``after`` and ``set_by`` are keyed by rule name (module docstring)."""

    def __init__(self, client: Any, table_name: str, layout: TableLayout) -> None:
        self.client = client
        self.table_name = table_name
        self.layout = layout

    def _key(self, shard_id: str) -> dict[str, Any]:
        return self.layout.item_key(self.layout.control_pk, f"fence#{shard_id}")

    @staticmethod
    def _fences(shard_id: str, item: dict[str, Any] | None) -> dict[str, Fence]:
        if not item:
            return {}
        after = item.get("after", {}).get("M", {})
        set_by = item.get("set_by", {}).get("M", {})
        return {
            rule: Fence(rule, shard_id, value["S"], set_by.get(rule, {}).get("S", "handler"))
            for rule, value in after.items()
        }

    def get(self, shard_id: str) -> dict[str, Fence]:
        """The fences written for ``shard_id``, by rule (strongly consistent read)."""
        item = self.client.get_item(
            TableName=self.table_name, Key=self._key(shard_id), ConsistentRead=True
        ).get("Item")
        return self._fences(shard_id, item)

    def put_if_absent(self, fences: list[Fence]) -> dict[str, Fence]:
        """Write the fences (all of one shard) whose rule has none there yet; returns every
        fence of the shard in force afterwards. Two requests: one that creates the item's maps
        if missing, one ``SET after.<rule> = if_not_exists(after.<rule>, :fence)`` per rule."""
        if not fences:
            return {}
        shard_id = fences[0].shard_id
        key = self._key(shard_id)
        fields = self.layout.item_fields(self.layout.control_pk, f"fence#{shard_id}")
        extra = {k: v for k, v in fields.items() if k not in key}
        self.client.update_item(
            TableName=self.table_name,
            Key=key,
            UpdateExpression="SET #a = if_not_exists(#a, :empty), #b = if_not_exists(#b, :empty)"
            + "".join(f", #e{i} = :e{i}" for i in range(len(extra))),
            ExpressionAttributeNames={
                "#a": "after",
                "#b": "set_by",
                **{f"#e{i}": name for i, name in enumerate(extra)},
            },
            ExpressionAttributeValues={
                ":empty": {"M": {}},
                **{f":e{i}": {"S": value} for i, value in enumerate(extra.values())},
            },
        )
        sets, names, values = [], {"#a": "after", "#b": "set_by"}, {}
        for i, fence in enumerate(fences):
            names[f"#r{i}"] = fence.rule
            values[f":v{i}"] = {"S": pad_sequence_number(fence.after)}
            values[f":s{i}"] = {"S": fence.set_by}
            sets.append(f"#a.#r{i} = if_not_exists(#a.#r{i}, :v{i})")
            sets.append(f"#b.#r{i} = if_not_exists(#b.#r{i}, :s{i})")
        response = self.client.update_item(
            TableName=self.table_name,
            Key=key,
            UpdateExpression="SET " + ", ".join(sets),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
        return self._fences(shard_id, response.get("Attributes"))


class RuleLifecycle:
    """What the processor asks before each batch: the fences of the rules still fenced.

    Built once per container (cold start): registers the rule set in the manifest (refusing
    changed definitions), then caches each shard's fences on first use.

    Parameters
    ----------
    rules
        The deployed rule set.
    client, table_name
        The table.
    clock
        Epoch seconds (decides when an active rule's fences may be dropped).

    Raises
    ------
    ConfigError
        From :meth:`Manifest.register`.
    """

    def __init__(
        self, rules: RuleSet, client: Any, table_name: str, *, clock: Any = time.time
    ) -> None:
        self.manifest = Manifest(client, table_name, rules.layout)
        self.fences = FenceStore(client, table_name, rules.layout)
        self.clock = clock
        self.states = self.manifest.register(rules, now=clock())
        self._cache: dict[tuple[str, str], Fence] = {}

    def fenced_rules(self) -> list[str]:
        """The rules whose fences the handler honours now."""
        now = self.clock()
        return sorted(name for name, s in self.states.items() if s.fenced(now))

    def fences_for(
        self, shard_id: str | None, first_sequence_number: str | None, rules: Iterable[str]
    ) -> dict[str, str]:
        """``{rule: after}`` for ``rules`` in ``shard_id``, creating a fence just before
        ``first_sequence_number`` (the batch's first record) where the shard has none yet.

        Without ``shard_id`` (Lambda names the shard only with tumbling windows) there are no
        fences: the rules count every record, as before the manifest, and are marked
        ``unfenced`` in it once per container, so that a backfill of them refuses to start
        rather than count twice.
        """
        names = list(rules)
        if not names or first_sequence_number is None:
            return {}
        if not shard_id:
            unmarked = [n for n in names if not self.states[n].unfenced]
            if unmarked:
                self.manifest.mark_unfenced(unmarked)
                for n in unmarked:
                    self.states[n] = replace(self.states[n], unfenced=True)
            return {}
        missing = [n for n in names if (n, shard_id) not in self._cache]
        if missing:
            known = self.fences.get(shard_id)
            absent = [n for n in missing if n not in known]
            if absent:
                after = fence_before(first_sequence_number)
                known = self.fences.put_if_absent(
                    [Fence(n, shard_id, after, "handler") for n in absent]
                )
            for name in missing:
                self._cache[(name, shard_id)] = known[name]
        return {name: self._cache[(name, shard_id)].after for name in names}
