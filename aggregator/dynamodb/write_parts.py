"""The parts a writer is composed of, shared by its write protocols.

A writer (:class:`~aggregator.dynamodb.writer.BatchWriter`) applies a batch through one
:class:`ItemProtocol` for aggregate items (:mod:`aggregator.dynamodb.atleastonce` or
:mod:`aggregator.dynamodb.checkpoint`) and, when it writes target rules, one for the
application's items (:mod:`aggregator.dynamodb.targets`). The protocols share the
:class:`WriteParts`: the requests to the table (:mod:`aggregator.dynamodb.item_requests`), the
cost model and its observer (:mod:`aggregator.dynamodb.costs`), index membership
(:mod:`aggregator.dynamodb.membership`), empty value items' expiry
(:mod:`aggregator.dynamodb.expiry`), the clock and the ``write_shards: auto`` routing.
:func:`~aggregator.dynamodb.modes.make_writer` assembles them for a mode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aggregator.core.clock import Clock
from aggregator.core.engine import BatchDeltas, CoalescedDelta
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.dynamodb.costs import CostModel, WriteObserver
from aggregator.dynamodb.expiry import DEFAULT_EMPTY_VALUE_RETENTION_SECONDS, EmptyValueExpiry
from aggregator.dynamodb.floors import IndexFloors
from aggregator.dynamodb.item_requests import ItemRequests
from aggregator.dynamodb.membership import IndexMembership
from aggregator.dynamodb.routing import ShardRouting
from aggregator.dynamodb.write_stats import WriteStats

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["ItemProtocol", "WriteParts", "WriterOptions"]


@dataclass(frozen=True, slots=True)
class WriterOptions:
    """A write mode's options (:func:`~aggregator.dynamodb.modes.make_writer`).

    Attributes
    ----------
    throttle_retries, backoff_seconds
        Extra retries of throttled requests after botocore's own, with exponential backoff
        (``backoff_seconds * 2**attempt`` seconds;
        :class:`~aggregator.dynamodb.item_requests.ItemRequests`).
    checkpoint_retention_seconds
        The checkpointed modes (``exactly-once``, ``window``): age in seconds after which another
        shard's checkpoint on an item is pruned, and how long a value item whose count fell to
        zero stays (:mod:`aggregator.dynamodb.expiry`). Must exceed the event source mapping's
        ``MaximumRecordAgeInSeconds`` (default 25 hours: the template's 24 plus one). The
        ``at-least-once`` mode keeps no checkpoints and expires empty value items after the
        default.

    Raises
    ------
    ConfigError
        For a negative ``throttle_retries`` or ``backoff_seconds``, or a
        ``checkpoint_retention_seconds`` that is not positive.
    """

    throttle_retries: int = 3
    backoff_seconds: float = 0.05
    checkpoint_retention_seconds: int = DEFAULT_EMPTY_VALUE_RETENTION_SECONDS

    def __post_init__(self) -> None:
        if self.throttle_retries < 0:
            raise ConfigError(f"throttle_retries must be 0 or more, got {self.throttle_retries}")
        if self.backoff_seconds < 0:
            raise ConfigError(f"backoff_seconds must be 0 or more, got {self.backoff_seconds}")
        if self.checkpoint_retention_seconds <= 0:
            raise ConfigError(
                "checkpoint_retention_seconds must be positive, got "
                f"{self.checkpoint_retention_seconds}"
            )


@dataclass(slots=True)
class WriteParts:
    """What a writer's protocols share (module docstring).

    Attributes
    ----------
    requests
        Sends every request (:meth:`~aggregator.dynamodb.item_requests.ItemRequests.call`).
    costs
        Models each aggregate update's WCU and reports it to its observer.
    membership
        Leaderboard index membership against the floors.
    expiry
        TTL of value items whose count fell to zero.
    clock
        Epoch seconds (checkpoint times, expired buckets, the heat meter).
    routing
        The ``write_shards: auto`` rules' routing, whose heat meter the writes feed
        (:mod:`aggregator.dynamodb.routing`); ``None``: none.
    """

    requests: ItemRequests
    costs: CostModel
    membership: IndexMembership
    expiry: EmptyValueExpiry
    clock: Clock
    routing: ShardRouting | None = None

    @classmethod
    def build(
        cls,
        client: DynamoDBClient,
        table_name: str,
        layout: TableLayout,
        options: WriterOptions,
        *,
        clock: Clock = time.time,
        observer: WriteObserver | None = None,
        routing: ShardRouting | None = None,
        empty_value_retention_seconds: int = DEFAULT_EMPTY_VALUE_RETENTION_SECONDS,
    ) -> WriteParts:
        """The parts for ``table_name`` on ``client`` (the others' arguments as the parts take
        them; ``options`` gives the requests' throttling retries)."""
        requests = ItemRequests(
            client,
            table_name,
            layout,
            throttle_retries=options.throttle_retries,
            backoff_seconds=options.backoff_seconds,
        )
        floors = IndexFloors(client, table_name, layout, clock=clock)
        return cls(
            requests=requests,
            costs=CostModel(layout, clock=clock, observer=observer),
            membership=IndexMembership(floors, requests),
            expiry=EmptyValueExpiry(
                requests, clock=clock, retention_seconds=empty_value_retention_seconds
            ),
            clock=clock,
            routing=routing,
        )


class ItemProtocol(Protocol):
    """How a write mode writes one item per coalesced delta (a batch's deltas, one item each,
    concurrently: the protocol keeps no state of its own per batch)."""

    @property
    def needs_shard(self) -> bool:
        """Whether it needs the stream shard's id (checkpoints are kept per shard)."""
        ...

    def select(self, batch: BatchDeltas, stats: WriteStats) -> list[CoalescedDelta]:
        """The deltas of ``batch`` to write (counting what it leaves out in ``stats``)."""
        ...

    def write(self, delta: CoalescedDelta, shard_id: str | None, last: str) -> WriteStats:
        """Write ``delta`` (a batch of shard ``shard_id`` ending at sequence number ``last``).

        Raises
        ------
        aggregator.dynamodb.errors.AwsRequestError, aggregator.dynamodb.errors.AwsConnectionError
            When the item could not be written (from :meth:`~aggregator.dynamodb.item_requests.
            ItemRequests.call`): the batch is retried from its first record.
        """
        ...
