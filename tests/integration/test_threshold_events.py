"""Threshold events through the handler's code on DynamoDB Local, EventBridge mocked by moto.

Each like and unlike is its own batch (batch size 1), so every application write moves its
post's stored count by exactly one: the counts' sequence, and from it every crossing, is computed
here from the writes alone, without the engine. The aggregates' records are read by the same
runner (they are the crossings' only source), under crashes mid-batch, duplicate deliveries and
a ``PutEvents`` that fails; the events are read back from an SQS queue that an EventBridge rule
on the bus targets, as a consumer would receive them.
"""

from __future__ import annotations

import json
import random
import re
import tempfile
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from aggregator.core.rules import load_rules
from aggregator.dev.faults import FaultInjectingClient
from aggregator.dev.runner import PositionStore, RunnerFaults, StreamRunner
from aggregator.dynamodb.streams import to_lambda_record
from aggregator.dynamodb.table import create_table
from aggregator.runtime.processor import create_processor
from aggregator.runtime.threshold_events import DETAIL_TYPE, EVENT_SOURCE
from tests.integration.harness import delete, put

pytestmark = pytest.mark.integration

RULES_TEXT = """
version: 1
rules:
  - name: likes_per_post
    match: {kind: like}
    key: "{post}"
    thresholds:
      - {name: popular, above: 3}
      - {name: quiet, below: 2, keys: ["p1"]}
  - name: likes_per_hour
    match: {kind: like}
    key: "{post}"
    window: {time: at, unit: epoch_seconds, granularities: [hour, 600], retention: 48h}
    thresholds:
      - {name: busy-hour, above: 2, granularity: hour}
      - {name: busy-10m, above: 3, granularity: 600}
"""
_RULES_FILE = Path(tempfile.mkdtemp(prefix="thresholds-")) / "rules.yaml"
_RULES_FILE.write_text(RULES_TEXT, encoding="utf-8")
RULES = load_rules(_RULES_FILE)
BUS = "alerts"
HOUR = 3600


class FlakyEvents:
    """An EventBridge client whose ``put_events`` fails (a throttle) on the calls ``fail``
    names (1 = the first); counts the calls."""

    def __init__(self, client: Any, fail: set[int]) -> None:
        self.client, self.fail, self.calls = client, fail, 0

    def put_events(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls in self.fail:
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}},
                "PutEvents",
            )
        return self.client.put_events(**kwargs)


def _expected(writes: list[tuple[str, int, int]], hour0: int) -> Counter[tuple[Any, ...]]:
    """Every crossing the writes make, computed from the counts alone (each write is its own
    batch's): ``(rule, key, granularity, bucket, threshold, entered, old, new)``, ``old``
    ``None`` for an aggregate's first write."""
    lines = {  # (rule, threshold) -> (holds(value), keys, granularity)
        ("likes_per_post", "popular"): (lambda v: v >= 3, None, None),
        ("likes_per_post", "quiet"): (lambda v: v < 2, {"p1"}, None),
        ("likes_per_hour", "busy-hour"): (lambda v: v >= 2, None, "hour"),
        ("likes_per_hour", "busy-10m"): (lambda v: v >= 3, None, "600s"),
    }
    counts: Counter[tuple[str, str, Any, Any]] = Counter()
    written: set[tuple[str, str, Any, Any]] = set()  # aggregates with an item (after INSERT)
    out: Counter[tuple[Any, ...]] = Counter()
    for post, step, at in writes:
        ten_minutes = at - at % 600
        for rule, granularity, bucket in (
            ("likes_per_post", None, None),
            ("likes_per_hour", "hour", time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(at))),
            (
                "likes_per_hour",
                "600s",
                time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(ten_minutes)),
            ),
        ):
            aggregate = (rule, post, granularity, bucket)
            old = counts[aggregate]
            new = old + step
            counts[aggregate] = new
            existed = aggregate in written
            written.add(aggregate)
            for (line_rule, name), (holds, keys, only) in lines.items():
                if line_rule != rule or (keys is not None and post not in keys):
                    continue
                if only is not None and only != granularity:  # the threshold's buckets only
                    continue
                # an INSERT enters what its value meets and leaves nothing
                if (existed and holds(old)) != holds(new):
                    before = str(old) if existed else None  # the first write has no old value
                    out[(*aggregate, name, holds(new), before, str(new))] += 1
    assert hour0  # the buckets are this test's
    return out


