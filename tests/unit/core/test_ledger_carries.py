"""Ledger carries, the engine's part (pure): a ``REMOVE`` of an item that target rules wrote
carries each rule's checkpoint map entries to the rule's ledger item, keyed exactly as the
deltas aimed at that item are; what cannot be carried is counted, never dead-lettered."""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

import pytest

from aggregator.core.checkpoint_names import checkpoint_attribute, rule_token, target_token
from aggregator.core.engine import Engine
from aggregator.core.layout import TableLayout
from aggregator.core.ledger_carries import carried_entries
from aggregator.core.records import parse_record
from aggregator.core.rules import RuleSet, rule
from tests.factories import ddb_json, stream_record

LAYOUT = TableLayout(partition_key="PK", sort_key="SK")
MAP = LAYOUT.target_checkpoints_attribute


def likes(name: str = "likes", attribute: str = "likeTally", **target: str):
    spec = {"partition_key": "{PK}", "sort_key": "META", "attribute": attribute, **target}
    return rule(name, match={"SK": {"prefix": "LIKE#"}}, target=spec)


def checkpoint(sequence_number: int, at: int = 1_750_000_000) -> bytes:
    """A checkpoint value as the writers encode it: 17 bytes of sequence number, 4 of time."""
    return sequence_number.to_bytes(17, "big") + at.to_bytes(4, "big")


def shard_token(shard_id: str) -> str:
    return checkpoint_attribute(shard_id)[2:]


def remove(item: dict[str, Any], seq: int, *, ttl: bool = False, keys=("PK", "SK")):
    return parse_record(stream_record("REMOVE", old=item, seq=seq, ttl=ttl, keys=keys))


def lambda_shape(entries: dict[str, bytes]) -> dict[str, Any]:
    """A map as Lambda delivers it: binaries as base64 text."""
    return {"M": {k: {"B": base64.b64encode(v).decode()} for k, v in entries.items()}}


def test_a_removed_item_carries_each_target_rules_entries_to_its_ledger_keyed_as_its_deltas():
    rules = RuleSet.of(
        likes(),
        rule(
            "comments",
            match={"SK": {"prefix": "COMMENT#"}},
            target={"partition_key": "{PK}", "sort_key": "META", "attribute": "n"},
        ),
        rule("posts", match={"SK": "META"}, key="{PK}"),
        layout=LAYOUT,
    )
    engine = Engine(rules)
    a, b = "shardId-0001", "shardId-0002"
    meta = {
        "PK": "POST#a",
        "SK": "META",
        "likeTally": 2,
        MAP: {
            target_token("likes", a): checkpoint(120),
            target_token("likes", b): checkpoint(95),
            target_token("comments", a): checkpoint(130),
            target_token("dropped_rule", a): checkpoint(140),  # not this rule set's: passed over
        },
    }
    like = stream_record("INSERT", new={"PK": "POST#a", "SK": "LIKE#7"}, seq=150, keys=("PK", "SK"))
    batch = engine.process([remove(meta, 140), parse_record(like)])
    assert sorted(batch.ledger_carries) == ["comments#POST%23a#META", "likes#POST%23a#META"]
    carry = batch.ledger_carries["likes#POST%23a#META"]
    assert carry.entries == {shard_token(a): checkpoint(120), shard_token(b): checkpoint(95)}
    assert carry.sequence_number == str(140).zfill(21)
    # the same ledger item as a delta aimed at the deleted post (its ref, its write facts)
    delta = batch.deltas["likes#POST%23a#META"]
    assert carry.delta.ref == delta.ref
    assert carry.delta.ref.target == ("POST#a", "META")
    assert carry.delta.spec == delta.spec and carry.delta.amount == 0 and carry.delta.parts == []
    assert batch.ledger_carries["comments#POST%23a#META"].entries == {
        shard_token(a): checkpoint(130)
    }
    assert batch.carry_entries_ignored == 0
    # the REMOVE is still evaluated as ever: the posts rule retracts the post
    assert batch.deltas["posts#POST%23a"].amount == -1


def test_the_ledger_key_is_read_back_through_the_templates_escaping_as_the_engine_does():
    """A target ``POST#{postId}`` / ``{kind}``: the item ``POST#a#b`` / ``META`` is the target of
    images with postId ``a#b``, whose deltas go to ``likes#POST#a%23b#META``."""
    r = rule(
        "likes",
        match={"SK": {"prefix": "LIKE#"}},
        target={"partition_key": "POST#{postId}", "sort_key": "{kind}", "attribute": "n"},
    )
    engine = Engine(RuleSet.of(r, layout=LAYOUT))
    like = {"PK": "USER#1", "SK": "LIKE#1", "postId": "a#b", "kind": "META"}
    delta_batch = engine.process(
        [parse_record(stream_record("INSERT", new=like, keys=("PK", "SK")))]
    )
    (delta,) = delta_batch.deltas.values()
    item = {"PK": "POST#a#b", "SK": "META", MAP: {target_token("likes", "s"): checkpoint(9)}}
    batch = engine.process([remove(item, 10)])
    (carry,) = batch.ledger_carries.values()
    assert carry.delta.ref == delta.ref
    assert carry.delta.ref.sort_key == "likes#POST#a%23b#META"


