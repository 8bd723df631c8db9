"""``backfill``: count the items already in the table for the rules pending a backfill
(:mod:`aggregator.operations.backfill`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from aggregator.cli import clients
from aggregator.cli.options import RuleSources, endpoint_option, seconds_option, table_rules_options
from aggregator.cli.output import console, err_console

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from aggregator.core.rules import RuleSet
    from aggregator.dynamodb.streams import TableStream
    from aggregator.operations.backfill import BackfillStats


BACKFILL_OPTION_NAMES = ("segments", "page_items", "max_rcu", "max_wcu", "stream_lag_seconds")


def backfill_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that shape a backfill (``backfill`` and ``rebuild``), handed to the command
    as one mapping, ``backfill_options``, of :class:`~aggregator.operations.backfill.Backfill`'s
    keyword arguments."""

    @functools.wraps(command)
    def with_options(**kwargs: Any) -> Any:
        options = {name: kwargs.pop(name) for name in BACKFILL_OPTION_NAMES}
        for name in ("segments", "page_items"):
            if options[name] is None:  # each way of running has its default
                del options[name]
        return command(backfill_options=options, **kwargs)

    wrapped: Callable[..., Any] = with_options
    for option in reversed(
        [
            click.option(
                "--segments",
                type=click.IntRange(1, 20_000),
                help="Parallel Scan segments (TotalSegments): 1 to 64, one thread each (default "
                "4); with backfill --on-aws up to 20,000 (default 256).",
            ),
            click.option(
                "--page-items",
                type=click.IntRange(1, 1000),
                help="Items per Scan page (default 200; 1,000 with backfill --on-aws).",
            ),
            click.option(
                "--max-rcu",
                type=click.FloatRange(min=0, min_open=True),
                help="Read at most this many (modelled) RCU per second.",
            ),
            click.option(
                "--max-wcu",
                type=click.FloatRange(min=0, min_open=True),
                help="Write at most this many (modelled) WCU per second.",
            ),
            seconds_option(
                "--stream-lag",
                "stream_lag_seconds",
                default=5.0,
                help="Seconds a write may take to appear in the stream (waited after each page; "
                "on AWS, before the collector's last pass).",
            ),
        ]
    ):
        wrapped = option(wrapped)
    return wrapped


@dataclass(frozen=True, slots=True)
class LiveTable:
    """A table the application writes, its rules and its stream: what a backfill scans (and a
    rebuild's backfill)."""

    rules: RuleSet
    client: DynamoDBClient
    table_name: str
    stream_arn: str
    endpoint_url: str | None

    @classmethod
    def open(cls, table_name: str, definitions: RuleSources, endpoint_url: str | None) -> LiveTable:
        """The rules (loaded first), a client, and the table's stream ARN (``DescribeTable``).

        Raises
        ------
        RuleError, ConfigError
            As :func:`~aggregator.cli.tables.rules_for_table`; ``ConfigError`` too when the
            table has no stream.
        """
        from aggregator.cli.tables import rules_for_table
        from aggregator.dynamodb.table import table_stream_arn

        client, rules = rules_for_table(table_name, definitions, endpoint_url)
        return cls(rules, client, table_name, table_stream_arn(client, table_name), endpoint_url)

    def table_stream(self) -> TableStream:
        """What :class:`~aggregator.operations.backfill.Backfill` and
        :class:`~aggregator.operations.rebuild.Rebuild` take after the rules: the table, its
        stream, its client and a new streams client."""
        from aggregator.dynamodb.streams import TableStream

        streams = clients.make_client("dynamodbstreams", self.endpoint_url)
        return TableStream(self.client, streams, self.table_name, self.stream_arn)


