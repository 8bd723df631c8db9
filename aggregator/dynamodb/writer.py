"""Applies coalesced deltas to the aggregates partition: the :class:`Writer` protocol the
processor uses, and :class:`BatchWriter`, the writer composed of parts
(:mod:`aggregator.dynamodb.write_parts`) that :func:`~aggregator.dynamodb.modes.make_writer`
assembles for a mode.

Modes
-----
``exactly-once`` (default, :class:`~aggregator.dynamodb.checkpoint.CheckpointWrites`)
    One conditional ``UpdateItem`` per aggregate item per batch that also records, per stream
    shard, the sequence number up to which the item includes that shard's records.
``window`` (the same protocol, driven by the processor's window flush)
    The same updates, once per tumbling window instead of once per batch.
``at-least-once`` (:class:`~aggregator.dynamodb.atleastonce.AtLeastOnceWrites`)
    One unconditional ``UpdateItem ... ADD #value :delta`` per aggregate item per batch; a batch
    that Lambda delivers again is added again.

Target rules' deltas go to the mode's protocol for the application's items
(:mod:`aggregator.dynamodb.targets`). Each write's modelled capacity comes from the cost model
(:mod:`aggregator.dynamodb.costs`).
"""

from __future__ import annotations

import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.clock import Clock
from aggregator.core.engine import BatchDeltas, CoalescedDelta, LedgerCarry
from aggregator.core.exceptions import ConfigError, WriteError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.records import pad_sequence_number
from aggregator.dynamodb.atleastonce import AtLeastOnceWrites
from aggregator.dynamodb.costs import WriteObserver
from aggregator.dynamodb.ledger_carries import LedgerCarries
from aggregator.dynamodb.routing import ShardRouting
from aggregator.dynamodb.write_parts import ItemProtocol, WriteParts, WriterOptions
from aggregator.dynamodb.write_stats import WriteResult, WriteStats

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = [
    "DEFAULT_MAX_WORKERS",
    "AtLeastOnceWriter",
    "BatchWriter",
    "WriteResult",
    "WriteStats",
    "Writer",
    "place",
]

DEFAULT_MAX_WORKERS = 32
"""Concurrent requests inside a batch: items are written ``max_workers`` at a time, each a
sequence of requests (its update, then rarely a prune or an expiry). With ``ParallelizationFactor:
1`` a shard's throughput is bounded by the time per batch; at a modelled 8 ms a request, batches
of 10,000 flights records, ``python -m bench.shard_throughput`` measured 1,276 records a second
with 8 (batches waiting on the network), 2,228 with 16, 2,752 with 32 and 2,447 with 64 (the GIL
and botocore's CPU per request bound it)."""


@runtime_checkable
class Writer(Protocol):
    """What the stream processor (:class:`~aggregator.runtime.processor.StreamProcessor`) needs
    from a write mode's writer."""

    mode: str
    """The write mode (:data:`~aggregator.dynamodb.modes.WRITE_MODES`)."""
    routing: ShardRouting | None
    """Where the writer reports its writes of ``write_shards: auto`` rules (``None``: none)."""

    @property
    def layout(self) -> TableLayout:
        """The table layout it writes by (the engine's must be the same)."""
        ...

    @property
    def client(self) -> DynamoDBClient:
        """The DynamoDB client it writes with (dead letters go there by default)."""
        ...

    @property
    def table_name(self) -> str:
        """The table it writes to."""
        ...

    @property
    def observer(self) -> WriteObserver | None:
        """Receives each modelled write (the processor reports its top list writes there)."""
        ...

    def apply(self, batch: BatchDeltas, *, shard_id: str | None = None) -> WriteResult:
        """Apply a batch's coalesced deltas; never raises for per-item write failures."""
        ...

    def check_shard(self, shard_id: str | None) -> None:
        """Raise ``ConfigError`` if this mode needs a shard id and ``shard_id`` is missing."""
        ...

    def close(self) -> None:
        """Release its threads."""
        ...


def place(delta: CoalescedDelta, shard_id: str | None) -> CoalescedDelta:
    """``delta`` with its partial chosen: CRC-32 of the shard id modulo ``write_shards``, so a
    shard always writes the same partial (its checkpoint lives there). Without a shard id
    (at-least-once without tumbling windows: nothing to protect) the first record's sequence
    number decides."""
    if not delta.ref.partial or delta.slot is not None:
        return delta
    basis = shard_id or delta.first_sequence_number
    return replace(delta, slot=zlib.crc32(basis.encode("utf-8")) % delta.write_shards)


