"""The backfill's read of one shard ends at a bound fixed when it begins, at any write rate, and
returns every record written before it began (a fake Streams API whose writer appends records
between the reader's calls)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from aggregator.core.exceptions import ConfigError
from aggregator.operations.backfill import OPEN_SHARD_EMPTY_PAGES, read_shard
from tests.factories import stream_record
from tests.fakes import FakeStreams

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x"
MAX_CALLS = 500
"""More ``GetRecords`` calls than any read here needs: a read still going then never ends."""


def records(*seqs: int) -> list[dict]:
    return [stream_record("INSERT", None, {"pk": "a", "sk": str(s)}, seq=s) for s in seqs]


class WritingStreams(FakeStreams):
    """Streams whose application appends a record to shard ``s`` after every ``every``
    ``GetRecords`` calls (the reader's and its bound's alike), as a steady writer would."""

    def __init__(self, shards, *, every: int, **options) -> None:
        super().__init__(shards, **options)
        self.every = every
        self.iterator_types: list[str] = []

    def get_shard_iterator(self, StreamArn, ShardId, ShardIteratorType, SequenceNumber=None):
        self.iterator_types.append(ShardIteratorType)
        return super().get_shard_iterator(StreamArn, ShardId, ShardIteratorType, SequenceNumber)

    def get_records(self, ShardIterator, Limit):
        if self.calls >= MAX_CALLS:
            raise AssertionError(f"the read did not end within {MAX_CALLS} GetRecords calls")
        response = super().get_records(ShardIterator, Limit)
        if self.calls % self.every == 0:
            shard = self.shards["s"][2]
            shard += records(int(shard[-1]["dynamodb"]["SequenceNumber"]) + 1 if shard else 1)
        return response


def sequence_numbers(read) -> list[int]:
    return [int(r["dynamodb"]["SequenceNumber"]) for r in read]


@pytest.mark.parametrize("every", [1, 2, 5, 9])
def test_an_open_shard_read_ends_however_often_the_application_writes(every):
    # one write per 1 to 9 GetRecords calls: never ten empty pages in a row
    streams = WritingStreams({"s": (None, False, records(*range(1, 8)))}, every=every, page=3)
    shard = streams.describe_stream(StreamArn=ARN)["StreamDescription"]["Shards"][0]
    iterators: dict[str, str | None] = {}
    last: dict[str, str] = {}
    first = sequence_numbers(read_shard(streams, ARN, shard, iterators, last))
    # every record written before the read began, in order, once; and only a page past them
    assert first[:7] == list(range(1, 8))
    assert first == list(range(1, len(first) + 1))
    assert len(first) <= 7 + 3 + 2
    # the next read goes on after it, up to its own bound
    written = len(streams.shards["s"][2])
    second = sequence_numbers(read_shard(streams, ARN, shard, iterators, last))
    assert second[: written - len(first)] == list(range(len(first) + 1, written + 1))
    assert iterators["s"] is not None  # an open shard never ends


def test_a_quiet_open_shard_ends_after_empty_pages_in_a_row():
    streams = FakeStreams({"s": (None, False, records(1, 2, 3, 4, 5))}, page=2)
    shard = streams.describe_stream(StreamArn=ARN)["StreamDescription"]["Shards"][0]
    read = sequence_numbers(read_shard(streams, ARN, shard, {}, {}))
    assert read == [1, 2, 3, 4, 5]
    # 3 pages, then the empty pages; the bound polled once per page (nothing came)
    assert streams.calls == 2 * (3 + OPEN_SHARD_EMPTY_PAGES)


def test_an_open_shard_without_records_ends_whether_or_not_writes_come():
    quiet = FakeStreams({"s": (None, False, [])})
    shard = quiet.describe_stream(StreamArn=ARN)["StreamDescription"]["Shards"][0]
    assert list(read_shard(quiet, ARN, shard, {}, {})) == []
    busy = WritingStreams({"s": (None, False, [])}, every=1)
    read = sequence_numbers(read_shard(busy, ARN, shard, {}, {}))
    assert read == list(range(1, len(read) + 1)) and len(read) <= 3


def test_a_closed_shard_is_read_to_its_end_through_empty_pages_without_a_bound():
    streams = WritingStreams(
        {"s": (None, True, records(1, 2, 3, 4, 5))}, every=10**6, page=2, empty_pages=12
    )
    shard = streams.describe_stream(StreamArn=ARN)["StreamDescription"]["Shards"][0]
    iterators: dict[str, str | None] = {}
    assert sequence_numbers(read_shard(streams, ARN, shard, iterators, {})) == [1, 2, 3, 4, 5]
    assert iterators["s"] is None  # ended: the next read returns nothing
    assert "LATEST" not in streams.iterator_types
    assert list(read_shard(streams, ARN, shard, iterators, {})) == []


def test_empty_pages_before_the_bound_are_followed_to_it():
    # more empty pages after each page of records than an idle shard's end is taken for:
    # once a record has come after the read began, the read goes on until it reaches it
    streams = WritingStreams(
        {"s": (None, False, records(1, 2, 3))}, every=1, page=2, empty_pages=15
    )
    shard = streams.describe_stream(StreamArn=ARN)["StreamDescription"]["Shards"][0]
    read = sequence_numbers(read_shard(streams, ARN, shard, {}, {}))
    assert read[:4] == [1, 2, 3, 4]  # the first record after the read began is its bound
    assert streams.iterator_types.count("LATEST") == 1


class TrimmedStreams(FakeStreams):
    def get_records(self, ShardIterator, Limit):
        raise ClientError(
            {"Error": {"Code": "TrimmedDataAccessException", "Message": "gone"}}, "GetRecords"
        )


def test_records_past_the_retention_are_a_one_line_config_error():
    streams = TrimmedStreams({"s": (None, True, records(1, 2))})
    shard = streams.describe_stream(StreamArn=ARN)["StreamDescription"]["Shards"][0]
    with pytest.raises(ConfigError, match="shard s: the stream no longer holds records"):
        list(read_shard(streams, ARN, shard, {}, {}))


def test_an_expired_iterator_is_renewed_after_the_last_record_read():
    streams = FakeStreams({"s": (None, True, records(1, 2, 3, 4, 5))}, page=2)
    shard = streams.describe_stream(StreamArn=ARN)["StreamDescription"]["Shards"][0]
    read = read_shard(streams, ARN, shard, {}, {})
    first = [next(read), next(read)]
    streams.expire_once = True
    assert sequence_numbers(first + list(read)) == [1, 2, 3, 4, 5]
