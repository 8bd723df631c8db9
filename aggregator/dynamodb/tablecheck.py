"""Check an existing table against a rule set's layout, and prepare what it lacks.

:func:`check_table` reads ``DescribeTable`` and ``DescribeTimeToLive`` and reports every
mismatch at once, each with its fix:

* the key schema: the layout's partition and sort key names, both of type ``S`` (the framework
  writes string keys; a table keyed by numbers or binaries is refused, never mis-aggregated),
  or no sort key when the layout declares ``sort_key: null``;
* without a sort key, the collection index (:mod:`aggregator.core.layout`);
* the stream: enabled with view type ``NEW_AND_OLD_IMAGES`` (deltas need both images);
* the leaderboard index, when a rule has ``leaderboard: true``: the layout's index name, keyed
  by the leaderboard attribute (S) and the value attribute (N);
* TTL on the layout's TTL attribute, when a windowed rule has a retention (a table has one TTL
  attribute; DescribeTimeToLive tells which).

:func:`prepare_table` applies the fixes that are safe on a live table, one ``UpdateTable`` at a
time, waiting in between (DynamoDB refuses an update while the table is ``UPDATING``, and one
``UpdateTable`` creates at most one GSI; Developer Guide, "UpdateTable"): it enables a missing
stream, creates a missing collection index and leaderboard index, and enables TTL. It never
disables or replaces anything: a stream of another view type cannot be
changed in place (it must be disabled and re-enabled, which gives it a new ARN and cuts off its
other consumers; Developer Guide, "Change data capture for DynamoDB Streams"), and a table has
at most one TTL attribute, so those are reported for the owner to decide. TTL can be changed
once per hour (Developer Guide, "UpdateTimeToLive").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.table import collection_index, leaderboard_index

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.literals import ScalarAttributeTypeType
    from mypy_boto3_dynamodb.type_defs import CreateGlobalSecondaryIndexActionTypeDef


__all__ = [
    "GLOBAL_TABLES_DOC",
    "REGION_PATTERN",
    "HomeRegionError",
    "TableProblem",
    "check_key_schema",
    "check_table",
    "check_table_report",
    "home_region_refusal",
    "key_schema_problems",
    "prepare_table",
    "replica_warning",
    "table_warnings",
]

VIEW_TYPE: Final = "NEW_AND_OLD_IMAGES"

REGION_PATTERN: Final = r"[a-z]{2}(-[a-z]+)+-[0-9]+"
"""An AWS Region name (``eu-west-1``, ``us-gov-west-1``), matched whole: what the SAM template's
``HomeRegion``, the CDK construct's ``home_region`` and ``AGGREGATOR_HOME_REGION`` accept."""

GLOBAL_TABLES_DOC: Final = "docs/deployment/global-tables.md"
"""The documentation page on global tables, named by the refusals and warnings below."""


class HomeRegionError(ConfigError):
    """The handler runs where it must not count: outside the table's home Region, or on a
    global table with no home Region set (:func:`home_region_refusal`)."""


def home_region_refusal(
    table_name: str,
    *,
    region: str | None,
    home_region: str | None,
) -> str | None:
    """Why the handler must not count here, or ``None`` when it may.

    Each replica of a global table has its own stream, which carries every write to the table,
    the replicated ones included (Developer Guide, "Global tables: How it works", "Streams and
    transactions with global tables":
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/V2globaltables_HowItWorks.html),
    and a stream record does not tell where the write was made (``awsRegion`` is "the region in
    which the GetRecords request was received": DynamoDB Streams API Reference, ``Record``).
    So one Region counts, the home Region, and the handler refuses when ``home_region`` is set
    and ``region`` (the function's, ``AWS_REGION``) is another; decided before any request.
    A table with replicas and no home Region is not refused (a deployment that subscribes one
    Region only was right before the parameter existed, and a refusal would lose its records):
    :func:`unhomed_replicas_warning` says it instead.

    Returns
    -------
    str or None
        One line naming the Regions and the fix.
    """
    if home_region and region and region != home_region:
        return (
            f"not counting: table {table_name!r} is counted in its home Region {home_region} "
            f"(AGGREGATOR_HOME_REGION) and this function runs in {region}; every replica's "
            f"stream carries every write, so counting here would count each write twice. Fix: "
            f"remove the stream subscription in {region} (deploy the stack here with "
            f"HomeRegion={home_region}, or the CDK construct with home_region, which creates "
            "none). Meanwhile Lambda retries each batch, then sends it to the on-failure queue; "
            f"{home_region} counts these records from its own stream (see {GLOBAL_TABLES_DOC})"
        )
    return None


