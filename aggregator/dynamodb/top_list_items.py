"""Top-list items: a leaderboard partition's largest aggregates in one item, read and merged.

The merge rules and the proof of exactness are in :mod:`aggregator.core.top_list_merge`. Here: the
item, its optimistic lock, and what reading and writing it cost.

The item
--------
A control item, sort key ``leaderboard-top#<partition>`` (``partition`` as
:func:`~aggregator.core.layout.leaderboard_partition` names a leaderboard's index partition),
under ``layout.control_key`` of that sort key (:mod:`aggregator.dynamodb.control`):

- ``top``: a map ``{name: N}`` of at most :data:`~aggregator.core.top_list_merge.KEEP` keys, each
  the key part of an aggregate's sort key as stored (:func:`map_name`: DynamoDB refuses an
  empty attribute name, and a key part may be empty);
- ``floor`` (N): absent while every non-zero aggregate is listed;
- ``v`` (N): the item's version, one more at every write, from a random start (a list deleted
  by its TTL or ``drop-rule`` and written again does not meet a process's memory of the old
  one's versions);
- ``partition`` (S), and for a time bucket's partition the bucket's TTL.

A merge reads nothing when its process wrote the item last (it keeps what it wrote) and writes
only when the list changes: ``UpdateItem`` on condition that ``v`` is the version it knows. When
another process wrote in between, the failed condition returns the item as it is
(``ReturnValuesOnConditionCheckFailure``, DynamoDB API Reference, UpdateItem), and the merge is
done again on it. A merge that would change nothing on what this process knows is checked on a
strongly consistent read first: another process may have listed the key since.

Cost: a write is 1 WCU per started KB of the larger of the item before and after it (Developer
Guide, "Read/write capacity mode"): 3 WCU for 256 tail numbers (about 2.4 KB). A ``top`` reads
the lists of a leaderboard with one eventually consistent ``BatchGetItem``, 0.5 RCU per started
4 KB of each.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aggregator.core.exceptions import WriteError
from aggregator.core.layout import TableLayout
from aggregator.core.top_list_merge import KEEP, TopList, merge
from aggregator.dynamodb.batch import WhenUnprocessed, batch_get
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.sizes import typed_item_size, write_units
from aggregator.dynamodb.updates import Update, with_collection

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = [
    "MERGE_ATTEMPTS",
    "TOP_PREFIX",
    "MergeResult",
    "TopLists",
    "decode",
    "key_of_name",
    "map_name",
    "top_sort_key",
]

TOP_PREFIX = "leaderboard-top#"
"""Sort keys of top-list items in the control partition start with it."""
MERGE_ATTEMPTS = 16
"""Conditional writes one merge tries before it fails its batch (the batch is then delivered
again): each failure means another process wrote the item in between."""
MAX_REMEMBERED = 10_000
"""Lists whose last known state a process keeps; past it the memory is cleared (each list is
then read once more), never a correctness matter."""

_TOP, _FLOOR, _VERSION, _PARTITION = "top", "floor", "v", "partition"


def top_sort_key(partition: str) -> str:
    """The sort key text of the top-list item of index partition value ``partition``."""
    return f"{TOP_PREFIX}{partition}"


def map_name(key: str) -> str:
    """The name of ``key``'s entry in the ``top`` map: the key itself, but ``"~"`` for the empty
    key and ``"~"`` before a key that starts with one (injective; undone by
    :func:`key_of_name`)."""
    return key if key and not key.startswith("~") else f"~{key}"


def key_of_name(name: str) -> str:
    """Inverse of :func:`map_name`."""
    return name[1:] if name.startswith("~") else name


def decode(item: Mapping[str, Any] | None) -> tuple[TopList, int]:
    """``(list, version)`` of a top-list item in DynamoDB JSON; an empty list at version 0 for
    a missing item."""
    if not item:
        return TopList(), 0
    entries = {key_of_name(k): Decimal(v["N"]) for k, v in item.get(_TOP, {}).get("M", {}).items()}
    floor = item.get(_FLOOR, {}).get("N")
    return TopList(entries, None if floor is None else Decimal(floor)), int(
        item.get(_VERSION, {}).get("N", "0")
    )


@dataclass(slots=True)
class MergeResult:
    """What one merge did: ``writes`` (conditional writes sent, failed ones too), ``reads``
    (strongly consistent reads), ``modelled_wcu`` (the writes' WCU, failed ones at 1 WCU per
    started KB of the item as it was), ``changed`` (whether the list changed) and
    ``item_bytes`` (the item's size after the merge's write; 0 without one)."""

    writes: int = 0
    reads: int = 0
    modelled_wcu: int = 0
    changed: bool = False
    item_bytes: int = 0


class TopLists:
    """Top-list items of one table (thread-safe for different partitions; one merge of a
    partition at a time per object).

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table_name, layout
        The user's table and the framework's layout in it.
    keep
        Keys a list keeps (:data:`~aggregator.core.top_list_merge.KEEP`).
    """

    def __init__(
        self, client: DynamoDBClient, table_name: str, layout: TableLayout, *, keep: int = KEEP
    ) -> None:
        self.requests = requests_of(client)
        self.table_name = table_name
        self.layout = layout
        self.keep = keep
        self._known: dict[str, tuple[TopList, int]] = {}

    def _key(self, partition: str) -> dict[str, dict[str, str]]:
        return self.layout.control_key(top_sort_key(partition))

    def _remember(self, partition: str, state: TopList, version: int) -> None:
        if len(self._known) >= MAX_REMEMBERED and partition not in self._known:
            self._known.clear()  # time buckets bring new partitions: forgetting costs a read
        self._known[partition] = (state, version)

    def read(self, partitions: Iterable[str]) -> dict[str, TopList]:
        """The lists of ``partitions`` (eventually consistent ``BatchGetItem``, 100 keys a
        request): an empty list for a partition without an item.

        Raises
        ------
        aggregator.dynamodb.batch.UnprocessedKeysError
            When keys stay unprocessed after 8 requests
            (:attr:`~aggregator.dynamodb.batch.WhenUnprocessed.RAISE`).
        aggregator.dynamodb.errors.AwsError
            When a request fails.
        """
        wanted = sorted(set(partitions))
        found: dict[str, TopList] = dict.fromkeys(wanted, TopList())
        read = batch_get(
            self.requests.send,
            self.table_name,
            [self._key(p) for p in wanted],
            consistent=False,
            when_unprocessed=WhenUnprocessed.RAISE,
        )
        for item in read.items:
            found[item[_PARTITION]["S"]] = decode(item)[0]
        return found

    def _read_consistent(self, partition: str) -> tuple[TopList, int]:
        response = self.requests.send(
            "get_item", TableName=self.table_name, Key=self._key(partition), ConsistentRead=True
        )
        return decode(response.get("Item"))

    def _write(
        self, partition: str, new: TopList, version: int, expires: int | None
    ) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """Write ``new`` as ``partition``'s list on condition that its version is ``version``
        (0: no list yet). Returns ``(new version, item before, item after)``; raises
        ``AwsRequestError`` (``ConditionalCheckFailedException`` with the item as it is)."""
        lay = self.layout
        following = version + 1 if version else secrets.randbits(48) + 1
        written: dict[str, Any] = {
            _TOP: {"M": {map_name(k): {"N": str(v)} for k, v in new.entries.items()}},
            _VERSION: {"N": str(following)},
            _PARTITION: {"S": partition},
        }
        if new.floor is not None:
            written[_FLOOR] = {"N": str(new.floor)}
        if expires is not None:
            written[lay.ttl_attribute] = {"N": str(expires)}
        update = Update()
        for name, value in written.items():
            update = update.set(name, value)
        if new.floor is None:
            update = update.remove(_FLOOR)
        update = with_collection(update, lay, lay.control_pk)
        update = (
            update.where_equals(_VERSION, {"N": str(version)})
            if version
            else update.where_missing(_VERSION)
        )
        response = self.requests.send(
            "update_item",
            TableName=self.table_name,
            Key=self._key(partition),
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **update.render(),
        )
        old = response.get("Attributes") or {}
        after = {**self._key(partition), **old, **written}
        if new.floor is None:
            after.pop(_FLOOR, None)
        return following, old, after

    def replace(
        self, partition: str, new: TopList, version: int, *, expires: int | None = None
    ) -> None:
        """Write ``new`` as ``partition``'s list, on condition that the list's version is still
        ``version`` (0: no list), as a repair does
        (:mod:`aggregator.operations.top_list_check`).

        Raises
        ------
        aggregator.dynamodb.errors.AwsError
            ``ConditionalCheckFailedException`` when the list changed since, or any other
            failure of the request.
        """
        following, _, _ = self._write(partition, new, version, expires)
        self._remember(partition, new, following)

    def merge(
        self,
        partition: str,
        observations: Mapping[str, Decimal | None],
        *,
        expires: int | None = None,
    ) -> MergeResult:
        """Merge ``observations`` (``{key: new value}``, the newest of each key in a batch, in
        stream order; ``None`` for an aggregate whose item is gone) into ``partition``'s list
        (:func:`aggregator.core.top_list_merge.merge`). ``expires``: the TTL of a time bucket's
        partition (epoch seconds), which its list item gets too.

        Raises
        ------
        WriteError
            When :data:`MERGE_ATTEMPTS` conditional writes all found the item changed.
        aggregator.dynamodb.errors.AwsError
            When a request fails (the caller fails the batch, which is delivered again).
        """
        result = MergeResult()
        known = self._known.get(partition)
        fresh = known is None
        if known is None:
            known = self._read_consistent(partition)
            result.reads += 1
        state, version = known
        for _ in range(MERGE_ATTEMPTS):
            new = merge(state, observations, self.keep)
            if new is state:
                if fresh:
                    self._remember(partition, state, version)
                    return result
                # another process may have listed a key since this one wrote: check first
                state, version = self._read_consistent(partition)
                result.reads += 1
                fresh = True
                continue
            result.writes += 1
            try:
                following, old, after = self._write(partition, new, version, expires)
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                # botocore-stubs' error response does not declare the "Item" that DynamoDB adds
                # for ReturnValuesOnConditionCheckFailure
                error_response: Mapping[str, Any] = exc.response
                current: Mapping[str, Any] | None = error_response.get("Item")
                if current is None:  # an endpoint that does not return it: read it
                    state, version = self._read_consistent(partition)
                    result.reads += 1
                else:
                    state, version = decode(current)
                result.modelled_wcu += write_units(
                    typed_item_size(current) if current is not None else 0
                )
                fresh = True
                continue
            result.item_bytes = typed_item_size(after)
            result.modelled_wcu += write_units(max(typed_item_size(old), result.item_bytes))
            result.changed = True
            self._remember(partition, new, following)
            return result
        raise WriteError(
            f"the top list of {partition!r} changed under {MERGE_ATTEMPTS} merges in a row"
        )
