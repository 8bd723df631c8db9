"""The write modes, and the writer :func:`make_writer` assembles for each from its parts.

``exactly-once``
    Aggregate items by :class:`~aggregator.dynamodb.checkpoint.CheckpointWrites`, target
    rules' items by :class:`~aggregator.dynamodb.targets.TargetCheckpointWrites`, deleted
    target items' checkpoints onto their rules' ledgers by
    :class:`~aggregator.dynamodb.ledger_carries.LedgerCarries`.
``window``
    The same, flushed once per tumbling window (by the processor).
``at-least-once``
    Aggregate items by :class:`~aggregator.dynamodb.atleastonce.AtLeastOnceWrites`, target
    rules' items by :class:`~aggregator.dynamodb.targets.TargetAtLeastOnceWrites`.

Both protocols of a writer share one :class:`~aggregator.dynamodb.write_parts.WriteParts` (requests,
cost model, index membership, expiry, clock, routing), and a
:class:`~aggregator.dynamodb.writer.BatchWriter` applies each batch through them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aggregator.core.clock import Clock
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.dynamodb.atleastonce import AtLeastOnceWrites
from aggregator.dynamodb.checkpoint import CheckpointWrites
from aggregator.dynamodb.costs import WriteObserver
from aggregator.dynamodb.expiry import DEFAULT_EMPTY_VALUE_RETENTION_SECONDS
from aggregator.dynamodb.ledger_carries import LedgerCarries
from aggregator.dynamodb.routing import ShardRouting
from aggregator.dynamodb.targets import (
    TargetAtLeastOnceWrites,
    TargetCheckpointWrites,
    TargetItems,
)
from aggregator.dynamodb.write_parts import ItemProtocol, WriteParts, WriterOptions
from aggregator.dynamodb.writer import DEFAULT_MAX_WORKERS, BatchWriter, Writer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = ["WRITE_MODES", "WriterOptions", "make_writer"]

WRITE_MODES = ("exactly-once", "window", "at-least-once")
"""Write modes (``AGGREGATOR_MODE``), the default first. ``window`` uses the exactly-once writer
and applies once per tumbling window (see :class:`aggregator.runtime.processor.StreamProcessor`)."""


def _assemble(
    checkpointed: bool,
    client: DynamoDBClient,
    table_name: str,
    layout: TableLayout,
    options: WriterOptions,
    clock: Clock,
    observer: WriteObserver | None = None,
    routing: ShardRouting | None = None,
) -> tuple[WriteParts, ItemProtocol, ItemProtocol]:
    """The parts, and the protocols of aggregate items and of target rules' items, checkpointed
    or not."""
    parts = WriteParts.build(
        client,
        table_name,
        layout,
        options,
        clock=clock,
        observer=observer,
        routing=routing,
        # the at-least-once mode keeps no checkpoints: empty value items keep the default
        empty_value_retention_seconds=options.checkpoint_retention_seconds
        if checkpointed
        else DEFAULT_EMPTY_VALUE_RETENTION_SECONDS,
    )
    if checkpointed:
        checkpoints = CheckpointWrites(parts, options.checkpoint_retention_seconds)
        targets = TargetCheckpointWrites(TargetItems(parts, checkpoints), checkpoints)
        return parts, checkpoints, targets
    aggregates = AtLeastOnceWrites(parts)
    return parts, aggregates, TargetAtLeastOnceWrites(TargetItems(parts, aggregates))


def make_writer(
    mode: str,
    client: DynamoDBClient,
    table_name: str,
    *,
    layout: TableLayout = DEFAULT_LAYOUT,
    max_workers: int = DEFAULT_MAX_WORKERS,
    options: WriterOptions | None = None,
    clock: Clock = time.time,
    observer: WriteObserver | None = None,
    routing: ShardRouting | None = None,
) -> Writer:
    """The writer for ``mode`` (one of :data:`WRITE_MODES`), assembled from its parts (a
    :class:`~aggregator.dynamodb.writer.BatchWriter`).

    Parameters
    ----------
    mode
        The write mode.
    client, table_name
        A boto3 DynamoDB client and the user's table.
    layout
        Attribute names and reserved partition keys.
    max_workers
        Concurrent items per batch
        (:data:`~aggregator.dynamodb.writer.DEFAULT_MAX_WORKERS`).
    options
        The mode's options (:class:`~aggregator.dynamodb.write_parts.WriterOptions`: throttling
        retries, the checkpoint retention); the defaults without.
    clock
        Epoch seconds (checkpoint times, expired buckets).
    observer
        Receives each modelled write (:mod:`aggregator.dynamodb.costs`).
    routing
        The ``write_shards: auto`` rules' routing, whose heat meter the writes feed.

    Raises
    ------
    ConfigError
        For an unknown mode, listing the available ones.
    """
    if mode not in WRITE_MODES:
        raise ConfigError(f"unknown write mode {mode!r}; available: {', '.join(WRITE_MODES)}")
    checkpointed = mode != "at-least-once"
    parts, aggregates, targets = _assemble(
        checkpointed,
        client,
        table_name,
        layout,
        options or WriterOptions(),
        clock,
        observer,
        routing,
    )
    carries = (
        LedgerCarries(parts, (options or WriterOptions()).checkpoint_retention_seconds)
        if checkpointed
        else None
    )
    return BatchWriter(
        parts,
        aggregates,
        targets,
        carries=carries,
        mode="exactly-once" if checkpointed else mode,
        max_workers=max_workers,
    )
