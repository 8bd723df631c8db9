"""The one request path: every DynamoDB and DynamoDB Streams request of the framework goes
through a :class:`RequestClient`.

A request client wraps a boto3 client and, for each request sent with :meth:`RequestClient.send`:

- counts it, and the capacity the response reports (``ConsumedCapacity``, when the request asked
  for it with ``ReturnConsumedCapacity``): read units for reads, write units for writes
  (:class:`RequestCounts`, thread-safe);
- retries throttling errors (the one list :data:`~aggregator.dynamodb.errors.THROTTLING_ERRORS`)
  with one bounded exponential backoff (:class:`Backoff`) on top of botocore's own retries (the
  boto3 client's retry mode, ``standard`` or ``legacy``, runs inside each attempt; by default
  the request client adds none);
- raises the project's errors in place of botocore's:
  :class:`~aggregator.dynamodb.errors.AwsRequestError` (also a ``ClientError``, with the AWS
  error code) and :class:`~aggregator.dynamodb.errors.AwsConnectionError` (also a
  ``BotoCoreError``), each with botocore's error as ``__cause__``.

``BatchGetItem`` has one loop, :func:`aggregator.dynamodb.batch.batch_get`, which takes
:meth:`RequestClient.send` as its sender; its ``UnprocessedKeys`` rounds use the same
:class:`Backoff`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.dynamodb.errors import THROTTLING_ERRORS, AwsError, error_code, wrap_error

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_sqs import SQSClient

__all__ = ["AwsClient", "Backoff", "CountSink", "RequestClient", "RequestCounts", "requests_of"]

AwsClient: TypeAlias = "DynamoDBClient | DynamoDBStreamsClient | SQSClient"
"""The boto3 clients a :class:`RequestClient` wraps: DynamoDB, DynamoDB Streams, and SQS (the
dead letters' last-resort queue)."""

WRITE_OPERATIONS = frozenset(
    {"put_item", "update_item", "delete_item", "batch_write_item", "transact_write_items"}
)
"""Operations whose ``ConsumedCapacity`` counts as write units (the others' as read units)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Bounded exponential backoff: retry ``n`` (0-based) waits ``min(first * 2**n, ceiling)``
    seconds (AWS's advice for throttling errors and unprocessed keys: "Error retries and
    exponential backoff", DynamoDB Developer Guide).

    Attributes
    ----------
    retries
        Extra attempts after a throttling error, on top of botocore's own retries (0: none).
    first
        The first wait, in seconds.
    ceiling
        The longest wait, in seconds.
    """

    retries: int = 0
    first: float = 0.05
    ceiling: float = 1.0

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        return float(min(self.first * 2**retry, self.ceiling))


@dataclass(slots=True)
class RequestCounts:
    """Requests and capacity counted by a :class:`RequestClient` (or for one caller, passed to
    :meth:`RequestClient.send` as ``counts``); safe to update from many threads.

    Attributes
    ----------
    requests
        Requests sent (each attempt counts, the retries of :class:`RequestClient` included;
        botocore's own retries are not seen).
    throttle_retries
        Requests sent again by :class:`RequestClient` after a throttling error.
    read_units, write_units
        Capacity units the responses reported (``ConsumedCapacity.CapacityUnits``).
    """

    requests: int = 0
    throttle_retries: int = 0
    read_units: Decimal = Decimal(0)
    write_units: Decimal = Decimal(0)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(
        self,
        *,
        requests: int = 0,
        throttle_retries: int = 0,
        read_units: Decimal = Decimal(0),
        write_units: Decimal = Decimal(0),
    ) -> None:
        """Add to the counts (under the lock)."""
        with self._lock:
            self.requests += requests
            self.throttle_retries += throttle_retries
            self.read_units += read_units
            self.write_units += write_units


class CountSink(Protocol):
    """Where :meth:`RequestClient.send` also counts a request (its ``counts``):
    :class:`RequestCounts`, or a caller's own tally (the writer adds into its per-item
    :class:`~aggregator.dynamodb.write_stats.WriteStats`, which one thread owns: no lock)."""

    def add(
        self,
        *,
        requests: int = 0,
        throttle_retries: int = 0,
        read_units: Decimal = Decimal(0),
        write_units: Decimal = Decimal(0),
    ) -> None:
        """Add to the counts."""
        ...


def consumed_units(response: dict[str, Any]) -> Decimal:
    """The capacity units a response reports (``ConsumedCapacity``: one object, or a list of
    them for ``BatchGetItem``, ``BatchWriteItem`` and transactions); 0 when absent."""
    consumed = response.get("ConsumedCapacity") or {}
    parts = consumed if isinstance(consumed, list) else [consumed]
    return sum((Decimal(str(part.get("CapacityUnits", 0))) for part in parts), Decimal(0))


class RequestClient:
    """The framework's client for DynamoDB or DynamoDB Streams (see the module docstring).

    Parameters
    ----------
    client
        A boto3 ``dynamodb`` or ``dynamodbstreams`` client (thread-safe).
    backoff
        Throttling retries and their waits (default: no extra retry).
    sleep
        Waits between retries (seconds; default ``time.sleep``, looked up at each wait).

    Attributes
    ----------
    client
        The boto3 client.
    counts
        Everything this client sent (:class:`RequestCounts`).
    """

    def __init__(
        self,
        client: AwsClient,
        *,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.client = client
        self.backoff = backoff or Backoff()
        self.counts = RequestCounts()
        self._sleep = sleep

    def api_name(self, operation: str) -> str:
        """AWS's name of the boto3 method ``operation`` (``"get_item"`` -> ``"GetItem"``)."""
        mapping = getattr(getattr(self.client, "meta", None), "method_to_api_mapping", None)
        if isinstance(mapping, dict) and operation in mapping:
            return str(mapping[operation])
        return "".join(part.capitalize() for part in operation.split("_"))

    def send(
        self, operation: str, *, counts: CountSink | None = None, **request: Any
    ) -> dict[str, Any]:
        """Send one request.

        Parameters
        ----------
        operation
            The boto3 method (snake case: ``"get_item"``, ``"batch_get_item"``,
            ``"get_records"``).
        counts
            Also count this request there (besides :attr:`counts`): a caller's own tally,
            e.g. one per batch of a writer's thread pool.
        **request
            The request's parameters, as boto3 takes them.

        Returns
        -------
        dict
            The response.

        Raises
        ------
        AwsRequestError
            The service answered with an error (a throttling error after
            ``backoff.retries`` extra attempts); ``code`` is the AWS error code, ``__cause__``
            botocore's ``ClientError``.
        AwsConnectionError
            The request got no answer (botocore's ``BotoCoreError`` is the ``__cause__``).
        """
        method = getattr(self.client, operation)
        for retry in range(self.backoff.retries + 1):
            self._count(counts, requests=1)
            try:
                response: dict[str, Any] = method(**request)
            except AwsError:
                raise
            except ClientError as exc:
                if error_code(exc) in THROTTLING_ERRORS and retry < self.backoff.retries:
                    self._count(counts, throttle_retries=1)
                    (self._sleep or time.sleep)(self.backoff.delay(retry))
                    continue
                raise wrap_error(exc, self.api_name(operation)) from exc
            except BotoCoreError as exc:
                raise wrap_error(exc, self.api_name(operation)) from exc
            units = consumed_units(response)
            if units:
                kind = "write_units" if operation in WRITE_OPERATIONS else "read_units"
                self._count(counts, **{kind: units})
            return response
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def pages(self, operation: str, **request: Any) -> Iterator[dict[str, Any]]:
        """The responses of a paginated ``query`` or ``scan``, each request :meth:`send`,
        following ``LastEvaluatedKey``; errors as :meth:`send`."""
        start: dict[str, Any] | None = None
        while True:
            extra: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
            response = self.send(operation, **request, **extra)
            yield response
            start = response.get("LastEvaluatedKey")
            if not start:
                return

    def _count(self, counts: CountSink | None, **amounts: Any) -> None:
        self.counts.add(**amounts)
        if counts is not None:
            counts.add(**amounts)


def requests_of(client: AwsClient | RequestClient) -> RequestClient:
    """``client`` if it is a :class:`RequestClient`, else a new one over the boto3 ``client``."""
    return client if isinstance(client, RequestClient) else RequestClient(client)
