"""The state of every rule on a table (``aggregator status``): what the manifest says of each
generation, which generation readers use, the fences, a backfill's progress, the dead letters,
and the next command to run.

Reads, all under the control and dead-letters partitions: one strongly consistent ``GetItem``
of the manifest, a ``Query`` of the control partition's fences (``fence#...``), one per running
backfill for its segments (``backfill#<id>#...``), and a ``Query`` of the dead letters (1 MB a
page; :mod:`aggregator.dynamodb.collections` on a table without a sort key).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from aggregator.core.lifecycle import (
    RuleState,
    generation_of,
    generations_of,
    index_stale,
    live_generation,
    rule_fingerprint,
)
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.collections import client_call, query_collection
from aggregator.dynamodb.deadletters import list_dead_letters
from aggregator.dynamodb.manifest import Manifest

__all__ = ["BackfillProgress", "GenerationStatus", "RuleReport", "TableStatus", "table_status"]


@dataclass(frozen=True, slots=True)
class BackfillProgress:
    """A backfill's progress: ``segments_done`` of ``segments`` finished, ``pages`` read so
    far (all segments)."""

    backfill_id: str
    segments: int
    segments_done: int
    pages: int


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

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON data (the ``--json`` shape)."""
        return asdict(self)


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


def _fenced_shards(client: Any, table_name: str, rules: RuleSet) -> Counter[str]:
    """Shards fenced per storage name."""
    layout = rules.layout
    counts: Counter[str] = Counter()
    for page in query_collection(
        client_call(client), table_name, layout, layout.control_pk, begins_with="fence#"
    ):
        for item in page:
            counts.update(item.get("after", {}).get("M", {}).keys())
    return counts


def _backfill(client: Any, table_name: str, rules: RuleSet, backfill_id: str) -> BackfillProgress:
    layout = rules.layout
    segments = 0
    done = 0
    pages = 0
    prefix = f"backfill#{backfill_id}#"
    for page in query_collection(
        client_call(client), table_name, layout, layout.control_pk, begins_with=prefix
    ):
        for item in page:
            name = (layout.sort_key_of(item) or "").removeprefix(prefix)
            if name == "meta":
                segments = int(item.get("segments", {}).get("N", "0"))
            elif name.startswith("segment#"):
                done += bool(item.get("done", {}).get("BOOL"))
                pages += int(item.get("page", {}).get("N", "0"))
    return BackfillProgress(backfill_id, segments, done, pages)


def _next_command(report: RuleReport, table_name: str) -> str:
    t = f"--table {table_name}"
    if report.definition == "removed":
        return f"aggregator drop-rule {report.rule} {t} (deploy without it first)"
    if report.definition == "new":
        return "deploy the rules (sam deploy), or aggregator run: the rule registers as pending"
    if report.definition == "changed":
        return f"aggregator rebuild {report.rule} {t}"
    states = {g.generation: g for g in report.generations}
    building = states[report.builds] if report.builds is not None else None
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
        return f"aggregator backfill {t}"
    if report.builds is not None and report.builds != report.serving:
        return f"aggregator rebuild {report.rule} {t} (switches readers)"
    if building is not None and building.index_stale:
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
    if any(g.status in ("retired", "dropping") for g in report.generations):
        return f"aggregator drop-rule {report.rule} {t} (deletes the retired generations)"
    if report.dead_letters:
        return f"aggregator dead-letters {t}"
    return ""


def table_status(
    rules: RuleSet, client: Any, table_name: str, *, dead_letters: bool = True
) -> TableStatus:
    """Every rule's state on ``table_name`` (module docstring).

    Parameters
    ----------
    rules
        The rule files' rules: each is reported, with the rules the table holds generations of
        that the files no longer name.
    dead_letters
        Count the dead letters per rule (a ``Query`` of all of them).

    Raises
    ------
    botocore.exceptions.ClientError
        As DynamoDB raises it.
    """
    states, serving = Manifest(client, table_name, rules.layout).load_all()
    fenced = _fenced_shards(client, table_name, rules) if states else Counter()
    letters: Counter[str] = Counter()
    if dead_letters:
        letters.update(d.rule for d in list_dead_letters(client, table_name, layout=rules.layout))
    progress: dict[str, BackfillProgress] = {}
    for s in states.values():
        if s.status == "backfilling" and s.backfill_id and s.backfill_id not in progress:
            progress[s.backfill_id] = _backfill(client, table_name, rules, s.backfill_id)

    def generations(name: str) -> list[GenerationStatus]:
        rule = next((r for r in rules if r.name == name), None)
        out = []
        for s in generations_of(name, states):
            g = _generation(s, fenced, letters, progress)
            if rule is not None and s.fingerprint == rule_fingerprint(rule):
                g = replace(g, index_stale=index_stale(rule, s))
            out.append(g)
        return out

    families: Counter[str] = Counter()
    for name, count in letters.items():
        families[generation_of(name)[0]] += count
    reports = []
    for r in rules:
        live = live_generation(r, states)
        family = generations_of(r.name, states)
        definition = "built" if live is not None else ("changed" if family else "new")
        report = RuleReport(
            rule=r.name,
            definition=definition,
            builds=generation_of(live.name)[1] if live is not None else None,
            serving=serving.get(r.name, 1),
            generations=generations(r.name),
            dead_letters=families.get(r.name, 0),
        )
        report.next = _next_command(report, table_name)
        source = states.get(r.source) if r.source is not None else None
        if (
            live is not None
            and live.status == "pending"
            and source is not None
            and (source.status == "active")
        ):
            # backfill refuses it: its input is the source's changes, and those that made the
            # source's existing aggregates are gone
            report.next = (
                f"none can complete it: a derived rule counts the changes of {r.source!r} "
                "from its deployment on, and deriving from existing aggregates is not "
                "supported yet; deploy it with a copy of its source under a new name and "
                "backfill the two together"
            )
        reports.append(report)
    named = {r.name for r in rules}
    for rule_name in sorted({generation_of(n)[0] for n in states} - named):
        report = RuleReport(
            rule=rule_name,
            definition="removed",
            builds=None,
            serving=serving.get(rule_name, 1),
            generations=generations(rule_name),
            dead_letters=families.get(rule_name, 0),
        )
        report.next = _next_command(report, table_name)
        reports.append(report)
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
