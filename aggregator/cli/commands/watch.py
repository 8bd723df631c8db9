"""``watch``: a live terminal view of the aggregates, refreshed while a runner or the deployed
function processes the stream.

Each refresh reads, per rule (all of them, or those named):

- a leaderboard rule: its top ``-n`` (``query top``: one read of its index or top list);
- a windowed ``sum`` rule: its top ``-n`` by their sums over ``--last`` (``query top --last``:
  the buckets' top lists, or every aggregate of a rule without them), and a sparkline of each of
  its first three keys' buckets over the same range (``query window --series``: one ``Query``
  each; the last 24 buckets when the range has more, said under the panel);
- a rule of another kind (mean, min, max, percentiles): its first ``-n`` keys with the kind's
  main field as the value (a mean's mean) and its other fields (``query list``), windowed ones
  over ``--last`` (``query window`` per key; their keys are looked for in the rule's first 2,000
  items, which hold a key's every bucket and value);
- any other ``sum`` rule: its first ``-n`` keys (``query list``, one page).

So a refresh costs a few requests per panel (counted in the footer), more only for a windowed
rule without top lists or a rule with many keys listed. Values that changed since the last
refresh are marked ``▲``/``▼``, new keys ``new``. ``q`` (on a terminal), Ctrl-C or SIGTERM
leaves, restoring the terminal, with a one-line summary.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, TypeVar

import click

from aggregator.cli.options import RuleSources, definitions_option, endpoint_option, table_option
from aggregator.cli.output import column_texts, console, sparkline

if TYPE_CHECKING:
    from rich.console import RenderableType

    from aggregator.core.rules import Rule
    from aggregator.dynamodb.query import AggregateStore
    from aggregator.dynamodb.query.results import Aggregate

__all__ = ["Panel", "Row", "render", "watch_cmd"]

SERIES_KEYS = 3
"""Keys of a windowed rule drawn as a sparkline, each one ``Query``."""

SPARK_BUCKETS = 24
"""Buckets a panel's sparkline draws: the last ones of the range (the column stays narrow
enough for 80 columns)."""

MOST_ITEMS_FOR_KEYS = 2_000
"""Items a windowed panel of another kind than ``sum`` reads at most to find its keys (each
key has an item per bucket, and per value for min, max and percentiles)."""


@dataclass(frozen=True)
class Row:
    """One line of a panel: a key, its main value, the kind's other fields and perhaps a
    sparkline of its buckets."""

    key: str
    value: Decimal
    fields: tuple[tuple[str, Decimal | None], ...] = ()
    spark: str = ""


@dataclass(frozen=True)
class Panel:
    """One rule's panel: what it shows (``title``) and its rows."""

    rule: str
    title: str
    rows: tuple[Row, ...] = ()
    note: str = ""


@dataclass
class Snapshot:
    """One refresh: the panels and what reading them cost."""

    panels: list[Panel] = field(default_factory=list)
    requests: int = 0
    read_units: Decimal = Decimal(0)
    at: float = 0.0


def _marker(rule: str, row: Row, previous: dict[tuple[str, str], Decimal] | None) -> str:
    if previous is None:
        return ""
    before = previous.get((rule, row.key))
    if before is None:
        return "new"
    if row.value > before:
        return "▲"
    if row.value < before:
        return "▼"
    return ""


