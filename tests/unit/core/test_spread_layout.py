"""Spread partitions (issue 32): the aggregates of a rule and the control items over several
partition key values, chosen by a stable hash; recognised as the framework's; filtered out of the
stream; within the role's leading keys."""

from __future__ import annotations

import json
import zlib

import pytest
from pydantic import ValidationError

from aggregator.cli.template import render_regions
from aggregator.core.exceptions import RuleError
from aggregator.core.layout import TableLayout, aggregate_home
from aggregator.core.lifecycle import rule_fingerprint
from aggregator.core.rules import RuleSet, load_rules, rule
from aggregator.deploy.filters import filter_criteria
from tests.unit.core.test_layout import _matches

SPREAD = TableLayout(aggregate_partitions=16, control_partitions=4)


def test_every_item_of_one_key_shares_its_partition_key_value():
    r = RuleSet.of(rule("route", key="{o}#{d}"), layout=SPREAD).rules[0]
    assert (r.partitions, r.key_fields) == (16, 2)
    home = "route#JFK#LAX"
    expected = f"AGGREGATES#{zlib.crc32(home.encode()) % 16}"
    for sort_key in (home, f"{home}#hour#2013-01-01T05", f"{home}#hour#2013-01-01T05#v12"):
        assert SPREAD.aggregate_partition(sort_key, r.spread, r.key_fields) == expected
    # escaped values never add a field
    assert aggregate_home("route#J%23FK#LAX#minute#5", 2) == "route#J%23FK#LAX"


def test_one_partition_is_the_original_layout():
    assert SPREAD.aggregate_partition("total#ALL", 1, 1) == "AGGREGATES"
    assert SPREAD.aggregate_partitions_of(1) == ("AGGREGATES",)
    assert TableLayout().control_partition("fence#shardId-1") == "AGGREGATOR#CONTROL"
    assert TableLayout().control_partition_values == ("AGGREGATOR#CONTROL",)


def test_keys_spread_evenly_over_the_values():
    counts: dict[str, int] = {}
    for n in range(16_000):
        value = SPREAD.aggregate_partition(f"likes#post{n}", 16, 1)
        counts[value] = counts.get(value, 0) + 1
    assert sorted(counts) == sorted(SPREAD.aggregate_partitions_of(16))
    assert max(counts.values()) < 1.1 * 1000 and min(counts.values()) > 0.9 * 1000


def test_spread_values_are_the_frameworks_and_partials_stay_apart():
    def keys(pk: str, sk: str) -> dict[str, dict[str, str]]:
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    assert SPREAD.is_reserved(keys("AGGREGATES#7", "likes#p1"))
    assert SPREAD.aggregate_sort_key(keys("AGGREGATES#7", "likes#p1")) == "likes#p1"
    assert SPREAD.is_reserved(keys("AGGREGATOR#CONTROL#3", "fence#s"))
    assert SPREAD.is_control_partition("AGGREGATOR#CONTROL#3")
    assert SPREAD.aggregate_sort_key(keys("AGGREGATOR#CONTROL#3", "fence#s")) is None
    # a partial's collection names its rule (which starts with a letter): never a spread value
    partial = keys("AGGREGATES#likes#p1", "PARTIAL#003")
    assert SPREAD.partial_total(partial) == "likes#p1"
    assert SPREAD.reserved_partition("AGGREGATES#likes#p1") is None
    assert SPREAD.aggregate_sort_key(partial) is None
    # the application's own items
    assert not SPREAD.is_reserved(keys("AGGREGATES-x#7", "a"))
    assert not SPREAD.is_reserved(keys("USER#7", "a"))
    assert SPREAD.reserved_partition("AGGREGATES#") is None


def test_control_items_spread_but_the_manifest_stays():
    values = {SPREAD.control_partition(f"fence#shardId-{n}") for n in range(200)}
    assert values == set(SPREAD.control_partition_values[1:])
    assert SPREAD.control_partition_values[0] == "AGGREGATOR#CONTROL"


