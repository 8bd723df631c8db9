"""The processor's metrics and logs: what it calls on Powertools' ``Metrics`` and ``Logger``
(:class:`MetricsSink`, :class:`LogSink`), and the per-batch metrics (:func:`emit_metrics`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from aws_lambda_powertools.metrics import MetricUnit, single_metric

from aggregator.core.records import MalformedRecord, StreamRecord
from aggregator.dynamodb.costs import WriteObservation, WriteObserver
from aggregator.dynamodb.top_list_items import TOP_PREFIX
from aggregator.runtime.outcome import BatchOutcome

__all__ = ["LogSink", "MetricsSink", "RuleWcu", "emit_metrics"]


class MetricsSink(Protocol):
    """What the processor calls on Powertools' ``Metrics`` (which satisfies it): per-batch
    counts in CloudWatch's embedded metric format."""

    @property
    def namespace(self) -> str | None:
        """The metrics' namespace (also of the per-cause metric)."""
        ...

    @property
    def default_dimensions(self) -> dict[str, str]:
        """Dimensions every metric carries (also the per-cause metric)."""
        ...

    def add_metric(self, name: str, unit: MetricUnit, value: float) -> None:
        """Add ``value`` to metric ``name``."""
        ...


class LogSink(Protocol):
    """What the processor calls on Powertools' ``Logger`` (or a :class:`logging.Logger`)."""

    def warning(self, msg: object, *, extra: Mapping[str, object] | None = None) -> None:
        """Log ``msg`` at level WARNING with ``extra`` fields."""
        ...

    def error(self, msg: object, *, extra: Mapping[str, object] | None = None) -> None:
        """Log ``msg`` at level ERROR with ``extra`` fields."""
        ...


class RuleWcu:
    """A write observer (:class:`~aggregator.dynamodb.costs.WriteObservation`) that sums the
    modelled WCU of each rule's writes of its aggregate items (table and leaderboard index) and
    of its top lists until :meth:`drain`; chained after ``then`` when given. A target rule's
    writes of application items are not observed (:mod:`aggregator.dynamodb.targets` charges
    them to the batch's ``ModelledWCU`` only)."""

    def __init__(self, then: WriteObserver | None = None) -> None:
        self.then = then
        self.totals: dict[str, int] = {}

    def __call__(self, observation: WriteObservation) -> None:
        sort_key = observation.sort_key
        if sort_key.startswith(TOP_PREFIX):  # a top list: its index partition names the rule
            sort_key = sort_key[len(TOP_PREFIX) :]
        storage = sort_key.partition("#")[0]
        rule = storage.partition("@")[0]  # a rebuilt generation counts for its rule
        self.totals[rule] = self.totals.get(rule, 0) + observation.wcu + observation.index_wcu
        if self.then is not None:
            self.then(observation)

    def drain(self) -> dict[str, int]:
        """The totals since the last drain (cleared)."""
        totals, self.totals = self.totals, {}
        return totals


def _dimensioned(m: MetricsSink, name: str, value: float, dimension: str, of: str) -> None:
    """One metric with a dimension of its own, in an EMF blob of its own (so that the batch's
    metrics keep their dimensions), with the batch metrics' ``service`` dimension too (Metrics
    adds it to its own blob only), so that two stacks' metrics stay apart."""
    with single_metric(
        name=name,
        unit=MetricUnit.Count,
        value=value,
        namespace=m.namespace,
        default_dimensions=m.default_dimensions,
    ) as metric:
        service = getattr(m, "service", None)
        if service:
            metric.add_dimension(name="service", value=str(service))
        metric.add_dimension(name=dimension, value=of)


def emit_metrics(
    m: MetricsSink,
    outcome: BatchOutcome,
    records: Sequence[StreamRecord | MalformedRecord],
    wcu_by_rule: Mapping[str, int] | None = None,
) -> None:
    """Add one invocation's counts to ``m`` (CloudWatch embedded metric format): the batch's
    counts and the writer's, ``DeadLettersByCause`` with a ``Cause`` dimension,
    ``ModelledWCUByRule`` with a ``Rule`` dimension (``wcu_by_rule``: :class:`RuleWcu`), and the
    age of the newest record (``NewestRecordAgeSeconds``)."""
    w = outcome.write
    counts = {
        "RecordsReceived": outcome.records,
        "SelfWritesSkipped": outcome.self_writes,
        "Deltas": outcome.record_deltas,
        "DerivedInputs": outcome.derived_inputs,
        "PartialInputs": outcome.partial_inputs,
        "ExpiredBucketDeltasSkipped": outcome.expired,
        "AggregateItemsWritten": w.items_written,
        "ConditionalCheckRecoveries": w.conditional_recoveries,
        "ThrottleRetries": w.throttle_retries,
        "DeadLetters": w.dead_letters,
        "MalformedRecords": outcome.malformed,
        "DeadLettersCompacted": w.dead_letters_compacted,
        "DeadLetterFallbacks": w.dead_letter_fallbacks,
        "DeadLettersToQueue": w.dead_letters_to_queue,
        "FailedItems": w.failed_items,
        "ModelledWCU": w.modelled_wcu,
        "EmptiedValueItems": w.emptied_values,
        "TargetItemsWritten": w.target_writes,
        "MissingTargets": w.missing_targets,
        "UnusableTargets": w.unusable_targets,
        "LedgerCarries": w.ledger_carries,
        "TargetCheckpointsEvicted": w.target_checkpoints_evicted,
    }
    for name, value in counts.items():
        m.add_metric(name=name, unit=MetricUnit.Count, value=value)
    for cause, count in sorted(outcome.failure_causes.items()):
        _dimensioned(m, "DeadLettersByCause", count, "Cause", cause)
    for rule, units in sorted((wcu_by_rule or {}).items()):
        _dimensioned(m, "ModelledWCUByRule", units, "Rule", rule)
    times = [
        t
        for t in (r.approximate_creation_time for r in records if isinstance(r, StreamRecord))
        if t is not None
    ]
    if times:
        age = max(0.0, time.time() - float(max(times)))
        m.add_metric(name="NewestRecordAgeSeconds", unit=MetricUnit.Seconds, value=age)
