"""The CDK construct (aggregator.cdk.AggregatorFunction) deploys what the SAM template does.

One CDK app, synthesized once for the module (jsii runs a Node.js process; each synth costs
seconds), holds one stack per case: the SAM template's four deployments (a created or an
existing table, tracing on or off), the README's example, a stack with the IAM
``minimizePolicies`` feature flag, a rule set with ``write_shards`` and one on a table without
a sort key. Each synthesized template is compared with the SAM template rendered for the same
deployment (test_template.py's ``_deploy``), after mapping the CDK's logical IDs to the SAM
template's names, and checked by the same role assertions (role_policy.py) and by cfn-lint.

The function's code: the SAM-like stacks use an artifact prebuilt by ``build_function`` without
dependencies (the package and the rules; no pip); the others let the construct build it at synth
time through CDK's local bundling, with pip replaced by a recorder (no registry needed). The
real pip install is tested in test_project.py and by ``make test-package``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sns as sns
from cfnlint.decode.cfn_yaml import loads as cfn_yaml_loads
from constructs import Construct

import aggregator.cli.project.build as build_module
from aggregator.cdk import AggregatorFunction
from aggregator.cdk.policies import target_policies
from aggregator.cli.project.build import FunctionRuntime, build_function
from aggregator.cli.template import THRESHOLD_EVENTS_POLICY_NAME, render_regions
from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import load_rules
from aggregator.deploy.dashboard import DASHBOARD_VARIABLES
from aggregator.deploy.filters import filter_criteria
from tests.conftest import PK_ONLY_DEFINITIONS
from tests.unit.cli.test_template import (
    DEPLOYMENTS,
    EXISTING_STREAM_ARN,
    EXISTING_TABLE_ARN,
    MAPPING,
    TEMPLATE_PATH,
    _conditions,
    _deploy,
    _statements,
)
from tests.unit.role_policy import (
    PK_ONLY_BACKFILL_ITEM_GRANTS,
    PK_ONLY_ITEM_GRANTS,
    as_list,
    assert_backfill_role_policy,
    assert_role_policy,
    assert_state_machine_role_policy,
    collection_index_query,
    pk_only_item_grants,
)

ROOT = Path(__file__).resolve().parents[3]
DEFINITIONS = ROOT / "definitions"
PK_ONLY = PK_ONLY_DEFINITIONS
STARTER_RULES = ROOT / "aggregator" / "cli" / "project" / "rules"

SHARDED_RULES = """\
version: 1
rules:
  - {name: likes_total, match: {type: like}, key: TOTAL, write_shards: 8,
     thresholds: [{above: 1000}]}
"""

# The SAM template's resources, by type and CDK logical ID (the construct's path, then a hash).
SAM_NAMES = {
    ("AWS::DynamoDB::Table", "Table"): "Table",
    ("AWS::SQS::Queue", "AggregatorQueue"): "Queue",
    ("AWS::Logs::LogGroup", "AggregatorLogGroup"): "LogGroup",
    ("AWS::IAM::Role", "AggregatorRole"): "AggregatorRole",
    ("AWS::Lambda::Function", "AggregatorFunction"): "AggregatorFunction",
    ("AWS::Logs::LogGroup", "AggregatorBackfillLogGroup"): "BackfillLogGroup",
    ("AWS::IAM::Role", "AggregatorBackfillRole"): "BackfillRole",
    ("AWS::Lambda::Function", "AggregatorBackfillFunction"): "BackfillFunction",
    ("AWS::IAM::Role", "AggregatorBackfillStateMachineRole"): "BackfillStateMachineRole",
    ("AWS::StepFunctions::StateMachine", "AggregatorBackfillStateMachine"): (
        "BackfillStateMachine"
    ),
    ("AWS::IAM::Policy", "AggregatorBackfillMapRunsPolicy"): "BackfillStateMachinePolicy",
}
MINIMIZE_POLICIES = "@aws-cdk/aws-iam:minimizePolicies"
HOME_REGION = "eu-west-1"
"""The home Region of the global-table stacks."""


class OrdersAggregates(cdk.Stack):
    """The README's example ("Deploy with CDK"), as written there."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        table = AggregatorFunction.table_for_rules(self, "Table", rules="rules")
        AggregatorFunction(
            self,
            "Aggregator",
            table=table,
            rules="rules",
            alarm_topic=sns.Topic(self, "Alarms"),
        )


def _existing_table(scope: Construct) -> dynamodb.ITable:
    """The SAM tests' existing table, imported as the README shows."""
    return dynamodb.Table.from_table_attributes(
        scope, "Orders", table_arn=EXISTING_TABLE_ARN, table_stream_arn=EXISTING_STREAM_ARN
    )


