"""The capacity model's control items: the writes a request makes under control partition key
values (modelled from the request), their peaks per second, and the client hook that sees them."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.dev.capacity import CapacityModel, ControlWrite, Peak, control_writes
from aggregator.dev.shards import SimulatedClock
from aggregator.dynamodb.costs import WriteObservation

CONTROL = "AGGREGATOR#CONTROL"


def key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


# "pk" + "AGGREGATOR#CONTROL" (2 + 18), "sk" + "fence#s1" (2 + 8), "m" + 2,000 characters
BIG_FENCE = {**key(CONTROL, "fence#s1"), "m": {"S": "x" * 2000}}  # 2,031 bytes: 2 WCU


def test_a_put_costs_a_unit_per_started_kb_of_its_item():
    (write,) = control_writes("PutItem", {"TableName": "t", "Item": BIG_FENCE}, DEFAULT_LAYOUT)
    assert write == ControlWrite(CONTROL, "fence#s1", 2, 2031)


def test_an_update_costs_its_key_names_and_values():
    params = {
        "TableName": "t",
        "Key": key(f"{CONTROL}#3", "routing#s1"),  # 2 + 20 + 2 + 10 = 34 bytes
        "UpdateExpression": "ADD #v :one",
        "ExpressionAttributeNames": {"#v": "value"},  # 5
        "ExpressionAttributeValues": {":one": {"N": "1"}},  # 2
    }
    assert control_writes("UpdateItem", params, DEFAULT_LAYOUT) == [
        ControlWrite(f"{CONTROL}#3", "routing#s1", 1, 41)
    ]
    params["ExpressionAttributeValues"] = {":big": {"S": "y" * 1100}}
    assert control_writes("UpdateItem", params, DEFAULT_LAYOUT)[0].wcu == 2  # 1,139 bytes


def test_only_control_partitions_count():
    for pk in ("AGGREGATES", "AGGREGATES#3", "AGGREGATES#likes#p1", "LIKE#1", "AGGREGATOR#RUNNER"):
        params = {"TableName": "t", "Key": key(pk, "x"), "UpdateExpression": "SET a = :a"}
        assert control_writes("UpdateItem", params, DEFAULT_LAYOUT) == [], pk
    assert (
        control_writes("GetItem", {"TableName": "t", "Key": key(CONTROL, "x")}, DEFAULT_LAYOUT)
        == []
    )


def test_a_delete_costs_one_unit_and_a_transaction_twice():
    delete = {"TableName": "t", "Key": key(CONTROL, "floor#r")}
    assert [w.wcu for w in control_writes("DeleteItem", delete, DEFAULT_LAYOUT)] == [1]
    params = {
        "TransactItems": [
            {"Put": {"TableName": "t", "Item": BIG_FENCE}},
            {"Update": {"TableName": "t", "Key": key("AGGREGATES", "r#k")}},
            {"ConditionCheck": {"TableName": "t", "Key": key(CONTROL, "manifest")}},
            {"Delete": {"TableName": "t", "Key": key(f"{CONTROL}#1", "backfill#r")}},
            {"Put": {"TableName": "other", "Item": BIG_FENCE}},
        ]
    }
    writes = control_writes("TransactWriteItems", params, DEFAULT_LAYOUT, table="t")
    assert [(w.partition, w.sort_key, w.wcu) for w in writes] == [
        (CONTROL, "fence#s1", 4),
        (f"{CONTROL}#1", "backfill#r", 2),
    ]


def test_a_batch_counts_each_request_of_the_table():
    params = {
        "RequestItems": {
            "t": [
                {"PutRequest": {"Item": BIG_FENCE}},
                {"DeleteRequest": {"Key": key(CONTROL, "top#r")}},
                {"PutRequest": {"Item": key("AGGREGATES", "r#k")}},
            ],
            "other": [{"PutRequest": {"Item": BIG_FENCE}}],
        }
    }
    writes = control_writes("BatchWriteItem", params, DEFAULT_LAYOUT, table="t")
    assert [(w.sort_key, w.wcu) for w in writes] == [("fence#s1", 2), ("top#r", 1)]
    assert len(control_writes("BatchWriteItem", params, DEFAULT_LAYOUT)) == 3  # any table


def test_without_a_sort_key_the_partition_key_names_the_control_item():
    layout = TableLayout(sort_key=None)
    item = {"pk": {"S": f"{CONTROL}#fence#s1"}, "aggregator_collection": {"S": CONTROL}}
    (write,) = control_writes("PutItem", {"TableName": "t", "Item": item}, layout)
    assert (write.partition, write.sort_key, write.wcu) == (CONTROL, "fence#s1", 1)
    app = {"pk": {"S": "LIKE#1"}}
    assert control_writes("PutItem", {"TableName": "t", "Item": app}, layout) == []


def test_control_peaks_count_toward_the_seconds_over_a_limit_once():
    model = CapacityModel()
    for i in range(600):  # aggregates: 600 WCU in second 10
        model.observe(WriteObservation(10 + i / 600, "AGGREGATES", f"r#{i}", 1, 50, None, 0))
    # a top-list merge the writers report, also seen by the hook below: not counted twice
    model.observe(WriteObservation(10.5, CONTROL, "top#r", 500, 2000, None, 0, aggregate=False))
    for i in range(700):  # second 10: 700 WCU of control writes, under the limit
        model.observe_control(ControlWrite(CONTROL, f"fence#{i}", 1, 100), 10 + i / 700)
    report = model.report()
    assert report.throttled_seconds == 0
    assert report.partition == Peak("AGGREGATES", 600, 10)  # what the writers report, as before
    assert report.control_partition == Peak(CONTROL, 700, 10)  # not 700 + 500
    assert report.hottest_partition == Peak(CONTROL, 700, 10)
    assert (report.control_writes, report.control_wcu) == (700, 700)
    for i in range(1200):  # second 11: 2,400 WCU under one control value
        model.observe_control(ControlWrite(f"{CONTROL}#2", f"routing#{i}", 2, 100), 11.1)
    report = model.report()
    assert report.control_partition == Peak(f"{CONTROL}#2", 2400, 11)
    assert report.control_partition.over_limit
    assert report.hottest_partition == report.control_partition
    assert report.throttled_seconds == 1
    assert report.item == Peak(f"{CONTROL}/top#r", 500, 10)  # items: what the writers report
    assert f"hottest control partition: 2,400 WCU/s ({CONTROL}#2) OVER LIMIT" in report.lines()


def test_without_watched_writes_the_report_is_as_before():
    model = CapacityModel()
    model.observe(WriteObservation(3.0, CONTROL, "top#r", 1500, 2000, None, 0, aggregate=False))
    report = model.report()
    assert report.control_partition is None
    assert report.partition == report.hottest_partition == Peak(CONTROL, 1500, 3)
    assert report.throttled_seconds == 2  # its item and its partition
    assert "hottest control partition: no writes" in report.lines()


@pytest.fixture
def client():
    return boto3.client(
        "dynamodb",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_watch_control_counts_a_clients_control_writes_at_the_clocks_time(client):
    model = CapacityModel()
    clock = SimulatedClock(100.75)
    stop = model.watch_control(client, clock, DEFAULT_LAYOUT, table="t")
    with Stubber(client) as stub:
        for operation in ("put_item",) * 3 + (
            "delete_item",
            "update_item",
            "transact_write_items",
            "batch_write_item",
            "put_item",
            "delete_item",
        ):
            stub.add_response(operation, {})
        client.put_item(TableName="t", Item=BIG_FENCE)  # 2 WCU
        client.put_item(TableName="t", Item=key("AGGREGATES", "r#k"))  # the writers' to count
        client.put_item(TableName="other", Item=BIG_FENCE)
        client.delete_item(TableName="t", Key=key(f"{CONTROL}#5", "floor#r"))  # 1
        client.update_item(
            TableName="t",
            Key=key(CONTROL, "routing#s"),
            UpdateExpression="SET a = :a",
            ExpressionAttributeValues={":a": {"N": "1"}},
        )  # 1
        clock.now = 101.0
        client.transact_write_items(
            TransactItems=[{"Delete": {"TableName": "t", "Key": key(CONTROL, "fence#s")}}]
        )  # 2
        client.batch_write_item(
            RequestItems={"t": [{"DeleteRequest": {"Key": key(CONTROL, "top#r")}}]}
        )  # 1
        stop()
        client.put_item(TableName="t", Item=BIG_FENCE)  # no longer watched
        client.delete_item(TableName="t", Key=key(CONTROL, "floor#r"))
    report = model.report()
    assert report.control_partition == Peak(CONTROL, 3, 101)  # the later second wins a tie
    assert (report.control_writes, report.control_wcu) == (5, 7)
