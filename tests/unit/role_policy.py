"""What the aggregator function's role may do, as assertions on its policy statements; the same
for the backfill on AWS: the backfill function's role and the state machine's.

Shared by the SAM template's tests (test_template.py, on each rendered deployment) and the CDK
construct's (test_cdk.py, on each synthesized stack): both deploy the same roles. A statement is
CloudFormation JSON (``Action`` and ``Resource`` a value or a list); the expected resources are
passed as the template spells them (an ARN, or a ``Ref``/``Fn::GetAtt``).
"""

from __future__ import annotations

import json
from typing import Any

from aggregator.core.layout import DEFAULT_LAYOUT

RESERVED_PARTITION_KEYS = DEFAULT_LAYOUT.reserved_partition_keys

# What the handler does to the table (aggregator/handler.py -> runtime/processor.py ->
# dynamodb/{writer,checkpoint,deadletters}.py): UpdateItem and GetItem (checkpoints) on aggregate
# items, PutItem of dead letters; DescribeTable for the cold-start key-schema check.
# aggregates updated and read, dead letters put, and the control partition (rule manifest and
# backfill fences) read, put and updated
ITEM_GRANTS = {
    "dynamodb:UpdateItem": {DEFAULT_LAYOUT.aggregates_pk, DEFAULT_LAYOUT.control_pk},
    "dynamodb:GetItem": {DEFAULT_LAYOUT.aggregates_pk, DEFAULT_LAYOUT.control_pk},
    "dynamodb:PutItem": {DEFAULT_LAYOUT.dead_letters_pk, DEFAULT_LAYOUT.control_pk},
    # the leaderboard index's floors (aggregator.dynamodb.floors)
    "dynamodb:BatchGetItem": {DEFAULT_LAYOUT.control_pk},
}
# the same on a table without a sort key: keys under the reserved prefixes
PK_ONLY_ITEM_GRANTS = {
    "dynamodb:UpdateItem": {"AGGREGATES#*", "AGGREGATOR#CONTROL#*"},
    "dynamodb:GetItem": {"AGGREGATES#*", "AGGREGATOR#CONTROL#*"},
    "dynamodb:PutItem": {"AGGREGATOR#DEAD_LETTERS#*", "AGGREGATOR#CONTROL#*"},
    "dynamodb:BatchGetItem": {"AGGREGATOR#CONTROL#*"},
}
# What the backfill's tasks do to items (the design's control items, the reducers' exactly-once
# writer, the finish task's settling of top lists): the stream function's grants under the
# aggregates and control partitions, no dead letters, and BatchGetItem and Query of aggregates;
# on a table without a sort key, the same prefixes.
BACKFILL_ITEM_GRANTS = {
    **{
        action: keys - {DEFAULT_LAYOUT.dead_letters_pk}
        for action, keys in ITEM_GRANTS.items()
        if keys - {DEFAULT_LAYOUT.dead_letters_pk}
    },
    "dynamodb:BatchGetItem": {DEFAULT_LAYOUT.aggregates_pk, DEFAULT_LAYOUT.control_pk},
    "dynamodb:Query": {DEFAULT_LAYOUT.aggregates_pk, DEFAULT_LAYOUT.control_pk},
}
PK_ONLY_BACKFILL_ITEM_GRANTS = {
    "dynamodb:UpdateItem": {"AGGREGATES#*", "AGGREGATOR#CONTROL#*"},
    "dynamodb:GetItem": {"AGGREGATES#*", "AGGREGATOR#CONTROL#*"},
    "dynamodb:PutItem": {"AGGREGATOR#CONTROL#*"},
    "dynamodb:BatchGetItem": {"AGGREGATES#*", "AGGREGATOR#CONTROL#*"},
    "dynamodb:Query": {"AGGREGATES#*", "AGGREGATOR#CONTROL#*"},
}
STATE_MACHINE_ACTIONS = {
    "lambda:InvokeFunction",
    "states:StartExecution",
    "states:DescribeExecution",
    "states:StopExecution",
}
STREAM_ACTIONS = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}
XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
# Actions that act on items, hence carry leading keys (TransactWriteItems has no IAM action of
# its own: each action inside is authorized as PutItem, UpdateItem, DeleteItem or
# ConditionCheckItem).
ITEM_WRITES = {
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
}
ITEM_ACTIONS = {
    *ITEM_WRITES,
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:ConditionCheckItem",
    "dynamodb:PartiQLSelect",
}
# The only actions that may (and must) name Resource "*": they have no resource type.
STAR_ACTIONS = {"dynamodb:ListStreams", *XRAY_ACTIONS}

