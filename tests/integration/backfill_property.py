"""Property: a backfill racing random writes, a lagging stream handler and faults in both leaves
every backfilled aggregate equal to the rules over the table's items.

Each scenario, on DynamoDB Local:
1. *history*: items written while the handler ran with another rule set (an "older
   deployment"), processed by it;
2. the rules are deployed (the handler's rule set now holds them; they are pending), and more
   writes happen, processed or not yet;
3. the backfill runs with small pages; after each page the test writes (inserts, replacements,
   key changes, deletes, TTL deletes) and sometimes lets the handler catch up; the backfill may
   be killed after a page and resumed by a new one;
4. more writes after the backfill, then the handler catches up (crashes and duplicate
   deliveries injected throughout).

Expected (computed here, independently of the engine): every rule over the final items, plus,
for rules with ``ttl_deletes: keep``, the items TTL-deleted after the backfill fenced the stream.
``AGGREGATOR_BACKFILL_EXAMPLES`` scenarios (default 16, as make test runs them; make soak 400),
run as two halves in two test files (test_backfill_property_a.py and _b.py) so that pytest-xdist
(``--dist loadfile``) can run them on both workers, each on a DynamoDB Local of its own.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregator.core.rules import RuleSet, rule
from aggregator.dev.faults import SimulatedCrash
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.table import create_table
from aggregator.operations.backfill import LEASE_SECONDS, Backfill
from tests.integration.harness import (
    RULES,
    delete,
    expected_from_items,
    final_items,
    pipeline,
    put,
    scenario_seed,
    stored,
)
from tests.integration.test_property import mark_ttl

EXAMPLES = int(os.environ.get("AGGREGATOR_BACKFILL_EXAMPLES", "16"))
PARTS = 8
"""Parts per half (each a test of its own)."""
SOAK = EXAMPLES > 100
"""More scenarios than CI runs: each part gets a DynamoDB Local of its own."""


def part_examples(half: str, part: int) -> int:
    """Scenarios of one part: the half's share of :data:`EXAMPLES`, spread over its parts."""
    total = EXAMPLES - EXAMPLES // 2 if half == "a" else EXAMPLES // 2
    return total // PARTS + (1 if part < total % PARTS else 0)


OLD_RULES = RuleSet.of(rule("unrelated", match={"nothing": {"exists": True}}, key="X"))
_names = itertools.count()

put_op = st.tuples(
    st.just("put"),
    st.integers(0, 7),
    st.sampled_from(["ann", "bob", "cyd"]),
    st.integers(-3, 9),
    st.sampled_from(["ruby", "opal", None]),
)
delete_op = st.tuples(st.sampled_from(["delete", "ttl_delete"]), st.integers(0, 7))
ops = st.lists(st.one_of(put_op, put_op, delete_op), max_size=8)
scenario = st.fixed_dictionaries(
    {
        "history": st.lists(put_op, max_size=14),
        "before": st.lists(put_op, max_size=5),
        "handler_first": st.booleans(),
        "during": st.lists(st.tuples(ops, st.booleans()), min_size=1, max_size=8),
        "after": ops,
        "segments": st.integers(1, 3),
        "page_items": st.integers(1, 4),
        # the carry applied every page, every few pages, or at each segment's end (the default);
        # kills then fall between storing a page and applying its carry, or inside a carry
        "carry_pages": st.sampled_from([1, 2, 3, 1000]),
        "kill_after_pages": st.one_of(st.none(), st.integers(1, 4)),
        # or killed between storing a page and applying it: the resumed one must apply it
        "kill_before_apply": st.one_of(st.none(), st.integers(1, 4)),
        "mode": st.sampled_from(["exactly-once", "window"]),
        "crashes": st.lists(st.tuples(st.integers(1, 12), st.integers(0, 3)), max_size=2),
        "duplicates": st.sets(st.integers(1, 12), max_size=3),
    }
)


class Writer:
    """Applies operations and remembers the TTL-deleted items that keep counting."""

    def __init__(self, ddb, table: str) -> None:
        self.ddb, self.table = ddb, table
        self.current: dict[int, dict[str, Any]] = {}
        self.kept: list[dict[str, Any]] = []

    def apply(self, operations, *, ttl_counts: bool = True) -> None:
        for op in operations:
            if op[0] == "put":
                _, i, owner, points, kind = op
                item = {"pk": f"P{i % 3}", "sk": f"PATH#{i}", "owner": owner, "points": points}
                if kind:
                    item["kind"] = kind
                put(self.ddb, self.table, item)
                self.current[i] = item
            elif op[1] in self.current:
                i = op[1]
                if op[0] == "ttl_delete":
                    flagged = {**self.current[i], "expired": True}
                    put(self.ddb, self.table, flagged)
                    if ttl_counts:
                        self.kept.append(flagged)
                delete(self.ddb, self.table, f"P{i % 3}", f"PATH#{i}")
                del self.current[i]