class Synthesized:
    """The synthesized app: each stack's template, and what the stubbed pip was asked."""

    def __init__(self, outdir: Path, assembly: Any, pip_calls: list[dict[str, Any]]) -> None:
        self.outdir = outdir
        self.assembly = assembly
        self.pip_calls = pip_calls

    def template(self, stack: str) -> dict[str, Any]:
        return self.assembly.get_stack_by_name(stack).template

    def template_path(self, stack: str) -> Path:
        return Path(self.assembly.get_stack_by_name(stack).template_full_path)

    def asset(self, stack: str) -> Path:
        """The directory of the stack's function code, as staged for deployment."""
        function = _as_sam(self.template(stack))["Resources"]["AggregatorFunction"]
        key = function["Properties"]["Code"]["S3Key"]
        return self.outdir / f"asset.{key.removesuffix('.zip')}"


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    work = tmp_path_factory.mktemp("cdk")
    artifact = work / "artifact"
    runtime = FunctionRuntime.of("python3.12", "arm64")
    build_function([DEFINITIONS], artifact, template=None, runtime=runtime, dependencies=False)
    project = work / "project"  # the README's layout: app.py next to rules/
    shutil.copytree(STARTER_RULES, project / "rules")
    sharded = work / "sharded"
    sharded.mkdir()
    (sharded / "likes.yaml").write_text(SHARDED_RULES, encoding="utf-8")
    pip_calls: list[dict[str, Any]] = []

    def pip_install(output: Path, requirements: Any, runtime: Any, *, pin: bool) -> None:
        pip_calls.append({"output": output, "requirements": list(requirements), "runtime": runtime})
        (output / "installed-by-pip.txt").write_text("\n".join(requirements), encoding="utf-8")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build_module, "_pip_install", pip_install)
        patch.chdir(project)
        app = cdk.App(outdir=str(work / "cdk.out"))
        for name, values in DEPLOYMENTS.items():
            stack = cdk.Stack(app, name)
            created = not values.get("ExistingTableName")
            AggregatorFunction(
                stack,
                "Aggregator",
                table=(
                    AggregatorFunction.table_for_rules(stack, "Table", rules=DEFINITIONS)
                    if created
                    else _existing_table(stack)
                ),
                rules=DEFINITIONS,
                artifact=artifact,
                tracing=values.get("Tracing") == "Active",
                # alarms three ways: notifying, only changing state, none
                alarms=name != "existing-table-traced",
                alarm_topic=sns.Topic(stack, "Ops") if name == "created-table" else None,
            )
        minimized = cdk.Stack(app, "minimized")
        minimized.node.set_context(MINIMIZE_POLICIES, True)
        AggregatorFunction(
            minimized,
            "Aggregator",
            table=_existing_table(minimized),
            rules=DEFINITIONS,
            artifact=artifact,
            tracing=True,
        )
        OrdersAggregates(app, "orders-aggregates")
        stack = cdk.Stack(app, "sharded")
        AggregatorFunction(
            stack,
            "Aggregator",
            table=_existing_table(stack),
            rules=sharded,
            boto3="runtime",
            alarms=False,
            backfill=False,
            threshold_event_bus="alerts",
            dashboard=False,
        )
        # a global table's stacks: one region-agnostic, one for a Region; the condition is
        # decided at deployment in both
        for name, env in (
            ("home-region", None),
            ("home-region-us-east-1", cdk.Environment(region="us-east-1")),
        ):
            stack = cdk.Stack(app, name, env=env)
            AggregatorFunction(
                stack,
                "Aggregator",
                table=_existing_table(stack),
                rules=DEFINITIONS,
                artifact=artifact,
                home_region=HOME_REGION,
            )
        stack = cdk.Stack(app, "pk-only")
        AggregatorFunction(
            stack,
            "Aggregator",
            table=AggregatorFunction.table_for_rules(stack, "Table", rules=PK_ONLY),
            rules=PK_ONLY,
            alarms=False,
        )
        assembly = app.synth()
    yield Synthesized(work / "cdk.out", assembly, pip_calls)


@pytest.fixture(scope="module")
def sam_template() -> dict[str, Any]:
    return cfn_yaml_loads(TEMPLATE_PATH.read_text(encoding="utf-8"), str(TEMPLATE_PATH))


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == resource_type
    }


