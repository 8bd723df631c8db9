"""What a backfill refuses, each with one clear error and nothing written to the aggregates:
rules fenced at different points, a resume with other rules or segments, a backfill another
process is running, a rule not deployed yet, a derived rule without its source."""

from __future__ import annotations

import time

import pytest

from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import RuleSet, rule
from aggregator.dev.faults import SimulatedCrash
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.streams import TableStream
from aggregator.operations.backfill import LEASE_SECONDS, Backfill
from tests.integration.harness import deploy, pipeline, put

pytestmark = pytest.mark.integration

R1 = rule("r1", key="ALL")
R2 = rule("r2", key="{owner}")
HIST = rule("hist", source="r2", key="{value}")


def test_rules_deployed_at_different_times_are_backfilled_apart(ddb, streams, table):
    name, arn = table
    put(ddb, name, {"pk": "P1", "sk": "a", "owner": "ann"})
    deploy(ddb, streams, name, arn, RuleSet.of(R1))
    put(ddb, name, {"pk": "P2", "sk": "b", "owner": "bob"})
    both = RuleSet.of(R1, R2)
    deploy(ddb, streams, name, arn, both)  # r2 fenced later than r1
    with pytest.raises(ConfigError, match=r"fenced at different points.*--rules"):
        Backfill(both, TableStream(ddb, streams, name, arn), stream_lag_seconds=0).run()
    assert {s.status for s in Manifest(ddb, name, both.layout).load().values()} == {"pending"}
    for names in (["r1"], ["r2"]):
        Backfill(
            both, TableStream(ddb, streams, name, arn), rule_names=names, stream_lag_seconds=0
        ).run()
    assert {s.status for s in Manifest(ddb, name, both.layout).load().values()} == {"active"}


def test_a_resume_takes_the_same_rules_and_segments_and_waits_for_the_lease(ddb, streams, table):
    name, arn = table
    rules = RuleSet.of(R1, R2)
    for i in range(6):
        put(ddb, name, {"pk": f"P{i}", "sk": "x", "owner": "ann"})
    deploy(ddb, streams, name, arn, rules)

    def killed(items, stats):
        raise SimulatedCrash("killed after the first page")

    with pytest.raises(SimulatedCrash):
        Backfill(
            rules,
            TableStream(ddb, streams, name, arn),
            segments=2,
            page_items=2,
            stream_lag_seconds=0,
            on_page=killed,
        ).run()
    with pytest.raises(ConfigError, match="resume it with --rules r1,r2 --segments 2"):
        Backfill(
            rules, TableStream(ddb, streams, name, arn), segments=3, stream_lag_seconds=0
        ).run()
    with pytest.raises(ConfigError, match=r"resume it with --rules r1,r2 --segments 2"):
        Backfill(
            rules, TableStream(ddb, streams, name, arn), rule_names=["r1"], stream_lag_seconds=0
        ).run()
    with pytest.raises(ConfigError, match="running in another process"):
        Backfill(
            rules, TableStream(ddb, streams, name, arn), segments=2, stream_lag_seconds=0
        ).run()
    later = lambda: time.time() + LEASE_SECONDS + 1  # noqa: E731 - the killed one's lease lapsed
    stats = Backfill(
        rules, TableStream(ddb, streams, name, arn), segments=2, stream_lag_seconds=0, clock=later
    ).run()
    assert stats.resumed


def test_rules_not_deployed_or_derived_without_their_source_are_refused(ddb, streams, table):
    name, arn = table
    rules = RuleSet.of(R1, R2, HIST)
    with pytest.raises(ConfigError, match="no rule is pending"):
        Backfill(rules, TableStream(ddb, streams, name, arn))
    with pytest.raises(ConfigError, match="'r1' is not deployed yet"):
        Backfill(rules, TableStream(ddb, streams, name, arn), rule_names=["r1"])
    deploy(ddb, streams, name, arn, rules)
    with pytest.raises(ConfigError, match="'hist' is derived from 'r2'"):
        Backfill(rules, TableStream(ddb, streams, name, arn), rule_names=["r1", "hist"])
    with pytest.raises(ConfigError, match="no rule named 'nope'"):
        Backfill(rules, TableStream(ddb, streams, name, arn), rule_names=["nope"])
    stats = Backfill(rules, TableStream(ddb, streams, name, arn), stream_lag_seconds=0).run()
    assert not stats.resumed
    states = Manifest(ddb, name, rules.layout).load()
    assert {n: s.status for n, s in states.items()} == {
        "r1": "active",
        "r2": "active",
        "hist": "active",
    }
    with pytest.raises(ConfigError, match="'r1' is already backfilled"):
        Backfill(rules, TableStream(ddb, streams, name, arn), rule_names=["r1"])


