"""The state of every rule on a table (``aggregator status``): what the manifest says of each
generation, which generation readers use, the fences, a backfill's progress, the dead letters,
and the next command to run.

Reads, all under the control and dead-letters partitions: one strongly consistent ``GetItem``
of the manifest, a ``Query`` of the fences (``fence#...``), one per running backfill for its
segments (``backfill#<id>#...``), one of the routing items with ``write_shards: auto`` rules,
each of those once per partition key value the control items spread over
(:func:`~aggregator.dynamodb.control.query_control`), and a ``Query`` of the dead letters (1 MB a
page; :mod:`aggregator.dynamodb.collections` on a table without a sort key).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import (
    RuleState,
    generation_name,
    generation_of,
    generations_of,
    index_stale,
    live_generation,
    rule_fingerprint,
)
from aggregator.core.routing import moved_at
from aggregator.core.rules import Rule, RuleSet
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.collections import client_call
from aggregator.dynamodb.control import query_control
from aggregator.dynamodb.deadletters import list_dead_letters
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.routing import ROUTING_PREFIX, item_switches, routing_sort_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = [
    "AutoRouting",
    "BackfillProgress",
    "GenerationStatus",
    "RuleReport",
    "TableStatus",
    "table_status",
]


@dataclass(frozen=True, slots=True)
class BackfillProgress:
    """A backfill's progress: ``segments_done`` of ``segments`` finished, ``pages`` read so
    far (all segments). A backfill on AWS (``on_aws``,
    :mod:`aggregator.operations.backfill.distributed`) also counts the items scanned, the
    stream records its collector read and the changes among them, and its join and reduce
    tasks done (of ``join_buckets`` and ``reduce_buckets``); its figures are added after each
    commit, so an invocation killed between the two leaves them a little short."""

    backfill_id: str
    segments: int
    segments_done: int
    pages: int
    on_aws: bool = False
    items: int = 0
    stream_records: int = 0
    changes: int = 0
    join_buckets: int = 0
    joins_done: int = 0
    reduce_buckets: int = 0
    reduces_done: int = 0

    def text(self) -> str:
        """The progress as ``aggregator status`` shows it."""
        if not self.on_aws:
            return f"{self.segments_done}/{self.segments} segments, {self.pages} pages"
        return (
            f"on AWS: {self.segments_done:,}/{self.segments:,} segments, {self.items:,} items, "
            f"{self.stream_records:,} stream records read ({self.changes:,} changes), joins "
            f"{self.joins_done:,}/{self.join_buckets:,}, reduces "
            f"{self.reduces_done:,}/{self.reduce_buckets:,}"
        )


@dataclass(frozen=True, slots=True)
class GenerationStatus:
    """One generation of a rule as the manifest holds it (``storage_name``: ``rule`` or
    ``rule@<n>``), with the shards fenced for it and its dead letters. ``leaderboard`` is the
    flag its existing aggregates were written under; ``index_stale`` says that the rule files'
    flag differs (the leaderboard index lacks, or keeps, their entries)."""

    storage_name: str
    generation: int
    status: str
    fingerprint: str
    registered_at: int
    active_since: int | None
    unfenced: bool
    fenced_shards: int
    dead_letters: int
    backfill: BackfillProgress | None = None
    leaderboard: bool | None = None
    index_stale: bool = False
    handler_leaderboard: bool | None = None


@dataclass(slots=True)
class RuleReport:
    """A rule of the rule files, or one the table still has that the files no longer name.

    ``definition`` is ``built`` (a generation was built with this definition), ``new`` (no
    generation yet: nothing deployed the rule), ``changed`` (generations exist, none with this
    definition: it changed without a rebuild), ``removed`` (in the table, not in the rule
    files). ``builds`` is the generation the definition builds, ``serving`` the one readers use.
    ``dead_letters`` counts the rule's dead letters, every generation's. ``next`` is the
    command to run, or ``""`` when nothing is to do.
    """

    rule: str
    definition: str
    builds: int | None
    serving: int
    generations: list[GenerationStatus] = field(default_factory=list)
    dead_letters: int = 0
    next: str = ""
    auto_routing: AutoRouting | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON data (the ``--json`` shape)."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AutoRouting:
    """Where ``write_shards: auto`` sends a rule's writes now
    (:mod:`aggregator.dynamodb.routing`): of the ``shards`` whose routing items name the
    generation the handlers write (the one its definition builds, else the serving one), how
    many write its partials (``on_partials``). ``shards`` counts the stream's open shards when
    they are known (:func:`table_status`'s ``open_shards``), else every unexpired routing item:
    a closed shard keeps its item for 30 days."""

    shards: int
    on_partials: int


@dataclass(slots=True)
class TableStatus:
    """Every rule's report, and the dead letters of rules neither the files nor the manifest
    name (by rule)."""

    table: str
    rules: list[RuleReport]
    other_dead_letters: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        """``{"table", "rules": [...], "other_dead_letters"}``."""
        return {
            "table": self.table,
            "rules": [r.to_json() for r in self.rules],
            "other_dead_letters": dict(self.other_dead_letters),
        }


def _fenced_shards(client: DynamoDBClient, table_name: str, rules: RuleSet) -> Counter[str]:
    """Shards fenced per storage name."""
    layout = rules.layout
    counts: Counter[str] = Counter()
    for page in query_control(client_call(client), table_name, layout, begins_with="fence#"):
        for item in page:
            counts.update(item.get("after", {}).get("M", {}).keys())
    return counts


def _backfill(
    client: DynamoDBClient, table_name: str, rules: RuleSet, backfill_id: str
) -> BackfillProgress:
    layout = rules.layout
    meta = _control_item(client, table_name, layout, f"backfill#{backfill_id}#meta")
    if meta.get("mode", {}).get("S") == "distributed":
        return _distributed_backfill(client, table_name, layout, backfill_id, meta)
    segments = 0
    done = 0
    pages = 0
    prefix = f"backfill#{backfill_id}#"
    for page in query_control(client_call(client), table_name, layout, begins_with=prefix):
        for item in page:
            name = (layout.sort_key_of(item) or "").removeprefix(prefix)
            if name == "meta":
                segments = int(item.get("segments", {}).get("N", "0"))
            elif name.startswith("segment#"):
                done += bool(item.get("done", {}).get("BOOL"))
                pages += int(item.get("page", {}).get("N", "0"))
    return BackfillProgress(backfill_id, segments, done, pages)


def _control_item(
    client: DynamoDBClient, table_name: str, layout: TableLayout, sort_key: str
) -> dict[str, Any]:
    """A control item (strongly consistent ``GetItem``), or ``{}``."""
    item: dict[str, Any] = (
        requests_of(client)
        .send(
            "get_item",
            TableName=table_name,
            Key=layout.control_key(sort_key),
            ConsistentRead=True,
        )
        .get("Item", {})
    )
    return item


def _distributed_backfill(
    client: DynamoDBClient,
    table_name: str,
    layout: TableLayout,
    backfill_id: str,
    meta: dict[str, Any],
) -> BackfillProgress:
    """A backfill on AWS: its settings (meta item) and figures (``#stats``): two reads, however
    many segments."""
    settings = json.loads(meta["settings"]["S"])
    stats = _control_item(client, table_name, layout, f"backfill#{backfill_id}#stats")

    def count(name: str) -> int:
        return int(stats.get(name, {}).get("N", "0"))

    return BackfillProgress(
        backfill_id,
        int(settings["segments"]),
        count("segments_done"),
        count("pages"),
        on_aws=True,
        items=count("items"),
        stream_records=count("stream_records"),
        changes=count("changes"),
        join_buckets=int(settings["join_buckets"]),
        joins_done=count("joins_done"),
        reduce_buckets=int(settings["reduce_buckets"]),
        reduces_done=count("reduces_done"),
    )


def _definition_command(report: RuleReport, t: str) -> str:
    """The command for a rule whose definition no generation builds (removed, new or changed),
    ``""`` for a built one."""
    if report.definition == "removed":
        return f"aggregator drop-rule {report.rule} {t} (deploy without it first)"
    if report.definition == "new":
        return "deploy the rules (sam deploy), or aggregator run: the rule registers as pending"
    if report.definition == "changed":
        return f"aggregator rebuild {report.rule} {t}"
    return ""


def _build_command(
    report: RuleReport,
    states: dict[int, GenerationStatus],
    building: GenerationStatus | None,
    t: str,
) -> str:
    """The command that takes the generation the definition builds up, backfills it or switches
    readers to it, ``""`` when it is built and serving."""
    if building is not None and building.status == "requested":
        return "deploy the new definition: a handler running it takes the generation up"
    if building is not None and building.unfenced:
        return (
            "the handler counted this rule without fences (no tumbling windows): no backfill "
            f"can be exact; aggregator reconcile --repair --rules {report.rule} {t}"
        )
    if building is not None and building.status in ("pending", "backfilling"):
        if report.builds != report.serving and report.serving in states:
            return f"aggregator rebuild {report.rule} {t} (backfills it, then switches readers)"
        if building.backfill is not None and building.backfill.on_aws:
            return (
                "wait for its execution; if it stopped (or never started): aggregator backfill "
                f"--on-aws {t}"
            )
        return f"aggregator backfill {t}"
    if report.builds is not None and report.builds != report.serving:
        return f"aggregator rebuild {report.rule} {t} (switches readers)"
    return ""


def _index_command(report: RuleReport, building: GenerationStatus | None, t: str) -> str:
    """The command that brings the leaderboard index in line with the rule files' flag, ``""``
    when it is."""
    if building is None or not building.index_stale:
        return ""
    if building.handler_leaderboard != (not building.leaderboard):
        return (
            "deploy the rule files (the handler runs the old leaderboard flag), then "
            f"aggregator rebuild {report.rule} {t}"
        )
    action = "removes the index entries of" if building.leaderboard else "indexes"
    return (
        f"aggregator rebuild {report.rule} {t} (the leaderboard flag changed: {action} the "
        "existing aggregates)"
    )


def _cleanup_command(report: RuleReport, t: str) -> str:
    """The command that deletes retired generations or lists dead letters, ``""`` when there
    are neither."""
    if any(g.status in ("retired", "dropping") for g in report.generations):
        return f"aggregator drop-rule {report.rule} {t} (deletes the retired generations)"
    if report.dead_letters:
        return f"aggregator dead-letters {t}"
    return ""


def _next_command(report: RuleReport, table_name: str) -> str:
    """The first command to run for ``report``'s rule, ``""`` when nothing is to do."""
    t = f"--table {table_name}"
    if report.definition in ("removed", "new", "changed"):
        return _definition_command(report, t)
    states = {g.generation: g for g in report.generations}
    building = states[report.builds] if report.builds is not None else None
    return (
        _build_command(report, states, building, t)
        or _index_command(report, building, t)
        or _cleanup_command(report, t)
    )


@dataclass(frozen=True, slots=True)
class _TableRead:
    """What :func:`table_status` reads of a table: the manifest's generations (by storage
    name) and serving generations (by rule), the shards fenced and the dead letters per storage
    name, and each running backfill's progress (by backfill id)."""

    rules: RuleSet
    states: dict[str, RuleState]
    serving: dict[str, int]
    fenced: Counter[str]
    letters: Counter[str]
    progress: dict[str, BackfillProgress]
    routing: dict[str, AutoRouting]


def _dead_letter_counts(
    client: DynamoDBClient, table_name: str, rules: RuleSet, dead_letters: bool
) -> Counter[str]:
    """Dead letters per storage name (none counted unless ``dead_letters``)."""
    letters: Counter[str] = Counter()
    if dead_letters:
        letters.update(d.rule for d in list_dead_letters(client, table_name, layout=rules.layout))
    return letters


def _backfills(
    client: DynamoDBClient, table_name: str, rules: RuleSet, states: dict[str, RuleState]
) -> dict[str, BackfillProgress]:
    """The progress of each backfill a ``backfilling`` generation runs, by backfill id."""
    progress: dict[str, BackfillProgress] = {}
    for s in states.values():
        if s.status == "backfilling" and s.backfill_id and s.backfill_id not in progress:
            progress[s.backfill_id] = _backfill(client, table_name, rules, s.backfill_id)
    return progress


def _read_table(
    rules: RuleSet,
    client: DynamoDBClient,
    table_name: str,
    dead_letters: bool,
    open_shards: Collection[str] | None = None,
    now: float | None = None,
) -> _TableRead:
    """The manifest, fences, dead letters and backfill progress of ``table_name``, read in
    that order."""
    states, serving = Manifest(client, table_name, rules.layout).load_all()
    fenced = _fenced_shards(client, table_name, rules) if states else Counter()
    letters = _dead_letter_counts(client, table_name, rules, dead_letters)
    progress = _backfills(client, table_name, rules, states)
    routing = (
        _auto_routing(client, table_name, rules, now, open_shards)
        if any(r.auto_shards for r in rules)
        else {}
    )
    return _TableRead(rules, states, serving, fenced, letters, progress, routing)


def _auto_routing(
    client: DynamoDBClient,
    table_name: str,
    rules: RuleSet,
    now: float | None = None,
    open_shards: Collection[str] | None = None,
) -> dict[str, AutoRouting]:
    """Per storage name, the shards whose routing items name it and how many of them write its
    partials at ``now`` (default: the time of the call): the ``open_shards`` only when given,
    and never an item past its TTL (DynamoDB deletes those within days, not at once)."""
    at = time.time() if now is None else now
    tokens = None if open_shards is None else {routing_sort_key(s) for s in open_shards}
    shards: Counter[str] = Counter()
    on_partials: Counter[str] = Counter()
    layout = rules.layout
    for page in query_control(client_call(client), table_name, layout, begins_with=ROUTING_PREFIX):
        for item in page:
            expires = item.get(layout.ttl_attribute, {}).get("N")
            if expires is not None and int(Decimal(expires)) < at:
                continue
            if tokens is not None and layout.sort_key_of(item) not in tokens:
                continue
            for name, switches in item_switches(item).items():
                shards[name] += 1
                on_partials[name] += moved_at(switches, at)
    return {name: AutoRouting(count, on_partials[name]) for name, count in shards.items()}


def _generations(read: _TableRead, name: str) -> list[GenerationStatus]:
    """The generations of the rule ``name``, each flagged ``index_stale`` when it has the rule
    files' definition and their leaderboard flag differs."""
    rule = next((r for r in read.rules if r.name == name), None)
    out = []
    for s in generations_of(name, read.states):
        g = _generation(s, read.fenced, read.letters, read.progress)
        if rule is not None and s.fingerprint == rule_fingerprint(rule):
            g = replace(g, index_stale=index_stale(rule, s))
        out.append(g)
    return out


def _families(letters: Counter[str]) -> Counter[str]:
    """Dead letters per rule: every generation's letters counted under the rule's name."""
    families: Counter[str] = Counter()
    for name, count in letters.items():
        families[generation_of(name)[0]] += count
    return families


def _derived_blocked(rule: Rule, live: RuleState | None, states: dict[str, RuleState]) -> bool:
    """Whether ``rule`` is a derived rule whose pending generation no backfill can complete: its
    source is active, and the changes that made the source's aggregates are gone."""
    source = states.get(rule.source) if rule.source is not None else None
    return (
        live is not None
        and live.status == "pending"
        and source is not None
        and (source.status == "active")
    )


def _rule_report(
    rule: Rule, read: _TableRead, families: Counter[str], table_name: str
) -> RuleReport:
    """The report of a rule the rule files name, with its next command."""
    live = live_generation(rule, read.states)
    family = generations_of(rule.name, read.states)
    definition = "built" if live is not None else ("changed" if family else "new")
    report = RuleReport(
        rule=rule.name,
        definition=definition,
        builds=generation_of(live.name)[1] if live is not None else None,
        serving=read.serving.get(rule.name, 1),
        generations=_generations(read, rule.name),
        dead_letters=families.get(rule.name, 0),
    )
    if rule.auto_shards:  # the generation the handlers write: the one the definition builds
        written = generation_name(rule.name, report.builds or report.serving)
        report.auto_routing = read.routing.get(written, AutoRouting(0, 0))
    report.next = _next_command(report, table_name)
    if _derived_blocked(rule, live, read.states):
        # backfill refuses it: its input is the source's changes, and those that made the
        # source's existing aggregates are gone
        report.next = (
            f"none can complete it: a derived rule counts the changes of {rule.source!r} "
            "from its deployment on, and deriving from existing aggregates is not "
            "supported yet; deploy it with a copy of its source under a new name and "
            "backfill the two together"
        )
    return report


def _removed_reports(read: _TableRead, families: Counter[str], table_name: str) -> list[RuleReport]:
    """The reports of the rules the table holds generations of that the rule files no longer
    name, by rule name."""
    named = {r.name for r in read.rules}
    reports = []
    for rule_name in sorted({generation_of(n)[0] for n in read.states} - named):
        report = RuleReport(
            rule=rule_name,
            definition="removed",
            builds=None,
            serving=read.serving.get(rule_name, 1),
            generations=_generations(read, rule_name),
            dead_letters=families.get(rule_name, 0),
        )
        report.next = _next_command(report, table_name)
        reports.append(report)
    return reports


def table_status(
    rules: RuleSet,
    client: DynamoDBClient,
    table_name: str,
    *,
    dead_letters: bool = True,
    open_shards: Collection[str] | None = None,
    now: float | None = None,
) -> TableStatus:
    """Every rule's state on ``table_name`` (module docstring).

    Parameters
    ----------
    rules
        The rule files' rules: each is reported, with the rules the table holds generations of
        that the files no longer name.
    dead_letters
        Count the dead letters per rule (a ``Query`` of all of them).
    open_shards
        The ids of the stream's open shards, to count only theirs in
        :attr:`RuleReport.auto_routing` (``None``: every unexpired routing item).
    now
        The time (epoch seconds) the routing is reported for; default the time of the call.

    Raises
    ------
    aggregator.dynamodb.errors.AwsError
        As DynamoDB raises it.
    """
    read = _read_table(rules, client, table_name, dead_letters, open_shards, now)
    families = _families(read.letters)
    reports = [_rule_report(r, read, families, table_name) for r in rules]
    reports += _removed_reports(read, families, table_name)
    reported = {r.rule for r in reports}
    other = {name: count for name, count in sorted(families.items()) if name not in reported}
    return TableStatus(table_name, reports, other)


def _generation(
    state: RuleState,
    fenced: Counter[str],
    letters: Counter[str],
    progress: dict[str, BackfillProgress],
) -> GenerationStatus:
    return GenerationStatus(
        storage_name=state.name,
        generation=generation_of(state.name)[1],
        status=state.status,
        fingerprint=state.fingerprint,
        registered_at=state.registered_at,
        active_since=state.active_since,
        unfenced=state.unfenced,
        fenced_shards=fenced.get(state.name, 0),
        dead_letters=letters.get(state.name, 0),
        backfill=progress.get(state.backfill_id or "") if state.status == "backfilling" else None,
        leaderboard=state.leaderboard,
        handler_leaderboard=state.handler_leaderboard,
    )
