"""A backfill's scan of one ``Scan`` segment (:mod:`aggregator.operations.backfill`, steps 2 and
3): pages read, each counted once its stream lag has passed, stored with the digests of its
items, added to the segment's carry, and the carry applied at the segment's last page or when
full; a killed segment resumes after its last stored page."""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from aggregator.core.batch_state import decode_batch, encode_batch
from aggregator.core.deltas import NO_AMOUNTS, AggregateRef, Amounts, BatchDeltas, add_amounts
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.core.records import Image
from aggregator.dynamodb.sizes import item_size
from aggregator.operations.backfill.control import ControlItems
from aggregator.operations.backfill.stats import BackfillStats, RateLimiter
from aggregator.operations.backfill.stream import ChangedItems, item_digest

if TYPE_CHECKING:
    from aggregator.dynamodb.client import RequestClient

__all__ = ["MAX_PAGE_RECORD_BYTES", "Carry", "ScanningBackfill", "SegmentScan", "read_units"]

MAX_PAGE_RECORD_BYTES = 350 * 1024
"""A page's stored amounts and digests must fit one item with room for its key and other
attributes (DynamoDB Developer Guide, "Service quotas": items are at most 400 KB)."""

Page = tuple[float, list[dict[str, Any]], dict[str, Any] | None]
"""A page read but not yet counted: ``(read at (monotonic seconds), items, next key)``."""


class Carry:
    """A segment's amounts counted since they were last applied: per aggregate sort key, the
    aggregate and its amounts; ``since`` is the first page they come from."""

    def __init__(self, since: int) -> None:
        self.since = since
        self.entries: dict[str, tuple[AggregateRef, Amounts]] = {}

    def add(self, batch: BatchDeltas) -> None:
        """Add a page's coalesced amounts (as stored: a batch of its deltas)."""
        for sort_key, delta in batch.deltas.items():
            ref, amounts = self.entries.get(sort_key, (delta.ref, NO_AMOUNTS))
            self.entries[sort_key] = (ref, add_amounts(amounts, (delta.amount, delta.count)))

    def amounts(self) -> dict[AggregateRef, Amounts]:
        return dict(self.entries.values())

    def restart(self, since: int) -> None:
        """Empty, from page ``since`` on (the carry was applied)."""
        self.since = since
        self.entries = {}


class ScanningBackfill(Protocol):
    """What a segment's scan uses of its backfill (a :class:`~aggregator.operations.backfill.
    Backfill`): its settings, figures, control items, and how it counts and applies amounts."""

    requests: RequestClient
    table_name: str
    layout: TableLayout
    segments: int
    page_items: int
    stream_lag_seconds: float
    carry_pages: int
    carry_keys: int
    on_page: Callable[[int, BackfillStats], None] | None
    read_limiter: RateLimiter
    stats: BackfillStats
    stats_lock: threading.Lock
    control: ControlItems

    def contributions(self, image: Image | None) -> dict[AggregateRef, Amounts]: ...

    def apply(self, batch: BatchDeltas, pseudo_shard: str) -> None: ...

    def batch(self, amounts: dict[AggregateRef, Amounts], sequence: int) -> BatchDeltas: ...


