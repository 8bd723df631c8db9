"""Fault injection on DynamoDB Local: every aggregate stays exact (exactly-once modes)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from aggregator.dev.faults import SimulatedCrash
from tests.integration.harness import (
    delete,
    expected_from_items,
    final_items,
    pipeline,
    put,
    standard_workload,
    stored,
)

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]

MODES = ["exactly-once", "window"]


def assert_exact(ddb, name):
    assert stored(ddb, name) == expected_from_items(final_items(ddb, name))


@pytest.mark.parametrize("mode", MODES)
def test_crash_after_some_updates_then_whole_batch_retried(ddb, streams, table, mode):
    name, arn = table
    standard_workload(ddb, name)
    # the first three invocations that write die after 2 updates landed (in window mode those
    # are the window flushes)
    holder = {}
    p = pipeline(
        ddb,
        streams,
        name,
        arn,
        mode=mode,
        crash=lambda n: 2 if holder["client"].crashes < 3 else None,
    )
    holder["client"] = p.client
    stats = p.runner.run()
    assert p.client.crashes == 3
    assert stats.function_errors == 3
    assert_exact(ddb, name)


@pytest.mark.parametrize("mode", MODES)
def test_same_batch_delivered_twice(ddb, streams, table, mode):
    name, arn = table
    standard_workload(ddb, name)
    p = pipeline(ddb, streams, name, arn, mode=mode, duplicate=lambda n: True)
    stats = p.runner.run()
    assert stats.duplicates >= 5
    assert_exact(ddb, name)
    if mode == "exactly-once":
        # every duplicate found its items already applied
        assert stats.write.already_applied >= stats.duplicates


def test_bisected_retry(ddb, streams, table):
    name, arn = table
    standard_workload(ddb, name)
    p = pipeline(
        ddb,
        streams,
        name,
        arn,
        batch_size=10,
        bisect_on_error=True,
        crash=lambda n: 3 if n in (1, 2) else None,
    )
    stats = p.runner.run()
    assert stats.function_errors == 2
    assert any("function error" in line for line in p.faults.log)
    assert_exact(ddb, name)


def test_retry_from_reported_failure_with_a_longer_batch(ddb, streams, table):
    name, arn = table
    standard_workload(ddb, name)
    # ann's per-owner aggregate is throttled past the writer's retries twice: the handler reports
    # batchItemFailures from ann's first record; the runner re-reads from there, and that batch
    # reaches past the end of the failed one
    p = pipeline(
        ddb, streams, name, arn, batch_size=8, throttle={"per_owner#ann": 2}, throttle_retries=0
    )
    stats = p.runner.run()
    assert stats.retries == 2
    assert stats.write.failed_items == 2
    assert stats.write.conditional_recoveries >= 1  # items past the failure point were protected
    assert_exact(ddb, name)


def test_throttling_absorbed_by_writer_retries(ddb, streams, table):
    name, arn = table
    standard_workload(ddb, name)
    p = pipeline(
        ddb, streams, name, arn, throttle={"paths#TOTAL": 2, "points#bob": 1}, throttle_retries=3
    )
    stats = p.runner.run()
    assert stats.write.throttle_retries == 3
    assert stats.retries == 0 and stats.write.failed_items == 0
    assert_exact(ddb, name)


def test_key_cancelling_within_batch_next_to_a_failure(ddb, streams, table):
    name, arn = table
    # r1 adds to 'gems_by_kind#opal', r2 (bob) fails, r3 removes r1's gem again: opal sums to 0
    put(ddb, name, {"pk": "X", "sk": "GEM#1", "kind": "opal"})
    put(ddb, name, {"pk": "P1", "sk": "PATH#1", "owner": "bob", "points": 3})
    delete(ddb, name, "X", "GEM#1")
    put(ddb, name, {"pk": "P1", "sk": "PATH#2", "owner": "cyd", "points": 1})
    p = pipeline(
        ddb, streams, name, arn, batch_size=10, throttle={"per_owner#bob": 1}, throttle_retries=0
    )
    stats = p.runner.run()
    assert stats.retries == 1
    # the retried batch starts at bob's record and holds only the retraction of the opal gem;
    # the zero-sum write's checkpoint stops it from being applied a second time
    assert stored(ddb, name)["gems_by_kind"] == {}
    assert_exact(ddb, name)


@pytest.mark.parametrize("mode", MODES)
def test_runner_killed_and_restarted_mid_stream(ddb, streams, table, mode):
    name, arn = table
    standard_workload(ddb, name)
    first = pipeline(ddb, streams, name, arn, mode=mode, kill_after_batches=4)
    with pytest.raises(SimulatedCrash):
        first.runner.run()
    partial = stored(ddb, name)
    assert partial != expected_from_items(final_items(ddb, name))  # really mid-stream
    # a new runner (new process) resumes from the positions kept in the table
    second = pipeline(ddb, streams, name, arn, mode=mode)
    second.runner.run()
    assert_exact(ddb, name)


def test_poison_record_in_the_middle_of_a_batch(ddb, streams, table):
    name, arn = table
    put(ddb, name, {"pk": "P1", "sk": "PATH#1", "owner": "ann", "points": 2})
    put(ddb, name, {"pk": "P1", "sk": "PATH#2", "owner": "ann", "points": "lots"})  # poison
    put(ddb, name, {"pk": "P2", "sk": "PATH#3", "owner": "bob", "points": 5})
    p = pipeline(ddb, streams, name, arn, batch_size=10)
    stats = p.runner.run()
    assert stats.retries == 0 and stats.write.dead_letters == 1
    # everything but the poison record's points rule is applied
    assert stored(ddb, name) == {
        "paths": {"TOTAL": Decimal(3)},
        "per_owner": {"ann": Decimal(2), "bob": Decimal(1)},
        "points": {"ann": Decimal(2), "bob": Decimal(5)},
        "gems_by_kind": {},
    }
    letters = ddb.query(
        TableName=name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "AGGREGATOR#DEAD_LETTERS"}},
    )["Items"]
    assert [(i["rule"]["S"], i["reason"]["S"]) for i in letters] == [
        ("points", "NewImage: delta attribute 'points' is str, not a number")
    ]


def test_at_least_once_overcounts_under_the_same_duplicate_delivery(ddb, streams, table):
    """The control: the plain ADD mode double-counts what the checkpointed modes keep exact."""
    name, arn = table
    put(ddb, name, {"pk": "P1", "sk": "PATH#1", "owner": "ann", "points": 2})
    p = pipeline(ddb, streams, name, arn, mode="at-least-once", duplicate=lambda n: n == 1)
    p.runner.run()
    assert stored(ddb, name)["paths"] == {"TOTAL": Decimal(2)}
