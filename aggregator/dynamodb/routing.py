"""Automatic write sharding (``write_shards: auto``): when a shard writes a rule's partials.

A rule with ``write_shards: auto`` is written like a rule without write sharding, each stream
shard adding its deltas to the aggregates themselves, until one shard finds that the rule's
aggregates run hot. From a time it persists first, that shard's records of the rule go to the
aggregates' partials (as with ``write_shards: <n>``, :data:`~aggregator.core.rules.model.
AUTO_WRITE_SHARDS` of them, the shard's chosen by a hash of its id) and roll up into the
aggregates through their stream records; once they cool down, the shard switches back the same
way. Keys that are never hot cost exactly what they cost without write sharding.

Why this is exactly-once
------------------------
The choice for a record must be the same on every delivery, or a redelivered batch would add
to the partial what an earlier delivery added to the aggregate (each item's checkpoint protects
that item only). So the choice is a function of the record's shard and its
``ApproximateCreationDateTime``, through the shard's *switches* (epoch seconds, ascending:
:mod:`aggregator.core.routing`), and a switch is persisted before it can decide any record:

1. It is decided after a batch's writes, for :func:`~aggregator.core.routing.
   next_switch_seconds` of the decision time: later than the creation time of every record the
   shard holds (DynamoDB rounds it down to the second; the margin covers the clocks' difference).
2. It is written to the shard's routing item (a control item, sort key ``routing#<shard token>``,
   under ``layout.control_key`` of it) by a conditional ``UpdateItem`` that appends it to the
   list the decision saw. A concurrent decision of another invocation of the shard (a container that
   took over) loses the condition and adopts what is stored.
3. Every batch reads the routing item with a strongly consistent ``GetItem`` (1 RCU: the item is
   small) before it evaluates any record, so every delivery of every record sees every switch
   that can apply to it. Only handlers with ``auto`` rules read it.

A failed switch write is retried by the next batch's decision; nothing depended on it.

When a shard is hot
-------------------
:class:`HeatMeter` keeps, per shard and rule, this process's writes of the rule's items over the
last :data:`HEAT_WINDOW_SECONDS`, each with the modelled WCU of a write of the aggregate and the
number of shards whose checkpoints on it are that recent (from the ``ALL_OLD`` image every
update returns: no extra request). Its estimate of the rule's write rate into the aggregates
partition is this shard's writes a second x the aggregate's WCU x those shards. Above
:data:`HOT_WCU_PER_SECOND` (30 % of a partition's 1,000 WCU a second: Developer Guide, "Best
practices for designing and using partition keys effectively") the shard moves to the partials;
below :data:`COOL_WCU_PER_SECOND` it moves back. A new shard (after a split or the shards'
rollover) starts on the aggregates.

A rule whose aggregates spread over ``n`` partition key values (``partitions``:
:meth:`~aggregator.core.layout.TableLayout.aggregate_partition`) puts a ``n``-th of that load on
each, so its estimate is divided by ``n``, and so is its deltas' start line; but writes of an
aggregate other shards wrote too (a hot key: its writers above 1), and a first batch's deltas of
its busiest aggregate, are not divided, since they land on one item of one value. Cold keys of
a spread rule therefore stay on the aggregates (no partial and roll-up per write), while a hot
key still moves.

What it cannot do: a burst that starts cold is written to the aggregates for the few seconds
before the first switch takes effect (the switch is decided from writes already made, and takes
effect a second or two later).

In the at-least-once mode nothing needs to be stable between deliveries (a redelivered batch is
added again anyway): switches are kept in memory only, and take effect at once.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.clock import Clock
from aggregator.core.engine import BatchDeltas
from aggregator.core.layout import TableLayout
from aggregator.core.routing import moved_at, next_switch_seconds
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.updates import Update

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "COOL_WCU_PER_SECOND",
    "HEAT_WINDOW_SECONDS",
    "HOT_WCU_PER_SECOND",
    "ROUTING_PREFIX",
    "HeatMeter",
    "ShardRouting",
    "item_switches",
    "routing_sort_key",
]

ROUTING_PREFIX = "routing#"
"""Sort keys of the shards' routing items in the control partition start with it."""
SWITCHES_PREFIX = "s#"
"""A routing item keeps each rule's switches in attribute ``s#<rule>`` (a list of numbers)..."""
COUNT_PREFIX = "n#"
"""... and in ``n#<rule>`` how many switches were ever made (the condition of the next one: it
only grows, where the list is trimmed)."""
SWITCH_HORIZON_SECONDS = 25 * 3600
"""Switches older than this no longer decide any record that can be delivered (the template's
``MaximumRecordAgeInSeconds`` is 24 hours): the oldest pairs of them are dropped from the list,
which keeps every later record's count even or odd as it was."""
HOT_WCU_PER_SECOND = 300.0
"""Estimated writes into the aggregates partition (WCU a second) above which a shard moves a
rule's deltas to the partials: 30 % of a partition's 1,000 (the partition holds every rule's
aggregates)."""
COOL_WCU_PER_SECOND = 50.0
"""Below this estimate a hot shard moves the rule back to the aggregates (well under
:data:`HOT_WCU_PER_SECOND`, so a rule near the line does not switch back and forth)."""
START_HOT_DELTAS_PER_SECOND = 50.0
"""A shard whose first batch brings a rule this many per-record deltas a second (of the records'
creation times) or more starts that rule on the partials: a burst is never written to the
aggregates first. (Lambda invokes a shard's function at most about four times a second, so such
a shard alone writes the rule's aggregates as often as its batches allow, and a burst reaches
every shard at once.)"""
COOL_DELTAS_FRACTION = 10
"""A hot shard goes cold only when its deltas a second fall below the start line divided by this
(and the estimated load below :data:`COOL_WCU_PER_SECOND`)."""
HEAT_WINDOW_SECONDS = 10.0
"""How far back :class:`HeatMeter` looks, in seconds."""
ROUTING_RETENTION_SECONDS = 30 * 24 * 3600
"""A routing item's TTL after it was created or last switched (30 days). It must outlive its
shard: an item gone while its shard still delivers records would be created again, with a first
choice that need not match what the records' earlier deliveries chose. DynamoDB Streams closes a
shard after hours (commonly observed around four) and hands over to a child shard, which gets an
item of its own."""


