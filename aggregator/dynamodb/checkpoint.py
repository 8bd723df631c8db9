"""Exactly-once aggregates by per-item shard checkpoints (the default write mode).

Every aggregate item remembers, for each stream shard that wrote it, the sequence number up to
which that shard's records are included in its value: attribute ``ck#<shardId>`` holding
``"<40-digit sequence number>@<epoch seconds of the write>"``. Zero-padding makes text order
numeric order, and the ``@`` suffix never changes a ``<`` comparison against a bare 40-digit
sequence number (``"…5@t" < "…5"`` is false, ``"…4@t" < "…5"`` is true).

For a batch of one shard, per aggregate item ``X`` (coalesced: summed delta ``D``, sequence
number ``first`` of the first record that touched ``X``, the batch's ``last``):

1. ``UpdateItem``: ``ADD value :D SET ck = :last@now`` on condition
   ``attribute_not_exists(ck) OR ck < :first``; 1 WCU for a small item, the same as
   at-least-once. Keys whose deltas sum to zero are written too (``ADD 0``) so their checkpoint
   moves: skipping them lets a later redelivery with other batch boundaries re-apply half of them.
2. ``ConditionalCheckFailed`` means an earlier attempt applied part of this batch to ``X``: read
   ``X``'s checkpoint ``c``, recompute ``D`` from the records after ``c`` and update on condition
   ``ck = :c``; nothing after ``c`` means the batch is already in ``X``.
3. Throttled requests are retried with backoff; items still failing make the handler report
   ``batchItemFailures`` from the smallest ``first`` among them. Everything before it is applied
   to every item, and items already past it are protected by their checkpoints.

Invariant on every path: for each aggregate item and shard, the applied records are a prefix of
that shard's records touching the item. It needs in-order, one-batch-at-a-time processing per shard
(``ParallelizationFactor: 1``) and the shard's identity, which Lambda passes only with tumbling
windows (``shardId``).

Pruning: a checkpoint written more than ``checkpoint_retention_seconds`` ago (default 25 hours:
``MaximumRecordAgeInSeconds`` of 24 hours in ``template.yaml`` plus one hour) can no longer
protect anything, because no record it covers can be delivered again (Lambda drops records older
than the maximum record age). Each update returns the item's previous image (``ReturnValues:
ALL_OLD``, no extra request); stale checkpoints of other shards found there are removed by one
conditional ``REMOVE``. So an item carries checkpoints only of shards that wrote it within the
retention, plus stale ones until its next update.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.engine import CoalescedDelta
from aggregator.core.exceptions import ConfigError, WriteError
from aggregator.core.numbers import add
from aggregator.core.records import SEQUENCE_NUMBER_WIDTH, pad_sequence_number
from aggregator.dynamodb.updates import aggregate_update, prune_update
from aggregator.dynamodb.writer import WriteStats, _BaseWriter, error_code

__all__ = ["CHECKPOINT_PREFIX", "CheckpointWriter", "checkpoint_attribute", "parse_checkpoint"]

CHECKPOINT_PREFIX = "ck#"
"""Checkpoint attributes are named ``ck#<shardId>``; readers ignore them."""

DEFAULT_CHECKPOINT_RETENTION_SECONDS = 25 * 3600
MAX_RECOVERY_ROUNDS = 5


def checkpoint_attribute(shard_id: str) -> str:
    """Name of the checkpoint attribute for ``shard_id``."""
    return f"{CHECKPOINT_PREFIX}{shard_id}"


def parse_checkpoint(value: str) -> tuple[str, int]:
    """``"<seq40>@<epoch seconds>"`` -> ``(seq40, epoch seconds)``.

    Raises
    ------
    ValueError
        When the value is not in that form.
    """
    seq, _, written = value.partition("@")
    if len(seq) != SEQUENCE_NUMBER_WIDTH or not seq.isdigit() or not written.isdigit():
        raise ValueError(f"not a checkpoint value: {value!r}")
    return seq, int(written)