LEADING_KEYS_CONDITION_OPERATORS = {"ForAllValues:StringEquals", "Null"}
TARGET_SID = "TargetAttributesOnly"
"""The statement that lets target rules update application items (any key, named attributes)."""
LEADERBOARD_SID = "LeaderboardIndexFloors"
"""The statement that lets leaderboard rules read the leaderboard index (to raise its floors)."""
COLLECTION_SID = "CollectionIndexReads"
"""The backfill role's statement that reads the collection index (a table without a sort key
whose rules keep top lists: the finish task settles them)."""
# the same on a table without a sort key: keys starting with a reserved value and "#"
PK_ONLY_LEADING_KEYS_CONDITION_OPERATORS = {"ForAllValues:StringLike", "Null"}


def as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def assert_every_statement_allows_named_actions(statements: list[dict[str, Any]]) -> None:
    assert statements
    for statement in statements:
        assert statement["Effect"] == "Allow"
        assert set(statement) <= {"Sid", "Effect", "Action", "Resource", "Condition"}
        for action in as_list(statement["Action"]):
            assert "*" not in action and "?" not in action, action
            assert action.split(":")[0] in {"dynamodb", "sqs", "logs", "xray"}, action
        resources = as_list(statement["Resource"])
        if "*" in resources:
            assert resources == ["*"]
            assert set(as_list(statement["Action"])) <= STAR_ACTIONS, statement


