"""Render the parts of ``template.yaml`` that follow from the rules and their table layout.

The SAM template keeps its hand-written structure; nine regions of it are rendered from the
deployed rule set (two for the backfill on AWS, one for the dashboard), each between marker
comments::

    # aggregator:begin <region>
    ...
    # aggregator:end <region>

Regions
-------
``table``
    The created table's ``AttributeDefinitions``, ``KeySchema``, ``GlobalSecondaryIndexes`` and
    ``TimeToLiveSpecification``: the layout's key names (no sort key for ``sort_key: null``), the
    leaderboard index and, without a sort key, the collection index
    (:func:`aggregator.dynamodb.table.table_definition`).
``aggregates-leading-keys``, ``dead-letters-leading-keys``, ``control-leading-keys``
    The ``Condition`` of the role's item grants: ``dynamodb:LeadingKeys`` limited to the reserved
    partition key value (``ForAllValues:StringEquals``) or, on a table without a sort key, to
    keys starting with it and ``#`` (``ForAllValues:StringLike``; the values contain no other
    ``*`` or ``?``, which are wildcards there: IAM User Guide, "String condition operators"),
    with ``Null: false`` so a request without keys is not allowed vacuously. With a rule that has
    ``write_shards`` or ``partitions`` above 1, the aggregates' grant also allows
    ``"<aggregates_pk>#*"`` (the partials' item collections, the spread partition key values);
    with ``control_partitions`` above 1, the control grant ``"<control_pk>#*"``.
``filters``
    The stream event's ``FilterCriteria`` (:func:`aggregator.deploy.filters.filter_criteria`).
``target-policy``
    The role's policies that depend on the rules (the region keeps its first name). With a
    leaderboard rule, ``ddb-aggregator-leaderboard``: ``Query`` on the leaderboard index only
    (statement ``LeaderboardIndexFloors``; the writer reads a partition's first entries to
    raise its floor, :mod:`aggregator.dynamodb.floors`). When some rule keeps its sum on an
    application item (``target``;
    :mod:`aggregator.dynamodb.targets`), a second policy of the role, ``ddb-aggregator-targets``,
    with one statement ``TargetAttributesOnly``: ``UpdateItem`` and ``GetItem`` on any item of
    the table, but only of its key attributes, the rules' target attributes and the checkpoint
    map (``ForAllValues:StringEquals`` on ``dynamodb:Attributes``, with ``Null: false`` so that a
    request naming no attributes, a ``GetItem`` of the whole item, is refused),
    ``dynamodb:Select`` ``SPECIFIC_ATTRIBUTES`` and ``dynamodb:ReturnValues`` ``NONE`` or
    ``UPDATED_OLD`` (Developer Guide, "Using IAM policy conditions for fine-grained access
    control": "you must specify the names of all of the primary key and index key attributes",
    and ``ALL_OLD``/``ALL_NEW`` would return attributes the policy does not allow). When some
    rule has ``thresholds``, a policy ``ddb-aggregator-threshold-events``: ``events:PutEvents``
    on the bus the ``ThresholdEventBus`` parameter names, nothing else (statement
    ``ThresholdEvents``). Without any of these rules the region is empty.

``backfill-policies`` (optional)
    The ``Policies`` of ``BackfillRole``, the backfill function's role: ``ddb-aggregator-backfill``
    (:func:`aggregator.deploy.backfill_roles.backfill_function_statements`, with the
    ``dynamodb:LeadingKeys`` conditions of the two regions above), then the policies of
    ``target-policy`` (the reducers write what the stream function writes) but the threshold
    events' (the stream function sends the crossings of every write, the backfill's too).
``dashboard`` (optional)
    The ``DashboardBody`` of ``Dashboard``, the CloudWatch dashboard
    (:func:`aggregator.deploy.dashboard.dashboard_body`: a widget of modelled WCU per rule
    among them), an ``Fn::Sub`` binding the function's and the table's names and the stack's.
``backfill-definition`` (optional)
    The ``Definition`` of ``BackfillStateMachine``
    (:func:`aggregator.deploy.backfill_machine.backfill_definition`; the function's ARN is
    ``${BackfillFunctionArn}``, a ``DefinitionSubstitutions`` entry).

The optional regions may be absent (a template written before the backfill on AWS, or one that
leaves it out); every other region must be there. ``aggregator template -d DIR`` rewrites the
regions in place; ``--check`` compares instead (the
build runs it on the rules it ships, so a template rendered for other rules cannot be deployed).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.core.rules import RuleSet

__all__ = [
    "OPTIONAL_REGIONS",
    "REGIONS",
    "STREAM_ARN",
    "TABLE_ARN",
    "check_template_regions",
    "leaderboard_policy",
    "render_regions",
    "render_template",
    "target_condition",
    "target_policy",
]

REGIONS = (
    "table",
    "aggregates-leading-keys",
    "dead-letters-leading-keys",
    "control-leading-keys",
    "filters",
    "target-policy",
    "backfill-policies",
    "backfill-definition",
    "dashboard",
)
OPTIONAL_REGIONS = frozenset({"backfill-policies", "backfill-definition", "dashboard"})
"""Regions a template may leave out (module docstring)."""

_BEGIN = re.compile(r"^(?P<indent>[ ]*)# aggregator:begin (?P<name>[a-z-]+)[ ]*$")
_END = "# aggregator:end {name}"


def _leading_keys(
    layout: TableLayout, partition: str, *, collections: bool = False
) -> dict[str, Any]:
    """``collections``: also the partition keys ``"<partition>#..."`` (the item collections of
    partial aggregates, for rules with ``write_shards``; the spread partition key values)."""
    values: list[str]
    if not layout.has_sort_key:
        operator, values = "ForAllValues:StringLike", [f"{partition}#*"]
    elif collections:
        operator, values = "ForAllValues:StringLike", [partition, f"{partition}#*"]
    else:
        operator, values = "ForAllValues:StringEquals", [partition]
    return {
        "Condition": {
            operator: {"dynamodb:LeadingKeys": values},
            "Null": {"dynamodb:LeadingKeys": "false"},
        }
    }


def render_regions(rules: RuleSet) -> dict[str, Any]:
    """The content of each region (plain YAML data) for ``rules`` and their layout.

    Raises
    ------
    ConfigError
        When a reserved partition key value holds ``*`` or ``?`` (IAM wildcards), or a filter
        pattern is too long (:func:`aggregator.deploy.filters.filter_patterns`).
    """
    from aggregator.deploy.backfill_machine import backfill_definition
    from aggregator.deploy.backfill_roles import (
        BACKFILL_POLICY_NAME,
        backfill_function_statements,
        reads_collection_index,
    )
    from aggregator.deploy.dashboard import dashboard_body
    from aggregator.deploy.filters import filter_criteria
    from aggregator.dynamodb.table import table_definition

    layout = rules.layout
    for value in layout.reserved_partition_keys:
        if "*" in value or "?" in value:
            raise ConfigError(
                f"reserved partition key value {value!r} holds '*' or '?', which IAM policies "
                "read as wildcards; choose another in the table: section"
            )
    definition = table_definition(layout)
    targets = any(r.target is not None for r in rules)
    aggregates = _leading_keys(
        layout,
        layout.aggregates_pk,
        collections=any(r.sharded or r.spread > 1 for r in rules),
    )
    control = _leading_keys(layout, layout.control_pk, collections=layout.control_partitions > 1)
    rule_policies = [
        *([leaderboard_policy(rules)] if any(r.leaderboard for r in rules) else []),
        *([target_policy(rules)] if targets else []),
    ]
    # the stream function's alone: the backfill's writes cross through the stream function too
    events = [threshold_events_policy()] if any(r.thresholds for r in rules) else []
    backfill_policy = {
        "PolicyName": BACKFILL_POLICY_NAME,
        "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": backfill_function_statements(
                table_arn=TABLE_ARN,
                stream_arn=STREAM_ARN,
                log_group_arn={"Fn::GetAtt": ["BackfillLogGroup", "Arn"]},
                aggregates_condition=aggregates["Condition"],
                control_condition=control["Condition"],
                collection_index_arn=(
                    _index_arn(layout.collection_index) if reads_collection_index(rules) else None
                ),
            ),
        },
    }
    return {
        "table": {
            "AttributeDefinitions": definition["AttributeDefinitions"],
            "KeySchema": definition["KeySchema"],
            "GlobalSecondaryIndexes": definition["GlobalSecondaryIndexes"],
            "TimeToLiveSpecification": {"AttributeName": layout.ttl_attribute, "Enabled": True},
        },
        "aggregates-leading-keys": aggregates,
        "dead-letters-leading-keys": _leading_keys(layout, layout.dead_letters_pk),
        "control-leading-keys": control,
        "filters": {"FilterCriteria": filter_criteria(rules)},
        "target-policy": [*rule_policies, *events],
        "backfill-policies": [backfill_policy, *rule_policies],
        "backfill-definition": {"Definition": backfill_definition()},
        "dashboard": {
            "DashboardBody": {
                "Fn::Sub": [
                    dashboard_body(rules),
                    {
                        "Function": {"Ref": "AggregatorFunction"},
                        "TableName": TABLE_NAME,
                        "Service": {"Ref": "AWS::StackName"},
                    },
                ]
            }
        },
    }


TABLE_NAME = {"Fn::If": ["CreateTable", {"Ref": "Table"}, {"Ref": "ExistingTableName"}]}
"""The table's name as the template's other resources name it (created, or existing)."""

TABLE_ARN = {
    "Fn::If": [
        "CreateTable",
        {"Fn::GetAtt": ["Table", "Arn"]},
        {"Fn::Select": [0, {"Fn::Split": ["/stream/", {"Ref": "ExistingTableStreamArn"}]}]},
    ]
}
"""The table's ARN as the template's other statements name it (created, or taken from the
stream ARN of an existing table), in the long form of the intrinsic functions."""

STREAM_ARN = {
    "Fn::If": [
        "CreateTable",
        {"Fn::GetAtt": ["Table", "StreamArn"]},
        {"Ref": "ExistingTableStreamArn"},
    ]
}
"""The table's stream ARN, as the template names it."""


