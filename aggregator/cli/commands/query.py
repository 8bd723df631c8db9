"""``query get|list|top|histogram|window``: read aggregates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from aggregator.cli import clients
from aggregator.cli.options import _definitions_option, _endpoint_option, _table_option
from aggregator.cli.output import _print_aggregates, console, err_console
from aggregator.core.exceptions import AggregatorError


def _store(table_name: str, definitions: Path, endpoint_url: str | None) -> Any:
    from aggregator.core.rules import load_rules
    from aggregator.dynamodb.query import AggregateStore

    return AggregateStore(
        clients.make_client("dynamodb", endpoint_url), table_name, load_rules(definitions)
    )


@click.group()
def query() -> None:
    """Read aggregates."""


@query.command("get")
@click.argument("rule")
@click.argument("values", nargs=-1)
@_table_option
@_definitions_option
@_endpoint_option
def query_get(
    rule: str, values: tuple[str, ...], table_name: str, definitions: Path, endpoint_url: str | None
) -> None:
    """One aggregate: RULE and the key's placeholder values in order (none for a literal key)."""
    store = _store(table_name, definitions, endpoint_url)
    # key text is the same for a string and a number attribute (numbers render in plain form)
    aggregate = store.get(rule, list(values))
    if aggregate is None:
        console.print(f"{rule} {' '.join(values)}: no aggregate (nothing counted yet)")
        raise SystemExit(1)
    console.print(f"{rule} {aggregate.key}: {aggregate.value}")


@query.command("list")
@click.argument("rule")
@_table_option
@_definitions_option
@_endpoint_option
def query_list(rule: str, table_name: str, definitions: Path, endpoint_url: str | None) -> None:
    """Every aggregate of RULE, in key order."""
    store = _store(table_name, definitions, endpoint_url)
    _print_aggregates(rule, list(store.list(rule)))


@query.command("top")
@click.argument("rule")
@click.option("-n", "n", default=10, show_default=True, type=click.IntRange(1, 1000))
@_table_option
@_definitions_option
@_endpoint_option
def query_top(
    rule: str, n: int, table_name: str, definitions: Path, endpoint_url: str | None
) -> None:
    """The N largest aggregates of RULE (leaderboard index when the rule has one)."""
    store = _store(table_name, definitions, endpoint_url)
    _print_aggregates(f"top {n}: {rule}", store.top(rule, n))


@query.command("histogram")
@click.argument("rule")
@_table_option
@_definitions_option
@_endpoint_option
def query_histogram(
    rule: str, table_name: str, definitions: Path, endpoint_url: str | None
) -> None:
    """How many source keys have each value: RULE is a derived rule keyed by "{value}"."""
    store = _store(table_name, definitions, endpoint_url)
    rows = store.histogram(rule)
    table = Table(title=f"{rule} ({store.requests} request(s))", title_justify="left")
    table.add_column("value", justify="right")
    table.add_column("count", justify="right")
    table.add_column("")
    peak = max((r.count for r in rows), default=0)
    for r in rows:
        bar = "#" * (int(40 * r.count / peak) if peak > 0 and r.count > 0 else 0)
        table.add_row(str(r.value), f"{r.count:,}", bar)
    console.print(table)


def _instant(value: str | None) -> int | None:
    """Epoch seconds from ``1357016400`` or an ISO 8601 time with an offset."""
    if value is None:
        return None
    from aggregator.core.exceptions import QueryError
    from aggregator.core.windows import parse_instant

    if value.isdigit() or (value[:1] == "-" and value[1:].isdigit()):
        return int(value)
    try:
        return parse_instant(value)
    except AggregatorError as exc:
        raise QueryError(f"bad time: {exc}") from None


@query.command("window")
@click.argument("rule")
@click.argument("values", nargs=-1)
@click.option("--last", default=None, help="Sliding window length, e.g. 24h, 90m, 1h30m")
@click.option("--start", default=None, help="Range start (ISO 8601 with offset, or epoch s)")
@click.option("--end", default=None, help="Range end, exclusive (default: now with --last)")
@_table_option
@_definitions_option
@_endpoint_option
def query_window(
    rule: str,
    values: tuple[str, ...],
    last: str | None,
    start: str | None,
    end: str | None,
    table_name: str,
    definitions: Path,
    endpoint_url: str | None,
) -> None:
    """Count or sum of a windowed RULE for one key (its placeholder values) over --last D
    (ending now or at --end) or over [--start, --end)."""
    from aggregator.core.exceptions import QueryError
    from aggregator.core.windows import parse_duration

    try:
        seconds = None if last is None else parse_duration(last)
    except ValueError as exc:
        raise QueryError(f"--last: {exc}") from None
    store = _store(table_name, definitions, endpoint_url)
    result = store.window(
        rule, list(values), start=_instant(start), end=_instant(end), last=seconds
    )
    table = Table(title=f"{rule} {result.key}", title_justify="left", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    table.add_row("range", f"[{result.start_text}, {result.end_text})")
    table.add_row("value", f"{result.value:,}")
    runs = ", ".join(f"{p.buckets} {p.granularity.label}" for p in result.parts or [])
    table.add_row("buckets", runs or "none")
    table.add_row(
        "cost",
        f"{result.requests} Query request(s), {result.items_read} item(s) read, "
        f"{result.read_units} RCU (modelled, strongly consistent)",
    )
    console.print(table)
    if not result.complete:
        err_console.print(
            "warning: part of the range is past the rule's retention; expired buckets may "
            "already be deleted, so the value can be too small",
            highlight=False,
            soft_wrap=True,
        )