def _as_sam(template: dict[str, Any]) -> dict[str, Any]:
    """``template`` with the logical IDs of the resources the SAM template also has renamed to
    its names (``Ref`` and ``Fn::GetAtt`` follow)."""
    import re

    names: dict[str, str] = {}
    for (resource_type, prefix), sam_name in SAM_NAMES.items():
        found = [
            name
            for name in _of_type(template, resource_type)
            if re.fullmatch(prefix + "[0-9A-F]{8}", name)
        ]
        assert len(found) <= 1, found
        if found:
            names[found[0]] = sam_name

    def rename(node: Any) -> Any:
        if isinstance(node, list):
            return [rename(item) for item in node]
        if not isinstance(node, dict):
            return node
        if set(node) == {"Ref"} and node["Ref"] in names:
            return {"Ref": names[node["Ref"]]}
        if set(node) == {"Fn::GetAtt"} and node["Fn::GetAtt"][0] in names:
            return {"Fn::GetAtt": [names[node["Fn::GetAtt"][0]], *node["Fn::GetAtt"][1:]]}
        return {names.get(key, key): rename(value) for key, value in node.items()}

    return rename(template)


def _only(template: dict[str, Any], resource_type: str) -> dict[str, Any]:
    ((resource,),) = [list(_of_type(template, resource_type).values())]
    return resource


def _mapping(template: dict[str, Any]) -> dict[str, Any]:
    return _only(template, "AWS::Lambda::EventSourceMapping")["Properties"]


def _same(value: Any, sam_value: Any) -> bool:
    """Equal, a number given literally here and by a parameter's default there included."""
    if isinstance(value, int | float) and isinstance(sam_value, str):
        return str(value) == sam_value
    return bool(value == sam_value)


def _sam_stream_event(deployed: dict[str, Any]) -> dict[str, Any]:
    return deployed["Resources"][MAPPING]["Properties"]


# --------------------------------------------------------------------------------------------
# the SAM template's deployments, one stack each
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_the_role_is_the_sam_templates(
    synthesized: Synthesized, sam_template: dict[str, Any], name: str
) -> None:
    cdk_template = _as_sam(synthesized.template(name))
    deployed = _deploy(sam_template, **DEPLOYMENTS[name])
    # the same statements (Sid, actions, resources, LeadingKeys conditions), in the same order,
    # the target rules' included (definitions/reference_counts.yaml has one)
    assert _statements(cdk_template, targets=True) == _statements(deployed, targets=True)
    assert any(s.get("Sid") == "TargetAttributesOnly" for s in _statements(deployed, targets=True))
    created = name.startswith("created")
    assert_role_policy(
        _statements(cdk_template, targets=True),
        table_arn={"Fn::GetAtt": ["Table", "Arn"]} if created else EXISTING_TABLE_ARN,
        stream_arn={"Fn::GetAtt": ["Table", "StreamArn"]} if created else EXISTING_STREAM_ARN,
        queue_arn={"Fn::GetAtt": ["Queue", "Arn"]},
        log_group_arn={"Fn::GetAtt": ["LogGroup", "Arn"]},
        traced=name.endswith("-traced"),
    )
    role = cdk_template["Resources"]["AggregatorRole"]["Properties"]
    sam_role = deployed["Resources"]["AggregatorRole"]["Properties"]
    assert (
        role["AssumeRolePolicyDocument"]["Statement"]
        == (sam_role["AssumeRolePolicyDocument"]["Statement"])
    )
    assert role["Description"] == sam_role["Description"]
    # nothing attached besides: no managed policies, no AWS::IAM::Policy (CDK's grants through
    # the function would create one; the function holds an immutable view of the role)
    assert "ManagedPolicyArns" not in role
    iam = {n: r for n, r in cdk_template["Resources"].items() if r["Type"].startswith("AWS::IAM::")}
    # the state machine's map-run policy is the only one, on its role only (as the template's)
    assert sorted(n for n, r in iam.items() if r["Type"] == "AWS::IAM::Policy") == [
        "BackfillStateMachinePolicy"
    ]
    assert iam["BackfillStateMachinePolicy"]["Properties"]["Roles"] == [
        {"Ref": "BackfillStateMachineRole"}
    ]


