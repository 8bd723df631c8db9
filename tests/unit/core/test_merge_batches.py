"""The window flush's merge of a later batch into the deltas kept in the window's state
(``merge_batches``), with expected values worked out by hand."""

from __future__ import annotations

from decimal import Decimal

from aggregator.core.engine import AggregateRef, BatchDeltas, CoalescedDelta, merge_batches
from aggregator.core.rules import WriteSpec

MEAN = WriteSpec(keeps_count=True)
PLAIN = WriteSpec()
INDEXED = WriteSpec(indexed=True, index_partitions=2)
A, B, C = (AggregateRef("r", key, key) for key in ("A", "B", "C"))


def _d(spec: WriteSpec, ref: AggregateRef, parts, count_parts=()) -> CoalescedDelta:
    parts = [(s, Decimal(a)) for s, a in parts]
    counts = [(s, Decimal(c)) for s, c in count_parts]
    return CoalescedDelta.of(
        spec,
        ref,
        sum((a for _, a in parts), Decimal(0)),
        min((s for s, _ in parts), key=int),
        parts,
        count=sum((c for _, c in counts), Decimal(0)),
        count_parts=counts,
    )


def _state() -> BatchDeltas:
    return BatchDeltas(
        deltas={
            "A": _d(MEAN, A, [("100", 5), ("300", 2)], [("100", 1), ("300", 1)]),
            "B": _d(PLAIN, B, [("200", 3)]),
        },
        first_sequence_number="100",
        last_sequence_number="300",
    )


def _later() -> BatchDeltas:
    return BatchDeltas(
        deltas={
            # "300" is a redelivered record: already in the state, it must not count again
            "A": _d(MEAN, A, [("300", 2), ("1000", 4)], [("300", 1), ("1000", 1)]),
            # out of order (redelivery): "90" is before everything in the state
            "B": _d(PLAIN, B, [("90", -1)]),
            "C": _d(INDEXED, C, [("400", 8)]),
        },
        first_sequence_number="90",
        last_sequence_number="1000",
    )


def test_merge_widens_bounds_and_coalesces_same_and_new_aggregates():
    batch = _later()
    merged = merge_batches(_state(), batch)

    # bounds by value: "1000" > "300" although it sorts lower as text
    assert (merged.first_sequence_number, merged.last_sequence_number) == ("90", "1000")
    assert list(merged.deltas) == ["A", "B", "C"]

    a = merged.deltas["A"]
    assert a.parts == [("100", Decimal(5)), ("300", Decimal(2)), ("1000", Decimal(4))]
    assert a.amount == Decimal(11)  # 5 + 2 + 4: the redelivered 2 once
    assert a.count_parts == [("100", Decimal(1)), ("300", Decimal(1)), ("1000", Decimal(1))]
    assert a.count == Decimal(3)
    assert a.first_sequence_number == "100"
    assert a.keeps_count

    b = merged.deltas["B"]
    assert b.parts == [("200", Decimal(3)), ("90", Decimal(-1))]
    assert b.amount == Decimal(2)
    assert (b.count, b.count_parts) == (Decimal(0), [])
    assert b.first_sequence_number == "90"

    c = merged.deltas["C"]
    assert (c.ref, c.amount, c.first_sequence_number) == (C, Decimal(8), "400")
    assert c.parts == [("400", Decimal(8))]
    assert (c.leaderboard, c.index_partitions, c.keeps_count) == (True, 2, False)
    # copied with its own lists: merging more into the state leaves the batch as it was
    c.parts.append(("500", Decimal(1)))
    assert batch.deltas["C"].parts == [("400", Decimal(8))]


def test_merging_the_same_batch_twice_changes_nothing():
    once = merge_batches(_state(), _later())
    twice = merge_batches(merge_batches(_state(), _later()), _later())
    assert twice == once


def test_merge_into_an_empty_state_copies_the_batch():
    batch = _later()
    merged = merge_batches(BatchDeltas(), batch)
    assert merged.deltas == batch.deltas
    assert (merged.first_sequence_number, merged.last_sequence_number) == ("90", "1000")


def test_a_delta_rebuilt_from_its_own_spec_is_equal():
    for d in [*_state().deltas.values(), *_later().deltas.values()]:
        assert (
            CoalescedDelta.of(
                d.spec,
                d.ref,
                d.amount,
                d.first_sequence_number,
                d.parts,
                count=d.count,
                count_parts=d.count_parts,
            )
            == d
        )
    partial = AggregateRef("r", "A", "A", partial=True)
    d = CoalescedDelta.of(
        WriteSpec(indexed=True, target_attribute="t"), partial, Decimal(1), "1", []
    )
    assert CoalescedDelta.of(d.spec, partial, Decimal(1), "1", []) == d
