"""The results of :class:`~aggregator.dynamodb.query.AggregateStore`'s reads: plain dataclasses,
re-exported by :mod:`aggregator.dynamodb.query`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from aggregator.core.kinds import ValueCount
from aggregator.core.windows import RangePart, bucket_text

__all__ = [
    "Aggregate",
    "HistogramBucket",
    "KeySuggestions",
    "Percentiles",
    "RollingTop",
    "SeriesBucket",
    "SeriesResult",
    "WindowResult",
]


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One aggregate item as read back.

    Attributes
    ----------
    rule
        Rule name.
    key
        Display key (raw attribute values, e.g. ``"JFK#BOS"``).
    value
        The counter, ``Decimal``.
    sort_key
        The item's sort key (``"<rule>#<encoded key>"``).
    granularity, bucket, expires
        For windowed rules: the bucket's granularity label, its start as UTC text
        (``2013-01-01T05:00:00Z``) and its TTL in epoch seconds (``None`` without retention).
    fields
        The rule's kind's fields (:meth:`aggregator.core.kinds.Kind.fields`): ``{"value"}`` for
        ``sum``, ``{"mean", "sum", "count"}`` for ``mean``, ``{"min"}``, ``{"max"}``, and for
        ``distribution`` ``{"count", "min", "p50", "p90", "p99", "max"}``; a field is ``None``
        when there is nothing to give (the mean of no items).

    For a kind that keeps one item per value (``min``, ``max``, ``distribution``) ``value`` is
    the kind's main field (the min, the max, the count) and ``sort_key`` the prefix of the key's
    value items; for the others it is the item's value attribute (a mean's sum).
    """

    rule: str
    key: str
    value: Decimal
    sort_key: str
    granularity: str | None = None
    bucket: str | None = None
    expires: int | None = None
    fields: Mapping[str, Decimal | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Percentiles of one key, from :meth:`~aggregator.dynamodb.query.AggregateStore.percentiles`.

    Attributes
    ----------
    rule, key
        What was read.
    values
        ``{p: value}`` per percentile asked, in the order asked; ``None`` when the key has no
        values. Nearest rank: the ``p``-th percentile of ``n`` values is the value of rank
        ``ceil(p / 100 * n)`` (rank 1 for ``p = 0``) in ascending order.
    count
        How many values the key has.
    relative_accuracy
        For a ``distribution`` rule, its ``alpha``: each value is within ``alpha`` of the true
        percentile, relatively (zero exactly); ``0`` for ``min``/``max`` rules, whose values are
        exact.
    requests, items_read, read_units
        What the read cost: ``Query`` requests, value items returned, modelled RCU (1 per
        started 4 KB of each page, strongly consistent).
    start, end
        For a windowed rule, the range covered (``[start, end)``, epoch seconds), as
        :class:`WindowResult` has it; else ``None``.
    asked_start, asked_end
        For a windowed rule, the range asked, as :class:`WindowResult` has it; else ``None``.
    """

    rule: str
    key: str
    values: dict[Decimal, Decimal | None]
    count: Decimal
    relative_accuracy: Decimal
    requests: int
    items_read: int
    read_units: int
    start: int | None = None
    end: int | None = None
    asked_start: int | None = None
    asked_end: int | None = None


@dataclass(frozen=True, slots=True)
class KeySuggestions:
    """Keys of a rule that exist and look like one that does not, from
    :meth:`~aggregator.dynamodb.query.AggregateStore.suggest_keys`.

    Attributes
    ----------
    keys
        At most :data:`~aggregator.dynamodb.query.keys.SUGGESTIONS_SHOWN` keys as
        :meth:`~aggregator.dynamodb.query.AggregateStore.get` takes them: for a
        key with one placeholder its value (``PLAYER#p13``), else the key as displayed.
    requests
        Requests sent to find them (one ``Query``, and up to
        :data:`~aggregator.dynamodb.query.keys.SUGGESTION_PROBES` more).
    sampled
        Aggregate keys looked at (the keys of one page of at most
        :data:`~aggregator.dynamodb.query.keys.SUGGESTION_SAMPLE` items).
    """

    keys: list[str]
    requests: int = 0
    sampled: int = 0


@dataclass(frozen=True, slots=True)
class HistogramBucket:
    """One row of a histogram: how many source keys (``count``) have the value ``value``.

    ``value`` is the derived rule's key: a ``Decimal`` when it is a number, else the text.
    """

    value: Decimal | str
    count: Decimal


class _RangeTexts:
    """``start_text`` and ``end_text``: a result's covered range as UTC text."""

    __slots__ = ()
    start: int
    end: int

    @property
    def start_text(self) -> str:
        return bucket_text(self.start)

    @property
    def end_text(self) -> str:
        return bucket_text(self.end)


@dataclass(slots=True)
class WindowResult(_RangeTexts):
    """A count or sum over a time range, from
    :meth:`~aggregator.dynamodb.query.AggregateStore.window`.

    Attributes
    ----------
    rule, key
        What was read.
    start, end
        The range actually covered, ``[start, end)``, epoch seconds on boundaries of the rule's
        finest granularity: the asked range widened out to them, so it holds every second asked
        (and at most one finest bucket more at each edge).
    value
        The sum of the buckets in the range (a count for ``delta: 1``).
    parts
        The runs of buckets read, one ``Query`` each (more when a run spans several 1 MB pages).
    requests
        Requests sent: ``Query`` (and, on a table without a sort key, ``BatchGetItem``).
    items_read
        Bucket items returned (buckets never written have no item and cost nothing).
    read_units
        Modelled read capacity units: per request, 1 per started 4 KB of the items' total size
        (strongly consistent reads); see
        :meth:`~aggregator.dynamodb.query.reader.StoreReader.page_units` for a table without a
        sort key.
    complete
        ``False`` when part of the range lies in buckets already past the rule's retention,
        which may have been deleted by TTL (the value then undercounts).
    fields
        The rule's kind's fields over the range (:attr:`Aggregate.fields`): ``{"value"}`` for a
        sum; a mean's ``mean``, ``sum`` and ``count`` from the buckets' sums and counts; a
        min's, max's or distribution's from the buckets' value items merged (a value's counts
        added across buckets). ``value`` is the kind's main field, as in :class:`Aggregate`.
    values
        For kinds with one item per value: the merged value items with a count other than
        zero, in ascending order of their numbers (what
        :meth:`~aggregator.dynamodb.query.AggregateStore.percentiles` ranks); empty for the others.
    asked_start, asked_end
        The range asked, ``[asked_start, asked_end)``, epoch seconds: ``start`` and ``end`` as
        given, or for ``last`` the ``last`` seconds up to ``end`` (default the current time
        rounded up to the second). ``[start, end)`` contains it.
    """

    rule: str
    key: str
    start: int
    end: int
    value: Decimal = Decimal(0)
    parts: list[RangePart] | None = None
    requests: int = 0
    items_read: int = 0
    read_units: int = 0
    complete: bool = True
    fields: dict[str, Decimal | None] = field(default_factory=dict)
    values: list[ValueCount] = field(default_factory=list)
    asked_start: int | None = None
    asked_end: int | None = None

    @property
    def widened(self) -> bool:
        """Whether the range answered is wider than the range asked (an asked edge fell
        inside one of the rule's finest buckets)."""
        return (self.asked_start, self.asked_end) != (self.start, self.end)


@dataclass
class SeriesBucket:
    """One bucket of a :class:`SeriesResult`: its start (epoch seconds, and as text), its value
    (as :attr:`WindowResult.value`: a sum, a mean's sum, a min's min; 0 for a bucket never
    written) and, for kinds with several, its fields (a mean's ``mean``, ``sum`` and ``count``;
    empty for a bucket never written)."""

    start: int
    value: Decimal = Decimal(0)
    fields: dict[str, Decimal | None] = field(default_factory=dict)
    written: bool = False

    @property
    def start_text(self) -> str:
        return bucket_text(self.start)


@dataclass
class SeriesResult(_RangeTexts):
    """One key of a windowed rule, bucket by bucket, from
    :meth:`~aggregator.dynamodb.query.AggregateStore.series`.

    Attributes
    ----------
    rule, key, granularity
        What was read: the buckets of ``granularity`` (a label: ``hour``, ``minute``, ...).
    start, end
        The range covered, ``[start, end)``, on that granularity's boundaries (the range asked,
        widened out to them).
    buckets
        Every bucket of the range in time order, written or not (a bucket never written has
        value 0 and ``written`` false).
    total
        The value over the whole range, as
        :meth:`~aggregator.dynamodb.query.AggregateStore.window` computes it from the same
        buckets (a sum's sum, a mean's sum; a min's, max's or distribution's main field from
        the buckets' value items merged).
    fields
        The kind's fields over the whole range (as :attr:`WindowResult.fields`: a mean's
        ``mean`` from the range's sum and count).
    headline
        The field to chart bucket by bucket: the kind's main one (``mean``, ``min``, ``count``
        of a distribution), or ``value`` for a kind without fields (a sum).
    requests, items_read, read_units, complete
        As :class:`WindowResult`: one ``Query`` for the range (more pages when it passes 1 MB).
    asked_start, asked_end
        The range asked.
    """

    rule: str
    key: str
    granularity: str
    start: int
    end: int
    buckets: list[SeriesBucket] = field(default_factory=list)
    total: Decimal = Decimal(0)
    fields: dict[str, Decimal | None] = field(default_factory=dict)
    headline: str = "value"
    requests: int = 0
    items_read: int = 0
    read_units: int = 0
    complete: bool = True
    asked_start: int | None = None
    asked_end: int | None = None

    def headlines(self) -> list[Decimal | None]:
        """Each bucket's :attr:`headline` field in time order (``None`` for a bucket without
        it: a mean's bucket never written)."""
        if self.headline == "value":
            return [b.value for b in self.buckets]
        return [b.fields.get(self.headline) for b in self.buckets]


@dataclass
class RollingTop(_RangeTexts):
    """The keys of a windowed leaderboard rule ranked by their sum over a range of buckets, from
    :meth:`~aggregator.dynamodb.query.AggregateStore.rolling_top`.

    Attributes
    ----------
    rule, granularity
        What was ranked: the rule's buckets of ``granularity``.
    start, end
        The range covered, ``[start, end)``, on that granularity's boundaries.
    aggregates
        The top keys, largest sum first (ties by key); each :class:`Aggregate` holds the sum
        over the range, its ``granularity`` the one ranked and no ``bucket``.
    path
        ``"lists"``: merged from the buckets' top lists, with a read of the few aggregates the
        lists left undecided (:mod:`aggregator.core.rolling_top`); ``"aggregates"``: every
        aggregate of the rule read and summed (the lists could not prove the answer, or the rule
        keeps its ranking in the index).
    requests, items_read, read_units
        What the answer cost (both paths' reads when the lists fell back).
    complete
        ``False`` when buckets of the range are past the rule's retention (left out: their
        items and lists may already be deleted).
    asked_start, asked_end
        The range asked.
    """

    rule: str
    granularity: str
    start: int
    end: int
    aggregates: list[Aggregate] = field(default_factory=list)
    path: str = "lists"
    requests: int = 0
    items_read: int = 0
    read_units: Decimal = Decimal(0)
    complete: bool = True
    asked_start: int | None = None
    asked_end: int | None = None
