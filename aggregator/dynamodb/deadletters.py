"""Dead letters: write them so that none is ever lost or blocks a shard, list them, and replay
them exactly once after the rules are fixed.

Writing (:class:`DeadLetterWriter`)
-----------------------------------
A (record, rule) that a rule could not evaluate, and a record that could not be read at all
(rule ``*``), is written under the reserved ``dead_letters_pk`` with sort key
``<shard>#<40-digit sequence number>#<rule>`` (``<shard>#unsequenced-<sha256>#*`` for a record
without a valid sequence number), so writing one twice is harmless. The item carries ``rule``,
``cause`` (:class:`~aggregator.core.exceptions.FailureCause`), ``reason`` (one line, at most 1,000
characters, quoting values by a short prefix), ``sequence_number``, ``shard_id``, ``failed_at``
(ISO 8601 UTC), ``replayable``, ``record_sha256`` and ``record_bytes`` (of the record's canonical
JSON), and the record itself in the first form that fits DynamoDB's 400 KB item limit (Developer
Guide, "Service, account, and table quotas"; the item's size is measured by DynamoDB's rules,
attribute names included, before writing):

``json``    the record as JSON text (attribute ``record``);
``zlib``    the same, zlib-compressed (attribute ``record_zlib``, binary);
``keys``    only ``eventName``, ``eventID`` and ``dynamodb.Keys`` / ``SequenceNumber`` (the record
            is not replayable then; the digest identifies it);
``digest``  nothing but the digest and size.

Last resort. A put that fails for a transient reason (throttling, a 5xx, the network) or a
configuration error (access denied, table not found) fails the batch: Lambda retries it (bounded
by the event source mapping's ``MaximumRetryAttempts`` and ``MaximumRecordAgeInSeconds``, after
which Lambda sends the batch's metadata to the on-failure destination). A put that DynamoDB
rejects for good (``ValidationException``, a full item collection) is retried once as a minimal
dead letter (``digest`` form, short reason). If that is rejected too, the dead letter
is sent as a message to the last-resort queue (the template's on-failure SQS queue, environment
variable ``AGGREGATOR_ON_FAILURE_QUEUE_URL``) and the shard moves on; without a queue, or if the
message cannot be sent, the batch fails and Lambda's retry limits apply. Each step is counted
(``WriteStats.dead_letters_compacted``, ``dead_letter_fallbacks``, ``dead_letters_to_queue``,
and the EMF metrics of the same names).

Healing
-------
A letter with ``image = "NewImage"`` records that an item's image, as written, counts nothing
for the rule (:mod:`aggregator.core.engine`, "Bad images"): the rest of its record applied, and
the aggregate heals when the application fixes the item (or deletes it), with no replay.
:func:`letter_states` tells, per letter, whether its item is still bad (``open``), fixed or
deleted (``healed``): one ``BatchGetItem`` per 100 items (strongly consistent reads, 1 RCU per
4 KB each: Developer Guide, "Read/write capacity mode"); :func:`clear_healed_dead_letters`
deletes the healed ones. Such a letter is never replayed: its record's other image applied
already, so replaying it could only count that image twice.

Replaying
---------
A letter written with nothing of its record applied (``image`` absent: a sum past 38 significant
digits, a record without the images its event needs, or any letter written before images were
evaluated one by one) replays: the letter's rule, as it is defined now, evaluates the stored
record and its deltas apply in one ``TransactWriteItems`` together with the deletion of the
dead-letter item (condition: it still exists). A second replay, or two concurrent ones,
therefore apply nothing twice. Transactions cost 2 WCU per item (Developer Guide, "Read/write
capacity mode"), which is fine for the rare dead letter. Malformed records and records not stored
whole are not replayable.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, cast

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.engine import RECORD_RULE, BatchDeltas, Engine, RecordFailure
from aggregator.core.exceptions import FailureCause, RuleError, WriteError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.records import (
    Image,
    MalformedRecord,
    json_digest,
    pad_sequence_number,
    parse_record,
    record_json,
)
from aggregator.core.rules import Rule, RuleSet
from aggregator.core.text import bound
from aggregator.dynamodb.collections import batch_get_items, client_call, query_collection
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.sizes import MAX_ITEM_BYTES, item_size
from aggregator.dynamodb.stats import WriteStats
from aggregator.dynamodb.updates import add_update

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef
    from mypy_boto3_sqs import SQSClient


__all__ = [
    "DeadLetter",
    "DeadLetterWriter",
    "LastResort",
    "LetterState",
    "ReplayResult",
    "SqsLastResort",
    "clear_healed_dead_letters",
    "letter_states",
    "list_dead_letters",
    "replay_dead_letters",
]

DEFAULT_REPLAY_MIN_AGE_SECONDS = 25 * 3600
"""Replay only dead letters older than this: the template's ``MaximumRecordAgeInSeconds`` (24 h)
plus an hour, after which Lambda can no longer deliver their record again."""

RECORD_FORMS = ("json", "zlib", "keys", "digest")
"""How a dead letter keeps its record, most complete first (module docstring)."""

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
        self.queue_url = queue_url

    def send(self, message: dict[str, Any]) -> None:
        self.client.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(message))


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-lettered (record, rule) as stored. ``failed_at`` is ISO 8601 UTC.

    ``record`` is the stored record (``None`` when only its keys or digest were kept: see
    ``record_form``); ``replayable`` says whether :func:`replay_dead_letters` can apply it;
    ``image`` is ``"NewImage"`` for an item image that counts nothing until the item is fixed
    (module docstring, "Healing"), ``None`` when nothing of the record applied.
    """

    sort_key: str
    shard_id: str
    sequence_number: str
    rule: str
    reason: str
    failed_at: str
    record: Any = field(repr=False)
    cause: str = FailureCause.INVALID_VALUE.value
    record_form: str = "json"
    record_sha256: str = ""
    record_bytes: int = 0
    replayable: bool = True
    image: str | None = None

    @property
    def unreplayable_reason(self) -> str:
        """Why the letter cannot be replayed when it is not ``replayable`` (a malformed record,
        or a record kept only by its keys or digest)."""
        if self.cause == FailureCause.MALFORMED_RECORD:
            return "the record is malformed"
        return f"only the record's {self.record_form} were kept (it did not fit 400 KB)"

    @property
    def typed_item_key(self) -> dict[str, Any] | None:
        """The source item's table key in DynamoDB JSON (the stream record's ``Keys``), or
        ``None`` when the record kept does not say."""
        record = self.record if isinstance(self.record, dict) else {}
        data = record.get("dynamodb")
        keys = data.get("Keys") if isinstance(data, dict) else None
        if not isinstance(keys, dict) or not keys:
            return None
        return keys

    @property
    def item_key(self) -> dict[str, str] | None:
        """The source item's table key as ``{attribute: value text}`` (the stream record's
        ``Keys``), or ``None`` when the record kept does not say (a digest, a malformed
        record)."""
        keys = self.typed_item_key
        if keys is None:
            return None
        out = {}
        for name, value in keys.items():
            if isinstance(value, dict) and len(value) == 1:
                (out[str(name)],) = (str(v) for v in value.values())
        return out or None

    @property
    def attribute(self) -> str | None:
        """The attribute the reason names (``NewImage: delta attribute 'amount' is str``),
        or ``None``."""
        found = re.search(r"attribute '([^']+)'", self.reason)
        return found.group(1) if found else None


