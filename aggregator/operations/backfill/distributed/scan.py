"""The ``scan`` task: one invocation's share of one ``Scan`` segment (:func:`scan_segment`)."""

from __future__ import annotations

import json
import time
from typing import Any

from aggregator.core.records import Image
from aggregator.operations.backfill.distributed.flushing import FlushBuffer
from aggregator.operations.backfill.distributed.job import Job, new_attempt
from aggregator.operations.backfill.segments import read_units
from aggregator.operations.backfill.stats import RateLimiter
from aggregator.operations.backfill.stream import item_digest

__all__ = ["scan_segment"]


def scan_segment(job: Job, segment: int, *, stop_at: float) -> bool:
    """Scan segment ``segment`` from where its last committed flush left it until it ends or
    the monotonic clock passes ``stop_at``; returns whether the segment is done.

    Each flush (the carry holds ``carry_keys`` aggregates, or ``flush_items`` item entries,
    or the segment ends, or time is up) writes the amounts for the reducers and the items'
    entries for the joins, then commits the scan's position. A killed invocation's uncommitted
    pages are read again by the next one; its records are never read.
    """
    settings = job.settings
    writer = f"s{segment}"
    progress = job.progress(writer)
    if progress.done:
        return True
    attempt = new_attempt()
    limiter = RateLimiter(settings.max_rcu / settings.workers if settings.max_rcu else None)
    state = dict(progress.state)
    start: dict[str, Any] | None = json.loads(state["next"]) if state.get("next") else None
    names = job.layout.key_attributes
    while True:
        buffer = FlushBuffer(job, "scanned")
        items = pages = 0
        rcu = 0
        while True:
            request: dict[str, Any] = {
                "TableName": job.table_name,
                "ConsistentRead": True,
                "Segment": segment,
                "TotalSegments": settings.segments,
                "Limit": settings.page_items,
            }
            if start:
                request["ExclusiveStartKey"] = start
            response = job.requests.send("scan", **request)
            page = response.get("Items", [])
            start = response.get("LastEvaluatedKey")
            units = read_units(page)
            limiter.take(float(units), until=stop_at)
            rcu += int(units)
            pages += 1
            for item in page:
                keys = {n: item[n] for n in names if n in item}
                if job.layout.is_reserved(keys):
                    continue
                items += 1
                contribution = job.contributions(Image(item))
                if contribution:
                    buffer.add_amounts(contribution)
                    buffer.add_entry(item_digest(keys, job.layout), contribution)
            if (
                not start
                or len(buffer.amounts) >= settings.carry_keys
                or buffer.entry_count >= settings.flush_items
                or time.monotonic() >= stop_at
            ):
                break
        buffer.write(writer, len(progress.attempts), attempt)
        state = {
            "next": json.dumps(start) if start else "",
            "items": int(state.get("items", 0)) + items,
            "pages": int(state.get("pages", 0)) + pages,
            "rcu": int(state.get("rcu", 0)) + rcu,
            "failures": int(state.get("failures", 0)) + job.evaluation_failures,
        }
        job.evaluation_failures = 0
        if not job.commit(writer, progress, attempt, state, done=not start):
            return False  # another invocation moved the segment on: the next call resumes there
        job.add_stats(items=items, pages=pages, rcu=rcu, segments_done=int(not start))
        if not start:
            return True
        if time.monotonic() >= stop_at:
            return False
