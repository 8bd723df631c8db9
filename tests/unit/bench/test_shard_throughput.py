"""The shard throughput benchmark's own pieces (no servers, no timing): the latency hook, the
recorder, the batches, the last line, and the defaults it reports against."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from cfnlint.decode.cfn_yaml import loads as cfn_yaml_loads
from moto import mock_aws

from aggregator.core.rules import load_rules
from aggregator.dynamodb.writer import DEFAULT_MAX_WORKERS
from aggregator.handler import client_config
from aggregator.runtime.processor import create_processor
from bench.shard_throughput import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_WORKERS,
    LatencyHook,
    Recorder,
    RunFigures,
    batches,
    shard_line,
)
from tests.factories import stream_record

ROOT = Path(__file__).resolve().parents[3]


def test_the_last_line_has_the_issues_format():
    assert shard_line(2345.9, 8.0, 10_000) == (
        "shard-throughput: 2346 records/s per shard at 8 ms a request (batch 10000)"
    )
    assert shard_line(12.0, 2.5, 100) == (
        "shard-throughput: 12 records/s per shard at 2.5 ms a request (batch 100)"
    )


def test_the_defaults_are_the_templates_and_the_processors():
    for path in (ROOT / "template.yaml", ROOT / "aggregator" / "cli" / "project" / "template.yaml"):
        template = cfn_yaml_loads(path.read_text())
        assert template["Parameters"]["BatchSize"]["Default"] == DEFAULT_BATCH_SIZE
    assert DEFAULT_WORKERS == DEFAULT_MAX_WORKERS
    processor = create_processor(
        load_rules(ROOT / "definitions" / "flights.yaml"),
        boto3.client("dynamodb", region_name="us-east-1", config=client_config()),
        "table",
    )
    assert processor.writer.max_workers == DEFAULT_MAX_WORKERS  # type: ignore[attr-defined]
    processor.writer.close()


def test_the_handlers_client_skips_client_side_validation_and_pools_enough_connections():
    config = client_config(32)
    assert config.parameter_validation is False
    assert config.max_pool_connections == 64
    assert config.retries == {"mode": "standard", "max_attempts": 10}
    assert client_config(1).max_pool_connections == 10


def test_the_latency_hook_waits_once_per_request_and_counts_them():
    waits: list[float] = []
    hook = LatencyHook(0.008, sleep=waits.append)
    client = boto3.client(
        "dynamodb",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )
    hook.attach(client)
    with mock_aws():  # moto answers after the hook (it is registered later on the event)
        client.list_tables()
        with pytest.raises(client.exceptions.ResourceNotFoundException):
            client.describe_table(TableName="missing")
    assert hook.requests == 2
    assert waits == [0.008, 0.008]
    with pytest.raises(ValueError, match="negative"):
        LatencyHook(-1)


def _client() -> object:
    return boto3.client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


def test_the_recorder_answers_the_recorded_requests_in_order_and_refuses_others():
    recorder = Recorder()
    key = {"pk": {"S": "a"}, "sk": {"S": "b"}}
    with mock_aws():
        live = _client()
        live.create_table(  # type: ignore[attr-defined]
            TableName="tbl",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        recorder.record(live)
        recorded = [
            live.update_item(  # type: ignore[attr-defined]
                TableName="tbl",
                Key=key,
                UpdateExpression="ADD v :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
                ReturnValues="ALL_NEW",
            )["Attributes"]["v"]
            for _ in range(2)
        ]
    assert recorded == [{"N": "1"}, {"N": "2"}]
    assert recorder.recorded == 2
    replaying = _client()  # no moto: answers come from the recording only
    unused = recorder.replay(replaying)
    assert unused() == 2
    replayed = replaying.update_item(  # type: ignore[attr-defined]
        TableName="tbl",
        Key=key,
        UpdateExpression="ADD v :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )["Attributes"]["v"]
    assert replayed == {"N": "1"} and unused() == 1
    with pytest.raises(LookupError, match="did not"):
        replaying.get_item(TableName="tbl", Key=key)  # type: ignore[attr-defined]


def _records(count: int, *, per_second: int) -> list[dict]:
    out = []
    for i in range(count):
        record = stream_record("INSERT", None, {"pk": "p", "sk": str(i)}, seq=i + 1)
        record["dynamodb"]["ApproximateCreationDateTime"] = 1_700_000_020 + i // per_second
        out.append(record)
    return out


def test_batches_end_at_the_batch_size_the_window_and_the_payload():
    records = _records(50, per_second=1)  # from 20 s before a window's end
    assert (1_700_000_020 + 20) % 60 == 0
    assert [len(b) for b in batches(records, 15)] == [15, 5, 15, 15]
    assert [len(b) for b in batches(records, 100, size_of=lambda r: 1, payload_limit=7)] == [
        7,
        7,
        6,
        7,
        7,
        7,
        7,
        2,
    ]
    assert sum(map(len, batches(records, 100))) == 50  # nothing lost or repeated
    assert [r for b in batches(records, 7) for r in b] == records  # in stream order


def test_run_figures_per_record_and_with_poll_gaps():
    run = RunFigures(
        10_000,
        32,
        8,
        records=20_000,
        batches=4,
        requests=10_000,
        seconds=8.0,
        cpu_seconds=5.0,
        exact=True,
    )
    assert run.records_per_second == 2500
    assert run.with_poll_gaps == 20_000 / 9.0
    assert run.requests_per_record == 0.5
    assert run.cpu_ms_per_record == 0.25
    assert run.cpu_bound == 4000
