"""One rule: :class:`Rule` and :class:`Contribution` (what one item image adds to one of its
aggregates), with the limits of the sort keys a rule builds.

A rule says *what* to count or sum (``delta``), over *which* items (``match``), under *which*
aggregate (``key``)::

    rules:
      - name: delay_minutes_by_carrier
        description: Total departure delay in minutes per carrier
        match: {status: departed}
        key: "{carrier}"
        delta: {attribute: dep_delay}
        leaderboard: true
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    model_validator,
)

from aggregator.core.conditions import Condition, MatchAll, parse_match
from aggregator.core.exceptions import EvaluationError, FailureCause
from aggregator.core.kinds import Kind, Sum, parse_kind
from aggregator.core.rules.buckets import Bucket, Window
from aggregator.core.rules.deltas import DeltaSpec
from aggregator.core.rules.keys import KeyTemplate
from aggregator.core.rules.targets import Target, target_key_template
from aggregator.core.rules.thresholds import Threshold
from aggregator.core.rules.writes import WriteSpec
from aggregator.core.text import quote

MAX_RULE_NAME_CHARS = 100
"""Longest rule name, in characters: the one source of :data:`RULE_NAME_PATTERN` and of the
message that refuses a name."""

RULE_NAME_PATTERN = rf"^[A-Za-z][A-Za-z0-9_.-]{{0,{MAX_RULE_NAME_CHARS - 1}}}$"

MAX_SORT_KEY_BYTES = 1024
"""Longest sort key DynamoDB accepts, in UTF-8 bytes (DynamoDB Developer Guide, "Service,
account, and table quotas": sort key length 1 to 1,024 bytes). A rule whose literal key text
alone cannot fit is rejected when it loads; longer keys built from item values are record
failures (dead-lettered) in the engine."""

BUCKET_TEXT_BYTES = len("2013-01-01T05:00:00Z")
"""Length of a bucket start in a windowed aggregate's sort key (fixed-width UTC text)."""


def _whole(value: Any) -> Any:
    """YAML numbers load as ``Decimal``: a whole one becomes an ``int``; booleans, fractions and
    text are refused (strictly typed below)."""
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    return value


CountField = Annotated[int, BeforeValidator(_whole), Field(ge=1, le=100, strict=True)]
"""A count from 1 to 100 (``write_shards``, ``leaderboard_partitions``)."""

AUTO_WRITE_SHARDS = 64
"""How many partials an aggregate of a rule with ``write_shards: auto`` has while its writers
write partials (:mod:`aggregator.dynamodb.routing`)."""


def _write_shards(value: Any) -> int | str:
    """``write_shards``: ``"auto"``, or a whole number from 1 to 100."""
    value = _whole(value)
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise ValueError(f"should be a whole number from 1 to 100, or auto; got {value!r}")
    return value


WriteShardsField = Annotated[int | Literal["auto"], PlainValidator(_write_shards)]
"""``write_shards``: a count from 1 to 100, or ``"auto"``."""


class FieldError(ValueError):
    """A problem found by a whole-rule check that belongs to one field: ``path`` names it
    (``key``, or the parts of a nested one: ``("thresholds", 0, "granularity")``), so messages
    say ``field 'key'`` rather than ``field '(rule)'``."""

    def __init__(self, path: str | tuple[str | int, ...], message: str) -> None:
        self.parts: tuple[str | int, ...] = (path,) if isinstance(path, str) else path
        self.message = message
        super().__init__(message)


def _parse_condition(value: Any) -> Condition:
    if isinstance(value, Condition):
        return value
    return parse_match(value)  # ConditionSyntaxError is a ValueError carrying its sub-path


def _parse_key(value: Any) -> KeyTemplate:
    if isinstance(value, KeyTemplate):
        return value
    return KeyTemplate.parse(value)


MatchField = Annotated[Condition, BeforeValidator(_parse_condition)]
KeyField = Annotated[KeyTemplate, BeforeValidator(_parse_key)]
KindField = Annotated[Kind, BeforeValidator(parse_kind)]


class Rule(BaseModel):
    """One aggregation rule.

    Attributes
    ----------
    name
        Unique within a rule set; letters, digits, ``_ . -``, starting with a letter; it prefixes
        the sort key of every aggregate item of the rule (``"<name>#<key>"``).
    match
        Condition on an item image (see :mod:`aggregator.core.conditions`); default: every item.
    key
        Key template over image attributes, or a literal.
    delta
        Amount per matching item (``Decimal``), constant or attribute: the number the rule's
        kind aggregates.
    kind
        What is kept per key (:mod:`aggregator.core.kinds`): ``sum`` (default), ``mean``,
        ``min``, ``max`` or ``distribution`` (percentiles). Every kind but ``sum`` needs an
        attribute ``delta``; only ``sum`` can have a ``leaderboard`` or be a derived rule's
        ``source``.
    ttl_deletes
        ``keep`` (default): a REMOVE made by DynamoDB's TTL (``userIdentity.principalId ==
        "dynamodb.amazonaws.com"``) retracts nothing, so counters of expiring raw events do not
        shrink. ``retract``: treat it like any delete.
    leaderboard
        Also put the aggregate items into the sparse ``leaderboard`` GSI for top-N queries. With
        a ``window``, each time bucket is ranked among the keys' buckets of the same granularity
        and start ("top customers this hour"): its index partition key value names the bucket.
    leaderboard_partitions
        Spread the rule's index entries over this many index partition key values
        (``<rule>#<n>``, by a hash of the aggregate's key; 1: all under ``<rule>``): an index
        partition takes at most 1,000 WCU a second (DynamoDB Developer Guide, "Best practices
        for designing and using partition keys effectively"), and a throttled index throttles
        the table (Developer Guide, "GSI write throttling and back pressure"). ``top`` then reads
        every one of them and merges (one ``Query`` each). Needs ``leaderboard: true``.
    leaderboard_store
        Where the ranking is kept. ``index`` (default): the sparse GSI, rewritten (2 WCU) on
        every update of an aggregate above its partition's floor. ``list``: a *top list* per
        index partition, one item holding its largest aggregates
        (:mod:`aggregator.core.top_list_merge`), kept from the aggregates' own stream records and
        written at most once per stream batch; ``top`` reads it with one request and answers
        ``n`` up to 100 from it. Changing it builds a new generation (``aggregator rebuild``).
        Needs ``leaderboard: true``.
    write_shards
        Write sharding for aggregates with many writers: each stream shard adds its deltas to
        one of this many *partial* items of the aggregate (chosen by a hash of the shard id), in
        an item collection of the aggregate's own, and the aggregate itself is kept up to date
        from the partials' stream records, one shard's batch at a time (1: no partials). Each
        partial then carries the checkpoints of a few shards only, and the aggregate those of
        the few shards of its partials' collection. Time buckets have partials of their own.
        Not for derived rules; needs a table with a sort key. ``auto``: each stream shard writes
        the aggregate itself until its writes of the rule's aggregates run hot, then its
        partials (:data:`AUTO_WRITE_SHARDS` of them) from a time it records first, and the
        aggregate again once they cool (:mod:`aggregator.dynamodb.routing`); exactly-once and
        window modes only decide so (at-least-once decides in memory).
    partitions
        How many partition key values the rule's aggregates spread over (``AGGREGATES#<n>``, by
        a hash of the rule and key:
        :meth:`~aggregator.core.layout.TableLayout.aggregate_partition`), so that many keys
        written at a high total rate stay under a partition's 1,000 WCU a second (Developer
        Guide, "Best practices for designing and using partition keys effectively"). ``None``
        (not given): the table's ``aggregate_partitions``, which a
        :class:`~aggregator.core.rules.RuleSet` fills in when it is above 1. Every item of one
        key shares a value, so a read of one key stays one request; a listing of the rule reads
        each value. Changing it builds a new generation (``aggregator rebuild``). Needs a table
        with a sort key for more than 1; at most
        :data:`~aggregator.core.layout.MAX_AGGREGATE_PARTITIONS`.
    window
        Optional :class:`Window`: count per time bucket of an event-time attribute; the sort key
        becomes ``"<name>#<key>#<granularity>#<bucket start>"``.
    source
        Optional name of another rule whose aggregates are this rule's input (a *derived*
        rule): its images are the source aggregate item before and after each change, with
        attributes ``value`` (the counter), ``key`` (the source key as text) and ``rule``, plus
        ``granularity`` and ``bucket`` for windowed sources. A source aggregate whose value is 0
        counts as absent. ``key: "{value}"`` gives a histogram (how many keys have each value),
        a literal key a distinct count (how many keys have a non-zero value).
    target
        Optional :class:`~aggregator.core.rules.targets.Target`: keep the sum in an attribute of
        an application item (``likeTally`` on the post's ``META`` item) instead of an aggregate
        item; the rule then has no ``key`` (its key is the target's templates joined by ``#``),
        kind ``sum``, no window, leaderboard or source. The item is never created: a delta whose
        target does not exist goes to the rule's ledger (:mod:`aggregator.dynamodb.targets`).
    thresholds
        Optional :class:`~aggregator.core.rules.thresholds.Threshold` list: an EventBridge event
        each time an aggregate's value enters or leaves ``above: X`` or ``below: X``, read from
        the aggregate's own stream record (:mod:`aggregator.core.crossings`). Kind ``sum`` only,
        no target; names unique within the rule; a threshold's ``granularity`` must be one of
        the rule's ``window`` (every granularity crosses a threshold without one).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(pattern=RULE_NAME_PATTERN)
    description: str = ""
    match: MatchField = Field(default_factory=MatchAll)
    key: KeyField
    delta: DeltaSpec = Field(default_factory=lambda: DeltaSpec(constant=Decimal(1)))
    kind: KindField = Field(default_factory=Sum)
    ttl_deletes: Literal["keep", "retract"] = "keep"
    leaderboard: StrictBool = False
    leaderboard_partitions: CountField = 1
    leaderboard_store: Literal["index", "list"] = "index"
    write_shards: WriteShardsField = 1
    partitions: CountField | None = None
    window: Window | None = None
    source: str | None = Field(default=None, pattern=RULE_NAME_PATTERN)
    target: Target | None = None
    thresholds: tuple[Threshold, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _key_of_target(cls, data: Any) -> Any:
        """A target rule's ``key`` is its target's templates; giving one too is refused."""
        if not isinstance(data, Mapping) or data.get("target") is None:
            return data
        if data.get("key") is not None:
            raise FieldError(
                "key", "a rule with a target is keyed by its target item: leave key out"
            )
        target = data["target"]
        composed = target_key_template(target) if isinstance(target, Mapping | Target) else None
        if composed is not None:
            try:
                KeyTemplate.parse(composed)
            except (ValueError, TypeError):
                composed = None
        # a malformed target is reported by its own validation, naming target's fields, not as
        # a key the rule file never wrote
        return {**data, "key": composed if composed is not None else "target"}

    @model_validator(mode="after")
    def _target_fields(self) -> Rule:
        if self.target is None:
            return self
        for field, refused, message in (
            ("kind", self.kind.name != "sum", f"a target keeps a sum, not kind {self.kind.name!r}"),
            ("window", self.window is not None, "time buckets live in aggregate items"),
            (
                "leaderboard",
                self.leaderboard,
                "rank target items with a rule whose delta reads the target attribute",
            ),
            ("source", self.source is not None, "a derived rule keeps its own aggregate items"),
        ):
            if refused:
                raise FieldError(field, f"a rule with a target cannot have {field}: {message}")
        return self

    @model_validator(mode="after")
    def _thresholds_fit(self) -> Rule:
        if not self.thresholds:
            return self
        if self.target is not None:
            raise FieldError(
                "thresholds",
                "a rule with a target keeps its sum on an application item, which has no "
                "stream record of the framework's: put the thresholds on a rule with aggregate "
                "items",
            )
        if not self.kind.ranks:
            raise FieldError(
                "thresholds", f"thresholds need kind sum (a single value), not {self.kind.name!r}"
            )
        for index, threshold in enumerate(self.thresholds):
            problem = self._granularity_problem(threshold.granularity)
            if problem:
                raise FieldError(("thresholds", index, "granularity"), problem)
        names = [t.name for t in self.thresholds]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise FieldError("thresholds", f"threshold name {twice[0]!r} is given twice")
        return self

    def _granularity_problem(self, label: str | None) -> str | None:
        """Why a threshold's ``granularity`` ``label`` is not one the rule keeps, or ``None``
        (``"did you mean"`` the nearest it keeps)."""
        if label is None:
            return None
        if self.window is None:
            return (
                f"granularity {quote(label)} needs time buckets: the rule has no window (leave "
                "granularity out)"
            )
        kept = [g.label for g in self.window.granularities]
        if label in kept:
            return None
        close = difflib.get_close_matches(label, kept, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"the rule keeps no granularity {quote(label)} (it keeps {', '.join(kept)}){hint}"

    @model_validator(mode="after")
    def _fields_combine(self) -> Rule:
        problem = self._sort_key_problem()
        if problem:
            raise FieldError("key", problem)
        if self.kind.needs_attribute and self.delta.attribute is None:
            raise FieldError(
                "delta",
                f"kind {self.kind.name!r} needs the number to aggregate from an attribute: "
                "delta: {attribute: NAME}",
            )
        if self.leaderboard and not self.kind.ranks:
            raise FieldError(
                "leaderboard",
                f"a rule of kind {self.kind.name!r} has no total to rank: leaderboard needs "
                "kind sum",
            )
        if self.leaderboard_partitions > 1 and not self.leaderboard:
            raise FieldError(
                "leaderboard_partitions", "leaderboard_partitions needs leaderboard: true"
            )
        if self.leaderboard_store != "index" and not self.leaderboard:
            raise FieldError("leaderboard_store", "leaderboard_store needs leaderboard: true")
        if self.sharded and self.source is not None:
            raise FieldError(
                "write_shards",
                "write_shards cannot be combined with source: a derived rule's aggregates are "
                "written from the few shards of the aggregates' own item collection",
            )
        return self

    def _sort_key_problem(self) -> str | None:
        """Why no aggregate of this rule could have a sort key DynamoDB accepts, or ``None``.

        The sort key is ``<name>#<key>`` (``<name>#<key>#<granularity>#<bucket start>`` for
        windowed rules) and must be at most :data:`MAX_SORT_KEY_BYTES` UTF-8 bytes (DynamoDB
        Developer Guide, "Service, account, and table quotas": sort key length 1 to 1,024
        bytes). Literal key text goes in as it is (only substituted values are escaped), so the
        rule name, the literal parts of the key and, for windowed rules, the suffix of the
        longest granularity label are a lower bound: reached by a literal key, and by a
        templated one whose values are empty.
        """
        prefix = len(self.name.encode("utf-8")) + 1
        literal = sum(len(part.encode("utf-8")) for part in self.key.literals)
        suffix = 0
        if self.window is not None:
            label = max((g.label for g in self.window.granularities), key=len)
            suffix = len(f"#{label}#".encode()) + BUCKET_TEXT_BYTES
        values = self.kind.suffix_bytes
        size = prefix + literal + suffix + values
        if size <= MAX_SORT_KEY_BYTES:
            return None
        parts = f"'{self.name}#': {prefix}, key"
        parts += f": {literal}" if self.key.is_literal else f" outside its placeholders: {literal}"
        if suffix:
            parts += f", '#{label}#YYYY-MM-DDTHH:MM:SSZ': {suffix}"
        if values:
            parts += f", the {self.kind.name} value suffix: up to {values}"
        at_least = "" if self.key.is_literal else "at least "
        return (
            f"the aggregate's sort key would be {at_least}{size} bytes ({parts}), over "
            f"DynamoDB's {MAX_SORT_KEY_BYTES}-byte limit for a sort key"
        )

    @property
    def indexed(self) -> bool:
        """Whether the rule's aggregates carry entries of the leaderboard GSI (a leaderboard
        kept in the index, not in top lists)."""
        return self.leaderboard and self.leaderboard_store == "index"

    @property
    def top_listed(self) -> bool:
        """Whether the rule's ranking is kept in top lists (``leaderboard_store: list``)."""
        return self.leaderboard and self.leaderboard_store == "list"

    @property
    def observed(self) -> bool:
        """Whether the handler reads the stream records of the rule's own aggregates: its top
        lists merge them (``leaderboard_store: list``), its thresholds cross on them."""
        return self.top_listed or bool(self.thresholds)

    @property
    def is_derived(self) -> bool:
        return self.source is not None

    @property
    def sharded(self) -> bool:
        """Whether the rule's aggregates may have partial items (``write_shards`` other than 1,
        ``auto`` included)."""
        return self.write_shards != 1

    @property
    def auto_shards(self) -> bool:
        """``write_shards: auto``: partials only while a shard's writes run hot."""
        return self.write_shards == "auto"

    @property
    def partial_slots(self) -> int:
        """How many partials an aggregate has when its writers write partials
        (:data:`AUTO_WRITE_SHARDS` for ``auto``; 1 for a rule without write sharding)."""
        return AUTO_WRITE_SHARDS if self.write_shards == "auto" else self.write_shards

    @property
    def key_fields(self) -> int:
        """How many ``#``-separated fields the rule's encoded keys have: one more than the
        ``#`` in the key's literal text (substituted values escape theirs). With the rule name
        they make an aggregate's *home* (:func:`~aggregator.core.layout.aggregate_home`)."""
        return 1 + sum(text.count("#") for text in self.key.literals)

    @property
    def spread(self) -> int:
        """How many partition key values the rule's aggregates spread over: ``partitions``, 1
        when not set (a rule outside a :class:`~aggregator.core.rules.RuleSet`)."""
        return 1 if self.partitions is None else self.partitions

    @property
    def write_spec(self) -> WriteSpec:
        """What the writers need to know of the rule (:class:`WriteSpec`): one value for every
        path that builds a :class:`~aggregator.core.engine.CoalescedDelta` (the engine, a
        backfill, reconcile)."""
        return WriteSpec(
            indexed=self.indexed,
            index_partitions=self.leaderboard_partitions,
            write_shards=self.partial_slots,
            auto_shards=self.auto_shards,
            keeps_count=self.kind.keeps_count,
            per_value=self.kind.per_value,
            target_attribute=None if self.target is None else self.target.attribute,
            partitions=self.spread,
            key_fields=self.key_fields,
        )

    def attributes(self) -> frozenset[str]:
        """Names of every image attribute this rule reads (match, key or target, delta and
        time)."""
        names = self.match.attributes() | self.key.attributes() | self.delta.attributes()
        return names | ({self.window.time} if self.window else set())

    def ledger_key(self, target: Sequence[str]) -> tuple[str, str] | None:
        """For a rule with a ``target``: ``(encoded, display)`` of the key under which the rule
        counts toward the application item whose key values are ``target`` (``(partition
        key,)`` or ``(partition key, sort key)``, raw text), i.e. the key of its ledger item
        ``<rule>#<encoded>``: the key templates rendered (as :meth:`contributions` renders
        them) with the placeholders' values read back from ``target``
        (:meth:`~aggregator.core.rules.targets.Target.placeholder_values`). ``None`` without a
        target, or when no image could target that item."""
        if self.target is None:
            return None
        values = self.target.placeholder_values(target)
        if values is None:
            return None
        return self.key.render(values)

    def contributions(self, image: Mapping[str, Any] | None) -> list[Contribution]:
        """What one image adds: one :class:`Contribution` (one per granularity for windowed
        rules), or none if the image does not match.

        Raises
        ------
        EvaluationError
            When the image matches but its key, delta or event time cannot be evaluated.
        """
        if image is None or not self.match.matches(image):
            return []
        encoded, display = self.key.render(image)
        number = self.delta.evaluate(image)
        try:
            entry = self.kind.entry(number)
        except (ArithmeticError, ValueError) as exc:
            raise EvaluationError(
                f"{self.kind.name}: cannot use {number}: {exc}", FailureCause.INVALID_VALUE
            ) from None
        tail = "" if entry.suffix is None else f"#{entry.suffix}"
        if self.target is not None:
            target = self.target.render(image)
            return [Contribution(encoded, display, entry.amount, None, entry.count, target)]
        if self.window is None:
            return [Contribution(f"{encoded}{tail}", display, entry.amount, None, entry.count)]
        return [
            Contribution(f"{encoded}#{b.suffix()}{tail}", display, entry.amount, b, entry.count)
            for b in self.window.buckets(image)
        ]


class Contribution(NamedTuple):
    """What one image adds to one aggregate item of a rule.

    ``key`` is the encoded sort-key part after ``"<rule>#"`` (with ``"#<granularity>#<bucket>"``
    for windowed rules, then ``"#<value>"`` for kinds with one item per value), ``display`` the
    key with raw values, ``bucket`` the time bucket or ``None``, ``amount`` what the value
    attribute gets and ``item_count`` what the count attribute gets (kinds that keep one);
    ``target`` the key values of a target rule's application item (else ``None``).
    """

    key: str
    display: str
    amount: Decimal
    bucket: Bucket | None
    item_count: Decimal = Decimal(0)
    target: tuple[str, ...] | None = None
