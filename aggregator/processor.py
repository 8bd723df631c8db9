"""One batch, end to end: Lambda-shaped event -> engine -> writer -> Lambda response.

The Lambda handler and the local stream runner both call :meth:`StreamProcessor.process_event`,
so what runs locally is what runs in Lambda.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from .engine import Engine
from .exceptions import WriteError
from .records import StreamRecord
from .writer import Writer, WriteStats

__all__ = ["BatchOutcome", "StreamProcessor"]


@dataclass(slots=True)
class BatchOutcome:
    """What one invocation did.

    Attributes
    ----------
    response
        The Lambda response: ``{"batchItemFailures": [{"itemIdentifier": seq}]}`` (empty list on
        success) and, for tumbling-window events, ``"state"``.
    records, self_writes, record_deltas, aggregate_items, failures
        Records in the batch, framework-owned records skipped, non-zero per-record deltas,
        coalesced aggregate items, and (record, rule) evaluation failures (dead-lettered).
    write
        The writer's counters.
    retry_from
        Sequence number Lambda must retry from, or ``None``.
    errors
        Messages of write failures.
    """

    response: dict[str, Any]
    records: int = 0
    self_writes: int = 0
    record_deltas: int = 0
    aggregate_items: int = 0
    failures: int = 0
    write: WriteStats = field(default_factory=WriteStats)
    retry_from: str | None = None
    errors: list[str] = field(default_factory=list)


class StreamProcessor:
    """Runs the engine and the writer over one Lambda-format stream event.

    Parameters
    ----------
    engine
        Evaluates the rules.
    writer
        Applies coalesced deltas in the configured mode.
    metrics
        Optional Powertools ``Metrics``; when given, per-batch counts are added (CloudWatch EMF).
    logger
        Optional Powertools ``Logger`` for evaluation failures and write errors.
    """

    def __init__(
        self,
        engine: Engine,
        writer: Writer,
        *,
        metrics: Any | None = None,
        logger: Any | None = None,
    ) -> None:
        self.engine = engine
        self.writer = writer
        self.metrics = metrics
        self.logger = logger

    def process_event(self, event: dict[str, Any]) -> BatchOutcome:
        """Process ``event["Records"]`` (records of one shard, in order).

        Returns
        -------
        BatchOutcome
            ``outcome.response`` is what the Lambda handler returns. Write failures never raise:
            they become ``batchItemFailures`` from the smallest sequence number not yet applied
            to every aggregate item.
        """
        records = [StreamRecord(r) for r in event.get("Records") or []]
        shard_id = event.get("shardId")
        batch = self.engine.process(records)
        outcome = BatchOutcome(
            response={"batchItemFailures": []},
            records=batch.records,
            self_writes=batch.self_writes,
            record_deltas=batch.record_deltas,
            aggregate_items=len(batch.deltas),
            failures=len(batch.failures),
        )
        if "window" in event or "shardId" in event:
            outcome.response["state"] = dict(event.get("state") or {})

        if batch.failures:
            if self.logger is not None:
                for f in batch.failures:
                    self.logger.warning(
                        "rule could not evaluate record; dead-lettered",
                        extra={
                            "sequence_number": f.sequence_number,
                            "rule": f.rule,
                            "reason": f.reason,
                        },
                    )
            try:
                outcome.write.add(self.writer.write_dead_letters(batch.failures, shard_id=shard_id))
            except WriteError as exc:
                # Nothing of this batch has been applied yet: retry all of it.
                outcome.errors.append(str(exc))
                outcome.retry_from = batch.first_sequence_number
        if outcome.retry_from is None and batch.deltas:
            result = self.writer.apply(batch, shard_id=shard_id)
            outcome.write.add(result.stats)
            outcome.errors.extend(result.errors)
            outcome.retry_from = result.retry_from
        if outcome.retry_from is not None:
            outcome.response["batchItemFailures"] = [{"itemIdentifier": outcome.retry_from}]
            if self.logger is not None:
                self.logger.error(
                    "batch partially applied; reporting failure",
                    extra={"retry_from": outcome.retry_from, "errors": outcome.errors[:10]},
                )
        self._emit_metrics(outcome, records)
        return outcome

    def _emit_metrics(self, outcome: BatchOutcome, records: list[StreamRecord]) -> None:
        m = self.metrics
        if m is None:
            return
        m.add_metric(name="RecordsReceived", unit=MetricUnit.Count, value=outcome.records)
        m.add_metric(name="SelfWritesSkipped", unit=MetricUnit.Count, value=outcome.self_writes)
        m.add_metric(name="Deltas", unit=MetricUnit.Count, value=outcome.record_deltas)
        m.add_metric(
            name="AggregateItemsWritten", unit=MetricUnit.Count, value=outcome.write.items_written
        )
        m.add_metric(name="ModelledWCU", unit=MetricUnit.Count, value=outcome.write.modelled_wcu)
        m.add_metric(name="DeadLetters", unit=MetricUnit.Count, value=outcome.write.dead_letters)
        m.add_metric(name="FailedItems", unit=MetricUnit.Count, value=outcome.write.failed_items)
        times = [t for t in (r.approximate_creation_time for r in records) if t is not None]
        if times:
            age = max(0.0, time.time() - float(max(times)))
            m.add_metric(name="NewestRecordAgeSeconds", unit=MetricUnit.Seconds, value=age)
