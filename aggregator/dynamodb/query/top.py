"""``top``: the largest aggregates of a rule, from the leaderboard index
(:mod:`aggregator.core.ranking`), from top lists (:mod:`aggregator.dynamodb.top_list_items`),
or, when neither can prove the answer, from every aggregate sorted (the fallback)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from aggregator.core.exceptions import QueryError
from aggregator.core.lifecycle import rule_fingerprint
from aggregator.core.ranking import IndexEntry, exact_top, read_partition
from aggregator.core.rules import unescape_key_part
from aggregator.core.top_list_merge import TopList
from aggregator.core.top_list_merge import exact_top as exact_top_listed
from aggregator.core.windows import Granularity, bucket_text
from aggregator.dynamodb.batch import WhenUnprocessed, batch_get
from aggregator.dynamodb.query.aggregates import list_aggregates
from aggregator.dynamodb.query.results import Aggregate
from aggregator.dynamodb.top_list_items import decode as decode_top_list
from aggregator.dynamodb.top_list_items import top_sort_key

if TYPE_CHECKING:
    from aggregator.dynamodb.query.reader import StoreReader

__all__ = [
    "definition_changed",
    "index_complete",
    "index_partitions",
    "ranked",
    "read_top_lists",
    "top",
    "top_bucket",
    "top_from_lists",
]


def definition_changed(reader: StoreReader, rule: str) -> bool:
    """Whether ``rule``'s serving generation was built from another definition
    (:meth:`~aggregator.dynamodb.query.AggregateStore.definition_changed`)."""
    state = reader.generations.state(rule)
    return state is not None and state.fingerprint != rule_fingerprint(reader.rule(rule))


def index_complete(reader: StoreReader, rule: str) -> bool:
    """Whether ``rule``'s leaderboard index holds every aggregate of its serving generation
    (:meth:`~aggregator.dynamodb.query.AggregateStore.index_complete`)."""
    state = reader.generations.state(rule)
    recorded = None if state is None else state.leaderboard
    return recorded is None or recorded == reader.rule(rule).leaderboard


def top(
    reader: StoreReader,
    rule: str,
    n: int = 10,
    *,
    granularity: str | None = None,
    at: float | None = None,
) -> list[Aggregate]:
    """The ``n`` largest aggregates of ``rule``, largest first
    (:meth:`~aggregator.dynamodb.query.AggregateStore.top`)."""
    if n < 1:
        raise QueryError(f"n must be at least 1, got {n}")
    definition = reader.rule(rule)
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
    bucket = top_bucket(reader, rule, granularity, at)
    if not definition.leaderboard or not index_complete(reader, rule):
        # without the index, or with one that lacks the aggregates written before the flag
        # was turned on: every aggregate, sorted (exact; aggregator rebuild indexes them)
        return ranked(reader, rule, bucket, n)
    lay = reader.layout
    stored = reader.storage_name(rule)
    suffix = "" if bucket is None else f"#{bucket[0]}#{bucket[1]}"
    base = f"{stored}{suffix}"  # the index partition key value (leaderboard_partition)
    partitions = definition.leaderboard_partitions
    names = index_partitions(base, partitions)
    if definition_changed(reader, rule):
        # the serving generation was built from another definition (a rebuild is under
        # way), which may keep its ranking in the other store (leaderboard_store is part of
        # the fingerprint): every aggregate, sorted
        return ranked(reader, rule, bucket, n)
    if definition.top_listed:
        listed = top_from_lists(reader, rule, stored, suffix, bucket, names, n)
        if listed is not None:
            return listed
        reader.top_fallbacks += 1
        return ranked(reader, rule, bucket, n)

    def aggregate(item: dict[str, Any]) -> IndexEntry[Aggregate]:
        value = Decimal(item[lay.value_attribute]["N"])
        if lay.is_control_partition(lay.partition_of(item)):  # the partition's floor
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
            response = reader.call(
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
        reader.top_fallbacks += 1
        return ranked(reader, rule, bucket, n)
    return [payload for _, _, payload in top]


def index_partitions(base: str, partitions: int) -> list[str]:
    """The index partition key values of a ranking whose base value is ``base`` (a rule's
    storage name, with a time bucket's suffix), spread over ``partitions``
    (:func:`~aggregator.core.layout.leaderboard_partition`)."""
    return [base] if partitions == 1 else [f"{base}#{i}" for i in range(partitions)]


def read_top_lists(reader: StoreReader, names: list[str]) -> tuple[dict[str, TopList], int] | None:
    """The top lists of the index partitions ``names`` (an empty list for one never written)
    and how many items the read returned: one eventually consistent ``BatchGetItem`` per 100
    lists (:mod:`aggregator.dynamodb.top_list_items`); ``None`` when some stay unprocessed
    (:attr:`~aggregator.dynamodb.batch.WhenUnprocessed.RETURN`: the caller reads every
    aggregate instead)."""
    keys = [reader.layout.control_key(top_sort_key(name)) for name in names]
    lists = {name: TopList() for name in names}
    read = batch_get(
        reader.send,
        reader.table_name,
        keys,
        consistent=False,
        when_unprocessed=WhenUnprocessed.RETURN,
        return_consumed_capacity=True,
    )
    if read.unprocessed:
        return None
    for item in read.items:
        partition = item.get("partition", {}).get("S")
        if partition in lists:
            lists[partition] = decode_top_list(item)[0]
    return lists, len(read.items)


def top_from_lists(
    reader: StoreReader,
    rule: str,
    stored: str,
    suffix: str,
    bucket: tuple[str, str] | None,
    names: list[str],
    n: int,
) -> list[Aggregate] | None:
    """The top ``n`` from the top lists of index partitions ``names`` (one eventually
    consistent ``BatchGetItem``; :mod:`aggregator.dynamodb.top_list_items`), or ``None`` when
    they do not prove it (:func:`aggregator.core.top_list_merge.exact_top`) or stay unprocessed
    (:attr:`~aggregator.dynamodb.batch.WhenUnprocessed.RETURN`)."""
    read = read_top_lists(reader, names)
    if read is None:
        return None
    lists, _ = read
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


def ranked(
    reader: StoreReader, rule: str, bucket: tuple[str, str] | None, n: int
) -> list[Aggregate]:
    """The top ``n`` of ``rule`` (of one time bucket) from all its aggregates, sorted."""
    found: Iterator[Aggregate] = (a for a in list_aggregates(reader, rule) if a.value != 0)
    if bucket is not None:
        found = (a for a in found if (a.granularity, a.bucket) == bucket)
    return sorted(found, key=lambda a: (-a.value, a.key))[:n]


def top_bucket(
    reader: StoreReader, rule: str, granularity: str | None, at: float | None
) -> tuple[str, str] | None:
    """The time bucket ``top`` ranks
    (:meth:`~aggregator.dynamodb.query.AggregateStore.top_bucket`)."""
    window = reader.rule(rule).window
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
                f"rule {rule!r} keeps buckets of {', '.join(labels)}: give the granularity to rank"
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
