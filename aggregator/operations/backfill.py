"""Backfill: count the items already in the table for rules pending a backfill, exactly, while
the application keeps writing and the stream handler keeps running.

Protocol
--------
The handler counts a pending rule ``R`` in each stream shard only after the shard's *fence*
``F_S`` (:mod:`aggregator.dynamodb.manifest`). The backfill owes, for every item, ``R``'s
contribution of the item's state at the fence: the state before the item's first stream record
after it (``old_k``), or, for an item with no record after it, its current state. The handler's
deltas for the item then telescope: ``c(final) - c(old_k)``, so the sum is ``c(final)``.

1. **Fence** every shard the stream lists: the last record ``L_S`` read from it (up to the
   read's bound: "Reading a shard" below), written with ``attribute_not_exists`` so a fence the
   handler already wrote (at its first batch with ``R``) stays. Shards created later (children)
   have their fences at their start. Then every record up to a fence was written before the scan
   begins, and every record after it is counted by the handler (the records the deployment
   without ``R`` processed were readable when the backfill began, so they precede the bound).
2. **Scan** the table (``ConsistentRead``, ``Segment``/``TotalSegments``), page by page. After a
   page has been read, wait until ``stream_lag_seconds`` have passed and read every shard up to
   its bound (records after the fences only): the first post-fence record of each changed item
   gives its ``old_k``. An item on the page with such a record counts ``c(old_k)``; any other
   counts its scanned state, which is ``old_k`` as well, since a record written before the item
   was read would be visible by now.
3. **Persist, carry, apply**: each page's coalesced amounts and the digests of the items it
   returned are stored under the control partition, and its amounts are added to the segment's
   *carry*, the amounts of the pages counted since the carry was last applied. The carry is
   applied with the exactly-once writer at the segment's last page, or sooner when it holds
   ``carry_keys`` aggregate keys or ``carry_pages`` pages, under a checkpoint of its own
   (pseudo-shard ``backfill.<id>.<segment>``, sequence number = the page number it is applied
   at): one update per aggregate key per carry, not per page. Each page record says where its
   carry began (``since``) and whether the carry is applied at it (``flush``), written before the
   carry is applied. A killed backfill resumes each segment after its last stored page: it sums
   the stored pages of the unapplied carry again, and applies it again if that page was a
   flush, which the checkpoint makes harmless (items already at that page skip it).
4. **Finish**: once every segment is done and ``stream_lag_seconds`` have passed, read the stream
   once more (every shard up to its bound); items with a post-fence record that the scan never
   returned (deleted before the scan reached them) count ``c(old_k)``. Apply (pseudo-shard
   ``backfill.<id>.final``), then mark the rules ``active``.

Invariant: every item that existed at its shard's fence contributes ``c(state at the fence)``
exactly once, through its page or through the final step, and nothing else does.

Reading a shard
---------------
Each read of a shard (step 1's, and every one of steps 2 and 4) ends at a *bound* fixed when it
begins (:func:`read_shard`), so that it ends however often the application writes: a closed
shard's end; for an open shard, the first record written after the read began. A ``LATEST``
iterator taken before the read's first ``GetRecords`` points "just after the most recent stream
record in the shard" (DynamoDB Streams API reference, ``GetShardIterator``); the read polls it
(one ``GetRecords`` of one record per page of its own) until it returns a record, the bound, and
ends with the page that reaches the bound. While no record has come, the shard's end is where it
was when the read began, and the read ends there, after :data:`OPEN_SHARD_EMPTY_PAGES` empty
pages in a row (``GetRecords`` may return empty pages before a shard's records: an empty page is
no end); once one has come, the read follows empty pages to it.

*Why the bound is enough.* Each step needs the records readable when its read begins, and no
later ones. Step 2 counts a page only against reads that begin ``stream_lag_seconds`` after the
page was read, and step 4 reads ``stream_lag_seconds`` after the scan ended, so every write the
step must see (made before the page was read, or before the scan ended) is readable when its read
begins; step 1 must pass every record the deployment without ``R`` processed, all readable before
the backfill began. Each such record precedes its shard's bound, the ``LATEST`` iterator having
been taken after it was readable, so the read returns it. A shard not listed when a read of the
stream began holds no such record (a shard is listed once its records are readable), and a child
is read only once its parent has been read to its end, so an item's records are still read in
order. Records read past what a step needs change nothing: only an item's first post-fence record
is kept, and its ``OldImage`` is the item's state at the fence whenever it is read; a fence at a
record read later is still a record written before the scan began. So the invariant holds as it
did when reads went to the shard's end.

*Liveness.* A read returns the records before its bound and at most one page more: it ends once
it has read its shard's backlog at its start (up to 1,000 records per ``GetRecords``) and then
either the first write after its start is readable or :data:`OPEN_SHARD_EMPTY_PAGES` round trips
have passed without one. So at any steady write rate the backfill ends about
``2 * stream_lag_seconds`` after its scan (its last pages wait out the lag, and step 4 does),
plus two such reads of each shard and the final writes. (A read that ended only after ten empty
pages in a row never ended while the application wrote once per ten round trips or faster.) A
time bound, the first record whose ``ApproximateCreationDateTime`` is past the read's start,
would need this machine's clock to agree with the stream's and would wait for the stamp to move
on: the Streams API rounds it down to the second, DynamoDB Local to the minute. The ``LATEST``
iterator needs no clock.

Cost of the bound: per read of an open shard, one ``GetShardIterator`` and, until the bound
comes, one ``GetRecords`` (of at most one record) per page. The backfill reads that iterator in
turn with its own, never at the same time: it stays one reader per shard beside the handler
(DynamoDB Streams throttles more than two processes reading one shard at once: Streams API
reference, ``LimitExceededException``).

Assumptions (stated, not checked): a write is readable from its shard's ``GetRecords`` (and
precedes a ``LATEST`` iterator taken then) within ``stream_lag_seconds``, and its shard is listed
by then (DynamoDB Streams writes records "in near-real time": Developer Guide, "Change data
capture for DynamoDB Streams"); an open shard whose read saw no write since it began ends where
:data:`OPEN_SHARD_EMPTY_PAGES` empty pages in a row leave it; the deployment of ``R`` finished
before the backfill starts (no invocation with the old rule set afterwards); the backfill
finishes within the stream's 24-hour retention of the fences' records.

Costs: the scan (strongly consistent: 1 RCU per 4 KB of items read), one read of every shard
from its trim horizon for the fences and again for the changed items (with the bound's calls
above), one write per page of its amounts and digests (16 bytes per returned item,
zlib-compressed JSON for the amounts), and one aggregate ``UpdateItem`` per key per carry
(coalesced over its pages: once per segment unless the carry fills). Memory: the digests of the
items returned (about 100 bytes each in Python) and the first post-fence state of each item
changed during the backfill. After the backfill, a stream record costs what it did before: the
handler drops the rules' fences :data:`~aggregator.core.lifecycle.FENCE_RETENTION_SECONDS` after
they became active.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aggregator.core.batch_state import decode_batch, encode_batch
from aggregator.core.engine import (
    NO_AMOUNTS,
    AggregateRef,
    Amounts,
    BatchDeltas,
    CoalescedDelta,
    Engine,
    add_amounts,
)
from aggregator.core.exceptions import ConfigError
from aggregator.core.lifecycle import (
    Fence,
    RuleState,
    changed_definitions,
    resolved_rules,
)
from aggregator.core.records import Image, StreamRecord, pad_sequence_number
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.manifest import FenceStore, Manifest
from aggregator.dynamodb.modes import TargetCheckpointWriter
from aggregator.dynamodb.sizes import item_size
from aggregator.dynamodb.stats import WriteStats
from aggregator.dynamodb.streams import (
    StreamTrimmedError,
    get_records_page,
    is_closed,
    list_shards,
    parents_first,
    shard_iterator,
)
from aggregator.dynamodb.targets import MAX_TARGET_CHECKPOINTS
from aggregator.dynamodb.updates import Update
from aggregator.operations.toplists import settle_top_lists

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

__all__ = ["Backfill", "BackfillStats", "NothingToBackfill", "item_digest", "read_shard"]

STREAM_RETENTION_SECONDS = 24 * 3600
"""DynamoDB Streams keeps records 24 hours (Developer Guide, "Change data capture for DynamoDB
Streams")."""

DEFAULT_STREAM_LAG_SECONDS = 5.0
OPEN_SHARD_EMPTY_PAGES = 10
"""Empty ``GetRecords`` pages in a row after which an open shard in which nothing was written
since its read began counts as read to its end (:func:`read_shard`)."""
CLOSED_SHARD_EMPTY_PAGES = 10_000
"""Empty pages followed towards an end known to come (a closed shard's, or a read's bound)
before giving up."""
MAX_PAGE_RECORD_BYTES = 350 * 1024
"""A page's stored amounts and digests must fit one item with room for its key and other
attributes (DynamoDB Developer Guide, "Service quotas": items are at most 400 KB)."""
MAX_SEGMENTS = 64
"""One thread per segment, and each segment's checkpoint on every aggregate item it writes (until
pruned after 25 hours): a bound on both."""
MAX_TARGET_SEGMENTS = MAX_TARGET_CHECKPOINTS // 4
"""Most segments of a backfill of a target rule (4): each segment writes the application items as a
shard of its own, taking an entry of their checkpoint map (at most ``MAX_TARGET_CHECKPOINTS``, 16,
shared with the stream's shards) for the checkpoint retention; more segments could evict a live
shard's entry within the retention, which would let a redelivered batch count twice."""
LEASE_SECONDS = 120
"""A running backfill renews its lease at least every third of this; another process may take
over (resume) a backfill whose lease has lapsed."""
DEFAULT_PAGE_ITEMS = 200
"""Items per ``Scan`` page: small enough that a page's amounts and digests fit one control item
(400 KB) whatever the rules."""
DEFAULT_CARRY_PAGES = 1000
"""Most pages whose amounts a segment carries before applying them (:class:`Backfill`
``carry_pages``): a resumed segment reads the stored pages of its carry again."""
DEFAULT_CARRY_KEYS = 10_000
"""Most aggregate keys a segment's carry holds before it is applied (``carry_keys``): a bound on
the memory of each segment's thread."""


def item_digest(keys: dict[str, Any], layout: Any) -> bytes:
    """16-byte BLAKE2b digest of an item's primary key (DynamoDB JSON)."""
    names = [layout.partition_key] + ([layout.sort_key] if layout.sort_key else [])
    text = json.dumps([keys.get(n) for n in names], sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class _Carry:
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


class NothingToBackfill(ConfigError):
    """Every rule of the set is backfilled already (active): a backfill has nothing to do,
    which is no failure (the CLI says so and exits 0)."""


@dataclass(slots=True)
class BackfillStats:
    """Figures of one :meth:`Backfill.run` (all of it, resumed parts included where stored)."""

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
    (:func:`aggregator.operations.toplists.settle_top_lists`)."""
    top_lists_unsettled: int = 0
    """Top lists that still disagreed with their aggregates after that (the handler keeps
    changing them: it merges their records)."""


class _RateLimiter:
    """At most ``per_second`` units per second (token bucket, shared by threads)."""

    def __init__(self, per_second: float | None) -> None:
        self.per_second = per_second
        self.lock = threading.Lock()
        self.available = per_second or 0.0
        self.at = time.monotonic()

    def take(self, units: float) -> None:
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
        if wait > 0:
            time.sleep(wait)


class _Bound:
    """Where a read of an open shard ends: the first record written after the read began
    (module docstring, "Reading a shard").

    A ``LATEST`` iterator, taken when the read begins, points just after the shard's most recent
    record (DynamoDB Streams API reference, ``GetShardIterator``); :meth:`poll` reads it, one
    record at most per call, until it returns a record, whose sequence number is the bound. An
    expired iterator is renewed at ``LATEST``
    (:func:`~aggregator.dynamodb.streams.get_records_page`): the shard's end then is a bound as
    good, every record readable when the read began still coming before it.
    """

    def __init__(self, streams: DynamoDBStreamsClient, stream_arn: str, shard_id: str) -> None:
        self.streams = streams
        self.stream_arn = stream_arn
        self.shard_id = shard_id
        self.sequence_number: str | None = None  # 40 digits, once a record has come
        self.iterator: str | None = self._latest()

    def _latest(self) -> str:
        return shard_iterator(self.streams, self.stream_arn, self.shard_id, latest=True)

    def poll(self) -> str | None:
        """The bound (a 40-digit sequence number), or ``None`` while no record has come after
        the read began (one ``GetRecords`` call per poll until one has)."""
        if self.sequence_number is not None or self.iterator is None:
            return self.sequence_number
        page = get_records_page(
            self.streams, self.stream_arn, self.shard_id, self.iterator, latest=True, limit=1
        )
        if page.records:
            self.sequence_number = pad_sequence_number(
                page.records[0]["dynamodb"]["SequenceNumber"]
            )
        else:
            self.iterator = page.next_iterator  # None: the shard has closed
        return self.sequence_number


def read_shard(
    streams: DynamoDBStreamsClient,
    stream_arn: str,
    shard: dict[str, Any],
    iterators: dict[str, str | None],
    last: dict[str, str],
) -> Iterator[dict[str, Any]]:
    """Records of one shard (Lambda-shaped), from where ``iterators`` left off (the shard's start
    the first time) to a bound fixed when this read begins (module docstring, "Reading a
    shard"): a closed shard's end, or for an open shard the first record written after the read
    began (:class:`_Bound`), or, if none comes, the shard's end as :data:`OPEN_SHARD_EMPTY_PAGES`
    empty ``GetRecords`` pages in a row show it. So the read ends at any write rate. It may
    return records past its bound (the rest of the bound's page); the next read goes on after
    them.

    ``iterators[shard_id]`` is where the next read continues, ``None`` once a closed shard has
    ended; ``last[shard_id]`` is the last sequence number read, from which an expired iterator
    is renewed.

    ``GetRecords`` may return empty pages before a shard's records (DynamoDB Streams API
    reference, ``GetRecords``): towards a known end (a closed shard's, or a bound) the read
    follows them, up to :data:`CLOSED_SHARD_EMPTY_PAGES`. Pages come from the framework's stream
    reader (:func:`~aggregator.dynamodb.streams.get_records_page`).

    Raises
    ------
    ConfigError
        When the shard's records were trimmed (older than the stream's 24 hours) while the
        backfill still needed them, or a known end never came.
    """
    shard_id = shard["ShardId"]
    iterator = iterators.get(shard_id, "")
    if iterator is None:
        return
    # fixed before the first page: every record readable now comes before it
    bound = None if is_closed(shard) else _Bound(streams, stream_arn, shard_id)
    empty = 0
    while True:
        try:
            page = get_records_page(
                streams, stream_arn, shard_id, iterator or None, after=last.get(shard_id)
            )
        except StreamTrimmedError:
            raise ConfigError(
                f"shard {shard_id}: the stream no longer holds records the backfill "
                "needs (older than 24 hours); deploy the rules under new names and "
                "backfill those"
            ) from None
        records = page.records
        iterator = page.next_iterator
        iterators[shard_id] = iterator
        for record in records:
            last[shard_id] = record["dynamodb"]["SequenceNumber"]
            yield record
        if iterator is None:  # a closed shard's end
            return
        empty = 0 if records else empty + 1
        if bound is not None:
            end = bound.poll()
            if end is None and empty >= OPEN_SHARD_EMPTY_PAGES:
                return  # nothing written since the read began, and the shard read to its end
            if end is not None and pad_sequence_number(last.get(shard_id, "0")) >= end:
                return  # the bound reached
        if empty >= CLOSED_SHARD_EMPTY_PAGES:
            raise ConfigError(
                f"shard {shard_id}: {CLOSED_SHARD_EMPTY_PAGES} empty pages without reaching "
                "the end of a closed shard, or the first record written after the read began; "
                "try again"
            )


class _ChangedItems:
    """Reads every shard after its fence and keeps, per item, the contributions of its first
    post-fence ``OldImage`` (thread-safe)."""

    def __init__(self, backfill: Backfill) -> None:
        self.b = backfill
        self.lock = threading.Lock()
        self.first_old: dict[bytes, dict[AggregateRef, Amounts]] = {}
        self.iterators: dict[str, str | None] = {}
        self.last: dict[str, str] = {}
        self.done: set[str] = set()
        self.records = 0

    def pump(self) -> None:
        """Read every shard the stream lists up to its bound (:func:`read_shard`; new shards
        from their start), parents before their children, so an item's first post-fence record
        is the first one read. A child is read once its parent has been read to its end; one
        listed only after this read began is left to the next."""
        with self.lock:
            shards = self.b.shards()
            listed = {s["ShardId"] for s in shards}
            progressed = True
            while progressed:
                progressed = False
                for shard in parents_first(shards):
                    shard_id = shard["ShardId"]
                    parent = shard.get("ParentShardId")
                    if shard_id in self.done or (parent in listed and parent not in self.done):
                        continue
                    fences = self.b.shard_fences(shard_id)
                    for record in self.b.read_shard(shard, self.iterators, self.last):
                        self.records += 1
                        seq = pad_sequence_number(record["dynamodb"]["SequenceNumber"])
                        self._record(record, seq, fences)
                    if self.iterators.get(shard_id, "") is None:
                        self.done.add(shard_id)
                        progressed = True

    def _record(self, raw: dict[str, Any], seq: str, fences: dict[str, str]) -> None:
        record = StreamRecord(raw)
        keys = dict(record.keys)
        if self.b.layout.is_reserved(keys):
            return
        digest = item_digest(keys, self.b.layout)
        if digest in self.first_old:
            return
        # a rule's fence in this shard; none yet (a shard born after the fences): all of it
        rules = [r for r in self.b.rule_names if seq > fences.get(r, "")]
        if not rules:
            return
        if len(rules) != len(self.b.rule_names):  # refused up front (_check_fences)
            raise ConfigError("the rules' fences differ within one shard; backfill them apart")
        self.first_old[digest] = self.b.contributions(record.old_image)


class Backfill:
    """Count the items already in the table for rules pending a backfill (module docstring).

    Parameters
    ----------
    rules
        The deployed rule set (its layout included).
    client, streams_client
        boto3 ``dynamodb`` and ``dynamodbstreams`` clients.
    table_name, stream_arn
        The table and its stream.
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
        How long a write may take to become readable from the stream (module docstring).
    page_items
        ``Limit`` of each ``Scan`` page.
    backfill_id
        Resume this backfill (default: resume the one recorded in the manifest, else start one).
    on_page
        Called after each counted page with ``(items on the page, stats)`` (progress bars; tests
        use it to interleave writes).
    carry_pages, carry_keys
        Apply a segment's carry after this many pages, or once it holds this many aggregate keys
        (module docstring, step 3; defaults :data:`DEFAULT_CARRY_PAGES`,
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
        client: DynamoDBClient,
        streams_client: DynamoDBStreamsClient,
        table_name: str,
        stream_arn: str,
        *,
        rule_names: Iterable[str] | None = None,
        segments: int = 4,
        max_rcu: float | None = None,
        max_wcu: float | None = None,
        stream_lag_seconds: float = DEFAULT_STREAM_LAG_SECONDS,
        page_items: int = DEFAULT_PAGE_ITEMS,
        on_page: Callable[[int, BackfillStats], None] | None = None,
        clock: Callable[[], float] = time.time,
        carry_pages: int = DEFAULT_CARRY_PAGES,
        carry_keys: int = DEFAULT_CARRY_KEYS,
    ) -> None:
        if not 1 <= segments <= MAX_SEGMENTS:
            raise ConfigError(f"segments must be 1 to {MAX_SEGMENTS}, got {segments}")
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
        self.client = client
        self.streams = streams_client
        self.table_name = table_name
        self.stream_arn = stream_arn
        self.segments = segments
        self.stream_lag_seconds = stream_lag_seconds
        self.page_items = page_items
        self.carry_pages = max(1, carry_pages)
        self.carry_keys = max(1, carry_keys)
        self.on_page = on_page
        self.clock = clock
        self.engine = Engine(self.rules)
        self.fence_store = FenceStore(client, table_name, self.layout)
        self.read_limiter = _RateLimiter(max_rcu)
        self.write_limiter = _RateLimiter(max_wcu)
        self.stats = BackfillStats()
        self._stats_lock = threading.Lock()
        self._keys: set[str] = set()  # aggregate items written (this run)
        self._owner = uuid.uuid4().hex
        self._leased_at = 0.0
        self._fences: dict[str, dict[str, str]] = {}
        self.carried: list[str] = []
        self.skipped: list[tuple[str, str]] = []
        """Pending derived rules left out, each with the reason (see :meth:`_select`)."""
        self.rule_names = self._select(states, rule_names)
        self.states = {n: states[n] for n in (*self.rule_names, *self.carried)}
        targets = [n for n in self.rule_names if self.rules.get(n).target is not None]
        if targets and segments > MAX_TARGET_SEGMENTS:
            raise ConfigError(
                f"rule(s) {', '.join(targets)} keep their sums on the application's items, whose "
                f"checkpoint map holds {MAX_TARGET_CHECKPOINTS} entries shared by the stream's "
                f"shards and each backfill segment: give --segments {MAX_TARGET_SEGMENTS} or fewer"
            )
        self.writer = TargetCheckpointWriter(
            client, table_name, layout=self.layout, max_workers=8, clock=clock
        )
        self.leaderboard = {r.name for r in self.rules if r.leaderboard}

    # -- rules and fences --------------------------------------------------------------------

    def _select(self, states: dict[str, RuleState], names: Iterable[str] | None) -> list[str]:
        """The base rules to scan for; derived rules whose source is among them ride along
        (:attr:`carried`), named or not: once their source is active nothing could complete
        them. Without ``names`` (every pending rule), a derived rule whose source is not
        backfilled with it is left out and named in :attr:`skipped`; named, it is refused."""
        known = {r.name for r in self.rules}
        chosen = self._chosen(states) if names is None else list(dict.fromkeys(names))
        base = [n for n in chosen if n in known and not self.rules.get(n).is_derived]
        self.carried = []
        self.skipped = []
        for name in chosen:
            self._check_selectable(name, known, states)
            try:
                if self._rides_along(name, base):
                    self.carried.append(name)
            except ConfigError as refused:
                if names is not None:
                    raise
                self.skipped.append((name, str(refused)))
        for r in self.rules:  # pending derived rules of the backfilled sources, not named
            state = states.get(r.name)
            if (
                r.source in base
                and r.name not in self.carried
                and state is not None
                and state.status in ("pending", "backfilling")
            ):
                self.carried.append(r.name)
        if not base:
            if self.skipped:
                raise ConfigError(self.skipped[0][1])
            raise ConfigError("name at least one base rule to backfill")
        return base

    def _chosen(self, states: dict[str, RuleState]) -> list[str]:
        """The rules pending a backfill in the manifest (when no names are given).

        Raises
        ------
        NothingToBackfill
            When every rule is deployed and none is pending.
        ConfigError
            When no rule is pending otherwise.
        """
        chosen = [
            r.name
            for r in self.rules
            if r.name in states and states[r.name].status in ("pending", "backfilling")
        ]
        if not chosen:
            deployed = [r.name for r in self.rules if r.name in states]
            if deployed and len(deployed) == len(self.rules):
                raise NothingToBackfill(
                    "nothing to backfill: every rule is active (aggregator status shows "
                    "each rule's state)"
                )
            raise ConfigError(
                "no rule is pending a backfill (the manifest lists them once the handler or "
                "`aggregator run` has started with them)"
            )
        return chosen

    def _check_selectable(self, name: str, known: set[str], states: dict[str, RuleState]) -> None:
        """Refuse a rule that is not defined, not deployed, already active or only requested.

        Raises
        ------
        ConfigError
            When the rule cannot be backfilled.
        """
        if name not in known:
            raise ConfigError(f"no rule named {name!r} in the definitions")
        state = states.get(name)
        if state is None:
            raise ConfigError(
                f"rule {name!r} is not deployed yet: start the handler (deploy) or "
                "`aggregator run` with it first, so that the stream counts it from its fences"
            )
        if state.status == "active":
            raise ConfigError(f"rule {name!r} is already backfilled (active)")
        if state.status == "requested":
            raise ConfigError(
                f"rule {name!r} was requested by a rebuild, but no handler has started with "
                "its new definition yet: deploy it (or start `aggregator run` with it) first"
            )

    def _rides_along(self, name: str, base: list[str]) -> bool:
        """Whether the rule is derived (its source among ``base``), to be carried along.

        Raises
        ------
        ConfigError
            When the rule is derived from a rule not backfilled with it.
        """
        source = self.rules.get(name).source
        if source is None:
            return False
        if source not in base:
            raise ConfigError(
                f"rule {name!r} is derived from {source!r}, which is not backfilled with "
                "it: a derived rule is complete when its source's aggregates all came "
                "after it was deployed (backfill them together); deriving from existing "
                "aggregates is not supported yet"
            )
        return True

    def _check(self) -> None:
        now = self.clock()
        for name, state in self.states.items():
            if state.unfenced:
                raise ConfigError(
                    f"rule {name!r} was counted by a handler whose events name no shard (no "
                    "tumbling windows), without fences: a backfill could not be exact"
                )
            if state.status == "pending" and now - state.registered_at > (
                STREAM_RETENTION_SECONDS - 3600
            ):
                raise ConfigError(
                    f"rule {name!r} has been pending since {time.ctime(state.registered_at)}, "
                    "longer than the stream keeps records (24 h): its changes since then cannot "
                    "be told apart exactly; deploy it under a new name and backfill that"
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
        return list_shards(self.streams, self.stream_arn)

    def read_shard(
        self, shard: dict[str, Any], iterators: dict[str, str | None], last: dict[str, str]
    ) -> Iterable[dict[str, Any]]:
        """One shard's records up to its bound (:func:`read_shard`)."""
        return read_shard(self.streams, self.stream_arn, shard, iterators, last)

    def _fence_all(self) -> None:
        """Step 1: fence every listed shard at the last record read from it (up to its bound,
        :func:`read_shard`), unless fenced already."""
        iterators: dict[str, str | None] = {}
        last: dict[str, str] = {}
        for shard in self.shards():
            shard_id = shard["ShardId"]
            end = "0"
            for record in self.read_shard(shard, iterators, last):
                end = max(end, record["dynamodb"]["SequenceNumber"], key=pad_sequence_number)
            self.fence_store.put_if_absent(
                [Fence(r, shard_id, pad_sequence_number(end), "backfill") for r in self.rule_names]
            )

    def _check_fences(self) -> None:
        """Refuse rules that a handler fenced at different points (deployed at different
        times): one backfill counts one state per item, at one fence per shard."""
        for shard in self.shards():
            fences = {
                r: f.after
                for r, f in self.fence_store.get(shard["ShardId"]).items()
                if r in self.rule_names
            }
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
            with self._stats_lock:
                self.stats.evaluation_failures += len(failed)
        return found

    # -- control items -----------------------------------------------------------------------

    def _control_key(self, sort_key: str) -> dict[str, Any]:
        return self.layout.item_key(self.layout.control_pk, sort_key)

    def _get(self, sort_key: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.client.get_item(
            TableName=self.table_name, Key=self._control_key(sort_key), ConsistentRead=True
        ).get("Item")
        return item

    def _put(self, sort_key: str, attributes: dict[str, Any]) -> None:
        fields = self.layout.item_fields(self.layout.control_pk, sort_key)
        item = {**{k: {"S": v} for k, v in fields.items()}, **attributes}
        self.client.put_item(TableName=self.table_name, Item=item)

    # -- pages -------------------------------------------------------------------------------

    def _apply(self, batch: BatchDeltas, pseudo_shard: str) -> None:
        if not batch.deltas:
            return
        result = self.writer.apply(batch, shard_id=pseudo_shard)
        if result.retry_from is not None:
            raise ConfigError(f"backfill write failed: {'; '.join(result.errors[:3])}")
        with self._stats_lock:
            self.stats.write.add(result.stats)
            self._keys.update(batch.deltas)
            self.stats.aggregate_keys = len(self._keys)
        self.write_limiter.take(float(result.stats.modelled_wcu))

    def _batch(self, amounts: dict[AggregateRef, Amounts], sequence: int) -> BatchDeltas:
        seq = str(sequence)
        batch = BatchDeltas(first_sequence_number=seq, last_sequence_number=seq)
        for ref, (amount, count) in amounts.items():
            batch.deltas[ref.sort_key] = CoalescedDelta.of(
                self.rules.get(ref.rule).write_spec,
                ref,
                amount,
                seq,
                [(seq, amount)],
                count=count,
                count_parts=[(seq, count)],
            )
        return batch

    def _segment(self, segment: int, changed: _ChangedItems, digests: set[bytes]) -> None:
        """Scan one segment to its end, from where a killed run of this backfill stopped."""
        bid = self.stats.backfill_id
        progress = self._get(f"backfill#{bid}#segment#{segment}") or {}
        page = int(progress.get("page", {}).get("N", "0"))  # pages counted and stored
        start = json.loads(progress["next_key"]["S"]) if "next_key" in progress else None
        # the first page of the carry not yet applied (progress of earlier releases, which
        # applied every page, has none)
        carry = _Carry(int(progress.get("since", {}).get("N", str(page + 1))))
        self._load_pages(segment, page, digests, carry)
        if progress.get("done", {}).get("BOOL"):
            return
        pseudo = f"backfill.{bid}.{segment}"
        stored = self._get(f"backfill#{bid}#page#{segment}#{page + 1}")
        if stored is not None:  # stored before a kill, its progress not saved: resume it
            page, start = self._resume_page(segment, page + 1, stored, digests, carry, pseudo)
        if page > 0 and start is None:  # the last page is in, and its carry applied
            self._save_segment(segment, page, None, done=True, since=carry.since)
            return
        # pages read but not yet counted, oldest first: (read at, items, next key); the scan
        # reads on while the oldest page waits out the stream lag
        waiting: deque[tuple[float, list[dict[str, Any]], dict[str, Any] | None]] = deque()
        scanning = True
        while scanning or waiting:
            if scanning:
                kwargs: dict[str, Any] = {
                    "TableName": self.table_name,
                    "ConsistentRead": True,
                    "Segment": segment,
                    "TotalSegments": self.segments,
                    "Limit": self.page_items,
                }
                if start:
                    kwargs["ExclusiveStartKey"] = start
                response = self.client.scan(**kwargs)
                items = response.get("Items", [])
                start = response.get("LastEvaluatedKey")
                waiting.append((time.monotonic(), items, start))
                scanning = start is not None
                rcu = _read_units(items)
                self.read_limiter.take(float(rcu))
                with self._stats_lock:
                    self.stats.modelled_rcu += rcu
            ready_at = waiting[0][0] + self.stream_lag_seconds
            if scanning and time.monotonic() < ready_at:
                continue
            delay = ready_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            # a page counts only against a stream read that began after its lag had passed
            pumped_at = time.monotonic()
            changed.pump()
            self._renew_lease()
            while waiting and waiting[0][0] + self.stream_lag_seconds <= pumped_at:
                _, items, next_key = waiting.popleft()
                page += 1
                self._count_page(segment, page, items, next_key, changed, digests, pseudo, carry)

    def _count_page(
        self,
        segment: int,
        page: int,
        items: list[dict[str, Any]],
        next_key: dict[str, Any] | None,
        changed: _ChangedItems,
        digests: set[bytes],
        pseudo: str,
        carry: _Carry,
    ) -> None:
        """Count one page whose stream lag has passed: store it, add it to the carry (applied
        at the segment's last page, or when full: module docstring, step 3), move the segment
        on."""
        amounts, page_digests, first_old_used = self._count(items, changed)
        batch = self._batch(amounts, page)
        carry.add(batch)
        flush = (
            not next_key
            or len(carry.entries) >= self.carry_keys
            or page - carry.since + 1 >= self.carry_pages
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
        self._put(f"backfill#{self.stats.backfill_id}#page#{segment}#{page}", record)
        if flush:
            self._apply(self._batch(carry.amounts(), page), pseudo)
            carry.restart(page + 1)
        self._save_segment(segment, page, next_key, done=not next_key, since=carry.since)
        digests.update(page_digests)
        with self._stats_lock:
            self.stats.items_scanned += len(page_digests)  # the application's items
            self.stats.pages += 1
            self.stats.first_old_used += first_old_used
        if self.on_page is not None:
            self.on_page(len(items), self.stats)

    def _count(
        self, items: list[dict[str, Any]], changed: _ChangedItems
    ) -> tuple[dict[AggregateRef, Amounts], list[bytes], int]:
        """A page's amounts: each item's first post-fence state if the stream has one, else its
        scanned state; with the digests of the items and how many used the stream's."""
        amounts: dict[AggregateRef, Amounts] = {}
        page_digests: list[bytes] = []
        first_old_used = 0
        names = [n for n in (self.layout.partition_key, self.layout.sort_key) if n]
        for item in items:
            keys = {k: item[k] for k in names if k in item}
            if self.layout.is_reserved(keys):
                continue
            digest = item_digest(keys, self.layout)
            page_digests.append(digest)
            with changed.lock:
                old = changed.first_old.get(digest)
            if old is not None:
                first_old_used += 1
                found = old
            else:
                found = self.contributions(Image(item))
            for ref, found_amounts in found.items():
                amounts[ref] = add_amounts(amounts.get(ref, NO_AMOUNTS), found_amounts)
        return amounts, page_digests, first_old_used

    def _resume_page(
        self,
        segment: int,
        page: int,
        stored: dict[str, Any],
        digests: set[bytes],
        carry: _Carry,
        pseudo: str,
    ) -> tuple[int, dict[str, Any] | None]:
        """A page stored before a kill whose segment progress was not saved: add it to the
        carry and, if the carry was to be applied at it, apply it (again: the checkpoint skips
        the items already at this page). Pages of earlier releases have no ``flush``: each was
        applied on its own."""
        carry.add(decode_batch(zlib.decompress(stored["deltas"]["B"]).decode("utf-8")))
        if stored.get("flush", {"BOOL": True})["BOOL"]:
            self._apply(self._batch(carry.amounts(), page), pseudo)
            carry.restart(page + 1)
        text = stored["next_key"]["S"]
        start = json.loads(text) if text else None
        self._save_segment(segment, page, start, since=carry.since)
        raw = zlib.decompress(stored["digests"]["B"])
        digests.update(raw[i : i + 16] for i in range(0, len(raw), 16))
        return page, start

    def _load_pages(self, segment: int, pages: int, digests: set[bytes], carry: _Carry) -> None:
        """On resuming a segment: the digests of its stored pages, and the amounts of those of
        its carry (``carry.since`` on), which were stored but not applied."""
        for page in range(1, pages + 1):
            stored = self._get(f"backfill#{self.stats.backfill_id}#page#{segment}#{page}")
            if stored is None:
                continue
            raw = zlib.decompress(stored["digests"]["B"])
            digests.update(raw[i : i + 16] for i in range(0, len(raw), 16))
            if page >= carry.since:
                carry.add(decode_batch(zlib.decompress(stored["deltas"]["B"]).decode("utf-8")))

    def _save_segment(
        self,
        segment: int,
        page: int,
        start: dict[str, Any] | None,
        *,
        since: int,
        done: bool = False,
    ) -> None:
        attributes: dict[str, Any] = {
            "page": {"N": str(page)},
            "done": {"BOOL": done},
            "since": {"N": str(since)},
        }
        if start:
            attributes["next_key"] = {"S": json.dumps(start)}
        self._put(f"backfill#{self.stats.backfill_id}#segment#{segment}", attributes)

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
            meta = self._get(f"backfill#{self.stats.backfill_id}#meta") or {}
            rules = sorted(meta.get("rules", {}).get("SS", []))
            segments = int(meta.get("segments", {}).get("N", "0"))
            if rules != sorted(self.states) or segments != self.segments:
                raise ConfigError(
                    f"backfill {self.stats.backfill_id} is under way for rules "
                    f"{','.join(rules)} with {segments} segments: resume it with --rules "
                    f"{','.join(rules)} --segments {segments}"
                )
            fenced = self._get(f"backfill#{self.stats.backfill_id}#fenced")
            if fenced and self.clock() - int(fenced["at"]["N"]) > STREAM_RETENTION_SECONDS - 3600:
                raise ConfigError(
                    f"backfill {self.stats.backfill_id} began over 23 hours ago: the stream no "
                    "longer holds the records it needs; deploy the rules under new names and "
                    "backfill those"
                )
            self._take_lease(create=False)
            return True
        self.stats.backfill_id = uuid.uuid4().hex[:12]
        self._put(
            f"backfill#{self.stats.backfill_id}#meta",
            {
                "rules": {"SS": sorted(self.states)},
                "segments": {"N": str(self.segments)},
                "started_at": {"N": str(int(self.clock()))},
            },
        )
        self._take_lease(create=True)
        for name in pending:
            state = replace(
                self.states[name], status="backfilling", backfill_id=self.stats.backfill_id
            )
            if not self.manifest.set_state(state, expected_status="pending"):
                raise ConfigError(f"rule {name!r}: another backfill started meanwhile")
            self.states[name] = state
        return False

    def _take_lease(self, *, create: bool) -> None:
        """Own the backfill for :data:`LEASE_SECONDS` (a conditional write on its meta item), so
        that two processes never run one backfill at once.

        Raises
        ------
        ConfigError
            When another process holds the lease.
        """
        now = int(self.clock())
        try:
            me = {"S": self._owner}
            update = (
                Update()
                .set("owner", me)
                .set("lease_until", {"N": str(now + LEASE_SECONDS)})
                .where_exists("rules")
                .where_any(
                    Update().where_missing("lease_until"),
                    Update().where_below("lease_until", {"N": str(now)}),
                    Update().where_equals("owner", me),
                )
            )
            self.client.update_item(
                TableName=self.table_name,
                Key=self._control_key(f"backfill#{self.stats.backfill_id}#meta"),
                **update.render(),
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            raise ConfigError(
                f"backfill {self.stats.backfill_id} is running in another process (its lease "
                f"lasts {LEASE_SECONDS} s from its last page); wait for it, or run this again "
                "once it has stopped"
            ) from None
        self._leased_at = time.monotonic()

    def _renew_lease(self) -> None:
        if time.monotonic() - self._leased_at > LEASE_SECONDS / 3:
            with self._stats_lock:
                self._take_lease(create=False)

    def run(self) -> BackfillStats:
        """Run (or resume) the backfill to the end; returns its figures.

        Raises
        ------
        ConfigError
            As the constructor; when another process runs this backfill; or when a write keeps
            failing (the backfill can be resumed).
        """
        started = time.monotonic()
        self._check()
        self._check_fences()
        self.stats.resumed = self._begin()
        marker = f"backfill#{self.stats.backfill_id}#fenced"
        if not self.stats.resumed or self._get(marker) is None:
            self._fence_all()
            self._put(marker, {"at": {"N": str(int(self.clock()))}})
        changed = _ChangedItems(self)
        changed.pump()
        per_segment: list[set[bytes]] = [set() for _ in range(self.segments)]
        with ThreadPoolExecutor(max_workers=self.segments) as pool:
            futures = [
                pool.submit(self._segment, s, changed, per_segment[s]) for s in range(self.segments)
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
        self._apply(self._batch(final, 1), f"backfill.{self.stats.backfill_id}.final")
        # the top lists of the backfilled aggregates: the handler merges their records a moment
        # later (a local run perhaps much later); written now, top is exact once they are active
        self.stats.top_lists_written, self.stats.top_lists_unsettled = settle_top_lists(
            self.client, self.table_name, self.rules, list(self.states), clock=self.clock
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


def _read_units(items: list[dict[str, Any]]) -> Decimal:
    """Modelled RCU of a strongly consistent ``Scan`` page: 1 per started 4 KB of the items
    read (Developer Guide, "Read consumption": a Scan is charged on the total size of the items
    it reads, rounded up to 4 KB)."""
    size = sum(item_size(item) for item in items)
    return Decimal(max(1, -(-size // 4096)))
