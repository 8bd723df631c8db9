"""A global table is counted in one home Region: the handler refuses to count elsewhere, and on
a global table with no home Region set (aggregator.dynamodb.tablecheck.home_region_refusal).

DynamoDB is a botocore Stubber: it answers the ``DescribeTable`` it is given and fails on any
other request, so a refused cold start is seen to write nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from aggregator import handler as handler_module
from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import load_rules
from aggregator.dynamodb.tablecheck import (
    HomeRegionError,
    home_region_refusal,
    unhomed_replicas_warning,
)
from aggregator.handler import HandlerSettings, build_processor

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "tests" / "events" / "rules.yaml"


def _description(replicas: list[str]) -> dict[str, Any]:
    """``DescribeTable``'s ``Table`` for a table keyed as the default layout, with replicas in
    ``replicas`` (the shape of the Developer Guide's example, "Determining the version of a
    global table")."""
    table: dict[str, Any] = {
        "TableName": "orders",
        "TableStatus": "ACTIVE",
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
    }
    if replicas:
        table["GlobalTableVersion"] = "2019.11.21"
        table["Replicas"] = [{"RegionName": r, "ReplicaStatus": "ACTIVE"} for r in replicas]
    return table


@pytest.fixture
def dynamodb() -> Any:
    return boto3.client(
        "dynamodb",
        region_name="eu-west-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def _settings(region: str | None, home_region: str | None) -> HandlerSettings:
    return HandlerSettings(
        "orders", RULES, rule_manifest=False, region=region, home_region=home_region
    )


def test_outside_the_home_region_nothing_is_requested(dynamodb: Any) -> None:
    with Stubber(dynamodb) as stub:  # no response queued: any request would fail the test
        with pytest.raises(HomeRegionError) as info:
            build_processor(_settings("us-east-1", "eu-west-1"), client=dynamodb)
        stub.assert_no_pending_responses()
    message = str(info.value)
    assert message.startswith(
        "not counting: table 'orders' is counted in its home Region eu-west-1 "
        "(AGGREGATOR_HOME_REGION) and this function runs in us-east-1;"
    )
    assert "remove the stream subscription in us-east-1" in message
    assert "HomeRegion=eu-west-1" in message
    assert "on-failure queue" in message
    assert isinstance(info.value, ConfigError)


def test_a_global_table_without_a_home_region_counts_and_says_so_after_one_describe(
    dynamodb: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with Stubber(dynamodb) as stub:
        stub.add_response(
            "describe_table",
            {"Table": _description(["us-east-1", "ap-southeast-2"])},
            {"TableName": "orders"},
        )
        with caplog.at_level(logging.ERROR):
            processor = build_processor(_settings("eu-west-1", None), client=dynamodb)
        stub.assert_no_pending_responses()
    assert [r.name for r in processor.engine.rules] == [r.name for r in load_rules(RULES)]
    message = unhomed_replicas_warning(
        "orders", region="eu-west-1", description=_description(["us-east-1", "ap-southeast-2"])
    )
    assert message is not None and message.startswith(
        "counting table 'orders' in eu-west-1, a global table with replicas in us-east-1, "
        "ap-southeast-2, without a home Region:"
    )
    assert "HomeRegion=<the Region that counts>" in message
    assert any(message in record.getMessage() for record in caplog.records)
    assert (
        unhomed_replicas_warning("orders", region="eu-west-1", description=_description([])) is None
    )


@pytest.mark.parametrize(
    ("region", "home_region", "replicas"),
    [
        ("eu-west-1", "eu-west-1", ["us-east-1"]),  # the home Region of a global table
        ("eu-west-1", None, []),  # a table without replicas
        ("eu-west-1", "eu-west-1", []),
        (None, "eu-west-1", ["us-east-1"]),  # outside Lambda (no AWS_REGION): not decidable
    ],
)
def test_the_home_region_and_a_plain_table_count(
    dynamodb: Any, region: str | None, home_region: str | None, replicas: list[str]
) -> None:
    with Stubber(dynamodb) as stub:
        stub.add_response(
            "describe_table", {"Table": _description(replicas)}, {"TableName": "orders"}
        )
        processor = build_processor(_settings(region, home_region), client=dynamodb)
        stub.assert_no_pending_responses()
    assert [r.name for r in processor.engine.rules] == [r.name for r in load_rules(RULES)]


@pytest.mark.parametrize(
    ("region", "home_region", "replicas", "refused"),
    [
        ("us-east-1", "eu-west-1", None, True),  # decided before any request
        ("us-east-1", "eu-west-1", ["eu-west-1"], True),
        ("eu-west-1", "eu-west-1", ["us-east-1"], False),
        ("eu-west-1", None, None, False),  # not described yet: nothing known against it
        ("eu-west-1", None, [], False),
        ("eu-west-1", None, ["us-east-1"], False),  # counted, with an error logged
        (None, None, ["us-east-1"], False),
    ],
)
def test_home_region_refusal(
    region: str | None, home_region: str | None, replicas: list[str] | None, refused: bool
) -> None:
    refusal = home_region_refusal("orders", region=region, home_region=home_region)
    assert (refusal is not None) is refused
    # replicas never refuse by themselves: the handler warns about them (without a home Region)
    description = None if replicas is None else _description(replicas)
    warning = unhomed_replicas_warning("orders", region=region, description=description)
    assert (warning is not None) is bool(replicas)


def test_settings_read_the_home_region_and_the_functions_region() -> None:
    settings = HandlerSettings.from_env(
        {
            "AGGREGATOR_TABLE_NAME": "orders",
            "AGGREGATOR_HOME_REGION": "eu-west-1",
            "AWS_REGION": "us-east-1",
        }
    )
    assert (settings.home_region, settings.region) == ("eu-west-1", "us-east-1")
    # the template passes its parameter's default, an empty string: no home Region
    empty = HandlerSettings.from_env({"AGGREGATOR_TABLE_NAME": "t", "AGGREGATOR_HOME_REGION": ""})
    assert (empty.home_region, empty.region) == (None, None)
    with pytest.raises(ConfigError, match="AGGREGATOR_HOME_REGION must be a Region name"):
        HandlerSettings.from_env({"AGGREGATOR_TABLE_NAME": "t", "AGGREGATOR_HOME_REGION": "Europe"})


@dataclass
class LambdaContext:
    function_name: str = "aggregator"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:aggregator"
    aws_request_id: str = "5f3e0a5e-0000-4000-8000-000000000001"


@pytest.mark.filterwarnings("ignore:No application metrics")  # Powertools: none in a refusal
def test_every_batch_fails_with_the_logged_reason_decided_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Lambda retries a failed batch (bisected, up to MaximumRetryAttempts) and then sends it
    to the on-failure queue: each attempt fails with the same logged error, and the cold start
    (which would describe the table) is not repeated per batch."""
    monkeypatch.setenv("AGGREGATOR_TABLE_NAME", "orders")
    monkeypatch.setenv("AGGREGATOR_DEFINITIONS", str(RULES))
    monkeypatch.setenv("AGGREGATOR_HOME_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    builds = []
    real_build = handler_module.build_processor

    def counting_build(*args: Any, **kwargs: Any) -> Any:
        builds.append(args)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(handler_module, "build_processor", counting_build)
    handler_module.reset()
    event = {"Records": []}
    try:
        for _ in range(3):
            with pytest.raises(HomeRegionError, match="home Region eu-west-1"):
                handler_module.handler(event, LambdaContext())
    finally:
        handler_module.reset()
    assert len(builds) == 1
    logged = [r for r in caplog.records if "not counting" in r.getMessage()]
    assert len(logged) == 3
    assert all(r.levelname == "ERROR" for r in logged)
    assert all("runs in us-east-1" in r.getMessage() for r in logged)