def test_minimized_policies_keep_the_statements(synthesized: Synthesized) -> None:
    """New CDK projects turn on ``minimizePolicies``, which merges statements without a Sid
    (and sorts the actions of each)."""

    def normalized(stack: str) -> list[dict[str, Any]]:
        return [
            {**s, "Action": sorted(as_list(s["Action"]))}
            for s in _statements(_as_sam(synthesized.template(stack)))
        ]

    assert normalized("minimized") == normalized("existing-table-traced")


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_the_function_is_the_sam_templates(
    synthesized: Synthesized, sam_template: dict[str, Any], name: str
) -> None:
    function = _as_sam(synthesized.template(name))["Resources"]["AggregatorFunction"]
    sam = _deploy(sam_template, **DEPLOYMENTS[name])["Resources"]["AggregatorFunction"]
    props, sam_props = function["Properties"], sam["Properties"]
    for key in ("Handler", "Runtime", "Architectures", "MemorySize", "Timeout", "Role"):
        assert props[key] == sam_props[key], key
    assert props["TracingConfig"] == {"Mode": sam_props["Tracing"]}
    assert props["LoggingConfig"] == sam_props["LoggingConfig"]
    # the same variables, the same values (the table's name, the queue's URL, the stack's name)
    assert props["Environment"] == sam_props["Environment"]


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_the_stream_subscription_is_the_sam_templates(
    synthesized: Synthesized, sam_template: dict[str, Any], name: str
) -> None:
    cdk_template = _as_sam(synthesized.template(name))
    mapping = _mapping(cdk_template)
    event = _sam_stream_event(_deploy(sam_template, **DEPLOYMENTS[name]))
    assert mapping["FunctionName"] == {"Ref": "AggregatorFunction"}
    assert mapping["EventSourceArn"] == event["EventSourceArn"]
    # the template's parameter defaults (BatchSize, WindowSeconds) and fixed settings
    for key in (
        "StartingPosition",
        "BatchSize",
        "MaximumBatchingWindowInSeconds",
        "ParallelizationFactor",
        "TumblingWindowInSeconds",
        "FunctionResponseTypes",
        "BisectBatchOnFunctionError",
        "MaximumRetryAttempts",
        "MaximumRecordAgeInSeconds",
    ):
        assert _same(mapping[key], event[key]), key
    assert mapping["DestinationConfig"] == event["DestinationConfig"]
    # the patterns as the rules render them, character for character
    assert mapping["FilterCriteria"] == filter_criteria(load_rules(DEFINITIONS))
    assert mapping["FilterCriteria"] == event["FilterCriteria"]


def test_the_created_table_is_the_sam_templates(
    synthesized: Synthesized, sam_template: dict[str, Any]
) -> None:
    table = _as_sam(synthesized.template("created-table"))["Resources"]["Table"]
    sam = _deploy(sam_template)["Resources"]["Table"]
    assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == (
        sam["DeletionPolicy"],
        sam["UpdateReplacePolicy"],
    )
    # everything but the name (a parameter there; CloudFormation's choice here by default)
    sam_props = {k: v for k, v in sam["Properties"].items() if k != "TableName"}
    assert table["Properties"] == sam_props
    region = render_regions(load_rules(DEFINITIONS))["table"]
    assert {k: table["Properties"][k] for k in region} == region


def test_the_queue_and_the_log_group_are_the_sam_templates(
    synthesized: Synthesized, sam_template: dict[str, Any]
) -> None:
    template = _as_sam(synthesized.template("created-table"))["Resources"]
    sam = _deploy(sam_template)["Resources"]
    for name in ("Queue", "LogGroup"):
        assert template[name]["DeletionPolicy"] == sam[name]["DeletionPolicy"], name
        assert template[name]["UpdateReplacePolicy"] == sam[name]["UpdateReplacePolicy"], name
    assert template["Queue"]["Properties"] == sam["Queue"]["Properties"]
    # the SAM template names its log group after the stack; several constructs share a stack
    assert template["LogGroup"]["Properties"] == {
        "RetentionInDays": int(sam["LogGroup"]["Properties"]["RetentionInDays"])
    }


# --------------------------------------------------------------------------------------------
# alarms
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "count", "notified"),
    [
        ("created-table", 3, True),
        ("existing-table", 3, False),
        ("created-table-traced", 3, False),
        ("existing-table-traced", 0, False),
    ],
)
def test_alarms_on_request_with_or_without_a_topic(
    synthesized: Synthesized, name: str, count: int, notified: bool
) -> None:
    template = assertions.Template.from_json(synthesized.template(name))
    template.resource_count_is("AWS::CloudWatch::Alarm", count)
    if not count:
        return
    if notified:
        (topic,) = _of_type(synthesized.template(name), "AWS::SNS::Topic")
        actions = [{"Ref": topic}]
        template.all_resources_properties(
            "AWS::CloudWatch::Alarm", {"AlarmActions": actions, "OKActions": actions}
        )
    else:
        template.all_resources_properties(
            "AWS::CloudWatch::Alarm",
            {"AlarmActions": assertions.Match.absent(), "OKActions": assertions.Match.absent()},
        )


