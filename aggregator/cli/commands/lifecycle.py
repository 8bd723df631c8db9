"""``rebuild`` and ``drop-rule``: change a rule's definition on a live table, and delete the
aggregates of a removed rule or of the generations a rebuild retired
(:mod:`aggregator.operations.rebuild`, :mod:`aggregator.operations.drop`)."""

from __future__ import annotations

from typing import Any

import click

from aggregator.cli.commands.backfill import (
    LiveTable,
    backfill_options,
    backfill_progress,
    print_backfill_summary,
)
from aggregator.cli.options import (
    RuleSources,
    definitions_option,
    endpoint_option,
    seconds_option,
    table_option,
)
from aggregator.cli.output import console


@click.command("rebuild", short_help="Build a rule's new definition and switch readers to it.")
@click.argument("rule_name", metavar="RULE")
@definitions_option
@table_option
@backfill_options
@seconds_option(
    "--wait",
    "wait_seconds",
    default=3600.0,
    help="Seconds to wait for a handler (or `aggregator run`) to start with the new definition "
    "before giving up; 0 requests the new generation and returns.",
)
@endpoint_option
def rebuild_cmd(
    rule_name: str,
    definitions: RuleSources,
    table_name: str,
    backfill_options: dict[str, Any],
    wait_seconds: float,
    endpoint_url: str | None,
) -> None:
    """Build RULE's new definition (in the rule files) as a new generation beside the one
    readers use, then switch readers to it in one write.

    Run it before deploying the changed rule: it requests the generation, waits for the
    handler with the new definition to start counting it, backfills it from a scan while the
    table is written, and switches. Until the switch readers get the old generation's values
    as of the deployment. Run again to resume; the old generation stays until
    `aggregator drop-rule RULE`.
    """
    from aggregator.operations.rebuild import Rebuild, generation_label

    table = LiveTable.open(table_name, definitions, endpoint_url)
    announced = False

    def on_wait(target: str, waited: float) -> None:
        nonlocal announced
        if not announced:
            console.print(
                f"rebuild {rule_name}: {generation_label(target)} requested; deploy the "
                f"new definition now (the handler, or `aggregator run`); waiting up to "
                f"{wait_seconds:,.0f} s for it to start counting the new generation",
                highlight=False,
            )
            announced = True

    with backfill_progress(table.client, table_name) as on_page:
        rebuild = Rebuild(
            table.rules,
            table.table_stream(),
            rule_name,
            wait_seconds=wait_seconds,
            on_wait=on_wait,
            on_page=on_page,
            **backfill_options,
        )

        result = rebuild.run()
    if result.outcome == "unchanged":
        console.print(
            f"rebuild {rule_name}: readers already use {generation_label(result.serving)}, built "
            "with this definition; nothing to rebuild",
            highlight=False,
        )
        return
    if result.outcome == "deploy-first":
        console.print(
            f"rebuild {rule_name}: the leaderboard flag changed, but the handler still runs the "
            "old one (as it registered when it last started): deploy the rule files first, then "
            "run this again (it indexes the existing aggregates once the handler indexes what "
            "it updates)",
            highlight=False,
        )
        return
    if result.outcome == "reindexed":
        done = "written for" if table.rules.get(rule_name).leaderboard else "removed from"
        console.print(
            f"rebuild {rule_name}: {generation_label(result.serving)} is built with this "
            f"definition; leaderboard index entries {done} its {result.reindexed:,} existing "
            "aggregates",
            highlight=False,
        )
        return
    if result.outcome == "requested":
        console.print(
            f"rebuild {rule_name}: {generation_label(result.target)} requested; no handler has "
            "started with the new definition yet. Deploy it, then run this command again to "
            "backfill the generation and switch readers",
            highlight=False,
        )
        return
    if result.backfill is not None:
        print_backfill_summary(result.backfill, result.target)
    console.print(
        f"rebuild {rule_name}: readers switched from {generation_label(result.serving)} to "
        f"{generation_label(result.target)}; the old generation's aggregates stay until "
        f"`aggregator drop-rule {rule_name}`",
        highlight=False,
    )


@click.command("drop-rule", short_help="Delete the aggregates of a removed or retired rule.")
@click.argument("rule_name", metavar="RULE")
@definitions_option
@table_option
@endpoint_option
@click.option("--yes", is_flag=True, help="Delete without asking")
@click.option("--dry-run", is_flag=True, help="Say what would be deleted, delete nothing")
def drop_rule_cmd(
    rule_name: str,
    definitions: RuleSources,
    table_name: str,
    endpoint_url: str | None,
    yes: bool,
    dry_run: bool,
) -> None:
    """Delete RULE's aggregates, fences and manifest entries: every generation of a rule
    removed from the rule files, or the generations a rebuild retired of a rule still in them.

    Deploy the rule files without the rule first. It says what it will delete and asks (--yes
    does not ask; without a terminal to ask on, --yes is needed); --dry-run only says. Batched
    (BatchWriteItem, 25 keys a request); run again to resume a drop that was stopped.
    """
    import sys

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from aggregator.cli.tables import rules_for_table
    from aggregator.core.exceptions import ConfigError
    from aggregator.operations.drop import DropRule

    client, rules = rules_for_table(table_name, definitions, endpoint_url)
    if dry_run or not yes:
        planned = DropRule(rules, client, table_name, rule_name)
        counts = planned.count()
        attributes = sorted({g.target_attribute for g in planned.targets if g.target_attribute})
        plan = (
            f"drop-rule {rule_name}: "
            + ", ".join(f"{name} ({count:,} aggregate items)" for name, count in counts.items())
            + "".join(
                f", the attribute {a} (and the rule's checkpoint map entries) on every "
                "application item that holds it"
                for a in attributes
            )
            + f" on table {table_name}"
        )
        if dry_run:
            console.print(f"{plan}: would be deleted (dry run; nothing deleted)", highlight=False)
            return
        if not sys.stdin.isatty():
            raise ConfigError(f"{plan}: pass --yes to delete them (no terminal to ask on)")
        console.print(plan, highlight=False)
        click.confirm("delete them?", abort=True)
    with Progress(
        TextColumn(f"drop-rule {rule_name}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f} items deleted"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("delete", total=None)
        drop = DropRule(
            rules,
            client,
            table_name,
            rule_name,
            on_deleted=lambda n: progress.update(task, advance=n),
        )
        result = drop.run()
    console.print(
        f"drop-rule {rule_name}: {', '.join(result.generations)} dropped; "
        f"{result.items_deleted} aggregate items and {result.fences_removed} fences deleted"
        + (
            f"; {result.targets_cleared} items' target attribute removed"
            if result.targets_cleared
            else ""
        )
        + (
            f"; {result.floors_removed} leaderboard floors and top lists deleted"
            if result.floors_removed
            else ""
        ),
        highlight=False,
    )
