"""What the engine produces (:class:`~aggregator.core.engine.Engine`): the changes of one batch
of stream records to the aggregate items, as values (pure: no boto3, no I/O).

An aggregate item is named by an :class:`AggregateRef`; one record's change to one item is a
:class:`RecordDelta`; a batch's changes to one item, coalesced, a :class:`CoalescedDelta` (one
amount, the sequence numbers the exactly-once write protocol needs, and the per-record parts);
the batch's result a :class:`BatchDeltas` (the coalesced deltas, the :class:`RecordFailure`
of each (record, rule) that could not be evaluated, the counters and the top-list
observations). How deltas are coalesced and batches merged: :mod:`aggregator.core.coalescing`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from aggregator.core.crossings import Crossing
from aggregator.core.exceptions import FailureCause
from aggregator.core.layout import TableLayout
from aggregator.core.numbers import add
from aggregator.core.records import MalformedRecord, StreamRecord, pad_sequence_number
from aggregator.core.rules import Bucket, WriteSpec
from aggregator.core.text import bound

__all__ = [
    "NO_AMOUNTS",
    "PARTIAL_MARK",
    "RECORD_RULE",
    "AggregateRef",
    "Amounts",
    "BatchDeltas",
    "CoalescedDelta",
    "LedgerCarry",
    "RecordDelta",
    "RecordFailure",
    "TopObservation",
    "add_amounts",
]


@dataclass(frozen=True, slots=True)
class AggregateRef:
    """Identity of one aggregate item: rule name and encoded key (sort key ``rule#key``).

    For windowed rules ``key`` ends with ``#<granularity>#<bucket start>`` and ``bucket``
    describes the bucket (its TTL included); ``display_key`` is the key without it.
    """

    rule: str
    key: str
    display_key: str
    bucket: Bucket | None = None
    partial: bool = False
    """A change to one of the aggregate's partial items (a rule with ``write_shards``); the
    writer picks the partial from the shard id."""
    target: tuple[str, ...] | None = None
    """For a rule with a ``target``: the application item's key values (``(pk,)`` or ``(pk,
    sk)``), a function of ``key``; the writer adds to the item's target attribute."""

    @property
    def sort_key(self) -> str:
        return f"{self.rule}#{self.key}"

    @property
    def batch_key(self) -> str:
        """Key of the item's changes in :attr:`BatchDeltas.deltas`: the sort key, prefixed with
        :data:`PARTIAL_MARK` for a partial (rule names start with a letter, so never with it)."""
        return f"{PARTIAL_MARK}{self.sort_key}" if self.partial else self.sort_key


@dataclass(frozen=True, slots=True)
class TopObservation:
    """An aggregate of a ``leaderboard_store: list`` rule as its stream record shows it: what
    its top list needs (:mod:`aggregator.core.top_list_merge`).

    Attributes
    ----------
    partition
        The index partition whose list ranks it
        (:func:`~aggregator.core.layout.leaderboard_partition`).
    key
        The key part of the aggregate's sort key, as stored (between ``"<rule>#"`` and, for a
        time bucket, ``"#<granularity>#<bucket start>"``).
    value
        Its new value; ``None`` when the item is gone or at zero.
    sequence_number
        The record's.
    expires
        The time bucket's TTL (epoch seconds), ``None`` outside time buckets.
    """

    partition: str
    key: str
    value: Decimal | None
    sequence_number: str
    expires: int | None = None


Amounts = tuple[Decimal, Decimal]
"""``(amount, count)``: what a change adds to an aggregate's value and to its count (kinds that
keep one; else 0)."""

NO_AMOUNTS: Amounts = (Decimal(0), Decimal(0))
"""What nothing adds: ``(0, 0)``."""


def add_amounts(total: Amounts, more: Amounts) -> Amounts:
    """``total + more``, field by field.

    Raises
    ------
    decimal.Inexact
        Past 38 significant digits (:func:`aggregator.core.numbers.add`).
    """
    return add(total[0], more[0]), add(total[1], more[1])


PARTIAL_MARK = "~"
"""Prefix of the :attr:`AggregateRef.batch_key` of changes to partial items."""