def run_scenario(ddb, streams, case: dict[str, Any], report: dict[str, int]) -> None:
    name = f"bf-{os.getpid()}-{next(_names)}"
    arn = create_table(ddb, name)
    try:
        writer = Writer(ddb, name)
        # 1. history, processed by an older deployment without the rules
        writer.apply(case["history"])
        old = pipeline(ddb, streams, name, arn, rules=OLD_RULES, lifecycle=True).runner
        old.poll_interval = 0.005  # the stream is local: no need to wait between polls
        old.run(idle_polls=1)
        # 2. the rules deployed: pending from their fences on
        crashes = dict(case["crashes"])
        handler = pipeline(
            ddb,
            streams,
            name,
            arn,
            rules=RULES,
            lifecycle=True,
            mode=case["mode"],
            batch_size=3,
            window_seconds=1,
            duplicate=lambda n: n in case["duplicates"],
            crash=lambda n: crashes.get(n),
            transform=mark_ttl,
        ).runner
        handler.poll_interval = 0.005
        writer.apply(case["before"])
        if case["handler_first"]:
            handler.run(idle_polls=1)
        # 3. the backfill, racing writes and the handler
        during = iter(case["during"])
        pages = itertools.count(1)
        one_at_a_time = threading.Lock()  # segments call back from their own threads

        def on_page(items: int, stats) -> None:
            with one_at_a_time:
                interleave()

        def interleave() -> None:
            step = next(during, None)
            if step is not None:
                operations, catch_up = step
                writer.apply(operations)
                if catch_up:
                    handler.run(idle_polls=1)
            if case["kill_after_pages"] is not None and next(pages) == case["kill_after_pages"]:
                raise SimulatedCrash("backfill killed")

        applies = itertools.count(1)

        class KillableBackfill(Backfill):
            def _apply(self, batch, pseudo_shard):
                if next(applies) == case["kill_before_apply"]:
                    raise SimulatedCrash("backfill killed before applying a stored page")
                super()._apply(batch, pseudo_shard)

        def backfill(hook, clock=time.time) -> Any:
            return KillableBackfill(
                RULES,
                TableStream(ddb, streams, name, arn),
                segments=case["segments"],
                page_items=case["page_items"],
                carry_pages=case["carry_pages"],
                stream_lag_seconds=0,
                on_page=hook,
                clock=clock,
            ).run()

        for attempt in range(3):  # each kill point fires once: at most two kills
            # a new backfill resumes where the killed one stopped, once the killed one's lease
            # has lapsed (its clock runs past it)
            lapsed = attempt * (LEASE_SECONDS + 1)
            try:
                stats = backfill(on_page, clock=lambda lapsed=lapsed: time.time() + lapsed)
                break
            except SimulatedCrash:
                report["killed"] += 1
        for operations, _ in during:
            writer.apply(operations)
        # 4. after the backfill
        writer.apply(case["after"])
        handler.run()
        states = Manifest(ddb, name, RULES.layout).load()
        assert all(states[r.name].status == "active" for r in RULES)
        expected = expected_from_items(final_items(ddb, name), RULES, kept=writer.kept)
        actual = stored(ddb, name, RULES)
        report["scenarios"] += 1
        report["items"] += stats.items_scanned
        report["first_old"] += stats.first_old_used + stats.unscanned_changed
        if actual != expected:
            report["drift"] += 1
        assert actual == expected
    finally:
        ddb.delete_table(TableName=name)


def check_backfill_property(server, examples: int, label: str) -> None:
    """Run ``examples`` scenarios on ``server`` (a DynamoDB Local); fails on any drift."""
    ddb = server.client("dynamodb")
    streams = server.client("dynamodbstreams")
    report = {"scenarios": 0, "drift": 0, "items": 0, "first_old": 0, "killed": 0}

    @scenario_seed(f"backfill {label}")
    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=scenario)
    def scenarios(case):
        run_scenario(ddb, streams, case, report)

    scenarios()
    print(
        f"\nbackfill property {label}: {report['scenarios']} scenarios, "
        f"{report['items']} items scanned, "
        f"{report['first_old']} items counted at their state from the stream, "
        f"{report['killed']} backfills killed and resumed, drift in {report['drift']}"
    )
    soak_dir = os.environ.get("AGGREGATOR_SOAK_DIR")
    if soak_dir:
        Path(soak_dir).mkdir(parents=True, exist_ok=True)
        (Path(soak_dir) / f"backfill-{label.replace('/', '-')}.json").write_text(json.dumps(report))
    assert report["scenarios"] >= examples
    assert report["drift"] == 0