def unhomed_replicas_warning(
    table_name: str, *, region: str | None, description: Mapping[str, Any] | None
) -> str | None:
    """The line the handler logs (as an error, once per execution environment) when
    ``description`` (``DescribeTable``'s ``Table``) lists ``Replicas`` (Developer Guide,
    "Determining the version of a global table":
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/V2globaltables_versions.html)
    and no home Region is set: it keeps counting, since it cannot tell whether it is the only
    Region that does; ``None`` for a table without replicas."""
    replicas = replica_regions(description or {})
    if not replicas:
        return None
    here = f" in {region}" if region else ""
    return (
        f"counting table {table_name!r}{here}, a global table with replicas in "
        f"{', '.join(replicas)}, without a home Region: every replica's stream carries every "
        "write, so if another Region counts too, each write is counted twice. Fix: deploy the "
        "stack in every Region with HomeRegion=<the Region that counts> (CDK: home_region; the "
        f"function's AGGREGATOR_HOME_REGION) (see {GLOBAL_TABLES_DOC})"
    )


@dataclass(frozen=True, slots=True)
class TableProblem:
    """One mismatch between a table and a layout.

    Attributes
    ----------
    part
        What is concerned: ``partition key``, ``sort key``, ``stream``, ``leaderboard index``,
        ``ttl`` or ``table``.
    problem
        What is wrong, one line.
    fix
        How to fix it, one line (an AWS CLI command when there is one).
    preparable
        Whether :func:`prepare_table` fixes it.
    """

    part: str
    problem: str
    fix: str
    preparable: bool = False

    def line(self) -> str:
        """``<part>: <problem>; fix: <fix>``."""
        return f"{self.part}: {self.problem}; fix: {self.fix}"


def key_schema_problems(
    table_name: str, description: Mapping[str, Any], layout: TableLayout
) -> list[TableProblem]:
    """The mismatches between a table's keys and ``layout``'s (module docstring), read from
    ``description``: ``DescribeTable``'s ``Table``, or any mapping with its
    ``AttributeDefinitions`` and ``KeySchema`` (a CloudFormation ``AWS::DynamoDB::Table``'s
    properties have the same shape)."""
    types = {
        a["AttributeName"]: a["AttributeType"] for a in description.get("AttributeDefinitions", [])
    }
    keys = {k["KeyType"]: k["AttributeName"] for k in description.get("KeySchema", [])}
    problems = []
    for part, key_type, expected, field in (
        ("partition key", "HASH", layout.partition_key, "partition_key"),
        ("sort key", "RANGE", layout.sort_key, "sort_key"),
    ):
        actual = keys.get(key_type)
        if expected is None:
            if actual is not None:
                problems.append(
                    TableProblem(
                        part,
                        f"the table has sort key {actual!r}, the layout declares none",
                        f"declare it in the rules: table: {{{field}: {actual}}}",
                    )
                )
            continue
        if actual is None:
            problems.append(
                TableProblem(
                    part,
                    f"table {table_name!r} has no {part}; the layout's is {expected!r}",
                    f"declare it in the rules: table: {{{field}: null}}",
                )
            )
            continue
        if actual != expected:
            problems.append(
                TableProblem(
                    part,
                    f"the table's {part} is {actual!r}, the layout's is {expected!r}",
                    f"declare it in the rules: table: {{{field}: {actual}}}",
                )
            )
        if types.get(actual, "S") != "S":
            problems.append(
                TableProblem(
                    part,
                    f"{actual!r} is of type {types[actual]}; the framework writes string keys "
                    "(S) under its reserved partitions",
                    "attach the aggregator to a table whose keys are strings",
                )
            )
    return problems