class SegmentScan:
    """Scans one segment to its end (:meth:`run`), from where a killed run of this backfill
    stopped.

    Parameters
    ----------
    backfill
        The backfill (:class:`ScanningBackfill`).
    segment
        The segment's number (``Segment``).
    changed
        The items changed after their fences, read from the stream (a page's item with one
        counts its first post-fence state).
    digests
        Receives the digests of the items the segment's pages returned.
    """

    def __init__(
        self, backfill: ScanningBackfill, segment: int, changed: ChangedItems, digests: set[bytes]
    ) -> None:
        self.b = backfill
        self.segment = segment
        self.changed = changed
        self.digests = digests
        self.pseudo = f"backfill.{backfill.stats.backfill_id}.{segment}"
        """The carry's pseudo-shard: its checkpoint on every aggregate it writes."""

    def _key(self, what: str) -> str:
        return f"backfill#{self.b.stats.backfill_id}#{what}"

    def run(self) -> None:
        """Scan the segment to its end (resuming it)."""
        progress = self.b.control.get(self._key(f"segment#{self.segment}")) or {}
        page = int(progress.get("page", {}).get("N", "0"))  # pages counted and stored
        start = json.loads(progress["next_key"]["S"]) if "next_key" in progress else None
        # the first page of the carry not yet applied (progress of earlier releases, which
        # applied every page, has none)
        carry = Carry(int(progress.get("since", {}).get("N", str(page + 1))))
        self._load_pages(page, carry)
        if progress.get("done", {}).get("BOOL"):
            return
        stored = self.b.control.get(self._key(f"page#{self.segment}#{page + 1}"))
        if stored is not None:  # stored before a kill, its progress not saved: resume it
            page, start = self._resume_page(page + 1, stored, carry)
        if page > 0 and start is None:  # the last page is in, and its carry applied
            self._save(page, None, done=True, since=carry.since)
            return
        self._scan(page, start, carry)

    def _scan(self, page: int, start: dict[str, Any] | None, carry: Carry) -> None:
        """Read pages from ``start`` and count each once its stream lag has passed."""
        # pages read but not yet counted, oldest first; the scan reads on while the oldest
        # page waits out the stream lag
        waiting: deque[Page] = deque()
        scanning = True
        lag = self.b.stream_lag_seconds
        while scanning or waiting:
            if scanning:
                items, start = self._read(start)
                waiting.append((time.monotonic(), items, start))
                scanning = start is not None
                self._charge(items)
            ready_at = waiting[0][0] + lag
            if scanning and time.monotonic() < ready_at:
                continue
            delay = ready_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            # a page counts only against a stream read that began after its lag had passed
            pumped_at = time.monotonic()
            self.changed.pump()
            self.b.control.renew_lease(self.b.stats.backfill_id)
            while waiting and waiting[0][0] + lag <= pumped_at:
                _, items, next_key = waiting.popleft()
                page += 1
                self._count_page(page, items, next_key, carry)

    def _read(
        self, start: dict[str, Any] | None
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """One ``Scan`` page of the segment (strongly consistent) from ``start``: its items and
        the next page's start."""
        kwargs: dict[str, Any] = {
            "TableName": self.b.table_name,
            "ConsistentRead": True,
            "Segment": self.segment,
            "TotalSegments": self.b.segments,
            "Limit": self.b.page_items,
        }
        if start:
            kwargs["ExclusiveStartKey"] = start
        response = self.b.requests.send("scan", **kwargs)
        return response.get("Items", []), response.get("LastEvaluatedKey")

    def _charge(self, items: list[dict[str, Any]]) -> None:
        """Count a page's modelled RCU, and wait as the read rate limit needs."""
        rcu = read_units(items)
        self.b.read_limiter.take(float(rcu))
        with self.b.stats_lock:
            self.b.stats.modelled_rcu += rcu

    def _count_page(
        self,
        page: int,
        items: list[dict[str, Any]],
        next_key: dict[str, Any] | None,
        carry: Carry,
    ) -> None:
        """Count one page whose stream lag has passed: store it, add it to the carry (applied
        at the segment's last page, or when full: :mod:`aggregator.operations.backfill`, step
        3), move the segment on."""
        amounts, page_digests, first_old_used = self._count(items)
        batch = self.b.batch(amounts, page)
        carry.add(batch)
        flush = (
            not next_key
            or len(carry.entries) >= self.b.carry_keys
            or page - carry.since + 1 >= self.b.carry_pages
        )
        packed_digests = zlib.compress(b"".join(page_digests))
        packed_deltas = zlib.compress(encode_batch(batch).encode("utf-8"))
        record = {
            "digests": {"B": packed_digests},
            "deltas": {"B": packed_deltas},
            "next_key": {"S": json.dumps(next_key) if next_key else ""},
            "items": {"N": str(len(items))},
            "since": {"N": str(carry.since)},
            "flush": {"BOOL": flush},
        }
        size = len(packed_digests) + len(packed_deltas)
        if size > MAX_PAGE_RECORD_BYTES:
            raise ConfigError(
                f"a page of {len(items)} items makes a {size:,}-byte progress record, over "
                f"{MAX_PAGE_RECORD_BYTES:,} (DynamoDB items are at most 400 KB): run the "
                "backfill again with fewer items per page (--page-items)"
            )
        self.b.control.put(self._key(f"page#{self.segment}#{page}"), record)
        if flush:
            self.b.apply(self.b.batch(carry.amounts(), page), self.pseudo)
            carry.restart(page + 1)
        self._save(page, next_key, done=not next_key, since=carry.since)
        self.digests.update(page_digests)
        with self.b.stats_lock:
            self.b.stats.items_scanned += len(page_digests)  # the application's items
            self.b.stats.pages += 1
            self.b.stats.first_old_used += first_old_used
        if self.b.on_page is not None:
            self.b.on_page(len(items), self.b.stats)

    def _count(
        self, items: list[dict[str, Any]]
    ) -> tuple[dict[AggregateRef, Amounts], list[bytes], int]:
        """A page's amounts: each item's first post-fence state if the stream has one, else its
        scanned state; with the digests of the items and how many used the stream's."""
        layout = self.b.layout
        amounts: dict[AggregateRef, Amounts] = {}
        page_digests: list[bytes] = []
        first_old_used = 0
        names = [n for n in (layout.partition_key, layout.sort_key) if n]
        for item in items:
            keys = {k: item[k] for k in names if k in item}
            if layout.is_reserved(keys):
                continue
            digest = item_digest(keys, layout)
            page_digests.append(digest)
            with self.changed.lock:
                old = self.changed.first_old.get(digest)
            if old is not None:
                first_old_used += 1
                found = old
            else:
                found = self.b.contributions(Image(item))
            for ref, found_amounts in found.items():
                amounts[ref] = add_amounts(amounts.get(ref, NO_AMOUNTS), found_amounts)
        return amounts, page_digests, first_old_used

    def _resume_page(
        self, page: int, stored: dict[str, Any], carry: Carry
    ) -> tuple[int, dict[str, Any] | None]:
        """A page stored before a kill whose segment progress was not saved: add it to the
        carry and, if the carry was to be applied at it, apply it (again: the checkpoint skips
        the items already at this page). Pages of earlier releases have no ``flush``: each was
        applied on its own."""
        carry.add(_stored_batch(stored))
        if stored.get("flush", {"BOOL": True})["BOOL"]:
            self.b.apply(self.b.batch(carry.amounts(), page), self.pseudo)
            carry.restart(page + 1)
        text = stored["next_key"]["S"]
        start = json.loads(text) if text else None
        self._save(page, start, since=carry.since)
        self.digests.update(_stored_digests(stored))
        return page, start

    def _load_pages(self, pages: int, carry: Carry) -> None:
        """On resuming a segment: the digests of its stored pages, and the amounts of those of
        its carry (``carry.since`` on), which were stored but not applied."""
        for page in range(1, pages + 1):
            stored = self.b.control.get(self._key(f"page#{self.segment}#{page}"))
            if stored is None:
                continue
            self.digests.update(_stored_digests(stored))
            if page >= carry.since:
                carry.add(_stored_batch(stored))

    def _save(
        self, page: int, start: dict[str, Any] | None, *, since: int, done: bool = False
    ) -> None:
        """Store the segment's progress: pages counted, where the scan goes on, the carry's
        first page."""
        attributes: dict[str, Any] = {
            "page": {"N": str(page)},
            "done": {"BOOL": done},
            "since": {"N": str(since)},
        }
        if start:
            attributes["next_key"] = {"S": json.dumps(start)}
        self.b.control.put(self._key(f"segment#{self.segment}"), attributes)


def _stored_batch(stored: dict[str, Any]) -> BatchDeltas:
    """The amounts a page record stores (a batch of its deltas)."""
    return decode_batch(zlib.decompress(stored["deltas"]["B"]).decode("utf-8"))


def _stored_digests(stored: dict[str, Any]) -> list[bytes]:
    """The digests of the items of a page record (16 bytes each)."""
    raw = zlib.decompress(stored["digests"]["B"])
    return [raw[i : i + 16] for i in range(0, len(raw), 16)]


def read_units(items: list[dict[str, Any]]) -> Decimal:
    """Modelled RCU of a strongly consistent ``Scan`` page: 1 per started 4 KB of the items
    read (Developer Guide, "Read consumption": a Scan is charged on the total size of the items
    it reads, rounded up to 4 KB)."""
    size = sum(item_size(item) for item in items)
    return Decimal(max(1, -(-size // 4096)))
