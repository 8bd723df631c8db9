"""Shared pieces of the exactly-once tests: rules, workloads, a faulty pipeline, ground truth."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from hypothesis import HealthCheck, given, settings

from aggregator.core.layout import DEFAULT_LAYOUT
from aggregator.core.rules import Rule, RuleSet, rule
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dynamodb.query import AggregateStore
from aggregator.runtime.processor import create_processor
from aggregator.runtime.runner import PositionStore, StreamRunner
from tests.factories import ddb_json

RULES = RuleSet.of(
    rule("paths", match={"sk": {"prefix": "PATH#"}}, key="TOTAL"),
    rule("per_owner", match={"sk": {"prefix": "PATH#"}}, key="{owner}", leaderboard=True),
    rule(
        "points", match={"points": {"exists": True}}, key="{owner}", delta={"attribute": "points"}
    ),
    rule(
        "gems_by_kind",
        match={"kind": {"exists": True}},
        key="{kind}",
        ttl_deletes="retract",
    ),
)

# The same rules plus a windowed rule and two rules derived from per_owner (a histogram of
# owners by number of paths, and the number of owners with at least one path).
WIDE_RULES = RuleSet.of(
    *RULES.rules,
    rule(
        "points_by_hour",
        match={"ts": {"exists": True}},
        key="{owner}",
        delta={"attribute": "points"},
        window={"time": "ts", "unit": "epoch_seconds", "granularities": ["hour", "minute"]},
    ),
    rule("owners_by_paths", source="per_owner", key="{value}"),
    rule("active_owners", source="per_owner", key="ACTIVE"),
    # the other kinds (aggregator.core.kinds), over the same points
    rule(
        "mean_points",
        match={"points": {"exists": True}},
        key="{owner}",
        delta={"attribute": "points"},
        kind="mean",
    ),
    rule(
        "max_points",
        match={"points": {"exists": True}},
        key="{owner}",
        delta={"attribute": "points"},
        kind="max",
    ),
    rule(
        "points_spread",
        match={"points": {"exists": True}},
        key="{owner}",
        delta={"attribute": "points"},
        kind={"name": "distribution", "relative_accuracy": "0.05"},
    ),
)

_DESER = TypeDeserializer()


def placed(base: Rule, **placement: int) -> Rule:
    """``base`` with ``write_shards`` / ``leaderboard_partitions`` set (validated again)."""
    return Rule.model_validate({**dict(base), **placement})


def run_property(
    strategy: Any,
    examples: int,
    run: Callable[[dict[str, Any]], None],
    report: dict[str, int],
    summary: Callable[[dict[str, int]], str],
    soak_file: str,
) -> None:
    """Run ``examples`` hypothesis scenarios of ``strategy`` through ``run`` (which counts into
    ``report``, including ``scenarios`` and ``drift``), print ``summary(report)``, write the
    report to ``$AGGREGATOR_SOAK_DIR/<soak_file>`` when set, and require every scenario run and
    none drifted."""

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=strategy)
    def scenarios(case):
        run(case)

    scenarios()
    print("\n" + summary(report))
    soak_dir = os.environ.get("AGGREGATOR_SOAK_DIR")
    if soak_dir:
        Path(soak_dir).mkdir(parents=True, exist_ok=True)
        (Path(soak_dir) / soak_file).write_text(json.dumps(report))
    assert report["scenarios"] >= examples
    assert report["drift"] == 0


def utc_text(epoch_seconds: int) -> str:
    """Fixed-width UTC text of an instant, computed here with the standard library."""
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def put(ddb, table: str, item: dict[str, Any]) -> None:
    ddb.put_item(TableName=table, Item=ddb_json(item))


def delete(ddb, table: str, pk: str, sk: str) -> None:
    ddb.delete_item(TableName=table, Key=ddb_json({"pk": pk, "sk": sk}))


def standard_workload(ddb, table: str, n: int = 24) -> None:
    """Inserts, value changes, key (owner) changes and deletes over a few owners."""
    owners = ["ann", "bob", "cyd", "dee"]

    def path(i: int, owner: str, points: int, kind: str) -> None:
        item = {"pk": f"P{i % 6}", "sk": f"PATH#{i}", "owner": owner, "points": points}
        put(ddb, table, {**item, "kind": kind})

    for i in range(n):
        path(i, owners[i % 4], i % 5, ["ruby", "opal"][i % 2])
    for i in range(0, n, 3):  # value change
        path(i, owners[i % 4], 10 + i, ["ruby", "opal"][i % 2])
    for i in range(1, n, 4):  # key change: the path moves to another owner
        path(i, owners[(i + 1) % 4], i % 5, "jade")
    for i in range(2, n, 5):
        delete(ddb, table, f"P{i % 6}", f"PATH#{i}")


def final_items(ddb, table: str) -> list[dict[str, Any]]:
    """The table's items outside the reserved partitions, deserialized."""
    items, start = [], None
    while True:
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = ddb.scan(**kwargs)
        for raw in page["Items"]:
            if not DEFAULT_LAYOUT.is_reserved(raw):  # partial aggregates included
                items.append({k: _DESER.deserialize(v) for k, v in raw.items()})
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def contribution(r, item: dict[str, Any] | None) -> dict[str, Decimal]:
    """What base rule ``r`` counts for one item (deserialized), keyed as :func:`stored` keys
    its aggregates; windowed rules' buckets are computed here by integer arithmetic.

    Kinds other than ``sum``: a mean counts its amount under the key and 1 under
    ``"<key>#count"``; a kind with one item per value counts 1 under ``"<key>#<value>"`` (for
    a distribution the value its bin reports), so the whole multiset is compared."""
    out: dict[str, Decimal] = defaultdict(Decimal)
    if item is None or not r.match.matches(item):
        return out
    key = r.key.render(item)[1]
    amount = r.delta.evaluate(item)
    if r.kind.name == "mean":
        out[key] += amount
        out[f"{key}#count"] += 1
        return out
    if r.kind.per_value:
        if r.kind.name == "distribution":
            amount = r.kind.bins.value_of(r.kind.bins.bin_of(amount))
        out[f"{key}#{amount.normalize()}"] += 1
        return out
    if r.window is None:
        out[key] += amount
        return out
    sizes = {"minute": 60, "hour": 3600, "day": 86400}
    for g in r.window.granularities:
        size = sizes[g.label]
        start = int(item[r.window.time]) // size * size
        out[f"{key}@{g.label}@{utc_text(start)}"] += amount
    return out


