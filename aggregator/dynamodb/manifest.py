"""The rule manifest and the fences, kept in the table among the control items.

Items (sort key text, or on a table without a sort key the partition key
``"<control_pk>#<sort key text>"``); the manifest always under ``control_pk``, the fences under
``layout.control_key`` of their sort key (:mod:`aggregator.dynamodb.control`):

``manifest``
    One item with two map attributes, and ``control_partitions`` (N): how many partition key
    values the table's control items spread over, recorded by the first registration of rules
    (or ``create-table``) and compared with the layout at every read
    (:func:`~aggregator.dynamodb.control.check_control_partitions`). ``rules`` holds each rule
    generation's state by storage name (:class:`~aggregator.core.lifecycle.RuleState`):
    ``{"fingerprint", "status", "registered_at", "backfill_id", "active_since",
    "retired_at", "partitions"}`` (the last only when the generation spreads its aggregates over
    more than one partition key value). ``generations`` holds the generation readers use, for
    each rule rebuilt at least once. Rules are added by the handler or the local runner when
    they start with a rule the manifest does not know (status ``pending``), with one conditional
    ``UpdateItem``, so two starting containers cannot both register it; ``aggregator rebuild``
    adds ``requested`` generations and switches readers.
``fence#<shardId>``
    Where the handler's part of each rule generation begins in one shard
    (:class:`~aggregator.core.lifecycle.Fence`): map attributes ``after`` (40 digits) and
    ``set_by``, keyed by storage name. Each entry is written once, by whichever of the handler
    (its first batch of the shard with the rule) and the backfill (the shard's last record when it
    fences) comes first (``if_not_exists``); the loser reads the winner's.

Costs: starting a handler reads the manifest once (1 ``GetItem``); each container reads a shard's
fences once per pending rule (1 strongly consistent ``GetItem``, plus 1 ``PutItem`` the first time
anyone sees the shard) and caches them, since a fence never changes once written. Rules that are
active and past :data:`~aggregator.core.lifecycle.FENCE_RETENTION_SECONDS` cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aggregator.core.clock import Clock
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import (
    Fence,
    Genesis,
    RuleState,
    counted_from_start,
    fence_before,
    generation_name,
    generation_of,
    generations_of,
    live_generation,
    rule_fingerprint,
    storage_rules,
    stream_label,
)
from aggregator.core.rules import Rule, RuleSet
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.control import (
    CONTROL_MOVE_ATTRIBUTE,
    CONTROL_PARTITIONS_ATTRIBUTE,
    check_control_partitions,
    recorded_control_partitions,
)
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.fences import FenceStore
from aggregator.dynamodb.streams import list_shards
from aggregator.dynamodb.updates import Update, with_collection

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

__all__ = [
    "MANIFEST_SORT_KEY",
    "FenceStore",
    "Manifest",
    "RuleLifecycle",
    "manifest_generations",
    "manifest_states",
]

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
    if state.leaderboard is not None:
        value["leaderboard"] = {"BOOL": state.leaderboard}
    if state.handler_leaderboard is not None:
        value["handler_leaderboard"] = {"BOOL": state.handler_leaderboard}
    if state.target_attribute is not None:
        value["target_attribute"] = {"S": state.target_attribute}
    if state.genesis:
        value["genesis"] = {"BOOL": True}
    if state.partitions != 1:  # absent: 1, as every entry recorded before spread partitions
        value["partitions"] = {"N": str(state.partitions)}
    return {"M": value}


def manifest_states(item: Mapping[str, Any]) -> dict[str, RuleState]:
    """Every generation's state by storage name in a manifest item (DynamoDB JSON, ``{}`` for
    none): its ``rules`` map parsed. The one parser of the item, used by :class:`Manifest` and by
    the readers' cache of the serving generations
    (:class:`~aggregator.dynamodb.query.generations.ServingGenerations`)."""
    return {name: _state_of(name, v) for name, v in item.get("rules", {}).get("M", {}).items()}


def manifest_generations(item: Mapping[str, Any]) -> dict[str, int]:
    """The serving generation of each rule rebuilt at least once (``{rule: generation}``) in a
    manifest item (DynamoDB JSON): its ``generations`` map parsed."""
    return {name: int(v["N"]) for name, v in item.get("generations", {}).get("M", {}).items()}


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
        leaderboard=m["leaderboard"]["BOOL"] if "leaderboard" in m else None,
        handler_leaderboard=(
            m["handler_leaderboard"]["BOOL"] if "handler_leaderboard" in m else None
        ),
        target_attribute=m.get("target_attribute", {}).get("S"),
        genesis=m.get("genesis", {}).get("BOOL", False),
        partitions=int(m["partitions"]["N"]) if "partitions" in m else 1,
    )


def _genesis(item: dict[str, Any]) -> Genesis | None:
    value = item.get("genesis", {}).get("M")
    if not value or "stream_label" not in value:
        return None
    return Genesis(value["stream_label"]["S"], value.get("set_by", {}).get("S", "create-table"))


@dataclass(slots=True)
class _Resolution:
    """What :meth:`Manifest.register` found for each rule: the live generation ``chosen`` (by
    storage name), the ``new`` rules' states, the rules refused (``changed``, ``moved``,
    ``gone``), and the leaderboard flags to record (``unrecorded``, ``running``)."""

    chosen: dict[str, RuleState] = field(default_factory=dict)
    new: list[RuleState] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    unrecorded: list[tuple[str, bool]] = field(default_factory=list)
    running: list[tuple[str, bool]] = field(default_factory=list)

    def refuse(self) -> None:
        """Raise :class:`ConfigError` for the refused rules, if any (:meth:`Manifest.register`)."""
        if self.changed:
            raise ConfigError(
                f"rule(s) {', '.join(self.changed)} changed definition under the same name: "
                "their aggregates were built with the old one, and mixing two definitions in one "
                "aggregate is silent corruption; run `aggregator rebuild RULE` with the new "
                "definition before deploying it (or give the changed rule a new name; a derived "
                "rule, its source or a target rule, which rebuild refuses, keeps its place under "
                "a new table: aggregate_partitions with partitions: 1)"
            )
        if self.moved:
            raise ConfigError(
                f"rule(s) {', '.join(self.moved)}: only where the ranking is kept changed "
                "(leaderboard_store): the aggregates keep their values, but each generation "
                "keeps its ranking in one store; run `aggregator rebuild RULE` with the new "
                "definition before deploying it (it builds a generation with the new store and "
                "switches readers to it)"
            )
        if self.gone:
            raise ConfigError(
                f"rule(s) {', '.join(self.gone)}: this definition's aggregates were retired by a "
                "rebuild or are being dropped; deploy the current definition, or run `aggregator "
                "rebuild RULE` to build this one again"
            )


def _resolve(
    rules: RuleSet, states: dict[str, RuleState], clock: int, candidate: bool
) -> _Resolution:
    """Each rule's generation among ``states`` (:meth:`Manifest.register`), nothing written."""
    found = _Resolution()
    for r in rules:
        fingerprint = rule_fingerprint(r)
        family = generations_of(r.name, states)
        if not family:
            found.new.append(
                RuleState(
                    r.name,
                    fingerprint,
                    "pending",
                    clock,
                    leaderboard=r.leaderboard,
                    handler_leaderboard=r.leaderboard,
                    target_attribute=None if r.target is None else r.target.attribute,
                    genesis=candidate,
                    partitions=r.spread,
                )
            )
            continue
        state = live_generation(r, states)
        if state is not None:
            found.chosen[state.name] = state
            if state.leaderboard is None:
                found.unrecorded.append((state.name, r.leaderboard))
            if state.handler_leaderboard != r.leaderboard:
                found.running.append((state.name, r.leaderboard))
        elif any(s.fingerprint == fingerprint for s in family):
            found.gone.append(r.name)
        elif _store_moved(r, family):
            found.moved.append(r.name)
        else:
            found.changed.append(r.name)
    return found