def check_key_schema(
    client: DynamoDBClient, table_name: str, layout: TableLayout
) -> list[TableProblem]:
    """The key-schema part of :func:`check_table` (one ``DescribeTable``): what the handler
    checks at cold start, so a table it cannot write correctly is refused before any batch."""
    description = requests_of(client).send("describe_table", TableName=table_name)["Table"]
    return key_schema_problems(table_name, description, layout)


def check_table(client: DynamoDBClient, table_name: str, rules: RuleSet) -> list[TableProblem]:
    """Every mismatch between the table and what ``rules`` need (module docstring).

    Raises
    ------
    aggregator.dynamodb.errors.AwsError
        When the table does not exist (``ResourceNotFoundException``) or cannot be described.
    """
    return check_table_report(client, table_name, rules)[0]


def check_table_report(
    client: DynamoDBClient, table_name: str, rules: RuleSet
) -> tuple[list[TableProblem], list[str]]:
    """``(problems, warnings)``: :func:`check_table`'s problems, and what fits the rules but
    limits or endangers the aggregates (:func:`table_warnings`), from one ``DescribeTable``.

    Raises
    ------
    aggregator.dynamodb.errors.AwsError
        As :func:`check_table`.
    """
    layout = rules.layout
    description = requests_of(client).send("describe_table", TableName=table_name)["Table"]
    problems = key_schema_problems(table_name, description, layout)

    stream: Mapping[str, Any] = description.get("StreamSpecification") or {}
    if not stream.get("StreamEnabled"):
        problems.append(
            TableProblem(
                "stream",
                "the table has no stream",
                f"aws dynamodb update-table --table-name {table_name} --stream-specification "
                f"StreamEnabled=true,StreamViewType={VIEW_TYPE}",
                preparable=True,
            )
        )
    elif stream.get("StreamViewType") != VIEW_TYPE:
        problems.append(
            TableProblem(
                "stream",
                f"the stream's view type is {stream.get('StreamViewType')}, deltas need "
                f"{VIEW_TYPE}",
                "a view type cannot change in place: disable the stream and enable it with "
                f"{VIEW_TYPE} (a new stream ARN; its other consumers must move too)",
            )
        )

    if layout.sort_key is None and not any(p.part == "partition key" for p in problems):
        problems += _index_problems(
            table_name, description, _index_spec(layout, "collection index")
        )
    if any(r.leaderboard for r in rules):
        problems += _index_problems(
            table_name, description, _index_spec(layout, "leaderboard index")
        )

    # time buckets with a retention, value items whose count fell to zero and target rules'
    # ledger items at zero (aggregator.dynamodb.ledger_carries) expire by TTL
    if any(
        (r.window is not None and r.window.retention is not None)
        or r.kind.per_value
        or r.target is not None
        for r in rules
    ):
        ttl = (
            requests_of(client)
            .send("describe_time_to_live", TableName=table_name)
            .get("TimeToLiveDescription", {})
        )
        status, attribute = ttl.get("TimeToLiveStatus"), ttl.get("AttributeName")
        if status in ("ENABLED", "ENABLING") and attribute != layout.ttl_attribute:
            problems.append(
                TableProblem(
                    "ttl",
                    f"TTL is on {attribute!r}, the layout's TTL attribute is "
                    f"{layout.ttl_attribute!r} (windowed rules expire their buckets with it, "
                    "min/max/distribution rules their empty value items, target rules their "
                    "empty ledger items)",
                    f"declare it in the rules: table: {{ttl_attribute: {attribute}}}",
                )
            )
        elif status not in ("ENABLED", "ENABLING"):
            problems.append(
                TableProblem(
                    "ttl",
                    f"TTL is {(status or 'DISABLED').lower()}; windowed rules with a retention "
                    "expire their buckets through it, min/max/distribution rules their empty "
                    "value items, target rules their empty ledger items",
                    f"aws dynamodb update-time-to-live --table-name {table_name} "
                    f"--time-to-live-specification Enabled=true,AttributeName="
                    f"{layout.ttl_attribute}",
                    preparable=status != "DISABLING",
                )
            )
    return problems, table_warnings(description, layout)


