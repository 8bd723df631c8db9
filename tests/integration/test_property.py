"""Property: under random writes and random faults, every aggregate equals the rules evaluated
over the table's final items (TTL-deleted items still count for ``ttl_deletes: keep`` rules),
including a windowed rule (hour and minute buckets of an event time that moves between buckets)
and two rules derived from another rule's aggregates (a histogram and a distinct count).

CI runs ``AGGREGATOR_PROPERTY_EXAMPLES`` scenarios (default 100). A longer soak::

    make soak            # AGGREGATOR_PROPERTY_EXAMPLES=1000, prints scenarios and drift
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregator.faults import SimulatedCrash
from aggregator.records import TTL_PRINCIPAL
from aggregator.table import create_table
from tests.integration.harness import (
    WIDE_RULES,
    delete,
    expected_from_items,
    final_items,
    pipeline,
    put,
    stored,
)

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("AGGREGATOR_PROPERTY_EXAMPLES", "100"))
_names = itertools.count()
REPORT = {"scenarios": 0, "drift": 0, "records": 0, "faults": 0}

HOUR = 1_700_000_000 // 3600 * 3600  # an hour boundary; event times straddle it
item_ids = st.integers(0, 5)
put_op = st.tuples(
    st.just("put"),
    item_ids,
    st.sampled_from(["ann", "bob", "cyd"]),
    st.integers(-3, 9),
    st.sampled_from(["ruby", "opal", None]),
    st.sampled_from([None, HOUR - 61, HOUR - 1, HOUR, HOUR + 59, HOUR + 60]),
)
delete_op = st.tuples(st.sampled_from(["delete", "ttl_delete"]), item_ids)
ops = st.lists(st.one_of(put_op, put_op, delete_op), min_size=1, max_size=30)
scenario = st.fixed_dictionaries(
    {
        "ops": ops,
        "mode": st.sampled_from(["exactly-once", "window"]),
        "batch_size": st.integers(1, 7),
        "crashes": st.lists(st.tuples(st.integers(1, 12), st.integers(0, 3)), max_size=3),
        "duplicates": st.sets(st.integers(1, 12), max_size=4),
        "bisect": st.booleans(),
        "kill_after": st.one_of(st.none(), st.integers(1, 6)),
        "throttle": st.dictionaries(
            st.sampled_from(
                ["per_owner#ann", "paths#TOTAL", "gems_by_kind#opal", "active_owners#ACTIVE"]
            ),
            st.integers(1, 2),
            max_size=2,
        ),
    }
)


def mark_ttl(record: dict[str, Any]) -> dict[str, Any]:
    """Turn deletes of items flagged ``expired`` into TTL deletes (DynamoDB Local has none)."""
    old = record["dynamodb"].get("OldImage") or {}
    if record["eventName"] == "REMOVE" and "expired" in old:
        record = {**record, "userIdentity": {"type": "Service", "principalId": TTL_PRINCIPAL}}
    return record


def apply_ops(ddb, name: str, operations) -> list[dict[str, Any]]:
    """Write the operations; returns the last images of TTL-deleted items."""
    current: dict[int, dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    for op in operations:
        if op[0] == "put":
            _, i, owner, points, kind, ts = op
            item = {"pk": f"P{i}", "sk": f"PATH#{i}", "owner": owner, "points": points}
            if kind:
                item["kind"] = kind
            if ts is not None:
                item["ts"] = ts
            put(ddb, name, item)
            current[i] = item
        elif op[1] in current:
            i = op[1]
            if op[0] == "ttl_delete":
                flagged = {**current[i], "expired": True}
                put(ddb, name, flagged)
                kept.append(flagged)
            delete(ddb, name, f"P{i}", f"PATH#{i}")
            del current[i]
    return kept


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=scenario)
def test_aggregates_equal_rules_over_final_items(ddb, streams, case):
    name = f"prop-{os.getpid()}-{next(_names)}"
    arn = create_table(ddb, name)
    try:
        kept = apply_ops(ddb, name, case["ops"])
        crashes = dict(case["crashes"])
        options = {
            "mode": case["mode"],
            "batch_size": case["batch_size"],
            "window_seconds": 1,
            "throttle": dict(case["throttle"]),
            "throttle_retries": 1,
            "bisect_on_error": case["bisect"],
            "duplicate": lambda n: n in case["duplicates"],
            "crash": lambda n: crashes.get(n),
            "transform": mark_ttl,
            "rules": WIDE_RULES,
        }
        first = pipeline(ddb, streams, name, arn, kill_after_batches=case["kill_after"], **options)
        try:
            stats = first.runner.run()
        except SimulatedCrash:
            # the runner process was killed: a new one resumes from the stored positions
            options["crash"] = lambda n: None
            stats = pipeline(ddb, streams, name, arn, **options).runner.run()
        REPORT["scenarios"] += 1
        REPORT["records"] += stats.records
        REPORT["faults"] += stats.function_errors + stats.retries + stats.duplicates
        expected = expected_from_items(final_items(ddb, name), WIDE_RULES, kept=kept)
        actual = stored(ddb, name, WIDE_RULES)
        if actual != expected:
            REPORT["drift"] += 1
        assert actual == expected
    finally:
        ddb.delete_table(TableName=name)


def test_report_soak_figures():
    """Runs after the property test (file order) and prints what it exercised."""
    print(
        f"\nproperty soak: {REPORT['scenarios']} scenarios, {REPORT['records']} stream records, "
        f"{REPORT['faults']} injected faults and retries, drift in {REPORT['drift']} scenarios"
    )
    assert REPORT["scenarios"] >= EXAMPLES
    assert REPORT["drift"] == 0
