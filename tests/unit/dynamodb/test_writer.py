"""Writer request shapes, failure reporting and the capacity model (fake client, no I/O)."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from botocore.exceptions import ClientError

from aggregator.core.engine import Engine
from aggregator.core.exceptions import WriteError
from aggregator.core.records import StreamRecord
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.sizes import attribute_size, item_size, write_units
from aggregator.dynamodb.updates import resolved
from aggregator.dynamodb.writer import AtLeastOnceWriter
from aggregator.runtime.processor import StreamProcessor
from tests.factories import stream_record

RULES = RuleSet.of(
    rule("count", key="{carrier}", match={"kind": "flight"}, leaderboard=True),
    rule("total", key="ALL", match={"kind": "flight"}),
)


class FakeClient:
    def __init__(self, fail_sort_keys=(), fail_put=False):
        self.calls = []
        self.fail = set(fail_sort_keys)
        self.fail_put = fail_put
        self.lock = threading.Lock()

    def update_item(self, **kwargs):
        with self.lock:
            self.calls.append(("update_item", kwargs))
        if kwargs["Key"]["sk"]["S"] in self.fail:
            raise ClientError(
                {
                    "Error": {
                        "Code": "ProvisionedThroughputExceededException",
                        "Message": "slow down",
                    }
                },
                "UpdateItem",
            )
        return {"ConsumedCapacity": {"TableName": kwargs["TableName"], "CapacityUnits": 1.0}}

    def batch_get_item(self, **request):  # the leaderboard floors: none stored
        return {"Responses": {}}

    def put_item(self, **kwargs):
        with self.lock:
            self.calls.append(("put_item", kwargs))
        if self.fail_put:
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "x"}}, "PutItem")
        return {}


def batch(*records):
    return Engine(RULES).process([StreamRecord(r) for r in records])


def flight(carrier, sk="a"):
    return {"pk": "F", "sk": sk, "kind": "flight", "carrier": carrier}


def test_update_request_shape():
    client = FakeClient()
    writer = AtLeastOnceWriter(client, "tbl")
    result = writer.apply(batch(stream_record("INSERT", None, flight("UA"), seq=1)))
    calls = sorted((c[1] for c in client.calls), key=lambda k: k["Key"]["sk"]["S"])
    assert [(c["TableName"], c["Key"], c["ReturnConsumedCapacity"]) for c in calls] == [
        ("tbl", {"pk": {"S": "AGGREGATES"}, "sk": {"S": "count#UA"}}, "TOTAL"),
        ("tbl", {"pk": {"S": "AGGREGATES"}, "sk": {"S": "total#ALL"}}, "TOTAL"),
    ]
    assert [resolved(c) for c in calls] == [
        {
            "ADD": {"value": {"N": "1"}},
            "SET": {"rule": {"S": "count"}, "key": {"S": "UA"}, "lb": {"S": "count"}},
            "REMOVE": [],
            "CONDITION": None,
        },
        {
            "ADD": {"value": {"N": "1"}},
            "SET": {"rule": {"S": "total"}, "key": {"S": "ALL"}},
            "REMOVE": [],
            "CONDITION": None,
        },
    ]
    assert result.retry_from is None
    assert result.stats.requests == 2 and result.stats.items_written == 2
    # table item 1 WCU each, plus 1 WCU for putting count#UA's leaderboard index entry (a new
    # item: no entry to delete)
    assert result.stats.modelled_wcu == 3
    assert result.stats.modelled_index_wcu == 1
    assert result.stats.reported_wcu == Decimal(2)


def test_zero_sum_is_not_written_in_at_least_once_mode():
    client = FakeClient()
    result = AtLeastOnceWriter(client, "tbl").apply(
        batch(
            stream_record("INSERT", None, flight("UA"), seq=1),
            stream_record("REMOVE", flight("UA"), None, seq=2),
        )
    )
    assert client.calls == []
    assert result.stats.skipped_zero == 2


def test_failed_item_reports_smallest_first_sequence_number():
    client = FakeClient(fail_sort_keys={"count#AA"})
    result = AtLeastOnceWriter(client, "tbl").apply(
        batch(
            stream_record("INSERT", None, flight("UA", "a"), seq=10),
            stream_record("INSERT", None, flight("AA", "b"), seq=11),
            stream_record("INSERT", None, flight("AA", "c"), seq=12),
        )
    )
    assert result.retry_from == "000000000000000000011"
    assert result.stats.failed_items == 1 and result.stats.items_written == 2
    assert "count#AA" in result.errors[0]


def test_processor_reports_batch_item_failure():
    client = FakeClient(fail_sort_keys={"total#ALL"})
    processor = StreamProcessor(Engine(RULES), AtLeastOnceWriter(client, "tbl"))
    outcome = processor.process_event(
        {"Records": [stream_record("INSERT", None, flight("UA"), seq=7)]}
    )
    assert outcome.response == {"batchItemFailures": [{"itemIdentifier": "000000000000000000007"}]}


def test_dead_letter_failure_fails_the_invocation_before_any_delta():
    client = FakeClient(fail_put=True)
    processor = StreamProcessor(Engine(RULES), AtLeastOnceWriter(client, "tbl"))
    bad = {"pk": "F", "sk": "x", "kind": "flight"}  # no carrier: count cannot evaluate
    with pytest.raises(WriteError, match="could not dead-letter record"):
        processor.process_event(
            {
                "Records": [
                    stream_record("INSERT", None, flight("UA"), seq=3),
                    stream_record("INSERT", None, bad, seq=4),
                ]
            }
        )
    assert [c[0] for c in client.calls] == ["put_item"]  # no update was sent: Lambda retries all


def test_item_size_rules():
    assert attribute_size("héllo") == 6
    assert attribute_size(Decimal("12345")) == 4  # 5 digits -> 3 bytes + 1
    assert attribute_size(Decimal("1E+10")) == 2
    assert attribute_size(True) == 1
    assert attribute_size({"a": "b"}) == 3 + 1 + 1 + 1
    assert item_size({"pk": "AGGREGATES", "value": Decimal(7)}) == 2 + 10 + 5 + 2
    assert write_units(1) == 1 and write_units(1024) == 1 and write_units(1025) == 2
