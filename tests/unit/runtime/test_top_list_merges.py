"""The processor's merges of top lists (pure: a recording writer and a failing list store, no
DynamoDB): a failed merge asks Lambda to deliver again from that list's first record in the batch
(merging a record again changes nothing), or in the window mode fails the invocation."""

from __future__ import annotations

from decimal import Decimal

import pytest
from botocore.exceptions import ClientError

from aggregator.core.engine import Engine
from aggregator.core.exceptions import WriteError
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.top_list_items import MergeResult
from aggregator.runtime.processor import StreamProcessor
from tests.factories import stream_record
from tests.unit.runtime.test_window_flush_expiry import RecordingWriter

RULES = RuleSet.of(
    rule("a", key="{p}", leaderboard=True, leaderboard_store="list"),
    rule("b", key="{p}", leaderboard=True, leaderboard_store="list"),
)


class Lists:
    def __init__(self, failing: str | None) -> None:
        self.failing = failing
        self.merged: list[tuple[str, dict[str, Decimal | None]]] = []

    def merge(self, partition, observations, *, expires=None):
        if partition == self.failing:
            raise ClientError({"Error": {"Code": "ThrottlingException"}}, "UpdateItem")
        self.merged.append((partition, dict(observations)))
        return MergeResult(writes=1, modelled_wcu=3, changed=True, item_bytes=100)


def _aggregate(seq: int, sk: str, value: int):
    item = {"pk": "AGGREGATES", "sk": sk, "value": value, "rule": sk.split("#")[0]}
    return stream_record("MODIFY", item, item, seq=seq)


EVENT = {
    "Records": [
        stream_record("INSERT", new={"pk": "u1", "sk": "S", "p": "x"}, seq=1),
        _aggregate(2, "a#x", 4),
        _aggregate(3, "b#x", 7),
        _aggregate(4, "a#x", 5),  # the newest value of a#x in the batch
        _aggregate(5, "b#y", 1),
    ],
    "shardId": "s-1",
    "window": {"start": "a", "end": "b"},
}


def test_each_list_merges_the_newest_value_of_each_key_once():
    lists = Lists(failing=None)
    processor = StreamProcessor(Engine(RULES), RecordingWriter(), top_lists=lists)
    outcome = processor.process_event(EVENT)
    assert lists.merged == [("a", {"x": Decimal(5)}), ("b", {"x": Decimal(7), "y": Decimal(1)})]
    assert outcome.response["batchItemFailures"] == []
    assert (outcome.top_observations, outcome.write.top_list_writes) == (4, 2)
    assert outcome.write.modelled_index_wcu == 6


def test_a_failed_merge_delivers_again_from_that_lists_first_record():
    lists = Lists(failing="b")
    processor = StreamProcessor(Engine(RULES), RecordingWriter(), top_lists=lists)
    outcome = processor.process_event(EVENT)
    assert lists.merged == [("a", {"x": Decimal(5)})]
    assert outcome.response["batchItemFailures"] == [{"itemIdentifier": "3".zfill(21)}]
    assert "top list b" in outcome.errors[0]


def test_in_the_window_mode_a_failed_merge_fails_the_invocation():
    processor = StreamProcessor(
        Engine(RULES), RecordingWriter(), flush="window", top_lists=Lists(failing="a")
    )
    with pytest.raises(WriteError, match="top list merge failed"):
        processor.process_event(EVENT)
