"""A backfill's figures (:class:`BackfillStats`) and the rate limits of its reads and writes
(:class:`RateLimiter`)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal

from aggregator.dynamodb.write_stats import WriteStats

__all__ = ["BackfillStats", "RateLimiter"]


@dataclass(slots=True)
class BackfillStats:
    """Figures of one :meth:`Backfill.run <aggregator.operations.backfill.Backfill.run>` (all of
    it, resumed parts included where stored)."""

    backfill_id: str = ""
    items_scanned: int = 0
    pages: int = 0
    changed_items: int = 0
    first_old_used: int = 0
    unscanned_changed: int = 0
    evaluation_failures: int = 0
    stream_records_read: int = 0
    aggregate_keys: int = 0
    modelled_rcu: Decimal = Decimal(0)
    write: WriteStats = field(default_factory=WriteStats)
    elapsed_seconds: float = 0.0
    resumed: bool = False
    top_lists_written: int = 0
    """Top lists (``leaderboard_store: list``) written from the aggregates at the end
    (:func:`aggregator.operations.top_list_check.settle_top_lists`)."""
    top_lists_unsettled: int = 0
    """Top lists that still disagreed with their aggregates after that (the handler keeps
    changing them: it merges their records)."""


class RateLimiter:
    """At most ``per_second`` units per second (token bucket, shared by threads)."""

    def __init__(self, per_second: float | None) -> None:
        self.per_second = per_second
        self.lock = threading.Lock()
        self.available = per_second or 0.0
        self.at = time.monotonic()

    def take(self, units: float, *, until: float | None = None) -> None:
        """Spend ``units``, sleeping as long as the rate needs, but never past the monotonic time
        ``until`` (a task's deadline: the debt is then left to the next caller, or lost with
        the invocation)."""
        if not self.per_second:
            return
        with self.lock:
            now = time.monotonic()
            self.available = min(
                self.per_second, self.available + (now - self.at) * self.per_second
            )
            self.at = now
            self.available -= units
            wait = -self.available / self.per_second if self.available < 0 else 0.0
        if until is not None:
            wait = min(wait, until - time.monotonic())
        if wait > 0:
            time.sleep(wait)
