"""The ``start`` and ``finish`` tasks: a distributed backfill begun (its rules chosen and
checked, marked ``backfilling`` under a new id, or the one under way resumed) and ended (top
lists settled, the rules ``active``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from aggregator.core.clock import Clock
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import RuleState, changed_definitions, resolved_rules
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.fences import FenceStore
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.streams import TableStream
from aggregator.operations.backfill.distributed.collector import COLLECTOR
from aggregator.operations.backfill.distributed.job import Job, Settings
from aggregator.operations.backfill.distributed.join import segment_writers
from aggregator.operations.backfill.distributed.reduce import join_writers
from aggregator.operations.backfill.selection import check_states, select_rules
from aggregator.operations.top_list_check import settle_top_lists

__all__ = [
    "DEFAULT_CARRY_KEYS",
    "DEFAULT_FLUSH_ITEMS",
    "DEFAULT_PAGE_ITEMS",
    "MAX_BUCKETS",
    "MAX_ITEMS",
    "MAX_SEGMENTS",
    "check_fences",
    "finish_backfill",
    "start_backfill",
]

MAX_SEGMENTS = 20_000
"""Most ``TotalSegments`` (DynamoDB allows 1,000,000: API Reference, ``Scan``): the state machine
carries the lists of segments and buckets in its state, at most 256 KiB (Step Functions
Developer Guide, "Step Functions service quotas"), so they hold at most :data:`MAX_ITEMS`
numbers in all."""
MAX_BUCKETS = 10_000
"""Join and reduce tasks each: the Distributed Map's default bound on child executions running
at once is 10,000 (Step Functions Developer Guide, "Map state in Distributed mode")."""
MAX_ITEMS = 30_000
"""Most segments, join buckets and reduce buckets in all (about 200 KB of numbers in the state's
256 KiB)."""
DEFAULT_PAGE_ITEMS = 1000
DEFAULT_CARRY_KEYS = 20_000
DEFAULT_FLUSH_ITEMS = 50_000


def start_backfill(
    rules: RuleSet,
    table: TableStream,
    *,
    rule_names: Iterable[str] | None = None,
    segments: int = 64,
    join_buckets: int = 16,
    reduce_buckets: int = 16,
    workers: int = 16,
    max_rcu: float | None = None,
    stream_lag_seconds: float = 5.0,
    page_items: int = DEFAULT_PAGE_ITEMS,
    carry_keys: int = DEFAULT_CARRY_KEYS,
    flush_items: int = DEFAULT_FLUSH_ITEMS,
    clock: Clock = time.time,
) -> tuple[Settings, bool]:
    """Begin a distributed backfill of ``rule_names`` (default: every pending rule), or resume
    the one under way (its settings stand); returns its settings and whether it resumes.

    Raises
    ------
    ConfigError
        As :class:`~aggregator.operations.backfill.Backfill` refuses rules (unknown, not
        deployed, active, pending for over 23 hours, counted without fences, a derived rule
        without its source, a changed definition, rules fenced at different points); when a
        setting is out of range; when the backfill under way runs in one process.
    """
    for name, value, high in (
        ("segments", segments, MAX_SEGMENTS),
        ("join_buckets", join_buckets, MAX_BUCKETS),
        ("reduce_buckets", reduce_buckets, MAX_BUCKETS),
        ("workers", workers, MAX_BUCKETS),
    ):
        if not 1 <= value <= high:
            raise ConfigError(f"{name} must be 1 to {high:,}, got {value}")
    items = segments + join_buckets + reduce_buckets
    if items > MAX_ITEMS:
        raise ConfigError(
            f"segments, join buckets and reduce buckets are {items:,} in all, over "
            f"{MAX_ITEMS:,} (the state machine carries their lists in 256 KiB)"
        )
    manifest = Manifest(table.client, table.table_name, rules.layout)
    states = manifest.load()
    try:
        resolved = resolved_rules(rules, states)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    renamed = {r.name: s.name for r, s in zip(rules, resolved, strict=True)}
    changed = [n for n in changed_definitions(rules, states) if n in (rule_names or renamed)]
    if changed:
        raise ConfigError(
            f"rule(s) {', '.join(changed)}: the definition differs from every generation in "
            "the table; run `aggregator rebuild` to build it as a new generation"
        )
    names = None if rule_names is None else [renamed.get(n, n) for n in rule_names]
    selection = select_rules(resolved, states, names)
    chosen = {n: states[n] for n in (*selection.base, *selection.carried)}
    check_states(chosen, clock())
    ids = {s.backfill_id for s in chosen.values() if s.status == "backfilling"}
    pending = [n for n, s in chosen.items() if s.status == "pending"]
    if len(ids) == 1:
        backfill_id = str(next(iter(ids)))
        settings = Job(rules, table, backfill_id, clock=clock).settings
        if pending and sorted({*settings.rules, *settings.carried}) == sorted(chosen):
            # a start killed while it marked the rules: mark the rest under its id
            _mark(manifest, chosen, pending, backfill_id)
        elif pending:
            ids.add("")  # some of another backfill, some not: refused below
        if not pending:
            return settings, True
    if len(ids) > 1 or (ids and pending):
        raise ConfigError(
            f"rules {', '.join(sorted(chosen))}: some are being backfilled already, some not; "
            "backfill them apart"
        )
    if ids:
        return Job(rules, table, str(next(iter(ids))), clock=clock).settings, True
    check_fences(table, rules.layout, selection.base)
    settings = Settings(
        backfill_id=uuid.uuid4().hex[:12],
        rules=tuple(selection.base),
        carried=tuple(selection.carried),
        segments=segments,
        join_buckets=join_buckets,
        reduce_buckets=reduce_buckets,
        workers=workers,
        max_rcu=max_rcu,
        stream_lag_seconds=stream_lag_seconds,
        page_items=page_items,
        carry_keys=carry_keys,
        flush_items=flush_items,
    )
    meta = {**settings.to_item(), "started_at": {"N": str(int(clock()))}}
    fields = rules.layout.control_fields(f"backfill#{settings.backfill_id}#meta")
    table.client.put_item(
        TableName=table.table_name, Item={**{k: {"S": v} for k, v in fields.items()}, **meta}
    )
    _mark(manifest, chosen, pending, settings.backfill_id)
    return settings, False


def _mark(
    manifest: Manifest, states: dict[str, RuleState], names: list[str], backfill_id: str
) -> None:
    """Mark the pending rules ``names`` ``backfilling`` under ``backfill_id``.

    Raises
    ------
    ConfigError
        When one changed state meanwhile (another backfill started).
    """
    for name in names:
        state = replace(states[name], status="backfilling", backfill_id=backfill_id)
        if not manifest.set_state(state, expected_status="pending"):
            raise ConfigError(f"rule {name!r}: another backfill started meanwhile")


def check_fences(table: TableStream, layout: TableLayout, rule_names: list[str]) -> None:
    """Refuse rules that a handler fenced at different points in a shard (deployed at different
    times): one backfill counts one state per item, at one fence per shard (as the local
    backfill refuses them, before anything is begun).

    Raises
    ------
    ConfigError
        For the first such shard.
    """
    store = FenceStore(table.client, table.table_name, layout)
    for shard in table.source.shards():
        fences = {r: f.after for r, f in store.get(shard["ShardId"]).items() if r in rule_names}
        if fences and (len(set(fences.values())) > 1 or len(fences) != len(rule_names)):
            raise ConfigError(
                f"rules {', '.join(sorted(rule_names))} were fenced at different points in "
                f"shard {shard['ShardId']} (deployed at different times): backfill them apart, "
                "with --rules"
            )


def mark_scan_ended(job: Job) -> None:
    """Record that every segment is done (the collector's cue for its last pass).

    Raises
    ------
    ConfigError
        When a segment is not done.
    """
    segments = job.progresses(segment_writers(job))
    if not all(p.done for p in segments.values()):
        raise ConfigError(f"backfill {job.backfill_id}: the scan has segments not done")
    if job.get(job.key("ended")) is None:
        job.put(job.key("ended"), {"at": {"N": str(int(job.clock()))}})


def finish_backfill(job: Job) -> dict[str, Any]:
    """Settle the rules' top lists and mark the rules ``active``; returns the backfill's
    figures (the ``summary`` of the ``finish`` task). Running it again changes nothing.

    Raises
    ------
    ConfigError
        When a reducer is not done, or a rule changed state meanwhile.
    """
    settings = job.settings
    reducers = job.get_many([job.key("reduce", b) for b in range(settings.reduce_buckets)])
    if len(reducers) != settings.reduce_buckets or not all(
        json.loads(item["state"]["S"]).get("done") for item in reducers.values()
    ):
        raise ConfigError(f"backfill {job.backfill_id}: finish before every reducer is done")
    names = [*settings.rules, *settings.carried]
    written, unsettled = settle_top_lists(
        job.table.client, job.table_name, job.rules, names, clock=job.clock
    )
    states = job.manifest.load()
    now = int(job.clock())
    # derived rules first: a kill before the base rules are marked leaves them backfilling
    for name in sorted(names, key=lambda n: n not in settings.carried):
        state = states.get(name)
        if state is None or state.status == "active":
            continue
        if not job.manifest.set_state(
            replace(state, status="active", active_since=now), expected_status="backfilling"
        ):
            raise ConfigError(f"rule {name!r} changed state during the backfill")
    return summary(job, top_lists_written=written, top_lists_unsettled=unsettled)


def summary(job: Job, **extra: Any) -> dict[str, Any]:
    """The backfill's figures so far, from its control items: segments done, items scanned,
    read units, the collector's records and changes, the joins' changed items."""
    settings = job.settings
    segments = job.progresses(segment_writers(job))
    joins = job.progresses(join_writers(job))
    collector = job.progress(COLLECTOR)
    return {
        "backfill_id": job.backfill_id,
        "rules": list(settings.rules),
        "segments": settings.segments,
        "segments_done": sum(p.done for p in segments.values()),
        "items_scanned": sum(int(p.state.get("items", 0)) for p in segments.values()),
        "modelled_rcu": sum(int(p.state.get("rcu", 0)) for p in segments.values()),
        "evaluation_failures": sum(int(p.state.get("failures", 0)) for p in segments.values())
        + int(collector.state.get("failures", 0)),
        "stream_records_read": int(collector.state.get("records", 0)),
        "changes": int(collector.state.get("changes", 0)),
        "changed_items": sum(int(p.state.get("changed_items", 0)) for p in joins.values()),
        "joins_done": sum(p.done for p in joins.values()),
        **extra,
    }
