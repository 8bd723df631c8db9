"""Floors of the leaderboard index: which aggregates it holds, so a long tail is never indexed.

The leaderboard GSI (``lb`` S HASH, ``value`` N RANGE, keys only) is rewritten on every change
of an indexed aggregate: changing an index key attribute deletes the old entry and puts the new
one, two writes (Developer Guide, "Global secondary indexes", writes to an index). Most keys of
a large rule (planes by flights, posts by likes) never come near the top, yet today every one
of their updates pays those two writes. A **floor** per index partition value keeps them out.

The invariant
-------------
For every index partition value ``p`` with floor ``F(p)``, every aggregate of ``p`` whose
value is at least ``F(p)`` is in the index (carries the ``lb`` attribute). Aggregates below it
may or may not be. Without a floor (``F = -inf``) every aggregate is indexed, as before floors
existed, so existing tables and generations need no migration.

- ``F`` only rises. An aggregate left out of the index had a value below the floor its writer
  knew, which is at most today's, so raising it keeps the invariant; a writer with an older
  (lower) floor indexes more than needed, never less.
- A writer learns the new value of an item from the ``ALL_OLD`` image its update returns. When
  the floor is known, the update leaves ``lb`` alone and a second, conditional update fixes
  membership only when it must change: ``SET lb`` on condition ``value >= F`` (a concurrent
  update that lowered the value wins, and its own writer saw that no entry was needed) or
  ``REMOVE lb`` on condition ``value < F``. A crash between the two is healed by the
  redelivery: the checkpointed update then fails its condition and returns the item, whose
  membership is checked again.
- The floor is kept as an item of its own in the control partition (sort key
  ``leaderboard-floor#<p>``) that carries ``lb = p`` and ``value = F``, so it is an entry of
  the index itself, between the aggregates at or above the floor and those below: ``top`` reads
  it in the same ``Query`` that reads the ranking (no extra request) and knows where the
  indexed part stops being complete (:func:`aggregator.core.ranking.exact_top`).

Taking aggregates out
---------------------
Only once a floor has stood for :data:`REMOVAL_GRACE_SECONDS` (its item keeps ``raised_at``) do
writers take aggregates below it out of the index: the index is updated asynchronously and in no
order across items, and a reader that saw an entry gone before it saw the floor's new entry
would take the older, lower floor for proof. A failed removal is left for the item's next write
(an extra entry never misleads); a failed addition fails the item, so that its batch is
delivered again and the check runs again (in the at-least-once mode the retry adds the batch
again, as that mode's promise allows).

Raising it
----------
A writer counts the entries it adds to each index partition; every :data:`CHECK_EVERY` of them
it reads the first :data:`KEEP` entries of that partition (one keys-only ``Query``) and, when
there are that many aggregates, raises the floor to the value of the last one, on condition
that the stored floor is lower. So at least :data:`KEEP` aggregates are at or above the floor
when it rises; later decreases can leave fewer, and a ``top`` that cannot prove its answer
from the index then reads every aggregate of the rule (exact, slower). The floor of a time
bucket's partition gets the bucket's TTL.

Readers older than floors take the floor's entry for an aggregate: upgrade the applications that
call ``AggregateStore.top`` with (or before) the handler.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.clock import Clock
from aggregator.core.layout import TableLayout
from aggregator.dynamodb.batch import BATCH_GET_KEYS, WhenUnprocessed, batch_get
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.updates import Update, with_collection

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = ["CHECK_EVERY", "FLOOR_PREFIX", "KEEP", "IndexFloors", "floor_sort_key"]

FLOOR_PREFIX = "leaderboard-floor#"
"""Sort keys of floor items in the control partition start with it."""
KEEP = 128
"""Aggregates at or above a floor when it is raised (``top`` of up to 100 keys is then answered
from the index alone, with room for some keys to move down)."""
CHECK_EVERY = 32
"""Index entries a writer adds to one index partition between two checks of its floor."""
REFRESH_SECONDS = 60.0
"""How long a writer trusts a floor it read (an older floor is lower or equal: still safe)."""
REMOVAL_GRACE_SECONDS = 60.0
"""How long after a floor was raised writers wait before they take aggregates below it out of
the index. A GSI is updated asynchronously and in no particular order across items (Developer
Guide, "Global secondary indexes": reads are eventually consistent), so a reader could otherwise
see an aggregate's entry gone while it still sees the floor's older, lower entry, and take the
index for complete above it. Adding entries needs no wait: more entries never mislead."""
MAX_PARTITIONS = 10_000
"""Index partitions whose floor and count of new entries a writer keeps (time buckets bring new
ones every bucket); past it the memory is cleared, which costs reads, never correctness."""


def floor_sort_key(partition: str) -> str:
    """The sort key text of the floor item of index partition value ``partition``."""
    return f"{FLOOR_PREFIX}{partition}"


@dataclass(eq=False)
class IndexFloors:
    """The floors a writer knows, read and raised on its behalf (thread-safe).

    Parameters
    ----------
    client
        The DynamoDB client (boto3's, or a :class:`~aggregator.dynamodb.client.RequestClient`).
    table_name, layout
        Where the floors live: the user's table, among the control items
        (``layout.control_key``).
    keep, check_every, refresh_seconds, removal_grace_seconds
        :data:`KEEP`, :data:`CHECK_EVERY`, :data:`REFRESH_SECONDS`,
        :data:`REMOVAL_GRACE_SECONDS`.
    clock
        Epoch seconds (the writer's clock): a floor's raise time is compared across processes.
    """

    client: DynamoDBClient
    table_name: str
    layout: TableLayout
    _: KW_ONLY
    keep: int = KEEP
    check_every: int = CHECK_EVERY
    refresh_seconds: float = REFRESH_SECONDS
    removal_grace_seconds: float = REMOVAL_GRACE_SECONDS
    clock: Clock = time.time
    raised: int = field(default=0, init=False)
    """Floors this object raised (for benchmarks and tests)."""

    def __post_init__(self) -> None:
        self.requests = requests_of(self.client)
        self._lock = threading.Lock()
        # partition -> (floor, when it was raised, when it was read), seconds of the clock
        self._known: dict[str, tuple[Decimal | None, float, float]] = {}
        self._added: dict[str, int] = {}

    def _key(self, partition: str) -> dict[str, dict[str, str]]:
        return self.layout.control_key(floor_sort_key(partition))

    def load(self, partitions: Iterable[str]) -> None:
        """Read the floors of ``partitions`` not read in the last ``refresh_seconds`` (eventually
        consistent ``BatchGetItem``: an older floor is a lower one, which is safe). A failed
        read leaves a partition's floor unknown (``None``: index everything), never fails the
        batch."""
        now = self.clock()
        with self._lock:
            stale = sorted(
                p
                for p in set(partitions)
                if p not in self._known or now - self._known[p][2] >= self.refresh_seconds
            )
        for start in range(0, len(stale), BATCH_GET_KEYS):  # a failed request loses one chunk
            chunk = stale[start : start + BATCH_GET_KEYS]
            try:
                found = self._read(chunk)
            except (ClientError, BotoCoreError):
                continue
            with self._lock:
                if len(self._known) > MAX_PARTITIONS:
                    self._known.clear()
                for partition in chunk:
                    previous, previous_raised, _ = self._known.get(partition, (None, 0.0, 0.0))
                    floor, raised = found.get(partition, (None, 0.0))
                    if previous is not None and (floor is None or floor < previous):
                        # floors only rise: keep the higher one seen
                        floor, raised = previous, previous_raised
                    self._known[partition] = (floor, raised, now)

    def _read(self, partitions: list[str]) -> dict[str, tuple[Decimal, float]]:
        """``{partition: (floor, raised_at)}`` of the floor items found among ``partitions``
        (at most :data:`~aggregator.dynamodb.batch.BATCH_GET_KEYS`); a floor whose key stays
        unprocessed is left out, as a missing one: unknown, index everything
        (:attr:`~aggregator.dynamodb.batch.WhenUnprocessed.RETURN`)."""
        lay = self.layout
        read = batch_get(
            self.requests.send,
            self.table_name,
            [self._key(p) for p in partitions],
            consistent=False,
            when_unprocessed=WhenUnprocessed.RETURN,
        )
        found: dict[str, tuple[Decimal, float]] = {}
        for item in read.items:
            partition = item.get(lay.leaderboard_attribute, {}).get("S")
            value = item.get(lay.value_attribute, {}).get("N")
            raised = item.get("raised_at", {}).get("N", "0")
            if partition is not None and value is not None:
                found[partition] = (Decimal(value), float(raised))
        return found

    def get(self, partition: str) -> Decimal | None:
        """The floor of ``partition`` as last read (``None``: none known, index everything):
        what decides whether an aggregate must be in the index."""
        with self._lock:
            return self._known.get(partition, (None, 0.0, 0.0))[0]

    def removable(self, partition: str) -> bool:
        """Whether aggregates below :meth:`get`'s floor may be taken out of the index: the floor
        was raised at least :attr:`removal_grace_seconds` ago."""
        with self._lock:
            floor, raised, _ = self._known.get(partition, (None, 0.0, 0.0))
        return floor is not None and self.clock() - raised >= self.removal_grace_seconds

    def added(self, partition: str, expires: int | None = None) -> int:
        """Note an entry added to ``partition``'s index; every ``check_every`` of them, check
        its floor (:meth:`raise_floor`; ``expires``: the TTL of a time bucket's partition, which
        its floor item gets too). Returns the index WCU the check modelled (0 or the floor
        item's write: 1, plus its index entry's 1 or 2)."""
        with self._lock:
            if len(self._added) > MAX_PARTITIONS:
                self._added.clear()
            count = self._added.get(partition, 0) + 1
            self._added[partition] = count % self.check_every
        if count < self.check_every:
            return 0
        try:
            return self.raise_floor(partition, expires)
        except (ClientError, BotoCoreError):
            return 0  # the next check tries again

    def raise_floor(self, partition: str, expires: int | None = None) -> int:
        """Read the first :attr:`keep` aggregates of ``partition`` in the index (one keys-only
        ``Query``, largest first) and, when there are that many, raise the floor to the last
        one's value, on condition that the stored floor is lower. Returns the modelled WCU of
        the floor's write (0 when none)."""
        lay = self.layout
        response = self.requests.send(
            "query",
            TableName=self.table_name,
            IndexName=lay.leaderboard_index,
            KeyConditionExpression="#lb = :p",
            ExpressionAttributeNames={"#lb": lay.leaderboard_attribute},
            ExpressionAttributeValues={":p": {"S": partition}},
            ScanIndexForward=False,
            Limit=self.keep + 1,  # the floor's own entry may be among them
        )
        ranked = [
            Decimal(item[lay.value_attribute]["N"])
            for item in response.get("Items", [])
            if not lay.is_control_partition(lay.partition_of(item))
        ]
        if len(ranked) < self.keep:
            return 0
        candidate = ranked[self.keep - 1]
        known = self.get(partition)
        if known is not None and candidate <= known:
            return 0
        key = self._key(partition)
        now = self.clock()
        update = (
            Update()
            .set(lay.leaderboard_attribute, {"S": partition})
            .set(lay.value_attribute, {"N": str(candidate)})
            .set("raised_at", {"N": str(int(now))})
        )
        update = with_collection(update, lay, lay.control_pk)
        if expires is not None:  # a time bucket's partition: the floor goes with the bucket
            update = update.set(lay.ttl_attribute, {"N": str(expires)})
        update = update.where_missing_or_below(lay.value_attribute, {"N": str(candidate)})
        try:
            self.requests.send("update_item", TableName=self.table_name, Key=key, **update.render())
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return 0
        with self._lock:
            self._known[partition] = (candidate, float(int(now)), now)
            self.raised += 1
        return 1 + (1 if known is None else 2)
