"""The IAM statements of the backfill on AWS: the backfill function's role and the state
machine's, one source for the SAM template (the ``backfill-policies`` region, rendered by
``aggregator template``) and the CDK construct.

ARNs are passed in as the caller spells them: CloudFormation intrinsics (a ``Ref``, an
``Fn::GetAtt``, an ``Fn::If``) in the template, tokens in the CDK.

The function (what the backfill's tasks do to the table):

- ``ScanTheTable``: ``dynamodb:Scan`` of the table (the scan segments), alone and without a
  condition: a ``Scan`` names no partition key, so ``dynamodb:LeadingKeys`` is absent from its
  request. ``ForAllValues`` holds for a request without the key (IAM User Guide, "Multivalued
  context keys": the set operator "also returns true if there are no context keys in the
  request") and ``Null: false`` refuses it: an item grant conditioned on the reserved partitions
  could not allow it, and a ``Scan`` granted there would read anything anyway. So it has its own
  statement, and the item grants keep their ``Null: false``, refusing every other keyless request;
- ``DescribeTheTable``: ``DescribeTable`` (the key schema, the stream's ARN);
- ``AggregatesPartitionOnly`` and ``ControlPartitionOnly``: the stream function's own item
  grants under the reserved partitions (``UpdateItem``/``GetItem`` of aggregates, by the reducers'
  exactly-once writer, and ``BatchGetItem``/``Query`` of them, by the ``finish`` task's settling
  of top lists, :func:`aggregator.operations.top_list_check.settle_top_lists`;
  ``GetItem``/``BatchGetItem``/``PutItem``/``UpdateItem`` of control items, and ``Query`` of them
  (the top lists, by that settling):
  the backfill's progress, its committed data records, the manifest), with the same
  ``dynamodb:LeadingKeys`` conditions (:func:`aggregator.cli.template.render_regions`);
- ``CollectionIndexReads``, on a table without a sort key when a rule keeps a top list
  (``leaderboard_store: list``): ``Query`` of the collection index, by which the ``finish``
  task's settling of top lists reads the rule's aggregates and lists there
  (:func:`aggregator.dynamodb.collections.query_collections`), then ``BatchGetItem`` of the items
  under the reserved prefixes. Without a condition, as the stream function's ``Query`` of the
  leaderboard index: only the framework's items carry the index's key attribute, and the index
  projects keys only (:func:`aggregator.dynamodb.table.collection_index`);
- ``ReadTheTablesStream``/``ListStreams``: the collector's stream reads;
- ``OwnLogGroup``: its logs.

The rule-dependent policies of the stream function's role (the leaderboard index's ``Query``,
target attributes) are the reducers' too: the template and the construct add them.

The state machine (Step Functions Developer Guide, "IAM policies for using Distributed Map
states"; Service Authorization Reference, AWS Step Functions, resource types ``stateMachine`` and
``execution``):

- ``InvokeTheBackfillFunction``: ``lambda:InvokeFunction`` of the backfill function only (the
  unqualified ARN the definition invokes);
- ``StartItsOwnMapRuns``: ``states:StartExecution`` of itself (a Distributed Map starts its child
  workflow executions through it);
- ``DescribeAndStopItsOwnExecutions``: ``states:DescribeExecution`` and ``states:StopExecution``
  of its own executions: ``execution:<name>:*`` and the Map Runs' children,
  ``execution:<name>/<map label>:*`` (StartExecution API reference: a Distributed Map's qualified
  ARN is ``stateMachine:<name>/<label>``), hence ``execution:<name>/*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aggregator.core.rules import RuleSet

__all__ = [
    "BACKFILL_POLICY_NAME",
    "STATE_MACHINE_POLICY_NAME",
    "STREAM_READS",
    "backfill_function_statements",
    "reads_collection_index",
    "state_machine_invoke_statements",
    "state_machine_self_statements",
]

BACKFILL_POLICY_NAME = "ddb-aggregator-backfill"
STATE_MACHINE_POLICY_NAME = "ddb-aggregator-backfill-machine"
STREAM_READS = ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator")


def reads_collection_index(rules: RuleSet) -> bool:
    """Whether the backfill's role needs ``CollectionIndexReads`` (module docstring): a table
    without a sort key and a rule with ``leaderboard_store: list``."""
    return not rules.layout.has_sort_key and any(r.top_listed for r in rules)


def backfill_function_statements(
    *,
    table_arn: Any,
    stream_arn: Any,
    log_group_arn: Any,
    aggregates_condition: Mapping[str, Any],
    control_condition: Mapping[str, Any],
    collection_index_arn: Any = None,
) -> list[dict[str, Any]]:
    """The backfill function's statements (module docstring), as IAM JSON.

    Parameters
    ----------
    table_arn, stream_arn, log_group_arn
        The table's, its stream's and the function's log group's ARNs (strings, intrinsics or
        tokens).
    aggregates_condition, control_condition
        The ``Condition`` of the item grants under the aggregates and the control partitions
        (``render_regions(rules)["aggregates-leading-keys"]["Condition"]``, and
        ``["control-leading-keys"]``).
    collection_index_arn
        The collection index's ARN when :func:`reads_collection_index` holds (``None``
        otherwise: no ``CollectionIndexReads``).
    """
    collections: list[dict[str, Any]] = []
    if collection_index_arn is not None:
        collections.append(
            {
                "Sid": "CollectionIndexReads",
                "Effect": "Allow",
                "Action": "dynamodb:Query",
                "Resource": collection_index_arn,
            }
        )
    return [
        {
            "Sid": "ScanTheTable",
            "Effect": "Allow",
            "Action": "dynamodb:Scan",
            "Resource": table_arn,
        },
        {
            "Sid": "DescribeTheTable",
            "Effect": "Allow",
            "Action": "dynamodb:DescribeTable",
            "Resource": table_arn,
        },
        {
            "Sid": "AggregatesPartitionOnly",
            "Effect": "Allow",
            "Action": [
                "dynamodb:UpdateItem",
                "dynamodb:GetItem",
                "dynamodb:BatchGetItem",
                "dynamodb:Query",
            ],
            "Resource": table_arn,
            "Condition": dict(aggregates_condition),
        },
        {
            "Sid": "ControlPartitionOnly",
            "Effect": "Allow",
            "Action": [
                "dynamodb:GetItem",
                "dynamodb:BatchGetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:Query",
            ],
            "Resource": table_arn,
            "Condition": dict(control_condition),
        },
        *collections,
        {
            "Sid": "ReadTheTablesStream",
            "Effect": "Allow",
            "Action": list(STREAM_READS),
            "Resource": stream_arn,
        },
        # ListStreams has no resource type (Service Authorization Reference, Amazon DynamoDB)
        {
            "Sid": "ListStreams",
            "Effect": "Allow",
            "Action": "dynamodb:ListStreams",
            "Resource": "*",
        },
        {
            "Sid": "OwnLogGroup",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": log_group_arn,
        },
    ]


def state_machine_invoke_statements(function_arn: Any) -> list[dict[str, Any]]:
    """The state machine role's own statement: invoke the backfill function, nothing else."""
    return [
        {
            "Sid": "InvokeTheBackfillFunction",
            "Effect": "Allow",
            "Action": "lambda:InvokeFunction",
            "Resource": function_arn,
        }
    ]


def state_machine_self_statements(
    state_machine_arn: Any, execution_arns: list[Any]
) -> list[dict[str, Any]]:
    """What a Distributed Map needs of its own state machine (module docstring); in a policy of
    its own, since it names the state machine, which names the role.

    Parameters
    ----------
    state_machine_arn
        The state machine's ARN.
    execution_arns
        ``arn:<partition>:states:<region>:<account>:execution:<name>:*`` and
        ``...:execution:<name>/*``.
    """
    return [
        {
            "Sid": "StartItsOwnMapRuns",
            "Effect": "Allow",
            "Action": "states:StartExecution",
            "Resource": state_machine_arn,
        },
        {
            "Sid": "DescribeAndStopItsOwnExecutions",
            "Effect": "Allow",
            "Action": ["states:DescribeExecution", "states:StopExecution"],
            "Resource": list(execution_arns),
        },
    ]
