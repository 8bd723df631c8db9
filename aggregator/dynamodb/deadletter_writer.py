"""Writing dead letters: :class:`DeadLetterWriter` puts one item per failed (record, rule)
under the dead-letters partition, in the first form that fits DynamoDB's 400 KB item limit, and
:class:`LastResort` (:class:`SqsLastResort`) takes what DynamoDB refuses even in its minimal
form. The format of the items, and how they are read, healed and replayed:
:mod:`aggregator.dynamodb.deadletters` (which exports these names too).
"""

from __future__ import annotations

import json
import time
import zlib
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.clock import Clock
from aggregator.core.engine import RecordFailure
from aggregator.core.exceptions import WriteError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.records import json_digest, pad_sequence_number, record_json
from aggregator.core.text import bound
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.sizes import MAX_ITEM_BYTES, item_size
from aggregator.dynamodb.write_stats import WriteStats

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient


__all__ = ["REJECTED_ITEM_ERRORS", "DeadLetterWriter", "LastResort", "SqsLastResort", "keys_only"]

REJECTED_ITEM_ERRORS = frozenset(
    {"ValidationException", "ItemCollectionSizeLimitExceededException"}
)
"""Error codes meaning DynamoDB refuses this item for good (its size or contents, a full item
collection): only these take the fallback path (minimal form, then the last-resort queue).
Everything else (throttling, 5xx, the network, and configuration errors such as
``AccessDeniedException`` or ``ResourceNotFoundException``, which the last resort would only
hide) fails the batch, and Lambda retries it."""

_ITEM_MARGIN_BYTES = 1024
"""Kept free under the 400 KB limit: the size model is DynamoDB's, but a margin costs nothing."""


class LastResort(Protocol):
    """Where a dead letter goes when DynamoDB rejects even its minimal form."""

    def send(self, message: dict[str, Any]) -> None:
        """Deliver ``message`` (a small JSON-serializable mapping) or raise."""
        ...


class SqsLastResort:
    """Sends last-resort dead letters to an SQS queue (the template's on-failure queue).

    Messages are JSON objects: ``{"source": "ddb-aggregator", "kind": "dead-letter", "table",
    "shard_id", "sequence_number", "rule", "cause", "reason", "record_sha256", "record_bytes",
    "keys"}`` (``keys`` only when small), far below SQS's message size limit.
    """

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self.client = client
        self.requests = requests_of(client)
        self.queue_url = queue_url

    def send(self, message: dict[str, Any]) -> None:
        self.requests.send("send_message", QueueUrl=self.queue_url, MessageBody=json.dumps(message))


