"""The one ``BatchGetItem`` loop: chunks of 100 keys, ``UnprocessedKeys`` retried with bounded
backoff, and what happens when keys stay unprocessed stated by each caller.

``BatchGetItem`` reads at most 100 items a request and may answer with some of the keys left
in ``UnprocessedKeys`` (the request exceeded the table's throughput or the 16 MB response
limit); AWS's advice is to send those again with exponential backoff (DynamoDB API Reference,
"BatchGetItem"). Every reader of the framework goes through :func:`batch_get`, with its own
request sender (so a store keeps counting its requests and read units) and its own
:class:`WhenUnprocessed` policy:

- the collection reader (:func:`aggregator.dynamodb.collections.batch_get_items`) and the top
  lists (:meth:`aggregator.dynamodb.top_list_items.TopLists.read`) raise
  :class:`UnprocessedKeysError`;
- ``AggregateStore.top`` over top lists and the leaderboard floors
  (:mod:`aggregator.dynamodb.floors`) take back the keys left unprocessed: the store then reads
  every aggregate instead, the floors stay unknown (index everything).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from aggregator.core.exceptions import AggregatorError
from aggregator.dynamodb.client import Backoff, requests_of

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from aggregator.dynamodb.client import RequestClient


__all__ = [
    "BATCH_GET_KEYS",
    "MAX_ROUNDS",
    "BatchGetResult",
    "Sender",
    "UnprocessedKeysError",
    "WhenUnprocessed",
    "batch_get",
    "client_call",
    "key_ident",
]

BATCH_GET_KEYS = 100
"""Most keys one ``BatchGetItem`` request reads (DynamoDB API Reference, "BatchGetItem": "A
single operation can retrieve up to 16 MB of data, which can contain as many as 100 items")."""
MAX_ROUNDS = 8
"""Requests sent for one chunk of keys before the keys still unprocessed are given up on."""
_ROUNDS_BACKOFF = Backoff()
"""Waits between the rounds of one chunk: the request client's one backoff (0.05 s, doubling,
at most 1 s)."""

Sender = Callable[..., dict[str, Any]]
"""``call(operation, **request)``: sends one complete request (here ``"batch_get_item"``) and
returns the response: :meth:`aggregator.dynamodb.client.RequestClient.send` (which counts
requests and capacity and raises the project's errors), as :func:`client_call` gives it."""


class WhenUnprocessed(Enum):
    """What :func:`batch_get` does with keys still unprocessed after :data:`MAX_ROUNDS`
    requests of their chunk."""

    RAISE = "raise"
    """Raise :class:`UnprocessedKeysError` (the chunks after it are not read)."""
    RETURN = "return"
    """Go on with the next chunk and return the keys in :attr:`BatchGetResult.unprocessed`: the
    caller treats them as unknown."""


class UnprocessedKeysError(AggregatorError, RuntimeError):
    """``BatchGetItem`` left keys unprocessed :data:`MAX_ROUNDS` times in a row.

    A :class:`RuntimeError` too, as the collection reader raised before this class existed.

    Attributes
    ----------
    table_name
        The table read.
    unprocessed
        The primary keys (DynamoDB JSON) left unread.
    """

    def __init__(self, table_name: str, unprocessed: Sequence[dict[str, Any]]) -> None:
        super().__init__(
            f"BatchGetItem left {len(unprocessed)} key(s) unprocessed {MAX_ROUNDS} times in a row"
        )
        self.table_name = table_name
        self.unprocessed = list(unprocessed)


@dataclass(slots=True)
class BatchGetResult:
    """What :func:`batch_get` read: ``items`` (DynamoDB JSON, in the order they came, each key
    at most once) and ``unprocessed`` (the keys left unread; always empty under
    :attr:`WhenUnprocessed.RAISE`)."""

    items: list[dict[str, Any]] = field(default_factory=list)
    unprocessed: list[dict[str, Any]] = field(default_factory=list)


def client_call(client: DynamoDBClient | RequestClient) -> Sender:
    """A :data:`Sender` over a boto3 client or a request client: the send of
    :func:`~aggregator.dynamodb.client.requests_of` ``client`` (the project's errors, counted
    there)."""
    return requests_of(client).send


def key_ident(key: dict[str, Any]) -> str:
    """A hashable identity of a primary key in DynamoDB JSON (attribute order ignored)."""
    return json.dumps(key, sort_keys=True)


def batch_get(
    call: Sender,
    table_name: str,
    keys: Sequence[dict[str, Any]],
    *,
    consistent: bool,
    when_unprocessed: WhenUnprocessed,
    return_consumed_capacity: bool = False,
    sleep: Callable[[float], None] | None = None,
) -> BatchGetResult:
    """Read the items of ``keys`` with ``BatchGetItem``.

    The distinct keys (a request may not name one key twice: ``ValidationException``) are sent
    in chunks of :data:`BATCH_GET_KEYS` (100, the operation's limit: DynamoDB API Reference,
    "BatchGetItem"), in order. Keys a response leaves in ``UnprocessedKeys`` are sent again,
    after 0.05 s, then twice as long each round up to 1 s (the API Reference's advice:
    exponential backoff), up to :data:`MAX_ROUNDS` requests per chunk; then
    ``when_unprocessed`` decides.

    Parameters
    ----------
    call
        Sends one request (:data:`Sender`); it counts and translates as its owner wants.
    table_name
        The table.
    keys
        Primary keys in DynamoDB JSON; repeats are read once.
    consistent
        Strongly consistent reads (``ConsistentRead``: 1 RCU per started 4 KB of each item)
        rather than eventually consistent ones (half that).
    when_unprocessed
        What keys still unprocessed after :data:`MAX_ROUNDS` requests come to
        (:class:`WhenUnprocessed`).
    return_consumed_capacity
        Ask for ``ReturnConsumedCapacity="TOTAL"`` (for a sender that counts read units).
    sleep
        Waits between rounds (seconds; default ``time.sleep``, looked up at each call).

    Returns
    -------
    BatchGetResult
        The items found (an absent item is simply not among them) and the keys left unread.

    Raises
    ------
    UnprocessedKeysError
        Under :attr:`WhenUnprocessed.RAISE`, when a chunk's keys stay unprocessed.
    aggregator.dynamodb.errors.AwsError
        Whatever ``call`` raises, unchanged and at once (no retry here: a throttling error is
        one that outlasted the sender's retries; an ``AccessDeniedException`` is final):
        :class:`~aggregator.dynamodb.errors.AwsRequestError` or
        :class:`~aggregator.dynamodb.errors.AwsConnectionError` from a request client's send;
        the items of earlier chunks are lost with it.
    """
    wait = time.sleep if sleep is None else sleep
    unique = list({key_ident(key): key for key in keys}.values())
    result = BatchGetResult()
    for offset in range(0, len(unique), BATCH_GET_KEYS):
        pending: list[dict[str, Any]] = unique[offset : offset + BATCH_GET_KEYS]
        for attempt in range(MAX_ROUNDS):
            if attempt:  # keys left unprocessed (throughput exceeded): back off
                wait(_ROUNDS_BACKOFF.delay(attempt - 1))
            request: dict[str, Any] = {"Keys": pending}
            if consistent:
                request["ConsistentRead"] = True
            extra = {"ReturnConsumedCapacity": "TOTAL"} if return_consumed_capacity else {}
            response = call("batch_get_item", RequestItems={table_name: request}, **extra)
            result.items.extend(response.get("Responses", {}).get(table_name, []))
            pending = response.get("UnprocessedKeys", {}).get(table_name, {}).get("Keys", [])
            if not pending:
                break
        else:
            if when_unprocessed is WhenUnprocessed.RAISE:
                raise UnprocessedKeysError(table_name, pending)
            result.unprocessed.extend(pending)
    return result
