"""What one invocation of the stream processor did (:class:`BatchOutcome`), and the engine's
counts it carries (:class:`BatchCounts`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aggregator.core.engine import BatchDeltas
from aggregator.dynamodb.write_stats import WriteStats

__all__ = ["BatchCounts", "BatchOutcome"]


@dataclass(slots=True, kw_only=True)
class BatchCounts:
    """What the engine counted in batches (:class:`~aggregator.core.engine.BatchDeltas`), summed
    by the local runner too (:class:`~aggregator.dev.runner.RunStats`).

    Attributes
    ----------
    records, self_writes, record_deltas, aggregate_items, failures
        Records in the batch, framework-owned records skipped, non-zero per-record deltas,
        coalesced aggregate items, and (record, rule) evaluation failures (dead-lettered).
    derived_inputs
        Records of source aggregates that derived rules evaluated.
    partial_inputs
        Records of partial aggregates (``write_shards``) added to their aggregate.
    expired, expired_retractions
        Deltas skipped because their time bucket was past its retention, and how many of them
        were retractions.
    """

    records: int = 0
    self_writes: int = 0
    record_deltas: int = 0
    aggregate_items: int = 0
    failures: int = 0
    derived_inputs: int = 0
    partial_inputs: int = 0
    expired: int = 0
    expired_retractions: int = 0

    def add_counts(self, other: BatchCounts) -> None:
        """Add ``other``'s counts to these."""
        for name in BatchCounts.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class BatchOutcome(BatchCounts):
    """What one invocation did (the engine's counts as :class:`BatchCounts`).

    Attributes
    ----------
    response
        The Lambda response: ``{"batchItemFailures": [{"itemIdentifier": seq}]}`` (empty list on
        success) and, for tumbling-window events, ``"state"``.
    malformed
        Records that could not be read as stream records (dead-lettered with rule ``*``).
    failure_causes
        Dead-lettered (record, rule) failures per :class:`~aggregator.core.exceptions.FailureCause`.
    write
        The writer's counters.
    retry_from
        Sequence number Lambda must retry from, or ``None``.
    errors
        Messages of write failures.
    flushed
        Window mode: whether this invocation applied the window's deltas.
    routing_switches
        Switches of ``write_shards: auto`` rules this invocation persisted
        (:mod:`aggregator.dynamodb.routing`).
    top_observations
        Records of aggregates of ``leaderboard_store: list`` rules merged into their top lists
        (:mod:`aggregator.dynamodb.top_list_items`).
    threshold_events
        Threshold crossings sent to EventBridge (:mod:`aggregator.runtime.threshold_events`).
    expired_crossings
        Records of time buckets past their retention whose crossings were left out.
    """

    response: dict[str, Any]
    malformed: int = 0
    failure_causes: Counter[str] = field(default_factory=Counter)
    write: WriteStats = field(default_factory=WriteStats)
    retry_from: str | None = None
    errors: list[str] = field(default_factory=list)
    flushed: bool = False
    routing_switches: int = 0
    top_observations: int = 0
    threshold_events: int = 0
    expired_crossings: int = 0

    @classmethod
    def of(cls, batch: BatchDeltas) -> BatchOutcome:
        """The outcome of evaluating ``batch``, before anything is written."""
        return cls(
            response={"batchItemFailures": []},
            records=batch.records,
            self_writes=batch.self_writes,
            record_deltas=batch.record_deltas,
            aggregate_items=len(batch.deltas),
            failures=len(batch.failures),
            derived_inputs=batch.derived_inputs,
            partial_inputs=batch.partial_inputs,
            malformed=batch.malformed,
            failure_causes=Counter(str(f.cause) for f in batch.failures),
            expired=batch.expired,
            expired_retractions=batch.expired_retractions,
        )
