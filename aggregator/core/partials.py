"""A record of a partial item (write sharding): the change it makes to its aggregate (pure: no
boto3, no I/O).

A rule with ``write_shards`` spreads an aggregate's writes over *partial* items
(:attr:`AggregateRef.partial <aggregator.core.deltas.AggregateRef.partial>`); each partial's
stream record changes the aggregate by the partial's new value less its old one
(:func:`partial_delta`), and its count likewise for a kind that keeps one. A partial carries
what its aggregate needs: its display key (``key``), for a target rule the application item's
key values (``target``), for a windowed rule its time bucket (``granularity``, ``bucket``, the
TTL attribute).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from aggregator.core.deltas import AggregateRef, RecordDelta, RecordFailure
from aggregator.core.exceptions import EvaluationError, FailureCause
from aggregator.core.kinds import COUNT_ATTRIBUTE
from aggregator.core.layout import TableLayout
from aggregator.core.numbers import subtract
from aggregator.core.records import Image, StreamRecord
from aggregator.core.rules import Bucket, Rule

__all__ = ["partial_delta"]


@dataclass(frozen=True, slots=True)
class _PartialState:
    """What one image of a partial holds for its aggregate (an absent image: zeros)."""

    amount: Decimal = Decimal(0)
    count: Decimal = Decimal(0)
    key: Any = None
    target: tuple[str, ...] | None = None
    bucket: Bucket | None = None


def partial_delta(
    layout: TableLayout, record: StreamRecord, rule: Rule, total: str
) -> tuple[list[RecordDelta], list[RecordFailure]]:
    """The change a record of one of ``rule``'s partial items makes to the aggregate ``total``
    (its sort key): the partial's new value less its old one.

    Returns
    -------
    tuple
        ``([delta], [])``, or ``([], [])`` when nothing changes (a TTL delete of a partial time
        bucket changes nothing: the aggregate's bucket expires too), or ``([], [failure])`` when
        an image is not a readable partial or the change needs more than 38 significant digits.
    """
    if record.is_ttl_delete:  # a partial time bucket expired: its aggregate expires itself
        return [], []
    reads: tuple[str, ...] = (layout.value_attribute, "key")
    if rule.kind.keeps_count:
        reads = (*reads, COUNT_ATTRIBUTE)
    if rule.target is not None:
        reads = (*reads, "target")
    try:
        old = _state(layout, rule, record.old_image, "OldImage", reads)
        new = _state(layout, rule, record.new_image, "NewImage", reads)
        change = subtract(new.amount, old.amount)
        count_change = subtract(new.count, old.count)
    except EvaluationError as exc:
        return [], [RecordFailure.of(record, rule.name, str(exc), exc.cause)]
    except ArithmeticError:
        reason = "the partial's change needs more than DynamoDB's 38 significant digits"
        return [], [RecordFailure.of(record, rule.name, reason, FailureCause.LIMIT_EXCEEDED)]
    if change == 0 and count_change == 0:
        return [], []
    # the newest image's facts: the new one's when the partial still exists
    last = new if record.new_image is not None else old
    key = total[len(rule.name) + 1 :]
    shown = str(last.key if last.key is not None else key)
    ref = AggregateRef(rule.name, key, shown, last.bucket, target=last.target)
    return [RecordDelta(ref, change, record.sequence_number, count_change)], []


def _state(
    layout: TableLayout, rule: Rule, image: Image | None, label: str, reads: tuple[str, ...]
) -> _PartialState:
    """What ``image`` (``label``: ``OldImage`` or ``NewImage``) of a partial holds.

    Raises
    ------
    EvaluationError
        When an attribute it needs is malformed, or it is no partial of ``rule``.
    """
    if image is None:
        return _PartialState()
    try:
        image.check(reads)
    except EvaluationError as exc:
        raise EvaluationError(f"{label}: {exc}", exc.cause) from None
    amount = image.get(layout.value_attribute)
    count = image.get(COUNT_ATTRIBUTE) if rule.kind.keeps_count else None
    return _PartialState(
        Decimal(0) if amount is None else Decimal(amount),
        Decimal(0) if count is None else Decimal(count),
        image.get("key"),
        None if rule.target is None else _target(image, label),
        None if rule.window is None else _bucket(layout, image, label),
    )


def _target(image: Image, label: str) -> tuple[str, ...]:
    """The application item a target rule's partial rolls up into (its ``target`` attribute:
    the key values)."""
    values = image.get("target")
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise EvaluationError(
            f"{label}: not a partial of a target rule: 'target' is {values!r}",
            FailureCause.INVALID_VALUE,
        )
    return tuple(values)


def _bucket(layout: TableLayout, image: Image, label: str) -> Bucket:
    """The time bucket a partial of a windowed rule belongs to, from its attributes
    (``granularity``, ``bucket``, the TTL attribute), as the aggregate will carry them."""
    ttl = layout.ttl_attribute
    try:
        image.check(("granularity", "bucket", ttl))
        granularity, text = image.get("granularity"), image.get("bucket")
        expires = image.get(ttl)
        start = datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (EvaluationError, ValueError) as exc:
        raise EvaluationError(
            f"{label}: not a partial time bucket: {exc}", FailureCause.INVALID_VALUE
        ) from None
    return Bucket(
        str(granularity),
        int(start.timestamp()),
        str(text),
        None if expires is None else int(expires),
    )