@dataclass(slots=True)
class ReplayResult:
    """Counts of one :func:`replay_dead_letters` call, plus messages for what still fails.
    ``heal_by_fixing`` counts the letters of bad item images, never replayed (module docstring,
    "Healing")."""

    replayed: int = 0
    no_change: int = 0
    already_replayed: int = 0
    too_recent: int = 0
    heal_by_fixing: int = 0
    still_failing: list[str] = field(default_factory=list)


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
        clock: Any = time.time,
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.layout = layout
        self.last_resort = last_resort
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
        keys = _keys_only(failure.record)
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
        self.client.put_item(TableName=self.table_name, Item=_to_dynamodb(item))

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
        keys = _keys_only(failure.record)
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


def _keys_only(raw: Any) -> dict[str, Any] | None:
    """The identifying part of a record, or ``None`` when it has none."""
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


def _stored_record(item: dict[str, Any]) -> Any:
    if "record" in item:
        return json.loads(item["record"]["S"])
    if "record_zlib" in item:
        return json.loads(zlib.decompress(item["record_zlib"]["B"]).decode("utf-8"))
    if "record_keys" in item:
        return json.loads(item["record_keys"]["S"])
    return None


def list_dead_letters(
    client: DynamoDBClient, table_name: str, *, layout: TableLayout = DEFAULT_LAYOUT
) -> Iterator[DeadLetter]:
    """Every dead letter, in shard and sequence order (paginated ``Query``; on a table without a
    sort key through the collection index, :mod:`aggregator.dynamodb.collections`)."""

    for page in query_collection(client_call(client), table_name, layout, layout.dead_letters_pk):
        for item in page:
            form = item.get("record_form", {}).get("S", "json")
            if item.get("record_truncated", {}).get("BOOL"):  # written before record_form
                form = "keys"
            yield DeadLetter(
                sort_key=layout.sort_key_of(item) or "",
                shard_id=item["shard_id"]["S"],
                sequence_number=item.get("sequence_number", {}).get("S", ""),
                rule=item["rule"]["S"],
                reason=item["reason"]["S"],
                failed_at=item["failed_at"]["S"],
                record=_stored_record(item),
                cause=item.get("cause", {}).get("S", FailureCause.INVALID_VALUE.value),
                record_form=form,
                record_sha256=item.get("record_sha256", {}).get("S", ""),
                record_bytes=int(item.get("record_bytes", {}).get("N", "0")),
                replayable=item.get("replayable", {}).get("BOOL", form in ("json", "zlib")),
                image=item.get("image", {}).get("S"),
            )


