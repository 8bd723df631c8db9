"""Rules with a ``target`` (a sum kept on an application item): what loads and what is refused,
naming the rule and field; what the engine makes of an image; the window state keeps the
target."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from aggregator.core.batch_state import decode_batch, encode_batch
from aggregator.core.engine import Engine
from aggregator.core.exceptions import FailureCause, RuleError
from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import rule_fingerprint
from aggregator.core.records import StreamRecord
from aggregator.core.rules import RuleSet, load_rules, rule
from aggregator.dynamodb.targets import rule_token, target_token
from tests.factories import ddb_json

LAYOUT = TableLayout(partition_key="PK", sort_key="SK")
TALLY = {"partition_key": "{PK}", "sort_key": "META", "attribute": "likeTally"}


def like_tally(**fields):
    return rule("like_tally", match={"SK": {"prefix": "LIKE#"}}, target=TALLY, **fields)


def problems(*rules, layout=LAYOUT) -> list[str]:
    with pytest.raises(RuleError) as caught:
        RuleSet.of(*rules, layout=layout)
    return str(caught.value).splitlines()


def record(seq: int, event: str, old: dict | None, new: dict | None) -> StreamRecord:
    body: dict = {"SequenceNumber": str(seq), "Keys": ddb_json({"PK": "x", "SK": "y"})}
    if old is not None:
        body["OldImage"] = ddb_json(old)
    if new is not None:
        body["NewImage"] = ddb_json(new)
    return StreamRecord({"eventName": event, "dynamodb": body})


def test_a_target_rule_is_keyed_by_its_target_and_reads_its_templates() -> None:
    r = like_tally()
    assert r.key.template == "{PK}#META"
    assert r.attributes() == {"PK", "SK"}
    (c,) = r.contributions({"PK": "POST#a#1", "SK": "LIKE#USER#7"})
    # the aggregate key escapes '#', the target key is the raw value
    assert (c.key, c.display, c.amount, c.target) == (
        "POST%23a%231#META",
        "POST#a#1#META",
        Decimal(1),
        ("POST#a#1", "META"),
    )
    assert r.contributions({"PK": "POST#1", "SK": "META"}) == []


def test_the_fingerprint_names_the_target_attribute() -> None:
    other = rule(
        "like_tally", match={"SK": {"prefix": "LIKE#"}}, target={**TALLY, "attribute": "n"}
    )
    assert rule_fingerprint(like_tally()) != rule_fingerprint(other)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"key": "{PK}"}, "field 'key': a rule with a target is keyed by its target item"),
        ({"kind": "max", "delta": {"attribute": "n"}}, "field 'kind': a rule with a target"),
        ({"leaderboard": True}, "field 'leaderboard': a rule with a target cannot have"),
        (
            {"window": {"time": "t", "unit": "epoch_seconds", "granularities": ["hour"]}},
            "field 'window': a rule with a target cannot have window",
        ),
    ],
)
def test_fields_a_target_rule_cannot_have_are_refused_by_name(fields, expected) -> None:
    with pytest.raises(RuleError) as caught:
        like_tally(**fields)
    assert str(caught.value).startswith(f"<python>: rule 'like_tally', {expected}")


def test_target_problems_on_the_table_layout_name_rule_and_field() -> None:
    no_sort = rule("a", target={"partition_key": "{PK}", "attribute": "n"})
    assert problems(no_sort) == [
        "<python>: rule 'a', field 'target': the table has a sort key ('SK'): give the "
        "target's sort_key too"
    ]
    pk_only = TableLayout(partition_key="PK", sort_key=None)
    assert problems(like_tally(), layout=pk_only) == [
        "<python>: rule 'like_tally', field 'target.sort_key': the table has no sort key (table: "
        "sort_key: null): leave sort_key out"
    ]
    reserved = rule("r", target={**TALLY, "partition_key": "AGGREGATES"})
    assert problems(reserved) == [
        "<python>: rule 'r', field 'target.partition_key': 'AGGREGATES' is a partition the "
        "framework reserves; a target is an application item"
    ]
    # one error, not a feedback cycle on top (the rule matches on SK too)
    on_key = rule("k", match={"SK": {"prefix": "L#"}}, target={**TALLY, "attribute": "SK"})
    assert problems(on_key) == [
        "<python>: rule 'k', field 'target.attribute': 'SK' is not the rule's to write: it is "
        "the table's sort key"
    ]
    # the layout's own attributes: a count in the TTL attribute would expire the item
    for attribute, why in (
        ("ttl", "it is the table's TTL attribute (a count there would expire the item)"),
        ("lb", "it is the leaderboard index's partition key"),
        ("value", "it is the value attribute the leaderboard index sorts by"),
    ):
        mine = rule("m", target={**TALLY, "attribute": attribute})
        assert problems(mine) == [
            f"<python>: rule 'm', field 'target.attribute': {attribute!r} is not the rule's to "
            f"write: {why}"
        ]
    assert problems(
        rule("c", target={"partition_key": "{PK}", "attribute": "aggregator_collection"}),
        layout=pk_only,
    ) == [
        "<python>: rule 'c', field 'target.attribute': 'aggregator_collection' is not the rule's "
        "to write: it is the collection index's partition key"
    ]
    twice = rule("b", match={"SK": {"prefix": "L#"}}, target=TALLY)
    assert problems(like_tally(), twice) == [
        "<python>: rule 'b', field 'target.attribute': rule 'like_tally' already writes "
        "'likeTally': each target attribute belongs to one rule (its reconcile and drop-rule act "
        "on it)"
    ]
    spy = rule("spy", key="{PK}", match={"aggregator_checkpoints": {"exists": True}})
    assert problems(spy) == [
        "<python>: rule 'spy', field 'match': reads 'aggregator_checkpoints', the framework's "
        "checkpoint map on target items (table: target_checkpoints_attribute); no rule may read "
        "it"
    ]


def test_a_target_attribute_feeding_back_into_its_writer_is_refused_naming_the_cycle() -> None:
    # a reads likeTally (its own target): each write would count again
    own = rule("a", match={"SK": "META"}, delta={"attribute": "likeTally"}, target=TALLY)
    assert problems(own) == [
        "<python>: rule 'a', field 'target': a target attribute feeds back into the rule that "
        "writes it ('a' writes 'likeTally', which 'a' reads): each write would come back on the "
        "stream as a change to count"
    ]
    a = rule("a", delta={"attribute": "y"}, target={**TALLY, "attribute": "x"})
    b = rule("b", delta={"attribute": "x"}, target={**TALLY, "attribute": "y"})
    (line,) = problems(a, b)
    assert "('a' writes 'x', which 'b' reads; 'b' writes 'y', which 'a' reads)" in line
    # a rule reading the attribute without writing back (a leaderboard) is fine
    ranked = rule("ranked", key="{PK}", delta={"attribute": "likeTally"}, leaderboard=True)
    assert len(RuleSet.of(like_tally(), ranked, layout=LAYOUT)) == 2


def test_yaml_problems_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(
        "table: {partition_key: PK, sort_key: SK}\n"
        "rules:\n"
        "  - name: t\n"
        "    target: {partition_key: '{PK}', attribute: likeTally}\n"
    )
    with pytest.raises(RuleError) as caught:
        load_rules(path)
    assert str(caught.value) == (
        f"{path}: rule 't', field 'target': the table has a sort key ('SK'): give the "
        "target's sort_key too"
    )


def test_the_engine_keys_deltas_by_target_and_dead_letters_what_cannot_form_a_key() -> None:
    engine = Engine(RuleSet.of(like_tally(), layout=LAYOUT))
    likes = [
        record(10, "INSERT", None, {"PK": "POST#1", "SK": "LIKE#u1"}),
        record(11, "INSERT", None, {"PK": "POST#1", "SK": "LIKE#u2"}),
        record(12, "REMOVE", {"PK": "POST#1", "SK": "LIKE#u1"}, None),
        record(13, "INSERT", None, {"PK": "AGGREGATES", "SK": "LIKE#u3"}),
        record(14, "INSERT", None, {"PK": "", "SK": "LIKE#u4"}),
        # the framework's own write to the post comes back: nothing to count for this rule
        record(
            15,
            "MODIFY",
            {"PK": "POST#1", "SK": "META"},
            {"PK": "POST#1", "SK": "META", "likeTally": 1},
        ),
    ]
    batch = engine.process(likes)
    (delta,) = batch.deltas.values()
    assert (delta.ref.target, delta.target_attribute, delta.amount) == (
        ("POST#1", "META"),
        "likeTally",
        Decimal(1),
    )
    causes = sorted((f.sequence_number, f.cause) for f in batch.failures)
    assert causes == [("13", FailureCause.INVALID_VALUE), ("14", FailureCause.INVALID_VALUE)]
    # the window state keeps the target
    (again,) = decode_batch(encode_batch(batch)).deltas.values()
    assert (again.ref, again.target_attribute) == (delta.ref, delta.target_attribute)


def test_each_rule_has_its_own_entries_in_the_checkpoint_map() -> None:
    a, b = target_token("a", "shardId-1"), target_token("b", "shardId-1")
    assert a != b and len(a) == len(b) == 18
    assert a.startswith(rule_token("a")) and b.startswith(rule_token("b"))
    assert target_token("a", "shardId-2").startswith(rule_token("a"))