class DeadLetterWriter:
    """Writes dead letters (module docstring) with DynamoDB ``PutItem``.

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table_name, layout
        Where the dead letters go (``layout.dead_letters_pk``).
    last_resort
        Optional :class:`LastResort` (e.g. :class:`SqsLastResort`).
    clock
        Epoch seconds for ``failed_at``.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        layout: TableLayout = DEFAULT_LAYOUT,
        last_resort: LastResort | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.table_name = table_name
        self.layout = layout
        self.last_resort = last_resort
        self.client = client
        self.requests = requests_of(client)
        self._clock = clock

    def sort_key(self, failure: RecordFailure, shard: str, digest: str) -> str:
        position = (
            pad_sequence_number(failure.sequence_number)
            if failure.sequence_number is not None
            else f"unsequenced-{digest[:40]}"
        )
        return f"{shard}#{position}#{failure.rule}"

    def items(self, failure: RecordFailure, shard: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(item, minimal item)`` for one failure, as plain values (``str``, ``bytes``,
        ``bool``, ``Decimal``); the item keeps the record in the first form that fits."""
        lay = self.layout
        text = record_json(failure.record)
        digest = json_digest(text)  # of the same text: the record is serialized once
        size = len(text.encode("utf-8", "surrogatepass"))
        base: dict[str, Any] = {
            **lay.item_fields(lay.dead_letters_pk, self.sort_key(failure, shard, digest)),
            "rule": failure.rule,
            "cause": str(failure.cause),
            "reason": bound(failure.reason),
            "shard_id": shard,
            "failed_at": datetime.fromtimestamp(self._clock(), UTC).isoformat(),
            "record_sha256": digest,
            "record_bytes": Decimal(size),
        }
        if failure.sequence_number is not None:
            base["sequence_number"] = failure.sequence_number
        if failure.image is not None:
            base["image"] = failure.image
        minimal = {**base, "reason": bound(failure.reason, 200), "record_form": "digest"}
        minimal["replayable"] = False
        budget = MAX_ITEM_BYTES - _ITEM_MARGIN_BYTES
        candidates: list[dict[str, Any]] = [{"record_form": "json", "record": text}]
        if size > budget // 2:
            packed = zlib.compress(text.encode("utf-8", "surrogatepass"), 6)
            candidates.append({"record_form": "zlib", "record_zlib": packed})
        keys = keys_only(failure.record)
        if keys is not None:
            candidates.append({"record_form": "keys", "record_keys": record_json(keys)})
        for extra in candidates:
            item = {**base, **extra}
            item["replayable"] = (
                failure.replayable
                and failure.image is None
                and extra["record_form"] in ("json", "zlib")
            )
            if item_size(item) <= budget:
                return item, minimal
        return minimal, minimal

    def write(self, failures: list[RecordFailure], *, shard_id: str | None = None) -> WriteStats:
        """Write one dead letter per failure.

        Returns
        -------
        WriteStats
            ``dead_letters`` written (to the table or the last-resort queue), and
            ``dead_letters_compacted``, ``dead_letter_fallbacks``, ``dead_letters_to_queue``.

        Raises
        ------
        WriteError
            When a dead letter could not be recorded anywhere, or DynamoDB failed transiently:
            the batch must then be retried (nothing of it has been applied yet).
        """
        stats = WriteStats()
        shard = shard_id or "unknown-shard"
        for failure in failures:
            item, minimal = self.items(failure, shard)
            if item["record_form"] != "json":
                stats.dead_letters_compacted += 1
            rejected: ClientError | None = None
            for attempt, candidate in enumerate((item, minimal)):  # minimal: after a rejection
                try:
                    self._put(candidate, stats)
                except ClientError as exc:
                    if error_code(exc) not in REJECTED_ITEM_ERRORS:
                        raise self._error(failure, exc) from exc
                    stats.dead_letter_fallbacks += attempt == 0
                    rejected = exc
                    continue
                except BotoCoreError as exc:
                    raise self._error(failure, exc) from exc
                stats.dead_letters += 1
                rejected = None
                break
            if rejected is not None:
                self._send_last_resort(failure, minimal, rejected, stats)
        return stats

    def _put(self, item: dict[str, Any], stats: WriteStats) -> None:
        stats.requests += 1
        self.requests.send("put_item", TableName=self.table_name, Item=_to_dynamodb(item))

    def _send_last_resort(
        self,
        failure: RecordFailure,
        minimal: dict[str, Any],
        exc: BaseException,
        stats: WriteStats,
    ) -> None:
        if self.last_resort is None:
            raise WriteError(
                f"could not dead-letter record {failure.sequence_number} (rule {failure.rule!r}) "
                f"and no last-resort queue is configured: {bound(str(exc), 300)}"
            ) from exc
        keys = keys_only(failure.record)
        message = {
            "source": "ddb-aggregator",
            "kind": "dead-letter",
            "table": self.table_name,
            "shard_id": minimal["shard_id"],
            "sequence_number": failure.sequence_number,
            "rule": failure.rule,
            "cause": str(failure.cause),
            "reason": minimal["reason"],
            "record_sha256": minimal["record_sha256"],
            "record_bytes": int(minimal["record_bytes"]),
            "dynamodb_error": bound(str(exc), 300),
        }
        keys_text = None if keys is None else record_json(keys)
        if keys_text is not None and len(keys_text) <= 4096:
            message["keys"] = json.loads(keys_text)
        try:
            self.last_resort.send(message)
        except (ClientError, BotoCoreError) as sent:
            raise WriteError(
                f"could not dead-letter record {failure.sequence_number} (rule {failure.rule!r}) "
                f"in the table or the last-resort queue: {bound(str(sent), 300)}"
            ) from sent
        stats.dead_letters += 1
        stats.dead_letters_to_queue += 1

    @staticmethod
    def _error(failure: RecordFailure, exc: BaseException) -> WriteError:
        return WriteError(
            f"could not dead-letter record {failure.sequence_number} "
            f"(rule {failure.rule!r}): {bound(str(exc), 300)}"
        )


def keys_only(raw: Any) -> dict[str, Any] | None:
    """The identifying part of a stream record (``eventName``, ``eventID``, its ``Keys`` and
    ``SequenceNumber``), or ``None`` when it is not a mapping."""
    if not isinstance(raw, dict):
        return None
    dynamodb = raw.get("dynamodb")
    out: dict[str, Any] = {"eventName": raw.get("eventName"), "eventID": raw.get("eventID")}
    if isinstance(dynamodb, dict):
        out["dynamodb"] = {
            "Keys": dynamodb.get("Keys"),
            "SequenceNumber": dynamodb.get("SequenceNumber"),
        }
    return out


def _to_dynamodb(item: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in item.items():
        if isinstance(value, bool):
            out[name] = {"BOOL": value}
        elif isinstance(value, Decimal):
            out[name] = {"N": str(value)}
        elif isinstance(value, bytes):
            out[name] = {"B": value}
        else:
            out[name] = {"S": value}
    return out