@dataclass(frozen=True, slots=True)
class LetterState:
    """Where one dead letter stands (module docstring, "Healing" and "Replaying").

    ``state`` is one of:

    ``open``      the item is still bad for the rule (``detail``: why, now);
    ``healed``    the item was fixed (``detail``: ``"item fixed"``) or deleted (``"item
                  deleted"``): the aggregate counts it as it is, and the letter can be cleared;
    ``replay``    nothing of the record applied: ``replay-dead-letters`` applies it once its rule
                  evaluates the record;
    ``stuck``     nothing of the record applied and it cannot be replayed (a malformed record,
                  only its keys or digest kept): ``reconcile --repair`` makes the rule's
                  aggregates exact;
    ``unknown``   the letter's rule is not defined in the rules given, or its item key was not
                  kept.
    """

    letter: DeadLetter
    state: str
    detail: str = ""


def letter_states(
    client: DynamoDBClient,
    table_name: str,
    letters: list[DeadLetter],
    rules: RuleSet | None,
    *,
    layout: TableLayout | None = None,
) -> list[LetterState]:
    """Each letter's :class:`LetterState`, in the same order. The items of ``image`` letters are
    read with strongly consistent ``BatchGetItem`` (ceil(n / 100) requests for n such letters)
    and judged by :meth:`Engine.image_error <aggregator.core.engine.Engine.image_error>`, the
    handler's own verdict; without ``rules`` their state is ``unknown``.

    Raises
    ------
    botocore.exceptions.ClientError
        When DynamoDB refuses the reads.
    aggregator.dynamodb.batch.UnprocessedKeysError
        When DynamoDB leaves keys unprocessed eight requests in a row.
    """
    engine = Engine(rules, layout) if rules is not None else None
    names = {r.name for r in rules} if rules is not None else set()
    out: dict[int, LetterState] = {}
    probe: list[tuple[int, dict[str, Any]]] = []
    for at, letter in enumerate(letters):
        if letter.image is None:
            if letter.replayable and letter.rule != RECORD_RULE:
                out[at] = LetterState(letter, "replay", "replay-dead-letters applies it")
            else:
                out[at] = LetterState(letter, "stuck", letter.unreplayable_reason)
            continue
        key = letter.typed_item_key
        if engine is None:
            out[at] = LetterState(letter, "unknown", "no rules given")
        elif key is None:
            out[at] = LetterState(letter, "unknown", "item key not kept")
        elif letter.rule not in names:
            out[at] = LetterState(letter, "unknown", f"rule {letter.rule!r} is not defined")
        else:
            probe.append((at, key))
    items = batch_get_items(client_call(client), table_name, [key for _, key in probe])
    for (at, _), item in zip(probe, items, strict=True):
        letter = letters[at]
        if item is None:
            out[at] = LetterState(letter, "healed", "item deleted")
            continue
        assert engine is not None
        error = engine.image_error(letter.rule, Image(item))
        out[at] = (
            LetterState(letter, "healed", "item fixed")
            if error is None
            else LetterState(letter, "open", bound(str(error), 300))
        )
    return [out[at] for at in range(len(letters))]