def test_rules_counted_without_fences_cannot_be_backfilled(ddb, streams, table):
    name, arn = table
    rules = RuleSet.of(R1)
    put(ddb, name, {"pk": "P1", "sk": "a"})
    # a handler whose events name no shard (no tumbling windows) counts the rule unfenced
    runner = pipeline(
        ddb,
        streams,
        name,
        arn,
        rules=rules,
        lifecycle=True,
        window_seconds=None,
        mode="at-least-once",
    ).runner
    runner.poll_interval = 0.005
    runner.run()
    assert Manifest(ddb, name, rules.layout).load()["r1"].unfenced
    with pytest.raises(ConfigError, match="without fences: a backfill could not be exact"):
        Backfill(rules, TableStream(ddb, streams, name, arn), stream_lag_seconds=0).run()


def test_a_page_too_large_to_store_names_the_option_that_shrinks_it(
    ddb, streams, table, monkeypatch
):
    from aggregator.operations.backfill import segments as segments_module

    name, arn = table
    rules = RuleSet.of(R2)
    for i in range(5):
        put(ddb, name, {"pk": f"P{i}", "sk": "x", "owner": f"o{i}"})
    deploy(ddb, streams, name, arn, rules)
    monkeypatch.setattr(segments_module, "MAX_PAGE_RECORD_BYTES", 10)
    with pytest.raises(ConfigError, match=r"progress record, over 10 .*--page-items"):
        Backfill(rules, TableStream(ddb, streams, name, arn), stream_lag_seconds=0).run()


def test_a_derived_rule_rides_along_with_its_source_and_one_that_cannot_is_skipped(
    ddb, streams, table
):
    name, arn = table
    put(ddb, name, {"pk": "P1", "sk": "a", "owner": "ann"})
    put(ddb, name, {"pk": "P2", "sk": "b", "owner": "ann"})
    rules = RuleSet.of(R1, R2, HIST)
    deploy(ddb, streams, name, arn, rules)
    # naming the source alone still backfills its pending derived rule: once the source is
    # active, nothing could complete it
    backfill = Backfill(
        rules, TableStream(ddb, streams, name, arn), rule_names=["r2"], stream_lag_seconds=0
    )
    assert (backfill.rule_names, backfill.carried) == (["r2"], ["hist"])
    backfill.run()
    states = Manifest(ddb, name, rules.layout).load()
    assert {n: s.status for n, s in states.items()} == {
        "r1": "pending",
        "r2": "active",
        "hist": "active",
    }
    # a new derived rule of the active source cannot be backfilled: every other pending rule
    # still is, and the derived one is named in what was skipped
    late = rule("late_hist", source="r2", key="{value}")
    more = RuleSet.of(R1, R2, HIST, late)
    deploy(ddb, streams, name, arn, more)
    backfill = Backfill(more, TableStream(ddb, streams, name, arn), stream_lag_seconds=0)
    assert backfill.rule_names == ["r1"]
    assert [n for n, _ in backfill.skipped] == ["late_hist"]
    assert "'late_hist' is derived from 'r2'" in backfill.skipped[0][1]
    backfill.run()
    states = Manifest(ddb, name, rules.layout).load()
    assert (states["r1"].status, states["late_hist"].status) == ("active", "pending")
    # named, it is refused as before
    with pytest.raises(ConfigError, match="'late_hist' is derived from 'r2'"):
        Backfill(more, TableStream(ddb, streams, name, arn), rule_names=["late_hist"])