def table_warnings(description: Mapping[str, Any], layout: TableLayout) -> list[str]:
    """What a table description shows that fits the rules but limits or endangers the
    aggregates, one line each (``DescribeTable``'s ``Table``):

    - a local secondary index: every item collection is then capped at 10 GB (API Reference,
      ``TableDescription.LocalSecondaryIndexes``: "the amount of data within a given item
      collection cannot exceed 10 GB"), and the aggregates' collection grows with the number of
      keys; adaptive capacity does not split an item collection across partitions on such a
      table (Developer Guide, "Burst and adaptive capacity");
    - replicas (a global table): each replica's stream carries every write, the replicated ones
      included, and concurrent updates of one item in two Regions resolve last writer wins
      (Developer Guide, "Global tables: How it works"), so a handler in more than one Region
      counts each write again, and an aggregate replicated from another Region can overwrite
      increments made here.
    """
    warnings: list[str] = []
    local_indexes = [
        i.get("IndexName", "?") for i in description.get("LocalSecondaryIndexes") or []
    ]
    if local_indexes:
        keyed = (
            f"under {layout.partition_key} = {layout.aggregates_pk}"
            if layout.sort_key is not None
            else "of each key"
        )
        warnings.append(
            f"local secondary index {', '.join(local_indexes)}: with one, every item collection "
            f"is capped at 10 GB, and the aggregates' collection ({keyed}) grows with the number "
            "of keys; DynamoDB will not split an item collection across partitions for heat "
            "either"
        )
    replicas = replica_warning(description)
    if replicas is not None:
        warnings.append(replicas)
    return warnings


def replica_regions(description: Mapping[str, Any]) -> list[str]:
    """The Regions of a global table's replicas in ``DescribeTable``'s ``Table`` (``Replicas``;
    empty for a table without)."""
    return [r.get("RegionName", "?") for r in description.get("Replicas") or []]


def replica_warning(description: Mapping[str, Any]) -> str | None:
    """:func:`table_warnings`' line about a global table's replicas, or ``None`` for a table
    without (``DescribeTable``'s ``Table``): it names the home-Region setting and
    :data:`GLOBAL_TABLES_DOC`."""
    replicas = replica_regions(description)
    if not replicas:
        return None
    version = description.get("GlobalTableVersion")
    return (
        f"global table{f' (version {version})' if version else ''} with replicas in "
        f"{', '.join(replicas)}: every replica's stream carries every write, the replicated "
        "ones included, so exactly one Region may count: deploy the stack in every Region with "
        "the same HomeRegion parameter (CDK: home_region), which subscribes the function in "
        "that Region only (a second Region would count every write again), and write to the "
        "aggregates from that Region only (replication is last writer wins per item); see "
        f"{GLOBAL_TABLES_DOC}"
    )


@dataclass(frozen=True, slots=True)
class _IndexSpec:
    part: str  # "leaderboard index" / "collection index"
    purpose: str
    create: dict[str, Any]  # the Create body (tablecheck adds throughput where needed)
    types: dict[str, ScalarAttributeTypeType]  # attribute name -> type, in key order (HASH, RANGE)
    renamable: str  # the table: fields naming it