def clear_healed_dead_letters(
    client: DynamoDBClient,
    table_name: str,
    rules: RuleSet,
    *,
    layout: TableLayout | None = None,
    letters: list[DeadLetter] | None = None,
) -> tuple[int, int]:
    """Delete the letters whose item has been fixed or deleted (:func:`letter_states`):
    ``(cleared, left)``. Only letters read as healed go; a batch redelivered later may write one
    again, and it then reads as healed again (a letter carries no amount: clearing it changes
    no aggregate). ``letters``: the table's letters when already listed (listed here if not).

    Raises
    ------
    botocore.exceptions.ClientError
        When DynamoDB refuses a read or a delete.
    """
    layout = rules.layout if layout is None else layout
    if letters is None:
        letters = list(list_dead_letters(client, table_name, layout=layout))
    cleared = 0
    for state in letter_states(client, table_name, letters, rules, layout=layout):
        if state.state != "healed":
            continue
        client.delete_item(
            TableName=table_name, Key=layout.item_key(layout.dead_letters_pk, state.letter.sort_key)
        )
        cleared += 1
    return cleared, len(letters) - cleared


def replay_dead_letters(
    client: DynamoDBClient,
    table_name: str,
    rules: RuleSet,
    *,
    layout: TableLayout | None = None,
    min_age_seconds: float = DEFAULT_REPLAY_MIN_AGE_SECONDS,
    clock: Any = time.time,
) -> ReplayResult:
    """Re-apply every dead letter of which nothing applied and whose rule now evaluates,
    exactly once (on ``layout``, default the rule set's). Letters of bad item images are never
    replayed (module docstring, "Healing"): they are counted in ``heal_by_fixing``.

    Dead letters whose rule still fails or no longer exists, and those that are not replayable
    (a malformed record, a record kept only by its keys or digest), stay in place and are
    reported in ``still_failing``. Letters written less than ``min_age_seconds`` ago (default
    25 h) are left for later and counted in ``too_recent``: until then Lambda may still deliver
    their batch again (``MaximumRecordAgeInSeconds``, 24 h in the template), and a redelivery
    after a replay would dead-letter the record anew, to be replayed a second time.

    Raises
    ------
    WriteError
        When a transaction fails for another reason than the dead letter being gone.
    """
    layout = rules.layout if layout is None else layout
    result = ReplayResult()
    by_name = {r.name: r for r in rules}
    horizon = clock() - min_age_seconds
    for letter in list_dead_letters(client, table_name, layout=layout):
        where = f"{letter.sort_key}"
        rule = _replay_rule(letter, by_name, horizon, result, where)
        if rule is None:
            continue
        batch = _replay_batch(letter, rules, rule, layout, result, where)
        if batch is None:
            continue
        actions = _replay_actions(table_name, layout, letter, rule, batch)
        _apply_replay(client, actions, result, where)
    return result


