"""The table layout: declared once in a rule set's ``table:`` section, validated, and used by
every component (keys, self-write detection, stream filters)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from aggregator.core.engine import Engine
from aggregator.core.exceptions import RuleError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.records import parse_record
from aggregator.core.rules import RuleSet, load_rules, rule
from aggregator.runtime.filters import filter_criteria
from tests.factories import stream_record

RULES = (
    "rules:\n  - {name: total, key: ALL}\n  - {name: per_player, key: '{PK}', leaderboard: true}\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_without_a_table_section(tmp_path):
    assert load_rules(write(tmp_path, "r.yaml", RULES)).layout == DEFAULT_LAYOUT
    assert (DEFAULT_LAYOUT.partition_key, DEFAULT_LAYOUT.sort_key) == ("pk", "sk")


def test_one_file_may_hold_only_the_table_section(tmp_path):
    write(tmp_path, "a_rules.yaml", RULES)
    write(tmp_path, "table.yaml", "table: {partition_key: PK, sort_key: SK, ttl_attribute: exp}")
    rules = load_rules(tmp_path)
    assert (rules.layout.partition_key, rules.layout.sort_key) == ("PK", "SK")
    assert rules.layout.ttl_attribute == "exp"
    assert [r.name for r in rules] == ["total", "per_player"]


def test_only_one_file_may_declare_the_layout(tmp_path):
    write(tmp_path, "a.yaml", RULES + "table: {partition_key: PK, sort_key: SK}\n")
    write(tmp_path, "b.yaml", "table: {partition_key: X, sort_key: Y}\n")
    with pytest.raises(RuleError) as info:
        load_rules(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'b.yaml'}: field 'table': the table layout is already declared in "
        f"{tmp_path / 'a.yaml'}; declare it in one file of the rule set"
    )


@pytest.mark.parametrize(
    ("table", "field", "message"),
    [
        ("{partition_key: ''}", "table.partition_key", "at least 1 character"),
        ("{partition_key: K, sort_key: K}", "table", "both 'K'"),
        ("{partition_key: key, sort_key: SK}", "table", "also an attribute the framework writes"),
        ("{partition_key: PK, sort_key: value}", "table", "the value_attribute"),
        ("{partition_key: PK, sort_key: SK, ttl_attribute: lb}", "table", "must be different"),
        ("{aggregates_pk: X, runner_pk: X}", "table", "must differ"),
        ("{partition_key: PK, sort_key: reason}", "table", "also an attribute the framework"),
        ("{partition_key: state, sort_key: SK}", "table", "also an attribute the framework"),
        ("{partition_key: PK, sort_key: SK, value_attribute: key}", "table", "already writes"),
        ("{partition_key: PK, sort_key: SK, ttl_attribute: bucket}", "table", "already writes"),
        ("{partition_key: 'ck#a', sort_key: SK}", "table", "checkpoints"),
        ("{partition_key: PK, sort_key: SK, colour: red}", "table.colour", "Extra inputs"),
        ("[PK, SK]", "table", "valid dictionary"),
    ],
)
def test_invalid_layouts_name_the_file_and_field(tmp_path, table, field, message):
    path = write(tmp_path, "r.yaml", RULES + f"table: {table}\n")
    with pytest.raises(RuleError) as info:
        load_rules(path)
    assert str(info.value).startswith(f"{path}: field '{field}': ")
    assert message in str(info.value)


def test_a_file_with_neither_rules_nor_table_is_an_error(tmp_path):
    with pytest.raises(RuleError, match="field 'rules': Field required"):
        load_rules(write(tmp_path, "r.yaml", "version: 1\n"))


def test_the_engine_uses_the_rule_sets_layout():
    layout = TableLayout(partition_key="PK", sort_key="SK")
    rules = RuleSet.of(rule("count", key="ALL"), layout=layout)
    own = stream_record("INSERT", new={"PK": "AGGREGATES", "SK": "count#ALL"}, keys=("PK", "SK"))
    user = stream_record("INSERT", new={"PK": "u", "SK": "1"}, seq=101, keys=("PK", "SK"))
    batch = Engine(rules).process([parse_record(own), parse_record(user)])
    assert batch.self_writes == 1 and list(batch.deltas) == ["count#ALL"]
    # the same record is a user item under the default layout's key names
    assert (
        Engine(RuleSet.of(rule("count", key="ALL"))).process([parse_record(own)]).self_writes == 0
    )


def test_lineage_keeps_the_layout():
    layout = TableLayout(partition_key="PK", sort_key="SK")
    rules = RuleSet.of(
        rule("per", key="{PK}"), rule("hist", source="per", key="{value}"), layout=layout
    )
    assert rules.lineage("hist").layout == layout


def test_stream_filters_use_the_layouts_names():
    layout = TableLayout(partition_key="PK", sort_key="SK", aggregates_pk="AGG")
    rules = RuleSet.of(
        rule("per", key="{PK}"), rule("hist", source="per", key="{value}"), layout=layout
    )
    patterns = [json.loads(f["Pattern"]) for f in filter_criteria(rules)["Filters"]]
    assert patterns[0] == {
        "dynamodb": {
            "Keys": {
                "PK": {
                    "S": [{"anything-but": ["AGG", "AGGREGATOR#RUNNER", "AGGREGATOR#DEAD_LETTERS"]}]
                }
            }
        }
    }
    assert patterns[1]["dynamodb"]["Keys"] == {
        "PK": {"S": ["AGG"]},
        "SK": {"S": [{"prefix": "per#"}]},
    }


def test_layouts_are_frozen_and_validated_in_python_too():
    with pytest.raises(ValidationError):
        TableLayout(partition_key="rule")
    with pytest.raises(ValidationError):
        DEFAULT_LAYOUT.partition_key = "x"  # type: ignore[misc]
