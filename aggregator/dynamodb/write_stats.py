"""What a writer reports: its counters (:class:`WriteStats`) and a batch's outcome
(:class:`WriteResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

__all__ = ["WriteResult", "WriteStats"]


@dataclass(slots=True)
class WriteStats:
    """Counters for one batch's writes.

    Attributes
    ----------
    requests
        DynamoDB requests sent (each attempt counts, including retries made by this module).
    items_written
        Aggregate items successfully updated.
    modelled_wcu
        Write capacity units by AWS's pricing rules (table plus leaderboard GSI).
    modelled_index_wcu
        The part of ``modelled_wcu`` spent on leaderboards: the GSI, and the top lists' writes
        (``leaderboard_store: list``).
    reported_wcu
        Sum of ``ConsumedCapacity.CapacityUnits`` the endpoint returned.
    skipped_zero
        Coalesced deltas that summed to zero and needed no write in this mode.
    throttle_retries
        Requests retried by this module after a throttling error.
    conditional_recoveries
        Exactly-once mode: updates whose checkpoint condition failed and were recomputed from the
        item's checkpoint (an earlier attempt had applied part of the batch).
    already_applied
        Exactly-once mode: items whose checkpoint showed the batch was already applied to them.
    pruned_checkpoints
        Exactly-once mode: stale checkpoints of other shards removed.
    expired_skipped
        Items not written because their time bucket passed its retention between evaluation and
        writing (an ``ADD`` would recreate a bucket that TTL may have deleted).
    failed_items
        Items whose update still failed after retries.
    emptied_values
        Value items (kinds with one item per value) whose count fell to zero and were given a
        TTL, one extra update each.
    target_writes
        Updates of application items that target rules keep their sums on.
    missing_targets
        Target deltas whose item did not exist: written to the rule's ledger instead
        (:mod:`aggregator.dynamodb.targets`).
    target_checkpoints_evicted
        Live checkpoints removed from a full checkpoint map on a target item.
    ledger_carries
        Exactly-once and window modes: ledger items of target rules whose checkpoints were
        raised to those of a deleted target item (:mod:`aggregator.dynamodb.ledger_carries`).
    unusable_targets
        Target deltas whose item holds the target attribute (or the checkpoint map) as another
        type than the update needs (``likeTally = "lots"``): written to the rule's ledger
        instead, as for a missing item, so the shard moves on.
    dead_letters
        Dead letters recorded (in the table, or in the last-resort queue) for records a rule
        could not evaluate and malformed records.
    dead_letters_compacted
        Dead letters whose record did not fit whole as JSON (stored compressed, by keys only, or
        by digest only; :mod:`aggregator.dynamodb.deadletters`).
    dead_letter_fallbacks
        Dead letters rejected by DynamoDB and written again in their minimal form.
    dead_letters_to_queue
        Dead letters sent to the last-resort queue because DynamoDB rejected even the minimal
        form.
    top_list_writes, top_list_reads
        Conditional writes of top lists (``leaderboard_store: list``; failed ones too), whose
        WCU are in ``modelled_wcu`` and ``modelled_index_wcu``, and their strongly consistent
        reads (a merge that changes nothing by what its process knows reads the list first).
    index_entries_added, index_entries_removed
        Items put into or taken out of the leaderboard index by a second update, because their
        value crossed their index partition's floor (:mod:`aggregator.dynamodb.floors`).
    """

    requests: int = 0
    items_written: int = 0
    modelled_wcu: int = 0
    modelled_index_wcu: int = 0
    reported_wcu: Decimal = Decimal(0)
    skipped_zero: int = 0
    throttle_retries: int = 0
    conditional_recoveries: int = 0
    already_applied: int = 0
    pruned_checkpoints: int = 0
    expired_skipped: int = 0
    failed_items: int = 0
    emptied_values: int = 0
    target_writes: int = 0
    missing_targets: int = 0
    target_checkpoints_evicted: int = 0
    unusable_targets: int = 0
    ledger_carries: int = 0
    dead_letters: int = 0
    dead_letters_compacted: int = 0
    dead_letter_fallbacks: int = 0
    dead_letters_to_queue: int = 0
    top_list_writes: int = 0
    top_list_reads: int = 0
    index_entries_added: int = 0
    index_entries_removed: int = 0

    def add(self, other: WriteStats) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class WriteResult:
    """Outcome of :meth:`~aggregator.dynamodb.writer.Writer.apply`.

    ``retry_from`` is the sequence number Lambda must retry from (the smallest first sequence
    number among items that could not be written), or ``None`` when everything was applied.
    """

    stats: WriteStats = field(default_factory=WriteStats)
    retry_from: str | None = None
    errors: list[str] = field(default_factory=list)
