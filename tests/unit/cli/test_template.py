"""Offline checks of the SAM template (aggregator/cli/project/template.yaml, which `aggregator
init` writes into a project; the build and init are tested in test_project.py), and of the
repository's own template.yaml, the same rendered for definitions/ (kept current, linted).

No network and no AWS credentials: cfn-lint validates the template against its bundled
CloudFormation and SAM schemas, and the template is parsed with cfn-lint's own YAML loader,
which understands the CloudFormation short-form tags (!Ref, !GetAtt, !Sub, ...). The function's
IAM policy is rendered here for each deployment (created or existing table, tracing on or off)
by resolving the template's conditions and the few intrinsic functions it uses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode.cfn_yaml import loads as cfn_yaml_loads

from aggregator.cli.template import render_template
from aggregator.core.layout import DEFAULT_LAYOUT
from aggregator.core.rules import load_rules
from aggregator.deploy.filters import check_template, filter_criteria
from aggregator.dynamodb.modes import WRITE_MODES
from tests.conftest import PK_ONLY_DEFINITIONS
from tests.unit.role_policy import (
    COLLECTION_SID,
    ITEM_WRITES,
    LEADERBOARD_SID,
    PK_ONLY_BACKFILL_ITEM_GRANTS,
    PK_ONLY_ITEM_GRANTS,
    TARGET_SID,
    assert_backfill_role_policy,
    assert_every_statement_allows_named_actions,
    assert_item_access_only_under_the_reserved_partitions,
    assert_no_other_table_access,
    assert_queue_and_log_permissions,
    assert_state_machine_role_policy,
    assert_stream_reads_are_scoped_to_the_stream,
    assert_xray_writes_only_when_traced,
    collection_index_query,
    pk_only_item_grants,
    target_attributes,
)

ROOT = Path(__file__).resolve().parents[3]
# the template `aggregator init` writes (package data), rendered for the demo rules
TEMPLATE_PATH = ROOT / "aggregator" / "cli" / "project" / "template.yaml"
# the repository's deployable template: this repository's own definitions/
ROOT_TEMPLATE = ROOT / "template.yaml"
RENDER_ROOT_TEMPLATE = "aggregator template -d definitions template.yaml"
"""The command that renders :data:`ROOT_TEMPLATE` for definitions/, run at the repository's top."""

# The reserved partition keys the handler filters; the template must drop the same ones.
RESERVED_PARTITION_KEYS = DEFAULT_LAYOUT.reserved_partition_keys

# An existing table to attach to, as a user would pass it.
EXISTING_TABLE = "orders"
EXISTING_TABLE_ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders"
EXISTING_STREAM_ARN = EXISTING_TABLE_ARN + "/stream/2024-05-01T12:00:00.000"

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


_NO_VALUE = object()


DEPLOYED_REGION = "eu-west-1"
"""The Region of the deployments below (``AWS::Region``), unless one names another."""


def _parameters(
    template: dict[str, Any], region: str = DEPLOYED_REGION, **values: str
) -> dict[str, str]:
    """Parameter values of one deployment: the defaults, overridden by ``values``, and the
    stack's Region as the pseudo parameter ``AWS::Region``."""
    params = {name: str(p.get("Default", "")) for name, p in template["Parameters"].items()}
    unknown = set(values) - set(params)
    assert not unknown, f"no such parameters: {unknown}"
    return {**params, **values, "AWS::Region": region}


def _value(node: Any, params: dict[str, str]) -> Any:
    if isinstance(node, dict) and set(node) == {"Ref"}:
        return params[node["Ref"]]
    return node


def _holds(template: dict[str, Any], node: Any, params: dict[str, str]) -> bool:
    """Evaluate a condition (Conditions section or a rule's assertion) for ``params``."""
    assert isinstance(node, dict) and len(node) == 1, f"not a condition: {node}"
    ((function, args),) = node.items()
    if function == "Fn::Equals":
        left, right = (_value(a, params) for a in args)
        return str(left) == str(right)
    if function == "Fn::Not":
        return not _holds(template, args[0], params)
    if function == "Fn::And":
        return all(_holds(template, a, params) for a in args)
    if function == "Fn::Or":
        return any(_holds(template, a, params) for a in args)
    if function == "Condition":
        return _holds(template, template["Conditions"][args], params)
    raise AssertionError(f"unsupported condition function {function}")


def _conditions(template: dict[str, Any], params: dict[str, str]) -> dict[str, bool]:
    return {name: _holds(template, c, params) for name, c in template["Conditions"].items()}


def _rule_failures(template: dict[str, Any], params: dict[str, str]) -> list[str]:
    """The AssertDescriptions of the template's Rules that ``params`` break (CloudFormation
    refuses such a deployment before it starts)."""
    failures = []
    for rule in template.get("Rules", {}).values():
        if "RuleCondition" in rule and not _holds(template, rule["RuleCondition"], params):
            continue
        for assertion in rule["Assertions"]:
            if not _holds(template, assertion["Assert"], params):
                failures.append(str(assertion["AssertDescription"]))
    return failures


def _render(node: Any, params: dict[str, str], conditions: dict[str, bool]) -> Any:
    """``node`` as CloudFormation would deploy it: ``Fn::If`` decided, ``AWS::NoValue`` dropped,
    parameters substituted, ``Fn::Split`` / ``Fn::Select`` / ``Fn::Sub`` over them evaluated.
    References to resources (``Ref``, ``Fn::GetAtt``) stay as they are."""
    if isinstance(node, list):
        items = [_render(item, params, conditions) for item in node]
        return [item for item in items if item is not _NO_VALUE]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((key, value),) = node.items()
        if key == "Fn::If":
            name, if_true, if_false = value
            return _render(if_true if conditions[name] else if_false, params, conditions)
        if key == "Ref" and value == "AWS::NoValue":
            return _NO_VALUE
        if key == "Ref" and value in params:
            return params[value]
        if key == "Fn::Split":
            separator, text = value[0], _render(value[1], params, conditions)
            if isinstance(text, str):
                return text.split(separator)
        if key == "Fn::Select":
            index, items = value[0], _render(value[1], params, conditions)
            if isinstance(items, list):
                return items[int(index)]
        if key == "Fn::Sub" and isinstance(value, list):
            text, variables = value[0], _render(value[1], params, conditions)
            if all(isinstance(v, str) for v in variables.values()):
                for name, v in variables.items():
                    text = text.replace("${" + name + "}", v)
                return text
    rendered = {key: _render(value, params, conditions) for key, value in node.items()}
    return {key: value for key, value in rendered.items() if value is not _NO_VALUE}


def _deploy(
    template: dict[str, Any], region: str = DEPLOYED_REGION, **values: str
) -> dict[str, Any]:
    """The template as one deployment with these parameter values, in ``region``: resources
    whose condition is false removed, everything else rendered (:func:`_render`)."""
    params = _parameters(template, region, **values)
    assert _rule_failures(template, params) == []
    conditions = _conditions(template, params)
    resources = {
        name: _render(resource, params, conditions)
        for name, resource in template["Resources"].items()
        if conditions.get(resource.get("Condition", ""), True)
    }
    outputs = {
        name: _render(output, params, conditions)
        for name, output in template["Outputs"].items()
        if conditions.get(output.get("Condition", ""), True)
    }
    return {"Resources": resources, "Outputs": outputs, "Conditions": conditions}


