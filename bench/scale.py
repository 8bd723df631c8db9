"""Exactly-once at many shards (``make bench-scale``, or ``python -m bench.scale``).

Three workloads, each replayed through the shard twin (:mod:`aggregator.dev.shards`: ``P``
partitions, each a lineage of shards rolling over every 4 hours, Lambda's polling and batching
on a simulated clock) on DynamoDB Local, with the capacity model
(:mod:`aggregator.dev.capacity`) watching every aggregate write and every control item's:

**Flights, 48 simulated hours.** Two days of the 2013 New York City departures, replayed like
``aggregator demo`` (insert as scheduled, modify to departed or cancelled, delete 2 % as
corrections), each flight its own item collection (partition key ``FLIGHT#<day>#<flight>``) so
flights spread over the partitions by partition key hash; each write arrives at a simulated time
of its own (scheduled six hours before its hour, departed or cancelled within its hour, deleted
the hour after). Rules: ``definitions/flights.yaml`` plus ``departures_total`` (a ``TOTAL``:
every shard writes it), with ``write_shards: 64`` on every rule whose keys all shards write (all
but the per-plane count and the histogram over it) and ``leaderboard_partitions: 4`` on
``flights_by_carrier``. For P in 1, 16, 64 and both modes (at-least-once, exactly-once): modelled
WCU per 1,000 source records and the ratio of the modes, the largest aggregate item and its
growth per simulated hour, top-N requests, and every aggregate against the CSV ground truth. For
comparison (P > 1, unless ``--no-comparison``), the same without write sharding.

**Hot keys, 20,000 source records a second.** Likes arriving at 20,000 a second for a few
simulated seconds (half on one post, the rest over 100), counted per post (a leaderboard over 8
index partitions) and in total, both with ``write_shards: 64``; exactly-once mode. The capacity
model's peaks per item, table partition and index partition, against DynamoDB's 1,000 WCU per
second.

**``write_shards: auto``, at P=64** (unless ``--no-auto``): the flights with it on every rule that
is not derived, against the flights without write sharding, and the hot keys with it on both
rules; the line before the last is ``scale-auto: P=64 flights WCU <r> of unsharded; hot keys <s>
s over a limit; exact <yes|no>``.

**Wide keys, 20,000 source records a second** (unless ``--no-wide``): 50,000 likes at 20,000 a
second, each on a post of its own (of 100,000) and by a user of its own (of 50,000), so 100,000
keys each written once, counted per post and per user (a leaderboard kept in top lists), both
with ``write_shards: auto``, at P=64, exactly-once, on a table laid out with
``aggregate_partitions`` and ``control_partitions`` (64 and 8: :data:`WIDE_AGGREGATE_PARTITIONS`,
:data:`WIDE_CONTROL_PARTITIONS`), then on today's layout (1 and 1) for comparison. The capacity
model watches the control items' writes too (in every run); the line after ``scale-auto:`` is
``scale-wide: P=64 <k> keys at <r> records/s: partition peak <w> WCU/s; <s> s over a limit;
exact <yes|no>`` (the spread run's keys, rate, hottest partition key value over aggregates and
control items, and seconds over a limit). ``--only-wide`` runs this workload alone.

The last line is ``scale: P=64 exactly-once/at-least-once WCU <ratio>; largest aggregate item
<bytes> B`` (``scale-wide:`` with ``--only-wide``). Exit 1 when an aggregate differs from the
ground truth, 2 on an error.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from aggregator.core.exceptions import AggregatorError
from aggregator.core.layout import MAX_AGGREGATE_PARTITIONS, MAX_CONTROL_PARTITIONS, TableLayout
from aggregator.core.rules import Rule, RuleSet, load_rules, rule

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]
DEFINITIONS = ROOT / "definitions" / "flights.yaml"
PARTITIONS = (1, 16, 64)
MODES = ("at-least-once", "exactly-once")
ROLLOVER_SECONDS = 4 * 3600
FIRST_DAY, LAST_DAY = date(2013, 1, 1), date(2013, 1, 2)
HOT_RATE = 20_000
"""Source records per simulated second of the hot-key workload."""
HOT_SECONDS = 2
BATCH_SIZE = 100
"""Lambda's default ``BatchSize``."""
WINDOW_SECONDS = 60
TOP_N = 10
PLOTS = ROOT / "bench" / "plots"
TOTAL_RULE = rule("departures_total", match={"status": "departed"}, key="TOTAL")


def _epoch(iso: str) -> float:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def flight_arrival(record: dict[str, Any]) -> float:
    """When a write of the flights replay arrives: six hours before the flight's hour when it is
    scheduled, within its hour when it departs or is cancelled, in the hour after when it is
    deleted (spread over the hour by a hash of the key, so an hour's flights do not all arrive in
    the same second)."""
    dynamodb = record["dynamodb"]
    image = dynamodb.get("NewImage") or dynamodb.get("OldImage") or {}
    hour = _epoch(image["time_hour"]["S"])
    spread = zlib.crc32(json.dumps(dynamodb["Keys"], sort_keys=True).encode()) % 3600
    if record["eventName"] == "REMOVE":
        return hour + 3600 + spread
    if image.get("status", {}).get("S") == "scheduled":
        return hour - 6 * 3600 + spread // 6
    return hour + spread


