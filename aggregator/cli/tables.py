"""Rules loaded for a table: the commands that read or write a table first check that its keys
are the layout's (one ``DescribeTable``), so a rule set declared for another table fails with the
mismatch named, not with a DynamoDB validation error or an empty answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aggregator.cli import clients
from aggregator.cli.options import RuleSources
from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import RuleSet, load_rules

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def rules_for_table(
    table_name: str, definitions: RuleSources, endpoint_url: str | None
) -> tuple[DynamoDBClient, RuleSet]:
    """Load the rules, then (a bad rule file is reported before any AWS call) make the DynamoDB
    client and check the table's key schema against the rules' layout; returns
    ``(client, rules)``.

    Raises
    ------
    RuleError
        For invalid definitions.
    ConfigError
        When the table's keys differ from the layout (names or types), with
        ``aggregator check-table``'s description of each mismatch.
    """
    from aggregator.dynamodb.tablecheck import check_key_schema

    rules = load_rules(definitions)
    client = clients.make_client("dynamodb", endpoint_url)
    problems = check_key_schema(client, table_name, rules.layout)
    if problems:
        raise ConfigError(
            f"table {table_name!r} does not fit the layout of the rules in {definitions}: "
            + "; ".join(p.line() for p in problems)
        )
    return client, rules