DEPLOYMENTS = {
    "created-table": {},
    "created-table-traced": {"Tracing": "Active"},
    "existing-table": {
        "ExistingTableName": EXISTING_TABLE,
        "ExistingTableStreamArn": EXISTING_STREAM_ARN,
    },
    "existing-table-traced": {
        "ExistingTableName": EXISTING_TABLE,
        "ExistingTableStreamArn": EXISTING_STREAM_ARN,
        "Tracing": "Active",
    },
}


def _expected_table_arn(deployment: str) -> Any:
    if deployment.startswith("existing"):
        return EXISTING_TABLE_ARN
    return {"Fn::GetAtt": ["Table", "Arn"]}


def _expected_stream_arn(deployment: str) -> Any:
    if deployment.startswith("existing"):
        return EXISTING_STREAM_ARN
    return {"Fn::GetAtt": ["Table", "StreamArn"]}


def _statements(
    deployed: dict[str, Any], *, targets: bool = False, role_name: str = "AggregatorRole"
) -> list[dict[str, Any]]:
    """The statements of the role ``role_name`` (the stream function's by default); those of
    target and leaderboard rules only with ``targets``
    (:func:`~tests.unit.role_policy.target_attributes` and
    :func:`~tests.unit.role_policy.leaderboard_index_query` check them)."""
    role = deployed["Resources"][role_name]
    assert role["Type"] == "AWS::IAM::Role"
    return [
        statement
        for policy in role["Properties"].get("Policies", [])
        for statement in policy["PolicyDocument"]["Statement"]
        if targets or statement.get("Sid") not in (TARGET_SID, LEADERBOARD_SID, COLLECTION_SID)
    ]


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return cfn_yaml_loads(TEMPLATE_PATH.read_text(encoding="utf-8"), str(TEMPLATE_PATH))


@pytest.fixture(scope="module")
def pk_only_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """template.yaml rendered (aggregator template) for the demo rules on a table with only a
    partition key, ``id``."""
    path = tmp_path_factory.mktemp("pk-only") / "template.yaml"
    rules = load_rules(PK_ONLY_DEFINITIONS)
    path.write_text(render_template(TEMPLATE_PATH.read_text(encoding="utf-8"), rules))
    return path


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


MAPPING = "AggregatorFunctionStream"
"""The stream subscription's logical ID: the one SAM gave the function's DynamoDB event
``Stream`` (``<function><event>``) before the template declared the mapping itself, so a stack
deployed then keeps its mapping (same logical ID and type: updated, not replaced)."""


@pytest.fixture(scope="module")
def stream_event(template: dict[str, Any]) -> dict[str, Any]:
    """The event source mapping's properties."""
    name, mapping = _only_resource(template, "AWS::Lambda::EventSourceMapping")
    assert name == MAPPING
    return mapping["Properties"]


@pytest.fixture(scope="module", params=sorted(DEPLOYMENTS))
def deployment(request: pytest.FixtureRequest, template: dict[str, Any]) -> tuple[str, Any]:
    """``(name, deployed template)`` for each kind of deployment."""
    return request.param, _deploy(template, **DEPLOYMENTS[request.param])


# --------------------------------------------------------------------------------------------
# cfn-lint
# --------------------------------------------------------------------------------------------


