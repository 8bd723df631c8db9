"""Coalescing: a batch's deltas folded into one change per aggregate item (pure: no boto3, no I/O).

The engine (:meth:`Engine.process <aggregator.core.engine.Engine.process>`) adds each record's
deltas to its batch (:func:`coalesce_record`), after dropping those aimed at expired time buckets
(:func:`drop_expired`), and widens the batch's first and last sequence numbers by each record
(:func:`widen_bounds`); the ``window`` mode folds a window's batches into one
(:func:`merge_batches`). Each aggregate item's :class:`~aggregator.core.deltas.CoalescedDelta`
keeps the sequence number of the first record that touched it and its per-record parts, which
the exactly-once write protocol needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from aggregator.core.deltas import (
    NO_AMOUNTS,
    Amounts,
    BatchDeltas,
    CoalescedDelta,
    RecordDelta,
    add_amounts,
)
from aggregator.core.numbers import add
from aggregator.core.records import pad_sequence_number
from aggregator.core.rules import Rule

__all__ = ["coalesce_record", "drop_expired", "merge_batches", "widen_bounds"]


def widen_bounds(batch: BatchDeltas, sequence_number: str) -> None:
    """Take ``sequence_number`` into the batch's first and last. By value rather than position:
    redelivered records may come out of order (Lambda Developer Guide, "Tumbling windows": "If
    records are processed more than once, they might be processed out of order")."""
    padded = pad_sequence_number(sequence_number)
    first, last = batch.first_sequence_number, batch.last_sequence_number
    if first is None or padded < pad_sequence_number(first):
        batch.first_sequence_number = sequence_number
    if last is None or padded > pad_sequence_number(last):
        batch.last_sequence_number = sequence_number


def merge_batches(into: BatchDeltas, batch: BatchDeltas) -> BatchDeltas:
    """Fold ``batch`` (later records of the same shard) into ``into``; returns ``into``.

    What the ``window`` flush does with each batch (:mod:`aggregator.runtime.processor`): the
    batch's first and last widen ``into``'s (as :meth:`Engine.process
    <aggregator.core.engine.Engine.process>` widens them per record); a delta of an aggregate new
    to ``into`` is copied in (:meth:`~aggregator.core.deltas.CoalescedDelta.of`, with its
    own lists); for one already there, each part and count part whose sequence number the
    delta does not hold yet is appended and added to ``amount`` and ``count`` (a redelivered
    record must not count twice), and the first sequence number is the smaller one. Only the
    deltas and the two bounds are merged; ``batch``'s counters and failures are not.

    Raises
    ------
    decimal.Inexact
        When a sum passes 38 significant digits (:func:`aggregator.core.numbers.add`).
    """
    for sequence_number in (batch.first_sequence_number, batch.last_sequence_number):
        if sequence_number is not None:
            widen_bounds(into, sequence_number)
    for sk, d in batch.deltas.items():
        current = into.deltas.get(sk)
        if current is None:
            into.deltas[sk] = CoalescedDelta.of(
                d.spec,
                d.ref,
                d.amount,
                d.first_sequence_number,
                list(d.parts),
                count=d.count,
                count_parts=d.count_parts,
            )
            continue
        known = {s for s, _ in current.parts}
        for s, a in d.parts:
            if s not in known:
                current.parts.append((s, a))
                current.amount = add(current.amount, a)
        counted = {s for s, _ in current.count_parts}
        for s, c in d.count_parts:
            if s not in counted:
                current.count_parts.append((s, c))
                current.count = add(current.count, c)
        current.take_first(d.first_sequence_number)
    return into


def drop_expired(batch: BatchDeltas, deltas: list[RecordDelta], now: float) -> list[RecordDelta]:
    """``deltas`` less those aimed at a time bucket expired at ``now`` (epoch seconds), which
    are counted in ``batch.expired`` (the negative ones in ``batch.expired_retractions`` too)."""
    kept = []
    for d in deltas:
        if d.ref.bucket is not None and d.ref.bucket.expired(now):
            batch.expired += 1
            batch.expired_retractions += d.amount < 0
            continue
        kept.append(d)
    return kept


def coalesce_record(
    batch: BatchDeltas, deltas: list[RecordDelta], rules: Mapping[str, Rule]
) -> list[str]:
    """Coalesce one record's deltas into ``batch``: all of a (record, rule)'s deltas, or none
    when one of its sums would pass 38 significant digits.

    Parameters
    ----------
    batch
        The batch the record belongs to; its ``deltas`` and ``record_deltas`` change.
    deltas
        The record's deltas, every rule's.
    rules
        The rules by name (each delta's rule gives its write facts:
        :attr:`Rule.write_spec <aggregator.core.rules.Rule.write_spec>`).

    Returns
    -------
    list of str
        The rules none of whose deltas applied, their sums being past 38 significant digits (a
        failure each, for the caller to report), in the order of their first delta.
    """
    by_rule: dict[str, list[RecordDelta]] = {}
    for d in deltas:
        by_rule.setdefault(d.ref.rule, []).append(d)
    overflowed = []
    for rule_name, group in by_rule.items():
        try:
            sums = {}
            for d in group:
                current = batch.deltas.get(d.ref.batch_key)
                so_far = (current.amount, current.count) if current else NO_AMOUNTS
                sums[d.ref.batch_key] = add_amounts(so_far, (d.amount, d.count))
        except ArithmeticError:
            overflowed.append(rule_name)
            continue
        batch.record_deltas += len(group)
        for d in group:
            _coalesce(batch, d, sums[d.ref.batch_key], rules[d.ref.rule])
    return overflowed


def _coalesce(batch: BatchDeltas, d: RecordDelta, totals: Amounts, rule: Rule) -> None:
    sk = d.ref.batch_key
    current = batch.deltas.get(sk)
    keeps_count = rule.kind.keeps_count
    if current is None:
        batch.deltas[sk] = CoalescedDelta.of(
            rule.write_spec,
            d.ref,
            totals[0],
            d.sequence_number,
            [(d.sequence_number, d.amount)],
            count=totals[1],
            count_parts=[(d.sequence_number, d.count)],
        )
        return
    current.amount, current.count = totals
    current.parts.append((d.sequence_number, d.amount))
    if keeps_count:
        current.count_parts.append((d.sequence_number, d.count))
    current.take_first(d.sequence_number)
