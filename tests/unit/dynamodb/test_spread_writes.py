"""Spread aggregates, the write side and what carries it: each delta of a spread rule is written
under the partition key value of its home (a CRC-32 of the rule and key, computed here apart),
window states and backfill pages keep the spread (and old texts still read), the manifest records
each generation's spread, and listings merge the values in sort key order."""

from __future__ import annotations

import json
import zlib
from dataclasses import replace
from decimal import Decimal
from typing import Any

from aggregator.core.batch_state import decode_batch, encode_batch
from aggregator.core.engine import Engine
from aggregator.core.layout import TableLayout
from aggregator.core.lifecycle import RuleState
from aggregator.core.records import StreamRecord
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.collections import query_collections
from aggregator.dynamodb.manifest import _state_value, manifest_states
from aggregator.dynamodb.updates import item_key
from tests.factories import stream_record

LAYOUT = TableLayout(aggregate_partitions=8)
PATHS = {"sk": {"prefix": "PATH#"}}
RULES = RuleSet.of(
    rule("per_owner", match=PATHS, key="{owner}"),
    rule("pair", match=PATHS, key="{owner}#{kind}"),
    rule("mine", match=PATHS, key="{owner}", partitions=3),  # its own spread
    rule(
        "hourly",
        match=PATHS,
        key="{owner}",
        window={"time": "ts", "unit": "epoch_seconds", "granularities": ["hour"]},
    ),
    rule("sharded", match=PATHS, key="TOTAL", write_shards=2),
    layout=LAYOUT,
)
ITEM = {"pk": "P1", "sk": "PATH#1", "owner": "ann", "kind": "gem", "ts": 1_700_000_000}


def home(text: str, n: int) -> str:
    return f"AGGREGATES#{zlib.crc32(text.encode()) % n}"


def test_each_delta_is_written_under_its_homes_partition_key_value():
    batch = Engine(RULES).process([StreamRecord(stream_record("INSERT", None, ITEM, seq=7))])
    # a partial's slot is the writer's choice (slot 0 here)
    written = [replace(d, slot=0) if d.ref.partial else d for d in batch.deltas.values()]
    keys = {
        d.ref.batch_key: (item_key(LAYOUT, d)["pk"]["S"], item_key(LAYOUT, d)["sk"]["S"])
        for d in written
    }
    assert keys == {
        "per_owner#ann": (home("per_owner#ann", 8), "per_owner#ann"),
        "pair#ann#gem": (home("pair#ann#gem", 8), "pair#ann#gem"),
        "mine#ann": (home("mine#ann", 3), "mine#ann"),
        # a time bucket under its key's home: one Query reads a key's buckets
        "hourly#ann#hour#2023-11-14T22:00:00Z": (
            home("hourly#ann", 8),
            "hourly#ann#hour#2023-11-14T22:00:00Z",
        ),
        # a partial keeps its own item collection
        "~sharded#TOTAL": ("AGGREGATES#sharded#TOTAL", "PARTIAL#000"),
    }


def test_unspread_rules_keep_the_single_partition():
    rules = RuleSet.of(rule("per_owner", match=PATHS, key="{owner}"))
    (delta,) = (
        Engine(rules).process([StreamRecord(stream_record("INSERT", None, ITEM))]).deltas.values()
    )
    assert item_key(rules.layout, delta) == {
        "pk": {"S": "AGGREGATES"},
        "sk": {"S": "per_owner#ann"},
    }


def test_window_states_keep_the_spread_and_old_texts_read_as_one():
    batch = Engine(RULES).process([StreamRecord(stream_record("INSERT", None, ITEM, seq=7))])
    again = decode_batch(encode_batch(batch))
    assert {k: (d.partitions, d.key_fields) for k, d in again.deltas.items()} == {
        "per_owner#ann": (8, 1),
        "pair#ann#gem": (8, 2),
        "mine#ann": (3, 1),
        "hourly#ann#hour#2023-11-14T22:00:00Z": (8, 1),
        "~sharded#TOTAL": (8, 1),
    }
    # a text of the release before: the fields end at the auto flag
    plain = Engine(RuleSet.of(rule("per_owner", match=PATHS, key="{owner}"))).process(
        [StreamRecord(stream_record("INSERT", None, ITEM, seq=7))]
    )
    text = encode_batch(plain)
    assert len(json.loads(text)["deltas"]["per_owner#ann"]) == 13  # as before spread partitions
    (old,) = decode_batch(text).deltas.values()
    assert (old.partitions, old.key_fields) == (1, 1)