def test_cfn_lint_reports_nothing_not_even_informational_findings(
    pk_only_template: Path,
) -> None:
    """``cfn-lint --include-checks I -- template.yaml``: no error, warning or informational
    finding (I3011 wants DeletionPolicy and UpdateReplacePolicy on the table and the queue,
    I3013 a MessageRetentionPeriod on the queue); the same for the template rendered for a table
    without a sort key, and for the repository's own template.yaml."""
    cfn_lint = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or shutil.which(
        "cfn-lint"
    )
    assert cfn_lint, "cfn-lint is a dev dependency"
    result = subprocess.run(
        [
            cfn_lint,
            "--include-checks",
            "I",
            "--",
            str(TEMPLATE_PATH),
            str(pk_only_template),
            str(ROOT_TEMPLATE),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), (
        "cfn-lint findings:\n" + result.stdout + result.stderr
    )


# --------------------------------------------------------------------------------------------
# template structure
# --------------------------------------------------------------------------------------------


def test_template_is_a_sam_template(template: dict[str, Any]) -> None:
    assert template["Transform"] == "AWS::Serverless-2016-10-31"
    assert "Globals" not in template  # nothing applies to the function besides what it says


def test_parameters(template: dict[str, Any]) -> None:
    params = template["Parameters"]
    assert params["ExistingTableName"]["Default"] == ""
    assert params["ExistingTableStreamArn"]["Default"] == ""
    assert params["TableName"]["Default"] == "ddb-aggregator"
    assert params["DefinitionsPath"]["Default"] == "definitions"
    # the reserved partition key values come from the rules (aggregator template), not from
    # parameters that could disagree with them
    assert not [p for p in params if "PartitionKey" in p]
    # Lambda's maximum: a backlogged shard's batches coalesce the most (bench.shard_throughput)
    assert params["BatchSize"]["Default"] == 10000
    assert (params["BatchSize"]["MinValue"], params["BatchSize"]["MaxValue"]) == (1, 10000)
    assert params["AggregatorMode"]["Default"] == "exactly-once"
    assert tuple(params["AggregatorMode"]["AllowedValues"]) == WRITE_MODES
    assert params["WindowSeconds"]["Default"] == 60
    assert params["Tracing"]["Default"] == "PassThrough"
    assert sorted(params["Tracing"]["AllowedValues"]) == ["Active", "PassThrough"]
    assert params["LogLevel"]["Default"] == "INFO"
    # The local runner's partition is not the function's business: no parameter, no grant.
    assert not [p for p in params if "Runner" in p]
    assert params["Alarms"]["Default"] == "Enabled"
    assert params["AlarmTopicArn"]["Default"] == ""
    assert params["IteratorAgeAlarmMilliseconds"]["Default"] == 600000
    assert params["HomeRegion"]["Default"] == ""


def test_existing_table_parameters_accept_a_table_and_its_stream(template: dict[str, Any]) -> None:
    import re

    params = template["Parameters"]
    name_pattern = params["ExistingTableName"]["AllowedPattern"]
    arn_pattern = params["ExistingTableStreamArn"]["AllowedPattern"]
    for name in ("", EXISTING_TABLE, "My.Table_1-x"):
        assert re.fullmatch(name_pattern, name), name
    assert not re.fullmatch(name_pattern, "no spaces")
    for arn in ("", EXISTING_STREAM_ARN, EXISTING_STREAM_ARN.replace(":aws:", ":aws-cn:")):
        assert re.fullmatch(arn_pattern, arn), arn
    assert not re.fullmatch(arn_pattern, EXISTING_TABLE_ARN)  # a table, not its stream
    assert not re.fullmatch(arn_pattern, EXISTING_TABLE)


def test_table_is_created_only_without_an_existing_table(template: dict[str, Any]) -> None:
    # Name and stream ARN go together (the template's Rules); CreateTable means "no existing
    # table named".
    for name, arn, accepted, create in (
        ("", "", True, True),
        (EXISTING_TABLE, EXISTING_STREAM_ARN, True, False),
        (EXISTING_TABLE, "", False, None),
        ("", EXISTING_STREAM_ARN, False, None),
    ):
        params = _parameters(template, ExistingTableName=name, ExistingTableStreamArn=arn)
        assert (_rule_failures(template, params) == []) is accepted, (name, arn)
        if accepted:
            assert _conditions(template, params)["CreateTable"] is create
            assert _conditions(template, params)["CreateTable"] is (name == "")


def test_table_keys_billing_and_stream(table: tuple[str, dict[str, Any]]) -> None:
    _, props = table
    attributes = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    # the layout's defaults: a created table needs no `table:` section in the rules
    assert attributes == {
        DEFAULT_LAYOUT.partition_key: "S",
        DEFAULT_LAYOUT.sort_key: "S",
        DEFAULT_LAYOUT.leaderboard_attribute: "S",
        DEFAULT_LAYOUT.value_attribute: "N",
    }
    assert attributes == {"pk": "S", "sk": "S", "lb": "S", "value": "N"}
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert props["TimeToLiveSpecification"] == {
        "AttributeName": DEFAULT_LAYOUT.ttl_attribute,
        "Enabled": True,
    }
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True


def test_created_table_is_conditional_and_retained(template: dict[str, Any]) -> None:
    name, resource = _only_resource(template, "AWS::DynamoDB::Table")
    assert resource["Condition"] == "CreateTable"
    assert resource["DeletionPolicy"] == "Retain"
    assert resource["UpdateReplacePolicy"] == "Retain"
    assert name not in _deploy(template, **DEPLOYMENTS["existing-table"])["Resources"]
    assert name in _deploy(template)["Resources"]


def test_leaderboard_gsi_shape(table: tuple[str, dict[str, Any]]) -> None:
    _, props = table
    assert props["GlobalSecondaryIndexes"] == [
        {
            "IndexName": DEFAULT_LAYOUT.leaderboard_index,
            "KeySchema": [
                {"AttributeName": "lb", "KeyType": "HASH"},
                {"AttributeName": "value", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        }
    ]


def test_failure_queue(template: dict[str, Any], queue: tuple[str, dict[str, Any]]) -> None:
    name, props = queue
    assert props["SqsManagedSseEnabled"] is True
    assert props["MessageRetentionPeriod"] == 1209600
    # its messages point at records still to be looked at
    assert template["Resources"][name]["DeletionPolicy"] == "Retain"
    assert template["Resources"][name]["UpdateReplacePolicy"] == "Retain"


def test_function_settings(
    template: dict[str, Any],
    function: dict[str, Any],
    table: tuple[str, dict[str, Any]],
    queue: tuple[str, dict[str, Any]],
) -> None:
    table_name, _ = table
    queue_name, _ = queue
    assert function["CodeUri"] == "."
    # `sam build` runs `make build-AggregatorFunction` (the Makefile picks what ships)
    assert template["Resources"]["AggregatorFunction"]["Metadata"] == {"BuildMethod": "makefile"}
    assert function["Handler"] == "aggregator.handler.handler"
    assert function["Runtime"] == "python3.12"
    assert function["Architectures"] == ["arm64"]
    assert function["MemorySize"] == 1769
    assert function["Timeout"] == 60
    assert function["Tracing"] == {"Ref": "Tracing"}
    assert function["LoggingConfig"] == {"LogGroup": {"Ref": "LogGroup"}}
    assert function["Environment"]["Variables"] == {
        "AGGREGATOR_TABLE_NAME": {
            "Fn::If": ["CreateTable", {"Ref": table_name}, {"Ref": "ExistingTableName"}]
        },
        # a table the stack creates comes with its stream: new rules need no backfill
        "AGGREGATOR_GENESIS_STREAM_ARN": {
            "Fn::If": ["CreateTable", {"Fn::GetAtt": ["Table", "StreamArn"]}, ""]
        },
        "AGGREGATOR_DEFINITIONS": {"Ref": "DefinitionsPath"},
        "AGGREGATOR_MODE": {"Ref": "AggregatorMode"},
        # the handler refuses to count outside a global table's home Region
        "AGGREGATOR_HOME_REGION": {"Ref": "HomeRegion"},
        "AGGREGATOR_EVENT_BUS": {"Ref": "ThresholdEventBus"},
        "AGGREGATOR_CHECKPOINT_RETENTION_SECONDS": "90000",
        # the last resort for dead letters is the mapping's own on-failure queue
        "AGGREGATOR_ON_FAILURE_QUEUE_URL": {"Ref": queue_name},
        "POWERTOOLS_SERVICE_NAME": {"Ref": "AWS::StackName"},
        "POWERTOOLS_METRICS_NAMESPACE": "DdbAggregator",
        "POWERTOOLS_LOG_LEVEL": {"Ref": "LogLevel"},
        # Powertools Tracer follows the Tracing parameter
        "POWERTOOLS_TRACE_DISABLED": {"Fn::If": ["TracingActive", "false", "true"]},
    }


def test_existing_table_parameters_flow_into_the_function(
    template: dict[str, Any], deployment: tuple[str, Any]
) -> None:
    name, deployed = deployment
    function = deployed["Resources"]["AggregatorFunction"]["Properties"]
    stream = deployed["Resources"][MAPPING]["Properties"]["EventSourceArn"]
    table_name = function["Environment"]["Variables"]["AGGREGATOR_TABLE_NAME"]
    outputs = {key: output["Value"] for key, output in deployed["Outputs"].items()}
    assert stream == _expected_stream_arn(name)
    assert outputs["TableStreamArn"] == _expected_stream_arn(name)
    if name.startswith("existing"):
        assert table_name == EXISTING_TABLE
        assert outputs["TableName"] == EXISTING_TABLE
        # nothing refers to the table this deployment does not create
        assert '"Table"' not in json.dumps(deployed["Resources"])
        assert '"Table"' not in json.dumps(deployed["Outputs"])
    else:
        assert table_name == {"Ref": "Table"}
        assert outputs["TableName"] == {"Ref": "Table"}
    assert function["Environment"]["Variables"]["AGGREGATOR_DEFINITIONS"] == "definitions"


# --------------------------------------------------------------------------------------------
# the function's permissions
# --------------------------------------------------------------------------------------------


def test_the_explicit_role_is_all_the_function_gets(
    template: dict[str, Any], function: dict[str, Any]
) -> None:
    roles = _resources_of_type(template, "AWS::IAM::Role")
    assert sorted(roles) == ["AggregatorRole", "BackfillRole", "BackfillStateMachineRole"]
    role = roles["AggregatorRole"]
    # With a Role of its own, SAM attaches nothing to a function: no Policies, no policy
    # templates, no managed policies (AWSLambdaDynamoDBExecutionRole has stream reads on "*").
    backfill = template["Resources"]["BackfillFunction"]["Properties"]
    assert function["Role"] == {"Fn::GetAtt": ["AggregatorRole", "Arn"]}
    assert backfill["Role"] == {"Fn::GetAtt": ["BackfillRole", "Arn"]}
    for props in (function, backfill):
        assert "Policies" not in props
        assert "PermissionsBoundary" not in props
    assert not any("ManagedPolicyArns" in r["Properties"] for r in roles.values())
    # one AWS::IAM::Policy, attached to the state machine's role only (what it needs of the
    # state machine, which names the role): nothing attaches more to the functions' roles
    policies = _resources_of_type(template, "AWS::IAM::Policy")
    assert list(policies) == ["BackfillStateMachinePolicy"]
    assert policies["BackfillStateMachinePolicy"]["Properties"]["Roles"] == [
        {"Ref": "BackfillStateMachineRole"}
    ]
    text = TEMPLATE_PATH.read_text(encoding="utf-8")
    for managed in (
        "DynamoDBCrudPolicy",
        "DynamoDBWritePolicy",
        "DynamoDBReadPolicy",
        "AWSLambdaDynamoDBExecutionRole",
        "AWSLambdaBasicExecutionRole",
        "FullAccess",
        "arn:aws:iam::aws:policy",
    ):
        assert managed not in text, managed
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ]


def test_every_statement_allows_named_actions(deployment: tuple[str, Any]) -> None:
    _, deployed = deployment
    assert_every_statement_allows_named_actions(_statements(deployed))


def test_item_access_only_under_the_reserved_partitions(deployment: tuple[str, Any]) -> None:
    name, deployed = deployment
    assert_item_access_only_under_the_reserved_partitions(
        _statements(deployed), _expected_table_arn(name)
    )


def test_no_other_table_access(deployment: tuple[str, Any]) -> None:
    name, deployed = deployment
    assert_no_other_table_access(_statements(deployed), _expected_table_arn(name))


def test_target_rules_update_only_their_attributes_of_application_items(
    deployment: tuple[str, Any], tmp_path: Path
) -> None:
    """definitions/ has a target rule (like_tally: likeTally on the post's META item): the role
    may update that attribute and the checkpoint map on any item, and nothing else of them."""
    name, deployed = deployment
    statements = _statements(deployed, targets=True)
    assert target_attributes(statements, _expected_table_arn(name)) == [
        "pk",
        "sk",
        "likeTally",
        "aggregator_checkpoints",
    ]
    # without target rules the policy is not rendered at all
    path = tmp_path / "template.yaml"
    rules = load_rules(ROOT / "definitions" / "flights.yaml")
    path.write_text(render_template(TEMPLATE_PATH.read_text(encoding="utf-8"), rules))
    bare = _deploy(cfn_yaml_loads(path.read_text(encoding="utf-8"), str(path)), **DEPLOYMENTS[name])
    assert target_attributes(_statements(bare, targets=True), _expected_table_arn(name)) is None


def test_stream_reads_are_scoped_to_the_stream(deployment: tuple[str, Any]) -> None:
    name, deployed = deployment
    assert_stream_reads_are_scoped_to_the_stream(_statements(deployed), _expected_stream_arn(name))


def test_queue_and_log_permissions(template: dict[str, Any], deployment: tuple[str, Any]) -> None:
    _, deployed = deployment
    queue_name, _ = _only_resource(template, "AWS::SQS::Queue")
    assert_queue_and_log_permissions(
        _statements(deployed),
        {"Fn::GetAtt": [queue_name, "Arn"]},
        {"Fn::GetAtt": ["LogGroup", "Arn"]},
    )


def test_tracing_parameter_drives_the_function_and_the_xray_grant(
    deployment: tuple[str, Any],
) -> None:
    name, deployed = deployment
    traced = name.endswith("-traced")
    function = deployed["Resources"]["AggregatorFunction"]["Properties"]
    assert function["Tracing"] == ("Active" if traced else "PassThrough")
    assert_xray_writes_only_when_traced(_statements(deployed), traced)


# --------------------------------------------------------------------------------------------
# the stream event
# --------------------------------------------------------------------------------------------


def test_stream_event_source_properties(
    stream_event: dict[str, Any],
    table: tuple[str, dict[str, Any]],
    queue: tuple[str, dict[str, Any]],
) -> None:
    table_name, _ = table
    queue_name, _ = queue
    assert stream_event["FunctionName"] == {"Ref": "AggregatorFunction"}
    assert stream_event["EventSourceArn"] == {
        "Fn::If": [
            "CreateTable",
            {"Fn::GetAtt": [table_name, "StreamArn"]},
            {"Ref": "ExistingTableStreamArn"},
        ]
    }
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
        "OnFailure": {"Destination": {"Fn::GetAtt": [queue_name, "Arn"]}}
    }


def test_stream_filter_drops_the_frameworks_own_partitions(stream_event: dict[str, Any]) -> None:
    filters = stream_event["FilterCriteria"]["Filters"]
    pattern = json.loads(filters[0]["Pattern"])
    assert pattern == {
        "dynamodb": {"Keys": {"pk": {"S": [{"anything-but": list(RESERVED_PARTITION_KEYS)}]}}}
    }
    anything_but = pattern["dynamodb"]["Keys"]["pk"]["S"][0]["anything-but"]
    assert tuple(anything_but) == RESERVED_PARTITION_KEYS


def test_stream_filter_lets_exactly_the_derived_rules_sources_and_top_lists_through(
    stream_event: dict[str, Any],
) -> None:
    rules = load_rules(ROOT / "definitions")
    assert rules.sources == ("flights_by_plane", "paths_per_player")
    listed = [r.name for r in rules if r.top_listed]
    assert listed == [
        "flights_by_carrier",
        "delay_minutes_by_carrier",
        "departures_by_origin",
        "cancellations_by_carrier",
        "flights_by_plane",
    ]
    assert check_template(TEMPLATE_PATH, rules) == []
    filters = [json.loads(f["Pattern"]) for f in stream_event["FilterCriteria"]["Filters"]]
    # the sources' aggregates, then each top-listed rule's and its rebuilt generations'
    prefixes = ["flights_by_plane#", "paths_per_player#"]
    for name in listed:
        prefixes += [p for p in (f"{name}#", f"{name}@") if p not in prefixes]
    assert filters[1] == {
        "dynamodb": {
            "Keys": {
                "pk": {"S": ["AGGREGATES"]},
                "sk": {"S": [{"prefix": p} for p in prefixes]},
            }
        }
    }


def test_filter_check_reports_a_template_missing_a_source(tmp_path) -> None:
    text = TEMPLATE_PATH.read_text(encoding="utf-8")
    stale = tmp_path / "template.yaml"
    stale.write_text(text.replace('{"prefix": "flights_by_plane#"}, ', ""), encoding="utf-8")
    problems = check_template(stale, load_rules(ROOT / "definitions"))
    assert len(problems) == 1
    assert f"{MAPPING}: FilterCriteria differ" in problems[0]
    assert "flights_by_plane#" in problems[0]


def test_outputs(template: dict[str, Any]) -> None:
    outputs = {name: o["Value"] for name, o in template["Outputs"].items()}
    table_name, _ = _only_resource(template, "AWS::DynamoDB::Table")
    queue_name, _ = _only_resource(template, "AWS::SQS::Queue")
    role_name, log_group = "AggregatorRole", "LogGroup"
    assert outputs == {
        "TableName": {"Fn::If": ["CreateTable", {"Ref": table_name}, {"Ref": "ExistingTableName"}]},
        "TableStreamArn": {
            "Fn::If": [
                "CreateTable",
                {"Fn::GetAtt": [table_name, "StreamArn"]},
                {"Ref": "ExistingTableStreamArn"},
            ]
        },
        "AggregatorFunctionArn": {"Fn::GetAtt": ["AggregatorFunction", "Arn"]},
        "AggregatorRoleArn": {"Fn::GetAtt": [role_name, "Arn"]},
        "FailureQueueUrl": {"Ref": queue_name},  # Ref of an SQS queue is its URL
        "LogGroupName": {"Ref": log_group},
        # the backfill on AWS starts it (only where it is created)
        "BackfillStateMachineArn": {"Ref": "BackfillStateMachine"},
        # the Ref of a dashboard is its name (only with the parameter Dashboard Enabled)
        "DashboardName": {"Ref": "AggregatorDashboard"},
    }
    assert template["Outputs"]["DashboardName"]["Condition"] == "CreateDashboard"
    assert template["Outputs"]["BackfillStateMachineArn"]["Condition"] == "CreateBackfill"


# --------------------------------------------------------------------------------------------
# rendered from the rules: aggregator template
# --------------------------------------------------------------------------------------------


def _iam_string_like(pattern: str, value: str) -> bool:
    """IAM's StringLike: ``*`` matches any run of characters (none too), ``?`` any one; every
    other character itself (IAM User Guide, "String condition operators")."""
    import re

    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def test_the_committed_template_is_rendered_for_the_demo_rules() -> None:
    from aggregator.cli.template import check_template_regions

    assert check_template_regions(TEMPLATE_PATH, load_rules(ROOT / "definitions")), (
        f"{TEMPLATE_PATH.relative_to(ROOT)} is not rendered for the rules in definitions/; run: "
        f"aggregator template -d definitions {TEMPLATE_PATH.relative_to(ROOT)}"
    )


def test_the_repository_template_deploys_its_definitions() -> None:
    """template.yaml at the top of the repository is the package's template (what init writes)
    rendered by `aggregator template` for this repository's definitions/: a changed definition,
    or a changed package template, fails here, saying which command to run, until it is run."""
    from aggregator.cli.project.scaffold import project_file
    from aggregator.core.exceptions import ConfigError

    rules = load_rules(ROOT / "definitions")
    expected = render_template(project_file("template.yaml"), rules, source="template.yaml")
    assert ROOT_TEMPLATE.is_file(), f"no template.yaml at the top; run: {_copy_and_render()}"
    text = ROOT_TEMPLATE.read_text(encoding="utf-8")
    if text == expected:
        return
    try:
        regions_only = render_template(text, rules, source="template.yaml") == expected
    except ConfigError:
        regions_only = False
    if regions_only:
        pytest.fail(
            f"template.yaml is not rendered for the rules in definitions/; run: "
            f"{RENDER_ROOT_TEMPLATE}",
            pytrace=False,
        )
    pytest.fail(
        "template.yaml differs from the package's template (aggregator/cli/project/template.yaml) "
        f"outside its rendered regions; run: {_copy_and_render()}",
        pytrace=False,
    )


def test_the_repository_makefile_builds_its_template_function(tmp_path: Path) -> None:
    """`sam build --build-in-source` at the top runs `make build-AggregatorFunction`: the
    function of template.yaml with definitions/ (`aggregator build`, which checks the template
    is rendered for them)."""
    assert shutil.which("make"), "make is needed to check the build recipe"
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MAKELEVEL"}}
    out = tmp_path / "artifact"
    ran = subprocess.run(
        [
            "make",
            "-s",
            "-o",
            "install",  # the virtualenv running this test is installed
            "build-AggregatorFunction",
            f"ARTIFACTS_DIR={out}",
            f"BIN={Path(sys.executable).parent}",
            "BUILD_ARGS=--no-dependencies --no-bytecode",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    shipped = sorted(p.name for p in (out / "definitions").iterdir())
    assert shipped == sorted(p.name for p in (ROOT / "definitions").glob("*.yaml"))
    assert (out / "aggregator" / "handler.py").is_file()
    assert not (out / "aggregator" / "cli").exists()


def _copy_and_render() -> str:
    return f"aggregator init --show template.yaml > template.yaml && {RENDER_ROOT_TEMPLATE}"


def test_each_outcome_of_the_template_command_is_one_line_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a fresh ``aggregator init`` project: --check of a current template, a rewrite, a
    rewrite with nothing to change and --check of a stale one each print one line that says
    which (a passing --check does not read as a rewrite), and only the rewrite writes."""
    from click.testing import CliRunner

    from aggregator.cli import main

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(main, ["init", "--keys", "PK/SK"]).exit_code == 0
    template = tmp_path / "template.yaml"

    def run(*args: str) -> tuple[int, str, str]:
        before = template.stat().st_mtime_ns, template.read_text(encoding="utf-8")
        result = runner.invoke(main, ["template", *args])
        after = template.stat().st_mtime_ns, template.read_text(encoding="utf-8")
        assert (before == after) == (
            result.stdout != "template.yaml: rendered for the rules in rules\n"
        )
        return result.exit_code, result.stdout, result.stderr

    assert run("--check") == (0, "template.yaml: up to date with the rules in rules\n", "")
    assert run() == (0, "template.yaml: already rendered for the rules in rules\n", "")
    rules = tmp_path / "rules" / "example.yaml"
    text = rules.read_text(encoding="utf-8")
    assert "leaderboard_store: list" in text  # a switch to the index changes the table region
    rules.write_text(text.replace("leaderboard_store: list", "leaderboard_store: index"))
    stale = (
        "error: template.yaml: not rendered for the rules in rules; run: aggregator template "
        "-d rules template.yaml\n"
    )
    assert run("--check") == (1, "", stale)
    assert run() == (0, "template.yaml: rendered for the rules in rules\n", "")
    assert run("--check") == (0, "template.yaml: up to date with the rules in rules\n", "")


def test_a_changed_definition_makes_the_template_check_fail_with_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mechanism through the CLI, on a copy of the repository's template and definitions: a
    definition that changes what the template renders (a rule with a target adds its policy)
    fails `aggregator template --check`, naming the command; that command renders it."""
    from click.testing import CliRunner

    from aggregator.cli import main

    shutil.copytree(ROOT / "definitions", tmp_path / "definitions")
    shutil.copy(ROOT_TEMPLATE, tmp_path / "template.yaml")
    monkeypatch.chdir(tmp_path)  # the repository's top, as the command is run there
    runner = CliRunner()
    args = ["template", "-d", "definitions", "template.yaml"]
    assert runner.invoke(main, [*args, "--check"]).exit_code == 0
    with (tmp_path / "definitions" / "event_counts.yaml").open("a") as rules:
        rules.write(
            "  - name: seen_tally\n    match: {counterKeyPrefix: {exists: true}}\n"
            "    target: {partition_key: '{pk}', sort_key: META, attribute: seenTally}\n"
        )
    check = runner.invoke(main, [*args, "--check"])
    assert check.exit_code == 1
    assert check.stderr == (
        "error: template.yaml: not rendered for the rules in definitions; run: "
        f"{RENDER_ROOT_TEMPLATE}\n"
    )
    render = runner.invoke(main, args)
    assert render.exit_code == 0, render.output
    assert "seenTally" in (tmp_path / "template.yaml").read_text(encoding="utf-8")
    assert runner.invoke(main, [*args, "--check"]).exit_code == 0


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_without_a_sort_key_the_role_writes_only_keys_under_the_reserved_prefixes(
    pk_only_template: Path, name: str
) -> None:
    template = cfn_yaml_loads(pk_only_template.read_text(encoding="utf-8"), str(pk_only_template))
    deployed = _deploy(template, **DEPLOYMENTS[name])
    granted = pk_only_item_grants(_statements(deployed))
    assert granted == PK_ONLY_ITEM_GRANTS
    backfill = _statements(deployed, role_name="BackfillRole")
    assert pk_only_item_grants(backfill) == PK_ONLY_BACKFILL_ITEM_GRANTS
    # the finish task settles flights.yaml's top lists through the collection index
    assert collection_index_query(_statements(deployed, targets=True, role_name="BackfillRole"))
    layout = load_rules(PK_ONLY_DEFINITIONS).layout

    def allowed(action: str, key: str) -> bool:
        return any(_iam_string_like(p, key) for p in granted.get(action, ()))

    aggregate = layout.aggregate_key("flights_by_carrier#UA")["id"]["S"]
    letter = layout.item_key(layout.dead_letters_pk, "shard#0001#r")["id"]["S"]
    runner = layout.item_key(layout.runner_pk, "arn#shard")["id"]["S"]
    assert allowed("dynamodb:UpdateItem", aggregate) and allowed("dynamodb:GetItem", aggregate)
    assert allowed("dynamodb:PutItem", letter)
    for user_key in ("FLIGHT#2013-01-01#UA1#EWR#0", "AGGREGATES", "AGGREGATESX#1", runner):
        assert not any(allowed(a, user_key) for a in ITEM_WRITES), user_key
    assert not allowed("dynamodb:PutItem", aggregate)  # dead letters only


def test_without_a_sort_key_the_created_table_has_the_collection_index(
    pk_only_template: Path,
) -> None:
    template = cfn_yaml_loads(pk_only_template.read_text(encoding="utf-8"), str(pk_only_template))
    _, table = _only_resource(template, "AWS::DynamoDB::Table")
    properties = table["Properties"]
    assert properties["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    indexes = {i["IndexName"]: i for i in properties["GlobalSecondaryIndexes"]}
    assert indexes["aggregator-collections"]["KeySchema"] == [
        {"AttributeName": "aggregator_collection", "KeyType": "HASH"},
        {"AttributeName": "id", "KeyType": "RANGE"},
    ]
    assert indexes["aggregator-collections"]["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    rules = load_rules(PK_ONLY_DEFINITIONS)
    mapping = template["Resources"][MAPPING]
    assert mapping["Properties"]["FilterCriteria"] == filter_criteria(rules)


def test_the_template_command_renders_in_place_and_checks(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from aggregator.cli import main

    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "orders.yaml").write_text(
        "version: 1\ntable: {partition_key: PK, sort_key: SK, aggregates_pk: TOTALS}\n"
        "rules:\n  - {name: per_customer, key: '{customer}'}\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    check = runner.invoke(main, ["template", "-d", str(rules), str(path), "--check"])
    assert check.exit_code == 1 and "not rendered for the rules" in check.output
    render = runner.invoke(main, ["template", "-d", str(rules), str(path)])
    assert render.exit_code == 0 and "rendered for the rules" in render.output
    again = runner.invoke(main, ["template", "-d", str(rules), str(path), "--check"])
    assert again.exit_code == 0, again.output
    deployed = _deploy(cfn_yaml_loads(path.read_text(encoding="utf-8"), str(path)))
    _, table = _only_resource(deployed, "AWS::DynamoDB::Table")
    assert [k["AttributeName"] for k in table["Properties"]["KeySchema"]] == ["PK", "SK"]
    conditions = [s["Condition"] for s in _statements(deployed) if "Condition" in s]
    assert {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["TOTALS"]}}.items() <= (
        conditions[0].items()
    )
    # everything outside the regions is kept as written, comments included
    before = TEMPLATE_PATH.read_text(encoding="utf-8").splitlines()
    after = path.read_text(encoding="utf-8").splitlines()
    assert [line for line in before if line.lstrip().startswith("#")] == [
        line for line in after if line.lstrip().startswith("#")
    ]
    broken = tmp_path / "broken.yaml"
    broken.write_text("Resources: {}\n", encoding="utf-8")
    result = runner.invoke(main, ["template", "-d", str(rules), str(broken)])
    assert result.exit_code == 1 and "no region 'table'" in result.output
    assert "Traceback" not in result.output


def test_write_sharding_grants_the_partials_collections() -> None:
    from aggregator.cli.template import render_regions
    from aggregator.core.rules import RuleSet, rule

    plain = render_regions(RuleSet.of(rule("t", key="TOTAL")))["aggregates-leading-keys"]
    assert plain["Condition"]["ForAllValues:StringEquals"] == {
        "dynamodb:LeadingKeys": ["AGGREGATES"]
    }
    for shards in (8, "auto"):  # auto may write partials too
        sharded = render_regions(RuleSet.of(rule("t", key="TOTAL", write_shards=shards)))
        condition = sharded["aggregates-leading-keys"]["Condition"]
        assert condition["ForAllValues:StringLike"] == {
            "dynamodb:LeadingKeys": ["AGGREGATES", "AGGREGATES#*"]
        }
        assert condition["Null"] == {"dynamodb:LeadingKeys": "false"}


# --------------------------------------------------------------------------------------------
# alarms
# --------------------------------------------------------------------------------------------


def _alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::CloudWatch::Alarm"
    }


def test_alarms_watch_the_lag_the_dead_letters_and_the_failure_queue(
    template: dict[str, Any], function: dict[str, Any], queue: tuple[str, dict[str, Any]]
) -> None:
    alarms = _alarms(template)
    assert sorted(alarms) == ["DeadLettersAlarm", "FailureQueueAlarm", "IteratorAgeAlarm"]
    notify = {"Fn::If": ["AlarmsNotify", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    # the lag of a stream subscription only where there is one (test_home_region_...)
    assert alarms.pop("IteratorAgeAlarm")["Condition"] == "IteratorAgeAlarmHere"
    for alarm in alarms.values():
        assert alarm["Condition"] == "CreateAlarms"
        props = alarm["Properties"]
        assert props["AlarmActions"] == props["OKActions"] == notify
        assert props["TreatMissingData"] == "notBreaching"  # no traffic is no alarm
    lag = _alarms(template)["IteratorAgeAlarm"]["Properties"]
    assert (lag["Namespace"], lag["MetricName"], lag["Statistic"]) == (
        "AWS/Lambda",
        "IteratorAge",
        "Maximum",
    )
    assert lag["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": "AggregatorFunction"}}]
    assert lag["Threshold"] == {"Ref": "IteratorAgeAlarmMilliseconds"}
    assert lag["ComparisonOperator"] == "GreaterThanThreshold"
    # the handler's EMF metric, in the namespace and service the function is given (the
    # handler's EMF output is checked in tests/integration/test_handler.py)
    env = function["Environment"]["Variables"]
    dead = alarms["DeadLettersAlarm"]["Properties"]
    assert (dead["Namespace"], dead["MetricName"], dead["Statistic"]) == (
        env["POWERTOOLS_METRICS_NAMESPACE"],
        "DeadLetters",
        "Sum",
    )
    assert dead["Dimensions"] == [{"Name": "service", "Value": env["POWERTOOLS_SERVICE_NAME"]}]
    assert (dead["Threshold"], dead["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    queue_name, _ = queue
    failed = alarms["FailureQueueAlarm"]["Properties"]
    assert (failed["Namespace"], failed["MetricName"]) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
    )
    assert failed["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_name, "QueueName"]}}
    ]
    assert (failed["Threshold"], failed["ComparisonOperator"]) == (
        1,
        "GreaterThanOrEqualToThreshold",
    )


@pytest.mark.parametrize(
    ("alarms", "topic", "created", "notified"),
    [
        ("Enabled", "", True, False),
        ("Enabled", "arn:aws:sns:eu-west-1:123456789012:ops", True, True),
        ("Disabled", "arn:aws:sns:eu-west-1:123456789012:ops", False, False),
    ],
)
def test_alarm_parameters(
    template: dict[str, Any], alarms: str, topic: str, created: bool, notified: bool
) -> None:
    conditions = template["Conditions"]
    values = {"Alarms": alarms, "AlarmTopicArn": topic}

    def holds(expression: Any) -> bool:
        ((op, args),) = expression.items()
        if op == "Fn::Equals":
            left, right = (values.get(a["Ref"]) if isinstance(a, dict) else a for a in args)
            return left == right
        if op == "Fn::Not":
            return not holds(args[0])
        if op == "Fn::And":
            return all(holds(a) for a in args)
        if op == "Condition":
            return holds(conditions[args])
        raise AssertionError(op)

    assert holds(conditions["CreateAlarms"]) is created
    assert holds(conditions["AlarmsNotify"]) is notified


# --------------------------------------------------------------------------------------------
# global tables: one home Region counts (docs/deployment/global-tables.md)
# --------------------------------------------------------------------------------------------

BACKFILL_RESOURCES = {
    "BackfillLogGroup",
    "BackfillRole",
    "BackfillFunction",
    "BackfillStateMachineRole",
    "BackfillStateMachinePolicy",
    "BackfillStateMachine",
}
"""The backfill on AWS (parameter ``Backfill``)."""
COUNTING_ONLY = {MAPPING, "IteratorAgeAlarm", *BACKFILL_RESOURCES}
"""What a stack creates only in the Region that counts the stream."""


@pytest.mark.parametrize(
    ("home_region", "region", "counts"),
    [
        ("", "eu-west-1", True),  # not a global table: the stack's Region counts
        ("", "us-east-1", True),
        ("eu-west-1", "eu-west-1", True),  # the home Region's stack
        ("eu-west-1", "us-east-1", False),  # a replica's stack: the function, no subscription
        ("us-gov-west-1", "eu-west-1", False),
    ],
)
@pytest.mark.parametrize("deployment", sorted(DEPLOYMENTS))
def test_home_region_subscribes_only_the_home_regions_stack(
    template: dict[str, Any], deployment: str, home_region: str, region: str, counts: bool
) -> None:
    everywhere = _deploy(template, DEPLOYED_REGION, **DEPLOYMENTS[deployment])["Resources"]
    deployed = _deploy(template, region, HomeRegion=home_region, **DEPLOYMENTS[deployment])
    resources = deployed["Resources"]
    assert deployed["Conditions"]["CountHere"] is counts
    # elsewhere exactly the subscription, its lag alarm and the backfill on AWS (which would
    # count twice) are missing; the function, its role
    # (stream reads included: harmless without a mapping), the queue and the other alarms stay
    missing = set(everywhere) - set(resources)
    assert missing == (set() if counts else COUNTING_ONLY)
    assert set(resources) <= set(everywhere)
    variables = resources["AggregatorFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["AGGREGATOR_HOME_REGION"] == home_region
    if counts:
        mapping = resources[MAPPING]["Properties"]
        assert mapping["EventSourceArn"] == _expected_stream_arn(deployment)
        assert mapping["FunctionName"] == {"Ref": "AggregatorFunction"}
    # nothing left refers to what this Region does not create
    text = json.dumps(resources)
    assert all(f'"{name}"' not in text for name in missing)


def test_the_mapping_and_its_lag_alarm_carry_the_home_region_condition(
    template: dict[str, Any],
) -> None:
    resources = template["Resources"]
    assert resources[MAPPING]["Condition"] == "CountHere"
    assert template["Conditions"]["CountHere"] == {
        "Fn::Or": [
            {"Fn::Equals": [{"Ref": "HomeRegion"}, ""]},
            {"Fn::Equals": [{"Ref": "HomeRegion"}, {"Ref": "AWS::Region"}]},
        ]
    }
    assert template["Conditions"]["IteratorAgeAlarmHere"] == {
        "Fn::And": [{"Condition": "CreateAlarms"}, {"Condition": "CountHere"}]
    }
    # SAM events take no Condition: the function declares none, the mapping is its own resource
    assert "Events" not in resources["AggregatorFunction"]["Properties"]
    assert [n for n, r in resources.items() if r.get("Condition") == "CountHere"] == [MAPPING]


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("", True),
        ("eu-west-1", True),
        ("us-gov-west-1", True),
        ("ap-southeast-2", True),
        ("cn-north-1", True),
        ("EU-WEST-1", False),
        ("eu-west", False),
        ("eu-west-1 ", False),
        ("arn:aws:dynamodb:eu-west-1", False),
    ],
)
def test_home_region_accepts_region_names_only(
    template: dict[str, Any], value: str, accepted: bool
) -> None:
    import re

    from aggregator.dynamodb.tablecheck import REGION_PATTERN

    pattern = template["Parameters"]["HomeRegion"]["AllowedPattern"]
    # the handler (AGGREGATOR_HOME_REGION) and the CDK construct accept the same names
    assert pattern == f"^$|^{REGION_PATTERN}$"
    # CloudFormation matches AllowedPattern against the whole value
    assert (re.fullmatch(pattern, value) is not None) is accepted


# --------------------------------------------------------------------------------------------
# the backfill on AWS (docs/operations/backfill-on-aws.md)
# --------------------------------------------------------------------------------------------

EXECUTION_ARNS = [
    {
        "Fn::Sub": "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:execution:"
        "${BackfillStateMachine.Name}" + tail
    }
    for tail in (":*", "/*")
]


@pytest.mark.parametrize(
    ("backfill", "home_region", "created"),
    [("Enabled", "", True), ("Disabled", "", False), ("Enabled", "us-east-1", False)],
)
def test_the_backfill_is_optional_and_only_where_the_stack_counts(
    template: dict[str, Any], backfill: str, home_region: str, created: bool
) -> None:
    assert template["Parameters"]["Backfill"]["Default"] == "Enabled"
    assert template["Conditions"]["CreateBackfill"] == {
        "Fn::And": [
            {"Fn::Equals": [{"Ref": "Backfill"}, "Enabled"]},
            {"Condition": "CountHere"},
        ]
    }
    conditioned = {
        n for n, r in template["Resources"].items() if r.get("Condition") == "CreateBackfill"
    }
    assert conditioned == BACKFILL_RESOURCES
    deployed = _deploy(template, Backfill=backfill, HomeRegion=home_region)
    assert (set(deployed["Resources"]) >= BACKFILL_RESOURCES) is created
    assert (BACKFILL_RESOURCES & set(deployed["Resources"]) != set()) is created
    assert ("BackfillStateMachineArn" in deployed["Outputs"]) is created
    # nothing else refers to what is not created
    if not created:
        text = json.dumps(deployed)
        assert all(f'"{name}"' not in text for name in BACKFILL_RESOURCES)


def test_the_backfill_function_is_the_stream_functions_code_with_its_own_entry_point(
    template: dict[str, Any], function: dict[str, Any]
) -> None:
    resource = template["Resources"]["BackfillFunction"]
    backfill = resource["Properties"]
    assert resource["Metadata"] == template["Resources"]["AggregatorFunction"]["Metadata"]
    for key in ("CodeUri", "Runtime", "Architectures"):
        assert backfill[key] == function[key], key
    # its own entry point in the same code: the stream handler never loads the backfill
    assert backfill["Handler"] == "aggregator.backfill_handler.handler"
    assert backfill["Timeout"] == 900  # Lambda's maximum (Lambda Developer Guide, quotas)
    assert backfill["MemorySize"] == {"Ref": "BackfillMemorySize"}
    memory = template["Parameters"]["BackfillMemorySize"]
    assert (memory["Default"], memory["MinValue"], memory["MaxValue"]) == (1769, 128, 10240)
    assert backfill["Role"] == {"Fn::GetAtt": ["BackfillRole", "Arn"]}
    assert backfill["LoggingConfig"] == {"LogGroup": {"Ref": "BackfillLogGroup"}}
    assert "Events" not in backfill and "Tracing" not in backfill
    # the stream function's settings, without its queue (no grant) and with tracing off
    variables = dict(function["Environment"]["Variables"])
    del variables["AGGREGATOR_ON_FAILURE_QUEUE_URL"]
    variables["POWERTOOLS_TRACE_DISABLED"] = "true"
    assert backfill["Environment"]["Variables"] == variables
    group = template["Resources"]["BackfillLogGroup"]["Properties"]
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${AWS::StackName}-backfill"}
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}


def test_the_state_machine_runs_the_definition_with_the_backfill_function(
    template: dict[str, Any],
) -> None:
    from aggregator.deploy.backfill_machine import backfill_definition

    machine = template["Resources"]["BackfillStateMachine"]
    assert machine["Type"] == "AWS::StepFunctions::StateMachine"
    props = machine["Properties"]
    assert props["StateMachineType"] == "STANDARD"
    assert props["Definition"] == backfill_definition()
    assert props["DefinitionSubstitutions"] == {
        "BackfillFunctionArn": {"Fn::GetAtt": ["BackfillFunction", "Arn"]}
    }
    assert props["RoleArn"] == {"Fn::GetAtt": ["BackfillStateMachineRole", "Arn"]}


def test_the_backfill_function_role_is_least_privilege(deployment: tuple[str, Any]) -> None:
    name, deployed = deployment
    statements = _statements(deployed, targets=True, role_name="BackfillRole")
    assert_backfill_role_policy(
        statements,
        table_arn=_expected_table_arn(name),
        stream_arn=_expected_stream_arn(name),
        log_group_arn={"Fn::GetAtt": ["BackfillLogGroup", "Arn"]},
    )
    # the reducers write what the stream function writes: the same rule-dependent statements
    stream_function = _statements(deployed, targets=True)
    for sid in (TARGET_SID, LEADERBOARD_SID):
        assert [s for s in statements if s.get("Sid") == sid] == [
            s for s in stream_function if s.get("Sid") == sid
        ]
    role = deployed["Resources"]["BackfillRole"]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ]


def test_the_state_machine_role_invokes_the_function_and_runs_its_own_map_runs(
    deployment: tuple[str, Any],
) -> None:
    _, deployed = deployment
    resources = deployed["Resources"]
    statements = [
        *_statements(deployed, role_name="BackfillStateMachineRole"),
        *resources["BackfillStateMachinePolicy"]["Properties"]["PolicyDocument"]["Statement"],
    ]
    assert_state_machine_role_policy(
        statements,
        function_arn={"Fn::GetAtt": ["BackfillFunction", "Arn"]},
        state_machine_arn={"Ref": "BackfillStateMachine"},
        execution_arns=EXECUTION_ARNS,
    )
    trust = resources["BackfillStateMachineRole"]["Properties"]["AssumeRolePolicyDocument"]
    assert trust["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "states.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
        }
    ]


def test_the_statements_are_the_deploy_modules(template: dict[str, Any]) -> None:
    """One source: the state machine role's statements are those of
    aggregator.deploy.backfill_roles (the CDK construct builds its own from them)."""
    from aggregator.deploy.backfill_roles import (
        state_machine_invoke_statements,
        state_machine_self_statements,
    )

    resources = template["Resources"]
    (policy,) = resources["BackfillStateMachineRole"]["Properties"]["Policies"]
    assert policy["PolicyDocument"]["Statement"] == state_machine_invoke_statements(
        {"Fn::GetAtt": ["BackfillFunction", "Arn"]}
    )
    document = resources["BackfillStateMachinePolicy"]["Properties"]["PolicyDocument"]
    assert document["Statement"] == state_machine_self_statements(
        {"Ref": "BackfillStateMachine"}, EXECUTION_ARNS
    )


@pytest.mark.parametrize(
    ("execution", "allowed"),
    [
        ("execution:backfill-AbC:7f3e", True),  # an execution of the state machine
        ("execution:backfill-AbC/Scan:0b5d", True),  # a child of its Scan Map Run
        ("execution:backfill-AbC/Join:0b5d", True),
        ("execution:backfill-AbCD:7f3e", False),  # another state machine's
        ("execution:backfill-AbCD/Scan:7f3e", False),
        ("execution:other:backfill-AbC", False),
        ("stateMachine:backfill-AbC", False),
    ],
)
def test_the_execution_arns_match_its_own_executions_only(execution: str, allowed: bool) -> None:
    """IAM matches a Resource's ``*`` like StringLike (any run of characters): the two
    patterns, for a state machine named ``backfill-AbC``, against ARNs of executions."""
    prefix = "arn:aws:states:eu-west-1:123456789012:"
    patterns = [
        arn["Fn::Sub"]
        .replace("${AWS::Partition}", "aws")
        .replace("${AWS::Region}", "eu-west-1")
        .replace("${AWS::AccountId}", "123456789012")
        .replace("${BackfillStateMachine.Name}", "backfill-AbC")
        for arn in EXECUTION_ARNS
    ]
    assert any(_iam_string_like(p, prefix + execution) for p in patterns) is allowed


def test_a_template_without_the_backfill_regions_still_renders(tmp_path: Path) -> None:
    """A template written before the backfill on AWS has neither optional region: rendering and
    checking it work as before."""
    from aggregator.cli.template import check_template_regions

    text = TEMPLATE_PATH.read_text(encoding="utf-8")
    start = text.index("  # The backfill on AWS (parameter Backfill")
    end = text.index("\nOutputs:")
    old = text[:start].rstrip("\n") + "\n" + text[end:]
    old = old[: old.index("  BackfillStateMachineArn:")]
    assert "aggregator:begin backfill" not in old
    path = tmp_path / "template.yaml"
    path.write_text(old, encoding="utf-8")
    rules = load_rules(ROOT / "definitions")
    assert check_template_regions(path, rules)
    assert render_template(old, rules) == old
