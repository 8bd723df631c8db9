"""TTL expiry of value items whose count fell to zero (kinds with one item per value)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from aggregator.core.clock import Clock
from aggregator.core.engine import CoalescedDelta
from aggregator.core.numbers import add
from aggregator.dynamodb.item_requests import ItemRequests
from aggregator.dynamodb.sizes import typed_item_size, write_units
from aggregator.dynamodb.updates import Update
from aggregator.dynamodb.write_stats import WriteStats

__all__ = ["DEFAULT_EMPTY_VALUE_RETENTION_SECONDS", "EmptyValueExpiry"]

DEFAULT_EMPTY_VALUE_RETENTION_SECONDS = 25 * 3600
"""How long a value item whose count fell to zero stays before its TTL lets DynamoDB delete it
(:class:`EmptyValueExpiry`): longer than the template's ``MaximumRecordAgeInSeconds`` (24
hours), like the checkpoint retention."""


class EmptyValueExpiry:
    """Gives a value item whose count an update brought to zero a TTL.

    Parameters
    ----------
    requests
        Sends the update (its table and layout).
    clock
        Epoch seconds.
    retention_seconds
        How long after its last write such an item stays: the TTL is now plus this.
    """

    def __init__(
        self,
        requests: ItemRequests,
        *,
        clock: Clock = time.time,
        retention_seconds: int = DEFAULT_EMPTY_VALUE_RETENTION_SECONDS,
    ) -> None:
        self.requests = requests
        self.clock = clock
        self.retention_seconds = retention_seconds

    def after_update(
        self,
        delta: CoalescedDelta,
        old: Mapping[str, Mapping[str, Any]] | None,
        amount: Decimal,
        stats: WriteStats,
    ) -> None:
        """Give ``delta``'s value item, which an update of ``amount`` found as ``old``
        (``ALL_OLD``), a TTL when its count is now zero: now plus :attr:`retention_seconds`, on
        condition that its count is still zero (a later update, which removes the TTL, wins).
        Such items are read past by ``min``/``max`` and hold no value, so without it they would
        pile up in front of the extreme.

        Exactly-once survives the deletion: every update of the item removes the TTL and one
        that leaves it at zero sets it again, so the item is deleted no sooner than the
        retention after its last write, when no record that touched it can be delivered again
        (the retention exceeds the event source mapping's ``MaximumRecordAgeInSeconds``, as for
        pruned checkpoints). Items in a time bucket keep the bucket's TTL instead. Best effort:
        a failure leaves the item at zero, to be retried on its next write (counted in
        ``stats.emptied_values`` and its modelled WCU when applied)."""
        if not delta.per_value or delta.ref.bucket is not None:
            return
        layout = self.requests.layout
        previous = (old or {}).get(layout.value_attribute, {}).get("N")
        if add(Decimal(previous or 0), amount) != 0:
            return
        expires = int(self.clock()) + self.retention_seconds
        update = (
            Update()
            .set(layout.ttl_attribute, {"N": str(expires)})
            .where_equals(layout.value_attribute, {"N": "0"})
        )
        if not self.requests.best_effort(delta, update, stats):
            return
        stats.emptied_values += 1
        stats.modelled_wcu += write_units(typed_item_size(old)) if old else 1