def expected_from_items(
    items: list[dict[str, Any]],
    rules: RuleSet = RULES,
    kept: list[dict[str, Any]] = (),
    without: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = (),
    counts_nothing: Callable[[str, dict[str, Any]], bool] = lambda rule, item: False,
) -> dict[str, dict[str, Decimal]]:
    """Every rule evaluated over ``items`` (plus ``kept``: TTL-deleted items whose contribution
    stays for rules with ``ttl_deletes: keep``); zero totals dropped.

    ``without`` lists ``(rule, old item, new item)`` changes that were dead-lettered, so never
    applied: their delta (contribution of new minus old) is taken out of that base rule.
    ``counts_nothing(rule, item)`` says which items a base rule cannot read (a bad value): they
    count nothing, wherever they appear.
    Windowed rules (whose time attribute is in epoch seconds here) are keyed
    ``"<key>@<granularity>@<bucket start>"``; derived rules are evaluated over the expected
    aggregates of their source (value != 0)."""
    totals: dict[str, dict[str, Decimal]] = {r.name: defaultdict(Decimal) for r in rules}
    kept = [_decimals(item) for item in kept]
    for r in rules.base_rules:
        sources = list(items) + (list(kept) if r.ttl_deletes == "keep" else [])
        for item in sources:
            if counts_nothing(r.name, item):
                continue
            for key, amount in contribution(r, item).items():
                totals[r.name][key] += amount
    for name, old, new in without:
        r = rules.get(name)
        new, old = (None if i is None or counts_nothing(name, i) else i for i in (new, old))
        for key, amount in contribution(r, _decimals(new) if new else None).items():
            totals[name][key] -= amount
        for key, amount in contribution(r, _decimals(old) if old else None).items():
            totals[name][key] += amount
    done = {r.name for r in rules.base_rules}
    while len(done) < len(rules):
        for r in rules.derived_rules:
            if r.name in done or r.source not in done:
                continue
            for key, value in totals[r.source].items():
                if value == 0:
                    continue
                image = {"value": value, "key": key, "rule": r.source}
                if r.match.matches(image):
                    totals[r.name][r.key.render(image)[1]] += r.delta.evaluate(image)
            done.add(r.name)
    return {name: {k: v for k, v in t.items() if v != 0} for name, t in totals.items()}


