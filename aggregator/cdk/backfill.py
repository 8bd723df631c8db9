""":class:`BackfillOnAws`: the SAM template's backfill on AWS (``BackfillFunction``, its role and
log group, ``BackfillStateMachine``, its role and map-run policy) as a construct, part of
:class:`~aggregator.cdk.AggregatorFunction` (its ``backfill`` keyword, default on).

The definition is :func:`aggregator.deploy.backfill_machine.backfill_definition`, the statements
:mod:`aggregator.deploy.backfill_roles`' (one source with the template). Sources: Lambda
Developer Guide, "Lambda quotas" (900 s, 128 to 10,240 MB); Step Functions Developer Guide, "IAM
policies for using Distributed Map states", "Cross-service confused deputy prevention".
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Aws, CfnResource, Duration, Fn, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from aggregator.cdk.policies import index_arn, target_policies
from aggregator.deploy.backfill_machine import FUNCTION_ARN_VARIABLE, backfill_definition
from aggregator.deploy.backfill_roles import (
    BACKFILL_POLICY_NAME,
    STATE_MACHINE_POLICY_NAME,
    backfill_function_statements,
    state_machine_invoke_statements,
    state_machine_self_statements,
)

__all__ = ["BACKFILL_MEMORY_MB", "BACKFILL_TIMEOUT_SECONDS", "BackfillOnAws"]

BACKFILL_MEMORY_MB = 1769
"""The SAM template's ``BackfillMemorySize`` default: one vCPU."""
BACKFILL_TIMEOUT_SECONDS = 900
"""Lambda's longest timeout (Lambda Developer Guide, "Lambda quotas")."""
MAP_RUNS_POLICY_NAME = "ddb-aggregator-backfill-map-runs"


class BackfillOnAws(Construct):
    """The backfill function and its state machine, as the SAM template deploys them.

    ``code``, ``runtime``, ``architecture`` and ``environment`` are the stream
    function's (its environment less the on-failure queue, tracing off); ``regions`` are
    :func:`aggregator.cli.template.render_regions`'.

    Attributes
    ----------
    function : aws_lambda.Function
        ``BackfillFunction``: the stream function's code, the handler
        ``aggregator.backfill_handler.handler``, ``memory_size`` MB, 900 s.
    role, log_group
        Its role (:func:`~aggregator.deploy.backfill_roles.backfill_function_statements` and
        the rules' policies) and log group.
    state_machine : aws_stepfunctions.CfnStateMachine
        ``BackfillStateMachine`` (Standard); its ARN is ``state_machine.attr_arn`` (or ``ref``).
    state_machine_role : aws_iam.Role
        Allowed to invoke :attr:`function` only; a separate ``iam.Policy``
        (:attr:`map_runs_policy`) lets it start, describe and stop its own executions.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        handler: str,
        runtime: lambda_.Runtime,
        architecture: lambda_.Architecture,
        environment: dict[str, str],
        regions: dict[str, Any],
        table_arn: str,
        stream_arn: str,
        leaderboard_index: str,
        collection_index: str | None,
        memory_size: int,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self, "LogGroup", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        statements = backfill_function_statements(
            table_arn=table_arn,
            stream_arn=stream_arn,
            log_group_arn=self.log_group.log_group_arn,
            aggregates_condition=regions["aggregates-leading-keys"]["Condition"],
            control_condition=regions["control-leading-keys"]["Condition"],
            collection_index_arn=(
                None if collection_index is None else index_arn(table_arn, collection_index)
            ),
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=(
                "ddb-aggregator backfill function - scans the table, reads its stream, writes "
                "only its own partitions"
            ),
            inline_policies={
                BACKFILL_POLICY_NAME: _document(statements),
                **target_policies(regions, table_arn, leaderboard_index),
            },
        )
        variables = {k: v for k, v in environment.items() if k != "AGGREGATOR_ON_FAILURE_QUEUE_URL"}
        variables["POWERTOOLS_TRACE_DISABLED"] = "true"
        self.function = lambda_.Function(
            self,
            "Function",
            code=code,
            handler=handler,
            runtime=runtime,
            architecture=architecture,
            memory_size=memory_size,
            timeout=Duration.seconds(BACKFILL_TIMEOUT_SECONDS),
            role=self.role.without_policy_updates(),
            log_group=self.log_group,
            environment=variables,
        )
        self.state_machine_role = iam.Role(
            self,
            "StateMachineRole",
            assumed_by=iam.ServicePrincipal(
                "states.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            ),
            description="ddb-aggregator backfill state machine - invokes the backfill function",
            inline_policies={
                STATE_MACHINE_POLICY_NAME: _document(
                    state_machine_invoke_statements(self.function.function_arn)
                )
            },
        )
        self.state_machine = sfn.CfnStateMachine(
            self,
            "StateMachine",
            state_machine_type="STANDARD",
            role_arn=self.state_machine_role.role_arn,
            definition_string=json.dumps(backfill_definition()),
            definition_substitutions={FUNCTION_ARN_VARIABLE: self.function.function_arn},
        )
        # Fn::Sub, as the template (cfn-lint prefers it to an Fn::Join of the parts)
        executions = [
            Fn.sub(
                "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:execution:${Name}"
                + tail,
                {"Name": self.state_machine.attr_name},
            )
            for tail in (":*", "/*")
        ]
        self.map_runs_policy = iam.Policy(
            self,
            "MapRunsPolicy",
            policy_name=MAP_RUNS_POLICY_NAME,
            roles=[self.state_machine_role],
            document=_document(state_machine_self_statements(self.state_machine.ref, executions)),
        )

    def resources(self) -> list[CfnResource]:
        """Every CloudFormation resource of the construct (to put a condition on)."""
        found = [c for c in self.node.find_all() if isinstance(c, CfnResource)]
        return found


def _document(statements: list[dict[str, Any]]) -> iam.PolicyDocument:
    return iam.PolicyDocument(statements=[iam.PolicyStatement.from_json(s) for s in statements])