@dataclass(slots=True)
class Figures:
    """One run's figures (sizes in bytes, times in seconds)."""

    workload: str
    partitions: int
    mode: str
    source_records: int = 0
    stream_records: int = 0
    batches: int = 0
    modelled_wcu: int = 0
    index_wcu: int = 0
    largest_item_bytes: int = 0
    largest_item: str = ""
    largest_by_hour: list[int] = field(default_factory=list)
    item_peak: int = 0
    item_peak_name: str = ""
    partition_peak: int = 0
    partition_peak_name: str = ""
    index_peak: int = 0
    index_peak_name: str = ""
    control_peak: int = 0
    """The control items' hottest partition key value (the capacity model's watched writes)."""
    control_peak_name: str = ""
    hottest_peak: int = 0
    """The hottest partition key value over aggregates and control items alike."""
    hottest_peak_name: str = ""
    control_wcu: int = 0
    throttled_seconds: int = 0
    routing_reads: int = 0
    """``write_shards: auto``: routing items read (1 RCU each), created (one per shard), rules
    started hot in them, and switches after a shard's start."""
    routing_items: int = 0
    routing_hot_starts: int = 0
    routing_switches: int = 0
    top_requests: int = 0
    get_requests: int = 0
    """Requests of one ``get`` (the wide-keys workload)."""
    keys: int = 0
    """Aggregate keys of the ground truth (the wide-keys workload)."""
    aggregate_partitions: int = 1
    control_partitions: int = 1
    shards: int = 0
    simulated_hours: float = 0.0
    exact: bool = False
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def wcu_per_1k(self) -> float:
        return self.modelled_wcu * 1000 / self.source_records if self.source_records else 0.0


SHARDED = {
    # rules whose keys every shard writes (few keys, many records each): partials per key
    "flights_by_carrier",
    "delay_minutes_by_carrier",
    "departures_by_origin",
    "cancellations_by_carrier",
    "flights_by_route",
    "departures_by_origin_hour",
    "departures_total",
}
WRITE_SHARDS = 64
UNSHARDED = "flights, no write sharding"
AUTO = "flights, write_shards: auto"
HOT_AUTO = "hot keys, write_shards: auto"
HOT_AUTO_SECONDS = HOT_SECONDS
"""The hot-key workload with ``write_shards: auto``: the same burst, which every shard's first
batch shows hot (:mod:`aggregator.dynamodb.routing`)."""
LEADERBOARD_PARTITIONS = 4
WIDE = "wide keys"
WIDE_BASE = "wide keys, one partition"
WIDE_RATE = HOT_RATE
"""Source records (likes) per simulated second of the wide-keys workload."""
WIDE_SECONDS = 2.5
"""Simulated seconds of the wide-keys workload: 50,000 likes, each on a post of its own and by
a user of its own (:func:`wide_likes`), so 100,000 keys, each written once: the coldest keys."""
WIDE_POSTS = 100_000
WIDE_USERS = 50_000
WIDE_PARTITIONS = 64
"""P of the wide-keys workload (stream shards open at a time)."""
WIDE_AGGREGATE_PARTITIONS = 64
"""``aggregate_partitions`` of the spread run: at 20,000 likes a second each writes two
aggregates (a post's and a user's), about 40,000 WCU a second over every value; 40 values of
1,000 WCU/s would be full, 64 leave a third free for the CRC-32's unevenness over the keys and
for bursts."""
WIDE_CONTROL_PARTITIONS = 8
"""``control_partitions`` of the spread run: the control items' writes (the shards' fences and
routing items, the top lists of ``likes_per_user``) were estimated at a few thousand WCU a
second at P=64 (measured: about a hundred); eight values keep each under half a partition's
limit."""
WIDE_LEADERBOARD_PARTITIONS = 8


def _rules_flights(sharded: bool = True, auto: bool = False) -> RuleSet:
    """``definitions/flights.yaml`` plus the ``TOTAL`` rule, the rules of :data:`SHARDED` with
    ``write_shards`` and ``flights_by_carrier`` with ``leaderboard_partitions`` (the rule file's
    YAML, with these two fields added, is what a user would write); ``sharded=False``: as they
    are (the comparison); ``auto=True``: as they are but ``write_shards: auto`` on every rule
    that is not derived."""
    loaded = load_rules(DEFINITIONS)
    rules = []
    # sums and counts only (the other kinds' costs: python -m bench.kinds)
    for r in (*(r for r in loaded.rules if r.kind.name == "sum"), TOTAL_RULE):
        update: dict[str, Any] = {}
        if auto:
            if not r.is_derived:  # a derived rule's input is the aggregates' few shards
                update["write_shards"] = "auto"
        elif not sharded:
            pass
        elif r.name in SHARDED:
            update["write_shards"] = WRITE_SHARDS
        if sharded and not auto and r.name == "flights_by_carrier":
            update["leaderboard_partitions"] = LEADERBOARD_PARTITIONS
        rules.append(Rule.model_validate({**dict(r), **update}) if update else r)
    return RuleSet.of(*rules, layout=loaded.layout)


def _rules_hot(write_shards: int | str = WRITE_SHARDS) -> RuleSet:
    return RuleSet.of(
        rule(
            "likes_total",
            match={"post": {"exists": True}},
            key="TOTAL",
            write_shards=write_shards,  # type: ignore[arg-type]
        ),
        rule(
            "likes_per_post",
            match={"post": {"exists": True}},
            key="{post}",
            leaderboard=True,
            leaderboard_partitions=8,
            write_shards=write_shards,  # type: ignore[arg-type]
        ),
    )


