"""Read API over the ``AGGREGATES`` partition: one aggregate, all of a rule, top-N, histograms
and counts over time ranges and sliding windows.

Every call reports the requests it made (``AggregateStore.requests``) so costs can be shown.

Window queries
--------------
A windowed rule keeps one item per key, granularity and bucket, with sort keys
``"<rule>#<key>#<granularity>#<bucket start>"`` that sort in time order.
:meth:`AggregateStore.window` covers ``[start, end)`` with the coarsest buckets that fit inside
it and the finer ones only at the edges (:func:`aggregator.core.windows.plan_range`); each run of
buckets of one granularity is one ``Query`` with ``sk BETWEEN``. With ``hour`` and ``minute``
buckets a 24-hour window reads at most 3 Query requests and 84 items (23 hours and up to 61
minutes: its edges are widened out to whole minutes), and a Query's read units are charged on
the items' total size (1 RCU per started 4 KB for a strongly consistent read: DynamoDB Developer
Guide, "Read consumption for Query"), where
``BatchGetItem`` of 24 hour keys and up to 59 minute keys (the approach of this framework's seed
article) rounds every item up to 4 KB, i.e. up to 83 RCU, and asks for keys whether or not a
bucket was ever written.

Write sharding and leaderboard partitions
-----------------------------------------
A rule with ``write_shards`` keeps partial items beside each aggregate, and the aggregate itself
is kept from them by the stream (:mod:`aggregator.core.engine`): every read here reads the
aggregates, at the same cost as without (``get`` one ``GetItem``). A rule with
``leaderboard_partitions: L`` has its index entries under ``L`` index partition key values:
``top`` sends one ``Query`` per partition (``L`` requests, each at most ``n`` entries) and merges
them; each key is in exactly one partition, so the merged top ``n`` is exact. When they hold
fewer than ``n`` entries it reads the unspread partition too (one more request): during the
rebuild that spreads a leaderboard, readers still read the generation built before.

Tables without a sort key
-------------------------
Every read of a collection (``list``, ``histogram``, ``top`` of a rule without a leaderboard,
``window``) goes through the keys-only collection index and ``BatchGetItem``
(:mod:`aggregator.dynamodb.collections`): per page, 1 ``Query`` plus one ``BatchGetItem`` per
100 items, and each item read costs at least 1 RCU. ``get`` (one ``GetItem``) and leaderboard
``top`` (one ``Query`` of the leaderboard index) cost what they cost with a sort key.
"""

from __future__ import annotations

import builtins
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Context, Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.exceptions import EvaluationError, QueryError, RuleError
from aggregator.core.kinds import COUNT_ATTRIBUTE, Kind, ValueCount
from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import generation_name, rule_fingerprint
from aggregator.core.numbers import add
from aggregator.core.ranking import IndexEntry, exact_top, read_partition
from aggregator.core.rules import Rule, RuleSet, Window, unescape_key_part
from aggregator.core.sketch import percentile_list
from aggregator.core.sortable import number_from_sortable
from aggregator.core.toplist import TopList
from aggregator.core.toplist import exact_top as exact_top_listed
from aggregator.core.windows import Granularity, RangePart, bucket_text, plan_range
from aggregator.dynamodb.batch import UnprocessedKeysError, WhenUnprocessed, batch_get
from aggregator.dynamodb.collections import query_collection
from aggregator.dynamodb.manifest import MANIFEST_SORT_KEY
from aggregator.dynamodb.toplists import decode as decode_top_list
from aggregator.dynamodb.toplists import top_sort_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = [
    "Aggregate",
    "AggregateStore",
    "HistogramBucket",
    "KeySuggestions",
    "Percentiles",
    "WindowResult",
]

SUGGESTION_SAMPLE = 100
"""Most items :meth:`AggregateStore.suggest_keys` reads of a rule's aggregates to find keys like
the one asked: one ``Query`` page (``Limit``)."""

SUGGESTION_PROBES = 3
"""Most keys :meth:`AggregateStore.suggest_keys` tries by prefix (``PLAYER#`` + the value asked),
one small read each."""

SUGGESTIONS_SHOWN = 3
"""Most keys :meth:`AggregateStore.suggest_keys` returns."""


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
    """Percentiles of one key, from :meth:`AggregateStore.percentiles`.

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
    :meth:`AggregateStore.suggest_keys`.

    Attributes
    ----------
    keys
        At most :data:`SUGGESTIONS_SHOWN` keys as :meth:`AggregateStore.get` takes them: for a
        key with one placeholder its value (``PLAYER#p13``), else the key as displayed.
    requests
        Requests sent to find them (one ``Query``, and up to :data:`SUGGESTION_PROBES` more).
    sampled
        Aggregate keys looked at (the keys of one page of at most :data:`SUGGESTION_SAMPLE`
        items).
    """

    keys: list[str]
    requests: int = 0
    sampled: int = 0


def _resembles(candidate: str, asked: str) -> bool:
    """Whether ``candidate`` may be the key meant by ``asked``: the same text but for case, or
    one of them is the other with a prefix ending in a separator (``PLAYER#p13`` and ``p13``;
    any character but a letter or a digit separates)."""
    c, a = candidate.casefold(), asked.casefold()
    if candidate == asked:
        return False
    if c == a:
        return True
    longer, shorter = (c, a) if len(c) > len(a) else (a, c)
    return (
        len(longer) > len(shorter) > 0
        and longer.endswith(shorter)
        and not longer[-len(shorter) - 1].isalnum()
    )


def _prefixes(values: Sequence[str]) -> list[str]:
    """The prefixes of ``values`` up to and including their last separator (``PLAYER#`` of
    ``PLAYER#p1``; any character but a letter or a digit), most frequent first."""
    counts: dict[str, int] = {}
    for value in values:
        cut = max((i for i, ch in enumerate(value) if not ch.isalnum()), default=-1)
        if cut >= 0:
            counts[value[: cut + 1]] = counts.get(value[: cut + 1], 0) + 1
    return sorted(counts, key=lambda prefix: -counts[prefix])


@dataclass(frozen=True, slots=True)
class HistogramBucket:
    """One row of a histogram: how many source keys (``count``) have the value ``value``.

    ``value`` is the derived rule's key: a ``Decimal`` when it is a number, else the text.
    """

    value: Decimal | str
    count: Decimal


