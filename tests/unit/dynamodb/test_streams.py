"""The framework's one stream reader (aggregator.dynamodb.streams): iterators, one GetRecords page
with an expired iterator renewed and trimmed records as a project error, parents first."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from aggregator.core.exceptions import AggregatorError
from aggregator.dynamodb.streams import (
    ITERATOR_RENEWALS,
    StreamTrimmedError,
    get_records_page,
    parents_first,
    ready_shards,
    shard_iterator,
)
from tests.factories import stream_record
from tests.fakes import FakeStreams

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x"


def records(*seqs: int) -> list[dict]:
    return [stream_record("INSERT", None, {"pk": "a", "sk": str(s)}, seq=s) for s in seqs]


def seqs(page) -> list[int]:
    return [int(r["dynamodb"]["SequenceNumber"]) for r in page.records]


def seq(n: int) -> str:
    return records(n)[0]["dynamodb"]["SequenceNumber"]


def shard(shard_id: str, parent: str | None = None) -> dict:
    return {"ShardId": shard_id, **({"ParentShardId": parent} if parent else {})}


class FailingStreams(FakeStreams):
    """``GetRecords`` fails with ``code`` the first ``times`` calls; iterators asked are kept."""

    def __init__(self, shards, *, code: str, times: int, **options) -> None:
        super().__init__(shards, **options)
        self.code, self.times = code, times
        self.asked: list[tuple[str, str | None]] = []

    def get_shard_iterator(self, StreamArn, ShardId, ShardIteratorType, SequenceNumber=None):
        self.asked.append((ShardIteratorType, SequenceNumber))
        return super().get_shard_iterator(StreamArn, ShardId, ShardIteratorType, SequenceNumber)

    def get_records(self, ShardIterator, Limit):
        if self.times:
            self.times -= 1
            self.calls += 1
            raise ClientError({"Error": {"Code": self.code, "Message": "x"}}, "GetRecords")
        return super().get_records(ShardIterator, Limit)


def test_parents_come_before_their_children_whatever_the_listing_order():
    listed = [shard("c2", "c1"), shard("x"), shard("c1", "p"), shard("p"), shard("orphan", "gone")]
    ordered = [s["ShardId"] for s in parents_first(listed)]
    assert ordered == ["p", "c1", "c2", "x", "orphan"]
    # already in order: unchanged
    assert parents_first(parents_first(listed)) == parents_first(listed)


def test_a_parent_cycle_does_not_loop():
    ordered = [s["ShardId"] for s in parents_first([shard("a", "b"), shard("b", "a")])]
    assert sorted(ordered) == ["a", "b"]


def test_ready_shards_wait_for_a_listed_parent_to_be_done():
    listed = [shard("c", "p"), shard("p"), shard("orphan", "gone"), shard("old")]
    assert [s["ShardId"] for s in ready_shards(listed, set())] == ["p", "orphan", "old"]
    assert [s["ShardId"] for s in ready_shards(listed, {"p", "old"})] == ["c", "orphan"]


def test_shard_iterator_types():
    streams = FailingStreams({"s": (None, False, records(1, 2, 3))}, code="", times=0)
    shard_iterator(streams, ARN, "s")
    shard_iterator(streams, ARN, "s", latest=True)
    shard_iterator(streams, ARN, "s", after=seq(2), latest=True)  # a position wins over LATEST
    assert streams.asked == [
        ("TRIM_HORIZON", None),
        ("LATEST", None),
        ("AFTER_SEQUENCE_NUMBER", seq(2)),
    ]


def test_an_expired_iterator_is_renewed_after_the_last_record_read():
    streams = FakeStreams({"s": (None, False, records(1, 2, 3, 4, 5))}, page=2)
    first = get_records_page(streams, ARN, "s", None)
    assert seqs(first) == [1, 2]
    assert first.records[0]["eventSourceARN"] == ARN  # Lambda-shaped
    streams.expire_once = True
    second = get_records_page(streams, ARN, "s", first.next_iterator, after=seq(2))
    assert seqs(second) == [3, 4]  # nothing lost, nothing read twice
    assert streams.calls == 3


def test_an_expired_iterator_without_a_position_is_renewed_as_asked():
    streams = FailingStreams(
        {"s": (None, False, records(1, 2))}, code="ExpiredIteratorException", times=1
    )
    page = get_records_page(streams, ARN, "s", "s|0|0", latest=True)
    assert streams.asked == [("LATEST", None)] and seqs(page) == []
    streams.times = 1
    assert seqs(get_records_page(streams, ARN, "s", "s|1|0")) == [1, 2]
    assert streams.asked[-1] == ("TRIM_HORIZON", None)


def test_an_iterator_that_keeps_expiring_is_let_through():
    streams = FailingStreams(
        {"s": (None, False, records(1))}, code="ExpiredIteratorException", times=10
    )
    with pytest.raises(ClientError):
        get_records_page(streams, ARN, "s", None)
    assert streams.calls == 1 + ITERATOR_RENEWALS


def test_trimmed_records_are_a_project_error_naming_the_shard():
    streams = FailingStreams(
        {"s": (None, False, records(1))}, code="TrimmedDataAccessException", times=1
    )
    with pytest.raises(StreamTrimmedError, match=r"shard s: .*24-hour retention") as raised:
        get_records_page(streams, ARN, "s", None, after=seq(1))
    assert isinstance(raised.value, AggregatorError) and raised.value.shard_id == "s"


def test_other_errors_are_not_translated():
    streams = FailingStreams(
        {"s": (None, False, records(1))}, code="AccessDeniedException", times=1
    )
    with pytest.raises(ClientError, match="AccessDenied"):
        get_records_page(streams, ARN, "s", None)