def _rules_wide(aggregate_partitions: int = 1, control_partitions: int = 1) -> RuleSet:
    """Likes counted per post and per user (a leaderboard kept in top lists over
    :data:`WIDE_LEADERBOARD_PARTITIONS` index partitions), both ``write_shards: auto``, on a
    table whose aggregates spread over ``aggregate_partitions`` partition key values and whose
    control items spread over ``control_partitions`` (1 and 1: today's layout)."""
    layout = TableLayout(
        aggregate_partitions=aggregate_partitions, control_partitions=control_partitions
    )
    return RuleSet.of(
        rule(
            "likes_per_post",
            match={"post": {"exists": True}},
            key="{post}",
            write_shards="auto",
        ),
        rule(
            "likes_per_user",
            match={"user": {"exists": True}},
            key="{user}",
            leaderboard=True,
            leaderboard_store="list",
            leaderboard_partitions=WIDE_LEADERBOARD_PARTITIONS,
            write_shards="auto",
        ),
        layout=layout,
    )


def wide_likes(count: int) -> list[tuple[str, str]]:
    """The wide-keys workload's likes, ``(post, user)`` in arrival order: like ``i`` is on post
    ``i * 7,919 mod 100,000`` (7,919 is prime to 100,000, so the first 100,000 likes are on
    distinct posts) by user ``i mod 50,000``."""
    return [(f"post-{(i * 7919) % WIDE_POSTS}", f"user-{i % WIDE_USERS}") for i in range(count)]


def wide_truth(likes: Sequence[tuple[str, str]]) -> dict[str, dict[str, Decimal]]:
    """Likes per post and per user, counted from the likes themselves."""
    posts: Counter[str] = Counter(post for post, _ in likes)
    users: Counter[str] = Counter(user for _, user in likes)
    return {
        "likes_per_post": {k: Decimal(v) for k, v in posts.items()},
        "likes_per_user": {k: Decimal(v) for k, v in users.items()},
    }


def per_flight_keys(steps: Any) -> Any:
    """The replay's writes with one item collection per flight (partition key
    ``FLIGHT#<day>#<flight>``, sort key ``FLIGHT``), so the flights spread over the partitions
    (the demo keys a day's flights under one partition key)."""
    from aggregator.dev.flights import ReplayStep

    for step in steps:
        items = tuple(
            {**item, "pk": f"{item['pk']}#{item['sk']}", "sk": "FLIGHT"} for item in step.items
        )
        yield ReplayStep(step.day, step.phase, step.action, items)


def _run_twin(
    local: Any,
    rules: RuleSet,
    table: str,
    partitions: int,
    mode: str,
    start: float,
    arrival: Any,
    figures: Figures,
) -> Any:
    from aggregator.dev.capacity import CapacityModel
    from aggregator.dev.shards import EventSourceTwin, ShardPlan, ShardTwin, SimulatedClock
    from aggregator.runtime.processor import create_processor

    ddb = local.client("dynamodb")
    clock = SimulatedClock(start)
    capacity = CapacityModel()
    capacity.watch_control(ddb, clock, rules.layout, table=table)
    twin = ShardTwin(
        local.client("dynamodbstreams"),
        _stream_arn(ddb, table),
        ShardPlan(partitions, ROLLOVER_SECONDS, start),
        clock,
        arrival=arrival,
        layout=rules.layout,
    )
    processors = []

    def processor_for(p: int) -> Any:
        processor = create_processor(
            rules, ddb, table, mode=mode, clock=clock, max_workers=4, observer=capacity.observe
        )
        processors.append(processor)
        return processor

    source = EventSourceTwin(
        twin,
        processor_for,
        batch_size=BATCH_SIZE,
        tumbling_window_seconds=WINDOW_SECONDS,
        threads=8,
    )
    try:
        stats = source.run()
    finally:
        source.close()
    report = capacity.report()
    figures.stream_records = stats.records
    figures.source_records = (
        stats.records - stats.self_writes - stats.derived_inputs - stats.partial_inputs
    )
    figures.batches = stats.batches
    figures.modelled_wcu = stats.write.modelled_wcu
    figures.index_wcu = stats.write.modelled_index_wcu
    figures.largest_item_bytes = report.largest_item_bytes
    figures.largest_item = report.largest_item_name
    figures.largest_by_hour = report.largest_item_by_hour
    for name, peak in (
        ("item", report.item),
        ("partition", report.partition),
        ("index", report.index_partition),
        ("control", report.control_partition),
        ("hottest", report.hottest_partition),
    ):
        if peak is not None:
            setattr(figures, f"{name}_peak", peak.wcu_per_second)
            setattr(figures, f"{name}_peak_name", peak.name)
    figures.throttled_seconds = report.throttled_seconds
    figures.control_wcu = report.control_wcu
    figures.shards = twin.shards_opened()
    figures.simulated_hours = (clock.now - start) / 3600
    routings = [p.routing for p in processors if p.routing is not None]
    figures.routing_reads = sum(r.reads for r in routings)
    figures.routing_items = sum(r.started for r in routings)
    figures.routing_hot_starts = sum(r.started_hot for r in routings)
    figures.routing_switches = sum(r.switches for r in routings)
    return stats


