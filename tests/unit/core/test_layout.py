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
from aggregator.deploy.filters import filter_criteria
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
        ("{partition_key: PK, sort_key: SK, colour: red}", "table.colour", "unknown field"),
        ("[PK, SK]", "table", "expected a mapping, got a list"),
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
                    "S": [
                        {
                            "anything-but": [
                                "AGG",
                                "AGGREGATOR#RUNNER",
                                "AGGREGATOR#DEAD_LETTERS",
                                "AGGREGATOR#CONTROL",
                            ]
                        }
                    ]
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


# -- tables with only a partition key ------------------------------------------------------------

PK_ONLY = TableLayout(partition_key="id", sort_key=None)


def test_without_a_sort_key_each_framework_item_has_a_key_of_its_own():
    assert not PK_ONLY.has_sort_key
    assert PK_ONLY.aggregate_key("total#ALL") == {"id": {"S": "AGGREGATES#total#ALL"}}
    assert PK_ONLY.item_key("AGGREGATOR#RUNNER", "arn#s1") == {
        "id": {"S": "AGGREGATOR#RUNNER#arn#s1"}
    }
    assert PK_ONLY.item_fields("AGGREGATOR#DEAD_LETTERS", "s1#0001#r") == {
        "id": "AGGREGATOR#DEAD_LETTERS#s1#0001#r",
        "aggregator_collection": "AGGREGATOR#DEAD_LETTERS",
    }
    key = {"id": {"S": "AGGREGATES#total#ALL"}}
    assert (PK_ONLY.partition_of(key), PK_ONLY.sort_key_of(key)) == ("AGGREGATES", "total#ALL")
    assert PK_ONLY.aggregate_sort_key(key) == "total#ALL" and PK_ONLY.is_reserved(key)
    # the reserved values are prefixes followed by "#": these are the application's items
    for text in ("AGGREGATES", "AGGREGATESX#a", "PLAYER#AGGREGATES#a"):
        user = {"id": {"S": text}}
        assert not PK_ONLY.is_reserved(user) and PK_ONLY.sort_key_of(user) is None
    assert PK_ONLY.partition_of({"id": {"N": "1"}}) is None
    # the full key is the collection index's sort key: 1,024 bytes less "AGGREGATES#"
    assert PK_ONLY.max_sort_text_bytes == 1024 - len("AGGREGATES#")
    assert DEFAULT_LAYOUT.max_sort_text_bytes == 1024


def test_a_layout_without_a_sort_key_loads_from_yaml(tmp_path):
    path = write(tmp_path, "r.yaml", RULES + "table: {partition_key: id, sort_key: null}")
    rules = load_rules(path)
    assert rules.layout == TableLayout(partition_key="id", sort_key=None)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"aggregates_pk": "A", "runner_pk": "A#B"}, "prefixes"),
        ({"aggregates_pk": "x" * 600}, "under 512 bytes"),
        ({"collection_attribute": "lb"}, "must be different"),
        ({"collection_attribute": "rule"}, "already writes"),
        ({"collection_index": "leaderboard"}, "collection_index and leaderboard_index"),
    ],
)
def test_invalid_layouts_without_a_sort_key(fields, message):
    with pytest.raises(ValidationError, match=message):
        TableLayout(partition_key="id", sort_key=None, **fields)


def test_the_engine_tells_framework_items_by_their_prefix_without_a_sort_key():
    rules = RuleSet.of(
        rule("per", key="{player}"), rule("hist", source="per", key="{value}"), layout=PK_ONLY
    )
    own = stream_record(
        "INSERT", new={"id": "AGGREGATOR#DEAD_LETTERS#s#1#r", "rule": "r"}, keys=("id",)
    )
    source = stream_record(
        "INSERT",
        new={"id": "AGGREGATES#per#ana", "value": 2, "rule": "per", "key": "ana"},
        seq=101,
        keys=("id",),
    )
    user = stream_record(
        "INSERT", new={"id": "AGGREGATES-not-ours", "player": "bo"}, seq=102, keys=("id",)
    )
    batch = Engine(rules).process([parse_record(r) for r in (own, source, user)])
    assert batch.self_writes == 1
    assert sorted(batch.deltas) == ["hist#2", "per#bo"]


def test_a_sort_key_text_too_long_for_the_collection_index_is_dead_lettered():
    rules = RuleSet.of(rule("r", key="{player}"), layout=PK_ONLY)
    long = "x" * (1024 - len("AGGREGATES#r#") + 1)  # fits 1,024 bytes alone, not with the prefix
    record = stream_record("INSERT", new={"id": "u", "player": long}, keys=("id",))
    batch = Engine(rules).process([parse_record(record)])
    assert not batch.deltas
    assert batch.failures[0].cause == "limit-exceeded"
    assert "1013-byte limit for a sort key text on a table without a sort key" in (
        batch.failures[0].reason
    )