def test_an_item_whose_key_no_image_can_render_unambiguously_carries_nothing_counted():
    """``{a}#{b}`` over ``x#y#z``: a=x, b=y#z or a=x#y, b=z, two ledger keys; and an item whose
    sort key does not fit the template: no image targets it."""
    r = rule(
        "likes",
        match={"SK": {"prefix": "LIKE#"}},
        target={"partition_key": "{a}#{b}", "sort_key": "META", "attribute": "n"},
    )
    engine = Engine(RuleSet.of(r, layout=LAYOUT))
    entries = {
        target_token("likes", "s1"): checkpoint(9),
        target_token("likes", "s2"): checkpoint(8),
    }
    batch = engine.process(
        [
            remove({"PK": "x#y#z", "SK": "META", MAP: entries}, 10),
            remove({"PK": "x#y", "SK": "OTHER", MAP: entries}, 11),
        ]
    )
    assert batch.ledger_carries == {}
    assert batch.carry_entries_ignored == 4


@pytest.mark.parametrize(
    ("raw", "ignored"),
    [
        ({"S": "not a map"}, 1),  # the attribute of another type: nothing to carry
        ({"M": {"ab": {"B": checkpoint(1)}}}, 0),  # another rule's (no token of ours)
        ({"M": {target_token("likes", "s") + "x": {"B": checkpoint(1)}}}, 1),  # a longer name
        ({"M": {target_token("likes", "s"): {"B": checkpoint(1)[:17]}}}, 1),  # 17 bytes
        ({"M": {target_token("likes", "s"): {"S": "00000000000000000001@1"}}}, 1),  # text
        ({"M": {target_token("likes", "s"): {"B": "not base64!"}}}, 1),
        ({"M": {target_token("likes", "s"): {"N": "NaN"}}}, 1),
    ],
)
def test_malformed_maps_and_entries_carry_nothing_and_are_counted_not_dead_lettered(raw, ignored):
    engine = Engine(RuleSet.of(likes(), layout=LAYOUT))
    record = stream_record("REMOVE", old={"PK": "POST#a", "SK": "META"}, keys=("PK", "SK"))
    record["dynamodb"]["OldImage"][MAP] = raw
    batch = engine.process([parse_record(record)])
    assert (batch.ledger_carries, batch.carry_entries_ignored) == ({}, ignored)
    assert batch.failures == []


def test_carried_entries_reads_lambdas_base64_and_boto3s_bytes_alike():
    tokens = {rule_token("likes"): "likes"}
    entries = {
        target_token("likes", "s1"): checkpoint(7),
        target_token("likes", "s2"): checkpoint(8),
    }
    expected = {"likes": {shard_token("s1"): checkpoint(7), shard_token("s2"): checkpoint(8)}}
    assert carried_entries(lambda_shape(entries), tokens) == (expected, 0)
    assert carried_entries(ddb_json({MAP: entries})[MAP], tokens) == (expected, 0)


def test_only_removes_of_application_items_with_a_map_carry_a_ttl_delete_too():
    engine = Engine(RuleSet.of(likes(), layout=LAYOUT))
    entries = {target_token("likes", "s"): checkpoint(5)}
    meta = {"PK": "POST#a", "SK": "META", MAP: entries}
    records = [
        parse_record(stream_record("INSERT", new=meta, seq=1, keys=("PK", "SK"))),
        parse_record(
            stream_record("MODIFY", old=meta, new={**meta, MAP: {}}, seq=2, keys=("PK", "SK"))
        ),
        remove({"PK": "POST#b", "SK": "META"}, 3),  # no map: nothing to carry
        remove({"PK": "AGGREGATES", "SK": "likes#POST%23a#META", MAP: entries}, 4),
    ]
    assert engine.process(records).ledger_carries == {}
    batch = engine.process([remove(meta, 6, ttl=True)])
    assert batch.records == 1 and list(batch.ledger_carries) == ["likes#POST%23a#META"]
    assert remove(meta, 6, ttl=True).is_ttl_delete


def test_two_removes_of_one_item_in_a_batch_merge_to_the_larger_checkpoint_and_first_record():
    """Deleted, re-created, written and deleted again within one batch."""
    engine = Engine(RuleSet.of(likes(), layout=LAYOUT))
    s1, s2 = target_token("likes", "s1"), target_token("likes", "s2")
    first = {"PK": "POST#a", "SK": "META", MAP: {s1: checkpoint(9), s2: checkpoint(30)}}
    second = {"PK": "POST#a", "SK": "META", MAP: {s1: checkpoint(12)}}
    batch = engine.process([remove(first, 40), remove(second, 50)])
    (carry,) = batch.ledger_carries.values()
    assert carry.entries == {shard_token("s1"): checkpoint(12), shard_token("s2"): checkpoint(30)}
    assert carry.sequence_number == str(40).zfill(21)


def test_a_table_without_a_sort_key_carries_by_the_partition_key_alone():
    layout = TableLayout(partition_key="id", sort_key=None)
    r = rule(
        "likes",
        match={"id": {"prefix": "LIKE#"}},
        target={"partition_key": "POST#{post}", "attribute": "likeTally"},
    )
    engine = Engine(RuleSet.of(r, layout=layout))
    item = {"id": "POST#7", MAP: {target_token("likes", "s"): checkpoint(3)}}
    batch = engine.process([remove(item, 4, keys=("id",))])
    (carry,) = batch.ledger_carries.values()
    assert (carry.delta.ref.sort_key, carry.delta.ref.target) == ("likes#POST#7", ("POST#7",))
    like = {"id": "LIKE#1", "post": Decimal(7)}
    (delta,) = engine.process(
        [parse_record(stream_record("INSERT", new=like, keys=("id",)))]
    ).deltas.values()
    assert delta.ref == carry.delta.ref
