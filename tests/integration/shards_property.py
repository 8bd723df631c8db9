"""Property: on many shards with rollovers, under random writes and per-shard faults, every
aggregate equals the rules evaluated over the table's final items.

Each scenario writes random puts and deletes of items with distinct partition keys (so they
spread over the shard twin's partitions), gives each stream record an arrival time ``spacing``
simulated seconds after the previous one (up to two hours: scenarios span up to 60 simulated
hours, past the 25-hour checkpoint retention, so stale checkpoints are pruned), and replays the
stream through :class:`~aggregator.dev.shards.EventSourceTwin` over ``P`` partitions whose shards
roll over every ``rollover`` seconds. Each partition has its own processor and fault plan:
crashes after some updates, batches delivered twice, bisected retries, throttled items (the
parents' ``META`` items among them). The rules are the wide set (a windowed rule, two rules
derived from another rule's aggregates, the other kinds, two target rules and a rule reading what
one of them writes), without write sharding, with it, or with ``write_shards: auto`` and each
shard switching between the aggregates and the partials at random (hot and cold turns at any
time, through the real persisted switches), on the single-partition layout or the spread one
(``aggregate_partitions: 8``, every aggregate's placement checked apart: harness.misplaced).

Target rules keep their sums on parent items the scenario writes before anything else (some
parents are never created, one may be deleted on the way and never comes back); each path item
may name a parent. A parent in the table at the end must hold what the application gave it plus
its children's sum, and no attribute of the framework's but its checkpoint map; every other
parent's sum must be in the rule's ledger (harness.target_truth).

Split into two files (``test_shards_property_a.py``, ``_b.py``), one per pytest-xdist worker;
``AGGREGATOR_SHARD_EXAMPLES`` scenarios each (default 12, as CI runs them; make soak runs 250).
"""

from __future__ import annotations

import itertools
import os
import random
from typing import Any

from hypothesis import strategies as st

from aggregator.core.rules import RuleSet
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults
from aggregator.dev.shards import EventSourceTwin, ShardPlan, ShardTwin, SimulatedClock
from aggregator.dynamodb.modes import WriterOptions
from aggregator.dynamodb.routing import ShardRouting
from aggregator.dynamodb.table import create_table
from aggregator.runtime.processor import create_processor
from tests.integration.harness import (
    TARGETS,
    WIDE_RULES,
    Parents,
    delete,
    expected_from_items,
    final_items,
    misplaced,
    parent_deletes_strategy,
    parent_of_child,
    parents_strategy,
    placed,
    put,
    run_property,
    spread,
    stored,
    target_truth,
)

# The wide rules with write sharding: the TOTAL over 4 partials, per_owner (a leaderboard spread
# over 2 index partitions, and the source of two derived rules) over 3, the windowed rule's
# buckets over 2, parent_points (a target rule) over 2, rolled up into the parents (its twin
# parent_children, on the same parents, stays unsharded).
SHARDING: dict[str, dict[str, int]] = {
    "parent_points": {"write_shards": 2},
    "paths": {"write_shards": 4},
    "per_owner": {"write_shards": 3, "leaderboard_partitions": 2},
    "points_by_hour": {"write_shards": 2},
    "mean_points": {"write_shards": 2},
    "max_points": {"write_shards": 3},
}
SHARDED_RULES = RuleSet.of(
    *(placed(r, **SHARDING[r.name]) if r.name in SHARDING else r for r in WIDE_RULES.rules)
)
# The same rules with write_shards: auto, each shard switching between the aggregates and the
# partials at random after its batches (RandomRouting): what the heat meter decides must not
# matter to exactness, only when each switch takes effect.
AUTO_RULES = RuleSet.of(
    *(
        placed(r, **{**SHARDING[r.name], "write_shards": "auto"}) if r.name in SHARDING else r
        for r in WIDE_RULES.rules
    )
)
RULES = {"wide": WIDE_RULES, "sharded": SHARDED_RULES, "auto": AUTO_RULES}
# Each of them on the spread layout too (aggregate_partitions: 8): a scenario draws which.
SPREAD_RULES = {name: spread(rules) for name, rules in RULES.items()}


