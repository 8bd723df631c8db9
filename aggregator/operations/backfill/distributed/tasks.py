"""The distributed backfill's Lambda tasks (:func:`run_task`): what the state machine invokes,
one event type of the framework's function (``{"aggregator_backfill": {"task": ...}}``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aggregator.core.clock import Clock
from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.streams import TableStream
from aggregator.operations.backfill.distributed.collector import collect
from aggregator.operations.backfill.distributed.job import Job
from aggregator.operations.backfill.distributed.join import join_bucket_task
from aggregator.operations.backfill.distributed.reduce import reduce_bucket_task
from aggregator.operations.backfill.distributed.scan import scan_segment
from aggregator.operations.backfill.distributed.start import (
    DEFAULT_CARRY_KEYS,
    DEFAULT_FLUSH_ITEMS,
    DEFAULT_PAGE_ITEMS,
    finish_backfill,
    mark_scan_ended,
    start_backfill,
)

__all__ = ["EVENT_KEY", "TASKS", "run_task", "stop_time"]

EVENT_KEY = "aggregator_backfill"
"""The key of a backfill task's event (the stream handler's events have ``Records``)."""
TASKS = ("start", "collect", "scan", "scan_end", "join", "reduce", "finish")
RESERVE_SECONDS = 60.0
"""Time an invocation keeps for its last flush and commit (at most a fifth of its time)."""


def stop_time(remaining_seconds: float) -> float:
    """The monotonic time after which a task reads no more: ``remaining_seconds`` less the
    reserve for its last flush (:data:`RESERVE_SECONDS`, or a fifth of the time if less)."""
    return time.monotonic() + remaining_seconds - min(RESERVE_SECONDS, remaining_seconds / 5)


def run_task(
    request: Mapping[str, Any],
    *,
    rules: RuleSet,
    table: TableStream,
    remaining_seconds: float,
    clock: Clock = time.time,
) -> dict[str, Any]:
    """Run one task of a distributed backfill (the event's ``aggregator_backfill`` object).

    Parameters
    ----------
    request
        ``{"task": <one of TASKS>, "backfill_id": ..., "segment" | "bucket": n}``; ``start``
        takes the execution's input instead (``backfill_id``: the backfill to resume, as
        ``aggregator backfill --on-aws`` gives it, or ``null`` to begin one with ``rules``,
        ``segments``, ``join_buckets``, ``reduce_buckets``, ``workers``, ``max_rcu``,
        ``stream_lag_seconds``; and, optional, ``page_items``, ``carry_keys``, ``flush_items``);
        ``collect`` takes ``until_fenced`` (return once the shards are fenced).
    rules, table
        The function's rules and its table with the stream.
    remaining_seconds
        Time left in the invocation (Lambda's ``get_remaining_time_in_millis`` / 1000).

    Returns
    -------
    dict
        ``start``: ``{"backfill_id", "segments": [0..], "join_buckets": [0..],
        "reduce_buckets": [0..], "workers", "resumed"}``; ``collect``: ``{"done", "fenced"}``;
        the others ``{"done"}``; ``finish`` also ``{"summary"}``.

    Raises
    ------
    ConfigError
        For an unknown task, a missing field, or what the task raises (its message says what to
        do); the state machine's execution fails with it.
    """
    task = request.get("task")
    if task not in TASKS:
        raise ConfigError(f"unknown backfill task {task!r}: expected one of {', '.join(TASKS)}")
    stop_at = stop_time(remaining_seconds)
    if task == "start" and request.get("backfill_id"):  # the one the CLI began: resume it
        settings, resumed = (
            Job(rules, table, str(request["backfill_id"]), clock=clock).settings,
            True,
        )
    elif task == "start":
        settings, resumed = start_backfill(
            rules,
            table,
            rule_names=request.get("rules") or None,
            segments=int(request.get("segments", 64)),
            join_buckets=int(request.get("join_buckets", 16)),
            reduce_buckets=int(request.get("reduce_buckets", 16)),
            workers=int(request.get("workers", 16)),
            max_rcu=float(request["max_rcu"]) if request.get("max_rcu") else None,
            stream_lag_seconds=float(request.get("stream_lag_seconds", 5.0)),
            page_items=int(request.get("page_items", DEFAULT_PAGE_ITEMS)),
            carry_keys=int(request.get("carry_keys", DEFAULT_CARRY_KEYS)),
            flush_items=int(request.get("flush_items", DEFAULT_FLUSH_ITEMS)),
            clock=clock,
        )
    if task == "start":
        return {
            "backfill_id": settings.backfill_id,
            "segments": list(range(settings.segments)),
            "join_buckets": list(range(settings.join_buckets)),
            "reduce_buckets": list(range(settings.reduce_buckets)),
            "workers": settings.workers,
            "resumed": resumed,
        }
    try:
        backfill_id = str(request["backfill_id"])
    except KeyError:
        raise ConfigError(f"backfill task {task!r} needs a backfill_id") from None
    job = Job(rules, table, backfill_id, clock=clock)
    if task == "collect":
        outcome = collect(job, stop_at=stop_at, until_fenced=bool(request.get("until_fenced")))
        return {"done": outcome.done, "fenced": outcome.fenced}
    if task == "scan":
        return {"done": scan_segment(job, _number(request, "segment"), stop_at=stop_at)}
    if task == "scan_end":
        mark_scan_ended(job)
        return {"done": True}
    if task == "join":
        return {"done": join_bucket_task(job, _number(request, "bucket"), stop_at=stop_at)}
    if task == "reduce":
        return {"done": reduce_bucket_task(job, _number(request, "bucket"), stop_at=stop_at)}
    return {"done": True, "summary": finish_backfill(job)}


def _number(request: Mapping[str, Any], name: str) -> int:
    try:
        return int(request[name])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(
            f"backfill task {request.get('task')!r} needs a number {name!r}"
        ) from None