@dataclass(frozen=True, slots=True)
class _Index:
    purpose: str
    build: Callable[[TableLayout], dict[str, Any]]  # the Create body (:mod:`.table`)
    key_types: tuple[ScalarAttributeTypeType, ScalarAttributeTypeType]  # (HASH, RANGE)
    renamable: str  # the table: fields naming it


_INDEXES: Final = {
    "leaderboard index": _Index(
        "leaderboard rules need it for top-N",
        leaderboard_index,
        ("S", "N"),
        "leaderboard_index / leaderboard_attribute / value_attribute",
    ),
    "collection index": _Index(
        "a table without a sort key lists the framework's items through it",
        collection_index,
        ("S", "S"),
        "collection_index / collection_attribute",
    ),
}


def _index_spec(layout: TableLayout, part: str) -> _IndexSpec:
    """The index ``part`` names (a key of :data:`_INDEXES`) on ``layout``: its attributes are
    those of its key schema."""
    index = _INDEXES[part]
    create = index.build(layout)
    names = [key["AttributeName"] for key in create["KeySchema"]]
    types = dict(zip(names, index.key_types, strict=True))
    return _IndexSpec(part, index.purpose, create, types, index.renamable)


def _index_create(
    description: Mapping[str, Any], spec: _IndexSpec
) -> CreateGlobalSecondaryIndexActionTypeDef:
    create = dict(spec.create)
    billing = (description.get("BillingModeSummary") or {}).get("BillingMode")
    throughput = description.get("ProvisionedThroughput") or {}
    if billing != "PAY_PER_REQUEST" and throughput.get("WriteCapacityUnits"):
        create["ProvisionedThroughput"] = {
            "ReadCapacityUnits": throughput["ReadCapacityUnits"],
            "WriteCapacityUnits": throughput["WriteCapacityUnits"],
        }
    return cast("CreateGlobalSecondaryIndexActionTypeDef", create)


def _index_problems(
    table_name: str, description: Mapping[str, Any], spec: _IndexSpec
) -> list[TableProblem]:
    name = spec.create["IndexName"]
    indexes = {i["IndexName"]: i for i in description.get("GlobalSecondaryIndexes", [])}
    index = indexes.get(name)
    types = {
        a["AttributeName"]: a["AttributeType"] for a in description.get("AttributeDefinitions", [])
    }
    clash = [
        f"{attribute!r} is defined as {types[attribute]}"
        for attribute, wanted in spec.types.items()
        if attribute in types and types[attribute] != wanted
    ]
    if index is None:
        if clash:
            return [
                TableProblem(
                    spec.part,
                    f"missing, and {', '.join(clash)} in the table",
                    f"declare other {spec.renamable} names in the table: section",
                )
            ]
        definitions = " ".join(
            f"AttributeName={attribute},AttributeType={kind}"
            for attribute, kind in spec.types.items()
        )
        return [
            TableProblem(
                spec.part,
                f"no index {name!r} ({spec.purpose})",
                f"aws dynamodb update-table --table-name {table_name} --attribute-definitions "
                f"{definitions} --global-secondary-index-updates "
                f"'{json.dumps([{'Create': spec.create}])}'",
                preparable=True,
            )
        ]
    keys = {k["KeyType"]: k["AttributeName"] for k in index.get("KeySchema", [])}
    wanted = {k["KeyType"]: k["AttributeName"] for k in spec.create["KeySchema"]}
    status = index.get("IndexStatus", "ACTIVE")
    if keys == wanted and not clash and status != "ACTIVE":
        return [
            TableProblem(
                spec.part,
                f"index {name!r} is {status}, not ACTIVE yet",
                "wait until it is ACTIVE (prepare-table waits), then check again",
            )
        ]
    if keys != wanted or clash:
        return [
            TableProblem(
                spec.part,
                f"index {name!r} is keyed {keys}, the layout needs {wanted}"
                + (f" ({', '.join(clash)})" if clash else ""),
                f"declare another {spec.part.split()[0]}_index name in the table: section "
                "(prepare-table then creates it)",
            )
        ]
    return []