def _matches(pattern: object, value: object) -> bool:
    """A test twin of Lambda's filter matching, for the rules the framework's patterns use
    (Lambda Developer Guide, "Lambda event filtering"): an object matches when each of its
    fields matches; a list of rules when any does; rules: an exact string, {"prefix"},
    {"anything-but": [...]}, {"exists": bool} (a missing field matches {"exists": false} only)."""
    if isinstance(pattern, dict):
        if not isinstance(value, dict):
            value = {}
        return all(_matches(sub, value.get(field, _MISSING)) for field, sub in pattern.items())
    assert isinstance(pattern, list)
    for rule_ in pattern:
        if isinstance(rule_, dict) and "exists" in rule_:
            matched = rule_["exists"] == (value is not _MISSING)
        elif value is _MISSING or not isinstance(value, str):
            matched = False
        elif isinstance(rule_, str):
            matched = rule_ == value
        elif "prefix" in rule_:
            matched = value.startswith(rule_["prefix"])
        else:
            matched = value not in rule_["anything-but"]
        if matched:
            return True
    return False


_MISSING = object()


@pytest.mark.parametrize("layout", [DEFAULT_LAYOUT, PK_ONLY], ids=["pk-sk", "pk-only"])
def test_stream_filters_pass_the_applications_records_and_derived_sources_only(layout):
    rules = RuleSet.of(
        rule("per", key="{player}"), rule("hist", source="per", key="{value}"), layout=layout
    )
    patterns = [json.loads(f["Pattern"]) for f in filter_criteria(rules)["Filters"]]

    def record(partition: str | None, sort_text: str, *, new: bool = True, old: bool = False):
        if partition is None:  # the application's item
            fields = {layout.partition_key: sort_text}
            if layout.sort_key:
                fields[layout.sort_key] = "1"
        else:
            fields = layout.item_fields(partition, sort_text)
        image = {k: {"S": v} for k, v in fields.items()}
        keys = {k: v for k, v in image.items() if k in (layout.partition_key, layout.sort_key)}
        body = {"Keys": keys}
        if new:
            body["NewImage"] = {**image, "value": {"N": "1"}}
        if old:
            body["OldImage"] = {**image, "value": {"N": "1"}}
        return {"dynamodb": body}

    def passes(r) -> bool:
        return any(_matches(p, r) for p in patterns)

    assert passes(record(None, "PLAYER#ana"))
    assert passes(record(None, "PLAYER#ana", new=False, old=True))  # a delete
    assert passes(record(None, "AGGREGATES-lookalike"))
    assert passes(record("AGGREGATES", "per#ana", old=True))  # a derived rule's input
    assert passes(record("AGGREGATES", "per#ana", new=False, old=True))
    assert not passes(record("AGGREGATES", "hist#2"))
    assert not passes(record("AGGREGATES", "hist#2", new=False, old=True))  # a TTL delete
    assert not passes(record("AGGREGATOR#DEAD_LETTERS", "s#1#per"))
    assert not passes(record("AGGREGATOR#RUNNER", "arn#s"))
    assert not passes(record("AGGREGATES", "perx#1"))  # another rule sharing the prefix "per"


@pytest.mark.parametrize("layout", [DEFAULT_LAYOUT, PK_ONLY], ids=["pk-sk", "pk-only"])
def test_stream_filters_pass_the_delete_of_a_target_item_with_its_checkpoint_map(layout):
    """The ``REMOVE`` of an item that a target rule writes carries its checkpoint map to the
    rule's ledger (aggregator.core.ledger_carries): the first filter must let it through."""
    target = {"partition_key": "{parent}", "attribute": "n"}
    if layout.sort_key:
        target["sort_key"] = "META"
    rules = RuleSet.of(rule("t", match={"parent": {"exists": True}}, target=target), layout=layout)
    patterns = [json.loads(f["Pattern"]) for f in filter_criteria(rules)["Filters"]]
    keys = {layout.partition_key: {"S": "T1"}}
    if layout.sort_key:
        keys[layout.sort_key] = {"S": "META"}
    old = {
        **keys,
        "n": {"N": "2"},
        layout.target_checkpoints_attribute: {"M": {"a": {"B": "AA=="}}},
    }
    record = {"dynamodb": {"Keys": keys, "OldImage": old}}
    assert any(_matches(p, record) for p in patterns)
    framework = layout.item_fields(layout.aggregates_pk, "t#T1#META")
    image = {k: {"S": v} for k, v in framework.items()}
    ledger = {
        "dynamodb": {"Keys": {k: v for k, v in image.items() if k in keys}, "OldImage": image}
    }
    assert not any(_matches(p, ledger) for p in patterns)  # the ledger's own delete does not