class RandomRouting(ShardRouting):
    """Starts each shard's auto rules hot or cold and switches them after its batches at random
    (a seeded draw per call), through the real persistence: hot and cold turns at any time."""

    def __init__(self, *args: Any, seed: int, chance: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._random = random.Random(seed)
        self._chance = chance

    def decide(self, shard_id: Any, known: Any, batch: Any = None) -> int:
        if batch is None or not batch.records:
            return 0  # not after a window's empty closing call: it would only pile switches up
        return super().decide(shard_id, known, batch)

    def hot_at_start(self, batch: Any, created_seconds: Any) -> set[str]:
        return {r for r in self.rules if self._random.random() < self._chance}

    def wants_switch(self, shard_id: str, rule: str, hot: bool, now: float) -> bool:
        return self._random.random() < self._chance


EXAMPLES = int(os.environ.get("AGGREGATOR_SHARD_EXAMPLES", "12"))
"""Scenarios per half (two test files, one per test worker)."""
PARTS = 3
"""Tests per half: pytest-xdist (``--dist loadfile``) hands out the files with the most tests
first, so a half of one test would start last and keep one worker busy after the other ends."""


def part_examples(part: int) -> int:
    """Scenarios of one part: the half's :data:`EXAMPLES` spread over its :data:`PARTS`."""
    return EXAMPLES // PARTS + (1 if part < EXAMPLES % PARTS else 0)


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
    parent_of_child,
)
delete_op = st.tuples(st.just("delete"), item_ids)
scenario = st.fixed_dictionaries(
    {
        "ops": st.lists(st.one_of(put_op, put_op, delete_op), min_size=1, max_size=30),
        "parents": parents_strategy,
        "parent_deletes": parent_deletes_strategy,
        "partitions": st.integers(1, 8),
        "rollover": st.sampled_from([30, 600, 4 * 3600]),
        "spacing": st.sampled_from([0, 1, 20, 2 * 3600]),
        "mode": st.sampled_from(["exactly-once", "window"]),
        "rules": st.sampled_from(sorted(RULES)),
        "spread": st.booleans(),  # the rules on the spread layout (aggregate_partitions: 8)
        # rules "auto": the seed and chance of each shard's switches
        "switch_seed": st.integers(0, 2**16),
        "switch_chance": st.sampled_from([0.2, 0.5, 1.0]),
        "batch_size": st.integers(1, 7),
        # (partition, delivery number within it) -> crash after n updates
        "crashes": st.dictionaries(
            st.tuples(st.integers(0, 7), st.integers(1, 6)), st.integers(0, 3), max_size=3
        ),
        "duplicates": st.sets(st.tuples(st.integers(0, 7), st.integers(1, 6)), max_size=4),
        "bisect": st.booleans(),
        "throttle": st.dictionaries(
            st.sampled_from(["per_owner#ann", "paths#TOTAL", "active_owners#ACTIVE", "META"]),
            st.integers(1, 2),
            max_size=2,
        ),
    }
)


def apply_ops(ddb, name: str, operations, parents: Parents) -> None:
    current: set[int] = set()
    parents.create(ddb, name)
    for index, op in enumerate(operations):
        parents.delete_due(ddb, name, index)
        if op[0] == "put":
            _, i, owner, points, kind, ts, parent = op
            item: dict[str, Any] = {"pk": f"P{i}", "sk": f"PATH#{i}", "owner": owner}
            item["points"] = points
            if kind:
                item["kind"] = kind
            if ts is not None:
                item["ts"] = ts
            if parent is not None:
                item["parent"] = parent
            put(ddb, name, item)
            current.add(i)
        elif op[1] in current:
            delete(ddb, name, f"P{op[1]}", f"PATH#{op[1]}")
            current.discard(op[1])
    parents.delete_due(ddb, name, len(operations), last=True)


def run_scenario(ddb, streams, case: dict[str, Any], report: dict[str, int]) -> None:
    name = f"shards-{os.getpid()}-{next(_names)}"
    rules = (SPREAD_RULES if case["spread"] else RULES)[case["rules"]]
    arn = create_table(ddb, name)
    try:
        parents = Parents.of(case)
        apply_ops(ddb, name, case["ops"], parents)
        clock = SimulatedClock(START)
        arrivals = itertools.count(1)
        routings: list[RandomRouting] = []

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
            processor = create_processor(
                rules,
                clients[p],
                name,
                mode=case["mode"],
                clock=clock,
                max_workers=2,
                writer_options=WriterOptions(throttle_retries=1, backoff_seconds=0.001),
            )
            if processor.routing is not None:
                routing = RandomRouting(
                    clients[p],
                    name,
                    rules.layout,
                    processor.engine.auto_rules,
                    clock=clock,
                    seed=case["switch_seed"] + p,
                    chance=case["switch_chance"],
                )
                processor.routing = processor.writer.routing = routing
                routings.append(routing)
            return processor

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
        report["switches"] += sum(r.switches for r in routings)
        items = final_items(ddb, name)
        truth = target_truth(expected_from_items(items, WIDE_RULES), items, parents)
        expected = truth.expected
        report["tallies"] += truth.tallies
        report["ledger"] += sum(len(expected[r]) for r in TARGETS)

        actual = stored(ddb, name, rules)
        # on the spread layout, every aggregate where the design puts it (computed apart)
        places = misplaced(ddb, name) if case["spread"] else []
        report["spread"] += case["spread"]
        if (actual, truth.found, truth.problems, places) != (expected, truth.parents, [], []):
            report["drift"] += 1
        assert actual == expected
        assert places == []
        assert truth.found == truth.parents
        assert truth.problems == []
    finally:
        ddb.delete_table(TableName=name)


def check_part(label: str, dynamodb_local, examples: int = EXAMPLES) -> None:
    """Run ``examples`` scenarios on ``dynamodb_local``; fails on any drift."""
    ddb = dynamodb_local.client("dynamodb")
    streams = dynamodb_local.client("dynamodbstreams")
    report = {
        "scenarios": 0,
        "drift": 0,
        "records": 0,
        "shards": 0,
        "faults": 0,
        "tallies": 0,
        "ledger": 0,
        "switches": 0,
        "spread": 0,
    }

    run_property(
        scenario,
        examples,
        lambda case: run_scenario(ddb, streams, case, report),
        report,
        lambda r: (
            f"multi-shard property {label}: {r['scenarios']} scenarios, {r['records']} stream "
            f"records over {r['shards']} shards, {r['faults']} injected faults and retries, "
            f"{r['tallies']} parents' sums, {r['ledger']} ledger entries, "
            f"{r['switches']} write sharding switches, {r['spread']} on the spread layout, "
            f"drift in {r['drift']} scenarios"
        ),
        f"shards-{label.replace('/', '-')}.json",
    )
