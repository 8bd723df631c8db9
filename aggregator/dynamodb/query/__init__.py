"""Read API over the ``AGGREGATES`` partition: one aggregate, all of a rule, top-N, histograms
and counts over time ranges and sliding windows.

Every call reports the requests it made (``AggregateStore.requests``) so costs can be shown.

:class:`AggregateStore` is a thin façade over the parts of this package, one module each:
:mod:`~aggregator.dynamodb.query.generations` (the serving generations, cached from the
manifest), :mod:`~aggregator.dynamodb.query.reader` (the client, request counting, pages of the
collection), :mod:`~aggregator.dynamodb.query.keys` (keys and did-you-mean suggestions),
:mod:`~aggregator.dynamodb.query.aggregates` (``get``, ``list``, target rules),
:mod:`~aggregator.dynamodb.query.values` (value items: min, max, distributions, percentiles),
:mod:`~aggregator.dynamodb.query.ranges` (the time range a window or percentiles read asks),
:mod:`~aggregator.dynamodb.query.series` (``window``, ``histogram``),
:mod:`~aggregator.dynamodb.query.top` (``top``: index, top lists, fallback) and
:mod:`~aggregator.dynamodb.query.results` (the result dataclasses).

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

Spread partitions
-----------------
A rule whose aggregates spread over ``N`` partition key values (its ``partitions``, or the
table's ``aggregate_partitions``: :mod:`aggregator.core.layout`, "Spread partitions") keeps
every item of one key (its time buckets, its value items) under the one value its *home*
hashes to, so every read of one key costs what it costs unspread: ``get`` one ``GetItem``, a
window one ``Query`` per run of buckets, percentiles one ``Query``. A read of the whole rule
(``list``, ``histogram`` of a rule, ``top`` without the leaderboard index, key suggestions)
sends at least one ``Query`` per value, ``N`` in all, merged in sort-key order. The ``N`` is the
serving generation's, as the manifest records it (a rebuild that changes it serves the old
generation, with its own, until the switch).

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
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING

from aggregator.core.exceptions import QueryError
from aggregator.core.layout import TableLayout
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.query.aggregates import get, list_aggregates
from aggregator.dynamodb.query.generations import ServingGenerations
from aggregator.dynamodb.query.keys import (
    SUGGESTION_PROBES,
    SUGGESTION_SAMPLE,
    SUGGESTIONS_SHOWN,
    KeyArgument,
    sort_key,
    suggest_keys,
)
from aggregator.dynamodb.query.ranges import AskedRange
from aggregator.dynamodb.query.reader import StoreReader
from aggregator.dynamodb.query.results import (
    Aggregate,
    HistogramBucket,
    KeySuggestions,
    Percentiles,
    RollingTop,
    SeriesBucket,
    SeriesResult,
    WindowResult,
)
from aggregator.dynamodb.query.rolling import rolling_top
from aggregator.dynamodb.query.series import VALUE_ITEMS_END, histogram, window
from aggregator.dynamodb.query.timeseries import series
from aggregator.dynamodb.query.top import definition_changed, index_complete, top, top_bucket
from aggregator.dynamodb.query.values import percentiles, percentiles_asked

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = [
    "SUGGESTIONS_SHOWN",
    "SUGGESTION_PROBES",
    "SUGGESTION_SAMPLE",
    "VALUE_ITEMS_END",
    "Aggregate",
    "AggregateStore",
    "HistogramBucket",
    "KeySuggestions",
    "Percentiles",
    "RollingTop",
    "SeriesBucket",
    "SeriesResult",
    "WindowResult",
]


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
        served = ServingGenerations(
            client,
            table_name,
            self.layout,
            generations=generations,
            cache_seconds=generation_cache_seconds,
        )
        self.reader = StoreReader(client, table_name, rules, self.layout, served)
        """The parts' shared state (internal): client, rules, serving generations, counters."""

    @property
    def requests(self) -> int:
        """Requests sent so far (reads of the manifest aside: :attr:`manifest_reads`)."""
        return self.reader.counts.requests

    @requests.setter
    def requests(self, value: int) -> None:
        self.reader.counts.requests = value

    @property
    def read_units(self) -> Decimal:
        """Read capacity the endpoint reported for the requests that asked for it (``top``)."""
        return self.reader.counts.read_units

    @read_units.setter
    def read_units(self, value: Decimal) -> None:
        self.reader.counts.read_units = value

    @property
    def top_fallbacks(self) -> int:
        """``top`` calls the leaderboard index could not answer exactly (every aggregate of
        the rule was read and sorted instead; :mod:`aggregator.core.ranking`)."""
        return self.reader.top_fallbacks

    @top_fallbacks.setter
    def top_fallbacks(self, value: int) -> None:
        self.reader.top_fallbacks = value

    @property
    def manifest_reads(self) -> int:
        """Reads of the rule manifest so far (one ``GetItem`` each), not in :attr:`requests`."""
        return self.reader.generations.reads

    @property
    def generation_cache_seconds(self) -> float:
        """How long the serving generations read from the manifest are used."""
        return self.reader.generations.cache_seconds

    @generation_cache_seconds.setter
    def generation_cache_seconds(self, value: float) -> None:
        self.reader.generations.cache_seconds = value

    def storage_name(self, rule: str) -> str:
        """The name ``rule``'s serving generation is stored under: the rule's name, or
        ``"<rule>@<generation>"`` after a rebuild (:func:`~aggregator.core.lifecycle.
        generation_name`).

        Raises
        ------
        QueryError
            When the manifest cannot be read.
        """
        return self.reader.storage_name(rule)

    def definition_changed(self, rule: str) -> bool:
        """Whether ``rule``'s serving generation was built from another definition than the
        rule's as given (:func:`~aggregator.core.lifecycle.rule_fingerprint`): its stored
        aggregates then mean the old definition until ``aggregator rebuild``. ``False`` when the
        manifest does not list it (or with ``generations`` given)."""
        return definition_changed(self.reader, rule)

    def serving_status(self, rule: str) -> str | None:
        """The manifest status of ``rule``'s serving generation (``pending``, ``active``...),
        from the same cached read as :meth:`storage_name`; ``None`` when the manifest does not
        list it (or with ``generations`` given, which skips the manifest)."""
        state = self.reader.generations.state(rule)  # (re)reads the manifest first when due
        return None if state is None else state.status

    def deployed(self, rule: str) -> bool | None:
        """Whether a handler (or ``aggregator run``) has registered ``rule`` in the manifest:
        ``None`` when the manifest lists no rule at all (nothing deployed with a manifest, or
        ``generations`` given), so that nothing can be said; from the same cached read as
        :meth:`serving_status`."""
        if not self.reader.generations.any_listed(rule):
            return None
        return self.reader.generations.state(rule) is not None

    def index_complete(self, rule: str) -> bool:
        """Whether ``rule``'s leaderboard index holds every aggregate of its serving
        generation: not when the flag was turned on after aggregates were written, until
        ``aggregator rebuild`` indexes them (as the manifest records; always ``True`` with
        ``generations`` given, which skips the manifest)."""
        return index_complete(self.reader, rule)

    def sort_key(
        self,
        rule: str,
        key: KeyArgument = (),
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
        return sort_key(self.reader, rule, key, storage_name=storage_name)

    def get(self, rule: str, key: KeyArgument = ()) -> Aggregate | None:
        """One aggregate (strongly consistent read), or ``None`` if it was never written.

        ``key`` as for :meth:`sort_key`: values, or the key as :meth:`list` displays it.

        Raises
        ------
        QueryError
            For an unknown rule, a windowed rule, a key that does not fit, or a failed request.
        """
        return get(self.reader, rule, key)

    def suggest_keys(self, rule: str, key: KeyArgument) -> KeySuggestions:
        """Keys of ``rule`` that exist and look like ``key``, which :meth:`get` did not find: a
        hint for a key given without its prefix (``p13`` where the keys are ``PLAYER#p13``),
        with one, or in another case.

        Reads at most :data:`~aggregator.dynamodb.query.keys.SUGGESTION_SAMPLE` of the rule's
        aggregate items, the first in key order (one eventually consistent ``Query`` page with
        ``Limit`` per partition key value the rule spreads over; on a table without a sort key,
        of the keys-only collection index), and keeps
        the keys that :func:`~aggregator.dynamodb.query.keys.resembles` ``key``. When none does
        and the key has one placeholder, it tries the value asked after each of the sampled
        values' prefixes up to their last separator (``PLAYER#`` + ``p13``), most frequent
        first, at most :data:`~aggregator.dynamodb.query.keys.SUGGESTION_PROBES`: one
        eventually consistent ``GetItem`` each (a ``Query`` with ``Limit`` 1 for a kind that
        keeps one item per value).
        So the cost is bounded whatever the number of keys: at most N + 3 requests (N the
        rule's partitions, 1 unless spread), the
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
        return suggest_keys(self.reader, rule, key)

    def list(self, rule: str) -> Iterator[Aggregate]:
        """Every aggregate of ``rule`` in sort-key order (paginated ``Query``, 1 MB pages; a
        rule spread over N partition key values reads each, merged in sort-key order).

        For a rule with a ``target``, its *ledger*: per target key, the sum of the deltas that
        found no item (:mod:`aggregator.dynamodb.targets`); its sums themselves are on the
        application's items (:meth:`get`).

        Raises
        ------
        QueryError
            For an unknown rule or a failed request.
        """
        return list_aggregates(self.reader, rule)

    def percentiles(
        self,
        rule: str,
        key: KeyArgument,
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
        asked = AskedRange(start, end, last, now)
        wanted, windowed = percentiles_asked(self.reader, rule, ps, asked)
        ranged = window(self.reader, rule, key, asked) if windowed else None
        return percentiles(self.reader, rule, key, wanted, ranged)

    def top(
        self,
        rule: str,
        n: int = 10,
        *,
        granularity: str | None = None,
        at: float | None = None,
        start: int | None = None,
        end: int | None = None,
        last: int | None = None,
        now: float | None = None,
    ) -> builtins.list[Aggregate]:
        """The ``n`` largest aggregates of ``rule``, largest first (ties by key).

        With a range (``last``, or ``start``/``end``; epoch seconds, with ``now`` as for
        :meth:`window`), a windowed rule's keys are ranked by their sums over the range's
        buckets of ``granularity``: :meth:`rolling_top`'s ``aggregates`` (use that method for
        the path taken and its cost).

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
        with one ``BatchGetItem`` instead (:mod:`aggregator.dynamodb.top_list_items`) and answers
        from them when they prove the answer (:func:`aggregator.core.top_list_merge.exact_top`).

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
            ``granularity``/``at`` for a rule without a window, ``at`` with a range, or a
            failed request; with a range, as :meth:`rolling_top`.
        """
        if any(v is not None for v in (start, end, last, now)):
            if at is not None:
                raise QueryError("give at (one bucket) or a range (last, start/end), not both")
            return self.rolling_top(
                rule, n, granularity=granularity, start=start, end=end, last=last, now=now
            ).aggregates
        return top(self.reader, rule, n, granularity=granularity, at=at)

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
        return top_bucket(self.reader, rule, granularity, at)

    def histogram(
        self, rule: str, key: KeyArgument | None = None
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
        return histogram(self.reader, rule, key)

    def window(
        self,
        rule: str,
        key: KeyArgument = (),
        *,
        start: int | None = None,
        end: int | None = None,
        last: int | None = None,
        now: float | None = None,
    ) -> WindowResult:
        """The sum of a windowed rule's buckets for one key over a time range.

        Give either ``start`` and ``end`` (epoch seconds, ``[start, end)``) or ``last`` (a
        duration in seconds) with an optional ``end``
        (default ``now`` rounded up to the second). The range answered covers the range asked:
        a start that is not on a boundary of the rule's finest granularity moves down to the
        boundary before it and an end up to the one after it, so the finest buckets holding
        either edge count in full. With minute buckets, ``last=86400`` (24 h) at 10:30:27 covers
        ``[10:30 yesterday, 10:31 today)``; with hour buckets only, ``last=3600`` at 17:00:27
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
            not a positive number of seconds, ``end`` before ``start``, both or neither of
            ``start``/``last``), or a failed request.
        """
        return window(self.reader, rule, key, AskedRange(start, end, last, now))

    def rolling_top(
        self,
        rule: str,
        n: int = 10,
        *,
        granularity: str | None = None,
        start: int | None = None,
        end: int | None = None,
        last: int | None = None,
        now: float | None = None,
    ) -> RollingTop:
        """The ``n`` keys of a windowed leaderboard rule with the largest sums over a range of
        buckets ("top players in the last 60 minutes"), largest first, ties by key: exactly a
        plain sort of the keys' sums over the range, zero sums left out.

        The range is given as for :meth:`window` (``start``/``end``, or ``last`` with an
        optional ``end``; epoch seconds) and widened out to the boundaries of ``granularity``
        (a label the rule keeps; default the finest whose buckets over the range number at
        most :data:`~aggregator.dynamodb.query.rolling.MAX_ROLLING_BUCKETS`), whose buckets
        are summed. Buckets past
        the rule's retention at ``now`` are left out (``complete`` is then ``False``).

        With ``leaderboard_store: list``, the buckets' top lists answer, merged with a
        threshold-algorithm bound, reading back the few aggregates they leave undecided;
        otherwise (or when the lists cannot prove the answer) every aggregate of the rule is
        read and summed (:mod:`aggregator.dynamodb.query.rolling`; the result names the path
        and its cost).

        Raises
        ------
        QueryError
            For an unknown or unwindowed rule, a kind other than ``sum``, a granularity the
            rule does not keep, a bad range, more than
            :data:`~aggregator.dynamodb.query.rolling.MAX_ROLLING_BUCKETS` buckets, ``n < 1``,
            or a failed request.
        """
        return rolling_top(self.reader, rule, n, granularity, AskedRange(start, end, last, now))

    def series(
        self,
        rule: str,
        key: KeyArgument = (),
        *,
        granularity: str | None = None,
        start: int | None = None,
        end: int | None = None,
        last: int | None = None,
        now: float | None = None,
    ) -> SeriesResult:
        """One key of a windowed rule bucket by bucket: every bucket of ``granularity`` (a
        label the rule keeps, ``"hour"``; default the finest whose buckets over the range
        number at most
        :data:`~aggregator.dynamodb.query.timeseries.MAX_SERIES_BUCKETS`) over a time range,
        written or not.

        The range is given as for :meth:`window` (``start``/``end``, or ``last`` with an
        optional ``end``; epoch seconds) and widened out to ``granularity``'s boundaries (a
        ``last`` of 30 minutes over hour buckets covers one or two hours). ``now`` decides
        which buckets have expired, as there.
        One ``Query`` reads the range (:mod:`aggregator.dynamodb.query.timeseries`).

        Returns
        -------
        SeriesResult
            The buckets in time order (value 0 for one never written), the total over the
            range (what :meth:`window` answers for the same range) and the reads spent.

        Raises
        ------
        QueryError
            For an unknown or unwindowed rule, a granularity the rule does not keep, a bad
            range (as :meth:`window`), more than
            :data:`~aggregator.dynamodb.query.timeseries.MAX_SERIES_BUCKETS` buckets, or a
            failed request.
        """
        return series(self.reader, rule, key, granularity, AskedRange(start, end, last, now))