def assert_item_access_only_under_the_reserved_partitions(
    statements: list[dict[str, Any]],
    table_arn: Any,
    expected: dict[str, set[str]] = ITEM_GRANTS,
) -> None:
    granted: dict[str, set[str]] = {}
    for statement in statements:
        actions = set(as_list(statement["Action"]))
        items = actions & ITEM_ACTIONS
        if not items:
            assert "dynamodb:LeadingKeys" not in json.dumps(statement.get("Condition", {}))
            continue
        # Item actions only, never with a keyless one: ForAllValues holds for a request without
        # leading keys (a Scan), and the Null condition refuses those too.
        assert actions == items, statement
        assert as_list(statement["Resource"]) == [table_arn], statement
        condition = statement["Condition"]
        assert set(condition) == LEADING_KEYS_CONDITION_OPERATORS, condition
        assert condition["Null"] == {"dynamodb:LeadingKeys": "false"}
        assert set(condition["ForAllValues:StringEquals"]) == {"dynamodb:LeadingKeys"}
        keys = set(as_list(condition["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]))
        assert keys and keys <= set(RESERVED_PARTITION_KEYS)
        for action in items:
            granted.setdefault(action, set()).update(keys)
    # exactly what the handler (or the backfill) does
    assert granted == expected
    assert not any(DEFAULT_LAYOUT.runner_pk in keys for keys in granted.values())
    writes = {action for action in granted if action in ITEM_WRITES}
    assert writes == {"dynamodb:UpdateItem", "dynamodb:PutItem"}


def pk_only_item_grants(statements: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The ``StringLike`` key patterns granted per item action, on a table without a sort key
    (each item statement checked for its condition's shape)."""
    granted: dict[str, set[str]] = {}
    for statement in statements:
        items = set(as_list(statement["Action"])) & ITEM_ACTIONS
        if not items:
            continue
        condition = statement["Condition"]
        assert set(condition) == PK_ONLY_LEADING_KEYS_CONDITION_OPERATORS, condition
        assert condition["Null"] == {"dynamodb:LeadingKeys": "false"}
        patterns = as_list(condition["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])
        for action in items:
            granted.setdefault(action, set()).update(patterns)
    return granted


def assert_no_other_table_access(statements: list[dict[str, Any]], table_arn: Any) -> None:
    dynamodb = {
        action: statement
        for statement in statements
        for action in as_list(statement["Action"])
        if action.startswith("dynamodb:")
    }
    assert set(dynamodb) == {
        *ITEM_GRANTS,
        *STREAM_ACTIONS,
        "dynamodb:ListStreams",
        "dynamodb:DescribeTable",
    }
    for absent in ("Scan", "Query", "DeleteItem", "BatchWriteItem"):
        assert f"dynamodb:{absent}" not in dynamodb
    describe = dynamodb["dynamodb:DescribeTable"]
    assert as_list(describe["Resource"]) == [table_arn]
    assert "Condition" not in describe


def assert_stream_reads_are_scoped_to_the_stream(
    statements: list[dict[str, Any]], stream_arn: Any
) -> None:
    stream = [s for s in statements if set(as_list(s["Action"])) & STREAM_ACTIONS]
    assert len(stream) == 1
    assert set(as_list(stream[0]["Action"])) == STREAM_ACTIONS
    assert as_list(stream[0]["Resource"]) == [stream_arn]
    # ListStreams has no resource type: alone, on "*"
    lists = [s for s in statements if "dynamodb:ListStreams" in as_list(s["Action"])]
    assert [(as_list(s["Action"]), as_list(s["Resource"])) for s in lists] == [
        (["dynamodb:ListStreams"], ["*"])
    ]


def assert_queue_and_log_permissions(
    statements: list[dict[str, Any]], queue_arn: Any, log_group_arn: Any
) -> None:
    by_service: dict[str, list[dict[str, Any]]] = {}
    for statement in statements:
        for service in {a.split(":")[0] for a in as_list(statement["Action"])}:
            by_service.setdefault(service, []).append(statement)
    ((sqs,),) = [by_service["sqs"]]
    assert as_list(sqs["Action"]) == ["sqs:SendMessage"]
    assert as_list(sqs["Resource"]) == [queue_arn]
    ((logs,),) = [by_service["logs"]]
    # the function's own log group, which the stack creates (so no CreateLogGroup)
    assert set(as_list(logs["Action"])) == {"logs:CreateLogStream", "logs:PutLogEvents"}
    assert as_list(logs["Resource"]) == [log_group_arn]


def assert_xray_writes_only_when_traced(statements: list[dict[str, Any]], traced: bool) -> None:
    xray = [s for s in statements if set(as_list(s["Action"])) & XRAY_ACTIONS]
    if traced:
        assert len(xray) == 1
        assert set(as_list(xray[0]["Action"])) == XRAY_ACTIONS
        assert as_list(xray[0]["Resource"]) == ["*"]  # X-Ray has no resource types
    else:
        assert xray == []


def assert_role_policy(
    statements: list[dict[str, Any]],
    *,
    table_arn: Any,
    stream_arn: Any,
    queue_arn: Any,
    log_group_arn: Any,
    traced: bool,
) -> None:
    """Every assertion above, for a table with a sort key; the statement of target rules, when
    there is one, by :func:`target_attributes` (its attributes: :func:`target_attributes`)."""
    target_attributes(statements, table_arn)
    leaderboard_index_query(statements)
    statements = [s for s in statements if s.get("Sid") not in (TARGET_SID, LEADERBOARD_SID)]
    assert_every_statement_allows_named_actions(statements)
    assert_item_access_only_under_the_reserved_partitions(statements, table_arn)
    assert_no_other_table_access(statements, table_arn)
    assert_stream_reads_are_scoped_to_the_stream(statements, stream_arn)
    assert_queue_and_log_permissions(statements, queue_arn, log_group_arn)
    assert_xray_writes_only_when_traced(statements, traced)


def assert_backfill_role_policy(
    statements: list[dict[str, Any]], *, table_arn: Any, stream_arn: Any, log_group_arn: Any
) -> None:
    """The backfill function's role, for a table with a sort key: ``Scan`` of the table alone
    (no condition: a Scan names no partition key), ``DescribeTable``, item grants under the
    aggregates and control partitions only (:data:`BACKFILL_ITEM_GRANTS`), the stream's reads,
    its own log group; no queue, no X-Ray, no dead letters; the rule-dependent statements as
    the stream function's."""
    target_attributes(statements, table_arn)
    leaderboard_index_query(statements)
    # a table with a sort key reads its collections from the table itself
    assert not collection_index_query(statements)
    statements = [s for s in statements if s.get("Sid") not in (TARGET_SID, LEADERBOARD_SID)]
    assert_every_statement_allows_named_actions(statements)
    assert_item_access_only_under_the_reserved_partitions(
        statements, table_arn, BACKFILL_ITEM_GRANTS
    )
    assert_stream_reads_are_scoped_to_the_stream(statements, stream_arn)
    assert_xray_writes_only_when_traced(statements, traced=False)
    dynamodb = {
        action: statement
        for statement in statements
        for action in as_list(statement["Action"])
        if action.startswith("dynamodb:")
    }
    assert set(dynamodb) == {
        *BACKFILL_ITEM_GRANTS,
        *STREAM_ACTIONS,
        "dynamodb:ListStreams",
        "dynamodb:DescribeTable",
        "dynamodb:Scan",
    }
    for absent in ("DeleteItem", "BatchWriteItem", "PartiQLSelect"):
        assert f"dynamodb:{absent}" not in dynamodb
    # Query of the reserved partitions only (the finish task's top lists), never of the
    # application's items
    for statement in statements:
        if "dynamodb:Query" in as_list(statement["Action"]):
            assert as_list(statement["Resource"]) == [table_arn] and "Condition" in statement
    for action in ("dynamodb:Scan", "dynamodb:DescribeTable"):
        statement = dynamodb[action]
        assert as_list(statement["Action"]) == [action]  # alone in its statement
        assert as_list(statement["Resource"]) == [table_arn]  # the table, not an index
        assert "Condition" not in statement
    services = {a.split(":")[0] for s in statements for a in as_list(s["Action"])}
    assert services == {"dynamodb", "logs"}
    (logs,) = [s for s in statements if as_list(s["Action"])[0].startswith("logs:")]
    assert set(as_list(logs["Action"])) == {"logs:CreateLogStream", "logs:PutLogEvents"}
    assert as_list(logs["Resource"]) == [log_group_arn]


def assert_state_machine_role_policy(
    statements: list[dict[str, Any]],
    *,
    function_arn: Any,
    state_machine_arn: Any,
    execution_arns: list[Any],
) -> None:
    """The backfill state machine's role (its own policy and the map-run policy together):
    invoke the backfill function; start, describe and stop its own executions; nothing else, no
    ``"*"``."""
    assert statements
    granted: dict[str, list[Any]] = {}
    for statement in statements:
        assert statement["Effect"] == "Allow"
        assert set(statement) <= {"Sid", "Effect", "Action", "Resource"}  # no condition
        assert "*" not in as_list(statement["Resource"])
        for action in as_list(statement["Action"]):
            assert action not in granted, f"{action} granted twice"
            granted[action] = as_list(statement["Resource"])
    assert set(granted) == STATE_MACHINE_ACTIONS
    assert granted["lambda:InvokeFunction"] == [function_arn]
    assert granted["states:StartExecution"] == [state_machine_arn]
    assert granted["states:DescribeExecution"] == granted["states:StopExecution"] == execution_arns


def leaderboard_index_query(statements: list[dict[str, Any]]) -> bool:
    """Whether the statement of leaderboard rules is there; checked for its shape: ``Query``
    alone, on the leaderboard index alone (the table's ARN plus ``/index/leaderboard``), no
    condition."""
    return index_query(statements, LEADERBOARD_SID, "leaderboard")


def collection_index_query(statements: list[dict[str, Any]]) -> bool:
    """Whether the backfill role's ``Query`` of the collection index (a table without a sort key,
    a rule with a top list) is there; checked for its shape as :func:`leaderboard_index_query`,
    on the index ``aggregator-collections``."""
    return index_query(statements, COLLECTION_SID, "aggregator-collections")


def index_query(statements: list[dict[str, Any]], sid: str, index_name: str) -> bool:
    """Whether the statement ``sid`` is there: ``Query`` alone, on the index ``index_name``
    alone (the table's ARN plus ``/index/<name>``), no condition."""
    found = [s for s in statements if s.get("Sid") == sid]
    if not found:
        return False
    (statement,) = found
    assert statement["Effect"] == "Allow"
    assert as_list(statement["Action"]) == ["dynamodb:Query"]
    (resource,) = as_list(statement["Resource"])
    # {"Fn::Sub": ["${TableArn}/index/<name>", {"TableArn": <the table's ARN>}]}, or the text it
    # gives for a table whose ARN is known
    if isinstance(resource, str):
        assert resource.startswith("arn:aws:dynamodb:") and resource.endswith(
            f"/index/{index_name}"
        ), resource
    else:
        (text, variables) = resource["Fn::Sub"]
        assert text == "${TableArn}/index/" + index_name and set(variables) == {"TableArn"}
    assert "Condition" not in statement
    return True


def target_attributes(statements: list[dict[str, Any]], table_arn: Any) -> list[str] | None:
    """The attributes the statement of target rules lets the function update and read on any
    item, checked for its shape: ``UpdateItem`` and ``GetItem`` on the table only, every request
    naming its attributes (``Null: false``), all of them among the list, no ``ALL_OLD`` or
    ``ALL_NEW`` return values and no whole-item reads; ``None`` when there is no such statement."""
    found = [s for s in statements if s.get("Sid") == TARGET_SID]
    if not found:
        return None
    (statement,) = found
    assert statement["Effect"] == "Allow"
    assert set(as_list(statement["Action"])) == {"dynamodb:UpdateItem", "dynamodb:GetItem"}
    assert as_list(statement["Resource"]) == [table_arn]
    condition = statement["Condition"]
    assert set(condition) == {"ForAllValues:StringEquals", "StringEqualsIfExists", "Null"}
    assert condition["Null"] == {"dynamodb:Attributes": "false"}
    if_exists = condition["StringEqualsIfExists"]
    assert if_exists["dynamodb:Select"] == "SPECIFIC_ATTRIBUTES"
    assert set(as_list(if_exists["dynamodb:ReturnValues"])) <= {"NONE", "UPDATED_OLD"}
    assert set(condition["ForAllValues:StringEquals"]) == {"dynamodb:Attributes"}
    names = as_list(condition["ForAllValues:StringEquals"]["dynamodb:Attributes"])
    assert names[-1] == DEFAULT_LAYOUT.target_checkpoints_attribute
    return names
