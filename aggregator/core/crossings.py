"""Threshold crossings, read from an aggregate item's own stream record.

A rule's thresholds (:mod:`aggregator.core.rules.thresholds`) are conditions on one aggregate's
value. The single source of a crossing is the stream record of the aggregate item: its old image
holds the value before the write, its new image the value after it (the stream's view type is
``NEW_AND_OLD_IMAGES``), so a condition that holds for one and not the other was entered or left
by exactly that write. Nothing is derived from what a writer returned or meant to write: a write
made twice by a retry that its checkpoint refused changed nothing and has no record, and a write
made by any process (the handler, a backfill, a reconcile repair) has its record.

The promise, per threshold and aggregate (one key; with a window, one time bucket):

* every write whose record shows the condition entered or left gives one crossing, in the order
  of the writes (one item's records are in one shard, in order: DynamoDB Developer Guide,
  "Change data capture for DynamoDB Streams");
* a record delivered again (a retried batch, a duplicate delivery) gives the same crossing with
  the same :func:`event_id`, so the events are *at least once per crossing*, and consumers drop
  duplicates by that id;
* an ``INSERT`` (the aggregate's first write) has no old value: it enters each condition its
  new value meets and leaves none (a ``below: 5`` whose bucket's first write is 7 gives nothing,
  one whose first write is 2, or 0, enters), and its crossings say so (``old_value`` ``None``),
  so an aggregate item's crossings of one threshold alternate, entered first; a ``REMOVE`` (a
  time bucket's TTL, ``drop-rule``) is not a change of the value and gives nothing; a time
  bucket past its retention when the record is read gives nothing either (its item may already
  be deleted);
* a threshold with a ``granularity`` is crossed by the time buckets of that granularity only;
* values that never reach the table (an aggregate that no record ever writes, such as an hour
  with no event at all) give nothing: crossings are changes of stored aggregates, not a clock.

A rebuild (:mod:`aggregator.core.lifecycle`) builds a new generation of the rule from zero, whose
writes cross again: each crossing names its generation (``storage_name``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from aggregator.core.layout import TableLayout

if TYPE_CHECKING:
    from aggregator.core.records import StreamRecord
    from aggregator.core.rules import Rule

__all__ = ["Crossing", "event_id", "record_crossings"]

GENERATION_SEPARATOR = "@"


@dataclass(frozen=True, slots=True)
class Crossing:
    """One threshold entered or left by one write of one aggregate.

    Attributes
    ----------
    rule
        The rule's name.
    storage_name
        The generation written (the rule's name, or ``<rule>@<generation>``).
    key
        The aggregate's key, as ``query list`` shows it.
    granularity, bucket
        The time bucket (``"hour"``, ``"2026-11-28T07:00:00Z"``) of a windowed rule, else
        ``None``.
    threshold
        The threshold's name.
    condition
        ``"above 1000"`` or ``"below 5"``.
    entered
        ``True`` when the condition started to hold, ``False`` when it stopped.
    old_value, new_value
        The aggregate's value before and after the write; ``old_value`` is ``None`` for its
        first write (an ``INSERT``: the item did not exist).
    partition, sort_key
        The aggregate item's key values (text).
    sequence_number
        The stream record's.
    created
        The record's ``ApproximateCreationDateTime`` (epoch seconds), when it has one.
    """

    rule: str
    storage_name: str
    key: str
    granularity: str | None
    bucket: str | None
    threshold: str
    condition: str
    entered: bool
    old_value: Decimal | None
    new_value: Decimal
    partition: str
    sort_key: str
    sequence_number: str
    created: Decimal | None = None


def event_id(table_name: str, crossing: Crossing) -> str:
    """The crossing's event id: the same on every delivery of its record, different for any
    other crossing (a SHA-256 of the table, the aggregate item's key, the threshold and the
    record's sequence number, which is unique among the records of one item: they are all in
    one shard). 32 hexadecimal digits."""
    text = "\x1f".join(
        (table_name, crossing.partition, crossing.sort_key, crossing.threshold,
         crossing.sequence_number)
    )  # fmt: skip
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _value(image: Mapping[str, Mapping[str, str]], attribute: str) -> Decimal:
    raw = image.get(attribute)
    return Decimal(0) if raw is None or "N" not in raw else Decimal(raw["N"])


def _text(image: Mapping[str, Mapping[str, str]], attribute: str) -> str | None:
    raw = image.get(attribute)
    return None if raw is None else raw.get("S")


def record_crossings(
    thresholded: Mapping[str, Rule], layout: TableLayout, record: StreamRecord, now: float
) -> tuple[list[Crossing], bool]:
    """The crossings a stream record shows (module docstring).

    Parameters
    ----------
    thresholded
        The rules with thresholds, by name.
    layout
        The table's layout (which items are aggregates, the value and TTL attributes).
    record
        Any stream record: only an ``INSERT`` or ``MODIFY`` of an aggregate item of one of
        ``thresholded`` can cross.
    now
        Epoch seconds: a time bucket whose TTL is at or before it gives nothing.

    Returns
    -------
    tuple
        ``(crossings, expired)``: ``expired`` is ``True`` for the record of a time bucket past
        its retention (counted by the caller, nothing crossed).
    """
    sort_key = layout.aggregate_sort_key(record.keys)
    if sort_key is None or record.new_image is None:
        return [], False
    storage_name = sort_key.partition("#")[0]
    rule = thresholded.get(storage_name.partition(GENERATION_SEPARATOR)[0])
    if rule is None:
        return [], False
    new = record.new_image.raw
    old = None if record.old_image is None else record.old_image.raw
    granularity = bucket = None
    if rule.window is not None:
        granularity, bucket = _text(new, "granularity"), _text(new, "bucket")
        ttl = new.get(layout.ttl_attribute, {}).get("N")
        if ttl is not None and Decimal(ttl) <= Decimal(str(now)):
            return [], True
    # an INSERT: no value before the item existed, nothing held (module docstring)
    before = None if old is None else _value(old, layout.value_attribute)
    after = _value(new, layout.value_attribute)
    if before == after:
        return [], False
    key = _text(new, "key") or ""
    partition = layout.partition_of(record.keys) or ""
    out: list[Crossing] = []
    for threshold in rule.thresholds:
        if not threshold.applies_to(key, granularity):
            continue
        was = before is not None and threshold.holds(before)
        now_holds = threshold.holds(after)
        if was == now_holds:
            continue
        out.append(
            Crossing(
                rule=rule.name,
                storage_name=storage_name,
                key=key,
                granularity=granularity,
                bucket=bucket,
                threshold=threshold.name,
                condition=threshold.condition,
                entered=now_holds,
                old_value=before,
                new_value=after,
                partition=partition,
                sort_key=sort_key,
                sequence_number=record.sequence_number,
                created=record.approximate_creation_time,
            )
        )
    return out, False
