"""``local`` (install and run DynamoDB Local) and ``create-table``."""

from __future__ import annotations

import time
from pathlib import Path

import click

from aggregator.cli import clients
from aggregator.cli.options import (
    RuleSources,
    check_table_name,
    endpoint_option,
    layout_definitions_option,
    layout_of,
    table_option,
)
from aggregator.cli.output import console


@click.command(short_help="Run AWS's DynamoDB Local (installed on first use).")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="Port (default: a free one)"
)
@click.option(
    "--install-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where DynamoDB Local is cached [env AGGREGATOR_DYNAMODB_LOCAL_DIR]",
)
@click.option("--install-only", is_flag=True, help="Install DynamoDB Local and exit")
@click.option(
    "--create-table",
    "table_name",
    default=None,
    callback=check_table_name,
    help="Also create this table (name checked before DynamoDB Local starts)",
)
@layout_definitions_option
def local(
    port: int | None,
    install_dir: Path | None,
    install_only: bool,
    table_name: str | None,
    definitions: RuleSources | None,
) -> None:
    """Install (first time) and run AWS's DynamoDB Local until interrupted (Ctrl-C).

    The server is stopped whenever the command ends, also when creating the table fails."""
    from aggregator.dev.local import DynamoDBLocal, ensure_installed

    layout = layout_of(definitions) if table_name else None  # checked before Java starts
    if install_only:
        path = ensure_installed(install_dir)
        console.print(f"DynamoDB Local installed in {path}")
        return
    with DynamoDBLocal(port=port, install_dir=install_dir) as db:
        if table_name and layout is not None:  # layout is set exactly when table_name is
            from aggregator.dynamodb.table import create_table

            create_table(
                clients.make_client("dynamodb", db.endpoint_url), table_name, layout=layout
            )
            console.print(f"created table {table_name}")
        console.print(f"DynamoDB Local listening on [bold]{db.endpoint_url}[/] (Ctrl-C stops it)")
        console.print(f"  export AGGREGATOR_ENDPOINT_URL={db.endpoint_url}")
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            console.print("stopping")


@click.command("create-table", short_help="Create a table ready for the rules.")
@table_option
@layout_definitions_option
@endpoint_option
def create_table_cmd(
    table_name: str, definitions: RuleSources | None, endpoint_url: str | None
) -> None:
    """Create a table with the layout's keys, stream (NEW_AND_OLD_IMAGES), leaderboard index
    and TTL."""
    from aggregator.dynamodb.table import create_table

    layout = layout_of(definitions)
    arn = create_table(clients.make_client("dynamodb", endpoint_url), table_name, layout=layout)
    console.print(
        f"table {table_name} ready; stream {arn}"
    )  # the consoles never wrap text: the ARN stays whole