def item_switches(item: Mapping[str, Any]) -> dict[str, list[int]]:
    """``{rule: switches}`` (epoch seconds, ascending) of a routing item in DynamoDB JSON: every
    rule it names, whether or not this process runs it."""
    return {
        name[len(SWITCHES_PREFIX) :]: sorted(int(Decimal(v["N"])) for v in value.get("L", []))
        for name, value in item.items()
        if name.startswith(SWITCHES_PREFIX)
    }


def routing_sort_key(shard_id: str) -> str:
    """Sort key text of ``shard_id``'s routing item: :data:`ROUTING_PREFIX` and 16 URL-safe base64
    characters of a BLAKE2b digest of the shard id."""
    digest = hashlib.blake2b(shard_id.encode("utf-8"), digest_size=12).digest()
    return ROUTING_PREFIX + base64.urlsafe_b64encode(digest).decode("ascii")


@dataclass(slots=True)
class _Heat:
    writes: deque[tuple[float, int, int]] = field(default_factory=deque)
    """``(time, WCU of a write of the aggregate, recent writers of it)`` per write."""
    deltas: deque[tuple[float, int]] = field(default_factory=deque)
    """``(time, per-record deltas)`` per batch of the shard."""
    first_seconds: float | None = None
    aggregate_wcu: int = 1
    writers: int = 1
    """The aggregate's WCU and recent writers as last seen (a write of a partial sees neither)."""