def _stream_arn(ddb: Any, table: str) -> str:
    return str(ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"])


def run_flights(partitions: int, mode: str, *, sharded: bool = True, auto: bool = False) -> Figures:
    """The flights workload on a fresh DynamoDB Local (module docstring); ``sharded=False``
    without write sharding and leaderboard partitions; ``auto=True`` with ``write_shards: auto``
    on every rule that is not derived."""
    from aggregator.dev.demo import write_steps
    from aggregator.dev.flights import read_flights, replay_steps
    from aggregator.dev.local import DynamoDBLocal
    from aggregator.dynamodb.table import create_table
    from tests.integration.test_flights import ground_truth

    began = time.monotonic()
    workload = AUTO if auto else "flights" if sharded else UNSHARDED
    figures = Figures(workload, partitions, mode)
    rules = _rules_flights(sharded, auto)
    flights = read_flights(start=FIRST_DAY, end=LAST_DAY)
    with DynamoDBLocal() as local:
        ddb = local.client("dynamodb")
        table = "scale-flights"
        create_table(ddb, table, layout=rules.layout)
        write_steps(ddb, table, per_flight_keys(replay_steps(flights, rules.layout)))
        start = min(_epoch(f.time_hour) for f in flights) - 6 * 3600
        _run_twin(local, rules, table, partitions, mode, start, flight_arrival, figures)
        truth = ground_truth(FIRST_DAY, LAST_DAY, sample=1)  # every row is replayed
        truth["departures_total"] = {"TOTAL": sum(truth["flights_by_carrier"].values(), Decimal(0))}
        _check(figures, ddb, table, rules, truth, "flights_by_carrier")
    figures.seconds = time.monotonic() - began
    return figures


def _check(
    figures: Figures,
    ddb: Any,
    table: str,
    rules: RuleSet,
    truth: dict[str, dict[str, Decimal]],
    leaderboard: str,
) -> None:
    """Every rule's aggregates (a plain ``Scan``) against ``truth``, and the requests of one
    top-N of ``leaderboard``."""
    from aggregator.dynamodb.query import AggregateStore
    from tests.integration.test_flights import scanned_aggregates

    scanned = scanned_aggregates(ddb, table, rules.layout)
    figures.differences = [
        f"{r.name} differs" for r in rules if truth.get(r.name, {}) != scanned.get(r.name, {})
    ]
    figures.exact = not figures.differences
    store = AggregateStore(ddb, table, rules)
    store.top(leaderboard, TOP_N)
    figures.top_requests = store.requests


def run_hot(
    partitions: int, mode: str = "exactly-once", *, auto: bool = False, seconds: int = HOT_SECONDS
) -> Figures:
    """The hot-key workload on a fresh DynamoDB Local (module docstring); ``auto=True`` with
    ``write_shards: auto`` for ``seconds`` simulated seconds."""
    from aggregator.dev.demo import write_steps
    from aggregator.dev.flights import ReplayStep
    from aggregator.dev.local import DynamoDBLocal
    from aggregator.dynamodb.table import create_table

    began = time.monotonic()
    figures = Figures(HOT_AUTO if auto else "hot keys", partitions, mode)
    rules = _rules_hot("auto" if auto else WRITE_SHARDS)
    count = HOT_RATE * seconds
    posts = [f"post-{0 if i % 2 == 0 else 1 + (i * 7919) % 100}" for i in range(count)]
    start = 1_700_000_000.0
    with DynamoDBLocal() as local:
        ddb = local.client("dynamodb")
        table = "scale-hot"
        create_table(ddb, table, layout=rules.layout)
        key = rules.layout.partition_key
        items = tuple(
            {key: f"LIKE#{i}", rules.layout.sort_key or "": "LIKE", "post": post}
            for i, post in enumerate(posts)
        )
        write_steps(ddb, table, [ReplayStep(FIRST_DAY, "schedule", "put", items)])

        def arrival(record: dict[str, Any]) -> float:
            number = int(record["dynamodb"]["Keys"][key]["S"].split("#")[1])
            return start + number / HOT_RATE

        _run_twin(local, rules, table, partitions, mode, start, arrival, figures)
        truth: dict[str, dict[str, Decimal]] = {"likes_total": {"TOTAL": Decimal(count)}}
        per_post: dict[str, Decimal] = {}
        for post in posts:
            per_post[post] = per_post.get(post, Decimal(0)) + 1
        truth["likes_per_post"] = per_post
        _check(figures, ddb, table, rules, truth, "likes_per_post")
    figures.seconds = time.monotonic() - began
    return figures


def scanned_spread_aggregates(
    ddb: Any, table: str, layout: TableLayout
) -> dict[str, dict[str, Decimal]]:
    """Non-zero aggregates per rule read by a plain ``Scan`` of the whole table, independent of
    :class:`~aggregator.dynamodb.query.AggregateStore` and of the layout's own key functions:
    items whose partition key value is ``aggregates_pk`` or ``aggregates_pk`` followed by ``#``
    and digits (a spread value; a partial's collection, ``aggregates_pk#<rule>#<key>``, is not).
    Tables with a sort key."""
    spread = re.compile(re.escape(layout.aggregates_pk) + r"(#[0-9]+)?")
    out: dict[str, dict[str, Decimal]] = {}
    pages = ddb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    for page in pages:
        for item in page["Items"]:
            if not spread.fullmatch(item[layout.partition_key]["S"]):
                continue
            value = Decimal(item[layout.value_attribute]["N"])
            if value != 0:
                out.setdefault(item["rule"]["S"], {})[item["key"]["S"]] = value
    return out


def run_wide(
    aggregate_partitions: int = WIDE_AGGREGATE_PARTITIONS,
    control_partitions: int = WIDE_CONTROL_PARTITIONS,
    *,
    seconds: float = WIDE_SECONDS,
) -> Figures:
    """The wide-keys workload on a fresh DynamoDB Local: :data:`WIDE_RATE` likes a second for
    ``seconds`` simulated seconds (:func:`wide_likes`) at P = :data:`WIDE_PARTITIONS`,
    exactly-once, with the rules of :func:`_rules_wide` on a table laid out with
    ``aggregate_partitions`` and ``control_partitions``; every aggregate against
    :func:`wide_truth`, and the requests of one ``get`` and of one top-N."""
    from aggregator.dev.demo import write_steps
    from aggregator.dev.flights import ReplayStep
    from aggregator.dev.local import DynamoDBLocal
    from aggregator.dynamodb.query import AggregateStore
    from aggregator.dynamodb.table import create_table

    began = time.monotonic()
    spread = aggregate_partitions > 1 or control_partitions > 1
    mode = "exactly-once"
    figures = Figures(
        WIDE if spread else WIDE_BASE,
        WIDE_PARTITIONS,
        mode,
        aggregate_partitions=aggregate_partitions,
        control_partitions=control_partitions,
    )
    rules = _rules_wide(aggregate_partitions, control_partitions)
    likes = wide_likes(round(WIDE_RATE * seconds))
    start = 1_700_000_000.0
    with DynamoDBLocal() as local:
        ddb = local.client("dynamodb")
        table = "scale-wide"
        create_table(ddb, table, layout=rules.layout)
        key = rules.layout.partition_key
        items = tuple(
            {key: f"LIKE#{i}", rules.layout.sort_key or "": "LIKE", "post": post, "user": user}
            for i, (post, user) in enumerate(likes)
        )
        write_steps(ddb, table, [ReplayStep(FIRST_DAY, "schedule", "put", items)])

        def arrival(record: dict[str, Any]) -> float:
            number = int(record["dynamodb"]["Keys"][key]["S"].split("#")[1])
            return start + number / WIDE_RATE

        _run_twin(local, rules, table, WIDE_PARTITIONS, mode, start, arrival, figures)
        truth = wide_truth(likes)
        figures.keys = sum(len(keys) for keys in truth.values())
        scanned = scanned_spread_aggregates(ddb, table, rules.layout)
        figures.differences = [
            f"{name} differs" for name in truth if truth[name] != scanned.get(name, {})
        ]
        figures.differences += [f"{name} unexpected" for name in scanned if name not in truth]
        figures.exact = not figures.differences
        store = AggregateStore(ddb, table, rules)
        store.get("likes_per_post", likes[0][0])  # the manifest's read aside
        before = store.requests
        store.get("likes_per_post", likes[-1][0])
        figures.get_requests = store.requests - before
        before = store.requests
        store.top("likes_per_user", TOP_N)
        figures.top_requests = store.requests - before
    figures.seconds = time.monotonic() - began
    return figures


def _ratio(runs: list[Figures], partitions: int, workload: str = "flights") -> float:
    """Exactly-once WCU per 1,000 source records over at-least-once's, for one P."""
    by_mode = {r.mode: r for r in runs if r.workload == workload and r.partitions == partitions}
    if not {"at-least-once", "exactly-once"} <= set(by_mode):
        return float("nan")
    base = by_mode["at-least-once"].wcu_per_1k
    return by_mode["exactly-once"].wcu_per_1k / base if base else float("nan")


def render(console: Console, runs: list[Figures]) -> None:
    """A table per workload that ran."""
    table = Table(title="Flights, 48 simulated hours, 4-hour rollovers", title_justify="left")
    for header in (
        "P",
        "mode",
        "shards",
        "source\nrecords",
        "WCU\nper 1k",
        "EO/ALO",
        "largest\nitem B",
        "top-N\nrequests",
        "exact",
        "run s",
    ):
        table.add_column(header, justify="left" if header == "mode" else "right")
    for r in sorted(
        (r for r in runs if r.workload in ("flights", UNSHARDED, AUTO)),
        key=lambda r: (
            r.partitions,
            (UNSHARDED, AUTO).index(r.workload) + 1 if r.workload != "flights" else 0,
        ),
    ):
        label = {"flights": "", UNSHARDED: ", no write sharding", AUTO: ", write_shards: auto"}
        ratio = _ratio(runs, r.partitions, r.workload) if r.mode == "exactly-once" else math.nan
        ratio_text = "" if math.isnan(ratio) else f"{ratio:.3f}"
        table.add_row(
            str(r.partitions),
            f"{r.mode}{label[r.workload]}",
            f"{r.shards:,}",
            f"{r.source_records:,}",
            f"{r.wcu_per_1k:,.1f}",
            ratio_text,
            f"{r.largest_item_bytes:,}",
            str(r.top_requests),
            "[green]✓[/]" if r.exact else "[bold red]FAIL[/]",
            f"{r.seconds:.0f}",
        )
    if table.row_count:
        console.print(table)
    hot = Table(
        title=f"Hot keys, {HOT_RATE:,} source records/s for {HOT_SECONDS} simulated s "
        "(peaks in WCU per second; limit 1,000)",
        title_justify="left",
    )
    for header in (
        "P",
        "mode",
        "WCU\nper 1k",
        "item\npeak",
        "table partition\npeak",
        "index partition\npeak",
        "over\nlimit",
        "largest\nitem B",
        "exact",
        "run s",
    ):
        hot.add_column(header, justify="left" if header == "mode" else "right")
    for r in runs:
        if r.workload == HOT_AUTO:
            r_mode = f"{r.mode}, auto, {r.source_records // HOT_RATE} s"
        elif r.workload == "hot keys":
            r_mode = r.mode
        else:
            continue
        hot.add_row(
            str(r.partitions),
            r_mode,
            f"{r.wcu_per_1k:,.1f}",
            f"{r.item_peak:,}",
            f"{r.partition_peak:,}",
            f"{r.index_peak:,}",
            f"{r.throttled_seconds:,}",
            f"{r.largest_item_bytes:,}",
            "[green]✓[/]" if r.exact else "[bold red]FAIL[/]",
            f"{r.seconds:.0f}",
        )
    if hot.row_count:
        console.print(hot)
    wide_runs = [r for r in runs if r.workload in (WIDE, WIDE_BASE)]
    if not wide_runs:
        return
    first = wide_runs[0]
    wide = Table(
        title=f"Wide keys, {first.keys:,} keys, {first.source_records:,} source records at "
        f"{WIDE_RATE:,} a second, P={WIDE_PARTITIONS}, exactly-once, write_shards: auto "
        "(peaks in WCU per second; limit 1,000)",
        title_justify="left",
    )
    for header in (
        "aggregate\npartitions",
        "control\npartitions",
        "WCU\nper 1k",
        "item\npeak",
        "aggregates'\npartition peak",
        "control\npartition peak",
        "hottest\npartition",
        "over\nlimit",
        "get\nrequests",
        "top-N\nrequests",
        "exact",
        "run s",
    ):
        wide.add_column(header, justify="right")
    for r in wide_runs:
        wide.add_row(
            str(r.aggregate_partitions),
            str(r.control_partitions),
            f"{r.wcu_per_1k:,.1f}",
            f"{r.item_peak:,}",
            f"{r.partition_peak:,}",
            f"{r.control_peak:,}",
            f"{r.hottest_peak:,} ({r.hottest_peak_name})",
            f"{r.throttled_seconds:,}",
            str(r.get_requests),
            str(r.top_requests),
            "[green]✓[/]" if r.exact else "[bold red]FAIL[/]",
            f"{r.seconds:.0f}",
        )
    console.print(wide)


def plot(runs: list[Figures], directory: Path) -> list[Path]:
    """WCU per 1,000 records against P per mode, and the largest item per simulated hour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    flights = [r for r in runs if r.workload == "flights"]
    unsharded = [r for r in runs if r.workload == UNSHARDED]
    out = []
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    lines = [(f"{mode}, write sharding", [r for r in flights if r.mode == mode]) for mode in MODES]
    lines += [
        (f"{mode}, no write sharding", [r for r in unsharded if r.mode == mode]) for mode in MODES
    ]
    for label, group in lines:
        points = sorted((r.partitions, r.wcu_per_1k) for r in group)
        style = "--" if "no write" in label else "-"
        ax.plot([p for p, _ in points], [w for _, w in points], style, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("partitions (stream shards open at a time)")
    ax.set_ylabel("modelled WCU per 1,000 source records")
    ax.set_title("Flights, 48 simulated hours, 4-hour rollovers")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    out.append(_save(fig, directory / "scale_wcu.png"))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in [*flights, *unsharded]:
        if r.mode != "exactly-once":
            continue
        sizes = list(itertools.accumulate(r.largest_by_hour, max))  # largest so far
        sharded = r.workload == "flights"
        label = f"P={r.partitions}" + ("" if sharded else ", no write sharding")
        ax.plot(range(len(sizes)), sizes, "-" if sharded else "--", label=label)
    ax.axhline(4096, color="grey", linestyle=":", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("simulated hours")
    ax.set_ylabel("largest aggregate item so far (bytes)")
    ax.set_title("Exactly-once: largest aggregate item (dotted: 4 KB)")
    ax.legend(fontsize=8)
    out.append(_save(fig, directory / "scale_item_size.png"))
    return out


def _save(fig: Any, path: Path) -> Path:
    """Lay out, write (PNG, 110 dpi) and close one figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description="Exactly-once cost and item sizes over many stream shards (shard twin on "
        "DynamoDB Local) and the capacity model at 20,000 source records/s.",
    )
    p.add_argument(
        "--partitions",
        default=",".join(map(str, PARTITIONS)),
        help="comma-separated partition counts (1,16,64)",
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    p.add_argument(
        "--no-comparison",
        action="store_true",
        help="skip the runs without write sharding (the comparison, for P > 1)",
    )
    p.add_argument(
        "--no-auto",
        action="store_true",
        help="skip the write_shards: auto runs at P=64 (and the scale-auto line)",
    )
    p.add_argument(
        "--no-wide",
        action="store_true",
        help="skip the wide-keys runs (and the scale-wide line)",
    )
    p.add_argument(
        "--only-wide",
        action="store_true",
        help="run only the wide-keys workload (its table and the scale-wide line, last)",
    )
    p.add_argument(
        "--aggregate-partitions",
        type=int,
        default=WIDE_AGGREGATE_PARTITIONS,
        metavar="N",
        help=f"the wide keys' aggregate_partitions ({WIDE_AGGREGATE_PARTITIONS}; 1 to "
        f"{MAX_AGGREGATE_PARTITIONS})",
    )
    p.add_argument(
        "--control-partitions",
        type=int,
        default=WIDE_CONTROL_PARTITIONS,
        metavar="N",
        help=f"the wide keys' control_partitions ({WIDE_CONTROL_PARTITIONS}; 1 to "
        f"{MAX_CONTROL_PARTITIONS})",
    )
    p.add_argument(
        "--wide-seconds",
        type=float,
        default=WIDE_SECONDS,
        metavar="S",
        help=f"simulated seconds of the wide keys ({WIDE_SECONDS}: "
        f"{round(WIDE_RATE * WIDE_SECONDS):,} likes, as many posts, {WIDE_USERS:,} users)",
    )
    p.add_argument(
        "--plots", type=Path, default=PLOTS, metavar="DIR", help="where the PNGs go (bench/plots)"
    )
    return p


def _run_auto(console: Console, runs: list[Figures]) -> list[Figures]:
    """At P=64: the flights with ``write_shards: auto`` (exactly-once; without write sharding
    too when the comparison did not run) and the hot keys for :data:`HOT_AUTO_SECONDS`."""
    done = []
    if not any(r.workload == UNSHARDED and r.partitions == 64 for r in runs):
        with console.status("flights without write sharding, P=64, exactly-once ..."):
            done.append(run_flights(64, "exactly-once", sharded=False))
    with console.status("flights with write_shards: auto, P=64, exactly-once ..."):
        done.append(run_flights(64, "exactly-once", auto=True))
    r = done[-1]
    console.print(
        f"flights P=64  exactly-once   write_shards: auto: {r.wcu_per_1k:,.1f} WCU/1k, "
        f"largest item {r.largest_item_bytes:,} B, {'exact' if r.exact else 'NOT EXACT'} "
        f"({r.seconds:.0f} s); {_routing(r)}",
        highlight=False,
    )
    with console.status(f"hot keys with write_shards: auto, P=64, {HOT_AUTO_SECONDS} s ..."):
        done.append(run_hot(64, auto=True, seconds=HOT_AUTO_SECONDS))
    r = done[-1]
    console.print(
        f"hot keys P=64 write_shards: auto, {HOT_AUTO_SECONDS} s: item peak {r.item_peak:,} "
        f"WCU/s, table partition peak {r.partition_peak:,} WCU/s, index partition peak "
        f"{r.index_peak:,} WCU/s, {r.throttled_seconds} s over a limit, "
        f"{'exact' if r.exact else 'NOT EXACT'} ({r.seconds:.0f} s); {_routing(r)}",
        highlight=False,
    )
    return done


def _routing(r: Figures) -> str:
    """What the routing of ``write_shards: auto`` did in one run."""
    per_1k = r.routing_reads * 1000 / r.source_records if r.source_records else 0.0
    return (
        f"routing: {r.routing_items:,} items ({r.routing_hot_starts:,} rules started hot), "
        f"{r.routing_switches:,} switches, {r.routing_reads:,} reads "
        f"({per_1k:,.1f} RCU per 1,000 source records)"
    )


def _auto_line(runs: list[Figures]) -> str | None:
    """``scale-auto: P=64 flights WCU <r> of unsharded; hot keys <s> s over a limit; exact
    <yes|no>``: the flights with ``write_shards: auto`` over the flights without write sharding
    (exactly-once, P=64), the hot keys' seconds over a limit, and whether both are exact
    (``None`` without the auto runs)."""
    by = {(r.workload, r.partitions, r.mode): r for r in runs}
    auto = by.get((AUTO, 64, "exactly-once"))
    base = by.get((UNSHARDED, 64, "exactly-once"))
    hot = by.get((HOT_AUTO, 64, "exactly-once"))
    if auto is None or base is None or hot is None:
        return None
    ratio = auto.wcu_per_1k / base.wcu_per_1k if base.wcu_per_1k else float("nan")
    exact = "yes" if auto.exact and hot.exact else "no"
    return (
        f"scale-auto: P=64 flights WCU {ratio:.3f} of unsharded; hot keys "
        f"{hot.throttled_seconds} s over a limit; exact {exact}"
    )


def _wide_line(runs: list[Figures]) -> str | None:
    """``scale-wide: P=64 <k> keys at <r> records/s: partition peak <w> WCU/s; <s> s over a
    limit; exact <yes|no>``: the spread run's keys, source rate, hottest partition key value
    (aggregates and control items alike) and seconds over a limit; exact when every wide-keys
    run (the comparison on today's layout too) equals its ground truth. The run on today's
    layout stands in when it is the only one (``--aggregate-partitions 1 --control-partitions
    1``); ``None`` without a wide-keys run."""
    wide = [r for r in runs if r.workload == WIDE] or [r for r in runs if r.workload == WIDE_BASE]
    if not wide:
        return None
    r = wide[0]
    exact = all(w.exact for w in runs if w.workload in (WIDE, WIDE_BASE))
    return (
        f"scale-wide: P={r.partitions} {r.keys} keys at {WIDE_RATE} records/s: partition peak "
        f"{r.hottest_peak} WCU/s; {r.throttled_seconds} s over a limit; "
        f"exact {'yes' if exact else 'no'}"
    )


def _run_wide(console: Console, args: argparse.Namespace) -> list[Figures]:
    """The wide keys with the chosen layout, then on today's (1 and 1) for comparison."""
    layouts = [(args.aggregate_partitions, args.control_partitions)]
    if layouts[0] != (1, 1):
        layouts.append((1, 1))
    done = []
    for aggregates, control in layouts:
        with console.status(
            f"wide keys, P={WIDE_PARTITIONS}, aggregate_partitions {aggregates}, "
            f"control_partitions {control} ..."
        ):
            done.append(run_wide(aggregates, control, seconds=args.wide_seconds))
        r = done[-1]
        console.print(
            f"wide keys P={WIDE_PARTITIONS} partitions {aggregates}/{control}: {r.keys:,} keys, "
            f"{r.wcu_per_1k:,.1f} WCU/1k, item peak {r.item_peak:,} WCU/s, aggregates' "
            f"partition peak {r.partition_peak:,} WCU/s, control partition peak "
            f"{r.control_peak:,} WCU/s ({r.control_peak_name or 'none'}), hottest "
            f"{r.hottest_peak:,} WCU/s ({r.hottest_peak_name}), {r.throttled_seconds} s over a "
            f"limit, get {r.get_requests} request(s), "
            f"{'exact' if r.exact else 'NOT EXACT ' + '; '.join(r.differences)} "
            f"({r.seconds:.0f} s); {_routing(r)}",
            highlight=False,
        )
    return done


def _wide_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the wide keys' options (one line), or ``None``."""
    if args.no_wide and args.only_wide:
        return "--no-wide and --only-wide exclude each other"
    if not 1 <= args.aggregate_partitions <= MAX_AGGREGATE_PARTITIONS:
        top = MAX_AGGREGATE_PARTITIONS
        return f"--aggregate-partitions: 1 to {top}, got {args.aggregate_partitions}"
    if not 1 <= args.control_partitions <= MAX_CONTROL_PARTITIONS:
        return f"--control-partitions: 1 to {MAX_CONTROL_PARTITIONS}, got {args.control_partitions}"
    if not 0 < args.wide_seconds <= 60:
        return f"--wide-seconds: above 0 and at most 60, got {args.wide_seconds}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    console = Console(width=150) if not sys.stdout.isatty() else Console()
    try:
        partitions = tuple(int(p) for p in args.partitions.split(","))
    except ValueError:
        console.print(f"error: --partitions: not a list of integers: {args.partitions!r}")
        return 2
    if 64 not in partitions:
        console.print("error: --partitions must include 64 (the last line reports P=64)")
        return 2
    problem = _wide_problem(args)
    if problem is not None:
        console.print(f"error: {problem}", highlight=False)
        return 2
    runs: list[Figures] = []
    try:
        for p in () if args.only_wide else partitions:
            for mode in MODES:
                with console.status(f"flights, P={p}, {mode} ..."):
                    runs.append(run_flights(p, mode))
                r = runs[-1]
                console.print(
                    f"flights P={p:<3} {mode:<14} {r.source_records:,} source records, "
                    f"{r.wcu_per_1k:,.1f} WCU/1k, largest item {r.largest_item_bytes:,} B, "
                    f"{'exact' if r.exact else 'NOT EXACT ' + '; '.join(r.differences)} "
                    f"({r.seconds:.0f} s)",
                    highlight=False,
                )
            for mode in MODES if p > 1 and not args.no_comparison else ():
                with console.status(f"flights without write sharding, P={p}, {mode} ..."):
                    runs.append(run_flights(p, mode, sharded=False))
                r = runs[-1]
                console.print(
                    f"flights P={p:<3} {mode:<14} without write sharding: "
                    f"{r.wcu_per_1k:,.1f} WCU/1k, largest item {r.largest_item_bytes:,} B, "
                    f"{'exact' if r.exact else 'NOT EXACT'} ({r.seconds:.0f} s)",
                    highlight=False,
                )
            with console.status(f"hot keys, P={p} ..."):
                runs.append(run_hot(p))
            r = runs[-1]
            console.print(
                f"hot keys P={p:<3} item peak {r.item_peak:,} WCU/s, index partition peak "
                f"{r.index_peak:,} WCU/s, {'exact' if r.exact else 'NOT EXACT'} "
                f"({r.seconds:.0f} s)",
                highlight=False,
            )
            if p == 64 and not args.no_auto:
                runs.extend(_run_auto(console, runs))
        if not args.no_wide:
            runs.extend(_run_wide(console, args))
    except AggregatorError as exc:
        console.print(f"error: {exc}", highlight=False)
        return 2
    render(console, runs)
    if not args.only_wide:
        for path in plot(runs, args.plots):
            console.print(f"plot: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2, default=str))
    for line in (_auto_line(runs), _wide_line(runs)):
        if line is not None:
            print(line)
    if args.only_wide:
        return 0 if all(r.exact for r in runs) else 1
    p64 = [r for r in runs if r.workload == "flights" and r.partitions == 64]
    largest = max(r.largest_item_bytes for r in p64)
    print(
        f"scale: P=64 exactly-once/at-least-once WCU {_ratio(runs, 64):.3f}; "
        f"largest aggregate item {largest} B"
    )
    return 0 if all(r.exact for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