def _index_arn(index_name: str) -> dict[str, Any]:
    """The ARN of the table's index ``index_name``: the table's plus ``/index/<name>`` (Service
    Authorization Reference, Amazon DynamoDB, resource type ``index``)."""
    return {"Fn::Sub": ["${TableArn}/index/" + index_name, {"TableArn": TABLE_ARN}]}


def leaderboard_policy(rules: RuleSet) -> dict[str, Any]:
    """The role's policy for leaderboard rules (module docstring, ``target-policy``): ``Query``
    of the leaderboard index, whose ARN is the table's plus ``/index/<name>`` (Service
    Authorization Reference, Amazon DynamoDB, resource type ``index``)."""
    return {
        "PolicyName": "ddb-aggregator-leaderboard",
        "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "LeaderboardIndexFloors",
                    "Effect": "Allow",
                    "Action": "dynamodb:Query",
                    "Resource": _index_arn(rules.layout.leaderboard_index),
                }
            ],
        },
    }


THRESHOLD_EVENTS_POLICY_NAME = "ddb-aggregator-threshold-events"
EVENT_BUS_ARN = {
    "Fn::Sub": "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}"
    ":event-bus/${ThresholdEventBus}"
}
"""The ARN of the bus the template's ``ThresholdEventBus`` names (Service Authorization
Reference, Amazon EventBridge, resource type ``event-bus``)."""