class HeatMeter:
    """This process's writes of ``auto`` rules' items, per shard and rule (thread-safe); see the
    module docstring. ``window_seconds``: :data:`HEAT_WINDOW_SECONDS`."""

    def __init__(self, window_seconds: float = HEAT_WINDOW_SECONDS) -> None:
        self.window_seconds = window_seconds
        self._lock = threading.Lock()
        self._heat: dict[tuple[str, str], _Heat] = {}

    def record(
        self,
        shard_id: str,
        rule: str,
        at_seconds: float,
        aggregate_wcu: int | None = None,
        writers: int | None = None,
    ) -> None:
        """One write of one of ``rule``'s items by ``shard_id``'s batch: ``aggregate_wcu`` is
        what a write of the aggregate costs, ``writers`` how many shards wrote it within the
        window (at least this one); ``None`` (a write of a partial): as last seen."""
        with self._lock:
            if len(self._heat) > 10_000:
                self._heat.clear()  # an estimate only: forgetting delays a switch, no more
            heat = self._heat.setdefault((shard_id, rule), _Heat())
            if heat.first_seconds is None:
                heat.first_seconds = at_seconds
            if aggregate_wcu is not None:
                heat.aggregate_wcu = max(1, aggregate_wcu)
            if writers is not None:
                heat.writers = max(1, writers)
            heat.writes.append((at_seconds, heat.aggregate_wcu, heat.writers))
            self._trim(heat, at_seconds)

    def record_deltas(self, shard_id: str, rule: str, at_seconds: float, count: int) -> None:
        """One batch of ``shard_id`` brought ``count`` per-record deltas of ``rule``."""
        with self._lock:
            heat = self._heat.setdefault((shard_id, rule), _Heat())
            if heat.first_seconds is None:
                heat.first_seconds = at_seconds
            heat.deltas.append((at_seconds, count))
            self._trim(heat, at_seconds)

    def _trim(self, heat: _Heat, now: float) -> None:
        horizon = now - self.window_seconds
        while heat.writes and heat.writes[0][0] < horizon:
            heat.writes.popleft()
        while heat.deltas and heat.deltas[0][0] < horizon:
            heat.deltas.popleft()

    def deltas_per_second(self, shard_id: str, rule: str, now: float) -> float:
        """The shard's per-record deltas of ``rule`` a second over the window."""
        with self._lock:
            heat = self._heat.get((shard_id, rule))
            if heat is None or heat.first_seconds is None:
                return 0.0
            self._trim(heat, now)
            span = min(self.window_seconds, max(1.0, now - heat.first_seconds))
            return sum(n for _, n in heat.deltas) / span

    def estimate(self, shard_id: str, rule: str, now: float, spread: int = 1) -> float:
        """Estimated WCU a second that the rule's writes put on one of its aggregates' partition
        key values: this shard's writes a second times the aggregate's WCU times its recent
        writers (0 with no write in the window), the writes of aggregates only this shard wrote
        divided by ``spread`` (the rule's partition key values), those of aggregates other
        shards wrote too (writers above 1) not: a hot key lands on one value."""
        with self._lock:
            heat = self._heat.get((shard_id, rule))
            if heat is None or heat.first_seconds is None:
                return 0.0
            self._trim(heat, now)
            if not heat.writes:
                return 0.0
            span = min(self.window_seconds, max(1.0, now - heat.first_seconds))
            units = sum(u * w for _, u, w in heat.writes)
            if spread <= 1:
                return units / span
            shared = sum(u * w for _, u, w in heat.writes if w > 1)
            return ((units - shared) / spread + shared) / span


def _busiest_by_rule(batch: BatchDeltas) -> dict[str, int]:
    """Per ``auto`` rule in ``batch``, the per-record deltas of its busiest aggregate."""
    busiest: dict[str, int] = {}
    for d in batch.deltas.values():
        if d.auto_shards:
            busiest[d.ref.rule] = max(busiest.get(d.ref.rule, 0), len(d.parts))
    return busiest


def _deltas_by_rule(batch: BatchDeltas) -> dict[str, int]:
    """Per-record deltas of the ``auto`` rules in ``batch``, by rule (a partial's roll-up into
    its aggregate counts as one)."""
    counts: dict[str, int] = {}
    for d in batch.deltas.values():
        if d.auto_shards:
            counts[d.ref.rule] = counts.get(d.ref.rule, 0) + len(d.parts)
    return counts


