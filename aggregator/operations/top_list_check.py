"""Reconcile top lists with the aggregates they rank (``leaderboard_store: list``).

A top list (:mod:`aggregator.core.top_list_merge`) is exact once every record of its aggregates has
been merged. A record can be lost to it: a batch Lambda gave up on after its retries (sent to
the on-failure queue), or a merge that kept failing. The list then keeps an old value, or misses
a key above its floor, until that key changes again. :func:`check_top_lists` finds such lists
and, with ``repair``, writes them again from the aggregates.

Protocol
--------
A check reads each list (strongly consistent) and then every aggregate of its rule, and calls a
list *inconsistent* when a listed key's value is not its aggregate's, or an aggregate above the
floor is not listed. Inconsistent lists are checked again after ``settle_seconds`` (records not
yet merged make a list look wrong for a moment): a list is *drift* when it is inconsistent in
both checks and neither it (its version) nor its aggregates changed in between; any other is
*moving*. A repair writes the list computed from the aggregates the second check read, on
condition that the list's version is the one read before them. That is safe while the handler
runs: a record merged after that read changes the version (the repair fails and reports
*moving*), and one merged after the repair is newer than what the repair read, or older and
followed by the newer one, since one aggregate's records are merged in order.

:func:`settle_top_lists` does the repair without the wait, for a backfill that has just written
a rule's aggregates (the handler would merge their records into the lists a moment later; a
local ``aggregator run`` perhaps much later), so that ``top`` is exact from the moment the rule is
active or a rebuild switches readers to it.

Costs: per check, one ``GetItem`` per list and a read of every aggregate of the rules checked
(1 RCU per 4 KB, strongly consistent); one ``UpdateItem`` per repaired list.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from aggregator.core.clock import Clock
from aggregator.core.rules import Rule, RuleSet
from aggregator.core.top_list_merge import TopList, merge, placement
from aggregator.dynamodb.collections import client_call, query_collections
from aggregator.dynamodb.control import query_control
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.top_list_items import TOP_PREFIX, TopLists, decode

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["ListDrift", "check_top_lists", "settle_top_lists"]


@dataclass(frozen=True, slots=True)
class ListDrift:
    """A top list that disagrees with its aggregates: ``wrong`` keys (listed with another value,
    listed without a non-zero aggregate, or missing above the floor); ``status`` ``drift``,
    ``moving`` or ``repaired``."""

    rule: str
    partition: str
    wrong: int
    status: str


@dataclass(frozen=True, slots=True)
class _Seen:
    version: int
    listed: TopList
    aggregates: dict[str, Decimal]
    expires: int | None

    @property
    def wrong(self) -> int:
        floor = self.listed.floor
        keys = set(self.listed.entries) | {
            k for k, v in self.aggregates.items() if floor is None or v > floor
        }
        return sum(1 for k in keys if self.listed.entries.get(k) != self.aggregates.get(k))

    def expected(self, keep: int) -> TopList:
        return merge(TopList(), dict(self.aggregates), keep)


def _read(
    client: DynamoDBClient, table_name: str, rules: RuleSet, rule: Rule, now: float
) -> dict[str, _Seen]:
    """Every list of ``rule`` and its aggregates, by partition: the lists first (so that a
    repair's condition is on a version read before the aggregates), then the aggregates."""
    lay = rules.layout
    call = client_call(client)
    lists: dict[str, tuple[TopList, int]] = {}
    for page in query_control(call, table_name, lay, begins_with=f"{TOP_PREFIX}{rule.name}"):
        for item in page:
            partition = item.get("partition", {}).get("S", "")
            if partition == rule.name or partition.startswith(f"{rule.name}#"):
                lists[partition] = decode(item)
    aggregates: dict[str, dict[str, Decimal]] = defaultdict(dict)
    expiry: dict[str, int | None] = {}
    for page in query_collections(  # every value the rule's aggregates spread over
        call,
        table_name,
        lay,
        lay.aggregate_partitions_of(rule.spread),
        begins_with=f"{rule.name}#",
    ):
        for item in page:
            sort_key = lay.sort_key_of(item)
            ttl = item.get(lay.ttl_attribute, {}).get("N")
            if sort_key is None or (ttl is not None and Decimal(ttl) <= Decimal(str(now))):
                continue  # an expired time bucket: its list expires with it
            bucket = None
            if rule.window is not None:
                bucket = f"{item['granularity']['S']}#{item['bucket']['S']}"
            partition, key = placement(rule.name, sort_key, rule.leaderboard_partitions, bucket)
            value = Decimal(item.get(lay.value_attribute, {}).get("N", "0"))
            expiry[partition] = None if ttl is None else int(Decimal(ttl))
            if value:
                aggregates[partition][key] = value
    return {
        p: _Seen(
            lists.get(p, (TopList(), 0))[1],
            lists.get(p, (TopList(), 0))[0],
            aggregates.get(p, {}),
            expiry.get(p),
        )
        for p in set(lists) | set(aggregates)
    }


def check_top_lists(
    client: DynamoDBClient,
    table_name: str,
    rules: RuleSet,
    names: Iterable[str],
    *,
    repair: bool = False,
    settle_seconds: float = 90.0,
    clock: Clock = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, list[ListDrift]]:
    """Check the top lists of the rules ``names`` (storage names in ``rules``; rules without
    ``leaderboard_store: list`` are skipped) against their aggregates (module docstring).

    Returns
    -------
    tuple
        ``(lists checked, lists that disagree)``.

    Raises
    ------
    aggregator.dynamodb.errors.AwsError
        When a read fails, or a repair fails for another reason than its condition.
    """
    listed = [rules.get(n) for n in names if rules.get(n).top_listed]
    first = {
        (r.name, p): s
        for r in listed
        for p, s in _read(client, table_name, rules, r, clock()).items()
    }
    suspects = sorted(k for k, s in first.items() if s.wrong)
    if not suspects:
        return len(first), []
    sleep(settle_seconds)
    second: dict[tuple[str, str], _Seen] = {}
    for r in {rules.get(name) for name, _ in suspects}:
        second |= {(r.name, p): s for p, s in _read(client, table_name, rules, r, clock()).items()}
    writer = TopLists(client, table_name, rules.layout)
    drifts: list[ListDrift] = []
    for key in suspects:
        before, after = first[key], second.get(key)
        if after is None or not after.wrong:
            continue  # it caught up
        stable = before.version == after.version and before.aggregates == after.aggregates
        status = "drift" if stable else "moving"
        if stable and repair:
            status = "repaired" if _repair(writer, key[1], after) else "moving"
        drifts.append(ListDrift(key[0], key[1], after.wrong, status))
    return len(first), drifts


def _repair(writer: TopLists, partition: str, seen: _Seen) -> bool:
    """Write the list ``seen``'s aggregates give, on condition of the version read before them;
    ``False`` when the list changed since."""
    expected = seen.expected(writer.keep)
    try:
        writer.replace(partition, expected, seen.version, expires=seen.expires)
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        return False
    return True


def settle_top_lists(
    client: DynamoDBClient,
    table_name: str,
    rules: RuleSet,
    names: Iterable[str],
    *,
    attempts: int = 8,
    clock: Clock = time.time,
) -> tuple[int, int]:
    """Write each top list of the rules ``names`` that disagrees with its aggregates again from
    them (on condition of the version read before them, as a repair does), read again, and so
    on, at most ``attempts`` rounds (module docstring). Rules without ``leaderboard_store:
    list`` are skipped.

    Returns
    -------
    tuple
        ``(lists written, lists still disagreeing)``: a list that the handler keeps changing
        through every round is left to it (``top`` reads every aggregate while it cannot prove
        an answer).

    Raises
    ------
    aggregator.dynamodb.errors.AwsError
        When a read fails, or a write fails for another reason than its condition.
    """
    listed = [rules.get(n) for n in names if rules.get(n).top_listed]
    writer = TopLists(client, table_name, rules.layout)

    def disagreeing() -> list[tuple[str, _Seen]]:
        return [
            (partition, seen)
            for rule in listed
            for partition, seen in _read(client, table_name, rules, rule, clock()).items()
            if seen.wrong
        ]

    written = 0
    for _ in range(max(1, attempts)):
        wrong = disagreeing()
        if not wrong:
            return written, 0
        for partition, seen in wrong:
            written += _repair(writer, partition, seen)
    return written, len(disagreeing())
