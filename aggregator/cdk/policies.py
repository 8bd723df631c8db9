"""The role of :class:`~aggregator.cdk.AggregatorFunction`: the statements of the SAM
template's ``AggregatorRole`` (read from the template this package ships: one source for both
deployments), with the ``dynamodb:LeadingKeys`` conditions and the rule-dependent policies that
:func:`aggregator.cli.template.render_regions` renders.

Sources: Service Authorization Reference, Amazon DynamoDB (the ``index`` resource type).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Fn, Token
from aws_cdk import aws_iam as iam

from aggregator.cli.project.scaffold import project_file
from aggregator.cli.template import THRESHOLD_EVENTS_POLICY_NAME
from aggregator.deploy.filters import parse_template

__all__ = ["ROLE_ACTIONS", "index_arn", "role_actions", "role_statements", "target_policies"]


def role_actions() -> dict[str, list[str]]:
    """The actions of each statement of the SAM template's ``AggregatorRole``, by ``Sid``, read
    from the template this package ships (one source for both deployments; a statement under
    ``!If`` counts by its ``Sid`` too)."""
    template = parse_template(project_file("template.yaml"), "template.yaml")
    policies = template["Resources"]["AggregatorRole"]["Properties"]["Policies"]
    actions: dict[str, list[str]] = {}
    for policy in policies:
        for entry in policy["PolicyDocument"]["Statement"]:
            # an !If [condition, statement, !Ref AWS::NoValue] reads as that list
            for statement in entry if isinstance(entry, list) else [entry]:
                if isinstance(statement, dict) and "Sid" in statement:
                    action = statement["Action"]
                    actions[statement["Sid"]] = [action] if isinstance(action, str) else action
    return actions


ROLE_ACTIONS = role_actions()
"""The role's statements' actions by ``Sid``, as the SAM template's ``AggregatorRole`` has
them."""


def index_arn(table_arn: str, index_name: str) -> str:
    """The ARN of the table's index ``index_name``: the table's plus ``/index/<name>`` (Service
    Authorization Reference, Amazon DynamoDB, resource type ``index``)."""
    if Token.is_unresolved(table_arn):
        return Fn.sub("${TableArn}/index/" + index_name, {"TableArn": table_arn})
    return f"{table_arn}/index/{index_name}"


def target_policies(
    regions: dict[str, Any],
    table_arn: str,
    index_name: str,
    *,
    event_bus: str | None = None,
) -> dict[str, iam.PolicyDocument]:
    """The SAM template's ``target-policy`` region: the policies that depend on the rules (the
    leaderboard index's ``Query``, on the index ``index_name``; the updates of target attributes
    of application items; ``PutEvents`` on the bus ``event_bus`` for thresholds), as
    :func:`aggregator.cli.template.render_regions` renders them. Without ``event_bus``, the
    threshold events' policy is left out (the backfill function's role)."""
    out = {}
    for policy in regions["target-policy"]:
        if policy["PolicyName"] == THRESHOLD_EVENTS_POLICY_NAME and event_bus is None:
            continue

        def resource(sid: str) -> str:
            if sid == "LeaderboardIndexFloors":
                return index_arn(table_arn, index_name)
            if sid == "ThresholdEvents":
                return Fn.sub(
                    "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}"
                    ":event-bus/${Bus}",
                    {"Bus": str(event_bus)},
                )
            return table_arn

        statements = [
            iam.PolicyStatement(
                sid=s["Sid"],
                actions=[s["Action"]] if isinstance(s["Action"], str) else s["Action"],
                resources=[resource(s["Sid"])],
                conditions=s.get("Condition"),
            )
            for s in policy["PolicyDocument"]["Statement"]
        ]
        out[policy["PolicyName"]] = iam.PolicyDocument(statements=statements)
    return out


def role_statements(
    regions: dict[str, Any],
    *,
    stream_arn: str,
    table_arn: str,
    queue_arn: str,
    log_group_arn: str,
    tracing: bool,
) -> list[iam.PolicyStatement]:
    """The role's statements: the SAM template's, with the rendered ``dynamodb:LeadingKeys``
    conditions (``regions``: :func:`aggregator.cli.template.render_regions`)."""

    def statement(sid: str, resource: str, region: str | None = None) -> iam.PolicyStatement:
        return iam.PolicyStatement(
            sid=sid,
            actions=ROLE_ACTIONS[sid],
            resources=[resource],
            conditions=regions[region]["Condition"] if region else None,
        )

    statements = [
        statement("ReadTheTablesStream", stream_arn),
        statement("ListStreams", "*"),
        statement("DescribeTheTable", table_arn),
        statement("AggregatesPartitionOnly", table_arn, "aggregates-leading-keys"),
        statement("DeadLettersPartitionOnly", table_arn, "dead-letters-leading-keys"),
        statement("ControlPartitionOnly", table_arn, "control-leading-keys"),
        statement("OnFailureQueue", queue_arn),
        statement("OwnLogGroup", log_group_arn),
    ]
    if tracing:
        statements.append(statement("XRayWrites", "*"))
    return statements
