"""StreamRunner against a fake Streams API: shard order, empty pages, expired iterators."""

from __future__ import annotations

from botocore.exceptions import ClientError

from aggregator.dev.runner import StreamRunner
from aggregator.runtime.processor import BatchOutcome
from tests.factories import stream_record

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x"


class FakeStreams:
    """Shards: ``{id: (parent, closed, [records])}``; ``empty_pages`` inserts empty pages."""

    def __init__(self, shards, *, empty_pages=0, expire_once=False, page=2):
        self.shards = shards
        self.empty_pages = empty_pages
        self.expire_once = expire_once
        self.page = page
        self.calls = 0

    def describe_stream(self, StreamArn, ExclusiveStartShardId=None):
        # list children first, to check the runner orders by parentage, not by listing order
        shards = []
        for sid, (parent, closed, _records) in reversed(list(self.shards.items())):
            rng = {"StartingSequenceNumber": "1"}
            if closed:
                rng["EndingSequenceNumber"] = "9" * 21
            entry = {"ShardId": sid, "SequenceNumberRange": rng}
            if parent:
                entry["ParentShardId"] = parent
            shards.append(entry)
        return {"StreamDescription": {"Shards": shards}}

    def get_shard_iterator(self, StreamArn, ShardId, ShardIteratorType, SequenceNumber=None):
        records = self.shards[ShardId][2]
        index = 0
        if ShardIteratorType == "AFTER_SEQUENCE_NUMBER":
            index = next(
                i + 1
                for i, r in enumerate(records)
                if r["dynamodb"]["SequenceNumber"] == SequenceNumber
            )
        return {"ShardIterator": f"{ShardId}|{index}|{self.empty_pages}"}

    def get_records(self, ShardIterator, Limit):
        self.calls += 1
        if self.expire_once:
            self.expire_once = False
            raise ClientError(
                {"Error": {"Code": "ExpiredIteratorException", "Message": "old"}}, "GetRecords"
            )
        sid, index, empties = ShardIterator.split("|")
        index, empties = int(index), int(empties)
        _parent, closed, records = self.shards[sid]
        if empties:  # an empty page in the middle of the shard
            return {"Records": [], "NextShardIterator": f"{sid}|{index}|{empties - 1}"}
        page = records[index : index + self.page]
        nxt = index + len(page)
        response = {"Records": page}
        if not (closed and nxt >= len(records)):
            response["NextShardIterator"] = f"{sid}|{nxt}|{self.empty_pages if page else 0}"
        return response


class Recorder:
    def __init__(self):
        self.seen: list[str] = []

    def process_event(self, event):
        self.seen += [r["dynamodb"]["SequenceNumber"][-3:] for r in event["Records"]]
        return BatchOutcome(response={"batchItemFailures": []})


def records(*seqs):
    return [stream_record("INSERT", None, {"pk": "a", "sk": str(s)}, seq=s) for s in seqs]


def test_parents_before_children_and_every_record_once():
    fake = FakeStreams(
        {
            "parent": (None, True, records(101, 102, 103)),
            "child-a": ("parent", True, records(201, 202)),
            "child-b": ("parent", False, records(301)),
        }
    )
    recorder = Recorder()
    StreamRunner(recorder, fake, ARN, batch_size=2, tumbling_window_seconds=None).run()
    assert recorder.seen[:3] == ["101", "102", "103"]
    assert sorted(recorder.seen[3:]) == ["201", "202", "301"]


def test_empty_pages_in_a_closed_shard_do_not_end_it():
    fake = FakeStreams({"s": (None, True, records(1, 2, 3, 4, 5))}, empty_pages=3)
    recorder = Recorder()
    StreamRunner(recorder, fake, ARN, batch_size=2, tumbling_window_seconds=None).run()
    assert recorder.seen == ["001", "002", "003", "004", "005"]


def test_expired_iterator_is_renewed_without_losing_or_repeating_records():
    fake = FakeStreams({"s": (None, False, records(1, 2, 3))}, expire_once=True)
    recorder = Recorder()
    StreamRunner(
        recorder, fake, ARN, batch_size=2, tumbling_window_seconds=None, poll_interval=0
    ).run()
    assert recorder.seen == ["001", "002", "003"]
