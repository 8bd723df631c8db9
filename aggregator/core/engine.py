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
(a TTL delete of a partial time bucket changes nothing: the aggregate's bucket expires too:
:mod:`aggregator.core.partials`).

A batch's deltas are then coalesced (:mod:`aggregator.core.coalescing`): one amount per aggregate
item, with the sequence numbers of the first record that touched it and of the batch's last
record (what the exactly-once write protocol needs), and the per-record parts (to recompute the
amount after a checkpoint). The values the engine produces (:class:`BatchDeltas`,
:class:`CoalescedDelta`, :class:`AggregateRef`, :class:`RecordFailure`) are defined in
:mod:`aggregator.core.deltas` and importable from here.

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
from dataclasses import replace
from decimal import Decimal

from aggregator.core.checkpoint_names import rule_token
from aggregator.core.coalescing import coalesce_record, drop_expired, merge_batches, widen_bounds
from aggregator.core.crossings import record_crossings
from aggregator.core.deltas import (
    NO_AMOUNTS,
    RECORD_RULE,
    AggregateRef,
    Amounts,
    BatchDeltas,
    CoalescedDelta,
    LedgerCarry,
    RecordDelta,
    RecordFailure,
    TopObservation,
    add_amounts,
)
from aggregator.core.exceptions import ConfigError, EvaluationError, FailureCause
from aggregator.core.layout import TableLayout
from aggregator.core.ledger_carries import carried_entries
from aggregator.core.numbers import add, subtract
from aggregator.core.partials import partial_delta
from aggregator.core.records import Image, MalformedRecord, StreamRecord, pad_sequence_number
from aggregator.core.routing import moved_at
from aggregator.core.rules import (
    MAX_SORT_KEY_BYTES,
    Contribution,
    Rule,
    RuleSet,
    derived_attribute_problems,
)
from aggregator.core.top_list_merge import placement

# Re-exported for the modules that import them from here (the values are defined in
# aggregator.core.deltas, merge_batches in aggregator.core.coalescing).
__all__ = [
    "MAX_SORT_KEY_BYTES",
    "NO_AMOUNTS",
    "RECORD_RULE",
    "AggregateRef",
    "Amounts",
    "BatchDeltas",
    "CoalescedDelta",
    "Engine",
    "LedgerCarry",
    "RecordFailure",
    "add_amounts",
    "merge_batches",
]


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
        self._thresholded = {r.name: r for r in rules if r.thresholds}
        self.thresholded_rules = tuple(self._thresholded)
        """Names of the rules with ``thresholds`` (their aggregates' records give
        :attr:`BatchDeltas.crossings`)."""
        # the target rules by the token that starts their entries in a checkpoint map (what a
        # deleted target item's REMOVE carries to their ledgers: _carry)
        self._target_tokens = {rule_token(r.name): r.name for r in rules if r.target is not None}
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
        return [(self._ref(rule, c), (c.amount, c.item_count)) for c in rule.contributions(image)]

    def _ref(self, rule: Rule, c: Contribution) -> AggregateRef:
        """The aggregate item of one contribution of ``rule`` (for a target rule, also the key
        of its ledger item for that target).

        Raises
        ------
        EvaluationError
            When a target key is in a reserved partition, or a sort key would pass the
            layout's limit.
        """
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
        return ref

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
                failures.append(RecordFailure.of(record, rule.name, str(exc), exc.cause))
                continue
            if "OldImage" in failed and batch is not None:
                batch.old_images_unreadable += 1
            if "NewImage" in failed:
                error = failed["NewImage"]
                failures.append(
                    RecordFailure.of(record, rule.name, str(error), error.cause, "NewImage")
                )
            deltas.extend(
                RecordDelta(ref, amount, record.sequence_number, count)
                for ref, (amount, count) in changes
            )
        return deltas, failures

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
                batch.failures.append(RecordFailure.malformed(record))
                continue
            widen_bounds(batch, record.sequence_number)
            if self._target_tokens and record.event_name == "REMOVE":
                self._carry(batch, record)
            if self._listed:
                self._observe(batch, record, clock)
            if self._thresholded:
                crossings, expired = record_crossings(self._thresholded, self.layout, record, clock)
                batch.crossings += crossings
                batch.expired_crossings += expired
            evaluated = self._record_deltas(batch, record, fences, routing)
            if evaluated is None:
                continue
            deltas, failures = evaluated
            batch.failures.extend(failures)
            self._add_record(batch, record, drop_expired(batch, deltas, clock))
        return batch

    def _carry(self, batch: BatchDeltas, record: StreamRecord) -> None:
        """The ledger carries of a ``REMOVE`` record of an application item
        (:mod:`aggregator.core.ledger_carries`): for each target rule with entries in the
        item's checkpoint map, its ledger item for that item, the same :class:`AggregateRef` a
        delta aimed at the item gets (:meth:`Rule.ledger_key
        <aggregator.core.rules.Rule.ledger_key>`, :meth:`_ref`), with the entries, merged into
        ``batch.ledger_carries``. Entries that cannot be carried (unreadable, or of an item no
        image of the rule could target) are counted in ``batch.carry_entries_ignored``."""
        old = record.old_image
        if old is None or self.layout.is_reserved(record.keys):
            return
        raw = old.raw.get(self.layout.target_checkpoints_attribute)
        if raw is None:
            return
        found, ignored = carried_entries(raw, self._target_tokens)
        batch.carry_entries_ignored += ignored
        for name, entries in found.items():
            rule = self._by_name[name]
            assert rule.target is not None
            names = [self.layout.partition_key]
            if rule.target.sort_key is not None and self.layout.sort_key is not None:
                names.append(self.layout.sort_key)
            target = tuple(v for v in map(record.key_string, names) if v is not None)
            key = rule.ledger_key(target) if len(target) == len(names) else None
            try:
                ref = (
                    None
                    if key is None
                    else self._ref(rule, Contribution(*key, Decimal(0), None, target=target))
                )
            except EvaluationError:
                ref = None  # no delta can have reached that item: its key is refused
            if ref is None:
                batch.carry_entries_ignored += len(entries)
                continue
            carry = LedgerCarry(
                CoalescedDelta.of(rule.write_spec, ref, Decimal(0), record.sequence_number, []),
                dict(entries),
            )
            held = batch.ledger_carries.get(ref.batch_key)
            if held is None:
                batch.ledger_carries[ref.batch_key] = carry
            else:
                held.merge(carry)

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
            return partial_delta(self.layout, record, sharded, total)
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
        """Coalesce one record's deltas into ``batch`` (:func:`~aggregator.core.coalescing.
        coalesce_record`): all of a (record, rule)'s deltas, or none when one of its sums would
        pass 38 significant digits (a failure then)."""
        for rule_name in coalesce_record(batch, deltas, self._by_name):
            batch.failures.append(
                RecordFailure.of(
                    record,
                    rule_name,
                    "the batch's sum for an aggregate needs more than DynamoDB's 38 "
                    "significant digits",
                    FailureCause.LIMIT_EXCEEDED,
                )
            )