class ShardRouting:
    """The shards' switches for the ``auto`` rules: read per batch, decided after it (module
    docstring).

    Parameters
    ----------
    client
        A boto3 DynamoDB client; ``None`` keeps switches in memory only (the at-least-once
        mode).
    table_name, layout
        The user's table and the framework's layout in it.
    rules
        Names of the rules with ``write_shards: auto``.
    spreads
        How many partition key values each of them spreads its aggregates over (its
        ``partitions``; absent: 1): module docstring.
    clock
        Epoch seconds (the writers' clock).
    hot_wcu_per_second, cool_wcu_per_second, start_hot_deltas_per_second
        :data:`HOT_WCU_PER_SECOND`, :data:`COOL_WCU_PER_SECOND`,
        :data:`START_HOT_DELTAS_PER_SECOND`.
    """

    def __init__(
        self,
        client: DynamoDBClient | None,
        table_name: str,
        layout: TableLayout,
        rules: Iterable[str],
        *,
        spreads: Mapping[str, int] | None = None,
        clock: Clock = time.time,
        hot_wcu_per_second: float = HOT_WCU_PER_SECOND,
        cool_wcu_per_second: float = COOL_WCU_PER_SECOND,
        start_hot_deltas_per_second: float = START_HOT_DELTAS_PER_SECOND,
    ) -> None:
        self.client = client
        self.requests = requests_of(client) if client is not None else None
        self.table_name = table_name
        self.layout = layout
        self.rules = tuple(sorted(set(rules)))
        self.spreads = dict(spreads or {})
        self.heat = HeatMeter()
        self.hot_wcu_per_second = hot_wcu_per_second
        self.cool_wcu_per_second = cool_wcu_per_second
        self.start_hot_deltas_per_second = start_hot_deltas_per_second
        self._clock = clock
        self._memory: dict[str, dict[str, list[int]]] = {}
        self._read: dict[tuple[str, str], tuple[int | None, list[int]]] = {}
        """Per shard and rule, the switch count (``n#<rule>``) and the list as last read or
        written: a switch appends to that list, on condition of that count."""
        self.reads = 0
        """Routing items read (strongly consistent ``GetItem``, 1 RCU each)."""
        self.switches = 0
        """Switches this object persisted after a shard's start."""
        self.started = 0
        """Routing items this object created (one per shard, at its first batch)."""
        self.started_hot = 0
        """Rules that started on the partials in them."""
        self.modelled_wcu = 0
        """Write units of the routing items' writes, failed conditions included (each item is
        under a kilobyte: 1 WCU a write)."""

    def _key(self, shard_id: str) -> dict[str, dict[str, str]]:
        return self.layout.control_key(routing_sort_key(shard_id))

    def read(self, shard_id: str | None) -> dict[str, list[int]] | None:
        """``{rule: switches}`` of ``shard_id`` (what :meth:`~aggregator.core.engine.Engine.
        process` takes as ``routing``): empty without a shard id or ``auto`` rules, ``None``
        when the shard has no routing item yet (:meth:`start` creates it).

        Raises
        ------
        aggregator.dynamodb.errors.AwsError
            When the routing item cannot be read: nothing of the batch may be evaluated then
            (the invocation fails and Lambda delivers the batch again).
        """
        if not self.rules or not shard_id:
            return {}
        if self.requests is None:
            known = self._memory.get(shard_id)
            return None if known is None else {r: list(s) for r, s in known.items()}
        self.reads += 1
        response = self.requests.send(
            "get_item", TableName=self.table_name, Key=self._key(shard_id), ConsistentRead=True
        )
        item = response.get("Item")
        return None if item is None else self._switches(shard_id, item)

    def start(self, shard_id: str, hot: Iterable[str]) -> dict[str, list[int]]:
        """Create ``shard_id``'s routing item before any of its records is evaluated, the
        ``hot`` rules on the partials from the shard's first record (a switch at 0), the others
        on the aggregates: nothing of the shard was applied anywhere yet, so this first choice
        needs no wait. Another invocation that created it first wins; its item is returned.

        Raises
        ------
        aggregator.dynamodb.errors.AwsError
            When the item can be neither created nor read.
        """
        hot = sorted(set(hot) & set(self.rules))
        if self.requests is None:
            known = self._memory.setdefault(shard_id, {name: [0] for name in hot})
            return {r: list(s) for r, s in known.items()}
        expires = int(self._clock()) + ROUTING_RETENTION_SECONDS
        update = Update().set(self.layout.ttl_attribute, {"N": str(expires)})
        for name in hot:
            update = update.set(SWITCHES_PREFIX + name, {"L": [{"N": "0"}]}).set(
                COUNT_PREFIX + name, {"N": "1"}
            )
        update = update.where_missing(self.layout.partition_key)  # no such item yet
        self.modelled_wcu += 1
        try:
            self.requests.send(
                "update_item", TableName=self.table_name, Key=self._key(shard_id), **update.render()
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return self.read(shard_id) or {}
        for name in self.rules:
            self._read[(shard_id, name)] = (1, [0]) if name in hot else (None, [])
        self.started += 1
        self.started_hot += len(hot)
        return {name: [0] for name in hot}

    def _switches(self, shard_id: str, item: Mapping[str, Any]) -> dict[str, list[int]]:
        if len(self._read) > 10_000:
            self._read.clear()  # read again at each shard's next batch
        stored = item_switches(item)
        for name in self.rules:
            made = item.get(COUNT_PREFIX + name)
            count = None if made is None else int(made["N"])
            self._read[(shard_id, name)] = (count, stored.get(name, []))
        return {name: stored[name] for name in self.rules if name in stored}

    def decide(
        self,
        shard_id: str | None,
        known: Mapping[str, list[int]],
        batch: BatchDeltas | None = None,
    ) -> int:
        """After a batch's writes: persist a switch for each ``auto`` rule whose heat crossed
        its line on ``shard_id`` (``known``: the switches this batch read; ``batch``: its
        deltas, counted into the heat meter). Best effort: a failed write is decided again
        after the next batch. Returns the switches persisted."""
        if not shard_id:
            return 0
        now = self._clock()
        if batch is not None:
            for name, count in _deltas_by_rule(batch).items():
                self.heat.record_deltas(shard_id, name, now, count)
        made = 0
        for name in self.rules:
            switches = list(known.get(name, ()))
            if switches and switches[-1] > now:
                continue  # a switch is still to come: wait for it
            if not self.wants_switch(shard_id, name, moved_at(switches, now), now):
                continue
            at = next_switch_seconds(now) if self.requests is not None else int(now)
            if self._persist(shard_id, name, switches, at):
                made += 1
        self.switches += made
        return made

    def hot_at_start(self, batch: BatchDeltas, created_seconds: Iterable[Decimal]) -> set[str]:
        """The ``auto`` rules a shard's first batch shows hot: at least
        :data:`START_HOT_DELTAS_PER_SECOND` per-record deltas a second of the records'
        creation times (``batch`` evaluated without routing), times the rule's partition key
        values for all its deltas, not for those of its busiest aggregate (one key is on one
        value)."""
        times = [int(t) for t in created_seconds]
        seconds = max(times) - min(times) + 1 if times else 1
        deltas = _deltas_by_rule(batch)
        busiest = _busiest_by_rule(batch)
        line = self.start_hot_deltas_per_second
        return {
            r
            for r, n in deltas.items()
            if n / seconds >= self._start_line(r) or busiest.get(r, 0) / seconds >= line
        }

    def _start_line(self, rule: str) -> float:
        """The deltas a second at which ``rule`` starts (or goes) hot: the start line times its
        partition key values."""
        return self.start_hot_deltas_per_second * max(1, self.spreads.get(rule, 1))

    def wants_switch(self, shard_id: str, rule: str, hot: bool, now: float) -> bool:
        """Whether ``shard_id`` should switch ``rule`` now. A cold shard goes hot when the heat
        meter's estimate of the partition's load rises above :attr:`hot_wcu_per_second`, or
        its own deltas a second reach :attr:`start_hot_deltas_per_second`; a hot one goes cold
        when both fall low: the estimate (with the aggregate's size and writers as last seen)
        below :attr:`cool_wcu_per_second` and its deltas below a tenth of the start line.
        (Tests override it: any answer is safe.)"""
        rate = self.heat.estimate(shard_id, rule, now, self.spreads.get(rule, 1))
        deltas = self.heat.deltas_per_second(shard_id, rule, now)
        line = self._start_line(rule)
        if hot:
            return rate < self.cool_wcu_per_second and deltas < line / COOL_DELTAS_FRACTION
        return rate > self.hot_wcu_per_second or deltas >= line

    def _persist(self, shard_id: str, rule: str, switches: list[int], at: int) -> bool:
        made, read = self._read.get((shard_id, rule), (None, list(switches)))
        kept = list(read if self.requests is not None else switches)  # the list the count goes with
        horizon = at - SWITCH_HORIZON_SECONDS
        while len(kept) >= 2 and kept[1] < horizon:
            kept = kept[2:]  # a pair that no deliverable record is past: parity unchanged
        if self.requests is None:
            self._memory.setdefault(shard_id, {})[rule] = [*kept, at]
            return True
        count = COUNT_PREFIX + rule
        update = (
            Update()
            .set(SWITCHES_PREFIX + rule, {"L": [{"N": str(s)} for s in (*kept, at)]})
            .set(count, {"N": str((made or 0) + 1)})
            .set(self.layout.ttl_attribute, {"N": str(at + ROUTING_RETENTION_SECONDS)})
        )
        if made is None:
            update = update.where_missing(count)
        else:
            update = update.where_equals(count, {"N": str(made)})
        self.modelled_wcu += 1
        try:
            self.requests.send(
                "update_item", TableName=self.table_name, Key=self._key(shard_id), **update.render()
            )
        except (ClientError, BotoCoreError):
            # a lost condition: another invocation of the shard decided first, and what it
            # stored stands; anything else: decided again after the next batch
            return False
        self._read[(shard_id, rule)] = ((made or 0) + 1, [*kept, at])
        return True