@dataclass(frozen=True, slots=True)
class RecordDelta:
    """The change one record makes to one aggregate item (never zero in both): ``amount`` to its
    value and ``count`` to its count (kinds that keep one, :mod:`aggregator.core.kinds`)."""

    ref: AggregateRef
    amount: Decimal
    sequence_number: str
    count: Decimal = Decimal(0)


RECORD_RULE = "*"
"""The ``rule`` of a failure that concerns the whole record (a malformed record): no rule name
can be ``*``."""


@dataclass(frozen=True, slots=True)
class RecordFailure:
    """A rule that could not be evaluated on a record, or a record that could not be read.

    Attributes
    ----------
    sequence_number, event_id
        Identify the stream record; ``sequence_number`` is ``None`` only for a malformed record
        without a usable one.
    rule
        The rule's name, or :data:`RECORD_RULE` for a malformed record.
    reason
        One line of at most 1,000 characters that quotes values by a short prefix only, e.g.
        ``NewImage: key attribute 'carrier' is missing``.
    cause
        Its class (:class:`~aggregator.core.exceptions.FailureCause`).
    record
        The raw stream record (Lambda shape, or whatever was delivered), kept so it can be
        dead-lettered and explained.
    image
        ``"NewImage"`` when only the record's new image failed: the rule applied the rest of
        the record (the old image's retraction) and the item counts nothing until the
        application fixes it (:mod:`aggregator.core.engine`, "Bad images"). ``None`` when
        nothing of the record applied for the rule (a missing image, a sum past 38 digits, a
        malformed record).
    """

    sequence_number: str | None
    event_id: str | None
    rule: str
    reason: str
    record: Any = field(repr=False, compare=False)
    cause: FailureCause = FailureCause.INVALID_VALUE
    image: str | None = None

    @property
    def replayable(self) -> bool:
        """Whether replaying it after fixing the rules can succeed (the record is readable)."""
        return self.cause != FailureCause.MALFORMED_RECORD

    @classmethod
    def of(
        cls,
        record: StreamRecord,
        rule: str,
        reason: str,
        cause: FailureCause,
        image: str | None = None,
    ) -> RecordFailure:
        """The failure of ``rule`` on a readable ``record``: ``reason`` bounded to one line of
        at most 1,000 characters (:func:`~aggregator.core.text.bound`), the raw record copied."""
        return cls(
            record.sequence_number,
            record.event_id,
            rule,
            bound(reason),
            dict(record.raw),
            cause,
            image,
        )

    @classmethod
    def malformed(cls, record: MalformedRecord) -> RecordFailure:
        """The failure of a record that could not be read (rule :data:`RECORD_RULE`, cause
        ``malformed-record``)."""
        return cls(
            record.sequence_number,
            record.event_id,
            RECORD_RULE,
            f"malformed stream record: {record.reason}",
            record.raw,
            FailureCause.MALFORMED_RECORD,
        )