class Manifest:
    """The deployed rules' states (module docstring).

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table_name
        The table.
    layout
        Where the control items live (the manifest under ``layout.control_pk``).
    check_layout
        Compare the layout's ``control_partitions`` with the manifest's record at every read
        (:func:`~aggregator.dynamodb.control.check_control_partitions`); off only for the step
        that changes the record.

    Raises
    ------
    aggregator.dynamodb.control.ControlLayoutError
        From any method that reads the manifest, when the layout's ``control_partitions``
        differs from the table's record (with ``check_layout``).
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        layout: TableLayout,
        *,
        check_layout: bool = True,
    ) -> None:
        self.client = client
        self.requests = requests_of(client)
        self.table_name = table_name
        self.layout = layout
        self.check_layout = check_layout
        self.key = layout.item_key(layout.control_pk, MANIFEST_SORT_KEY)

    def _write_if(self, update: Update) -> bool:
        """Send ``update`` to the manifest item; ``False`` when its condition does not hold."""
        try:
            self.requests.send(
                "update_item", TableName=self.table_name, Key=self.key, **update.render()
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def _item(self) -> dict[str, Any]:
        where: dict[str, Any] = {"TableName": self.table_name, "Key": self.key}
        item: dict[str, Any] | None = self.requests.send(
            "get_item", ConsistentRead=True, **where
        ).get("Item")
        if self.check_layout:
            check_control_partitions(item, self.layout, self.table_name)
        return item or {}

    def item(self) -> dict[str, Any]:
        """The manifest item (DynamoDB JSON, ``{}`` when there is none; strongly consistent
        read), checked as every read is (``check_layout``)."""
        return self._item()

    def begin_control_move(self, recorded: int, target: int) -> bool:
        """Mark the control items as moving from ``recorded`` to ``target`` partition key
        values (``control_partitions_moving``; one conditional ``UpdateItem``: the record is
        still ``recorded`` and no move is under way). Returns whether it wrote. From then on
        every manifest read refuses
        (:func:`~aggregator.dynamodb.control.check_control_partitions`) until
        :meth:`finish_control_move`."""
        update = with_collection(
            Update().set(CONTROL_MOVE_ATTRIBUTE, {"N": str(target)}),
            self.layout,
            self.layout.control_pk,
        ).where_missing(CONTROL_MOVE_ATTRIBUTE)
        same = Update().where_equals(CONTROL_PARTITIONS_ATTRIBUTE, {"N": str(recorded)})
        if recorded == 1:  # a manifest from before the record means 1
            update = update.where_any(same, Update().where_missing(CONTROL_PARTITIONS_ATTRIBUTE))
        else:
            update = update.where_equals(CONTROL_PARTITIONS_ATTRIBUTE, {"N": str(recorded)})
        return self._write_if(update)

    def finish_control_move(self, target: int) -> bool:
        """Record ``target`` as the table's ``control_partitions`` and end the move (one
        conditional ``UpdateItem``: the move under way is to ``target``). Returns whether it
        wrote."""
        update = (
            Update()
            .set(CONTROL_PARTITIONS_ATTRIBUTE, {"N": str(target)})
            .remove(CONTROL_MOVE_ATTRIBUTE)
            .where_equals(CONTROL_MOVE_ATTRIBUTE, {"N": str(target)})
        )
        return self._write_if(update)

    def control_partitions(self) -> int | None:
        """How many partition key values the table's control items spread over, as the
        manifest records it (:func:`~aggregator.dynamodb.control.recorded_control_partitions`:
        ``None`` before any rule is registered; 1 for a manifest from before the record)."""
        return recorded_control_partitions(self._item())

    def record_control_partitions(self, partitions: int | None = None) -> bool:
        """Record ``partitions`` (default: the layout's ``control_partitions``) as the number
        of partition key values the table's control items spread over, unless a number is
        recorded already (one conditional ``UpdateItem``); returns whether it wrote. The
        record in force is then compared as at every read.

        Raises
        ------
        aggregator.dynamodb.control.ControlLayoutError
            When another number was recorded first and differs from the layout's (with
            ``check_layout``).
        """
        number = self.layout.control_partitions if partitions is None else partitions
        update = with_collection(
            Update().set(CONTROL_PARTITIONS_ATTRIBUTE, {"N": str(number)}),
            self.layout,
            self.layout.control_pk,
        ).where_missing(CONTROL_PARTITIONS_ATTRIBUTE)
        if self._write_if(update):
            return True
        self._item()  # the number recorded first: compared with the layout
        return False

    def load(self) -> dict[str, RuleState]:
        """Every generation's state by storage name (strongly consistent read); ``{}`` when
        nothing is deployed yet."""
        return manifest_states(self._item())

    def load_all(self) -> tuple[dict[str, RuleState], dict[str, int]]:
        """The states (as :meth:`load`) and the serving generation of each rule rebuilt at
        least once (``{rule: generation}``; a rule not listed serves generation 1), from one
        strongly consistent read."""
        item = self._item()
        return manifest_states(item), manifest_generations(item)

    def register(
        self,
        rules: RuleSet,
        *,
        now: float | None = None,
        genesis_stream_arn: str | None = None,
    ) -> dict[str, RuleState]:
        """Resolve each rule to the generation its definition builds, recording new rules as
        ``pending`` and taking up a ``requested`` generation (``aggregator rebuild``) as
        ``pending``; returns those generations' states, keyed by storage name
        (:func:`~aggregator.core.lifecycle.generation_name`).

        A rule resolves to the generation with its fingerprint that is neither ``retired`` nor
        ``dropping``; a rule with no generation at all is new. A new rule is a genesis candidate
        (:attr:`~aggregator.core.lifecycle.RuleState.genesis`) while the manifest's genesis
        holds; ``genesis_stream_arn`` (a deployment that created the table with that stream)
        records one where the manifest holds none (:meth:`record_genesis`).

        The first registration on a table also records where its control items go (the
        layout's ``control_partitions``, in the write that creates the manifest's maps), unless
        a number is recorded already.

        Raises
        ------
        ConfigError
            When a rule's definition differs from every live generation's (the same name,
            another fingerprint, no rebuild requested), or matches only a retired or dropping
            one, naming the rules and what to do; or
            (:class:`~aggregator.dynamodb.control.ControlLayoutError`) when the layout's
            ``control_partitions`` differs from the table's record.
        """
        clock = int(time.time() if now is None else now)
        item = self._item()
        # the first rules of the table: where its control items go is recorded with them
        first = recorded_control_partitions(item) is None
        candidate = self._genesis_candidate(item, genesis_stream_arn, clock)
        found = _resolve(rules, manifest_states(item), clock, candidate)
        found.refuse()
        chosen = found.chosen
        # only once nothing is refused: a taken-up generation must be counted from now on
        for name, state in list(chosen.items()):
            if state.status == "requested":
                chosen[name] = self._take_up(state, clock)
        if found.new:
            chosen.update(self._add(found.new, record_layout=first))
        # entries from before the flag was recorded: their aggregates were written under this
        # definition's flag as far as anyone can tell; from now on a change of it shows
        for name, flag in found.unrecorded:
            if self.set_leaderboard(name, flag, only_if_unrecorded=True):
                chosen[name] = replace(chosen[name], leaderboard=flag)
        # the flag this handler indexes with, where it changed (a write only then)
        for name, flag in found.running:
            if self.set_leaderboard(name, flag, attribute="handler_leaderboard"):
                chosen[name] = replace(chosen[name], handler_leaderboard=flag)
        return chosen

    def _genesis_candidate(
        self, item: dict[str, Any], genesis_stream_arn: str | None, clock: int
    ) -> bool:
        """Whether a new rule is a genesis candidate: the manifest's genesis (recorded here
        from ``genesis_stream_arn`` when it holds none) holds at ``clock``."""
        genesis = _genesis(item)
        if genesis is None and genesis_stream_arn:
            if self.record_genesis(genesis_stream_arn, "stack"):
                genesis = Genesis(stream_label(genesis_stream_arn), "stack")
            else:  # another container recorded one first: the one in force
                genesis = self.genesis()
        # a new rule on a stream that holds every write of its table may need no backfill
        return genesis is not None and genesis.holds(None, clock)

    def genesis(self) -> Genesis | None:
        """The stream recorded as created together with the table, if any (strongly
        consistent read)."""
        return _genesis(self._item())

    def record_genesis(
        self, stream_arn: str, set_by: str, *, control_partitions: int | None = None
    ) -> bool:
        """Record that ``stream_arn`` was created together with the table, so that it holds every
        write the table ever had (:class:`~aggregator.core.lifecycle.Genesis`). Only whoever
        created the table may say so, right after creating it; a table with a genesis already
        keeps it. Returns whether it wrote. ``control_partitions`` (a table just created): the
        number of partition key values its control items spread over, recorded in the same
        write unless one is recorded (:meth:`record_control_partitions`).

        Raises
        ------
        aggregator.dynamodb.errors.AwsError
            For any error but an existing genesis.
        """
        label = stream_label(stream_arn)
        if not label:
            raise ValueError(f"not a stream ARN: {stream_arn!r}")
        value = {"M": {"stream_label": {"S": label}, "set_by": {"S": set_by}}}
        update = with_collection(
            Update().set("genesis", value), self.layout, self.layout.control_pk
        )
        if control_partitions is not None:  # a new table: where its control items go, too
            number = {"N": str(control_partitions)}
            update = update.set_if_missing(CONTROL_PARTITIONS_ATTRIBUTE, number)
        update = update.where_missing("genesis")
        return self._write_if(update)

    def set_leaderboard(
        self,
        name: str,
        flag: bool,
        *,
        only_if_unrecorded: bool = False,
        attribute: str = "leaderboard",
    ) -> bool:
        """Record whether generation ``name``'s existing aggregates carry leaderboard index
        entries (:attr:`~aggregator.core.lifecycle.RuleState.leaderboard`), or with
        ``attribute="handler_leaderboard"`` the flag the handler runs; with
        ``only_if_unrecorded``, only when nothing is recorded yet. Returns whether it wrote."""
        update = Update().set(("rules", name, attribute), {"BOOL": flag})
        update = update.where_exists(("rules", name))
        if only_if_unrecorded:
            update = update.where_missing(("rules", name, attribute))
        return self._write_if(update)

    def _take_up(self, state: RuleState, clock: int) -> RuleState:
        """A handler with a requested generation's definition starts counting it: ``requested``
        becomes ``pending`` (conditionally; a container that lost the race reads the winner's)."""
        taken = replace(state, status="pending", registered_at=clock)
        if self.set_state(taken, expected_status="requested"):
            return taken
        return self.load().get(state.name, taken)

    def request_generation(self, rule: Rule, *, now: float | None = None) -> RuleState:
        """Ask for a new generation of ``rule`` (status ``requested``) with its current
        definition, numbered one above every generation the manifest holds; returns it, or the
        live generation that already has this definition.

        Raises
        ------
        ConfigError
            When the rule is not in the manifest (a new rule needs a backfill, not a rebuild),
            or keeps its sums on application items (``target``: the message says what to do).
        """
        if rule.target is not None:
            raise ConfigError(
                f"rule {rule.name!r} keeps its sums in {rule.target.attribute!r} of application "
                "items, which readers read directly: no new generation can be built beside it. "
                "Give the changed rule a new name and target attribute, deploy it, run "
                "`aggregator backfill`, move the readers to the new attribute, then remove the "
                f"old rule and run `aggregator drop-rule {rule.name}` (it removes the old "
                "attribute)"
            )
        clock = int(time.time() if now is None else now)
        fingerprint = rule_fingerprint(rule)
        self._ensure_maps()
        for _ in range(8):
            states = self.load()
            family = generations_of(rule.name, states)
            if not family:
                raise ConfigError(
                    f"rule {rule.name!r} is not deployed: a new rule is backfilled "
                    "(`aggregator backfill`), not rebuilt"
                )
            live = live_generation(rule, states)
            if live is not None:
                return live
            number = max(generation_of(s.name)[1] for s in family) + 1
            state = RuleState(
                generation_name(rule.name, number),
                fingerprint,
                "requested",
                clock,
                leaderboard=rule.leaderboard,
                partitions=rule.spread,
            )
            added = self._add([state])
            if added[state.name] == state:
                return state
        raise ConfigError(f"rule {rule.name!r}: the manifest kept changing; try again")

    def switch(self, rule_name: str, old: str, new: str, *, now: float | None = None) -> bool:
        """Make readers use generation ``new`` of ``rule_name`` instead of ``old`` and retire
        ``old``: one conditional ``UpdateItem``, so every reader sees one generation or the
        other. Requires ``new`` active and ``old`` still serving. Returns whether it switched."""
        clock = int(time.time() if now is None else now)
        number = generation_of(new)[1]
        old_number = generation_of(old)[1]
        self._ensure_maps()
        pointer = ("generations", rule_name)
        update = (
            Update()
            .set(pointer, {"N": str(number)})
            .set(("rules", old, "status"), {"S": "retired"})
            .set(("rules", old, "retired_at"), {"N": str(clock)})
            .where_equals(("rules", new, "status"), {"S": "active"})
        )
        serving = Update().where_equals(pointer, {"N": str(old_number)})
        # generation 1 serves also where no pointer was ever written
        alternatives = (Update().where_missing(pointer), serving) if old_number == 1 else (serving,)
        update = update.where_any(*alternatives)
        return self._write_if(update)

    def remove(self, storage_name: str) -> None:
        """Delete a generation's entry (the end of ``aggregator drop-rule``), and its rule's
        serving pointer when it was the last generation."""
        rule_name = generation_of(storage_name)[0]
        self.requests.send(
            "update_item",
            TableName=self.table_name,
            Key=self.key,
            **Update().remove(("rules", storage_name)).render(),
        )
        states, _ = self.load_all()
        if not any(generation_of(s)[0] == rule_name for s in states):
            self._write_if(Update().remove(("generations", rule_name)).where_exists("generations"))

    def _ensure_maps(self, *, record_layout: bool = False) -> None:
        """Create the manifest item's maps (``rules``, ``generations``) where missing, and on a
        table without a sort key its collection attribute; with ``record_layout`` (the first
        rules of the table) also the layout's ``control_partitions`` where none is recorded,
        then compare the record in force with the layout (another container's first
        registration may have won)."""
        update = (
            Update().set_if_missing("rules", {"M": {}}).set_if_missing("generations", {"M": {}})
        )
        if record_layout:
            number = {"N": str(self.layout.control_partitions)}
            update = update.set_if_missing(CONTROL_PARTITIONS_ATTRIBUTE, number)
        update = with_collection(update, self.layout, self.layout.control_pk)
        response = self.requests.send(
            "update_item",
            TableName=self.table_name,
            Key=self.key,
            ReturnValues="ALL_NEW" if record_layout else "NONE",
            **update.render(),
        )
        if record_layout and self.check_layout:
            check_control_partitions(response.get("Attributes"), self.layout, self.table_name)

    def _add(self, new: list[RuleState], *, record_layout: bool = False) -> dict[str, RuleState]:
        """Add the rules' states unless present (one request for all of them when no other
        writer raced us); returns the states in force. ``record_layout``: as
        :meth:`_ensure_maps`."""
        self._ensure_maps(record_layout=record_layout)
        update = Update()
        for state in new:
            update = update.set(("rules", state.name), _state_value(state))
            update = update.where_missing(("rules", state.name))
        if self._write_if(update):
            return {state.name: state for state in new}
        if len(new) > 1:  # another container registered some: one at a time
            out: dict[str, RuleState] = {}
            for state in new:
                out.update(self._add([state]))
            return out
        stored = self.load()
        return {new[0].name: stored.get(new[0].name, new[0])}

    def mark_unfenced(self, names: Iterable[str]) -> None:
        """Record that a handler counts these rules without fences (its events name no shard):
        a backfill of them could not be exact, and refuses to start."""
        for name in names:
            update = Update().set(("rules", name, "unfenced"), {"BOOL": True})
            self._write_if(update.where_exists(("rules", name)))

    def activate(self, names: list[str], *, now: float) -> list[str]:
        """Turn the ``pending`` rules ``names`` ``active`` since ``now`` (epoch seconds) without a
        backfill; returns those it changed. One conditional ``UpdateItem`` for all of them, or
        one each when some is no longer ``pending``."""
        if not names:
            return []
        update = Update()
        for name in names:
            update = update.set(("rules", name, "status"), {"S": "active"})
            update = update.set(("rules", name, "active_since"), {"N": str(int(now))})
            update = update.where_equals(("rules", name, "status"), {"S": "pending"})
        if self._write_if(update):
            return list(names)
        if len(names) == 1:
            return []
        return [n for name in names for n in self.activate([name], now=now)]

    def set_state(self, state: RuleState, *, expected_status: str | None = None) -> bool:
        """Replace one rule's state; with ``expected_status``, only if its status is still that.

        Returns whether the state was written.
        """
        update = Update().set(("rules", state.name), _state_value(state))
        if expected_status is not None:
            update = update.where_equals(("rules", state.name, "status"), {"S": expected_status})
        return self._write_if(update)


class RuleLifecycle:
    """What the processor asks before each batch: the fences of the rules still fenced.

    Built once per container (cold start): registers the rule set in the manifest (refusing
    changed definitions), then caches each shard's fences on first use. :attr:`rules` is the
    rule set to build the engine on: each rule named by the storage name of the generation its
    definition builds (:func:`~aggregator.core.lifecycle.storage_rules`).

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
        self,
        rules: RuleSet,
        client: DynamoDBClient,
        table_name: str,
        *,
        clock: Clock = time.time,
        streams: Callable[[], DynamoDBStreamsClient] | None = None,
        genesis_stream_arn: str | None = None,
    ) -> None:
        self.manifest = Manifest(client, table_name, rules.layout)
        self.fences = FenceStore(client, table_name, rules.layout)
        self.clock = clock
        self._streams_factory = streams
        self._streams: DynamoDBStreamsClient | None = None
        # read once: a genesis is written once, when the table is created, and never changes
        self._genesis: Genesis | None = None
        self.states = self.manifest.register(
            rules, now=clock(), genesis_stream_arn=genesis_stream_arn
        )
        storage = {generation_of(name)[0]: name for name in self.states}
        try:
            self.rules = storage_rules(rules, storage)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._cache: dict[tuple[str, str], Fence] = {}

    def fenced_rules(self) -> list[str]:
        """The rules whose fences the handler honours now."""
        now = self.clock()
        return sorted(name for name, s in self.states.items() if s.fenced(now))

    def fences_for(
        self,
        shard_id: str | None,
        first_sequence_number: str | None,
        rules: Iterable[str],
        *,
        stream_arn: str | None = None,
    ) -> dict[str, str]:
        """``{rule: after}`` for ``rules`` in ``shard_id``, creating a fence just before
        ``first_sequence_number`` (the batch's first record) where the shard has none yet.

        Without ``shard_id`` (Lambda names the shard only with tumbling windows) there are no
        fences: the rules count every record, as before the manifest, and are marked
        ``unfenced`` in it once per container, so that a backfill of them refuses to start
        rather than count twice.

        When this container reaches a shard for the first time and a rule is a genesis
        candidate (:attr:`~aggregator.core.lifecycle.RuleState.genesis`), the proof that it
        needs no backfill is checked on ``stream_arn`` (:meth:`promote`).
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
                    [Fence(n, shard_id, after, "handler") for n in absent], opened_after=after
                )
            for name in missing:
                self._cache[(name, shard_id)] = known[name]
            if stream_arn is not None and self.candidates():
                self.promote(stream_arn)
        return {name: self._cache[(name, shard_id)].after for name in names}

    def candidates(self) -> list[str]:
        """The pending rules that may turn active without a backfill (genesis candidates)."""
        return sorted(n for n, s in self.states.items() if s.status == "pending" and s.genesis)

    def promote(self, stream_arn: str) -> list[str]:
        """Turn ``active`` every genesis candidate that the handler counted from the first
        record of every shard of ``stream_arn``, while the manifest's genesis holds for that
        stream (:mod:`aggregator.core.lifecycle`, "Rules that need no backfill"); returns them.

        Costs, each time this container reaches a new shard while candidates remain:
        ``DescribeStream`` (a page per 100 shards) and one strongly consistent ``GetItem`` per
        shard; the first time also one strongly consistent manifest read (the genesis, written
        once, is kept). Without a Streams client (``streams``) it
        does nothing. Every change is conditional on the rule still being ``pending``, so
        containers promoting at once, or a backfill starting, are harmless.
        """
        if self._streams_factory is None:
            return []
        now = self.clock()
        if self._genesis is None:
            self._genesis = self.manifest.genesis()
        genesis = self._genesis
        if genesis is None or not genesis.holds(stream_arn, now):
            # the proof cannot be taken any more in this container: the rules stay pending
            for name in self.candidates():
                self.states[name] = replace(self.states[name], genesis=False)
            return []
        if self._streams is None:
            self._streams = self._streams_factory()
        shard_ids = [s["ShardId"] for s in list_shards(self._streams, stream_arn)]
        openings = {shard_id: self.fences.opening(shard_id) for shard_id in shard_ids}
        complete = [n for n in self.candidates() if counted_from_start(n, shard_ids, openings)]
        promoted = self.manifest.activate(complete, now=now)
        if len(promoted) < len(complete):  # another container or a backfill was first: as stored
            stored = self.manifest.load()
            for name in complete:
                self.states[name] = stored.get(name, self.states[name])
        for name in promoted:
            self.states[name] = replace(self.states[name], status="active", active_since=int(now))
        return promoted


def _store_moved(rule: Rule, family: Iterable[RuleState]) -> bool:
    """Whether ``rule`` differs from a live generation of ``family`` only in where its ranking
    is kept (``leaderboard_store``, and the ``leaderboard`` flag that goes with the list)."""
    if not rule.leaderboard:
        return False
    other = "index" if rule.leaderboard_store == "list" else "list"
    elsewhere = rule_fingerprint(rule.model_copy(update={"leaderboard_store": other}))
    return any(
        s.fingerprint == elsewhere and s.status not in ("retired", "dropping") for s in family
    )
