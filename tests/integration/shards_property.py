"""Property: on many shards with rollovers, under random writes and per-shard faults, every
aggregate equals the rules evaluated over the table's final items.

Each scenario writes random puts and deletes of items with distinct partition keys (so they
spread over the shard twin's partitions), gives each stream record an arrival time ``spacing``
simulated seconds after the previous one (up to two hours: scenarios span up to 60 simulated
hours, past the 25-hour checkpoint retention, so stale checkpoints are pruned), and replays the
stream through :class:`~aggregator.dev.shards.EventSourceTwin` over ``P`` partitions whose shards
roll over every ``rollover`` seconds. Each partition has its own processor and fault plan:
crashes after some updates, batches delivered twice, bisected retries, throttled items. The rules
are the wide set (a windowed rule and two rules derived from another rule's aggregates).

Split into two files (``test_shards_property_a.py``, ``_b.py``), one per pytest-xdist worker;
``AGGREGATOR_SHARD_EXAMPLES`` scenarios each (default 50: 100 in CI).
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from hypothesis import strategies as st

from aggregator.core.rules import RuleSet
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dev.shards import EventSourceTwin, ShardPlan, ShardTwin, SimulatedClock
from aggregator.dynamodb.table import create_table
from aggregator.runtime.processor import create_processor
from tests.integration.harness import (
    WIDE_RULES,
    delete,
    expected_from_items,
    final_items,
    placed,
    put,
    run_property,
    stored,
)

# The wide rules with write sharding: the TOTAL over 4 partials, per_owner (a leaderboard spread
# over 2 index partitions, and the source of two derived rules) over 3, the windowed rule's
# buckets over 2.
SHARDING: dict[str, dict[str, int]] = {
    "paths": {"write_shards": 4},
    "per_owner": {"write_shards": 3, "leaderboard_partitions": 2},
    "points_by_hour": {"write_shards": 2},
    "mean_points": {"write_shards": 2},
    "max_points": {"write_shards": 3},
}
SHARDED_RULES = RuleSet.of(
    *(placed(r, **SHARDING[r.name]) if r.name in SHARDING else r for r in WIDE_RULES.rules)
)
RULES = {"wide": WIDE_RULES, "sharded": SHARDED_RULES}
EXAMPLES = int(os.environ.get("AGGREGATOR_SHARD_EXAMPLES", "50"))
START = 1_700_000_000 // 3600 * 3600
_names = itertools.count()

item_ids = st.integers(0, 11)
put_op = st.tuples(
    st.just("put"),
    item_ids,
    st.sampled_from(["ann", "bob", "cyd"]),
    st.integers(-3, 9),
    st.sampled_from(["ruby", "opal", None]),
    st.sampled_from([None, START - 61, START + 59, START + 3600]),
)
delete_op = st.tuples(st.just("delete"), item_ids)
scenario = st.fixed_dictionaries(
    {
        "ops": st.lists(st.one_of(put_op, put_op, delete_op), min_size=1, max_size=30),
        "partitions": st.integers(1, 8),
        "rollover": st.sampled_from([30, 600, 4 * 3600]),
        "spacing": st.sampled_from([0, 1, 20, 2 * 3600]),
        "mode": st.sampled_from(["exactly-once", "window"]),
        "rules": st.sampled_from(sorted(RULES)),
        "batch_size": st.integers(1, 7),
        # (partition, delivery number within it) -> crash after n updates
        "crashes": st.dictionaries(
            st.tuples(st.integers(0, 7), st.integers(1, 6)), st.integers(0, 3), max_size=3
        ),
        "duplicates": st.sets(st.tuples(st.integers(0, 7), st.integers(1, 6)), max_size=4),
        "bisect": st.booleans(),
        "throttle": st.dictionaries(
            st.sampled_from(["per_owner#ann", "paths#TOTAL", "active_owners#ACTIVE"]),
            st.integers(1, 2),
            max_size=2,
        ),
    }
)


def apply_ops(ddb, name: str, operations) -> None:
    current: set[int] = set()
    for op in operations:
        if op[0] == "put":
            _, i, owner, points, kind, ts = op
            item: dict[str, Any] = {"pk": f"P{i}", "sk": f"PATH#{i}", "owner": owner}
            item["points"] = points
            if kind:
                item["kind"] = kind
            if ts is not None:
                item["ts"] = ts
            put(ddb, name, item)
            current.add(i)
        elif op[1] in current:
            delete(ddb, name, f"P{op[1]}", f"PATH#{op[1]}")
            current.discard(op[1])


def run_scenario(ddb, streams, case: dict[str, Any], report: dict[str, int]) -> None:
    name = f"shards-{os.getpid()}-{next(_names)}"
    rules = RULES[case["rules"]]
    arn = create_table(ddb, name)
    try:
        apply_ops(ddb, name, case["ops"])
        clock = SimulatedClock(START)
        arrivals = itertools.count(1)

        def arrival(record: dict[str, Any]) -> float:
            return START + next(arrivals) * case["spacing"]

        twin = ShardTwin(
            streams,
            arn,
            ShardPlan(case["partitions"], case["rollover"], START),
            clock,
            arrival=arrival,
        )
        clients = [
            FaultInjectingClient(ddb, throttle=dict(case["throttle"]))
            for _ in range(case["partitions"])
        ]

        def processor_for(p: int):
            return create_processor(
                rules,
                clients[p],
                name,
                mode=case["mode"],
                clock=clock,
                max_workers=2,
                throttle_retries=1,
                backoff_seconds=0.001,
            )

        def faults_for(p: int) -> RunnerFaults:
            return RunnerFaults(
                client=clients[p],
                duplicate=lambda n: (p, n) in case["duplicates"],
                crash=lambda n: case["crashes"].get((p, n)),
                bisect_on_error=case["bisect"],
            )

        source = EventSourceTwin(
            twin,
            processor_for,
            batch_size=case["batch_size"],
            tumbling_window_seconds=1,
            faults_for=faults_for,
            threads=4,
        )
        try:
            stats = source.run()
        finally:
            source.close()
        report["scenarios"] += 1
        report["records"] += stats.records
        report["shards"] += twin.shards_opened()
        report["faults"] += stats.function_errors + stats.retries + stats.duplicates
        expected = expected_from_items(final_items(ddb, name), WIDE_RULES)

        actual = stored(ddb, name, WIDE_RULES)
        if actual != expected:
            report["drift"] += 1
        assert actual == expected
    finally:
        ddb.delete_table(TableName=name)


def check_part(label: str, dynamodb_local) -> None:
    ddb = dynamodb_local.client("dynamodb")
    streams = dynamodb_local.client("dynamodbstreams")
    report = {"scenarios": 0, "drift": 0, "records": 0, "shards": 0, "faults": 0}

    run_property(
        scenario,
        EXAMPLES,
        lambda case: run_scenario(ddb, streams, case, report),
        report,
        lambda r: (
            f"multi-shard property {label}: {r['scenarios']} scenarios, {r['records']} stream "
            f"records over {r['shards']} shards, {r['faults']} injected faults and retries, "
            f"drift in {r['drift']} scenarios"
        ),
        f"shards-{label}.json",
    )