@contextmanager
def backfill_progress(
    client: DynamoDBClient, table_name: str
) -> Iterator[Callable[[int, Any], None]]:
    """A rich progress bar over the table's items (items, rate, ETA); yields the backfill's
    ``on_page`` callback."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from aggregator.dynamodb.client import requests_of

    # DescribeTable's ItemCount is updated about every six hours (DynamoDB API reference,
    # TableDescription): a total for the bar and its ETA, not a promise
    described = requests_of(client).send("describe_table", TableName=table_name)
    total = described["Table"].get("ItemCount") or None
    progress = Progress(
        TextColumn("backfill"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]} items/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    task = progress.add_task("scan", total=total, rate="-", start=False)
    shown = False

    def on_page(items: int, stats: Any) -> None:
        nonlocal shown
        if not shown:  # the bar appears with the first page (a rebuild may not scan at all)
            progress.start()
            progress.start_task(task)
            shown = True
        elapsed = progress.tasks[0].elapsed or 0.0
        rate = f"{stats.items_scanned / elapsed:,.0f}" if elapsed > 0 else "-"
        progress.update(task, advance=items, rate=rate)
        current = progress.tasks[0]
        if current.total is not None and current.completed > current.total:
            # ItemCount was stale (or items were added since): never show more than 100 %
            progress.update(task, total=current.completed)

    try:
        yield on_page
    finally:
        if shown:
            progress.stop()


def print_backfill_summary(stats: BackfillStats, names: str) -> None:
    """The backfill's one-line summary (and a note on evaluation failures)."""
    rate = stats.items_scanned / stats.elapsed_seconds if stats.elapsed_seconds else 0.0
    console.print(
        f"backfill {stats.backfill_id}{' (resumed)' if stats.resumed else ''}: "
        f"{names} active; {stats.items_scanned} items scanned in "
        f"{stats.pages} pages ({rate:,.0f} items/s), {stats.changed_items} items changed "
        f"since the rules' fences ({stats.first_old_used + stats.unscanned_changed} counted at "
        f"their state from the stream), {stats.write.items_written} aggregate "
        f"updates, {stats.modelled_rcu} RCU and "
        f"{stats.write.modelled_wcu} WCU (modelled), {stats.elapsed_seconds:.1f} s",
        highlight=False,
    )
    if stats.top_lists_written or stats.top_lists_unsettled:
        console.print(
            f"top lists: {stats.top_lists_written} written from the aggregates"
            + (
                f"; {stats.top_lists_unsettled} still changing (the handler is merging records "
                "into them)"
                if stats.top_lists_unsettled
                else ""
            ),
            highlight=False,
        )
    if stats.evaluation_failures:
        console.print(
            f"note: {stats.evaluation_failures} (item, rule) pairs could not be evaluated and "
            "count nothing, as in the handler: each counts once the application fixes the item",
            highlight=False,
        )


def start_on_aws(
    table: LiveTable,
    rule_names: list[str] | None,
    backfill_options: dict[str, Any],
    *,
    state_machine: str | None,
    workers: int,
    join_buckets: int,
    reduce_buckets: int,
) -> None:
    """Begin (or resume) a distributed backfill here, where its rules are checked and a refusal
    is one line, then start the stack's state machine on it (module docstring)."""
    import json
    import os
    import uuid

    from botocore.exceptions import BotoCoreError, ClientError

    from aggregator.core.exceptions import ConfigError
    from aggregator.dynamodb.client import requests_of
    from aggregator.dynamodb.errors import AwsError
    from aggregator.operations.backfill.distributed.start import start_backfill

    arn = state_machine or os.environ.get("AGGREGATOR_BACKFILL_STATE_MACHINE")
    if not arn:
        raise ConfigError(
            "name the backfill's state machine: --state-machine <arn> (the stack's "
            "BackfillStateMachineArn output) or AGGREGATOR_BACKFILL_STATE_MACHINE"
        )
    if backfill_options.get("max_wcu") is not None:
        raise ConfigError("--max-wcu applies to a backfill in one process; on AWS give --max-rcu")
    sfn = requests_of(_stepfunctions_client(arn))
    sfn.send("describe_state_machine", stateMachineArn=arn)  # a wrong ARN fails before anything
    # the running executions, read before anything is begun (a caller without the right to
    # list them learns it now, not after the rules were marked)
    running = sfn.send("list_executions", stateMachineArn=arn, statusFilter="RUNNING")
    settings, resumed = start_backfill(
        table.rules,
        table.table_stream(),
        rule_names=rule_names,
        segments=backfill_options.get("segments", 256),
        join_buckets=join_buckets,
        reduce_buckets=reduce_buckets,
        workers=workers,
        max_rcu=backfill_options.get("max_rcu"),
        stream_lag_seconds=backfill_options.get("stream_lag_seconds", 5.0),
        page_items=backfill_options.get("page_items", 1000),
    )
    prefix = f"backfill-{settings.backfill_id}-"
    for execution in running.get("executions", []):
        if execution["name"].startswith(prefix):
            raise ConfigError(
                f"backfill {settings.backfill_id} is running on AWS already (execution "
                f"{execution['executionArn']}): `aggregator status` shows its progress"
            )
    rules = [*settings.rules, *settings.carried]
    execution_input = {
        "backfill_id": settings.backfill_id,
        "rules": rules,
        "segments": settings.segments,
        "join_buckets": settings.join_buckets,
        "reduce_buckets": settings.reduce_buckets,
        "workers": settings.workers,
        "max_rcu": settings.max_rcu,
        "stream_lag_seconds": settings.stream_lag_seconds,
    }
    try:
        started = sfn.send(
            "start_execution",
            stateMachineArn=arn,
            name=f"{prefix}{uuid.uuid4().hex[:8]}",
            input=json.dumps(execution_input),
        )
    except (AwsError, ClientError, BotoCoreError) as exc:
        raise ConfigError(
            f"backfill {settings.backfill_id} is begun (its rules are backfilling) but no "
            f"execution started: {exc}; once that is fixed, run this command again to start it"
        ) from None
    console.print(
        f"backfill {settings.backfill_id}{' (resumed)' if resumed else ''} started on AWS: "
        f"{', '.join(rules)}, {settings.segments} segments, "
        f"{settings.workers} workers; execution {started['executionArn']}; "
        "`aggregator status` shows its progress",
        highlight=False,
    )