def test_the_alarms_are_the_sam_templates(
    synthesized: Synthesized, sam_template: dict[str, Any]
) -> None:
    template = _as_sam(synthesized.template("existing-table"))
    alarms = _of_type(template, "AWS::CloudWatch::Alarm")
    sam = {
        name: resource["Properties"]
        for name, resource in _deploy(sam_template, Alarms="Enabled")["Resources"].items()
        if resource["Type"] == "AWS::CloudWatch::Alarm"
    }
    by_name = {name: next(a for a in alarms if a.startswith(f"Aggregator{name}")) for name in sam}
    for name, sam_props in sam.items():
        props = alarms[by_name[name]]["Properties"]
        for key in (
            "Namespace",
            "MetricName",
            "Dimensions",
            "Statistic",
            "Period",
            "EvaluationPeriods",
            "Threshold",
            "ComparisonOperator",
            "TreatMissingData",
        ):
            assert _same(props[key], sam_props[key]), (name, key)
    # the DeadLetters metric is the one the function publishes: its namespace and service
    environment = template["Resources"]["AggregatorFunction"]["Properties"]["Environment"]
    dead = alarms[by_name["DeadLettersAlarm"]]["Properties"]
    assert dead["Namespace"] == environment["Variables"]["POWERTOOLS_METRICS_NAMESPACE"]
    assert dead["Dimensions"] == [
        {"Name": "service", "Value": environment["Variables"]["POWERTOOLS_SERVICE_NAME"]}
    ]


# --------------------------------------------------------------------------------------------
# a global table: one home Region counts
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["home-region", "home-region-us-east-1"])
@pytest.mark.parametrize(("region", "counts"), [(HOME_REGION, True), ("us-east-1", False)])
def test_home_region_conditions_the_subscription_and_its_lag_alarm(
    synthesized: Synthesized, sam_template: dict[str, Any], stack: str, region: str, counts: bool
) -> None:
    """As the SAM template with ``HomeRegion``: in the home Region everything, elsewhere all
    but the mapping and the IteratorAge alarm; the condition is decided at deployment (``Ref
    AWS::Region``) even in a stack synthesized for one Region."""
    template = synthesized.template(stack)
    assertions.Template.from_json(template).has_condition(
        "*", {"Fn::Equals": [HOME_REGION, {"Ref": "AWS::Region"}]}
    )
    holds = _conditions(template, {"AWS::Region": region})
    created = {
        resource["Type"]
        + (
            "/lag"
            if resource["Type"] == "AWS::CloudWatch::Alarm"
            and "IteratorAge" in json.dumps(resource.get("Properties", {}))
            else ""
        )
        for resource in template["Resources"].values()
        if holds.get(resource.get("Condition", ""), True)
    }
    sam = _deploy(sam_template, region, HomeRegion=HOME_REGION, **DEPLOYMENTS["existing-table"])
    sam_created = {
        resource["Type"].replace("Serverless", "Lambda")
        + ("/lag" if name == "IteratorAgeAlarm" else "")
        for name, resource in sam["Resources"].items()
    }
    assert created == sam_created
    assert ("AWS::Lambda::EventSourceMapping" in created) is counts
    assert ("AWS::CloudWatch::Alarm/lag" in created) is counts
    assert {"AWS::Lambda::Function", "AWS::IAM::Role", "AWS::SQS::Queue"} <= created
    function = _as_sam(template)["Resources"]["AggregatorFunction"]
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["AGGREGATOR_HOME_REGION"] == HOME_REGION


def test_without_a_home_region_nothing_is_conditional(synthesized: Synthesized) -> None:
    template = synthesized.template("existing-table")
    assert "Conditions" not in template
    assert all("Condition" not in r for r in template["Resources"].values())


# --------------------------------------------------------------------------------------------
# rules that change the grants and the table
# --------------------------------------------------------------------------------------------