@dataclass(slots=True)
class CoalescedDelta:
    """All of one batch's changes to one aggregate item.

    Attributes
    ----------
    ref
        The aggregate item.
    amount
        Sum of the parts (may be zero when changes cancel out).
    first_sequence_number
        Smallest sequence number among the batch's records that touched the item.
    parts
        ``(sequence number, amount)`` per record, in stream order.
    leaderboard
        Whether the item belongs to the leaderboard index.
    index_partitions
        The rule's ``leaderboard_partitions``
        (:func:`~aggregator.core.layout.leaderboard_partition`).
    write_shards
        The rule's ``write_shards``: for a change to a partial (``ref.partial``), how many
        partials the aggregate has.
    slot
        Which partial the writer chose (``None`` before it did, and for aggregates).
    count, count_parts
        For a rule whose kind keeps a count of items (``keeps_count``): the batch's change to
        it and its ``(sequence number, change)`` per record, as ``amount`` and ``parts``.
    keeps_count
        The update also ``ADD``s ``count`` (:data:`aggregator.core.kinds.COUNT_ATTRIBUTE`).
    per_value
        A value item of a kind with one item per value: when its count falls to zero the
        writer gives it a TTL (:mod:`aggregator.dynamodb.writer`).
    target_attribute
        For a change to a rule's target item (``ref.target``): the attribute it adds to
        (:mod:`aggregator.dynamodb.targets`).
    auto_shards
        The rule has ``write_shards: auto``: the writer measures its writes
        (:mod:`aggregator.dynamodb.routing`).
    partitions, key_fields
        The rule's spread and key fields (:class:`~aggregator.core.rules.WriteSpec`): the
        aggregate item is under :meth:`partition` (a partial under its own collection).
    """

    ref: AggregateRef
    amount: Decimal
    first_sequence_number: str
    parts: list[tuple[str, Decimal]]
    leaderboard: bool = False
    index_partitions: int = 1
    write_shards: int = 1
    slot: int | None = None
    count: Decimal = Decimal(0)
    count_parts: list[tuple[str, Decimal]] = field(default_factory=list)
    keeps_count: bool = False
    per_value: bool = False
    target_attribute: str | None = None
    auto_shards: bool = False
    partitions: int = 1
    key_fields: int = 1

    @classmethod
    def of(
        cls,
        spec: WriteSpec,
        ref: AggregateRef,
        amount: Decimal,
        first_sequence_number: str,
        parts: list[tuple[str, Decimal]],
        *,
        count: Decimal = Decimal(0),
        count_parts: list[tuple[str, Decimal]] | None = None,
    ) -> CoalescedDelta:
        """The delta of ``ref``'s item with its rule's write facts from ``spec``
        (:attr:`Rule.write_spec <aggregator.core.rules.Rule.write_spec>`): the one constructor
        of the engine, a backfill and reconcile. A partial (``ref.partial``) carries no
        leaderboard entry and no target attribute (its roll-up writes those); ``count_parts``
        are kept only for a kind that keeps a count."""
        whole = not ref.partial
        return cls(
            ref,
            amount,
            first_sequence_number,
            parts,
            spec.indexed and whole,
            spec.index_partitions,
            spec.write_shards,
            count=count,
            count_parts=list(count_parts or ()) if spec.keeps_count else [],
            keeps_count=spec.keeps_count,
            per_value=spec.per_value,
            target_attribute=spec.target_attribute if whole else None,
            auto_shards=spec.auto_shards,
            partitions=spec.partitions,
            key_fields=spec.key_fields,
        )

    @property
    def spec(self) -> WriteSpec:
        """The write facts this delta carries, as :meth:`of` takes them: ``of(d.spec, ...)``
        builds a delta with the same facts (a partial's missing leaderboard entry and target
        attribute are what :meth:`of` gives a partial anyway)."""
        return WriteSpec(
            indexed=self.leaderboard,
            index_partitions=self.index_partitions,
            write_shards=self.write_shards,
            auto_shards=self.auto_shards,
            keeps_count=self.keeps_count,
            per_value=self.per_value,
            target_attribute=self.target_attribute,
            partitions=self.partitions,
            key_fields=self.key_fields,
        )

    def partition(self, layout: TableLayout) -> str:
        """The partition key value of the aggregate item (not a partial's) on ``layout``:
        :meth:`~aggregator.core.layout.TableLayout.aggregate_partition` of its sort key."""
        return layout.aggregate_partition(self.ref.sort_key, self.partitions, self.key_fields)

    def take_first(self, sequence_number: str) -> None:
        """Lower :attr:`first_sequence_number` to ``sequence_number`` when it is smaller (by
        value: :func:`~aggregator.core.records.pad_sequence_number`)."""
        if pad_sequence_number(sequence_number) < pad_sequence_number(self.first_sequence_number):
            self.first_sequence_number = sequence_number

    def amount_after(self, sequence_number: str) -> Decimal:
        """Sum of the parts whose sequence number is greater than ``sequence_number``."""
        return _sum_after(self.parts, sequence_number)

    def count_after(self, sequence_number: str) -> Decimal:
        """Sum of the count parts whose sequence number is greater than ``sequence_number``."""
        return _sum_after(self.count_parts, sequence_number)


def _sum_after(parts: list[tuple[str, Decimal]], sequence_number: str) -> Decimal:
    after = pad_sequence_number(sequence_number)
    total = Decimal(0)
    for seq, amount in parts:
        if pad_sequence_number(seq) > after:
            total = add(total, amount)
    return total