class CheckpointWriter(_BaseWriter):
    """Exactly-once ``ADD`` through per-item shard checkpoints (module docstring).

    Parameters
    ----------
    client, table_name, layout, max_workers, throttle_retries, backoff_seconds
        As for :class:`~aggregator.dynamodb.writer.AtLeastOnceWriter`.
    checkpoint_retention_seconds
        Age in seconds after which another shard's checkpoint on an item is pruned. Must exceed
        the event source mapping's ``MaximumRecordAgeInSeconds``.
    """

    mode = "exactly-once"

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        checkpoint_retention_seconds: int = DEFAULT_CHECKPOINT_RETENTION_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(client, table_name, **kwargs)
        self.checkpoint_retention_seconds = checkpoint_retention_seconds

    def check_shard(self, shard_id: str | None) -> None:
        if not shard_id:
            raise ConfigError(
                "the exactly-once and window modes need the stream shard id, which Lambda sends "
                "only with tumbling windows: set TumblingWindowInSeconds on the event source "
                "mapping (template.yaml does), or choose AGGREGATOR_MODE=at-least-once"
            )

    def _checkpoint_value(self, last: str) -> str:
        return f"{pad_sequence_number(last)}@{int(self._clock())}"

    def _request(
        self,
        delta: CoalescedDelta,
        amount: Decimal,
        shard_id: str,
        last: str,
        current: str | None,
    ) -> dict[str, Any]:
        """The conditional update: on condition that the checkpoint is below the item's first
        record in the batch (``current`` is ``None``), or still equals ``current`` (recovery)."""
        ck = checkpoint_attribute(shard_id)
        update = aggregate_update(self.layout, delta, amount).set(
            ck, {"S": self._checkpoint_value(last)}
        )
        if current is None:
            first = pad_sequence_number(delta.first_sequence_number)
            update = update.where_missing_or_below(ck, {"S": first})
        else:
            update = update.where_equals(ck, {"S": current})
        return {
            "TableName": self.table_name,
            "Key": self._key(delta),
            **update.render(),
            "ReturnConsumedCapacity": "TOTAL",
            "ReturnValues": "ALL_OLD",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _current_checkpoint(
        self, delta: CoalescedDelta, shard_id: str, failure: ClientError, stats: WriteStats
    ) -> str | None:
        # botocore-stubs' error response does not declare the "Item" that DynamoDB adds for
        # ReturnValuesOnConditionCheckFailure
        error_response: Mapping[str, Any] = failure.response
        item = error_response.get("Item")
        if item is None:  # endpoints that do not return the item on a failed condition
            response = self._call(
                "get_item",
                {
                    "TableName": self.table_name,
                    "Key": self._key(delta),
                    "ConsistentRead": True,
                    "ProjectionExpression": "#ck",  # a projection, not an update
                    "ExpressionAttributeNames": {"#ck": checkpoint_attribute(shard_id)},
                },
                stats,
            )
            item = response.get("Item") or {}
        value = item.get(checkpoint_attribute(shard_id))
        return None if value is None else value["S"]

    def _apply_item(self, delta: CoalescedDelta, shard_id: str | None, last: str) -> WriteStats:
        assert shard_id is not None
        stats = WriteStats()
        amount = delta.amount
        expected: str | None = None  # the checkpoint the next attempt expects (None: below first)
        for _ in range(MAX_RECOVERY_ROUNDS):
            request = self._request(delta, amount, shard_id, last, expected)
            try:
                response = self._call("update_item", request, stats)
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                # a failed conditional write still consumes write capacity (the item's size)
                failed: Mapping[str, Any] = exc.response
                total, _ = self._modelled_units(
                    delta,
                    self._checkpoint_extra(shard_id, last),
                    failed.get("Item"),
                    applied=False,
                )
                stats.modelled_wcu += total
                current = self._current_checkpoint(delta, shard_id, exc, stats)
                if current is None:  # checkpoint vanished meanwhile: start over
                    expected = None
                    amount = delta.amount
                    continue
                applied_to, _ = parse_checkpoint(current)
                stats.conditional_recoveries += 1
                remaining = [(s, a) for s, a in delta.parts if pad_sequence_number(s) > applied_to]
                if not remaining:
                    stats.already_applied += 1
                    return stats
                amount = Decimal(0)
                for _, part in remaining:
                    amount = add(amount, part)
                expected = current
                continue
            stats.items_written += 1
            old = response.get("Attributes") or {}
            total, index = self._modelled_units(delta, self._checkpoint_extra(shard_id, last), old)
            stats.modelled_wcu += total
            stats.modelled_index_wcu += index
            self._prune(delta, shard_id, old, stats)
            return stats
        raise WriteError(
            f"{delta.ref.sort_key}: checkpoint kept changing during {MAX_RECOVERY_ROUNDS} "
            "recovery rounds (is another consumer writing this shard?)"
        )

    def _checkpoint_extra(self, shard_id: str, last: str) -> dict[str, Any]:
        return {checkpoint_attribute(shard_id): self._checkpoint_value(last)}

    def _prune(
        self, delta: CoalescedDelta, shard_id: str, old: dict[str, Any], stats: WriteStats
    ) -> None:
        horizon = self._clock() - self.checkpoint_retention_seconds
        stale: dict[str, str] = {}
        for name, value in old.items():
            if not name.startswith(CHECKPOINT_PREFIX) or name == checkpoint_attribute(shard_id):
                continue
            try:
                _, written = parse_checkpoint(value.get("S", ""))
            except ValueError:
                continue
            if written < horizon:
                stale[name] = value["S"]
        if not stale:
            return
        request = {
            "TableName": self.table_name,
            "Key": self._key(delta),
            **prune_update(stale).render(),
            "ReturnConsumedCapacity": "TOTAL",
        }
        try:
            self._call("update_item", request, stats)
        except (ClientError, BotoCoreError):
            # best effort: the aggregate update itself succeeded; the next update tries again
            return
        stats.pruned_checkpoints += len(stale)
        stats.modelled_wcu += 1