def test_write_sharding_grants_the_partials_collections(synthesized: Synthesized) -> None:
    template = _as_sam(synthesized.template("sharded"))
    (aggregates,) = [s for s in _statements(template) if s.get("Sid") == "AggregatesPartitionOnly"]
    assert aggregates["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["AGGREGATES", "AGGREGATES#*"]},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }


def test_without_a_sort_key(synthesized: Synthesized) -> None:
    template = _as_sam(synthesized.template("pk-only"))
    rules = load_rules(PK_ONLY)
    assert pk_only_item_grants(_statements(template)) == PK_ONLY_ITEM_GRANTS
    backfill = _statements(template, role_name="BackfillRole")
    assert pk_only_item_grants(backfill) == PK_ONLY_BACKFILL_ITEM_GRANTS
    # the finish task settles flights.yaml's top lists through the collection index
    assert collection_index_query(_statements(template, targets=True, role_name="BackfillRole"))
    table = template["Resources"]["Table"]["Properties"]
    assert table["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    region = render_regions(rules)["table"]
    assert {k: table[k] for k in region} == region  # the collection index among them
    assert _mapping(template)["FilterCriteria"] == filter_criteria(rules)


# --------------------------------------------------------------------------------------------
# the function's code
# --------------------------------------------------------------------------------------------


def test_the_prebuilt_artifact_is_the_code(synthesized: Synthesized) -> None:
    asset = synthesized.asset("created-table")
    assert (asset / "aggregator" / "handler.py").is_file()
    assert sorted(p.name for p in (asset / "definitions").iterdir()) == sorted(
        p.name for p in DEFINITIONS.glob("*.yaml")
    )


@pytest.mark.parametrize(
    ("stack", "rules", "boto3"),
    [
        ("orders-aggregates", ["example.yaml", "table.yaml"], True),  # as init writes them
        ("sharded", ["likes.yaml"], False),
        ("pk-only", sorted(p.name for p in PK_ONLY), True),
    ],
)
def test_the_code_is_built_at_synth_time_without_docker(
    synthesized: Synthesized, stack: str, rules: list[str], boto3: bool
) -> None:
    """aggregator build into CDK's bundling directory, for the function's runtime and
    architecture; boto3 left out with boto3="runtime"."""
    asset = synthesized.asset(stack)
    package = asset / "aggregator"
    assert (package / "handler.py").is_file()
    for absent in ("cdk", "cli", "dev"):
        assert not (package / absent).exists(), absent
    assert not list(asset.rglob("__pycache__"))
    assert sorted(p.name for p in (asset / "definitions").iterdir()) == rules
    requirements = (asset / "installed-by-pip.txt").read_text(encoding="utf-8").splitlines()
    assert any(r.startswith("pydantic") for r in requirements)
    assert any(r.startswith("boto3") for r in requirements) is boto3
    runtimes = {call["runtime"] for call in synthesized.pip_calls}
    assert runtimes == {FunctionRuntime("3.12", "manylinux2014_aarch64")}


def test_a_failing_build_fails_the_synth_with_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def pip_install(*_: Any, **__: Any) -> None:
        raise ConfigError("pip could not install the function's dependencies: no registry")

    monkeypatch.setattr(build_module, "_pip_install", pip_install)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "failing")
    with pytest.raises(ConfigError, match="no registry"):
        AggregatorFunction(stack, "Aggregator", table=_existing_table(stack), rules=DEFINITIONS)


# --------------------------------------------------------------------------------------------
# what the construct refuses
# --------------------------------------------------------------------------------------------


@pytest.fixture
def stack(tmp_path: Path) -> cdk.Stack:
    return cdk.Stack(cdk.App(outdir=str(tmp_path / "cdk.out")), "refused")


def test_a_table_without_a_stream_is_refused(stack: cdk.Stack) -> None:
    table = dynamodb.Table.from_table_name(stack, "Orders", "orders")
    with pytest.raises(ConfigError, match=r"has no stream ARN.*table_stream_arn"):
        AggregatorFunction(stack, "Aggregator", table=table, rules=DEFINITIONS)


def test_a_stream_without_both_images_is_refused(stack: cdk.Stack) -> None:
    table = dynamodb.Table(
        stack,
        "Orders",
        partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
        stream=dynamodb.StreamViewType.KEYS_ONLY,
    )
    with pytest.raises(ConfigError, match=r"view type is KEYS_ONLY.*NEW_AND_OLD_IMAGES"):
        AggregatorFunction(stack, "Aggregator", table=table, rules=DEFINITIONS)


def test_a_table_with_other_keys_than_the_rules_is_refused(stack: cdk.Stack) -> None:
    table = dynamodb.TableV2(
        stack,
        "Orders",
        partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING),
        dynamo_stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
    )
    with pytest.raises(ConfigError, match="partition key is 'PK', the layout's is 'pk'"):
        AggregatorFunction(stack, "Aggregator", table=table, rules=DEFINITIONS)