def test_partitions_from_the_table_or_the_rule(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(
        "table:\n  aggregate_partitions: 8\nrules:\n"
        "  - {name: a, key: '{x}'}\n  - {name: b, key: '{x}', partitions: 2}\n"
    )
    assert [r.spread for r in load_rules(path)] == [8, 2]
    # where the aggregates are kept is part of the definition: a change needs a rebuild
    a1, a8 = rule("a", key="{x}"), rule("a", key="{x}", partitions=8)
    assert rule_fingerprint(a1) == rule_fingerprint(rule("a", key="{x}", partitions=1))
    assert rule_fingerprint(a1) != rule_fingerprint(a8)


@pytest.mark.parametrize(
    "fields",
    [{"aggregate_partitions": 0}, {"aggregate_partitions": 101}, {"control_partitions": 33}],
)
def test_counts_are_bounded(fields):
    with pytest.raises(ValidationError):
        TableLayout(**fields)


def test_a_table_without_a_sort_key_needs_no_spread():
    with pytest.raises(ValidationError, match="need a table with a sort key"):
        TableLayout(sort_key=None, aggregate_partitions=4)
    with pytest.raises(RuleError, match="field 'partitions'"):
        RuleSet.of(rule("a", key="{x}", partitions=4), layout=TableLayout(sort_key=None))


def test_stream_filters_drop_every_spread_value_and_pass_derived_sources():
    rules = RuleSet.of(
        rule("per", key="{player}", partitions=16),
        rule("hist", source="per", key="{value}"),
        layout=SPREAD,
    )
    patterns = [json.loads(f["Pattern"]) for f in filter_criteria(rules)["Filters"]]

    def passes(pk: str, sk: str) -> bool:
        record = {"dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": sk}}}}
        return any(_matches(p, record) for p in patterns)

    assert passes("PLAYER#ana", "x")
    for n in range(16):
        assert passes(f"AGGREGATES#{n}", "per#ana")  # a derived rule's input
        assert not passes(f"AGGREGATES#{n}", "hist#2")
    for n in range(4):
        assert not passes(f"AGGREGATOR#CONTROL#{n}", "fence#s")
    assert not passes("AGGREGATOR#CONTROL", "manifest")


def test_the_roles_leading_keys_cover_the_spread_values():
    regions = render_regions(RuleSet.of(rule("per", key="{p}"), layout=SPREAD))
    aggregates = regions["aggregates-leading-keys"]["Condition"]["ForAllValues:StringLike"]
    control = regions["control-leading-keys"]["Condition"]["ForAllValues:StringLike"]
    assert aggregates["dynamodb:LeadingKeys"] == ["AGGREGATES", "AGGREGATES#*"]
    assert control["dynamodb:LeadingKeys"] == ["AGGREGATOR#CONTROL", "AGGREGATOR#CONTROL#*"]
    single = render_regions(RuleSet.of(rule("per", key="{p}")))
    assert single["aggregates-leading-keys"]["Condition"]["ForAllValues:StringEquals"] == {
        "dynamodb:LeadingKeys": ["AGGREGATES"]
    }


def test_the_tables_spread_is_every_rules_that_does_not_say_whatever_reads_it():
    rules = RuleSet.of(
        rule("per", key="{player}"),
        rule("hist", source="per", key="{value}"),
        rule("tally", target={"partition_key": "{post}", "sort_key": "META", "attribute": "n"}),
        rule("kept", key="{x}", partitions=1),
        layout=SPREAD,
    )
    assert {r.name: r.spread for r in rules} == {"per": 16, "hist": 16, "tally": 16, "kept": 1}
    # a rule's place does not depend on the rules that read it
    alone = RuleSet.of(rule("per", key="{player}"), layout=SPREAD)
    assert rule_fingerprint(alone.rules[0]) == rule_fingerprint(rules.rules[0])


def test_stream_filters_pass_a_source_at_one_value_when_other_rules_spread():
    rules = RuleSet.of(
        rule("per", key="{player}", partitions=1),
        rule("hist", source="per", key="{value}"),
        rule("best", key="{player}", leaderboard=True, leaderboard_store="list", partitions=1),
        rule("wide", key="{player}"),
        layout=SPREAD,
    )
    patterns = [json.loads(f["Pattern"]) for f in filter_criteria(rules)["Filters"]]

    def passes(pk: str, sk: str) -> bool:
        record = {"dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": sk}}}}
        return any(_matches(p, record) for p in patterns)

    assert passes("AGGREGATES", "per#ana")  # the source, at one value
    assert passes("AGGREGATES", "best#ana")  # a top-listed rule, at one value
    assert not passes("AGGREGATES", "wide#ana")
    for n in range(16):
        assert not passes(f"AGGREGATES#{n}", "wide#ana")
        assert not passes(f"AGGREGATES#{n}", "hist#2")


def test_a_rules_spread_without_a_sort_key_names_the_file_rule_and_field(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(
        "table: {partition_key: PK, sort_key: null}\n"
        "rules:\n  - {name: c, key: '{x}', partitions: 4}\n"
    )
    with pytest.raises(RuleError) as info:
        load_rules(path)
    assert str(info.value).startswith(
        f"{path}: rule 'c', field 'partitions': needs a table with a sort key"
    )


@pytest.mark.parametrize("value", [True, "8"])
def test_the_tables_counts_are_whole_numbers_not_booleans_or_text(tmp_path, value):
    with pytest.raises(ValidationError):
        TableLayout(aggregate_partitions=value)
