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

Raising it
----------
A writer counts the entries it adds to each index partition; every :data:`CHECK_EVERY` of them
it reads the first :data:`KEEP` entries of that partition (one keys-only ``Query``) and, when
there are that many aggregates, raises the floor to the value of the last one, on condition
that the stored floor is lower. So at least :data:`KEEP` aggregates are at or above the floor
when it rises; later decreases can leave fewer, and a ``top`` that cannot prove its answer
from the index then reads every aggregate of the rule (exact, slower).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.layout import TableLayout
from aggregator.dynamodb.updates import Update

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
_BATCH_GET_KEYS = 100
"""``BatchGetItem`` reads at most 100 items a request (DynamoDB API Reference, BatchGetItem)."""


def floor_sort_key(partition: str) -> str:
    """The sort key text of the floor item of index partition value ``partition``."""
    return f"{FLOOR_PREFIX}{partition}"


class IndexFloors:
    """The floors a writer knows, read and raised on its behalf (thread-safe).

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table_name, layout
        The user's table and the framework's layout in it.
    keep, check_every, refresh_seconds
        :data:`KEEP`, :data:`CHECK_EVERY`, :data:`REFRESH_SECONDS`.
    clock
        Seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        layout: TableLayout,
        *,
        keep: int = KEEP,
        check_every: int = CHECK_EVERY,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.layout = layout
        self.keep = keep
        self.check_every = check_every
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, tuple[Decimal | None, float]] = {}
        self._added: dict[str, int] = {}
        self.raised = 0
        """Floors this object raised (for benchmarks and tests)."""

    def _key(self, partition: str) -> dict[str, dict[str, str]]:
        return self.layout.item_key(self.layout.control_pk, floor_sort_key(partition))

    def load(self, partitions: Iterable[str]) -> None:
        """Read the floors of ``partitions`` not read in the last ``refresh_seconds`` (eventually
        consistent ``BatchGetItem``: an older floor is a lower one, which is safe). A failed
        read leaves a partition's floor unknown (``None``: index everything), never fails the
        batch."""
        now = self._clock()
        with self._lock:
            stale = sorted(
                p
                for p in set(partitions)
                if p not in self._known or now - self._known[p][1] >= self.refresh_seconds
            )
        for start in range(0, len(stale), _BATCH_GET_KEYS):
            chunk = stale[start : start + _BATCH_GET_KEYS]
            try:
                found = self._read(chunk)
            except (ClientError, BotoCoreError):
                continue
            with self._lock:
                for partition in chunk:
                    previous = self._known.get(partition, (None, 0.0))[0]
                    floor = found.get(partition)
                    if previous is not None and (floor is None or floor < previous):
                        floor = previous  # floors only rise: keep the higher one seen
                    self._known[partition] = (floor, now)

    def _read(self, partitions: list[str]) -> dict[str, Decimal]:
        lay = self.layout
        keys = [self._key(p) for p in partitions]
        found: dict[str, Decimal] = {}
        request: dict[str, Any] = {self.table_name: {"Keys": keys}}
        for _ in range(8):  # unprocessed keys are retried a few times, then left unknown
            response = self.client.batch_get_item(RequestItems=request)
            for item in response.get("Responses", {}).get(self.table_name, []):
                partition = item.get(lay.leaderboard_attribute, {}).get("S")
                value = item.get(lay.value_attribute, {}).get("N")
                if partition is not None and value is not None:
                    found[partition] = Decimal(value)
            request = response.get("UnprocessedKeys") or {}
            if not request:
                break
        return found

    def get(self, partition: str) -> Decimal | None:
        """The floor of ``partition`` as last read (``None``: none known, index everything)."""
        with self._lock:
            return self._known.get(partition, (None, 0.0))[0]

    def added(self, partition: str) -> int:
        """Note an entry added to ``partition``'s index; every ``check_every`` of them, check
        its floor (:meth:`raise_floor`). Returns the index WCU the check modelled (0 or the
        floor item's write: 1, plus its index entry's 1 or 2)."""
        with self._lock:
            count = self._added.get(partition, 0) + 1
            self._added[partition] = count % self.check_every
        if count < self.check_every:
            return 0
        try:
            return self.raise_floor(partition)
        except (ClientError, BotoCoreError):
            return 0  # the next check tries again

    def raise_floor(self, partition: str) -> int:
        """Read the first :attr:`keep` aggregates of ``partition`` in the index (one keys-only
        ``Query``, largest first) and, when there are that many, raise the floor to the last
        one's value, on condition that the stored floor is lower. Returns the modelled WCU of
        the floor's write (0 when none)."""
        lay = self.layout
        response = self.client.query(
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
            if lay.partition_of(item) != lay.control_pk
        ]
        if len(ranked) < self.keep:
            return 0
        candidate = ranked[self.keep - 1]
        known = self.get(partition)
        if known is not None and candidate <= known:
            return 0
        key = self._key(partition)
        # without a sort key, framework items also carry the collection attribute
        extra = {
            name: value
            for name, value in lay.item_fields(lay.control_pk, floor_sort_key(partition)).items()
            if name not in key
        }
        update = (
            Update()
            .set(lay.leaderboard_attribute, {"S": partition})
            .set(lay.value_attribute, {"N": str(candidate)})
        )
        for name, value in extra.items():
            update = update.set(name, {"S": value})
        update = update.where_missing_or_below(lay.value_attribute, {"N": str(candidate)})
        try:
            self.client.update_item(TableName=self.table_name, Key=key, **update.render())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return 0
        with self._lock:
            self._known[partition] = (candidate, self._clock())
            self.raised += 1
        return 1 + (1 if known is None else 2)