def render(
    snapshot: Snapshot,
    previous: Snapshot | None,
    *,
    digits: int,
    refreshes: int,
    total_requests: int,
) -> RenderableType:
    """The view of ``snapshot``, marking what changed since ``previous`` (pure)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    before = (
        None
        if previous is None
        else {(p.rule, r.key): r.value for p in previous.panels for r in p.rows}
    )
    tables: list[RenderableType] = []
    for panel in snapshot.panels:
        table = Table(title=panel.title, title_justify="left", expand=False)
        table.add_column("key")
        table.add_column("value", justify="right")
        names = [name for name, _ in panel.rows[0].fields] if panel.rows else []
        for name in names:
            table.add_column(name, justify="right")
        sparks = any(r.spark for r in panel.rows)
        if sparks:
            table.add_column("buckets")
        table.add_column("")
        values = column_texts([r.value for r in panel.rows], digits)
        columns = [  # each field's column, its numbers sharing their places
            column_texts([dict(r.fields).get(name) for r in panel.rows], digits) for name in names
        ]
        for i, (row, text) in enumerate(zip(panel.rows, values, strict=True)):
            mark = _marker(panel.rule, row, before)
            style = "bold" if mark else ""
            cells = [Text(row.key, style=style), Text(text, style=style)]
            cells += [Text(column[i]) for column in columns]
            if sparks:
                cells.append(Text(row.spark))
            cells.append(Text(mark, style="green" if mark in ("▲", "new") else "red"))
            table.add_row(*cells)
        if not panel.rows:
            table.add_row(Text(panel.note or "no aggregates yet", style="dim"), "")
        elif panel.note:
            table.caption, table.caption_justify, table.caption_style = panel.note, "left", "dim"
        tables.append(table)
    footer = Text(
        f"{time.strftime('%H:%M:%S', time.gmtime(snapshot.at))}Z  refresh {refreshes}: "
        f"{snapshot.requests} read requests; {total_requests} in all  (q or Ctrl-C to leave)",
        style="dim",
    )
    return Group(*tables, footer)


def _panel(store: AggregateStore, rule: Rule, n: int, last: int, now: float) -> Panel:
    """Read one rule's panel (module docstring)."""
    name = rule.name
    window = rule.window
    if window is not None and rule.kind.ranks:
        top = store.rolling_top(name, n, last=last, now=now)
        rows = []
        note = ""
        for i, a in enumerate(top.aggregates):
            spark = ""
            if i < SERIES_KEYS:
                series = store.series(name, a.key, granularity=top.granularity, last=last, now=now)
                spark = sparkline(series.headlines()[-SPARK_BUCKETS:])
                if len(series.buckets) > SPARK_BUCKETS:
                    note = f"sparklines: the last {SPARK_BUCKETS} of {len(series.buckets)} buckets"
            rows.append(Row(a.key, a.value, spark=spark))
        title = f"{name}: top {n} over the last {_duration(last)} ({top.granularity} buckets)"
        return Panel(name, title, tuple(rows), note)
    if rule.leaderboard:
        top_now = store.top(name, n)
        return Panel(name, f"{name}: top {n}", tuple(Row(a.key, a.value) for a in top_now))
    headline = rule.kind.headline
    if window is not None:
        # the rule's items are buckets (and a kind's value items) of each key in turn
        keys, note = _first_keys(store.list(name), n)
        rows = []
        for key in keys:
            w = store.window(name, key, last=last, now=now)
            rows.append(_row(key, w.fields, headline, w.value))
        title = f"{name}: the last {_duration(last)}, first {n} keys ({headline})"
        return Panel(name, title, tuple(rows), note)
    rows = [_row(a.key, a.fields, headline, a.value) for a in _first(store.list(name), n)]
    title = f"{name}: first {n} keys" + ("" if rule.kind.ranks else f" ({headline})")
    return Panel(name, title, tuple(rows))


def _row(key: str, fields: Mapping[str, Decimal | None], headline: str, value: Decimal) -> Row:
    """A key's row: the kind's main field (a mean's mean) as its value, then its other fields."""
    main = fields.get(headline)
    others = tuple((k, v) for k, v in fields.items() if k not in ("value", headline))
    return Row(key, value if main is None else main, others)


def _first_keys(aggregates: Iterator[Aggregate], n: int) -> tuple[list[str], str]:
    """The first ``n`` distinct keys of a windowed rule's items, read at most
    :data:`MOST_ITEMS_FOR_KEYS` items far (a note says so when that stopped the search)."""
    keys: dict[str, None] = {}
    for read, a in enumerate(aggregates, start=1):
        keys.setdefault(a.key)
        if len(keys) >= n:
            break
        if read >= MOST_ITEMS_FOR_KEYS:
            return list(keys), f"keys found in the first {read:,} items"
    return list(keys), ""