class BatchWriter:
    """A :class:`Writer` composed of parts: applies a batch's deltas concurrently, each through
    the mode's protocol for its kind of item.

    Parameters
    ----------
    parts
        What the protocols share (requests, cost model, index membership, expiry, clock,
        routing).
    aggregates
        The protocol of aggregate items
        (:class:`~aggregator.dynamodb.atleastonce.AtLeastOnceWrites`,
        :class:`~aggregator.dynamodb.checkpoint.CheckpointWrites`); it also selects the
        batch's deltas to write.
    targets
        The protocol of target rules' deltas (:mod:`aggregator.dynamodb.targets`), ``None``
        for a writer that refuses them.
    carries
        Sets deleted target items' checkpoints on their rules' ledger items
        (:mod:`aggregator.dynamodb.ledger_carries`), before the batch's deltas; ``None`` (the
        ``at-least-once`` mode, which keeps no checkpoints): a batch's ledger carries are left
        out.
    mode
        The write mode's name.
    max_workers
        Concurrent items per batch (:data:`DEFAULT_MAX_WORKERS`).
    """

    def __init__(
        self,
        parts: WriteParts,
        aggregates: ItemProtocol,
        targets: ItemProtocol | None = None,
        *,
        carries: LedgerCarries | None = None,
        mode: str,
        max_workers: int = DEFAULT_MAX_WORKERS,
    ) -> None:
        self.parts = parts
        self.aggregates = aggregates
        self.targets = targets
        self.carries = carries
        self.mode = mode
        self.max_workers = max_workers
        self._pool = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="aggregator-write"
        )

    @property
    def layout(self) -> TableLayout:
        return self.parts.requests.layout

    @property
    def client(self) -> DynamoDBClient:
        return self.parts.requests.client

    @property
    def table_name(self) -> str:
        return self.parts.requests.table_name

    @property
    def observer(self) -> WriteObserver | None:
        return self.parts.costs.observer

    @property
    def routing(self) -> ShardRouting | None:
        """The ``write_shards: auto`` rules' routing, whose heat meter the writes feed
        (:mod:`aggregator.dynamodb.routing`)."""
        return self.parts.routing

    @routing.setter
    def routing(self, routing: ShardRouting | None) -> None:
        self.parts.routing = routing

    def close(self) -> None:
        """Wait for the pool's threads and release them."""
        self._pool.shutdown(wait=True)

    def check_shard(self, shard_id: str | None) -> None:
        """Raise ``ConfigError`` when the mode keeps checkpoints per shard and ``shard_id`` is
        missing."""
        if not shard_id and self.aggregates.needs_shard:
            raise ConfigError(
                "the exactly-once and window modes need the stream shard id, which Lambda sends "
                "only with tumbling windows: set TumblingWindowInSeconds on the event source "
                "mapping (template.yaml does), or choose AGGREGATOR_MODE=at-least-once"
            )

    def _todo(
        self, batch: BatchDeltas, shard_id: str | None, stats: WriteStats
    ) -> list[CoalescedDelta]:
        """The deltas to write, placed (:func:`place`); those of expired buckets counted in
        ``stats.expired_skipped`` and left out."""
        now = self.parts.clock()
        todo: list[CoalescedDelta] = []
        for delta in self.aggregates.select(batch, stats):
            if delta.target_attribute is not None and self.targets is None:
                raise ConfigError(
                    f"rule {delta.ref.rule!r} has a target: write it with a writer of "
                    "aggregator.dynamodb.targets (make_writer)"
                )
            if delta.ref.bucket is not None and delta.ref.bucket.expired(now):
                stats.expired_skipped += 1
                continue
            todo.append(place(delta, shard_id))
        return todo

    def _carry(self, batch: BatchDeltas, result: WriteResult, failed_first: list[str]) -> set[str]:
        """Write the batch's ledger carries (concurrently); returns the sort keys of the ledger
        items whose carry failed (their target rule's deltas must wait), after adding each
        failure's ``REMOVE`` record to ``failed_first`` and its error to ``result``."""
        carries = list(batch.ledger_carries.values())
        if not carries or self.carries is None:
            return set()
        protocol = self.carries

        def run(carry: LedgerCarry) -> tuple[WriteStats, str | None]:
            try:
                return protocol.carry(carry), None
            except (ClientError, BotoCoreError, WriteError) as exc:
                return WriteStats(failed_items=1), f"{carry.delta.ref.sort_key}: {exc}"

        failed: set[str] = set()
        for carry, (stats, error) in zip(carries, self._pool.map(run, carries), strict=True):
            result.stats.add(stats)
            if error is not None:
                result.errors.append(error)
                failed_first.append(carry.sequence_number)
                failed.add(carry.delta.ref.sort_key)
        return failed

    def apply(self, batch: BatchDeltas, *, shard_id: str | None = None) -> WriteResult:
        """Apply a batch's coalesced deltas concurrently (``max_workers`` at a time), after its
        ledger carries (``batch.ledger_carries``, concurrently too; left out without a
        ``carries`` part): a redelivered delta that finds its target deleted must meet the
        carried checkpoints on the ledger. When a carry fails, the deltas aimed at its deleted
        item are not written either (they could count what reached the item), and the batch is
        retried from the earlier of the ``REMOVE`` record and their first record.

        Returns
        -------
        WriteResult
            ``retry_from`` is the smallest of the ``first_sequence_number`` of each item that
            still failed (after throttling retries) or was held back by a failed carry, and the
            sequence number of each failed carry's ``REMOVE`` record; ``None`` when everything
            was written.

        Raises
        ------
        ConfigError
            In a checkpointed mode, when ``shard_id`` is missing; for a target rule's delta
            given to a writer without a targets protocol.
        """
        self.check_shard(shard_id)
        result = WriteResult()
        failed_first: list[str] = []
        held_back = self._carry(batch, result, failed_first)
        todo = self._todo(batch, shard_id, result.stats)
        if held_back:
            kept = []
            for delta in todo:
                if delta.target_attribute is not None and delta.ref.sort_key in held_back:
                    result.stats.failed_items += 1
                    result.errors.append(
                        f"{delta.ref.sort_key}: not written: the ledger carry of its deleted "
                        "target item failed"
                    )
                    failed_first.append(delta.first_sequence_number)
                else:
                    kept.append(delta)
            todo = kept
        last = batch.last_sequence_number or ""
        self.parts.membership.load(todo)

        def run(delta: CoalescedDelta) -> tuple[WriteStats, str | None]:
            protocol = self.aggregates
            if delta.target_attribute is not None and self.targets is not None:
                protocol = self.targets
            try:
                return protocol.write(delta, shard_id, last), None
            except (ClientError, BotoCoreError) as exc:
                return WriteStats(failed_items=1), f"{delta.ref.sort_key}: {exc}"

        for delta, (stats, error) in zip(todo, self._pool.map(run, todo), strict=True):
            result.stats.add(stats)
            if error is not None:
                result.errors.append(error)
                failed_first.append(delta.first_sequence_number)
        if failed_first:
            result.retry_from = min(failed_first, key=pad_sequence_number)
        return result


