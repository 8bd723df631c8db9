"""Rebuild: build a changed rule's aggregates as a new generation while readers keep using the
old one, then switch readers in one write.

Steps (:class:`Rebuild`; every step can be repeated, so a killed rebuild is run again):

1. **Request** a generation of the rule with its new definition (``requested``, storage name
   ``<rule>@<generation>``: :mod:`aggregator.core.lifecycle`). Only now may a handler start with
   the new definition: the manifest refuses a changed definition that no rebuild asked for.
2. **Deploy** the new definition (the user's step). The first handler or ``aggregator run`` that
   starts with it takes the generation up (``pending``) and counts the records after its fences
   into it. The old generation is no longer counted by handlers running the new definition: from
   the deployment to the switch, readers see its values as of the deployment (complete, not
   current). A handler still running the old definition keeps counting it.
3. **Backfill** the new generation (:mod:`aggregator.operations.backfill`), exactly, while the
   application writes.
4. **Switch** readers: one conditional ``UpdateItem`` of the manifest sets the rule's serving
   generation and retires the old one, only if the new one is active and the old one still
   serves. :class:`~aggregator.dynamodb.query.AggregateStore` reads the pointer (one ``GetItem``
   per ``generation_cache_seconds``), so a query reads one generation, never a mix; the old
   generation stays intact until ``aggregator drop-rule`` deletes it
   (:mod:`aggregator.operations.drop`).

Not supported: rebuilding a derived rule or the source of one (refused).

**Spreading aggregates** (``table: aggregate_partitions``, or a rule's ``partitions``) changes
where a rule's aggregates live, so it is a new definition rebuilt like any other: the new
generation is written spread, the manifest records each generation's ``partitions``, and readers
read the old generation where it is (unspread) until the switch (docs: Scaling, "Moving a live
table to spread aggregates").

**The leaderboard flag** is not part of the fingerprint (it changes no value), so turning it on
or off builds no generation: the handler indexes (or stops indexing) the aggregates it updates
from the deployment on, and the manifest keeps the flag the existing aggregates were written
under. While the two differ, ``AggregateStore.top`` reads every aggregate and sorts them (exact,
and a read of the whole rule), and ``aggregator status`` names this command; ``rebuild`` then
**re-indexes** the serving generation in place (:func:`reindex_leaderboard`: one conditional
``UpdateItem`` per aggregate, setting or removing its index attribute) and records the flag.

Costs: those of the backfill, plus three small writes to the manifest; after the switch a stream
record costs what it did before (the new generation is an ordinary rule under another name).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

from aggregator.core.clock import Clock
from aggregator.core.exceptions import ConfigError, RuleError
from aggregator.core.layout import leaderboard_partition
from aggregator.core.lifecycle import (
    RuleState,
    generation_name,
    generation_of,
    generations_of,
    index_stale,
    rule_fingerprint,
)
from aggregator.core.rules import Rule, RuleSet
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.collections import query_collections
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.updates import Update
from aggregator.operations.backfill import Backfill, BackfillStats

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["Rebuild", "RebuildResult", "reindex_leaderboard"]

DEFAULT_WAIT_SECONDS = 3600.0
"""How long :meth:`Rebuild.run` waits, by default, for a handler to start with the new
definition."""


@dataclass(slots=True)
class RebuildResult:
    """What :meth:`Rebuild.run` did.

    Attributes
    ----------
    rule
        The rule.
    outcome
        ``unchanged`` (readers already use a generation with this definition), ``reindexed``
        (the same, and its leaderboard index was rewritten for the definition's flag:
        ``reindexed`` aggregates), ``deploy-first`` (the same, but the handler still runs the
        old leaderboard flag: deploy the new one, then run again), ``requested`` (the new
        generation waits for a handler with its definition; run again after deploying) or
        ``switched`` (built and serving).
    serving, target
        Storage names of the generation readers used before, and of the one built.
    backfill
        The backfill's figures, when one ran.
    """

    rule: str
    outcome: Literal["unchanged", "reindexed", "deploy-first", "requested", "switched"]
    serving: str
    target: str
    backfill: BackfillStats | None = None
    reindexed: int = 0


@dataclass(frozen=True, slots=True)
class _DeploymentWait:
    """How :meth:`Rebuild.run` waits for a handler to take a requested generation up
    (:class:`Rebuild`'s ``wait_seconds``, ``poll_seconds``, ``on_wait`` and ``sleep``)."""

    seconds: float
    poll_seconds: float
    on_wait: Callable[[str, float], None] | None
    sleep: Callable[[float], None]

    def until_taken_up(
        self, target: RuleState, load: Callable[[], Mapping[str, RuleState]]
    ) -> RuleState:
        """``target`` as ``load`` (:meth:`~aggregator.dynamodb.manifest.Manifest.load`) reads
        it once it is no longer ``requested``, or after ``seconds`` (still ``requested`` then);
        ``on_wait`` is called before each pause."""
        waited = 0.0
        while target.status == "requested" and waited < self.seconds:
            if self.on_wait is not None:
                self.on_wait(target.name, waited)
            pause = min(self.poll_seconds, self.seconds - waited)
            self.sleep(pause)
            waited += pause
            target = load().get(target.name, target)
        return target


class Rebuild:
    """Rebuild one rule from its new definition in ``rules`` (module docstring).

    Parameters
    ----------
    rules
        The rule set with the new definition (the one being deployed).
    table
        The table and its stream, with a client for each
        (:class:`~aggregator.dynamodb.streams.TableStream`).
    rule_name
        The rule to rebuild.
    wait_seconds
        How long to wait for a handler to take the requested generation up (0: return at once
        with ``outcome="requested"``).
    poll_seconds
        Manifest reads while waiting are this far apart.
    on_wait
        Called with the requested generation's storage name and the seconds waited so far,
        before each wait.
    backfill_options
        Passed to :class:`~aggregator.operations.backfill.Backfill` (``segments``, ``max_rcu``,
        ``page_items``, ``on_page``, ...).

    Raises
    ------
    ConfigError
        On construction, for an unknown rule, a derived rule or the source of one, or a rule the
        table does not know (a new rule is backfilled, not rebuilt).
    """

    def __init__(
        self,
        rules: RuleSet,
        table: TableStream,
        rule_name: str,
        *,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        poll_seconds: float = 5.0,
        on_wait: Callable[[str, float], None] | None = None,
        clock: Clock = time.time,
        sleep: Callable[[float], None] = time.sleep,
        **backfill_options: Any,
    ) -> None:
        try:
            self.rule = rules.get(rule_name)
        except RuleError as exc:
            raise ConfigError(str(exc)) from None
        if self.rule.is_derived or rules.derived_from(rule_name):
            raise ConfigError(
                f"rule {rule_name!r} is derived, or the source of a derived rule: such rules "
                "have one generation; deploy the changed rule under a new name instead (if only "
                "its spread changed with the table's aggregate_partitions, give it partitions: 1)"
            )
        self.rules = rules
        self.table = table
        self.deployment_wait = _DeploymentWait(wait_seconds, poll_seconds, on_wait, sleep)
        self.clock = clock
        self.backfill_options = backfill_options
        self.manifest = Manifest(table.client, table.table_name, rules.layout)

    def serving(self) -> str:
        """The storage name of the generation readers use now.

        Raises
        ------
        ConfigError
            When the table has no generation of the rule.
        """
        states, serving = self.manifest.load_all()
        if not generations_of(self.rule.name, states):
            raise ConfigError(
                f"rule {self.rule.name!r} is not deployed: a new rule is backfilled "
                "(`aggregator backfill`), not rebuilt"
            )
        return generation_name(self.rule.name, serving.get(self.rule.name, 1))

    def run(self) -> RebuildResult:
        """Request, wait for the deployment, backfill, switch (module docstring); each step is
        skipped when already done.

        Raises
        ------
        ConfigError
            From the backfill, or when another process switched the rule meanwhile.
        """
        name = self.rule.name
        serving = self.serving()
        states = self.manifest.load()
        current = states.get(serving)
        if current is not None and current.fingerprint == rule_fingerprint(self.rule):
            if not index_stale(self.rule, current):
                return RebuildResult(name, "unchanged", serving, serving)
            if current.handler_leaderboard != self.rule.leaderboard:
                # aggregates the handler updates meanwhile would miss the index (or gain it)
                return RebuildResult(name, "deploy-first", serving, serving)
            count = reindex_leaderboard(
                self.table.client,
                self.table.table_name,
                self.rules,
                self.rule,
                serving,
                partitions=current.partitions,
            )
            self.manifest.set_leaderboard(serving, self.rule.leaderboard)
            return RebuildResult(name, "reindexed", serving, serving, reindexed=count)
        target = self.manifest.request_generation(self.rule, now=self.clock())
        target = self.deployment_wait.until_taken_up(target, self.manifest.load)
        if target.status == "requested":
            return RebuildResult(name, "requested", serving, target.name)
        stats = None
        if target.status in ("pending", "backfilling"):
            backfill = Backfill(
                self.rules,
                self.table,
                rule_names=[name],
                clock=self.clock,
                **self.backfill_options,
            )
            stats = backfill.run()
        switched = self.manifest.switch(name, serving, target.name, now=self.clock())
        if not switched and self.serving() != target.name:
            raise ConfigError(
                f"rule {name!r}: readers could not be switched from {serving} to "
                f"{target.name} (another process changed the rule's generations); run the "
                "rebuild again"
            )
        return RebuildResult(name, "switched", serving, target.name, stats)


def generation_label(storage_name: str) -> str:
    """``"generation 2 (delay@2)"``: how messages name a generation."""
    number = generation_of(storage_name)[1]
    return f"generation {number} ({storage_name})"


def reindex_leaderboard(
    client: DynamoDBClient,
    table_name: str,
    rules: RuleSet,
    rule: Rule,
    storage_name: str,
    *,
    partitions: int | None = None,
) -> int:
    """Give every existing aggregate of generation ``storage_name`` of ``rule`` the leaderboard
    index attribute the handler writes for ``rule`` (``rule.leaderboard``), or remove it (the
    flag off); returns the number of aggregates updated.

    One ``UpdateItem`` per aggregate, conditional on the item existing (a ``drop-rule`` under
    way is not undone); idempotent, and safe beside the handler: the attribute is a function of
    the rule and the sort key (and a time bucket's granularity and start), never of the value.
    Reads the rule's aggregates a page at a time under every partition key value the
    generation spreads them over (``partitions``, as its manifest entry records it; default the
    definition's: :func:`~aggregator.dynamodb.collections.query_collections`), and updates each
    under its own key.

    Raises
    ------
    aggregator.dynamodb.errors.AwsError
        As DynamoDB raises it (a conditional failure is a dropped aggregate, skipped).
    """
    layout = rules.layout
    requests = requests_of(client)
    count = 0
    spread = rule.spread if partitions is None else partitions
    for page in query_collections(
        requests.send,
        table_name,
        layout,
        layout.aggregate_partitions_of(spread),
        begins_with=f"{storage_name}#",
    ):
        for item in page:
            sort_key = layout.sort_key_of(item) or ""
            update = Update()
            if rule.leaderboard:
                bucket = (
                    None
                    if rule.window is None
                    else f"{item['granularity']['S']}#{item['bucket']['S']}"
                )
                partition = leaderboard_partition(
                    storage_name, sort_key, rule.leaderboard_partitions, bucket
                )
                update = update.set(layout.leaderboard_attribute, {"S": partition})
            else:
                update = update.remove(layout.leaderboard_attribute)
            update = update.where_exists(layout.partition_key)
            try:
                requests.send(
                    "update_item",
                    TableName=table_name,
                    Key=layout.key_of(item),  # where it is, spread or not
                    **update.render(),
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                continue
            count += 1
    return count