T = TypeVar("T")


def _first(items: Iterator[T], n: int) -> list[T]:
    """The first ``n`` of ``items``, reading no further."""
    out: list[T] = []
    for item in items:
        out.append(item)
        if len(out) >= n:
            break
    return out


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def collect(store: AggregateStore, rules: list[Rule], n: int, last: int) -> Snapshot:
    """One refresh's panels, and what they cost."""
    requests, units = store.requests, store.read_units
    now = time.time()
    panels = [_panel(store, rule, n, last, now) for rule in rules]
    return Snapshot(panels, store.requests - requests, store.read_units - units, now)


@contextlib.contextmanager
def _keys(stop: threading.Event) -> Iterator[None]:
    """On a terminal: read keys without echo in a thread; ``q`` sets ``stop``. The terminal's
    settings are restored on the way out (Ctrl-C still interrupts: cbreak keeps signals)."""
    if not sys.stdin.isatty():
        yield
        return
    import select
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read() -> None:
        while not stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.1)
            # os.read, not sys.stdin: a q typed with other keys must not wait in a buffer
            if ready and os.read(fd, 1) in (b"q", b"Q"):
                stop.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield
    finally:
        stop.set()
        reader.join(timeout=1)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@click.command("watch", short_help="A live view of the aggregates.")
@click.argument("names", nargs=-1, metavar="[RULE]...")
@table_option
@definitions_option
@endpoint_option
@click.option(
    "-n",
    "n",
    default=10,
    show_default=True,
    type=click.IntRange(1, 100),
    help="Keys a panel shows",
)
@click.option(
    "--last",
    default="1h",
    show_default=True,
    help="The range a windowed rule is shown over (its top by sums, its keys' buckets)",
)
@click.option(
    "--interval",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.2, 3600),
    help="Seconds between refreshes",
)
@click.option(
    "--digits",
    default=2,
    show_default=True,
    type=click.IntRange(0, 38),
    help="Places after the point of numbers that are not whole, rounded half-even",
)
def watch_cmd(
    names: tuple[str, ...],
    table_name: str,
    definitions: RuleSources,
    endpoint_url: str | None,
    n: int,
    last: str,
    interval: float,
    digits: int,
) -> None:
    """A live view of the aggregates of RULE... (default: every rule), refreshed every
    --interval seconds while a runner or the deployed function processes the stream: top lists,
    windowed rules' tops and sparklines over --last, other kinds' fields. Changed values are
    marked; the footer counts the reads. q or Ctrl-C leaves."""
    from rich.live import Live

    from aggregator.cli.tables import rules_for_table
    from aggregator.core.exceptions import QueryError
    from aggregator.core.windows import parse_duration
    from aggregator.dynamodb.query import AggregateStore

    try:
        last_seconds = parse_duration(last)
    except ValueError as exc:
        raise QueryError(f"--last: {exc}") from None
    client, ruleset = rules_for_table(table_name, definitions, endpoint_url)
    unknown = [name for name in names if name not in {r.name for r in ruleset}]
    if unknown:
        raise QueryError(f"no rule {unknown[0]!r} in the definitions")
    chosen = [r for r in ruleset if not names or r.name in names]
    store = AggregateStore(client, table_name, ruleset)
    stop = threading.Event()
    refreshes = 0
    previous: Snapshot | None = None

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # leave as Ctrl-C does: the terminal restored, the summary

    previous_handler = signal.signal(signal.SIGTERM, on_term)
    try:
        with _keys(stop), Live(console=console, auto_refresh=False, transient=False) as live:
            while not stop.is_set():
                snapshot = collect(store, chosen, n, last_seconds)
                refreshes += 1
                live.update(
                    render(
                        snapshot,
                        previous,
                        digits=digits,
                        refreshes=refreshes,
                        total_requests=store.requests,
                    ),
                    refresh=True,
                )
                previous = snapshot
                stop.wait(interval)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    console.print(
        f"watched {len(chosen)} rule(s): {refreshes} refreshes, {store.requests} read requests",
        highlight=False,
    )