def _received(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    events = []
    while True:
        batch = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            return events
        for message in batch:
            events.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


def _crossed(details: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """``(rule, granularity, threshold, entered, old, new)`` of each event's detail."""
    return Counter(
        (
            d["rule"],
            d.get("granularity"),
            d["threshold"],
            d["entered"],
            d["old_value"],
            d["new_value"],
        )
        for d in details
    )


@pytest.fixture
def eventbridge():
    """A moto EventBridge bus ``alerts`` whose rule sends every ddb-aggregator event to an SQS
    queue; yields ``(events client, sqs client, queue url)``."""
    with mock_aws():
        events = boto3.client("events", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        events.create_event_bus(Name=BUS)
        queue_url = sqs.create_queue(QueueName="alerts")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        events.put_rule(
            Name="crossings",
            EventBusName=BUS,
            EventPattern=json.dumps({"source": [EVENT_SOURCE], "detail-type": [DETAIL_TYPE]}),
        )
        events.put_targets(
            Rule="crossings", EventBusName=BUS, Targets=[{"Id": "queue", "Arn": queue_arn}]
        )
        yield events, sqs, queue_url


def _runner(ddb, streams, name, arn, events, **faults: Any) -> StreamRunner:
    client = FaultInjectingClient(ddb, layout=RULES.layout)
    processor = create_processor(RULES, client, name, events_client=lambda: events, event_bus=BUS)
    return StreamRunner(
        processor,
        streams,
        arn,
        batch_size=1,
        tumbling_window_seconds=60,
        positions=PositionStore(ddb, name, RULES.layout),
        faults=RunnerFaults(client=client, **faults),
    )


def test_crossings_up_down_and_back_are_each_one_event_with_ids_stable_across_deliveries(
    ddb, streams, eventbridge
) -> None:
    events_client, sqs, queue_url = eventbridge
    name = f"thresholds-{random.randrange(10**9)}"
    arn = create_table(ddb, name)
    rng = random.Random(34)
    hour0 = (int(time.time()) // HOUR) * HOUR
    likes: dict[str, list[str]] = {"p1": [], "p2": [], "p3": []}
    writes: list[tuple[str, int, int]] = []
    n = 0
    # p1 climbs past 3, falls under 2 and climbs again; p2 crosses once; p3 never reaches 3
    plan = [("p1", +1)] * 4 + [("p1", -1)] * 3 + [("p1", +1)] * 3 + [("p2", +1)] * 3
    plan += [("p3", +1)] * 2
    for post, step in plan:
        at = hour0 + rng.choice((0, HOUR)) + rng.randrange(60)
        if step > 0:
            n += 1
            sk = f"LIKE#{n}"
            put(ddb, name, {"pk": post, "sk": sk, "kind": "like", "post": post, "at": at})
            likes[post].append(f"{sk}:{at}")
        else:
            sk, _, at_text = likes[post].pop(rng.randrange(len(likes[post]))).partition(":")
            at = int(at_text)
            delete(ddb, name, post, sk)
        writes.append((post, step, at))
    expected = _expected(writes, hour0)
    # p1: "quiet" entered at its INSERT, then 6 crossings up and down
    assert sum(v for k, v in expected.items() if k[0] == "likes_per_post" and k[1] == "p1") == 7
    assert not any(k[1] == "p3" and k[0] == "likes_per_post" for k in expected)
    # both granularities cross their own threshold, and a first write enters "quiet"
    assert {k[2] for k in expected if k[0] == "likes_per_hour"} == {"hour", "600s"}
    assert ("likes_per_post", "p1", None, None, "quiet", True, None, "1") in expected

    flaky = FlakyEvents(events_client, fail={2, 5})
    runner = _runner(
        ddb,
        streams,
        name,
        arn,
        flaky,
        crash=lambda b: 0 if b % 7 == 3 else None,  # crash before the update, some batches
        duplicate=lambda b: b % 3 == 0,
    )
    stats = runner.run()
    assert stats.failures == 0 and stats.duplicates > 0 and stats.retries > 0
    received = _received(sqs, queue_url)
    by_id: dict[str, list[dict[str, Any]]] = {}
    for event in received:
        assert event["source"] == EVENT_SOURCE and event["detail-type"] == DETAIL_TYPE
        by_id.setdefault(event["detail"]["id"], []).append(event["detail"])
    # every delivery of one crossing carries the same detail (the id is the record's)
    for details in by_id.values():
        assert all(d == details[0] for d in details)
    got = Counter(
        (
            d["rule"],
            d["key"],
            d.get("granularity"),
            d.get("bucket"),
            d["threshold"],
            d["entered"],
            d["old_value"],
            d["new_value"],
        )
        for details in by_id.values()
        for d in details[:1]
    )
    assert got == expected
    # duplicates were delivered (a failed put, duplicate batches) and told apart by id
    assert len(received) > len(by_id)
    assert flaky.calls > len(by_id) // 10


def test_a_crossing_comes_from_the_aggregates_record_not_from_the_write(
    ddb, streams, eventbridge
) -> None:
    """The application's records alone write the aggregates past the line and send nothing;
    the aggregates' own records, read next, send the crossing."""
    events_client, sqs, queue_url = eventbridge
    name = f"thresholds-{random.randrange(10**9)}"
    arn = create_table(ddb, name)
    at = int(time.time())
    for i in range(4):
        put(ddb, name, {"pk": "p9", "sk": f"LIKE#{i}", "kind": "like", "post": "p9", "at": at})
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records = streams.get_records(ShardIterator=iterator)["Records"]
    application = [r for r in records if r["dynamodb"]["Keys"]["pk"]["S"] == "p9"]
    assert len(application) == 4
    processor = create_processor(
        RULES, ddb, name, events_client=lambda: events_client, event_bus=BUS
    )

    def event(batch: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "Records": [to_lambda_record(r, arn) for r in batch],
            "shardId": shard,
            "eventSourceARN": arn,
        }

    outcome = processor.process_event(event(application))
    assert outcome.write.items_written >= 2 and outcome.threshold_events == 0
    assert _received(sqs, queue_url) == []
    stored = ddb.get_item(
        TableName=name,
        Key={"pk": {"S": "AGGREGATES"}, "sk": {"S": "likes_per_post#p9"}},
        ConsistentRead=True,
    )["Item"]
    assert Decimal(stored["value"]["N"]) == 4  # past the line, and no event yet
    after = streams.get_records(ShardIterator=iterator)["Records"]
    mine = [r for r in after if r["dynamodb"]["Keys"]["pk"]["S"] == "AGGREGATES"]
    assert mine
    outcome = processor.process_event(event(mine))
    details = [e["detail"] for e in _received(sqs, queue_url)]
    # each aggregate's first write (4 likes in one batch): no old value; each bucket crosses
    # its granularity's threshold only
    assert _crossed(details) == Counter(
        {
            ("likes_per_post", None, "popular", True, None, "4"): 1,
            ("likes_per_hour", "hour", "busy-hour", True, None, "4"): 1,
            ("likes_per_hour", "600s", "busy-10m", True, None, "4"): 1,
        }
    )
    assert outcome.threshold_events == 3


def test_the_lambda_handler_puts_crossings_on_its_configured_bus(
    ddb, streams, dynamodb_local, eventbridge, monkeypatch
) -> None:
    """aggregator.handler.handler, configured as the template configures it
    (AGGREGATOR_EVENT_BUS), with EventBridge mocked: the application's batch crosses nothing
    by itself; the aggregates' batch puts the crossings on that bus."""
    from dataclasses import dataclass

    from aggregator import handler as handler_module

    @dataclass
    class Context:
        function_name: str = "aggregator"
        memory_limit_in_mb: int = 512
        invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:aggregator"
        aws_request_id: str = "5f3e0a5e-0000-4000-8000-000000000002"

    _, sqs, queue_url = eventbridge
    name = f"thresholds-{random.randrange(10**9)}"
    arn = create_table(ddb, name)
    for variable, value in {
        "AGGREGATOR_TABLE_NAME": name,
        "AGGREGATOR_DEFINITIONS": str(_RULES_FILE),
        "AGGREGATOR_ENDPOINT_URL": dynamodb_local.endpoint_url,
        "AGGREGATOR_EVENT_BUS": BUS,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(variable, value)
    handler_module.reset()
    at = int(time.time())
    for i in range(3):
        put(ddb, name, {"pk": "p7", "sk": f"LIKE#{i}", "kind": "like", "post": "p7", "at": at})
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]

    def records(pk: str) -> list[dict[str, Any]]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        found = streams.get_records(ShardIterator=iterator)["Records"]
        return [to_lambda_record(r, arn) for r in found if r["dynamodb"]["Keys"]["pk"]["S"] == pk]

    def invoke(batch: list[dict[str, Any]]) -> dict[str, Any]:
        event = {"Records": batch, "shardId": shard, "window": {"start": "x", "end": "y"}}
        return handler_module.handler(event, Context())

    try:
        assert invoke(records("p7"))["batchItemFailures"] == []
        assert _received(sqs, queue_url) == []  # written past the line, nothing sent yet
        assert invoke(records("AGGREGATES"))["batchItemFailures"] == []
        details = [e["detail"] for e in _received(sqs, queue_url)]
        assert _crossed(details) == Counter(
            {
                ("likes_per_post", None, "popular", True, None, "3"): 1,
                ("likes_per_hour", "hour", "busy-hour", True, None, "3"): 1,
                ("likes_per_hour", "600s", "busy-10m", True, None, "3"): 1,
            }
        )
        assert {d["table"] for d in details} == {name}
    finally:
        handler_module.reset()


SCORES_TEXT = """
version: 1
rules:
  - name: score
    key: "{player}"
    delta: {attribute: points}
    window: {time: at, unit: epoch_seconds, granularities: [hour, minute]}
    thresholds:
      - {name: cold, below: 5}
      - {name: big_hour, above: 10, granularity: hour}
"""
AT = 1_764_313_530  # 2025-11-28T07:05:30Z (no retention: the buckets never expire)


def _printed_events(output: str) -> Counter[str]:
    """The ``event:`` lines of a ``run``, each without its id (checked: 32 hex digits)."""
    lines = [" ".join(line.split()) for line in output.splitlines() if line.startswith("event:")]
    assert all(re.fullmatch(r".*, id [0-9a-f]{32}", line) for line in lines), lines
    return Counter(line.rpartition(", id ")[0] for line in lines)


def test_run_prints_a_first_write_and_each_granularitys_own_crossings(
    dynamodb_local, ddb, tmp_path
) -> None:
    """``run`` (no --event-bus) prints each crossing: an aggregate's first write as ``(first
    write) -> -30``; ``big_hour`` (granularity hour) crossed by the hour bucket only, ``cold``
    (every granularity) by the hour and the minute bucket."""
    from click.testing import CliRunner

    from aggregator.cli import main

    name = f"thresholds-{random.randrange(10**9)}"
    create_table(ddb, name)
    rules = tmp_path / "scores.yaml"
    rules.write_text(SCORES_TEXT, encoding="utf-8")
    args = ["run", "--table", name, "--endpoint-url", dynamodb_local.endpoint_url, "-d", str(rules)]
    hour = "hour 2025-11-28T07:00:00Z"
    minute = "minute 2025-11-28T07:05:00Z"
    put(ddb, name, {"pk": "p1", "sk": "GAME#1", "player": "p1", "points": -30, "at": AT})
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    assert _printed_events(first.output) == Counter(
        {
            f"event: score p1 {hour} entered cold (below 5): (first write) -> -30": 1,
            f"event: score p1 {minute} entered cold (below 5): (first write) -> -30": 1,
        }
    )
    assert "2 threshold events" in " ".join(first.output.split())
    put(ddb, name, {"pk": "p1", "sk": "GAME#2", "player": "p1", "points": 50, "at": AT})
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    assert _printed_events(second.output) == Counter(
        {
            f"event: score p1 {hour} left cold (below 5): -30 -> 20": 1,
            f"event: score p1 {hour} entered big_hour (above 10): -30 -> 20": 1,
            f"event: score p1 {minute} left cold (below 5): -30 -> 20": 1,
        }
    )


def test_run_event_bus_errors_name_eventbridge(dynamodb_local, ddb, tmp_path, monkeypatch) -> None:
    """DynamoDB Local answers; EventBridge cannot be reached, or has no region: one line each,
    naming EventBridge (not DynamoDB), exit 1."""
    from click.testing import CliRunner

    from aggregator.cli import main
    from aggregator.dev.local import find_free_port

    name = f"thresholds-{random.randrange(10**9)}"
    create_table(ddb, name)
    rules = tmp_path / "scores.yaml"
    rules.write_text(SCORES_TEXT, encoding="utf-8")
    args = ["run", "--table", name, "-d", str(rules), "--event-bus", "mybus"]
    monkeypatch.setenv("AGGREGATOR_ENDPOINT_URL", dynamodb_local.endpoint_url)

    def error(result: Any) -> str:
        assert result.exit_code == 1, result.output
        assert "Traceback" not in result.output
        (line,) = [line for line in result.stderr.splitlines() if line.strip()]
        return line

    closed = f"http://127.0.0.1:{find_free_port()}"
    monkeypatch.setenv("AGGREGATOR_EVENTS_ENDPOINT_URL", closed)
    assert error(CliRunner().invoke(main, args)) == (
        f"error: cannot reach the EventBridge endpoint {closed}: is an EventBridge endpoint "
        "running there? (AGGREGATOR_EVENTS_ENDPOINT_URL)"
    )
    # no region anywhere: DynamoDB Local's client takes us-east-1, EventBridge's has none
    monkeypatch.delenv("AGGREGATOR_EVENTS_ENDPOINT_URL")
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    empty = tmp_path / "empty-aws-config"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    assert error(CliRunner().invoke(main, args)) == (
        "error: no AWS region for EventBridge: set AWS_REGION (the event bus's region), or "
        "AGGREGATOR_EVENTS_ENDPOINT_URL for another endpoint"
    )
