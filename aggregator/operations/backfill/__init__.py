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

Modules
-------
:mod:`~aggregator.operations.backfill.operation` (:class:`Backfill`: steps 1, 4 and the whole),
:mod:`~aggregator.operations.backfill.selection` (which rules, and the refusals),
:mod:`~aggregator.operations.backfill.stream` (reading a shard, the changed items),
:mod:`~aggregator.operations.backfill.segments` (steps 2 and 3: a segment's pages and carry),
:mod:`~aggregator.operations.backfill.control` (the control items, the lease),
:mod:`~aggregator.operations.backfill.stats` (the figures, the rate limits).

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

from aggregator.operations.backfill.control import LEASE_SECONDS
from aggregator.operations.backfill.operation import (
    DEFAULT_CARRY_KEYS,
    DEFAULT_CARRY_PAGES,
    DEFAULT_PAGE_ITEMS,
    DEFAULT_STREAM_LAG_SECONDS,
    MAX_SEGMENTS,
    MAX_TARGET_SEGMENTS,
    Backfill,
)
from aggregator.operations.backfill.segments import MAX_PAGE_RECORD_BYTES
from aggregator.operations.backfill.selection import STREAM_RETENTION_SECONDS, NothingToBackfill
from aggregator.operations.backfill.stats import BackfillStats
from aggregator.operations.backfill.stream import (
    CLOSED_SHARD_EMPTY_PAGES,
    OPEN_SHARD_EMPTY_PAGES,
    item_digest,
    read_shard,
)

__all__ = [
    "CLOSED_SHARD_EMPTY_PAGES",
    "DEFAULT_CARRY_KEYS",
    "DEFAULT_CARRY_PAGES",
    "DEFAULT_PAGE_ITEMS",
    "DEFAULT_STREAM_LAG_SECONDS",
    "LEASE_SECONDS",
    "MAX_PAGE_RECORD_BYTES",
    "MAX_SEGMENTS",
    "MAX_TARGET_SEGMENTS",
    "OPEN_SHARD_EMPTY_PAGES",
    "STREAM_RETENTION_SECONDS",
    "Backfill",
    "BackfillStats",
    "NothingToBackfill",
    "item_digest",
    "read_shard",
]
