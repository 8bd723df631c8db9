"""``run``: process a table's stream locally with the same code as the Lambda handler."""

from __future__ import annotations

import click

from aggregator.cli import clients
from aggregator.cli.options import (
    RuleSources,
    _definitions_option,
    _endpoint_option,
    _mode_option,
    _table_option,
    _window_option,
)
from aggregator.cli.output import console


@click.command()
@_table_option
@_definitions_option
@_endpoint_option
@_mode_option
@_window_option
@click.option("--batch-size", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--follow/--until-caught-up",
    default=False,
    help="Keep polling, or stop once the stream is caught up (default)",
)
@click.option(
    "--resume/--from-start",
    default=True,
    show_default=True,
    help="Continue from the shard positions kept in the table, or read the stream from its start",
)
def run(
    table_name: str,
    definitions: RuleSources,
    endpoint_url: str | None,
    mode: str,
    window_seconds: int,
    batch_size: int,
    follow: bool,
    resume: bool,
) -> None:
    """Process the table's stream locally with the same code as the Lambda handler."""
    from aggregator.cli.tables import rules_for_table
    from aggregator.dynamodb.table import table_stream_arn
    from aggregator.runtime.processor import create_processor
    from aggregator.runtime.runner import PositionStore, StreamRunner

    client, rules = rules_for_table(table_name, definitions, endpoint_url)
    stream_arn = table_stream_arn(client, table_name)
    runner = StreamRunner(
        # the rule manifest and backfill fences, as in the Lambda handler; without tumbling
        # windows events name no shard, so pending rules are counted unfenced (and marked so:
        # a backfill of them refuses)
        create_processor(rules, client, table_name, mode=mode, lifecycle=True),
        clients.make_client("dynamodbstreams", endpoint_url),
        stream_arn,
        batch_size=batch_size,
        tumbling_window_seconds=window_seconds or None,
        positions=PositionStore(client, table_name, rules.layout) if resume else None,
    )
    stats = runner.run(until_caught_up=not follow)  # Ctrl-C: "interrupted", exit 130 (_Group)
    extras = ""
    if stats.derived_inputs:
        extras += f", {stats.derived_inputs} source aggregates read by derived rules"
    if stats.partial_inputs:
        extras += f", {stats.partial_inputs} partial aggregates added to their aggregate"
    if stats.expired:
        extras += f", {stats.expired} deltas to expired buckets skipped"
    console.print(
        f"processed {stats.records} stream records in {stats.invocations} invocations "
        f"({stats.self_writes} self-writes skipped{extras}): {stats.record_deltas} deltas -> "
        f"{stats.write.items_written} aggregate updates, "
        f"{stats.write.modelled_wcu} WCU (modelled), "
        f"{stats.write.dead_letters} dead letters, {stats.elapsed_seconds:.1f} s"
    )
