"""What every read of :class:`~aggregator.dynamodb.query.AggregateStore` shares: the client and
its request counting, the rules, the serving generations, where each rule's aggregates are (the
partition key values its serving generation spreads them over), and the pages of the
``AGGREGATES`` collections with their modelled read units.

A read of one key (``get``, a window's buckets, a key's value items) reads the one partition key
value of the key's *home* (:meth:`StoreReader.home`): one request, spread or not. A listing of a
rule reads every value of its serving generation (:meth:`StoreReader.partitions`), one ``Query``
(or more, per 1 MB page) each, merged in sort key order
(:func:`~aggregator.dynamodb.collections.query_collections`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aggregator.core.exceptions import QueryError, RuleError
from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import generation_of
from aggregator.core.rules import Rule, RuleSet
from aggregator.dynamodb.batch import UnprocessedKeysError
from aggregator.dynamodb.client import RequestClient
from aggregator.dynamodb.collections import query_collections
from aggregator.dynamodb.errors import AwsError
from aggregator.dynamodb.query.generations import ServingGenerations

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["StoreReader"]


class StoreReader:
    """The shared state of one store's reads (internal: the parts of
    :mod:`aggregator.dynamodb.query` take it).

    Attributes
    ----------
    requester
        The request client every read of the store goes through (manifest reads aside).
    counts
        What it sent (:class:`~aggregator.dynamodb.client.RequestCounts`): ``requests``, and
        ``read_units`` the endpoint reported for the requests that asked for it.
    top_fallbacks
        ``top`` calls the leaderboard index or top lists could not answer exactly.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        rules: RuleSet,
        layout: TableLayout,
        generations: ServingGenerations,
    ) -> None:
        self.client = client
        self.requester = RequestClient(client)
        self.counts = self.requester.counts
        self.table_name = table_name
        self.rules = rules
        self.layout = layout
        self.generations = generations
        self.top_fallbacks = 0

    def rule(self, name: str) -> Rule:
        """The rule ``name``; :class:`QueryError` when the rule set has none."""
        try:
            return self.rules.get(name)
        except RuleError as exc:
            raise QueryError(str(exc)) from None

    def storage_name(self, rule: str) -> str:
        """The name ``rule``'s serving generation is stored under."""
        return self.generations.storage_name(rule)

    def spread(self, rule: str) -> int:
        """How many partition key values ``rule``'s serving generation spreads its aggregates
        over: as the manifest records the generation (1 for an entry recorded before spread
        partitions), or the definition's when the manifest does not list it (fixed
        generations, a table without a manifest). From the manifest read that named the
        serving generation (:meth:`storage_name`), not a new one."""
        state = self.generations.last_state(rule)
        return self.rule(rule).spread if state is None else state.partitions

    def partitions(self, rule: str) -> tuple[str, ...]:
        """Every partition key value ``rule``'s serving generation keeps aggregates under (what
        a listing reads)."""
        return self.layout.aggregate_partitions_of(self.spread(rule))

    def home(self, sort_key: str) -> str:
        """The partition key value of the aggregate (or time bucket, or value item) of the
        serving generation whose sort key text is ``sort_key``
        (:meth:`~aggregator.core.layout.TableLayout.aggregate_partition`; the rule is named by
        the storage name the sort key starts with)."""
        rule = generation_of(sort_key.partition("#")[0])[0]
        return self.layout.aggregate_partition(
            sort_key, self.spread(rule), self.rule(rule).key_fields
        )

    def aggregate_key(self, sort_key: str) -> dict[str, dict[str, str]]:
        """The primary key (DynamoDB JSON) of the serving generation's item ``sort_key``,
        under its :meth:`home`."""
        return self.layout.aggregate_key(sort_key, self.home(sort_key))

    def call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """:meth:`send` to this store's table."""
        return self.send(operation, TableName=self.table_name, **kwargs)

    def send(self, operation: str, **request: Any) -> dict[str, Any]:
        """Send one complete request through :attr:`requester` (counted there), turning its
        errors into ``QueryError`` whose ``__cause__`` is botocore's error (with the AWS code),
        as the query layer raised before the request client."""
        try:
            return self.requester.send(operation, **request)
        except AwsError as exc:
            message = f"{operation} on {self.table_name!r} failed: {exc}"
            raise QueryError(message) from exc.__cause__ or exc

    def pages(
        self,
        partitions: Sequence[str],
        *,
        begins_with: str | None = None,
        between: tuple[str, str] | None = None,
        descending: bool = False,
        page_items: int | None = None,
    ) -> Iterator[list[Any]]:
        """Pages of the aggregates under ``partitions`` (one key's :meth:`home`, or a rule's
        :meth:`partitions`) whose sort key text begins with ``begins_with`` or lies in
        ``between``, in sort key order: raw DynamoDB-JSON items, read as
        :func:`aggregator.dynamodb.collections.query_collections` states (strongly consistent
        with a sort key; through the collection index without one)."""
        try:
            yield from query_collections(
                self.send,
                self.table_name,
                self.layout,
                partitions,
                begins_with=begins_with,
                between=between,
                descending=descending,
                page_items=page_items,
            )
        except UnprocessedKeysError as exc:  # keys left unprocessed again and again
            raise QueryError(f"reading {self.table_name!r}: {exc}") from None

    def range(self, low: str, high: str) -> tuple[list[dict[str, Any]], int, int]:
        """Items of one key with sort keys in ``[low, high]`` (its time buckets: both bounds
        under the key's :meth:`home`): ``(items, requests, modelled RCU)``
        (:meth:`page_units`)."""
        items: list[dict[str, Any]] = []
        before = self.counts.requests
        units = 0
        for page in self.pages((self.home(low),), between=(low, high)):
            units += self.page_units(page)
            items.extend(page)
        return items, self.counts.requests - before, units

    def page_units(self, page: Sequence[Mapping[str, Any]]) -> int:
        """Modelled RCU of one page of :meth:`pages`. With a sort key a page costs 1 RCU per
        started 4 KB of its items' total size (strongly consistent ``Query``); without one, each
        item read by ``BatchGetItem`` costs 1 RCU per started 4 KB of its own size, plus half an
        RCU per started 4 KB of the index page's keys (eventually consistent; Developer Guide,
        "Read consumption")."""
        from aggregator.dynamodb.sizes import typed_item_size

        if self.layout.has_sort_key:
            return max(1, math.ceil(sum(typed_item_size(i) for i in page) / 4096))
        # no sort key: spread is 1, every key under its own "<aggregates_pk>#<sort key>"
        keys = [self.layout.aggregate_key(self.layout.sort_key_of(i) or "") for i in page]
        key_bytes = sum(typed_item_size(k) for k in keys)
        units = max(1, math.ceil(math.ceil(key_bytes / 4096) / 2))
        return units + sum(math.ceil(typed_item_size(i) / 4096) for i in page)