def _stepfunctions_client(state_machine_arn: str) -> Any:
    """A Step Functions client in the state machine's Region (its ARN's fourth field), with the
    CLI's timeouts and retries (:func:`aggregator.cli.clients.make_client`'s)."""
    import boto3
    from botocore.config import Config

    parts = state_machine_arn.split(":")
    region = parts[3] if len(parts) > 4 and parts[3] else None
    config = Config(retries={"max_attempts": 10, "mode": "standard"}, connect_timeout=5)
    return boto3.client("stepfunctions", region_name=region, config=config)


@click.command("backfill", short_help="Count the items already in the table for pending rules.")
@table_rules_options("Comma-separated rules to backfill (default: every rule pending a backfill).")
@backfill_options
@click.option(
    "--on-aws",
    is_flag=True,
    help="Run it on the deployed stack's state machine (Step Functions and Lambda) instead of "
    "in this process: for tables one process cannot finish (docs: Backfill on AWS).",
)
@click.option(
    "--state-machine",
    metavar="ARN",
    help="With --on-aws: the stack's BackfillStateMachineArn output (default: "
    "$AGGREGATOR_BACKFILL_STATE_MACHINE).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 10_000),
    help="With --on-aws: segments scanned at once (Lambda invocations; default 64); --max-rcu "
    "is shared by them.",
)
@click.option(
    "--join-buckets",
    type=click.IntRange(1, 10_000),
    help="With --on-aws: tasks that join the changed items with the scan's (default 64).",
)
@click.option(
    "--reduce-buckets",
    type=click.IntRange(1, 10_000),
    help="With --on-aws: tasks that sum and write the aggregates (default 64).",
)
@endpoint_option
def backfill_cmd(
    definitions: RuleSources,
    table_name: str,
    rule_names: list[str] | None,
    backfill_options: dict[str, Any],
    on_aws: bool,
    state_machine: str | None,
    workers: int | None,
    join_buckets: int | None,
    reduce_buckets: int | None,
    endpoint_url: str | None,
) -> None:
    """Count the items already in the table for rules pending a backfill, exactly, while the
    application writes and the handler runs; resumes a killed backfill where it stopped.

    Deploy the rules first (the handler, or `aggregator run`, records them as pending), then
    run this. Progress is kept in the table under the control partition. With --on-aws the
    deployed stack's state machine runs it on Lambda, beyond one process's memory and the
    stream's 24 hours; `aggregator status` then shows its progress.
    """
    from aggregator.core.exceptions import ConfigError
    from aggregator.operations.backfill import Backfill, NothingToBackfill

    aws_only = {
        "--state-machine": state_machine,
        "--workers": workers,
        "--join-buckets": join_buckets,
        "--reduce-buckets": reduce_buckets,
    }
    given = [name for name, value in aws_only.items() if value is not None]
    if given and not on_aws:
        raise ConfigError(f"{', '.join(given)} apply to a backfill on AWS: add --on-aws")
    table = LiveTable.open(table_name, definitions, endpoint_url)
    if on_aws:
        try:
            start_on_aws(
                table,
                rule_names,
                backfill_options,
                state_machine=state_machine,
                workers=workers or 64,
                join_buckets=join_buckets or 64,
                reduce_buckets=reduce_buckets or 64,
            )
        except NothingToBackfill as done:
            console.print(str(done), highlight=False)
        return
    try:
        with backfill_progress(table.client, table_name) as on_page:
            backfill = Backfill(
                table.rules,
                table.table_stream(),
                rule_names=rule_names,
                on_page=on_page,
                **backfill_options,
            )
            stats = backfill.run()
    except NothingToBackfill as done:
        console.print(str(done), highlight=False)
        return
    print_backfill_summary(stats, ", ".join([*backfill.rule_names, *backfill.carried]))
    for _, reason in backfill.skipped:
        err_console.print(f"skipped: {reason}", markup=False, highlight=False)
