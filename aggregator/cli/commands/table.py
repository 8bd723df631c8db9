"""``check-table`` and ``prepare-table``: compare an existing table with what the rules need,
and apply the missing parts (stream, leaderboard index, TTL)."""

from __future__ import annotations

import click

from aggregator.cli import clients
from aggregator.cli.options import RuleSources, definitions_option, endpoint_option, table_option
from aggregator.cli.output import console, err_console


@click.command("check-table", short_help="Report what the table lacks for the rules.")
@table_option
@definitions_option
@endpoint_option
def check_table_cmd(table_name: str, definitions: RuleSources, endpoint_url: str | None) -> None:
    """Report every way the table differs from what the rules need (key names and types,
    stream view type, leaderboard index, TTL attribute), one line each with its fix; exit 1 if
    there is any. Warns (exit 0) about a local secondary index (10 GB item collections) and
    about a global table's replicas (one Region must run the aggregator)."""
    from aggregator.core.rules import load_rules
    from aggregator.dynamodb.tablecheck import check_table_report

    rules = load_rules(definitions)
    problems, warnings = check_table_report(
        clients.make_client("dynamodb", endpoint_url), table_name, rules
    )
    for warning in warnings:  # fits the rules, but limits or endangers the aggregates
        err_console.print(f"warning: {warning}", highlight=False, markup=False)
    layout = rules.layout
    if not problems:
        console.print(
            f"table {table_name} fits the rules in {definitions}: "
            + (
                f"keys {layout.partition_key}/{layout.sort_key} (S)"
                if layout.sort_key is not None
                else f"partition key {layout.partition_key} (S), index {layout.collection_index}"
            )
            + ", stream NEW_AND_OLD_IMAGES"
            + (f", index {layout.leaderboard_index}" if any(r.leaderboard for r in rules) else "")
            + (
                f", TTL on {layout.ttl_attribute}"
                if any(r.window is not None and r.window.retention for r in rules)
                else ""
            ),
            highlight=False,
        )
        return
    for problem in problems:
        line = problem.line()
        if endpoint_url:  # the fixes go to the same endpoint (DynamoDB Local)
            line = line.replace("aws dynamodb ", f"aws dynamodb --endpoint-url {endpoint_url} ")
        err_console.print(f"problem: {line}", highlight=False, markup=False)
    fixable = sum(p.preparable for p in problems)
    endpoint = f" --endpoint-url {endpoint_url}" if endpoint_url else ""
    err_console.print(
        f"{len(problems)} problem(s); `aggregator prepare-table --table {table_name} "
        f"{definitions.options()}{endpoint}` fixes {fixable} of them",
        highlight=False,
        markup=False,
    )
    raise SystemExit(1)


@click.command("prepare-table", short_help="Apply what the table lacks for the rules.")
@table_option
@definitions_option
@endpoint_option
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait for the table (and a new index) to be ACTIVE after the last change (it always "
    "waits between changes)",
)
def prepare_table_cmd(
    table_name: str, definitions: RuleSources, endpoint_url: str | None, wait: bool
) -> None:
    """Apply what the table lacks for the rules: enable the stream (NEW_AND_OLD_IMAGES), create
    the leaderboard index, enable TTL. Idempotent; prints each change; never disables or
    replaces anything (what it cannot fix is reported, exit 1)."""
    from aggregator.core.rules import load_rules
    from aggregator.dynamodb.tablecheck import prepare_table

    rules = load_rules(definitions)
    changes, left = prepare_table(
        clients.make_client("dynamodb", endpoint_url),
        table_name,
        rules,
        wait=wait,
        report=lambda line: console.print(f"changed: {line}", highlight=False, markup=False),
    )
    for problem in left:
        err_console.print(f"problem: {problem.line()}", highlight=False, markup=False)
    if left:
        raise SystemExit(1)
    console.print(
        f"table {table_name} fits the rules in {definitions}"
        + (f" ({len(changes)} change(s))" if changes else " (nothing to change)"),
        highlight=False,
    )