def threshold_events_policy() -> dict[str, Any]:
    """The role's policy for rules with thresholds (module docstring, ``target-policy``):
    ``events:PutEvents`` on the ``ThresholdEventBus`` bus only (statement ``ThresholdEvents``;
    :mod:`aggregator.runtime.threshold_events`)."""
    return {
        "PolicyName": THRESHOLD_EVENTS_POLICY_NAME,
        "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ThresholdEvents",
                    "Effect": "Allow",
                    "Action": "events:PutEvents",
                    "Resource": EVENT_BUS_ARN,
                }
            ],
        },
    }


def target_policy(rules: RuleSet) -> dict[str, Any]:
    """The role's policy for target rules (module docstring, ``target-policy``)."""
    return {
        "PolicyName": "ddb-aggregator-targets",
        "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "TargetAttributesOnly",
                    "Effect": "Allow",
                    "Action": ["dynamodb:UpdateItem", "dynamodb:GetItem"],
                    "Resource": TABLE_ARN,
                    **target_condition(rules),
                }
            ],
        },
    }


def target_condition(rules: RuleSet) -> dict[str, Any]:
    """The ``Condition`` of the role's ``TargetAttributesOnly`` statement (module docstring)."""
    layout = rules.layout
    keys = list(layout.key_attributes)
    written = sorted({r.target.attribute for r in rules if r.target is not None})
    return {
        "Condition": {
            "ForAllValues:StringEquals": {
                "dynamodb:Attributes": [*keys, *written, layout.target_checkpoints_attribute]
            },
            "StringEqualsIfExists": {
                "dynamodb:Select": "SPECIFIC_ATTRIBUTES",
                "dynamodb:ReturnValues": ["NONE", "UPDATED_OLD"],
            },
            "Null": {"dynamodb:Attributes": "false"},
        }
    }


