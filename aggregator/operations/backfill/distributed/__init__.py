"""Backfill beyond one machine: the backfill as tasks that a Step Functions state machine fans
out to Lambda (:func:`~aggregator.operations.backfill.distributed.tasks.run_task`), exact while
the application writes, with every per-task cost independent of the table's size.

Protocol
--------
The handler counts the rules ``R`` in each shard after the shard's *fence*, as for the local
backfill (:mod:`aggregator.operations.backfill`). The backfill owes, per item ``k``,
``c(old_k)``: ``R``'s contribution of ``k``'s state at the fence (``c``: aggregate ->
``(amount, count)``). Let the scan *pass* ``k`` when it reads ``k``'s position (whether ``k``
exists then or not).

1. **Start**: choose and check the rules, mark them ``backfilling`` under a new id.
2. **Collect** (one reader of the stream beside the handler, :mod:`.collector`): fence every
   listed shard not fenced yet (as the local backfill's step 1, the shards read in parallel),
   then read every shard after its fence (from the fence's own record when the backfill set it;
   from the shard's oldest record when the handler did, checking that nothing after the fence
   was trimmed), parents before children, and for every record whose contributions differ
   (``c(old) != c(new)``) write a *B entry* (digest of ``k``'s key, ``c(OldImage)``), in stream
   order. An item's first B entry holds ``c(old_k)``: every earlier post-fence record of ``k``
   changed nothing ``R`` counts. It goes on until it has read every record written before the
   scan ended: once it sees the scan's ``ended`` item, it waits ``stream_lag_seconds`` and makes
   one last whole pass, each shard read to its bound
   (:func:`~aggregator.operations.backfill.read_shard`). It commits its positions at least every
   minute and whenever its buffer fills, also mid-pass.
3. **Scan** (a map over ``Scan`` segments, after the fences, :mod:`.scan`): count
   ``c(scanned_k)`` of every item returned, and write an *S entry* (digest, ``c(scanned_k)``)
   for each one with a contribution. The scan never reads the stream and never waits for it.
4. **Join** (a map over hash buckets of item digests, :mod:`.join`): per item with a B entry,
   the correction ``c(old_k) - c(scanned_k)`` (``- 0`` without an S entry), written as it comes
   (first every ``c(old_k)``, then the scanned contributions a few hundred records at a time),
   each part committed with the position reached.
5. **Reduce** (a map over hash buckets of aggregates, :mod:`.reduce`): sum the scan's amounts
   and the corrections per aggregate, and apply them with the exactly-once writer under the
   pseudo-shard ``backfill.<id>.<bucket>``: one checkpoint entry per aggregate, however many
   segments counted it, and one write per aggregate (the bucket summed in passes of at most
   ``carry_keys`` aggregates, by a second hash).
6. **Finish**: settle the top lists, mark the rules ``active``.

Why it is exact: scan plus corrections is ``sum_k c(scanned_k) + sum_{k in B} (c(old_k) -
c(scanned_k))``. An item without a B entry changed nothing ``R`` counts since the fence: what
the scan read of it (if anything) contributes ``c(old_k)``, and an item the scan did not return
contributes ``0 = c(old_k)``. An item with one is owed ``c(old_k)`` exactly. B must hold the
first change of every item changed before its pass: every record written before the scan ended,
which the last pass reads. (Records written later may add B entries; they are harmless: the
scan read such an item before its first change, so ``c(scanned_k) = c(old_k)``, or never, and
then it did not exist at its pass and ``c(old_k) = 0``.) A pure model of this, with kills and
writes racing the scan, is ``tests/unit/operations/test_distributed_backfill_model.py``.

Killed tasks
------------
Every task writes its data records under its invocation's *attempt* id and then *commits*
them with a conditional update of its progress item (:meth:`.job.Job.commit`); readers read
the committed attempts' records only, by exact key (so a partition-key-only table works too).
A killed scan leaves its uncommitted pages to be read again; a killed collector's reads are
read again from its committed positions; a killed join goes on from its last commit; a killed
reducer records what it sums before applying it, and applies it again (a no-op where the
checkpoint shows it applied; refused after 24 hours, when the checkpoints may be pruned). Two
invocations of one task at once are harmless too: the second commit fails its condition.

Bounds
------
- Memory: a scan task holds a page, at most ``carry_keys`` aggregates and ``flush_items``
  entries; the collector one flush of B entries and the shards' positions; a join task the B
  entries of its bucket; a reducer ``carry_keys`` aggregates. None depends on the table's size.
- Stream reads: one reader, each shard read once from its fence (plus a bounded read per pass:
  the bound's ``LATEST`` iterator), however many segments and pages.
- Time: the stream's 24 hours bound only the start (within 23 hours of deploying the rules, as
  locally) and the collector's lag (each record read within 24 hours of its write); nothing
  bounds the whole backfill. Each invocation stops itself before its deadline.
- Item sizes: one checkpoint entry per aggregate; a progress item grows by 9 bytes per flush
  (the collector's, one flush a minute at most: 400 KB in about four weeks), and holds the
  positions of the shards the stream lists.
- The state machine: segments, join buckets and reduce buckets at most 30,000 in all (their
  lists travel in its 256 KiB of state); the control items expire 30 days after their last write
  (:data:`~aggregator.operations.backfill.distributed.job.CONTROL_TTL_SECONDS`).

Assumptions (stated, not checked), as the local backfill's: a write is readable from the stream
within ``stream_lag_seconds`` and its shard is listed by then; the deployment of ``R`` finished
before the backfill starts; a ``Scan`` returns an item at most once; the collector keeps up
within the stream's 24 hours.
"""

from aggregator.operations.backfill.distributed.job import Job, Settings
from aggregator.operations.backfill.distributed.tasks import EVENT_KEY, TASKS, run_task

__all__ = ["EVENT_KEY", "TASKS", "Job", "Settings", "run_task"]
