"""StreamRunner against a fake Streams API: shard order, empty pages, expired iterators."""

from __future__ import annotations

from botocore.exceptions import ClientError

from aggregator.dev.runner import StreamRunner
from aggregator.runtime.processor import BatchOutcome
from tests.factories import stream_record
from tests.fakes import FakeStreams

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x"


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


def test_trimmed_records_leave_the_iterator_to_be_taken_again():
    class TrimmedOnce(FakeStreams):
        trimmed = True

        def get_records(self, ShardIterator, Limit):
            if self.trimmed:
                self.trimmed = False
                raise ClientError(
                    {"Error": {"Code": "TrimmedDataAccessException", "Message": "x"}}, "GetRecords"
                )
            return super().get_records(ShardIterator, Limit)

    fake = TrimmedOnce({"s": (None, False, records(1, 2, 3))})
    recorder = Recorder()
    StreamRunner(
        recorder, fake, ARN, batch_size=2, tumbling_window_seconds=None, poll_interval=0
    ).run()
    assert recorder.seen == ["001", "002", "003"]