@dataclass(slots=True)
class WindowResult:
    """A count or sum over a time range, from :meth:`AggregateStore.window`.

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
        (strongly consistent reads); see :meth:`AggregateStore._range` for a table without a
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
        zero, in ascending order of their numbers (what :meth:`AggregateStore.percentiles`
        ranks); empty for the others.
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
    def start_text(self) -> str:
        return bucket_text(self.start)

    @property
    def end_text(self) -> str:
        return bucket_text(self.end)

    @property
    def widened(self) -> bool:
        """Whether the range answered is wider than the range asked (an asked edge fell
        inside one of the rule's finest buckets)."""
        return (self.asked_start, self.asked_end) != (self.start, self.end)


VALUE_ITEMS_END = "$"
"""Appended to a time bucket's sort key, the upper bound of a ``Query`` that reads the bucket's
value items too (``<bucket>#<value>``): ``$`` (0x24) sorts right after ``#`` (0x23), and DynamoDB
compares string sort keys by their UTF-8 bytes (Developer Guide, "Working with queries": key
condition expressions)."""


def _plain(number: Decimal) -> Decimal:
    """``number`` without a positive exponent (``120``, not ``1.2E+2``, which is how a
    normalized number read back from a sort key prints), exactly."""
    _, _, exponent = number.as_tuple()
    if isinstance(exponent, int) and exponent > 0:
        return number.quantize(Decimal(1), context=Context(prec=160))
    return number


def _s(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else value.get("S")


def _window_range(
    finest: Granularity, start: int | None, end: int | None, last: int | None, clock: float
) -> tuple[tuple[int, int], tuple[int, int]]:
    """``([lo, hi), [asked start, asked end))`` of :meth:`AggregateStore.window`: the range
    asked (``[start, end)``, or ``[end - last, end)`` with ``end`` the clock rounded up to the
    second by default), and the range answered, the asked one widened out to the finest
    granularity's boundaries (its start down, its end up) so that it covers every second asked.

    Raises
    ------
    QueryError
        For both or neither of ``start`` and ``last``, ``last`` not a positive multiple of the
        finest granularity, ``start`` without ``end``, or ``end`` before ``start``.
    """
    if (start is None) == (last is None):
        raise QueryError("give either start (with end) or last")
    if last is not None:
        if last <= 0 or last % finest.seconds:
            raise QueryError(
                f"last must be a positive multiple of the finest granularity "
                f"({finest.label}, {finest.seconds} s), got {last} s"
            )
        asked_end = math.ceil(clock) if end is None else end
        asked = (asked_end - last, asked_end)
    else:
        assert start is not None  # exactly one of start and last (checked above)
        if end is None:
            raise QueryError("give end with start")
        if end < start:
            raise QueryError(f"end ({end}) is before start ({start})")
        asked = (start, end)
    return (finest.start(asked[0]), finest.ceil(asked[1])), asked


class AggregateStore:
    """Query aggregates of a rule set.

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table_name
        The table holding the ``AGGREGATES`` partition.
    rules
        The rule set (to resolve keys and know which rules have a leaderboard index).
    layout
        Table layout (default: the rule set's, ``rules.layout``).
    generations
        The generation to read of each rebuilt rule (``{rule: generation}``; others read
        generation 1). Default: the serving generations recorded in the table's manifest by
        ``aggregator rebuild`` (:mod:`aggregator.dynamodb.manifest`), read with one strongly
        consistent ``GetItem`` of its ``generations`` map on first use and again after
        ``generation_cache_seconds``. That read is counted in :attr:`manifest_reads`, not in
        :attr:`requests`. A rebuild switches the pointer in one write and leaves the old
        generation intact until ``aggregator drop-rule``, so a reader whose cached pointer is up
        to ``generation_cache_seconds`` old reads a complete (old) generation, never a mix.
    generation_cache_seconds
        How long the serving generations read from the manifest are used (default 60).

    Examples
    --------
    ``store.get("flights_by_carrier", "UA")``, ``store.get("flights_by_route", "JFK#LAX")``
    (the key as displayed; the same as ``["JFK", "LAX"]``), ``store.top("flights_by_carrier", 5)``,
    ``{a.key: a.value for a in store.list("flights_by_carrier")}``.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        rules: RuleSet,
        *,
        layout: TableLayout | None = None,
        generations: Mapping[str, int] | None = None,
        generation_cache_seconds: float = 60.0,
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.rules = rules
        self.layout = rules.layout if layout is None else layout
        self.requests = 0
        self.manifest_reads = 0
        self.read_units = Decimal(0)
        """Read capacity the endpoint reported for the requests that asked for it (``top``)."""
        self.top_fallbacks = 0
        """``top`` calls the leaderboard index could not answer exactly (every aggregate of
        the rule was read and sorted instead; :mod:`aggregator.core.ranking`)."""
        self.generation_cache_seconds = generation_cache_seconds
        self._fixed_generations = generations is not None
        self._generations: dict[str, int] | None = (
            None if generations is None else dict(generations)
        )
        self._generations_read_at = 0.0
        self._indexed: dict[str, bool] = {}
        self._statuses: dict[str, str] = {}
        self._fingerprints: dict[str, str] = {}

    def storage_name(self, rule: str) -> str:
        """The name ``rule``'s serving generation is stored under: the rule's name, or
        ``"<rule>@<generation>"`` after a rebuild (:func:`~aggregator.core.lifecycle.
        generation_name`).

        Raises
        ------
        QueryError
            When the manifest cannot be read.
        """
        now = time.monotonic()
        if self._generations is None or (
            not self._fixed_generations
            and now - self._generations_read_at > self.generation_cache_seconds
        ):
            self._generations = self._read_generations()
            self._generations_read_at = now
        return generation_name(rule, self._generations.get(rule, 1))

    def _read_generations(self) -> dict[str, int]:
        self.manifest_reads += 1
        try:
            item = self.client.get_item(
                TableName=self.table_name,
                Key=self.layout.item_key(self.layout.control_pk, MANIFEST_SORT_KEY),
                ProjectionExpression="#g, #r",
                ExpressionAttributeNames={"#g": "generations", "#r": "rules"},
                ConsistentRead=True,
            ).get("Item")
        except (ClientError, BotoCoreError) as exc:
            raise QueryError(f"reading the rule manifest of {self.table_name!r}: {exc}") from exc
        generations = (item or {}).get("generations", {}).get("M", {})
        # the generations whose existing aggregates were written without (or with) index
        # entries: their leaderboard flag as recorded (lifecycle.RuleState.leaderboard)
        states = (item or {}).get("rules", {}).get("M", {})
        self._indexed = {
            name: value["M"]["leaderboard"]["BOOL"]
            for name, value in states.items()
            if "leaderboard" in value.get("M", {})
        }
        self._statuses = {
            name: value["M"]["status"]["S"]
            for name, value in states.items()
            if "status" in value.get("M", {})
        }
        self._fingerprints = {
            name: value["M"]["fingerprint"]["S"]
            for name, value in states.items()
            if "fingerprint" in value.get("M", {})
        }
        return {name: int(value["N"]) for name, value in generations.items()}

    def definition_changed(self, rule: str) -> bool:
        """Whether ``rule``'s serving generation was built from another definition than the
        rule's as given (:func:`~aggregator.core.lifecycle.rule_fingerprint`): its stored
        aggregates then mean the old definition until ``aggregator rebuild``. ``False`` when the
        manifest does not list it (or with ``generations`` given)."""
        stored = self.storage_name(rule)
        recorded = self._fingerprints.get(stored)
        return recorded is not None and recorded != rule_fingerprint(self._rule(rule))

    def serving_status(self, rule: str) -> str | None:
        """The manifest status of ``rule``'s serving generation (``pending``, ``active``...),
        from the same cached read as :meth:`storage_name`; ``None`` when the manifest does not
        list it (or with ``generations`` given, which skips the manifest)."""
        stored = self.storage_name(rule)  # (re)reads the manifest first when due
        return self._statuses.get(stored)

    def deployed(self, rule: str) -> bool | None:
        """Whether a handler (or ``aggregator run``) has registered ``rule`` in the manifest:
        ``None`` when the manifest lists no rule at all (nothing deployed with a manifest, or
        ``generations`` given), so that nothing can be said; from the same cached read as
        :meth:`serving_status`."""
        stored = self.storage_name(rule)
        if not self._statuses:
            return None
        return stored in self._statuses

    def index_complete(self, rule: str) -> bool:
        """Whether ``rule``'s leaderboard index holds every aggregate of its serving
        generation: not when the flag was turned on after aggregates were written, until
        ``aggregator rebuild`` indexes them (as the manifest records; always ``True`` with
        ``generations`` given, which skips the manifest)."""
        stored = self.storage_name(rule)
        recorded = self._indexed.get(stored)
        return recorded is None or recorded == self._rule(rule).leaderboard

    def _rule(self, name: str) -> Rule:
        try:
            return self.rules.get(name)
        except RuleError as exc:
            raise QueryError(str(exc)) from None

    def sort_key(
        self,
        rule: str,
        key: str | Sequence[Any] | Mapping[str, Any] = (),
        *,
        storage_name: str | None = None,
    ) -> str:
        """The sort key of one aggregate.

        ``key`` is the placeholder value for a one-placeholder template (``"UA"``, also for a
        value holding ``#``), the key as displayed (:attr:`Aggregate.key`, ``"JFK#LAX"``) for a
        template with several placeholders, split at the template's literal text by
        :meth:`~aggregator.core.rules.KeyTemplate.split_display`, a sequence of values in
        placeholder order, a mapping of placeholder names to values, or empty (or the literal
        itself) for a literal key. ``storage_name`` names the generation (default: the serving
        one, :meth:`storage_name`).

        Raises
        ------
        QueryError
            When the values do not fit the rule's key template, or when displayed key text
            splits in more than one way (a value holds a separator: give the values as a
            sequence).
        """
        encoded, _ = self._rendered_key(rule, key)
        return f"{storage_name or self.storage_name(rule)}#{encoded}"

    def _rendered_key(
        self, rule: str, key: str | Sequence[Any] | Mapping[str, Any]
    ) -> tuple[str, str]:
        """``(encoded, display)`` key text of ``key`` (as for :meth:`sort_key`)."""
        values = self._key_values(rule, key)
        return self._rule(rule).key.render_values(values)

    def _key_values(self, rule: str, key: str | Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        """The placeholder values of ``key`` (as for :meth:`sort_key`), in template order."""
        template = self._rule(rule).key
        if isinstance(key, str) and len(template.placeholders) > 1:
            try:
                values: list[Any] = template.split_display(key)
            except ValueError as exc:
                raise QueryError(f"rule {rule!r}: {exc}") from None
        elif isinstance(key, str):
            values = [key]
        elif isinstance(key, Mapping):
            missing = [p for p in template.placeholders if p not in key]
            if missing:
                raise QueryError(f"rule {rule!r}: key needs values for {missing}")
            values = [key[p] for p in template.placeholders]
        else:
            values = list(key)
        if template.is_literal and values in ([], [template.template]):
            values = []
        if template.is_literal and values:
            raise QueryError(
                f"rule {rule!r} has one aggregate, under the fixed key {template.template!r}: "
                f"give no key (or {template.template!r}), not {', '.join(map(str, values))!r}"
            )
        if len(values) != len(template.placeholders):
            raise QueryError(
                f"rule {rule!r}: key template {template.template!r} takes "
                f"{len(template.placeholders)} value(s) {list(template.placeholders)}, got {values}"
            )
        return [v if isinstance(v, str | bool | Decimal) else Decimal(str(v)) for v in values]

    def _aggregate(self, item: Mapping[str, Any], rule: str, stored: str) -> Aggregate:
        sk = self.layout.sort_key_of(item) or ""
        key = _s(item.get("key"))
        if key is None:
            key = unescape_key_part(sk[len(stored) + 1 :])
        value = Decimal(item.get(self.layout.value_attribute, {}).get("N", "0"))
        count = item.get(COUNT_ATTRIBUTE, {}).get("N")
        ttl = item.get(self.layout.ttl_attribute, {}).get("N")
        kind = self._rule(rule).kind
        fields = (
            kind.fields(value, None if count is None else Decimal(count), ())
            if kind.reading.scope == "item"
            else {}
        )
        return Aggregate(
            rule,
            key,
            value,
            sk,
            _s(item.get("granularity")),
            _s(item.get("bucket")),
            None if ttl is None else int(Decimal(ttl)),
            fields,
        )

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        return self._send(operation, TableName=self.table_name, **kwargs)

    def _send(self, operation: str, **request: Any) -> dict[str, Any]:
        """Send one complete request, counting it and turning errors into ``QueryError``."""
        self.requests += 1
        try:
            response: dict[str, Any] = getattr(self.client, operation)(**request)
        except (ClientError, BotoCoreError) as exc:
            raise QueryError(f"{operation} on {self.table_name!r} failed: {exc}") from exc
        consumed = response.get("ConsumedCapacity") or {}
        for part in consumed if isinstance(consumed, list) else [consumed]:  # BatchGetItem: a list
            self.read_units += Decimal(str(part.get("CapacityUnits", 0)))
        return response

    def get(self, rule: str, key: str | Sequence[Any] | Mapping[str, Any] = ()) -> Aggregate | None:
        """One aggregate (strongly consistent read), or ``None`` if it was never written.

        ``key`` as for :meth:`sort_key`: values, or the key as :meth:`list` displays it.

        Raises
        ------
        QueryError
            For an unknown rule, a windowed rule, a key that does not fit, or a failed request.
        """
        if self._rule(rule).window is not None:
            raise QueryError(
                f"rule {rule!r} keeps time buckets: read them with window() "
                "(aggregator query window) or list()"
            )
        if self._rule(rule).target is not None:
            return self._target(rule, key)
        stored = self.storage_name(rule)
        sk = self.sort_key(rule, key, storage_name=stored)
        kind = self._rule(rule).kind
        if kind.reading.scope == "values":
            values, _, _ = self._values(sk, kind)
            return self._summary(rule, sk, stored, kind, values) if values else None
        response = self._call(
            "get_item",
            Key={
                **self.layout.aggregate_key(sk),
            },
            ConsistentRead=True,
        )
        item = response.get("Item")
        return None if item is None else self._aggregate(item, rule, stored)

    def suggest_keys(
        self, rule: str, key: str | Sequence[Any] | Mapping[str, Any]
    ) -> KeySuggestions:
        """Keys of ``rule`` that exist and look like ``key``, which :meth:`get` did not find: a
        hint for a key given without its prefix (``p13`` where the keys are ``PLAYER#p13``),
        with one, or in another case.

        Reads at most :data:`SUGGESTION_SAMPLE` of the rule's aggregate items, the first in key
        order (one eventually consistent ``Query`` page with ``Limit``; on a table without a
        sort key, of the keys-only collection index), and keeps the keys that :func:`_resembles`
        ``key``. When none does and the key has one placeholder, it tries the value asked after
        each of the sampled values' prefixes up to their last separator (``PLAYER#`` + ``p13``),
        most frequent first, at most :data:`SUGGESTION_PROBES`: one eventually consistent
        ``GetItem`` each (a ``Query`` with ``Limit`` 1 for a kind that keeps one item per value).
        So the cost is bounded whatever the number of keys: at most 1 + 3 requests, the
        ``Query`` half an RCU per started 4 KB of the items it reads (Developer Guide, "Read
        consumption for Query": eventually consistent), each probe half an RCU per started 4 KB.
        A key beyond the sample is found only by its prefix.

        For a windowed rule the sample's keys are read from its bucket items (``<key>#<granularity>
        #<bucket>``), and no prefix is probed (a probe would need a bucket).

        Returns
        -------
        KeySuggestions
            Nothing for a literal key or a rule with a ``target``.

        Raises
        ------
        QueryError
            As :meth:`get`.
        """
        definition = self._rule(rule)
        template = definition.key
        if definition.target is not None or template.is_literal:
            return KeySuggestions([])
        windowed = definition.window is not None
        single = len(template.placeholders) == 1
        values = self._key_values(rule, key)
        asked = str(values[0]) if single else self._rendered_key(rule, key)[1]
        stored = self.storage_name(rule)
        before = self.requests
        per_value = definition.kind.per_value
        displayed: list[str] = []
        # the parts after the key: a bucket's granularity and start, a kind's value
        after_key = (2 if windowed else 0) + (1 if per_value else 0)
        for sk in self._key_page(f"{stored}#", SUGGESTION_SAMPLE):
            head = sk.rsplit("#", after_key)[0] if after_key else sk
            text = unescape_key_part(head[len(stored) + 1 :])
            if text not in displayed:
                displayed.append(text)
        arguments: list[str] = []
        for text in displayed:
            try:
                arguments.append(template.split_display(text)[0] if single else text)
            except ValueError:  # a value holding a separator: shown as listed
                continue
        found = [a for a in arguments if _resembles(a, asked)]
        if not found and single and not windowed:
            for prefix in _prefixes(arguments)[:SUGGESTION_PROBES]:
                candidate = f"{prefix}{asked}"
                sk = self.sort_key(rule, candidate, storage_name=stored)
                if self._exists(sk, per_value):
                    found.append(candidate)
        return KeySuggestions(found[:SUGGESTIONS_SHOWN], self.requests - before, len(displayed))

    def _key_page(self, prefix: str, limit: int) -> builtins.list[str]:
        """The sort key texts of the first ``limit`` aggregates items whose sort key begins with
        ``prefix``: one eventually consistent ``Query`` page projecting the keys (of the
        collection index on a table without a sort key)."""
        lay = self.layout
        if lay.sort_key is not None:
            request: dict[str, Any] = {
                "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
                "ExpressionAttributeNames": {"#pk": lay.partition_key, "#sk": lay.sort_key},
                "ExpressionAttributeValues": {
                    ":pk": {"S": lay.aggregates_pk},
                    ":prefix": {"S": prefix},
                },
                "ProjectionExpression": "#sk",
            }
        else:
            request = {
                "IndexName": lay.collection_index,
                "KeyConditionExpression": "#c = :pk AND begins_with(#pk, :prefix)",
                "ExpressionAttributeNames": {
                    "#c": lay.collection_attribute,
                    "#pk": lay.partition_key,
                },
                "ExpressionAttributeValues": {
                    ":pk": {"S": lay.aggregates_pk},
                    ":prefix": {"S": f"{lay.aggregates_pk}#{prefix}"},
                },
            }
        response = self._call("query", Limit=limit, ReturnConsumedCapacity="TOTAL", **request)
        keys = (lay.sort_key_of(item) for item in response.get("Items", []))
        return [k for k in keys if k is not None]

    def _exists(self, sort_key: str, per_value: bool) -> bool:
        """Whether the aggregate ``sort_key`` has an item (a value item for a kind with one per
        value): one eventually consistent read."""
        if per_value:
            return bool(self._key_page(f"{sort_key}#", 1))
        response = self._call(
            "get_item",
            Key=self.layout.aggregate_key(sort_key),
            ProjectionExpression="#pk",
            ExpressionAttributeNames={"#pk": self.layout.partition_key},
            ReturnConsumedCapacity="TOTAL",
        )
        return "Item" in response

    def _target(self, rule: str, key: str | Sequence[Any] | Mapping[str, Any]) -> Aggregate | None:
        """A target rule's sum, where it is kept: the target attribute of the application item
        (one strongly consistent ``GetItem`` projecting the attribute); ``None`` when the item
        does not exist, a value of 0 when it has no such attribute yet. ``key`` may also be the
        key as :meth:`list` shows it (``POST#b#META`` for ``{PK}#META``): when no item has the
        text as its value, it is read as that (a second ``GetItem``).

        Raises
        ------
        QueryError
            When the attribute holds something other than a number (the handler then keeps the
            rule's deltas for the item in its ledger), or as :meth:`get`.
        """
        found = self._target_item(rule, key)
        template = self._rule(rule).key
        if found is None and isinstance(key, str) and len(template.placeholders) == 1:
            try:
                (value,) = template.split_display(key)
            except ValueError:
                return None
            if value != key:
                return self._target_item(rule, value)
        return found

    def _target_item(
        self, rule: str, key: str | Sequence[Any] | Mapping[str, Any]
    ) -> Aggregate | None:
        definition = self._rule(rule)
        target = definition.target
        assert target is not None
        values = self._key_values(rule, key)
        encoded, display = definition.key.render_values(values)
        try:
            item_key = target.render(dict(zip(definition.key.placeholders, values, strict=True)))
        except EvaluationError as exc:
            raise QueryError(f"rule {rule!r}: {exc}") from None
        response = self._call(
            "get_item",
            Key=self.layout.target_key(item_key),
            ConsistentRead=True,
            ProjectionExpression="#pk, #a",
            ExpressionAttributeNames={"#pk": self.layout.partition_key, "#a": target.attribute},
        )
        item = response.get("Item")
        if item is None:
            return None
        held = item.get(target.attribute, {"N": "0"})
        if "N" not in held:
            raise QueryError(
                f"rule {rule!r}: {target.attribute} of the target item {display} is not a number "
                f"({next(iter(held))}); the handler keeps its deltas in the rule's ledger until "
                "it is: fix the item, then run aggregator reconcile --repair"
            )
        value = Decimal(held["N"])
        return Aggregate(rule, display, value, f"{rule}#{encoded}", fields={"value": value})

    def list(self, rule: str) -> Iterator[Aggregate]:
        """Every aggregate of ``rule`` in sort-key order (paginated ``Query``, 1 MB pages).

        For a rule with a ``target``, its *ledger*: per target key, the sum of the deltas that
        found no item (:mod:`aggregator.dynamodb.targets`); its sums themselves are on the
        application's items (:meth:`get`).

        Raises
        ------
        QueryError
            For an unknown rule or a failed request.
        """
        kind = self._rule(rule).kind
        stored = self.storage_name(rule)
        if kind.reading.scope == "values":
            yield from self._list_values(rule, stored, kind)
            return
        for page in self._pages(begins_with=f"{stored}#"):
            for item in page:
                yield self._aggregate(item, rule, stored)

    # -- kinds with one item per value -----------------------------------------------------------

    def _value_count(self, item: Mapping[str, Any], kind: Kind) -> tuple[str, ValueCount]:
        """``(the aggregate's sort key, the value item)`` of one value item."""
        sk = self.layout.sort_key_of(item) or ""
        prefix, _, suffix = sk.rpartition("#")
        try:
            number = _plain(kind.number_of(number_from_sortable(suffix)))
        except ValueError:
            raise QueryError(f"{sk!r} is not a value item of a {kind.name} rule") from None
        count = Decimal(item.get(self.layout.value_attribute, {}).get("N", "0"))
        return prefix, ValueCount(number, count)

    def _values(
        self, sort_key: str, kind: Kind, *, every: bool = False
    ) -> tuple[builtins.list[ValueCount], int, int]:
        """The value items of one aggregate with a count other than zero, in the kind's reading
        order (with ``first_only`` and not ``every``, the first such one only): ``(values,
        items read, RCU)``.
        ``first_only`` reads pages of 25 items, so the value items whose count fell to zero and
        that TTL has not deleted yet cost a request per 25."""
        reading = kind.reading
        first_only = reading.first_only and not every
        out: list[ValueCount] = []
        items_read = units = 0
        for page in self._pages(
            begins_with=f"{sort_key}#",
            descending=reading.order == "descending",
            page_items=25 if first_only else None,
        ):
            items_read += len(page)
            units += self._page_units(page)
            for item in page:
                _, value = self._value_count(item, kind)
                if value.count == 0:
                    continue
                out.append(value)
                if first_only:
                    return out, items_read, units
        return out, items_read, units

    def _summary(
        self, rule: str, sort_key: str, stored: str, kind: Kind, values: Sequence[ValueCount]
    ) -> Aggregate:
        fields = kind.fields(None, None, values)
        main = fields.get(kind.headline)
        head, granularity, bucket = sort_key, None, None
        if self._rule(rule).window is not None:  # "<key>#<granularity>#<bucket start>"
            head, granularity, bucket = sort_key.rsplit("#", 2)
        return Aggregate(
            rule,
            unescape_key_part(head[len(stored) + 1 :]),
            Decimal(0) if main is None else main,
            sort_key,
            granularity,
            bucket,
            fields=fields,
        )

    def _list_values(self, rule: str, stored: str, kind: Kind) -> Iterator[Aggregate]:
        """One :class:`Aggregate` per key of a kind with one item per value: a key's value items
        are contiguous in sort-key order (they share its prefix), read in ascending order."""
        current: str | None = None
        values: list[ValueCount] = []
        descending = kind.reading.order == "descending"

        def summary() -> Aggregate | None:
            if current is None or not values:
                return None
            ordered = builtins.list(reversed(values)) if descending else values
            return self._summary(rule, current, stored, kind, ordered)

        for page in self._pages(begins_with=f"{stored}#"):
            for item in page:
                prefix, value = self._value_count(item, kind)
                if prefix != current:
                    done = summary()
                    if done is not None:
                        yield done
                    current, values = prefix, []
                if value.count != 0:
                    values.append(value)
        done = summary()
        if done is not None:
            yield done

    def percentiles(
        self,
        rule: str,
        key: str | Sequence[Any] | Mapping[str, Any],
        ps: Sequence[Decimal | int | float | str],
        *,
        start: int | None = None,
        end: int | None = None,
        last: int | None = None,
        now: float | None = None,
    ) -> Percentiles:
        """Percentiles of one key of a ``distribution`` rule (each within the rule's relative
        accuracy, relatively), or exact ones of a ``min``/``max`` rule (which reads every
        distinct value of the key).

        ``key`` as for :meth:`sort_key`; ``ps`` from 0 to 100 (``[50, 90, 99]``). One ``Query``
        of the key's bins (1 MB pages): a key's bins are bounded by the range of its values,
        not by how many values it has.

        A rule with a ``window`` ranks the values of a time range: ``start``/``end``/``last``/
        ``now`` as for :meth:`window` ("p90 of the last hour": ``last=3600``), whose buckets'
        bins are merged (a bin's counts added), one ``Query`` per run of buckets.

        Raises
        ------
        QueryError
            For an unknown rule, a rule of another kind, a percentile outside 0..100, a range
            given for a rule without a window (or none for one with a window; as :meth:`window`
            for a bad range), or a failed request.
        """
        definition = self._rule(rule)
        kind = definition.kind
        if not kind.per_value:
            raise QueryError(
                f"rule {rule!r} is of kind {kind.name!r}: percentiles need a rule of kind "
                "distribution (or min/max, exact)"
            )
        try:
            wanted = percentile_list(ps)
        except ValueError as exc:
            raise QueryError(f"rule {rule!r}: {exc}") from None
        ranged = start is not None or last is not None or end is not None or now is not None
        if definition.window is not None or ranged:
            if definition.window is None:
                raise QueryError(f"rule {rule!r} has no window: a time range needs time buckets")
            if start is None and last is None:
                raise QueryError(
                    f"rule {rule!r} counts per time bucket: give a range (last, or start and end)"
                )
            window = self.window(rule, key, start=start, end=end, last=last, now=now)
            found, total = kind.percentiles(window.values, wanted)
            return Percentiles(
                rule,
                window.key,
                dict(zip(wanted, found, strict=True)),
                total,
                kind.percentile_accuracy,
                window.requests,
                window.items_read,
                window.read_units,
                window.start,
                window.end,
                window.asked_start,
                window.asked_end,
            )
        stored = self.storage_name(rule)
        sk = self.sort_key(rule, key, storage_name=stored)
        before = self.requests
        values, items_read, units = self._values(sk, kind, every=True)
        found, total = kind.percentiles(values, wanted)
        return Percentiles(
            rule,
            unescape_key_part(sk[len(stored) + 1 :]),
            dict(zip(wanted, found, strict=True)),
            total,
            kind.percentile_accuracy,
            self.requests - before,
            items_read,
            units,
        )

    def _pages(
        self,
        *,
        begins_with: str | None = None,
        between: tuple[str, str] | None = None,
        descending: bool = False,
        page_items: int | None = None,
    ) -> Iterator[builtins.list[Any]]:
        """Pages of the aggregates collection whose sort key text begins with ``begins_with``
        or lies in ``between``: raw DynamoDB-JSON items, read as
        :func:`aggregator.dynamodb.collections.query_collection` states (strongly consistent
        with a sort key; through the collection index without one)."""
        try:
            yield from query_collection(
                self._send,
                self.table_name,
                self.layout,
                self.layout.aggregates_pk,
                begins_with=begins_with,
                between=between,
                descending=descending,
                page_items=page_items,
            )
        except UnprocessedKeysError as exc:  # keys left unprocessed again and again
            raise QueryError(f"reading {self.table_name!r}: {exc}") from None

    def top(
        self,
        rule: str,
        n: int = 10,
        *,
        granularity: str | None = None,
        at: float | None = None,
    ) -> builtins.list[Aggregate]:
        """The ``n`` largest aggregates of ``rule``, largest first (ties by key).

        Leaderboard rules read one page of the sparse ``leaderboard`` GSI in descending order
        (eventually consistent, as every GSI read): one ``Query`` of at most ``n + 2`` entries
        per index partition (``leaderboard_partitions``, merged), more only to read past ties
        at the ``n``-th value or past keys at zero. The index holds every key at or above its
        partition's floor (:mod:`aggregator.dynamodb.floors`) and the floor itself; when the
        read cannot prove the answer (fewer than ``n`` keys left above a floor), every
        aggregate of the rule is read and sorted instead (counted in :attr:`top_fallbacks`).
        Other rules, a leaderboard turned on after its aggregates were written until
        ``aggregator rebuild`` indexes them (:meth:`index_complete`), and a rule whose serving
        generation was built from another definition (:meth:`definition_changed`: during a
        rebuild, which may move the ranking between the index and top lists) read all their
        aggregates and sort them.

        A rule with ``leaderboard_store: list`` reads the top lists of its index partitions
        with one ``BatchGetItem`` instead (:mod:`aggregator.dynamodb.toplists`) and answers
        from them when they prove the answer (:func:`aggregator.core.toplist.exact_top`).

        Keys whose value is zero are left out, as ``aggregator query list`` leaves them (the
        index may keep an entry at zero for a key whose items were all removed).

        A rule with a ``window`` ranks the keys of one time bucket ("top customers this hour"):
        the bucket of ``granularity`` (a label of the rule's, e.g. ``"hour"``; may be left out
        when the rule has one granularity) that holds ``at`` (epoch seconds, default now). Its
        index entries are under a partition key value of their own
        (:func:`~aggregator.core.layout.leaderboard_partition`), so the read costs what it costs
        for a rule without a window. A bucket past its retention may be partly deleted by TTL
        already (DynamoDB Developer Guide, "Time to Live"): check ``expires`` of the result.

        Raises
        ------
        QueryError
            For an unknown rule, a rule with a ``target`` (its sums are on the application's
            items: rank them with a rule that reads the target attribute), a rule of a kind
            other than ``sum`` (its items hold no total to rank), ``n < 1``, a
            granularity the rule does not have (or none given for a rule with several),
            ``granularity``/``at`` for a rule without a window, or a failed request.
        """
        if n < 1:
            raise QueryError(f"n must be at least 1, got {n}")
        definition = self._rule(rule)
        if definition.target is not None:
            raise QueryError(
                f"rule {rule!r} keeps its sums on the application's items "
                f"({definition.target.attribute}); rank them with a leaderboard rule whose delta "
                f"reads {definition.target.attribute!r}"
            )
        if not definition.kind.ranks:
            raise QueryError(
                f"rule {rule!r} is of kind {definition.kind.name!r}: top ranks sums (kind sum); "
                "read a key's fields with get or window"
            )
        bucket = self.top_bucket(rule, granularity, at)
        if not definition.leaderboard or not self.index_complete(rule):
            # without the index, or with one that lacks the aggregates written before the flag
            # was turned on: every aggregate, sorted (exact; aggregator rebuild indexes them)
            return self._ranked(rule, bucket, n)
        lay = self.layout
        stored = self.storage_name(rule)
        suffix = "" if bucket is None else f"#{bucket[0]}#{bucket[1]}"
        base = f"{stored}{suffix}"  # the index partition key value (leaderboard_partition)
        partitions = definition.leaderboard_partitions
        names = [base] if partitions == 1 else [f"{base}#{i}" for i in range(partitions)]
        if self.definition_changed(rule):
            # the serving generation was built from another definition (a rebuild is under
            # way), which may keep its ranking in the other store (leaderboard_store is part of
            # the fingerprint): every aggregate, sorted
            return self._ranked(rule, bucket, n)
        if definition.top_listed:
            listed = self._top_from_lists(rule, stored, suffix, bucket, names, n)
            if listed is not None:
                return listed
            self.top_fallbacks += 1
            return self._ranked(rule, bucket, n)

        def aggregate(item: dict[str, Any]) -> IndexEntry[Aggregate]:
            value = Decimal(item[lay.value_attribute]["N"])
            if lay.partition_of(item) == lay.control_pk:  # the partition's floor
                return IndexEntry(value, floor=True)
            sk = lay.sort_key_of(item) or ""
            encoded = sk[len(stored) + 1 : len(sk) - len(suffix)]
            key = unescape_key_part(encoded)
            return IndexEntry(
                value,
                key,
                Aggregate(
                    rule,
                    key,
                    value,
                    sk,
                    None if bucket is None else bucket[0],
                    None if bucket is None else bucket[1],
                ),
            )

        def pages(name: str) -> Iterator[list[IndexEntry[Aggregate]]]:
            start: dict[str, Any] | None = None
            while True:
                page: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
                response = self._call(
                    "query",
                    IndexName=lay.leaderboard_index,
                    KeyConditionExpression="#lb = :rule",
                    ExpressionAttributeNames={"#lb": lay.leaderboard_attribute},
                    ExpressionAttributeValues={":rule": {"S": name}},
                    ScanIndexForward=False,
                    Limit=n + 2,  # the floor's entry, and one to see past the n-th value's ties
                    ReturnConsumedCapacity="TOTAL",
                    **page,
                )
                yield [aggregate(item) for item in response.get("Items", [])]
                start = response.get("LastEvaluatedKey")
                if not start:
                    return

        # each key is in one index partition: the top n of the union is exact when every
        # partition's read proves that what it left out is below the union's n-th value
        # (aggregator.core.ranking); otherwise, e.g. after many keys fell below a partition's
        # floor (aggregator.dynamodb.floors), every aggregate is read and sorted
        reads = [read_partition(pages(name), n) for name in names]
        if names != [base] and sum(len(r.entries) for r in reads) < n:
            # between the deployment of a definition that spreads the index
            # (leaderboard_partitions) and the rebuild's switch, readers still read the
            # generation built before, whose entries are under the unspread value
            reads.append(read_partition(pages(base), n))
        top = exact_top(reads, n)
        if top is None:
            self.top_fallbacks += 1
            return self._ranked(rule, bucket, n)
        return [payload for _, _, payload in top]

    def _top_from_lists(
        self,
        rule: str,
        stored: str,
        suffix: str,
        bucket: tuple[str, str] | None,
        names: builtins.list[str],
        n: int,
    ) -> builtins.list[Aggregate] | None:
        """The top ``n`` from the top lists of index partitions ``names`` (one eventually
        consistent ``BatchGetItem``; :mod:`aggregator.dynamodb.toplists`), or ``None`` when
        they do not prove it (:func:`aggregator.core.toplist.exact_top`) or stay unprocessed
        (:attr:`~aggregator.dynamodb.batch.WhenUnprocessed.RETURN`)."""
        lay = self.layout
        keys = [lay.item_key(lay.control_pk, top_sort_key(name)) for name in names]
        lists = {name: TopList() for name in names}
        read = batch_get(
            self._send,
            self.table_name,
            keys,
            consistent=False,
            when_unprocessed=WhenUnprocessed.RETURN,  # lists left unread: read every aggregate
            return_consumed_capacity=True,
        )
        if read.unprocessed:
            return None
        for item in read.items:
            partition = item.get("partition", {}).get("S")
            if partition in lists:
                lists[partition] = decode_top_list(item)[0]
        top = exact_top_listed(lists.values(), n, order=unescape_key_part)
        if top is None:
            return None
        return [
            Aggregate(
                rule,
                unescape_key_part(key),
                value,
                f"{stored}#{key}{suffix}",
                None if bucket is None else bucket[0],
                None if bucket is None else bucket[1],
            )
            for value, key in top
        ]

    def _ranked(
        self, rule: str, bucket: tuple[str, str] | None, n: int
    ) -> builtins.list[Aggregate]:
        """The top ``n`` of ``rule`` (of one time bucket) from all its aggregates, sorted."""
        aggregates: Iterator[Aggregate] = (a for a in self.list(rule) if a.value != 0)
        if bucket is not None:
            aggregates = (a for a in aggregates if (a.granularity, a.bucket) == bucket)
        return sorted(aggregates, key=lambda a: (-a.value, a.key))[:n]

    def top_bucket(
        self, rule: str, granularity: str | None, at: float | None
    ) -> tuple[str, str] | None:
        """``(granularity label, bucket start text)`` of the time bucket :meth:`top` ranks for
        these arguments, or ``None`` for a rule without a window.

        Raises
        ------
        QueryError
            As :meth:`top` does for its ``granularity`` and ``at``.
        """
        window = self._rule(rule).window
        if window is None:
            if granularity is not None or at is not None:
                raise QueryError(
                    f"rule {rule!r} has no window: a granularity and a time pick a time bucket "
                    "of a windowed rule"
                )
            return None
        labels = [g.label for g in window.granularities]
        if granularity is None:
            if len(labels) > 1:
                raise QueryError(
                    f"rule {rule!r} keeps buckets of {', '.join(labels)}: give the granularity "
                    "to rank"
                )
            granularity = labels[0]
        chosen = next((g for g in window.granularities if g.label == granularity), None)
        if chosen is None:
            try:
                parsed = Granularity.parse(granularity)
            except ValueError:
                parsed = None
            chosen = next((g for g in window.granularities if g == parsed), None)
        if chosen is None:
            raise QueryError(
                f"rule {rule!r} has no {granularity!r} buckets (it keeps {', '.join(labels)})"
            )
        instant = math.floor(time.time() if at is None else at)
        return chosen.label, bucket_text(chosen.start(instant))

        # -- histograms ----------------------------------------------------------------------------

    def histogram(
        self, rule: str, key: str | Sequence[Any] | Mapping[str, Any] | None = None
    ) -> builtins.list[HistogramBucket]:
        """Every aggregate of ``rule`` as ``(value, count)`` rows sorted by value (numerically
        when every key is a number), zero counts left out.

        Meant for derived rules keyed by their source's value (``key: "{value}"``): a row says
        how many source keys have that value ("how many players found exactly 3 paths"). For a
        rule with one item per value (``distribution``, ``min``, ``max``) give ``key``: the
        rows are that key's bins (each bin's reported value) or distinct values, with how many
        values each holds.

        Raises
        ------
        QueryError
            For an unknown rule, a missing or needless ``key``, or a failed request.
        """
        definition = self._rule(rule)
        if definition.kind.per_value and definition.window is not None:
            raise QueryError(
                f"rule {rule!r} keeps its values per time bucket: read a range with "
                "percentiles (query percentile --last) or window"
            )
        if definition.kind.per_value:
            if key is None:
                raise QueryError(
                    f"rule {rule!r} is of kind {definition.kind.name!r}: give one key (its "
                    "bins are per key)"
                )
            values, _, _ = self._values(self.sort_key(rule, key), definition.kind, every=True)
            return sorted(
                (HistogramBucket(v.number, v.count) for v in values), key=lambda r: r.value
            )
        if key is not None:
            raise QueryError(
                f"rule {rule!r}: a histogram of a {definition.kind.name} rule takes no key"
            )
        rows: list[HistogramBucket] = []
        for a in self.list(rule):
            if a.value == 0:
                continue
            try:
                value: Decimal | str = Decimal(a.key)
            except ArithmeticError:
                value = a.key
            if isinstance(value, Decimal) and (not value.is_finite() or "_" in a.key):
                value = a.key  # "NaN", "Infinity", "1_000": text, not numbers
            rows.append(HistogramBucket(value, a.value))
        if all(isinstance(r.value, Decimal) for r in rows):
            return sorted(rows, key=lambda r: r.value)
        return sorted(rows, key=lambda r: str(r.value))

    # -- time windows --------------------------------------------------------------------------

    def window(
        self,
        rule: str,
        key: str | Sequence[Any] | Mapping[str, Any] = (),
        *,
        start: int | None = None,
        end: int | None = None,
        last: int | None = None,
        now: float | None = None,
    ) -> WindowResult:
        """The sum of a windowed rule's buckets for one key over a time range.

        Give either ``start`` and ``end`` (epoch seconds, ``[start, end)``) or ``last`` (a
        duration in seconds, a multiple of the finest granularity) with an optional ``end``
        (default ``now`` rounded up to the second). The range answered covers the range asked:
        a start that is not on a boundary of the rule's finest granularity moves down to the
        boundary before it and an end up to the one after it, so the finest buckets holding
        either edge count in full. With minute buckets, ``last=24h`` at 10:30:27 covers
        ``[10:30 yesterday, 10:31 today)``; with hour buckets only, ``last=1h`` at 17:00:27
        covers ``[16:00, 18:00)``, the last hour and the current one. The range asked and the
        range answered are both in the result (``asked_start``/``asked_end``,
        ``start``/``end``).

        ``now`` (epoch seconds, default the current time) decides which buckets have expired:
        items whose TTL is at or before ``now`` are ignored, as DynamoDB may delete them at any
        moment (DynamoDB Developer Guide, "Time to Live": expired items can be read until they
        are deleted).

        Returns
        -------
        WindowResult
            With the covered range, the value, and the requests, items and read units spent.

        Raises
        ------
        QueryError
            For an unknown or unwindowed rule, a key that does not fit, a bad range (``last``
            not a whole number of finest buckets, ``end`` before ``start``, both or neither of
            ``start``/``last``), or a failed request.
        """
        spec = self._rule(rule).window
        if spec is None:
            raise QueryError(f"rule {rule!r} has no window; window queries need time buckets")
        clock = time.time() if now is None else now
        (lo, hi), asked = _window_range(spec.finest, start, end, last, clock)
        stored = self.storage_name(rule)
        prefix = self.sort_key(rule, key, storage_name=stored)
        template = self._rule(rule).key
        display = (
            template.template
            if template.is_literal
            else unescape_key_part(prefix[len(stored) + 1 :])
        )
        result = WindowResult(rule, display, lo, hi, asked_start=asked[0], asked_end=asked[1])
        result.parts = plan_range(spec.granularities, lo, hi)
        kind = self._rule(rule).kind
        total = count = Decimal(0)
        merged: dict[Decimal, Decimal] = {}
        for part in result.parts:
            for item in self._window_part(result, spec, part, prefix, kind, clock):
                if kind.per_value:
                    _, value = self._value_count(item, kind)
                    merged[value.number] = add(merged.get(value.number, Decimal(0)), value.count)
                    continue
                total = add(total, Decimal(item.get(self.layout.value_attribute, {}).get("N", 0)))
                count = add(count, Decimal(item.get(COUNT_ATTRIBUTE, {}).get("N", 0)))
        result.values = [ValueCount(n, c) for n, c in sorted(merged.items()) if c != 0]
        in_order = result.values[::-1] if kind.reading.order == "descending" else result.values
        result.fields = kind.fields(total, count, in_order)
        main = result.fields.get(kind.headline) if kind.per_value else total
        result.value = Decimal(0) if main is None else main
        return result

    def _window_part(
        self,
        result: WindowResult,
        spec: Window,
        part: RangePart,
        prefix: str,
        kind: Kind,
        clock: float,
    ) -> builtins.list[dict[str, Any]]:
        """The live items of one part of a window's range (one ``Query`` range of one
        granularity's buckets), its reads counted in ``result``; ``result.complete`` is cleared
        when its oldest bucket has expired."""
        first_bucket = spec.bucket(part.granularity, part.first_bucket)
        last_bucket = spec.bucket(part.granularity, part.last_bucket)
        # coarser buckets outlive the finer ones inside them: the first is the oldest
        if first_bucket.expired(clock):
            result.complete = False
        high = f"{prefix}#{last_bucket.suffix()}"
        if kind.per_value:  # the last bucket's value items, "<bucket>#<value>", too
            high += VALUE_ITEMS_END
        items, requests, units = self._range(f"{prefix}#{first_bucket.suffix()}", high)
        result.requests += requests
        result.read_units += units
        result.items_read += len(items)
        ttl = self.layout.ttl_attribute
        live = []
        for item in items:
            expires = item.get(ttl, {}).get("N")
            if expires is not None and int(Decimal(expires)) <= clock:
                continue  # past its retention: DynamoDB may delete it at any moment
            live.append(item)
        return live

    def _range(self, low: str, high: str) -> tuple[builtins.list[dict[str, Any]], int, int]:
        """Items with sort keys in ``[low, high]``: ``(items, requests, modelled RCU)``
        (:meth:`_page_units`)."""
        items: list[dict[str, Any]] = []
        before = self.requests
        units = 0
        for page in self._pages(between=(low, high)):
            units += self._page_units(page)
            items.extend(page)
        return items, self.requests - before, units

    def _page_units(self, page: Sequence[Mapping[str, Any]]) -> int:
        """Modelled RCU of one page of :meth:`_pages`. With a sort key a page costs 1 RCU per
        started 4 KB of its items' total size (strongly consistent ``Query``); without one, each
        item read by ``BatchGetItem`` costs 1 RCU per started 4 KB of its own size, plus half an
        RCU per started 4 KB of the index page's keys (eventually consistent; Developer Guide,
        "Read consumption")."""
        from aggregator.dynamodb.writer import typed_item_size

        if self.layout.has_sort_key:
            return max(1, math.ceil(sum(typed_item_size(i) for i in page) / 4096))
        keys = [self.layout.aggregate_key(self.layout.sort_key_of(i) or "") for i in page]
        key_bytes = sum(typed_item_size(k) for k in keys)
        units = max(1, math.ceil(math.ceil(key_bytes / 4096) / 2))
        return units + sum(math.ceil(typed_item_size(i) / 4096) for i in page)
