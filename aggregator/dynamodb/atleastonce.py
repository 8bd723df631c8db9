"""At-least-once writes of aggregate items: one unconditional ``UpdateItem`` per item and batch.

Each update is ``ADD #value :delta SET #rule = :rule, #key = :key`` (plus ``#lb = :rule`` for
leaderboard rules whose index partition has no floor: :mod:`aggregator.dynamodb.floors`). Zero
deltas are not written. Guarantee: every record is applied at least once; a batch that Lambda
delivers again is added again.
"""

from __future__ import annotations

from aggregator.core.engine import BatchDeltas, CoalescedDelta
from aggregator.dynamodb.sizes import typed_item_size, write_units
from aggregator.dynamodb.write_parts import WriteParts
from aggregator.dynamodb.write_stats import WriteStats

__all__ = ["AtLeastOnceWrites"]


class AtLeastOnceWrites:
    """The at-least-once protocol for aggregate items (module docstring; an
    :class:`~aggregator.dynamodb.write_parts.ItemProtocol`)."""

    needs_shard = False

    def __init__(self, parts: WriteParts) -> None:
        self.parts = parts

    def select(self, batch: BatchDeltas, stats: WriteStats) -> list[CoalescedDelta]:
        """The batch's non-zero deltas (zero ones counted in ``stats.skipped_zero``)."""
        todo = [d for d in batch.deltas.values() if d.amount != 0 or d.count != 0]
        stats.skipped_zero += len(batch.deltas) - len(todo)
        return todo

    def write(self, delta: CoalescedDelta, shard_id: str | None, last: str) -> WriteStats:
        """``ADD`` ``delta`` to its item, then keep its index membership and empty-value TTL,
        and feed the heat meter of a ``write_shards: auto`` rule.

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError
            When the update fails (throttling past the retries included).
        """
        parts = self.parts
        stats = WriteStats()
        floor = parts.membership.floor(delta)
        index = parts.membership.action(delta, floor)
        request = parts.requests.add_request(delta, delta.amount, index=index)
        response = parts.requests.call("update_item", request, stats)
        stats.items_written = 1
        old = response.get("Attributes")
        stats.modelled_wcu, stats.modelled_index_wcu = parts.costs.units(
            delta, old=old, index=index
        )
        parts.membership.after_update(delta, floor, index, old, delta.amount, stats)
        parts.expiry.after_update(delta, old, delta.amount, stats)
        if parts.routing is not None and delta.auto_shards and shard_id is not None:
            # no checkpoints in this mode: this shard's own writes are all the meter sees
            units = write_units(typed_item_size(old)) if old and delta.slot is None else None
            parts.routing.heat.record(shard_id, delta.ref.rule, parts.clock(), units, 1)
        return stats
