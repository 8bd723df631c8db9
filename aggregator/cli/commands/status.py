"""``status``: every rule's generations and states, which generation readers use, fences,
backfill progress, dead letters, and the next command (:mod:`aggregator.operations.status`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from aggregator.cli.options import RuleSources, definitions_option, endpoint_option, table_option
from aggregator.cli.output import console

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from aggregator.core.rules import RuleSet
    from aggregator.operations.status import RuleReport


def _state_cell(report: RuleReport) -> str:
    parts = []
    for g in report.generations:
        text = f"{g.generation}: {g.status}"
        if g.backfill is not None:
            text += f" ({g.backfill.text()})"
        if g.unfenced:
            text += " (unfenced)"
        if g.index_stale:
            text += " (leaderboard index " + ("incomplete)" if not g.leaderboard else "stale)")
        parts.append(text)
    return "; ".join(parts) or "-"


def _auto(rules: RuleSet) -> bool:
    return any(r.auto_shards for r in rules)


def _open_shards(
    client: DynamoDBClient, table_name: str, endpoint_url: str | None
) -> list[str] | None:
    """The ids of the table's stream's open shards (``None`` when it has no stream)."""
    from aggregator.cli import clients
    from aggregator.dynamodb.streams import open_shard_ids
    from aggregator.dynamodb.table import NoStreamError, table_stream_arn

    try:
        arn = table_stream_arn(client, table_name)
    except NoStreamError:
        return None
    return open_shard_ids(clients.make_client("dynamodbstreams", endpoint_url), arn)


@click.command("status", short_help="Show each rule's state and the next command to run.")
@definitions_option
@table_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON")
@endpoint_option
def status_cmd(
    definitions: RuleSources, table_name: str, as_json: bool, endpoint_url: str | None
) -> None:
    """Show each rule's state on the table: its definition (built, new, changed, removed), each
    generation's state (requested, pending, backfilling, active, retired, dropping) with the
    shards fenced and a backfill's progress, the generation readers use, its dead letters, and
    the next command to run."""
    from rich.table import Table
    from rich.text import Text

    from aggregator.cli.tables import rules_for_table
    from aggregator.operations.status import table_status

    client, rules = rules_for_table(table_name, definitions, endpoint_url)
    open_shards = _open_shards(client, table_name, endpoint_url) if _auto(rules) else None
    status = table_status(rules, client, table_name, open_shards=open_shards)
    if as_json:
        click.echo(json.dumps(status.to_json(), indent=2))
        return
    table = Table(title=f"rules on {table_name}", title_justify="left")
    for column in ("rule", "definition", "generations", "readers", "fences", "dead letters"):
        table.add_column(
            column,
            justify="right" if column == "dead letters" else "left",
            no_wrap=column == "rule",
        )
    table.add_column("next")
    for r in status.rules:
        fences = ", ".join(f"{g.generation}: {g.fenced_shards}" for g in r.generations) or "-"
        builds = f" (builds {r.builds})" if r.builds not in (None, r.serving) else ""
        table.add_row(
            Text(r.rule),
            r.definition + builds,
            Text(_state_cell(r)),
            str(r.serving),
            fences,
            str(r.dead_letters),
            Text(r.next or "-"),
        )
    console.print(table)
    for r in status.rules:
        if r.auto_routing is not None:
            a = r.auto_routing
            console.print(
                Text(
                    f"write_shards auto: {r.rule}: {a.on_partials} of {a.shards} "
                    f"{'open ' if open_shards is not None else ''}shard(s) write its partials now"
                    + ("" if a.shards else " (no shard has processed a record of it yet)")
                )
            )
    for rule, count in status.other_dead_letters.items():
        console.print(
            Text(
                f"{count} dead letter(s) of rule {rule!r}, which neither the rule files nor "
                "the table's manifest name"
            )
        )