class AtLeastOnceWriter(BatchWriter):
    """The ``at-least-once`` writer of aggregate items alone
    (:class:`~aggregator.dynamodb.atleastonce.AtLeastOnceWrites`; no target rules: use
    :func:`~aggregator.dynamodb.modes.make_writer` for those).

    Parameters
    ----------
    client, table_name, layout, max_workers, clock, observer
        As :func:`~aggregator.dynamodb.modes.make_writer` takes them.
    options
        Throttling retries (:class:`~aggregator.dynamodb.write_parts.WriterOptions`; this mode keeps
        no checkpoints).

    Notes
    -----
    Each update is ``ADD #value :delta SET #rule = :rule, #key = :key`` (plus ``#lb = :rule`` for
    leaderboard rules whose index partition has no floor: :mod:`aggregator.dynamodb.floors`).
    Zero deltas are not written. Guarantee: every record is applied at least once; a redelivered
    batch is applied again.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        layout: TableLayout = DEFAULT_LAYOUT,
        max_workers: int = DEFAULT_MAX_WORKERS,
        clock: Clock = time.time,
        observer: WriteObserver | None = None,
        options: WriterOptions | None = None,
    ) -> None:
        parts = WriteParts.build(
            client, table_name, layout, options or WriterOptions(), clock=clock, observer=observer
        )
        super().__init__(
            parts, AtLeastOnceWrites(parts), mode="at-least-once", max_workers=max_workers
        )
