"""One invocation, end to end: Lambda-shaped event -> engine -> writer -> Lambda response.

The Lambda handler and the local stream runner both call :meth:`StreamProcessor.process_event`,
so what runs locally is what runs in Lambda.

Flush policies
--------------
``batch`` (modes ``exactly-once`` and ``at-least-once``)
    Each invocation applies its own coalesced deltas; ``state`` is passed through unchanged.
``window`` (mode ``window``)
    Coalesced deltas (with their sequence numbers) accumulate in the tumbling window's ``state``
    and are applied once, with the exactly-once protocol, when Lambda says the window ends
    (``isFinalInvokeForWindow``), when it ended early (``isWindowTerminatedEarly``: the next
    invocation starts from a fresh state, Lambda Developer Guide / aws-lambda-go
    ``TimeWindowProperties``), or when the state would grow past ``state_limit_bytes`` (Lambda
    allows 1 MB per shard and terminates the window early beyond it). A failed flush raises, so
    Lambda retries the invocation with the same input state; the checkpoints make the retry exact.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.batch_state import decode_batch, encode_batch
from aggregator.core.clock import Clock
from aggregator.core.engine import BatchDeltas, Engine, merge_batches
from aggregator.core.exceptions import ConfigError, EventError, WriteError
from aggregator.core.layout import TableLayout
from aggregator.core.records import MalformedRecord, StreamRecord, pad_sequence_number, parse_event
from aggregator.core.rules import RuleSet
from aggregator.core.text import bound, quote
from aggregator.dynamodb.costs import WriteObservation, WriteObserver
from aggregator.dynamodb.deadletters import DeadLetterWriter, LastResort
from aggregator.dynamodb.manifest import RuleLifecycle
from aggregator.dynamodb.modes import WriterOptions, make_writer
from aggregator.dynamodb.routing import ShardRouting
from aggregator.dynamodb.top_list_items import TopLists, top_sort_key
from aggregator.dynamodb.writer import DEFAULT_MAX_WORKERS, Writer
from aggregator.runtime.outcome import BatchCounts, BatchOutcome
from aggregator.runtime.telemetry import LogSink, MetricsSink, RuleWcu, emit_metrics
from aggregator.runtime.threshold_events import ThresholdEvents

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_events import EventBridgeClient


__all__ = [
    "BatchCounts",
    "BatchOutcome",
    "LogSink",
    "MetricsSink",
    "StreamProcessor",
    "create_processor",
]

STATE_KEY = "aggregator"
"""Key of our entry in the window ``state`` (a map of strings, as Lambda's typed runtimes
model it)."""

SHARD_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""What a ``shardId`` may look like (``shardId-00000001580000000000-0a1b2c3d``): it names the
checkpoint attribute ``ck#<shardId>`` and the dead letters' sort keys, so anything else is
refused before any write."""

DEFAULT_STATE_LIMIT_BYTES = 256 * 1024
"""Flush early when the serialized window state passes this size: well below Lambda's 1 MB per
shard (Lambda Developer Guide, "Tumbling windows"), and small enough for the local runner to keep
it in one item (DynamoDB's 400 KB item limit)."""


# -- window state ------------------------------------------------------------------------------


def _shard_id(event: dict[str, Any]) -> str | None:
    """The event's ``shardId`` (``None`` without tumbling windows).

    Raises
    ------
    EventError
        When it is not a shard id (:data:`SHARD_ID_PATTERN`).
    """
    shard_id = event.get("shardId")
    if shard_id is not None and not (
        isinstance(shard_id, str) and SHARD_ID_PATTERN.fullmatch(shard_id)
    ):
        raise EventError(f"not a DynamoDB stream event: shardId {quote(shard_id)} is invalid")
    return shard_id


def _event_source_arn(event: dict[str, Any]) -> str | None:
    """The stream ARN the event's records came from (``eventSourceARN`` of its first record;
    every record of one event comes from one shard of one stream), or ``None``."""
    records = event.get("Records")
    if isinstance(records, list) and records and isinstance(records[0], dict):
        arn = records[0].get("eventSourceARN")
        return arn if isinstance(arn, str) else None
    return None


