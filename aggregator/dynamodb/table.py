"""Create the table layout the framework expects (for local use, tests and the demo).

In AWS, ``template.yaml`` creates the same table. Shape, with the default layout: ``pk`` (S,
HASH) / ``sk`` (S, RANGE), stream ``NEW_AND_OLD_IMAGES``, and the sparse ``leaderboard`` GSI
(``lb`` S HASH, ``value`` N RANGE, KEYS_ONLY projection) used for top-N queries; a layout
without a sort key adds the collection GSI (:mod:`aggregator.core.layout`). TTL is enabled on
``ttl`` where the endpoint supports it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.text import quote
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.errors import wrap_error
from aggregator.dynamodb.manifest import Manifest

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


__all__ = [
    "TABLE_NAME_RULE",
    "NoStreamError",
    "collection_index",
    "create_table",
    "leaderboard_index",
    "table_definition",
    "table_stream_arn",
    "validate_table_name",
]

TABLE_NAME_RULE = "3 to 255 characters from a-z, A-Z, 0-9, '_', '-' and '.'"
"""DynamoDB's rule for table names (DynamoDB Developer Guide, "Supported data types and naming
rules in Amazon DynamoDB", Naming rules)."""

_TABLE_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{3,255}")
_TABLE_NAME_CHAR_RE = re.compile(r"[A-Za-z0-9_.-]")
_TABLE_ARN_RE = re.compile(r"arn:aws[a-z-]*:dynamodb:[a-z0-9-]+:[0-9]{12}:table/(?P<name>.*)")


class NoStreamError(ConfigError, ValueError):
    """The table has no stream enabled (also a ``ValueError``, which it used to be)."""


def validate_table_name(name: str) -> None:
    """Check ``name`` against DynamoDB's naming rules before any request is made.

    A table name has 3 to 255 characters from ``a-z``, ``A-Z``, ``0-9``, ``_``, ``-`` and ``.``
    (DynamoDB Developer Guide, "Supported data types and naming rules in Amazon DynamoDB"). The
    table's ARN (``arn:aws:dynamodb:<region>:<account>:table/<name>``), which DynamoDB accepts in
    place of the name, passes when its name part does.

    Raises
    ------
    ConfigError
        When ``name`` breaks the rules; the message quotes a bounded prefix of the name and says
        what is wrong (length, or which characters are not allowed).
    """
    arn = _TABLE_ARN_RE.fullmatch(name)
    plain = arn.group("name") if arn else name
    if _TABLE_NAME_RE.fullmatch(plain):
        return
    part = "the ARN's table name " if arn else ""
    if not 3 <= len(plain) <= 255:
        problem = f"{part}has {len(plain)} character{'' if len(plain) == 1 else 's'}"
    else:
        bad = sorted({c for c in plain if not _TABLE_NAME_CHAR_RE.fullmatch(c)})
        shown = ", ".join(repr(c) for c in bad[:10]) + (", …" if len(bad) > 10 else "")
        problem = f"{part}has {shown}, which {'is' if len(bad) == 1 else 'are'} not allowed"
    raise ConfigError(
        f"invalid DynamoDB table name {quote(name)}: {problem}; use {TABLE_NAME_RULE}"
    )


def table_definition(layout: TableLayout) -> dict[str, Any]:
    """``CreateTable`` arguments (all but ``TableName``) of a table for ``layout``: its keys
    (strings), the sparse leaderboard index and, without a sort key, the collection index (both
    keys only), on-demand capacity and a ``NEW_AND_OLD_IMAGES`` stream.

    The same definition renders the template's table (:mod:`aggregator.cli.template`)."""
    attributes = [{"AttributeName": layout.partition_key, "AttributeType": "S"}]
    keys = [{"AttributeName": layout.partition_key, "KeyType": "HASH"}]
    if layout.sort_key is not None:
        attributes.append({"AttributeName": layout.sort_key, "AttributeType": "S"})
        keys.append({"AttributeName": layout.sort_key, "KeyType": "RANGE"})
    attributes += [
        {"AttributeName": layout.leaderboard_attribute, "AttributeType": "S"},
        {"AttributeName": layout.value_attribute, "AttributeType": "N"},
    ]
    indexes = [leaderboard_index(layout)]
    if layout.sort_key is None:
        attributes.append({"AttributeName": layout.collection_attribute, "AttributeType": "S"})
        indexes.append(collection_index(layout))
    return {
        "AttributeDefinitions": attributes,
        "KeySchema": keys,
        "GlobalSecondaryIndexes": indexes,
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }


def leaderboard_index(layout: TableLayout) -> dict[str, Any]:
    """The sparse leaderboard GSI (``Create`` body): only leaderboard aggregate items carry the
    leaderboard attribute; top-N is one ``Query`` in descending value order."""
    return {
        "IndexName": layout.leaderboard_index,
        "KeySchema": [
            {"AttributeName": layout.leaderboard_attribute, "KeyType": "HASH"},
            {"AttributeName": layout.value_attribute, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }


def collection_index(layout: TableLayout) -> dict[str, Any]:
    """The collection GSI of a table without a sort key (``Create`` body): partition key the
    collection attribute, sort key the table's partition key, keys only
    (:mod:`aggregator.core.layout`)."""
    return {
        "IndexName": layout.collection_index,
        "KeySchema": [
            {"AttributeName": layout.collection_attribute, "KeyType": "HASH"},
            {"AttributeName": layout.partition_key, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }


def create_table(
    client: DynamoDBClient,
    table_name: str,
    *,
    layout: TableLayout = DEFAULT_LAYOUT,
    exist_ok: bool = True,
) -> str:
    """Create ``table_name`` with stream, GSI and TTL, wait until it is active.

    A table created here gets its stream in the same ``CreateTable`` request, so the stream holds
    every write the table will ever have: that is recorded in the rule manifest
    (:meth:`~aggregator.dynamodb.manifest.Manifest.record_genesis`), and rules deployed on the
    table turn active without a backfill (:mod:`aggregator.core.lifecycle`); so is the layout's
    ``control_partitions`` (:mod:`aggregator.dynamodb.control`). An existing table
    (``exist_ok``) is left as it is.

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table_name
        3 to 255 characters (DynamoDB naming rules).
    exist_ok
        Return the existing table's stream ARN instead of failing when it exists.

    Returns
    -------
    str
        The table's latest stream ARN.

    Raises
    ------
    ConfigError
        When ``table_name`` breaks DynamoDB's naming rules (see :func:`validate_table_name`);
        checked before any request is sent.
    aggregator.dynamodb.errors.AwsRequestError
        For any error other than an existing table with ``exist_ok``.
    aggregator.dynamodb.errors.AwsConnectionError
        When the endpoint cannot be reached, the waiter gives up, or the SDK is misconfigured
        (no region, no credentials).
    """
    validate_table_name(table_name)
    created = True
    try:
        requests_of(client).send("create_table", TableName=table_name, **table_definition(layout))
    except ClientError as exc:
        if not (exist_ok and exc.response["Error"]["Code"] == "ResourceInUseException"):
            raise
        created = False
    try:
        requests_of(client).client.get_waiter("table_exists").wait(
            TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
        )
    except (ClientError, BotoCoreError) as exc:  # WaiterError: the table never became ACTIVE
        raise wrap_error(exc, "DescribeTable") from exc
    try:
        requests_of(client).send(
            "update_time_to_live",
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": layout.ttl_attribute},
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ValidationException":  # already enabled
            raise
    arn = table_stream_arn(client, table_name)
    if created:
        # the stream was created with the table: it holds every write the table will have, so
        # rules deployed on it need no backfill (aggregator.core.lifecycle, "Rules that need
        # no backfill"); an existing table proves nothing
        # and where its control items go (aggregator.dynamodb.control), in the same write
        Manifest(client, table_name, layout).record_genesis(
            arn, "create-table", control_partitions=layout.control_partitions
        )
    return arn


def table_stream_arn(client: DynamoDBClient, table_name: str) -> str:
    """The table's ``LatestStreamArn``.

    Raises
    ------
    NoStreamError
        When the table has no stream enabled (a ``ConfigError`` and a ``ValueError``).
    aggregator.dynamodb.errors.AwsError
        When ``DescribeTable`` fails (e.g. ``ResourceNotFoundException`` for a missing table).
    """
    description = requests_of(client).send("describe_table", TableName=table_name)["Table"]
    arn: str | None = description.get("LatestStreamArn")
    if not arn:
        raise NoStreamError(
            f"table {quote(table_name)} has no stream; enable it with view type "
            "NEW_AND_OLD_IMAGES (aggregator create-table and template.yaml do)"
        )
    return arn