@dataclass(slots=True)
class LedgerCarry:
    """A deleted target item's checkpoints of one target rule, for the rule's ledger item
    (:mod:`aggregator.core.ledger_carries`; written by
    :mod:`aggregator.dynamodb.ledger_carries`).

    Attributes
    ----------
    delta
        The change the engine gives a record whose target is that item, with nothing to add:
        its ``ref`` (the rule, the ledger's key, the item's key values in ``target``) and the
        rule's write facts, no parts, ``first_sequence_number`` the ``REMOVE`` record's (the
        first such record of the batch).
    entries
        Shard token (the 12 characters of a ``c#<token>`` checkpoint attribute) -> checkpoint
        value (21 bytes) of the rule's entries in the item's checkpoint map; the largest when
        several ``REMOVE`` records of the batch carry one.
    """

    delta: CoalescedDelta
    entries: dict[str, bytes]

    @property
    def sequence_number(self) -> str:
        """The sequence number of the ``REMOVE`` record that carries it (the first one)."""
        return self.delta.first_sequence_number

    def merge(self, other: LedgerCarry) -> None:
        """Take ``other``'s entries (the larger value per shard token, compared as DynamoDB
        compares binaries: byte by byte, unsigned) and its sequence number when smaller."""
        for token, value in other.entries.items():
            held = self.entries.get(token)
            if held is None or value > held:
                self.entries[token] = value
        self.delta.take_first(other.sequence_number)


@dataclass(slots=True)
class BatchDeltas:
    """Result of :meth:`Engine.process <aggregator.core.engine.Engine.process>` for one batch.

    Attributes
    ----------
    deltas
        Coalesced deltas keyed by :attr:`AggregateRef.batch_key` (the aggregate's sort key, or
        for a change to its partials that key marked), in order of first touch.
    failures
        One entry per (record, rule) that could not be evaluated.
    records
        Records in the batch.
    self_writes
        Records of framework-owned items, skipped (source aggregates of derived rules are not
        self-writes: derived rules evaluate them).
    derived_inputs
        Records of source aggregates that derived rules evaluated.
    partial_inputs
        Records of partial aggregates (rules with ``write_shards``) added to their aggregate.
    malformed
        Records that could not be read as stream records (one failure each).
    expired
        Per-record deltas skipped because their bucket was past its retention (TTL at or
        before ``now``); ``expired_retractions`` counts the negative ones among them.
    record_deltas
        Number of non-zero per-record deltas before coalescing.
    fenced
        (record, rule) pairs skipped because the record precedes the rule's fence.
    old_images_unreadable
        (record, rule) pairs whose ``OldImage`` the rule could not evaluate (it counted
        nothing, so nothing was retracted: :mod:`aggregator.core.engine`, "Bad images"); a
        record that also has a readable ``NewImage`` is the application fixing a bad item.
    first_sequence_number, last_sequence_number
        Smallest and largest sequence number in the batch (``None`` for an empty batch).
    observations
        Records of aggregates of ``leaderboard_store: list`` rules, in stream order: what their
        top lists merge (:class:`TopObservation`).
    expired_observations
        Such records of time buckets past their retention, left out (their lists expire with
        them).
    crossings
        Thresholds entered or left, read from the records of aggregates of rules with
        ``thresholds``, in stream order (:mod:`aggregator.core.crossings`).
    expired_crossings
        Such records of time buckets past their retention, left out.
    ledger_carries
        Per target rule's ledger item (keyed by :attr:`AggregateRef.batch_key`), the checkpoints
        of the target items deleted in the batch (:class:`LedgerCarry`), which the writer sets on
        the ledger item before it writes the batch's deltas.
    carry_entries_ignored
        Entries of those items' checkpoint maps that could not be read (a name or a value not
        in the format the framework writes): they carry nothing.
    """

    deltas: dict[str, CoalescedDelta] = field(default_factory=dict)
    failures: list[RecordFailure] = field(default_factory=list)
    records: int = 0
    self_writes: int = 0
    derived_inputs: int = 0
    partial_inputs: int = 0
    malformed: int = 0
    expired: int = 0
    expired_retractions: int = 0
    record_deltas: int = 0
    fenced: int = 0
    old_images_unreadable: int = 0
    first_sequence_number: str | None = None
    last_sequence_number: str | None = None
    observations: list[TopObservation] = field(default_factory=list)
    expired_observations: int = 0
    crossings: list[Crossing] = field(default_factory=list)
    expired_crossings: int = 0
    ledger_carries: dict[str, LedgerCarry] = field(default_factory=dict)
    carry_entries_ignored: int = 0