def _replay_rule(
    letter: DeadLetter,
    by_name: dict[str, Rule],
    horizon: float,
    result: ReplayResult,
    where: str,
) -> Rule | None:
    """The letter's rule when the letter is to be replayed; otherwise ``None``, after counting
    it (a bad item image, too recent, not replayable, its rule gone) in ``result``."""
    if letter.image is not None:
        # the record's other image applied when it was processed: the item heals when it
        # is fixed, and a replay could only count that image twice
        result.heal_by_fixing += 1
        return None
    if datetime.fromisoformat(letter.failed_at).timestamp() > horizon:
        result.too_recent += 1
        return None
    if not letter.replayable or letter.rule == RECORD_RULE:
        result.still_failing.append(f"{where}: not replayable: {letter.unreplayable_reason}")
        return None
    rule = by_name.get(letter.rule)
    if rule is None:
        result.still_failing.append(f"{where}: rule {letter.rule!r} is not defined any more")
    return rule


def _replay_batch(
    letter: DeadLetter,
    rules: RuleSet,
    rule: Rule,
    layout: TableLayout,
    result: ReplayResult,
    where: str,
) -> BatchDeltas | None:
    """The deltas of the letter's record under its rule's lineage as defined now; ``None``,
    after reporting why in ``result.still_failing``, when the record or the rule still fails."""
    parsed = parse_record(letter.record)
    if isinstance(parsed, MalformedRecord):
        result.still_failing.append(f"{where}: not replayable: {parsed.reason}")
        return None
    try:
        engine = Engine(rules.lineage(rule.name), layout)
    except RuleError as exc:  # pragma: no cover - a rule from a valid set is valid alone
        result.still_failing.append(f"{where}: {exc}")
        return None
    batch = engine.process([parsed])
    if batch.failures:
        result.still_failing.append(f"{where}: {batch.failures[0].reason}")
        return None
    return batch


def _replay_actions(
    table_name: str, layout: TableLayout, letter: DeadLetter, rule: Rule, batch: BatchDeltas
) -> list[dict[str, Any]]:
    """The transaction of one replay: an update per non-zero delta of the letter's rule, then
    the deletion of the dead letter (condition: it still exists)."""
    actions: list[dict[str, Any]] = []
    for delta in batch.deltas.values():
        # the lineage's source rules evaluate user items too when the dead letter's rule was
        # a base rule that has since become derived: apply the dead letter's rule only
        if (delta.amount == 0 and delta.count == 0) or delta.ref.rule != letter.rule:
            continue
        if delta.ref.partial:  # write sharding: the replay adds to the aggregate itself
            delta = replace(delta, ref=replace(delta.ref, partial=False), leaderboard=rule.indexed)
        actions.append({"Update": add_update(table_name, layout, delta, delta.amount)})
    actions.append(
        {
            "Delete": {
                "TableName": table_name,
                "Key": layout.item_key(layout.dead_letters_pk, letter.sort_key),
                "ConditionExpression": "attribute_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": layout.partition_key},
            }
        }
    )
    return actions


def _apply_replay(
    client: DynamoDBClient, actions: list[dict[str, Any]], result: ReplayResult, where: str
) -> None:
    """Run one replay's transaction and count it in ``result`` (replayed, no change, or already
    replayed when the dead letter was gone).

    Raises
    ------
    WriteError
        When the transaction fails for another reason than the dead letter being gone.
    """
    try:
        client.transact_write_items(TransactItems=cast("list[TransactWriteItemTypeDef]", actions))
    except ClientError as exc:
        reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
        if reasons and reasons[-1] == "ConditionalCheckFailed":
            result.already_replayed += 1
            return
        raise WriteError(f"replaying {where} failed: {exc}") from exc
    if len(actions) > 1:
        result.replayed += 1
    else:
        result.no_change += 1