def prepare_table(
    client: DynamoDBClient,
    table_name: str,
    rules: RuleSet,
    *,
    wait: bool = True,
    report: Callable[[str], None] = lambda line: None,
    poll_seconds: float = 2.0,
) -> tuple[list[str], list[TableProblem]]:
    """Apply the fixes :func:`check_table` marks preparable, one at a time.

    Parameters
    ----------
    wait
        Wait until the table (and a new index) is ``ACTIVE`` after the last change; between
        changes it always waits (DynamoDB refuses an update while the table is updating).
    report
        Called with one line per change made, as it is made.

    Returns
    -------
    tuple
        ``(changes made, problems left)``: what was changed, one line each, and the problems
        that need the owner (or a later run). A table whose keys do not fit the layout (which
        no change can fix) is not changed at all: ``([], key problems)``.

    Raises
    ------
    aggregator.dynamodb.errors.AwsError
        When DynamoDB refuses a change.
    """
    changes: list[str] = []
    keys = check_key_schema(client, table_name, rules.layout)
    if keys:
        # keys cannot be changed: a table that can never fit is left as it is
        return changes, keys
    for _ in range(5):  # at most one change per part; each pass re-reads the table
        todo = [p for p in check_table(client, table_name, rules) if p.preparable]
        if not todo:
            break
        # DynamoDB refuses an UpdateTable while the table is UPDATING: always wait before one
        if changes or _status(client, table_name) != "ACTIVE":
            _wait_active(client, table_name, rules.layout, poll_seconds)
        change = _apply(client, table_name, rules.layout, todo[0])
        changes.append(change)
        report(change)
    if wait and changes:
        _wait_active(client, table_name, rules.layout, poll_seconds)
    return changes, [p for p in check_table(client, table_name, rules)]


def _status(client: DynamoDBClient, table_name: str) -> str:
    return str(
        requests_of(client).send("describe_table", TableName=table_name)["Table"].get("TableStatus")
    )


def _apply(
    client: DynamoDBClient, table_name: str, layout: TableLayout, problem: TableProblem
) -> str:
    if problem.part == "stream":
        requests_of(client).send(
            "update_table",
            TableName=table_name,
            StreamSpecification={"StreamEnabled": True, "StreamViewType": VIEW_TYPE},
        )
        return f"enabled the stream ({VIEW_TYPE})"
    if problem.part in _INDEXES:
        spec = _index_spec(layout, problem.part)
        description = requests_of(client).send("describe_table", TableName=table_name)["Table"]
        requests_of(client).send(
            "update_table",
            TableName=table_name,
            AttributeDefinitions=[
                {"AttributeName": attribute, "AttributeType": kind}
                for attribute, kind in spec.types.items()
            ],
            GlobalSecondaryIndexUpdates=[{"Create": _index_create(description, spec)}],
        )
        described = ", ".join(f"{attribute} {kind}" for attribute, kind in spec.types.items())
        return f"created index {spec.create['IndexName']!r} ({described}, keys only)"
    assert problem.part == "ttl"
    requests_of(client).send(
        "update_time_to_live",
        TableName=table_name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": layout.ttl_attribute},
    )
    return f"enabled TTL on {layout.ttl_attribute!r}"


def _wait_active(
    client: DynamoDBClient, table_name: str, layout: TableLayout, poll_seconds: float
) -> None:
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        table = requests_of(client).send("describe_table", TableName=table_name)["Table"]
        indexes = table.get("GlobalSecondaryIndexes", [])
        if table.get("TableStatus") == "ACTIVE" and all(
            i.get("IndexStatus") == "ACTIVE" for i in indexes
        ):
            return
        time.sleep(poll_seconds)
