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
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from aggregator.core.clock import Clock
from aggregator.core.engine import RECORD_RULE, BatchDeltas, Engine
from aggregator.core.exceptions import FailureCause, RuleError, WriteError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.records import Image, MalformedRecord, parse_record
from aggregator.core.rules import Rule, RuleSet
from aggregator.core.text import bound
from aggregator.dynamodb.client import RequestClient, requests_of
from aggregator.dynamodb.collections import batch_get_items, query_collection
from aggregator.dynamodb.deadletter_writer import (
    REJECTED_ITEM_ERRORS,
    DeadLetterWriter,
    LastResort,
    SqsLastResort,
)
from aggregator.dynamodb.errors import AwsRequestError
from aggregator.dynamodb.updates import add_update

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


__all__ = [
    "REJECTED_ITEM_ERRORS",
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

    pages = query_collection(requests_of(client).send, table_name, layout, layout.dead_letters_pk)
    for page in pages:
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
    aggregator.dynamodb.errors.AwsError
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
    items = batch_get_items(requests_of(client).send, table_name, [key for _, key in probe])
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
    aggregator.dynamodb.errors.AwsError
        When DynamoDB refuses a read or a delete.
    """
    layout = rules.layout if layout is None else layout
    if letters is None:
        letters = list(list_dead_letters(client, table_name, layout=layout))
    requests = requests_of(client)
    cleared = 0
    for state in letter_states(client, table_name, letters, rules, layout=layout):
        if state.state != "healed":
            continue
        requests.send(
            "delete_item",
            TableName=table_name,
            Key=layout.item_key(layout.dead_letters_pk, state.letter.sort_key),
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
    clock: Clock = time.time,
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
    client: DynamoDBClient | RequestClient,
    actions: list[dict[str, Any]],
    result: ReplayResult,
    where: str,
) -> None:
    """Run one replay's transaction and count it in ``result`` (replayed, no change, or already
    replayed when the dead letter was gone).

    Raises
    ------
    WriteError
        When the transaction fails for another reason than the dead letter being gone.
    """
    try:
        requests_of(client).send(
            "transact_write_items", TransactItems=cast("list[TransactWriteItemTypeDef]", actions)
        )
    except AwsRequestError as exc:
        reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
        if reasons and reasons[-1] == "ConditionalCheckFailed":
            result.already_replayed += 1
            return
        raise WriteError(f"replaying {where} failed: {exc}") from exc
    if len(actions) > 1:
        result.replayed += 1
    else:
        result.no_change += 1
