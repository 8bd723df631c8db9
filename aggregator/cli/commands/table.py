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


@click.command("move-control-items", short_help="Move control items to control_partitions.")
@definitions_option
@table_option
@endpoint_option
@click.option(
    "--subscription-stopped",
    is_flag=True,
    help="Confirm that no handler runs: the stream subscription is disabled (or `aggregator "
    "run` stopped) and no invocation is in flight.",
)
def move_control_items_cmd(
    definitions: RuleSources,
    table_name: str,
    endpoint_url: str | None,
    subscription_stopped: bool,
) -> None:
    """Move the table's control items (fences, routing items, top lists, floors, backfill
    records) to the partition key values of the definitions' control_partitions, and record
    the new number in the manifest.

    Stop the stream subscription first and pass --subscription-stopped: a running handler would
    keep writing where the old number puts them. While the move runs every handler, runner and
    command refuses to start; a stopped move is finished by running this again. Then deploy the
    definitions and start the subscription again.
    """
    from aggregator.cli.tables import rules_for_table
    from aggregator.core.exceptions import ConfigError
    from aggregator.operations.control_move import move_control_items

    if not subscription_stopped:
        raise ConfigError(
            "move-control-items: stop the stream subscription first (disable the event source "
            "mapping, or stop aggregator run; wait for invocations in flight), then pass "
            "--subscription-stopped"
        )
    client, rules = rules_for_table(table_name, definitions, endpoint_url)
    result = move_control_items(rules, client, table_name)
    values = f"{result.target} partition key value{'s' if result.target != 1 else ''}"
    if result.outcome == "unchanged":
        line = f"its control items are already under {values}; nothing to move"
    elif result.outcome == "recorded":
        line = f"no control items yet; {values} recorded for them"
    else:
        line = (
            f"{result.moved:,} control items moved from {result.source} to {values}; deploy "
            f"the definitions (control_partitions: {result.target}) and start the stream "
            "subscription again"
        )
    console.print(f"move-control-items {table_name}: {line}", highlight=False)
