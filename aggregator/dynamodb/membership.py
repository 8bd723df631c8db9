"""Leaderboard index membership: which aggregate items are in their index partition, kept
against the partition's floor (:mod:`aggregator.dynamodb.floors`).

Without a floor every leaderboard item's update sets the index attribute. With one, an item
belongs in the index only while its value is at least the floor: the update of an item guesses
from the value this writer saw last (:meth:`IndexMembership.action`), and once the update has
returned the item's old image, :meth:`IndexMembership.after_update` fixes the guess with one more
conditional ``UpdateItem`` when the new value says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.engine import CoalescedDelta
from aggregator.core.numbers import add
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.floors import IndexFloors
from aggregator.dynamodb.item_requests import ItemRequests
from aggregator.dynamodb.sizes import typed_item_size, write_units
from aggregator.dynamodb.updates import IndexAction, Update, index_partition
from aggregator.dynamodb.write_stats import WriteStats

__all__ = ["SEEN_ITEMS", "IndexMembership"]

SEEN_ITEMS = 20_000
"""Leaderboard items whose last seen value a writer keeps to guess index membership (about
300 bytes each in CPython); past it the memory is cleared and rebuilt as items are written."""


class IndexMembership:
    """The index membership of a writer's leaderboard items (module docstring).

    Parameters
    ----------
    floors
        The index partitions' floors as this writer knows them.
    requests
        Sends the membership fixes (its table and layout).

    Attributes
    ----------
    seen
        Leaderboard items' ``(value, in the index)`` as this writer last saw them, by sort key
        (its guess of what an update will do to them; bounded by :data:`SEEN_ITEMS`).
    """

    def __init__(self, floors: IndexFloors, requests: ItemRequests) -> None:
        self.floors = floors
        self.requests = requests
        self.layout = requests.layout
        self.seen: dict[str, tuple[Decimal, bool]] = {}

    def load(self, deltas: Iterable[CoalescedDelta]) -> None:
        """Read the floors of the leaderboard deltas' index partitions that are not known
        (:meth:`~aggregator.dynamodb.floors.IndexFloors.load`)."""
        self.floors.load(index_partition(d) for d in deltas if d.leaderboard)

    def floor(self, delta: CoalescedDelta) -> Decimal | None:
        """The floor of ``delta``'s index partition as this writer knows it (``None``: no
        floor, or not a leaderboard item; the update then sets the index attribute)."""
        if not delta.leaderboard:
            return None
        return self.floors.get(index_partition(delta))

    def action(self, delta: CoalescedDelta, floor: Decimal | None) -> IndexAction:
        """What the update of ``delta``'s item does to its index attribute: set it without a
        floor; with one, what the value this writer saw last plus ``delta.amount`` calls for
        (a guess: another shard may have changed the value since, which :meth:`after_update`
        checks), an item not seen yet taken for a new one."""
        if floor is None:
            return "set"
        seen = self.seen.get(delta.ref.sort_key)
        # an item not seen yet is taken for a new one (a long tail's items mostly are)
        value, indexed = (Decimal(0), False) if seen is None else seen
        wanted = add(value, delta.amount) >= floor
        if wanted and not indexed:
            return "set"
        if not wanted and indexed and self.floors.removable(index_partition(delta)):
            return "remove"
        return "keep"

    def after_update(
        self,
        delta: CoalescedDelta,
        floor: Decimal | None,
        index: IndexAction,
        old: Mapping[str, Any] | None,
        amount: Decimal,
        stats: WriteStats,
    ) -> None:
        """Keep the index's invariant after an applied update of ``amount`` that did ``index``
        to an item that was ``old`` (``ALL_OLD``): count a new entry (the floor's check) and,
        with a floor, fix the item's membership for its new value.

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            As :meth:`fix`.
        """
        if not delta.leaderboard:
            return
        lay = self.layout
        before = lay.leaderboard_attribute in (old or {})
        indexed = {"set": True, "remove": False}.get(index, before)
        if indexed and not before:
            self._count_entry(delta, stats)
        previous = (old or {}).get(lay.value_attribute, {}).get("N")
        value = add(Decimal(previous or 0), amount)
        if floor is not None:
            indexed = self.fix(delta, floor, value, indexed, old, stats)
        self.remember(delta, value, indexed)

    def remember(self, delta: CoalescedDelta, value: Decimal, indexed: bool) -> None:
        """Note ``delta``'s item's value and membership as last seen."""
        if len(self.seen) >= SEEN_ITEMS:
            self.seen.clear()  # a guess only: forgetting costs a second update at worst
        self.seen[delta.ref.sort_key] = (value, indexed)

    def check(
        self,
        delta: CoalescedDelta,
        floor: Decimal | None,
        item: Mapping[str, Any] | None,
        stats: WriteStats,
    ) -> None:
        """:meth:`fix` for ``item`` as it is now (an update found it already applied and
        returned it); nothing for a missing item. Without a known floor (none, or its read
        failed) the item is put into the index if it is not there: the update that was applied
        may have left it out under a floor this attempt could not read.

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            As :meth:`fix`.
        """
        if not item or not delta.leaderboard:
            return
        lay = self.layout
        value = item.get(lay.value_attribute, {}).get("N")
        if value is None:
            return
        indexed = lay.leaderboard_attribute in item
        indexed = self.fix(
            delta, floor, Decimal(value), indexed, item, stats, unknown_floor=floor is None
        )
        self.remember(delta, Decimal(value), indexed)

    def _count_entry(self, delta: CoalescedDelta, stats: WriteStats) -> None:
        bucket = delta.ref.bucket
        units = self.floors.added(
            index_partition(delta), None if bucket is None else bucket.expires
        )
        stats.modelled_wcu += units
        stats.modelled_index_wcu += units

    def fix(
        self,
        delta: CoalescedDelta,
        floor: Decimal | None,
        value: Decimal,
        indexed: bool,
        item: Mapping[str, Any] | None,
        stats: WriteStats,
        *,
        unknown_floor: bool = False,
    ) -> bool:
        """Put ``delta``'s item into the index when ``value`` is at least ``floor`` and it is not
        there, or take it out when ``value`` is below and it is: one ``UpdateItem`` on condition
        that the value still says so (a concurrent update that changed it is followed by its own
        writer's check). ``item`` is the item before (sizes the write). Returns whether the
        item is in the index now, as far as this writer knows.

        Taking an item out waits until the floor has stood for
        :data:`~aggregator.dynamodb.floors.REMOVAL_GRACE_SECONDS`, and a failed removal is left
        for the item's next write. ``unknown_floor``: the floor could not be read; the item is
        put into the index unconditionally if it is not there (an extra entry never misleads).

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            When an addition fails other than by its condition: the item is retried with its
            batch, whose checkpointed update then returns the item and this check runs again.
        """
        partition = index_partition(delta)
        wanted = unknown_floor or (floor is not None and value >= floor)
        if wanted == indexed:
            return indexed
        if not wanted and not self.floors.removable(partition):
            return indexed
        update = self._membership_update(partition, wanted, floor, unknown_floor)
        try:
            self.requests.send_update(delta, update, stats)
        except (ClientError, BotoCoreError) as exc:
            if (
                isinstance(exc, ClientError)
                and error_code(exc) == "ConditionalCheckFailedException"
            ):
                return indexed
            if not wanted:
                return indexed  # an extra entry never misleads: the next write tries again
            raise
        units = write_units(typed_item_size(item)) if item else 1
        stats.modelled_wcu += units + 1
        stats.modelled_index_wcu += units + 1
        if wanted:
            stats.index_entries_added += 1
            self._count_entry(delta, stats)
        else:
            stats.index_entries_removed += 1
        return wanted

    def _membership_update(
        self, partition: str, wanted: bool, floor: Decimal | None, unknown_floor: bool
    ) -> Update:
        """The update that puts an item into index ``partition`` (``wanted``) or takes it out,
        on condition that its value still calls for it (:meth:`fix`)."""
        lay = self.layout
        if not wanted:
            return (
                Update()
                .remove(lay.leaderboard_attribute)
                .where_below(lay.value_attribute, {"N": str(floor)})
            )
        update = Update().set(lay.leaderboard_attribute, {"S": partition})
        if floor is not None and not unknown_floor:
            return update.where_at_least(lay.value_attribute, {"N": str(floor)})
        # never re-create an item that is gone (a time bucket past its TTL)
        return update.where_exists(lay.value_attribute)