def test_an_artifact_of_other_rules_is_refused(stack: cdk.Stack, tmp_path: Path) -> None:
    artifact = tmp_path / "artifact"
    runtime = FunctionRuntime.of("python3.12", "arm64")
    build_function([STARTER_RULES], artifact, template=None, runtime=runtime, dependencies=False)
    table = _existing_table(stack)
    with pytest.raises(ConfigError, match=r"built for other rules.*holds example\.yaml"):
        AggregatorFunction(stack, "Aggregator", table=table, rules=DEFINITIONS, artifact=artifact)
    with pytest.raises(ConfigError, match="not an artifact of aggregator build"):
        AggregatorFunction(stack, "Other", table=table, rules=DEFINITIONS, artifact=tmp_path)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"batch_size": 0}, "batch_size must be from 1 to 10000, got 0"),
        ({"window_seconds": 901}, "window_seconds must be from 1 to 900, got 901"),
        ({"iterator_age_alarm_milliseconds": 10}, "must be at least 1000, got 10"),
        ({"mode": "sometimes"}, "mode must be one of exactly-once, window, at-least-once"),
        ({"boto3": "layer"}, "boto3 must be 'bundle' or 'runtime'"),
        ({"home_region": "EU-WEST-1"}, "home_region must be a Region name such as eu-west-1"),
    ],
)
def test_settings_out_of_range_are_refused(
    stack: cdk.Stack, setting: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        AggregatorFunction(
            stack, "Aggregator", table=_existing_table(stack), rules=DEFINITIONS, **setting
        )


# --------------------------------------------------------------------------------------------
# cfn-lint
# --------------------------------------------------------------------------------------------


def test_cfn_lint_reports_nothing(synthesized: Synthesized) -> None:
    """``cfn-lint --include-checks I`` on every synthesized template: no finding but W3005,
    the ``DependsOn`` the CDK's Lambda function always adds on its role (redundant with the
    ``Fn::GetAtt`` of the role's ARN, and harmless)."""
    cfn_lint = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or shutil.which(
        "cfn-lint"
    )
    assert cfn_lint, "cfn-lint is a dev dependency"
    stacks = [s.stack_name for s in synthesized.assembly.stacks]
    assert len(stacks) == 10
    paths = [str(synthesized.template_path(s)) for s in stacks]
    result = subprocess.run(
        [cfn_lint, "--include-checks", "I", "--ignore-checks", "W3005", "--", *paths],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), (
        "cfn-lint findings:\n" + result.stdout + result.stderr
    )
    assert json.loads(Path(paths[0]).read_text(encoding="utf-8"))["Resources"]


def test_without_the_extra_the_import_says_what_to_install() -> None:
    script = (
        "import sys\n"
        "sys.modules['aws_cdk'] = None  # as if the cdk extra were not installed\n"
        "import aggregator.cdk\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 1
    assert "aggregator.cdk needs the AWS CDK: pip install 'ddb-aggregator[cdk]'" in result.stderr


# --------------------------------------------------------------------------------------------
# the backfill on AWS
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_the_backfill_is_the_sam_templates(
    synthesized: Synthesized, sam_template: dict[str, Any], name: str
) -> None:
    """The backfill function, its role, the state machine and its role and policy: what the
    SAM template deploys, by the same assertions."""
    cdk_template = _as_sam(synthesized.template(name))
    resources = cdk_template["Resources"]
    deployed = _deploy(sam_template, **DEPLOYMENTS[name])
    sam = deployed["Resources"]
    created = name.startswith("created")
    # the function: the stream function's code, its settings
    props = resources["BackfillFunction"]["Properties"]
    sam_props = sam["BackfillFunction"]["Properties"]
    assert props["Code"] == resources["AggregatorFunction"]["Properties"]["Code"]
    for key in ("Handler", "Runtime", "Architectures", "Timeout", "Role"):
        assert props[key] == sam_props[key], key
    assert _same(props["MemorySize"], sam_props["MemorySize"])
    assert props["LoggingConfig"] == sam_props["LoggingConfig"]
    assert props["Environment"] == sam_props["Environment"]
    # its role: the same statements, and least privilege
    statements = _statements(cdk_template, targets=True, role_name="BackfillRole")
    assert statements == _statements(deployed, targets=True, role_name="BackfillRole")
    assert_backfill_role_policy(
        statements,
        table_arn={"Fn::GetAtt": ["Table", "Arn"]} if created else EXISTING_TABLE_ARN,
        stream_arn={"Fn::GetAtt": ["Table", "StreamArn"]} if created else EXISTING_STREAM_ARN,
        log_group_arn={"Fn::GetAtt": ["BackfillLogGroup", "Arn"]},
    )
    # the state machine: the definition, its function, its role
    machine = resources["BackfillStateMachine"]["Properties"]
    sam_machine = sam["BackfillStateMachine"]["Properties"]
    assert json.loads(machine["DefinitionString"]) == sam_machine["Definition"]
    for key in ("StateMachineType", "DefinitionSubstitutions", "RoleArn"):
        assert machine[key] == sam_machine[key], key
    role = resources["BackfillStateMachineRole"]["Properties"]
    sam_role = sam["BackfillStateMachineRole"]["Properties"]
    assert (
        role["AssumeRolePolicyDocument"]["Statement"]
        == (sam_role["AssumeRolePolicyDocument"]["Statement"])
    )
    assert role["Policies"] == sam_role["Policies"]
    policy = resources["BackfillStateMachinePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    name_of = {"Name": {"Fn::GetAtt": ["BackfillStateMachine", "Name"]}}
    execution = "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:execution:${Name}"
    assert_state_machine_role_policy(
        [*role["Policies"][0]["PolicyDocument"]["Statement"], *policy],
        function_arn={"Fn::GetAtt": ["BackfillFunction", "Arn"]},
        state_machine_arn={"Ref": "BackfillStateMachine"},
        execution_arns=[{"Fn::Sub": [execution + tail, name_of]} for tail in (":*", "/*")],
    )


def test_thresholds_may_put_events_on_the_named_bus_only(
    synthesized: Synthesized, tmp_path: Path
) -> None:
    template = _as_sam(synthesized.template("sharded"))
    (statement,) = [
        s for s in _statements(template, targets=True) if s.get("Sid") == "ThresholdEvents"
    ]
    assert statement["Action"] == "events:PutEvents"
    (text, variables) = statement["Resource"]["Fn::Sub"]
    assert text.endswith(":event-bus/${Bus}") and "${AWS::Region}" in text
    assert variables == {"Bus": "alerts"}
    environment = _of_type(synthesized.template("sharded"), "AWS::Lambda::Function")
    (function,) = environment.values()
    assert function["Properties"]["Environment"]["Variables"]["AGGREGATOR_EVENT_BUS"] == "alerts"
    # the backfill function's role (target_policies without a bus) leaves the policy out
    (tmp_path / "likes.yaml").write_text(SHARDED_RULES, encoding="utf-8")
    rules = load_rules(tmp_path / "likes.yaml")
    regions = render_regions(rules)
    assert THRESHOLD_EVENTS_POLICY_NAME in target_policies(regions, "t", "i", event_bus="b")
    assert THRESHOLD_EVENTS_POLICY_NAME not in target_policies(regions, "t", "i")


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_the_dashboard_is_the_sam_templates(
    synthesized: Synthesized, sam_template: dict[str, Any], name: str
) -> None:
    """The same widgets, one body rendered from the rules: the SAM template's Fn::Sub text and
    the construct's are equal, with the same variables (their values are each template's)."""
    (cdk,) = _of_type(synthesized.template(name), "AWS::CloudWatch::Dashboard").values()
    sam = sam_template["Resources"]["AggregatorDashboard"]
    assert sam["Condition"] == "CreateDashboard"
    cdk_text, cdk_variables = cdk["Properties"]["DashboardBody"]["Fn::Sub"]
    sam_text, sam_variables = sam["Properties"]["DashboardBody"]["Fn::Sub"]
    assert cdk_text == sam_text
    assert set(cdk_variables) == set(sam_variables) == set(DASHBOARD_VARIABLES)
    assert json.loads(sam_text)["widgets"]  # a dashboard body CloudWatch reads
    disabled = _deploy(sam_template, Dashboard="Disabled", **DEPLOYMENTS[name])
    assert not _of_type(disabled, "AWS::CloudWatch::Dashboard")


def test_without_the_backfill_there_is_none(synthesized: Synthesized) -> None:
    template = synthesized.template("sharded")
    assert not _of_type(template, "AWS::StepFunctions::StateMachine")
    assert not _of_type(template, "AWS::CloudWatch::Dashboard")  # dashboard=False
    assert len(_of_type(template, "AWS::Lambda::Function")) == 1
    assert len(_of_type(template, "AWS::IAM::Role")) == 1
    assert not _of_type(template, "AWS::IAM::Policy")


def test_backfill_memory_out_of_range_is_refused(stack: cdk.Stack) -> None:
    with pytest.raises(ConfigError, match="backfill_memory_size must be from 128 to 10240"):
        AggregatorFunction(
            stack,
            "Aggregator",
            table=_existing_table(stack),
            rules=DEFINITIONS,
            backfill_memory_size=64,
        )