def test_the_manifest_records_each_generations_spread():
    spread = RuleState("per_owner@2", "f00d", "requested", 5, partitions=8)
    plain = RuleState("per_owner", "beef", "active", 1)
    item = {"rules": {"M": {s.name: _state_value(s) for s in (spread, plain)}}}
    assert "partitions" not in item["rules"]["M"]["per_owner"]["M"]  # entries as before
    assert manifest_states(item) == {"per_owner@2": spread, "per_owner": plain}


class _Pages:
    """A fake ``call`` for ``query``: each partition's items, two to a page."""

    def __init__(self, partitions: dict[str, list[str]]) -> None:
        self.partitions = partitions
        self.requests: list[str] = []

    def __call__(self, operation: str, **request: Any) -> dict[str, Any]:
        assert operation == "query"
        pk = request["ExpressionAttributeValues"][":pk"]["S"]
        self.requests.append(pk)
        keys = sorted(self.partitions[pk], reverse=request.get("ScanIndexForward") is False)
        start = int(request.get("ExclusiveStartKey", {}).get("n", 0))
        page = keys[start : start + 2]
        response: dict[str, Any] = {
            "Items": [{"pk": {"S": pk}, "sk": {"S": k}, "value": {"N": "1"}} for k in page]
        }
        if start + 2 < len(keys):
            response["LastEvaluatedKey"] = {"n": str(start + 2)}
        return response


def test_a_listing_reads_every_value_and_merges_them_in_sort_key_order():
    partitions = {
        "AGGREGATES#0": ["r#b", "r#e", "r#f"],
        "AGGREGATES#1": ["r#a", "r#d"],
        "AGGREGATES#2": [],
        "AGGREGATES#3": ["r#c", "r#g", "r#h", "r#i"],
    }
    every = sorted(k for keys in partitions.values() for k in keys)
    for descending in (False, True):
        call = _Pages(partitions)
        pages = query_collections(
            call, "t", LAYOUT, list(partitions), begins_with="r#", descending=descending
        )
        listed = [i["sk"]["S"] for page in pages for i in page]
        assert listed == (every[::-1] if descending else every)
        assert sorted(set(call.requests)) == sorted(partitions)  # each value read
    # one value: exactly query_collection's pages
    call = _Pages(partitions)
    pages = list(query_collections(call, "t", LAYOUT, ["AGGREGATES#3"], begins_with="r#"))
    assert [[i["sk"]["S"] for i in p] for p in pages] == [["r#c", "r#g"], ["r#h", "r#i"]]
    assert Decimal(len(call.requests)) == 2


def test_explain_names_the_value_a_spread_rules_aggregate_is_under():
    from aggregator.core.explain import explain_image, explain_record
    from aggregator.core.records import Image

    engine = Engine(RULES)
    image = Image({k: ({"N": str(v)} if isinstance(v, int) else {"S": v}) for k, v in ITEM.items()})
    placed = {
        c.sort_key: c.partition
        for e in explain_image(engine, image, now=0)
        for c in e.contributions
    }
    assert placed["pair#ann#gem"] == home("pair#ann#gem", 8)
    assert placed["mine#ann"] == home("mine#ann", 3)
    plain = Engine(RuleSet.of(rule("per_owner", match=PATHS, key="{owner}")))
    (explained,) = explain_image(plain, image, now=0)
    assert [c.partition for c in explained.contributions] == [None]  # not spread: as before
    record = explain_record(engine, StreamRecord(stream_record("INSERT", None, ITEM, seq=7)), now=0)
    assert {c.ref.sort_key: c.partition(LAYOUT) for c in record.changes}["per_owner#ann"] == home(
        "per_owner#ann", 8
    )
