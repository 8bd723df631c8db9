"""Test doubles shared by the unit and integration tests: a settable clock and a Streams API of
given shards."""

from __future__ import annotations

from botocore.exceptions import ClientError


class Clock:
    """A clock the test sets: ``clock()`` returns ``clock.now`` (epoch seconds)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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
        if ShardIteratorType == "LATEST":  # just after the shard's most recent record
            index = len(records)
        elif ShardIteratorType == "AFTER_SEQUENCE_NUMBER":
            index = next(
                i + 1
                for i, r in enumerate(records)
                if r["dynamodb"]["SequenceNumber"] == SequenceNumber
            )
        # empty pages precede a shard's records, not its end (where LATEST points)
        empties = 0 if ShardIteratorType == "LATEST" else self.empty_pages
        return {"ShardIterator": f"{ShardId}|{index}|{empties}"}

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
