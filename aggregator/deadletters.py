"""Dead-lettered records: list them, and replay them exactly once after the rules are fixed.

A (record, rule) that a rule could not evaluate is written by the writer under the reserved
``dead_letters_pk`` (sort key ``<shard>#<40-digit sequence number>#<rule>``) and skipped, so the
shard never blocks. Replaying evaluates that one rule, as it is defined now, on the stored record
and applies its deltas in one ``TransactWriteItems`` together with the deletion of the dead-letter
item (condition: it still exists). A second replay, or two concurrent ones, therefore apply
nothing twice. Transactions cost 2 WCU per item (Developer Guide, "Read/write capacity mode"),
which is fine for the rare dead letter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from .config import DEFAULT_LAYOUT, TableLayout
from .engine import Engine
from .exceptions import RuleError, WriteError
from .records import StreamRecord
from .rules import RuleSet
from .writer import add_update

__all__ = ["DeadLetter", "ReplayResult", "list_dead_letters", "replay_dead_letters"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-lettered (record, rule). ``failed_at`` is ISO 8601 UTC."""

    sort_key: str
    shard_id: str
    sequence_number: str
    rule: str
    reason: str
    failed_at: str
    record: dict[str, Any] = field(repr=False)
    record_truncated: bool = False


@dataclass(slots=True)
class ReplayResult:
    """Counts of one :func:`replay_dead_letters` call, plus messages for what still fails."""

    replayed: int = 0
    no_change: int = 0
    already_replayed: int = 0
    still_failing: list[str] = field(default_factory=list)


def list_dead_letters(
    client: Any, table_name: str, *, layout: TableLayout = DEFAULT_LAYOUT
) -> Iterator[DeadLetter]:
    """Every dead letter, in shard and sequence order (paginated ``Query``)."""
    start: dict[str, Any] | None = None
    while True:
        kwargs: dict[str, Any] = {
            "TableName": table_name,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": layout.partition_key},
            "ExpressionAttributeValues": {":pk": {"S": layout.dead_letters_pk}},
            "ConsistentRead": True,
        }
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = client.query(**kwargs)
        for item in page.get("Items", []):
            yield DeadLetter(
                sort_key=item[layout.sort_key]["S"],
                shard_id=item["shard_id"]["S"],
                sequence_number=item["sequence_number"]["S"],
                rule=item["rule"]["S"],
                reason=item["reason"]["S"],
                failed_at=item["failed_at"]["S"],
                record=json.loads(item["record"]["S"]),
                record_truncated=item.get("record_truncated", {}).get("BOOL", False),
            )
        start = page.get("LastEvaluatedKey")
        if not start:
            return


def replay_dead_letters(
    client: Any,
    table_name: str,
    rules: RuleSet,
    *,
    layout: TableLayout = DEFAULT_LAYOUT,
) -> ReplayResult:
    """Re-apply every dead letter whose rule now evaluates, exactly once.

    Dead letters whose rule still fails, no longer exists, or whose record was truncated stay in
    place and are reported in ``still_failing``.

    Raises
    ------
    WriteError
        When a transaction fails for another reason than the dead letter being gone.
    """
    result = ReplayResult()
    by_name = {r.name: r for r in rules}
    for letter in list_dead_letters(client, table_name, layout=layout):
        where = f"{letter.sort_key}"
        rule = by_name.get(letter.rule)
        if rule is None:
            result.still_failing.append(f"{where}: rule {letter.rule!r} is not defined any more")
            continue
        if letter.record_truncated:
            result.still_failing.append(f"{where}: the stored record was truncated (> 400 KB)")
            continue
        try:
            engine = Engine(rules.lineage(rule.name), layout)
        except RuleError as exc:  # pragma: no cover - a rule from a valid set is valid alone
            result.still_failing.append(f"{where}: {exc}")
            continue
        batch = engine.process([StreamRecord(letter.record)])
        if batch.failures:
            result.still_failing.append(f"{where}: {batch.failures[0].reason}")
            continue
        actions: list[dict[str, Any]] = []
        for delta in batch.deltas.values():
            # the lineage's source rules evaluate user items too when the dead letter's rule was
            # a base rule that has since become derived: apply the dead letter's rule only
            if delta.amount == 0 or delta.ref.rule != letter.rule:
                continue
            actions.append({"Update": add_update(table_name, layout, delta, delta.amount)})
        actions.append(
            {
                "Delete": {
                    "TableName": table_name,
                    "Key": {
                        layout.partition_key: {"S": layout.dead_letters_pk},
                        layout.sort_key: {"S": letter.sort_key},
                    },
                    "ConditionExpression": "attribute_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": layout.partition_key},
                }
            }
        )
        try:
            client.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if reasons and reasons[-1] == "ConditionalCheckFailed":
                result.already_replayed += 1
                continue
            raise WriteError(f"replaying {where} failed: {exc}") from exc
        if len(actions) > 1:
            result.replayed += 1
        else:
            result.no_change += 1
    return result
