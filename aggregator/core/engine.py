"""The engine: stream records + rules -> coalesced deltas (pure: no boto3, no I/O).

For each record and rule, ``delta = contribution(NewImage) - contribution(OldImage)``, where a
contribution is ``(key, amount)`` if the image matches the rule, else nothing. A key change moves
the amount from the old key to the new one; a value change adds the difference; an item that
stops matching is retracted. A TTL delete retracts only for rules with ``ttl_deletes: retract``.
Records of framework-owned items (reserved partition keys) produce no deltas, except records of
aggregates that derived rules read: those are evaluated by the derived rules only (their images
are the source aggregate item; a value of 0 counts as absent), and user items by the other
rules only. Windowed rules contribute once per granularity; deltas aimed at time buckets past
their retention are skipped and counted (``BatchDeltas.expired``).

Write sharding (rules with ``write_shards``): a user item's change goes to one of the
aggregate's *partial* items (``AggregateRef.partial``; the writer picks which from the shard id),
and a record of a partial item changes the aggregate by the partial's new value less its old one
(a TTL delete of a partial time bucket changes nothing: the aggregate's bucket expires too).

A batch's deltas are then coalesced: one amount per aggregate item, with the sequence numbers of
the first record that touched it and of the batch's last record (what the exactly-once write
protocol needs), and the per-record parts (to recompute the amount after a checkpoint).

Bad images. Each image is evaluated on its own, and an image a rule cannot evaluate (a missing
or mistyped key or delta attribute, an invalid value) contributes *nothing* to that rule: the
record's delta is then the other image's contribution alone. So a rule's aggregates always equal
the sum of the contributions of the items as they are now, bad items counting nothing, and the
application heals them by fixing the item: inserting a bad item adds nothing (and dead-letters
it), fixing it later adds the good image's amount (its old image counted nothing, so nothing is
retracted), and deleting a bad item retracts nothing. A backfill counts a bad item as nothing too
(:meth:`Engine.image_contributions`), so the stream and a backfill agree. A bad ``NewImage``
yields a :class:`RecordFailure` with ``image="NewImage"`` (its dead letter: the item is bad *now*);
a bad ``OldImage`` only counts in ``BatchDeltas.old_images_unreadable`` (it was reported when it
was written). What fails the whole (record, rule), so that none of its deltas applies
(``image=None``), is a record without the images its event needs and a sum past 38 significant
digits. The record's other rules still apply, and no failure hides another record.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from aggregator.core.exceptions import ConfigError, EvaluationError, FailureCause
from aggregator.core.kinds import COUNT_ATTRIBUTE
from aggregator.core.layout import TableLayout
from aggregator.core.numbers import add, subtract
from aggregator.core.records import Image, MalformedRecord, StreamRecord, pad_sequence_number
from aggregator.core.routing import moved_at
from aggregator.core.rules import (
    MAX_SORT_KEY_BYTES,
    Bucket,
    Rule,
    RuleSet,
    WriteSpec,
    derived_attribute_problems,
)
from aggregator.core.text import bound
from aggregator.core.toplist import placement

__all__ = [
    "MAX_SORT_KEY_BYTES",
    "NO_AMOUNTS",
    "PARTIAL_MARK",
    "AggregateRef",
    "Amounts",
    "BatchDeltas",
    "CoalescedDelta",
    "Engine",
    "RecordDelta",
    "RecordFailure",
    "TopObservation",
    "add_amounts",
    "merge_batches",
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
    its top list needs (:mod:`aggregator.core.toplist`).

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
        application fixes it (module docstring, "Bad images"). ``None`` when nothing of the
        record applied for the rule (a missing image, a sum past 38 digits, a malformed record).
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
        )

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


def _widen_bounds(batch: BatchDeltas, sequence_number: str) -> None:
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
    batch's first and last widen ``into``'s (as :meth:`Engine.process` widens them per record);
    a delta of an aggregate new to ``into`` is copied in (:meth:`CoalescedDelta.of`, with its
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
            _widen_bounds(into, sequence_number)
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


def _sum_after(parts: list[tuple[str, Decimal]], sequence_number: str) -> Decimal:
    bound = pad_sequence_number(sequence_number)
    total = Decimal(0)
    for seq, amount in parts:
        if pad_sequence_number(seq) > bound:
            total = add(total, amount)
    return total


@dataclass(slots=True)
class BatchDeltas:
    """Result of :meth:`Engine.process` for one batch.

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
        nothing, so nothing was retracted: module docstring, "Bad images"); a record that also
        has a readable ``NewImage`` is the application fixing a bad item.
    first_sequence_number, last_sequence_number
        Smallest and largest sequence number in the batch (``None`` for an empty batch).
    observations
        Records of aggregates of ``leaderboard_store: list`` rules, in stream order: what their
        top lists merge (:class:`TopObservation`).
    expired_observations
        Such records of time buckets past their retention, left out (their lists expire with
        them).
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


