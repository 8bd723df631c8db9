"""Why a rule counts an item, or does not: the engine's own evaluation, explained.

:func:`explain_image` takes one item image and, per base rule, says whether it matches (the
first failing test and the value it saw when not: :meth:`Condition.first_failure
<aggregator.core.conditions.Condition.first_failure>`, which decides with ``matches`` itself)
and, when it does, what it adds: the aggregate's key as ``query`` shows it, its sort key, the
time bucket, the amount (:meth:`Engine.image_contributions
<aggregator.core.engine.Engine.image_contributions>`), or why it cannot be evaluated (the
dead-letter cause).

:func:`explain_record` takes one stream record: both images explained, then the record run
through :meth:`Engine.process <aggregator.core.engine.Engine.process>` as the handler runs it, so
the net change per aggregate is the handler's (a move between keys is two changes; a change
that leaves the amount alone is none), with the reasons the handler would write nothing: a
framework self-write, a TTL delete under ``ttl_deletes: keep``, an expired bucket, an old image
the rule cannot read (it counted nothing, so nothing is retracted), or the new image's dead
letter. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from aggregator.core.deltas import CoalescedDelta, RecordFailure
from aggregator.core.engine import Engine
from aggregator.core.exceptions import EvaluationError
from aggregator.core.records import Image, StreamRecord

__all__ = [
    "Contributed",
    "RecordExplanation",
    "RuleExplanation",
    "explain_image",
    "explain_record",
]


@dataclass(frozen=True, slots=True)
class Contributed:
    """One aggregate an image adds to: ``key`` as ``query`` shows it, ``sort_key`` of the
    aggregate item, the time bucket (``granularity`` and ``bucket`` start, UTC) for windowed
    rules, and the ``amount``; for a target rule the application item and attribute it adds
    to."""

    key: str
    sort_key: str
    amount: Decimal
    granularity: str | None = None
    bucket: str | None = None
    target: tuple[str, ...] | None = None
    """For a target rule: the application item's key values; ``sort_key`` is then its ledger's."""
    target_attribute: str | None = None
    partition: str | None = None
    """For a rule spread over several partition key values: the one the aggregate item is under
    (:meth:`~aggregator.core.layout.TableLayout.aggregate_partition`); ``None`` otherwise."""


@dataclass(slots=True)
class RuleExplanation:
    """What one rule makes of one image: ``matched``; ``reason`` (the first failing test of a
    non-match, or the evaluation error, with its dead-letter ``cause``: a value the rule reads
    that cannot be read fails the rule as in the handler, matched or not); the aggregates it
    adds to; the rule's ``kind`` (:meth:`aggregator.core.kinds.Kind.describe`)."""

    rule: str
    matched: bool
    reason: str | None = None
    cause: str | None = None
    contributions: list[Contributed] = field(default_factory=list)
    kind: str = "sum"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data; amounts as decimal strings."""
        return {
            "rule": self.rule,
            "kind": self.kind,
            "matched": self.matched,
            "reason": self.reason,
            "cause": self.cause,
            "contributions": [
                {
                    "key": c.key,
                    "sort_key": c.sort_key,
                    "amount": str(c.amount),
                    "granularity": c.granularity,
                    "bucket": c.bucket,
                    **(
                        {"target": list(c.target), "target_attribute": c.target_attribute}
                        if c.target is not None
                        else {}
                    ),
                    **({"partition": c.partition} if c.partition is not None else {}),
                }
                for c in self.contributions
            ],
        }


@dataclass(slots=True)
class RecordExplanation:
    """What the handler makes of one stream record.

    ``old`` and ``new`` explain the images (``None`` when the record has none); ``changes``
    are the handler's net changes, one per aggregate item (zero-sum ones left out);
    ``failures`` the (rule, reason, cause) it would dead-letter; ``notes`` why it writes
    nothing for a rule or the whole record (self-write, TTL delete kept, expired bucket).
    """

    event_name: str
    sequence_number: str
    keys: dict[str, Any]
    old: list[RuleExplanation] | None
    new: list[RuleExplanation] | None
    changes: list[CoalescedDelta]
    failures: list[RecordFailure]
    notes: list[str]


def explain_image(engine: Engine, image: Image, *, now: float) -> list[RuleExplanation]:
    """Each base rule's verdict on ``image`` (module docstring), in rule order; derived rules
    read aggregates, not items, and are left out. ``now`` (epoch seconds) decides which time
    buckets have expired (their contributions are left out, as the handler skips them)."""
    out = []
    for rule in engine.rules.base_rules:
        # as the handler: the attributes the rule reads are checked before anything else, so
        # a malformed value fails the rule whether it matches or not (its dead letter)
        found, failed = engine.image_contributions(image, [rule.name], now=now)
        kind = rule.kind.describe()
        if failed:
            _, error = failed[0]
            matched = _matches(rule, image)
            out.append(RuleExplanation(rule.name, matched, str(error), str(error.cause), kind=kind))
            continue
        failure = rule.match.first_failure(image)
        if failure is not None:
            out.append(RuleExplanation(rule.name, False, failure, kind=kind))
            continue
        contributions = [
            Contributed(
                ref.display_key,
                ref.sort_key,
                amount,
                ref.bucket.granularity if ref.bucket is not None else None,
                ref.bucket.text if ref.bucket is not None else None,
                ref.target,
                None if rule.target is None else rule.target.attribute,
                (
                    engine.layout.aggregate_partition(ref.sort_key, rule.spread, rule.key_fields)
                    if rule.spread > 1 and rule.target is None
                    else None
                ),
            )
            for ref, amount in found.items()
        ]
        out.append(RuleExplanation(rule.name, True, contributions=contributions, kind=kind))
    return out


def _matches(rule: Any, image: Image) -> bool:
    """Whether the rule's match holds, where the image's values can be read at all."""
    try:
        return bool(rule.match.matches(image))
    except EvaluationError:
        return False


def explain_record(engine: Engine, record: StreamRecord, *, now: float) -> RecordExplanation:
    """The handler's view of one stream record (module docstring)."""
    data = record.raw.get("dynamodb", {})
    old, new = record.old_image, record.new_image
    notes = []
    if engine.is_self_write(record):
        notes.append(
            "a write of the framework's own (a reserved partition key): the handler skips it"
        )
    if record.is_ttl_delete:
        kept = [r.name for r in engine.rules if r.ttl_deletes == "keep"]
        if kept:
            notes.append(
                "a delete made by TTL: rules with ttl_deletes: keep retract nothing "
                f"({', '.join(kept)})"
            )
    batch = engine.process([record], now=now)
    if batch.expired:
        notes.append(
            f"{batch.expired} change(s) to time buckets past their retention skipped (an expired "
            "bucket is never written again)"
        )
    changes = [d for d in batch.deltas.values() if d.amount != 0 or d.count != 0]
    old_verdicts = explain_image(engine, old, now=now) if old is not None else None
    unreadable = [v.rule for v in old_verdicts or () if v.cause is not None]
    if unreadable and batch.old_images_unreadable:
        notes.append(
            f"the old image could not be evaluated by {', '.join(unreadable)}: it counted "
            "nothing, so nothing of it is retracted (a bad item heals when it is fixed)"
        )
    return RecordExplanation(
        event_name=record.event_name,
        sequence_number=record.sequence_number,
        keys=dict(data.get("Keys", {})),
        old=old_verdicts,
        new=explain_image(engine, new, now=now) if new is not None else None,
        changes=changes,
        failures=list(batch.failures),
        notes=notes,
    )
