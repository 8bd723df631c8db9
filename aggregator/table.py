"""Create the table layout the framework expects (for local use, tests and the demo).

In AWS, ``template.yaml`` creates the same table. Shape: ``pk`` (S, HASH) / ``sk`` (S, RANGE),
stream ``NEW_AND_OLD_IMAGES``, and the sparse ``leaderboard`` GSI (``lb`` S HASH, ``value`` N
RANGE, KEYS_ONLY projection) used for top-N queries. TTL is enabled on ``ttl`` where the endpoint
supports it.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from .config import DEFAULT_LAYOUT, TableLayout

__all__ = ["create_table", "table_stream_arn"]


def create_table(
    client: Any,
    table_name: str,
    *,
    layout: TableLayout = DEFAULT_LAYOUT,
    exist_ok: bool = True,
) -> str:
    """Create ``table_name`` with stream, GSI and TTL, wait until it is active.

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
    botocore.exceptions.ClientError
        For any error other than an existing table with ``exist_ok``.
    """
    try:
        client.create_table(
            TableName=table_name,
            AttributeDefinitions=[
                {"AttributeName": layout.partition_key, "AttributeType": "S"},
                {"AttributeName": layout.sort_key, "AttributeType": "S"},
                {"AttributeName": layout.leaderboard_attribute, "AttributeType": "S"},
                {"AttributeName": layout.value_attribute, "AttributeType": "N"},
            ],
            KeySchema=[
                {"AttributeName": layout.partition_key, "KeyType": "HASH"},
                {"AttributeName": layout.sort_key, "KeyType": "RANGE"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": layout.leaderboard_index,
                    "KeySchema": [
                        {"AttributeName": layout.leaderboard_attribute, "KeyType": "HASH"},
                        {"AttributeName": layout.value_attribute, "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
    except ClientError as exc:
        if not (exist_ok and exc.response["Error"]["Code"] == "ResourceInUseException"):
            raise
    client.get_waiter("table_exists").wait(
        TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    try:
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": layout.ttl_attribute},
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ValidationException":  # already enabled
            raise
    return table_stream_arn(client, table_name)


def table_stream_arn(client: Any, table_name: str) -> str:
    """The table's ``LatestStreamArn``.

    Raises
    ------
    ValueError
        When the table has no stream enabled.
    """
    description = client.describe_table(TableName=table_name)["Table"]
    arn = description.get("LatestStreamArn")
    if not arn:
        raise ValueError(f"table {table_name!r} has no stream; enable NEW_AND_OLD_IMAGES")
    return arn