class _IndentedDumper(yaml.SafeDumper):
    """Indents lists under their key, as the rest of the template does."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True  # the table's ARN, repeated in full in every statement that names it


def _dump(data: Any, indent: str) -> list[str]:
    text = yaml.dump(
        data, Dumper=_IndentedDumper, sort_keys=False, width=10**6, default_flow_style=False
    )
    return [f"{indent}{line}" if line else line for line in text.splitlines()]


def render_template(text: str, rules: RuleSet, *, source: str = "template") -> str:
    """``text`` (a SAM template) with every region rendered for ``rules``.

    Raises
    ------
    ConfigError
        When a region is missing, repeated, unknown or not closed (naming ``source``), or as
        :func:`render_regions`.
    """
    content = render_regions(rules)
    lines = text.splitlines()
    out: list[str] = []
    seen: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        match = _BEGIN.match(line)
        if match is None:
            continue
        name, indent = match["name"], match["indent"]
        if name not in content:
            raise ConfigError(f"{source}: line {i}: unknown region {name!r}; known: {REGIONS}")
        if name in seen:
            raise ConfigError(f"{source}: line {i}: region {name!r} appears twice")
        seen.append(name)
        end = _END.format(name=name)
        while i < len(lines) and lines[i].strip() != end:
            i += 1
        if i == len(lines):
            raise ConfigError(f"{source}: region {name!r} has no closing '{end}' line")
        if content[name] != []:  # an empty region renders nothing
            out += _dump(content[name], indent)
        out.append(lines[i])
        i += 1
    missing = [name for name in REGIONS if name not in seen and name not in OPTIONAL_REGIONS]
    if missing:
        raise ConfigError(
            f"{source}: no region {', '.join(map(repr, missing))}: mark where it goes with "
            "'# aggregator:begin <region>' and '# aggregator:end <region>' lines"
        )
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def check_template_regions(path: Path, rules: RuleSet) -> bool:
    """Whether the template at ``path`` is rendered for ``rules`` (its regions as
    :func:`render_template` would write them).

    Raises
    ------
    ConfigError
        When the file cannot be read, or as :func:`render_template`.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the template: {exc.strerror}") from None
    return render_template(text, rules, source=str(path)) == text
