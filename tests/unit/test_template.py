"""Offline checks of the SAM template (template.yaml) and of requirements.txt.

No network and no AWS credentials: cfn-lint validates the template against its bundled
CloudFormation and SAM schemas, and the template is parsed with cfn-lint's own YAML loader,
which understands the CloudFormation short-form tags (!Ref, !GetAtt, !Sub, ...).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import lint_file
from cfnlint.decode.cfn_yaml import loads as cfn_yaml_loads
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from aggregator.core.layout import DEFAULT_LAYOUT
from aggregator.core.rules import load_rules
from aggregator.dynamodb.modes import WRITE_MODES
from aggregator.runtime.filters import check_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
REQUIREMENTS_PATH = ROOT / "requirements.txt"
PYPROJECT_PATH = ROOT / "pyproject.toml"

# The reserved partition keys the handler filters; the template must drop the same ones.
RESERVED_PARTITION_KEYS = DEFAULT_LAYOUT.reserved_partition_keys

# Runtime dependencies that only the command-line interface needs; not shipped to Lambda.
CLI_ONLY_DEPENDENCIES = {"click", "rich"}


# --------------------------------------------------------------------------------------------
# helpers / fixtures
# --------------------------------------------------------------------------------------------


def _resources_of_type(template: dict[str, Any], resource_type: str) -> dict[str, Any]:
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == resource_type
    }


def _only_resource(template: dict[str, Any], resource_type: str) -> tuple[str, dict[str, Any]]:
    found = _resources_of_type(template, resource_type)
    assert len(found) == 1, f"expected exactly one {resource_type}, found {sorted(found)}"
    ((name, resource),) = found.items()
    return name, resource


def _normalized_requirement(text: str) -> str:
    req = Requirement(text)
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    marker = f"; {req.marker}" if req.marker else ""
    # str(SpecifierSet) sorts its specifiers, so ">=2.6,<3" and "<3,>=2.6" compare equal.
    return f"{canonicalize_name(req.name)}{extras}{req.specifier}{marker}"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return cfn_yaml_loads(TEMPLATE_PATH.read_text(encoding="utf-8"), str(TEMPLATE_PATH))


@pytest.fixture(scope="module")
def table(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name, resource = _only_resource(template, "AWS::DynamoDB::Table")
    return name, resource["Properties"]


@pytest.fixture(scope="module")
def queue(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name, resource = _only_resource(template, "AWS::SQS::Queue")
    return name, resource["Properties"]


@pytest.fixture(scope="module")
def function(template: dict[str, Any]) -> dict[str, Any]:
    resource = template["Resources"]["AggregatorFunction"]
    assert resource["Type"] == "AWS::Serverless::Function"
    return resource["Properties"]


@pytest.fixture(scope="module")
def stream_event(function: dict[str, Any]) -> dict[str, Any]:
    event = function["Events"]["Stream"]
    assert event["Type"] == "DynamoDB"
    return event["Properties"]


# --------------------------------------------------------------------------------------------
# cfn-lint
# --------------------------------------------------------------------------------------------


def test_cfn_lint_reports_no_errors_or_warnings() -> None:
    matches = lint_file(TEMPLATE_PATH)
    # Informational (I...) findings only appear if a local config opts into them; errors (E...)
    # and warnings (W...) must be absent.
    findings = [m for m in matches if not m.rule.id.startswith("I")]
    assert findings == [], "cfn-lint findings:\n" + "\n".join(
        f"{m.rule.id} {m.message} ({m.filename}:{m.linenumber}:{m.columnnumber})" for m in findings
    )


# --------------------------------------------------------------------------------------------
# template structure
# --------------------------------------------------------------------------------------------


def test_template_is_a_sam_template(template: dict[str, Any]) -> None:
    assert template["Transform"] == "AWS::Serverless-2016-10-31"


def test_parameters(template: dict[str, Any]) -> None:
    params = template["Parameters"]
    assert params["TableName"]["Default"] == "ddb-aggregator"
    assert params["BatchSize"]["Default"] == 100
    assert (params["BatchSize"]["MinValue"], params["BatchSize"]["MaxValue"]) == (1, 10000)
    assert params["AggregatorMode"]["Default"] == "exactly-once"
    assert tuple(params["AggregatorMode"]["AllowedValues"]) == WRITE_MODES
    assert params["WindowSeconds"]["Default"] == 60
    assert params["LogLevel"]["Default"] == "INFO"


def test_table_keys_billing_and_stream(table: tuple[str, dict[str, Any]]) -> None:
    _, props = table
    attributes = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    assert attributes == {"pk": "S", "sk": "S", "lb": "S", "value": "N"}
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True


def test_leaderboard_gsi_shape(table: tuple[str, dict[str, Any]]) -> None:
    _, props = table
    assert props["GlobalSecondaryIndexes"] == [
        {
            "IndexName": "leaderboard",
            "KeySchema": [
                {"AttributeName": "lb", "KeyType": "HASH"},
                {"AttributeName": "value", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        }
    ]


def test_failure_queue(queue: tuple[str, dict[str, Any]]) -> None:
    _, props = queue
    assert props["SqsManagedSseEnabled"] is True
    assert props["MessageRetentionPeriod"] == 1209600


def test_function_settings(
    function: dict[str, Any], table: tuple[str, dict[str, Any]], queue: tuple[str, dict[str, Any]]
) -> None:
    table_name, _ = table
    queue_name, _ = queue
    assert function["CodeUri"] == "."
    assert function["Handler"] == "aggregator.handler.handler"
    assert function["Runtime"] == "python3.12"
    assert function["Architectures"] == ["arm64"]
    assert function["MemorySize"] == 512
    assert function["Timeout"] == 60
    assert function["Environment"]["Variables"] == {
        "AGGREGATOR_TABLE_NAME": {"Ref": table_name},
        "AGGREGATOR_DEFINITIONS": "definitions",
        "AGGREGATOR_MODE": {"Ref": "AggregatorMode"},
        "AGGREGATOR_CHECKPOINT_RETENTION_SECONDS": "90000",
        # the last resort for dead letters is the mapping's own on-failure queue
        "AGGREGATOR_ON_FAILURE_QUEUE_URL": {"Ref": queue_name},
        "POWERTOOLS_SERVICE_NAME": "ddb-aggregator",
        "POWERTOOLS_METRICS_NAMESPACE": "DdbAggregator",
        "POWERTOOLS_LOG_LEVEL": {"Ref": "LogLevel"},
    }


def test_function_policies_are_least_privilege(
    template: dict[str, Any],
    function: dict[str, Any],
    table: tuple[str, dict[str, Any]],
    queue: tuple[str, dict[str, Any]],
) -> None:
    table_name, _ = table
    queue_name, _ = queue
    policies = function["Policies"]
    assert isinstance(policies, list)

    # Names of every policy: managed policies are strings, SAM policy templates are
    # single-key mappings named after the template.
    names = [p if isinstance(p, str) else next(iter(p)) for p in policies]
    full_access = [n for n in names if "FullAccess" in str(n)]
    assert full_access == [], f"full-access managed policies attached: {full_access}"
    # Globals (if ever added) must not sneak policies in either.
    assert "Policies" not in template.get("Globals", {}).get("Function", {})

    assert policies == [
        {"DynamoDBCrudPolicy": {"TableName": {"Ref": table_name}}},
        {"SQSSendMessagePolicy": {"QueueName": {"Fn::GetAtt": [queue_name, "QueueName"]}}},
    ]


def test_stream_event_source_properties(
    stream_event: dict[str, Any],
    table: tuple[str, dict[str, Any]],
    queue: tuple[str, dict[str, Any]],
) -> None:
    table_name, _ = table
    queue_name, _ = queue
    assert stream_event["Stream"] == {"Fn::GetAtt": [table_name, "StreamArn"]}
    assert stream_event["StartingPosition"] == "TRIM_HORIZON"
    assert stream_event["BatchSize"] == {"Ref": "BatchSize"}
    assert stream_event["MaximumBatchingWindowInSeconds"] == 1
    # The per-shard ordering the aggregator relies on needs exactly one concurrent batch per shard.
    assert stream_event["ParallelizationFactor"] == 1
    # Lambda sends shardId (needed by the checkpoints) only with tumbling windows.
    assert stream_event["TumblingWindowInSeconds"] == {"Ref": "WindowSeconds"}
    assert stream_event["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert stream_event["BisectBatchOnFunctionError"] is True
    assert stream_event["MaximumRetryAttempts"] == 10
    assert stream_event["MaximumRecordAgeInSeconds"] == 86400
    assert stream_event["DestinationConfig"] == {
        "OnFailure": {"Type": "SQS", "Destination": {"Fn::GetAtt": [queue_name, "Arn"]}}
    }


def test_stream_filter_drops_the_frameworks_own_partitions(stream_event: dict[str, Any]) -> None:
    filters = stream_event["FilterCriteria"]["Filters"]
    pattern = json.loads(filters[0]["Pattern"])
    assert pattern == {
        "dynamodb": {"Keys": {"pk": {"S": [{"anything-but": list(RESERVED_PARTITION_KEYS)}]}}}
    }
    anything_but = pattern["dynamodb"]["Keys"]["pk"]["S"][0]["anything-but"]
    assert tuple(anything_but) == RESERVED_PARTITION_KEYS


def test_stream_filter_lets_exactly_the_derived_rules_sources_through(
    stream_event: dict[str, Any],
) -> None:
    rules = load_rules(ROOT / "definitions")
    assert rules.sources == ("flights_by_plane", "paths_per_player")
    assert check_template(TEMPLATE_PATH, rules) == []
    filters = [json.loads(f["Pattern"]) for f in stream_event["FilterCriteria"]["Filters"]]
    assert filters[1] == {
        "dynamodb": {
            "Keys": {
                "pk": {"S": ["AGGREGATES"]},
                "sk": {"S": [{"prefix": "flights_by_plane#"}, {"prefix": "paths_per_player#"}]},
            }
        }
    }


def test_filter_check_reports_a_template_missing_a_source(tmp_path) -> None:
    text = TEMPLATE_PATH.read_text(encoding="utf-8")
    stale = tmp_path / "template.yaml"
    stale.write_text(text.replace('{"prefix": "flights_by_plane#"}, ', ""), encoding="utf-8")
    problems = check_template(stale, load_rules(ROOT / "definitions"))
    assert len(problems) == 1
    assert "AggregatorFunction.Stream: FilterCriteria differ" in problems[0]
    assert "flights_by_plane#" in problems[0]


def test_outputs(template: dict[str, Any]) -> None:
    outputs = template["Outputs"]
    values = [o["Value"] for o in outputs.values()]
    table_name, _ = _only_resource(template, "AWS::DynamoDB::Table")
    queue_name, _ = _only_resource(template, "AWS::SQS::Queue")
    assert {"Ref": table_name} in values
    assert {"Fn::GetAtt": [table_name, "StreamArn"]} in values
    assert {"Fn::GetAtt": ["AggregatorFunction", "Arn"]} in values
    assert {"Ref": queue_name} in values  # Ref of an SQS queue is its URL


# --------------------------------------------------------------------------------------------
# requirements.txt
# --------------------------------------------------------------------------------------------


def test_requirements_txt_matches_pyproject_runtime_dependencies() -> None:
    pyproject = tomllib.loads(PYPROJECT_PATH.read_text(encoding="utf-8"))
    expected = {
        _normalized_requirement(dep)
        for dep in pyproject["project"]["dependencies"]
        if canonicalize_name(Requirement(dep).name) not in CLI_ONLY_DEPENDENCIES
    }

    lines = REQUIREMENTS_PATH.read_text(encoding="utf-8").splitlines()
    entries = [line.strip() for line in lines]
    entries = [line for line in entries if line and not line.startswith("#")]
    actual = [_normalized_requirement(line) for line in entries]

    assert len(actual) == len(set(actual)), f"duplicate lines in requirements.txt: {actual}"
    assert set(actual) == expected
    assert expected, "pyproject.toml lists no runtime dependencies"