def _decimals(item: dict[str, Any]) -> dict[str, Any]:
    return {
        k: Decimal(v) if isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in item.items()
    }


def stored(ddb, table: str, rules: RuleSet = RULES) -> dict[str, dict[str, Decimal]]:
    """Stored non-zero aggregates per rule (windowed ones keyed ``key@granularity@bucket``)."""
    store = AggregateStore(ddb, table, rules)
    out: dict[str, dict[str, Decimal]] = {}
    for r in rules:
        out[r.name] = {}
        if r.kind.name != "sum":
            out[r.name] = _stored_kind(store, r)
            continue
        for a in store.list(r.name):
            if a.value != 0:
                key = a.key if a.bucket is None else f"{a.key}@{a.granularity}@{a.bucket}"
                out[r.name][key] = a.value
    return out


def _stored_kind(store: AggregateStore, r: Rule) -> dict[str, Decimal]:
    """A mean's sums and counts, or the multiset of a kind with one item per value, keyed as
    :func:`contribution` keys them, through the read API (``list``, ``histogram``)."""
    out: dict[str, Decimal] = {}
    for a in store.list(r.name):
        if r.kind.name == "mean":
            count = a.fields["count"]
            assert count is not None
            out.update({a.key: a.value, f"{a.key}#count": count})
            continue
        for row in store.histogram(r.name, [a.key]):
            assert isinstance(row.value, Decimal)
            out[f"{a.key}#{row.value.normalize()}"] = row.count
    return {k: v for k, v in out.items() if v != 0}


@dataclass
class Pipeline:
    client: FaultInjectingClient
    faults: RunnerFaults
    runner: StreamRunner


def pipeline(
    ddb,
    streams,
    table: str,
    arn: str,
    *,
    mode: str = "exactly-once",
    batch_size: int = 5,
    window_seconds: int | None = 60,
    throttle: dict[str, int] | None = None,
    throttle_retries: int = 3,
    rules: RuleSet = RULES,
    clock: Any = time.time,
    lifecycle: bool = False,
    **fault_options: Any,
) -> Pipeline:
    client = FaultInjectingClient(ddb, throttle=throttle, layout=rules.layout)
    options: dict[str, Any] = {
        "throttle_retries": throttle_retries,
        "backoff_seconds": 0.001,
        "clock": clock,
    }
    processor = create_processor(rules, client, table, mode=mode, lifecycle=lifecycle, **options)
    faults = RunnerFaults(client=client, **fault_options)
    runner = StreamRunner(
        processor,
        streams,
        arn,
        batch_size=batch_size,
        tumbling_window_seconds=window_seconds,
        positions=PositionStore(ddb, table, rules.layout),
        faults=faults,
        poll_interval=0.05,
    )
    return Pipeline(client, faults, runner)


def deploy(ddb, streams, table: str, arn: str, rules: RuleSet) -> None:
    """A handler starts with ``rules`` (registering them in the manifest) and processes the
    stream to its end; the positions are kept in the table, so each deployment continues where
    the last one stopped."""
    runner = pipeline(ddb, streams, table, arn, rules=rules, lifecycle=True).runner
    runner.poll_interval = 0.005
    runner.run()