class StreamProcessor:
    """Runs the engine and the writer over one Lambda-format stream event.

    Parameters
    ----------
    engine
        Evaluates the rules.
    writer
        Applies coalesced deltas in the configured mode.
    dead_letters
        Records what the rules cannot evaluate
        (:class:`~aggregator.dynamodb.deadletters.DeadLetterWriter`); by default one on the writer's
        client and table.
    flush
        ``"batch"`` or ``"window"`` (module docstring).
    metrics
        Optional Powertools ``Metrics``; when given, per-batch counts are added (CloudWatch EMF).
    logger
        Optional Powertools ``Logger`` for evaluation failures and write errors.
    state_limit_bytes
        Window mode: flush early beyond this serialized state size.
    clock
        Returns the current time in epoch seconds (decides which time buckets have expired).
    lifecycle
        Optional :class:`~aggregator.dynamodb.manifest.RuleLifecycle`: rules pending a backfill
        then count each shard's records only after their fence (created at the first batch of
        the shard that sees the rule).
    routing
        Optional :class:`~aggregator.dynamodb.routing.ShardRouting` of the ``write_shards: auto``
        rules: read before each batch is evaluated, decided after its writes.
    """

    def __init__(
        self,
        engine: Engine,
        writer: Writer,
        dead_letters: DeadLetterWriter | None = None,
        *,
        flush: Literal["batch", "window"] = "batch",
        metrics: MetricsSink | None = None,
        logger: LogSink | None = None,
        state_limit_bytes: int = DEFAULT_STATE_LIMIT_BYTES,
        clock: Clock = time.time,
        lifecycle: RuleLifecycle | None = None,
        routing: ShardRouting | None = None,
        top_lists: TopLists | None = None,
        threshold_events: ThresholdEvents | None = None,
    ) -> None:
        self.clock = clock
        self.top_lists = top_lists
        self.threshold_events = threshold_events
        self.rule_wcu: RuleWcu | None = None
        """Sums each rule's modelled WCU per batch for ``ModelledWCUByRule`` (set by
        :func:`create_processor` with ``metrics``)."""
        self.routing = routing
        self.lifecycle = lifecycle
        self.engine = engine
        self.writer = writer
        if writer.layout != engine.layout:
            raise ConfigError(
                "the writer and the engine use different table layouts: the writer would put "
                "aggregates where the engine does not recognize its own writes (build both from "
                "the rule set's layout, e.g. with create_processor)"
            )
        if dead_letters is None:  # on the writer's table
            dead_letters = DeadLetterWriter(
                writer.client, writer.table_name, layout=engine.layout, clock=clock
            )
        self.dead_letters = dead_letters
        self.flush = flush
        self.metrics = metrics
        self.logger = logger
        self.state_limit_bytes = state_limit_bytes

    def process_event(self, event: dict[str, Any]) -> BatchOutcome:
        """Process ``event["Records"]`` (records of one shard, in order).

        Returns
        -------
        BatchOutcome
            ``outcome.response`` is what the Lambda handler returns. In batch mode write failures
            never raise: they become ``batchItemFailures`` from the smallest sequence number not
            yet applied to every aggregate item.

        Every record is validated at the edge (:func:`aggregator.core.records.parse_event`): a
        record that cannot be read, or that a rule cannot evaluate, is dead-lettered and skipped.

        Raises
        ------
        EventError
            For an event that is not a DynamoDB stream event at all, or whose ``shardId`` is
            not a shard id (nothing is written).
        ConfigError
            In a checkpointed mode, for an event without ``shardId`` (no tumbling window).
        WriteError
            When a dead letter cannot be recorded (table and last resort), or in window mode
            when the window's flush fails: nothing of the batch is applied then, and Lambda
            retries the invocation.
        """
        records = parse_event(event)
        shard_id = _shard_id(event)
        self.writer.check_shard(shard_id)
        routing_wcu = 0 if self.routing is None else self.routing.modelled_wcu
        routing = self._routing(shard_id, records)
        fences = self._fences(shard_id, records, _event_source_arn(event))
        batch = self.engine.process(records, now=self.clock(), fences=fences, routing=routing or {})
        outcome = BatchOutcome.of(batch)
        if "window" in event or "shardId" in event:
            outcome.response["state"] = dict(event.get("state") or {})
        self._write_dead_letters(batch, outcome, shard_id)
        if self.flush == "window":
            self._window(event, batch, outcome)
        elif outcome.retry_from is None and (batch.deltas or batch.ledger_carries):
            result = self.writer.apply(batch, shard_id=shard_id)
            outcome.write.add(result.stats)
            outcome.errors.extend(result.errors)
            outcome.retry_from = result.retry_from
        self._top_lists(batch, outcome)
        self._threshold_events(batch, outcome)
        if self.routing is not None and routing is not None:
            # only after a batch that read the switches: a switch appends to the list it read
            outcome.routing_switches = self.routing.decide(shard_id, routing, batch)
            outcome.write.modelled_wcu += self.routing.modelled_wcu - routing_wcu
        self._report_retry(outcome)
        if self.metrics is not None:
            by_rule = None if self.rule_wcu is None else self.rule_wcu.drain()
            emit_metrics(self.metrics, outcome, records, by_rule)
        return outcome

    def _write_dead_letters(
        self, batch: BatchDeltas, outcome: BatchOutcome, shard_id: str | None
    ) -> None:
        """Log and dead-letter the batch's failures (before anything of it is applied).

        Raises
        ------
        WriteError
            When a dead letter cannot be recorded: the invocation fails and Lambda retries the
            whole batch (a ``batchItemFailures`` position could not name a record without a
            sequence number).
        """
        if not batch.failures:
            return
        self._log_failures(batch)
        outcome.write.add(self.dead_letters.write(batch.failures, shard_id=shard_id))

    def _top_lists(self, batch: BatchDeltas, outcome: BatchOutcome) -> None:
        """Merge the top lists of the batch's aggregates' records, whatever became of this
        batch's writes (they record writes already made); a failed merge makes Lambda deliver
        again from that list's first record (:meth:`_merge_top_lists`).

        Raises
        ------
        WriteError
            In window mode, when a merge failed: the input state is delivered again (the
            flush, if any, is checkpointed).
        """
        failed_from = self._merge_top_lists(batch, outcome)
        if failed_from is not None:
            self._retry_from(outcome, failed_from, "top list merge failed", outcome.errors[-3:])

    def _threshold_events(self, batch: BatchDeltas, outcome: BatchOutcome) -> None:
        """Send the batch's threshold crossings to EventBridge, whatever became of this
        batch's writes (they record writes already made: :mod:`aggregator.core.crossings`); a
        failed put makes Lambda deliver again from the failed crossing's record, like any
        failed write (:mod:`aggregator.runtime.threshold_events`).

        Raises
        ------
        ConfigError
            When rules have thresholds but the processor has no sender.
        WriteError
            In window mode, when a put failed: the input state is delivered again (the flush,
            if any, is checkpointed).
        """
        outcome.expired_crossings += batch.expired_crossings
        if not batch.crossings:
            return
        if self.threshold_events is None:
            raise ConfigError(
                "rules have thresholds but the processor has no ThresholdEvents (build it with "
                "create_processor)"
            )
        result = self.threshold_events.send(batch.crossings)
        outcome.threshold_events += result.sent
        outcome.write.requests += result.requests
        if result.failed_from is None:
            return
        outcome.errors.extend(result.errors)
        self._retry_from(outcome, result.failed_from, "threshold events not sent", result.errors)

    def _retry_from(
        self, outcome: BatchOutcome, failed_from: str, what: str, errors: list[str]
    ) -> None:
        """Have Lambda deliver the batch again from ``failed_from`` (the earliest such record
        wins), for work done after the batch's writes (a top list, a threshold event): in
        window mode, fail the invocation instead (:class:`WriteError`), which delivers the
        input state again."""
        if self.flush == "window":
            raise WriteError(f"{what}; Lambda retries the invocation: " + "; ".join(errors[-3:]))
        if outcome.retry_from is None or int(failed_from) < int(outcome.retry_from):
            outcome.retry_from = failed_from

    def _report_retry(self, outcome: BatchOutcome) -> None:
        """Ask Lambda to deliver again from ``outcome.retry_from`` (``batchItemFailures``), and
        log why."""
        if outcome.retry_from is None:
            return
        outcome.response["batchItemFailures"] = [{"itemIdentifier": outcome.retry_from}]
        if self.logger is not None:
            self.logger.error(
                "batch partially applied; reporting failure",
                extra={
                    "retry_from": outcome.retry_from,
                    "errors": [bound(e, 300) for e in outcome.errors[:10]],
                },
            )

    def _merge_top_lists(self, batch: BatchDeltas, outcome: BatchOutcome) -> str | None:
        """Merge the batch's records of ``leaderboard_store: list`` aggregates into their top
        lists, the newest value of each key (:mod:`aggregator.core.top_list_merge`). Returns the
        sequence number to deliver again from (the first record of a list whose merge failed:
        merging a record again changes nothing), or ``None``."""
        if not batch.observations:
            return None
        if self.top_lists is None:
            raise ConfigError(
                "rules keep top lists (leaderboard_store: list) but the processor has no "
                "TopLists (build it with create_processor)"
            )
        observed: dict[str, dict[str, Any]] = {}
        expires: dict[str, int | None] = {}
        first: dict[str, str] = {}
        for o in batch.observations:  # stream order: the last value of a key wins
            observed.setdefault(o.partition, {})[o.key] = o.value
            expires[o.partition] = o.expires
            first.setdefault(o.partition, o.sequence_number)
        outcome.top_observations += len(batch.observations)
        failed: list[str] = []
        for partition, values in observed.items():
            try:
                result = self.top_lists.merge(partition, values, expires=expires[partition])
            except (ClientError, BotoCoreError, WriteError) as exc:
                failed.append(first[partition])
                outcome.errors.append(f"top list {partition}: {exc}")
                continue
            outcome.write.requests += result.writes + result.reads
            outcome.write.modelled_wcu += result.modelled_wcu
            outcome.write.modelled_index_wcu += result.modelled_wcu
            outcome.write.top_list_writes += result.writes
            outcome.write.top_list_reads += result.reads
            observer = self.writer.observer
            if observer is not None and result.modelled_wcu:
                # a table write of the control partition, for capacity models
                # (aggregator.dev.capacity): no index entry changes
                lay = self.engine.layout
                observer(
                    WriteObservation(
                        self.clock(),
                        lay.control_partition(top_sort_key(partition)),
                        top_sort_key(partition),
                        result.modelled_wcu,
                        result.item_bytes,
                        None,
                        0,
                        aggregate=False,
                    )
                )
        return min(failed, key=int) if failed else None

    def _routing(
        self, shard_id: str | None, records: list[StreamRecord | MalformedRecord]
    ) -> dict[str, list[int]] | None:
        """The shard's switches of the ``write_shards: auto`` rules (none without them, and none
        needed for a batch of the framework's own items only: their records are roll-ups of
        partials or a derived rule's input, never routed); at the shard's first batch with an
        item of the application, its routing item is created first, with the rules this batch
        shows hot on the partials from the start (:mod:`aggregator.dynamodb.routing`). ``None``
        when nothing was read: then nothing may be decided after the batch either.

        Raises
        ------
        WriteError
            When they cannot be read: no record of the batch may be evaluated without them.
        """
        if self.routing is None or shard_id is None:
            return None
        layout = self.engine.layout
        if not any(isinstance(r, StreamRecord) and not layout.is_reserved(r.keys) for r in records):
            return None  # only the framework's own items: no auto rule routes any of them
        try:
            switches = self.routing.read(shard_id)
            if switches is None:
                trial = self.engine.process(records, now=self.clock())
                created = (
                    r.approximate_creation_time for r in records if isinstance(r, StreamRecord)
                )
                hot = self.routing.hot_at_start(trial, (t for t in created if t is not None))
                switches = self.routing.start(shard_id, hot)
        except (ClientError, BotoCoreError) as exc:
            raise WriteError(f"cannot read the shard's write sharding switches: {exc}") from exc
        return switches

    def _fences(
        self,
        shard_id: str | None,
        records: list[StreamRecord | MalformedRecord],
        stream_arn: str | None = None,
    ) -> dict[str, str] | None:
        """The fences of the rules pending a backfill, for this shard (none without a
        lifecycle)."""
        if self.lifecycle is None:
            return None
        fenced = self.lifecycle.fenced_rules()
        if not fenced:  # every rule active and past its fences' retention: nothing per batch
            return None
        sequence_numbers = [r.sequence_number for r in records if isinstance(r, StreamRecord)]
        if not sequence_numbers:
            return None
        first = min(sequence_numbers, key=pad_sequence_number)
        try:
            return self.lifecycle.fences_for(shard_id, first, fenced, stream_arn=stream_arn)
        except (ClientError, BotoCoreError) as exc:
            raise WriteError(
                f"cannot read the fences of the rules pending a backfill: {exc}"
            ) from exc

    def _window(self, event: dict[str, Any], batch: BatchDeltas, outcome: BatchOutcome) -> None:
        """Window mode: merge the batch into the window's state, and flush it when the window
        ends (module docstring). The batch's ledger carries are written at once, not kept in
        the state: a carry's checkpoints concern records that reached a deleted target item,
        which no later flush of this window can write (the item is gone), so it may come first.

        Raises
        ------
        WriteError
            When a carry or the flush fails (Lambda retries the invocation with the same
            state).
        """
        if batch.ledger_carries:
            carried = BatchDeltas(ledger_carries=batch.ledger_carries)
            self._apply_whole(carried, event, outcome, "ledger carry failed")
        state = dict(event.get("state") or {})
        pending = merge_batches(decode_batch(state.get(STATE_KEY)), batch)
        encoded = encode_batch(pending)
        final = bool(event.get("isFinalInvokeForWindow") or event.get("isWindowTerminatedEarly"))
        flushing = final or len(encoded.encode()) > self.state_limit_bytes
        if flushing:
            # a bucket may have passed its retention while its deltas waited in the state
            now = self.clock()
            for sk, d in list(pending.deltas.items()):
                if d.ref.bucket is not None and d.ref.bucket.expired(now):
                    del pending.deltas[sk]
                    outcome.expired += len(d.parts)
                    outcome.expired_retractions += sum(1 for _, a in d.parts if a < 0)
        if pending.deltas and flushing:
            self._apply_whole(pending, event, outcome, "window flush incomplete")
            outcome.flushed = True
            state.pop(STATE_KEY, None)
        elif pending.deltas:
            state[STATE_KEY] = encoded
        else:
            state.pop(STATE_KEY, None)
        outcome.response["state"] = state

    def _apply_whole(
        self, batch: BatchDeltas, event: dict[str, Any], outcome: BatchOutcome, what: str
    ) -> None:
        """Window mode: write ``batch`` whole or raise (``what`` and the first three errors),
        so that Lambda retries the invocation with the same state.

        Raises
        ------
        WriteError
            When part of ``batch`` was not written.
        """
        result = self.writer.apply(batch, shard_id=event.get("shardId"))
        outcome.write.add(result.stats)
        if result.retry_from is not None:
            raise WriteError(
                f"{what}; Lambda retries the invocation: " + "; ".join(result.errors[:3])
            )

    def _log_failures(self, batch: BatchDeltas) -> None:
        if self.logger is None:
            return
        for f in batch.failures:
            self.logger.warning(
                "rule could not evaluate record; dead-lettered",
                extra={
                    "sequence_number": f.sequence_number,
                    "rule": f.rule,
                    "cause": str(f.cause),
                    "reason": bound(f.reason, 300),  # quotes values by a short prefix only
                },
            )


