"""The backfill itself (:class:`Backfill`, the protocol in :mod:`aggregator.operations.backfill`):
fences every shard, scans the segments in parallel threads (:mod:`~aggregator.operations.
backfill.segments`) beside the stream's reads (:mod:`~aggregator.operations.backfill.stream`),
applies the amounts with the exactly-once writer under checkpoints of its own, counts the
changed items the scan never returned, and marks the rules active."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from aggregator.core.clock import Clock
from aggregator.core.deltas import (
    NO_AMOUNTS,
    AggregateRef,
    Amounts,
    BatchDeltas,
    add_amounts,
)
from aggregator.core.engine import Engine
from aggregator.core.exceptions import ConfigError
from aggregator.core.lifecycle import Fence, changed_definitions, resolved_rules
from aggregator.core.records import Image
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.manifest import FenceStore, Manifest
from aggregator.dynamodb.modes import make_writer
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.targets import MAX_TARGET_CHECKPOINTS
from aggregator.operations.backfill.control import ControlItems
from aggregator.operations.backfill.distributed.entries import amounts_batch
from aggregator.operations.backfill.segments import SegmentScan
from aggregator.operations.backfill.selection import (
    STREAM_RETENTION_SECONDS,
    check_states,
    select_rules,
)
from aggregator.operations.backfill.stats import BackfillStats, RateLimiter
from aggregator.operations.backfill.stream import ChangedItems, fence_position, read_shard
from aggregator.operations.top_list_check import settle_top_lists

__all__ = [
    "DEFAULT_CARRY_KEYS",
    "DEFAULT_CARRY_PAGES",
    "DEFAULT_PAGE_ITEMS",
    "DEFAULT_STREAM_LAG_SECONDS",
    "MAX_SEGMENTS",
    "MAX_TARGET_SEGMENTS",
    "Backfill",
]

DEFAULT_STREAM_LAG_SECONDS = 5.0
MAX_SEGMENTS = 64
"""One thread per segment, and each segment's checkpoint on every aggregate item it writes (until
pruned after 25 hours): a bound on both."""
MAX_TARGET_SEGMENTS = MAX_TARGET_CHECKPOINTS // 4
"""Most segments of a backfill of a target rule (4): each segment writes the application items as a
shard of its own, taking an entry of their checkpoint map (at most ``MAX_TARGET_CHECKPOINTS``, 16,
shared with the stream's shards) for the checkpoint retention; more segments could evict a live
shard's entry within the retention, which would let a redelivered batch count twice."""
DEFAULT_PAGE_ITEMS = 200
"""Items per ``Scan`` page: small enough that a page's amounts and digests fit one control item
(400 KB) whatever the rules."""
DEFAULT_CARRY_PAGES = 1000
"""Most pages whose amounts a segment carries before applying them (:class:`Backfill`
``carry_pages``): a resumed segment reads the stored pages of its carry again."""
DEFAULT_CARRY_KEYS = 10_000
"""Most aggregate keys a segment's carry holds before it is applied (``carry_keys``): a bound on
the memory of each segment's thread."""


class Backfill:
    """Count the items already in the table for rules pending a backfill (the protocol:
    :mod:`aggregator.operations.backfill`).

    Parameters
    ----------
    rules
        The deployed rule set (its layout included).
    table
        The table and its stream, with a client for each
        (:class:`~aggregator.dynamodb.streams.TableStream`).
    rule_names
        The rules to backfill (default: every rule pending in the manifest). A derived rule goes
        with its source: it is not scanned for, since every change of its source's aggregates
        reaches it through the stream after its own fences, and it becomes active with them.
    segments
        Parallel ``Scan`` segments (``TotalSegments``), 1 to :data:`MAX_SEGMENTS` (to
        :data:`MAX_TARGET_SEGMENTS` with a target rule), one thread each. A resumed backfill must
        use the same number.
    max_rcu, max_wcu
        Rate limits in capacity units per second (modelled: 1 RCU per 4 KB of items read
        strongly consistently; the writer's modelled WCU), or ``None``.
    stream_lag_seconds
        How long a write may take to become readable from the stream
        (:mod:`aggregator.operations.backfill`, "Assumptions").
    page_items
        ``Limit`` of each ``Scan`` page.
    on_page
        Called after each counted page with ``(items on the page, stats)`` (progress bars; tests
        use it to interleave writes).
    carry_pages, carry_keys
        Apply a segment's carry after this many pages, or once it holds this many aggregate keys
        (:mod:`aggregator.operations.backfill`, step 3; defaults :data:`DEFAULT_CARRY_PAGES`,
        :data:`DEFAULT_CARRY_KEYS`); ``carry_pages=1`` applies every page.
    clock
        Epoch seconds.

    Raises
    ------
    ConfigError
        When ``segments`` is out of range, a rule is unknown, not in the manifest (the handler
        has not started with it), already active, counted without fences, pending for longer
        than the stream keeps records; a derived rule without its source; or rules fenced at
        different points.
    """

    def __init__(
        self,
        rules: RuleSet,
        table: TableStream,
        *,
        rule_names: Iterable[str] | None = None,
        segments: int = 4,
        max_rcu: float | None = None,
        max_wcu: float | None = None,
        stream_lag_seconds: float = DEFAULT_STREAM_LAG_SECONDS,
        page_items: int = DEFAULT_PAGE_ITEMS,
        on_page: Callable[[int, BackfillStats], None] | None = None,
        clock: Clock = time.time,
        carry_pages: int = DEFAULT_CARRY_PAGES,
        carry_keys: int = DEFAULT_CARRY_KEYS,
    ) -> None:
        if not 1 <= segments <= MAX_SEGMENTS:
            raise ConfigError(
                f"segments must be 1 to {MAX_SEGMENTS} in one process, got {segments} (more: "
                "aggregator backfill --on-aws)"
            )
        client, table_name = table.client, table.table_name
        self.manifest = Manifest(client, table_name, rules.layout)
        states = self.manifest.load()
        # each rule under the storage name of the generation its definition builds (a rebuild
        # backfills generation 2 or later, "<rule>@<generation>")
        try:
            self.rules = resolved_rules(rules, states)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        renamed = {r.name: s.name for r, s in zip(rules, self.rules, strict=True)}
        changed = [n for n in changed_definitions(rules, states) if n in (rule_names or renamed)]
        if changed:
            raise ConfigError(
                f"rule(s) {', '.join(changed)}: the definition differs from every generation in "
                "the table; run `aggregator rebuild` to build it as a new generation"
            )
        if rule_names is not None:
            rule_names = [renamed.get(n, n) for n in rule_names]
        self.layout = rules.layout
        self.table = table
        self.table_name = table_name
        self.requests = requests_of(client)
        self.segments = segments
        self.stream_lag_seconds = stream_lag_seconds
        self.page_items = page_items
        self.carry_pages = max(1, carry_pages)
        self.carry_keys = max(1, carry_keys)
        self.on_page = on_page
        self.clock = clock
        self.engine = Engine(self.rules)
        self.fence_store = FenceStore(client, table_name, self.layout)
        self.read_limiter = RateLimiter(max_rcu)
        self.write_limiter = RateLimiter(max_wcu)
        self.stats = BackfillStats()
        self.stats_lock = threading.Lock()
        """Guards :attr:`stats` (the segments' threads count into it)."""
        self.control = ControlItems(client, table_name, self.layout, clock)
        self._keys: set[str] = set()  # aggregate items written (this run)
        self._fences: dict[str, dict[str, str]] = {}
        selection = select_rules(self.rules, states, rule_names)
        self.rule_names = selection.base
        self.carried = selection.carried
        """Derived rules riding along with their sources (:func:`~aggregator.operations.
        backfill.selection.select_rules`)."""
        self.skipped = selection.skipped
        """Pending derived rules left out, each with the reason."""
        self.states = {n: states[n] for n in (*self.rule_names, *self.carried)}
        for backfill_id in {
            s.backfill_id for s in self.states.values() if s.status == "backfilling"
        }:
            meta = self.control.get(f"backfill#{backfill_id}#meta") or {}
            if meta.get("mode", {}).get("S") == "distributed":
                raise ConfigError(
                    f"backfill {backfill_id} runs on AWS (aggregator backfill --on-aws): "
                    "`aggregator status` shows its progress; start it again there if its "
                    "execution stopped"
                )
        targets = [n for n in self.rule_names if self.rules.get(n).target is not None]
        if targets and segments > MAX_TARGET_SEGMENTS:
            raise ConfigError(
                f"rule(s) {', '.join(targets)} keep their sums on the application's items, whose "
                f"checkpoint map holds {MAX_TARGET_CHECKPOINTS} entries shared by the stream's "
                f"shards and each backfill segment: give --segments {MAX_TARGET_SEGMENTS} or fewer"
            )
        self.writer = make_writer(
            "exactly-once", client, table_name, layout=self.layout, max_workers=8, clock=clock
        )

    def shard_fences(self, shard_id: str) -> dict[str, str]:
        """``{rule: after}`` of the backfilled rules in one shard (cached once complete)."""
        cached = self._fences.get(shard_id)
        if cached is not None:
            return cached
        fences = {r: f.after for r, f in self.fence_store.get(shard_id).items()}
        fences = {r: a for r, a in fences.items() if r in self.rule_names}
        if len(fences) == len(self.rule_names):
            self._fences[shard_id] = fences
        return fences

    def shards(self) -> list[dict[str, Any]]:
        """Every shard ``DescribeStream`` lists."""
        return self.table.source.shards()

    def read_shard(
        self, shard: dict[str, Any], iterators: dict[str, str | None], last: dict[str, str]
    ) -> Iterable[dict[str, Any]]:
        """One shard's records up to its bound (:func:`read_shard`)."""
        return read_shard(self.table.streams_client, self.table.stream_arn, shard, iterators, last)

    def _fence_all(self) -> None:
        """Step 1: fence every listed shard at the last record read from it (up to its bound,
        :func:`read_shard`), unless fenced already."""
        for shard in self.shards():
            end, _ = fence_position(self.table.streams_client, self.table.stream_arn, shard)
            self.fence_store.put_if_absent(
                [Fence(r, shard["ShardId"], end, "backfill") for r in self.rule_names]
            )

    def _check_fences(self) -> None:
        """Refuse rules that a handler fenced at different points (deployed at different
        times): one backfill counts one state per item, at one fence per shard."""
        for shard in self.shards():
            fences = self.shard_fences(shard["ShardId"])
            if fences and (len(set(fences.values())) > 1 or len(fences) != len(self.rule_names)):
                raise ConfigError(
                    f"rules {', '.join(sorted(self.rule_names))} were fenced at different points "
                    f"in shard {shard['ShardId']} (deployed at different times): backfill them "
                    "apart, with --rules"
                )

    # -- contributions -----------------------------------------------------------------------

    def contributions(self, image: Image | None) -> dict[AggregateRef, Amounts]:
        found, failed = self.engine.image_entries(image, self.rule_names, now=self.clock())
        if failed:
            with self.stats_lock:
                self.stats.evaluation_failures += len(failed)
        return found

    def apply(self, batch: BatchDeltas, pseudo_shard: str) -> None:
        """Write ``batch`` with the exactly-once writer as the pseudo-shard ``pseudo_shard``
        (its checkpoint), counting its figures and waiting as the write rate limit needs.

        Raises
        ------
        ConfigError
            When a write keeps failing (the backfill can be resumed).
        """
        if not batch.deltas:
            return
        result = self.writer.apply(batch, shard_id=pseudo_shard)
        if result.retry_from is not None:
            raise ConfigError(f"backfill write failed: {'; '.join(result.errors[:3])}")
        with self.stats_lock:
            self.stats.write.add(result.stats)
            self._keys.update(batch.deltas)
            self.stats.aggregate_keys = len(self._keys)
        self.write_limiter.take(float(result.stats.modelled_wcu))

    def batch(self, amounts: dict[AggregateRef, Amounts], sequence: int) -> BatchDeltas:
        """``amounts`` as a batch of coalesced deltas whose every sequence number is
        ``sequence`` (a page number: the carry's checkpoint)."""
        return amounts_batch(self.rules, amounts, sequence)

    # -- the whole -----------------------------------------------------------------------------

    def _begin(self) -> bool:
        """Mark the rules ``backfilling`` under one id (a new one, or the one under way, whose
        rules and segments must be these); take its lease. Returns whether this resumes."""
        ids = {s.backfill_id for s in self.states.values() if s.status == "backfilling"}
        pending = [n for n, s in self.states.items() if s.status == "pending"]
        if len(ids) > 1 or (ids and pending):
            raise ConfigError(
                f"rules {', '.join(sorted(self.states))}: some are being backfilled already "
                f"(ids {', '.join(sorted(str(i) for i in ids))}), some not; backfill them apart"
            )
        if ids:
            self.stats.backfill_id = str(next(iter(ids)))
            meta = self.control.get(f"backfill#{self.stats.backfill_id}#meta") or {}
            rules = sorted(meta.get("rules", {}).get("SS", []))
            segments = int(meta.get("segments", {}).get("N", "0"))
            if rules != sorted(self.states) or segments != self.segments:
                raise ConfigError(
                    f"backfill {self.stats.backfill_id} is under way for rules "
                    f"{','.join(rules)} with {segments} segments: resume it with --rules "
                    f"{','.join(rules)} --segments {segments}"
                )
            fenced = self.control.get(f"backfill#{self.stats.backfill_id}#fenced")
            if fenced and self.clock() - int(fenced["at"]["N"]) > STREAM_RETENTION_SECONDS - 3600:
                raise ConfigError(
                    f"backfill {self.stats.backfill_id} began over 23 hours ago: the stream no "
                    "longer holds the records it needs; deploy the rules under new names and "
                    "backfill those"
                )
            self.control.take_lease(self.stats.backfill_id)
            return True
        self.stats.backfill_id = uuid.uuid4().hex[:12]
        self.control.put(
            f"backfill#{self.stats.backfill_id}#meta",
            {
                "rules": {"SS": sorted(self.states)},
                "segments": {"N": str(self.segments)},
                "started_at": {"N": str(int(self.clock()))},
            },
        )
        self.control.take_lease(self.stats.backfill_id)
        for name in pending:
            state = replace(
                self.states[name], status="backfilling", backfill_id=self.stats.backfill_id
            )
            if not self.manifest.set_state(state, expected_status="pending"):
                raise ConfigError(f"rule {name!r}: another backfill started meanwhile")
            self.states[name] = state
        return False

    def run(self) -> BackfillStats:
        """Run (or resume) the backfill to the end; returns its figures.

        Raises
        ------
        ConfigError
            As the constructor; when another process runs this backfill; or when a write keeps
            failing (the backfill can be resumed).
        """
        started = time.monotonic()
        check_states(self.states, self.clock())
        self._check_fences()
        self.stats.resumed = self._begin()
        marker = f"backfill#{self.stats.backfill_id}#fenced"
        if not self.stats.resumed or self.control.get(marker) is None:
            self._fence_all()
            self.control.put(marker, {"at": {"N": str(int(self.clock()))}})
        changed = ChangedItems(self)
        changed.pump()
        per_segment: list[set[bytes]] = [set() for _ in range(self.segments)]
        with ThreadPoolExecutor(max_workers=self.segments) as pool:
            futures = [
                pool.submit(SegmentScan(self, s, changed, per_segment[s]).run)
                for s in range(self.segments)
            ]
            for future in futures:
                future.result()
        digests: set[bytes] = set().union(*per_segment)
        time.sleep(self.stream_lag_seconds)
        changed.pump()
        final: dict[AggregateRef, Amounts] = {}
        for digest, old in changed.first_old.items():
            if digest in digests:
                continue
            self.stats.unscanned_changed += 1
            for ref, old_amounts in old.items():
                final[ref] = add_amounts(final.get(ref, NO_AMOUNTS), old_amounts)
        self.apply(self.batch(final, 1), f"backfill.{self.stats.backfill_id}.final")
        # the top lists of the backfilled aggregates: the handler merges their records a moment
        # later (a local run perhaps much later); written now, top is exact once they are active
        self.stats.top_lists_written, self.stats.top_lists_unsettled = settle_top_lists(
            self.table.client, self.table_name, self.rules, list(self.states), clock=self.clock
        )
        now = int(self.clock())
        # derived rules first: a kill before the base rules are marked leaves them backfilling,
        # and running again finishes the same backfill (its final step applies once)
        for name in sorted(self.states, key=lambda n: n not in self.carried):
            done = replace(self.states[name], status="active", active_since=now)
            if not self.manifest.set_state(done, expected_status="backfilling"):
                raise ConfigError(f"rule {name!r} changed state during the backfill")
        self.stats.changed_items = len(changed.first_old)
        self.stats.stream_records_read = changed.records
        self.stats.elapsed_seconds = time.monotonic() - started
        self.writer.close()
        return self.stats