class Engine:
    """Evaluates a :class:`RuleSet` over stream records.

    Parameters
    ----------
    rules
        The validated rules.
    layout
        Table layout; its reserved partition keys mark framework-owned items. Default: the rule
        set's (``rules.layout``).

    Examples
    --------
    >>> from aggregator.core.rules import RuleSet, rule
    >>> engine = Engine(RuleSet.of(rule("total", key="ALL")))
    >>> record = StreamRecord({"eventName": "INSERT", "dynamodb": {
    ...     "SequenceNumber": "100", "Keys": {"pk": {"S": "a"}},
    ...     "NewImage": {"pk": {"S": "a"}}}})
    >>> engine.process([record]).deltas["total#ALL"].amount
    Decimal('1')
    """

    def __init__(self, rules: RuleSet, layout: TableLayout | None = None) -> None:
        layout = rules.layout if layout is None else layout
        problems = derived_attribute_problems(rules, layout)
        if problems:
            raise ConfigError("\n".join(problems))
        self.rules = rules
        self.layout = layout
        self._max_sort_key_bytes = layout.max_sort_text_bytes
        self._sort_key_limit = (
            f"DynamoDB's {MAX_SORT_KEY_BYTES}-byte limit for a sort key"
            if layout.has_sort_key
            else f"the {layout.max_sort_text_bytes}-byte limit for a sort key text on a table "
            f"without a sort key ({MAX_SORT_KEY_BYTES} bytes less {layout.aggregates_pk + '#'!r})"
        )
        sharded = [r.name for r in rules if r.sharded]
        if sharded and not layout.has_sort_key:
            raise ConfigError(
                f"rule {sharded[0]!r}: write_shards needs a table with a sort key (the partials "
                "of an aggregate share an item collection, so that their stream records reach "
                "one shard)"
            )
        self._sharded = {r.name: r for r in rules if r.sharded}
        self.auto_rules = tuple(r.name for r in rules if r.auto_shards)
        """Names of the rules with ``write_shards: auto`` (their records need the shard's
        ``routing``: :meth:`process`)."""
        self._by_name = {r.name: r for r in rules}
        self._listed = {r.name: r for r in rules if r.top_listed}
        self.listed_rules = tuple(self._listed)
        """Names of the ``leaderboard_store: list`` rules (their aggregates' records feed top
        lists: :attr:`BatchDeltas.observations`)."""
        self._base = rules.base_rules
        self._derived = {source: rules.derived_from(source) for source in rules.sources}
        # per rule, the attributes to deserialize before evaluating it (sorted: the first
        # malformed one is the reason), computed once rather than per record
        self._reads = {
            r.name: tuple(
                sorted(r.attributes() | ({layout.value_attribute} if r.is_derived else set()))
            )
            for r in rules
        }

    def source_of(self, record: StreamRecord) -> str | None:
        """The rule whose aggregate item the record is of, if a derived rule reads that rule."""
        sort_key = self.layout.aggregate_sort_key(record.keys)
        if sort_key is None:
            return None
        source = sort_key.partition("#")[0]
        return source if source in self._derived else None

    def is_self_write(self, record: StreamRecord) -> bool:
        """True if the record is of an item under a reserved partition key, except aggregate
        items that a derived rule reads."""
        return self._classify(record)[0]

    def _classify(self, record: StreamRecord) -> tuple[bool, str | None]:
        """``(self-write, source rule)`` of a record, reading its keys once."""
        if not self.layout.is_reserved(record.keys):
            return False, None
        source = self.source_of(record)
        return source is None, source

    def _aggregate_image(self, image: Image | None) -> Image | None:
        # A source aggregate at zero counts as absent: whether a zero item exists depends on the
        # write mode (exactly-once writes ADD 0 to move checkpoints), never on the data.
        if image is None:
            return None
        value = image.get(self.layout.value_attribute)
        return None if value is None or value == 0 else image

    def _refs(self, rule: Rule, image: Image | None) -> list[tuple[AggregateRef, Amounts]]:
        """The aggregate items one image contributes to under ``rule``, with the amounts.

        Raises
        ------
        EvaluationError
            As :meth:`Rule.contributions`, or when a sort key would pass the layout's limit.
        """
        out = []
        for c in rule.contributions(image):
            ref = AggregateRef(rule.name, c.key, c.display, c.bucket, target=c.target)
            if c.target is not None and self.layout.is_reserved(self.layout.target_key(c.target)):
                raise EvaluationError(
                    f"the target key {c.target} is in a partition the framework reserves",
                    FailureCause.INVALID_VALUE,
                )
            size = len(ref.sort_key.encode("utf-8"))
            if size > self._max_sort_key_bytes:
                raise EvaluationError(
                    f"the aggregate's sort key would be {size} bytes, over {self._sort_key_limit}",
                    FailureCause.LIMIT_EXCEEDED,
                )
            out.append((ref, (c.amount, c.item_count)))
        return out

    def _image_refs(
        self, rule: Rule, image: Image | None, derived: bool
    ) -> list[tuple[AggregateRef, Amounts]]:
        """What one image contributes to ``rule`` (nothing for an absent image).

        Raises
        ------
        EvaluationError
            When the rule cannot evaluate the image: every attribute the rule reads is checked
            first, whatever the order of its tests, so a malformed value fails it
            deterministically (the same image always gets the same verdict); an amount past 38
            significant digits is ``limit-exceeded``.
        """
        if image is None:
            return []
        image.check(self._reads[rule.name])
        if derived:
            image = self._aggregate_image(image)
        try:
            return self._refs(rule, image)
        except ArithmeticError:
            raise EvaluationError(
                "the amount needs more than DynamoDB's 38 significant digits",
                FailureCause.LIMIT_EXCEEDED,
            ) from None

    def image_error(self, rule_name: str, image: Image) -> EvaluationError | None:
        """Why ``rule_name`` cannot evaluate ``image`` (an item, or for a derived rule its
        source's aggregate item), or ``None`` when it can: the verdict the handler gives that
        image (module docstring, "Bad images"), e.g. whether a dead-lettered item has been fixed.

        Raises
        ------
        RuleError
            When the rule set has no rule of that name.
        """
        rule = self.rules.get(rule_name)
        try:
            self._image_refs(rule, image, derived=rule.source is not None)
        except EvaluationError as exc:
            return exc
        return None

    def _rule_delta(
        self, rule: Rule, record: StreamRecord, derived: bool, moved: bool = False
    ) -> tuple[list[tuple[AggregateRef, Amounts]], dict[str, EvaluationError]]:
        """The rule's per-aggregate changes for one record (zero changes dropped), and the
        evaluation error of each image the rule could not evaluate, by label (``OldImage``,
        ``NewImage``): such an image contributes nothing (module docstring, "Bad images").

        Raises
        ------
        EvaluationError
            When the changes need more than 38 significant digits (nothing of the record
            applies then).
        """
        if record.is_ttl_delete and rule.ttl_deletes == "keep":
            return [], {}
        changes: dict[AggregateRef, Amounts] = {}
        failed: dict[str, EvaluationError] = {}
        for label, image, combine in (
            ("OldImage", record.old_image, subtract),
            ("NewImage", record.new_image, add),
        ):
            try:
                # the whole image's contributions first: a bad image contributes nothing at all
                refs = self._image_refs(rule, image, derived)
            except EvaluationError as exc:
                failed[label] = EvaluationError(f"{label}: {exc}", exc.cause)
                continue
            try:
                for ref, (amount, count) in refs:
                    was, counted = changes.get(ref, NO_AMOUNTS)
                    changes[ref] = (combine(was, amount), combine(counted, count))
            except ArithmeticError:
                raise EvaluationError(
                    f"{label}: the delta needs more than DynamoDB's 38 significant digits",
                    FailureCause.LIMIT_EXCEEDED,
                ) from None
        # write_shards: auto goes to the partials while this record's shard is hot for the rule
        partial = not derived and (moved if rule.auto_shards else rule.sharded)
        return [
            (replace(ref, partial=True) if partial else ref, amounts)
            for ref, amounts in changes.items()
            if amounts != NO_AMOUNTS
        ], failed

    def _partial_delta(
        self, record: StreamRecord, rule: Rule, total: str
    ) -> tuple[list[RecordDelta], list[RecordFailure]]:
        """The change a record of one of ``rule``'s partial items makes to the aggregate
        ``total`` (its sort key): the partial's new value less its old one."""
        value = self.layout.value_attribute
        if record.is_ttl_delete:  # a partial time bucket expired: its aggregate expires itself
            return [], []
        amounts = []
        counts = []
        display = None
        bucket = None
        reads = (value, "key", COUNT_ATTRIBUTE) if rule.kind.keeps_count else (value, "key")
        if rule.target is not None:
            reads = (*reads, "target")
        target: tuple[str, ...] | None = None
        try:
            for label, image in (("OldImage", record.old_image), ("NewImage", record.new_image)):
                if image is None:
                    amounts.append(Decimal(0))
                    counts.append(Decimal(0))
                    continue
                try:
                    image.check(reads)
                except EvaluationError as exc:
                    raise EvaluationError(f"{label}: {exc}", exc.cause) from None
                amount = image.get(value)
                amounts.append(Decimal(0) if amount is None else Decimal(amount))
                count = image.get(COUNT_ATTRIBUTE) if rule.kind.keeps_count else None
                counts.append(Decimal(0) if count is None else Decimal(count))
                display = image.get("key") if display is None or label == "NewImage" else display
                if rule.target is not None:
                    target = self._partial_target(image, label)
                if rule.window is not None:
                    bucket = self._partial_bucket(image, label)
            change = subtract(amounts[1], amounts[0])
            count_change = subtract(counts[1], counts[0])
        except EvaluationError as exc:
            return [], [self._failure(record, rule.name, str(exc), exc.cause)]
        except ArithmeticError:
            reason = "the partial's change needs more than DynamoDB's 38 significant digits"
            return [], [self._failure(record, rule.name, reason, FailureCause.LIMIT_EXCEEDED)]
        if change == 0 and count_change == 0:
            return [], []
        key = total[len(rule.name) + 1 :]
        shown = str(display if display is not None else key)
        ref = AggregateRef(rule.name, key, shown, bucket, target=target)
        return [RecordDelta(ref, change, record.sequence_number, count_change)], []

    @staticmethod
    def _partial_target(image: Image, label: str) -> tuple[str, ...]:
        """The application item a target rule's partial rolls up into (its ``target``
        attribute: the key values)."""
        values = image.get("target")
        if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
            raise EvaluationError(
                f"{label}: not a partial of a target rule: 'target' is {values!r}",
                FailureCause.INVALID_VALUE,
            )
        return tuple(values)

    def _partial_bucket(self, image: Image, label: str) -> Bucket:
        """The time bucket a partial of a windowed rule belongs to, from its attributes
        (``granularity``, ``bucket``, the TTL attribute), as the aggregate will carry them."""
        ttl = self.layout.ttl_attribute
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

    def image_entries(
        self, image: Image | None, rules: Iterable[str], *, now: float
    ) -> tuple[dict[AggregateRef, Amounts], list[tuple[str, EvaluationError]]]:
        """What one item image contributes to the named base rules' aggregates (the state a
        backfill counts), skipping time buckets expired at ``now``; and the rules that could
        not evaluate it, with the error (the item then contributes nothing to them).

        Returns
        -------
        tuple
            ``({ref: (amount, count)}, [(rule, error)])``: ``count`` is what the item adds to
            the count of a kind that keeps one (else 0); never both zero.
        """
        out: dict[AggregateRef, Amounts] = {}
        failed: list[tuple[str, EvaluationError]] = []
        if image is None:
            return out, failed
        for name in rules:
            try:
                refs = self._image_refs(self.rules.get(name), image, derived=False)
            except EvaluationError as exc:
                failed.append((name, exc))
                continue
            # one ref per granularity, each distinct (their sort keys name the granularity)
            out.update(
                (ref, amounts)
                for ref, amounts in refs
                if amounts != NO_AMOUNTS and (ref.bucket is None or not ref.bucket.expired(now))
            )
        return out, failed

    def image_contributions(
        self, image: Image | None, rules: Iterable[str], *, now: float
    ) -> tuple[dict[AggregateRef, Decimal], list[tuple[str, EvaluationError]]]:
        """:meth:`image_entries` with the value amounts only: ``({ref: amount}, [(rule,
        error)])``."""
        found, failed = self.image_entries(image, rules, now=now)
        return {ref: amount for ref, (amount, _) in found.items()}, failed

    @staticmethod
    def _missing_image(record: StreamRecord) -> str | None:
        needs = {
            "INSERT": ("NewImage",),
            "MODIFY": ("OldImage", "NewImage"),
            "REMOVE": ("OldImage",),
        }
        for image in needs.get(record.event_name, ()):
            if image not in record.raw["dynamodb"]:
                return (
                    f"{record.event_name} record without {image}: the table's stream must use "
                    "StreamViewType NEW_AND_OLD_IMAGES"
                )
        if record.event_name not in needs:
            return f"unknown eventName {record.event_name!r}"
        return None

    def _evaluate(
        self,
        record: StreamRecord,
        source: str | None,
        fences: Mapping[str, str] | None = None,
        batch: BatchDeltas | None = None,
        routing: Mapping[str, Sequence[int]] | None = None,
    ) -> tuple[list[RecordDelta], list[RecordFailure]]:
        deltas: list[RecordDelta] = []
        failures: list[RecordFailure] = []
        missing = self._missing_image(record)
        rules = self._base if source is None else self._derived[source]
        padded = pad_sequence_number(record.sequence_number) if fences else ""
        for rule in rules:
            if fences and rule.name in fences and padded <= fences[rule.name]:
                # before the rule's fence in this shard: the backfill's part, not ours
                if batch is not None:
                    batch.fenced += 1
                continue
            try:
                if missing is not None:
                    raise EvaluationError(missing, FailureCause.MISSING_IMAGE)
                moved = bool(routing) and moved_at(
                    (routing or {}).get(rule.name, ()), record.approximate_creation_time
                )
                changes, failed = self._rule_delta(rule, record, source is not None, moved)
            except EvaluationError as exc:
                failures.append(self._failure(record, rule.name, str(exc), exc.cause))
                continue
            if "OldImage" in failed and batch is not None:
                batch.old_images_unreadable += 1
            if "NewImage" in failed:
                error = failed["NewImage"]
                failures.append(
                    self._failure(record, rule.name, str(error), error.cause, "NewImage")
                )
            deltas.extend(
                RecordDelta(ref, amount, record.sequence_number, count)
                for ref, (amount, count) in changes
            )
        return deltas, failures

    @staticmethod
    def _failure(
        record: StreamRecord,
        rule: str,
        reason: str,
        cause: FailureCause,
        image: str | None = None,
    ) -> RecordFailure:
        return RecordFailure(
            record.sequence_number,
            record.event_id,
            rule,
            bound(reason),
            dict(record.raw),
            cause,
            image,
        )

    @staticmethod
    def _malformed(record: MalformedRecord) -> RecordFailure:
        return RecordFailure(
            record.sequence_number,
            record.event_id,
            RECORD_RULE,
            f"malformed stream record: {record.reason}",
            record.raw,
            FailureCause.MALFORMED_RECORD,
        )

    def record_deltas(self, record: StreamRecord) -> tuple[list[RecordDelta], list[RecordFailure]]:
        """Per-rule deltas of one record (zero deltas dropped) and the rules that failed on it."""
        self_write, source = self._classify(record)
        if self_write:
            return [], []
        return self._evaluate(record, source)

    def process(
        self,
        records: Iterable[StreamRecord | MalformedRecord],
        *,
        now: float | None = None,
        fences: Mapping[str, str] | None = None,
        routing: Mapping[str, Sequence[int]] | None = None,
    ) -> BatchDeltas:
        """Evaluate and coalesce one batch (records of one shard, in stream order).

        A :class:`~aggregator.core.records.MalformedRecord` (see
        :func:`aggregator.core.records.parse_event`) becomes one failure with rule
        :data:`RECORD_RULE` and cause ``malformed-record``; its sequence number, which nothing
        vouches for, never counts for the batch's first and last (so never for a checkpoint).

        ``now`` (epoch seconds, default the current time) decides which time buckets have
        expired: a delta aimed at a bucket whose TTL (bucket end + retention) is at or before
        ``now`` is skipped and counted in ``expired``, so an expired bucket is never recreated.

        ``fences`` maps rule names to a 40-digit sequence number of this shard (a
        :class:`~aggregator.core.lifecycle.Fence`): such a rule evaluates only records after it
        (the records up to it are a backfill's part); skipped pairs are counted in ``fenced``.

        ``routing`` maps ``write_shards: auto`` rules to this shard's switches (epoch seconds,
        :mod:`aggregator.core.routing`): a record created at or after an odd number of them
        changes the aggregate's partials, any other record (and every record without
        ``routing``) the aggregate itself.

        Returns
        -------
        BatchDeltas
            Never raises for a record a rule cannot evaluate: see ``failures``. A (record, rule)
            whose deltas would push a coalesced sum past 38 significant digits is reported
            there too, and none of its deltas is applied.
        """
        batch = BatchDeltas()
        clock = time.time() if now is None else now
        for record in records:
            batch.records += 1
            if isinstance(record, MalformedRecord):
                # its sequence number is not trusted: it never becomes a checkpoint (it produces
                # no deltas, and redelivering it only rewrites its dead letter)
                batch.malformed += 1
                batch.failures.append(self._malformed(record))
                continue
            _widen_bounds(batch, record.sequence_number)
            if self._listed:
                self._observe(batch, record, clock)
            evaluated = self._record_deltas(batch, record, fences, routing)
            if evaluated is None:
                continue
            deltas, failures = evaluated
            batch.failures.extend(failures)
            self._add_record(batch, record, self._drop_expired(batch, deltas, clock))
        return batch

    def _record_deltas(
        self,
        batch: BatchDeltas,
        record: StreamRecord,
        fences: Mapping[str, str] | None,
        routing: Mapping[str, Sequence[int]] | None,
    ) -> tuple[list[RecordDelta], list[RecordFailure]] | None:
        """One record's deltas and failures, counted in ``batch`` by where the record comes from
        (``None`` for the framework's own writes, which change nothing)."""
        # only a handler running write-sharded rules reads partials (for any other, their
        # records are self-writes, which _classify tells by the same key test)
        total = self.layout.partial_total(record.keys) if self._sharded else None
        sharded = None if total is None else self._sharded.get(total.partition("#")[0])
        if sharded is not None and total is not None:
            batch.partial_inputs += 1
            return self._partial_delta(record, sharded, total)
        self_write, source = self._classify(record)
        if self_write:
            batch.self_writes += 1
            return None
        if source is not None:
            batch.derived_inputs += 1
        return self._evaluate(record, source, fences, batch, routing)

    def top_listed(self, record: StreamRecord) -> bool:
        """Whether the record is of an aggregate item of a ``leaderboard_store: list`` rule
        (its top list merges it; the filters let it through)."""
        sort_key = self.layout.aggregate_sort_key(record.keys)
        return sort_key is not None and sort_key.partition("#")[0] in self._listed

    def _observe(self, batch: BatchDeltas, record: StreamRecord, now: float) -> None:
        """Note the new value of an aggregate of a ``leaderboard_store: list`` rule; nothing for
        a time bucket past its retention at ``now`` (its list may be deleted by its TTL
        already: a late record must not write it again with that one key)."""
        sort_key = self.layout.aggregate_sort_key(record.keys)
        if sort_key is None:
            return
        rule = self._listed.get(sort_key.partition("#")[0])
        if rule is None:
            return
        new = record.new_image
        image = new if new is not None else record.old_image
        value = None if new is None else new.raw.get(self.layout.value_attribute, {}).get("N")
        amount = None if value is None or Decimal(value) == 0 else Decimal(value)
        suffix = expires = None
        if rule.window is not None and image is not None:
            granularity = image.raw.get("granularity", {}).get("S")
            start = image.raw.get("bucket", {}).get("S")
            ttl = image.raw.get(self.layout.ttl_attribute, {}).get("N")
            if granularity is not None and start is not None:
                suffix = f"{granularity}#{start}"
            expires = None if ttl is None else int(Decimal(ttl))
            if expires is not None and expires <= now:
                batch.expired_observations += 1
                return
        partition, key = placement(rule.name, sort_key, rule.leaderboard_partitions, suffix)
        batch.observations.append(
            TopObservation(partition, key, amount, record.sequence_number, expires)
        )

    def _add_record(
        self, batch: BatchDeltas, record: StreamRecord, deltas: list[RecordDelta]
    ) -> None:
        """Coalesce one record's deltas into ``batch``: all of a (record, rule)'s deltas, or
        none when one of its sums would pass 38 significant digits (a failure then)."""
        by_rule: dict[str, list[RecordDelta]] = {}
        for d in deltas:
            by_rule.setdefault(d.ref.rule, []).append(d)
        for rule_name, group in by_rule.items():
            try:
                sums = {}
                for d in group:
                    current = batch.deltas.get(d.ref.batch_key)
                    so_far = (current.amount, current.count) if current else NO_AMOUNTS
                    sums[d.ref.batch_key] = add_amounts(so_far, (d.amount, d.count))
            except ArithmeticError:
                batch.failures.append(
                    self._failure(
                        record,
                        rule_name,
                        "the batch's sum for an aggregate needs more than DynamoDB's 38 "
                        "significant digits",
                        FailureCause.LIMIT_EXCEEDED,
                    )
                )
                continue
            batch.record_deltas += len(group)
            for d in group:
                self._coalesce(batch, d, sums[d.ref.batch_key], self._by_name[d.ref.rule])

    @staticmethod
    def _drop_expired(
        batch: BatchDeltas, deltas: list[RecordDelta], now: float
    ) -> list[RecordDelta]:
        kept = []
        for d in deltas:
            if d.ref.bucket is not None and d.ref.bucket.expired(now):
                batch.expired += 1
                batch.expired_retractions += d.amount < 0
                continue
            kept.append(d)
        return kept

    @staticmethod
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