def create_processor(
    rules: RuleSet,
    client: DynamoDBClient,
    table_name: str,
    *,
    mode: str = "exactly-once",
    layout: TableLayout | None = None,
    max_workers: int = DEFAULT_MAX_WORKERS,
    metrics: MetricsSink | None = None,
    logger: LogSink | None = None,
    clock: Clock = time.time,
    last_resort: LastResort | None = None,
    lifecycle: bool = False,
    streams: Callable[[], DynamoDBStreamsClient] | None = None,
    genesis_stream_arn: str | None = None,
    writer_options: WriterOptions | None = None,
    observer: WriteObserver | None = None,
    events_client: Callable[[], Any] | None = None,
    event_bus: str = "default",
) -> StreamProcessor:
    """Engine, writer, dead-letter writer and flush policy for a write mode (``exactly-once``,
    ``window`` or ``at-least-once``).

    With rules that have ``thresholds``, their crossings go to the EventBridge bus
    ``event_bus`` (name or ARN; :mod:`aggregator.runtime.threshold_events`) through the client
    ``events_client`` returns (an EventBridge client, or anything with its ``put_events``;
    called once, here; default: one in the DynamoDB client's Region).

    ``last_resort`` receives dead letters that DynamoDB rejects even in their minimal form
    (:mod:`aggregator.dynamodb.deadletters`).

    ``clock`` (epoch seconds, default ``time.time``) is shared by the engine (expired time
    buckets) and the writer (checkpoint ages); tests pass a simulated one. ``writer_options``
    are the mode's options (:class:`~aggregator.dynamodb.write_parts.WriterOptions`: throttling
    retries, the checkpoint retention) and ``observer`` receives each modelled write
    (:mod:`aggregator.dynamodb.costs`), both given to
    :func:`~aggregator.dynamodb.modes.make_writer`.

    ``lifecycle=True`` registers the rules in the table's manifest (refusing a rule whose
    definition changed under the same name) and fences the rules pending a backfill
    (:class:`~aggregator.dynamodb.manifest.RuleLifecycle`); the Lambda handler and the ``run``
    command do so. A rule being rebuilt then counts into the generation its definition builds
    (its aggregates under ``<rule>@<generation>``). With ``streams`` (a function that returns a
    ``dynamodbstreams`` client, called once when first needed), a new rule on a table whose
    stream holds every write since its creation turns ``active`` without a backfill once the
    handler has counted it from the start of every shard
    (:meth:`~aggregator.dynamodb.manifest.RuleLifecycle.promote`). ``genesis_stream_arn`` names
    the stream a deployment created together with the table, recorded in the manifest if it
    holds none (:meth:`~aggregator.dynamodb.manifest.Manifest.record_genesis`).

    Raises
    ------
    ConfigError
        For an unknown mode, or a manifest that refuses the rules.
    WriteError
        When the manifest cannot be read or written (the AWS error is its ``__cause__``).
    """
    layout = rules.layout if layout is None else layout
    rule_lifecycle = None
    if lifecycle:
        try:
            rule_lifecycle = RuleLifecycle(
                rules,
                client,
                table_name,
                clock=clock,
                streams=streams,
                genesis_stream_arn=genesis_stream_arn,
            )
        except (ClientError, BotoCoreError) as exc:
            raise WriteError(f"cannot register the rules in the table's manifest: {exc}") from exc
    engine = Engine(rules if rule_lifecycle is None else rule_lifecycle.rules, layout)
    routing = None
    if engine.auto_rules:
        # at-least-once needs no switch to be stable between deliveries: kept in memory
        routing = ShardRouting(
            None if mode == "at-least-once" else client,
            table_name,
            layout,
            engine.auto_rules,
            spreads={r.name: r.spread for r in engine.rules if r.auto_shards},
            clock=clock,
        )
    rule_wcu = RuleWcu(observer) if metrics is not None else None
    writer = make_writer(
        mode,
        client,
        table_name,
        layout=layout,
        max_workers=max_workers,
        options=writer_options or WriterOptions(),
        clock=clock,
        observer=observer if rule_wcu is None else rule_wcu,
        routing=routing,
    )
    processor = StreamProcessor(
        engine,
        writer,
        DeadLetterWriter(client, table_name, layout=layout, last_resort=last_resort, clock=clock),
        flush="window" if mode == "window" else "batch",
        metrics=metrics,
        logger=logger,
        clock=clock,
        lifecycle=rule_lifecycle,
        routing=routing,
        top_lists=TopLists(client, table_name, layout) if engine.listed_rules else None,
        threshold_events=(
            ThresholdEvents(
                events_client() if events_client is not None else _events_client(client),
                table_name,
                event_bus,
            )
            if engine.thresholded_rules
            else None
        ),
    )
    processor.rule_wcu = rule_wcu
    return processor


def _events_client(client: DynamoDBClient) -> EventBridgeClient:
    """An EventBridge client in the DynamoDB client's Region (the handler's)."""
    import boto3

    return boto3.client("events", region_name=client.meta.region_name)
